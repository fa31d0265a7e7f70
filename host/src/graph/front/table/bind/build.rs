//! Builds the typed [`Op`] of a bound call, one function per op family.

use super::{bad, Bound, Raw, SigError};
use crate::graph::dtype::DType;
use crate::graph::ir::Scalar;
use crate::graph::ops::{BinaryOp, GeluApprox, NoOpKind, Op, PadMode, ReduceOp, UnaryOp};

/// The op `name` stands for with the bound arguments `b`.
pub(super) fn build(name: &str, b: &Bound) -> Result<Op, SigError> {
    if let Some((u, _)) = UnaryOp::ALL.iter().find(|(_, n)| *n == name) {
        return Ok(Op::Unary(*u));
    }
    if let Some(op) = binary(name, b)? {
        return Ok(op);
    }
    let families = [
        elementwise,
        creation,
        indexing,
        nn,
        pools,
        reductions,
        shapes,
    ];
    for family in families {
        if let Some(op) = family(name, b)? {
            return Ok(op);
        }
    }
    Err(SigError::UnknownOp(name.into()))
}

/// The binary functions ([`BinaryOp::ALL`]), `div` with its rounding mode.
fn binary(name: &str, b: &Bound) -> Result<Option<Op>, SigError> {
    let Some((op, _)) = BinaryOp::ALL.iter().find(|(_, n)| *n == name) else {
        return Ok(None);
    };

    let mut op = *op;
    if op == BinaryOp::Div {
        op = match b.string("rounding_mode")? {
            None => BinaryOp::Div,
            Some("trunc") => BinaryOp::DivTrunc,
            Some("floor") => BinaryOp::DivFloor,
            Some(other) => {
                return Err(bad(
                    "rounding_mode",
                    "\"trunc\" or \"floor\"",
                    &Raw::Str(other.into()),
                ))
            }
        };
    }
    let alpha = if matches!(op, BinaryOp::Add | BinaryOp::Sub) {
        b.scalar("alpha")?
    } else {
        None
    };
    Ok(Some(Op::Binary { op, alpha }))
}

/// The elementwise ops that are not a plain unary or binary function.
fn elementwise(name: &str, b: &Bound) -> Result<Option<Op>, SigError> {
    Ok(Some(match name {
        "gelu" => Op::Gelu {
            approximate: match b.string("approximate")? {
                None | Some("none") => GeluApprox::None,
                Some("tanh") => GeluApprox::Tanh,
                Some(o) => {
                    return Err(bad(
                        "approximate",
                        "\"none\" or \"tanh\"",
                        &Raw::Str(o.into()),
                    ))
                }
            },
        },
        "where" => Op::Where,
        "clamp" => Op::Clamp {
            min: b.scalar("min")?,
            max: b.scalar("max")?,
        },
        "to" | "_to_copy" => match b.dtype("dtype")? {
            Some(dtype) => Op::Cast { dtype },
            // `to(device)` and `_to_copy` without a dtype keep the values as they are.
            None => Op::NoOp(NoOpKind::Alias),
        },
        "logical_not" => Op::Binary {
            op: BinaryOp::Eq,
            alpha: None,
        },
        "min" | "max" => {
            if b.present("dim") {
                return Err(bad(
                    "dim",
                    "no dim: `min`/`max` over a dim give values and indices, which Kiln does not compute (amin/amax give the values)",
                    b.get("dim").unwrap_or(&Raw::None),
                ));
            }
            match (name, b.present("other")) {
                ("min", true) => Op::Binary {
                    op: BinaryOp::Minimum,
                    alpha: None,
                },
                ("max", true) => Op::Binary {
                    op: BinaryOp::Maximum,
                    alpha: None,
                },
                ("min", false) => Op::Reduce {
                    op: ReduceOp::Amin,
                    dims: None,
                    keepdim: false,
                    dtype: None,
                },
                _ => Op::Reduce {
                    op: ReduceOp::Amax,
                    dims: None,
                    keepdim: false,
                    dtype: None,
                },
            }
        }
        "hardtanh" => Op::Clamp {
            min: Some(b.scalar("min_val")?.unwrap_or(Scalar::Float(-1.0))),
            max: Some(b.scalar("max_val")?.unwrap_or(Scalar::Float(1.0))),
        },
        "relu6" => Op::Clamp {
            min: Some(Scalar::Int(0)),
            max: Some(Scalar::Int(6)),
        },
        "masked_fill" => Op::Where,
        "type_as" => Op::TypeAs,
        "copy" | "fill" => Op::Copy,
        _ => return Ok(None),
    }))
}

