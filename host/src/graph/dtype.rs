//! Element types and PyTorch's type-promotion rules.
//!
//! This module only answers questions about dtypes (categories, promotion, rounding a
//! float64 value to what a tensor of the dtype can hold). It must never look at shapes
//! or at the graph.

use std::fmt;

/// The element types Kiln supports, spelled as in the `kiln-graph/1` format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    /// `bool`
    Bool,
    /// `int32`
    Int32,
    /// `int64`
    Int64,
    /// `float16` (IEEE half)
    Float16,
    /// `bfloat16`
    BFloat16,
    /// `float32`, also PyTorch's default floating dtype
    Float32,
    /// `float64`
    Float64,
}

/// PyTorch's ordering of dtype categories: a higher category wins promotion against a
/// lower one regardless of operand kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Category {
    /// `bool`
    Bool,
    /// signed integers
    Integer,
    /// floating point
    Float,
}

impl DType {
    /// All dtypes, in the order the documentation lists them.
    pub const ALL: [DType; 7] = [
        DType::Float32,
        DType::Float16,
        DType::BFloat16,
        DType::Float64,
        DType::Int64,
        DType::Int32,
        DType::Bool,
    ];

    /// Parses the format's spelling (`float32`, ...).
    pub fn parse(s: &str) -> Option<DType> {
        DType::ALL.into_iter().find(|d| d.name() == s)
    }

