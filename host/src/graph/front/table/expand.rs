//! ATen ops that an exported graph uses and that are a short program of ops of the op set
//! once the shapes PyTorch recorded are known, the way PyTorch's own decompositions
//! spell them: `stack` (unsqueeze + cat), `repeat_interleave` with an integer count
//! (unsqueeze + expand + reshape), `linalg_vector_norm`/`norm` (sums of powers),
//! `_weight_norm`, `softplus`, `eye`, `einsum` (permutes, reshapes and batched matrix
//! products), `im2col` (padding and strided slices) and `col2im` (strided scatters into
//! zeros, summed), `unbind` (a select per index), the transposed convolutions (a direct
//! convolution of the input spread with zeros), and the `upsample_*` interpolations
//! (nearest, linear, bilinear, bicubic, trilinear: per spatial dim, a gather of each tap
//! and a sum weighted by constants computed here as ATen computes them).
//!
//! Each expansion is a list of [`Step`]s of bound ops, which the front end adds as
//! nodes. The steps' own tensors are named `OUT.k` after the call's node `OUT` (FX and
//! TOML names that hold a `.` are renamed apart by the front end). An expansion reads
//! the operands' metadata and the arguments only, never an output's.

use super::rewrite::wrap;
use super::{Metas, Raw, SigError};
use crate::graph::ir::FixedMeta;
use crate::graph::DType;

mod conv_padding;
mod conv_transpose;
mod einsum;
mod extra;
mod fold;
mod max_pool3d;
mod moe;
mod more;
mod scatter;
mod sort;
mod upsample;

use upsample::upsample_kind;

/// The transposed convolutions' parameters, in ATen order.
const CONV_TRANSPOSE: &[&str] = &[
    "input",
    "weight",
    "bias",
    "stride",
    "padding",
    "output_padding",
    "groups",
    "dilation",
];

/// The max pools' parameters, in ATen order.
const MAX_POOL: &[&str] = &[
    "self",
    "kernel_size",
    "stride",
    "padding",
    "dilation",
    "ceil_mode",
];

