//! Eight processes ask for one key at once with tier 2 on: one compile.
//! The processes are this test binary, re-run on `child_process_entry`.

use std::fs;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tpuc_cache::{Cache, CacheConfig, Digest, Tier2Config};

use crate::support::{capture_logs, exe_bytes, kc, temp_dir, warnings};

const CHILD_ENV: &str = "TPUC_CACHE_TEST_CHILD_DIR";

/// Runs only inside a child process (the env var names its directory).
#[test]
fn child_process_entry() {
    let Some(dir) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let dir = Path::new(&dir);
    let mut t = Tier2Config::new("t");
    t.root = dir.join("shm");
    let cache = Cache::new(CacheConfig {
        tier2: Some(t),
        ..Default::default()
    });
    let k = kc("concurrency");
    // Start together.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !dir.join("go").exists() {
        assert!(Instant::now() < deadline, "no go signal");
        std::thread::sleep(Duration::from_millis(1));
    }
    let out = cache
        .get_or_compile(&k, || -> Result<Vec<u8>, ()> {
            let mut f = fs::OpenOptions::new()
                .append(true)
                .create(true)
                .open(dir.join("compiles.log"))
                .unwrap();
            writeln!(f, "compiled by {}", std::process::id()).unwrap();
            std::thread::sleep(Duration::from_millis(300));
            Ok(exe_bytes(&k, 100_000))
        })
        .unwrap();
    println!("RESULT {} {}", out.source, Digest::of(&out.bytes));
}

#[test]
fn eight_processes_compile_once() {
    let dir = temp_dir("procs");
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..8)
        .map(|_| {
            Command::new(&exe)
                .args([
                    "--exact",
                    "concurrency::child_process_entry",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(CHILD_ENV, dir.path())
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    // Let them all reach the start line, then go.
    std::thread::sleep(Duration::from_millis(500));
    fs::write(dir.path().join("go"), b"").unwrap();
    let mut results = Vec::new();
    for c in children {
        let out = c.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "child failed: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        // libtest prints around it on the same line: take the two words after the marker.
        let mut words = stdout
            .split_once("RESULT ")
            .unwrap_or_else(|| panic!("child printed no result:\n{stdout}"))
            .1
            .split_whitespace();
        let (source, digest) = (words.next().unwrap(), words.next().unwrap());
        results.push((source.to_string(), digest.to_string()));
    }
    let compiles = fs::read_to_string(dir.path().join("compiles.log")).unwrap();
    assert_eq!(
        compiles.lines().count(),
        1,
        "exactly one compile, got:\n{compiles}"
    );
    let want = Digest::of(&exe_bytes(&kc("concurrency"), 100_000)).to_hex();
    assert!(results.iter().all(|(_, d)| *d == want), "{results:?}");
    assert_eq!(
        results.iter().filter(|(s, _)| s == "miss").count(),
        1,
        "{results:?}"
    );
    assert_eq!(
        results.iter().filter(|(s, _)| s == "shm").count(),
        7,
        "{results:?}"
    );
    let tmp: Vec<_> = fs::read_dir(dir.path().join("shm/t/tmp"))
        .unwrap()
        .collect();
    assert!(tmp.is_empty(), "temp files left: {tmp:?}");
    let entries: Vec<_> = fs::read_dir(dir.path().join("shm/t/entries"))
        .unwrap()
        .collect();
    assert_eq!(entries.len(), 1);
    // Host stats add up across the eight processes.
    let mut t = Tier2Config::new("t");
    t.root = dir.path().join("shm");
    let host = Cache::new(CacheConfig {
        tier2: Some(t),
        ..Default::default()
    })
    .stats()
    .host
    .unwrap();
    assert_eq!((host.compiles, host.tier2.hits), (1, 7));
}

/// Child mode "hang": takes the key's lock and compiles forever.
#[test]
fn child_process_hang() {
    let Some(dir) = std::env::var_os("TPUC_CACHE_TEST_HANG_DIR") else {
        return;
    };
    let dir = Path::new(&dir);
    let mut t = Tier2Config::new("t");
    t.root = dir.join("shm");
    let cache = Cache::new(CacheConfig {
        tier2: Some(t),
        ..Default::default()
    });
    let k = kc("killed-holder");
    let _ = cache.get_or_compile(&k, || -> Result<Vec<u8>, ()> {
        fs::write(dir.join("compiling"), b"").unwrap();
        std::thread::sleep(Duration::from_secs(60));
        unreachable!("the parent kills this process")
    });
}

#[test]
fn a_killed_compiler_does_not_block_the_others() {
    let dir = temp_dir("killed");
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "concurrency::child_process_hang",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("TPUC_CACHE_TEST_HANG_DIR", dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !dir.path().join("compiling").exists() {
        assert!(Instant::now() < deadline, "child never started compiling");
        std::thread::sleep(Duration::from_millis(5));
    }
    // The child holds the key's lock now; kill it mid-compile.
    child.kill().unwrap();
    child.wait().unwrap();
    let mut t = Tier2Config::new("t");
    t.root = dir.path().join("shm");
    t.lock_timeout = Duration::from_secs(20);
    let cache = Cache::new(CacheConfig {
        tier2: Some(t),
        ..Default::default()
    });
    let k = kc("killed-holder");
    capture_logs();
    let out = cache
        .get_or_compile(&k, || -> Result<Vec<u8>, ()> { Ok(exe_bytes(&k, 1000)) })
        .unwrap();
    assert_eq!(out.source, tpuc_cache::Source::Compiled);
    // The dead holder's lock was free at once: no wait ran out.
    let w = warnings(&k.key().short());
    assert!(!w.iter().any(|l| l.contains("waited")), "{w:#?}");
    assert!(fs::read_dir(dir.path().join("shm/t/tmp"))
        .unwrap()
        .next()
        .is_none());
}
