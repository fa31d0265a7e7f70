//! `host compile --wrapper cpp` on the Triton devices: kernels compiled ahead
//! by the real Triton compiler, `wrapper.cpp` built on each plugin's
//! `kernel_header`/`kernel_driver` and compiled (syntax only) against the
//! driver API stubs in `host/stubs`, and the refusals. (Running it is
//! `bench/gpu/aot_prepare.sh` and `run.py` on a GPU machine.)

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use kiln::runtime::ahead;
use kiln_tests::*;

fn python() -> String {
    std::env::var("KILN_PYTHON").unwrap_or_else(|_| "python3".to_string())
}

fn compile_cpp(graph: &Path, device: &str, out: &Path, extra: &[&str]) -> (bool, String) {
    let (output, _, stderr) = run(host(&host_bin())
        .env("KILN_PYTHON", python())
        .arg("compile")
        .arg(graph)
        .args(["--device", device, "--wrapper", "cpp", "-o"])
        .arg(out)
        .args(extra));
    (output.status.success(), stderr)
}

/// `wrapper.cpp` through the system C++ compiler against the driver stubs.
fn syntax_check(wrapper: &Path) -> Result<(), String> {
    kiln_tests::names::cpp_syntax_check(wrapper)
}

fn manifest(out: &Path) -> HashMap<String, String> {
    let text = std::fs::read_to_string(out.join("kernels/manifest.json")).expect("the manifest");
    serde_json::from_str(&text).expect("a JSON object")
}

#[test]
fn cuda_compiles_every_example_and_archive_ahead_and_its_wrapper_builds_on_the_driver_text() {
    let tmp = TempDir::new("aot-cuda");
    let mut sources: Vec<PathBuf> = examples();
    sources.extend(
        std::fs::read_dir(repo_root().join("tests/fixtures/pt2"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "pt2")),
    );
    assert!(sources.len() >= 20, "{sources:?}");
    let mut dependent_launches = 0;
    for source in &sources {
        let stem = source.file_stem().unwrap().to_string_lossy().to_string();
        let out = tmp.path().join(&stem);
        let (ok, stderr) = compile_cpp(source, "cuda", &out, &[]);
        assert!(ok, "{stem}: {stderr}");
        assert!(stderr.contains("wrapper: "), "{stem}: {stderr}");
        let wrapper = std::fs::read_to_string(out.join("wrapper.cpp")).unwrap();
        let kernels = manifest(&out);
        // Every compiled kernel is loaded from its binary, by the plugin's loadKernel.
        for (name, key) in &kernels {
            let file = format!("\"kernels/{key}/{name}.cubin\", \"{name}\"");
            assert!(
                wrapper.contains(&file),
                "{stem}: {file} not loaded in\n{wrapper}"
            );
            assert!(out
                .join("kernels")
                .join(key)
                .join(format!("{name}.cubin"))
                .is_file());
        }
        assert_eq!(
            wrapper.matches("= loadKernel(").count(),
            kernels.len(),
            "{stem}"
        );
        assert!(
            wrapper.contains("CUDA_DRIVER_CHECK(cuLaunchKernel("),
            "{stem}"
        );
        // Compiled for sm_90, a kernel that waits for the one before it (Triton's
        // `launch_pdl`, in its metadata) is launched as its programmatic dependent;
        // any other plainly.
        for (name, key) in &kernels {
            let meta = out.join("kernels").join(key).join(format!("{name}.json"));
            let meta: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(meta).unwrap()).unwrap();
            let launch = if meta["launch_pdl"] == serde_json::Value::Bool(true) {
                "launchKernelDependent"
            } else {
                "launchKernel"
            };
            let handle = wrapper
                .lines()
                .find_map(|l| {
                    let l = l.trim();
                    let (left, right) = l.split_once(" = loadKernel(")?;
                    right
                        .contains(&format!("\"{name}\","))
                        .then(|| left.rsplit(' ').next().unwrap_or(left).to_string())
                })
                .unwrap_or_else(|| panic!("{stem}: {name} not loaded"));
            assert!(
                wrapper.contains(&format!("{launch}({handle}, ")),
                "{stem}: {name} ({handle}) not launched by {launch}"
            );
        }
        dependent_launches += wrapper.matches("launchKernelDependent(k").count();
        assert!(
            !wrapper.contains("torch") && !wrapper.contains("c10::"),
            "{stem}"
        );
        syntax_check(&out.join("wrapper.cpp")).unwrap_or_else(|e| panic!("{stem}: {e}"));
        // The weights stay in the file, read at kiln_init.
        if out.join("weights.safetensors").exists() {
            assert!(wrapper.contains("kiln_read_weights(path.c_str()"), "{stem}");
        }
    }
    assert!(dependent_launches > 0);
    // A matrix product is a cuBLAS call on the caller's stream.
    let gpt2 = std::fs::read_to_string(tmp.path().join("gpt2_block/wrapper.cpp")).unwrap();
    assert!(
        gpt2.contains("kilnGemm(0, false, true, 4096, 2304, 768,"),
        "{gpt2}"
    );
    assert!(gpt2.contains("cublasGemmStridedBatchedEx("));
}

