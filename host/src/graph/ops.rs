//! The op set: one [`Op`] variant per operation family with typed attributes.
//!
//! Attributes that PyTorch takes as keyword or trailing positional arguments live here;
//! tensor operands (and numbers standing in for tensors) are the node's `args`. This module
//! must never parse text or compute shapes; see `front/table/` and `infer.rs`.

use super::dtype::DType;
use super::sym::Size;
use std::fmt;
use std::sync::Arc;

mod bits;
mod class;

/// A number that may be a size over symbols (an export's `SymInt`): `arange`'s end.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub enum Bound {
    /// a number
    Scalar(Scalar),
    /// a size that is not an integer (an integer is a [`Bound::Scalar`])
    Size(Size),
}

impl Bound {
    /// The number, where the bound is one.
    pub fn scalar(&self) -> Option<Scalar> {
        match self {
            Bound::Scalar(s) => Some(*s),
            Bound::Size(_) => None,
        }
    }

    /// The value at the sizes' hints, as a number.
    pub fn hint(&self) -> Scalar {
        match self {
            Bound::Scalar(s) => *s,
            Bound::Size(s) => Scalar::Int(s.hint()),
        }
    }
}

impl From<Scalar> for Bound {
    fn from(s: Scalar) -> Bound {
        Bound::Scalar(s)
    }
}

/// A number given where a tensor operand may appear (`mul(x, 2.0)`). Its kind matters
/// for type promotion: a float scalar never changes a float tensor's dtype.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
#[serde(untagged)]
pub enum Scalar {
    /// `true` / `false`
    Bool(bool),
    /// an integer literal
    Int(i64),
    /// a float literal
    Float(f64),
}

impl Scalar {
    /// The value as a float64.
    pub fn to_f64(self) -> f64 {
        match self {
            Scalar::Bool(b) => b as i64 as f64,
            Scalar::Int(i) => i as f64,
            Scalar::Float(f) => f,
        }
    }

    /// The dtype that stands for this scalar's category in promotion.
    pub fn dtype(self) -> DType {
        match self {
            Scalar::Bool(_) => DType::Bool,
            Scalar::Int(_) => DType::Int64,
            Scalar::Float(_) => DType::Float64,
        }
    }
}

impl fmt::Display for Scalar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scalar::Bool(b) => write!(f, "{b}"),
            Scalar::Int(i) => write!(f, "{i}"),
            Scalar::Float(x) if x.is_finite() && x.fract() == 0.0 && x.abs() < 1e15 => {
                write!(f, "{x:.1}")
            }
            Scalar::Float(x) => write!(f, "{x}"),
        }
    }
}

/// Elementwise functions of one operand.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum UnaryOp {
    /// `abs`
    Abs,
    /// `neg`
    Neg,
    /// `exp`
    Exp,
    /// `log`
    Log,
    /// `log1p`
    Log1p,
    /// `sqrt`
    Sqrt,
    /// `rsqrt`
    Rsqrt,
    /// `sin`
    Sin,
    /// `cos`
    Cos,
    /// `tanh`
    Tanh,
    /// `sigmoid`
    Sigmoid,
    /// `relu`
    Relu,
    /// `silu`
    Silu,
    /// `erf`
    Erf,
    /// `reciprocal`
    Reciprocal,
    /// `hardsigmoid`: `clamp(x / 6 + 1/2, 0, 1)`
    Hardsigmoid,
    /// `hardswish`: `x * hardsigmoid(x)`
    Hardswish,
    /// `floor` (integers unchanged)
    Floor,
    /// `ceil` (integers unchanged)
    Ceil,
    /// `round`: to the nearest integer, halves to even (integers unchanged)
    Round,
    /// `trunc`: towards zero (integers unchanged)
    Trunc,
    /// `sign`: -1, 0 or 1 (0 for NaN), in the input's dtype
    Sign,
    /// `expm1`: `exp(x) - 1`
    Expm1,
    /// `log2`
    Log2,
    /// `log10`
    Log10,
    /// `tan`
    Tan,
    /// `atan`
    Atan,
    /// `asin`
    Asin,
    /// `acos`
    Acos,
    /// `sinh`
    Sinh,
    /// `cosh`
    Cosh,
    /// `asinh`
    Asinh,
    /// `acosh`
    Acosh,
    /// `atanh`
    Atanh,
}

