//! The pass pipeline: batch-norm folding, decompositions, no-op removal, view
//! canonicalisation, constant folding, CSE and DCE, one file each, written out in order
//! in [`run_pipeline`].
//!
//! Every pass is a free function `run(&mut Graph) -> Result<Stats, Error>` with a
//! `tracing` span. After each pass the pipeline re-infers metadata and, in debug builds,
//! runs the verifier. Passes must preserve the graph's values (the interpreter gives the
//! same outputs before and after, up to rounding) and must never panic on a validated
//! graph.

pub mod attention_mask;
pub mod channels_last;
pub mod const_fold;
pub mod cse;
pub mod dce;
pub mod decompose;
pub mod empty;
pub mod few_rows;
pub mod fold_bn;
pub mod gqa;
pub mod merge_mm;
pub mod noop;
pub mod pad_mm;
pub mod split;
pub mod views;

use crate::graph::{self, Arg, Graph, Node, NodeId, Op, ValueId};
use std::fmt;
use std::time::{Duration, Instant};

/// Errors of the pass layer.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A pass produced an invalid graph or could not build a node.
    #[error("pass `{pass}` failed")]
    Pass {
        /// the pass
        pass: &'static str,
        /// why
        #[source]
        source: graph::Error,
    },
    /// The graph was invalid before any pass ran.
    #[error("invalid input graph")]
    Graph(#[from] graph::Error),
    /// The nodes form a cycle, so no topological sweep can visit them.
    #[error("pass `{pass}`: {at} is on a cycle")]
    Cycle {
        /// the pass
        pass: &'static str,
        /// a node on the cycle
        at: graph::At,
    },
    /// A node uses a feature of its op that Kiln does not implement.
    #[error("node `{node}`: {what}")]
    Unsupported {
        /// the node
        node: String,
        /// what it needs
        what: String,
    },
}

/// What a pass did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// nodes rewritten, replaced or removed
    pub changed: usize,
}

/// One line per pass: name, changes, time.
#[derive(Clone, Debug, Default)]
pub struct PipelineReport {
    /// passes in the order they ran
    pub passes: Vec<(&'static str, Stats, Duration)>,
}

impl fmt::Display for PipelineReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (name, s, t) in &self.passes {
            writeln!(
                f,
                "{name:<12} {:>7} changed {:>10.3} ms",
                s.changed,
                t.as_secs_f64() * 1e3
            )?;
        }
        Ok(())
    }
}

/// What the target computes whole, so that the pipeline keeps it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Options {
    /// `scaled_dot_product_attention` stays one node where the fused kernel of
    /// a Triton target takes it ([`decompose::run_with`]); the default
    /// decomposes it into matrix products and a softmax.
    pub fused_attention: bool,
    /// `_grouped_mm` ([`crate::graph::Op::GroupedMm`]) of at least
    /// [`decompose::GROUPED_MM_KERNEL_ROWS`] rows and static sizes stays one node, for a
    /// target with Kiln's grouped product kernel (Triton); the default, and fewer
    /// rows, spell it out as a reduction over K that reads each row's group's matrix.
    pub grouped_mm_kernel: bool,
    /// Reductions of many elements into few results are split in two for
    /// this device ([`split::run`]); one of no units splits none.
    pub split_reductions_for: split::Device,
    /// 3-D convolutions become sums of 2-D ones over the kernel's depth
    /// ([`decompose::run_with`]), for a target whose own convolution is 1-D or 2-D (the
    /// cpu's C++); the default keeps them whole (an extern call takes any rank).
    pub convs_in_2d: bool,
    /// [`pad_mm`]'s byte multiple for the dimensions of 16-bit matrix products
    /// (the device plugin's `matmul_alignment`); 0 pads none.
    pub matmul_alignment: u32,
    /// The dtypes whose 2-D convolutions [`channels_last`] carries in
    /// channels-last (the device plugin's `conv_channels_last`, for a target
    /// whose convolution takes channels-last operands); none changes nothing.
    pub conv_channels_last: channels_last::DTypes,
    /// Matrix products of at most this many rows become reductions
    /// ([`few_rows`]), for a target whose reduction kernels read a weight faster
    /// than its library's products do at a decoding step's size; 0 rewrites none.
    pub few_rows: i64,
    /// Boolean masks of 16-bit whole attentions become additive ones
    /// ([`attention_mask`]), for a wrapper that may run the library's attention.
    pub additive_attention_masks: bool,
}

/// A pass's entry function.
pub type PassFn = fn(&mut Graph) -> Result<Stats, Error>;

/// A pass's entry in the pipeline, given the pipeline's options.
pub type PipelineFn = fn(&mut Graph, &Options) -> Result<Stats, Error>;

/// The pipeline's passes in order, each with its name.
pub const PIPELINE: &[(&str, PipelineFn)] = &[
    // First: a value with no elements needs no op at all.
    ("empty", |g, _| empty::run(g)),
    // Before `decompose`, which lowers the batch norms left.
    ("fold_bn", |g, _| fold_bn::run(g)),
    ("decompose", decompose::run_with),
    ("noop", |g, _| noop::run(g)),
    ("views", |g, _| views::run(g)),
    ("noop", |g, _| noop::run(g)),
    // Products by constant weights that share their left operand become one; `cse`
    // first makes the operand one value (each linear layer reshapes it itself).
    ("cse", |g, _| cse::run(g)),
    ("merge_mm", |g, _| merge_mm::run(g)),
    // After products merge (one reduction for them all), before `pad_mm` pads what is left.
    ("few_rows", |g, o| few_rows::run(g, o.few_rows)),
    // After the views are settled, before constants fold: it adds padded constants.
    ("pad_mm", |g, o| pad_mm::run(g, o.matmul_alignment)),
    // A whole attention reads grouped key/value heads instead of their repetition.
    ("gqa", |g, _| gqa::run(g)),
    ("attention_mask", |g, o| {
        attention_mask::run(g, o.additive_attention_masks)
    }),
    ("split", |g, o| split::run(g, o.split_reductions_for)),
    ("const_fold", |g, _| const_fold::run(g)),
    // After constants fold, which would fold a small permuted weight back into a
    // contiguous constant; before `cse` and `dce`, which tidy what it leaves.
    ("channels_last", |g, o| {
        channels_last::run(g, o.conv_channels_last)
    }),
    ("cse", |g, _| cse::run(g)),
    ("dce", |g, _| dce::run(g)),
];

