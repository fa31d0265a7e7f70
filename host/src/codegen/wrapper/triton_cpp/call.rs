//! `kiln_call`: the buffers as pointers into the caller's tensors, the
//! constants block and the workspace, then every step (a kernel launch, a
//! fused attention launch, a matrix product through `kilnGemm`), then the
//! outputs not computed in place copied out; and, with `--cuda-graph`, the
//! `kiln_call` that captures and replays it.

use std::collections::BTreeSet;
use std::fmt::Write;

use kiln_plugin_api::Grid;

use super::check::{gemm, Gemm};
use super::init::FAIL;
use super::text::{scalar_type, scalar_value};
use super::{sizes, Error, Writer, DEPENDENT_LAUNCH_FUNCTION};
use crate::codegen::triton::attention::{runtime_scalar_indices, AttentionLaunch, TemplateLaunch};
use crate::codegen::triton::index_copy::IndexCopyLaunch;
use crate::codegen::triton::sized::{Forms, SizedLaunch, Variant};
use crate::codegen::triton::KernelInfo;
use crate::graph::dtype::DType;
use crate::graph::sym::Syntax;
use crate::schedule::index::{product, size_text, Size};
use crate::schedule::ir::{BufferId, ExternCall, ExternOp, Step, View};

/// The C++ value of `size` (a number, or an expression over the `ks<id>` locals).
fn c_size(size: &Size) -> String {
    size_text(size, Syntax::C)
}

/// Bytes of `shape` in `dtype`, as C++: a number, or an expression over the
/// `ks<id>` locals (saturating to the largest size on overflow, which the
/// inputs' checks never let a call reach).
fn c_bytes(shape: &[Size], dtype: DType) -> String {
    let n = product(shape);
    match n.as_const() {
        Some(n) => (n.max(0) * dtype.size_bytes() as i64).to_string(),
        None => n
            .scale(dtype.size_bytes() as i64)
            .map_or_else(|_| i64::MAX.to_string(), |b| c_size(&b)),
    }
}

