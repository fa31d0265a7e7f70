//! Exports with dynamic shapes (tests/fixtures/dynamic, made by tools/export_dynamic.py: an
//! MLP with layer norm in both IR forms, a GPT-2 LM and BERT with an attention mask, each with
//! a dynamic batch and sequence length): specialised at a size in the range, each imports at
//! that size and matches PyTorch's outputs there, in the interpreter and through the program
//! the cpu device ships. Sizes outside the range, unknown symbols and a static archive given
//! sizes are refused with what the archive offers. Convolutional networks exported static take
//! a batch made dynamic on the command line.

mod common;

use kiln::graph::{load_with, LoadOptions};
use kiln::tensor::Tensor;
use serde_json::Value;
use std::path::PathBuf;

fn fixtures() -> PathBuf {
    common::repo_root().join("tests/fixtures/dynamic")
}

fn cases() -> Value {
    let text = std::fs::read_to_string(fixtures().join("cases.json")).expect("cases.json");
    serde_json::from_str(&text).expect("cases.json parses")
}

fn specialized(
    archive: &str,
    specialize: Vec<(String, i64)>,
) -> Result<kiln::graph::Graph, String> {
    let options = LoadOptions {
        specialize,
        ..Default::default()
    };
    load_with(fixtures().join(format!("{archive}.pt2")), &options)
        .map_err(|e| kiln::diag::report(&e))
}

use common::rel_err;

/// Every archive at every size of cases.json.
#[test]
fn each_dynamic_export_matches_pytorch_at_sizes_across_its_range() {
    let cases = cases();
    let archives = cases.as_object().expect("an object");
    assert_eq!(
        archives.len(),
        6,
        "mlp_ln, mlp_ln_core, gpt2, gpt2_core, bert, bert_core"
    );
    let cpu = common::plugin("cpu");
    for (archive, case) in archives {
        let dims = case["dims"].as_object().expect("dims");
        let (first, _) = dims.iter().next().expect("a dynamic input");
        let input = first.split(':').next().unwrap();
        let symbol = |d: usize| dims[&format!("{input}:{d}")].as_str().unwrap().to_string();
        for size in case["sizes"].as_array().unwrap() {
            let (b, l) = (
                size["batch"].as_i64().unwrap(),
                size["seq"].as_i64().unwrap(),
            );
            let what = format!("{archive} at batch {b}, sequence {l}");
            let g = specialized(archive, vec![(symbol(0), b), (symbol(1), l)])
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            let mut inputs = vec![];
            for (k, file) in size["inputs"].as_array().unwrap().iter().enumerate() {
                let meta = g.input_meta(k).unwrap().clone();
                assert_eq!(&meta.shape[..2], &[b, l], "{what}: input {k}");
                let bytes = std::fs::read(fixtures().join(file.as_str().unwrap())).unwrap();
                inputs.push(Tensor::new(
                    meta.hint_shape(),
                    meta.dtype,
                    meta.dtype.decode_le(&bytes),
                ));
            }
            let want = common::read_f32(&fixtures().join(size["expected"].as_str().unwrap()));
            let got = kiln::interp::evaluate(&g, &inputs).unwrap_or_else(|e| panic!("{what}: {e}"));
            let err = rel_err(&got[0], &want);
            assert!(err <= 1e-4, "{what}: interpreter, relative error {err:e}");
            let artifacts = kiln::driver::compile(g, &cpu, &Default::default())
                .unwrap_or_else(|e| panic!("{what}: {}", kiln::diag::report(&e)));
            let ran = kiln::schedule::eval::run(&artifacts.scheduled, &inputs).expect("loop IR");
            let err = rel_err(&ran[0], &want);
            assert!(
                err <= 1e-4,
                "{what}: the cpu device's program, relative error {err:e}"
            );
        }
    }
}

/// Each archive imported once with its symbols kept: every input's dims are the export's
/// symbols, every value's size is an expression over them that equals what PyTorch
/// recorded (the importer checks each), and the reference interpreter runs the one graph,
/// as imported and after the pass pipeline, at every size of cases.json, matching PyTorch;
/// so does the program of one compile for a Triton device (its loop IR, evaluated at
/// each size).
#[test]
fn one_symbolic_import_matches_pytorch_at_every_size() {
    let cases = cases();
    let cuda = common::plugin("cuda");
    for (archive, case) in cases.as_object().expect("an object") {
        let g = symbolic(archive);
        let symbols = g.symbols();
        for (dim, name) in case["dims"].as_object().expect("dims") {
            let (input, d) = dim.split_once(':').unwrap();
            let k = (0..g.inputs().len())
                .find(|&k| g.node(g.inputs()[k]).is_some_and(|n| n.name == input))
                .unwrap_or_else(|| panic!("{archive}: no input {input}"));
            let size = &g.input_meta(k).unwrap().shape[d.parse::<usize>().unwrap()];
            let id = symbols
                .find(name.as_str().unwrap())
                .expect("the symbol is kept");
            assert_eq!(size.as_symbol(), Some(id), "{archive}: {dim} is {size}");
            let range = &case["ranges"][name.as_str().unwrap()];
            let s = symbols.get(id).unwrap();
            assert_eq!(
                [s.lo, s.hi],
                [range[0].as_i64().unwrap(), range[1].as_i64().unwrap()]
            );
        }
        // The pass pipeline keeps the symbols: the composites decompose over them.
        let mut passed = g.clone();
        kiln::passes::run_pipeline(&mut passed)
            .unwrap_or_else(|e| panic!("{archive}: {}", kiln::diag::report(&e)));
        // One compile for a Triton device over the symbols, its program evaluated
        // at each size.
        let compiled = kiln::driver::compile(g.clone(), &cuda, &Default::default())
            .unwrap_or_else(|e| panic!("{archive}: {}", kiln::diag::report(&e)));
        let scheduled = &compiled.scheduled;
        for size in case["sizes"].as_array().unwrap() {
            let (b, l) = (
                size["batch"].as_i64().unwrap(),
                size["seq"].as_i64().unwrap(),
            );
            let what = format!("{archive} at batch {b}, sequence {l}");
            let (inputs, want) = inputs_at(&g, size);
            for (graph, when) in [(&g, "as imported"), (&passed, "after the passes")] {
                let got = kiln::interp::evaluate(graph, &inputs)
                    .unwrap_or_else(|e| panic!("{what}, {when}: {e}"));
                let err = rel_err(&got[0], &want);
                assert!(err <= 1e-4, "{what}, {when}: relative error {err:e}");
            }
            let got = kiln::schedule::eval::run(scheduled, &inputs)
                .unwrap_or_else(|e| panic!("{what}, the loop IR: {e}"));
            let err = rel_err(&got[0], &want);
            assert!(err <= 1e-4, "{what}, the loop IR: relative error {err:e}");
        }
    }
}

