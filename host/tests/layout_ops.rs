//! The ops whole models brought in with the model census (`bench/models/census.py`):
//! the interpreter gives PyTorch's values, worked out by hand from PyTorch's
//! definitions, and the decomposed pipeline gives the interpreter's.

use kiln::graph::parse_toml;

/// Evaluates `nodes` over the constant `c` (shape `shape`, float32 unless `dtype`),
/// before and after the pass pipeline, and returns the outputs' values (checking that
/// both agree).
fn eval(
    shape: &[i64],
    dtype: &str,
    values: &[f64],
    outputs: &[&str],
    nodes: &str,
) -> Vec<Vec<f64>> {
    // TOML spells a NaN `nan`.
    let values: Vec<String> = values
        .iter()
        .map(|v| {
            if v.is_nan() {
                "nan".into()
            } else {
                format!("{v:?}")
            }
        })
        .collect();
    let values = values.join(", ");
    let text = format!(
        "format = \"kiln-graph/1\"\nname = \"t\"\noutputs = {outputs:?}\n\n[[constants]]\nname = \"c\"\nshape = {shape:?}\ndtype = \"{dtype}\"\nvalues = [{values}]\n\n{nodes}"
    );
    let g = parse_toml(&text).unwrap_or_else(|e| panic!("{}\n{text}", kiln::diag::report(&e)));
    let want: Vec<Vec<f64>> = kiln::interp::evaluate(&g, &[])
        .unwrap()
        .iter()
        .map(|t| t.to_vec())
        .collect();
    let mut piped = g.clone();
    kiln::passes::run_pipeline(&mut piped).unwrap();
    let got = kiln::interp::evaluate(&piped, &[]).unwrap();
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        let g = g.to_vec();
        assert_eq!(g.len(), w.len(), "output {i}");
        for (a, b) in g.iter().zip(w) {
            assert!(
                a == b || (a.is_nan() && b.is_nan()) || (a - b).abs() <= 1e-6 * b.abs().max(1.0),
                "output {i}: {g:?} vs {w:?}"
            );
        }
    }
    want
}

/// Whether `got` is `want`: NaN where it is NaN, and elsewhere equal within 1e-12.
fn same_values(got: &[f64], want: &[f64]) -> bool {
    got.len() == want.len()
        && got
            .iter()
            .zip(want)
            .all(|(a, b)| a == b || (a.is_nan() && b.is_nan()) || (a - b).abs() < 1e-12)
}

fn node(name: &str, op: &str, args: &str) -> String {
    format!("[[nodes]]\nname = \"{name}\"\nop = \"{op}\"\nargs = {args}\n\n")
}