/// `statement` where `bytes` (C++) is above 0: as is where it is a positive
/// number, guarded where it is an expression, nothing where it is 0.
fn if_bytes(bytes: &str, statement: &str) -> String {
    match bytes.parse::<i64>() {
        Ok(n) if n > 0 => statement.to_string(),
        Ok(_) => String::new(),
        Err(_) => format!("if ({bytes} > 0) {statement}"),
    }
}

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
                    } else if let Some(l) = (self.plan.kernels.convs.get(&i))
                        .or_else(|| self.plan.kernels.templates.get(&i))
                    {
                        let pointers = l
                            .pointers
                            .iter()
                            .map(|v| self.pointer(v))
                            .collect::<Result<Vec<_>, _>>()?;
                        self.template_launch(l, pointers)?;
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
            let bytes = c_bytes(&v.shape, p.buffer(v.buf).dtype);
            let from = self.pointer(v)?;
            let copy = if_bytes(
                &bytes,
                &format!("kilnCopyOnDevice(outputs[{i}], {from}, {bytes}, stream);"),
            );
            if !copy.is_empty() {
                writeln!(self.out, "        {copy}")?;
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

    /// The signature, the readiness, sizes and alignment checks, the stream and
    /// the workspace.
    fn call_head(&mut self) -> Result<(), Error> {
        let p = self.p;
        let dynamic = self.plan.is_dynamic();
        let (name, sizes) = match (self.plan.options.graphs, dynamic) {
            (true, _) => ("static int kiln_launch", dynamic),
            (false, false) => ("extern \"C\" int kiln_call", false),
            (false, true) => ("extern \"C\" int kiln_call_shaped", true),
        };
        let (shapes_param, shapes_note) = if sizes {
            (
                "const int64_t* const* input_shapes, ",
                " input_shapes: each\n// input's sizes, within the compiled range.",
            )
        } else {
            ("", "")
        };
        writeln!(
            self.out,
            "\n// Runs the graph on `stream`: device pointers, one dense tensor per input and output.{shapes_note}\n\
             {name}({shapes_param}const void* const* inputs, void* const* outputs, void* stream_handle) {{\n    \
             if (!kiln_ready) {{\n        \
             std::snprintf(kiln_error_text, sizeof kiln_error_text, \"%s\", \"kiln_init has not succeeded\");\n        \
             return 3;\n    \
             }}"
        )?;
        if dynamic {
            sizes::write_bind(&mut self.out, &self.plan.sources)?;
        }
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
        let symbolic_arena = self.layout.uses_arena() && self.layout.is_symbolic();
        if symbolic_arena {
            writeln!(
                self.out,
                "    // The workspace, laid out at this call's sizes."
            )?;
            self.layout.write_symbolic(&mut self.out)?;
        }
        writeln!(
            self.out,
            "    try {{\n        \
             // The driver's stream type, from the caller's handle (null: the default stream).\n        \
             {st} stream = ({st})stream_handle;\n        \
             [[maybe_unused]] unsigned char* const ws = {ws};\n        \
             // Triton's scratch parameters (global, profile): none of Kiln's kernels use them.\n        \
             [[maybe_unused]] void* kiln_scratch = nullptr;",
            st = self.plan.strings.stream_type,
            ws = if symbolic_arena {
                "kiln_workspace_at(arena_bytes, stream)"
            } else {
                "kiln_workspace"
            }
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
                    let buf = p.buffer(*b);
                    let bytes = c_bytes(&buf.shape, buf.dtype);
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
            let bytes = c_bytes(std::slice::from_ref(&v.offset), self.p.buffer(v.buf).dtype);
            format!("static_cast<void*>(static_cast<unsigned char*>({name}) + {bytes})")
        })
    }

    /// One kernel launch: its pointers, `xnumel` (and `rnumel`), and the scratch
    /// parameters Triton appends, on the kernel's grid.
    fn launch(&mut self, k: &KernelInfo) -> Result<(), Error> {
        let index = if k.int64_index { "int64_t" } else { "int32_t" };
        let mut args = Vec::with_capacity(k.args.len() + 4 + k.sizes.len());
        for b in &k.args {
            args.push(format!("&{}", self.name(*b)?));
        }
        writeln!(self.out, "        {{ // {}", k.name)?;
        writeln!(
            self.out,
            "            {index} xnumel = {};",
            c_size(&k.xnumel)
        )?;
        args.push("&xnumel".into());
        if let Some(r) = &k.rnumel {
            writeln!(self.out, "            {index} rnumel = {};", c_size(r))?;
            args.push("&rnumel".into());
        }
        // The size symbols the kernel reads, each of its parameter's type.
        for (i, (symbol, ty)) in k.sizes.iter().enumerate() {
            let c = scalar_type(ty)?;
            writeln!(
                self.out,
                "            {c} s{i} = static_cast<{c}>(ks{});",
                symbol.0
            )?;
            args.push(format!("&s{i}"));
        }
        match &k.sized {
            Some(sized) => self.sized_launch(k, sized, args),
            None => {
                let g = &k.launch.grid;
                self.launch_call(&k.name, args, [g.x, g.y, g.z], k.launch.num_warps)
            }
        }
    }

    /// The launch of a kernel of dynamic sizes: the variant and grid of the
    /// bucket of this call's row count and row length, from the kernel's table
    /// (`kiln_sized_cell`), closing the launch's block.
    fn sized_launch(
        &mut self,
        k: &KernelInfo,
        sized: &SizedLaunch,
        mut args: Vec<String>,
    ) -> Result<(), Error> {
        args.extend(["&kiln_scratch".to_string(), "&kiln_scratch".to_string()]);
        let cols = sized.table.iter().map(Vec::len).max().unwrap_or(0).max(1);
        let mut cells = Vec::new();
        for row in &sized.table {
            for j in 0..cols {
                if let Some((variant, g)) = row.get(j).or(row.last()) {
                    cells.push(format!("{{{variant}, {}u, {}u, {}u}}", g.x, g.y, g.z));
                }
            }
        }
        if cells.len() != sized.table.len() * cols || cells.is_empty() {
            return Err(Error::Unsupported(format!(
                "kernel `{}` of dynamic sizes has no launch planned (a bug in Kiln: please report)",
                k.name
            )));
        }
        writeln!(
            self.out,
            "            void* args[] = {{{}}};\n            \
             static const KilnSizedCell table[] = {{{}}};\n            \
             const KilnSizedCell& cell = kiln_sized_cell(table, {}, {cols}, {}, {}, xnumel, {});",
            args.join(", "),
            cells.join(", "),
            sized.table.len(),
            sized.x_from,
            sized.r_from,
            if k.rnumel.is_some() { "rnumel" } else { "1" },
        )?;
        // The further forms (`sized::Forms`) where this call's sizes allow them: form
        // `f`'s cases after form `f - 1`'s, a 32-bit form's with the counts as 32-bit
        // arguments.
        let mut forms: Vec<(&String, &Variant, &str)> = sized
            .names
            .iter()
            .zip(&sized.variants)
            .map(|(name, v)| (name, v, "args"))
            .collect();
        match &sized.forms {
            Some(further) => {
                if !further.narrow.is_empty() {
                    let narrow_args: Vec<String> = args
                        .iter()
                        .map(|a| match a.as_str() {
                            "&xnumel" => "&xnumel32".to_string(),
                            "&rnumel" => "&rnumel32".to_string(),
                            other => other.to_string(),
                        })
                        .collect();
                    writeln!(
                        self.out,
                        "            int32_t xnumel32 = static_cast<int32_t>(xnumel);{}\n            \
                         void* args32[] = {{{}}};",
                        if k.rnumel.is_some() {
                            "\n            int32_t rnumel32 = static_cast<int32_t>(rnumel);"
                        } else {
                            ""
                        },
                        narrow_args.join(", "),
                    )?;
                }
                writeln!(
                    self.out,
                    "            // The form this call's sizes allow.\n            \
                     const int form = {};\n            \
                     switch (cell.variant + {} * form) {{",
                    further.test(Syntax::C),
                    sized.variants.len(),
                )?;
                for f in 1..4 {
                    let args = if f & Forms::NARROW != 0 {
                        "args32"
                    } else {
                        "args"
                    };
                    let names = &further.names[f - 1];
                    if names.is_empty() {
                        // A form of a fact the kernel has no use for: never chosen, its
                        // cases keep the numbering.
                        forms.extend(
                            sized
                                .names
                                .iter()
                                .zip(&sized.variants)
                                .map(|(n, v)| (n, v, "")),
                        );
                        continue;
                    }
                    forms.extend(names.iter().zip(&sized.variants).map(|(n, v)| (n, v, args)));
                }
            }
            None => writeln!(self.out, "            switch (cell.variant) {{")?,
        }
        for (n, (name, v, args)) in forms.into_iter().enumerate() {
            if args.is_empty() {
                continue;
            }
            let (handle, shared, launch) = self.launch_target(name)?;
            let label = if n == 0 {
                "default".to_string()
            } else {
                format!("case {n}")
            };
            writeln!(
                self.out,
                "            {label}: {launch}({handle}, cell.x, cell.y, cell.z, {}u, {shared}u, {args}, stream); break;",
                v.num_warps
            )?;
        }
        writeln!(self.out, "            }}\n        }}")?;
        Ok(())
    }

    /// Kernel `kernel`'s handle, its dynamic shared memory, and the launch
    /// function it takes (a programmatic dependent's, where it was compiled to
    /// wait and the driver defines it).
    fn launch_target(&self, kernel: &str) -> Result<(String, u32, &'static str), Error> {
        let handle = self.plan.handle(kernel)?.to_string();
        let binary = self.binary(kernel)?;
        let launch = if binary.dependent && self.dependent_launch {
            DEPENDENT_LAUNCH_FUNCTION
        } else {
            "launchKernel"
        };
        Ok((handle, binary.shared, launch))
    }

    /// `launchKernel` of kernel `kernel` with `args` and the scratch
    /// parameters, closing the launch's block.
    fn launch_call(
        &mut self,
        kernel: &str,
        args: Vec<String>,
        grid: [u64; 3],
        warps: u32,
    ) -> Result<(), Error> {
        self.launch_with(kernel, args, grid.map(|g| format!("{g}u")), warps)
    }

    /// `launchKernel` of kernel `kernel` with `args` and the scratch parameters
    /// on `grid` (C++ values), closing the launch's block.
    fn launch_with(
        &mut self,
        kernel: &str,
        mut args: Vec<String>,
        grid: [String; 3],
        warps: u32,
    ) -> Result<(), Error> {
        args.extend(["&kiln_scratch".to_string(), "&kiln_scratch".to_string()]);
        let (handle, shared, launch) = self.launch_target(kernel)?;
        let [x, y, z] = grid;
        writeln!(
            self.out,
            "            void* args[] = {{{}}};\n            \
             {launch}({handle}, {x}, {y}, {z}, {warps}u, {shared}u, args, stream);\n        \
             }}",
            args.join(", "),
        )?;
        Ok(())
    }

    /// A fused attention step's launch. A step of dynamic shapes launches the
    /// tiles planned at the batch and query rows nearest this call's
    /// (`kiln_nearest_tiles`).
    fn attention_launch(&mut self, l: &AttentionLaunch) -> Result<(), Error> {
        if l.planned.is_empty() || l.variants.is_empty() {
            self.attention_tiles(l)?;
        } else {
            let n = l.ints.len();
            let (z, rows) = match (l.ints.get(n.wrapping_sub(4)), l.ints.get(n.wrapping_sub(2))) {
                (Some(z), Some(rows)) if n >= 4 => (c_size(z), c_size(rows)),
                _ => {
                    return Err(Error::Unsupported(format!(
                        "attention kernel `{}` without its sizes",
                        l.kernel
                    )))
                }
            };
            let points: Vec<String> = l
                .planned
                .iter()
                .map(|([pz, pl], i)| format!("{{{pz}, {pl}, {i}}}"))
                .collect();
            writeln!(
                self.out,
                "        {{ // {}: the tiles planned nearest this call's batch and query rows\n            \
                 static const int64_t tiles[][3] = {{{}}};\n            \
                 switch (kiln_nearest_tiles(tiles, {}, {z}, {rows})) {{",
                l.kernel,
                points.join(", "),
                points.len()
            )?;
            for (i, launch) in std::iter::once(l).chain(&l.variants).enumerate() {
                let label = if i == 0 {
                    "default".to_string()
                } else {
                    format!("case {i}")
                };
                writeln!(self.out, "            {label}:")?;
                self.attention_tiles(launch)?;
                writeln!(self.out, "            break;")?;
            }
            writeln!(self.out, "            }}\n        }}")?;
        }
        let Some(c) = &l.combine else { return Ok(()) };
        // Split keys: the partial results combined into the output.
        let pointers = c
            .pointers
            .iter()
            .map(|v| self.pointer(v))
            .collect::<Result<Vec<_>, _>>()?;
        self.template_launch(c, pointers)
    }

    /// One tile variant's launch: where it has a divisibility guard, its twin
    /// compiled for lengths of multiples of 16 when this call's pass it, else itself.
    fn attention_tiles(&mut self, l: &AttentionLaunch) -> Result<(), Error> {
        let Some((guard, twin)) = &l.divisible else {
            return self.attention_kernel(l);
        };
        let test: Vec<String> = guard
            .iter()
            .map(|s| format!("ks{} % 16 == 0", s.0))
            .collect();
        writeln!(
            self.out,
            "        if ({}) {{ // lengths of multiples of 16",
            test.join(" && ")
        )?;
        self.attention_kernel(twin)?;
        writeln!(self.out, "        }} else {{")?;
        self.attention_kernel(l)?;
        writeln!(self.out, "        }}")?;
        Ok(())
    }

    /// One attention kernel's launch: view pointers, then its runtime scalars, on
    /// its grid (for dynamic shapes, the plugin's for the bucket of this call's
    /// programs).
    fn attention_kernel(&mut self, l: &AttentionLaunch) -> Result<(), Error> {
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
        let scalars: Vec<usize> = runtime_scalar_indices(kernel, l).collect();
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
        for (i, (index, (_, ty))) in scalars.into_iter().zip(scalar_types).enumerate() {
            let c = scalar_type(ty)?;
            let value = match index.checked_sub(1).and_then(|j| l.ints.get(j)) {
                Some(size) if !size.is_const() => format!("static_cast<{c}>({})", c_size(size)),
                _ => scalar_value(&l.scalars[index], c)?,
            };
            writeln!(self.out, "            {c} s{i} = {value};")?;
            args.push(format!("&s{i}"));
        }
        self.launch_on(&l.kernel, args, &l.grid, l.dynamic.as_ref(), l.num_warps)
    }

    /// `kernel`'s launch with `args` on `grid`, or over symbolic sizes (`dynamic`: the
    /// programs and the plugin's grid per power of two of them) on the grid for this
    /// call's programs.
    fn launch_on(
        &mut self,
        kernel: &str,
        args: Vec<String>,
        grid: &Grid,
        dynamic: Option<&(Size, Vec<Grid>)>,
        warps: u32,
    ) -> Result<(), Error> {
        match dynamic {
            Some((programs, grids)) => {
                let grid = self.bucket_grid(programs, grids)?;
                self.launch_with(kernel, args, grid, warps)
            }
            None => self.launch_call(kernel, args, [grid.x, grid.y, grid.z], warps),
        }
    }

    /// For a launch of symbolic sizes: the plugin's grid for the power of two of
    /// `programs` that covers them, from the table of `grids` (one per power of two),
    /// as the C++ values of its three dims.
    fn bucket_grid(&mut self, programs: &Size, grids: &[Grid]) -> Result<[String; 3], Error> {
        let table: Vec<String> = grids
            .iter()
            .map(|g| format!("{{0, {}u, {}u, {}u}}", g.x, g.y, g.z))
            .collect();
        writeln!(
            self.out,
            "            // The plugin's grid for the power of two of programs that covers them.\n            \
             static const KilnSizedCell grids[] = {{{}}};\n            \
             const int64_t programs = {};\n            \
             const KilnSizedCell& cell = grids[std::min<int>(kiln_bit_length(programs > 1 ? static_cast<uint64_t>(programs - 1) : 0), {})];",
            table.join(", "),
            c_size(programs),
            grids.len().saturating_sub(1),
        )?;
        Ok(["cell.x", "cell.y", "cell.z"].map(String::from))
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
            // A size of the call's (a symbolic batch), else the number.
            match l.sizes.iter().find(|(j, _)| *j == i) {
                Some((_, size)) => writeln!(
                    self.out,
                    "            {c} s{i} = static_cast<{c}>({});",
                    c_size(size)
                )?,
                None => writeln!(self.out, "            {c} s{i} = {value};")?,
            }
            args.push(format!("&s{i}"));
        }
        self.launch_on(&l.kernel, args, &l.grid, l.dynamic.as_ref(), l.num_warps)
    }

    /// `index_copy` into its result: `self` copied there first, unless the caller passed
    /// one buffer as both (a state's input and output, where the step may write in
    /// place), then Kiln's kernel writes the source's slices.
    fn index_copy(&mut self, e: &ExternCall, l: &IndexCopyLaunch) -> Result<(), Error> {
        let x = &e.args[0];
        let result = self.name(e.out)?.to_string();
        let from = self.pointer(x)?;
        let bytes = c_bytes(&x.shape, self.p.buffer(x.buf).dtype);
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

    /// A matrix product through the plugin's `kilnGemm`. Over dynamic sizes it
    /// runs where none is 0, and refuses (4) a size past BLAS's 32 bits.
    fn gemm_call(&mut self, e: &ExternCall, g: &Gemm) -> Result<(), Error> {
        let empty = [&g.m, &g.n, &g.batch]
            .iter()
            .any(|s| s.as_const() == Some(0));
        if empty {
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
        for size in &g.checked {
            let value = c_size(size);
            writeln!(
                self.out,
                "        if ({value} > 2147483647) {{\n            \
                 std::snprintf(kiln_error_text, sizeof kiln_error_text, \"%s\", \"`{}`: a size of {} \
                 at this call's sizes is over 2^31 - 1, which BLAS takes\");\n            \
                 return 4;\n        \
                 }}",
                e.op.name(),
                size_text(size, Syntax::Python).replace(['"', '\\'], ""),
            )?;
        }
        let symbolic: Vec<String> = [&g.m, &g.n, &g.batch]
            .iter()
            .filter(|s| !s.is_const())
            .map(|s| format!("{} > 0", c_size(s)))
            .collect();
        let guard = if symbolic.is_empty() {
            String::new()
        } else {
            format!("if ({}) ", symbolic.join(" && "))
        };
        writeln!(
            self.out,
            "        {guard}kilnGemm({}, {}, {}, {}, {}, {}, {a}, {}, {}, {b}, {}, {}, {c}, {}, {}, {}, stream); // {}",
            g.dtype,
            g.a.0,
            g.b.0,
            c_size(&g.m),
            c_size(&g.n),
            c_size(&g.k),
            c_size(&g.a.1),
            c_size(&g.a.2),
            c_size(&g.b.1),
            c_size(&g.b.2),
            c_size(&g.c.0),
            c_size(&g.c.1),
            c_size(&g.batch),
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
        let symbols = self.plan.sources.len();
        // A wrapper for a range of sizes keys its graph by the sizes too.
        let (entry, shapes_param, shapes_arg, bind) = if self.plan.is_dynamic() {
            (
                "kiln_call_shaped",
                "const int64_t* const* input_shapes, ",
                "input_shapes, ",
                format!(
                    "    int64_t ks[{symbols}];\n    \
                     if (kiln_bind_sizes(input_shapes, ks) != 0) return 4;\n    \
                     for (int j = 0; j < {symbols}; ++j) key[{first} + j] = reinterpret_cast<const void*>(static_cast<uintptr_t>(ks[j]));\n",
                    first = inputs + outputs + 1
                ),
            )
        } else {
            ("kiln_call", "", "", String::new())
        };
        writeln!(
            self.out,
            "\n// Runs the graph on `stream`: directly the first time these pointers{sizes_note} and this stream\n\
             // are seen (then captured into a device graph), as that graph while they stay the same.\n\
             extern \"C\" int {entry}({shapes_param}const void* const* inputs, void* const* outputs, void* stream_handle) {{\n    \
             if (stream_handle == nullptr) {{\n        \
             return kiln_launch({shapes_arg}inputs, outputs, stream_handle);\n    \
             }}\n    \
             std::array<const void*, {key}> key{{}};\n    \
             for (int i = 0; i < {inputs}; ++i) key[i] = inputs[i];\n    \
             for (int i = 0; i < {outputs}; ++i) key[{inputs} + i] = outputs[i];\n    \
             key[{last}] = stream_handle;\n\
             {bind}    \
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
             int status = kiln_launch({shapes_arg}inputs, outputs, stream_handle);\n        \
             if (status != 0) {{\n            \
             return status;\n        \
             }}\n        \
             kilnGraphBegin(stream);\n        \
             status = kiln_launch({shapes_arg}inputs, outputs, stream_handle);\n        \
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
            sizes_note = if symbols > 0 { ", sizes" } else { "" },
            key = inputs + outputs + 1 + symbols,
            last = inputs + outputs,
            stream_type = self.plan.strings.stream_type,
        )?;
        Ok(())
    }
}
