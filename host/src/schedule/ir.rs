//! The loop-level IR that code generators consume: buffers, and kernels made
//! of value expressions over the kernel's loop variables.
//!
//! A [`Kernel`] iterates over a [`Space`] of `x` rows by `r` reduction
//! elements (`r = 1` for a pointwise kernel). Its values live in an
//! [`ExprArena`] that hash-conses nodes, so a value computed twice in one
//! kernel is one expression (common-subexpression elimination for free).
//! This module is plain data: it never decides anything.

use std::collections::HashMap;

use super::ids::{entity_id, EntityId, IdVec};
use super::index::{Index, Size, Var};
use crate::graph::dtype::DType;
use crate::graph::ops::{BinaryOp, UnaryOp};

/// A buffer of the compiled program.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BufferId(pub u32);
entity_id!(BufferId);

/// Where a buffer's storage comes from.
#[derive(Clone, Debug, PartialEq)]
pub enum BufferKind {
    /// Graph input number `index`, passed in by the caller.
    Input {
        /// Position among the graph's inputs.
        index: usize,
        /// When the input is read as indices: the size of the smallest dim it
        /// indexes ([`crate::graph::Graph::index_bound`]), for drawing valid ones.
        index_bound: Option<i64>,
    },
    /// A constant tensor, created once when the module loads.
    Constant {
        /// Row-major values (or one fill value).
        data: crate::graph::ops::ConstData,
    },
    /// Written by a kernel or an extern call.
    Computed,
}

/// A buffer: dense storage of `shape` with `strides` (elements).
#[derive(Clone, Debug, PartialEq)]
pub struct Buffer {
    /// The graph value it holds (a user name: pass it through the `Namer`).
    pub name: String,
    /// Element type.
    pub dtype: DType,
    /// Sizes.
    pub shape: Vec<Size>,
    /// Strides in elements.
    pub strides: Vec<Size>,
    /// Where the storage comes from.
    pub kind: BufferKind,
}

impl Buffer {
    /// Elements, at the size symbols' hints (what decisions read).
    pub fn numel(&self) -> i64 {
        self.shape
            .iter()
            .fold(1i64, |n, d| n.saturating_mul(d.hint().max(0)))
    }

    /// Bytes of storage, at the hints.
    pub fn bytes(&self) -> i64 {
        self.numel().saturating_mul(self.dtype.size_bytes() as i64)
    }

    /// The sizes at the hints.
    pub fn shape_hint(&self) -> Vec<i64> {
        self.shape.iter().map(Size::hint).collect()
    }

    /// The strides at the hints.
    pub fn strides_hint(&self) -> Vec<i64> {
        self.strides.iter().map(Size::hint).collect()
    }
}

/// A kernel's iteration space: `x` rows (or elements) by `r` reduction elements.
///
/// `inner` says where the reduced elements sit in a value of `x × r` elements
/// that the kernel also computes (the consumer of a reduction that broadcasts
/// it back): row `x` is `(o, i)` with `x = o × inner + i`, and its element `r`
/// is at `(o × r_total + r) × inner + i` of the full value. With `inner` 1
/// (every reduction over trailing dims, every pointwise kernel) a row is a
/// contiguous run; `x - x.mean(1, keepdim=True)` of a `[b, n, c]` tensor has
/// `inner = c`, and the mean and the subtraction share one kernel.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Space {
    /// Rows, or elements of a pointwise kernel.
    pub x: Size,
    /// Elements reduced per row; 1 for a pointwise kernel.
    pub r: Size,
    /// Elements after the reduced ones in a full value's layout; 1 when the
    /// reduced elements are innermost.
    pub inner: Size,
}

impl Space {
    /// A space whose rows are contiguous runs of `r` elements (`inner` 1).
    pub fn rows(x: impl Into<Size>, r: impl Into<Size>) -> Space {
        Space {
            x: x.into(),
            r: r.into(),
            inner: Size::from(1),
        }
    }

