//! `call(args)`: unpack and check the inputs, then, under the device guard,
//! allocate (or reuse) buffers by the memory plan, launch each kernel or call
//! each extern product, delete buffers as they die, and return the outputs.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::fmt::Write;

use super::{py_bool, torch_dtype, tuple, DeviceStrings};
use crate::codegen::triton::attention::{AttentionLaunch, TemplateLaunch};
use crate::codegen::triton::expr::float_text;
use crate::codegen::triton::{KernelInfo, Launch};
use crate::graph::sym::Syntax;
use crate::schedule::index::Size;
use crate::schedule::ir::{BufferId, BufferKind, ExternCall, ExternOp, Program, Step, View};
use crate::schedule::Scheduled;

/// Writes `call` for one program.
pub(super) struct CallWriter<'a> {
    /// The program and its memory plan.
    pub scheduled: &'a Scheduled,
    /// Every buffer's identifier.
    pub names: &'a HashMap<BufferId, String>,
    /// The kernel computing each kernel step.
    pub kernels: &'a HashMap<usize, &'a KernelInfo>,
    /// The fused attention launch of each attention step.
    pub attention: &'a HashMap<usize, AttentionLaunch>,
    /// The launch of each step of Kiln's own template kernels (`_grouped_mm`, sorts).
    pub templates: &'a HashMap<usize, TemplateLaunch>,
    /// Each attention step's signature, an index into [`AttentionSignatures::rows`].
    pub signatures: &'a HashMap<usize, usize>,
    /// Each float32 product-with-bias step's signature ([`bias_signatures`]).
    pub biases: &'a HashMap<usize, usize>,
    /// The plugin's strings.
    pub strings: &'a DeviceStrings,
    /// The positions of the inputs kernels read through a pointer, which
    /// `call` copies when they are not 16-byte aligned.
    pub aligned: &'a [usize],
    /// Where each size symbol is read from (empty for a program of one size).
    pub sources: &'a [super::super::SymbolSource],
    /// What a call of dynamic shapes chooses once from its sizes (filled as the
    /// steps are written).
    pub per_call: RefCell<PerCall>,
    /// The `KERNEL_GRIDS` table of each attention step's tile variant
    /// ([`attention_grids`]).
    pub grid_keys: &'a HashMap<(usize, usize), usize>,
}

/// The local that holds what a call of dynamic shapes chooses once from its sizes.
pub(super) const PER_CALL: &str = "_kiln_at";

/// What a call of dynamic shapes computes once, from its sizes, before its first
/// step: each sized kernel's launch for the bucket of its sizes, attention's
/// bucket and its tile variants' launches, and the bias epilogue's bucket. A model's layers launch the same
/// kernels at the same sizes, so each lookup is made once a call, not once a
/// launch (each costs the host about a microsecond). They are the items of one
/// tuple, [`PER_CALL`], in order of first use.
#[derive(Debug, Default)]
pub(super) struct PerCall {
    items: Vec<String>,
    index: HashMap<String, usize>,
}

impl PerCall {
    /// `expr` (of the size symbols alone), computed once a call: the expression
    /// that reads it.
    fn at(&mut self, expr: String) -> String {
        let next = self.items.len();
        let i = *self.index.entry(expr.clone()).or_insert(next);
        if i == next {
            self.items.push(expr);
        }
        format!("{PER_CALL}[{i}]")
    }

    /// The line that computes them all (nothing where there are none).
    fn write(&self, out: &mut String) -> std::fmt::Result {
        if self.items.is_empty() {
            return Ok(());
        }
        writeln!(
            out,
            "        # What this call's sizes choose, once: each sized kernel's launch, the buckets of\n\
             \x20       # the runtime's choices (attention's, the bias epilogue's)."
        )?;
        writeln!(out, "        {PER_CALL} = (")?;
        for item in &self.items {
            writeln!(out, "            {item},")?;
        }
        writeln!(out, "        )")
    }
}

/// The positions of the graph inputs some kernel reads through a pointer
/// (the kernels are compiled to assume those 16-byte aligned).
pub(super) fn aligned_inputs(
    p: &Program,
    kernels: &[KernelInfo],
    attention: &HashMap<usize, AttentionLaunch>,
    templates: &HashMap<usize, TemplateLaunch>,
) -> Vec<usize> {
    let read: HashSet<BufferId> = kernels
        .iter()
        .flat_map(|k| k.args.iter().copied())
        .chain(
            attention
                .values()
                .flat_map(|l| l.pointers.iter().map(|v| v.buf)),
        )
        .chain(
            templates
                .values()
                .flat_map(|l| l.pointers.iter().map(|v| v.buf)),
        )
        .collect();
    p.inputs
        .iter()
        .enumerate()
        .filter(|(_, b)| read.contains(b))
        .map(|(i, _)| i)
        .collect()
}

