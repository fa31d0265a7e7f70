//! A seeded generator of valid Kiln graphs drawn from the whole op table, for
//! differential testing: every graph it makes is run through the passes, the
//! schedule evaluator and the devices and compared with the reference interpreter
//! (here) or with PyTorch eager (`bench/gpu/differential.py`).
//!
//! The generator builds a graph node by node. Each step picks a recipe (an op
//! family), draws operands among the values made so far (recent ones first, so chains
//! form) and arguments that PyTorch accepts for them, and appends one or a few nodes.
//! After every step the graph is parsed by Kiln, whose shape inference gives the new
//! values' shapes, dtypes and strides; a step Kiln rejects is recorded (see
//! [`Generated::rejected`]), since the generator only proposes graphs PyTorch runs.
//!
//! What the graphs contain, by design: several outputs, outputs that are views or
//! aliases of each other and of inputs, an input returned directly, repeated outputs,
//! 0-d values, size-1 and size-0 dims, broadcasts in every position, every dtype, chains
//! of views, every reduction over every dim (negative dims too), index tensors kept in
//! range (constants), and the model ops (convolution, pooling, batch norm, attention,
//! embedding, gather, cumsum, diff, creation ops).

mod check;
mod spec;

use std::collections::HashMap;

use kiln::graph::{DType, Graph};
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

pub use check::{Checker, Finding, Passed};
pub use spec::{Arg, Constant, GraphSpec, Input, Node};

/// What to generate.
#[derive(Clone, Debug)]
pub struct Config {
    /// Steps (recipes) per graph, at most; a step adds one to four nodes.
    pub max_steps: usize,
    /// The largest element count of any value.
    pub max_numel: i64,
    /// Whether dims of size 0 may appear.
    pub empty_dims: bool,
    /// Whether low-precision floats (float16, bfloat16) may appear.
    pub low_precision: bool,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            max_steps: 10,
            max_numel: 4096,
            empty_dims: true,
            low_precision: true,
        }
    }
}

/// One generated graph.
#[derive(Clone, Debug)]
pub struct Generated {
    /// The graph.
    pub spec: GraphSpec,
    /// Steps Kiln refused, with its message: each is a graph PyTorch accepts and
    /// Kiln does not (or a generator bug); the test suite requires none.
    pub rejected: Vec<(String, String)>,
}

/// A value the generator can use: a graph input, constant or node output.
#[derive(Clone, Debug)]
struct Val {
    name: String,
    shape: Vec<i64>,
    strides: Vec<i64>,
    dtype: DType,
    /// Integer-valued exactly (so a cast to an integer dtype is exact on every device).
    exact: bool,
}

impl Val {
    fn numel(&self) -> i64 {
        self.shape.iter().product()
    }
    fn rank(&self) -> usize {
        self.shape.len()
    }
    fn is_float(&self) -> bool {
        self.dtype.is_float()
    }
    fn contiguous(&self) -> bool {
        let mut expect = 1;
        for (d, s) in self.shape.iter().zip(&self.strides).rev() {
            if *d != 1 && *s != expect {
                return false;
            }
            expect *= d;
        }
        true
    }
}

/// Generates graph number `seed`.
pub fn generate(seed: u64, cfg: &Config) -> Generated {
    let mut g = Gen {
        rng: ChaCha8Rng::seed_from_u64(seed),
        cfg: cfg.clone(),
        spec: GraphSpec {
            name: format!("g{seed}"),
            inputs: Vec::new(),
            constants: Vec::new(),
            nodes: Vec::new(),
            outputs: Vec::new(),
        },
        vals: Vec::new(),
        next: 0,
        rejected: Vec::new(),
    };
    g.run();
    Generated {
        spec: g.spec,
        rejected: g.rejected,
    }
}

/// Every float dtype name, and the integer and bool ones.
const FLOATS: [&str; 4] = ["float32", "float16", "bfloat16", "float64"];

fn dtype_name(d: DType) -> &'static str {
    d.name()
}

struct Gen {
    rng: ChaCha8Rng,
    cfg: Config,
    spec: GraphSpec,
    vals: Vec<Val>,
    next: usize,
    rejected: Vec<(String, String)>,
}

type Recipe = fn(&mut Gen) -> Option<Vec<Node>>;

/// Recipes with their weights.
const RECIPES: &[(u32, Recipe, &str)] = &[
    (12, Gen::unary, "unary"),
    (14, Gen::binary, "binary"),
    (3, Gen::where_, "where"),
    (3, Gen::clamp, "clamp"),
    (4, Gen::cast, "cast"),
    (12, Gen::reduce, "reduce"),
    (4, Gen::softmax, "softmax"),
    (4, Gen::norm, "norm"),
    (16, Gen::view, "view"),
    (3, Gen::cat, "cat"),
    (4, Gen::matmul, "matmul"),
    (2, Gen::cumsum, "cumsum"),
    (2, Gen::diff, "diff"),
    (2, Gen::gather, "gather"),
    (2, Gen::index, "index"),
    (1, Gen::embedding, "embedding"),
    (3, Gen::creation, "creation"),
    (2, Gen::conv, "conv"),
    (1, Gen::batch_norm, "batch_norm"),
    (2, Gen::pool, "pool"),
    (2, Gen::attention, "attention"),
    (1, Gen::passthrough, "passthrough"),
    (3, Gen::layout, "layout"),
    (1, Gen::group_norm, "group_norm"),
];

impl Gen {
    fn run(&mut self) {
        let inputs = self.rng.random_range(1..=3);
        for _ in 0..inputs {
            let rank = self.rng.random_range(0..=4);
            let shape = self.shape(rank);
            let dtype = self.input_dtype();
            self.input(shape, dtype);
        }
        self.refresh();
        let steps = self.rng.random_range(1..=self.cfg.max_steps);
        let total: u32 = RECIPES.iter().map(|r| r.0).sum();
        let mut done = 0;
        let mut tries = 0;
        while done < steps && tries < steps * 8 {
            tries += 1;
            let mut pick = self.rng.random_range(0..total);
            let (_, recipe, what) = *RECIPES
                .iter()
                .find(|r| {
                    if pick < r.0 {
                        true
                    } else {
                        pick -= r.0;
                        false
                    }
                })
                .expect("a recipe");
            let (inputs, constants) = (self.spec.inputs.len(), self.spec.constants.len());
            let Some(nodes) = recipe(self) else {
                self.spec.inputs.truncate(inputs);
                self.spec.constants.truncate(constants);
                continue;
            };
            if self.append(nodes, what) {
                done += 1;
            } else {
                self.spec.inputs.truncate(inputs);
                self.spec.constants.truncate(constants);
                self.refresh();
            }
        }
        self.choose_outputs();
    }

    /// Appends `nodes` if Kiln accepts the graph with them.
    fn append(&mut self, nodes: Vec<Node>, what: &str) -> bool {
        let before = self.spec.nodes.len();
        self.spec.nodes.extend(nodes);
        let last = self.spec.nodes.last().expect("a node").name.clone();
        self.spec.outputs = vec![last];
        match self.infer() {
            Ok(()) => true,
            Err(e) => {
                self.rejected.push((what.to_string(), e));
                self.spec.nodes.truncate(before);
                false
            }
        }
    }

    /// Parses the graph with Kiln and records every value's metadata.
    fn infer(&mut self) -> Result<(), String> {
        let text = self.spec.to_toml();
        let graph =
            kiln::graph::parse_toml(&text).map_err(|e| format!("{}\n{text}", check::chain(&e)))?;
        self.vals = values(&graph, &self.spec);
        Ok(())
    }

    fn refresh(&mut self) {
        if self.spec.nodes.is_empty() {
            self.spec.outputs = vec![self.spec.inputs[0].name.clone()];
        } else {
            self.spec.outputs = vec![self.spec.nodes.last().expect("a node").name.clone()];
        }
        if let Err(e) = self.infer() {
            panic!("a graph Kiln accepted before is refused now: {e}");
        }
    }

    fn choose_outputs(&mut self) {
        let last = self
            .spec
            .nodes
            .last()
            .map_or_else(|| self.spec.inputs[0].name.clone(), |n| n.name.clone());
        let mut outs = vec![last];
        let extra = self.rng.random_range(0..=3);
        let names: Vec<String> = self.vals.iter().map(|v| v.name.clone()).collect();
        for _ in 0..extra {
            let r = self.rng.random_range(0..100);
            let name = if r < 8 {
                // An input returned directly.
                self.spec.inputs[0].name.clone()
            } else if r < 14 {
                // The same output twice.
                outs[0].clone()
            } else {
                names.choose(&mut self.rng).expect("a value").clone()
            };
            if r < 14 || !outs.contains(&name) {
                outs.push(name);
            }
        }
        self.spec.outputs = outs;
        // Constants and inputs are values too, so the outputs are always valid; the
        // generator must leave a graph Kiln accepts.
        if let Err(e) = self.infer() {
            self.rejected.push(("outputs".into(), e));
            self.spec.outputs.truncate(1);
            let _ = self.infer();
        }
    }