    /// Whether the kernel reduces: `r` is more than 1, or symbolic (a loop over a
    /// size that varies is a reduction loop even where it runs once).
    pub fn is_reduction(&self) -> bool {
        self.r.as_const().is_none_or(|r| r > 1)
    }

    /// The extents, where all three are integers: what code that does not yet take
    /// symbolic sizes reads (it then refuses a symbolic space, or takes a general
    /// path).
    pub fn fixed(&self) -> Option<Extents> {
        Some(Extents {
            x: self.x.as_const()?,
            r: self.r.as_const()?,
            inner: self.inner.as_const()?,
        })
    }

    /// `x` at the size symbols' hints: what decisions read.
    pub fn x_hint(&self) -> i64 {
        self.x.hint()
    }

    /// `r` at the hints.
    pub fn r_hint(&self) -> i64 {
        self.r.hint()
    }

    /// How an access at `index` of `element_bytes`-byte elements walks memory
    /// in this space, at the hints: the bytes it moves (every row and row element
    /// it is indexed by), and whether it steps by one element along the row or
    /// across rows. Steps are read off the index at the origin, so an access that
    /// divides or wraps its index counts by its first step.
    pub fn access(&self, index: &super::index::Index, element_bytes: i64) -> MemoryWalk {
        use super::index::Var;
        let along = |var, extent: i64| if index.uses(var) { extent.max(1) } else { 1 };
        let at = index.eval(0, 0);
        let (x, r) = (self.x_hint(), self.r_hint());
        MemoryWalk {
            bytes: element_bytes
                .saturating_mul(along(Var::X, x))
                .saturating_mul(along(Var::R, r)),
            unit_along_row: r > 1 && (index.eval(0, 1) - at).abs() == 1,
            unit_across_rows: x > 1 && (index.eval(1, 0) - at).abs() == 1,
        }
    }

    /// The loop ranges, for index simplification. (A symbolic extent is bounded by
    /// its symbols' ranges once programs carry their symbols; until then by none,
    /// which only forgoes simplifications.)
    pub fn ranges(&self) -> super::index::Ranges<'static> {
        let at_least_one = |s: &Size| match s.as_const() {
            Some(c) => Size::from(c.max(1)),
            None => s.clone(),
        };
        super::index::Ranges {
            x: at_least_one(&self.x),
            r: at_least_one(&self.r),
            symbols: crate::graph::sym::Symbols::none(),
        }
    }
}

/// A [`Space`]'s extents as integers ([`Space::fixed`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Extents {
    /// [`Space::x`]
    pub x: i64,
    /// [`Space::r`]
    pub r: i64,
    /// [`Space::inner`]
    pub inner: i64,
}

/// How one load or store walks memory ([`Space::access`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryWalk {
    /// Bytes it moves over the whole kernel.
    pub bytes: i64,
    /// It steps by one element along the row (coalesced under a row-major tile).
    pub unit_along_row: bool,
    /// It steps by one element from row to row.
    pub unit_across_rows: bool,
}

/// An index condition `lo <= index < hi` (the pieces of `cat`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Cond {
    /// The index tested.
    pub index: Index,
    /// Inclusive lower bound.
    pub lo: Size,
    /// Exclusive upper bound.
    pub hi: Size,
}

/// A literal of an expression.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Literal {
    /// A float, by its bits (so that literals hash).
    Float(u64),
    /// An integer.
    Int(i64),
    /// A boolean.
    Bool(bool),
}

impl Literal {
    /// The literal as a float64.
    pub fn to_f64(self) -> f64 {
        match self {
            Literal::Float(bits) => f64::from_bits(bits),
            Literal::Int(i) => i as f64,
            Literal::Bool(b) => f64::from(u8::from(b)),
        }
    }

