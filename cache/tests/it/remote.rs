//! Tier 3 against a directory and against a real GCS emulator process
//! (fake-gcs-server behind the XML adapter), including an outage, a remote
//! that never answers, corruption and write-once semantics.

use std::fs;
use std::net::TcpListener;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tpuc_cache::{Cache, CacheConfig, KeyComponents, Source, Tier, Tier2Config, Tier3Config};

use crate::support::{capture_logs, exe_bytes, kc, temp_dir, warnings, Gcs};

fn mk(t2: Option<&Path>, t3: Option<&Tier3Config>) -> Cache {
    let tier2 = t2.map(|root| {
        let mut t = Tier2Config::new("t");
        t.root = root.to_path_buf();
        t
    });
    Cache::new(CacheConfig {
        tier2,
        tier3: t3.cloned(),
        flush_timeout: Duration::from_secs(5),
        ..Default::default()
    })
}

fn ok(b: Vec<u8>) -> impl FnOnce() -> Result<Vec<u8>, ()> {
    move || Ok(b)
}

fn never() -> impl FnOnce() -> Result<Vec<u8>, ()> {
    || panic!("this lookup must not compile")
}

fn dir_tier3(root: &Path) -> Tier3Config {
    Tier3Config::new(root.display().to_string())
}

/// Compile in one cache, read from fresh ones: remote, then copied to shm.
fn round_trip(t3: &Tier3Config, k: &KeyComponents, len: usize) {
    let shm = temp_dir("rt-shm");
    let want = exe_bytes(k, len);
    let a = mk(None, Some(t3));
    assert_eq!(
        a.get_or_compile(k, ok(want.clone())).unwrap().source,
        Source::Compiled
    );
    assert!(a.flush(Duration::from_secs(10)), "upload finished");
    let st = a.stats().process;
    assert_eq!(st.remote.errors, 0, "{st:?}\n{:#?}", warnings(""));
    assert!(st.remote.bytes_written > len as u64);

    let b = mk(Some(shm.path()), Some(t3));
    let out = b.get_or_compile(k, never()).unwrap();
    assert_eq!((out.source, &out.bytes[..]), (Source::Remote, &want[..]));
    assert_eq!(b.get_or_compile(k, never()).unwrap().source, Source::Memory);
    // The remote hit was copied into tier 2.
    let c = mk(Some(shm.path()), None);
    let out = c.get_or_compile(k, never()).unwrap();
    assert_eq!((out.source, &out.bytes[..]), (Source::Shm, &want[..]));
    assert_eq!(
        mk(None, Some(t3)).explain(k).would_hit,
        Some(Source::Remote)
    );
}

#[test]
fn directory_root() {
    capture_logs();
    let root = temp_dir("t3-dir");
    let t3 = dir_tier3(root.path());
    let k = kc("t3-dir");
    round_trip(&t3, &k, 100_000);
    let entry = root.path().join(format!("entries/{}.tpx", k.key()));
    assert!(entry.is_file());
    assert!(root
        .path()
        .join(format!("graphs/{}/{}.json", k.graph(), k.key()))
        .is_file());

    // Flip a byte: detected, recompiled, replaced.
    let mut b = fs::read(&entry).unwrap();
    let i = b.len() / 2;
    b[i] ^= 1;
    fs::write(&entry, b).unwrap();
    let c = mk(None, Some(&t3));
    let out = c.get_or_compile(&k, ok(exe_bytes(&k, 100_000))).unwrap();
    assert_eq!(out.source, Source::Compiled);
    assert!(warnings(&k.key().short())
        .iter()
        .any(|l| l.contains("tier-3 entry rejected (checksum mismatch)")));
    assert!(c.flush(Duration::from_secs(5)));
    assert_eq!(c.stats().process.remote.errors, 0);
    let out = mk(None, Some(&t3)).get_or_compile(&k, never()).unwrap();
    assert_eq!(
        (out.source, &out.bytes[..]),
        (Source::Remote, &exe_bytes(&k, 100_000)[..])
    );
}