impl UnaryOp {
    /// Every unary op with its ATen name.
    pub const ALL: [(UnaryOp, &'static str); 34] = [
        (UnaryOp::Abs, "abs"),
        (UnaryOp::Neg, "neg"),
        (UnaryOp::Exp, "exp"),
        (UnaryOp::Log, "log"),
        (UnaryOp::Log1p, "log1p"),
        (UnaryOp::Sqrt, "sqrt"),
        (UnaryOp::Rsqrt, "rsqrt"),
        (UnaryOp::Sin, "sin"),
        (UnaryOp::Cos, "cos"),
        (UnaryOp::Tanh, "tanh"),
        (UnaryOp::Sigmoid, "sigmoid"),
        (UnaryOp::Relu, "relu"),
        (UnaryOp::Silu, "silu"),
        (UnaryOp::Erf, "erf"),
        (UnaryOp::Reciprocal, "reciprocal"),
        (UnaryOp::Hardsigmoid, "hardsigmoid"),
        (UnaryOp::Hardswish, "hardswish"),
        (UnaryOp::Floor, "floor"),
        (UnaryOp::Ceil, "ceil"),
        (UnaryOp::Round, "round"),
        (UnaryOp::Trunc, "trunc"),
        (UnaryOp::Sign, "sign"),
        (UnaryOp::Expm1, "expm1"),
        (UnaryOp::Log2, "log2"),
        (UnaryOp::Log10, "log10"),
        (UnaryOp::Tan, "tan"),
        (UnaryOp::Atan, "atan"),
        (UnaryOp::Asin, "asin"),
        (UnaryOp::Acos, "acos"),
        (UnaryOp::Sinh, "sinh"),
        (UnaryOp::Cosh, "cosh"),
        (UnaryOp::Asinh, "asinh"),
        (UnaryOp::Acosh, "acosh"),
        (UnaryOp::Atanh, "atanh"),
    ];

    /// Whether an integer or bool input gives a float32 result (PyTorch's "int to float"
    /// unary ops); the others keep the input dtype.
    pub fn promotes_int_to_float(self) -> bool {
        !matches!(
            self,
            UnaryOp::Abs
                | UnaryOp::Neg
                | UnaryOp::Relu
                | UnaryOp::Hardsigmoid
                | UnaryOp::Hardswish
                | UnaryOp::Floor
                | UnaryOp::Ceil
                | UnaryOp::Round
                | UnaryOp::Trunc
                | UnaryOp::Sign
        )
    }
}

/// How `pad` fills the elements it adds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PadMode {
    /// a constant value
    Constant,
    /// mirrored without repeating the edge (`reflect`)
    Reflect,
    /// the edge element repeated (`replicate`)
    Replicate,
    /// wrapped around (`circular`)
    Circular,
}

/// Elementwise functions of two operands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BinaryOp {
    /// `add` (with `alpha`)
    Add,
    /// `sub` (with `alpha`)
    Sub,
    /// `mul`
    Mul,
    /// `div` with no rounding mode (true division)
    Div,
    /// `div(rounding_mode="trunc")`
    DivTrunc,
    /// `div(rounding_mode="floor")`
    DivFloor,
    /// `pow`
    Pow,
    /// `maximum`
    Maximum,
    /// `minimum`
    Minimum,
    /// `eq`
    Eq,
    /// `ne`
    Ne,
    /// `lt`
    Lt,
    /// `le`
    Le,
    /// `gt`
    Gt,
    /// `ge`
    Ge,
    /// `bitwise_and` (`__and__`, `logical_and` on bools)
    BitAnd,
    /// `bitwise_or` (`__or__`, `logical_or` on bools)
    BitOr,
    /// `bitwise_xor` (`__xor__`)
    BitXor,
    /// `fmod`: the remainder of truncated division (the sign of `a`)
    Fmod,
    /// `remainder`: the remainder of floor division (the sign of `b`, Python's `%`)
    Remainder,
    /// `atan2(a, b)`: the angle of the point (b, a), in (-pi, pi] (a float)
    Atan2,
    /// `hypot(a, b)`: sqrt(a^2 + b^2) without overflow in the squares (a float)
    Hypot,
    /// `copysign(a, b)`: |a| with the sign bit of `b` (a float)
    Copysign,
}