#[test]
fn padding_follows_each_mode() {
    let nodes = [
        node("r", "pad", r#"["c", [2, 1], "reflect"]"#),
        node("p", "pad", r#"["c", [2, 1], "replicate"]"#),
        node("w", "pad", r#"["c", [2, 1], "circular"]"#),
        node("k", "constant_pad_nd", r#"["c", [-1, 2], 9.0]"#),
    ]
    .concat();
    let out = eval(
        &[1, 3],
        "float32",
        &[1.0, 2.0, 3.0],
        &["r", "p", "w", "k"],
        &nodes,
    );
    assert_eq!(out[0], [3.0, 2.0, 1.0, 2.0, 3.0, 2.0]);
    assert_eq!(out[1], [1.0, 1.0, 1.0, 2.0, 3.0, 3.0]);
    assert_eq!(out[2], [2.0, 3.0, 1.0, 2.0, 3.0, 1.0]);
    assert_eq!(out[3], [2.0, 3.0, 9.0, 9.0]);
}

#[test]
fn roll_shifts_cyclically_per_dim_and_flattened() {
    let nodes = [
        node("a", "roll", r#"["c", [1, 1], [0, 1]]"#),
        node("f", "roll", r#"["c", [1]]"#),
        node("n", "roll", r#"["c", [-4], [1]]"#),
    ]
    .concat();
    let out = eval(
        &[2, 3],
        "float32",
        &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
        &["a", "f", "n"],
        &nodes,
    );
    assert_eq!(out[0], [6.0, 4.0, 5.0, 3.0, 1.0, 2.0]);
    assert_eq!(out[1], [6.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
    assert_eq!(out[2], [2.0, 3.0, 1.0, 5.0, 6.0, 4.0]);
}

#[test]
fn scatters_replace_a_slice_or_an_index() {
    let nodes = [
        node("z", "zeros", "[[2, 5]]"),
        node("s", "slice", r#"["c", 1, 0, 2]"#),
        node("a", "slice_scatter", r#"["z", "s", 1, 1, 5, 2]"#),
        node("r", "select", r#"["c", 0, 0]"#),
        node("b", "select_scatter", r#"["z", "r", 0, -1]"#),
    ]
    .concat();
    let out = eval(
        &[2, 5],
        "float32",
        &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0],
        &["a", "b"],
        &nodes,
    );
    assert_eq!(out[0], [0.0, 1.0, 0.0, 2.0, 0.0, 0.0, 6.0, 0.0, 7.0, 0.0]);
    assert_eq!(out[1], [0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
}

#[test]
fn as_strided_reads_offsets_into_the_elements() {
    let nodes = [
        node("g", "as_strided", r#"["c", [2, 2], [1, 2], 1]"#),
        node("v", "as_strided", r#"["c", [3, 1, 2], [2, 7, 1]]"#),
    ]
    .concat();
    let out = eval(
        &[6],
        "float32",
        &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0],
        &["g", "v"],
        &nodes,
    );
    assert_eq!(out[0], [1.0, 3.0, 2.0, 4.0]);
    assert_eq!(out[1], [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
}

#[test]
fn average_pooling_divides_as_pytorch_does() {
    let nodes = [
        node("i", "avg_pool2d", r#"["c", [2, 2], [2, 2], [1, 1]]"#),
        node(
            "e",
            "avg_pool2d",
            r#"["c", [2, 2], [2, 2], [1, 1], false, false]"#,
        ),
        node("m", "avg_pool2d", r#"["c", [2, 2], [2, 2], [0, 0], true]"#),
        node(
            "o",
            "avg_pool2d",
            r#"["c", [2, 2], [2, 2], [0, 0], false, true, 3]"#,
        ),
    ]
    .concat();
    let x: Vec<f64> = (1..=9).map(f64::from).collect();
    let out = eval(&[1, 1, 3, 3], "float32", &x, &["i", "e", "m", "o"], &nodes);
    assert_eq!(out[0], [0.25, 1.25, 2.75, 7.0]);
    assert_eq!(out[1], [1.0, 2.5, 5.5, 7.0]);
    assert_eq!(out[2], [3.0, 4.5, 7.5, 9.0]);
    assert_eq!(out[3], [4.0]);
}

#[test]
fn hard_activations_and_remainders() {
    let nodes = [
        node("s", "hardsigmoid", r#"["c"]"#),
        node("w", "hardswish", r#"["c"]"#),
        node("f", "fmod", r#"["c", 2.0]"#),
        node("r", "remainder", r#"["c", 2.0]"#),
    ]
    .concat();
    let out = eval(
        &[5],
        "float64",
        &[-4.0, -1.0, 0.0, 1.0, 4.5],
        &["s", "w", "f", "r"],
        &nodes,
    );
    let close = |a: &[f64], b: &[f64]| a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-12);
    assert!(
        close(&out[0], &[0.0, 1.0 / 3.0, 0.5, 2.0 / 3.0, 1.0]),
        "{:?}",
        out[0]
    );
    assert!(
        close(&out[1], &[0.0, -1.0 / 3.0, 0.0, 2.0 / 3.0, 4.5]),
        "{:?}",
        out[1]
    );
    assert_eq!(out[2], [-0.0, -1.0, 0.0, 1.0, 0.5]);
    assert_eq!(out[3], [0.0, 1.0, 0.0, 1.0, 0.5]);
    let nodes = [
        node("f", "fmod", r#"["c", 3]"#),
        node("r", "remainder", r#"["c", 3]"#),
        node("g", "fmod", r#"["c", -3]"#),
        node("q", "remainder", r#"["c", -3]"#),
    ]
    .concat();
    let out = eval(&[2], "int64", &[-7.0, 7.0], &["f", "r", "g", "q"], &nodes);
    assert_eq!(
        out,
        [
            vec![-1.0, 1.0],
            vec![2.0, 1.0],
            vec![-1.0, 1.0],
            vec![-1.0, -2.0]
        ]
    );
}

#[test]
fn baddbmm_scales_both_terms() {
    let nodes = [
        node("b1", "view", r#"["c", [2, 1, 2]]"#),
        node("b2", "view", r#"["c", [2, 2, 1]]"#),
        node("one", "ones", "[[1, 1]]"),
        "[[nodes]]\nname = \"y\"\nop = \"baddbmm\"\nargs = [\"one\", \"b1\", \"b2\"]\nattrs = { beta = 0.5, alpha = 2.0 }\n".to_string(),
    ]
    .concat();
    let out = eval(&[4], "float32", &[1.0, 2.0, 3.0, 4.0], &["y"], &nodes);
    // [1 2]·[1 2]ᵀ = 5 and [3 4]·[3 4]ᵀ = 25, times 2, plus half of 1.
    assert_eq!(out[0], [10.5, 50.5]);
}

#[test]
fn group_norm_normalises_each_group_and_repeat_tiles() {
    let nodes = [
        "[[nodes]]\nname = \"g\"\nop = \"group_norm\"\nargs = [\"c\", 2]\nattrs = { eps = 0.0 }\n\n"
            .to_string(),
        node("r", "repeat", r#"["c", [2, 1, 2]]"#),
    ]
    .concat();
    let out = eval(
        &[1, 4, 1],
        "float32",
        &[1.0, 2.0, 3.0, 5.0],
        &["g", "r"],
        &nodes,
    );
    // Groups [1, 2] and [3, 5]: mean 1.5 and 4, standard deviation 0.5 and 1.
    assert_eq!(out[0], [-1.0, 1.0, -1.0, 1.0]);
    assert_eq!(
        out[1],
        [1.0, 1.0, 2.0, 2.0, 3.0, 3.0, 5.0, 5.0, 1.0, 1.0, 2.0, 2.0, 3.0, 3.0, 5.0, 5.0]
    );
}

#[test]
fn huge_shifts_and_chunk_counts_are_taken_modulo_without_overflow() {
    let nodes = [
        node(
            "a",
            "roll",
            r#"["c", [9223372036854775807, 9223372036854775807], [1, 1]]"#,
        ),
        node("f", "roll", r#"["c", [-9223372036854775807]]"#),
    ]
    .concat();
    let out = eval(
        &[2, 3],
        "float32",
        &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
        &["a", "f"],
        &nodes,
    );
    // i64::MAX = 1 (mod 3), twice: a shift of 2; -(i64::MAX) = 5 (mod 6).
    assert_eq!(out[0], [2.0, 3.0, 1.0, 5.0, 6.0, 4.0]);
    assert_eq!(out[1], [2.0, 3.0, 4.0, 5.0, 6.0, 1.0]);
}

/// `clamp.Tensor` (T5 clamps its fp16 activations to a bound it computes as a 0-d
/// tensor): a tensor bound is an elementwise maximum or minimum, NaN in the operand or
/// either bound comes through, `min > max` gives `max`, a 0-d bound broadcasts, and a
/// number bound beside a tensor one is applied as a number.
#[test]
fn clamp_takes_tensor_bounds_as_aten_does() {
    let nodes = [
        node("x", "select", r#"["c", 0, 0]"#),
        node("lo", "select", r#"["c", 0, 1]"#),
        node("hi", "select", r#"["c", 0, 2]"#),
        node("hi0", "select", r#"["hi", 0, 0]"#),
        node("both", "clamp", r#"["x", "lo", "hi"]"#),
        node("low", "clamp", r#"["x", "lo"]"#),
        "[[nodes]]\nname = \"mixed\"\nop = \"clamp\"\nargs = [\"x\"]\nattrs = { min = 0.0, max = \"hi\" }\n\n".to_string(),
        "[[nodes]]\nname = \"scalar\"\nop = \"clamp\"\nargs = [\"x\"]\nattrs = { max = \"hi0\" }\n\n".to_string(),
    ]
    .concat();
    let nan = f64::NAN;
    let out = eval(
        &[3, 4],
        "float32",
        &[-5.0, 0.5, nan, 7.0, -1.0, nan, 0.0, 2.0, 1.0, 3.0, 1.0, 1.0],
        &["both", "low", "mixed", "scalar"],
        &nodes,
    );
    assert!(same_values(&out[0], &[-1.0, nan, nan, 1.0]), "{:?}", out[0]);
    assert!(same_values(&out[1], &[-1.0, nan, nan, 7.0]), "{:?}", out[1]);
    assert!(same_values(&out[2], &[0.0, 0.5, nan, 1.0]), "{:?}", out[2]);
    assert!(same_values(&out[3], &[-5.0, 0.5, nan, 1.0]), "{:?}", out[3]);
}

/// `conv_transpose2d` as PyTorch defines it (each input element scatters its weight
/// window into the output at `i * stride - padding + k * dilation`), with groups, unequal
/// strides and dilations, padding and output padding, worked out here by its definition:
/// the interpreter and the decomposed pipeline (a direct convolution of the spread input)
/// both give it.
#[test]
fn transposed_convolution_scatters_each_input_through_the_kernel() {
    let (n, cin, h, w_) = (2usize, 4usize, 3usize, 3usize);
    let (groups, cout_g, kh, kw) = (2usize, 3usize, 3usize, 2usize);
    let (stride, padding, dilation, out_pad) = ([2usize, 1], [1usize, 0], [1usize, 2], [1usize, 0]);
    let x: Vec<f64> = (0..n * cin * h * w_)
        .map(|i| ((i * 7 % 11) as f64 - 5.0) / 4.0)
        .collect();
    let wt: Vec<f64> = (0..cin * cout_g * kh * kw)
        .map(|i| ((i * 5 % 13) as f64 - 6.0) / 8.0)
        .collect();
    let oh = (h - 1) * stride[0] + dilation[0] * (kh - 1) + out_pad[0] + 1 - 2 * padding[0];
    let ow = (w_ - 1) * stride[1] + dilation[1] * (kw - 1) + out_pad[1] + 1 - 2 * padding[1];
    let cout = groups * cout_g;
    let mut want = vec![0.0; n * cout * oh * ow];
    let cin_g = cin / groups;
    for b in 0..n {
        for ci in 0..cin {
            let g = ci / cin_g;
            for i in 0..h {
                for j in 0..w_ {
                    for co in 0..cout_g {
                        for ki in 0..kh {
                            for kj in 0..kw {
                                let oi =
                                    (i * stride[0] + ki * dilation[0]) as i64 - padding[0] as i64;
                                let oj =
                                    (j * stride[1] + kj * dilation[1]) as i64 - padding[1] as i64;
                                if oi < 0 || oj < 0 || oi >= oh as i64 || oj >= ow as i64 {
                                    continue;
                                }
                                let o = ((b * cout + g * cout_g + co) * oh + oi as usize) * ow
                                    + oj as usize;
                                want[o] += x[((b * cin + ci) * h + i) * w_ + j]
                                    * wt[((ci * cout_g + co) * kh + ki) * kw + kj];
                            }
                        }
                    }
                }
            }
        }
    }
    let text = format!(
        "format = \"kiln-graph/1\"\nname = \"t\"\noutputs = [\"y\"]\n\n\
         [[inputs]]\nname = \"x\"\nshape = [{n}, {cin}, {h}, {w_}]\ndtype = \"float64\"\n\n\
         [[inputs]]\nname = \"w\"\nshape = [{cin}, {cout_g}, {kh}, {kw}]\ndtype = \"float64\"\n\n\
         [[nodes]]\nname = \"y\"\nop = \"conv_transpose2d\"\nargs = [\"x\", \"w\"]\n\
         attrs = {{ stride = [2, 1], padding = [1, 0], output_padding = [1, 0], groups = 2, dilation = [1, 2] }}\n"
    );
    let g = parse_toml(&text).unwrap_or_else(|e| panic!("{}\n{text}", kiln::diag::report(&e)));
    let inputs = [
        kiln::tensor::Tensor::new(
            vec![n as i64, cin as i64, h as i64, w_ as i64],
            kiln::graph::DType::Float64,
            x,
        ),
        kiln::tensor::Tensor::new(
            vec![cin as i64, cout_g as i64, kh as i64, kw as i64],
            kiln::graph::DType::Float64,
            wt,
        ),
    ];
    // The core-ATen form: `convolution` with transposed=True.
    let core = text
        .replace("op = \"conv_transpose2d\"", "op = \"convolution\"")
        .replace(
            "groups = 2, dilation = [1, 2] }",
            "groups = 2, dilation = [1, 2], transposed = true }",
        );
    let core = parse_toml(&core).unwrap_or_else(|e| panic!("{}\n{core}", kiln::diag::report(&e)));
    let mut piped = g.clone();
    kiln::passes::run_pipeline(&mut piped).unwrap();
    for (what, g) in [
        ("imported", &g),
        ("after the passes", &piped),
        ("as convolution", &core),
    ] {
        let got = kiln::interp::evaluate(g, &inputs).unwrap()[0].to_vec();
        assert_eq!(got.len(), want.len(), "{what}");
        for (a, b) in got.iter().zip(&want) {
            assert!((a - b).abs() <= 1e-9, "{what}: {got:?}\nwant {want:?}");
        }
    }
}

/// The small ops of PyTorch's functional API, at NaN, infinities and zeros, as PyTorch
/// defines them: `fmin`/`fmax` ignore a NaN, `logaddexp` of equal infinities is that
/// infinity, `xlogy` is 0 where x is 0 (NaN where y is), `threshold` keeps NaN,
/// `heaviside` takes `values` at zero, `isfinite` and `frac`.
#[test]
fn functional_api_ops_at_nan_infinities_and_zero() {
    let nodes = [
        node("d", "flip", r#"["c", [0]]"#),
        node("lo", "fmin", r#"["c", "d"]"#),
        node("hi", "fmax", r#"["c", "d"]"#),
        node("lae", "logaddexp", r#"["c", "d"]"#),
        node("xl", "xlogy", r#"["c", "d"]"#),
        node("th", "threshold", r#"["c", 0.5, 9.0]"#),
        node("hv", "heaviside", r#"["c", "d"]"#),
        node("fin", "isfinite", r#"["c"]"#),
        node("fr", "frac", r#"["c"]"#),
    ]
    .concat();
    let (nan, inf) = (f64::NAN, f64::INFINITY);
    let out = eval(
        &[5],
        "float64",
        &[nan, 1.0, -inf, 0.0, 2.0],
        &["lo", "hi", "lae", "xl", "th", "hv", "fin", "fr"],
        &nodes,
    );
    let l2 = 1.0 + (-1.0f64).exp().ln_1p();
    let want: [&[f64]; 8] = [
        &[2.0, 0.0, -inf, 0.0, 2.0],
        &[2.0, 1.0, -inf, 1.0, 2.0],
        &[nan, l2, -inf, l2, nan],
        &[nan, -inf, nan, 0.0, nan],
        &[nan, 1.0, 9.0, 9.0, 2.0],
        &[0.0, 1.0, 0.0, 1.0, 1.0],
        &[0.0, 1.0, 0.0, 1.0, 1.0],
        &[nan, 0.0, nan, 0.0, 0.0],
    ];
    for (i, (got, want)) in out.iter().zip(want).enumerate() {
        assert!(same_values(got, want), "output {i}: {got:?}, want {want:?}");
    }
}

/// `sort`, `argsort` and `topk` as PyTorch orders: NaN the largest, -inf and inf at the
/// ends, equal elements (NaN among them) in their first order.
#[test]
fn sorts_order_nan_as_the_largest_and_keep_ties_in_order() {
    let nodes = [
        "[[nodes]]\nname = \"s\"\nop = \"sort\"\nargs = [\"c\"]\nattrs = { dim = 0 }\n\n",
        "[[nodes]]\nname = \"sv\"\nop = \"getitem\"\nargs = [\"s\", 0]\n\n",
        "[[nodes]]\nname = \"si\"\nop = \"getitem\"\nargs = [\"s\", 1]\n\n",
        "[[nodes]]\nname = \"d\"\nop = \"argsort\"\nargs = [\"c\"]\nattrs = { descending = true }\n\n",
        "[[nodes]]\nname = \"k\"\nop = \"topk\"\nargs = [\"c\", 3]\nattrs = { largest = false }\n\n",
        "[[nodes]]\nname = \"kv\"\nop = \"getitem\"\nargs = [\"k\", 0]\n\n",
        "[[nodes]]\nname = \"ki\"\nop = \"getitem\"\nargs = [\"k\", 1]\n\n",
    ]
    .concat();
    let (nan, inf) = (f64::NAN, f64::INFINITY);
    let c = [3.0, nan, -1.0, 3.0, -inf, inf, nan, 0.0];
    let out = eval(&[8], "float64", &c, &["sv", "si", "d", "kv", "ki"], &nodes);
    let sorted = [-inf, -1.0, 0.0, 3.0, 3.0, inf, nan, nan];
    assert!(
        out[0]
            .iter()
            .zip(&sorted)
            .all(|(a, b)| a == b || (a.is_nan() && b.is_nan())),
        "{:?}",
        out[0]
    );
    assert_eq!(out[1], [4.0, 2.0, 7.0, 0.0, 3.0, 5.0, 1.0, 6.0]);
    assert_eq!(out[2], [1.0, 6.0, 5.0, 0.0, 3.0, 7.0, 2.0, 4.0]);
    assert_eq!(out[3], [-inf, -1.0, 0.0]);
    assert_eq!(out[4], [4.0, 2.0, 7.0]);
}

/// `scatter` keeps the last write to a place, `scatter_add` adds every write and
/// `index_add` adds `alpha` times each slice, as PyTorch defines them.
#[test]
fn scatters_write_and_add_at_their_indices() {
    let nodes = [
        // c = [1, 2, 3, 4] as a row; index [3, 0, 3], values 10, 20, 30.
        "[[constants]]\nname = \"i\"\nshape = [1, 3]\ndtype = \"int64\"\nvalues = [3, 0, 3]\n\n",
        "[[constants]]\nname = \"v\"\nshape = [1, 3]\ndtype = \"float64\"\nvalues = [10.0, 20.0, 30.0]\n\n",
        "[[constants]]\nname = \"k\"\nshape = [3]\ndtype = \"int64\"\nvalues = [3, 0, 3]\n\n",
        "[[nodes]]\nname = \"r\"\nop = \"reshape\"\nargs = [\"c\", [1, 4]]\n\n",
        "[[nodes]]\nname = \"sc\"\nop = \"scatter\"\nargs = [\"r\", 1, \"i\", \"v\"]\n\n",
        "[[nodes]]\nname = \"sa\"\nop = \"scatter_add\"\nargs = [\"r\", 1, \"i\", \"v\"]\n\n",
        "[[nodes]]\nname = \"vv\"\nop = \"reshape\"\nargs = [\"v\", [3]]\n\n",
        "[[nodes]]\nname = \"ia\"\nop = \"index_add\"\nargs = [\"c\", 0, \"k\", \"vv\"]\nattrs = { alpha = 0.5 }\n\n",
    ]
    .concat();
    let out = eval(
        &[4],
        "float64",
        &[1.0, 2.0, 3.0, 4.0],
        &["sc", "sa", "ia"],
        &nodes,
    );
    assert_eq!(out[0], [20.0, 2.0, 3.0, 30.0]);
    assert_eq!(out[1], [21.0, 2.0, 3.0, 44.0]);
    assert_eq!(out[2], [11.0, 2.0, 3.0, 24.0]);
}

/// `bucketize` counts the boundaries below each value (a NaN above them all, as PyTorch's
/// binary search places it), `signbit` sees -0.0, `nanmean` leaves NaN out, `logit` is
/// log(x / (1 - x)), and `tensor_split` makes the first pieces one longer.
#[test]
fn bucketize_signbit_nanmean_logit_and_tensor_split() {
    let nodes = [
        "[[constants]]\nname = \"b\"\nshape = [3]\ndtype = \"float64\"\nvalues = [0.0, 0.5, 1.0]\n\n",
        "[[nodes]]\nname = \"bk\"\nop = \"bucketize\"\nargs = [\"c\", \"b\"]\n\n",
        "[[nodes]]\nname = \"br\"\nop = \"bucketize\"\nargs = [\"c\", \"b\"]\nattrs = { right = true }\n\n",
        "[[nodes]]\nname = \"sb\"\nop = \"signbit\"\nargs = [\"c\"]\n\n",
        "[[nodes]]\nname = \"nm\"\nop = \"nanmean\"\nargs = [\"c\"]\n\n",
        "[[nodes]]\nname = \"lg\"\nop = \"logit\"\nargs = [\"b\"]\n\n",
        "[[nodes]]\nname = \"ts\"\nop = \"tensor_split\"\nargs = [\"c\", 4]\n\n",
        "[[nodes]]\nname = \"t0\"\nop = \"getitem\"\nargs = [\"ts\", 0]\n\n",
        "[[nodes]]\nname = \"t3\"\nop = \"getitem\"\nargs = [\"ts\", 3]\n\n",
    ]
    .concat();
    let nan = f64::NAN;
    let c = [-0.0, 0.0, 0.5, 0.75, nan, 2.0];
    let out = eval(
        &[6],
        "float64",
        &c,
        &["bk", "br", "sb", "nm", "lg", "t0", "t3"],
        &nodes,
    );
    assert_eq!(out[0], [0.0, 0.0, 1.0, 2.0, 3.0, 3.0]);
    assert_eq!(out[1], [1.0, 1.0, 2.0, 2.0, 3.0, 3.0]);
    assert_eq!(out[2], [1.0, 0.0, 0.0, 0.0, 0.0, 0.0]);
    assert_eq!(out[3], [0.65]);
    assert_eq!(out[4], [f64::NEG_INFINITY, 0.0, f64::INFINITY]);
    assert_eq!((out[5].len(), out[6].len()), (2, 1));
}

/// PyTorch's `cat` skips operands that are 1-d and empty (shape `[0]`) where others have
/// another rank, as transformers' empty KV caches make it: `cat([c, empty], -2)` is `c`, in
/// the dtype of all the operands (float64 here); `cat` of 1-d operands keeps the empty one.
#[test]
fn cat_skips_legacy_empty_operands_but_keeps_their_dtype() {
    let c = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
    let nodes = r#"
[[constants]]
name = "e"
shape = [0]
dtype = "float64"
values = []

[[nodes]]
name = "y"
op = "cat"
args = [["c", "e", "c"], -2]

[[nodes]]
name = "flat"
op = "reshape"
args = ["c", [-1]]

[[nodes]]
name = "z"
op = "cat"
args = [["flat", "e"]]
"#;
    let out = eval(&[2, 3], "float32", &c, &["y", "z"], nodes);
    assert_eq!(out[0], [&c[..], &c[..]].concat());
    assert_eq!(out[1], c);
    let text = format!(
        "format = \"kiln-graph/1\"\noutputs = [\"y\"]\n\n[[constants]]\nname = \"c\"\nshape = [2, 3]\n\
         dtype = \"float32\"\nfill = 1.0\n{nodes}"
    );
    let g = parse_toml(&text.replace("outputs = [\"y\"]", "outputs = [\"y\", \"z\"]")).unwrap();
    let dtypes: Vec<_> = g
        .outputs()
        .iter()
        .map(|v| g.meta(*v).unwrap().dtype)
        .collect();
    assert_eq!(
        dtypes,
        [kiln::graph::DType::Float64, kiln::graph::DType::Float64]
    );
    assert_eq!(g.meta(g.outputs()[0]).unwrap().shape, [4, 3]);
}
