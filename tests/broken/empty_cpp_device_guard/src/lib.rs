//! Returns an empty `cpp_device_guard`.
//!
//! Device `emptyguard`: the baseline device of `tests/broken/baseline` with
//! exactly one fault, below.

#[derive(Default)]
struct EmptyGuard;

impl baseline::Device for EmptyGuard {
    const NAME: &'static str = "emptyguard";

    // Deliberate fault: "supported", but empty.
    fn cpp_device_guard(&self) -> Option<String> {
        Some(String::new())
    }
}

baseline::export_device!(EmptyGuard);
