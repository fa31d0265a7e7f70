//! ATen ops that an exported graph uses and that are another op of the op set once the
//! shapes and dtypes PyTorch recorded are known: `numpy_T`/`t` (a permute of the
//! operand's rank), `unflatten` (a view to the recorded shape), `chunk` (a split of the
//! recorded size), `bitwise_not` (a logical not of bools, an xor with -1 of integers),
//! `index_select` (an index on one dim), `empty*` (zeros: their values are unspecified),
//! `_unsafe_view`/`view_as`, `expand_as` (an expand to the recorded shape), `clamp_min`/
//! `clamp_max` (a clamp, or the elementwise maximum/minimum of a tensor bound), `rsub`
//! (a sub with its operands swapped), `floor_divide` (a div rounding down), `square`
//! (a pow of 2), `swapaxes`/`swapdims` (a transpose), `movedim`/`moveaxis` (a permute),
//! `zero` (zeros like its operand), the channel and alpha dropouts (`dropout`), and the
//! in-place forms whose operand is named `self` where
//! the functional op names it otherwise (`dropout_`). The TOML front end has no recorded
//! metadata and spells these ops out itself.

use super::Pt2Error;
use crate::graph::front::signature::{param_names, Raw};
use crate::graph::ir::TensorMeta;
use crate::graph::DType;
use std::collections::HashMap;

/// The ops [`rewrite`] turns into ops of the op set.
const REWRITTEN: &[&str] = &[
    "numpy_T",
    "t",
    "unflatten",
    "chunk",
    "bitwise_not",
    "index_select",
    "empty",
    "empty_like",
    "new_empty",
    "_unsafe_view",
    "view_as",
    "reshape_as",
    "expand_as",
    "clamp_min",
    "clamp_max",
    "rsub",
    "floor_divide",
    "square",
    "swapaxes",
    "swapdims",
    "movedim",
    "moveaxis",
    "zero",
    "feature_dropout",
    "alpha_dropout",
    "feature_alpha_dropout",
];

/// Whether [`rewrite`] handles `op`.
pub(super) fn handles(op: &str) -> bool {
    REWRITTEN.contains(&op)
}

fn take(attrs: &mut Vec<(String, Raw)>, name: &str) -> Option<Raw> {
    let i = attrs.iter().position(|(k, _)| k == name)?;
    Some(attrs.remove(i).1)
}

fn tensor_arg<'m>(
    attrs: &[(String, Raw)],
    name: &str,
    metas: &'m HashMap<&str, TensorMeta>,
) -> Result<&'m TensorMeta, String> {
    match attrs.iter().find(|(k, _)| k == name) {
        Some((_, Raw::Str(t))) => metas
            .get(t.as_str())
            .ok_or_else(|| format!("`{name}` (`{t}`) has no recorded shape")),
        _ => Err(format!("needs the tensor `{name}`")),
    }
}

