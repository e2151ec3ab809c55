//! Compiling StableHLO to executables through PJRT plugins and running them: what
//! `tpuc compile`, `tpuc run` and `tpuc plugins` do.

use crate::tensor::{HostTensor, NpyError};
use std::path::{Path, PathBuf};
use std::time::Instant;
use std::collections::BTreeMap;
pub use tpuc_cache::Cache;
use tpuc_ir::{ArgKind, DType, Module, TensorData, TensorType};
use tpuc_runtime as rt;

pub use rt::Target;

/// How to compile.
#[derive(Clone, Debug)]
pub struct CompileRequest {
    pub target: Target,
    /// TPU topology name such as `v5e:2x2` (TPU only).
    pub topology: Option<String>,
    /// SPMD partitions (1 = no partitioning): the devices of the mesh of a program with
    /// Shardy annotations, else a replicated program.
    pub partitions: i64,
    /// Replicas, one per rank of a per-rank program (collectives across replicas); 1 = none.
    pub replicas: i64,
    /// Explicit plugin path (default: discovered).
    pub plugin: Option<PathBuf>,
}

impl CompileRequest {
    /// The devices the program runs on: partitions times replicas.
    pub fn devices(&self) -> i64 {
        self.partitions.max(1) * self.replicas.max(1)
    }
}

impl Default for CompileRequest {
    fn default() -> Self {
        CompileRequest { target: Target::Cpu, topology: None, partitions: 1, replicas: 1, plugin: None }
    }
}

/// What a compile produced, for the summary line and `--json`.
#[derive(Clone, Debug, serde::Serialize)]
pub struct CompileSummary {
    pub target: String,
    pub topology: Option<String>,
    pub plugin: String,
    pub pjrt_api_version: String,
    pub platform: String,
    pub partitions: i64,
    /// Ranks of a per-rank program (XLA replicas).
    pub replicas: i64,
    pub compile_seconds: f64,
    pub executable_bytes: usize,
    /// Cost analysis figures where the plugin offers them, under tpuc's names ([`clean_cost`]):
    /// `flops`, `transcendentals`, `bytes_accessed`, `optimal_seconds`.
    pub cost: std::collections::BTreeMap<String, f64>,
    /// Compiled memory stats in bytes where the plugin offers them.
    pub memory: Option<MemoryStats>,
    /// Where the executable came from: "miss" (compiled), "memory", "disk", "shm" or "remote".
    pub cache: &'static str,
    /// The cache key (hex), when the cache was used.
    pub cache_key: Option<String>,
    /// Why the cache missed, or how much compile time a hit saved.
    pub cache_note: Option<String>,
}

#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct MemoryStats {
    pub argument_bytes: i64,
    pub output_bytes: i64,
    pub temp_bytes: i64,
    pub generated_code_bytes: i64,
}

impl CompileSummary {
    /// One line for humans.
    pub fn line(&self) -> String {
        let mut s = format!("compiled for {}", self.target);
        if let Some(t) = &self.topology {
            s += &format!(" ({t})");
        }
        if self.partitions > 1 {
            s += &format!(", {} partitions", self.partitions);
        }
        if self.replicas > 1 {
            s += &format!(", {} ranks", self.replicas);
        }
        s += &format!(
            " in {:.3} s: executable {} bytes, cache {}",
            self.compile_seconds, self.executable_bytes, self.cache
        );
        for key in ["flops", "bytes_accessed", "optimal_seconds"] {
            if let Some(v) = self.cost.get(key) {
                s += &format!(", {key} {v:.4e}");
            }
        }
        if let Some(m) = &self.memory {
            s += &format!(
                ", memory: arguments {} B, outputs {} B, temp {} B, code {} B",
                m.argument_bytes, m.output_bytes, m.temp_bytes, m.generated_code_bytes
            );
        }
        if let Some(note) = &self.cache_note {
            s += &format!(" ({note})");
        }
        s += &format!(" [{} {}, PJRT API {}]", self.platform, self.plugin, self.pjrt_api_version);
        s
    }
}

/// A compiled program: the serialized executable and, on a host that can run it, a loaded one.
pub struct Compiled {
    pub summary: CompileSummary,
    pub serialized: Vec<u8>,
    pub loaded: Option<rt::LoadedExecutable>,
}

