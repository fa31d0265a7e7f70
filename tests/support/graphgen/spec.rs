//! A generated graph as data: inputs, integer constants, nodes and outputs, written
//! out as a `kiln-graph/1` file. The minimiser edits this form, never the text.

use std::fmt::Write;

/// One argument of a node, as the graph file spells it.
#[derive(Clone, Debug, PartialEq)]
pub enum Arg {
    /// A tensor by name.
    T(String),
    /// An integer.
    I(i64),
    /// A float (always written with a decimal point or exponent).
    F(f64),
    /// A bool.
    B(bool),
    /// A string that is not a tensor name (a dtype, a mode).
    S(&'static str),
    /// A list.
    L(Vec<Arg>),
    /// `None` inside a list (an index list's untouched dims).
    None,
}

impl Arg {
    /// The tensor names this argument reads.
    pub fn names(&self, out: &mut Vec<String>) {
        match self {
            Arg::T(n) => out.push(n.clone()),
            Arg::L(l) => l.iter().for_each(|a| a.names(out)),
            _ => {}
        }
    }

    fn rename(&mut self, from: &str, to: &str) {
        match self {
            Arg::T(n) if n == from => *n = to.to_string(),
            Arg::L(l) => l.iter_mut().for_each(|a| a.rename(from, to)),
            _ => {}
        }
    }

    fn write(&self, out: &mut String) {
        match self {
            Arg::T(n) => {
                let _ = write!(out, "\"{n}\"");
            }
            Arg::I(i) => {
                let _ = write!(out, "{i}");
            }
            Arg::F(f) => {
                let _ = write!(out, "{f:?}");
            }
            Arg::B(b) => {
                let _ = write!(out, "{b}");
            }
            Arg::S(s) => {
                let _ = write!(out, "\"{s}\"");
            }
            Arg::None => {
                // TOML has no null: Kiln's graph format spells `None` inside a list as
                // an empty list.
                out.push_str("[]");
            }
            Arg::L(l) => {
                out.push('[');
                for (i, a) in l.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    a.write(out);
                }
                out.push(']');
            }
        }
    }
}

/// A graph input.
#[derive(Clone, Debug)]
pub struct Input {
    /// its name
    pub name: String,
    /// its shape
    pub shape: Vec<i64>,
    /// its dtype name
    pub dtype: &'static str,
}

/// A constant with explicit values (index tensors, masks): in range by construction.
#[derive(Clone, Debug)]
pub struct Constant {
    /// its name
    pub name: String,
    /// its shape
    pub shape: Vec<i64>,
    /// its dtype name
    pub dtype: &'static str,
    /// its values, row-major
    pub values: Vec<i64>,
}

/// One node.
#[derive(Clone, Debug)]
pub struct Node {
    /// its name
    pub name: String,
    /// the op
    pub op: &'static str,
    /// positional arguments
    pub args: Vec<Arg>,
    /// keyword arguments
    pub attrs: Vec<(&'static str, Arg)>,
}

impl Node {
    /// The tensor names the node reads.
    pub fn reads(&self) -> Vec<String> {
        let mut out = Vec::new();
        self.args.iter().for_each(|a| a.names(&mut out));
        self.attrs.iter().for_each(|(_, a)| a.names(&mut out));
        out
    }
}

/// A whole generated graph.
#[derive(Clone, Debug)]
pub struct GraphSpec {
    /// the graph's name
    pub name: String,
    /// inputs, in order
    pub inputs: Vec<Input>,
    /// constants
    pub constants: Vec<Constant>,
    /// nodes, in a valid order
    pub nodes: Vec<Node>,
    /// output names (may repeat, may name an input)
    pub outputs: Vec<String>,
}

impl GraphSpec {
    /// The graph file.
    pub fn to_toml(&self) -> String {
        let mut t = String::new();
        let _ = writeln!(t, "format = \"kiln-graph/1\"\nname = \"{}\"", self.name);
        let outs: Vec<String> = self.outputs.iter().map(|o| format!("\"{o}\"")).collect();
        let _ = writeln!(t, "outputs = [{}]", outs.join(", "));
        for i in &self.inputs {
            let _ = writeln!(
                t,
                "\n[[inputs]]\nname = \"{}\"\nshape = {:?}\ndtype = \"{}\"",
                i.name, i.shape, i.dtype
            );
        }
        for c in &self.constants {
            let _ = writeln!(
                t,
                "\n[[constants]]\nname = \"{}\"\nshape = {:?}\ndtype = \"{}\"\nvalues = {:?}",
                c.name, c.shape, c.dtype, c.values
            );
        }
        for n in &self.nodes {
            let _ = writeln!(t, "\n[[nodes]]\nname = \"{}\"\nop = \"{}\"", n.name, n.op);
            let mut args = String::new();
            Arg::L(n.args.clone()).write(&mut args);
            let _ = writeln!(t, "args = {args}");
            if !n.attrs.is_empty() {
                let parts: Vec<String> = n
                    .attrs
                    .iter()
                    .map(|(k, v)| {
                        let mut s = format!("{k} = ");
                        v.write(&mut s);
                        s
                    })
                    .collect();
                let _ = writeln!(t, "attrs = {{ {} }}", parts.join(", "));
            }
        }
        t
    }

    /// Removes every node no output needs, and inputs and constants nothing reads.
    pub fn prune(&mut self) {
        let mut live: std::collections::HashSet<String> = self.outputs.iter().cloned().collect();
        for n in self.nodes.iter().rev() {
            if live.contains(&n.name) {
                live.extend(n.reads());
            }
        }
        self.nodes.retain(|n| live.contains(&n.name));
        self.constants.retain(|c| live.contains(&c.name));
        if self.inputs.iter().any(|i| live.contains(&i.name)) {
            self.inputs.retain(|i| live.contains(&i.name));
        } else {
            // A graph keeps at least one input (the format asks for one).
            self.inputs.truncate(1);
        }
    }

    /// Replaces node `index` by a new input of the same shape and dtype (a cut in a
    /// chain, for the minimiser).
    pub fn cut(&mut self, index: usize, shape: Vec<i64>, dtype: &'static str) {
        let node = self.nodes.remove(index);
        let name = format!("cut_{}", node.name);
        for n in &mut self.nodes {
            n.args.iter_mut().for_each(|a| a.rename(&node.name, &name));
            n.attrs
                .iter_mut()
                .for_each(|(_, a)| a.rename(&node.name, &name));
        }
        for o in &mut self.outputs {
            if *o == node.name {
                o.clone_from(&name);
            }
        }
        self.inputs.push(Input { name, shape, dtype });
    }
}
