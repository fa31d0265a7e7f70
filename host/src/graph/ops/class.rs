//! What each op is to the passes and the scheduler, as exhaustive matches: adding an
//! [`Op`] variant fails to compile until it is classified here.

use super::{BinaryOp, Op, ReduceOp, UnaryOp};

impl Op {
    /// Whether `passes/decompose.rs` spells this op out into primitive ops before
    /// scheduling (where it can). One exhaustive `match`: a new variant must say.
    pub fn is_composite(&self) -> bool {
        match self {
            Op::Softmax { .. }
            | Op::LayerNorm { .. }
            | Op::RmsNorm { .. }
            | Op::Var { .. }
            | Op::Gelu { .. }
            | Op::Linear { .. }
            | Op::Addmm { .. }
            | Op::Matmul
            | Op::GroupedMm
            | Op::Cumsum { .. }
            | Op::Diff { .. }
            | Op::Attention { .. }
            | Op::BatchNorm { .. }
            | Op::MaxPool { .. }
            | Op::AdaptiveAvgPool { .. }
            | Op::AvgPool { .. }
            | Op::GroupNorm { .. }
            | Op::Pad { .. }
            | Op::Roll { .. }
            | Op::SliceScatter { .. }
            | Op::Copy
            | Op::TypeAs
            | Op::AsStrided { .. }
            | Op::Repeat { .. } => true,
            Op::Unary(u) => *u == UnaryOp::Silu,
            Op::Reduce { op, .. } => matches!(op, ReduceOp::Any | ReduceOp::All),
            // A convolution's bias becomes an add; the convolution itself is a kernel.
            Op::Conv { bias, .. } => *bias,
            Op::Input { .. }
            | Op::Constant { .. }
            | Op::Binary { .. }
            | Op::Where
            | Op::Clamp { .. }
            | Op::Cast { .. }
            | Op::Mm
            | Op::Bmm
            | Op::Reshape { .. }
            | Op::Permute { .. }
            | Op::Transpose { .. }
            | Op::Unsqueeze { .. }
            | Op::Squeeze { .. }
            | Op::Expand { .. }
            | Op::Select { .. }
            | Op::Slice { .. }
            | Op::Flatten { .. }
            | Op::Split { .. }
            | Op::SplitWithSizes { .. }
            | Op::GetItem { .. }
            | Op::Contiguous
            | Op::Clone
            | Op::Cat { .. }
            | Op::NoOp(_)
            | Op::Arange { .. }
            | Op::Full { .. }
            | Op::Index { .. }
            | Op::Gather { .. }
            | Op::IndexCopy { .. }
            | Op::SortRuns { .. }
            | Op::MergeRuns { .. } => false,
        }
    }

    /// Whether each element of the result is a function of the operands'
    /// elements at the same (broadcast) position alone: unary and binary math,
    /// `gelu`, `where`, `clamp` and casts. Such an op commutes with a permute of
    /// all its operands.
    pub fn is_elementwise(&self) -> bool {
        matches!(
            self,
            Op::Unary(_)
                | Op::Gelu { .. }
                | Op::Binary { .. }
                | Op::Where
                | Op::Clamp { .. }
                | Op::Cast { .. }
        )
    }

    /// Whether computing this elementwise op costs more per element than reading its
    /// result from memory: a transcendental function, a division, a power (constant
    /// folding keeps such tables, `passes/const_fold.rs`). Sign changes, roundings,
    /// comparisons, sums and products are cheaper than a read.
    pub fn costs_more_than_a_read(&self) -> bool {
        use UnaryOp::*;
        match self {
            Op::Unary(u) => !matches!(
                u,
                Abs | Neg | Relu | Floor | Ceil | Round | Trunc | Sign | Hardsigmoid | Hardswish
            ),
            Op::Gelu { .. } => true,
            Op::Binary { op, .. } => matches!(
                op,
                BinaryOp::Div
                    | BinaryOp::DivTrunc
                    | BinaryOp::DivFloor
                    | BinaryOp::Pow
                    | BinaryOp::Fmod
                    | BinaryOp::Remainder
                    | BinaryOp::Atan2
                    | BinaryOp::Hypot
            ),
            _ => false,
        }
    }

    /// Whether this op contracts its operands (a matrix product, a convolution,
    /// attention): its work grows faster than its operands and its result.
    pub fn is_product(&self) -> bool {
        matches!(
            self,
            Op::Mm
                | Op::Bmm
                | Op::Matmul
                | Op::Linear { .. }
                | Op::Addmm { .. }
                | Op::Conv { .. }
                | Op::Attention { .. }
                | Op::GroupedMm
        )
    }

    /// Whether the scheduler reads this op inline, in the kernels of its users
    /// (pointwise ops, joins and pieces, and views that may not stay strided), rather
    /// than giving it a kernel, an extern call or a buffer of its own. One exhaustive
    /// `match`: a new variant must say.
    pub fn reads_inline(&self) -> bool {
        match self {
            Op::Unary(_)
            | Op::Gelu { .. }
            | Op::Binary { .. }
            | Op::Where
            | Op::Clamp { .. }
            | Op::Cast { .. }
            | Op::Cat { .. }
            | Op::Split { .. }
            | Op::SplitWithSizes { .. }
            | Op::GetItem { .. }
            | Op::Contiguous
            | Op::Clone
            | Op::NoOp(_)
            | Op::Index { .. }
            | Op::Gather { .. } => true,
            Op::Reshape { .. }
            | Op::Permute { .. }
            | Op::Transpose { .. }
            | Op::Unsqueeze { .. }
            | Op::Squeeze { .. }
            | Op::Expand { .. }
            | Op::Select { .. }
            | Op::Slice { .. }
            | Op::Flatten { .. } => self.is_view(),
            Op::Input { .. }
            | Op::Constant { .. }
            | Op::Reduce { .. }
            | Op::Var { .. }
            | Op::Softmax { .. }
            | Op::LayerNorm { .. }
            | Op::RmsNorm { .. }
            | Op::Linear { .. }
            | Op::Addmm { .. }
            | Op::Mm
            | Op::Bmm
            | Op::Matmul
            | Op::Arange { .. }
            | Op::Full { .. }
            | Op::Cumsum { .. }
            | Op::Diff { .. }
            | Op::Attention { .. }
            | Op::Conv { .. }
            | Op::BatchNorm { .. }
            | Op::MaxPool { .. }
            | Op::GroupNorm { .. }
            | Op::AdaptiveAvgPool { .. }
            | Op::AvgPool { .. }
            | Op::Pad { .. }
            | Op::Roll { .. }
            | Op::SliceScatter { .. }
            | Op::Copy
            | Op::TypeAs
            | Op::Repeat { .. }
            | Op::AsStrided { .. }
            | Op::IndexCopy { .. }
            | Op::SortRuns { .. }
            | Op::MergeRuns { .. }
            | Op::GroupedMm => false,
        }
    }
}
