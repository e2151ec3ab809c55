//! Hit latencies per tier for a 100 KB and a 10 MB entry, printed as a table:
//! `cargo bench -p tpuc-cache --bench tier_hits`. The remote tier runs against the real GCS
//! emulator (scripts/setup.sh installs it) behind the XML adapter, as the tests do.

use std::time::{Duration, Instant};

use tpuc_cache::{Cache, CacheConfig, Source, Tier, Tier2Config, Tier3Config};

#[path = "../tests/it/support.rs"]
mod support;

use support::{exe_bytes, kc, temp_dir, Gcs};

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn time_hits(
    cache: &Cache,
    k: &tpuc_cache::KeyComponents,
    want: Source,
    runs: usize,
    clear_memory: bool,
) -> Duration {
    let mut v = Vec::new();
    for _ in 0..runs {
        if clear_memory {
            cache.clear(Some(Tier::Memory)).unwrap();
        }
        let t = Instant::now();
        let out = cache
            .get_or_compile(k, || -> Result<Vec<u8>, ()> { panic!("must hit") })
            .unwrap();
        v.push(t.elapsed());
        assert_eq!(out.source, want);
    }
    median(v)
}

fn main() {
    let shm = temp_dir("bench-shm");
    let dir3 = temp_dir("bench-t3");
    let gcs = Gcs::start("tpuc-bench");
    println!("| size | tier 1 memory | tier 2 shm | tier 3 dir | tier 3 GCS emulator |");
    println!("|---|---|---|---|---|");
    for (label, len) in [("100 KB", 100_000usize), ("10 MB", 10_000_000)] {
        let k = kc(&format!("bench-{len}"));
        let bytes = exe_bytes(&k, len);
        let mut t2 = Tier2Config::new("b");
        t2.root = shm.path().to_path_buf();
        let c2 = Cache::new(CacheConfig {
            tier2: Some(t2),
            ..Default::default()
        });
        c2.get_or_compile(&k, || -> Result<Vec<u8>, ()> { Ok(bytes.clone()) })
            .unwrap();
        let t1 = time_hits(&c2, &k, Source::Memory, 10_001, false);
        let t2 = time_hits(&c2, &k, Source::Shm, 51, true);

        let c3 = Cache::new(CacheConfig {
            tier3: Some(Tier3Config::new(dir3.path().display().to_string())),
            ..Default::default()
        });
        c3.get_or_compile(&k, || -> Result<Vec<u8>, ()> { Ok(bytes.clone()) })
            .unwrap();
        assert!(c3.flush(Duration::from_secs(30)));
        let t3d = time_hits(&c3, &k, Source::Remote, 21, true);

        let mut g = gcs.tier3("bench");
        g.timeout = Duration::from_secs(10);
        let cg = Cache::new(CacheConfig {
            tier3: Some(g),
            ..Default::default()
        });
        cg.get_or_compile(&k, || -> Result<Vec<u8>, ()> { Ok(bytes.clone()) })
            .unwrap();
        assert!(cg.flush(Duration::from_secs(30)));
        let t3g = time_hits(&cg, &k, Source::Remote, 11, true);
        println!("| {label} | {t1:?} | {t2:?} | {t3d:?} | {t3g:?} |");
    }
}