impl BinaryOp {
    /// Every binary op with its ATen name (the rounding variants of `div` print as
    /// `div` with a `rounding_mode`).
    pub const ALL: [(BinaryOp, &'static str); 21] = [
        (BinaryOp::Add, "add"),
        (BinaryOp::Sub, "sub"),
        (BinaryOp::Mul, "mul"),
        (BinaryOp::Div, "div"),
        (BinaryOp::Pow, "pow"),
        (BinaryOp::Maximum, "maximum"),
        (BinaryOp::Minimum, "minimum"),
        (BinaryOp::Eq, "eq"),
        (BinaryOp::Ne, "ne"),
        (BinaryOp::Lt, "lt"),
        (BinaryOp::Le, "le"),
        (BinaryOp::Gt, "gt"),
        (BinaryOp::Ge, "ge"),
        (BinaryOp::BitAnd, "bitwise_and"),
        (BinaryOp::BitOr, "bitwise_or"),
        (BinaryOp::BitXor, "bitwise_xor"),
        (BinaryOp::Fmod, "fmod"),
        (BinaryOp::Remainder, "remainder"),
        (BinaryOp::Atan2, "atan2"),
        (BinaryOp::Hypot, "hypot"),
        (BinaryOp::Copysign, "copysign"),
    ];

    /// The bitwise ops, defined on integers and bools only.
    pub fn is_bitwise(self) -> bool {
        matches!(self, BinaryOp::BitAnd | BinaryOp::BitOr | BinaryOp::BitXor)
    }

    /// The ops whose result is a float whatever the operands (`div`, `atan2`, `hypot`,
    /// `copysign`: integers and bools are promoted, as PyTorch promotes them).
    pub fn is_float_valued(self) -> bool {
        matches!(
            self,
            BinaryOp::Div | BinaryOp::Atan2 | BinaryOp::Hypot | BinaryOp::Copysign
        )
    }

    /// Comparisons produce `bool`.
    pub fn is_comparison(self) -> bool {
        matches!(
            self,
            BinaryOp::Eq | BinaryOp::Ne | BinaryOp::Lt | BinaryOp::Le | BinaryOp::Gt | BinaryOp::Ge
        )
    }
}

/// Reductions that keep the input's value domain.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ReduceOp {
    /// `sum`
    Sum,
    /// `mean`
    Mean,
    /// `amax`
    Amax,
    /// `amin`
    Amin,
    /// `any`: whether some element is non-zero (bool result)
    Any,
    /// `all`: whether every element is non-zero (bool result)
    All,
}

/// `gelu`'s `approximate` attribute.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GeluApprox {
    /// exact, via `erf`
    None,
    /// the tanh formula
    Tanh,
}

/// The elements of a constant, already rounded to its dtype. Equal (and hashed) by
/// bit pattern, see `ops/bits.rs`.
#[derive(Clone, Debug)]
pub enum ConstData {
    /// row-major values, one per element
    Values(Arc<[f64]>),
    /// every element the same (cheap for large constants)
    Fill(f64),
    /// dense row-major little-endian elements of `dtype`, as a weights file
    /// stores them (a model's weights keep their size: 4 bytes per float32,
    /// not 8 per decoded value)
    Bytes {
        /// the dtype of the elements (the constant's own dtype)
        dtype: DType,
        /// `numel * dtype.size_bytes()` bytes
        bytes: Arc<[u8]>,
    },
}

impl ConstData {
    /// The element at row-major position `i` (0 past the end).
    pub fn get(&self, i: usize) -> f64 {
        match self {
            ConstData::Values(v) => v.get(i).copied().unwrap_or(0.0),
            ConstData::Fill(x) => *x,
            ConstData::Bytes { dtype, bytes } => {
                let size = dtype.size_bytes();
                i.checked_mul(size)
                    .and_then(|at| bytes.get(at..at + size))
                    .and_then(|b| dtype.decode_le(b).first().copied())
                    .unwrap_or(0.0)
            }
        }
    }

    /// Elements stored (1 for a fill).
    pub fn len(&self) -> usize {
        match self {
            ConstData::Values(v) => v.len(),
            ConstData::Fill(_) => 1,
            ConstData::Bytes { dtype, bytes } => bytes.len() / dtype.size_bytes(),
        }
    }

    /// Whether nothing is stored (a constant with no elements).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The single value of a fill or of a one-element constant.
    pub fn single(&self) -> Option<f64> {
        match self {
            ConstData::Fill(x) => Some(*x),
            _ if self.len() == 1 => Some(self.get(0)),
            _ => None,
        }
    }

    /// The first `n` elements as dense little-endian storage of `dtype`
    /// (a fill repeated; stored bytes of the same dtype borrowed as they are).
    pub fn storage(&self, dtype: DType, n: usize) -> std::borrow::Cow<'_, [u8]> {
        match self {
            ConstData::Bytes { dtype: d, bytes }
                if *d == dtype && bytes.len() == n * dtype.size_bytes() =>
            {
                std::borrow::Cow::Borrowed(&bytes[..])
            }
            ConstData::Values(v) if v.len() == n => std::borrow::Cow::Owned(dtype.encode_le(v)),
            _ => {
                let values: Vec<f64> = (0..n).map(|i| dtype.round(self.get(i))).collect();
                std::borrow::Cow::Owned(dtype.encode_le(&values))
            }
        }
    }
}

