//! Counters per tier. Each `Cache` counts in memory; deltas are merged into
//! `stats.json` in the tier-2 directory (under a lock) after each compile,
//! on `flush()` and on drop, so a later process can report host totals.

use std::fs;
use std::io::Write;
use std::path::Path;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::Source;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TierStats {
    /// Lookups answered by this tier.
    pub hits: u64,
    /// Lookups this tier could not answer (absent or rejected entries).
    pub misses: u64,
    /// Entries rejected as corrupt, truncated or of another format.
    pub corrupt: u64,
    /// I/O or network failures (unreadable, unwritable, timeouts, refusals).
    pub errors: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
    /// Compile time the hits of this tier saved, in milliseconds.
    pub saved_ms: u64,
}

impl TierStats {
    fn add(&mut self, o: &TierStats) {
        self.hits += o.hits;
        self.misses += o.misses;
        self.corrupt += o.corrupt;
        self.errors += o.errors;
        self.bytes_read += o.bytes_read;
        self.bytes_written += o.bytes_written;
        self.saved_ms += o.saved_ms;
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stats {
    pub memory: TierStats,
    /// Tier 2, shared memory or the persistent disk directory (`shm` in files of before).
    #[serde(alias = "shm")]
    pub tier2: TierStats,
    pub remote: TierStats,
    /// Compiles run because every tier missed.
    pub compiles: u64,
    pub compile_ms: u64,
}

impl Stats {
    pub fn add(&mut self, o: &Stats) {
        self.memory.add(&o.memory);
        self.tier2.add(&o.tier2);
        self.remote.add(&o.remote);
        self.compiles += o.compiles;
        self.compile_ms += o.compile_ms;
    }

    pub fn tier_mut(&mut self, s: Source) -> Option<&mut TierStats> {
        match s {
            Source::Memory => Some(&mut self.memory),
            Source::Shm | Source::Disk => Some(&mut self.tier2),
            Source::Remote => Some(&mut self.remote),
            Source::Compiled => None,
        }
    }

    /// Total compile time saved by hits in all tiers, in milliseconds.
    pub fn saved_ms(&self) -> u64 {
        self.memory.saved_ms + self.tier2.saved_ms + self.remote.saved_ms
    }
}

/// This process's counters: `total` since start, `unflushed` not yet merged
/// into the tier-2 file.
#[derive(Default)]
pub(crate) struct Counters {
    inner: Mutex<(Stats, Stats)>,
}

impl Counters {
    pub fn update(&self, f: impl Fn(&mut Stats)) {
        let mut g = self.inner.lock().unwrap();
        f(&mut g.0);
        f(&mut g.1);
    }

    pub fn total(&self) -> Stats {
        self.inner.lock().unwrap().0
    }

    pub fn take_unflushed(&self) -> Stats {
        std::mem::take(&mut self.inner.lock().unwrap().1)
    }

    pub fn restore_unflushed(&self, s: &Stats) {
        self.inner.lock().unwrap().1.add(s);
    }
}

/// Reads the host totals (no lock: the file is replaced atomically).
pub(crate) fn read_file(path: &Path) -> Option<Stats> {
    let bytes = fs::read(path).ok()?;
    match serde_json::from_slice(&bytes) {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::warn!(target: "tpuc_cache", path = %path.display(), "stats file unreadable, starting over: {e}");
            None
        }
    }
}

/// Adds `delta` to the file at `path`; the caller holds the stats lock.
pub(crate) fn merge_into_file(path: &Path, tmp: &Path, delta: &Stats) -> std::io::Result<()> {
    let mut s = read_file(path).unwrap_or_default();
    s.add(delta);
    {
        let mut f = fs::File::create(tmp)?;
        f.write_all(&serde_json::to_vec_pretty(&s).expect("stats serialize"))?;
    }
    fs::rename(tmp, path).inspect_err(|_| {
        let _ = fs::remove_file(tmp);
    })
}
