//! The FX nodes of one graph imported in order: `getitem`s, ATen calls lowered through
//! the op table (a node, or an expansion's nodes), and the subgraphs of
//! `wrap_with_set_grad_enabled` inlined.

use super::*;

/// Imports the FX nodes of one graph, in order, into `g`.
pub(super) fn import_nodes(
    g: &mut Graph,
    nodes: &[schema::Node],
    scope: &mut Scope<'_>,
    produced: &mut Vec<Produced>,
    outputs: &[Value],
) -> Result<(), Error> {
    let dead = dead_nodes(nodes, outputs);
    for n in nodes {
        if dead.contains(&n.name) {
            tracing::debug!(node = %n.name, op = %n.target, "dropped: nothing reads its result");
            continue;
        }
        let (outs, multi) = output_names(n);
        let node_name = if n.name.is_empty() {
            outs.iter()
                .flatten()
                .next()
                .cloned()
                .unwrap_or_else(|| "node".into())
        } else {
            n.name.clone()
        };
        let fx = FxNode {
            n,
            // The node as messages name it: with the subgraphs it is in.
            shown: format!("{}{node_name}", scope.path),
            name: node_name,
            outs,
            multi,
        };
        let (op, args) = match target(&n.target) {
            Target::Unsupported => continue, // reported before the import
            Target::WrapSetGradEnabled => {
                inline_wrap(g, n, &fx.name, scope, produced)?;
                continue;
            }
            Target::GetItem => import_getitem(scope, &fx)?,
            Target::Aten(op) => match import_aten(g, scope, produced, &fx, op, false)? {
                Some(bound) => bound,
                None => continue,
            },
            Target::InPlace(op) => match import_aten(g, scope, produced, &fx, op, true)? {
                Some(bound) => bound,
                None => continue,
            },
        };
        add_node(g, scope, produced, &fx, op, args)?;
    }
    Ok(())
}

/// One FX node being imported.
struct FxNode<'n> {
    n: &'n schema::Node,
    /// its name (its first output's where the archive gives none)
    name: String,
    /// its name as messages show it, with the subgraphs it is in
    shown: String,
    /// the tensors its outputs define
    outs: Vec<Option<String>>,
    /// whether it has several outputs
    multi: bool,
}

impl FxNode<'_> {
    fn at(&self) -> At {
        At {
            node: self.shown.clone(),
            line: None,
        }
    }

    fn unknown_tensor(&self, t: &str) -> Error {
        Error::UnknownTensor {
            at: self.at(),
            name: t.into(),
        }
    }

    fn in_place(&self) -> bool {
        matches!(target(&self.n.target), Target::InPlace(_))
    }
}

/// `operator.getitem(source, index)`: the op and its operand, the selected output.
fn import_getitem(scope: &mut Scope<'_>, fx: &FxNode<'_>) -> Result<(Op, Vec<Arg>), Error> {
    let (source, index) = getitem_args(fx.n, &fx.shown)?;
    if let Raw::Str(t) = &source {
        scope.aliases.check(t, &fx.shown)?;
        if let Some(Some(out)) = fx.outs.first() {
            if scope.aliases.root.contains_key(t) {
                scope.aliases.share(out, t);
            }
        }
    }
    let out_of_range = || Pt2Error::Argument {
        node: fx.shown.clone(),
        param: "index".into(),
        message: format!("index {index} is out of range"),
    };
    let arg = match source {
        Raw::Str(t) => match scope.multi.get(&t) {
            Some(&Multi::Node(node)) => ValueId {
                node,
                output: u32::try_from(index).unwrap_or(u32::MAX),
            },
            Some(Multi::Values(vs)) => usize::try_from(index)
                .ok()
                .and_then(|i| vs.get(i).copied().flatten())
                .ok_or_else(out_of_range)?,
            None => return Err(fx.unknown_tensor(&t)),
        },
        Raw::List(ts) => match usize::try_from(index).ok().and_then(|i| ts.get(i)) {
            Some(Raw::Str(t)) => *scope.values.get(t).ok_or_else(|| fx.unknown_tensor(t))?,
            _ => return Err(out_of_range().into()),
        },
        _ => return Err(fx.unknown_tensor("?")),
    };
    Ok((Op::GetItem { index }, vec![Arg::Value(arg)]))
}

