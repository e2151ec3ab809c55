//! The compile pipeline, wired once for every caller (the `tpuc` CLI and the Python extension).
//!
//! ```text
//! import (frontend-fx, verifies) ─► passes (PassManager, verifies at the end) ─► emit StableHLO
//! ```
//!
//! Each stage's result is verified once in release builds: the importer verifies what it
//! built, and the driver the result of the pipeline (the pass manager verifies after every
//! pass with `verify_each`, always in debug builds); the emitter takes that verification's
//! proof ([`tpuc_ir::Verified`]), so it cannot see an unverified module. The
//! StableHLO text is emitted once: the cache key hashes that same text ([`Lowered::key_program`]).
//!
//! Errors are split by whose fault they are: [`DriverError::is_user_error`] is true for bad
//! input, unsupported ops and invalid options (the CLI exits 1) and false for compiler bugs such
//! as IR that fails verification after a pass (exit 2).

pub mod boxes;
pub mod buckets;
pub mod checks;
pub mod dynamic;
pub mod exec;
pub mod job_graph;
pub mod logging;
pub mod options;
pub mod session;
pub mod signature;
pub mod spmd;
pub mod step_export;
pub mod tensor;

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
pub use tpuc_frontend_fx::{supported_targets, ConstValue, ImportError, Imported, InputSlot, NodeRef, OutputSlot, SEED_INPUT};
/// What each argument of a program is, and the dtype of tensors crossing the boundary (the
/// extension checks DLPack tensors against it).
pub use tpuc_ir::{ArgKind, DType};
use tpuc_ir::{Module, TensorData};
use tpuc_lowering_stablehlo::{EmitError, EmitOptions};
use tpuc_passes::{PassError, PassManager, PassTiming};
pub use spmd::MeshSharding;
pub use tpuc_lowering_stablehlo::Ranks;
pub use tpuc_passes::Precision;
/// The one target type, shared with the passes, the runtime and the CLI.
pub use tpuc_platform::Target;

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
    /// The target the default pipeline is chosen for (and TPU legalization runs for).
    pub target: Target,
    /// Matmul / convolution precision; `None` = the target's default (TPU `default`, CPU
    /// `highest`).
    pub precision: Option<Precision>,
    /// Convolution precision; `None` = `precision` if set, else the target's default for
    /// convolutions (GPU: `default`, TF32, as torch's cuDNN convolutions).
    pub conv_precision: Option<Precision>,
    /// Matmuls and convolutions in bf16 with f32 accumulation.
    pub bf16: bool,
    /// Drop round trips through narrower float types.
    pub allow_excess_precision: bool,
    /// The default pipeline without `fuse` (no composites).
    pub no_fusion: bool,
    /// Run exactly these passes (by registry name) instead of the default pipeline;
    /// `inline-weights` is still put first when `inline_weights` is set and the list lacks it.
    pub passes: Option<Vec<String>>,
    /// Ask for per-pass timings (they are always measured; callers print them when set).
    pub pass_timing: bool,
    /// An SPMD program: the device mesh and argument shardings, emitted as Shardy.
    pub sharding: Option<MeshSharding>,
    /// Shardings for the arguments `sharding` does not name, chosen by a policy.
    pub shard_policy: Option<spmd::ShardPolicy>,
    /// An argument the policy was asked to split but could not is an error, not a note.
    pub strict_sharding: bool,
    /// A per-rank program (with collectives): the ranks and process groups.
    pub ranks: Option<Ranks>,
    /// Specialize to this bucket first (the `specialize` pass): a padded size per symbol.
    pub bucket: Option<dynamic::Sizes>,
    /// Alias every state update of `main` to the argument it updates (`tf.aliasing_output`),
    /// so that a runner that donates the state updates it in place (training steps).
    pub donate_state: bool,
}

impl LowerOptions {
    /// The options the pass registry understands.
    pub fn pipeline_options(&self) -> tpuc_passes::PipelineOptions {
        tpuc_passes::PipelineOptions {
            target: self.target,
            precision: self.precision,
            conv_precision: self.conv_precision,
            bf16: self.bf16,
            allow_excess_precision: self.allow_excess_precision,
            no_fusion: self.no_fusion,
            bucket: self.bucket.clone(),
        }
    }

    /// The options that choose how a graph lowers, for people (cache manifests name them when
    /// a miss differs only in them): each option the options table marks as lowering, with its
    /// value (`precision=highest bf16=off allow_excess_precision=off fusion=on`), plus
    /// `passes=...` for an explicit pipeline.
    pub fn lowering_summary(&self) -> String {
        let mut s: Vec<String> = options::OPTIONS
            .iter()
            .filter(|o| o.lowers)
            .map(|o| format!("{}={}", o.name, self.option_value(o.name).unwrap_or_else(|| panic!("no value for lowering option `{}`", o.name))))
            .collect();
        if self.passes.is_some() || self.inline_weights {
            s.push(format!("passes={}", self.pass_names().join(",")));
        }
        s.join(" ")
    }

