//! A readable dump of a scheduled program (`ir_post_fusion.txt`).

use std::fmt::Write;

use super::ir::{Expr, Kernel, Literal, Program, Step};
use super::{MemoryPlan, Scheduled};

fn literal(l: Literal) -> String {
    match l {
        Literal::Float(bits) => format!("{:?}", f64::from_bits(bits)),
        Literal::Int(i) => i.to_string(),
        Literal::Bool(b) => b.to_string(),
    }
}

/// One kernel's expressions, reductions and stores.
pub fn kernel_text(program: &Program, k: &Kernel) -> String {
    let mut out = String::new();
    for (id, e, dtype) in k.exprs.iter() {
        let text = match e {
            Expr::Load {
                buf,
                index,
                guards,
                indirect,
            } => {
                let mut t = format!("load {}[{index}", program.buffer(*buf).name);
                indirect_text(&mut t, indirect);
                t.push(']');
                guards_text(&mut t, guards);
                t
            }
            Expr::Literal(l) => literal(*l),
            Expr::Unary(op, a) => format!("{op:?}(t{})", a.0),
            Expr::Binary(op, a, b) => format!("{op:?}(t{}, t{})", a.0, b.0),
            Expr::Where(c, a, b) => format!("where(t{}, t{}, t{})", c.0, a.0, b.0),
            Expr::Cast(a) => format!("cast(t{})", a.0),
            Expr::Select(c, a, b) => format!(
                "t{} if {} <= {} < {} else t{}",
                a.0, c.lo, c.index, c.hi, b.0
            ),
            Expr::Reduced(n) => format!("reduction{n}"),
        };
        let _ = writeln!(out, "    t{} = {text}  # {}", id.0, dtype.name());
    }
    for (n, r) in k.reductions.iter().enumerate() {
        let _ = writeln!(
            out,
            "    reduction{n} = {:?}(t{}) in {}",
            r.kind,
            r.value.0,
            r.acc_dtype.name()
        );
    }
    for s in &k.stores {
        let mut at = s.index.to_string();
        indirect_text(&mut at, &s.indirect);
        let mut value = format!("t{}", s.value.0);
        guards_text(&mut value, &s.guards);
        let _ = writeln!(
            out,
            "    store {}[{at}] = {value}",
            program.buffer(s.buf).name
        );
    }
    out
}

/// Each condition of `guards`, ` if lo <= index < hi`.
fn guards_text(t: &mut String, guards: &[crate::schedule::ir::Cond]) {
    for g in guards {
        let _ = write!(t, " if {} <= {} < {}", g.lo, g.index, g.hi);
    }
}

/// The data-dependent parts of an offset, ` + stride * index(tN of size)` each.
fn indirect_text(t: &mut String, indirect: &[crate::schedule::ir::Indirect]) {
    for i in indirect {
        let sign = if i.nonnegative { ", nonnegative" } else { "" };
        let _ = write!(
            t,
            " + {} * index(t{} of {}{sign})",
            i.stride, i.value.0, i.size
        );
    }
}

/// What each step is called in the generated code and the other debug
/// files: a kernel by its number among the kernels and its function name (as
/// `kernel_names` gives them, in program order; `kernel{n}` when absent), an
/// extern call by its product.
pub fn step_labels(p: &Program, kernel_names: &[String]) -> Vec<String> {
    let mut n = 0;
    p.steps
        .iter()
        .map(|step| match step {
            Step::Kernel(_) => {
                let label = match kernel_names.get(n) {
                    Some(name) => format!("kernel {n} {name}"),
                    None => format!("kernel {n}"),
                };
                n += 1;
                label
            }
            Step::Extern(e) => format!("extern {}", e.op.name()),
        })
        .collect()
}

