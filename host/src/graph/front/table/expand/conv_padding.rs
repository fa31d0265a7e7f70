//! `conv1d/2d/3d` with their padding named by a string (`conv2d.padding`, what
//! `nn.Conv2d(padding="same")` exports as), as PyTorch computes them: `"valid"` is no
//! padding; `"same"` (stride 1 only) pads each spatial dim by `dilation * (kernel - 1)`
//! in all, half on each side and the odd one, where there is one, at the end. Only the
//! weight's sizes are read, so the input's may be symbolic.

use super::{int_list, ints, invalid, t, Args, Raw, SigError, Steps};

/// The expansion; `None` where the padding is numbers (the op binds as it is).
pub(super) fn expand(
    s: &mut Steps<'_>,
    op: &str,
    args: &Args<'_>,
) -> Result<Option<Vec<String>>, SigError> {
    let Some(Raw::Str(mode)) = args.get("padding") else {
        return Ok(None);
    };
    let n = match op {
        "conv1d" => 1,
        "conv3d" => 3,
        _ => 2,
    };
    let weight = match args.get("weight") {
        Some(Raw::Str(w)) => args.meta(w)?,
        _ => return Err(invalid("needs the tensor `weight`".into())),
    };
    if weight.rank() != n + 2 {
        return Err(invalid(format!(
            "{op} needs a weight of {} dims, found {:?}",
            n + 2,
            weight.shape
        )));
    }
    let per_dim = |name: &str| -> Result<Vec<i64>, SigError> {
        let v = int_list(args.get(name)).unwrap_or_else(|| vec![1]);
        match v.len() {
            1 => Ok(vec![v[0]; n]),
            k if k == n => Ok(v),
            k => Err(invalid(format!(
                "`{name}` has {k} values for {n} spatial dims"
            ))),
        }
    };
    let stride = per_dim("stride")?;
    let dilation = per_dim("dilation")?;
    let (padding, extra) = match mode.as_str() {
        "valid" => (vec![0; n], vec![0; n]),
        "same" => {
            if stride.iter().any(|&st| st != 1) {
                return Err(invalid(format!(
                    "padding='same' with stride {stride:?}: PyTorch takes it for stride 1 only"
                )));
            }
            let total: Vec<i64> = (0..n)
                .map(|i| dilation[i] * (weight.shape[2 + i] - 1))
                .collect();
            (
                total.iter().map(|p| p / 2).collect(),
                total.iter().map(|p| p % 2).collect(),
            )
        }
        other => {
            return Err(invalid(format!(
                "padding {other:?}: PyTorch names \"same\" or \"valid\", or takes numbers"
            )))
        }
    };
    let Some(Raw::Str(x)) = args.get("input") else {
        return Err(invalid("needs the tensor `input`".into()));
    };
    let mut input = x.clone();
    if extra.iter().any(|&e| e != 0) {
        // The odd one at the end of each dim, as PyTorch pads it (the pad list names
        // the last dim first).
        let pad: Vec<i64> = extra.iter().rev().flat_map(|&e| [0, e]).collect();
        input = s.op(
            "constant_pad_nd",
            vec![("self", t(&input)), ("pad", ints(&pad))],
        );
    }
    let mut conv = vec![
        ("input", t(&input)),
        ("weight", args.get("weight").cloned().unwrap_or(Raw::None)),
        ("stride", ints(&stride)),
        ("padding", ints(&padding)),
        ("dilation", ints(&dilation)),
        ("groups", Raw::Int(args.int_or("groups", 1)?)),
    ];
    if let Some(b @ Raw::Str(_)) = args.get("bias") {
        conv.push(("bias", b.clone()));
    }
    Ok(Some(
        vec![s.op(["conv1d", "conv2d", "conv3d"][n - 1], conv)],
    ))
}
