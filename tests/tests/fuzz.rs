//! The graph fuzzer (`kiln_tests::graphgen`) in CI: every generated graph is parsed,
//! run through every pass, scheduled for every bundled device and evaluated against
//! the reference interpreter; the first ones also run as the cpu device's real C++
//! library, and their Triton code is compiled by the real Triton compiler. Any
//! mismatch, panic, or generator step Kiln refuses fails the test with the graph's
//! seed (`graphgen show SEED` prints it; `graphgen check --from SEED --count 1`
//! minimises it). `KILN_FUZZ_GRAPHS` sets how many graphs (default 1500).

use std::process::Command;

use kiln_tests::graphgen::{generate, Checker, Config};
use kiln_tests::*;

/// Graphs also built as C++ and checked with Triton.
const DEEP: u64 = 40;

#[test]
fn generated_graphs_match_the_interpreter_on_every_device() {
    let count: u64 = std::env::var("KILN_FUZZ_GRAPHS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1500);
    // A longer run can go on from a seed (`KILN_FUZZ_FIRST`) past a graph already seen.
    let first: u64 = std::env::var("KILN_FUZZ_FIRST")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let devices = ["cpu", "cuda", "gxu", "xpu"];
    let shallow = Checker::new(&profile_dir(), &devices, false).expect("the bundled plugins");
    let deep = Checker::new(&profile_dir(), &devices, true).expect("the bundled plugins");
    let tmp = TempDir::new("fuzz");
    let cfg = Config::default();
    let mut problems = Vec::new();
    let mut unsupported = 0;
    for seed in first..first.max(count) {
        let g = generate(seed, &cfg);
        for (what, why) in &g.rejected {
            problems.push(format!("graph {seed}: Kiln refused a `{what}` step: {why}"));
        }
        let checker = if seed < DEEP { &deep } else { &shallow };
        match checker.check(&g.spec, seed) {
            Ok(passed) => {
                unsupported += passed.unsupported.len();
                if seed < DEEP {
                    for (device, code) in passed.triton_code {
                        let dir = tmp.path().join(&device).join(&g.spec.name);
                        std::fs::create_dir_all(&dir).expect("a folder");
                        std::fs::write(dir.join("output_code.py"), code).expect("written");
                    }
                }
            }
            Err(f) => problems.push(format!("graph {seed}: {f}\n{}", g.spec.to_toml())),
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
    // Clear "not supported on this device" errors are allowed, but stay rare.
    assert!(
        unsupported * 20 < count as usize,
        "{unsupported} compiles of {count} graphs were not supported by a device"
    );
    if first >= DEEP {
        // A run from a later seed (KILN_FUZZ_FIRST) writes no Triton code to check.
        return;
    }
    let python = std::env::var("KILN_PYTHON").unwrap_or_else(|_| "python3".to_string());
    let (output, stdout, stderr) = run(Command::new(python)
        .arg(repo_root().join("tools/check_triton.py"))
        .arg(tmp.path()));
    assert!(output.status.success(), "{stderr}\n{stdout}");
}

#[test]
fn the_generator_is_deterministic_and_covers_the_op_table() {
    let cfg = Config::default();
    assert_eq!(
        generate(7, &cfg).spec.to_toml(),
        generate(7, &cfg).spec.to_toml()
    );
    let mut ops = std::collections::BTreeSet::new();
    let mut zero_d = false;
    let mut empty = false;
    let mut several_outputs = false;
    for seed in 0..600 {
        let g = generate(seed, &cfg);
        ops.extend(g.spec.nodes.iter().map(|n| n.op));
        several_outputs |= g.spec.outputs.len() > 1;
        let types = kiln_tests::graphgen::value_types(&g.spec).expect("a valid graph");
        zero_d |= types.values().any(|(s, _)| s.is_empty());
        empty |= types.values().any(|(s, _)| s.contains(&0));
    }
    assert!(zero_d && empty && several_outputs);
    // Every op of Kiln's op table but the spellings that only name another op.
    let missing: Vec<&str> = kiln::graph::front::table::bind::op_names()
        .filter(|op| !ops.contains(op))
        .filter(|op| !matches!(*op, "conv3d" | "convolution" | "view" | "_to_copy"))
        .collect();
    assert!(
        missing.len() <= 8,
        "ops the generator never makes: {missing:?}"
    );
}