/// The ops that make a tensor from sizes and values.
fn creation(name: &str, b: &Bound) -> Result<Option<Op>, SigError> {
    Ok(Some(match name {
        "arange" => {
            let (start, end) = match (b.bound("start")?, b.bound("end")?) {
                (Some(s), Some(e)) => match s.scalar() {
                    Some(s) => (s, e),
                    None => {
                        return Err(bad(
                            "start",
                            "an integer (a symbolic start is not taken)",
                            &raw_of(&s),
                        ))
                    }
                },
                (Some(e), None) | (None, Some(e)) => (Scalar::Int(0), e),
                (None, None) => {
                    return Err(SigError::Missing {
                        op: name.into(),
                        name: "end".into(),
                    })
                }
            };
            let step = b.scalar("step")?.unwrap_or(Scalar::Int(1));
            if step.to_f64() == 0.0 || !step.to_f64().is_finite() {
                return Err(bad(
                    "step",
                    "a finite non-zero number",
                    &Raw::Float(step.to_f64()),
                ));
            }
            Op::Arange {
                start,
                end,
                step,
                dtype: b.dtype("dtype")?,
            }
        }
        "full" | "zeros" | "ones" | "scalar_tensor" | "full_like" | "zeros_like" | "ones_like"
        | "new_full" | "new_ones" | "new_zeros" => {
            let value = match name {
                "zeros" | "zeros_like" | "new_zeros" => Scalar::Int(0),
                "ones" | "ones_like" | "new_ones" => Scalar::Int(1),
                "scalar_tensor" => b.scalar("s")?.unwrap_or(Scalar::Int(0)),
                _ => b.scalar("fill_value")?.unwrap_or(Scalar::Int(0)),
            };
            let size = match name {
                "scalar_tensor" => Some(vec![]),
                "full_like" | "zeros_like" | "ones_like" => None,
                _ => Some(b.sizes("size")?),
            };
            // `scalar_tensor`, `zeros` and `ones` default to float32 (the default
            // dtype) whatever their value's kind; `full` takes its value's kind.
            let dtype = match (b.dtype("dtype")?, name) {
                (None, "scalar_tensor" | "zeros" | "ones") => Some(DType::Float32),
                (d, _) => d,
            };
            Op::Full { size, value, dtype }
        }
        _ => return Ok(None),
    }))
}