    // ---- drawing ----

    fn name(&mut self, base: &str) -> String {
        self.next += 1;
        format!("{base}{}", self.next)
    }

    fn dim(&mut self) -> i64 {
        let r = self.rng.random_range(0..100);
        match r {
            0..=17 => 1,
            18..=57 => self.rng.random_range(2..=8),
            58..=71 => *[3, 5, 7, 9, 11, 13].choose(&mut self.rng).expect("a size"),
            72..=83 => *[16, 32, 64].choose(&mut self.rng).expect("a size"),
            84..=94 => *[17, 31, 33, 65, 100, 127, 129]
                .choose(&mut self.rng)
                .expect("a size"),
            95..=96 if self.cfg.empty_dims => 0,
            _ => *[257, 513, 1000, 2049]
                .choose(&mut self.rng)
                .expect("a size"),
        }
    }

    /// A shape of `rank` dims within the element budget.
    fn shape(&mut self, rank: usize) -> Vec<i64> {
        let mut s: Vec<i64> = (0..rank).map(|_| self.dim()).collect();
        while s.iter().product::<i64>() > self.cfg.max_numel {
            let i = (0..rank).max_by_key(|&i| s[i]).expect("a dim");
            s[i] = (s[i] / 3).max(1);
        }
        s
    }

