//! The scheduled program (lowering, fusion, memory plan) computes what the
//! graph means: its loop-IR evaluation matches the reference interpreter.

use kiln::graph::ir::Graph;
use kiln::graph::Op;
use kiln::tensor::Tensor;
use std::path::Path;

fn repo() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

fn input_metas(g: &Graph) -> Vec<kiln::graph::ir::TensorMeta> {
    g.inputs()
        .iter()
        .map(|n| g.node(*n).expect("input node").outputs[0].clone())
        .collect()
}

/// Largest |a - b| relative to the largest |b| over all outputs.
fn rel_error(got: &[Tensor], want: &[Tensor]) -> f64 {
    let mut worst = 0.0f64;
    for (g, w) in got.iter().zip(want) {
        assert_eq!(g.shape, w.shape, "output shapes differ");
        let (gv, wv) = (g.to_vec(), w.to_vec());
        let scale = wv.iter().fold(0.0f64, |m, v| m.max(v.abs())).max(1e-30);
        let err = gv
            .iter()
            .zip(&wv)
            .fold(0.0f64, |m, (a, b)| m.max((a - b).abs()));
        worst = worst.max(err / scale);
    }
    worst
}

fn check(graph: Graph, tolerance: f64) -> kiln::schedule::Scheduled {
    // Token ids and other indices are drawn in range, as `host run` draws them.
    let bounds: Vec<Option<i64>> = graph
        .inputs()
        .iter()
        .map(|n| graph.index_bound(*n))
        .collect();
    let inputs = kiln::tensor_io::random_inputs_bounded(&input_metas(&graph), &bounds, 7)
        .expect("inputs of a small graph");
    let want = kiln::interp::evaluate(&graph, &inputs).expect("reference");
    let mut lowered = graph.clone();
    kiln::passes::run_pipeline(&mut lowered).expect("passes");
    // Without optional features, and with every one (in-place buffers, the
    // products' biases in their calls, convolutions in channels-last, state
    // written by kernels, norms taken into the reductions after them, small
    // pointwise kernels side by side in one).
    let all = kiln::schedule::Options {
        features: kiln_plugin_api::BackendFeatures::all(),
        tiling: kiln::schedule::Tiling::Flat,
        bias_epilogue: true,
        conv_channels_last: true,
        inplace_reductions: true,
        attention_units: 132,
        state_scatter: true,
        broadcast_rows: true,
        horizontal: true,
    };
    // And as a Triton device schedules it (pointwise kernels tiled where that
    // coalesces their accesses), and as a C++ device does (rows whose
    // accesses step by one or not at all).
    let tiled = kiln::schedule::Options {
        tiling: kiln::schedule::Tiling::Tiles,
        ..all
    };
    let rows = kiln::schedule::Options {
        tiling: kiln::schedule::Tiling::Rows,
        ..all
    };
    let mut last = None;
    for options in [kiln::schedule::Options::default(), all, rows, tiled] {
        let scheduled = kiln::schedule::schedule_with(&lowered, &options).expect("schedule");
        let got = kiln::schedule::eval::run(&scheduled, &inputs).expect("loop-IR evaluation");
        let err = rel_error(&got, &want);
        assert!(
            err <= tolerance,
            "{} ({options:?}): relative error {err:e}\n{}",
            graph.name,
            kiln::schedule::print::program_text(&scheduled, &[])
        );
        assert_no_kernel_reads_indirectly_what_it_writes(&scheduled);
        last = Some(scheduled);
    }
    last.expect("scheduled twice")
}

/// Programs of one kernel do not wait for each other's stores: a buffer read at
/// data-dependent positions (an index's operand) must come from an earlier step.
fn assert_no_kernel_reads_indirectly_what_it_writes(s: &kiln::schedule::Scheduled) {
    use kiln::schedule::ir::{Expr, Step};
    for (i, step) in s.program.steps.iter().enumerate() {
        let Step::Kernel(k) = step else { continue };
        let written: Vec<_> = k.stores.iter().map(|st| st.buf).collect();
        for (_, e, _) in k.exprs.iter() {
            if let Expr::Load { buf, indirect, .. } = e {
                assert!(
                    indirect.is_empty() || !written.contains(buf),
                    "step {i} reads buffer {buf:?} at data-dependent positions while writing it\n{}",
                    kiln::schedule::print::program_text(s, &[])
                );
            }
        }
    }
}

#[test]
fn an_index_into_a_reduction_reads_it_from_an_earlier_kernel() {
    // Regression (a realistic Llama's packed-sequence mask): `t[idx] + x` lives in the
    // iteration space of the reduction producing `t`, and was fused into its kernel,
    // where a program read rows of `t` that other programs had not stored yet.
    let idx: Vec<String> = (0..8 * 16)
        .map(|n| ((n * 3 + n / 16) % 8).to_string())
        .collect();
    let text = format!(
        r#"
format = "kiln-graph/1"
name = "index_after_reduction"
outputs = ["z"]

[[inputs]]
name = "x"
shape = [8, 16]
dtype = "float32"

[[constants]]
name = "idx"
shape = [8, 16]
dtype = "int64"
values = [{}]

[[nodes]]
name = "t"
op = "amax"
args = ["x", [1]]

[[nodes]]
name = "y"
op = "index"
args = ["t", ["idx"]]

[[nodes]]
name = "z"
op = "add"
args = ["y", "x"]
"#,
        idx.join(", ")
    );
    let graph = kiln::graph::parse_toml(&text).expect("parses");
    let s = check(graph, 1e-6);
    assert_eq!(
        s.program.kernel_count(),
        2,
        "the index waits for the reduction"
    );
}

#[test]
fn every_small_example_schedules_to_what_the_graph_means() {
    for name in [
        "add",
        "small_softmax",
        "small_layernorm",
        "small_mlp",
        "small_views",
        "small_gpt2_block",
        "small_mixed",
    ] {
        let path = repo().join("examples").join(format!("{name}.toml"));
        let graph = kiln::graph::load_toml(&path).expect("example loads");
        check(graph, 1e-4);
    }
}