/// Inference no-ops.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NoOpKind {
    /// `dropout(x, p, train)`: identity in inference
    Dropout,
    /// `alias`
    Alias,
    /// `_assert_tensor_metadata`: Kiln passes its operand through so it can be chained
    AssertTensorMetadata,
}

/// An operation with its attributes. `Eq` and `Hash` compare the attributes with
/// floats by bit pattern (see `ops/bits.rs`), so that passes may key maps by ops.
#[derive(Clone, Debug, serde::Serialize)]
pub enum Op {
    /// graph input number `index`
    Input {
        /// position among the graph inputs
        index: usize,
    },
    /// a literal tensor
    Constant {
        /// the elements
        #[serde(skip)]
        data: ConstData,
    },
    /// an elementwise function of one operand
    Unary(UnaryOp),
    /// `gelu`
    Gelu {
        /// the formula
        approximate: GeluApprox,
    },
    /// an elementwise function of two operands (tensors or numbers)
    Binary {
        /// which function
        op: BinaryOp,
        /// `add`/`sub`'s multiplier of the second operand
        alpha: Option<Scalar>,
    },
    /// `where(cond, a, b)`
    Where,
    /// `clamp(x, min, max)`
    Clamp {
        /// lower bound
        min: Option<Scalar>,
        /// upper bound
        max: Option<Scalar>,
    },
    /// `to` / `_to_copy` with a dtype
    Cast {
        /// target dtype
        dtype: DType,
    },
    /// `sum mean amax amin`
    Reduce {
        /// which reduction
        op: ReduceOp,
        /// dims reduced; `None` means all
        dims: Option<Vec<i64>>,
        /// keep reduced dims as size 1
        keepdim: bool,
        /// accumulate/output dtype (`sum`, `mean`)
        dtype: Option<DType>,
    },
    /// `var`
    Var {
        /// dims reduced; `None` means all
        dims: Option<Vec<i64>>,
        /// Bessel correction (1 unbiased)
        correction: f64,
        /// keep reduced dims as size 1
        keepdim: bool,
    },
    /// `softmax`, `_softmax`, `log_softmax`
    Softmax {
        /// the dim normalised
        dim: i64,
        /// `log_softmax`
        log: bool,
        /// `_softmax`'s flag: a float16/bfloat16 input gives float32
        half_to_float: bool,
        /// `softmax(x, dim, dtype)`: the input is cast to `dtype` first
        dtype: Option<DType>,
    },
    /// `layer_norm` (one output) or `native_layer_norm` (out, mean, rstd)
    LayerNorm {
        /// trailing dims normalised
        normalized_shape: Vec<i64>,
        /// epsilon
        eps: f64,
        /// whether `args[1]` is a weight
        weight: bool,
        /// whether a bias follows
        bias: bool,
        /// three outputs
        native: bool,
    },
    /// `rms_norm`
    RmsNorm {
        /// trailing dims normalised
        normalized_shape: Vec<i64>,
        /// epsilon; `None` means the dtype's machine epsilon, as PyTorch does
        eps: Option<f64>,
        /// whether `args[1]` is a weight
        weight: bool,
    },
    /// `linear(x, w, b?)`
    Linear {
        /// whether a bias is given
        bias: bool,
    },
    /// `addmm(self, m1, m2, beta, alpha)`
    Addmm {
        /// multiplier of `self`
        beta: Scalar,
        /// multiplier of the product
        alpha: Scalar,
    },
    /// `mm`
    Mm,
    /// `bmm`
    Bmm,
    /// `matmul` with PyTorch's 1-D and batch broadcasting rules
    Matmul,
    /// `reshape` / `view` (one -1 allowed)
    Reshape {
        /// target shape as given (sizes may be symbolic; an integer -1 is the one inferred)
        shape: Vec<Size>,
        /// spelled `view` in the file
        view: bool,
    },
    /// `permute`
    Permute {
        /// the permutation
        dims: Vec<i64>,
    },
    /// `transpose`
    Transpose {
        /// first dim
        dim0: i64,
        /// second dim
        dim1: i64,
    },
    /// `unsqueeze`
    Unsqueeze {
        /// position of the new dim
        dim: i64,
    },
    /// `squeeze`
    Squeeze {
        /// dims to drop if of size 1; `None` means all
        dims: Option<Vec<i64>>,
    },
    /// `expand` (-1 keeps a size)
    Expand {
        /// target sizes (the integer -1 keeps a size)
        sizes: Vec<Size>,
    },
    /// `select(dim, index)`
    Select {
        /// the dim removed
        dim: i64,
        /// the index (negative counts from the end)
        index: i64,
    },
    /// `slice(dim, start, end, step)`
    Slice {
        /// the dim
        dim: i64,
        /// first index
        start: Option<Size>,
        /// one past the last
        end: Option<Size>,
        /// stride, > 0
        step: i64,
    },
    /// `split(split_size, dim)`, several outputs
    Split {
        /// chunk size
        split_size: i64,
        /// the dim
        dim: i64,
    },
    /// `split_with_sizes(sizes, dim)`, several outputs
    SplitWithSizes {
        /// chunk sizes
        sizes: Vec<i64>,
        /// the dim
        dim: i64,
    },
    /// `getitem(t, i)`: the operand is already the selected output; an identity
    GetItem {
        /// the index given in the file
        index: i64,
    },
    /// `contiguous`
    Contiguous,
    /// `clone`
    Clone,
    /// `cat(tensors, dim)`
    Cat {
        /// the dim
        dim: i64,
    },
    /// an inference no-op
    NoOp(NoOpKind),
    /// `arange(start, end, step)`: no operands
    Arange {
        /// first value
        start: Scalar,
        /// bound (exclusive)
        end: Bound,
        /// increment, non-zero
        step: Scalar,
        /// the dtype; `None` is PyTorch's default (int64 for integer arguments)
        dtype: Option<DType>,
    },
    /// `full`, `scalar_tensor`, `zeros`/`ones`, `new_*`, `*_like`: every element `value`.
    /// With an operand (`full_like`, `new_ones`), its shape (unless `size` is given) and
    /// its dtype (unless `dtype` is given) are the defaults.
    Full {
        /// the shape (its sizes possibly symbolic); `None` takes the operand's
        size: Option<Vec<Size>>,
        /// the element
        value: Scalar,
        /// the dtype; `None` takes the operand's, or PyTorch's default for `value`
        dtype: Option<DType>,
    },
    /// `index.Tensor(self, indices)` and `embedding(weight, indices)`: advanced indexing.
    /// Operands: `self`, then one integer (or bool-free) index tensor per `true` entry of
    /// `indexed`, which has one entry per leading dim of `self` that the indices cover.
    Index {
        /// whether dim `d` of `self` is indexed (`None` in PyTorch's list is `false`)
        indexed: Vec<bool>,
        /// `embedding`: a negative index is out of range, as PyTorch's embedding refuses
        /// it; `index.Tensor` counts it from the end
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        nonnegative: bool,
    },
    /// `gather(self, dim, index)`
    Gather {
        /// the dim gathered along
        dim: i64,
    },
    /// `index_copy(self, dim, index, source)`: `self` with its slices `index[k]` along
    /// `dim` replaced by `source`'s slices `k` (`index` 1-D, `source` of self's shape
    /// but `len(index)` along `dim`; where an index repeats, the last slice wins). A
    /// decoding step's write into its KV cache, which the scheduler makes in place where
    /// `self` is state the program keeps and dies at the write.
    IndexCopy {
        /// the dim the slices are taken along
        dim: i64,
    },
    /// Kiln's sort along the last dim, its first step: each run of `run` elements of a
    /// row (the last run shorter) ordered on its own, as the positions within the row
    /// of the run's elements in that order (int64, `self`'s shape). The order is
    /// PyTorch's stable one: ascending (or descending) values, NaN the largest, -0.0
    /// equal to 0.0, and equal values by position. [`Op::MergeRuns`] is the second step.
    SortRuns {
        /// largest first
        descending: bool,
        /// elements in a run: a power of two
        run: i64,
    },
    /// Kiln's sort, a merge: operands `[x, runs]`, `runs` ordered in runs of `run`
    /// elements (by [`Op::SortRuns`] or a merge of half that run, with the same
    /// order); the positions within each row of `x` (int64, `x`'s shape) with each
    /// pair of neighbouring runs merged into one of `2 * run`. Each element's place
    /// is its place in its run plus the count of the other run's elements before it
    /// (by binary search).
    MergeRuns {
        /// largest first
        descending: bool,
        /// elements in a run: a power of two
        run: i64,
    },
    /// `_grouped_mm(a, offs)` of a 2-D `a` `[M, K]` by a 3-D `b` `[G, K, N]`, operands
    /// `[a, b, offs]` (a mixture of experts' product, its rows sorted by expert): rows
    /// `offs[g-1]..offs[g]` of `a` times `b[g]`, rows past the last offset zero; `[M, N]`
    /// in `a`'s dtype, 16-bit products summed in float32. The op table spells out
    /// `_grouped_mm`'s other layouts.
    GroupedMm,
    /// `cumsum(self, dim, dtype)`
    Cumsum {
        /// the dim
        dim: i64,
        /// the result dtype
        dtype: Option<DType>,
    },
    /// `diff(self, n, dim, prepend, append)`
    Diff {
        /// how many times
        n: i64,
        /// the dim
        dim: i64,
        /// a `prepend` operand follows `self`
        prepend: bool,
        /// an `append` operand follows
        append: bool,
    },
    /// `scaled_dot_product_attention(q, k, v, attn_mask?)`
    Attention {
        /// a mask operand follows `v` (bool: keep where true; float: added)
        mask: bool,
        /// `is_causal`: the upper triangle is masked out
        causal: bool,
        /// the score scale; `None` is `1/sqrt(E)`
        scale: Option<f64>,
        /// `enable_gqa`: `k`/`v` heads are shared by groups of query heads
        gqa: bool,
    },
    /// `convolution` / `conv1d` / `conv2d` / `conv3d` (not transposed)
    Conv {
        /// per spatial dim
        stride: Vec<i64>,
        /// per spatial dim (zero padding on both sides)
        padding: Vec<i64>,
        /// per spatial dim
        dilation: Vec<i64>,
        /// channel groups
        groups: i64,
        /// a bias operand follows the weight
        bias: bool,
    },
    /// `batch_norm` in inference / `_native_batch_norm_legit_no_training`: operands
    /// `input`, `weight`?, `bias`?, `running_mean`, `running_var`.
    BatchNorm {
        /// epsilon
        eps: f64,
        /// a weight operand is given
        weight: bool,
        /// a bias operand is given
        bias: bool,
        /// three outputs (the legit form: out, and two empty saved statistics)
        native: bool,
    },
    /// `max_pool2d` / `max_pool2d_with_indices` (the indices output is refused if read)
    MaxPool {
        /// window per spatial dim
        kernel: Vec<i64>,
        /// step per spatial dim
        stride: Vec<i64>,
        /// implicit -inf padding per spatial dim
        padding: Vec<i64>,
        /// per spatial dim
        dilation: Vec<i64>,
        /// round the output size up
        ceil_mode: bool,
        /// two outputs
        with_indices: bool,
    },
    /// `group_norm(input, num_groups, weight?, bias?, eps)` (one output) or
    /// `native_group_norm(input, weight?, bias?, N, C, HxW, group, eps)` (out, mean,
    /// rstd): operands `input`, `weight`?, `bias`?
    GroupNorm {
        /// channel groups
        groups: i64,
        /// epsilon
        eps: f64,
        /// a weight operand is given
        weight: bool,
        /// a bias operand is given
        bias: bool,
        /// three outputs
        native: bool,
    },
    /// `adaptive_avg_pool1d/2d(self, output_size)`: the last `output_size.len()` dims
    AdaptiveAvgPool {
        /// output size per spatial dim
        output_size: Vec<i64>,
    },
    /// `avg_pool1d/2d(self, kernel_size, stride, padding, ceil_mode, count_include_pad,
    /// divisor_override)` over the last `kernel.len()` dims
    AvgPool {
        /// window per spatial dim
        kernel: Vec<i64>,
        /// step per spatial dim
        stride: Vec<i64>,
        /// implicit zero padding per spatial dim
        padding: Vec<i64>,
        /// round the output size up
        ceil_mode: bool,
        /// the padding counts in the divisor
        count_include_pad: bool,
        /// a fixed divisor instead of the window's size
        divisor_override: Option<i64>,
    },
    /// `constant_pad_nd(self, pad, value)` / `pad(self, pad, mode, value)`: `pad` gives
    /// (before, after) pairs from the last dim backwards; negative amounts crop
    Pad {
        /// PyTorch's flat pad list
        pads: Vec<i64>,
        /// how the new elements are filled
        mode: PadMode,
        /// the fill value of `PadMode::Constant`
        value: f64,
    },
    /// `roll(self, shifts, dims)`: elements shifted cyclically (no dims: over the
    /// flattened tensor)
    Roll {
        /// shift per dim
        shifts: Vec<i64>,
        /// the dims (empty: the flattened tensor)
        dims: Vec<i64>,
    },
    /// `slice_scatter(self, src, dim, start, end, step)` / `select_scatter(self, src, dim,
    /// index)`: `self` with the slice (or selected index) replaced by `src`
    SliceScatter {
        /// the dim
        dim: i64,
        /// first index (may be negative)
        start: Option<i64>,
        /// one past the last index (may be negative or past the end)
        end: Option<i64>,
        /// step
        step: i64,
        /// `select_scatter`: `src` lacks the dim
        select: bool,
    },
    /// `copy(self, src)` / `fill(self, value)`: `src` broadcast to `self`'s shape in
    /// `self`'s dtype
    Copy,
    /// `type_as(self, other)`: `self` in `other`'s dtype
    TypeAs,
    /// `repeat(self, repeats)`: `self` tiled `repeats[i]` times along each dim (more
    /// repeats than dims add leading dims)
    Repeat {
        /// times per dim
        repeats: Vec<i64>,
    },
    /// `as_strided(self, size, stride, storage_offset)` over `self`'s contiguous
    /// elements (the importer checks that `self` is laid out contiguously)
    AsStrided {
        /// output sizes
        size: Vec<i64>,
        /// element strides into `self`'s flat elements
        stride: Vec<i64>,
        /// first element
        offset: i64,
    },
    /// `flatten(self, start_dim, end_dim)`: a view
    Flatten {
        /// first dim merged
        start: i64,
        /// last dim merged (inclusive)
        end: i64,
    },
}

