//! ATen ops that an exported graph uses and that are a short program of ops of the op set
//! once the shapes PyTorch recorded are known, the way PyTorch's own decompositions
//! spell them: `stack` (unsqueeze + cat), `repeat_interleave` with an integer count
//! (unsqueeze + expand + reshape), `linalg_vector_norm`/`norm` (sums of powers),
//! `_weight_norm`, `softplus`, `eye`, `einsum` (permutes, reshapes and batched matrix
//! products), `im2col` (padding and strided slices) and `col2im` (strided scatters into
//! zeros, summed), and the `upsample_*` interpolations
//! (nearest, linear, bilinear, bicubic, trilinear: per spatial dim, a gather of each tap
//! and a sum weighted by constants computed here as ATen computes them).
//!
//! Each expansion is a list of [`Step`]s, bound by the importer like FX nodes. The steps'
//! own tensors are named `OUT.k` (FX names hold no `.`), and the last step produces `OUT`.

use super::rewrite::wrap;
use super::Pt2Error;
use crate::graph::front::signature::Raw;
use crate::graph::ir::TensorMeta;
use crate::graph::DType;
use std::collections::HashMap;

mod more;

/// The ops [`expand`] spells out.
const EXPANDED: &[&str] = &[
    "stack",
    "repeat_interleave",
    "linalg_vector_norm",
    "norm",
    "_weight_norm",
    "softplus",
    "eye",
    "einsum",
    "im2col",
    "col2im",
    "upsample_nearest1d",
    "upsample_nearest2d",
    "upsample_nearest3d",
    "_upsample_nearest_exact1d",
    "_upsample_nearest_exact2d",
    "_upsample_nearest_exact3d",
    "upsample_linear1d",
    "upsample_bilinear2d",
    "upsample_trilinear3d",
    "upsample_bicubic2d",
];

/// Whether [`expand`] handles `op`.
pub(super) fn expands(op: &str) -> bool {
    EXPANDED.contains(&op) || more::OPS.contains(&op)
}

/// One step of an expansion.
#[derive(Debug)]
pub(super) enum Step {
    /// `out = op(attrs)`, bound as an FX node's arguments are
    Op {
        out: String,
        op: &'static str,
        attrs: Vec<(String, Raw)>,
    },
    /// `out`, a constant of `meta` with these row-major values
    Const {
        out: String,
        meta: TensorMeta,
        values: Vec<f64>,
    },
}

/// Builds the steps of one expansion.
struct Steps<'a> {
    out: &'a str,
    steps: Vec<Step>,
}

impl Steps<'_> {
    /// A fresh intermediate name.
    fn name(&self) -> String {
        format!("{}.{}", self.out, self.steps.len())
    }

    fn op(&mut self, op: &'static str, attrs: Vec<(&str, Raw)>) -> String {
        let out = self.name();
        self.steps.push(Step::Op {
            out: out.clone(),
            op,
            attrs: attrs.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
        });
        out
    }

    fn konst(&mut self, shape: Vec<i64>, dtype: DType, values: Vec<f64>) -> String {
        let out = self.name();
        self.steps.push(Step::Const {
            out: out.clone(),
            meta: TensorMeta::contiguous(shape, dtype),
            values,
        });
        out
    }

    fn un(&mut self, op: &'static str, x: &str) -> String {
        self.op(op, vec![("self", t(x))])
    }

    fn bin(&mut self, op: &'static str, a: Raw, b: Raw) -> String {
        self.op(op, vec![("self", a), ("other", b)])
    }

    fn reshape(&mut self, x: &str, shape: &[i64]) -> String {
        self.op("reshape", vec![("self", t(x)), ("shape", ints(shape))])
    }

    fn permute(&mut self, x: &str, dims: &[usize]) -> String {
        if dims.iter().enumerate().all(|(i, &d)| i == d) {
            return x.to_string();
        }
        let dims: Vec<i64> = dims.iter().map(|&d| d as i64).collect();
        self.op("permute", vec![("self", t(x)), ("dims", ints(&dims))])
    }

    fn reduce(&mut self, op: &'static str, x: &str, dims: Option<&[i64]>, keepdim: bool) -> String {
        let mut attrs = vec![("self", t(x)), ("keepdim", Raw::Bool(keepdim))];
        if let Some(d) = dims {
            attrs.push(("dim", ints(d)));
        }
        self.op(op, attrs)
    }

    /// `stack(xs, dim)` of tensors of rank `rank`, `dim` already wrapped.
    fn stack(&mut self, xs: &[String], dim: usize) -> String {
        let parts: Vec<Raw> = xs
            .iter()
            .map(|x| {
                t(&self.op(
                    "unsqueeze",
                    vec![("self", t(x)), ("dim", Raw::Int(dim as i64))],
                ))
            })
            .collect();
        self.op(
            "cat",
            vec![("tensors", Raw::List(parts)), ("dim", Raw::Int(dim as i64))],
        )
    }
}

fn t(name: &str) -> Raw {
    Raw::Str(name.to_string())
}

fn ints(v: &[i64]) -> Raw {
    Raw::List(v.iter().map(|&i| Raw::Int(i)).collect())
}

fn get<'r>(attrs: &'r [(String, Raw)], name: &str) -> Option<&'r Raw> {
    attrs.iter().find(|(k, _)| k == name).map(|(_, v)| v)
}

fn number(r: &Raw) -> Option<f64> {
    match r {
        Raw::Int(i) => Some(*i as f64),
        Raw::Float(f) => Some(*f),
        _ => None,
    }
}

