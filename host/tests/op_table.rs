//! Both front ends accept the same language: for every op name of the op table, one
//! small graph is written as a `kiln-graph/1` TOML file and as a `.pt2` archive (a zip
//! holding `archive/models/model.json` in the export schema), both are imported, and
//! the two graphs must be the same op for op.
//!
//! The cases are one table ([`CASES`]); an op of the table without a case fails the
//! test, so that a new op cannot be forgotten.

use kiln::graph::front::pt2::{read_pt2, Pt2Options};
use kiln::graph::front::table;
use kiln::graph::ir::{Arg, Graph, NodeId, TensorMeta, ValueId};
use kiln::graph::ops::Op;
use kiln::graph::DType;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::io::Write;

/// One op's example: its inputs (`name:dtype[shape]`, space-separated), its
/// arguments (the body of a TOML inline table; a string naming an input is a tensor)
/// and how many outputs it has.
#[derive(Clone, Copy)]
struct Case {
    op: &'static str,
    inputs: &'static str,
    attrs: &'static str,
    outputs: usize,
}

const fn c(op: &'static str, inputs: &'static str, attrs: &'static str) -> Case {
    Case {
        op,
        inputs,
        attrs,
        outputs: 1,
    }
}

const fn m(op: &'static str, outputs: usize, inputs: &'static str, attrs: &'static str) -> Case {
    Case {
        op,
        inputs,
        attrs,
        outputs,
    }
}

const X: &str = "x:f32[2,3]";
const XY: &str = "x:f32[2,3] y:f32[2,3]";
const AB: &str = "a:i64[2,3] b:i64[2,3]";
const SELF: &str = "self = 'x'";
const SELF_OTHER: &str = "self = 'x', other = 'y'";
const IMAGE: &str = "x:f32[1,2,4,4]";