#[test]
fn a_matmul_epilogue_writes_in_place_only_when_the_device_allows_it() {
    let path = repo().join("examples/small_mlp.toml");
    let mut graph = kiln::graph::load_toml(&path).expect("example loads");
    kiln::passes::run_pipeline(&mut graph).expect("passes");
    let reuses = |options: &kiln::schedule::Options| {
        let s = kiln::schedule::schedule_with(&graph, options).expect("schedule");
        s.memory
            .allocs
            .iter()
            .flatten()
            .filter(|a| a.reuse.is_some())
            .count()
    };
    assert_eq!(reuses(&kiln::schedule::Options::default()), 0);
    let inplace = kiln::schedule::Options {
        features: kiln_plugin_api::BackendFeatures::INPLACE_BUFFERS,
        tiling: kiln::schedule::Tiling::Flat,
        bias_epilogue: false,
        conv_channels_last: false,
        inplace_reductions: false,
        attention_units: 0,
        state_scatter: false,
        broadcast_rows: false,
        horizontal: false,
    };
    assert_eq!(
        reuses(&inplace),
        1,
        "the bias+relu epilogue writes over the mm result"
    );
}

/// `layer_norm(mm(a, w) + r)` read by another product: the norm's kernel reads
/// the product's result at each element it writes, in its last pass over the
/// row, so with in-place reductions it writes over that buffer (nothing else
/// is dead when it runs); without, it takes a buffer of its own. Its output
/// matches the reference either way.
#[test]
fn a_row_norm_writes_over_the_row_it_reads_where_reductions_may_be_in_place() {
    let text = r#"
format = "kiln-graph/1"
name = "norm_in_place"
outputs = ["z"]

[[inputs]]
name = "a"
shape = [64, 96]
dtype = "float32"

[[inputs]]
name = "w"
shape = [96, 80]
dtype = "float32"

[[inputs]]
name = "r"
shape = [64, 80]
dtype = "float32"

[[inputs]]
name = "w2"
shape = [80, 16]
dtype = "float32"

[[nodes]]
name = "p"
op = "mm"
args = ["a", "w"]

[[nodes]]
name = "t"
op = "add"
args = ["p", "r"]

[[nodes]]
name = "y"
op = "layer_norm"
args = ["t", [80]]

[[nodes]]
name = "z"
op = "mm"
args = ["y", "w2"]
"#;
    let graph = kiln::graph::parse_toml(text).expect("parses");
    let inputs = kiln::tensor_io::random_inputs_bounded(&input_metas(&graph), &[None; 4], 7)
        .expect("inputs of a small graph");
    let reference = kiln::interp::evaluate(&graph, &inputs).expect("reference");
    let mut lowered = graph.clone();
    kiln::passes::run_pipeline(&mut lowered).expect("passes");
    for (reductions, want) in [(false, 0), (true, 1)] {
        let options = kiln::schedule::Options {
            features: kiln_plugin_api::BackendFeatures::INPLACE_BUFFERS,
            inplace_reductions: reductions,
            ..Default::default()
        };
        let s = kiln::schedule::schedule_with(&lowered, &options).expect("schedule");
        let reused: Vec<_> = s
            .memory
            .allocs
            .iter()
            .flatten()
            .filter_map(|a| a.reuse)
            .collect();
        assert_eq!(
            reused.len(),
            want,
            "in-place reductions {reductions}: {reused:?}"
        );
        let got = kiln::schedule::eval::run(&s, &inputs).expect("evaluation");
        let err = rel_error(&got, &reference);
        assert!(
            err <= 1e-4,
            "in-place reductions {reductions}: relative error {err:e}"
        );
    }
}

#[test]
fn fused_reductions_become_one_kernel() {
    for (name, kernels) in [("small_softmax", 1), ("small_layernorm", 1)] {
        let path = repo().join("examples").join(format!("{name}.toml"));
        let graph = kiln::graph::load_toml(&path).expect("example loads");
        let s = check(graph, 1e-4);
        assert_eq!(s.program.kernel_count(), kernels, "{name}");
    }
}

#[test]
fn a_transpose_of_a_square_matrix_is_not_a_no_op() {
    // Regression: no-op removal once dropped views whose output shape equals
    // their input's, which is wrong for a transpose of equal-sized dims.
    let text = r#"
format = "kiln-graph/1"
name = "square"
outputs = ["y"]

[[inputs]]
name = "x"
shape = [3, 4]
dtype = "float32"

[[inputs]]
name = "w"
shape = [4, 4]
dtype = "float32"

[[nodes]]
name = "wt"
op = "transpose"
args = ["w", 0, 1]

[[nodes]]
name = "y"
op = "mm"
args = ["x", "wt"]
"#;
    let graph = kiln::graph::parse_toml(text).expect("graph parses");
    check(graph, 1e-6);
}

/// A graph of one float32 input `x` of `shape` and these nodes, output `y`.
fn one_input(shape: &[i64], dtype: &str, nodes: &str) -> Graph {
    let text = format!(
        "format = \"kiln-graph/1\"\nname = \"g\"\noutputs = [\"y\"]\n\n\
         [[inputs]]\nname = \"x\"\nshape = {shape:?}\ndtype = \"{dtype}\"\n\n{nodes}"
    );
    kiln::graph::parse_toml(&text).expect("graph parses")
}

#[test]
fn a_contiguous_transpose_output_is_a_tiled_copy_not_a_view_of_the_input() {
    for (shape, perm) in [
        (vec![96i64, 80], "[1, 0]"),
        (vec![6, 40, 72], "[0, 2, 1]"),
        (vec![2, 32, 3, 48], "[0, 3, 1, 2]"),
    ] {
        let graph = one_input(
            &shape,
            "float32",
            &format!(
                "[[nodes]]\nname = \"t\"\nop = \"permute\"\nargs = [\"x\", {perm}]\n\n\
                 [[nodes]]\nname = \"y\"\nop = \"contiguous\"\nargs = [\"t\"]\n"
            ),
        );
        let scheduled = check(graph, 0.0);
        let kernels: Vec<&kiln::schedule::ir::Kernel> = scheduled
            .program
            .steps
            .iter()
            .filter_map(|s| match s {
                kiln::schedule::ir::Step::Kernel(k) => Some(k),
                _ => None,
            })
            .collect();
        assert_eq!(kernels.len(), 1, "{shape:?}: one copy kernel");
        assert!(kernels[0].is_tiled(), "{shape:?}: {:?}", kernels[0].space);
        let out = &scheduled.program.outputs[0];
        assert_eq!(
            out.strides,
            kiln::graph::shape::contiguous_sizes(&out.shape),
            "{shape:?}: the output is dense"
        );
    }
    // Contiguous of a contiguous input stays a copy too: the caller may
    // mutate the output, which must not be the input.
    let graph = one_input(
        &[4, 5],
        "float32",
        "[[nodes]]\nname = \"y\"\nop = \"clone\"\nargs = [\"x\"]\n",
    );
    let scheduled = check(graph, 0.0);
    assert_eq!(scheduled.program.steps.len(), 1, "a copy kernel");
}