fn int_list(r: Option<&Raw>) -> Option<Vec<i64>> {
    match r? {
        Raw::Int(i) => Some(vec![*i]),
        Raw::List(l) => l
            .iter()
            .map(|x| match x {
                Raw::Int(i) => Some(*i),
                _ => None,
            })
            .collect(),
        _ => None,
    }
}

fn float_list(r: Option<&Raw>) -> Option<Vec<f64>> {
    match r? {
        Raw::List(l) => l.iter().map(number).collect(),
        r => number(r).map(|x| vec![x]),
    }
}

/// Spells out node `node`'s `op` with arguments `attrs`, producing tensor `out`.
/// The largest dim an expansion that builds per-element constants takes.
const MAX_CONSTANT_DIM: i64 = 1 << 24;

/// Whether `op`'s expansion builds constants as long as one of its dims (index lists,
/// interpolation taps and weights, class ids).
fn builds_constants(op: &str) -> bool {
    matches!(
        op,
        "triu"
            | "tril"
            | "eye"
            | "flip"
            | "argmax"
            | "argmin"
            | "max"
            | "min"
            | "one_hot"
            | "unfold"
            | "index_put"
    ) || upsample_kind(op).is_some()
}

/// An expansion: its steps, and the tensor (a step's or an operand) each output of the
/// node is.
#[derive(Debug)]
pub(super) struct Expansion {
    pub steps: Vec<Step>,
    pub results: Vec<String>,
}

/// Spells out node `node`'s `op` with arguments `attrs`, whose outputs are `outs`
/// (PyTorch's recorded shapes in `metas`); `None` where this use of the op is one the op
/// set has (`max` without a dim).
pub(super) fn expand(
    node: &str,
    op: &str,
    attrs: &[(String, Raw)],
    outs: &[Option<String>],
    metas: &HashMap<&str, TensorMeta>,
) -> Result<Option<Expansion>, Pt2Error> {
    // Expansions that build constants of a dim's size: refused for dims past any real
    // model's, so that a hostile archive's recorded sizes cannot allocate without bound.
    if builds_constants(op) {
        let dims = attrs
            .iter()
            .filter_map(|(_, r)| match r {
                Raw::Str(t) => metas.get(t.as_str()),
                _ => None,
            })
            .chain(outs.iter().flatten().filter_map(|o| metas.get(o.as_str())))
            .flat_map(|m| m.shape.iter().copied());
        let counts = attrs.iter().filter_map(|(k, r)| match (k.as_str(), r) {
            ("num_classes", Raw::Int(n)) => Some(*n),
            _ => None,
        });
        if let Some(big) = dims.chain(counts).find(|&d| d > MAX_CONSTANT_DIM) {
            return Err(Pt2Error::Argument {
                node: node.into(),
                param: op.into(),
                message: format!(
                    "a dim of {big} elements: Kiln spells {op} out with constants of a dim's size, and takes dims of at most {MAX_CONSTANT_DIM}"
                ),
            });
        }
    }
    let first = outs.iter().flatten().next().map_or(node, String::as_str);
    let out_metas: Vec<Option<&TensorMeta>> = outs
        .iter()
        .map(|o| o.as_deref().and_then(|o| metas.get(o)))
        .collect();
    let mut s = Steps {
        out: first,
        steps: vec![],
    };
    let results = if let Some(r) = more::expand(&mut s, node, op, attrs, &out_metas, metas)? {
        r
    } else if matches!(op, "max" | "min") {
        return Ok(None);
    } else {
        vec![expand_one(&mut s, node, op, attrs, first, metas)?]
    };
    if results.len() != outs.len() {
        return Err(Pt2Error::Argument {
            node: node.into(),
            param: op.into(),
            message: format!(
                "the node has {} output(s), the op gives {}",
                outs.len(),
                results.len()
            ),
        });
    }
    Ok(Some(Expansion {
        steps: s.steps,
        results,
    }))
}

