//! Real torch.export archives (`tests/fixtures/pt2/`, both forms) import, match
//! PyTorch's outputs before and after the passes and through the scheduled loop IR, and
//! compile for every GPU plugin through the real binary; broken archives fail with a
//! message that says what is wrong.

mod common;

use kiln::graph::front::pt2::{read_pt2, Limits, Pt2Options};
use kiln::graph::ir::{Graph, TensorMeta};
use kiln::graph::{load, load_with, LoadOptions, Op};
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

/// Largest |got - want| relative to the largest |want|.
fn rel_err(got: &Tensor, want: &[f64]) -> f64 {
    let got = got.to_vec();
    assert_eq!(got.len(), want.len(), "output sizes differ");
    let scale = want.iter().fold(0.0f64, |m, v| m.max(v.abs())).max(1e-30);
    got.iter()
        .zip(want)
        .fold(0.0f64, |m, (a, b)| m.max((a - b).abs()))
        / scale
}

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
            inputs.push(kiln::interp::constant(&c.outputs[0], data));
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
            &[Tensor::new(meta.shape, meta.dtype, got)],
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
    let got = Tensor::new(meta.shape, meta.dtype, got);
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
    assert_says(&e, &["`x`", "symbolic (dynamic) size `s77`"]);
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
        params_as_inputs: false,
        limits: Limits {
            max_total_bytes: 1 << 20,
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
            "archive/models/model.json",
            "decompressed size limit of 1048576 bytes",
        ],
    );
    // The cap counts every member read: the weights take the total past a small cap.
    let tiny = Pt2Options {
        limits: Limits {
            max_total_bytes: 20_000,
            ..Limits::default()
        },
        ..small
    };
    let zipped = write_zip(&members(&fixtures().join("mlp.pt2")), false);
    let err = read_pt2(std::io::Cursor::new(zipped), "mlp", &tiny).expect_err("capped");
    assert_says(&kiln::diag::report(&err), &["decompressed size limit"]);
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
        err.contains("decompressed size limit of 1073741824 bytes"),
        "{err}"
    );
    assert!(err.contains("--max-memory"), "{err}");
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
fn an_in_place_write_through_a_view_is_refused_where_an_alias_is_read() {
    let view = |name: &str, of: &str| {
        fx(
            name,
            "torch.ops.aten.view.default",
            serde_json::json!([named_tensor("self", of),
                {"name": "size", "arg": {"as_ints": [8, 128]}, "kind": 1}]),
        )
    };
    let write = fx(
        "relu_",
        "torch.ops.aten.relu_.default",
        serde_json::json!([named_tensor("self", "v")]),
    );
    // `relu` is read after its view `v` was written: PyTorch would see the write.
    let m = mlp_with(vec![view("v", "relu"), write.clone()], "relu");
    let e = load_error("alias", &write_zip(&m, false));
    assert_says(
        &e,
        &[
            "reads `relu` after node `relu_` changed it in place",
            "run_decompositions()",
        ],
    );
    // Reading the written view itself, or the in-place op's result, is exact.
    for reader in ["v", "relu_"] {
        let m = mlp_with(vec![view("v", "relu"), write.clone()], reader);
        load_ok("alias_ok", &write_zip(&m, false));
    }
    // A view made before an in-place write to its base is stale too.
    let base_write = fx(
        "relu_",
        "torch.ops.aten.relu_.default",
        serde_json::json!([named_tensor("self", "relu")]),
    );
    let m = mlp_with(vec![view("v", "relu"), base_write], "v");
    let e = load_error("alias_base", &write_zip(&m, false));
    assert_says(&e, &["reads `v` after node `relu_` changed it in place"]);
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