/// The ops [`expand`] spells out, with their parameters in ATen order.
pub(super) const ENTRIES: &[(&str, &[&str])] = &[
    ("stack", &["tensors", "dim"]),
    (
        "repeat_interleave",
        &["self", "repeats", "dim", "output_size"],
    ),
    (
        "linalg_vector_norm",
        &["self", "ord", "dim", "keepdim", "dtype"],
    ),
    ("norm", &["self", "p", "dim", "keepdim", "dtype"]),
    ("_weight_norm", &["v", "g", "dim"]),
    ("softplus", &["self", "beta", "threshold"]),
    ("eye", &["n", "m", "dtype"]),
    ("einsum", &["equation", "tensors", "path"]),
    (
        "im2col",
        &["self", "kernel_size", "dilation", "padding", "stride"],
    ),
    (
        "col2im",
        &[
            "self",
            "output_size",
            "kernel_size",
            "dilation",
            "padding",
            "stride",
        ],
    ),
    ("upsample_nearest1d", &["self", "output_size", "scales"]),
    (
        "upsample_nearest2d",
        &["self", "output_size", "scales_h", "scales_w"],
    ),
    (
        "upsample_nearest3d",
        &["self", "output_size", "scales_d", "scales_h", "scales_w"],
    ),
    (
        "_upsample_nearest_exact1d",
        &["self", "output_size", "scales"],
    ),
    (
        "_upsample_nearest_exact2d",
        &["self", "output_size", "scales_h", "scales_w"],
    ),
    (
        "_upsample_nearest_exact3d",
        &["self", "output_size", "scales_d", "scales_h", "scales_w"],
    ),
    (
        "upsample_linear1d",
        &["self", "output_size", "align_corners", "scales"],
    ),
    (
        "upsample_bilinear2d",
        &[
            "self",
            "output_size",
            "align_corners",
            "scales_h",
            "scales_w",
        ],
    ),
    (
        "upsample_trilinear3d",
        &[
            "self",
            "output_size",
            "align_corners",
            "scales_d",
            "scales_h",
            "scales_w",
        ],
    ),
    (
        "upsample_bicubic2d",
        &[
            "self",
            "output_size",
            "align_corners",
            "scales_h",
            "scales_w",
        ],
    ),
    ("triu", &["self", "diagonal"]),
    ("tril", &["self", "diagonal"]),
    ("argmax", &["self", "dim", "keepdim"]),
    ("argmin", &["self", "dim", "keepdim"]),
    ("logsumexp", &["self", "dim", "keepdim"]),
    ("flip", &["self", "dims"]),
    ("leaky_relu", &["self", "negative_slope"]),
    ("elu", &["self", "alpha", "scale", "input_scale"]),
    ("celu", &["self", "alpha"]),
    ("selu", &["self"]),
    ("mish", &["self"]),
    ("glu", &["self", "dim"]),
    ("prelu", &["self", "weight"]),
    ("_prelu_kernel", &["self", "weight"]),
    ("log_sigmoid", &["self"]),
    ("log_sigmoid_forward", &["self"]),
    ("softsign", &["self"]),
    ("hardshrink", &["self", "lambd"]),
    ("logical_and", &["self", "other"]),
    ("logical_or", &["self", "other"]),
    ("logical_xor", &["self", "other"]),
    ("isnan", &["self"]),
    ("isinf", &["self"]),
    ("nan_to_num", &["self", "nan", "posinf", "neginf"]),
    ("std", &["self", "dim", "correction", "keepdim"]),
    ("var_mean", &["self", "dim", "correction", "keepdim"]),
    ("std_mean", &["self", "dim", "correction", "keepdim"]),
    ("addcmul", &["self", "tensor1", "tensor2", "value"]),
    ("addcdiv", &["self", "tensor1", "tensor2", "value"]),
    ("lerp", &["self", "end", "weight"]),
    ("one_hot", &["self", "num_classes"]),
    ("tile", &["self", "dims"]),
    ("exp2", &["self"]),
    ("pixel_shuffle", &["self", "upscale_factor"]),
    ("pixel_unshuffle", &["self", "downscale_factor"]),
    ("unfold", &["self", "dimension", "size", "step"]),
    ("max_pool1d", MAX_POOL),
    ("max_pool3d", MAX_POOL),
    ("index_put", &["self", "indices", "values", "accumulate"]),
    ("unbind", &["self", "dim"]),
    ("meshgrid", &["tensors", "indexing"]),
    ("_safe_softmax", &["self", "dim", "dtype"]),
    ("scatter", &["self", "dim", "index", "src"]),
    ("scatter_add", &["self", "dim", "index", "src"]),
    ("index_add", &["self", "dim", "index", "source", "alpha"]),
    ("sort", &["self", "dim", "descending", "stable"]),
    ("argsort", &["self", "dim", "descending", "stable"]),
    ("topk", &["self", "k", "dim", "largest", "sorted"]),
    ("outer", &["self", "vec2"]),
    ("isfinite", &["self"]),
    ("logaddexp", &["self", "other"]),
    ("xlogy", &["self", "other"]),
    ("fmin", &["self", "other"]),
    ("fmax", &["self", "other"]),
    ("threshold", &["self", "threshold", "value"]),
    ("heaviside", &["self", "values"]),
    ("frac", &["self"]),
    ("logit", &["self", "eps"]),
    ("signbit", &["self"]),
    ("nanmean", &["self", "dim", "keepdim", "dtype"]),
    ("bucketize", &["self", "boundaries", "out_int32", "right"]),
    (
        "searchsorted",
        &[
            "sorted_sequence",
            "self",
            "out_int32",
            "right",
            "side",
            "sorter",
        ],
    ),
    (
        "instance_norm",
        &[
            "input",
            "weight",
            "bias",
            "running_mean",
            "running_var",
            "use_input_stats",
            "momentum",
            "eps",
            "cudnn_enabled",
        ],
    ),
    ("histc", &["self", "bins", "min", "max"]),
    ("grouped_mm_fallback", &["input", "weight", "offs"]),
    ("conv_transpose1d", CONV_TRANSPOSE),
    ("conv_transpose2d", CONV_TRANSPOSE),
    ("conv_transpose3d", CONV_TRANSPOSE),
];

/// One step of an expansion.
#[derive(Debug)]
pub enum Step {
    /// `out = op(attrs)`, bound by keyword
    Op {
        /// the tensor it makes
        out: String,
        /// an op the table binds
        op: &'static str,
        /// its arguments, by keyword
        attrs: Vec<(String, Raw)>,
    },
    /// `out`, a constant of `meta` with these row-major values
    Const {
        /// the tensor it makes
        out: String,
        /// its shape and dtype
        meta: FixedMeta,
        /// its values
        values: Vec<f64>,
    },
}

