//! Graph-to-code time for the benchmark workloads of `bench/README.md`
//! (target: under 10 ms each; TorchInductor takes 0.3 to 3 s): import, validation, passes, scheduling and
//! Triton + wrapper generation for the cuda plugin through `driver::compile`,
//! everything `host compile` does but writing the file.
//!
//! Run after building the plugins in the same profile:
//! `cargo build --release --workspace && cargo bench -p kiln-host --bench compile`.

use std::path::{Path, PathBuf};

use criterion::{criterion_group, criterion_main, Criterion};

// The allocator the `host` binary uses (see host/src/main.rs).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
use kiln::plugins::{discover, Origin, SearchEntry};

fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("bench binary path");
    exe.parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>/deps")
        .to_path_buf()
}

fn bench_compile(c: &mut Criterion) {
    let registry = discover(&[SearchEntry {
        path: profile_dir(),
        origin: Origin::Flag,
    }]);
    let plugin = registry
        .get("cuda")
        .expect("build the plugins first: cargo build --release --workspace")
        .clone();
    let examples = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../examples"));
    let mut group = c.benchmark_group("graph_to_code");
    for name in [
        "gelu_chain",
        "softmax",
        "layer_norm",
        "rmsnorm_silu",
        "mlp",
        "attention",
        "gpt2_block",
    ] {
        let text = std::fs::read_to_string(examples.join(format!("{name}.toml"))).expect("example");
        group.bench_function(name, |b| {
            b.iter(|| {
                let graph = kiln::graph::parse_toml(&text).expect("parses");
                kiln::driver::compile(graph, &plugin, &Default::default())
                    .expect("compiles")
                    .code
                    .len()
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench_compile);
criterion_main!(benches);
