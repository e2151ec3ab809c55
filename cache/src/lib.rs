//! tpuc-cache: a three-tier cache of compiled executables.
//!
//! The cache stores opaque bytes (serialized executables) under a key the
//! caller describes with [`KeyComponents`]; it knows nothing of the IR,
//! StableHLO or PJRT.
//!
//! | tier | where | on when |
//! |---|---|---|
//! | 1 memory | this process; LRU bounded in bytes; single-flight per key | always |
//! | 2 shm | `/dev/shm/tpuc/<name>/`; atomic publish, per-key `flock`, mmap reads, LRU budget | `TPUC_CACHE_TIER2=<name>` or [`CacheConfig::tier2`] |
//! | 3 remote | `gs://bucket/prefix` or a shared directory; write-once objects, background uploads | `TPUC_CACHE_TIER3_ROOT` or [`CacheConfig::tier3`] |
//!
//! [`Cache::get_or_compile`] looks in tiers 1, 2, 3 in order, copies a hit
//! down into the faster tiers, and otherwise runs the compile closure once
//! (per process with single-flight, per host with the tier-2 lock) and
//! publishes the result to every tier.
//!
//! ```
//! use tpuc_cache::{Cache, CacheConfig, CompileOptions, Digest, KeyComponents, PluginIdentity, Source};
//!
//! let cache = Cache::new(CacheConfig::default()); // or Cache::from_env()
//! let key = KeyComponents {
//!     program: Digest::of(b"func.func @main() { ... }"), // locations stripped
//!     compile_options: CompileOptions { canonical: b"num_partitions=1".to_vec(), summary: "partitions=1".into() },
//!     target: "cpu".into(),
//!     topology: String::new(),
//!     plugin: PluginIdentity::default(),
//!     tool_version: "tpuc 0.1.0".into(),
//!     label: "mlp".into(),
//! };
//! let first = cache.get_or_compile(&key, || Ok::<_, std::io::Error>(vec![1, 2, 3]))?;
//! assert_eq!(first.source, Source::Compiled);
//! println!("{}", first.miss_explanation.unwrap()); // no cached entry for this graph ...
//! let again = cache.get_or_compile(&key, || -> std::io::Result<Vec<u8>> { unreachable!() })?;
//! assert_eq!((again.source.as_str(), &again.bytes[..]), ("memory", &[1u8, 2, 3][..]));
//! # Ok::<(), std::io::Error>(())
//! ```
//!
//! **Failure is a miss, never an error.** A corrupt, truncated,
//! foreign-version or unreadable entry, a full or unwritable directory, a
//! remote that times out or refuses, a leftover temporary file: each is
//! logged with `tracing::warn!` (target `tpuc_cache`), counted in
//! [`Stats`], the key is recompiled and the bad entry replaced. Only the
//! compile closure's own error reaches the caller.
//!
//! Environment (read by [`CacheConfig::from_env`]):
//!
//! | variable | meaning | default |
//! |---|---|---|
//! | `TPUC_CACHE_MEMORY_MAX_BYTES` | tier-1 budget (`K`/`M`/`G` suffixes allowed) | 1G |
//! | `TPUC_CACHE_TIER2` | tier-2 name; enables tier 2 | off |
//! | `TPUC_CACHE_TIER2_ROOT` | directory holding tier-2 names | `/dev/shm/tpuc` |
//! | `TPUC_CACHE_TIER2_MAX_BYTES` | tier-2 budget, LRU eviction on publish | 4G |
//! | `TPUC_CACHE_TIER3_ROOT` | `gs://bucket/prefix` or a path; enables tier 3 | off |
//! | `TPUC_CACHE_TIER3_TIMEOUT_MS` | per-request remote timeout | 3000 |
//! | `TPUC_CACHE_TIER3_MAX_BYTES` | tier-3 budget, applied by [`Cache::evict`] | none |
//! | `TPUC_CACHE_TIER3_ALLOW_HTTP` | `1` allows `http://` endpoints (emulators) | off |
//! | `TPUC_CACHE_FLUSH_TIMEOUT_MS` | how long drop waits for uploads | 30000 |
//!
//! GCS credentials and endpoints come from object_store's own `GOOGLE_*`
//! variables (`GOOGLE_SERVICE_ACCOUNT`, `GOOGLE_SERVICE_ACCOUNT_KEY`, ...).

