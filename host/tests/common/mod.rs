//! Helpers shared by the integration tests: paths, golden snapshots, comparisons.
#![allow(dead_code)]

use std::path::PathBuf;

/// The repository root (the workspace), from the package's manifest dir.
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `../shared` beside the repository.
pub fn shared_dir() -> PathBuf {
    repo_root().join("..").join("shared")
}

/// Compares `actual` with `tests/snapshots/NAME`; `UPDATE_SNAPSHOTS=1` writes it instead,
/// creating it if needed. A missing snapshot fails: writing it silently would let a test
/// pass that compared nothing (a renamed example, a snapshot never checked in).
pub fn snapshot(name: &str, actual: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/snapshots")
        .join(name);
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some() {
        std::fs::write(&path, actual).expect("write snapshot");
        return;
    }
    let expected = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => panic!(
            "snapshot {name} does not exist ({}): run with UPDATE_SNAPSHOTS=1 to create it, \
             then review and commit it\n--- actual\n{actual}",
            path.display()
        ),
        Err(e) => panic!("cannot read snapshot {}: {e}", path.display()),
    };
    if expected != actual {
        panic!(
            "snapshot {name} differs (re-bless with UPDATE_SNAPSHOTS=1)\n--- expected\n{expected}\n--- actual\n{actual}"
        );
    }
}

/// Reads a raw little-endian float32 file.
pub fn read_f32(path: &std::path::Path) -> Vec<f64> {
    let b = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64)
        .collect()
}

/// Largest error relative to `max(|expected|, floor)`.
pub fn max_rel_err(a: &[f64], b: &[f64], floor: f64) -> f64 {
    assert_eq!(a.len(), b.len(), "lengths differ");
    a.iter()
        .zip(b)
        .map(|(x, y)| {
            if x.is_nan() && y.is_nan() || x == y {
                0.0
            } else {
                (x - y).abs() / y.abs().max(floor)
            }
        })
        .fold(0.0, f64::max)
}

/// The bundled plugin for `device`, loaded from beside the built `host`
/// binary (`cargo build --workspace` builds both), once per test process.
pub fn plugin(device: &str) -> std::sync::Arc<kiln::plugins::Plugin> {
    static REGISTRY: std::sync::OnceLock<kiln::plugins::Registry> = std::sync::OnceLock::new();
    let registry = REGISTRY.get_or_init(|| {
        let exe = PathBuf::from(env!("CARGO_BIN_EXE_host"));
        let dir = exe.parent().expect("host has a folder").to_path_buf();
        kiln::plugins::discover_default(&[dir])
    });
    registry
        .get(device)
        .unwrap_or_else(|| {
            panic!("the {device} plugin is built beside host (cargo build --workspace)")
        })
        .clone()
}