    fn input_dtype(&mut self) -> &'static str {
        let r = self.rng.random_range(0..100);
        match r {
            0..=69 => "float32",
            70..=75 if self.cfg.low_precision => "float16",
            76..=81 if self.cfg.low_precision => "bfloat16",
            82..=86 => "float64",
            87..=91 => "int64",
            92..=94 => "int32",
            95..=99 => "bool",
            _ => "float32",
        }
    }

    fn float_dtype(&mut self) -> &'static str {
        if self.cfg.low_precision {
            FLOATS.choose(&mut self.rng).expect("a dtype")
        } else {
            ["float32", "float64"]
                .choose(&mut self.rng)
                .expect("a dtype")
        }
    }

    fn input(&mut self, shape: Vec<i64>, dtype: &'static str) -> String {
        let name = self.name("x");
        self.spec.inputs.push(Input {
            name: name.clone(),
            shape,
            dtype,
        });
        name
    }

    fn constant(&mut self, shape: Vec<i64>, dtype: &'static str, values: Vec<i64>) -> String {
        let name = self.name("c");
        self.spec.constants.push(Constant {
            name: name.clone(),
            shape,
            dtype,
            values,
        });
        name
    }

    /// A value satisfying `ok`, recent ones more likely.
    fn pick(&mut self, ok: impl Fn(&Val) -> bool) -> Option<Val> {
        let candidates: Vec<&Val> = self.vals.iter().filter(|v| ok(v)).collect();
        if candidates.is_empty() {
            return None;
        }
        let n = candidates.len();
        let i = if self.rng.random_bool(0.6) {
            n - 1 - self.rng.random_range(0..n.min(3))
        } else {
            self.rng.random_range(0..n)
        };
        Some(candidates[i].clone())
    }

    fn chance(&mut self, p: f64) -> bool {
        self.rng.random_bool(p)
    }

    /// A dim of a rank-`rank` value, negative half the time.
    fn any_dim(&mut self, rank: usize) -> i64 {
        let d = self.rng.random_range(0..rank) as i64;
        if self.chance(0.4) {
            d - rank as i64
        } else {
            d
        }
    }

    fn node(&mut self, op: &'static str, args: Vec<Arg>, attrs: Vec<(&'static str, Arg)>) -> Node {
        Node {
            name: self.name("n"),
            op,
            args,
            attrs,
        }
    }

    /// A shape that broadcasts with `shape`: some dims set to 1, leading dims dropped
    /// or added.
    fn broadcastable(&mut self, shape: &[i64]) -> Vec<i64> {
        let mut s: Vec<i64> = shape
            .iter()
            .map(|&d| if self.chance(0.35) { 1 } else { d })
            .collect();
        if !s.is_empty() && self.chance(0.3) {
            let drop = self.rng.random_range(1..=s.len());
            s.drain(..drop);
        } else if s.len() < 4 && self.chance(0.15) {
            s.insert(0, *[1, 2, 3].choose(&mut self.rng).expect("a size"));
        }
        if s.iter().product::<i64>() * shape.iter().product::<i64>().max(1) > self.cfg.max_numel * 8
        {
            s = s.iter().map(|_| 1).collect();
        }
        s
    }

    /// A tensor or number operand to combine with `a` (same category as `a` unless
    /// `mixed`).
    fn second_operand(&mut self, a: &Val, mixed: bool) -> Arg {
        let r = self.rng.random_range(0..100);
        if r < 25 {
            return if a.is_float() || (mixed && self.chance(0.5)) {
                Arg::F(self.small_float())
            } else if a.dtype == DType::Bool {
                Arg::B(self.chance(0.5))
            } else {
                Arg::I(self.rng.random_range(-3..=3))
            };
        }
        let shape = a.shape.clone();
        if r < 55 {
            // An existing value that broadcasts with `a`.
            let cat = a.dtype.category();
            if let Some(b) =
                self.pick(|v| broadcasts(&v.shape, &shape) && (mixed || v.dtype.category() == cat))
            {
                return Arg::T(b.name);
            }
        }
        let bshape = if r < 62 {
            vec![]
        } else {
            self.broadcastable(&shape)
        };
        let dtype = if mixed && self.chance(0.3) {
            self.input_dtype()
        } else {
            dtype_name(a.dtype)
        };
        Arg::T(self.input(bshape, dtype))
    }

    fn small_float(&mut self) -> f64 {
        *[0.5, -1.5, 2.0, 0.125, -0.75, 3.0, 1e-3]
            .choose(&mut self.rng)
            .expect("a number")
    }

    /// Nodes making `v` safe for a domain-restricted op: `abs(v) + 0.5`.
    fn positive(&mut self, v: &Val) -> (Vec<Node>, String) {
        let a = self.node("abs", vec![Arg::T(v.name.clone())], vec![]);
        let b = self.node("add", vec![Arg::T(a.name.clone()), Arg::F(0.5)], vec![]);
        let name = b.name.clone();
        (vec![a, b], name)
    }

    // ---- recipes ----

    fn unary(&mut self) -> Option<Vec<Node>> {
        let a = self.pick(|v| v.dtype != DType::Bool)?;
        const FLOAT_OPS: &[&str] = &[
            "abs",
            "neg",
            "exp",
            "log",
            "log1p",
            "sqrt",
            "rsqrt",
            "sin",
            "cos",
            "tanh",
            "sigmoid",
            "relu",
            "silu",
            "erf",
            "reciprocal",
            "gelu",
            "relu6",
            "hardtanh",
            "hardsigmoid",
            "hardswish",
            "floor",
            "ceil",
            "round",
            "trunc",
            "sign",
            "expm1",
            "log2",
            "log10",
            "tan",
            "atan",
            "asin",
            "acos",
            "sinh",
            "cosh",
            "asinh",
            "acosh",
            "atanh",
        ];
        const INT_OPS: &[&str] = &[
            "abs", "neg", "relu", "exp", "sin", "cos", "tanh", "sigmoid", "floor", "ceil", "round",
            "trunc", "sign",
        ];
        let op = if a.is_float() {
            *FLOAT_OPS.choose(&mut self.rng).expect("an op")
        } else {
            *INT_OPS.choose(&mut self.rng).expect("an op")
        };
        let mut nodes = Vec::new();
        let mut operand = a.name.clone();
        if matches!(
            op,
            "log" | "sqrt" | "rsqrt" | "reciprocal" | "log1p" | "log2" | "log10"
        ) {
            let (n, name) = self.positive(&a);
            nodes.extend(n);
            operand = name;
        }
        if op == "acosh" {
            // At least 1: acosh's domain.
            let (n, name) = self.positive(&a);
            nodes.extend(n);
            let one = self.node("add", vec![Arg::T(name), Arg::F(1.0)], vec![]);
            operand = one.name.clone();
            nodes.push(one);
        }
        if matches!(op, "asin" | "acos" | "tan" | "atanh") {
            // Inside (-1, 1): the inverse sines' domain, and far from tan's poles.
            let t = self.node("tanh", vec![Arg::T(operand)], vec![]);
            operand = t.name.clone();
            nodes.push(t);
        }
        let attrs = match op {
            "gelu" if self.chance(0.5) => vec![("approximate", Arg::S("tanh"))],
            "hardtanh" if self.chance(0.5) => {
                vec![("min_val", Arg::F(-0.5)), ("max_val", Arg::F(0.25))]
            }
            _ => vec![],
        };
        let n = self.node(op, vec![Arg::T(operand)], attrs);
        nodes.push(n);
        Some(nodes)
    }

    fn binary(&mut self) -> Option<Vec<Node>> {
        let a = self.pick(|_| true)?;
        let r = self.rng.random_range(0..100);
        let cat_int = !a.is_float();
        if a.dtype == DType::Bool || cat_int && r < 15 {
            // Logical and bitwise ops on bool/int.
            let op = *[
                "bitwise_and",
                "bitwise_or",
                "bitwise_xor",
                "logical_not",
                "eq",
                "ne",
            ]
            .choose(&mut self.rng)
            .expect("an op");
            if op == "logical_not" {
                return Some(vec![self.node(op, vec![Arg::T(a.name)], vec![])]);
            }
            let b = self.second_operand(&a, false);
            if let (Arg::F(_), true) = (&b, op.starts_with("bitwise")) {
                return None;
            }
            return Some(vec![self.node(op, vec![Arg::T(a.name), b], vec![])]);
        }
        let op = *[
            "add",
            "sub",
            "mul",
            "div",
            "pow",
            "maximum",
            "minimum",
            "eq",
            "lt",
            "ge",
            "gt",
            "le",
            "max",
            "min",
            "fmod",
            "remainder",
            "atan2",
            "hypot",
            "copysign",
        ]
        .choose(&mut self.rng)
        .expect("an op");
        if op == "hypot" && !a.is_float() {
            // PyTorch's hypot takes floating-point tensors only.
            return None;
        }
        let mixed = self.chance(0.25);
        let mut nodes = Vec::new();
        let mut a_name = a.name.clone();
        let mut b = self.second_operand(&a, mixed);
        if matches!(op, "max" | "min") && !matches!(b, Arg::T(_)) {
            return None;
        }
        let b_is_bool = match &b {
            // A value made before, or an input `second_operand` just made.
            Arg::T(n) => {
                self.vals
                    .iter()
                    .any(|v| &v.name == n && v.dtype == DType::Bool)
                    || self
                        .spec
                        .inputs
                        .iter()
                        .any(|i| &i.name == n && i.dtype == "bool")
            }
            Arg::B(_) => true,
            _ => false,
        };
        if (op == "sub" || op == "fmod" || op == "remainder")
            && (b_is_bool || a.dtype == DType::Bool)
        {
            // PyTorch refuses `-` with any bool operand.
            return None;
        }
        let mut attrs = vec![];
        match op {
            "add" | "sub" if self.chance(0.3) => {
                attrs.push(("alpha", if a.is_float() { Arg::F(0.5) } else { Arg::I(2) }));
                if let Arg::T(bn) = &b {
                    // A float alpha with an integer operand is an error in PyTorch.
                    if !a.is_float() || self.vals.iter().any(|v| &v.name == bn && !v.is_float()) {
                        attrs[0].1 = Arg::I(2);
                    }
                }
            }
            "fmod" | "remainder" if !a.is_float() || !matches!(b, Arg::T(_)) => {
                // An integer remainder by zero is an error in PyTorch: a non-zero number.
                b = if a.is_float() {
                    Arg::F(*[1.5, -0.75, 2.0].choose(&mut self.rng).expect("a divisor"))
                } else {
                    Arg::I(*[2, -3, 5].choose(&mut self.rng).expect("a divisor"))
                };
            }
            "div" if self.chance(0.4) => {
                attrs.push((
                    "rounding_mode",
                    Arg::S(if self.chance(0.5) { "trunc" } else { "floor" }),
                ));
                if !a.is_float() {
                    // Integer division by zero is an error: divide by a non-zero number.
                    b = Arg::I(*[2, -3, 5].choose(&mut self.rng).expect("a divisor"));
                }
            }
            "pow" => {
                if a.is_float() {
                    if self.chance(0.5) {
                        b = Arg::F(*[2.0, 3.0, 0.5, -1.0].choose(&mut self.rng).expect("n"));
                        if matches!(b, Arg::F(e) if e.fract() != 0.0 || e < 0.0) {
                            let (n, name) = self.positive(&a);
                            nodes.extend(n);
                            a_name = name;
                        }
                    } else {
                        let (n, name) = self.positive(&a);
                        nodes.extend(n);
                        a_name = name;
                    }
                } else {
                    b = Arg::I(*[2, 3].choose(&mut self.rng).expect("n"));
                }
            }
            _ => {}
        }
        let args = vec![Arg::T(a_name), b];
        nodes.push(self.node(op, args, attrs));
        Some(nodes)
    }

    fn where_(&mut self) -> Option<Vec<Node>> {
        let a = self.pick(|_| true)?;
        let mut nodes = Vec::new();
        let cond = match self.pick(|v| v.dtype == DType::Bool && broadcasts(&v.shape, &a.shape)) {
            Some(c) if self.chance(0.5) => c.name,
            _ => {
                let zero = if a.is_float() { Arg::F(0.0) } else { Arg::I(0) };
                let c = self.node("gt", vec![Arg::T(a.name.clone()), zero], vec![]);
                let n = c.name.clone();
                nodes.push(c);
                n
            }
        };
        let mixed = self.chance(0.2);
        let b = self.second_operand(&a, mixed);
        let args = if self.chance(0.5) {
            vec![Arg::T(cond), Arg::T(a.name), b]
        } else {
            vec![Arg::T(cond), b, Arg::T(a.name)]
        };
        if matches!(args[1], Arg::F(_) | Arg::I(_) | Arg::B(_))
            && matches!(args[2], Arg::F(_) | Arg::I(_) | Arg::B(_))
        {
            return None;
        }
        nodes.push(self.node("where", args, vec![]));
        Some(nodes)
    }

    fn clamp(&mut self) -> Option<Vec<Node>> {
        let a = self.pick(|v| v.dtype != DType::Bool)?;
        let (lo, hi) = if a.is_float() {
            (Arg::F(-0.5), Arg::F(0.75))
        } else {
            (Arg::I(-2), Arg::I(3))
        };
        let attrs = match self.rng.random_range(0..3) {
            0 => vec![("min", lo)],
            1 => vec![("max", hi)],
            _ => vec![("min", lo), ("max", hi)],
        };
        Some(vec![self.node("clamp", vec![Arg::T(a.name)], attrs)])
    }

    fn cast(&mut self) -> Option<Vec<Node>> {
        let a = self.pick(|_| true)?;
        let to = if a.is_float() && !a.exact {
            if self.chance(0.15) {
                "bool"
            } else {
                self.float_dtype()
            }
        } else {
            *["float32", "float64", "int64", "int32", "bool", "float16"]
                .choose(&mut self.rng)
                .expect("a dtype")
        };
        let op = if self.chance(0.3) { "_to_copy" } else { "to" };
        Some(vec![self.node(
            op,
            vec![Arg::T(a.name)],
            vec![("dtype", Arg::S(to))],
        )])
    }

    fn reduce(&mut self) -> Option<Vec<Node>> {
        let a = self.pick(|_| true)?;
        let mut ops = vec!["sum", "any", "all"];
        if a.dtype != DType::Bool {
            ops.extend(["amax", "amin", "max", "min"]);
        }
        if a.is_float() {
            ops.extend(["mean", "var", "mean", "var"]);
        }
        let op = *ops.choose(&mut self.rng).expect("an op");
        let rank = a.rank();
        // The dims: all (none given), one, or a subset; negative sometimes.
        let dims: Option<Vec<i64>> = if rank == 0 || op == "max" || op == "min" || self.chance(0.2)
        {
            None
        } else if self.chance(0.6) {
            Some(vec![self.any_dim(rank)])
        } else {
            let mut all: Vec<i64> = (0..rank as i64).collect();
            let k = self.rng.random_range(1..=rank);
            let mut chosen: Vec<i64> = Vec::new();
            for _ in 0..k {
                let i = self.rng.random_range(0..all.len());
                let d = all.remove(i);
                chosen.push(if self.chance(0.3) { d - rank as i64 } else { d });
            }
            Some(chosen)
        };
        // amax/amin of nothing is an error in PyTorch.
        let reduced: i64 = match &dims {
            None => a.numel(),
            Some(ds) => ds
                .iter()
                .map(|&d| a.shape[d.rem_euclid(rank as i64) as usize])
                .product(),
        };
        if matches!(op, "amax" | "amin" | "max" | "min") && reduced == 0 {
            return None;
        }
        let mut attrs = Vec::new();
        if let Some(ds) = dims {
            attrs.push(("dim", Arg::L(ds.into_iter().map(Arg::I).collect())));
            if self.chance(0.4) {
                attrs.push(("keepdim", Arg::B(true)));
            }
        }
        if op == "var" && self.chance(0.5) {
            attrs.push(("correction", Arg::I(self.rng.random_range(0..=2))));
        }
        if matches!(op, "sum" | "mean") && a.is_float() && self.chance(0.15) {
            attrs.push(("dtype", Arg::S("float64")));
        }
        Some(vec![self.node(op, vec![Arg::T(a.name)], attrs)])
    }

    fn softmax(&mut self) -> Option<Vec<Node>> {
        let a = self.pick(|v| v.is_float())?;
        let dim = if a.rank() == 0 {
            *[0, -1].choose(&mut self.rng).expect("a dim")
        } else {
            self.any_dim(a.rank())
        };
        let r = self.rng.random_range(0..5);
        let (op, args) = match r {
            0 => ("softmax", vec![Arg::T(a.name), Arg::I(dim)]),
            4 => {
                // A dtype the input is cast to first.
                let d = if a.dtype == DType::Float32 {
                    "float64"
                } else {
                    "float32"
                };
                ("log_softmax", vec![Arg::T(a.name), Arg::I(dim), Arg::S(d)])
            }
            1 => ("log_softmax", vec![Arg::T(a.name), Arg::I(dim)]),
            2 => {
                let h2f = a.dtype == DType::Float16 && self.chance(0.5);
                ("_softmax", vec![Arg::T(a.name), Arg::I(dim), Arg::B(h2f)])
            }
            _ => (
                "_log_softmax",
                vec![Arg::T(a.name), Arg::I(dim), Arg::B(false)],
            ),
        };
        Some(vec![self.node(op, args, vec![])])
    }

    fn norm(&mut self) -> Option<Vec<Node>> {
        let a = self.pick(|v| v.is_float() && v.rank() >= 1)?;
        let k = self.rng.random_range(1..=a.rank().min(2));
        let norm_shape: Vec<i64> = a.shape[a.rank() - k..].to_vec();
        let dt = dtype_name(a.dtype);
        let shape_arg = Arg::L(norm_shape.iter().map(|&d| Arg::I(d)).collect());
        let r = self.rng.random_range(0..3);
        let mut nodes = Vec::new();
        match r {
            0 | 1 => {
                let mut args = vec![Arg::T(a.name.clone()), shape_arg];
                let with_w = self.chance(0.7);
                if with_w {
                    let w = self.input(norm_shape.clone(), dt);
                    args.push(Arg::T(w));
                    if self.chance(0.7) {
                        let b = self.input(norm_shape.clone(), dt);
                        args.push(Arg::T(b));
                    }
                }
                let native = r == 1 && args.len() == 4;
                let n = self.node(
                    if native {
                        "native_layer_norm"
                    } else {
                        "layer_norm"
                    },
                    args,
                    vec![("eps", Arg::F(1e-5))],
                );
                let name = n.name.clone();
                nodes.push(n);
                if native {
                    let i = self.rng.random_range(0..3);
                    nodes.push(self.node("getitem", vec![Arg::T(name), Arg::I(i)], vec![]));
                }
            }
            _ => {
                let mut args = vec![Arg::T(a.name.clone()), shape_arg];
                if self.chance(0.7) {
                    let w = self.input(norm_shape.clone(), dt);
                    args.push(Arg::T(w));
                }
                let attrs = if self.chance(0.5) {
                    vec![("eps", Arg::F(1e-6))]
                } else {
                    vec![]
                };
                nodes.push(self.node("rms_norm", args, attrs));
            }
        }
        Some(nodes)
    }

    fn view(&mut self) -> Option<Vec<Node>> {
        let a = self.pick(|_| true)?;
        let rank = a.rank();
        let t = Arg::T(a.name.clone());
        let r = self.rng.random_range(0..15);
        let node = match r {
            0 | 1 => {
                let shape = self.reshape_to(&a.shape);
                let op = if r == 1 && a.contiguous() {
                    "view"
                } else {
                    "reshape"
                };
                self.node(op, vec![t, ints(&shape)], vec![])
            }
            2 if rank >= 1 => {
                let mut perm: Vec<i64> = (0..rank as i64).collect();
                for i in (1..perm.len()).rev() {
                    let j = self.rng.random_range(0..=i);
                    perm.swap(i, j);
                }
                let perm = perm
                    .into_iter()
                    .map(|d| if self.chance(0.2) { d - rank as i64 } else { d })
                    .collect::<Vec<_>>();
                self.node("permute", vec![t, ints(&perm)], vec![])
            }
            3 if rank >= 1 => {
                let (d0, d1) = (self.any_dim(rank), self.any_dim(rank));
                self.node("transpose", vec![t, Arg::I(d0), Arg::I(d1)], vec![])
            }
            4 => {
                let d = self.rng.random_range(-(rank as i64) - 1..=rank as i64);
                self.node("unsqueeze", vec![t, Arg::I(d)], vec![])
            }
            5 => {
                let ones: Vec<i64> = (0..rank as i64)
                    .filter(|&d| a.shape[d as usize] == 1)
                    .collect();
                if ones.is_empty() || self.chance(0.3) {
                    self.node("squeeze", vec![t], vec![])
                } else if self.chance(0.5) {
                    let d = *ones.choose(&mut self.rng).expect("a dim");
                    self.node("squeeze", vec![t, Arg::I(d)], vec![])
                } else {
                    self.node("squeeze", vec![t, ints(&ones)], vec![])
                }
            }
            6 => {
                let mut size: Vec<i64> = a
                    .shape
                    .iter()
                    .map(|&d| {
                        if d == 1 && self.chance(0.6) {
                            self.rng.random_range(2..=6)
                        } else if self.chance(0.5) {
                            -1
                        } else {
                            d
                        }
                    })
                    .collect();
                if size.len() < 4 && self.chance(0.3) {
                    size.insert(0, self.rng.random_range(1..=3));
                }
                let n: i64 = size.iter().map(|&d| d.max(1)).product::<i64>()
                    * a.shape.iter().product::<i64>().max(1);
                if n > self.cfg.max_numel * 8 {
                    return None;
                }
                self.node("expand", vec![t, ints(&size)], vec![])
            }
            7 if rank >= 1 => {
                let d = self.any_dim(rank);
                let n = a.shape[d.rem_euclid(rank as i64) as usize];
                if n == 0 {
                    return None;
                }
                let i = self.rng.random_range(-n..n);
                self.node("select", vec![t, Arg::I(d), Arg::I(i)], vec![])
            }
            8 | 9 if rank >= 1 => {
                let d = self.any_dim(rank);
                let n = a.shape[d.rem_euclid(rank as i64) as usize];
                let start = self.rng.random_range(-n - 2..=n + 2);
                let end = self.rng.random_range(-n - 2..=n + 3);
                let step = *[1, 1, 2, 3].choose(&mut self.rng).expect("a step");
                let mut args = vec![t, Arg::I(d), Arg::I(start), Arg::I(end)];
                if step != 1 {
                    args.push(Arg::I(step));
                }
                if self.chance(0.1) {
                    args.truncate(3);
                }
                self.node("slice", args, vec![])
            }
            10 if rank >= 1 => {
                let d = self.any_dim(rank);
                let n = a.shape[d.rem_euclid(rank as i64) as usize];
                let node = if self.chance(0.5) {
                    let s = self.rng.random_range(1..=n.max(1));
                    self.node("split", vec![t, Arg::I(s), Arg::I(d)], vec![])
                } else {
                    let mut sizes = Vec::new();
                    let mut left = n;
                    while left > 0 {
                        let s = self.rng.random_range(1..=left);
                        sizes.push(s);
                        left -= s;
                    }
                    if sizes.is_empty() {
                        sizes.push(0);
                    }
                    self.node("split_with_sizes", vec![t, ints(&sizes), Arg::I(d)], vec![])
                };
                // How many parts PyTorch gives: an empty dim still gives one.
                let parts = match &node.args[1] {
                    Arg::L(l) => l.len() as i64,
                    Arg::I(s) if n > 0 => (n + s - 1) / s,
                    _ => 1,
                };
                let name = node.name.clone();
                let i = self.rng.random_range(0..parts.max(1));
                let get = self.node("getitem", vec![Arg::T(name), Arg::I(i)], vec![]);
                return Some(vec![node, get]);
            }
            11 if rank >= 1 => {
                let s = self.rng.random_range(0..rank as i64);
                let e = self.rng.random_range(s..rank as i64);
                self.node(
                    "flatten",
                    vec![t, Arg::I(s), Arg::I(e - rank as i64)],
                    vec![],
                )
            }
            12 => {
                let op = *["contiguous", "clone", "alias", "detach"]
                    .choose(&mut self.rng)
                    .expect("an op");
                self.node(op, vec![t], vec![])
            }
            _ => {
                let shape = self.reshape_to(&a.shape);
                self.node("reshape", vec![t, ints(&shape)], vec![])
            }
        };
        Some(vec![node])
    }

    /// A random shape with `shape`'s element count (one `-1` sometimes).
    fn reshape_to(&mut self, shape: &[i64]) -> Vec<i64> {
        let n: i64 = shape.iter().product();
        if n == 0 {
            let mut s = shape.to_vec();
            s.reverse();
            return s;
        }
        let mut factors = Vec::new();
        let mut m = n;
        let mut p = 2;
        while m > 1 {
            while m % p == 0 {
                factors.push(p);
                m /= p;
            }
            p += 1;
            if p * p > m && m > 1 {
                factors.push(m);
                break;
            }
        }
        let dims = self.rng.random_range(0..=4usize.min(factors.len() + 1));
        let mut out = vec![1i64; dims.max(1)];
        for f in factors {
            let i = self.rng.random_range(0..out.len());
            out[i] *= f;
        }
        if dims == 0 && out == [1] {
            // A 0-d result for a single element.
            return if self.chance(0.5) { vec![] } else { out };
        }
        if self.chance(0.3) {
            let i = self.rng.random_range(0..out.len());
            out[i] = -1;
        }
        out
    }

    fn cat(&mut self) -> Option<Vec<Node>> {
        let a = self.pick(|v| v.rank() >= 1)?;
        let d = self.any_dim(a.rank());
        let dd = d.rem_euclid(a.rank() as i64) as usize;
        let shape = a.shape.clone();
        let mut parts = vec![Arg::T(a.name.clone())];
        let k = self.rng.random_range(1..=2);
        for _ in 0..k {
            let same = |v: &Val| {
                v.rank() == shape.len()
                    && v.shape
                        .iter()
                        .zip(&shape)
                        .enumerate()
                        .all(|(i, (x, y))| i == dd || x == y)
            };
            let b = match self.pick(same) {
                Some(b) if self.chance(0.6) => b.name,
                _ => {
                    let mut s = shape.clone();
                    s[dd] = self.rng.random_range(0..=5);
                    let dt = if self.chance(0.8) {
                        dtype_name(a.dtype)
                    } else {
                        self.input_dtype()
                    };
                    self.input(s, dt)
                }
            };
            parts.push(Arg::T(b));
        }
        Some(vec![self.node(
            "cat",
            vec![Arg::L(parts), Arg::I(d)],
            vec![],
        )])
    }

    fn matmul(&mut self) -> Option<Vec<Node>> {
        let a = self.pick(|v| v.is_float() && v.rank() >= 1 && v.numel() > 0)?;
        let dt = dtype_name(a.dtype);
        let rank = a.rank();
        let k = a.shape[rank - 1];
        let n = *[1, 3, 8, 16, 33].choose(&mut self.rng).expect("a size");
        let r = self.rng.random_range(0..5);
        let node = match r {
            0 if rank == 2 => {
                let b = self.input(vec![k, n], dt);
                self.node("mm", vec![Arg::T(a.name), Arg::T(b)], vec![])
            }
            1 if rank == 3 && self.chance(0.3) => {
                let b = self.input(vec![a.shape[0], k, n], dt);
                let mut bias = self.broadcastable(&[a.shape[0], a.shape[1], n]);
                bias.drain(..bias.len().saturating_sub(3));
                let c = self.input(bias, dt);
                self.node(
                    "baddbmm",
                    vec![Arg::T(c), Arg::T(a.name), Arg::T(b)],
                    vec![("beta", Arg::F(0.5)), ("alpha", Arg::F(2.0))],
                )
            }
            1 if rank == 3 => {
                let b = self.input(vec![a.shape[0], k, n], dt);
                self.node("bmm", vec![Arg::T(a.name), Arg::T(b)], vec![])
            }
            2 if rank == 2 => {
                let mut bias = self.broadcastable(&[a.shape[0], n]);
                // addmm expands its bias to the product: no dims of its own.
                bias.drain(..bias.len().saturating_sub(2));
                let c = self.input(bias, dt);
                let b = self.input(vec![k, n], dt);
                let attrs = if self.chance(0.5) {
                    vec![("beta", Arg::F(0.5)), ("alpha", Arg::F(2.0))]
                } else {
                    vec![]
                };
                self.node("addmm", vec![Arg::T(c), Arg::T(a.name), Arg::T(b)], attrs)
            }
            3 => {
                let w = self.input(vec![n, k], dt);
                let mut args = vec![Arg::T(a.name), Arg::T(w)];
                if self.chance(0.6) {
                    args.push(Arg::T(self.input(vec![n], dt)));
                }
                self.node("linear", args, vec![])
            }
            _ => {
                // matmul with PyTorch's rules: a 1-D other, or broadcast batch dims.
                let other = if self.chance(0.3) {
                    vec![k]
                } else {
                    let mut s = vec![k, n];
                    if rank >= 3 && self.chance(0.5) {
                        s.insert(
                            0,
                            if self.chance(0.5) {
                                1
                            } else {
                                a.shape[rank - 3]
                            },
                        );
                    }
                    s
                };
                let b = self.input(other, dt);
                self.node("matmul", vec![Arg::T(a.name), Arg::T(b)], vec![])
            }
        };
        Some(vec![node])
    }

    fn cumsum(&mut self) -> Option<Vec<Node>> {
        let a = self.pick(|v| v.rank() >= 1)?;
        let d = self.any_dim(a.rank());
        let attrs = if a.is_float() && self.chance(0.2) {
            vec![("dtype", Arg::S("float64"))]
        } else {
            vec![]
        };
        Some(vec![self.node(
            "cumsum",
            vec![Arg::T(a.name), Arg::I(d)],
            attrs,
        )])
    }

    fn diff(&mut self) -> Option<Vec<Node>> {
        let a = self.pick(|v| v.rank() >= 1 && v.dtype != DType::Bool)?;
        let d = self.any_dim(a.rank());
        let dd = d.rem_euclid(a.rank() as i64) as usize;
        let n = self.rng.random_range(0..=2);
        let mut args = vec![Arg::T(a.name.clone()), Arg::I(n), Arg::I(d)];
        if self.chance(0.4) {
            let mut s = a.shape.clone();
            s[dd] = self.rng.random_range(1..=3);
            args.push(Arg::T(self.input(s.clone(), dtype_name(a.dtype))));
            if self.chance(0.5) {
                args.push(Arg::T(self.input(s, dtype_name(a.dtype))));
            }
        }
        Some(vec![self.node("diff", args, vec![])])
    }

    /// An int64 constant of `shape` with values in `lo..hi`.
    fn indices(&mut self, shape: Vec<i64>, lo: i64, hi: i64) -> String {
        let n: i64 = shape.iter().product();
        let values = (0..n).map(|_| self.rng.random_range(lo..hi)).collect();
        let dt = if self.chance(0.2) { "int32" } else { "int64" };
        self.constant(shape, dt, values)
    }

    fn gather(&mut self) -> Option<Vec<Node>> {
        let a = self.pick(|v| v.rank() >= 1 && v.numel() > 0)?;
        let d = self.any_dim(a.rank());
        let dd = d.rem_euclid(a.rank() as i64) as usize;
        let shape: Vec<i64> = a
            .shape
            .iter()
            .enumerate()
            .map(|(i, &s)| {
                if i == dd {
                    self.rng.random_range(1..=5)
                } else {
                    self.rng.random_range(1..=s)
                }
            })
            .collect();
        let idx = self.indices(shape, 0, a.shape[dd]);
        let idx_dt = self.spec.constants.last().expect("the index").dtype;
        if idx_dt != "int64" {
            // gather takes int64 indices only.
            self.spec.constants.last_mut().expect("the index").dtype = "int64";
        }
        Some(vec![self.node(
            "gather",
            vec![Arg::T(a.name), Arg::I(d), Arg::T(idx)],
            vec![],
        )])
    }

    fn index(&mut self) -> Option<Vec<Node>> {
        let a = self.pick(|v| v.rank() >= 1 && v.numel() > 0)?;
        let rank = a.rank();
        let ishape: Vec<i64> = (0..self.rng.random_range(0..=2))
            .map(|_| self.rng.random_range(1..=4))
            .collect();
        let mut list = Vec::new();
        let mut any = false;
        for i in 0..rank {
            let last = i + 1 == rank;
            if self.chance(0.5) || (last && !any) {
                let n = a.shape[i];
                // Each index tensor broadcasts with the others: same shape, or a 1 dim.
                let s: Vec<i64> = ishape
                    .iter()
                    .map(|&d| if self.chance(0.2) { 1 } else { d })
                    .collect();
                let c = self.indices(s, -n, n);
                list.push(Arg::T(c));
                any = true;
            } else if i < rank - 1 || any {
                list.push(Arg::None);
            }
        }
        // Trailing untouched dims may be left out.
        while matches!(list.last(), Some(Arg::None)) {
            list.pop();
        }
        Some(vec![self.node(
            "index",
            vec![Arg::T(a.name), Arg::L(list)],
            vec![],
        )])
    }

    fn embedding(&mut self) -> Option<Vec<Node>> {
        let v = *[5, 11, 50].choose(&mut self.rng).expect("a vocabulary");
        let dim = *[4, 8, 32].choose(&mut self.rng).expect("a width");
        let dt = self.float_dtype();
        let w = self.input(vec![v, dim], dt);
        let shape: Vec<i64> = (0..self.rng.random_range(0..=2))
            .map(|_| self.rng.random_range(1..=6))
            .collect();
        let idx = self.indices(shape, 0, v);
        self.spec.constants.last_mut().expect("the index").dtype = "int64";
        Some(vec![self.node(
            "embedding",
            vec![Arg::T(w), Arg::T(idx)],
            vec![],
        )])
    }

    fn creation(&mut self) -> Option<Vec<Node>> {
        let r = self.rng.random_range(0..6);
        let a = self.pick(|_| true)?;
        let mut nodes = Vec::new();
        let made = match r {
            0 => {
                let shape = self.broadcastable(&a.shape);
                let op = *["full", "zeros", "ones"]
                    .choose(&mut self.rng)
                    .expect("an op");
                let mut args = vec![ints(&shape)];
                if op == "full" {
                    args.push(Arg::F(self.small_float()));
                }
                let attrs = if self.chance(0.5) {
                    vec![("dtype", Arg::S(dtype_name(a.dtype)))]
                } else {
                    vec![]
                };
                self.node(op, args, attrs)
            }
            1 => {
                let op = *["full_like", "zeros_like", "ones_like"]
                    .choose(&mut self.rng)
                    .expect("an op");
                let mut args = vec![Arg::T(a.name.clone())];
                if op == "full_like" {
                    args.push(if a.is_float() {
                        Arg::F(self.small_float())
                    } else {
                        Arg::I(2)
                    });
                }
                self.node(op, args, vec![])
            }
            2 => {
                let op = *["new_full", "new_ones", "new_zeros"]
                    .choose(&mut self.rng)
                    .expect("an op");
                let shape = self.broadcastable(&a.shape);
                let mut args = vec![Arg::T(a.name.clone()), ints(&shape)];
                if op == "new_full" {
                    args.push(if a.is_float() {
                        Arg::F(self.small_float())
                    } else {
                        Arg::I(3)
                    });
                }
                self.node(op, args, vec![])
            }
            3 => {
                let v = self.small_float();
                let attrs = if self.chance(0.5) {
                    vec![("dtype", Arg::S(dtype_name(a.dtype)))]
                } else {
                    vec![]
                };
                self.node("scalar_tensor", vec![Arg::F(v)], attrs)
            }
            _ => {
                // arange with the length of one of `a`'s dims, to combine with it.
                if a.rank() == 0 {
                    return None;
                }
                let n = *a.shape.last().expect("a dim");
                let (args, attrs) = match self.rng.random_range(0..3) {
                    0 => (vec![Arg::I(n)], vec![]),
                    1 => (vec![Arg::I(-3), Arg::I(2 * n - 3), Arg::I(2)], vec![]),
                    _ => (
                        vec![Arg::F(0.0), Arg::F(n as f64 * 0.25), Arg::F(0.25)],
                        vec![("dtype", Arg::S("float32"))],
                    ),
                };
                self.node("arange", args, attrs)
            }
        };
        let made_name = made.name.clone();
        nodes.push(made);
        if r >= 4 || self.chance(0.5) {
            // Combine with `a` so the created value feeds a kernel.
            let op = if a.dtype == DType::Bool { "eq" } else { "add" };
            nodes.push(self.node(op, vec![Arg::T(a.name), Arg::T(made_name)], vec![]));
        }
        Some(nodes)
    }

    fn conv(&mut self) -> Option<Vec<Node>> {
        let spatial = if self.chance(0.7) { 2 } else { 1 };
        let dt = if self.chance(0.8) {
            "float32"
        } else {
            self.float_dtype()
        };
        let a = match self.pick(|v| {
            v.dtype.name() == dt
                && v.rank() == spatial + 2
                && v.numel() > 0
                && v.shape[2..].iter().all(|&s| s >= 3)
        }) {
            Some(a) => a.name,
            None => {
                let mut s = vec![self.rng.random_range(1..=2), self.rng.random_range(1..=6)];
                for _ in 0..spatial {
                    s.push(self.rng.random_range(3..=12));
                }
                self.input(s, dt)
            }
        };
        let shape = self.shape_of(&a)?;
        let c = shape[1];
        let groups = *[1, 1, 1, c].choose(&mut self.rng).expect("groups");
        let groups = if c % groups == 0 { groups } else { 1 };
        let out_c = groups * self.rng.random_range(1..=3);
        let k: i64 = self.rng.random_range(1..=3);
        let stride: i64 = self.rng.random_range(1..=2);
        let pad: i64 = self.rng.random_range(0..=k / 2 + 1);
        let dil: i64 = if self.chance(0.8) { 1 } else { 2 };
        for &s in &shape[2..] {
            if s + 2 * pad - dil * (k - 1) - 1 < 0 {
                return None;
            }
        }
        let mut wshape = vec![out_c, c / groups];
        wshape.extend(std::iter::repeat_n(k, spatial));
        let w = self.input(wshape, dt);
        let bias = if self.chance(0.6) {
            Arg::T(self.input(vec![out_c], dt))
        } else {
            Arg::None
        };
        let op = if spatial == 2 { "conv2d" } else { "conv1d" };
        let mut args = vec![Arg::T(a), Arg::T(w)];
        let b_present = !matches!(bias, Arg::None);
        let mut attrs = vec![
            ("stride", Arg::L(vec![Arg::I(stride)])),
            ("padding", Arg::L(vec![Arg::I(pad)])),
            ("dilation", Arg::L(vec![Arg::I(dil)])),
            ("groups", Arg::I(groups)),
        ];
        if b_present {
            args.push(bias);
        }
        if self.chance(0.3) {
            // Defaults for padding and dilation (the weight was made for `groups`).
            attrs.retain(|(k, _)| matches!(*k, "stride" | "groups"));
            if pad != 0 || dil != 1 {
                return None;
            }
        }
        Some(vec![self.node(op, args, attrs)])
    }

    fn shape_of(&self, name: &str) -> Option<Vec<i64>> {
        if let Some(v) = self.vals.iter().find(|v| v.name == name) {
            return Some(v.shape.clone());
        }
        self.spec
            .inputs
            .iter()
            .find(|i| i.name == name)
            .map(|i| i.shape.clone())
    }

    fn batch_norm(&mut self) -> Option<Vec<Node>> {
        // (PyTorch's CUDA batch norm fails on an empty input: zero channels, or a
        // batch of nothing.)
        let a = self.pick(|v| {
            v.is_float() && v.rank() >= 2 && v.rank() <= 4 && v.shape.iter().all(|&d| d > 0)
        })?;
        let c = a.shape[1];
        let dt = dtype_name(a.dtype);
        let mean = self.input(vec![c], dt);
        let var_raw = self.input(vec![c], dt);
        let abs = self.node("abs", vec![Arg::T(var_raw)], vec![]);
        let var = self.node("add", vec![Arg::T(abs.name.clone()), Arg::F(0.5)], vec![]);
        let w = self.input(vec![c], dt);
        let b = self.input(vec![c], dt);
        let native = self.chance(0.5);
        let mut nodes = vec![abs];
        let var_name = var.name.clone();
        nodes.push(var);
        if native {
            let n = self.node(
                "_native_batch_norm_legit_no_training",
                vec![
                    Arg::T(a.name),
                    Arg::T(w),
                    Arg::T(b),
                    Arg::T(mean),
                    Arg::T(var_name),
                    Arg::F(0.1),
                    Arg::F(1e-5),
                ],
                vec![],
            );
            let name = n.name.clone();
            nodes.push(n);
            nodes.push(self.node("getitem", vec![Arg::T(name), Arg::I(0)], vec![]));
        } else {
            nodes.push(self.node(
                "batch_norm",
                vec![
                    Arg::T(a.name),
                    Arg::T(w),
                    Arg::T(b),
                    Arg::T(mean),
                    Arg::T(var_name),
                    Arg::B(false),
                    Arg::F(0.1),
                    Arg::F(1e-5),
                    Arg::B(false),
                ],
                vec![],
            ));
        }
        Some(nodes)
    }

    fn pool(&mut self) -> Option<Vec<Node>> {
        let a = self.pick(|v| {
            v.is_float()
                && (v.rank() == 3 || v.rank() == 4)
                && v.numel() > 0
                && v.shape[v.rank() - 2..].iter().all(|&s| s >= 2)
        })?;
        if self.chance(0.3) {
            let o: Vec<i64> = (0..2).map(|_| self.rng.random_range(1..=5)).collect();
            let op = if self.chance(0.5) {
                "adaptive_avg_pool2d"
            } else {
                "_adaptive_avg_pool2d"
            };
            return Some(vec![self.node(op, vec![Arg::T(a.name), ints(&o)], vec![])]);
        }
        if a.rank() == 3 && self.chance(0.2) {
            // Over the last dim only ([N, C, L]).
            let l = a.shape[a.rank() - 1];
            let o = self.rng.random_range(1..=l.min(5));
            return Some(vec![self.node(
                "adaptive_avg_pool1d",
                vec![Arg::T(a.name), ints(&[o])],
                vec![],
            )]);
        }
        if self.chance(0.4) {
            let k = self.rng.random_range(1..=3i64);
            let s = self.rng.random_range(1..=2i64);
            let p = self.rng.random_range(0..=k / 2);
            let h = &a.shape[a.rank() - 2..];
            if h.iter().any(|&x| x + 2 * p < k) {
                return None;
            }
            let (ceil, include) = (self.chance(0.3), self.chance(0.6));
            if a.rank() == 3 && self.chance(0.3) {
                return Some(vec![self.node(
                    "avg_pool1d",
                    vec![
                        Arg::T(a.name),
                        ints(&[k]),
                        ints(&[s]),
                        ints(&[p]),
                        Arg::B(ceil),
                        Arg::B(include),
                    ],
                    vec![],
                )]);
            }
            let mut args = vec![
                Arg::T(a.name),
                ints(&[k, k]),
                ints(&[s, s]),
                ints(&[p, p]),
                Arg::B(ceil),
                Arg::B(include),
            ];
            if self.chance(0.2) {
                args.push(Arg::I(self.rng.random_range(1..=5)));
            }
            return Some(vec![self.node("avg_pool2d", args, vec![])]);
        }
        let k = self.rng.random_range(1..=3i64);
        let s = self.rng.random_range(1..=2i64);
        let p = self.rng.random_range(0..=k / 2);
        let ceil = self.chance(0.3);
        let h = &a.shape[a.rank() - 2..];
        if h.iter().any(|&x| x + 2 * p < k) {
            return None;
        }
        let with_indices = self.chance(0.3);
        let op = if with_indices {
            "max_pool2d_with_indices"
        } else {
            "max_pool2d"
        };
        let n = self.node(
            op,
            vec![
                Arg::T(a.name),
                ints(&[k, k]),
                ints(&[s, s]),
                ints(&[p, p]),
                ints(&[1, 1]),
                Arg::B(ceil),
            ],
            vec![],
        );
        if with_indices {
            let name = n.name.clone();
            // The values: the indices can differ between correct implementations on ties.
            let get = self.node("getitem", vec![Arg::T(name), Arg::I(0)], vec![]);
            return Some(vec![n, get]);
        }
        Some(vec![n])
    }

    fn attention(&mut self) -> Option<Vec<Node>> {
        let dt = if self.chance(0.6) {
            "float32"
        } else {
            self.float_dtype()
        };
        let b = self.rng.random_range(1..=2);
        let h = *[1, 2, 4].choose(&mut self.rng).expect("heads");
        let hk = if self.chance(0.3) { 1 } else { h };
        let l = *[1, 3, 8, 17, 64].choose(&mut self.rng).expect("length");
        let s = if self.chance(0.6) {
            l
        } else {
            *[1, 5, 16, 33].choose(&mut self.rng).expect("length")
        };
        let e = *[8, 16, 32, 64].choose(&mut self.rng).expect("head size");
        let rank4 = self.chance(0.8);
        let mk = |bh: Vec<i64>, n: i64| {
            let mut v = bh;
            v.push(n);
            v.push(e);
            v
        };
        let (qs, ks) = if rank4 {
            (mk(vec![b, h], l), mk(vec![b, hk], s))
        } else {
            (mk(vec![b * h], l), mk(vec![b * h], s))
        };
        let q = self.input(qs, dt);
        let k = self.input(ks.clone(), dt);
        let v = self.input(ks, dt);
        let mut args = vec![Arg::T(q), Arg::T(k), Arg::T(v)];
        let mut attrs = vec![];
        match self.rng.random_range(0..4) {
            0 => attrs.push(("is_causal", Arg::B(true))),
            1 => {
                // An additive mask broadcasting to the scores.
                let mut shape = self.broadcastable(&[l, s]);
                // Leading dims of a mask broadcast against batch and heads.
                shape.drain(..shape.len().saturating_sub(2));
                // PyTorch needs the mask's two dims, even when of size 1.
                while shape.len() < 2 {
                    shape.insert(0, 1);
                }
                let m = self.input(shape, dt);
                args.push(Arg::T(m));
            }
            2 => {
                // A boolean mask with at least one key kept per query (a fully
                // masked row is NaN in PyTorch).
                let values = (0..l * s)
                    .map(|i| i64::from(i % s == 0 || self.chance(0.6)))
                    .collect();
                let m = self.constant(vec![l, s], "bool", values);
                args.push(Arg::T(m));
            }
            _ => {}
        }
        if self.chance(0.3) {
            attrs.push(("scale", Arg::F(0.3)));
        }
        if hk != h && rank4 {
            attrs.push(("enable_gqa", Arg::B(true)));
        }
        Some(vec![self.node("scaled_dot_product_attention", args, attrs)])
    }

    fn passthrough(&mut self) -> Option<Vec<Node>> {
        let a = self.pick(|_| true)?;
        let r = self.rng.random_range(0..3);
        let n = match r {
            0 => self.node(
                "dropout",
                vec![Arg::T(a.name), Arg::F(0.1), Arg::B(false)],
                vec![],
            ),
            1 => self.node(
                "_assert_tensor_metadata",
                vec![Arg::T(a.name)],
                vec![("dtype", Arg::S(dtype_name(a.dtype)))],
            ),
            _ => self.node("lift_fresh_copy", vec![Arg::T(a.name)], vec![]),
        };
        Some(vec![n])
    }
}

