//! `max_pool3d` (MViT's pooled attention, video models) as PyTorch computes it: the
//! maximum over the kernel's depth taps of depth-strided slices of the input (padded
//! with `-inf`), then the 2-D max pool of those over height and width. Both maxima
//! propagate NaN, as PyTorch's pool does. Only depth taps that reach the input are
//! read (the others see padding alone: [`Taps`]).

use super::{int_list, ints, invalid, t, Args, Raw, SigError, Steps};
use crate::graph::infer::model::{pool_out, Taps};

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
        if padding[i].saturating_mul(2)
            > dilation[i].saturating_mul(kernel[i] - 1).saturating_add(1)
        {
            return Err(invalid(format!(
                "padding {padding:?} must be at most half the dilated kernel {kernel:?}"
            )));
        }
    }
    let (depth, h, w) = (m.shape[r - 3], m.shape[r - 2], m.shape[r - 1]);
    let size = |i: usize, n: i64| pool_out(n, kernel[i], stride[i], padding[i], dilation[i], ceil);
    let (out, oh, ow) = (size(0, depth), size(1, h), size(2, w));
    if out < 1 || oh < 1 || ow < 1 {
        return Err(invalid(format!(
            "an input of {:?} is smaller than the kernel {kernel:?} with dilation {dilation:?}",
            &m.shape[r - 3..]
        )));
    }
    // The depth padded with -inf (or cut) to exactly what the taps that reach it read.
    let taps =
        Taps::of(kernel[0], stride[0], dilation[0], padding[0], depth, out).map_err(invalid)?;
    let mut pad = vec![0i64; 4];
    pad.extend([taps.before, taps.after]);
    let padded = s.op(
        "constant_pad_nd",
        vec![
            ("self", t(&x)),
            ("pad", ints(&pad)),
            ("value", Raw::Float(f64::NEG_INFINITY)),
        ],
    );
    let mut best: Option<String> = None;
    for &start in &taps.starts {
        let slice = s.op(
            "slice",
            vec![
                ("self", t(&padded)),
                ("dim", Raw::Int(r as i64 - 3)),
                ("start", Raw::Int(start)),
                ("end", Raw::Int(start + (out - 1) * stride[0] + 1)),
                ("step", Raw::Int(stride[0])),
            ],
        );
        best = Some(match best {
            None => slice,
            Some(b) => s.bin("maximum", t(&b), t(&slice)),
        });
    }
    let deep = best.unwrap_or(padded);
    // Height and width: one 2-D pool of every (leading, depth) plane.
    let planes: i64 = m.shape[..r - 3].iter().product::<i64>() * out;
    let flat = s.reshape(&deep, &[1, planes, h, w]);
    let pool = vec![
        ("self", t(&flat)),
        ("kernel_size", ints(&kernel[1..])),
        ("stride", ints(&stride[1..])),
        ("padding", ints(&padding[1..])),
        ("dilation", ints(&dilation[1..])),
        ("ceil_mode", Raw::Bool(ceil)),
    ];
    let pooled = s.op("max_pool2d", pool);
    let mut shape = m.shape[..r - 3].to_vec();
    shape.extend([out, oh, ow]);
    Ok(Some(vec![s.reshape(&pooled, &shape)]))
}
