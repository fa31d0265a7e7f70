//! Real torch.export archives (`tests/fixtures/pt2/`, both forms) import, match
//! PyTorch's outputs before and after the passes and through the scheduled loop IR, and
//! compile for every GPU plugin through the real binary; broken archives fail with a
//! message that says what is wrong.

mod common;

use kiln::graph::front::pt2::{read_pt2, Limits, Pt2Options};
use kiln::graph::ir::{Graph, TensorMeta};
use kiln::graph::{load, load_with, LoadOptions, Op};
use kiln::tensor::Tensor;
use serde_json::Value;
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
