//! The `kiln-graph/1` TOML importer: text → validated [`Graph`].
//!
//! Reports every problem as an [`Error`] naming the node and its line; it must never
//! panic on any text, and never accept a graph that does not validate.
//!
//! A node may read a node defined later in the file: the nodes are lowered through the
//! op table in dependency order, each inferred as it is added, so that the table's
//! rewrites and expansions see their operands' shapes and dtypes.

mod raw;
mod sizes;

use super::table::{self, Call, Expansion, Lowered, Operand, Raw, Step};
use crate::graph::dtype::DType;
use crate::graph::ir::{Arg, Graph, Node, NodeId, TensorMeta, ValueId};
use crate::graph::ops::{ConstData, Op};
use crate::graph::shape::numel;
use crate::graph::{verify, At, Error, UnknownOp};
use raw::{Located, RawNode, RawTensor};
use std::collections::HashMap;
use std::sync::Arc;
use toml::de::{DeTable, DeValue};
use toml::Spanned;

/// The format version this importer reads.
pub const FORMAT: &str = "kiln-graph/1";

/// Reads and imports a graph file; errors carry the path.
pub fn load_toml(path: impl AsRef<std::path::Path>) -> Result<Graph, Error> {
    load_toml_with(path, &[])
}

/// [`load_toml`], the file's named sizes (`[dims]`) at the values `specialize` gives.
pub fn load_toml_with(
    path: impl AsRef<std::path::Path>,
    specialize: &[(String, i64)],
) -> Result<Graph, Error> {
    load_toml_sized(path, specialize, false)
}

/// [`load_toml_with`]; with `dynamic`, the named sizes stay size symbols
/// ([`parse_toml_sized`]).
pub fn load_toml_sized(
    path: impl AsRef<std::path::Path>,
    specialize: &[(String, i64)],
    dynamic: bool,
) -> Result<Graph, Error> {
    let path = path.as_ref();
    let text = std::fs::read_to_string(path).map_err(|source| Error::Read {
        path: path.display().to_string(),
        source,
    })?;
    parse_toml_sized(&text, specialize, dynamic).map_err(|e| Error::InFile {
        path: path.display().to_string(),
        source: Box::new(e),
    })
}

struct Lines(Vec<usize>);

impl Lines {
    fn new(text: &str) -> Lines {
        let mut v = vec![0];
        // A byte scan: `'\n'` never occurs inside a multi-byte UTF-8 character.
        v.extend(
            text.bytes()
                .enumerate()
                .filter(|&(_, b)| b == b'\n')
                .map(|(i, _)| i + 1),
        );
        Lines(v)
    }
    /// 1-based line and column of a byte offset.
    fn at(&self, offset: usize) -> (usize, usize) {
        let line = self.0.partition_point(|&s| s <= offset).max(1);
        (line, offset - self.0[line - 1] + 1)
    }
}

/// A node argument as the op table takes it; `{ dim = "batch" }` is the value of the named
/// size.
fn to_raw(v: &Spanned<DeValue>, sizes: &sizes::Sizes) -> Result<Raw, Located> {
    Ok(match v.get_ref() {
        DeValue::String(s) => Raw::Str(s.to_string()),
        DeValue::Integer(_) => Raw::Int(raw::integer(v)?),
        DeValue::Float(_) => Raw::Float(raw::float(v)?),
        DeValue::Boolean(b) => Raw::Bool(*b),
        DeValue::Array(a) => Raw::List(
            a.iter()
                .map(|x| to_raw(x, sizes))
                .collect::<Result<_, _>>()?,
        ),
        DeValue::Table(t) => sizes.reference(t).map_err(|message| Located {
            at: v.span().start,
            message,
        })?,
        other => {
            return Err(Located {
                at: v.span().start,
                message: format!("unsupported value: {}", other.type_str()),
            })
        }
    })
}

/// A number of `values` or `fill`; `None` for anything else.
fn number(v: &Spanned<DeValue>) -> Option<f64> {
    match v.get_ref() {
        DeValue::Integer(_) => raw::integer(v).ok().map(|i| i as f64),
        DeValue::Float(_) => raw::float(v).ok(),
        DeValue::Boolean(b) => Some(*b as i64 as f64),
        _ => None,
    }
}