/// Builds the steps of one expansion.
struct Steps<'a> {
    out: &'a str,
    steps: Vec<Step>,
}

impl Steps<'_> {
    /// A fresh intermediate name.
    fn name(&self) -> String {
        format!("{}.{}", self.out, self.steps.len())
    }

    fn op(&mut self, op: &'static str, attrs: Vec<(&str, Raw)>) -> String {
        let out = self.name();
        self.steps.push(Step::Op {
            out: out.clone(),
            op,
            attrs: attrs.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
        });
        out
    }

    fn konst(&mut self, shape: Vec<i64>, dtype: DType, values: Vec<f64>) -> String {
        let out = self.name();
        self.steps.push(Step::Const {
            out: out.clone(),
            meta: FixedMeta::contiguous(shape, dtype),
            values,
        });
        out
    }

    fn un(&mut self, op: &'static str, x: &str) -> String {
        self.op(op, vec![("self", t(x))])
    }

    fn bin(&mut self, op: &'static str, a: Raw, b: Raw) -> String {
        self.op(op, vec![("self", a), ("other", b)])
    }

    fn reshape(&mut self, x: &str, shape: &[i64]) -> String {
        self.op("reshape", vec![("self", t(x)), ("shape", ints(shape))])
    }

    fn permute(&mut self, x: &str, dims: &[usize]) -> String {
        if dims.iter().enumerate().all(|(i, &d)| i == d) {
            return x.to_string();
        }
        let dims: Vec<i64> = dims.iter().map(|&d| d as i64).collect();
        self.op("permute", vec![("self", t(x)), ("dims", ints(&dims))])
    }

    fn reduce(&mut self, op: &'static str, x: &str, dims: Option<&[i64]>, keepdim: bool) -> String {
        let mut attrs = vec![("self", t(x)), ("keepdim", Raw::Bool(keepdim))];
        if let Some(d) = dims {
            attrs.push(("dim", ints(d)));
        }
        self.op(op, attrs)
    }

    /// `stack(xs, dim)` of tensors of rank `rank`, `dim` already wrapped.
    fn stack(&mut self, xs: &[String], dim: usize) -> String {
        let parts: Vec<Raw> = xs
            .iter()
            .map(|x| {
                t(&self.op(
                    "unsqueeze",
                    vec![("self", t(x)), ("dim", Raw::Int(dim as i64))],
                ))
            })
            .collect();
        self.op(
            "cat",
            vec![("tensors", Raw::List(parts)), ("dim", Raw::Int(dim as i64))],
        )
    }
}

/// `cat` as PyTorch computes it where some operands are 1-d and empty (shape `[0]`) and
/// others have another rank: those are skipped (a legacy rule, which transformers' empty
/// KV caches meet), though their dtypes still take part in the result's. `None` where no
/// operand is skipped: `cat` binds as it is.
fn cat_without_legacy_empties(
    out: &str,
    attrs: &[(String, Raw)],
    metas: Metas<'_>,
) -> Option<Expansion> {
    let Some(Raw::List(items)) = get(attrs, "tensors") else {
        return None;
    };
    let operands: Vec<(&Raw, FixedMeta)> = items
        .iter()
        .map(|r| match r {
            Raw::Str(name) => metas(name).and_then(|m| m.fixed()).map(|m| (r, m)),
            _ => None,
        })
        .collect::<Option<_>>()?;
    let legacy = |m: &FixedMeta| m.shape == [0];
    if !operands.iter().any(|(_, m)| legacy(m)) || operands.iter().all(|(_, m)| m.rank() == 1) {
        return None;
    }
    let dtype = operands
        .iter()
        .map(|(_, m)| m.dtype)
        .reduce(crate::graph::dtype::promote)?;
    let kept: Vec<Raw> = operands
        .iter()
        .filter(|(_, m)| !legacy(m))
        .map(|(r, _)| (*r).clone())
        .collect();
    let kept_dtype = operands
        .iter()
        .filter(|(_, m)| !legacy(m))
        .map(|(_, m)| m.dtype)
        .reduce(crate::graph::dtype::promote)?;
    let mut s = Steps { out, steps: vec![] };
    let dim = get(attrs, "dim").cloned().unwrap_or(Raw::Int(0));
    let mut result = s.op("cat", vec![("tensors", Raw::List(kept)), ("dim", dim)]);
    if kept_dtype != dtype {
        result = s.op(
            "_to_copy",
            vec![
                ("self", t(&result)),
                ("dtype", Raw::Str(dtype.name().into())),
            ],
        );
    }
    Some(Expansion {
        steps: s.steps,
        results: vec![result],
    })
}