/// The parameter of the lambda that launches Kiln's attention kernel into the
/// buffer the runtime allocates (reserved, so no graph name takes it).
pub(super) const OUT_PARAM: &str = "_kiln_out";

/// The distinct signatures of a program's attention steps, which the runtime's
/// `Attention` chooses a side for once each: every layer of a model shares one.
#[derive(Debug, Default)]
pub(super) struct AttentionSignatures {
    /// Each signature as a Python tuple: the output buffer's size, stride and
    /// dtype, whether causal, the scale, and whether the buffer is `[B, L, H,
    /// Ev]` (`ExternOp::Attention::heads_inner`).
    pub rows: Vec<String>,
    /// Each attention step's signature, by step index.
    pub of_step: HashMap<usize, usize>,
}

/// The signatures of the attention steps `attention` launches: equal where
/// the kernel, its scalars and grid, the operands' sizes, strides and offsets
/// and dtypes, and the output's are.
pub(super) fn attention_signatures(
    p: &Program,
    attention: &HashMap<usize, AttentionLaunch>,
) -> AttentionSignatures {
    let mut out = AttentionSignatures::default();
    let mut by_key: HashMap<String, usize> = HashMap::new();
    let mut steps: Vec<&usize> = attention.keys().collect();
    steps.sort();
    for &i in steps {
        let (Some(Step::Extern(e)), Some(l)) = (p.steps.get(i), attention.get(&i)) else {
            continue;
        };
        let ExternOp::Attention {
            causal,
            scale_bits,
            heads_inner,
            ..
        } = e.op
        else {
            continue;
        };
        let buf = p.buffer(e.out);
        let views: Vec<String> = e
            .args
            .iter()
            .map(|v| {
                let dtype = p.buffer(v.buf).dtype;
                format!("{:?}{:?}{}{dtype:?}", v.shape, v.strides, v.offset)
            })
            .collect();
        let key = format!(
            "{}{:?}{:?}{views:?}{:?}{:?}{:?}{causal}{scale_bits}{heads_inner}",
            l.kernel, l.scalars, l.grid, buf.shape, buf.strides, buf.dtype
        );
        let next = out.rows.len();
        let index = *by_key.entry(key).or_insert(next);
        if index == next {
            // A step of dynamic shapes gives its buffer's size and strides at each call.
            let (size, stride) = match l.dynamic {
                Some(_) => ("None".to_string(), "None".to_string()),
                None => (tuple(&buf.shape), tuple(&buf.strides)),
            };
            out.rows.push(format!(
                "({size}, {stride}, {}, {}, {}, {})",
                torch_dtype(buf.dtype),
                py_bool(causal),
                float_text(f64::from_bits(scale_bits)),
                py_bool(heads_inner)
            ));
        }
        out.of_step.insert(i, index);
    }
    out
}

/// The distinct signatures of a program's float32 products with a bias
/// (`addmm`), for which the runtime's `BiasEpilogue` chooses the library's
/// epilogue or a product and an add once each.
#[derive(Debug, Default)]
pub(super) struct BiasSignatures {
    /// How many there are.
    pub count: usize,
    /// Each such step's signature, by step index.
    pub of_step: HashMap<usize, usize>,
}

/// The signatures of the float32 `addmm` steps: equal where the operands'
/// sizes, strides and offsets and the output's size and strides are.
pub(super) fn bias_signatures(p: &Program) -> BiasSignatures {
    let mut out = BiasSignatures::default();
    let mut by_key: HashMap<String, usize> = HashMap::new();
    for (i, step) in p.steps.iter().enumerate() {
        let Step::Extern(e) = step else { continue };
        let buf = p.buffer(e.out);
        if !matches!(e.op, ExternOp::Addmm) || buf.dtype != crate::graph::DType::Float32 {
            continue;
        }
        let views: Vec<String> = e
            .args
            .iter()
            .map(|v| format!("{:?}{:?}{}", v.shape, v.strides, v.offset))
            .collect();
        let key = format!("{views:?}{:?}{:?}", buf.shape, buf.strides);
        let next = by_key.len();
        out.of_step.insert(i, *by_key.entry(key).or_insert(next));
    }
    out.count = by_key.len();
    out
}

