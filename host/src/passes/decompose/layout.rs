//! Decompositions of the layout ops and average pooling into slices, concatenations,
//! constant-index gathers and sums: `pad` (constant fill as `cat` with a `full`, the
//! other modes as a gather of the source index per position), `roll` as two slices
//! concatenated, `slice_scatter` as slices of `self` around `src` (a gather for strided
//! slices), `copy` as a cast and broadcast, `as_strided` as a reshape or a gather of
//! constant offsets, and `avg_pool` as a sum of strided slices of the zero-padded input
//! over PyTorch's divisor. Each agrees with the interpreter's rule (`interp::layout`,
//! `interp::model`).

use super::B;
use crate::graph::infer::layout::{pad_amounts, scatter_slice};
use crate::graph::infer::model::Taps;
use crate::graph::shape::{is_row_major, numel, wrap_dim};
use crate::graph::sym::Size;
use crate::graph::{Arg, BinaryOp, DType, FixedMeta, Op, PadMode, Scalar, ValueId};
use crate::interp::layout::pad_source;
use crate::interp::model::avg_pool_divisor;
use crate::passes::Error;

/// The most offsets `as_strided` gathers through a constant index: 16 M, 128 MiB of
/// int64 in the generated code's weights.
const MAX_GATHER_ELEMENTS: i64 = 1 << 24;

/// An average pooling window's parameters, one entry per spatial dim.
pub(super) struct Window<'a> {
    pub kernel: &'a [i64],
    pub stride: &'a [i64],
    pub padding: &'a [i64],
    pub count_include_pad: bool,
    pub divisor_override: Option<i64>,
}

/// A copy of `x` in `dtype` that is a value of its own (not a view of, nor the same
/// value as, `x`); the no-op pass drops the copy where nothing needs it.
pub(super) fn fresh(b: &mut B, x: ValueId, dtype: DType) -> Result<ValueId, Error> {
    let y = b.cast(x, dtype)?;
    if y == x || b.g.node(y.node).is_some_and(|n| n.op.is_view()) {
        return b.op(Op::Clone, vec![Arg::Value(y)]);
    }
    Ok(y)
}

/// `x` along dim `d` with `before` elements of `value` in front and `after` behind; a
/// negative amount crops instead.
pub(super) fn pad_constant(
    b: &mut B,
    x: ValueId,
    d: usize,
    before: i64,
    after: i64,
    value: f64,
) -> Result<ValueId, Error> {
    // Dim `d` is static; another (a batch) may be symbolic.
    let shape = b.sizes(x);
    let size = b.dim(x, d)?;
    let (lo, hi) = (before.min(0).saturating_neg(), size + after.min(0));
    let mut body = x;
    if lo > 0 || hi < size {
        body = b.slice(x, d as i64, lo, hi.max(lo), 1)?;
    }
    let dtype = b.dtype(x);
    let mut parts = vec![];
    let fill = |b: &mut B, n: i64| -> Result<ValueId, Error> {
        let mut s = shape.clone();
        s[d] = Size::from(n);
        b.full(s, value, dtype)
    };
    if before > 0 {
        parts.push(fill(b, before)?);
    }
    parts.push(body);
    if after > 0 {
        parts.push(fill(b, after)?);
    }
    if parts.len() == 1 {
        return Ok(body);
    }
    b.op(
        Op::Cat { dim: d as i64 },
        parts.into_iter().map(Arg::Value).collect(),
    )
}

/// `x` gathered along dim `d` at the constant positions `idx`.
fn gather_dim(b: &mut B, x: ValueId, d: usize, idx: Vec<i64>) -> Result<ValueId, Error> {
    let n = idx.len() as i64;
    let idx = b.constant(
        vec![n],
        DType::Int64,
        idx.into_iter().map(|i| i as f64).collect(),
    );
    let mut indexed = vec![false; d];
    indexed.push(true);
    b.op(
        Op::Index {
            indexed,
            nonnegative: false,
        },
        vec![Arg::Value(x), Arg::Value(idx)],
    )
}

pub(super) fn pad(
    b: &mut B,
    x: ValueId,
    pads: &[i64],
    mode: PadMode,
    value: f64,
    out: &FixedMeta,
) -> Result<ValueId, Error> {
    let rank = b.shape(x).len();
    let amounts = pad_amounts(pads, rank).map_err(|e| Error::Unsupported {
        node: b.base.clone(),
        what: e.to_string(),
    })?;
    let mut y = x;
    for (d, before, after) in amounts {
        if before == 0 && after == 0 {
            continue;
        }
        y = match mode {
            PadMode::Constant => pad_constant(b, y, d, before, after, value)?,
            _ => {
                let size = b.shape(y)[d];
                let idx = (0..size + before + after)
                    .map(|i| pad_source(mode, i, before, size).unwrap_or(0))
                    .collect();
                gather_dim(b, y, d, idx)?
            }
        };
    }
    fresh(b, y, out.dtype)
}