/// Errors of compiling and running (wrapped in [`crate::DriverError::Exec`]).
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    #[error(transparent)]
    Plugin(#[from] rt::Error),
    #[error("{0}")]
    Unsupported(String),
    #[error("{0}")]
    BadInput(String),
    #[error(transparent)]
    Npy(#[from] NpyError),
    #[error("cannot write {path}: {source}")]
    Write { path: String, source: std::io::Error },
}

fn plugin_for(req: &CompileRequest) -> Result<rt::Plugin, ExecError> {
    let path = match &req.plugin {
        Some(p) => p.clone(),
        None => rt::discover().plugin(req.target)?.to_path_buf(),
    };
    Ok(rt::Plugin::load(&path)?)
}

/// Refuses what the target cannot compute, naming the op: TPUs have no f64 and no complex128.
/// The TPU pipeline's `narrow-64bit` pass computes f64 as f32 and keeps f64 only at the
/// boundary, in `convert`s it marks `tpuc.boundary`, which are accepted: an f64 argument used
/// only by such converts, and such a convert's f64 result used only by `return`.
pub fn check_target_support(module: &Module, target: Target) -> Result<(), ExecError> {
    if target != Target::Tpu {
        return Ok(());
    }
    let func = module.main_func().ok_or_else(|| ExecError::Unsupported("module has no functions".into()))?;
    let entry = module.entry_block(func);
    let unsupported = |t: &tpuc_ir::TensorType| matches!(t.dtype, DType::F64 | DType::C128);
    let is_boundary = |data: &tpuc_ir::OpData| data.opcode() == tpuc_ir::Opcode::Convert && data.attrs.bool("tpuc.boundary") == Some(true);
    // True if every attached user of `v` is `op` (a boundary convert when `op` is `convert`).
    let only_used_by = |v: tpuc_ir::ValueId, op: tpuc_ir::Opcode| {
        module.users(v).map(|u| &module.ops[u]).filter(|d| d.block().is_some()).all(|d| d.opcode() == op && (op != tpuc_ir::Opcode::Convert || is_boundary(d)))
    };
    for (i, &a) in module.blocks[entry].args().iter().enumerate() {
        let t = &module.values[a].ty;
        if unsupported(t) && !(t.dtype == DType::F64 && only_used_by(a, tpuc_ir::Opcode::Convert)) {
            let name = func.args.get(i).map_or("?", |a| a.name.as_str());
            return Err(ExecError::Unsupported(format!(
                "{} is not supported on TPU: argument {i} (`{name}`) is {t}; the TPU pipeline (`--target tpu`, pass narrow-64bit) computes f64 as f32",
                t.dtype
            )));
        }
    }
    for (op, data) in module.ops.iter() {
        if data.block().is_none() {
            continue;
        }
        for &r in data.results() {
            let t = &module.values[r].ty;
            let boundary = t.dtype == DType::F64 && is_boundary(data) && only_used_by(r, tpuc_ir::Opcode::Return);
            if unsupported(t) && !boundary {
                let at = module.loc(op).map_or(String::new(), |l| format!(" from {l}"));
                return Err(ExecError::Unsupported(format!(
                    "{} is not supported on TPU: `{}`{at} produces {t}; the TPU pipeline (`--target tpu`, pass narrow-64bit) computes f64 as f32",
                    t.dtype, data.opcode()
                )));
            }
        }
    }
    Ok(())
}

/// Compiles StableHLO text without the cache. CPU compiles with a client (and keeps the
/// loaded executable); TPU compiles for the named topology without a device.
pub fn compile_stablehlo(stablehlo: &str, req: &CompileRequest) -> Result<Compiled, ExecError> {
    let plugin = plugin_for(req)?;
    let target = prepare(&plugin, req)?;
    let start = Instant::now();
    let (executable, loaded) = compile_on(&target, stablehlo, req)?;
    let compile_seconds = start.elapsed().as_secs_f64();
    let serialized = executable.serialize()?;
    let figures = Figures::of(&executable);
    let summary = summary(&plugin, &target, req, compile_seconds, serialized.len(), figures, "miss");
    Ok(Compiled { summary, serialized, loaded })
}

/// What compiles: a client (CPU) or a topology (TPU), with the platform's name.
enum CompileTarget {
    Client(rt::Client, String),
    Topology(rt::Topology, String),
}

impl CompileTarget {
    fn platform(&self) -> &str {
        match self {
            CompileTarget::Client(_, p) | CompileTarget::Topology(_, p) => p,
        }
    }
}

fn prepare(plugin: &rt::Plugin, req: &CompileRequest) -> Result<CompileTarget, ExecError> {
    match req.target {
        Target::Cpu => {
            if req.topology.is_some() {
                return Err(ExecError::BadInput("--topology applies to --target tpu only".into()));
            }
            // The CPU plugin has 4 devices unless asked for another count.
            let devices = req.devices();
            let client = if devices > 1 {
                plugin.create_client_with_options(&[rt::NamedValue::int("cpu_device_count", devices)])?
            } else {
                plugin.create_client()?
            };
            let platform = client.platform_name()?;
            Ok(CompileTarget::Client(client, platform))
        }
        Target::Tpu => {
            let name = req.topology.as_deref().ok_or_else(|| {
                ExecError::BadInput("--target tpu needs --topology (e.g. v5e:2x2, v6e:2x2, v5p:2x2x1)".into())
            })?;
            let topology = plugin.create_topology(name, &rt::tpu_topology_options())?;
            let wanted = req.devices();
            if let Ok(chips) = topology.devices().map(|d| d.len() as i64) {
                if wanted > chips {
                    return Err(ExecError::BadInput(format!(
                        "{name} has {chips} chips; the program needs {wanted} (partitions {} x ranks {}): use a larger topology or a smaller mesh",
                        req.partitions.max(1),
                        req.replicas.max(1)
                    )));
                }
            }
            let platform = topology.platform_name()?;
            Ok(CompileTarget::Topology(topology, platform))
        }
    }
}

fn compile_options(req: &CompileRequest) -> rt::CompileOptions {
    let mut o = if req.partitions > 1 {
        rt::CompileOptions::spmd(req.partitions)
    } else {
        rt::CompileOptions { num_partitions: 1, ..Default::default() }
    };
    o.num_replicas = req.replicas.max(1);
    if req.target == Target::Cpu {
        // XLA CPU's default min/max ignore NaN ("fast" min/max); StableHLO's and PyTorch's
        // propagate it (`amax`, max pooling, clamp of a NaN give NaN).
        o.env_option_overrides.insert("xla_cpu_enable_fast_min_max".into(), rt::OptionOverride::Bool(false));
    }
    o
}

fn compile_on(
    target: &CompileTarget,
    stablehlo: &str,
    req: &CompileRequest,
) -> Result<(rt::Executable, Option<rt::LoadedExecutable>), ExecError> {
    let program = rt::Program::mlir(stablehlo);
    let mut options = compile_options(req);
    // Shardy annotations (tpuc's --mesh/--shard, or a JAX module) need the Shardy partitioner.
    options.use_shardy_partitioner = req.partitions > 1 && stablehlo.contains("sdy.mesh @");
    if options.use_shardy_partitioner {
        // Sharding attributes in StableHLO are imported through frontend attributes, which
        // the newer in-HLO sharding form (v3) disables with a warning on stderr.
        options.env_option_overrides.insert("xla_enable_hlo_sharding_v3".into(), rt::OptionOverride::Bool(false));
    }
    Ok(match target {
        CompileTarget::Client(client, _) => {
            let loaded = client.compile(&program, &options)?;
            (loaded.executable().clone(), Some(loaded))
        }
        CompileTarget::Topology(topology, _) => (topology.compile(&program, &options)?, None),
    })
}

/// The figures a compile reports besides the executable; kept with cached executables so a
/// hit reports them too.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Figures {
    cost: std::collections::BTreeMap<String, f64>,
    memory: Option<MemoryStats>,
}

