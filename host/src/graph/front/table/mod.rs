//! The op table: the one place where an op name (an ATen name, or one of Kiln's own)
//! gets its meaning, for every front end (the TOML reader, the `.pt2` importer, and
//! the FX front end to come).
//!
//! Each name is exactly one [`Entry`]:
//! - a **binding** (`bind.rs`): a signature with defaults that builds the typed
//!   [`Op`](crate::graph::ops::Op) and its tensor operands;
//! - a **rewrite** (`rewrite.rs`): another op of the table with its arguments
//!   rewritten, once the operands' shapes and dtypes are known (`t` is a `permute`
//!   of the operand's rank, `expand_as` an `expand` to the other operand's shape);
//! - an **expansion** (`expand.rs`): a short program of bound ops (`stack` is
//!   unsqueezes and a `cat`, `einsum` permutes, reshapes and batched products).
//!
//! A front end calls [`lower`] with a [`Call`] (the node's name, the op name, its
//! positional and keyword arguments) and the metadata of the tensors it has built so
//! far; rewrites and expansions read only the operands' metadata and the arguments,
//! never a recorded output, so that every front end can use every entry. This module
//! resolves no tensor names and builds no graph nodes: that is the front end's part.
//!
//! Adding an ATen name for ops Kiln has is one entry here: a signature in
//! `bind/signatures.rs` and its arm in `bind/build.rs`, or a rewrite in `rewrite.rs`,
//! or an expansion in `expand.rs` (or `expand/more.rs`), each listed with its
//! parameters; and a case in `host/tests/op_table.rs`, which fails for any name of
//! the table without one.

pub mod bind;
mod expand;
mod rewrite;

pub use bind::{Operand, Raw, SigError};
pub use expand::{Expansion, Step};

use crate::graph::ops::Op;
use std::collections::HashMap;
use std::sync::OnceLock;

/// How the table gives a name its meaning.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum How {
    /// bound by a signature straight to a typed op
    Bind,
    /// rewritten into another op of the table
    Rewrite,
    /// spelled out as a short program of bound ops
    Expand,
}

/// One name of the table.
#[derive(Clone, Copy, Debug)]
pub struct Entry {
    /// the op name (an ATen name with namespace and overload dropped)
    pub name: &'static str,
    /// what the name stands for
    pub how: How,
    /// a rewrite's or expansion's parameter names (a binding's are its signature's)
    names: &'static [&'static str],
}

impl Entry {
    /// The parameter names in ATen order, which positional arguments bind to.
    pub fn params(&self) -> Vec<&'static str> {
        match self.how {
            How::Bind => bind::param_names(self.name).unwrap_or_default(),
            How::Rewrite | How::Expand => self.names.to_vec(),
        }
    }
}

/// Every entry of the table: bindings, rewrites, expansions.
pub fn entries() -> impl Iterator<Item = Entry> {
    bind::op_names()
        .map(|name| Entry {
            name,
            how: How::Bind,
            names: &[],
        })
        .chain(rewrite::ENTRIES.iter().map(|&(name, params)| Entry {
            name,
            how: How::Rewrite,
            names: params,
        }))
        .chain(expand::ENTRIES.iter().map(|&(name, params)| Entry {
            name,
            how: How::Expand,
            names: params,
        }))
}

/// The entry named `name`, if the table has one.
pub fn entry(name: &str) -> Option<Entry> {
    // Looked up once per node of a graph file: a map, not a scan of the lists.
    static BY_NAME: OnceLock<HashMap<&'static str, Entry>> = OnceLock::new();
    BY_NAME
        .get_or_init(|| entries().map(|e| (e.name, e)).collect())
        .get(name)
        .copied()
}

/// Whether the table knows `name`.
pub fn is_known(name: &str) -> bool {
    entry(name).is_some()
}

/// Every op name of the table.
pub fn op_names() -> impl Iterator<Item = &'static str> {
    entries().map(|e| e.name)
}

/// The known op names closest to an unknown `name` (a typo's likely fixes),
/// best first: at most three, each within about a third of its length in
/// edits and close to the best.
pub fn similar_ops(name: &str) -> Vec<&'static str> {
    let mut scored: Vec<(f64, &'static str)> = op_names()
        .map(|known| (strsim::normalized_damerau_levenshtein(name, known), known))
        .filter(|(score, _)| *score >= 0.6)
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(b.1)));
    scored.dedup_by(|a, b| a.1 == b.1);
    let best = scored.first().map_or(0.0, |s| s.0);
    scored
        .into_iter()
        .take_while(|(score, _)| *score >= best - 0.1)
        .take(3)
        .map(|(_, n)| n)
        .collect()
}

/// One node as a front end read it, before any tensor name is resolved.
#[derive(Clone, Copy, Debug)]
pub struct Call<'a> {
    /// the node's name: an expansion names its intermediate tensors after it
    pub node: &'a str,
    /// the op name
    pub op: &'a str,
    /// the positional arguments, in the entry's parameter order
    pub args: &'a [Raw],
    /// the keyword arguments
    pub kwargs: &'a [(String, Raw)],
}

/// What a call lowers to.
#[derive(Debug)]
pub enum Lowered {
    /// one typed op and its tensor operands in ATen order
    Op {
        /// the op
        op: Op,
        /// its operands
        operands: Vec<Operand>,
    },
    /// a short program of bound ops (see [`Expansion`])
    Expansion(Expansion),
}

