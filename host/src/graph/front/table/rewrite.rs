//! The table's rewrites: ops that are another op of the table once the operands'
//! shapes and dtypes are known: `numpy_T`/`t` (a permute of the operand's rank),
//! `unflatten` (a reshape), `chunk` (a split of the operand's size), `bitwise_not` (a
//! logical not of bools, an xor with -1 of integers), `index_select` (an index on one
//! dim), `empty*` (zeros: their values are unspecified), `_unsafe_view`/`view_as`/
//! `reshape_as` (a reshape), `expand_as` (an expand to the other operand's shape),
//! `clamp_min`/`clamp_max` (a clamp, or the elementwise maximum/minimum of a tensor
//! bound), `rsub` (a sub with its operands swapped), `floor_divide` (a div rounding
//! down), `square` (a pow of 2), `swapaxes`/`swapdims` (a transpose), `movedim`/
//! `moveaxis` (a permute), `narrow` (a slice), `tensor_split` (a split of sizes), `zero` (zeros like its operand), the channel and alpha
//! dropouts (`dropout`), `convolution` (conv1d/2d/3d by the weight's rank), and ATen's
//! other spellings of ops of the table (`multiply`, `__and__`, `clip`, `arctan2`, `concat`, ...).
//!
//! A rewrite reads the operands' metadata and the arguments only, never an output's.

use super::{Metas, Raw, SigError};
use crate::graph::ir::{FixedMeta, TensorMeta};
use crate::graph::DType;

/// The ops [`rewrite`] turns into other ops of the table, with their parameters in
/// ATen order.
pub(super) const ENTRIES: &[(&str, &[&str])] = &[
    ("numpy_T", &["self"]),
    ("t", &["self"]),
    ("unflatten", &["self", "dim", "sizes"]),
    ("chunk", &["self", "chunks", "dim"]),
    ("bitwise_not", &["self"]),
    ("index_select", &["self", "dim", "index"]),
    ("empty", &["size", "dtype"]),
    ("empty_like", &["self", "dtype"]),
    ("new_empty", &["self", "size", "dtype"]),
    ("_unsafe_view", &["self", "size"]),
    ("view_as", &["self", "other"]),
    ("reshape_as", &["self", "other"]),
    ("expand_as", &["self", "other"]),
    ("clamp_min", &["self", "min"]),
    ("clamp_max", &["self", "max"]),
    ("rsub", &["self", "other", "alpha"]),
    ("floor_divide", &["self", "other"]),
    ("square", &["self"]),
    ("swapaxes", &["self", "axis0", "axis1"]),
    ("swapdims", &["self", "dim0", "dim1"]),
    ("movedim", &["self", "source", "destination"]),
    ("moveaxis", &["self", "source", "destination"]),
    ("zero", &["self"]),
    ("feature_dropout", &["input", "p", "train"]),
    ("alpha_dropout", &["input", "p", "train"]),
    ("feature_alpha_dropout", &["input", "p", "train"]),
    // Other spellings of ops of the table.
    ("__and__", &["self", "other"]),
    ("__or__", &["self", "other"]),
    ("__xor__", &["self", "other"]),
    ("multiply", &["self", "other"]),
    ("subtract", &["self", "other", "alpha"]),
    ("divide", &["self", "other", "rounding_mode"]),
    ("true_divide", &["self", "other"]),
    ("greater", &["self", "other"]),
    ("greater_equal", &["self", "other"]),
    ("less", &["self", "other"]),
    ("less_equal", &["self", "other"]),
    ("not_equal", &["self", "other"]),
    ("negative", &["self"]),
    ("absolute", &["self"]),
    ("clip", &["self", "min", "max"]),
    ("arctan2", &["self", "other"]),
    ("concat", &["tensors", "dim"]),
    ("concatenate", &["tensors", "dim"]),
    ("sgn", &["self"]),
    ("narrow", &["self", "dim", "start", "length"]),
    ("tensor_split", &["self", "sections", "dim", "indices"]),
];

