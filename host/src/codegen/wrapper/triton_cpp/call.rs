//! `kiln_call`: the buffers as pointers into the caller's tensors, the
//! constants block and the workspace, then every step (a kernel launch, a
//! fused attention launch, a matrix product through `kilnGemm`), then the
//! outputs not computed in place copied out; and, with `--cuda-graph`, the
//! `kiln_call` that captures and replays it.

use std::collections::BTreeSet;
use std::fmt::Write;

use super::check::{gemm, Gemm};
use super::init::FAIL;
use super::text::{scalar_type, scalar_value};
use super::{Error, Writer, DEPENDENT_LAUNCH_FUNCTION};
use crate::codegen::triton::attention::{runtime_scalars, AttentionLaunch, TemplateLaunch};
use crate::codegen::triton::index_copy::IndexCopyLaunch;
use crate::codegen::triton::KernelInfo;
use crate::schedule::index::{hints, Size};
use crate::schedule::ir::{BufferId, ExternCall, ExternOp, Step, View};

impl Writer<'_> {
    /// `kiln_call` (or, with `--cuda-graph`, the `kiln_launch` it captures);
    /// returns the kernel launches per call.
    pub(super) fn call(&mut self) -> Result<usize, Error> {
        self.call_head()?;
        self.declarations()?;
        let p = self.p;
        let mut launches = 0;
        for (i, step) in p.steps.iter().enumerate() {
            match step {
                Step::Kernel(_) => {
                    let k = *self
                        .by_step
                        .get(&i)
                        .ok_or(Error::MissingKernel { step: i })?;
                    self.launch(k)?;
                    launches += 1;
                }
                Step::Extern(e) => {
                    if let Some(l) = self.plan.kernels.attention.launches.get(&i) {
                        self.attention_launch(l)?;
                        launches += 1;
                    } else if let Some(l) = self.plan.kernels.index_copies.get(&i) {
                        self.index_copy(e, l)?;
                        launches += 1;
                    } else {
                        let g = gemm(p, e)?;
                        self.gemm_call(e, &g)?;
                    }
                }
            }
        }
        for (i, v) in p.outputs.iter().enumerate() {
            if self.layout.in_place(i, v) || self.state_output(v.buf) == Some(i) {
                continue;
            }
            let numel = hints(&v.shape).iter().product::<i64>().max(0);
            let bytes = numel * p.buffer(v.buf).dtype.size_bytes() as i64;
            if bytes > 0 {
                let from = self.pointer(v)?;
                writeln!(
                    self.out,
                    "        kilnCopyOnDevice(outputs[{i}], {from}, {bytes}, stream);"
                )?;
            }
        }
        writeln!(
            self.out,
            "    }} catch (const std::exception& e) {{\n        \
             {FAIL}\n        \
             return 5;\n    \
             }}\n    \
             return 0;\n\
             }}"
        )?;
        Ok(launches)
    }

    /// The signature, the readiness and alignment checks, and the stream.
    fn call_head(&mut self) -> Result<(), Error> {
        let p = self.p;
        writeln!(
            self.out,
            "\n// Runs the graph on `stream`: device pointers, one dense tensor per input and output.\n\
             {}(const void* const* inputs, void* const* outputs, void* stream_handle) {{\n    \
             if (!kiln_ready) {{\n        \
             std::snprintf(kiln_error_text, sizeof kiln_error_text, \"%s\", \"kiln_init has not succeeded\");\n        \
             return 3;\n    \
             }}",
            if self.plan.options.graphs {
                "static int kiln_launch"
            } else {
                "extern \"C\" int kiln_call"
            }
        )?;
        for (what, count) in [("inputs", p.inputs.len()), ("outputs", p.outputs.len())] {
            if count > 0 {
                writeln!(
                    self.out,
                    "    for (int i = 0; i < {count}; ++i) {{\n        \
                     if (reinterpret_cast<uintptr_t>({what}[i]) % 16 != 0) {{\n            \
                     std::snprintf(kiln_error_text, sizeof kiln_error_text,\n                          \
                     \"{what}[%d] is not 16-byte aligned, which the kernels assume\", i);\n            \
                     return 4;\n        \
                     }}\n    \
                     }}"
                )?;
            }
        }
        writeln!(
            self.out,
            "    try {{\n        \
             // The driver's stream type, from the caller's handle (null: the default stream).\n        \
             {st} stream = ({st})stream_handle;\n        \
             [[maybe_unused]] unsigned char* const ws = kiln_workspace;\n        \
             // Triton's scratch parameters (global, profile): none of Kiln's kernels use them.\n        \
             [[maybe_unused]] void* kiln_scratch = nullptr;",
            st = self.plan.strings.stream_type
        )?;
        Ok(())
    }

    /// Every buffer as a pointer: the inputs, the constants in their block,
    /// the intermediates in the workspace (or in an output).
    fn declarations(&mut self) -> Result<(), Error> {
        let p = self.p;
        for (i, b) in p.inputs.iter().enumerate() {
            let name = self.name(*b)?;
            match self.state_output(*b) {
                // State the program updates in place (a KV cache's slices, a position
                // counter) lives in its output: the input is copied there first, unless
                // the caller passed one buffer as both.
                Some(o) => {
                    let bytes = p.buffer(*b).bytes().max(0);
                    writeln!(
                        self.out,
                        "        [[maybe_unused]] void* {name} = outputs[{o}];\n        \
                         if (outputs[{o}] != inputs[{i}] && {bytes} > 0) \
                         kilnCopyOnDevice(outputs[{o}], inputs[{i}], {bytes}, stream);"
                    )?;
                }
                None => writeln!(
                    self.out,
                    "        [[maybe_unused]] void* {name} = const_cast<void*>(inputs[{i}]);"
                )?,
            }
        }
        for &(b, offset) in &self.constants {
            let name = self.name(b)?;
            writeln!(
                self.out,
                "        [[maybe_unused]] void* {name} = kiln_constants + {offset};"
            )?;
        }
        let mut declared: BTreeSet<BufferId> = p.inputs.iter().copied().collect();
        declared.extend(self.constants.iter().map(|(b, _)| *b));
        for a in self.scheduled.memory.allocs.iter().flatten() {
            if declared.insert(a.buf) {
                let name = self.name(a.buf)?;
                writeln!(
                    self.out,
                    "        [[maybe_unused]] void* {name} = {};",
                    self.layout.at(a.buf)
                )?;
            }
        }
        Ok(())
    }

    /// The output that gives input buffer `b`'s new value, where a step writes `b`.
    fn state_output(&self, b: BufferId) -> Option<usize> {
        super::check::state_output(self.p, b)
    }

    /// A view as a device pointer expression (its buffer from the view's offset).
    fn pointer(&self, v: &View) -> Result<String, Error> {
        let name = self.name(v.buf)?;
        Ok(if v.offset.as_const() == Some(0) {
            name.to_string()
        } else {
            let bytes = v.offset.hint() * self.p.buffer(v.buf).dtype.size_bytes() as i64;
            format!("static_cast<void*>(static_cast<unsigned char*>({name}) + {bytes})")
        })
    }

    /// One kernel launch: its pointers, `xnumel` (and `rnumel`), and the scratch
    /// parameters Triton appends, on the kernel's grid.
    fn launch(&mut self, k: &KernelInfo) -> Result<(), Error> {
        let index = if k.int64_index { "int64_t" } else { "int32_t" };
        let mut args = Vec::with_capacity(k.args.len() + 4);
        for b in &k.args {
            args.push(format!("&{}", self.name(*b)?));
        }
        writeln!(self.out, "        {{ // {}", k.name)?;
        writeln!(self.out, "            {index} xnumel = {};", k.xnumel)?;
        args.push("&xnumel".into());
        if let Some(r) = &k.rnumel {
            writeln!(self.out, "            {index} rnumel = {r};")?;
            args.push("&rnumel".into());
        }
        let g = &k.launch.grid;
        self.launch_call(&k.name, args, [g.x, g.y, g.z], k.launch.num_warps)
    }

    /// `launchKernel` of kernel `kernel` with `args` and the scratch
    /// parameters, closing the launch's block.
    fn launch_call(
        &mut self,
        kernel: &str,
        mut args: Vec<String>,
        grid: [u64; 3],
        warps: u32,
    ) -> Result<(), Error> {
        args.extend(["&kiln_scratch".to_string(), "&kiln_scratch".to_string()]);
        let handle = self.plan.handle(kernel)?;
        let binary = self.binary(kernel)?;
        let shared = binary.shared;
        let launch = if binary.dependent && self.dependent_launch {
            DEPENDENT_LAUNCH_FUNCTION
        } else {
            "launchKernel"
        };
        writeln!(
            self.out,
            "            void* args[] = {{{}}};\n            \
             {launch}({handle}, {}u, {}u, {}u, {warps}u, {shared}u, args, stream);\n        \
             }}",
            args.join(", "),
            grid[0],
            grid[1],
            grid[2],
        )?;
        Ok(())
    }

    /// A fused attention kernel's launch: view pointers, then its runtime scalars.
    fn attention_launch(&mut self, l: &AttentionLaunch) -> Result<(), Error> {
        let kernel = self
            .plan
            .kernels
            .attention
            .kernels
            .iter()
            .find(|k| k.name == l.kernel)
            .ok_or_else(|| {
                Error::Unsupported(format!("attention kernel `{}` not found", l.kernel))
            })?;
        let scalar_types = kernel.signature.get(l.pointers.len()..).unwrap_or(&[]);
        // The strides compiled into the kernel are not passed.
        let scalars = runtime_scalars(kernel, l);
        if scalar_types.len() != scalars.len() {
            return Err(Error::Unsupported(format!(
                "attention kernel `{}`: {} scalars for {} parameters",
                l.kernel,
                scalars.len(),
                scalar_types.len()
            )));
        }
        writeln!(self.out, "        {{ // {}", l.kernel)?;
        let mut args = Vec::new();
        for (i, v) in l.pointers.iter().enumerate() {
            let pointer = self.pointer(v)?;
            writeln!(self.out, "            void* p{i} = {pointer};")?;
            args.push(format!("&p{i}"));
        }
        for (i, (value, (_, ty))) in scalars.into_iter().zip(scalar_types).enumerate() {
            let c = scalar_type(ty)?;
            writeln!(
                self.out,
                "            {c} s{i} = {};",
                scalar_value(value, c)?
            )?;
            args.push(format!("&s{i}"));
        }
        let g = &l.grid;
        self.launch_call(&l.kernel, args, [g.x, g.y, g.z], l.num_warps)?;
        let Some(c) = &l.combine else { return Ok(()) };
        // Split keys: the partial results combined into the output.
        let pointers = c
            .pointers
            .iter()
            .map(|v| self.pointer(v))
            .collect::<Result<Vec<_>, _>>()?;
        self.template_launch(c, pointers)
    }

    /// A template kernel's launch with integer scalars (of the kernel's signature's
    /// types), its pointer arguments as given.
    fn template_launch(&mut self, l: &TemplateLaunch, pointers: Vec<String>) -> Result<(), Error> {
        let kernel = self
            .plan
            .kernels
            .attention
            .kernels
            .iter()
            .find(|k| k.name == l.kernel)
            .ok_or_else(|| Error::Unsupported(format!("kernel `{}` not found", l.kernel)))?;
        let types = kernel.signature.get(pointers.len()..).unwrap_or(&[]);
        if types.len() != l.scalars.len() {
            return Err(Error::Unsupported(format!(
                "kernel `{}`: {} scalars for {} parameters",
                l.kernel,
                l.scalars.len(),
                types.len()
            )));
        }
        let types: Vec<&'static str> = types
            .iter()
            .map(|(_, ty)| scalar_type(ty))
            .collect::<Result<_, _>>()?;
        writeln!(self.out, "        {{ // {}", l.kernel)?;
        let mut args = Vec::new();
        for (i, pointer) in pointers.iter().enumerate() {
            writeln!(self.out, "            void* p{i} = {pointer};")?;
            args.push(format!("&p{i}"));
        }
        for (i, (value, c)) in l.scalars.iter().zip(types).enumerate() {
            writeln!(self.out, "            {c} s{i} = {value};")?;
            args.push(format!("&s{i}"));
        }
        let g = &l.grid;
        self.launch_call(&l.kernel, args, [g.x, g.y, g.z], l.num_warps)
    }

    /// `index_copy` into its result: `self` copied there first, unless the caller passed
    /// one buffer as both (a state's input and output, where the step may write in
    /// place), then Kiln's kernel writes the source's slices.
    fn index_copy(&mut self, e: &ExternCall, l: &IndexCopyLaunch) -> Result<(), Error> {
        let x = &e.args[0];
        let result = self.name(e.out)?.to_string();
        let from = self.pointer(x)?;
        let numel = hints(&x.shape).iter().product::<i64>().max(0);
        let bytes = numel * self.p.buffer(x.buf).dtype.size_bytes() as i64;
        let in_place = matches!(e.op, ExternOp::IndexCopy { in_place: true, .. });
        let skip = if in_place {
            format!("{result} != {from} && ")
        } else {
            String::new()
        };
        writeln!(
            self.out,
            "        if ({skip}{bytes} > 0) kilnCopyOnDevice({result}, {from}, {bytes}, stream);"
        )?;
        let mut pointers = vec![result];
        for v in &l.pointers[1..] {
            pointers.push(self.pointer(v)?);
        }
        self.template_launch(l, pointers)
    }

    /// A matrix product through the plugin's `kilnGemm`.
    fn gemm_call(&mut self, e: &ExternCall, g: &Gemm) -> Result<(), Error> {
        if g.m == 0 || g.n == 0 || g.batch == 0 {
            return Ok(());
        }
        let [a, b] = e.args.as_slice() else {
            return Ok(());
        };
        let out = self.p.buffer(e.out);
        let out_view = View {
            buf: e.out,
            shape: out.shape.clone(),
            strides: out.strides.clone(),
            offset: Size::from(0),
        };
        let (a, b, c) = (self.pointer(a)?, self.pointer(b)?, self.pointer(&out_view)?);
        writeln!(
            self.out,
            "        kilnGemm({}, {}, {}, {}, {}, {}, {a}, {}, {}, {b}, {}, {}, {c}, {}, {}, {}, stream); // {}",
            g.dtype,
            g.a.0,
            g.b.0,
            g.m,
            g.n,
            g.k,
            g.a.1,
            g.a.2,
            g.b.1,
            g.b.2,
            g.c.0,
            g.c.1,
            g.batch,
            e.op.name()
        )?;
        Ok(())
    }

    /// `kiln_call` of a wrapper built with `--cuda-graph`: the first call with a
    /// set of pointers and a stream runs the launches (`kiln_launch`) directly,
    /// so that whatever they create lazily (a BLAS handle, its workspace) exists
    /// before any capture, then captures them into a device graph without running
    /// it; later calls with the same pointers and stream replay the graph. New
    /// pointers replace the graph. The default stream (null) cannot be captured:
    /// calls on it launch directly.
    pub(super) fn graph_call(&mut self) -> Result<(), Error> {
        let (inputs, outputs) = (self.p.inputs.len(), self.p.outputs.len());
        writeln!(
            self.out,
            "\n// Runs the graph on `stream`: directly the first time these pointers and this stream are\n\
             // seen (then captured into a device graph), as that graph while they stay the same.\n\
             extern \"C\" int kiln_call(const void* const* inputs, void* const* outputs, void* stream_handle) {{\n    \
             if (stream_handle == nullptr) {{\n        \
             return kiln_launch(inputs, outputs, stream_handle);\n    \
             }}\n    \
             std::array<const void*, {key}> key{{}};\n    \
             for (int i = 0; i < {inputs}; ++i) key[i] = inputs[i];\n    \
             for (int i = 0; i < {outputs}; ++i) key[{inputs} + i] = outputs[i];\n    \
             key[{last}] = stream_handle;\n    \
             {stream_type} stream = ({stream_type})stream_handle;\n    \
             try {{\n        \
             if (kiln_graph != nullptr && key == kiln_graph_key) {{\n            \
             kilnGraphLaunch(kiln_graph, stream);\n            \
             return 0;\n        \
             }}\n        \
             kilnGraphDestroy(kiln_graph);\n        \
             kiln_graph = nullptr;\n        \
             // New pointers: run directly, which also sets up what a launch creates lazily\n        \
             // (a BLAS handle and its workspace) outside the capture, then capture for next time.\n        \
             int status = kiln_launch(inputs, outputs, stream_handle);\n        \
             if (status != 0) {{\n            \
             return status;\n        \
             }}\n        \
             kilnGraphBegin(stream);\n        \
             status = kiln_launch(inputs, outputs, stream_handle);\n        \
             if (status != 0) {{\n            \
             kilnGraphAbort(stream);\n            \
             return status;\n        \
             }}\n        \
             kiln_graph = kilnGraphEnd(stream);\n        \
             kiln_graph_key = key;\n    \
             }} catch (const std::exception& e) {{\n        \
             {FAIL}\n        \
             return 5;\n    \
             }}\n    \
             return 0;\n\
             }}",
            key = inputs + outputs + 1,
            last = inputs + outputs,
            stream_type = self.plan.strings.stream_type,
        )?;
        Ok(())
    }
}