/// Imports a graph from `kiln-graph/1` text and validates it.
pub fn parse_toml(text: &str) -> Result<Graph, Error> {
    parse_toml_with(text, &[])
}

/// [`parse_toml`], each named size of `[dims]` at its value in `specialize`, else at its
/// `example`, else at its `min`.
pub fn parse_toml_with(text: &str, specialize: &[(String, i64)]) -> Result<Graph, Error> {
    parse_toml_sized(text, specialize, false)
}

/// [`parse_toml_with`]; with `dynamic` (`--dynamic`), each named size of `[dims]` is a
/// size symbol over its range instead, hinted at its `example` (else its `min`).
pub fn parse_toml_sized(
    text: &str,
    specialize: &[(String, i64)],
    dynamic: bool,
) -> Result<Graph, Error> {
    let lines = Lines::new(text);
    let located = |at: usize, message: String| {
        let (line, column) = lines.at(at);
        Error::Toml {
            line,
            column,
            message,
        }
    };
    let doc = DeTable::parse(text).map_err(|e| {
        let at = e.span().map_or(0, |s| s.start);
        located(at, e.message().trim().to_string())
    })?;
    let raw = raw::read(&doc).map_err(|e| located(e.at, e.message))?;
    if raw.format != FORMAT {
        return Err(Error::Version(raw.format.into()));
    }
    let sizes = if dynamic {
        sizes::Sizes::symbolic(&raw.dims, &lines)?
    } else {
        sizes::Sizes::of(&raw.dims, specialize, &lines)?
    };
    let mut b = Builder {
        g: Graph::new(raw.name),
        names: HashMap::with_capacity(raw.inputs.len() + raw.constants.len() + raw.nodes.len()),
        lines: &lines,
        sizes: &sizes,
    };
    if let Some(symbols) = sizes.symbols() {
        b.g.set_symbols(symbols.clone());
    }
    b.declare_inputs(&raw.inputs)?;
    b.declare_constants(&raw.constants)?;
    // Unknown ops are reported all together before anything else about the nodes.
    unknown_ops(&raw.nodes, &lines)?;
    for i in dependency_order(&raw.nodes, &b.names, &lines)? {
        b.add(&raw.nodes[i])?;
    }
    b.g.set_sizes(sizes.choices());
    b.finish(&raw.outputs)
}

/// The graph being built, and what each name of the file stands for.
struct Builder<'t> {
    g: Graph,
    /// name → (what it is, its line)
    names: HashMap<&'t str, (Bound, u32)>,
    lines: &'t Lines,
    /// the value of each named size
    sizes: &'t sizes::Sizes,
}

/// What a name of the file stands for.
#[derive(Clone)]
enum Bound {
    /// one value: an input's, a constant's, a node's (its first output)
    Value(ValueId),
    /// the outputs of an expansion of several results, read through `getitem`
    Results(Vec<ValueId>),
}

impl<'t> Builder<'t> {
    fn line(&self, at: usize) -> u32 {
        self.lines.at(at).0 as u32
    }

    fn declare_inputs(&mut self, inputs: &'t [RawTensor<'t, '_>]) -> Result<(), Error> {
        for (i, t) in inputs.iter().enumerate() {
            let line = self.line(t.at);
            let meta = declared("input", t, line, self.sizes, self.lines)?;
            if t.values.is_some() || t.fill.is_some() {
                return Err(decl(
                    "input",
                    t.name,
                    line,
                    "inputs take no `values` or `fill`",
                ));
            }
            check_free(&self.names, t.name, line)?;
            let id = self.g.add_node(Node {
                name: t.name.into(),
                op: Op::Input { index: i },
                args: vec![],
                outputs: vec![meta],
                line: Some(line),
            });
            self.names
                .insert(t.name, (Bound::Value(ValueId::first(id)), line));
        }
        Ok(())
    }

