//! Kiln's `cpu` device plugin: the host CPU, through C++/OpenMP kernels
//! (Inductor's `CppScheduling`).
//!
//! - **Overrides**: what PyTorch 2.11's `CpuDeviceOpOverrides` provides, in
//!   Kiln's one-line form: `import_get_raw_stream_as` (binds a function
//!   returning stream 0), `synchronize` (`pass`) and `cpp_kernel_type`
//!   (`void*`); plus a `kernel_header` with the includes the generated
//!   kernels use and this host's matrix-product tiles (`KILN_MM_*`). Everything else is `None`: a CPU has no streams, no stream
//!   or device guards, no kernel driver and no scratch or TMA helpers.
//!   `set_device` and `device_guard` are `None` too: PyTorch returns `pass`,
//!   which ignores the index, and a CPU host never needs to switch devices.
//! - **Device module**: one device, always available; properties from the
//!   OS and the instruction set ([`properties`]). `shared_memory_per_block`
//!   and `tf32_dot` (API 1.5) are left at the trait's `None`: they describe a
//!   Triton target's programs, and no C++ kernel asks. So is
//!   `matmul_alignment` (API 1.6), a GPU library's preferred multiple for
//!   16-bit products: the C++ matrix product packs its operands into panels
//!   of its own tile sizes (`KILN_MM_*`), and nothing is padded for it. And
//!   `conv_channels_last` (API 1.7): the C++ convolution takes contiguous
//!   `NCHW` operands, and the host asks only Triton devices.
//! - **Heuristics**: parallel chunks, vector widths and matrix-product tiles
//!   from the SIMD width and the L1/L2 sizes ([`heuristics`]).

use kiln_plugin_api::{
    BackendFeatures, BackendSpec, DevicePlugin, DeviceProperties, FixedOverrides, Grid,
    LaunchConfig, LoadContext, Manifest, PointwiseQuery, ReductionQuery, SchedulingKind, Wrappers,
};

pub mod heuristics;
pub mod overrides;
pub mod properties;

use heuristics::CpuLimits;

/// The `cpu` plugin. The target CPU (this host, or what `KILN_CPU_*` says,
/// see [`properties::TARGET_VARS`]) is measured once, at load.
#[derive(Debug)]
pub struct Cpu {
    limits: CpuLimits,
    overrides: FixedOverrides,
}

impl DevicePlugin for Cpu {
    fn manifest() -> Manifest {
        Manifest::new(
            "cpu",
            env!("CARGO_PKG_VERSION"),
            "The Kiln project",
            "The host CPU: C++ kernels vectorised for its SIMD width and parallelised with OpenMP",
        )
    }

    fn load(_ctx: &LoadContext) -> Result<Self, String> {
        let limits = properties::target_limits(|name| std::env::var(name).ok())?;
        let narrower = (cfg!(target_arch = "x86_64") && limits.simd_bytes > 32).then(|| {
            heuristics::matmul_tiles(&heuristics::CpuLimits {
                simd_bytes: 32,
                ..limits
            })
        });
        let overrides = overrides::fixed(&heuristics::matmul_tiles(&limits), narrower.as_ref());
        Ok(Cpu { limits, overrides })
    }

    fn import_get_raw_stream_as(&self, name: &str) -> Option<String> {
        Some(overrides::import_get_raw_stream_as(name))
    }
    fn overrides(&self) -> &FixedOverrides {
        &self.overrides
    }

    fn is_available(&self) -> bool {
        true
    }
    fn device_count(&self) -> u32 {
        1
    }
    fn device_properties(&self, index: u32) -> Result<DeviceProperties, String> {
        properties::host(index, &self.limits)
    }

    fn backend_spec(&self) -> BackendSpec {
        BackendSpec {
            scheduling: SchedulingKind::Cpp,
            // Inductor registers the CPU with both `PythonWrapperCodegen` and
            // `CppWrapperCpu`.
            wrappers: Wrappers::PYTHON | Wrappers::CPP,
            // `CppScheduling.backend_features`.
            features: BackendFeatures::INPLACE_BUFFERS | BackendFeatures::REDUCE_TO_SINGLE_ELEMENT,
        }
    }

    fn pointwise_configs(&self, query: &PointwiseQuery) -> Vec<LaunchConfig> {
        heuristics::pointwise_configs(&self.limits, query)
    }

    fn reduction_configs(&self, query: &ReductionQuery) -> Vec<LaunchConfig> {
        heuristics::reduction_configs(&self.limits, query)
    }

    fn adjust_grid(&self, grid: Grid) -> Grid {
        // C++ loops take any extent within `int64_t`.
        Grid::from_array(grid.to_array().map(|d| d.min(properties::MAX_GRID_DIM)))
    }
}

kiln_plugin_api::export_plugin!(Cpu);

#[cfg(test)]
mod tests;