fn t(name: &str) -> Raw {
    Raw::Str(name.to_string())
}

fn ints(v: &[i64]) -> Raw {
    Raw::List(v.iter().map(|&i| Raw::Int(i)).collect())
}

fn get<'r>(attrs: &'r [(String, Raw)], name: &str) -> Option<&'r Raw> {
    attrs.iter().find(|(k, _)| k == name).map(|(_, v)| v)
}

fn number(r: &Raw) -> Option<f64> {
    match r {
        Raw::Int(i) => Some(*i as f64),
        Raw::Float(f) => Some(*f),
        _ => None,
    }
}

fn int_list(r: Option<&Raw>) -> Option<Vec<i64>> {
    match r? {
        Raw::Int(i) => Some(vec![*i]),
        Raw::List(l) => l
            .iter()
            .map(|x| match x {
                Raw::Int(i) => Some(*i),
                _ => None,
            })
            .collect(),
        _ => None,
    }
}

fn float_list(r: Option<&Raw>) -> Option<Vec<f64>> {
    match r? {
        Raw::List(l) => l.iter().map(number).collect(),
        r => number(r).map(|x| vec![x]),
    }
}

/// The largest dim an expansion that builds per-element constants takes.
const MAX_CONSTANT_DIM: i64 = 1 << 24;

/// Whether `op`'s expansion builds constants as long as one of its dims (index lists,
/// interpolation taps and weights, class ids).
fn builds_constants(op: &str) -> bool {
    matches!(
        op,
        "triu"
            | "tril"
            | "eye"
            | "flip"
            | "argmax"
            | "argmin"
            | "max"
            | "min"
            | "one_hot"
            | "unfold"
            | "index_put"
            | "index_copy"
            | "col2im"
            | "scatter"
            | "scatter_add"
            | "index_add"
            | "histc"
            | "_grouped_mm"
            | "grouped_mm_fallback"
    ) || upsample_kind(op).is_some()
}

/// An expansion: its steps, and the tensor (a step's or an operand) each output of the
/// call is.
#[derive(Debug)]
pub struct Expansion {
    /// the steps, in order
    pub steps: Vec<Step>,
    /// the tensor each output is, in order
    pub results: Vec<String>,
}

fn invalid(message: String) -> SigError {
    SigError::Invalid(message)
}

/// Refuses an expansion that would build constants of a dim past any real model's
/// (an operand's, or a size or count among the arguments), so that a hostile file's
/// sizes cannot allocate without bound.
fn check_constant_sizes(
    op: &str,
    attrs: &[(String, Raw)],
    metas: Metas<'_>,
) -> Result<(), SigError> {
    if !builds_constants(op) {
        return Ok(());
    }
    fn ints_in(r: &Raw, into: &mut Vec<i64>) {
        match r {
            Raw::Int(i) => into.push(*i),
            Raw::List(l) => l.iter().for_each(|x| ints_in(x, into)),
            _ => {}
        }
    }
    let mut dims = vec![];
    for (_, r) in attrs {
        match r {
            Raw::Str(t) => dims.extend(fixed_shape(metas, t)),
            Raw::List(l) => {
                for x in l {
                    if let Raw::Str(t) = x {
                        dims.extend(fixed_shape(metas, t));
                    }
                }
                ints_in(r, &mut dims);
            }
            r => ints_in(r, &mut dims),
        }
    }
    match dims.into_iter().find(|&d| d > MAX_CONSTANT_DIM) {
        Some(big) => Err(invalid(format!(
            "a dim of {big} elements: Kiln spells {op} out with constants of a dim's size, and takes dims of at most {MAX_CONSTANT_DIM}"
        ))),
        None => Ok(()),
    }
}

