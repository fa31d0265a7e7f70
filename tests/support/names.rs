//! Graphs whose names are every name generated code binds (see
//! `tests/names.rs`): built here so that `examples/name_graphs.rs` can write
//! them for the GPU machine too.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use kiln::codegen::{cpp, keywords, namer, triton, wrapper};

use crate::repo_root;

/// Every identifier a graph name must never take.
pub fn hostile_names() -> Vec<String> {
    let mut names: BTreeSet<String> = BTreeSet::new();
    for list in [
        keywords::PYTHON,
        keywords::PYTHON_BUILTINS,
        keywords::CPP,
        triton::RESERVED,
        cpp::RESERVED,
        wrapper::python::RESERVED,
        wrapper::cpp::RESERVED,
        wrapper::triton_cpp::RESERVED,
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
pub fn names_as_inputs(names: &[String]) -> String {
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
pub fn names_as_nodes(names: &[String]) -> String {
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

/// A generated `wrapper.cpp` through the system C++ compiler, syntax only,
/// against the driver API stubs in `host/stubs`, warnings as errors; the
/// compiler's complaint on failure.
pub fn cpp_syntax_check(wrapper: &Path) -> Result<(), String> {
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".to_string());
    let output = Command::new(&cxx)
        .args([
            "-std=c++17",
            "-fsyntax-only",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-I",
        ])
        .arg(repo_root().join("host/stubs"))
        .arg(wrapper)
        .output()
        .unwrap_or_else(|e| panic!("the C++ compiler `{cxx}` could not be started: {e}"));
    if output.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&output.stderr).into_owned())
    }
}
