//! A valid plugin: the baseline itself, which passes every check.
//!
//! Device `baseline`: the baseline device of `tests/broken/baseline` with
//! no change.

#[derive(Default)]
struct GoodBaseline;

impl baseline::Device for GoodBaseline {
    const NAME: &'static str = "baseline";
}

baseline::export_device!(GoodBaseline);
