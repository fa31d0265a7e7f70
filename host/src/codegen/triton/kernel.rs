//! The writer of one `@triton.jit` kernel.
//!
//! Layout of a reduction kernel: a tile of `XBLOCK` rows by `RBLOCK`
//! reduction elements. Values are placed in *phases*: phase 0 needs no
//! reduction result, phase p + 1 needs a reduction computed in phase p. A
//! persistent kernel (`RBLOCK` covers the row) computes every phase on the one
//! tile it loaded; a looped kernel runs one loop over the row per phase that
//! has reductions or stores varying along it, recomputing (from the loads)
//! what each loop needs rather than keeping whole rows in registers.

use std::collections::{HashMap, HashSet};
use std::fmt::Write;

use kiln_plugin_api::{Grid, LaunchConfig};

use super::expr::{cond_text, literal_text, neutral, pointer_type, tl_dtype, Renderer};
use super::{sized, Error, KernelInfo, Launch, Options};
use crate::codegen::heuristics::{kernel_configs, launch_grid, HeuristicsError, LaunchHeuristics};
use crate::codegen::{param_names, NamedKernel};
use crate::graph::sym::SymId;
use crate::schedule::ids::IdVec;
use crate::schedule::index::{Index, Size, Var};
use crate::schedule::ir::{BufferId, BufferKind, Expr, ExprId, Kernel, Program, ReduceKind, Store};

fn ceil_div(a: i64, b: i64) -> i64 {
    (a + b - 1) / b.max(1)
}

fn launches(
    k: &Kernel,
    configs: &[LaunchConfig],
    heuristics: &dyn LaunchHeuristics,
) -> Result<Vec<Launch>, HeuristicsError> {
    configs
        .iter()
        .map(|c| {
            let x_block = c.x_block.max(1);
            let programs = ceil_div(k.space.x_hint(), i64::from(x_block)).max(1) as u64;
            // A tiled pointwise kernel also spreads its row elements over programs.
            let row_programs = if k.is_tiled() {
                ceil_div(k.space.r_hint(), i64::from(c.r_block.max(1))).max(1) as u64
            } else {
                1
            };
            // A tiled kernel's row elements take the grid's x (launched first):
            // programs next to each other then write next to each other along
            // the output's rows (on the H100, `x.t() + z` of 4096² ran at 101 %
            // of copy bandwidth against 98 % with rows first, of 3000² at 97 %
            // against 90 %; `bench/gpu/tile_configs.py`).
            let dims = if k.is_tiled() {
                Grid::new(row_programs, programs, 1)
            } else {
                Grid::new(programs, row_programs, 1)
            };
            let grid = launch_grid(heuristics, dims)?;
            Ok(Launch {
                x_block,
                r_block: k.is_reduction().then_some(c.r_block.max(1)),
                num_warps: c.num_warps.max(1),
                num_stages: c.num_stages.max(1),
                grid,
            })
        })
        .collect()
}

/// The parameters a launch always passes divisible by 16, which the kernel is
/// compiled to assume (Triton's `tt.divisibility`, as its JIT specializes):
/// every pointer, since the wrapper passes whole buffers (its own allocations,
/// constants, and inputs it copies when misaligned), and the sizes that are.
fn aligned_params(pointers: &[String], xnumel: &Size, rnumel: Option<&Size>) -> Vec<String> {
    let mut aligned = pointers.to_vec();
    if xnumel.is_multiple_of(16) {
        aligned.push("xnumel".to_string());
    }
    if rnumel.is_some_and(|r| r.is_multiple_of(16)) {
        aligned.push("rnumel".to_string());
    }
    aligned
}

/// The grid for each bucket of program counts a kernel of symbolic rows may need,
/// up to `most` programs: `grids[k]` serves `2^(k-1) + 1 ..= 2^k` programs, with the
/// plugin's grid rule applied to `2^k` (the grid-stride loop is correct for any
/// grid; the wrapper picks the bucket at each call).
pub(super) fn grid_buckets(
    most: u64,
    heuristics: &dyn LaunchHeuristics,
) -> Result<Vec<Grid>, HeuristicsError> {
    let mut grids = Vec::new();
    let mut programs = 1u64;
    loop {
        grids.push(heuristics.adjust_grid(Grid::new(programs, 1, 1))?);
        if programs >= most {
            return Ok(grids);
        }
        programs = programs.saturating_mul(2);
    }
}

/// The Triton type of an integer argument whose values lie within `bounds`.
fn int_type(bounds: (i128, i128)) -> &'static str {
    if bounds.0 >= i128::from(i32::MIN) && bounds.1 <= i128::from(i32::MAX) {
        "i32"
    } else {
        "i64"
    }
}

