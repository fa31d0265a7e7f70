//! C++/OpenMP code generation for the `cpp` scheduling kind (Inductor's
//! `CppScheduling`): one `static` C++ function per kernel of the scheduled
//! program. What the kernels call (half conversions, NaN-aware helpers,
//! vectorisable float math, the packed matrix product) is the C++ runtime in
//! [`runtime`], headers the generated file includes. The wrapper that
//! allocates buffers and calls them is `codegen/wrapper/cpp/`.
//!
//! Semantics are those of the loop-IR evaluator (`schedule/eval.rs`): values
//! are computed in their dtype (float16/bfloat16 in `float`), reductions in
//! phases per row, accumulating in the reduction's accumulator dtype (float32
//! sums in `float`, as PyTorch does, split over SIMD lanes by
//! `omp simd reduction`). Parallel chunk sizes come from the plugin's
//! heuristics; this module never holds a device's numbers.

pub mod expr;
mod kernel;
pub mod runtime;

use super::heuristics::LaunchHeuristics;
use super::namer::Namer;
pub use super::KernelError as Error;
use crate::schedule::ir::{BufferId, Program};

/// The optimisation flags `host run` builds a `wrapper.cpp` with unless
/// `KILN_CXXFLAGS` is set (the `// Build:` line of every `wrapper.cpp` names
/// them).
///
/// `-fno-math-errno -fno-trapping-math` let the compiler inline `sqrt` and
/// speculate arithmetic past selects, which is what lets loops calling
/// `kiln_exp` vectorise; the generated code never reads `errno` or the
/// floating-point exception flags, so no result changes.
pub const DEFAULT_FLAGS: &str = "-O3 -march=native -fopenmp -fno-math-errno -fno-trapping-math";
/// Flags every library needs, whatever `KILN_CXXFLAGS` says.
pub const REQUIRED_FLAGS: &[&str] = &["-std=c++17", "-shared", "-fPIC"];

/// The names C++ kernels use at file scope besides the runtime's (which the
/// wrapper reserves by reading the runtime's headers): the standard library's
/// namespace and `<cstdint>`'s integer-literal macro.
pub const RESERVED: &[&str] = &["std", "INT64_C"];

/// What the wrapper needs to call a kernel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelInfo {
    /// The program step the kernel computes.
    pub step: usize,
    /// The function's name.
    pub name: String,
    /// Buffers passed as pointer arguments, in order (the scheduled kernel's
    /// parameters).
    pub args: Vec<BufferId>,
    /// The size symbols passed after the pointers (`ks<id>`), in order.
    pub symbols: Vec<crate::graph::sym::SymId>,
    /// The OpenMP chunk (elements or rows per thread at a time).
    pub chunk: u32,
}

/// Choices of the C++ code generator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Options {
    /// Write a kernel's loops and indices in `int32_t` when every part of
    /// every index provably fits (the default; it lets compilers vectorise
    /// division and remainder). `false` keeps `int64_t` everywhere, as a
    /// kernel too large for `int32_t` gets anyway.
    pub int32_indices: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            int32_indices: true,
        }
    }
}

/// The generated kernels: their source, in order.
#[derive(Clone, Debug)]
pub struct Kernels {
    /// One `static` function per kernel.
    pub source: String,
    /// How to call each kernel, in program order.
    pub info: Vec<KernelInfo>,
}

/// Generates every kernel of `program`; `namer` names the kernels (call it
/// before naming anything from the graph).
pub fn write(
    program: &Program,
    heuristics: &dyn LaunchHeuristics,
    options: &Options,
    namer: &mut Namer,
) -> Result<Kernels, Error> {
    let (texts, info) = super::write_kernels(program, "cpp", namer, |named| {
        kernel::write_kernel(program, named, heuristics, options)
    })?;
    let source = texts.iter().map(|text| format!("{text}\n")).collect();
    Ok(Kernels { source, info })
}
