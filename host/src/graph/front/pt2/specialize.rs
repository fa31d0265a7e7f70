//! An export with dynamic shapes, specialised at one value per symbol: the example's
//! sizes (the hints the archive records), or those the caller chooses within each
//! symbol's range. Every symbolic size and size argument in the model's JSON becomes
//! the integer it evaluates to, and the nodes that only compute sizes (`sym_size`, the
//! arithmetic on them) go, so that the rest of the importer reads a static program.
//! Kiln's graphs have static shapes until symbolic dims reach the scheduler
//! (docs/dynamic-shapes.md); this is how a dynamic export compiles meanwhile.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use super::Pt2Error;
use crate::graph::sym::{self, Expr, SymId, Symbols};
use crate::graph::SizeChoice;

/// The values a dynamic export was specialised at.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Specialized {
    /// Each symbol with its value and range, in the archive's order of names.
    pub symbols: Vec<SizeChoice>,
    /// Whether every value is the example's.
    pub at_example: bool,
}

fn schema(message: String) -> Pt2Error {
    Pt2Error::Schema(message)
}

/// The symbols of `range_constraints`, each over its range.
fn symbols_of(model: &Value) -> Symbols {
    let mut out = Symbols::default();
    if let Some(ranges) = model.get("range_constraints").and_then(Value::as_object) {
        for (name, r) in ranges {
            let bound = |k: &str, d: i64| r.get(k).and_then(Value::as_i64).unwrap_or(d);
            let _ = out.add(name, bound("min_val", i64::MIN), bound("max_val", i64::MAX));
        }
    }
    out
}

/// Every `as_expr` object in `v` (sizes, strides, offsets, `sym_int_values`).
fn exprs<'a>(v: &'a Value, out: &mut Vec<&'a Map<String, Value>>) {
    match v {
        Value::Object(m) => {
            if let Some(Value::Object(e)) = m.get("as_expr") {
                out.push(e);
            }
            m.values().for_each(|x| exprs(x, out));
        }
        Value::Array(items) => items.iter().for_each(|x| exprs(x, out)),
        _ => {}
    }
}

fn parse(text: &str, symbols: &Symbols) -> Result<Expr, Pt2Error> {
    let find = &mut |name: &str| {
        symbols.find(name).ok_or_else(|| {
            format!(
                "`{name}` has no range in the archive (a size that depends on a tensor's \
                 values, which Kiln cannot compile)"
            )
        })
    };
    sym::parse(text, symbols, find).map_err(|e| schema(e.to_string()))
}

/// The symbols the sizes use, and each one's example size where a size that is the bare
/// symbol records one.
fn uses_and_hints(model: &Value, symbols: &Symbols) -> (Vec<bool>, Vec<Option<i64>>) {
    let mut used = vec![false; symbols.len()];
    let mut hints: Vec<Option<i64>> = vec![None; symbols.len()];
    let mut found = Vec::new();
    exprs(model, &mut found);
    for e in found {
        let Some(Ok(expr)) = e
            .get("expr_str")
            .and_then(Value::as_str)
            .map(|text| parse(text, symbols))
        else {
            continue;
        };
        for s in expr.symbols() {
            used[s.0 as usize] = true;
        }
        let hint = e
            .get("hint")
            .and_then(|h| h.get("as_int"))
            .and_then(Value::as_i64);
        if let (Some(hint), [s]) = (hint, expr.symbols().as_slice()) {
            if expr == Expr::symbol(*s) {
                hints[s.0 as usize] = Some(hint);
            }
        }
    }
    (used, hints)
}

