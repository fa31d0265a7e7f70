//! Equality and hashing of [`Op`] and [`ConstData`] by bit pattern, derived from
//! `Op`'s `Serialize` rather than kept by hand per variant: an op is flattened into
//! words (each float as its bits, each variant as its index, each list after its
//! length, each option after a presence word), and two ops are equal when their words
//! are. Floats compare by bits, so `0.0` and `-0.0` (which differ under division) stay
//! apart and a NaN attribute equals itself: the relation is a true `Eq`, and passes
//! may key maps by ops (CSE does).

use super::{ConstData, Op};
use serde::ser::{self, Serialize};
use std::fmt;
use std::hash::{Hash, Hasher};

/// An op's attributes as words (see the module docs); a constant's values are not
/// among them (`Op::Constant`'s data is compared on its own).
pub(super) fn words(op: &Op) -> Vec<u64> {
    let mut w = Words(Vec::with_capacity(8));
    // `Words` never fails: every serde data type has a word form.
    let _ = op.serialize(&mut w);
    w.0
}

/// Where [`Words`] puts the words: a list, or straight into a hasher (no allocation
/// per hash).
trait Sink {
    fn push(&mut self, word: u64);
}

impl Sink for Vec<u64> {
    fn push(&mut self, word: u64) {
        Vec::push(self, word);
    }
}

/// A [`Sink`] that compares the words with a list.
struct Comparing<'a> {
    want: &'a [u64],
    at: usize,
    same: bool,
}

impl Sink for &mut Comparing<'_> {
    fn push(&mut self, word: u64) {
        self.same &= self.want.get(self.at) == Some(&word);
        self.at += 1;
    }
}

/// A hasher as a [`Sink`].
struct Hashing<'h, H>(&'h mut H);

impl<H: Hasher> Sink for Hashing<'_, H> {
    fn push(&mut self, word: u64) {
        self.0.write_u64(word);
    }
}

impl PartialEq for Op {
    fn eq(&self, other: &Op) -> bool {
        match (self, other) {
            (Op::Constant { data: a }, Op::Constant { data: b }) => a == b,
            _ => {
                std::mem::discriminant(self) == std::mem::discriminant(other)
                    && words(self) == words(other)
            }
        }
    }
}

impl Eq for Op {}

impl Hash for Op {
    fn hash<H: Hasher>(&self, state: &mut H) {
        std::mem::discriminant(self).hash(state);
        match self {
            Op::Constant { data } => data.hash(state),
            op => {
                let _ = op.serialize(&mut Words(Hashing(state)));
            }
        }
    }
}

impl PartialEq for ConstData {
    fn eq(&self, other: &ConstData) -> bool {
        let same = |a: &[f64], b: &[f64]| {
            a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
        };
        match (self, other) {
            (ConstData::Values(a), ConstData::Values(b)) => same(a, b),
            (ConstData::Fill(a), ConstData::Fill(b)) => a.to_bits() == b.to_bits(),
            (ConstData::Bytes { dtype, bytes }, ConstData::Bytes { dtype: d, bytes: b }) => {
                dtype == d && bytes == b
            }
            _ => false,
        }
    }
}

impl Eq for ConstData {}

/// How many leading elements of a constant its hash reads: equal constants have equal
/// prefixes, and a weight of millions of elements is not read whole to be hashed.
const HASHED_ELEMENTS: usize = 64;

impl Hash for ConstData {
    fn hash<H: Hasher>(&self, state: &mut H) {
        std::mem::discriminant(self).hash(state);
        match self {
            ConstData::Values(v) => {
                v.len().hash(state);
                v.iter()
                    .take(HASHED_ELEMENTS)
                    .for_each(|x| x.to_bits().hash(state));
            }
            ConstData::Fill(x) => x.to_bits().hash(state),
            ConstData::Bytes { dtype, bytes } => {
                dtype.hash(state);
                bytes.len().hash(state);
                bytes[..bytes.len().min(HASHED_ELEMENTS * 8)].hash(state);
            }
        }
    }
}