impl Figures {
    fn of(executable: &rt::Executable) -> Figures {
        // libtpu reports a negative `optimal_seconds` when it has no estimate: drop such
        // figures rather than print nonsense.
        let cost = executable
            .cost_analysis()
            .ok()
            .map(|vals| {
                vals.iter()
                    .filter_map(|nv| nv.value.as_f64().map(|v| (nv.name.clone(), v)))
                    .filter(|(_, v)| *v >= 0.0)
                    .collect()
            })
            .unwrap_or_default();
        let memory = executable.memory_stats().ok().map(|m| MemoryStats {
            argument_bytes: m.argument_size_in_bytes,
            output_bytes: m.output_size_in_bytes,
            temp_bytes: m.temp_size_in_bytes,
            generated_code_bytes: m.generated_code_size_in_bytes,
        });
        Figures { cost, memory }
    }
}

/// The plugin's cost analysis under stable snake_case names. XLA's keys are its
/// HloCostAnalysis property names (`bytes accessed`, `optimal_seconds`, ...); the per-operand
/// ones (`bytes accessed0{}`, `utilization3{}`, `bytes accessedout{1}`) describe operands of
/// the entry computation's root instruction and are left out.
pub fn clean_cost(raw: &std::collections::BTreeMap<String, f64>) -> std::collections::BTreeMap<String, f64> {
    let mut out = std::collections::BTreeMap::new();
    for (k, &v) in raw {
        let name = match k.as_str() {
            "flops" => "flops",
            "transcendentals" => "transcendentals",
            "bytes accessed" => "bytes_accessed",
            "optimal_seconds" => "optimal_seconds",
            _ => continue,
        };
        out.insert(name.to_string(), v);
    }
    out
}