/// [`expand`] of the ops of one output.
fn expand_one(
    s: &mut Steps<'_>,
    node: &str,
    op: &str,
    attrs: &[(String, Raw)],
    out: &str,
    metas: &HashMap<&str, TensorMeta>,
) -> Result<String, Pt2Error> {
    let fail = |message: String| Pt2Error::Argument {
        node: node.into(),
        param: op.into(),
        message,
    };
    let meta_of = |name: &str| -> Result<&TensorMeta, Pt2Error> {
        match get(attrs, name) {
            Some(Raw::Str(x)) => metas
                .get(x.as_str())
                .ok_or_else(|| fail(format!("`{name}` (`{x}`) has no recorded shape"))),
            _ => Err(fail(format!("needs the tensor `{name}`"))),
        }
    };
    let name_of = |name: &str| -> Result<String, Pt2Error> {
        match get(attrs, name) {
            Some(Raw::Str(x)) => Ok(x.clone()),
            _ => Err(fail(format!("needs the tensor `{name}`"))),
        }
    };
    let out_meta = || {
        metas
            .get(out)
            .ok_or_else(|| fail("the output has no recorded shape".into()))
    };
    let last = match op {
        "stack" => {
            let Some(Raw::List(xs)) = get(attrs, "tensors") else {
                return Err(fail("needs the list `tensors`".into()));
            };
            let xs: Vec<String> = xs
                .iter()
                .map(|x| match x {
                    Raw::Str(x) => Ok(x.clone()),
                    _ => Err(fail("`tensors` must name tensors".into())),
                })
                .collect::<Result<_, _>>()?;
            let rank = out_meta()?.rank();
            let dim = match get(attrs, "dim") {
                Some(Raw::Int(d)) => *d,
                None => 0,
                Some(r) => return Err(fail(format!("`dim` must be an integer, found {r:?}"))),
            };
            let d = wrap(dim, rank).map_err(fail)?;
            if xs.is_empty() {
                return Err(fail("stack of no tensors".into()));
            }
            s.stack(&xs, d)
        }
        "repeat_interleave" => {
            let x = name_of("self")?;
            let shape = meta_of("self")?.shape.clone();
            let repeats = match get(attrs, "repeats") {
                Some(Raw::Int(r)) if *r >= 0 => *r,
                Some(Raw::Int(r)) => {
                    return Err(fail(format!("repeats must be non-negative, found {r}")))
                }
                _ => {
                    return Err(fail(
                        "repeats given as a tensor: Kiln compiles static shapes and needs the count as an integer".into(),
                    ))
                }
            };
            let (x, shape, d) = match get(attrs, "dim") {
                Some(Raw::Int(dim)) if !shape.is_empty() => {
                    let d = wrap(*dim, shape.len()).map_err(fail)?;
                    (x, shape, d)
                }
                _ => {
                    // No dim: the flattened tensor.
                    let n: i64 = shape.iter().product();
                    (s.reshape(&x, &[n]), vec![n], 0)
                }
            };
            let mut wide = shape.clone();
            wide.insert(d + 1, repeats);
            let mut result = shape.clone();
            if shape.is_empty() {
                result = vec![repeats];
            } else {
                result[d] *= repeats;
            }
            let u = s.op(
                "unsqueeze",
                vec![("self", t(&x)), ("dim", Raw::Int(d as i64 + 1))],
            );
            let e = s.op("expand", vec![("self", t(&u)), ("size", ints(&wide))]);
            s.reshape(&e, &result)
        }
        "linalg_vector_norm" | "norm" => {
            let x = name_of("self")?;
            let m = meta_of("self")?;
            if !m.dtype.is_float() {
                return Err(fail(format!(
                    "the norm of a {} tensor: PyTorch takes floating-point tensors only",
                    m.dtype
                )));
            }
            let ord = match get(attrs, "ord").or_else(|| get(attrs, "p")) {
                None => 2.0,
                Some(r) => {
                    number(r).ok_or_else(|| fail(format!("`ord` must be a number, found {r:?}")))?
                }
            };
            let dims = int_list(get(attrs, "dim")).filter(|d| !d.is_empty());
            let keepdim = matches!(get(attrs, "keepdim"), Some(Raw::Bool(true)));
            let x = match get(attrs, "dtype") {
                Some(d @ Raw::Str(_)) => {
                    s.op("_to_copy", vec![("self", t(&x)), ("dtype", d.clone())])
                }
                _ => x,
            };
            vector_norm(s, &x, ord, dims.as_deref(), keepdim)
        }
        "_weight_norm" => {
            let v = name_of("v")?;
            let g = name_of("g")?;
            let rank = meta_of("v")?.rank();
            let dim = match get(attrs, "dim") {
                Some(Raw::Int(d)) => *d,
                None => 0,
                Some(r) => return Err(fail(format!("`dim` must be an integer, found {r:?}"))),
            };
            // torch's norm_except_dim: the norm over every dim but `dim` (all of them
            // for -1), kept as size-1 dims.
            let over: Vec<i64> = if dim == -1 {
                (0..rank as i64).collect()
            } else {
                let d = wrap(dim, rank).map_err(fail)?;
                (0..rank as i64).filter(|&i| i != d as i64).collect()
            };
            let n = if over.is_empty() {
                s.un("abs", &v)
            } else {
                vector_norm(s, &v, 2.0, Some(&over), true)
            };
            let r = s.bin("div", t(&g), t(&n));
            s.bin("mul", t(&v), t(&r))
        }
        "softplus" => {
            let x = name_of("self")?;
            let beta = get(attrs, "beta").and_then(number).unwrap_or(1.0);
            let threshold = get(attrs, "threshold").and_then(number).unwrap_or(20.0);
            // PyTorch: x where beta * x > threshold, else log1p(exp(beta * x)) / beta.
            let bx = s.bin("mul", t(&x), Raw::Float(beta));
            let e = s.un("exp", &bx);
            let l = s.un("log1p", &e);
            let y = s.bin("div", t(&l), Raw::Float(beta));
            let c = s.bin("gt", t(&bx), Raw::Float(threshold));
            s.op(
                "where",
                vec![("condition", t(&c)), ("self", t(&x)), ("other", t(&y))],
            )
        }
        "eye" => {
            let m = out_meta()?;
            let [rows, cols] = m.shape[..] else {
                return Err(fail(format!("eye's output has shape {:?}", m.shape)));
            };
            // Row index == column index, from two index constants (not rows x cols).
            let r = s.konst(
                vec![rows, 1],
                DType::Int64,
                (0..rows).map(|i| i as f64).collect(),
            );
            let c = s.konst(
                vec![1, cols],
                DType::Int64,
                (0..cols).map(|i| i as f64).collect(),
            );
            let e = s.bin("eq", t(&r), t(&c));
            s.op(
                "_to_copy",
                vec![("self", t(&e)), ("dtype", Raw::Str(m.dtype.name().into()))],
            )
        }
        "einsum" => {
            let Some(Raw::Str(equation)) = get(attrs, "equation") else {
                return Err(fail("needs the string `equation`".into()));
            };
            let Some(Raw::List(xs)) = get(attrs, "tensors") else {
                return Err(fail("needs the list `tensors`".into()));
            };
            let mut operands = vec![];
            for x in xs {
                let Raw::Str(x) = x else {
                    return Err(fail("`tensors` must name tensors".into()));
                };
                let m = metas
                    .get(x.as_str())
                    .ok_or_else(|| fail(format!("`{x}` has no recorded shape")))?;
                operands.push((x.clone(), m.shape.clone()));
            }
            einsum(s, equation, &operands).map_err(fail)?
        }
        "im2col" | "col2im" => {
            let x = name_of("self")?;
            let shape = meta_of("self")?.shape.clone();
            let pair = |name: &str, default: Option<i64>| -> Result<[i64; 2], Pt2Error> {
                match int_list(get(attrs, name)).as_deref() {
                    Some([a]) => Ok([*a, *a]),
                    Some([a, b]) => Ok([*a, *b]),
                    None => default
                        .map(|d| [d, d])
                        .ok_or_else(|| fail(format!("needs `{name}`"))),
                    Some(v) => Err(fail(format!(
                        "`{name}` must give 1 or 2 integers, found {v:?}"
                    ))),
                }
            };
            let k = pair("kernel_size", None)?;
            let dil = pair("dilation", Some(1))?;
            let pad = pair("padding", Some(0))?;
            let st = pair("stride", Some(1))?;
            if op == "im2col" {
                im2col(s, &x, &shape, k, dil, pad, st).map_err(fail)?
            } else {
                let out = out_meta()?;
                col2im(s, &x, &shape, &out.shape, out.dtype, k, dil, pad, st).map_err(fail)?
            }
        }
        _ => {
            let (mode, spatial) =
                upsample_kind(op).ok_or_else(|| fail("not an expansion".into()))?;
            let x = name_of("input").or_else(|_| name_of("self"))?;
            let inp = meta_of("input").or_else(|_| meta_of("self"))?.clone();
            let outm = out_meta()?.clone();
            if inp.rank() < spatial || outm.rank() != inp.rank() {
                return Err(fail(format!(
                    "input of shape {:?} and output of shape {:?} for a {spatial}-d interpolation",
                    inp.shape, outm.shape
                )));
            }
            let align = matches!(get(attrs, "align_corners"), Some(Raw::Bool(true)));
            // The scales as given (`scale_factors` of the .vec form, `scales_*` of the
            // others): ATen maps output to input positions by them where given.
            let mut scales: Vec<Option<f64>> = match float_list(get(attrs, "scale_factors")) {
                Some(v) if v.len() == spatial => v.into_iter().map(Some).collect(),
                _ => ["scales_d", "scales_h", "scales_w"][3 - spatial..]
                    .iter()
                    .map(|n| get(attrs, n).and_then(number))
                    .collect(),
            };
            if spatial == 1 {
                if let Some(v) = get(attrs, "scales").and_then(number) {
                    scales = vec![Some(v)];
                }
            }
            upsample(s, &x, &inp, &outm, mode, align, &scales).map_err(fail)?
        }
    };
    Ok(last)
}

