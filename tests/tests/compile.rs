//! `host compile` through the real binary and the real plugins: every example
//! for every Triton device, every kernel through the real Triton compiler, the
//! debug layout, and the errors. (The golden files are `goldens.rs`'s.)

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use kiln_tests::*;

fn compile(graph: &Path, device: &str, out: &Path, extra: &[&str]) -> (bool, String) {
    let (output, _, stderr) = run(host(&host_bin())
        .arg("compile")
        .arg(graph)
        .args(["--device", device, "-o"])
        .arg(out)
        .args(extra));
    (output.status.success(), stderr)
}

fn python() -> String {
    std::env::var("KILN_PYTHON").unwrap_or_else(|_| "python3".to_string())
}

#[test]
fn every_example_compiles_for_every_triton_device_and_every_kernel_compiles_with_triton() {
    let tmp = TempDir::new("triton");
    for device in ["cuda", "gxu", "xpu"] {
        for graph in examples() {
            let stem = graph.file_stem().unwrap().to_string_lossy().to_string();
            let out = tmp.path().join(device).join(&stem);
            let (ok, stderr) = compile(&graph, device, &out, &[]);
            assert!(ok, "{stem} for {device}: {stderr}");
            assert!(out.join("output_code.py").exists());
        }
    }
    // The torch.export fixture archives too (both forms), for cuda.
    let fixtures = repo_root().join("tests/fixtures/pt2");
    let mut archives: Vec<PathBuf> = std::fs::read_dir(&fixtures)
        .expect("tests/fixtures/pt2")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "pt2"))
        .collect();
    archives.sort();
    assert!(
        !archives.is_empty(),
        "no .pt2 fixtures in {}",
        fixtures.display()
    );
    for archive in &archives {
        let stem = archive.file_stem().unwrap().to_string_lossy().to_string();
        let out = tmp.path().join("pt2").join(&stem);
        let (ok, stderr) = compile(archive, "cuda", &out, &[]);
        assert!(ok, "{stem} for cuda: {stderr}");
    }
    let probe = Command::new(python())
        .args(["-c", "import triton"])
        .output();
    assert!(
        probe.is_ok_and(|o| o.status.success()),
        "this test compiles every kernel with the real Triton compiler: `pip install triton` (or set KILN_PYTHON)"
    );
    let (output, stdout, stderr) = run(Command::new(python())
        .arg(repo_root().join("tools/check_triton.py"))
        .arg(tmp.path()));
    assert!(
        output.status.success(),
        "Triton rejected a kernel:\n{stderr}\n{stdout}"
    );
    // Every file is compiled for its own plugin's Triton target: cuda and gxu
    // (which stands in through CUDA) here; xpu where Intel's backend is
    // installed, and otherwise reported as skipped, naming the backend.
    let compiled = |device: &str| {
        stdout
            .lines()
            .filter(|l| l.contains(&format!("/{device}/")) && l.contains("kernel(s) compiled"))
            .count()
    };
    assert_eq!(compiled("cuda"), examples().len(), "{stdout}");
    assert_eq!(compiled("gxu"), examples().len(), "{stdout}");
    assert_eq!(compiled("pt2"), archives.len(), "{stdout}");
    let xpu_skipped = stdout
        .lines()
        .filter(|l| {
            l.starts_with("SKIPPED") && l.contains("/xpu/") && l.contains("backend for `xpu`")
        })
        .count();
    assert_eq!(compiled("xpu") + xpu_skipped, examples().len(), "{stdout}");
    assert!(
        stdout.contains("compiled for cuda 90, warp size 32"),
        "the cuda plugin's target is sm_90 without a GPU: {stdout}"
    );
}

/// The one C++ source `host run` left in its compile cache.
fn cached_source(cache: &Path) -> String {
    let sources: Vec<PathBuf> = std::fs::read_dir(cache)
        .expect("the cache folder")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "cpp"))
        .collect();
    assert_eq!(sources.len(), 1, "{sources:?}");
    std::fs::read_to_string(&sources[0]).expect("the cached source")
}

#[test]
fn host_run_and_the_library_driver_compile_exactly_what_host_compile_writes() {
    let tmp = TempDir::new("same-code");
    let registry = kiln::plugins::discover(&[kiln::plugins::SearchEntry {
        path: profile_dir(),
        origin: kiln::plugins::Origin::Flag,
    }]);
    for graph in examples() {
        let stem = graph.file_stem().unwrap().to_string_lossy().to_string();
        for device in ["cuda", "gxu", "xpu", "cpu"] {
            let out = tmp.path().join(device).join(&stem);
            let (ok, stderr) = compile(&graph, device, &out, &[]);
            assert!(ok, "{stem} for {device}: {stderr}");
            let file = if device == "cpu" {
                "wrapper.cpp"
            } else {
                "output_code.py"
            };
            let written = std::fs::read_to_string(out.join(file)).expect("the generated file");
            // What conformance, the benches and the tests compile.
            let plugin = registry.get(device).expect("a bundled plugin");
            let loaded = kiln::graph::load(&graph).expect("the example loads");
            let artifacts = kiln::driver::compile(loaded, plugin, &Default::default())
                .unwrap_or_else(|e| panic!("{stem} for {device}: {}", kiln::diag::report(&e)));
            assert!(
                artifacts.code == written,
                "{stem} for {device}: the driver's code differs"
            );
            // What `host run` builds and runs: the same driver call, checked
            // end to end where running the workload through a debug `host`
            // takes seconds (its random inputs and outputs are float64 tensors,
            // and the benchmark workloads have hundreds of millions of elements).
            let input_elements: i64 = artifacts
                .scheduled
                .program
                .inputs
                .iter()
                .map(|b| artifacts.scheduled.program.buffer(*b).numel())
                .sum();
            if device == "cpu" && input_elements <= 1 << 20 {
                let cache = tmp.subdir(&format!("cache-{stem}"));
                let (output, stdout, stderr) = run(host(&host_bin())
                    .arg("run")
                    .arg(&graph)
                    .args(["--device", "cpu"])
                    .env("KILN_CACHE_DIR", &cache)
                    .env("KILN_CXXFLAGS", "-O1 -fopenmp"));
                assert!(output.status.success(), "{stem}: {stdout}\n{stderr}");
                assert!(
                    cached_source(&cache) == written,
                    "{stem}: host run built other code than host compile wrote"
                );
            }
        }
    }
}

/// Generated kernels (not the `kiln_max_combine`-style helpers).
/// The text of each fused kernel of `code` (`kiln_poi_`/`kiln_red_`, not the helpers or
/// templates), up to the blank lines after its body.
fn fused_kernels(code: &str) -> Vec<&str> {
    code.split("@triton.jit\n")
        .skip(1)
        .filter(|k| k.starts_with("def kiln_poi_") || k.starts_with("def kiln_red_"))
        .map(|k| k.split("\n\n\n").next().unwrap_or(k))
        .collect()
}

fn kernel_count(code: &str) -> usize {
    code.lines()
        .filter(|l| l.starts_with("def kiln_poi_") || l.starts_with("def kiln_red_"))
        .count()
}

#[test]
fn the_benchmark_workloads_fuse_like_inductor() {
    let tmp = TempDir::new("fusion");
    for (name, kernels) in [
        ("gelu_chain", 1),
        ("softmax", 1),
        ("layer_norm", 1),
        ("rmsnorm_silu", 1),
        ("attention", 1),
        // The first bias and the relu in one kernel; the output's bias in its
        // product's call (`addmm`, or `mm` and an add, chosen at run time), as
        // Inductor calls `addmm` for it.
        ("mlp", 1),
    ] {
        let out = tmp.path().join(name);
        let (ok, stderr) = compile(
            &repo_root().join(format!("examples/{name}.toml")),
            "cuda",
            &out,
            &[],
        );
        assert!(ok, "{stderr}");
        let code = std::fs::read_to_string(out.join("output_code.py")).unwrap();
        assert_eq!(kernel_count(&code), kernels, "{name}:\n{code}");
    }
}

/// Every launch grid in the wrapper: `name[(x, y, z)](`.
fn grids(code: &str) -> Vec<u64> {
    code.lines()
        .filter_map(|l| l.trim().split_once("[(").map(|(_, rest)| rest))
        .filter_map(|rest| rest.split(',').next()?.trim().parse().ok())
        .collect()
}

#[test]
fn gxu_launches_at_most_48_programs_or_a_multiple_of_48_and_cuda_exactly_what_it_needs() {
    let tmp = TempDir::new("grids");
    for graph in examples() {
        let stem = graph.file_stem().unwrap().to_string_lossy().to_string();
        let out = tmp.path().join(&stem);
        let (ok, stderr) = compile(&graph, "gxu", &out, &[]);
        assert!(ok, "{stderr}");
        let code = std::fs::read_to_string(out.join("output_code.py")).unwrap();
        for g in grids(&code) {
            assert!(g <= 48 || g % 48 == 0, "{stem}: gxu grid {g}");
        }
        assert!(
            code.contains("\"num_warps\": 1,"),
            "{stem}: gxu runs one warp"
        );
        assert!(
            !code.contains("\"num_warps\": 2") && !code.contains("\"num_warps\": 4"),
            "{stem}"
        );
    }
    let out = tmp.path().join("add-cuda");
    assert!(compile(&repo_root().join("examples/add.toml"), "cuda", &out, &[]).0);
    let code = std::fs::read_to_string(out.join("output_code.py")).unwrap();
    // 32 elements: one program of a 32-element block.
    assert_eq!(grids(&code), [1], "{code}");
}

#[test]
fn debug_writes_inductors_debug_layout_and_autotune_offers_every_config() {
    let tmp = TempDir::new("debug");
    let out = tmp.path().join("out");
    let (ok, stderr) = compile(
        &repo_root().join("examples/small_layernorm.toml"),
        "cuda",
        &out,
        &["--debug", "--autotune"],
    );
    assert!(ok, "{stderr}");
    for file in [
        "output_code.py",
        "graph_pre_passes.txt",
        "graph_post_passes.txt",
        "ir_pre_fusion.txt",
        "ir_post_fusion.txt",
        "graph.dot",
    ] {
        let text =
            std::fs::read_to_string(out.join(file)).unwrap_or_else(|_| panic!("{file} missing"));
        assert!(!text.is_empty(), "{file} is empty");
    }
    let dot = std::fs::read_to_string(out.join("graph.dot")).unwrap();
    let pre = std::fs::read_to_string(out.join("ir_pre_fusion.txt")).unwrap();
    let post = std::fs::read_to_string(out.join("ir_post_fusion.txt")).unwrap();
    assert!(pre.contains("3 scheduler node(s) before fusion"), "{pre}");
    assert!(post.contains("1 kernel(s)"), "{post}");
    let code = std::fs::read_to_string(out.join("output_code.py")).unwrap();
    // The debug files call the kernel what the code calls it.
    let name = code
        .lines()
        .filter_map(|l| l.strip_prefix("def kiln_"))
        .filter(|rest| rest.starts_with("poi_") || rest.starts_with("red_"))
        .find_map(|rest| rest.split('(').next())
        .map(|rest| format!("kiln_{rest}"))
        .expect("a kernel in output_code.py");
    assert!(name.ends_with("_0"), "{name}");
    assert!(
        dot.starts_with("digraph") && dot.contains("fillcolor"),
        "{dot}"
    );
    assert!(dot.contains(&format!("kernel 0 {name}")), "{name}: {dot}");
    assert!(
        post.contains(&format!("  kernel 0 {name} over")),
        "{name}: {post}"
    );
    assert!(code.contains("@triton.autotune("), "{code}");
    assert!(code.contains("key=['xnumel', 'rnumel']"), "{code}");
    // The choices are kept on disk where Triton can (3.4 and later), and the
    // module still loads on an older Triton.
    assert!(code.contains("    **kiln_autotune_cache,\n)"), "{code}");
    assert!(
        code.contains("if \"cache_results\" in inspect.signature(triton.autotune).parameters"),
        "{code}"
    );
}

/// A convolutional network exported static, its batch made dynamic on the command line,
/// compiles once for each Triton device: the Python wrapper calls the library's convolution
/// at each call's batch and binds its result at the sizes over the batch's symbol. Its C++
/// wrapper launches Kiln's convolution kernel with the call's batch, on the plugin's grid
/// for the call's programs.
#[test]
fn a_convolutional_network_compiles_once_for_a_range_of_batches() {
    let tmp = TempDir::new("dynamic-cnn");
    let resnet = repo_root().join("tests/fixtures/models/resnet.pt2");
    for device in ["cuda", "gxu"] {
        let out = tmp.path().join(device);
        let (ok, stderr) = compile(&resnet, device, &out, &["--dynamic", "x:0=1..64"]);
        assert!(ok, "{device}: {stderr}");
        let code = std::fs::read_to_string(out.join("output_code.py")).unwrap();
        for want in [
            "SIZE_SYMBOLS = ((\"ks0\", \"x:0\", 0, 0, 1, 64),)",
            " = in_layout(torch.convolution(x, ",
            "), (ks0, 8, 32, 32), (8192, 1024, 32, 1))",
        ] {
            assert!(code.contains(want), "{device}: no `{want}` in\n{code}");
        }
    }
    let cpp = tmp.path().join("cpp");
    let (ok, stderr) = compile(
        &resnet,
        "cuda",
        &cpp,
        &["--wrapper", "cpp", "--dynamic", "x:0=1..64"],
    );
    assert!(ok, "{stderr}");
    let wrapper = std::fs::read_to_string(cpp.join("wrapper.cpp")).unwrap();
    let conv = &wrapper[wrapper
        .find("{ // kiln_conv_")
        .expect("a convolution launch")..];
    let conv = &conv[..conv.find("\n        }").unwrap()];
    for want in [
        "int32_t s0 = static_cast<int32_t>(ks0);",
        "static const KilnSizedCell grids[] = {{0, 1u, 1u, 1u}, ",
        "launchKernelDependent(",
    ] {
        assert!(conv.contains(want), "no `{want}` in\n{conv}");
    }
}

