//! The `channels_last` pass: convolution graphs whose activations it carries
//! channels-last, and the lowering that reads them without copies.

mod common;
use common::max_rel_err;
use kiln::graph::{Arg, DType, Graph, Op};
use kiln::passes::channels_last::DTypes;

/// `n` constant values for a graph file, `[..]`, from `seed`.
fn values(n: i64, seed: f64) -> String {
    let v: Vec<String> = (0..n)
        .map(|i| format!("{:.3}", ((i as f64 * 0.37 + seed).sin()) * 0.5))
        .collect();
    format!("[{}]", v.join(", "))
}

/// `x -> conv(w1) + b -> relu -> conv(w2, groups) * s -> + the relu (residual)
/// -> relu -> mean over H, W`, in `dtype`: a ResNet block with its batch norms
/// as pointwise ops, its second convolution grouped (`groups`) or 1x1 (`k`).
fn block(dtype: &str, groups: i64, k: i64) -> Graph {
    let c = 8;
    let pad = (k - 1) / 2;
    let text = format!(
        r#"format = "kiln-graph/1"
name = "block"
outputs = ["y"]

[[inputs]]
name = "x"
shape = [2, 3, 6, 5]
dtype = "{dtype}"

[[constants]]
name = "w1"
shape = [{c}, 3, 3, 3]
dtype = "{dtype}"
values = {w1}

[[constants]]
name = "b"
shape = [{c}, 1, 1]
dtype = "{dtype}"
values = {b}

[[constants]]
name = "w2"
shape = [{c}, {cg}, {k}, {k}]
dtype = "{dtype}"
values = {w2}

[[constants]]
name = "s"
shape = [1, {c}, 1, 1]
dtype = "{dtype}"
values = {s}

[[nodes]]
name = "c1"
op = "conv2d"
args = ["x", "w1"]
attrs = {{ stride = [1, 1], padding = [1, 1], dilation = [1, 1], groups = 1 }}

[[nodes]]
name = "biased"
op = "add"
args = ["c1", "b"]

[[nodes]]
name = "r1"
op = "relu"
args = ["biased"]

[[nodes]]
name = "c2"
op = "conv2d"
args = ["r1", "w2"]
attrs = {{ stride = [1, 1], padding = [{pad}, {pad}], dilation = [1, 1], groups = {groups} }}

[[nodes]]
name = "scaled"
op = "mul"
args = ["c2", "s"]

[[nodes]]
name = "res"
op = "add"
args = ["scaled", "r1"]

[[nodes]]
name = "r2"
op = "relu"
args = ["res"]

[[nodes]]
name = "y"
op = "mean"
args = ["r2"]
attrs = {{ dim = [2, 3] }}
"#,
        cg = c / groups,
        w1 = values(c * 27, 0.1),
        b = values(c, 1.3),
        w2 = values(c * (c / groups) * k * k, 2.2),
        s = values(c, 0.7),
    );
    kiln::graph::parse_toml(&text).unwrap()
}

fn options(dtypes: &[DType]) -> kiln::passes::Options {
    kiln::passes::Options {
        conv_channels_last: dtypes.iter().copied().collect::<DTypes>(),
        ..Default::default()
    }
}

fn nodes_of<'a>(g: &'a Graph, name: &str) -> Vec<&'a kiln::graph::Node> {
    g.node_ids()
        .filter_map(|id| g.node(id))
        .filter(|n| n.op.name() == name)
        .collect()
}

fn producer<'a>(g: &'a Graph, arg: &Arg) -> &'a kiln::graph::Node {
    g.node(arg.value().unwrap().node).unwrap()
}

fn permute_dims(n: &kiln::graph::Node) -> Option<&[i64]> {
    match &n.op {
        Op::Permute { dims } => Some(dims),
        _ => None,
    }
}

fn outputs_of(g: &Graph, seed: u64) -> Vec<Vec<f64>> {
    let metas = vec![g.node(g.inputs()[0]).unwrap().outputs[0].clone()];
    let inputs = kiln::tensor_io::random_inputs(&metas, seed);
    kiln::interp::evaluate(g, &inputs)
        .unwrap()
        .iter()
        .map(|t| t.to_vec())
        .collect()
}