#[test]
fn gxu_and_xpu_wrappers_build_on_their_own_driver_texts() {
    let tmp = TempDir::new("aot-vendors");
    for example in ["softmax", "layer_norm", "small_mixed"] {
        let out = tmp.path().join("gxu").join(example);
        let graph = repo_root().join(format!("examples/{example}.toml"));
        let (ok, stderr) = compile_cpp(&graph, "gxu", &out, &[]);
        assert!(ok, "{example}: {stderr}");
        let wrapper = std::fs::read_to_string(out.join("wrapper.cpp")).unwrap();
        assert!(wrapper.contains("#include <gxu.h>"));
        assert!(wrapper.contains("GXU_DRIVER_CHECK(gxuLaunchKernel("));
        // Its driver text has no dependent launch: every kernel goes through launchKernel.
        assert!(!wrapper.contains("launchKernelDependent"), "{example}");
        syntax_check(&out.join("wrapper.cpp")).unwrap_or_else(|e| panic!("gxu {example}: {e}"));
    }

    // This Triton has no xpu backend, so `host compile` says so ...
    let graph = repo_root().join("examples/softmax.toml");
    let (ok, stderr) = compile_cpp(&graph, "xpu", &tmp.path().join("xpu-cli"), &[]);
    assert!(!ok);
    assert!(stderr.contains("no backend for `xpu`"), "{stderr}");
    assert!(
        stderr.contains("wrapper.cpp loads compiled kernels"),
        "{stderr}"
    );
    // ... and the wrapper it would write, with binaries standing in for the
    // SPIR-V modules, compiles against SYCL's and Level Zero's declarations.
    let registry = kiln::plugins::discover(&[kiln::plugins::SearchEntry {
        path: profile_dir(),
        origin: kiln::plugins::Origin::Flag,
    }]);
    let plugin = registry.get("xpu").expect("the bundled xpu plugin");
    let options = kiln::driver::Options {
        wrapper: Some(kiln::plugins::WrapperKind::Cpp),
        ..Default::default()
    };
    for example in ["softmax", "small_gpt2_block"] {
        let graph =
            kiln::graph::load(repo_root().join(format!("examples/{example}.toml"))).unwrap();
        let artifacts = kiln::driver::compile(graph, plugin, &options);
        let artifacts = match (example, artifacts) {
            ("softmax", Ok(a)) => a,
            ("small_gpt2_block", Err(e)) => {
                // xpu brings no kilnGemm: the matrix products are refused by name.
                let report = kiln::diag::report(&e);
                assert!(
                    report.contains("kilnGemm") && report.contains("xpu"),
                    "{report}"
                );
                continue;
            }
            (_, other) => panic!("{example}: {:?}", other.map(|a| a.file_name)),
        };
        let out = tmp.subdir(&format!("xpu-{example}"));
        let binaries = ahead::Binaries::StandIn {
            extension: "spv".into(),
        };
        let path = ahead::write_wrapper(&artifacts, &out, &binaries)
            .unwrap()
            .path;
        let wrapper = std::fs::read_to_string(&path).unwrap();
        assert!(wrapper.contains("sycl::queue* stream = (sycl::queue*)stream_handle;"));
        assert!(!wrapper.contains("sycl_runtime_wrappers"));
        syntax_check(&path).unwrap_or_else(|e| panic!("xpu {example}: {e}"));
    }
}

/// A Triton device's C++ wrapper runs 1-D and 2-D convolutions with Kiln's own kernel
/// (no library convolution there): grouped, depthwise, strided, dilated, padded, 16-bit
/// and channels-last. Each launch's kernel, run under Triton's interpreter on operands of
/// the sizes and strides the launch passes, and again over channels-last operands, matches
/// PyTorch's convolution; the wrapper builds against the driver text.
#[test]
fn a_triton_devices_cpp_wrapper_runs_convolutions_with_kilns_kernel() {
    let tmp = TempDir::new("aot-conv");
    let (mut launches, mut report) = (0, String::new());
    for (graph, device) in [
        ("conv1d_on_every_device", "cuda"),
        ("conv2d_as_matrix_products", "cuda"),
        ("conv2d_channels_last_16bit", "cuda"),
        ("conv2d_output_channel_lanes", "cuda"),
        ("conv2d_output_channel_lanes", "gxu"),
    ] {
        let source = repo_root().join(format!("tests/graphs/{graph}.toml"));
        let out = tmp.path().join(format!("{graph}-{device}"));
        let (ok, stderr) = compile_cpp(&source, device, &out, &[]);
        assert!(ok, "{graph} on {device}: {stderr}");
        let wrapper = std::fs::read_to_string(out.join("wrapper.cpp")).unwrap();
        let convs = wrapper.matches("{ // kiln_conv_").count();
        assert!(convs > 0, "{graph}: {wrapper}");
        launches += convs;
        syntax_check(&out.join("wrapper.cpp")).unwrap_or_else(|e| panic!("{graph}: {e}"));
        let (output, stdout, stderr) = run(Command::new(torch_python())
            .arg(repo_root().join("tests/support/interpret_conv.py"))
            .arg(&out));
        assert!(output.status.success(), "{graph}: {stdout}\n{stderr}");
        // Each launch as the host made it, and over channels-last operands.
        assert_eq!(
            stdout.matches(" matches PyTorch").count(),
            2 * convs,
            "{graph}: {stdout}"
        );
        report.push_str(&stdout);
    }
    assert!(launches >= 8, "{launches}");
    for want in [
        "elementwise",
        "tl.dot",
        "float16",
        "bfloat16",
        "groups 4",
        "channels-last",
    ] {
        assert!(report.contains(want), "no {want} case in {report}");
    }
    // Over a symbolic batch: the two launches over `x` read the batch, and take the
    // plugin's grid for the call's programs (the third's input keeps its batch of 1);
    // the wrapper builds.
    let source = repo_root().join("tests/graphs/conv2d_output_channel_lanes.toml");
    let out = tmp.path().join("dynamic");
    let (ok, stderr) = compile_cpp(&source, "cuda", &out, &["--dynamic", "x:0=1..16"]);
    assert!(ok, "{stderr}");
    let wrapper = std::fs::read_to_string(out.join("wrapper.cpp")).unwrap();
    assert_eq!(
        wrapper
            .matches("int32_t s0 = static_cast<int32_t>(ks0);")
            .count(),
        2,
        "{wrapper}"
    );
    assert_eq!(
        wrapper
            .matches("static const KilnSizedCell grids[]")
            .count(),
        2
    );
    syntax_check(&out.join("wrapper.cpp")).unwrap();
}