#[test]
fn directory_eviction_removes_oldest() {
    let root = temp_dir("t3-evict");
    let mut t3 = dir_tier3(root.path());
    t3.max_bytes = Some(250_000);
    let c = mk(None, Some(&t3));
    let keys: Vec<_> = (0..3).map(|i| kc(&format!("t3-evict-{i}"))).collect();
    for k in &keys {
        c.get_or_compile(k, ok(exe_bytes(k, 100_000))).unwrap();
        assert!(c.flush(Duration::from_secs(5)));
        std::thread::sleep(Duration::from_millis(20));
    }
    let r = c.evict().unwrap();
    assert_eq!(r.remote_removed, 1, "{r:?}");
    let left: Vec<_> = c
        .list(Some(Tier::Remote))
        .entries
        .into_iter()
        .map(|e| e.key)
        .collect();
    assert_eq!(left.len(), 2);
    assert!(!left.contains(&keys[0].key()));
    assert!(!root
        .path()
        .join(format!("graphs/{}/{}.json", keys[0].graph(), keys[0].key()))
        .exists());
}

#[test]
fn gcs_emulator() {
    capture_logs();
    let gcs = Gcs::start("tpuc-test-rt");
    let t3 = gcs.tier3("cache/v");
    let k = kc("t3-gcs");
    round_trip(&t3, &k, 100_000);

    // A miss on another host names the difference found in the remote index.
    let mut k2 = k.clone();
    k2.plugin.platform_version = "libtpu 0.0.53".into();
    let c = mk(None, Some(&t3));
    let out = c.get_or_compile(&k2, ok(exe_bytes(&k2, 1000))).unwrap();
    let why = out.miss_explanation.unwrap();
    assert!(
        why.contains("plugin version changed (libtpu 0.0.52 → libtpu 0.0.53)") && why.contains("in remote"),
        "{why}"
    );
    assert!(c.flush(Duration::from_secs(10)));
    let listed = c.list(Some(Tier::Remote));
    assert!(listed.errors.is_empty(), "{:?}", listed.errors);
    assert_eq!(listed.entries.len(), 2);

    // Write-once: the adapter maps a second create to 412, as GCS does.
    let path = format!("/{}/cache/v/entries/{}.tpx", gcs.bucket, k.key());
    let (status, _) = gcs.request(
        "PUT",
        &path,
        &[("x-goog-if-generation-match", "0")],
        b"again",
    );
    assert_eq!(status, 412);

    // Overwrite the entry with garbage behind the cache's back.
    let (status, _) = gcs.request("PUT", &path, &[], b"garbage");
    assert_eq!(status, 200);
    let c = mk(None, Some(&t3));
    let out = c.get_or_compile(&k, ok(exe_bytes(&k, 100_000))).unwrap();
    assert_eq!(out.source, Source::Compiled);
    assert!(warnings(&k.key().short())
        .iter()
        .any(|l| l.contains("tier-3 entry rejected (truncated")));
    // The repair deletes and re-creates the entry; the index object already
    // exists, and that AlreadyExists must not count as an error.
    assert!(c.flush(Duration::from_secs(10)));
    assert_eq!(c.stats().process.remote.errors, 0);
    let out = mk(None, Some(&t3)).get_or_compile(&k, never()).unwrap();
    assert_eq!(
        (out.source, &out.bytes[..]),
        (Source::Remote, &exe_bytes(&k, 100_000)[..])
    );

    assert_eq!(c.clear(Some(Tier::Remote)).unwrap(), 2);
    assert!(c.list(Some(Tier::Remote)).entries.is_empty());
}

