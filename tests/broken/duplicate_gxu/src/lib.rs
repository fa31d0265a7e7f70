//! A valid plugin that claims the device name of the bundled `gxu`: discovery must shadow one of them.
//!
//! Device `gxu`: the baseline device of `tests/broken/baseline` with
//! no change.

#[derive(Default)]
struct DuplicateGxu;

impl baseline::Device for DuplicateGxu {
    const NAME: &'static str = "gxu";
}

baseline::export_device!(DuplicateGxu);
