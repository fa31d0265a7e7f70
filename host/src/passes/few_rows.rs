//! Matrix products of few rows as reductions: a decoding step's products.
//!
//! A product `[M, K] x [K, N]` of a few rows (one token per sequence in a
//! decoding step) reads each weight once for two flops: it is bound by memory.
//! The library's kernels for it reach about half the device's bandwidth at one
//! row on an H100, and some take a second kernel to reduce split sums
//! (`bench/gpu/results/2026-11-26-merge-mm-h100.txt` profiles a step). As a sum
//! over K of `x[m, k] * w[k, n]`, the product is one of Kiln's own reduction
//! kernels, which read the weight row by row and take the product's readers (a
//! bias, a residual add, an activation) into their store. (What the product
//! reads, a layer norm's output, the scheduler computes into memory once:
//! `schedule::lower`'s rule for operands broadcast across a reduction's rows;
//! an RMS norm's kernel the product's takes in: `schedule::fuse::takes_in`.)
//!
//! The reduction reads each output column's K elements contiguously, as a linear
//! layer stores its weight. A constant weight stored `[K, N]` row-major (GPT-2's
//! `Conv1D`) that nothing else reads is transposed here, once, into a new
//! constant; a product by another weight so laid out stays the library's.
//!
//! The operands are cast to float32 and summed in float32, the result cast back:
//! the product of two 16-bit floats is exact in float32, so this is the
//! library's product, accumulated in float32 and rounded once. Float32 and
//! float64 products are summed in their own dtype.
//!
//! A product whose result only a `split` into equal parts along its columns reads
//! (after a bias add over the rows and a reshape that keeps the last dim) becomes
//! one product per part ([`split_parts`]): GPT-2's query, key and value projection.
//! The parts are then reductions over one iteration space, which the scheduler puts
//! in one kernel with what reads them, their bias adds and the key and value's
//! writes into a KV cache: one kernel where the product and the writes were two.
//! Parts of unequal widths (a grouped-query attention's query beside its keys)
//! would be reductions over different spaces, so they stay one product.
//!
//! For Triton targets ([`super::Options::few_rows`]: products of at most that
//! many rows; 0, the default, changes none).

use super::merge_mm::{remove_unread, sole_chain, sole_user};
use super::pad_mm::{constant_source, ConstantView};
use super::{emit, replace_node, Error, Stats};
use crate::graph::dtype::DType;
use crate::graph::{Arg, BinaryOp, Graph, Node, NodeId, Op, ReduceOp, TensorMeta, ValueId};

const PASS: &str = "few_rows";

/// The most rows of a product a Triton target computes as a reduction.
pub const TRITON_ROWS: i64 = 1;

/// Rewrites each 2-D float `mm` of `g` with at most `max_rows` rows as a reduction.
pub fn run(g: &mut Graph, max_rows: i64) -> Result<Stats, Error> {
    let _span = tracing::info_span!("few_rows").entered();
    let mut changed = 0;
    if max_rows <= 0 {
        return Ok(Stats { changed });
    }
    changed += split_parts(g, max_rows)?;
    for id in super::topo_order(g, PASS)? {
        if let Some(c) = candidate(g, id, max_rows) {
            changed += usize::from(rewrite(g, id, c)?);
        }
    }
    Ok(Stats { changed })
}

/// A product to rewrite.
struct Candidate {
    x: ValueId,
    dtype: DType,
    weight: Weight,
}

/// How the reduction reads the weight row by row (each output column's `K`
/// elements contiguous, as a linear layer stores them).
enum Weight {
    /// `w` as it is: its `K` dim has stride 1.
    AsIs(ValueId),
    /// `w` is a constant (or a view of one) nothing else reads, stored `[K, N]`
    /// row-major (GPT-2's `Conv1D`): transposed here once into a new constant.
    Transposed(ConstantView, Vec<NodeId>),
}