/// `||x||_ord` over `dims` (all when `None`).
fn vector_norm(
    s: &mut Steps<'_>,
    x: &str,
    ord: f64,
    dims: Option<&[i64]>,
    keepdim: bool,
) -> String {
    if ord == 2.0 {
        let sq = s.bin("mul", t(x), t(x));
        let sum = s.reduce("sum", &sq, dims, keepdim);
        return s.un("sqrt", &sum);
    }
    if ord == 0.0 {
        let nz = s.bin("ne", t(x), Raw::Int(0));
        let dtype = Raw::Str("float32".into());
        let f = s.op("_to_copy", vec![("self", t(&nz)), ("dtype", dtype)]);
        return s.reduce("sum", &f, dims, keepdim);
    }
    let a = s.un("abs", x);
    if ord == f64::INFINITY {
        return s.reduce("amax", &a, dims, keepdim);
    }
    if ord == f64::NEG_INFINITY {
        return s.reduce("amin", &a, dims, keepdim);
    }
    if ord == 1.0 {
        return s.reduce("sum", &a, dims, keepdim);
    }
    let p = s.bin("pow", t(&a), Raw::Float(ord));
    let sum = s.reduce("sum", &p, dims, keepdim);
    s.bin("pow", t(&sum), Raw::Float(1.0 / ord))
}

/// The letters of one side of an einsum equation, `...` replaced by `ell` (the letters
/// standing for the broadcast dims, rightmost last) trimmed to `rank` dims.
fn einsum_letters(spec: &str, rank: Option<usize>, ell: &[char]) -> Result<Vec<char>, String> {
    let mut out = vec![];
    let parts: Vec<&str> = spec.split("...").collect();
    if parts.len() > 2 {
        return Err(format!("`{spec}` has more than one ellipsis"));
    }
    for c in parts[0].chars() {
        if !c.is_ascii_alphabetic() {
            return Err(format!("`{c}` in `{spec}` is not a letter"));
        }
        out.push(c);
    }
    if parts.len() == 2 {
        let named = parts[0].len() + parts[1].len();
        let n = match rank {
            Some(r) => r
                .checked_sub(named)
                .ok_or_else(|| format!("`{spec}` names more dims than the operand's {r}"))?,
            None => ell.len(),
        };
        out.extend_from_slice(&ell[ell.len() - n..]);
        for c in parts[1].chars() {
            if !c.is_ascii_alphabetic() {
                return Err(format!("`{c}` in `{spec}` is not a letter"));
            }
            out.push(c);
        }
    }
    if let Some(r) = rank {
        if out.len() != r {
            return Err(format!(
                "`{spec}` names {} dims, the operand has {r}",
                out.len()
            ));
        }
    }
    Ok(out)
}

