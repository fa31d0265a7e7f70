//! The writer of one C++/OpenMP kernel function.
//!
//! A pointwise kernel is a `#pragma omp parallel for` over chunks of its
//! elements, each an `#pragma omp simd` loop. A reduction kernel is a `#pragma omp parallel for` over its rows;
//! inside a row, values are placed in *phases* exactly as the loop-IR
//! evaluator (`schedule/eval.rs`) orders them: phase 0 needs no reduction
//! result, phase p + 1 needs a reduction finished in phase p. Each phase that
//! has reductions or stores varying along the row runs one `#pragma omp simd`
//! loop over `r`, recomputing from the loads what it needs (nothing is kept
//! per row element). Parallel chunk sizes come from the plugin's heuristics.

mod lanes;
mod outer;

use std::collections::{HashMap, HashSet};
use std::fmt::Write;

use super::expr::{
    compute_type, cond_text, fits_i32, index_text, load_conversion, neutral, storage_type,
    store_conversion, IndexStyle, Renderer,
};
use super::{Error, KernelInfo};
use crate::codegen::heuristics::{kernel_configs, LaunchHeuristics};
use crate::codegen::{param_names, NamedKernel};
use crate::graph::dtype::DType;
use crate::graph::sym::Syntax;
use crate::schedule::ids::IdVec;
use crate::schedule::index::{size_text, Index, Size, Var};
use crate::schedule::ir::{
    Access, BufferId, Cond, Expr, ExprId, Kernel, Program, ReduceKind, Store,
};

/// Writes one kernel of `program` as a C++ function, with how to call it.
pub(super) fn write_kernel(
    program: &Program,
    named: &NamedKernel,
    heuristics: &dyn LaunchHeuristics,
    options: &super::Options,
) -> Result<(String, KernelInfo), Error> {
    let (k, name) = (named.kernel, named.name.as_str());
    let names = param_names(&k.params);
    let mut arg_names = HashMap::new();
    let mut params = Vec::new();
    for (p, param) in k.params.iter().zip(&names) {
        let ty = storage_type(program.buffer(p.buf).dtype);
        arg_names.insert(p.buf, param.clone());
        params.push(match p.access {
            Access::Read => format!("const {ty}* __restrict__ {param}"),
            Access::Write => format!("{ty}* __restrict__ {param}"),
        });
    }
    // The size symbols its loops and indexes read, after the pointers.
    let symbols = kernel_symbols(k);
    params.extend(symbols.iter().map(|s| format!("const int64_t ks{}", s.0)));
    let pointwise = !k.is_reduction();
    // The parallel chunk is the first config's block; a reduction's r block
    // is how many row elements the plugin reduces at a time (its lanes).
    let (chunk, r_step) = kernel_configs(program, k, heuristics)
        .map(|configs| (configs[0].x_block.max(1), configs[0].r_block.max(1)))
        .map_err(|source| Error::Heuristics {
            kernel: name.to_string(),
            source,
        })?;

    // Every index of the kernel, guards and selects included, decides together,
    // at the largest extents the symbols' ranges allow.
    let (xe, re) = (most(&k.space.x, program), most(&k.space.r, program).max(1));
    let mut indices: Vec<&crate::schedule::index::Index> =
        k.stores.iter().map(|s| &s.index).collect();
    for (id, _, _) in k.exprs.iter() {
        match k.exprs.get(id) {
            Expr::Load { index, guards, .. } => {
                indices.push(index);
                indices.extend(guards.iter().map(|g| &g.index));
            }
            Expr::Select(c, _, _) => indices.push(&c.index),
            _ => {}
        }
    }
    let narrow = options.int32_indices
        && xe < (1 << 31)
        && re < (1 << 31)
        && indices.iter().all(|i| fits_i32(i, xe, re));
    let mut w = Writer {
        k,
        program,
        renderer: Renderer {
            exprs: &k.exprs,
            narrow,
        },
        narrow,
        arg_names: &arg_names,
        out: String::new(),
        name,
        row_block: None,
        elem_block: None,
        staged: Vec::new(),
        stage_block: 0,
        block_type: "int64_t",
        transposed: HashMap::new(),
    };
    writeln!(
        w.out,
        "// {} x {}; parallel chunk {chunk} from the plugin's heuristics.",
        extent(&k.space.x),
        extent(&k.space.r)
    )?;
    writeln!(w.out, "static void {name}({}) {{", params.join(", "))?;
    if pointwise {
        w.pointwise_body(chunk)?;
    } else if k.space.fixed().is_none() {
        // Sizes known at the call only: rows one at a time, each an `omp simd`
        // loop (the other forms pick blocks and vectors by the extents).
        w.reduction_body(chunk, i64::from(r_step))?;
    } else if k.is_tiled() && reads_across_rows(k) {
        w.tiled_body(chunk)?;
    } else if !k.reductions.is_empty()
        && crate::codegen::heuristics::reduction_hint(program, k)
            == kiln_plugin_api::ReductionHint::Outer
    {
        w.outer_body(chunk, false)?;
    } else if !k.reductions.is_empty()
        && (2..i64::from(r_step)).contains(&k.space.r_hint())
        && RowPhases::of(k)
            .loops
            .iter()
            .filter(|(reds, stores)| !reds.is_empty() || !stores.is_empty())
            .count()
            > 1
    {
        // Rows shorter than the plugin's step along them (softmax over rows of
        // 7 on a 16-lane machine: its step is 8) fill no vector: each loop over
        // a row is partial vectors and a horizontal reduction. Where a kernel
        // loops over its rows more than once, a block of rows at a time, one
        // accumulator per row and every loop across the block, fills them,
        // with the block's contiguous rows staged transposed in a tile that
        // every loop reads (on two Zen 4 cores, softmax over rows of 3, 7 and
        // 12 elements 2.3-4x faster than row by row; rows of 8 and 16 are
        // whole steps and stay row by row). A single loop (a sum) stays row by
        // row: staging costs it more than it saves (1.3-2.4 ms against 1.0-1.2
        // for sums of [838860, 5]).
        w.outer_body(chunk, true)?;
    } else {
        w.reduction_body(chunk, i64::from(r_step))?;
    }
    w.out.push_str("}\n");
    let info = KernelInfo {
        step: named.step,
        name: name.to_string(),
        args: k.params.iter().map(|p| p.buf).collect(),
        symbols,
        chunk,
    };
    Ok((w.out, info))
}

