//! Wrapper generators: the host code that allocates buffers and launches the
//! kernels, built from the plugin's `DeviceOpOverrides` strings.

pub mod cpp;
pub mod python;
pub mod triton_cpp;