/// The metadata of the tensors a front end has built, their sizes possibly symbolic:
/// `None` for a name that is no tensor (yet).
pub type Metas<'a> = &'a dyn Fn(&str) -> Option<crate::graph::ir::TensorMeta>;

/// Lowers one call through the table: rewrites are followed to the op they name,
/// expansions spelled out, and bindings built. `metas` gives the operands' shapes
/// and dtypes (rewrites and expansions need them; bindings never look).
pub fn lower(call: &Call<'_>, metas: Metas<'_>) -> Result<Lowered, SigError> {
    let entry = entry(call.op).ok_or_else(|| SigError::UnknownOp(call.op.into()))?;
    let respelled: Vec<(String, Raw)>;
    let kwargs = if call
        .kwargs
        .iter()
        .any(|(k, _)| respelling(call.op, k).is_some())
    {
        respelled = call
            .kwargs
            .iter()
            .map(|(k, v)| (respelling(call.op, k).unwrap_or(k).to_string(), v.clone()))
            .collect();
        &respelled
    } else {
        call.kwargs
    };
    // `convolution`, `conv1d/2d/3d`, `max`/`min`, `clamp`, `index_copy`, `cat` and
    // `_grouped_mm` are bindings that a rewrite or an expansion refines (by the weight's
    // rank; with a padding named by a string; over a dim; with a tensor bound; of a 0-d
    // tensor; without PyTorch's legacy empty operands; in a layout other than 2-D by 3-D).
    if entry.how == How::Bind
        && !matches!(
            call.op,
            "convolution"
                | "conv1d"
                | "conv2d"
                | "conv3d"
                | "max"
                | "min"
                | "clamp"
                | "index_copy"
                | "cat"
                | "_grouped_mm"
        )
    {
        let (op, operands) = bind::bind(call.op, call.args, kwargs)?;
        return Ok(Lowered::Op { op, operands });
    }
    let mut attrs = named(&entry, call.args, kwargs)?;
    if let Some(x) = expand::expand(call.node, entry.name, &attrs, metas)? {
        return Ok(Lowered::Expansion(x));
    }
    let op = rewrite::rewrite(entry.name, &mut attrs, metas)?;
    let (op, operands) = bind::bind(op, &[], &attrs)?;
    Ok(Lowered::Op { op, operands })
}

/// Binds only (no rewrite, no expansion): an expansion's own steps, which name ops of
/// the op set by keyword.
pub fn bind_step(op: &str, kwargs: &[(String, Raw)]) -> Result<(Op, Vec<Operand>), SigError> {
    bind::bind(op, &[], kwargs)
}

/// ATen's names of parameters the table names otherwise: (op, ATen's, the table's).
const PARAM_SPELLINGS: &[(&str, &str, &str)] = &[("pow", "exponent", "other")];

/// The table's name for parameter `param` of `op` where ATen spells it otherwise.
fn respelling(op: &str, param: &str) -> Option<&'static str> {
    PARAM_SPELLINGS
        .iter()
        .find(|(o, p, _)| *o == op && *p == param)
        .map(|(_, _, to)| *to)
}

/// Whether parameter `param` of `op` may name a tensor: false for those whose strings
/// are a dtype, a mode or an equation. A front end that orders nodes by the names
/// they read asks it.
pub fn may_name_tensors(op: &str, param: &str) -> bool {
    bind::names_tensors(op, param).unwrap_or(!matches!(
        param,
        "equation" | "dtype" | "approximate" | "mode" | "rounding_mode" | "reduce"
    ))
}

/// Whether positional argument `i` of `op` may name a tensor ([`may_name_tensors`] of
/// the parameter it binds to; true past the parameters, which binding refuses).
pub fn arg_may_name_tensors(op: &str, i: usize) -> bool {
    match entry(op) {
        Some(e) if e.how == How::Bind => bind::names_tensors_at(op, i).unwrap_or(true),
        Some(e) => e.names.get(i).is_none_or(|p| may_name_tensors(op, p)),
        None => true,
    }
}

/// A call's arguments all by keyword, positional ones named by the entry's parameters.
fn named(
    entry: &Entry,
    args: &[Raw],
    kwargs: &[(String, Raw)],
) -> Result<Vec<(String, Raw)>, SigError> {
    let params = entry.params();
    if args.len() > params.len() {
        return Err(SigError::TooMany {
            op: entry.name.into(),
            max: params.len(),
            found: args.len(),
        });
    }
    let mut attrs: Vec<(String, Raw)> = params
        .iter()
        .zip(args)
        .map(|(p, a)| ((*p).to_string(), a.clone()))
        .collect();
    for (k, v) in kwargs {
        if attrs.iter().any(|(n, _)| n == k) {
            return Err(SigError::Twice(k.clone()));
        }
        attrs.push((k.clone(), v.clone()));
    }
    Ok(attrs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_front_end_table_names_each_op_once() {
        let mut names: Vec<&str> = op_names().collect();
        assert!(names.iter().all(|n| is_known(n)));
        let count = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), count, "an op is listed twice");
    }

    #[test]
    fn front_end_typos_suggest_the_op_meant_and_nonsense_suggests_nothing() {
        assert_eq!(similar_ops("sofmax"), ["softmax"]);
        assert_eq!(similar_ops("layernorm"), ["layer_norm"]);
        assert_eq!(similar_ops("rleu"), ["relu"]);
        assert_eq!(similar_ops("matmull"), ["matmul"]);
        assert!(similar_ops("zzz").is_empty());
        assert!(similar_ops("fft_rfft2").is_empty());
        assert_eq!(similar_ops("convolutoin"), ["convolution"]);
    }
}