#[test]
fn split_reductions_keep_their_values_and_make_two_reductions() {
    for (shape, dtype, node, tolerance) in [
        (
            vec![1i64 << 20, 4],
            "float32",
            "op = \"sum\"\nargs = [\"x\", [0]]",
            1e-5,
        ),
        (
            vec![3000, 2000],
            "float32",
            "op = \"mean\"\nargs = [\"x\"]",
            1e-5,
        ),
        (
            vec![3, 1 << 20, 2],
            "float32",
            "op = \"amax\"\nargs = [\"x\", [1]]\nattrs = { keepdim = true }",
            0.0,
        ),
        (
            vec![2, 3 << 20],
            "float16",
            "op = \"sum\"\nargs = [\"x\", [1]]",
            1e-3,
        ),
        (
            vec![64, 4, 16384],
            "float32",
            "op = \"amin\"\nargs = [\"x\", [0, 2]]",
            0.0,
        ),
        // Below the total that splits, but a quarter million elements or more
        // per result: a whole-tensor reduction (T5's overflow guard) is cut
        // through its dims taken as one (512 chunks, not its first dim's 8).
        (
            vec![8, 512, 512],
            "float16",
            "op = \"sum\"\nargs = [\"x\"]",
            1e-3,
        ),
        (
            vec![4, 8, 65536],
            "float32",
            "op = \"amax\"\nargs = [\"x\", [1, 2]]\nattrs = { keepdim = true }",
            0.0,
        ),
    ] {
        let graph = one_input(&shape, dtype, &format!("[[nodes]]\nname = \"y\"\n{node}\n"));
        let inputs = kiln::tensor_io::random_inputs(&input_metas(&graph), 3);
        let want = kiln::interp::evaluate(&graph, &inputs).expect("reference");
        let mut split = graph.clone();
        let options = kiln::passes::Options {
            split_reductions_for: kiln::passes::split::Device {
                units: 132,
                program_warps: 4,
            },
            ..Default::default()
        };
        let report = kiln::passes::run_pipeline_with(&mut split, &options).expect("passes");
        let changed = report
            .passes
            .iter()
            .find(|(name, _, _)| *name == "split")
            .map_or(0, |(_, stats, _)| stats.changed);
        assert_eq!(changed, 1, "{shape:?} {node}: split once");
        let got = kiln::interp::evaluate(&split, &inputs).expect("split graph");
        assert_eq!(got[0].shape, want[0].shape);
        let err = rel_error(&got, &want);
        assert!(err <= tolerance, "{shape:?} {node}: relative error {err:e}");
        let scheduled =
            kiln::schedule::schedule_with(&split, &Default::default()).expect("schedule");
        let got = kiln::schedule::eval::run(&scheduled, &inputs).expect("loop IR");
        let err = rel_error(&got, &want);
        assert!(
            err <= tolerance,
            "{shape:?} {node}: loop IR relative error {err:e}"
        );
        assert_eq!(scheduled.program.steps.len(), 2, "{shape:?} {node}");
    }
    // A whole tensor is cut in chunks through its dims taken as one.
    let (g, _) = sum_through_the_passes(&[8, 512, 512], "[0, 1, 2]");
    let chunks = g
        .node_ids()
        .filter_map(|id| g.node(id))
        .find_map(|n| match &n.op {
            Op::Reshape { shape, .. } if shape.len() == 2 => shape[0].as_const(),
            _ => None,
        });
    assert!(chunks.is_some_and(|c| c >= 264), "{chunks:?}");
    // Reductions with enough results for the device, short rows, and small
    // (launch-bound) reductions stay whole.
    for (shape, dims) in [
        (vec![8192i64, 8192], "[1]"),
        (vec![512, 512, 256], "[1]"),
        (vec![64, 8192], "[1]"),
        (vec![1, 4096], "[1]"),
        (vec![4096, 16], "[0]"),
    ] {
        let (_, report) = sum_through_the_passes(&shape, dims);
        assert!(
            report
                .passes
                .iter()
                .all(|(name, stats, _)| *name != "split" || stats.changed == 0),
            "{shape:?} {dims}"
        );
    }
}

/// `y = x.sum(dims)` of a float32 `x` of `shape`, after the passes for a
/// Triton device of 132 units (reductions split where they would idle it).
fn sum_through_the_passes(shape: &[i64], dims: &str) -> (Graph, kiln::passes::PipelineReport) {
    let mut g = one_input(
        shape,
        "float32",
        &format!("[[nodes]]\nname = \"y\"\nop = \"sum\"\nargs = [\"x\", {dims}]\n"),
    );
    let options = kiln::passes::Options {
        split_reductions_for: kiln::passes::split::Device {
            units: 132,
            program_warps: 4,
        },
        ..Default::default()
    };
    let report = kiln::passes::run_pipeline_with(&mut g, &options).expect("passes");
    (g, report)
}

#[test]
fn an_outer_reduction_is_split_into_many_short_programs_an_inner_one_into_few_long_ones() {
    // (shape, dims, rows of the first kernel's partials): for 132 units, the
    // sum of a 4096 x 4096 matrix over its first dim takes chunks of 128 rows
    // (32 x 4096 partials, 2048 programs of 64 results, at least 8 a unit);
    // the sum of a few long rows takes chunks of at least 256 elements, about
    // two programs a unit, and so does a reduction over the innermost dim and
    // others (dims 0 and 2).
    for (shape, dims, partial_rows) in [
        (vec![4096i64, 4096], "[0]", 32 * 4096),
        (vec![8192, 8192], "[0]", 16 * 8192),
        (vec![2, 1 << 22], "[1]", 2 * 256),
        (vec![256, 1024, 256], "[0, 2]", 32 * 1024),
    ] {
        let (g, _) = sum_through_the_passes(&shape, dims);
        let scheduled = kiln::schedule::schedule_with(&g, &Default::default()).expect("schedule");
        let spaces = kernel_spaces(&scheduled);
        assert_eq!(spaces.len(), 2, "{shape:?} {dims}: {spaces:?}");
        assert_eq!(
            spaces[0].x_hint(),
            partial_rows,
            "{shape:?} {dims}: {spaces:?}"
        );
    }
}