/// A fixture archive imported once with its size symbols kept (`--dynamic`).
fn symbolic(archive: &str) -> kiln::graph::Graph {
    let options = LoadOptions {
        dynamic: true,
        ..Default::default()
    };
    load_with(fixtures().join(format!("{archive}.pt2")), &options)
        .unwrap_or_else(|e| panic!("{archive}: {}", kiln::diag::report(&e)))
}

/// The inputs of one size of cases.json (`[batch, seq, ...]`, the rest of each input's
/// dims as `g` has them), and PyTorch's output there.
fn inputs_at(g: &kiln::graph::Graph, size: &Value) -> (Vec<Tensor>, Vec<f64>) {
    let (b, l) = (
        size["batch"].as_i64().unwrap(),
        size["seq"].as_i64().unwrap(),
    );
    let mut inputs = vec![];
    for (k, file) in size["inputs"].as_array().unwrap().iter().enumerate() {
        let meta = g.input_meta(k).unwrap();
        let bytes = std::fs::read(fixtures().join(file.as_str().unwrap())).unwrap();
        let mut shape = vec![b, l];
        shape.extend(meta.shape[2..].iter().map(|d| d.as_const().unwrap()));
        inputs.push(Tensor::new(shape, meta.dtype, meta.dtype.decode_le(&bytes)));
    }
    let want = common::read_f32(&fixtures().join(size["expected"].as_str().unwrap()));
    (inputs, want)
}

/// Each archive compiled once for the cpu device with its symbols kept: one C++ library,
/// built once, runs at every size of cases.json and matches PyTorch there. Each call
/// reads its sizes from its inputs; one outside the range, or inputs whose sizes disagree
/// (BERT's mask against its ids), is refused with the input, the dim and what it needed.
#[test]
fn one_cpu_library_runs_every_size_in_the_range() {
    let cases = cases();
    let cpu = common::plugin("cpu");
    for (archive, case) in cases.as_object().expect("an object") {
        let g = symbolic(archive);
        let compiled = kiln::driver::compile(g.clone(), &cpu, &Default::default())
            .unwrap_or_else(|e| panic!("{archive}: {}", kiln::diag::report(&e)));
        assert!(
            compiled.code.contains("kiln_call_shaped"),
            "{archive}: a library of a range of sizes"
        );
        let (module, _) =
            kiln::runtime::build_and_load(&compiled.code, &compiled.scheduled, &compiled.weights)
                .unwrap_or_else(|e| panic!("{archive}: {}", kiln::diag::report(&e)));
        for size in case["sizes"].as_array().unwrap() {
            let what = format!("{archive} at {}x{}", size["batch"], size["seq"]);
            let (inputs, want) = inputs_at(&g, size);
            let got = module
                .run(&inputs)
                .unwrap_or_else(|e| panic!("{what}: {}", kiln::diag::report(&e)));
            assert_eq!(got[0].numel(), want.len(), "{what}");
            let err = rel_err(&got[0], &want);
            assert!(err <= 1e-4, "{what}: relative error {err:e}");
        }
        // A batch past the range: the first input's dim 0.
        let (mut inputs, _) = inputs_at(&g, &case["sizes"][0]);
        let batch = case["dims"].as_object().unwrap().values().next().unwrap();
        let [lo, hi] = [0, 1].map(|i| case["ranges"][batch.as_str().unwrap()][i].as_i64().unwrap());
        let t = &inputs[0];
        let mut shape = t.shape.clone();
        shape[0] = hi + 1;
        let n: i64 = shape.iter().product();
        inputs[0] = Tensor::new(shape, t.dtype, vec![0.0; n as usize]);
        let err = kiln::diag::report(&module.run(&inputs).unwrap_err());
        let name = g.node(g.inputs()[0]).unwrap().name.clone();
        assert!(
            err.contains(&format!(
                "input 0 ({name}) has size {} in dim 0, outside the range the library was \
                 compiled for: {} from {lo} to {hi}",
                hi + 1,
                batch.as_str().unwrap()
            )),
            "{archive}: {err}"
        );
    }
    // BERT's mask one position longer than its ids.
    let g = symbolic("bert");
    let compiled = kiln::driver::compile(g.clone(), &cpu, &Default::default()).unwrap();
    let (module, _) =
        kiln::runtime::build_and_load(&compiled.code, &compiled.scheduled, &compiled.weights)
            .unwrap();
    let (mut inputs, _) = inputs_at(&g, &cases["bert"]["sizes"][1]);
    // Ids of another rank: refused before the library reads their sizes.
    let ids = &inputs[0];
    let flat = Tensor::new(vec![ids.numel() as i64], ids.dtype, ids.to_vec());
    let err = module
        .run(&[flat, inputs[1].clone()])
        .unwrap_err()
        .to_string();
    assert!(err.contains("input 0: expected int64 of 2 dims"), "{err}");
    let mask = &inputs[1];
    let shape = vec![mask.shape[0], mask.shape[1] + 1];
    let n: i64 = shape.iter().product();
    inputs[1] = Tensor::new(shape, mask.dtype, vec![1.0; n as usize]);
    let err = kiln::diag::report(&module.run(&inputs).unwrap_err());
    assert!(
        err.contains("input 1 (attention_mask) has size 9 in dim 1, where the program needs"),
        "{err}"
    );
}

