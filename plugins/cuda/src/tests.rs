//! Unit tests of the `cuda` plugin, on the Rust trait directly.

use kiln_plugin_api::{
    BackendFeatures, DevicePlugin, Grid, LoadContext, PointwiseQuery, PropertiesSource,
    ReductionHint, ReductionQuery, SchedulingKind, ScratchWorkspace, Wrappers,
};

use super::*;

use kiln_plugin_kit::checks;

fn plugin() -> Cuda {
    Cuda::load(&LoadContext {
        library_path: "/nonexistent/libcuda_plugin.so".into(),
        host_version: "0.0.0".into(),
    })
    .expect("the cuda plugin always loads")
}

#[test]
fn manifest_names_the_device() {
    let m = Cuda::manifest();
    assert_eq!(m.name.as_str(), "cuda");
    assert_eq!(m.version.as_str(), env!("CARGO_PKG_VERSION"));
    checks::assert_one_line("vendor", &m.vendor);
    checks::assert_one_line("description", &m.description);
}

#[test]
fn one_line_overrides_are_pytorchs() {
    let p = plugin();
    let cases = [
        (
            p.import_get_raw_stream_as("get_raw_stream"),
            "from torch._C import _cuda_getCurrentRawStream as get_raw_stream",
        ),
        (p.set_device(3), "torch.cuda.set_device(3)"),
        (p.synchronize(), "torch.cuda.synchronize()"),
        (p.device_guard(1), "torch.cuda._DeviceGuard(1)"),
        (p.cpp_device_guard(), "at::cuda::CUDAGuard"),
        (p.cpp_aoti_device_guard(), "AOTICudaGuard"),
        (p.cpp_stream_guard(), "at::cuda::CUDAStreamGuard"),
        (p.cpp_aoti_stream_guard(), "AOTICudaStreamGuard"),
        (
            p.cpp_get_stream_from_external(),
            "at::cuda::getStreamFromExternal",
        ),
        (p.cpp_stream_type(), "cudaStream_t"),
        (p.aoti_get_stream(), "aoti_torch_get_current_cuda_stream"),
        (p.cpp_kernel_type(), "CUfunction"),
        (p.cpp_device_ptr(), "CUdeviceptr"),
    ];
    for (got, want) in cases {
        assert_eq!(got.as_deref(), Some(want));
    }
    checks::assert_one_line_overrides(&p);
}

#[test]
fn kernel_header_includes_cuda_headers_and_no_pytorch() {
    let header = plugin().kernel_header().expect("provided");
    for include in [
        "#include <cuda.h>",
        "#include <cuda_runtime_api.h>",
        "#include <cublas_v2.h>",
    ] {
        assert!(header.contains(include), "{include}");
    }
    assert!(
        !header.contains("c10/") && !header.contains("ATen/"),
        "{header}"
    );
}

#[test]
fn kernel_driver_moves_memory_and_multiplies_through_cublas() {
    let driver = plugin().kernel_driver().expect("provided");
    for needle in [
        "static inline void* kilnDeviceAlloc(size_t bytes) {",
        "CUDA_DRIVER_CHECK(cuMemAlloc(&ptr, bytes > 0 ? bytes : 1));",
        "CUDA_DRIVER_CHECK(cuMemcpyDtoDAsync(",
        "static inline void kilnSynchronize(cudaStream_t stream) {",
        "static inline void kilnGemm(",
        "cublasGemmStridedBatchedEx(",
        "CUBLAS_COMPUTE_32F",
        // Row-major C = A·B is column-major Cᵀ = Bᵀ·Aᵀ: B goes first.
        "transB ? CUBLAS_OP_T : CUBLAS_OP_N,\n        transA ? CUBLAS_OP_T : CUBLAS_OP_N,",
    ] {
        assert!(driver.contains(needle), "missing {needle}");
    }
    checks::assert_balanced("kernel_driver", &driver);
}

#[test]
fn kernel_driver_uses_the_driver_api() {
    let driver = plugin().kernel_driver().expect("provided");
    for needle in [
        "#define CUDA_DRIVER_CHECK(EXPR)",
        "cuGetErrorString",
        "static inline CUfunction loadKernel(",
        "const std::optional<std::string> &cubinDir = std::nullopt",
        "cuModuleLoad(&mod, filePath.c_str())",
        "cuModuleGetFunction(&func, mod, funcName.c_str())",
        "CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES",
        "static inline void launchKernel(",
        "cudaStream_t stream",
        "cuLaunchKernel(",
        "32 * numWarps",
        "static inline void launchKernelDependent(",
        "CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION",
        "cuLaunchKernelEx(&config, func, args, nullptr)",
    ] {
        assert!(driver.contains(needle), "missing {needle}");
    }
    assert!(!driver.contains('@'), "unfilled template slot");
    // The macro must not swallow the caller's semicolon.
    assert!(driver.contains("} while (0)\n"));
    assert!(!driver.contains("while (0);"));
    checks::assert_balanced("kernel_driver", &driver);
}