fn summary(
    plugin: &rt::Plugin,
    target: &CompileTarget,
    req: &CompileRequest,
    compile_seconds: f64,
    executable_bytes: usize,
    figures: Figures,
    cache: &'static str,
) -> CompileSummary {
    CompileSummary {
        target: req.target.to_string(),
        topology: req.topology.clone(),
        plugin: plugin.path().display().to_string(),
        pjrt_api_version: plugin.api_version().to_string(),
        platform: target.platform().to_string(),
        partitions: req.partitions,
        replicas: req.replicas,
        compile_seconds,
        executable_bytes,
        cost: clean_cost(&figures.cost),
        memory: figures.memory,
        cache,
        cache_key: None,
        cache_note: None,
    }
}

// ------------------------------------------------------------------ the compilation cache

/// The version of the cached payload layout below; part of every key.
const PAYLOAD_MAGIC: &[u8; 8] = b"TPUCEXE1";

/// Cached payload: magic, u32 length of the figures' JSON, the JSON, the serialized executable.
fn encode_payload(figures: &Figures, executable: &[u8]) -> Vec<u8> {
    let json = serde_json::to_vec(figures).unwrap_or_default();
    let mut out = Vec::with_capacity(12 + json.len() + executable.len());
    out.extend_from_slice(PAYLOAD_MAGIC);
    out.extend_from_slice(&(json.len() as u32).to_le_bytes());
    out.extend_from_slice(&json);
    out.extend_from_slice(executable);
    out
}

fn decode_payload(bytes: &[u8]) -> Option<(Figures, &[u8])> {
    let rest = bytes.strip_prefix(PAYLOAD_MAGIC)?;
    let len = u32::from_le_bytes(rest.get(..4)?.try_into().ok()?) as usize;
    let json = rest.get(4..4 + len)?;
    Some((serde_json::from_slice(json).ok()?, rest.get(4 + len..)?))
}

/// What identifies a plugin for cache keys: platform, versions from its attributes, PJRT API
/// version and a digest of its library. The digest of a file is remembered per (path, size,
/// mtime) in `$XDG_CACHE_HOME/tpuc/plugin-digests.json` so a warm process does not hash a
/// 100 MB library again.
fn plugin_identity(plugin: &rt::Plugin, target: Target) -> tpuc_cache::PluginIdentity {
    let versions: Vec<String> = plugin
        .attributes()
        .iter()
        .filter(|nv| nv.name.contains("version"))
        .map(|nv| {
            let v = match &nv.value {
                rt::Value::Str(s) => s.clone(),
                rt::Value::Int(i) => i.to_string(),
                rt::Value::Ints(v) => v.iter().map(|i| i.to_string()).collect::<Vec<_>>().join("."),
                rt::Value::Float(f) => f.to_string(),
                rt::Value::Bool(b) => b.to_string(),
            };
            format!("{}={v}", nv.name)
        })
        .collect();
    tpuc_cache::PluginIdentity {
        platform_name: target.to_string(),
        platform_version: versions.join(","),
        pjrt_api_version: plugin.api_version().to_string(),
        file_hash: file_digest(plugin.path()),
    }
}

fn digest_memo_path() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("tpuc").join("plugin-digests.json"))
}