mod format;
mod key;
mod memory;
mod remote;
mod shm;
mod stats;

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

pub use bytes::Bytes;

pub use crate::format::{Corrupt, Encoded, FORMAT_VERSION, HEADER_LEN, MAGIC};
pub use crate::key::{
    CacheKey, CompileOptions, Digest, KeyComponents, KeySummary, Manifest, PluginIdentity,
};
pub use crate::remote::RemoteEntry;
pub use crate::stats::{Stats, TierStats};

use crate::memory::{MemEntry, MemoryTier, Role, SingleFlight};
use crate::remote::{Read3, RemoteTier};
use crate::shm::{Read2, ShmTier};
use crate::stats::Counters;

const LOG: &str = "tpuc_cache";

// ---------------------------------------------------------------- config

/// Tier-2 settings.
#[derive(Clone, Debug)]
pub struct Tier2Config {
    /// One path component: letters, digits, `.`, `_`, `-`.
    pub name: String,
    /// The directory holding names; `/dev/shm/tpuc` by default.
    pub root: PathBuf,
    /// Budget in bytes; least recently used entries are evicted on publish.
    pub max_bytes: Option<u64>,
    /// How long to wait for another process compiling the same key before
    /// compiling here too.
    pub lock_timeout: Duration,
    /// Temporary files older than this are removed even if their writer's
    /// pid looks alive (pid reuse).
    pub orphan_age: Duration,
}

impl Tier2Config {
    pub fn new(name: impl Into<String>) -> Self {
        Tier2Config {
            name: name.into(),
            root: PathBuf::from("/dev/shm/tpuc"),
            max_bytes: Some(4 << 30),
            lock_timeout: Duration::from_secs(30 * 60),
            orphan_age: Duration::from_secs(10 * 60),
        }
    }
}

/// Tier-3 settings.
#[derive(Clone, Debug)]
pub struct Tier3Config {
    /// `gs://bucket/prefix`, `file:///path` or a plain path.
    pub root: String,
    /// Per-request timeout (reads block a compile at most about this long).
    pub timeout: Duration,
    pub connect_timeout: Duration,
    /// After a network failure, skip the remote for this long.
    pub retry_after: Duration,
    /// Budget applied by [`Cache::evict`].
    pub max_bytes: Option<u64>,
    /// Allow `http://` endpoints (emulators).
    pub allow_http: bool,
    /// A GCS service-account JSON (may hold `gcs_base_url` and
    /// `"disable_oauth": true` for emulators). Otherwise `GOOGLE_*`
    /// variables and application default credentials apply.
    pub gcs_service_account_key: Option<String>,
}

impl Tier3Config {
    pub fn new(root: impl Into<String>) -> Self {
        Tier3Config {
            root: root.into(),
            timeout: Duration::from_secs(3),
            connect_timeout: Duration::from_secs(1),
            retry_after: Duration::from_secs(60),
            max_bytes: None,
            allow_http: false,
            gcs_service_account_key: None,
        }
    }
}

#[derive(Clone, Debug)]
pub struct CacheConfig {
    /// Tier-1 budget in bytes.
    pub memory_max_bytes: u64,
    pub tier2: Option<Tier2Config>,
    pub tier3: Option<Tier3Config>,
    /// How long dropping the cache waits for background uploads.
    pub flush_timeout: Duration,
    /// Stand-in for `hostname:pid` in manifests (tests); `None` = real.
    pub creator: Option<String>,
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            memory_max_bytes: 1 << 30,
            tier2: None,
            tier3: None,
            flush_timeout: Duration::from_secs(30),
            creator: None,
        }
    }
}

/// Parses `123`, `64K`, `512M`, `4G` (powers of 1024).
pub fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let (num, mul) = match s.chars().last()?.to_ascii_uppercase() {
        'K' => (&s[..s.len() - 1], 1u64 << 10),
        'M' => (&s[..s.len() - 1], 1 << 20),
        'G' => (&s[..s.len() - 1], 1 << 30),
        'T' => (&s[..s.len() - 1], 1 << 40),
        _ => (s, 1),
    };
    num.trim().parse::<u64>().ok()?.checked_mul(mul)
}

