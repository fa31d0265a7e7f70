//! The deliberately broken plugins of `tests/broken/`, built on demand.
//!
//! They live in a Cargo workspace of their own with its own target folder
//! (`tests/broken/target`), so building them from a test never waits on the
//! lock of the outer `cargo test`. The build runs once per test process.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use crate::{dll_name, repo_root};

/// Every cdylib of the broken workspace, by crate name.
pub const FIXTURES: [&str; 12] = [
    "good_baseline",
    "segv_set_device",
    "panic_kernel_driver",
    "loop_device_properties",
    "empty_cpp_device_guard",
    "newline_set_device",
    "zero_warp_size",
    "configs_over_limit",
    "shrinking_adjust_grid",
    "wrong_api_major",
    "duplicate_gxu",
    "not_a_plugin",
];

/// The broken workspace's own target folder.
pub fn broken_target_dir() -> PathBuf {
    repo_root().join("tests/broken/target")
}

/// Builds the broken workspace (once per process) and returns the path of the
/// fixture `name`'s shared library, e.g. `libsegv_set_device.so`.
///
/// Panics with cargo's output when the build fails: a test cannot go on
/// without its fixture.
pub fn fixture(name: &str) -> PathBuf {
    static BUILT: OnceLock<Result<(), String>> = OnceLock::new();
    let built = BUILT.get_or_init(build);
    if let Err(message) = built {
        panic!("building the broken test plugins failed:\n{message}");
    }
    let path = broken_target_dir().join("debug").join(dll_name(name));
    assert!(
        path.is_file(),
        "the broken workspace built, but {} is missing: is `{name}` a member of tests/broken/Cargo.toml?",
        path.display()
    );
    path
}

fn build() -> Result<(), String> {
    let root = repo_root();
    let output = Command::new(env!("CARGO"))
        .arg("build")
        .arg("--manifest-path")
        .arg(root.join("tests/broken/Cargo.toml"))
        .arg("--target-dir")
        .arg(broken_target_dir())
        .env_remove("CARGO_TARGET_DIR")
        .output()
        .map_err(|e| format!("could not run {}: {e}", env!("CARGO")))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&output.stderr).into_owned())
    }
}
