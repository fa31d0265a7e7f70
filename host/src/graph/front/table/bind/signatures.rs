//! The signatures of the ops the table binds: each parameter's name, kind and whether
//! it is required, in ATen order.

use crate::graph::ops::UnaryOp;
use std::collections::HashMap;
use std::sync::OnceLock;

/// Parameter kinds.
#[derive(Clone, Copy, PartialEq)]
pub(super) enum K {
    T,
    Ts,
    Ot,
    Tl,
    /// a list of tensors in which entries may be `None`
    Otl,
    I,
    Il,
    F,
    B,
    S,
    D,
    N,
}

pub(super) type Sig = &'static [(&'static str, K, bool)];

const UNARY: Sig = &[("self", K::T, true)];
const BIN: Sig = &[("self", K::Ts, true), ("other", K::Ts, true)];
const ADD: Sig = &[
    ("self", K::Ts, true),
    ("other", K::Ts, true),
    ("alpha", K::N, false),
];

const CONV: Sig = &[
    ("input", K::T, true),
    ("weight", K::T, true),
    ("bias", K::Ot, false),
    ("stride", K::Il, false),
    ("padding", K::Il, false),
    ("dilation", K::Il, false),
    ("groups", K::I, false),
];
const POOL: Sig = &[
    ("self", K::T, true),
    ("kernel_size", K::Il, true),
    ("stride", K::Il, false),
    ("padding", K::Il, false),
    ("dilation", K::Il, false),
    ("ceil_mode", K::B, false),
];

