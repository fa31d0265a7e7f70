//! Building a kernel's expressions: scheduler nodes instantiated in a kernel's
//! iteration space, with inline values recomputed from their operands, views
//! turned into index arithmetic, and reductions of the same kernel read from
//! registers.
//!
//! Building is also the legality check of fusion: a node whose values cannot
//! be expressed in the kernel's space (a reduction read at another row, a
//! shape that does not split into the kernel's `x` and `r`) makes
//! [`KernelBuilder::add`] fail, and the scheduler puts it elsewhere.

use std::collections::HashMap;

use super::index::{contiguous_sizes, hints, linear, product, sizes, unflatten, Index, Size, Var};
use super::ir::{
    Cond, Expr, ExprArena, ExprId, Indirect, Literal, ReduceKind, Reduction, Space, Store,
};
use super::lower::{compute_dtype, Def, Lowered, SKind, SNodeId};
use crate::graph::dtype::{promote, DType};
use crate::graph::infer::model::index_plan;
use crate::graph::ir::{Arg, Graph, Scalar, ValueId};
use crate::graph::ops::{BinaryOp, GeluApprox, Op, UnaryOp};
use crate::graph::shape::wrap_dim;
use crate::graph::views::{self, InDim, IndexMap};

/// Why a node cannot join a kernel (not an error: the scheduler tries elsewhere).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Illegal(pub String);

type Built<T> = Result<T, Illegal>;

/// The index over `shape` of a node placed in `space`, if its shape splits
/// into the kernel's rows and reduction elements, or is one value per row. Sizes
/// may be symbolic: counts match only as the same expression.
pub fn space_index(shape: &[Size], space: &Space) -> Option<Vec<Index>> {
    let ranges = space.ranges();
    let numel = product(shape);
    // One value per row (an epilogue of the kernel's reductions) or per element.
    if numel == space.x {
        return Some(unflatten(Index::var(Var::X), shape, &ranges));
    }
    if numel != space.x.mul(&space.r).ok()? {
        return None;
    }
    if space.inner != 1 {
        // Reduced elements between outer and inner ones: the flat position of
        // row (o, i)'s element r is (o * r_total + r) * inner + i.
        space.x.exact_div(&space.inner)?;
        let (o, i) = (
            Index::var(Var::X).div(space.inner.clone(), &ranges),
            Index::var(Var::X).rem(space.inner.clone(), &ranges),
        );
        let flat = o
            .times(space.r.mul(&space.inner).ok()?)
            .plus(Index::var(Var::R).times(space.inner.clone()))
            .plus(i);
        return Some(unflatten(flat, shape, &ranges));
    }
    rows_then_elements(shape, &space.x, Index::var(Var::X), &ranges)
}

/// The index over `shape` whose leading dims make `rows` rows, at row `row`, and
/// whose other dims are the row's elements, at the kernel's `r`; None where no
/// leading dims multiply to `rows`.
fn rows_then_elements(
    shape: &[Size],
    rows: &Size,
    row: Index,
    ranges: &super::index::Ranges,
) -> Option<Vec<Index>> {
    let mut prefix = Size::from(1);
    for k in 0..=shape.len() {
        if prefix == *rows {
            let mut idx = unflatten(row, &shape[..k], ranges);
            idx.extend(unflatten(Index::var(Var::R), &shape[k..], ranges));
            return Some(idx);
        }
        if k < shape.len() {
            prefix = prefix.mul(&shape[k]).ok()?;
        }
    }
    None
}

/// Where a node of `rows` rows, each reduced over the same elements as the
/// kernel's, is broadcast across the kernel's rows: the kernel's row `x`
/// computes its row `x / divisor` (a layer norm's statistics over one token,
/// read by every output column of a one-row product, `passes::few_rows`).
/// Each of its rows is then computed `divisor` times, once per kernel row.
pub fn broadcast_rows(rows: &Size, space: &Space) -> Option<i64> {
    let (rows, space) = (rows.as_const()?, space.fixed()?);
    (space.r > 1 && space.inner == 1 && rows > 0 && rows < space.x && space.x % rows == 0)
        .then(|| space.x / rows)
}