    /// The literal of `value` in `dtype`.
    pub fn of(value: f64, dtype: DType) -> Literal {
        if dtype == DType::Bool {
            Literal::Bool(value != 0.0)
        } else if dtype.is_float() {
            Literal::Float(value.to_bits())
        } else {
            Literal::Int(value as i64)
        }
    }
}

/// What a reduction computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceKind {
    /// Sum.
    Sum,
    /// Maximum (NaN propagates).
    Max,
    /// Minimum (NaN propagates).
    Min,
}

/// A data-dependent part of a load's offset: `stride * i`, where `i` is the integer
/// value of `value`, wrapped once if negative (`i + size`) unless `nonnegative`, and
/// must then lie in `0..size`. A value outside is a run-time error where the device can
/// report one; a load never reads outside its buffer for it (`embedding`, `index`,
/// `gather`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Indirect {
    /// The index value (an integer expression of the kernel).
    pub value: ExprId,
    /// The size of the dim it indexes.
    pub size: Size,
    /// Elements per step along that dim.
    pub stride: Size,
    /// A negative value is out of range instead of counted from the end
    /// (`embedding`, as PyTorch's embedding refuses one; `index` and `gather` wrap it).
    pub nonnegative: bool,
}

/// An expression node.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Expr {
    /// Reads `buf[index + sum of indirect parts]`, where every condition in `guards`
    /// holds (else 0).
    Load {
        /// The buffer.
        buf: BufferId,
        /// Element offset.
        index: Index,
        /// Extra validity conditions (a `cat` piece).
        guards: Vec<Cond>,
        /// Offsets read from index tensors; empty for a plain load.
        indirect: Vec<Indirect>,
    },
    /// A literal.
    Literal(Literal),
    /// A function of one operand.
    Unary(UnaryOp, ExprId),
    /// A function of two operands.
    Binary(BinaryOp, ExprId, ExprId),
    /// `where(cond, a, b)`.
    Where(ExprId, ExprId, ExprId),
    /// A conversion to the expression's dtype.
    Cast(ExprId),
    /// `a` where `cond` holds on the index, else `b` (`cat`).
    Select(Cond, ExprId, ExprId),
    /// The result of reduction number `n` of this kernel (one value per row).
    Reduced(usize),
}

impl Expr {
    /// The same expression over other operands: each operand `o` becomes `m(o)`
    /// (a load's index values too).
    pub fn with_operands(&self, m: impl Fn(ExprId) -> ExprId) -> Expr {
        match self {
            Expr::Load {
                buf,
                index,
                guards,
                indirect,
            } => Expr::Load {
                buf: *buf,
                index: index.clone(),
                guards: guards.clone(),
                indirect: indirect
                    .iter()
                    .map(|i| Indirect {
                        value: m(i.value),
                        ..i.clone()
                    })
                    .collect(),
            },
            Expr::Literal(l) => Expr::Literal(*l),
            Expr::Unary(op, x) => Expr::Unary(*op, m(*x)),
            Expr::Binary(op, x, y) => Expr::Binary(*op, m(*x), m(*y)),
            Expr::Where(c, x, y) => Expr::Where(m(*c), m(*x), m(*y)),
            Expr::Cast(x) => Expr::Cast(m(*x)),
            Expr::Select(c, x, y) => Expr::Select(c.clone(), m(*x), m(*y)),
            Expr::Reduced(n) => Expr::Reduced(*n),
        }
    }
}

/// An expression in an [`ExprArena`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ExprId(pub u32);
entity_id!(ExprId);

/// Hash-consed expressions with the dtype each computes in.
#[derive(Clone, Debug, Default)]
pub struct ExprArena {
    nodes: IdVec<ExprId, (Expr, DType)>,
    lookup: HashMap<(Expr, DType), ExprId>,
}

impl ExprArena {
    /// The id of `expr` computed in `dtype`, adding it if new.
    pub fn intern(&mut self, expr: Expr, dtype: DType) -> ExprId {
        if let Some(id) = self.lookup.get(&(expr.clone(), dtype)) {
            return *id;
        }
        let id = self.nodes.push((expr.clone(), dtype));
        self.lookup.insert((expr, dtype), id);
        id
    }

