//! Flag groups several commands share: the pass pipeline and its sharding (`--precision`,
//! `--mesh`, `--ranks`, ...), the compile target and plugin, the cache tiers, and how `lower`
//! and `opt` run the passes.

use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
use clap::{Args, ValueEnum};
use std::path::PathBuf;
use tpuc_driver::{Emit, LowerOptions, Precision, Target};

use crate::common::{named, report_passes, Failure};

/// `--precision`: the words of [`Precision`], with help for each.
pub fn precision_parser() -> impl TypedValueParser<Value = Precision> {
    PossibleValuesParser::new([
        PossibleValue::new("default").help("One bf16 pass with f32 accumulation on TPU (the TPU default)"),
        PossibleValue::new("high").help("Three bf16 passes (bf16_3x)"),
        PossibleValue::new("highest").help("Six passes: f32 accuracy (the CPU default)"),
    ])
    .map(|s| s.parse::<Precision>().expect("a listed precision"))
}

/// `--target`: the names of [`Target`], with help for each.
pub fn target_parser() -> impl TypedValueParser<Value = Target> {
    PossibleValuesParser::new([
        PossibleValue::new(Target::Cpu.name()).help("The XLA CPU plugin (the default)"),
        PossibleValue::new(Target::Tpu.name()).help("libtpu: runs on the host's TPU chips; without chips, compiles for a TPU topology (--topology)"),
        PossibleValue::new(Target::Gpu.name()).help("An NVIDIA GPU through the CUDA PJRT plugin (pip install jax-cuda13-pjrt)"),
    ])
    .map(|s| s.parse::<Target>().expect("a listed target"))
}

/// Flags that choose and configure the pass pipeline (lower, opt, compile, run).
#[derive(Args, Clone)]
pub struct PipelineArgs {
    /// Matmul and convolution precision [default: tpu `default`, cpu and gpu `highest`].
    #[arg(long, value_parser = precision_parser())]
    precision: Option<Precision>,
    /// Convolution precision [default: --precision if given, else gpu `default` (TF32, as
    /// torch's cuDNN convolutions), else as matmuls].
    #[arg(long, value_parser = precision_parser())]
    conv_precision: Option<Precision>,
    /// Matmuls and convolutions in bf16 with f32 accumulation; norms, softmax and reductions
    /// stay f32.
    #[arg(long)]
    bf16: bool,
    /// Drop round trips through narrower float types (f32 -> bf16 -> f32 becomes f32).
    #[arg(long)]
    allow_excess_precision: bool,
    /// The default pipeline without fusion into stablehlo.composite ops.
    #[arg(long)]
    no_fusion: bool,
    /// Alias every state update (a result that is the new value of a parameter or buffer) to
    /// the argument it updates (`tf.aliasing_output`), so that a runtime that donates the
    /// state updates it in place (exported training steps are run so).
    #[arg(long)]
    donate_state: bool,
    /// Run exactly these passes, comma-separated and in order (e.g.
    /// canonicalize,fuse,precision), instead of the target's default pipeline; an empty list
    /// runs none.
    #[arg(long, value_name = "LIST", value_delimiter = ',', num_args = 0..)]
    passes: Option<Vec<String>>,
    /// SPMD over a device mesh: axis names and sizes, major to minor (e.g. x=2,y=2); the
    /// program is partitioned over its devices (device p at p's row-major mesh position).
    #[arg(long, value_name = "AXES", value_parser = mesh_arg)]
    mesh: Option<MeshArg>,
    /// Split an argument over mesh axes (repeatable; needs --mesh): NAME=AXES with one entry
    /// per dim, a mesh axis, axes joined by `+`, or `_` for a whole dim (e.g. fc1.weight=y,_).
    /// NAME as the program's arguments are named (`tpuc.name`: a parameter's qualified name or
    /// an input's name). Other arguments, and results, are replicated unless --shard-policy
    /// splits them.
    #[arg(long, value_name = "NAME=AXES", value_parser = shard_arg)]
    shard: Vec<ShardArg>,
    /// Shard the arguments --shard does not name by a policy (needs --mesh): `dp` splits the
    /// batch (dim 0) of user inputs over all axes, `fsdp` also each parameter's largest dim
    /// (both keep results split by batch), `tp` the matmul weights in Megatron column/row pairs
    /// over the last axis and the batch over the others.
    #[arg(long, value_name = "POLICY", value_parser = PossibleValuesParser::new(tpuc_driver::spmd::ShardPolicy::NAMES).map(|s| tpuc_driver::spmd::ShardPolicy::parse(&s).expect("a listed policy")))]
    shard_policy: Option<tpuc_driver::spmd::ShardPolicy>,
    /// With --shard-policy: an argument the policy cannot split evenly (named, with its dim
    /// and the mesh, in a note otherwise) is an error.
    #[arg(long)]
    strict: bool,
    /// The mesh, shardings and policy from a JSON file, in the notation of the flags:
    /// {"mesh": "x=2,y=2", "shard": {"fc1.weight": "y,_"}, "policy": "tp"} (every key
    /// optional). --mesh must agree with its mesh; --shard and --shard-policy take precedence.
    /// `tpuc compile --json` reports a sharded program's final plan under "sharding".
    #[arg(long, value_name = "FILE")]
    shard_plan: Option<PathBuf>,
    /// A per-rank program (PyTorch's functional collectives): run it as N ranks, one device
    /// each, its collectives between them; `run` takes each input and gives each output with
    /// all ranks stacked along a new leading dim.
    #[arg(long, value_name = "N", conflicts_with_all = ["mesh", "shard_plan"], value_parser = clap::value_parser!(i64).range(1..=4096))]
    ranks: Option<i64>,
    /// The ranks of a process group the program names (repeatable; needs --ranks): NAME=RANKS,
    /// groups of ranks separated by `|` (e.g. 1=0,1|2,3). Group "0" is all ranks unless given.
    #[arg(long, value_name = "NAME=RANKS", requires = "ranks")]
    group: Vec<String>,
}