fn grid_text(l: &Launch) -> String {
    grid_text_of(&l.grid)
}

fn grid_text_of(g: &kiln_plugin_api::Grid) -> String {
    format!("({}, {}, {})", g.x, g.y, g.z)
}

impl CallWriter<'_> {
    fn program(&self) -> &Program {
        &self.scheduled.program
    }

    fn name(&self, b: BufferId) -> &str {
        self.names.get(&b).map_or("None", String::as_str)
    }

    /// A view as an expression: the buffer itself, or `reinterpret_tensor` of it,
    /// whose offset counts from the buffer's own (an input may be a view that
    /// starts past its storage's first element; `torch.as_strided`'s offset is
    /// the storage's, and read such an input from the wrong place).
    fn view(&self, v: &View) -> String {
        let b = self.program().buffer(v.buf);
        if v.shape == b.shape && v.strides == b.strides && v.offset.as_const() == Some(0) {
            self.name(v.buf).to_string()
        } else {
            format!(
                "reinterpret_tensor({}, {}, {}, {})",
                self.name(v.buf),
                tuple(&v.shape),
                tuple(&v.strides),
                v.offset
            )
        }
    }

    /// The whole function.
    pub fn write(&self, out: &mut String) -> std::fmt::Result {
        writeln!(out)?;
        self.input_table(out)?;
        writeln!(out)?;
        writeln!(out)?;
        writeln!(
            out,
            "def call(args, aligned=ALIGNED_INPUTS, check=check_inputs):"
        )?;
        self.inputs(out)?;
        writeln!(out, "    with {}:", self.strings.device_guard)?;
        writeln!(out, "        {}", self.strings.set_device)?;
        writeln!(out, "        stream0 = get_raw_stream(0)")?;
        // A dead buffer whose storage a later one takes is deleted there,
        // not when it dies.
        let donors: HashSet<BufferId> = self
            .scheduled
            .memory
            .allocs
            .iter()
            .flatten()
            .filter_map(|a| a.reuse)
            .collect();
        let mut body = String::new();
        for (i, step) in self.program().steps.iter().enumerate() {
            self.step(&mut body, i, step, &donors)?;
        }
        self.per_call.borrow().write(out)?;
        out.push_str(&body);
        let outs: Vec<String> = self
            .program()
            .outputs
            .iter()
            .map(|v| self.view(v))
            .collect();
        writeln!(
            out,
            "    return ({}{})",
            outs.join(", "),
            if outs.len() == 1 { "," } else { "" }
        )
    }

    /// The inputs' names, sizes and strides, the positions `call` aligns by
    /// default, and the check of them all that `call` makes.
    fn input_table(&self, out: &mut String) -> std::fmt::Result {
        let p = self.program();
        if !self.sources.is_empty() {
            return self.symbolic_input_table(out);
        }
        let rows = |f: &dyn Fn(BufferId) -> String| -> String {
            let items: Vec<String> = p.inputs.iter().map(|b| f(*b)).collect();
            match items.as_slice() {
                [one] => format!("({one},)"),
                _ => format!("({})", items.join(", ")),
            }
        };
        let aligned: Vec<i64> = self.aligned.iter().map(|&i| i as i64).collect();
        writeln!(
            out,
            "# Each input's name, size and strides, as the kernels were generated for them."
        )?;
        let names = rows(&|b| format!("\"{}\"", self.name(b)));
        writeln!(out, "INPUT_NAMES = {names}")?;
        writeln!(
            out,
            "INPUT_SIZES = {}",
            rows(&|b| tuple(&p.buffer(b).shape))
        )?;
        writeln!(
            out,
            "INPUT_STRIDES = {}",
            rows(&|b| tuple(&p.buffer(b).strides))
        )?;
        writeln!(
            out,
            "# The inputs kernels read through a pointer, which they assume 16-byte aligned:\n\
             # `call` copies each that is not. A caller that knows some always are (the\n\
             # parameters torch.compile passes) may pass the others as `aligned`. A caller\n\
             # whose own guards already hold every input to INPUT_SIZES and INPUT_STRIDES\n\
             # (dynamo's, for a graph of static shapes) may pass `check=None`."
        )?;
        writeln!(out, "ALIGNED_INPUTS = {}", tuple(&aligned))?;
        writeln!(
            out,
            "check_inputs = kiln_runtime.input_check(torch, INPUT_NAMES, INPUT_SIZES, INPUT_STRIDES)"
        )
    }

    /// The input table of a program of dynamic shapes: the size symbols, where each
    /// is read and its range, and the inputs' sizes and strides as a function of
    /// them, which the check compares every call's inputs with.
    fn symbolic_input_table(&self, out: &mut String) -> std::fmt::Result {
        let p = self.program();
        let names: Vec<String> = p
            .inputs
            .iter()
            .map(|b| format!("\"{}\"", self.name(*b)))
            .collect();
        writeln!(out, "# Each input's name.")?;
        writeln!(out, "INPUT_NAMES = {}", tuple(&names))?;
        writeln!(
            out,
            "# The size symbols the program takes: (name in the kernels, name in the source,\n\
             # the input and dim it is read from, least, most)."
        )?;
        let rows: Vec<String> = self
            .sources
            .iter()
            .map(|s| {
                let sym = p.symbols.get(s.symbol);
                format!(
                    "(\"ks{}\", {}, {}, {}, {}, {})",
                    s.symbol.0,
                    super::py_str(sym.map_or("?", |v| v.name.as_str())),
                    s.input,
                    s.dim,
                    sym.map_or(0, |v| v.lo),
                    sym.map_or(i64::MAX, |v| v.hi)
                )
            })
            .collect();
        writeln!(out, "SIZE_SYMBOLS = {}", tuple(&rows))?;
        let params: Vec<String> = self
            .sources
            .iter()
            .map(|s| format!("ks{}", s.symbol.0))
            .collect();
        writeln!(
            out,
            "# Every input's sizes and strides at the symbols' values."
        )?;
        writeln!(out, "def input_layouts({}):", params.join(", "))?;
        let sizes: Vec<String> = p
            .inputs
            .iter()
            .map(|b| tuple(&p.buffer(*b).shape))
            .collect();
        let strides: Vec<String> = p
            .inputs
            .iter()
            .map(|b| tuple(&p.buffer(*b).strides))
            .collect();
        writeln!(out, "    return {}, {}", tuple(&sizes), tuple(&strides))?;
        let aligned: Vec<i64> = self.aligned.iter().map(|&i| i as i64).collect();
        writeln!(
            out,
            "# The inputs kernels read through a pointer, which they assume 16-byte aligned:\n\
             # `call` copies each that is not (`aligned` may name fewer). `check=None` skips\n\
             # the check of the sizes' ranges and the inputs' layouts."
        )?;
        writeln!(out, "ALIGNED_INPUTS = {}", tuple(&aligned))?;
        writeln!(
            out,
            "check_inputs = kiln_runtime.symbolic_input_check(torch, INPUT_NAMES, SIZE_SYMBOLS, input_layouts)"
        )
    }

    /// Aligns and unpacks `args`, checks every input's size and stride, and
    /// binds the constants.
    fn inputs(&self, out: &mut String) -> std::fmt::Result {
        let p = self.program();
        let inputs: Vec<&str> = p.inputs.iter().map(|b| self.name(*b)).collect();
        if !self.aligned.is_empty() {
            writeln!(out, "    align_inputs(args, aligned)")?;
        }
        match inputs.as_slice() {
            [] => {}
            [one] => writeln!(out, "    ({one},) = args")?,
            many => writeln!(out, "    {} = args", many.join(", "))?,
        }
        writeln!(out, "    args.clear()")?;
        let all = match inputs.as_slice() {
            [one] => format!("({one},)"),
            many => format!("({})", many.join(", ")),
        };
        if !self.sources.is_empty() {
            // The sizes of this call, checked against their ranges (or only read).
            let names: Vec<String> = self
                .sources
                .iter()
                .map(|s| format!("ks{}", s.symbol.0))
                .collect();
            let read: Vec<String> = self
                .sources
                .iter()
                .map(|s| format!("{}.shape[{}]", inputs[s.input], s.dim))
                .collect();
            writeln!(
                out,
                "    ({},) = check({all}) if check is not None else ({},)",
                names.join(", "),
                read.join(", ")
            )?;
        } else if !inputs.is_empty() {
            writeln!(out, "    if check is not None:\n        check({all})")?;
        }
        let constants: Vec<&str> = super::constant_buffers(p)
            .into_iter()
            .map(|b| self.name(b))
            .collect();
        if !constants.is_empty() {
            writeln!(out, "    ({},) = _constants()", constants.join(", "))?;
        }
        Ok(())
    }

    /// One step: its allocations, the launch or call, and the buffers that die.
    fn step(
        &self,
        out: &mut String,
        i: usize,
        step: &Step,
        donors: &HashSet<BufferId>,
    ) -> std::fmt::Result {
        let p = self.program();
        let memory = &self.scheduled.memory;
        // A donor this very step still reads (an in-place write) dies after it.
        let mut after_step: Vec<&str> = Vec::new();
        // ATen's convolution allocates its result, and so does the runtime's
        // choice of attention (Kiln's kernel or the library's), and an index_copy in
        // place has its operand's: the call binds it (no buffer of Kiln's, no copy),
        // and a donor planned for it simply dies.
        let bound = match step {
            Step::Extern(e) if matches!(e.op, ExternOp::Conv { .. }) => Some(e.out),
            Step::Extern(e) if matches!(e.op, ExternOp::IndexCopy { in_place: true, .. }) => {
                Some(e.out)
            }
            Step::Extern(e) if matches!(e.op, ExternOp::Attention { .. }) => Some(e.out),
            _ => None,
        };
        for a in &memory.allocs[i] {
            let b = p.buffer(a.buf);
            if Some(a.buf) == bound {
                if let Some(old) = a.reuse {
                    if step.reads().contains(&old) {
                        after_step.push(self.name(old));
                    } else {
                        writeln!(out, "        del {}", self.name(old))?;
                    }
                }
                continue;
            }
            match a.reuse {
                Some(old) => {
                    let was = p.buffer(old);
                    // A computed buffer's tensor has exactly its planned layout (ATen's
                    // results are bound only in it); an input's may differ in the stride
                    // of a dim of size 1, which its check allows.
                    let same = matches!(was.kind, BufferKind::Computed)
                        && (&was.shape, &was.strides, was.dtype) == (&b.shape, &b.strides, b.dtype);
                    if same {
                        // The donor's tensor already has this layout: its name is enough
                        // (a view costs the host over half a microsecond).
                        writeln!(
                            out,
                            "        {} = {}  # reuse",
                            self.name(a.buf),
                            self.name(old)
                        )?;
                    } else {
                        writeln!(
                            out,
                            "        {} = reinterpret_tensor({}, {}, {}, 0)  # reuse",
                            self.name(a.buf),
                            self.name(old),
                            tuple(&b.shape),
                            tuple(&b.strides),
                        )?;
                    }
                    if step.reads().contains(&old) {
                        after_step.push(self.name(old));
                    } else {
                        writeln!(out, "        del {}", self.name(old))?;
                    }
                }
                None => writeln!(
                    out,
                    "        {} = empty_strided_device({}, {}, {})",
                    self.name(a.buf),
                    tuple(&b.shape),
                    tuple(&b.strides),
                    torch_dtype(b.dtype)
                )?,
            }
        }
        match step {
            Step::Kernel(_) => {
                if let Some(info) = self.kernels.get(&i) {
                    self.launch(out, info)?;
                }
            }
            Step::Extern(e) => match (self.attention.get(&i), self.templates.get(&i)) {
                (Some(launch), _) => self.attention_step(out, i, e, launch)?,
                (None, Some(launch)) => self.template_launch(out, launch)?,
                (None, None) => self.extern_call(out, i, e)?,
            },
        }
        let mut dead: Vec<&str> = memory.frees[i]
            .iter()
            .filter(|b| !donors.contains(b))
            .map(|b| self.name(*b))
            .collect();
        dead.extend(after_step);
        if !dead.is_empty() {
            writeln!(out, "        del {}", dead.join(", "))?;
        }
        Ok(())
    }

    /// A kernel launch on its grid (a grid per config when autotuning).
    fn launch(&self, out: &mut String, info: &KernelInfo) -> std::fmt::Result {
        let mut args: Vec<String> = info
            .args
            .iter()
            .map(|b| self.name(*b).to_string())
            .collect();
        args.push(info.xnumel.to_string());
        if let Some(r) = &info.rnumel {
            args.push(r.to_string());
        }
        args.extend(info.sizes.iter().map(|(s, _)| format!("ks{}", s.0)));
        if info.candidates.len() > 1 {
            let grids: Vec<String> = info
                .candidates
                .iter()
                .map(|c| {
                    format!(
                        "({}, {}): {}",
                        c.x_block,
                        c.r_block.unwrap_or(1),
                        grid_text(c)
                    )
                })
                .collect();
            return writeln!(
                out,
                "        {}[lambda meta: {{{}}}[(meta[\"XBLOCK\"], meta.get(\"RBLOCK\", 1))]]({})",
                info.name,
                grids.join(", "),
                args.join(", ")
            );
        }
        if info.sized.is_some() {
            // Symbolic sizes: the variant and grid of the bucket of this call's sizes,
            // which passes its own constexprs.
            let mut sizes = vec![info.xnumel.to_string()];
            sizes.extend(info.rnumel.as_ref().map(ToString::to_string));
            // A kernel of further forms: the form this call's sizes allow.
            if let Some(forms) = info.sized.as_ref().and_then(|s| s.forms.as_ref()) {
                if info.rnumel.is_none() {
                    sizes.push("1".into());
                }
                sizes.push(forms.test(Syntax::Python));
            }
            let launch = self.per_call.borrow_mut().at(format!(
                "KERNEL_LAUNCHES[\"{}\"]({})",
                info.name,
                sizes.join(", ")
            ));
            return writeln!(out, "        {launch}({}, stream=stream0)", args.join(", "));
        }
        // Compiled ahead (KERNELS): every parameter in order, the constexprs too.
        let l = &info.launch;
        args.push(l.x_block.to_string());
        if let Some(r) = l.r_block {
            args.push(r.to_string());
        }
        writeln!(
            out,
            "        KERNELS.{}[{}]({}, stream=stream0)",
            info.name,
            grid_text(l),
            args.join(", ")
        )
    }

    /// A fused attention step, bound as its buffer: the runtime's `ATTENTION`
    /// runs Kiln's kernel (a launch into the buffer it allocates, the
    /// [`OUT_PARAM`] of the first lambda) or the library's (of the query, key,
    /// value and mask the second lambda gives), as it chose for the step's
    /// signature. The lambdas evaluate only the side that runs.
    fn attention_step(
        &self,
        out: &mut String,
        i: usize,
        e: &ExternCall,
        l: &AttentionLaunch,
    ) -> std::fmt::Result {
        let args = self.attention_args(e, l);
        let masked = matches!(e.op, ExternOp::Attention { mask: true, .. });
        let mut operands: Vec<String> = e.args.iter().take(3).map(|v| self.view(v)).collect();
        operands.push(match e.args.get(3).filter(|_| masked) {
            Some(m) => self.view(m),
            None => "None".to_string(),
        });
        if l.dynamic.is_some() {
            // Dynamic shapes: one of Kiln's tile variants on the grid of this call's
            // program count, or the library's, as the runtime chose for the signature
            // at this bucket of sizes; the buffer's size and strides at this call's.
            let buf = self.program().buffer(e.out);
            let symbols: Vec<String> = self
                .sources
                .iter()
                .map(|s| format!("ks{}", s.symbol.0))
                .collect();
            let launches: Vec<String> = std::iter::once(l)
                .chain(&l.variants)
                .enumerate()
                .filter_map(|(n, v)| {
                    let (programs, _) = v.dynamic.as_ref()?;
                    // Where the lengths are multiples of 16, the twin compiled so.
                    let kernel = match &v.divisible {
                        Some((guard, twin)) => format!(
                            "(KERNELS.{} if {} else KERNELS.{})",
                            twin.kernel,
                            divisible_test(guard),
                            v.kernel
                        ),
                        None => format!("KERNELS.{}", v.kernel),
                    };
                    let launch = self.per_call.borrow_mut().at(format!(
                        "{kernel}[grid_of(KERNEL_GRIDS[{}], {programs}, 1)]",
                        self.grid_keys.get(&(i, n)).copied().unwrap_or(0)
                    ));
                    Some(format!(
                        "lambda {OUT_PARAM}: {launch}({}, stream=stream0)",
                        self.attention_args(e, v).join(", ")
                    ))
                })
                .collect();
            // The choice is kept per bucket of sizes, apart for lengths that pass the
            // divisibility guard (their kernel is another).
            let bucket = self.per_call.borrow_mut().at(match &l.divisible {
                Some((guard, _)) => format!(
                    "size_bucket({}) + ({},)",
                    tuple(&symbols),
                    divisible_test(guard)
                ),
                None => format!("size_bucket({})", tuple(&symbols)),
            });
            return writeln!(
                out,
                "        {} = ATTENTION.run({}, {}, lambda: ({}), ({bucket}, {}, {}))",
                self.name(e.out),
                self.signatures.get(&i).copied().unwrap_or(0),
                tuple(&launches),
                operands.join(", "),
                tuple(&buf.shape),
                tuple(&buf.strides),
            );
        }
        let mut kiln = format!(
            "KERNELS.{}[{}]({}, stream=stream0)",
            l.kernel,
            grid_text_of(&l.grid),
            args.join(", ")
        );
        if let Some(c) = &l.combine {
            // Split keys: the partial results combined into the output after.
            let mut args: Vec<String> = vec![self.pointer(&c.pointers[0]), OUT_PARAM.to_string()];
            args.extend(c.scalars.iter().map(i64::to_string));
            args.extend(c.constants.iter().map(|(_, v)| v.to_string()));
            kiln = format!(
                "({kiln}, KERNELS.{}[{}]({}, stream=stream0))",
                c.kernel,
                grid_text_of(&c.grid),
                args.join(", ")
            );
        }
        writeln!(
            out,
            "        {} = ATTENTION.run({}, lambda {OUT_PARAM}: {kiln}, lambda: ({}))",
            self.name(e.out),
            self.signatures.get(&i).copied().unwrap_or(0),
            operands.join(", ")
        )
    }

    /// A launch of one of Kiln's template kernels into the step's buffer: its pointers,
    /// scalars and constants.
    fn template_launch(&self, out: &mut String, l: &TemplateLaunch) -> std::fmt::Result {
        let mut args: Vec<String> = l.pointers.iter().map(|v| self.pointer(v)).collect();
        args.extend(l.scalars.iter().map(i64::to_string));
        args.extend(l.constants.iter().map(|(_, v)| v.to_string()));
        writeln!(
            out,
            "        KERNELS.{}[{}]({}, stream=stream0)",
            l.kernel,
            grid_text_of(&l.grid),
            args.join(", ")
        )
    }

    /// The arguments of an attention launch: its pointers (the output as
    /// [`OUT_PARAM`]), scalars and constants.
    fn attention_args(&self, e: &ExternCall, l: &AttentionLaunch) -> Vec<String> {
        let mut args: Vec<String> = l
            .pointers
            .iter()
            .map(|v| {
                if v.buf == e.out {
                    OUT_PARAM.to_string()
                } else {
                    self.pointer(v)
                }
            })
            .collect();
        args.extend(l.scalars.iter().cloned());
        args.extend(l.constants.iter().map(|(_, v)| v.to_string()));
        args
    }

    /// A view as a kernel's pointer argument: the buffer, or the buffer from
    /// the view's offset on (the kernel takes the strides separately).
    fn pointer(&self, v: &View) -> String {
        if v.offset.as_const() == Some(0) {
            self.name(v.buf).to_string()
        } else {
            format!("{}[{}:]", self.flat(v.buf), v.offset)
        }
    }

    /// A buffer as one flat dim over its storage.
    fn flat(&self, b: BufferId) -> String {
        let buf = self.program().buffer(b);
        // The last element's offset, plus one: sizes over the symbols where they vary
        // (every size of a dynamic compile is at least one).
        let one = Size::from(1);
        let extent = buf
            .shape
            .iter()
            .zip(&buf.strides)
            .try_fold(one.clone(), |acc, (d, s)| {
                let last = match d.as_const() {
                    Some(c) => Size::from((c - 1).max(0)),
                    None => d.sub(&one).ok()?,
                };
                acc.add(&last.mul(s).ok()?).ok()
            })
            .unwrap_or(Size::from(i64::MAX));
        format!("reinterpret_tensor({}, ({extent},), (1,), 0)", self.name(b))
    }

    /// A matrix product through `torch.mm`/`torch.bmm` into its buffer.
    fn extern_call(&self, out: &mut String, i: usize, e: &ExternCall) -> std::fmt::Result {
        let args: Vec<String> = e.args.iter().map(|a| self.view(a)).collect();
        if let ExternOp::Conv {
            stride,
            padding,
            dilation,
            groups,
        } = &e.op
        {
            // ATen's convolution (cuDNN on CUDA, as Inductor calls it by default) through
            // `torch.convolution`, the direct binding Inductor's `extern_kernels` use
            // (`torch.ops.aten`'s overload packet adds Python work to every call), its
            // result bound as the buffer where its layout is the planned one; the bias
            // comes in the next kernel.
            let zeros = vec![0; stride.len()];
            let buf = self.program().buffer(e.out);
            return writeln!(
                out,
                "        {} = in_layout(torch.convolution({}, None, {stride:?}, {padding:?}, {dilation:?}, False, {zeros:?}, {groups}), {}, {})",
                self.name(e.out),
                args.join(", "),
                tuple(&buf.shape),
                tuple(&buf.strides),
            );
        }
        if let (ExternOp::IndexCopy { dim, in_place }, [x, index, source]) = (&e.op, &args[..]) {
            // ATen's index_copy_ writes the source's slices only: into `self` itself
            // where it dies here (a KV cache kept as state), else into a copy of it.
            let name = self.name(e.out);
            if *in_place {
                writeln!(out, "        {name} = {x}")?;
            } else {
                writeln!(out, "        {name}.copy_({x})")?;
            }
            return writeln!(out, "        {name}.index_copy_({dim}, {index}, {source})");
        }
        if let (
            ExternOp::Attention {
                causal,
                scale_bits,
                mask,
                heads_inner,
                ..
            },
            [q, k, v, ..],
        ) = (&e.op, args.as_slice())
        {
            // A step Kiln's kernel does not take (split keys over dynamic shapes): the
            // library's, into the buffer's layout at this call's sizes.
            let buf = self.program().buffer(e.out);
            let mask = match args.get(3).filter(|_| *mask) {
                Some(m) => m.clone(),
                None => "None".to_string(),
            };
            return writeln!(
                out,
                "        {} = dynamic_attention({}, {}, {}, {mask}, {}, {}, {}, {}, {}, {})",
                self.name(e.out),
                q,
                k,
                v,
                tuple(&buf.shape),
                tuple(&buf.strides),
                torch_dtype(buf.dtype),
                py_bool(*causal),
                float_text(f64::from_bits(*scale_bits)),
                py_bool(*heads_inner)
            );
        }
        if let Some(signature) = self.biases.get(&i) {
            // Over dynamic shapes the choice is kept per bucket of the call's sizes.
            let bucket = if self.sources.is_empty() {
                String::new()
            } else {
                let symbols: Vec<String> = self
                    .sources
                    .iter()
                    .map(|s| format!("ks{}", s.symbol.0))
                    .collect();
                let at = self
                    .per_call
                    .borrow_mut()
                    .at(format!("kiln_runtime.size_bucket({})", tuple(&symbols)));
                format!(", {at}")
            };
            return writeln!(
                out,
                "        BIASES.run({signature}, {}, {}{bucket})",
                args.join(", "),
                self.name(e.out)
            );
        }
        writeln!(
            out,
            "        torch.{}({}, out={})",
            e.op.name(),
            args.join(", "),
            self.name(e.out)
        )
    }
}