    /// An arena of these nodes, in this order (ids are their positions; a node equal
    /// to an earlier one keeps its own id).
    pub fn from_nodes(nodes: Vec<(Expr, DType)>) -> ExprArena {
        let mut lookup = HashMap::with_capacity(nodes.len());
        for (i, node) in nodes.iter().enumerate() {
            lookup.entry(node.clone()).or_insert(ExprId(i as u32));
        }
        ExprArena {
            nodes: nodes.into(),
            lookup,
        }
    }

    /// The node of `id`.
    pub fn get(&self, id: ExprId) -> &Expr {
        &self.nodes[id].0
    }

    /// The dtype `id` computes in.
    pub fn dtype(&self, id: ExprId) -> DType {
        self.nodes[id].1
    }

    /// Every node, in creation order (operands before users).
    pub fn iter(&self) -> impl Iterator<Item = (ExprId, &Expr, DType)> {
        self.nodes.iter_enumerated().map(|(id, (e, d))| (id, e, *d))
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether there are no nodes.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The operands of `id`.
    pub fn operands(&self, id: ExprId) -> Vec<ExprId> {
        match self.get(id) {
            Expr::Load { indirect, .. } => indirect.iter().map(|i| i.value).collect(),
            Expr::Literal(_) | Expr::Reduced(_) => vec![],
            Expr::Unary(_, a) | Expr::Cast(a) => vec![*a],
            Expr::Binary(_, a, b) | Expr::Select(_, a, b) => vec![*a, *b],
            Expr::Where(c, a, b) => vec![*c, *a, *b],
        }
    }

    /// The reductions `id` depends on.
    pub fn reductions_used(&self, id: ExprId) -> Vec<usize> {
        let mut seen: IdVec<ExprId, bool> = IdVec::filled(id.index() + 1, false);
        let mut stack = vec![id];
        let mut out = Vec::new();
        while let Some(e) = stack.pop() {
            if std::mem::replace(&mut seen[e], true) {
                continue;
            }
            if let Expr::Reduced(n) = self.get(e) {
                out.push(*n);
            }
            stack.extend(self.operands(e));
        }
        out.sort_unstable();
        out.dedup();
        out
    }
}

/// A reduction inside a kernel.
#[derive(Clone, Debug, PartialEq)]
pub struct Reduction {
    /// What it computes.
    pub kind: ReduceKind,
    /// The value reduced, per (x, r).
    pub value: ExprId,
    /// The dtype it accumulates in.
    pub acc_dtype: DType,
}

/// A store of a kernel value into a buffer.
#[derive(Clone, Debug, PartialEq)]
pub struct Store {
    /// The buffer written.
    pub buf: BufferId,
    /// Element offset, over `x` (and `r` for values that vary along it).
    pub index: Index,
    /// The value.
    pub value: ExprId,
    /// Offsets read from index tensors (a scatter: `index_copy` into state); empty
    /// for a plain store. An index out of range is never stored, as a load never
    /// reads one.
    pub indirect: Vec<Indirect>,
    /// Conditions on the index under which the value is stored; empty for a store
    /// at every place of the kernel's space (a part of a horizontally fused kernel
    /// stores over its own, smaller, space: [`super::horizontal`]).
    pub guards: Vec<Cond>,
}

/// How a kernel uses a buffer it takes as a pointer parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Access {
    /// Only read.
    Read,
    /// Written (and possibly read too).
    Write,
}

/// A pointer parameter of a kernel: which buffer the wrapper passes in that
/// position. The list is the contract between every kernel generator and
/// every wrapper generator, computed once, by [`Kernel::new`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Param {
    /// The buffer.
    pub buf: BufferId,
    /// Whether the kernel writes it.
    pub access: Access,
}

