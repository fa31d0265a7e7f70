//! Property tests: no input text panics the importer; random graphs give the same values
//! before and after the passes; every decomposition matches the composite's direct
//! interpretation.

mod common;
use common::max_rel_err;
use kiln::graph::parse_toml;
use proptest::prelude::*;

const VALID: &str = include_str!("../../examples/small_views.toml");

fn eval_both(text: &str, passes: bool) -> Option<(Vec<f64>, Vec<f64>)> {
    let mut g = parse_toml(text).ok()?;
    let metas: Vec<_> = g
        .inputs()
        .iter()
        .map(|&i| g.node(i).unwrap().outputs[0].clone())
        .collect();
    let inputs = kiln::tensor_io::random_inputs(&metas, 11);
    let before = kiln::interp::evaluate(&g, &inputs).unwrap();
    if passes {
        kiln::passes::run_pipeline(&mut g).unwrap();
    } else {
        kiln::passes::decompose::run(&mut g).unwrap();
        kiln::graph::validate(&mut g).unwrap();
        kiln::graph::verify(&g).unwrap();
    }
    let after = kiln::interp::evaluate(&g, &inputs).unwrap();
    Some((before[0].to_vec(), after[0].to_vec()))
}

const UNARY: &[&str] = &[
    "abs", "neg", "exp", "sin", "cos", "tanh", "sigmoid", "relu", "silu", "erf", "gelu",
];
const BINARY: &[&str] = &["add", "sub", "mul", "maximum", "minimum"];

/// One random node reading earlier values, as TOML.
fn node_strategy() -> impl Strategy<Value = (usize, usize, usize, u8)> {
    (0usize..20, 0usize..64, 0usize..64, 0u8..10)
}

fn random_graph(spec: &[(usize, usize, usize, u8)]) -> String {
    let mut t = String::from("format = \"kiln-graph/1\"\nname = \"r\"\noutputs = [\"OUT\"]\n\n");
    t += "[[inputs]]\nname = \"v0\"\nshape = [3, 4]\ndtype = \"float64\"\n\n[[inputs]]\nname = \"v1\"\nshape = [4]\ndtype = \"float64\"\n\n";
    // Every value is [3, 4] (float64) except v1 ([4]), so all binary ops broadcast.
    let mut n = 2;
    for &(kind, a, b, c) in spec {
        let (x, y) = (format!("v{}", a % n), format!("v{}", b % n));
        let body = match kind {
            0..=7 => format!(
                "op = \"{}\"\nargs = [\"{x}\"]",
                UNARY[(kind + c as usize) % UNARY.len()]
            ),
            8..=12 => format!("op = \"{}\"\nargs = [\"{x}\", \"{y}\"]", BINARY[kind - 8]),
            13 => format!("op = \"mul\"\nargs = [\"{x}\", 1]"),
            14 => format!("op = \"add\"\nargs = [\"{x}\", {}.5]", c),
            15 => format!("op = \"softmax\"\nargs = [\"{x}\", -1]"),
            16 => format!("op = \"log_softmax\"\nargs = [\"{x}\", 0]"),
            17 => format!("op = \"layer_norm\"\nargs = [\"{x}\", [4], \"v1\"]"),
            18 => format!("op = \"expand\"\nargs = [\"{x}\", [3, -1]]"),
            _ => format!("op = \"clamp\"\nargs = [\"{x}\"]\nattrs = {{ min = -0.{c}, max = 0.9 }}"),
        };
        t += &format!("[[nodes]]\nname = \"v{n}\"\n{body}\n\n");
        n += 1;
    }
    t.replace("OUT", &format!("v{}", n - 1))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn random_text_never_panics(s in "\\PC{0,200}") {
        let _ = parse_toml(&s);
    }

    #[test]
    fn mutated_graphs_never_panic(pos in 0usize..2000, len in 0usize..20, junk in "[\\[\\]\"a-z0-9=,.\\- \n]{0,12}") {
        let mut t = VALID.to_string();
        let p = pos.min(t.len());
        let p = (0..=p).rev().find(|&i| t.is_char_boundary(i)).unwrap_or(0);
        let e = (p + len).min(t.len());
        let e = (e..=t.len()).find(|&i| t.is_char_boundary(i)).unwrap_or(t.len());
        t.replace_range(p..e, &junk);
        if let Ok(mut g) = parse_toml(&t) {
            let _ = kiln::passes::run_pipeline(&mut g);
        }
    }

    #[test]
    fn passes_preserve_values(spec in proptest::collection::vec(node_strategy(), 1..12)) {
        let text = random_graph(&spec);
        let (before, after) = eval_both(&text, true).unwrap_or_else(|| panic!("invalid generated graph:\n{text}"));
        // float64, so that ill-conditioned chains (a layer norm of a nearly constant row)
        // do not turn float32 rounding differences into large relative errors.
        let e = max_rel_err(&after, &before, 1e-6);
        prop_assert!(e < 1e-7, "error {} for\n{}", e, text);
    }

    #[test]
    fn decompositions_match_composites(op in 0usize..12, rows in 1i64..5, cols in 1i64..7, f64_dtype in any::<bool>()) {
        let dt = if f64_dtype { "float64" } else { "float32" };
        let node = match op {
            0 => "op = \"softmax\"\nargs = [\"x\", -1]",
            1 => "op = \"_softmax\"\nargs = [\"x\", 0, false]",
            2 => "op = \"log_softmax\"\nargs = [\"x\", 1]",
            3 => "op = \"layer_norm\"\nargs = [\"x\", [COLS], \"w\", \"b\"]",
            4 => "op = \"rms_norm\"\nargs = [\"x\", [COLS], \"w\", 1e-6]",
            5 => "op = \"gelu\"\nargs = [\"x\"]",
            6 => "op = \"gelu\"\nargs = [\"x\"]\nattrs = { approximate = \"tanh\" }",
            7 => "op = \"silu\"\nargs = [\"x\"]",
            8 => "op = \"linear\"\nargs = [\"x\", \"m\", \"w\"]",
            9 => "op = \"addmm\"\nargs = [\"w\", \"x\", \"mt\"]\nattrs = { beta = 0.5, alpha = 2.0 }",
            10 => "op = \"var\"\nargs = [\"x\", [1]]\nattrs = { correction = 1, keepdim = true }",
            _ => "op = \"var\"\nargs = [\"x\"]",
        };
        let text = format!(
            "format = \"kiln-graph/1\"\nname = \"d\"\noutputs = [\"y\"]\n\n\
             [[inputs]]\nname = \"x\"\nshape = [{rows}, {cols}]\ndtype = \"{dt}\"\n\n\
             [[inputs]]\nname = \"w\"\nshape = [{cols}]\ndtype = \"{dt}\"\n\n\
             [[inputs]]\nname = \"b\"\nshape = [{cols}]\ndtype = \"{dt}\"\n\n\
             [[inputs]]\nname = \"m\"\nshape = [{cols}, {cols}]\ndtype = \"{dt}\"\n\n\
             [[inputs]]\nname = \"mt\"\nshape = [{cols}, {cols}]\ndtype = \"{dt}\"\n\n\
             [[nodes]]\nname = \"y\"\n{}\n",
            node.replace("COLS", &cols.to_string())
        );
        let (before, after) = eval_both(&text, false).unwrap_or_else(|| panic!("invalid graph:\n{text}"));
        let tol = if f64_dtype { 1e-9 } else { 2e-5 };
        let e = max_rel_err(&after, &before, 1e-2);
        prop_assert!(e < tol, "error {} for\n{}", e, text);
    }
}