/// A graph of `cases` convolutions drawn from `seed`: 1-D and 2-D, batch, channels per
/// group (of output channels, 16 or more for `tl.dot` tiles, else fewer), groups, kernel
/// sizes of 2 to 4 (a 1 x 1 convolution is a matrix product), strides, padding and
/// dilation, in float32, float16 and bfloat16; every output at least one position.
fn random_convolutions(seed: u64, cases: usize) -> String {
    use rand::{Rng, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut inputs = String::new();
    let mut nodes = String::new();
    let mut outputs = Vec::new();
    for i in 0..cases {
        let dims = if i % 3 == 2 { 1 } else { 2 };
        let groups: i64 = [1, 1, 2, 3][rng.random_range(0..4)];
        let cg: i64 = rng.random_range(1..=5);
        let kg: i64 = if i % 2 == 0 {
            rng.random_range(16..=20)
        } else {
            rng.random_range(1..=6)
        };
        let dtype = ["float32", "float16", "bfloat16"][i % 3];
        let n: i64 = rng.random_range(1..=2);
        let (mut size, mut kernel, mut attrs) = (Vec::new(), Vec::new(), [vec![], vec![], vec![]]);
        for _ in 0..dims {
            let (k, s, p, d): (i64, i64, i64, i64) = (
                rng.random_range(2..=4),
                rng.random_range(1..=3),
                rng.random_range(0..=2),
                rng.random_range(1..=2),
            );
            let least = (d * (k - 1) + 1 - 2 * p).max(1);
            size.push(least + rng.random_range(0..=7));
            kernel.push(k);
            for (list, v) in attrs.iter_mut().zip([s, p, d]) {
                list.push(v.to_string());
            }
        }
        let shape = |lead: [i64; 2], rest: &[i64]| {
            let all: Vec<String> = lead.iter().chain(rest).map(i64::to_string).collect();
            format!("[{}]", all.join(", "))
        };
        inputs.push_str(&format!(
            "[[inputs]]\nname = \"x{i}\"\nshape = {}\ndtype = \"{dtype}\"\n\n\
             [[inputs]]\nname = \"w{i}\"\nshape = {}\ndtype = \"{dtype}\"\n\n",
            shape([n, cg * groups], &size),
            shape([kg * groups, cg], &kernel),
        ));
        let [stride, padding, dilation] = attrs.map(|a| a.join(", "));
        nodes.push_str(&format!(
            "[[nodes]]\nname = \"c{i}\"\nop = \"conv{dims}d\"\nargs = [\"x{i}\", \"w{i}\"]\n\
             attrs = {{ stride = [{stride}], padding = [{padding}], dilation = [{dilation}], \
             groups = {groups} }}\n\n"
        ));
        outputs.push(format!("\"c{i}\""));
    }
    format!(
        "format = \"kiln-graph/1\"\nname = \"random_convolutions\"\noutputs = [{}]\n\n{inputs}{nodes}",
        outputs.join(", ")
    )
}

/// Convolutions drawn at random (`random_convolutions`, a fixed seed): every launch of
/// Kiln's convolution kernel in the cuda C++ wrapper matches PyTorch's convolution under
/// Triton's interpreter, as launched and over channels-last operands, in both of the
/// kernel's forms and all three dtypes.
#[test]
fn random_convolutions_in_a_triton_devices_cpp_wrapper_match_pytorch() {
    let tmp = TempDir::new("aot-conv-sweep");
    let cases = 16;
    let graph = tmp.path().join("random_convolutions.toml");
    let text = random_convolutions(31, cases);
    std::fs::write(&graph, &text).unwrap();
    let out = tmp.path().join("cuda");
    let (ok, stderr) = compile_cpp(&graph, "cuda", &out, &[]);
    assert!(ok, "{stderr}");
    let wrapper = std::fs::read_to_string(out.join("wrapper.cpp")).unwrap();
    assert_eq!(
        wrapper.matches("{ // kiln_conv_").count(),
        cases,
        "{wrapper}"
    );
    let (output, stdout, stderr) = run(Command::new(torch_python())
        .arg(repo_root().join("tests/support/interpret_conv.py"))
        .arg(&out));
    assert!(output.status.success(), "{stdout}\n{stderr}\n{text}");
    assert_eq!(
        stdout.matches(" matches PyTorch").count(),
        2 * cases,
        "{stdout}"
    );
    for want in [
        "elementwise",
        "tl.dot",
        "float32",
        "float16",
        "bfloat16",
        "groups 3",
    ] {
        assert!(stdout.contains(want), "no {want} case in {stdout}");
    }
}

#[test]
fn what_the_cpp_wrapper_cannot_run_is_refused_by_name_and_strided_outputs_are_copied() {
    let tmp = TempDir::new("aot-refusals");
    // gxu's driver text has no matrix product.
    let mlp = repo_root().join("examples/mlp.toml");
    let (ok, stderr) = compile_cpp(&mlp, "gxu", &tmp.path().join("mlp"), &[]);
    assert!(!ok);
    assert!(
        stderr.contains("gxu plugin's kernel_driver defines no `kilnGemm`"),
        "{stderr}"
    );
    // A convolution of three spatial dims is not in the C++ wrapper yet.
    let conv = repo_root().join("tests/graphs/conv3d_and_pool3d_of_video_models.toml");
    let (ok, stderr) = compile_cpp(&conv, "cuda", &tmp.path().join("conv"), &[]);
    assert!(!ok);
    assert!(
        stderr.contains("a convolution over an input of sizes [")
            && stderr.contains("runs 1-D and 2-D convolutions of static sizes but for the batch"),
        "{stderr}"
    );
    assert!(
        stderr.contains("`host compile` without `--wrapper cpp` writes the Python wrapper"),
        "{stderr}"
    );
    // Autotuning needs Triton at run time.
    let graph = repo_root().join("examples/softmax.toml");
    let (ok, stderr) = compile_cpp(&graph, "cuda", &tmp.path().join("tuned"), &["--autotune"]);
    assert!(!ok);
    assert!(stderr.contains("leave --autotune out"), "{stderr}");
    // A transposed output is made dense by a kernel, not refused.
    let transposed = tmp.path().join("transposed.toml");
    std::fs::write(
        &transposed,
        "format = \"kiln-graph/1\"\nname = \"transposed\"\noutputs = [\"t\", \"s\"]\n\n\
         [[inputs]]\nname = \"x\"\nshape = [3, 5]\ndtype = \"float32\"\n\n\
         [[nodes]]\nname = \"t\"\nop = \"transpose\"\nargs = [\"x\"]\nattrs = { dim0 = 0, dim1 = 1 }\n\n\
         [[nodes]]\nname = \"s\"\nop = \"sin\"\nargs = [\"t\"]\n",
    )
    .unwrap();
    let out = tmp.path().join("transposed");
    let (ok, stderr) = compile_cpp(&transposed, "cuda", &out, &[]);
    assert!(ok, "{stderr}");
    let wrapper = std::fs::read_to_string(out.join("wrapper.cpp")).unwrap();
    assert!(
        wrapper.contains("= outputs[0];") && wrapper.contains("= outputs[1];"),
        "{wrapper}"
    );
    syntax_check(&out.join("wrapper.cpp")).unwrap();
}

#[test]
fn a_driver_text_without_the_device_memory_functions_is_refused_naming_the_first_missing() {
    let registry = kiln::plugins::discover(&[kiln::plugins::SearchEntry {
        path: profile_dir(),
        origin: kiln::plugins::Origin::Flag,
    }]);
    let plugin = registry.get("cuda").expect("the bundled cuda plugin");
    let options = kiln::driver::Options {
        wrapper: Some(kiln::plugins::WrapperKind::Cpp),
        ..Default::default()
    };
    let graph = kiln::graph::load(repo_root().join("examples/add.toml")).unwrap();
    let mut artifacts = kiln::driver::compile(graph, plugin, &options).unwrap();
    let kiln::driver::CodeInfo::TritonCpp(plan) = &mut artifacts.info else {
        panic!("not a Triton C++ wrapper");
    };
    // Only the launch functions: what a driver text written before the C++
    // wrapper existed defines.
    let driver = &plan.strings.driver;
    let cut = driver
        .find("// Device memory for Kiln")
        .expect("the memory section");
    plan.strings.driver = driver[..cut].to_string();
    let tmp = TempDir::new("aot-old-driver");
    let binaries = ahead::Binaries::StandIn {
        extension: "cubin".into(),
    };
    let err = ahead::write_wrapper(&artifacts, tmp.path(), &binaries).expect_err("refused");
    let report = kiln::diag::report(&err);
    assert!(
        report.contains("does not define `kilnDeviceAlloc`"),
        "{report}"
    );
    assert!(report.contains("device_memory"), "{report}");
}

#[test]
fn cuda_graph_wrappers_capture_with_the_drivers_graph_functions_and_are_refused_without_them() {
    let tmp = TempDir::new("aot-graphs");
    let mlp = repo_root().join("examples/small_mlp.toml");
    let out = tmp.path().join("cuda");
    let (ok, stderr) = compile_cpp(&mlp, "cuda", &out, &["--cuda-graph"]);
    assert!(ok, "{stderr}");
    let wrapper = std::fs::read_to_string(out.join("wrapper.cpp")).unwrap();
    for part in [
        "extern \"C\" int kiln_device_graphs(void) { return 1; }",
        "static int kiln_launch(",
        "kilnGraphBegin(stream);",
        "kiln_graph = kilnGraphEnd(stream);",
        "kilnGraphLaunch(kiln_graph, stream);",
        "kilnGraphAbort(stream);",
        // The default stream cannot be captured: it launches directly.
        "if (stream_handle == nullptr) {\n        return kiln_launch(",
    ] {
        assert!(wrapper.contains(part), "missing {part:?}");
    }
    // The direct run comes before the capture, so that cuBLAS's handle and
    // workspace are created outside it.
    let direct = wrapper.find("int status = kiln_launch(").unwrap();
    let begin = wrapper.find("kilnGraphBegin(stream);").unwrap();
    assert!(direct < begin);
    syntax_check(&out.join("wrapper.cpp")).unwrap();
    // Without the flag, kiln_call launches directly.
    let (ok, stderr) = compile_cpp(&mlp, "cuda", &tmp.path().join("plain"), &[]);
    assert!(ok, "{stderr}");
    let plain = std::fs::read_to_string(tmp.path().join("plain/wrapper.cpp")).unwrap();
    assert!(plain.contains("int kiln_device_graphs(void) { return 0; }"));
    assert!(!plain.contains("kilnGraphBegin(stream);"));
    // gxu's driver text has no graph functions.
    let softmax = repo_root().join("examples/small_softmax.toml");
    let (ok, stderr) = compile_cpp(&softmax, "gxu", &tmp.path().join("gxu"), &["--cuda-graph"]);
    assert!(!ok);
    assert!(
        stderr.contains("does not define `kilnGraphBegin`"),
        "{stderr}"
    );
    // Only the C++ wrapper of a Triton device captures.
    let (output, _, stderr) = run(host(&host_bin())
        .arg("compile")
        .arg(&softmax)
        .args(["--device", "cuda", "--cuda-graph", "-o"])
        .arg(tmp.path().join("python")));
    assert!(!output.status.success());
    assert!(stderr.contains("add --wrapper cpp"), "{stderr}");
    let (output, _, stderr) = run(host(&host_bin())
        .arg("compile")
        .arg(&softmax)
        .args(["--device", "cpu", "--wrapper", "cpp", "--cuda-graph", "-o"])
        .arg(tmp.path().join("cpu")));
    assert!(!output.status.success());
    assert!(
        stderr.contains("device `cpu` with the C++ wrapper has none"),
        "{stderr}"
    );
}

/// A CUDA toolkit whose driver and cuBLAS libraries are the stand-ins of
/// `tests/fixtures/fake_cuda` (every call fails as with no GPU), headers from
/// `host/stubs`: `CUDA_HOME` for `host run`.
fn fake_toolkit(at: &Path) -> PathBuf {
    let include = at.join("include");
    let lib = at.join("lib64");
    std::fs::create_dir_all(&include).unwrap();
    std::fs::create_dir_all(&lib).unwrap();
    for header in ["cuda.h", "cuda_runtime_api.h", "cublas_v2.h"] {
        std::fs::copy(
            repo_root().join("host/stubs").join(header),
            include.join(header),
        )
        .unwrap();
    }
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".to_string());
    for name in ["cuda", "cublas"] {
        let (output, _, stderr) = run(Command::new(&cxx)
            .args(["-std=c++17", "-shared", "-fPIC", "-I"])
            .arg(&include)
            .arg(repo_root().join("tests/fixtures/fake_cuda/fake_driver.cpp"))
            .arg("-o")
            .arg(lib.join(format!("lib{name}.so"))));
        assert!(output.status.success(), "{stderr}");
    }
    at.to_path_buf()
}

#[test]
fn host_run_builds_the_wrapper_with_the_plugins_flags_and_reports_the_drivers_failure() {
    let tmp = TempDir::new("aot-host-run");
    let home = fake_toolkit(&tmp.path().join("cuda"));
    let cache = tmp.path().join("cache");
    let run_once = |graph: &str| {
        run(host(&host_bin())
            .env("KILN_PYTHON", python())
            .env("CUDA_HOME", &home)
            .env("KILN_CACHE_DIR", &cache)
            .env_remove("KILN_DEVICE_CXXFLAGS")
            .arg("run")
            .arg(repo_root().join(graph))
            .args(["--device", "cuda", "--check"]))
    };
    // The kernels compile ahead (Triton), the wrapper builds against the
    // toolkit the cuda plugin found, loads, and kiln_init reports the driver.
    let (output, stdout, stderr) = run_once("examples/small_mlp.toml");
    assert!(!output.status.success(), "{stdout}");
    assert!(stderr.contains("precompiled:"), "{stderr}");
    for part in [
        "kiln_init(",
        "failed with status 5",
        "no CUDA-capable device is detected (Kiln's test driver)",
    ] {
        assert!(stderr.contains(part), "missing {part:?} in {stderr}");
    }
    assert!(!stderr.contains("panicked"), "{stderr}");
    // The run's folder is gone; the kernels and the library are cached.
    let left: Vec<_> = std::fs::read_dir(&cache)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".run-"))
        .collect();
    assert_eq!(left, Vec::<String>::new());
    let (_, _, again) = run_once("examples/small_mlp.toml");
    assert!(!again.contains("precompiled:"), "{again}");
    assert!(again.contains("found in the cache"), "{again}");
    assert!(again.contains("Kiln's test driver"), "{again}");
    // Without headers the compiler's error comes with what to do.
    let (output, _, stderr) = run(host(&host_bin())
        .env("KILN_PYTHON", python())
        .env("CUDA_HOME", tmp.path().join("nowhere"))
        .env("PATH", "/usr/bin:/bin")
        .env("KILN_CACHE_DIR", &cache)
        .env("CPATH", "")
        .arg("run")
        .arg(repo_root().join("examples/add.toml"))
        .args(["--device", "cuda"]));
    assert!(!output.status.success());
    if stderr.contains("the C++ compiler failed") {
        assert!(stderr.contains("cuda plugin's flags"), "{stderr}");
        assert!(stderr.contains("KILN_DEVICE_CXXFLAGS"), "{stderr}");
    }
}

