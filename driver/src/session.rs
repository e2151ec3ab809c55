//! In-process compile-and-run for callers that hold programs and tensors in memory: the Python
//! extension behind `torch.compile(backend="tpuc")`.
//!
//! ```text
//! program JSON (bytes) ─► import_bytes ─► lower (passes, StableHLO) ─► compile_cached ─► Program
//! Program::set_weight(arg, bytes)   weights uploaded once, kept on the device
//! Program::run(&[&[u8]])            user inputs borrowed (no copy on our side) ─► output bytes
//! ```
//!
//! Needs: a torch.export-schema program whose inputs are parameters, buffers, constants and
//! user inputs (no weight data: the caller owns the tensors and supplies them with
//! [`Program::set_weight`]), static shapes.
//! Guarantees: every compile goes through the process's executable cache ([`cache`], set up from
//! the `TPUC_CACHE_*` variables on first use) with [`crate::exec::compile_cached`]; inputs are checked against the signature (byte
//! size per argument) before anything reaches PJRT; errors that concern FX nodes carry them
//! ([`error_node`], the first; [`error_nodes`], all of an import's failed nodes).

use crate::exec::{self, argument_list, CompileRequest, CompileSummary, ExecError, RunTimes, Target};
use crate::{DriverError, Emit, LowerOptions, Timings};
use std::path::PathBuf;
use std::time::Instant;
use tpuc_frontend_fx::{ImportError, InputSlot, NodeRef, OutputSlot};
use tpuc_ir::{ArgKind, DType, TensorType};
use tpuc_lowering_stablehlo::EmitError;
use tpuc_runtime as rt;
pub use tpuc_runtime::HostArray;

/// How to compile one program.
#[derive(Clone, Debug)]
pub struct SessionOptions {
    pub target: Target,
    /// TPU topology such as `v5e:2x2` (TPU only).
    pub topology: Option<String>,
    /// Explicit plugin file (default: discovered).
    pub plugin: Option<PathBuf>,
    /// Write the IR after every pass, the final IR, the StableHLO and the compile summary here,
    /// under the program's name.
    pub dump_dir: Option<PathBuf>,
    /// Verify the IR after every pass.
    pub verify_each: bool,
    /// Name of the program (file names of dumps, messages).
    pub name: String,
    /// For a program with symbolic dims: the bucket (padded size per symbol) to compile.
    pub bucket: Option<crate::dynamic::Sizes>,
    /// Matmul / convolution precision; `None`: the target's default.
    pub precision: Option<crate::Precision>,
    /// Matmuls and convolutions in bf16 with f32 accumulation.
    pub bf16: bool,
    /// Drop round trips through narrower float types.
    pub allow_excess_precision: bool,
    /// The default pipeline without `fuse`.
    pub no_fusion: bool,
    /// An SPMD program over a device mesh (CPU: one device per partition, in this process).
    pub sharding: Option<crate::MeshSharding>,
    /// Shardings chosen by a policy for the arguments `sharding` does not name.
    pub shard_policy: Option<crate::spmd::ShardPolicy>,
    /// A per-rank program (PyTorch's functional collectives): its ranks, one device each, and
    /// the rank groups of the process groups it names. Run with [`Program::run_ranks`].
    pub ranks: Option<crate::Ranks>,
}

impl Default for SessionOptions {
    fn default() -> Self {
        SessionOptions {
            target: Target::Cpu,
            topology: None,
            plugin: None,
            dump_dir: None,
            verify_each: false,
            name: "graph".to_string(),
            bucket: None,
            precision: None,
            bf16: false,
            allow_excess_precision: false,
            no_fusion: false,
            sharding: None,
            shard_policy: None,
            ranks: None,
        }
    }
}

/// One argument of `main`.
#[derive(Clone, Debug)]
pub struct ArgInfo {
    pub name: String,
    pub kind: ArgKind,
    pub ty: TensorType,
    /// Dense byte size (static shapes only).
    pub bytes: usize,
}

/// A compiled program with its weights resident on the device.
pub struct Program {
    pub name: String,
    /// One entry per signature input, in order.
    pub inputs: Vec<InputSlot>,
    /// One entry per signature output, in order.
    pub outputs: Vec<OutputSlot>,
    /// `main`'s arguments.
    pub args: Vec<ArgInfo>,
    /// `main`'s results.
    pub results: Vec<TensorType>,
    pub stablehlo: String,
    pub summary: CompileSummary,
    pub timings: Timings,
    /// The serialized executable (what a TPU compile without a device produces).
    pub serialized: Vec<u8>,
    loaded: Option<rt::LoadedExecutable>,
    device: Option<rt::Device>,
    /// One slot per argument: the resident buffer of a weight once set (shared with the
    /// other buckets of the same graph by [`Program::adopt_weight`]).
    resident: Vec<Option<std::sync::Arc<rt::Buffer>>>,
    /// Per argument: the host address a resident buffer reads in place at every run (see
    /// [`Program::alias_weight`]); `None` for a copy or no value.
    aliases: Vec<Option<usize>>,
    /// Per symbol, the argument that takes its real size (bucketed programs).
    pub size_args: Vec<(String, usize)>,
    /// Per result, where its valid part is (bucketed programs; empty otherwise).
    pub result_layouts: Vec<tpuc_passes::specialize::Layout>,
    /// Positions of the user-input arguments.
    user_args: Vec<usize>,
    /// Bucketed programs: the user arguments given as tensors (those that are not symbol
    /// sizes), in order.
    pub tensor_inputs: Vec<usize>,
    /// An SPMD program's mesh and argument shardings (policy choices included).
    pub sharding: Option<crate::MeshSharding>,
    /// SPMD programs: per argument, a weight's shard on every device.
    resident_shards: Vec<Option<std::sync::Arc<Vec<rt::Buffer>>>>,
    /// Per-rank programs: the number of ranks (every argument is given per rank, per call).
    pub ranks: Option<i64>,
    /// Bucketed programs: host buffers the padded inputs are staged in, reused across calls.
    staging: std::sync::Mutex<Vec<Vec<Line>>>,
    /// Device buffers of scalar i64 inputs (sizes), by value (see [`Program::input`]).
    scalars: std::sync::Mutex<std::collections::HashMap<i64, std::sync::Arc<rt::Buffer>>>,
}

/// One user input of an execution.
enum Input<'a> {
    Borrowed(rt::BorrowedBuffer<'a>),
    Kept(std::sync::Arc<rt::Buffer>),
}