/// The natural space of a scheduler node.
pub fn natural_space(low: &Lowered, graph: &Graph, id: SNodeId) -> Option<Space> {
    let s = &low.snodes[id];
    match &s.kind {
        SKind::Pointwise { .. } | SKind::Scatter { .. } => {
            Some(Space::rows(product(&s.meta.shape), 1))
        }
        SKind::Reduction { input, dims, .. } => {
            let shape = &graph.meta(*input)?.shape;
            let reduced: Vec<Size> = dims
                .iter()
                .map(|&d| shape.get(d).cloned())
                .collect::<Option<_>>()?;
            let r = product(&reduced);
            let x = if r == 0 {
                product(shape)
            } else {
                product(shape).exact_div(&r)?
            };
            Some(Space {
                x,
                r,
                inner: reduction_inner(shape, dims),
            })
        }
        SKind::Extern { .. } => None,
    }
}

/// A reduction's [`Space::inner`]: the elements after its reduced dims when
/// those are one run of consecutive dims (`[b, n, c]` over dim 1: `c`), else 1
/// (its rows are then not a layout a full-size value of the kernel can share).
fn reduction_inner(shape: &[Size], dims: &[usize]) -> Size {
    let mut sorted: Vec<usize> = dims.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let (Some(&first), Some(&last)) = (sorted.first(), sorted.last()) else {
        return Size::from(1);
    };
    if last - first + 1 != sorted.len() || last >= shape.len() {
        return Size::from(1);
    }
    let inner = product(&shape[last + 1..]);
    match inner.as_const() {
        Some(c) => Size::from(c.max(1)),
        None => inner,
    }
}

/// Builds one kernel.
pub struct KernelBuilder<'a> {
    graph: &'a Graph,
    low: &'a Lowered,
    space: Space,
    /// Members of this kernel: their reduction number, if a reduction.
    members: HashMap<SNodeId, Option<usize>>,
    /// The members whose rows are the kernel's rows divided by this much
    /// ([`broadcast_rows`]); the others' rows are the kernel's.
    divisors: HashMap<SNodeId, i64>,
    /// The arena of the kernel's values.
    pub exprs: ExprArena,
    /// The kernel's reductions.
    pub reductions: Vec<Reduction>,
    /// Candidate stores: one per member, kept when its value is needed in memory.
    pub stores: Vec<(SNodeId, Store)>,
    /// Scheduler nodes of other kernels whose buffers this kernel reads.
    pub external: Vec<SNodeId>,
    /// Graph nodes whose values this kernel computes (inline ones included).
    pub covers: Vec<crate::graph::ir::NodeId>,
    guards: Vec<Cond>,
    memo: HashMap<(ValueId, Vec<Index>, Vec<Cond>), ExprId>,
}

impl<'a> KernelBuilder<'a> {
    /// An empty kernel over `space`.
    pub fn new(graph: &'a Graph, low: &'a Lowered, space: Space) -> Self {
        KernelBuilder {
            graph,
            low,
            space,
            members: HashMap::new(),
            divisors: HashMap::new(),
            exprs: ExprArena::default(),
            reductions: Vec::new(),
            stores: Vec::new(),
            external: Vec::new(),
            covers: Vec::new(),
            guards: Vec::new(),
            memo: HashMap::new(),
        }
    }