    fn declare_constants(&mut self, constants: &'t [RawTensor<'t, '_>]) -> Result<(), Error> {
        for r in constants {
            let line = self.line(r.at);
            let meta = declared("constant", r, line, self.sizes, self.lines)?;
            let data = constant_data(r, &meta, line)?;
            check_free(&self.names, r.name, line)?;
            let id = self.g.add_node(Node {
                name: r.name.into(),
                op: Op::Constant { data },
                args: vec![],
                outputs: vec![meta],
                line: Some(line),
            });
            self.names
                .insert(r.name, (Bound::Value(ValueId::first(id)), line));
        }
        Ok(())
    }

    /// The shape and dtype of a single tensor `name` stands for, if it is one.
    fn meta_of(&self, name: &str) -> Option<TensorMeta> {
        match self.names.get(name)? {
            (Bound::Value(v), _) => {
                let node = self.g.node(v.node)?;
                if node.outputs.len() != 1 || node.op.returns_sequence() {
                    return None;
                }
                self.g.meta(*v).cloned()
            }
            (Bound::Results(_), _) => None,
        }
    }

    /// Lowers node `r` through the op table and adds what it lowers to, each node
    /// inferred as it is added.
    fn add(&mut self, r: &'t RawNode<'t, '_>) -> Result<(), Error> {
        let line = self.line(r.at);
        // Built only for an error: most nodes have none.
        let at = || At {
            node: r.name.into(),
            line: Some(line),
        };
        let conv = |v: &Spanned<DeValue>| {
            to_raw(v, self.sizes).map_err(|e| Error::Declaration {
                kind: "node",
                at: at(),
                message: e.message,
            })
        };
        let args: Vec<Raw> = r.args.iter().map(conv).collect::<Result<_, _>>()?;
        let kwargs: Vec<(String, Raw)> = r
            .attrs
            .iter()
            .flat_map(|t| t.iter())
            .map(|(k, v)| Ok((k.get_ref().to_string(), conv(v)?)))
            .collect::<Result<_, Error>>()?;
        let call = Call {
            node: r.name,
            op: r.op,
            args: &args,
            kwargs: &kwargs,
        };
        let sig_err = |source| Error::Signature {
            at: at(),
            op: r.op.into(),
            source: Box::new(source),
        };
        let lowered = table::lower(&call, &|t| self.meta_of(t)).map_err(sig_err)?;
        let bound = match lowered {
            Lowered::Op { op, operands } => {
                let getitem = match op {
                    Op::GetItem { index } => Some(index),
                    _ => None,
                };
                let args = self.resolve(&operands, getitem, &HashMap::new(), &at)?;
                let id = self.add_node(r.name.into(), op, args, vec![], line)?;
                Bound::Value(ValueId::first(id))
            }
            Lowered::Expansion(x) => self.add_expansion(r, x, line, &at)?,
        };
        self.names.insert(r.name, (bound, line));
        Ok(())
    }

    /// The nodes of an expansion of node `r`: the step that is its one result takes
    /// its name, the others fresh names after it.
    fn add_expansion(
        &mut self,
        r: &RawNode<'_, '_>,
        x: Expansion,
        line: u32,
        at: &dyn Fn() -> At,
    ) -> Result<Bound, Error> {
        let mut steps: HashMap<String, ValueId> = HashMap::with_capacity(x.steps.len());
        for step in x.steps {
            let (out, op, args, outputs) = match step {
                Step::Op { out, op, attrs } => {
                    let (kop, operands) =
                        table::bind_step(op, &attrs).map_err(|source| Error::Signature {
                            at: at(),
                            op: op.into(),
                            source: Box::new(source),
                        })?;
                    let args = self.resolve(&operands, None, &steps, at)?;
                    (out, kop, args, vec![])
                }
                Step::Const { out, meta, values } => (
                    out,
                    Op::Constant {
                        data: ConstData::Values(values.into()),
                    },
                    vec![],
                    vec![meta.into()],
                ),
            };
            let name = if x.results.len() == 1 && x.results[0] == out {
                r.name.to_string()
            } else {
                self.fresh(&out.replace('.', "_"))
            };
            let id = self.add_node(name, op, args, outputs, line)?;
            steps.insert(out, ValueId::first(id));
        }
        let mut results = Vec::with_capacity(x.results.len());
        for res in &x.results {
            results.push(match steps.get(res) {
                Some(v) => *v,
                None => self.value(res, None, at)?,
            });
        }
        Ok(match results.as_slice() {
            [one] => Bound::Value(*one),
            _ => Bound::Results(results),
        })
    }