#[test]
fn tma_helpers_encode_tiled_maps() {
    let tma = plugin().tma_descriptor_helpers().expect("provided");
    for needle in [
        "init1DTMADescriptor",
        "init2DTMADescriptor",
        "cuTensorMapEncodeTiled",
        "CUtensorMap* m",
    ] {
        assert!(tma.contains(needle), "missing {needle}");
    }
    checks::assert_balanced("tma_descriptor_helpers", &tma);
    checks::assert_balanced(
        "kernel_header",
        &plugin().kernel_header().unwrap_or_default(),
    );
}

#[test]
fn scratch_allocates_or_is_null() {
    let p = plugin();
    let ws = ScratchWorkspace {
        size: 256,
        dtype: "cached_torch_dtype_uint8".into(),
    };
    let (lines, var) = p.cpp_scratch(2, &ws, Some("kernel0")).expect("provided");
    assert_eq!(var, "kernel0_scratch_2");
    assert_eq!(
        lines[0],
        "int64_t kernel0_scratch_2_size[] = {static_cast<int64_t>(256) * grid_0 * grid_1 * grid_2};"
    );
    assert!(lines[3].contains("cached_torch_device_type_cuda"));
    assert!(lines[3].contains("cached_torch_dtype_uint8"));
    assert_eq!(
        lines[5],
        "CUdeviceptr kernel0_scratch_2 = reinterpret_cast<CUdeviceptr>(kernel0_scratch_2_tensor.data_ptr());"
    );
    for line in &lines {
        checks::assert_balanced("cpp_scratch", line);
    }
    let empty = ScratchWorkspace {
        size: 0,
        dtype: "cached_torch_dtype_uint8".into(),
    };
    let (lines, var) = p.cpp_scratch(0, &empty, None).expect("provided");
    assert_eq!(
        (lines, var.as_str()),
        (vec!["CUdeviceptr scratch_0 = 0;".to_string()], "scratch_0")
    );
}

#[test]
fn without_a_gpu_properties_are_h100_defaults() {
    let p = plugin();
    // This is also right on a machine with a GPU: then they are queried.
    let props = p.device_properties(0).expect("device 0");
    assert_eq!(props.device_type.as_str(), "cuda");
    if p.device_count() == 0 {
        assert!(!p.is_available());
        assert_eq!(props, properties::h100_defaults(0));
        assert_eq!(props.source, PropertiesSource::StaticDefaults);
        assert_eq!(props.multi_processor_count, 132);
        assert_eq!(props.cc, 90);
        assert_eq!(props.max_grid, [2_147_483_647, 65_535, 65_535]);
        assert_eq!(p.shared_memory_per_block(0), Some(227 * 1024));
        assert_eq!(p.l2_cache_bytes(0), Some(50 << 20));
        assert_eq!(p.tf32_dot(), Some(true));
        assert_eq!(p.matmul_alignment(), Some(16));
        assert_eq!(
            p.conv_channels_last(),
            Some(vec!["float16".to_string(), "bfloat16".to_string()])
        );
    } else {
        // A live GPU: every device is queried through the driver.
        eprintln!("queried from the CUDA driver: {props:?}");
        assert!(p.is_available());
        assert_eq!(props.source, PropertiesSource::Queried);
        assert!(props.cc >= 30 && props.warp_size.into_option() == Some(32));
        assert!(p.device_properties(p.device_count()).is_err());
        let shared = p.shared_memory_per_block(0).expect("queried");
        assert!(shared >= 48 * 1024, "{shared}");
        assert!(p.l2_cache_bytes(0).is_some_and(|l2| l2 > 0));
        assert_eq!(p.tf32_dot(), Some(props.cc >= 80));
        assert_eq!(p.matmul_alignment(), Some(16));
        assert_eq!(
            p.conv_channels_last(),
            Some(vec!["float16".to_string(), "bfloat16".to_string()])
        );
    }
}

#[test]
fn backend_is_triton_with_both_wrappers() {
    let spec = plugin().backend_spec();
    assert_eq!(spec.scheduling, SchedulingKind::Triton);
    assert_eq!(spec.wrappers, Wrappers::PYTHON | Wrappers::CPP);
    assert!(spec.features.contains(
        BackendFeatures::FOREACH
            | BackendFeatures::SCAN
            | BackendFeatures::SORT
            | BackendFeatures::TUPLE_REDUCTION
            | BackendFeatures::TRITON_TEMPLATES
    ));
    assert!(!spec
        .features
        .contains(BackendFeatures::PREFER_STORE_LOOP_ORDER));
}