#[test]
fn a_16_bit_convolution_block_runs_channels_last_between_its_convolutions() {
    for (groups, k) in [(1, 3), (2, 3), (8, 3), (1, 1)] {
        let what = format!("groups {groups}, {k}x{k}");
        let original = block("bfloat16", groups, k);
        let mut plain = original.clone();
        kiln::passes::run_pipeline(&mut plain).unwrap();
        let mut g = original.clone();
        let report = kiln::passes::run_pipeline_with(&mut g, &options(&[DType::BFloat16])).unwrap();
        assert!(
            report
                .passes
                .iter()
                .any(|(name, s, _)| *name == "channels_last" && s.changed > 0),
            "{what}: {report}\n{}",
            kiln::graph::print::to_text(&g)
        );
        // Each weight is a new constant `[O, kh, kw, I/g]` read through a permute.
        let convs = nodes_of(&g, "convolution");
        assert_eq!(convs.len(), 2, "{what}");
        for conv in &convs {
            let w = producer(&g, &conv.args[1]);
            assert_eq!(permute_dims(w), Some(&[0, 3, 1, 2][..]), "{what}");
            let constant = producer(&g, &w.args[0]);
            assert!(
                constant.name.contains("_channels_last"),
                "{what}: {}",
                kiln::graph::print::to_text(&g)
            );
            let o = &g.meta(conv.args[1].value().unwrap()).unwrap().hint_shape();
            assert_eq!(
                constant.outputs[0].shape,
                vec![o[0], o[2], o[3], o[1]],
                "{what}"
            );
        }
        // The second convolution reads the first's pointwise epilogue in NHWC
        // through one permute, and no pointwise op reads an NCHW permute.
        let second = convs
            .iter()
            .find(|c| producer(&g, &c.args[0]).op.name() == "permute")
            .unwrap_or_else(|| panic!("{what}: no convolution reads a permute"));
        let x = producer(&g, &second.args[0]);
        assert_eq!(permute_dims(x), Some(&[0, 3, 1, 2][..]), "{what}");
        assert_eq!(producer(&g, &x.args[0]).op.name(), "relu", "{what}");
        for n in g.node_ids().filter_map(|id| g.node(id)) {
            if !n.op.reads_inline() || n.op.is_view() {
                continue;
            }
            for a in n.args.iter().filter(|a| a.value().is_some()) {
                let p = producer(&g, a);
                assert_ne!(
                    permute_dims(p),
                    Some(&[0, 3, 1, 2][..]),
                    "{what}: {}",
                    n.name
                );
            }
            assert_eq!(n.outputs[0].shape, vec![2, 6, 5, 8], "{what}: {}", n.name);
        }
        // The mean reads the last relu through the NCHW view.
        let mean = nodes_of(&g, "mean")[0];
        assert_eq!(
            permute_dims(producer(&g, &mean.args[0])),
            Some(&[0, 3, 1, 2][..])
        );
        // The same values as without the pass, exactly.
        assert_eq!(outputs_of(&g, 3), outputs_of(&plain, 3), "{what}");
        assert_eq!(outputs_of(&g, 3), outputs_of(&original, 3), "{what}");
    }
}

#[test]
fn dtypes_not_listed_are_left_alone() {
    for (dtype, listed) in [
        ("float32", &[DType::BFloat16, DType::Float16][..]),
        ("bfloat16", &[DType::Float16][..]),
        ("bfloat16", &[][..]),
    ] {
        let mut g = block(dtype, 1, 3);
        let report = kiln::passes::run_pipeline_with(&mut g, &options(listed)).unwrap();
        let stats = report
            .passes
            .iter()
            .find(|(name, _, _)| *name == "channels_last")
            .map(|(_, s, _)| s.changed);
        assert_eq!(stats, Some(0), "{dtype} with {listed:?}");
        assert!(
            nodes_of(&g, "permute").is_empty(),
            "{dtype} with {listed:?}"
        );
    }
}

/// The scheduled program of `g` after the passes, with ATen's convolution
/// (`channels_last`: it takes channels-last operands) or another.
fn scheduled(g: &Graph, channels_last: bool) -> kiln::schedule::Scheduled {
    let options = kiln::schedule::Options {
        conv_channels_last: channels_last,
        ..Default::default()
    };
    kiln::schedule::schedule_with(g, &options).unwrap()
}