struct Writer<'a> {
    k: &'a Kernel,
    program: &'a Program,
    renderer: Renderer<'a>,
    /// Indices in `int32_t` (see [`IndexStyle::narrow`]).
    narrow: bool,
    arg_names: &'a HashMap<BufferId, String>,
    out: String,
    name: &'a str,
    /// While an outer reduction's body is written: its aligned block of rows,
    /// where accesses that step by one across it are written as a block
    /// start plus `xi` ([`Writer::offset_text`]).
    row_block: Option<i64>,
    /// While a reduction's row loops are written: their aligned block of row
    /// elements (`rs` + `ri`), likewise.
    elem_block: Option<i64>,
    /// While a block of short rows is written ([`Writer::outer_body`] with
    /// `stage`): the accesses staged in local tiles, element `r` of the
    /// block's row `xi` at `[r * block + xi]`, with their tiles' names.
    staged: Vec<(BufferId, Index, String)>,
    /// The block those tiles hold.
    stage_block: i64,
    /// The type of an outer reduction's block loops (`xb`, `xn`, `xi`).
    block_type: &'static str,
    /// While a tiled kernel's body is written: loads read from a staged tile
    /// ([`Writer::stageable_loads`]), by the tile's name.
    transposed: HashMap<ExprId, String>,
}