impl std::ops::Deref for Input<'_> {
    type Target = rt::Buffer;
    fn deref(&self) -> &rt::Buffer {
        match self {
            Input::Borrowed(b) => b,
            Input::Kept(b) => b,
        }
    }
}

/// 64 bytes aligned as the CPU plugin needs to read a host buffer in place: the unit of the
/// staging buffers padded inputs are written to.
#[repr(C, align(64))]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Line([u8; 64]);

/// One result of a bucketed run cut to its real shape: `bytes` begins with the result's dense
/// row-major values (it may run on past them, when the valid part is a prefix of the padded
/// result and so is handed over in place).
pub struct CutResult {
    pub bytes: HostArray,
    pub dims: Vec<i64>,
}

/// Imports, lowers and compiles a serialized program.
pub fn compile(program: Vec<u8>, options: &SessionOptions) -> Result<Program, DriverError> {
    let start = Instant::now();
    let imported = crate::import_bytes(program)?;
    let import_time = start.elapsed();
    let inputs = imported.inputs.clone();
    let outputs = imported.outputs.clone();
    let module_dump = options.dump_dir.as_ref().map(|d| d.join(&options.name));
    let lower_options = LowerOptions {
        verify_each: options.verify_each,
        dump_dir: module_dump.as_ref().map(|d| d.join("passes")),
        debug_locations: false,
        // Not the graph's name: equal graphs must give equal programs (and cache keys).
        module_name: None,
        // The pass pipeline for the target (TPU legalization, precision defaults).
        target: options.target,
        precision: options.precision,
        bf16: options.bf16,
        allow_excess_precision: options.allow_excess_precision,
        no_fusion: options.no_fusion,
        sharding: options.sharding.clone(),
        shard_policy: options.shard_policy,
        ranks: options.ranks.clone(),
        ..Default::default()
    };
    let (mut lowered, size_args, result_layouts) = match &options.bucket {
        Some(bucket) => {
            let b = crate::lower_bucket(&imported.module, &imported.weights, bucket, &lower_options, Emit::StableHlo)?;
            (b.lowered, b.size_args, b.result_layouts)
        }
        None => (crate::lower(imported, &lower_options, Emit::StableHlo)?, Vec::new(), Vec::new()),
    };
    lowered.timings.import = import_time;
    let module = &lowered.module;
    exec::check_target_support(module, options.target)?;
    let func = module.main_func().ok_or_else(|| ExecError::Unsupported("the program has no function".into()))?;
    let entry = module.entry_block(func);
    let mut args = Vec::new();
    for (i, (&v, info)) in module.blocks[entry].args().iter().zip(&func.args).enumerate() {
        let ty = module.values[v].ty.clone();
        let bytes = ty.size_bytes().ok_or_else(|| {
            ExecError::Unsupported(format!(
                "argument {i} (`{}`) has the dynamic type {ty}: tpuc compiles one program per shape; \
                 retrace with static shapes",
                info.name
            ))
        })?;
        args.push(ArgInfo { name: info.name.clone(), kind: info.kind, ty, bytes });
    }
    let results: Vec<TensorType> = match module.terminator(entry) {
        Some(ret) => module.ops[ret].operands().iter().map(|&v| module.values[v].ty.clone()).collect(),
        None => Vec::new(),
    };
    if let Some(t) = results.iter().find(|t| t.static_dims().is_none()) {
        return Err(ExecError::Unsupported(format!("a result has the dynamic type {t}")).into());
    }
    let stablehlo = lowered.stablehlo.as_deref().unwrap_or_default();
    if let Some(dir) = &module_dump {
        write(dir, "module.tpuc", tpuc_ir::print_module(module).as_bytes())?;
        write(dir, "module.stablehlo.mlir", stablehlo.as_bytes())?;
    }
    let request = CompileRequest {
        target: options.target,
        topology: options.topology.clone(),
        partitions: lowered.sharding.as_ref().map_or(1, crate::spmd::device_count),
        replicas: lowered.ranks.as_ref().map_or(1, |r| r.count),
        plugin: options.plugin.clone(),
    };
    // The key hashes the text just emitted (emitted without locations, as keys need).
    let compiled = exec::compile_cached(stablehlo, &lowered.key_program()?, &request, cache(), lowered.provenance(&options.name))?;
    if let Some(dir) = &module_dump {
        let json = serde_json::to_vec_pretty(&compiled.summary).unwrap_or_default();
        write(dir, "compile.json", &json)?;
        if compiled.loaded.is_none() {
            write(dir, "executable.bin", &compiled.serialized)?;
        }
    }
    let mut compiled = compiled;
    if options.target == Target::Cpu && compiled.loaded.is_some() {
        // Run on the process's shared synchronous CPU client (see `run_client`).
        let client = run_client(&compiled, request.devices())?;
        compiled.loaded = Some(client.deserialize(&compiled.serialized).map_err(ExecError::from)?);
    }
    let device = match &compiled.loaded {
        Some(l) => Some(l.devices().first().cloned().ok_or_else(|| {
            ExecError::Unsupported("the loaded executable has no device".into())
        })?),
        None => None,
    };
    let user_args: Vec<usize> = args.iter().enumerate().filter(|(_, a)| !a.kind.is_weight()).map(|(i, _)| i).collect();
    let tensor_inputs = user_args.iter().copied().filter(|a| !size_args.iter().any(|(_, s)| s == a)).collect();
    let resident: Vec<Option<std::sync::Arc<rt::Buffer>>> = args.iter().map(|_| None).collect();
    Ok(Program {
        name: options.name.clone(),
        inputs,
        outputs,
        args,
        results,
        stablehlo: lowered.stablehlo.unwrap_or_default(),
        summary: compiled.summary,
        timings: lowered.timings,
        serialized: compiled.serialized,
        loaded: compiled.loaded,
        device,
        user_args,
        tensor_inputs,
        size_args,
        result_layouts,
        resident_shards: if lowered.sharding.is_some() { resident.iter().map(|_| None).collect() } else { Vec::new() },
        aliases: resident.iter().map(|_| None).collect(),
        resident,
        sharding: lowered.sharding,
        ranks: lowered.ranks.map(|r| r.count),
        staging: Default::default(),
        scalars: Default::default(),
    })
}

