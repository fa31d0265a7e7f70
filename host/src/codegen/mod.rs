//! Code generation: a scheduled program to text, with the plugin's strings and
//! launch heuristics. Never touches a device, never asks a plugin anything but
//! through [`heuristics::LaunchHeuristics`] and the strings it is handed.
//!
//! Every generator has the same shape: a module with `Options`, an `Error`,
//! and one entry function `write(.., &Options, &mut Namer) -> Result<(text,
//! info), Error>`, where the info is plain data for the next stage:
//!
//! | generator | writes | info |
//! | --- | --- | --- |
//! | [`triton`] | one `@triton.jit` function per kernel | [`triton::KernelInfo`] per kernel |
//! | [`cpp`] | one C++/OpenMP function per kernel | [`cpp::KernelInfo`] per kernel |
//! | [`wrapper::python`] | `output_code.py` around Triton kernels | [`wrapper::python::Info`] |
//! | [`wrapper::cpp`] | `wrapper.cpp` around C++ kernels | [`wrapper::cpp::Info`] |
//!
//! What a wrapper needs from a kernel generator (the kernel's name, its
//! pointer parameters in order, its launch) comes back in that info; the
//! parameter list itself is the scheduled kernel's [`Kernel::params`],
//! computed once by the scheduler. Every name from an input file, and every
//! name a writer binds, goes through one [`namer::Namer`] per generated file;
//! `crate::driver` sets it up (reserving every writer's names first) and
//! calls the generators in order.

pub mod cpp;
pub mod heuristics;
pub mod keywords;
pub mod namer;
pub mod triton;
pub mod weights;
pub mod wrapper;

use crate::schedule::ir::{Access, Kernel, Param, Program, Step};

/// Why a kernel could not be generated (both kernel generators).
#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    /// The plugin's launch heuristics failed or returned nothing usable.
    #[error("kernel `{kernel}`: launch heuristics failed")]
    Heuristics {
        /// The kernel.
        kernel: String,
        /// Why.
        #[source]
        source: heuristics::HeuristicsError,
    },
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

/// A kernel step of a program with the name its generated function gets.
pub(crate) struct NamedKernel<'p> {
    /// Its position among the program's steps.
    pub step: usize,
    /// The scheduled kernel.
    pub kernel: &'p Kernel,
    /// The function's name, unique in the generated file.
    pub name: String,
}

/// Every kernel of `program` in order, named `{prefix}_{poi|red}_fused_{ops}_{n}`
/// like Inductor's kernels, through `namer`.
fn named_kernels<'p>(
    program: &'p Program,
    prefix: &str,
    namer: &mut namer::Namer,
) -> Vec<NamedKernel<'p>> {
    let mut out = Vec::new();
    for (step, s) in program.steps.iter().enumerate() {
        if let Step::Kernel(kernel) = s {
            let name = namer.name(&kernel_stem(prefix, kernel, out.len()));
            out.push(NamedKernel { step, kernel, name });
        }
    }
    out
}

/// Writes every kernel of `program` with `write_one`, named with `prefix`
/// through `namer`: each kernel's text and info, in program order.
pub(crate) fn write_kernels<I>(
    program: &Program,
    prefix: &str,
    namer: &mut namer::Namer,
    mut write_one: impl FnMut(&NamedKernel) -> Result<(String, I), KernelError>,
) -> Result<(Vec<String>, Vec<I>), KernelError> {
    let mut texts = Vec::new();
    let mut infos = Vec::new();
    for named in named_kernels(program, prefix, namer) {
        let (text, info) = write_one(&named)?;
        texts.push(text);
        infos.push(info);
    }
    Ok((texts, infos))
}

/// `kiln_poi_fused_add_relu_0`-style names: a pointwise or reduction kernel,
/// the first six distinct ops it fuses, and its number.
fn kernel_stem(prefix: &str, k: &Kernel, n: usize) -> String {
    let kind = if k.is_reduction() && !k.is_tiled() {
        "red"
    } else {
        "poi"
    };
    let mut ops: Vec<&str> = Vec::new();
    for op in &k.ops {
        if !ops.contains(op) {
            ops.push(op);
        }
    }
    ops.truncate(6);
    format!("{prefix}_{kind}_fused_{}_{n}", ops.join("_"))
}

/// The names of a kernel's pointer parameters, in order: `in_ptr0, in_ptr1,
/// …` for the buffers it only reads and `out_ptr0, …` for those it writes.
pub(crate) fn param_names(params: &[Param]) -> Vec<String> {
    let (mut reads, mut writes) = (0, 0);
    params
        .iter()
        .map(|p| match p.access {
            Access::Read => {
                reads += 1;
                format!("in_ptr{}", reads - 1)
            }
            Access::Write => {
                writes += 1;
                format!("out_ptr{}", writes - 1)
            }
        })
        .collect()
}