/// One generated kernel: a fused group.
#[derive(Clone, Debug)]
pub struct Kernel {
    /// What it fuses, for the kernel's name (`fused_amax_sub_exp_sum_div`).
    pub ops: Vec<&'static str>,
    /// The iteration space.
    pub space: Space,
    /// Its values.
    pub exprs: ExprArena,
    /// Reductions, in dependency order.
    pub reductions: Vec<Reduction>,
    /// Stores, in order.
    pub stores: Vec<Store>,
    /// Pointer parameters: the buffers only read, in first-use order, then
    /// the buffers written, in store order.
    pub params: Vec<Param>,
}

impl Kernel {
    /// The size symbols the kernel's code reads (in its indexes, guards and indirect
    /// sizes; its extents come as `xnumel` and `rnumel`), sorted: the size arguments
    /// after its pointers and those two.
    pub fn symbols(&self) -> Vec<crate::graph::sym::SymId> {
        let mut out = Vec::new();
        let cond = |c: &Cond, out: &mut Vec<_>| {
            out.extend(c.index.symbols());
            out.extend(c.lo.symbols());
            out.extend(c.hi.symbols());
        };
        let indirect = |i: &Indirect, out: &mut Vec<_>| {
            out.extend(i.size.symbols());
            out.extend(i.stride.symbols());
        };
        for (_, e, _) in self.exprs.iter() {
            match e {
                Expr::Load {
                    index,
                    guards,
                    indirect: parts,
                    ..
                } => {
                    out.extend(index.symbols());
                    guards.iter().for_each(|c| cond(c, &mut out));
                    parts.iter().for_each(|i| indirect(i, &mut out));
                }
                Expr::Select(c, _, _) => cond(c, &mut out),
                _ => {}
            }
        }
        for s in &self.stores {
            out.extend(s.index.symbols());
            s.guards.iter().for_each(|c| cond(c, &mut out));
            s.indirect.iter().for_each(|i| indirect(i, &mut out));
        }
        out.sort();
        out.dedup();
        out
    }

    /// A kernel of these values and stores, with its parameter list.
    pub fn new(
        ops: Vec<&'static str>,
        space: Space,
        exprs: ExprArena,
        reductions: Vec<Reduction>,
        stores: Vec<Store>,
    ) -> Kernel {
        let mut k = Kernel {
            ops,
            space,
            exprs,
            reductions,
            stores,
            params: Vec::new(),
        };
        let writes = k.writes();
        let reads: Vec<BufferId> = k
            .reads()
            .into_iter()
            .filter(|b| !writes.contains(b))
            .collect();
        let param = |access: Access| move |buf: BufferId| Param { buf, access };
        k.params = reads
            .into_iter()
            .map(param(Access::Read))
            .chain(writes.into_iter().map(param(Access::Write)))
            .collect();
        k
    }

    /// Whether the kernel reduces: it has reductions, or rows to reduce along
    /// (a reduction over a dim of one element has `r = 1` and is still one).
    pub fn is_reduction(&self) -> bool {
        self.space.is_reduction() || !self.reductions.is_empty()
    }

    /// Whether this is a pointwise kernel tiled over rows and row elements
    /// (it has a row but nothing to reduce along it).
    pub fn is_tiled(&self) -> bool {
        self.space.is_reduction() && self.reductions.is_empty()
    }

    /// The buffers the kernel reads, in first-use order.
    pub fn reads(&self) -> Vec<BufferId> {
        let mut out = Vec::new();
        for (_, e, _) in self.exprs.iter() {
            if let Expr::Load { buf, .. } = e {
                if !out.contains(buf) {
                    out.push(*buf);
                }
            }
        }
        out
    }