    /// The value of a lowering option as the options table names it (`None` for the others).
    fn option_value(&self, name: &str) -> Option<String> {
        use tpuc_ir::AttrEnum;
        let onoff = |b: bool| if b { "on" } else { "off" }.to_string();
        Some(match name {
            "precision" => self.pipeline_options().precision().name().to_string(),
            "conv_precision" => self.pipeline_options().conv_precision().name().to_string(),
            "bf16" => onoff(self.bf16),
            "allow_excess_precision" => onoff(self.allow_excess_precision),
            "fusion" => onoff(!self.no_fusion),
            _ => return None,
        })
    }

    /// The pass names this lowering runs, in order.
    pub fn pass_names(&self) -> Vec<String> {
        let mut names: Vec<String> = match &self.passes {
            Some(list) => list.clone(),
            None => tpuc_passes::default_pipeline(&self.pipeline_options()).into_iter().map(|p| p.name().to_string()).collect(),
        };
        if self.inline_weights && !names.iter().any(|n| n == "inline-weights") {
            names.insert(0, "inline-weights".to_string());
        }
        // A bucket is specialized to before anything else runs on the symbolic program.
        if self.bucket.is_some() && !names.iter().any(|n| n == "specialize") {
            names.insert(0, "specialize".to_string());
        }
        names
    }
}