    /// The format's spelling.
    pub fn name(self) -> &'static str {
        match self {
            DType::Bool => "bool",
            DType::Int32 => "int32",
            DType::Int64 => "int64",
            DType::Float16 => "float16",
            DType::BFloat16 => "bfloat16",
            DType::Float32 => "float32",
            DType::Float64 => "float64",
        }
    }

    /// Bytes per element in tensor files.
    pub fn size_bytes(self) -> usize {
        match self {
            DType::Bool => 1,
            DType::Float16 | DType::BFloat16 => 2,
            DType::Int32 | DType::Float32 => 4,
            DType::Int64 | DType::Float64 => 8,
        }
    }

    /// Decodes raw little-endian elements of this dtype (tensor files, `.pt2`
    /// weights, the cpu runtime's buffers); a trailing partial element is ignored.
    pub fn decode_le(self, bytes: &[u8]) -> Vec<f64> {
        bytes
            .chunks_exact(self.size_bytes())
            .map(|c| match self {
                DType::Bool => f64::from(u8::from(c[0] != 0)),
                DType::Float16 => half::f16::from_le_bytes([c[0], c[1]]).to_f64(),
                DType::BFloat16 => half::bf16::from_le_bytes([c[0], c[1]]).to_f64(),
                DType::Int32 => f64::from(i32::from_le_bytes([c[0], c[1], c[2], c[3]])),
                DType::Float32 => f64::from(f32::from_le_bytes([c[0], c[1], c[2], c[3]])),
                DType::Int64 => {
                    i64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]) as f64
                }
                DType::Float64 => {
                    f64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]])
                }
            })
            .collect()
    }

    /// Encodes values (already rounded to this dtype) as raw little-endian elements.
    pub fn encode_le(self, values: &[f64]) -> Vec<u8> {
        let mut out = Vec::with_capacity(values.len() * self.size_bytes());
        for &v in values {
            match self {
                DType::Bool => out.push(u8::from(v != 0.0)),
                DType::Float16 => out.extend(half::f16::from_f64(v).to_le_bytes()),
                DType::BFloat16 => out.extend(half::bf16::from_f64(v).to_le_bytes()),
                DType::Int32 => out.extend((v as i32).to_le_bytes()),
                DType::Float32 => out.extend((v as f32).to_le_bytes()),
                DType::Int64 => out.extend((v as i64).to_le_bytes()),
                DType::Float64 => out.extend(v.to_le_bytes()),
            }
        }
        out
    }

    /// The promotion category.
    pub fn category(self) -> Category {
        match self {
            DType::Bool => Category::Bool,
            DType::Int32 | DType::Int64 => Category::Integer,
            _ => Category::Float,
        }
    }

    /// Whether this is a floating-point dtype.
    pub fn is_float(self) -> bool {
        self.category() == Category::Float
    }

    /// Whether this is a 16-bit float, which PyTorch computes in float32 internally.
    pub fn is_low_precision(self) -> bool {
        matches!(self, DType::Float16 | DType::BFloat16)
    }

    /// Rounds a float64 value to the nearest value this dtype holds, converting the way
    /// a PyTorch cast does (floats round to nearest even, integers truncate toward zero
    /// and wrap, bool is "non-zero").
    pub fn round(self, v: f64) -> f64 {
        match self {
            DType::Float64 => v,
            DType::Float32 => v as f32 as f64,
            DType::Float16 => half::f16::from_f64(v).to_f64(),
            DType::BFloat16 => half::bf16::from_f64(v).to_f64(),
            // NaN and infinities have no integer value; `as` saturates, which is as good as
            // PyTorch's undefined behaviour and never panics.
            DType::Int64 => v.trunc() as i64 as f64,
            DType::Int32 => (v.trunc() as i64) as i32 as f64,
            DType::Bool => {
                if v != 0.0 {
                    1.0
                } else {
                    0.0
                }
            }
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// `torch.promote_types` for two dtypes.
pub fn promote(a: DType, b: DType) -> DType {
    use DType::*;
    if a == b {
        return a;
    }
    match (a.category(), b.category()) {
        (Category::Float, Category::Float) => {
            if a == Float64 || b == Float64 {
                Float64
            } else {
                // f16 with bf16 has no common 16-bit type: PyTorch gives float32.
                Float32
            }
        }
        (ca, cb) if ca != cb => {
            if ca > cb {
                a
            } else {
                b
            }
        }
        _ => a.max(b),
    }
}

/// How an operand takes part in type promotion (PyTorch's `ResultTypeState`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OperandKind {
    /// A tensor with at least one dimension.
    Dim,
    /// A zero-dimensional tensor.
    ZeroDim,
    /// A Python number (a "wrapped number"): contributes only its category.
    Scalar,
}

/// `torch.result_type` over operands: dimensioned tensors decide the dtype unless a
/// zero-dim tensor or a scalar is of a higher category, in which case that one does (a
/// float scalar then gives the default dtype, float32).
pub fn result_type(operands: &[(DType, OperandKind)]) -> Option<DType> {
    let mut dim: Option<DType> = None;
    let mut zero: Option<DType> = None;
    let mut wrapped: Option<DType> = None;
    for &(d, kind) in operands {
        let slot = match kind {
            OperandKind::Dim => &mut dim,
            OperandKind::ZeroDim => &mut zero,
            OperandKind::Scalar => &mut wrapped,
        };
        let d = if kind == OperandKind::Scalar {
            default_for(d.category())
        } else {
            d
        };
        *slot = Some(slot.map_or(d, |s| promote(s, d)));
    }
    combine(dim, combine(zero, wrapped))
}

fn combine(higher: Option<DType>, lower: Option<DType>) -> Option<DType> {
    match (higher, lower) {
        (None, l) => l,
        (h, None) => h,
        (Some(h), Some(l)) => {
            if h.is_float() {
                Some(h)
            } else if h == DType::Bool || l.category() > h.category() {
                Some(promote(h, l))
            } else {
                Some(h)
            }
        }
    }
}

/// The dtype a Python number of the category becomes (`torch.get_default_dtype()` for
/// floats).
pub fn default_for(c: Category) -> DType {
    match c {
        Category::Bool => DType::Bool,
        Category::Integer => DType::Int64,
        Category::Float => DType::Float32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use OperandKind::*;

    #[test]
    fn promotion_matches_pytorch() {
        let check = |ops: &[(DType, OperandKind)], want: DType| {
            assert_eq!(result_type(ops), Some(want), "{ops:?}");
        };
        check(
            &[(DType::Float16, Dim), (DType::Float32, Scalar)],
            DType::Float16,
        );
        check(
            &[(DType::Int32, Dim), (DType::Float64, Scalar)],
            DType::Float32,
        );
        check(&[(DType::Int32, Dim), (DType::Int64, Scalar)], DType::Int32);
        check(
            &[(DType::Int32, Dim), (DType::Float64, ZeroDim)],
            DType::Float64,
        );
        check(
            &[(DType::Float16, Dim), (DType::Float64, ZeroDim)],
            DType::Float16,
        );
        check(&[(DType::Bool, Dim), (DType::Int64, Scalar)], DType::Int64);
        check(
            &[(DType::Float16, Dim), (DType::BFloat16, Dim)],
            DType::Float32,
        );
        assert_eq!(DType::Float32.round(0.1), 0.1f32 as f64);
        assert_eq!(DType::Int32.round(-2.7), -2.0);
    }
}
