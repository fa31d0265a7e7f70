//! `im2col` (`nn.Unfold`) and `col2im` (`nn.Fold`) as strided slices and scatters.

use super::{ints, t, Raw, Steps};
use crate::graph::DType;

/// `im2col` (`nn.Unfold`): each kernel position's strided slice of the padded input,
/// stacked after the channel dim, `[N, C * kh * kw, L]`.
pub(super) fn im2col(
    s: &mut Steps<'_>,
    x: &str,
    shape: &[i64],
    k: [i64; 2],
    dil: [i64; 2],
    pad: [i64; 2],
    st: [i64; 2],
) -> Result<String, String> {
    let batched = match shape.len() {
        4 => true,
        3 => false,
        r => return Err(format!("im2col takes a 3-d or 4-d input, found {r}-d")),
    };
    if k.iter().chain(&dil).chain(&st).any(|&v| v <= 0) || pad.iter().any(|&p| p < 0) {
        return Err(format!(
            "kernel {k:?}, dilation {dil:?} and stride {st:?} must be positive, padding {pad:?} non-negative"
        ));
    }
    let (x, n, c, h, w) = if batched {
        (x.to_string(), shape[0], shape[1], shape[2], shape[3])
    } else {
        let x4 = s.reshape(x, &[1, shape[0], shape[1], shape[2]]);
        (x4, 1, shape[0], shape[1], shape[2])
    };
    let o = |i: usize, size: i64| (size + 2 * pad[i] - dil[i] * (k[i] - 1) - 1) / st[i] + 1;
    let (oh, ow) = (o(0, h), o(1, w));
    if oh <= 0 || ow <= 0 {
        return Err(format!("the kernel does not fit the padded {h}x{w} input"));
    }
    let xp = if pad != [0, 0] {
        s.op(
            "constant_pad_nd",
            vec![
                ("self", t(&x)),
                ("pad", ints(&[pad[1], pad[1], pad[0], pad[0]])),
            ],
        )
    } else {
        x
    };
    let mut taps = vec![];
    for i in 0..k[0] {
        for j in 0..k[1] {
            let r0 = i * dil[0];
            let rows = s.op(
                "slice",
                vec![
                    ("self", t(&xp)),
                    ("dim", Raw::Int(2)),
                    ("start", Raw::Int(r0)),
                    ("end", Raw::Int(r0 + (oh - 1) * st[0] + 1)),
                    ("step", Raw::Int(st[0])),
                ],
            );
            let c0 = j * dil[1];
            taps.push(s.op(
                "slice",
                vec![
                    ("self", t(&rows)),
                    ("dim", Raw::Int(3)),
                    ("start", Raw::Int(c0)),
                    ("end", Raw::Int(c0 + (ow - 1) * st[1] + 1)),
                    ("step", Raw::Int(st[1])),
                ],
            ));
        }
    }
    let stacked = s.stack(&taps, 2);
    let cols = c * k[0] * k[1];
    Ok(if batched {
        s.reshape(&stacked, &[n, cols, oh * ow])
    } else {
        s.reshape(&stacked, &[cols, oh * ow])
    })
}

/// `col2im` (`nn.Fold`), the adjoint of [`im2col`]: each kernel position's columns
/// scattered into zeros of the padded output at that position's strided places, the
/// scatters summed (overlapping blocks add), the padding cut off.
#[allow(clippy::too_many_arguments)]
pub(super) fn col2im(
    s: &mut Steps<'_>,
    x: &str,
    shape: &[i64],
    out: &[i64],
    dtype: DType,
    k: [i64; 2],
    dil: [i64; 2],
    pad: [i64; 2],
    st: [i64; 2],
) -> Result<String, String> {
    let (batched, n, cols, blocks) = match shape {
        [n, c, l] => (true, *n, *c, *l),
        [c, l] => (false, 1, *c, *l),
        _ => return Err(format!("col2im takes a 2-d or 3-d input, found {shape:?}")),
    };
    let (h, w) = match out {
        [.., h, w] => (*h, *w),
        _ => return Err(format!("col2im's output has shape {out:?}")),
    };
    if k.iter().chain(&dil).chain(&st).any(|&v| v <= 0) || pad.iter().any(|&p| p < 0) {
        return Err(format!(
            "kernel {k:?}, dilation {dil:?} and stride {st:?} must be positive, padding {pad:?} non-negative"
        ));
    }
    let taps = k[0] * k[1];
    if cols % taps != 0 {
        return Err(format!(
            "{cols} rows are not a whole number of {taps}-position kernels"
        ));
    }
    let c = cols / taps;
    let o = |i: usize, size: i64| (size + 2 * pad[i] - dil[i] * (k[i] - 1) - 1) / st[i] + 1;
    let (oh, ow) = (o(0, h), o(1, w));
    if oh <= 0 || ow <= 0 || oh * ow != blocks {
        return Err(format!(
            "{blocks} blocks, but a {h}x{w} output holds {oh}x{ow} of them"
        ));
    }
    let (hp, wp) = (h + 2 * pad[0], w + 2 * pad[1]);
    let x5 = s.reshape(x, &[n, c, taps, oh, ow]);
    let zeros = |s: &mut Steps<'_>, size: &[i64]| {
        s.op(
            "zeros",
            vec![
                ("size", ints(size)),
                ("dtype", Raw::Str(dtype.name().into())),
            ],
        )
    };
    let mut acc: Option<String> = None;
    for i in 0..k[0] {
        for j in 0..k[1] {
            let tap = s.op(
                "select",
                vec![
                    ("self", t(&x5)),
                    ("dim", Raw::Int(2)),
                    ("index", Raw::Int(i * k[1] + j)),
                ],
            );
            let zr = zeros(s, &[n, c, oh, wp]);
            let c0 = j * dil[1];
            let row = s.op(
                "slice_scatter",
                vec![
                    ("self", t(&zr)),
                    ("src", t(&tap)),
                    ("dim", Raw::Int(3)),
                    ("start", Raw::Int(c0)),
                    ("end", Raw::Int(c0 + (ow - 1) * st[1] + 1)),
                    ("step", Raw::Int(st[1])),
                ],
            );
            let zf = zeros(s, &[n, c, hp, wp]);
            let r0 = i * dil[0];
            let full = s.op(
                "slice_scatter",
                vec![
                    ("self", t(&zf)),
                    ("src", t(&row)),
                    ("dim", Raw::Int(2)),
                    ("start", Raw::Int(r0)),
                    ("end", Raw::Int(r0 + (oh - 1) * st[0] + 1)),
                    ("step", Raw::Int(st[0])),
                ],
            );
            acc = Some(match acc {
                None => full,
                Some(a) => s.bin("add", t(&a), t(&full)),
            });
        }
    }
    let mut y = acc.ok_or("a kernel of no positions")?;
    for (d, p, size) in [(2, pad[0], h), (3, pad[1], w)] {
        if p > 0 {
            y = s.op(
                "slice",
                vec![
                    ("self", t(&y)),
                    ("dim", Raw::Int(d)),
                    ("start", Raw::Int(p)),
                    ("end", Raw::Int(p + size)),
                ],
            );
        }
    }
    Ok(if batched {
        y
    } else {
        s.reshape(&y, &[c, h, w])
    })
}
