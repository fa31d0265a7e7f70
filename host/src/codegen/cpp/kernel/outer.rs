//! Outer reductions ([`Writer::outer_body`]): reductions whose loads step by one
//! from row to row (`x.sum(0)`), written a block of rows at a time so that every
//! access steps through memory by one, and blocks of short rows staged in local
//! tiles.

use std::collections::HashSet;

use super::super::expr::{compute_type, neutral, storage_type};
use super::{
    aligned_block, finished, lanes::tracks_nan, Error, RowPhases, Writer, OUTER_BLOCK,
    SHORT_ROW_BLOCK,
};
use crate::graph::dtype::DType;
use crate::schedule::index::{Index, Var};
use crate::schedule::ir::{BufferId, Expr, ExprId};

/// A staged store: its buffer and index, the buffer's pointer and the tile.
type StagedStore = (BufferId, Index, String, String);

impl Writer<'_> {
    /// A reduction whose loads step by one from row to row (`x.sum(0)`):
    /// rows are taken [`OUTER_BLOCK`] at a time, and each loop over the row
    /// elements runs, for every element, an `omp simd` loop across the block
    /// of rows, with one accumulator per row of the block. Every access then
    /// steps through memory by one, where a loop along each row would stride.
    pub(super) fn outer_body(&mut self, chunk: u32, stage: bool) -> Result<(), Error> {
        let k = self.k;
        let rows = RowPhases::of(k);
        let needed = self.needed();
        let x = k.space.x_hint();
        let block = self.outer_block(chunk, stage);
        let it = self.index_type();
        // The block loop counts in the index type where the last block's end
        // still fits it: a row index computed as `xb + xi` in `int32_t` is
        // affine to the compiler, while one truncated from `int64_t` is not,
        // and GCC gathers it element by element (a sum over the first dim of
        // [16, 32, 64, 128] ran 6x slower on two Zen 4 cores).
        let bt = if it == "int32_t" && x.saturating_add(block) < (1 << 31) {
            "int32_t"
        } else {
            "int64_t"
        };
        self.block_type = bt;
        self.line(1, "#pragma omp parallel for schedule(static)");
        self.line(1, &format!("for ({bt} xb = 0; xb < {x}; xb += {block}) {{"));
        self.line(
            2,
            &format!("const {bt} xn = std::min<{bt}>({block}, {x} - xb);"),
        );
        if self.row_block.is_some() {
            self.line(
                2,
                &format!("[[maybe_unused]] const {it} xs = static_cast<{it}>(xb);"),
            );
        }
        let staged_stores = if stage {
            self.stage_block = block;
            self.stage_rows(block)?
        } else {
            Vec::new()
        };
        for (i, red) in k.reductions.iter().enumerate() {
            let ty = compute_type(red.acc_dtype);
            self.line(2, &format!("{ty} acc{i}[{block}];"));
            self.line(2, &format!("{ty} red{i}v[{block}];"));
            if tracks_nan(red) {
                self.line(2, &format!("int nan{i}[{block}];"));
            }
        }
        for p in 0..rows.loops.len() {
            self.outer_phase(p, &rows, &needed, &staged_stores)?;
        }
        self.line(1, "}");
        self.row_block = None;
        self.staged.clear();
        Ok(())
    }

    /// The rows an outer reduction takes at a time: blocks of whole vectors, no
    /// more than a chunk's worth of rows, so that every thread gets a block.
    /// Where rows are a view's flattened dims (`x / 512`, `x % 512`), a block
    /// aligned to their period reads whole runs (and is kept in `row_block`).
    /// Short rows staged in tiles take fewer at a time (a tile of 256 rows of up
    /// to 63 elements stays in L1 and L2).
    fn outer_block(&mut self, chunk: u32, stage: bool) -> i64 {
        let x = self.k.space.x_hint();
        let block = ((i64::from(chunk) + 15) / 16)
            .saturating_mul(16)
            .clamp(16, OUTER_BLOCK)
            .min(x.max(1));
        if stage {
            return block.min(SHORT_ROW_BLOCK);
        }
        match aligned_block(self.k, Var::X, block) {
            Some(b) => {
                self.row_block = Some(b);
                b
            }
            None => block,
        }
    }

    /// The `omp simd` pragma of the loops across a block of rows, where every
    /// accumulator may be vectorised (none is of `bool`).
    fn outer_simd(&self) -> &'static str {
        let simd_ok = self
            .k
            .reductions
            .iter()
            .all(|red| red.acc_dtype != DType::Bool);
        if simd_ok {
            "#pragma omp simd"
        } else {
            ""
        }
    }

    /// Phase `p` of a block of rows: the reductions finished in the phase
    /// before, the stores constant along the row, and the loop over the row's
    /// elements with its reductions and stores.
    fn outer_phase(
        &mut self,
        p: usize,
        rows: &RowPhases,
        needed: &HashSet<ExprId>,
        staged_stores: &[StagedStore],
    ) -> Result<(), Error> {
        let k = self.k;
        let (it, bt, r) = (self.index_type(), self.block_type, k.space.r_hint());
        let simd = self.outer_simd();
        let (reds, stores) = &rows.loops[p];
        if p > 0 {
            let done: Vec<usize> = (0..rows.red_phase.len())
                .filter(|i| rows.red_phase[*i] == p - 1)
                .collect();
            if !done.is_empty() {
                self.line(2, simd);
                self.line(2, &format!("for ({bt} xi = 0; xi < xn; ++xi) {{"));
                for i in done {
                    let value = finished(&k.reductions[i], i, "[xi]");
                    self.line(3, &format!("red{i}v[xi] = {value};"));
                }
                self.line(2, "}");
            }
        }
        if !rows.fixed[p].is_empty() {
            self.line(2, simd);
            self.line(2, &format!("for ({bt} xi = 0; xi < xn; ++xi) {{"));
            self.outer_prologue(p, 3, rows, needed)?;
            for s in &rows.fixed[p] {
                self.store_line(3, s, false)?;
            }
            self.line(2, "}");
        }
        if reds.is_empty() && stores.is_empty() {
            return Ok(());
        }
        if !reds.is_empty() {
            self.line(2, simd);
            self.line(2, &format!("for ({bt} xi = 0; xi < xn; ++xi) {{"));
            for &i in reds {
                let red = &k.reductions[i];
                self.line(
                    3,
                    &format!("acc{i}[xi] = {};", neutral(red.kind, red.acc_dtype)),
                );
                if tracks_nan(red) {
                    self.line(3, &format!("nan{i}[xi] = 0;"));
                }
            }
            self.line(2, "}");
        }
        self.line(2, &format!("for ({it} r = 0; r < {r}; ++r) {{"));
        self.line(3, simd);
        self.line(3, &format!("for ({bt} xi = 0; xi < xn; ++xi) {{"));
        self.outer_prologue(p, 4, rows, needed)?;
        let mut roots: Vec<ExprId> = reds.iter().map(|i| k.reductions[*i].value).collect();
        roots.extend(stores.iter().map(|s| s.value));
        let wanted = k.varying_closure(&roots, &rows.uses_r);
        for (id, _, _) in k.exprs.iter() {
            if rows.uses_r[id] && wanted.contains(&id) {
                self.emit_expr(4, id, false)?;
            }
        }
        for &i in reds {
            self.accumulate(4, i, "[xi]");
        }
        for s in stores {
            self.store_line(4, s, false)?;
        }
        self.line(3, "}");
        self.line(2, "}");
        // Staged results go out to their rows after the loop that makes them.
        for s in stores {
            if let Some((ptr, tile)) = staged_stores
                .iter()
                .find(|(b, i, _, _)| *b == s.buf && *i == s.index)
                .map(|(_, _, ptr, tile)| (ptr.clone(), tile.clone()))
            {
                self.stage_copy(2, &ptr, &s.index, &tile, false);
            }
        }
        Ok(())
    }

    /// Inside a loop over `xi`: the row index, the reductions finished before
    /// phase `p` and the values constant along the row.
    fn outer_prologue(
        &mut self,
        p: usize,
        depth: usize,
        rows: &RowPhases,
        needed: &HashSet<ExprId>,
    ) -> Result<(), Error> {
        let k = self.k;
        let (it, bt) = (self.index_type(), self.block_type);
        self.line(
            depth,
            &if bt == it {
                format!("[[maybe_unused]] const {it} x = xb + xi;")
            } else {
                format!("[[maybe_unused]] const {it} x = static_cast<{it}>(xb + xi);")
            },
        );
        for (i, _) in rows.red_phase.iter().enumerate().filter(|(_, l)| **l < p) {
            let ty = compute_type(k.reductions[i].acc_dtype);
            self.line(
                depth,
                &format!("[[maybe_unused]] const {ty} red{i} = red{i}v[xi];"),
            );
        }
        for (id, _, _) in k.exprs.iter() {
            if rows.phase[id] <= p && !rows.uses_r[id] && needed.contains(&id) {
                self.emit_expr(depth, id, false)?;
            }
        }
        Ok(())
    }

    /// Declares the tiles of a block of short rows and stages its loads: each
    /// load (without guards or a gathered index, not of `bool`) and store of a
    /// row-varying value whose index steps by one along the row and by the
    /// row's length from row to row (the block's rows one contiguous run), of
    /// a buffer the kernel does not both read and write. Returns the staged
    /// stores (buffer, index, pointer, tile).
    fn stage_rows(&mut self, block: i64) -> Result<Vec<StagedStore>, Error> {
        let k = self.k;
        let r = k.space.r_hint();
        let contiguous = |index: &Index| {
            index.step_along(Var::R) == Some(1) && index.step_along(Var::X) == Some(r)
        };
        let stored: Vec<BufferId> = k.stores.iter().map(|s| s.buf).collect();
        let mut loads: Vec<(BufferId, Index)> = Vec::new();
        for (id, _, _) in k.exprs.iter() {
            if let Expr::Load {
                buf,
                index,
                guards,
                indirect,
            } = k.exprs.get(id)
            {
                let plain = guards.is_empty() && indirect.is_empty();
                if plain
                    && contiguous(index)
                    && self.program.buffer(*buf).dtype != DType::Bool
                    && !stored.contains(buf)
                    && !loads.iter().any(|(b, i)| b == buf && i == index)
                {
                    loads.push((*buf, index.clone()));
                }
            }
        }
        let read: Vec<BufferId> = loads.iter().map(|(b, _)| *b).collect();
        let mut stores: Vec<(BufferId, Index)> = Vec::new();
        for st in &k.stores {
            if contiguous(&st.index)
                && self.program.buffer(st.buf).dtype != DType::Bool
                && !read.contains(&st.buf)
                && !stores.iter().any(|(b, i)| *b == st.buf && *i == st.index)
            {
                stores.push((st.buf, st.index.clone()));
            }
        }
        let mut out = Vec::new();
        for (n, (buf, index)) in loads.into_iter().enumerate() {
            let (ptr, tile) = (self.ptr(buf)?, format!("stage{n}"));
            let ty = storage_type(self.program.buffer(buf).dtype);
            self.line(2, &format!("alignas(64) {ty} {tile}[{}];", r * block));
            self.stage_copy(2, &ptr, &index, &tile, true);
            self.staged.push((buf, index, tile));
        }
        for (n, (buf, index)) in stores.into_iter().enumerate() {
            let (ptr, tile) = (self.ptr(buf)?, format!("staged_out{n}"));
            let ty = storage_type(self.program.buffer(buf).dtype);
            self.line(2, &format!("alignas(64) {ty} {tile}[{}];", r * block));
            self.staged.push((buf, index.clone(), tile.clone()));
            out.push((buf, index, ptr, tile));
        }
        Ok(out)
    }
}
