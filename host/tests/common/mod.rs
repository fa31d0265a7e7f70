//! Helpers shared by the integration tests: paths, plugins, comparisons. (The golden
//! files are the workspace tests', `tests/tests/goldens.rs`.)
#![allow(dead_code)]

use std::path::PathBuf;

/// The repository root (the workspace), from the package's manifest dir.
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The torch.export fixture archives kept in the repository (copies of the
/// project's reference set), with their inputs and PyTorch's outputs.
pub fn pt2_fixtures() -> PathBuf {
    repo_root().join("tests/fixtures/pt2")
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

/// Largest |got - want| over the largest |want|.
pub fn rel_err(got: &kiln::tensor::Tensor, want: &[f64]) -> f64 {
    let got = got.to_vec();
    assert_eq!(got.len(), want.len(), "output sizes differ");
    let scale = want.iter().fold(0.0f64, |m, v| m.max(v.abs())).max(1e-30);
    got.iter()
        .zip(want)
        .fold(0.0f64, |m, (a, b)| m.max((a - b).abs()))
        / scale
}
