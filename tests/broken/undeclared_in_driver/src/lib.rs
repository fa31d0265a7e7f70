//! `kernel_driver` calls a function its driver API header does not declare
//! (`baseMemPrefetch`): the text does not compile, which `driver.compiles`
//! must report with the compiler's own words.
//!
//! Device `undeclared`: the baseline device of `tests/broken/baseline` with
//! exactly one fault, below.

#[derive(Default)]
struct Undeclared;

impl baseline::Device for Undeclared {
    const NAME: &'static str = "undeclared";

    // Deliberate fault: a call to an undeclared function.
    fn kernel_driver(&self) -> Option<String> {
        Some(baseline::KERNEL_DRIVER.replace(
            "    BASE_CHECK(baseStreamSynchronize(stream));",
            "    BASE_CHECK(baseMemPrefetch(stream));\n    BASE_CHECK(baseStreamSynchronize(stream));",
        ))
    }
}

baseline::export_device!(Undeclared);
