//! Tier 1: single-flight within a process, the byte budget, failed compiles.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tpuc_cache::{Cache, CacheConfig, Source};

use crate::support::{exe_bytes, kc};

#[test]
fn threads_asking_for_one_key_compile_once() {
    let cache = Arc::new(Cache::new(CacheConfig::default()));
    let compiles = Arc::new(AtomicUsize::new(0));
    let k = kc("memory-single-flight");
    let want = exe_bytes(&k, 4096);
    let barrier = Arc::new(std::sync::Barrier::new(8));
    let handles: Vec<_> = (0..8)
        .map(|_| {
            let (cache, compiles, k, want, barrier) = (
                cache.clone(),
                compiles.clone(),
                k.clone(),
                want.clone(),
                barrier.clone(),
            );
            std::thread::spawn(move || {
                barrier.wait();
                let out = cache
                    .get_or_compile(&k, || -> Result<Vec<u8>, ()> {
                        compiles.fetch_add(1, Ordering::SeqCst);
                        std::thread::sleep(Duration::from_millis(200));
                        Ok(want.clone())
                    })
                    .unwrap();
                assert_eq!(&out.bytes[..], &want[..]);
                out.source
            })
        })
        .collect();
    let sources: Vec<Source> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(compiles.load(Ordering::SeqCst), 1);
    assert_eq!(
        sources.iter().filter(|s| **s == Source::Compiled).count(),
        1
    );
    assert_eq!(sources.iter().filter(|s| **s == Source::Memory).count(), 7);
    let st = cache.stats().process;
    assert_eq!((st.compiles, st.memory.hits), (1, 7));
}

#[test]
fn byte_budget_evicts_least_recently_used() {
    let cache = Cache::new(CacheConfig {
        memory_max_bytes: 250_000,
        ..Default::default()
    });
    let keys: Vec<_> = (0..3).map(|i| kc(&format!("memory-lru-{i}"))).collect();
    let compile = |k: &tpuc_cache::KeyComponents| {
        let b = exe_bytes(k, 100_000);
        move || -> Result<Vec<u8>, ()> { Ok(b) }
    };
    cache.get_or_compile(&keys[0], compile(&keys[0])).unwrap();
    cache.get_or_compile(&keys[1], compile(&keys[1])).unwrap();
    // Use 0 again so 1 is the least recently used when 2 arrives.
    assert_eq!(
        cache
            .get_or_compile(&keys[0], compile(&keys[0]))
            .unwrap()
            .source,
        Source::Memory
    );
    cache.get_or_compile(&keys[2], compile(&keys[2])).unwrap();
    assert_eq!(
        cache
            .get_or_compile(&keys[0], compile(&keys[0]))
            .unwrap()
            .source,
        Source::Memory
    );
    assert_eq!(
        cache
            .get_or_compile(&keys[1], compile(&keys[1]))
            .unwrap()
            .source,
        Source::Compiled
    );
    let usage = &cache.stats().tiers[0];
    assert!(usage.bytes.unwrap() <= 250_000, "{usage:?}");
}

#[test]
fn a_failed_compile_is_returned_and_not_cached() {
    let cache = Cache::new(CacheConfig::default());
    let k = kc("memory-failure");
    let err = cache
        .get_or_compile(&k, || -> Result<Vec<u8>, String> { Err("boom".into()) })
        .unwrap_err();
    assert_eq!(err, "boom");
    let out = cache
        .get_or_compile(&k, || -> Result<Vec<u8>, String> { Ok(vec![1, 2, 3]) })
        .unwrap();
    assert_eq!(
        (out.source, &out.bytes[..]),
        (Source::Compiled, &[1u8, 2, 3][..])
    );
    // The first compile of the graph: a plain miss, nothing to compare with.
    assert_eq!(out.miss_explanation, None);
}
