//! What Kiln's bundled plugins share, as a small static library: each plugin
//! links it into its own `cdylib`, so every plugin stays one self-contained
//! `.so` that depends on nothing at run time but what the host loads it with.
//!
//! - [`triton_heuristics`]: Inductor-style launch rules for the Triton plugins
//!   (`cuda`, `xpu`, `gxu`), parameterised by each device's limits.
//! - `test_support` (feature `test-support`): assertions every plugin's unit
//!   tests share.
//!
//! This crate must never name a device or hold a device's number: everything
//! device-specific comes in through its parameters.

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

#[cfg(feature = "test-support")]
pub mod test_support;
