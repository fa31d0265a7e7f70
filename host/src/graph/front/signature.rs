//! ATen signatures: binds a node's positional `args` and keyword `attrs` to the op's
//! parameters (either spelling allowed) and builds the typed [`Op`].
//!
//! Works on [`Raw`] values, so it knows nothing of TOML; it must never resolve tensor
//! names (the importer does) or look at shapes.

use crate::graph::dtype::DType;
use crate::graph::ir::Scalar;
use crate::graph::ops::{BinaryOp, GeluApprox, NoOpKind, Op, PadMode, ReduceOp, UnaryOp};

/// A parsed argument value, before it is typed by a signature.
#[derive(Clone, Debug, PartialEq)]
pub enum Raw {
    /// a string (a tensor name, a dtype, a mode)
    Str(String),
    /// an integer
    Int(i64),
    /// a float
    Float(f64),
    /// a bool
    Bool(bool),
    /// a list
    List(Vec<Raw>),
    /// `None` inside a list (`index.Tensor`'s optional indices); a missing argument is
    /// simply absent
    None,
}

impl Raw {
    fn kind(&self) -> &'static str {
        match self {
            Raw::Str(_) => "a string",
            Raw::Int(_) => "an integer",
            Raw::Float(_) => "a float",
            Raw::Bool(_) => "a bool",
            Raw::List(_) => "a list",
            Raw::None => "None",
        }
    }
}

/// A tensor operand before name resolution.
#[derive(Clone, Debug, PartialEq)]
pub enum Operand {
    /// a reference by name
    Name(String),
    /// a number
    Scalar(Scalar),
}

/// Why an op's arguments do not fit its signature.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SigError {
    /// The op is not in the op set.
    #[error("unknown op `{0}`")]
    UnknownOp(String),
    /// Too many positional arguments.
    #[error("`{op}` takes at most {max} positional arguments, found {found}")]
    TooMany {
        /// the op
        op: String,
        /// its parameter count
        max: usize,
        /// the count given
        found: usize,
    },
    /// A keyword the op does not have.
    #[error("`{op}` has no parameter `{name}` (parameters: {params})")]
    UnknownAttr {
        /// the op
        op: String,
        /// the keyword
        name: String,
        /// the op's parameters
        params: String,
    },
    /// Given both positionally and as a keyword.
    #[error("parameter `{0}` is given twice (positionally and in attrs)")]
    Twice(String),
    /// A required parameter is missing.
    #[error("`{op}` needs parameter `{name}`")]
    Missing {
        /// the op
        op: String,
        /// the parameter
        name: String,
    },
    /// The value has the wrong type or is out of range.
    #[error("parameter `{name}`: expected {expected}, found {found}")]
    Bad {
        /// the parameter
        name: String,
        /// what it should be
        expected: String,
        /// what was given
        found: String,
    },
}

/// Parameter kinds.
#[derive(Clone, Copy, PartialEq)]
enum K {
    T,
    Ts,
    Ot,
    Tl,
    /// a list of tensors in which entries may be `None`
    Otl,
    I,
    Il,
    F,
    B,
    S,
    D,
    N,
}

type Sig = &'static [(&'static str, K, bool)];

const UNARY: Sig = &[("self", K::T, true)];
const BIN: Sig = &[("self", K::Ts, true), ("other", K::Ts, true)];
const ADD: Sig = &[
    ("self", K::Ts, true),
    ("other", K::Ts, true),
    ("alpha", K::N, false),
];

const CONV: Sig = &[
    ("input", K::T, true),
    ("weight", K::T, true),
    ("bias", K::Ot, false),
    ("stride", K::Il, false),
    ("padding", K::Il, false),
    ("dilation", K::Il, false),
    ("groups", K::I, false),
];
const POOL: Sig = &[
    ("self", K::T, true),
    ("kernel_size", K::Il, true),
    ("stride", K::Il, false),
    ("padding", K::Il, false),
    ("dilation", K::Il, false),
    ("ceil_mode", K::B, false),
];