/// Writes one kernel of `program` as a Triton function, with its launch.
/// `read_early`: a later kernel reads its outputs before its own wait
/// ([`DEPENDENT_WAIT_WHOLE`]).
pub(super) fn write_kernel(
    program: &Program,
    named: &NamedKernel,
    heuristics: &dyn LaunchHeuristics,
    options: &Options,
    read_early: bool,
) -> Result<(String, KernelInfo), Error> {
    let (k, name) = (named.kernel, named.name.as_str());
    let heuristics_failed = |source| Error::Heuristics {
        kernel: name.to_string(),
        source,
    };
    let names = param_names(&k.params);
    let arg_names: HashMap<BufferId, String> = k
        .params
        .iter()
        .zip(&names)
        .map(|(p, n)| (p.buf, n.clone()))
        .collect();
    let reduction = k.is_reduction();
    let symbols = &program.symbols;
    // Decisions are made at the sizes' hints; what correctness needs holds over the
    // symbols' ranges: a persistent reduction's one block covers every row length,
    // and 32-bit indexes every element.
    let (x_most, r_most) = (k.space.x.bounds(symbols).1, k.space.r.bounds(symbols).1);
    let dynamic = !k.space.x.is_const() || !k.space.r.is_const();
    let configs = kernel_configs(program, k, heuristics).map_err(heuristics_failed)?;
    let first = configs[0];
    let persistent = reduction && i128::from(first.r_block) >= r_most;
    let offered: Vec<LaunchConfig> = if options.autotune && !dynamic {
        configs
            .iter()
            .copied()
            .filter(|c| !persistent || i128::from(c.r_block) >= r_most)
            .collect()
    } else {
        vec![first]
    };
    let candidates = launches(k, &offered, heuristics).map_err(heuristics_failed)?;
    let launch = candidates[0].clone();
    // The sizes that reach 2^31 - 1 somewhere in the range: 64-bit indexes.
    let wide_sizes = wide_sizes(program, k);
    let int64_index =
        x_most.saturating_mul(r_most) >= i128::from(sized::NARROW_LIMIT) || !wide_sizes.is_empty();
    // Launched as a programmatic dependent where its grid is small enough; an
    // autotuned kernel is launched by Triton's autotuner, never so.
    let units = heuristics
        .properties()
        .map_or(0, |p| p.multi_processor_count);
    let dependent_programs = DEPENDENT_PROGRAMS_PER_UNIT * u64::from(units.max(1));
    // Symbolic sizes: the plugin's config and grid per bucket of the call's sizes.
    let sized = if dynamic {
        if k.is_tiled() {
            return Err(Error::Unsupported {
                kernel: name.to_string(),
                what: "a tiled kernel of symbolic sizes".into(),
            });
        }
        let plan = sized::plan(
            program,
            k,
            heuristics,
            &first,
            persistent,
            dependent_programs,
        );
        let mut plan = plan.map_err(heuristics_failed)?;
        plan.forms = further_forms(k, wide_sizes);
        Some(plan)
    } else {
        None
    };
    let index = match sized.as_ref().and_then(|s| s.forms.as_ref()) {
        Some(f) if !f.narrow.is_empty() => IndexWidth::Chosen,
        _ if int64_index => IndexWidth::Wide,
        _ => IndexWidth::Narrow,
    };
    let sizes: Vec<(SymId, &'static str)> = k
        .symbols()
        .into_iter()
        .map(|s| {
            let bounds = symbols
                .get(s)
                .map_or((0, i128::MAX), |v| (v.lo.into(), v.hi.into()));
            (s, int_type(bounds))
        })
        .collect();

    // A kernel of symbolic sizes waits where any of its variants launches so.
    let programs = launch.grid.x * launch.grid.y * launch.grid.z;
    let dependent = match &sized {
        Some(s) => s.variants.iter().any(|v| v.dependent),
        None => !(options.autotune && candidates.len() > 1) && programs <= dependent_programs,
    };
    let mut w = KernelWriter {
        k,
        program,
        renderer: Renderer { exprs: &k.exprs },
        arg_names: &arg_names,
        out: String::new(),
        name,
        eviction: Eviction::None,
        runtime_rows: options.runtime_rows,
        dependent,
        wait: if read_early {
            DEPENDENT_WAIT_WHOLE.0
        } else {
            DEPENDENT_WAIT.0
        },
        same_rows: if reduction && !k.is_tiled() {
            k.same_for_every_row()
        } else {
            IdVec::filled(k.exprs.len(), false)
        },
    };
    w.header(&names, &sizes, reduction, &candidates, options, index)?;
    if k.is_tiled() {
        w.tiled_body(index)?;
    } else if reduction {
        w.reduction_body(persistent, index)?;
    } else {
        w.pointwise_body(index)?;
    }
    let info = KernelInfo {
        step: named.step,
        name: name.to_string(),
        arg_types: k
            .params
            .iter()
            .map(|p| pointer_type(program.buffer(p.buf).dtype))
            .collect(),
        args: k.params.iter().map(|p| p.buf).collect(),
        aligned: aligned_params(&names, &k.space.x, reduction.then_some(&k.space.r)),
        arg_names: names,
        xnumel: k.space.x.clone(),
        rnumel: reduction.then(|| k.space.r.clone()),
        sizes,
        sized,
        int64_index,
        launch,
        dependent,
        candidates: if options.autotune {
            candidates
        } else {
            Vec::new()
        },
    };
    Ok((w.out, info))
}

/// The sizes a 32-bit index of kernel `k` must stay below (every element it indexes,
/// and every buffer's) that reach [`sized::NARROW_LIMIT`] within the range, each once.
fn wide_sizes(program: &Program, k: &Kernel) -> Vec<Size> {
    let elements = k
        .space
        .x
        .mul(&k.space.r)
        .unwrap_or_else(|_| Size::from(i64::MAX));
    let buffers = k
        .params
        .iter()
        .map(|p| crate::schedule::index::product(&program.buffer(p.buf).shape));
    let mut wide: Vec<Size> = Vec::new();
    for s in std::iter::once(elements).chain(buffers) {
        if s.bounds(&program.symbols).1 >= i128::from(sized::NARROW_LIMIT) && !wide.contains(&s) {
            wide.push(s);
        }
    }
    wide
}

/// The further forms of kernel `k` of dynamic sizes (`sized::Forms`), for the sizes
/// where a static compile would know more: 32-bit indexes where `wide` (its sizes that
/// reach 2^31 - 1 within the range) stay below, an inner count (the row count of a
/// pointwise kernel, the row length of a reduction) of a multiple of 16.
fn further_forms(k: &Kernel, wide: Vec<Size>) -> Option<sized::Forms> {
    let (count, param) = if k.is_reduction() {
        (&k.space.r, "rnumel")
    } else {
        (&k.space.x, "xnumel")
    };
    let aligned = (!count.is_const() && !count.is_multiple_of(16)).then(|| (count.clone(), param));
    (!wide.is_empty() || aligned.is_some()).then(|| sized::Forms {
        narrow: wide,
        aligned,
        names: Default::default(),
    })
}

/// The width of a kernel's indexes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum IndexWidth {
    /// 32 bits.
    Narrow,
    /// 64 bits.
    Wide,
    /// Chosen when it is compiled: 64 bits where the `INDEX64` constexpr is 1
    /// (a kernel of dynamic sizes with 32-bit forms: [`sized::Forms::NARROW`]).
    Chosen,
}