/// Spells out a call of `op` with arguments `attrs` (all by keyword), naming its
/// tensors after `out`; `None` where `op` is no expansion or this use of it is an op
/// of the op set (`max` without a dim).
pub(super) fn expand(
    out: &str,
    op: &str,
    attrs: &[(String, Raw)],
    metas: Metas<'_>,
) -> Result<Option<Expansion>, SigError> {
    if !ENTRIES.iter().any(|(n, _)| *n == op)
        && !matches!(
            op,
            "max"
                | "min"
                | "clamp"
                | "convolution"
                | "conv1d"
                | "conv2d"
                | "conv3d"
                | "index_copy"
                | "cat"
                | "_grouped_mm"
        )
    {
        return Ok(None);
    }
    if op == "cat" {
        return Ok(cat_without_legacy_empties(out, attrs, metas));
    }
    if matches!(op, "conv1d" | "conv2d" | "conv3d") {
        let mut s = Steps { out, steps: vec![] };
        let a = Args { attrs, metas };
        return Ok(
            conv_padding::expand(&mut s, op, &a)?.map(|results| Expansion {
                steps: s.steps,
                results,
            }),
        );
    }
    if op == "convolution" || op.starts_with("conv_transpose") {
        // A transposed convolution is a direct one of the spread input (`convolution`
        // with transposed false binds as it is).
        let mut s = Steps { out, steps: vec![] };
        let a = Args { attrs, metas };
        return Ok(
            conv_transpose::expand(&mut s, op, &a)?.map(|results| Expansion {
                steps: s.steps,
                results,
            }),
        );
    }
    if matches!(op, "max" | "min") && get(attrs, "dim").is_none() {
        return Ok(None);
    }
    let tensor_bound = |b| matches!(get(attrs, b), Some(Raw::Str(_)));
    if op == "clamp" && !tensor_bound("min") && !tensor_bound("max") {
        return Ok(None);
    }
    check_constant_sizes(op, attrs, metas)?;
    let mut s = Steps { out, steps: vec![] };
    let a = Args { attrs, metas };
    let results = match more::expand(&mut s, op, &a)? {
        Some(r) => r,
        // Kiln's own op, for a tensor of at least one dim.
        None if op == "index_copy" => return Ok(None),
        None if matches!(op, "sort" | "argsort" | "topk") => {
            sort::expand(&mut s, op, &a)?.unwrap_or_default()
        }
        None if matches!(op, "scatter" | "scatter_add" | "index_add") => {
            scatter::expand(&mut s, op, &a)?.unwrap_or_default()
        }
        // `_grouped_mm` of a 2-D by a 3-D operand binds as Kiln's op.
        None if matches!(op, "histc" | "_grouped_mm" | "grouped_mm_fallback") => {
            match moe::expand(&mut s, op, &a)? {
                Some(r) => r,
                None => return Ok(None),
            }
        }
        None => match extra::expand(&mut s, op, &a)? {
            Some(r) => r,
            None => vec![expand_one(&mut s, op, &a)?],
        },
    };
    Ok(Some(Expansion {
        steps: s.steps,
        results,
    }))
}

/// A call's arguments, with the metadata of the tensors they name.
struct Args<'a> {
    attrs: &'a [(String, Raw)],
    metas: Metas<'a>,
}

impl Args<'_> {
    fn get(&self, name: &str) -> Option<&Raw> {
        get(self.attrs, name)
    }

    /// The metadata of tensor `x`, its sizes integers: an expansion spells out its ops
    /// at integer sizes, and refuses symbolic ones by name.
    fn meta(&self, x: &str) -> Result<FixedMeta, SigError> {
        let m =
            (self.metas)(x).ok_or_else(|| invalid(format!("`{x}` names no tensor known here")))?;
        m.fixed().ok_or_else(|| {
            invalid(format!(
                "`{x}` has symbolic sizes {:?}, which this op is expanded at integer sizes only \
                 for so far; compile at one size (--specialize)",
                m.shape
            ))
        })
    }

    /// Tensor argument `name` and its metadata.
    fn tensor(&self, name: &str) -> Result<(String, FixedMeta), SigError> {
        match self.get(name) {
            Some(Raw::Str(x)) => self.meta(x).map(|m| (x.clone(), m)),
            _ => Err(invalid(format!("needs the tensor `{name}`"))),
        }
    }

    /// Argument `name` as it was given (a tensor or a number).
    fn operand(&self, name: &str) -> Result<Raw, SigError> {
        self.get(name)
            .cloned()
            .ok_or_else(|| invalid(format!("needs `{name}`")))
    }

    /// Number argument `name`, `default` where it is absent.
    fn num(&self, name: &str, default: f64) -> f64 {
        self.get(name).and_then(number).unwrap_or(default)
    }

    /// Integer argument `name`.
    fn int(&self, name: &str) -> Option<i64> {
        match self.get(name) {
            Some(Raw::Int(i)) => Some(*i),
            _ => None,
        }
    }

    /// Integer argument `name`, `default` where it is absent, an error where it is
    /// something else.
    fn int_or(&self, name: &str, default: i64) -> Result<i64, SigError> {
        match self.get(name) {
            Some(Raw::Int(d)) => Ok(*d),
            None => Ok(default),
            Some(r) => Err(invalid(format!("`{name}` must be an integer, found {r:?}"))),
        }
    }

    fn flag(&self, name: &str) -> bool {
        matches!(self.get(name), Some(Raw::Bool(true)))
    }

    /// The tensors of list argument `name`.
    fn tensors(&self, name: &str) -> Result<Vec<(String, FixedMeta)>, SigError> {
        let Some(Raw::List(xs)) = self.get(name) else {
            return Err(invalid(format!("needs the list `{name}`")));
        };
        xs.iter()
            .map(|x| match x {
                Raw::Str(x) => self.meta(x).map(|m| (x.clone(), m)),
                _ => Err(invalid(format!("`{name}` must name tensors"))),
            })
            .collect()
    }
}

