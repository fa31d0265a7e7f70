//! Small ops of PyTorch's functional API, each as PyTorch defines it: `outer`,
//! `isfinite`, `logaddexp`, `xlogy`, `fmin`/`fmax` (NaN ignored), `threshold`,
//! `heaviside`, `frac`, `instance_norm` (a group norm of one channel per group, or a
//! batch norm on running statistics), `logit`, `signbit`, `nanmean`, `bucketize`/
//! `searchsorted` (each value against every boundary of its row) and `meshgrid`.

use super::{ints, invalid, t, Args, Raw, SigError, Steps};

/// An expansion's outputs, `None` where the op is not one of this module's.
type Expanded = Result<Option<Vec<String>>, SigError>;

fn one(r: String) -> Expanded {
    Ok(Some(vec![r]))
}

/// `a` if `c`, else `b`.
pub(super) fn pick(s: &mut Steps<'_>, c: &str, a: Raw, b: Raw) -> String {
    s.op(
        "where",
        vec![("condition", t(c)), ("self", a), ("other", b)],
    )
}

/// Whether `x` is NaN (`x != x`).
fn nan(s: &mut Steps<'_>, x: &str) -> String {
    s.bin("ne", t(x), t(x))
}

/// A tensor argument or a number.
fn operand(args: &Args<'_>, name: &str) -> Result<Raw, SigError> {
    match args.get(name) {
        Some(r @ (Raw::Str(_) | Raw::Int(_) | Raw::Float(_) | Raw::Bool(_))) => Ok(r.clone()),
        _ => Err(invalid(format!("needs `{name}`, a tensor or a number"))),
    }
}

/// The expansion of `op`, or `None` where this module does not take it.
pub(super) fn expand(s: &mut Steps<'_>, op: &str, args: &Args<'_>) -> Expanded {
    match op {
        "outer" => {
            let (a, am) = args.tensor("self")?;
            let (b, bm) = args.tensor("vec2")?;
            if am.rank() != 1 || bm.rank() != 1 {
                return Err(invalid(format!(
                    "needs two vectors, found {:?} and {:?}",
                    am.shape, bm.shape
                )));
            }
            let col = s.op("unsqueeze", vec![("self", t(&a)), ("dim", Raw::Int(1))]);
            one(s.bin("mul", t(&col), t(&b)))
        }
        "isfinite" => {
            let (x, m) = args.tensor("self")?;
            if !m.dtype.is_float() {
                return one(s.bin("eq", t(&x), t(&x)));
            }
            let a = s.un("abs", &x);
            let finite = s.bin("ne", t(&a), Raw::Float(f64::INFINITY));
            let number = s.bin("eq", t(&x), t(&x));
            one(s.bin("bitwise_and", t(&finite), t(&number)))
        }
        "logaddexp" => {
            // max + log1p(exp(-|a - b|)); equal infinities are themselves (the
            // difference would be NaN).
            let (a, am) = args.tensor("self")?;
            let (b, _) = args.tensor("other")?;
            if !am.dtype.is_float() {
                return Err(invalid(format!(
                    "needs floating-point tensors, found {}",
                    am.dtype
                )));
            }
            let hi = s.bin("maximum", t(&a), t(&b));
            let diff = s.bin("sub", t(&a), t(&b));
            let gap = s.un("abs", &diff);
            let neg = s.un("neg", &gap);
            let e = s.un("exp", &neg);
            let l = s.un("log1p", &e);
            let sum = s.bin("add", t(&hi), t(&l));
            let same = s.bin("eq", t(&a), t(&b));
            let mag = s.un("abs", &a);
            let inf = s.bin("eq", t(&mag), Raw::Float(f64::INFINITY));
            let both = s.bin("bitwise_and", t(&same), t(&inf));
            one(pick(s, &both, t(&a), t(&sum)))
        }
        "xlogy" => {
            // x * log(y), 0 where x is 0, NaN where y is.
            let x = operand(args, "self")?;
            let y = operand(args, "other")?;
            let (Raw::Str(xs), Raw::Str(ys)) = (&x, &y) else {
                return xlogy_scalar(s, x, y);
            };
            let l = s.un("log", ys);
            let prod = s.bin("mul", t(xs), t(&l));
            let zero = s.bin("eq", t(xs), Raw::Int(0));
            let r = pick(s, &zero, Raw::Float(0.0), t(&prod));
            let yn = nan(s, ys);
            one(pick(s, &yn, t(ys), t(&r)))
        }
        "fmin" | "fmax" => {
            let (a, _) = args.tensor("self")?;
            let (b, _) = args.tensor("other")?;
            let m = s.bin(
                if op == "fmin" { "minimum" } else { "maximum" },
                t(&a),
                t(&b),
            );
            let an = nan(s, &a);
            let r = pick(s, &an, t(&b), t(&m));
            let bn = nan(s, &b);
            one(pick(s, &bn, t(&a), t(&r)))
        }
        "threshold" => {
            let (x, _) = args.tensor("self")?;
            let th = operand(args, "threshold")?;
            let value = operand(args, "value")?;
            // PyTorch's test is `x <= threshold`: NaN is kept.
            let low = s.bin("le", t(&x), th);
            one(pick(s, &low, value, t(&x)))
        }
        "heaviside" => {
            // 0 below zero, `values` at zero, 1 above (NaN is not above).
            let (x, m) = args.tensor("self")?;
            let (v, vm) = args.tensor("values")?;
            if vm.dtype != m.dtype {
                return Err(invalid(format!(
                    "self ({}) and values ({}) must have one dtype",
                    m.dtype, vm.dtype
                )));
            }
            let above = s.bin("gt", t(&x), Raw::Int(0));
            let step = s.op(
                "_to_copy",
                vec![
                    ("self", t(&above)),
                    ("dtype", Raw::Str(m.dtype.name().into())),
                ],
            );
            let at = s.bin("eq", t(&x), Raw::Int(0));
            one(pick(s, &at, t(&v), t(&step)))
        }
        "frac" => {
            let (x, m) = args.tensor("self")?;
            if !m.dtype.is_float() {
                return Err(invalid(format!(
                    "needs a floating-point tensor, found {}",
                    m.dtype
                )));
            }
            let whole = s.un("trunc", &x);
            one(s.bin("sub", t(&x), t(&whole)))
        }
        "instance_norm" => instance_norm(s, args),
        "meshgrid" => meshgrid(s, args),
        "bucketize" | "searchsorted" => bucketize(s, op, args),
        _ => logs_and_signs(s, op, args),
    }
}