impl Writer<'_> {
    /// The type of the loop variables `x` and `r`.
    fn index_type(&self) -> &'static str {
        if self.narrow {
            "int32_t"
        } else {
            "int64_t"
        }
    }

    fn style(&self, r_zero: bool) -> IndexStyle {
        IndexStyle {
            r_zero,
            narrow: self.narrow,
            x_block_start: false,
            r_block_start: false,
        }
    }

    /// The offset of an access at `index`: inside an outer reduction's
    /// aligned block of rows ([`Writer::outer_body`]), an index that steps by
    /// one across the block is its value at the block's first row plus `xi`
    /// (a contiguous vector access where the flat index, divided and wrapped
    /// per row, would gather), and one constant across the block is that
    /// value; otherwise the index itself.
    fn offset_text(&self, index: &Index, r_zero: bool) -> String {
        let style = self.style(r_zero);
        let blocks = [
            (self.elem_block.filter(|_| !r_zero), Var::R, "ri"),
            (self.row_block, Var::X, "xi"),
        ];
        for (block, var, within) in blocks {
            let Some(block) = block.filter(|_| index.uses(var)) else {
                continue;
            };
            let start = IndexStyle {
                r_block_start: var == Var::R,
                x_block_start: var == Var::X,
                ..style
            };
            match index.block_step(var, block) {
                Some(1) => return format!("({} + {within})", index_text(index, start)),
                Some(0) => return index_text(index, start),
                _ => {}
            }
        }
        index_text(index, style)
    }

    /// The local tile an access of a block of short rows is staged in.
    fn staged_tile(&self, buf: BufferId, index: &Index) -> Option<&str> {
        self.staged
            .iter()
            .find(|(b, i, _)| *b == buf && i == index)
            .map(|(_, _, tile)| tile.as_str())
    }

    /// Copies between `ptr` and the tile of a block of short rows: the
    /// block's rows are one contiguous run from the access's value at the
    /// block's first row (`x = xb`, `r = 0`); `load` reads the run into the
    /// tile, otherwise the tile is written to the run.
    fn stage_copy(&mut self, depth: usize, ptr: &str, index: &Index, tile: &str, load: bool) {
        let (it, r, block) = (self.index_type(), self.k.space.r_hint(), self.stage_block);
        self.line(depth, "{");
        self.line(
            depth + 1,
            &format!("[[maybe_unused]] const {it} x = static_cast<{it}>(xb);"),
        );
        self.line(depth + 1, &format!("[[maybe_unused]] const {it} r = 0;"));
        let start = index_text(index, self.style(false));
        let bt = self.block_type;
        self.line(depth + 1, &format!("for ({bt} xi = 0; xi < xn; ++xi)"));
        self.line(depth + 2, &format!("for (int64_t e = 0; e < {r}; ++e)"));
        let (run, at) = (
            format!("{ptr}[({start}) + xi * {r} + e]"),
            format!("{tile}[e * {block} + xi]"),
        );
        if load {
            self.line(depth + 3, &format!("{at} = {run};"));
        } else {
            self.line(depth + 3, &format!("{run} = {at};"));
        }
        self.line(depth, "}");
    }

    fn unsupported(&self, what: String) -> Error {
        Error::Unsupported {
            kernel: self.name.to_string(),
            what,
        }
    }

    fn line(&mut self, depth: usize, text: &str) {
        for _ in 0..depth {
            self.out.push_str("    ");
        }
        self.out.push_str(text);
        self.out.push('\n');
    }

    fn ptr(&self, buf: BufferId) -> Result<String, Error> {
        self.arg_names
            .get(&buf)
            .cloned()
            .ok_or_else(|| self.unsupported(format!("buffer {} is not an argument", buf.0)))
    }

    /// The element the load `id` reads, as stored (a `uint16_t` for the
    /// 16-bit floats; a bool's byte compared with 0), before any conversion
    /// to its compute type and without its guards.
    fn stored_read(&self, id: ExprId, r_zero: bool) -> Result<String, Error> {
        let Expr::Load {
            buf,
            index,
            indirect,
            ..
        } = self.k.exprs.get(id)
        else {
            return Err(self.unsupported(format!("expression {} read as a load", id.0)));
        };
        if let Some(tile) = self.transposed.get(&id) {
            return Ok(format!("{tile}[(x - xs) * {TILE} + (r - rs)]"));
        }
        if let Some(tile) = self.staged_tile(*buf, index) {
            return Ok(format!("{tile}[r * {} + xi]", self.stage_block));
        }
        let ptr = self.ptr(*buf)?;
        let mut offset = self.offset_text(index, r_zero);
        // An index read from a tensor goes through `kiln_index`, which wraps a
        // negative one once (`kiln_index_nonnegative`, an embedding's, does not)
        // and turns one out of range into 0 and a fault that `kiln_call`
        // reports: never a read outside the buffer.
        for i in indirect {
            let v = self.renderer.operand(i.value);
            let check = if i.nonnegative {
                "kiln_index_nonnegative"
            } else {
                "kiln_index"
            };
            offset = format!(
                "{offset} + {check}(static_cast<int64_t>({v}), {}) * {}",
                extent(&i.size),
                extent(&i.stride)
            );
        }
        Ok(if self.program.buffer(*buf).dtype == DType::Bool {
            // Read as bytes: GCC vectorises no loop that loads `bool`
            // (a mask's `where` ran element by element).
            format!("(reinterpret_cast<const uint8_t*>({ptr})[{offset}] != 0)")
        } else {
            format!("{ptr}[{offset}]")
        })
    }

    /// Whether the load `id` reads a tile (transposed or staged), where its
    /// guards do not apply: the tile holds what the guards allow.
    fn reads_tile(&self, id: ExprId) -> bool {
        match self.k.exprs.get(id) {
            Expr::Load { buf, index, .. } => {
                self.transposed.contains_key(&id) || self.staged_tile(*buf, index).is_some()
            }
            _ => false,
        }
    }

    /// `value` where the guards of a load hold, else `zero`.
    fn guarded(&self, guards: &[Cond], r_zero: bool, value: String, zero: &str) -> String {
        if guards.is_empty() {
            return value;
        }
        let conds: Vec<String> = guards
            .iter()
            .map(|g| cond_text(g, self.style(r_zero)))
            .collect();
        format!("({} ? {value} : {zero})", conds.join(" && "))
    }

    fn emit_expr(&mut self, depth: usize, id: ExprId, r_zero: bool) -> Result<(), Error> {
        let d = self.k.exprs.dtype(id);
        let ty = compute_type(d);
        let rhs = match self.k.exprs.get(id) {
            Expr::Literal(_) | Expr::Reduced(_) => return Ok(()),
            Expr::Load { buf, guards, .. } => {
                let stored = self.program.buffer(*buf).dtype;
                let read = self.stored_read(id, r_zero)?;
                let value = as_compute_type(stored, ty, load_conversion(stored, &read));
                if self.reads_tile(id) {
                    value
                } else {
                    self.guarded(guards, r_zero, value, &format!("static_cast<{ty}>(0)"))
                }
            }
            _ => self
                .renderer
                .rhs(id, r_zero)
                .map_err(|e| self.unsupported(e))?,
        };
        self.line(depth, &format!("const {ty} {} = {rhs};", Renderer::var(id)));
        Ok(())
    }

    /// Whether the store `s` moves a 16-bit float's bits as they were read
    /// (see [`Writer::store_line`]).
    fn moves(&self, s: &Store) -> bool {
        let to = self.program.buffer(s.buf).dtype;
        matches!(to, DType::Float16 | DType::BFloat16) && self.movable(s.value, to)
    }

    /// Whether `id` is an element read from storage of `to` and passed on
    /// unchanged: a load, a cast of one to a type that holds every value of
    /// `to` (`to` itself, float32, float64) and back, or a choice between two
    /// (a `cat`'s parts, a `where`).
    fn movable(&self, id: ExprId, to: DType) -> bool {
        let d = self.k.exprs.dtype(id);
        if d != to && d != DType::Float32 && d != DType::Float64 {
            return false;
        }
        match self.k.exprs.get(id) {
            Expr::Load { buf, .. } => self.program.buffer(*buf).dtype == to,
            Expr::Cast(a) => self.movable(*a, to),
            Expr::Select(_, a, b) | Expr::Where(_, a, b) => {
                self.movable(*a, to) && self.movable(*b, to)
            }
            _ => false,
        }
    }

    /// The values a moved element `id` ([`Writer::movable`]) still needs
    /// computed: the indices its loads read through, the conditions of its
    /// `where`s.
    fn move_inputs(&self, id: ExprId, out: &mut Vec<ExprId>) {
        match self.k.exprs.get(id) {
            Expr::Cast(a) => self.move_inputs(*a, out),
            Expr::Select(_, a, b) => {
                self.move_inputs(*a, out);
                self.move_inputs(*b, out);
            }
            Expr::Where(c, a, b) => {
                out.push(*c);
                self.move_inputs(*a, out);
                self.move_inputs(*b, out);
            }
            _ => out.extend(self.k.exprs.operands(id)),
        }
    }

    /// The bits of a moved element `id` ([`Writer::movable`]), in its
    /// storage type.
    fn moved_text(&self, id: ExprId, r_zero: bool) -> Result<String, Error> {
        Ok(match self.k.exprs.get(id) {
            Expr::Load { guards, .. } => {
                let read = self.stored_read(id, r_zero)?;
                if self.reads_tile(id) {
                    read
                } else {
                    self.guarded(guards, r_zero, read, "static_cast<uint16_t>(0)")
                }
            }
            Expr::Cast(a) => self.moved_text(*a, r_zero)?,
            Expr::Select(c, a, b) => format!(
                "({} ? {} : {})",
                cond_text(c, self.style(r_zero)),
                self.moved_text(*a, r_zero)?,
                self.moved_text(*b, r_zero)?
            ),
            Expr::Where(c, a, b) => format!(
                "({} ? {} : {})",
                self.renderer.operand(*c),
                self.moved_text(*a, r_zero)?,
                self.moved_text(*b, r_zero)?
            ),
            _ => return Err(self.unsupported(format!("expression {} moved as bits", id.0))),
        })
    }

    /// The values the kernel computes: what its stores and reductions need,
    /// except what stores only move (see [`Writer::move_inputs`]).
    fn needed(&self) -> HashSet<ExprId> {
        let mut roots: Vec<ExprId> = self.k.reductions.iter().map(|r| r.value).collect();
        for s in &self.k.stores {
            if self.moves(s) {
                self.move_inputs(s.value, &mut roots);
            } else {
                roots.push(s.value);
            }
        }
        let mut seen = HashSet::new();
        while let Some(e) = roots.pop() {
            if seen.insert(e) {
                roots.extend(self.k.exprs.operands(e));
            }
        }
        seen
    }

    fn store_line(&mut self, depth: usize, s: &Store, r_zero: bool) -> Result<(), Error> {
        if !s.indirect.is_empty() {
            // The scheduler makes scatters only for the Python wrapper of a Triton device.
            return Err(self.unsupported("a store at data-dependent places (a scatter)".into()));
        }
        let ptr = self.ptr(s.buf)?;
        let to = self.program.buffer(s.buf).dtype;
        let from = self.k.exprs.dtype(s.value);
        // A 16-bit float stored as it was read moves its bits: no round trip
        // through float (faster, and a NaN keeps its payload, as torch's
        // copies keep it).
        let value = if self.moves(s) {
            self.moved_text(s.value, r_zero)?
        } else {
            store_conversion(from, to, &self.renderer.operand(s.value))
        };
        // A guarded store (a part of a horizontally fused kernel) is made where its
        // conditions hold.
        let when = match s.guards.as_slice() {
            [] => String::new(),
            guards => {
                let conds: Vec<String> = guards
                    .iter()
                    .map(|g| cond_text(g, self.style(r_zero)))
                    .collect();
                format!("if ({}) ", conds.join(" && "))
            }
        };
        if let Some(tile) = self.staged_tile(s.buf, &s.index) {
            let at = format!("{tile}[r * {} + xi]", self.stage_block);
            self.line(depth, &format!("{when}{at} = {value};"));
            return Ok(());
        }
        self.line(
            depth,
            &format!(
                "{when}{ptr}[{}] = {value};",
                self.offset_text(&s.index, r_zero)
            ),
        );
        Ok(())
    }

    fn pointwise_body(&mut self, chunk: u32) -> Result<(), Error> {
        let x = extent(&self.k.space.x);
        // Threads take whole chunks; inside one, a plain `omp simd` loop, which
        // compilers vectorise (GCC leaves a combined `parallel for simd` with a
        // chunked schedule scalar).
        self.line(
            1,
            &format!("#pragma omp parallel for schedule(static) if ({x} > {chunk})"),
        );
        self.line(
            1,
            &format!("for (int64_t x0 = 0; x0 < {x}; x0 += {chunk}) {{"),
        );
        self.line(
            2,
            &format!("const int64_t x1 = std::min<int64_t>(x0 + {chunk}, {x});"),
        );
        self.line(2, "#pragma omp simd");
        let it = self.index_type();
        self.line(
            2,
            &format!("for ({it} x = static_cast<{it}>(x0); x < static_cast<{it}>(x1); ++x) {{"),
        );
        self.every_value_and_store(3, true)?;
        self.line(2, "}");
        self.line(1, "}");
        Ok(())
    }

    /// Every value the kernel needs and every store, at `depth`: the body of a
    /// loop that visits each element once (a pointwise kernel's).
    fn every_value_and_store(&mut self, depth: usize, r_zero: bool) -> Result<(), Error> {
        let needed = self.needed();
        for (id, _, _) in self.k.exprs.iter() {
            if needed.contains(&id) {
                self.emit_expr(depth, id, r_zero)?;
            }
        }
        for s in self.k.stores.clone() {
            self.store_line(depth, &s, r_zero)?;
        }
        Ok(())
    }

    /// A pointwise kernel split into rows by row elements that accesses
    /// memory along the rows as well as across them (a transpose): square
    /// tiles of [`TILE`] rows by [`TILE`] row elements, each a vector loop
    /// along the row per row of the tile. An access that steps by one from row
    /// to row then reads (or writes) whole cache lines within the tile instead
    /// of one element of a line per element.
    fn tiled_body(&mut self, chunk: u32) -> Result<(), Error> {
        let (x, r) = (self.k.space.x_hint(), self.k.space.r_hint());
        let it = self.index_type();
        self.line(
            1,
            &format!("#pragma omp parallel for collapse(2) schedule(static) if ({x} > {chunk})"),
        );
        self.line(
            1,
            &format!("for (int64_t xb = 0; xb < {x}; xb += {TILE}) {{"),
        );
        self.line(
            2,
            &format!("for (int64_t rb = 0; rb < {r}; rb += {TILE}) {{"),
        );
        self.line(
            3,
            &format!(
                "[[maybe_unused]] const {it} xe = static_cast<{it}>(std::min<int64_t>(xb + {TILE}, {x}));"
            ),
        );
        self.line(
            3,
            &format!(
                "[[maybe_unused]] const {it} re = static_cast<{it}>(std::min<int64_t>(rb + {TILE}, {r}));"
            ),
        );
        // Loads that read across rows, staged: each tile of them is copied
        // through registers into a local tile laid out along the row, which the
        // vector loop below then reads contiguously.
        let staged = self.stageable_loads();
        if !staged.is_empty() {
            self.line(
                3,
                &format!("[[maybe_unused]] const {it} xs = static_cast<{it}>(xb);"),
            );
            self.line(
                3,
                &format!("[[maybe_unused]] const {it} rs = static_cast<{it}>(rb);"),
            );
            let start = IndexStyle {
                x_block_start: true,
                r_block_start: true,
                ..self.style(false)
            };
            for (n, (id, buf, index, stride)) in staged.iter().enumerate() {
                let ty = storage_type(self.program.buffer(*buf).dtype);
                let ptr = self.ptr(*buf)?;
                self.line(3, &format!("alignas(64) {ty} tile{n}[{TILE} * {TILE}];"));
                self.line(
                    3,
                    &format!(
                        "kiln_tile_transpose({ptr} + {}, {stride}, tile{n}, re - rs, xe - xs);",
                        index_text(index, start)
                    ),
                );
                self.transposed.insert(*id, format!("tile{n}"));
            }
            // The next tile's lines of each result written along the row,
            // fetched for writing while this one is stored: otherwise its
            // stores wait for those lines, and the loads of the staged tile
            // behind them wait too wherever their addresses agree modulo
            // 4 KiB with a waiting store's (on a Sapphire Rapids Xeon, a
            // transpose of rows 4000 bytes long ran 1.9x faster with it;
            // others alike).
            let along_row = IndexStyle {
                r_block_start: true,
                ..self.style(false)
            };
            for st in self.k.stores.clone() {
                if st.index.block_step(Var::R, TILE) != Some(1) {
                    continue;
                }
                let bytes = TILE * self.program.buffer(st.buf).dtype.size_bytes() as i64;
                let ptr = self.ptr(st.buf)?;
                self.line(
                    3,
                    &format!(
                        "if (rb + {TILE} < {r}) for ({it} x = xs; x < xe; ++x) \
                         kiln_prefetch_write({ptr} + {} + {TILE}, {bytes});",
                        index_text(&st.index, along_row)
                    ),
                );
            }
        }
        // A whole tile runs loops of constant length (vectors without a
        // remainder; a row of a staged copy is two vector moves, not a call of
        // memcpy, which compilers make of a copy loop of unknown length); a
        // tile at the edge of the space, loops to its end.
        let (x_full, r_full) = (
            format!("static_cast<{it}>(xb + {TILE})"),
            format!("static_cast<{it}>(rb + {TILE})"),
        );
        if x % TILE == 0 && r % TILE == 0 {
            self.tile_loops(3, &x_full, &r_full)?;
        } else {
            self.line(
                3,
                &format!("if (xe - static_cast<{it}>(xb) == {TILE} && re - static_cast<{it}>(rb) == {TILE}) {{"),
            );
            self.tile_loops(4, &x_full, &r_full)?;
            self.line(3, "} else {");
            self.tile_loops(4, "xe", "re")?;
            self.line(3, "}");
        }
        self.line(2, "}");
        self.line(1, "}");
        self.transposed.clear();
        Ok(())
    }

    /// The loops over one tile of [`Writer::tiled_body`], rows up to `x_end`
    /// and row elements up to `r_end`, at `depth`.
    fn tile_loops(&mut self, depth: usize, x_end: &str, r_end: &str) -> Result<(), Error> {
        let it = self.index_type();
        self.line(
            depth,
            &format!("for ({it} x = static_cast<{it}>(xb); x < {x_end}; ++x) {{"),
        );
        self.line(depth + 1, "#pragma omp simd");
        self.line(
            depth + 1,
            &format!("for ({it} r = static_cast<{it}>(rb); r < {r_end}; ++r) {{"),
        );
        self.every_value_and_store(depth + 2, false)?;
        self.line(depth + 1, "}");
        self.line(depth, "}");
        Ok(())
    }

    /// The loads a tiled kernel stages through `kiln_tile_transpose`: of
    /// 2-, 4- or 8-byte elements, read at a place that steps by one from row to row and
    /// by a constant stride along the row inside every aligned tile, with no
    /// guard or gathered index; each with its buffer, index and stride.
    fn stageable_loads(&self) -> Vec<(ExprId, BufferId, Index, i64)> {
        let mut out = Vec::new();
        for (id, e, _) in self.k.exprs.iter() {
            let Expr::Load {
                buf,
                index,
                guards,
                indirect,
            } = e
            else {
                continue;
            };
            if !guards.is_empty() || !indirect.is_empty() {
                continue;
            }
            if !matches!(self.program.buffer(*buf).dtype.size_bytes(), 2 | 4 | 8) {
                continue;
            }
            match (
                index.block_step(Var::X, TILE),
                index.block_step(Var::R, TILE),
            ) {
                (Some(1), Some(stride)) if stride.abs() > 1 => {
                    out.push((id, *buf, index.clone(), stride));
                }
                _ => {}
            }
        }
        out
    }

    fn reduction_body(&mut self, chunk: u32, lanes: i64) -> Result<(), Error> {
        let k = self.k;
        let RowPhases {
            uses_r,
            phase,
            red_phase,
            loops,
            fixed,
        } = RowPhases::of(k);
        let needed = self.needed();
        let (x, r) = (extent(&k.space.x), extent(&k.space.r));
        // A row of a symbolic length caches at its longest (a row cache is an
        // array on the stack).
        let fixed_r = k.space.r.as_const();
        let row_most = most(&k.space.r, self.program);
        let mut cache = RowCache::plan(k, &uses_r, row_most, &loops);
        // Nothing for what the stores only move (16-bit floats' bits).
        cache.keep_only(&needed);
        // Row elements that are a view's flattened dims (`r / 256`, `r % 256`,
        // a reduction over dims 0 and 2): loops over blocks aligned to their
        // period read whole runs.
        self.elem_block = fixed_r.and_then(|r| aligned_block(k, Var::R, r.min(OUTER_BLOCK)));
        self.line(
            1,
            &format!("#pragma omp parallel for schedule(static, {chunk}) if ({x} > {chunk})"),
        );
        let it = self.index_type();
        self.line(1, &format!("for ({it} x = 0; x < {x}; ++x) {{"));
        for (&id, _) in cache
            .stored_in
            .iter()
            .collect::<std::collections::BTreeMap<_, _>>()
        {
            let ty = compute_type(k.exprs.dtype(id));
            self.line(2, &format!("alignas(64) {ty} row{}[{row_most}];", id.0));
        }
        for (p, (reds, stores)) in loops.iter().enumerate() {
            if p > 0 {
                for (i, _) in red_phase.iter().enumerate().filter(|(_, l)| **l == p - 1) {
                    let red = &k.reductions[i];
                    let ty = compute_type(red.acc_dtype);
                    let value = finished(red, i, "");
                    self.line(2, &format!("[[maybe_unused]] const {ty} red{i} = {value};"));
                }
            }
            for (id, _, _) in k.exprs.iter() {
                if phase[id] == p && !uses_r[id] && needed.contains(&id) {
                    self.emit_expr(2, id, false)?;
                }
            }
            for s in &fixed[p] {
                self.store_line(2, s, false)?;
            }
            if reds.is_empty() && stores.is_empty() {
                continue;
            }
            let simd = reds
                .iter()
                .all(|&i| k.reductions[i].acc_dtype != DType::Bool);
            // Rows of at least one vector loop a vector at a time into
            // accumulators of a vector's lanes (see `laned_loop`); the rest as
            // one `omp simd` loop with OpenMP's reduction clauses.
            if simd
                && self.elem_block.is_none()
                && lanes >= 2
                && fixed_r.is_some_and(|r| r >= lanes)
            {
                self.laned_loop(p, reds, stores, &cache, lanes)?;
                continue;
            }
            let mut clauses = Vec::new();
            for &i in reds {
                let red = &k.reductions[i];
                let ty = compute_type(red.acc_dtype);
                self.line(
                    2,
                    &format!("{ty} acc{i} = {};", neutral(red.kind, red.acc_dtype)),
                );
                match red.kind {
                    ReduceKind::Sum => clauses.push(format!("reduction(+ : acc{i})")),
                    ReduceKind::Max => clauses.push(format!("reduction(max : acc{i})")),
                    ReduceKind::Min => clauses.push(format!("reduction(min : acc{i})")),
                }
                if lanes::tracks_nan(red) {
                    // NaN propagates (torch.amax/amin): tracked beside the vector max/min.
                    self.line(2, &format!("int nan{i} = 0;"));
                    clauses.push(format!("reduction(| : nan{i})"));
                }
            }
            let it = self.index_type();
            let d = match self.elem_block {
                // Aligned blocks of the row: the vector loop runs inside one.
                Some(b) => {
                    self.line(2, &format!("for ({it} rs = 0; rs < {r}; rs += {b}) {{"));
                    self.line(
                        3,
                        &format!("const {it} rn = std::min<{it}>({b}, {r} - rs);"),
                    );
                    if simd {
                        self.line(
                            3,
                            format!("#pragma omp simd {}", clauses.join(" ")).trim_end(),
                        );
                    }
                    self.line(3, &format!("for ({it} ri = 0; ri < rn; ++ri) {{"));
                    self.line(4, &format!("[[maybe_unused]] const {it} r = rs + ri;"));
                    4
                }
                None => {
                    if simd {
                        self.line(
                            2,
                            format!("#pragma omp simd {}", clauses.join(" ")).trim_end(),
                        );
                    }
                    self.line(2, &format!("for ({it} r = 0; r < {r}; ++r) {{"));
                    3
                }
            };
            self.row_elements(d, p, &cache)?;
            for &i in reds {
                self.accumulate(d, i, "");
            }
            for s in stores {
                self.store_line(d, s, false)?;
            }
            if self.elem_block.is_some() {
                self.line(3, "}");
            }
            self.line(2, "}");
        }
        self.line(1, "}");
        self.elem_block = None;
        Ok(())
    }

    /// The row-varying values of phase `p`'s loop over a row, at element `r`:
    /// read from the row caches, or computed (and cached where a later phase
    /// reads them).
    fn row_elements(&mut self, depth: usize, p: usize, cache: &RowCache) -> Result<(), Error> {
        let k = self.k;
        for (id, _, _) in k.exprs.iter() {
            if cache.read_in[p].contains(&id) {
                let ty = compute_type(k.exprs.dtype(id));
                self.line(
                    depth,
                    &format!("const {ty} {} = row{}[r];", Renderer::var(id), id.0),
                );
            } else if cache.computed_in[p].contains(&id) {
                self.emit_expr(depth, id, false)?;
                if cache.stored_in.get(&id) == Some(&p) {
                    self.line(depth, &format!("row{}[r] = {};", id.0, Renderer::var(id)));
                }
            }
        }
        Ok(())
    }

    /// The update of reduction `i`'s accumulator `acc{i}{at}` (and, for a
    /// float max/min, its NaN flag `nan{i}{at}`) with this element's value.
    fn accumulate(&mut self, depth: usize, i: usize, at: &str) {
        self.accumulate_into(depth, i, &format!("acc{i}{at}"), &format!("nan{i}{at}"));
    }

    /// The update of reduction `i`'s accumulator `acc` (and, for a float
    /// max/min, its NaN flag `nan`) with this element's value.
    fn accumulate_into(&mut self, depth: usize, i: usize, acc: &str, nan: &str) {
        let red = &self.k.reductions[i];
        let ty = compute_type(red.acc_dtype);
        let v = format!("static_cast<{ty}>({})", self.renderer.operand(red.value));
        match red.kind {
            ReduceKind::Sum => self.line(depth, &format!("{acc} += {v};")),
            kind => {
                let cmp = if kind == ReduceKind::Max { ">" } else { "<" };
                self.line(depth, &format!("const {ty} v{i} = {v};"));
                self.line(depth, &format!("{acc} = v{i} {cmp} {acc} ? v{i} : {acc};"));
                if red.acc_dtype.is_float() {
                    self.line(depth, &format!("{nan} |= (v{i} != v{i});"));
                }
            }
        }
    }
}