/// The client programs run on, one per plugin file and process, shared by every program (so
/// their buffers can meet). On CPU it is created with `asynchronous=false`: an execution runs
/// on the calling thread instead of being handed to the plugin's worker threads and waited for,
/// which on a small host is most of the cost of running a small graph.
/// SPMD programs over `devices` > 1 get a client of that many devices, shared the same way.
fn run_client(compiled: &exec::Compiled, devices: i64) -> Result<rt::Client, ExecError> {
    use std::collections::HashMap;
    use std::sync::Mutex;
    static CLIENTS: std::sync::OnceLock<Mutex<HashMap<(PathBuf, i64), rt::Client>>> = std::sync::OnceLock::new();
    let plugin = compiled.loaded.as_ref().map(|l| l.client().plugin()).ok_or_else(|| {
        ExecError::Unsupported("no loaded executable to take the plugin from".into())
    })?;
    let mut clients = CLIENTS.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
    let key = (plugin.path().to_path_buf(), devices);
    if let Some(c) = clients.get(&key) {
        return Ok(c.clone());
    }
    let sync = std::env::var("TPUC_CPU_ASYNC").map_or(true, |v| v != "1");
    let mut options = Vec::new();
    if sync {
        options.push(rt::NamedValue::bool("asynchronous", false));
    }
    if devices > 1 {
        options.push(rt::NamedValue::int("cpu_device_count", devices));
    }
    let client = plugin.create_client_with_options(&options)?;
    clients.insert(key, client.clone());
    Ok(client)
}

/// The process's executable cache, configured by the `TPUC_CACHE_*` variables when first used.
pub fn cache() -> &'static exec::Cache {
    static CACHE: std::sync::OnceLock<exec::Cache> = std::sync::OnceLock::new();
    CACHE.get_or_init(exec::Cache::from_env)
}

fn write(dir: &std::path::Path, file: &str, data: &[u8]) -> Result<(), ExecError> {
    let path = dir.join(file);
    std::fs::create_dir_all(dir)
        .and_then(|_| std::fs::write(&path, data))
        .map_err(|source| ExecError::Write { path: path.display().to_string(), source })
}

impl Program {
    /// True when this host can run the program (a TPU compile without a device cannot).
    pub fn can_run(&self) -> bool {
        self.loaded.is_some()
    }

    /// Positions of the user-input arguments, in order.
    pub fn user_args(&self) -> &[usize] {
        &self.user_args
    }

    /// Uploads the value of weight argument `arg` (dense, row-major bytes) and keeps it on the
    /// device until the next `set_weight` of that argument.
    pub fn set_weight(&mut self, arg: usize, bytes: &[u8]) -> Result<(), ExecError> {
        let spec = self.args.get(arg).ok_or_else(|| ExecError::BadInput(format!("{}: no argument {arg}", self.name)))?;
        if !spec.kind.is_weight() {
            return Err(ExecError::BadInput(format!("{}: argument {arg} (`{}`) is not a weight", self.name, spec.name)));
        }
        if let Some(sh) = &self.sharding {
            self.resident_shards[arg] = Some(std::sync::Arc::new(self.upload_shards(sh, arg, bytes)?));
            return Ok(());
        }
        let buffer = self.upload(arg, bytes)?;
        self.resident[arg] = Some(std::sync::Arc::new(buffer));
        self.aliases[arg] = None;
        Ok(())
    }

    /// Makes weight `arg` read `bytes`' memory in place at every run, where the plugin can
    /// (the CPU plugin, for aligned host memory): no copy, and never a stale value, whatever
    /// writes that memory between runs. Returns false, changing nothing, where it cannot (a
    /// plugin whose memory is not host memory, unaligned data, an SPMD program): the caller
    /// then gives the value with [`Program::set_weight`] before each run that needs it.
    ///
    /// # Safety
    /// Until the next `set_weight`/`alias_weight` of `arg` (or the program's end), whenever
    /// the program runs, the `bytes.len()` bytes at `bytes`' address must be live and hold
    /// the weight, and nothing may write them during the run. A caller holding a tensor checks
    /// before each run that the tensor still lives at [`Program::weight_address`].
    pub unsafe fn alias_weight(&mut self, arg: usize, bytes: &[u8]) -> Result<bool, ExecError> {
        let spec = self.args.get(arg).ok_or_else(|| ExecError::BadInput(format!("{}: no argument {arg}", self.name)))?;
        if !spec.kind.is_weight() {
            return Err(ExecError::BadInput(format!("{}: argument {arg} (`{}`) is not a weight", self.name, spec.name)));
        }
        if self.sharding.is_some() || self.ranks.is_some() {
            return Ok(false);
        }
        let (dims, element_type) = self.check_arg(arg, bytes)?;
        let (loaded, device) = self.runnable()?;
        // SAFETY: forwarded to our caller (see above).
        let aliased = unsafe { loaded.client().buffer_aliasing_host(bytes, element_type, &dims, Some(device))? };
        let Some(buffer) = aliased else { return Ok(false) };
        self.resident[arg] = Some(std::sync::Arc::new(buffer));
        self.aliases[arg] = Some(bytes.as_ptr() as usize);
        Ok(true)
    }

    /// The host address weight `arg` is read from in place at every run, when it is (see
    /// [`Program::alias_weight`]).
    pub fn weight_address(&self, arg: usize) -> Option<usize> {
        self.aliases.get(arg).copied().flatten()
    }

    /// Each device's shard of argument `arg` (dense bytes of its whole value).
    fn upload_shards(&self, sh: &crate::MeshSharding, arg: usize, bytes: &[u8]) -> Result<Vec<rt::Buffer>, ExecError> {
        let (dims, element_type) = self.check_arg(arg, bytes)?;
        let (loaded, _) = self.runnable()?;
        let spec = &self.args[arg];
        let devices = loaded.devices();
        if !sh.args.contains_key(&spec.name) {
            // Replicated: the caller's bytes to every device, no host copy.
            return devices.iter().map(|d| Ok(loaded.client().buffer_from_host(bytes, element_type, &dims, Some(d))?)).collect();
        }
        let whole = crate::tensor::HostTensor { dtype: spec.ty.dtype, dims, bytes: bytes.to_vec() };
        let mut out = Vec::with_capacity(devices.len());
        for (d, device) in devices.iter().enumerate() {
            let s = crate::spmd::shard_for_device(sh, &spec.name, &whole, d as i64)?;
            out.push(loaded.client().buffer_from_host(&s.bytes, element_type, &s.dims, Some(device))?);
        }
        Ok(out)
    }

