//! `tpuc`: compile PyTorch programs (torch.export `.pt2` archives or their `model.json`) to
//! StableHLO.
//!
//! Exit codes: 0 success, 1 user error (bad input, unsupported op, bad option), 2 internal
//! error (a tpuc bug).

use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
use clap::{Args, Parser, Subcommand, ValueEnum};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use tpuc_driver::{DriverError, Emit, LowerOptions, Precision, Target};

#[derive(Parser)]
#[command(
    name = "tpuc",
    version,
    about = "Compile PyTorch programs (torch.export .pt2 archives) to StableHLO for XLA / TPU",
    long_about = "Compile PyTorch programs to StableHLO.\n\n\
        MODEL is what `torch.export.save(ep, \"model.pt2\")` writes (as exported, or after \
        `ep.run_decompositions()`), or the bare `model.json` from inside such an archive.\n\n\
        Exit codes: 0 success, 1 user error (bad input, unsupported op, bad option), 2 internal error.",
    after_help = "Examples:\n  tpuc import model.pt2\n  tpuc lower model.pt2 -o model.mlir\n  tpuc opt model.pt2 --passes canonicalize,fuse --emit ir\n  tpuc compile model.pt2 --target tpu --topology v5e:2x2 -o model.v5e.xla\n  tpuc run model.pt2 --inputs x.npy --out-dir out/\n  tpuc plan-buckets model.pt2\n  tpuc plugins"
)]
struct Cli {
    /// More logging (-v info, -vv debug); RUST_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Import a program and print its tpuc IR.
    Import(ImportArgs),
    /// Lower a program to StableHLO MLIR text (or to tpuc IR with --emit ir).
    Lower(LowerArgs),
    /// Run IR passes on a program (a chosen list with --passes, else the default pipeline)
    /// and print the IR (or StableHLO with --emit stablehlo). MODEL may also be tpuc IR text
    /// (a .tpuc file).
    Opt(OptArgs),
    /// Compile a program to an XLA executable with a PJRT plugin (CPU here, or a TPU topology
    /// without a TPU) and write the serialized executable.
    Compile(CompileArgs),
    /// Compile and run a program on the CPU plugin with inputs from .npy files.
    Run(RunArgs),
    /// List the PJRT plugins tpuc finds: target, path, PJRT API version, platform (exit 1 when
    /// none is found, with how to get each).
    Plugins,
    /// Inspect and manage the compilation cache (configured by TPUC_CACHE_* variables or the
    /// --cache-* flags).
    #[command(subcommand)]
    Cache(CacheCommand),
    /// Plan the bucket sizes of a program's symbolic dimensions (or of --range symbols) and print
    /// them with their padding waste, without compiling.
    PlanBuckets(PlanBucketsArgs),
}

#[derive(Subcommand)]
enum CacheCommand {
    /// Hits and misses per tier, bytes, and compile time saved (this host's totals with tier 2).
    Stats(CacheOnly),
    /// List cached entries.
    Ls(CacheTier),
    /// Remove cached entries (all tiers, or one).
    Clear(CacheTier),
    /// Sweep leftover temporary files and apply the size budgets.
    Evict(CacheOnly),
    /// Why the next compile of MODEL with these flags would hit or miss.
    Explain(Box<ExplainArgs>),
}

#[derive(Args)]
struct CacheOnly {
    #[command(flatten)]
    cache: CacheLocation,
}

#[derive(Args)]
struct CacheTier {
    /// Only this tier: 1 memory, 2 host shared memory, 3 remote.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=3))]
    tier: Option<u32>,
    #[command(flatten)]
    cache: CacheLocation,
}

#[derive(Args)]
struct ExplainArgs {
    /// The program: a .pt2 archive or a torch.export model.json.
    model: PathBuf,
    #[command(flatten)]
    target: TargetArgs,
    /// As for compile: weights embedded in the executable.
    #[arg(long)]
    inline_weights: bool,
    #[command(flatten)]
    pipeline: PipelineArgs,
    #[command(flatten)]
    buckets: BucketArgs,
}

/// `--precision`: the words of [`Precision`], with help for each.
fn precision_parser() -> impl TypedValueParser<Value = Precision> {
    PossibleValuesParser::new([
        PossibleValue::new("default").help("One bf16 pass with f32 accumulation on TPU (the TPU default)"),
        PossibleValue::new("high").help("Three bf16 passes (bf16_3x)"),
        PossibleValue::new("highest").help("Six passes: f32 accuracy (the CPU default)"),
    ])
    .map(|s| s.parse::<Precision>().expect("a listed precision"))
}

/// `--target`: the names of [`Target`], with help for each.
fn target_parser() -> impl TypedValueParser<Value = Target> {
    PossibleValuesParser::new([
        PossibleValue::new(Target::Cpu.name()).help("The XLA CPU plugin (the default)"),
        PossibleValue::new(Target::Tpu.name()).help("libtpu: compiles for a TPU topology (--topology), with or without a TPU"),
    ])
    .map(|s| s.parse::<Target>().expect("a listed target"))
}

/// Flags that choose and configure the pass pipeline (lower, opt, compile, run).
#[derive(Args, Clone)]
struct PipelineArgs {
    /// Matmul and convolution precision [default: tpu `default`, cpu `highest`].
    #[arg(long, value_parser = precision_parser())]
    precision: Option<Precision>,
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
    fn sharding(&self) -> Result<(Option<tpuc_driver::spmd::MeshSharding>, Option<tpuc_driver::spmd::ShardPolicy>), Failure> {
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
        Ok((Some(tpuc_driver::spmd::MeshSharding { axes, args, results: Default::default() }), policy))
    }

    /// The ranks and process groups of --ranks / --group.
    fn ranks(&self) -> Result<Option<tpuc_driver::spmd::Ranks>, Failure> {
        let Some(count) = self.ranks else { return Ok(None) };
        let mut groups = std::collections::BTreeMap::new();
        for g in &self.group {
            let (name, ranks) = tpuc_driver::spmd::parse_group(g, count).map_err(Failure::User)?;
            if groups.insert(name.clone(), ranks).is_some() {
                return Err(Failure::User(format!("--group gives `{name}` twice")));
            }
        }
        Ok(Some(tpuc_driver::spmd::Ranks { count, groups }))
    }

    /// Lowering options for `target` with these flags.
    fn options(&self, inline_weights: bool, target: Target) -> Result<LowerOptions, Failure> {
        let (sharding, shard_policy) = self.sharding()?;
        Ok(LowerOptions {
            ranks: self.ranks()?,
            sharding,
            shard_policy,
            strict_sharding: self.strict,
            inline_weights,
            target,
            precision: self.precision,
            bf16: self.bf16,
            allow_excess_precision: self.allow_excess_precision,
            no_fusion: self.no_fusion,
            passes: self.passes.clone().map(|v| v.into_iter().map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect()),
            ..Default::default()
        })
    }
}

