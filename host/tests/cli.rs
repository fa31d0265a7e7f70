//! The `host` binary: `graph` and `eval`, exit codes, and tensor-file errors.

mod common;
use common::repo_root;
use std::process::Command;

fn host(args: &[&str]) -> (i32, String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_host"))
        .args(args)
        .output()
        .unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into(),
        String::from_utf8_lossy(&o.stderr).into(),
    )
}

fn example(name: &str) -> String {
    repo_root()
        .join("examples")
        .join(name)
        .to_string_lossy()
        .into()
}

#[test]
fn graph_formats() {
    let (c, out, _) = host(&["graph", &example("small_mlp.toml"), "--after-passes"]);
    assert_eq!(c, 0);
    assert!(out.contains("mm(") && !out.contains("linear("), "{out}");
    let (c, out, _) = host(&["graph", &example("small_mlp.toml"), "--format", "dot"]);
    assert_eq!(c, 0);
    assert!(out.starts_with("digraph"));
    let (c, out, _) = host(&["graph", &example("small_mlp.toml"), "--format", "json"]);
    assert_eq!(c, 0);
    assert!(serde_json::from_str::<serde_json::Value>(&out).is_ok());
}

#[test]
fn usage_and_input_errors() {
    assert_eq!(host(&["graph"]).0, 2);
    assert_eq!(host(&["graph", "x.toml", "--format", "png"]).0, 2);
    let (c, _, err) = host(&["graph", "/nonexistent/g.toml"]);
    assert_eq!(c, 1);
    assert!(err.contains("/nonexistent/g.toml"), "{err}");
}

#[test]
fn eval_writes_outputs_and_reads_inputs() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("kiln-cli-{}", std::process::id()));
    let out = dir.join("out");
    let (c, _, err) = host(&[
        "eval",
        &example("add.toml"),
        "--seed",
        "3",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(c, 0, "{err}");
    // Named as the graph names its output, and by position beside it.
    let named = std::fs::read(out.join("y.bin")).unwrap();
    assert_eq!(named.len(), 4 * 8 * 4);
    assert_eq!(std::fs::read(out.join("output0.bin")).unwrap(), named);
    // Inputs by name and by position; `b` is the wrong size.
    let ins = dir.join("in");
    std::fs::create_dir_all(&ins).unwrap();
    std::fs::write(ins.join("a.bin"), vec![0u8; 4 * 8 * 4]).unwrap();
    std::fs::write(ins.join("input1.bin"), vec![0u8; 8 * 4]).unwrap();
    let (c, stdout, err) = host(&[
        "eval",
        &example("add.toml"),
        "--inputs",
        ins.to_str().unwrap(),
    ]);
    assert_eq!(c, 0, "{err}");
    assert!(stdout.contains("y: float32[4, 8]"), "{stdout}");
    std::fs::write(ins.join("input1.bin"), vec![0u8; 7]).unwrap();
    let (c, _, err) = host(&[
        "eval",
        &example("add.toml"),
        "--inputs",
        ins.to_str().unwrap(),
    ]);
    assert_eq!(c, 1);
    assert!(
        err.contains("input1.bin") && err.contains("expected 32 bytes") && err.contains("found 7"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A one-op graph over one input of `shape` (TOML), in the test's own folder.
fn relu_graph(tag: &str, shape: &str) -> std::path::PathBuf {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("kiln-cli-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{tag}.toml"));
    std::fs::write(
        &path,
        format!(
            "format = \"kiln-graph/1\"\nname = \"{tag}\"\noutputs = [\"y\"]\n\n\
             [[inputs]]\nname = \"x\"\nshape = {shape}\ndtype = \"float32\"\n\n\
             [[nodes]]\nname = \"y\"\nop = \"relu\"\nargs = [\"x\"]\n"
        ),
    )
    .unwrap();
    path
}

#[test]
fn work_beyond_the_memory_limit_is_refused_with_the_figures_before_allocating() {
    // 800 million float32 elements: 6.0 GiB of inputs as float64.
    let big = relu_graph("big", "[8, 100000000]");
    let big = big.to_str().unwrap();
    let (c, out, err) = host(&["eval", big, "--max-memory", "1G"]);
    assert_eq!(c, 1, "{err}");
    assert!(out.is_empty(), "{out}");
    for part in [
        "evaluating",
        "big.toml needs 11.9 GiB",
        "inputs 6.0 GiB",
        "the reference interpreter 6.0 GiB",
        "more than the 1.0 GiB that --max-memory allows",
        "raise the limit with --max-memory SIZE",
    ] {
        assert!(err.contains(part), "missing {part:?} in {err}");
    }
    // The same limit from the environment, named as such.
    let o = Command::new(env!("CARGO_BIN_EXE_host"))
        .args(["eval", big])
        .env("KILN_MAX_MEMORY", "512M")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("512.0 MiB that KILN_MAX_MEMORY allows"),
        "{err}"
    );
    // `run` counts the compiled program's buffers and, with --check, the reference.
    let (c, _, err) = host(&["run", big, "--check", "--max-memory", "1G"]);
    assert_eq!(c, 1, "{err}");
    for part in [
        "running",
        "the compiled program",
        "the reference interpreter",
    ] {
        assert!(err.contains(part), "missing {part:?} in {err}");
    }
    // A malformed limit is a usage error naming the unit.
    let (c, _, err) = host(&["eval", big, "--max-memory", "lots"]);
    assert_eq!(c, 2, "{err}");
    assert!(err.contains("K, M, G or T"), "{err}");
}

#[test]
fn a_shape_no_machine_can_hold_is_refused_by_every_command_that_allocates() {
    let huge = relu_graph("huge", "[9223372036854775807]");
    let huge = huge.to_str().unwrap();
    // Describing and compiling the graph allocate nothing of its size.
    assert_eq!(host(&["graph", huge]).0, 0);
    for args in [vec!["eval", huge], vec!["run", huge, "--check"]] {
        let (c, _, err) = host(&args);
        assert_eq!(c, 1, "{args:?}: {err}");
        assert!(err.contains("more than 2^64 bytes"), "{args:?}: {err}");
        assert!(err.contains("no machine can hold it"), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}
