//! The activations, index reductions and small tensor ops that models outside the first
//! families bring in, each as PyTorch defines it: `triu`/`tril`, `argmax`/`argmin` and
//! `max`/`min` over a dim (values and indices; the first index of the extreme, NaN
//! counting as one), `logsumexp`, `_safe_softmax` (zeros for rows of all -inf), `flip`, `leaky_relu`, `elu`/`celu`/`selu`, `mish`,
//! `glu`, `prelu`, `log_sigmoid`, `softsign`, `hardshrink`, the logical ops, `isnan`/
//! `isinf`/`nan_to_num`, `std`, `var_mean`/`std_mean`, `addcmul`/`addcdiv`, `lerp`,
//! `one_hot`, `tile`, `exp2`, `clamp` with a tensor bound, `pixel_shuffle`/
//! `pixel_unshuffle`, `unfold` (sliding windows), `max_pool1d`, `max_pool3d` (`max_pool3d.rs`), `index_put`
//! (`x[mask] = v`, `x[idx] = v`, `x[idx] += v`), `index_copy` (an `index_put` along one
//! dim) and `unbind` (a select per index).

use super::{int_list, ints, invalid, t, wrap, Args, Raw, SigError, Steps};
use crate::graph::ir::FixedMeta;
use crate::graph::DType;

/// The largest finite value of a float dtype (`nan_to_num`'s default for +inf).
fn finite_max(d: DType) -> f64 {
    match d {
        DType::Float16 => 65504.0,
        DType::BFloat16 => 3.389_531_389_251_535_5e38,
        DType::Float64 => f64::MAX,
        _ => f32::MAX as f64,
    }
}

/// The most pieces an `unbind` is spelled out into (one node each).
const MAX_UNBIND: i64 = 1 << 16;

/// An expansion's outputs, `None` where the op is not one of this module's.
type Expanded = Result<Option<Vec<String>>, SigError>;

fn one(r: String) -> Expanded {
    Ok(Some(vec![r]))
}

fn gt0(s: &mut Steps<'_>, x: &str) -> String {
    s.bin("gt", t(x), Raw::Int(0))
}

fn select(s: &mut Steps<'_>, c: &str, a: Raw, b: Raw) -> String {
    s.op(
        "where",
        vec![("condition", t(c)), ("self", a), ("other", b)],
    )
}

/// The expansion of `op`, or `None` where this module does not take it.
pub(super) fn expand(s: &mut Steps<'_>, op: &str, a: &Args<'_>) -> Expanded {
    let families = [reductions, activations, elementwise, shapes, windows];
    for family in families {
        if let Some(r) = family(s, op, a)? {
            return Ok(Some(r));
        }
    }
    Ok(None)
}