/// Gathers, scatters and the ops that pick elements by position.
fn indexing(name: &str, b: &Bound) -> Result<Option<Op>, SigError> {
    Ok(Some(match name {
        "embedding" => Op::Index {
            indexed: vec![true],
            nonnegative: true,
        },
        "index" => match b.get("indices") {
            Some(Raw::List(l)) => Op::Index {
                indexed: l.iter().map(|x| matches!(x, Raw::Str(_))).collect(),
                nonnegative: false,
            },
            _ => {
                return Err(SigError::Missing {
                    op: name.into(),
                    name: "indices".into(),
                })
            }
        },
        "gather" => Op::Gather {
            dim: b.int_or("dim", 0)?,
        },
        "_grouped_mm" => Op::GroupedMm,
        "sort_runs" => Op::SortRuns {
            descending: b.boolean("descending")?,
            run: b.int_or("run", 0)?,
        },
        "merge_runs" => Op::MergeRuns {
            descending: b.boolean("descending")?,
            run: b.int_or("run", 0)?,
        },
        "index_copy" => Op::IndexCopy {
            dim: b.int_or("dim", 0)?,
        },
        "cumsum" => Op::Cumsum {
            dim: b.int_or("dim", 0)?,
            dtype: b.dtype("dtype")?,
        },
        "diff" => {
            let n = b.int_or("n", 1)?;
            if n < 0 {
                return Err(bad("n", "a non-negative integer", &Raw::Int(n)));
            }
            Op::Diff {
                n,
                dim: b.int_or("dim", -1)?,
                prepend: b.present("prepend"),
                append: b.present("append"),
            }
        }
        "roll" => Op::Roll {
            shifts: b.list("shifts")?,
            dims: b.ints("dims")?.unwrap_or_default(),
        },
        "slice_scatter" => {
            let step = b.int_or("step", 1)?;
            if step <= 0 {
                return Err(bad("step", "a positive integer", &Raw::Int(step)));
            }
            Op::SliceScatter {
                dim: b.int_or("dim", 0)?,
                start: b.int("start")?,
                end: b.int("end")?,
                step,
                select: false,
            }
        }
        "select_scatter" => {
            let index = b.int_or("index", 0)?;
            Op::SliceScatter {
                dim: b.int_or("dim", 0)?,
                start: Some(index),
                end: Some(index.wrapping_add(1)),
                step: 1,
                select: true,
            }
        }
        "as_strided" => {
            let size = b.list("size")?;
            let stride = b.list("stride")?;
            if size.len() != stride.len() {
                return Err(bad(
                    "stride",
                    &format!("{} strides, one per size", size.len()),
                    b.get("stride").unwrap_or(&Raw::None),
                ));
            }
            Op::AsStrided {
                size,
                stride,
                offset: b.int_or("storage_offset", 0)?,
            }
        }
        "repeat" => Op::Repeat {
            repeats: b.list("repeats")?,
        },
        _ => return Ok(None),
    }))
}