#[test]
fn compile_errors_name_the_device_and_what_is_missing() {
    let tmp = TempDir::new("errors");
    let graph = repo_root().join("examples/add.toml");
    let (ok, stderr) = compile(&graph, "npu", &tmp.path().join("a"), &[]);
    assert!(
        !ok && stderr.contains("no plugin provides the device `npu`"),
        "{stderr}"
    );
    // A plugin built against an older, shorter root module has no backend spec.
    let (output, _, stderr) = run(host(&host_bin())
        .arg("--plugins")
        .arg(compat_plugin())
        .arg("compile")
        .arg(&graph)
        .args(["--device", "oldapi", "-o"])
        .arg(tmp.path().join("b")));
    assert!(!output.status.success());
    assert!(
        stderr.contains("plugin `oldapi`") && stderr.contains("no backend spec"),
        "{stderr}"
    );
    let (ok, stderr) = compile(
        &tmp.path().join("missing.toml"),
        "cuda",
        &tmp.path().join("c"),
        &[],
    );
    assert!(!ok && stderr.contains("missing.toml"), "{stderr}");
}

#[test]
fn an_output_folder_that_is_a_file_is_refused_and_a_reused_one_holds_one_device_s_code() {
    let tmp = TempDir::new("out-dir");
    let graph = repo_root().join("examples/small_softmax.toml");
    let file = tmp.path().join("afile");
    std::fs::write(&file, "mine").unwrap();
    let (ok, stderr) = compile(&graph, "nodevice", &file, &[]);
    assert!(
        !ok && stderr.contains("output folder") && stderr.contains("is a file"),
        "refused before the device is looked up: {stderr}"
    );
    let (output, _, stderr) = run(host(&host_bin())
        .args(["run"])
        .arg(&graph)
        .arg("--out")
        .arg(&file));
    assert!(
        !output.status.success() && stderr.contains("is a file"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("ran in"),
        "refused before running: {stderr}"
    );

    // cpu, then gxu, then cpu into one folder: each time only that device's files.
    let out = tmp.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join("notes.txt"), "mine").unwrap();
    let listing = || {
        let mut names: Vec<String> = std::fs::read_dir(&out)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    assert!(compile(&graph, "cpu", &out, &[]).0);
    assert_eq!(listing(), ["kiln", "notes.txt", "wrapper.cpp"]);
    let (ok, stderr) = compile(&graph, "gxu", &out, &[]);
    assert!(
        ok && stderr.contains("removed") && stderr.contains("wrapper.cpp"),
        "{stderr}"
    );
    assert_eq!(
        listing(),
        ["kiln_runtime.py", "notes.txt", "output_code.py"]
    );
    assert!(compile(&graph, "cpu", &out, &[]).0);
    assert_eq!(listing(), ["kiln", "notes.txt", "wrapper.cpp"]);
}

/// A one-node graph over one float32 input, as TOML.
fn one_op_graph(name: &str, shape: &[i64], nodes: &str) -> String {
    format!(
        "format = \"kiln-graph/1\"\nname = \"{name}\"\noutputs = [\"y\"]\n\n\
         [[inputs]]\nname = \"x\"\nshape = {shape:?}\ndtype = \"float32\"\n\n{nodes}"
    )
}

/// A view of an input (here its reshape into a matrix product's operand) is
/// taken from where the input starts in its storage, which a caller's tensor
/// need not start at (`x[1:]`): the Python wrapper makes it with
/// `reinterpret_tensor`, whose offset counts from the input's own, never with
/// `torch.as_strided`, whose offset counts from the storage's first element.
#[test]
fn views_of_inputs_count_their_offset_from_the_input_not_its_storage() {
    let tmp = TempDir::new("input-views");
    let graph = tmp.path().join("views.toml");
    std::fs::write(
        &graph,
        "format = \"kiln-graph/1\"\nname = \"views\"\noutputs = [\"y\"]\n\n\
         [[inputs]]\nname = \"x\"\nshape = [2, 3, 4]\ndtype = \"float32\"\n\n\
         [[inputs]]\nname = \"w\"\nshape = [4, 5]\ndtype = \"float32\"\n\n\
         [[nodes]]\nname = \"m\"\nop = \"reshape\"\nargs = [\"x\", [6, 4]]\n\n\
         [[nodes]]\nname = \"y\"\nop = \"mm\"\nargs = [\"m\", \"w\"]\n",
    )
    .unwrap();
    for device in ["cuda", "gxu", "xpu"] {
        let out = tmp.path().join(device);
        let (ok, stderr) = compile(&graph, device, &out, &[]);
        assert!(ok, "{device}: {stderr}");
        let code = std::fs::read_to_string(out.join("output_code.py")).unwrap();
        assert!(
            code.contains("reinterpret_tensor(x, (6, 4), (4, 1), 0)"),
            "{device}:\n{code}"
        );
        assert!(!code.contains("torch.as_strided("), "{device}:\n{code}");
    }
}

/// A buffer that takes over a dead one's storage with the same size, strides
/// and dtype (a ReLU written in place over a matrix product's result) is the
/// donor's tensor under a second name: no view is made for it, which would cost
/// the host over half a microsecond a step.
#[test]
fn a_buffer_reusing_storage_of_its_own_layout_is_the_donor_itself() {
    let tmp = TempDir::new("reuse-alias");
    let graph = tmp.path().join("chain.toml");
    std::fs::write(
        &graph,
        "format = \"kiln-graph/1\"\nname = \"chain\"\noutputs = [\"y\"]\n\n\
         [[inputs]]\nname = \"x\"\nshape = [8, 16]\ndtype = \"float32\"\n\n\
         [[inputs]]\nname = \"w\"\nshape = [16, 16]\ndtype = \"float32\"\n\n\
         [[nodes]]\nname = \"h\"\nop = \"mm\"\nargs = [\"x\", \"w\"]\n\n\
         [[nodes]]\nname = \"a\"\nop = \"relu\"\nargs = [\"h\"]\n\n\
         [[nodes]]\nname = \"r\"\nop = \"reshape\"\nargs = [\"a\", [4, 32]]\n\n\
         [[nodes]]\nname = \"e\"\nop = \"exp\"\nargs = [\"r\"]\n\n\
         [[nodes]]\nname = \"t\"\nop = \"reshape\"\nargs = [\"e\", [8, 16]]\n\n\
         [[nodes]]\nname = \"y\"\nop = \"mm\"\nargs = [\"t\", \"w\"]\n",
    )
    .unwrap();
    let out = tmp.path().join("cuda");
    let (ok, stderr) = compile(&graph, "cuda", &out, &[]);
    assert!(ok, "{stderr}");
    let code = std::fs::read_to_string(out.join("output_code.py")).unwrap();
    assert!(code.contains(" = buf_h  # reuse"), "{code}");
    assert!(
        !code.contains("reinterpret_tensor(buf_h, (8, 16), (16, 1), 0)"),
        "{code}"
    );
}

/// Llama's rotary embedding: `q` read through a permute (its rows of 64 stay
/// contiguous) times the cosine of angles that the model keeps transposed
/// (`[E/2, L]`) and reads across for every head and batch. The angles are a
/// few KiB read from the cache after their first pass, so the kernel stays flat
/// and coalesces `q` and its result, instead of tiling for the angles.
#[test]
fn a_broadcast_operand_read_across_its_rows_leaves_a_pointwise_kernel_flat() {
    let tmp = TempDir::new("rotary");
    let graph = tmp.path().join("rotary.toml");
    std::fs::write(
        &graph,
        "format = \"kiln-graph/1\"\nname = \"rotary\"\noutputs = [\"y\"]\n\n\
         [[inputs]]\nname = \"q\"\nshape = [2, 256, 8, 64]\ndtype = \"float32\"\n\n\
         [[inputs]]\nname = \"f\"\nshape = [32, 256]\ndtype = \"float32\"\n\n\
         [[nodes]]\nname = \"qp\"\nop = \"permute\"\nargs = [\"q\", [0, 2, 1, 3]]\n\n\
         [[nodes]]\nname = \"ft\"\nop = \"transpose\"\nargs = [\"f\", 0, 1]\n\n\
         [[nodes]]\nname = \"a\"\nop = \"cat\"\nargs = [[\"ft\", \"ft\"], -1]\n\n\
         [[nodes]]\nname = \"c\"\nop = \"cos\"\nargs = [\"a\"]\n\n\
         [[nodes]]\nname = \"y\"\nop = \"mul\"\nargs = [\"qp\", \"c\"]\n",
    )
    .unwrap();
    let meta = one_pointwise_launch(&graph, &tmp.path().join("out"));
    assert!(!meta.contains("\"RBLOCK\""), "a flat launch: {meta}");
}

/// The launch metadata of the one pointwise kernel `graph` compiles to for cuda in `out`.
fn one_pointwise_launch(graph: &Path, out: &Path) -> String {
    let (ok, stderr) = compile(graph, "cuda", out, &[]);
    assert!(ok, "{stderr}");
    let code = std::fs::read_to_string(out.join("output_code.py")).unwrap();
    assert_eq!(kernel_count(code.as_str()), 1, "{code}");
    code.lines()
        .find(|l| l.starts_with("    \"kiln_poi_") && l.contains("\"signature\""))
        .unwrap_or_else(|| panic!("no pointwise kernel:\n{code}"))
        .to_string()
}

/// DeBERTa's position keys: one `[L, H * D]` projection, split into heads,
/// transposed to `[H, D, L]` and repeated for every sequence of the batch. A
/// flat copy reads the projection 256 floats apart from one element to the
/// next; past a multiprocessor's first-level cache every such read is a cache
/// sector of its own, so the copy runs on tiles that read and write along
/// lines. The same copy of a projection that the first-level cache holds
/// stays flat (as the rotary angles do).
#[test]
fn a_transposing_copy_of_a_repeated_operand_past_the_first_level_cache_runs_on_tiles() {
    let tmp = TempDir::new("repeat-transpose");
    for (rows, tiled) in [(512, true), (32, false)] {
        let graph = tmp.path().join(format!("keys{rows}.toml"));
        std::fs::write(
            &graph,
            one_op_graph(
                "keys",
                &[rows, 256],
                &format!(
                    "[[nodes]]\nname = \"h\"\nop = \"reshape\"\nargs = [\"x\", [{rows}, 4, 64]]\n\n\
                     [[nodes]]\nname = \"t\"\nop = \"permute\"\nargs = [\"h\", [1, 2, 0]]\n\n\
                     [[nodes]]\nname = \"y\"\nop = \"repeat\"\nargs = [\"t\", [8, 1, 1]]\n"
                ),
            ),
        )
        .unwrap();
        let meta = one_pointwise_launch(&graph, &tmp.path().join(format!("out{rows}")));
        assert_eq!(meta.contains("\"RBLOCK\""), tiled, "{rows} rows: {meta}");
    }
}

/// DeBERTa's relative-position buckets take a logarithm of positions that no
/// input changes: constant folding evaluates them once, into the table every
/// head's kernel reads, so no kernel takes a logarithm (for Triton or C++).
#[test]
fn relative_position_buckets_are_folded_into_a_table_no_kernel_recomputes() {
    let tmp = TempDir::new("buckets");
    let graph = repo_root().join("tests/graphs/relative_position_buckets.toml");
    for (device, file) in [("cuda", "output_code.py"), ("cpu", "wrapper.cpp")] {
        let out = tmp.path().join(device);
        let (ok, stderr) = compile(&graph, device, &out, &[]);
        assert!(ok, "{device}: {stderr}");
        let code = std::fs::read_to_string(out.join(file)).unwrap();
        for log in ["libdevice.log", "tl.log", "std::log", "kiln_log"] {
            assert!(!code.contains(log), "{device} computes {log}:\n{code}");
        }
        assert!(
            code.contains("exp"),
            "{device}: the softmax is still there:\n{code}"
        );
    }
}

#[test]
fn general_shapes_get_inductors_kernel_shapes_and_every_kernel_compiles_with_triton() {
    let tmp = TempDir::new("shapes");
    let cases = [
        // A transpose made contiguous: a copy kernel (never a view of the
        // input), tiled in two dims with a 2-D grid.
        (
            "transpose",
            one_op_graph(
                "transpose",
                &[512, 384],
                "[[nodes]]\nname = \"t\"\nop = \"transpose\"\nargs = [\"x\", 0, 1]\n\n\
                 [[nodes]]\nname = \"y\"\nop = \"contiguous\"\nargs = [\"t\"]\n",
            ),
        ),
        // Rows too long for one tile, and enough of them for the device: max
        // and sum in one loop (online softmax).
        (
            "softmax",
            one_op_graph(
                "softmax",
                &[512, 50000],
                "[[nodes]]\nname = \"y\"\nop = \"softmax\"\nargs = [\"x\", -1]\n",
            ),
        ),
        // Rows of 8192 read once (a sum) and three times (a softmax).
        (
            "row_sum",
            one_op_graph(
                "row_sum",
                &[2048, 8192],
                "[[nodes]]\nname = \"y\"\nop = \"sum\"\nargs = [\"x\", [1]]\n",
            ),
        ),
        (
            "row_softmax",
            one_op_graph(
                "row_softmax",
                &[2048, 8192],
                "[[nodes]]\nname = \"y\"\nop = \"softmax\"\nargs = [\"x\", -1]\n",
            ),
        ),
        // A long reduction into few results: split in two kernels.
        (
            "split",
            one_op_graph(
                "split",
                &[1 << 20, 8],
                "[[nodes]]\nname = \"y\"\nop = \"sum\"\nargs = [\"x\", [0]]\n",
            ),
        ),
        // An outer reduction: many columns per program, a short step down them.
        (
            "outer",
            one_op_graph(
                "outer",
                &[4096, 16384],
                "[[nodes]]\nname = \"y\"\nop = \"sum\"\nargs = [\"x\", [0]]\n",
            ),
        ),
    ];
    let mut codes = std::collections::HashMap::new();
    for (name, text) in &cases {
        let graph = tmp.path().join(format!("{name}.toml"));
        std::fs::write(&graph, text).unwrap();
        for device in ["cuda", "gxu"] {
            let out = tmp.path().join("out").join(device).join(name);
            let (ok, stderr) = compile(&graph, device, &out, &[]);
            assert!(ok, "{name} for {device}: {stderr}");
            let code = std::fs::read_to_string(out.join("output_code.py")).unwrap();
            codes.insert((*name, device), code);
        }
    }
    let code = &codes[&("transpose", "cuda")];
    assert_eq!(kernel_count(code), 1, "{code}");
    let launch = code
        .lines()
        .find(|l| l.contains("kiln_poi_") && l.contains("[("))
        .unwrap_or_else(|| panic!("no launch:\n{code}"));
    let meta = code
        .lines()
        .find(|l| l.starts_with("    \"kiln_poi_") && l.contains("\"signature\""))
        .unwrap();
    assert!(meta.contains("\"RBLOCK\""), "a tiled launch: {meta}");
    let grid: Vec<u64> = launch
        .split_once("[(")
        .and_then(|(_, rest)| rest.split_once(')'))
        .map(|(g, _)| g.split(',').filter_map(|v| v.trim().parse().ok()).collect())
        .unwrap();
    assert!(
        grid[0] > 1 && grid[1] > 1,
        "programs along both dims: {launch}"
    );
    // The grid's x walks the row elements (programs launched one after
    // another write next to each other), its y the rows; 4 warps a 64 x 64 tile.
    assert!(
        code.contains(
            "for roffset in range(tl.program_id(0) * RBLOCK, rnumel, tl.num_programs(0) * RBLOCK):"
        ) && code.contains(
            "for xoffset in range(tl.program_id(1) * XBLOCK, xnumel, tl.num_programs(1) * XBLOCK):"
        ),
        "{code}"
    );
    assert_eq!(grid[..2], [512 / 64, 384 / 64], "{launch}");
    assert!(meta.contains("\"num_warps\": 4"), "{meta}");
    assert!(!code.contains("return (reinterpret_tensor(x"), "{code}");

    // Rows of 50000 step by 8192 with 16 warps on cuda; the gxu's one-warp
    // programs keep Inductor's steps (1024 here: 2048 masks off 2 % more).
    for (device, step, warps) in [("cuda", 8192, 16), ("gxu", 1024, 1)] {
        let code = &codes[&("softmax", device)];
        let meta = code
            .lines()
            .find(|l| l.starts_with("    \"kiln_red_") && l.contains("\"signature\""))
            .unwrap();
        assert!(
            meta.contains(&format!("\"RBLOCK\": {step}}}"))
                && meta.contains(&format!("\"num_warps\": {warps},")),
            "{device}: {meta}"
        );
    }
    // Rows of 8192: a sum reads each row once and loops on cuda, in steps of
    // 4096 with 16 warps (holding the row gains it nothing); a softmax holds
    // it whole (one read instead of three); the gxu's one-warp programs loop
    // both by Inductor's 2048.
    for (device, name, step, warps) in [
        ("cuda", "row_sum", 4096, 16),
        ("cuda", "row_softmax", 8192, 8),
        ("gxu", "row_sum", 2048, 1),
        ("gxu", "row_softmax", 2048, 1),
    ] {
        let code = &codes[&(name, device)];
        let meta = code
            .lines()
            .find(|l| l.starts_with("    \"kiln_red_") && l.contains("\"signature\""))
            .unwrap();
        assert!(
            meta.contains(&format!("\"RBLOCK\": {step}}}"))
                && meta.contains(&format!("\"num_warps\": {warps},")),
            "{device} {name}: {meta}"
        );
        assert_eq!(
            code.contains("for roffset in range(0, rnumel, RBLOCK):"),
            step < 8192,
            "{device} {name}: looped only below a whole row:\n{code}"
        );
    }
    for device in ["cuda", "gxu"] {
        let code = &codes[&("softmax", device)];
        assert!(code.contains("= kiln_online_softmax_update("), "{code}");
        assert_eq!(kernel_count(code), 1, "{code}");
        let code = &codes[&("split", device)];
        assert_eq!(
            kernel_count(code),
            2,
            "{device}: partial sums, then their sum:\n{code}"
        );
    }
    let code = &codes[&("outer", "cuda")];
    let meta = code
        .lines()
        .find(|l| l.starts_with("    \"kiln_red_") && l.contains("\"signature\""))
        .unwrap();
    assert!(
        meta.contains("\"constants\": {\"XBLOCK\": 64, \"RBLOCK\": 8}"),
        "Inductor's outer tile: {meta}"
    );
    // The only loop over the rows reads each line once: `evict_first`, as
    // Inductor marks it.
    assert!(
        code.lines()
            .any(|l| l.contains("tl.load(in_ptr0") && l.contains("eviction_policy='evict_first'")),
        "{code}"
    );
    // A one-warp device (gxu) splits the long reduction into more chunks than
    // a device of four-warp programs: more programs for as many loads in flight.
    let first_grid = |device: &str| {
        grids(&codes[&("split", device)])
            .first()
            .copied()
            .unwrap_or_else(|| panic!("{device}: no launch"))
    };
    assert!(
        first_grid("gxu") >= 2 * first_grid("cuda") * 48 / 132,
        "gxu's partial sums on {} programs, cuda's on {}",
        first_grid("gxu"),
        first_grid("cuda")
    );

    let (output, stdout, stderr) = run(Command::new(python())
        .arg(repo_root().join("tools/check_triton.py"))
        .arg(tmp.path().join("out")));
    assert!(
        output.status.success(),
        "Triton rejected a kernel:\n{stderr}\n{stdout}"
    );
}

/// Two linear+relu layers of the same shapes: the same kernel after each product.
const TWO_LAYERS: &str = r#"
format = "kiln-graph/1"
name = "two_layers"
outputs = ["y"]

[[inputs]]
name = "x"
shape = [64, 256]
dtype = "float32"

[[inputs]]
name = "w"
shape = [256, 256]
dtype = "float32"

[[inputs]]
name = "b"
shape = [256]
dtype = "float32"

[[nodes]]
name = "h1"
op = "linear"
args = ["x", "w", "b"]

[[nodes]]
name = "a1"
op = "relu"
args = ["h1"]

[[nodes]]
name = "h2"
op = "linear"
args = ["a1", "w", "b"]

[[nodes]]
name = "y"
op = "relu"
args = ["h2"]
"#;

#[test]
fn identical_kernels_are_written_once_and_launched_from_each_step() {
    let tmp = TempDir::new("shared-kernels");
    let graph = tmp.path().join("two_layers.toml");
    std::fs::write(&graph, TWO_LAYERS).unwrap();
    let out = tmp.path().join("out");
    let (ok, stderr) = compile(&graph, "cuda", &out, &[]);
    assert!(ok, "{stderr}");
    let code = std::fs::read_to_string(out.join("output_code.py")).unwrap();
    assert_eq!(kernel_count(&code), 1, "{code}");
    let launches: Vec<&str> = code
        .lines()
        .filter(|l| l.trim_start().starts_with("KERNELS.kiln_"))
        .collect();
    assert_eq!(launches.len(), 2, "{code}");
    let name = |l: &str| {
        l.trim_start()["KERNELS.".len()..]
            .split('[')
            .next()
            .unwrap()
            .to_string()
    };
    assert_eq!(name(launches[0]), name(launches[1]), "{code}");
    let meta_entries = code
        .lines()
        .filter(|l| l.starts_with("    \"kiln_") && l.contains("\"signature\""))
        .count();
    assert_eq!(meta_entries, 1, "{code}");
}

#[test]
fn precompile_writes_every_kernel_binary_and_the_wrapper_s_runtime_keeps_and_reuses_them() {
    let tmp = TempDir::new("precompile");
    let python = python();
    let out = tmp.path().join("gpt2");
    let (output, _, stderr) = run(host(&host_bin())
        .env("KILN_PYTHON", &python)
        .arg("compile")
        .arg(repo_root().join("examples/gpt2_block.toml"))
        .args(["--device", "cuda", "--precompile", "-o"])
        .arg(&out));
    let ok = output.status.success();
    assert!(ok, "{stderr}");
    let code = std::fs::read_to_string(out.join("output_code.py")).unwrap();
    let names: Vec<String> = code
        .lines()
        .filter(|l| l.starts_with("    \"kiln_") && l.contains("\"signature\""))
        .map(|l| l.trim_start()[1..].split('"').next().unwrap().to_string())
        .collect();
    assert_eq!(names.len(), 7, "{code}");
    let folders: Vec<PathBuf> = std::fs::read_dir(out.join("kernels"))
        .expect("kernels/ beside output_code.py")
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    // The manifest names each kernel's folder.
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("kernels/manifest.json")).unwrap())
            .unwrap();
    for name in &names {
        let key = manifest[name.as_str()].as_str().unwrap_or_default();
        assert!(out.join("kernels").join(key).is_dir(), "{name}: {manifest}");
    }
    assert_eq!(folders.len(), names.len(), "{folders:?}");
    for name in &names {
        let folder = folders
            .iter()
            .find(|f| {
                f.file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with(&format!("{name}-"))
            })
            .unwrap_or_else(|| panic!("no binary for {name} in {folders:?}"));
        assert!(folder.join(format!("{name}.json")).is_file());
        assert!(folder.join(format!("{name}.cubin")).is_file());
    }

    // The runtime an import starts: compiled by the worker pool into the cache, then
    // loaded from it by a second process that compiles nothing.
    let cache = tmp.path().join("cache");
    let script = repo_root().join("tests/support/kernel_runtime.py");
    let plain = tmp.path().join("plain");
    assert!(
        compile(
            &repo_root().join("examples/gpt2_block.toml"),
            "cuda",
            &plain,
            &[]
        )
        .0
    );
    let runtime = |code: &Path, strict: bool| {
        let (output, stdout, stderr) = run(Command::new(&python)
            .env("KILN_CACHE_DIR", &cache)
            .arg(&script)
            .arg(code)
            .args(strict.then_some("--no-compile-here")));
        assert!(output.status.success(), "{stderr}\n{stdout}");
        let states: Vec<(String, String)> = stdout
            .lines()
            .filter_map(|l| {
                let mut words = l.split(' ');
                Some((words.next()?.to_string(), words.next()?.to_string()))
            })
            .collect();
        assert_eq!(states.len(), names.len(), "{stdout}");
        states
    };
    let code = plain.join("output_code.py");
    let states = runtime(&code, false);
    assert!(states.iter().all(|(_, s)| s == "compiled"), "{states:?}");
    assert!(runtime(&code, true).iter().all(|(_, s)| s == "found"));
    // Workers the kiln package started ahead (its torch.compile backend does, while
    // a graph is exported) compile every kernel: the runtime takes them, starts none.
    let (output, stdout, stderr) = run(Command::new(&python)
        .env("KILN_CACHE_DIR", tmp.path().join("lent-cache"))
        .arg(&script)
        .arg(&code)
        .args(["--lent", "2"]));
    assert!(output.status.success(), "{stderr}\n{stdout}");
    let compiled = stdout
        .lines()
        .filter(|l| l.split(' ').nth(1) == Some("compiled"))
        .count();
    assert_eq!(compiled, names.len(), "{stdout}");
    // A kernel edited by hand is compiled again; the others still come from the cache.
    let text = std::fs::read_to_string(&code).unwrap();
    let edited = text.replacen(
        "    xbase = tl.arange(0, XBLOCK)\n",
        "    xbase = tl.arange(0, XBLOCK)  # edited\n",
        1,
    );
    assert_ne!(edited, text);
    let edited_code = tmp.path().join("edited").join("output_code.py");
    std::fs::create_dir_all(edited_code.parent().unwrap()).unwrap();
    std::fs::write(&edited_code, edited).unwrap();
    std::fs::copy(
        plain.join("kiln_runtime.py"),
        edited_code.with_file_name("kiln_runtime.py"),
    )
    .unwrap();
    let states = runtime(&edited_code, false);
    let compiled: Vec<&str> = states
        .iter()
        .filter(|(_, s)| s == "compiled")
        .map(|(n, _)| n.as_str())
        .collect();
    assert_eq!(compiled.len(), 1, "{states:?}");

    // A target this Triton has no backend for is refused with the reason.
    let (output, _, stderr) = run(host(&host_bin())
        .env("KILN_PYTHON", &python)
        .arg("compile")
        .arg(repo_root().join("examples/softmax.toml"))
        .args(["--device", "xpu", "--precompile", "-o"])
        .arg(tmp.path().join("xpu")));
    assert!(!output.status.success());
    assert!(stderr.contains("no backend for `xpu`"), "{stderr}");
}