#[derive(Args)]
struct TargetArgs {
    /// Which PJRT plugin compiles the program.
    #[arg(long, value_parser = target_parser(), default_value = "cpu")]
    target: Target,
    /// TPU topology to compile for, e.g. v5e:2x2, v6e:2x2, v5p:2x2x1 (with --target tpu).
    #[arg(long, value_name = "NAME")]
    topology: Option<String>,
    /// SPMD partitions over the topology's devices, arguments replicated (--mesh sets it to
    /// the mesh's device count).
    #[arg(long, default_value_t = 1, value_name = "N")]
    partitions: i64,
    /// PJRT plugin library to use instead of the discovered one (also: TPUC_PJRT_PLUGIN,
    /// TPUC_PJRT_CPU_PLUGIN, TPUC_PJRT_TPU_PLUGIN).
    #[arg(long, value_name = "PATH")]
    plugin: Option<PathBuf>,
    #[command(flatten)]
    cache: CacheArgs,
}

/// Which cache tiers to use (the TPUC_CACHE_* environment variables set the same).
#[derive(Args, Clone)]
struct CacheLocation {
    /// Share executables between processes on this host under /dev/shm/tpuc/NAME
    /// (TPUC_CACHE_TIER2).
    #[arg(long, value_name = "NAME")]
    cache_tier2: Option<String>,
    /// Remote tier: gs://bucket/prefix or a shared directory (TPUC_CACHE_TIER3_ROOT).
    #[arg(long, value_name = "URI")]
    cache_tier3: Option<String>,
}