/// Every op of the op set that is not a unary function ([`UnaryOp::ALL`]),
/// with its signature: the one list that both binds a node and names the op
/// set (for "did you mean").
const SIGNATURES: &[(&str, Sig)] = {
    use K::*;
    &[
        ("add", ADD),
        ("sub", ADD),
        ("mul", BIN),
        ("pow", BIN),
        ("maximum", BIN),
        ("minimum", BIN),
        ("eq", BIN),
        ("ne", BIN),
        ("lt", BIN),
        ("le", BIN),
        ("gt", BIN),
        ("ge", BIN),
        (
            "div",
            &[
                ("self", Ts, true),
                ("other", Ts, true),
                ("rounding_mode", S, false),
            ],
        ),
        ("gelu", &[("self", T, true), ("approximate", S, false)]),
        (
            "where",
            &[
                ("condition", T, true),
                ("self", Ts, true),
                ("other", Ts, true),
            ],
        ),
        (
            "clamp",
            &[("self", T, true), ("min", N, false), ("max", N, false)],
        ),
        (
            "to",
            &[
                ("self", T, true),
                ("dtype", D, false),
                ("non_blocking", B, false),
                ("copy", B, false),
            ],
        ),
        ("_to_copy", &[("self", T, true), ("dtype", D, false)]),
        (
            "sum",
            &[
                ("self", T, true),
                ("dim", Il, false),
                ("keepdim", B, false),
                ("dtype", D, false),
            ],
        ),
        (
            "mean",
            &[
                ("self", T, true),
                ("dim", Il, false),
                ("keepdim", B, false),
                ("dtype", D, false),
            ],
        ),
        (
            "amax",
            &[("self", T, true), ("dim", Il, false), ("keepdim", B, false)],
        ),
        (
            "amin",
            &[("self", T, true), ("dim", Il, false), ("keepdim", B, false)],
        ),
        (
            "var",
            &[
                ("self", T, true),
                ("dim", Il, false),
                ("correction", F, false),
                ("keepdim", B, false),
                ("unbiased", B, false),
            ],
        ),
        (
            "softmax",
            &[("self", T, true), ("dim", I, true), ("dtype", D, false)],
        ),
        (
            "log_softmax",
            &[("self", T, true), ("dim", I, true), ("dtype", D, false)],
        ),
        (
            "_softmax",
            &[
                ("self", T, true),
                ("dim", I, true),
                ("half_to_float", B, false),
            ],
        ),
        (
            "_log_softmax",
            &[
                ("self", T, true),
                ("dim", I, true),
                ("half_to_float", B, false),
            ],
        ),
        (
            "layer_norm",
            &[
                ("input", T, true),
                ("normalized_shape", Il, true),
                ("weight", Ot, false),
                ("bias", Ot, false),
                ("eps", F, false),
                ("cudnn_enable", B, false),
            ],
        ),
        (
            "native_layer_norm",
            &[
                ("input", T, true),
                ("normalized_shape", Il, true),
                ("weight", Ot, false),
                ("bias", Ot, false),
                ("eps", F, false),
            ],
        ),
        (
            "rms_norm",
            &[
                ("input", T, true),
                ("normalized_shape", Il, true),
                ("weight", Ot, false),
                ("eps", F, false),
            ],
        ),
        (
            "linear",
            &[("input", T, true), ("weight", T, true), ("bias", Ot, false)],
        ),
        (
            "addmm",
            &[
                ("self", T, true),
                ("mat1", T, true),
                ("mat2", T, true),
                ("beta", N, false),
                ("alpha", N, false),
            ],
        ),
        ("mm", &[("self", T, true), ("mat2", T, true)]),
        ("bmm", &[("self", T, true), ("mat2", T, true)]),
        ("matmul", &[("self", T, true), ("other", T, true)]),
        ("reshape", &[("self", T, true), ("shape", Il, true)]),
        ("view", &[("self", T, true), ("size", Il, true)]),
        ("permute", &[("self", T, true), ("dims", Il, true)]),
        (
            "transpose",
            &[("self", T, true), ("dim0", I, true), ("dim1", I, true)],
        ),
        ("unsqueeze", &[("self", T, true), ("dim", I, true)]),
        ("squeeze", &[("self", T, true), ("dim", Il, false)]),
        (
            "expand",
            &[
                ("self", T, true),
                ("size", Il, true),
                ("implicit", B, false),
            ],
        ),
        (
            "select",
            &[("self", T, true), ("dim", I, true), ("index", I, true)],
        ),
        (
            "slice",
            &[
                ("self", T, true),
                ("dim", I, false),
                ("start", I, false),
                ("end", I, false),
                ("step", I, false),
            ],
        ),
        (
            "split",
            &[
                ("self", T, true),
                ("split_size", I, true),
                ("dim", I, false),
            ],
        ),
        (
            "split_with_sizes",
            &[
                ("self", T, true),
                ("split_sizes", Il, true),
                ("dim", I, false),
            ],
        ),
        ("getitem", &[("self", T, true), ("index", I, true)]),
        ("contiguous", UNARY),
        ("clone", UNARY),
        ("alias", UNARY),
        ("cat", &[("tensors", Tl, true), ("dim", I, false)]),
        (
            "dropout",
            &[("input", T, true), ("p", F, false), ("train", B, false)],
        ),
        (
            "any",
            &[("self", T, true), ("dim", Il, false), ("keepdim", B, false)],
        ),
        (
            "all",
            &[("self", T, true), ("dim", Il, false), ("keepdim", B, false)],
        ),
        (
            "group_norm",
            &[
                ("input", T, true),
                ("num_groups", I, true),
                ("weight", Ot, false),
                ("bias", Ot, false),
                ("eps", F, false),
                ("cudnn_enabled", B, false),
            ],
        ),
        (
            "native_group_norm",
            &[
                ("input", T, true),
                ("weight", Ot, false),
                ("bias", Ot, false),
                ("N", I, true),
                ("C", I, true),
                ("HxW", I, true),
                ("group", I, true),
                ("eps", F, true),
            ],
        ),
        ("repeat", &[("self", T, true), ("repeats", Il, true)]),
        ("fmod", BIN),
        ("remainder", BIN),
        (
            "masked_fill",
            &[("self", T, true), ("mask", T, true), ("value", Ts, true)],
        ),
        ("type_as", &[("self", T, true), ("other", T, true)]),
        (
            "copy",
            &[
                ("self", T, true),
                ("src", T, true),
                ("non_blocking", B, false),
            ],
        ),
        ("fill", &[("self", T, true), ("value", Ts, true)]),
        (
            "baddbmm",
            &[
                ("self", T, true),
                ("batch1", T, true),
                ("batch2", T, true),
                ("beta", N, false),
                ("alpha", N, false),
            ],
        ),
        (
            "avg_pool1d",
            &[
                ("self", T, true),
                ("kernel_size", Il, true),
                ("stride", Il, false),
                ("padding", Il, false),
                ("ceil_mode", B, false),
                ("count_include_pad", B, false),
            ],
        ),
        (
            "avg_pool2d",
            &[
                ("self", T, true),
                ("kernel_size", Il, true),
                ("stride", Il, false),
                ("padding", Il, false),
                ("ceil_mode", B, false),
                ("count_include_pad", B, false),
                ("divisor_override", I, false),
            ],
        ),
        (
            "constant_pad_nd",
            &[("self", T, true), ("pad", Il, true), ("value", N, false)],
        ),
        (
            "pad",
            &[
                ("self", T, true),
                ("pad", Il, true),
                ("mode", S, false),
                ("value", F, false),
            ],
        ),
        (
            "roll",
            &[("self", T, true), ("shifts", Il, true), ("dims", Il, false)],
        ),
        (
            "slice_scatter",
            &[
                ("self", T, true),
                ("src", T, true),
                ("dim", I, false),
                ("start", I, false),
                ("end", I, false),
                ("step", I, false),
            ],
        ),
        (
            "select_scatter",
            &[
                ("self", T, true),
                ("src", T, true),
                ("dim", I, true),
                ("index", I, true),
            ],
        ),
        (
            "as_strided",
            &[
                ("self", T, true),
                ("size", Il, true),
                ("stride", Il, true),
                ("storage_offset", I, false),
            ],
        ),
        (
            "adaptive_avg_pool1d",
            &[("self", T, true), ("output_size", Il, true)],
        ),
        (
            "_adaptive_avg_pool2d",
            &[("self", T, true), ("output_size", Il, true)],
        ),
        (
            "adaptive_avg_pool3d",
            &[("self", T, true), ("output_size", Il, true)],
        ),
        (
            "_adaptive_avg_pool3d",
            &[("self", T, true), ("output_size", Il, true)],
        ),
        ("bitwise_and", BIN),
        ("bitwise_or", BIN),
        ("bitwise_xor", BIN),
        ("logical_not", UNARY),
        (
            "min",
            &[("self", T, true), ("other", T, false), ("dim", I, false)],
        ),
        (
            "max",
            &[("self", T, true), ("other", T, false), ("dim", I, false)],
        ),
        (
            "hardtanh",
            &[
                ("self", T, true),
                ("min_val", N, false),
                ("max_val", N, false),
            ],
        ),
        ("relu6", UNARY),
        (
            "arange",
            &[
                ("start", N, false),
                ("end", N, false),
                ("step", N, false),
                ("dtype", D, false),
            ],
        ),
        (
            "full",
            &[
                ("size", Il, true),
                ("fill_value", N, true),
                ("dtype", D, false),
            ],
        ),
        ("zeros", &[("size", Il, true), ("dtype", D, false)]),
        ("ones", &[("size", Il, true), ("dtype", D, false)]),
        ("scalar_tensor", &[("s", N, true), ("dtype", D, false)]),
        (
            "full_like",
            &[
                ("self", T, true),
                ("fill_value", N, true),
                ("dtype", D, false),
            ],
        ),
        ("zeros_like", &[("self", T, true), ("dtype", D, false)]),
        ("ones_like", &[("self", T, true), ("dtype", D, false)]),
        (
            "new_full",
            &[
                ("self", T, true),
                ("size", Il, true),
                ("fill_value", N, true),
                ("dtype", D, false),
            ],
        ),
        (
            "new_ones",
            &[("self", T, true), ("size", Il, true), ("dtype", D, false)],
        ),
        (
            "new_zeros",
            &[("self", T, true), ("size", Il, true), ("dtype", D, false)],
        ),
        (
            "embedding",
            &[
                ("weight", T, true),
                ("indices", T, true),
                ("padding_idx", I, false),
                ("scale_grad_by_freq", B, false),
                ("sparse", B, false),
            ],
        ),
        ("index", &[("self", T, true), ("indices", Otl, true)]),
        (
            "gather",
            &[
                ("self", T, true),
                ("dim", I, true),
                ("index", T, true),
                ("sparse_grad", B, false),
            ],
        ),
        (
            "cumsum",
            &[("self", T, true), ("dim", I, true), ("dtype", D, false)],
        ),
        (
            "diff",
            &[
                ("self", T, true),
                ("n", I, false),
                ("dim", I, false),
                ("prepend", Ot, false),
                ("append", Ot, false),
            ],
        ),
        (
            "scaled_dot_product_attention",
            &[
                ("query", T, true),
                ("key", T, true),
                ("value", T, true),
                ("attn_mask", Ot, false),
                ("dropout_p", F, false),
                ("is_causal", B, false),
                ("scale", F, false),
                ("enable_gqa", B, false),
            ],
        ),
        (
            "convolution",
            &[
                ("input", T, true),
                ("weight", T, true),
                ("bias", Ot, false),
                ("stride", Il, false),
                ("padding", Il, false),
                ("dilation", Il, false),
                ("transposed", B, false),
                ("output_padding", Il, false),
                ("groups", I, false),
            ],
        ),
        ("conv1d", CONV),
        ("conv2d", CONV),
        ("conv3d", CONV),
        (
            "batch_norm",
            &[
                ("input", T, true),
                ("weight", Ot, false),
                ("bias", Ot, false),
                ("running_mean", T, true),
                ("running_var", T, true),
                ("training", B, false),
                ("momentum", F, false),
                ("eps", F, false),
                ("cudnn_enabled", B, false),
            ],
        ),
        (
            "_native_batch_norm_legit_no_training",
            &[
                ("input", T, true),
                ("weight", Ot, false),
                ("bias", Ot, false),
                ("running_mean", T, true),
                ("running_var", T, true),
                ("momentum", F, false),
                ("eps", F, false),
            ],
        ),
        ("max_pool2d", POOL),
        ("max_pool2d_with_indices", POOL),
        (
            "adaptive_avg_pool2d",
            &[("self", T, true), ("output_size", Il, true)],
        ),
        (
            "flatten",
            &[
                ("self", T, true),
                ("start_dim", I, false),
                ("end_dim", I, false),
            ],
        ),
        ("detach", UNARY),
        ("lift_fresh_copy", UNARY),
        (
            "_assert_tensor_metadata",
            &[
                ("a", T, true),
                ("size", Il, false),
                ("stride", Il, false),
                ("dtype", D, false),
            ],
        ),
    ]
};

