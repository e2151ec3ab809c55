//! The compilation cache through the real `tpuc` binary and the real CPU plugin: concurrent
//! processes compile once, damaged entries are recompiled and repaired, and a remote tier
//! (a shared directory) serves a host whose local tiers are empty.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn fixture(p: &str) -> String {
    repo().join("tests/fixtures").join(p).display().to_string()
}

/// A fresh tier-2 root under /dev/shm (removed on drop).
struct ShmRoot(PathBuf);

impl ShmRoot {
    fn new(tag: &str) -> ShmRoot {
        let p = PathBuf::from(format!("/dev/shm/tpuc-test-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        ShmRoot(p)
    }
}

impl Drop for ShmRoot {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn tpuc(root: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tpuc"));
    c.args(args)
        .env("TPUC_CACHE_TIER2_ROOT", root)
        .env("TPUC_CACHE_DISK", "0")
        .env_remove("TPUC_CACHE_TIER2")
        .env_remove("TPUC_CACHE_TIER3_ROOT");
    c
}

fn json_of(out: &Output) -> serde_json::Value {
    assert!(out.status.success(), "tpuc failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

fn compile_json(root: &Path, extra: &[&str]) -> serde_json::Value {
    let mut args = vec!["compile", "--json", "--cache-tier2", "t"];
    let model = fixture("gpt2_block/core.pt2");
    args.push(&model);
    args.extend_from_slice(extra);
    json_of(&tpuc(root, &args).output().unwrap())
}

fn run_checked(root: &Path, extra: &[&str]) -> Output {
    let (model, input, expected) =
        (fixture("gpt2_block/core.pt2"), fixture("gpt2_block/input_0.npy"), fixture("gpt2_block/expected_0.npy"));
    let mut args = vec![
        "run", &model, "--inputs", &input, "--expect", &expected, "--rtol", "1e-4", "--atol", "1e-5", "-v",
    ];
    args.extend_from_slice(extra);
    let out = tpuc(root, &args).output().unwrap();
    assert!(
        out.status.success(),
        "run failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn entries(root: &Path) -> Vec<PathBuf> {
    let dir = root.join("t/entries");
    let mut v: Vec<PathBuf> = std::fs::read_dir(&dir).map(|d| d.map(|e| e.unwrap().path()).collect()).unwrap_or_default();
    v.sort();
    v
}

#[test]
fn eight_processes_compile_once_and_all_run() {
    let root = ShmRoot::new("eight");
    let children: Vec<_> = (0..8)
        .map(|_| {
            tpuc(&root.0, &["compile", "--json", "--cache-tier2", "t", &fixture("gpt2_block/core.pt2")])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let sources: Vec<String> = children
        .into_iter()
        .map(|c| json_of(&c.wait_with_output().unwrap())["cache"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(sources.iter().filter(|s| *s == "miss").count(), 1, "exactly one compile: {sources:?}");
    assert_eq!(sources.iter().filter(|s| *s == "shm").count(), 7, "{sources:?}");
    // The host statistics agree, and no temporary file is left behind.
    let stats = tpuc(&root.0, &["cache", "stats", "--cache-tier2", "t"]).output().unwrap();
    let text = String::from_utf8_lossy(&stats.stdout);
    assert!(text.contains("1 compiles"), "{text}");
    let tmp = root.0.join("t/tmp");
    let left: Vec<_> = std::fs::read_dir(&tmp).map(|d| d.collect()).unwrap_or_default();
    assert!(left.is_empty(), "temporary files left: {left:?}");
    // Every process can use the shared executable.
    let out = run_checked(&root.0, &["--cache-tier2", "t"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("cache shm"));
}

fn damage_then_check(tag: &str, damage: impl Fn(&Path)) {
    let root = ShmRoot::new(tag);
    assert_eq!(compile_json(&root.0, &[])["cache"], "miss");
    let e = entries(&root.0);
    assert_eq!(e.len(), 1, "{e:?}");
    damage(&e[0]);
    // The damaged entry is a miss with a warning; the program still runs correctly...
    let out = run_checked(&root.0, &["--cache-tier2", "t"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cache miss"), "{tag}: {err}");
    assert!(err.contains("WARN"), "{tag}: expected a warning: {err}");
    // ...and the entry is repaired: the next process hits it.
    assert_eq!(compile_json(&root.0, &[])["cache"], "shm", "{tag}: not repaired");
}

#[test]
fn truncated_entry_is_recompiled_and_repaired() {
    damage_then_check("trunc", |p| {
        let len = std::fs::metadata(p).unwrap().len();
        let f = std::fs::OpenOptions::new().write(true).open(p).unwrap();
        f.set_len(len / 2).unwrap();
    });
}

#[test]
fn flipped_byte_is_recompiled_and_repaired() {
    damage_then_check("flip", |p| {
        let mut b = std::fs::read(p).unwrap();
        let i = b.len() - 100;
        b[i] ^= 0x40;
        std::fs::write(p, b).unwrap();
    });
}

#[test]
fn entry_of_another_format_version_is_recompiled() {
    damage_then_check("version", |p| {
        let mut b = std::fs::read(p).unwrap();
        // Header: 8-byte magic, then the u32 format version.
        b[8..12].copy_from_slice(&99u32.to_le_bytes());
        std::fs::write(p, b).unwrap();
    });
}

#[test]
fn orphan_temporary_file_does_not_block_a_compile() {
    let root = ShmRoot::new("orphan");
    let tmp = root.0.join("t/tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    // As a killed writer (pid 999999 does not exist) leaves it.
    std::fs::write(tmp.join("deadbeef.999999.1.tmp"), b"partial").unwrap();
    assert_eq!(compile_json(&root.0, &[])["cache"], "miss");
    assert_eq!(compile_json(&root.0, &[])["cache"], "shm");
    assert!(!tmp.join("deadbeef.999999.1.tmp").exists(), "orphan not swept");
}

#[test]
fn remote_directory_tier_serves_a_fresh_host() {
    let root = ShmRoot::new("remote");
    let remote = std::env::temp_dir().join(format!("tpuc-test-remote-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&remote);
    let r = remote.display().to_string();
    assert_eq!(compile_json(&root.0, &["--cache-tier3", &r])["cache"], "miss");
    // Another "host": an empty tier 2 of another name, same remote.
    let out = tpuc(&root.0, &["compile", "--json", "--cache-tier2", "other", "--cache-tier3", &r, &fixture("gpt2_block/core.pt2")])
        .output()
        .unwrap();
    assert_eq!(json_of(&out)["cache"], "remote");
    // A remote hit is copied down into tier 2.
    let out = tpuc(&root.0, &["compile", "--json", "--cache-tier2", "other", &fixture("gpt2_block/core.pt2")]).output().unwrap();
    assert_eq!(json_of(&out)["cache"], "shm");
    let _ = std::fs::remove_dir_all(&remote);
}

#[test]
fn miss_explanations_name_the_component_that_changed() {
    let root = ShmRoot::new("explain");
    compile_json(&root.0, &["--target", "tpu", "--topology", "v6e:2x2"]);
    let out = tpuc(
        &root.0,
        &["cache", "explain", "--cache-tier2", "t", "--target", "tpu", "--topology", "v5e:2x2", &fixture("gpt2_block/core.pt2")],
    )
    .output()
    .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    // Another topology is not compared with this one: it is a first compile.
    assert!(text.contains("miss") && text.contains("first compile of this graph for tpu v5e:2x2; it is cached for tpu v6e:2x2"), "{text}");
    assert!(!text.contains('→'), "{text}");
    let v = compile_json(&root.0, &["--target", "tpu", "--topology", "v6e:2x2", "--partitions", "4"]);
    assert_eq!(v["cache"], "miss");
    assert_eq!(v["cache_note"], "compile options: partitions=1 → partitions=4 (closest entry for this graph, in shm)", "{v}");
}

/// The first TPU compile of a program compiled for the CPU before is a plain miss: the
/// summary line is not stretched by a comparison with the CPU entry (every component of which
/// differs). `-v` says what else is cached and how the closest entry differs.
#[test]
fn a_first_compile_for_a_target_or_topology_is_a_plain_miss() {
    let root = ShmRoot::new("first-target");
    assert_eq!(compile_json(&root.0, &[])["cache"], "miss");
    let v = compile_json(&root.0, &["--target", "tpu", "--topology", "v5e:2x2"]);
    assert_eq!((&v["cache"], &v["cache_note"]), (&"miss".into(), &serde_json::Value::Null), "{v}");
    let model = fixture("gpt2_block/core.pt2");
    let out = tpuc(&root.0, &["compile", "--cache-tier2", "t", "--target", "tpu", "--topology", "v6e:2x2", "-v", &model]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let line = String::from_utf8_lossy(&out.stdout);
    assert_eq!(line.lines().count(), 1, "{line}");
    assert!(line.contains("cache miss,") && !line.contains('→') && !line.contains("closest"), "{line}");
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(log.contains("cache miss: first compile of this graph for tpu v6e:2x2; it is cached for cpu, tpu v5e:2x2"), "{log}");
    assert!(log.contains("the closest entry (in shm) differs in: topology v5e:2x2 → v6e:2x2"), "{log}");
    // Without -v nothing of it is printed.
    let out = tpuc(&root.0, &["compile", "--cache-tier2", "t", "--target", "tpu", "--topology", "v5p:2x2x1", &model]).output().unwrap();
    assert!(out.status.success() && !String::from_utf8_lossy(&out.stderr).contains("cache miss"), "{}", String::from_utf8_lossy(&out.stderr));
}

/// A lowering option (precision, bf16) changes the program, not the graph: the miss names
/// the option, in `cache explain` and in the compile's own note.
#[test]
fn miss_explanations_name_a_lowering_option() {
    let root = ShmRoot::new("explain-lowering");
    assert_eq!(compile_json(&root.0, &[])["cache"], "miss");
    let out = tpuc(&root.0, &["cache", "explain", "--cache-tier2", "t", "--precision", "high", &fixture("gpt2_block/core.pt2")])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    // Only the options that changed are named.
    assert!(text.contains(": lowering options precision=highest → high, conv_precision=highest → high (closest entry"), "{text}");
    let v = compile_json(&root.0, &["--bf16"]);
    assert_eq!(v["cache"], "miss");
    assert_eq!(v["cache_note"], "lowering options bf16=off → on (closest entry for this graph, in shm)", "{v}");
}

/// `tpuc plugins` run where no plugin can be found (the binary copied away from the project's
/// .venv, no virtualenv, no plugin variables, a python3 without the packages) exits 1 and says
/// for each target which package brings it and which variable names it.
#[test]
fn plugins_that_finds_none_exits_1_saying_how_to_get_them() {
    let dir = std::env::temp_dir().join(format!("tpuc-plugins-{}", std::process::id()));
    let _clean = ShmRoot(dir.clone());
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join("tpuc");
    std::fs::copy(env!("CARGO_BIN_EXE_tpuc"), &exe).unwrap();
    let out = Command::new(&exe)
        .arg("plugins")
        .current_dir(&dir)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", &dir)
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("cpu: not found: `pip install --no-deps lammps-jax-pjrt-cpu==0.11.2`"), "{text}");
    assert!(text.contains("TPUC_PJRT_CPU_PLUGIN") && text.contains("tpu: not found: `pip install --no-deps libtpu==0.0.52`"), "{text}");
    assert!(text.contains("no PJRT plugin found"), "{text}");
}