    /// Makes weight `arg` share the resident buffer of `other`'s weight `other_arg` (another
    /// bucket of the same graph: same client, same type). False when `other` has no such value.
    pub fn adopt_weight(&mut self, arg: usize, other: &Program, other_arg: usize) -> Result<bool, ExecError> {
        let (Some(mine), Some(theirs)) = (self.args.get(arg), other.args.get(other_arg)) else {
            return Err(ExecError::BadInput(format!("{}: no argument {arg}", self.name)));
        };
        // Per-rank programs take every argument per call.
        if !mine.kind.is_weight() || mine.ty != theirs.ty || self.ranks.is_some() || other.ranks.is_some() {
            return Ok(false);
        }
        match (&self.sharding, &other.sharding) {
            (None, None) => match other.resident.get(other_arg) {
                Some(Some(b)) => {
                    self.resident[arg] = Some(b.clone());
                    self.aliases[arg] = other.aliases[other_arg];
                    Ok(true)
                }
                _ => Ok(false),
            },
            // SPMD programs (the buckets of one graph under a mesh) share a weight's shards
            // when they split it alike over the same mesh.
            (Some(a), Some(b)) if a.axes == b.axes && a.args.get(&mine.name) == b.args.get(&theirs.name) => {
                match other.resident_shards.get(other_arg) {
                    Some(Some(shards)) => {
                        self.resident_shards[arg] = Some(shards.clone());
                        Ok(true)
                    }
                    _ => Ok(false),
                }
            }
            _ => Ok(false),
        }
    }

    /// For a bucketed program and the real sizes of its symbols: per result, per padded dim,
    /// its factors as (padded, valid) pairs, outer to inner (one `(n, n)` pair for a dim
    /// that is not padded). Cutting each factor to its valid length gives the real result.
    pub fn result_cuts(&self, sizes: &crate::dynamic::Sizes) -> Result<Vec<Vec<(i64, i64)>>, ExecError> {
        let none = Vec::new();
        self.results
            .iter()
            .enumerate()
            .map(|(k, ty)| {
                let layout = self.result_layouts.get(k).unwrap_or(&none);
                crate::dynamic::cuts(layout, &ty.static_dims().unwrap_or_default(), sizes)
            })
            .collect()
    }

    /// True when weight `arg` has a resident value.
    pub fn has_weight(&self, arg: usize) -> bool {
        self.resident.get(arg).is_some_and(Option::is_some) || self.resident_shards.get(arg).is_some_and(Option::is_some)
    }

    fn upload(&self, arg: usize, bytes: &[u8]) -> Result<rt::Buffer, ExecError> {
        let (dims, element_type) = self.check_arg(arg, bytes)?;
        let (loaded, device) = self.runnable()?;
        Ok(loaded.client().buffer_from_host(bytes, element_type, &dims, Some(device))?)
    }

    /// A user input for one execution: a scalar i64 (a symbol's real size, a SymInt input)
    /// from the buffers kept per value, else borrowed (see [`Program::borrow`]). Scalars
    /// recur call after call (the sizes of a decode loop), and a buffer of their own costs
    /// a transfer each.
    fn input<'a>(&self, arg: usize, bytes: &'a [u8]) -> Result<Input<'a>, ExecError> {
        let ty = &self.args[arg].ty;
        if ty.rank() == 0 && ty.dtype == DType::I64 && bytes.len() == 8 {
            let value = i64::from_le_bytes(bytes.try_into().expect("8 bytes"));
            let mut kept = self.scalars.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(b) = kept.get(&value) {
                return Ok(Input::Kept(b.clone()));
            }
            let b = std::sync::Arc::new(self.upload(arg, bytes)?);
            if kept.len() >= 4096 {
                kept.clear();
            }
            kept.insert(value, b.clone());
            return Ok(Input::Kept(b));
        }
        Ok(Input::Borrowed(self.borrow(arg, bytes)?))
    }

    /// A user input for one execution: used in place where the plugin can (CPU).
    fn borrow<'a>(&self, arg: usize, bytes: &'a [u8]) -> Result<rt::BorrowedBuffer<'a>, ExecError> {
        let (dims, element_type) = self.check_arg(arg, bytes)?;
        let (loaded, device) = self.runnable()?;
        Ok(loaded.client().buffer_borrowing_host(bytes, element_type, &dims, Some(device))?)
    }

    fn check_arg(&self, arg: usize, bytes: &[u8]) -> Result<(Vec<i64>, rt::ElementType), ExecError> {
        let spec = &self.args[arg];
        if bytes.len() != spec.bytes {
            return Err(ExecError::BadInput(format!(
                "{}: argument {arg} (`{}`, {}) needs {} bytes, got {}",
                self.name,
                spec.name,
                spec.ty,
                spec.bytes,
                bytes.len()
            )));
        }
        Ok((spec.ty.static_dims().unwrap_or_default(), exec::element_type(spec.ty.dtype)))
    }

    fn runnable(&self) -> Result<(&rt::LoadedExecutable, &rt::Device), ExecError> {
        match (&self.loaded, &self.device) {
            (Some(l), Some(d)) => Ok((l, d)),
            _ => Err(ExecError::Unsupported(format!(
                "{}: cannot run on {}: this host has no such device (the executable was compiled only)",
                self.name, self.summary.target
            ))),
        }
    }

    /// Runs with `inputs`, one dense row-major byte slice per user-input argument in order
    /// (read in place on CPU, so no copy is made on the way in). Every weight must have been
    /// set. Returns the results' bytes, in order: on CPU the result buffers' own memory, handed
    /// over without a copy.
    pub fn run(&self, inputs: &[&[u8]]) -> Result<(Vec<HostArray>, RunTimes), ExecError> {
        let mut times = RunTimes::default();
        let t0 = Instant::now();
        if inputs.len() != self.user_args.len() {
            return Err(ExecError::BadInput(format!(
                "{}: the program takes {} input(s), got {}",
                self.name,
                self.user_args.len(),
                inputs.len()
            )));
        }
        for i in 0..self.resident.len() {
            if self.args[i].kind.is_weight() && !self.has_weight(i) {
                return Err(ExecError::BadInput(format!(
                    "{}: {} `{}` has no value (set_weight was not called)",
                    self.name,
                    self.args[i].kind.name(),
                    self.args[i].name
                )));
            }
        }
        if let Some(n) = self.ranks {
            return Err(ExecError::BadInput(format!(
                "{}: a per-rank program runs all its {n} ranks at once (run_ranks)",
                self.name
            )));
        }
        let (loaded, _) = self.runnable()?;
        times.check = t0.elapsed();
        if let Some(sh) = &self.sharding {
            return self.run_sharded(sh, loaded, inputs, times);
        }
        let t1 = Instant::now();
        let mut uploaded = Vec::with_capacity(inputs.len());
        for (&arg, bytes) in self.user_args.iter().zip(inputs) {
            uploaded.push(self.input(arg, bytes)?);
        }
        let args = argument_list(&self.resident, &uploaded);
        times.upload = t1.elapsed();
        let t2 = Instant::now();
        let outputs = loaded.execute(&args)?;
        times.execute = t2.elapsed();
        let t3 = Instant::now();
        drop(args);
        // Give the inputs back before returning (waits until the plugin is done with them).
        drop(uploaded);
        let host = rt::Buffer::into_host_all(outputs)?;
        times.download = t3.elapsed();
        Ok((host, times))
    }
}

