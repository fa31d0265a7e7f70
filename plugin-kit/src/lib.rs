//! The Kiln plugin kit: what a device plugin is built from besides the ABI
//! crate (`kiln-plugin-api`). Kiln's bundled plugins are built from it, and so
//! is a vendor's (`examples/vendor-plugin` is the template). Everything here
//! is linked statically into the plugin's own `cdylib`, so a plugin stays one
//! self-contained library.
//!
//! - [`triton_heuristics`]: Inductor-style launch configs for Triton devices,
//!   parameterised by the device's limits, and the grid rules `adjust_grid`
//!   is allowed (round up, cap at exactly `max_grid`).
//! - [`driver`]: `kernel_driver` and `cpp_scratch` C++ text for a device
//!   driven through a CUDA-like driver API.
//! - [`TRITON_SCHEDULING_FEATURES`]: Inductor's backend features for Triton.
//! - With feature `testing` (for `[dev-dependencies]`): `checks`, assertions
//!   for a plugin's unit tests, and `conformance` with
//!   [`conformance_test!`], which puts the plugin through `host conformance`
//!   from the plugin's own `cargo test`.
//!
//! This crate must never name a device or hold a device's number: everything
//! device-specific comes in through its parameters.

pub mod driver;
pub mod triton_heuristics;

use kiln_plugin_api::BackendFeatures;

/// Inductor's `TritonScheduling.backend_features`: what the host may do with
/// any Triton device's kernels. A device adds what its hardware supports on
/// top (CUDA's grid-wide sync: `REDUCE_TO_SINGLE_ELEMENT`).
pub const TRITON_SCHEDULING_FEATURES: BackendFeatures = BackendFeatures::FOREACH
    .union(BackendFeatures::BUCKETIZE)
    .union(BackendFeatures::INPLACE_BUFFERS)
    .union(BackendFeatures::MASKED_SCATTER_WITH_INDEX)
    .union(BackendFeatures::SCAN)
    .union(BackendFeatures::SORT)
    .union(BackendFeatures::TRITON_TEMPLATES)
    .union(BackendFeatures::TUPLE_REDUCTION);

#[cfg(any(test, feature = "testing"))]
pub mod checks;
#[cfg(feature = "testing")]
pub mod conformance;