impl Gen {
    /// The ops whole models use to move elements: padding in every mode, roll,
    /// slice/select scatters, copy and fill, type_as, as_strided, repeat, masked_fill.
    fn layout(&mut self) -> Option<Vec<Node>> {
        let a = self.pick(|v| v.rank() >= 1 && v.numel() > 0)?;
        let rank = a.rank();
        let dt = dtype_name(a.dtype);
        let d = self.rng.random_range(0..rank);
        let size = a.shape[d];
        Some(match self.rng.random_range(0..9) {
            0 => return self.constant_pad(a),
            1 => return self.mode_pad(a),
            2 => {
                let shift = self.rng.random_range(-7..=7);
                if self.chance(0.3) {
                    vec![self.node("roll", vec![Arg::T(a.name), ints(&[shift])], vec![])]
                } else {
                    let dim = d as i64;
                    vec![self.node(
                        "roll",
                        vec![Arg::T(a.name), ints(&[shift]), ints(&[dim])],
                        vec![],
                    )]
                }
            }
            3 => {
                let step = self.rng.random_range(1..=2);
                let start = self.rng.random_range(0..size);
                let end = self.rng.random_range(start..=size);
                let len = (end - start + step - 1) / step;
                let mut s = a.shape.clone();
                s[d] = len;
                let src = self.input(s, dt);
                vec![self.node(
                    "slice_scatter",
                    vec![
                        Arg::T(a.name),
                        Arg::T(src),
                        Arg::I(d as i64),
                        Arg::I(start),
                        Arg::I(end),
                        Arg::I(step),
                    ],
                    vec![],
                )]
            }
            4 => {
                let mut s = a.shape.clone();
                s.remove(d);
                let src = self.input(s, dt);
                let index = self.rng.random_range(-size..size);
                vec![self.node(
                    "select_scatter",
                    vec![Arg::T(a.name), Arg::T(src), Arg::I(d as i64), Arg::I(index)],
                    vec![],
                )]
            }
            5 => {
                if self.chance(0.5) {
                    // `src` broadcasts to `self` without adding dims.
                    let mut shape = self.broadcastable(&a.shape);
                    shape.drain(..shape.len().saturating_sub(rank));
                    let dtype = self.input_dtype();
                    let src = self.input(shape, dtype);
                    vec![self.node("copy", vec![Arg::T(a.name), Arg::T(src)], vec![])]
                } else {
                    let value = if a.dtype == DType::Bool {
                        Arg::B(true)
                    } else {
                        Arg::I(3)
                    };
                    vec![self.node("fill", vec![Arg::T(a.name), value], vec![])]
                }
            }
            6 => {
                let other = self.pick(|_| true)?;
                vec![self.node("type_as", vec![Arg::T(a.name), Arg::T(other.name)], vec![])]
            }
            7 => {
                let n = a.numel();
                if self.chance(0.5) {
                    let reps: Vec<i64> = (0..rank + self.rng.random_range(0..=1))
                        .map(|_| self.rng.random_range(1..=3))
                        .collect();
                    vec![self.node("repeat", vec![Arg::T(a.name), ints(&reps)], vec![])]
                } else {
                    // Overlapping windows of the flat elements: [rows, width] from an offset.
                    let width = self.rng.random_range(1..=n.min(4));
                    let step = self.rng.random_range(1..=width);
                    let offset = self.rng.random_range(0..=(n - width).min(2));
                    let rows = (n - offset - width) / step + 1;
                    vec![self.node(
                        "as_strided",
                        vec![
                            Arg::T(a.name),
                            ints(&[rows, width]),
                            ints(&[step, 1]),
                            Arg::I(offset),
                        ],
                        vec![],
                    )]
                }
            }
            _ => {
                let mut shape = self.broadcastable(&a.shape);
                shape.drain(..shape.len().saturating_sub(rank));
                let c = self.input(shape, "bool");
                let value = if a.is_float() {
                    Arg::F(-1.5)
                } else if a.dtype == DType::Bool {
                    Arg::B(false)
                } else {
                    Arg::I(-4)
                };
                vec![self.node(
                    "masked_fill",
                    vec![Arg::T(a.name), Arg::T(c), value],
                    vec![],
                )]
            }
        })
    }