impl CacheConfig {
    /// The configuration the `TPUC_CACHE_*` variables describe. Bad values
    /// are warned about and ignored.
    pub fn from_env() -> Self {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// Like [`from_env`](Self::from_env) with another variable source.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Self {
        let get = |k: &str| get(k).filter(|v| !v.trim().is_empty());
        let size = |k: &str| {
            get(k).and_then(|v| {
                let r = parse_size(&v);
                if r.is_none() {
                    tracing::warn!(target: LOG, "ignoring {k}={v:?}: not a size");
                }
                r
            })
        };
        let millis = |k: &str| {
            get(k).and_then(|v| match v.trim().parse::<u64>() {
                Ok(ms) => Some(Duration::from_millis(ms)),
                Err(_) => {
                    tracing::warn!(target: LOG, "ignoring {k}={v:?}: not milliseconds");
                    None
                }
            })
        };
        let mut c = CacheConfig::default();
        if let Some(m) = size("TPUC_CACHE_MEMORY_MAX_BYTES") {
            c.memory_max_bytes = m;
        }
        if let Some(t) = millis("TPUC_CACHE_FLUSH_TIMEOUT_MS") {
            c.flush_timeout = t;
        }
        if let Some(name) = get("TPUC_CACHE_TIER2") {
            let mut t = Tier2Config::new(name);
            if let Some(r) = get("TPUC_CACHE_TIER2_ROOT") {
                t.root = PathBuf::from(r);
            }
            if let Some(m) = size("TPUC_CACHE_TIER2_MAX_BYTES") {
                t.max_bytes = Some(m);
            }
            c.tier2 = Some(t);
        }
        if let Some(root) = get("TPUC_CACHE_TIER3_ROOT") {
            let mut t = Tier3Config::new(root);
            if let Some(d) = millis("TPUC_CACHE_TIER3_TIMEOUT_MS") {
                t.timeout = d;
                t.connect_timeout = t.connect_timeout.min(d);
            }
            t.max_bytes = size("TPUC_CACHE_TIER3_MAX_BYTES");
            t.allow_http =
                get("TPUC_CACHE_TIER3_ALLOW_HTTP").is_some_and(|v| v == "1" || v == "true");
            c.tier3 = Some(t);
        }
        c
    }
}

// ---------------------------------------------------------------- results

/// Where an executable came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Source {
    /// Every tier missed; the closure ran.
    Compiled,
    Memory,
    Shm,
    Remote,
}

impl Source {
    /// `"miss"`, `"memory"`, `"shm"` or `"remote"`, as `tpuc compile --json` reports it.
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Compiled => "miss",
            Source::Memory => "memory",
            Source::Shm => "shm",
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
            Tier::Shm => "shm",
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
    /// On a miss: why (which key component differs from the closest entry
    /// for the same graph, or that the graph is new).
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

// ---------------------------------------------------------------- cache

pub struct Cache {
    config: CacheConfig,
    memory: MemoryTier,
    flights: SingleFlight,
    shm: Option<ShmTier>,
    remote: Option<RemoteTier>,
    counters: Arc<Counters>,
    /// Why tier 2 / 3 are off although configured.
    off: Vec<(Tier, String)>,
    creator: String,
}

impl Cache {
    /// A cache configured by the `TPUC_CACHE_*` variables.
    pub fn from_env() -> Cache {
        Cache::new(CacheConfig::from_env())
    }

