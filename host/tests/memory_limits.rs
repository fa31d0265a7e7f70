//! The limits the operating system puts on the host's memory: work too large
//! for an address-space limit (`ulimit -v`) or a cgroup memory limit is
//! refused with the figures and the limit's name, never aborted with a
//! backtrace.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The address-space limit of the tests, in KiB: a container's 4 GB.
const ULIMIT_V_KIB: &str = "4000000";

/// A graph file `NAME.toml` in a fresh folder, with `body` after the header.
fn graph(name: &str, outputs: &str, body: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("kiln-memory-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{name}.toml"));
    let text =
        format!("format = \"kiln-graph/1\"\nname = \"{name}\"\noutputs = [{outputs}]\n\n{body}");
    std::fs::write(&path, text).unwrap();
    path
}

/// `host ARGS` under `ulimit -v`, with no explicit budget: exit code and stderr.
fn host_under_ulimit(args: &[&str]) -> (i32, String) {
    let o = Command::new("sh")
        .arg("-c")
        .arg(format!("ulimit -v {ULIMIT_V_KIB} && exec \"$0\" \"$@\""))
        .arg(env!("CARGO_BIN_EXE_host"))
        .args(args)
        .env_remove("KILN_MAX_MEMORY")
        .env_remove("RUST_BACKTRACE")
        .output()
        .unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stderr).into(),
    )
}

/// A refusal: a failure exit code below 100 (not a signal or an abort), and
/// no trace of a panic.
fn assert_refused(code: i32, err: &str, wants: &[&str]) {
    assert!((1..100).contains(&code), "exit code {code}: {err}");
    for bad in ["backtrace", "panicked", "memory allocation of"] {
        assert!(!err.contains(bad), "{bad:?} in: {err}");
    }
    for want in wants {
        assert!(err.contains(want), "{want:?} not in: {err}");
    }
}

#[test]
fn a_huge_input_under_ulimit_v_is_refused_naming_the_limit() {
    let g = graph(
        "huge_bool_input",
        "\"y\"",
        "[[inputs]]\nname = \"x\"\nshape = [8, 100000000]\ndtype = \"bool\"\n\n\
         [[nodes]]\nname = \"y\"\nop = \"logical_not\"\nargs = [\"x\"]\n",
    );
    let (code, err) = host_under_ulimit(&["eval", g.to_str().unwrap()]);
    assert_refused(
        code,
        &err,
        &[
            "needs ",
            "left under the address-space limit (ulimit -v)",
            "raise `ulimit -v`",
        ],
    );
}

#[test]
fn a_huge_fill_constant_is_counted() {
    let g = graph(
        "huge_fill",
        "\"f\"",
        "[[nodes]]\nname = \"f\"\nop = \"full\"\nargs = [[65536, 65536], 2]\n",
    );
    let (code, err) = host_under_ulimit(&["eval", g.to_str().unwrap()]);
    assert_refused(
        code,
        &err,
        &["needs 32.0 GiB", "left under the address-space limit"],
    );
}

#[test]
fn a_cgroup_memory_limit_is_honoured() {
    let g = graph(
        "cgroup_relu",
        "\"y\"",
        "[[inputs]]\nname = \"x\"\nshape = [16384, 16384]\ndtype = \"float32\"\n\n\
         [[nodes]]\nname = \"y\"\nop = \"relu\"\nargs = [\"x\"]\n",
    );
    // A fake cgroup file system with a 1 GiB limit at its root, which is an
    // ancestor of whatever cgroup this process is in: v2 and v1 alike.
    let root = g.parent().unwrap().join("cgroup");
    std::fs::create_dir_all(root.join("memory")).unwrap();
    for (file, text) in [
        ("memory.max", "1073741824\n"),
        ("memory.current", "0\n"),
        ("memory/memory.limit_in_bytes", "1073741824\n"),
        ("memory/memory.usage_in_bytes", "0\n"),
    ] {
        std::fs::write(root.join(file), text).unwrap();
    }
    let o = Command::new(env!("CARGO_BIN_EXE_host"))
        .args(["eval", g.to_str().unwrap()])
        .env("KILN_CGROUP_ROOT", &root)
        .env_remove("KILN_MAX_MEMORY")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_refused(
        o.status.code().unwrap_or(-1),
        &err,
        &[
            "more than the 1.0 GiB left under this process's cgroup memory limit",
            "give the container more memory",
        ],
    );
}
