//! `max_pool3d` (MViT's pooled attention, video models) as PyTorch computes it: the
//! maximum over the kernel's depth taps of depth-strided slices of the input (padded
//! with `-inf`), then the 2-D max pool of those over height and width. Both maxima
//! propagate NaN, as PyTorch's pool does. Only depth taps that reach the input are
//! read (the others see padding alone).

use super::{int_list, ints, invalid, t, Args, Raw, SigError, Steps};

/// `max_pool3d(self, kernel_size, stride, padding, dilation, ceil_mode)`.
pub(super) fn expand(s: &mut Steps<'_>, args: &Args<'_>) -> Result<Option<Vec<String>>, SigError> {
    let (x, m) = args.tensor("self")?;
    let r = m.rank();
    if r != 4 && r != 5 {
        return Err(invalid(format!(
            "needs [N, C, D, H, W] or [C, D, H, W], found {:?}",
            m.shape
        )));
    }
    let triple = |name: &str, default: &[i64]| -> Result<Vec<i64>, SigError> {
        match int_list(args.get(name)).filter(|v| !v.is_empty()) {
            None => Ok(default.to_vec()),
            Some(v) if v.len() == 1 => Ok(vec![v[0]; 3]),
            Some(v) if v.len() == 3 => Ok(v),
            Some(v) => Err(invalid(format!(
                "`{name}` has {} values for 3 dims",
                v.len()
            ))),
        }
    };
    let kernel = triple("kernel_size", &[])?;
    if kernel.len() != 3 {
        return Err(invalid("needs `kernel_size`".into()));
    }
    let stride = triple("stride", &kernel)?;
    let padding = triple("padding", &[0; 3])?;
    let dilation = triple("dilation", &[1; 3])?;
    let ceil = matches!(args.get("ceil_mode"), Some(Raw::Bool(true)));
    for i in 0..3 {
        if kernel[i] < 1 || stride[i] < 1 || dilation[i] < 1 || padding[i] < 0 {
            return Err(invalid(
                "kernel, stride and dilation must be positive, padding not negative".into(),
            ));
        }
        if 2 * padding[i] > dilation[i] * (kernel[i] - 1) + 1 {
            return Err(invalid(format!(
                "padding {padding:?} must be at most half the dilated kernel {kernel:?}"
            )));
        }
    }
    // The depth's output size, as ATen's `pooling_output_shape`.
    let (depth, d) = (m.shape[r - 3], 0);
    let span = depth + 2 * padding[d] - dilation[d] * (kernel[d] - 1) - 1;
    if span < 0 {
        return Err(invalid(format!(
            "a depth of {depth} is smaller than the kernel's {}",
            dilation[d] * (kernel[d] - 1) + 1
        )));
    }
    let mut out = (span + if ceil { stride[d] - 1 } else { 0 }) / stride[d] + 1;
    if ceil && (out - 1) * stride[d] >= depth + padding[d] {
        out -= 1;
    }
    // The depth padded with -inf (or cut) to exactly what the taps that reach it read.
    let reaches = |a: i64| {
        (0..out).any(|o| (0..depth).contains(&(a * dilation[d] - padding[d] + o * stride[d])))
    };
    let taps: Vec<i64> = (0..kernel[d]).filter(|&a| reaches(a)).collect();
    let (Some(&first), Some(&last)) = (taps.first(), taps.last()) else {
        return Err(invalid("no window reaches the input".into()));
    };
    let lo = first * dilation[d] - padding[d];
    let hi = last * dilation[d] - padding[d] + (out - 1) * stride[d];
    let mut pad = vec![0i64; 4];
    pad.extend([-lo, hi - (depth - 1)]);
    let padded = s.op(
        "constant_pad_nd",
        vec![
            ("self", t(&x)),
            ("pad", ints(&pad)),
            ("value", Raw::Float(f64::NEG_INFINITY)),
        ],
    );
    let mut best: Option<String> = None;
    for a in taps {
        let start = a * dilation[d] - padding[d] - lo;
        let slice = s.op(
            "slice",
            vec![
                ("self", t(&padded)),
                ("dim", Raw::Int(r as i64 - 3)),
                ("start", Raw::Int(start)),
                ("end", Raw::Int(start + (out - 1) * stride[d] + 1)),
                ("step", Raw::Int(stride[d])),
            ],
        );
        best = Some(match best {
            None => slice,
            Some(b) => s.bin("maximum", t(&b), t(&slice)),
        });
    }
    let deep = best.unwrap_or(padded);
    // Height and width: one 2-D pool of every (leading, depth) plane.
    let (h, w) = (m.shape[r - 2], m.shape[r - 1]);
    let planes: i64 = m.shape[..r - 3].iter().product::<i64>() * out;
    let flat = s.reshape(&deep, &[1, planes, h, w]);
    let mut pool = vec![
        ("self", t(&flat)),
        ("kernel_size", ints(&kernel[1..])),
        ("stride", ints(&stride[1..])),
        ("padding", ints(&padding[1..])),
        ("dilation", ints(&dilation[1..])),
    ];
    pool.push(("ceil_mode", Raw::Bool(ceil)));
    let pooled = s.op("max_pool2d", pool);
    let oh = pooled_size(h, kernel[1], stride[1], padding[1], dilation[1], ceil);
    let ow = pooled_size(w, kernel[2], stride[2], padding[2], dilation[2], ceil);
    let mut shape = m.shape[..r - 3].to_vec();
    shape.extend([out, oh, ow]);
    Ok(Some(vec![s.reshape(&pooled, &shape)]))
}

/// ATen's `pooling_output_shape` for one dim.
fn pooled_size(size: i64, k: i64, stride: i64, pad: i64, dilation: i64, ceil: bool) -> i64 {
    let span = size + 2 * pad - dilation * (k - 1) - 1;
    let mut out = (span + if ceil { stride - 1 } else { 0 }).div_euclid(stride) + 1;
    if ceil && (out - 1) * stride >= size + pad {
        out -= 1;
    }
    out
}