    /// Never fails: a tier that cannot be opened is warned about and left
    /// off ([`stats`](Self::stats) says why).
    pub fn new(config: CacheConfig) -> Cache {
        let counters = Arc::new(Counters::default());
        let mut off = Vec::new();
        let shm = config.tier2.as_ref().and_then(|t| {
            match ShmTier::open(&t.root, &t.name, t.max_bytes, t.lock_timeout, t.orphan_age) {
                Ok(s) => Some(s),
                Err(e) => {
                    let why = format!("{}: {e}", t.root.join(&t.name).display());
                    tracing::warn!(target: LOG, "tier 2 disabled: {why}");
                    off.push((Tier::Shm, why));
                    None
                }
            }
        });
        let remote =
            config
                .tier3
                .as_ref()
                .and_then(|t| match RemoteTier::open(t, counters.clone()) {
                    Ok(r) => Some(r),
                    Err(e) => {
                        tracing::warn!(target: LOG, "tier 3 disabled: {e}");
                        off.push((Tier::Remote, e));
                        None
                    }
                });
        let creator = config
            .creator
            .clone()
            .unwrap_or_else(|| format!("{}:{}", hostname(), std::process::id()));
        Cache {
            memory: MemoryTier::new(config.memory_max_bytes),
            flights: SingleFlight::default(),
            shm,
            remote,
            counters,
            off,
            creator,
            config,
        }
    }

    pub fn config(&self) -> &CacheConfig {
        &self.config
    }

    /// Returns the executable for `kc`, from the fastest tier that has a
    /// valid entry, or by running `compile` (once per key per process, and
    /// once per host with tier 2) and publishing its result. Only
    /// `compile`'s error is returned.
    pub fn get_or_compile<E>(
        &self,
        kc: &KeyComponents,
        compile: impl FnOnce() -> Result<Vec<u8>, E>,
    ) -> Result<CacheOutcome, E> {
        let key = kc.key();
        let mut compile = Some(compile);
        loop {
            if let Some(e) = self.memory.get(&key) {
                return Ok(self.memory_hit(key, e));
            }
            match self.flights.join(key) {
                Role::Follower(f) => {
                    if let Some(e) = f.wait() {
                        return Ok(self.memory_hit(key, e));
                    }
                    // The leader's compile failed: try ourselves.
                }
                Role::Leader(guard) => {
                    if let Some(e) = self.memory.get(&key) {
                        guard.finish(e.clone());
                        return Ok(self.memory_hit(key, e));
                    }
                    let out =
                        self.fill(kc, key, compile.take().expect("a leader compiles once"))?;
                    let entry = MemEntry {
                        bytes: out.1.clone(),
                        manifest: Arc::new(out.2),
                    };
                    self.memory.insert(key, entry.clone());
                    guard.finish(entry);
                    return Ok(out.0);
                }
            }
        }
    }

    fn memory_hit(&self, key: CacheKey, e: MemEntry) -> CacheOutcome {
        let ms = e.manifest.compile_ms;
        self.counters.update(|s| {
            s.memory.hits += 1;
            s.memory.saved_ms += ms;
        });
        CacheOutcome {
            bytes: e.bytes,
            source: Source::Memory,
            key,
            miss_explanation: None,
            compile_time: Duration::from_millis(ms),
        }
    }

    fn lower_hit(
        &self,
        source: Source,
        key: CacheKey,
        bytes: Bytes,
        manifest: Manifest,
    ) -> (CacheOutcome, Bytes, Manifest) {
        let ms = manifest.compile_ms;
        let len = bytes.len() as u64;
        self.counters.update(|s| {
            let t = s.tier_mut(source).unwrap();
            t.hits += 1;
            t.saved_ms += ms;
            t.bytes_read += len;
        });
        let out = CacheOutcome {
            bytes: bytes.clone(),
            source,
            key,
            miss_explanation: None,
            compile_time: Duration::from_millis(ms),
        };
        (out, bytes, manifest)
    }

    /// Tier 2 read with the bookkeeping. `None` unless it hit.
    fn shm_read(&self, shm: &ShmTier, key: &CacheKey) -> Option<(Bytes, Manifest)> {
        match shm.read(key) {
            Read2::Hit(b, m) => return Some((b, *m)),
            Read2::Absent => {}
            Read2::Corrupt(c) => {
                tracing::warn!(target: LOG, key = %key.short(), dir = %shm.dir.display(),
                    "tier-2 entry rejected ({c}); recompiling and replacing it");
                self.counters.update(|s| s.shm.corrupt += 1);
            }
            Read2::Error(e) => {
                tracing::warn!(target: LOG, key = %key.short(), dir = %shm.dir.display(),
                    "tier-2 entry unreadable ({e}); treating as a miss");
                self.counters.update(|s| s.shm.errors += 1);
            }
        }
        None
    }