/// A kiln-graph/1 file of one `scaled_dot_product_attention` of `q`, `k`, `v`
/// (`shape` each, `[B, H, L, E]`), read through a `[B, H, E, L]` input
/// transposed when `transposed`, with a bool mask `[B, 1, L, L]` or `is_causal`.
fn attention_graph(
    shape: [i64; 4],
    dtype: &str,
    mask: bool,
    causal: bool,
    transposed: bool,
) -> String {
    let [b, h, l, e] = shape;
    let stored = if transposed { [b, h, e, l] } else { shape };
    let mut text = "format = \"kiln-graph/1\"\nname = \"attn\"\noutputs = [\"o\"]\n\n".to_string();
    let mut operands = Vec::new();
    for name in ["q", "k", "v"] {
        text +=
            &format!("[[inputs]]\nname = \"{name}\"\nshape = {stored:?}\ndtype = \"{dtype}\"\n\n");
        if transposed {
            text += &format!(
                "[[nodes]]\nname = \"{name}t\"\nop = \"transpose\"\nargs = [\"{name}\", -1, -2]\n\n"
            );
            operands.push(format!("\"{name}t\""));
        } else {
            operands.push(format!("\"{name}\""));
        }
    }
    if mask {
        text += &format!(
            "[[inputs]]\nname = \"m\"\nshape = {:?}\ndtype = \"bool\"\n\n",
            [b, 1, l, l]
        );
        operands.push("\"m\"".into());
    }
    text += &format!(
        "[[nodes]]\nname = \"o\"\nop = \"scaled_dot_product_attention\"\nargs = [{}]\n",
        operands.join(", ")
    );
    if causal {
        text += "attrs = { is_causal = true }\n";
    }
    text
}