    /// Adds a scheduler node; fails when it cannot live in this kernel.
    pub fn add(&mut self, id: SNodeId) -> Built<()> {
        let s = &self.low.snodes[id];
        let ranges = self.space.ranges();
        if !self.covers.contains(&s.value.node) {
            self.covers.push(s.value.node);
        }
        match &s.kind {
            SKind::Pointwise { value } => {
                let idx = match space_index(&s.meta.shape, &self.space) {
                    Some(idx) => idx,
                    None => self.broadcast_index(id, &s.meta.shape)?,
                };
                self.members.insert(id, None);
                let e = self.inline_value(*value, &idx)?;
                let e = self.cast(e, s.meta.dtype);
                let index = linear(&idx, &contiguous_sizes(&s.meta.shape), 0);
                self.stores.push((
                    id,
                    Store {
                        buf: s.buf,
                        index,
                        value: e,
                        indirect: vec![],
                        guards: vec![],
                    },
                ));
            }
            SKind::Reduction {
                input, kind, dims, ..
            } => {
                let in_shape = self.meta(*input)?.shape;
                let kept: Vec<Size> = (0..in_shape.len())
                    .filter(|d| !dims.contains(d))
                    .map(|d| in_shape[d].clone())
                    .collect();
                let reduced: Vec<Size> = dims
                    .iter()
                    .map(|&d| in_shape.get(d).cloned())
                    .collect::<Option<_>>()
                    .ok_or_else(|| Illegal("a reduced dim out of range".into()))?;
                let rows = product(&kept);
                let inner = reduction_inner(&in_shape, dims);
                let divisor = broadcast_rows(&rows, &self.space)
                    .filter(|_| inner == 1 && product(&reduced) == self.space.r);
                if let Some(divisor) = divisor {
                    self.divisors.insert(id, divisor);
                } else if rows != self.space.x
                    || product(&reduced) != self.space.r
                    || inner != self.space.inner
                {
                    return Err(Illegal(format!(
                        "reduction space differs from {:?}",
                        self.space
                    )));
                }
                let xs = unflatten(self.row_of(id), &kept, &ranges);
                let rs = unflatten(Index::var(Var::R), &reduced, &ranges);
                let (mut xi, mut ri) = (xs.into_iter(), rs.into_iter());
                let idx: Vec<Index> = (0..in_shape.len())
                    .map(|d| {
                        if dims.contains(&d) {
                            ri.next()
                        } else {
                            xi.next()
                        }
                        .unwrap_or(Index::constant(0))
                    })
                    .collect();
                let value = self.load(*input, &idx)?;
                let in_dtype = self.exprs.dtype(value);
                // PyTorch's accumulation: floats in (at least) float32, integer
                // and boolean sums in int64, max/min in the input's dtype.
                let acc_dtype = if s.meta.dtype.is_float() {
                    compute_dtype(s.meta.dtype)
                } else if *kind == ReduceKind::Sum {
                    DType::Int64
                } else {
                    in_dtype
                };
                let value = self.cast(value, acc_dtype);
                let n = self.reductions.len();
                self.reductions.push(Reduction {
                    kind: *kind,
                    value,
                    acc_dtype,
                });
                self.members.insert(id, Some(n));
                let e = self.reduced_value(id)?;
                let e = self.cast(e, s.meta.dtype);
                let out_idx = unflatten(self.row_of(id), &s.meta.shape, &ranges);
                let index = linear(&out_idx, &contiguous_sizes(&s.meta.shape), 0);
                self.stores.push((
                    id,
                    Store {
                        buf: s.buf,
                        index,
                        value: e,
                        indirect: vec![],
                        guards: vec![],
                    },
                ));
            }
            SKind::Scatter {
                source,
                index,
                dim,
                target,
            } => {
                let store = self.scatter(s, *source, *index, *dim, target)?;
                self.members.insert(id, None);
                self.stores.push((id, store));
            }
            SKind::Extern { .. } => return Err(Illegal("extern calls are not kernels".into())),
        }
        Ok(())
    }

    /// The row of member `id` that the kernel's row computes: the kernel's own, or
    /// that divided by the member's divisor.
    fn row_of(&self, id: SNodeId) -> Index {
        match self.divisors.get(&id) {
            Some(&d) => Index::var(Var::X).div(d, &self.space.ranges()),
            None => Index::var(Var::X),
        }
    }

    /// The index of a pointwise member of `shape` whose rows are broadcast across
    /// the kernel's ([`broadcast_rows`]): its row elements are the kernel's, its
    /// rows the kernel's divided.
    fn broadcast_index(&mut self, id: SNodeId, shape: &[Size]) -> Built<Vec<Index>> {
        let r = match self.space.r.as_const() {
            Some(r) => Size::from(r.max(1)),
            None => self.space.r.clone(),
        };
        let rows = product(shape).exact_div(&r);
        let divisor = rows
            .as_ref()
            .and_then(|rows| broadcast_rows(rows, &self.space))
            .ok_or_else(|| {
                Illegal(format!(
                    "shape {shape:?} does not split into {:?}",
                    self.space
                ))
            })?;
        let row = Index::var(Var::X).div(divisor, &self.space.ranges());
        let rows = rows.unwrap_or_default();
        let idx = rows_then_elements(shape, &rows, row, &self.space.ranges())
            .ok_or_else(|| Illegal(format!("shape {shape:?} has no rows of {r}")))?;
        self.divisors.insert(id, divisor);
        Ok(idx)
    }

