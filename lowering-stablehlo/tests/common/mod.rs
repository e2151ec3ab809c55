//! Test helpers: parse IR text, emit, and check the output with the real StableHLO verifier
//! (jaxlib's MLIR bindings, through `tests/verify_stablehlo.py` at the repository root) or run
//! it on XLA's CPU client (`tests/run_stablehlo.py` next to this file).
#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use tpuc_lowering_stablehlo::{emit_stablehlo, EmitOptions};

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The project venv's Python. A missing venv fails the test: these checks must never pass
/// silently.
pub fn venv_python() -> PathBuf {
    let p = repo_root().join(".venv/bin/python");
    if !p.exists() {
        panic!(
            "{} is missing: the StableHLO checks need the project venv with jaxlib; run scripts/setup.sh",
            p.display()
        );
    }
    p
}

pub fn emit_text(ir: &str, opts: &EmitOptions) -> String {
    let m = tpuc_ir::parse_module(ir).unwrap_or_else(|e| panic!("IR does not parse: {e}\n{ir}"));
    emit_stablehlo(&m, opts).unwrap_or_else(|e| panic!("emit failed: {e}\n{ir}"))
}

/// A one-function IR module: `args` like `%0: tensor<2x3xf32>, %1: ...`, `body` the op lines
/// (ending with `return`).
pub fn ir_module(args: &str, body: &str) -> String {
    let mut s = format!("module {{\n  func @main({args}) -> () {{\n");
    for line in body.trim().lines() {
        s.push_str("    ");
        s.push_str(line.trim());
        s.push('\n');
    }
    s.push_str("  }\n}\n");
    s
}

fn run_python(args: &[&str], stdin: &[u8]) -> (bool, String, String) {
    let mut child = Command::new(venv_python())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start python");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin)
        .expect("write stdin");
    let out = child.wait_with_output().expect("python runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Verifies every (name, StableHLO text) with the real StableHLO verifier in one Python run
/// (`--split-input-file`), also checking that each serializes to a portable artifact unless
/// `portable` is false. Panics with the failing cases and their diagnostics.
pub fn verify_all(cases: &[(String, String)], portable: bool) {
    let script = repo_root().join("tests/verify_stablehlo.py");
    assert!(script.exists(), "{} is missing", script.display());
    let mut text = String::new();
    let mut starts = Vec::new();
    for (name, mlir) in cases {
        if !text.is_empty() {
            text.push_str("// -----\n");
        }
        starts.push((text.lines().count() + 1, name.clone()));
        text.push_str(mlir);
        if !mlir.ends_with('\n') {
            text.push('\n');
        }
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let file = dir.join(format!(
        "verify-{}-{}.mlir",
        std::process::id(),
        cases.len()
    ));
    std::fs::write(&file, &text).unwrap();
    let mut args = vec![script.to_str().unwrap(), "--split-input-file"];
    if portable {
        args.push("--portable");
    }
    args.push(file.to_str().unwrap());
    let (ok, stdout, stderr) = run_python(&args, b"");
    if !ok {
        // Name the cases whose lines the diagnostics point at.
        let mut named = String::new();
        for line in stderr.lines() {
            let case = line
                .split(':')
                .nth(1)
                .and_then(|l| l.parse::<usize>().ok())
                .and_then(|ln| {
                    starts
                        .iter()
                        .rev()
                        .find(|(s, _)| *s <= ln)
                        .map(|(_, n)| n.clone())
                });
            match case {
                Some(c) => named.push_str(&format!("[{c}] {line}\n")),
                None => named.push_str(&format!("{line}\n")),
            }
        }
        panic!(
            "StableHLO verification failed (file {}):\n{named}\n{stdout}",
            file.display()
        );
    }
    if std::env::var_os("TPUC_KEEP_MLIR").is_none() {
        let _ = std::fs::remove_file(&file);
    }
}

/// Runs the numerics script on (name, StableHLO text) cases; returns its report. Panics if any
/// case fails its reference check.
pub fn run_numerics(cases: &[(String, String)]) -> String {
    run_xla(cases, &[])
}

/// Compiles every case with XLA's CPU backend; panics naming the ones that fail.
pub fn compile_all(cases: &[(String, String)]) -> String {
    run_xla(cases, &["--compile-only"])
}

fn run_xla(cases: &[(String, String)], extra: &[&str]) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/run_stablehlo.py");
    let mut input = String::new();
    for (name, mlir) in cases {
        input.push_str(&format!("=== {name}\n{mlir}"));
        if !mlir.ends_with('\n') {
            input.push('\n');
        }
    }
    let mut args = vec![script.to_str().unwrap()];
    args.extend_from_slice(extra);
    let (ok, stdout, stderr) = run_python(&args, input.as_bytes());
    let stderr: String = stderr
        .lines()
        .filter(|l| !l.starts_with('I') || !l.contains(".cc:"))
        .collect::<Vec<_>>()
        .join("\n");
    if !ok {
        panic!("XLA check failed:\n{stdout}\n{stderr}");
    }
    stdout
}