    /// Everything below tier 1: tier 2 (under the key lock), tier 3, compile.
    fn fill<E>(
        &self,
        kc: &KeyComponents,
        key: CacheKey,
        compile: impl FnOnce() -> Result<Vec<u8>, E>,
    ) -> Result<(CacheOutcome, Bytes, Manifest), E> {
        self.counters.update(|s| s.memory.misses += 1);
        let mut _lock = None;
        if let Some(shm) = &self.shm {
            if let Some((b, m)) = self.shm_read(shm, &key) {
                return Ok(self.lower_hit(Source::Shm, key, b, m));
            }
            match shm.lock(&key) {
                Ok(Some(l)) => {
                    _lock = Some(l);
                    // Another process may have published while we waited.
                    if let Read2::Hit(b, m) = shm.read(&key) {
                        return Ok(self.lower_hit(Source::Shm, key, b, *m));
                    }
                }
                Ok(None) => tracing::warn!(target: LOG, key = %key.short(),
                    "waited {:?} for another process compiling this key; compiling here too", shm.lock_timeout),
                Err(e) => {
                    self.counters.update(|s| s.shm.errors += 1);
                    tracing::warn!(target: LOG, key = %key.short(), "cannot take the tier-2 lock ({e}); compiling without it")
                }
            }
            self.counters.update(|s| s.shm.misses += 1);
        }

        let mut replace_remote = false;
        if let Some(remote) = &self.remote {
            match remote.get(&key) {
                Read3::Hit(b, m) => {
                    let m = *m;
                    if let Some(shm) = &self.shm {
                        self.publish_shm(shm, &key, &Encoded::new(&m, b.clone()), &m);
                    }
                    return Ok(self.lower_hit(Source::Remote, key, b, m));
                }
                Read3::Absent => self.counters.update(|s| s.remote.misses += 1),
                Read3::Corrupt(c) => {
                    tracing::warn!(target: LOG, key = %key.short(), root = %remote.description,
                        "tier-3 entry rejected ({c}); recompiling and replacing it");
                    self.counters.update(|s| {
                        s.remote.misses += 1;
                        s.remote.corrupt += 1
                    });
                    replace_remote = true;
                }
                Read3::Error(e) => {
                    tracing::warn!(target: LOG, key = %key.short(), root = %remote.description,
                        "tier 3 unreachable ({e}); compiling locally");
                    self.counters.update(|s| {
                        s.remote.misses += 1;
                        s.remote.errors += 1
                    });
                }
                Read3::Skipped => {
                    tracing::debug!(target: LOG, "tier 3 skipped: it failed recently");
                    self.counters.update(|s| s.remote.misses += 1);
                }
            }
        }

        // Why did we miss? Local tiers now; the remote index in parallel
        // with the compile.
        let want = kc.summary();
        let mut candidates: Vec<(String, Manifest)> = self
            .memory
            .manifests_for_graph(&want.graph)
            .into_iter()
            .map(|m| ("memory".to_string(), m))
            .collect();
        if let Some(shm) = &self.shm {
            candidates.extend(
                shm.manifests_for_graph(&want.graph)
                    .into_iter()
                    .map(|m| ("shm".to_string(), m)),
            );
        }
        let remote_index = match (&self.remote, candidates.is_empty()) {
            (Some(r), true) => r.start_manifests_for_graph(&want.graph),
            _ => None,
        };

        let t0 = Instant::now();
        let bytes = compile()?;
        let dt = t0.elapsed();

        if let Some(rx) = remote_index {
            if let Ok(Ok(ms)) = rx.recv_timeout(Duration::from_millis(200)) {
                candidates.extend(ms.into_iter().map(|m| ("remote".to_string(), m)));
            }
        }
        let explanation = key::explain_from_candidates(&want, &candidates).unwrap_or_else(|| {
            format!(
                "no cached entry for this graph (program {}) in {}",
                want.graph.short(),
                self.enabled_names()
            )
        });
        tracing::info!(target: LOG, key = %key.short(), "cache miss: {explanation}");

        let manifest = Manifest {
            format: FORMAT_VERSION,
            key,
            components: want,
            payload_len: bytes.len() as u64,
            compile_ms: dt.as_millis() as u64,
            created_unix_ms: SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap_or_default()
                .as_millis() as u64,
            created_by: self.creator.clone(),
        };
        let payload = Bytes::from(bytes);
        let enc = Encoded::new(&manifest, payload.clone());
        if let Some(shm) = &self.shm {
            self.publish_shm(shm, &key, &enc, &manifest);
        }
        drop(_lock);
        if let Some(remote) = &self.remote {
            remote.upload(key, enc, &manifest, replace_remote);
        }
        let ms = manifest.compile_ms;
        self.counters.update(|s| {
            s.compiles += 1;
            s.compile_ms += ms;
        });
        self.flush_stats();
        let out = CacheOutcome {
            bytes: payload.clone(),
            source: Source::Compiled,
            key,
            miss_explanation: Some(explanation),
            compile_time: dt,
        };
        Ok((out, payload, manifest))
    }