/// Index reductions, `logsumexp` and the statistics of several outputs.
fn reductions(s: &mut Steps<'_>, op: &str, args: &Args<'_>) -> Expanded {
    match op {
        "argmax" | "argmin" => {
            let (x, m) = args.tensor("self")?;
            let keepdim = args.flag("keepdim");
            one(
                arg_extreme(s, &x, &m, args.int("dim"), keepdim, op == "argmax")
                    .map_err(invalid)?,
            )
        }
        "max" | "min" => {
            let (x, m) = args.tensor("self")?;
            let dim = args
                .int("dim")
                .ok_or_else(|| invalid("`dim` must be an integer".into()))?;
            let d = wrap(dim, m.rank()).map_err(invalid)?;
            let values = s.reduce(
                if op == "max" { "amax" } else { "amin" },
                &x,
                Some(&[d as i64]),
                args.flag("keepdim"),
            );
            let indices = arg_extreme(s, &x, &m, Some(dim), args.flag("keepdim"), op == "max")
                .map_err(invalid)?;
            Ok(Some(vec![values, indices]))
        }
        "clamp" => {
            // `clamp.Tensor` (T5 clamps its fp16 activations to a bound it computes):
            // a tensor bound is the elementwise maximum (`min`) or minimum (`max`),
            // which broadcast and promote as ATen's clamp does, propagate NaN from the
            // operand and either bound, and give `max` where `min > max`; a number
            // bound stays a clamp.
            let (mut y, _) = args.tensor("self")?;
            for (bound, op) in [("min", "maximum"), ("max", "minimum")] {
                y = match args.get(bound) {
                    None | Some(Raw::None) => y,
                    Some(Raw::Str(_)) => {
                        let (b, _) = args.tensor(bound)?;
                        s.bin(op, t(&y), t(&b))
                    }
                    Some(number) => s.op("clamp", vec![("self", t(&y)), (bound, number.clone())]),
                };
            }
            one(y)
        }
        "logsumexp" => {
            let (x, m) = args.tensor("self")?;
            let dims = int_list(args.get("dim")).unwrap_or_default();
            let x = if m.dtype.is_float() {
                x
            } else {
                s.op(
                    "_to_copy",
                    vec![("self", t(&x)), ("dtype", Raw::Str("float32".into()))],
                )
            };
            let dims = (!dims.is_empty()).then_some(dims);
            // The maximum shifted out (0 where it is infinite, as PyTorch does).
            let mx = s.reduce("amax", &x, dims.as_deref(), true);
            let a = s.un("abs", &mx);
            let inf = s.bin("eq", t(&a), Raw::Float(f64::INFINITY));
            let shift = select(s, &inf, Raw::Float(0.0), t(&mx));
            let d = s.bin("sub", t(&x), t(&shift));
            let e = s.un("exp", &d);
            let sum = s.reduce("sum", &e, dims.as_deref(), args.flag("keepdim"));
            let l = s.un("log", &sum);
            let shift = if args.flag("keepdim") {
                shift
            } else {
                let kept: Vec<i64> = match &dims {
                    None => vec![],
                    Some(dims) => {
                        let gone = dims
                            .iter()
                            .map(|&d| wrap(d, m.rank()))
                            .collect::<Result<Vec<_>, _>>()
                            .map_err(invalid)?;
                        (0..m.rank())
                            .filter(|i| !gone.contains(i))
                            .map(|i| m.shape[i])
                            .collect()
                    }
                };
                s.reshape(&shift, &kept)
            };
            one(s.bin("add", t(&l), t(&shift)))
        }
        "_safe_softmax" => {
            // softmax, with the rows whose inputs are all -inf zeros (attention's rows
            // that mask out every key) rather than 0 / 0.
            let (x, _) = args.tensor("self")?;
            let dim = args.int_or("dim", -1)?;
            let mut attrs = vec![("self", t(&x)), ("dim", Raw::Int(dim))];
            if let Some(d) = args.get("dtype") {
                attrs.push(("dtype", d.clone()));
            }
            let soft = s.op("softmax", attrs);
            let masked = s.bin("eq", t(&x), Raw::Float(f64::NEG_INFINITY));
            let rows = s.op(
                "all",
                vec![
                    ("self", t(&masked)),
                    ("dim", ints(&[dim])),
                    ("keepdim", Raw::Bool(true)),
                ],
            );
            let zeros = s.op("zeros_like", vec![("self", t(&soft))]);
            one(select(s, &rows, t(&zeros), t(&soft)))
        }
        "std" | "var_mean" | "std_mean" => {
            let (x, _) = args.tensor("self")?;
            let mut var_attrs: Vec<(&str, Raw)> = vec![("self", t(&x))];
            for k in ["dim", "correction", "keepdim", "unbiased"] {
                if let Some(v) = args.get(k) {
                    var_attrs.push((k, v.clone()));
                }
            }
            let v = s.op("var", var_attrs);
            let spread = if op == "var_mean" {
                v
            } else {
                s.un("sqrt", &v)
            };
            if op == "std" {
                return one(spread);
            }
            let dims = int_list(args.get("dim")).filter(|d| !d.is_empty());
            let mean = s.reduce("mean", &x, dims.as_deref(), args.flag("keepdim"));
            Ok(Some(vec![spread, mean]))
        }
        _ => Ok(None),
    }
}