    /// The store of `index_copy`'s source into `target` at the index along `dim`:
    /// over the source's elements, in a pointwise kernel, or in a reduction kernel
    /// one element a row (an epilogue of its reductions: a KV cache's write of the
    /// key or value a one-row product computes). Its stores land at data-dependent
    /// places, which no reader in the same kernel could follow: its readers come in
    /// a later kernel (`fuse::push_buffer`).
    fn scatter(
        &mut self,
        s: &super::lower::SNode,
        source: ValueId,
        index: ValueId,
        dim: usize,
        target: &super::ir::View,
    ) -> Built<Store> {
        if self.space.is_reduction() && product(&s.meta.shape) != self.space.x {
            return Err(Illegal(
                "a scatter joins a reduction kernel only as one element a row".into(),
            ));
        }
        let idx = space_index(&s.meta.shape, &self.space).ok_or_else(|| {
            Illegal(format!(
                "shape {:?} does not split into {:?}",
                s.meta.shape, self.space
            ))
        })?;
        let value = self.load(source, &idx)?;
        let value = self.cast(value, self.low.buffers[target.buf].dtype);
        let at = match self.meta(index)?.rank() {
            0 => self.load(index, &[])?,
            _ => self.load(index, &idx[dim..=dim])?,
        };
        let mut fixed = idx;
        fixed[dim] = Index::constant(0);
        Ok(Store {
            buf: target.buf,
            index: linear(&fixed, &target.strides, target.offset.clone()),
            value,
            indirect: vec![Indirect {
                value: at,
                size: target.shape[dim].clone(),
                stride: target.strides[dim].clone(),
                // PyTorch's index_copy refuses a negative index.
                nonnegative: true,
            }],
            guards: vec![],
        })
    }

    fn meta(&self, v: ValueId) -> Built<crate::graph::ir::TensorMeta> {
        self.graph
            .meta(v)
            .cloned()
            .ok_or_else(|| Illegal(format!("no metadata for {v:?}")))
    }

    fn lit(&mut self, value: f64, dtype: DType) -> ExprId {
        self.exprs
            .intern(Expr::Literal(Literal::of(value, dtype)), dtype)
    }

    /// `e` converted to `dtype` (nothing when it already is).
    pub fn cast(&mut self, e: ExprId, dtype: DType) -> ExprId {
        if self.exprs.dtype(e) == dtype {
            return e;
        }
        // Narrowing back what an exact widening produced is the original.
        if let Expr::Cast(inner) = self.exprs.get(e) {
            let (from, via) = (self.exprs.dtype(*inner), self.exprs.dtype(e));
            if from == dtype && widens_exactly(from, via) {
                return *inner;
            }
        }
        self.exprs.intern(Expr::Cast(e), dtype)
    }

    fn reduced_value(&mut self, id: SNodeId) -> Built<ExprId> {
        let Some(Some(n)) = self.members.get(&id).copied() else {
            return Err(Illegal("not a reduction of this kernel".into()));
        };
        let acc = self.reductions[n].acc_dtype;
        let e = self.exprs.intern(Expr::Reduced(n), acc);
        if let SKind::Reduction {
            divisor: Some(d), ..
        } = &self.low.snodes[id].kind
        {
            let d = self.lit(*d as f64, acc);
            return Ok(self.exprs.intern(Expr::Binary(BinaryOp::Div, e, d), acc));
        }
        Ok(e)
    }

    /// The value `v` at `idx` (one index per dim of `v`).
    pub fn load(&mut self, v: ValueId, idx: &[Index]) -> Built<ExprId> {
        let key = (v, idx.to_vec(), self.guards.clone());
        if let Some(e) = self.memo.get(&key) {
            return Ok(*e);
        }
        let def = self
            .low
            .defs
            .get(&v)
            .cloned()
            .ok_or_else(|| Illegal(format!("{v:?} was not lowered")))?;
        let meta = self.meta(v)?;
        let e = match def {
            Def::Literal { value } => self.lit(value, compute_dtype(meta.dtype)),
            Def::Strided(view) => {
                let index = linear(idx, &view.strides, view.offset);
                let dtype = self.low.buffers[view.buf].dtype;
                let e = self.exprs.intern(
                    Expr::Load {
                        buf: view.buf,
                        index,
                        guards: self.guards.clone(),
                        indirect: vec![],
                    },
                    dtype,
                );
                if let Some(owner) = self.low.snodes.position(|s| s.buf == view.buf) {
                    if !self.external.contains(&owner) {
                        self.external.push(owner);
                    }
                }
                self.cast(e, compute_dtype(dtype))
            }
            Def::Node(n) => match self.members.get(&n).copied() {
                Some(Some(_)) => {
                    let s = &self.low.snodes[n];
                    let expected = unflatten(self.row_of(n), &s.meta.shape, &self.space.ranges());
                    if idx != expected.as_slice() {
                        return Err(Illegal(
                            "a reduction is read at another row than the kernel's".into(),
                        ));
                    }
                    self.reduced_value(n)?
                }
                Some(None) => {
                    let value = match &self.low.snodes[n].kind {
                        SKind::Pointwise { value } => *value,
                        _ => return Err(Illegal("not a pointwise member".into())),
                    };
                    let e = self.inline_value(value, idx)?;
                    self.cast(e, compute_dtype(meta.dtype))
                }
                None => {
                    let s = &self.low.snodes[n];
                    let index = linear(idx, &contiguous_sizes(&s.meta.shape), 0);
                    let e = self.exprs.intern(
                        Expr::Load {
                            buf: s.buf,
                            index,
                            guards: self.guards.clone(),
                            indirect: vec![],
                        },
                        s.meta.dtype,
                    );
                    if !self.external.contains(&n) {
                        self.external.push(n);
                    }
                    self.cast(e, compute_dtype(s.meta.dtype))
                }
            },
            Def::Inline { .. } => self.inline_value(v, idx)?,
        };
        self.memo.insert(key, e);
        Ok(e)
    }