impl Program {
    /// Runs a bucketed program on inputs of their real sizes: each user input (the program's
    /// user-input arguments in order, without the size arguments) as its dense bytes and real
    /// dims. Inputs are padded into reused staging buffers (the padding left as it is: the
    /// program masks it), the size arguments are filled from `sizes`, and every result is cut
    /// to its real shape: in place when its valid part is a prefix of the padded result (a
    /// padded leading dim), else copied out.
    pub fn run_bucketed(&self, inputs: &[(&[u8], &[i64])], sizes: &crate::dynamic::Sizes) -> Result<(Vec<CutResult>, RunTimes), ExecError> {
        if inputs.len() != self.tensor_inputs.len() {
            return Err(ExecError::BadInput(format!(
                "{}: the program takes {} input(s), got {}",
                self.name,
                self.tensor_inputs.len(),
                inputs.len()
            )));
        }
        /// Where one user argument's bytes come from.
        enum Slot<'a> {
            Scalar(usize),
            Given(&'a [u8]),
            Staged(usize, usize),
        }
        // Owned storage first (scalars of the sizes, staging for padded inputs), then slices.
        let mut scalars: Vec<[u8; 8]> = Vec::new();
        let mut staged: Vec<Vec<Line>> = Vec::new();
        let mut slots = Vec::with_capacity(self.user_args.len());
        {
            let mut pool = self.staging.lock().unwrap_or_else(|e| e.into_inner());
            let mut next = inputs.iter();
            for &arg in &self.user_args {
                if let Some(bytes) = self.size_arg_bytes(arg, sizes)? {
                    scalars.push(bytes);
                    slots.push(Slot::Scalar(scalars.len() - 1));
                    continue;
                }
                let &(bytes, dims) = next.next().expect("counted above");
                let spec = &self.args[arg];
                if !self.needs_padding(arg, bytes, dims)? {
                    slots.push(Slot::Given(bytes));
                    continue;
                }
                let lines = spec.bytes.div_ceil(64);
                let mut buf = match pool.iter().position(|b| b.len() >= lines) {
                    Some(i) => pool.swap_remove(i),
                    None => vec![Line([0; 64]); lines],
                };
                self.pad_into(arg, bytes, dims, &mut bytemuck::cast_slice_mut::<Line, u8>(&mut buf)[..spec.bytes]);
                staged.push(buf);
                slots.push(Slot::Staged(staged.len() - 1, spec.bytes));
            }
        }
        let views: Vec<&[u8]> = slots
            .iter()
            .map(|slot| match *slot {
                Slot::Scalar(i) => &scalars[i][..],
                Slot::Given(bytes) => bytes,
                Slot::Staged(i, len) => &bytemuck::cast_slice::<Line, u8>(&staged[i])[..len],
            })
            .collect();
        let result = self.run(&views);
        drop(views);
        self.staging.lock().unwrap_or_else(|e| e.into_inner()).extend(staged);
        let (outputs, times) = result?;
        Ok((self.cut_results(outputs, &self.result_cuts(sizes)?), times))
    }

    /// One run's results cut to their real shapes (`cuts`: from [`Program::result_cuts`]).
    fn cut_results(&self, outputs: Vec<HostArray>, cuts: &[Vec<(i64, i64)>]) -> Vec<CutResult> {
        let none = Vec::new();
        outputs
            .into_iter()
            .zip(&self.results)
            .zip(cuts)
            .enumerate()
            .map(|(k, ((arr, ty), cut))| cut_result(arr, ty, self.result_layouts.get(k).unwrap_or(&none), cut))
            .collect()
    }

    /// The bytes of argument `arg` when it is a size argument: its symbol's real size.
    fn size_arg_bytes(&self, arg: usize, sizes: &crate::dynamic::Sizes) -> Result<Option<[u8; 8]>, ExecError> {
        let Some((sym, _)) = self.size_args.iter().find(|(_, a)| *a == arg) else { return Ok(None) };
        let n = sizes.get(sym).ok_or_else(|| ExecError::BadInput(format!("{}: no size for symbol `{sym}`", self.name)))?;
        Ok(Some(n.to_le_bytes()))
    }

    /// Whether argument `arg`, given as `bytes` of real shape `dims`, must be padded to its
    /// bucket's shape; an error when it does not fit the bucket.
    fn needs_padding(&self, arg: usize, bytes: &[u8], dims: &[i64]) -> Result<bool, ExecError> {
        let spec = &self.args[arg];
        let padded = spec.ty.static_dims().unwrap_or_default();
        if dims == padded.as_slice() {
            return Ok(false);
        }
        let real: i64 = dims.iter().product();
        if dims.len() != padded.len() || dims.iter().zip(&padded).any(|(d, p)| d > p || *d < 0) || bytes.len() != real as usize * spec.ty.dtype.size_bytes() {
            return Err(ExecError::BadInput(format!("{}: input `{}` of shape {dims:?} does not fit the bucket's {}", self.name, spec.name, spec.ty)));
        }
        Ok(true)
    }

    /// Copies argument `arg`'s real-shaped `bytes` into the corner of `dst`, its bucket-shaped
    /// buffer (the rest is left as it is: the program masks it).
    fn pad_into(&self, arg: usize, bytes: &[u8], dims: &[i64], dst: &mut [u8]) {
        let ty = &self.args[arg].ty;
        let padded = ty.static_dims().unwrap_or_default();
        crate::boxes::copy_box_to(bytes, dims, dst, &padded, &vec![0; dims.len()], dims, ty.dtype.size_bytes());
    }