/// `--mesh x=2,y=2`.
#[derive(Clone, Debug)]
struct MeshArg(Vec<(String, i64)>);
/// `--shard NAME=AXES`.
#[derive(Clone, Debug)]
struct ShardArg(String, Vec<Vec<String>>);

fn mesh_arg(s: &str) -> Result<MeshArg, String> {
    tpuc_driver::spmd::parse_mesh(s).map(MeshArg)
}

fn shard_arg(s: &str) -> Result<ShardArg, String> {
    tpuc_driver::spmd::parse_shard(s).map(|(n, d)| ShardArg(n, d))
}

impl PipelineArgs {
    /// The --shard-plan file, if one is given.
    fn plan(&self) -> Result<Option<tpuc_driver::spmd::ShardPlan>, Failure> {
        let Some(path) = &self.shard_plan else { return Ok(None) };
        let text = std::fs::read_to_string(path).map_err(|e| Failure::User(format!("cannot read --shard-plan {}: {e}", path.display())))?;
        let plan = tpuc_driver::spmd::ShardPlan::parse(&text).map_err(|e| Failure::User(format!("--shard-plan {}: {e}", path.display())))?;
        Ok(Some(plan))
    }

    /// The mesh and argument shardings of --mesh / --shard-plan / --shard, and the policy of
    /// --shard-policy or the plan.
    fn sharding(&self) -> Result<(Option<tpuc_driver::MeshSharding>, Option<tpuc_driver::spmd::ShardPolicy>), Failure> {
        let plan = self.plan()?.unwrap_or_default();
        let mesh = match (&self.mesh, &plan.mesh) {
            (Some(m), Some(p)) if &m.0 != p => {
                let show = |axes: &[(String, i64)]| axes.iter().map(|(n, s)| format!("{n}={s}")).collect::<Vec<_>>().join(",");
                return Err(Failure::User(format!("--mesh {} differs from the --shard-plan's mesh {}", show(&m.0), show(p))));
            }
            (Some(m), _) => Some(m.0.clone()),
            (None, p) => p.clone(),
        };
        let policy = self.shard_policy.or(plan.policy);
        let Some(axes) = mesh else {
            if !self.shard.is_empty() || policy.is_some() || !plan.shard.is_empty() {
                return Err(Failure::User("--shard and --shard-policy need a mesh (--mesh, or `mesh` in the --shard-plan)".into()));
            }
            return Ok((None, None));
        };
        let mut args = plan.shard;
        let mut given = std::collections::BTreeSet::new();
        for ShardArg(name, dims) in &self.shard {
            if !given.insert(name.clone()) {
                return Err(Failure::User(format!("--shard gives `{name}` twice")));
            }
            args.insert(name.clone(), dims.clone());
        }
        Ok((Some(tpuc_driver::MeshSharding { axes, args, results: Default::default() }), policy))
    }

    /// The ranks and process groups of --ranks / --group.
    fn ranks(&self) -> Result<Option<tpuc_driver::Ranks>, Failure> {
        let Some(count) = self.ranks else { return Ok(None) };
        let mut groups = std::collections::BTreeMap::new();
        for g in &self.group {
            let (name, ranks) = tpuc_driver::spmd::parse_group(g, count).map_err(Failure::User)?;
            if groups.insert(name.clone(), ranks).is_some() {
                return Err(Failure::User(format!("--group gives `{name}` twice")));
            }
        }
        Ok(Some(tpuc_driver::Ranks { count, groups }))
    }