    fn operand(
        &mut self,
        arg: &Arg,
        out_shape: &[Size],
        idx: &[Index],
        dtype: DType,
    ) -> Built<ExprId> {
        match arg {
            Arg::Scalar(s) => Ok(self.lit(s.to_f64(), dtype)),
            Arg::Value(v) => {
                let shape = self.meta(*v)?.shape;
                let lead = out_shape.len().saturating_sub(shape.len());
                let sub: Vec<Index> = shape
                    .iter()
                    .enumerate()
                    .map(|(d, s)| {
                        if *s == 1 {
                            Index::constant(0)
                        } else {
                            idx[d + lead].clone()
                        }
                    })
                    .collect();
                let e = self.load(*v, &sub)?;
                Ok(self.cast(e, dtype))
            }
        }
    }

    /// The buffer view an indexing node reads (lowering put its operand in memory).
    fn source(&self, v: ValueId) -> Built<super::ir::View> {
        self.low
            .sources
            .get(&v.node)
            .cloned()
            .ok_or_else(|| Illegal("an indexing node without its source view".into()))
    }

    /// A load of `view` at `static_index` plus data-dependent parts.
    fn indirect_load(
        &mut self,
        view: &super::ir::View,
        static_index: Index,
        indirect: Vec<Indirect>,
    ) -> ExprId {
        let dtype = self.low.buffers[view.buf].dtype;
        let e = self.exprs.intern(
            Expr::Load {
                buf: view.buf,
                index: static_index,
                guards: self.guards.clone(),
                indirect,
            },
            dtype,
        );
        if let Some(owner) = self.low.snodes.position(|s| s.buf == view.buf) {
            if !self.external.contains(&owner) {
                self.external.push(owner);
            }
        }
        self.cast(e, compute_dtype(dtype))
    }

    /// `self[indices]` at output index `idx`.
    fn index(
        &mut self,
        v: ValueId,
        args: &[Arg],
        indexed: &[bool],
        nonnegative: bool,
        idx: &[Index],
    ) -> Built<ExprId> {
        let view = self.source(v)?;
        let mut shapes = vec![];
        for a in &args[1..] {
            let t = a
                .value()
                .ok_or_else(|| Illegal("an index that is no tensor".into()))?;
            shapes.push(self.meta(t)?.hint_shape());
        }
        // The plan's structure (where the index dims go) depends on the ranks only:
        // it is read at the hints.
        let refs: Vec<&[i64]> = shapes.iter().map(Vec::as_slice).collect();
        let plan =
            index_plan(&hints(&view.shape), indexed, &refs).map_err(|e| Illegal(e.to_string()))?;
        let index_shape = sizes(&plan.index_shape);
        let mut at = Index::Const(view.offset.clone());
        for (o, dim) in plan.out_dims.iter().enumerate() {
            if let Some(d) = dim {
                at = at.plus(idx[o].clone().times(view.strides[*d].clone()));
            }
        }
        let k = plan.index_shape.len();
        let bidx = idx[plan.index_at..plan.index_at + k].to_vec();
        let mut indirect = vec![];
        for (j, &d) in plan.indexed_dims.iter().enumerate() {
            let value = self.operand(&args[1 + j], &index_shape, &bidx, DType::Int64)?;
            indirect.push(Indirect {
                value,
                size: view.shape[d].clone(),
                stride: view.strides[d].clone(),
                nonnegative,
            });
        }
        Ok(self.indirect_load(&view, at, indirect))
    }