#[test]
fn host_run_builds_byte_for_byte_the_wrapper_host_compile_writes() {
    let tmp = TempDir::new("aot-same-wrapper");
    let home = fake_toolkit(&tmp.path().join("cuda"));
    for example in ["small_mlp", "small_gpt2_block", "attention"] {
        let graph = repo_root().join(format!("examples/{example}.toml"));
        let out = tmp.path().join("compiled").join(example);
        let (ok, stderr) = compile_cpp(&graph, "cuda", &out, &[]);
        assert!(ok, "{example}: {stderr}");
        let written = std::fs::read_to_string(out.join("wrapper.cpp")).unwrap();
        // `host run` builds its wrapper in its cache, as kiln_<key>.cpp; the
        // stand-in driver then fails kiln_init, after the build.
        let cache = tmp.path().join("cache").join(example);
        let (output, stdout, stderr) = run(host(&host_bin())
            .env("KILN_PYTHON", python())
            .env("CUDA_HOME", &home)
            .env("KILN_CACHE_DIR", &cache)
            .env_remove("KILN_DEVICE_CXXFLAGS")
            .arg("run")
            .arg(&graph)
            .args(["--device", "cuda"]));
        assert!(!output.status.success(), "{stdout}");
        assert!(stderr.contains("Kiln's test driver"), "{example}: {stderr}");
        let built: Vec<PathBuf> = std::fs::read_dir(&cache)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "cpp"))
            .collect();
        let [built] = built.as_slice() else {
            panic!("{example}: not one wrapper in the cache: {built:?}");
        };
        let built = std::fs::read_to_string(built).unwrap();
        assert!(
            built == written,
            "{example}: host run built another wrapper than host compile wrote"
        );
    }
}

