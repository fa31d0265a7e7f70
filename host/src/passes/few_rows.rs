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
//! For Triton targets ([`super::Options::few_rows`]: products of at most that
//! many rows; 0, the default, changes none).

use super::merge_mm::{remove_unread, sole_chain};
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
    let (xm, wm) = (g.meta(*x)?, g.meta(*w)?);
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