/// The activations.
fn activations(s: &mut Steps<'_>, op: &str, args: &Args<'_>) -> Expanded {
    match op {
        "leaky_relu" => {
            let (x, _) = args.tensor("self")?;
            let slope = args.num("negative_slope", 0.01);
            let c = gt0(s, &x);
            let neg = s.bin("mul", t(&x), Raw::Float(slope));
            one(select(s, &c, t(&x), t(&neg)))
        }
        "elu" | "celu" | "selu" => {
            let (x, _) = args.tensor("self")?;
            let (alpha, scale, input_scale) = match op {
                "elu" => (
                    args.num("alpha", 1.0),
                    args.num("scale", 1.0),
                    args.num("input_scale", 1.0),
                ),
                "celu" => {
                    let a = args.num("alpha", 1.0);
                    (a, 1.0, 1.0 / a)
                }
                _ => (1.673_263_242_354_377_3, 1.050_700_987_355_480_5, 1.0),
            };
            let c = gt0(s, &x);
            let pos = s.bin("mul", t(&x), Raw::Float(scale));
            let xi = s.bin("mul", t(&x), Raw::Float(input_scale));
            let em = s.un("expm1", &xi);
            let neg = s.bin("mul", t(&em), Raw::Float(alpha * scale));
            one(select(s, &c, t(&pos), t(&neg)))
        }
        "mish" => {
            let (x, _) = args.tensor("self")?;
            let e = s.un("exp", &x);
            let l = s.un("log1p", &e);
            let big = s.bin("gt", t(&x), Raw::Float(20.0));
            let sp = select(s, &big, t(&x), t(&l));
            let th = s.un("tanh", &sp);
            one(s.bin("mul", t(&x), t(&th)))
        }
        "glu" => {
            let (x, m) = args.tensor("self")?;
            let d = wrap(args.int("dim").unwrap_or(-1), m.rank()).map_err(invalid)?;
            let n = *m
                .shape
                .get(d)
                .ok_or_else(|| invalid("glu of a 0-d tensor".into()))?;
            if n % 2 != 0 {
                return Err(invalid(format!("glu halves dim {d}, of odd size {n}")));
            }
            let half = |s: &mut Steps<'_>, a: i64, b: i64| {
                s.op(
                    "slice",
                    vec![
                        ("self", t(&x)),
                        ("dim", Raw::Int(d as i64)),
                        ("start", Raw::Int(a)),
                        ("end", Raw::Int(b)),
                    ],
                )
            };
            let a = half(s, 0, n / 2);
            let b = half(s, n / 2, n);
            let g = s.un("sigmoid", &b);
            one(s.bin("mul", t(&a), t(&g)))
        }
        "prelu" | "_prelu_kernel" => {
            let (x, m) = args.tensor("self")?;
            let (w, wm) = args.tensor("weight")?;
            // One slope per channel (dim 1), broadcast over the dims after it.
            let w = if wm.shape.iter().product::<i64>() > 1 && m.rank() > 2 {
                let mut shape = vec![wm.shape.iter().product::<i64>()];
                shape.extend(std::iter::repeat_n(1, m.rank() - 2));
                s.reshape(&w, &shape)
            } else {
                w
            };
            let c = gt0(s, &x);
            let neg = s.bin("mul", t(&w), t(&x));
            one(select(s, &c, t(&x), t(&neg)))
        }
        "log_sigmoid" | "log_sigmoid_forward" => {
            // min(x, 0) - log1p(exp(-|x|)): no overflow either way.
            let (x, m) = args.tensor("self")?;
            let a = s.un("abs", &x);
            let na = s.un("neg", &a);
            let e = s.un("exp", &na);
            let l = s.un("log1p", &e);
            let lo = s.op("clamp", vec![("self", t(&x)), ("max", Raw::Float(0.0))]);
            let y = s.bin("sub", t(&lo), t(&l));
            if op == "log_sigmoid" {
                return one(y);
            }
            // The second output is a buffer for the backward pass, which PyTorch's
            // decomposition leaves empty off CUDA: zeros of shape [0].
            let z = s.op(
                "zeros",
                vec![
                    ("size", ints(&[0])),
                    ("dtype", Raw::Str(m.dtype.name().into())),
                ],
            );
            Ok(Some(vec![y, z]))
        }
        "softsign" => {
            let (x, _) = args.tensor("self")?;
            let a = s.un("abs", &x);
            let d = s.bin("add", t(&a), Raw::Float(1.0));
            one(s.bin("div", t(&x), t(&d)))
        }
        "hardshrink" => {
            let (x, _) = args.tensor("self")?;
            let a = s.un("abs", &x);
            let c = s.bin("gt", t(&a), Raw::Float(args.num("lambd", 0.5)));
            let zeros = s.op("zeros_like", vec![("self", t(&x))]);
            one(select(s, &c, t(&x), t(&zeros)))
        }
        _ => Ok(None),
    }
}

