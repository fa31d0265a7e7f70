//! Padding of 16-bit matrix products, after Inductor's `pad_mm`.
//!
//! A device's matrix-product library may run its fast kernels only when each
//! dimension of a 16-bit product is a multiple of some byte count: on an H100,
//! cuBLAS takes 3.35 ms for a bfloat16 `[4096, 768] x [768, 50257]` (GPT-2's tied
//! LM head) and 0.50 ms with N padded to 50264; padding only the result's rows
//! does not help (`bench/gpu/results/2026-11-25-mm-layout-h100.txt`). The
//! plugin states the multiple (`matmul_alignment`, in bytes; 0: none).
//!
//! For each `mm`, `bmm` and `matmul` of 2-D or 3-D float16/bfloat16 operands whose
//! K or N is not a multiple, the operands are padded with zeros to the next
//! multiple (zeros in K add nothing to a product; columns past N are never read)
//! and the product is sliced back to N columns, a strided view of its buffer:
//! - an operand that is a constant, or a view of one, is padded here, once, into
//!   a new constant (the weights file holds the padded layout; nothing is
//!   copied at run time);
//! - any other operand is padded at run time by a copy (a `cat` with zeros),
//!   only when the product is large enough ([`MIN_RUNTIME_PADDED_MACS`]) that
//!   the slow kernel costs more than the copy.
//!
//! M is left alone: it sets no leading dimension of a row-major product.

use std::sync::Arc;

use super::{emit, replace_node, Error, Stats};
use crate::graph::dtype::DType;
use crate::graph::shape::{consts, contiguous_strides};
use crate::graph::sym::{Size, Symbols};
use crate::graph::views;
use crate::graph::{Arg, ConstData, Graph, Node, NodeId, Op, Scalar, TensorMeta, ValueId};

const PASS: &str = "pad_mm";

/// The fewest multiply-adds of a product whose non-constant operands are copied
/// to pad it: 2^30, a product of about a millisecond in the slow kernels (the
/// sweep's smallest unaligned products, 4096 x 768 x 2050, lose 50 us; the copy
/// of a `[4096, 768]` 16-bit operand costs about 5 us).
pub const MIN_RUNTIME_PADDED_MACS: i64 = 1 << 30;

/// Pads the 16-bit products of `g` to multiples of `alignment` bytes (0: none).
pub fn run(g: &mut Graph, alignment: u32) -> Result<Stats, Error> {
    run_with(g, alignment, MIN_RUNTIME_PADDED_MACS)
}

/// [`run`], copying non-constant operands of products of at least
/// `min_runtime_macs` multiply-adds.
pub fn run_with(g: &mut Graph, alignment: u32, min_runtime_macs: i64) -> Result<Stats, Error> {
    let _span = tracing::info_span!("pad_mm").entered();
    let mut changed = 0;
    if alignment == 0 {
        return Ok(Stats { changed });
    }
    for id in super::topo_order(g, PASS)? {
        if let Some(plan) = plan(g, id, alignment, min_runtime_macs) {
            rewrite(g, id, &plan)?;
            changed += 1;
        }
    }
    Ok(Stats { changed })
}

/// What one product needs: its operands and the padded K and N.
struct Plan {
    a: ValueId,
    b: ValueId,
    k: i64,
    n: i64,
    k_padded: i64,
    n_padded: i64,
}

fn plan(g: &Graph, id: NodeId, alignment: u32, min_runtime_macs: i64) -> Option<Plan> {
    let node = g.node(id)?;
    if !matches!(node.op, Op::Mm | Op::Bmm | Op::Matmul) {
        return None;
    }
    let (a, b) = (node.args.first()?.value()?, node.args.get(1)?.value()?);
    // M and the batch may be symbolic (a dynamic compile); K and N are integers.
    let (ma, mb) = (g.meta(a)?, g.meta(b)?);
    let rank = ma.rank();
    if !(2..=3).contains(&rank) || mb.rank() != rank || !ma.dtype.is_low_precision() {
        return None;
    }
    let per = (alignment as usize / ma.dtype.size_bytes()).max(1) as i64;
    let (m, k, n) = (
        &ma.shape[rank - 2],
        ma.shape[rank - 1].as_const()?,
        mb.shape[rank - 1].as_const()?,
    );
    let (k_padded, n_padded) = (round_up(k, per), round_up(n, per));
    if (k, n) == (k_padded, n_padded) || *m == 0 || k == 0 || n == 0 {
        return None;
    }
    let a_copied = k != k_padded && constant_source(g, a).is_none();
    let b_copied = constant_source(g, b).is_none();
    // A copy pads an operand of integer sizes only.
    if (a_copied && !ma.is_static()) || (b_copied && !mb.is_static()) {
        return None;
    }
    let copies = a_copied || b_copied;
    // At the size symbols' hints, as every decision reads them.
    let batch: i64 = ma.shape[..rank - 2].iter().map(Size::hint).product();
    let macs = batch
        .saturating_mul(m.hint())
        .saturating_mul(k)
        .saturating_mul(n);
    if copies && macs < min_runtime_macs {
        return None;
    }
    Some(Plan {
        a,
        b,
        k,
        n,
        k_padded,
        n_padded,
    })
}