    /// For every expression: whether it varies along the row, and its phase
    /// (0 when it needs no reduction result, otherwise one more than the phase
    /// of the last reduction it needs). Code generators place values by these.
    pub fn phases(&self) -> (IdVec<ExprId, bool>, IdVec<ExprId, usize>) {
        let n = self.exprs.len();
        let mut uses_r = IdVec::filled(n, false);
        let mut phase = IdVec::filled(n, 0usize);
        for (id, e, _) in self.exprs.iter() {
            let ops = self.exprs.operands(id);
            uses_r[id] = match e {
                Expr::Load { index, guards, .. } => {
                    index.uses(Var::R)
                        || guards.iter().any(|g| g.index.uses(Var::R))
                        || ops.iter().any(|o| uses_r[*o])
                }
                Expr::Select(c, ..) => c.index.uses(Var::R) || ops.iter().any(|o| uses_r[*o]),
                _ => ops.iter().any(|o| uses_r[*o]),
            };
            phase[id] = match e {
                Expr::Reduced(r) => self
                    .reductions
                    .get(*r)
                    .map_or(0, |red| phase[red.value] + 1),
                _ => ops.iter().map(|o| phase[*o]).max().unwrap_or(0),
            };
        }
        (uses_r, phase)
    }

    /// For every expression: whether it is the same for every row of the kernel
    /// (it reads nothing at a place that depends on the row: a one-row product's
    /// input row, a norm of that row taken into the product). A generator may
    /// compute such a value once for a tile of rows.
    pub fn same_for_every_row(&self) -> IdVec<ExprId, bool> {
        let mut same = IdVec::filled(self.exprs.len(), false);
        for (id, e, _) in self.exprs.iter() {
            same[id] = match e {
                Expr::Load {
                    index,
                    guards,
                    indirect,
                    ..
                } => {
                    !index.uses(Var::X)
                        && guards.iter().all(|g| !g.index.uses(Var::X))
                        && indirect.iter().all(|i| same[i.value])
                }
                Expr::Reduced(r) => self.reductions.get(*r).is_some_and(|red| same[red.value]),
                _ => self.exprs.operands(id).iter().all(|o| same[*o]),
            };
        }
        same
    }

    /// The passes a kernel that loops along its rows makes over each row: one
    /// more than the latest phase of a value along the row that it stores or
    /// reduces (1: every reduction reads the row as it goes; more: a value
    /// along the row needs one of its reductions, as the subtraction of a mean
    /// or a looped variance after its mean does; 3: a softmax's max, then its
    /// sum, then its output). Code generators may merge passes
    /// (an online softmax takes its max and sum in one), so this is at most
    /// what a loop reads. At least 1.
    pub fn row_passes(&self) -> u32 {
        let (uses_r, phase) = self.phases();
        let latest = self
            .stores
            .iter()
            .map(|s| s.value)
            .chain(self.reductions.iter().map(|r| r.value))
            .filter(|e| uses_r[*e])
            .map(|e| phase[e])
            .max()
            .unwrap_or(0);
        u32::try_from(latest)
            .unwrap_or(u32::MAX - 1)
            .saturating_add(1)
    }

    /// Expressions reachable from the stores and reductions: what a code
    /// generator must emit.
    pub fn needed(&self) -> std::collections::HashSet<ExprId> {
        let mut roots: Vec<ExprId> = self.stores.iter().map(|s| s.value).collect();
        roots.extend(
            self.stores
                .iter()
                .flat_map(|s| s.indirect.iter().map(|i| i.value)),
        );
        roots.extend(self.reductions.iter().map(|r| r.value));
        let mut seen = std::collections::HashSet::new();
        while let Some(e) = roots.pop() {
            if seen.insert(e) {
                roots.extend(self.exprs.operands(e));
            }
        }
        seen
    }

    /// The expressions varying along the row (`uses_r`, one flag per
    /// expression) that `roots` need, stopping at values constant along the
    /// row, which a generator computes once outside its loop over the row.
    pub fn varying_closure(
        &self,
        roots: &[ExprId],
        uses_r: &IdVec<ExprId, bool>,
    ) -> std::collections::HashSet<ExprId> {
        let mut seen = std::collections::HashSet::new();
        let mut stack: Vec<ExprId> = roots.to_vec();
        while let Some(e) = stack.pop() {
            if uses_r[e] && seen.insert(e) {
                stack.extend(self.exprs.operands(e));
            }
        }
        seen
    }

