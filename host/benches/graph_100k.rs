//! Import, validation and every pass over a generated 100,000-node graph (the
//! compile-time target of `bench/README.md`: under 1 s on two cores). The graph
//! is a deep chain with side branches, duplicates for CSE, no-ops, view chains
//! and composites to decompose, so a recursive traversal anywhere would
//! overflow the stack.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

// The allocator the `host` binary uses (see host/src/main.rs).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
use std::fmt::Write;

/// A `kiln-graph/1` text with about `n` nodes.
pub fn generate(n: usize) -> String {
    let mut t = String::from("format = \"kiln-graph/1\"\nname = \"big\"\noutputs = [\"OUT\"]\n\n");
    t += "[[inputs]]\nname = \"x\"\nshape = [16, 32]\ndtype = \"float32\"\n\n[[inputs]]\nname = \"w\"\nshape = [32]\ndtype = \"float32\"\n\n";
    let mut prev = "x".to_string();
    let mut i = 0;
    while i < n {
        let name = format!("n{i}");
        let (op, args) = match i % 10 {
            0 => ("relu", format!("[\"{prev}\"]")),
            1 => ("mul", format!("[\"{prev}\", \"w\"]")),
            2 => ("add", format!("[\"{prev}\", 0]")),
            3 => ("dropout", format!("[\"{prev}\"]")),
            4 => ("transpose", format!("[\"{prev}\", 0, 1]")),
            5 => ("transpose", format!("[\"{prev}\", 0, 1]")),
            6 => ("sigmoid", format!("[\"{prev}\"]")),
            // The same sigmoid as node 6, for CSE to merge.
            7 => ("sigmoid", format!("[\"n{}\"]", i - 2)),
            8 => ("add", format!("[\"{prev}\", \"n{}\"]", i - 2)),
            _ => ("softmax", format!("[\"{prev}\", -1]")),
        };
        let _ = write!(
            t,
            "[[nodes]]\nname = \"{name}\"\nop = \"{op}\"\nargs = {args}\n\n"
        );
        prev = name;
        i += 1;
    }
    t.replace("OUT", &prev)
}

/// The 100,000-node figure is the target; the 50,000-node one shows growth is linear
/// (criterion's throughput line gives the time per node of each size). Smaller graphs fit
/// in the last-level cache and run faster per node, so they would not show it.
/// `cargo run --release --example phases N` splits one run of size N by phase.
fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("graph_100k");
    group.sample_size(10);
    for n in [50_000, 100_000] {
        let text = generate(n);
        group.throughput(Throughput::Elements(n as u64));
        group.bench_with_input(
            BenchmarkId::new("import_validate_passes", n),
            &text,
            |b, text| {
                b.iter(|| {
                    let mut g = kiln::graph::parse_toml(text).expect("valid");
                    kiln::passes::run_pipeline(&mut g).expect("passes");
                    g.node_count()
                })
            },
        );
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