    /// `gather(self, dim, index)` at output index `idx`.
    fn gather(&mut self, v: ValueId, args: &[Arg], dim: i64, idx: &[Index]) -> Built<ExprId> {
        let view = self.source(v)?;
        let ix = args
            .get(1)
            .and_then(Arg::value)
            .ok_or_else(|| Illegal("gather without an index".into()))?;
        let ix_shape = self.meta(ix)?.shape;
        let value = self.operand(&args[1], &ix_shape, idx, DType::Int64)?;
        if view.shape.is_empty() {
            let indirect = vec![Indirect {
                value,
                size: Size::from(1),
                stride: Size::from(0),
                nonnegative: false,
            }];
            let at = Index::Const(view.offset.clone());
            return Ok(self.indirect_load(&view, at, indirect));
        }
        let d = wrap_dim(dim, view.shape.len()).map_err(|e| Illegal(e.to_string()))?;
        let mut at = Index::Const(view.offset.clone());
        for (k, i) in idx.iter().enumerate() {
            if k != d {
                at = at.plus(i.clone().times(view.strides[k].clone()));
            }
        }
        let indirect = vec![Indirect {
            value,
            size: view.shape[d].clone(),
            stride: view.strides[d].clone(),
            nonnegative: false,
        }];
        Ok(self.indirect_load(&view, at, indirect))
    }

    fn operand_dtype(&self, arg: &Arg) -> Built<DType> {
        Ok(match arg {
            Arg::Value(v) => self.meta(*v)?.dtype,
            Arg::Scalar(s) => s.dtype(),
        })
    }

    /// The inline definition of `v` at `idx`: its op applied to its operands.
    fn inline_value(&mut self, v: ValueId, idx: &[Index]) -> Built<ExprId> {
        let node = self
            .graph
            .node(v.node)
            .ok_or_else(|| Illegal("node vanished".into()))?;
        if !self.covers.contains(&v.node) {
            self.covers.push(v.node);
        }
        let out = node
            .outputs
            .get(v.output as usize)
            .ok_or_else(|| Illegal("no such output".into()))?;
        let out_shape = out.shape.clone();
        let out_dtype = out.dtype;
        let cd = compute_dtype(out_dtype);
        let ranges = self.space.ranges();
        let args = node.args.clone();
        let arg0 = || {
            args.first()
                .and_then(Arg::value)
                .ok_or_else(|| Illegal("missing operand".into()))
        };
        Ok(match &node.op {
            // A one-element constant read as a value (a graph output, say).
            Op::Constant { data } => match data.single() {
                Some(value) => self.lit(value, cd),
                None => {
                    return Err(Illegal(
                        "a constant with several elements is a buffer".into(),
                    ))
                }
            },
            Op::Full { value, .. } => self.lit(out_dtype.round(value.to_f64()), cd),
            Op::Unary(op) => {
                let a = self.operand(&args[0], &out_shape, idx, cd)?;
                self.exprs.intern(Expr::Unary(*op, a), cd)
            }
            Op::Gelu { approximate } => {
                let a = self.operand(&args[0], &out_shape, idx, cd)?;
                self.gelu(a, *approximate, cd)
            }
            Op::Binary { op, alpha } => {
                let in_dtype = if op.is_comparison() {
                    let (a, b) = (self.operand_dtype(&args[0])?, self.operand_dtype(&args[1])?);
                    compute_dtype(comparison_dtype(&args, a, b))
                } else {
                    cd
                };
                let a = self.operand(&args[0], &out_shape, idx, in_dtype)?;
                let mut b = self.operand(&args[1], &out_shape, idx, in_dtype)?;
                if let Some(alpha) = alpha.filter(|a| a.to_f64() != 1.0) {
                    let k = self.lit(alpha.to_f64(), in_dtype);
                    b = self
                        .exprs
                        .intern(Expr::Binary(BinaryOp::Mul, b, k), in_dtype);
                }
                if *op == BinaryOp::Pow && cd.is_float() {
                    if let Some(e) = self.small_power(a, b, cd) {
                        return Ok(e);
                    }
                }
                self.exprs.intern(Expr::Binary(*op, a, b), cd)
            }
            Op::Where => {
                let c = self.operand(&args[0], &out_shape, idx, DType::Bool)?;
                let a = self.operand(&args[1], &out_shape, idx, cd)?;
                let b = self.operand(&args[2], &out_shape, idx, cd)?;
                self.exprs.intern(Expr::Where(c, a, b), cd)
            }
            Op::Clamp { min, max } => {
                let mut a = self.operand(&args[0], &out_shape, idx, cd)?;
                if let Some(lo) = min {
                    let lo = self.lit(lo.to_f64(), cd);
                    a = self
                        .exprs
                        .intern(Expr::Binary(BinaryOp::Maximum, a, lo), cd);
                }
                if let Some(hi) = max {
                    let hi = self.lit(hi.to_f64(), cd);
                    a = self
                        .exprs
                        .intern(Expr::Binary(BinaryOp::Minimum, a, hi), cd);
                }
                a
            }
            Op::Cast { dtype } => {
                let a = self.load(arg0()?, idx)?;
                // Round to the target dtype, then compute in its compute dtype.
                let a = self.cast(a, *dtype);
                self.cast(a, compute_dtype(*dtype))
            }
            Op::Cat { dim } => self.cat(&args, *dim, &out_shape, idx, cd)?,
            Op::Index {
                indexed,
                nonnegative,
            } => {
                let e = self.index(v, &args, indexed, *nonnegative, idx)?;
                self.cast(e, cd)
            }
            Op::Gather { dim } => {
                let e = self.gather(v, &args, *dim, idx)?;
                self.cast(e, cd)
            }
            op if views::describes(op) => {
                let src = arg0()?;
                let in_shape = self.meta(src)?.shape;
                let sub = view_index(op, &in_shape, idx, v.output, &ranges)
                    .ok_or_else(|| Illegal(format!("cannot index through `{}`", op.name())))?;
                self.load(src, &sub)?
            }
            other => return Err(Illegal(format!("`{}` is not a pointwise op", other.name()))),
        })
    }

