//! A Triton device built against plugin API 1.4: its device module and
//! heuristics tables stop before `shared_memory_per_block` and `tf32_dot`
//! (API 1.5), `matmul_alignment` (API 1.6), `conv_channels_last` (API 1.7)
//! and `l2_cache_bytes` (API 1.8). The host must load it, compile for it, and
//! use its stated defaults for all five.

use kiln_plugin_api::abi_stable::std_types::ROption::{RNone, RSome};
use kiln_plugin_api::{
    BackendFeatures, BackendSpec, DevicePlugin, DeviceProperties, LaunchConfig, LoadContext,
    Manifest, PointwiseQuery, PropertiesSource, ReductionQuery, SchedulingKind, TritonTarget,
    Wrappers,
};

/// The device `apifour`.
pub struct ApiFour;

impl DevicePlugin for ApiFour {
    fn manifest() -> Manifest {
        Manifest::new(
            "apifour",
            "0.1.0",
            "Kiln tests",
            "A Triton device built against plugin API 1.4",
        )
    }

    fn load(_ctx: &LoadContext) -> Result<Self, String> {
        Ok(ApiFour)
    }

    fn import_get_raw_stream_as(&self, name: &str) -> Option<String> {
        Some(format!(
            "from torch._C import _cuda_getCurrentRawStream as {name}"
        ))
    }
    fn set_device(&self, idx: u32) -> Option<String> {
        Some(format!("torch.cuda.set_device({idx})"))
    }
    fn synchronize(&self) -> Option<String> {
        Some("torch.cuda.synchronize()".to_string())
    }
    fn device_guard(&self, idx: u32) -> Option<String> {
        Some(format!("torch.cuda._DeviceGuard({idx})"))
    }

    fn is_available(&self) -> bool {
        false
    }
    fn device_count(&self) -> u32 {
        0
    }
    fn device_properties(&self, index: u32) -> Result<DeviceProperties, String> {
        Ok(DeviceProperties {
            device_type: "apifour".into(),
            index,
            multi_processor_count: 16,
            cc: 0,
            major: RNone,
            regs_per_multiprocessor: RNone,
            max_threads_per_multi_processor: RSome(1024),
            max_threads_per_block: RSome(1024),
            warp_size: RSome(32),
            max_grid: [2_147_483_647, 65_535, 65_535],
            source: PropertiesSource::StaticDefaults,
        })
    }
    fn backend_spec(&self) -> BackendSpec {
        BackendSpec {
            scheduling: SchedulingKind::Triton,
            wrappers: Wrappers::PYTHON,
            features: BackendFeatures::empty(),
        }
    }
    fn pointwise_configs(&self, _query: &PointwiseQuery) -> Vec<LaunchConfig> {
        vec![LaunchConfig {
            x_block: 1024,
            r_block: 1,
            num_warps: 4,
            num_stages: 1,
        }]
    }
    fn reduction_configs(&self, _query: &ReductionQuery) -> Vec<LaunchConfig> {
        vec![LaunchConfig {
            x_block: 1,
            r_block: 1024,
            num_warps: 4,
            num_stages: 1,
        }]
    }
    fn triton_target(&self) -> Option<TritonTarget> {
        Some(TritonTarget::new("cuda", "90", 32))
    }
    // A 1.7 plugin would say these; the 1.4 tables have no field to carry them.
    fn shared_memory_per_block(&self, _index: u32) -> Option<u64> {
        Some(48 * 1024)
    }
    fn tf32_dot(&self) -> Option<bool> {
        Some(true)
    }
    fn matmul_alignment(&self) -> Option<u32> {
        Some(16)
    }
    fn conv_channels_last(&self) -> Option<Vec<String>> {
        Some(vec!["float16".to_string(), "bfloat16".to_string()])
    }
}

kiln_plugin_api::export_plugin!(ApiFour);
