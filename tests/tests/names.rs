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
//! The C++ wrapper of each Triton device (cuda, gxu, xpu) is written for both
//! graphs, around stand-in binaries, and must compile against the driver
//! stubs in `host/stubs` with warnings as errors.
//! `bench/gpu/prepare.sh` writes the same graphs for the GPU machine, where
//! `output_code.py` runs against PyTorch.

use std::path::{Path, PathBuf};
use std::process::Command;

use kiln_tests::names::{cpp_syntax_check, hostile_names, names_as_inputs, names_as_nodes};
use kiln_tests::*;

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
        "kiln_workspace",
        "stream_handle",
        "din",
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
    cpp_wrappers_build_under_hostile_names(&graphs, &tmp.subdir("cpp"));
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

/// The C++ wrapper of every Triton device for each of `graphs`, around
/// stand-in binaries, compiled (syntax only) against the driver stubs.
fn cpp_wrappers_build_under_hostile_names(graphs: &[PathBuf], dir: &Path) {
    let registry = kiln::plugins::discover(&[kiln::plugins::SearchEntry {
        path: profile_dir(),
        origin: kiln::plugins::Origin::Flag,
    }]);
    let options = kiln::driver::Options {
        wrapper: Some(kiln::plugins::WrapperKind::Cpp),
        ..Default::default()
    };
    let binaries = kiln::runtime::ahead::Binaries::StandIn {
        extension: "bin".into(),
    };
    for graph in graphs {
        let stem = graph.file_stem().expect("a name").to_string_lossy();
        for device in ["cuda", "gxu", "xpu"] {
            let plugin = registry.get(device).expect("a bundled plugin");
            let loaded = kiln::graph::load(graph).expect("the graph loads");
            let artifacts = kiln::driver::compile(loaded, plugin, &options)
                .unwrap_or_else(|e| panic!("{stem} for {device}: {}", kiln::diag::report(&e)));
            let out = dir.join(device).join(&*stem);
            let wrapper = kiln::runtime::ahead::write_wrapper(&artifacts, &out, &binaries)
                .unwrap_or_else(|e| panic!("{stem} for {device}: {}", kiln::diag::report(&e)));
            cpp_syntax_check(&wrapper.path)
                .unwrap_or_else(|e| panic!("{stem}: the {device} wrapper.cpp: {e}"));
        }
    }
}