#[test]
fn cpp_transposes_run_on_tiles_where_staged_or_strided_by_a_page() {
    let rows = kiln::schedule::Options {
        tiling: kiln::schedule::Tiling::Rows,
        ..Default::default()
    };
    let space_of = |shape: &[i64], dims: &str, dtype: &str| {
        let text = format!(
            "format = \"kiln-graph/1\"\nname = \"g\"\noutputs = [\"y\"]\n\n\
             [[inputs]]\nname = \"x\"\nshape = {shape:?}\ndtype = \"{dtype}\"\n\n\
             [[nodes]]\nname = \"p\"\nop = \"permute\"\nargs = [\"x\", {dims}]\n\n\
             [[nodes]]\nname = \"y\"\nop = \"contiguous\"\nargs = [\"p\"]\n"
        );
        let mut g = kiln::graph::parse_toml(&text).expect("graph");
        kiln::passes::run_pipeline(&mut g).expect("passes");
        let s = kiln::schedule::schedule_with(&g, &rows).expect("schedule");
        let spaces = kernel_spaces(&s);
        assert_eq!(spaces.len(), 1, "{shape:?} {dims} {dtype}");
        spaces[0].clone()
    };
    // 4-byte elements read down columns: tiles (the writer stages them).
    let s = space_of(&[2048, 2048], "[1, 0]", "float32");
    assert!(s.r_hint() >= 16 && s.x_hint() >= 16, "{s:?}");
    let s = space_of(&[64, 256, 256], "[0, 2, 1]", "int32");
    assert!(s.r_hint() > 1, "{s:?}");
    // 8- and 2-byte elements are staged too.
    let s = space_of(&[3, 37, 700], "[0, 2, 1]", "float64");
    assert!(s.r_hint() > 1, "{s:?}");
    let s = space_of(&[64, 256, 256], "[0, 2, 1]", "bfloat16");
    assert!(s.r_hint() > 1, "{s:?}");
    // Other widths (bytes): tiles only where the read strides by a page or more.
    let s = space_of(&[64, 256, 256], "[0, 2, 1]", "bool");
    assert_eq!(s.r_hint(), 1, "{s:?}");
    let s = space_of(&[4, 37, 1030], "[0, 2, 1]", "bool");
    assert!(s.r_hint() > 1, "{s:?}");
}

#[test]
fn cpp_rows_split_broadcasts_so_that_no_index_wraps_inside_a_row() {
    let rows = kiln::schedule::Options {
        tiling: kiln::schedule::Tiling::Rows,
        ..Default::default()
    };
    let space_of = |graph: &Graph| {
        let mut g = graph.clone();
        kiln::passes::run_pipeline(&mut g).expect("passes");
        let s = kiln::schedule::schedule_with(&g, &rows).expect("schedule");
        let spaces = kernel_spaces(&s);
        assert_eq!(spaces.len(), 1);
        spaces[0].clone()
    };
    // A [cols] operand broadcast over [rows, cols]: rows of cols.
    let text = "format = \"kiln-graph/1\"\nname = \"g\"\noutputs = [\"y\"]\n\n\
        [[inputs]]\nname = \"x\"\nshape = [33, 129]\ndtype = \"float32\"\n\n\
        [[inputs]]\nname = \"w\"\nshape = [129]\ndtype = \"float32\"\n\n\
        [[nodes]]\nname = \"y\"\nop = \"mul\"\nargs = [\"x\", \"w\"]\n";
    let graph = kiln::graph::parse_toml(text).expect("graph");
    assert_eq!(
        (space_of(&graph).x_hint(), space_of(&graph).r_hint()),
        (33, 129)
    );
    check(graph, 1e-6);
    // A [1, 64, 1, 1] bias over [8, 64, 16, 16]: rows the bias is constant
    // along, every access stepping by one or not at all inside a row.
    let text = "format = \"kiln-graph/1\"\nname = \"g\"\noutputs = [\"y\"]\n\n\
        [[inputs]]\nname = \"x\"\nshape = [8, 64, 16, 16]\ndtype = \"float32\"\n\n\
        [[inputs]]\nname = \"b\"\nshape = [1, 64, 1, 1]\ndtype = \"float32\"\n\n\
        [[nodes]]\nname = \"y\"\nop = \"add\"\nargs = [\"x\", \"b\"]\n";
    let graph = kiln::graph::parse_toml(text).expect("graph");
    let mut g = graph.clone();
    kiln::passes::run_pipeline(&mut g).expect("passes");
    let s = kiln::schedule::schedule_with(&g, &rows).expect("schedule");
    let kiln::schedule::ir::Step::Kernel(k) = &s.program.steps[0] else {
        panic!("a kernel")
    };
    assert!(k.space.r_hint() >= 16, "{:?}", k.space);
    for (id, _, _) in k.exprs.iter() {
        if let kiln::schedule::ir::Expr::Load { index, .. } = k.exprs.get(id) {
            let step = index.step_along(kiln::schedule::index::Var::R);
            assert!(matches!(step, Some(0 | 1)), "{index} in {:?}", k.space);
        }
    }
    check(graph, 1e-6);
    // Same-shape operands step by one through the flat loop: it stays flat.
    let graph = one_input(
        &[33, 129],
        "float32",
        "[[nodes]]\nname = \"y\"\nop = \"exp\"\nargs = [\"x\"]\n",
    );
    assert_eq!(space_of(&graph).r_hint(), 1);
}