fn file_digest(path: &Path) -> String {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::metadata(path) else { return "unreadable".into() };
    let id = format!("{}|{}|{}|{}", path.display(), meta.len(), meta.mtime(), meta.mtime_nsec());
    let memo_path = digest_memo_path();
    let mut memo: BTreeMap<String, String> = memo_path
        .as_ref()
        .and_then(|p| std::fs::read(p).ok())
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default();
    if let Some(d) = memo.get(&id) {
        return d.clone();
    }
    let digest = match std::fs::read(path) {
        Ok(bytes) => tpuc_cache::Digest::of(&bytes).to_hex(),
        Err(_) => return "unreadable".into(),
    };
    memo.insert(id, digest.clone());
    if let Some(p) = memo_path {
        // Best effort, published atomically; a lost race only costs another hash later.
        if let Some(dir) = p.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        let tmp = p.with_extension(format!("{}.tmp", std::process::id()));
        if std::fs::write(&tmp, serde_json::to_vec(&memo).unwrap_or_default()).is_ok() {
            let _ = std::fs::rename(&tmp, &p);
        }
    }
    digest
}

/// How a cache entry is named for people (none of it is hashed): a label, and for a program
/// lowered from a graph that graph's fingerprint and the lowering options, which let a miss
/// that differs only in them name the option.
#[derive(Clone, Copy, Debug, Default)]
pub struct Provenance<'a> {
    pub label: &'a str,
    pub graph: Option<tpuc_cache::Digest>,
    pub lowering: &'a str,
}

impl<'a> From<&'a str> for Provenance<'a> {
    fn from(label: &'a str) -> Self {
        Provenance { label, ..Default::default() }
    }
}

/// The cache key components of compiling `key_program` (StableHLO without locations) for `req`.
pub fn key_components(key_program: &str, req: &CompileRequest, from: Provenance<'_>) -> Result<tpuc_cache::KeyComponents, ExecError> {
    let plugin = plugin_for(req)?;
    Ok(key_components_for(&plugin, key_program, req, from))
}

fn key_components_for(plugin: &rt::Plugin, key_program: &str, req: &CompileRequest, from: Provenance<'_>) -> tpuc_cache::KeyComponents {
    let options = compile_options(req);
    tpuc_cache::KeyComponents {
        program: tpuc_cache::Digest::of(key_program.as_bytes()),
        graph: from.graph,
        lowering: from.lowering.to_string(),
        compile_options: tpuc_cache::CompileOptions {
            canonical: options.to_proto_bytes(),
            summary: if req.replicas > 1 {
                format!("partitions={} replicas={}", req.partitions, req.replicas)
            } else {
                format!("partitions={}", req.partitions)
            },
        },
        target: req.target.to_string(),
        topology: req.topology.clone().unwrap_or_default(),
        plugin: plugin_identity(plugin, req.target),
        tool_version: format!("tpuc {} payload {}", env!("CARGO_PKG_VERSION"), String::from_utf8_lossy(PAYLOAD_MAGIC)),
        label: from.label.to_string(),
    }
}

/// Compiles through the cache: `stablehlo` is what the plugin compiles (it may carry debug
/// locations), `key_program` the same program without locations, which the key hashes. A hit
/// skips the compile; on CPU the cached executable is loaded into a client. Cache failures
/// are misses (the cache logs them); only a real compile error is an error.
pub fn compile_cached(
    stablehlo: &str,
    key_program: &str,
    req: &CompileRequest,
    cache: &tpuc_cache::Cache,
    from: Provenance<'_>,
) -> Result<Compiled, ExecError> {
    let plugin = plugin_for(req)?;
    let kc = key_components_for(&plugin, key_program, req, from);
    let start = Instant::now();
    let mut fresh: Option<(Option<rt::LoadedExecutable>, CompileTarget, f64)> = None;
    let outcome = cache.get_or_compile(&kc, || -> Result<Vec<u8>, ExecError> {
        let target = prepare(&plugin, req)?;
        let t = Instant::now();
        let (executable, loaded) = compile_on(&target, stablehlo, req)?;
        let secs = t.elapsed().as_secs_f64();
        let payload = encode_payload(&Figures::of(&executable), &executable.serialize()?);
        fresh = Some((loaded, target, secs));
        Ok(payload)
    })?;
    let fetch = start.elapsed().as_secs_f64();
    let Some((figures, executable)) = decode_payload(&outcome.bytes) else {
        tracing::warn!(key = %outcome.key, "cached payload has an unknown layout; compiling without the cache");
        return compile_stablehlo(stablehlo, req);
    };
    let source = outcome.source.as_str();
    let (loaded, target, compile_seconds) = match fresh {
        Some((loaded, target, secs)) => (loaded, target, secs),
        None => {
            let target = prepare(&plugin, req)?;
            let t = Instant::now();
            let loaded = match &target {
                CompileTarget::Client(client, _) => Some(client.deserialize(executable)?),
                CompileTarget::Topology(..) => None,
            };
            // For a hit, the time until the executable is ready: fetch and check, then load
            // (client creation is not counted, as for a compile).
            (loaded, target, fetch + t.elapsed().as_secs_f64())
        }
    };
    let mut summary = summary(&plugin, &target, req, compile_seconds, executable.len(), figures, source);
    summary.cache_key = Some(outcome.key.to_hex());
    summary.cache_note = match outcome.source {
        tpuc_cache::Source::Compiled => outcome.miss_explanation.clone(),
        _ => Some(format!("saved {:.3} s of compile time", outcome.compile_time.as_secs_f64())),
    };
    Ok(Compiled { summary, serialized: executable.to_vec(), loaded })
}

