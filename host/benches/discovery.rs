//! Discovery and validation of the four bundled plugins (target: under 20 ms).
//!
//! Run after building the plugins in the same profile:
//! `cargo build --release --workspace && cargo bench -p kiln-host --bench discovery`.
//!
//! Two figures: `host list` as a fresh process (cold: `dlopen`, the layout
//! check, `init` and load-time validation of every plugin, plus process start),
//! and `discover()` repeated in one process (warm: the libraries are already
//! mapped, everything else runs again).

use std::path::PathBuf;
use std::process::Command;

use criterion::{criterion_group, criterion_main, Criterion};
use kiln::plugins::{discover, Origin, SearchEntry};

fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("bench binary path");
    exe.parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>/deps")
        .to_path_buf()
}

fn bench_discovery(c: &mut Criterion) {
    let dir = profile_dir();
    let entries = [SearchEntry {
        path: dir.clone(),
        origin: Origin::Flag,
    }];
    let registry = discover(&entries);
    let found: Vec<&str> = registry.devices().map(|p| p.name()).collect();
    assert_eq!(
        found,
        ["cpu", "cuda", "gxu", "xpu"],
        "build the plugins first: cargo build --release --workspace (rejected: {:?})",
        registry.rejected
    );
    let host = dir.join(format!("host{}", std::env::consts::EXE_SUFFIX));
    let mut group = c.benchmark_group("discovery");
    // The reference: the same process start with no discovery at all.
    group.bench_function("host_version_fresh_process", |b| {
        b.iter(|| {
            let status = Command::new(&host)
                .arg("--version")
                .stdout(std::process::Stdio::null())
                .status()
                .expect("host runs");
            assert!(status.success());
        })
    });
    group.bench_function("host_list_fresh_process", |b| {
        b.iter(|| {
            let status = Command::new(&host)
                .args(["list", "--json"])
                .env_remove("KILN_PLUGIN_PATH")
                .stdout(std::process::Stdio::null())
                .status()
                .expect("host runs");
            assert!(status.success());
        })
    });
    group.bench_function("discover_in_process", |b| {
        b.iter(|| discover(&entries).devices().count())
    });
    group.finish();
}

criterion_group!(benches, bench_discovery);
criterion_main!(benches);
