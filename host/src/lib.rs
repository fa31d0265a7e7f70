//! Kiln: a graph compiler whose device backends are drop-in plugins.
//!
//! The stages, in the order data flows: [`plugins`] (discovery, registry) →
//! [`graph`] (IR, import) → [`passes`] → [`schedule`] → [`codegen`], tied together
//! by [`driver`], the one front door of a compile, which [`cli`] calls.
//! [`interp`] is the float64 reference interpreter every test checks against;
//! [`tensor_io`] reads and writes the raw tensor files of the command line.
//! [`runtime`] compiles generated C++ (cached) and runs it in-process for `host run`.
//! [`conformance`] checks one plugin against every guarantee, in child processes.
//! See `ARCHITECTURE.md`.

pub mod cli;
pub mod codegen;
pub mod conformance;
pub mod diag;
pub mod driver;
pub mod graph;
pub mod interp;
pub mod memory;
pub mod passes;
pub mod plugins;
pub mod runtime;
pub mod schedule;
pub mod tensor;
pub mod tensor_io;
