//! Provides no `device_guard`, which the Python wrapper it claims needs.
//!
//! Device `noguard`: the baseline device of `tests/broken/baseline` with
//! exactly one fault, below. It loads and lists, but cannot compile.

#[derive(Default)]
struct NoGuard;

impl baseline::Device for NoGuard {
    const NAME: &'static str = "noguard";

    // Deliberate fault: a Triton device without a Python device guard.
    fn device_guard(&self, _idx: u32) -> Option<String> {
        None
    }

    // The Python wrapper only, so that no wrapper works.
    fn backend_spec(&self) -> kiln_plugin_api::BackendSpec {
        kiln_plugin_api::BackendSpec {
            scheduling: kiln_plugin_api::SchedulingKind::Triton,
            wrappers: kiln_plugin_api::Wrappers::PYTHON,
            features: kiln_plugin_api::BackendFeatures::FOREACH
                | kiln_plugin_api::BackendFeatures::INPLACE_BUFFERS,
        }
    }
}

baseline::export_device!(NoGuard);