/// Every op of the op set that is not a unary function ([`UnaryOp::ALL`]),
/// with its signature: the one list that both binds a node and names the op
/// set (for "did you mean").
pub(super) const SIGNATURES: &[(&str, Sig)] = {
    use K::*;
    &[
        ("add", ADD),
        ("sub", ADD),
        ("mul", BIN),
        ("pow", BIN),
        ("maximum", BIN),
        ("minimum", BIN),
        ("eq", BIN),
        ("ne", BIN),
        ("lt", BIN),
        ("le", BIN),
        ("gt", BIN),
        ("ge", BIN),
        (
            "div",
            &[
                ("self", Ts, true),
                ("other", Ts, true),
                ("rounding_mode", S, false),
            ],
        ),
        ("gelu", &[("self", T, true), ("approximate", S, false)]),
        (
            "where",
            &[
                ("condition", T, true),
                ("self", Ts, true),
                ("other", Ts, true),
            ],
        ),
        (
            "clamp",
            &[("self", T, true), ("min", N, false), ("max", N, false)],
        ),
        (
            "to",
            &[
                ("self", T, true),
                ("dtype", D, false),
                ("non_blocking", B, false),
                ("copy", B, false),
            ],
        ),
        ("_to_copy", &[("self", T, true), ("dtype", D, false)]),
        (
            "sum",
            &[
                ("self", T, true),
                ("dim", Il, false),
                ("keepdim", B, false),
                ("dtype", D, false),
            ],
        ),
        (
            "mean",
            &[
                ("self", T, true),
                ("dim", Il, false),
                ("keepdim", B, false),
                ("dtype", D, false),
            ],
        ),
        (
            "amax",
            &[("self", T, true), ("dim", Il, false), ("keepdim", B, false)],
        ),
        (
            "amin",
            &[("self", T, true), ("dim", Il, false), ("keepdim", B, false)],
        ),
        (
            "var",
            &[
                ("self", T, true),
                ("dim", Il, false),
                ("correction", F, false),
                ("keepdim", B, false),
                ("unbiased", B, false),
            ],
        ),
        (
            "softmax",
            &[("self", T, true), ("dim", I, true), ("dtype", D, false)],
        ),
        (
            "log_softmax",
            &[("self", T, true), ("dim", I, true), ("dtype", D, false)],
        ),
        (
            "_softmax",
            &[
                ("self", T, true),
                ("dim", I, true),
                ("half_to_float", B, false),
            ],
        ),
        (
            "_log_softmax",
            &[
                ("self", T, true),
                ("dim", I, true),
                ("half_to_float", B, false),
            ],
        ),
        (
            "layer_norm",
            &[
                ("input", T, true),
                ("normalized_shape", Il, true),
                ("weight", Ot, false),
                ("bias", Ot, false),
                ("eps", F, false),
                ("cudnn_enable", B, false),
            ],
        ),
        (
            "native_layer_norm",
            &[
                ("input", T, true),
                ("normalized_shape", Il, true),
                ("weight", Ot, false),
                ("bias", Ot, false),
                ("eps", F, false),
            ],
        ),
        (
            "rms_norm",
            &[
                ("input", T, true),
                ("normalized_shape", Il, true),
                ("weight", Ot, false),
                ("eps", F, false),
            ],
        ),
        (
            "linear",
            &[("input", T, true), ("weight", T, true), ("bias", Ot, false)],
        ),
        (
            "addmm",
            &[
                ("self", T, true),
                ("mat1", T, true),
                ("mat2", T, true),
                ("beta", N, false),
                ("alpha", N, false),
            ],
        ),
        ("mm", &[("self", T, true), ("mat2", T, true)]),
        ("bmm", &[("self", T, true), ("mat2", T, true)]),
        ("matmul", &[("self", T, true), ("other", T, true)]),
        ("reshape", &[("self", T, true), ("shape", Il, true)]),
        ("view", &[("self", T, true), ("size", Il, true)]),
        ("permute", &[("self", T, true), ("dims", Il, true)]),
        (
            "transpose",
            &[("self", T, true), ("dim0", I, true), ("dim1", I, true)],
        ),
        ("unsqueeze", &[("self", T, true), ("dim", I, true)]),
        ("squeeze", &[("self", T, true), ("dim", Il, false)]),
        (
            "expand",
            &[
                ("self", T, true),
                ("size", Il, true),
                ("implicit", B, false),
            ],
        ),
        (
            "select",
            &[("self", T, true), ("dim", I, true), ("index", I, true)],
        ),
        (
            "slice",
            &[
                ("self", T, true),
                ("dim", I, false),
                ("start", I, false),
                ("end", I, false),
                ("step", I, false),
            ],
        ),
        (
            "split",
            &[
                ("self", T, true),
                ("split_size", I, true),
                ("dim", I, false),
            ],
        ),
        (
            "split_with_sizes",
            &[
                ("self", T, true),
                ("split_sizes", Il, true),
                ("dim", I, false),
            ],
        ),
        ("getitem", &[("self", T, true), ("index", I, true)]),
        ("contiguous", UNARY),
        ("clone", UNARY),
        ("alias", UNARY),
        ("cat", &[("tensors", Tl, true), ("dim", I, false)]),
        (
            "dropout",
            &[("input", T, true), ("p", F, false), ("train", B, false)],
        ),
        (
            "any",
            &[("self", T, true), ("dim", Il, false), ("keepdim", B, false)],
        ),
        (
            "all",
            &[("self", T, true), ("dim", Il, false), ("keepdim", B, false)],
        ),
        (
            "group_norm",
            &[
                ("input", T, true),
                ("num_groups", I, true),
                ("weight", Ot, false),
                ("bias", Ot, false),
                ("eps", F, false),
                ("cudnn_enabled", B, false),
            ],
        ),
        (
            "native_group_norm",
            &[
                ("input", T, true),
                ("weight", Ot, false),
                ("bias", Ot, false),
                ("N", I, true),
                ("C", I, true),
                ("HxW", I, true),
                ("group", I, true),
                ("eps", F, true),
            ],
        ),
        ("repeat", &[("self", T, true), ("repeats", Il, true)]),
        ("fmod", BIN),
        ("atan2", BIN),
        ("hypot", BIN),
        ("copysign", BIN),
        ("remainder", BIN),
        (
            "masked_fill",
            &[("self", T, true), ("mask", T, true), ("value", Ts, true)],
        ),
        ("type_as", &[("self", T, true), ("other", T, true)]),
        (
            "copy",
            &[
                ("self", T, true),
                ("src", T, true),
                ("non_blocking", B, false),
            ],
        ),
        ("fill", &[("self", T, true), ("value", Ts, true)]),
        (
            "baddbmm",
            &[
                ("self", T, true),
                ("batch1", T, true),
                ("batch2", T, true),
                ("beta", N, false),
                ("alpha", N, false),
            ],
        ),
        (
            "avg_pool1d",
            &[
                ("self", T, true),
                ("kernel_size", Il, true),
                ("stride", Il, false),
                ("padding", Il, false),
                ("ceil_mode", B, false),
                ("count_include_pad", B, false),
            ],
        ),
        (
            "avg_pool2d",
            &[
                ("self", T, true),
                ("kernel_size", Il, true),
                ("stride", Il, false),
                ("padding", Il, false),
                ("ceil_mode", B, false),
                ("count_include_pad", B, false),
                ("divisor_override", I, false),
            ],
        ),
        (
            "constant_pad_nd",
            &[("self", T, true), ("pad", Il, true), ("value", N, false)],
        ),
        (
            "pad",
            &[
                ("self", T, true),
                ("pad", Il, true),
                ("mode", S, false),
                ("value", F, false),
            ],
        ),
        (
            "roll",
            &[("self", T, true), ("shifts", Il, true), ("dims", Il, false)],
        ),
        (
            "slice_scatter",
            &[
                ("self", T, true),
                ("src", T, true),
                ("dim", I, false),
                ("start", I, false),
                ("end", I, false),
                ("step", I, false),
            ],
        ),
        (
            "select_scatter",
            &[
                ("self", T, true),
                ("src", T, true),
                ("dim", I, true),
                ("index", I, true),
            ],
        ),
        (
            "as_strided",
            &[
                ("self", T, true),
                ("size", Il, true),
                ("stride", Il, true),
                ("storage_offset", I, false),
            ],
        ),
        (
            "adaptive_avg_pool1d",
            &[("self", T, true), ("output_size", Il, true)],
        ),
        (
            "_adaptive_avg_pool2d",
            &[("self", T, true), ("output_size", Il, true)],
        ),
        (
            "adaptive_avg_pool3d",
            &[("self", T, true), ("output_size", Il, true)],
        ),
        (
            "_adaptive_avg_pool3d",
            &[("self", T, true), ("output_size", Il, true)],
        ),
        ("bitwise_and", BIN),
        ("bitwise_or", BIN),
        ("bitwise_xor", BIN),
        ("logical_not", UNARY),
        (
            "min",
            &[("self", T, true), ("other", T, false), ("dim", I, false)],
        ),
        (
            "max",
            &[("self", T, true), ("other", T, false), ("dim", I, false)],
        ),
        (
            "hardtanh",
            &[
                ("self", T, true),
                ("min_val", N, false),
                ("max_val", N, false),
            ],
        ),
        ("relu6", UNARY),
        (
            "arange",
            &[
                ("start", N, false),
                ("end", N, false),
                ("step", N, false),
                ("dtype", D, false),
            ],
        ),
        (
            "full",
            &[
                ("size", Il, true),
                ("fill_value", N, true),
                ("dtype", D, false),
            ],
        ),
        ("zeros", &[("size", Il, true), ("dtype", D, false)]),
        ("ones", &[("size", Il, true), ("dtype", D, false)]),
        ("scalar_tensor", &[("s", N, true), ("dtype", D, false)]),
        (
            "full_like",
            &[
                ("self", T, true),
                ("fill_value", N, true),
                ("dtype", D, false),
            ],
        ),
        ("zeros_like", &[("self", T, true), ("dtype", D, false)]),
        ("ones_like", &[("self", T, true), ("dtype", D, false)]),
        (
            "new_full",
            &[
                ("self", T, true),
                ("size", Il, true),
                ("fill_value", N, true),
                ("dtype", D, false),
            ],
        ),
        (
            "new_ones",
            &[("self", T, true), ("size", Il, true), ("dtype", D, false)],
        ),
        (
            "new_zeros",
            &[("self", T, true), ("size", Il, true), ("dtype", D, false)],
        ),
        (
            "embedding",
            &[
                ("weight", T, true),
                ("indices", T, true),
                ("padding_idx", I, false),
                ("scale_grad_by_freq", B, false),
                ("sparse", B, false),
            ],
        ),
        ("index", &[("self", T, true), ("indices", Otl, true)]),
        (
            "gather",
            &[
                ("self", T, true),
                ("dim", I, true),
                ("index", T, true),
                ("sparse_grad", B, false),
            ],
        ),
        (
            "_grouped_mm",
            // `bias` and `out_dtype`, which the table's expansion checks (none, and the
            // operands' dtype), bind to nothing.
            &[
                ("self", T, true),
                ("mat2", T, true),
                ("offs", T, true),
                ("bias", Ot, false),
                ("out_dtype", D, false),
            ],
        ),
        (
            "sort_runs",
            &[
                ("self", T, true),
                ("descending", B, false),
                ("run", I, true),
            ],
        ),
        (
            "merge_runs",
            &[
                ("self", T, true),
                ("runs", T, true),
                ("descending", B, false),
                ("run", I, true),
            ],
        ),
        (
            "index_copy",
            &[
                ("self", T, true),
                ("dim", I, true),
                ("index", T, true),
                ("source", T, true),
            ],
        ),
        (
            "cumsum",
            &[("self", T, true), ("dim", I, true), ("dtype", D, false)],
        ),
        (
            "diff",
            &[
                ("self", T, true),
                ("n", I, false),
                ("dim", I, false),
                ("prepend", Ot, false),
                ("append", Ot, false),
            ],
        ),
        (
            "scaled_dot_product_attention",
            &[
                ("query", T, true),
                ("key", T, true),
                ("value", T, true),
                ("attn_mask", Ot, false),
                ("dropout_p", F, false),
                ("is_causal", B, false),
                ("scale", F, false),
                ("enable_gqa", B, false),
            ],
        ),
        (
            "convolution",
            &[
                ("input", T, true),
                ("weight", T, true),
                ("bias", Ot, false),
                ("stride", Il, false),
                ("padding", Il, false),
                ("dilation", Il, false),
                ("transposed", B, false),
                ("output_padding", Il, false),
                ("groups", I, false),
            ],
        ),
        ("conv1d", CONV),
        ("conv2d", CONV),
        ("conv3d", CONV),
        (
            "batch_norm",
            &[
                ("input", T, true),
                ("weight", Ot, false),
                ("bias", Ot, false),
                ("running_mean", T, true),
                ("running_var", T, true),
                ("training", B, false),
                ("momentum", F, false),
                ("eps", F, false),
                ("cudnn_enabled", B, false),
            ],
        ),
        (
            "_native_batch_norm_legit_no_training",
            &[
                ("input", T, true),
                ("weight", Ot, false),
                ("bias", Ot, false),
                ("running_mean", T, true),
                ("running_var", T, true),
                ("momentum", F, false),
                ("eps", F, false),
            ],
        ),
        ("max_pool2d", POOL),
        ("max_pool2d_with_indices", POOL),
        (
            "adaptive_avg_pool2d",
            &[("self", T, true), ("output_size", Il, true)],
        ),
        (
            "flatten",
            &[
                ("self", T, true),
                ("start_dim", I, false),
                ("end_dim", I, false),
            ],
        ),
        ("detach", UNARY),
        ("lift_fresh_copy", UNARY),
        (
            "_assert_tensor_metadata",
            &[
                ("a", T, true),
                ("size", Il, false),
                ("stride", Il, false),
                ("dtype", D, false),
            ],
        ),
    ]
};

pub(super) fn signature(op: &str) -> Option<Sig> {
    // Looked up once per node of a graph file: a map, not a scan of the lists.
    static BY_NAME: OnceLock<HashMap<&'static str, Sig>> = OnceLock::new();
    BY_NAME
        .get_or_init(|| {
            UnaryOp::ALL
                .iter()
                .map(|(_, n)| (*n, UNARY))
                .chain(SIGNATURES.iter().copied())
                .collect()
        })
        .get(op)
        .copied()
}