/// Each symbol's value: the caller's where given (checked against its range), else the
/// example's, read from a size that is the bare symbol; a symbol no size uses takes its
/// least value (it changes nothing).
fn binding(
    model: &Value,
    symbols: &Symbols,
    chosen: &[(String, i64)],
) -> Result<(Vec<i64>, bool), Pt2Error> {
    let (used, hints) = uses_and_hints(model, symbols);
    let names = || {
        symbols
            .iter()
            .map(|(_, s)| format!("{} ({}..={})", s.name, s.lo, s.hi))
            .collect::<Vec<_>>()
            .join(", ")
    };
    for (name, _) in chosen {
        if symbols.find(name).is_none() {
            return Err(schema(format!(
                "--specialize {name}: the archive has no symbol `{name}`; its symbols are {}",
                names()
            )));
        }
    }
    let mut at_example = true;
    let mut values = Vec::with_capacity(symbols.len());
    for (id, s) in symbols.iter() {
        let hint = hints[id.0 as usize];
        let value = match chosen.iter().rev().find(|(n, _)| *n == s.name) {
            Some((_, v)) => {
                if *v < s.lo || *v > s.hi {
                    return Err(schema(format!(
                        "--specialize {}={v} is outside the range the export gives it, {}..={}",
                        s.name, s.lo, s.hi
                    )));
                }
                at_example &= hint == Some(*v);
                *v
            }
            None if !used[id.0 as usize] => s.lo,
            None => hint.ok_or_else(|| {
                schema(format!(
                    "no example size for symbol `{}` ({}..={}): give one with --specialize {}=VALUE",
                    s.name, s.lo, s.hi, s.name
                ))
            })?,
        };
        values.push(value);
    }
    Ok((values, at_example))
}

/// The integer a `SymInt` object (`{"as_expr": ...}`, `{"as_name": ...}` or
/// `{"as_int": ...}`) stands for at `values`.
fn value_of(
    v: &Value,
    names: &BTreeMap<String, Expr>,
    symbols: &Symbols,
    values: &[i64],
) -> Result<Option<i64>, Pt2Error> {
    let Some(e) = expr_of(v, names, symbols)? else {
        return Ok(None);
    };
    let at = |id: SymId| values[id.0 as usize];
    e.eval(&at)
        .map(Some)
        .map_err(|err| schema(format!("size `{}`: {err}", e.display(symbols))))
}

/// Replaces every symbolic size in `v` by its value: `as_expr` objects and the
/// `as_sym_int(s)` arguments (becoming `as_int(s)`).
fn rewrite(
    v: &mut Value,
    names: &BTreeMap<String, Expr>,
    symbols: &Symbols,
    values: &[i64],
) -> Result<(), Pt2Error> {
    match v {
        Value::Object(m) => {
            if m.len() == 1 && m.contains_key("as_expr") {
                let n = value_of(&Value::Object(m.clone()), names, symbols, values)?
                    .ok_or_else(|| schema(format!("a size Kiln cannot read: {v}")))?;
                *v = json!({ "as_int": n });
                return Ok(());
            }
            if let Some(s) = m.get("as_sym_int").cloned() {
                if m.len() == 1 {
                    let n = value_of(&s, names, symbols, values)?
                        .ok_or_else(|| schema(format!("a size argument Kiln cannot read: {s}")))?;
                    *v = json!({ "as_int": n });
                    return Ok(());
                }
            }
            if let Some(Value::Array(items)) = m.get("as_sym_ints").cloned() {
                if m.len() == 1 {
                    let ints = items
                        .iter()
                        .map(|s| {
                            value_of(s, names, symbols, values)?.ok_or_else(|| {
                                schema(format!("a size argument Kiln cannot read: {s}"))
                            })
                        })
                        .collect::<Result<Vec<i64>, _>>()?;
                    *v = json!({ "as_ints": ints });
                    return Ok(());
                }
            }
            for x in m.values_mut() {
                rewrite(x, names, symbols, values)?;
            }
        }
        Value::Array(items) => {
            for x in items {
                rewrite(x, names, symbols, values)?;
            }
        }
        _ => {}
    }
    Ok(())
}