/// The arguments of an ATen node by their ATen names; for an in-place op whose
/// functional form names its operand otherwise (`dropout_(self)`, `dropout(input)`),
/// `self` renamed to the functional form's first parameter.
fn aten_arguments(
    fx: &FxNode<'_>,
    op: &str,
    in_place: bool,
    symbols: &crate::graph::sym::Symbols,
) -> Result<Vec<(String, Raw)>, Error> {
    let mut attrs: Vec<(String, Raw)> = Vec::with_capacity(fx.n.inputs.len());
    for a in &fx.n.inputs {
        if a.name.is_empty() {
            return Err(Pt2Error::Argument {
                node: fx.shown.clone(),
                param: "?".into(),
                message: "an argument without a parameter name".into(),
            }
            .into());
        }
        if let Some(raw) = schema::argument(&fx.shown, &a.name, &a.arg, symbols)? {
            attrs.push((a.name.clone(), raw));
        }
    }
    if in_place {
        let params = table::entry(op).map(|e| e.params()).unwrap_or_default();
        if let Some(first) = params.first().filter(|_| !params.contains(&"self")) {
            for (k, _) in attrs.iter_mut() {
                if k == "self" {
                    *k = (*first).to_string();
                }
            }
        }
    }
    Ok(attrs)
}

/// An ATen node lowered through the op table: its op and operands, or `None` where an
/// expansion already added its nodes.
fn import_aten(
    g: &mut Graph,
    scope: &mut Scope<'_>,
    produced: &mut Vec<Produced>,
    fx: &FxNode<'_>,
    fx_op: &str,
    in_place: bool,
) -> Result<Option<(Op, Vec<Arg>)>, Error> {
    let attrs = aten_arguments(fx, fx_op, in_place, g.symbols())?;
    if fx_op == "as_strided" {
        check_as_strided_input(&attrs, scope, &fx.shown)?;
    }
    let first_out = fx.outs.iter().flatten().next().unwrap_or(&fx.name).clone();
    let call = Call {
        node: &first_out,
        op: fx_op,
        args: &[],
        kwargs: &attrs,
    };
    let metas = &scope.metas;
    let lowered = table::lower(&call, &|t| metas.get(t).cloned())
        .map_err(|e| signature_error(&fx.shown, fx_op, e))?;
    let (op, operands) = match lowered {
        Lowered::Expansion(x) => {
            import_expansion(g, scope, produced, fx, fx_op, x)?;
            return Ok(None);
        }
        Lowered::Op { op, operands } => (op, operands),
    };
    let args = resolve(g, scope, operands, &fx.shown)?;
    // Storage sharing: views alias their operand, in-place ops write into theirs (and
    // return it).
    if let Some(src) = in_place_self(fx.n) {
        if in_place || aliases_operand(fx_op) {
            // `to` a tensor's own dtype returns the tensor itself.
            let same_dtype = matches!(&op, Op::Cast { dtype }
                if scope.metas.get(src.as_str()).is_some_and(|m| m.dtype == *dtype));
            let step = if in_place || same_dtype {
                Some(None)
            } else {
                view_step(&op, &args)
            };
            for o in fx.outs.iter().flatten() {
                scope.aliases.share(o, &src);
                if let (Some(step), false) = (&step, fx.multi) {
                    scope.aliases.views.insert(
                        o.clone(),
                        ViewOf {
                            base: src.clone(),
                            op: step.clone(),
                        },
                    );
                }
            }
            if fx.multi {
                scope.aliases.share(&fx.name, &src);
            }
        }
    }
    Ok(Some((op, args)))
}

