//! Claims to be built against kiln-plugin-api 2.x.
//!
//! Device `wrongmajor`: the baseline device of `tests/broken/baseline` with
//! exactly one fault, below.

use kiln_plugin_api::Manifest;

#[derive(Default)]
struct WrongMajor;

impl baseline::Device for WrongMajor {
    const NAME: &'static str = "wrongmajor";

    // Deliberate fault: a manifest stamped with an API major this host does not speak.
    fn manifest() -> Manifest {
        let mut manifest = baseline::manifest(Self::NAME);
        manifest.api_version.major = 2;
        manifest
    }
}

baseline::export_device!(WrongMajor);
