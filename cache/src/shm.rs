//! Tier 2: a directory of the host, shared by its processes: by default the persistent
//! `~/.cache/tpuc/executables/` (so the next process, and the next run of a script, skips
//! compiling), or host shared memory (`/dev/shm/tpuc/<name>/`) when a name is given.
//!
//! ```text
//! <dir>/entries/<key>.tpx              entry (format.rs), published by rename
//! <dir>/graphs/<graph>/<key>.json      manifest copy: index for miss explanations
//! <dir>/locks/<key>.lock               flock'ed while one process fills the key
//! <dir>/tmp/<name>.<pid>.<nonce>.tmp   files being written; orphans are swept
//! <dir>/stats.json, stats.lock         host totals (see stats.rs)
//! ```
//!
//! Readers never lock: an entry is either absent or complete, because it is
//! written under `tmp/` and renamed into place. Writers of one key serialize
//! on the key's lock file, so processes on one host compile a key once.
//! Least recently used entries go first when the directory exceeds its
//! budget; a hit updates the entry's mtime, which is the "last use".

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;

use crate::format::{self, Corrupt, Encoded, HEADER_LEN};
use crate::key::{CacheKey, Digest, Manifest};

pub(crate) struct ShmTier {
    pub dir: PathBuf,
    pub max_bytes: Option<u64>,
    pub lock_timeout: Duration,
    pub orphan_age: Duration,
}

pub(crate) enum Read2 {
    Hit(Bytes, Box<Manifest>),
    Absent,
    Corrupt(Corrupt),
    Error(io::Error),
}

/// A held per-key lock; released on drop (closing the file releases flock).
pub(crate) struct KeyLock {
    _file: File,
}

pub(crate) struct EntryFile {
    pub key: CacheKey,
    pub path: PathBuf,
    pub size: u64,
    pub mtime: SystemTime,
}

static NONCE: AtomicU64 = AtomicU64::new(0);

/// Tier-2 names become one path component: letters, digits, `.`, `_`, `-`.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && name != "."
        && name != ".."
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
}