#[test]
fn a_reduction_over_leading_or_middle_dims_shares_a_kernel_with_what_broadcasts_it_back() {
    // (shape, reduced dims, kernels): the mean and the subtraction in one kernel
    // whenever the reduced dims are one run; a reduction over dims that are not
    // (0 and 2) keeps its consumer apart.
    for (shape, dims, kernels) in [
        (vec![4i64, 6, 5], "[1]", 1),
        (vec![6, 5], "[0]", 1),
        (vec![2, 3, 4, 5], "[1, 2]", 1),
        (vec![3, 4, 5, 1], "[1]", 1),
        (vec![7, 9], "[1]", 1),
        (vec![4, 6, 5], "[0, 2]", 2),
    ] {
        let graph = one_input(
            &shape,
            "float32",
            &format!(
                "[[nodes]]\nname = \"m\"\nop = \"mean\"\nargs = [\"x\", {dims}]\n\
                 attrs = {{ keepdim = true }}\n\n\
                 [[nodes]]\nname = \"y\"\nop = \"sub\"\nargs = [\"x\", \"m\"]\n"
            ),
        );
        let s = check(graph, 1e-5);
        assert_eq!(
            s.program.kernel_count(),
            kernels,
            "{shape:?} over {dims}:\n{}",
            kiln::schedule::print::program_text(&s, &[])
        );
    }
    // A softmax over the first dim: both reductions and the division share
    // the kernel too.
    let graph = one_input(
        &[12, 10],
        "float32",
        "[[nodes]]\nname = \"y\"\nop = \"softmax\"\nargs = [\"x\", 0]\n",
    );
    assert_eq!(check(graph, 1e-5).program.kernel_count(), 1);
}

/// The space of every kernel of a schedule, in order.
fn kernel_spaces(s: &kiln::schedule::Scheduled) -> Vec<kiln::schedule::ir::Space> {
    s.program
        .steps
        .iter()
        .filter_map(|s| match s {
            kiln::schedule::ir::Step::Kernel(k) => Some(k.space.clone()),
            _ => None,
        })
        .collect()
}

/// For every kernel with a reduction, in order: how many distinct buffers it
/// reads.
fn reduction_kernel_reads(s: &kiln::schedule::Scheduled) -> Vec<usize> {
    s.program
        .steps
        .iter()
        .filter_map(|s| match s {
            kiln::schedule::ir::Step::Kernel(k) if k.space.is_reduction() => Some(k.reads().len()),
            _ => None,
        })
        .collect()
}

/// Bytes every kernel of a schedule reads and writes, summed (extern calls left
/// out: they are the same whatever the realization rule decides).
fn kernel_traffic(s: &kiln::schedule::Scheduled) -> i64 {
    s.program
        .steps
        .iter()
        .filter(|s| matches!(s, kiln::schedule::ir::Step::Kernel(_)))
        .flat_map(|s| s.reads().into_iter().chain(s.writes()))
        .map(|b| s.program.buffer(b).bytes())
        .sum()
}

/// `layers` pre-norm residual blocks, `h = h + mm(layer_norm(h), w)`, and a
/// final norm: the residual stream of a transformer, each branch a matrix
/// product (a buffer) between two norms.
fn residual_stream(layers: usize, dtype: &str) -> Graph {
    let mut text = format!(
        "format = \"kiln-graph/1\"\nname = \"residual\"\noutputs = [\"y\"]\n\n\
         [[inputs]]\nname = \"h0\"\nshape = [6, 16]\ndtype = \"{dtype}\"\n\n\
         [[inputs]]\nname = \"g\"\nshape = [16]\ndtype = \"{dtype}\"\n\n\
         [[inputs]]\nname = \"b\"\nshape = [16]\ndtype = \"{dtype}\"\n\n",
    );
    for k in 1..=layers {
        text += &format!("[[inputs]]\nname = \"w{k}\"\nshape = [16, 16]\ndtype = \"{dtype}\"\n\n");
    }
    let norm = |text: &mut String, name: &str, of: &str| {
        *text += &format!(
            "[[nodes]]\nname = \"{name}_ln\"\nop = \"native_layer_norm\"\n\
             args = [\"{of}\", [16], \"g\", \"b\", 1e-5]\n\n\
             [[nodes]]\nname = \"{name}\"\nop = \"getitem\"\nargs = [\"{name}_ln\", 0]\n\n"
        );
    };
    for k in 1..=layers {
        let prev = format!("h{}", k - 1);
        norm(&mut text, &format!("n{k}"), &prev);
        text += &format!(
            "[[nodes]]\nname = \"m{k}\"\nop = \"mm\"\nargs = [\"n{k}\", \"w{k}\"]\n\n\
             [[nodes]]\nname = \"h{k}\"\nop = \"add\"\nargs = [\"{prev}\", \"m{k}\"]\n\n"
        );
    }
    norm(&mut text, "y", &format!("h{layers}"));
    kiln::graph::parse_toml(&text).expect("graph parses")
}

#[test]
fn a_norm_of_a_residual_stream_reads_a_bounded_number_of_buffers_at_any_depth() {
    // Left inline, the sum `h_k` makes the k-th norm's kernel re-read `h0` and
    // every earlier branch: its reads grow with k. Computed into memory once,
    // each norm kernel reads the previous sum, its branch and the norm's
    // weights, whatever the depth.
    for (dtype, tolerance) in [("float32", 1e-4), ("bfloat16", 5e-2)] {
        residual_stream_reads_are_bounded(dtype, tolerance);
    }
}

fn residual_stream_reads_are_bounded(dtype: &str, tolerance: f64) {
    let (mut worst, mut traffic) = (Vec::new(), Vec::new());
    for layers in [1, 2, 4, 8, 12] {
        let s = check(residual_stream(layers, dtype), tolerance);
        let reads = reduction_kernel_reads(&s);
        assert_eq!(reads.len(), layers + 1, "one kernel per norm:\n{reads:?}");
        worst.push(reads.iter().copied().max().unwrap_or(0));
        traffic.push(kernel_traffic(&s));
    }
    assert!(
        worst.iter().all(|&w| w <= 5),
        "{dtype}: a norm kernel reads at most the previous sum, its branch, the \
         norm's weight and bias: worst reads per depth {worst:?}"
    );
    // So the kernels' memory traffic grows linearly with depth: four more
    // layers cost no more from 8 to 12 than from 4 to 8.
    assert!(
        traffic[4] - traffic[3] <= traffic[3] - traffic[2],
        "{dtype}: kernel bytes at 1, 2, 4, 8, 12 layers: {traffic:?}"
    );
}