/// The neural-network layers: attention, convolutions, norms and products.
fn nn(name: &str, b: &Bound) -> Result<Option<Op>, SigError> {
    Ok(Some(match name {
        "scaled_dot_product_attention" => {
            if b.float("dropout_p")?.unwrap_or(0.0) != 0.0 {
                return Err(bad(
                    "dropout_p",
                    "0 (dropout is a training feature; export the model in eval mode)",
                    b.get("dropout_p").unwrap_or(&Raw::None),
                ));
            }
            Op::Attention {
                mask: b.present("attn_mask"),
                causal: b.boolean("is_causal")?,
                scale: b.float("scale")?,
                gqa: b.boolean("enable_gqa")?,
            }
        }
        "convolution" | "conv1d" | "conv2d" | "conv3d" => {
            if b.boolean("transposed")? {
                return Err(bad(
                    "transposed",
                    "false (transposed convolution is not supported)",
                    &Raw::Bool(true),
                ));
            }
            let spatial = match name {
                "conv1d" => 1,
                "conv3d" => 3,
                _ => 2,
            };
            // PyTorch lets one number stand for every spatial dim.
            let per_dim = |n: &str, default: i64| -> Result<Vec<i64>, SigError> {
                Ok(match b.ints(n)? {
                    None => vec![default; spatial],
                    Some(v) if v.len() == 1 => vec![v[0]; spatial],
                    Some(v) => v,
                })
            };
            let groups = b.int_or("groups", 1)?;
            if groups < 1 {
                return Err(bad("groups", "a positive integer", &Raw::Int(groups)));
            }
            Op::Conv {
                stride: per_dim("stride", 1)?,
                padding: per_dim("padding", 0)?,
                dilation: per_dim("dilation", 1)?,
                groups,
                bias: b.present("bias"),
            }
        }
        "batch_norm" | "_native_batch_norm_legit_no_training" => {
            if b.boolean("training")? {
                return Err(bad(
                    "training",
                    "false (batch statistics are a training feature; export in eval mode)",
                    &Raw::Bool(true),
                ));
            }
            Op::BatchNorm {
                eps: b.float("eps")?.unwrap_or(1e-5),
                weight: b.present("weight"),
                bias: b.present("bias"),
                native: name.starts_with('_'),
            }
        }
        "group_norm" | "native_group_norm" => Op::GroupNorm {
            groups: if name == "group_norm" {
                b.int_or("num_groups", 1)?
            } else {
                b.int_or("group", 1)?
            },
            eps: b.float("eps")?.unwrap_or(1e-5),
            weight: b.present("weight"),
            bias: b.present("bias"),
            native: name == "native_group_norm",
        },
        "baddbmm" => Op::Addmm {
            beta: b.scalar("beta")?.unwrap_or(Scalar::Int(1)),
            alpha: b.scalar("alpha")?.unwrap_or(Scalar::Int(1)),
        },
        "layer_norm" | "native_layer_norm" => Op::LayerNorm {
            normalized_shape: b.list("normalized_shape")?,
            eps: b.float("eps")?.unwrap_or(1e-5),
            weight: b.present("weight"),
            bias: b.present("bias"),
            native: name == "native_layer_norm",
        },
        "rms_norm" => Op::RmsNorm {
            normalized_shape: b.list("normalized_shape")?,
            eps: b.float("eps")?,
            weight: b.present("weight"),
        },
        "linear" => Op::Linear {
            bias: b.present("bias"),
        },
        "addmm" => Op::Addmm {
            beta: b.scalar("beta")?.unwrap_or(Scalar::Int(1)),
            alpha: b.scalar("alpha")?.unwrap_or(Scalar::Int(1)),
        },
        "mm" => Op::Mm,
        "bmm" => Op::Bmm,
        "matmul" => Op::Matmul,
        _ => return Ok(None),
    }))
}

/// Reductions and softmaxes.
fn reductions(name: &str, b: &Bound) -> Result<Option<Op>, SigError> {
    let reduce = |op| -> Result<Op, SigError> {
        let dtype = if matches!(op, ReduceOp::Sum | ReduceOp::Mean) {
            b.dtype("dtype")?
        } else {
            None
        };
        Ok(Op::Reduce {
            op,
            dims: b.ints("dim")?.filter(|d| !d.is_empty()),
            keepdim: b.boolean("keepdim")?,
            dtype,
        })
    };
    let softmax = |log: bool| -> Result<Op, SigError> {
        let (half_to_float, dtype) = if name.starts_with('_') {
            (b.boolean("half_to_float")?, None)
        } else {
            let dtype = b.dtype("dtype")?;
            if dtype.is_some_and(|d| !d.is_float()) {
                return Err(bad(
                    "dtype",
                    "a floating-point dtype",
                    b.get("dtype").unwrap_or(&Raw::None),
                ));
            }
            (false, dtype)
        };
        Ok(Op::Softmax {
            dim: b.int_or("dim", 0)?,
            log,
            half_to_float,
            dtype,
        })
    };
    Ok(Some(match name {
        "sum" => reduce(ReduceOp::Sum)?,
        "mean" => reduce(ReduceOp::Mean)?,
        "amax" => reduce(ReduceOp::Amax)?,
        "amin" => reduce(ReduceOp::Amin)?,
        "any" => reduce(ReduceOp::Any)?,
        "all" => reduce(ReduceOp::All)?,
        "var" => {
            let unbiased = match b.get("unbiased") {
                Some(Raw::Bool(u)) => Some(*u),
                Some(r) => return Err(bad("unbiased", "a bool", r)),
                None => None,
            };
            let correction = match (b.float("correction")?, unbiased) {
                (Some(_), Some(_)) => return Err(SigError::Twice("correction/unbiased".into())),
                (Some(c), None) => c,
                (None, Some(u)) => u as i64 as f64,
                (None, None) => 1.0,
            };
            Op::Var {
                dims: b.ints("dim")?.filter(|d| !d.is_empty()),
                correction,
                keepdim: b.boolean("keepdim")?,
            }
        }
        "softmax" | "_softmax" => softmax(false)?,
        "log_softmax" | "_log_softmax" => softmax(true)?,
        _ => return Ok(None),
    }))
}

