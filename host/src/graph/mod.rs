//! The graph layer: the IR ([`Graph`]), dtypes, shapes, the op set, the importers (the
//! `kiln-graph/1` TOML format and torch.export `.pt2` archives, both behind [`load`]),
//! shape inference and validation, and printers.
//!
//! Everything after import relies on the contract established here: a graph that
//! [`validate`]s has every value's metadata filled in and consistent, so later stages may
//! fail with an error but never panic. This layer must never evaluate tensors or rewrite
//! graphs (that is `interp` and `passes`).

pub mod dtype;
pub mod front;
pub mod infer;
pub mod ir;
pub mod ops;
pub mod print;
pub mod shape;
pub mod sym;
pub mod verify;
pub mod views;

pub use dtype::DType;
pub use front::{
    is_pt2, load, load_toml, load_toml_with, load_with, parse_toml, parse_toml_sized,
    parse_toml_with, LoadOptions,
};
pub use ir::{
    Arg, FixedMeta, Graph, Node, NodeId, Scalar, SizeChoice, State, TensorMeta, Use, ValueId,
};
pub use ops::{BinaryOp, Bound, ConstData, GeluApprox, NoOpKind, Op, PadMode, ReduceOp, UnaryOp};
pub use verify::{infer_node, revalidate, validate, verify};

use std::fmt;

/// Where a node came from, for messages: its name and, when known, its line in the file.
#[derive(Debug, Clone, PartialEq)]
pub struct At {
    /// node (or input/constant) name
    pub node: String,
    /// 1-based line in the source file
    pub line: Option<u32>,
}

impl At {
    /// The place as `KIND `name` (line N)`, for a `kind` other than a node: an
    /// `input` or a `constant`.
    pub fn named(&self, kind: &str) -> String {
        match self.line {
            Some(l) => format!("{kind} `{}` (line {l})", self.node),
            None => format!("{kind} `{}`", self.node),
        }
    }
}

impl fmt::Display for At {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.named("node"))
    }
}

/// The head of an [`Error::Infer`]: `node `y` (line 3): invalid `linear``, or only
/// the place where the reason (printed after it) already starts with the op's name.
fn infer_head(at: &At, op: &str, source: &infer::InferError) -> String {
    let reason = source.to_string();
    match reason.strip_prefix(op) {
        Some(rest) if rest.starts_with(':') => at.to_string(),
        _ => format!("{at}: invalid `{op}`"),
    }
}

/// The users of one unknown op, for [`Error::UnknownOps`].
#[derive(Debug, Clone, PartialEq)]
pub struct UnknownOp {
    /// the op name as written
    pub op: String,
    /// every node using it
    pub nodes: Vec<At>,
    /// known ops with similar names, best first (a typo's likely fixes)
    pub similar: Vec<&'static str>,
}

fn list_unknown(ops: &[UnknownOp]) -> String {
    ops.iter()
        .map(|u| {
            let nodes: Vec<String> = u.nodes.iter().map(|a| a.to_string()).collect();
            let count = match nodes.len() {
                1 => "1 node".to_string(),
                n => format!("{n} nodes"),
            };
            let hint = match u.similar.as_slice() {
                [] => String::new(),
                names => {
                    let names: Vec<String> = names.iter().map(|n| format!("`{n}`")).collect();
                    format!(" (did you mean {}?)", names.join(" or "))
                }
            };
            format!("\n  `{}`{hint} used by {count}: {}", u.op, nodes.join(", "))
        })
        .collect()
}

/// Errors of the graph layer: import, validation and verification.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file could not be read.
    #[error("cannot read graph file {path}")]
    Read {
        /// the path
        path: String,
        /// why
        #[source]
        source: std::io::Error,
    },
    /// An error inside a named file.
    #[error("in {path}")]
    InFile {
        /// the path
        path: String,
        /// the error
        #[source]
        source: Box<Error>,
    },
    /// The text is not valid TOML or does not have the format's structure.
    #[error("malformed graph file at line {line}, column {column}: {message}")]
    Toml {
        /// 1-based line
        line: usize,
        /// 1-based column
        column: usize,
        /// what the TOML parser said
        message: String,
    },
    /// `format` is not `kiln-graph/1`.
    #[error("unsupported format `{0}`: this host reads \"kiln-graph/1\"")]
    Version(String),
    /// Ops outside the op set, each listed once with all its nodes.
    #[error("unsupported ops:{}", list_unknown(.0))]
    UnknownOps(Vec<UnknownOp>),
    /// Two inputs/constants/nodes share a name.
    #[error("duplicate name `{name}` (line {line}; first defined at line {first})")]
    Duplicate {
        /// the name
        name: String,
        /// where it is repeated
        line: u32,
        /// where it was first defined
        first: u32,
    },
    /// An operand or output names no tensor.
    #[error("{at}: unknown tensor `{name}`")]
    UnknownTensor {
        /// where
        at: At,
        /// the missing name
        name: String,
    },
    /// `outputs` names no tensor.
    #[error("graph output `{0}` is not an input, constant or node")]
    UnknownOutput(String),
    /// `outputs` is empty.
    #[error("the graph has no outputs")]
    NoOutputs,
    /// A value `--specialize` gives a named size that the file does not have, or outside
    /// the size's range.
    #[error("{0}")]
    Specialize(String),
    /// `--dynamic INPUT:DIM=LO..HI` cannot make those dims vary.
    #[error("{0}")]
    Dynamic(String),
    /// A node of a graph made dynamic with `--dynamic INPUT:DIM=LO..HI` fixes the size
    /// the flag makes vary (its inference over the symbols fails).
    #[error(
        "with --dynamic, a node fixes a size the flag makes vary: export the model with \
         dynamic_shapes= (or name the size in a graph file's [dims])"
    )]
    DynamicInfer(#[source] Box<Error>),
    /// The nodes form a cycle.
    #[error("{0} is on a cycle")]
    Cycle(At),
    /// The arguments do not fit the op's signature.
    #[error("{at}: bad arguments for `{op}`")]
    Signature {
        /// where
        at: At,
        /// the op
        op: String,
        /// why
        #[source]
        source: Box<front::table::SigError>,
    },
    /// Shape or dtype inference failed.
    #[error("{}", infer_head(at, op, source))]
    Infer {
        /// where
        at: At,
        /// the op
        op: String,
        /// why
        #[source]
        source: Box<infer::InferError>,
    },
    /// An input, constant or node declaration is invalid.
    #[error("{}: {message}", at.named(kind))]
    Declaration {
        /// what is declared: `input`, `constant` or `node`
        kind: &'static str,
        /// where
        at: At,
        /// what is wrong
        message: String,
    },
    /// A `.pt2` archive is unreadable or uses something Kiln lacks.
    #[error(transparent)]
    Pt2(#[from] front::pt2::Pt2Error),
    /// The IR breaks an invariant (a bug in a pass, caught by the verifier).
    #[error("graph invariant broken at {at}: {message}")]
    Invariant {
        /// where
        at: At,
        /// which invariant
        message: String,
    },
}
