//! Boolean attention masks made additive, once per mask.
//!
//! The library's 16-bit attention kernels that take a mask (cuDNN's, which
//! PyTorch's `scaled_dot_product_attention` picks for masked float16/bfloat16
//! attention on recent NVIDIA parts) add it to the scores. Given a boolean mask,
//! the library converts it at every call: on an H100 that is 11 of BERT-base's
//! 47 us per layer at 8 x 512 in bfloat16
//! (`bench/gpu/results/2026-11-26-mask-forms-h100.txt`), and a model's layers
//! share one mask. Made additive in the graph (`where(mask, 0, -inf)` in the
//! attention's dtype), the conversion is computed once and fuses into the kernel
//! that computes the mask, as Inductor's decomposition does. Kiln's own kernel
//! adds a floating mask where it would select on a boolean one: the same scores,
//! `s + 0` where kept and `-inf` where not.
//!
//! Only whole float16/bfloat16 attentions with a boolean mask change, on targets
//! whose wrapper may run the library's kernel (the Python wrapper's runtime
//! choice); float32 attention, where Kiln's kernel is chosen, keeps the
//! one-byte mask.

use std::collections::HashMap;

use super::{emit, Error, Stats};
use crate::graph::{Arg, DType, Graph, Op, Scalar, ValueId};

const PASS: &str = "attention_mask";

/// Makes the boolean masks of 16-bit attentions additive (`enabled`: the
/// target may run the library's attention).
pub fn run(g: &mut Graph, enabled: bool) -> Result<Stats, Error> {
    let _span = tracing::info_span!("attention_mask").entered();
    let mut changed = 0;
    if !enabled {
        return Ok(Stats { changed });
    }
    // One additive mask per boolean mask and dtype, shared by every attention reading it.
    let mut additive: HashMap<(ValueId, DType), ValueId> = HashMap::new();
    for id in super::topo_order(g, PASS)? {
        let Some(node) = g.node(id) else { continue };
        let Op::Attention { mask: true, .. } = node.op else {
            continue;
        };
        let (Some(q), Some(m)) = (
            node.args.first().and_then(Arg::value),
            node.args.get(3).and_then(Arg::value),
        ) else {
            continue;
        };
        let (Some(dtype), Some(DType::Bool)) =
            (g.meta(q).map(|t| t.dtype), g.meta(m).map(|t| t.dtype))
        else {
            continue;
        };
        if !matches!(dtype, DType::Float16 | DType::BFloat16) {
            continue;
        }
        let (name, line, mut args) = (node.name.clone(), node.line, node.args.clone());
        let value = match additive.get(&(m, dtype)) {
            Some(v) => *v,
            None => {
                let v = additive_of(g, m, dtype, &name, line)?;
                additive.insert((m, dtype), v);
                v
            }
        };
        args[3] = Arg::Value(value);
        g.set_args(id, args);
        changed += 1;
    }
    Ok(Stats { changed })
}