fn candidate(g: &Graph, id: NodeId, max_rows: i64) -> Option<Candidate> {
    let node = g.node(id)?;
    let (Op::Mm, [Arg::Value(x), Arg::Value(w)]) = (&node.op, node.args.as_slice()) else {
        return None;
    };
    let out = node.outputs.first()?;
    let (xm, wm) = (g.fixed_meta(*x)?, g.fixed_meta(*w)?);
    let few = xm.rank() == 2 && wm.rank() == 2 && xm.shape[0] <= max_rows && xm.shape[1] > 0;
    if !few || !out.dtype.is_float() || xm.dtype != out.dtype || wm.dtype != out.dtype {
        return None;
    }
    // A reduction reading K across the weight's rows would not coalesce its loads.
    let weight = if wm.strides[0] == 1 || wm.shape[0] == 1 {
        Weight::AsIs(*w)
    } else {
        Weight::Transposed(constant_source(g, *w)?, sole_chain(g, *w)?)
    };
    Some(Candidate {
        x: *x,
        dtype: out.dtype,
        weight,
    })
}

/// `mm(x, w)` as `sum(x[:, None, :] * w.T[None, :, :], -1)`, in float32 for 16-bit
/// operands. Returns false, changing nothing, where the host cannot hold a transposed weight.
fn rewrite(g: &mut Graph, id: NodeId, c: Candidate) -> Result<bool, Error> {
    let (name, line) = {
        let node = g.node(id).ok_or_else(|| Error::Unsupported {
            node: format!("#{}", id.index()),
            what: "a product vanished while it was rewritten".into(),
        })?;
        (node.name.clone(), node.line)
    };
    let dtype = c.dtype;
    let sum_dtype = match dtype {
        DType::Float16 | DType::BFloat16 => DType::Float32,
        other => other,
    };
    // The weight as `[N, K]`, K contiguous.
    let (columns, dead) = match c.weight {
        Weight::AsIs(w) => {
            let permute = Op::Permute { dims: vec![1, 0] };
            (
                emit(g, PASS, &name, permute, vec![Arg::Value(w)], line)?,
                vec![],
            )
        }
        Weight::Transposed(view, dead) => {
            let Some(data) = view.transposed() else {
                return Ok(false);
            };
            let meta = TensorMeta::contiguous(vec![view.shape[1], view.shape[0]], view.dtype);
            let node = Node {
                name: g.fresh_name(&format!("{}_rows", view.name)),
                op: Op::Constant { data },
                args: vec![],
                outputs: vec![meta],
                line,
            };
            (ValueId::first(g.add_node(node)), dead)
        }
    };
    let mut op = |op: Op, args: Vec<ValueId>| {
        let args = args.into_iter().map(Arg::Value).collect();
        emit(g, PASS, &name, op, args, line)
    };
    let (mut xs, mut ws) = (c.x, columns);
    if sum_dtype != dtype {
        xs = op(Op::Cast { dtype: sum_dtype }, vec![xs])?;
        ws = op(Op::Cast { dtype: sum_dtype }, vec![ws])?;
    }
    let rows = op(Op::Unsqueeze { dim: 1 }, vec![xs])?;
    let columns = op(Op::Unsqueeze { dim: 0 }, vec![ws])?;
    let mul = Op::Binary {
        op: BinaryOp::Mul,
        alpha: None,
    };
    let products = op(mul, vec![rows, columns])?;
    let sum = Op::Reduce {
        op: ReduceOp::Sum,
        dims: Some(vec![2]),
        keepdim: false,
        dtype: None,
    };
    let mut out = op(sum, vec![products])?;
    if sum_dtype != dtype {
        out = op(Op::Cast { dtype }, vec![out])?;
    }
    replace_node(g, id, &[out]);
    remove_unread(g, &dead);
    Ok(true)
}

/// What a product's result passes through before the `split` that reads it.
enum Step {
    /// `add` of a bias over the rows, the bias operand at `bias_at` of the two.
    Bias {
        add: NodeId,
        bias: ValueId,
        bias_at: usize,
    },
    /// A reshape that keeps the last dim: its result's shape.
    Reshape { node: NodeId, shape: Vec<i64> },
}

