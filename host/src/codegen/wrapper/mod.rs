//! Wrapper generators: the host code that allocates buffers and launches the
//! kernels, built from the plugin's `DeviceOpOverrides` strings.

pub mod aot;
pub mod cpp;
pub mod python;