#[test]
fn the_zoo_transformers_norm_kernels_read_the_residual_stream_not_every_branch() {
    // The tiny GPT-2's fifth layer norm once re-read every earlier attention and
    // MLP branch (its kernel took 9 inputs, BERT's last 19); each norm's kernel
    // now reads the previous residual sum and one branch (the first one the
    // embeddings), and stores the new sum for the next.
    for (model, most) in [
        ("gpt2", 5),
        ("bert", 7),
        ("llama", 4),
        ("t5_encoder", 4),
        ("vit", 6),
    ] {
        let path = repo().join(format!("tests/fixtures/models/{model}.pt2"));
        let graph = kiln::graph::load(&path).expect("a zoo archive loads");
        let s = check(graph, 1e-4);
        let reads = reduction_kernel_reads(&s);
        assert!(
            reads.iter().all(|&r| r <= most),
            "{model}: every reduction kernel reads at most {most} buffers: {reads:?}\n{}",
            kiln::schedule::print::program_text(&s, &[])
        );
    }
}

#[test]
fn a_small_whole_power_is_products_and_keeps_its_value() {
    // Exponents that are whole numbers below 32 in magnitude become products by
    // repeated squaring (a negative one a reciprocal of them); others stay `pow`.
    for (exponent, products) in [
        ("3.0", true),
        ("2", true),
        ("-2.0", true),
        ("0.0", true),
        ("13.0", true),
        ("2.5", false),
        ("0.5", false),
        ("40.0", false),
    ] {
        let nodes = format!("[[nodes]]\nname = \"y\"\nop = \"pow\"\nargs = [\"x\", {exponent}]\n");
        let graph = one_input(&[4, 33], "float32", &nodes);
        let scheduled = check(graph, 1e-6);
        let text = kiln::schedule::print::program_text(&scheduled, &[]);
        assert_eq!(
            !text.contains("Pow("),
            products,
            "pow(x, {exponent}):\n{text}"
        );
    }
}

/// `linear(x, w, b)` in `dtype` on a `[2, 3, 8]` input, then `tail` (nodes reading
/// `h`); the graph's output is `out`.
fn linear_graph(dtype: &str, tail: &str, out: &str) -> Graph {
    let text = format!(
        "format = \"kiln-graph/1\"\nname = \"lin\"\noutputs = [\"{out}\"]\n\n\
         [[inputs]]\nname = \"x\"\nshape = [2, 3, 8]\ndtype = \"{dtype}\"\n\n\
         [[inputs]]\nname = \"w\"\nshape = [5, 8]\ndtype = \"{dtype}\"\n\n\
         [[inputs]]\nname = \"b\"\nshape = [5]\ndtype = \"{dtype}\"\n\n\
         [[nodes]]\nname = \"h\"\nop = \"linear\"\nargs = [\"x\", \"w\", \"b\"]\n\n{tail}"
    );
    kiln::graph::parse_toml(&text).expect("graph parses")
}

fn externs(s: &kiln::schedule::Scheduled) -> Vec<&'static str> {
    s.program
        .steps
        .iter()
        .filter_map(|s| match s {
            kiln::schedule::ir::Step::Extern(e) => Some(e.op.name()),
            _ => None,
        })
        .collect()
}

#[test]
fn a_product_s_bias_goes_into_its_call_only_where_its_sum_must_be_in_memory() {
    let relu = "[[nodes]]\nname = \"y\"\nop = \"relu\"\nargs = [\"h\"]\n";
    let bmm = "[[nodes]]\nname = \"y\"\nop = \"matmul\"\nargs = [\"h\", \"t\"]\n\n\
               [[nodes]]\nname = \"t\"\nop = \"transpose\"\nargs = [\"h\", 1, 2]\n";
    for (dtype, tail, out, bias_epilogue, want) in [
        // A graph output, a product's operand: the sum is stored anyway.
        ("bfloat16", "", "h", true, vec!["addmm"]),
        ("float16", bmm, "y", true, vec!["addmm", "bmm"]),
        // Read by a kernel: the kernel adds the bias.
        ("bfloat16", relu, "y", true, vec!["mm"]),
        // Float32 too (the wrapper chooses between the epilogue and an add at
        // run time), but not float64, nor without an epilogue.
        ("float32", "", "h", true, vec!["addmm"]),
        ("float32", relu, "y", true, vec!["mm"]),
        ("float64", "", "h", true, vec!["mm"]),
        ("bfloat16", "", "h", false, vec!["mm"]),
    ] {
        let graph = linear_graph(dtype, tail, out);
        let inputs = kiln::tensor_io::random_inputs(&input_metas(&graph), 5);
        let want_values = kiln::interp::evaluate(&graph, &inputs).expect("reference");
        let mut lowered = graph.clone();
        kiln::passes::run_pipeline(&mut lowered).expect("passes");
        let options = kiln::schedule::Options {
            bias_epilogue,
            ..Default::default()
        };
        let scheduled = kiln::schedule::schedule_with(&lowered, &options).expect("schedule");
        assert_eq!(externs(&scheduled), want, "{dtype} {out} {tail}");
        let got = kiln::schedule::eval::run(&scheduled, &inputs).expect("evaluation");
        assert!(rel_error(&got, &want_values) < 2e-2, "{dtype} {tail}");
    }
    // A one-row product added to itself is no bias: the call would read its own output.
    let mut g = kiln::graph::parse_toml(
        "format = \"kiln-graph/1\"\nname = \"self\"\noutputs = [\"y\"]\n\n\
         [[inputs]]\nname = \"x\"\nshape = [1, 8]\ndtype = \"bfloat16\"\n\n\
         [[inputs]]\nname = \"w\"\nshape = [8, 5]\ndtype = \"bfloat16\"\n\n\
         [[nodes]]\nname = \"p\"\nop = \"mm\"\nargs = [\"x\", \"w\"]\n\n\
         [[nodes]]\nname = \"y\"\nop = \"add\"\nargs = [\"p\", \"p\"]\n",
    )
    .expect("graph parses");
    kiln::passes::run_pipeline(&mut g).expect("passes");
    let options = kiln::schedule::Options {
        bias_epilogue: true,
        ..Default::default()
    };
    let scheduled = kiln::schedule::schedule_with(&g, &options).expect("schedule");
    assert_eq!(externs(&scheduled), vec!["mm"]);
    // A product read by something besides its bias add keeps its own buffer.
    let mut g = kiln::graph::parse_toml(
        "format = \"kiln-graph/1\"\nname = \"two\"\noutputs = [\"y\", \"p\"]\n\n\
         [[inputs]]\nname = \"x\"\nshape = [4, 8]\ndtype = \"bfloat16\"\n\n\
         [[inputs]]\nname = \"w\"\nshape = [8, 5]\ndtype = \"bfloat16\"\n\n\
         [[inputs]]\nname = \"b\"\nshape = [5]\ndtype = \"bfloat16\"\n\n\
         [[nodes]]\nname = \"p\"\nop = \"mm\"\nargs = [\"x\", \"w\"]\n\n\
         [[nodes]]\nname = \"y\"\nop = \"add\"\nargs = [\"p\", \"b\"]\n",
    )
    .expect("graph parses");
    let inputs = kiln::tensor_io::random_inputs(&input_metas(&g), 5);
    let want = kiln::interp::evaluate(&g, &inputs).expect("reference");
    kiln::passes::run_pipeline(&mut g).expect("passes");
    let options = kiln::schedule::Options {
        bias_epilogue: true,
        ..Default::default()
    };
    let scheduled = kiln::schedule::schedule_with(&g, &options).expect("schedule");
    assert_eq!(externs(&scheduled), vec!["mm"]);
    let got = kiln::schedule::eval::run(&scheduled, &inputs).expect("evaluation");
    assert!(rel_error(&got, &want) < 2e-2);
}

