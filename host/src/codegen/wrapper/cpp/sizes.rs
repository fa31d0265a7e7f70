//! The entry points of a `wrapper.cpp` compiled for a range of sizes
//! (`host compile --dynamic`):
//!
//! ```c
//! extern "C" int kiln_num_symbols(void);
//! extern "C" int kiln_output_shapes(const int64_t* const* input_shapes, int64_t* const* output_shapes);
//! extern "C" int kiln_call_shaped(const int64_t* const* input_shapes, const void* const* inputs, void* const* outputs);
//! ```
//!
//! `input_shapes[i]` points to graph input `i`'s sizes (its rank is the
//! graph's). Each size symbol is read from the first input dim that is the
//! symbol itself and checked against its range; then every input dim is
//! checked against its expression over the symbols. A call they refuse
//! returns 4, with the input, the dim and the range (or the expression) in
//! `kiln_last_error()`. `kiln_output_shapes` writes each output's sizes at
//! the inputs' sizes, for the caller to allocate them; `kiln_call` itself
//! returns 4 and says to call `kiln_call_shaped`.

use std::fmt::Write;

use super::super::{c_str, SymbolSource};
use crate::graph::sym::Syntax;
use crate::schedule::index::size_text;
use crate::schedule::ir::Program;

/// The names the entry points bind (reserved with the wrapper's).
pub const RESERVED: &[&str] = &[
    "kiln_num_symbols",
    "kiln_output_shapes",
    "kiln_call_shaped",
    "kiln_bind_sizes",
    "input_shapes",
    "output_shapes",
    "ks",
    "arena_bytes",
];

/// `kiln_bind_sizes(shapes, ks)`, which reads every symbol into `ks` and
/// checks every input's dims, and the entry points besides `kiln_call_shaped`:
/// `kiln_num_symbols` and `kiln_output_shapes` (a Triton device's C++ wrapper
/// writes them too).
pub(in crate::codegen::wrapper) fn write_entries(
    out: &mut String,
    p: &Program,
    sources: &[SymbolSource],
) -> std::fmt::Result {
    let n = sources.len();
    let label = |input: usize| c_str(&p.buffer(p.inputs[input]).name);
    writeln!(
        out,
        "\n// The size symbols of this call, from its inputs' sizes: 0, or 4 with the reason in\n\
         // kiln_last_error() when a size is outside its range or disagrees with the others.\n\
         static int kiln_bind_sizes(const int64_t* const* shapes, int64_t* ks) {{\n    \
         kiln_size_text[0] = 0;"
    )?;
    for (j, s) in sources.iter().enumerate() {
        let (lo, hi, symbol) = p
            .symbols
            .get(s.symbol)
            .map_or((0, i64::MAX, String::new()), |v| {
                (v.lo, v.hi, v.name.clone())
            });
        writeln!(
            out,
            "    ks[{j}] = shapes[{input}][{dim}];\n    \
             if (ks[{j}] < {lo} || ks[{j}] > {hi}) return kiln_size_out_of_range({input}, {}, {dim}, ks[{j}], {}, {lo}, {hi});",
            label(s.input),
            c_str(&symbol),
            input = s.input,
            dim = s.dim,
        )?;
    }
    write_symbol_locals(out, sources)?;
    for (i, b) in p.inputs.iter().enumerate() {
        for (d, size) in p.buffer(*b).shape.iter().enumerate() {
            if sources.iter().any(|s| s.input == i && s.dim == d) {
                continue;
            }
            let value = size_text(size, Syntax::C);
            let source = size.display_with(
                &|id| {
                    p.symbols
                        .get(id)
                        .map_or(format!("ks{}", id.0), |v| v.name.clone())
                },
                Syntax::Python,
            );
            writeln!(
                out,
                "    if (shapes[{i}][{d}] != {value}) return kiln_size_mismatch({i}, {}, {d}, shapes[{i}][{d}], {}, {value});",
                label(i),
                c_str(&source),
            )?;
        }
    }
    writeln!(out, "    return 0;\n}}")?;
    writeln!(
        out,
        "extern \"C\" int kiln_num_symbols(void) {{ return {n}; }}\n\
         extern \"C\" int kiln_output_shapes(const int64_t* const* input_shapes, int64_t* const* output_shapes) {{"
    )?;
    write_bind(out, sources)?;
    for (i, v) in p.outputs.iter().enumerate() {
        for (d, size) in v.shape.iter().enumerate() {
            writeln!(
                out,
                "    output_shapes[{i}][{d}] = {};",
                size_text(size, Syntax::C)
            )?;
        }
    }
    writeln!(out, "    return 0;\n}}")
}

/// The start of an entry point taking `input_shapes`: the symbols bound and
/// checked (return 4 when refused), then each as the local `ks<id>`.
pub(in crate::codegen::wrapper) fn write_bind(
    out: &mut String,
    sources: &[SymbolSource],
) -> std::fmt::Result {
    writeln!(
        out,
        "    int64_t ks[{}];\n    \
         if (kiln_bind_sizes(input_shapes, ks) != 0) return 4;",
        sources.len().max(1)
    )?;
    write_symbol_locals(out, sources)
}

/// `const int64_t ks<id> = ks[j];` for every symbol, as kernels and sizes name them.
fn write_symbol_locals(out: &mut String, sources: &[SymbolSource]) -> std::fmt::Result {
    for (j, s) in sources.iter().enumerate() {
        writeln!(
            out,
            "    [[maybe_unused]] const int64_t ks{} = ks[{j}];",
            s.symbol.0
        )?;
    }
    Ok(())
}