/// The whole program, step by step, with the memory plan; kernels carry the
/// numbers and names the generated code gives them (see [`step_labels`]).
pub fn program_text(s: &Scheduled, kernel_names: &[String]) -> String {
    let (p, plan): (&Program, &MemoryPlan) = (&s.program, &s.memory);
    let mut out = format!(
        "program {}: {} step(s), {} kernel(s)\n",
        p.name,
        p.steps.len(),
        p.kernel_count()
    );
    let labels = step_labels(p, kernel_names);
    for (i, step) in p.steps.iter().enumerate() {
        for a in &plan.allocs[i] {
            let b = p.buffer(a.buf);
            let _ = write!(out, "  alloc {} {}{:?}", b.name, b.dtype.name(), b.shape);
            if let Some(r) = a.reuse {
                let _ = write!(out, " (reuses {})", p.buffer(r).name);
            }
            out.push('\n');
        }
        match step {
            Step::Kernel(k) => {
                let _ = writeln!(
                    out,
                    "  {} over x={} r={} (step {i}; fuses {})",
                    labels[i],
                    k.space.x,
                    k.space.r,
                    k.ops.join(" ")
                );
                out.push_str(&kernel_text(p, k));
            }
            Step::Extern(e) => {
                let args: Vec<String> = e
                    .args
                    .iter()
                    .map(|a| {
                        format!(
                            "{}{:?}/{:?}+{}",
                            p.buffer(a.buf).name,
                            a.shape,
                            a.strides,
                            a.offset
                        )
                    })
                    .collect();
                let _ = writeln!(
                    out,
                    "  extern {} {}({})",
                    p.buffer(e.out).name,
                    e.op.name(),
                    args.join(", ")
                );
            }
        }
        if !plan.frees[i].is_empty() {
            let names: Vec<&str> = plan.frees[i]
                .iter()
                .map(|b| p.buffer(*b).name.as_str())
                .collect();
            let _ = writeln!(out, "  free {}", names.join(", "));
        }
    }
    let outs: Vec<String> = p
        .outputs
        .iter()
        .map(|v| {
            format!(
                "{}{:?}/{:?}+{}",
                p.buffer(v.buf).name,
                v.shape,
                v.strides,
                v.offset
            )
        })
        .collect();
    let _ = writeln!(out, "  return {}", outs.join(", "));
    out
}

const COLOURS: [&str; 8] = [
    "#8dd3c7", "#ffffb3", "#bebada", "#fb8072", "#80b1d3", "#fdb462", "#b3de69", "#fccde5",
];

/// The graph in Graphviz DOT with each node filled in the colour of the step
/// computing it and labelled with that step as the generated code names it
/// (see [`step_labels`]) (`graph.dot`); names are escaped for DOT.
pub fn kernel_dot(
    graph: &crate::graph::ir::Graph,
    scheduled: &Scheduled,
    kernel_names: &[String],
) -> String {
    let labels = step_labels(&scheduled.program, kernel_names);
    let mut step_of = std::collections::HashMap::new();
    for (i, nodes) in scheduled.covers.iter().enumerate() {
        for n in nodes {
            step_of.entry(*n).or_insert(i);
        }
    }
    let mut out =
        String::from("digraph kiln {\n  node [shape=box, style=filled, fontname=\"monospace\"];\n");
    let label = |id: crate::graph::ir::NodeId| {
        graph.node(id).map_or_else(String::new, |n| {
            format!("{}\\n{}", n.name.replace(['"', '\\'], "_"), n.op.name())
        })
    };
    for id in graph.node_ids() {
        let (colour, step) = match step_of.get(&id) {
            Some(&s) => (
                COLOURS[s % COLOURS.len()],
                format!("\\n{}", labels.get(s).map_or("?", String::as_str)),
            ),
            None => ("#eeeeee", String::new()),
        };
        let _ = writeln!(
            out,
            "  n{} [label=\"{}{step}\", fillcolor=\"{colour}\"];",
            id.index(),
            label(id)
        );
    }
    for id in graph.node_ids() {
        for (user, _) in graph.users(id) {
            let _ = writeln!(out, "  n{} -> n{};", id.index(), user.index());
        }
    }
    out.push_str("}\n");
    out
}
