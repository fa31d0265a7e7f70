//! `host conformance` from a plugin's own `cargo test` (feature `testing`).
//!
//! [`conformance_test!`] expands to a test that builds the crate's plugin
//! library (`cargo build --lib`), runs the Kiln host's conformance harness on
//! it, and fails with the harness's report when any check fails. The host is
//! the one `KILN_HOST` names, else `host` on `PATH`. Where the crate has an
//! `include/` folder (the header of its driver API, or a stub of it, which its
//! `kernel_header` includes), it is passed as `--include` for the driver-text
//! checks.
//!
//! ```ignore
//! // tests/conformance.rs of a plugin crate
//! kiln_plugin_kit::conformance_test!();
//! ```

use std::path::{Path, PathBuf};
use std::process::Command;

/// The environment variable naming the host binary.
pub const HOST_VAR: &str = "KILN_HOST";

/// Writes a test named `conformance` that runs [`check`] on this crate.
#[macro_export]
macro_rules! conformance_test {
    () => {
        #[test]
        fn conformance() {
            $crate::conformance::check(env!("CARGO_MANIFEST_DIR"), env!("CARGO_PKG_NAME"));
        }
    };
}

/// Builds package `package` (its manifest in `manifest_dir`) and runs `host
/// conformance` on its plugin library; panics with the report when a check
/// fails, or with what to do when the host or the library cannot be found.
pub fn check(manifest_dir: &str, package: &str) {
    let library = build(Path::new(manifest_dir), package).unwrap_or_else(|e| panic!("{e}"));
    let host = host().unwrap_or_else(|e| panic!("{e}"));
    let mut command = Command::new(&host);
    command.arg("conformance").arg(&library);
    let include = Path::new(manifest_dir).join("include");
    if include.is_dir() {
        command.arg("--include").arg(include);
    }
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", host.display()));
    let report = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    // The report goes to the test's output, shown on failure or with
    // `cargo test -- --nocapture`.
    println!("{report}");
    assert!(
        output.status.success(),
        "host conformance {} failed (exit {:?}):\n{report}{stderr}",
        library.display(),
        output.status.code()
    );
}

/// The host binary: `KILN_HOST`, else `host` on `PATH`.
pub fn host() -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os(HOST_VAR) {
        let path = PathBuf::from(path);
        return if path.is_file() {
            Ok(path)
        } else {
            Err(format!(
                "{HOST_VAR}={} is not a file: name the Kiln host binary (kiln/target/release/host)",
                path.display()
            ))
        };
    }
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|dir| dir.join(format!("host{}", std::env::consts::EXE_SUFFIX)))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            format!(
                "no Kiln host to run conformance with: set {HOST_VAR} to the host binary \
                 (build it with `cargo build --release` in a Kiln checkout: target/release/host), \
                 or put it on PATH"
            )
        })
}

/// Builds the package's library with the cargo running the tests, and
/// returns the path of its `cdylib`, as cargo reports it.
pub fn build(manifest_dir: &Path, package: &str) -> Result<PathBuf, String> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let output = Command::new(&cargo)
        .arg("build")
        .arg("--lib")
        .arg("--message-format=json-render-diagnostics")
        .arg("--manifest-path")
        .arg(manifest_dir.join("Cargo.toml"))
        .args(["-p", package])
        .output()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "building {package} failed:\n{}",
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    stdout
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|m| m["reason"] == "compiler-artifact" && m["target"]["name"].is_string())
        .filter(|m| {
            m["target"]["kind"]
                .as_array()
                .is_some_and(|kinds| kinds.iter().any(|k| k == "cdylib"))
        })
        .flat_map(|m| {
            m["filenames"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .filter_map(|f| f.as_str().map(PathBuf::from))
                .collect::<Vec<_>>()
        })
        .find(|f| {
            f.extension()
                .is_some_and(|e| e == std::env::consts::DLL_EXTENSION)
        })
        .ok_or_else(|| {
            format!(
                "{package} built no cdylib: its Cargo.toml needs `crate-type = [\"cdylib\"]` \
                 under [lib]"
            )
        })
}
