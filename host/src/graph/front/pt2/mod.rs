//! The `.pt2` importer: a `torch.export.save` archive → validated [`Graph`].
//!
//! Reads `<prefix>/models/model.json` (PyTorch's export schema, major version
//! [`SUPPORTED_MAJOR`]), lowers every `torch.ops.aten.X.overload` node through the same
//! op table as the TOML importer (`table::lower`, fed the op name with namespace and
//! overload dropped and the arguments by their ATen names), and
//! reads parameters, buffers and constants from `<prefix>/data/weights/` and
//! `<prefix>/data/constants/` as their `*_config.json` describe them.
//!
//! The archive is untrusted input: member names are checked, reads are capped
//! ([`Limits`]), and every problem is an error naming the member, node or tensor. This
//! module must never panic on any file, and never accept a graph that does not validate.

mod archive;
mod build;
mod schema;
pub mod specialize;

pub use archive::Limits;

use crate::graph::{Error, Graph};
use std::path::Path;

/// The export schema major versions this importer reads.
pub const SUPPORTED_MAJOR: &[i64] = &[8];

/// How to import an archive.
#[derive(Clone, Debug, Default)]
pub struct Pt2Options {
    /// Parameters, buffers and constants become graph inputs after the user inputs instead
    /// of constants baked in from the archive's weights.
    pub params_as_inputs: bool,
    /// Caps on the archive's member count and decompressed size.
    pub limits: Limits,
    /// For an export with dynamic shapes: the value of each named symbol to specialise
    /// it at (`s27 = 128`); a symbol not named takes the example's size.
    pub specialize: Vec<(String, i64)>,
    /// For an export with dynamic shapes: keep its symbols, so that one graph covers
    /// every size in their ranges (no `specialize` given). The compile of such a graph
    /// is refused until the scheduler takes symbolic sizes (docs/dynamic-shapes.md);
    /// the reference interpreter runs it at any size.
    pub dynamic: bool,
}

/// What is wrong with a `.pt2` archive (beyond what the graph layer reports).
#[derive(Debug, thiserror::Error)]
pub enum Pt2Error {
    /// The file is not a zip archive.
    #[error("not a .pt2 archive (a zip written by torch.export.save): {0}")]
    NotZip(String),
    /// More members than [`Limits::max_members`].
    #[error("the archive has {found} members, more than the limit of {max}")]
    TooManyMembers {
        /// members found
        found: usize,
        /// the limit
        max: usize,
    },
    /// A member name that could escape a folder.
    #[error("unsafe member name {name:?} in the archive: it has {why}")]
    UnsafeMemberName {
        /// the name
        name: String,
        /// what makes it unsafe
        why: &'static str,
    },
    /// A member the archive must have.
    #[error("the archive has no member `{0}`")]
    MissingMember(String),
    /// A member could not be read.
    #[error("cannot read member `{member}`: {message}")]
    Member {
        /// the member
        member: String,
        /// why
        message: String,
    },
    /// Decompressing a member, or a weight's tensor, would exceed
    /// [`Limits::budget`]: the memory budget's refusal, naming its limit.
    #[error(transparent)]
    TooLarge(crate::memory::Refused),
    /// The process could not allocate a member's bytes, although the budget
    /// allowed them.
    #[error(transparent)]
    OutOfMemory(#[from] crate::memory::OutOfMemory),
    /// A JSON member does not parse or lacks a field.
    #[error("malformed `{member}`: {message}")]
    Json {
        /// the member
        member: String,
        /// serde's message
        message: String,
    },
    /// `schema_version.major` is not one of [`SUPPORTED_MAJOR`].
    #[error("export schema version {major}.{minor} is not supported: this host reads major version {supported}")]
    SchemaVersion {
        /// the archive's major version
        major: i64,
        /// the archive's minor version
        minor: i64,
        /// the supported majors, listed
        supported: String,
    },
    /// The graph writes a new value into one of its inputs (an in-place op on a
    /// buffer, a parameter or a user input, or a mutation output of the signature),
    /// which Kiln's compiled call would not carry out of the call.
    #[error("{node} writes a new value into {what} in place, but Kiln keeps state between calls only in the parameters, buffers and constants the archive holds, not in the caller's inputs (nor with --params-as-inputs): {what} would keep its old value, and every call after the first would differ from PyTorch's. Export a forward that returns the new value instead of writing it into {what}, or keep it in a buffer of the module")]
    InputMutation {
        /// the FX node that writes (or the signature's mutation output)
        node: String,
        /// the input, with its kind: "buffer `k_cache`"
        what: String,
    },
    /// A dynamic size.
    #[error("`{tensor}` has a dynamic size `{symbol}` that Kiln cannot specialise to one value (a size without a range in the archive, such as one that depends on a tensor's values): export it static, at the size you will run")]
    Symbolic {
        /// the tensor (or node.parameter) with the size
        tensor: String,
        /// the symbol or expression
        symbol: String,
    },
    /// A size or element count that does not fit in 64 bits.
    #[error("`{tensor}`: {message}")]
    Overflow {
        /// the tensor
        tensor: String,
        /// what overflowed
        message: String,
    },
    /// A dtype code Kiln does not have.
    #[error("`{tensor}` has dtype code {code} (export schema ScalarType), which Kiln does not support (float32 float16 bfloat16 float64 int64 int32 bool)")]
    Dtype {
        /// the tensor
        tensor: String,
        /// the code
        code: i64,
    },
    /// An argument Kiln cannot take.
    #[error("node `{node}`, parameter `{param}`: {message}")]
    Argument {
        /// the node
        node: String,
        /// the parameter
        param: String,
        /// what is wrong
        message: String,
    },
    /// A stored parameter, buffer or constant is unusable.
    #[error("weight `{name}`: {message}")]
    Weight {
        /// the parameter, buffer or constant name
        name: String,
        /// what is wrong
        message: String,
    },
    /// The graph's structure does not fit the schema (or uses a feature Kiln lacks).
    #[error("{0}")]
    Schema(String),
    /// Kiln's shape inference disagrees with the shapes PyTorch recorded.
    #[error("node `{node}`: PyTorch recorded {expected} for `{tensor}`, Kiln infers {found}")]
    ShapeMismatch {
        /// the node
        node: String,
        /// the tensor
        tensor: String,
        /// shape and dtype in the archive
        expected: String,
        /// shape and dtype Kiln infers
        found: String,
    },
}

/// Reads and imports a `.pt2` archive; errors carry the path.
pub fn load_pt2(path: impl AsRef<Path>, options: &Pt2Options) -> Result<Graph, Error> {
    let path = path.as_ref();
    let in_file = |e: Error| Error::InFile {
        path: path.display().to_string(),
        source: Box::new(e),
    };
    let file = std::fs::File::open(path).map_err(|source| Error::Read {
        path: path.display().to_string(),
        source,
    })?;
    let name = path
        .file_stem()
        .map_or_else(|| "model".into(), |s| s.to_string_lossy().into_owned());
    read_pt2(std::io::BufReader::new(file), &name, options).map_err(in_file)
}

/// Imports a `.pt2` archive from any seekable reader; `name` names the graph.
pub fn read_pt2<R: std::io::Read + std::io::Seek>(
    reader: R,
    name: &str,
    options: &Pt2Options,
) -> Result<Graph, Error> {
    let mut archive = archive::Archive::open(reader, options.limits)?;
    build::build(&mut archive, name, options)
}