struct KernelWriter<'a> {
    /// `xnumel` from the launch ([`Options::runtime_rows`]).
    runtime_rows: bool,
    k: &'a Kernel,
    program: &'a Program,
    renderer: Renderer<'a>,
    arg_names: &'a HashMap<BufferId, String>,
    out: String,
    name: &'a str,
    /// The eviction policy of the loop being written (see [`Eviction`]).
    eviction: Eviction,
    /// Whether the kernel waits for the kernel before it ([`DEPENDENT_WAIT`]).
    dependent: bool,
    /// The helper it waits with: [`DEPENDENT_WAIT`], or [`DEPENDENT_WAIT_WHOLE`]
    /// where a later kernel reads its outputs before its own wait.
    wait: &'static str,
    /// Per expression of a reduction kernel: the same for every row of the tile
    /// ([`Kernel::same_for_every_row`]), so computed on one row of the tile
    /// (`[1, RBLOCK]`) and broadcast where it meets a row's values: a layer norm
    /// of the row a one-row product reads, taken into the product, is computed
    /// once per program rather than once per row of its tile.
    same_rows: IdVec<ExprId, bool>,
}

/// How the loads of one loop over a row mark their lines for L2, as Inductor
/// marks them in a looped reduction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Eviction {
    /// No policy: a persistent reduction, or no row loop at all.
    None,
    /// Another loop reads the row again: keep it (`evict_last`).
    Reread,
    /// The last (or only) loop over the row: its lines are not needed again
    /// (`evict_first`), so they leave room for what is.
    LastRead,
}

impl Eviction {
    /// The policy of one load: a load whose place does not depend on the
    /// program's results (a weight every program reads along the row) is kept
    /// in every loop; the rest follow the loop's policy.
    fn of_load(self, index: &Index) -> Option<&'static str> {
        match self {
            Eviction::None => None,
            _ if !index.uses(Var::X) => Some("evict_last"),
            Eviction::Reread => Some("evict_last"),
            Eviction::LastRead => Some("evict_first"),
        }
    }
}