/// The unary functions: `self = x` of a float32 `[2, 3]` each.
const UNARY: &[&str] = &[
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

/// Every other op of the table.
const CASES: &[Case] = &[
    // Elementwise.
    c("add", XY, "self = 'x', other = 'y', alpha = 2"),
    c("sub", XY, "self = 'x', other = 1.5"),
    c("mul", XY, SELF_OTHER),
    c("pow", XY, "self = 'x', other = 2"),
    c("maximum", XY, SELF_OTHER),
    c("minimum", XY, SELF_OTHER),
    c("eq", XY, SELF_OTHER),
    c("ne", XY, SELF_OTHER),
    c("lt", XY, SELF_OTHER),
    c("le", XY, SELF_OTHER),
    c("gt", XY, SELF_OTHER),
    c("ge", XY, SELF_OTHER),
    c("div", XY, "self = 'x', other = 'y', rounding_mode = 'floor'"),
    c("fmod", XY, SELF_OTHER),
    c("atan2", XY, SELF_OTHER),
    c("hypot", XY, SELF_OTHER),
    c("copysign", XY, SELF_OTHER),
    c("arctan2", XY, SELF_OTHER),
    c("remainder", XY, SELF_OTHER),
    c("bitwise_and", AB, "self = 'a', other = 'b'"),
    c("bitwise_or", AB, "self = 'a', other = 'b'"),
    c("bitwise_xor", AB, "self = 'a', other = 'b'"),
    c("gelu", X, "self = 'x', approximate = 'tanh'"),
    c(
        "where",
        "c:bool[2,3] x:f32[2,3] y:f32[2,3]",
        "condition = 'c', self = 'x', other = 'y'",
    ),
    c("clamp", X, "self = 'x', min = -1.0, max = 1.0"),
    c("clamp", XY, "self = 'x', min = 'y'"),
    c("hardtanh", X, "self = 'x', min_val = -0.5, max_val = 0.5"),
    c("relu6", X, SELF),
    c("logical_not", X, SELF),
    c("to", X, "self = 'x', dtype = 'float16'"),
    c("_to_copy", X, "self = 'x', dtype = 'int64'"),
    c("masked_fill", "x:f32[2,3] c:bool[2,3]", "self = 'x', mask = 'c', value = 0.5"),
    c("type_as", "x:f32[2,3] y:f16[2,3]", SELF_OTHER),
    c("copy", XY, "self = 'x', src = 'y'"),
    c("fill", X, "self = 'x', value = 2.0"),
    // Reductions and normalizations.
    c("sum", X, "self = 'x', dim = [1], keepdim = true"),
    c("mean", X, "self = 'x', dim = [0]"),
    c("amax", X, "self = 'x', dim = [1]"),
    c("amin", X, "self = 'x', dim = [1]"),
    c("any", "b:bool[2,3]", "self = 'b', dim = [1]"),
    c("all", "b:bool[2,3]", "self = 'b', dim = [1]"),
    c("min", X, SELF),
    m("max", 2, X, "self = 'x', dim = 1"),
    c("var", X, "self = 'x', dim = [1], correction = 0"),
    c("softmax", X, "self = 'x', dim = 1"),
    c("log_softmax", X, "self = 'x', dim = 1"),
    c("_softmax", X, "self = 'x', dim = 1, half_to_float = false"),
    c("_log_softmax", X, "self = 'x', dim = 1, half_to_float = false"),
    c("cumsum", X, "self = 'x', dim = 1"),
    c("diff", X, "self = 'x', n = 1, dim = 1"),
    c(
        "layer_norm",
        "x:f32[2,3] w:f32[3] b:f32[3]",
        "input = 'x', normalized_shape = [3], weight = 'w', bias = 'b', eps = 1e-5",
    ),
    m(
        "native_layer_norm",
        3,
        "x:f32[2,3] w:f32[3] b:f32[3]",
        "input = 'x', normalized_shape = [3], weight = 'w', bias = 'b', eps = 1e-5",
    ),
    c(
        "rms_norm",
        "x:f32[2,3] w:f32[3]",
        "input = 'x', normalized_shape = [3], weight = 'w', eps = 1e-6",
    ),
    c(
        "group_norm",
        "x:f32[2,4,3] w:f32[4] b:f32[4]",
        "input = 'x', num_groups = 2, weight = 'w', bias = 'b'",
    ),
    m(
        "native_group_norm",
        3,
        "x:f32[2,4,3] w:f32[4] b:f32[4]",
        "input = 'x', weight = 'w', bias = 'b', N = 2, C = 4, HxW = 3, group = 2, eps = 1e-5",
    ),
    c(
        "batch_norm",
        "x:f32[2,3,4] w:f32[3] b:f32[3] m:f32[3] v:f32[3]",
        "input = 'x', weight = 'w', bias = 'b', running_mean = 'm', running_var = 'v', training = false, momentum = 0.1, eps = 1e-5",
    ),
    m(
        "_native_batch_norm_legit_no_training",
        3,
        "x:f32[2,3,4] w:f32[3] b:f32[3] m:f32[3] v:f32[3]",
        "input = 'x', weight = 'w', bias = 'b', running_mean = 'm', running_var = 'v', momentum = 0.1, eps = 1e-5",
    ),
    // Products and layers.
    c(
        "linear",
        "x:f32[2,3] w:f32[4,3] b:f32[4]",
        "input = 'x', weight = 'w', bias = 'b'",
    ),
    c(
        "addmm",
        "c:f32[2,4] x:f32[2,3] w:f32[3,4]",
        "self = 'c', mat1 = 'x', mat2 = 'w', beta = 0.5, alpha = 2",
    ),
    c(
        "baddbmm",
        "c:f32[2,2,4] x:f32[2,2,3] w:f32[2,3,4]",
        "self = 'c', batch1 = 'x', batch2 = 'w'",
    ),
    c("mm", "x:f32[2,3] w:f32[3,4]", "self = 'x', mat2 = 'w'"),
    c("bmm", "x:f32[2,2,3] w:f32[2,3,4]", "self = 'x', mat2 = 'w'"),
    c("matmul", "x:f32[2,3] w:f32[3,4]", "self = 'x', other = 'w'"),
    c(
        "scaled_dot_product_attention",
        "q:f32[1,2,4,8] k:f32[1,2,4,8] v:f32[1,2,4,8]",
        "query = 'q', key = 'k', value = 'v', is_causal = true",
    ),
    c(
        "convolution",
        "x:f32[1,2,5,5] w:f32[3,2,3,3]",
        "input = 'x', weight = 'w', stride = [1], padding = [1], dilation = [1], transposed = false, output_padding = [0], groups = 1",
    ),
    c("conv1d", "x:f32[1,2,6] w:f32[3,2,3]", "input = 'x', weight = 'w'"),
    c(
        "conv1d",
        "x:f32[1,2,6] w:f32[3,2,4]",
        "input = 'x', weight = 'w', padding = 'same', dilation = [2]",
    ),
    c(
        "conv2d",
        "x:f32[1,2,5,5] w:f32[3,2,3,3] b:f32[3]",
        "input = 'x', weight = 'w', bias = 'b', padding = [1]",
    ),
    c(
        "conv3d",
        "x:f32[1,2,4,4,4] w:f32[3,2,3,3,3]",
        "input = 'x', weight = 'w'",
    ),
    c(
        "conv_transpose1d",
        "x:f32[1,2,6] w:f32[2,3,3]",
        "input = 'x', weight = 'w', stride = [2]",
    ),
    c(
        "conv_transpose2d",
        "x:f32[1,2,5,5] w:f32[2,3,3,3] b:f32[3]",
        "input = 'x', weight = 'w', bias = 'b', stride = [2], padding = [1], output_padding = [1]",
    ),
    c(
        "conv_transpose3d",
        "x:f32[1,2,3,3,3] w:f32[2,1,2,2,2]",
        "input = 'x', weight = 'w', groups = 2",
    ),
    c("max_pool2d", IMAGE, "self = 'x', kernel_size = [2, 2]"),
    m("max_pool2d_with_indices", 2, IMAGE, "self = 'x', kernel_size = [2]"),
    c("avg_pool1d", "x:f32[1,2,6]", "self = 'x', kernel_size = [2]"),
    c("avg_pool2d", IMAGE, "self = 'x', kernel_size = [2, 2]"),
    c("adaptive_avg_pool1d", "x:f32[1,2,6]", "self = 'x', output_size = [3]"),
    c("adaptive_avg_pool2d", IMAGE, "self = 'x', output_size = [2, 2]"),
    c("_adaptive_avg_pool2d", IMAGE, "self = 'x', output_size = [2, 2]"),
    c("adaptive_avg_pool3d", "x:f32[1,2,4,4,4]", "self = 'x', output_size = [2]"),
    c("_adaptive_avg_pool3d", "x:f32[1,2,4,4,4]", "self = 'x', output_size = [2, 2, 2]"),
    c("constant_pad_nd", X, "self = 'x', pad = [1, 1], value = 0.5"),
    c("pad", "x:f32[1,2,4]", "self = 'x', pad = [1, 1], mode = 'reflect'"),
    c("dropout", X, "input = 'x', p = 0.5, train = false"),
    // Views and shapes.
    c("reshape", X, "self = 'x', shape = [3, 2]"),
    c("view", X, "self = 'x', size = [6]"),
    c("permute", X, "self = 'x', dims = [1, 0]"),
    c("transpose", X, "self = 'x', dim0 = 0, dim1 = 1"),
    c("unsqueeze", X, "self = 'x', dim = 1"),
    c("squeeze", "x:f32[2,1,3]", "self = 'x', dim = [1]"),
    c("expand", "x:f32[1,3]", "self = 'x', size = [2, 3]"),
    c("select", X, "self = 'x', dim = 1, index = 2"),
    c("slice", X, "self = 'x', dim = 1, start = 0, end = 2, step = 1"),
    m("split", 2, "x:f32[4,3]", "self = 'x', split_size = 2"),
    m("split_with_sizes", 2, "x:f32[4,3]", "self = 'x', split_sizes = [1, 3]"),
    c("flatten", "x:f32[2,3,4]", "self = 'x', start_dim = 1"),
    c("as_strided", X, "self = 'x', size = [3, 2], stride = [2, 1]"),
    c("contiguous", X, SELF),
    c("clone", X, SELF),
    c("alias", X, SELF),
    c("detach", X, SELF),
    c("lift_fresh_copy", X, SELF),
    c("_assert_tensor_metadata", X, "a = 'x', dtype = 'float32'"),
    c("cat", XY, "tensors = ['x', 'y'], dim = 0"),
    c("concat", XY, "tensors = ['x', 'y'], dim = 0"),
    c("concatenate", XY, "tensors = ['x', 'y'], dim = 1"),
    c("repeat", X, "self = 'x', repeats = [2, 1]"),
    c("roll", X, "self = 'x', shifts = [1], dims = [1]"),
    // Gathers and scatters.
    c("embedding", "w:f32[5,3] i:i64[4]", "weight = 'w', indices = 'i'"),
    c("index", "x:f32[4,3] i:i64[2]", "self = 'x', indices = [[], 'i']"),
    c("gather", "x:f32[2,3] i:i64[2,2]", "self = 'x', dim = 1, index = 'i'"),
    c(
        "slice_scatter",
        "x:f32[2,4] y:f32[2,2]",
        "self = 'x', src = 'y', dim = 1, start = 0, end = 2",
    ),
    c(
        "select_scatter",
        "x:f32[2,3] y:f32[3]",
        "self = 'x', src = 'y', dim = 0, index = 1",
    ),
    // Tensors from sizes.
    c("arange", "", "start = 0, end = 6, step = 2"),
    c("full", "", "size = [2, 3], fill_value = 1.5"),
    c("zeros", "", "size = [2, 3]"),
    c("ones", "", "size = [2], dtype = 'int64'"),
    c("scalar_tensor", "", "s = 2.5"),
    c("full_like", X, "self = 'x', fill_value = 3"),
    c("zeros_like", X, SELF),
    c("ones_like", X, SELF),
    c("new_full", X, "self = 'x', size = [2], fill_value = 1"),
    c("new_ones", X, "self = 'x', size = [3]"),
    c("new_zeros", X, "self = 'x', size = [3]"),
    // Rewrites.
    c("numpy_T", X, SELF),
    c("t", X, SELF),
    c("unflatten", "x:f32[2,6]", "self = 'x', dim = 1, sizes = [2, -1]"),
    m("chunk", 2, "x:f32[4,3]", "self = 'x', chunks = 2"),
    c("bitwise_not", "a:i64[2,3]", "self = 'a'"),
    c("index_select", "x:f32[4,3] i:i64[2]", "self = 'x', dim = 0, index = 'i'"),
    c("empty", "", "size = [2, 3]"),
    c("empty_like", X, SELF),
    c("new_empty", X, "self = 'x', size = [2]"),
    c("_unsafe_view", X, "self = 'x', size = [3, 2]"),
    c("view_as", "x:f32[2,3] y:f32[3,2]", SELF_OTHER),
    c("reshape_as", "x:f32[2,3] y:f32[6]", SELF_OTHER),
    c("expand_as", "x:f32[1,3] y:f32[2,3]", SELF_OTHER),
    c("clamp_min", X, "self = 'x', min = 0.0"),
    c("clamp_max", XY, "self = 'x', max = 'y'"),
    c("rsub", XY, "self = 'x', other = 'y', alpha = 2"),
    c("floor_divide", XY, SELF_OTHER),
    c("square", X, SELF),
    c("swapaxes", X, "self = 'x', axis0 = 0, axis1 = 1"),
    c("swapdims", X, "self = 'x', dim0 = 1, dim1 = 0"),
    c("movedim", "x:f32[2,3,4]", "self = 'x', source = [0], destination = [2]"),
    c("moveaxis", "x:f32[2,3,4]", "self = 'x', source = 0, destination = -1"),
    c("zero", X, SELF),
    c("feature_dropout", X, "input = 'x', p = 0.5, train = false"),
    c("alpha_dropout", X, "input = 'x', p = 0.5, train = false"),
    c("feature_alpha_dropout", X, "input = 'x', p = 0.5, train = false"),
    c("__and__", AB, "self = 'a', other = 'b'"),
    c("__or__", AB, "self = 'a', other = 'b'"),
    c("__xor__", AB, "self = 'a', other = 'b'"),
    c("multiply", XY, SELF_OTHER),
    c("subtract", XY, "self = 'x', other = 'y', alpha = 3"),
    c("divide", XY, "self = 'x', other = 'y', rounding_mode = 'trunc'"),
    c("true_divide", XY, SELF_OTHER),
    c("greater", XY, SELF_OTHER),
    c("greater_equal", XY, SELF_OTHER),
    c("less", XY, SELF_OTHER),
    c("less_equal", XY, SELF_OTHER),
    c("not_equal", XY, SELF_OTHER),
    c("negative", X, SELF),
    c("absolute", X, SELF),
    c("clip", X, "self = 'x', min = 0.0, max = 1.0"),
    // Expansions.
    c("stack", XY, "tensors = ['x', 'y'], dim = 1"),
    c("repeat_interleave", X, "self = 'x', repeats = 2, dim = 1"),
    c("linalg_vector_norm", X, "self = 'x', ord = 2, dim = [1]"),
    c("norm", X, "self = 'x', p = 1"),
    c("_weight_norm", "v:f32[4,3] g:f32[4,1]", "v = 'v', g = 'g', dim = 0"),
    c("softplus", X, "self = 'x', beta = 2, threshold = 10"),
    c("eye", "", "n = 3, m = 4"),
    c(
        "einsum",
        "x:f32[2,3] w:f32[3,4]",
        "equation = 'ij,jk->ik', tensors = ['x', 'w']",
    ),
    c(
        "im2col",
        IMAGE,
        "self = 'x', kernel_size = [2, 2], dilation = [1, 1], padding = [1, 1], stride = [2, 2]",
    ),
    c(
        "col2im",
        "x:f32[1,8,9]",
        "self = 'x', output_size = [4, 4], kernel_size = [2, 2], dilation = [1, 1], padding = [0, 0], stride = [1, 1]",
    ),
    c("upsample_nearest1d", "x:f32[1,2,3]", "self = 'x', output_size = [6]"),
    c("upsample_nearest2d", "x:f32[1,2,3,3]", "self = 'x', output_size = [6, 5]"),
    c("upsample_nearest3d", "x:f32[1,1,2,2,2]", "self = 'x', output_size = [4, 3, 4]"),
    c("_upsample_nearest_exact1d", "x:f32[1,2,3]", "self = 'x', output_size = [5]"),
    c("_upsample_nearest_exact2d", "x:f32[1,2,3,3]", "self = 'x', output_size = [6, 6]"),
    c(
        "_upsample_nearest_exact3d",
        "x:f32[1,1,2,2,2]",
        "self = 'x', output_size = [3, 3, 3]",
    ),
    c(
        "upsample_linear1d",
        "x:f32[1,2,3]",
        "self = 'x', output_size = [6], align_corners = false",
    ),
    c(
        "upsample_bilinear2d",
        "x:f32[1,2,3,3]",
        "self = 'x', output_size = [5, 5], align_corners = true",
    ),
    c(
        "upsample_trilinear3d",
        "x:f32[1,1,2,2,2]",
        "self = 'x', output_size = [3, 3, 3], align_corners = false",
    ),
    c(
        "upsample_bicubic2d",
        "x:f32[1,2,3,3]",
        "self = 'x', output_size = [5, 5], align_corners = false",
    ),
    c("triu", X, "self = 'x', diagonal = 1"),
    c("tril", X, "self = 'x', diagonal = -1"),
    c("argmax", X, "self = 'x', dim = 1"),
    c("argmin", X, SELF),
    c("logsumexp", X, "self = 'x', dim = [1]"),
    c("flip", X, "self = 'x', dims = [0, 1]"),
    c("leaky_relu", X, "self = 'x', negative_slope = 0.2"),
    c("elu", X, "self = 'x', alpha = 1.5"),
    c("celu", X, "self = 'x', alpha = 2.0"),
    c("selu", X, SELF),
    c("mish", X, SELF),
    c("glu", "x:f32[2,4]", "self = 'x', dim = 1"),
    c("prelu", "x:f32[2,3,4] w:f32[3]", "self = 'x', weight = 'w'"),
    c("_prelu_kernel", "x:f32[2,3,4] w:f32[3]", "self = 'x', weight = 'w'"),
    c("log_sigmoid", X, SELF),
    m("log_sigmoid_forward", 2, X, SELF),
    c("softsign", X, SELF),
    c("hardshrink", X, "self = 'x', lambd = 0.5"),
    c("logical_and", XY, SELF_OTHER),
    c("logical_or", XY, SELF_OTHER),
    c("logical_xor", XY, SELF_OTHER),
    c("isnan", X, SELF),
    c("isinf", X, SELF),
    c("nan_to_num", X, "self = 'x', nan = 0.0"),
    c("std", X, "self = 'x', dim = [1]"),
    m("var_mean", 2, X, "self = 'x', dim = [1]"),
    m("std_mean", 2, X, "self = 'x', dim = [1], correction = 0"),
    c(
        "addcmul",
        "c:f32[2,3] x:f32[2,3] y:f32[2,3]",
        "self = 'c', tensor1 = 'x', tensor2 = 'y', value = 0.5",
    ),
    c(
        "addcdiv",
        "c:f32[2,3] x:f32[2,3] y:f32[2,3]",
        "self = 'c', tensor1 = 'x', tensor2 = 'y'",
    ),
    c("lerp", XY, "self = 'x', end = 'y', weight = 0.5"),
    c("one_hot", "i:i64[3]", "self = 'i', num_classes = 4"),
    c("tile", X, "self = 'x', dims = [2]"),
    c("exp2", X, SELF),
    c("pixel_shuffle", "x:f32[1,4,2,2]", "self = 'x', upscale_factor = 2"),
    c("pixel_unshuffle", "x:f32[1,1,4,4]", "self = 'x', downscale_factor = 2"),
    c("unfold", "x:f32[2,6]", "self = 'x', dimension = 1, size = 2, step = 2"),
    c("max_pool1d", "x:f32[1,2,6]", "self = 'x', kernel_size = [2]"),
    c(
        "max_pool3d",
        "x:f32[1,2,4,5,6]",
        "self = 'x', kernel_size = [3, 2, 3], stride = [2, 1, 2], padding = [1, 0, 1], ceil_mode = true",
    ),
    c(
        "index_put",
        "x:f32[4,3] i:i64[2] v:f32[2,3]",
        "self = 'x', indices = ['i'], values = 'v', accumulate = true",
    ),
    c(
        "index_copy",
        "x:f32[4,3] i:i64[2] v:f32[2,3]",
        "self = 'x', dim = 0, index = 'i', source = 'v'",
    ),
    m("unbind", 3, X, "self = 'x', dim = 1"),
    m(
        "meshgrid",
        2,
        "a:f32[3] b:f32[4]",
        "tensors = ['a', 'b'], indexing = 'xy'",
    ),
    c("outer", "a:f32[3] b:f32[4]", "self = 'a', vec2 = 'b'"),
    m("sort", 2, X, "self = 'x', dim = 1, descending = true"),
    c(
        "scatter",
        "x:f32[2,3] i:i64[2,3] y:f32[2,3]",
        "self = 'x', dim = 1, index = 'i', src = 'y'",
    ),
    c(
        "scatter_add",
        "x:f32[2,3] i:i64[2,3] y:f32[2,3]",
        "self = 'x', dim = 1, index = 'i', src = 'y'",
    ),
    c(
        "index_add",
        "x:f32[4,3] i:i64[2] v:f32[2,3]",
        "self = 'x', dim = 0, index = 'i', source = 'v', alpha = 2.0",
    ),
    c("argsort", X, "self = 'x', dim = 1"),
    c("sort_runs", X, "self = 'x', descending = true, run = 2"),
    c(
        "merge_runs",
        "x:f32[2,3] r:i64[2,3]",
        "self = 'x', runs = 'r', run = 2",
    ),
    m("topk", 2, X, "self = 'x', k = 2, dim = 1"),
    c("isfinite", X, SELF),
    c("logaddexp", XY, SELF_OTHER),
    c("xlogy", XY, SELF_OTHER),
    c("fmin", XY, SELF_OTHER),
    c("fmax", XY, SELF_OTHER),
    c("threshold", X, "self = 'x', threshold = 0.5, value = 2.0"),
    c("heaviside", XY, "self = 'x', values = 'y'"),
    c("frac", X, SELF),
    c("sgn", X, SELF),
    c("logit", X, "self = 'x', eps = 1e-3"),
    c("signbit", X, SELF),
    c("nanmean", X, "self = 'x', dim = [1]"),
    c("bucketize", "x:f32[2,3] b:f32[4]", "self = 'x', boundaries = 'b'"),
    c(
        "searchsorted",
        "b:f32[4] x:f32[2,3]",
        "sorted_sequence = 'b', self = 'x', side = 'right'",
    ),
    m("tensor_split", 3, "x:f32[2,7]", "self = 'x', sections = 3, dim = 1"),
    c("narrow", X, "self = 'x', dim = 1, start = 1, length = 2"),
    c(
        "instance_norm",
        "x:f32[2,3,4] w:f32[3] b:f32[3]",
        "input = 'x', weight = 'w', bias = 'b', use_input_stats = true, eps = 1e-5",
    ),
    c("_safe_softmax", X, "self = 'x', dim = 1"),
    c("histc", X, "self = 'x', bins = 4, min = -1.0, max = 1.0"),
    c(
        "_grouped_mm",
        "a:f32[4,3] b:f32[2,3,5] o:i32[2]",
        "self = 'a', mat2 = 'b', offs = 'o'",
    ),
    c(
        "grouped_mm_fallback",
        "a:f32[4,3] b:f32[2,3,5] o:i32[2]",
        "input = 'a', weight = 'b', offs = 'o'",
    ),
];

/// The cases of every op name: `getitem` is exercised by every case of several
/// outputs (the TOML file reads each through `getitem`; the archive lists them).
fn cases() -> Vec<Case> {
    let mut all: Vec<Case> = UNARY.iter().map(|op| c(op, X, SELF)).collect();
    all.extend(CASES.iter().copied());
    all
}

/// An input of a case: name, dtype, shape.
fn inputs(case: &Case) -> Vec<(&'static str, DType, Vec<i64>)> {
    case.inputs
        .split_whitespace()
        .map(|spec| {
            let (name, ty) = spec.split_once(':').expect("name:type");
            let (dtype, shape) = ty.split_once('[').expect("dtype[shape]");
            let dtype = match dtype {
                "f32" => DType::Float32,
                "f16" => DType::Float16,
                "i64" => DType::Int64,
                "i32" => DType::Int32,
                "bool" => DType::Bool,
                other => panic!("dtype {other} in the cases"),
            };
            let shape = shape
                .trim_end_matches(']')
                .split(',')
                .filter(|d| !d.is_empty())
                .map(|d| d.parse().expect("a dim"))
                .collect();
            (name, dtype, shape)
        })
        .collect()
}

/// The names of the graph's outputs: the node's, or one per output of several.
fn output_names(case: &Case) -> Vec<String> {
    if case.outputs == 1 {
        vec!["out".into()]
    } else {
        (0..case.outputs).map(|i| format!("out{i}")).collect()
    }
}

fn toml_of(case: &Case) -> String {
    let outs: Vec<String> = output_names(case)
        .iter()
        .map(|o| format!("\"{o}\""))
        .collect();
    let mut text = format!(
        "format = \"kiln-graph/1\"\nname = \"case\"\noutputs = [{}]\n",
        outs.join(", ")
    );
    for (name, dtype, shape) in inputs(case) {
        text += &format!(
            "\n[[inputs]]\nname = \"{name}\"\nshape = {shape:?}\ndtype = \"{}\"\n",
            dtype.name()
        );
    }
    text += &format!(
        "\n[[nodes]]\nname = \"out\"\nop = \"{}\"\nattrs = {{ {} }}\n",
        case.op, case.attrs
    );
    if case.outputs > 1 {
        for i in 0..case.outputs {
            text += &format!(
                "\n[[nodes]]\nname = \"out{i}\"\nop = \"getitem\"\nargs = [\"out\", {i}]\n"
            );
        }
    }
    text
}

/// The export schema's dtype code.
fn dtype_code(d: DType) -> i64 {
    match d {
        DType::Int32 => 4,
        DType::Int64 => 5,
        DType::Float16 => 6,
        DType::Float32 => 7,
        DType::Float64 => 8,
        DType::Bool => 12,
        DType::BFloat16 => 13,
    }
}

fn meta_json(m: &TensorMeta) -> Value {
    let shape = m.hint_shape();
    let mut strides = vec![1i64; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * shape[i + 1];
    }
    let ints = |v: &[i64]| v.iter().map(|d| json!({ "as_int": d })).collect::<Vec<_>>();
    json!({
        "dtype": dtype_code(m.dtype),
        "sizes": ints(&shape),
        "strides": ints(&strides),
        "storage_offset": {"as_int": 0},
        "requires_grad": false,
        "device": {"type": "cpu"},
        "layout": 7
    })
}

fn tensor(name: &str) -> Value {
    json!({ "as_tensor": { "name": name } })
}

/// One argument of the case as the export schema writes it.
fn argument(param: &str, v: &toml::Value, tensors: &[&str]) -> Value {
    use toml::Value as T;
    let is_tensor = |s: &str| tensors.contains(&s);
    match v {
        T::String(s) if is_tensor(s) => tensor(s),
        T::String(s) if param == "dtype" => json!({
            "as_scalar_type": dtype_code(DType::parse(s).expect("a dtype"))
        }),
        T::String(s) => json!({ "as_string": s }),
        T::Integer(i) => json!({ "as_int": i }),
        T::Float(f) => json!({ "as_float": f }),
        T::Boolean(b) => json!({ "as_bool": b }),
        T::Array(items) => {
            let names = |x: &T| x.as_str().is_some_and(is_tensor);
            if items.iter().any(names) {
                if items.iter().all(names) {
                    let ts: Vec<Value> = items
                        .iter()
                        .map(|x| json!({ "name": x.as_str() }))
                        .collect();
                    json!({ "as_tensors": ts })
                } else {
                    let ts: Vec<Value> = items
                        .iter()
                        .map(|x| match x.as_str() {
                            Some(s) => tensor(s),
                            None => json!({ "as_none": true }),
                        })
                        .collect();
                    json!({ "as_optional_tensors": ts })
                }
            } else if items.iter().all(|x| x.is_integer()) {
                json!({ "as_ints": items.iter().map(|x| x.as_integer()).collect::<Vec<_>>() })
            } else {
                let fs: Vec<f64> = items
                    .iter()
                    .map(|x| {
                        x.as_float()
                            .or(x.as_integer().map(|i| i as f64))
                            .expect("a number")
                    })
                    .collect();
                json!({ "as_floats": fs })
            }
        }
        other => panic!("argument {other:?} in the cases"),
    }
}

/// The case as a `.pt2` archive, recording the output shapes `outs`.
fn pt2_of(case: &Case, outs: &[TensorMeta]) -> Vec<u8> {
    let ins = inputs(case);
    let names: Vec<&str> = ins.iter().map(|i| i.0).collect();
    let attrs: toml::Table =
        toml::from_str(&format!("a = {{ {} }}", case.attrs)).expect("the case's attrs");
    let Some(toml::Value::Table(attrs)) = attrs.get("a") else {
        panic!("attrs")
    };
    let args: Vec<Value> = attrs
        .iter()
        .map(|(k, v)| json!({ "name": k, "arg": argument(k, v, &names), "kind": 1 }))
        .collect();
    let out_names = output_names(case);
    let outputs = if case.outputs == 1 {
        vec![tensor("out")]
    } else {
        let ts: Vec<Value> = out_names.iter().map(|o| json!({ "name": o })).collect();
        vec![json!({ "as_tensors": ts })]
    };
    let mut values = serde_json::Map::new();
    for (name, dtype, shape) in &ins {
        let meta = TensorMeta::contiguous(shape.clone(), *dtype);
        values.insert(name.to_string(), meta_json(&meta));
    }
    for (o, meta) in out_names.iter().zip(outs) {
        values.insert(o.clone(), meta_json(meta));
    }
    let graph = json!({
        "inputs": names.iter().map(|t| tensor(t)).collect::<Vec<_>>(),
        "outputs": out_names.iter().map(|t| tensor(t)).collect::<Vec<_>>(),
        "nodes": [{
            "target": format!("torch.ops.aten.{}.default", case.op),
            "inputs": args,
            "outputs": outputs,
            "name": "out"
        }],
        "tensor_values": values,
        "sym_int_values": {},
        "sym_bool_values": {},
        "is_single_tensor_return": out_names.len() == 1
    });
    let model = json!({
        "graph_module": {
            "graph": graph,
            "signature": {
                "input_specs": names.iter()
                    .map(|t| json!({"user_input": {"arg": tensor(t)}}))
                    .collect::<Vec<_>>(),
                "output_specs": out_names.iter()
                    .map(|t| json!({"user_output": {"arg": tensor(t)}}))
                    .collect::<Vec<_>>()
            },
            "module_call_graph": []
        },
        "opset_version": {"aten": 0},
        "range_constraints": {},
        "schema_version": {"major": 8, "minor": 17},
        "verifiers": [],
        "torch_version": "2.11"
    });
    let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let opts =
        zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    w.start_file("archive/models/model.json", opts)
        .expect("zip");
    w.write_all(&serde_json::to_vec(&model).expect("json"))
        .expect("zip");
    w.finish().expect("zip").into_inner()
}

/// The graph op for op, names left out: each node's op, operands (by position in the
/// order, `getitem` nodes seen through to the output they select) and output types,
/// then the graph's outputs.
fn canonical(g: &Graph) -> String {
    let order = g.topo_order().expect("a graph without cycles");
    let mut at: HashMap<NodeId, usize> = HashMap::new();
    let mut alias: HashMap<NodeId, ValueId> = HashMap::new();
    let mut lines = vec![];
    let name = |v: ValueId, at: &HashMap<NodeId, usize>, alias: &HashMap<NodeId, ValueId>| {
        let v = alias.get(&v.node).copied().unwrap_or(v);
        format!(
            "%{}.{}",
            at.get(&v.node).copied().unwrap_or(usize::MAX),
            v.output
        )
    };
    for id in order {
        let node = g.node(id).expect("a node");
        if let (Op::GetItem { .. }, [Arg::Value(v)]) = (&node.op, node.args.as_slice()) {
            let v = alias.get(&v.node).copied().unwrap_or(*v);
            alias.insert(id, v);
            continue;
        }
        let args: Vec<String> = node
            .args
            .iter()
            .map(|a| match a {
                Arg::Value(v) => name(*v, &at, &alias),
                Arg::Scalar(s) => s.to_string(),
            })
            .collect();
        let types: Vec<String> = node
            .outputs
            .iter()
            .map(|m| format!("{}{:?}", m.dtype, m.shape))
            .collect();
        at.insert(id, lines.len());
        lines.push(format!(
            "%{} = {:?}({}) -> {}",
            lines.len(),
            node.op,
            args.join(", "),
            types.join(", ")
        ));
    }
    let outs: Vec<String> = g.outputs().iter().map(|v| name(*v, &at, &alias)).collect();
    lines.push(format!("return {}", outs.join(", ")));
    lines.join("\n")
}

/// One case through both front ends: the graphs, or what went wrong.
fn both(case: &Case) -> Result<(String, String), String> {
    let report = |e: kiln::graph::Error| kiln::diag::report(&e);
    let toml_graph =
        kiln::graph::parse_toml(&toml_of(case)).map_err(|e| format!("TOML: {}", report(e)))?;
    let outs: Vec<TensorMeta> = toml_graph
        .outputs()
        .iter()
        .map(|v| toml_graph.meta(*v).cloned().expect("an inferred output"))
        .collect();
    let pt2_graph = read_pt2(
        std::io::Cursor::new(pt2_of(case, &outs)),
        "case",
        &Pt2Options::default(),
    )
    .map_err(|e| format!(".pt2: {}", report(e)))?;
    Ok((canonical(&toml_graph), canonical(&pt2_graph)))
}

#[test]
fn every_op_of_the_table_imports_the_same_through_both_front_ends() {
    let cases = cases();
    let mut missing = vec![];
    for name in table::op_names() {
        let covered = if name == "getitem" {
            cases.iter().any(|k| k.outputs > 1)
        } else {
            cases.iter().any(|k| k.op == name)
        };
        if !covered {
            missing.push(name);
        }
    }
    assert!(
        missing.is_empty(),
        "ops of the table without a case in tests/op_table.rs: {missing:?}"
    );
    let mut failures = vec![];
    for case in &cases {
        assert!(
            table::is_known(case.op),
            "case of `{}`, which the table does not know",
            case.op
        );
        match both(case) {
            Ok((toml, pt2)) if toml == pt2 => {}
            Ok((toml, pt2)) => failures.push(format!(
                "`{}`: the front ends differ\nTOML:\n{toml}\n.pt2:\n{pt2}",
                case.op
            )),
            Err(e) => failures.push(format!("`{}`: {e}", case.op)),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn a_toml_node_may_read_a_later_one_and_a_cycle_names_its_nodes() {
    let graph = |nodes: &str| {
        format!(
            "format = \"kiln-graph/1\"\nname = \"g\"\noutputs = [\"b\"]\n\n[[inputs]]\nname = \"x\"\nshape = [2, 3]\ndtype = \"float32\"\n{nodes}"
        )
    };
    // `b` stacks `a`, defined after it: the expansion needs `a`'s shape.
    let later = graph(
        "\n[[nodes]]\nname = \"b\"\nop = \"stack\"\nattrs = { tensors = ['a', 'x'] }\n\n[[nodes]]\nname = \"a\"\nop = \"relu\"\nargs = [\"x\"]\n",
    );
    let g = kiln::graph::parse_toml(&later).expect("a graph in any node order");
    let out = g.outputs()[0];
    assert_eq!(g.meta(out).map(|m| m.hint_shape()), Some(vec![2, 2, 3]));
    let cycle = graph(
        "\n[[nodes]]\nname = \"b\"\nop = \"add\"\nargs = [\"a\", \"x\"]\n\n[[nodes]]\nname = \"a\"\nop = \"relu\"\nargs = [\"b\"]\n",
    );
    let e = kiln::diag::report(&kiln::graph::parse_toml(&cycle).expect_err("a cycle"));
    assert!(
        e.contains("`b` reads `a` reads `b`") && e.contains("cycle"),
        "{e}"
    );
}

#[test]
fn rewrites_and_expansions_take_positional_arguments_in_aten_order() {
    let text = "format = \"kiln-graph/1\"\nname = \"g\"\noutputs = [\"p\"]\n\n[[inputs]]\nname = \"x\"\nshape = [2, 3]\ndtype = \"float32\"\n\n[[inputs]]\nname = \"w\"\nshape = [3, 4]\ndtype = \"float32\"\n\n[[nodes]]\nname = \"p\"\nop = \"einsum\"\nargs = [\"ij,jk->ki\", [\"x\", \"w\"]]\n\n[[nodes]]\nname = \"q\"\nop = \"swapaxes\"\nargs = [\"p\", 0, 1]\n";
    let g = kiln::graph::parse_toml(text).expect("positional arguments of table entries");
    let out = g.outputs()[0];
    assert_eq!(g.meta(out).map(|m| m.hint_shape()), Some(vec![4, 2]));
    // One more positional argument than the entry has parameters is refused.
    let bad = text.replace("args = [\"p\", 0, 1]", "args = [\"p\", 0, 1, 2]");
    let e = kiln::diag::report(&kiln::graph::parse_toml(&bad).expect_err("too many"));
    assert!(
        e.contains("`swapaxes` takes at most 3 positional arguments"),
        "{e}"
    );
}
