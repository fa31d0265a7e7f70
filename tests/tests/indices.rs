//! Index tensors at every level: an `embedding` refuses a negative id, as PyTorch's
//! embedding does, in the reference interpreter (`host eval`), the scheduled program
//! (`host eval --device`), the cpu's C++ kernels (`host run`) and the Triton kernels
//! (no wrap of the id, so their bounds assert catches it); `index.Tensor` still counts
//! a negative index from the end everywhere.

use std::path::{Path, PathBuf};
use std::process::Output;

use kiln_tests::*;

/// An embedding of 10 rows of 4 read by 3 token ids.
const EMBEDDING: &str = r#"format = "kiln-graph/1"
name = "embed"
outputs = ["y"]
[[inputs]]
name = "w"
shape = [10, 4]
dtype = "float32"
[[inputs]]
name = "ids"
shape = [3]
dtype = "int64"
[[nodes]]
name = "y"
op = "embedding"
args = ["w", "ids"]
"#;

/// `x[idx]` of a 6 x 3 `x`.
const INDEX: &str = r#"format = "kiln-graph/1"
name = "rows"
outputs = ["y"]
[[inputs]]
name = "x"
shape = [6, 3]
dtype = "float32"
[[inputs]]
name = "idx"
shape = [4]
dtype = "int64"
[[nodes]]
name = "y"
op = "index"
args = ["x", ["idx"]]
"#;

/// Writes `graph` and its two inputs (float32 values 0, 1, 2, ... and the int64 `ids`)
/// into `dir`; returns the graph's path and the inputs folder.
fn case(dir: &Path, graph: &str, rows: usize, ids: &[i64]) -> (PathBuf, PathBuf) {
    let file = dir.join("graph.toml");
    std::fs::write(&file, graph).unwrap();
    let inputs = dir.join("inputs");
    std::fs::create_dir_all(&inputs).unwrap();
    let values: Vec<u8> = (0..rows).flat_map(|i| (i as f32).to_le_bytes()).collect();
    std::fs::write(inputs.join("input0.bin"), values).unwrap();
    let ids: Vec<u8> = ids.iter().flat_map(|i| i.to_le_bytes()).collect();
    std::fs::write(inputs.join("input1.bin"), ids).unwrap();
    (file, inputs)
}

