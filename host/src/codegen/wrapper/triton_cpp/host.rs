//! The entry points for a caller with host memory (`kiln_run_host`, what
//! `host run` calls) and the ones that describe the inputs and outputs.

use std::fmt::Write;

use super::{Error, Writer};
use crate::graph::dtype::DType;
use crate::schedule::index::hints;
use crate::schedule::ir::Program;

impl Writer<'_> {
    /// `kiln_run_host`.
    pub(super) fn run_host(&mut self) -> Result<(), Error> {
        write_run_host(&mut self.out, self.p, &self.plan.strings.stream_type)?;
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
         std::vector<void*> din({}, nullptr), dout({}, nullptr);\n    \
         int status = 0;\n    \
         try {{\n        \
         for (size_t i = 0; i < din.size(); ++i) {{\n            \
         din[i] = kilnDeviceAlloc(in_bytes[i]);\n            \
         kilnCopyToDevice(din[i], inputs[i], in_bytes[i]);\n        \
         }}\n        \
         for (size_t i = 0; i < dout.size(); ++i) dout[i] = kilnDeviceAlloc(out_bytes[i]);\n        \
         status = kiln_call(din.data(), dout.data(), nullptr);\n        \
         if (status == 0) {{\n            \
         kilnSynchronize(({stream_type})nullptr);\n            \
         for (size_t i = 0; i < dout.size(); ++i) kilnCopyToHost(outputs[i], dout[i], out_bytes[i]);\n        \
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
        list(ins),
        list(outs),
        p.inputs.len(),
        p.outputs.len()
    )
}

/// `kiln_input_rank(i)`, `kiln_input_size(i, d)`, `kiln_input_dtype(i)` and
/// the same for outputs: what a loader allocates (dtype names as PyTorch's,
/// `float32`; -1 or null out of range).
fn write_signature(out: &mut String, p: &Program) -> std::fmt::Result {
    let inputs: Vec<(Vec<i64>, DType)> = p
        .inputs
        .iter()
        .map(|b| (p.buffer(*b).shape_hint(), p.buffer(*b).dtype))
        .collect();
    let outputs: Vec<(Vec<i64>, DType)> = p
        .outputs
        .iter()
        .map(|v| (hints(&v.shape), p.buffer(v.buf).dtype))
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