    fn publish_shm(&self, shm: &ShmTier, key: &CacheKey, enc: &Encoded, m: &Manifest) {
        match shm.publish(key, enc, m) {
            Ok(n) => self.counters.update(|s| s.shm.bytes_written += n),
            Err(e) => {
                self.counters.update(|s| s.shm.errors += 1);
                tracing::warn!(target: LOG, key = %key.short(), dir = %shm.dir.display(),
                    "could not write the tier-2 entry ({e}); continuing without it");
            }
        }
    }

    fn enabled_names(&self) -> String {
        let mut v = vec!["memory"];
        if self.shm.is_some() {
            v.push("shm");
        }
        if self.remote.is_some() {
            v.push("remote");
        }
        v.join(", ")
    }

    /// Why the next `get_or_compile` for `kc` would hit or miss. Reads but
    /// changes nothing (tier 3 is probed with a HEAD, not verified).
    pub fn explain(&self, kc: &KeyComponents) -> Explanation {
        let key = kc.key();
        let want = kc.summary();
        let mut tiers = vec![(
            Tier::Memory,
            if self.memory.contains(&key) {
                Probe::Hit
            } else {
                Probe::Absent
            },
        )];
        let mut candidates: Vec<(String, Manifest)> = self
            .memory
            .manifests_for_graph(&want.graph)
            .into_iter()
            .map(|m| ("memory".into(), m))
            .collect();
        match &self.shm {
            None => tiers.push((Tier::Shm, Probe::Disabled)),
            Some(shm) => {
                let p = match shm.read(&key) {
                    Read2::Hit(..) => Probe::Hit,
                    Read2::Absent => Probe::Absent,
                    Read2::Corrupt(c) => Probe::Corrupt(c.0),
                    Read2::Error(e) => Probe::Unreachable(e.to_string()),
                };
                tiers.push((Tier::Shm, p));
                candidates.extend(
                    shm.manifests_for_graph(&want.graph)
                        .into_iter()
                        .map(|m| ("shm".into(), m)),
                );
            }
        }
        match &self.remote {
            None => tiers.push((Tier::Remote, Probe::Disabled)),
            Some(r) => {
                let p = match r.head(&key) {
                    Ok(Some(_)) => Probe::Hit,
                    Ok(None) => Probe::Absent,
                    Err(e) => Probe::Unreachable(e),
                };
                if !matches!(p, Probe::Unreachable(_)) {
                    if let Ok(ms) = r.manifests_for_graph(&want.graph) {
                        candidates.extend(ms.into_iter().map(|m| ("remote".into(), m)));
                    }
                }
                tiers.push((Tier::Remote, p));
            }
        }
        let would_hit = tiers
            .iter()
            .find(|(_, p)| *p == Probe::Hit)
            .map(|(t, _)| match t {
                Tier::Memory => Source::Memory,
                Tier::Shm => Source::Shm,
                Tier::Remote => Source::Remote,
            });
        let miss_reason = would_hit.is_none().then(|| {
            key::explain_from_candidates(&want, &candidates).unwrap_or_else(|| {
                format!(
                    "no cached entry for this graph (program {}) in {}",
                    want.graph.short(),
                    self.enabled_names()
                )
            })
        });
        Explanation {
            key,
            graph: want.graph,
            tiers,
            would_hit,
            miss_reason,
        }
    }

