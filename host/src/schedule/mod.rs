//! Scheduling: lowering a graph to loop-level IR, fusing it into kernels and
//! planning buffers.
//!
//! `lower.rs` decides what is computed (inline values, reductions, extern
//! calls), `fuse.rs` which nodes share a kernel, `build.rs` each kernel's
//! expressions, and this module what must live in memory and which buffers a
//! later one may reuse. Nothing here knows a device: the code generators turn
//! the [`Program`] into code with the plugin's launch configs and strings.

pub mod bind;
pub mod build;
pub mod eval;
pub mod fuse;
pub mod horizontal;
pub mod ids;
pub mod index;
pub mod ir;
pub mod lower;
pub mod print;
pub mod state;
pub mod tile;

use std::collections::{HashMap, HashSet};

pub use ir::{Buffer, BufferId, BufferKind, Kernel, Program, Step};

use crate::graph::ir::Graph;
use build::KernelBuilder;
use fuse::Group;
use index::Size;
use lower::SKind;

/// Why a graph cannot be scheduled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// A node the scheduler has no lowering for.
    #[error("node `{node}`: {what}")]
    Unsupported {
        /// The node.
        node: String,
        /// What is unsupported.
        what: String,
    },
    /// A broken invariant: a bug in Kiln, reported instead of panicking.
    #[error("internal scheduler error (please report): {0}")]
    Internal(String),
}

/// A buffer a step allocates, possibly in the storage of a dead one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Alloc {
    /// The buffer.
    pub buf: BufferId,
    /// A dead buffer of the same size and dtype whose storage it takes.
    pub reuse: Option<BufferId>,
}

/// Buffer lifetimes: what to allocate before each step and free after it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemoryPlan {
    /// Per step, the buffers allocated right before it.
    pub allocs: Vec<Vec<Alloc>>,
    /// Per step, the buffers (inputs included) dead right after it.
    pub frees: Vec<Vec<BufferId>>,
}

impl MemoryPlan {
    /// At most how many bytes the program's own storage takes when it runs
    /// with elements of `element_bytes(buffer)` each: every constant, and a
    /// new block for every buffer the plan does not place in a dead one's
    /// storage. `None` past 64 bits.
    pub fn storage_bytes(
        &self,
        program: &Program,
        element_bytes: impl Fn(&Buffer) -> u64,
    ) -> Option<u64> {
        let bytes = |b: &Buffer| crate::memory::elements(b.numel(), element_bytes(b));
        let constants = program
            .buffers
            .iter()
            .filter(|b| matches!(b.kind, BufferKind::Constant { .. }))
            .map(bytes);
        let fresh = self
            .allocs
            .iter()
            .flatten()
            .filter(|a| a.reuse.is_none())
            .map(|a| bytes(program.buffer(a.buf)));
        crate::memory::total(constants.chain(fresh))
    }
}

/// A scheduled graph: the program and its memory plan.
#[derive(Clone, Debug)]
pub struct Scheduled {
    /// Kernels and calls, in order.
    pub program: Program,
    /// Allocation and reuse.
    pub memory: MemoryPlan,
    /// For each step, the graph nodes it computes (for `graph.dot`).
    pub covers: Vec<Vec<crate::graph::ir::NodeId>>,
}

