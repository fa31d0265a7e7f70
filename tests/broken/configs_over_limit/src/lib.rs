//! Returns configs needing more threads than `max_threads_per_block`.
//!
//! Device `bigconfigs`: the baseline device of `tests/broken/baseline` with
//! exactly one fault, below.

use kiln_plugin_api::{LaunchConfig, PointwiseQuery};

#[derive(Default)]
struct BigConfigs;

impl baseline::Device for BigConfigs {
    const NAME: &'static str = "bigconfigs";

    // Deliberate fault: 64 warps of 32 threads, over the 1024-thread limit.
    fn pointwise_configs(&self, query: &PointwiseQuery) -> Vec<LaunchConfig> {
        let mut configs = baseline::pointwise_configs(query);
        configs[0].num_warps = 64;
        configs
    }
}

baseline::export_device!(BigConfigs);