/// The serializer that flattens a value into words.
struct Words<S>(S);

/// `Words` never fails; serde's traits still need an error type.
#[derive(Debug)]
pub(super) struct Never;

impl fmt::Display for Never {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("unreachable")
    }
}

impl std::error::Error for Never {}

impl ser::Error for Never {
    fn custom<T: fmt::Display>(_: T) -> Never {
        Never
    }
}

impl<S: Sink> Words<S> {
    fn bytes(&mut self, b: &[u8]) {
        self.0.push(b.len() as u64);
        for c in b.chunks(8) {
            let mut w = [0u8; 8];
            w[..c.len()].copy_from_slice(c);
            self.0.push(u64::from_le_bytes(w));
        }
    }
}

type Done = Result<(), Never>;

impl<S: Sink> ser::Serializer for &mut Words<S> {
    type Ok = ();
    type Error = Never;
    type SerializeSeq = Self;
    type SerializeTuple = Self;
    type SerializeTupleStruct = Self;
    type SerializeTupleVariant = Self;
    type SerializeMap = Self;
    type SerializeStruct = Self;
    type SerializeStructVariant = Self;

    fn serialize_bool(self, v: bool) -> Done {
        self.0.push(v as u64);
        Ok(())
    }
    fn serialize_i8(self, v: i8) -> Done {
        self.serialize_i64(v as i64)
    }
    fn serialize_i16(self, v: i16) -> Done {
        self.serialize_i64(v as i64)
    }
    fn serialize_i32(self, v: i32) -> Done {
        self.serialize_i64(v as i64)
    }
    fn serialize_i64(self, v: i64) -> Done {
        self.0.push(v as u64);
        Ok(())
    }
    fn serialize_u8(self, v: u8) -> Done {
        self.serialize_u64(v as u64)
    }
    fn serialize_u16(self, v: u16) -> Done {
        self.serialize_u64(v as u64)
    }
    fn serialize_u32(self, v: u32) -> Done {
        self.serialize_u64(v as u64)
    }
    fn serialize_u64(self, v: u64) -> Done {
        self.0.push(v);
        Ok(())
    }
    fn serialize_f32(self, v: f32) -> Done {
        self.serialize_u64(v.to_bits() as u64)
    }
    fn serialize_f64(self, v: f64) -> Done {
        self.serialize_u64(v.to_bits())
    }
    fn serialize_char(self, v: char) -> Done {
        self.serialize_u64(v as u64)
    }
    fn serialize_str(self, v: &str) -> Done {
        self.bytes(v.as_bytes());
        Ok(())
    }
    fn serialize_bytes(self, v: &[u8]) -> Done {
        self.bytes(v);
        Ok(())
    }
    fn serialize_none(self) -> Done {
        self.serialize_u64(0)
    }
    fn serialize_some<T: ?Sized + Serialize>(self, value: &T) -> Done {
        self.0.push(1);
        value.serialize(self)
    }
    fn serialize_unit(self) -> Done {
        Ok(())
    }
    fn serialize_unit_struct(self, _: &'static str) -> Done {
        Ok(())
    }
    fn serialize_unit_variant(self, _: &'static str, index: u32, _: &'static str) -> Done {
        self.serialize_u64(index as u64)
    }
    fn serialize_newtype_struct<T: ?Sized + Serialize>(self, _: &'static str, v: &T) -> Done {
        v.serialize(self)
    }
    fn serialize_newtype_variant<T: ?Sized + Serialize>(
        self,
        _: &'static str,
        index: u32,
        _: &'static str,
        v: &T,
    ) -> Done {
        self.0.push(index as u64);
        v.serialize(self)
    }
    fn serialize_seq(self, len: Option<usize>) -> Result<Self, Never> {
        // Every list Kiln serializes knows its length.
        self.0.push(len.unwrap_or(usize::MAX) as u64);
        Ok(self)
    }
    fn serialize_tuple(self, _: usize) -> Result<Self, Never> {
        Ok(self)
    }
    fn serialize_tuple_struct(self, _: &'static str, _: usize) -> Result<Self, Never> {
        Ok(self)
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        index: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self, Never> {
        self.0.push(index as u64);
        Ok(self)
    }
    fn serialize_map(self, len: Option<usize>) -> Result<Self, Never> {
        self.0.push(len.unwrap_or(usize::MAX) as u64);
        Ok(self)
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Self, Never> {
        Ok(self)
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        index: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self, Never> {
        self.0.push(index as u64);
        Ok(self)
    }
}

/// The compound forms whose parts are only values (a sequence, a tuple, a tuple
/// struct or variant): each part's words in order.
macro_rules! parts_in_order {
    ($($form:ident :: $part:ident),*) => {$(
        impl<S: Sink> ser::$form for &mut Words<S> {
            type Ok = ();
            type Error = Never;
            fn $part<T: ?Sized + Serialize>(&mut self, v: &T) -> Done {
                v.serialize(&mut **self)
            }
            fn end(self) -> Done {
                Ok(())
            }
        }
    )*};
}

parts_in_order!(
    SerializeSeq::serialize_element,
    SerializeTuple::serialize_element,
    SerializeTupleStruct::serialize_field,
    SerializeTupleVariant::serialize_field
);

impl<S: Sink> ser::SerializeMap for &mut Words<S> {
    type Ok = ();
    type Error = Never;
    fn serialize_key<T: ?Sized + Serialize>(&mut self, k: &T) -> Done {
        k.serialize(&mut **self)
    }
    fn serialize_value<T: ?Sized + Serialize>(&mut self, v: &T) -> Done {
        v.serialize(&mut **self)
    }
    fn end(self) -> Done {
        Ok(())
    }
}

/// The compound forms with named fields (a struct, a struct variant): each field's
/// words in order, the names left out. A skipped field still takes a word, so that
/// fields never shift into each other's places.
macro_rules! fields_in_order {
    ($($form:ident),*) => {$(
        impl<S: Sink> ser::$form for &mut Words<S> {
            type Ok = ();
            type Error = Never;
            fn serialize_field<T: ?Sized + Serialize>(&mut self, _: &'static str, v: &T) -> Done {
                v.serialize(&mut **self)
            }
            fn skip_field(&mut self, _: &'static str) -> Done {
                self.0.push(u64::MAX);
                Ok(())
            }
            fn end(self) -> Done {
                Ok(())
            }
        }
    )*};
}

fields_in_order!(SerializeStruct, SerializeStructVariant);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::ir::Scalar;
    use crate::graph::ops::{BinaryOp, ReduceOp};
    use std::collections::HashSet;

    #[test]
    fn ops_are_equal_by_attributes_with_floats_by_bits() {
        let var = |correction: f64| Op::Var {
            dims: Some(vec![1]),
            correction,
            keepdim: false,
        };
        assert_eq!(var(1.0), var(1.0));
        assert_ne!(var(0.0), var(-0.0));
        assert_eq!(var(f64::NAN), var(f64::NAN));
        let sum = |dims: Option<Vec<i64>>| Op::Reduce {
            op: ReduceOp::Sum,
            dims,
            keepdim: false,
            dtype: None,
        };
        // A missing list and an empty one differ; so do lists of other lengths.
        assert_ne!(sum(None), sum(Some(vec![])));
        assert_ne!(sum(Some(vec![0, 1])), sum(Some(vec![0])));
        let add = |alpha| Op::Binary {
            op: BinaryOp::Add,
            alpha,
        };
        assert_ne!(add(Some(Scalar::Int(1))), add(Some(Scalar::Float(1.0))));
        assert_ne!(Op::Mm, Op::Bmm);
        let set: HashSet<Op> = [var(1.0), var(1.0), var(2.0), Op::Mm].into_iter().collect();
        assert_eq!(set.len(), 3);
        let konst = |x: f64| Op::Constant {
            data: ConstData::Fill(x),
        };
        assert_eq!(konst(1.5), konst(1.5));
        assert_ne!(konst(1.5), konst(2.5));
    }
}