/// `einsum(equation, operands)`: operands contracted pairwise, left to right, each pair
/// as one batched matrix product over the letters both share.
fn einsum(
    s: &mut Steps<'_>,
    equation: &str,
    operands: &[(String, Vec<i64>)],
) -> Result<String, String> {
    let eq: String = equation.chars().filter(|c| !c.is_whitespace()).collect();
    let (lhs, rhs) = match eq.split_once("->") {
        Some((l, r)) => (l, Some(r)),
        None => (eq.as_str(), None),
    };
    let specs: Vec<&str> = lhs.split(',').collect();
    if specs.len() != operands.len() {
        return Err(format!(
            "the equation `{equation}` has {} operand(s), the node passes {}",
            specs.len(),
            operands.len()
        ));
    }
    // Letters for the ellipsis dims: upper-case ones the equation does not use.
    let ell_rank = specs
        .iter()
        .zip(operands)
        .filter(|(sp, _)| sp.contains("..."))
        .map(|(sp, (_, shape))| (shape.len() + 3).saturating_sub(sp.len()))
        .max()
        .unwrap_or(0);
    let ell: Vec<char> = ('A'..='Z')
        .chain('a'..='z')
        .filter(|c| !eq.contains(*c))
        .take(ell_rank)
        .collect();
    if ell.len() < ell_rank {
        return Err("too many dims for the letters left".into());
    }
    let mut size: HashMap<char, i64> = HashMap::new();
    let mut terms: Vec<(String, Vec<char>)> = vec![];
    for (spec, (x, shape)) in specs.iter().zip(operands) {
        let letters = einsum_letters(spec, Some(shape.len()), &ell)?;
        let mut seen = vec![];
        for (&c, &n) in letters.iter().zip(shape) {
            if seen.contains(&c) {
                return Err(format!(
                    "`{spec}` repeats `{c}` (a diagonal): Kiln does not take diagonals in einsum"
                ));
            }
            seen.push(c);
            match size.get(&c) {
                Some(&m) if m != n && m != 1 && n != 1 => {
                    return Err(format!("`{c}` has sizes {m} and {n}"));
                }
                Some(&m) if m >= n => {}
                _ => {
                    size.insert(c, n);
                }
            }
        }
        terms.push((x.clone(), letters));
    }
    let output: Vec<char> = match rhs {
        Some(r) => einsum_letters(r, None, &ell)?,
        None => {
            // Implicit output: the ellipsis dims, then the letters used once, sorted.
            let mut once: Vec<char> = size
                .keys()
                .copied()
                .filter(|c| !ell.contains(c))
                .filter(|c| {
                    terms
                        .iter()
                        .flat_map(|(_, l)| l)
                        .filter(|x| *x == c)
                        .count()
                        == 1
                })
                .collect();
            once.sort_unstable();
            ell.iter().copied().chain(once).collect()
        }
    };
    for c in &output {
        if !size.contains_key(c) {
            return Err(format!("the output's `{c}` is in no operand"));
        }
    }
    // Broadcast size-1 dims up to the letter's size.
    for (x, letters) in terms.iter_mut() {
        let shape: Vec<i64> = letters.iter().map(|c| size[c]).collect();
        let own: Vec<i64> = operands
            .iter()
            .find(|(n, _)| n == x)
            .map(|(_, sh)| sh.clone())
            .unwrap_or_default();
        if own != shape && own.len() == shape.len() {
            *x = s.op("expand", vec![("self", t(x)), ("size", ints(&shape))]);
        }
    }
    let needed_after = |i: usize, terms: &[(String, Vec<char>)]| -> Vec<char> {
        let mut v = output.clone();
        for (_, l) in &terms[i..] {
            v.extend(l);
        }
        v
    };
    // Sums over the letters of one term that nothing else needs.
    let sum_own =
        |s: &mut Steps<'_>, x: &str, letters: &[char], keep: &[char]| -> (String, Vec<char>) {
            let dims: Vec<i64> = letters
                .iter()
                .enumerate()
                .filter(|(_, c)| !keep.contains(c))
                .map(|(i, _)| i as i64)
                .collect();
            if dims.is_empty() {
                return (x.to_string(), letters.to_vec());
            }
            let y = s.reduce("sum", x, Some(&dims), false);
            (
                y,
                letters
                    .iter()
                    .copied()
                    .filter(|c| keep.contains(c))
                    .collect(),
            )
        };
    let (mut acc, mut acc_letters) = {
        let keep = needed_after(1, &terms);
        sum_own(s, &terms[0].0, &terms[0].1, &keep)
    };
    for i in 1..terms.len() {
        let keep_later = needed_after(i + 1, &terms);
        let (b, b_letters) = {
            let mut keep = keep_later.clone();
            keep.extend(&acc_letters);
            sum_own(s, &terms[i].0, &terms[i].1, &keep)
        };
        let a_keep: Vec<char> = keep_later.iter().chain(&b_letters).copied().collect();
        let (a, a_letters) = sum_own(s, &acc, &acc_letters, &a_keep);
        let batch: Vec<char> = a_letters
            .iter()
            .copied()
            .filter(|c| b_letters.contains(c) && keep_later.contains(c))
            .collect();
        let contract: Vec<char> = a_letters
            .iter()
            .copied()
            .filter(|c| b_letters.contains(c) && !keep_later.contains(c))
            .collect();
        let a_only: Vec<char> = a_letters
            .iter()
            .copied()
            .filter(|c| !b_letters.contains(c))
            .collect();
        let b_only: Vec<char> = b_letters
            .iter()
            .copied()
            .filter(|c| !a_letters.contains(c))
            .collect();
        let pos = |letters: &[char], c: char| letters.iter().position(|x| *x == c).unwrap_or(0);
        let prod = |cs: &[char]| -> i64 { cs.iter().map(|c| size[c]).product() };
        let a_perm: Vec<usize> = batch
            .iter()
            .chain(&a_only)
            .chain(&contract)
            .map(|&c| pos(&a_letters, c))
            .collect();
        let b_perm: Vec<usize> = batch
            .iter()
            .chain(&contract)
            .chain(&b_only)
            .map(|&c| pos(&b_letters, c))
            .collect();
        let ap = s.permute(&a, &a_perm);
        let bp = s.permute(&b, &b_perm);
        let (nb, na, nc, nbo) = (prod(&batch), prod(&a_only), prod(&contract), prod(&b_only));
        let a3 = s.reshape(&ap, &[nb, na, nc]);
        let b3 = s.reshape(&bp, &[nb, nc, nbo]);
        let p = s.op("bmm", vec![("self", t(&a3)), ("mat2", t(&b3))]);
        let letters: Vec<char> = batch
            .iter()
            .chain(&a_only)
            .chain(&b_only)
            .copied()
            .collect();
        let shape: Vec<i64> = letters.iter().map(|c| size[c]).collect();
        acc = s.reshape(&p, &shape);
        acc_letters = letters;
    }
    let (acc, acc_letters) = sum_own(s, &acc, &acc_letters, &output);
    let perm: Vec<usize> = output
        .iter()
        .map(|c| acc_letters.iter().position(|x| x == c).unwrap_or(0))
        .collect();
    Ok(s.permute(&acc, &perm))
}

