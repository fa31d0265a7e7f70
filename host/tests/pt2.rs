//! Real torch.export archives (`tests/fixtures/pt2/`, both forms) import, match
//! PyTorch's outputs before and after the passes and through the scheduled loop IR, and
//! compile for every GPU plugin through the real binary; broken archives fail with a
//! message that says what is wrong.

mod common;

use kiln::graph::front::pt2::{read_pt2, Limits, Pt2Options};
use kiln::graph::ir::{Graph, TensorMeta};
use kiln::graph::{load, load_with, LoadOptions, Op};
use kiln::memory::{Budget, Source};
use kiln::tensor::Tensor;
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

const MODELS: [&str; 4] = ["mlp", "ln_softmax", "gelu_residual", "attention"];

fn fixtures() -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/fixtures/pt2"
    ))
}

/// Every archive: (model, archive path), both forms.
fn archives() -> Vec<(&'static str, PathBuf)> {
    MODELS
        .iter()
        .flat_map(|m| {
            [
                (*m, fixtures().join(format!("{m}.pt2"))),
                (*m, fixtures().join(format!("{m}_core.pt2"))),
            ]
        })
        .collect()
}

fn user_input_meta(g: &Graph) -> TensorMeta {
    g.node(g.inputs()[0]).expect("input node").outputs[0].clone()
}

fn read_input(model: &str, g: &Graph) -> Tensor {
    let path = fixtures().join(format!("{model}.input0.bin"));
    kiln::tensor_io::read_tensor(&path, &user_input_meta(g)).expect("input file")
}

fn expected(model: &str) -> Vec<f64> {
    let b = std::fs::read(fixtures().join(format!("{model}.expected0.bin"))).expect("expected");
    kiln::graph::DType::Float32.decode_le(&b)
}

use common::rel_err;

fn check(what: &str, outs: &[Tensor], want: &[f64]) {
    assert_eq!(outs.len(), 1, "{what}: one output");
    let err = rel_err(&outs[0], want);
    assert!(err <= 1e-4, "{what}: relative error {err:e}");
}

/// The archive imports and matches PyTorch on the interpreter, after the passes, and
/// through the scheduled loop IR (what every GPU plugin's code is generated from).
fn matches_pytorch(model: &str, archive: &str) {
    let path = fixtures().join(archive);
    let what = path.display().to_string();
    let g = load(&path).unwrap_or_else(|e| panic!("{what}: {}", kiln::diag::report(&e)));
    let inputs = vec![read_input(model, &g)];
    let want = expected(model);
    check(
        &what,
        &kiln::interp::evaluate(&g, &inputs).expect("eval"),
        &want,
    );
    // The program the cpu device ships, through the same driver as `host compile`.
    let artifacts = kiln::driver::compile(g.clone(), &common::plugin("cpu"), &Default::default())
        .expect("compiles");
    check(
        &format!("{what} after passes"),
        &kiln::interp::evaluate(&artifacts.graph, &inputs).expect("eval after passes"),
        &want,
    );
    let outs =
        kiln::schedule::eval::run(&artifacts.scheduled, &inputs).expect("loop-IR evaluation");
    check(&format!("{what} scheduled"), &outs, &want);
}

macro_rules! matches_pytorch {
    ($($test:ident: $model:literal, $archive:literal;)*) => {$(
        #[test]
        fn $test() {
            matches_pytorch($model, $archive);
        }
    )*};
}

matches_pytorch! {
    mlp_matches_pytorch: "mlp", "mlp.pt2";
    mlp_core_matches_pytorch: "mlp", "mlp_core.pt2";
    ln_softmax_matches_pytorch: "ln_softmax", "ln_softmax.pt2";
    ln_softmax_core_matches_pytorch: "ln_softmax", "ln_softmax_core.pt2";
    gelu_residual_matches_pytorch: "gelu_residual", "gelu_residual.pt2";
    gelu_residual_core_matches_pytorch: "gelu_residual", "gelu_residual_core.pt2";
    attention_matches_pytorch: "attention", "attention.pt2";
    attention_core_matches_pytorch: "attention", "attention_core.pt2";
}

#[test]
fn every_fixture_archive_is_tested() {
    let mut found: Vec<String> = std::fs::read_dir(fixtures())
        .expect("fixtures")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".pt2"))
        .collect();
    found.sort();
    let mut tested: Vec<String> = archives()
        .iter()
        .filter_map(|(_, p)| Some(p.file_name()?.to_string_lossy().into_owned()))
        .collect();
    tested.sort();
    assert_eq!(found, tested, "a new fixture archive needs a test above");
}

#[test]
fn explicit_getitem_nodes_select_outputs() {
    // Archives may spell a multi-output op's outputs as `operator.getitem` nodes on the
    // op's node name: rewrite attention_core's split that way and it still matches.
    let mut m = members(&fixtures().join("attention_core.pt2"));
    for (name, bytes) in &mut m {
        if !name.ends_with("models/model.json") {
            continue;
        }
        let mut v: Value = serde_json::from_slice(bytes).expect("json");
        let nodes = v["graph_module"]["graph"]["nodes"]
            .as_array_mut()
            .expect("nodes");
        let at = nodes
            .iter()
            .position(|n| n["name"] == "split_with_sizes")
            .expect("split node");
        let outs = nodes[at]["outputs"][0]["as_tensors"].clone();
        let outs = outs.as_array().expect("as_tensors").clone();
        nodes[at]["outputs"] = serde_json::json!([{"as_tensors": [
            {"name": "part_0"}, {"name": "part_1"}, {"name": "part_2"}
        ]}]);
        for (i, o) in outs.iter().enumerate() {
            let target = ["_operator.getitem", "<built-in function getitem>"][i % 2];
            nodes.insert(
                at + 1 + i,
                serde_json::json!({
                    "target": target,
                    "inputs": [
                        {"name": "", "arg": {"as_tensor": {"name": "split_with_sizes"}}, "kind": 1},
                        {"name": "", "arg": {"as_int": i}, "kind": 1}
                    ],
                    "outputs": [{"as_tensor": {"name": o["name"]}}],
                    "name": o["name"]
                }),
            );
        }
        *bytes = serde_json::to_vec(&v).expect("json");
    }
    let g = read_pt2(
        std::io::Cursor::new(write_zip(&m, false)),
        "attention",
        &Pt2Options::default(),
    )
    .unwrap_or_else(|e| panic!("{}", kiln::diag::report(&e)));
    let inputs = vec![read_input("attention", &g)];
    check(
        "explicit getitem",
        &kiln::interp::evaluate(&g, &inputs).expect("eval"),
        &expected("attention"),
    );
}

#[test]
fn params_as_inputs_come_after_the_user_inputs() {
    for (model, path) in archives() {
        let baked = load(&path).expect("baked");
        let g = load_with(
            &path,
            &LoadOptions {
                params_as_inputs: true,
                ..LoadOptions::default()
            },
        )
        .expect("params as inputs");
        // The parameters' values, taken from the baked graph's constants by name.
        let mut inputs = vec![read_input(model, &g)];
        for &id in &g.inputs()[1..] {
            let n = g.node(id).expect("input");
            let c = baked
                .node_ids()
                .filter_map(|b| baked.node(b))
                .find(|b| b.name == n.name)
                .expect("a constant of the same name");
            let Op::Constant { data } = &c.op else {
                panic!("{} is not a constant in the baked graph", n.name)
            };
            inputs.push(
                kiln::interp::constant(&c.outputs[0].fixed().unwrap(), data)
                    .expect("a small weight"),
            );
        }
        assert!(inputs.len() >= 3, "{model}: parameters became inputs");
        let want = expected(model);
        check(
            &path.display().to_string(),
            &kiln::interp::evaluate(&g, &inputs).expect("eval"),
            &want,
        );
    }
}

fn host(args: &[&str]) -> (bool, String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_host"))
        .args(args)
        .env_remove("KILN_PLUGIN_PATH")
        .env_remove("RUST_LOG")
        .output()
        .expect("host runs");
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into(),
        String::from_utf8_lossy(&o.stderr).into(),
    )
}

