//! No name from a graph can take a name the generated code binds. Two graphs
//! are built whose input names (one) and node and output names (the other)
//! are every identifier any writer emits (every word of the generated code of
//! every example on every device, from the goldens), every keyword and
//! builtin of Python and C++, and every writer's reserved names. Each device's
//! program must then be right: on the cpu it runs and matches the reference
//! interpreter; for the Triton devices `tools/check_triton.py` compiles every
//! kernel with the real Triton compiler and checks that `call()` binds no name
//! twice and shadows no module-level name or builtin; and the scheduled program
//! of every device matches the interpreter (`host eval --device --check`).
//! `bench/gpu/prepare.sh` writes the same graphs for the GPU machine, where
//! `output_code.py` runs against PyTorch.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use kiln::codegen::{cpp, keywords, namer, triton, wrapper};
use kiln_tests::*;

/// Every identifier a graph name must never take.
fn hostile_names() -> Vec<String> {
    let mut names: BTreeSet<String> = BTreeSet::new();
    for list in [
        keywords::PYTHON,
        keywords::PYTHON_BUILTINS,
        keywords::CPP,
        triton::RESERVED,
        cpp::RESERVED,
        wrapper::python::RESERVED,
        wrapper::cpp::RESERVED,
    ] {
        names.extend(list.iter().map(|s| s.to_string()));
    }
    let goldens = repo_root().join("tests/snapshots/examples");
    let mut stack = vec![goldens.clone()];
    let mut files = 0;
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("the goldens").flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path
                .file_name()
                .is_some_and(|n| n == "output_code.py" || n == "wrapper.cpp")
            {
                let text = std::fs::read_to_string(&path).expect("a golden");
                names.extend(namer::identifiers(&text).map(str::to_string));
                files += 1;
            }
        }
    }
    assert!(
        files >= 4,
        "no generated code found under {}",
        goldens.display()
    );
    names.into_iter().collect()
}

fn header(name: &str, outputs: &[String]) -> String {
    let list: Vec<String> = outputs.iter().map(|o| format!("{o:?}")).collect();
    format!(
        "format = \"kiln-graph/1\"\nname = {name:?}\noutputs = [{}]\n\n",
        list.join(", ")
    )
}

fn input(name: &str) -> String {
    format!("[[inputs]]\nname = {name:?}\nshape = [2, 3]\ndtype = \"float32\"\n\n")
}

fn node(name: &str, op: &str, args: &[&str]) -> String {
    let list: Vec<String> = args.iter().map(|a| format!("{a:?}")).collect();
    format!(
        "[[nodes]]\nname = {name:?}\nop = \"{op}\"\nargs = [{}]\n\n",
        list.join(", ")
    )
}

/// Every name an input: a balanced tree of adds over all of them (one fused
/// kernel reading every input), a reduction of it, and a view.
fn names_as_inputs(names: &[String]) -> String {
    let mut body = String::new();
    for n in names {
        body += &input(n);
    }
    let mut level: Vec<String> = names.to_vec();
    let mut k = 0;
    while level.len() > 1 {
        let mut next = Vec::new();
        for pair in level.chunks(2) {
            match pair {
                [a, b] => {
                    let name = format!("node {k}");
                    body += &node(&name, "add", &[a, b]);
                    next.push(name);
                    k += 1;
                }
                [a] => next.push(a.clone()),
                _ => {}
            }
        }
        level = next;
    }
    let total = level.pop().expect("at least one name");
    body += &node("row sums", "sum", &[&total]);
    body += "attrs = { dim = [1] }\n\n";
    body += &node("all transposed", "permute", &[&total]);
    body += "attrs = { dims = [1, 0] }\n\n";
    let outputs = [total, "row sums".to_string(), "all transposed".to_string()];
    header("class", &outputs) + &body
}

/// Every name a node, and every node an output: a chain of pointwise ops over
/// two inputs and a constant, with a reduction every so often.
fn names_as_nodes(names: &[String]) -> String {
    let mut body = input("input a") + &input("input b");
    body += "[[constants]]\nname = \"constant c\"\nshape = [3]\ndtype = \"float32\"\nvalues = [0.5, -1.0, 2.0]\n\n";
    let mut previous = "input a".to_string();
    for (i, n) in names.iter().enumerate() {
        body += &match i % 4 {
            0 => node(n, "mul", &[&previous, "input b"]),
            1 => node(n, "add", &[&previous, "constant c"]),
            2 => node(n, "tanh", &[&previous]),
            _ => node(n, "amax", &[&previous]) + "attrs = { dim = [1], keepdim = true }\n\n",
        };
        previous = n.clone();
    }
    header("import", names) + &body
}

fn write_graph(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, text).expect("write the graph");
    path
}

fn python() -> String {
    std::env::var("KILN_PYTHON").unwrap_or_else(|_| "python3".to_string())
}

#[test]
fn graph_names_never_take_a_name_the_generated_code_binds() {
    let names = hostile_names();
    assert!(names.len() > 400, "only {} names", names.len());
    for n in [
        "stream0",
        "DEVICE",
        "args",
        "torch",
        "KERNEL_META",
        "kiln_call",
        "ws",
    ] {
        assert!(names.iter().any(|x| x == n), "{n} is not among the names");
    }
    let tmp = TempDir::new("names");
    let graphs = [
        write_graph(tmp.path(), "inputs", &names_as_inputs(&names)),
        write_graph(tmp.path(), "nodes", &names_as_nodes(&names)),
    ];
    for graph in &graphs {
        // The program every device schedules means what the graph means.
        for device in ["cuda", "gxu", "xpu", "cpu"] {
            let (output, stdout, stderr) = run(host(&host_bin())
                .arg("eval")
                .arg(graph)
                .args(["--device", device, "--check"]));
            assert!(
                output.status.success(),
                "{} on {device}:\n{stdout}\n{stderr}",
                graph.display()
            );
        }
        // The cpu's generated C++ builds, runs, and matches the interpreter.
        let (output, stdout, stderr) = run(host(&host_bin())
            .arg("run")
            .arg(graph)
            .args(["--device", "cpu", "--check"])
            .env("KILN_CACHE_DIR", tmp.subdir("cache"))
            .env("KILN_CXXFLAGS", "-O1 -fopenmp"));
        assert!(
            output.status.success() && stdout.contains("check: all"),
            "{} on cpu:\n{stdout}\n{stderr}",
            graph.display()
        );
        for device in ["cuda", "gxu", "xpu"] {
            let stem = graph.file_stem().expect("a name").to_string_lossy();
            let out = tmp.path().join("code").join(device).join(&*stem);
            let (output, _, stderr) = run(host(&host_bin())
                .arg("compile")
                .arg(graph)
                .args(["--device", device, "-o"])
                .arg(&out));
            assert!(output.status.success(), "{stem} for {device}: {stderr}");
        }
    }
    let (output, stdout, stderr) = run(Command::new(python())
        .arg(repo_root().join("tools/check_triton.py"))
        .arg(tmp.path().join("code")));
    assert!(
        output.status.success(),
        "generated Python or Triton is wrong:\n{stderr}\n{stdout}"
    );
    // cuda and gxu compile here; xpu where Intel's backend is installed.
    let compiled = stdout
        .lines()
        .filter(|l| l.contains("compiled for"))
        .count();
    assert!(compiled >= 4, "{stdout}");
}