    /// Constant padding (negative amounts crop) on the last one or two dims.
    fn constant_pad(&mut self, a: Val) -> Option<Vec<Node>> {
        let rank = a.rank();
        let pairs = self.rng.random_range(1..=rank.min(2));
        let mut pads = vec![];
        for i in 0..pairs {
            let s = a.shape[rank - 1 - i];
            let lo = -(s / 2).min(2);
            pads.push(self.rng.random_range(lo..=3));
            pads.push(self.rng.random_range(lo..=3));
        }
        let value = if a.is_float() { Arg::F(0.5) } else { Arg::I(2) };
        Some(vec![self.node(
            "constant_pad_nd",
            vec![Arg::T(a.name), ints(&pads), value],
            vec![],
        )])
    }

    /// reflect/replicate/circular padding: PyTorch's kernels need a float [N?, C, spatial]
    /// input; one to three trailing dims are padded.
    fn mode_pad(&mut self, a: Val) -> Option<Vec<Node>> {
        let rank = a.rank();
        if !a.is_float() || rank < 2 {
            return None;
        }
        let mode = *["reflect", "replicate", "circular"]
            .choose(&mut self.rng)
            .expect("a mode");
        let pairs = self.rng.random_range(1..=(rank - 1).min(3));
        if !(pairs + 1..=pairs + 2).contains(&rank) {
            return None;
        }
        let mut pads = vec![];
        for i in 0..pairs {
            let s = a.shape[rank - 1 - i];
            let most = if mode == "reflect" { s - 1 } else { s };
            if most < 1 && mode != "replicate" {
                return None;
            }
            let most = most.clamp(0, 3);
            pads.push(self.rng.random_range(0..=most));
            pads.push(self.rng.random_range(0..=most));
        }
        Some(vec![self.node(
            "pad",
            vec![Arg::T(a.name), ints(&pads), Arg::S(mode)],
            vec![],
        )])
    }

