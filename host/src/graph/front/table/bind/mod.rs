//! The op table's bindings: binds a node's positional `args` and keyword `attrs` to
//! the op's parameters (either spelling allowed) and builds the typed [`Op`].
//!
//! Works on [`Raw`] values, so it knows nothing of TOML or JSON; it must never resolve
//! tensor names (the front end does) or look at shapes (rewrites and expansions do).

mod build;
mod signatures;

use crate::graph::dtype::DType;
use crate::graph::ir::Scalar;
use crate::graph::ops::{Op, UnaryOp};
use crate::graph::sym::Size;
use signatures::{signature, Sig, K, SIGNATURES};

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
    /// a size over symbols that is not an integer (an export's `SymInt`; an integer
    /// size is a [`Raw::Int`])
    Size(crate::graph::sym::Size),
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
            Raw::Size(_) => "a symbolic size",
            Raw::Float(_) => "a float",
            Raw::Bool(_) => "a bool",
            Raw::List(_) => "a list",
            Raw::None => "None",
        }
    }
}

/// The value as a graph file spells it: `0`, `1.5`, `"x"`, `[1, 2]`.
impl std::fmt::Display for Raw {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Raw::Str(s) => write!(f, "{s:?}"),
            Raw::Int(i) => write!(f, "{i}"),
            Raw::Size(s) => write!(f, "{s}"),
            Raw::Float(x) => write!(f, "{x:?}"),
            Raw::Bool(b) => write!(f, "{b}"),
            Raw::List(items) => {
                f.write_str("[")?;
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{item}")?;
                }
                f.write_str("]")
            }
            Raw::None => f.write_str("None"),
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
    /// The arguments fit the signature, but the op cannot be built from them with the
    /// operands' shapes and dtypes (a rewrite or an expansion refused them).
    #[error("{0}")]
    Invalid(String),
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

/// The parameter names of `op`, in order; `None` for an op outside the op set.
pub fn param_names(op: &str) -> Option<Vec<&'static str>> {
    signature(op).map(|sig| sig.iter().map(|p| p.0).collect())
}

/// Whether parameter `param` of `op` takes tensors (`None` where `op` binds no such
/// parameter).
pub fn names_tensors(op: &str, param: &str) -> Option<bool> {
    let (_, kind, _) = signature(op)?.iter().find(|p| p.0 == param)?;
    Some(matches!(kind, K::T | K::Ts | K::Ot | K::Tl | K::Otl))
}

/// Whether positional parameter `i` of `op` takes tensors (`None` where `op` binds no
/// such parameter).
pub fn names_tensors_at(op: &str, i: usize) -> Option<bool> {
    let (_, kind, _) = signature(op)?.get(i)?;
    Some(matches!(kind, K::T | K::Ts | K::Ot | K::Tl | K::Otl))
}

/// Every op name the table binds by signature.
pub fn op_names() -> impl Iterator<Item = &'static str> {
    SIGNATURES
        .iter()
        .map(|(name, _)| *name)
        .chain(UnaryOp::ALL.iter().map(|(_, name)| *name))
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
        found: match raw {
            Raw::None => "None".into(),
            _ => format!("{} ({raw})", raw.kind()),
        },
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
    /// A size: an integer, or a symbolic size.
    fn size(&self, name: &str) -> Result<Option<Size>, SigError> {
        match self.get(name) {
            None => Ok(None),
            Some(Raw::Int(i)) => Ok(Some(Size::from(*i))),
            Some(Raw::Size(s)) => Ok(Some(s.clone())),
            Some(r) => Err(bad(name, "an integer", r)),
        }
    }
    /// A list of sizes (integers or symbolic), empty where it is absent.
    fn sizes(&self, name: &str) -> Result<Vec<Size>, SigError> {
        let item = |x: &Raw| match x {
            Raw::Int(i) => Some(Size::from(*i)),
            Raw::Size(s) => Some(s.clone()),
            _ => None,
        };
        match self.get(name) {
            None => Ok(Vec::new()),
            Some(r @ Raw::List(l)) => l
                .iter()
                .map(|x| item(x).ok_or_else(|| bad(name, "a list of integers", r)))
                .collect(),
            Some(r) => item(r)
                .map(|s| vec![s])
                .ok_or_else(|| bad(name, "a list of integers", r)),
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
    /// A number, or a symbolic size (`arange`'s end).
    fn bound(&self, name: &str) -> Result<Option<crate::graph::ops::Bound>, SigError> {
        match self.get(name) {
            Some(Raw::Size(s)) => Ok(Some(crate::graph::ops::Bound::Size(s.clone()))),
            _ => Ok(self.scalar(name)?.map(crate::graph::ops::Bound::Scalar)),
        }
    }
    /// An integer list, empty where it is absent.
    fn list(&self, name: &str) -> Result<Vec<i64>, SigError> {
        Ok(self.ints(name)?.unwrap_or_default())
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
    let op = build::build(op_name, &b)?;
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