    /// `a ** b` for a literal exponent that is a small whole number (|b| < 32),
    /// as products by repeated squaring (a negative one divides 1 by them): what
    /// Inductor's `pow` lowering embeds, where the general power function costs
    /// tens of instructions per element and makes a bandwidth-bound kernel
    /// (tanh-GELU's cube, say) compute-bound. Signed zeros, infinities and NaN
    /// come out as `pow` gives them; finite results differ by rounding only.
    /// (`b = 0.5` stays `pow`: `sqrt(-inf)` is NaN where `pow` gives inf.)
    fn small_power(&mut self, a: ExprId, b: ExprId, d: DType) -> Option<ExprId> {
        let Expr::Literal(lit) = *self.exprs.get(b) else {
            return None;
        };
        let k = lit.to_f64();
        if k.fract() != 0.0 || k.abs() >= 32.0 {
            return None;
        }
        let n = k.abs() as u32;
        let product = self.power_by_squaring(a, n, d);
        Some(if k < 0.0 {
            let one = self.lit(1.0, d);
            self.exprs
                .intern(Expr::Binary(BinaryOp::Div, one, product), d)
        } else {
            product
        })
    }

    /// `a ** n` by repeated squaring (`a ** 0` is 1, as `pow` gives for every `a`).
    fn power_by_squaring(&mut self, a: ExprId, n: u32, d: DType) -> ExprId {
        match n {
            0 => self.lit(1.0, d),
            1 => a,
            _ => {
                let half = self.power_by_squaring(a, n / 2, d);
                let square = self
                    .exprs
                    .intern(Expr::Binary(BinaryOp::Mul, half, half), d);
                if n % 2 == 1 {
                    self.exprs.intern(Expr::Binary(BinaryOp::Mul, square, a), d)
                } else {
                    square
                }
            }
        }
    }

    fn gelu(&mut self, a: ExprId, approx: GeluApprox, d: DType) -> ExprId {
        let half = self.lit(0.5, d);
        let one = self.lit(1.0, d);
        let inner = match approx {
            GeluApprox::None => {
                let k = self.lit(std::f64::consts::FRAC_1_SQRT_2, d);
                let t = self.exprs.intern(Expr::Binary(BinaryOp::Mul, a, k), d);
                self.exprs.intern(Expr::Unary(UnaryOp::Erf, t), d)
            }
            GeluApprox::Tanh => {
                let k0 = self.lit((2.0 / std::f64::consts::PI).sqrt(), d);
                let k1 = self.lit(0.044715, d);
                let a2 = self.exprs.intern(Expr::Binary(BinaryOp::Mul, a, a), d);
                let a3 = self.exprs.intern(Expr::Binary(BinaryOp::Mul, a2, a), d);
                let t = self.exprs.intern(Expr::Binary(BinaryOp::Mul, a3, k1), d);
                let t = self.exprs.intern(Expr::Binary(BinaryOp::Add, a, t), d);
                let t = self.exprs.intern(Expr::Binary(BinaryOp::Mul, t, k0), d);
                self.exprs.intern(Expr::Unary(UnaryOp::Tanh, t), d)
            }
        };
        let t = self
            .exprs
            .intern(Expr::Binary(BinaryOp::Add, inner, one), d);
        let t = self.exprs.intern(Expr::Binary(BinaryOp::Mul, a, t), d);
        self.exprs.intern(Expr::Binary(BinaryOp::Mul, t, half), d)
    }