/// Python's test of a divisibility guard: each symbol a multiple of 16.
fn divisible_test(guard: &[crate::graph::sym::SymId]) -> String {
    guard
        .iter()
        .map(|s| format!("ks{} % 16 == 0", s.0))
        .collect::<Vec<_>>()
        .join(" and ")
}

/// The distinct grid tables of the attention steps of dynamic shapes
/// (`KERNEL_GRIDS`), each the plugin's grid per bucket of program counts: a
/// model's layers share theirs.
#[derive(Debug, Default)]
pub(super) struct AttentionGrids<'a> {
    /// The tables, in order of first use.
    pub tables: Vec<&'a [kiln_plugin_api::Grid]>,
    /// The table of each step's tile variant `(step, n)`.
    pub of: HashMap<(usize, usize), usize>,
}

/// The [`AttentionGrids`] of a program's attention launches.
pub(super) fn attention_grids(attention: &HashMap<usize, AttentionLaunch>) -> AttentionGrids<'_> {
    let mut steps: Vec<(&usize, &AttentionLaunch)> = attention.iter().collect();
    steps.sort_by_key(|(i, _)| **i);
    let mut out = AttentionGrids::default();
    for (&i, l) in steps {
        for (n, v) in std::iter::once(l).chain(&l.variants).enumerate() {
            if let Some((_, grids)) = &v.dynamic {
                let table = match out.tables.iter().position(|t| *t == grids.as_slice()) {
                    Some(t) => t,
                    None => {
                        out.tables.push(grids);
                        out.tables.len() - 1
                    }
                };
                out.of.insert((i, n), table);
            }
        }
    }
    out
}
