//! Reports its L2 cache in KiB (51200, an H100's 50 MiB) instead of bytes.
//!
//! Device `kibl2`: the baseline device of `tests/broken/baseline` with
//! exactly one fault, below.

#[derive(Default)]
struct KibL2;

impl baseline::Device for KibL2 {
    const NAME: &'static str = "kibl2";

    // Deliberate fault: 50 MiB given as 51200.
    fn l2_cache_bytes(&self, _index: u32) -> Option<u64> {
        Some(51200)
    }
}

baseline::export_device!(KibL2);