/// What the device allows the scheduler to do (from its plugin's backend spec).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Options {
    /// The device's `BackendFeature`s. `INPLACE_BUFFERS` lets a pointwise
    /// kernel write its output over a buffer that dies in that kernel.
    pub features: kiln_plugin_api::BackendFeatures,
    /// How pointwise kernels may be re-split into rows × row elements.
    pub tiling: Tiling,
    /// The wrapper's matrix product takes a bias (`torch.addmm`): a product whose
    /// only reader adds a row-broadcast bias becomes one `addmm` call
    /// ([`ir::ExternOp::Addmm`]), and no kernel adds the bias.
    pub bias_epilogue: bool,
    /// The wrapper's convolution takes operands dense in channels-last order
    /// as they are and answers in channels-last when either operand is
    /// (ATen's, whose cuDNN kernels run NHWC): such an operand is not copied,
    /// and the result's buffer is planned channels-last.
    pub conv_channels_last: bool,
    /// With `INPLACE_BUFFERS`, a reduction kernel may write over a row it
    /// reads too ([`inplace_ok`]): for a generator whose last pass over a row
    /// reads and writes each element once (Triton's; the C++ kernels' vector
    /// tail revisits elements of the row's last full vector).
    pub inplace_reductions: bool,
    /// The units that run programs in parallel (a GPU's SMs), for fused attention
    /// of a few query rows over many keys: where its (batch, head) programs leave
    /// units idle, the keys are split across more programs ([`split_attention`]).
    /// 0: never split.
    pub attention_units: u32,
    /// The wrapper lets a kernel write into a state input (a Triton device's: the
    /// Python wrapper's caller keeps the tensor; the C++ wrapper keeps it in the
    /// state's output): an `index_copy` into state that
    /// nothing else reads becomes a kernel storing the source's slices at the index,
    /// into the state itself, fused with the source's producer (a KV cache's write:
    /// the key or value's bias add). Otherwise it is an extern call. A kernel that
    /// computes a state's whole new value stores it into the state too ([`state`]).
    pub state_scatter: bool,
    /// A reduction may take in the reduction kernel of fewer rows that its input
    /// broadcasts across its rows, computing each of those rows again per row
    /// of its own (`fuse::takes_in`: a layer norm before a one-row product, one
    /// launch fewer): for a device whose programs run side by side and read
    /// the repeated rows from cache (a GPU's).
    pub broadcast_rows: bool,
    /// Adjacent small pointwise kernels that share no buffer they write run as one
    /// kernel ([`horizontal`]): for a device where a launch costs more than such a
    /// kernel's work (a GPU's).
    pub horizontal: bool,
}

/// How the scheduler may re-split a pointwise kernel's flat space into rows
/// × row elements.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Tiling {
    /// Every pointwise kernel stays flat.
    #[default]
    Flat,
    /// Kernels that read across the dim they write along run on
    /// two-dimensional tiles ([`tile::tiled_space`]): for Triton kernels,
    /// whose launches take a tile of rows by row elements.
    Tiles,
    /// Kernels whose flat index wraps (a broadcast operand, `x % n`) loop over
    /// rows and, inside a row, over elements every access steps through by one
    /// or not at all ([`tile::row_space`]): for C++ kernels, whose inner loop
    /// the compiler vectorises only when no index wraps inside it.
    Rows,
}

/// A step before the stores nobody reads are dropped.
enum Pending {
    Kernel {
        ops: Vec<&'static str>,
        space: ir::Space,
        exprs: ir::ExprArena,
        reductions: Vec<ir::Reduction>,
        stores: Vec<ir::Store>,
    },
    Extern(ir::ExternCall),
}

/// A buffer of `program` with a symbolic size, and its shape: the code generators
/// take integer sizes only so far (docs/dynamic-shapes.md, step 4).
pub fn symbolic_buffer(program: &Program) -> Option<(&str, &[Size])> {
    program
        .buffers
        .iter()
        .find(|b| b.shape.iter().any(|s| !s.is_const()))
        .map(|b| (b.name.as_str(), b.shape.as_slice()))
}

/// Lowers, fuses and plans a validated graph (after the passes), using no
/// optional backend feature.
pub fn schedule(graph: &Graph) -> Result<Scheduled, Error> {
    schedule_with(graph, &Options::default())
}