    /// The buffers the kernel writes, in order.
    pub fn writes(&self) -> Vec<BufferId> {
        let mut out = Vec::new();
        for s in &self.stores {
            if !out.contains(&s.buf) {
                out.push(s.buf);
            }
        }
        out
    }
}

/// A call into the device's library (or, on the cpu device, into Kiln's own C++).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ExternOp {
    /// `mm(a, b)`: `[M, K] x [K, N]`.
    Mm,
    /// `bmm(a, b)`: `[B, M, K] x [B, K, N]`.
    Bmm,
    /// `addmm(bias, a, b)`: `[M, K] x [K, N]` plus `bias` `[N]` added to every row,
    /// in the library's epilogue (one rounding of the sum, as eager's `linear` makes
    /// it); lowered only where the wrapper's product takes a bias
    /// ([`super::Options::bias_epilogue`]).
    Addmm,
    /// `convolution(x, w)` without bias, on contiguous `[N, C, spatial...]` and
    /// `[O, C/groups, kernel...]` operands (the bias is added by the kernel after it).
    Conv {
        /// per spatial dim
        stride: Vec<i64>,
        /// per spatial dim
        padding: Vec<i64>,
        /// per spatial dim
        dilation: Vec<i64>,
        /// channel groups
        groups: i64,
    },
    /// `scaled_dot_product_attention(q, k, v, mask?)` in one fused kernel (a
    /// Triton target's flash attention), on strided views: `q` `[B, H, L, E]`
    /// or `[N, L, E]`, `k`/`v` with batch and head dims equal to the query's,
    /// 1, or (heads) a divisor of them, the optional mask broadcasting to the
    /// scores `[B, H, L, S]` (bool: keep where true; floating: added).
    Attention {
        /// the upper triangle (`j > i`) is masked out
        causal: bool,
        /// the score scale's bits (`f64::to_bits`: the op stays `Eq` and `Hash`)
        scale_bits: u64,
        /// a mask operand follows `v`
        mask: bool,
        /// the output buffer is `[B, L, H, Ev]` (the heads inside the rows), the
        /// layout the `transpose(1, 2)` that reads the `[B, H, L, Ev]` result
        /// wants; else it is the result itself
        heads_inner: bool,
        /// the keys are split into this many ranges, each a program's (flash-decoding:
        /// a query of a few rows over a long cache keeps every unit busy), whose
        /// partial results the call's scratch buffer holds until they are combined;
        /// 1: no split
        splits: u32,
    },
    /// `index_copy(self, dim, index, source)` on operands `[self, index, source]`: the
    /// slices `index[k]` of `self` along `dim` replaced by `source`'s slices `k`.
    IndexCopy {
        /// the dim, non-negative
        dim: usize,
        /// `self` is the whole of a state input (a KV cache the program keeps) that
        /// dies at this step: the call writes only the copied slices, into it, and its
        /// result is that buffer. Otherwise the result is a copy of `self` with the
        /// slices written.
        in_place: bool,
    },
    /// `_grouped_mm(a, b, offs)` on operands `[a, b, offs]`: `a` `[M, K]`, `b` `[G, K, N]`,
    /// `offs` `[G]` int32; row m of the `[M, N]` result is `a[m]` times `b[g]`, g the
    /// number of offsets at or below m, and zero past the last offset. Kiln's own
    /// kernel on a Triton device.
    GroupedMm,
    /// Kiln's sort, first step ([`crate::graph::Op::SortRuns`]) on operand `[x]`: the
    /// positions within each row (the last dim) of each run's elements in order.
    SortRuns {
        /// largest first
        descending: bool,
        /// elements in a run: a power of two
        run: i64,
    },
    /// Kiln's sort, a merge ([`crate::graph::Op::MergeRuns`]) on operands `[x, runs]`:
    /// the positions within each row of its elements, each pair of runs of `run`
    /// merged into one.
    MergeRuns {
        /// largest first
        descending: bool,
        /// elements in a run: a power of two
        run: i64,
    },
}

