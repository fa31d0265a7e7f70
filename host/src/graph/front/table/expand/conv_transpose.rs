//! `conv_transpose1d/2d/3d` (and `convolution` with `transposed=True`, their core-ATen
//! form) as the direct convolution they equal: the input with `stride - 1` zeros
//! between its elements along each spatial dim, padded by `dilation * (kernel - 1) -
//! padding` on each side (and `output_padding` more at the end; a negative amount crops),
//! convolved at stride 1 with the weight's spatial dims flipped and its input and output
//! channels swapped within each group.

use super::{int_list, ints, invalid, t, Args, Raw, SigError, Steps};
use crate::graph::DType;

/// The spatial parameter `name` for `n` dims: one number stands for all.
fn per_dim(args: &Args<'_>, name: &str, n: usize, default: i64) -> Result<Vec<i64>, SigError> {
    let v = int_list(args.get(name)).unwrap_or_else(|| vec![default]);
    match v.len() {
        1 => Ok(vec![v[0]; n]),
        k if k == n => Ok(v),
        k => Err(invalid(format!(
            "`{name}` has {k} values for {n} spatial dims"
        ))),
    }
}

/// The expansion; `None` for a `convolution` that is not transposed.
pub(super) fn expand(
    s: &mut Steps<'_>,
    op: &str,
    args: &Args<'_>,
) -> Result<Option<Vec<String>>, SigError> {
    if op == "convolution" && !matches!(args.get("transposed"), Some(Raw::Bool(true))) {
        return Ok(None);
    }
    let (x, xm) = args.tensor("input")?;
    let (w, wm) = args.tensor("weight")?;
    let n = wm.rank().saturating_sub(2);
    if !(1..=3).contains(&n) {
        return Err(invalid(format!(
            "a weight of {} dims: 1 to 3 spatial dims are taken",
            wm.rank()
        )));
    }
    let unbatched = xm.rank() == n + 1;
    if !unbatched && xm.rank() != n + 2 {
        return Err(invalid(format!(
            "an input of {} dims for {n} spatial dims (expected {} or {})",
            xm.rank(),
            n + 1,
            n + 2
        )));
    }
    let stride = per_dim(args, "stride", n, 1)?;
    let padding = per_dim(args, "padding", n, 0)?;
    let dilation = per_dim(args, "dilation", n, 1)?;
    let out_pad = per_dim(args, "output_padding", n, 0)?;
    let groups = args.int_or("groups", 1)?;
    let cin = wm.shape[0];
    if groups < 1 || cin % groups != 0 || xm.shape[usize::from(!unbatched)] != cin {
        return Err(invalid(format!(
            "an input of {} channels for a weight of {cin} input channels in {groups} group(s)",
            xm.shape[usize::from(!unbatched)]
        )));
    }
    for i in 0..n {
        if stride[i] < 1 || dilation[i] < 1 || padding[i] < 0 || out_pad[i] < 0 {
            return Err(invalid(
                "stride and dilation must be positive, padding and output_padding not negative"
                    .into(),
            ));
        }
        if out_pad[i] >= stride[i].max(dilation[i]) {
            return Err(invalid(format!(
                "output_padding {} must be smaller than either stride {} or dilation {}",
                out_pad[i], stride[i], dilation[i]
            )));
        }
    }
    let mut shape = xm.shape.clone();
    let mut cur = x;
    if unbatched {
        shape.insert(0, 1);
        cur = s.reshape(&cur, &shape);
    }
    // Zeros between the elements: each spatial dim [S] becomes [S, stride] (padded with
    // zeros), merged, and cut to (S - 1) * stride + 1.
    for (i, &st) in stride.iter().enumerate() {
        let a = 2 + i;
        if st == 1 || shape[a] == 0 {
            continue;
        }
        let u = s.op(
            "unsqueeze",
            vec![("self", t(&cur)), ("dim", Raw::Int(a as i64 + 1))],
        );
        let mut pad = vec![0i64; 2 * (shape.len() - 1 - a)];
        pad.extend([0, st - 1]);
        let padded = s.op(
            "constant_pad_nd",
            vec![("self", t(&u)), ("pad", ints(&pad))],
        );
        let long = shape[a] * st;
        shape[a] = long;
        let merged = s.reshape(&padded, &shape);
        shape[a] = (long / st - 1) * st + 1;
        cur = s.op(
            "slice",
            vec![
                ("self", t(&merged)),
                ("dim", Raw::Int(a as i64)),
                ("start", Raw::Int(0)),
                ("end", Raw::Int(shape[a])),
            ],
        );
    }
    // dilation * (kernel - 1) - padding on each side, output_padding more at the end.
    let mut pad = vec![];
    for i in (0..n).rev() {
        let edge = dilation[i] * (wm.shape[2 + i] - 1) - padding[i];
        pad.extend([edge, edge + out_pad[i]]);
    }
    if pad.iter().any(|&p| p != 0) {
        cur = s.op(
            "constant_pad_nd",
            vec![("self", t(&cur)), ("pad", ints(&pad))],
        );
    }
    let weight = direct_weight(s, &w, &wm.shape, groups);
    let mut conv = vec![
        ("input", t(&cur)),
        ("weight", t(&weight)),
        ("stride", ints(&vec![1; n])),
        ("padding", ints(&vec![0; n])),
        ("dilation", ints(&dilation)),
        ("groups", Raw::Int(groups)),
    ];
    if let Some(b @ Raw::Str(_)) = args.get("bias") {
        conv.push(("bias", b.clone()));
    }
    let mut y = s.op(["conv1d", "conv2d", "conv3d"][n - 1], conv);
    if unbatched {
        let mut out = xm.shape.clone();
        out[0] = wm.shape[1] * groups;
        for i in 0..n {
            out[1 + i] = (xm.shape[1 + i] - 1) * stride[i] - 2 * padding[i]
                + dilation[i] * (wm.shape[2 + i] - 1)
                + out_pad[i]
                + 1;
        }
        y = s.reshape(&y, &out);
    }
    Ok(Some(vec![y]))
}

/// The transposed convolution's weight `[Cin, Cout / g, *K]` as the direct one's
/// `[Cout, Cin / g, *K]`: channels swapped within each group, spatial dims flipped.
fn direct_weight(s: &mut Steps<'_>, w: &str, shape: &[i64], groups: i64) -> String {
    let (cin, cout_g, kernel) = (shape[0], shape[1], &shape[2..]);
    let mut grouped = vec![groups, cin / groups, cout_g];
    grouped.extend_from_slice(kernel);
    let g = s.reshape(w, &grouped);
    let mut dims: Vec<usize> = vec![0, 2, 1];
    dims.extend(3..3 + kernel.len());
    let swapped = s.permute(&g, &dims);
    let mut direct = vec![groups * cout_g, cin / groups];
    direct.extend_from_slice(kernel);
    let mut cur = s.reshape(&swapped, &direct);
    for (i, &k) in kernel.iter().enumerate() {
        if k < 2 {
            continue;
        }
        let idx = s.konst(
            vec![k],
            DType::Int64,
            (0..k).rev().map(|i| i as f64).collect(),
        );
        let mut indices = vec![Raw::None; 2 + i];
        indices.push(t(&idx));
        cur = s.op(
            "index",
            vec![("self", t(&cur)), ("indices", Raw::List(indices))],
        );
    }
    cur
}