/// Logical and numeric elementwise ops.
fn elementwise(s: &mut Steps<'_>, op: &str, args: &Args<'_>) -> Expanded {
    match op {
        "logical_and" | "logical_or" | "logical_xor" => {
            let a = s.bin("ne", args.operand("self")?, Raw::Int(0));
            let b = s.bin("ne", args.operand("other")?, Raw::Int(0));
            let bit = match op {
                "logical_and" => "bitwise_and",
                "logical_or" => "bitwise_or",
                _ => "bitwise_xor",
            };
            one(s.bin(bit, t(&a), t(&b)))
        }
        "isnan" => {
            let (x, _) = args.tensor("self")?;
            one(s.bin("ne", t(&x), t(&x)))
        }
        "isinf" => {
            let (x, _) = args.tensor("self")?;
            let a = s.un("abs", &x);
            one(s.bin("eq", t(&a), Raw::Float(f64::INFINITY)))
        }
        "nan_to_num" => {
            let (x, m) = args.tensor("self")?;
            if !m.dtype.is_float() {
                return one(x);
            }
            let big = finite_max(m.dtype);
            let (nan, pos, neg) = (
                args.num("nan", 0.0),
                args.num("posinf", big),
                args.num("neginf", -big),
            );
            let isnan = s.bin("ne", t(&x), t(&x));
            let ispos = s.bin("eq", t(&x), Raw::Float(f64::INFINITY));
            let isneg = s.bin("eq", t(&x), Raw::Float(f64::NEG_INFINITY));
            let a = select(s, &isneg, Raw::Float(neg), t(&x));
            let b = select(s, &ispos, Raw::Float(pos), t(&a));
            one(select(s, &isnan, Raw::Float(nan), t(&b)))
        }
        "addcmul" | "addcdiv" => {
            let p = s.bin(
                if op == "addcmul" { "mul" } else { "div" },
                args.operand("tensor1")?,
                args.operand("tensor2")?,
            );
            let value = args.num("value", 1.0);
            let p = if value == 1.0 {
                p
            } else {
                s.bin("mul", t(&p), Raw::Float(value))
            };
            one(s.bin("add", args.operand("self")?, t(&p)))
        }
        "lerp" => {
            let x = args.operand("self")?;
            let d = s.bin("sub", args.operand("end")?, x.clone());
            let w = s.bin("mul", args.operand("weight")?, t(&d));
            one(s.bin("add", x, t(&w)))
        }
        "exp2" => one(s.bin("pow", Raw::Float(2.0), args.operand("self")?)),
        _ => Ok(None),
    }
}