/// The op of the table that `op` is another spelling of.
fn spelling(op: &str) -> Option<&'static str> {
    Some(match op {
        "arctan2" => "atan2",
        "sgn" => "sign",
        "__and__" => "bitwise_and",
        "__or__" => "bitwise_or",
        "__xor__" => "bitwise_xor",
        "multiply" => "mul",
        "subtract" => "sub",
        "divide" | "true_divide" => "div",
        "greater" => "gt",
        "greater_equal" => "ge",
        "less" => "lt",
        "less_equal" => "le",
        "not_equal" => "ne",
        "negative" => "neg",
        "absolute" => "abs",
        "clip" => "clamp",
        "concat" | "concatenate" => "cat",
        _ => return None,
    })
}

fn take(attrs: &mut Vec<(String, Raw)>, name: &str) -> Option<Raw> {
    let i = attrs.iter().position(|(k, _)| k == name)?;
    Some(attrs.remove(i).1)
}

/// The metadata of tensor argument `name`, its sizes integers: a rewrite that reads
/// them refuses symbolic ones by name.
pub(super) fn tensor_arg(
    attrs: &[(String, Raw)],
    name: &str,
    metas: Metas<'_>,
) -> Result<FixedMeta, SigError> {
    let m = tensor_meta_arg(attrs, name, metas)?;
    m.fixed().ok_or_else(|| {
        SigError::Invalid(format!(
            "`{name}` has symbolic sizes {:?}, which this op is rewritten at integer sizes only \
             for so far; compile at one size (--specialize)",
            m.shape
        ))
    })
}

/// The metadata of tensor argument `name`, its sizes possibly symbolic.
pub(super) fn tensor_meta_arg(
    attrs: &[(String, Raw)],
    name: &str,
    metas: Metas<'_>,
) -> Result<TensorMeta, SigError> {
    match attrs.iter().find(|(k, _)| k == name) {
        Some((_, Raw::Str(t))) => metas(t).ok_or_else(|| {
            SigError::Invalid(format!("`{name}` (`{t}`) names no tensor known here"))
        }),
        _ => Err(SigError::Invalid(format!("needs the tensor `{name}`"))),
    }
}

fn int_arg(attrs: &[(String, Raw)], name: &str, default: Option<i64>) -> Result<i64, SigError> {
    match attrs.iter().find(|(k, _)| k == name) {
        Some((_, Raw::Int(i))) => Ok(*i),
        None => default.ok_or_else(|| SigError::Invalid(format!("needs the integer `{name}`"))),
        Some((_, r)) => Err(SigError::Invalid(format!(
            "`{name}` must be an integer, found {r:?}"
        ))),
    }
}

/// `dim` of a `rank`-d tensor counted from the front (a 0-d tensor takes 0 and -1).
pub(super) fn wrap(dim: i64, rank: usize) -> Result<usize, String> {
    let r = rank.max(1) as i64;
    let d = if dim < 0 { dim + r } else { dim };
    if (0..r).contains(&d) {
        Ok(d as usize)
    } else {
        Err(format!("dim {dim} is out of range for a {rank}-d tensor"))
    }
}

/// [`wrap`] as a table error.
fn wrap_dim(dim: i64, rank: usize) -> Result<usize, SigError> {
    wrap(dim, rank).map_err(SigError::Invalid)
}

fn ints(v: impl IntoIterator<Item = i64>) -> Raw {
    Raw::List(v.into_iter().map(Raw::Int).collect())
}

fn invalid(message: String) -> SigError {
    SigError::Invalid(message)
}