    /// Runs a bucketed per-rank program: `per_rank[r]` holds rank r's value of every argument
    /// of `main` but the size arguments, each as dense bytes of its real shape. Each is padded
    /// to the bucket, the real sizes are added from `sizes`, all ranks run (as in
    /// [`Program::run_ranks`]) and every rank's results are cut to their real shapes.
    pub fn run_ranks_bucketed(&self, per_rank: &[Vec<(&[u8], &[i64])>], sizes: &crate::dynamic::Sizes) -> Result<Vec<Vec<CutResult>>, ExecError> {
        let given = self.args.len() - self.size_args.len();
        let mut owned: Vec<Vec<std::borrow::Cow<'_, [u8]>>> = Vec::with_capacity(per_rank.len());
        for (r, inputs) in per_rank.iter().enumerate() {
            if inputs.len() != given {
                return Err(ExecError::BadInput(format!("{}: rank {r}: the program takes {given} argument(s), got {}", self.name, inputs.len())));
            }
            let mut next = inputs.iter();
            let mut row = Vec::with_capacity(self.args.len());
            for arg in 0..self.args.len() {
                if let Some(bytes) = self.size_arg_bytes(arg, sizes)? {
                    row.push(std::borrow::Cow::Owned(bytes.to_vec()));
                    continue;
                }
                let &(bytes, dims) = next.next().expect("counted above");
                if self.needs_padding(arg, bytes, dims)? {
                    let mut buf = vec![0u8; self.args[arg].bytes];
                    self.pad_into(arg, bytes, dims, &mut buf);
                    row.push(std::borrow::Cow::Owned(buf));
                } else {
                    row.push(std::borrow::Cow::Borrowed(bytes));
                }
            }
            owned.push(row);
        }
        let views: Vec<Vec<&[u8]>> = owned.iter().map(|row| row.iter().map(|c| c.as_ref()).collect()).collect();
        let outputs = self.run_ranks(&views)?;
        let cuts = self.result_cuts(sizes)?;
        Ok(outputs.into_iter().map(|outs| self.cut_results(outs, &cuts)).collect())
    }

    /// Runs a per-rank program: `per_rank[r]` holds rank r's value of every argument of
    /// `main` (weights included: ranks hold different shards of them), dense row-major bytes
    /// in argument order. Rank r runs on device r. Returns each rank's results.
    pub fn run_ranks(&self, per_rank: &[Vec<&[u8]>]) -> Result<Vec<Vec<HostArray>>, ExecError> {
        let Some(n) = self.ranks else {
            return Err(ExecError::BadInput(format!("{}: not a per-rank program (compiled without ranks)", self.name)));
        };
        let (loaded, _) = self.runnable()?;
        if per_rank.len() as i64 != n {
            return Err(ExecError::BadInput(format!("{}: the program has {n} ranks, got inputs for {}", self.name, per_rank.len())));
        }
        let mut uploaded: Vec<Vec<rt::Buffer>> = Vec::with_capacity(per_rank.len());
        for (r, (inputs, device)) in per_rank.iter().zip(loaded.devices()).enumerate() {
            if inputs.len() != self.args.len() {
                return Err(ExecError::BadInput(format!(
                    "{}: rank {r}: the program takes {} argument(s), got {}",
                    self.name,
                    self.args.len(),
                    inputs.len()
                )));
            }
            let mut mine = Vec::with_capacity(inputs.len());
            for (arg, bytes) in inputs.iter().enumerate() {
                let (dims, element_type) = self.check_arg(arg, bytes)?;
                mine.push(loaded.client().buffer_from_host(bytes, element_type, &dims, Some(device))?);
            }
            uploaded.push(mine);
        }
        let args: Vec<Vec<&rt::Buffer>> = uploaded.iter().map(|u| u.iter().collect()).collect();
        let outputs = loaded.execute_partitioned(&args)?;
        drop(args);
        outputs.into_iter().map(|o| Ok(rt::Buffer::into_host_all(o)?)).collect()
    }

    /// An SPMD run: every device's shard of each input uploaded, all devices run, the
    /// (replicated) results read from the first.
    fn run_sharded(
        &self,
        sh: &crate::MeshSharding,
        loaded: &rt::LoadedExecutable,
        inputs: &[&[u8]],
        mut times: RunTimes,
    ) -> Result<(Vec<HostArray>, RunTimes), ExecError> {
        let t1 = Instant::now();
        let mut uploaded: Vec<Vec<rt::Buffer>> = loaded.devices().iter().map(|_| Vec::new()).collect();
        for (&arg, bytes) in self.user_args.iter().zip(inputs) {
            for (d, b) in self.upload_shards(sh, arg, bytes)?.into_iter().enumerate() {
                uploaded[d].push(b);
            }
        }
        let args = crate::spmd::device_argument_lists(&self.resident_shards, &uploaded);
        times.upload = t1.elapsed();
        let t2 = Instant::now();
        let mut outputs = loaded.execute_partitioned(&args)?;
        times.execute = t2.elapsed();
        let t3 = Instant::now();
        let host = if sh.results.is_empty() {
            // Every result replicated: the first device's, without a copy.
            let first = if outputs.is_empty() { Vec::new() } else { outputs.swap_remove(0) };
            rt::Buffer::into_host_all(first)?
        } else {
            let per_device = outputs
                .into_iter()
                .map(|o| crate::spmd::outputs_to_host(o, &self.results))
                .collect::<Result<Vec<_>, _>>()?;
            crate::spmd::join_results(sh, &self.results, per_device)?.into_iter().map(|t| rt::HostArray::from(t.bytes)).collect()
        };
        times.download = t3.elapsed();
        Ok((host, times))
    }
}

/// One padded result cut to its real shape (`cut`: its factors as (padded, valid) pairs).
fn cut_result(arr: HostArray, ty: &TensorType, layout: &tpuc_passes::specialize::Layout, cut: &[(i64, i64)]) -> CutResult {
    let padded = ty.static_dims().unwrap_or_default();
    if cut.iter().all(|&(p, v)| p == v) {
        return CutResult { bytes: arr, dims: padded };
    }
    let dims = crate::dynamic::real_dims(layout, &padded, cut);
    if valid_part_is_prefix(cut) {
        return CutResult { bytes: arr, dims };
    }
    let fdims: Vec<i64> = cut.iter().map(|&(p, _)| p).collect();
    let region: Vec<i64> = cut.iter().map(|&(_, v)| v).collect();
    CutResult { bytes: HostArray::from(crate::boxes::gather_box(&arr, &fdims, &region, ty.dtype.size_bytes())), dims }
}