/// `meshgrid(tensors, indexing)`: each of the N 0-d or 1-d tensors expanded over the
/// grid of all their lengths, along its own dim; with `indexing="xy"` the grid's first
/// two dims are swapped (Cartesian order, NumPy's default; PyTorch's is "ij").
fn meshgrid(s: &mut Steps<'_>, args: &Args<'_>) -> Expanded {
    let xs = args.tensors("tensors")?;
    let xy = match args.get("indexing") {
        None | Some(Raw::None) => false,
        Some(Raw::Str(m)) if m == "ij" => false,
        Some(Raw::Str(m)) if m == "xy" => true,
        Some(r) => {
            return Err(invalid(format!(
                "`indexing` must be \"ij\" or \"xy\", found {r:?}"
            )))
        }
    };
    let Some((_, first)) = xs.first() else {
        return Err(invalid("meshgrid of no tensors".into()));
    };
    for (x, m) in &xs {
        if m.rank() > 1 {
            return Err(invalid(format!(
                "meshgrid takes 0-d or 1-d tensors, and `{x}` has shape {:?}",
                m.shape
            )));
        }
        if m.dtype != first.dtype {
            return Err(invalid(format!(
                "meshgrid takes tensors of one dtype, found {} and {}",
                first.dtype, m.dtype
            )));
        }
    }
    // The grid dim of tensor i.
    let place = |i: usize| {
        if xy && xs.len() > 1 && i < 2 {
            1 - i
        } else {
            i
        }
    };
    let mut grid = vec![0; xs.len()];
    for (i, (_, m)) in xs.iter().enumerate() {
        grid[place(i)] = m.shape.first().copied().unwrap_or(1);
    }
    let grids = xs
        .iter()
        .enumerate()
        .map(|(i, (x, _))| {
            let mut shape = vec![1; xs.len()];
            shape[place(i)] = grid[place(i)];
            let line = s.reshape(x, &shape);
            s.op("expand", vec![("self", t(&line)), ("size", ints(&grid))])
        })
        .collect();
    Ok(Some(grids))
}

