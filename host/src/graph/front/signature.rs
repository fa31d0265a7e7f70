//! ATen signatures: binds a node's positional `args` and keyword `attrs` to the op's
//! parameters (either spelling allowed) and builds the typed [`Op`].
//!
//! Works on [`Raw`] values, so it knows nothing of TOML; it must never resolve tensor
//! names (the importer does) or look at shapes.

use crate::graph::dtype::DType;
use crate::graph::ir::Scalar;
use crate::graph::ops::{BinaryOp, GeluApprox, NoOpKind, Op, ReduceOp, UnaryOp};

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
}

impl Raw {
    fn kind(&self) -> &'static str {
        match self {
            Raw::Str(_) => "a string",
            Raw::Int(_) => "an integer",
            Raw::Float(_) => "a float",
            Raw::Bool(_) => "a bool",
            Raw::List(_) => "a list",
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
                ("dtype", D, true),
                ("non_blocking", B, false),
                ("copy", B, false),
            ],
        ),
        ("_to_copy", &[("self", T, true), ("dtype", D, true)]),
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
        let half_to_float = if name.starts_with('_') {
            b.boolean("half_to_float")?
        } else {
            if b.present("dtype") {
                return Err(bad(
                    "dtype",
                    "no dtype (use `to` before softmax)",
                    &Raw::Bool(true),
                ));
            }
            false
        };
        Ok(Op::Softmax {
            dim: b.int_or("dim", 0)?,
            log,
            half_to_float,
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
        "to" | "_to_copy" => Op::Cast {
            dtype: b.dtype("dtype")?.unwrap_or(DType::Float32),
        },
        "sum" => reduce(ReduceOp::Sum)?,
        "mean" => reduce(ReduceOp::Mean)?,
        "amax" => reduce(ReduceOp::Amax)?,
        "amin" => reduce(ReduceOp::Amin)?,
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
        "dropout" => Op::NoOp(NoOpKind::Dropout),
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
        assert!(similar_ops("convolution").is_empty());
    }
}