impl CacheLocation {
    fn open(&self) -> tpuc_driver::exec::Cache {
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
struct CacheArgs {
    /// Compile without the cache.
    #[arg(long)]
    no_cache: bool,
    #[command(flatten)]
    location: CacheLocation,
}

impl CacheArgs {
    fn open(&self) -> Option<tpuc_driver::exec::Cache> {
        (!self.no_cache).then(|| self.location.open())
    }
}

/// Compiles lowered StableHLO through the cache (unless --no-cache).
fn compile_lowered(
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

impl TargetArgs {
    /// The request for a lowered program: one partition per mesh device, or one replica per
    /// rank.
    fn request_for(&self, lowered: &tpuc_driver::Lowered) -> Result<tpuc_driver::exec::CompileRequest, Failure> {
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

    fn request(&self) -> tpuc_driver::exec::CompileRequest {
        tpuc_driver::exec::CompileRequest {
            target: self.target,
            topology: self.topology.clone(),
            partitions: self.partitions,
            replicas: 1,
            plugin: self.plugin.clone(),
        }
    }
}

#[derive(Args)]
struct CompileArgs {
    /// The program: a .pt2 archive, a torch.export model.json, tpuc IR (.tpuc), or StableHLO
    /// text from any producer (.mlir: tpuc lower, jax.jit(f).lower(...).as_text(), torch_xla).
    model: PathBuf,
    #[command(flatten)]
    target: TargetArgs,
    #[command(flatten)]
    pipeline: PipelineArgs,
    /// Write the serialized executable here.
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// Print the summary as one JSON object instead of a line.
    #[arg(long)]
    json: bool,
    /// Embed the weights in the executable instead of taking them as arguments.
    #[arg(long)]
    inline_weights: bool,
    #[command(flatten)]
    buckets: BucketArgs,
    /// Compile this many buckets at once (programs with symbolic dims) [default: the CPU count].
    #[arg(long, value_name = "J")]
    jobs: Option<usize>,
}

#[derive(Args)]
struct RunArgs {
    /// The program: a .pt2 archive, a torch.export model.json, or StableHLO text (.mlir) from
    /// any producer, run as given with every argument of its `main` from --inputs.
    model: PathBuf,
    #[command(flatten)]
    target: TargetArgs,
    #[command(flatten)]
    pipeline: PipelineArgs,
    /// The program's user inputs as .npy files, in signature order (weights come from the
    /// archive).
    #[arg(long, num_args = 0.., value_name = "NPY")]
    inputs: Vec<PathBuf>,
    /// Write the outputs here as output_0.npy, output_1.npy, ...
    #[arg(long, value_name = "DIR")]
    out_dir: Option<PathBuf>,
    /// Expected outputs as .npy files, in order; exit 1 if any differs beyond the tolerances.
    #[arg(long, num_args = 0.., value_name = "NPY")]
    expect: Vec<PathBuf>,
    /// Relative tolerance for --expect: |got - want| <= atol + rtol * |want|.
    #[arg(long, default_value_t = 1e-5)]
    rtol: f64,
    /// Absolute tolerance for --expect.
    #[arg(long, default_value_t = 1e-5)]
    atol: f64,
    /// Run this many times and print the median over all runs but the first of each step, in
    /// µs: total, check (input checks), upload, execute, download (a --mesh program: total).
    #[arg(long, default_value_t = 1, value_name = "N")]
    repeat: usize,
    /// Print one JSON object as the last line: `bucket` (the bucket run, for programs with
    /// symbolic dims), `cache` (where the executable came from), `outputs` (their shapes),
    /// `ok`; with --repeat also `runs` and `median_us` {total, check, upload, execute,
    /// download} (a --mesh program: `devices` and `median_us.total`).
    #[arg(long)]
    json: bool,
    /// Fill the padding of bucketed inputs with this value instead of zeros (nan, inf, -inf
    /// or a number): valid outputs must not change.
    #[arg(long, value_name = "VALUE", hide = true)]
    pad_fill: Option<f64>,
    /// The seed of the program's random ops (dropout, rand, randn, bernoulli, randint, ...): the
    /// same seed gives the same outputs. A program with random ops takes it as its last input,
    /// `tpuc_rng_seed`, filled from this flag unless given with --inputs.
    #[arg(long, default_value_t = 0, value_name = "N")]
    seed: u64,
    #[command(flatten)]
    buckets: BucketArgs,
}

#[derive(Args)]
#[command(after_help = "Policies: auto (powers of two below 128, then 128 x {1,2,3,4,6,8,12,16,24,...}), \
    linear:K (multiples of K), a list 128,256,512 (must reach the maximum), hist:FILE[:N] (the buckets \
    minimising expected padding under a JSON histogram {\"size\": count}). Every plan ends at the \
    symbol's maximum.\n\nExamples:\n  tpuc plan-buckets model.pt2\n  tpuc plan-buckets --range seq=1..2048 \
    --range batch=1..64 --buckets seq=linear:128 --max-buckets 16 --json\n  tpuc plan-buckets model.pt2 \
    --max-size s0=4096 --hist s0=lengths.json")]
struct PlanBucketsArgs {
    /// The program (.pt2, model.json or .tpuc): its symbols and their ranges. Or give --range.
    model: Option<PathBuf>,
    /// A symbol and its inclusive range instead of a program, e.g. seq=1..2048 (repeatable;
    /// seq=1.. is unbounded).
    #[arg(long = "range", value_name = "NAME=LO..HI")]
    ranges: Vec<String>,
    #[command(flatten)]
    buckets: BucketArgs,
    /// Print the plan as one JSON object instead of a table.
    #[arg(long)]
    json: bool,
}

/// How a program with symbolic dims is cut into buckets (`plan-buckets`, `compile`, `run`).
#[derive(Args, Clone, Default)]
struct BucketArgs {
    /// The bucket policy: auto, linear:K, a list such as 128,256,512, or hist:FILE[:N];
    /// NAME=POLICY sets one symbol's (repeatable) [default: auto].
    #[arg(long = "buckets", value_name = "[NAME=]POLICY")]
    buckets: Vec<String>,
    /// The same as --buckets [NAME=]hist:FILE.
    #[arg(long = "hist", value_name = "[NAME=]FILE")]
    hist: Vec<String>,
    /// At most N buckets of 128 and above per symbol, and at most min(N, 7) below 128.
    #[arg(long, default_value_t = tpuc_driver::buckets::DEFAULT_MAX_BUCKETS, value_name = "N")]
    max_buckets: usize,
    /// At most N bucket combinations (compiles) over all symbols.
    #[arg(long, default_value_t = tpuc_driver::buckets::DEFAULT_MAX_TOTAL, value_name = "N")]
    max_total: u64,
    /// An upper bound for a symbol, e.g. s77=2048: required for unbounded symbols, narrows a
    /// bounded one (repeatable).
    #[arg(long = "max-size", value_name = "NAME=N")]
    max_size: Vec<String>,
}

#[derive(Args)]
struct ImportArgs {
    /// The program: a .pt2 archive or a torch.export model.json.
    model: PathBuf,
    /// Write the output here instead of stdout.
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
}

#[derive(Copy, Clone, ValueEnum)]
enum EmitKind {
    /// tpuc IR text.
    Ir,
    /// StableHLO MLIR text.
    Stablehlo,
}

#[derive(Args)]
struct LowerArgs {
    /// The program: a .pt2 archive or a torch.export model.json.
    model: PathBuf,
    /// Write the output here instead of stdout.
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// What to write.
    #[arg(long, value_enum, default_value = "stablehlo")]
    emit: EmitKind,
    /// Print how long import, each pass and emission took, to stderr.
    #[arg(long)]
    timing: bool,
    #[command(flatten)]
    passes: PassRunArgs,
}

#[derive(Args)]
struct OptArgs {
    /// The program: a .pt2 archive, a torch.export model.json, or tpuc IR text (.tpuc).
    model: PathBuf,
    /// Write the output here instead of stdout.
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// What to write.
    #[arg(long, value_enum, default_value = "ir")]
    emit: EmitKind,
    #[command(flatten)]
    passes: PassRunArgs,
}

/// How `lower` and `opt` run the pass pipeline.
#[derive(Args)]
struct PassRunArgs {
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
    fn lower(&self, model: &std::path::Path, emit: EmitKind) -> Result<tpuc_driver::Lowered, Failure> {
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

/// The text a lowering produced: StableHLO when emitted, else the IR.
fn output_text(lowered: tpuc_driver::Lowered) -> String {
    match lowered.stablehlo {
        Some(s) => s,
        None => tpuc_ir::print_module(&lowered.module),
    }
}

fn main() -> ExitCode {
    // --help and --version succeed; every other command-line error is a usage error and exits
    // 1 like any other user error (clap's own code, 2, is tpuc's internal-error code).
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { 1 } else { 0 });
        }
    };
    init_logging(cli.verbose);
    // A panic is a tpuc bug: report it as an internal error (exit 2), never as a crash trace only.
    let result = std::panic::catch_unwind(|| run(cli));
    match result {
        Ok(Ok(())) => ExitCode::SUCCESS,
        Ok(Err(Failure::User(msg))) => {
            eprintln!("error: {msg}");
            ExitCode::from(1)
        }
        Ok(Err(Failure::Internal(msg))) => {
            eprintln!("internal error: {msg}");
            ExitCode::from(2)
        }
        Err(_) => {
            eprintln!("internal error: tpuc panicked (see the message above); please report it with the input");
            ExitCode::from(2)
        }
    }
}

enum Failure {
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

fn init_logging(verbose: u8) {
    let default = match verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).try_init();
}

fn run(cli: Cli) -> Result<(), Failure> {
    match cli.command {
        Command::Import(a) => {
            let imported = tpuc_driver::import(&a.model)?;
            write_output(a.output.as_deref(), &tpuc_ir::print_module(&imported.module))
        }
        Command::Opt(a) => {
            let lowered = a.passes.lower(&a.model, a.emit)?;
            write_output(a.output.as_deref(), &output_text(lowered))
        }
        Command::Lower(a) => {
            let lowered = a.passes.lower(&a.model, a.emit)?;
            if a.timing {
                let t = &lowered.timings;
                eprintln!("import: {:.3} ms", t.import.as_secs_f64() * 1e3);
                for (p, d) in &t.passes {
                    eprintln!("pass {p}: {:.3} ms", d.as_secs_f64() * 1e3);
                }
                eprintln!("emit: {:.3} ms", t.emit.as_secs_f64() * 1e3);
            }
            write_output(a.output.as_deref(), &output_text(lowered))
        }
        Command::Compile(a) => {
            let mut plan = None;
            let compiled = if is_mlir(&a.model) {
                compile_mlir(&a.model, &read_mlir(&a.model)?, &a.target)?
            } else {
                let imported = tpuc_driver::import(&a.model)?;
                if !imported.module.symbols.is_empty() {
                    return compile_buckets(&a, imported);
                }
                let options = a.pipeline.options(a.inline_weights, a.target.target)?;
                let lowered = tpuc_driver::lower(imported, &options, Emit::StableHlo)?;
                report_passes(&lowered, options.pass_timing);
                let cache = a.target.cache.open();
                plan = lowered.sharding.as_ref().map(tpuc_driver::spmd::ShardPlan::of);
                compile_lowered(&lowered, &a.target, cache.as_ref(), &a.model.display().to_string())?
            };
            if let Some(out) = &a.output {
                std::fs::write(out, &compiled.serialized)
                    .map_err(|e| Failure::User(format!("cannot write {}: {e}", out.display())))?;
            }
            if a.json {
                let mut v = serde_json::to_value(&compiled.summary).map_err(|e| Failure::Internal(e.to_string()))?;
                if let Some(obj) = v.as_object_mut() {
                    if let Some(out) = &a.output {
                        obj.insert("output".into(), serde_json::Value::String(out.display().to_string()));
                    }
                    if let Some(plan) = &plan {
                        obj.insert("sharding".into(), plan.to_json());
                    }
                }
                println!("{v}");
            } else {
                println!("{}", compiled.summary.line());
            }
            Ok(())
        }
        Command::Run(a) => run_model(a),
        Command::Cache(c) => cache_command(c),
        Command::PlanBuckets(a) => plan_buckets(a),
        Command::Plugins => {
            let (lines, usable) = tpuc_driver::exec::plugin_report();
            for line in lines {
                println!("{line}");
            }
            if usable == 0 {
                return Err(Failure::User("no PJRT plugin found: tpuc can lower, but not compile or run".into()));
            }
            Ok(())
        }
    }
}

fn is_mlir(path: &std::path::Path) -> bool {
    path.extension().is_some_and(|e| e == "mlir")
}

fn read_mlir(path: &std::path::Path) -> Result<String, Failure> {
    std::fs::read_to_string(path).map_err(|e| Failure::User(format!("cannot read `{}`: {e}", path.display())))
}

/// StableHLO text from any producer (tpuc lower, JAX, torch_xla), compiled as given (through
/// the cache unless --no-cache).
fn compile_mlir(path: &std::path::Path, text: &str, target: &TargetArgs) -> Result<tpuc_driver::exec::Compiled, Failure> {
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

/// `tpuc compile` of a program with symbolic dims: every bucket of the plan, one table row
/// (or JSON entry) each.
fn compile_buckets(a: &CompileArgs, imported: tpuc_driver::Imported) -> Result<(), Failure> {
    use tpuc_driver::dynamic::bucket_name;
    if a.output.is_some() {
        return Err(Failure::User("-o writes one executable; a program with symbolic dims compiles one per bucket (they go to the cache)".into()));
    }
    let plan = a.buckets.plan_for(&imported.module)?;
    let options = a.pipeline.options(a.inline_weights, a.target.target)?;
    let cache = a.target.cache.open();
    let combos = bucket_combinations(&plan);
    let serves = |name: &str, b: i64| -> (i64, i64) {
        let p = plan.symbol(name).expect("planned symbol");
        let i = p.buckets.iter().position(|&x| x == b).unwrap_or(0);
        (if i == 0 { p.min } else { p.buckets[i - 1] + 1 }, b)
    };
    // Lower and compile the buckets on `jobs` threads; a progress line on a terminal.
    let jobs = a.jobs.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())).clamp(1, combos.len().max(1));
    let next = std::sync::atomic::AtomicUsize::new(0);
    let done = std::sync::atomic::AtomicUsize::new(0);
    let slots: Vec<std::sync::Mutex<Option<Result<tpuc_driver::exec::Compiled, Failure>>>> =
        combos.iter().map(|_| std::sync::Mutex::new(None)).collect();
    let progress = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let started = std::time::Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..jobs {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(bucket) = combos.get(i) else { break };
                let result = (|| {
                    let bl = tpuc_driver::lower_bucket(&imported.module, &imported.weights, bucket, &options, Emit::StableHlo)?;
                    report_passes(&bl.lowered, options.pass_timing);
                    let label = format!("{} [{}]", a.model.display(), bucket_name(bucket));
                    compile_lowered(&bl.lowered, &a.target, cache.as_ref(), &label)
                })();
                *slots[i].lock().unwrap_or_else(|e| e.into_inner()) = Some(result);
                let k = done.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                if progress {
                    eprint!("\rcompiled {k}/{} buckets", combos.len());
                }
            });
        }
    });
    if progress {
        eprintln!();
    }
    let mut rows = Vec::new();
    let mut entries = Vec::new();
    for (bucket, slot) in combos.iter().zip(slots) {
        let compiled = slot.into_inner().unwrap_or_else(|e| e.into_inner()).expect("every bucket ran")?;
        let name = bucket_name(bucket);
        let sm = &compiled.summary;
        let range: Vec<String> = bucket.iter().map(|(k, &b)| {
            let (lo, hi) = serves(k, b);
            format!("{k} {lo}..{hi}")
        }).collect();
        rows.push(vec![
            name.clone(),
            range.join(", "),
            format!("{:.3}", sm.compile_seconds),
            sm.executable_bytes.to_string(),
            sm.cache.to_string(),
        ]);
        let mut v = serde_json::to_value(sm).map_err(|e| Failure::Internal(e.to_string()))?;
        if let Some(o) = v.as_object_mut() {
            o.insert("sizes".into(), serde_json::to_value(bucket).map_err(|e| Failure::Internal(e.to_string()))?);
            let sv: BTreeMapJson = bucket.keys().map(|k| (k.clone(), serves(k, bucket[k]))).collect();
            o.insert("serves".into(), serde_json::to_value(sv).map_err(|e| Failure::Internal(e.to_string()))?);
        }
        entries.push(v);
    }
    if a.json {
        println!("{}", serde_json::json!({ "buckets": entries }));
        return Ok(());
    }
    let head = ["bucket", "serves", "compile s", "bytes", "cache"];
    let widths: Vec<usize> = (0..head.len()).map(|i| rows.iter().map(|r| r[i].len()).max().unwrap_or(0).max(head[i].len())).collect();
    let line = |cells: &[String]| cells.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect::<Vec<_>>().join("  ").trim_end().to_string();
    println!("{}", line(&head.map(String::from)));
    for r in &rows {
        println!("{}", line(r));
    }
    let total: f64 = entries.iter().filter_map(|e| e["compile_seconds"].as_f64()).sum();
    println!("{} bucket(s): {total:.3} s of compiling on {jobs} thread(s), {:.3} s wall", rows.len(), started.elapsed().as_secs_f64());
    Ok(())
}