/// The `KERNEL_META` entry of the first flash-attention kernel.
fn attention_meta(code: &str) -> &str {
    code.lines()
        .find(|l| l.trim_start().starts_with("\"kiln_flash_attention_0\": {"))
        .unwrap_or_else(|| panic!("no attention kernel in:\n{code}"))
}

#[test]
fn flash_attention_is_shaped_for_its_target_and_every_variant_compiles_with_triton() {
    let tmp = TempDir::new("attention");
    let write = |name: &str, text: String| {
        let path = tmp.path().join(format!("{name}.toml"));
        std::fs::write(&path, text).unwrap();
        path
    };
    let compiled = |graph: &Path, device: &str| {
        let out = tmp
            .path()
            .join("out")
            .join(device)
            .join(graph.file_stem().unwrap());
        let (ok, stderr) = compile(graph, device, &out, &[]);
        assert!(ok, "{}: {stderr}", graph.display());
        std::fs::read_to_string(out.join("output_code.py")).unwrap()
    };
    // float32, 2 x 2 heads x 100 rows: 8 blocks of 64 rows for 132 SMs, so 32 rows a block.
    let few = write(
        "f32_few",
        attention_graph([2, 2, 100, 64], "float32", true, false, false),
    );
    let cuda = compiled(&few, "cuda");
    let meta = attention_meta(&cuda);
    assert!(cuda.contains("input_precision=\"tf32x3\""), "{cuda}");
    assert!(meta.contains("\"BLOCK_M\": 32"), "{meta}");
    // Unit innermost strides are compiled in, not passed.
    for s in ["sqe", "ske", "sve", "soe", "smn"] {
        assert!(meta.contains(&format!("\"{s}\": 1")), "{s}: {meta}");
        assert!(!meta.contains(&format!("\"{s}\": \"i32\"")), "{s}: {meta}");
    }
    // Three stages of 64 x 64 float32 key and value tiles (112 KiB) fit the
    // 227 KiB the cuda plugin gives a program on an H100.
    assert!(meta.contains("\"num_stages\": 3"), "{meta}");
    // GXU (no TF32 tensor cores): exact products, one stage.
    let gxu = compiled(&few, "gxu");
    assert!(gxu.contains("input_precision=\"ieee\""), "{gxu}");
    assert!(!gxu.contains("tf32x3"), "{gxu}");
    assert!(attention_meta(&gxu).contains("\"num_stages\": 1"), "{gxu}");
    // bfloat16, 8 x 16 heads x 512 rows: enough blocks of 64 rows, three stages.
    let many = write(
        "bf16_many",
        attention_graph([8, 16, 512, 64], "bfloat16", false, true, false),
    );
    let cuda = compiled(&many, "cuda");
    let meta = attention_meta(&cuda);
    assert!(!cuda.contains("input_precision"), "{cuda}");
    assert!(
        meta.contains("\"BLOCK_M\": 64") && meta.contains("\"num_stages\": 3"),
        "{meta}"
    );
    // The step runs Kiln's kernel or the library's, as the runtime chooses for
    // its signature (buffer size, stride, dtype, causal, scale, whether the
    // buffer is [B, L, H, E]), and binds the result: no buffer is allocated
    // for it. The graph returns the result, so its buffer is [B, H, L, E].
    assert!(
        cuda.contains(
            "        ((8, 16, 512, 64), (524288, 32768, 64, 1), torch.bfloat16, True, 0.125, False),\n"
        ),
        "{cuda}"
    );
    assert!(
        cuda.contains(
            "buf_o = ATTENTION.run(0, lambda _kiln_out: KERNELS.kiln_flash_attention_0[("
        ) && cuda.contains("_kiln_out, 0.125, ")
            && cuda.contains("stream=stream0), lambda: (q, k, v, None))\n"),
        "{cuda}"
    );
    assert!(!cuda.contains("buf_o = empty_strided_device"), "{cuda}");
    // Operands read through a transpose: their innermost stride is the row
    // length, passed at run time.
    let t = write(
        "f32_transposed",
        attention_graph([2, 4, 48, 32], "float32", false, false, true),
    );
    let cuda = compiled(&t, "cuda");
    let meta = attention_meta(&cuda);
    for s in ["sqe", "ske", "sve"] {
        assert!(meta.contains(&format!("\"{s}\": \"i32\"")), "{s}: {meta}");
    }
    // The output is Kiln's own contiguous buffer.
    assert!(meta.contains("\"soe\": 1"), "{meta}");
    compiled(&t, "gxu");
    compiled(&many, "gxu");
    let (output, stdout, stderr) = run(Command::new(python())
        .arg(repo_root().join("tools/check_triton.py"))
        .arg("--require-backends")
        .arg(tmp.path().join("out")));
    assert!(
        output.status.success(),
        "Triton rejected an attention kernel:\n{stderr}\n{stdout}"
    );
    assert_eq!(
        stdout.matches("1 of 1 kernel(s) compiled").count(),
        6,
        "{stdout}"
    );
}

#[test]
fn an_attention_read_through_transpose_1_2_is_computed_heads_inner_and_needs_no_copy_kernel() {
    let tmp = TempDir::new("attention-heads-inner");
    // GPT-2's heads: [B, L, H, E] projections read as [B, H, L, E], the result
    // transposed back and reshaped to [B, L, H * E].
    let mut text = attention_graph([2, 4, 16, 32], "bfloat16", false, true, false)
        .replace("outputs = [\"o\"]", "outputs = [\"y\"]");
    text += "\n[[nodes]]\nname = \"ot\"\nop = \"transpose\"\nargs = [\"o\", 1, 2]\n\n\
             [[nodes]]\nname = \"y\"\nop = \"reshape\"\nargs = [\"ot\", [2, 16, 128]]\n";
    let graph = tmp.path().join("attn.toml");
    std::fs::write(&graph, text).unwrap();
    let out = tmp.path().join("out");
    let (ok, stderr) = compile(&graph, "cuda", &out, &[]);
    assert!(ok, "{stderr}");
    let code = std::fs::read_to_string(out.join("output_code.py")).unwrap();
    // The buffer is [B, L, H, E]; the kernel writes the [B, H, L, E] result
    // through its strides (sob, soh, som, soe).
    assert!(
        code.contains("        ((2, 16, 4, 32), (2048, 128, 32, 1), torch.bfloat16, True, 0.17677669529663687, True),\n"),
        "{code}"
    );
    assert!(code.contains("_kiln_out, 0.17677669529663687, "), "{code}");
    assert!(
        code.contains(", 2048, 32, 128, 1, 2, 4, 16, 16, "),
        "{code}"
    );
    // The transpose and the reshape are a view of it: no kernel copies it.
    assert!(
        code.contains("# Graph `attn`: 0 kernel(s), 1 step(s)."),
        "{code}"
    );
    assert!(
        code.contains("    return (reinterpret_tensor(buf_o, (2, 16, 128), (2048, 128, 1), 0),)"),
        "{code}"
    );
    // The scheduled program computes what the graph does.
    let (output, stdout, stderr) = run(host(&host_bin())
        .arg("eval")
        .arg(&graph)
        .args(["--device", "cuda", "--check"]));
    assert!(output.status.success(), "{stdout}\n{stderr}");
}

#[test]
fn a_convolution_result_is_bound_as_its_buffer_not_copied_into_one() {
    let tmp = TempDir::new("conv-bind");
    let out = tmp.path().join("cuda");
    let (ok, stderr) = compile(
        &repo_root().join("tests/graphs/conv1d_on_every_device.toml"),
        "cuda",
        &out,
        &[],
    );
    assert!(ok, "{stderr}");
    let code = std::fs::read_to_string(out.join("output_code.py")).unwrap();
    let calls: Vec<&str> = code
        .lines()
        .filter(|l| l.contains("torch.convolution("))
        .collect();
    assert_eq!(calls.len(), 4, "{code}");
    for call in calls {
        let (name, rest) = call.trim().split_once(" = ").expect("a binding");
        assert!(rest.starts_with("in_layout(torch.convolution("), "{call}");
        // No buffer of Kiln's is made for it first.
        assert!(
            !code.contains(&format!("{name} = empty_strided_device(")),
            "{name}:\n{code}"
        );
    }
    assert!(
        code.contains("in_layout = kiln_runtime.in_layout\n"),
        "{code}"
    );
}

#[test]
fn sixteen_bit_convolutions_run_channels_last_only_where_the_plugin_lists_their_dtype() {
    let tmp = TempDir::new("conv-channels-last");
    let graph = repo_root().join("tests/graphs/conv2d_channels_last_16bit.toml");
    for (device, file, listed) in [
        ("cuda", "output_code.py", true),
        ("gxu", "output_code.py", true),
        ("xpu", "output_code.py", false),
        ("cpu", "wrapper.cpp", false),
    ] {
        let out = tmp.path().join(device);
        let (ok, stderr) = compile(&graph, device, &out, &[]);
        assert!(ok, "{device}: {stderr}");
        let code = std::fs::read_to_string(out.join(file)).unwrap();
        // The weights laid out [O, kh, kw, I] once, in the weights file.
        assert_eq!(
            code.contains("const_w1_channels_last"),
            listed,
            "{device}:\n{code}"
        );
        if file == "output_code.py" {
            // The first convolution's result bound in channels-last strides
            // (NCHW [2, 8, 5, 5]) where listed, contiguous ones elsewhere.
            let strides = if listed {
                "(2, 8, 5, 5), (200, 1, 40, 8))"
            } else {
                "(2, 8, 5, 5), (200, 25, 5, 1))"
            };
            assert!(code.contains(strides), "{device}:\n{code}");
        }
    }
}