#[test]
fn a_bias_kernels_compute_is_computed_first_for_the_epilogue_unless_made_from_the_product_itself() {
    let graph = |bias: &str| {
        format!(
            "format = \"kiln-graph/1\"\nname = \"computed\"\noutputs = [\"y\"]\n\n\
             [[inputs]]\nname = \"x\"\nshape = [4, 8]\ndtype = \"float32\"\n\n\
             [[inputs]]\nname = \"w\"\nshape = [8, 5]\ndtype = \"float32\"\n\n\
             [[inputs]]\nname = \"b1\"\nshape = [2]\ndtype = \"float32\"\n\n\
             [[inputs]]\nname = \"b2\"\nshape = [3]\ndtype = \"float32\"\n\n\
             [[nodes]]\nname = \"p\"\nop = \"mm\"\nargs = [\"x\", \"w\"]\n\n{bias}\
             [[nodes]]\nname = \"y\"\nop = \"add\"\nargs = [\"p\", \"bias\"]\n"
        )
    };
    let options = kiln::schedule::Options {
        bias_epilogue: true,
        ..Default::default()
    };
    // Two layers' biases side by side (merge_mm's of biases given as inputs): the
    // concatenation is computed into memory and the add is the product's epilogue.
    // A bias summed over the product's own rows cannot be (the product is read twice):
    // it stays a plain product.
    for (bias, want_externs) in [
        (
            "[[nodes]]\nname = \"bias\"\nop = \"cat\"\nargs = [[\"b1\", \"b2\"]]\nattrs = { dim = 0 }\n\n",
            vec!["addmm"],
        ),
        (
            "[[nodes]]\nname = \"bias\"\nop = \"sum\"\nargs = [\"p\"]\nattrs = { dim = [0] }\n\n",
            vec!["mm"],
        ),
    ] {
        let mut g = kiln::graph::parse_toml(&graph(bias)).expect("graph parses");
        let inputs = kiln::tensor_io::random_inputs(&input_metas(&g), 5);
        let want = kiln::interp::evaluate(&g, &inputs).expect("reference");
        kiln::passes::run_pipeline(&mut g).expect("passes");
        let scheduled = kiln::schedule::schedule_with(&g, &options).expect("schedule");
        assert_eq!(externs(&scheduled), want_externs);
        let got = kiln::schedule::eval::run(&scheduled, &inputs).expect("evaluation");
        assert!(rel_error(&got, &want) < 1e-5);
    }
}

/// Two results of a graph that read nothing of each other: `exp` of an input of
/// `a` elements and `neg` of one of `b`, and where `sum` is set, also the sum of the
/// second input (a reduction, whose kernel follows theirs).
fn side_by_side(a: &[i64], b: &[i64], sum: bool) -> Graph {
    let extra = if sum {
        "\n[[nodes]]\nname = \"z\"\nop = \"sum\"\nargs = [\"y\", [0]]\n"
    } else {
        ""
    };
    let outputs = if sum {
        "[\"p\", \"q\", \"z\"]"
    } else {
        "[\"p\", \"q\"]"
    };
    let text = format!(
        "format = \"kiln-graph/1\"\nname = \"g\"\noutputs = {outputs}\n\n\
         [[inputs]]\nname = \"x\"\nshape = {a:?}\ndtype = \"float32\"\n\n\
         [[inputs]]\nname = \"y\"\nshape = {b:?}\ndtype = \"float32\"\n\n\
         [[nodes]]\nname = \"p\"\nop = \"exp\"\nargs = [\"x\"]\n\n\
         [[nodes]]\nname = \"q\"\nop = \"neg\"\nargs = [\"y\"]\n{extra}"
    );
    kiln::graph::parse_toml(&text).expect("graph")
}