/// `im2col` (`nn.Unfold`): each kernel position's strided slice of the padded input,
/// stacked after the channel dim, `[N, C * kh * kw, L]`.
fn im2col(
    s: &mut Steps<'_>,
    x: &str,
    shape: &[i64],
    k: [i64; 2],
    dil: [i64; 2],
    pad: [i64; 2],
    st: [i64; 2],
) -> Result<String, String> {
    let batched = match shape.len() {
        4 => true,
        3 => false,
        r => return Err(format!("im2col takes a 3-d or 4-d input, found {r}-d")),
    };
    if k.iter().chain(&dil).chain(&st).any(|&v| v <= 0) || pad.iter().any(|&p| p < 0) {
        return Err(format!(
            "kernel {k:?}, dilation {dil:?} and stride {st:?} must be positive, padding {pad:?} non-negative"
        ));
    }
    let (x, n, c, h, w) = if batched {
        (x.to_string(), shape[0], shape[1], shape[2], shape[3])
    } else {
        let x4 = s.reshape(x, &[1, shape[0], shape[1], shape[2]]);
        (x4, 1, shape[0], shape[1], shape[2])
    };
    let o = |i: usize, size: i64| (size + 2 * pad[i] - dil[i] * (k[i] - 1) - 1) / st[i] + 1;
    let (oh, ow) = (o(0, h), o(1, w));
    if oh <= 0 || ow <= 0 {
        return Err(format!("the kernel does not fit the padded {h}x{w} input"));
    }
    let xp = if pad != [0, 0] {
        s.op(
            "constant_pad_nd",
            vec![
                ("self", t(&x)),
                ("pad", ints(&[pad[1], pad[1], pad[0], pad[0]])),
            ],
        )
    } else {
        x
    };
    let mut taps = vec![];
    for i in 0..k[0] {
        for j in 0..k[1] {
            let r0 = i * dil[0];
            let rows = s.op(
                "slice",
                vec![
                    ("self", t(&xp)),
                    ("dim", Raw::Int(2)),
                    ("start", Raw::Int(r0)),
                    ("end", Raw::Int(r0 + (oh - 1) * st[0] + 1)),
                    ("step", Raw::Int(st[0])),
                ],
            );
            let c0 = j * dil[1];
            taps.push(s.op(
                "slice",
                vec![
                    ("self", t(&rows)),
                    ("dim", Raw::Int(3)),
                    ("start", Raw::Int(c0)),
                    ("end", Raw::Int(c0 + (ow - 1) * st[1] + 1)),
                    ("step", Raw::Int(st[1])),
                ],
            ));
        }
    }
    let stacked = s.stack(&taps, 2);
    let cols = c * k[0] * k[1];
    Ok(if batched {
        s.reshape(&stacked, &[n, cols, oh * ow])
    } else {
        s.reshape(&stacked, &[cols, oh * ow])
    })
}