/// Reduction `i`'s result from its accumulator `acc{i}{at}`: NaN where a
/// float max/min saw one (torch.amax/amin propagate it).
/// The block of `v` (rows, or row elements) to loop over in aligned blocks:
/// the largest power of two from 16 to `most` that the most accesses whose
/// index divides or wraps `v` step by one (or not at all) across
/// ([`Index::block_step`]); `None` when no such access gains from any.
fn aligned_block(k: &Kernel, v: Var, most: i64) -> Option<i64> {
    if most < 16 {
        return None;
    }
    let accesses: Vec<&Index> = k
        .exprs
        .iter()
        .filter_map(|(_, e, _)| match e {
            Expr::Load {
                index, indirect, ..
            } if indirect.is_empty() => Some(index),
            _ => None,
        })
        .chain(k.stores.iter().map(|s| &s.index))
        .filter(|i| i.uses(v) && !matches!(i.step_along(v), Some(0 | 1)))
        .collect();
    std::iter::successors(Some(1i64 << (63 - most.leading_zeros())), |b| {
        (*b > 16).then_some(b / 2)
    })
    .map(|b| {
        let steps = accesses
            .iter()
            .filter(|i| matches!(i.block_step(v, b), Some(0 | 1)))
            .count();
        (steps, b)
    })
    .max_by_key(|&(steps, b)| (steps, b))
    .and_then(|(steps, b)| (steps > 0).then_some(b))
}

