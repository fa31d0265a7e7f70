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

/// The cpu's convolution as im2col and the packed matrix product, with the patch
/// matrix cut into chunks of one or two output rows (a 4 KiB budget instead of
/// 32 MiB): every chunk's products land in their rows.
#[test]
fn convolutions_in_patch_chunks_match_the_reference() {
    let tmp = TempDir::new("conv-chunks");
    let graph = repo_root().join("tests/graphs/conv2d_as_matrix_products.toml");
    let (output, stdout, stderr) = run(host(&host_bin())
        .arg("run")
        .arg(&graph)
        .args(["--device", "cpu", "--check"])
        .env("KILN_CACHE_DIR", tmp.subdir("cache"))
        .env("KILN_CXXFLAGS", "-O1 -fopenmp -DKILN_CONV_COL_BYTES=4096"));
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("check: all 4 output(s) match the reference"),
        "{stdout}"
    );
}
