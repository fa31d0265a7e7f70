//! The entry points for a caller with host memory (`kiln_run_host`, what
//! `host run` calls) and the ones that describe the inputs and outputs.

use std::fmt::Write;

use super::{Error, Writer};
use crate::graph::dtype::DType;
use crate::schedule::index::{hints, Size};
use crate::schedule::ir::Program;

impl Writer<'_> {
    /// `kiln_run_host` (for a range of sizes, `kiln_run_host_shaped`).
    pub(super) fn run_host(&mut self) -> Result<(), Error> {
        if self.plan.is_dynamic() {
            write_run_host_shaped(&mut self.out, self.p, &self.plan.strings.stream_type)?;
        } else {
            write_run_host(&mut self.out, self.p, &self.plan.strings.stream_type)?;
        }
        Ok(())
    }

    /// `kiln_input_rank` and the rest.
    pub(super) fn signature(&mut self) -> Result<(), Error> {
        write_signature(&mut self.out, self.p)?;
        Ok(())
    }
}

/// `kiln_run_host`: host memory in and out around one call on the default stream.
fn write_run_host(out: &mut String, p: &Program, stream_type: &str) -> std::fmt::Result {
    let bytes =
        |shape: &[i64], d: DType| shape.iter().product::<i64>().max(0) * d.size_bytes() as i64;
    let list = |xs: Vec<i64>| {
        if xs.is_empty() {
            "0".to_string()
        } else {
            xs.iter()
                .map(|x| format!("{x}ull"))
                .collect::<Vec<_>>()
                .join(", ")
        }
    };
    let ins: Vec<i64> = p
        .inputs
        .iter()
        .map(|b| bytes(&p.buffer(*b).shape_hint(), p.buffer(*b).dtype))
        .collect();
    let outs: Vec<i64> = p
        .outputs
        .iter()
        .map(|v| bytes(&hints(&v.shape), p.buffer(v.buf).dtype))
        .collect();
    writeln!(
        out,
        "\n// Host memory in and out: copies the inputs to the device, calls on the default stream,\n\
         // waits, and copies the outputs back (what `host run` uses).\n\
         extern \"C\" int kiln_run_host(const void* const* inputs, void* const* outputs) {{\n    \
         static const uint64_t in_bytes[] = {{{}}};\n    \
         static const uint64_t out_bytes[] = {{{}}};\n    \
         {}",
        list(ins),
        list(outs),
        round_trip(p, "kiln_call(din.data(), dout.data(), nullptr)", stream_type),
    )
}

/// `kiln_run_host_shaped`: `kiln_run_host` at the sizes `input_shapes` gives, the
/// outputs' from `kiln_output_shapes`.
fn write_run_host_shaped(out: &mut String, p: &Program, stream_type: &str) -> std::fmt::Result {
    let sizes = |d: DType| d.size_bytes();
    let in_sizes: Vec<String> = p
        .inputs
        .iter()
        .map(|b| sizes(p.buffer(*b).dtype).to_string())
        .collect();
    let out_sizes: Vec<String> = p
        .outputs
        .iter()
        .map(|v| sizes(p.buffer(v.buf).dtype).to_string())
        .collect();
    let ranks = |r: Vec<usize>| {
        if r.is_empty() {
            "0".to_string()
        } else {
            r.iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        }
    };
    let in_ranks: Vec<usize> = p.inputs.iter().map(|b| p.buffer(*b).shape.len()).collect();
    let out_ranks: Vec<usize> = p.outputs.iter().map(|v| v.shape.len()).collect();
    let most_rank = out_ranks.iter().copied().max().unwrap_or(0).max(1);
    writeln!(
        out,
        "\n// Host memory in and out at the sizes `input_shapes` gives: copies the inputs to the\n\
         // device, calls on the default stream, waits, and copies the outputs back (`host run`).\n\
         extern \"C\" int kiln_run_host_shaped(const int64_t* const* input_shapes, const void* const* inputs, void* const* outputs) {{\n    \
         static const int in_ranks[] = {{{in_ranks}}};\n    \
         static const uint64_t in_item[] = {{{in_item}}};\n    \
         static const int out_ranks[] = {{{out_ranks}}};\n    \
         static const uint64_t out_item[] = {{{out_item}}};\n    \
         std::vector<std::array<int64_t, {most_rank}>> out_shapes({n_out});\n    \
         std::vector<int64_t*> out_shape_ptrs({n_out});\n    \
         for (size_t i = 0; i < out_shapes.size(); ++i) out_shape_ptrs[i] = out_shapes[i].data();\n    \
         if (kiln_output_shapes(input_shapes, out_shape_ptrs.data()) != 0) return 4;\n    \
         std::vector<uint64_t> in_bytes({n_in}), out_bytes({n_out});\n    \
         for (size_t i = 0; i < in_bytes.size(); ++i) {{\n        \
         in_bytes[i] = in_item[i];\n        \
         for (int d = 0; d < in_ranks[i]; ++d) in_bytes[i] *= static_cast<uint64_t>(input_shapes[i][d]);\n    \
         }}\n    \
         for (size_t i = 0; i < out_bytes.size(); ++i) {{\n        \
         out_bytes[i] = out_item[i];\n        \
         for (int d = 0; d < out_ranks[i]; ++d) out_bytes[i] *= static_cast<uint64_t>(out_shapes[i][d]);\n    \
         }}\n    \
         {}\n\
         extern \"C\" int kiln_run_host(const void* const*, void* const*) {{ return kiln_sizes_needed(); }}",
        round_trip(p, "kiln_call_shaped(input_shapes, din.data(), dout.data(), nullptr)", stream_type),
        in_ranks = ranks(in_ranks),
        in_item = if in_sizes.is_empty() { "0".to_string() } else { in_sizes.join(", ") },
        out_ranks = ranks(out_ranks),
        out_item = if out_sizes.is_empty() { "0".to_string() } else { out_sizes.join(", ") },
        n_in = p.inputs.len(),
        n_out = p.outputs.len(),
    )
}