    fn group_norm(&mut self) -> Option<Vec<Node>> {
        let a = self.pick(|v| v.is_float() && v.rank() >= 2 && v.numel() > 0)?;
        let c = a.shape[1];
        let divisors: Vec<i64> = (1..=c).filter(|g| c % g == 0).collect();
        let g = *divisors.choose(&mut self.rng)?;
        let dt = dtype_name(a.dtype);
        if self.chance(0.5) {
            let mut args = vec![Arg::T(a.name), Arg::I(g)];
            if self.chance(0.6) {
                args.push(Arg::T(self.input(vec![c], dt)));
                args.push(Arg::T(self.input(vec![c], dt)));
            }
            return Some(vec![self.node(
                "group_norm",
                args,
                vec![("eps", Arg::F(1e-5))],
            )]);
        }
        let (w, b) = (self.input(vec![c], dt), self.input(vec![c], dt));
        let hw: i64 = a.shape[2..].iter().product();
        let n = self.node(
            "native_group_norm",
            vec![
                Arg::T(a.name),
                Arg::T(w),
                Arg::T(b),
                Arg::I(a.shape[0]),
                Arg::I(c),
                Arg::I(hw),
                Arg::I(g),
                Arg::F(1e-5),
            ],
            vec![],
        );
        let name = n.name.clone();
        let get = self.node("getitem", vec![Arg::T(name), Arg::I(0)], vec![]);
        Some(vec![n, get])
    }
}