impl KernelWriter<'_> {
    fn unsupported(&self, what: String) -> Error {
        Error::Unsupported {
            kernel: self.name.to_string(),
            what,
        }
    }

    fn header(
        &mut self,
        names: &[String],
        sizes: &[(SymId, &'static str)],
        reduction: bool,
        candidates: &[Launch],
        options: &Options,
        index: IndexWidth,
    ) -> Result<(), Error> {
        if options.autotune && candidates.len() > 1 {
            writeln!(self.out, "@triton.autotune(")?;
            writeln!(self.out, "    configs=[")?;
            for c in candidates {
                let mut meta = format!("'XBLOCK': {}", c.x_block);
                if let Some(r) = c.r_block {
                    let _ = write!(meta, ", 'RBLOCK': {r}");
                }
                writeln!(
                    self.out,
                    "        triton.Config({{{meta}}}, num_warps={}, num_stages={}),",
                    c.num_warps, c.num_stages
                )?;
            }
            writeln!(self.out, "    ],")?;
            let key = if reduction {
                "['xnumel', 'rnumel']"
            } else {
                "['xnumel']"
            };
            writeln!(self.out, "    key={key},")?;
            writeln!(self.out, "    **kiln_autotune_cache,")?;
            writeln!(self.out, ")")?;
        }
        writeln!(self.out, "@triton.jit")?;
        let mut params = names.join(", ");
        params.push_str(", xnumel");
        if reduction {
            params.push_str(", rnumel");
        }
        for (s, _) in sizes {
            let _ = write!(params, ", ks{}", s.0);
        }
        params.push_str(", XBLOCK: tl.constexpr");
        if reduction {
            params.push_str(", RBLOCK: tl.constexpr");
        }
        if index == IndexWidth::Chosen {
            params.push_str(", INDEX64: tl.constexpr");
        }
        writeln!(self.out, "def {}({params}):", self.name)?;
        Ok(())
    }

    fn line(&mut self, depth: usize, text: &str) {
        for _ in 0..depth {
            self.out.push_str("    ");
        }
        self.out.push_str(text);
        self.out.push('\n');
    }

    /// The loop over blocks of rows, with programs along the grid's `axis`.
    fn row_loop(&mut self, index: IndexWidth, reduction: bool, axis: u8) {
        let int64 = index == IndexWidth::Wide;
        // The sizes are known here: as literals (Inductor does the same), a mask
        // such as `rindex < 1000` lets Triton prove that runs of 8 lanes share
        // it and load them as vectors, which it cannot from a runtime argument
        // that is not a multiple of 16. The arguments stay for the launch ABI. Where
        // sizes vary between compiles, the rows come from the launch
        // (`Options::runtime_rows`).
        if !int64 {
            if let (false, Some(x)) = (self.runtime_rows, self.k.space.x.as_const()) {
                self.line(1, &format!("xnumel = {x}"));
            }
            if let (true, Some(r)) = (reduction, self.k.space.r.as_const()) {
                self.line(1, &format!("rnumel = {r}"));
            }
        }
        let shape = if reduction { "[:, None]" } else { "" };
        if int64 {
            self.line(
                1,
                &format!("xbase = tl.arange(0, XBLOCK){shape}.to(tl.int64)"),
            );
        } else {
            self.line(1, &format!("xbase = tl.arange(0, XBLOCK){shape}"));
        }
        if reduction && int64 {
            self.line(1, "rbase = tl.arange(0, RBLOCK)[None, :].to(tl.int64)");
        } else if reduction {
            self.line(1, "rbase = tl.arange(0, RBLOCK)[None, :]");
        }
        if index == IndexWidth::Chosen {
            self.line(1, "if INDEX64:");
            self.line(2, "xbase = xbase.to(tl.int64)");
            if reduction {
                self.line(2, "rbase = rbase.to(tl.int64)");
            }
        }
        // A grid-stride loop: correct for any grid the plugin launches.
        self.line(
            1,
            &format!(
                "for xoffset in range(tl.program_id({axis}) * XBLOCK, xnumel, tl.num_programs({axis}) * XBLOCK):"
            ),
        );
        self.line(2, "xindex = xoffset + xbase");
        self.line(2, "xmask = xindex < xnumel");
    }

    /// Where a kernel waits for the kernel launched before it, when it is launched
    /// as that kernel's programmatic dependent ([`DEPENDENT_WAIT`]): at the start of
    /// each tile, after the tile's loads of constants (weights), which no kernel of a
    /// call writes. Those loads stream while the kernel before still runs, and a
    /// one-row product (a decoding step's projections) hides most of the time it
    /// spends reading its weight. `rows`: loads along the row may be issued here too
    /// (a persistent reduction's one tile), else only those constant along it.
    /// Returns the loads written.
    fn dependent_wait(&mut self, depth: usize, rows: bool) -> Result<HashSet<ExprId>, Error> {
        let mut early = HashSet::new();
        if !self.dependent {
            return Ok(early);
        }
        let k = self.k;
        let needed = k.needed();
        for (id, _, _) in k.exprs.iter() {
            let Some(along_row) = self.constant_load(id) else {
                continue;
            };
            if (rows || !along_row) && needed.contains(&id) {
                self.emit_expr(depth, id)?;
                early.insert(id);
            }
        }
        self.line(depth, &format!("{}()", self.wait));
        Ok(early)
    }

    /// For a load of a constant at a place the program's values do not decide
    /// (no gathered index): whether it varies along the row.
    fn constant_load(&self, id: ExprId) -> Option<bool> {
        let Expr::Load {
            buf,
            index,
            guards,
            indirect,
        } = self.k.exprs.get(id)
        else {
            return None;
        };
        let constant = matches!(self.program.buffer(*buf).kind, BufferKind::Constant { .. });
        (constant && indirect.is_empty())
            .then(|| index.uses(Var::R) || guards.iter().any(|g| g.index.uses(Var::R)))
    }

    /// Where a looped reduction waits for the kernel before it in its first loop
    /// over the row, after that step's loads of constants (a one-row product's
    /// weight), rather than at the tile's start: the values constant along the
    /// row that the first loop does not need, to be written after it (a
    /// residual added to the product). `None` where the kernel waits at the
    /// tile's start: no first loop, a store before it, or a value before it
    /// read from anything but a constant.
    fn first_loop_wait(&self, plan: &RowPlan) -> Option<HashSet<ExprId>> {
        let k = self.k;
        let mut roots: Vec<ExprId> = (0..plan.red_loop.len())
            .filter(|r| plan.red_loop[*r] == 0)
            .map(|r| k.reductions[r].value)
            .collect();
        roots.extend(plan.varying_stores(k, 0).iter().map(|s| s.value));
        let stores_before = k
            .stores
            .iter()
            .any(|s| plan.phase[s.value] == 0 && !plan.uses_r[s.value]);
        // A row of no elements runs no loop step, and would never wait.
        if !self.dependent || roots.is_empty() || stores_before || k.space.r_hint() <= 0 {
            return None;
        }
        let mut loop_needs = HashSet::new();
        while let Some(id) = roots.pop() {
            if loop_needs.insert(id) {
                roots.extend(k.exprs.operands(id));
            }
        }
        let mut deferred = HashSet::new();
        for (id, e, _) in k.exprs.iter() {
            if plan.phase[id] != 0 || plan.uses_r[id] || !plan.needed.contains(&id) {
                continue;
            }
            if !loop_needs.contains(&id) {
                deferred.insert(id);
            } else if matches!(e, Expr::Load { .. }) && self.constant_load(id).is_none() {
                return None;
            }
        }
        Some(deferred)
    }

    /// The mask of a load along the row that is the same for every row of the
    /// tile: the row elements', and each of its guards (`[1, RBLOCK]`).
    fn row_mask(&self, guards: &[crate::schedule::ir::Cond]) -> String {
        let mut mask = "rmask".to_string();
        for g in guards {
            let _ = write!(mask, " & {}", cond_text(g));
        }
        mask
    }

    /// The mask of an access: the tile's, and each of its guards.
    fn load_mask(&self, index_uses_r: bool, guards: &[crate::schedule::ir::Cond]) -> String {
        let mut mask = if index_uses_r {
            "xmask & rmask".to_string()
        } else {
            "xmask".to_string()
        };
        for g in guards {
            let _ = write!(mask, " & {}", cond_text(g));
        }
        mask
    }

    fn emit_expr(&mut self, depth: usize, id: ExprId) -> Result<(), Error> {
        let rhs = match self.k.exprs.get(id) {
            Expr::Literal(_) | Expr::Reduced(_) => return Ok(()),
            Expr::Load {
                buf,
                index,
                guards,
                indirect,
            } => {
                let uses_r = if indirect.is_empty() {
                    index.uses(Var::R) || guards.iter().any(|g| g.index.uses(Var::R))
                } else {
                    self.k.phases().0[id]
                };
                let ptr = self
                    .arg_names
                    .get(buf)
                    .ok_or_else(|| self.unsupported("a load of an unlisted buffer".into()))?
                    .clone();
                let mut mask = if uses_r && self.same_rows[id] {
                    self.row_mask(guards)
                } else {
                    self.load_mask(uses_r, guards)
                };
                let mut offset = block_offset(index);
                let name = Renderer::var(id);
                self.indirect_parts(depth, &name, indirect, &mut mask, &mut offset);
                let policy = if indirect.is_empty() {
                    self.eviction.of_load(index)
                } else {
                    // A gathered place: Kiln cannot tell how often it is read.
                    None
                };
                match policy {
                    Some(policy) => format!(
                        "tl.load({ptr} + ({offset}), {mask}, eviction_policy='{policy}', other=0)"
                    ),
                    None => format!("tl.load({ptr} + ({offset}), {mask}, other=0)"),
                }
            }
            _ => self.renderer.rhs(id).map_err(|e| self.unsupported(e))?,
        };
        self.line(depth, &format!("{} = {rhs}", Renderer::var(id)));
        Ok(())
    }

    /// The data-dependent parts of an access's offset, each read from a tensor: wrapped
    /// once if negative (not an embedding's or an `index_copy`'s, where a negative one
    /// is out of range), asserted in range (in Triton's debug mode), and masked so that
    /// a value out of range never reads or writes outside the buffer. Each index is
    /// named `{name}_i{n}`.
    fn indirect_parts(
        &mut self,
        depth: usize,
        name: &str,
        indirect: &[crate::schedule::ir::Indirect],
        mask: &mut String,
        offset: &mut String,
    ) {
        for (n, i) in indirect.iter().enumerate() {
            let w = format!("{name}_i{n}");
            let v = self.renderer.operand(i.value, false);
            // `tl.cast`, not `.to`: the index may be a literal (a one-element constant).
            self.line(depth, &format!("{w} = tl.cast({v}, tl.int64)"));
            if !i.nonnegative {
                self.line(
                    depth,
                    &format!("{w} = tl.where({w} < 0, {w} + {}, {w})", i.size),
                );
            }
            let ok = format!("(0 <= {w}) & ({w} < {})", i.size);
            self.line(
                depth,
                &format!(
                    "tl.device_assert(({ok}) | ~({mask}), \"index out of bounds: 0 <= {w} < {}\")",
                    i.size
                ),
            );
            let _ = write!(mask, " & {ok}");
            let _ = write!(offset, " + {w} * {}", i.stride);
        }
    }

    fn store_line(
        &mut self,
        depth: usize,
        s: &Store,
        uses_r: bool,
        tile: &str,
    ) -> Result<(), Error> {
        let ptr = self
            .arg_names
            .get(&s.buf)
            .ok_or_else(|| self.unsupported("a store to an unlisted buffer".into()))?
            .clone();
        let dtype = self.program.buffer(s.buf).dtype;
        let value = match self.k.exprs.get(s.value) {
            Expr::Literal(l) => {
                format!("tl.full({tile}, {}, {})", literal_text(*l), tl_dtype(dtype))
            }
            _ => self.renderer.operand(s.value, false),
        };
        let mut mask = self.load_mask(uses_r, &s.guards);
        let mut offset = block_offset(&s.index);
        let name = format!("{}_at", Renderer::var(s.value));
        self.indirect_parts(depth, &name, &s.indirect, &mut mask, &mut offset);
        self.line(
            depth,
            &format!("tl.store({ptr} + ({offset}), {value}, {mask})"),
        );
        Ok(())
    }

    fn pointwise_body(&mut self, index: IndexWidth) -> Result<(), Error> {
        self.row_loop(index, false, 0);
        let early = self.dependent_wait(2, false)?;
        let needed = self.k.needed();
        for (id, _, _) in self.k.exprs.iter() {
            if needed.contains(&id) && !early.contains(&id) {
                self.emit_expr(2, id)?;
            }
        }
        for s in self.k.stores.clone() {
            self.store_line(2, &s, false, "[XBLOCK]")?;
        }
        Ok(())
    }

    /// A pointwise kernel over tiles of rows by row elements: programs along
    /// the grid's x take row elements, along its y rows.
    fn tiled_body(&mut self, index: IndexWidth) -> Result<(), Error> {
        self.row_loop(index, true, 1);
        let early = self.dependent_wait(2, false)?;
        self.line(
            2,
            "for roffset in range(tl.program_id(0) * RBLOCK, rnumel, tl.num_programs(0) * RBLOCK):",
        );
        self.line(3, "rindex = roffset + rbase");
        self.line(3, "rmask = rindex < rnumel");
        let (uses_r, _) = self.k.phases();
        let needed = self.k.needed();
        for (id, _, _) in self.k.exprs.iter() {
            if needed.contains(&id) && !early.contains(&id) {
                self.emit_expr(3, id)?;
            }
        }
        for s in self.k.stores.clone() {
            if uses_r[s.value] || s.index.uses(Var::R) {
                self.store_line(3, &s, true, "[XBLOCK, RBLOCK]")?;
            } else {
                self.store_line(3, &s, false, "[XBLOCK, 1]")?;
            }
        }
        Ok(())
    }

    /// A reduction kernel's body: its phases in order, each finishing the
    /// reductions of the phase before, then the values and stores constant
    /// along the row, then the loop over the row (the one tile, for a
    /// persistent kernel) with its reductions and row-varying stores.
    fn reduction_body(&mut self, persistent: bool, index: IndexWidth) -> Result<(), Error> {
        self.row_loop(index, true, 0);
        let plan = RowPlan::of(self.k, persistent);
        if persistent {
            self.line(2, "rindex = rbase");
            self.line(2, "rmask = rindex < rnumel");
        }
        // A looped kernel whose first loop reads the weight waits in that loop,
        // after the step's loads of it ([`Self::first_loop_wait`]); what the loop
        // does not need waits until after it.
        let deferred = if persistent {
            None
        } else {
            self.first_loop_wait(&plan)
        };
        let mut wait_in_loop = deferred.is_some();
        let deferred = deferred.unwrap_or_default();
        let mut emitted = if wait_in_loop {
            deferred.clone()
        } else {
            self.dependent_wait(2, persistent)?
        };
        for p in 0..=plan.last + 1 {
            self.eviction = Eviction::None;
            if p > 0 && !persistent {
                self.finish_reductions(&plan, p - 1);
            }
            if p == 1 {
                for (id, _, _) in self.k.exprs.iter() {
                    if deferred.contains(&id) {
                        self.emit_expr(2, id)?;
                    }
                }
            }
            // Values constant along the row, available from this phase on.
            for (id, _, _) in self.k.exprs.iter() {
                if plan.phase[id] == p
                    && !plan.uses_r[id]
                    && plan.needed.contains(&id)
                    && emitted.insert(id)
                {
                    self.emit_expr(2, id)?;
                }
            }
            for s in self.k.stores.clone() {
                if plan.phase[s.value] == p && !plan.uses_r[s.value] {
                    self.store_line(2, &s, false, "[XBLOCK, 1]")?;
                }
            }
            let reds: Vec<usize> = (0..plan.red_loop.len())
                .filter(|r| plan.red_loop[*r] == p)
                .collect();
            let stores = plan.varying_stores(self.k, p);
            if reds.is_empty() && stores.is_empty() {
                continue;
            }
            if !persistent {
                self.open_row_loop(&plan, p, &reds);
            }
            self.row_loop_body(&plan, &reds, &stores, &mut emitted, wait_in_loop)?;
            wait_in_loop = false;
        }
        Ok(())
    }

    /// Whether reduction `r` reduces a value the same for every row of the tile,
    /// on one row of it (an online softmax's pair stays on the whole tile).
    fn row_only(&self, plan: &RowPlan, r: usize) -> bool {
        self.same_rows[self.k.reductions[r].value]
            && !plan.is_online_sum(r)
            && plan.online_sum_of(r).is_none()
    }

    /// Finishes the reductions accumulated in phase `p`'s loop (`red{r}` from
    /// `acc{r}`), an online softmax's max and sum together.
    fn finish_reductions(&mut self, plan: &RowPlan, p: usize) {
        for (r, _) in plan.red_loop.iter().enumerate().filter(|(_, l)| **l == p) {
            if plan.is_online_sum(r) {
                continue;
            }
            if let Some(b) = plan.online_sum_of(r) {
                self.line(
                    2,
                    &format!("red{r}, red{b} = kiln_online_softmax_finish(acc{r}, acc{b})"),
                );
                continue;
            }
            let red = &self.k.reductions[r];
            let text = finish(red.kind, &format!("acc{r}"), red.acc_dtype.is_float());
            self.line(2, &format!("red{r} = {text}"));
        }
    }

    /// Opens a looped kernel's loop over the row for phase `p`: the eviction
    /// policy of its loads, the accumulators of its reductions `reds` at their
    /// neutral values, and the loop header.
    fn open_row_loop(&mut self, plan: &RowPlan, p: usize, reds: &[usize]) {
        // Another loop over the row comes after this one: keep the row in L2.
        let later = (p + 1..=plan.last)
            .any(|q| plan.red_loop.contains(&q) || !plan.varying_stores(self.k, q).is_empty());
        // The last loop reads each line once more at most: on the H100,
        // `x.sum(2)` of [32, 64, 128, 256] (a looped outer reduction)
        // ran at 88 % of copy bandwidth without `evict_first`, 91 % with.
        self.eviction = if later {
            Eviction::Reread
        } else {
            Eviction::LastRead
        };
        for &r in reds {
            let red = &self.k.reductions[r];
            let init = neutral(red.kind, red.acc_dtype);
            let rows = if self.row_only(plan, r) {
                "1"
            } else {
                "XBLOCK"
            };
            self.line(
                2,
                &format!(
                    "acc{r} = tl.full([{rows}, RBLOCK], {init}, {})",
                    tl_dtype(red.acc_dtype)
                ),
            );
        }
        self.line(2, "for roffset in range(0, rnumel, RBLOCK):");
        self.line(3, "rindex = roffset + rbase");
        self.line(3, "rmask = rindex < rnumel");
    }

    /// The body of a loop over the row (or of the persistent kernel's one
    /// tile): the row-varying values it needs, in order, then its reductions'
    /// updates and its stores.
    fn row_loop_body(
        &mut self,
        plan: &RowPlan,
        reds: &[usize],
        stores: &[Store],
        emitted: &mut HashSet<ExprId>,
        wait: bool,
    ) -> Result<(), Error> {
        let persistent = plan.persistent;
        let depth = if persistent { 2 } else { 3 };
        // What this loop needs that varies along the row, in order.
        let mut roots: Vec<ExprId> = reds
            .iter()
            .filter(|r| !plan.is_online_sum(**r))
            .map(|r| self.k.reductions[*r].value)
            .collect();
        roots.extend(stores.iter().map(|s| s.value));
        let wanted = self.k.varying_closure(&roots, &plan.uses_r);
        let mut local: HashSet<ExprId> = HashSet::new();
        if wait {
            for (id, _, _) in self.k.exprs.iter() {
                if plan.uses_r[id] && wanted.contains(&id) && self.constant_load(id).is_some() {
                    local.insert(id);
                    self.emit_expr(depth, id)?;
                }
            }
            self.line(depth, &format!("{}()", self.wait));
        }
        for (id, _, _) in self.k.exprs.iter() {
            if plan.uses_r[id] && wanted.contains(&id) {
                let fresh = if persistent {
                    emitted.insert(id)
                } else {
                    local.insert(id)
                };
                if fresh {
                    self.emit_expr(depth, id)?;
                }
            }
        }
        for &r in reds {
            if plan.is_online_sum(r) {
                continue;
            }
            let red = self.k.reductions[r].clone();
            let value = self.renderer.operand(red.value, true);
            let tile = if self.row_only(plan, r) {
                "rmask"
            } else {
                "xmask & rmask"
            };
            let masked = format!(
                "tl.where({tile}, {value}, {})",
                neutral(red.kind, red.acc_dtype)
            );
            if let Some(b) = plan.online_sum_of(r) {
                self.line(
                    depth,
                    &format!(
                        "acc{r}, acc{b} = kiln_online_softmax_update(acc{r}, acc{b}, {masked})"
                    ),
                );
                continue;
            }
            if persistent {
                let text = finish(red.kind, &masked, red.acc_dtype.is_float());
                self.line(depth, &format!("red{r} = {text}"));
            } else {
                let update = combine(
                    red.kind,
                    &format!("acc{r}"),
                    &masked,
                    red.acc_dtype.is_float(),
                );
                self.line(depth, &format!("acc{r} = {update}"));
            }
        }
        for s in stores {
            self.store_line(depth, s, true, "[XBLOCK, RBLOCK]")?;
        }
        Ok(())
    }
}

/// How a reduction kernel's values fall into phases over the row, and which
/// loop over the row accumulates each reduction.
struct RowPlan {
    /// Per expression: whether it varies along the row.
    uses_r: IdVec<ExprId, bool>,
    /// Per expression: its phase.
    phase: IdVec<ExprId, usize>,
    /// Per reduction: the phase of the loop that accumulates it (an online
    /// softmax's sum in its max's).
    red_loop: Vec<usize>,
    /// Online softmax pairs (max, sum) ([`online_softmax_pairs`]).
    online: Vec<(usize, usize)>,
    /// The expressions the kernel needs.
    needed: HashSet<ExprId>,
    /// The last phase with a reduction or a store.
    last: usize,
    /// Whether `RBLOCK` covers the row (one tile, no loops).
    persistent: bool,
}

impl RowPlan {
    fn of(k: &Kernel, persistent: bool) -> RowPlan {
        let (uses_r, phase) = k.phases();
        let mut red_loop: Vec<usize> = k.reductions.iter().map(|r| phase[r.value]).collect();
        // Online softmax: the sum joins its max's loop (looped kernels only;
        // a persistent kernel reads the row once either way).
        let online: Vec<(usize, usize)> = if persistent {
            Vec::new()
        } else {
            online_softmax_pairs(k)
        };
        for &(a, b) in &online {
            red_loop[b] = red_loop[a];
        }
        let last = red_loop
            .iter()
            .copied()
            .chain(k.stores.iter().map(|s| phase[s.value]))
            .max()
            .unwrap_or(0);
        RowPlan {
            uses_r,
            phase,
            red_loop,
            online,
            needed: k.needed(),
            last,
            persistent,
        }
    }

    /// The online sum computed with max reduction `a`, if any.
    fn online_sum_of(&self, a: usize) -> Option<usize> {
        self.online.iter().find(|(m, _)| *m == a).map(|(_, b)| *b)
    }

    /// Whether reduction `b` is an online sum (updated and finished with its max).
    fn is_online_sum(&self, b: usize) -> bool {
        self.online.iter().any(|(_, s)| *s == b)
    }

    /// Phase `p`'s stores of values varying along the row.
    fn varying_stores(&self, k: &Kernel, p: usize) -> Vec<Store> {
        k.stores
            .iter()
            .filter(|s| self.phase[s.value] == p && self.uses_r[s.value])
            .cloned()
            .collect()
    }
}

/// Reductions of a looped kernel computed online (Milakov and Gimelshein's
/// online softmax, as Inductor's `online_softmax_reduce`): for a sum `b` of
/// `exp(v - max(v))` whose max is reduction `a`, the sum is rescaled as the max
/// grows, so that both come out of one loop over the row instead of two.
/// Returns (a, b) pairs.
fn online_softmax_pairs(k: &Kernel) -> Vec<(usize, usize)> {
    use crate::graph::ops::{BinaryOp, UnaryOp};
    let mut pairs = Vec::new();
    for (b, red) in k.reductions.iter().enumerate() {
        if red.kind != ReduceKind::Sum || !red.acc_dtype.is_float() {
            continue;
        }
        let Expr::Unary(UnaryOp::Exp, diff) = k.exprs.get(red.value) else {
            continue;
        };
        let Expr::Binary(BinaryOp::Sub, v, m) = k.exprs.get(*diff) else {
            continue;
        };
        let Expr::Reduced(a) = k.exprs.get(*m) else {
            continue;
        };
        let Some(max) = k.reductions.get(*a) else {
            continue;
        };
        let same_dtype = k.exprs.dtype(red.value) == red.acc_dtype
            && k.exprs.dtype(*v) == red.acc_dtype
            && max.acc_dtype == red.acc_dtype;
        if max.kind == ReduceKind::Max && max.value == *v && same_dtype {
            pairs.push((*a, b));
        }
    }
    pairs
}

/// The reduction of a tile along the row, kept as a column.
fn finish(kind: ReduceKind, tile: &str, float: bool) -> String {
    match kind {
        ReduceKind::Sum => format!("tl.sum({tile}, 1)[:, None]"),
        ReduceKind::Max if float => format!("tl.reduce({tile}, 1, kiln_max_combine)[:, None]"),
        ReduceKind::Min if float => format!("tl.reduce({tile}, 1, kiln_min_combine)[:, None]"),
        ReduceKind::Max => format!("tl.max({tile}, 1)[:, None]"),
        ReduceKind::Min => format!("tl.min({tile}, 1)[:, None]"),
    }
}

/// One accumulator update of a looped reduction.
fn combine(kind: ReduceKind, acc: &str, value: &str, float: bool) -> String {
    let nan = if float {
        ", propagate_nan=tl.PropagateNan.ALL"
    } else {
        ""
    };
    match kind {
        ReduceKind::Sum => format!("{acc} + {value}"),
        ReduceKind::Max => format!("tl.maximum({acc}, {value}{nan})"),
        ReduceKind::Min => format!("tl.minimum({acc}, {value}{nan})"),
    }
}

/// What `--autotune` kernels pass `triton.autotune` besides their configs:
/// Triton 3.4 and later keep each kernel's timings in Triton's cache directory
/// (keyed by the kernel's source, its key values and its configs), so a later
/// process launches the choice without benchmarking again.
pub(super) const AUTOTUNE_CACHE: &str = "import inspect

# --autotune: keep the autotuner's choices on disk (Triton's cache directory) where
# this Triton can (3.4 and later), so that later processes do not benchmark again.
kiln_autotune_cache = (
    {\"cache_results\": True}
    if \"cache_results\" in inspect.signature(triton.autotune).parameters
    else {}
)
";

/// The most programs per multiprocessor of a kernel launched as a programmatic
/// dependent ([`DEPENDENT_WAIT`]): each program waits, and a grid of many small
/// ones pays for it. On the H100 (132 multiprocessors), one-row products
/// launched so ran at a median 0.80–0.98 of their plain time with up to 2047
/// programs, 0.93–1.08 with 2048 to 16383, and 1.15–1.84 with more
/// (`bench/gpu/gemv_configs.py --pdl --dump` against the plain sweep).
const DEPENDENT_PROGRAMS_PER_UNIT: u64 = 128;

/// Where a kernel lets the kernel after it start, then waits for the results of
/// the kernel launched before it. On a target whose Triton launches kernels as
/// programmatic dependents (CUDA's programmatic dependent launch, sm_90 and
/// later), `kiln_runtime` sets `KILN_PDL` and launches every kernel that calls
/// this with `launch_pdl`: the kernel's programs start while the kernel before
/// still runs, issue their loads of constants, and wait here; once all of them
/// have reached this point, the next kernel's programs may start and issue
/// theirs (three kernels in flight: on the H100 a decoding step of the 170 M
/// Llama-style model took 0.263 ms so, 0.279 with the next kernel let start
/// after the wait). Elsewhere it compiles to nothing. Every such kernel calls it
/// before it reads or writes anything but a constant, so a kernel ending implies
/// that those before it ended, and a kernel's programs all start before the next
/// kernel's may: those waiting never hold back one that must run.
pub(super) const DEPENDENT_WAIT: (&str, &str) = (
    "kiln_dependent_wait",
    r#"@triton.jit
def kiln_dependent_wait():
    if KILN_PDL:
        tl.extra.cuda.gdc_launch_dependents()
        tl.extra.cuda.gdc_wait()
"#,
);

/// Whether kernels are launched as programmatic dependents ([`DEPENDENT_WAIT`]).
const PDL_FLAG: (&str, &str) = (
    "KILN_PDL",
    r#"# Whether kernels are launched as programmatic dependents of the kernel before
# them: set by kiln_runtime for the target they are compiled for.
KILN_PDL = tl.constexpr(False)
"#,
);

/// [`DEPENDENT_WAIT`] for a kernel whose outputs a later kernel reads before its
/// own wait (a split attention's mask, read to skip the keys it removes): it waits,
/// but never lets the kernel after it start early. That kernel then starts when
/// this one has finished, and so does every kernel launched after it (each starts
/// only once the one before it has started), whatever it reads.
pub(super) const DEPENDENT_WAIT_WHOLE: (&str, &str) = (
    "kiln_dependent_wait_whole",
    r#"@triton.jit
def kiln_dependent_wait_whole():
    if KILN_PDL:
        tl.extra.cuda.gdc_wait()
"#,
);

/// A prefetch into L2 of the lines at `ptrs` where `keep`, issued by a kernel
/// before [`DEPENDENT_WAIT`]'s wait, under its `KILN_PDL` (elsewhere it compiles
/// to nothing). It reads nothing into the program, so it may come before the wait
/// whatever the kernel before writes (programs read and write global memory
/// through L2): the loads after the wait then find their lines in L2 rather than
/// in device memory. Split attention's keys and values: 4.2 to 3.3 us a layer of
/// GPT-2 small's bfloat16 decoding step on the H100.
pub(super) const PREFETCH_L2: (&str, &str) = (
    "kiln_prefetch_l2",
    r#"@triton.jit
def kiln_prefetch_l2(ptrs, keep):
    # Called before kiln_dependent_wait, under its KILN_PDL.
    if KILN_PDL:
        tl.inline_asm_elementwise(
            "{ .reg .pred %p; setp.ne.b32 %p, $2, 0; @%p prefetch.global.L2 [$1]; mov.u32 $0, 0; }",
            "=r,l,r", [ptrs, keep.to(tl.int32)], dtype=tl.int32, is_pure=False, pack=1)
"#,
);

/// The `@triton.jit` helpers kernels call (NaN-propagating max/min combines,
/// PyTorch's floor division, online softmax), by name, in the order they are
/// written: a file holds those its kernels call ([`super::used_helpers`]).
pub(super) const HELPERS: &[(&str, &str)] = &[
    PDL_FLAG,
    DEPENDENT_WAIT,
    DEPENDENT_WAIT_WHOLE,
    PREFETCH_L2,
    (
        "kiln_online_softmax_update",
        r#"@triton.jit
def kiln_online_softmax_update(m, s, v):
    # One step of an online softmax: the running max m and the sum s of
    # exp(value - m), per lane, after seeing v (-inf where masked off).
    m_new = tl.maximum(m, v, propagate_nan=tl.PropagateNan.ALL)
    base = tl.where(m_new == float("-inf"), 0.0, m_new)
    return m_new, s * libdevice.exp(m - base) + libdevice.exp(v - base)
"#,
    ),
    (
        "kiln_online_softmax_finish",
        r#"@triton.jit
def kiln_online_softmax_finish(m, s):
    # The row's max, and its sum of exp(value - max), from the lanes' running ones.
    m_row = tl.reduce(m, 1, kiln_max_combine)[:, None]
    base = tl.where(m_row == float("-inf"), 0.0, m_row)
    return m_row, tl.sum(s * libdevice.exp(m - base), 1)[:, None]
"#,
    ),
    (
        "kiln_max_combine",
        r#"@triton.jit
def kiln_max_combine(a, b):
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)
"#,
    ),
    (
        "kiln_min_combine",
        r#"@triton.jit
def kiln_min_combine(a, b):
    return tl.minimum(a, b, propagate_nan=tl.PropagateNan.ALL)
"#,
    ),
    (
        "kiln_floor_quotient",
        r#"@triton.jit
def kiln_floor_quotient(a, b, mod, div, quotient):
    # PyTorch's floating floor division from the exact remainder `mod`, the quotient
    # `div` of a - mod, and a / b (both correctly rounded).
    div = tl.where((mod != 0) & ((b < 0) != (mod < 0)), div - 1, div)
    floordiv = libdevice.floor(div)
    floordiv = tl.where(div - floordiv > 0.5, floordiv + 1, floordiv)
    floordiv = tl.where(div != 0, floordiv, quotient * 0.0)
    return tl.where(b == 0, quotient, floordiv)
"#,
    ),
    (
        "kiln_div_floor",
        r#"@triton.jit
def kiln_div_floor(a, b):
    mod = libdevice.fmod(a, b)
    return kiln_floor_quotient(a, b, mod, tl.div_rn(a - mod, b), tl.div_rn(a, b))
"#,
    ),
    (
        "kiln_div_floor64",
        r#"@triton.jit
def kiln_div_floor64(a, b):
    mod = libdevice.fmod(a, b)
    return kiln_floor_quotient(a, b, mod, (a - mod) / b, a / b)
"#,
    ),
];

/// An index as a pointer offset that is always a block. A constant index (a 0-d
/// tensor, a broadcast single element) would otherwise make a scalar pointer, and
/// Triton rejects a block mask or value with a scalar pointer; adding a zero tile of
/// the row index's shape keeps the pointer a block that broadcasts with the mask.
fn block_offset(index: &Index) -> String {
    if index.uses(Var::X) || index.uses(Var::R) {
        format!("{index}")
    } else {
        format!("{index} + tl.zeros_like(xindex)")
    }
}