    fn cat(
        &mut self,
        args: &[Arg],
        dim: i64,
        out_shape: &[Size],
        idx: &[Index],
        cd: DType,
    ) -> Built<ExprId> {
        let d = wrap_dim(dim, out_shape.len()).map_err(|e| Illegal(e.to_string()))?;
        // Each piece's place along the dim: sizes that may be symbolic (a piece whose
        // size is the integer 0 reads nothing).
        let overflow = |e: crate::graph::sym::SymError| Illegal(e.to_string());
        let mut pieces = Vec::new();
        let mut offset = Size::from(0);
        for a in args {
            let v = a.value().ok_or_else(|| Illegal("cat of a number".into()))?;
            let size = self.meta(v)?.shape.get(d).cloned().unwrap_or_default();
            let end = offset.add(&size).map_err(overflow)?;
            if size != 0 {
                pieces.push((v, offset.clone(), end.clone()));
            }
            offset = end;
        }
        let Some((last, last_off, last_end)) = pieces.last().cloned() else {
            return Ok(self.lit(0.0, cd));
        };
        let minus = |off: &Size| off.scale(-1).map(Index::constant).map_err(overflow);
        let mut sub = idx.to_vec();
        sub[d] = idx[d].clone().plus(minus(&last_off)?);
        let cond_last = Cond {
            index: idx[d].clone(),
            lo: last_off,
            hi: last_end,
        };
        self.guards.push(cond_last);
        let mut e = self.load(last, &sub);
        self.guards.pop();
        let mut acc = self.cast(e?, cd);
        for (v, off, end) in pieces.iter().rev().skip(1).cloned() {
            let cond = Cond {
                index: idx[d].clone(),
                lo: off.clone(),
                hi: end,
            };
            let mut sub = idx.to_vec();
            sub[d] = idx[d].clone().plus(minus(&off)?);
            self.guards.push(cond.clone());
            e = self.load(v, &sub);
            self.guards.pop();
            let piece = self.cast(e?, cd);
            acc = self.exprs.intern(Expr::Select(cond, piece, acc), cd);
        }
        Ok(acc)
    }
}

/// Whether every value of `from` is exactly representable in `to`.
fn widens_exactly(from: DType, to: DType) -> bool {
    use DType::*;
    matches!(
        (from, to),
        (Float16 | BFloat16, Float32 | Float64)
            | (Float32, Float64)
            | (Int32, Int64)
            | (Bool, Int32 | Int64)
    )
}

/// The dtype two comparison operands are compared in.
fn comparison_dtype(args: &[Arg], a: DType, b: DType) -> DType {
    match (&args[0], &args[1]) {
        (Arg::Value(_), Arg::Scalar(s)) | (Arg::Scalar(s), Arg::Value(_)) => {
            let t = if matches!(args[0], Arg::Value(_)) {
                a
            } else {
                b
            };
            match s {
                Scalar::Float(_) if !t.is_float() => DType::Float32,
                _ => t,
            }
        }
        _ => promote(a, b),
    }
}

/// The index into a view op's input for an index `idx` into output `output`
/// (`graph::views` describes every view once; this only spells its map in
/// index arithmetic).
pub fn view_index(
    op: &Op,
    in_shape: &[Size],
    idx: &[Index],
    output: u32,
    ranges: &super::index::Ranges,
) -> Option<Vec<Index>> {
    let map = views::view_map(op, in_shape, output, ranges.symbols).ok()?;
    if idx.len() != map.out_shape.len() {
        return None;
    }
    Some(match &map.map {
        IndexMap::RowMajor => {
            let flat = linear(idx, &contiguous_sizes(&map.out_shape), 0);
            unflatten(flat, in_shape, ranges)
        }
        IndexMap::Affine(dims) => dims
            .iter()
            .map(|d| match d {
                InDim::Fixed(i) => Index::constant(i.clone()),
                InDim::Out { dim, step, start } => idx[*dim]
                    .clone()
                    .times(*step)
                    .plus(Index::constant(start.clone())),
            })
            .collect(),
    })
}