/// `value`, a load of `stored` already in its compute type, cast to `ty`
/// where that differs.
fn as_compute_type(stored: DType, ty: &str, value: String) -> String {
    if compute_type(stored) == ty {
        value
    } else {
        format!("static_cast<{ty}>({value})")
    }
}

/// A loop extent or a size in C++: the integer, or the expression over the
/// kernel's `ks<id>` arguments.
fn extent(s: &Size) -> String {
    size_text(s, Syntax::C)
}

/// The largest value `s` takes over the program's symbols' ranges (`i64::MAX`
/// where unbounded): what a decision that must hold at every size reads.
fn most(s: &Size, program: &Program) -> i64 {
    s.as_const().unwrap_or_else(|| {
        let (_, hi) = s.bounds(&program.symbols);
        i64::try_from(hi).unwrap_or(i64::MAX)
    })
}

/// The size symbols a kernel's function takes (`const int64_t ks<id>`), sorted:
/// those its indexes, guards and loop extents read.
fn kernel_symbols(k: &Kernel) -> Vec<crate::graph::sym::SymId> {
    let mut out = k.symbols();
    for s in [&k.space.x, &k.space.r, &k.space.inner] {
        out.extend(s.symbols());
    }
    out.sort();
    out.dedup();
    out
}

/// The tiles of [`Writer::tiled_body`] ([`crate::schedule::tile::CPP_TILE`]).
const TILE: i64 = crate::schedule::tile::CPP_TILE;

