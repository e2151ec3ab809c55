//! Typed ids into arenas (`PrimaryMap`) and dense side tables (`SecondaryMap`).
//!
//! Every IR entity (value, op, block, region, symbol, location) is a `u32` newtype. Ids are only
//! meaningful for the module that created them.

use std::fmt;
use std::marker::PhantomData;

/// An id usable as an index into a [`PrimaryMap`].
pub trait EntityId: Copy + Eq + Ord + std::hash::Hash + fmt::Debug {
    fn new(index: usize) -> Self;
    fn index(self) -> usize;
}

macro_rules! entity_id {
    ($(#[$meta:meta])* $name:ident, $prefix:literal) => {
        $(#[$meta])*
        ///
        /// Stored as the index plus one in a `NonZeroU32`, so `Option<Self>` is as small as
        /// the id.
        #[derive(Copy, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(std::num::NonZeroU32);

        impl $crate::entity::EntityId for $name {
            #[inline]
            fn new(index: usize) -> Self {
                let n = u32::try_from(index).ok().and_then(|i| i.checked_add(1)).expect("entity arena overflow");
                $name(std::num::NonZeroU32::new(n).expect("index + 1 is non-zero"))
            }
            #[inline]
            fn index(self) -> usize {
                (self.0.get() - 1) as usize
            }
        }

        impl std::fmt::Debug for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, concat!($prefix, "{}"), $crate::entity::EntityId::index(*self))
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, concat!($prefix, "{}"), $crate::entity::EntityId::index(*self))
            }
        }
    };
}
pub(crate) use entity_id;

/// An append-only arena that hands out typed ids.
#[derive(Clone)]
pub struct PrimaryMap<K: EntityId, V> {
    items: Vec<V>,
    _k: PhantomData<K>,
}

impl<K: EntityId, V> Default for PrimaryMap<K, V> {
    fn default() -> Self {
        Self { items: Vec::new(), _k: PhantomData }
    }
}

impl<K: EntityId, V> PrimaryMap<K, V> {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn with_capacity(n: usize) -> Self {
        Self { items: Vec::with_capacity(n), _k: PhantomData }
    }
    pub fn push(&mut self, v: V) -> K {
        let k = K::new(self.items.len());
        self.items.push(v);
        k
    }
    pub fn len(&self) -> usize {
        self.items.len()
    }
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
    pub fn is_valid(&self, k: K) -> bool {
        k.index() < self.items.len()
    }
    pub fn get(&self, k: K) -> Option<&V> {
        self.items.get(k.index())
    }
    pub fn keys(&self) -> impl DoubleEndedIterator<Item = K> + ExactSizeIterator + use<K, V> {
        (0..self.items.len()).map(K::new)
    }
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (K, &V)> + ExactSizeIterator {
        self.items.iter().enumerate().map(|(i, v)| (K::new(i), v))
    }
    pub fn values_mut(&mut self) -> std::slice::IterMut<'_, V> {
        self.items.iter_mut()
    }
    pub fn values(&self) -> std::slice::Iter<'_, V> {
        self.items.iter()
    }
}

impl<K: EntityId, V> std::ops::Index<K> for PrimaryMap<K, V> {
    type Output = V;
    #[inline]
    fn index(&self, k: K) -> &V {
        &self.items[k.index()]
    }
}

impl<K: EntityId, V> std::ops::IndexMut<K> for PrimaryMap<K, V> {
    #[inline]
    fn index_mut(&mut self, k: K) -> &mut V {
        &mut self.items[k.index()]
    }
}

impl<K: EntityId, V: fmt::Debug> fmt::Debug for PrimaryMap<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

/// A side table keyed by ids of a [`PrimaryMap`]; missing entries read as the default value.
#[derive(Clone)]
pub struct SecondaryMap<K: EntityId, V: Clone> {
    items: Vec<V>,
    default: V,
    _k: PhantomData<K>,
}

impl<K: EntityId, V: Clone + Default> Default for SecondaryMap<K, V> {
    fn default() -> Self {
        Self { items: Vec::new(), default: V::default(), _k: PhantomData }
    }
}

impl<K: EntityId, V: Clone + Default> SecondaryMap<K, V> {
    pub fn new() -> Self {
        Self::default()
    }
}

impl<K: EntityId, V: Clone> SecondaryMap<K, V> {
    pub fn with_default(default: V) -> Self {
        Self { items: Vec::new(), default, _k: PhantomData }
    }
    pub fn get(&self, k: K) -> &V {
        self.items.get(k.index()).unwrap_or(&self.default)
    }
    pub fn set(&mut self, k: K, v: V) {
        let i = k.index();
        if i >= self.items.len() {
            self.items.resize(i + 1, self.default.clone());
        }
        self.items[i] = v;
    }
}

impl<K: EntityId, V: Clone> std::ops::Index<K> for SecondaryMap<K, V> {
    type Output = V;
    fn index(&self, k: K) -> &V {
        self.get(k)
    }
}

impl<K: EntityId, V: Clone + fmt::Debug> fmt::Debug for SecondaryMap<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.items.iter()).finish()
    }
}
