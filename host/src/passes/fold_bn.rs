//! Batch-norm folding: an inference batch norm that reads nothing but a convolution's
//! output becomes part of that convolution's weights.
//!
//! `batch_norm(conv(x, w, b?), gamma?, beta?, mean, var, eps)` is, per output channel
//! `c` with `s_c = gamma_c / sqrt(var_c + eps)`, `conv(x, w', b')` where
//! `w'[c, ...] = w[c, ...] * s_c` and `b'_c = (b_c - mean_c) * s_c + beta_c` (`gamma` 1,
//! `beta` and `b` 0 when absent). Dim 0 of a convolution's weight is always its output
//! channel, grouped and depthwise convolutions included.
//!
//! The fold is only done when it is provably the same computation: the weight, the
//! convolution's bias and every batch-norm operand are constants of a floating-point
//! dtype, the convolution's output is read by that batch norm alone and is not a graph
//! output, and every folded value is finite. The new weight and bias are computed in
//! float64, rounded once to the weight's dtype, and stored as new constants (the old ones
//! stay for any other reader; DCE drops them otherwise). Anything else is left as it is,
//! for `decompose` to lower.

use super::{emit, replace_node, Error, Stats};
use crate::graph::{
    Arg, ConstData, DType, FixedMeta, Graph, Node, NodeId, Op, Scalar, TensorMeta, ValueId,
};
use std::sync::Arc;

const PASS: &str = "fold_bn";

/// Folds every eligible convolution + batch norm pair, in one topological sweep.
pub fn run(g: &mut Graph) -> Result<Stats, Error> {
    let _span = tracing::info_span!("fold_bn").entered();
    let order = super::topo_order(g, PASS)?;
    let mut changed = 0;
    for id in order {
        if let Some(fold) = plan(g, id) {
            apply(g, id, fold)?;
            changed += 1;
        }
    }
    Ok(Stats { changed })
}

/// What a fold replaces a batch norm with.
struct Fold {
    /// the convolution the batch norm reads
    conv: NodeId,
    /// the convolution's input
    x: ValueId,
    /// the convolution's attributes (its bias flag becomes `true`)
    op: Op,
    /// the folded weight, row-major, already rounded, with its metadata
    weight: Vec<f64>,
    weight_meta: TensorMeta,
    /// the folded bias, already rounded
    bias: Vec<f64>,
    /// the weight's and the result's dtype
    dtype: DType,
    /// constants the old nodes read, removed when nothing else reads them
    old_constants: Vec<NodeId>,
}

/// The elements of a constant value of a floating-point dtype whose stored data covers
/// its shape, decoded at once (never element by element), with its metadata.
fn constant(g: &Graph, v: ValueId) -> Option<(FixedMeta, Vec<f64>)> {
    let node = g.node(v.node)?;
    let Op::Constant { data } = &node.op else {
        return None;
    };
    let meta = node.outputs.get(v.output as usize)?.fixed()?;
    if v.output != 0 || !meta.dtype.is_float() {
        return None;
    }
    let n = usize::try_from(meta.numel()).ok()?;
    let values = match data {
        ConstData::Fill(x) => vec![*x; n],
        ConstData::Values(vs) if vs.len() == n => vs.to_vec(),
        ConstData::Bytes { dtype, bytes }
            if bytes.len() == n.checked_mul(dtype.size_bytes())? =>
        {
            dtype.decode_le(bytes)
        }
        _ => return None,
    };
    Some((meta, values))
}

