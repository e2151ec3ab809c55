//! The pass manager.

use std::path::PathBuf;
use std::time::{Duration, Instant};
use tpuc_ir::{print_module, verify, Module, VerifyError};

/// One IR → IR transformation.
pub trait Pass {
    /// The name used on the command line and in dumps.
    fn name(&self) -> &'static str;
    /// Runs the pass; returns whether the module changed.
    fn run(&self, module: &mut Module) -> Result<bool, PassError>;
    /// One-line notes for the user about the last run (e.g. what was narrowed); empty by
    /// default.
    fn notes(&self) -> Vec<String> {
        Vec::new()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PassError {
    /// The module broke an invariant after a pass (a compiler bug).
    #[error("IR is invalid after pass `{pass}`:\n{}", render(.errors))]
    VerifyAfter { pass: String, errors: Vec<VerifyError> },
    /// The module given to the manager was already invalid.
    #[error("IR is invalid before the first pass:\n{}", render(.errors))]
    VerifyBefore { errors: Vec<VerifyError> },
    /// A pass could not do its job for a reason the user can act on.
    #[error("pass `{pass}`: {message}")]
    Failed { pass: String, message: String },
    #[error("cannot write IR dump {path}: {source}")]
    Dump { path: PathBuf, source: std::io::Error },
    /// A pass name that is not registered.
    #[error("unknown pass `{name}`; valid passes: {valid}")]
    UnknownPass { name: String, valid: String },
}

fn render(errors: &[VerifyError]) -> String {
    errors.iter().map(|e| format!("  {e}")).collect::<Vec<_>>().join("\n")
}

/// How long a pass took and whether it changed the IR.
#[derive(Debug, Clone)]
pub struct PassTiming {
    pub pass: &'static str,
    pub elapsed: Duration,
    pub changed: bool,
    /// Live ops after the pass.
    pub ops_after: usize,
    /// The pass's notes for the user.
    pub notes: Vec<String>,
}

/// A table of pass timings, one line per pass in pipeline order, for `--pass-timing`.
pub fn format_timings(timings: &[PassTiming]) -> String {
    let total: Duration = timings.iter().map(|t| t.elapsed).sum();
    let width = timings.iter().map(|t| t.pass.len()).max().unwrap_or(4).max(4);
    let mut s = format!("pass timing: {} passes, {:.3} ms\n", timings.len(), total.as_secs_f64() * 1e3);
    for (i, t) in timings.iter().enumerate() {
        let pct = if total.is_zero() { 0.0 } else { 100.0 * t.elapsed.as_secs_f64() / total.as_secs_f64() };
        s += &format!(
            "  {:>2}. {:<width$}  {:>9.3} ms  {:>5.1}%  {:>6} ops  {}\n",
            i + 1,
            t.pass,
            t.elapsed.as_secs_f64() * 1e3,
            pct,
            t.ops_after,
            if t.changed { "changed" } else { "unchanged" }
        );
    }
    s
}

/// Runs passes in order with optional verification, printing, dumps and timing.
pub struct PassManager<'p> {
    passes: Vec<Box<dyn Pass + 'p>>,
    /// Verify before the first pass and after every pass.
    pub verify_each: bool,
    /// Verify the result of the pipeline (the default). A caller that verifies the module
    /// itself right after (the driver, which needs [`tpuc_ir::Verified`] to emit) turns it off.
    pub verify_at_end: bool,
    /// Print the IR to stderr after every pass.
    pub print_after_all: bool,
    /// Write `NN-<pass>.tpuc` files with the IR after every pass.
    pub dump_dir: Option<PathBuf>,
}

impl Default for PassManager<'_> {
    fn default() -> Self {
        Self::new()
    }
}

impl<'p> PassManager<'p> {
    /// An empty pipeline; verification after each pass is on in debug builds.
    pub fn new() -> Self {
        PassManager { passes: Vec::new(), verify_each: cfg!(debug_assertions), verify_at_end: true, print_after_all: false, dump_dir: None }
    }

    pub fn add(&mut self, pass: impl Pass + 'p) -> &mut Self {
        self.passes.push(Box::new(pass));
        self
    }

    /// Appends an already boxed pass (from [`crate::create_pass`]).
    pub fn add_boxed(&mut self, pass: Box<dyn Pass + 'p>) -> &mut Self {
        self.passes.push(pass);
        self
    }