/// Whether the valid box of a padded row-major array (its factors as (padded, valid) pairs)
/// is a prefix of its bytes: every factor before the first cut one has one element and every
/// factor after it is whole.
fn valid_part_is_prefix(cut: &[(i64, i64)]) -> bool {
    match cut.iter().position(|&(p, v)| p != v) {
        None => true,
        Some(first) => cut[..first].iter().all(|&(p, _)| p == 1) && cut[first + 1..].iter().all(|&(p, v)| p == v),
    }
}

/// The FX node an error is about, when it names one (for an import that failed at several
/// nodes, the first).
pub fn error_node(e: &DriverError) -> Option<NodeRef> {
    match e {
        DriverError::Import(e) => e.node(),
        DriverError::Emit(EmitError::Unsupported { context, opcode, .. }) => {
            // context: " (node `x` at model.py:3)"
            let rest = context.split("node `").nth(1)?;
            let (node, tail) = rest.split_once('`')?;
            let source = tail.trim().strip_prefix("at ").map(|s| s.trim_end_matches(')').to_string());
            Some(NodeRef { node: node.to_string(), target: opcode.to_string(), source })
        }
        _ => None,
    }
}

/// One node an import failed at: the kind of failure (as [`error_kind`] names it), the node
/// and the message.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeFailure {
    pub kind: &'static str,
    pub at: NodeRef,
    pub message: String,
}

/// Every node an error names, in graph order: all the nodes an import failed at (the importer
/// reports them in one pass), else the one node of [`error_node`], else none.
pub fn error_nodes(e: &DriverError) -> Vec<NodeFailure> {
    if let DriverError::Import(ie) = e {
        if !ie.node_errors().is_empty() {
            return ie
                .node_errors()
                .iter()
                .filter_map(|n| Some(NodeFailure { kind: import_kind(n), at: n.node()?, message: n.to_string() }))
                .collect();
        }
    }
    match error_node(e) {
        Some(at) => vec![NodeFailure { kind: error_kind(e), at, message: e.to_string() }],
        None => Vec::new(),
    }
}

fn import_kind(e: &ImportError) -> &'static str {
    match e.first() {
        ImportError::UnsupportedOp { .. } => "unsupported_op",
        ImportError::Op { .. } | ImportError::TypeMismatch { .. } => "op",
        _ => "import",
    }
}

/// A short name for the kind of an error, for callers that dispatch on it (for an import that
/// failed at several nodes, the kind of the first).
pub fn error_kind(e: &DriverError) -> &'static str {
    match e {
        DriverError::Import(ie) => import_kind(ie),
        DriverError::Emit(EmitError::Unsupported { .. }) => "lowering",
        DriverError::Emit(EmitError::DynamicDim { .. }) => "dynamic_shape",
        DriverError::Exec(ExecError::Plugin(_)) => "plugin",
        DriverError::Exec(_) => "exec",
        _ if !e.is_user_error() => "internal",
        _ => "other",
    }
}