/// The fold of batch norm `bn`, or `None` where it cannot be shown to be the same
/// computation.
fn plan(g: &Graph, bn: NodeId) -> Option<Fold> {
    let node = g.node(bn)?;
    let Op::BatchNorm {
        eps, weight, bias, ..
    } = node.op
    else {
        return None;
    };
    let values: Vec<ValueId> = node.args.iter().map(Arg::value).collect::<Option<_>>()?;
    if values.len() != 3 + weight as usize + bias as usize {
        return None;
    }
    let y = values[0];
    let conv = g.node(y.node)?;
    let Op::Conv {
        bias: conv_bias, ..
    } = conv.op
    else {
        return None;
    };
    // The convolution's output is the batch norm's alone: nothing else reads it (nor the
    // batch norm through another operand) and it is not a graph output.
    if y.output != 0
        || g.users(y.node).any(|(user, _)| user != bn)
        || values[1..].iter().any(|v| v.node == y.node)
        || g.outputs().iter().any(|o| o.node == y.node)
    {
        return None;
    }
    let conv_args: Vec<ValueId> = conv.args.iter().map(Arg::value).collect::<Option<_>>()?;
    if conv_args.len() != 2 + conv_bias as usize {
        return None;
    }
    let (x, w) = (conv_args[0], conv_args[1]);
    let (weight_meta, w_values) = constant(g, w)?;
    let dtype = weight_meta.dtype;
    // Its batch may be symbolic; its channels are the weight's.
    let out = conv.outputs.first()?;
    let channels = *weight_meta.shape.first()?;
    if weight_meta.rank() < 3
        || out.dtype != dtype
        || node.outputs.first()?.dtype != dtype
        || out.shape.get(1).and_then(crate::graph::sym::Size::as_const) != Some(channels)
        || channels < 1
    {
        return None;
    }
    let c = channels as usize;
    // Every per-channel operand: a constant `[C]` of a float dtype.
    let per_channel = |v: ValueId| -> Option<Vec<f64>> {
        let (m, vals) = constant(g, v)?;
        (m.shape == [channels]).then_some(vals)
    };
    let conv_b = match conv_bias {
        true => Some(per_channel(conv_args[2])?),
        false => None,
    };
    let mut k = 1;
    let mut next = || {
        k += 1;
        per_channel(values[k - 1])
    };
    let gamma = if weight { Some(next()?) } else { None };
    let beta = if bias { Some(next()?) } else { None };
    let (mean, var) = (next()?, next()?);

    let mut scale = Vec::with_capacity(c);
    let mut shift = Vec::with_capacity(c);
    for ch in 0..c {
        let s = gamma.as_ref().map_or(1.0, |v| v[ch]) / (var[ch] + eps).sqrt();
        let b = conv_b.as_ref().map_or(0.0, |v| v[ch]);
        let t = dtype.round((b - mean[ch]) * s + beta.as_ref().map_or(0.0, |v| v[ch]));
        // A negative or NaN `var + eps` (NaN in the original) or an overflow: not folded.
        if !s.is_finite() || !t.is_finite() {
            return None;
        }
        scale.push(s);
        shift.push(t);
    }
    let inner = w_values.len() / c;
    if inner * c != w_values.len() {
        return None;
    }
    let mut folded = w_values;
    for (i, v) in folded.iter_mut().enumerate() {
        *v = dtype.round(*v * scale[i / inner]);
        if !v.is_finite() {
            return None;
        }
    }

    let mut op = conv.op.clone();
    if let Op::Conv { bias, .. } = &mut op {
        *bias = true;
    }
    let mut old_constants: Vec<NodeId> = conv_args[1..]
        .iter()
        .chain(&values[1..])
        .map(|v| v.node)
        .collect();
    old_constants.sort_unstable();
    old_constants.dedup();
    Some(Fold {
        conv: y.node,
        x,
        op,
        weight: folded,
        weight_meta: TensorMeta::contiguous(weight_meta.shape, dtype),
        bias: shift,
        dtype,
        old_constants,
    })
}

/// A new constant holding `values` (already rounded to `meta.dtype`) as bytes of its dtype.
fn add_constant(g: &mut Graph, base: &str, meta: TensorMeta, values: &[f64]) -> ValueId {
    let name = g.fresh_name(base);
    let dtype = meta.dtype;
    let id = g.add_node(Node {
        name,
        op: Op::Constant {
            data: ConstData::Bytes {
                dtype,
                bytes: Arc::from(dtype.encode_le(values)),
            },
        },
        args: vec![],
        outputs: vec![meta],
        line: None,
    });
    ValueId::first(id)
}