/// [`expand`] of the ops of one output.
fn expand_one(s: &mut Steps<'_>, op: &str, a: &Args<'_>) -> Result<String, SigError> {
    match op {
        "stack" => {
            let xs = a.tensors("tensors")?;
            let Some((_, first)) = xs.first() else {
                return Err(invalid("stack of no tensors".into()));
            };
            let d = wrap(a.int_or("dim", 0)?, first.rank() + 1).map_err(invalid)?;
            let names: Vec<String> = xs.into_iter().map(|(x, _)| x).collect();
            Ok(s.stack(&names, d))
        }
        "repeat_interleave" => repeat_interleave(s, a),
        "linalg_vector_norm" | "norm" => {
            let (x, m) = a.tensor("self")?;
            if !m.dtype.is_float() {
                return Err(invalid(format!(
                    "the norm of a {} tensor: PyTorch takes floating-point tensors only",
                    m.dtype
                )));
            }
            let ord = match a.get("ord").or_else(|| a.get("p")) {
                None => 2.0,
                Some(r) => number(r)
                    .ok_or_else(|| invalid(format!("`ord` must be a number, found {r:?}")))?,
            };
            let dims = int_list(a.get("dim")).filter(|d| !d.is_empty());
            let x = match a.get("dtype") {
                Some(d @ Raw::Str(_)) => {
                    s.op("_to_copy", vec![("self", t(&x)), ("dtype", d.clone())])
                }
                _ => x,
            };
            Ok(vector_norm(s, &x, ord, dims.as_deref(), a.flag("keepdim")))
        }
        "_weight_norm" => weight_norm(s, a),
        "softplus" => {
            let (x, _) = a.tensor("self")?;
            let beta = a.num("beta", 1.0);
            let threshold = a.num("threshold", 20.0);
            // PyTorch: x where beta * x > threshold, else log1p(exp(beta * x)) / beta.
            let bx = s.bin("mul", t(&x), Raw::Float(beta));
            let e = s.un("exp", &bx);
            let l = s.un("log1p", &e);
            let y = s.bin("div", t(&l), Raw::Float(beta));
            let c = s.bin("gt", t(&bx), Raw::Float(threshold));
            Ok(s.op(
                "where",
                vec![("condition", t(&c)), ("self", t(&x)), ("other", t(&y))],
            ))
        }
        "eye" => eye(s, a),
        "einsum" => {
            let Some(Raw::Str(equation)) = a.get("equation") else {
                return Err(invalid("needs the string `equation`".into()));
            };
            let operands: Vec<(String, Vec<i64>)> = a
                .tensors("tensors")?
                .into_iter()
                .map(|(x, m)| (x, m.shape))
                .collect();
            einsum::einsum(s, equation, &operands).map_err(invalid)
        }
        "im2col" | "col2im" => im2col_or_col2im(s, op, a),
        _ => interpolate(s, op, a),
    }
}