/// `logit`, `signbit` and `nanmean`.
fn logs_and_signs(s: &mut Steps<'_>, op: &str, args: &Args<'_>) -> Expanded {
    match op {
        "logit" => {
            // log(z / (1 - z)), z clamped to [eps, 1 - eps] where eps is given.
            let (x, _) = args.tensor("self")?;
            let z = match args.get("eps") {
                Some(Raw::Float(e)) => s.op(
                    "clamp",
                    vec![
                        ("self", t(&x)),
                        ("min", Raw::Float(*e)),
                        ("max", Raw::Float(1.0 - e)),
                    ],
                ),
                _ => x,
            };
            let negated = s.un("neg", &z);
            let rest = s.bin("add", t(&negated), Raw::Float(1.0));
            let odds = s.bin("div", t(&z), t(&rest));
            one(s.un("log", &odds))
        }
        "signbit" => {
            // The sign bit: set for -0.0 (and a NaN that carries it), clear for 0.0.
            let (x, m) = args.tensor("self")?;
            if m.dtype == crate::graph::DType::Bool {
                return one(s.bin("ne", t(&x), t(&x)));
            }
            if !m.dtype.is_float() {
                return one(s.bin("lt", t(&x), Raw::Int(0)));
            }
            let ones = s.op("ones_like", vec![("self", t(&x))]);
            let signed = s.bin("copysign", t(&ones), t(&x));
            one(s.bin("lt", t(&signed), Raw::Int(0)))
        }
        "nanmean" => {
            // The mean of the numbers, NaN left out (NaN where there are none).
            let (x, m) = args.tensor("self")?;
            if !m.dtype.is_float() {
                return Err(invalid(format!(
                    "needs a floating-point tensor, found {}",
                    m.dtype
                )));
            }
            let isnan = nan(s, &x);
            let zeroed = pick(s, &isnan, Raw::Float(0.0), t(&x));
            let number = s.op("logical_not", vec![("self", t(&isnan))]);
            let count = s.op(
                "_to_copy",
                vec![
                    ("self", t(&number)),
                    ("dtype", Raw::Str(m.dtype.name().into())),
                ],
            );
            let keep = args.get("keepdim").cloned().unwrap_or(Raw::Bool(false));
            let mut total = vec![("self", t(&zeroed)), ("keepdim", keep.clone())];
            let mut n = vec![("self", t(&count)), ("keepdim", keep)];
            if let Some(d @ (Raw::Int(_) | Raw::List(_))) = args.get("dim") {
                total.push(("dim", d.clone()));
                n.push(("dim", d.clone()));
            }
            let (total, n) = (s.op("sum", total), s.op("sum", n));
            one(s.bin("div", t(&total), t(&n)))
        }
        _ => Ok(None),
    }
}

/// `xlogy` with a number on one side.
fn xlogy_scalar(s: &mut Steps<'_>, x: Raw, y: Raw) -> Expanded {
    match (x, y) {
        (Raw::Str(xs), y) => {
            let yv = match y {
                Raw::Int(i) => i as f64,
                Raw::Float(f) => f,
                _ => return Err(invalid("`other` must be a tensor or a number".into())),
            };
            if yv.is_nan() {
                // NaN everywhere, x = 0 included.
                return one(s.bin("mul", t(&xs), Raw::Float(f64::NAN)));
            }
            let prod = s.bin("mul", t(&xs), Raw::Float(yv.ln()));
            let zero = s.bin("eq", t(&xs), Raw::Int(0));
            one(pick(s, &zero, Raw::Float(0.0), t(&prod)))
        }
        (x, Raw::Str(ys)) => {
            let xv = match x {
                Raw::Int(i) => i as f64,
                Raw::Float(f) => f,
                _ => return Err(invalid("`self` must be a tensor or a number".into())),
            };
            let l = s.un("log", &ys);
            let prod = s.bin("mul", t(&l), Raw::Float(xv));
            let r = if xv == 0.0 {
                s.op("zeros_like", vec![("self", t(&l))])
            } else {
                prod
            };
            let yn = nan(s, &ys);
            one(pick(s, &yn, t(&ys), t(&r)))
        }
        _ => Err(invalid("needs a tensor on one side".into())),
    }
}