    /// Entries of one tier, or of all enabled tiers.
    pub fn list(&self, tier: Option<Tier>) -> Listing {
        let mut out = Listing::default();
        let want = |t: Tier| tier.is_none() || tier == Some(t);
        if want(Tier::Memory) {
            for (key, size, m) in self.memory.list() {
                out.entries.push(EntryInfo {
                    tier: Tier::Memory,
                    key,
                    size,
                    last_used: None,
                    manifest: Some((*m).clone()),
                    problem: None,
                });
            }
        }
        if want(Tier::Shm) {
            if let Some(shm) = &self.shm {
                for e in shm.entries() {
                    let (manifest, problem) = match ShmTier::read_manifest(&e.path) {
                        Ok(m) => (Some(m), None),
                        Err(c) => (None, Some(c.0)),
                    };
                    out.entries.push(EntryInfo {
                        tier: Tier::Shm,
                        key: e.key,
                        size: e.size,
                        last_used: Some(e.mtime),
                        manifest,
                        problem,
                    });
                }
            }
        }
        if want(Tier::Remote) {
            if let Some(r) = &self.remote {
                match r.list() {
                    Ok(v) => out.entries.extend(v.into_iter().map(|e| EntryInfo {
                        tier: Tier::Remote,
                        key: e.key,
                        size: e.size,
                        last_used: Some(e.last_modified),
                        manifest: None,
                        problem: None,
                    })),
                    Err(e) => out.errors.push((Tier::Remote, e)),
                }
            }
        }
        out
    }

    /// Removes every entry of one tier (or all enabled tiers). Returns how
    /// many entries went.
    pub fn clear(&self, tier: Option<Tier>) -> Result<u64, CacheError> {
        let mut n = 0;
        let want = |t: Tier| tier.is_none() || tier == Some(t);
        if want(Tier::Memory) {
            n += self.memory.clear();
        }
        if want(Tier::Shm) {
            match &self.shm {
                Some(shm) => n += shm.clear(),
                None if tier.is_some() => return Err(CacheError::Disabled(Tier::Shm)),
                None => {}
            }
        }
        if want(Tier::Remote) {
            match &self.remote {
                Some(r) => {
                    n += r.clear().map_err(|msg| CacheError::Remote {
                        root: r.description.clone(),
                        msg,
                    })?;
                }
                None if tier.is_some() => return Err(CacheError::Disabled(Tier::Remote)),
                None => {}
            }
        }
        Ok(n)
    }

    /// Maintenance: removes orphaned temporary files and applies the tier-2
    /// and tier-3 budgets (least recently used / oldest first).
    pub fn evict(&self) -> Result<EvictReport, CacheError> {
        let mut r = EvictReport::default();
        if let Some(shm) = &self.shm {
            r.orphans_removed = shm.sweep_orphans();
            if let Some(max) = shm.max_bytes {
                (r.shm_removed, r.shm_bytes) = shm.evict_to(max, None);
            }
        }
        if let (Some(remote), Some(max)) = (
            &self.remote,
            self.config.tier3.as_ref().and_then(|t| t.max_bytes),
        ) {
            (r.remote_removed, r.remote_bytes) =
                remote.evict_to(max).map_err(|msg| CacheError::Remote {
                    root: remote.description.clone(),
                    msg,
                })?;
        }
        Ok(r)
    }

