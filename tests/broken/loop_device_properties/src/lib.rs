//! Never returns from `device_properties`.
//!
//! Device `loopy`: the baseline device of `tests/broken/baseline` with
//! exactly one fault, below.

use kiln_plugin_api::DeviceProperties;

#[derive(Default)]
struct Loopy;

impl baseline::Device for Loopy {
    const NAME: &'static str = "loopy";

    // Deliberate fault: an endless loop (sleeping, to spare the CPU).
    fn device_properties(&self, _index: u32) -> Result<DeviceProperties, String> {
        loop {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
}

baseline::export_device!(Loopy);
