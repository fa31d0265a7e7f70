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
    assert_eq!(
        std::fs::metadata(out.join("output0.bin")).unwrap().len(),
        4 * 8 * 4
    );
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
    assert!(stdout.contains("output0: float32[4, 8]"), "{stdout}");
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
