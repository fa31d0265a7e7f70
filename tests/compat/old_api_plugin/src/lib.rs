//! A plugin whose root module stops after `overrides`, as one built against an
//! older, shorter `plugin-api` would. The host must load it and read its
//! device module, backend spec and heuristics as "not provided".

use kiln_plugin_api::{
    BackendSpec, DevicePlugin, DeviceProperties, LaunchConfig, LoadContext, Manifest,
    PointwiseQuery, ReductionQuery,
};

/// The old plugin: a device called `oldapi` with the Python-wrapper overrides only.
pub struct OldApi;

impl DevicePlugin for OldApi {
    fn manifest() -> Manifest {
        Manifest::new(
            "oldapi",
            "0.1.0",
            "Kiln tests",
            "A plugin built against a shorter root module",
        )
    }

    fn load(_ctx: &LoadContext) -> Result<Self, String> {
        Ok(OldApi)
    }

    fn set_device(&self, idx: u32) -> Option<String> {
        Some(format!("torch.oldapi.set_device({idx})"))
    }

    fn synchronize(&self) -> Option<String> {
        Some("torch.oldapi.synchronize()".to_string())
    }

    // The trait still asks for these, but the shorter root module has no
    // field through which the host could reach them.
    fn is_available(&self) -> bool {
        false
    }
    fn device_count(&self) -> u32 {
        0
    }
    fn device_properties(&self, _index: u32) -> Result<DeviceProperties, String> {
        Err("unreachable through the shorter root module".to_string())
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

kiln_plugin_api::export_plugin!(OldApi);