/// Whether a node only computes sizes (every output a `SymInt`, `SymBool` or `SymFloat`),
/// or asserts something about them.
fn computes_sizes(node: &Value) -> bool {
    let target = node.get("target").and_then(Value::as_str).unwrap_or("");
    let outputs = node.get("outputs").and_then(Value::as_array);
    let symbolic = |o: &Value| {
        o.as_object()
            .is_some_and(|m| !m.is_empty() && m.keys().all(|k| k.starts_with("as_sym_")))
    };
    target.starts_with("torch.ops.aten._assert_scalar")
        || target.starts_with("torch.ops.aten.sym_constrain_range")
        || outputs.is_some_and(|o| !o.is_empty() && o.iter().all(symbolic))
}

/// Specialises `model` (an export's `model.json`) in place where it has symbols; returns
/// what it was specialised at, or `None` for a static export.
pub(super) fn specialize(
    model: &mut Value,
    chosen: &[(String, i64)],
) -> Result<Option<Specialized>, Pt2Error> {
    let symbols = symbols_of(model);
    // An export traced again at static sizes keeps its ranges but uses no symbol.
    if chosen.is_empty() && uses_and_hints(model, &symbols).0.iter().all(|u| !u) {
        return Ok(None);
    }
    if symbols.is_empty() {
        if let Some((name, _)) = chosen.first() {
            return Err(schema(format!(
                "--specialize {name}: the archive has static shapes (no symbols to specialise)"
            )));
        }
        return Ok(None);
    }
    let (values, at_example) = binding(model, &symbols, chosen)?;
    let graph = model
        .pointer_mut("/graph_module/graph")
        .ok_or_else(|| schema("model.json has no graph_module.graph".into()))?;
    // The named sizes (`sym_size_int_9`) first: arguments refer to them.
    let names = named_sizes(graph, &symbols)?;
    if !at_example && asserts_sizes(graph) {
        return Err(schema(
            "the export asserts relations between its sizes that Kiln cannot check at other values: \
             specialise it at the example's sizes (no --specialize), or export at the sizes you want"
                .into(),
        ));
    }
    if let Some(Value::Array(nodes)) = graph.get_mut("nodes") {
        nodes.retain(|n| !computes_sizes(n));
    }
    for key in ["sym_int_values", "sym_bool_values", "sym_float_values"] {
        if let Some(m) = graph.get_mut(key).and_then(Value::as_object_mut) {
            m.clear();
        }
    }
    rewrite(graph, &names, &symbols, &values)?;
    let symbols = symbols
        .iter()
        .zip(&values)
        .map(|((_, s), v)| SizeChoice {
            name: s.name.clone(),
            value: *v,
            lo: s.lo,
            hi: s.hi,
        })
        .collect();
    Ok(Some(Specialized {
        symbols,
        at_example,
    }))
}

/// The expression a `SymInt` object (`as_expr`, `as_name` or `as_int`) stands for.
fn expr_of(
    v: &Value,
    names: &BTreeMap<String, Expr>,
    symbols: &Symbols,
) -> Result<Option<Expr>, Pt2Error> {
    let Some(m) = v.as_object().filter(|m| m.len() == 1) else {
        return Ok(None);
    };
    if let Some(n) = m.get("as_int") {
        return Ok(n.as_i64().map(Expr::constant));
    }
    if let Some(name) = m.get("as_name").and_then(Value::as_str) {
        return names
            .get(name)
            .cloned()
            .map(Some)
            .ok_or_else(|| schema(format!("the size `{name}` is used but never defined")));
    }
    if let Some(e) = m.get("as_expr") {
        let text = e
            .get("expr_str")
            .and_then(Value::as_str)
            .ok_or_else(|| schema(format!("a size without `expr_str`: {e}")))?;
        return parse(text, symbols).map(Some);
    }
    Ok(None)
}

/// Whether the graph asserts relations between its sizes (`_assert_scalar` nodes).
fn asserts_sizes(graph: &Value) -> bool {
    graph
        .get("nodes")
        .and_then(Value::as_array)
        .is_some_and(|nodes| {
            nodes.iter().any(|n| {
                n.get("target")
                    .and_then(Value::as_str)
                    .is_some_and(|t| t.starts_with("torch.ops.aten._assert_scalar"))
            })
        })
}