fn f32s(path: &Path) -> Vec<f32> {
    std::fs::read(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// A refusal: a failure with an exit code below 100 (no crash, no panic) whose message
/// holds `want`.
fn assert_refused(what: &str, output: &Output, stderr: &str, want: &str) {
    let code = output.status.code();
    assert!(
        code.is_some_and(|c| (1..100).contains(&c)),
        "{what}: exit {code:?}\n{stderr}"
    );
    assert!(stderr.contains(want), "{what}: {stderr}");
    assert!(!stderr.contains("panicked"), "{what}: {stderr}");
}

#[test]
fn a_negative_embedding_id_is_refused_by_the_interpreter_the_schedule_and_the_cpu_kernels() {
    let tmp = TempDir::new("embedding-negative");
    let (graph, inputs) = case(tmp.path(), EMBEDDING, 40, &[2, -1, 5]);
    let message =
        "index -1 is out of range for a dim of size 10 (embedding takes no negative indices)";
    let commands: [&[&str]; 5] = [
        &["eval"],
        &["eval", "--device", "cpu"],
        &["eval", "--device", "cuda"],
        &["run", "--device", "cpu", "--check"],
        &["run", "--device", "cpu"],
    ];
    for args in commands {
        let (output, stdout, stderr) = run(host(&host_bin())
            .args(args)
            .arg(&graph)
            .arg("--inputs")
            .arg(&inputs)
            .arg("--out")
            .arg(tmp.path().join("out"))
            .env("KILN_CACHE_DIR", tmp.subdir("cache")));
        let what = format!("host {}", args.join(" "));
        // A plain `host run` has no reference: the kernel's fault is what refuses the id.
        let want = if args == ["run", "--device", "cpu"] {
            "the compiled program read an index out of range"
        } else {
            message
        };
        assert_refused(&what, &output, &format!("{stdout}\n{stderr}"), want);
    }
    // The ids in range run and match.
    let (graph, inputs) = case(tmp.path(), EMBEDDING, 40, &[2, 9, 0]);
    let out = tmp.path().join("in-range");
    let (output, stdout, stderr) = run(host(&host_bin())
        .args(["run", "--device", "cpu", "--check"])
        .arg(&graph)
        .arg("--inputs")
        .arg(&inputs)
        .arg("--out")
        .arg(&out)
        .env("KILN_CACHE_DIR", tmp.subdir("cache")));
    assert!(output.status.success(), "{stdout}\n{stderr}");
    let want: Vec<f32> = [2, 9, 0]
        .iter()
        .flat_map(|r| (0..4).map(move |c| (r * 4 + c) as f32))
        .collect();
    assert_eq!(f32s(&out.join("output0.bin")), want);
}

#[test]
fn index_tensor_still_counts_a_negative_index_from_the_end() {
    let tmp = TempDir::new("index-negative");
    let (graph, inputs) = case(tmp.path(), INDEX, 18, &[-1, 0, -6, 3]);
    let want: Vec<f32> = [5, 0, 0, 3]
        .iter()
        .flat_map(|r| (0..3).map(move |c| (r * 3 + c) as f32))
        .collect();
    let commands: [&[&str]; 5] = [
        &["eval"],
        &["eval", "--device", "cpu", "--check"],
        &["eval", "--device", "cuda", "--check"],
        &["run", "--device", "cpu", "--check"],
        &["run", "--device", "cpu"],
    ];
    for (n, args) in commands.into_iter().enumerate() {
        let out = tmp.path().join(format!("out{n}"));
        let (output, stdout, stderr) = run(host(&host_bin())
            .args(args)
            .arg(&graph)
            .arg("--inputs")
            .arg(&inputs)
            .arg("--out")
            .arg(&out)
            .env("KILN_CACHE_DIR", tmp.subdir("cache")));
        let what = format!("host {}", args.join(" "));
        assert!(output.status.success(), "{what}: {stdout}\n{stderr}");
        let written = if out.join("y.bin").exists() {
            out.join("y.bin")
        } else {
            out.join("output0.bin")
        };
        assert_eq!(f32s(&written), want, "{what}");
    }
    // One step past either end is refused.
    let (graph, inputs) = case(tmp.path(), INDEX, 18, &[-7, 0, 1, 2]);
    let (output, stdout, stderr) = run(host(&host_bin())
        .args(["eval", "--device", "cpu"])
        .arg(&graph)
        .arg("--inputs")
        .arg(&inputs));
    assert_refused(
        "host eval --device cpu",
        &output,
        &format!("{stdout}\n{stderr}"),
        "index -7 is out of range for a dim of size 6",
    );
}

/// The lines of `code` that read an index tensor's value into a kernel variable
/// (`tmpN_iK = ...`), after its cast.
fn index_lines(code: &str) -> Vec<&str> {
    code.lines()
        .map(str::trim)
        .filter(|l| {
            l.split_once(" = ")
                .is_some_and(|(v, _)| v.starts_with("tmp") && v.contains("_i"))
        })
        .collect()
}

#[test]
fn triton_kernels_wrap_an_index_tensor_s_negative_index_but_not_an_embedding_s() {
    let tmp = TempDir::new("index-triton");
    for (name, graph, size, wraps) in [("embed", EMBEDDING, 10, false), ("rows", INDEX, 6, true)] {
        let dir = tmp.subdir(name);
        let (graph, _) = case(&dir, graph, 1, &[0]);
        let out = dir.join("code");
        let (output, _, stderr) = run(host(&host_bin())
            .arg("compile")
            .arg(&graph)
            .args(["--device", "cuda", "-o"])
            .arg(&out));
        assert!(output.status.success(), "{name}: {stderr}");
        let code = std::fs::read_to_string(out.join("output_code.py")).unwrap();
        let lines = index_lines(&code);
        assert!(
            lines.iter().any(|l| l.contains("tl.cast(")),
            "{name}: no index read in\n{code}"
        );
        let added = format!("+ {size},");
        let wrapped = lines
            .iter()
            .any(|l| l.contains("tl.where(") && l.contains("< 0, ") && l.contains(&added));
        assert_eq!(wrapped, wraps, "{name}: {lines:#?}");
        assert!(
            code.contains("\"index out of bounds: 0 <= ")
                && code.contains(&format!(" < {size}\")")),
            "{name}: no bounds assert in\n{code}"
        );
    }
}
