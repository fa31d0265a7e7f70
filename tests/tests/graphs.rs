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

/// The cpu's convolution in tiny pieces. As im2col and the packed matrix
/// product (the output-channel lanes turned off): patch chunks of a few output
/// rows (4 KiB where the threads share each chunk, one thread; where each
/// thread takes chunks of its own, three), 4 x 8 register blocks of 16-byte
/// vectors, steps of 8 of the shared dimension and blocks of 32 positions:
/// every chunk's products land in their rows, with padding, strides, dilation
/// and groups. With output channels in the lanes of 16-byte vectors (one or two
/// vectors, blocks of 13 or 6 columns): whole blocks, a last block overlapping
/// the one before it, and rows narrower than a block.
#[test]
fn convolutions_in_patch_chunks_and_tiny_tiles_match_the_reference() {
    let tmp = TempDir::new("conv-tiles");
    let tiles = "-O1 -fopenmp -DKILN_MM_VBYTES=16 -DKILN_MM_VREGS=16 -DKILN_MM_MR=4 -DKILN_MM_NR=8 -DKILN_MM_KC=8 \
                 -DKILN_MM_NC=32 -DKILN_MM_MC=12";
    let gemm = format!(
        "{tiles} -DKILN_CONV_LANE_CHANNELS=0 -DKILN_CONV_COL_BYTES=4096 \
         -DKILN_CONV_TASK_BYTES=4096 -DKILN_CONV_TASK_POSITIONS=1"
    );
    let graphs = [
        ("conv2d_as_matrix_products", 5),
        ("conv2d_output_channel_lanes", 3),
    ];
    for ((name, outputs), flags) in graphs
        .iter()
        .flat_map(|g| [gemm.as_str(), tiles].map(|f| (g, f)))
    {
        let graph = repo_root().join(format!("tests/graphs/{name}.toml"));
        for threads in ["1", "3"] {
            let (output, stdout, stderr) = run(host(&host_bin())
                .arg("run")
                .arg(&graph)
                .args(["--device", "cpu", "--check"])
                .env("KILN_CACHE_DIR", tmp.subdir("cache"))
                .env("OMP_NUM_THREADS", threads)
                .env("KILN_CXXFLAGS", flags));
            assert!(output.status.success(), "{flags}: {stdout}\n{stderr}");
            assert!(
                stdout.contains(&format!(
                    "check: all {outputs} output(s) match the reference"
                )),
                "{name} with {flags}: {stdout}"
            );
        }
    }
}
