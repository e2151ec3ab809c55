//! tpuc-cache: a three-tier cache of compiled executables.
//!
//! The cache stores opaque bytes (serialized executables) under a key the
//! caller describes with [`KeyComponents`]; it knows nothing of the IR,
//! StableHLO or PJRT.
//!
//! | tier | where | on when |
//! |---|---|---|
//! | 1 memory | this process; LRU bounded in bytes; single-flight per key | always |
//! | 2 host | `~/.cache/tpuc/executables/` (persistent, `XDG_CACHE_HOME` respected), or `/dev/shm/tpuc/<name>/` when named; atomic publish, per-key `flock`, mmap reads, LRU budget | by default (`TPUC_CACHE_DISK=0` turns it off); `TPUC_CACHE_TIER2=<name>` or [`CacheConfig::tier2`] for shared memory |
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
//!     graph: None,              // or the source graph's digest, to explain lowering changes
//!     lowering: String::new(),  // e.g. "precision=highest bf16=off"
//!     compile_options: CompileOptions { canonical: b"num_partitions=1".to_vec(), summary: "partitions=1".into() },
//!     target: "cpu".into(),
//!     topology: String::new(),
//!     plugin: PluginIdentity::default(),
//!     tool_version: "tpuc 0.1.0".into(),
//!     label: "mlp".into(),
//! };
//! let first = cache.get_or_compile(&key, || Ok::<_, std::io::Error>(vec![1, 2, 3]))?;
//! assert_eq!(first.source, Source::Compiled);
//! assert_eq!(first.miss_explanation, None); // a first compile: a plain miss
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
//! | `TPUC_CACHE_DISK` | `0`/`off`: no persistent tier 2 when no tier-2 name is set | on |
//! | `TPUC_CACHE_DISK_MAX_BYTES` | the persistent tier's budget | 10G |
//! | `XDG_CACHE_HOME` | the persistent tier lives in `$XDG_CACHE_HOME/tpuc/executables` | `~/.cache` |
//! | `TPUC_CACHE_TIER2` | tier-2 name: tier 2 in host shared memory instead | off |
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

mod cache;
mod config;
mod format;
mod key;
mod memory;
mod remote;
mod results;
mod shm;
mod stats;

pub use bytes::Bytes;

pub use crate::cache::Cache;
pub use crate::config::{parse_size, CacheConfig, Tier2Config, Tier3Config, DISK_TIER_MAX_BYTES, DISK_TIER_NAME};
pub use crate::format::{Corrupt, Encoded, FORMAT_VERSION, HEADER_LEN, MAGIC};
pub use crate::key::{
    CacheKey, CompileOptions, Digest, KeyComponents, KeySummary, Manifest, PluginIdentity,
};
pub use crate::remote::RemoteEntry;
pub use crate::results::{
    CacheError, CacheOutcome, EntryInfo, EvictReport, Explanation, Listing, Probe, Share, Source,
    StatsReport, Tier, TierStatus,
};
pub use crate::stats::{Stats, TierStats};

const LOG: &str = "tpuc_cache";