/// `text` without its comments, string and character literals: the code a
/// C++ compiler binds names in.
fn code_only(text: &str) -> String {
    let mut out = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '/' if chars.peek() == Some(&'/') => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        out.push('\n');
                        break;
                    }
                }
            }
            '"' | '\'' => {
                while let Some(d) = chars.next() {
                    if d == '\\' {
                        chars.next();
                    } else if d == c {
                        break;
                    }
                }
                out.push(' ');
            }
            c => out.push(c),
        }
    }
    out
}

#[test]
fn every_name_the_cpp_wrapper_binds_is_reserved_before_the_graphs_names() {
    let registry = kiln::plugins::discover(&[kiln::plugins::SearchEntry {
        path: profile_dir(),
        origin: kiln::plugins::Origin::Flag,
    }]);
    let tmp = TempDir::new("aot-reserved");
    for (device, example, graphs) in [
        ("cuda", "small_gpt2_block", true),
        ("cuda", "attention", false),
        ("cuda", "gpt2_block", false),
        ("gxu", "small_mixed", false),
        ("xpu", "softmax", false),
    ] {
        let plugin = registry.get(device).expect("a bundled plugin");
        let options = kiln::driver::Options {
            wrapper: Some(kiln::plugins::WrapperKind::Cpp),
            device_graphs: graphs,
            ..Default::default()
        };
        let graph =
            kiln::graph::load(repo_root().join(format!("examples/{example}.toml"))).unwrap();
        let artifacts = kiln::driver::compile(graph, plugin, &options).unwrap();
        let kiln::driver::CodeInfo::TritonCpp(plan) = &artifacts.info else {
            panic!("not a Triton C++ wrapper");
        };
        let binaries = ahead::Binaries::StandIn {
            extension: "bin".into(),
        };
        let out = tmp.subdir(&format!("{device}-{example}"));
        let path = ahead::write_wrapper(&artifacts, &out, &binaries)
            .unwrap()
            .path;
        let wrapper = std::fs::read_to_string(&path).unwrap();
        let mut namer = kiln::codegen::namer::Namer::new();
        kiln::driver::triton_cpp::reserve(&mut namer, &plan.strings);
        let numbered = |id: &str, stem: &str| {
            id.strip_prefix(stem)
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        };
        let buffers: std::collections::HashSet<&str> = plan.buffer_names().collect();
        let code = code_only(&wrapper);
        let unreserved: std::collections::BTreeSet<&str> = kiln::codegen::namer::identifiers(&code)
            .filter(|id| {
                !namer.is_taken(id)
                    && !buffers.contains(id)
                    && !numbered(id, "kiln_kernel_")
                    && !numbered(id, "p")
                    && !numbered(id, "s")
            })
            .collect();
        assert!(
            unreserved.is_empty(),
            "{device} {example}: wrapper.cpp binds {unreserved:?}, which triton_cpp::RESERVED lacks"
        );
    }
}