    /// Counters of this process, host totals from the tier-2 directory, and
    /// each tier's state and usage (tier 3's usage needs a listing: not
    /// included).
    pub fn stats(&self) -> StatsReport {
        self.flush_stats();
        let host = self
            .shm
            .as_ref()
            .map(|s| stats::read_file(&s.stats_path()).unwrap_or_default());
        let (n, b) = self.memory.usage();
        let mut tiers = vec![TierStatus {
            tier: Tier::Memory,
            enabled: true,
            detail: "process memory".into(),
            entries: Some(n),
            bytes: Some(b),
            budget: Some(self.config.memory_max_bytes),
        }];
        let off = |t: Tier| {
            self.off
                .iter()
                .find(|(x, _)| *x == t)
                .map(|(_, why)| format!("off: {why}"))
        };
        tiers.push(match &self.shm {
            Some(shm) => {
                let es = shm.entries();
                TierStatus {
                    tier: Tier::Shm,
                    enabled: true,
                    detail: shm.dir.display().to_string(),
                    entries: Some(es.len() as u64),
                    bytes: Some(es.iter().map(|e| e.size).sum()),
                    budget: shm.max_bytes,
                }
            }
            None => TierStatus {
                tier: Tier::Shm,
                enabled: false,
                detail: off(Tier::Shm)
                    .unwrap_or_else(|| "off (set TPUC_CACHE_TIER2=<name>)".into()),
                entries: None,
                bytes: None,
                budget: None,
            },
        });
        tiers.push(match &self.remote {
            Some(r) => TierStatus {
                tier: Tier::Remote,
                enabled: true,
                detail: r.description.clone(),
                entries: None,
                bytes: None,
                budget: self.config.tier3.as_ref().and_then(|t| t.max_bytes),
            },
            None => TierStatus {
                tier: Tier::Remote,
                enabled: false,
                detail: off(Tier::Remote)
                    .unwrap_or_else(|| "off (set TPUC_CACHE_TIER3_ROOT)".into()),
                entries: None,
                bytes: None,
                budget: None,
            },
        });
        StatsReport {
            process: self.counters.total(),
            host,
            tiers,
        }
    }

    /// Waits up to `timeout` for background uploads and saves the counters.
    /// True when no upload is left pending.
    pub fn flush(&self, timeout: Duration) -> bool {
        let done = self.remote.as_ref().is_none_or(|r| r.flush(timeout));
        self.flush_stats();
        done
    }

    /// Uploads still queued for tier 3.
    pub fn pending_uploads(&self) -> usize {
        self.remote.as_ref().map_or(0, |r| r.pending())
    }

    fn flush_stats(&self) {
        let Some(shm) = &self.shm else { return };
        let delta = self.counters.take_unflushed();
        if delta == Stats::default() {
            return;
        }
        let r = shm.update_stats(|path, tmp| stats::merge_into_file(path, tmp, &delta));
        if let Err(e) | Ok(Err(e)) = r.map(|r| r.map(|_| ())) {
            tracing::debug!(target: LOG, "could not save cache stats: {e}");
            self.counters.restore_unflushed(&delta);
        }
    }
}

impl Drop for Cache {
    fn drop(&mut self) {
        if let Some(r) = &self.remote {
            if !r.flush(self.config.flush_timeout) {
                tracing::warn!(target: LOG, pending = r.pending(),
                    "tier-3 uploads still pending after {:?}; they are abandoned", self.config.flush_timeout);
            }
        }
        self.flush_stats();
    }
}

impl fmt::Debug for Cache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cache")
            .field(
                "tier2",
                &self.shm.as_ref().map(|s| s.dir.display().to_string()),
            )
            .field(
                "tier3",
                &self.remote.as_ref().map(|r| r.description.clone()),
            )
            .finish()
    }
}

fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname NUL-terminates
    // on success when it fits.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "unknown-host".into();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("123"), Some(123));
        assert_eq!(parse_size("4G"), Some(4 << 30));
        assert_eq!(parse_size("64k"), Some(64 << 10));
        assert_eq!(parse_size("x"), None);
    }

    #[test]
    fn env_config() {
        let c = CacheConfig::from_lookup(|k| match k {
            "TPUC_CACHE_TIER2" => Some("jobA".into()),
            "TPUC_CACHE_TIER2_MAX_BYTES" => Some("1M".into()),
            "TPUC_CACHE_TIER3_ROOT" => Some("gs://b/p".into()),
            "TPUC_CACHE_TIER3_TIMEOUT_MS" => Some("250".into()),
            _ => None,
        });
        let t2 = c.tier2.unwrap();
        assert_eq!((t2.name.as_str(), t2.max_bytes), ("jobA", Some(1 << 20)));
        let t3 = c.tier3.unwrap();
        assert_eq!(t3.timeout, Duration::from_millis(250));
        assert!(CacheConfig::from_lookup(|_| None).tier2.is_none());
    }
}