/// `repeat_interleave(self, repeats, dim)` with an integer count: an unsqueeze, an
/// expand and a reshape.
fn repeat_interleave(s: &mut Steps<'_>, a: &Args<'_>) -> Result<String, SigError> {
    let (x, m) = a.tensor("self")?;
    let shape = m.shape;
    let repeats = match a.get("repeats") {
        Some(Raw::Int(r)) if *r >= 0 => *r,
        Some(Raw::Int(r)) => {
            return Err(invalid(format!("repeats must be non-negative, found {r}")))
        }
        _ => {
            return Err(invalid(
                "repeats given as a tensor: Kiln compiles static shapes and needs the count as an integer".into(),
            ))
        }
    };
    let (x, shape, d) = match a.get("dim") {
        Some(Raw::Int(dim)) if !shape.is_empty() => {
            let d = wrap(*dim, shape.len()).map_err(invalid)?;
            (x, shape, d)
        }
        _ => {
            // No dim: the flattened tensor.
            let n: i64 = shape.iter().product();
            (s.reshape(&x, &[n]), vec![n], 0)
        }
    };
    let mut wide = shape.clone();
    wide.insert(d + 1, repeats);
    let mut result = shape.clone();
    if shape.is_empty() {
        result = vec![repeats];
    } else {
        result[d] *= repeats;
    }
    let u = s.op(
        "unsqueeze",
        vec![("self", t(&x)), ("dim", Raw::Int(d as i64 + 1))],
    );
    let e = s.op("expand", vec![("self", t(&u)), ("size", ints(&wide))]);
    Ok(s.reshape(&e, &result))
}

/// `_weight_norm(v, g, dim)`: `v * (g / ||v||)`, the norm over every dim but `dim`.
fn weight_norm(s: &mut Steps<'_>, a: &Args<'_>) -> Result<String, SigError> {
    let (v, vm) = a.tensor("v")?;
    let (g, _) = a.tensor("g")?;
    let rank = vm.rank();
    let dim = a.int_or("dim", 0)?;
    // torch's norm_except_dim: the norm over every dim but `dim` (all of them
    // for -1), kept as size-1 dims.
    let over: Vec<i64> = if dim == -1 {
        (0..rank as i64).collect()
    } else {
        let d = wrap(dim, rank).map_err(invalid)?;
        (0..rank as i64).filter(|&i| i != d as i64).collect()
    };
    let n = if over.is_empty() {
        s.un("abs", &v)
    } else {
        vector_norm(s, &v, 2.0, Some(&over), true)
    };
    let r = s.bin("div", t(&g), t(&n));
    Ok(s.bin("mul", t(&v), t(&r)))
}

/// `eye(n, m, dtype)`: row index == column index, from two index constants (not
/// n x m of them).
fn eye(s: &mut Steps<'_>, a: &Args<'_>) -> Result<String, SigError> {
    let rows = a.int_or("n", -1)?;
    let cols = a.int_or("m", rows)?;
    if rows < 0 || cols < 0 {
        return Err(invalid(format!(
            "eye needs non-negative sizes, found {rows} x {cols}"
        )));
    }
    let dtype = match a.get("dtype") {
        Some(Raw::Str(d)) => d.clone(),
        _ => "float32".into(),
    };
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
    let e = s.bin("eq", t(&r), t(&c));
    Ok(s.op(
        "_to_copy",
        vec![("self", t(&e)), ("dtype", Raw::Str(dtype))],
    ))
}

/// `im2col` and `col2im` with their kernel, dilation, padding and stride pairs.
fn im2col_or_col2im(s: &mut Steps<'_>, op: &str, a: &Args<'_>) -> Result<String, SigError> {
    let (x, m) = a.tensor("self")?;
    let pair = |name: &str, default: Option<i64>| -> Result<[i64; 2], SigError> {
        match int_list(a.get(name)).as_deref() {
            Some([v]) => Ok([*v, *v]),
            Some([v, w]) => Ok([*v, *w]),
            None => default
                .map(|d| [d, d])
                .ok_or_else(|| invalid(format!("needs `{name}`"))),
            Some(v) => Err(invalid(format!(
                "`{name}` must give 1 or 2 integers, found {v:?}"
            ))),
        }
    };
    let k = pair("kernel_size", None)?;
    let dil = pair("dilation", Some(1))?;
    let pad = pair("padding", Some(0))?;
    let st = pair("stride", Some(1))?;
    if op == "im2col" {
        fold::im2col(s, &x, &m.shape, k, dil, pad, st).map_err(invalid)
    } else {
        let out = pair("output_size", None)?;
        fold::col2im(s, &x, &m.shape, &out, m.dtype, k, dil, pad, st).map_err(invalid)
    }
}

