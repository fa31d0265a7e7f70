//! Reports a `warp_size` of 0.
//!
//! Device `zerowarp`: the baseline device of `tests/broken/baseline` with
//! exactly one fault, below.

use kiln_plugin_api::abi_stable::std_types::ROption::RSome;
use kiln_plugin_api::DeviceProperties;

#[derive(Default)]
struct ZeroWarp;

impl baseline::Device for ZeroWarp {
    const NAME: &'static str = "zerowarp";

    // Deliberate fault: a warp of zero threads.
    fn device_properties(&self, index: u32) -> Result<DeviceProperties, String> {
        let mut props = baseline::properties(Self::NAME, index);
        props.warp_size = RSome(0);
        Ok(props)
    }
}

baseline::export_device!(ZeroWarp);
