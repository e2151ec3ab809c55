//! [`Cache`]: the three tiers behind one lookup, with single-flight compiles, publication to
//! every tier, explanations of misses, listing, eviction and statistics.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;

use crate::format::{Encoded, FORMAT_VERSION};
use crate::key::{self, CacheKey, KeyComponents, Manifest};
use crate::memory::{MemEntry, MemoryTier, Role, SingleFlight};
use crate::remote::{Read3, RemoteTier};
use crate::shm::{Read2, ShmTier};
use crate::stats::{self, Counters, Stats};
use crate::{
    CacheConfig, CacheError, CacheOutcome, EntryInfo, EvictReport, Explanation, Listing, Probe,
    Share, Source, StatsReport, Tier, TierStatus, LOG,
};

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
    /// The working directory recorded in the manifests this cache writes.
    created_in: String,
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
        let created_in = config
            .created_in
            .clone()
            .or_else(|| std::env::current_dir().ok())
            .map(|d| d.display().to_string())
            .unwrap_or_default();
        Cache {
            memory: MemoryTier::new(config.memory_max_bytes),
            flights: SingleFlight::default(),
            shm,
            remote,
            counters,
            off,
            creator,
            created_in,
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

    /// How a tier-2 hit is reported: `disk` for the persistent tier, else `shm`.
    pub fn tier2_source(&self) -> Source {
        match &self.config.tier2 {
            Some(t) if t.persistent => Source::Disk,
            _ => Source::Shm,
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
                self.counters.update(|s| s.tier2.corrupt += 1);
            }
            Read2::Error(e) => {
                tracing::warn!(target: LOG, key = %key.short(), dir = %shm.dir.display(),
                    "tier-2 entry unreadable ({e}); treating as a miss");
                self.counters.update(|s| s.tier2.errors += 1);
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
                return Ok(self.lower_hit(self.tier2_source(), key, b, m));
            }
            match shm.lock(&key) {
                Ok(Some(l)) => {
                    _lock = Some(l);
                    // Another process may have published while we waited.
                    if let Read2::Hit(b, m) = shm.read(&key) {
                        return Ok(self.lower_hit(self.tier2_source(), key, b, *m));
                    }
                }
                Ok(None) => tracing::warn!(target: LOG, key = %key.short(),
                    "waited {:?} for another process compiling this key; compiling here too", shm.lock_timeout),
                Err(e) => {
                    self.counters.update(|s| s.tier2.errors += 1);
                    tracing::warn!(target: LOG, key = %key.short(), "cannot take the tier-2 lock ({e}); compiling without it")
                }
            }
            self.counters.update(|s| s.tier2.misses += 1);
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
                    .map(|m| (self.tier2_source().as_str().to_string(), m)),
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
        // A miss is explained only against an entry for the same target and topology; a
        // first compile for them is a plain miss, with what else is cached under -v.
        let explanation = key::explain_from_candidates(&want, &candidates);
        match (&explanation, key::first_compile_detail(&want, &candidates)) {
            (Some(e), _) => tracing::info!(target: LOG, key = %key.short(), "cache miss: {e}"),
            (None, Some((first, detail))) => {
                tracing::info!(target: LOG, key = %key.short(), "cache miss: {first}");
                if !detail.is_empty() {
                    tracing::info!(target: LOG, key = %key.short(), "cache miss: {detail}");
                }
            }
            (None, None) => tracing::info!(target: LOG, key = %key.short(),
                "cache miss: no cached entry for this graph (program {}) in {}", want.graph.short(), self.enabled_names()),
        }

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
            created_in: self.created_in.clone(),
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
            miss_explanation: explanation,
            compile_time: dt,
        };
        Ok((out, payload, manifest))
    }

    fn publish_shm(&self, shm: &ShmTier, key: &CacheKey, enc: &Encoded, m: &Manifest) {
        match shm.publish(key, enc, m) {
            Ok(n) => self.counters.update(|s| s.tier2.bytes_written += n),
            Err(e) => {
                self.counters.update(|s| s.tier2.errors += 1);
                tracing::warn!(target: LOG, key = %key.short(), dir = %shm.dir.display(),
                    "could not write the tier-2 entry ({e}); continuing without it");
            }
        }
    }

    fn enabled_names(&self) -> String {
        let mut v = vec!["memory"];
        if self.shm.is_some() {
            v.push(self.tier2_source().as_str());
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
                        .map(|m| (self.tier2_source().as_str().into(), m)),
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
                Tier::Shm => self.tier2_source(),
                Tier::Remote => Source::Remote,
            });
        let miss_reason = would_hit.is_none().then(|| {
            key::explain_from_candidates(&want, &candidates)
                .or_else(|| key::first_compile_detail(&want, &candidates).map(|(first, _)| first))
                .unwrap_or_else(|| {
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

    /// How tier 2's entries (shared by every process on the host that uses the same
    /// directory, whatever its project) divide by where they were compiled: in `dir` or a
    /// folder below it, elsewhere, or unknown (entries written before the working directory
    /// was recorded, and unreadable ones). `None` without tier 2.
    pub fn tier2_share(&self, dir: &std::path::Path) -> Option<Share> {
        let shm = self.shm.as_ref()?;
        let mut share = Share::default();
        for e in shm.entries() {
            let origin = ShmTier::read_manifest(&e.path).ok().map(|m| m.created_in).unwrap_or_default();
            let (n, b) = if origin.is_empty() {
                (&mut share.unknown_entries, &mut share.unknown_bytes)
            } else if std::path::Path::new(&origin).starts_with(dir) {
                (&mut share.entries, &mut share.bytes)
            } else {
                (&mut share.other_entries, &mut share.other_bytes)
            };
            *n += 1;
            *b += e.size;
        }
        Some(share)
    }

    /// [`Cache::tier2_share`] of the current working directory.
    pub fn tier2_share_here(&self) -> Option<Share> {
        self.tier2_share(&std::env::current_dir().ok()?)
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