/// Lowers, fuses and plans a validated graph (after the passes) for a device.
pub fn schedule_with(graph: &Graph, options: &Options) -> Result<Scheduled, Error> {
    let _span = tracing::debug_span!("schedule", graph = %graph.name).entered();
    let mut low = lower::lower_with(graph, options)?;
    let groups = fuse::fuse(graph, &low, options.broadcast_rows);
    let mut needed: HashSet<BufferId> = low.outputs.iter().map(|v| v.buf).collect();
    let mut steps = Vec::new();
    for group in &groups {
        match group {
            Group::Kernel { members, space } => {
                let space = &match options.tiling {
                    Tiling::Flat => space.clone(),
                    Tiling::Tiles => tile::tiled_space(graph, &low, members, space.clone()),
                    Tiling::Rows => tile::row_space(graph, &low, members, space.clone()),
                };
                let mut b = KernelBuilder::new(graph, &low, space.clone());
                for m in members {
                    b.add(*m).map_err(|e| {
                        Error::Internal(format!("a fused node no longer builds: {}", e.0))
                    })?;
                }
                needed.extend(b.external.iter().map(|n| low.snodes[*n].buf));
                let ops = b
                    .covers
                    .iter()
                    .filter_map(|n| graph.node(*n))
                    .map(|n| n.op.name())
                    .filter(|n| !matches!(*n, "input" | "constant"))
                    .collect();
                steps.push((
                    b.covers.clone(),
                    Pending::Kernel {
                        ops,
                        space: space.clone(),
                        exprs: b.exprs,
                        reductions: b.reductions,
                        stores: b.stores.into_iter().map(|(_, s)| s).collect(),
                    },
                ));
            }
            Group::Extern(id) => {
                let s = &low.snodes[*id];
                let SKind::Extern { op, args } = &s.kind else {
                    return Err(Error::Internal("extern group of a non-extern node".into()));
                };
                needed.extend(args.iter().map(|a| a.buf));
                let (node, out) = (s.value.node, s.buf);
                let mut call = ir::ExternCall {
                    op: op.clone(),
                    args: args.clone(),
                    out,
                    scratch: None,
                };
                split_attention(&mut call, &mut low.buffers, options.attention_units);
                steps.push((vec![node], Pending::Extern(call)));
            }
        }
    }
    // Keep only the stores somebody reads; a kernel left with none is dead.
    let mut kept = Vec::new();
    let mut covers = Vec::new();
    for (cover, step) in steps {
        match step {
            Pending::Kernel {
                ops,
                space,
                exprs,
                reductions,
                mut stores,
            } => {
                // A scatter writes state, which the caller reads.
                stores.retain(|s| needed.contains(&s.buf) || !s.indirect.is_empty());
                if !stores.is_empty() {
                    kept.push(Step::Kernel(Kernel::new(
                        ops, space, exprs, reductions, stores,
                    )));
                    covers.push(cover);
                }
            }
            Pending::Extern(call) => {
                kept.push(Step::Extern(call));
                covers.push(cover);
            }
        }
    }
    if options.horizontal {
        (kept, covers) = horizontal::merge_small_pointwise(kept, covers, &low.buffers);
    }
    let mut program = Program {
        name: graph.name.clone(),
        buffers: low.buffers,
        inputs: low.inputs,
        outputs: low.outputs,
        steps: kept,
        symbols: graph.symbols().clone(),
    };
    let inplace = options
        .features
        .contains(kiln_plugin_api::BackendFeatures::INPLACE_BUFFERS);
    let inplace = match (inplace, options.inplace_reductions) {
        (false, _) => InPlace::Never,
        (true, false) => InPlace::Pointwise,
        (true, true) => InPlace::AlsoReductions,
    };
    if options.state_scatter {
        state::write_state_in_place(&mut program, graph.state());
    }
    let memory = plan_memory(&program, inplace);
    let state: Vec<BufferId> = graph
        .state()
        .iter()
        .filter_map(|s| program.inputs.get(s.input).copied())
        .collect();
    index_copies_in_place(&mut program, &memory, &state);
    Ok(Scheduled {
        program,
        memory,
        covers,
    })
}