/// `--library` on the cpu builds wrapper.cpp into kiln.so beside it, exporting the C
/// interface docs/cpp-wrapper.md gives, through the build cache (a second compile finds
/// it there); a Triton device refuses it before writing anything.
#[test]
fn library_builds_the_cpu_wrapper_into_kiln_so_and_a_triton_device_refuses_it() {
    let tmp = TempDir::new("library");
    let graph = repo_root().join("examples/small_mlp.toml");
    let cache = tmp.subdir("cache");
    let mut said = vec![];
    for round in 0..2 {
        let out = tmp.path().join(format!("cpu{round}"));
        let (output, _, stderr) = run(host(&host_bin())
            .arg("compile")
            .arg(&graph)
            .args(["--device", "cpu", "--library", "-o"])
            .arg(&out)
            .env("KILN_CACHE_DIR", &cache)
            .env("KILN_CXXFLAGS", "-O1 -fopenmp"));
        assert!(output.status.success(), "{stderr}");
        let library = std::fs::read(out.join("kiln.so")).expect("kiln.so beside wrapper.cpp");
        assert_eq!(&library[..4], b"\x7fELF", "a shared library");
        for symbol in [
            "kiln_call",
            "kiln_load_weights",
            "kiln_num_outputs",
            "kiln_last_error",
        ] {
            assert!(
                library
                    .windows(symbol.len())
                    .any(|w| w == symbol.as_bytes()),
                "kiln.so exports {symbol}"
            );
        }
        said.push(stderr);
    }
    assert!(
        said[0].contains("(built)") && said[1].contains("found in the build cache"),
        "{said:?}"
    );
    let out = tmp.path().join("cuda");
    let (ok, stderr) = compile(&graph, "cuda", &out, &["--library"]);
    assert!(
        !ok && stderr.contains("--library") && stderr.contains("C++ device"),
        "{stderr}"
    );
    assert!(!out.exists(), "nothing written for a refused --library");
}

/// A decoding step's KV cache, kept as state: the Python wrapper writes the new keys and
/// values into the cache tensor the caller passes (one Kiln kernel per layer storing both
/// at the position: the query, key and value projection's kernel, its reductions' epilogue
/// with their bias adds; the copied slices only) and returns
/// that tensor as the new state; `state.json` lists the state; the C++ wrapper of a Triton
/// device runs the same kernels on each state kept in its output, the input copied there
/// first unless the caller passed one buffer as both.
#[test]
fn a_static_cache_is_written_in_place_and_listed_in_state_json() {
    let tmp = TempDir::new("state");
    let step = repo_root().join("tests/fixtures/decode/gpt2_static_cache_step.pt2");
    let out = tmp.path().join("cuda");
    let (ok, stderr) = compile(&step, "cuda", &out, &[]);
    assert!(ok, "{stderr}");
    let code = std::fs::read_to_string(out.join("output_code.py")).unwrap();
    for layer in 0..2 {
        let (k, v) = (2 + 2 * layer, 3 + 2 * layer);
        let caches = format!(
            ", c_model_transformer_h_{layer}_attn_lifted_tensor_{k}, \
             c_model_transformer_h_{layer}_attn_lifted_tensor_{v}, "
        );
        // (The second layer's kernel also takes in its layer norm, whose ops lead its name.)
        let launch = code
            .lines()
            .find(|l| l.contains("KERNELS.kiln_red_fused_") && l.contains(&caches))
            .unwrap_or_else(|| panic!("one kernel writing {caches:?} in:\n{code}"));
        assert!(launch.contains("cache_position"), "{launch}");
    }
    // Each row of 8 goes to the position along the cache's dim 2 (stride 8), masked to it
    // (whichever temporary holds the value stored).
    let stored = |t: usize| {
        format!(
            "tl.store(out_ptr0 + (64*((xindex) // 8) + ((xindex) % 8) + tmp{t}_at_i0 * 8), tmp{t}, \
             xmask & (0 <= tmp{t}_at_i0) & (tmp{t}_at_i0 < 8))"
        )
    };
    assert!((0..32).any(|t| code.contains(&stored(t))), "{code}");
    assert!(!code.contains(".index_copy_("), "{code}");
    assert!(
        !code.contains(".copy_(c_model"),
        "no cache copied whole:\n{code}"
    );
    let state: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("state.json")).unwrap()).unwrap();
    let rows = state["state"].as_array().unwrap();
    assert_eq!(rows.len(), 6);
    assert_eq!(
        rows[2]["name"],
        "model.transformer.h.0.attn.lifted_tensor_2"
    );
    assert_eq!(
        (rows[2]["input"].as_u64(), rows[2]["output"].as_u64()),
        (Some(4), Some(3))
    );
    assert_eq!(rows[2]["shape"], serde_json::json!([1, 2, 8, 8]));

    let cpp = tmp.path().join("cpp");
    let (ok, stderr) = compile(&step, "cuda", &cpp, &["--wrapper", "cpp"]);
    assert!(ok, "{stderr}");
    let wrapper = std::fs::read_to_string(cpp.join("wrapper.cpp")).unwrap();
    let kept = "void* b_c_model_transformer_h_0_attn_lifted_tensor_2 = outputs[3];\n        \
                if (outputs[3] != inputs[4] && 512 > 0) kilnCopyOnDevice(outputs[3], inputs[4], 512, stream);";
    assert_eq!(wrapper.matches(kept).count(), 1, "{wrapper}");
    // Six states (two counters, four caches), each kept so; nothing copied back after.
    assert_eq!(wrapper.matches("] != inputs[").count(), 6, "{wrapper}");
    assert!(!wrapper.contains("kiln_index_copy"), "{wrapper}");
    assert!(
        !wrapper.contains("kilnCopyOnDevice(outputs[3], b_"),
        "{wrapper}"
    );
    kiln_tests::names::cpp_syntax_check(&cpp.join("wrapper.cpp")).unwrap();
}

/// Small pointwise results that read nothing of each other, over spaces of different
/// sizes, run as one kernel on a Triton device, each part's loads and stores guarded to
/// its own space, and the kernel's results match PyTorch's under Triton's interpreter,
/// with the C++ wrapper taking the same kernel; the cpu's C++ keeps a kernel per result.
#[test]
fn small_independent_pointwise_kernels_run_as_one_guarded_kernel_on_triton_devices() {
    let tmp = TempDir::new("side-by-side");
    let graph = repo_root().join("tests/graphs/side_by_side_pointwise.toml");
    for device in ["cuda", "gxu"] {
        let out = tmp.path().join(device);
        let (ok, stderr) = compile(&graph, device, &out, &[]);
        assert!(ok, "{stderr}");
        let (output, stdout, stderr) = run(Command::new(torch_python())
            .arg(repo_root().join("tests/support/interpret_side_by_side.py"))
            .arg(out.join("output_code.py")));
        assert!(output.status.success(), "{device}: {stdout}\n{stderr}");
        assert_eq!(stdout.matches("ok: ").count(), 5, "{device}: {stdout}");
    }
    let cpp = tmp.path().join("cuda-cpp");
    let (ok, stderr) = compile(&graph, "cuda", &cpp, &["--wrapper", "cpp"]);
    assert!(ok, "{stderr}");
    let wrapper = std::fs::read_to_string(cpp.join("wrapper.cpp")).unwrap();
    assert_eq!(wrapper.matches("{ // kiln_poi_").count(), 1, "{wrapper}");
    let cpu = tmp.path().join("cpu");
    let (ok, stderr) = compile(&graph, "cpu", &cpu, &[]);
    assert!(ok, "{stderr}");
    let code = std::fs::read_to_string(cpu.join("wrapper.cpp")).unwrap();
    assert_eq!(code.matches("static void cpp_poi_").count(), 3, "{code}");
}

/// Attention of a query row or two over a long cache, with fewer (batch, head) pairs than
/// the device has units, splits its keys across programs (flash-decoding) and combines the
/// partial results in a second kernel, in both Triton wrappers, and the two kernels' results
/// match PyTorch's under Triton's interpreter; attention with enough pairs to fill the
/// device runs whole, and the cpu decomposes it.
#[test]
fn attention_over_a_long_cache_splits_its_keys_where_heads_leave_units_idle() {
    let tmp = TempDir::new("split-attention");
    let graph = repo_root().join("tests/graphs/attention_one_query_long_cache.toml");
    let out = tmp.path().join("gxu");
    let (ok, stderr) = compile(&graph, "gxu", &out, &[]);
    assert!(ok, "{stderr}");
    let code = std::fs::read_to_string(out.join("output_code.py")).unwrap();
    assert_eq!(
        code.matches("KERNELS.kiln_flash_combine_").count(),
        5,
        "{code}"
    );
    assert!(code.contains("SPLITS: tl.constexpr"), "{code}");
    // A query of one row takes the one-row kernel (its sums in registers, ranges of 32
    // keys, one warp per 32); the causal query of two rows, `tl.dot` tiles of 16 rows.
    assert_eq!(
        code.matches("# Split flash attention for one query row")
            .count(),
        4
    );
    assert_eq!(code.matches("\"BLOCK_M\": 1, \"BLOCK_N\": 32,").count(), 4);
    assert_eq!(code.matches("\"BLOCK_M\": 16,").count(), 1, "{code}");
    // The four kernels' and their combining kernel's.
    assert_eq!(code.matches("\"SPLITS\": 32,").count(), 5, "{code}");
    assert!(
        code.contains("buf_attention_splits = empty_strided_device("),
        "{code}"
    );
    let (output, stdout, stderr) = run(Command::new(torch_python())
        .arg(repo_root().join("tests/support/interpret_attention.py"))
        .arg(out.join("output_code.py")));
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert_eq!(stdout.matches("ok: ").count(), 11, "{stdout}");
    let cpp = tmp.path().join("gxu-cpp");
    let (ok, stderr) = compile(&graph, "gxu", &cpp, &["--wrapper", "cpp"]);
    assert!(ok, "{stderr}");
    let wrapper = std::fs::read_to_string(cpp.join("wrapper.cpp")).unwrap();
    assert_eq!(
        wrapper.matches("{ // kiln_flash_combine_").count(),
        5,
        "{wrapper}"
    );

    // 48 (batch, head) pairs fill the gxu's 48 units: no split.
    let text = std::fs::read_to_string(&graph)
        .unwrap()
        .replace("shape = [1, 4, 1, 64]", "shape = [12, 4, 1, 64]")
        .replace("shape = [1, 4, 1024, 64]", "shape = [12, 4, 1024, 64]")
        .replace("shape = [1, 2, 1024, 64]", "shape = [12, 2, 1024, 64]")
        .replace("shape = [1, 4, 2, 64]", "shape = [12, 4, 2, 64]");
    let wide = tmp.path().join("wide.toml");
    std::fs::write(&wide, text).unwrap();
    let out = tmp.path().join("wide");
    let (ok, stderr) = compile(&wide, "gxu", &out, &[]);
    assert!(ok, "{stderr}");
    let code = std::fs::read_to_string(out.join("output_code.py")).unwrap();
    assert!(!code.contains("kiln_flash_combine"), "{code}");
}

/// The split attention graph (tests/graphs) in `dtype`: in 16 bits without its boolean
/// mask's step `m` (a 16-bit attention's mask is made additive by a kernel of its own, which
/// `interpret_attention.py` does not run).
fn split_attention_graph_in(dtype: &str) -> String {
    let text = std::fs::read_to_string(
        repo_root().join("tests/graphs/attention_one_query_long_cache.toml"),
    )
    .unwrap()
    .replace("\"float32\"", &format!("\"{dtype}\""));
    if dtype == "float32" {
        return text;
    }
    let mask_step = "[[nodes]]\nname = \"m\"\nop = \"scaled_dot_product_attention\"\n\
                     args = [\"q\", \"k\", \"v\", \"keep\"]\n\n";
    assert!(text.contains(mask_step));
    text.replace(mask_step, "").replace(
        "[\"o\", \"g\", \"c\", \"m\", \"d\"]",
        "[\"o\", \"g\", \"c\", \"d\"]",
    )
}

/// The split attention graph in float16 and bfloat16 (its boolean mask's step left out: a
/// 16-bit attention's mask is made additive by a kernel of its own): the one-row kernel's
/// float32 sums and the `tl.dot` form's 16-bit products match PyTorch's attention under
/// Triton's interpreter, to within the dtype's roundings.
#[test]
fn split_attention_in_16_bits_matches_pytorch_under_the_interpreter() {
    let tmp = TempDir::new("split-attention-16");
    for dtype in ["float16", "bfloat16"] {
        let graph = tmp.path().join(format!("{dtype}.toml"));
        std::fs::write(&graph, split_attention_graph_in(dtype)).unwrap();
        let out = tmp.path().join(dtype);
        let (ok, stderr) = compile(&graph, "gxu", &out, &[]);
        assert!(ok, "{dtype}: {stderr}");
        let code = std::fs::read_to_string(out.join("output_code.py")).unwrap();
        assert_eq!(code.matches("\"BLOCK_M\": 16,").count(), 1, "{code}");
        let (output, stdout, stderr) = run(Command::new(torch_python())
            .arg(repo_root().join("tests/support/interpret_attention.py"))
            .arg(out.join("output_code.py")));
        assert!(output.status.success(), "{dtype}: {stdout}\n{stderr}");
        assert_eq!(stdout.matches(") matches PyTorch").count(), 4, "{stdout}");
        assert!(stdout.contains("ok: every attention step ran"), "{stdout}");
    }
}

