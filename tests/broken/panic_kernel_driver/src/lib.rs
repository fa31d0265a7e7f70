//! Panics in `kernel_driver`; the export shim turns the panic into an error.
//!
//! Device `panicky`: the baseline device of `tests/broken/baseline` with
//! exactly one fault, below.

#[derive(Default)]
struct Panicky;

impl baseline::Device for Panicky {
    const NAME: &'static str = "panicky";

    // Deliberate fault: a panic, which must reach the host as an error.
    fn kernel_driver(&self) -> Option<String> {
        panic!("deliberate panic in kernel_driver (kiln tests/broken)")
    }
}

baseline::export_device!(Panicky);