/// The nodes of an expansion for FX node `fx`, its outputs bound to the results.
fn import_expansion(
    g: &mut Graph,
    scope: &mut Scope<'_>,
    produced: &mut Vec<Produced>,
    fx: &FxNode<'_>,
    fx_op: &str,
    x: table::Expansion,
) -> Result<(), Error> {
    if x.results.len() != fx.outs.len() {
        return Err(Pt2Error::Argument {
            node: fx.shown.clone(),
            param: fx_op.into(),
            message: format!(
                "the node has {} output(s), the op gives {}",
                fx.outs.len(),
                x.results.len()
            ),
        }
        .into());
    }
    // The node that makes an output is named after it.
    let names: HashMap<String, String> = x
        .results
        .iter()
        .zip(&fx.outs)
        .filter_map(|(r, o)| Some((r.clone(), o.clone()?)))
        .collect();
    import_steps(g, scope, x.steps, &fx.shown, &names)?;
    let mut values = Vec::with_capacity(fx.outs.len());
    for (o, r) in fx.outs.iter().zip(&x.results) {
        let value = current(g, scope, r, &fx.shown)?;
        values.push(Some(value));
        let Some(o) = o else { continue };
        scope.values.insert(o.clone(), value);
        produced.push(Produced {
            tensor: o.clone(),
            node: fx.shown.clone(),
            value,
            want: scope.metas.get(o.as_str()).cloned(),
        });
    }
    if fx.multi {
        scope.multi.insert(fx.name.clone(), Multi::Values(values));
    } else if fx.in_place() {
        if let (Some(src), Some(Some(out))) = (in_place_self(fx.n), fx.outs.first()) {
            scope.aliases.share(out, &src);
            let value = scope.values[out];
            write_into(g, scope, &src, value, &fx.shown, out)?;
        }
    }
    Ok(())
}

/// Adds the node of FX node `fx` (and, for several outputs, a `getitem` per output).
fn add_node(
    g: &mut Graph,
    scope: &mut Scope<'_>,
    produced: &mut Vec<Produced>,
    fx: &FxNode<'_>,
    op: Op,
    args: Vec<Arg>,
) -> Result<(), Error> {
    if !fx.multi {
        let Some(Some(out)) = fx.outs.first() else {
            // `_assert_tensor_metadata` as real models export it checks and returns
            // nothing: Kiln's inference already fixes every dtype it could assert.
            if matches!(op, Op::NoOp(NoOpKind::AssertTensorMetadata)) {
                return Ok(());
            }
            return Err(
                Pt2Error::Schema(format!("node `{}` has no tensor output", fx.name)).into(),
            );
        };
        // Later readers of the tensor an in-place op mutated read its result.
        let mutated = if fx.in_place() {
            in_place_self(fx.n)
        } else {
            None
        };
        let name = unique(g, &format!("{}{out}", scope.prefix));
        let id = g.add_node(Node {
            name,
            op,
            args,
            outputs: vec![],
            line: None,
        });
        scope.values.insert(out.clone(), ValueId::first(id));
        if let Some(mutated) = mutated {
            write_into(g, scope, &mutated, ValueId::first(id), &fx.shown, out)?;
        }
        produced.push(Produced {
            tensor: out.clone(),
            node: fx.shown.clone(),
            value: ValueId::first(id),
            want: scope.metas.get(out.as_str()).cloned(),
        });
        return Ok(());
    }
    let name = unique(g, &format!("{}{}", scope.prefix, fx.name));
    let id = g.add_node(Node {
        name,
        op,
        args,
        outputs: vec![],
        line: None,
    });
    scope.multi.insert(fx.name.clone(), Multi::Node(id));
    for (i, out) in fx.outs.iter().enumerate() {
        let Some(out) = out else { continue };
        let source = ValueId {
            node: id,
            output: i as u32,
        };
        let item = g.add_node(Node {
            name: unique(g, &format!("{}{out}", scope.prefix)),
            op: Op::GetItem { index: i as i64 },
            args: vec![Arg::Value(source)],
            outputs: vec![],
            line: None,
        });
        scope.values.insert(out.clone(), ValueId::first(item));
        produced.push(Produced {
            tensor: out.clone(),
            node: fx.shown.clone(),
            value: ValueId::first(item),
            want: scope.metas.get(out.as_str()).cloned(),
        });
    }
    Ok(())
}

