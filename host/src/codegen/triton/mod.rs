//! Triton code generation: one plain `@triton.jit` function per fused kernel.
//!
//! Every kernel loops over its rows with a grid-stride loop, so that it stays
//! correct whatever grid the plugin's `adjust_grid` launches (GXU rounds up to
//! a multiple of 48; CUDA caps `y` and `z`). Launch configs come from the
//! plugin's heuristics; the first is used, and with `autotune` all of them are
//! offered to `triton.autotune`. float16 and bfloat16 are loaded and computed
//! in float32.

pub mod attention;
pub mod conv;
pub mod expr;
pub mod grouped_mm;
pub mod index_copy;
mod kernel;
pub mod sized;
pub mod sort;

use std::collections::HashMap;

use kiln_plugin_api::Grid;

use super::heuristics::LaunchHeuristics;
use super::namer::Namer;
pub use super::KernelError as Error;
use crate::graph::sym::SymId;
use crate::schedule::index::Size;
use crate::schedule::ir::{BufferId, Program};

/// The names the kernels' text binds or uses at module level in
/// `output_code.py`: the modules kernels call into, and the helpers they share.
pub const RESERVED: &[&str] = &[
    "triton",
    "tl",
    "libdevice",
    "kiln_max_combine",
    "kiln_min_combine",
    "kiln_div_floor",
    "kiln_div_floor64",
    "kiln_floor_quotient",
    "kiln_online_softmax_update",
    "kiln_online_softmax_finish",
    "kiln_dependent_wait",
    "kiln_dependent_wait_whole",
    "kiln_prefetch_l2",
    "KILN_PDL",
    "kiln_autotune_cache",
    "inspect",
];

/// Options of the Triton generator.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Options {
    /// Offer every candidate config to `triton.autotune`.
    pub autotune: bool,
    /// Write Kiln's own kernels for the steps the Python wrapper hands to ATen
    /// (`index_copy`: [`index_copy`]; convolutions: [`conv`]), for a wrapper without
    /// ATen (the C++ wrapper).
    pub library_kernels: bool,
    /// Kernels read their number of rows (`xnumel`) from the launch rather than as a
    /// literal: for a graph whose sizes vary between compiles (a dynamic export
    /// specialised, a graph file's named sizes), so that a kernel whose work does not
    /// otherwise depend on them keeps one text, and Triton compiles it once, across those
    /// compiles. Row lengths stay literals.
    pub runtime_rows: bool,
}

/// One launch config as the wrapper passes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Launch {
    /// `XBLOCK`.
    pub x_block: u32,
    /// `RBLOCK` (reduction kernels).
    pub r_block: Option<u32>,
    /// Warps per program.
    pub num_warps: u32,
    /// Pipelining stages.
    pub num_stages: u32,
    /// The grid launched (after `adjust_grid`).
    pub grid: Grid,
}

/// What the wrapper needs to launch a kernel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelInfo {
    /// The program step the kernel computes.
    pub step: usize,
    /// The kernel's function name.
    pub name: String,
    /// Buffers passed as pointer arguments, in order (the scheduled kernel's
    /// parameters).
    pub args: Vec<BufferId>,
    /// Parameter names of those pointers.
    pub arg_names: Vec<String>,
    /// Triton signature types of those pointers (`*fp32`, ...).
    pub arg_types: Vec<&'static str>,
    /// The parameters every launch passes divisible by 16 (pointers by their
    /// address), which the kernel is compiled to assume.
    pub aligned: Vec<String>,
    /// `xnumel` (an expression over the size symbols for a kernel of dynamic shapes).
    pub xnumel: Size,
    /// `rnumel`, for reduction kernels.
    pub rnumel: Option<Size>,
    /// The size symbols the kernel takes after `xnumel`/`rnumel` (`ks<id>`), each
    /// with its Triton type.
    pub sizes: Vec<(SymId, &'static str)>,
    /// For a kernel of symbolic sizes: its config and grid per bucket of the sizes a
    /// call brings ([`sized`]); `None` for a kernel of one size (`launch`).
    pub sized: Option<sized::SizedLaunch>,
    /// Whether index arithmetic needs 64 bits.
    pub int64_index: bool,
    /// The config launched (the first candidate).
    pub launch: Launch,
    /// Whether the kernel waits for the kernel before it, so that it may be
    /// launched as that kernel's programmatic dependent
    /// ([`kernel::DEPENDENT_WAIT`]).
    pub dependent: bool,
    /// Every candidate, when autotuning.
    pub candidates: Vec<Launch>,
}