    /// `name`, or a variant of it that no node of the graph or the file has.
    fn fresh(&self, name: &str) -> String {
        let free = |n: &str| !self.g.has_name(n) && !self.names.contains_key(n);
        if free(name) {
            return name.into();
        }
        (1..)
            .map(|i| format!("{name}_{i}"))
            .find(|n| free(n))
            .unwrap_or_else(|| name.into())
    }

    fn add_node(
        &mut self,
        name: String,
        op: Op,
        args: Vec<Arg>,
        outputs: Vec<TensorMeta>,
        line: u32,
    ) -> Result<NodeId, Error> {
        let id = self.g.add_node(Node {
            name,
            op,
            args,
            outputs,
            line: Some(line),
        });
        verify::infer_node(&mut self.g, id)?;
        // In the file a multi-output node is only read through `getitem`.
        check_single_outputs(&self.g, id)?;
        Ok(id)
    }

    /// The operands as graph arguments: names of the file (or of the expansion's own
    /// `steps`) resolved, a `getitem`'s operand to the output it selects.
    fn resolve(
        &self,
        operands: &[Operand],
        getitem: Option<i64>,
        steps: &HashMap<String, ValueId>,
        at: &dyn Fn() -> At,
    ) -> Result<Vec<Arg>, Error> {
        operands
            .iter()
            .map(|o| match o {
                Operand::Scalar(s) => Ok(Arg::Scalar(*s)),
                Operand::Name(t) => match steps.get(t) {
                    Some(v) => Ok(Arg::Value(*v)),
                    None => self.value(t, getitem, at).map(Arg::Value),
                },
            })
            .collect()
    }

    /// The value name `t` stands for (its output `getitem` for a `getitem`'s operand).
    fn value(&self, t: &str, getitem: Option<i64>, at: &dyn Fn() -> At) -> Result<ValueId, Error> {
        let unknown = || Error::UnknownTensor {
            at: at(),
            name: t.into(),
        };
        match (self.names.get(t).ok_or_else(unknown)?, getitem) {
            ((Bound::Value(v), _), None) => Ok(*v),
            ((Bound::Value(v), _), Some(i)) => Ok(ValueId {
                node: v.node,
                output: u32::try_from(i).unwrap_or(u32::MAX),
            }),
            ((Bound::Results(vs), _), Some(i)) => usize::try_from(i)
                .ok()
                .and_then(|i| vs.get(i).copied())
                .ok_or_else(|| Error::Declaration {
                    kind: "node",
                    at: at(),
                    message: format!("`{t}` has {} outputs, not {}", vs.len(), i + 1),
                }),
            ((Bound::Results(vs), _), None) => Err(Error::Declaration {
                kind: "node",
                at: at(),
                message: format!("`{t}` has {} outputs: select one with getitem", vs.len()),
            }),
        }
    }

    fn finish(mut self, outputs: &[&str]) -> Result<Graph, Error> {
        let mut values = vec![];
        for o in outputs {
            let v = match self.names.get(o) {
                Some((Bound::Value(v), _)) => *v,
                Some((Bound::Results(_), _)) => {
                    return Err(Error::UnknownOutput(format!(
                        "{o} (a multi-output node: select an output with getitem)"
                    )))
                }
                None => return Err(Error::UnknownOutput(o.to_string())),
            };
            values.push(v);
        }
        if values.is_empty() {
            return Err(Error::NoOutputs);
        }
        self.g.set_outputs(values.clone());
        // Every node was inferred as it was added: nothing is left for incremental
        // re-inference.
        self.g.take_modified();
        for o in values {
            if self
                .g
                .node(o.node)
                .is_some_and(|n| n.outputs.len() != 1 || n.op.returns_sequence())
            {
                let n = self
                    .g
                    .node(o.node)
                    .map_or(String::new(), |n| n.name.clone());
                return Err(Error::UnknownOutput(format!(
                    "{n} (a multi-output node: select an output with getitem)"
                )));
            }
        }
        Ok(self.g)
    }
}