/// The split attention graph at shapes drawn from a fixed seed: heads (2 to 8, the grouped
/// step's key/value heads a divisor of them), head sizes of 32, 64, 80 and 128, caches of
/// 129 to 2100 keys (so that every step splits), in all three dtypes (in 16 bits without
/// the boolean mask's step), on both devices of Triton kernels: every split step matches
/// PyTorch under Triton's interpreter.
#[test]
fn split_attention_at_random_shapes_matches_pytorch_under_the_interpreter() {
    use rand::{Rng, SeedableRng};
    let tmp = TempDir::new("split-attention-shapes");
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(31);
    for case in 0..6 {
        let heads: i64 = [2, 3, 4, 6, 8][rng.random_range(0..5)];
        let divisors: Vec<i64> = (1..=heads).filter(|d| heads % d == 0).collect();
        let kv_heads = divisors[rng.random_range(0..divisors.len())];
        let head: i64 = [32, 64, 80, 128][rng.random_range(0..4)];
        let keys: i64 = rng.random_range(129..=2100);
        let dtype = ["float32", "float16", "bfloat16"][case % 3];
        let device = ["gxu", "cuda"][case % 2];
        let variant = split_attention_graph_in(dtype)
            .replace("[1, 4, 1, 64]", &format!("[1, {heads}, 1, {head}]"))
            .replace("[1, 4, 1024, 64]", &format!("[1, {heads}, {keys}, {head}]"))
            .replace(
                "[1, 2, 1024, 64]",
                &format!("[1, {kv_heads}, {keys}, {head}]"),
            )
            .replace("[1, 4, 2, 64]", &format!("[1, {heads}, 2, {head}]"))
            .replace("[1, 1, 1, 1024]", &format!("[1, 1, 1, {keys}]"));
        let what = format!(
            "{heads} heads ({kv_heads} grouped) of {head} over {keys} keys, {dtype}, {device}"
        );
        let graph = tmp.path().join(format!("case{case}.toml"));
        std::fs::write(&graph, variant).unwrap();
        let out = tmp.path().join(format!("case{case}"));
        let (ok, stderr) = compile(&graph, device, &out, &[]);
        assert!(ok, "{what}: {stderr}");
        let (output, stdout, stderr) = run(Command::new(torch_python())
            .arg(repo_root().join("tests/support/interpret_attention.py"))
            .arg(out.join("output_code.py"))
            .arg(&graph));
        assert!(output.status.success(), "{what}: {stdout}\n{stderr}");
        let steps = if dtype == "float32" { 5 } else { 4 };
        assert_eq!(
            stdout.matches(") matches PyTorch").count(),
            steps,
            "{what}: {stdout}"
        );
    }
}

/// Each attention kernel of `out`'s output_code.py (compiled for cuda) with its PTX, as the
/// real Triton compiler makes it for sm_90 with dependent launch on.
fn attention_ptx(out: &Path, asm: &Path) -> Vec<(String, String)> {
    kernel_ptx(out, asm, "kiln_flash_attention_")
}

/// Each kernel of `out`'s output_code.py (compiled for cuda) whose name starts with
/// `prefix`, with its PTX, as the real Triton compiler makes it for sm_90 with dependent
/// launch on.
fn kernel_ptx(out: &Path, asm: &Path, prefix: &str) -> Vec<(String, String)> {
    let (output, stdout, stderr) = run(Command::new(python())
        .arg(repo_root().join("tools/check_triton.py"))
        .arg("--asm")
        .arg(asm)
        .arg(out.join("output_code.py")));
    assert!(output.status.success(), "{stdout}\n{stderr}");
    let folder = asm.join(out.file_name().unwrap());
    let mut kernels = Vec::new();
    for entry in std::fs::read_dir(folder).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_string_lossy().to_string();
        if name.starts_with(prefix) {
            kernels.push((name, std::fs::read_to_string(&path).unwrap()));
        }
    }
    kernels
}

/// On a target that launches kernels as programmatic dependents (cuda, sm_90), the one-row
/// split attention kernel prefetches its range's keys and values into L2 before it waits for
/// the kernel before it, where the launch's keys and values fit a sixth of the L2 the cuda
/// plugin reports (50 MiB without a driver: an H100's), and the `tl.dot` form
/// does not: read in the PTX the real Triton compiler makes of each kernel. Over a cache 16
/// times as long (16 MiB of keys and values), none prefetches.
#[test]
fn one_row_split_attention_prefetches_its_keys_and_values_before_its_wait() {
    let tmp = TempDir::new("split-prefetch");
    let graph = repo_root().join("tests/graphs/attention_one_query_long_cache.toml");
    let out = tmp.path().join("cuda");
    let (ok, stderr) = compile(&graph, "cuda", &out, &[]);
    assert!(ok, "{stderr}");
    let code = std::fs::read_to_string(out.join("output_code.py")).unwrap();
    let (mut one_row, mut tiles) = (0, 0);
    for (name, ptx) in attention_ptx(&out, &tmp.path().join("asm")) {
        let wait = ptx.find("griddepcontrol.wait").expect("a dependent wait");
        let text = &code[code.find(&format!("def {name}(")).unwrap()..];
        let text = &text[..text[1..].find("\ndef ").map_or(text.len(), |n| n + 1)];
        if text.contains("# Split flash attention for one query row") {
            one_row += 1;
            // The keys' and the values' prefetches, all before the wait.
            assert!(ptx.matches("prefetch.global.L2").count() >= 2, "{name}");
            assert!(ptx.rfind("prefetch.global.L2").unwrap() < wait, "{name}");
        } else {
            tiles += 1;
            assert!(!ptx.contains("prefetch.global.L2"), "{name}");
        }
    }
    assert_eq!((one_row, tiles), (4, 1), "{code}");

    let long = tmp.path().join("long.toml");
    let text = std::fs::read_to_string(&graph).unwrap();
    std::fs::write(
        &long,
        text.replace("1024]", "16384]")
            .replace("1024, 64]", "16384, 64]"),
    )
    .unwrap();
    let out = tmp.path().join("long");
    let (ok, stderr) = compile(&long, "cuda", &out, &[]);
    assert!(ok, "{stderr}");
    let code = std::fs::read_to_string(out.join("output_code.py")).unwrap();
    assert_eq!(code.matches("\"PREFETCH\": 0").count(), 5, "{code}");
    for (name, ptx) in attention_ptx(&out, &tmp.path().join("asm")) {
        assert!(!ptx.contains("prefetch.global.L2"), "{name}");
    }
}

/// A decoding step's mask, made by a kernel of the step from the position (`arange <=
/// position`, tests/graphs/attention_position_mask): the split attention reads it before its
/// wait and reads no key or value past the position, and the mask's kernel waits without
/// letting the kernels after it start early (so that it has finished when they start). Run
/// under Triton's interpreter, the step matches PyTorch with the cache past the position NaN,
/// in float32 (a boolean mask) and bfloat16 (the mask made additive by its kernel).
/// In the PTX of sm_90 the mask's kernel waits but never triggers its dependents, and the
/// attention loads the mask before its wait. A mask that is an input (which the work before
/// the call may still be writing) is read after the wait, as before.
#[test]
fn split_attention_skips_the_keys_a_mask_its_step_made_removes() {
    let tmp = TempDir::new("early-mask");
    let graph = repo_root().join("tests/graphs/attention_position_mask.toml");
    let out = tmp.path().join("cuda");
    let (ok, stderr) = compile(&graph, "cuda", &out, &[]);
    assert!(ok, "{stderr}");
    let code = std::fs::read_to_string(out.join("output_code.py")).unwrap();
    let kernels = fused_kernels(&code);
    assert_eq!(kernels.len(), 1, "{code}");
    let mask = kernels[0];
    assert!(mask.contains("kiln_dependent_wait_whole()"), "{mask}");
    assert!(!mask.contains("kiln_dependent_wait()"), "{mask}");
    // One load of the mask a range of 32 keys.
    assert!(code.contains("\"MASK_EARLY\": 32,"), "{code}");
    let (output, stdout, stderr) = run(Command::new(torch_python())
        .arg(repo_root().join("tests/support/interpret_position_mask.py"))
        .arg(out.join("output_code.py")));
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert_eq!(stdout.matches("ok: position").count(), 4, "{stdout}");
    // In bfloat16 the mask is made additive by its kernel, which waits so too.
    let bf16 = tmp.path().join("bf16.toml");
    let text = std::fs::read_to_string(&graph).unwrap();
    std::fs::write(&bf16, text.replace("\"float32\"", "\"bfloat16\"")).unwrap();
    let out16 = tmp.path().join("cuda-bf16");
    let (ok, stderr) = compile(&bf16, "cuda", &out16, &[]);
    assert!(ok, "{stderr}");
    let code16 = std::fs::read_to_string(out16.join("output_code.py")).unwrap();
    assert!(code16.contains("\"MASK_KIND\": 2,"), "{code16}");
    assert!(code16.contains("\"MASK_EARLY\": 32,"), "{code16}");
    let (output, stdout, stderr) = run(Command::new(torch_python())
        .arg(repo_root().join("tests/support/interpret_position_mask.py"))
        .arg(out16.join("output_code.py")));
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert_eq!(
        stdout.matches("(torch.bfloat16): matches").count(),
        4,
        "{stdout}"
    );

    let asm = tmp.path().join("asm");
    let ptx = kernel_ptx(&out, &asm, "kiln_");
    let (name, whole) = ptx
        .iter()
        .find(|(name, _)| code.contains(&format!("def {name}(in_ptr0")))
        .expect("the mask kernel's PTX");
    assert!(whole.contains("griddepcontrol.wait"), "{name}");
    assert!(
        !whole.contains("griddepcontrol.launch_dependents"),
        "{name}"
    );
    let (name, attention) = ptx
        .iter()
        .find(|(name, _)| name.starts_with("kiln_flash_attention_"))
        .expect("the attention kernel's PTX");
    let wait = attention
        .find("griddepcontrol.wait")
        .expect("a dependent wait");
    assert!(
        attention.find("ld.global.cg").is_some_and(|at| at < wait),
        "{name}"
    );

    // The mask an input: read after the wait.
    let input = repo_root().join("tests/graphs/attention_one_query_long_cache.toml");
    let out = tmp.path().join("input");
    let (ok, stderr) = compile(&input, "cuda", &out, &[]);
    assert!(ok, "{stderr}");
    let code = std::fs::read_to_string(out.join("output_code.py")).unwrap();
    assert_eq!(code.matches("\"MASK_EARLY\": 0,").count(), 5, "{code}");
    assert!(!code.contains("kiln_dependent_wait_whole"), "{code}");
}

/// A BERT exported with a dynamic batch and sequence length (tests/fixtures/dynamic) compiles
/// at the sizes `--specialize` gives: the cpu's C++ builds, runs and matches the reference
/// there, a Triton device's scheduled program matches it and its kernels compile, and the
/// compile says which sizes it took.
#[test]
fn a_dynamic_export_compiles_at_the_sizes_specialize_gives() {
    let tmp = TempDir::new("dynamic");
    let bert = repo_root().join("tests/fixtures/dynamic/bert.pt2");
    let cases: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(repo_root().join("tests/fixtures/dynamic/cases.json")).unwrap(),
    )
    .unwrap();
    let (batch, seq) = (
        cases["bert"]["dims"]["input_ids:0"].as_str().unwrap(),
        cases["bert"]["dims"]["input_ids:1"].as_str().unwrap(),
    );
    let sizes = [format!("{batch}=3"), format!("{seq}=33")];
    let specialize = ["--specialize", &sizes[0], "--specialize", &sizes[1]];
    let (output, stdout, stderr) = run(host(&host_bin())
        .arg("run")
        .arg(&bert)
        .args(["--device", "cpu", "--check"])
        .args(specialize)
        .env("KILN_CACHE_DIR", tmp.subdir("cache")));
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("check: all 1 output(s) match the reference"),
        "{stdout}"
    );
    let took = format!(
        "compiled at {batch} = 3 (1..=16), {seq} = 33 (2..=64), the sizes --specialize gives"
    );
    assert!(stderr.contains(&took), "{stderr}");
    let (output, stdout, stderr) = run(host(&host_bin())
        .arg("eval")
        .arg(&bert)
        .args(["--device", "cuda", "--check"])
        .args(specialize));
    assert!(output.status.success(), "{stdout}\n{stderr}");
    let out = tmp.path().join("code");
    let (output, _, stderr) = run(host(&host_bin())
        .arg("compile")
        .arg(&bert)
        .args(["--device", "cuda", "-o"])
        .arg(&out)
        .args(specialize));
    assert!(output.status.success(), "{stderr}");
    let code = std::fs::read_to_string(out.join("output_code.py")).unwrap();
    assert!(code.contains("(3, 33)"), "the inputs' sizes:\n{code}");
    let python = std::env::var("KILN_PYTHON").unwrap_or_else(|_| "python3".to_string());
    let (output, stdout, stderr) = run(std::process::Command::new(python)
        .arg(repo_root().join("tools/check_triton.py"))
        .arg(&out));
    assert!(output.status.success(), "{stderr}\n{stdout}");
}