fn signature(op: &str) -> Option<Sig> {
    if UnaryOp::ALL.iter().any(|(_, n)| *n == op) {
        return Some(UNARY);
    }
    SIGNATURES
        .iter()
        .find(|(name, _)| *name == op)
        .map(|(_, sig)| *sig)
}

/// The parameter names of `op`, in order; `None` for an op outside the op set.
pub fn param_names(op: &str) -> Option<Vec<&'static str>> {
    signature(op).map(|sig| sig.iter().map(|p| p.0).collect())
}

/// Every op name of the op set.
pub fn op_names() -> impl Iterator<Item = &'static str> {
    SIGNATURES
        .iter()
        .map(|(name, _)| *name)
        .chain(UnaryOp::ALL.iter().map(|(_, name)| *name))
}

/// The known op names closest to an unknown `name` (a typo's likely fixes),
/// best first: at most three, each within about a third of its length in
/// edits and close to the best.
pub fn similar_ops(name: &str) -> Vec<&'static str> {
    let mut scored: Vec<(f64, &'static str)> = op_names()
        .map(|known| (strsim::normalized_damerau_levenshtein(name, known), known))
        .filter(|(score, _)| *score >= 0.6)
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(b.1)));
    scored.dedup_by(|a, b| a.1 == b.1);
    let best = scored.first().map_or(0.0, |s| s.0);
    scored
        .into_iter()
        .take_while(|(score, _)| *score >= best - 0.1)
        .take(3)
        .map(|(_, n)| n)
        .collect()
}