/// The op of the table that a call of `op` with arguments `attrs` stands for, with
/// `attrs` rewritten for it: `op` itself where there is nothing to rewrite. Reads the
/// operands' shapes and dtypes from `metas`, never a recorded output.
pub(super) fn rewrite(
    op: &'static str,
    attrs: &mut Vec<(String, Raw)>,
    metas: Metas<'_>,
) -> Result<&'static str, SigError> {
    if let Some(to) = spelling(op) {
        return Ok(to);
    }
    Ok(match op {
        "convolution" => convolution(attrs, metas),
        "numpy_T" | "t" => {
            let rank = tensor_arg(attrs, "self", metas)?.rank();
            if op == "t" && rank > 2 {
                return Err(invalid(format!("t() needs at most 2 dims, found {rank}")));
            }
            attrs.push(("dims".into(), ints((0..rank as i64).rev())));
            "permute"
        }
        "unflatten" => {
            let shape = unflattened(attrs, metas)?;
            take(attrs, "dim");
            take(attrs, "sizes");
            attrs.push(("shape".into(), ints(shape)));
            "reshape"
        }
        "_unsafe_view" => {
            // Values are row-major either way: a reshape.
            let size = take(attrs, "size").ok_or_else(|| invalid("needs `size`".into()))?;
            attrs.push(("shape".into(), size));
            "reshape"
        }
        "view_as" | "reshape_as" | "expand_as" => {
            let shape = tensor_arg(attrs, "other", metas)?.shape;
            take(attrs, "other");
            if op == "expand_as" {
                attrs.push(("size".into(), ints(shape)));
                "expand"
            } else {
                attrs.push(("shape".into(), ints(shape)));
                "reshape"
            }
        }
        "chunk" => {
            // Only the size along `dim` is read: the others may be symbolic.
            let x = tensor_meta_arg(attrs, "self", metas)?;
            let chunks = int_arg(attrs, "chunks", None)?;
            if chunks < 1 {
                return Err(invalid(format!("chunks must be positive, found {chunks}")));
            }
            let dim = int_arg(attrs, "dim", Some(0))?;
            let d = wrap_dim(dim, x.rank())?;
            let size = match x.shape.get(d).map(|s| s.as_const()) {
                Some(Some(n)) => n,
                None => 1,
                Some(None) => {
                    return Err(invalid(format!(
                    "chunk along dim {d} of symbolic size {:?}; compile at one size (--specialize)",
                    x.shape[d]
                )))
                }
            };
            // PyTorch's chunk: pieces of ceil(size / chunks), the last one shorter.
            let piece = if size > 0 { (size - 1) / chunks + 1 } else { 1 };
            take(attrs, "chunks");
            attrs.push(("split_size".into(), Raw::Int(piece)));
            "split"
        }
        "bitwise_not" => match tensor_arg(attrs, "self", metas)?.dtype {
            DType::Bool => "logical_not",
            d if d.is_float() => {
                return Err(invalid(format!(
                    "bitwise_not is defined for integer and bool tensors, found {d}"
                )))
            }
            _ => {
                attrs.push(("other".into(), Raw::Int(-1)));
                "bitwise_xor"
            }
        },
        "index_select" => {
            let x = tensor_arg(attrs, "self", metas)?;
            let dim = int_arg(attrs, "dim", None)?;
            let d = wrap_dim(dim, x.rank())?;
            let index = take(attrs, "index").ok_or_else(|| invalid("needs `index`".into()))?;
            take(attrs, "dim");
            let mut indices = vec![Raw::None; d];
            indices.push(index);
            attrs.push(("indices".into(), Raw::List(indices)));
            "index"
        }
        "movedim" | "moveaxis" => movedim(attrs, metas)?,
        "tensor_split" => {
            // `sections` pieces (the first `size % sections` one longer), or the pieces
            // between `indices` (clamped to the dim, as PyTorch's views are).
            let x = tensor_arg(attrs, "self", metas)?;
            let d = wrap_dim(int_arg(attrs, "dim", Some(0))?, x.rank())?;
            let size = x.shape.get(d).copied().unwrap_or(1);
            let pieces = take(attrs, "sections").or_else(|| take(attrs, "indices"));
            let sizes: Vec<i64> = match pieces {
                Some(Raw::Int(n)) if n >= 1 => {
                    (0..n).map(|i| size / n + i64::from(i < size % n)).collect()
                }
                Some(Raw::List(l)) => {
                    let mut cuts = vec![0];
                    for r in l {
                        let Raw::Int(i) = r else {
                            return Err(invalid(format!("indices must be integers, found {r:?}")));
                        };
                        let i = if i < 0 { i + size } else { i };
                        cuts.push(i.clamp(*cuts.last().unwrap_or(&0), size));
                    }
                    cuts.push(size);
                    cuts.windows(2).map(|w| w[1] - w[0]).collect()
                }
                other => {
                    return Err(invalid(format!(
                        "needs `sections`, a positive integer or a list of indices, found {other:?}"
                    )))
                }
            };
            attrs.push(("split_sizes".into(), ints(sizes)));
            "split_with_sizes"
        }
        "narrow" => {
            // `length` elements from `start` (counted from the end where negative).
            let x = tensor_arg(attrs, "self", metas)?;
            let d = wrap_dim(int_arg(attrs, "dim", None)?, x.rank())?;
            let size = x.shape.get(d).copied().unwrap_or(1);
            let start = int_arg(attrs, "start", None)?;
            let length = int_arg(attrs, "length", None)?;
            let start = if start < 0 { start + size } else { start };
            if start < 0 || length < 0 || start.checked_add(length).is_none_or(|end| end > size) {
                return Err(invalid(format!(
                    "narrow of {length} from {start} along a dim of {size}"
                )));
            }
            take(attrs, "length");
            attrs.push(("end".into(), Raw::Int(start + length)));
            attrs.retain(|(k, _)| k != "start");
            attrs.push(("start".into(), Raw::Int(start)));
            "slice"
        }
        other => match added(other, attrs) {
            Some(to) => to,
            None => renamed(other, attrs),
        },
    })
}

