//! Numerics: every fixture runs through the reference interpreter and must match PyTorch
//! eager within the manifest's tolerances.

mod common;

#[test]
fn fixtures_match_eager() {
    let dir = common::fixtures_dir();
    let mut failures = Vec::new();
    for e in common::manifest(&dir) {
        let imp = match tpuc_frontend_fx::import_file(&e.file) {
            Ok(i) => i,
            Err(err) => {
                failures.push(format!("{}: import: {err}", e.name));
                continue;
            }
        };
        match common::run_and_compare(&imp, &e) {
            Ok(w) => eprintln!("{:<24} max |diff| {w:.3e}", e.name),
            Err(m) => failures.push(format!("{}: {m}", e.name)),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The crate's op-coverage models (tests/data, made by make_op_fixtures.py).
#[test]
fn op_coverage_models_match_eager() {
    let dir = common::data_dir();
    let mut failures = Vec::new();
    let mut n = 0;
    for e in common::manifest(&dir) {
        n += 1;
        let imp = match tpuc_frontend_fx::import_file(&e.file) {
            Ok(i) => i,
            Err(err) => {
                failures.push(format!("{}: import: {err}", e.name));
                continue;
            }
        };
        if let Err(m) = common::run_and_compare(&imp, &e) {
            failures.push(format!("{}: {m}", e.name));
        }
    }
    assert!(n >= 40, "only {n} op-coverage models");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Extra models from `TPUC_SCRATCH_DIR` (a folder with a manifest.json): run on request with
/// `TPUC_SCRATCH_DIR=dir cargo test -p tpuc-frontend-fx --test numerics -- --ignored`.
#[test]
#[ignore = "needs TPUC_SCRATCH_DIR"]
fn scratch_models_match_eager() {
    let dir = std::env::var("TPUC_SCRATCH_DIR").expect("TPUC_SCRATCH_DIR names a folder with a manifest.json");
    let dir = std::path::PathBuf::from(dir);
    let mut failures = Vec::new();
    for e in common::manifest(&dir) {
        let imp = match tpuc_frontend_fx::import_file(&e.file) {
            Ok(i) => i,
            Err(err) => {
                failures.push(format!("{}: import: {err}", e.name));
                continue;
            }
        };
        match common::run_and_compare(&imp, &e) {
            Ok(w) => eprintln!("{:<24} max |diff| {w:.3e}", e.name),
            Err(m) => failures.push(format!("{}: {m}", e.name)),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