/// Every scheduler node as its own kernel, before fusion (`ir_pre_fusion.txt`),
/// lowered as `options` lower it.
pub fn pre_fusion_text(graph: &Graph, options: &Options) -> Result<String, Error> {
    use std::fmt::Write;
    let low = lower::lower_with(graph, options)?;
    let program = Program {
        name: graph.name.clone(),
        buffers: low.buffers.clone(),
        inputs: low.inputs.clone(),
        outputs: low.outputs.clone(),
        steps: Vec::new(),
        symbols: graph.symbols().clone(),
    };
    let mut out = format!(
        "graph {}: {} scheduler node(s) before fusion\n",
        graph.name,
        low.snodes.len()
    );
    for (id, s) in low.snodes.iter_enumerated() {
        let i = id.0;
        let name = graph.node(s.value.node).map_or("?", |n| n.name.as_str());
        match build::natural_space(&low, graph, id) {
            None => {
                let _ = writeln!(out, "  node {i} `{name}`: extern {}", s.op_name);
            }
            Some(space) => {
                let mut b = KernelBuilder::new(graph, &low, space.clone());
                b.add(id).map_err(|e| {
                    Error::Internal(format!("node `{name}` does not build alone: {}", e.0))
                })?;
                let k = Kernel::new(
                    vec![s.op_name],
                    space.clone(),
                    b.exprs,
                    b.reductions,
                    b.stores.into_iter().map(|(_, s)| s).collect(),
                );
                let _ = writeln!(
                    out,
                    "  node {i} `{name}`: {} over x={} r={}",
                    s.op_name, space.x, space.r
                );
                out.push_str(&print::kernel_text(&program, &k));
            }
        }
    }
    Ok(out)
}

/// Whether a kernel may write `out` over `old`: `old` is a computed buffer of
/// the same size and dtype that the kernel reads only at the very index it
/// stores `out` at (so every element is read before it is written, by the
/// same program). In a reduction kernel the store must also depend on every
/// reduction: it is then made in the final pass over each row, after every
/// pass that reads the row for a reduction (a layer norm's normalized row over
/// its input).
/// Whether two buffers of one dtype take the same storage for every size: their
/// element counts are one expression (equal at the hints is not enough).
fn same_storage(a: &Buffer, b: &Buffer) -> bool {
    index::product(&a.shape) == index::product(&b.shape)
}

fn inplace_ok(
    program: &Program,
    step: &Step,
    old: BufferId,
    out: BufferId,
    inplace: InPlace,
) -> bool {
    let Step::Kernel(k) = step else { return false };
    if k.space.is_reduction() && inplace != InPlace::AlsoReductions {
        return false;
    }
    let (a, b) = (program.buffer(old), program.buffer(out));
    let after_reductions = |value| k.exprs.reductions_used(value).len() == k.reductions.len();
    if !matches!(a.kind, BufferKind::Computed)
        || !same_storage(a, b)
        || a.dtype != b.dtype
        || k.stores.len() != 1
    {
        return false;
    }
    let store = &k.stores[0];
    store.buf == out
        && after_reductions(store.value)
        && k.exprs.iter().all(|(_, e, _)| match e {
            ir::Expr::Load {
                buf,
                index,
                guards,
                indirect,
            } if *buf == old => *index == store.index && guards.is_empty() && indirect.is_empty(),
            _ => true,
        })
}

/// Most key ranges one attention call is split into, and fewest keys in one (a block of
/// 64 keys, as the kernel takes them in a decoding step). On the H100, over a cache of 1024, ranges of 64 keys rather than
/// 128 took GPT-2 small's decoding step (12 heads: 16 ranges a head, not 8) from 0.304
/// to 0.298 ms in bfloat16 and from 0.384 to 0.357 ms in float32, under CUDA graphs;
/// the 170 M Llama's (16 heads: 16 ranges, not 8) took 0.98-1.00 of its time, and batches of 8 (enough
/// heads for 4 ranges either way) the same. Ranges of 32 were slower than 64 for that
/// kernel of 16 query rows a tile (`bench/gpu/results/2026-11-26-split-keys-h100.txt`).
const MAX_SPLITS: i64 = 64;
const MIN_SPLIT_KEYS: i64 = 64;
/// Fewest keys in one range where the query has one row: the split kernel then takes
/// one row a program and sums in registers (`codegen::triton::attention`'s one-row
/// form), and shorter ranges in more programs were faster (GPT-2 small's heads over
/// a cache of 1024 on the H100: 4.0 us a layer in ranges of 32 keys, 4.3 in 64).
const MIN_SPLIT_KEYS_ONE_ROW: i64 = 32;

