//! `launchKernel` takes one more parameter (a launch count) than Kiln's C++
//! wrapper passes: the driver text compiles on its own, and the wrapper around
//! it does not, which `driver.signatures` must report.
//!
//! Device `wrongsig`: the baseline device of `tests/broken/baseline` with
//! exactly one fault, below.

#[derive(Default)]
struct WrongSignature;

impl baseline::Device for WrongSignature {
    const NAME: &'static str = "wrongsig";

    // Deliberate fault: launchKernel(..., stream, count).
    fn kernel_driver(&self) -> Option<String> {
        Some(baseline::KERNEL_DRIVER.replace(
            "void *args[], baseStream_t stream) {",
            "void *args[], baseStream_t stream, int count) {\n    (void)count;",
        ))
    }
}

baseline::export_device!(WrongSignature);