fn round_up(x: i64, per: i64) -> i64 {
    (x + per - 1) / per * per
}

fn rewrite(g: &mut Graph, id: NodeId, p: &Plan) -> Result<(), Error> {
    let (op, line, name) = {
        let node = g.node(id).ok_or_else(|| vanished(id))?;
        (node.op.clone(), node.line, node.name.clone())
    };
    let a = pad_last_two(g, &name, p.a, 0, p.k_padded - p.k, line)?;
    let b = pad_last_two(g, &name, p.b, p.k_padded - p.k, p.n_padded - p.n, line)?;
    let product = emit(g, PASS, &name, op, vec![Arg::Value(a), Arg::Value(b)], line)?;
    let slice = Op::Slice {
        dim: -1,
        start: Some(crate::graph::sym::Size::from(0)),
        end: Some(crate::graph::sym::Size::from(p.n)),
        step: 1,
    };
    let out = emit(g, PASS, &name, slice, vec![Arg::Value(product)], line)?;
    replace_node(g, id, &[out]);
    Ok(())
}

fn vanished(id: NodeId) -> Error {
    Error::Unsupported {
        node: format!("#{}", id.index()),
        what: "a product vanished while it was padded".into(),
    }
}

/// `v` with `rows` zero rows and `cols` zero columns added after its last two dims'
/// elements: a new constant when `v` is (a view of) one, else a `cat` with zeros.
fn pad_last_two(
    g: &mut Graph,
    base: &str,
    v: ValueId,
    rows: i64,
    cols: i64,
    line: Option<u32>,
) -> Result<ValueId, Error> {
    if rows == 0 && cols == 0 {
        return Ok(v);
    }
    if let Some(source) = constant_source(g, v) {
        if let Some(data) = padded_constant(&source, rows, cols) {
            let mut shape = source.shape.clone();
            let r = shape.len();
            shape[r - 2] += rows;
            shape[r - 1] += cols;
            let meta = TensorMeta::contiguous(shape, source.dtype);
            let name = g.fresh_name(&format!("{}_padded", source.name));
            let id = g.add_node(Node {
                name,
                op: Op::Constant { data },
                args: vec![],
                outputs: vec![meta],
                line,
            });
            return Ok(ValueId::first(id));
        }
    }
    let rank = g.fixed_meta(v).ok_or_else(|| vanished(v.node))?.rank();
    let mut y = v;
    for (dim, extra) in [(rank - 2, rows), (rank - 1, cols)] {
        if extra > 0 {
            y = cat_zeros(g, base, y, dim, extra, line)?;
        }
    }
    Ok(y)
}

fn cat_zeros(
    g: &mut Graph,
    base: &str,
    v: ValueId,
    dim: usize,
    extra: i64,
    line: Option<u32>,
) -> Result<ValueId, Error> {
    let meta = g.fixed_meta(v).ok_or_else(|| vanished(v.node))?;
    let mut shape = meta.shape.clone();
    shape[dim] = extra;
    let zeros = Op::Full {
        size: Some(crate::graph::shape::sizes(&shape)),
        value: Scalar::Float(0.0),
        dtype: Some(meta.dtype),
    };
    let zeros = emit(g, PASS, base, zeros, vec![], line)?;
    let cat = Op::Cat { dim: dim as i64 };
    emit(
        g,
        PASS,
        base,
        cat,
        vec![Arg::Value(v), Arg::Value(zeros)],
        line,
    )
}

/// A value read through views from a constant's elements.
pub(super) struct ConstantView {
    /// The constant's node name.
    pub name: String,
    pub data: ConstData,
    pub dtype: DType,
    pub shape: Vec<i64>,
    pub strides: Vec<i64>,
    pub offset: i64,
}

impl ConstantView {
    /// The row-major position in the constant's data of the view's element at
    /// `index` (one coordinate per dim).
    pub fn position(&self, index: &[i64]) -> usize {
        let at = index
            .iter()
            .zip(&self.strides)
            .fold(self.offset, |at, (i, s)| at + i * s);
        at as usize
    }