impl ExternOp {
    /// The ATen name.
    pub fn name(&self) -> &'static str {
        match self {
            ExternOp::Mm => "mm",
            ExternOp::Bmm => "bmm",
            ExternOp::Addmm => "addmm",
            ExternOp::Conv { .. } => "convolution",
            ExternOp::Attention { .. } => "scaled_dot_product_attention",
            ExternOp::IndexCopy { .. } => "index_copy",
            ExternOp::GroupedMm => "_grouped_mm",
            ExternOp::SortRuns { .. } => "sort_runs",
            ExternOp::MergeRuns { .. } => "merge_runs",
        }
    }
}

/// A strided view of a buffer, as an extern call or an output takes it.
#[derive(Clone, Debug, PartialEq)]
pub struct View {
    /// The buffer.
    pub buf: BufferId,
    /// Sizes of the view.
    pub shape: Vec<Size>,
    /// Strides of the view.
    pub strides: Vec<Size>,
    /// Offset in elements.
    pub offset: Size,
}

/// An extern call writing `out`.
#[derive(Clone, Debug, PartialEq)]
pub struct ExternCall {
    /// Which product.
    pub op: ExternOp,
    /// Operands, as strided views.
    pub args: Vec<View>,
    /// The buffer written (contiguous).
    pub out: BufferId,
    /// A buffer the call writes and reads itself, dead after it (split attention's
    /// partial results).
    pub scratch: Option<BufferId>,
}

/// One step of the program, in execution order.
#[derive(Clone, Debug)]
pub enum Step {
    /// A generated kernel.
    Kernel(Kernel),
    /// A call into the device's library.
    Extern(ExternCall),
}

impl Step {
    /// The buffers the step reads.
    pub fn reads(&self) -> Vec<BufferId> {
        match self {
            Step::Kernel(k) => k.reads(),
            Step::Extern(e) => e.args.iter().map(|a| a.buf).collect(),
        }
    }

    /// The buffers the step writes.
    pub fn writes(&self) -> Vec<BufferId> {
        match self {
            Step::Kernel(k) => k.writes(),
            Step::Extern(e) => std::iter::once(e.out).chain(e.scratch).collect(),
        }
    }
}

/// The scheduled program: what the wrapper generator turns into a `call`.
#[derive(Clone, Debug)]
pub struct Program {
    /// The graph's name.
    pub name: String,
    /// Every buffer.
    pub buffers: IdVec<BufferId, Buffer>,
    /// The graph's inputs, in order.
    pub inputs: Vec<BufferId>,
    /// The graph's outputs, in order, as views of buffers.
    pub outputs: Vec<View>,
    /// The steps, in order.
    pub steps: Vec<Step>,
    /// The size symbols its sizes read, with their ranges (empty for a program of
    /// one size).
    pub symbols: crate::graph::sym::Symbols,
}

impl Program {
    /// The buffer `id`.
    pub fn buffer(&self, id: BufferId) -> &Buffer {
        &self.buffers[id]
    }

    /// The constant buffers some step or output reads, in buffer order.
    pub fn constants_read(&self) -> Vec<BufferId> {
        self.buffers
            .ids()
            .filter(|b| matches!(self.buffer(*b).kind, BufferKind::Constant { .. }))
            .filter(|b| {
                self.steps.iter().any(|s| s.reads().contains(b))
                    || self.outputs.iter().any(|o| o.buf == *b)
            })
            .collect()
    }

    /// The number of generated kernels.
    pub fn kernel_count(&self) -> usize {
        self.steps
            .iter()
            .filter(|s| matches!(s, Step::Kernel(_)))
            .count()
    }
}