#[test]
fn gcs_outage_is_a_warning() {
    capture_logs();
    let mut gcs = Gcs::start("tpuc-test-outage");
    let t3 = gcs.tier3("c");
    let cache = mk(None, Some(&t3));
    let k1 = kc("t3-outage-1");
    assert_eq!(
        cache
            .get_or_compile(&k1, ok(exe_bytes(&k1, 10_000)))
            .unwrap()
            .source,
        Source::Compiled
    );
    assert!(cache.flush(Duration::from_secs(10)));
    assert_eq!(cache.stats().process.remote.errors, 0);

    // The emulator dies while a compile runs: the read before it was fine,
    // the background upload after it fails.
    let k2 = kc("t3-outage-2");
    let out = cache
        .get_or_compile(&k2, || -> Result<Vec<u8>, ()> {
            gcs.stop_emulator();
            Ok(exe_bytes(&k2, 10_000))
        })
        .unwrap();
    assert_eq!(
        (out.source, &out.bytes[..]),
        (Source::Compiled, &exe_bytes(&k2, 10_000)[..])
    );
    cache.flush(Duration::from_secs(10));
    let w = warnings(&k2.key().short());
    assert!(
        w.iter().any(|l| l.contains("tier-3 upload failed")),
        "{w:#?}"
    );

    // The next compile finds the emulator gone (the adapter answers 502).
    std::thread::sleep(t3.retry_after);
    let k3 = kc("t3-outage-3");
    let errors = cache.stats().process.remote.errors;
    let out = cache
        .get_or_compile(&k3, ok(exe_bytes(&k3, 10_000)))
        .unwrap();
    assert_eq!(
        (out.source, &out.bytes[..]),
        (Source::Compiled, &exe_bytes(&k3, 10_000)[..])
    );
    // One failed read, not a retry loop.
    assert_eq!(cache.stats().process.remote.errors, errors + 1);
    let w = warnings(&k3.key().short());
    assert!(w.iter().any(|l| l.contains("tier 3 unreachable")), "{w:#?}");
    // The failed read marked the remote down, so the upload is not even tried.
    assert!(
        w.iter().any(|l| l.contains("tier-3 upload skipped")),
        "{w:#?}"
    );

    // Nothing listens any more: connection refused.
    gcs.stop_adapter();
    std::thread::sleep(t3.retry_after);
    let k4 = kc("t3-outage-4");
    let out = cache.get_or_compile(&k4, ok(vec![3; 100])).unwrap();
    assert_eq!(out.source, Source::Compiled);
    assert!(warnings(&k4.key().short())
        .iter()
        .any(|l| l.contains("tier 3 unreachable")));
    // Tier 1 still serves what it has.
    assert_eq!(
        cache.get_or_compile(&k1, never()).unwrap().source,
        Source::Memory
    );
    assert!(cache.stats().process.remote.errors >= 3);
}

#[test]
fn a_remote_that_never_answers_costs_one_short_timeout() {
    capture_logs();
    // Accepts connections and never replies.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    listener.set_nonblocking(true).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    // Connections the hole accepted: what each request cost, counted instead of timed.
    let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let accepted2 = accepted.clone();
    let hole = std::thread::spawn(move || {
        let mut held = Vec::new();
        let end = Instant::now() + Duration::from_secs(30);
        while !stop2.load(Ordering::SeqCst) && Instant::now() < end {
            if let Ok((s, _)) = listener.accept() {
                held.push(s);
                accepted2.fetch_add(1, Ordering::SeqCst);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    });
    let mut t3 = Tier3Config::new("gs://tpuc-black-hole/x");
    t3.allow_http = true;
    t3.gcs_service_account_key = Some(format!(
        r#"{{"gcs_base_url": "http://127.0.0.1:{port}", "disable_oauth": true, "client_email": "", "private_key": "", "private_key_id": ""}}"#
    ));
    t3.timeout = Duration::from_millis(300);
    let mut cfg = CacheConfig {
        tier3: Some(t3),
        ..Default::default()
    };
    cfg.flush_timeout = Duration::from_secs(3);
    let cache = Cache::new(cfg);
    let k = kc("t3-black-hole");
    let out = cache.get_or_compile(&k, ok(vec![9; 1000])).unwrap();
    assert_eq!(out.source, Source::Compiled);
    let w = warnings(&k.key().short());
    assert!(w.iter().any(|l| l.contains("tier 3 unreachable")), "{w:#?}");
    // One read that timed out, then the remote is marked down: the upload is not tried.
    assert!(
        warnings(&k.key().short()).iter().any(|l| l.contains("tier-3 upload skipped")),
        "{w:#?}"
    );
    let after_first = accepted.load(Ordering::SeqCst);
    assert!((1..=2).contains(&after_first), "{after_first} connections for one read");
    // While marked down, the remote is skipped: no second request.
    let k2 = kc("t3-black-hole-2");
    cache.get_or_compile(&k2, ok(vec![8; 1000])).unwrap();
    cache.flush(Duration::from_secs(5));
    assert_eq!(accepted.load(Ordering::SeqCst), after_first, "a request while the remote is down");
    drop(cache);
    stop.store(true, Ordering::SeqCst);
    hole.join().unwrap();
}