/// The generated kernels: their source, in order, after the shared helpers.
#[derive(Clone, Debug)]
pub struct Kernels {
    /// `@triton.jit` functions, the helpers first.
    pub source: String,
    /// How to launch each kernel, in program order.
    pub info: Vec<KernelInfo>,
    /// The template kernels (fused attention, split attention's combining,
    /// `index_copy`, convolution, `_grouped_mm`, sorts), and the attention steps' launches.
    pub attention: attention::Attention,
    /// The launch of each `index_copy` step, by step index.
    pub index_copies: HashMap<usize, index_copy::IndexCopyLaunch>,
    /// The launch of each convolution step Kiln's kernel takes, by step index.
    pub convs: HashMap<usize, attention::TemplateLaunch>,
    /// The launch of each step of Kiln's own template kernels that both wrappers
    /// launch as they are: `_grouped_mm` and the two steps of a sort, by step index.
    pub templates: HashMap<usize, attention::TemplateLaunch>,
}

/// Generates every kernel of `program`; `namer` names the kernels (call it
/// before naming anything from the graph).
pub fn write(
    program: &Program,
    heuristics: &dyn LaunchHeuristics,
    options: &Options,
    namer: &mut Namer,
) -> Result<Kernels, Error> {
    let read_early = attention::masks_read_early(program);
    let (texts, info) = super::write_kernels(program, "kiln", namer, |named| {
        let early = named.kernel.writes().iter().any(|b| read_early.contains(b));
        kernel::write_kernel(program, named, heuristics, options, early)
    })?;
    let (texts, mut info) = share_identical(texts, info);
    name_variants(&mut info, namer);
    let mut attention = attention::write(program, heuristics, namer)?;
    let (index_copies, convs) = if options.library_kernels {
        (
            index_copy::write(program, heuristics, namer, &mut attention)?,
            conv::write(program, heuristics, namer, &mut attention)?,
        )
    } else {
        (HashMap::new(), HashMap::new())
    };
    let mut templates = grouped_mm::write(program, heuristics, namer, &mut attention)?;
    templates.extend(sort::write(program, heuristics, namer, &mut attention)?);
    let calling: Vec<&str> = texts
        .iter()
        .map(String::as_str)
        .chain([attention.source.as_str()])
        .collect();
    let mut parts: Vec<&str> = used_helpers(&calling);
    if options.autotune && info.iter().any(|k| k.candidates.len() > 1) {
        parts.push(kernel::AUTOTUNE_CACHE);
    }
    parts.extend(texts.iter().map(String::as_str));
    let mut source = parts.join("\n\n");
    // Each attention kernel's text starts with the blank lines before it.
    let attention_text = if source.is_empty() {
        attention.source.trim_start_matches('\n')
    } else {
        &attention.source
    };
    source.push_str(attention_text);
    Ok(Kernels {
        source,
        info,
        attention,
        index_copies,
        convs,
        templates,
    })
}

/// The text of every helper of [`kernel::HELPERS`] that `texts` call, or that
/// a helper they call calls, in the helpers' order: a file holds only the
/// helpers its kernels use.
fn used_helpers(texts: &[&str]) -> Vec<&'static str> {
    let mut used = vec![false; kernel::HELPERS.len()];
    let mut callers: Vec<&str> = texts.to_vec();
    while let Some(text) = callers.pop() {
        for (i, (name, helper)) in kernel::HELPERS.iter().enumerate() {
            if !used[i] && calls(text, name) {
                used[i] = true;
                callers.push(helper);
            }
        }
    }
    kernel::HELPERS
        .iter()
        .zip(used)
        .filter(|(_, used)| *used)
        .map(|((_, text), _)| *text)
        .collect()
}

/// Whether `text` names the identifier `name` as a whole word outside its
/// own definition (`def name(`).
fn calls(text: &str, name: &str) -> bool {
    let own = format!("def {name}(");
    replace_word(&text.replace(&own, ""), name, "\u{0}").contains('\u{0}')
}