    /// Lowering options for `target` with these flags.
    pub fn options(&self, inline_weights: bool, target: Target) -> Result<LowerOptions, Failure> {
        let (sharding, shard_policy) = self.sharding()?;
        Ok(LowerOptions {
            ranks: self.ranks()?,
            sharding,
            shard_policy,
            strict_sharding: self.strict,
            inline_weights,
            target,
            precision: self.precision,
            conv_precision: self.conv_precision,
            bf16: self.bf16,
            allow_excess_precision: self.allow_excess_precision,
            no_fusion: self.no_fusion,
            donate_state: self.donate_state,
            passes: self.passes.clone().map(|v| v.into_iter().map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect()),
            ..Default::default()
        })
    }
}

#[derive(Args)]
pub struct TargetArgs {
    /// Which PJRT plugin compiles the program.
    #[arg(long, value_parser = target_parser(), default_value = "cpu")]
    pub target: Target,
    /// TPU topology to compile for, e.g. v5e:2x2, v6e:2x2, v5p:2x2x1 (with --target tpu).
    #[arg(long, value_name = "NAME")]
    topology: Option<String>,
    /// SPMD partitions over the topology's devices, arguments replicated (--mesh sets it to
    /// the mesh's device count).
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub partitions: i64,
    /// PJRT plugin library to use instead of the discovered one (also: TPUC_PJRT_PLUGIN,
    /// TPUC_PJRT_CPU_PLUGIN, TPUC_PJRT_TPU_PLUGIN, TPUC_PJRT_GPU_PLUGIN).
    #[arg(long, value_name = "PATH")]
    plugin: Option<PathBuf>,
    /// Copy every array between host and device, as an accelerator does, even where the
    /// plugin could use host memory in place (the CPU plugin); also TPUC_HOST_ALIASING=0.
    #[arg(long)]
    no_host_aliasing: bool,
    #[command(flatten)]
    pub cache: CacheArgs,
}

/// Which cache tiers to use (the TPUC_CACHE_* environment variables set the same).
#[derive(Args, Clone)]
pub struct CacheLocation {
    /// Share executables between processes on this host under /dev/shm/tpuc/NAME
    /// (TPUC_CACHE_TIER2).
    #[arg(long, value_name = "NAME")]
    cache_tier2: Option<String>,
    /// Remote tier: gs://bucket/prefix or a shared directory (TPUC_CACHE_TIER3_ROOT).
    #[arg(long, value_name = "URI")]
    cache_tier3: Option<String>,
}

impl CacheLocation {
    pub fn open(&self) -> tpuc_driver::exec::Cache {
        let mut config = tpuc_cache::CacheConfig::from_env();
        if let Some(name) = &self.cache_tier2 {
            let mut t2 = tpuc_cache::Tier2Config::new(name.clone());
            if let Some(root) = std::env::var_os("TPUC_CACHE_TIER2_ROOT") {
                t2.root = root.into();
            }
            config.tier2 = Some(t2);
        }
        if let Some(root) = &self.cache_tier3 {
            config.tier3 = Some(tpuc_cache::Tier3Config::new(root.clone()));
        }
        tpuc_cache::Cache::new(config)
    }
}

/// Compilation cache settings of the commands that compile.
#[derive(Args, Clone)]
pub struct CacheArgs {
    /// Compile without the cache.
    #[arg(long)]
    no_cache: bool,
    #[command(flatten)]
    pub location: CacheLocation,
}

impl CacheArgs {
    pub fn open(&self) -> Option<tpuc_driver::exec::Cache> {
        (!self.no_cache).then(|| self.location.open())
    }
}

impl TargetArgs {
    /// Applies the process-wide runtime settings of these flags (host aliasing).
    pub fn apply(&self) {
        let env_off = std::env::var("TPUC_HOST_ALIASING").is_ok_and(|v| matches!(v.trim(), "0" | "false" | "off" | "no"));
        if self.no_host_aliasing || env_off {
            tpuc_driver::session::set_host_aliasing(false);
        }
    }