/// The op table's refusal of node `shown`'s arguments.
fn signature_error(shown: &str, op: &str, source: SigError) -> Error {
    Error::Signature {
        at: At {
            node: shown.to_string(),
            line: None,
        },
        op: op.into(),
        source: Box::new(source),
    }
}

/// Operands resolved to their current values for FX node `shown`.
fn resolve(
    g: &mut Graph,
    scope: &mut Scope<'_>,
    operands: Vec<Operand>,
    shown: &str,
) -> Result<Vec<Arg>, Error> {
    let mut args = Vec::with_capacity(operands.len());
    for o in operands {
        args.push(match o {
            Operand::Scalar(s) => Arg::Scalar(s),
            Operand::Name(t) => Arg::Value(current(g, scope, &t, shown)?),
        });
    }
    Ok(args)
}

/// Adds the nodes of an expansion for FX node `shown`; each step's tensor is
/// reachable by its name in `scope`.
fn import_steps(
    g: &mut Graph,
    scope: &mut Scope<'_>,
    steps: Vec<Step>,
    shown: &str,
    names: &HashMap<String, String>,
) -> Result<(), Error> {
    for step in steps {
        let (name, op, args, outputs) = match step {
            Step::Op { out, op, attrs } => {
                let (kop, operands) =
                    table::bind_step(op, &attrs).map_err(|e| signature_error(shown, op, e))?;
                let args = resolve(g, scope, operands, shown)?;
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
        let id = g.add_node(Node {
            name: unique(
                g,
                &format!(
                    "{}{}",
                    scope.prefix,
                    names.get(&name).unwrap_or(&name).replace('.', "_")
                ),
            ),
            op,
            args,
            outputs,
            line: None,
        });
        scope.values.insert(name, ValueId::first(id));
    }
    Ok(())
}

/// `wrap_with_set_grad_enabled(enable_grad, subgraph, *operands)`: in inference the grad
/// mode changes nothing, so the subgraph is imported in place. Its placeholders are
/// bound to the operands, its nodes imported (named after the subgraph, so that names
/// stay unique), and the node's outputs bound to what the subgraph returns.
fn inline_wrap(
    g: &mut Graph,
    n: &schema::Node,
    node: &str,
    outer: &mut Scope<'_>,
    produced: &mut Vec<Produced>,
) -> Result<(), Error> {
    let shown = format!("{}{node}", outer.path);
    let bad = |message: String| -> Error {
        Pt2Error::Schema(format!(
            "node `{shown}` (wrap_with_set_grad_enabled): {message}"
        ))
        .into()
    };
    let [grad, body, operands @ ..] = n.inputs.as_slice() else {
        return Err(bad(
            "expected the grad mode, a subgraph (`as_graph`) and the subgraph's operands".into(),
        ));
    };
    if !matches!(
        schema::variant(&grad.arg),
        Some(("as_bool", Value::Bool(_)))
    ) {
        return Err(bad(format!(
            "the first argument must be the grad mode (`as_bool`), found {}",
            brief(&grad.arg)
        )));
    }
    let Some(("as_graph", sub)) = schema::variant(&body.arg) else {
        return Err(bad(format!(
            "the second argument must be a subgraph (`as_graph`), found {}",
            brief(&body.arg)
        )));
    };
    let sub_name = sub.get("name").and_then(Value::as_str).unwrap_or("");
    let what = if sub_name.is_empty() {
        "the subgraph".to_string()
    } else {
        format!("subgraph `{sub_name}`")
    };
    let Some(graph) = sub.get("graph") else {
        return Err(bad(format!(
            "{what} has no `graph`: the export schema stores a subgraph inline"
        )));
    };
    let graph =
        schema::Graph::deserialize(graph).map_err(|e| bad(format!("{what} is malformed: {e}")))?;
    if outer.depth >= MAX_SUBGRAPH_DEPTH {
        return Err(bad(format!(
            "{what} is nested more than {MAX_SUBGRAPH_DEPTH} subgraphs deep"
        )));
    }
    let placeholders = graph
        .inputs
        .iter()
        .map(|i| {
            as_tensor(i).ok_or_else(|| {
                bad(format!(
                    "{what} has a placeholder that is not a tensor: {}",
                    brief(i)
                ))
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    if placeholders.len() != operands.len() {
        return Err(bad(format!(
            "{what} takes {} tensor(s), the node passes {}",
            placeholders.len(),
            operands.len()
        )));
    }
    let prefix = if sub_name.is_empty() { node } else { sub_name };
    let mut inner = Scope {
        values: HashMap::with_capacity(placeholders.len() + graph.nodes.len()),
        multi: HashMap::new(),
        metas: tensor_metas(&graph.tensor_values, g.symbols())?,
        prefix: format!("{}{prefix}_", outer.prefix),
        layouts: tensor_layouts(&graph.tensor_values),
        aliases: Aliases::default(),
        inputs: HashMap::new(),
        stored: HashMap::new(),
        written: vec![],
        depth: outer.depth + 1,
        path: format!(
            "{}{}/",
            outer.path,
            if sub_name.is_empty() { node } else { sub_name }
        ),
    };
    for (p, o) in placeholders.iter().zip(operands) {
        let t = as_tensor(&o.arg)
            .ok_or_else(|| bad(format!("operand {} is not a tensor", brief(&o.arg))))?;
        if !outer.values.contains_key(t) {
            return Err(Error::UnknownTensor {
                at: At {
                    node: shown.clone(),
                    line: None,
                },
                name: t.into(),
            });
        }
        let v = current(g, outer, t, &shown)?;
        if inner.values.insert(p.to_string(), v).is_some() {
            return Err(bad(format!("{what} has placeholder `{p}` twice")));
        }
    }
    import_nodes(g, &graph.nodes, &mut inner, produced, &graph.outputs)?;

    let reader = format!("{}{node}", inner.path);
    let returned = subgraph_returns(g, &graph.outputs, &mut inner, &reader, &what, &bad)?;
    let (outs, _) = output_names(n);
    if outs.len() != returned.len() {
        return Err(bad(format!(
            "the node has {} output(s), {what} returns {}",
            outs.len(),
            returned.len()
        )));
    }
    for (o, r) in outs.iter().zip(&returned) {
        let Some(o) = o else { continue };
        let v = r.ok_or_else(|| bad(format!("output `{o}` is a `None` {what} returns")))?;
        outer.values.insert(o.clone(), v);
        produced.push(Produced {
            tensor: o.clone(),
            node: node.into(),
            value: v,
            want: outer.metas.get(o.as_str()).cloned(),
        });
    }
    outer.multi.insert(node.into(), Multi::Values(returned));
    Ok(())
}

/// What subgraph `what` returns (its `outputs`), flattened as the node's outputs are
/// (`None` for a returned `None`), read by `reader`.
fn subgraph_returns(
    g: &mut Graph,
    outputs: &[Value],
    inner: &mut Scope<'_>,
    reader: &str,
    what: &str,
    bad: &dyn Fn(String) -> Error,
) -> Result<Vec<Option<ValueId>>, Error> {
    let mut returned: Vec<Option<ValueId>> = vec![];
    for o in outputs {
        let mut lookup = |t: &Value| -> Result<(), Error> {
            let name = schema::tensor_name(t)
                .ok_or_else(|| bad(format!("{what} returns a tensor without a name: {t}")))?;
            if !inner.values.contains_key(name) {
                return Err(bad(format!(
                    "{what} returns `{name}`, a tensor it does not define"
                )));
            }
            returned.push(Some(current(g, inner, name, reader)?));
            Ok(())
        };
        match schema::variant(o) {
            Some(("as_tensor", t)) => lookup(t)?,
            Some(("as_tensors", Value::Array(ts))) => {
                for t in ts {
                    lookup(t)?;
                }
            }
            Some(("as_none", _)) => returned.push(None),
            _ => {
                return Err(bad(format!(
                    "{what} returns {}: Kiln takes tensor outputs only",
                    brief(o)
                )))
            }
        }
    }
    Ok(returned)
}