fn int_arg(attrs: &[(String, Raw)], name: &str, default: Option<i64>) -> Result<i64, String> {
    match attrs.iter().find(|(k, _)| k == name) {
        Some((_, Raw::Int(i))) => Ok(*i),
        None => default.ok_or_else(|| format!("needs the integer `{name}`")),
        Some((_, r)) => Err(format!("`{name}` must be an integer, found {r:?}")),
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

fn ints(v: impl IntoIterator<Item = i64>) -> Raw {
    Raw::List(v.into_iter().map(Raw::Int).collect())
}

/// The op of the op set that node `node` of ATen op `op` stands for, with `attrs`
/// rewritten for it; `in_place` for the `op_` form. `out` is the node's (first) output.
pub(super) fn rewrite<'a>(
    node: &str,
    op: &'a str,
    in_place: bool,
    attrs: &mut Vec<(String, Raw)>,
    out: Option<&str>,
    metas: &HashMap<&str, TensorMeta>,
) -> Result<&'a str, Pt2Error> {
    let fail = |message: String| Pt2Error::Argument {
        node: node.into(),
        param: op.into(),
        message,
    };
    // `dropout_(self, ...)`: the functional op calls its operand `input`.
    if in_place {
        if let Some(params) = param_names(op) {
            if !params.contains(&"self") && attrs.iter().any(|(k, _)| k == "self") {
                if let Some(first) = params.first() {
                    for (k, _) in attrs.iter_mut() {
                        if k == "self" {
                            *k = (*first).to_string();
                        }
                    }
                }
            }
        }
    }
    if op == "convolution" {
        // One number may stand for every spatial dim, which only the weight's rank
        // tells: the op becomes conv1d/2d/3d, which know their rank.
        let transposed = attrs
            .iter()
            .any(|(k, v)| k == "transposed" && *v == Raw::Bool(true));
        let spatial = tensor_arg(attrs, "weight", metas).map(|w| w.rank().saturating_sub(2));
        if let (false, Ok(n @ 1..=3)) = (transposed, spatial) {
            take(attrs, "transposed");
            take(attrs, "output_padding");
            return Ok(["conv1d", "conv2d", "conv3d"][n - 1]);
        }
    }
    if !handles(op) {
        return Ok(op);
    }
    let out_meta = || {
        out.and_then(|o| metas.get(o))
            .ok_or_else(|| fail("the output has no recorded shape".into()))
    };
    Ok(match op {
        "numpy_T" | "t" => {
            let rank = tensor_arg(attrs, "self", metas).map_err(fail)?.rank();
            if op == "t" && rank > 2 {
                return Err(fail(format!("t() needs at most 2 dims, found {rank}")));
            }
            attrs.push(("dims".into(), ints((0..rank as i64).rev())));
            "permute"
        }
        "unflatten" | "_unsafe_view" | "view_as" | "reshape_as" => {
            // The recorded shape; values are row-major either way, so a reshape.
            let shape = out_meta()?.shape.clone();
            take(attrs, "dim");
            take(attrs, "sizes");
            take(attrs, "size");
            take(attrs, "other");
            attrs.push(("shape".into(), ints(shape)));
            "reshape"
        }
        "chunk" => {
            let x = tensor_arg(attrs, "self", metas).map_err(fail)?;
            let chunks = int_arg(attrs, "chunks", None).map_err(fail)?;
            if chunks < 1 {
                return Err(fail(format!("chunks must be positive, found {chunks}")));
            }
            let dim = int_arg(attrs, "dim", Some(0)).map_err(fail)?;
            let d = wrap(dim, x.rank()).map_err(fail)?;
            let size = x.shape.get(d).copied().unwrap_or(1);
            // PyTorch's chunk: pieces of ceil(size / chunks), the last one shorter.
            let piece = if size > 0 { (size - 1) / chunks + 1 } else { 1 };
            take(attrs, "chunks");
            attrs.push(("split_size".into(), Raw::Int(piece)));
            "split"
        }
        "bitwise_not" => {
            let x = tensor_arg(attrs, "self", metas).map_err(fail)?;
            match x.dtype {
                DType::Bool => "logical_not",
                d if d.is_float() => {
                    return Err(fail(format!(
                        "bitwise_not is defined for integer and bool tensors, found {d}"
                    )))
                }
                _ => {
                    attrs.push(("other".into(), Raw::Int(-1)));
                    "bitwise_xor"
                }
            }
        }
        "index_select" => {
            let x = tensor_arg(attrs, "self", metas).map_err(fail)?;
            let dim = int_arg(attrs, "dim", None).map_err(fail)?;
            let d = wrap(dim, x.rank()).map_err(fail)?;
            let index = take(attrs, "index").ok_or_else(|| fail("needs `index`".into()))?;
            take(attrs, "dim");
            let mut indices = vec![Raw::None; d];
            indices.push(index);
            attrs.push(("indices".into(), Raw::List(indices)));
            "index"
        }
        "expand_as" => {
            let shape = out_meta()?.shape.clone();
            take(attrs, "other");
            attrs.push(("size".into(), ints(shape)));
            "expand"
        }
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
            for (k, _) in attrs.iter_mut() {
                if k == "self" {
                    *k = "other".into();
                } else if k == "other" {
                    *k = "self".into();
                }
            }
            "sub"
        }
        "floor_divide" => {
            attrs.push(("rounding_mode".into(), Raw::Str("floor".into())));
            "div"
        }
        "square" => {
            attrs.push(("other".into(), Raw::Int(2)));
            "pow"
        }
        "swapaxes" | "swapdims" => {
            for (k, _) in attrs.iter_mut() {
                match k.as_str() {
                    "axis0" => *k = "dim0".into(),
                    "axis1" => *k = "dim1".into(),
                    _ => {}
                }
            }
            "transpose"
        }
        "movedim" | "moveaxis" => {
            // The dims moved land at their destinations; the others keep their order in
            // the places left.
            let rank = tensor_arg(attrs, "self", metas).map_err(fail)?.rank();
            if rank == 0 {
                // Nothing to move (dims 0 and -1 are the tensor itself).
                take(attrs, "source");
                take(attrs, "destination");
                return Ok("alias");
            }
            let mut list = |name: &str| -> Result<Vec<usize>, Pt2Error> {
                let v = match take(attrs, name) {
                    Some(Raw::Int(i)) => vec![i],
                    Some(Raw::List(l)) => l
                        .iter()
                        .map(|x| match x {
                            Raw::Int(i) => Ok(*i),
                            _ => Err(fail(format!("`{name}` must be integers"))),
                        })
                        .collect::<Result<_, _>>()?,
                    _ => return Err(fail(format!("needs `{name}`"))),
                };
                v.into_iter().map(|d| wrap(d, rank).map_err(fail)).collect()
            };
            let (src, dst) = (list("source")?, list("destination")?);
            if src.len() != dst.len() {
                return Err(fail(format!(
                    "{} source dims and {} destinations",
                    src.len(),
                    dst.len()
                )));
            }
            let mut dims: Vec<Option<usize>> = vec![None; rank];
            for (&s, &d) in src.iter().zip(&dst) {
                if dims[d].is_some() {
                    return Err(fail(format!("destination dim {d} given twice")));
                }
                dims[d] = Some(s);
            }
            let mut rest = (0..rank).filter(|d| !src.contains(d));
            let dims: Vec<i64> = dims
                .into_iter()
                .map(|d| d.or_else(|| rest.next()).map_or(0, |d| d as i64))
                .collect();
            attrs.push(("dims".into(), ints(dims)));
            "permute"
        }
        "zero" => "zeros_like",
        // Every dropout is the identity in inference (`train` false, which `dropout`
        // checks).
        "feature_dropout" | "alpha_dropout" | "feature_alpha_dropout" => "dropout",
        "empty" => "zeros",
        "empty_like" => "zeros_like",
        "new_empty" => "new_zeros",
        _ => op,
    })
}