/// The element type PJRT uses for an IR dtype.
pub fn element_type(d: DType) -> rt::ElementType {
    use rt::ElementType as E;
    match d {
        DType::Bool => E::Bool,
        DType::I8 => E::I8,
        DType::I16 => E::I16,
        DType::I32 => E::I32,
        DType::I64 => E::I64,
        DType::U8 => E::U8,
        DType::U16 => E::U16,
        DType::U32 => E::U32,
        DType::U64 => E::U64,
        DType::F8E4M3FN => E::F8E4M3FN,
        DType::F8E5M2 => E::F8E5M2,
        DType::F16 => E::F16,
        DType::BF16 => E::BF16,
        DType::F32 => E::F32,
        DType::F64 => E::F64,
        DType::C64 => E::C64,
        DType::C128 => E::C128,
    }
}

/// One argument of `main` as `run` needs it.
pub(crate) struct ArgSpec {
    pub(crate) name: String,
    pub(crate) kind: ArgKind,
    pub(crate) ty: TensorType,
}

pub(crate) fn arg_specs(module: &Module) -> Vec<ArgSpec> {
    let Some(func) = module.main_func() else { return Vec::new() };
    let entry = module.entry_block(func);
    module.blocks[entry]
        .args()
        .iter()
        .zip(&func.args)
        .map(|(&v, info)| ArgSpec { name: info.name.clone(), kind: info.kind, ty: module.values[v].ty.clone() })
        .collect()
}

fn show_inputs(specs: &[&ArgSpec]) -> String {
    specs.iter().map(|s| format!("{}: {}", s.name, s.ty)).collect::<Vec<_>>().join(", ")
}

/// Time spent in each step of one [`Runner::run`].
#[derive(Clone, Copy, Debug, Default)]
pub struct RunTimes {
    /// Checking the inputs against the signature.
    pub check: std::time::Duration,
    /// Host → device copies of the inputs.
    pub upload: std::time::Duration,
    /// The PJRT execute call (until the outputs are ready).
    pub execute: std::time::Duration,
    /// Device → host copies of the outputs.
    pub download: std::time::Duration,
}

impl RunTimes {
    pub fn total(&self) -> std::time::Duration {
        self.check + self.upload + self.execute + self.download
    }
}

/// A loaded executable with its weights resident on the device: weights are uploaded once,
/// then each [`Runner::run`] uploads only the user inputs.
pub struct Runner<'c> {
    loaded: &'c rt::LoadedExecutable,
    specs: Vec<ArgSpec>,
    /// One slot per argument: the resident weight buffer, or `None` for a user input.
    resident: Vec<Option<std::sync::Arc<rt::Buffer>>>,
    results: Vec<TensorType>,
}

impl<'c> Runner<'c> {
    /// Uploads the weight arguments (parameters, buffers, constants) of `module`'s `main`.
    pub fn new(compiled: &'c Compiled, module: &Module, weights: &BTreeMap<String, TensorData>) -> Result<Self, ExecError> {
        let loaded = loaded_of(compiled)?;
        let specs = arg_specs(module);
        let client = loaded.client();
        let mut resident = Vec::with_capacity(specs.len());
        for spec in &specs {
            if !spec.kind.is_weight() {
                resident.push(None);
                continue;
            }
            let w = weight_of(weights, spec)?;
            let dims = w.ty.static_dims().unwrap_or_default();
            let bytes = w.to_dense_bytes();
            resident.push(Some(std::sync::Arc::new(client.buffer_from_host(&bytes, element_type(w.ty.dtype), &dims, None)?)));
        }
        Ok(Runner { loaded, specs, resident, results: result_types(module) })
    }