#[test]
fn a_buffer_the_plan_does_not_name_is_an_error_naming_it() {
    let registry = kiln::plugins::discover(&[kiln::plugins::SearchEntry {
        path: profile_dir(),
        origin: kiln::plugins::Origin::Flag,
    }]);
    let plugin = registry.get("cuda").expect("the bundled cuda plugin");
    let options = kiln::driver::Options {
        wrapper: Some(kiln::plugins::WrapperKind::Cpp),
        ..Default::default()
    };
    let graph = kiln::graph::load(repo_root().join("examples/add.toml")).unwrap();
    let mut artifacts = kiln::driver::compile(graph, plugin, &options).unwrap();
    // An input the plan was not made for: the wrapper must not invent a
    // pointer (it once wrote `nullptr`) but refuse, naming it.
    let p = &mut artifacts.scheduled.program;
    let mut stray = p.buffer(p.inputs[0]).clone();
    stray.name = "stray input".into();
    p.buffers.push(stray);
    p.inputs
        .push(kiln::schedule::ir::BufferId(p.buffers.len() as u32 - 1));
    let tmp = TempDir::new("aot-unnamed");
    let binaries = ahead::Binaries::StandIn {
        extension: "cubin".into(),
    };
    let err = ahead::write_wrapper(&artifacts, tmp.path(), &binaries).expect_err("refused");
    let report = kiln::diag::report(&err);
    assert!(
        report.contains("buffer `stray input`") && report.contains("has no C++ name"),
        "{report}"
    );
    assert!(!tmp.path().join("wrapper.cpp").exists());
}