/// Whether some access of a pointwise kernel split into rows steps by one from
/// row to row but not along the row (the read of a transpose): such a kernel
/// runs on tiles ([`Writer::tiled_body`]), not row by row.
fn reads_across_rows(k: &Kernel) -> bool {
    let loads = k.exprs.iter().filter_map(|(_, e, _)| match e {
        Expr::Load {
            index, indirect, ..
        } if indirect.is_empty() => Some(index),
        _ => None,
    });
    let stores = k.stores.iter().map(|s| &s.index);
    loads.chain(stores).any(|index| {
        let walk = k.space.access(index, 1);
        walk.unit_across_rows && !walk.unit_along_row && index.uses(Var::R)
    })
}

fn finished(red: &crate::schedule::ir::Reduction, i: usize, at: &str) -> String {
    if lanes::tracks_nan(red) {
        let ty = compute_type(red.acc_dtype);
        format!("(nan{i}{at} ? std::numeric_limits<{ty}>::quiet_NaN() : acc{i}{at})")
    } else {
        format!("acc{i}{at}")
    }
}

/// How a reduction kernel's values fall into phases over a row (as the
/// loop-IR evaluator, `schedule/eval.rs`, orders them): phase 0 needs no
/// reduction result, phase p + 1 needs one finished in phase p.
struct RowPhases {
    /// Per expression: whether it varies along the row.
    uses_r: IdVec<ExprId, bool>,
    /// Per expression: its phase.
    phase: IdVec<ExprId, usize>,
    /// Per reduction: the phase of the loop that accumulates it.
    red_phase: Vec<usize>,
    /// Per phase: the reductions accumulated and the stores varying along the
    /// row made in its loop over the row.
    loops: Vec<(Vec<usize>, Vec<Store>)>,
    /// Per phase: the stores constant along the row (one per row).
    fixed: Vec<Vec<Store>>,
}