pub(super) fn roll(
    b: &mut B,
    x: ValueId,
    shifts: &[i64],
    dims: &[i64],
    out: &FixedMeta,
) -> Result<ValueId, Error> {
    if dims.is_empty() {
        let n = numel(&out.shape).unwrap_or(0);
        let flat = b.reshape(x, vec![n])?;
        let rolled = roll(
            b,
            flat,
            shifts,
            &[0],
            &FixedMeta::contiguous(vec![n], out.dtype),
        )?;
        return b.reshape(rolled, out.shape.clone());
    }
    let rank = out.shape.len();
    let mut total = vec![0i64; rank];
    for (&d, &s) in dims.iter().zip(shifts) {
        let d = wrap_dim(d, rank).map_err(|e| Error::Unsupported {
            node: b.base.clone(),
            what: e.to_string(),
        })?;
        let n = out.shape[d].max(1);
        total[d] = (total[d] + s.rem_euclid(n)).rem_euclid(n);
    }
    let mut y = x;
    for (d, &s) in total.iter().enumerate() {
        let n = out.shape[d];
        if n == 0 {
            continue;
        }
        let s = s.rem_euclid(n);
        if s == 0 {
            continue;
        }
        // The last `s` elements come first.
        let tail = b.slice(y, d as i64, n - s, n, 1)?;
        let head = b.slice(y, d as i64, 0, n - s, 1)?;
        y = b.op(
            Op::Cat { dim: d as i64 },
            vec![Arg::Value(tail), Arg::Value(head)],
        )?;
    }
    fresh(b, y, out.dtype)
}

#[allow(clippy::too_many_arguments)]
pub(super) fn slice_scatter(
    b: &mut B,
    x: ValueId,
    src: ValueId,
    dim: i64,
    start: Option<i64>,
    end: Option<i64>,
    step: i64,
    select: bool,
    out: &FixedMeta,
) -> Result<ValueId, Error> {
    let (d, lo, len, _) =
        scatter_slice(&out.shape, dim, start, end, step, select).map_err(|e| {
            Error::Unsupported {
                node: b.base.clone(),
                what: e.to_string(),
            }
        })?;
    if len == 0 {
        return fresh(b, x, out.dtype);
    }
    let mut src = b.cast(src, out.dtype)?;
    if select {
        src = b.op(Op::Unsqueeze { dim: d as i64 }, vec![Arg::Value(src)])?;
    }
    let n = out.shape[d];
    let y = if step == 1 || len == 1 {
        let mut parts = vec![];
        if lo > 0 {
            parts.push(b.slice(x, d as i64, 0, lo, 1)?);
        }
        parts.push(src);
        if lo + len < n {
            parts.push(b.slice(x, d as i64, lo + len, n, 1)?);
        }
        if parts.len() == 1 {
            src
        } else {
            b.op(
                Op::Cat { dim: d as i64 },
                parts.into_iter().map(Arg::Value).collect(),
            )?
        }
    } else {
        // Every position reads `self` or, inside the strided slice, `src` (placed after
        // `self` along the dim).
        let both = b.op(
            Op::Cat { dim: d as i64 },
            vec![Arg::Value(x), Arg::Value(src)],
        )?;
        let idx = (0..n)
            .map(|i| {
                let k = i - lo;
                if k >= 0 && k % step == 0 && k / step < len {
                    n + k / step
                } else {
                    i
                }
            })
            .collect();
        gather_dim(b, both, d, idx)?
    };
    fresh(b, y, out.dtype)
}

pub(super) fn copy(b: &mut B, src: Option<&Arg>, out: &FixedMeta) -> Result<ValueId, Error> {
    match src {
        Some(Arg::Scalar(s)) => b.op(
            Op::Full {
                size: Some(crate::graph::shape::sizes(&out.shape)),
                value: *s,
                dtype: Some(out.dtype),
            },
            vec![],
        ),
        Some(Arg::Value(v)) => {
            let mut y = b.cast(*v, out.dtype)?;
            if b.shape(y) != out.shape {
                y = b.op(
                    Op::Expand {
                        sizes: crate::graph::shape::sizes(&out.shape),
                    },
                    vec![Arg::Value(y)],
                )?;
            }
            fresh(b, y, out.dtype)
        }
        None => Err(Error::Unsupported {
            node: b.base.clone(),
            what: "copy without a source".into(),
        }),
    }
}

/// `repeat`: `x` reshaped to `[1, s0, 1, s1, ...]`, expanded to `[r0, s0, r1, s1, ...]`
/// and reshaped to `[r0 * s0, r1 * s1, ...]` (leading repeats add dims).
pub(super) fn repeat(
    b: &mut B,
    x: ValueId,
    repeats: &[i64],
    out: &FixedMeta,
) -> Result<ValueId, Error> {
    let shape = b.shape(x);
    let lead = repeats.len() - shape.len();
    let (mut split, mut wide) = (vec![], vec![]);
    for (i, &r) in repeats.iter().enumerate() {
        let s = if i < lead { 1 } else { shape[i - lead] };
        split.extend([1, s]);
        wide.extend([r, s]);
    }
    let y = b.reshape(x, split)?;
    let y = b.op(
        Op::Expand {
            sizes: crate::graph::shape::sizes(&wide),
        },
        vec![Arg::Value(y)],
    )?;
    let y = b.op(Op::Contiguous, vec![Arg::Value(y)])?;
    let y = b.reshape(y, out.shape.clone())?;
    fresh(b, y, out.dtype)
}