#[test]
fn small_pointwise_kernels_that_read_nothing_of_each_other_run_as_one() {
    let side = kiln::schedule::Options {
        horizontal: true,
        ..Default::default()
    };
    let kernels = |graph: &Graph, options: &kiln::schedule::Options| {
        let mut g = graph.clone();
        kiln::passes::run_pipeline(&mut g).expect("passes");
        let s = kiln::schedule::schedule_with(&g, options).expect("schedule");
        s.program
            .steps
            .iter()
            .filter_map(|s| match s {
                kiln::schedule::ir::Step::Kernel(k) => Some(k.clone()),
                _ => None,
            })
            .collect::<Vec<_>>()
    };
    let guarded = |k: &kiln::schedule::Kernel| {
        k.stores
            .iter()
            .map(|s| {
                s.guards
                    .iter()
                    .map(|g| (g.lo.hint(), g.hi.hint()))
                    .collect::<Vec<_>>()
            })
            .collect::<Vec<_>>()
    };
    // Spaces of 256 and 1024 elements, either first: one kernel over 1024, the
    // smaller part's loads and stores guarded to its 256; its values match.
    for (a, b) in [
        (vec![4i64, 64], vec![16i64, 64]),
        (vec![16, 64], vec![4, 64]),
    ] {
        let graph = side_by_side(&a, &b, false);
        assert_eq!(kernels(&graph, &Default::default()).len(), 2);
        let merged = kernels(&graph, &side);
        assert_eq!(merged.len(), 1, "{a:?} {b:?}");
        assert_eq!(merged[0].space, kiln::schedule::ir::Space::rows(1024, 1));
        let want = if a[0] < b[0] {
            vec![vec![(0, 256)], vec![]]
        } else {
            vec![vec![], vec![(0, 256)]]
        };
        assert_eq!(guarded(&merged[0]), want);
        check(graph, 1e-6);
    }
    // Over one space: no guards.
    let merged = kernels(&side_by_side(&[8, 8], &[64], false), &side);
    assert_eq!(merged.len(), 1);
    assert_eq!(guarded(&merged[0]), vec![vec![], vec![]]);
    // A reduction after them keeps its own kernel.
    let graph = side_by_side(&[4, 64], &[16, 64], true);
    let ks = kernels(&graph, &side);
    assert_eq!(
        ks.len(),
        2,
        "{:?}",
        ks.iter().map(|k| k.space.clone()).collect::<Vec<_>>()
    );
    assert!(ks.iter().any(|k| k.is_reduction()));
    check(graph, 1e-6);
    // A small kernel after a reduction that it shares nothing with joins the one
    // before the reduction, moving over it.
    let text = "format = \"kiln-graph/1\"\nname = \"g\"\noutputs = [\"p\", \"z\", \"q\"]\n\n\
        [[inputs]]\nname = \"x\"\nshape = [4, 64]\ndtype = \"float32\"\n\n\
        [[inputs]]\nname = \"w\"\nshape = [64, 64]\ndtype = \"float32\"\n\n\
        [[inputs]]\nname = \"y\"\nshape = [16, 64]\ndtype = \"float32\"\n\n\
        [[nodes]]\nname = \"p\"\nop = \"exp\"\nargs = [\"x\"]\n\n\
        [[nodes]]\nname = \"z\"\nop = \"amax\"\nargs = [\"w\", [1]]\n\n\
        [[nodes]]\nname = \"q\"\nop = \"neg\"\nargs = [\"y\"]\n";
    let graph = kiln::graph::parse_toml(text).expect("graph");
    assert_eq!(kernels(&graph, &Default::default()).len(), 3);
    let ks = kernels(&graph, &side);
    assert_eq!(
        ks.len(),
        2,
        "{:?}",
        ks.iter().map(|k| k.space.clone()).collect::<Vec<_>>()
    );
    assert_eq!(ks.iter().filter(|k| k.is_reduction()).count(), 1);
    check(graph, 1e-6);
    // Kernels that move more than a few hundred kilobytes each stay apart:
    // merged, their launch would no longer be most of their time.
    let big = side_by_side(&[256, 1024], &[1024, 1024], false);
    assert_eq!(kernels(&big, &side).len(), 2);
}

/// A graph with state: `counter` (int64 `[1]`, its input 1 and output 1) becomes
/// `counter + 1`; `scale` (float32 `[4]`, input 2 and output 2) becomes `x * 2`,
/// and output 0 (`y = reader`) reads the old `scale`.
fn stateful(reader: &str) -> Graph {
    let text =
        "format = \"kiln-graph/1\"\nname = \"g\"\noutputs = [\"y\", \"next\", \"new_scale\"]\n\n\
        [[inputs]]\nname = \"x\"\nshape = [4]\ndtype = \"float32\"\n\n\
        [[inputs]]\nname = \"counter\"\nshape = [1]\ndtype = \"int64\"\n\n\
        [[inputs]]\nname = \"scale\"\nshape = [4]\ndtype = \"float32\"\n\n\
        [[nodes]]\nname = \"next\"\nop = \"add\"\nargs = [\"counter\", 1]\n\n\
        [[nodes]]\nname = \"new_scale\"\nop = \"mul\"\nargs = [\"x\", 2.0]\n\n\
        [[nodes]]\nname = \"y\"\n{reader}\n";
    let mut g = kiln::graph::parse_toml(&text.replace("{reader}", reader)).expect("graph");
    let state = |name: &str, at: usize, init: f64| kiln::graph::ir::State {
        name: name.into(),
        input: at,
        output: at,
        init: kiln::graph::ops::ConstData::Fill(init),
    };
    g.set_state(vec![state("counter", 1, 3.0), state("scale", 2, 0.5)]);
    g
}

#[test]
fn a_kernel_stores_a_state_s_new_value_into_the_state_where_no_later_step_reads_it() {
    let graph = stateful("op = \"add\"\nargs = [\"x\", \"scale\"]");
    let scheduled = check(graph.clone(), 1e-6);
    let p = &scheduled.program;
    // The counter's kernel reads it and stores over it, element by element.
    assert_eq!(p.outputs[1].buf, p.inputs[1], "{:?}", p.outputs);
    // The new scale comes from a kernel that also reads the old scale (for `y`),
    // at the places it stores: stored in place too.
    assert_eq!(p.outputs[2].buf, p.inputs[2], "{:?}", p.outputs);
    // Without a wrapper that lets kernels write state, state comes back in buffers.
    let mut g = graph.clone();
    kiln::passes::run_pipeline(&mut g).expect("passes");
    let plain = kiln::schedule::schedule_with(&g, &Default::default()).expect("schedule");
    let p = &plain.program;
    assert_ne!(p.outputs[1].buf, p.inputs[1]);
    assert_ne!(p.outputs[2].buf, p.inputs[2]);
    // Read after the new scale's kernel (by a product with it), the old scale stays
    // in its input until the step that reads it.
    let after = "op = \"matmul\"\nargs = [\"a\", \"b\"]\n\n\
        [[nodes]]\nname = \"a\"\nop = \"reshape\"\nargs = [\"new_scale\", [2, 2]]\n\n\
        [[nodes]]\nname = \"b\"\nop = \"reshape\"\nargs = [\"scale\", [2, 2]]";
    let scheduled = check(stateful(after), 1e-6);
    let p = &scheduled.program;
    assert_ne!(p.outputs[2].buf, p.inputs[2], "{:?}", p.outputs);
}