/// The body of a host-memory entry after its `in_bytes` and `out_bytes`: each input
/// copied to the device, `call` on the default stream, a wait, each output copied
/// back, and the device memory freed; the function's closing brace.
fn round_trip(p: &Program, call: &str, stream_type: &str) -> String {
    format!(
        "std::vector<void*> din({n_in}, nullptr), dout({n_out}, nullptr);\n    \
         int status = 0;\n    \
         try {{\n        \
         for (size_t i = 0; i < din.size(); ++i) {{\n            \
         din[i] = kilnDeviceAlloc(in_bytes[i]);\n            \
         if (in_bytes[i] > 0) kilnCopyToDevice(din[i], inputs[i], in_bytes[i]);\n        \
         }}\n        \
         for (size_t i = 0; i < dout.size(); ++i) dout[i] = kilnDeviceAlloc(out_bytes[i]);\n        \
         status = {call};\n        \
         if (status == 0) {{\n            \
         kilnSynchronize(({stream_type})nullptr);\n            \
         for (size_t i = 0; i < dout.size(); ++i) {{\n                \
         if (out_bytes[i] > 0) kilnCopyToHost(outputs[i], dout[i], out_bytes[i]);\n            \
         }}\n        \
         }}\n    \
         }} catch (const std::exception& e) {{\n        \
         std::snprintf(kiln_error_text, sizeof kiln_error_text, \"%s\", e.what());\n        \
         status = 5;\n    \
         }}\n    \
         try {{\n        \
         for (void* d : din) kilnDeviceFree(d);\n        \
         for (void* d : dout) kilnDeviceFree(d);\n    \
         }} catch (const std::exception&) {{\n    \
         }}\n    \
         return status;\n\
         }}",
        n_in = p.inputs.len(),
        n_out = p.outputs.len(),
    )
}

/// `kiln_input_rank(i)`, `kiln_input_size(i, d)`, `kiln_input_dtype(i)` and
/// the same for outputs: what a loader allocates (dtype names as PyTorch's,
/// `float32`; -1 or null out of range, and -1 for a size that varies between
/// calls).
fn write_signature(out: &mut String, p: &Program) -> std::fmt::Result {
    let fixed =
        |shape: &[Size]| -> Vec<i64> { shape.iter().map(|s| s.as_const().unwrap_or(-1)).collect() };
    let inputs: Vec<(Vec<i64>, DType)> = p
        .inputs
        .iter()
        .map(|b| (fixed(&p.buffer(*b).shape), p.buffer(*b).dtype))
        .collect();
    let outputs: Vec<(Vec<i64>, DType)> = p
        .outputs
        .iter()
        .map(|v| (fixed(&v.shape), p.buffer(v.buf).dtype))
        .collect();
    for (what, tensors) in [("input", inputs), ("output", outputs)] {
        let ranks: Vec<String> = tensors.iter().map(|(s, _)| s.len().to_string()).collect();
        let sizes: Vec<String> = tensors
            .iter()
            .flat_map(|(s, _)| s.iter().map(|x| format!("{x}LL")))
            .collect();
        let starts: Vec<String> = tensors
            .iter()
            .scan(0usize, |at, (s, _)| {
                let here = *at;
                *at += s.len();
                Some(here.to_string())
            })
            .collect();
        let dtypes: Vec<String> = tensors
            .iter()
            .map(|(_, d)| format!("\"{}\"", d.name()))
            .collect();
        let n = tensors.len();
        let or_zero = |v: Vec<String>| {
            if v.is_empty() {
                "0".to_string()
            } else {
                v.join(", ")
            }
        };
        writeln!(
            out,
            "\nstatic const int kiln_{what}_ranks[] = {{{}}};\n\
             static const int kiln_{what}_starts[] = {{{}}};\n\
             static const long long kiln_{what}_sizes[] = {{{}}};\n\
             static const char* const kiln_{what}_dtypes[] = {{{}}};\n\
             extern \"C\" int kiln_{what}_rank(int i) {{ return i >= 0 && i < {n} ? kiln_{what}_ranks[i] : -1; }}\n\
             extern \"C\" long long kiln_{what}_size(int i, int d) {{\n    \
             return i >= 0 && i < {n} && d >= 0 && d < kiln_{what}_ranks[i] ? kiln_{what}_sizes[kiln_{what}_starts[i] + d] : -1;\n\
             }}\n\
             extern \"C\" const char* kiln_{what}_dtype(int i) {{ return i >= 0 && i < {n} ? kiln_{what}_dtypes[i] : nullptr; }}",
            or_zero(ranks),
            or_zero(starts),
            or_zero(sizes),
            if dtypes.is_empty() { "nullptr".to_string() } else { dtypes.join(", ") },
        )?;
    }
    Ok(())
}