/// Splits the keys of fused attention `call` across programs (flash-decoding) where its
/// query has few rows (at most 16: one block of them) and its (batch, head) pairs are
/// fewer than `units`: about two programs a unit, each over at least [`MIN_SPLIT_KEYS`]
/// keys ([`MIN_SPLIT_KEYS_ONE_ROW`] for a query of one row), a power of two of them. The partial results (each row's values, running max
/// and sum) go to a float32 scratch buffer of the call's own.
fn split_attention(
    call: &mut ir::ExternCall,
    buffers: &mut ids::IdVec<BufferId, ir::Buffer>,
    units: u32,
) {
    let ir::ExternOp::Attention { splits, .. } = &mut call.op else {
        return;
    };
    let (Some(q), Some(k), Some(v)) = (call.args.first(), call.args.get(1), call.args.get(2))
    else {
        return;
    };
    let rank = q.shape.len();
    if rank < 3 || k.shape.len() != rank || v.shape.len() != rank {
        return;
    }
    // Decided at the sizes' hints; the scratch buffer is sized for every size.
    let pair_dims = index::product(&q.shape[..rank - 2]);
    let (rows, pairs, keys) = (
        q.shape[rank - 2].hint(),
        pair_dims.hint(),
        k.shape[rank - 2].hint(),
    );
    let units = i64::from(units);
    if units == 0 || rows > 16 || pairs <= 0 || pairs >= units {
        return;
    }
    let wanted = ((2 * units + pairs - 1) / pairs) as u64;
    let min_keys = if rows == 1 {
        MIN_SPLIT_KEYS_ONE_ROW
    } else {
        MIN_SPLIT_KEYS
    };
    let cap = wanted
        .next_power_of_two()
        .min((keys / min_keys).clamp(0, MAX_SPLITS) as u64);
    if cap < 2 {
        return;
    }
    // The largest power of two within the cap (the combining kernel's range of splits).
    let n = 1i64 << (63 - cap.leading_zeros());
    let per_row = v.shape[rank - 1]
        .add(&Size::from(2))
        .and_then(|e| e.scale(n));
    let Ok(row_values) = per_row else {
        return;
    };
    let size = index::product(&[pair_dims, q.shape[rank - 2].clone(), row_values]);
    let scratch = buffers.push(ir::Buffer {
        name: "attention_splits".into(),
        dtype: crate::graph::dtype::DType::Float32,
        shape: vec![size],
        strides: vec![Size::from(1)],
        kind: BufferKind::Computed,
    });
    *splits = n as u32;
    call.scratch = Some(scratch);
}

/// Makes each `index_copy` write in place ([`ir::ExternOp::IndexCopy::in_place`]) whose
/// `self` is the whole of a graph input in `state` (a KV cache the program keeps) that
/// dies at the call and that no other operand reads: its result is then that input's
/// buffer, and only the copied slices are written. (A computed `self` is copied: its
/// storage goes to later buffers once it dies.)
fn index_copies_in_place(program: &mut Program, memory: &MemoryPlan, state: &[BufferId]) {
    for i in 0..program.steps.len() {
        let Step::Extern(e) = &program.steps[i] else {
            continue;
        };
        let (ir::ExternOp::IndexCopy { .. }, [x, index, source]) = (&e.op, e.args.as_slice())
        else {
            continue;
        };
        let (old, new) = (program.buffer(x.buf), program.buffer(e.out));
        let whole =
            x.offset.as_const() == Some(0) && x.shape == old.shape && x.strides == old.strides;
        let ok = whole
            && state.contains(&x.buf)
            && (&old.shape, &old.strides, old.dtype) == (&new.shape, &new.strides, new.dtype)
            && memory.frees[i].contains(&x.buf)
            && index.buf != x.buf
            && source.buf != x.buf;
        if let Step::Extern(ir::ExternCall {
            op: ir::ExternOp::IndexCopy { in_place, .. },
            ..
        }) = &mut program.steps[i]
        {
            *in_place = ok;
        }
    }
}