/// Exports of dynamic shapes compiled once for cuda's C++ wrapper (`--dynamic`):
/// `kiln_call_shaped` reads the sizes from the inputs' shapes and refuses one outside
/// the range (`kiln/sizes.h`, written beside it), lays the workspace out at the call's
/// sizes, launches each kernel's variant and grid by the bucket of its sizes, and runs
/// the matrix products and attention at the call's sizes; `kiln_call` and
/// `kiln_run_host`, which take no sizes, refuse. Every variant is loaded from the
/// binary of the function it compiles. A `--cuda-graph` wrapper keys its graph by the
/// sizes too.
#[test]
fn a_dynamic_export_compiles_once_for_the_cpp_wrapper_taking_each_calls_sizes() {
    let tmp = TempDir::new("aot-dynamic");
    for model in ["mlp_ln", "gpt2", "bert"] {
        let archive = repo_root().join(format!("tests/fixtures/dynamic/{model}.pt2"));
        let out = tmp.path().join(model);
        let (ok, stderr) = compile_cpp(&archive, "cuda", &out, &["--dynamic"]);
        assert!(ok, "{model}: {stderr}");
        let wrapper = std::fs::read_to_string(out.join("wrapper.cpp")).unwrap();
        for want in [
            "extern \"C\" int kiln_call_shaped(const int64_t* const* input_shapes, const void* const* inputs, void* const* outputs, void* stream_handle) {",
            "if (kiln_bind_sizes(input_shapes, ks) != 0) return 4;",
            "return kiln_size_out_of_range(0, ",
            "unsigned char* const ws = kiln_workspace_at(arena_bytes, stream);",
            "const KilnSizedCell& cell = kiln_sized_cell(table, ",
            "extern \"C\" int kiln_call(const void* const*, void* const*, void*) { return kiln_sizes_needed(); }",
            "extern \"C\" int kiln_run_host(const void* const*, void* const*) { return kiln_sizes_needed(); }",
            "status = kiln_call_shaped(input_shapes, din.data(), dout.data(), nullptr);",
            "#include \"kiln/sizes.h\"",
        ] {
            assert!(wrapper.contains(want), "{model}: no `{want}` in\n{wrapper}");
        }
        assert!(out.join("kiln/sizes.h").is_file(), "{model}");
        // Every compiled kernel, variants too, is loaded from its binary: a variant
        // (`NAME_v1`) from the files of the function it compiles.
        let kernels = manifest(&out);
        assert_eq!(
            wrapper.matches("= loadKernel(").count(),
            kernels.len(),
            "{model}"
        );
        fn variant_of(name: &str) -> Option<&str> {
            let (function, n) = name.rsplit_once("_v")?;
            (!n.is_empty() && n.chars().all(|c| c.is_ascii_digit())).then_some(function)
        }
        let variants: Vec<(&String, &str)> = kernels
            .iter()
            .filter_map(|(name, key)| Some((key, variant_of(name)?)))
            .collect();
        assert!(!variants.is_empty(), "{model}: {kernels:?}");
        for (key, function) in variants {
            let file = format!("\"kernels/{key}/{function}.cubin\", \"{function}\"");
            assert!(wrapper.contains(&file), "{model}: {file} not loaded");
        }
        syntax_check(&out.join("wrapper.cpp")).unwrap_or_else(|e| panic!("{model}: {e}"));
    }
    // The MLP's input sizes vary in both leading dims: described as -1.
    let mlp = std::fs::read_to_string(tmp.path().join("mlp_ln/wrapper.cpp")).unwrap();
    assert!(
        mlp.contains("static const long long kiln_input_sizes[] = {-1LL, -1LL, 32LL};"),
        "{mlp}"
    );
    // GPT-2's attention takes the tiles planned nearest the call's batch and rows, on
    // the grid of its programs, compiled for lengths of multiples of 16 where the
    // call's are; its products take the call's rows.
    let gpt2 = std::fs::read_to_string(tmp.path().join("gpt2/wrapper.cpp")).unwrap();
    for want in [
        "switch (kiln_nearest_tiles(tiles, ",
        // Each tile variant's twin for lengths of multiples of 16, behind its guard.
        "if (ks1 % 16 == 0) { // lengths of multiples of 16",
        "const int64_t programs = ",
        "if ((ks0*ks1) > 0) kilnGemm(0, false, false, (ks0*ks1), ",
    ] {
        assert!(gpt2.contains(want), "no `{want}` in\n{gpt2}");
    }
    // With --cuda-graph, a graph is kept per set of pointers and sizes.
    let archive = repo_root().join("tests/fixtures/dynamic/gpt2.pt2");
    let out = tmp.path().join("gpt2-graph");
    let (ok, stderr) = compile_cpp(&archive, "cuda", &out, &["--dynamic", "--cuda-graph"]);
    assert!(ok, "{stderr}");
    let graph = std::fs::read_to_string(out.join("wrapper.cpp")).unwrap();
    for want in [
        "static int kiln_launch(const int64_t* const* input_shapes, ",
        "static std::array<const void*, 5> kiln_graph_key{};",
        "for (int j = 0; j < 2; ++j) key[3 + j] = ",
        "status = kiln_launch(input_shapes, inputs, outputs, stream_handle);",
    ] {
        assert!(graph.contains(want), "no `{want}` in\n{graph}");
    }
    syntax_check(&out.join("wrapper.cpp")).unwrap();
}

