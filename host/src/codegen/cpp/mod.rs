//! C++/OpenMP code generation for the `cpp` scheduling kind (Inductor's
//! `CppScheduling`): one `static` C++ function per kernel of the scheduled
//! program, plus the prelude (half conversions, NaN-aware helpers,
//! vectorisable float math, the packed matrix product). The wrapper that allocates buffers and calls them
//! is `codegen/wrapper/cpp.rs`.
//!
//! Semantics are those of the loop-IR evaluator (`schedule/eval.rs`): values
//! are computed in their dtype (float16/bfloat16 in `float`), reductions in
//! phases per row, accumulating in the reduction's accumulator dtype (float32
//! sums in `float`, as PyTorch does, split over SIMD lanes by
//! `omp simd reduction`). Parallel chunk sizes come from the plugin's
//! heuristics; this module never holds a device's numbers.

pub mod expr;
mod kernel;
pub mod prelude;

pub use kernel::{write_kernel, GeneratedKernel};

use super::triton::LaunchHeuristics;
use crate::schedule::ir::{BufferId, Kernel, Program};

/// Why a C++ kernel could not be generated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The plugin's heuristics failed or returned nothing usable.
    #[error("launch heuristics: {0}")]
    Heuristics(String),
    /// An operation this generator cannot express.
    #[error("kernel `{kernel}`: {what}")]
    Unsupported {
        /// The kernel.
        kernel: String,
        /// What.
        what: String,
    },
    /// Writing text failed.
    #[error("formatting failed")]
    Fmt(#[from] std::fmt::Error),
}

/// What the wrapper needs to call a kernel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelInfo {
    /// The function's name.
    pub name: String,
    /// Buffers passed as pointer arguments, in order (reads, then writes).
    pub args: Vec<BufferId>,
    /// The OpenMP chunk (elements or rows per thread at a time).
    pub chunk: u32,
}

/// Choices of the C++ code generator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CppOptions {
    /// Write a kernel's loops and indices in `int32_t` when every part of
    /// every index provably fits (the default; it lets compilers vectorise
    /// division and remainder). `false` keeps `int64_t` everywhere, as a
    /// kernel too large for `int32_t` gets anyway.
    pub int32_indices: bool,
}

impl Default for CppOptions {
    fn default() -> Self {
        CppOptions {
            int32_indices: true,
        }
    }
}

/// Generates every kernel of a program; `namer` makes kernel names unique.
pub fn write_kernels(
    program: &Program,
    heuristics: &dyn LaunchHeuristics,
    options: &CppOptions,
    namer: &mut crate::codegen::namer::Namer,
) -> Result<Vec<GeneratedKernel>, Error> {
    let mut out = Vec::new();
    for step in &program.steps {
        if let crate::schedule::Step::Kernel(k) = step {
            let stem = kernel_stem(k, out.len());
            let name = namer.name(&stem);
            out.push(write_kernel(program, k, &name, heuristics, options)?);
        }
    }
    Ok(out)
}

/// `cpp_poi_fused_add_relu_0`-style names, like Inductor's.
fn kernel_stem(k: &Kernel, n: usize) -> String {
    let kind = if !k.space.is_reduction() && k.reductions.is_empty() {
        "poi"
    } else {
        "red"
    };
    let mut ops: Vec<&str> = Vec::new();
    for op in &k.ops {
        if !ops.contains(op) {
            ops.push(op);
        }
    }
    ops.truncate(6);
    format!("cpp_{kind}_fused_{}_{n}", ops.join("_"))
}