/// `col2im` (`nn.Fold`), the adjoint of [`im2col`]: each kernel position's columns
/// scattered into zeros of the padded output at that position's strided places, the
/// scatters summed (overlapping blocks add), the padding cut off.
#[allow(clippy::too_many_arguments)]
fn col2im(
    s: &mut Steps<'_>,
    x: &str,
    shape: &[i64],
    out: &[i64],
    dtype: DType,
    k: [i64; 2],
    dil: [i64; 2],
    pad: [i64; 2],
    st: [i64; 2],
) -> Result<String, String> {
    let (batched, n, cols, blocks) = match shape {
        [n, c, l] => (true, *n, *c, *l),
        [c, l] => (false, 1, *c, *l),
        _ => return Err(format!("col2im takes a 2-d or 3-d input, found {shape:?}")),
    };
    let (h, w) = match out {
        [.., h, w] => (*h, *w),
        _ => return Err(format!("col2im's output has shape {out:?}")),
    };
    if k.iter().chain(&dil).chain(&st).any(|&v| v <= 0) || pad.iter().any(|&p| p < 0) {
        return Err(format!(
            "kernel {k:?}, dilation {dil:?} and stride {st:?} must be positive, padding {pad:?} non-negative"
        ));
    }
    let taps = k[0] * k[1];
    if cols % taps != 0 {
        return Err(format!(
            "{cols} rows are not a whole number of {taps}-position kernels"
        ));
    }
    let c = cols / taps;
    let o = |i: usize, size: i64| (size + 2 * pad[i] - dil[i] * (k[i] - 1) - 1) / st[i] + 1;
    let (oh, ow) = (o(0, h), o(1, w));
    if oh <= 0 || ow <= 0 || oh * ow != blocks {
        return Err(format!(
            "{blocks} blocks, but a {h}x{w} output holds {oh}x{ow} of them"
        ));
    }
    let (hp, wp) = (h + 2 * pad[0], w + 2 * pad[1]);
    let x5 = s.reshape(x, &[n, c, taps, oh, ow]);
    let zeros = |s: &mut Steps<'_>, size: &[i64]| {
        s.op(
            "zeros",
            vec![
                ("size", ints(size)),
                ("dtype", Raw::Str(dtype.name().into())),
            ],
        )
    };
    let mut acc: Option<String> = None;
    for i in 0..k[0] {
        for j in 0..k[1] {
            let tap = s.op(
                "select",
                vec![
                    ("self", t(&x5)),
                    ("dim", Raw::Int(2)),
                    ("index", Raw::Int(i * k[1] + j)),
                ],
            );
            let zr = zeros(s, &[n, c, oh, wp]);
            let c0 = j * dil[1];
            let row = s.op(
                "slice_scatter",
                vec![
                    ("self", t(&zr)),
                    ("src", t(&tap)),
                    ("dim", Raw::Int(3)),
                    ("start", Raw::Int(c0)),
                    ("end", Raw::Int(c0 + (ow - 1) * st[1] + 1)),
                    ("step", Raw::Int(st[1])),
                ],
            );
            let zf = zeros(s, &[n, c, hp, wp]);
            let r0 = i * dil[0];
            let full = s.op(
                "slice_scatter",
                vec![
                    ("self", t(&zf)),
                    ("src", t(&row)),
                    ("dim", Raw::Int(2)),
                    ("start", Raw::Int(r0)),
                    ("end", Raw::Int(r0 + (oh - 1) * st[0] + 1)),
                    ("step", Raw::Int(st[0])),
                ],
            );
            acc = Some(match acc {
                None => full,
                Some(a) => s.bin("add", t(&a), t(&full)),
            });
        }
    }
    let mut y = acc.ok_or("a kernel of no positions")?;
    for (d, p, size) in [(2, pad[0], h), (3, pad[1], w)] {
        if p > 0 {
            y = s.op(
                "slice",
                vec![
                    ("self", t(&y)),
                    ("dim", Raw::Int(d)),
                    ("start", Raw::Int(p)),
                    ("end", Raw::Int(p + size)),
                ],
            );
        }
    }
    Ok(if batched {
        y
    } else {
        s.reshape(&y, &[c, h, w])
    })
}

/// How an `upsample_*` op maps output positions to input ones.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Mode {
    Nearest,
    NearestExact,
    Linear,
    Cubic,
}

fn upsample_kind(op: &str) -> Option<(Mode, usize)> {
    Some(match op {
        "upsample_nearest1d" => (Mode::Nearest, 1),
        "upsample_nearest2d" => (Mode::Nearest, 2),
        "upsample_nearest3d" => (Mode::Nearest, 3),
        "_upsample_nearest_exact1d" => (Mode::NearestExact, 1),
        "_upsample_nearest_exact2d" => (Mode::NearestExact, 2),
        "_upsample_nearest_exact3d" => (Mode::NearestExact, 3),
        "upsample_linear1d" => (Mode::Linear, 1),
        "upsample_bilinear2d" => (Mode::Linear, 2),
        "upsample_trilinear3d" => (Mode::Linear, 3),
        "upsample_bicubic2d" => (Mode::Cubic, 2),
        _ => return None,
    })
}

/// The taps of one output position along one dim: input indices and weights.
type Taps = Vec<(i64, f64)>;

/// ATen's `area_pixel_compute_scale`, in float32 as ATen computes it for float inputs.
fn pixel_scale(input: i64, output: i64, align: bool, scale: Option<f64>) -> f32 {
    if align {
        if output > 1 {
            (input - 1) as f32 / (output - 1) as f32
        } else {
            0.0
        }
    } else {
        match scale {
            Some(s) if s > 0.0 => (1.0 / s) as f32,
            _ => input as f32 / output as f32,
        }
    }
}