fn temp_dir(tag: &str) -> PathBuf {
    let d = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("kiln-pt2-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

#[test]
fn every_archive_compiles_for_cuda_gxu_and_xpu() {
    let bin = Path::new(env!("CARGO_BIN_EXE_host"));
    let plugin = bin.with_file_name(format!(
        "{}kiln_cuda{}",
        std::env::consts::DLL_PREFIX,
        std::env::consts::DLL_SUFFIX
    ));
    assert!(
        plugin.exists(),
        "{} is missing: build the workspace first (`cargo build --workspace`)",
        plugin.display()
    );
    let dir = temp_dir("compile");
    for (_, path) in archives() {
        for device in ["cuda", "gxu", "xpu"] {
            let out = dir.join(device);
            let (ok, _, err) = host(&[
                "compile",
                &path.to_string_lossy(),
                "--device",
                device,
                "-o",
                &out.to_string_lossy(),
            ]);
            assert!(ok, "{} for {device}: {err}", path.display());
            let code = std::fs::read_to_string(out.join("output_code.py")).expect("output_code");
            assert!(code.contains("@triton.jit"), "{}", path.display());
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn every_archive_runs_on_cpu_and_matches_pytorch() {
    let dir = temp_dir("run");
    let cache = dir.join("cache");
    for (model, path) in archives() {
        let inputs = dir.join(format!("{model}-inputs"));
        std::fs::create_dir_all(&inputs).expect("inputs dir");
        std::fs::copy(
            fixtures().join(format!("{model}.input0.bin")),
            inputs.join("input0.bin"),
        )
        .expect("copy input");
        let out = dir.join(format!("{model}-out"));
        let o = Command::new(env!("CARGO_BIN_EXE_host"))
            .args([
                "run",
                &path.to_string_lossy(),
                "--device",
                "cpu",
                "--check",
                "--inputs",
            ])
            .arg(&inputs)
            .arg("--out")
            .arg(&out)
            .env("KILN_CACHE_DIR", &cache)
            .env_remove("KILN_PLUGIN_PATH")
            .output()
            .expect("host runs");
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{}: {stderr}", path.display());
        let got = std::fs::read(out.join("output0.bin")).expect("output0.bin");
        let got = kiln::graph::DType::Float32.decode_le(&got);
        let g = load(&path).expect("load");
        let meta = g.meta(g.outputs()[0]).expect("output meta").clone();
        check(
            &format!("host run {}", path.display()),
            &[Tensor::new(meta.hint_shape(), meta.dtype, got)],
            &expected(model),
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn host_eval_reads_positional_user_inputs() {
    let dir = temp_dir("eval");
    std::fs::copy(
        fixtures().join("attention.input0.bin"),
        dir.join("input0.bin"),
    )
    .expect("copy input");
    let archive = fixtures().join("attention_core.pt2");
    let out = dir.join("out");
    let (ok, _, err) = host(&[
        "eval",
        &archive.to_string_lossy(),
        "--inputs",
        &dir.to_string_lossy(),
        "--out",
        &out.to_string_lossy(),
    ]);
    assert!(ok, "{err}");
    let got = std::fs::read(out.join("output0.bin")).expect("output");
    let got = kiln::graph::DType::Float32.decode_le(&got);
    let g = load(&archive).expect("load");
    let meta = g.meta(g.outputs()[0]).expect("output meta").clone();
    let got = Tensor::new(meta.hint_shape(), meta.dtype, got);
    check("host eval", &[got], &expected("attention"));
    let (ok, text, _) = host(&["graph", &archive.to_string_lossy(), "--params-as-inputs"]);
    assert!(
        ok && text.contains("p_qkv_weight: float32[384, 128] = input(1)"),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

// ---- broken archives ----

/// The members of a fixture archive, in order.
fn members(path: &Path) -> Vec<(String, Vec<u8>)> {
    let mut z = zip::ZipArchive::new(std::fs::File::open(path).expect("open")).expect("zip");
    (0..z.len())
        .map(|i| {
            let mut f = z.by_index(i).expect("member");
            let mut b = vec![];
            f.read_to_end(&mut b).expect("read");
            (f.name().expect("name").to_string(), b)
        })
        .collect()
}

fn write_zip(members: &[(String, Vec<u8>)], deflate: bool) -> Vec<u8> {
    let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let method = if deflate {
        zip::CompressionMethod::Deflated
    } else {
        zip::CompressionMethod::Stored
    };
    let opts = zip::write::SimpleFileOptions::default().compression_method(method);
    for (name, bytes) in members {
        w.start_file(name.as_str(), opts).expect("start");
        w.write_all(bytes).expect("write");
    }
    w.finish().expect("finish").into_inner()
}

/// mlp.pt2 with its model.json changed by `edit`.
fn edited_model(edit: impl Fn(&mut Value)) -> Vec<(String, Vec<u8>)> {
    let mut m = members(&fixtures().join("mlp.pt2"));
    for (name, bytes) in &mut m {
        if name.ends_with("models/model.json") {
            let mut v: Value = serde_json::from_slice(bytes).expect("json");
            edit(&mut v);
            *bytes = serde_json::to_vec(&v).expect("json");
        }
    }
    m
}

/// The error, with its chain, of importing `bytes` (written as NAME.pt2, through `load`).
fn load_error(name: &str, bytes: &[u8]) -> String {
    let dir = temp_dir(name);
    let path = dir.join(format!("{name}.pt2"));
    std::fs::write(&path, bytes).expect("write");
    let result = load(&path);
    let _ = std::fs::remove_dir_all(&dir);
    match result {
        Ok(_) => panic!("{name}: imported"),
        Err(e) => kiln::diag::report(&e),
    }
}

fn assert_says(text: &str, parts: &[&str]) {
    for p in parts {
        assert!(text.contains(p), "expected {p:?} in:\n{text}");
    }
}

#[test]
fn not_a_zip() {
    let e = load_error("notzip", b"format = \"kiln-graph/1\"\n");
    assert_says(&e, &["notzip.pt2", "not a .pt2 archive"]);
}

#[test]
fn missing_members() {
    let mut m = members(&fixtures().join("mlp.pt2"));
    m.retain(|(n, _)| !n.ends_with("models/model.json"));
    let e = load_error("nomodel", &write_zip(&m, false));
    assert_says(&e, &["no member `archive/models/model.json`"]);
    let mut m = members(&fixtures().join("mlp.pt2"));
    m.retain(|(n, _)| n != "archive/data/weights/weight_2");
    let e = load_error("noweight", &write_zip(&m, false));
    assert_says(&e, &["no member `archive/data/weights/weight_2`"]);
}

#[test]
fn unknown_schema_major() {
    let m = edited_model(|v| v["schema_version"]["major"] = 99.into());
    let e = load_error("major", &write_zip(&m, false));
    assert_says(
        &e,
        &["schema version 99.17 is not supported", "major version 8"],
    );
}

#[test]
fn unsupported_ops_are_listed_with_counts_and_nodes() {
    let m = edited_model(|v| {
        let nodes = v["graph_module"]["graph"]["nodes"]
            .as_array_mut()
            .expect("nodes");
        for n in nodes {
            let t = match n["target"].as_str() {
                Some("torch.ops.aten.linear.default") => "torch.ops.aten.frobnicate.default",
                _ => "torch.ops.aten.twiddle.default",
            };
            n["target"] = t.into();
        }
    });
    let e = load_error("ops", &write_zip(&m, false));
    assert_says(
        &e,
        &[
            "unsupported ops",
            "`torch.ops.aten.frobnicate.default` used by 2 nodes: node `linear`, node `linear_1`",
            "`torch.ops.aten.twiddle.default` used by 1 node: node `relu`",
        ],
    );
}

#[test]
fn symbolic_sizes_name_the_symbol() {
    let m = edited_model(|v| {
        v["graph_module"]["graph"]["tensor_values"]["x"]["sizes"][0] =
            serde_json::json!({"as_expr": {"expr_str": "s77", "hint": {"as_int": 8}}});
    });
    let e = load_error("symbolic", &write_zip(&m, false));
    assert_says(
        &e,
        &["`x`", "dynamic size `s77` that Kiln cannot specialise"],
    );
}

/// An export whose symbols have ranges but no example size (no size is the bare symbol)
/// asks for one, naming the symbol and its range.
#[test]
fn a_dynamic_size_without_an_example_asks_for_one() {
    let m = edited_model(|v| {
        v["graph_module"]["graph"]["tensor_values"]["x"]["sizes"][0] = serde_json::json!({
            "as_expr": {
                "expr_str": "Mul(Integer(2), Symbol('s23', positive=True, integer=True), \
                             Symbol('s27', positive=True, integer=True))",
                "hint": {"as_int": 8}
            }
        });
        v["range_constraints"] = serde_json::json!({
            "s23": {"min_val": 1, "max_val": 16},
            "s27": {"min_val": 2, "max_val": 64}
        });
    });
    let e = load_error("dynamic", &write_zip(&m, false));
    assert_says(
        &e,
        &["no example size for symbol `s23` (1..=16): give one with --specialize s23=VALUE"],
    );
}

#[test]
fn sizes_that_overflow() {
    let m = edited_model(|v| {
        v["graph_module"]["graph"]["tensor_values"]["x"]["sizes"] =
            serde_json::json!([{"as_int": 1u64 << 40}, {"as_int": 1u64 << 40}]);
    });
    let e = load_error("overflow", &write_zip(&m, false));
    assert_says(&e, &["`x`", "more than i64::MAX elements"]);
    let m = edited_model(|v| {
        v["graph_module"]["graph"]["tensor_values"]["x"]["sizes"][0] =
            serde_json::json!({"as_int": 1u64 << 63});
    });
    let e = load_error("overflow64", &write_zip(&m, false));
    assert_says(&e, &["`x`", "does not fit in 64 bits"]);
}

#[test]
fn unsafe_member_names() {
    for (bad, why) in [
        ("archive/../evil", "`..` component"),
        ("/etc/evil", "absolute path"),
    ] {
        let mut m = members(&fixtures().join("mlp.pt2"));
        m.push((bad.to_string(), b"x".to_vec()));
        let e = load_error("unsafe", &write_zip(&m, false));
        assert_says(&e, &["unsafe member name", bad, why]);
    }
}

#[test]
fn decompressed_size_over_the_cap() {
    let small = Pt2Options {
        specialize: vec![],
        dynamic: false,
        params_as_inputs: false,
        limits: Limits {
            budget: Budget {
                bytes: 1 << 20,
                source: Source::Flag,
            },
            ..Limits::default()
        },
    };
    // A model.json padded with 4 MiB of whitespace deflates to a few KiB: a small bomb.
    let mut m = members(&fixtures().join("mlp.pt2"));
    for (name, bytes) in &mut m {
        if name.ends_with("models/model.json") {
            bytes.extend(std::iter::repeat_n(b' ', 4 << 20));
        }
    }
    let zipped = write_zip(&m, true);
    assert!(zipped.len() < 1 << 20, "the bomb is small");
    let err = read_pt2(std::io::Cursor::new(zipped), "bomb", &small).expect_err("capped");
    assert_says(
        &kiln::diag::report(&err),
        &[
            "reading member `archive/models/model.json`",
            "more than the 1.0 MiB that --max-memory allows",
        ],
    );
    // The cap counts every member read: the weights take the total past a small cap.
    let tiny = Pt2Options {
        limits: Limits {
            budget: Budget {
                bytes: 20_000,
                source: Source::Flag,
            },
            ..Limits::default()
        },
        ..small.clone()
    };
    let zipped = write_zip(&members(&fixtures().join("mlp.pt2")), false);
    let err = read_pt2(std::io::Cursor::new(zipped), "mlp", &tiny).expect_err("capped");
    assert_says(
        &kiln::diag::report(&err),
        &[
            "(the members read before it ",
            "more than the 19.5 KiB that --max-memory allows",
        ],
    );
    // Too many members.
    let few = Pt2Options {
        limits: Limits {
            max_members: 4,
            ..Limits::default()
        },
        ..small
    };
    let zipped = write_zip(&members(&fixtures().join("mlp.pt2")), false);
    let err = read_pt2(std::io::Cursor::new(zipped), "mlp", &few).expect_err("capped");
    assert_says(&kiln::diag::report(&err), &["13 members", "limit of 4"]);
}

#[test]
fn the_cli_reports_a_bad_archive() {
    let dir = temp_dir("cli");
    let path = dir.join("bad.pt2");
    std::fs::write(&path, b"not a zip at all").expect("write");
    for cmd in ["graph", "eval"] {
        let (ok, _, err) = host(&[cmd, &path.to_string_lossy()]);
        assert!(!ok);
        assert_says(&err, &["error: in ", "bad.pt2", "not a .pt2 archive"]);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A zip of one deflated member whose headers claim `claimed` bytes
/// uncompressed, where the member really holds a few.
fn lying_zip(member: &str, content: &[u8], claimed: u32) -> Vec<u8> {
    let mut zip = write_zip(&[(member.to_string(), content.to_vec())], true);
    // The uncompressed size sits 22 bytes into the local header and 24 into
    // the central directory's entry.
    for (signature, at) in [(b"PK\x03\x04", 22), (b"PK\x01\x02", 24)] {
        let start = zip.windows(4).position(|w| w == signature).expect("header");
        zip[start + at..start + at + 4].copy_from_slice(&claimed.to_le_bytes());
    }
    zip
}

#[test]
fn a_member_size_read_from_the_archive_is_never_trusted_for_an_allocation() {
    let zip = lying_zip("archive/models/model.json", b"{}", 3 << 30);
    assert!(zip.len() < 300, "{} bytes", zip.len());
    let dir = temp_dir("lying");
    let path = dir.join("lying.pt2");
    std::fs::write(&path, &zip).expect("write");
    // Under a 2 GiB address-space limit, allocating the claimed 3 GiB would
    // abort the process; reading what is really there fails cleanly.
    let o = Command::new("sh")
        .arg("-c")
        .arg("ulimit -v 2097152 && exec \"$0\" graph \"$1\" --max-memory 8G")
        .arg(env!("CARGO_BIN_EXE_host"))
        .arg(&path)
        .output()
        .expect("sh runs");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("archive/models/model.json"), "{err}");
    // Under a limit below the claim, the claim alone is refused.
    let (ok, _, err) = host(&["graph", path.to_str().unwrap(), "--max-memory", "1G"]);
    assert!(!ok);
    assert!(
        err.contains("needs 3.0 GiB, more than the 1.0 GiB that --max-memory allows"),
        "{err}"
    );
    assert!(
        err.contains("raise the limit with --max-memory SIZE"),
        "{err}"
    );
}

// ---- higher-order ops: wrap_with_set_grad_enabled ----

const WRAP: &str = "torch.ops.higher_order.wrap_with_set_grad_enabled";

/// The export schema's `TensorMeta` of a contiguous float32 tensor.
fn f32_meta(shape: &[i64]) -> Value {
    let mut strides = vec![1i64; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * shape[i + 1];
    }
    let ints = |v: &[i64]| v.iter().map(|d| json!({ "as_int": d })).collect::<Vec<_>>();
    json!({
        "dtype": 7,
        "sizes": ints(shape),
        "strides": ints(&strides),
        "storage_offset": {"as_int": 0},
        "requires_grad": false,
        "device": {"type": "cpu"},
        "layout": 7
    })
}

fn tensor_arg(name: &str) -> Value {
    json!({ "as_tensor": { "name": name } })
}

/// An ATen node of two tensor operands (`self`, `other`) and one output.
fn binary(target: &str, a: &str, b: &str, out: &str) -> Value {
    json!({
        "target": target,
        "inputs": [
            {"name": "self", "arg": tensor_arg(a), "kind": 1},
            {"name": "other", "arg": tensor_arg(b), "kind": 1}
        ],
        "outputs": [tensor_arg(out)],
        "name": out
    })
}

fn relu(a: &str, out: &str) -> Value {
    json!({
        "target": "torch.ops.aten.relu.default",
        "inputs": [{"name": "self", "arg": tensor_arg(a), "kind": 1}],
        "outputs": [tensor_arg(out)],
        "name": out
    })
}

/// A graph (the program's or a subgraph) whose tensors are all float32 `[2, 3]`.
fn fx_graph(inputs: &[&str], nodes: Vec<Value>, outputs: &[&str], tensors: &[&str]) -> Value {
    let values: serde_json::Map<String, Value> = tensors
        .iter()
        .map(|t| (t.to_string(), f32_meta(&[2, 3])))
        .collect();
    json!({
        "inputs": inputs.iter().map(|t| tensor_arg(t)).collect::<Vec<_>>(),
        "outputs": outputs.iter().map(|t| tensor_arg(t)).collect::<Vec<_>>(),
        "nodes": nodes,
        "tensor_values": values,
        "sym_int_values": {},
        "sym_bool_values": {},
        "is_single_tensor_return": outputs.len() == 1
    })
}

/// A `wrap_with_set_grad_enabled(False, submodule, *operands)` node, as
/// `serialize_hoo_inputs` writes it: positional arguments with empty names.
fn wrap_node(name: &str, submodule: &str, sub: Value, operands: &[&str], outs: &[&str]) -> Value {
    let mut inputs = vec![
        json!({"name": "", "arg": {"as_bool": false}, "kind": 1}),
        json!({"name": "", "arg": {"as_graph": {"name": submodule, "graph": sub}}, "kind": 1}),
    ];
    inputs.extend(
        operands
            .iter()
            .map(|t| json!({"name": "", "arg": tensor_arg(t), "kind": 1})),
    );
    json!({
        "target": WRAP,
        "inputs": inputs,
        "outputs": outs.iter().map(|t| tensor_arg(t)).collect::<Vec<_>>(),
        "metadata": {},
        "name": name
    })
}

/// A `.pt2` archive of `graph` with user inputs `inputs` and user outputs `outputs`
/// (no weights).
fn program(graph: Value, inputs: &[&str], outputs: &[&str]) -> Vec<u8> {
    let model = json!({
        "graph_module": {
            "graph": graph,
            "signature": {
                "input_specs": inputs.iter()
                    .map(|t| json!({"user_input": {"arg": tensor_arg(t)}}))
                    .collect::<Vec<_>>(),
                "output_specs": outputs.iter()
                    .map(|t| json!({"user_output": {"arg": tensor_arg(t)}}))
                    .collect::<Vec<_>>()
            },
            "module_call_graph": []
        },
        "opset_version": {"aten": 0},
        "range_constraints": {},
        "schema_version": {"major": 8, "minor": 17},
        "verifiers": [],
        "torch_version": "2.11"
    });
    write_zip(
        &[
            ("archive/byteorder".into(), b"little".to_vec()),
            (
                "archive/models/model.json".into(),
                serde_json::to_vec(&model).expect("json"),
            ),
        ],
        false,
    )
}

fn import(zip: Vec<u8>) -> Result<Graph, String> {
    read_pt2(std::io::Cursor::new(zip), "wrap", &Pt2Options::default())
        .map_err(|e| kiln::diag::report(&e))
}

/// Two float32 `[2, 3]` inputs with positive and negative elements.
fn two_inputs() -> Vec<Tensor> {
    let x = vec![-1.5, 0.25, 2.0, -0.5, 3.0, -2.25];
    let y = vec![0.5, -1.0, 1.0, 1.25, -4.0, 0.75];
    vec![
        Tensor::new(vec![2, 3], kiln::graph::DType::Float32, x),
        Tensor::new(vec![2, 3], kiln::graph::DType::Float32, y),
    ]
}

/// `g` gives `want(x, y)` elementwise, on the interpreter, before and after the passes.
fn evaluates_to(g: &Graph, want: impl Fn(f64, f64) -> f64) {
    let inputs = two_inputs();
    let (x, y) = (inputs[0].to_vec(), inputs[1].to_vec());
    let want: Vec<f64> = x.iter().zip(&y).map(|(a, b)| want(*a, *b)).collect();
    let mut after = g.clone();
    kiln::passes::run_pipeline(&mut after).expect("passes");
    for (what, g) in [("imported", g), ("after the passes", &after)] {
        let out = kiln::interp::evaluate(g, &inputs).expect("eval");
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].shape, vec![2, 3]);
        let got = out[0].to_vec();
        for (a, b) in got.iter().zip(&want) {
            assert!((a - b).abs() <= 1e-6, "{what}: got {got:?}, want {want:?}");
        }
    }
}

#[test]
fn wrap_with_set_grad_enabled_is_inlined() {
    // relu(x + y) computed in a no-grad region, then `* x + y` after it. The subgraph's
    // names shadow the program's (`x`, `y`, `add`): it is a namespace of its own.
    let sub = fx_graph(
        &["x", "y"],
        vec![
            binary("torch.ops.aten.add.Tensor", "x", "y", "add"),
            relu("add", "relu"),
        ],
        &["relu"],
        &["x", "y", "add", "relu"],
    );
    let graph = fx_graph(
        &["x", "y"],
        vec![
            wrap_node(
                "wrap_with_set_grad_enabled",
                "submod_1",
                sub,
                &["x", "y"],
                &["getitem"],
            ),
            binary("torch.ops.aten.mul.Tensor", "getitem", "x", "mul"),
            binary("torch.ops.aten.add.Tensor", "mul", "y", "add"),
        ],
        &["add"],
        &["x", "y", "getitem", "mul", "add"],
    );
    let g = import(program(graph, &["x", "y"], &["add"])).unwrap_or_else(|e| panic!("{e}"));
    // The subgraph's nodes are named after it, the program's keep their names.
    let names: Vec<String> = g
        .node_ids()
        .map(|n| g.node(n).expect("node").name.clone())
        .collect();
    for name in ["submod_1_add", "submod_1_relu", "mul", "add"] {
        assert!(names.iter().any(|n| n == name), "{name} in {names:?}");
    }
    assert!(!g.node_ids().any(|n| g
        .node(n)
        .is_some_and(|n| n.name.contains("wrap_with_set_grad_enabled"))));
    evaluates_to(&g, |x, y| (x + y).max(0.0) * x + y);
}

#[test]
fn nested_wraps_with_several_outputs_are_inlined() {
    // submod_0: relu(p + q), a single-tensor return;
    // submod_1: (r, r - p) with r = submod_0(p, q), wrapped again inside;
    // the program: a + b of submod_1's two outputs, one of them selected by an explicit
    // getitem on the wrap node's name.
    let inner = fx_graph(
        &["p", "q"],
        vec![
            binary("torch.ops.aten.add.Tensor", "p", "q", "add"),
            relu("add", "relu"),
        ],
        &["relu"],
        &["p", "q", "add", "relu"],
    );
    let middle = fx_graph(
        &["p", "q"],
        vec![
            wrap_node(
                "wrap_with_set_grad_enabled",
                "submod_0",
                inner,
                &["p", "q"],
                &["r"],
            ),
            binary("torch.ops.aten.sub.Tensor", "r", "p", "sub"),
        ],
        &["r", "sub"],
        &["p", "q", "r", "sub"],
    );
    let mut graph = fx_graph(
        &["x", "y"],
        vec![
            wrap_node(
                "wrap_with_set_grad_enabled",
                "submod_1",
                middle,
                &["x", "y"],
                &["getitem", "wrap_with_set_grad_enabled_unused_1"],
            ),
            json!({
                "target": "_operator.getitem",
                "inputs": [
                    {"name": "", "arg": tensor_arg("wrap_with_set_grad_enabled"), "kind": 1},
                    {"name": "", "arg": {"as_int": 1}, "kind": 1}
                ],
                "outputs": [tensor_arg("second")],
                "name": "second"
            }),
            binary("torch.ops.aten.add.Tensor", "getitem", "second", "out"),
        ],
        &["out"],
        &["x", "y", "getitem", "second", "out"],
    );
    graph["tensor_values"]["wrap_with_set_grad_enabled_unused_1"] = f32_meta(&[2, 3]);
    let g = import(program(graph, &["x", "y"], &["out"])).unwrap_or_else(|e| panic!("{e}"));
    let names: Vec<String> = g
        .node_ids()
        .map(|n| g.node(n).expect("node").name.clone())
        .collect();
    assert!(
        names.iter().any(|n| n == "submod_1_submod_0_relu"),
        "{names:?}"
    );
    evaluates_to(&g, |x, y| 2.0 * (x + y).max(0.0) - x);
}

/// The program of [`wrap_with_set_grad_enabled_is_inlined`] with its wrap node changed
/// by `edit`.
fn broken_wrap(edit: impl Fn(&mut Value)) -> String {
    let sub = fx_graph(
        &["a", "b"],
        vec![
            binary("torch.ops.aten.add.Tensor", "a", "b", "add"),
            relu("add", "relu"),
        ],
        &["relu"],
        &["a", "b", "add", "relu"],
    );
    let mut wrap = wrap_node(
        "wrap_with_set_grad_enabled",
        "submod_1",
        sub,
        &["x", "y"],
        &["w"],
    );
    edit(&mut wrap);
    let graph = fx_graph(
        &["x", "y"],
        vec![wrap, binary("torch.ops.aten.mul.Tensor", "w", "x", "mul")],
        &["mul"],
        &["x", "y", "w", "mul"],
    );
    match import(program(graph, &["x", "y"], &["mul"])) {
        Ok(_) => panic!("a broken subgraph imported"),
        Err(e) => e,
    }
}

#[test]
fn broken_subgraphs_are_errors_that_say_what_is_wrong() {
    // The subgraph named but not given (a reference, not the inline graph).
    let e = broken_wrap(|w| {
        w["inputs"][1]["arg"]["as_graph"]
            .as_object_mut()
            .expect("as_graph")
            .remove("graph");
    });
    assert_says(
        &e,
        &[
            "wrap_with_set_grad_enabled",
            "subgraph `submod_1` has no `graph`",
        ],
    );
    // A module name where the subgraph should be.
    let e = broken_wrap(|w| w["inputs"][1]["arg"] = json!({"as_string": "submod_1"}));
    assert_says(&e, &["must be a subgraph (`as_graph`)", "submod_1"]);
    // The subgraph returns a tensor it never defines.
    let e = broken_wrap(|w| {
        w["inputs"][1]["arg"]["as_graph"]["graph"]["outputs"] = json!([tensor_arg("nope")]);
    });
    assert_says(
        &e,
        &["subgraph `submod_1` returns `nope`, a tensor it does not define"],
    );
    // A subgraph node reads a tensor of the enclosing graph, which it cannot see.
    let e = broken_wrap(|w| {
        w["inputs"][1]["arg"]["as_graph"]["graph"]["nodes"][0] =
            binary("torch.ops.aten.add.Tensor", "a", "x", "add");
    });
    assert_says(&e, &["node `submod_1/add`: unknown tensor `x`"]);
    // Operands and placeholders do not match.
    let e = broken_wrap(|w| {
        w["inputs"].as_array_mut().expect("inputs").pop();
    });
    assert_says(
        &e,
        &["subgraph `submod_1` takes 2 tensor(s), the node passes 1"],
    );
    // A malformed subgraph.
    let e = broken_wrap(|w| w["inputs"][1]["arg"]["as_graph"]["graph"]["nodes"] = json!(7));
    assert_says(&e, &["subgraph `submod_1` is malformed"]);
    // No grad flag, no subgraph.
    let e = broken_wrap(|w| w["inputs"] = json!([]));
    assert_says(&e, &["expected the grad mode, a subgraph"]);
    // The node has more outputs than the subgraph returns.
    let e = broken_wrap(|w| w["outputs"] = json!([tensor_arg("w"), tensor_arg("w2")]));
    assert_says(
        &e,
        &["the node has 2 output(s), subgraph `submod_1` returns 1"],
    );
    // An op Kiln lacks inside the subgraph is listed like one outside.
    let e = broken_wrap(|w| {
        w["inputs"][1]["arg"]["as_graph"]["graph"]["nodes"][1]["target"] =
            "torch.ops.aten.frobnicate.default".into();
    });
    assert_says(
        &e,
        &["`torch.ops.aten.frobnicate.default` used by 1 node: node `submod_1/relu`"],
    );
}

/// `relu(x)` inside `levels + 1` nested wraps.
fn nested_relu(levels: usize) -> Vec<u8> {
    let mut sub = fx_graph(&["a"], vec![relu("a", "r")], &["r"], &["a", "r"]);
    for i in 0..levels {
        sub = fx_graph(
            &["a"],
            vec![wrap_node(
                &format!("w{i}"),
                &format!("s{i}"),
                sub,
                &["a"],
                &["r"],
            )],
            &["r"],
            &["a", "r"],
        );
    }
    let graph = fx_graph(
        &["x"],
        vec![wrap_node("w", "top", sub, &["x"], &["out"])],
        &["out"],
        &["x", "out"],
    );
    program(graph, &["x"], &["out"])
}

#[test]
fn nesting_is_followed_to_a_limit_then_refused() {
    let g = import(nested_relu(7)).unwrap_or_else(|e| panic!("{e}"));
    let x = two_inputs().swap_remove(0);
    let out = kiln::interp::evaluate(&g, std::slice::from_ref(&x)).expect("eval");
    let want: Vec<f64> = x.to_vec().iter().map(|v| v.max(0.0)).collect();
    assert_eq!(out[0].to_vec(), want);
    let e = import(nested_relu(8)).expect_err("too deep");
    assert_says(
        &e,
        &[
            "node `top/s7/s6/s5/s4/s3/s2/s1/w0`",
            "nested more than 8 subgraphs deep",
        ],
    );
    // Deeper still, the JSON parser's recursion limit stops the archive first.
    let e = import(nested_relu(40)).expect_err("far too deep");
    assert_says(&e, &["recursion limit"]);
}

// ---- training-IR forms: in-place writes through views, constant inputs, rewrites ----

/// mlp.pt2 with `extra` FX nodes inserted after `relu` (their outputs recorded with
/// `relu`'s metadata) and `linear_1` reading `reader` instead of `relu`.
fn mlp_with(extra: Vec<Value>, reader: &str) -> Vec<(String, Vec<u8>)> {
    let reader = reader.to_string();
    edited_model(move |v| {
        let graph = &mut v["graph_module"]["graph"];
        let meta = graph["tensor_values"]["relu"].clone();
        for n in &extra {
            for o in n["outputs"].as_array().expect("outputs") {
                let name = o["as_tensor"]["name"].as_str().expect("name").to_string();
                graph["tensor_values"][name] = meta.clone();
            }
        }
        let nodes = graph["nodes"].as_array_mut().expect("nodes");
        nodes.splice(2..2, extra.iter().cloned());
        nodes.last_mut().expect("linear_1")["inputs"][0]["arg"]["as_tensor"]["name"] =
            reader.clone().into();
    })
}

fn fx(name: &str, target: &str, inputs: Value) -> Value {
    serde_json::json!({
        "target": target,
        "inputs": inputs,
        "outputs": [{"as_tensor": {"name": name}}],
        "metadata": {},
        "name": name,
    })
}

fn named_tensor(name: &str, t: &str) -> Value {
    serde_json::json!({"name": name, "arg": {"as_tensor": {"name": t}}, "kind": 1})
}

fn load_ok(name: &str, bytes: &[u8]) -> Graph {
    let dir = temp_dir(name);
    let path = dir.join(format!("{name}.pt2"));
    std::fs::write(&path, bytes).expect("write");
    let g = load(&path).unwrap_or_else(|e| panic!("{name}: {}", kiln::diag::report(&e)));
    let _ = std::fs::remove_dir_all(&dir);
    g
}

#[test]
fn an_in_place_write_through_a_view_it_cannot_invert_is_refused_where_an_alias_is_read() {
    let view = |name: &str, target: &str, of: &str| {
        fx(
            name,
            target,
            serde_json::json!([named_tensor("self", of),
                {"name": "size", "arg": {"as_ints": [8, 128]}, "kind": 1}]),
        )
    };
    let write = fx(
        "relu_",
        "torch.ops.aten.relu_.default",
        serde_json::json!([named_tensor("self", "v")]),
    );
    // `relu` is read after its view `v` was written: through `view` the write goes back
    // into `relu` (relu is idempotent, so the model still matches PyTorch)...
    let through_view = mlp_with(
        vec![
            view("v", "torch.ops.aten.view.default", "relu"),
            write.clone(),
        ],
        "relu",
    );
    load_ok("alias_view", &write_zip(&through_view, false));
    // ... through `expand` it cannot, and the read is refused.
    let expanded = |reader: &str| {
        mlp_with(
            vec![
                view("v", "torch.ops.aten.expand.default", "relu"),
                write.clone(),
            ],
            reader,
        )
    };
    let e = load_error("alias", &write_zip(&expanded("relu"), false));
    assert_says(
        &e,
        &[
            "reads `relu` after node `relu_` changed it in place",
            "cannot write back through",
            "run_decompositions()",
        ],
    );
    // Reading the written view itself, or the in-place op's result, is exact.
    for reader in ["v", "relu_"] {
        load_ok("alias_ok", &write_zip(&expanded(reader), false));
    }
}

/// An FX node `out = target(args...)`, each argument `(name, export-schema arg)`.
fn node(out: &str, target: &str, args: &[(&str, Value)]) -> Value {
    json!({
        "target": target,
        "inputs": args.iter()
            .map(|(name, arg)| json!({"name": name, "arg": arg, "kind": 1}))
            .collect::<Vec<_>>(),
        "outputs": [tensor_arg(out)],
        "metadata": {},
        "name": out
    })
}

/// A program of float32 user inputs `x` and `y` (`[2, 3]`), `nodes`, and the outputs
/// named, each tensor's shape given in `tensors`.
fn program_of(nodes: Vec<Value>, outputs: &[&str], tensors: &[(&str, &[i64])]) -> Vec<u8> {
    program_typed(nodes, outputs, tensors, &[])
}

/// [`program_of`], the tensors named in `dtypes` of that export-schema dtype code
/// (5: int64, 12: bool) rather than float32.
fn program_typed(
    nodes: Vec<Value>,
    outputs: &[&str],
    tensors: &[(&str, &[i64])],
    dtypes: &[(&str, i64)],
) -> Vec<u8> {
    let mut graph = fx_graph(&["x", "y"], nodes, outputs, &["x", "y"]);
    for (t, shape) in tensors {
        graph["tensor_values"][*t] = f32_meta(shape);
    }
    for (t, code) in dtypes {
        graph["tensor_values"][*t]["dtype"] = json!(code);
    }
    program(graph, &["x", "y"], outputs)
}

fn slice(out: &str, of: &str, dim: i64, start: i64, end: i64) -> Value {
    node(
        out,
        "torch.ops.aten.slice.Tensor",
        &[
            ("self", tensor_arg(of)),
            ("dim", json!({ "as_int": dim })),
            ("start", json!({ "as_int": start })),
            ("end", json!({ "as_int": end })),
        ],
    )
}

/// `g`'s outputs, on the interpreter before and after the passes, are `want` (row-major).
fn outputs_are(g: &Graph, want: &[Vec<f64>]) {
    let mut after = g.clone();
    kiln::passes::run_pipeline(&mut after).expect("passes");
    for (what, g) in [("imported", g), ("after the passes", &after)] {
        let out = kiln::interp::evaluate(g, &two_inputs()).expect("eval");
        assert_eq!(out.len(), want.len(), "{what}");
        for (i, (got, want)) in out.iter().zip(want).enumerate() {
            let got = got.to_vec();
            assert_eq!(got.len(), want.len(), "{what}: output {i}");
            for (a, b) in got.iter().zip(want) {
                assert!(
                    (a - b).abs() <= 1e-6,
                    "{what}: output {i} is {got:?}, want {want:?}"
                );
            }
        }
    }
}

#[test]
fn in_place_writes_through_slices_and_selects_reach_the_tensor_and_its_other_views() {
    // Swin's shifted-window mask, `mask[a:b, c:d] = v`, then a row scaled in place
    // through a view made before the first write:
    //   c = x.clone(); r = c[1]; c[1:2][:, 1:] = 7; r *= 2; out = c + y, and r, c[:, :1].
    let (x, y) = (two_inputs()[0].to_vec(), two_inputs()[1].to_vec());
    let nodes = vec![
        node(
            "c",
            "torch.ops.aten.clone.default",
            &[("self", tensor_arg("x"))],
        ),
        node(
            "r",
            "torch.ops.aten.select.int",
            &[
                ("self", tensor_arg("c")),
                ("dim", json!({"as_int": 0})),
                ("index", json!({"as_int": -1})),
            ],
        ),
        slice("s1", "c", 0, 1, 2),
        slice("s2", "s1", 1, 1, i64::MAX),
        node(
            "fill_",
            "torch.ops.aten.fill_.Scalar",
            &[
                ("self", tensor_arg("s2")),
                ("value", json!({"as_float": 7.0})),
            ],
        ),
        node(
            "mul_",
            "torch.ops.aten.mul_.Tensor",
            &[
                ("self", tensor_arg("r")),
                ("other", json!({"as_float": 2.0})),
            ],
        ),
        slice("col", "c", 1, 0, 1),
        binary("torch.ops.aten.add.Tensor", "c", "y", "out"),
    ];
    let g = import(program_of(
        nodes,
        &["out", "r", "col"],
        &[
            ("c", &[2, 3]),
            ("r", &[3]),
            ("s1", &[1, 3]),
            ("s2", &[1, 2]),
            ("fill_", &[1, 2]),
            ("mul_", &[3]),
            ("col", &[2, 1]),
            ("out", &[2, 3]),
        ],
    ))
    .unwrap_or_else(|e| panic!("{e}"));
    let c = [x[0], x[1], x[2], 2.0 * x[3], 14.0, 14.0];
    let out: Vec<f64> = c.iter().zip(&y).map(|(c, y)| c + y).collect();
    outputs_are(&g, &[out, c[3..].to_vec(), vec![c[0], c[3]]]);
}

#[test]
fn in_place_writes_through_reshapes_and_permutes_are_undone_into_the_tensor() {
    //   c = x.clone(); flat = c.view(6); p = c.view(3, 2).permute(-1, 0); p += y;
    //   outputs c and flat (made before the write).
    let (x, y) = (two_inputs()[0].to_vec(), two_inputs()[1].to_vec());
    let nodes = vec![
        node(
            "c",
            "torch.ops.aten.clone.default",
            &[("self", tensor_arg("x"))],
        ),
        node(
            "flat",
            "torch.ops.aten.view.default",
            &[("self", tensor_arg("c")), ("size", json!({"as_ints": [6]}))],
        ),
        node(
            "v",
            "torch.ops.aten.view.default",
            &[
                ("self", tensor_arg("c")),
                ("size", json!({"as_ints": [3, 2]})),
            ],
        ),
        node(
            "p",
            "torch.ops.aten.permute.default",
            &[
                ("self", tensor_arg("v")),
                ("dims", json!({"as_ints": [-1, 0]})),
            ],
        ),
        binary("torch.ops.aten.add_.Tensor", "p", "y", "add_"),
    ];
    let g = import(program_of(
        nodes,
        &["c", "flat"],
        &[
            ("c", &[2, 3]),
            ("flat", &[6]),
            ("v", &[3, 2]),
            ("p", &[2, 3]),
            ("add_", &[2, 3]),
        ],
    ))
    .unwrap_or_else(|e| panic!("{e}"));
    // p[i][j] = v[j][i] = c.flat[2 j + i]
    let mut c = x.clone();
    for i in 0..2 {
        for j in 0..3 {
            c[2 * j + i] += y[3 * i + j];
        }
    }
    outputs_are(&g, &[c.clone(), c]);
}

#[test]
fn recorded_shapes_spell_out_ops_outside_the_op_set() {
    // `t` of the 2-d activation twice, and `unflatten` + `reshape_as` back: the
    // identity, so the model still matches PyTorch.
    let nodes = [
        fx(
            "t1",
            "torch.ops.aten.t.default",
            serde_json::json!([named_tensor("self", "relu")]),
        ),
        fx(
            "t2",
            "torch.ops.aten.numpy_T.default",
            serde_json::json!([named_tensor("self", "t1")]),
        ),
        fx(
            "u",
            "torch.ops.aten.unflatten.int",
            serde_json::json!([named_tensor("self", "t2"),
                {"name": "dim", "arg": {"as_int": 1}, "kind": 1},
                {"name": "sizes", "arg": {"as_ints": [-1, 32]}, "kind": 1}]),
        ),
        fx(
            "r",
            "torch.ops.aten.reshape_as.default",
            serde_json::json!([named_tensor("self", "u"), named_tensor("other", "relu")]),
        ),
    ];
    let m = edited_model(|v| {
        let graph = &mut v["graph_module"]["graph"];
        let meta = graph["tensor_values"]["relu"].clone();
        let mut tmeta = meta.clone();
        tmeta["sizes"] = serde_json::json!([{"as_int": 128}, {"as_int": 8}]);
        tmeta["strides"] = serde_json::json!([{"as_int": 1}, {"as_int": 128}]);
        let mut umeta = meta.clone();
        umeta["sizes"] = serde_json::json!([{"as_int": 8}, {"as_int": 4}, {"as_int": 32}]);
        graph["tensor_values"]["t1"] = tmeta;
        graph["tensor_values"]["t2"] = meta.clone();
        graph["tensor_values"]["u"] = umeta;
        graph["tensor_values"]["r"] = meta;
        let ns = graph["nodes"].as_array_mut().expect("nodes");
        ns.splice(2..2, nodes.iter().cloned());
        ns.last_mut().expect("linear_1")["inputs"][0]["arg"]["as_tensor"]["name"] = "r".into();
        // A non-tensor argument of the call (`use_cache=False`) is a constant input.
        v["graph_module"]["signature"]["input_specs"]
            .as_array_mut()
            .expect("specs")
            .push(serde_json::json!({"constant_input": {"name": "use_cache", "value": {"as_bool": false}}}));
    });
    let g = load_ok("rewrites", &write_zip(&m, false));
    let outs = kiln::interp::evaluate(&g, &[read_input("mlp", &g)]).expect("eval");
    check("rewritten mlp", &outs, &expected("mlp"));
}

// ---- ops spelled out at import: stack, repeat_interleave, norms, einsum, im2col, ... ----

/// `x` and `y` row-major, `[2, 3]`.
fn xy() -> (Vec<f64>, Vec<f64>) {
    let i = two_inputs();
    (i[0].to_vec(), i[1].to_vec())
}

fn int_arg(v: i64) -> Value {
    json!({ "as_int": v })
}

fn ints_arg(v: &[i64]) -> Value {
    json!({ "as_ints": v })
}

fn tensors_arg(names: &[&str]) -> Value {
    json!({ "as_tensors": names.iter().map(|n| json!({"name": n})).collect::<Vec<_>>() })
}

/// The program imported, after its generated code was checked
/// ([`generated_code_agrees`]).
fn imported(nodes: Vec<Value>, outputs: &[&str], tensors: &[(&str, &[i64])]) -> Graph {
    let zip = program_of(nodes, outputs, tensors);
    generated_code_agrees(&outputs.join("_"), &zip);
    import(zip).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn stack_and_repeat_interleave_are_cats_and_expands() {
    let (x, y) = xy();
    let g = imported(
        vec![
            node(
                "s",
                "torch.ops.aten.stack.default",
                &[("tensors", tensors_arg(&["x", "y"])), ("dim", int_arg(-1))],
            ),
            node(
                "r",
                "torch.ops.aten.repeat_interleave.self_int",
                &[
                    ("self", tensor_arg("x")),
                    ("repeats", int_arg(2)),
                    ("dim", int_arg(1)),
                ],
            ),
            node(
                "f",
                "torch.ops.aten.repeat_interleave.self_int",
                &[("self", tensor_arg("y")), ("repeats", int_arg(3))],
            ),
        ],
        &["s", "r", "f"],
        &[("s", &[2, 3, 2]), ("r", &[2, 6]), ("f", &[18])],
    );
    let s: Vec<f64> = x.iter().zip(&y).flat_map(|(a, b)| [*a, *b]).collect();
    let r: Vec<f64> = x.iter().flat_map(|a| [*a, *a]).collect();
    let f: Vec<f64> = y.iter().flat_map(|a| [*a, *a, *a]).collect();
    outputs_are(&g, &[s, r, f]);
}

#[test]
fn vector_norms_of_every_order_and_weight_norm() {
    let (x, y) = xy();
    let norm = |out: &str, ord: Value, dims: &[i64]| {
        node(
            out,
            "torch.ops.aten.linalg_vector_norm.default",
            &[
                ("self", tensor_arg("x")),
                ("ord", ord),
                ("dim", ints_arg(dims)),
                ("keepdim", json!({"as_bool": false})),
            ],
        )
    };
    let g = imported(
        vec![
            slice("gcol", "y", 1, 0, 1),
            norm("n2", json!({"as_float": 2.0}), &[1]),
            norm("n1", json!({"as_int": 1}), &[-1]),
            norm("ninf", json!({"as_float": "Infinity"}), &[1]),
            norm("n3", json!({"as_float": 3.0}), &[0]),
            node(
                "w",
                "torch.ops.aten._weight_norm.default",
                &[
                    ("v", tensor_arg("x")),
                    ("g", tensor_arg("gcol")),
                    ("dim", int_arg(0)),
                ],
            ),
        ],
        &["n2", "n1", "ninf", "n3", "w"],
        &[
            ("n2", &[2]),
            ("n1", &[2]),
            ("ninf", &[2]),
            ("n3", &[3]),
            ("w", &[2, 3]),
            ("gcol", &[2, 1]),
        ],
    );
    let row = |r: usize| &x[3 * r..3 * r + 3];
    let p = |v: &[f64], p: f64| v.iter().map(|a| a.abs().powf(p)).sum::<f64>().powf(1.0 / p);
    let n2 = vec![p(row(0), 2.0), p(row(1), 2.0)];
    let n1 = vec![p(row(0), 1.0), p(row(1), 1.0)];
    let ninf: Vec<f64> = (0..2)
        .map(|r| row(r).iter().fold(0.0f64, |m, a| m.max(a.abs())))
        .collect();
    let n3: Vec<f64> = (0..3).map(|c| p(&[x[c], x[3 + c]], 3.0)).collect();
    let w: Vec<f64> = (0..6).map(|i| x[i] * y[3 * (i / 3)] / n2[i / 3]).collect();
    outputs_are(&g, &[n2, n1, ninf, n3, w]);
}

#[test]
fn einsum_contracts_pairs_as_batched_products() {
    let (x, y) = xy();
    let e = |out: &str, eq: &str, ts: &[&str]| {
        node(
            out,
            "torch.ops.aten.einsum.default",
            &[
                ("equation", json!({ "as_string": eq })),
                ("tensors", tensors_arg(ts)),
            ],
        )
    };
    let g = imported(
        vec![
            e("xyt", "ij,kj->ik", &["x", "y"]),
            e("dot", "ij, ij -> i", &["x", "y"]),
            e("tot", "ij->", &["x"]),
            e("tr", "ij->ji", &["x"]),
            e("ell", "...j,kj->...k", &["x", "y"]),
            e("three", "ij,ij,ij->j", &["x", "y", "x"]),
            e("implicit", "ji", &["x"]),
        ],
        &["xyt", "dot", "tot", "tr", "ell", "three", "implicit"],
        &[
            ("xyt", &[2, 2]),
            ("dot", &[2]),
            ("tot", &[]),
            ("tr", &[3, 2]),
            ("ell", &[2, 2]),
            ("three", &[3]),
            ("implicit", &[3, 2]),
        ],
    );
    let at = |v: &[f64], i: usize, j: usize| v[3 * i + j];
    let mut xyt = vec![];
    for i in 0..2 {
        for k in 0..2 {
            xyt.push((0..3).map(|j| at(&x, i, j) * at(&y, k, j)).sum());
        }
    }
    let dot: Vec<f64> = (0..2)
        .map(|i| (0..3).map(|j| at(&x, i, j) * at(&y, i, j)).sum())
        .collect();
    let tot = vec![x.iter().sum()];
    let tr: Vec<f64> = (0..3)
        .flat_map(|j| (0..2).map(move |i| (i, j)))
        .map(|(i, j)| at(&x, i, j))
        .collect();
    let three: Vec<f64> = (0..3)
        .map(|j| {
            (0..2)
                .map(|i| at(&x, i, j) * at(&y, i, j) * at(&x, i, j))
                .sum()
        })
        .collect();
    // Implicit output: the letters in alphabetical order, "ji" -> "ij": the transpose.
    outputs_are(&g, &[xyt.clone(), dot, tot, tr.clone(), xyt, three, tr]);
}

#[test]
fn im2col_col2im_and_interpolations_match_atens_formulas() {
    let (x, _) = xy();
    let image = node(
        "img",
        "torch.ops.aten.view.default",
        &[("self", tensor_arg("x")), ("size", ints_arg(&[1, 1, 2, 3]))],
    );
    let g = imported(
        vec![
            image,
            node(
                "cols",
                "torch.ops.aten.im2col.default",
                &[
                    ("self", tensor_arg("img")),
                    ("kernel_size", ints_arg(&[2, 2])),
                    ("dilation", ints_arg(&[1, 1])),
                    ("padding", ints_arg(&[1, 0])),
                    ("stride", ints_arg(&[1, 1])),
                ],
            ),
            node(
                "fold",
                "torch.ops.aten.col2im.default",
                &[
                    ("self", tensor_arg("cols")),
                    ("output_size", ints_arg(&[2, 3])),
                    ("kernel_size", ints_arg(&[2, 2])),
                    ("dilation", ints_arg(&[1, 1])),
                    ("padding", ints_arg(&[1, 0])),
                    ("stride", ints_arg(&[1, 1])),
                ],
            ),
            node(
                "near",
                "torch.ops.aten.upsample_nearest2d.vec",
                &[
                    ("input", tensor_arg("img")),
                    ("output_size", ints_arg(&[3, 7])),
                ],
            ),
            node(
                "lin",
                "torch.ops.aten.upsample_bilinear2d.vec",
                &[
                    ("input", tensor_arg("img")),
                    ("align_corners", json!({"as_bool": false})),
                    ("scale_factors", json!({"as_floats": [2.0, 1.5]})),
                ],
            ),
            node(
                "cub",
                "torch.ops.aten.upsample_bicubic2d.vec",
                &[
                    ("input", tensor_arg("img")),
                    ("align_corners", json!({"as_bool": true})),
                    ("output_size", ints_arg(&[3, 5])),
                ],
            ),
        ],
        &["cols", "fold", "near", "lin", "cub"],
        &[
            ("img", &[1, 1, 2, 3]),
            ("fold", &[1, 1, 2, 3]),
            ("cols", &[1, 4, 6]),
            ("near", &[1, 1, 3, 7]),
            ("lin", &[1, 1, 4, 4]),
            ("cub", &[1, 1, 3, 5]),
        ],
    );
    let px = |i: i64, j: i64| -> f64 {
        if (0..2).contains(&i) && (0..3).contains(&j) {
            x[(3 * i + j) as usize]
        } else {
            0.0
        }
    };
    // im2col: padding 1 on rows, 3 x 2 positions; rows (kernel i, j), columns positions.
    let mut cols = vec![];
    for ki in 0..2 {
        for kj in 0..2 {
            for oi in 0..3 {
                for oj in 0..2 {
                    cols.push(px(oi - 1 + ki, oj + kj));
                }
            }
        }
    }
    // col2im of those columns adds each pixel once per block covering it: twice per row
    // (padding 1, kernel 2), once, twice, once along the columns.
    let fold: Vec<f64> = (0..6)
        .map(|i| x[i] * 2.0 * [1.0, 2.0, 1.0][i % 3])
        .collect();
    // nearest: floor(o * in / out)
    let mut near = vec![];
    for o in 0..3 {
        for p in 0..7 {
            near.push(px(o * 2 / 3, p * 3 / 7));
        }
    }
    // bilinear, half-pixel centres, the given scales (1 / 2 and 1 / 1.5)
    let lin_taps = |o: i64, scale: f64, n: i64| {
        let real = (scale * (o as f64 + 0.5) - 0.5).max(0.0);
        let i0 = (real.floor() as i64).min(n - 1);
        let i1 = (i0 + 1).min(n - 1);
        let l = real - i0 as f64;
        [(i0, 1.0 - l), (i1, l)]
    };
    let mut lin = vec![];
    for o in 0..4 {
        for p in 0..4 {
            let mut v = 0.0;
            for (i, wi) in lin_taps(o, 0.5, 2) {
                for (j, wj) in lin_taps(p, 1.0 / 1.5, 3) {
                    v += wi * wj * px(i, j);
                }
            }
            lin.push(v);
        }
    }
    // bicubic, align_corners: positions o * (in - 1) / (out - 1), A = -0.75
    let cubic = |d: f64| {
        let a = -0.75;
        let d = d.abs();
        if d <= 1.0 {
            ((a + 2.0) * d - (a + 3.0)) * d * d + 1.0
        } else if d < 2.0 {
            ((a * d - 5.0 * a) * d + 8.0 * a) * d - 4.0 * a
        } else {
            0.0
        }
    };
    let cub_taps = |o: i64, scale: f64, n: i64| {
        let real = scale * o as f64;
        let i = real.floor() as i64;
        (i - 1..i + 3)
            .map(|k| (k.clamp(0, n - 1), cubic(real - k as f64)))
            .collect::<Vec<_>>()
    };
    let mut cub = vec![];
    for o in 0..3 {
        for p in 0..5 {
            let mut v = 0.0;
            for (i, wi) in cub_taps(o, 0.5, 2) {
                for (j, wj) in cub_taps(p, 0.5, 3) {
                    v += wi * wj * px(i, j);
                }
            }
            cub.push(v);
        }
    }
    outputs_are(&g, &[cols, fold, near, lin, cub]);
}

#[test]
fn aten_spellings_of_op_set_ops_and_unread_unknown_ops() {
    let (x, y) = xy();
    let g = imported(
        vec![
            binary("torch.ops.aten.multiply.Tensor", "x", "y", "m"),
            node(
                "rs",
                "torch.ops.aten.rsub.Scalar",
                &[
                    ("self", tensor_arg("x")),
                    ("other", json!({"as_float": 1.0})),
                ],
            ),
            node(
                "cm",
                "torch.ops.aten.clamp_min.Tensor",
                &[("self", tensor_arg("x")), ("min", tensor_arg("y"))],
            ),
            node(
                "cx",
                "torch.ops.aten.clamp_max.default",
                &[("self", tensor_arg("x")), ("max", json!({"as_float": 0.5}))],
            ),
            binary("torch.ops.aten.floor_divide.default", "x", "y", "fd"),
            node(
                "sq",
                "torch.ops.aten.square.default",
                &[("self", tensor_arg("x"))],
            ),
            node(
                "sp",
                "torch.ops.aten.softplus.default",
                &[
                    ("self", tensor_arg("x")),
                    ("beta", json!({"as_float": 2.0})),
                    ("threshold", json!({"as_float": 3.0})),
                ],
            ),
            node(
                "ey",
                "torch.ops.aten.eye.m",
                &[("n", int_arg(2)), ("m", int_arg(3))],
            ),
            // An op Kiln does not have, whose result only a dead node reads.
            node(
                "noise",
                "torch.ops.aten.rand.default",
                &[("size", ints_arg(&[2, 3]))],
            ),
            binary("torch.ops.aten.lt.Tensor", "noise", "x", "unused"),
        ],
        &["m", "rs", "cm", "cx", "fd", "sq", "sp", "ey"],
        &[
            ("ey", &[2, 3]),
            ("m", &[2, 3]),
            ("rs", &[2, 3]),
            ("cm", &[2, 3]),
            ("cx", &[2, 3]),
            ("fd", &[2, 3]),
            ("sq", &[2, 3]),
            ("sp", &[2, 3]),
            ("noise", &[2, 3]),
            ("unused", &[2, 3]),
        ],
    );
    let each = |f: &dyn Fn(f64, f64) -> f64| -> Vec<f64> {
        x.iter().zip(&y).map(|(a, b)| f(*a, *b)).collect()
    };
    outputs_are(
        &g,
        &[
            each(&|a, b| a * b),
            each(&|a, _| 1.0 - a),
            each(&|a, b| a.max(b)),
            each(&|a, _| a.min(0.5)),
            each(&|a, b| (a / b).floor()),
            each(&|a, _| a * a),
            each(&|a, _| {
                if 2.0 * a > 3.0 {
                    a
                } else {
                    (2.0 * a).exp().ln_1p() / 2.0
                }
            }),
            vec![1.0, 0.0, 0.0, 0.0, 1.0, 0.0],
        ],
    );
    // Constants as long as a dim are refused past any real model's dims, before they
    // are built.
    let e = import(program_of(
        vec![node(
            "huge",
            "torch.ops.aten.eye.default",
            &[("n", int_arg(1 << 30))],
        )],
        &["huge"],
        &[("huge", &[1 << 30, 1 << 30])],
    ))
    .expect_err("a dim of 2^30");
    assert_says(
        &e,
        &["node `huge`", "1073741824 elements", "at most 16777216"],
    );
    // The same unknown op read by an output is still refused, by name.
    let e = import(program_of(
        vec![node(
            "noise",
            "torch.ops.aten.rand.default",
            &[("size", ints_arg(&[2, 3]))],
        )],
        &["noise"],
        &[("noise", &[2, 3])],
    ))
    .expect_err("rand is read");
    assert_says(&e, &["torch.ops.aten.rand.default", "node `noise`"]);
}

#[test]
fn swapaxes_movedim_and_zero_through_a_slice() {
    let (x, _) = xy();
    let g = imported(
        vec![
            node(
                "sw",
                "torch.ops.aten.swapaxes.default",
                &[
                    ("self", tensor_arg("x")),
                    ("axis0", int_arg(0)),
                    ("axis1", int_arg(-1)),
                ],
            ),
            node(
                "v",
                "torch.ops.aten.view.default",
                &[("self", tensor_arg("x")), ("size", ints_arg(&[2, 3, 1]))],
            ),
            node(
                "mv",
                "torch.ops.aten.movedim.intlist",
                &[
                    ("self", tensor_arg("v")),
                    ("source", ints_arg(&[0])),
                    ("destination", ints_arg(&[-1])),
                ],
            ),
            node(
                "c",
                "torch.ops.aten.clone.default",
                &[("self", tensor_arg("x"))],
            ),
            slice("s", "c", 1, 1, 3),
            node(
                "zero_",
                "torch.ops.aten.zero_.default",
                &[("self", tensor_arg("s"))],
            ),
        ],
        &["sw", "mv", "c"],
        &[
            ("sw", &[3, 2]),
            ("v", &[2, 3, 1]),
            ("mv", &[3, 1, 2]),
            ("c", &[2, 3]),
            ("s", &[2, 2]),
            ("zero_", &[2, 2]),
        ],
    );
    let tr: Vec<f64> = (0..3).flat_map(|j| [x[j], x[3 + j]]).collect();
    let c = vec![x[0], 0.0, 0.0, x[3], 0.0, 0.0];
    outputs_are(&g, &[tr.clone(), tr, c]);
}

/// The archive `zip` compiled by the real binary: the cpu's C++ built and run against
/// the interpreter on random inputs, and code generated for cuda.
fn generated_code_agrees(name: &str, zip: &[u8]) {
    let dir = temp_dir(name);
    let path = dir.join(format!("{name}.pt2"));
    std::fs::write(&path, zip).expect("write");
    let path = path.to_string_lossy().to_string();
    let cache = dir.join("cache");
    let o = Command::new(env!("CARGO_BIN_EXE_host"))
        .args(["run", &path, "--device", "cpu", "--check"])
        .env("KILN_CACHE_DIR", &cache)
        .env_remove("KILN_PLUGIN_PATH")
        .output()
        .expect("host runs");
    assert!(
        o.status.success(),
        "{name} on cpu: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    let out = dir.join("cuda").to_string_lossy().to_string();
    let (ok, _, err) = host(&["compile", &path, "--device", "cuda", "-o", &out]);
    assert!(ok, "{name} for cuda: {err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A node with several outputs, as torch.export writes `max.dim` and `var_mean`.
fn multi_node(outs: &[&str], target: &str, args: &[(&str, Value)]) -> Value {
    let mut n = node(outs[0], target, args);
    n["outputs"] = json!(outs.iter().map(|o| tensor_arg(o)).collect::<Vec<_>>());
    n["name"] = json!(format!("{}_node", outs[0]));
    n
}

#[test]
fn activations_index_reductions_and_small_tensor_ops_follow_pytorch() {
    let (x, y) = xy();
    let un = |out: &str, target: &str| node(out, target, &[("self", tensor_arg("x"))]);
    let f = |v: f64| json!({ "as_float": v });
    let nodes = vec![
        node(
            "tu",
            "torch.ops.aten.triu.default",
            &[("self", tensor_arg("x"))],
        ),
        node(
            "tl",
            "torch.ops.aten.tril.default",
            &[("self", tensor_arg("x")), ("diagonal", int_arg(-1))],
        ),
        node(
            "am",
            "torch.ops.aten.argmax.default",
            &[("self", tensor_arg("x")), ("dim", int_arg(1))],
        ),
        un("an", "torch.ops.aten.argmin.default"),
        multi_node(
            &["mv", "mi"],
            "torch.ops.aten.max.dim",
            &[
                ("self", tensor_arg("x")),
                ("dim", int_arg(0)),
                ("keepdim", json!({"as_bool": true})),
            ],
        ),
        node(
            "lse",
            "torch.ops.aten.logsumexp.default",
            &[("self", tensor_arg("x")), ("dim", ints_arg(&[1]))],
        ),
        node(
            "fl",
            "torch.ops.aten.flip.default",
            &[("self", tensor_arg("x")), ("dims", ints_arg(&[0, -1]))],
        ),
        node(
            "lr",
            "torch.ops.aten.leaky_relu.default",
            &[("self", tensor_arg("x")), ("negative_slope", f(0.1))],
        ),
        un("el", "torch.ops.aten.elu.default"),
        un("se", "torch.ops.aten.selu.default"),
        un("mi2", "torch.ops.aten.mish.default"),
        node(
            "gl",
            "torch.ops.aten.glu.default",
            &[("self", tensor_arg("x")), ("dim", int_arg(0))],
        ),
        node(
            "w",
            "torch.ops.aten.select.int",
            &[
                ("self", tensor_arg("y")),
                ("dim", int_arg(0)),
                ("index", int_arg(0)),
            ],
        ),
        node(
            "pr",
            "torch.ops.aten.prelu.default",
            &[("self", tensor_arg("x")), ("weight", tensor_arg("w"))],
        ),
        un("ls", "torch.ops.aten.log_sigmoid.default"),
        un("ss", "torch.ops.aten.softsign.default"),
        un("hs", "torch.ops.aten.hardshrink.default"),
        binary("torch.ops.aten.sub.Tensor", "x", "x", "zero"),
        binary("torch.ops.aten.div.Tensor", "x", "zero", "inf"),
        binary("torch.ops.aten.div.Tensor", "zero", "zero", "nan"),
        node(
            "isn",
            "torch.ops.aten.isnan.default",
            &[("self", tensor_arg("nan"))],
        ),
        node(
            "isi",
            "torch.ops.aten.isinf.default",
            &[("self", tensor_arg("inf"))],
        ),
        node(
            "n2n",
            "torch.ops.aten.nan_to_num.default",
            &[("self", tensor_arg("inf"))],
        ),
        binary("torch.ops.aten.logical_xor.default", "x", "zero", "lx"),
        node(
            "sd",
            "torch.ops.aten.std.correction",
            &[("self", tensor_arg("x")), ("dim", ints_arg(&[1]))],
        ),
        multi_node(
            &["vv", "vm"],
            "torch.ops.aten.var_mean.correction",
            &[("self", tensor_arg("x")), ("dim", ints_arg(&[0]))],
        ),
        node(
            "acm",
            "torch.ops.aten.addcmul.default",
            &[
                ("self", tensor_arg("x")),
                ("tensor1", tensor_arg("x")),
                ("tensor2", tensor_arg("y")),
                ("value", f(0.5)),
            ],
        ),
        node(
            "lp",
            "torch.ops.aten.lerp.Scalar",
            &[
                ("self", tensor_arg("x")),
                ("end", tensor_arg("y")),
                ("weight", f(0.25)),
            ],
        ),
        node(
            "oh",
            "torch.ops.aten.one_hot.default",
            &[("self", tensor_arg("am")), ("num_classes", int_arg(3))],
        ),
        node(
            "ti",
            "torch.ops.aten.tile.default",
            &[("self", tensor_arg("x")), ("dims", ints_arg(&[2]))],
        ),
        un("e2", "torch.ops.aten.exp2.default"),
        node(
            "tv",
            "torch.ops.aten.view.default",
            &[
                ("self", tensor_arg("ti")),
                ("size", ints_arg(&[1, 4, 1, 3])),
            ],
        ),
        node(
            "ps",
            "torch.ops.aten.pixel_shuffle.default",
            &[("self", tensor_arg("tv")), ("upscale_factor", int_arg(2))],
        ),
        node(
            "uf",
            "torch.ops.aten.unfold.default",
            &[
                ("self", tensor_arg("x")),
                ("dimension", int_arg(1)),
                ("size", int_arg(2)),
                ("step", int_arg(1)),
            ],
        ),
        node(
            "x3",
            "torch.ops.aten.view.default",
            &[("self", tensor_arg("x")), ("size", ints_arg(&[1, 2, 3]))],
        ),
        node(
            "mp",
            "torch.ops.aten.max_pool1d.default",
            &[
                ("self", tensor_arg("x3")),
                ("kernel_size", ints_arg(&[2])),
                ("stride", ints_arg(&[1])),
            ],
        ),
    ];
    let shapes: &[(&str, &[i64])] = &[
        ("tu", &[2, 3]),
        ("tl", &[2, 3]),
        ("am", &[2]),
        ("an", &[]),
        ("mv", &[1, 3]),
        ("mi", &[1, 3]),
        ("lse", &[2]),
        ("fl", &[2, 3]),
        ("lr", &[2, 3]),
        ("el", &[2, 3]),
        ("se", &[2, 3]),
        ("mi2", &[2, 3]),
        ("gl", &[1, 3]),
        ("w", &[3]),
        ("pr", &[2, 3]),
        ("ls", &[2, 3]),
        ("ss", &[2, 3]),
        ("hs", &[2, 3]),
        ("zero", &[2, 3]),
        ("inf", &[2, 3]),
        ("nan", &[2, 3]),
        ("isn", &[2, 3]),
        ("isi", &[2, 3]),
        ("n2n", &[2, 3]),
        ("lx", &[2, 3]),
        ("sd", &[2]),
        ("vv", &[3]),
        ("vm", &[3]),
        ("acm", &[2, 3]),
        ("lp", &[2, 3]),
        ("oh", &[2, 3]),
        ("ti", &[2, 6]),
        ("e2", &[2, 3]),
        ("tv", &[1, 4, 1, 3]),
        ("ps", &[1, 1, 2, 6]),
        ("uf", &[2, 2, 2]),
        ("x3", &[1, 2, 3]),
        ("mp", &[1, 2, 2]),
    ];
    let outputs = [
        "tu", "tl", "am", "an", "mv", "mi", "lse", "fl", "lr", "el", "se", "mi2", "gl", "pr", "ls",
        "ss", "hs", "isn", "isi", "n2n", "lx", "sd", "vv", "vm", "acm", "lp", "oh", "ti", "e2",
        "ps", "uf", "mp",
    ];
    let (long, boolean) = (5, 12);
    let dtypes = [
        ("am", long),
        ("an", long),
        ("mi", long),
        ("oh", long),
        ("isn", boolean),
        ("isi", boolean),
        ("lx", boolean),
    ];
    let zip = program_typed(nodes, &outputs, shapes, &dtypes);
    generated_code_agrees("small_ops", &zip);
    let g = import(zip).unwrap_or_else(|e| panic!("{e}"));
    let map = |f: &dyn Fn(f64) -> f64| -> Vec<f64> { x.iter().map(|&a| f(a)).collect() };
    let row = |r: usize| &x[3 * r..3 * r + 3];
    let argmax = |v: &[f64]| {
        v.iter()
            .enumerate()
            .fold((0, f64::MIN), |b, (i, &a)| if a > b.1 { (i, a) } else { b })
            .0 as f64
    };
    let flat_argmin = x
        .iter()
        .enumerate()
        .fold((0, f64::MAX), |b, (i, &a)| if a < b.1 { (i, a) } else { b })
        .0 as f64;
    let lse: Vec<f64> = (0..2)
        .map(|r| row(r).iter().map(|a| a.exp()).sum::<f64>().ln())
        .collect();
    let softplus = |a: f64| if a > 20.0 { a } else { a.exp().ln_1p() };
    let sig = |a: f64| 1.0 / (1.0 + (-a).exp());
    let (sa, ss) = (1.673_263_242_354_377_3, 1.050_700_987_355_480_5);
    let am = [argmax(row(0)), argmax(row(1))];
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let var = |v: &[f64]| {
        let m = mean(v);
        v.iter().map(|a| (a - m) * (a - m)).sum::<f64>() / (v.len() - 1) as f64
    };
    let tile: Vec<f64> = (0..2).flat_map(|r| [row(r), row(r)].concat()).collect();
    // pixel_shuffle of [1, 4, 1, 3] by 2: out[0, 0, i, 2 w + j] = in[0, 2 i + j, 0, w]
    let mut ps = vec![0.0; 12];
    for i in 0..2 {
        for j in 0..2 {
            for w in 0..3 {
                ps[i * 6 + 2 * w + j] = tile[(2 * i + j) * 3 + w];
            }
        }
    }
    let want: Vec<Vec<f64>> = vec![
        vec![x[0], x[1], x[2], 0.0, x[4], x[5]],
        vec![0.0, 0.0, 0.0, x[3], 0.0, 0.0],
        am.to_vec(),
        vec![flat_argmin],
        (0..3).map(|c| x[c].max(x[3 + c])).collect(),
        (0..3)
            .map(|c| if x[3 + c] > x[c] { 1.0 } else { 0.0 })
            .collect(),
        lse,
        x.iter().rev().copied().collect(),
        map(&|a| if a > 0.0 { a } else { 0.1 * a }),
        map(&|a| if a > 0.0 { a } else { a.exp_m1() }),
        map(&|a| {
            if a > 0.0 {
                ss * a
            } else {
                ss * sa * a.exp_m1()
            }
        }),
        map(&|a| a * softplus(a).tanh()),
        (0..3).map(|c| x[c] * sig(x[3 + c])).collect(),
        (0..6)
            .map(|i| if x[i] > 0.0 { x[i] } else { y[i % 3] * x[i] })
            .collect(),
        map(&|a| sig(a).ln()),
        map(&|a| a / (1.0 + a.abs())),
        map(&|a| if a.abs() > 0.5 { a } else { 0.0 }),
        vec![1.0; 6],
        vec![1.0; 6],
        map(&|a| {
            if a > 0.0 {
                f32::MAX as f64
            } else {
                -(f32::MAX as f64)
            }
        }),
        vec![1.0; 6],
        (0..2).map(|r| var(row(r)).sqrt()).collect(),
        (0..3).map(|c| var(&[x[c], x[3 + c]])).collect(),
        (0..3).map(|c| mean(&[x[c], x[3 + c]])).collect(),
        (0..6).map(|i| x[i] + 0.5 * x[i] * y[i]).collect(),
        (0..6).map(|i| x[i] + 0.25 * (y[i] - x[i])).collect(),
        (0..6)
            .map(|i| {
                if am[i / 3] == (i % 3) as f64 {
                    1.0
                } else {
                    0.0
                }
            })
            .collect(),
        tile.clone(),
        map(&|a| 2f64.powf(a)),
        ps,
        (0..2)
            .flat_map(|r| [x[3 * r], x[3 * r + 1], x[3 * r + 1], x[3 * r + 2]])
            .collect(),
        (0..2)
            .flat_map(|r| [x[3 * r].max(x[3 * r + 1]), x[3 * r + 1].max(x[3 * r + 2])])
            .collect(),
    ];
    outputs_are(&g, &want);
}

#[test]
fn channel_dropout_is_the_identity_and_a_training_dropout_is_refused() {
    let (x, _) = xy();
    let drop = |out: &str, target: &str, train: bool| {
        node(
            out,
            target,
            &[
                ("input", tensor_arg("x")),
                ("p", json!({"as_float": 0.1})),
                ("train", json!({ "as_bool": train })),
            ],
        )
    };
    let g = imported(
        vec![drop("d", "torch.ops.aten.feature_dropout.default", false)],
        &["d"],
        &[("d", &[2, 3])],
    );
    outputs_are(&g, &[x]);
    let e = import(program_of(
        vec![drop("d", "torch.ops.aten.dropout.default", true)],
        &["d"],
        &[("d", &[2, 3])],
    ))
    .expect_err("a training dropout");
    assert_says(&e, &["node `d`", "train", "model.eval()"]);
}

/// `ar = arange(2)` in int64.
fn ar_int64() -> Value {
    node(
        "ar",
        "torch.ops.aten.arange.default",
        &[("end", int_arg(2)), ("dtype", json!({"as_scalar_type": 5}))],
    )
}

/// `rows = ar.flip(0)`: the int64 indices `[1, 0]`.
fn rows_1_0() -> Value {
    node(
        "rows",
        "torch.ops.aten.flip.default",
        &[("self", tensor_arg("ar")), ("dims", ints_arg(&[0]))],
    )
}

#[test]
fn index_put_with_a_mask_and_with_integer_indices() {
    let (x, y) = xy();
    let put = |out: &str, target: &str, of: &str, indices: Value, values: &str, acc: bool| {
        node(
            out,
            target,
            &[
                ("self", tensor_arg(of)),
                ("indices", indices),
                ("values", tensor_arg(values)),
                ("accumulate", json!({ "as_bool": acc })),
            ],
        )
    };
    let some = |names: &[Option<&str>]| {
        json!({ "as_optional_tensors": names.iter().map(|n| match n {
            Some(n) => json!({"as_tensor": {"name": n}}),
            None => json!({"as_none": true}),
        }).collect::<Vec<_>>() })
    };
    let nodes = vec![
        node(
            "yf",
            "torch.ops.aten.view.default",
            &[("self", tensor_arg("y")), ("size", ints_arg(&[6]))],
        ),
        node(
            "y0",
            "torch.ops.aten.select.int",
            &[
                ("self", tensor_arg("yf")),
                ("dim", int_arg(0)),
                ("index", int_arg(0)),
            ],
        ),
        node(
            "mask",
            "torch.ops.aten.gt.Scalar",
            &[("self", tensor_arg("x")), ("other", int_arg(0))],
        ),
        put(
            "masked",
            "torch.ops.aten.index_put.default",
            "x",
            some(&[Some("mask")]),
            "y0",
            false,
        ),
        node(
            "am",
            "torch.ops.aten.argmax.default",
            &[("self", tensor_arg("x")), ("dim", int_arg(1))],
        ),
        node(
            "z",
            "torch.ops.aten.view.default",
            &[("self", tensor_arg("x")), ("size", ints_arg(&[6]))],
        ),
        slice("v2", "yf", 0, 0, 2),
        slice("v4", "yf", 0, 0, 4),
        put(
            "set",
            "torch.ops.aten.index_put.default",
            "z",
            some(&[Some("am")]),
            "v2",
            false,
        ),
        node(
            "am2",
            "torch.ops.aten.cat.default",
            &[("tensors", tensors_arg(&["am", "am"]))],
        ),
        put(
            "acc",
            "torch.ops.aten.index_put.default",
            "z",
            some(&[Some("am2")]),
            "v4",
            true,
        ),
        node(
            "nam",
            "torch.ops.aten.neg.default",
            &[("self", tensor_arg("am"))],
        ),
        put(
            "neg",
            "torch.ops.aten.index_put.default",
            "z",
            some(&[Some("nam")]),
            "v2",
            false,
        ),
        ar_int64(),
        rows_1_0(),
        put(
            "two",
            "torch.ops.aten.index_put.default",
            "x",
            some(&[Some("rows"), Some("am")]),
            "v2",
            false,
        ),
    ];
    let shapes: &[(&str, &[i64])] = &[
        ("yf", &[6]),
        ("y0", &[]),
        ("mask", &[2, 3]),
        ("masked", &[2, 3]),
        ("am", &[2]),
        ("z", &[6]),
        ("v2", &[2]),
        ("v4", &[4]),
        ("set", &[6]),
        ("am2", &[4]),
        ("acc", &[6]),
        ("nam", &[2]),
        ("neg", &[6]),
        ("ar", &[2]),
        ("rows", &[2]),
        ("two", &[2, 3]),
    ];
    let dtypes = [
        ("mask", 12),
        ("am", 5),
        ("am2", 5),
        ("nam", 5),
        ("ar", 5),
        ("rows", 5),
    ];
    let outputs = ["masked", "set", "acc", "neg", "two"];
    let zip = program_typed(nodes, &outputs, shapes, &dtypes);
    generated_code_agrees("index_put", &zip);
    let g = import(zip).unwrap_or_else(|e| panic!("{e}"));
    // x = [-1.5, 0.25, 2.0; -0.5, 3.0, -2.25]: row maxima at columns 2 and 1.
    let masked: Vec<f64> = x.iter().map(|&a| if a > 0.0 { y[0] } else { a }).collect();
    let mut set = x.clone();
    set[2] = y[0];
    set[1] = y[1];
    let mut acc = x.clone();
    acc[2] += y[0] + y[2];
    acc[1] += y[1] + y[3];
    let mut neg = x.clone();
    neg[4] = y[0];
    neg[5] = y[1];
    let mut two = x.clone();
    two[3 + 2] = y[0];
    two[1] = y[1];
    outputs_are(&g, &[masked, set, acc, neg, two]);
}

#[test]
fn zero_d_operands_of_dim_taking_expansions_are_handled_or_refused() {
    let (_, y) = xy();
    let y0 = || {
        vec![
            node(
                "yf",
                "torch.ops.aten.view.default",
                &[("self", tensor_arg("y")), ("size", ints_arg(&[6]))],
            ),
            node(
                "y0",
                "torch.ops.aten.select.int",
                &[
                    ("self", tensor_arg("yf")),
                    ("dim", int_arg(0)),
                    ("index", int_arg(0)),
                ],
            ),
        ]
    };
    let mut nodes = y0();
    nodes.extend([
        node(
            "fl",
            "torch.ops.aten.flip.default",
            &[("self", tensor_arg("y0")), ("dims", ints_arg(&[-1]))],
        ),
        node(
            "mv",
            "torch.ops.aten.movedim.int",
            &[
                ("self", tensor_arg("y0")),
                ("source", int_arg(0)),
                ("destination", int_arg(-1)),
            ],
        ),
        node(
            "ri",
            "torch.ops.aten.repeat_interleave.self_int",
            &[
                ("self", tensor_arg("y0")),
                ("repeats", int_arg(3)),
                ("dim", int_arg(0)),
            ],
        ),
    ]);
    let shapes: &[(&str, &[i64])] = &[
        ("yf", &[6]),
        ("y0", &[]),
        ("fl", &[]),
        ("mv", &[]),
        ("ri", &[3]),
    ];
    let g = imported(nodes, &["fl", "mv", "ri"], shapes);
    outputs_are(&g, &[vec![y[0]], vec![y[0]], vec![y[0]; 3]]);
    let mut nodes = y0();
    nodes.push(node(
        "gl",
        "torch.ops.aten.glu.default",
        &[("self", tensor_arg("y0")), ("dim", int_arg(0))],
    ));
    let e = import(program_of(
        nodes,
        &["gl"],
        &[("yf", &[6]), ("y0", &[]), ("gl", &[])],
    ))
    .expect_err("glu of a 0-d tensor");
    assert_says(&e, &["node `gl`", "glu of a 0-d tensor"]);
}

// ---- writes into the graph's inputs ----

/// `program` with its signature edited: `x` given as a buffer (`b_x`, buffer `cache.x`)
/// or parameter rather than a user input, and extra output specs after the user outputs.
fn program_with_signature(
    nodes: Vec<Value>,
    outputs: &[&str],
    x_kind: Option<(&str, &str)>,
    extra_outputs: Vec<Value>,
) -> Vec<u8> {
    let bytes = program_of(nodes, outputs, &[]);
    let mut members: Vec<(String, Vec<u8>)> = {
        let dir = temp_dir("signature");
        let path = dir.join("p.pt2");
        std::fs::write(&path, &bytes).expect("write");
        let m = members(&path);
        let _ = std::fs::remove_dir_all(&dir);
        m
    };
    let model = members
        .iter_mut()
        .find(|(n, _)| n.ends_with("model.json"))
        .expect("model.json");
    let mut v: Value = serde_json::from_slice(&model.1).expect("json");
    let sig = &mut v["graph_module"]["signature"];
    if let Some((kind, key)) = x_kind {
        let field = format!("{kind}_name");
        sig["input_specs"][0] = json!({ kind: { "arg": { "name": "x" }, field: key } });
    }
    for o in extra_outputs {
        sig["output_specs"].as_array_mut().expect("outputs").push(o);
    }
    model.1 = serde_json::to_vec(&v).expect("json");
    write_zip(&members, false)
}

fn import_as_inputs(zip: Vec<u8>) -> Result<Graph, String> {
    let options = Pt2Options {
        params_as_inputs: true,
        ..Pt2Options::default()
    };
    read_pt2(std::io::Cursor::new(zip), "mutation", &options).map_err(|e| kiln::diag::report(&e))
}

/// A graph that writes into one of its inputs (`x += y` on a user input, through a view of
/// it, on a buffer or a parameter, or a decomposed program's mutation output) is refused,
/// naming the node and the input: Kiln's call keeps no state, so the input would keep its
/// old value and PyTorch's next call would differ from Kiln's. A write into a tensor the
/// graph made itself is still functionalised (the tests above).
#[test]
fn a_write_into_a_graph_input_is_refused_naming_the_writer_and_the_input() {
    let add_ = |into: &str| binary("torch.ops.aten.add_.Tensor", into, "y", "add_");
    let mul = binary("torch.ops.aten.mul.Tensor", "add_", "y", "out");
    let direct = vec![add_("x"), mul.clone()];
    let e = import(program_of(
        direct.clone(),
        &["out"],
        &[("add_", &[2, 3]), ("out", &[2, 3])],
    ))
    .expect_err("a write into a user input");
    assert_says(
        &e,
        &[
            "node `add_` writes a new value into the user input `x` in place",
            "keeps state between calls only in the parameters, buffers and constants",
            "returns the new value",
        ],
    );

    let view = node(
        "v",
        "torch.ops.aten.view.default",
        &[
            ("self", tensor_arg("x")),
            ("size", json!({"as_ints": [2, 3]})),
        ],
    );
    let through_view = vec![view, add_("v"), mul.clone()];
    let e = import(program_of(
        through_view,
        &["out"],
        &[("v", &[2, 3]), ("add_", &[2, 3]), ("out", &[2, 3])],
    ))
    .expect_err("a write through a view of a user input");
    assert_says(
        &e,
        &["node `add_` writes a new value into the user input `x`"],
    );

    for (kind, shown) in [
        ("buffer", "the buffer `cache.x`"),
        ("parameter", "the parameter `cache.x`"),
    ] {
        let zip = program_with_signature(direct.clone(), &["out"], Some((kind, "cache.x")), vec![]);
        let e = import_as_inputs(zip).expect_err(kind);
        assert_says(
            &e,
            &[&format!(
                "node `add_` writes a new value into {shown} in place"
            )],
        );
    }

    // run_decompositions()'s form: the new value is an output of kind buffer_mutation.
    let functional = vec![
        binary("torch.ops.aten.add.Tensor", "x", "y", "add"),
        binary("torch.ops.aten.mul.Tensor", "add", "y", "out"),
    ];
    let mutation = json!({"buffer_mutation": {"arg": {"name": "add"}, "buffer_name": "cache.x"}});
    let zip = program_with_signature(
        functional,
        &["out"],
        Some(("buffer", "cache.x")),
        vec![mutation],
    );
    let e = import_as_inputs(zip).expect_err("a buffer_mutation output");
    assert_says(
        &e,
        &["output `buffer_mutation` writes a new value into the buffer `cache.x`"],
    );
}

/// `unbind` gives a select per index of its dim; `index_copy` (and its in-place form on a
/// tensor the graph made) replaces the slices `index[k]` along its dim by source's slices
/// k; a source of another shape is refused, as PyTorch refuses it.
#[test]
fn unbind_and_index_copy_as_pytorch_defines_them() {
    let (x, y) = xy();
    let mut unbind = node(
        "unbind",
        "torch.ops.aten.unbind.int",
        &[("self", tensor_arg("x")), ("dim", int_arg(1))],
    );
    unbind["outputs"] = json!([{"as_tensors": [{"name": "u0"}, {"name": "u1"}, {"name": "u2"}]}]);
    let rows = |of: &str| {
        vec![
            ar_int64(),
            rows_1_0(),
            node(
                "c",
                "torch.ops.aten.clone.default",
                &[("self", tensor_arg("x"))],
            ),
            node(
                "copied",
                "torch.ops.aten.index_copy_.default",
                &[
                    ("self", tensor_arg("c")),
                    ("dim", int_arg(0)),
                    ("index", tensor_arg("rows")),
                    ("source", tensor_arg(of)),
                ],
            ),
        ]
    };
    let mut nodes = vec![unbind];
    nodes.extend(rows("y"));
    let shapes: &[(&str, &[i64])] = &[
        ("u0", &[2]),
        ("u1", &[2]),
        ("u2", &[2]),
        ("ar", &[2]),
        ("rows", &[2]),
        ("c", &[2, 3]),
        ("copied", &[2, 3]),
    ];
    let dtypes = [("ar", 5), ("rows", 5)];
    let zip = program_typed(nodes, &["u2", "c"], shapes, &dtypes);
    generated_code_agrees("unbind_index_copy", &zip);
    let g = import(zip).unwrap_or_else(|e| panic!("{e}"));
    // rows = [1, 0]: row 1 of the copy is y's row 0, row 0 y's row 1.
    let swapped: Vec<f64> = y[3..].iter().chain(&y[..3]).copied().collect();
    outputs_are(&g, &[vec![x[2], x[5]], swapped]);

    // A source of 2 x 2 for 2 rows of 3: refused.
    let mut nodes = vec![node(
        "ys",
        "torch.ops.aten.slice.Tensor",
        &[
            ("self", tensor_arg("y")),
            ("dim", int_arg(1)),
            ("start", int_arg(0)),
            ("end", int_arg(2)),
        ],
    )];
    nodes.extend(rows("ys"));
    let shapes: &[(&str, &[i64])] = &[
        ("ys", &[2, 2]),
        ("ar", &[2]),
        ("rows", &[2]),
        ("c", &[2, 3]),
        ("copied", &[2, 3]),
    ];
    let e = import(program_typed(nodes, &["c"], shapes, &dtypes)).expect_err("a wrong source");
    assert_says(&e, &["index_copy", "`source` must be float32[2, 3]"]);
}

/// A query whose keys are all masked out (a bool mask of no true, an additive mask of all
/// -inf) attends to nothing: PyTorch's attention gives zeros there (its `_safe_softmax`),
/// not softmax's 0 / 0, and so does Kiln, on the interpreter, after the passes and in
/// generated code; `_safe_softmax` itself is softmax with such rows zeros.
#[test]
fn a_query_with_every_key_masked_out_attends_to_nothing() {
    let (_, y) = xy();
    let view = |out: &str, of: &str| {
        node(
            out,
            "torch.ops.aten.view.default",
            &[("self", tensor_arg(of)), ("size", ints_arg(&[1, 1, 2, 3]))],
        )
    };
    let sdpa = |out: &str, mask: &str| {
        node(
            out,
            "torch.ops.aten.scaled_dot_product_attention.default",
            &[
                ("query", tensor_arg("q")),
                ("key", tensor_arg("k")),
                ("value", tensor_arg("k")),
                ("attn_mask", tensor_arg(mask)),
            ],
        )
    };
    let nodes = vec![
        view("q", "x"),
        view("k", "y"),
        slice("x2", "x", 1, 0, 2),
        // keys kept: none for query 0, key 1 for query 1
        node(
            "m",
            "torch.ops.aten.gt.Scalar",
            &[
                ("self", tensor_arg("x2")),
                ("other", json!({"as_float": 0.5})),
            ],
        ),
        node(
            "mf",
            "torch.ops.aten._to_copy.default",
            &[
                ("self", tensor_arg("m")),
                ("dtype", json!({"as_scalar_type": 7})),
            ],
        ),
        node(
            "madd",
            "torch.ops.aten.log.default",
            &[("self", tensor_arg("mf"))],
        ),
        sdpa("by_bool", "m"),
        sdpa("by_add", "madd"),
        // x where x > 2.5, else -inf: row 0 all -inf
        node(
            "big",
            "torch.ops.aten.gt.Scalar",
            &[
                ("self", tensor_arg("x")),
                ("other", json!({"as_float": 2.5})),
            ],
        ),
        node(
            "w",
            "torch.ops.aten.where.ScalarOther",
            &[
                ("condition", tensor_arg("big")),
                ("self", tensor_arg("x")),
                ("other", json!({"as_float": "-Infinity"})),
            ],
        ),
        node(
            "safe",
            "torch.ops.aten._safe_softmax.default",
            &[("self", tensor_arg("w")), ("dim", int_arg(1))],
        ),
    ];
    let shapes: &[(&str, &[i64])] = &[
        ("q", &[1, 1, 2, 3]),
        ("k", &[1, 1, 2, 3]),
        ("x2", &[2, 2]),
        ("m", &[2, 2]),
        ("mf", &[2, 2]),
        ("madd", &[2, 2]),
        ("by_bool", &[1, 1, 2, 3]),
        ("by_add", &[1, 1, 2, 3]),
        ("big", &[2, 3]),
        ("w", &[2, 3]),
        ("safe", &[2, 3]),
    ];
    let zip = program_typed(
        nodes,
        &["by_bool", "by_add", "safe"],
        shapes,
        &[("m", 12), ("big", 12)],
    );
    generated_code_agrees("fully_masked", &zip);
    let g = import(zip).unwrap_or_else(|e| panic!("{e}"));
    let attended: Vec<f64> = [0.0, 0.0, 0.0].iter().chain(&y[3..]).copied().collect();
    outputs_are(
        &g,
        &[
            attended.clone(),
            attended,
            vec![0.0, 0.0, 0.0, 0.0, 1.0, 0.0],
        ],
    );
}

/// A real decoding step with a static KV cache (transformers' export of GPT-2 for
/// on-device runtimes, `tests/fixtures/decode/`) writes its cache and position counters
/// in place, into tensor constants export lifted: each becomes state the program keeps,
/// read as one of the graph's last inputs and given back as one of its last outputs,
/// holding the archive's value before the first call.
#[test]
fn a_decoding_step_keeps_its_static_cache_and_counters_as_state() {
    let path = fixtures().join("../decode/gpt2_static_cache_step.pt2");
    let g = load(&path).expect("a decoding step");
    let names: Vec<&str> = g.state().iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "lifted_tensor_0",
            "lifted_tensor_1",
            "model.transformer.h.0.attn.lifted_tensor_2",
            "model.transformer.h.0.attn.lifted_tensor_3",
            "model.transformer.h.1.attn.lifted_tensor_4",
            "model.transformer.h.1.attn.lifted_tensor_5",
        ]
    );
    assert_eq!((g.inputs().len(), g.outputs().len()), (8, 7));
    for (k, s) in g.state().iter().enumerate() {
        assert_eq!((s.input, s.output), (2 + k, 1 + k), "{}", s.name);
        let meta = &g.node(g.inputs()[s.input]).unwrap().outputs[0];
        let init: Vec<f64> = (0..meta.numel() as usize).map(|i| s.init.get(i)).collect();
        let want = if k < 2 { 1.0 } else { 0.0 }; // the counters start at 1, the caches empty
        assert!(init.iter().all(|&v| v == want), "{}: {init:?}", s.name);
    }
}

/// The step's `cache_position` reaches the cache's `index_copy` (8 positions) and the
/// position embedding (64) through a `select`, a `copy_` into the position counter and
/// an add of `arange(1)`: random inputs for it are valid positions, and `host eval
/// --check` compares the step with random inputs instead of failing on an index.
#[test]
fn a_decoding_step_s_position_is_drawn_within_the_cache() {
    let path = fixtures().join("../decode/gpt2_static_cache_step.pt2");
    let g = load(&path).expect("a decoding step");
    let bounds: Vec<Option<i64>> = g.inputs().iter().map(|&i| g.index_bound(i)).collect();
    // input_ids index the 32 token embeddings; cache_position the 8 cache positions.
    assert_eq!(&bounds[..2], &[Some(32), Some(8)]);
    let out = Command::new(env!("CARGO_BIN_EXE_host"))
        .args(["eval", "--device", "cuda", "--check"])
        .arg(&path)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(stdout.contains("all 7 output(s) match"), "{stdout}");
}

/// The decoding step as the Python wrapper of a Triton device runs it: each layer's new
/// keys and values are stored into the cache inputs themselves by one kernel (a scatter
/// at the position, no extern `index_copy`): the kernel of the layer's query, key and
/// value products, three reductions (`passes::few_rows::split_parts`) whose epilogue the
/// stores are, with the layer norm before them where nothing else reads it. The
/// position counters are stored into their inputs by the kernel that computes them.
/// Every output (the logits, the counters, the caches the state hands back) matches the
/// interpreter's.
#[test]
fn a_kernel_writes_the_static_cache_in_place_and_the_step_still_matches() {
    use kiln::schedule::ir::{BufferKind, ExternOp, Step};
    let path = fixtures().join("../decode/gpt2_static_cache_step.pt2");
    let g = load(&path).expect("a decoding step");
    let artifacts = kiln::driver::compile(g.clone(), &common::plugin("cuda"), &Default::default())
        .expect("compiles for cuda");
    let p = &artifacts.scheduled.program;
    let scattered: Vec<usize> = p
        .steps
        .iter()
        .filter_map(|s| match s {
            Step::Kernel(k) => Some(k),
            _ => None,
        })
        .flat_map(|k| k.stores.iter().filter(|s| !s.indirect.is_empty()))
        .map(|s| match p.buffer(s.buf).kind {
            BufferKind::Input { index, .. } => index,
            ref other => panic!("a scatter into {other:?}"),
        })
        .collect();
    assert_eq!(
        scattered,
        [4, 5, 6, 7],
        "the four caches, one kernel a layer"
    );
    let scattering: Vec<usize> = p
        .steps
        .iter()
        .filter_map(|s| match s {
            Step::Kernel(k) if k.stores.iter().any(|s| !s.indirect.is_empty()) => {
                Some(k.reductions.len())
            }
            _ => None,
        })
        .collect();
    // The second layer's kernel also takes in the layer norm before it (two more
    // reductions, `fuse::takes_in`); the first layer's norm, of the embeddings whose
    // sum the residual reads too, is a kernel of its own.
    assert_eq!(scattering, [3, 5], "a layer's q, k and v products scatter");
    // The counters too: each state's new value is stored into the state's input by
    // the kernel that computes it, so that the wrapper copies nothing back.
    for s in g.state() {
        assert_eq!(p.outputs[s.output].buf, p.inputs[s.input], "{}", s.name);
    }
    assert!(!p
        .steps
        .iter()
        .any(|s| matches!(s, Step::Extern(e) if matches!(e.op, ExternOp::IndexCopy { .. }))));
    let metas: Vec<TensorMeta> = (0..g.inputs().len())
        .map(|i| g.input_meta(i).unwrap().clone())
        .collect();
    let mut inputs = kiln::tensor_io::random_inputs(&metas, 11);
    // Token 7 at position 3; the counters start where the archive starts them; the
    // caches hold random values.
    inputs[0] = Tensor::new(metas[0].hint_shape(), metas[0].dtype, vec![7.0]);
    inputs[1] = Tensor::new(metas[1].hint_shape(), metas[1].dtype, vec![3.0]);
    for s in g
        .state()
        .iter()
        .filter(|s| !metas[s.input].dtype.is_float())
    {
        let m = &metas[s.input];
        let values = (0..m.numel() as usize).map(|i| s.init.get(i)).collect();
        inputs[s.input] = Tensor::new(m.hint_shape(), m.dtype, values);
    }
    let want = kiln::interp::evaluate(&g, &inputs).expect("interpreter");
    let got = kiln::schedule::eval::run(&artifacts.scheduled, &inputs).expect("loop IR");
    assert_eq!(got.len(), want.len());
    for (i, (a, b)) in got.iter().zip(&want).enumerate() {
        let err = rel_err(a, &b.to_vec());
        assert!(err <= 1e-5, "output {i}: relative error {err:e}");
    }
}

/// `atan2`, `hypot` and `copysign` as PyTorch defines them, on floats and on integers
/// (promoted to float), in the interpreter and in generated code.
#[test]
fn atan2_hypot_and_copysign() {
    let (x, y) = xy();
    let bin = |out: &str, target: &str, a: &str, b: &str| binary(target, a, b, out);
    let int = |out: &str, of: &str| {
        node(
            out,
            "torch.ops.aten._to_copy.default",
            &[
                ("self", tensor_arg(of)),
                ("dtype", json!({"as_scalar_type": 5})),
            ],
        )
    };
    let nodes = vec![
        bin("at", "torch.ops.aten.atan2.default", "x", "y"),
        bin("hy", "torch.ops.aten.hypot.default", "x", "y"),
        bin("cs", "torch.ops.aten.copysign.Tensor", "x", "y"),
        int("xi", "x"),
        int("yi", "y"),
        bin("ati", "torch.ops.aten.atan2.default", "xi", "yi"),
    ];
    let shapes: &[(&str, &[i64])] = &[
        ("at", &[2, 3]),
        ("hy", &[2, 3]),
        ("cs", &[2, 3]),
        ("xi", &[2, 3]),
        ("yi", &[2, 3]),
        ("ati", &[2, 3]),
    ];
    let zip = program_typed(
        nodes,
        &["at", "hy", "cs", "ati"],
        shapes,
        &[("xi", 5), ("yi", 5)],
    );
    generated_code_agrees("atan2_hypot_copysign", &zip);
    let g = import(zip).unwrap_or_else(|e| panic!("{e}"));
    let each = |f: fn(f64, f64) -> f64, a: &[f64], b: &[f64]| -> Vec<f64> {
        a.iter().zip(b).map(|(a, b)| f(*a, *b)).collect()
    };
    // An integer has no -0: -0.5 becomes +0.
    let (xi, yi): (Vec<f64>, Vec<f64>) = (
        x.iter().map(|v| v.trunc() + 0.0).collect(),
        y.iter().map(|v| v.trunc() + 0.0).collect(),
    );
    let round = |v: Vec<f64>| v.into_iter().map(|a| a as f32 as f64).collect::<Vec<_>>();
    outputs_are(
        &g,
        &[
            round(each(f64::atan2, &x, &y)),
            round(each(f64::hypot, &x, &y)),
            each(f64::copysign, &x, &y),
            round(each(f64::atan2, &xi, &yi)),
        ],
    );
}
