//! Where the CUDA toolkit is, for the C++ programs built on the plugin's
//! `kernel_driver` (`cpp_build_flags`): its headers (`cuda.h`,
//! `cublas_v2.h`), cuBLAS, and the driver library to link against.

use std::path::{Path, PathBuf};

use kiln_plugin_kit::driver::toolkit_flags;

/// The toolkit's folder: the first of `$CUDA_HOME`, `$CUDA_PATH`, the folder
/// above the `bin/` holding `nvcc` on the `PATH`, and `/usr/local/cuda`
/// that has `include/cuda.h`.
pub fn home() -> Option<PathBuf> {
    let from_env = ["CUDA_HOME", "CUDA_PATH"]
        .into_iter()
        .filter_map(std::env::var_os)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from);
    let from_nvcc = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join("nvcc"))
            .find(|nvcc| nvcc.is_file())
            .and_then(|nvcc| nvcc.canonicalize().ok())
            .and_then(|nvcc| nvcc.parent()?.parent().map(Path::to_path_buf))
    });
    from_env
        .chain(from_nvcc)
        .chain(std::iter::once(PathBuf::from("/usr/local/cuda")))
        .find(|home| home.join("include").join("cuda.h").is_file())
}

/// `cpp_build_flags()`: the toolkit's include and library folders, its
/// `lib64/stubs` for linking where the machine building has no driver (the
/// library then finds the real `libcuda.so.1` when it is loaded), cuBLAS and
/// the driver library.
pub fn build_flags(home: Option<&Path>) -> Vec<String> {
    let mut flags = toolkit_flags(home, &[]);
    if let Some(stubs) = home
        .map(|h| h.join("lib64").join("stubs"))
        .filter(|s| s.join("libcuda.so").is_file())
    {
        flags.push(format!("-L{}", stubs.display()));
    }
    flags.extend(["-lcublas".to_string(), "-lcuda".to_string()]);
    flags
}