/// Masks, flips, one-hot codes, tiles and index writes.
fn shapes(s: &mut Steps<'_>, op: &str, args: &Args<'_>) -> Expanded {
    match op {
        "unbind" => unbind(s, args),
        "triu" | "tril" => {
            let (x, m) = args.tensor("self")?;
            let diagonal = args.int("diagonal").unwrap_or(0);
            let [.., rows, cols] = m.shape[..] else {
                return Err(invalid(format!(
                    "needs at least 2 dims, found {:?}",
                    m.shape
                )));
            };
            // Column index - row index against the diagonal, from two index constants.
            let r = s.konst(
                vec![rows, 1],
                DType::Int64,
                (0..rows).map(|i| i as f64).collect(),
            );
            let c = s.konst(
                vec![1, cols],
                DType::Int64,
                (0..cols).map(|i| i as f64).collect(),
            );
            let d = s.bin("sub", t(&c), t(&r));
            let keep = if op == "triu" { "ge" } else { "le" };
            let mask = s.bin(keep, t(&d), Raw::Int(diagonal));
            let zeros = s.op("zeros_like", vec![("self", t(&x))]);
            one(select(s, &mask, t(&x), t(&zeros)))
        }
        "flip" => {
            let (x, m) = args.tensor("self")?;
            let dims = int_list(args.get("dims")).unwrap_or_default();
            let mut cur = x;
            for dim in dims {
                if m.rank() == 0 {
                    // Flipping a 0-d tensor along dim 0 (or -1) leaves it as it is.
                    continue;
                }
                let d = wrap(dim, m.rank()).map_err(invalid)?;
                let n = m.shape[d];
                let idx = s.konst(
                    vec![n],
                    DType::Int64,
                    (0..n).rev().map(|i| i as f64).collect(),
                );
                let mut indices = vec![Raw::None; d];
                indices.push(t(&idx));
                cur = s.op(
                    "index",
                    vec![("self", t(&cur)), ("indices", Raw::List(indices))],
                );
            }
            one(cur)
        }
        "one_hot" => {
            let (x, _) = args.tensor("self")?;
            let n = args.int("num_classes").unwrap_or(-1);
            if n < 0 {
                return Err(invalid(
                    "num_classes -1 (the largest index plus one) depends on the data: give the number of classes".into(),
                ));
            }
            let classes = s.konst(vec![n], DType::Int64, (0..n).map(|i| i as f64).collect());
            let u = s.op("unsqueeze", vec![("self", t(&x)), ("dim", Raw::Int(-1))]);
            let e = s.bin("eq", t(&u), t(&classes));
            one(s.op(
                "_to_copy",
                vec![("self", t(&e)), ("dtype", Raw::Str("int64".into()))],
            ))
        }
        "tile" => {
            let (x, m) = args.tensor("self")?;
            let dims = int_list(args.get("dims")).unwrap_or_default();
            let mut reps = vec![1; m.rank().saturating_sub(dims.len())];
            reps.extend(dims);
            one(s.op("repeat", vec![("self", t(&x)), ("repeats", ints(&reps))]))
        }
        "index_put" => {
            let (x, m) = args.tensor("self")?;
            let (v, _) = args.tensor("values")?;
            let Some(Raw::List(list)) = args.get("indices") else {
                return Err(invalid("needs the list `indices`".into()));
            };
            let mut entries = vec![];
            for (i, r) in list.iter().enumerate() {
                if let Raw::Str(name) = r {
                    let meta = args.meta(name)?;
                    entries.push((i, name.clone(), meta));
                }
            }
            let accumulate = matches!(args.get("accumulate"), Some(Raw::Bool(true)));
            one(index_put(s, &x, &m, &v, &entries, accumulate).map_err(invalid)?)
        }
        "index_copy" => {
            // `x.index_copy(dim, index, source)`: x with its slices `index[k]` along dim
            // replaced by source's slices k. Kiln's op takes a tensor of at least one dim;
            // a 0-d one is `x[index] = source` through index_put.
            let (x, m) = args.tensor("self")?;
            if m.rank() > 0 {
                return Ok(None);
            }
            let (index, im) = args.tensor("index")?;
            let (source, sm) = args.tensor("source")?;
            let d = wrap(args.int_or("dim", 0)?, m.rank()).map_err(invalid)?;
            let k = im.shape.iter().product::<i64>();
            if im.rank() > 1 || im.dtype != DType::Int64 {
                return Err(invalid(format!(
                    "`index` must be an int64 tensor of at most 1 dim, found {}{:?}",
                    im.dtype, im.shape
                )));
            }
            let mut want = m.shape.clone();
            if let Some(w) = want.get_mut(d) {
                *w = k;
            }
            if sm.dtype != m.dtype || (m.rank() > 0 && sm.shape != want) {
                return Err(invalid(format!(
                    "`source` must be {}{want:?} (self's dtype and shape, {k} along dim {d}), found {}{:?}",
                    m.dtype, sm.dtype, sm.shape
                )));
            }
            let index = if im.rank() == 0 {
                s.reshape(&index, &[1])
            } else {
                index
            };
            let entries = [(d, index, FixedMeta::contiguous(vec![k], DType::Int64))];
            one(index_put(s, &x, &m, &source, &entries, false).map_err(invalid)?)
        }
        _ => Ok(None),
    }
}

/// `unbind(x, dim)`: a select per index of the dim.
fn unbind(s: &mut Steps<'_>, args: &Args<'_>) -> Expanded {
    let (x, m) = args.tensor("self")?;
    if m.rank() == 0 {
        return Err(invalid("unbind of a 0-d tensor".into()));
    }
    let d = wrap(args.int_or("dim", 0)?, m.rank()).map_err(invalid)?;
    if m.shape[d] > MAX_UNBIND {
        return Err(invalid(format!(
            "{} pieces along dim {d}: Kiln spells unbind out as a select per piece, and takes at most {MAX_UNBIND}",
            m.shape[d]
        )));
    }
    let pieces = (0..m.shape[d])
        .map(|i| {
            s.op(
                "select",
                vec![
                    ("self", t(&x)),
                    ("dim", Raw::Int(d as i64)),
                    ("index", Raw::Int(i)),
                ],
            )
        })
        .collect();
    Ok(Some(pieces))
}

