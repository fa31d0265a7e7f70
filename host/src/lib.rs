//! Kiln: a graph compiler whose device backends are drop-in plugins.
//!
//! The stages, in the order data flows: [`plugins`] (discovery, registry) →
//! graph → passes → schedule → codegen → [`cli`]. See `ARCHITECTURE.md`.
//! [`conformance`] checks one plugin against every guarantee, in child processes.

pub mod cli;
pub mod conformance;
pub mod plugins;
