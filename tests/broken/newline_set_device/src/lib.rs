//! Returns a `set_device` string with a newline in it.
//!
//! Device `newline`: the baseline device of `tests/broken/baseline` with
//! exactly one fault, below.

#[derive(Default)]
struct Newline;

impl baseline::Device for Newline {
    const NAME: &'static str = "newline";

    // Deliberate fault: a one-line string that smuggles in a second line.
    fn set_device(&self, idx: u32) -> Option<String> {
        Some(format!("torch.newline.set_device({idx})\nimport os"))
    }
}

baseline::export_device!(Newline);