    /// A runner for a StableHLO module compiled as given (no tpuc IR beside it): every
    /// argument of `sig` is a user input, in order.
    pub fn from_signature(compiled: &'c Compiled, sig: &crate::signature::Signature) -> Result<Self, ExecError> {
        let loaded = loaded_of(compiled)?;
        let specs: Vec<ArgSpec> =
            sig.args.iter().map(|(name, ty)| ArgSpec { name: name.clone(), kind: ArgKind::UserInput, ty: ty.clone() }).collect();
        let resident = vec![None; specs.len()];
        Ok(Runner { loaded, specs, resident, results: sig.results.to_vec() })
    }

    /// Replaces the resident value of a weight argument (e.g. after an optimizer step); the
    /// other weights stay on the device.
    pub fn update_weight(&mut self, name: &str, tensor: &HostTensor) -> Result<(), ExecError> {
        let i = self
            .specs
            .iter()
            .position(|s| s.kind.is_weight() && s.name == name)
            .ok_or_else(|| ExecError::BadInput(format!("`{name}` is not a weight argument of this program")))?;
        if tensor.ty() != self.specs[i].ty {
            return Err(ExecError::BadInput(format!(
                "weight `{name}` expects {}, got {}",
                self.specs[i].ty,
                tensor.ty()
            )));
        }
        let b = self.loaded.client().buffer_from_host(&tensor.bytes, element_type(tensor.dtype), &tensor.dims, None)?;
        self.resident[i] = Some(std::sync::Arc::new(b));
        Ok(())
    }

    /// The user inputs the program takes, as `name: type`.
    pub fn input_signature(&self) -> Vec<String> {
        self.specs.iter().filter(|s| !s.kind.is_weight()).map(|s| format!("{}: {}", s.name, s.ty)).collect()
    }

    /// Runs with `inputs` (source label, tensor) for the user inputs in signature order. Checks
    /// count, shape and dtype of every input first and names the argument on a mismatch.
    pub fn run(&self, inputs: &[(String, HostTensor)]) -> Result<(Vec<HostTensor>, RunTimes), ExecError> {
        let mut times = RunTimes::default();
        let t0 = Instant::now();
        check_inputs(&self.specs, inputs)?;
        times.check = t0.elapsed();
        let t1 = Instant::now();
        let client = self.loaded.client();
        let mut uploaded = Vec::with_capacity(inputs.len());
        for (_, t) in inputs {
            // Used in place where the plugin can (CPU): the inputs outlive the execution.
            uploaded.push(client.buffer_borrowing_host(&t.bytes, element_type(t.dtype), &t.dims, None)?);
        }
        let args = argument_list(&self.resident, &uploaded);
        times.upload = t1.elapsed();
        let t2 = Instant::now();
        let outputs = self.loaded.execute(&args)?;
        times.execute = t2.elapsed();
        drop(args);
        drop(uploaded);
        let t3 = Instant::now();
        let host = rt::Buffer::into_host_all(outputs)?
            .into_iter()
            .zip(&self.results)
            .map(|(bytes, ty)| HostTensor { dtype: ty.dtype, dims: ty.static_dims().unwrap_or_default(), bytes: bytes.into_vec() })
            .collect();
        times.download = t3.elapsed();
        Ok((host, times))
    }
}

/// The loaded executable to run, or why there is none (compiled for a device this host lacks).
pub(crate) fn loaded_of(compiled: &Compiled) -> Result<&rt::LoadedExecutable, ExecError> {
    compiled.loaded.as_ref().ok_or_else(|| {
        ExecError::Unsupported(format!(
            "cannot run on {}: this host has no such device (the executable was compiled only)",
            compiled.summary.target
        ))
    })
}

/// The data of weight argument `spec`.
pub(crate) fn weight_of<'w>(weights: &'w BTreeMap<String, TensorData>, spec: &ArgSpec) -> Result<&'w TensorData, ExecError> {
    weights.get(&spec.name).ok_or_else(|| {
        ExecError::BadInput(format!(
            "no data for {} `{}`: a bare model.json carries no weights; run the .pt2 archive",
            spec.kind.name(),
            spec.name
        ))
    })
}