/// The rewrites that rename the op or its parameters, and need no metadata.
fn renamed(op: &'static str, attrs: &mut [(String, Raw)]) -> &'static str {
    let rename = |attrs: &mut [(String, Raw)], pairs: &[(&str, &str)]| {
        for (k, _) in attrs.iter_mut() {
            if let Some((_, to)) = pairs.iter().find(|(from, _)| from == k) {
                *k = (*to).to_string();
            }
        }
    };
    match op {
        "clamp_min" | "clamp_max" => {
            let bound = if op == "clamp_min" { "min" } else { "max" };
            match attrs.iter().position(|(k, _)| k == bound) {
                // A tensor bound (`clamp_min.Tensor`): the elementwise maximum/minimum.
                Some(i) if matches!(attrs[i].1, Raw::Str(_)) => {
                    attrs[i].0 = "other".into();
                    if op == "clamp_min" {
                        "maximum"
                    } else {
                        "minimum"
                    }
                }
                _ => "clamp",
            }
        }
        "rsub" => {
            // rsub(self, other, alpha) = other - alpha * self
            rename(attrs, &[("self", "other"), ("other", "self")]);
            "sub"
        }
        "swapaxes" | "swapdims" => {
            rename(attrs, &[("axis0", "dim0"), ("axis1", "dim1")]);
            "transpose"
        }
        "zero" => "zeros_like",
        // Every dropout is the identity in inference (`train` false, which `dropout`
        // checks).
        "feature_dropout" | "alpha_dropout" | "feature_alpha_dropout" => "dropout",
        "empty" => "zeros",
        "empty_like" => "zeros_like",
        "new_empty" => "new_zeros",
        other => other,
    }
}

/// `floor_divide` and `square` add an argument; the rest of [`renamed`].
fn added(op: &'static str, attrs: &mut Vec<(String, Raw)>) -> Option<&'static str> {
    match op {
        "floor_divide" => {
            attrs.push(("rounding_mode".into(), Raw::Str("floor".into())));
            Some("div")
        }
        "square" => {
            attrs.push(("other".into(), Raw::Int(2)));
            Some("pow")
        }
        _ => None,
    }
}

/// `convolution`: one number may stand for every spatial dim, which only the weight's
/// rank tells, so the op becomes conv1d/2d/3d, which know their rank.
fn convolution(attrs: &mut Vec<(String, Raw)>, metas: Metas<'_>) -> &'static str {
    let transposed = attrs
        .iter()
        .any(|(k, v)| k == "transposed" && *v == Raw::Bool(true));
    let spatial = tensor_arg(attrs, "weight", metas).map(|w| w.rank().saturating_sub(2));
    match (transposed, spatial) {
        (false, Ok(n @ 1..=3)) => {
            take(attrs, "transposed");
            take(attrs, "output_padding");
            ["conv1d", "conv2d", "conv3d"][n - 1]
        }
        _ => "convolution",
    }
}

/// `unflatten(self, dim, sizes)`'s shape: `dim` of `self` split into `sizes` (one of
/// which may be -1).
fn unflattened(attrs: &[(String, Raw)], metas: Metas<'_>) -> Result<Vec<i64>, SigError> {
    let x = tensor_arg(attrs, "self", metas)?;
    let d = wrap_dim(int_arg(attrs, "dim", None)?, x.rank())?;
    let sizes: Vec<i64> = match attrs.iter().find(|(k, _)| k == "sizes") {
        Some((_, Raw::List(l))) => l
            .iter()
            .map(|r| match r {
                Raw::Int(i) => Ok(*i),
                _ => Err(invalid(format!("`sizes` must be integers, found {r:?}"))),
            })
            .collect::<Result<_, _>>()?,
        _ => return Err(invalid("needs the integer list `sizes`".into())),
    };
    let n = x.shape.get(d).copied().unwrap_or(1);
    let known: i64 = sizes.iter().filter(|&&s| s != -1).product();
    let free = sizes.iter().filter(|&&s| s == -1).count();
    let sizes: Vec<i64> = match free {
        0 if known == n => sizes,
        1 if known > 0 && n % known == 0 => sizes
            .iter()
            .map(|&s| if s == -1 { n / known } else { s })
            .collect(),
        _ => {
            return Err(invalid(format!(
                "sizes {sizes:?} do not split dim {d} of {n} elements"
            )))
        }
    };
    let mut shape = x.shape[..d.min(x.shape.len())].to_vec();
    shape.extend(sizes);
    shape.extend(x.shape.iter().skip(d + 1));
    Ok(shape)
}

/// `movedim(self, source, destination)` as a permute: the dims moved land at their
/// destinations; the others keep their order in the places left.
fn movedim(attrs: &mut Vec<(String, Raw)>, metas: Metas<'_>) -> Result<&'static str, SigError> {
    let rank = tensor_arg(attrs, "self", metas)?.rank();
    if rank == 0 {
        // Nothing to move (dims 0 and -1 are the tensor itself).
        take(attrs, "source");
        take(attrs, "destination");
        return Ok("alias");
    }
    let mut list = |name: &str| -> Result<Vec<usize>, SigError> {
        let v = match take(attrs, name) {
            Some(Raw::Int(i)) => vec![i],
            Some(Raw::List(l)) => l
                .iter()
                .map(|x| match x {
                    Raw::Int(i) => Ok(*i),
                    _ => Err(invalid(format!("`{name}` must be integers"))),
                })
                .collect::<Result<_, _>>()?,
            _ => return Err(invalid(format!("needs `{name}`"))),
        };
        v.into_iter().map(|d| wrap_dim(d, rank)).collect()
    };
    let (src, dst) = (list("source")?, list("destination")?);
    if src.len() != dst.len() {
        return Err(invalid(format!(
            "{} source dims and {} destinations",
            src.len(),
            dst.len()
        )));
    }
    let mut dims: Vec<Option<usize>> = vec![None; rank];
    for (&s, &d) in src.iter().zip(&dst) {
        if dims[d].is_some() {
            return Err(invalid(format!("destination dim {d} given twice")));
        }
        dims[d] = Some(s);
    }
    let mut rest = (0..rank).filter(|d| !src.contains(d));
    let dims: Vec<i64> = dims
        .into_iter()
        .map(|d| d.or_else(|| rest.next()).map_or(0, |d| d as i64))
        .collect();
    attrs.push(("dims".into(), ints(dims)));
    Ok("permute")
}
