//! The graph layer: the IR ([`Graph`]), dtypes, shapes, the op set, the importers (the
//! `kiln-graph/1` TOML format and torch.export `.pt2` archives, both behind [`load`]),
//! shape inference and validation, and printers.
//!
//! Everything after import relies on the contract established here: a graph that
//! [`validate`]s has every value's metadata filled in and consistent, so later stages may
//! fail with an error but never panic. This layer must never evaluate tensors or rewrite
//! graphs (that is `interp` and `passes`).

pub mod dtype;
pub mod import;
pub mod infer;
pub mod infer_views;
pub mod ir;
pub mod ops;
pub mod print;
pub mod pt2;
mod raw;
pub mod shape;
pub mod signature;
pub mod verify;

pub use dtype::DType;
pub use import::{load_toml, parse_toml};
pub use ir::{Arg, Graph, Node, NodeId, Scalar, TensorMeta, Use, ValueId};
pub use ops::{BinaryOp, ConstData, GeluApprox, NoOpKind, Op, ReduceOp, UnaryOp};
pub use verify::{infer_node, revalidate, validate, verify};

use std::fmt;
use std::path::Path;

/// How [`load_with`] imports a graph file.
#[derive(Clone, Copy, Debug, Default)]
pub struct LoadOptions {
    /// For `.pt2` archives: parameters, buffers and constants become graph inputs after
    /// the user inputs instead of constants baked in from the archive. TOML graphs have
    /// no parameters, so it changes nothing for them.
    pub params_as_inputs: bool,
}

/// Whether `path` is a `.pt2` archive rather than a TOML graph: a zip's magic bytes
/// (`PK\x03\x04`), or, for a file too short or unreadable, the `.pt2` extension.
pub fn is_pt2(path: &Path) -> bool {
    use std::io::Read;
    let mut magic = [0u8; 4];
    let read = std::fs::File::open(path).and_then(|mut f| f.read_exact(&mut magic));
    match read {
        Ok(()) => &magic == b"PK\x03\x04" || path.extension().is_some_and(|e| e == "pt2"),
        Err(_) => path.extension().is_some_and(|e| e == "pt2"),
    }
}

/// Reads a graph file of either format with default options: the single entry point of
/// every command that takes a graph.
pub fn load(path: impl AsRef<Path>) -> Result<Graph, Error> {
    load_with(path, &LoadOptions::default())
}

/// Reads a graph file of either format (see [`is_pt2`]).
pub fn load_with(path: impl AsRef<Path>, options: &LoadOptions) -> Result<Graph, Error> {
    let path = path.as_ref();
    if is_pt2(path) {
        let pt2_options = pt2::Pt2Options {
            params_as_inputs: options.params_as_inputs,
            ..pt2::Pt2Options::default()
        };
        pt2::load_pt2(path, &pt2_options)
    } else {
        load_toml(path)
    }
}

/// Where a node came from, for messages: its name and, when known, its line in the file.
#[derive(Debug, Clone, PartialEq)]
pub struct At {
    /// node (or input/constant) name
    pub node: String,
    /// 1-based line in the source file
    pub line: Option<u32>,
}

impl fmt::Display for At {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(l) => write!(f, "node `{}` (line {l})", self.node),
            None => write!(f, "node `{}`", self.node),
        }
    }
}

/// The users of one unknown op, for [`Error::UnknownOps`].
#[derive(Debug, Clone, PartialEq)]
pub struct UnknownOp {
    /// the op name as written
    pub op: String,
    /// every node using it
    pub nodes: Vec<At>,
}

fn list_unknown(ops: &[UnknownOp]) -> String {
    ops.iter()
        .map(|u| {
            let nodes: Vec<String> = u.nodes.iter().map(|a| a.to_string()).collect();
            let count = match nodes.len() {
                1 => "1 node".to_string(),
                n => format!("{n} nodes"),
            };
            format!("\n  `{}` used by {count}: {}", u.op, nodes.join(", "))
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
        source: Box<signature::SigError>,
    },
    /// Shape or dtype inference failed.
    #[error("{at}: invalid `{op}`")]
    Infer {
        /// where
        at: At,
        /// the op
        op: String,
        /// why
        #[source]
        source: Box<infer::InferError>,
    },
    /// An input or constant declaration is invalid.
    #[error("{at}: {message}")]
    Declaration {
        /// where
        at: At,
        /// what is wrong
        message: String,
    },
    /// A `.pt2` archive is unreadable or uses something Kiln lacks.
    #[error(transparent)]
    Pt2(#[from] pt2::Pt2Error),
    /// The IR breaks an invariant (a bug in a pass, caught by the verifier).
    #[error("graph invariant broken at {at}: {message}")]
    Invariant {
        /// where
        at: At,
        /// which invariant
        message: String,
    },
}