fn convolutions(s: &kiln::schedule::Scheduled) -> Vec<&kiln::schedule::ir::ExternCall> {
    s.program
        .steps
        .iter()
        .filter_map(|step| match step {
            kiln::schedule::ir::Step::Extern(e)
                if matches!(e.op, kiln::schedule::ir::ExternOp::Conv { .. }) =>
            {
                Some(e)
            }
            _ => None,
        })
        .collect()
}

#[test]
fn convolutions_read_and_write_channels_last_without_copies() {
    let original = block("bfloat16", 2, 3);
    let mut g = original.clone();
    kiln::passes::run_pipeline_with(&mut g, &options(&[DType::BFloat16])).unwrap();
    let metas = vec![g.node(g.inputs()[0]).unwrap().outputs[0].clone()];
    let inputs = kiln::tensor_io::random_inputs(&metas, 7);
    let want = kiln::interp::evaluate(&original, &inputs).unwrap();
    let s = scheduled(&g, true);
    let convs = convolutions(&s);
    assert_eq!(convs.len(), 2);
    let cl = |shape: &[kiln::graph::sym::Size]| {
        let shape = kiln::schedule::index::hints(shape);
        kiln::schedule::index::sizes(&[
            shape[1] * shape[2] * shape[3],
            1,
            shape[3] * shape[1],
            shape[1],
        ])
    };
    for e in &convs {
        let out = s.program.buffer(e.out);
        assert_eq!(out.strides, cl(&out.shape), "{}", out.name);
        // The weight is the channels-last constant as it is.
        assert_eq!(e.args[1].strides, cl(&e.args[1].shape));
    }
    // The second convolution reads the relu's NHWC buffer as it is.
    assert_eq!(convs[1].args[0].strides, cl(&convs[1].args[0].shape));
    let got = kiln::schedule::eval::run(&s, &inputs).unwrap();
    assert_eq!(got[0].shape, want[0].shape);
    assert!(max_rel_err(&got[0].to_vec(), &want[0].to_vec(), 1e-2) < 2e-2);
    // A convolution that takes only contiguous operands (the cpu's) gets them
    // copied, and answers contiguous.
    let s = scheduled(&g, false);
    for e in convolutions(&s) {
        let out = s.program.buffer(e.out);
        assert_eq!(
            out.strides,
            kiln::graph::shape::contiguous_sizes(&out.shape)
        );
        for a in &e.args {
            assert_eq!(a.strides, kiln::graph::shape::contiguous_sizes(&a.shape));
        }
    }
    let got = kiln::schedule::eval::run(&s, &inputs).unwrap();
    assert!(max_rel_err(&got[0].to_vec(), &want[0].to_vec(), 1e-2) < 2e-2);
}

#[test]
fn a_convolution_of_a_graph_input_and_a_graph_output_keep_their_layout() {
    // A convolution whose result is the graph's output: its readers outside the
    // graph see the values; the output is no pointwise op the pass rewrites.
    let mut g = block("float16", 1, 3);
    let y = g.outputs()[0];
    let relu = g.node(y.node).unwrap().args[0].value().unwrap();
    g.set_outputs(vec![relu]);
    let original = g.clone();
    kiln::passes::run_pipeline_with(&mut g, &options(&[DType::Float16])).unwrap();
    let out = g.outputs()[0];
    assert_eq!(g.node(out.node).unwrap().op.name(), "relu");
    assert_eq!(g.meta(out).unwrap().shape, vec![2, 8, 6, 5]);
    assert_eq!(outputs_of(&g, 5), outputs_of(&original, 5));
    // The first convolution reads the graph's input, NCHW, as it is.
    let convs = nodes_of(&g, "convolution");
    assert!(convs
        .iter()
        .any(|c| producer(&g, &c.args[0]).op.name() == "input"));
}