/// The MLP with layer norm exported with a dynamic batch and sequence length, compiled
/// once with `--dynamic` for a Triton device: `output_code.py` reads both sizes from its
/// input at each call (checked against their ranges and the input's layout), sizes its
/// buffers and launches from them, and its kernels, which take the row counts and the
/// sizes they index with as arguments, compile with Triton; so do GPT-2's and BERT's.
/// The cpu's `wrapper.cpp` takes the sizes at each call too (and a Triton device's C++
/// wrapper: `aot.rs`).
#[test]
fn a_dynamic_export_compiles_once_for_every_size_in_its_range() {
    let tmp = TempDir::new("dynamic-once");
    let mlp = repo_root().join("tests/fixtures/dynamic/mlp_ln.pt2");
    let cases: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(repo_root().join("tests/fixtures/dynamic/cases.json")).unwrap(),
    )
    .unwrap();
    let (batch, seq) = (
        cases["mlp_ln"]["dims"]["x:0"].as_str().unwrap(),
        cases["mlp_ln"]["dims"]["x:1"].as_str().unwrap(),
    );
    for device in ["cuda", "gxu"] {
        let out = tmp.path().join(device);
        let (ok, stderr) = compile(&mlp, device, &out, &["--dynamic"]);
        assert!(ok, "{device}: {stderr}");
        let code = std::fs::read_to_string(out.join("output_code.py")).unwrap();
        for want in [
            format!("SIZE_SYMBOLS = ((\"ks0\", \"{batch}\", 0, 0, 1, 16), (\"ks1\", \"{seq}\", 0, 1, 2, 64))"),
            "return ((ks0, ks1, 32),), ((32*ks1, 32, 1),)".to_string(),
            "(ks0, ks1,) = check((x,)) if check is not None else (x.shape[0], x.shape[1],)"
                .to_string(),
            "empty_strided_device((ks0*ks1, 64), (64, 1), torch.float32)".to_string(),
            "reinterpret_tensor(x, (ks0*ks1, 32), (32, 1), 0)".to_string(),
            "KERNEL_LAUNCHES[\"".to_string(),
            "kiln_runtime.SizedLaunch(KERNELS, ".to_string(),
        ] {
            assert!(code.contains(&want), "{device}: no `{want}` in\n{code}");
        }
        // The row counts come from the launch: no kernel fixes them.
        assert!(!code.contains("xnumel = "), "{code}");
    }
    // GPT-2 and BERT (attention, embeddings, positions from `arange`, a causal mask
    // from `cumsum` and `diff`) compile once too: their attention is Kiln's kernel,
    // taking the call's lengths and strides, on a grid per bucket of programs, or the
    // library's, whichever the first call of each bucket of sizes measures faster.
    for model in ["gpt2", "bert"] {
        let archive = repo_root().join(format!("tests/fixtures/dynamic/{model}.pt2"));
        let out = tmp.path().join(model);
        let (ok, stderr) = compile(&archive, "cuda", &out, &["--dynamic"]);
        assert!(ok, "{model}: {stderr}");
        let code = std::fs::read_to_string(out.join("output_code.py")).unwrap();
        assert!(
            code.contains(" else KERNELS.kiln_flash_attention_1)[grid_of(KERNEL_GRIDS[0], "),
            "{code}"
        );
        // One of Kiln's tile variants (the hint's, and the tiles for 64 query rows,
        // each with its twin for lengths of multiples of 16) or the library's, as
        // measured once per bucket of sizes.
        assert!(
            code.contains("= ATTENTION.run(0, (lambda _kiln_out: _kiln_at[")
                && code.contains("            size_bucket((ks0, ks1)) + (ks1 % 16 == 0,),\n"),
            "{code}"
        );
        // What the call's sizes choose is computed once a call, before the first step:
        // each sized kernel's launch and each tile variant's, and attention's bucket,
        // however many layers launch them; equal grid tables are written once.
        let per_call = code
            .split("        _kiln_at = (\n")
            .nth(1)
            .and_then(|rest| rest.split("\n        )\n").next())
            .unwrap_or_else(|| panic!("{model}: no `_kiln_at` in\n{code}"));
        let items: Vec<&str> = per_call.lines().map(str::trim).collect();
        let distinct: HashSet<&str> = items.iter().copied().collect();
        assert_eq!(items.len(), distinct.len(), "{per_call}");
        let launches = code.matches("KERNEL_LAUNCHES[\"").count();
        let sized = items
            .iter()
            .filter(|i| i.starts_with("KERNEL_LAUNCHES[\""))
            .count();
        assert!(
            sized > 0 && launches == sized,
            "{launches} sized launches, {sized} once a call"
        );
        // Every bucket is computed there, once.
        assert_eq!(
            code.matches("size_bucket((").count(),
            items.iter().filter(|i| i.contains("size_bucket((")).count(),
            "{code}"
        );
        let tables = code
            .split("KERNEL_GRIDS = (\n")
            .nth(1)
            .and_then(|rest| rest.split("\n)\n").next())
            .unwrap_or_default()
            .lines()
            .count();
        let variants = code
            .lines()
            .find(|l| l.contains("= ATTENTION.run(0, "))
            .map_or(0, |l| l.matches("lambda _kiln_out: ").count());
        assert!(
            (1..=variants).contains(&tables),
            "{variants} tile variants, {tables} tables"
        );
        // A float32 product with its bias chooses the library's epilogue or an add per
        // bucket of the call's sizes too.
        if model == "bert" {
            assert!(
                items.contains(&"kiln_runtime.size_bucket((ks0, ks1)),")
                    && code
                        .lines()
                        .filter(|l| l.contains("BIASES.run("))
                        .all(|l| l.contains(", _kiln_at[") && l.ends_with("])")),
                "{code}"
            );
        }
        // Each tile variant has a twin compiled for a length of a multiple of 16 (a
        // divisibility guard), launched where the call's length is one.
        assert!(
            code.contains("(KERNELS.kiln_flash_attention_0 if ks1 % 16 == 0 else KERNELS.kiln_flash_attention_1)"),
            "{code}"
        );
    }
    let python = std::env::var("KILN_PYTHON").unwrap_or_else(|_| "python3".to_string());
    let (output, stdout, stderr) = run(std::process::Command::new(python)
        .arg(repo_root().join("tools/check_triton.py"))
        .arg(tmp.path()));
    assert!(output.status.success(), "{stderr}\n{stdout}");
    // The cpu device's C++ takes the sizes at each call too.
    let (ok, stderr) = compile(&mlp, "cpu", &tmp.path().join("cpu"), &["--dynamic"]);
    assert!(ok, "{stderr}");
    let code = std::fs::read_to_string(tmp.path().join("cpu/wrapper.cpp")).unwrap();
    for want in [
        "extern \"C\" int kiln_call_shaped(const int64_t* const* input_shapes,",
        "kiln_size_out_of_range(0, \"x\", 0, ks[0], ",
        "const int64_t ks0, const int64_t ks1)",
    ] {
        assert!(code.contains(want), "no `{want}` in\n{code}");
    }
    // A dim of an export of static shapes made dynamic on the command line.
    let fixed = repo_root().join("tests/fixtures/pt2/mlp.pt2");
    let out = tmp.path().join("marked");
    let (ok, stderr) = compile(&fixed, "cuda", &out, &["--dynamic", "x:0=1..64"]);
    assert!(ok, "{stderr}");
    let code = std::fs::read_to_string(out.join("output_code.py")).unwrap();
    assert!(
        code.contains("SIZE_SYMBOLS = ((\"ks0\", \"x:0\", 0, 0, 1, 64),)"),
        "{code}"
    );
    let (ok, stderr) = compile(&fixed, "cuda", &out, &["--dynamic", "x0"]);
    assert!(
        !ok && stderr.contains("expected INPUT:DIM=LO..HI"),
        "{stderr}"
    );
    // The flag before the file takes the file as its value: said so.
    let (output, _, stderr) = run(host(&host_bin())
        .arg("compile")
        .arg("--dynamic")
        .arg(&fixed)
        .args(["--device", "cuda"]));
    assert!(
        !output.status.success() && stderr.contains("is the graph file: put `--dynamic` after it"),
        "{stderr}"
    );
}

/// A one-row product after an RMS norm or a layer norm of its row takes the norm into
/// its kernel on a Triton device (`fuse::takes_in`): one launch a norm fewer in a
/// decoding step. The norm's reductions are computed on one row of each program's
/// tile (`tl.where(rmask, ...)`), the product's on the whole tile. A norm whose output
/// is also read elsewhere keeps a kernel of its own.
#[test]
fn a_one_row_product_takes_in_the_norm_of_its_row() {
    let tmp = TempDir::new("norm-into-product");
    let graph = repo_root().join("tests/graphs/norm_into_one_row_product.toml");
    let out = tmp.path().join("cuda");
    let (ok, stderr) = compile(&graph, "cuda", &out, &[]);
    assert!(ok, "{stderr}");
    let code = std::fs::read_to_string(out.join("output_code.py")).unwrap();
    let kernels = fused_kernels(&code);
    assert_eq!(kernels.len(), 4, "{code}");
    // The norm's reductions, then the product over the normed row, whose weight each
    // program reads one output column of: the RMS norm's one, the layer norm's two
    // (its mean, then its variance about it).
    let fused: Vec<&&str> = kernels
        .iter()
        .filter(|k| k.contains("96*xindex + rindex") && k.contains("rsqrt"))
        .collect();
    assert_eq!(fused.len(), 2, "{code}");
    for (kernel, norm_reductions) in fused.iter().zip([1, 2]) {
        assert_eq!(
            kernel.matches("tl.sum(").count(),
            norm_reductions + 1,
            "{kernel}"
        );
        assert_eq!(
            kernel.matches("tl.sum(tl.where(rmask, ").count(),
            norm_reductions,
            "{kernel}"
        );
        assert_eq!(
            kernel.matches("tl.sum(tl.where(xmask & rmask, ").count(),
            1,
            "{kernel}"
        );
    }
    // The norm also read as an output is a kernel of its own, without a product.
    assert_eq!(
        kernels
            .iter()
            .filter(|k| k.contains("rsqrt") && !k.contains("xindex + rindex"))
            .count(),
        1,
        "{code}"
    );
}

/// A product of one row on a Triton device is a reduction (`few_rows`); its activation,
/// a gelu read by every one of the product's 32 output columns, is computed once into
/// memory rather than again in each column's row of the reduction.
#[test]
fn a_one_row_product_is_a_reduction_that_reads_its_computed_operand_from_memory() {
    let tmp = TempDir::new("few-rows");
    let values: Vec<String> = (0..32 * 64)
        .map(|i| format!("{}", ((i * 7) % 13) as f64 / 8.0 - 0.75))
        .collect();
    let graph = tmp.path().join("row.toml");
    std::fs::write(
        &graph,
        format!(
            "format = \"kiln-graph/1\"\nname = \"row\"\noutputs = [\"y\"]\n\n\
             [[inputs]]\nname = \"x\"\nshape = [1, 64]\ndtype = \"float32\"\n\n\
             [[constants]]\nname = \"w\"\nshape = [32, 64]\ndtype = \"float32\"\nvalues = [{}]\n\n\
             [[nodes]]\nname = \"g\"\nop = \"gelu\"\nargs = [\"x\"]\n\n\
             [[nodes]]\nname = \"y\"\nop = \"linear\"\nargs = [\"g\", \"w\"]\n",
            values.join(", ")
        ),
    )
    .unwrap();
    let out = tmp.path().join("cuda");
    let (ok, stderr) = compile(&graph, "cuda", &out, &[]);
    assert!(ok, "{stderr}");
    let code = std::fs::read_to_string(out.join("output_code.py")).unwrap();
    assert!(!code.contains("torch.mm("), "no library product:\n{code}");
    let kernels = fused_kernels(&code);
    let reduction = kernels
        .iter()
        .find(|k| k.contains("tl.sum") && k.contains("64*xindex + rindex"))
        .unwrap_or_else(|| panic!("a reduction reading the weight row by row:\n{code}"));
    assert!(
        !reduction.contains("erf"),
        "the gelu is not recomputed per column:\n{reduction}"
    );
    assert!(
        kernels.iter().any(|k| k.contains("libdevice.erf")),
        "{code}"
    );
}