/// Pixel shuffles, sliding windows and the 1-d and 3-d max pools.
fn windows(s: &mut Steps<'_>, op: &str, args: &Args<'_>) -> Expanded {
    match op {
        "pixel_shuffle" | "pixel_unshuffle" => {
            let (x, m) = args.tensor("self")?;
            let f = args
                .int(if op == "pixel_shuffle" {
                    "upscale_factor"
                } else {
                    "downscale_factor"
                })
                .filter(|f| *f > 0)
                .ok_or_else(|| invalid("needs a positive factor".into()))?;
            let r = m.rank();
            if r < 3 {
                return Err(invalid(format!("needs [.., C, H, W], found {:?}", m.shape)));
            }
            let lead = &m.shape[..r - 3];
            let (c, h, w) = (m.shape[r - 3], m.shape[r - 2], m.shape[r - 1]);
            let b = lead.len();
            let perm = |tail: [usize; 5]| -> Vec<usize> {
                (0..b).chain(tail.iter().map(|i| b + i)).collect()
            };
            let with = |tail: &[i64]| -> Vec<i64> { lead.iter().chain(tail).copied().collect() };
            let y = if op == "pixel_shuffle" {
                if c % (f * f) != 0 {
                    return Err(invalid(format!(
                        "{c} channels are not a multiple of {}",
                        f * f
                    )));
                }
                let c2 = c / (f * f);
                let v = s.reshape(&x, &with(&[c2, f, f, h, w]));
                let p = s.permute(&v, &perm([0, 3, 1, 4, 2]));
                s.reshape(&p, &with(&[c2, h * f, w * f]))
            } else {
                if h % f != 0 || w % f != 0 {
                    return Err(invalid(format!("{h}x{w} is not a multiple of {f}")));
                }
                let v = s.reshape(&x, &with(&[c, h / f, f, w / f, f]));
                let p = s.permute(&v, &perm([0, 2, 4, 1, 3]));
                s.reshape(&p, &with(&[c * f * f, h / f, w / f]))
            };
            one(y)
        }
        "unfold" => {
            // Tensor.unfold(dimension, size, step): windows along a dim, their elements
            // in a new last dim.
            let (x, m) = args.tensor("self")?;
            let d = wrap(args.int("dimension").unwrap_or(0), m.rank()).map_err(invalid)?;
            let (size, step) = (args.int("size").unwrap_or(0), args.int("step").unwrap_or(0));
            let n = m.shape.get(d).copied().unwrap_or(1);
            if size < 0 || step <= 0 || size > n {
                return Err(invalid(format!(
                    "windows of {size} by steps of {step} along a dim of {n}"
                )));
            }
            let windows = (n - size) / step + 1;
            let mut idx = Vec::with_capacity((windows * size) as usize);
            for w in 0..windows {
                for k in 0..size {
                    idx.push((w * step + k) as f64);
                }
            }
            let idx = s.konst(vec![windows, size], DType::Int64, idx);
            let mut indices = vec![Raw::None; d];
            indices.push(t(&idx));
            let g = s.op(
                "index",
                vec![("self", t(&x)), ("indices", Raw::List(indices))],
            );
            // [.., windows, size, ..] -> [.., windows, .., size]
            let r = m.rank() + 1;
            let perm: Vec<usize> = (0..r).filter(|&i| i != d + 1).chain([d + 1]).collect();
            one(s.permute(&g, &perm))
        }
        "max_pool3d" => super::max_pool3d::expand(s, args),
        "max_pool1d" => {
            let (x, _) = args.tensor("self")?;
            let pair = |name: &str, unit: i64| -> Raw {
                let v = int_list(args.get(name)).unwrap_or_default();
                ints(&[unit, v.first().copied().unwrap_or(unit)])
            };
            let kernel = pair("kernel_size", 1);
            let stride = match int_list(args.get("stride")) {
                Some(v) if !v.is_empty() => pair("stride", 1),
                _ => kernel.clone(),
            };
            let u = s.op("unsqueeze", vec![("self", t(&x)), ("dim", Raw::Int(-2))]);
            let mut pool = vec![
                ("self", t(&u)),
                ("kernel_size", kernel),
                ("stride", stride),
                ("padding", pair("padding", 0)),
                ("dilation", pair("dilation", 1)),
            ];
            if let Some(c) = args.get("ceil_mode") {
                pool.push(("ceil_mode", c.clone()));
            }
            let p = s.op("max_pool2d", pool);
            one(s.op("squeeze", vec![("self", t(&p)), ("dim", ints(&[-2]))]))
        }
        _ => Ok(None),
    }
}