/// The taps of every output position along one dim of `input` elements.
fn taps(mode: Mode, input: i64, output: i64, align: bool, scale: Option<f64>) -> Vec<Taps> {
    let last = input - 1;
    let clamp = |i: i64| i.clamp(0, last);
    (0..output)
        .map(|o| match mode {
            Mode::Nearest | Mode::NearestExact => {
                // ATen's nearest modes use in/out or 1/scale, never align_corners.
                let sc = pixel_scale(input, output, false, scale);
                let at = if mode == Mode::Nearest {
                    (o as f32 * sc).floor()
                } else {
                    ((o as f32 + 0.5) * sc).floor()
                };
                vec![(clamp((at as i64).min(last)), 1.0)]
            }
            Mode::Linear => {
                let sc = pixel_scale(input, output, align, scale);
                let real = if align {
                    sc * o as f32
                } else {
                    (sc * (o as f32 + 0.5) - 0.5).max(0.0)
                };
                let i0 = (real as i64).min(last);
                let i1 = (i0 + 1).min(last);
                let l1 = real - i0 as f32;
                vec![(i0, (1.0 - l1) as f64), (i1, l1 as f64)]
            }
            Mode::Cubic => {
                let sc = pixel_scale(input, output, align, scale);
                let real = if align {
                    sc * o as f32
                } else {
                    sc * (o as f32 + 0.5) - 0.5
                };
                let i = real.floor();
                let tt = real - i;
                let i = i as i64;
                const A: f32 = -0.75;
                let near = |x: f32| ((A + 2.0) * x - (A + 3.0)) * x * x + 1.0;
                let far = |x: f32| ((A * x - 5.0 * A) * x + 8.0 * A) * x - 4.0 * A;
                let w = [far(tt + 1.0), near(tt), near(1.0 - tt), far(2.0 - tt)];
                (0..4)
                    .map(|k| (clamp(i - 1 + k as i64), w[k] as f64))
                    .collect()
            }
        })
        .collect()
}

/// Interpolates `x` (`inp`) to `out`'s spatial sizes, one spatial dim at a time: for each
/// tap, the input gathered at that tap's indices, weighted per output position.
fn upsample(
    s: &mut Steps<'_>,
    x: &str,
    inp: &TensorMeta,
    out: &TensorMeta,
    mode: Mode,
    align: bool,
    scales: &[Option<f64>],
) -> Result<String, String> {
    let rank = inp.rank();
    let spatial = scales.len();
    let mut cur = x.to_string();
    for (k, scale) in scales.iter().enumerate() {
        let d = rank - spatial + k;
        let (i, o) = (inp.shape[d], out.shape[d]);
        // Equal sizes copy (ATen's nearest modes always; the others unless a scale
        // other than 1 was given, which ATen would follow).
        let nearest = matches!(mode, Mode::Nearest | Mode::NearestExact);
        if i == o && (nearest || scale.is_none() || *scale == Some(1.0)) {
            continue;
        }
        if i <= 0 {
            return Err(format!("interpolation of an empty dim {d}"));
        }
        let taps = taps(mode, i, o, align, *scale);
        let n = taps.first().map_or(0, Vec::len);
        let mut acc: Option<String> = None;
        for tap in 0..n {
            let index: Vec<f64> = taps.iter().map(|p| p[tap].0 as f64).collect();
            let idx = s.konst(vec![o], DType::Int64, index);
            let mut indices = vec![Raw::None; d];
            indices.push(t(&idx));
            let g = s.op(
                "index",
                vec![("self", t(&cur)), ("indices", Raw::List(indices))],
            );
            let term = if matches!(mode, Mode::Nearest | Mode::NearestExact) {
                g
            } else {
                let mut wshape = vec![o];
                wshape.extend(std::iter::repeat_n(1, rank - d - 1));
                let w = s.konst(wshape, inp.dtype, taps.iter().map(|p| p[tap].1).collect());
                s.bin("mul", t(&g), t(&w))
            };
            acc = Some(match acc {
                None => term,
                Some(a) => s.bin("add", t(&a), t(&term)),
            });
        }
        cur = acc.unwrap_or(cur);
    }
    Ok(cur)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bilinear_taps_follow_aten() {
        // 2 -> 4, align_corners=False: positions -0.25 (clamped to 0), 0.25, 0.75, 1.25.
        let t = taps(Mode::Linear, 2, 4, false, None);
        let want = [
            [(0, 1.0), (1, 0.0)],
            [(0, 0.75), (1, 0.25)],
            [(0, 0.25), (1, 0.75)],
            [(1, 0.75), (1, 0.25)],
        ];
        for (got, want) in t.iter().zip(want) {
            for ((gi, gw), (wi, ww)) in got.iter().zip(want) {
                assert_eq!(*gi, wi);
                assert!((gw - ww).abs() < 1e-6, "{t:?}");
            }
        }
        // align_corners=True maps the corners onto each other.
        let t = taps(Mode::Linear, 3, 5, true, None);
        assert_eq!(t[0][0], (0, 1.0));
        assert_eq!(t[4][0].0, 2);
    }

    #[test]
    fn cubic_weights_sum_to_one_and_nearest_floors() {
        for o in taps(Mode::Cubic, 5, 9, false, None) {
            let sum: f64 = o.iter().map(|p| p.1).sum();
            assert!((sum - 1.0).abs() < 1e-6);
        }
        let near: Vec<i64> = taps(Mode::Nearest, 3, 7, false, None)
            .iter()
            .map(|p| p[0].0)
            .collect();
        assert_eq!(near, [0, 0, 0, 1, 1, 2, 2]);
        // A scale given explicitly wins over in/out (5 * 1.5 -> 7 samples at 1/1.5).
        let by_scale: Vec<i64> = taps(Mode::Nearest, 5, 7, false, Some(1.5))
            .iter()
            .map(|p| p[0].0)
            .collect();
        assert_eq!(by_scale, [0, 0, 1, 2, 2, 3, 4]);
    }
}