impl RowPhases {
    fn of(k: &Kernel) -> RowPhases {
        let (uses_r, phase) = k.phases();
        let red_phase: Vec<usize> = k.reductions.iter().map(|r| phase[r.value]).collect();
        let last = red_phase
            .iter()
            .copied()
            .chain(k.stores.iter().map(|s| phase[s.value]))
            .max()
            .unwrap_or(0);
        // A store varies along the row when its value or its index does (as in eval.rs).
        let varies = |s: &Store| uses_r[s.value] || s.index.uses(Var::R);
        let stores_of = |p: usize, varying: bool| -> Vec<Store> {
            k.stores
                .iter()
                .filter(|s| phase[s.value] == p && varies(s) == varying)
                .cloned()
                .collect()
        };
        let loops = (0..=last + 1)
            .map(|p| {
                let reds = (0..red_phase.len())
                    .filter(|i| red_phase[*i] == p)
                    .collect();
                (reds, stores_of(p, true))
            })
            .collect();
        let fixed = (0..=last + 1).map(|p| stores_of(p, false)).collect();
        RowPhases {
            uses_r,
            phase,
            red_phase,
            loops,
            fixed,
        }
    }
}

/// Bytes of row cache one C++ reduction row may keep (on the stack of the
/// thread running it): a softmax row of up to 16 Ki float32 values.
const ROW_CACHE_BYTES: i64 = 64 << 10;