/// Views, shape changes, joins and the ops that pass their operand through.
fn shapes(name: &str, b: &Bound) -> Result<Option<Op>, SigError> {
    Ok(Some(match name {
        "flatten" => Op::Flatten {
            start: b.int_or("start_dim", 0)?,
            end: b.int_or("end_dim", -1)?,
        },
        "detach" | "lift_fresh_copy" => Op::NoOp(NoOpKind::Alias),
        "reshape" => Op::Reshape {
            shape: b.sizes("shape")?,
            view: false,
        },
        "view" => Op::Reshape {
            shape: b.sizes("size")?,
            view: true,
        },
        "permute" => Op::Permute {
            dims: b.list("dims")?,
        },
        "transpose" => Op::Transpose {
            dim0: b.int_or("dim0", 0)?,
            dim1: b.int_or("dim1", 0)?,
        },
        "unsqueeze" => Op::Unsqueeze {
            dim: b.int_or("dim", 0)?,
        },
        "squeeze" => Op::Squeeze {
            dims: b.ints("dim")?,
        },
        "expand" => Op::Expand {
            sizes: b.sizes("size")?,
        },
        "select" => Op::Select {
            dim: b.int_or("dim", 0)?,
            index: b.int_or("index", 0)?,
        },
        "slice" => {
            let step = b.int_or("step", 1)?;
            if step <= 0 {
                return Err(bad("step", "a positive integer", &Raw::Int(step)));
            }
            Op::Slice {
                dim: b.int_or("dim", 0)?,
                start: b.size("start")?,
                end: b.size("end")?,
                step,
            }
        }
        "split" => {
            let split_size = b.int_or("split_size", 1)?;
            if split_size <= 0 {
                return Err(bad(
                    "split_size",
                    "a positive integer",
                    &Raw::Int(split_size),
                ));
            }
            Op::Split {
                split_size,
                dim: b.int_or("dim", 0)?,
            }
        }
        "split_with_sizes" => Op::SplitWithSizes {
            sizes: b.list("split_sizes")?,
            dim: b.int_or("dim", 0)?,
        },
        "getitem" => {
            let index = b.int_or("index", 0)?;
            if index < 0 {
                return Err(bad("index", "a non-negative integer", &Raw::Int(index)));
            }
            Op::GetItem { index }
        }
        "contiguous" => Op::Contiguous,
        "clone" => Op::Clone,
        "cat" => Op::Cat {
            dim: b.int_or("dim", 0)?,
        },
        "dropout" => {
            // Inference: the identity. A training graph's dropout draws random masks,
            // which a compiled inference graph cannot reproduce.
            if b.boolean("train")? && b.float("p")?.unwrap_or(0.5) > 0.0 {
                return Err(bad(
                    "train",
                    "false (Kiln compiles inference graphs; export the model after `model.eval()`)",
                    &Raw::Bool(true),
                ));
            }
            Op::NoOp(NoOpKind::Dropout)
        }
        "alias" => Op::NoOp(NoOpKind::Alias),
        "_assert_tensor_metadata" => Op::NoOp(NoOpKind::AssertTensorMetadata),
        _ => return Ok(None),
    }))
}