impl Op {
    /// The size arguments that are not integers (an export's `SymInt`s): a `view`'s or
    /// `expand`'s sizes, a `slice`'s bounds, an `arange`'s end.
    pub fn symbolic_sizes(&self) -> Vec<&Size> {
        let sym = |s: &&Size| !s.is_const();
        match self {
            Op::Reshape { shape: v, .. }
            | Op::Expand { sizes: v }
            | Op::Full { size: Some(v), .. } => v.iter().filter(sym).collect(),
            Op::Slice { start, end, .. } => start.iter().chain(end).filter(sym).collect(),
            Op::Arange {
                end: Bound::Size(s),
                ..
            } => vec![s],
            _ => Vec::new(),
        }
    }

    /// The op with every symbolic size argument evaluated with each symbol at
    /// `value(id)`: what the reference interpreter runs at one call's sizes.
    pub fn at_sizes(
        &self,
        value: &dyn Fn(super::sym::SymId) -> i64,
    ) -> Result<Op, super::sym::SymError> {
        let at = |s: &Size| s.eval(value).map(Size::from);
        let all = |v: &[Size]| v.iter().map(at).collect::<Result<Vec<_>, _>>();
        let opt = |s: &Option<Size>| s.as_ref().map(at).transpose();
        Ok(match self {
            Op::Reshape { shape, view } => Op::Reshape {
                shape: all(shape)?,
                view: *view,
            },
            Op::Expand { sizes } => Op::Expand { sizes: all(sizes)? },
            Op::Full {
                size: Some(size),
                value,
                dtype,
            } => Op::Full {
                size: Some(all(size)?),
                value: *value,
                dtype: *dtype,
            },
            Op::Slice {
                dim,
                start,
                end,
                step,
            } => Op::Slice {
                dim: *dim,
                start: opt(start)?,
                end: opt(end)?,
                step: *step,
            },
            Op::Arange {
                start,
                end: Bound::Size(end),
                step,
                dtype,
            } => Op::Arange {
                start: *start,
                end: Bound::Scalar(Scalar::Int(end.eval(value)?)),
                step: *step,
                dtype: *dtype,
            },
            other => other.clone(),
        })
    }