/// Without `--specialize`, an export compiles at its example's sizes (batch 2, sequence 8).
#[test]
fn a_dynamic_export_takes_its_examples_sizes_by_default() {
    let g = specialized("bert", vec![]).unwrap();
    for k in 0..2 {
        assert_eq!(g.input_meta(k).unwrap().shape, [2, 8], "input {k}");
    }
}

#[test]
fn sizes_outside_the_range_and_unknown_symbols_are_refused_with_what_the_archive_offers() {
    let case = &cases()["gpt2"];
    let seq = case["dims"]["input_ids:1"].as_str().unwrap().to_string();
    let err = specialized("gpt2", vec![(seq.clone(), 65)]).unwrap_err();
    assert!(
        err.contains(&format!(
            "--specialize {seq}=65 is outside the range the export gives it, 2..=64"
        )),
        "{err}"
    );
    let err = specialized("gpt2", vec![("batch".into(), 2)]).unwrap_err();
    assert!(
        err.contains("the archive has no symbol `batch`; its symbols are"),
        "{err}"
    );
    assert!(err.contains(&format!("{seq} (2..=64)")), "{err}");
    let static_archive = common::pt2_fixtures().join("mlp.pt2");
    let options = LoadOptions {
        specialize: vec![("s0".into(), 4)],
        ..Default::default()
    };
    let err = kiln::diag::report(&load_with(static_archive, &options).unwrap_err());
    assert!(err.contains("the archive has static shapes"), "{err}");
}

/// A size as a node's argument in a graph file: a quoted name as `{ dim = "NAME" }`, a
/// number as itself.
fn size_arg(s: &str) -> String {
    if s.starts_with('"') {
        format!("{{ dim = {s} }}")
    } else {
        s.to_string()
    }
}

