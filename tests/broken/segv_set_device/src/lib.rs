//! Segfaults in `set_device`.
//!
//! Device `segv`: the baseline device of `tests/broken/baseline` with
//! exactly one fault, below.

#[derive(Default)]
struct Segv;

impl baseline::Device for Segv {
    const NAME: &'static str = "segv";

    // Deliberate fault: a write through a pointer into the unmapped first
    // page, the classic plugin bug; the process dies of SIGSEGV.
    fn set_device(&self, idx: u32) -> Option<String> {
        let bad = std::ptr::without_provenance_mut::<u64>(16);
        // SAFETY: none: this is the deliberate fault under test.
        unsafe { std::ptr::write_volatile(bad, u64::from(idx)) };
        None
    }
}

baseline::export_device!(Segv);
