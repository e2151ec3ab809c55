//! Tier 2: sharing across caches (processes), corruption of every kind,
//! orphans, unwritable directories, LRU budget, miss explanations, stats.

use std::fs;
use std::path::{Path, PathBuf};

use tpuc_cache::{
    Bytes, Cache, CacheConfig, CompileOptions, Encoded, KeyComponents, Manifest, Probe, Source,
    Tier, Tier2Config,
};

use crate::support::{capture_logs, exe_bytes, kc, temp_dir, warnings};

fn cache(root: &Path) -> Cache {
    let mut t = Tier2Config::new("t");
    t.root = root.to_path_buf();
    Cache::new(CacheConfig {
        tier2: Some(t),
        ..Default::default()
    })
}

fn entry(root: &Path, k: &KeyComponents) -> PathBuf {
    root.join("t/entries").join(format!("{}.tpx", k.key()))
}

fn ok(b: Vec<u8>) -> impl FnOnce() -> Result<Vec<u8>, ()> {
    move || Ok(b)
}

fn never() -> impl FnOnce() -> Result<Vec<u8>, ()> {
    || panic!("this lookup must not compile")
}

fn tmp_files(root: &Path) -> Vec<PathBuf> {
    fs::read_dir(root.join("t/tmp"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect()
}

#[test]
fn second_cache_hits_shm_and_stats_persist() {
    let dir = temp_dir("shm-share");
    let k = kc("shm-share");
    let want = exe_bytes(&k, 100_000);
    {
        let a = cache(dir.path());
        let out = a.get_or_compile(&k, ok(want.clone())).unwrap();
        assert_eq!(out.source, Source::Compiled);
    }
    let b = cache(dir.path());
    let out = b.get_or_compile(&k, never()).unwrap();
    assert_eq!(out.source, Source::Shm);
    assert_eq!(&out.bytes[..], &want[..]);
    // And now from b's memory.
    assert_eq!(
        b.get_or_compile(&k, never()).unwrap().source,
        Source::Memory
    );
    let report = b.stats();
    let host = report.host.unwrap();
    assert_eq!(host.compiles, 1);
    assert_eq!(host.tier2.hits, 1);
    assert_eq!(host.memory.hits, 1);
    assert_eq!(report.tiers[1].entries, Some(1));
    assert!(tmp_files(dir.path()).is_empty());
    // Entries carry their manifest.
    let listing = b.list(Some(Tier::Shm));
    let m = listing.entries[0].manifest.as_ref().unwrap();
    assert_eq!(
        (m.key, m.components.topology.as_str(), m.payload_len),
        (k.key(), "v6e:2x2", 100_000)
    );
}

/// Damages the entry with `damage`, then checks a fresh cache warns with
/// `expect`, recompiles to the right bytes, and leaves a repaired entry.
fn corrupted_entry_is_replaced(tag: &str, damage: impl FnOnce(&Path), expect: &str) {
    capture_logs();
    let dir = temp_dir(tag);
    let k = kc(tag);
    let want = exe_bytes(&k, 50_000);
    cache(dir.path())
        .get_or_compile(&k, ok(want.clone()))
        .unwrap();
    damage(&entry(dir.path(), &k));

    let c = cache(dir.path());
    let ex = c.explain(&k);
    assert!(
        matches!(&ex.tiers[1].1, Probe::Corrupt(r) if r.contains(expect)),
        "{ex}"
    );
    let out = c.get_or_compile(&k, ok(want.clone())).unwrap();
    assert_eq!(out.source, Source::Compiled);
    assert_eq!(&out.bytes[..], &want[..]);
    let w = warnings(&k.key().short());
    assert!(
        w.iter()
            .any(|l| l.contains("tier-2 entry rejected") && l.contains(expect)),
        "{w:#?}"
    );
    assert_eq!(c.stats().process.tier2.corrupt, 1);
    // Repaired: a third cache reads it from shm.
    let out = cache(dir.path()).get_or_compile(&k, never()).unwrap();
    assert_eq!((out.source, &out.bytes[..]), (Source::Shm, &want[..]));
    assert!(tmp_files(dir.path()).is_empty());
}

#[test]
fn truncated_entry() {
    corrupted_entry_is_replaced(
        "shm-truncated",
        |p| {
            let f = fs::OpenOptions::new().write(true).open(p).unwrap();
            let len = f.metadata().unwrap().len();
            f.set_len(len / 2).unwrap();
        },
        "truncated",
    );
}

#[test]
fn truncated_below_header() {
    corrupted_entry_is_replaced(
        "shm-truncated-header",
        |p| {
            fs::OpenOptions::new()
                .write(true)
                .open(p)
                .unwrap()
                .set_len(10)
                .unwrap()
        },
        "truncated",
    );
}

#[test]
fn flipped_byte() {
    corrupted_entry_is_replaced(
        "shm-flipped",
        |p| {
            let mut b = fs::read(p).unwrap();
            let i = b.len() - 1234;
            b[i] ^= 0x40;
            fs::write(p, b).unwrap();
        },
        "checksum mismatch",
    );
}

#[test]
fn foreign_format_version() {
    corrupted_entry_is_replaced(
        "shm-version",
        |p| {
            // A well-formed entry (valid checksum) of format version 2.
            let b = fs::read(p).unwrap();
            let m_end = 64 + u32::from_le_bytes(b[16..20].try_into().unwrap()) as usize;
            let enc = Encoded::with_version(
                2,
                Bytes::copy_from_slice(&b[64..m_end]),
                Bytes::copy_from_slice(&b[m_end..]),
            );
            fs::write(p, enc.to_vec()).unwrap();
        },
        "format version 2",
    );
}

#[test]
fn entry_stored_under_the_wrong_name() {
    capture_logs();
    let dir = temp_dir("shm-misnamed");
    let (k1, k2) = (kc("shm-misnamed-1"), kc("shm-misnamed-2"));
    let c = cache(dir.path());
    c.get_or_compile(&k1, ok(exe_bytes(&k1, 1000))).unwrap();
    fs::copy(entry(dir.path(), &k1), entry(dir.path(), &k2)).unwrap();
    let out = cache(dir.path())
        .get_or_compile(&k2, ok(exe_bytes(&k2, 1000)))
        .unwrap();
    assert_eq!(
        (out.source, &out.bytes[..]),
        (Source::Compiled, &exe_bytes(&k2, 1000)[..])
    );
    assert!(warnings(&k2.key().short())
        .iter()
        .any(|l| l.contains("manifest names key")));
}

#[test]
fn orphan_temp_file_is_swept() {
    capture_logs();
    let dir = temp_dir("shm-orphan");
    let k = kc("shm-orphan");
    let want = exe_bytes(&k, 10_000);
    cache(dir.path()); // creates the layout
                       // What a writer killed mid-write leaves: a partial temp file, no entry.
                       // pid 999999999 is above any pid_max, so it is certainly dead.
    let orphan = dir
        .path()
        .join(format!("t/tmp/{}.999999999.1.tmp", k.key()));
    fs::write(&orphan, &want[..3000]).unwrap();
    // A temp file of a live writer (this process) must survive a sweep.
    let live = dir
        .path()
        .join(format!("t/tmp/{}.{}.2.tmp", k.key(), std::process::id()));
    fs::write(&live, b"in progress").unwrap();

    let c = cache(dir.path());
    assert!(!orphan.exists(), "opening the tier sweeps orphans");
    assert!(live.exists());
    let out = c.get_or_compile(&k, ok(want.clone())).unwrap();
    assert_eq!((out.source, &out.bytes[..]), (Source::Compiled, &want[..]));
    assert!(warnings(&dir.path().display().to_string())
        .iter()
        .any(|l| l.contains("leftover temporary file")));
    fs::remove_file(live).unwrap();
    // The same again, found by the maintenance call instead of at open.
    fs::write(&orphan, b"x").unwrap();
    assert_eq!(c.evict().unwrap().orphans_removed, 1);
    assert!(tmp_files(dir.path()).is_empty());
}

#[test]
fn unwritable_tier2_is_a_warning_not_an_error() {
    capture_logs();
    let dir = temp_dir("shm-unwritable");
    let k = kc("shm-unwritable");
    let want = exe_bytes(&k, 10_000);
    let c = cache(dir.path());
    // Writes fail from now on (ENOTDIR), as on a full or broken disk.
    fs::remove_dir_all(dir.path().join("t/tmp")).unwrap();
    fs::write(dir.path().join("t/tmp"), b"not a directory").unwrap();
    let out = c.get_or_compile(&k, ok(want.clone())).unwrap();
    assert_eq!((out.source, &out.bytes[..]), (Source::Compiled, &want[..]));
    assert!(warnings(&k.key().short())
        .iter()
        .any(|l| l.contains("could not write the tier-2 entry")));
    assert_eq!(c.stats().process.tier2.errors, 1);

    // A tier-2 root that cannot be created at all: the tier is off.
    let blocked = dir.path().join("blocked");
    fs::write(&blocked, b"file").unwrap();
    let c = cache(&blocked);
    let st = c.stats();
    assert!(
        !st.tiers[1].enabled && st.tiers[1].detail.contains("off:"),
        "{:?}",
        st.tiers[1]
    );
    let k2 = kc("shm-unwritable-2");
    assert_eq!(
        c.get_or_compile(&k2, ok(vec![1])).unwrap().source,
        Source::Compiled
    );
}

#[test]
fn budget_evicts_least_recently_used() {
    let dir = temp_dir("shm-lru");
    let mut t = Tier2Config::new("t");
    t.root = dir.path().to_path_buf();
    t.max_bytes = Some(250_000);
    let mk = || {
        Cache::new(CacheConfig {
            tier2: Some(t.clone()),
            ..Default::default()
        })
    };
    let keys: Vec<_> = (0..3).map(|i| kc(&format!("shm-lru-{i}"))).collect();
    let c = mk();
    c.get_or_compile(&keys[0], ok(exe_bytes(&keys[0], 100_000)))
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    c.get_or_compile(&keys[1], ok(exe_bytes(&keys[1], 100_000)))
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    // A shm hit on 0 (from a fresh process) makes 1 the least recently used.
    assert_eq!(
        mk().get_or_compile(&keys[0], never()).unwrap().source,
        Source::Shm
    );
    std::thread::sleep(std::time::Duration::from_millis(20));
    c.get_or_compile(&keys[2], ok(exe_bytes(&keys[2], 100_000)))
        .unwrap();
    let fresh = mk();
    assert_eq!(fresh.explain(&keys[0]).would_hit, Some(Source::Shm));
    assert_eq!(fresh.explain(&keys[1]).would_hit, None);
    assert_eq!(fresh.explain(&keys[2]).would_hit, Some(Source::Shm));
    // The evicted entry's index went too: no stale explanation.
    assert!(!dir
        .path()
        .join(format!(
            "t/graphs/{}/{}.json",
            keys[1].graph(),
            keys[1].key()
        ))
        .exists());
    let total: u64 = fresh
        .list(Some(Tier::Shm))
        .entries
        .iter()
        .map(|e| e.size)
        .sum();
    assert!(total <= 250_000);
}

#[test]
fn miss_explanations_name_the_changed_component() {
    let dir = temp_dir("shm-explain");
    let base = kc("shm-explain");
    cache(dir.path())
        .get_or_compile(&base, ok(vec![1; 100]))
        .unwrap();

    type Change = Box<dyn Fn(&mut KeyComponents)>;
    let cases: Vec<(Change, &str)> = vec![
        (
            Box::new(|k| k.plugin.platform_version = "libtpu 0.0.53".into()),
            "plugin version changed",
        ),
        (
            Box::new(|k| {
                k.compile_options = CompileOptions {
                    canonical: b"num_partitions=4".to_vec(),
                    summary: "partitions=4".into(),
                }
            }),
            "compile options: partitions=1 → partitions=4",
        ),
        (
            Box::new(|k| k.tool_version = "tpuc 0.2.0".into()),
            "tpuc version tpuc 0.1.0 → tpuc 0.2.0",
        ),
    ];
    for (change, expect) in cases {
        let mut k = base.clone();
        change(&mut k);
        let c = cache(dir.path());
        let ex = c.explain(&k);
        assert_eq!(ex.would_hit, None);
        assert!(ex.miss_reason.as_deref().unwrap().contains(expect), "{ex}");
        let out = c.get_or_compile(&k, ok(vec![2; 100])).unwrap();
        let why = out.miss_explanation.unwrap();
        assert!(why.contains(expect) && why.contains("in shm"), "{why}");
        // Leave only the base entry for the next case.
        fs::remove_file(entry(dir.path(), &k)).unwrap();
    }
    // Compile options whose summary is the same: said without contradicting it.
    let mut k = base.clone();
    k.compile_options.canonical = b"num_partitions=1 other=1".to_vec();
    let why = cache(dir.path()).get_or_compile(&k, ok(vec![2; 100])).unwrap().miss_explanation.unwrap();
    assert!(why.starts_with("compile options besides partitions=1 changed (closest"), "{why}");
    fs::remove_file(entry(dir.path(), &k)).unwrap();
    let other = kc("shm-explain-other-graph");
    let why = cache(dir.path()).explain(&other).miss_reason.unwrap();
    assert!(why.starts_with("no cached entry for this graph"), "{why}");
}

/// The first compile of a graph for a target or a topology is a plain miss: it is not
/// compared with an entry another target or topology needed (every component would differ,
/// none of it news). `explain` says what the graph is cached for instead.
#[test]
fn a_first_compile_for_a_target_or_topology_is_a_plain_miss() {
    let dir = temp_dir("shm-first");
    let base = kc("shm-first");
    cache(dir.path()).get_or_compile(&base, ok(vec![1; 100])).unwrap();
    let mut cpu = base.clone();
    cpu.target = "cpu".into();
    cpu.topology = String::new();
    cpu.plugin.platform_name = "cpu".into();
    cpu.plugin.pjrt_api_version = "0.115".into();
    let mut v5e = base.clone();
    v5e.topology = "v5e:2x2".into();
    for (k, what) in [(&v5e, "tpu v5e:2x2"), (&cpu, "cpu")] {
        let c = cache(dir.path());
        let ex = c.explain(k);
        assert_eq!(
            ex.miss_reason.as_deref(),
            Some(format!("first compile of this graph for {what}; it is cached for tpu v6e:2x2").as_str())
        );
        let out = c.get_or_compile(k, ok(vec![2; 100])).unwrap();
        assert_eq!((out.source, out.miss_explanation), (Source::Compiled, None));
        fs::remove_file(entry(dir.path(), k)).unwrap();
    }
    // Two entries of the same target and topology are compared, whatever else is cached.
    cache(dir.path()).get_or_compile(&cpu, ok(vec![2; 100])).unwrap();
    let mut cpu2 = cpu.clone();
    cpu2.plugin.pjrt_api_version = "0.116".into();
    let why = cache(dir.path()).get_or_compile(&cpu2, ok(vec![3; 100])).unwrap().miss_explanation.unwrap();
    assert_eq!(why, "PJRT API version 0.115 → 0.116 (closest entry for this graph, in shm)");
}

#[test]
fn explain_list_clear() {
    let dir = temp_dir("shm-clear");
    let k = kc("shm-clear");
    let c = cache(dir.path());
    assert_eq!(c.explain(&k).would_hit, None);
    c.get_or_compile(&k, ok(vec![7; 1000])).unwrap();
    let ex = c.explain(&k);
    assert_eq!(ex.would_hit, Some(Source::Memory));
    assert_eq!(ex.tiers[1], (Tier::Shm, Probe::Hit));
    assert_eq!(ex.tiers[2], (Tier::Remote, Probe::Disabled));
    assert_eq!(c.list(None).entries.len(), 2);
    assert_eq!(c.clear(Some(Tier::Shm)).unwrap(), 1);
    assert_eq!(c.explain(&k).tiers[1].1, Probe::Absent);
    assert_eq!(c.clear(None).unwrap(), 1);
    assert_eq!(c.explain(&k).would_hit, None);
    assert!(c.clear(Some(Tier::Remote)).is_err());
    let _: Option<Manifest> = None;
}

/// Tier 2 is shared by every project on the host; the share of one project's directory
/// counts only the entries compiled there (or below it).
#[test]
fn share_of_a_directory_counts_only_its_entries() {
    let dir = temp_dir("shm-share-of");
    let in_dir = |created_in: &str| {
        let mut t = Tier2Config::new("t");
        t.root = dir.path().to_path_buf();
        Cache::new(CacheConfig {
            tier2: Some(t),
            created_in: Some(PathBuf::from(created_in)),
            ..Default::default()
        })
    };
    let (a, b, c) = (kc("share-a"), kc("share-b"), kc("share-c"));
    in_dir("/projects/one").get_or_compile(&a, ok(exe_bytes(&a, 1000))).unwrap();
    in_dir("/projects/one/sub").get_or_compile(&b, ok(exe_bytes(&b, 2000))).unwrap();
    in_dir("/projects/two").get_or_compile(&c, ok(exe_bytes(&c, 3000))).unwrap();
    let share = in_dir("/elsewhere").tier2_share(Path::new("/projects/one")).unwrap();
    assert_eq!((share.entries, share.other_entries, share.unknown_entries), (2, 1, 0));
    assert!(share.bytes > 3000 && share.bytes < share.other_bytes + 3000, "{share:?}");
    // A directory that only shares a prefix of the name is another project.
    let share = in_dir("/elsewhere").tier2_share(Path::new("/projects/on")).unwrap();
    assert_eq!((share.entries, share.other_entries), (0, 3));
}