/// The expression of each named size of the graph (`sym_size_int_9`), which arguments
/// refer to.
fn named_sizes(graph: &Value, symbols: &Symbols) -> Result<BTreeMap<String, Expr>, Pt2Error> {
    let mut names = BTreeMap::new();
    if let Some(Value::Object(defs)) = graph.get("sym_int_values") {
        for (name, def) in defs {
            if let Some(e) = expr_of(def, &names, symbols)? {
                names.insert(name.clone(), e);
            }
        }
    }
    Ok(names)
}

/// A size in the one form the importer reads after [`keep_symbols`]: `as_int` for an
/// integer, else `as_expr` with the canonical text (symbols by their archive names).
fn size_json(e: &Expr, symbols: &Symbols) -> Value {
    match e.as_const() {
        Some(c) => json!({ "as_int": c }),
        None => json!({ "as_expr": { "expr_str": e.display(symbols) } }),
    }
}

/// Writes every size argument and recorded size in `v` in [`size_json`]'s form:
/// `as_sym_int(s)` arguments keep their kind with each item so written.
fn canonical(
    v: &mut Value,
    names: &BTreeMap<String, Expr>,
    symbols: &Symbols,
) -> Result<(), Pt2Error> {
    let item = |s: &Value| -> Result<Value, Pt2Error> {
        let e = expr_of(s, names, symbols)?
            .ok_or_else(|| schema(format!("a size argument Kiln cannot read: {s}")))?;
        Ok(size_json(&e, symbols))
    };
    match v {
        Value::Object(m) => {
            if m.len() == 1 && m.contains_key("as_expr") {
                *v = item(v)?;
                return Ok(());
            }
            if let (1, Some(s)) = (m.len(), m.get("as_sym_int")) {
                *v = json!({ "as_sym_int": item(s)? });
                return Ok(());
            }
            if let (1, Some(Value::Array(items))) = (m.len(), m.get("as_sym_ints")) {
                let items = items.iter().map(item).collect::<Result<Vec<_>, _>>()?;
                *v = json!({ "as_sym_ints": items });
                return Ok(());
            }
            for x in m.values_mut() {
                canonical(x, names, symbols)?;
            }
        }
        Value::Array(items) => {
            for x in items {
                canonical(x, names, symbols)?;
            }
        }
        _ => {}
    }
    Ok(())
}

/// Keeps an export's dynamic shapes: returns its symbols (each with its range, and the
/// example's size as its hint), with every size in `model` written in one canonical
/// form that the importer reads with them, and the nodes that only compute sizes
/// gone; `None` for a static export.
pub(super) fn keep_symbols(model: &mut Value) -> Result<Option<Symbols>, Pt2Error> {
    let mut symbols = symbols_of(model);
    let (used, hints) = uses_and_hints(model, &symbols);
    if symbols.is_empty() || used.iter().all(|u| !u) {
        return Ok(None);
    }
    let ids: Vec<SymId> = symbols.iter().map(|(id, _)| id).collect();
    for id in ids {
        if let Some(h) = hints[id.0 as usize] {
            symbols
                .set_hint(id, h)
                .map_err(|e| schema(format!("the example's size: {e}")))?;
        }
    }
    let graph = model
        .pointer_mut("/graph_module/graph")
        .ok_or_else(|| schema("model.json has no graph_module.graph".into()))?;
    if asserts_sizes(graph) {
        return Err(schema(
            "the export asserts relations between its sizes, which Kiln does not check at \
             run time yet: compile it at one size (--specialize)"
                .into(),
        ));
    }
    let names = named_sizes(graph, &symbols)?;
    if let Some(Value::Array(nodes)) = graph.get_mut("nodes") {
        nodes.retain(|n| !computes_sizes(n));
    }
    for key in ["sym_int_values", "sym_bool_values", "sym_float_values"] {
        if let Some(m) = graph.get_mut(key).and_then(Value::as_object_mut) {
            m.clear();
        }
    }
    canonical(graph, &names, &symbols)?;
    Ok(Some(symbols))
}