type BTreeMapJson = std::collections::BTreeMap<String, (i64, i64)>;

/// Every combination of the symbols' buckets, the first symbol outermost.
fn bucket_combinations(plan: &tpuc_driver::buckets::BucketPlan) -> Vec<tpuc_driver::dynamic::Sizes> {
    let mut combos = vec![tpuc_driver::dynamic::Sizes::new()];
    for p in &plan.symbols {
        combos = combos
            .into_iter()
            .flat_map(|c| {
                p.buckets.iter().map(move |&b| {
                    let mut c = c.clone();
                    c.insert(p.name.clone(), b);
                    c
                })
            })
            .collect();
    }
    combos
}

/// Prints the passes' notes (`note: ...`) and, if asked, the pass timing table to stderr.
fn report_passes(lowered: &tpuc_driver::Lowered, pass_timing: bool) {
    for n in &lowered.notes {
        eprintln!("note: {n}");
    }
    if pass_timing {
        eprint!("{}", lowered.timings.pass_table());
    }
}

fn run_model(a: RunArgs) -> Result<(), Failure> {
    use tpuc_driver::dynamic;
    use tpuc_driver::tensor::HostTensor;
    let mut inputs = Vec::with_capacity(a.inputs.len());
    for p in &a.inputs {
        let t = HostTensor::read_npy(p).map_err(|e| Failure::User(e.to_string()))?;
        inputs.push((p.display().to_string(), t));
    }
    let mut times = Vec::new();
    if is_mlir(&a.model) {
        let text = read_mlir(&a.model)?;
        let (partitions, replicas) = tpuc_driver::signature::module_counts(&text);
        let devices = partitions.unwrap_or(1).max(1) * replicas.unwrap_or(1).max(1);
        // An sdy-sharded module runs over its mesh. Results the producer left unannotated are
        // marked replicated first, so they come back whole; the others are joined from blocks.
        let text = match tpuc_driver::signature::sdy_mesh_name(&text) {
            Some(mesh) if devices > 1 => tpuc_driver::signature::with_replicated_results(&text, mesh).unwrap_or(text),
            _ => text,
        };
        let sig = tpuc_driver::signature::main_signature(&text)
            .map_err(|e| Failure::User(format!("{}: {e}", a.model.display())))?;
        // Other multi-device modules (per replica, or partitioned without a Shardy mesh) are not
        // fed by run.
        let sharding = sig.mesh_sharding().filter(|sh| devices > 1 && replicas.unwrap_or(1) <= 1 && tpuc_driver::spmd::device_count(sh) == devices);
        if devices > 1 && sharding.is_none() {
            return Err(Failure::User(format!(
                "{}: the module spans {devices} devices (mhlo.num_partitions / num_replicas) without a Shardy mesh of that size; run takes single-device or sdy-sharded modules, compile takes this one",
                a.model.display()
            )));
        }
        let compiled = compile_mlir(&a.model, &text, &a.target)?;
        if let Some(sh) = &sharding {
            let runner = tpuc_driver::spmd::ShardedRunner::from_signature(&compiled, &sig, sh).map_err(DriverError::from)?;
            let outputs = runner.run(&inputs).map_err(DriverError::from)?;
            return finish_run(&a, &outputs, None, None, compiled.summary.cache);
        }
        tracing::info!("{}", compiled.summary.line());
        let runner = tpuc_driver::exec::Runner::from_signature(&compiled, &sig).map_err(DriverError::from)?;
        let (outputs, _) = runner.run(&inputs).map_err(DriverError::from)?;
        for _ in 1..a.repeat.max(1) {
            times.push(runner.run(&inputs).map_err(DriverError::from)?.1);
        }
        return finish_run(&a, &outputs, Timing::of(&times), None, compiled.summary.cache);
    }
    let imported = tpuc_driver::import(&a.model)?;
    if dynamic::append_seed(&imported.module, &mut inputs, a.seed) {
        tracing::info!("random ops seeded with --seed {}", a.seed);
    }
    let options = a.pipeline.options(false, a.target.target)?;
    let cache = a.target.cache.open();
    let label = a.model.display().to_string();
    let (outputs, bucket, source) = if imported.module.symbols.is_empty() {
        let lowered = tpuc_driver::lower(imported, &options, Emit::StableHlo)?;
        report_passes(&lowered, options.pass_timing);
        let compiled = compile_lowered(&lowered, &a.target, cache.as_ref(), &label)?;
        tracing::info!("{}", compiled.summary.line());
        if let Some(r) = &lowered.ranks {
            if a.repeat > 1 {
                return Err(Failure::User("--repeat times single-program runs; not --ranks".into()));
            }
            let runner = tpuc_driver::spmd::RankRunner::new(&compiled, &lowered.module, &lowered.weights, r.count).map_err(DriverError::from)?;
            let outputs = runner.run(&inputs).map_err(DriverError::from)?;
            return finish_run(&a, &outputs, None, None, compiled.summary.cache);
        }
        if let Some(sh) = &lowered.sharding {
            let runner = tpuc_driver::spmd::ShardedRunner::new(&compiled, &lowered.module, &lowered.weights, sh).map_err(DriverError::from)?;
            let outputs = runner.run(&inputs).map_err(DriverError::from)?;
            if a.repeat > 1 {
                // Whole calls (split, upload, execute on every device, download).
                let mut us = Vec::with_capacity(a.repeat - 1);
                for _ in 1..a.repeat {
                    let t = std::time::Instant::now();
                    runner.run(&inputs).map_err(DriverError::from)?;
                    us.push(t.elapsed().as_secs_f64() * 1e6);
                }
                us.sort_by(f64::total_cmp);
                let timing = Timing { runs: us.len(), devices: Some(tpuc_driver::spmd::device_count(sh)), median_us: vec![("total", us[us.len() / 2])] };
                return finish_run(&a, &outputs, Some(timing), None, compiled.summary.cache);
            }
            return finish_run(&a, &outputs, None, None, compiled.summary.cache);
        }
        let runner = tpuc_driver::exec::Runner::new(&compiled, &lowered.module, &lowered.weights).map_err(DriverError::from)?;
        let (outputs, _) = runner.run(&inputs).map_err(DriverError::from)?;
        for _ in 1..a.repeat.max(1) {
            times.push(runner.run(&inputs).map_err(DriverError::from)?.1);
        }
        (outputs, None, compiled.summary.cache)
    } else {
        if options.ranks.is_some() {
            // Per-rank inputs stack the ranks in a leading dim, which the program's symbols
            // do not describe; torch.compile's run_ranks buckets per-rank programs instead.
            return Err(Failure::User(format!(
                "{}: --ranks runs programs with static shapes; this one has symbolic dims ({}): export it with static shapes",
                a.model.display(),
                imported.module.symbols.iter().map(|s| s.name.to_string()).collect::<Vec<_>>().join(", ")
            )));
        }
        let plan = a.buckets.plan_for(&imported.module)?;
        let shapes: Vec<Vec<i64>> = inputs.iter().map(|(_, t)| t.dims.clone()).collect();
        let sizes = dynamic::infer_sizes(&imported.module, &shapes).map_err(DriverError::from)?;
        let bucket = dynamic::select_bucket(&plan, &sizes).map_err(DriverError::from)?;
        let bl = tpuc_driver::lower_bucket(&imported.module, &imported.weights, &bucket, &options, Emit::StableHlo)?;
        report_passes(&bl.lowered, options.pass_timing);
        let name = dynamic::bucket_name(&bucket);
        let compiled = compile_lowered(&bl.lowered, &a.target, cache.as_ref(), &format!("{label} [{name}]"))?;
        tracing::info!("bucket {name}: {}", compiled.summary.line());
        let module = &bl.lowered.module;
        let types = dynamic::user_input_types(module);
        if types.len() != inputs.len() {
            return Err(Failure::User(format!("the program takes {} input(s), got {}", types.len(), inputs.len())));
        }
        let mut padded = Vec::with_capacity(inputs.len() + bl.size_args.len());
        for ((src, t), (_, ty)) in inputs.iter().zip(&types) {
            padded.push((src.clone(), dynamic::pad_input(t, &ty.static_dims().unwrap_or_default(), a.pad_fill)));
        }
        for (sym, _) in &bl.size_args {
            let n = sizes[sym];
            padded.push((format!("the size of `{sym}`"), HostTensor { dtype: tpuc_ir::DType::I64, dims: vec![], bytes: n.to_le_bytes().to_vec() }));
        }
        // Under a mesh the bucket is an SPMD program: the padded inputs are split over the
        // devices and the real sizes ride along replicated.
        let outs = if let Some(sh) = &bl.lowered.sharding {
            if a.repeat > 1 {
                return Err(Failure::User("--repeat times single-device runs; not a --mesh bucket".into()));
            }
            let runner = tpuc_driver::spmd::ShardedRunner::new(&compiled, module, &bl.lowered.weights, sh).map_err(DriverError::from)?;
            runner.run(&padded).map_err(DriverError::from)?
        } else {
            let runner = tpuc_driver::exec::Runner::new(&compiled, module, &bl.lowered.weights).map_err(DriverError::from)?;
            let (outs, _) = runner.run(&padded).map_err(DriverError::from)?;
            for _ in 1..a.repeat.max(1) {
                times.push(runner.run(&padded).map_err(DriverError::from)?.1);
            }
            outs
        };
        let outputs = outs
            .iter()
            .zip(&bl.result_layouts)
            .map(|(o, l)| dynamic::unpad(o, l, &sizes))
            .collect::<Result<Vec<_>, _>>()
            .map_err(DriverError::from)?;
        (outputs, Some(bucket), compiled.summary.cache)
    };
    finish_run(&a, &outputs, Timing::of(&times), bucket, source)
}