fn ints(v: &[i64]) -> Arg {
    Arg::L(v.iter().map(|&i| Arg::I(i)).collect())
}

/// Whether `b` broadcasts into `a`'s shape (PyTorch's rule, `a` kept).
fn broadcasts(b: &[i64], a: &[i64]) -> bool {
    b.len() <= a.len()
        && b.iter()
            .rev()
            .zip(a.iter().rev())
            .all(|(x, y)| x == y || *x == 1)
}

/// Every named value of a parsed graph with its metadata.
fn values(graph: &Graph, spec: &GraphSpec) -> Vec<Val> {
    let mut by_name: HashMap<&str, (&kiln::graph::TensorMeta, usize)> = HashMap::new();
    for id in graph.node_ids() {
        let Some(node) = graph.node(id) else { continue };
        if node.outputs.len() == 1 && !node.op.returns_sequence() {
            by_name.insert(node.name.as_str(), (&node.outputs[0], node.outputs.len()));
        }
    }
    let exact_from: HashMap<&str, bool> = spec
        .nodes
        .iter()
        .map(|n| (n.name.as_str(), matches!(n.op, "to" | "_to_copy")))
        .collect();
    let mut out = Vec::new();
    let names = spec
        .inputs
        .iter()
        .map(|i| i.name.as_str())
        .chain(spec.constants.iter().map(|c| c.name.as_str()))
        .chain(spec.nodes.iter().map(|n| n.name.as_str()));
    for name in names {
        let Some((meta, _)) = by_name.get(name) else {
            continue;
        };
        let exact = !meta.dtype.is_float()
            || exact_from.get(name).copied().unwrap_or(false)
                && spec
                    .nodes
                    .iter()
                    .find(|n| n.name == name)
                    .and_then(|n| n.reads().first().cloned())
                    .and_then(|src| by_name.get(src.as_str()).map(|(m, _)| !m.dtype.is_float()))
                    .unwrap_or(false);
        out.push(Val {
            name: name.to_string(),
            shape: meta.hint_shape(),
            strides: meta.hint_strides(),
            dtype: meta.dtype,
            exact,
        });
    }
    out
}