/// The values of constant `r` of shape and dtype `meta`.
fn constant_data(r: &RawTensor<'_, '_>, meta: &TensorMeta, line: u32) -> Result<ConstData, Error> {
    let n = meta.numel();
    Ok(match (r.values, r.fill) {
        (Some(vs), None) => {
            if vs.len() as i64 != n {
                return Err(decl(
                    "constant",
                    r.name,
                    line,
                    &format!(
                        "{} values for shape {:?} ({n} elements)",
                        vs.len(),
                        meta.shape
                    ),
                ));
            }
            let vals: Option<Vec<f64>> = vs
                .iter()
                .map(|v| number(v).map(|x| meta.dtype.round(x)))
                .collect();
            let vals =
                vals.ok_or_else(|| decl("constant", r.name, line, "`values` must be numbers"))?;
            ConstData::Values(Arc::from(vals))
        }
        (None, Some(f)) => {
            let x = number(f)
                .ok_or_else(|| decl("constant", r.name, line, "`fill` must be a number"))?;
            ConstData::Fill(meta.dtype.round(x))
        }
        _ => {
            return Err(decl(
                "constant",
                r.name,
                line,
                "a constant needs exactly one of `values` or `fill`",
            ))
        }
    })
}

/// Every op of the file outside the table, each listed once with all its nodes and
/// the known names closest to it.
fn unknown_ops(nodes: &[RawNode<'_, '_>], lines: &Lines) -> Result<(), Error> {
    let mut unknown: Vec<UnknownOp> = vec![];
    for r in nodes {
        if !table::is_known(r.op) {
            let at = At {
                node: r.name.into(),
                line: Some(lines.at(r.at).0 as u32),
            };
            match unknown.iter_mut().find(|u| u.op == r.op) {
                Some(u) => u.nodes.push(at),
                None => unknown.push(UnknownOp {
                    op: r.op.into(),
                    nodes: vec![at],
                    similar: table::similar_ops(r.op),
                }),
            }
        }
    }
    if unknown.is_empty() {
        Ok(())
    } else {
        Err(Error::UnknownOps(unknown))
    }
}

/// The strings of a node's arguments that may name tensors: every string but those of
/// parameters that never take one (a dtype, a mode, an equation).
fn mentions<'a>(r: &'a RawNode<'_, '_>, into: &mut Vec<&'a str>) {
    fn strings<'a>(v: &'a Spanned<DeValue<'_>>, into: &mut Vec<&'a str>) {
        match v.get_ref() {
            DeValue::String(s) => into.push(s.as_ref()),
            DeValue::Array(a) => a.iter().for_each(|x| strings(x, into)),
            _ => {}
        }
    }
    let params = match r.args {
        [] => vec![],
        _ => table::entry(r.op).map(|e| e.params()).unwrap_or_default(),
    };
    for (i, v) in r.args.iter().enumerate() {
        if params
            .get(i)
            .is_none_or(|p| table::may_name_tensors(r.op, p))
        {
            strings(v, into);
        }
    }
    for (k, v) in r.attrs.iter().flat_map(|t| t.iter()) {
        if table::may_name_tensors(r.op, k.get_ref()) {
            strings(v, into);
        }
    }
}

