//! Tier 3: remote, shared across hosts: `gs://bucket/prefix` through
//! object_store's GCS client, or a directory (a shared mount) through its
//! local filesystem store.
//!
//! ```text
//! <root>/entries/<key>.tpx            entry (format.rs), write-once
//! <root>/graphs/<graph>/<key>.json    manifest copy: index for miss explanations
//! ```
//!
//! Objects are created with `PutMode::Create` (GCS: generation-match 0), so
//! an entry is never overwritten; `AlreadyExists` means another host won
//! the race with identical content. Uploads run on the tier's own runtime in
//! the background; reads block the caller for at most the configured
//! timeout. After a network failure the tier is skipped for
//! `retry_after`, so an outage costs one timeout, not one per compile.

use std::future::Future;
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use futures_util::TryStreamExt;
use object_store::gcp::GoogleCloudStorageBuilder;
use object_store::local::LocalFileSystem;
use object_store::path::Path as ObjPath;
use object_store::prefix::PrefixStore;
use object_store::{
    ClientOptions, ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, RetryConfig,
};

use crate::format::{self, Corrupt, Encoded};
use crate::key::{CacheKey, Digest, Manifest};
use crate::stats::Counters;
use crate::Tier3Config;

pub(crate) enum Read3 {
    Hit(Bytes, Box<Manifest>),
    Absent,
    Corrupt(Corrupt),
    Error(String),
    /// Skipped because the remote failed recently.
    Skipped,
}

#[derive(Clone, Debug)]
pub struct RemoteEntry {
    pub key: CacheKey,
    pub size: u64,
    pub last_modified: SystemTime,
}

pub(crate) struct RemoteTier {
    store: Arc<dyn ObjectStore>,
    rt: Option<tokio::runtime::Runtime>,
    timeout: Duration,
    maintenance_timeout: Duration,
    retry_after: Duration,
    pending: Arc<(Mutex<usize>, Condvar)>,
    down_until: Arc<Mutex<Option<Instant>>>,
    counters: Arc<Counters>,
    pub description: String,
}

fn entry_path(key: &CacheKey) -> ObjPath {
    ObjPath::from(format!("entries/{key}.tpx"))
}

fn index_path(graph: &Digest, key: &CacheKey) -> ObjPath {
    ObjPath::from(format!("graphs/{graph}/{key}.json"))
}

fn is_not_found(e: &object_store::Error) -> bool {
    matches!(e, object_store::Error::NotFound { .. })
}

impl RemoteTier {
    pub fn open(cfg: &Tier3Config, counters: Arc<Counters>) -> Result<RemoteTier, String> {
        let store: Arc<dyn ObjectStore> = if let Some(rest) = cfg.root.strip_prefix("gs://") {
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            if bucket.is_empty() {
                return Err(format!("no bucket in {:?}", cfg.root));
            }
            let opts = ClientOptions::new()
                .with_timeout(cfg.timeout)
                .with_connect_timeout(cfg.connect_timeout)
                .with_allow_http(cfg.allow_http);
            let retry = RetryConfig {
                max_retries: 1,
                retry_timeout: cfg.timeout,
                ..Default::default()
            };
            let mut b = GoogleCloudStorageBuilder::from_env()
                .with_bucket_name(bucket)
                .with_client_options(opts)
                .with_retry(retry);
            if let Some(key) = &cfg.gcs_service_account_key {
                b = b.with_service_account_key(key.clone());
            }
            let gcs = b
                .build()
                .map_err(|e| format!("GCS client for {:?}: {e}", cfg.root))?;
            let prefix = prefix.trim_matches('/');
            if prefix.is_empty() {
                Arc::new(gcs)
            } else {
                Arc::new(PrefixStore::new(gcs, prefix))
            }
        } else {
            let path = cfg.root.strip_prefix("file://").unwrap_or(&cfg.root);
            if path.contains("://") {
                return Err(format!(
                    "unsupported tier-3 root {:?}: use gs://bucket/prefix or a path",
                    cfg.root
                ));
            }
            std::fs::create_dir_all(path).map_err(|e| format!("creating {path}: {e}"))?;
            Arc::new(LocalFileSystem::new_with_prefix(path).map_err(|e| format!("{path}: {e}"))?)
        };
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("tpuc-cache-remote")
            .enable_all()
            .build()
            .map_err(|e| format!("starting the tier-3 runtime: {e}"))?;
        Ok(RemoteTier {
            store,
            rt: Some(rt),
            timeout: cfg.timeout,
            maintenance_timeout: cfg.timeout.max(Duration::from_secs(1)) * 20,
            retry_after: cfg.retry_after,
            pending: Arc::new((Mutex::new(0), Condvar::new())),
            down_until: Arc::new(Mutex::new(None)),
            counters,
            description: cfg.root.clone(),
        })
    }

