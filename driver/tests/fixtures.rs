//! Every reference fixture (tests/fixtures/manifest.json) goes through the whole pipeline, and
//! every emitted StableHLO module must pass the real StableHLO verifier (jaxlib's MLIR bindings
//! with the StableHLO dialect, through tests/verify_stablehlo.py). This is the acceptance test
//! of the emitter; text snapshots alone could not catch a module XLA rejects.

use std::path::{Path, PathBuf};
use std::process::Command;
use tpuc_driver::{Emit, LowerOptions};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

struct Fixture {
    name: String,
    file: PathBuf,
    kind: String,
}

fn fixtures() -> Vec<Fixture> {
    let dir = repo().join("tests/fixtures");
    let text = std::fs::read_to_string(dir.join("manifest.json")).expect("tests/fixtures/manifest.json");
    let list: serde_json::Value = serde_json::from_str(&text).expect("manifest is JSON");
    list.as_array()
        .expect("manifest is a list")
        .iter()
        .map(|f| Fixture {
            name: f["name"].as_str().unwrap().to_string(),
            file: dir.join(f["file"].as_str().unwrap()),
            kind: f["kind"].as_str().unwrap().to_string(),
        })
        .collect()
}

fn python() -> PathBuf {
    let py = repo().join(".venv/bin/python");
    assert!(py.exists(), "{} is missing: run scripts/setup.sh first (it installs jaxlib for the verifier)", py.display());
    py
}

fn verify_stablehlo(files: &[PathBuf]) {
    let out = Command::new(python())
        .arg(repo().join("tests/verify_stablehlo.py"))
        .args(files)
        .output()
        .expect("run the StableHLO verifier");
    assert!(
        out.status.success(),
        "StableHLO verifier rejected emitted modules:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn out_dir(name: &str) -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn lower(path: &Path, options: &LowerOptions) -> String {
    let lowered = tpuc_driver::compile_file(path, options, Emit::StableHlo)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    lowered.stablehlo.unwrap()
}

#[test]
fn every_fixture_lowers_to_verified_stablehlo() {
    let dir = out_dir("stablehlo");
    let mut files = Vec::new();
    for f in fixtures() {
        for (suffix, options) in [
            ("args", LowerOptions::default()),
            ("inline", LowerOptions { inline_weights: true, debug_locations: true, ..Default::default() }),
        ] {
            if f.kind != "inference" && suffix == "inline" {
                continue; // training graphs take every tensor as an input: nothing to inline
            }
            if f.name.contains("dynamic") {
                continue; // symbolic dims: see dynamic_dims_are_a_clear_error
            }
            let text = lower(&f.file, &options);
            let out = dir.join(format!("{}.{suffix}.mlir", f.name));
            std::fs::write(&out, &text).unwrap();
            files.push(out);
        }
    }
    assert!(files.len() >= 14, "expected all fixtures, got {}", files.len());
    verify_stablehlo(&files);
}

#[test]
fn lowering_is_deterministic() {
    for f in fixtures().iter().filter(|f| !f.name.contains("dynamic")) {
        let a = lower(&f.file, &LowerOptions::default());
        let b = lower(&f.file, &LowerOptions::default());
        assert!(a == b, "{}: two lowerings differ", f.name);
    }
}

#[test]
fn dynamic_dims_are_a_clear_error() {
    let f = repo().join("tests/fixtures/mlp/dynamic.pt2");
    let err = match tpuc_driver::compile_file(&f, &LowerOptions::default(), Emit::StableHlo) {
        Ok(_) => panic!("symbolic dims should not lower yet"),
        Err(e) => e,
    };
    assert!(err.is_user_error());
    let msg = err.to_string();
    assert!(msg.contains("s77") || msg.contains("dynamic"), "{msg}");
    // The IR keeps the symbolic dims.
    let imported = tpuc_driver::import(&f).unwrap();
    assert!(tpuc_ir::print_module(&imported.module).contains("symbol @"));
}

#[test]
fn snapshots_of_small_fixtures() {
    for name in ["mlp/core.pt2", "mlp/export.pt2", "cnn/export.pt2"] {
        let text = lower(&repo().join("tests/fixtures").join(name), &LowerOptions::default());
        insta::assert_snapshot!(name.replace(['/', '.'], "_"), text);
    }
}

/// A call reads each symbol's size from the inputs where the importer put it: the batch of `x`
/// (signature input 4, after the four weights), with the exported range.
#[test]
fn size_reads_name_the_input_dim_and_range_of_each_symbol() {
    use tpuc_driver::dynamic::{size_reads, SizeRead};
    let imported = tpuc_driver::import(&repo().join("tests/fixtures/mlp/dynamic.pt2")).unwrap();
    let sym = imported.module.symbols.iter().next().unwrap().name.to_string();
    assert_eq!(size_reads(&imported), Some(vec![SizeRead { input: 4, dim: Some(0), symbol: sym, min: 2, max: Some(64) }]));
    // A static program has nothing to read.
    assert_eq!(size_reads(&tpuc_driver::import(&repo().join("tests/fixtures/mlp/core.pt2")).unwrap()), None);
}

/// A symbol that no input dim holds by itself (only `2*s`) cannot be read at a call: no plan.
#[test]
fn a_size_seen_only_in_an_expression_cannot_be_read() {
    let dir = std::env::temp_dir().join(format!("tpuc-size-reads-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ir = |dims: &str| {
        let path = dir.join("m.tpuc");
        let text = format!("module {{\n  symbol @s : [1, 8]\n  func @main(%0: tensor<{dims}xf32> {{kind = \"input\", name = \"x\"}}) -> (tensor<{dims}xf32>) {{\n    return %0\n  }}\n}}\n");
        std::fs::write(&path, text).unwrap();
        tpuc_driver::dynamic::size_reads(&tpuc_driver::import(&path).unwrap())
    };
    assert_eq!(ir("(2*s)x3"), None);
    let reads = ir("(2*s)xs").unwrap();
    assert_eq!((reads.len(), reads[0].dim, reads[0].min, reads[0].max), (1, Some(1), 1, Some(8)));
    std::fs::remove_dir_all(&dir).unwrap();
}
