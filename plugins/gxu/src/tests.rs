//! Unit tests of the `gxu` plugin, on the Rust trait directly.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

use kiln_plugin_api::{
    BackendFeatures, DevicePlugin, Grid, LoadContext, PointwiseQuery, PropertiesSource,
    ReductionQuery, SchedulingKind, ScratchWorkspace, Wrappers,
};

use super::*;

use kiln_plugin_kit::checks;

fn plugin() -> Gxu {
    Gxu::with_config(GxuConfig::default())
}

/// A fresh, empty folder under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> TempDir {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "kiln-gxu-test-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create temp dir");
        TempDir(dir)
    }

    fn load_with(&self, toml: Option<&str>) -> Result<Gxu, String> {
        if let Some(text) = toml {
            std::fs::write(self.0.join("gxu.toml"), text).expect("write gxu.toml");
        }
        Gxu::load(&LoadContext {
            library_path: self
                .0
                .join("libkiln_gxu.so")
                .display()
                .to_string()
                .as_str()
                .into(),
            host_version: "0.0.0".into(),
        })
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn manifest_names_the_device() {
    let m = Gxu::manifest();
    assert_eq!(m.name.as_str(), "gxu");
    checks::assert_one_line("vendor", &m.vendor);
    checks::assert_one_line("description", &m.description);
}

#[test]
fn one_line_overrides_are_the_seeds() {
    let p = plugin();
    let cases = [
        (
            p.import_get_raw_stream_as("get_raw_stream"),
            "from torch._C import _gxu_getCurrentRawStream as get_raw_stream",
        ),
        (p.set_device(0), "torch.gxu.set_device(0)"),
        (p.synchronize(), "torch.gxu.synchronize()"),
        (p.device_guard(2), "torch.gxu._DeviceGuard(2)"),
        (p.cpp_device_guard(), "at::gxu::GXUGuard"),
        (p.cpp_aoti_device_guard(), "AOTIGcuGuard"),
        (p.cpp_stream_guard(), "at::gxu::GXUStreamGuard"),
        (p.cpp_aoti_stream_guard(), "AOTIGcuStreamGuard"),
        (
            p.cpp_get_stream_from_external(),
            "at::gxu::getStreamFromExternal",
        ),
        (p.cpp_stream_type(), "gxuStream_t"),
        (p.aoti_get_stream(), "aoti_torch_get_current_gxu_stream"),
        (p.cpp_kernel_type(), "gxuFunction"),
        (p.cpp_device_ptr(), "gxuDevicePtr"),
    ];
    for (got, want) in cases {
        assert_eq!(got.as_deref(), Some(want));
    }
    assert_eq!(p.tma_descriptor_helpers(), None);
    checks::assert_one_line_overrides(&p);
}

#[test]
fn kernel_header_includes_the_driver_api_and_no_pytorch() {
    let header = plugin().kernel_header().expect("provided");
    assert_eq!(header, "#include <gxu.h>\n");
}

#[test]
fn kernel_driver_is_the_seeds_with_its_bugs_fixed() {
    let driver = plugin().kernel_driver().expect("provided");
    for needle in [
        "#define GXU_DRIVER_CHECK(EXPR)",
        "gxuGetErrorString(code)",
        "static inline gxuFunction loadKernel(",
        "gxuModuleLoad(&mod, filePath.c_str())",
        "gxuModuleGetFunction(&func, mod, funcName.c_str())",
        "GXU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES",
        "static inline void launchKernel(",
        "gxuStream_t stream",
        "gxuLaunchKernel(",
        "const uint32_t GXU_WARP_SIZE = 32;",
        "GXU_WARP_SIZE * numWarps",
        "static inline void* kilnDeviceAlloc(size_t bytes) {",
        "GXU_DRIVER_CHECK(gxuMemcpyHtoD((gxuDevicePtr)(uintptr_t)dst, src, bytes));",
    ] {
        assert!(driver.contains(needle), "missing {needle}");
    }
    assert!(driver.contains("} while (0)\n"));
    assert!(!driver.contains("while (0);"));
    // The seed forgot this semicolon.
    assert!(driver.contains("sharedMemBytes\n        ));"));
    checks::assert_balanced("kernel_driver", &driver);
}

#[test]
fn scratch_is_the_seeds() {
    let p = plugin();
    let ws = ScratchWorkspace {
        size: 64,
        dtype: "cached_torch_dtype_uint8".into(),
    };
    let (lines, var) = p.cpp_scratch(1, &ws, Some("k")).expect("provided");
    assert_eq!(var, "k_scratch_1");
    assert_eq!(
        lines,
        vec![
            "int64_t k_scratch_1_size[] = {64};",
            "int64_t k_scratch_1_stride[] = {1};",
            "AtenTensorHandle k_scratch_1_handle;",
            "AOTI_TORCH_ERROR_CODE_CHECK(aoti_torch_empty_strided(1, k_scratch_1_size, \
             k_scratch_1_stride, cached_torch_dtype_uint8, cached_torch_device_type_gxu, \
             device_idx_, &k_scratch_1_handle));",
            "RAIIAtenTensorHandle k_scratch_1_tensor(k_scratch_1_handle);",
            "gxuDevicePtr k_scratch_1 = reinterpret_cast<gxuDevicePtr>(k_scratch_1_tensor.data_ptr());",
        ]
    );
    let empty = ScratchWorkspace {
        size: 0,
        dtype: "cached_torch_dtype_uint8".into(),
    };
    for prefix in [None, Some("")] {
        let (lines, var) = p.cpp_scratch(0, &empty, prefix).expect("provided");
        assert_eq!(lines, vec!["gxuDevicePtr scratch_0 = 0;"]);
        assert_eq!(var, "scratch_0");
    }
}

#[test]
fn adjust_grid_follows_the_seed() {
    let p = plugin();
    for (wanted, got) in [
        (0, 0),
        (1, 1),
        (47, 47),
        (48, 48),
        (49, 96),
        (50, 96),
        (96, 96),
        (1000, 1008),
        (4800, 4800),
    ] {
        assert_eq!(
            p.adjust_grid(Grid::new(wanted, 1, 1)),
            Grid::new(got, 1, 1),
            "{wanted}"
        );
        assert_eq!(
            p.adjust_grid(Grid::new(1, wanted, wanted)),
            Grid::new(1, got, got)
        );
    }
    // Capped at the largest multiple of 48 within Triton's grid limit.
    let max = p.adjust_grid(Grid::new(u64::MAX, 70_000, 65_535));
    assert_eq!(max, Grid::new(2_147_483_616, 65_520, 65_520));
    assert_eq!(max.x % 48, 0);
    checks::assert_grid_never_shrinks(&p);
}

#[test]
fn every_config_has_one_warp() {
    let p = plugin();
    for numel in [0, 1, 2, 1 << 20, 1 << 31] {
        let configs = p.pointwise_configs(&PointwiseQuery {
            numel,
            element_bytes: 4,
        });
        assert!(configs.iter().all(|c| c.num_warps == 1), "{configs:?}");
    }
    for (rows, row_len) in [(1, 1), (8192, 8192), (1 << 20, 16), (3, 1 << 20)] {
        let configs = p.reduction_configs(&ReductionQuery {
            rows,
            row_len,
            element_bytes: 4,
        });
        assert!(configs.iter().all(|c| c.num_warps == 1), "{configs:?}");
    }
    checks::assert_heuristics_sweep(&p);
}

#[test]
fn static_properties() {
    let p = plugin();
    assert!(!p.is_available());
    assert_eq!(p.device_count(), 0);
    let props = p.device_properties(0).expect("static");
    assert_eq!(props.device_type.as_str(), "gxu");
    assert_eq!(props.source, PropertiesSource::StaticDefaults);
    assert_eq!(props.warp_size, ROption::RSome(32));
    assert_eq!(props.multi_processor_count, 48);
    assert_eq!(p.shared_memory_per_block(0), Some(96 * 1024));
    assert_eq!(p.tf32_dot(), Some(false));
    assert_eq!(p.matmul_alignment(), Some(16));
    assert_eq!(
        p.conv_channels_last(),
        Some(vec!["float16".to_string(), "bfloat16".to_string()])
    );
    let spec = p.backend_spec();
    assert_eq!(spec.scheduling, SchedulingKind::Triton);
    assert_eq!(spec.wrappers, Wrappers::PYTHON | Wrappers::CPP);
    assert!(!spec
        .features
        .contains(BackendFeatures::REDUCE_TO_SINGLE_ELEMENT));
}

#[test]
fn gxu_toml_beside_the_library_tunes_the_plugin() {
    let dir = TempDir::new();
    let p = dir.load_with(None).expect("no file: defaults");
    assert_eq!(p.config(), &GxuConfig::default());

    let dir = TempDir::new();
    let p = dir
        .load_with(Some(
            "# tuned for the next board\nwarp_size = 64\ngrid_multiple = 40\n\
             shared_memory_per_block = 49152\nmatmul_alignment = 0\n\
             conv_channels_last = []\n",
        ))
        .expect("valid file");
    assert_eq!(p.config().warp_size, 64);
    assert_eq!(p.shared_memory_per_block(3), Some(49152));
    assert_eq!(p.matmul_alignment(), Some(0));
    assert_eq!(p.conv_channels_last(), Some(vec![]));
    assert!(p
        .kernel_driver()
        .expect("provided")
        .contains("GXU_WARP_SIZE = 64;"));
    assert_eq!(p.adjust_grid(Grid::new(50, 40, 41)), Grid::new(80, 40, 80));
    let props = p.device_properties(0).expect("static");
    assert_eq!(props.warp_size, ROption::RSome(64));
    assert_eq!(props.max_grid[1] % 40, 0);
    checks::assert_heuristics_sweep(&p);
    checks::assert_grid_never_shrinks(&p);
}

#[test]
fn malformed_gxu_toml_names_file_and_line() {
    let dir = TempDir::new();
    let err = dir
        .load_with(Some("warp_size = 32\ngrid_multiple = [48\n"))
        .expect_err("malformed");
    let path = dir.0.join("gxu.toml").display().to_string();
    assert!(
        err.starts_with(&format!("{path}: line 2, column ")),
        "{err}"
    );

    let dir = TempDir::new();
    let err = dir
        .load_with(Some("warp_size = 32\n\nthreads = 7\n"))
        .expect_err("unknown key");
    assert!(
        err.contains("gxu.toml: line 3, column 1:") && err.contains("threads"),
        "{err}"
    );

    let dir = TempDir::new();
    let err = dir
        .load_with(Some("warp_size = 33\n"))
        .expect_err("not a power of two");
    assert!(
        err.contains("gxu.toml: line 1, column 13:") && err.contains("warp_size"),
        "{err}"
    );
}

#[test]
fn unreadable_gxu_toml_is_an_error() {
    let dir = TempDir::new();
    std::fs::create_dir(dir.0.join("gxu.toml")).expect("a folder named gxu.toml");
    let err = dir.load_with(None).expect_err("a folder is not a file");
    assert!(
        err.contains("gxu.toml") && err.contains("cannot read"),
        "{err}"
    );

    let dir = TempDir::new();
    std::fs::write(dir.0.join("gxu.toml"), b"warp_size = 32 # \xff\n").expect("write");
    let err = dir.load_with(None).expect_err("not UTF-8");
    assert!(err.contains("gxu.toml") && err.contains("UTF-8"), "{err}");
}