/// A graph file with named sizes: `x` `[batch, seq, 16]`, a product, heads split by a
/// `view` whose sizes name them, a transpose and a softmax.
fn named_sizes(batch: &str, seq: &str, dims: &str) -> String {
    let (b_arg, l_arg) = (size_arg(batch), size_arg(seq));
    format!(
        r#"format = "kiln-graph/1"
outputs = ["y"]
{dims}
[[inputs]]
name = "x"
shape = [{batch}, {seq}, 16]
dtype = "float32"

[[constants]]
name = "w"
shape = [16, 16]
dtype = "float32"
values = [{values}]

[[nodes]]
name = "h"
op = "matmul"
args = ["x", "w"]

[[nodes]]
name = "heads"
op = "view"
args = ["h", [{b_arg}, {l_arg}, 2, 8]]

[[nodes]]
name = "y"
op = "softmax"
args = ["heads", -1]
"#,
        values = (0..256)
            .map(|i| format!("{}", ((i * 37) % 11) as f64 / 8.0 - 0.6))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

const DIMS: &str =
    "\n[dims]\nbatch = { min = 1, max = 64, example = 4 }\nseq = { min = 2, max = 128 }\n";

fn with_sizes(text: &str, specialize: &[(&str, i64)]) -> Result<kiln::graph::Graph, String> {
    let specialize: Vec<(String, i64)> = specialize
        .iter()
        .map(|(n, v)| (n.to_string(), *v))
        .collect();
    kiln::graph::parse_toml_with(text, &specialize).map_err(|e| kiln::diag::report(&e))
}

/// Each named size takes its `example` (else its `min`) or the value `--specialize` gives,
/// in the shapes and in the node arguments that name it: the graph is the one written with
/// those numbers, value for value.
#[test]
fn a_graph_files_named_sizes_take_their_example_or_the_value_given() {
    let named = named_sizes("\"batch\"", "\"seq\"", DIMS);
    for (specialize, (b, l)) in [
        (vec![], (4, 2)),
        (vec![("seq", 33)], (4, 33)),
        (vec![("batch", 3), ("seq", 128)], (3, 128)),
    ] {
        let g = with_sizes(&named, &specialize).unwrap_or_else(|e| panic!("{specialize:?}: {e}"));
        let fixed =
            kiln::graph::parse_toml(&named_sizes(&b.to_string(), &l.to_string(), "")).unwrap();
        assert_eq!(g.input_meta(0).unwrap().shape, [b, l, 16]);
        let meta = g.input_meta(0).unwrap().clone();
        let inputs = kiln::tensor_io::random_inputs(&[meta], 5);
        let (got, want) = (
            kiln::interp::evaluate(&g, &inputs).unwrap(),
            kiln::interp::evaluate(&fixed, &inputs).unwrap(),
        );
        assert_eq!(got[0].shape, [b, l, 2, 8]);
        assert_eq!(got[0].to_vec(), want[0].to_vec(), "{specialize:?}");
    }
}

/// With `--dynamic` a graph file's named sizes stay size symbols: the input is `[batch,
/// seq, 16]`, the `view` takes them as sizes, and one cpu library runs at sizes across the
/// ranges, equal to the graph written with those numbers.
#[test]
fn a_graph_files_named_sizes_stay_symbols_with_dynamic_and_one_library_serves_them() {
    let named = named_sizes("\"batch\"", "\"seq\"", DIMS);
    let g = kiln::graph::parse_toml_sized(&named, &[], true)
        .unwrap_or_else(|e| panic!("{}", kiln::diag::report(&e)));
    let shape = &g.input_meta(0).unwrap().shape;
    assert_eq!(format!("{shape:?}"), "[ks0, ks1, 16]");
    let symbols = g.symbols();
    let batch = symbols.get(symbols.find("batch").unwrap()).unwrap();
    assert_eq!((batch.lo, batch.hi, batch.hint), (1, 64, 4));
    let compiled = kiln::driver::compile(g.clone(), &common::plugin("cpu"), &Default::default())
        .unwrap_or_else(|e| panic!("{}", kiln::diag::report(&e)));
    let (module, _) =
        kiln::runtime::build_and_load(&compiled.code, &compiled.scheduled, &compiled.weights)
            .unwrap_or_else(|e| panic!("{}", kiln::diag::report(&e)));
    for (b, l) in [(1, 2), (4, 9), (3, 128)] {
        let fixed =
            kiln::graph::parse_toml(&named_sizes(&b.to_string(), &l.to_string(), "")).unwrap();
        let meta = fixed.input_meta(0).unwrap().clone();
        let inputs = kiln::tensor_io::random_inputs(&[meta], 7);
        let want = kiln::interp::evaluate(&fixed, &inputs).unwrap();
        let got = module.run(&inputs).unwrap();
        assert_eq!(got[0].shape, [b, l, 2, 8]);
        let err = rel_err(&got[0], &want[0].to_vec());
        assert!(err <= 1e-5, "{b}x{l}: relative error {err:e}");
    }
    // A constant cannot name a size that varies.
    let text = named.replace("shape = [16, 16]", "shape = [\"batch\", 16]");
    let err = kiln::graph::parse_toml_sized(&text, &[], true).unwrap_err();
    assert!(
        kiln::diag::report(&err).contains("a constant's values fix its size"),
        "{}",
        kiln::diag::report(&err)
    );
}

/// `--dynamic x:0=1..64` on an export of static shapes (tests/fixtures/pt2/mlp.pt2, `x`
/// `[8, 64]`): the batch becomes a size symbol hinted at 8, the graph is inferred again
/// over it, and one cpu library gives PyTorch's rows at 1, 3 and 8 rows (the MLP's rows
/// are independent, so the first rows of the recorded output). An export whose `view`
/// fixes the size refuses, naming the node.
#[test]
fn dims_of_a_static_export_made_dynamic_on_the_command_line() {
    let g = marked_mlp("x:0=1..64".parse().unwrap());
    let meta = g.input_meta(0).unwrap().clone();
    assert_eq!(format!("{:?}", meta.shape), "[ks0, 64]");
    assert_eq!(
        g.symbols()
            .get(meta.shape[0].as_symbol().unwrap())
            .unwrap()
            .hint,
        8
    );
    let compiled = kiln::driver::compile(g, &common::plugin("cpu"), &Default::default())
        .unwrap_or_else(|e| panic!("{}", kiln::diag::report(&e)));
    let (module, _) =
        kiln::runtime::build_and_load(&compiled.code, &compiled.scheduled, &compiled.weights)
            .unwrap();
    let x = common::read_f32(&common::pt2_fixtures().join("mlp.input0.bin"));
    let want = common::read_f32(&common::pt2_fixtures().join("mlp.expected0.bin"));
    for rows in [1usize, 3, 8] {
        let input = Tensor::new(vec![rows as i64, 64], meta.dtype, x[..rows * 64].to_vec());
        let got = module.run(&[input]).unwrap();
        let err = rel_err(&got[0], &want[..rows * 32]);
        assert!(err <= 1e-4, "{rows} rows: relative error {err:e}");
    }
    let attention = LoadOptions {
        dynamic: true,
        dynamic_dims: vec!["x:0=1..64".parse().unwrap()],
        ..Default::default()
    };
    let err = kiln::diag::report(
        &load_with(common::pt2_fixtures().join("attention.pt2"), &attention).unwrap_err(),
    );
    assert!(
        err.contains("node `view`") && err.contains("export the model with dynamic_shapes="),
        "{err}"
    );
    for (flag, want) in [
        (
            "y:0=1..64",
            "the graph has no input `y`; its inputs are `x`",
        ),
        ("x:2=1..64", "input `x` has 2 dims"),
        ("x:0=9..64", "the graph's size, 8, is outside that range"),
    ] {
        let options = LoadOptions {
            dynamic: true,
            dynamic_dims: vec![flag.parse().unwrap()],
            ..Default::default()
        };
        let err = kiln::diag::report(
            &load_with(common::pt2_fixtures().join("mlp.pt2"), &options).unwrap_err(),
        );
        assert!(err.contains(want), "{flag}: {err}");
    }
}

/// Convolutional networks exported static (ResNet and MobileNetV2 of tests/fixtures/models:
/// convolutions, batch norms, max and adaptive average pooling, residual adds) with their
/// batch made dynamic on the command line: each compiles once for the cpu device, and one
/// library runs batches of 1, 3 and 5. Each image of a batch is one of the example's two, so
/// each output row must be PyTorch's for that image. A symbolic image size is refused by name.
#[test]
fn convolutional_networks_take_a_symbolic_batch() {
    let dir = common::repo_root().join("tests/fixtures/models");
    for model in ["resnet", "mobilenet_v2"] {
        let options = LoadOptions {
            dynamic: true,
            dynamic_dims: vec!["x:0=1..64".parse().unwrap()],
            ..Default::default()
        };
        let g = load_with(dir.join(format!("{model}.pt2")), &options)
            .unwrap_or_else(|e| panic!("{model}: {}", kiln::diag::report(&e)));
        let meta = g.input_meta(0).unwrap().clone();
        assert_eq!(meta.shape[0].as_const(), None, "{model}: {:?}", meta.shape);
        let compiled = kiln::driver::compile(g, &common::plugin("cpu"), &Default::default())
            .unwrap_or_else(|e| panic!("{model}: {}", kiln::diag::report(&e)));
        assert!(compiled.code.contains("kiln_conv2d<"), "{model}");
        let (module, _) =
            kiln::runtime::build_and_load(&compiled.code, &compiled.scheduled, &compiled.weights)
                .unwrap_or_else(|e| panic!("{model}: {}", kiln::diag::report(&e)));
        let x = common::read_f32(&dir.join(format!("{model}.input0.bin")));
        let want = common::read_f32(&dir.join(format!("{model}.expected0.bin")));
        let (image, row) = (x.len() / 2, want.len() / 2);
        for picks in [vec![1], vec![1, 0, 1], vec![0, 1, 1, 0, 0]] {
            let mut shape: Vec<i64> = meta.shape.iter().map(|d| d.hint()).collect();
            shape[0] = picks.len() as i64;
            let pick = |part: &[f64], n: usize| -> Vec<f64> {
                picks
                    .iter()
                    .flat_map(|&i| part[i * n..(i + 1) * n].to_vec())
                    .collect()
            };
            let input = Tensor::new(shape, meta.dtype, pick(&x, image));
            let got = module
                .run(&[input])
                .unwrap_or_else(|e| panic!("{model} at {picks:?}: {}", kiln::diag::report(&e)));
            let err = rel_err(&got[0], &pick(&want, row));
            assert!(err <= 1e-4, "{model} at {picks:?}: relative error {err:e}");
        }
    }
    // An image size that varies: the convolution names itself and what it takes.
    let options = LoadOptions {
        dynamic: true,
        dynamic_dims: vec!["x:2,x:3=32..128".parse().unwrap()],
        ..Default::default()
    };
    let err = kiln::diag::report(&load_with(dir.join("resnet.pt2"), &options).unwrap_err());
    assert!(
        err.contains("node `conv2d`")
            && err.contains("takes a symbolic batch (dim 0) only")
            && err.contains("--specialize"),
        "{err}"
    );
}

#[test]
fn named_sizes_that_are_unknown_empty_or_out_of_range_are_refused_with_the_place() {
    let named = named_sizes("\"batch\"", "\"seq\"", DIMS);
    let err = |text: &str, specialize: &[(&str, i64)]| with_sizes(text, specialize).unwrap_err();
    let e = err(&named, &[("seq", 129)]);
    assert!(
        e.contains("--specialize seq=129 is outside the range the graph gives it, 2..=128"),
        "{e}"
    );
    let e = err(&named, &[("len", 3)]);
    assert!(
        e.contains("the graph has no size `len`; its [dims] are batch (1..=64), seq (2..=128)"),
        "{e}"
    );
    let e = err(&named_sizes("4", "8", ""), &[("batch", 3)]);
    assert!(e.contains("the graph has static shapes"), "{e}");
    let e = err(&named_sizes("\"batch\"", "\"len\"", DIMS), &[]);
    assert!(
        e.contains("line 10, column 19") && e.contains("unknown size `len` in a shape"),
        "{e}"
    );
    let e = err(
        &named_sizes(
            "\"batch\"",
            "\"seq\"",
            &DIMS.replace("min = 2", "min = 200"),
        ),
        &[],
    );
    assert!(
        e.contains("line 6") && e.contains("size `seq`: the range 200..=128 is empty"),
        "{e}"
    );
    let e = err(
        &named_sizes(
            "\"batch\"",
            "\"seq\"",
            &DIMS.replace("example = 4", "example = 65"),
        ),
        &[],
    );
    assert!(
        e.contains("size `batch`: the example 65 is outside its range 1..=64"),
        "{e}"
    );
    let e = err(
        &named.replace("{ dim = \"seq\" }", "{ dim = \"len\" }"),
        &[],
    );
    assert!(
        e.contains("node `heads`") && e.contains("unknown size `len`"),
        "{e}"
    );
    let e = err(
        &named.replace("{ dim = \"seq\" }", "{ size = \"seq\" }"),
        &[],
    );
    assert!(
        e.contains("a table argument must be `{ dim = \"NAME\" }`"),
        "{e}"
    );
}

/// The Triton kernels of a graph specialised from a dynamic export take their row counts
/// at the launch, so that a kernel whose work does not otherwise depend on the sizes
/// keeps one text across sizes (Triton compiles it once): the MLP with layer norm at
/// 1 x 3 and 4 x 33 has the same kernels. A graph of fixed sizes keeps them as literals.
#[test]
fn kernels_of_a_specialised_export_keep_one_text_across_sizes() {
    let case = &cases()["mlp_ln"];
    let (b, l) = (
        case["dims"]["x:0"].as_str().unwrap().to_string(),
        case["dims"]["x:1"].as_str().unwrap().to_string(),
    );
    let cuda = common::plugin("cuda");
    let kernels = |g: kiln::graph::Graph| -> Vec<String> {
        let code = kiln::driver::compile(g, &cuda, &Default::default())
            .expect("compiles")
            .code;
        code.split("@triton.jit\n")
            .skip(1)
            .filter(|k| !k.starts_with("def kiln_dependent_wait("))
            .map(|k| k.split("\n\n\n").next().unwrap_or("").to_string())
            .collect()
    };
    let small = kernels(specialized("mlp_ln", vec![(b.clone(), 1), (l.clone(), 3)]).unwrap());
    let large = kernels(specialized("mlp_ln", vec![(b, 4), (l, 33)]).unwrap());
    assert!(!small.is_empty());
    assert_eq!(small, large);
    assert!(small.iter().all(|k| !k.contains("xnumel = ")), "{small:?}");
    let fixed = kiln::graph::load(common::pt2_fixtures().join("mlp.pt2")).unwrap();
    assert!(kernels(fixed).iter().all(|k| k.contains("xnumel = ")));
}

/// A graph whose input has a symbolic size: each stage that takes integer sizes so far
/// refuses it by name, with the sizes and what to do, and none panics or computes at a
/// guessed size.
#[test]
fn stages_that_take_integer_sizes_refuse_a_symbolic_value_by_name() {
    use kiln::graph::sym::{Size, Symbols};
    use kiln::graph::{Arg, DType, Graph, Node, Op, TensorMeta, UnaryOp, ValueId};
    let mut symbols = Symbols::default();
    let batch = symbols.add("batch", 1, 64).unwrap();
    let shape = vec![
        Size::symbol(batch, &symbols).scale(3).unwrap(),
        Size::from(8),
    ];
    let mut g = Graph::new("dynamic");
    let x = g.add_node(Node {
        name: "x".into(),
        op: Op::Input { index: 0 },
        args: vec![],
        outputs: vec![TensorMeta::contiguous_sizes(shape, DType::Float32)],
        line: None,
    });
    g.set_outputs(vec![ValueId::first(x)]);
    assert!(!g.meta(ValueId::first(x)).unwrap().is_static());
    // The scheduler takes symbols, and so do the cpu device and a Triton device's C++
    // wrapper; but `3*ks0` is no input dim that a call could read `ks0` from.
    assert!(kiln::schedule::schedule(&g).is_ok());
    let cpp_wrapper = kiln::driver::Options {
        wrapper: Some(kiln::plugins::WrapperKind::Cpp),
        ..Default::default()
    };
    for (device, options) in [("cuda", &cpp_wrapper), ("cpu", &Default::default())] {
        let compiled = kiln::driver::compile(g.clone(), &common::plugin(device), options)
            .map(|_| ())
            .unwrap_err();
        let compiled = kiln::diag::report(&compiled);
        assert!(
            compiled.contains("the size symbol `ks0` is no input's dim")
                && compiled.contains("--specialize"),
            "{device}: {compiled}"
        );
    }
    let interpreted = kiln::interp::evaluate(
        &g,
        &[Tensor::new(vec![3, 8], DType::Float32, vec![0.0; 24])],
    )
    .map(|_| ())
    .unwrap_err()
    .to_string();
    // The interpreter binds a symbol that is an input's dim; `3*ks0` is none.
    assert!(
        interpreted.contains("[3*ks0, 8] read ks0, which no input's dim gives"),
        "{interpreted}"
    );
    // An elementwise op and a view have symbolic rules; `roll` has none yet, and says so.
    let relu = g.add_node(Node {
        name: "relu".into(),
        op: Op::Unary(UnaryOp::Relu),
        args: vec![Arg::Value(ValueId::first(x))],
        outputs: vec![],
        line: None,
    });
    kiln::graph::infer_node(&mut g, relu).unwrap();
    assert_eq!(
        format!("{:?}", g.meta(ValueId::first(relu)).unwrap().shape),
        "[3*ks0, 8]"
    );
    let permute = g.add_node(Node {
        name: "permute".into(),
        op: Op::Permute { dims: vec![1, 0] },
        args: vec![Arg::Value(ValueId::first(relu))],
        outputs: vec![],
        line: None,
    });
    kiln::graph::infer_node(&mut g, permute).unwrap();
    let permuted = g.meta(ValueId::first(permute)).unwrap();
    assert_eq!(
        format!("{:?} {:?}", permuted.shape, permuted.strides),
        "[8, 3*ks0] [1, 8]"
    );
    let roll = g.add_node(Node {
        name: "roll".into(),
        op: Op::Roll {
            shifts: vec![1],
            dims: vec![0],
        },
        args: vec![Arg::Value(ValueId::first(relu))],
        outputs: vec![],
        line: None,
    });
    let inferred = kiln::graph::infer_node(&mut g, roll)
        .map(|_| ())
        .unwrap_err();
    let inferred = kiln::diag::report(&inferred);
    assert!(
        inferred.contains("roll")
            && inferred.contains("[3*ks0, 8]")
            && inferred.contains("integer sizes"),
        "{inferred}"
    );
}

/// An MLP with a layer norm over `[batch, seq, 64]`, both sizes symbols: shape inference
/// gives every value its size over the symbols, which evaluates at any binding to what
/// the same graph infers at that size; operands that agree only at some sizes are refused.
#[test]
fn shape_inference_over_symbols_matches_the_integer_rules_at_every_size() {
    use kiln::graph::sym::{Size, Symbols};
    use kiln::graph::{
        Arg, BinaryOp, ConstData, DType, GeluApprox, Graph, Node, Op, ReduceOp, TensorMeta, ValueId,
    };
    let mut symbols = Symbols::default();
    let batch = symbols.add("batch", 1, 8).unwrap();
    let seq = symbols.add("seq", 1, 128).unwrap();
    symbols.set_hint(seq, 16).unwrap();
    let (b, s) = (Size::symbol(batch, &symbols), Size::symbol(seq, &symbols));
    // The graph over sizes `dims` (symbolic, or one binding of them).
    let build = |dims: [Size; 2]| -> (Graph, Vec<ValueId>) {
        let mut g = Graph::new("mlp");
        let node =
            |g: &mut Graph, name: &str, op: Op, args: Vec<ValueId>, out: Option<TensorMeta>| {
                let id = g.add_node(Node {
                    name: name.into(),
                    op,
                    args: args.into_iter().map(Arg::Value).collect(),
                    outputs: out.into_iter().collect(),
                    line: None,
                });
                if g.node(id).unwrap().outputs.is_empty() {
                    kiln::graph::infer_node(g, id)
                        .unwrap_or_else(|e| panic!("{}", kiln::diag::report(&e)));
                }
                ValueId::first(id)
            };
        let constant = |shape: Vec<i64>| {
            (
                Op::Constant {
                    data: ConstData::Fill(0.5),
                },
                Some(TensorMeta::contiguous(shape, DType::Float32)),
            )
        };
        let x_meta = TensorMeta::contiguous_sizes(
            vec![dims[0].clone(), dims[1].clone(), Size::from(64)],
            DType::Float32,
        );
        let x = node(&mut g, "x", Op::Input { index: 0 }, vec![], Some(x_meta));
        let weight = |g: &mut Graph, name: &str, shape: Vec<i64>| {
            let (op, meta) = constant(shape);
            node(g, name, op, vec![], meta)
        };
        let (w1, b1, w2) = (
            weight(&mut g, "w1", vec![256, 64]),
            weight(&mut g, "b1", vec![256]),
            weight(&mut g, "w2", vec![64, 256]),
        );
        let (lw, lb) = (
            weight(&mut g, "lw", vec![64]),
            weight(&mut g, "lb", vec![64]),
        );
        let h = node(
            &mut g,
            "h",
            Op::Linear { bias: true },
            vec![x, w1, b1],
            None,
        );
        let a = node(
            &mut g,
            "a",
            Op::Gelu {
                approximate: GeluApprox::None,
            },
            vec![h],
            None,
        );
        let y = node(&mut g, "y", Op::Linear { bias: false }, vec![a, w2], None);
        let z = node(
            &mut g,
            "z",
            Op::Binary {
                op: BinaryOp::Add,
                alpha: None,
            },
            vec![y, x],
            None,
        );
        let ln = Op::LayerNorm {
            normalized_shape: vec![64],
            eps: 1e-5,
            weight: true,
            bias: true,
            native: false,
        };
        let n = node(&mut g, "n", ln, vec![z, lw, lb], None);
        let mean = Op::Reduce {
            op: ReduceOp::Mean,
            dims: Some(vec![-1]),
            keepdim: true,
            dtype: None,
        };
        let m = node(&mut g, "m", mean, vec![n], None);
        let sum = Op::Reduce {
            op: ReduceOp::Sum,
            dims: Some(vec![1]),
            keepdim: false,
            dtype: None,
        };
        let r = node(&mut g, "r", sum, vec![m], None);
        (g, vec![h, a, y, z, n, m, r])
    };
    let (g, values) = build([b.clone(), s.clone()]);
    let shapes: Vec<Vec<Size>> = values
        .iter()
        .map(|v| g.meta(*v).unwrap().shape.clone())
        .collect();
    let text = format!("{:?}", shapes.last().unwrap());
    assert_eq!(text, "[ks0, 1]");
    assert_eq!(format!("{:?}", shapes[0]), "[ks0, ks1, 256]");
    for (bv, sv) in [(1, 1), (3, 16), (8, 128)] {
        let (fixed, _) = build([Size::from(bv), Size::from(sv)]);
        for (v, shape) in values.iter().zip(&shapes) {
            let at: Vec<i64> = shape
                .iter()
                .map(|d| d.eval(&|id| if id == batch { bv } else { sv }).unwrap())
                .collect();
            assert_eq!(
                fixed.meta(*v).unwrap().hint_shape(),
                at,
                "batch {bv}, seq {sv}"
            );
        }
    }
    // The interpreter runs the symbolic graph at each size, binding the symbols from
    // the input, as it runs the graph made at that size.
    let mut g = g;
    g.set_outputs(vec![values[4], values[6]]);
    for (bv, sv) in [(1, 1), (2, 5), (4, 33)] {
        let (mut fixed, fixed_values) = build([Size::from(bv), Size::from(sv)]);
        fixed.set_outputs(vec![fixed_values[4], fixed_values[6]]);
        let n = (bv * sv * 64) as usize;
        let x = Tensor::new(
            vec![bv, sv, 64],
            DType::Float32,
            (0..n).map(|i| (i % 7) as f64 - 3.0).collect(),
        );
        let got = kiln::interp::evaluate(&g, std::slice::from_ref(&x)).unwrap();
        let want = kiln::interp::evaluate(&fixed, &[x]).unwrap();
        for (a, w) in got.iter().zip(&want) {
            assert_eq!(
                (&a.shape, a.to_vec()),
                (&w.shape, w.to_vec()),
                "batch {bv}, seq {sv}"
            );
        }
    }
    // Sizes that agree only where the symbols happen to match are refused.
    let q = g.add_node(Node {
        name: "q".into(),
        op: Op::Input { index: 1 },
        args: vec![],
        outputs: vec![TensorMeta::contiguous_sizes(
            vec![s.clone(), s.clone(), Size::from(64)],
            DType::Float32,
        )],
        line: None,
    });
    let bad = g.add_node(Node {
        name: "bad".into(),
        op: Op::Binary {
            op: BinaryOp::Add,
            alpha: None,
        },
        args: vec![Arg::Value(values[3]), Arg::Value(ValueId::first(q))],
        outputs: vec![],
        line: None,
    });
    let refused = kiln::graph::infer_node(&mut g, bad)
        .map(|_| ())
        .unwrap_err();
    let refused = kiln::diag::report(&refused);
    assert!(
        refused.contains("do not broadcast for every value"),
        "{refused}"
    );
}

/// A kernel of dynamic sizes launches, at each size, the config the plugin's heuristics
/// give a static compile of that size, and as a programmatic dependent where that one
/// would be: the MLP with layer norm's one compile against its
/// compiles at 1 x 2, 4 x 16 and 16 x 64 (row counts that are powers of two, each the
/// top of its bucket).
#[test]
fn a_dynamic_kernel_launches_at_each_size_the_config_a_static_compile_chooses() {
    use kiln::codegen::{namer::Namer, triton};
    let cuda = common::plugin("cuda");
    let infos = |g: kiln::graph::Graph| -> (Vec<triton::KernelInfo>, kiln::graph::sym::Symbols) {
        let a = kiln::driver::compile(g, &cuda, &Default::default()).expect("compiles");
        let p = &a.scheduled.program;
        let k = triton::write(p, &*cuda, &Default::default(), &mut Namer::new()).expect("writes");
        (k.info, p.symbols.clone())
    };
    let (dynamic, symbols) = infos(symbolic("mlp_ln"));
    assert!(dynamic.iter().all(|k| k.sized.is_some()), "{dynamic:?}");
    // The plugin's configs differ across the range: some kernel has variants.
    assert!(
        dynamic
            .iter()
            .any(|k| k.sized.as_ref().unwrap().variants.len() > 1),
        "{dynamic:?}"
    );
    let case = &cases()["mlp_ln"];
    let (b, l) = (
        case["dims"]["x:0"].as_str().unwrap().to_string(),
        case["dims"]["x:1"].as_str().unwrap().to_string(),
    );
    let (bs, ls) = (symbols.find(&b).unwrap(), symbols.find(&l).unwrap());
    for (batch, seq) in [(1, 2), (4, 16), (16, 64)] {
        let (fixed, _) =
            infos(specialized("mlp_ln", vec![(b.clone(), batch), (l.clone(), seq)]).unwrap());
        assert_eq!(fixed.len(), dynamic.len(), "{batch}x{seq}");
        let at = |id| {
            if id == bs {
                batch
            } else if id == ls {
                seq
            } else {
                0
            }
        };
        for (d, s) in dynamic.iter().zip(&fixed) {
            let sized = d.sized.as_ref().unwrap();
            let x = d.xnumel.eval(&at).unwrap();
            let r = d.rnumel.as_ref().map_or(1, |r| r.eval(&at).unwrap());
            let x_at = (triton::sized::row_key(x.into()) - sized.x_from) as usize;
            let row = &sized.table[x_at.min(sized.table.len() - 1)];
            let r_at = (triton::sized::bucket(r.into()) - sized.r_from) as usize;
            let (n, grid) = row[r_at.min(row.len() - 1)];
            let v = sized.variants[n];
            let l = &s.launch;
            assert_eq!(
                (v.x_block, v.r_block, v.num_warps, v.num_stages, v.dependent),
                (l.x_block, l.r_block, l.num_warps, l.num_stages, s.dependent),
                "{} at {batch}x{seq}",
                d.name
            );
            assert_eq!(grid, l.grid, "{} at {batch}x{seq}", d.name);
        }
    }
}

/// The static MLP export with the dims `spec` names made dynamic.
fn marked_mlp(spec: kiln::graph::front::dynamic_dims::DynamicDim) -> kiln::graph::Graph {
    let options = LoadOptions {
        dynamic: true,
        dynamic_dims: vec![spec],
        ..Default::default()
    };
    load_with(common::pt2_fixtures().join("mlp.pt2"), &options)
        .unwrap_or_else(|e| panic!("{}", kiln::diag::report(&e)))
}

/// A range without an upper bound (`torch.export`'s `int_oo`) plans launches up to
/// 2^36 rows, not one bucket per eighth of a power of two to 2^62: the static MLP export
/// with its rows made dynamic up to `i64::MAX`.
#[test]
fn an_unbounded_range_plans_a_bounded_table_of_launches() {
    use kiln::codegen::{namer::Namer, triton};
    use kiln::graph::front::dynamic_dims::DynamicDim;
    let g = marked_mlp(DynamicDim {
        dims: vec![("x".to_string(), 0)],
        lo: 1,
        hi: i64::MAX,
    });
    let cuda = common::plugin("cuda");
    let a = kiln::driver::compile(g, &cuda, &Default::default())
        .unwrap_or_else(|e| panic!("{}", kiln::diag::report(&e)));
    let k = triton::write(
        &a.scheduled.program,
        &*cuda,
        &Default::default(),
        &mut Namer::new(),
    )
    .expect("writes");
    for info in &k.info {
        let sized = info.sized.as_ref().expect("a kernel of dynamic sizes");
        let last = sized.x_from as usize + sized.table.len() - 1;
        // The last row bucket is the one of the most rows the table plans for.
        let most_numel = info.xnumel.eval(&|_| 1 << 36).unwrap().min(1 << 36);
        assert_eq!(
            last as u32,
            triton::sized::row_key(most_numel.into()),
            "{}",
            info.name
        );
        assert!(sized.table.len() <= 37 * 8, "{}", sized.table.len());
    }
}

/// What the language models of many families do over symbolic sizes (bench/dynamic_sweep.py
/// found them): a cache that starts as a 1-D tensor of no elements concatenated with a
/// layer's keys (PyTorch skips such a tensor, whatever the others' rank), a `chunk` along a
/// dim of fixed size, `type_as`, and `ones` of the batch and length (OPT's positions, a
/// `cumsum` of it). The graph over symbols gives, at each size, what it gives written with
/// those numbers.
#[test]
fn an_empty_cache_a_chunk_type_as_and_ones_take_symbolic_sizes() {
    let text = |b: &str, l: &str, dims: &str| {
        let (b_arg, l_arg) = (size_arg(b), size_arg(l));
        format!(
            r#"format = "kiln-graph/1"
outputs = ["y"]
{dims}
[[inputs]]
name = "x"
shape = [{b}, {l}, 8]
dtype = "float32"

[[inputs]]
name = "cache"
shape = [0]
dtype = "float32"

[[inputs]]
name = "ids"
shape = [{b}, {l}]
dtype = "int64"

[[nodes]]
name = "k"
op = "cat"
args = [["cache", "x"]]
attrs = {{ dim = -2 }}

[[nodes]]
name = "parts"
op = "chunk"
args = ["k", 2, -1]

[[nodes]]
name = "a"
op = "getitem"
args = ["parts", 0]

[[nodes]]
name = "b"
op = "getitem"
args = ["parts", 1]

[[nodes]]
name = "f"
op = "type_as"
args = ["ids", "a"]

[[nodes]]
name = "u"
op = "unsqueeze"
args = ["f", -1]

[[nodes]]
name = "ab"
op = "mul"
args = ["a", "b"]

[[nodes]]
name = "o"
op = "ones"
args = [[{b_arg}, {l_arg}, 1]]

[[nodes]]
name = "pos"
op = "cumsum"
args = ["o", 1]

[[nodes]]
name = "abu"
op = "add"
args = ["ab", "u"]

[[nodes]]
name = "y"
op = "add"
args = ["abu", "pos"]
"#
        )
    };
    let dims = "[dims]\nbatch = { min = 1, max = 16, example = 2 }\nseq = { min = 2, max = 64 }\n";
    let g = kiln::graph::parse_toml_sized(&text("\"batch\"", "\"seq\"", dims), &[], true)
        .unwrap_or_else(|e| panic!("{}", kiln::diag::report(&e)));
    let mut piped = g.clone();
    kiln::passes::run_pipeline(&mut piped).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        format!("{:?}", piped.meta(piped.outputs()[0]).unwrap().shape),
        "[ks0, ks1, 4]"
    );
    for device in ["cpu", "cuda"] {
        kiln::driver::compile(g.clone(), &common::plugin(device), &Default::default())
            .unwrap_or_else(|e| panic!("{device}: {}", kiln::diag::report(&e)));
    }
    for (b, l) in [(1, 2), (3, 17)] {
        let fixed = kiln::graph::parse_toml(&text(&b.to_string(), &l.to_string(), "")).unwrap();
        let metas: Vec<_> = (0..3)
            .map(|i| fixed.input_meta(i).unwrap().clone())
            .collect();
        let inputs = kiln::tensor_io::random_inputs(&metas, 5);
        let want = kiln::interp::evaluate(&fixed, &inputs).unwrap();
        for graph in [&g, &piped] {
            let got = kiln::interp::evaluate(graph, &inputs).unwrap();
            assert_eq!(got[0].shape, [b, l, 4]);
            assert_eq!(got[0].to_vec(), want[0].to_vec(), "{b}x{l}");
        }
    }
}