/// On a Triton device, each kernel waits for the kernel launched before it
/// (`kiln_dependent_wait`) after its loads of constants, so that launched as a
/// programmatic dependent (CUDA's, from sm_90) it reads its weight while that kernel
/// still runs: at the tile's start in a persistent product, inside the first loop
/// over the row in a looped one (rows of more than 4096; shorter ones are held whole),
/// the residual it adds read after it, never after a store. A kernel of very many programs is launched plainly, without the wait.
/// Triton compiles the wait for sm_90 (launched with `launch_pdl`), and to nothing for
/// sm_80 or with KILN_PDL=0.
#[test]
fn kernels_wait_for_the_kernel_before_them_after_their_loads_of_constants() {
    let tmp = TempDir::new("dependent-launch");
    let values = |n: usize| -> String {
        (0..n)
            .map(|i| format!("{}", ((i * 7) % 13) as f64 / 8.0 - 0.75))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let graph = tmp.path().join("dependent.toml");
    std::fs::write(
        &graph,
        format!(
            "format = \"kiln-graph/1\"\nname = \"dependent\"\noutputs = [\"y\", \"z\", \"q\"]\n\n\
             [[inputs]]\nname = \"x\"\nshape = [1, 5000]\ndtype = \"float32\"\n\n\
             [[inputs]]\nname = \"r\"\nshape = [1, 24]\ndtype = \"float32\"\n\n\
             [[inputs]]\nname = \"x2\"\nshape = [1, 64]\ndtype = \"float32\"\n\n\
             [[inputs]]\nname = \"b\"\nshape = [40000000]\ndtype = \"float32\"\n\n\
             [[constants]]\nname = \"w\"\nshape = [24, 5000]\ndtype = \"float32\"\nvalues = [{}]\n\n\
             [[constants]]\nname = \"v\"\nshape = [16, 64]\ndtype = \"float32\"\nvalues = [{}]\n\n\
             [[nodes]]\nname = \"p\"\nop = \"linear\"\nargs = [\"x\", \"w\"]\n\n\
             [[nodes]]\nname = \"y\"\nop = \"add\"\nargs = [\"p\", \"r\"]\n\n\
             [[nodes]]\nname = \"z\"\nop = \"linear\"\nargs = [\"x2\", \"v\"]\n\n\
             [[nodes]]\nname = \"q\"\nop = \"relu\"\nargs = [\"b\"]\n",
            values(24 * 5000),
            values(16 * 64)
        ),
    )
    .unwrap();
    let out = tmp.path().join("cuda");
    let (ok, stderr) = compile(&graph, "cuda", &out, &[]);
    assert!(ok, "{stderr}");
    let code = std::fs::read_to_string(out.join("output_code.py")).unwrap();
    let kernels = fused_kernels(&code);
    let kernel = |mark: &str| -> &str {
        kernels
            .iter()
            .find(|k| k.contains(mark))
            .unwrap_or_else(|| panic!("no kernel with {mark}:\n{code}"))
    };
    let at = |k: &str, text: &str| k.find(text).unwrap_or_else(|| panic!("{text}:\n{k}"));
    let wait = "kiln_dependent_wait()";
    // The looped product: its weight's step, the wait, then the row it multiplies.
    let looped = kernel("5000*xindex + rindex");
    assert!(at(looped, "for roffset") < at(looped, "5000*xindex + rindex"));
    assert!(
        at(looped, "5000*xindex + rindex") < at(looped, wait),
        "{looped}"
    );
    let after = &looped[at(looped, wait)..];
    assert!(
        after.contains("tl.load(in_ptr"),
        "the row is read after the wait:\n{looped}"
    );
    assert!(!looped[..at(looped, wait)].contains("tl.store"), "{looped}");
    assert_eq!(looped.matches(wait).count(), 1, "{looped}");
    // The residual is read after the loop (nothing before it but the weight).
    let residual = at(looped, "red0 = ");
    assert!(looped[residual..].contains("tl.load(in_ptr"), "{looped}");
    // The persistent product: the weight's tile first, at the tile's start.
    let persistent = kernel("64*xindex + rindex");
    assert!(!persistent.contains("for roffset"), "{persistent}");
    assert!(
        at(persistent, "64*xindex + rindex") < at(persistent, wait),
        "{persistent}"
    );
    assert!(
        !persistent[..at(persistent, wait)].contains("tl.store"),
        "{persistent}"
    );
    // The relu over 40 M elements has too many programs: launched plainly.
    let relu = kernel("40000000");
    assert!(!relu.contains(wait), "{relu}");
    let meta: Vec<&str> = code
        .lines()
        .filter(|l| l.starts_with("    \"kiln_") && l.contains("\"signature\""))
        .collect();
    assert_eq!(meta.len(), 3, "{code}");
    for line in &meta {
        let name = line.trim().split('"').nth(1).unwrap();
        let plain = relu.contains(&format!("def {name}("));
        let want = if plain {
            "\"dependent\": False"
        } else {
            "\"dependent\": True"
        };
        assert!(line.contains(want), "{line}");
    }

    // Triton: the wait for sm_90, launched as a dependent; nothing for sm_80 or with
    // KILN_PDL=0.
    let script = repo_root().join("tests/support/kernel_runtime.py");
    let ptx = |arch: &str, pdl: &str| -> Vec<(String, usize, String)> {
        let (output, stdout, stderr) = run(Command::new(python())
            .env("KILN_PDL", pdl)
            .arg(&script)
            .arg(out.join("output_code.py"))
            .args(["--ptx", arch]));
        assert!(output.status.success(), "{stderr}\n{stdout}");
        stdout
            .lines()
            .map(|l| {
                let w: Vec<&str> = l.split(' ').collect();
                (w[0].to_string(), w[1].parse().unwrap(), w[2].to_string())
            })
            .collect()
    };
    let hopper = ptx("90", "1");
    assert_eq!(hopper.len(), 3, "{hopper:?}");
    for (name, waits, launch) in &hopper {
        if relu.contains(&format!("def {name}(")) {
            assert_eq!((*waits, launch.as_str()), (0, "plain"), "{name}");
        } else {
            assert!(*waits >= 2, "{name}: {waits}");
            assert_eq!(launch, "dependent", "{name}");
        }
    }
    for (arch, pdl) in [("80", "1"), ("90", "0")] {
        for (name, waits, launch) in ptx(arch, pdl) {
            assert_eq!(
                (waits, launch.as_str()),
                (0, "plain"),
                "{name} sm_{arch} KILN_PDL={pdl}"
            );
        }
    }
}

/// A mixture of experts' grouped product of a static number of rows (20) is one launch of
/// Kiln's kernel in both Triton wrappers, its sizes and strides compiled in; over any number
/// of rows (`--dynamic`) it is the reduction over K, which reads each row's group's matrix
/// through an index. Each form's program matches the reference interpreter on every device.
#[test]
fn grouped_products_launch_kilns_kernel_at_static_sizes_and_reduce_over_any_rows() {
    let tmp = TempDir::new("grouped-mm");
    let graph = repo_root().join("tests/graphs/grouped_mm_rows_of_any_count.toml");
    let out = tmp.path().join("python");
    let (ok, stderr) = compile(&graph, "cuda", &out, &[]);
    assert!(ok, "{stderr}");
    let code = std::fs::read_to_string(out.join("output_code.py")).unwrap();
    for want in [
        "def kiln_grouped_mm_0(A, B, O, C, m: tl.constexpr,",
        "KERNELS.kiln_grouped_mm_0[(1, 1, 5)](a, w, offs, buf_h, 20, 10, 8, ",
    ] {
        assert!(code.contains(want), "no `{want}` in\n{code}");
    }
    let cpp = tmp.path().join("cpp");
    let (ok, stderr) = compile(&graph, "cuda", &cpp, &["--wrapper", "cpp"]);
    assert!(ok, "{stderr}");
    let wrapper = std::fs::read_to_string(cpp.join("wrapper.cpp")).unwrap();
    assert!(wrapper.contains("{ // kiln_grouped_mm_0"), "{wrapper}");
    let dynamic = tmp.path().join("dynamic");
    let (ok, stderr) = compile(&graph, "cuda", &dynamic, &["--dynamic"]);
    assert!(ok, "{stderr}");
    let code = std::fs::read_to_string(dynamic.join("output_code.py")).unwrap();
    assert!(!code.contains("kiln_grouped_mm"), "{code}");
    for device in ["cuda", "gxu", "cpu"] {
        for extra in [&[][..], &["--dynamic"][..]] {
            let (output, stdout, stderr) = run(host(&host_bin())
                .arg("eval")
                .arg(&graph)
                .args(["--device", device, "--check"])
                .args(extra));
            assert!(
                output.status.success(),
                "{device} {extra:?}:\n{stdout}\n{stderr}"
            );
        }
    }
}

/// A sort of 8192 elements and the inverse of its permutation (a mixture of experts'
/// (token, expert) pairs of a long prefill, sorted by expert): Kiln's sort kernels, runs
/// of 256 sorted and merged in five pairwise passes, with no buffer of pairs of elements
/// and no reduction comparing every pair, and the inverse (`inv[perm] = arange`) a
/// scatter (`index_copy`); a longer dim than Kiln sorts is refused with the limit named.
#[test]
fn long_sorts_run_kilns_sort_kernels_without_a_buffer_of_pairs() {
    let tmp = TempDir::new("long-sort");
    let graph = |n: usize| {
        format!(
            "format = \"kiln-graph/1\"\nname = \"sort\"\noutputs = [\"v\", \"inv\"]\n\n\
             [[inputs]]\nname = \"x\"\nshape = [{n}]\ndtype = \"int64\"\n\n\
             [[nodes]]\nname = \"s\"\nop = \"sort\"\nargs = [\"x\"]\n\n\
             [[nodes]]\nname = \"v\"\nop = \"getitem\"\nargs = [\"s\", 0]\n\n\
             [[nodes]]\nname = \"p\"\nop = \"getitem\"\nargs = [\"s\", 1]\n\n\
             [[nodes]]\nname = \"e\"\nop = \"empty_like\"\nargs = [\"p\"]\n\n\
             [[nodes]]\nname = \"r\"\nop = \"arange\"\nargs = [{n}]\n\n\
             [[nodes]]\nname = \"inv\"\nop = \"index_put\"\nargs = [\"e\", [\"p\"], \"r\"]\n"
        )
    };
    let path = tmp.path().join("sort.toml");
    std::fs::write(&path, graph(8192)).unwrap();
    let out = tmp.path().join("out");
    let (ok, stderr) = compile(&path, "cuda", &out, &[]);
    assert!(ok, "{stderr}");
    let code = std::fs::read_to_string(out.join("output_code.py")).unwrap();
    let most = code
        .lines()
        .filter_map(|l| l.split("empty_strided_device((").nth(1))
        .map(|shape| {
            let dims = shape.split(')').next().unwrap_or("");
            dims.split(',')
                .filter_map(|d| d.trim().parse::<u64>().ok())
                .product::<u64>()
        })
        .max()
        .expect("buffers");
    assert!(most <= 16 * 8192, "a buffer of {most} elements in\n{code}");
    let launches = |kernel: &str| code.matches(&format!("KERNELS.{kernel}")).count();
    assert_eq!(launches("kiln_sort_runs_"), 1, "{code}");
    assert_eq!(launches("kiln_merge_runs_"), 5, "8192 = 256 * 2^5: {code}");
    assert_eq!(
        launches("kiln_red_"),
        0,
        "no reduction over pairs in\n{code}"
    );
    let scatters = code.matches(".index_copy_(").count();
    assert_eq!(scatters, 1, "the inverse as a scatter in\n{code}");
    std::fs::write(&path, graph(1 << 25)).unwrap();
    let (ok, stderr) = compile(&path, "cuda", &tmp.path().join("big"), &[]);
    assert!(
        !ok && stderr.contains("Kiln sorts a dim of at most 16777216"),
        "{stderr}"
    );
}

/// A grouped product's operands that PyTorch's would refuse are errors that say what is
/// wrong: no groups, offsets that do not count the weights' groups, offsets of another
/// dtype, and operands of different dtypes.
#[test]
fn grouped_product_errors_name_the_operand_and_what_it_must_be() {
    let tmp = TempDir::new("grouped-mm-errors");
    let graph = |w: &str, offs: &str, a_dtype: &str| {
        format!(
            "format = \"kiln-graph/1\"\nname = \"g\"\noutputs = [\"h\"]\n\n\
             [[inputs]]\nname = \"a\"\nshape = [4, 8]\ndtype = \"{a_dtype}\"\n\n\
             [[inputs]]\nname = \"w\"\nshape = {w}\ndtype = \"float32\"\n\n\
             [[inputs]]\nname = \"offs\"\n{offs}\n\n\
             [[nodes]]\nname = \"h\"\nop = \"_grouped_mm\"\nargs = [\"a\", \"w\", \"offs\"]\n"
        )
    };
    for (w, offs, a_dtype, want) in [
        (
            "[0, 8, 10]",
            "shape = [0]\ndtype = \"int32\"",
            "float32",
            "`offs` is empty",
        ),
        (
            "[2, 8, 10]",
            "shape = [3]\ndtype = \"int32\"",
            "float32",
            "3 offsets for the 2 groups of `mat2`",
        ),
        (
            "[2, 8, 10]",
            "shape = [2]\ndtype = \"int64\"",
            "float32",
            "`offs` must be a 1-D int32 tensor, found int64[2]",
        ),
        (
            "[2, 8, 10]",
            "shape = [2]\ndtype = \"int32\"",
            "bfloat16",
            "the same for both, found bfloat16 and float32",
        ),
    ] {
        let path = tmp.path().join("g.toml");
        std::fs::write(&path, graph(w, offs, a_dtype)).unwrap();
        let (ok, stderr) = compile(&path, "cuda", &tmp.path().join("out"), &[]);
        assert!(
            !ok && stderr.contains("node `h`") && stderr.contains(want),
            "{want}: {stderr}"
        );
    }
}