    pub fn pass_names(&self) -> Vec<&'static str> {
        self.passes.iter().map(|p| p.name()).collect()
    }

    /// Runs every pass in order. The module is verified after every pass with `verify_each`,
    /// else at the end unless `verify_at_end` is off.
    pub fn run(&self, module: &mut Module) -> Result<Vec<PassTiming>, PassError> {
        if self.verify_each {
            verify(module).map_err(|errors| PassError::VerifyBefore { errors })?;
        }
        if let Some(dir) = &self.dump_dir {
            std::fs::create_dir_all(dir).map_err(|source| PassError::Dump { path: dir.clone(), source })?;
            self.dump(dir, 0, "input", module)?;
        }
        let mut timings = Vec::with_capacity(self.passes.len());
        for (i, pass) in self.passes.iter().enumerate() {
            let start = Instant::now();
            let changed = pass.run(module)?;
            let elapsed = start.elapsed();
            tracing::debug!(pass = pass.name(), changed, ?elapsed, "pass done");
            let notes = pass.notes();
            for n in &notes {
                tracing::info!(pass = pass.name(), "{n}");
            }
            let ops_after = module.num_live_ops();
            // Erased ops stay in the arenas until compaction; dropping them once they are
            // half the arena keeps later passes, clones and the emitter off the garbage.
            if changed && module.ops.len() > 2 * ops_after {
                module.compact();
            }
            timings.push(PassTiming { pass: pass.name(), elapsed, changed, ops_after, notes });
            if self.verify_each {
                verify(module).map_err(|errors| PassError::VerifyAfter { pass: pass.name().to_string(), errors })?;
            }
            if self.print_after_all {
                eprintln!("// ----- IR after {} -----\n{}", pass.name(), print_module(module));
            }
            if let Some(dir) = &self.dump_dir {
                self.dump(dir, i + 1, pass.name(), module)?;
            }
        }
        if !self.verify_each && self.verify_at_end {
            let last = self.passes.last().map_or("<none>", |p| p.name());
            verify(module).map_err(|errors| PassError::VerifyAfter { pass: last.to_string(), errors })?;
        }
        Ok(timings)
    }

    fn dump(&self, dir: &std::path::Path, index: usize, name: &str, module: &Module) -> Result<(), PassError> {
        let path = dir.join(format!("{index:02}-{name}.tpuc"));
        std::fs::write(&path, print_module(module)).map_err(|source| PassError::Dump { path, source })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tpuc_ir::{DType, TensorType};

    /// Gives `neg`'s result another dtype (`break_it`) or its own back: between the two the
    /// module does not verify.
    struct Retype {
        name: &'static str,
        dtype: DType,
    }

    impl Pass for Retype {
        fn name(&self) -> &'static str {
            self.name
        }

        fn run(&self, m: &mut Module) -> Result<bool, PassError> {
            let (op, _) = m.ops.iter().find(|(_, d)| d.opcode() == tpuc_ir::Opcode::Neg).expect("a neg");
            let r = m.ops[op].results()[0];
            m.values[r].ty = TensorType::from_static(self.dtype, &[4]);
            Ok(true)
        }
    }

    fn run(verify_each: bool, repair: bool) -> Result<Vec<PassTiming>, PassError> {
        let mut m = tpuc_ir::parse_module(
            "module {\n  func @main(%0: tensor<4xf32> {kind = \"input\", name = \"x\"}) -> (tensor<4xf32>) {\n    %1 = neg %0 : tensor<4xf32>\n    return %1\n  }\n}\n",
        )
        .unwrap();
        let mut pm = PassManager::new();
        pm.verify_each = verify_each;
        pm.add(Retype { name: "break", dtype: DType::I32 });
        if repair {
            pm.add(Retype { name: "repair", dtype: DType::F32 });
        }
        pm.run(&mut m)
    }

    #[test]
    fn verifies_after_every_pass_only_when_asked() {
        // Without verify_each (release builds) only the pipeline's result is verified.
        assert_eq!(run(false, true).unwrap().len(), 2);
        for (verify_each, repair) in [(true, true), (false, false)] {
            match run(verify_each, repair) {
                Err(PassError::VerifyAfter { pass, .. }) => assert_eq!(pass, "break"),
                other => panic!("expected a verify error after `break`, got {other:?}"),
            }
        }
    }
}