/// The most elements an accumulating [`index_put`]'s one-hot expansion compares and
/// adds (in reduction kernels, without a buffer of them).
const INDEX_PUT_ELEMENTS: i64 = 1 << 30;

/// `index_put(x, indices, v, accumulate)` for the static cases: one bool mask over
/// consecutive dims with a one-element value (`x[mask] = v`: a where), and integer
/// index tensors over consecutive dims, broadcast together (`x[i, j] = v`, `+=` with
/// accumulate). Without accumulate the indexed slices are scattered (`index_copy` along
/// the indexed dims flattened into one, negative indices counted from the end), so a
/// mixture of experts' inverse permutation costs one write per element; which of several
/// writes to one place lands is left open, as in PyTorch. With accumulate each index is
/// matched against each position (a one-hot) and every write adds. An index out of range
/// writes nothing on a device (PyTorch raises; Kiln's interpreter does too).
pub(super) fn index_put(
    s: &mut Steps<'_>,
    x: &str,
    m: &FixedMeta,
    v: &str,
    entries: &[(usize, String, FixedMeta)],
    accumulate: bool,
) -> Result<String, String> {
    let dtype = Raw::Str(m.dtype.name().into());
    let v = s.op("_to_copy", vec![("self", t(v)), ("dtype", dtype.clone())]);
    let Some((p, _, _)) = entries.first() else {
        // No index: the whole tensor.
        return Ok(if accumulate {
            s.bin("add", t(x), t(&v))
        } else {
            s.op("copy", vec![("self", t(x)), ("src", t(&v))])
        });
    };
    let p = *p;
    if entries.iter().enumerate().any(|(k, e)| e.0 != p + k) {
        return Err(
            "index tensors on dims that are not consecutive: Kiln takes x[.., i, j, ..] = v only"
                .into(),
        );
    }
    let rank = m.rank();
    if entries.iter().any(|e| e.2.dtype == DType::Bool) {
        let [(_, mask, mm)] = entries else {
            return Err("a bool mask together with other indices".into());
        };
        let k = mm.rank();
        if p + k > rank || m.shape[p..p + k] != mm.shape[..] {
            return Err(format!(
                "a mask of shape {:?} over dims {p}.. of a tensor of shape {:?}",
                mm.shape, m.shape
            ));
        }
        let mut shape = vec![1; p];
        shape.extend_from_slice(&mm.shape);
        shape.extend(std::iter::repeat_n(1, rank - p - k));
        let mask = s.reshape(mask, &shape);
        let new = if accumulate {
            s.bin("add", t(x), t(&v))
        } else {
            v
        };
        return Ok(s.op(
            "where",
            vec![("condition", t(&mask)), ("self", t(&new)), ("other", t(x))],
        ));
    }
    let k = entries.len();
    if p + k > rank {
        return Err(format!(
            "{k} index tensors from dim {p} of a {rank}-d tensor"
        ));
    }
    // One linear index into the indexed dims, negative indices counted from the end.
    let mut shape_s: Vec<i64> = vec![];
    let mut lin: Option<String> = None;
    for (j, (_, idx, im)) in entries.iter().enumerate() {
        shape_s = crate::graph::shape::broadcast(&shape_s, &im.shape)
            .map_err(|e| format!("index shapes do not broadcast: {e}"))?;
        let n = m.shape[p + j];
        let neg = s.bin("lt", t(idx), Raw::Int(0));
        let up = s.bin("add", t(idx), Raw::Int(n));
        let w = s.op(
            "where",
            vec![("condition", t(&neg)), ("self", t(&up)), ("other", t(idx))],
        );
        lin = Some(match lin {
            None => w,
            Some(l) => {
                let scaled = s.bin("mul", t(&l), Raw::Int(n));
                s.bin("add", t(&scaled), t(&w))
            }
        });
    }
    let lin = lin.ok_or("no index")?;
    let pre: Vec<i64> = m.shape[..p].to_vec();
    let post: Vec<i64> = m.shape[p + k..].to_vec();
    let (pp, qq) = (pre.iter().product::<i64>(), post.iter().product::<i64>());
    let n: i64 = m.shape[p..p + k].iter().product();
    let kk: i64 = shape_s.iter().product();
    let full: Vec<i64> = pre.iter().chain(&shape_s).chain(&post).copied().collect();
    let vfull = s.op("expand", vec![("self", t(&v)), ("size", ints(&full))]);
    let v3 = s.reshape(&vfull, &[pp, kk, qq]);
    let x3 = s.reshape(x, &[pp, n, qq]);
    let lin = s.op("expand", vec![("self", t(&lin)), ("size", ints(&shape_s))]);
    if !accumulate {
        // A scatter of each index's slice (`index_copy`): where several indices write
        // one place, which write lands is left open, as PyTorch leaves it.
        let lin = s.reshape(&lin, &[kk]);
        let lin = s.op(
            "_to_copy",
            vec![("self", t(&lin)), ("dtype", Raw::Str("int64".into()))],
        );
        let out3 = s.op(
            "index_copy",
            vec![
                ("self", t(&x3)),
                ("dim", Raw::Int(1)),
                ("index", t(&lin)),
                ("source", t(&v3)),
            ],
        );
        return Ok(s.reshape(&out3, &m.shape));
    }
    let size = kk * n * pp * qq;
    if size > INDEX_PUT_ELEMENTS {
        return Err(format!(
            "{kk} index positions accumulated into {n} places: {size} elements in Kiln's one-hot expansion of index_put, above its limit of {INDEX_PUT_ELEMENTS}"
        ));
    }
    let lin = s.reshape(&lin, &[kk, 1]);
    let places = s.konst(vec![1, n], DType::Int64, (0..n).map(|i| i as f64).collect());
    let hit = s.bin("eq", t(&lin), t(&places));
    let h = s.op("_to_copy", vec![("self", t(&hit)), ("dtype", dtype)]);
    let h = s.reshape(&h, &[1, kk, n, 1]);
    let v4 = s.reshape(&v3, &[pp, kk, 1, qq]);
    let prod = s.bin("mul", t(&v4), t(&h));
    let add = s.reduce("sum", &prod, Some(&[1]), false);
    let out3 = s.bin("add", t(&x3), t(&add));
    Ok(s.reshape(&out3, &m.shape))
}

