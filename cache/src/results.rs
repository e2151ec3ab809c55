//! What the cache's operations return: where an executable came from, the miss explanation,
//! listings, status and statistics reports, and the cache's error type.

use std::fmt;
use std::time::{Duration, SystemTime};

use bytes::Bytes;

use crate::key::{CacheKey, Digest, Manifest};
use crate::stats::Stats;

/// Where an executable came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Source {
    /// Every tier missed; the closure ran.
    Compiled,
    Memory,
    /// Tier 2 as a shared-memory directory (`TPUC_CACHE_TIER2`, `/dev/shm/tpuc/NAME`).
    Shm,
    /// Tier 2 as the persistent directory under the user's cache directory (the default).
    Disk,
    Remote,
}

impl Source {
    /// `"miss"`, `"memory"`, `"shm"`, `"disk"` or `"remote"`, as `tpuc compile --json` reports it.
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Compiled => "miss",
            Source::Memory => "memory",
            Source::Shm => "shm",
            Source::Disk => "disk",
            Source::Remote => "remote",
        }
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A cache tier, for listing, clearing and status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Tier {
    Memory = 1,
    Shm = 2,
    Remote = 3,
}

impl Tier {
    pub fn from_number(n: u32) -> Option<Tier> {
        match n {
            1 => Some(Tier::Memory),
            2 => Some(Tier::Shm),
            3 => Some(Tier::Remote),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Tier::Memory => "memory",
            Tier::Shm => "host",
            Tier::Remote => "remote",
        }
    }
}

impl fmt::Display for Tier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "tier {} ({})", *self as u8, self.name())
    }
}

#[derive(Clone, Debug)]
pub struct CacheOutcome {
    pub bytes: Bytes,
    pub source: Source,
    pub key: CacheKey,
    /// On a miss: why, on one line: which key components differ from the
    /// closest entry for the same graph, target and topology. `None` for a
    /// plain miss: the first compile of the graph for its target and topology
    /// (what else is cached is logged at info level).
    pub miss_explanation: Option<String>,
    /// How long the compile took (misses) or would have taken (hits, as
    /// recorded when the entry was made).
    pub compile_time: Duration,
}

/// What a probe of one tier found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Probe {
    Disabled,
    Hit,
    Absent,
    Corrupt(String),
    Unreachable(String),
}

/// Why the next `get_or_compile` would hit or miss.
#[derive(Clone, Debug)]
pub struct Explanation {
    pub key: CacheKey,
    pub graph: Digest,
    pub tiers: Vec<(Tier, Probe)>,
    /// The first tier that would answer, or `None` for a compile.
    pub would_hit: Option<Source>,
    /// For a miss: which components differ from the closest entry.
    pub miss_reason: Option<String>,
}

impl fmt::Display for Explanation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.would_hit {
            Some(s) => writeln!(f, "hit in {s} (key {})", self.key)?,
            None => writeln!(
                f,
                "miss (key {}): {}",
                self.key,
                self.miss_reason.as_deref().unwrap_or("?")
            )?,
        }
        for (t, p) in &self.tiers {
            let p = match p {
                Probe::Disabled => "disabled".to_string(),
                Probe::Hit => "present".to_string(),
                Probe::Absent => "absent".to_string(),
                Probe::Corrupt(r) => format!("corrupt entry ({r}); will be replaced"),
                Probe::Unreachable(r) => format!("unreachable ({r})"),
            };
            writeln!(f, "  {t}: {p}")?;
        }
        Ok(())
    }
}

#[derive(Clone, Debug)]
pub struct EntryInfo {
    pub tier: Tier,
    pub key: CacheKey,
    pub size: u64,
    /// Last use (tiers 1 and 2) or creation (tier 3).
    pub last_used: Option<SystemTime>,
    /// Missing for tier 3 (not fetched) and for unreadable entries.
    pub manifest: Option<Manifest>,
    pub problem: Option<String>,
}

#[derive(Clone, Debug, Default)]
pub struct Listing {
    pub entries: Vec<EntryInfo>,
    /// Tiers that could not be listed, and why.
    pub errors: Vec<(Tier, String)>,
}

#[derive(Clone, Debug)]
pub struct TierStatus {
    pub tier: Tier,
    pub enabled: bool,
    /// Directory or URI, or why the tier is off.
    pub detail: String,
    pub entries: Option<u64>,
    pub bytes: Option<u64>,
    pub budget: Option<u64>,
}

/// A part of tier 2 by where its entries were compiled (see [`crate::Cache::tier2_share`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Share {
    /// Entries compiled by processes working in the directory asked about, or below it.
    pub entries: u64,
    pub bytes: u64,
    /// Entries compiled elsewhere.
    pub other_entries: u64,
    pub other_bytes: u64,
    /// Entries that do not say where (written before that was recorded, or unreadable).
    pub unknown_entries: u64,
    pub unknown_bytes: u64,
}

#[derive(Clone, Debug)]
pub struct StatsReport {
    /// This `Cache` since it was made.
    pub process: Stats,
    /// Totals of every process that used this tier-2 directory (including
    /// this one up to now); `None` without tier 2.
    pub host: Option<Stats>,
    pub tiers: Vec<TierStatus>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EvictReport {
    pub shm_removed: u64,
    pub shm_bytes: u64,
    pub remote_removed: u64,
    pub remote_bytes: u64,
    pub orphans_removed: u64,
}

/// Errors of the maintenance calls (lookups never fail).
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    #[error("{0} is not enabled")]
    Disabled(Tier),
    #[error("tier 3 ({root}): {msg}")]
    Remote { root: String, msg: String },
}