/// Arguments bound to parameter names.
struct Bound<'a> {
    sig: Sig,
    vals: Vec<Option<&'a Raw>>,
}

fn bad(name: &str, expected: &str, raw: &Raw) -> SigError {
    SigError::Bad {
        name: name.into(),
        expected: expected.into(),
        found: format!("{} ({raw:?})", raw.kind()),
    }
}

impl<'a> Bound<'a> {
    fn get(&self, name: &str) -> Option<&'a Raw> {
        let i = self.sig.iter().position(|p| p.0 == name)?;
        self.vals[i]
    }
    fn int(&self, name: &str) -> Result<Option<i64>, SigError> {
        match self.get(name) {
            None => Ok(None),
            Some(Raw::Int(i)) => Ok(Some(*i)),
            Some(r) => Err(bad(name, "an integer", r)),
        }
    }
    fn int_or(&self, name: &str, d: i64) -> Result<i64, SigError> {
        Ok(self.int(name)?.unwrap_or(d))
    }
    fn ints(&self, name: &str) -> Result<Option<Vec<i64>>, SigError> {
        match self.get(name) {
            None => Ok(None),
            Some(Raw::Int(i)) => Ok(Some(vec![*i])),
            Some(r @ Raw::List(l)) => l
                .iter()
                .map(|x| match x {
                    Raw::Int(i) => Ok(*i),
                    _ => Err(bad(name, "a list of integers", r)),
                })
                .collect::<Result<Vec<_>, _>>()
                .map(Some),
            Some(r) => Err(bad(name, "a list of integers", r)),
        }
    }
    fn float(&self, name: &str) -> Result<Option<f64>, SigError> {
        match self.get(name) {
            None => Ok(None),
            Some(Raw::Int(i)) => Ok(Some(*i as f64)),
            Some(Raw::Float(f)) => Ok(Some(*f)),
            Some(r) => Err(bad(name, "a number", r)),
        }
    }
    fn boolean(&self, name: &str) -> Result<bool, SigError> {
        match self.get(name) {
            None => Ok(false),
            Some(Raw::Bool(b)) => Ok(*b),
            Some(r) => Err(bad(name, "a bool", r)),
        }
    }
    fn string(&self, name: &str) -> Result<Option<&'a str>, SigError> {
        match self.get(name) {
            None => Ok(None),
            Some(Raw::Str(s)) => Ok(Some(s)),
            Some(r) => Err(bad(name, "a string", r)),
        }
    }
    fn dtype(&self, name: &str) -> Result<Option<DType>, SigError> {
        match self.get(name) {
            None => Ok(None),
            Some(r @ Raw::Str(s)) => DType::parse(s).map(Some).ok_or_else(|| {
                bad(
                    name,
                    "a dtype (float32 float16 bfloat16 float64 int64 int32 bool)",
                    r,
                )
            }),
            Some(r) => Err(bad(name, "a dtype name", r)),
        }
    }
    fn scalar(&self, name: &str) -> Result<Option<Scalar>, SigError> {
        match self.get(name) {
            None => Ok(None),
            Some(r) => to_scalar(r)
                .map(Some)
                .ok_or_else(|| bad(name, "a number", r)),
        }
    }
    fn present(&self, name: &str) -> bool {
        self.get(name).is_some()
    }
}

fn to_scalar(r: &Raw) -> Option<Scalar> {
    match r {
        Raw::Int(i) => Some(Scalar::Int(*i)),
        Raw::Float(f) => Some(Scalar::Float(*f)),
        Raw::Bool(b) => Some(Scalar::Bool(*b)),
        _ => None,
    }
}

/// Whether `name` is in the op set.
pub fn is_known(name: &str) -> bool {
    signature(name).is_some()
}

