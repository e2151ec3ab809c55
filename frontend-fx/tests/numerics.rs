//! Numerics: every fixture runs through the reference interpreter and must match PyTorch
//! eager within the manifest's tolerances.

mod common;

/// The fixtures, and with `TPUC_SCRATCH_DIR=dir` (a folder with a manifest.json) the models
/// there too: `TPUC_SCRATCH_DIR=dir cargo test -p tpuc-frontend-fx --test numerics`.
#[test]
fn fixtures_match_eager() {
    let mut dirs = vec![common::fixtures_dir()];
    dirs.extend(std::env::var_os("TPUC_SCRATCH_DIR").map(std::path::PathBuf::from));
    let mut failures = Vec::new();
    for dir in dirs {
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