/// Which values varying along the row a C++ reduction computes once and keeps
/// for a later loop over the same row, instead of computing them again: the
/// expensive ones (a transcendental function or a division, [`cost`]), when
/// the row fits [`ROW_CACHE_BYTES`]. Softmax's `exp(x - max)` is computed in
/// the loop that sums it and read back by the loop that divides it.
struct RowCache {
    /// Per loop (phase): the varying expressions it computes.
    computed_in: Vec<std::collections::HashSet<ExprId>>,
    /// Per loop: the cached expressions it reads back.
    read_in: Vec<std::collections::HashSet<ExprId>>,
    /// Cached expressions, by the loop that computes and stores them.
    stored_in: HashMap<ExprId, usize>,
}

impl RowCache {
    /// Drops every value not in `needed`.
    fn keep_only(&mut self, needed: &HashSet<ExprId>) {
        for set in self.computed_in.iter_mut().chain(self.read_in.iter_mut()) {
            set.retain(|id| needed.contains(id));
        }
        self.stored_in.retain(|id, _| needed.contains(id));
    }

    fn plan(
        k: &Kernel,
        uses_r: &IdVec<ExprId, bool>,
        row: i64,
        loops: &[(Vec<usize>, Vec<Store>)],
    ) -> RowCache {
        use std::collections::HashSet;
        let mut plan = RowCache {
            computed_in: Vec::new(),
            read_in: Vec::new(),
            stored_in: HashMap::new(),
        };
        let mut costs = HashMap::new();
        let mut budget = ROW_CACHE_BYTES;
        // Where each varying expression was first computed.
        let mut first: HashMap<ExprId, usize> = HashMap::new();
        for (p, (reds, stores)) in loops.iter().enumerate() {
            let mut stack: Vec<ExprId> = reds.iter().map(|i| k.reductions[*i].value).collect();
            stack.extend(stores.iter().map(|s| s.value));
            let (mut computed, mut read) = (HashSet::new(), HashSet::new());
            while let Some(e) = stack.pop() {
                if !uses_r[e] || computed.contains(&e) || read.contains(&e) {
                    continue;
                }
                if plan.stored_in.contains_key(&e) {
                    read.insert(e);
                    continue;
                }
                if let Some(&at) = first.get(&e) {
                    let bytes = row.saturating_mul(k.exprs.dtype(e).size_bytes() as i64);
                    if cost(k, e, uses_r, &mut costs) >= EXPENSIVE && bytes <= budget {
                        budget -= bytes;
                        plan.stored_in.insert(e, at);
                        read.insert(e);
                        continue;
                    }
                }
                computed.insert(e);
                stack.extend(k.exprs.operands(e));
            }
            for &e in &computed {
                first.entry(e).or_insert(p);
            }
            plan.computed_in.push(computed);
            plan.read_in.push(read);
        }
        plan
    }
}

/// What computing an expression again costs that reading it back does not:
/// transcendental functions and divisions count [`EXPENSIVE`], other
/// arithmetic 1, loads and values constant along the row nothing.
const EXPENSIVE: u32 = 8;

fn cost(
    k: &Kernel,
    e: ExprId,
    uses_r: &IdVec<ExprId, bool>,
    memo: &mut HashMap<ExprId, u32>,
) -> u32 {
    use crate::graph::ops::{BinaryOp, UnaryOp};
    if let Some(&c) = memo.get(&e) {
        return c;
    }
    let own = match k.exprs.get(e) {
        Expr::Load { .. } | Expr::Literal(_) | Expr::Reduced(_) => 0,
        Expr::Unary(UnaryOp::Abs | UnaryOp::Neg | UnaryOp::Relu, _) => 1,
        Expr::Unary(..) => EXPENSIVE,
        Expr::Binary(
            BinaryOp::Div
            | BinaryOp::DivTrunc
            | BinaryOp::DivFloor
            | BinaryOp::Pow
            | BinaryOp::Atan2
            | BinaryOp::Hypot,
            ..,
        ) => EXPENSIVE,
        _ => 1,
    };
    let total = if matches!(k.exprs.get(e), Expr::Load { .. }) {
        0
    } else {
        k.exprs
            .operands(e)
            .into_iter()
            .filter(|o| uses_r[*o])
            .fold(own, |acc, o| acc.saturating_add(cost(k, o, uses_r, memo)))
    };
    memo.insert(e, total);
    total
}

/// Rows an outer reduction ([`Writer::outer_body`]) takes at a time: one
/// accumulator each, 4 KiB of float32 per reduction.
const OUTER_BLOCK: i64 = 1024;
/// Rows a block of short rows takes at a time (staged in tiles of at most
/// 63 elements a row: 63 KiB of float32).
const SHORT_ROW_BLOCK: i64 = 256;