/// Binds `args` (positional) and `attrs` (keyword) to `op_name`'s parameters and returns
/// the typed op and its tensor operands in ATen order.
pub fn bind(
    op_name: &str,
    args: &[Raw],
    attrs: &[(String, Raw)],
) -> Result<(Op, Vec<Operand>), SigError> {
    let sig = signature(op_name).ok_or_else(|| SigError::UnknownOp(op_name.into()))?;
    if args.len() > sig.len() {
        return Err(SigError::TooMany {
            op: op_name.into(),
            max: sig.len(),
            found: args.len(),
        });
    }
    let mut vals: Vec<Option<&Raw>> = vec![None; sig.len()];
    for (i, a) in args.iter().enumerate() {
        vals[i] = Some(a);
    }
    for (k, v) in attrs {
        let i = sig
            .iter()
            .position(|p| p.0 == k)
            .ok_or_else(|| SigError::UnknownAttr {
                op: op_name.into(),
                name: k.clone(),
                params: sig.iter().map(|p| p.0).collect::<Vec<_>>().join(", "),
            })?;
        if vals[i].is_some() {
            return Err(SigError::Twice(k.clone()));
        }
        vals[i] = Some(v);
    }
    let mut operands = Vec::new();
    for (i, (name, kind, required)) in sig.iter().enumerate() {
        match vals[i] {
            None if *required => {
                return Err(SigError::Missing {
                    op: op_name.into(),
                    name: (*name).into(),
                })
            }
            None => {}
            Some(r) => match kind {
                K::T | K::Ot => match r {
                    Raw::Str(s) => operands.push(Operand::Name(s.clone())),
                    _ => return Err(bad(name, "a tensor name", r)),
                },
                K::Ts => match (r, to_scalar(r)) {
                    (Raw::Str(s), _) => operands.push(Operand::Name(s.clone())),
                    (_, Some(s)) => operands.push(Operand::Scalar(s)),
                    _ => return Err(bad(name, "a tensor name or a number", r)),
                },
                K::Otl => match r {
                    Raw::List(l) if l.iter().any(|x| matches!(x, Raw::Str(_))) => {
                        for x in l {
                            match x {
                                Raw::Str(s) => operands.push(Operand::Name(s.clone())),
                                // TOML has no null: an empty list stands for None.
                                Raw::None => {}
                                Raw::List(l) if l.is_empty() => {}
                                _ => {
                                    return Err(bad(
                                        name,
                                        "a list of tensor names or None ([] in a graph file)",
                                        r,
                                    ))
                                }
                            }
                        }
                    }
                    _ => return Err(bad(name, "a list with at least one tensor name", r)),
                },
                K::Tl => match r {
                    Raw::List(l) if !l.is_empty() => {
                        for x in l {
                            match x {
                                Raw::Str(s) => operands.push(Operand::Name(s.clone())),
                                _ => return Err(bad(name, "a non-empty list of tensor names", r)),
                            }
                        }
                    }
                    _ => return Err(bad(name, "a non-empty list of tensor names", r)),
                },
                _ => {}
            },
        }
    }
    let b = Bound { sig, vals };
    let op = build(op_name, &b)?;
    if op_name == "masked_fill" {
        // `where(mask, value, self)`.
        operands.rotate_left(1);
    }
    if op_name == "logical_not" {
        // `x == false`: true exactly where x is zero, for every dtype.
        operands.push(Operand::Scalar(Scalar::Bool(false)));
    }
    Ok((op, operands))
}

