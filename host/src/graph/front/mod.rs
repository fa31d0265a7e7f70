//! The front ends: graph files in, validated [`Graph`]s out. `toml/` reads the
//! `kiln-graph/1` format, `pt2/` reads `torch.export` archives, and both lower
//! every node through the one op table in `table/`, so that both accept the same
//! ops and a graph from either passes the same validation. [`load`] picks the
//! importer by content.
//!
//! The front ends only read and validate; they never rewrite a graph after it
//! validates (that is `passes/`) and never evaluate tensors.

pub mod dynamic_dims;
pub mod pt2;
pub mod table;
pub mod toml;

use std::path::Path;

pub use self::toml::{load_toml, load_toml_with, parse_toml, parse_toml_sized, parse_toml_with};
use super::{Error, Graph};

/// How [`load_with`] imports a graph file.
#[derive(Clone, Debug, Default)]
pub struct LoadOptions {
    /// For `.pt2` archives: parameters, buffers and constants become graph inputs after
    /// the user inputs instead of constants baked in from the archive. TOML graphs have
    /// no parameters, so it changes nothing for them.
    pub params_as_inputs: bool,
    /// Caps on what reading a `.pt2` archive may cost: its member count and
    /// the bytes its members decompress to (the host's memory budget).
    pub archive: pt2::Limits,
    /// Named sizes to compile at these values: a `.pt2` export's symbols
    /// ([`pt2::Pt2Options::specialize`]), a graph file's `[dims]`
    /// ([`toml::parse_toml_with`]).
    pub specialize: Vec<(String, i64)>,
    /// Keep a `.pt2` export's symbols rather than specialise it
    /// ([`pt2::Pt2Options::dynamic`]).
    pub dynamic: bool,
    /// Input dims of a static graph to make size symbols, with their ranges
    /// (`--dynamic INPUT:DIM=LO..HI`, [`dynamic_dims::mark`]).
    pub dynamic_dims: Vec<dynamic_dims::DynamicDim>,
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
            limits: options.archive,
            specialize: options.specialize.clone(),
            dynamic: options.dynamic,
        };
        pt2::load_pt2(path, &pt2_options)
    } else {
        // `--dynamic` keeps a graph file's named sizes as symbols.
        let dynamic = options.dynamic && options.dynamic_dims.is_empty();
        self::toml::load_toml_sized(path, &options.specialize, dynamic)
    }
    .and_then(|mut g| {
        dynamic_dims::mark(&mut g, &options.dynamic_dims).map_err(|e| Error::InFile {
            path: path.display().to_string(),
            source: Box::new(e),
        })?;
        Ok(g)
    })
}
