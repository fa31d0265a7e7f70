//! Reports a matmul alignment of 3 bytes: not a power of two, so no whole
//! number of 16-bit elements, and no multiple the host can pad to.
//!
//! Device `oddalign`: the baseline device of `tests/broken/baseline` with
//! exactly one fault, below.

#[derive(Default)]
struct OddAlign;

impl baseline::Device for OddAlign {
    const NAME: &'static str = "oddalign";

    // Deliberate fault: 3 bytes, one and a half bfloat16 elements.
    fn matmul_alignment(&self) -> Option<u32> {
        Some(3)
    }
}

baseline::export_device!(OddAlign);