/// The nodes in an order where each comes after the nodes it reads (the file's order
/// where it allows): a file may name a node before it defines it. A name given twice
/// (here or among the inputs and constants, `declared`) and a cycle are errors naming
/// their nodes.
fn dependency_order(
    nodes: &[RawNode<'_, '_>],
    declared: &HashMap<&str, (Bound, u32)>,
    lines: &Lines,
) -> Result<Vec<usize>, Error> {
    let mut index: HashMap<&str, usize> = HashMap::with_capacity(nodes.len());
    for (i, r) in nodes.iter().enumerate() {
        let first = match (declared.get(r.name), index.insert(r.name, i)) {
            (Some(&(_, line)), _) => Some(line),
            (None, Some(j)) => Some(lines.at(nodes[j].at).0 as u32),
            (None, None) => None,
        };
        if let Some(first) = first {
            return Err(Error::Duplicate {
                name: r.name.into(),
                line: lines.at(r.at).0 as u32,
                first,
            });
        }
    }
    // Each node's dependencies, one flat list: node i's are `deps[starts[i]..starts[i + 1]]`.
    let mut deps: Vec<usize> = Vec::with_capacity(nodes.len() * 2);
    let mut starts: Vec<usize> = Vec::with_capacity(nodes.len() + 1);
    let mut names = vec![];
    for r in nodes {
        starts.push(deps.len());
        names.clear();
        mentions(r, &mut names);
        deps.extend(names.iter().filter_map(|n| index.get(n).copied()));
    }
    starts.push(deps.len());
    let deps_of = |i: usize| &deps[starts[i]..starts[i + 1]];
    // 0: not reached, 1: on the path being followed, 2: placed.
    let mut state = vec![0u8; nodes.len()];
    let mut order = Vec::with_capacity(nodes.len());
    for root in 0..nodes.len() {
        if state[root] != 0 {
            continue;
        }
        let mut path: Vec<(usize, usize)> = vec![(root, 0)];
        state[root] = 1;
        while let Some(&mut (i, ref mut next)) = path.last_mut() {
            if let Some(&d) = deps_of(i).get(*next) {
                *next += 1;
                match state[d] {
                    0 => {
                        state[d] = 1;
                        path.push((d, 0));
                    }
                    1 => {
                        let from = path.iter().position(|&(p, _)| p == d).unwrap_or(0);
                        let mut cycle: Vec<&str> =
                            path[from..].iter().map(|&(p, _)| nodes[p].name).collect();
                        cycle.push(nodes[d].name);
                        return Err(Error::Cycle(At {
                            node: cycle.join("` reads `"),
                            line: Some(lines.at(nodes[d].at).0 as u32),
                        }));
                    }
                    _ => {}
                }
            } else {
                state[i] = 2;
                order.push(i);
                path.pop();
            }
        }
    }
    Ok(order)
}

fn check_single_outputs(g: &Graph, id: NodeId) -> Result<(), Error> {
    let Some(node) = g.node(id) else {
        return Ok(());
    };
    if matches!(node.op, Op::GetItem { .. }) {
        return Ok(());
    }
    for v in node.args.iter().filter_map(|a| a.value()) {
        if let Some(p) = g.node(v.node) {
            if p.outputs.len() != 1 || p.op.returns_sequence() {
                return Err(Error::Infer {
                    at: At {
                        node: node.name.clone(),
                        line: node.line,
                    },
                    op: node.op.name().into(),
                    source: Box::new(crate::graph::infer::InferError::Invalid(format!(
                        "operand `{}` is `{}`, which returns a list of {} tensor(s): select one with getitem",
                        p.name,
                        p.op.name(),
                        p.outputs.len()
                    ))),
                });
            }
        }
    }
    Ok(())
}

fn check_free(names: &HashMap<&str, (Bound, u32)>, name: &str, line: u32) -> Result<(), Error> {
    match names.get(name) {
        Some(&(_, first)) => Err(Error::Duplicate {
            name: name.into(),
            line,
            first,
        }),
        None => Ok(()),
    }
}

fn decl(kind: &'static str, name: &str, line: u32, message: &str) -> Error {
    Error::Declaration {
        kind,
        at: At {
            node: name.into(),
            line: Some(line),
        },
        message: message.into(),
    }
}

fn declared(
    kind: &'static str,
    t: &RawTensor,
    line: u32,
    sizes: &sizes::Sizes,
    lines: &Lines,
) -> Result<TensorMeta, Error> {
    let dtype = DType::parse(t.dtype).ok_or_else(|| {
        decl(
            kind,
            t.name,
            line,
            &format!(
                "unknown dtype `{}` (float32 float16 bfloat16 float64 int64 int32 bool)",
                t.dtype
            ),
        )
    })?;
    let shape = sizes.shape(&t.shape, lines)?;
    if kind == "constant" && shape.iter().any(|s| !s.is_const()) {
        return Err(decl(
            kind,
            t.name,
            line,
            "its shape names a size that --dynamic keeps varying; a constant's values fix its size",
        ));
    }
    let hints: Vec<i64> = shape.iter().map(crate::graph::sym::Size::hint).collect();
    numel(&hints).map_err(|e| decl(kind, t.name, line, &e.to_string()))?;
    Ok(TensorMeta::contiguous_sizes(shape, dtype))
}