/// The metadata (shape, dtype name) of every single-output value of `spec`, as Kiln
/// infers it; `None` when Kiln refuses the graph.
pub fn value_types(spec: &GraphSpec) -> Option<HashMap<String, (Vec<i64>, &'static str)>> {
    let graph = kiln::graph::parse_toml(&spec.to_toml()).ok()?;
    Some(
        values(&graph, spec)
            .into_iter()
            .map(|v| (v.name, (v.shape, v.dtype.name())))
            .collect(),
    )
}

/// Shrinks a graph while `fails` holds: one output at a time, dead nodes pruned, then
/// nodes cut into inputs of their shape (shortening chains), until nothing changes.
pub fn minimize(spec: &GraphSpec, fails: impl Fn(&GraphSpec) -> bool) -> GraphSpec {
    let mut best = spec.clone();
    best.prune();
    if !fails(&best) {
        best = spec.clone();
    }
    loop {
        let mut changed = false;
        if best.outputs.len() > 1 {
            for i in 0..best.outputs.len() {
                let mut c = best.clone();
                c.outputs = vec![best.outputs[i].clone()];
                c.prune();
                if fails(&c) {
                    best = c;
                    changed = true;
                    break;
                }
            }
        }
        let Some(types) = value_types(&best) else {
            return best;
        };
        for i in 0..best.nodes.len() {
            let Some((shape, dtype)) = types.get(&best.nodes[i].name).cloned() else {
                continue;
            };
            let mut c = best.clone();
            c.cut(i, shape, dtype);
            c.prune();
            if fails(&c) {
                best = c;
                changed = true;
                break;
            }
        }
        if !changed {
            return best;
        }
    }
}