/// The torch dtype name (`torch.<name>`) of an IR dtype.
pub fn torch_dtype_name(d: DType) -> &'static str {
    match d {
        DType::Bool => "bool",
        DType::I8 => "int8",
        DType::I16 => "int16",
        DType::I32 => "int32",
        DType::I64 => "int64",
        DType::U8 => "uint8",
        DType::U16 => "uint16",
        DType::U32 => "uint32",
        DType::U64 => "uint64",
        DType::F8E4M3FN => "float8_e4m3fn",
        DType::F8E5M2 => "float8_e5m2",
        DType::F16 => "float16",
        DType::BF16 => "bfloat16",
        DType::F32 => "float32",
        DType::F64 => "float64",
        DType::C64 => "complex64",
        DType::C128 => "complex128",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROGRAM: &str = r#"{"graph_module": {"graph": {
        "inputs": [{"as_tensor": {"name": "w"}}, {"as_tensor": {"name": "x"}}],
        "nodes": [{"target": "torch.ops.aten.add.Tensor", "name": "add",
                   "inputs": [{"name": "self", "arg": {"as_tensor": {"name": "x"}}, "kind": 1},
                              {"name": "other", "arg": {"as_tensor": {"name": "w"}}, "kind": 1}],
                   "outputs": [{"as_tensor": {"name": "add"}}],
                   "metadata": {"stack_trace": "File \"model.py\", line 3, in forward\n    x + w"}}],
        "outputs": [{"as_tensor": {"name": "add"}}, {"as_none": true}],
        "tensor_values": {
            "w": {"dtype": 7, "sizes": [{"as_int": 2}]},
            "x": {"dtype": 7, "sizes": [{"as_int": 2}]},
            "add": {"dtype": 7, "sizes": [{"as_int": 2}]}}},
        "signature": {
            "input_specs": [{"parameter": {"arg": {"name": "w"}, "parameter_name": "w"}},
                            {"user_input": {"arg": {"as_tensor": {"name": "x"}}}}],
            "output_specs": [{"user_output": {"arg": {"as_tensor": {"name": "add"}}}},
                             {"user_output": {"arg": {"as_none": true}}}]}}}"#;

    fn f32s(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    /// Fails the test, as the runtime's tests do, when the CPU plugin cannot be found.
    fn require_cpu_plugin() {
        if let Err(e) = tpuc_runtime::discover().plugin(Target::Cpu) {
            panic!("{e}\nThe session tests need the CPU PJRT plugin in the project's .venv: run scripts/setup.sh");
        }
    }

    #[test]
    fn compiles_and_runs_with_resident_weight() {
        require_cpu_plugin();
        let mut p = compile(PROGRAM.as_bytes().to_vec(), &SessionOptions::default()).unwrap();
        assert_eq!(p.inputs, vec![InputSlot::Arg(0), InputSlot::Arg(1)]);
        assert_eq!(p.outputs[0], OutputSlot::Result(0));
        assert_eq!(p.user_args(), &[1]);
        let x = f32s(&[1.0, 2.0]);
        let err = p.run(&[&x]).unwrap_err().to_string();
        assert!(err.contains("parameter `w` has no value"), "{err}");
        p.set_weight(0, &f32s(&[10.0, 20.0])).unwrap();
        let (out, _) = p.run(&[&x]).unwrap();
        assert!(out[0].in_place(), "CPU results are handed over, not copied");
        assert_eq!(&out[0][..], &f32s(&[11.0, 22.0])[..]);
        p.set_weight(0, &f32s(&[0.5, 0.5])).unwrap();
        assert_eq!(&p.run(&[&x]).unwrap().0[0][..], &f32s(&[1.5, 2.5])[..]);
        // The earlier result is untouched by later runs.
        assert_eq!(&out[0][..], &f32s(&[11.0, 22.0])[..]);
        let err = p.run(&[&x[..4]]).unwrap_err().to_string();
        assert!(err.contains("needs 8 bytes, got 4"), "{err}");
        assert!(p.set_weight(1, &x).is_err());
    }

    #[test]
    fn an_aliased_weight_is_read_in_place_at_every_run() {
        require_cpu_plugin();
        let mut p = compile(PROGRAM.as_bytes().to_vec(), &SessionOptions::default()).unwrap();
        // 64-byte aligned host memory, as torch's allocator gives.
        #[repr(align(64))]
        struct Aligned([u8; 64]);
        let mut w = Box::new(Aligned([0; 64]));
        let bytes: &mut [u8] = unsafe { std::slice::from_raw_parts_mut(w.0.as_mut_ptr(), 8) };
        bytes.copy_from_slice(&f32s(&[10.0, 20.0]));
        let x = f32s(&[1.0, 2.0]);
        // SAFETY: `w` outlives `p`'s runs below and is not written during them.
        let aliased = unsafe { p.alias_weight(0, bytes) }.unwrap();
        assert!(aliased, "the CPU plugin reads aligned host memory in place");
        assert_eq!(p.weight_address(0), Some(bytes.as_ptr() as usize));
        assert_eq!(&p.run(&[&x]).unwrap().0[0][..], &f32s(&[11.0, 22.0])[..]);
        // A write between runs, with no call on the program, is what the next run sees.
        bytes.copy_from_slice(&f32s(&[0.5, 0.5]));
        assert_eq!(&p.run(&[&x]).unwrap().0[0][..], &f32s(&[1.5, 2.5])[..]);
        // A copy replaces the alias.
        p.set_weight(0, &f32s(&[1.0, 1.0])).unwrap();
        assert_eq!(p.weight_address(0), None);
        assert_eq!(&p.run(&[&x]).unwrap().0[0][..], &f32s(&[2.0, 3.0])[..]);
        // Memory the plugin would have to copy (here: unaligned) is refused, not snapshotted.
        let odd = unsafe { std::slice::from_raw_parts(w.0.as_ptr().add(1), 8) };
        assert!(!unsafe { p.alias_weight(0, odd) }.unwrap());
        assert_eq!(p.weight_address(0), None);
        drop(p);
    }

    #[test]
    fn a_cut_is_in_place_only_when_the_valid_part_leads_the_buffer() {
        assert!(valid_part_is_prefix(&[(1, 1), (8, 5), (64, 64)])); // [1, n, d]: batch-1 decoding
        assert!(valid_part_is_prefix(&[(8, 3), (4, 4)])); // padded leading dim
        assert!(!valid_part_is_prefix(&[(4, 4), (8, 5), (64, 64)])); // [4, n, d]: rows interleave
        assert!(!valid_part_is_prefix(&[(8, 5), (4, 2)])); // two cut factors
        assert!(valid_part_is_prefix(&[(4, 4)]));
    }

    #[test]
    fn unsupported_op_names_node_and_line() {
        let bad = PROGRAM.replace("torch.ops.aten.add.Tensor", "torch.ops.aten.frobnicate.default");
        let err = match compile(bad.into_bytes(), &SessionOptions::default()) {
            Err(e) => e,
            Ok(_) => panic!("compiled an unknown op"),
        };
        assert_eq!(error_kind(&err), "unsupported_op");
        let at = error_node(&err).unwrap();
        assert_eq!(at.node, "add");
        assert_eq!(at.source.as_deref(), Some("model.py:3 in forward"));
        let all = error_nodes(&err);
        assert_eq!(all.len(), 1);
        assert_eq!((all[0].kind, all[0].at.node.as_str()), ("unsupported_op", "add"));
    }

    #[test]
    fn every_failed_node_comes_back_from_one_compile() {
        // add as an unknown op, then a second node using add's (stood-in) result with
        // arguments its lowering rejects
        let second = r#"{"target": "torch.ops.aten.glu.default", "name": "glu",
                   "inputs": [{"name": "self", "arg": {"as_tensor": {"name": "add"}}, "kind": 1},
                              {"name": "dim", "arg": {"as_int": 5}, "kind": 1}],
                   "outputs": [{"as_tensor": {"name": "glu"}}],
                   "metadata": {"stack_trace": "File \"model.py\", line 4, in forward\n    glu(y)"}}],"#;
        let bad = PROGRAM
            .replace("torch.ops.aten.add.Tensor", "torch.ops.aten.frobnicate.default")
            .replacen("}}],\n        \"outputs\"", &format!("}}}},\n{second}\n        \"outputs\""), 1)
            .replace(r#""add": {"dtype": 7, "sizes": [{"as_int": 2}]}}},"#, r#""add": {"dtype": 7, "sizes": [{"as_int": 2}]},
            "glu": {"dtype": 7, "sizes": [{"as_int": 1}]}}},"#)
            .replace(r#"{"user_output": {"arg": {"as_none": true}}}"#, r#"{"user_output": {"arg": {"as_tensor": {"name": "glu"}}}}"#);
        let err = match compile(bad.into_bytes(), &SessionOptions::default()) {
            Err(e) => e,
            Ok(_) => panic!("compiled an unknown op"),
        };
        assert_eq!(error_kind(&err), "unsupported_op");
        assert_eq!(error_node(&err).unwrap().node, "add");
        let all: Vec<(&str, String)> = error_nodes(&err).iter().map(|f| (f.kind, f.at.node.clone())).collect();
        assert_eq!(all, [("unsupported_op", "add".to_string()), ("op", "glu".to_string())], "{err}");
        let msg = err.to_string();
        assert!(msg.contains("\n  also: op `torch.ops.aten.glu.default` at node `glu` (model.py:4 in forward)"), "{msg}");
    }
}
