//! A plugin built against a modified kiln-plugin-api: the same version number,
//! but `LoadContext` has one more field. The host must refuse it before
//! calling anything in it, naming the type whose layout differs.

use kiln_plugin_api::{
    BackendSpec, DevicePlugin, DeviceProperties, LaunchConfig, LoadContext, Manifest,
    PointwiseQuery, ReductionQuery,
};

/// A device called `changed`.
pub struct Changed;

impl DevicePlugin for Changed {
    fn manifest() -> Manifest {
        Manifest::new(
            "changed",
            "0.1.0",
            "Kiln tests",
            "A plugin built against a modified API",
        )
    }

    fn load(_ctx: &LoadContext) -> Result<Self, String> {
        Ok(Changed)
    }

    fn is_available(&self) -> bool {
        false
    }
    fn device_count(&self) -> u32 {
        0
    }
    fn device_properties(&self, _index: u32) -> Result<DeviceProperties, String> {
        Err("never reached: the host refuses this library".to_string())
    }
    fn backend_spec(&self) -> BackendSpec {
        BackendSpec {
            scheduling: kiln_plugin_api::SchedulingKind::Triton,
            wrappers: kiln_plugin_api::Wrappers::PYTHON,
            features: kiln_plugin_api::BackendFeatures::empty(),
        }
    }
    fn pointwise_configs(&self, _query: &PointwiseQuery) -> Vec<LaunchConfig> {
        Vec::new()
    }
    fn reduction_configs(&self, _query: &ReductionQuery) -> Vec<LaunchConfig> {
        Vec::new()
    }
}

kiln_plugin_api::export_plugin!(Changed);