/// `where(mask, 0, -inf)` in `dtype`, computed where `mask`'s chain of views
/// has the fewest elements (a padding mask `[B, 1, 1, S]` expanded to `[B, 1, L, S]`
/// is converted before the expand), and the views after that point applied to it.
fn additive_of(
    g: &mut Graph,
    mask: ValueId,
    dtype: DType,
    name: &str,
    line: Option<u32>,
) -> Result<ValueId, Error> {
    // `values[i + 1]` is what view `views[i]` reads; `values[0]` is the mask.
    let (mut values, mut views) = (vec![mask], vec![]);
    while let Some(node) = g.node(values[values.len() - 1].node) {
        match node.args[..] {
            [Arg::Value(from)] if node.op.is_view() && node.outputs.len() == 1 => {
                views.push(node.op.clone());
                values.push(from);
            }
            _ => break,
        }
    }
    // Sizes at their hints: a decision, which any point of the chain leaves correct.
    let count = |v: &ValueId| {
        g.meta(*v).map_or(i64::MAX, |m| {
            m.hint_shape()
                .iter()
                .fold(1i64, |n, d| n.saturating_mul(*d))
        })
    };
    let start = (0..values.len())
        .min_by_key(|&i| (count(&values[i]), i))
        .unwrap_or(0);
    let base = format!("{name}_mask");
    let selected = emit(
        g,
        PASS,
        &base,
        Op::Where,
        vec![
            Arg::Value(values[start]),
            Arg::Scalar(Scalar::Float(0.0)),
            Arg::Scalar(Scalar::Float(f64::NEG_INFINITY)),
        ],
        line,
    )?;
    let mut v = emit(
        g,
        PASS,
        &base,
        Op::Cast { dtype },
        vec![Arg::Value(selected)],
        line,
    )?;
    for op in views[..start].iter().rev() {
        v = emit(g, PASS, &base, op.clone(), vec![Arg::Value(v)], line)?;
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::parse_toml;

    fn graph(dtype: &str, mask_dtype: &str, layers: usize) -> Graph {
        parse_toml(&graph_text(dtype, mask_dtype, layers)).expect("the test graph parses")
    }

    fn graph_text(dtype: &str, mask_dtype: &str, layers: usize) -> String {
        let mut text = format!(
            "format = \"kiln-graph/1\"\nname = \"t\"\noutputs = [\"a{}\"]\n\
             [[inputs]]\nname = \"q\"\ndtype = \"{dtype}\"\nshape = [2, 4, 8, 16]\n\
             [[inputs]]\nname = \"m\"\ndtype = \"{mask_dtype}\"\nshape = [2, 1, 8, 8]\n",
            layers - 1
        );
        let mut last = "q".to_string();
        for i in 0..layers {
            text.push_str(&format!(
                "[[nodes]]\nname = \"a{i}\"\nop = \"scaled_dot_product_attention\"\n\
                 args = [\"{last}\", \"{last}\", \"{last}\", \"m\"]\n"
            ));
            last = format!("a{i}");
        }
        text
    }

    /// The graph of [`graph`] over a batch and length of symbolic sizes (`[dims]`,
    /// kept as symbols, as `--dynamic` keeps them).
    fn symbolic(dtype: &str, layers: usize) -> Graph {
        let text = graph_text(dtype, "bool", layers)
            .replace("shape = [2, 4, 8, 16]", "shape = [\"b\", 4, \"l\", 16]")
            .replace("shape = [2, 1, 8, 8]", "shape = [\"b\", 1, \"l\", \"l\"]");
        let dims = "[dims]\nb = { min = 1, max = 64, example = 2 }\nl = { min = 2, max = 512, example = 8 }\n";
        let text = text.replacen("[[inputs]]", &format!("{dims}[[inputs]]"), 1);
        crate::graph::front::toml::parse_toml_sized(&text, &[], true)
            .expect("the symbolic graph parses")
    }

    fn masks(g: &Graph) -> Vec<(ValueId, DType)> {
        g.topo_order()
            .expect("acyclic")
            .into_iter()
            .filter_map(|id| {
                let n = g.node(id)?;
                matches!(n.op, Op::Attention { .. }).then(|| {
                    let m = n.args[3].value().expect("a mask value");
                    (m, g.meta(m).expect("meta").dtype)
                })
            })
            .collect()
    }

    #[test]
    fn a_boolean_mask_of_16_bit_attentions_becomes_one_additive_mask() {
        for dtype in ["float16", "bfloat16"] {
            let mut g = graph(dtype, "bool", 3);
            let stats = run(&mut g, true).expect("the pass runs");
            assert_eq!(stats.changed, 3);
            let read = masks(&g);
            let want = DType::parse(dtype).expect("a dtype");
            assert!(
                read.iter().all(|&(v, d)| v == read[0].0 && d == want),
                "{read:?}"
            );
            let cast = g.node(read[0].0.node).expect("the mask's node");
            assert!(matches!(cast.op, Op::Cast { .. }), "{:?}", cast.op);
            let select = g
                .node(cast.args[0].value().expect("a value").node)
                .expect("a node");
            assert!(matches!(select.op, Op::Where));
            assert_eq!(select.args[1], Arg::Scalar(Scalar::Float(0.0)));
            assert_eq!(
                select.args[2],
                Arg::Scalar(Scalar::Float(f64::NEG_INFINITY))
            );
        }
    }

    #[test]
    fn a_boolean_mask_over_symbolic_sizes_becomes_one_additive_mask_too() {
        let mut g = symbolic("bfloat16", 3);
        let stats = run(&mut g, true).expect("the pass runs");
        assert_eq!(stats.changed, 3);
        let read = masks(&g);
        assert!(
            read.iter()
                .all(|&(v, d)| v == read[0].0 && d == DType::BFloat16),
            "{read:?}"
        );
        let meta = g.meta(read[0].0).expect("the mask's meta");
        assert!(!meta.shape[0].is_const(), "{meta:?}");
    }

    #[test]
    fn float32_attentions_floating_masks_and_other_targets_are_left_alone() {
        for (dtype, mask, enabled) in [
            ("float32", "bool", true),
            ("bfloat16", "bfloat16", true),
            ("bfloat16", "bool", false),
        ] {
            let mut g = graph(dtype, mask, 2);
            let before = masks(&g);
            let stats = run(&mut g, enabled).expect("the pass runs");
            assert_eq!(stats.changed, 0, "{dtype} {mask} {enabled}");
            assert_eq!(masks(&g), before);
        }
    }
}