fn build(name: &str, b: &Bound) -> Result<Op, SigError> {
    if let Some((u, _)) = UnaryOp::ALL.iter().find(|(_, n)| *n == name) {
        return Ok(Op::Unary(*u));
    }
    if let Some((op, _)) = BinaryOp::ALL.iter().find(|(_, n)| *n == name) {
        let mut op = *op;
        if op == BinaryOp::Div {
            op = match b.string("rounding_mode")? {
                None => BinaryOp::Div,
                Some("trunc") => BinaryOp::DivTrunc,
                Some("floor") => BinaryOp::DivFloor,
                Some(other) => {
                    return Err(bad(
                        "rounding_mode",
                        "\"trunc\" or \"floor\"",
                        &Raw::Str(other.into()),
                    ))
                }
            };
        }
        let alpha = if matches!(op, BinaryOp::Add | BinaryOp::Sub) {
            b.scalar("alpha")?
        } else {
            None
        };
        return Ok(Op::Binary { op, alpha });
    }
    let reduce = |op| -> Result<Op, SigError> {
        let dtype = if matches!(op, ReduceOp::Sum | ReduceOp::Mean) {
            b.dtype("dtype")?
        } else {
            None
        };
        Ok(Op::Reduce {
            op,
            dims: b.ints("dim")?.filter(|d| !d.is_empty()),
            keepdim: b.boolean("keepdim")?,
            dtype,
        })
    };
    let softmax = |log: bool| -> Result<Op, SigError> {
        let (half_to_float, dtype) = if name.starts_with('_') {
            (b.boolean("half_to_float")?, None)
        } else {
            let dtype = b.dtype("dtype")?;
            if dtype.is_some_and(|d| !d.is_float()) {
                return Err(bad(
                    "dtype",
                    "a floating-point dtype",
                    b.get("dtype").unwrap_or(&Raw::None),
                ));
            }
            (false, dtype)
        };
        Ok(Op::Softmax {
            dim: b.int_or("dim", 0)?,
            log,
            half_to_float,
            dtype,
        })
    };
    let need_ints = |n: &str| -> Result<Vec<i64>, SigError> { Ok(b.ints(n)?.unwrap_or_default()) };
    Ok(match name {
        "gelu" => Op::Gelu {
            approximate: match b.string("approximate")? {
                None | Some("none") => GeluApprox::None,
                Some("tanh") => GeluApprox::Tanh,
                Some(o) => {
                    return Err(bad(
                        "approximate",
                        "\"none\" or \"tanh\"",
                        &Raw::Str(o.into()),
                    ))
                }
            },
        },
        "where" => Op::Where,
        "clamp" => Op::Clamp {
            min: b.scalar("min")?,
            max: b.scalar("max")?,
        },
        "to" | "_to_copy" => match b.dtype("dtype")? {
            Some(dtype) => Op::Cast { dtype },
            // `to(device)` and `_to_copy` without a dtype keep the values as they are.
            None => Op::NoOp(NoOpKind::Alias),
        },
        "logical_not" => Op::Binary {
            op: BinaryOp::Eq,
            alpha: None,
        },
        "min" | "max" => {
            if b.present("dim") {
                return Err(bad(
                    "dim",
                    "no dim: `min`/`max` over a dim give values and indices, which Kiln does not compute (amin/amax give the values)",
                    b.get("dim").unwrap_or(&Raw::None),
                ));
            }
            match (name, b.present("other")) {
                ("min", true) => Op::Binary {
                    op: BinaryOp::Minimum,
                    alpha: None,
                },
                ("max", true) => Op::Binary {
                    op: BinaryOp::Maximum,
                    alpha: None,
                },
                ("min", false) => Op::Reduce {
                    op: ReduceOp::Amin,
                    dims: None,
                    keepdim: false,
                    dtype: None,
                },
                _ => Op::Reduce {
                    op: ReduceOp::Amax,
                    dims: None,
                    keepdim: false,
                    dtype: None,
                },
            }
        }
        "hardtanh" => Op::Clamp {
            min: Some(b.scalar("min_val")?.unwrap_or(Scalar::Float(-1.0))),
            max: Some(b.scalar("max_val")?.unwrap_or(Scalar::Float(1.0))),
        },
        "relu6" => Op::Clamp {
            min: Some(Scalar::Int(0)),
            max: Some(Scalar::Int(6)),
        },
        "arange" => {
            let (start, end) = match (b.scalar("start")?, b.scalar("end")?) {
                (Some(s), Some(e)) => (s, e),
                (Some(e), None) | (None, Some(e)) => (Scalar::Int(0), e),
                (None, None) => {
                    return Err(SigError::Missing {
                        op: name.into(),
                        name: "end".into(),
                    })
                }
            };
            let step = b.scalar("step")?.unwrap_or(Scalar::Int(1));
            if step.to_f64() == 0.0 || !step.to_f64().is_finite() {
                return Err(bad(
                    "step",
                    "a finite non-zero number",
                    &Raw::Float(step.to_f64()),
                ));
            }
            Op::Arange {
                start,
                end,
                step,
                dtype: b.dtype("dtype")?,
            }
        }
        "full" | "zeros" | "ones" | "scalar_tensor" | "full_like" | "zeros_like" | "ones_like"
        | "new_full" | "new_ones" | "new_zeros" => {
            let value = match name {
                "zeros" | "zeros_like" | "new_zeros" => Scalar::Int(0),
                "ones" | "ones_like" | "new_ones" => Scalar::Int(1),
                "scalar_tensor" => b.scalar("s")?.unwrap_or(Scalar::Int(0)),
                _ => b.scalar("fill_value")?.unwrap_or(Scalar::Int(0)),
            };
            let size = match name {
                "scalar_tensor" => Some(vec![]),
                "full_like" | "zeros_like" | "ones_like" => None,
                _ => Some(need_ints("size")?),
            };
            // `scalar_tensor`, `zeros` and `ones` default to float32 (the default
            // dtype) whatever their value's kind; `full` takes its value's kind.
            let dtype = match (b.dtype("dtype")?, name) {
                (None, "scalar_tensor" | "zeros" | "ones") => Some(DType::Float32),
                (d, _) => d,
            };
            Op::Full { size, value, dtype }
        }
        "embedding" => Op::Index {
            indexed: vec![true],
        },
        "index" => match b.get("indices") {
            Some(Raw::List(l)) => Op::Index {
                indexed: l.iter().map(|x| matches!(x, Raw::Str(_))).collect(),
            },
            _ => {
                return Err(SigError::Missing {
                    op: name.into(),
                    name: "indices".into(),
                })
            }
        },
        "gather" => Op::Gather {
            dim: b.int_or("dim", 0)?,
        },
        "cumsum" => Op::Cumsum {
            dim: b.int_or("dim", 0)?,
            dtype: b.dtype("dtype")?,
        },
        "diff" => {
            let n = b.int_or("n", 1)?;
            if n < 0 {
                return Err(bad("n", "a non-negative integer", &Raw::Int(n)));
            }
            Op::Diff {
                n,
                dim: b.int_or("dim", -1)?,
                prepend: b.present("prepend"),
                append: b.present("append"),
            }
        }
        "scaled_dot_product_attention" => {
            if b.float("dropout_p")?.unwrap_or(0.0) != 0.0 {
                return Err(bad(
                    "dropout_p",
                    "0 (dropout is a training feature; export the model in eval mode)",
                    b.get("dropout_p").unwrap_or(&Raw::None),
                ));
            }
            Op::Attention {
                mask: b.present("attn_mask"),
                causal: b.boolean("is_causal")?,
                scale: b.float("scale")?,
                gqa: b.boolean("enable_gqa")?,
            }
        }
        "convolution" | "conv1d" | "conv2d" | "conv3d" => {
            if b.boolean("transposed")? {
                return Err(bad(
                    "transposed",
                    "false (transposed convolution is not supported)",
                    &Raw::Bool(true),
                ));
            }
            let spatial = match name {
                "conv1d" => 1,
                "conv3d" => 3,
                _ => 2,
            };
            // PyTorch lets one number stand for every spatial dim.
            let per_dim = |n: &str, default: i64| -> Result<Vec<i64>, SigError> {
                Ok(match b.ints(n)? {
                    None => vec![default; spatial],
                    Some(v) if v.len() == 1 => vec![v[0]; spatial],
                    Some(v) => v,
                })
            };
            let groups = b.int_or("groups", 1)?;
            if groups < 1 {
                return Err(bad("groups", "a positive integer", &Raw::Int(groups)));
            }
            Op::Conv {
                stride: per_dim("stride", 1)?,
                padding: per_dim("padding", 0)?,
                dilation: per_dim("dilation", 1)?,
                groups,
                bias: b.present("bias"),
            }
        }
        "batch_norm" | "_native_batch_norm_legit_no_training" => {
            if b.boolean("training")? {
                return Err(bad(
                    "training",
                    "false (batch statistics are a training feature; export in eval mode)",
                    &Raw::Bool(true),
                ));
            }
            Op::BatchNorm {
                eps: b.float("eps")?.unwrap_or(1e-5),
                weight: b.present("weight"),
                bias: b.present("bias"),
                native: name.starts_with('_'),
            }
        }
        "max_pool2d" | "max_pool2d_with_indices" => {
            let kernel = need_ints("kernel_size")?;
            let two = |v: Vec<i64>| if v.len() == 1 { vec![v[0]; 2] } else { v };
            let kernel = two(kernel);
            let stride = match b.ints("stride")? {
                None => kernel.clone(),
                Some(v) if v.is_empty() => kernel.clone(),
                Some(v) => two(v),
            };
            Op::MaxPool {
                stride,
                padding: two(b.ints("padding")?.unwrap_or_else(|| vec![0])),
                dilation: two(b.ints("dilation")?.unwrap_or_else(|| vec![1])),
                kernel,
                ceil_mode: b.boolean("ceil_mode")?,
                with_indices: name.ends_with("indices"),
            }
        }
        "adaptive_avg_pool2d"
        | "_adaptive_avg_pool2d"
        | "adaptive_avg_pool1d"
        | "adaptive_avg_pool3d"
        | "_adaptive_avg_pool3d" => {
            let size = need_ints("output_size")?;
            let dims = if name.ends_with("1d") {
                1
            } else if name.ends_with("3d") {
                3
            } else {
                2
            };
            Op::AdaptiveAvgPool {
                output_size: if size.len() == 1 {
                    vec![size[0]; dims]
                } else {
                    size
                },
            }
        }
        "avg_pool1d" | "avg_pool2d" => {
            let dims = if name.ends_with("1d") { 1 } else { 2 };
            let widen = |v: Vec<i64>| if v.len() == 1 { vec![v[0]; dims] } else { v };
            let kernel = widen(need_ints("kernel_size")?);
            let stride = match b.ints("stride")? {
                None => kernel.clone(),
                Some(v) if v.is_empty() => kernel.clone(),
                Some(v) => widen(v),
            };
            let count_include_pad = match b.get("count_include_pad") {
                None => true,
                Some(Raw::Bool(v)) => *v,
                Some(r) => return Err(bad("count_include_pad", "a bool", r)),
            };
            let divisor_override = b.int("divisor_override")?;
            if divisor_override.is_some_and(|d| d == 0) {
                return Err(bad("divisor_override", "a non-zero integer", &Raw::Int(0)));
            }
            Op::AvgPool {
                stride,
                padding: widen(b.ints("padding")?.unwrap_or_else(|| vec![0])),
                kernel,
                ceil_mode: b.boolean("ceil_mode")?,
                count_include_pad,
                divisor_override,
            }
        }
        "constant_pad_nd" | "pad" => {
            let pads = need_ints("pad")?;
            let mode = match b.string("mode")? {
                None | Some("constant") => PadMode::Constant,
                Some("reflect") => PadMode::Reflect,
                Some("replicate") => PadMode::Replicate,
                Some("circular") => PadMode::Circular,
                Some(o) => {
                    return Err(bad(
                        "mode",
                        "\"constant\", \"reflect\", \"replicate\" or \"circular\"",
                        &Raw::Str(o.into()),
                    ))
                }
            };
            if pads.len() % 2 != 0 {
                return Err(bad(
                    "pad",
                    "an even number of amounts",
                    b.get("pad").unwrap_or(&Raw::None),
                ));
            }
            Op::Pad {
                pads,
                mode,
                value: b.float("value")?.unwrap_or(0.0),
            }
        }
        "roll" => Op::Roll {
            shifts: need_ints("shifts")?,
            dims: b.ints("dims")?.unwrap_or_default(),
        },
        "slice_scatter" => {
            let step = b.int_or("step", 1)?;
            if step <= 0 {
                return Err(bad("step", "a positive integer", &Raw::Int(step)));
            }
            Op::SliceScatter {
                dim: b.int_or("dim", 0)?,
                start: b.int("start")?,
                end: b.int("end")?,
                step,
                select: false,
            }
        }
        "select_scatter" => {
            let index = b.int_or("index", 0)?;
            Op::SliceScatter {
                dim: b.int_or("dim", 0)?,
                start: Some(index),
                end: Some(index.wrapping_add(1)),
                step: 1,
                select: true,
            }
        }
        "as_strided" => {
            let size = need_ints("size")?;
            let stride = need_ints("stride")?;
            if size.len() != stride.len() {
                return Err(bad(
                    "stride",
                    &format!("{} strides, one per size", size.len()),
                    b.get("stride").unwrap_or(&Raw::None),
                ));
            }
            Op::AsStrided {
                size,
                stride,
                offset: b.int_or("storage_offset", 0)?,
            }
        }
        "group_norm" | "native_group_norm" => Op::GroupNorm {
            groups: if name == "group_norm" {
                b.int_or("num_groups", 1)?
            } else {
                b.int_or("group", 1)?
            },
            eps: b.float("eps")?.unwrap_or(1e-5),
            weight: b.present("weight"),
            bias: b.present("bias"),
            native: name == "native_group_norm",
        },
        "masked_fill" => Op::Where,
        "type_as" => Op::TypeAs,
        "repeat" => Op::Repeat {
            repeats: need_ints("repeats")?,
        },
        "copy" | "fill" => Op::Copy,
        "baddbmm" => Op::Addmm {
            beta: b.scalar("beta")?.unwrap_or(Scalar::Int(1)),
            alpha: b.scalar("alpha")?.unwrap_or(Scalar::Int(1)),
        },
        "flatten" => Op::Flatten {
            start: b.int_or("start_dim", 0)?,
            end: b.int_or("end_dim", -1)?,
        },
        "detach" | "lift_fresh_copy" => Op::NoOp(NoOpKind::Alias),
        "sum" => reduce(ReduceOp::Sum)?,
        "mean" => reduce(ReduceOp::Mean)?,
        "amax" => reduce(ReduceOp::Amax)?,
        "amin" => reduce(ReduceOp::Amin)?,
        "any" => reduce(ReduceOp::Any)?,
        "all" => reduce(ReduceOp::All)?,
        "var" => {
            let unbiased = match b.get("unbiased") {
                Some(Raw::Bool(u)) => Some(*u),
                Some(r) => return Err(bad("unbiased", "a bool", r)),
                None => None,
            };
            let correction = match (b.float("correction")?, unbiased) {
                (Some(_), Some(_)) => return Err(SigError::Twice("correction/unbiased".into())),
                (Some(c), None) => c,
                (None, Some(u)) => u as i64 as f64,
                (None, None) => 1.0,
            };
            Op::Var {
                dims: b.ints("dim")?.filter(|d| !d.is_empty()),
                correction,
                keepdim: b.boolean("keepdim")?,
            }
        }
        "softmax" | "_softmax" => softmax(false)?,
        "log_softmax" | "_log_softmax" => softmax(true)?,
        "layer_norm" | "native_layer_norm" => Op::LayerNorm {
            normalized_shape: need_ints("normalized_shape")?,
            eps: b.float("eps")?.unwrap_or(1e-5),
            weight: b.present("weight"),
            bias: b.present("bias"),
            native: name == "native_layer_norm",
        },
        "rms_norm" => Op::RmsNorm {
            normalized_shape: need_ints("normalized_shape")?,
            eps: b.float("eps")?,
            weight: b.present("weight"),
        },
        "linear" => Op::Linear {
            bias: b.present("bias"),
        },
        "addmm" => Op::Addmm {
            beta: b.scalar("beta")?.unwrap_or(Scalar::Int(1)),
            alpha: b.scalar("alpha")?.unwrap_or(Scalar::Int(1)),
        },
        "mm" => Op::Mm,
        "bmm" => Op::Bmm,
        "matmul" => Op::Matmul,
        "reshape" => Op::Reshape {
            shape: need_ints("shape")?,
            view: false,
        },
        "view" => Op::Reshape {
            shape: need_ints("size")?,
            view: true,
        },
        "permute" => Op::Permute {
            dims: need_ints("dims")?,
        },
        "transpose" => Op::Transpose {
            dim0: b.int_or("dim0", 0)?,
            dim1: b.int_or("dim1", 0)?,
        },
        "unsqueeze" => Op::Unsqueeze {
            dim: b.int_or("dim", 0)?,
        },
        "squeeze" => Op::Squeeze {
            dims: b.ints("dim")?,
        },
        "expand" => Op::Expand {
            sizes: need_ints("size")?,
        },
        "select" => Op::Select {
            dim: b.int_or("dim", 0)?,
            index: b.int_or("index", 0)?,
        },
        "slice" => {
            let step = b.int_or("step", 1)?;
            if step <= 0 {
                return Err(bad("step", "a positive integer", &Raw::Int(step)));
            }
            Op::Slice {
                dim: b.int_or("dim", 0)?,
                start: b.int("start")?,
                end: b.int("end")?,
                step,
            }
        }
        "split" => {
            let split_size = b.int_or("split_size", 1)?;
            if split_size <= 0 {
                return Err(bad(
                    "split_size",
                    "a positive integer",
                    &Raw::Int(split_size),
                ));
            }
            Op::Split {
                split_size,
                dim: b.int_or("dim", 0)?,
            }
        }
        "split_with_sizes" => Op::SplitWithSizes {
            sizes: need_ints("split_sizes")?,
            dim: b.int_or("dim", 0)?,
        },
        "getitem" => {
            let index = b.int_or("index", 0)?;
            if index < 0 {
                return Err(bad("index", "a non-negative integer", &Raw::Int(index)));
            }
            Op::GetItem { index }
        }
        "contiguous" => Op::Contiguous,
        "clone" => Op::Clone,
        "cat" => Op::Cat {
            dim: b.int_or("dim", 0)?,
        },
        "dropout" => {
            // Inference: the identity. A training graph's dropout draws random masks,
            // which a compiled inference graph cannot reproduce.
            if b.boolean("train")? && b.float("p")?.unwrap_or(0.5) > 0.0 {
                return Err(bad(
                    "train",
                    "false (Kiln compiles inference graphs; export the model after `model.eval()`)",
                    &Raw::Bool(true),
                ));
            }
            Op::NoOp(NoOpKind::Dropout)
        }
        "alias" => Op::NoOp(NoOpKind::Alias),
        "_assert_tensor_metadata" => Op::NoOp(NoOpKind::AssertTensorMetadata),
        other => return Err(SigError::UnknownOp(other.into())),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_op_set_names_each_op_once_and_every_name_binds() {
        let mut names: Vec<&str> = op_names().collect();
        assert!(names.iter().all(|n| is_known(n)));
        let count = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), count, "an op is listed twice");
    }

    #[test]
    fn typos_suggest_the_op_meant_and_nonsense_suggests_nothing() {
        assert_eq!(similar_ops("sofmax"), ["softmax"]);
        assert_eq!(similar_ops("layernorm"), ["layer_norm"]);
        assert_eq!(similar_ops("rleu"), ["relu"]);
        assert_eq!(similar_ops("matmull"), ["matmul"]);
        assert!(similar_ops("zzz").is_empty());
        assert!(similar_ops("fft_rfft2").is_empty());
        assert_eq!(similar_ops("convolutoin"), ["convolution"]);
    }
}