    /// A 2-D view's elements as a new row-major constant of its transpose
    /// (`[N, K]` of a `[K, N]` view), in the constant's own encoding; `None` for
    /// another rank, a fill, or where the host cannot hold it.
    pub fn transposed(&self) -> Option<ConstData> {
        let [rows, cols] = self.shape[..] else {
            return None;
        };
        let total = usize::try_from(rows * cols).ok()?;
        // Destination (j, i) of the view's element (i, j).
        let each = |mut put: Box<dyn FnMut(usize, usize) + '_>| {
            for j in 0..cols {
                for i in 0..rows {
                    put((j * rows + i) as usize, self.position(&[i, j]));
                }
            }
        };
        rearranged(&self.data, total, "a transposed constant", each)
    }
}

/// A new constant of `total` elements in `data`'s encoding (zeros where `fill` puts
/// nothing), `fill` putting each (destination, source position) pair; `None` for a
/// fill, or where the host cannot hold it (`what` names it).
fn rearranged(
    data: &ConstData,
    total: usize,
    what: &str,
    fill: impl FnOnce(Box<dyn FnMut(usize, usize) + '_>),
) -> Option<ConstData> {
    Some(match data {
        ConstData::Values(values) => {
            let mut out = crate::memory::try_vec::<f64>(|| what.into(), total).ok()?;
            out.resize(total, 0.0);
            fill(Box::new(|to, from| {
                out[to] = values.get(from).copied().unwrap_or(0.0)
            }));
            ConstData::Values(Arc::from(out))
        }
        ConstData::Bytes { dtype, bytes } => {
            let size = dtype.size_bytes();
            let len = total.checked_mul(size)?;
            let mut out = crate::memory::try_vec::<u8>(|| what.into(), len).ok()?;
            out.resize(len, 0);
            fill(Box::new(|to, from| {
                if let Some(src) = bytes.get(from * size..(from + 1) * size) {
                    out[to * size..(to + 1) * size].copy_from_slice(src);
                }
            }));
            ConstData::Bytes {
                dtype: *dtype,
                bytes: Arc::from(out),
            }
        }
        ConstData::Fill(_) => return None,
    })
}

/// `v` as a strided view of a constant's elements, if it is a constant or a chain
/// of view ops over one that strides can express.
pub(super) fn constant_source(g: &Graph, v: ValueId) -> Option<ConstantView> {
    let node = g.node(v.node)?;
    match &node.op {
        Op::Constant { data } if !matches!(data, ConstData::Fill(_)) => {
            let meta = node.outputs.first()?.fixed()?;
            Some(ConstantView {
                name: node.name.clone(),
                data: data.clone(),
                dtype: meta.dtype,
                shape: meta.shape.clone(),
                strides: contiguous_strides(&meta.shape),
                offset: 0,
            })
        }
        op if views::describes(op) && !views::copies(op) => {
            let input = node.args.first()?.value()?;
            let base = constant_source(g, input)?;
            let shape = crate::graph::shape::sizes(&base.shape);
            let map = views::view_map(op, &shape, v.output, Symbols::none()).ok()?;
            let strides = crate::graph::shape::sizes(&base.strides);
            let (strides, offset) = map.restride(&strides, &Size::from(base.offset))?;
            Some(ConstantView {
                shape: consts(&map.out_shape)?,
                strides: consts(&strides)?,
                offset: offset.as_const()?,
                ..base
            })
        }
        _ => None,
    }
}

/// The elements of `c` laid out row-major with `rows` zero rows and `cols` zero
/// columns after its last two dims' elements, in the constant's own encoding.
fn padded_constant(c: &ConstantView, rows: i64, cols: i64) -> Option<ConstData> {
    let r = c.shape.len();
    let (h, w) = (c.shape[r - 2], c.shape[r - 1]);
    let (hp, wp) = (h + rows, w + cols);
    let batch: i64 = c.shape[..r - 2].iter().product();
    let total = usize::try_from(batch * hp * wp).ok()?;
    // The source position of element (b, i, j) of the view.
    let batch_shape = &c.shape[..r - 2];
    let at = |b: i64, i: i64, j: i64| -> usize {
        let mut rest = b;
        let mut pos = c.offset + i * c.strides[r - 2] + j * c.strides[r - 1];
        for d in (0..r - 2).rev() {
            pos += rest % batch_shape[d] * c.strides[d];
            rest /= batch_shape[d];
        }
        pos as usize
    };
    let each = |mut put: Box<dyn FnMut(usize, usize) + '_>| {
        for b in 0..batch {
            for i in 0..h {
                for j in 0..w {
                    put(((b * hp + i) * wp + j) as usize, at(b, i, j));
                }
            }
        }
    };
    rearranged(&c.data, total, "a padded constant", each)
}
