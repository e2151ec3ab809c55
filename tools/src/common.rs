//! What the commands share: the `Failure` every command returns, writing output, reporting
//! pass notes, compiling lowered programs or StableHLO text through the cache, and `NAME=VALUE`
//! flag values.

use std::io::Write;
use tpuc_driver::DriverError;

use crate::args::TargetArgs;

/// Why a command failed: `User` exits 1, `Internal` (a tpuc bug) exits 2.
pub enum Failure {
    User(String),
    Internal(String),
}

impl From<DriverError> for Failure {
    fn from(e: DriverError) -> Self {
        if e.is_user_error() {
            Failure::User(e.to_string())
        } else {
            Failure::Internal(e.to_string())
        }
    }
}

/// Compiles lowered StableHLO through the cache (unless --no-cache).
pub fn compile_lowered(
    lowered: &tpuc_driver::Lowered,
    target: &TargetArgs,
    cache: Option<&tpuc_driver::exec::Cache>,
    label: &str,
) -> Result<tpuc_driver::exec::Compiled, Failure> {
    let req = target.request_for(lowered)?;
    tpuc_driver::exec::check_target_support(&lowered.module, req.target).map_err(DriverError::from)?;
    let text = lowered.stablehlo.as_deref().unwrap_or_default();
    let compiled = match cache {
        None => tpuc_driver::exec::compile_stablehlo(text, &req),
        Some(cache) => {
            tpuc_driver::exec::compile_cached(text, &lowered.key_program()?, &req, cache, lowered.provenance(label))
        }
    };
    Ok(compiled.map_err(DriverError::from)?)
}


pub fn is_mlir(path: &std::path::Path) -> bool {
    path.extension().is_some_and(|e| e == "mlir")
}

pub fn read_mlir(path: &std::path::Path) -> Result<String, Failure> {
    std::fs::read_to_string(path).map_err(|e| Failure::User(format!("cannot read `{}`: {e}", path.display())))
}

/// StableHLO text from any producer (tpuc lower, JAX, torch_xla), compiled as given (through
/// the cache unless --no-cache).
pub fn compile_mlir(path: &std::path::Path, text: &str, target: &TargetArgs) -> Result<tpuc_driver::exec::Compiled, Failure> {
    let mut req = target.request();
    // A module that declares its partitions or replicas (a sharded JAX module) compiles with
    // them; --partitions may repeat the count but not contradict it.
    let (partitions, replicas) = tpuc_driver::signature::module_counts(text);
    if let Some(n) = partitions.filter(|&n| n > 1) {
        if target.partitions != 1 && target.partitions != n {
            return Err(Failure::User(format!("--partitions {} contradicts the module's mhlo.num_partitions = {n}", target.partitions)));
        }
        req.partitions = n;
    }
    if let Some(n) = replicas.filter(|&n| n > 1) {
        req.replicas = n;
    }
    let label = path.display().to_string();
    let compiled = match target.cache.open() {
        None => tpuc_driver::exec::compile_stablehlo(text, &req),
        Some(cache) => tpuc_driver::exec::compile_cached(text, text, &req, &cache, label.as_str().into()),
    };
    Ok(compiled.map_err(DriverError::from)?)
}

/// The text a lowering produced: StableHLO when emitted, else the IR.
pub fn output_text(lowered: tpuc_driver::Lowered) -> String {
    match lowered.stablehlo {
        Some(s) => s,
        None => tpuc_ir::print_module(&lowered.module),
    }
}

/// Prints the passes' notes (`note: ...`) and, if asked, the pass timing table to stderr.
pub fn report_passes(lowered: &tpuc_driver::Lowered, pass_timing: bool) {
    for n in &lowered.notes {
        eprintln!("note: {n}");
    }
    if pass_timing {
        eprint!("{}", lowered.timings.pass_table());
    }
}

pub fn write_output(path: Option<&std::path::Path>, text: &str) -> Result<(), Failure> {
    match path {
        Some(p) => std::fs::write(p, text).map_err(|e| Failure::User(format!("cannot write {}: {e}", p.display()))),
        None => {
            let mut out = std::io::stdout().lock();
            match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
                Ok(()) => Ok(()),
                // A closed pipe (`tpuc import m.pt2 | head`) is not an error.
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
                Err(e) => Err(Failure::User(format!("cannot write to stdout: {e}"))),
            }
        }
    }
}

/// `NAME=VALUE` where NAME is a symbol name; `None` when the text has no such prefix.
pub fn named(text: &str) -> Option<(&str, &str)> {
    let (name, value) = text.split_once('=')?;
    let ident = name.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    ident.then_some((name, value))
}