#[test]
fn heuristics_follow_inductor() {
    let p = plugin();
    let pw = p.pointwise_configs(&PointwiseQuery {
        numel: 1 << 20,
        element_bytes: 4,
    });
    assert_eq!(
        (pw[0].x_block, pw[0].num_warps, pw[0].r_block),
        (1024, 4, 1)
    );
    let red = p.reduction_configs(&ReductionQuery {
        rows: 8192,
        row_len: 8192,
        element_bytes: 4,
    });
    // An 8192-wide float32 row is reduced in one pass, held in registers.
    assert_eq!(
        (red[0].x_block, red[0].r_block, red[0].num_warps),
        (1, 8192, 8)
    );
    // A longer row loops, with the persistent kernel offered to the autotuner.
    let long = p.reduction_configs(&ReductionQuery {
        rows: 1024,
        row_len: 16384,
        element_bytes: 4,
    });
    assert_eq!((long[0].x_block, long[0].r_block), (1, 2048));
    assert!(long.iter().any(|c| c.r_block == 16384));
    checks::assert_heuristics_sweep(&p);
}

#[test]
fn one_row_products_take_four_rows_per_program_from_sm_90() {
    let of_cc = |cc: u32| {
        let mut device = properties::Device::h100_defaults(0);
        device.properties.cc = cc;
        Cuda {
            inventory: OnceLock::from(properties::Inventory::of(vec![device])),
            ..Cuda::default()
        }
    };
    let product = ReductionQuery {
        rows: 2304,
        row_len: 768,
        element_bytes: 2,
    };
    let first = |p: &Cuda| {
        let c = p
            .reduction_pass_configs(&product, ReductionHint::Inner, 1)
            .expect("the cuda plugin tells passes apart")[0];
        (c.x_block, c.r_block, c.num_warps)
    };
    // sm_90 launches kernels as programmatic dependents: four rows per program.
    assert_eq!(first(&of_cc(DEPENDENT_LAUNCH_CC)), (4, 1024, 4));
    assert_eq!(first(&of_cc(100)), (4, 1024, 4));
    // An A100 (sm_80) keeps one row per program.
    assert_eq!(first(&of_cc(80)), (1, 1024, 4));
}

#[test]
fn grid_is_capped_at_the_device_limit() {
    let p = plugin();
    assert_eq!(p.adjust_grid(Grid::new(50, 1, 1)), Grid::new(50, 1, 1));
    assert_eq!(
        p.adjust_grid(Grid::new(u64::MAX, 70_000, 65_535)),
        Grid::new(2_147_483_647, 65_535, 65_535)
    );
    checks::assert_grid_never_shrinks(&p);
}

#[test]
fn build_flags_name_the_toolkit_its_driver_stub_cublas_and_the_driver() {
    let home = std::env::temp_dir().join(format!("kiln-cuda-toolkit-{}", std::process::id()));
    std::fs::create_dir_all(home.join("include")).unwrap();
    std::fs::create_dir_all(home.join("lib64/stubs")).unwrap();
    std::fs::write(home.join("include/cuda.h"), "").unwrap();
    std::fs::write(home.join("lib64/stubs/libcuda.so"), "").unwrap();
    let lib = home.join("lib64").display().to_string();
    assert_eq!(
        crate::toolkit::build_flags(Some(&home)),
        [
            format!("-I{}", home.join("include").display()),
            format!("-L{lib}"),
            format!("-Wl,-rpath,{lib}"),
            format!("-L{lib}/stubs"),
            "-lcublas".to_string(),
            "-lcuda".to_string(),
        ]
    );
    std::fs::remove_dir_all(&home).unwrap();
    // No toolkit found: the libraries only, from the compiler's default paths.
    assert_eq!(crate::toolkit::build_flags(None), ["-lcublas", "-lcuda"]);
}

#[test]
fn kernel_driver_has_the_graph_functions_and_a_blas_workspace() {
    let text = crate::overrides::kernel_driver(32);
    for part in [
        "static inline void kilnGraphBegin(cudaStream_t stream) {",
        "cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)",
        "static inline void* kilnGraphEnd(cudaStream_t stream) {",
        "cuGraphInstantiateWithFlags(&exec, graph, 0)",
        "static inline void kilnGraphAbort(cudaStream_t stream) {",
        "static inline void kilnGraphLaunch(void* exec, cudaStream_t stream) {",
        "static inline void kilnGraphDestroy(void* exec) {",
        "cublasSetWorkspace(handle, kilnDeviceAlloc(bytes), bytes)",
        "static inline void kilnSetDevice(int index) {",
        "CUDA_DRIVER_CHECK(cuDevicePrimaryCtxRetain(&context, device));",
    ] {
        assert!(text.contains(part), "missing {part:?}");
    }
    checks::assert_balanced("kernel_driver", &text);
}