/// Checks the count, dtype and shape of the user inputs against the program's signature,
/// naming the argument on a mismatch.
pub(crate) fn check_inputs(specs: &[ArgSpec], inputs: &[(String, HostTensor)]) -> Result<(), ExecError> {
    let user: Vec<&ArgSpec> = specs.iter().filter(|s| !s.kind.is_weight()).collect();
    if user.len() != inputs.len() {
        return Err(ExecError::BadInput(format!(
            "the program takes {} input(s) ({}), got {}",
            user.len(),
            show_inputs(&user),
            inputs.len()
        )));
    }
    for (k, (spec, (source, t))) in user.iter().zip(inputs).enumerate() {
        if t.dims.len() != spec.ty.rank() || t.ty() != spec.ty {
            return Err(ExecError::BadInput(format!(
                "input {k} (`{}`) expects {}, got {} from {source}",
                spec.name,
                spec.ty,
                t.ty()
            )));
        }
    }
    Ok(())
}

/// The arguments of one execute, in order: the resident weights in their slots and the
/// freshly uploaded user inputs, in order, in the others.
pub(crate) fn argument_list<'a, R: std::ops::Deref<Target = rt::Buffer>, B: std::ops::Deref<Target = rt::Buffer>>(
    resident: &'a [Option<R>],
    uploaded: &'a [B],
) -> Vec<&'a rt::Buffer> {
    let mut next = uploaded.iter();
    resident
        .iter()
        .map(|slot| match slot {
            Some(b) => &**b,
            None => &**next.next().expect("one upload per user input"),
        })
        .collect()
}

/// Compiles-then-runs convenience: weights from `weights`, user inputs from `inputs`.
pub fn run(
    compiled: &Compiled,
    module: &Module,
    weights: &BTreeMap<String, TensorData>,
    inputs: &[(String, HostTensor)],
) -> Result<Vec<HostTensor>, ExecError> {
    Ok(Runner::new(compiled, module, weights)?.run(inputs)?.0)
}

pub(crate) fn result_types(module: &Module) -> Vec<TensorType> {
    let Some(func) = module.main_func() else { return Vec::new() };
    let entry = module.entry_block(func);
    match module.terminator(entry) {
        Some(ret) => module.ops[ret].operands().iter().map(|&v| module.values[v].ty.clone()).collect(),
        None => Vec::new(),
    }
}

/// One line per discovered plugin: target, path, API version, platform.
pub fn describe_plugins() -> Vec<String> {
    plugin_report().0
}

/// The pip package that carries `target`'s plugin, at the version tpuc is tested with.
pub fn plugin_package(target: Target) -> &'static str {
    match target {
        Target::Cpu => "lammps-jax-pjrt-cpu==0.11.2",
        Target::Tpu => "libtpu==0.0.52",
    }
}

/// One line per plugin (as [`describe_plugins`]) and how many of them load.
pub fn plugin_report() -> (Vec<String>, usize) {
    let d = rt::discover();
    let mut lines = Vec::new();
    let mut usable = 0;
    if let Some(f) = &d.explicit {
        let (line, ok) = describe_one("default", &f.path, &f.origin.to_string(), None);
        lines.push(line);
        usable += ok as usize;
    }
    for target in Target::ALL {
        match d.get(target) {
            Some(f) => {
                let (line, ok) = describe_one(&target.to_string(), &f.path, &f.origin.to_string(), Some(target));
                lines.push(line);
                usable += ok as usize;
            }
            None => lines.push(format!(
                "{target}: not found: `pip install --no-deps {}` into the active virtualenv (or the project's .venv: \
                 scripts/setup.sh), or set {} to the plugin file ({})",
                plugin_package(target),
                rt::plugin_env_var(target),
                rt::site_packages_file(target)
            )),
        }
    }
    (lines, usable)
}

fn describe_one(label: &str, path: &Path, origin: &str, target: Option<Target>) -> (String, bool) {
    match rt::Plugin::load(path) {
        Err(e) => (format!("{label}: {} (from {origin}): cannot load: {e}", path.display()), false),
        Ok(p) => {
            let platform = match target {
                Some(Target::Tpu) => p
                    .create_topology("v5e:2x2", &rt::tpu_topology_options())
                    .and_then(|t| Ok(format!("{} {}", t.platform_name()?, first_line(&t.platform_version()?))))
                    .unwrap_or_else(|e| format!("platform unknown ({e})")),
                _ => p
                    .create_client()
                    .and_then(|c| Ok(format!("{} {}", c.platform_name()?, c.platform_version()?)))
                    .unwrap_or_else(|e| format!("platform unknown ({e})")),
            };
            (format!("{label}: {} (from {origin}), PJRT API {}, platform {platform}", path.display(), p.api_version()), true)
        }
    }
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or("")
}
