//! Compiling StableHLO through a PJRT plugin without the cache: the plugin, the client or
//! topology compiled for, the compile options, and the summary with the executable's cost and
//! memory figures.

use super::{CompileRequest, CompileSummary, Compiled, ExecError, MemoryStats, Target};
use std::time::Instant;
use tpuc_runtime as rt;

pub(super) fn plugin_for(req: &CompileRequest) -> Result<rt::Plugin, ExecError> {
    let path = match &req.plugin {
        Some(p) => p.clone(),
        None => rt::discover().plugin(req.target)?.to_path_buf(),
    };
    Ok(rt::Plugin::load(&path)?)
}

/// Compiles StableHLO text without the cache. CPU and GPU compile with a client (and keep the
/// loaded executable), TPU on its chips where the host has them, else for the named topology
/// without a device.
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

/// What compiles: a client (CPU, GPU, TPU chips) or a topology (TPU without chips), with the
/// platform's name.
pub(super) enum CompileTarget {
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

pub(super) fn prepare(plugin: &rt::Plugin, req: &CompileRequest) -> Result<CompileTarget, ExecError> {
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
        Target::Gpu => {
            if req.topology.is_some() {
                return Err(ExecError::BadInput("--topology applies to --target tpu only".into()));
            }
            let client = super::clients::device_client(plugin, Target::Gpu)?;
            check_device_count(&client, req)?;
            let platform = client.platform_name()?;
            Ok(CompileTarget::Client(client, platform))
        }
        // A TPU VM: compile on its chips and run there (a topology, if named, is the chips').
        Target::Tpu if tpu_chips_here() => {
            let client = super::clients::device_client(plugin, Target::Tpu)?;
            check_device_count(&client, req)?;
            let platform = client.platform_name()?;
            Ok(CompileTarget::Client(client, platform))
        }
        Target::Tpu => {
            let name = req.topology.as_deref().ok_or_else(|| {
                ExecError::BadInput("--target tpu needs --topology (e.g. v5e:2x2, v6e:2x2, v5p:2x2x1) on a host without TPU chips".into())
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

/// Whether this host has TPU chips (libtpu then compiles for them and runs there).
pub fn tpu_chips_here() -> bool {
    rt::tpu_chips_in(std::path::Path::new("/dev"))
}

/// Fails when the program needs more devices than the client has.
fn check_device_count(client: &rt::Client, req: &CompileRequest) -> Result<(), ExecError> {
    let have = client.devices()?.len() as i64;
    if req.devices() > have {
        return Err(ExecError::BadInput(format!(
            "the program needs {} devices (partitions {} x ranks {}); this host's {} plugin has {have}",
            req.devices(),
            req.partitions.max(1),
            req.replicas.max(1),
            req.target
        )));
    }
    Ok(())
}

pub(super) fn compile_options(req: &CompileRequest) -> rt::CompileOptions {
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

pub(super) fn compile_on(
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
pub(super) struct Figures {
    cost: std::collections::BTreeMap<String, f64>,
    memory: Option<MemoryStats>,
}

impl Figures {
    pub(super) fn of(executable: &rt::Executable) -> Figures {
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

pub(super) fn summary(
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
