//! Every graph of `tests/graphs/` (graphs that once made Kiln generate a wrong
//! program) is right on every bundled device: the scheduled program matches the
//! reference interpreter, the cpu's C++ builds, runs and matches it, and every
//! Triton kernel compiles with the real Triton compiler.

use std::process::Command;

use kiln_tests::*;

#[test]
fn every_test_graph_is_right_on_every_device() {
    let tmp = TempDir::new("graphs");
    for graph in graphs_in("tests/graphs") {
        let stem = graph
            .file_stem()
            .expect("a name")
            .to_string_lossy()
            .to_string();
        for device in ["cuda", "gxu", "xpu", "cpu"] {
            let (output, stdout, stderr) = run(host(&host_bin())
                .arg("eval")
                .arg(&graph)
                .args(["--device", device, "--check"]));
            assert!(
                output.status.success(),
                "{stem} on {device}:\n{stdout}\n{stderr}"
            );
        }
        let (output, stdout, stderr) = run(host(&host_bin())
            .arg("run")
            .arg(&graph)
            .args(["--device", "cpu", "--check"])
            .env("KILN_CACHE_DIR", tmp.subdir("cache")));
        assert!(
            output.status.success(),
            "{stem} on cpu:\n{stdout}\n{stderr}"
        );
        for device in ["cuda", "gxu", "xpu"] {
            let out = tmp.path().join("code").join(device).join(&stem);
            let (output, _, stderr) = run(host(&host_bin())
                .arg("compile")
                .arg(&graph)
                .args(["--device", device, "-o"])
                .arg(&out));
            assert!(output.status.success(), "{stem} for {device}: {stderr}");
        }
    }
    let python = std::env::var("KILN_PYTHON").unwrap_or_else(|_| "python3".to_string());
    let (output, stdout, stderr) = run(Command::new(python)
        .arg(repo_root().join("tools/check_triton.py"))
        .arg(tmp.path().join("code")));
    assert!(output.status.success(), "{stderr}\n{stdout}");
}