#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    #[error(transparent)]
    Import(#[from] ImportError),
    #[error(transparent)]
    Pass(#[from] PassError),
    #[error(transparent)]
    Emit(#[from] EmitError),
    /// A `.tpuc` IR text file that does not parse or verify.
    #[error("{path}: {message}")]
    IrText { path: String, message: String },
    #[error(transparent)]
    Exec(#[from] exec::ExecError),
    /// Options that do not fit the program (e.g. a sharding naming no argument).
    #[error("{0}")]
    Options(String),
}

impl DriverError {
    /// True when the user can fix the cause (input, options, unsupported ops).
    pub fn is_user_error(&self) -> bool {
        match self {
            DriverError::Import(_) => true,
            DriverError::Pass(PassError::Failed { .. } | PassError::Dump { .. } | PassError::UnknownPass { .. }) => true,
            DriverError::IrText { .. } => true,
            DriverError::Pass(_) => false,
            DriverError::Emit(EmitError::DynamicDim { .. } | EmitError::Unsupported { .. }) => true,
            DriverError::Emit(_) => false,
            // Plugin failures (a compile error, a missing plugin) are reported with the plugin's
            // message; the user can act on them (fix the program, install the plugin).
            DriverError::Exec(_) => true,
            DriverError::Options(_) => true,
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
    /// One-line notes from the passes for the user (e.g. what TPU legalization narrowed).
    pub notes: Vec<String>,
    /// Whether `stablehlo` was emitted with the options cache keys use.
    stablehlo_is_key: bool,
    /// The mesh and argument shardings the program was emitted with (part of its key).
    pub sharding: Option<MeshSharding>,
    /// The ranks of a per-rank program (part of its key).
    pub ranks: Option<Ranks>,
    /// Whether state updates were emitted aliased to their arguments (part of its key).
    pub donate_state: bool,
    /// The source graph's fingerprint (a digest of the program JSON), when it came from one.
    pub graph: Option<tpuc_cache::Digest>,
    /// [`LowerOptions::lowering_summary`] of the options it was lowered with.
    pub lowering: String,
}

impl Lowered {
    /// How cache manifests name this program: `label`, the source graph and the lowering
    /// options (so a miss caused by a lowering option says which).
    pub fn provenance<'a>(&'a self, label: &'a str) -> exec::Provenance<'a> {
        exec::Provenance { label, graph: self.graph, lowering: &self.lowering }
    }

    /// The StableHLO text cache keys hash: the module emitted without locations as
    /// `module @main`, so renaming nodes or editing source lines never changes a key. That is
    /// `stablehlo` itself when it was emitted so (the default options), and only otherwise
    /// emitted here.
    pub fn key_program(&self) -> Result<Cow<'_, str>, DriverError> {
        match &self.stablehlo {
            Some(text) if self.stablehlo_is_key => Ok(Cow::Borrowed(text)),
            _ => Ok(Cow::Owned(tpuc_lowering_stablehlo::emit_stablehlo(
                &self.module,
                &key_emit_options(&self.ranks, self.donate_state),
            )?)),
        }
    }
}

/// The emitter options of cache keys: no locations, `module @main`, the program's ranks and
/// state aliasing (its sharding is in the module).
fn key_emit_options(ranks: &Option<Ranks>, donate_state: bool) -> EmitOptions {
    EmitOptions {
        module_name: "main".to_string(),
        debug_locations: false,
        ranks: ranks.clone(),
        donate_state,
        ..Default::default()
    }
}

/// Wall time of each stage.
#[derive(Clone, Debug, Default)]
pub struct Timings {
    pub import: Duration,
    pub passes: Vec<(&'static str, Duration)>,
    pub emit: Duration,
    /// Per pass: time, whether it changed the IR, live ops after it.
    pub pass_details: Vec<PassTiming>,
}

impl Timings {
    /// The `--pass-timing` table.
    pub fn pass_table(&self) -> String {
        tpuc_passes::format_timings(&self.pass_details)
    }
}

/// Reads a `.pt2` archive or a bare torch.export `model.json`, or tpuc IR text (a `.tpuc`
/// file, as `tpuc import` and `--dump-dir` write it; no weight data).
pub fn import(path: &Path) -> Result<Imported, DriverError> {
    if path.extension().is_some_and(|e| e == "tpuc") {
        return import_ir_text(path);
    }
    // The importer verifies what it built.
    Ok(tpuc_frontend_fx::import_file(path)?)
}

/// Same as [`import`] for bytes already in memory.
pub fn import_bytes(bytes: Vec<u8>) -> Result<Imported, DriverError> {
    Ok(tpuc_frontend_fx::import_bytes(bytes)?)
}

/// Parses and verifies tpuc IR text; `main`'s arguments and results are the signature.
pub fn import_ir_text(path: &Path) -> Result<Imported, DriverError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path)
        .map_err(|e| DriverError::IrText { path: shown.clone(), message: e.to_string() })?;
    let module = tpuc_ir::parse_module(&text).map_err(|e| DriverError::IrText { path: shown.clone(), message: e.to_string() })?;
    tpuc_ir::verify(&module).map_err(|errs| DriverError::IrText {
        path: shown.clone(),
        message: format!("the IR does not verify:\n{}", errs.iter().map(|e| format!("  {e}")).collect::<Vec<_>>().join("\n")),
    })?;
    let (nargs, nres) = match module.main_func() {
        Some(f) => {
            let entry = module.entry_block(f);
            let ret = module.terminator(entry).map_or(0, |o| module.ops[o].operands().len());
            (module.blocks[entry].args().len(), ret)
        }
        None => (0, 0),
    };
    Ok(Imported {
        module,
        weights: BTreeMap::new(),
        inputs: (0..nargs).map(tpuc_frontend_fx::InputSlot::Arg).collect(),
        outputs: (0..nres).map(tpuc_frontend_fx::OutputSlot::Result).collect(),
        sym_inputs: Vec::new(),
        torch_version: None,
        has_weight_data: false,
        source: Default::default(),
        host_reads: Vec::new(),
    })
}

/// The pass pipeline for `options`: `inline-weights` first when asked, then the explicit
/// `passes` list or the target's default pipeline ([`tpuc_passes::default_pipeline`]).
/// Unknown pass names are an error listing the valid ones.
pub fn pass_manager<'w>(options: &LowerOptions, weights: &'w BTreeMap<String, TensorData>) -> Result<PassManager<'w>, DriverError> {
    let mut pm = PassManager::new();
    pm.verify_each |= options.verify_each;
    pm.print_after_all = options.print_after_all;
    pm.dump_dir = options.dump_dir.clone();
    let popts = options.pipeline_options();
    for name in options.pass_names() {
        pm.add_boxed(tpuc_passes::create_pass(&name, &popts, weights)?);
    }
    Ok(pm)
}

/// Runs the passes and, for [`Emit::StableHlo`], the emitter.
pub fn lower(imported: Imported, options: &LowerOptions, emit: Emit) -> Result<Lowered, DriverError> {
    let Imported { mut module, weights, source, .. } = imported;
    let graph = (!source.is_empty()).then(|| tpuc_cache::Digest::of(&source));
    drop(source);
    // The user's sharding (else the one IR text with a `mesh` carries) is checked and recorded
    // in the IR before any pass, so the passes see it and keep it.
    if let Some(sh) = &options.sharding {
        spmd::check(sh, &module).map_err(DriverError::Options)?;
        sh.to_ir(&mut module).map_err(DriverError::Options)?;
    }
    let mut timings = Timings::default();
    let last_pass = {
        let mut pm = pass_manager(options, &weights)?;
        // Verified once below, after the sharding steps too, for the emitter's proof.
        pm.verify_at_end = false;
        timings.pass_details = pm.run(&mut module)?;
        timings.passes = timings.pass_details.iter().map(|t| (t.pass, t.elapsed)).collect();
        pm.pass_names().last().map_or("<none>", |n| n).to_string()
    };
    let mut notes: Vec<String> = timings.pass_details.iter().flat_map(|t| t.notes.iter().cloned()).collect();
    let mut sharding = MeshSharding::of_ir(&module);
    if let Some(sh) = &mut sharding {
        // Sizes a bucket made static are checked here (the verifier has checked the splits).
        spmd::check(sh, &module).map_err(DriverError::Options)?;
        // A policy splits what the user left whole, on the program the passes made (static
        // sizes, fused matmuls), and records its choice in the IR like the user's.
        if let Some(policy) = options.shard_policy {
            let missed = spmd::apply_policy(policy, &module, sh);
            if options.strict_sharding && !missed.is_empty() {
                return Err(DriverError::Options(format!("{} (--strict)", missed.join("; "))));
            }
            notes.extend(missed);
            sh.to_ir(&mut module).map_err(DriverError::Options)?;
        }
        // Updated state keeps its split: an update is aliased to (and donated from) its
        // argument, so both are laid out alike on every device.
        if options.donate_state && spmd::align_state(&module, sh) {
            sh.to_ir(&mut module).map_err(DriverError::Options)?;
        }
    }
    let opts = EmitOptions {
        module_name: options.module_name.clone().unwrap_or_else(|| "main".to_string()),
        debug_locations: options.debug_locations,
        ranks: options.ranks.clone(),
        donate_state: options.donate_state,
        ..Default::default()
    };
    // The pipeline's result, sharding included, verified once: the proof the emitter takes.
    let verified = tpuc_ir::verify(&module).map_err(|errors| PassError::VerifyAfter { pass: last_pass, errors })?;
    let stablehlo = match emit {
        Emit::Ir => None,
        Emit::StableHlo => {
            let start = Instant::now();
            let text = tpuc_lowering_stablehlo::emit(verified, &opts)?;
            timings.emit = start.elapsed();
            Some(text)
        }
    };
    let stablehlo_is_key = opts == key_emit_options(&opts.ranks, opts.donate_state);
    let lowering = options.lowering_summary();
    let donate_state = opts.donate_state;
    Ok(Lowered { module, weights, stablehlo, timings, notes, stablehlo_is_key, sharding, ranks: opts.ranks, donate_state, graph, lowering })
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

/// One bucket of a program with symbolic dims, lowered.
pub struct BucketLowered {
    pub lowered: Lowered,
    /// The padded size of every symbol.
    pub bucket: dynamic::Sizes,
    /// Per symbol, the `main` argument that takes its real size (after the original ones).
    pub size_args: Vec<(String, usize)>,
    /// Per result, where its valid part is ([`dynamic::unpad`]).
    pub result_layouts: Vec<tpuc_passes::specialize::Layout>,
    /// The data-dependent sizes (`nonzero`'s count) the program returns after its results, by
    /// symbol ([`dynamic::take_returned_sizes`]).
    pub size_results: Vec<String>,
}

/// Whether `module` can be specialized to `bucket` (the `specialize` pass alone, no other
/// pass and no compile): its error names the op and FX node that cannot be bucketed.
pub fn check_bucket(module: &Module, bucket: &dynamic::Sizes) -> Result<(), DriverError> {
    tpuc_passes::specialize::specialize(module, bucket)?;
    Ok(())
}

/// Specializes `module` to `bucket` (the `specialize` pass: padding masked, real sizes as
/// arguments) and runs the rest of the passes and the emitter on the static program.
pub fn lower_bucket(
    module: &Module,
    weights: &BTreeMap<String, TensorData>,
    bucket: &dynamic::Sizes,
    options: &LowerOptions,
    emit: Emit,
) -> Result<BucketLowered, DriverError> {
    let imported = Imported {
        module: module.clone(),
        weights: weights.clone(),
        inputs: Vec::new(),
        outputs: Vec::new(),
        sym_inputs: Vec::new(),
        torch_version: None,
        has_weight_data: true,
        // No graph fingerprint: another bucket is another graph, not another lowering.
        source: Default::default(),
        host_reads: Vec::new(),
    };
    let options = LowerOptions { bucket: Some(bucket.clone()), ..options.clone() };
    let lowered = lower(imported, &options, emit)?;
    let size_args = tpuc_passes::specialize::size_args(&lowered.module);
    let result_layouts = tpuc_passes::specialize::result_layouts(&lowered.module);
    let size_results = tpuc_passes::specialize::size_results(&lowered.module);
    Ok(BucketLowered { lowered, bucket: bucket.clone(), size_args, result_layouts, size_results })
}
