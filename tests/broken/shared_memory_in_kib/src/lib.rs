//! Reports its shared memory per block in KiB (48) instead of bytes.
//!
//! Device `kibshared`: the baseline device of `tests/broken/baseline` with
//! exactly one fault, below.

#[derive(Default)]
struct KibShared;

impl baseline::Device for KibShared {
    const NAME: &'static str = "kibshared";

    // Deliberate fault: 48 KiB given as 48.
    fn shared_memory_per_block(&self, _index: u32) -> Option<u64> {
        Some(48)
    }
}

baseline::export_device!(KibShared);