    /// Runs `fut` on the tier's runtime and waits at most `timeout`. Works
    /// from any thread, inside or outside another tokio runtime.
    fn block<T: Send + 'static>(
        &self,
        timeout: Duration,
        fut: impl Future<Output = Result<T, String>> + Send + 'static,
    ) -> Result<T, String> {
        let (tx, rx) = std::sync::mpsc::channel();
        self.rt().spawn(async move {
            let r = tokio::time::timeout(timeout, fut)
                .await
                .unwrap_or_else(|_| Err(format!("timed out after {} ms", timeout.as_millis())));
            let _ = tx.send(r);
        });
        rx.recv_timeout(timeout + Duration::from_millis(500))
            .unwrap_or_else(|_| Err(format!("timed out after {} ms", timeout.as_millis())))
    }

    fn rt(&self) -> &tokio::runtime::Runtime {
        self.rt.as_ref().expect("runtime lives until drop")
    }

    fn is_down(&self) -> bool {
        let mut g = self.down_until.lock().unwrap();
        match *g {
            Some(t) if Instant::now() < t => true,
            Some(_) => {
                *g = None;
                false
            }
            None => false,
        }
    }

    fn mark_down(&self) {
        *self.down_until.lock().unwrap() = Some(Instant::now() + self.retry_after);
    }

    /// Fetches and verifies an entry.
    pub fn get(&self, key: &CacheKey) -> Read3 {
        if self.is_down() {
            return Read3::Skipped;
        }
        let store = self.store.clone();
        let path = entry_path(key);
        let r = self.block(self.timeout, async move {
            match store.get(&path).await {
                Ok(g) => g.bytes().await.map(Some).map_err(|e| e.to_string()),
                Err(e) if is_not_found(&e) => Ok(None),
                Err(e) => Err(e.to_string()),
            }
        });
        match r {
            Ok(None) => Read3::Absent,
            Ok(Some(buf)) => match format::decode(&buf, key) {
                Ok(d) => Read3::Hit(
                    buf.slice(d.payload_start..d.payload_start + d.payload_len),
                    Box::new(d.manifest),
                ),
                Err(c) => Read3::Corrupt(c),
            },
            Err(e) => {
                self.mark_down();
                Read3::Error(e)
            }
        }
    }

    /// Whether an entry object exists (without fetching or verifying it).
    pub fn head(&self, key: &CacheKey) -> Result<Option<u64>, String> {
        if self.is_down() {
            return Err("skipped: the remote failed recently".into());
        }
        let store = self.store.clone();
        let path = entry_path(key);
        self.block(self.timeout, async move {
            match store.head(&path).await {
                Ok(m) => Ok(Some(m.size)),
                Err(e) if is_not_found(&e) => Ok(None),
                Err(e) => Err(e.to_string()),
            }
        })
        .inspect_err(|_| self.mark_down())
    }

    /// Starts fetching the manifests indexed under a graph fingerprint (at
    /// most 16, newest first) so a compile can run meanwhile. `None` while
    /// the remote is marked down.
    pub fn start_manifests_for_graph(
        &self,
        graph: &Digest,
    ) -> Option<Receiver<Result<Vec<Manifest>, String>>> {
        if self.is_down() {
            return None;
        }
        let store = self.store.clone();
        let prefix = ObjPath::from(format!("graphs/{graph}"));
        let timeout = self.timeout * 2;
        let (tx, rx) = std::sync::mpsc::channel();
        self.rt().spawn(async move {
            let work = async {
                let mut metas: Vec<_> = store
                    .list(Some(&prefix))
                    .try_collect()
                    .await
                    .map_err(|e| e.to_string())?;
                metas.sort_by_key(|m| std::cmp::Reverse(m.last_modified));
                let mut out = Vec::new();
                for m in metas.into_iter().take(16) {
                    let Ok(g) = store.get(&m.location).await else {
                        continue;
                    };
                    let Ok(b) = g.bytes().await else { continue };
                    if let Ok(man) = serde_json::from_slice::<Manifest>(&b) {
                        out.push(man);
                    }
                }
                Ok(out)
            };
            let r = tokio::time::timeout(timeout, work)
                .await
                .unwrap_or_else(|_| Err(format!("timed out after {} ms", timeout.as_millis())));
            let _ = tx.send(r);
        });
        Some(rx)
    }

    pub fn manifests_for_graph(&self, graph: &Digest) -> Result<Vec<Manifest>, String> {
        let rx = self
            .start_manifests_for_graph(graph)
            .ok_or("skipped: the remote failed recently")?;
        rx.recv_timeout(self.timeout * 2 + Duration::from_millis(500))
            .unwrap_or_else(|_| Err("timed out".into()))
    }

    /// Queues a write-once upload of `enc` (and its index object). With
    /// `replace`, a bad existing entry is deleted first.
    pub fn upload(&self, key: CacheKey, enc: Encoded, manifest: &Manifest, replace: bool) {
        if self.is_down() {
            tracing::warn!(target: "tpuc_cache", key = %key.short(),
                "tier-3 upload skipped: the remote failed recently; the entry stays local");
            return;
        }
        let store = self.store.clone();
        let pending = self.pending.clone();
        let counters = self.counters.clone();
        let down = self.down_until.clone();
        let retry_after = self.retry_after;
        let graph = manifest.components.graph;
        let timeout = self.timeout.max(Duration::from_millis(100)) * 4;
        *pending.0.lock().unwrap() += 1;
        self.rt().spawn(async move {
            let len = enc.len();
            let work = async {
                let path = entry_path(&key);
                if replace {
                    match store.delete(&path).await {
                        Ok(()) => {}
                        Err(e) if is_not_found(&e) => {}
                        Err(e) => return Err(format!("deleting the bad entry: {e}")),
                    }
                }
                let payload: PutPayload =
                    [Bytes::copy_from_slice(&enc.header), enc.manifest.clone(), enc.payload.clone()]
                        .into_iter()
                        .collect();
                let created = match store.put_opts(&path, payload, PutOptions::from(PutMode::Create)).await {
                    Ok(_) => true,
                    Err(object_store::Error::AlreadyExists { .. }) => false,
                    Err(e) => return Err(e.to_string()),
                };
                let index = index_path(&graph, &key);
                match store.put_opts(&index, PutPayload::from(enc.manifest.clone()), PutOptions::from(PutMode::Create)).await
                {
                    Ok(_) | Err(object_store::Error::AlreadyExists { .. }) => {}
                    Err(e) => return Err(format!("index object: {e}")),
                }
                Ok(created)
            };
            let r = tokio::time::timeout(timeout, work)
                .await
                .unwrap_or_else(|_| Err(format!("timed out after {} ms", timeout.as_millis())));
            match r {
                Ok(true) => {
                    counters.update(|s| s.remote.bytes_written += len);
                    tracing::debug!(target: "tpuc_cache", key = %key.short(), "uploaded to tier 3");
                }
                Ok(false) => {
                    tracing::debug!(target: "tpuc_cache", key = %key.short(), "tier 3 already had the entry")
                }
                Err(e) => {
                    *down.lock().unwrap() = Some(Instant::now() + retry_after);
                    counters.update(|s| s.remote.errors += 1);
                    tracing::warn!(target: "tpuc_cache", key = %key.short(),
                        "tier-3 upload failed, the entry stays local: {e}");
                }
            }
            let mut n = pending.0.lock().unwrap();
            *n -= 1;
            pending.1.notify_all();
        });
    }

    /// Waits for queued uploads, at most `timeout`. True when none remain.
    pub fn flush(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut n = self.pending.0.lock().unwrap();
        while *n > 0 {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            n = self.pending.1.wait_timeout(n, left).unwrap().0;
        }
        true
    }

    pub fn pending(&self) -> usize {
        *self.pending.0.lock().unwrap()
    }

    pub fn list(&self) -> Result<Vec<RemoteEntry>, String> {
        let store = self.store.clone();
        self.block(self.maintenance_timeout, async move {
            let prefix = ObjPath::from("entries");
            let metas: Vec<_> = store
                .list(Some(&prefix))
                .try_collect()
                .await
                .map_err(|e| e.to_string())?;
            Ok(metas
                .into_iter()
                .filter_map(|m| {
                    let name = m.location.filename()?;
                    let key = Digest::from_hex(name.strip_suffix(".tpx")?)?;
                    let ms = m.last_modified.timestamp_millis().max(0) as u64;
                    Some(RemoteEntry {
                        key,
                        size: m.size,
                        last_modified: SystemTime::UNIX_EPOCH + Duration::from_millis(ms),
                    })
                })
                .collect())
        })
    }

    /// Deletes the oldest entries (by object time: creation, since entries
    /// are write-once) until at most `max` bytes remain, with their index
    /// objects. Returns (entries removed, bytes removed).
    pub fn evict_to(&self, max: u64) -> Result<(u64, u64), String> {
        let mut entries = self.list()?;
        let total: u64 = entries.iter().map(|e| e.size).sum();
        if total <= max {
            return Ok((0, 0));
        }
        entries.sort_by_key(|e| e.last_modified);
        let mut victims = Vec::new();
        let mut left = total;
        for e in entries {
            if left <= max {
                break;
            }
            left -= e.size;
            victims.push(e);
        }
        self.delete_entries(victims)
    }

    /// Deletes every entry and index object under the root.
    pub fn clear(&self) -> Result<u64, String> {
        let entries = self.list()?;
        let (n, _) = self.delete_entries(entries)?;
        let store = self.store.clone();
        self.block(self.maintenance_timeout, async move {
            let prefix = ObjPath::from("graphs");
            let metas: Vec<_> = store
                .list(Some(&prefix))
                .try_collect()
                .await
                .map_err(|e| e.to_string())?;
            for m in metas {
                let _ = store.delete(&m.location).await;
            }
            Ok(())
        })?;
        Ok(n)
    }

    fn delete_entries(&self, victims: Vec<RemoteEntry>) -> Result<(u64, u64), String> {
        let store = self.store.clone();
        self.block(self.maintenance_timeout, async move {
            // Map keys to graphs through the index, to delete index objects too.
            let prefix = ObjPath::from("graphs");
            let index: Vec<_> = store
                .list(Some(&prefix))
                .try_collect()
                .await
                .map_err(|e| e.to_string())?;
            let (mut n, mut bytes) = (0u64, 0u64);
            for v in &victims {
                match store.delete(&entry_path(&v.key)).await {
                    Ok(()) => {
                        n += 1;
                        bytes += v.size;
                    }
                    Err(e) if is_not_found(&e) => {}
                    Err(e) => return Err(e.to_string()),
                }
                let name = format!("{}.json", v.key);
                for m in index
                    .iter()
                    .filter(|m| m.location.filename() == Some(name.as_str()))
                {
                    let _ = store.delete(&m.location).await;
                }
            }
            Ok((n, bytes))
        })
    }
}

impl Drop for RemoteTier {
    fn drop(&mut self) {
        // Callers flush first (Cache::drop); never block in a drop here.
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}