/// Pools and pads.
fn pools(name: &str, b: &Bound) -> Result<Option<Op>, SigError> {
    Ok(Some(match name {
        "max_pool2d" | "max_pool2d_with_indices" => {
            let kernel = b.list("kernel_size")?;
            let two = |v: Vec<i64>| if v.len() == 1 { vec![v[0]; 2] } else { v };
            let kernel = two(kernel);
            let stride = match b.ints("stride")? {
                None => kernel.clone(),
                Some(v) if v.is_empty() => kernel.clone(),
                Some(v) => two(v),
            };
            Op::MaxPool {
                stride,
                padding: two(b.ints("padding")?.unwrap_or_else(|| vec![0])),
                dilation: two(b.ints("dilation")?.unwrap_or_else(|| vec![1])),
                kernel,
                ceil_mode: b.boolean("ceil_mode")?,
                with_indices: name.ends_with("indices"),
            }
        }
        "adaptive_avg_pool2d"
        | "_adaptive_avg_pool2d"
        | "adaptive_avg_pool1d"
        | "adaptive_avg_pool3d"
        | "_adaptive_avg_pool3d" => {
            let size = b.list("output_size")?;
            let dims = if name.ends_with("1d") {
                1
            } else if name.ends_with("3d") {
                3
            } else {
                2
            };
            Op::AdaptiveAvgPool {
                output_size: if size.len() == 1 {
                    vec![size[0]; dims]
                } else {
                    size
                },
            }
        }
        "avg_pool1d" | "avg_pool2d" => {
            let dims = if name.ends_with("1d") { 1 } else { 2 };
            let widen = |v: Vec<i64>| if v.len() == 1 { vec![v[0]; dims] } else { v };
            let kernel = widen(b.list("kernel_size")?);
            let stride = match b.ints("stride")? {
                None => kernel.clone(),
                Some(v) if v.is_empty() => kernel.clone(),
                Some(v) => widen(v),
            };
            let count_include_pad = match b.get("count_include_pad") {
                None => true,
                Some(Raw::Bool(v)) => *v,
                Some(r) => return Err(bad("count_include_pad", "a bool", r)),
            };
            let divisor_override = b.int("divisor_override")?;
            if divisor_override.is_some_and(|d| d == 0) {
                return Err(bad("divisor_override", "a non-zero integer", &Raw::Int(0)));
            }
            Op::AvgPool {
                stride,
                padding: widen(b.ints("padding")?.unwrap_or_else(|| vec![0])),
                kernel,
                ceil_mode: b.boolean("ceil_mode")?,
                count_include_pad,
                divisor_override,
            }
        }
        "constant_pad_nd" | "pad" => {
            let pads = b.list("pad")?;
            let mode = match b.string("mode")? {
                None | Some("constant") => PadMode::Constant,
                Some("reflect") => PadMode::Reflect,
                Some("replicate") => PadMode::Replicate,
                Some("circular") => PadMode::Circular,
                Some(o) => {
                    return Err(bad(
                        "mode",
                        "\"constant\", \"reflect\", \"replicate\" or \"circular\"",
                        &Raw::Str(o.into()),
                    ))
                }
            };
            if pads.len() % 2 != 0 {
                return Err(bad(
                    "pad",
                    "an even number of amounts",
                    b.get("pad").unwrap_or(&Raw::None),
                ));
            }
            Op::Pad {
                pads,
                mode,
                value: b.float("value")?.unwrap_or(0.0),
            }
        }
        _ => return Ok(None),
    }))
}

/// A bound as the file gave it, for messages.
fn raw_of(b: &crate::graph::ops::Bound) -> Raw {
    match b {
        crate::graph::ops::Bound::Scalar(Scalar::Int(i)) => Raw::Int(*i),
        crate::graph::ops::Bound::Scalar(Scalar::Float(f)) => Raw::Float(*f),
        crate::graph::ops::Bound::Scalar(Scalar::Bool(v)) => Raw::Bool(*v),
        crate::graph::ops::Bound::Size(s) => Raw::Size(s.clone()),
    }
}