/// The zoo's ResNet and MobileNetV2 (float32 archives, their convolutions
/// listed as if float32 were a 16-bit dtype the device prefers channels-last):
/// the same values as without the pass, every convolution but the first (of
/// the graph's NCHW input) reads a channels-last operand and answers in
/// channels-last (so no copy to NCHW is left before any of them).
#[test]
fn resnet_and_mobilenet_v2_run_channels_last_between_their_convolutions() {
    let zoo = common::repo_root().join("tests/fixtures/models");
    for model in ["resnet", "mobilenet_v2"] {
        let original = kiln::graph::load(zoo.join(format!("{model}.pt2")))
            .unwrap_or_else(|e| panic!("{model}: {}", kiln::diag::report(&e)));
        let mut plain = original.clone();
        kiln::passes::run_pipeline(&mut plain).unwrap();
        let mut g = original.clone();
        kiln::passes::run_pipeline_with(&mut g, &options(&[DType::Float32])).unwrap();
        let metas = vec![g.node(g.inputs()[0]).unwrap().outputs[0].clone()];
        let inputs = kiln::tensor_io::random_inputs(&metas, 11);
        let want = kiln::interp::evaluate(&plain, &inputs).unwrap();
        let got = kiln::interp::evaluate(&g, &inputs).unwrap();
        assert_eq!(got[0].to_vec(), want[0].to_vec(), "{model}");
        let s = scheduled(&g, true);
        let convs = convolutions(&s);
        assert!(convs.len() > 10, "{model}: {} convolutions", convs.len());
        let cl = |shape: &[kiln::graph::sym::Size]| {
            let shape = kiln::schedule::index::hints(shape);
            kiln::schedule::index::sizes(&[
                shape[1] * shape[2] * shape[3],
                1,
                shape[3] * shape[1],
                shape[1],
            ])
        };
        let input = s.program.inputs[0];
        for (i, e) in convs.iter().enumerate() {
            let out = s.program.buffer(e.out);
            assert_eq!(out.strides, cl(&out.shape), "{model}: convolution {i}");
            let x = &e.args[0];
            if x.buf != input {
                assert_eq!(x.strides, cl(&x.shape), "{model}: convolution {i}'s input");
            }
            assert_eq!(
                e.args[1].strides,
                cl(&e.args[1].shape),
                "{model}: weight {i}"
            );
        }
        let ran = kiln::schedule::eval::run(&s, &inputs).unwrap();
        let e = max_rel_err(&ran[0].to_vec(), &want[0].to_vec(), 1e-3);
        assert!(e < 1e-6, "{model}: {e}");
    }
}

/// A transformer after a convolution (Swin's patch embedding): the activations are made
/// `NHWC` by the model itself, and its layer norm and residual `add` are not the
/// convolution's to relayout. A bug once took any op of two 4-D operands for a
/// convolution and its first operand for a convolution's input, so the layer norm's
/// output was computed in the `NHWC` order of an `NHWC` tensor ([b, w, c, h]) and every
/// later norm read its channels with a stride.
#[test]
fn activations_the_model_made_channels_last_are_left_alone() {
    let text = format!(
        r#"format = "kiln-graph/1"
name = "patches"
outputs = ["y"]

[[inputs]]
name = "x"
shape = [1, 3, 16, 20]
dtype = "bfloat16"

[[inputs]]
name = "r"
shape = [1, 4, 5, 8]
dtype = "bfloat16"

[[constants]]
name = "w"
shape = [8, 3, 4, 4]
dtype = "bfloat16"
values = {}

[[nodes]]
name = "c"
op = "conv2d"
args = ["x", "w"]
attrs = {{ stride = [4, 4] }}

[[nodes]]
name = "p"
op = "permute"
args = ["c", [0, 2, 3, 1]]

[[nodes]]
name = "n"
op = "layer_norm"
attrs = {{ input = "p", normalized_shape = [8] }}

[[nodes]]
name = "y"
op = "add"
args = ["n", "r"]
"#,
        values(8 * 3 * 4 * 4, 0.0)
    );
    let original = kiln::graph::parse_toml(&text).unwrap();
    let mut g = original.clone();
    kiln::passes::run_pipeline_with(&mut g, &options(&[DType::BFloat16])).unwrap();
    let wrong: Vec<&str> = g
        .node_ids()
        .filter_map(|id| g.node(id))
        .filter(|n| n.outputs.iter().any(|m| m.rank() == 4 && m.shape[1] == 5))
        .map(|n| n.name.as_str())
        .collect();
    assert!(wrong.is_empty(), "relaid out NHWC values: {wrong:?}");
    let mut plain = original.clone();
    kiln::passes::run_pipeline_with(&mut plain, &options(&[])).unwrap();
    let values = |g: &Graph| {
        let metas: Vec<_> = g
            .inputs()
            .iter()
            .map(|&id| g.node(id).unwrap().outputs[0].clone())
            .collect();
        let inputs = kiln::tensor_io::random_inputs(&metas, 5);
        kiln::interp::evaluate(g, &inputs).unwrap()[0].to_vec()
    };
    assert_eq!(values(&g), values(&plain));
}