/// Keeps one kernel of each set of identical ones (the same text but for the
/// name, the same argument types, alignment and launch constants): the later
/// ones launch the first, so that it is written, and compiled, once. A model's
/// repeated layers make the same kernels again and again.
fn share_identical(
    texts: Vec<String>,
    mut info: Vec<KernelInfo>,
) -> (Vec<String>, Vec<KernelInfo>) {
    let mut first: HashMap<String, String> = HashMap::new();
    let mut kept = Vec::new();
    for (text, k) in texts.into_iter().zip(info.iter_mut()) {
        let configs: Vec<_> = std::iter::once(&k.launch)
            .chain(&k.candidates)
            .map(|l| (l.x_block, l.r_block, l.num_warps, l.num_stages))
            .collect();
        let key = format!(
            "{}\u{1}{:?}{:?}{}{:?}{:?}",
            replace_word(&text, &k.name, "\u{0}"),
            k.arg_types,
            k.aligned,
            k.int64_index,
            configs,
            k.sized
        );
        match first.get(&key) {
            Some(name) => k.name = name.clone(),
            None => {
                first.insert(key, k.name.clone());
                kept.push(text);
            }
        }
    }
    (kept, info)
}

/// Names the launch variants of each kernel of symbolic sizes: the first is the
/// kernel itself, each other `<kernel>_v<n>`, compiled from the kernel's text
/// with its own config. Kernels that share one function share its variants.
fn name_variants(info: &mut [KernelInfo], namer: &mut Namer) {
    type Names = (Vec<String>, [Vec<String>; 3]);
    let mut named: HashMap<String, Names> = HashMap::new();
    for k in info.iter_mut() {
        let Some(sized) = &mut k.sized else { continue };
        let (names, forms) = named.entry(k.name.clone()).or_insert_with(|| {
            let mut names = vec![k.name.clone()];
            for n in 1..sized.variants.len() {
                names.push(namer.name(&format!("{}_v{n}", k.name)));
            }
            // The further forms (`sized::Forms`), each variant's.
            let mut forms: [Vec<String>; 3] = Default::default();
            for f in sized.forms.iter().flat_map(sized::Forms::present) {
                let suffix = match f {
                    sized::Forms::NARROW => "_i32",
                    sized::Forms::ALIGNED => "_a16",
                    _ => "_i32_a16",
                };
                forms[f - 1] = names
                    .iter()
                    .map(|n| namer.name(&format!("{n}{suffix}")))
                    .collect();
            }
            (names, forms)
        });
        sized.names = names.clone();
        if let Some(f) = &mut sized.forms {
            f.names = forms.clone();
        }
    }
}

/// `text` with every whole-word occurrence of the identifier `word` replaced.
fn replace_word(text: &str, word: &str, with: &str) -> String {
    let is_ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(word) {
        let before = rest[..at].chars().next_back();
        let after = rest[at + word.len()..].chars().next();
        out.push_str(&rest[..at]);
        if before.is_some_and(is_ident) || after.is_some_and(is_ident) {
            out.push_str(word);
        } else {
            out.push_str(with);
        }
        rest = &rest[at + word.len()..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::{kernel, replace_word, used_helpers};

    #[test]
    fn only_whole_words_are_replaced() {
        assert_eq!(
            replace_word("def k_1(a): k_10(k_1)  # k_1", "k_1", "@"),
            "def @(a): k_10(@)  # @"
        );
        assert_eq!(replace_word("xk_1 k_1x", "k_1", "@"), "xk_1 k_1x");
    }

    #[test]
    fn a_file_holds_the_helpers_its_kernels_call_and_theirs() {
        let names = |texts: &[&str]| -> Vec<String> {
            used_helpers(texts)
                .iter()
                .map(|t| t.split(['(', ' ']).nth(1).unwrap_or_default().to_string())
                .collect()
        };
        assert!(names(&["def k(x):\n    return x + kiln_max_combine_0\n"]).is_empty());
        assert_eq!(
            names(&["    q = kiln_div_floor(a, b)\n"]),
            ["kiln_floor_quotient", "kiln_div_floor"]
        );
        assert_eq!(
            names(&[
                "    m, s = kiln_online_softmax_finish(m, s)\n",
                "kiln_min_combine"
            ]),
            [
                "kiln_online_softmax_finish",
                "kiln_max_combine",
                "kiln_min_combine"
            ]
        );
        // Each entry is the definition of the name it is found by: a function, or a
        // module-level constant (KILN_PDL, which the waits read).
        for (name, text) in kernel::HELPERS {
            let defines = text.contains(&format!("def {name}("))
                || text.lines().any(|l| l.starts_with(&format!("{name} = ")));
            assert!(defines, "{name}");
        }
        // A wait brings the flag it reads, before it.
        let used = used_helpers(&["        kiln_dependent_wait_whole()\n"]);
        assert_eq!(used.len(), 2, "{used:?}");
        assert!(
            used[0].contains("\nKILN_PDL = tl.constexpr(False)"),
            "{used:?}"
        );
        assert!(
            used[1].contains("def kiln_dependent_wait_whole("),
            "{used:?}"
        );
    }
}