    /// The request for a lowered program: one partition per mesh device, or one replica per
    /// rank.
    pub fn request_for(&self, lowered: &tpuc_driver::Lowered) -> Result<tpuc_driver::exec::CompileRequest, Failure> {
        let mut req = self.request();
        if let Some(r) = &lowered.ranks {
            if self.partitions != 1 {
                return Err(Failure::User("--partitions applies to replicated or --mesh programs, not --ranks".into()));
            }
            req.replicas = r.count;
        }
        if let Some(sh) = &lowered.sharding {
            let n = tpuc_driver::spmd::device_count(sh);
            if self.partitions != 1 && self.partitions != n {
                return Err(Failure::User(format!("--partitions {} does not match the mesh's {n} devices", self.partitions)));
            }
            req.partitions = n;
        }
        Ok(req)
    }

    pub fn request(&self) -> tpuc_driver::exec::CompileRequest {
        tpuc_driver::exec::CompileRequest {
            target: self.target,
            topology: self.topology.clone(),
            partitions: self.partitions,
            replicas: 1,
            plugin: self.plugin.clone(),
        }
    }
}

#[derive(Copy, Clone, ValueEnum)]
pub enum EmitKind {
    /// tpuc IR text.
    Ir,
    /// StableHLO MLIR text.
    Stablehlo,
}

/// How `lower` and `opt` run the pass pipeline.
#[derive(Args)]
pub struct PassRunArgs {
    /// The target whose default pipeline runs (TPU also legalizes f64 and i64).
    #[arg(long, value_parser = target_parser(), default_value = "cpu")]
    target: Target,
    #[command(flatten)]
    pipeline: PipelineArgs,
    /// Embed parameters, buffers and constants as constants (default: leading function
    /// arguments, in signature order).
    #[arg(long)]
    inline_weights: bool,
    /// Attach each op's FX node name and source line as an MLIR location (StableHLO output).
    #[arg(long)]
    debug_locations: bool,
    /// Run the IR verifier after every pass (always on in debug builds).
    #[arg(long)]
    verify_each: bool,
    /// Print the IR after every pass to stderr.
    #[arg(long)]
    print_after_all: bool,
    /// Write the IR after every pass into this folder, one numbered file per pass.
    #[arg(long, value_name = "DIR")]
    dump_dir: Option<PathBuf>,
    /// Print a table of the time each pass took (and whether it changed the IR) to stderr.
    #[arg(long)]
    pass_timing: bool,
    /// Specialize the symbolic dims to this bucket first, NAME=SIZE for every symbol
    /// (repeatable): static shapes, padding masked, each symbol's real size an extra argument.
    #[arg(long = "bucket", value_name = "NAME=SIZE")]
    bucket: Vec<String>,
}

impl PassRunArgs {
    fn options(&self) -> Result<LowerOptions, Failure> {
        Ok(LowerOptions {
            verify_each: self.verify_each,
            print_after_all: self.print_after_all,
            dump_dir: self.dump_dir.clone(),
            debug_locations: self.debug_locations,
            pass_timing: self.pass_timing,
            ..self.pipeline.options(self.inline_weights, self.target)?
        })
    }

    /// Imports and runs the pipeline, reporting pass notes and timings.
    pub fn lower(&self, model: &std::path::Path, emit: EmitKind) -> Result<tpuc_driver::Lowered, Failure> {
        let emit = match emit {
            EmitKind::Ir => Emit::Ir,
            EmitKind::Stablehlo => Emit::StableHlo,
        };
        let lowered = if self.bucket.is_empty() {
            tpuc_driver::compile_file(model, &self.options()?, emit)?
        } else {
            let mut bucket = tpuc_driver::dynamic::Sizes::new();
            for b in &self.bucket {
                let bad = || Failure::User(format!("bad --bucket `{b}`: expected NAME=SIZE, e.g. s0=128"));
                let (name, size) = named(b).ok_or_else(bad)?;
                bucket.insert(name.to_string(), size.trim().parse().map_err(|_| bad())?);
            }
            let imported = tpuc_driver::import(model)?;
            tpuc_driver::lower_bucket(&imported.module, &imported.weights, &bucket, &self.options()?, emit)?.lowered
        };
        report_passes(&lowered, self.pass_timing);
        Ok(lowered)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_listed_target_and_precision_parses() {
        let cmd = clap::Command::new("t")
            .arg(clap::Arg::new("p").long("p").value_parser(precision_parser()))
            .arg(clap::Arg::new("t").long("t").value_parser(target_parser()));
        for p in ["default", "high", "highest"] {
            let m = cmd.clone().try_get_matches_from(["t", "--p", p]).unwrap();
            assert_eq!(m.get_one::<Precision>("p").unwrap().to_string(), p);
        }
        for t in Target::ALL {
            let m = cmd.clone().try_get_matches_from(["t", "--t", t.name()]).unwrap();
            assert_eq!(*m.get_one::<Target>("t").unwrap(), t);
        }
    }
}