/// A product to split: the steps after it, the `split` and its parts' width.
struct Parts {
    steps: Vec<Step>,
    split: NodeId,
    parts: i64,
    width: i64,
}

/// Splits every few-row product by a constant weight whose result only a `split`
/// into equal parts along its columns reads ([`Parts`]): each part becomes a
/// product by a new constant of its weight columns, stored as rows (as the
/// reduction reads them), plus its slice of the bias, reshaped as before. Returns
/// how many products were split.
fn split_parts(g: &mut Graph, max_rows: i64) -> Result<usize, Error> {
    let mut changed = 0;
    for id in super::topo_order(g, PASS)? {
        let Some(c) = candidate(g, id, max_rows) else {
            continue;
        };
        let Some(p) = parts_of(g, id) else { continue };
        let Some(w) = g.node(id).and_then(|n| n.args.get(1)?.value()) else {
            continue;
        };
        // A weight another node reads (a tied embedding) stays whole.
        let (Some(weight), Some(dead)) = (constant_source(g, w), sole_chain(g, w)) else {
            continue;
        };
        let mut columns = Vec::new();
        for j in 0..p.parts {
            let part = ConstantView {
                shape: vec![weight.shape[0], p.width],
                offset: weight.offset + j * p.width * weight.strides[1],
                strides: weight.strides.clone(),
                name: weight.name.clone(),
                data: weight.data.clone(),
                dtype: weight.dtype,
            };
            // The host cannot hold the parts: the product stays whole.
            let Some(data) = part.transposed() else {
                break;
            };
            columns.push(data);
        }
        if columns.len() as i64 != p.parts {
            continue;
        }
        let values = write_parts(g, id, c.x, &weight, columns, &p)?;
        replace_node(g, p.split, &values);
        let mut unread: Vec<NodeId> = p
            .steps
            .iter()
            .map(|s| match s {
                Step::Bias { add, .. } => *add,
                Step::Reshape { node, .. } => *node,
            })
            .collect();
        unread.push(id);
        unread.extend(dead);
        remove_unread(g, &unread);
        changed += 1;
    }
    Ok(changed)
}

/// The steps from product `id` to the `split` into equal parts along the last dim
/// that alone reads its result, each read only by the next: at most one bias add
/// over the rows and one reshape keeping the last dim, in either order.
fn parts_of(g: &Graph, id: NodeId) -> Option<Parts> {
    let out = ValueId::first(id);
    let n = *g.fixed_meta(out)?.shape.last()?;
    let mut at = out;
    let mut steps = Vec::new();
    loop {
        let user = sole_user(g, at)?;
        let node = g.node(user)?;
        let meta = node.outputs.first()?.fixed()?;
        match &node.op {
            Op::Reshape { .. } if meta.shape.last() == Some(&n) && steps.len() < 2 => {
                if steps.iter().any(|s| matches!(s, Step::Reshape { .. })) {
                    return None;
                }
                steps.push(Step::Reshape {
                    node: user,
                    shape: meta.shape.clone(),
                });
            }
            Op::Binary {
                op: BinaryOp::Add,
                alpha,
            } if alpha.is_none_or(|a| a.to_f64() == 1.0) && node.args.len() == 2 => {
                if steps.iter().any(|s| matches!(s, Step::Bias { .. })) {
                    return None;
                }
                let bias_at = node.args.iter().position(|a| a.value() != Some(at))?;
                let bias = node.args[bias_at].value()?;
                let bm = g.fixed_meta(bias)?;
                let over_rows = bm.rank() >= 1
                    && bm.shape.last() == Some(&n)
                    && bm.shape[..bm.rank() - 1].iter().all(|&d| d == 1);
                if !over_rows || bm.dtype != meta.dtype || meta.shape != g.fixed_meta(at)?.shape {
                    return None;
                }
                steps.push(Step::Bias {
                    add: user,
                    bias,
                    bias_at,
                });
            }
            Op::Split { .. } | Op::SplitWithSizes { .. } => {
                return equal_split(g, at, &node.op, n).map(|(width, parts)| Parts {
                    steps,
                    split: user,
                    parts,
                    width,
                });
            }
            _ => return None,
        }
        at = ValueId::first(user);
    }
}