impl ShmTier {
    pub fn open(
        root: &Path,
        name: &str,
        max_bytes: Option<u64>,
        lock_timeout: Duration,
        orphan_age: Duration,
    ) -> io::Result<ShmTier> {
        if !valid_name(name) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("tier-2 name {name:?} must be letters, digits, '.', '_' or '-'"),
            ));
        }
        let dir = root.join(name);
        for sub in ["entries", "graphs", "locks", "tmp"] {
            fs::create_dir_all(dir.join(sub))?;
        }
        let t = ShmTier {
            dir,
            max_bytes,
            lock_timeout,
            orphan_age,
        };
        t.sweep_orphans();
        Ok(t)
    }

    fn entry_path(&self, key: &CacheKey) -> PathBuf {
        self.dir.join("entries").join(format!("{key}.tpx"))
    }

    fn index_path(&self, graph: &Digest, key: &CacheKey) -> PathBuf {
        self.dir
            .join("graphs")
            .join(graph.to_hex())
            .join(format!("{key}.json"))
    }

    pub fn stats_path(&self) -> PathBuf {
        self.dir.join("stats.json")
    }

    /// Reads and verifies an entry. The payload is copied once out of the
    /// mapping: a mapping handed to callers would fault (SIGBUS) if someone
    /// truncated the file in place later.
    pub fn read(&self, key: &CacheKey) -> Read2 {
        let path = self.entry_path(key);
        let file = match File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Read2::Absent,
            Err(e) => return Read2::Error(e),
        };
        let len = match file.metadata() {
            Ok(m) => m.len(),
            Err(e) => return Read2::Error(e),
        };
        if len < HEADER_LEN as u64 {
            return Read2::Corrupt(Corrupt(format!(
                "truncated: {len} bytes, shorter than the {HEADER_LEN}-byte header"
            )));
        }
        // SAFETY: entries are only ever replaced by rename, never written in
        // place by tpuc; the mapping lives only inside this function.
        let map = match unsafe { memmap2::MmapOptions::new().map(&file) } {
            Ok(m) => m,
            Err(e) => return Read2::Error(e),
        };
        match format::decode(&map, key) {
            Ok(d) => {
                let payload =
                    Bytes::copy_from_slice(&map[d.payload_start..d.payload_start + d.payload_len]);
                // Last use, for LRU eviction. Best effort.
                let _ = file.set_modified(SystemTime::now());
                Read2::Hit(payload, Box::new(d.manifest))
            }
            Err(c) => Read2::Corrupt(c),
        }
    }

    /// Takes the key's lock, waiting up to `lock_timeout`. `Ok(None)` on
    /// timeout (the caller goes on without it).
    pub fn lock(&self, key: &CacheKey) -> io::Result<Option<KeyLock>> {
        let path = self.dir.join("locks").join(format!("{key}.lock"));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)?;
        let start = Instant::now();
        let mut pause = Duration::from_millis(1);
        loop {
            // SAFETY: plain syscall on an fd we own.
            let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
            if rc == 0 {
                return Ok(Some(KeyLock { _file: file }));
            }
            let err = io::Error::last_os_error();
            if err.raw_os_error() != Some(libc::EWOULDBLOCK)
                && err.kind() != io::ErrorKind::Interrupted
            {
                return Err(err);
            }
            if start.elapsed() >= self.lock_timeout {
                return Ok(None);
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(20));
        }
    }

    /// A fresh temporary path under `tmp/`, named so a sweep can tell the
    /// writer's pid.
    fn tmp_path(&self, stem: &str) -> PathBuf {
        let n = NONCE.fetch_add(1, Ordering::Relaxed);
        let t = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos() as u64;
        self.dir.join("tmp").join(format!(
            "{stem}.{}.{:x}{:x}.tmp",
            std::process::id(),
            t & 0xffff_ffff,
            n
        ))
    }

    fn write_atomic(&self, dest: &Path, stem: &str, parts: &[&[u8]]) -> io::Result<()> {
        let tmp = self.tmp_path(stem);
        let r = (|| {
            let mut f = OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o644)
                .open(&tmp)?;
            for p in parts {
                f.write_all(p)?;
            }
            drop(f);
            fs::rename(&tmp, dest)
        })();
        if r.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        r
    }

    /// Publishes an entry (atomically), its graph index, then enforces the
    /// budget. Returns the bytes written.
    pub fn publish(&self, key: &CacheKey, enc: &Encoded, manifest: &Manifest) -> io::Result<u64> {
        if let Some(max) = self.max_bytes {
            if enc.len() > max {
                return Err(io::Error::other(format!(
                    "entry of {} bytes exceeds the tier-2 budget of {max} bytes",
                    enc.len()
                )));
            }
        }
        self.sweep_orphans();
        let key_hex = key.to_hex();
        self.write_atomic(
            &self.entry_path(key),
            &key_hex,
            &[&enc.header, &enc.manifest, &enc.payload],
        )?;
        let index = self.index_path(&manifest.components.graph, key);
        if let Some(parent) = index.parent() {
            fs::create_dir_all(parent)?;
        }
        self.write_atomic(&index, &key_hex, &[&enc.manifest])?;
        if let Some(max) = self.max_bytes {
            self.evict_to(max, Some(key));
        }
        Ok(enc.len())
    }

    /// Removes `tmp/` files whose writer is gone (pid not alive) or that
    /// are older than `orphan_age`. Returns how many were removed.
    pub fn sweep_orphans(&self) -> u64 {
        let mut removed = 0;
        let Ok(rd) = fs::read_dir(self.dir.join("tmp")) else {
            return 0;
        };
        let now = SystemTime::now();
        for e in rd.flatten() {
            let name = e.file_name();
            let name = name.to_string_lossy();
            let pid: Option<i32> = name.split('.').nth(1).and_then(|p| p.parse().ok());
            let dead = match pid {
                Some(pid) if pid as u32 == std::process::id() => false,
                Some(pid) => !pid_alive(pid),
                None => true,
            };
            let old = e
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|m| now.duration_since(m).ok())
                .is_some_and(|age| age > self.orphan_age);
            if (dead || old) && fs::remove_file(e.path()).is_ok() {
                tracing::warn!(target: "tpuc_cache", file = %e.path().display(),
                    "removed a leftover temporary file from an interrupted cache write");
                removed += 1;
            }
        }
        removed
    }

    /// Manifests indexed under a graph fingerprint whose entry still exists.
    pub fn manifests_for_graph(&self, graph: &Digest) -> Vec<Manifest> {
        let mut out = Vec::new();
        let Ok(rd) = fs::read_dir(self.dir.join("graphs").join(graph.to_hex())) else {
            return out;
        };
        for e in rd.flatten() {
            let Ok(bytes) = fs::read(e.path()) else {
                continue;
            };
            let Ok(m) = serde_json::from_slice::<Manifest>(&bytes) else {
                let _ = fs::remove_file(e.path());
                continue;
            };
            if self.entry_path(&m.key).exists() {
                out.push(m);
            } else {
                let _ = fs::remove_file(e.path());
            }
        }
        out
    }

    pub fn entries(&self) -> Vec<EntryFile> {
        let mut out = Vec::new();
        let Ok(rd) = fs::read_dir(self.dir.join("entries")) else {
            return out;
        };
        for e in rd.flatten() {
            let name = e.file_name();
            let Some(stem) = name.to_str().and_then(|n| n.strip_suffix(".tpx")) else {
                continue;
            };
            let Some(key) = Digest::from_hex(stem) else {
                continue;
            };
            let Ok(md) = e.metadata() else { continue };
            out.push(EntryFile {
                key,
                path: e.path(),
                size: md.len(),
                mtime: md.modified().unwrap_or(SystemTime::UNIX_EPOCH),
            });
        }
        out
    }

    /// Header and manifest of an entry file, without reading the payload.
    pub fn read_manifest(path: &Path) -> Result<Manifest, Corrupt> {
        let mut f = File::open(path).map_err(|e| Corrupt(format!("unreadable: {e}")))?;
        let len = f
            .metadata()
            .map_err(|e| Corrupt(format!("unreadable: {e}")))?
            .len();
        let mut head = [0u8; HEADER_LEN];
        f.read_exact(&mut head)
            .map_err(|_| Corrupt("truncated header".into()))?;
        let m_end = format::manifest_end(&head);
        if m_end as u64 > len {
            return Err(Corrupt("truncated manifest".into()));
        }
        let mut buf = head.to_vec();
        buf.resize(m_end, 0);
        f.read_exact(&mut buf[HEADER_LEN..])
            .map_err(|_| Corrupt("truncated manifest".into()))?;
        format::peek_manifest(&buf, len)
    }

    fn remove_entry(&self, ef: &EntryFile) -> bool {
        let manifest = Self::read_manifest(&ef.path).ok();
        if fs::remove_file(&ef.path).is_err() {
            return false;
        }
        if let Some(m) = manifest {
            let _ = fs::remove_file(self.index_path(&m.components.graph, &ef.key));
        }
        // Drop the lock file if nobody holds it. A waiter that opened it
        // before the unlink may then lock a detached inode; the worst case is
        // one extra compile, never a torn entry.
        let lock = self.dir.join("locks").join(format!("{}.lock", ef.key));
        if let Ok(f) = File::open(&lock) {
            // SAFETY: plain syscall on an fd we own.
            if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
                let _ = fs::remove_file(&lock);
            }
        }
        true
    }

    /// Deletes least recently used entries until the total is at most
    /// `max` bytes, never `keep`. Returns (entries removed, bytes removed).
    pub fn evict_to(&self, max: u64, keep: Option<&CacheKey>) -> (u64, u64) {
        let mut entries = self.entries();
        let mut total: u64 = entries.iter().map(|e| e.size).sum();
        if total <= max {
            return (0, 0);
        }
        entries.sort_by_key(|e| e.mtime);
        let (mut n, mut bytes) = (0, 0);
        for e in &entries {
            if total <= max {
                break;
            }
            if Some(&e.key) == keep {
                continue;
            }
            if self.remove_entry(e) {
                total -= e.size;
                n += 1;
                bytes += e.size;
                tracing::debug!(target: "tpuc_cache", key = %e.key.short(), size = e.size, "evicted from tier 2");
            }
        }
        (n, bytes)
    }

    /// Removes every entry and index file (locks and stats stay).
    pub fn clear(&self) -> u64 {
        let mut n = 0;
        for e in self.entries() {
            if self.remove_entry(&e) {
                n += 1;
            }
        }
        let _ = fs::remove_dir_all(self.dir.join("graphs"));
        let _ = fs::create_dir_all(self.dir.join("graphs"));
        n
    }

    /// Runs `f` holding the stats lock.
    pub fn with_stats_lock<T>(&self, f: impl FnOnce(&Path) -> T) -> io::Result<T> {
        let lock = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(self.dir.join("stats.lock"))?;
        // SAFETY: plain syscall on an fd we own; blocking is brief.
        if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(f(&self.stats_path()))
    }

    /// Runs `f` holding the stats lock, with the stats file and a fresh
    /// temporary path to write it through.
    pub fn update_stats<T>(&self, f: impl FnOnce(&Path, &Path) -> T) -> io::Result<T> {
        let tmp = self.tmp_path("stats");
        self.with_stats_lock(|p| f(p, &tmp))
    }
}

fn pid_alive(pid: i32) -> bool {
    if pid <= 0 {
        return false;
    }
    // SAFETY: signal 0 only checks for existence and permission.
    let rc = unsafe { libc::kill(pid, 0) };
    rc == 0 || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}