/// `as_strided` over `x`'s row-major elements: a reshape when the strides are the
/// output's own row-major strides (size-1 dims aside), else a gather of constant offsets.
pub(super) fn as_strided(
    b: &mut B,
    x: ValueId,
    size: &[i64],
    stride: &[i64],
    offset: i64,
    out: &FixedMeta,
) -> Result<ValueId, Error> {
    let n = numel(size).unwrap_or(0);
    let have = numel(&b.shape(x)).unwrap_or(0);
    let reshape = n == have && is_row_major(size, stride, offset);
    let flat = b.reshape(x, vec![have])?;
    if reshape {
        let y = b.reshape(flat, size.to_vec())?;
        return fresh(b, y, out.dtype);
    }
    if n > MAX_GATHER_ELEMENTS {
        return Err(Error::Unsupported {
            node: b.base.clone(),
            what: format!(
                "as_strided with {n} elements that are not a reshape of its input (at most {MAX_GATHER_ELEMENTS} are gathered)"
            ),
        });
    }
    let mut offsets = Vec::with_capacity(n as usize);
    crate::graph::shape::for_each_index(size, |idx| {
        let p = offset + idx.iter().zip(stride).map(|(i, s)| i * s).sum::<i64>();
        offsets.push(p as f64);
    });
    let idx = b.constant(size.to_vec(), DType::Int64, offsets);
    let y = b.op(
        Op::Index {
            indexed: vec![true],
            nonnegative: false,
        },
        vec![Arg::Value(flat), Arg::Value(idx)],
    )?;
    fresh(b, y, out.dtype)
}

/// Average pooling over the last `w.kernel.len()` dims.
pub(super) fn avg_pool(
    b: &mut B,
    x: ValueId,
    w: &Window,
    out: &FixedMeta,
) -> Result<ValueId, Error> {
    let k = w.kernel.len();
    let rank = out.shape.len();
    // The pooled dims are static (a batch may be symbolic).
    let mut in_shape = vec![0; rank];
    for (d, size) in in_shape.iter_mut().enumerate().skip(rank - k) {
        *size = b.dim(x, d)?;
    }
    let mut xp = b.upcast(x)?;
    let cd = b.dtype(xp);
    // Padded with zeros (or cut) to exactly the extent the taps that reach the input
    // cover (`ceil_mode` windows may run past the padded input: the zeros add nothing,
    // the divisor leaves them out).
    let mut taps = vec![];
    for i in 0..k {
        let d = rank - k + i;
        let t = Taps::of(
            w.kernel[i],
            w.stride[i],
            1,
            w.padding[i],
            in_shape[d],
            out.shape[d],
        )
        .map_err(|what| Error::Unsupported {
            node: b.base.clone(),
            what,
        })?;
        xp = pad_constant(b, xp, d, t.before, t.after, 0.0)?;
        taps.push(t);
    }
    let mut sum: Option<ValueId> = None;
    for off in Taps::product(&taps) {
        let mut win = xp;
        for (i, &start) in off.iter().enumerate() {
            let d = rank - k + i;
            let o = out.shape[d];
            win = b.slice(
                win,
                d as i64,
                start,
                start + (o - 1) * w.stride[i] + 1,
                w.stride[i],
            )?;
        }
        sum = Some(match sum {
            None => win,
            Some(s) => b.vv(BinaryOp::Add, s, win)?,
        });
    }
    let sum = sum.unwrap_or(xp);
    let y = match w.divisor_override {
        Some(dv) => b.bin(BinaryOp::Div, Arg::Value(sum), Arg::Scalar(Scalar::Int(dv)))?,
        None => {
            // The divisor per output position: a product of one count per spatial dim.
            let counts: Vec<Vec<i64>> = (0..k)
                .map(|i| {
                    let d = rank - k + i;
                    (0..out.shape[d])
                        .map(|o| {
                            avg_pool_divisor(
                                o * w.stride[i] - w.padding[i],
                                w.kernel[i],
                                in_shape[d],
                                w.padding[i],
                                w.count_include_pad,
                            )
                            .2
                        })
                        .collect()
                })
                .collect();
            let mut divisors = vec![1i64];
            for c in &counts {
                divisors = divisors
                    .iter()
                    .flat_map(|&p| c.iter().map(move |&q| p * q))
                    .collect();
            }
            if divisors.iter().all(|&v| v == divisors[0]) {
                b.bin(
                    BinaryOp::Div,
                    Arg::Value(sum),
                    Arg::Scalar(Scalar::Int(divisors[0])),
                )?
            } else {
                let shape = out.shape[rank - k..].to_vec();
                let dv = b.constant(shape, cd, divisors.into_iter().map(|v| v as f64).collect());
                b.vv(BinaryOp::Div, sum, dv)?
            }
        }
    };
    fresh(b, y, out.dtype)
}
