//! Tier 1: process memory. An LRU map bounded in bytes, plus single-flight
//! bookkeeping so concurrent requests for one key compile it once.

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex};

use bytes::Bytes;

use crate::key::{CacheKey, Digest, Manifest};

#[derive(Clone)]
pub(crate) struct MemEntry {
    pub bytes: Bytes,
    pub manifest: Arc<Manifest>,
}

struct Slot {
    entry: MemEntry,
    last_use: u64,
}

struct Inner {
    map: HashMap<CacheKey, Slot>,
    bytes: u64,
    tick: u64,
}

pub(crate) struct MemoryTier {
    inner: Mutex<Inner>,
    max_bytes: u64,
}

impl MemoryTier {
    pub fn new(max_bytes: u64) -> Self {
        MemoryTier {
            inner: Mutex::new(Inner {
                map: HashMap::new(),
                bytes: 0,
                tick: 0,
            }),
            max_bytes,
        }
    }

    pub fn get(&self, key: &CacheKey) -> Option<MemEntry> {
        let mut g = self.inner.lock().unwrap();
        g.tick += 1;
        let tick = g.tick;
        let slot = g.map.get_mut(key)?;
        slot.last_use = tick;
        Some(slot.entry.clone())
    }

    pub fn contains(&self, key: &CacheKey) -> bool {
        self.inner.lock().unwrap().map.contains_key(key)
    }

    /// Inserts, evicting least recently used entries to stay within the
    /// budget. An entry larger than the whole budget is not kept.
    pub fn insert(&self, key: CacheKey, entry: MemEntry) {
        let size = entry.bytes.len() as u64;
        if size > self.max_bytes {
            return;
        }
        let mut g = self.inner.lock().unwrap();
        g.tick += 1;
        let tick = g.tick;
        if let Some(old) = g.map.insert(
            key,
            Slot {
                entry,
                last_use: tick,
            },
        ) {
            g.bytes -= old.entry.bytes.len() as u64;
        }
        g.bytes += size;
        while g.bytes > self.max_bytes {
            let victim = g
                .map
                .iter()
                .filter(|(k, _)| **k != key)
                .min_by_key(|(_, s)| s.last_use)
                .map(|(k, _)| *k);
            match victim {
                Some(v) => {
                    let s = g.map.remove(&v).unwrap();
                    g.bytes -= s.entry.bytes.len() as u64;
                }
                None => break,
            }
        }
    }

    /// Entries with this graph fingerprint (for miss explanations).
    pub fn manifests_for_graph(&self, graph: &Digest) -> Vec<Manifest> {
        let g = self.inner.lock().unwrap();
        g.map
            .values()
            .filter(|s| s.entry.manifest.components.graph == *graph)
            .map(|s| (*s.entry.manifest).clone())
            .collect()
    }

    pub fn list(&self) -> Vec<(CacheKey, u64, Arc<Manifest>)> {
        let g = self.inner.lock().unwrap();
        g.map
            .iter()
            .map(|(k, s)| (*k, s.entry.bytes.len() as u64, s.entry.manifest.clone()))
            .collect()
    }

    /// (entries, bytes)
    pub fn usage(&self) -> (u64, u64) {
        let g = self.inner.lock().unwrap();
        (g.map.len() as u64, g.bytes)
    }

    pub fn clear(&self) -> u64 {
        let mut g = self.inner.lock().unwrap();
        let n = g.map.len() as u64;
        g.map.clear();
        g.bytes = 0;
        n
    }
}

/// One in-flight fill of a key. The leader publishes `Some(Ok(entry))` or
/// `Some(Err(()))`; waiters block on the condvar.
pub(crate) struct Flight {
    state: Mutex<Option<Result<MemEntry, ()>>>,
    cv: Condvar,
}

pub(crate) enum Role {
    Leader(LeaderGuard),
    Follower(Arc<Flight>),
}

/// Held by the thread that fills a key. Dropping it without `finish`
/// (an error or a panic in the compile) wakes the waiters with a failure,
/// and one of them retries.
pub(crate) struct LeaderGuard {
    flights: Arc<Mutex<HashMap<CacheKey, Arc<Flight>>>>,
    key: CacheKey,
    flight: Arc<Flight>,
    done: bool,
}

impl LeaderGuard {
    pub fn finish(mut self, entry: MemEntry) {
        self.complete(Ok(entry));
    }

    fn complete(&mut self, r: Result<MemEntry, ()>) {
        self.done = true;
        self.flights.lock().unwrap().remove(&self.key);
        *self.flight.state.lock().unwrap() = Some(r);
        self.flight.cv.notify_all();
    }
}

impl Drop for LeaderGuard {
    fn drop(&mut self) {
        if !self.done {
            self.complete(Err(()));
        }
    }
}

impl Flight {
    /// Waits for the leader; `None` when it failed.
    pub fn wait(&self) -> Option<MemEntry> {
        let mut g = self.state.lock().unwrap();
        while g.is_none() {
            g = self.cv.wait(g).unwrap();
        }
        g.as_ref().unwrap().as_ref().ok().cloned()
    }
}

#[derive(Default)]
pub(crate) struct SingleFlight {
    flights: Arc<Mutex<HashMap<CacheKey, Arc<Flight>>>>,
}

impl SingleFlight {
    pub fn join(&self, key: CacheKey) -> Role {
        let mut g = self.flights.lock().unwrap();
        if let Some(f) = g.get(&key) {
            return Role::Follower(f.clone());
        }
        let flight = Arc::new(Flight {
            state: Mutex::new(None),
            cv: Condvar::new(),
        });
        g.insert(key, flight.clone());
        Role::Leader(LeaderGuard {
            flights: self.flights.clone(),
            key,
            flight,
            done: false,
        })
    }
}