/// Which kernels may write their output over a buffer they are the last to read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InPlace {
    /// None: every output takes a fresh or dead buffer.
    Never,
    /// Pointwise kernels.
    Pointwise,
    /// Pointwise kernels, and reduction kernels whose store comes after every
    /// reduction.
    AlsoReductions,
}

/// Lifetimes and reuse: a computed buffer is allocated right before the step
/// that writes it, takes the storage of a dead buffer of the same size and
/// dtype when there is one, and is freed after its last reader; inputs are
/// freed after their last reader too; outputs live on. With `inplace` (the
/// device's `INPLACE_BUFFERS`), a kernel writes over a buffer whose last
/// reader it is ([`inplace_ok`]) in preference to any other.
pub fn plan_memory(program: &Program, inplace: InPlace) -> MemoryPlan {
    let n = program.steps.len();
    let outputs: HashSet<BufferId> = program.outputs.iter().map(|v| v.buf).collect();
    let mut last_use: HashMap<BufferId, usize> = HashMap::new();
    for (i, step) in program.steps.iter().enumerate() {
        for b in step.reads().into_iter().chain(step.writes()) {
            last_use.insert(b, i);
        }
    }
    let mut plan = MemoryPlan {
        allocs: vec![Vec::new(); n],
        frees: vec![Vec::new(); n],
    };
    let mut free_pool: Vec<BufferId> = Vec::new();
    let mut taken_inplace: Vec<BufferId> = Vec::new();
    for (i, step) in program.steps.iter().enumerate() {
        // A kernel may write an input (state, in place): the caller's storage.
        let computed = |b: &BufferId| !matches!(program.buffer(*b).kind, BufferKind::Input { .. });
        for b in step.writes().into_iter().filter(computed) {
            let buf = program.buffer(b);
            // First a buffer whose last reader this kernel is: the kernel writes
            // over what it has just read, the lines its producer left in the
            // cache, rather than touching a third buffer (Inductor's in-place
            // buffers). Then a dead buffer of the same size and dtype.
            let mut reuse = None;
            if inplace != InPlace::Never && !outputs.contains(&b) {
                reuse = step.reads().into_iter().find(|old| {
                    last_use.get(old) == Some(&i)
                        && !outputs.contains(old)
                        && !taken_inplace.contains(old)
                        && inplace_ok(program, step, *old, b, inplace)
                });
                taken_inplace.extend(reuse);
            }
            if reuse.is_none() && !outputs.contains(&b) {
                reuse = free_pool
                    .iter()
                    .position(|d| {
                        let donor = program.buffer(*d);
                        same_storage(donor, buf) && donor.dtype == buf.dtype
                    })
                    .map(|p| free_pool.remove(p));
            }
            plan.allocs[i].push(Alloc { buf: b, reuse });
        }
        let mut dead: Vec<BufferId> = last_use
            .iter()
            .filter(|(b, last)| **last == i && !outputs.contains(b))
            .map(|(b, _)| *b)
            .filter(|b| !matches!(program.buffer(*b).kind, BufferKind::Constant { .. }))
            .collect();
        dead.sort();
        for b in &dead {
            if matches!(program.buffer(*b).kind, BufferKind::Computed) && !taken_inplace.contains(b)
            {
                free_pool.push(*b);
            }
        }
        plan.frees[i] = dead;
    }
    plan
}