/// The `upsample_*` ops: the output's spatial sizes from `output_size`, or from the
/// input's and the scales (floored, as ATen computes them).
fn interpolate(s: &mut Steps<'_>, op: &str, a: &Args<'_>) -> Result<String, SigError> {
    let (mode, spatial) = upsample_kind(op).ok_or_else(|| invalid("not an expansion".into()))?;
    let (x, inp) = a.tensor("input").or_else(|_| a.tensor("self"))?;
    if inp.rank() < spatial {
        return Err(invalid(format!(
            "input of shape {:?} for a {spatial}-d interpolation",
            inp.shape
        )));
    }
    // The scales as given (`scale_factors` of the .vec form, `scales_*` of the
    // others): ATen maps output to input positions by them where given.
    let mut scales: Vec<Option<f64>> = match float_list(a.get("scale_factors")) {
        Some(v) if v.len() == spatial => v.into_iter().map(Some).collect(),
        _ => ["scales_d", "scales_h", "scales_w"][3 - spatial..]
            .iter()
            .map(|n| a.get(n).and_then(number))
            .collect(),
    };
    if spatial == 1 {
        if let Some(v) = a.get("scales").and_then(number) {
            scales = vec![Some(v)];
        }
    }
    let lead = inp.rank() - spatial;
    let sizes: Vec<i64> = match int_list(a.get("output_size")) {
        Some(v) if v.len() == spatial => v,
        Some(v) if !v.is_empty() => {
            return Err(invalid(format!(
                "output_size {v:?} for a {spatial}-d interpolation"
            )))
        }
        _ => inp.shape[lead..]
            .iter()
            .zip(&scales)
            .map(|(&n, sc)| match sc {
                Some(sc) if sc.is_finite() && *sc > 0.0 => Ok((n as f64 * sc).floor() as i64),
                _ => Err(invalid(
                    "needs `output_size` or a positive scale for every spatial dim".into(),
                )),
            })
            .collect::<Result<_, _>>()?,
    };
    if let Some(&big) = sizes
        .iter()
        .find(|&&d| !(0..=MAX_CONSTANT_DIM).contains(&d))
    {
        return Err(invalid(format!(
            "an output size of {big}: Kiln takes interpolations to sizes from 0 to {MAX_CONSTANT_DIM}"
        )));
    }
    let mut out = inp.shape.clone();
    out[lead..].copy_from_slice(&sizes);
    let outm = FixedMeta::contiguous(out, inp.dtype);
    upsample::upsample(s, &x, &inp, &outm, mode, a.flag("align_corners"), &scales).map_err(invalid)
}

/// `||x||_ord` over `dims` (all when `None`).
fn vector_norm(
    s: &mut Steps<'_>,
    x: &str,
    ord: f64,
    dims: Option<&[i64]>,
    keepdim: bool,
) -> String {
    if ord == 2.0 {
        let sq = s.bin("mul", t(x), t(x));
        let sum = s.reduce("sum", &sq, dims, keepdim);
        return s.un("sqrt", &sum);
    }
    if ord == 0.0 {
        let nz = s.bin("ne", t(x), Raw::Int(0));
        let dtype = Raw::Str("float32".into());
        let f = s.op("_to_copy", vec![("self", t(&nz)), ("dtype", dtype)]);
        return s.reduce("sum", &f, dims, keepdim);
    }
    let a = s.un("abs", x);
    if ord == f64::INFINITY {
        return s.reduce("amax", &a, dims, keepdim);
    }
    if ord == f64::NEG_INFINITY {
        return s.reduce("amin", &a, dims, keepdim);
    }
    if ord == 1.0 {
        return s.reduce("sum", &a, dims, keepdim);
    }
    let p = s.bin("pow", t(&a), Raw::Float(ord));
    let sum = s.reduce("sum", &p, dims, keepdim);
    s.bin("pow", t(&sum), Raw::Float(1.0 / ord))
}

/// Tensor `name`'s sizes where they are all integers; none otherwise.
fn fixed_shape(metas: Metas<'_>, name: &str) -> Vec<i64> {
    metas(name)
        .and_then(|m| m.fixed())
        .map(|m| m.shape)
        .unwrap_or_default()
}