    /// Whether PyTorch returns a list or tuple from this op (even of one tensor, as
    /// `split` of a dim into one piece does): its outputs are read through `getitem`.
    pub fn returns_sequence(&self) -> bool {
        matches!(
            self,
            Op::Split { .. }
                | Op::SplitWithSizes { .. }
                | Op::LayerNorm { native: true, .. }
                | Op::BatchNorm { native: true, .. }
                | Op::GroupNorm { native: true, .. }
                | Op::MaxPool {
                    with_indices: true,
                    ..
                }
        )
    }

    /// The ATen name this op prints as.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Input { .. } => "input",
            Op::Constant { .. } => "constant",
            Op::Unary(u) => UnaryOp::ALL
                .iter()
                .find(|(x, _)| x == u)
                .map_or("?", |(_, n)| n),
            Op::Gelu { .. } => "gelu",
            Op::Binary { op, .. } => match op {
                BinaryOp::DivTrunc | BinaryOp::DivFloor => "div",
                _ => BinaryOp::ALL
                    .iter()
                    .find(|(x, _)| x == op)
                    .map_or("?", |(_, n)| n),
            },
            Op::Where => "where",
            Op::Clamp { .. } => "clamp",
            Op::Cast { .. } => "_to_copy",
            Op::Reduce { op, .. } => match op {
                ReduceOp::Sum => "sum",
                ReduceOp::Mean => "mean",
                ReduceOp::Amax => "amax",
                ReduceOp::Amin => "amin",
                ReduceOp::Any => "any",
                ReduceOp::All => "all",
            },
            Op::Var { .. } => "var",
            Op::Softmax { log: true, .. } => "log_softmax",
            Op::Softmax { .. } => "softmax",
            Op::LayerNorm { native: true, .. } => "native_layer_norm",
            Op::LayerNorm { .. } => "layer_norm",
            Op::RmsNorm { .. } => "rms_norm",
            Op::Linear { .. } => "linear",
            Op::Addmm { .. } => "addmm",
            Op::Mm => "mm",
            Op::Bmm => "bmm",
            Op::Matmul => "matmul",
            Op::Reshape { view: true, .. } => "view",
            Op::Reshape { .. } => "reshape",
            Op::Permute { .. } => "permute",
            Op::Transpose { .. } => "transpose",
            Op::Unsqueeze { .. } => "unsqueeze",
            Op::Squeeze { .. } => "squeeze",
            Op::Expand { .. } => "expand",
            Op::Select { .. } => "select",
            Op::Slice { .. } => "slice",
            Op::Split { .. } => "split",
            Op::SplitWithSizes { .. } => "split_with_sizes",
            Op::GetItem { .. } => "getitem",
            Op::Contiguous => "contiguous",
            Op::Clone => "clone",
            Op::Cat { .. } => "cat",
            Op::NoOp(NoOpKind::Dropout) => "dropout",
            Op::NoOp(NoOpKind::Alias) => "alias",
            Op::NoOp(NoOpKind::AssertTensorMetadata) => "_assert_tensor_metadata",
            Op::Arange { .. } => "arange",
            Op::Full { .. } => "full",
            Op::Index { .. } => "index",
            Op::Gather { .. } => "gather",
            Op::IndexCopy { .. } => "index_copy",
            Op::GroupedMm => "_grouped_mm",
            Op::SortRuns { .. } => "sort_runs",
            Op::MergeRuns { .. } => "merge_runs",
            Op::Cumsum { .. } => "cumsum",
            Op::Diff { .. } => "diff",
            Op::Attention { .. } => "scaled_dot_product_attention",
            Op::Conv { .. } => "convolution",
            Op::BatchNorm { native: true, .. } => "_native_batch_norm_legit_no_training",
            Op::BatchNorm { .. } => "batch_norm",
            Op::MaxPool { .. } => "max_pool2d",
            Op::AdaptiveAvgPool { .. } => "adaptive_avg_pool2d",
            Op::AvgPool { .. } => "avg_pool2d",
            Op::GroupNorm { native: true, .. } => "native_group_norm",
            Op::GroupNorm { .. } => "group_norm",
            Op::Pad { .. } => "pad",
            Op::Roll { .. } => "roll",
            Op::SliceScatter { select: false, .. } => "slice_scatter",
            Op::SliceScatter { .. } => "select_scatter",
            Op::Copy => "copy",
            Op::TypeAs => "type_as",
            Op::Repeat { .. } => "repeat",
            Op::AsStrided { .. } => "as_strided",
            Op::Flatten { .. } => "flatten",
        }
    }

    /// Whether the output aliases its (first) input's storage: a view in PyTorch's sense.
    pub fn is_view(&self) -> bool {
        matches!(
            self,
            Op::Reshape { .. }
                | Op::Permute { .. }
                | Op::Transpose { .. }
                | Op::Unsqueeze { .. }
                | Op::Squeeze { .. }
                | Op::Expand { .. }
                | Op::Select { .. }
                | Op::Slice { .. }
                | Op::Flatten { .. }
        )
    }

    /// Whether a pass may evaluate, merge or drop this op freely: everything except the
    /// graph's inputs.
    pub fn is_pure(&self) -> bool {
        !matches!(self, Op::Input { .. })
    }

    /// The attributes as `key=value` text, for printers and CSE keys (unset optional
    /// attributes are left out).
    pub fn attr_text(&self) -> String {
        let s = format!("{self:?}");
        // Debug gives `Variant { a: 1, b: Some(2) }`; keep the braces' content, tidied.
        let (Some(a), Some(b)) = (s.find('{'), s.rfind('}')) else {
            return String::new();
        };
        if b <= a {
            return String::new();
        }
        let inner = &s[a + 1..b];
        let mut parts = vec![];
        let (mut depth, mut start) = (0i32, 0usize);
        for (i, c) in inner.char_indices() {
            match c {
                '[' | '(' | '{' => depth += 1,
                ']' | ')' | '}' => depth -= 1,
                ',' if depth == 0 => {
                    parts.push(&inner[start..i]);
                    start = i + 1;
                }
                _ => {}
            }
        }
        parts.push(&inner[start..]);
        parts
            .iter()
            .map(|p| p.trim())
            .filter(|p| !p.is_empty() && !p.ends_with(": None") && !p.starts_with("op: "))
            .map(|p| {
                let p = p.replacen(": ", "=", 1);
                match (p.find("Some("), p.ends_with(')')) {
                    (Some(i), true) => format!("{}{}", &p[..i], &p[i + 5..p.len() - 1]),
                    _ => p,
                }
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}
