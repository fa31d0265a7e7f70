//! Lists `"half"` among the dtypes whose convolutions run channels-last:
//! PyTorch's alias, not the host's name (`float16`), so the host cannot tell
//! which convolutions the plugin means.
//!
//! Device `halfname`: the baseline device of `tests/broken/baseline` with
//! exactly one fault, below.

#[derive(Default)]
struct HalfName;

impl baseline::Device for HalfName {
    const NAME: &'static str = "halfname";

    // Deliberate fault: "half" where the host spells it "float16".
    fn conv_channels_last(&self) -> Option<Vec<String>> {
        Some(vec!["half".to_string(), "bfloat16".to_string()])
    }
}

baseline::export_device!(HalfName);
