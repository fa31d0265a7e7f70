//! Kiln: a graph compiler whose device backends are drop-in plugins.
//!
//! The stages, in the order data flows: [`plugins`] (discovery, registry) →
//! graph → passes → schedule → codegen → [`cli`]. See `ARCHITECTURE.md`.

pub mod cli;
pub mod codegen;
pub mod plugins;
