//! The passes keep values: the small examples evaluate the same before and after
//! them. (Their goldens after each pass are `tests/tests/goldens.rs`'s.)

mod common;
use common::{max_rel_err, repo_root};
use kiln::graph::{load_toml, print};

fn examples() -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(repo_root().join("examples"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    v.sort();
    v
}

/// Random values for every input of `g`, from `seed`.
fn random_inputs(g: &kiln::graph::Graph, seed: u64) -> Vec<kiln::tensor::Tensor> {
    let metas: Vec<_> = g
        .inputs()
        .iter()
        .map(|&i| g.node(i).unwrap().outputs[0].clone())
        .collect();
    kiln::tensor_io::random_inputs(&metas, seed)
}

#[test]
fn small_examples_keep_their_values() {
    for path in examples()
        .into_iter()
        .filter(|p| p.to_string_lossy().contains("small") || p.ends_with("add.toml"))
    {
        let mut g = load_toml(&path).unwrap();
        let inputs = random_inputs(&g, 7);
        let before = kiln::interp::evaluate(&g, &inputs).unwrap();
        kiln::passes::run_pipeline(&mut g).unwrap();
        let after = kiln::interp::evaluate(&g, &inputs).unwrap();
        for (a, b) in after.iter().zip(&before) {
            assert_eq!(a.shape, b.shape);
            // Relative to the output's magnitude: float32 cancellation (a
            // residual add of nearly opposite values) makes single small
            // elements' own relative error meaningless.
            let want = b.to_vec();
            let scale = want.iter().fold(0.0f64, |m, v| m.max(v.abs())).max(1e-3);
            let e = max_rel_err(&a.to_vec(), &want, scale);
            assert!(e < 1e-5, "{}: {e}", path.display());
        }
    }
}

#[test]
fn json_renders_every_node() {
    let g = load_toml(repo_root().join("examples/small_layernorm.toml")).unwrap();
    let j: serde_json::Value = serde_json::from_str(&print::to_json(&g)).unwrap();
    assert_eq!(j["nodes"].as_array().unwrap().len(), 6);
}

/// A convolution followed by a batch norm, written in the TOML format: every operand of
/// the batch norm a constant (`gamma`/`beta` left out where `affine` is false).
fn conv_bn_toml(conv_bias: bool, affine: bool, groups: i64, extra_reader: bool) -> String {
    let (cin, cout) = (4, 4);
    let vals = |n: usize, seed: f64, lo: f64| -> String {
        let v: Vec<String> = (0..n)
            .map(|i| format!("{:.4}", lo + ((i as f64 * 0.61 + seed).sin() + 1.0) * 0.5))
            .collect();
        format!("[{}]", v.join(", "))
    };
    let wn = (cout * (cin / groups) * 9) as usize;
    let mut t = format!(
        r#"format = "kiln-graph/1"
name = "conv_bn"
outputs = ["y"]

[[inputs]]
name = "x"
shape = [2, {cin}, 6, 6]
dtype = "float32"

[[constants]]
name = "w"
shape = [{cout}, {}, 3, 3]
dtype = "float32"
values = {}

[[constants]]
name = "mean"
shape = [{cout}]
dtype = "float32"
values = {}

[[constants]]
name = "var"
shape = [{cout}]
dtype = "float32"
values = {}
"#,
        cin / groups,
        vals(wn, 0.3, -1.0),
        vals(cout as usize, 1.1, -0.5),
        vals(cout as usize, 2.3, 0.2),
    );
    for (name, seed) in [("b", 0.7), ("gamma", 3.1), ("beta", 4.2)] {
        t += &format!(
            "\n[[constants]]\nname = \"{name}\"\nshape = [{cout}]\ndtype = \"float32\"\nvalues = {}\n",
            vals(cout as usize, seed, -0.5)
        );
    }
    let conv_args = if conv_bias {
        r#"["x", "w", "b"]"#
    } else {
        r#"["x", "w"]"#
    };
    // Without the affine parameters, the statistics are given by name.
    let (bn_args, stats) = if affine {
        (r#"["c", "gamma", "beta", "mean", "var"]"#, "")
    } else {
        (
            r#"["c"]"#,
            r#"running_mean = "mean", running_var = "var", "#,
        )
    };
    t += &format!(
        r#"
[[nodes]]
name = "c"
op = "conv2d"
args = {conv_args}
attrs = {{ padding = [1, 1], groups = {groups} }}

[[nodes]]
name = "n"
op = "batch_norm"
args = {bn_args}
attrs = {{ {stats}training = false, momentum = 0.1, eps = 0.001, cudnn_enabled = false }}
"#
    );
    let last = if extra_reader {
        t += "\n[[nodes]]\nname = \"both\"\nop = \"add\"\nargs = [\"n\", \"c\"]\n";
        "both"
    } else {
        "n"
    };
    t += &format!("\n[[nodes]]\nname = \"y\"\nop = \"relu\"\nargs = [\"{last}\"]\n");
    t
}

#[test]
fn batch_norm_folds_into_the_convolution_before_it() {
    use kiln::graph::{parse_toml, Op};
    let has_bn = |g: &kiln::graph::Graph| {
        g.node_ids()
            .any(|n| matches!(g.node(n).unwrap().op, Op::BatchNorm { .. }))
    };
    for conv_bias in [false, true] {
        for affine in [false, true] {
            for groups in [1, 2, 4] {
                for extra_reader in [false, true] {
                    let what = format!(
                        "conv bias {conv_bias}, affine {affine}, groups {groups}, conv read twice {extra_reader}"
                    );
                    let g = parse_toml(&conv_bn_toml(conv_bias, affine, groups, extra_reader))
                        .unwrap_or_else(|e| panic!("{what}: {}", kiln::diag::report(&e)));
                    assert!(has_bn(&g));
                    let metas = vec![g.node(g.inputs()[0]).unwrap().outputs[0].clone()];
                    let inputs = kiln::tensor_io::random_inputs(&metas, 3);
                    let before = kiln::interp::evaluate(&g, &inputs).unwrap();
                    let mut folded = g.clone();
                    let stats = kiln::passes::fold_bn::run(&mut folded).unwrap();
                    kiln::graph::revalidate(&mut folded).unwrap();
                    // A convolution whose output something else reads too keeps its
                    // batch norm.
                    assert_eq!(stats.changed, usize::from(!extra_reader), "{what}");
                    assert_eq!(has_bn(&folded), extra_reader, "{what}");
                    let mut piped = g.clone();
                    kiln::passes::run_pipeline(&mut piped).unwrap();
                    for h in [&folded, &piped] {
                        let after = kiln::interp::evaluate(h, &inputs).unwrap();
                        let want = before[0].to_vec();
                        let scale = want.iter().fold(0.0f64, |m, v| m.max(v.abs())).max(1e-3);
                        let e = max_rel_err(&after[0].to_vec(), &want, scale);
                        assert!(e < 1e-5, "{what}: {e}");
                    }
                }
            }
        }
    }
}

#[test]
fn reductions_of_one_element_per_result_leave_the_graph_and_keep_its_values() {
    let path = repo_root().join("tests/graphs/reductions_of_one_element.toml");
    let mut g = load_toml(&path).unwrap();
    let inputs = random_inputs(&g, 5);
    let before = kiln::interp::evaluate(&g, &inputs).unwrap();
    kiln::passes::run_pipeline(&mut g).unwrap();
    let reductions: Vec<String> = g
        .topo_order()
        .unwrap()
        .into_iter()
        .filter_map(|id| g.node(id))
        .filter(|n| matches!(n.op, kiln::graph::Op::Reduce { .. }))
        .map(|n| n.name.clone())
        .collect();
    // Only the int32 sum is left: it widens to int64.
    assert_eq!(reductions.len(), 1, "{reductions:?}");
    let after = kiln::interp::evaluate(&g, &inputs).unwrap();
    for (a, b) in after.iter().zip(&before) {
        assert_eq!(a.shape, b.shape);
        for (x, y) in a.to_vec().iter().zip(b.to_vec()) {
            assert!(x == &y || (x.is_nan() && y.is_nan()), "{x} vs {y}");
        }
    }
}

/// A transposed constant folds into a contiguous constant while the `expand` of it that
/// is too large to fold stays: the expand's strides follow the folded constant's, and
/// the values are kept (core ATen's batched product with a weight, `x @ w.T`).
#[test]
fn a_folded_transpose_read_by_a_large_expand_keeps_the_expand_exact() {
    let values: Vec<String> = (0..64)
        .map(|i| format!("{}", (i % 7) as f64 - 3.0))
        .collect();
    let text = format!(
        r#"format = "kiln-graph/1"
outputs = ["y"]

[[inputs]]
name = "x"
shape = [300, 4, 8]
dtype = "float32"

[[constants]]
name = "w"
shape = [8, 8]
dtype = "float32"
values = [{}]

[[nodes]]
name = "wt"
op = "transpose"
args = ["w", 0, 1]

[[nodes]]
name = "wb"
op = "expand"
args = ["wt", [300, 8, 8]]

[[nodes]]
name = "y"
op = "bmm"
args = ["x", "wb"]
"#,
        values.join(", ")
    );
    let mut g = kiln::graph::parse_toml(&text).unwrap();
    let inputs = random_inputs(&g, 3);
    let before = kiln::interp::evaluate(&g, &inputs).unwrap();
    kiln::passes::run_pipeline(&mut g).unwrap();
    kiln::graph::verify(&g).unwrap();
    let after = kiln::interp::evaluate(&g, &inputs).unwrap();
    assert!(max_rel_err(&after[0].to_vec(), &before[0].to_vec(), 1.0) < 1e-6);
}

/// A bfloat16 graph `y = x @ w.T` with `x: [16, k]` an input and `w: [n, k]` a
/// constant (`linear`'s weight) or, with `w_input`, `y = x @ w` for an input `w: [k, n]`.
fn product_graph(k: usize, n: usize, w_input: bool) -> kiln::graph::Graph {
    product_graph_in(k, n, w_input, "bfloat16")
}

fn product_graph_in(k: usize, n: usize, w_input: bool, dtype: &str) -> kiln::graph::Graph {
    let values: Vec<String> = (0..n * k)
        .map(|i| format!("{}", (i % 7) as f64 - 3.0))
        .collect();
    let w = if w_input {
        format!("[[inputs]]\nname = \"w\"\nshape = [{k}, {n}]\ndtype = \"{dtype}\"\n\n")
    } else {
        format!(
            "[[constants]]\nname = \"w\"\nshape = [{n}, {k}]\ndtype = \"{dtype}\"\nvalues = [{}]\n\n",
            values.join(", ")
        )
    };
    let op = if w_input { "mm" } else { "linear" };
    let text = format!(
        "format = \"kiln-graph/1\"\nname = \"p\"\noutputs = [\"y\"]\n\n\
         [[inputs]]\nname = \"x\"\nshape = [16, {k}]\ndtype = \"{dtype}\"\n\n{w}\
         [[nodes]]\nname = \"y\"\nop = \"{op}\"\nargs = [\"x\", \"w\"]\n"
    );
    kiln::graph::parse_toml(&text).unwrap()
}

fn products(g: &kiln::graph::Graph) -> Vec<(Vec<i64>, Vec<i64>)> {
    g.node_ids()
        .filter(|&id| matches!(g.node(id).unwrap().op, kiln::graph::Op::Mm))
        .map(|id| {
            let args = &g.node(id).unwrap().args;
            let shape = |i: usize| g.meta(args[i].value().unwrap()).unwrap().hint_shape();
            (shape(0), shape(1))
        })
        .collect()
}

fn assert_same_values(a: &kiln::graph::Graph, b: &kiln::graph::Graph) {
    let inputs = random_inputs(a, 3);
    let (ya, yb) = (
        kiln::interp::evaluate(a, &inputs).unwrap(),
        kiln::interp::evaluate(b, &inputs).unwrap(),
    );
    assert_eq!(ya[0].shape, yb[0].shape);
    assert_eq!(ya[0].to_vec(), yb[0].to_vec());
}

#[test]
fn a_16_bit_product_with_a_constant_weight_is_padded_at_compile_time() {
    let original = product_graph(24, 13, false);
    let mut padded = original.clone();
    let options = kiln::passes::Options {
        matmul_alignment: 16,
        ..Default::default()
    };
    let report = kiln::passes::run_pipeline_with(&mut padded, &options).unwrap();
    // N = 13 becomes 16 (8 bfloat16 elements); K = 24 is a multiple already.
    assert_eq!(products(&padded), vec![(vec![16, 24], vec![24, 16])]);
    // The weight was padded into a new constant: no copy is left to run.
    let kinds: Vec<&str> = padded
        .node_ids()
        .map(|id| padded.node(id).unwrap().op.name())
        .collect();
    assert!(!kinds.contains(&"cat"), "{kinds:?}");
    assert!(report
        .passes
        .iter()
        .any(|(name, s, _)| *name == "pad_mm" && s.changed == 1));
    assert_same_values(&original, &padded);
    // Without an alignment (a plugin that states none) nothing changes.
    let mut plain = original.clone();
    kiln::passes::run_pipeline(&mut plain).unwrap();
    assert_eq!(products(&plain), vec![(vec![16, 24], vec![24, 13])]);
}

#[test]
fn a_large_16_bit_product_of_activations_is_padded_by_a_copy_and_a_small_one_is_not() {
    let original = product_graph(20, 13, true);
    let mut g = original.clone();
    kiln::passes::run_pipeline(&mut g).unwrap();
    // Below the size where the copy pays: unchanged.
    assert_eq!(kiln::passes::pad_mm::run(&mut g, 16).unwrap().changed, 0);
    // Counted as large: K 20 -> 24 and N 13 -> 16, both operands copied.
    assert_eq!(
        kiln::passes::pad_mm::run_with(&mut g, 16, 0)
            .unwrap()
            .changed,
        1
    );
    assert_eq!(products(&g), vec![(vec![16, 24], vec![24, 16])]);
    assert_same_values(&original, &g);
    // The scheduled program reads the product's first 13 columns through a view.
    let scheduled = kiln::schedule::schedule_with(&g, &Default::default()).unwrap();
    let inputs = random_inputs(&original, 3);
    let got = kiln::schedule::eval::run(&scheduled, &inputs).unwrap();
    let want = kiln::interp::evaluate(&original, &inputs).unwrap();
    assert_eq!(got[0].shape, want[0].shape);
    assert!(max_rel_err(&got[0].to_vec(), &want[0].to_vec(), 1.0) < 1e-2);
}

/// A dynamic compile's product of symbolic rows (`x: [rows, 24]`, bfloat16) by a
/// constant weight of 13 columns: N is padded in the constant as at one size, the rows
/// stay symbolic, and the graph computes the same values at every size.
#[test]
fn a_16_bit_product_of_symbolic_rows_pads_its_constant_weight() {
    use kiln::graph::sym::{Size, Symbols};
    use kiln::graph::{Arg, ConstData, DType, Graph, Node, Op, TensorMeta, ValueId};
    let mut symbols = Symbols::default();
    let rows = symbols.add("rows", 1, 64).unwrap();
    let mut g = Graph::new("rows");
    g.set_symbols(symbols.clone());
    let x = g.add_node(Node {
        name: "x".into(),
        op: Op::Input { index: 0 },
        args: vec![],
        outputs: vec![TensorMeta::contiguous_sizes(
            vec![Size::symbol(rows, &symbols), Size::from(24)],
            DType::BFloat16,
        )],
        line: None,
    });
    let values: Vec<f64> = (0..13 * 24).map(|i| f64::from(i % 7) - 3.0).collect();
    let w = g.add_node(Node {
        name: "w".into(),
        op: Op::Constant {
            data: ConstData::Values(values.into()),
        },
        args: vec![],
        outputs: vec![TensorMeta::contiguous(vec![13, 24], DType::BFloat16)],
        line: None,
    });
    let y = g.add_node(Node {
        name: "y".into(),
        op: Op::Linear { bias: false },
        args: vec![Arg::Value(ValueId::first(x)), Arg::Value(ValueId::first(w))],
        outputs: vec![],
        line: None,
    });
    kiln::graph::infer_node(&mut g, y).unwrap();
    g.set_outputs(vec![ValueId::first(y)]);
    let mut padded = g.clone();
    let options = kiln::passes::Options {
        matmul_alignment: 16,
        ..Default::default()
    };
    kiln::passes::run_pipeline_with(&mut padded, &options).unwrap();
    let mm: Vec<String> = padded
        .node_ids()
        .filter(|&id| matches!(padded.node(id).unwrap().op, Op::Mm))
        .map(|id| {
            let args = &padded.node(id).unwrap().args;
            let shape = |i: usize| padded.meta(args[i].value().unwrap()).unwrap().shape.clone();
            format!("{:?} {:?}", shape(0), shape(1))
        })
        .collect();
    assert_eq!(mm, vec!["[ks0, 24] [24, 16]"]);
    for n in [1, 5, 64] {
        let input = kiln::tensor::Tensor::new(
            vec![n, 24],
            DType::BFloat16,
            (0..n * 24).map(|i| f64::from((i % 5) as i32 - 2)).collect(),
        );
        let want = kiln::interp::evaluate(&g, std::slice::from_ref(&input)).unwrap();
        let got = kiln::interp::evaluate(&padded, &[input]).unwrap();
        assert_eq!(got[0].shape, vec![n, 13]);
        assert_eq!(got[0].to_vec(), want[0].to_vec(), "{n} rows");
    }
}

#[test]
fn float32_products_and_aligned_ones_are_left_alone() {
    let mut aligned = product_graph(24, 16, false);
    kiln::passes::run_pipeline(&mut aligned).unwrap();
    assert_eq!(
        kiln::passes::pad_mm::run_with(&mut aligned, 16, 0)
            .unwrap()
            .changed,
        0
    );
    let mut f32 = product_graph_in(24, 13, true, "float32");
    kiln::passes::run_pipeline(&mut f32).unwrap();
    assert_eq!(
        kiln::passes::pad_mm::run_with(&mut f32, 16, 0)
            .unwrap()
            .changed,
        0
    );
}

/// Llama's `repeat_kv`: 2 key/value heads repeated for 4 query heads, then one
/// scaled dot-product attention (`k_rep` and `v_rep` are `k`'s and `v`'s repetitions).
fn repeated_kv_attention() -> kiln::graph::Graph {
    let repeat = |x: &str, r: i64| {
        format!(
            "[[nodes]]\nname = \"{x}_u\"\nop = \"unsqueeze\"\nargs = [\"{x}\", 2]\n\n\
             [[nodes]]\nname = \"{x}_e\"\nop = \"expand\"\nargs = [\"{x}_u\", [2, 2, {r}, 6, 8]]\n\n\
             [[nodes]]\nname = \"{x}_rep\"\nop = \"reshape\"\nargs = [\"{x}_e\", [2, {}, 6, 8]]\n\n",
            2 * r
        )
    };
    let text = format!(
        "format = \"kiln-graph/1\"\nname = \"gqa\"\noutputs = [\"o\"]\n\n\
         [[inputs]]\nname = \"q\"\nshape = [2, 4, 6, 8]\ndtype = \"float32\"\n\n\
         [[inputs]]\nname = \"k\"\nshape = [2, 2, 6, 8]\ndtype = \"float32\"\n\n\
         [[inputs]]\nname = \"v\"\nshape = [2, 2, 6, 8]\ndtype = \"float32\"\n\n{}{}\
         [[nodes]]\nname = \"o\"\nop = \"scaled_dot_product_attention\"\nargs = [\"q\", \"k_rep\", \"v_rep\"]\n",
        repeat("k", 2),
        repeat("v", 2)
    );
    kiln::graph::parse_toml(&text).unwrap()
}

fn attention_operand_shapes(g: &kiln::graph::Graph) -> Vec<(Vec<Vec<i64>>, bool)> {
    g.node_ids()
        .filter_map(|id| match &g.node(id).unwrap().op {
            kiln::graph::Op::Attention { gqa, .. } => {
                let shapes = g.node(id).unwrap().args[..3]
                    .iter()
                    .map(|a| g.meta(a.value().unwrap()).unwrap().hint_shape())
                    .collect();
                Some((shapes, *gqa))
            }
            _ => None,
        })
        .collect()
}

#[test]
fn a_whole_attention_reads_grouped_key_value_heads_instead_of_their_repetition() {
    let fused = kiln::passes::Options {
        fused_attention: true,
        ..Default::default()
    };
    let original = repeated_kv_attention();
    let mut g = original.clone();
    kiln::passes::run_pipeline_with(&mut g, &fused).unwrap();
    let kv = vec![2, 2, 6, 8];
    assert_eq!(
        attention_operand_shapes(&g),
        vec![(vec![vec![2, 4, 6, 8], kv.clone(), kv], true)]
    );
    let kinds: Vec<&str> = g
        .node_ids()
        .map(|id| g.node(id).unwrap().op.name())
        .collect();
    assert!(!kinds.contains(&"expand"), "{kinds:?}");
    let inputs = random_inputs(&original, 4);
    let (want, got) = (
        kiln::interp::evaluate(&original, &inputs).unwrap(),
        kiln::interp::evaluate(&g, &inputs).unwrap(),
    );
    assert!(max_rel_err(&got[0].to_vec(), &want[0].to_vec(), 1.0) < 1e-12);
    // The scheduled program (the fused kernel's extern step) means the same.
    let scheduled = kiln::schedule::schedule(&g).unwrap();
    let run = kiln::schedule::eval::run(&scheduled, &inputs).unwrap();
    assert!(max_rel_err(&run[0].to_vec(), &want[0].to_vec(), 1.0) < 1e-9);
}

#[test]
fn a_decomposed_attention_or_one_already_grouped_is_left_alone() {
    // Without the fused kernel (a C++ target) the attention is decomposed first:
    // no attention is left to read grouped heads.
    let mut g = repeated_kv_attention();
    kiln::passes::run_pipeline(&mut g).unwrap();
    assert!(attention_operand_shapes(&g).is_empty());
    assert_eq!(kiln::passes::gqa::run(&mut g).unwrap().changed, 0);
    // Once rewritten, nothing is left to rewrite.
    let fused = kiln::passes::Options {
        fused_attention: true,
        ..Default::default()
    };
    let mut g = repeated_kv_attention();
    kiln::passes::run_pipeline_with(&mut g, &fused).unwrap();
    assert_eq!(kiln::passes::gqa::run(&mut g).unwrap().changed, 0);
}

/// An activation `x [2, 3, 8]` through `linear` layers of constant weights (the query,
/// key and value of an attention; with biases where `biased`), each an output; `tied`
/// makes the key read the value's weight, `shared_bias` the value read the key's bias.
fn projections_with(
    biased: bool,
    tied: bool,
    shared_bias: bool,
    dtype: &str,
) -> kiln::graph::Graph {
    let mut text = format!(
        "format = \"kiln-graph/1\"\nname = \"qkv\"\noutputs = [\"q\", \"k\", \"v\"]\n\n\
         [[inputs]]\nname = \"x\"\nshape = [2, 3, 8]\ndtype = \"{dtype}\"\n\n"
    );
    for (i, (name, n)) in [("q", 8), ("k", 4), ("v", 4)].into_iter().enumerate() {
        let values: Vec<String> = (0..n * 8)
            .map(|j| format!("{}", ((j * 5 + i * 3) % 11) as f64 / 4.0 - 1.0))
            .collect();
        let bias: Vec<String> = (0..n)
            .map(|j| format!("{}", (j + i) as f64 / 8.0))
            .collect();
        text += &format!(
            "[[constants]]\nname = \"w{name}\"\nshape = [{n}, 8]\ndtype = \"{dtype}\"\nvalues = [{}]\n\n\
             [[constants]]\nname = \"b{name}\"\nshape = [{n}]\ndtype = \"{dtype}\"\nvalues = [{}]\n\n",
            values.join(", "),
            bias.join(", ")
        );
        let weight = if tied && name == "k" {
            "wv"
        } else {
            &format!("w{name}")
        };
        let bias = if shared_bias && name == "v" {
            "k"
        } else {
            name
        };
        let args = if biased {
            format!("[\"x\", \"{weight}\", \"b{bias}\"]")
        } else {
            format!("[\"x\", \"{weight}\"]")
        };
        text += &format!("[[nodes]]\nname = \"{name}\"\nop = \"linear\"\nargs = {args}\n\n");
    }
    kiln::graph::parse_toml(&text).unwrap()
}

fn projections(biased: bool, tied: bool, dtype: &str) -> kiln::graph::Graph {
    projections_with(biased, tied, false, dtype)
}

/// Every output of `b` is `a`'s, up to rounding `tol` relative to its magnitude
/// (`linear` rounds once where a product and an add round twice).
fn assert_all_outputs_close(a: &kiln::graph::Graph, b: &kiln::graph::Graph, tol: f64) {
    let inputs = random_inputs(a, 5);
    let (ya, yb) = (
        kiln::interp::evaluate(a, &inputs).unwrap(),
        kiln::interp::evaluate(b, &inputs).unwrap(),
    );
    assert_eq!(ya.len(), yb.len());
    for (x, y) in ya.iter().zip(&yb) {
        assert_eq!(x.shape, y.shape);
        assert!(max_rel_err(&x.to_vec(), &y.to_vec(), 1.0) < tol);
    }
}

/// The program scheduled from `g` (after the passes) computes `original`'s outputs.
fn assert_scheduled_close(original: &kiln::graph::Graph, g: &kiln::graph::Graph, tol: f64) {
    let scheduled = kiln::schedule::schedule_with(g, &Default::default()).unwrap();
    let inputs = random_inputs(original, 3);
    let got = kiln::schedule::eval::run(&scheduled, &inputs).unwrap();
    let want = kiln::interp::evaluate(original, &inputs).unwrap();
    assert_eq!(got.len(), want.len());
    for (a, b) in got.iter().zip(&want) {
        assert_eq!(a.shape, b.shape);
        assert!(max_rel_err(&a.to_vec(), &b.to_vec(), 1.0) < tol);
    }
}

#[test]
fn linear_layers_of_one_activation_become_one_product_with_one_bias() {
    for (biased, dtype) in [(true, "float32"), (false, "float32"), (true, "bfloat16")] {
        let original = projections(biased, false, dtype);
        let mut g = original.clone();
        let report = kiln::passes::run_pipeline(&mut g).unwrap();
        assert!(report
            .passes
            .iter()
            .any(|(name, s, _)| *name == "merge_mm" && s.changed == 3));
        // One product by the three weights side by side: 8 + 4 + 4 columns.
        assert_eq!(
            products(&g),
            vec![(vec![6, 8], vec![8, 16])],
            "{biased} {dtype}"
        );
        // With biases, one add of them all, for the product's bias epilogue.
        let adds = g
            .node_ids()
            .filter(|&id| {
                matches!(
                    g.node(id).unwrap().op,
                    kiln::graph::Op::Binary {
                        op: kiln::graph::BinaryOp::Add,
                        ..
                    }
                )
            })
            .count();
        assert_eq!(adds, usize::from(biased));
        let tol = if dtype == "float32" { 1e-6 } else { 1e-2 };
        assert_all_outputs_close(&original, &g, tol);
        // The scheduled program computes the same outputs from the one buffer.
        assert_scheduled_close(&original, &g, 1e-2);
    }
}

#[test]
fn a_bias_two_layers_share_is_copied_into_the_merged_one() {
    let original = projections_with(true, false, true, "float32");
    let mut g = original.clone();
    kiln::passes::run_pipeline(&mut g).unwrap();
    assert_eq!(products(&g), vec![(vec![6, 8], vec![8, 16])]);
    assert_all_outputs_close(&original, &g, 1e-6);
    assert_scheduled_close(&original, &g, 1e-2);
}

#[test]
fn a_tied_weight_is_not_merged() {
    // k and v read one weight: merging them would keep two copies (`cse` makes their
    // products one), and q merges with nothing else. No product is wider than a weight.
    let original = projections(true, true, "float32");
    let mut g = original.clone();
    kiln::passes::run_pipeline(&mut g).unwrap();
    let widths: Vec<i64> = products(&g).iter().map(|(_, b)| b[1]).collect();
    assert!(
        !widths.is_empty() && widths.iter().all(|&n| n <= 8),
        "{widths:?}"
    );
    assert_all_outputs_close(&original, &g, 1e-6);
}

/// `x [rows, 8]` through `linear` layers whose weights `[8 | 4 | 4, 8]` and biases are
/// graph inputs (a module's parameters as `torch.compile` hands them over unfrozen).
fn input_projections(rows: usize, dtype: &str) -> kiln::graph::Graph {
    let mut text = format!(
        "format = \"kiln-graph/1\"\nname = \"qkv\"\noutputs = [\"q\", \"k\", \"v\"]\n\n\
         [[inputs]]\nname = \"x\"\nshape = [{rows}, 8]\ndtype = \"{dtype}\"\n\n"
    );
    for (name, n) in [("q", 8), ("k", 4), ("v", 4)] {
        text += &format!(
            "[[inputs]]\nname = \"w{name}\"\nshape = [{n}, 8]\ndtype = \"{dtype}\"\n\n\
             [[inputs]]\nname = \"b{name}\"\nshape = [{n}]\ndtype = \"{dtype}\"\n\n"
        );
    }
    for name in ["q", "k", "v"] {
        text += &format!(
            "[[nodes]]\nname = \"{name}\"\nop = \"linear\"\nargs = [\"x\", \"w{name}\", \"b{name}\"]\n\n"
        );
    }
    kiln::graph::parse_toml(&text).unwrap()
}

#[test]
fn float32_weights_given_as_inputs_merge_through_a_concatenation_only_for_enough_rows() {
    // 6 rows: the concatenation copies 8 x 16 weights, no more than the product's
    // 6 x 8 + 8 x 16 + 6 x 16 elements. One product, one add of the biases' concatenation.
    let original = input_projections(6, "float32");
    let mut g = original.clone();
    kiln::passes::run_pipeline(&mut g).unwrap();
    assert_eq!(products(&g), vec![(vec![6, 8], vec![8, 16])]);
    let cats: Vec<Vec<i64>> = g
        .node_ids()
        .filter(|&id| matches!(g.node(id).unwrap().op, kiln::graph::Op::Cat { .. }))
        .map(|id| g.node(id).unwrap().outputs[0].hint_shape())
        .collect();
    assert_eq!(cats, vec![vec![16, 8], vec![16]]);
    assert_all_outputs_close(&original, &g, 1e-6);
    assert_scheduled_close(&original, &g, 1e-5);
    // One row (a decoding step): the copy would double the weights' traffic.
    let mut one = input_projections(1, "float32");
    kiln::passes::run_pipeline(&mut one).unwrap();
    assert_eq!(products(&one).len(), 3);
    // 16 bits: the product's arithmetic is as short as the copy.
    let mut half = input_projections(6, "bfloat16");
    kiln::passes::run_pipeline(&mut half).unwrap();
    assert_eq!(products(&half).len(), 3);
}

/// `x [rows, 8]` times a weight: a constant `[6, 8]` through `linear`, a constant
/// `[8, 6]` through `mm` (stored K-major, as GPT-2's `Conv1D`), or an input `[8, 6]`.
fn one_row_product(rows: usize, weight: &str, dtype: &str) -> kiln::graph::Graph {
    let values: Vec<String> = (0..48)
        .map(|i| format!("{}", ((i * 7) % 13) as f64 / 4.0 - 1.5))
        .collect();
    let (w, op) = match weight {
        "linear" => (
            format!("[[constants]]\nname = \"w\"\nshape = [6, 8]\ndtype = \"{dtype}\"\nvalues = [{}]\n\n", values.join(", ")),
            "linear",
        ),
        "conv1d" => (
            format!("[[constants]]\nname = \"w\"\nshape = [8, 6]\ndtype = \"{dtype}\"\nvalues = [{}]\n\n", values.join(", ")),
            "mm",
        ),
        _ => (
            format!("[[inputs]]\nname = \"w\"\nshape = [8, 6]\ndtype = \"{dtype}\"\n\n"),
            "mm",
        ),
    };
    let text = format!(
        "format = \"kiln-graph/1\"\nname = \"row\"\noutputs = [\"y\"]\n\n\
         [[inputs]]\nname = \"x\"\nshape = [{rows}, 8]\ndtype = \"{dtype}\"\n\n{w}\
         [[nodes]]\nname = \"y\"\nop = \"{op}\"\nargs = [\"x\", \"w\"]\n"
    );
    kiln::graph::parse_toml(&text).unwrap()
}

/// How [`split_projection`] builds its product's chain to the split.
#[derive(Clone, Copy, Debug)]
struct Chain {
    /// `conv1d`: a `[K, N]` weight read by `mm`; `linear`: an `[N, K]` one.
    weight: &'static str,
    /// The bias add: none, on the `[1, N]` product, or after the view on `[1, 1, N]`.
    bias: Option<&'static str>,
    /// The product viewed as `[1, 1, N]` before the split.
    view: bool,
    dtype: &'static str,
}

/// A one-row projection by a constant weight, through `chain` (a bias add, a view),
/// split along its columns into `sizes` (one size: `split` into three; several:
/// `split_with_sizes`), each part scaled by its own factor: GPT-2's query, key and value.
fn split_projection(chain: Chain, sizes: &[i64]) -> kiln::graph::Graph {
    let parts = if sizes.len() == 1 { 3 } else { sizes.len() };
    let n: i64 = sizes.iter().sum::<i64>() * if sizes.len() == 1 { 3 } else { 1 };
    let values = |count: i64| -> String {
        (0..count)
            .map(|i| format!("{}", ((i * 7) % 13) as f64 / 4.0 - 1.5))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let (shape, op) = match chain.weight {
        "linear" => (format!("[{n}, 8]"), "linear"),
        _ => (format!("[8, {n}]"), "mm"),
    };
    let dtype = chain.dtype;
    let mut text = format!(
        "format = \"kiln-graph/1\"\nname = \"parts\"\noutputs = [{}]\n\n\
         [[inputs]]\nname = \"x\"\nshape = [1, 8]\ndtype = \"{dtype}\"\n\n\
         [[constants]]\nname = \"w\"\nshape = {shape}\ndtype = \"{dtype}\"\nvalues = [{}]\n\n\
         [[constants]]\nname = \"b\"\nshape = [{n}]\ndtype = \"{dtype}\"\nvalues = [{}]\n\n\
         [[nodes]]\nname = \"p\"\nop = \"{op}\"\nargs = [\"x\", \"w\"]\n",
        (0..parts)
            .map(|j| format!("\"o{j}\""))
            .collect::<Vec<_>>()
            .join(", "),
        values(8 * n),
        values(n),
    );
    let mut at = "p".to_string();
    let mut node = |name: &str, body: String, at: &mut String| {
        text.push_str(&format!("\n[[nodes]]\nname = \"{name}\"\n{body}\n"));
        *at = name.to_string();
    };
    if chain.bias == Some("before") {
        node(
            "y",
            format!("op = \"add\"\nargs = [\"b\", \"{at}\"]"),
            &mut at,
        );
    }
    if chain.view {
        node(
            "v",
            format!("op = \"view\"\nargs = [\"{at}\", [1, 1, {n}]]"),
            &mut at,
        );
    }
    if chain.bias == Some("after") {
        node(
            "z",
            format!("op = \"add\"\nargs = [\"{at}\", \"b\"]"),
            &mut at,
        );
    }
    let dim = if chain.view { 2 } else { 1 };
    let split = match sizes {
        [size] => format!("op = \"split\"\nargs = [\"{at}\", {size}, -1]"),
        _ => format!("op = \"split_with_sizes\"\nargs = [\"{at}\", {sizes:?}, {dim}]"),
    };
    node("s", split, &mut at);
    for j in 0..parts {
        node(
            &format!("g{j}"),
            format!("op = \"getitem\"\nargs = [\"s\", {j}]"),
            &mut at,
        );
        node(
            &format!("o{j}"),
            format!("op = \"mul\"\nargs = [\"g{j}\", {}.5]", j + 1),
            &mut at,
        );
    }
    kiln::graph::parse_toml(&text).unwrap()
}

/// A one-row product split into equal parts along its columns (after a bias add and a
/// view, each or neither, the add on either side of the view) becomes one reduction a
/// part, by the part's own constant rows, which the scheduler computes in one kernel
/// with the parts' bias adds and readers; parts of unequal widths stay one product.
#[test]
fn a_one_row_product_split_into_equal_parts_is_a_reduction_a_part_in_one_kernel() {
    let options = kiln::passes::Options {
        few_rows: 1,
        ..Default::default()
    };
    let reductions = |g: &kiln::graph::Graph| {
        g.node_ids()
            .filter(|&id| matches!(g.node(id).unwrap().op, kiln::graph::Op::Reduce { .. }))
            .count()
    };
    let mut chains = Vec::new();
    for weight in ["conv1d", "linear"] {
        for bias in [None, Some("before"), Some("after")] {
            for view in [false, true] {
                for dtype in ["float32", "bfloat16"] {
                    if bias != Some("after") || view {
                        chains.push(Chain {
                            weight,
                            bias,
                            view,
                            dtype,
                        });
                    }
                }
            }
        }
    }
    for chain in chains {
        let tol = if chain.dtype == "float32" { 1e-6 } else { 1e-2 };
        for sizes in [vec![4], vec![4, 4, 4], vec![6, 6]] {
            let original = split_projection(chain, &sizes);
            let mut g = original.clone();
            kiln::passes::run_pipeline_with(&mut g, &options).unwrap();
            let parts = if sizes.len() == 1 { 3 } else { sizes.len() };
            assert!(products(&g).is_empty(), "{chain:?} {sizes:?}");
            assert_eq!(reductions(&g), parts, "{chain:?} {sizes:?}");
            // Each part's weight rows are a constant of their own (folded with their
            // cast and unsqueeze), and the whole weight is gone.
            let weights: Vec<Vec<i64>> = g
                .node_ids()
                .filter(|&id| matches!(g.node(id).unwrap().op, kiln::graph::Op::Constant { .. }))
                .map(|id| g.node(id).unwrap().outputs[0].hint_shape())
                .filter(|shape| shape.len() >= 2)
                .collect();
            let width = 12 / parts as i64;
            assert_eq!(
                weights,
                vec![vec![1, width, 8]; parts],
                "{chain:?} {sizes:?}"
            );
            assert_all_outputs_close(&original, &g, tol);
            assert_scheduled_close(&original, &g, tol);
            let scheduled = kiln::schedule::schedule_with(&g, &Default::default()).unwrap();
            assert_eq!(scheduled.program.kernel_count(), 1, "{chain:?} {sizes:?}");
        }
        // Unequal parts: one product, one reduction.
        let original = split_projection(chain, &[8, 2, 2]);
        let mut g = original.clone();
        kiln::passes::run_pipeline_with(&mut g, &options).unwrap();
        assert_eq!(reductions(&g), 1, "{chain:?}");
        assert_all_outputs_close(&original, &g, tol);
    }
}

#[test]
fn a_product_of_one_row_becomes_a_reduction_reading_the_weight_row_by_row() {
    let options = kiln::passes::Options {
        few_rows: 1,
        ..Default::default()
    };
    for (weight, dtype) in [
        ("linear", "bfloat16"),
        ("conv1d", "float32"),
        ("conv1d", "float16"),
    ] {
        let original = one_row_product(1, weight, dtype);
        let mut g = original.clone();
        kiln::passes::run_pipeline_with(&mut g, &options).unwrap();
        assert!(products(&g).is_empty(), "{weight} {dtype}");
        // A K-major constant is transposed once: the one constant left is [6, 8] (a small
        // one folded with its cast and unsqueeze).
        let constants: Vec<Vec<i64>> = g
            .node_ids()
            .filter(|&id| matches!(g.node(id).unwrap().op, kiln::graph::Op::Constant { .. }))
            .map(|id| g.node(id).unwrap().outputs[0].hint_shape())
            .collect();
        assert!(
            constants.len() == 1 && constants[0].ends_with(&[6, 8]),
            "{weight} {dtype}: {constants:?}"
        );
        // Float32 sums of exact products, rounded once: the product's value.
        let tol = if dtype == "float32" { 1e-6 } else { 1e-2 };
        assert_all_outputs_close(&original, &g, tol);
        assert_scheduled_close(&original, &g, tol);
    }
    // Two rows, a K-major input weight, or the pass off: the library's product.
    for (rows, weight, few_rows) in [(2, "linear", 1), (1, "input", 1), (1, "linear", 0)] {
        let mut g = one_row_product(rows, weight, "float32");
        let options = kiln::passes::Options {
            few_rows,
            ..Default::default()
        };
        kiln::passes::run_pipeline_with(&mut g, &options).unwrap();
        assert_eq!(products(&g).len(), 1, "{rows} {weight} {few_rows}");
    }
}