/// The first index of the largest (`max`) or smallest element along `dim` (of the
/// flattened tensor when `None`), NaN counting as the extreme, as `argmax`/`argmin` give.
fn arg_extreme(
    s: &mut Steps<'_>,
    x: &str,
    m: &FixedMeta,
    dim: Option<i64>,
    keepdim: bool,
    max: bool,
) -> Result<String, String> {
    let (x, shape, d) = match dim {
        Some(dim) => (x.to_string(), m.shape.clone(), wrap(dim, m.rank())?),
        None => {
            let n: i64 = m.shape.iter().product();
            (s.reshape(x, &[n]), vec![n], 0)
        }
    };
    let shape = if shape.is_empty() { vec![1] } else { shape };
    let x = if m.rank() == 0 {
        s.reshape(&x, &[1])
    } else {
        x
    };
    let n = shape[d];
    let ext = s.reduce(
        if max { "amax" } else { "amin" },
        &x,
        Some(&[d as i64]),
        true,
    );
    let hit = s.bin("eq", t(&x), t(&ext));
    let nan = s.bin("ne", t(&x), t(&x));
    let hit = s.bin("bitwise_or", t(&hit), t(&nan));
    let mut ishape = vec![n];
    ishape.extend(std::iter::repeat_n(1, shape.len() - d - 1));
    let idx = s.konst(ishape, DType::Int64, (0..n).map(|i| i as f64).collect());
    let cand = s.op(
        "where",
        vec![
            ("condition", t(&hit)),
            ("self", t(&idx)),
            ("other", Raw::Int(n)),
        ],
    );
    let first = s.reduce("amin", &cand, Some(&[d as i64]), keepdim);
    // The result's shape where the reduced dim is no dim of `x` (a flattened or 0-d
    // tensor): size-1 dims with keepdim over the whole tensor, else none.
    let out: Vec<i64> = if dim.is_none() && keepdim {
        vec![1; m.rank()]
    } else {
        vec![]
    };
    Ok(if dim.is_none() || m.rank() == 0 {
        s.reshape(&first, &out)
    } else {
        first
    })
}
