//! The compile pipeline, wired once for every caller (the `tpuc` CLI and the Python extension).
//!
//! ```text
//! import (frontend-fx) ─► verify ─► passes (PassManager) ─► emit StableHLO (lowering-stablehlo)
//! ```
//!
//! Errors are split by whose fault they are: [`DriverError::is_user_error`] is true for bad
//! input, unsupported ops and invalid options (the CLI exits 1) and false for compiler bugs such
//! as IR that fails verification after a pass (exit 2).

pub mod exec;
pub mod session;
pub mod tensor;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
pub use tpuc_frontend_fx::{ImportError, Imported};
use tpuc_ir::{Module, TensorData};
use tpuc_lowering_stablehlo::{EmitError, EmitOptions};
use tpuc_passes::{InlineWeights, PassError, PassManager};

/// What the pipeline should produce.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Emit {
    /// tpuc IR text.
    Ir,
    /// StableHLO MLIR text.
    StableHlo,
}

/// Options of the lowering pipeline.
#[derive(Clone, Debug, Default)]
pub struct LowerOptions {
    /// Embed parameters, buffers and constants as constants instead of function arguments.
    pub inline_weights: bool,
    /// Verify the IR after every pass even in release builds.
    pub verify_each: bool,
    /// Print the IR after every pass to stderr.
    pub print_after_all: bool,
    /// Write the IR after every pass into this folder.
    pub dump_dir: Option<PathBuf>,
    /// Attach FX node locations to the StableHLO ops.
    pub debug_locations: bool,
    /// Name of the emitted MLIR module.
    pub module_name: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    #[error(transparent)]
    Import(#[from] ImportError),
    #[error(transparent)]
    Pass(#[from] PassError),
    #[error(transparent)]
    Emit(#[from] EmitError),
    #[error("the imported IR is invalid (a tpuc bug):\n{0}")]
    InvalidImport(String),
    #[error(transparent)]
    Exec(exec::ExecError),
}

impl DriverError {
    /// True when the user can fix the cause (input, options, unsupported ops).
    pub fn is_user_error(&self) -> bool {
        match self {
            DriverError::Import(_) => true,
            DriverError::Pass(PassError::Failed { .. } | PassError::Dump { .. }) => true,
            DriverError::Pass(_) => false,
            DriverError::Emit(EmitError::DynamicDim { .. } | EmitError::Unsupported { .. }) => true,
            DriverError::Emit(_) => false,
            DriverError::InvalidImport(_) => false,
            // Plugin failures (a compile error, a missing plugin) are reported with the plugin's
            // message; the user can act on them (fix the program, install the plugin).
            DriverError::Exec(_) => true,
        }
    }
}

/// The result of a lowering: the final IR and, if requested, the StableHLO text.
pub struct Lowered {
    pub module: Module,
    /// The weights the import found (by qualified name), for running with weights as arguments.
    pub weights: BTreeMap<String, TensorData>,
    pub stablehlo: Option<String>,
    pub timings: Timings,
}

/// Wall time of each stage.
#[derive(Clone, Debug, Default)]
pub struct Timings {
    pub import: Duration,
    pub passes: Vec<(&'static str, Duration)>,
    pub emit: Duration,
}

/// Reads a `.pt2` archive or a bare torch.export `model.json`.
pub fn import(path: &Path) -> Result<Imported, DriverError> {
    let imported = tpuc_frontend_fx::import_file(path)?;
    check_imported(&imported.module)?;
    Ok(imported)
}

/// Same as [`import`] for bytes already in memory.
pub fn import_bytes(bytes: Vec<u8>) -> Result<Imported, DriverError> {
    let imported = tpuc_frontend_fx::import_bytes(bytes)?;
    check_imported(&imported.module)?;
    Ok(imported)
}

fn check_imported(m: &Module) -> Result<(), DriverError> {
    tpuc_ir::verify(m).map_err(|errs| {
        DriverError::InvalidImport(errs.iter().map(|e| format!("  {e}")).collect::<Vec<_>>().join("\n"))
    })
}

/// The pass pipeline for `options` (for now only weight inlining; more passes come with the
/// optimization pipeline).
pub fn pass_manager<'w>(options: &LowerOptions, weights: &'w BTreeMap<String, TensorData>) -> PassManager<'w> {
    let mut pm = PassManager::new();
    pm.verify_each |= options.verify_each;
    pm.print_after_all = options.print_after_all;
    pm.dump_dir = options.dump_dir.clone();
    if options.inline_weights {
        pm.add(InlineWeights { weights });
    }
    pm
}

/// Runs the passes and, for [`Emit::StableHlo`], the emitter.
pub fn lower(imported: Imported, options: &LowerOptions, emit: Emit) -> Result<Lowered, DriverError> {
    let Imported { mut module, weights, .. } = imported;
    let mut timings = Timings::default();
    {
        let pm = pass_manager(options, &weights);
        for t in pm.run(&mut module)? {
            timings.passes.push((t.pass, t.elapsed));
        }
    }
    let stablehlo = match emit {
        Emit::Ir => None,
        Emit::StableHlo => {
            let start = Instant::now();
            let opts = EmitOptions {
                module_name: options.module_name.clone().unwrap_or_else(|| "main".to_string()),
                debug_locations: options.debug_locations,
                ..Default::default()
            };
            let text = tpuc_lowering_stablehlo::emit_stablehlo(&module, &opts)?;
            timings.emit = start.elapsed();
            Some(text)
        }
    };
    Ok(Lowered { module, weights, stablehlo, timings })
}

/// The StableHLO text cache keys hash: the module emitted without locations, so renaming nodes
/// or editing source lines never changes a key.
pub fn key_program(module: &Module) -> Result<String, DriverError> {
    let opts = EmitOptions { module_name: "main".to_string(), debug_locations: false, ..Default::default() };
    Ok(tpuc_lowering_stablehlo::emit_stablehlo(module, &opts)?)
}

/// Import then lower, timing the import too.
pub fn compile_file(path: &Path, options: &LowerOptions, emit: Emit) -> Result<Lowered, DriverError> {
    let start = Instant::now();
    let imported = import(path)?;
    let import_time = start.elapsed();
    let mut lowered = lower(imported, options, emit)?;
    lowered.timings.import = import_time;
    Ok(lowered)
}
