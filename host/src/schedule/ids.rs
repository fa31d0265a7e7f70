//! Typed index vectors: a `Vec` indexed by an id type instead of `usize`
//! (cranelift's `PrimaryMap`/`SecondaryMap`, rustc's `IndexVec`), so that a
//! table of buffers is indexed by a `BufferId` and a side table of
//! expressions by an `ExprId`, and one id is never used for another's table.
//! This module depends on no other: each id type implements [`EntityId`]
//! where it is defined, with `entity_id!`.

use std::fmt;
use std::marker::PhantomData;
use std::ops::{Index, IndexMut};

/// An id that numbers the entries of one table from 0.
pub trait EntityId: Copy {
    /// The id of entry `index`.
    fn new(index: usize) -> Self;
    /// The entry this id names.
    fn index(self) -> usize;
}

/// Implements [`EntityId`] for newtypes over `u32` (`struct BufferId(pub u32)`).
macro_rules! entity_id {
    ($($id:ty),*) => {$(
        impl $crate::schedule::ids::EntityId for $id {
            fn new(index: usize) -> Self {
                // Tables hold fewer than 2^32 entries: a graph that large is
                // refused long before scheduling.
                Self(index as u32)
            }
            fn index(self) -> usize {
                self.0 as usize
            }
        }
    )*};
}
pub(crate) use entity_id;

/// A vector of `T` indexed by the id `I`.
#[derive(Clone, PartialEq)]
pub struct IdVec<I, T> {
    items: Vec<T>,
    id: PhantomData<fn(I) -> I>,
}

impl<I, T> Default for IdVec<I, T> {
    fn default() -> Self {
        IdVec {
            items: Vec::new(),
            id: PhantomData,
        }
    }
}

impl<I, T: fmt::Debug> fmt::Debug for IdVec<I, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.items.fmt(f)
    }
}

impl<I: EntityId, T> IdVec<I, T> {
    /// An empty vector.
    pub fn new() -> Self {
        Self::default()
    }

    /// `n` copies of `value`, one per id `0..n` (a side table).
    pub fn filled(n: usize, value: T) -> Self
    where
        T: Clone,
    {
        Self::from(vec![value; n])
    }

    /// Appends `value` and returns its id.
    pub fn push(&mut self, value: T) -> I {
        let id = self.next_id();
        self.items.push(value);
        id
    }

    /// The id the next [`IdVec::push`] returns.
    pub fn next_id(&self) -> I {
        I::new(self.items.len())
    }

    /// The entry of `id`, if there is one.
    pub fn get(&self, id: I) -> Option<&T> {
        self.items.get(id.index())
    }

    /// The number of entries.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The entries in id order.
    pub fn iter(&self) -> std::slice::Iter<'_, T> {
        self.items.iter()
    }

    /// The entries in id order, mutably.
    pub fn iter_mut(&mut self) -> std::slice::IterMut<'_, T> {
        self.items.iter_mut()
    }

    /// Every id, in order.
    pub fn ids(&self) -> impl Iterator<Item = I> {
        (0..self.items.len()).map(I::new)
    }

    /// The entries with their ids, in order.
    pub fn iter_enumerated(&self) -> impl Iterator<Item = (I, &T)> {
        self.items.iter().enumerate().map(|(i, t)| (I::new(i), t))
    }

    /// The id of the first entry that `pred` holds for.
    pub fn position(&self, pred: impl FnMut(&T) -> bool) -> Option<I> {
        self.items.iter().position(pred).map(I::new)
    }

    /// Grows the vector to `n` entries with copies of `value` (shrinks it when
    /// it is longer).
    pub fn resize(&mut self, n: usize, value: T)
    where
        T: Clone,
    {
        self.items.resize(n, value);
    }
}

impl<I: EntityId, T> Index<I> for IdVec<I, T> {
    type Output = T;
    fn index(&self, id: I) -> &T {
        &self.items[id.index()]
    }
}

impl<I: EntityId, T> IndexMut<I> for IdVec<I, T> {
    fn index_mut(&mut self, id: I) -> &mut T {
        &mut self.items[id.index()]
    }
}

impl<I, T> From<Vec<T>> for IdVec<I, T> {
    fn from(items: Vec<T>) -> Self {
        IdVec {
            items,
            id: PhantomData,
        }
    }
}

impl<I, T> FromIterator<T> for IdVec<I, T> {
    fn from_iter<It: IntoIterator<Item = T>>(iter: It) -> Self {
        Self::from(iter.into_iter().collect::<Vec<T>>())
    }
}

impl<'a, I, T> IntoIterator for &'a IdVec<I, T> {
    type Item = &'a T;
    type IntoIter = std::slice::Iter<'a, T>;
    fn into_iter(self) -> Self::IntoIter {
        self.items.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Copy, Debug, PartialEq)]
    struct BufferId(u32);
    entity_id!(BufferId);

    #[test]
    fn ids_name_the_entries_they_were_pushed_as() {
        let mut v: IdVec<BufferId, &str> = IdVec::new();
        let (a, b) = (v.push("a"), v.push("b"));
        assert_eq!((a, b), (BufferId(0), BufferId(1)));
        assert_eq!((v[a], v[b]), ("a", "b"));
        v[a] = "c";
        assert_eq!(v.get(a), Some(&"c"));
        assert_eq!(v.get(BufferId(2)), None);
        assert_eq!(
            v.iter_enumerated().collect::<Vec<_>>(),
            vec![(a, &"c"), (b, &"b")]
        );
        let side: IdVec<BufferId, bool> = IdVec::filled(v.len(), false);
        assert_eq!(side.ids().collect::<Vec<_>>(), vec![a, b]);
    }
}
