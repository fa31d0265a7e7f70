//! Kiln's host library: the graph IR and import, the passes, the reference interpreter,
//! tensor files, plugin discovery and the command line. The `host` binary is a thin shell
//! around [`cli::main`].

pub mod cli;
pub mod graph;
pub mod interp;
pub mod passes;
pub mod plugins;
pub mod tensor;
pub mod tensor_io;