/// `instance_norm`: each (sample, channel) normalised over its spatial dims (a group norm
/// of one channel per group), or, with `use_input_stats` false, by the running statistics
/// (a batch norm in inference).
fn instance_norm(s: &mut Steps<'_>, args: &Args<'_>) -> Expanded {
    let (x, m) = args.tensor("input")?;
    if m.rank() < 2 {
        return Err(invalid(format!(
            "needs at least 2 dims, found {:?}",
            m.shape
        )));
    }
    let eps = match args.get("eps") {
        Some(Raw::Float(e)) => *e,
        Some(Raw::Int(e)) => *e as f64,
        _ => 1e-5,
    };
    let mut attrs = vec![("input", t(&x))];
    for k in ["weight", "bias"] {
        if let Some(w @ Raw::Str(_)) = args.get(k) {
            attrs.push((k, w.clone()));
        }
    }
    attrs.push(("eps", Raw::Float(eps)));
    if matches!(args.get("use_input_stats"), Some(Raw::Bool(false))) {
        for k in ["running_mean", "running_var"] {
            match args.get(k) {
                Some(r @ Raw::Str(_)) => attrs.push((k, r.clone())),
                _ => {
                    return Err(invalid(format!(
                        "use_input_stats is false, so `{k}` is needed"
                    )))
                }
            }
        }
        attrs.push(("training", Raw::Bool(false)));
        return one(s.op("batch_norm", attrs));
    }
    attrs.push(("num_groups", Raw::Int(m.shape[1])));
    one(s.op("group_norm", attrs))
}

/// `bucketize(x, boundaries, right)` and `searchsorted(sorted_sequence, x, right|side)`:
/// for each x the number of boundaries below it (at most it, with `right`), counted
/// against every boundary of its row; a row of boundaries is at most [`MAX_BOUNDARIES`]
/// long.
fn bucketize(s: &mut Steps<'_>, op: &str, args: &Args<'_>) -> Expanded {
    let (x, seq) = if op == "bucketize" {
        ("self", "boundaries")
    } else {
        ("self", "sorted_sequence")
    };
    let (x, xm) = args.tensor(x)?;
    let (b, bm) = args.tensor(seq)?;
    if args.get("sorter").is_some_and(|r| !matches!(r, Raw::None)) {
        return Err(invalid("a `sorter`: sort the sequence first".into()));
    }
    let n = bm.shape.last().copied().unwrap_or(1);
    let total = xm.shape.iter().product::<i64>().saturating_mul(n);
    if n > MAX_BOUNDARIES || total > 1 << 26 {
        return Err(invalid(format!("{n} boundaries for {} values: Kiln compares every pair, at most {MAX_BOUNDARIES} boundaries", xm.shape.iter().product::<i64>())));
    }
    if bm.rank() > 1 && bm.shape[..bm.rank() - 1] != xm.shape[..xm.rank().saturating_sub(1)] {
        return Err(invalid(format!(
            "a sequence of {:?} for values of {:?}: rows of the sequence pair with rows of the values",
            bm.shape, xm.shape
        )));
    }
    let right = matches!(args.get("right"), Some(Raw::Bool(true)))
        || matches!(args.get("side"), Some(Raw::Str(side)) if side == "right");
    let v = s.op("unsqueeze", vec![("self", t(&x)), ("dim", Raw::Int(-1))]); // [.., m, 1]
    let bb = if bm.rank() > 1 {
        s.op("unsqueeze", vec![("self", t(&b)), ("dim", Raw::Int(-2))]) // [.., 1, n]
    } else {
        b
    };
    // A boundary is below x unless x is at most it (below it, with `right`): as PyTorch's
    // binary search compares, a NaN x is above every boundary and a NaN boundary below
    // every x.
    let above = s.bin(if right { "lt" } else { "le" }, t(&v), t(&bb));
    let below = s.op("logical_not", vec![("self", t(&above))]);
    let dtype = if matches!(args.get("out_int32"), Some(Raw::Bool(true))) {
        "int32"
    } else {
        "int64"
    };
    let counts = s.op(
        "_to_copy",
        vec![("self", t(&below)), ("dtype", Raw::Str(dtype.into()))],
    );
    one(s.op(
        "sum",
        vec![
            ("self", t(&counts)),
            ("dim", super::ints(&[-1])),
            ("keepdim", Raw::Bool(false)),
            ("dtype", Raw::Str(dtype.into())),
        ],
    ))
}

/// The longest row of boundaries `bucketize` and `searchsorted` take.
const MAX_BOUNDARIES: i64 = 1 << 16;