/// A kernel of dynamic sizes is also compiled in the forms a static compile of some of
/// its sizes would take, and each wrapper launches the form a call's sizes allow:
/// 32-bit indexes (`INDEX64` 0) where a kernel's indexes need 64 bits only at its
/// range's largest sizes (an MLP over up to 10^8 rows), and an inner count known a
/// multiple of 16 where it is one (GPT-2's causal mask over `s x s`). A range whose
/// top fits, with counts of multiples of 16, has one form.
#[test]
fn kernels_of_dynamic_sizes_take_the_forms_a_calls_sizes_allow() {
    let tmp = TempDir::new("aot-forms");
    let mlp = repo_root().join("tests/fixtures/pt2/mlp.pt2");
    let wide = ["--dynamic", "x:0=1..100000000"];
    let out = tmp.path().join("cpp");
    let (ok, stderr) = compile_cpp(&mlp, "cuda", &out, &wide);
    assert!(ok, "{stderr}");
    let wrapper = std::fs::read_to_string(out.join("wrapper.cpp")).unwrap();
    for want in [
        "const int form = ((128*ks0) < 2147483647 ? 1 : 0);",
        "int32_t xnumel32 = static_cast<int32_t>(xnumel);",
        "switch (cell.variant + 4 * form) {",
    ] {
        assert!(wrapper.contains(want), "no `{want}` in\n{wrapper}");
    }
    // Both forms of every variant are compiled and loaded.
    let kernels = manifest(&out);
    let narrow: Vec<&String> = kernels.keys().filter(|k| k.ends_with("_i32")).collect();
    assert!(!narrow.is_empty(), "{kernels:?}");
    assert_eq!(narrow.len() * 2, kernels.len(), "{kernels:?}");
    assert_eq!(wrapper.matches("= loadKernel(").count(), kernels.len());
    syntax_check(&out.join("wrapper.cpp")).unwrap();
    // The Python wrapper passes the form to the kernel's launches.
    let compile_py = |archive: &Path, out: &Path, extra: &[&str]| {
        let (output, _, stderr) = run(host(&host_bin())
            .arg("compile")
            .arg(archive)
            .args(["--device", "cuda", "-o"])
            .arg(out)
            .args(extra));
        assert!(output.status.success(), "{stderr}");
        std::fs::read_to_string(out.join("output_code.py")).unwrap()
    };
    let code = compile_py(&mlp, &tmp.path().join("py"), &wide);
    for want in [
        "XBLOCK: tl.constexpr, INDEX64: tl.constexpr):",
        "    if INDEX64:\n        xbase = xbase.to(tl.int64)",
        "(128*ks0, 1, (1 if (128*ks0) < 2147483647 else 0)),\n",
        "\"xnumel\": \"i32\"}, \"constants\": {\"XBLOCK\": 1024, \"INDEX64\": 0}",
        ", forms=(((\"",
    ] {
        assert!(code.contains(want), "no `{want}` in\n{code}");
    }
    // A range whose top keeps every index in 32 bits, rows of 128 and 32: one form.
    let code = compile_py(
        &mlp,
        &tmp.path().join("small"),
        &["--dynamic", "x:0=1..4096"],
    );
    assert!(
        !code.contains("INDEX64") && !code.contains("forms="),
        "{code}"
    );
    // GPT-2's mask over `s x s` elements: a form for a count of a multiple of 16.
    let gpt2 = repo_root().join("tests/fixtures/dynamic/gpt2.pt2");
    let code = compile_py(&gpt2, &tmp.path().join("gpt2"), &["--dynamic"]);
    assert!(
        code.contains("(ks0*ks1*ks1, 1, (2 if (ks0*ks1*ks1) % 16 == 0 else 0)),\n"),
        "{code}"
    );
    let aligned = code
        .lines()
        .find(|l| l.contains("_a16\": {\"function\""))
        .unwrap_or_else(|| panic!("no aligned form in\n{code}"));
    assert!(
        aligned.contains("\"xnumel\"]") || aligned.contains("\"rnumel\"]"),
        "{aligned}"
    );
    let out = tmp.path().join("gpt2-cpp");
    let (ok, stderr) = compile_cpp(&gpt2, "cuda", &out, &["--dynamic"]);
    assert!(ok, "{stderr}");
    let wrapper = std::fs::read_to_string(out.join("wrapper.cpp")).unwrap();
    assert!(
        wrapper.contains("const int form = ((ks0*ks1*ks1) % 16 == 0 ? 2 : 0);"),
        "{wrapper}"
    );
    syntax_check(&out.join("wrapper.cpp")).unwrap();
}