/// `(width, count)` where `split` (a `split` or `split_with_sizes` of `at`, whose
/// last dim has `n` elements) cuts that last dim into two or more parts of one
/// positive width.
fn equal_split(g: &Graph, at: ValueId, split: &Op, n: i64) -> Option<(i64, i64)> {
    let (dim, width, count) = match split {
        Op::Split { split_size, dim } => {
            let width = *split_size;
            let whole = width > 0 && n % width == 0;
            (*dim, width, if whole { n / width } else { 0 })
        }
        Op::SplitWithSizes { sizes, dim } => {
            let width = *sizes.first()?;
            let equal = sizes.iter().all(|&s| s == width);
            (*dim, width, if equal { sizes.len() as i64 } else { 0 })
        }
        _ => return None,
    };
    let rank = g.fixed_meta(at)?.rank();
    let last = crate::graph::shape::wrap_dim(dim, rank).ok()? + 1 == rank;
    (last && width > 0 && count >= 2).then_some((width, count))
}

/// Each part's product of `x` by a new constant of its weight `columns` (`[width,
/// K]` rows, read through a permute as the `[K, width]` weight), then the part's
/// steps: its slice of the bias, its reshape. Returns the parts' values.
fn write_parts(
    g: &mut Graph,
    id: NodeId,
    x: ValueId,
    weight: &ConstantView,
    columns: Vec<crate::graph::ConstData>,
    p: &Parts,
) -> Result<Vec<ValueId>, Error> {
    let (name, line) = match g.node(id) {
        Some(node) => (node.name.clone(), node.line),
        None => {
            return Err(Error::Unsupported {
                node: format!("#{}", id.index()),
                what: "a product vanished while it was split".into(),
            })
        }
    };
    let mut values = Vec::new();
    for (j, data) in columns.into_iter().enumerate() {
        let meta = TensorMeta::contiguous(vec![p.width, weight.shape[0]], weight.dtype);
        let part_name = g.fresh_name(&format!("{}_part{j}", weight.name));
        let rows = g.add_node(Node {
            name: part_name,
            op: Op::Constant { data },
            args: vec![],
            outputs: vec![meta],
            line,
        });
        let mut op = |op: Op, args: Vec<ValueId>| {
            let args = args.into_iter().map(Arg::Value).collect();
            emit(g, PASS, &name, op, args, line)
        };
        let w = op(Op::Permute { dims: vec![1, 0] }, vec![ValueId::first(rows)])?;
        let mut v = op(Op::Mm, vec![x, w])?;
        let (start, end) = (j as i64 * p.width, (j as i64 + 1) * p.width);
        for step in &p.steps {
            v = match step {
                Step::Bias { bias, bias_at, .. } => {
                    let slice = Op::Slice {
                        dim: -1,
                        start: Some(crate::graph::sym::Size::from(start)),
                        end: Some(crate::graph::sym::Size::from(end)),
                        step: 1,
                    };
                    let b = op(slice, vec![*bias])?;
                    let add = Op::Binary {
                        op: BinaryOp::Add,
                        alpha: None,
                    };
                    let args = if *bias_at == 0 {
                        vec![b, v]
                    } else {
                        vec![v, b]
                    };
                    op(add, args)?
                }
                Step::Reshape { shape, .. } => {
                    let mut shape = shape.clone();
                    if let Some(last) = shape.last_mut() {
                        *last = p.width;
                    }
                    op(
                        Op::Reshape {
                            shape: crate::graph::shape::sizes(&shape),
                            view: true,
                        },
                        vec![v],
                    )?
                }
            };
        }
        values.push(v);
    }
    Ok(values)
}