/// Runs every pass of [`PIPELINE`] in order with default [`Options`]. The graph's
/// metadata must be exact on entry (as [`graph::parse_toml`] or [`graph::validate`]
/// leave it).
pub fn run_pipeline(g: &mut Graph) -> Result<PipelineReport, Error> {
    run_pipeline_with(g, &Options::default())
}

/// [`run_pipeline`] with `options`.
pub fn run_pipeline_with(g: &mut Graph, options: &Options) -> Result<PipelineReport, Error> {
    let mut report = PipelineReport::default();
    for (name, pass) in PIPELINE {
        let t = Instant::now();
        let stats = pass(g, options)?;
        // Passes may replace a value by one with other strides (a dropped `contiguous`);
        // re-inference keeps every stored metadata exact for the next pass. Only what the
        // pass touched, and what depends on it, is inferred again.
        if stats.changed > 0 {
            graph::revalidate(g).map_err(|source| Error::Pass { pass: name, source })?;
        }
        #[cfg(debug_assertions)]
        graph::verify(g).map_err(|source| Error::Pass { pass: name, source })?;
        report.passes.push((name, stats, t.elapsed()));
    }
    Ok(report)
}

/// The graph's nodes in a topological order for pass `pass`'s sweep, or
/// [`Error::Cycle`] naming a node on a cycle (and its line, when known).
pub(crate) fn topo_order(g: &Graph, pass: &'static str) -> Result<Vec<NodeId>, Error> {
    g.topo_order().map_err(|id| {
        let at = match g.node(id) {
            Some(n) => graph::At {
                node: n.name.clone(),
                line: n.line,
            },
            None => graph::At {
                node: format!("#{}", id.index()),
                line: None,
            },
        };
        Error::Cycle { pass, at }
    })
}

/// Adds a node computing `op(args)` named after `base`, infers its metadata, and returns
/// its first output. Used by passes to build replacements.
pub(crate) fn emit(
    g: &mut Graph,
    pass: &'static str,
    base: &str,
    op: Op,
    args: Vec<Arg>,
    line: Option<u32>,
) -> Result<ValueId, Error> {
    let name = g.fresh_name(base);
    let id = g.add_node(Node {
        name,
        op,
        args,
        outputs: vec![],
        line,
    });
    graph::infer_node(g, id).map_err(|source| Error::Pass { pass, source })?;
    Ok(ValueId::first(id))
}

/// Replaces every output of `old` by the corresponding value and removes `old`.
pub(crate) fn replace_node(g: &mut Graph, old: NodeId, new: &[ValueId]) {
    for (i, v) in new.iter().enumerate() {
        g.replace_uses(
            ValueId {
                node: old,
                output: i as u32,
            },
            *v,
        );
    }
    if g.users(old).next().is_none() && !g.outputs().iter().any(|o| o.node == old) {
        g.remove_node(old);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `r1 = relu(x); r2 = relu(r1)`, then `r1` re-pointed at `r2`: a cycle of two.
    fn cyclic() -> Graph {
        let text = r#"
format = "kiln-graph/1"
name = "cyclic"
outputs = ["r2"]

[[inputs]]
name = "x"
shape = [4]
dtype = "float32"

[[nodes]]
name = "r1"
op = "relu"
args = ["x"]

[[nodes]]
name = "r2"
op = "relu"
args = ["r1"]
"#;
        let mut g = graph::parse_toml(text).expect("the test graph parses");
        let find = |g: &Graph, name: &str| {
            g.node_ids()
                .find(|&id| g.node(id).is_some_and(|n| n.name == name))
                .expect("the test graph has the node")
        };
        let (r1, r2) = (find(&g, "r1"), find(&g, "r2"));
        g.set_args(r1, vec![Arg::Value(ValueId::first(r2))]);
        g
    }

    #[test]
    fn every_sweeping_pass_reports_a_cycle_as_a_cycle() {
        const DEVICE: split::Device = split::Device {
            units: 132,
            program_warps: 0,
        };
        let passes: [(&str, PassFn); 7] = [
            ("fold_bn", fold_bn::run),
            ("decompose", decompose::run),
            ("noop", noop::run),
            ("views", views::run),
            ("split", |g| split::run(g, DEVICE)),
            ("const_fold", const_fold::run),
            ("cse", cse::run),
        ];
        for (name, pass) in passes {
            let err = pass(&mut cyclic()).expect_err(name);
            let message = err.to_string();
            assert!(
                matches!(&err, Error::Cycle { pass, at } if *pass == name
                    && (at.node == "r1" || at.node == "r2")
                    && at.line.is_some()),
                "{name}: {message}"
            );
            assert!(message.contains("is on a cycle"), "{name}: {message}");
        }
    }
}