/// Replaces batch norm `bn` by the folded convolution.
fn apply(g: &mut Graph, bn: NodeId, fold: Fold) -> Result<(), Error> {
    let Some(node) = g.node(bn) else {
        return Ok(());
    };
    let (base, line) = (node.name.clone(), node.line);
    let extra: Vec<FixedMeta> = node.outputs[1..]
        .iter()
        .filter_map(TensorMeta::fixed)
        .collect();
    let conv_name = g.node(fold.conv).map_or(base.clone(), |n| n.name.clone());
    let channels = fold.bias.len() as i64;
    let w = add_constant(
        g,
        &format!("{conv_name}_weight"),
        fold.weight_meta,
        &fold.weight,
    );
    let b = add_constant(
        g,
        &format!("{conv_name}_bias"),
        TensorMeta::contiguous(vec![channels], fold.dtype),
        &fold.bias,
    );
    let y = emit(
        g,
        PASS,
        &conv_name,
        fold.op,
        vec![Arg::Value(fold.x), Arg::Value(w), Arg::Value(b)],
        line,
    )?;
    let mut new = vec![y];
    // `_native_batch_norm_legit_no_training`'s saved statistics are empty tensors.
    for m in extra {
        new.push(emit(
            g,
            PASS,
            &base,
            Op::Full {
                size: Some(crate::graph::shape::sizes(&m.shape)),
                value: Scalar::Int(0),
                dtype: Some(m.dtype),
            },
            vec![],
            line,
        )?);
    }
    replace_node(g, bn, &new);
    for id in std::iter::once(fold.conv).chain(fold.old_constants) {
        if g.users(id).next().is_none() && !g.outputs().iter().any(|o| o.node == id) {
            g.remove_node(id);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{self, Graph};
    use crate::tensor::Tensor;

    /// A deterministic stream of values in `[lo, hi)`.
    fn values(seed: u64, n: usize, lo: f64, hi: f64) -> Vec<f64> {
        let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                lo + (hi - lo) * ((s >> 11) as f64 / (1u64 << 53) as f64)
            })
            .collect()
    }

    struct Case {
        /// conv1d, conv2d or conv3d
        spatial: usize,
        in_c: i64,
        out_c: i64,
        groups: i64,
        conv_bias: bool,
        gamma: bool,
        beta: bool,
        native: bool,
        dtype: DType,
    }

    impl Default for Case {
        fn default() -> Case {
            Case {
                spatial: 2,
                in_c: 4,
                out_c: 6,
                groups: 1,
                conv_bias: false,
                gamma: true,
                beta: true,
                native: false,
                dtype: DType::Float32,
            }
        }
    }

    /// What a test changes about the graph of a [`Case`].
    #[derive(Clone, Copy, PartialEq)]
    enum Twist {
        None,
        /// the convolution's output is also added to the result
        ConvReadTwice,
        /// the convolution's output is a graph output too
        ConvIsOutput,
        /// `gamma` is a graph input, not a constant
        GammaIsInput,
        /// the weight is a graph input, not a constant
        WeightIsInput,
        /// `running_var` holds a negative value (`var + eps < 0`)
        NegativeVar,
    }

    struct Built {
        g: Graph,
        inputs: Vec<Tensor>,
    }

    fn build(case: &Case, twist: Twist) -> Built {
        let d = case.dtype;
        let mut g = Graph::new("conv_bn");
        let mut inputs = vec![];
        let mut seed = 1;
        let mut leaf = |g: &mut Graph,
                        inputs: &mut Vec<Tensor>,
                        name: &str,
                        shape: Vec<i64>,
                        lo: f64,
                        hi: f64,
                        input: bool| {
            seed += 1;
            let n = shape.iter().product::<i64>() as usize;
            let vals: Vec<f64> = values(seed, n, lo, hi)
                .into_iter()
                .map(|v| d.round(v))
                .collect();
            let op = if input {
                inputs.push(Tensor::new(shape.clone(), d, vals));
                Op::Input {
                    index: inputs.len() - 1,
                }
            } else {
                Op::Constant {
                    data: ConstData::Bytes {
                        dtype: d,
                        bytes: Arc::from(d.encode_le(&vals)),
                    },
                }
            };
            let id = g.add_node(Node {
                name: name.into(),
                op,
                args: vec![],
                outputs: vec![TensorMeta::contiguous(shape, d)],
                line: None,
            });
            Arg::Value(ValueId::first(id))
        };
        let sp = case.spatial;
        let mut xs = vec![2, case.in_c];
        xs.extend(std::iter::repeat_n(5, sp));
        let x = leaf(&mut g, &mut inputs, "x", xs, -2.0, 2.0, true);
        let mut ws = vec![case.out_c, case.in_c / case.groups];
        ws.extend(std::iter::repeat_n(3, sp));
        let w = leaf(
            &mut g,
            &mut inputs,
            "w",
            ws,
            -1.0,
            1.0,
            twist == Twist::WeightIsInput,
        );
        let c = vec![case.out_c];
        let mut conv_args = vec![x, w];
        if case.conv_bias {
            conv_args.push(leaf(&mut g, &mut inputs, "b", c.clone(), -1.0, 1.0, false));
        }
        let conv = g.add_node(Node {
            name: "conv".into(),
            op: Op::Conv {
                stride: vec![1; sp],
                padding: vec![1; sp],
                dilation: vec![1; sp],
                groups: case.groups,
                bias: case.conv_bias,
            },
            args: conv_args,
            outputs: vec![],
            line: None,
        });
        let mut bn_args = vec![Arg::Value(ValueId::first(conv))];
        if case.gamma {
            let input = twist == Twist::GammaIsInput;
            bn_args.push(leaf(
                &mut g,
                &mut inputs,
                "gamma",
                c.clone(),
                0.5,
                1.5,
                input,
            ));
        }
        if case.beta {
            bn_args.push(leaf(
                &mut g,
                &mut inputs,
                "beta",
                c.clone(),
                -1.0,
                1.0,
                false,
            ));
        }
        bn_args.push(leaf(
            &mut g,
            &mut inputs,
            "mean",
            c.clone(),
            -0.5,
            0.5,
            false,
        ));
        let (lo, hi) = match twist {
            Twist::NegativeVar => (-2.0, -1.0),
            _ => (0.2, 2.0),
        };
        bn_args.push(leaf(&mut g, &mut inputs, "var", c, lo, hi, false));
        let bn = g.add_node(Node {
            name: "bn".into(),
            op: Op::BatchNorm {
                eps: 1e-3,
                weight: case.gamma,
                bias: case.beta,
                native: case.native,
            },
            args: bn_args,
            outputs: vec![],
            line: None,
        });
        let mut y = ValueId::first(bn);
        if case.native {
            let item = g.add_node(Node {
                name: "item".into(),
                op: Op::GetItem { index: 0 },
                args: vec![Arg::Value(y)],
                outputs: vec![],
                line: None,
            });
            // The saved statistics, read by nothing, as the importer leaves them.
            for i in 1..3 {
                g.add_node(Node {
                    name: format!("stat{i}"),
                    op: Op::GetItem { index: i },
                    args: vec![Arg::Value(ValueId {
                        node: bn,
                        output: i as u32,
                    })],
                    outputs: vec![],
                    line: None,
                });
            }
            y = ValueId::first(item);
        }
        let relu = g.add_node(Node {
            name: "relu".into(),
            op: Op::Unary(crate::graph::UnaryOp::Relu),
            args: vec![Arg::Value(y)],
            outputs: vec![],
            line: None,
        });
        let mut outputs = vec![ValueId::first(relu)];
        match twist {
            Twist::ConvReadTwice => {
                let add = g.add_node(Node {
                    name: "add".into(),
                    op: Op::Binary {
                        op: crate::graph::BinaryOp::Add,
                        alpha: None,
                    },
                    args: vec![Arg::Value(ValueId::first(conv)), Arg::Value(y)],
                    outputs: vec![],
                    line: None,
                });
                outputs = vec![ValueId::first(add)];
            }
            Twist::ConvIsOutput => outputs.push(ValueId::first(conv)),
            _ => {}
        }
        g.set_outputs(outputs);
        graph::validate(&mut g).expect("the test graph validates");
        Built { g, inputs }
    }

    fn count(g: &Graph, pred: impl Fn(&Op) -> bool) -> usize {
        g.node_ids()
            .filter(|&n| g.node(n).is_some_and(|n| pred(&n.op)))
            .count()
    }

    fn is_bn(op: &Op) -> bool {
        matches!(op, Op::BatchNorm { .. })
    }

    /// Largest error relative to the largest magnitude of `want`.
    fn assert_close(got: &[Tensor], want: &[Tensor], tol: f64, what: &str) {
        assert_eq!(got.len(), want.len(), "{what}: output count");
        for (a, b) in got.iter().zip(want) {
            assert_eq!(a.shape, b.shape, "{what}: shape");
            assert_eq!(a.dtype, b.dtype, "{what}: dtype");
            let (a, b) = (a.to_vec(), b.to_vec());
            let scale = b.iter().fold(1e-6f64, |m, v| m.max(v.abs()));
            let err = a
                .iter()
                .zip(&b)
                .fold(0.0f64, |m, (x, y)| m.max((x - y).abs()))
                / scale;
            assert!(err <= tol, "{what}: relative error {err:e} > {tol:e}");
        }
    }

    /// Folds `case`, checks the fold happened and the values held, then runs the whole
    /// pipeline and checks again.
    fn folds(case: Case, what: &str) {
        let Built { g, inputs } = build(&case, Twist::None);
        let want = crate::interp::evaluate(&g, &inputs).expect("eval before");
        let mut folded = g.clone();
        let stats = run(&mut folded).expect("fold_bn");
        assert_eq!(stats.changed, 1, "{what}: one fold");
        graph::revalidate(&mut folded).expect("revalidates");
        graph::verify(&folded).expect("verifies");
        assert_eq!(count(&folded, is_bn), 0, "{what}: the batch norm is gone");
        assert_eq!(
            count(&folded, |op| matches!(op, Op::Conv { bias: true, .. })),
            1,
            "{what}: one convolution, with a bias"
        );
        assert_eq!(
            count(&folded, |op| matches!(op, Op::Conv { .. })),
            1,
            "{what}: the old convolution is gone"
        );
        let tol = match case.dtype {
            DType::Float64 => 1e-12,
            DType::Float32 => 1e-5,
            _ => 1e-2,
        };
        let got = crate::interp::evaluate(&folded, &inputs).expect("eval folded");
        assert_close(&got, &want, tol, what);
        let mut piped = g.clone();
        let report = crate::passes::run_pipeline(&mut piped).expect("pipeline");
        assert!(
            report
                .passes
                .iter()
                .any(|(name, s, _)| *name == PASS && s.changed == 1),
            "{what}: the pipeline folds"
        );
        assert_eq!(count(&piped, is_bn), 0);
        let got = crate::interp::evaluate(&piped, &inputs).expect("eval after pipeline");
        assert_close(&got, &want, tol, &format!("{what} (pipeline)"));
    }

    /// `twist` stops the fold: the graph is unchanged and still evaluates the same.
    fn does_not_fold(case: Case, twist: Twist, what: &str) {
        let Built { g, inputs } = build(&case, twist);
        let mut after = g.clone();
        let stats = run(&mut after).expect("fold_bn");
        assert_eq!(stats.changed, 0, "{what}: no fold");
        assert_eq!(after.node_count(), g.node_count(), "{what}: unchanged");
        assert_eq!(count(&after, is_bn), 1, "{what}: the batch norm stays");
        let want = crate::interp::evaluate(&g, &inputs).expect("eval before");
        crate::passes::run_pipeline(&mut after).expect("pipeline");
        let got = crate::interp::evaluate(&after, &inputs).expect("eval after");
        let nan = want.iter().any(|t| t.to_vec().iter().any(|v| v.is_nan()));
        if nan {
            // `var + eps < 0`: the original gives NaN, and so must the result.
            for (a, b) in got.iter().zip(&want) {
                let (a, b) = (a.to_vec(), b.to_vec());
                assert!(
                    a.iter().zip(&b).all(|(x, y)| x.is_nan() == y.is_nan()),
                    "{what}: NaNs where the original has them"
                );
            }
        } else {
            assert_close(&got, &want, 1e-5, what);
        }
    }

    #[test]
    fn conv_without_bias_and_affine_batch_norm() {
        folds(Case::default(), "plain");
    }

    #[test]
    fn conv_with_bias() {
        folds(
            Case {
                conv_bias: true,
                ..Case::default()
            },
            "conv bias",
        );
    }

    #[test]
    fn batch_norm_without_affine_parameters() {
        for (gamma, beta) in [(false, false), (true, false), (false, true)] {
            for conv_bias in [false, true] {
                folds(
                    Case {
                        gamma,
                        beta,
                        conv_bias,
                        ..Case::default()
                    },
                    &format!("gamma {gamma}, beta {beta}, conv bias {conv_bias}"),
                );
            }
        }
    }

    #[test]
    fn grouped_and_depthwise() {
        folds(
            Case {
                in_c: 4,
                out_c: 6,
                groups: 2,
                conv_bias: true,
                ..Case::default()
            },
            "groups=2",
        );
        folds(
            Case {
                in_c: 6,
                out_c: 6,
                groups: 6,
                ..Case::default()
            },
            "depthwise",
        );
        folds(
            Case {
                in_c: 3,
                out_c: 6,
                groups: 3,
                gamma: false,
                ..Case::default()
            },
            "depthwise with multiplier 2",
        );
    }

    #[test]
    fn native_form_and_other_ranks_and_dtypes() {
        folds(
            Case {
                native: true,
                ..Case::default()
            },
            "_native_batch_norm_legit_no_training",
        );
        folds(
            Case {
                spatial: 1,
                ..Case::default()
            },
            "conv1d",
        );
        folds(
            Case {
                spatial: 3,
                in_c: 2,
                out_c: 3,
                ..Case::default()
            },
            "conv3d",
        );
        folds(
            Case {
                dtype: DType::Float64,
                conv_bias: true,
                ..Case::default()
            },
            "float64",
        );
    }

    #[test]
    fn unprovable_folds_are_left_alone() {
        for (twist, what) in [
            (Twist::ConvReadTwice, "conv read twice"),
            (Twist::ConvIsOutput, "conv is a graph output"),
            (Twist::GammaIsInput, "gamma is an input"),
            (Twist::WeightIsInput, "weight is an input"),
            (Twist::NegativeVar, "var + eps < 0"),
        ] {
            does_not_fold(Case::default(), twist, what);
        }
    }

    #[test]
    fn a_shared_weight_keeps_its_other_reader() {
        // Two convolutions read one weight; only the one followed by a batch norm folds,
        // and the other still reads the original weight.
        let Built { mut g, inputs } = build(&Case::default(), Twist::None);
        let conv = g
            .node_ids()
            .find(|&n| g.node(n).is_some_and(|n| n.name == "conv"))
            .expect("conv");
        let node = g.node(conv).expect("conv").clone();
        let other = g.add_node(Node {
            name: "other".into(),
            outputs: vec![],
            ..node
        });
        let mut outs = g.outputs().to_vec();
        outs.push(ValueId::first(other));
        g.set_outputs(outs);
        graph::validate(&mut g).expect("validates");
        let want = crate::interp::evaluate(&g, &inputs).expect("eval before");
        let mut folded = g.clone();
        assert_eq!(run(&mut folded).expect("fold").changed, 1);
        graph::revalidate(&mut folded).expect("revalidates");
        assert_eq!(count(&folded, |op| matches!(op, Op::Conv { .. })), 2);
        let got = crate::interp::evaluate(&folded, &inputs).expect("eval after");
        assert_close(&got, &want, 1e-5, "shared weight");
    }
}
