//! Unit tests of the `xpu` plugin, on the Rust trait directly.

use kiln_plugin_api::{
    BackendFeatures, DevicePlugin, Grid, LoadContext, PointwiseQuery, PropertiesSource,
    ReductionQuery, SchedulingKind, ScratchWorkspace, Wrappers,
};

use super::*;

use kiln_plugin_kit::checks;

fn plugin() -> Xpu {
    Xpu::load(&LoadContext {
        library_path: "/opt/kiln/plugins/libxpu.so".into(),
        host_version: "0.0.0".into(),
    })
    .expect("the xpu plugin always loads")
}

#[test]
fn manifest_names_the_device() {
    let m = Xpu::manifest();
    assert_eq!(m.name.as_str(), "xpu");
    checks::assert_one_line("vendor", &m.vendor);
    checks::assert_one_line("description", &m.description);
}

#[test]
fn one_line_overrides_are_pytorchs() {
    let p = plugin();
    let cases = [
        (
            p.import_get_raw_stream_as("get_raw_stream"),
            "from torch._C import _xpu_getCurrentRawStream as get_raw_stream",
        ),
        (p.set_device(5), "torch.xpu.set_device(5)"),
        (p.synchronize(), "torch.xpu.synchronize()"),
        (p.device_guard(0), "torch.xpu._DeviceGuard(0)"),
        (p.cpp_device_guard(), "at::DeviceGuard"),
        (p.cpp_aoti_device_guard(), "AOTIXpuGuard"),
        (p.cpp_stream_guard(), "at::xpu::XPUStreamGuard"),
        (p.cpp_aoti_stream_guard(), "AOTIXpuStreamGuard"),
        (
            p.cpp_get_stream_from_external(),
            "at::xpu::getStreamFromExternal",
        ),
        (p.cpp_stream_type(), "sycl::queue*"),
        (p.aoti_get_stream(), "aoti_torch_get_current_xpu_stream"),
        (p.cpp_kernel_type(), "std::unique_ptr<sycl::kernel>"),
        (p.cpp_device_ptr(), "void *"),
        (
            p.kernel_header(),
            "#include <sycl/sycl.hpp>\n#include <sycl/ext/oneapi/backend/level_zero.hpp>\n#include <level_zero/ze_api.h>\n",
        ),
    ];
    for (got, want) in cases {
        assert_eq!(got.as_deref(), Some(want));
    }
    let ws = ScratchWorkspace {
        size: 8,
        dtype: "cached_torch_dtype_uint8".into(),
    };
    assert_eq!(p.cpp_scratch(0, &ws, None), None);
    assert_eq!(p.tma_descriptor_helpers(), None);
    checks::assert_one_line_overrides(&p);
}

#[test]
fn kernel_driver_loads_spirv_and_launches_through_sycl() {
    let driver = plugin().kernel_driver().expect("provided");
    for needle in [
        "static inline std::unique_ptr<sycl::kernel> loadKernel(",
        "uint32_t sharedMemBytes,",
        "ZE_MODULE_FORMAT_IL_SPIRV",
        "zeModuleCreate(",
        "zeKernelCreate(",
        "sycl::make_kernel_bundle<",
        "sycl::make_kernel<sycl::backend::ext_oneapi_level_zero>(",
        "sycl::ext::oneapi::level_zero::ownership::transfer",
        "static inline void launchKernel(",
        "sycl::queue* queue",
        "sycl::nd_range<3>",
        "static_cast<size_t>(numWarps) * subGroupSize",
        "subGroupSize = 32;",
        "cgh.set_arg(",
        "cgh.parallel_for(range, *kernel)",
        "sycl::local_accessor<int8_t, 1>",
        "ext_oneapi_get_default_context()",
        "static inline void* kilnDeviceAlloc(size_t bytes) {",
        "sycl::malloc_device(",
        "static inline void kilnCopyOnDevice(void* dst, const void* src, size_t bytes, sycl::queue* queue) {",
    ] {
        assert!(driver.contains(needle), "missing {needle}");
    }
    assert!(!driver.contains('@'), "unfilled template slot");
    // PyTorch's header defines loadKernel/launchKernel too: it is not included,
    // and the driver needs nothing of PyTorch's.
    let header = plugin().kernel_header().expect("provided");
    assert!(!header.contains("sycl_runtime_wrappers"), "{header}");
    assert!(
        !driver.contains("c10::") && !driver.contains("c10/"),
        "{driver}"
    );
    assert!(!driver.contains("while (0);"));
    checks::assert_balanced("kernel_driver", &driver);
}

#[test]
fn static_max_1550_properties() {
    let p = plugin();
    assert!(!p.is_available());
    assert_eq!(p.device_count(), 0);
    let props = p.device_properties(1).expect("static");
    assert_eq!(props.device_type.as_str(), "xpu");
    assert_eq!(props.index, 1);
    assert_eq!(props.source, PropertiesSource::StaticDefaults);
    assert_eq!(props.warp_size, ROption::RSome(32));
    assert_eq!(props.max_threads_per_block, ROption::RSome(1024));
    assert_eq!(props.multi_processor_count, 64);
    assert_eq!(p.shared_memory_per_block(1), Some(128 * 1024));
    assert_eq!(p.tf32_dot(), Some(false));
    assert_eq!(p.matmul_alignment(), None);
    assert_eq!(p.conv_channels_last(), None);
    let spec = p.backend_spec();
    assert_eq!(spec.scheduling, SchedulingKind::Triton);
    assert_eq!(spec.wrappers, Wrappers::PYTHON | Wrappers::CPP);
    assert!(spec
        .features
        .contains(BackendFeatures::SCAN | BackendFeatures::SORT));
}

#[test]
fn heuristics_fit_sub_groups() {
    let p = plugin();
    let pw = p.pointwise_configs(&PointwiseQuery {
        numel: 1 << 20,
        element_bytes: 4,
    });
    assert_eq!((pw[0].x_block, pw[0].num_warps), (1024, 4));
    let red = p.reduction_configs(&ReductionQuery {
        rows: 8192,
        row_len: 8192,
        element_bytes: 4,
    });
    assert_eq!(
        (red[0].x_block, red[0].r_block, red[0].num_warps),
        (1, 2048, 8)
    );
    checks::assert_heuristics_sweep(&p);
}

#[test]
fn grid_is_capped() {
    let p = plugin();
    assert_eq!(p.adjust_grid(Grid::new(1000, 2, 3)), Grid::new(1000, 2, 3));
    assert_eq!(
        p.adjust_grid(Grid::new(1 << 40, 1 << 20, 1)),
        Grid::new(2_147_483_647, 65_535, 1)
    );
    checks::assert_grid_never_shrinks(&p);
}