/// The end of `tpuc run`: the timing line (with --repeat), the outputs as the flags say, and
/// the JSON summary.
/// `run --repeat N`: the median of the timed runs (all but the first), per step, in µs.
struct Timing {
    runs: usize,
    /// A --mesh program: the devices one call ran on (only `total` is timed).
    devices: Option<i64>,
    /// (step, µs): `total`, and for a single-device program `check` (input checks), `upload`,
    /// `execute`, `download`.
    median_us: Vec<(&'static str, f64)>,
}

impl Timing {
    fn of(times: &[tpuc_driver::exec::RunTimes]) -> Option<Timing> {
        if times.is_empty() {
            return None;
        }
        let median = |f: &dyn Fn(&tpuc_driver::exec::RunTimes) -> std::time::Duration| {
            let mut v: Vec<f64> = times.iter().map(|t| f(t).as_secs_f64() * 1e6).collect();
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        Some(Timing {
            runs: times.len(),
            devices: None,
            median_us: vec![
                ("total", median(&|t| t.total())),
                ("check", median(&|t| t.check)),
                ("upload", median(&|t| t.upload)),
                ("execute", median(&|t| t.execute)),
                ("download", median(&|t| t.download)),
            ],
        })
    }

    /// `median of 9 runs: total 151.20 µs (check 1.10, upload 10.30, execute 123.40, download 16.40)`.
    fn line(&self) -> String {
        let (total, rest) = self.median_us.split_first().expect("a total");
        let parts: Vec<String> = rest.iter().map(|(k, v)| format!("{k} {v:.2}")).collect();
        let on = self.devices.map(|d| format!(" on {d} devices")).unwrap_or_default();
        let detail = if parts.is_empty() { String::new() } else { format!(" ({})", parts.join(", ")) };
        format!("median of {} runs{on}: {} {:.2} µs{detail}", self.runs, total.0, total.1)
    }
}

fn finish_run(
    a: &RunArgs,
    outputs: &[tpuc_driver::tensor::HostTensor],
    timing: Option<Timing>,
    bucket: Option<tpuc_driver::dynamic::Sizes>,
    source: &str,
) -> Result<(), Failure> {
    if let (Some(t), false) = (&timing, a.json) {
        println!("{}", t.line());
    }
    let result = report_outputs(a, outputs);
    if a.json {
        let mut v = serde_json::json!({
            "bucket": bucket,
            "cache": source,
            "outputs": outputs.iter().map(|t| t.dims.clone()).collect::<Vec<_>>(),
            "ok": result.is_ok(),
        });
        if let Some(t) = timing {
            let median: serde_json::Map<String, serde_json::Value> =
                t.median_us.iter().map(|(k, us)| (k.to_string(), serde_json::json!((us * 100.0).round() / 100.0))).collect();
            v["runs"] = t.runs.into();
            v["median_us"] = median.into();
            if let Some(d) = t.devices {
                v["devices"] = d.into();
            }
        }
        println!("{v}");
    }
    result
}

/// Writes, compares or prints the outputs as `run`'s flags say.
fn report_outputs(a: &RunArgs, outputs: &[tpuc_driver::tensor::HostTensor]) -> Result<(), Failure> {
    use tpuc_driver::tensor::{compare, HostTensor};
    if let Some(dir) = &a.out_dir {
        std::fs::create_dir_all(dir).map_err(|e| Failure::User(format!("cannot create {}: {e}", dir.display())))?;
        for (i, t) in outputs.iter().enumerate() {
            let p = dir.join(format!("output_{i}.npy"));
            t.write_npy(&p).map_err(|e| Failure::User(format!("cannot write {}: {e}", p.display())))?;
        }
    }
    let mut failed = false;
    if !a.expect.is_empty() && a.expect.len() != outputs.len() {
        return Err(Failure::User(format!("{} expected file(s) given for {} output(s)", a.expect.len(), outputs.len())));
    }
    for (i, (got, path)) in outputs.iter().zip(&a.expect).enumerate() {
        let want = HostTensor::read_npy(path).map_err(|e| Failure::User(e.to_string()))?;
        match compare(got, &want, a.rtol, a.atol) {
            Err(e) => {
                failed = true;
                println!("output {i}: MISMATCH vs {}: {e}", path.display());
            }
            Ok(c) if c.mismatches > 0 => {
                failed = true;
                let (idx, g, w) = c.first_mismatch.unwrap_or_default();
                println!(
                    "output {i}: MISMATCH vs {}: {} of {} elements differ (max abs {:.3e}, max rel {:.3e}; first at {idx}: got {g}, expected {w})",
                    path.display(),
                    c.mismatches,
                    got.num_elements(),
                    c.max_abs_err,
                    c.max_rel_err
                );
            }
            Ok(c) => println!("output {i}: ok (max abs {:.3e}, max rel {:.3e})", c.max_abs_err, c.max_rel_err),
        }
    }
    if a.expect.is_empty() && a.out_dir.is_none() {
        for (i, t) in outputs.iter().enumerate() {
            println!("output {i}: {}", t.ty());
        }
    }
    if failed {
        return Err(Failure::User(format!("outputs differ from the expected values (rtol {}, atol {})", a.rtol, a.atol)));
    }
    Ok(())
}

fn write_output(path: Option<&std::path::Path>, text: &str) -> Result<(), Failure> {
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

fn cache_command(c: CacheCommand) -> Result<(), Failure> {
    let open = |args: &CacheLocation| args.open();
    let tier = |n: Option<u32>| n.and_then(tpuc_cache::Tier::from_number);
    match c {
        CacheCommand::Stats(a) => {
            let r = open(&a.cache).stats();
            let show = |label: &str, s: &tpuc_cache::Stats| {
                println!("{label}: {} compiles ({} ms)", s.compiles, s.compile_ms);
                for (name, t) in [("memory", &s.memory), ("shm", &s.shm), ("remote", &s.remote)] {
                    println!(
                        "  {name:<6} hits {:>6}  misses {:>6}  corrupt {:>4}  errors {:>4}  read {:>12} B  written {:>12} B  saved {:>8} ms",
                        t.hits, t.misses, t.corrupt, t.errors, t.bytes_read, t.bytes_written, t.saved_ms
                    );
                }
            };
            match &r.host {
                Some(h) => show("host (all processes using this tier-2 cache)", h),
                None => println!("no host totals: tier 2 is off (set TPUC_CACHE_TIER2 or --cache-tier2)"),
            }
            for t in &r.tiers {
                let size = match (t.entries, t.bytes) {
                    (Some(e), Some(b)) => format!(", {e} entries, {b} B"),
                    _ => String::new(),
                };
                let budget = t.budget.map_or(String::new(), |b| format!(", budget {b} B"));
                println!("tier {} {}: {}{size}{budget}", t.tier as u32, if t.enabled { "on" } else { "off" }, t.detail);
            }
            Ok(())
        }
        CacheCommand::Ls(a) => {
            let l = open(&a.cache).list(tier(a.tier));
            for e in &l.entries {
                let label = e.manifest.as_ref().map_or(String::new(), |m| {
                    format!(" {} {} {} {}", m.components.label, m.components.target, m.components.topology, m.components.compile_options)
                });
                let problem = e.problem.as_ref().map_or(String::new(), |p| format!(" PROBLEM: {p}"));
                println!("tier {} {} {:>10} B{label}{problem}", e.tier as u32, e.key, e.size);
            }
            for (t, err) in &l.errors {
                eprintln!("warning: cannot list tier {}: {err}", *t as u32);
            }
            Ok(())
        }
        CacheCommand::Clear(a) => {
            let n = open(&a.cache).clear(tier(a.tier)).map_err(|e| Failure::User(e.to_string()))?;
            println!("removed {n} entries");
            Ok(())
        }
        CacheCommand::Evict(a) => {
            let r = open(&a.cache).evict().map_err(|e| Failure::User(e.to_string()))?;
            println!("{r:?}");
            Ok(())
        }
        CacheCommand::Explain(a) => {
            let options = a.pipeline.options(a.inline_weights, a.target.target)?;
            let imported = tpuc_driver::import(&a.model)?;
            let cache = open(&a.target.cache.location);
            if imported.module.symbols.is_empty() {
                let lowered = tpuc_driver::lower(imported, &options, Emit::StableHlo)?;
                report_passes(&lowered, options.pass_timing);
                let label = a.model.display().to_string();
                let kc = tpuc_driver::exec::key_components(&lowered.key_program()?, &a.target.request_for(&lowered)?, lowered.provenance(&label))
                    .map_err(DriverError::from)?;
                print!("{}", cache.explain(&kc));
                return Ok(());
            }
            // One explanation per bucket of the plan, as `compile` would key them.
            let plan = a.buckets.plan_for(&imported.module)?;
            for bucket in bucket_combinations(&plan) {
                let name = tpuc_driver::dynamic::bucket_name(&bucket);
                let bl = tpuc_driver::lower_bucket(&imported.module, &imported.weights, &bucket, &options, Emit::StableHlo)?;
                let label = format!("{} [{name}]", a.model.display());
                let kc = tpuc_driver::exec::key_components(&bl.lowered.key_program()?, &a.target.request(), label.as_str().into())
                    .map_err(DriverError::from)?;
                println!("bucket {name}:");
                for line in cache.explain(&kc).to_string().lines() {
                    println!("  {line}");
                }
            }
            Ok(())
        }
    }
}

/// `NAME=VALUE` where NAME is a symbol name; `None` when the text has no such prefix.
fn named(text: &str) -> Option<(&str, &str)> {
    let (name, value) = text.split_once('=')?;
    let ident = name.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    ident.then_some((name, value))
}

/// `NAME=LO..HI` (HI may be empty: unbounded).
fn parse_range(text: &str) -> Result<tpuc_driver::buckets::SymbolRange, Failure> {
    let bad = || Failure::User(format!("bad --range `{text}`: expected NAME=LO..HI, e.g. seq=1..2048"));
    let (name, range) = named(text).ok_or_else(bad)?;
    let (lo, hi) = range.split_once("..").ok_or_else(bad)?;
    let lo: i64 = lo.trim().parse().map_err(|_| bad())?;
    let hi = match hi.trim() {
        "" => None,
        h => Some(h.parse::<i64>().map_err(|_| bad())?),
    };
    Ok(tpuc_driver::buckets::SymbolRange::new(name, lo, hi))
}

fn plan_buckets(a: PlanBucketsArgs) -> Result<(), Failure> {
    use tpuc_driver::buckets::SymbolRange;
    let ranges: Vec<SymbolRange> = match (&a.model, a.ranges.is_empty()) {
        (Some(_), false) => return Err(Failure::User("give MODEL or --range, not both".to_string())),
        (None, true) => return Err(Failure::User("give MODEL, or the symbols with --range NAME=LO..HI".to_string())),
        (Some(model), true) => {
            let imported = tpuc_driver::import(model)?;
            imported.module.symbols.iter().map(|s| SymbolRange::new(&*s.name, s.min, s.max)).collect()
        }
        (None, false) => a.ranges.iter().map(|r| parse_range(r)).collect::<Result<_, _>>()?,
    };
    let plan = a.buckets.plan(ranges)?;
    if a.json {
        let v = serde_json::to_value(&plan).map_err(|e| Failure::Internal(e.to_string()))?;
        return write_output(None, &format!("{v}\n"));
    }
    write_output(None, &bucket_table(&plan))
}

impl BucketArgs {
    /// The bucket plan of the program's symbols.
    fn plan_for(&self, module: &tpuc_ir::Module) -> Result<tpuc_driver::buckets::BucketPlan, Failure> {
        use tpuc_driver::buckets::SymbolRange;
        self.plan(module.symbols.iter().map(|s| SymbolRange::new(&*s.name, s.min, s.max)).collect())
    }

    fn plan(&self, mut ranges: Vec<tpuc_driver::buckets::SymbolRange>) -> Result<tpuc_driver::buckets::BucketPlan, Failure> {
        use tpuc_driver::buckets::{self, BucketPolicy, SymbolRange};
        let a = self;
        let known = |ranges: &[SymbolRange], name: &str, flag: &str| -> Result<usize, Failure> {
            ranges.iter().position(|r| r.name == name).ok_or_else(|| {
                let names: Vec<&str> = ranges.iter().map(|r| r.name.as_str()).collect();
                let names = if names.is_empty() { "none".to_string() } else { names.join(", ") };
                Failure::User(format!("{flag} names symbol `{name}`, which the program does not have (its symbols: {names})"))
            })
        };
        for (i, r) in ranges.iter().enumerate() {
            if ranges[..i].iter().any(|q| q.name == r.name) {
                return Err(Failure::User(format!("symbol `{}` is given twice", r.name)));
            }
        }
        for m in &a.max_size {
            let bad = || Failure::User(format!("bad --max-size `{m}`: expected NAME=N, e.g. s0=2048"));
            let (name, value) = named(m).ok_or_else(bad)?;
            let value: i64 = value.trim().parse().map_err(|_| bad())?;
            let i = known(&ranges, name, "--max-size")?;
            ranges[i].hi = Some(ranges[i].hi.map_or(value, |h| h.min(value)));
        }
        // The policy for all symbols, then per-symbol ones.
        let mut default = None;
        let mut policies: Vec<Option<BucketPolicy>> = vec![None; ranges.len()];
        let specs = a.buckets.iter().map(|b| (b.clone(), "--buckets")).chain(a.hist.iter().map(|h| match named(h) {
            Some((name, file)) => (format!("{name}=hist:{file}"), "--hist"),
            None => (format!("hist:{h}"), "--hist"),
        }));
        for (spec, flag) in specs {
            let (slot, text) = match named(&spec) {
                Some((name, text)) => (Some(known(&ranges, name, flag)?), text),
                None => (None, spec.as_str()),
            };
            let policy: BucketPolicy = text.parse().map_err(|e: buckets::BucketError| Failure::User(e.to_string()))?;
            let target = match slot {
                Some(i) => &mut policies[i],
                None => &mut default,
            };
            if target.is_some() {
                let whom = slot.map_or("all symbols".to_string(), |i| format!("symbol `{}`", ranges[i].name));
                return Err(Failure::User(format!("two bucket policies for {whom}")));
            }
            *target = Some(policy);
        }
        let default = default.unwrap_or_default();
        let symbols: Vec<(SymbolRange, BucketPolicy)> =
            ranges.into_iter().zip(policies).map(|(r, p)| (r, p.unwrap_or_else(|| default.clone()))).collect();
        buckets::plan(&symbols, a.max_buckets, a.max_total).map_err(|e| Failure::User(e.to_string()))
    }
}

/// The plan as an aligned table, then the combinations and notes.
fn bucket_table(plan: &tpuc_driver::buckets::BucketPlan) -> String {
    use std::fmt::Write as _;
    let pct = |x: f64| format!("{:.1}%", x * 100.0);
    let mut rows = vec![["symbol", "range", "policy", "count", ">=128", "worst", "worst>256", "mean", "tokens", "buckets"].map(String::from)];
    for s in &plan.symbols {
        let w = &s.waste;
        rows.push([
            s.name.clone(),
            format!("{}..{}", s.min, s.max),
            s.policy.clone(),
            s.buckets.len().to_string(),
            s.large_buckets.to_string(),
            pct(w.worst),
            w.worst_above_256.map_or("-".to_string(), pct),
            pct(w.mean),
            pct(w.tokens),
            s.buckets.iter().map(|b| b.to_string()).collect::<Vec<_>>().join(","),
        ]);
    }
    let mut widths = [0usize; 10];
    for r in &rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut out = String::new();
    if plan.symbols.is_empty() {
        out.push_str("no symbolic dimensions: one compile\n");
    } else {
        for r in &rows {
            let line: Vec<String> = r.iter().zip(widths).map(|(c, w)| format!("{c:<w$}")).collect();
            let _ = writeln!(out, "{}", line.join("  ").trim_end());
        }
        for s in &plan.symbols {
            if let Some(h) = &s.hist_waste {
                let _ = writeln!(
                    out,
                    "{} under its histogram: worst {}, mean {}, tokens {}",
                    s.name,
                    pct(h.worst),
                    pct(h.mean),
                    pct(h.tokens)
                );
            }
        }
        let _ = writeln!(
            out,
            "waste = (bucket - size) / bucket for sizes uniform over the range: worst case, worst above 256, mean; \
             tokens = padding / all padded elements"
        );
    }
    let _ = writeln!(out, "bucket combinations: {} (--max-total {})", plan.combinations, plan.max_total);
    for n in &plan.notes {
        let _ = writeln!(out, "note: {n}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_well_formed() {
        Cli::command().debug_assert();
    }

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
