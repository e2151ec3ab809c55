//! `tpuc run`: compile a program (or StableHLO text) and run it on inputs from .npy files, then
//! print, write or check the outputs and time repeated runs.

use clap::Args;
use std::path::PathBuf;
use tpuc_driver::{DriverError, Emit};

use crate::args::{PipelineArgs, TargetArgs};
use crate::buckets::BucketArgs;
use crate::common::{compile_lowered, compile_mlir, is_mlir, read_mlir, report_passes, Failure};

#[derive(Args)]
pub struct RunArgs {
    /// The program: a .pt2 archive, a torch.export model.json, StableHLO text (.mlir) from
    /// any producer (run as given with every argument of its `main` from --inputs), or a
    /// training step exported by `tpuc.train_step(...).export(DIR)` (with --steps).
    pub(crate) model: PathBuf,
    #[command(flatten)]
    pub(crate) target: TargetArgs,
    #[command(flatten)]
    pub(crate) pipeline: PipelineArgs,
    /// The program's user inputs as .npy files, in signature order (weights come from the
    /// archive); for an exported training step, the batch of one step.
    #[arg(long, num_args = 0.., value_name = "NPY")]
    pub(crate) inputs: Vec<PathBuf>,
    /// Replay an exported training step N times: its state stays on the device, each step's
    /// update donated to the next; prints each step's loss and the median ms per step.
    #[arg(long, value_name = "N")]
    steps: Option<usize>,
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
    /// symbolic dims; null with --buckets off), `cache` (where the executable came from), `outputs` (their shapes),
    /// `ok`, `h2d_bytes` and `d2h_bytes` (host <-> device traffic, weights included); with
    /// --repeat also `runs` and `median_us` {total, check, upload, execute, download} (a
    /// --mesh program: `devices` and `median_us.total`). With --steps: `losses`,
    /// `ms_per_step`, `execute_ms` and the traffic per step.
    #[arg(long)]
    pub(crate) json: bool,
    /// Fill the padding of bucketed inputs with this value instead of zeros (nan, inf, -inf
    /// or a number): valid outputs must not change.
    #[arg(long, value_name = "VALUE", hide = true)]
    pad_fill: Option<f64>,
    /// The seed of the program's random ops (dropout, rand, randn, bernoulli, randint, ...): the
    /// same seed gives the same outputs. A program with random ops takes it as its last input,
    /// `tpuc_rng_seed`, filled from this flag unless given with --inputs.
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub(crate) seed: u64,
    #[command(flatten)]
    buckets: BucketArgs,
}

pub fn run(a: RunArgs) -> Result<(), Failure> {
    use tpuc_driver::dynamic;
    use tpuc_driver::tensor::HostTensor;
    a.target.apply();
    let is_step = tpuc_driver::step_export::is_step_export(&a.model);
    match (a.steps, is_step) {
        (Some(n), true) => return super::steps::replay(&a, n),
        (None, true) => return super::steps::replay(&a, 1),
        (Some(_), false) => {
            return Err(Failure::User(format!(
                "--steps replays a training step exported by tpuc.train_step(...).export(DIR); {} is not such a folder",
                a.model.display()
            )))
        }
        (None, false) => {}
    }
    let start = tpuc_driver::session::transfers();
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
            return finish_run(&a, &start, &[], &outputs, None, None, compiled.summary.cache);
        }
        tracing::info!("{}", compiled.summary.line());
        let runner = tpuc_driver::exec::Runner::from_signature(&compiled, &sig).map_err(DriverError::from)?;
        let (outputs, _) = runner.run(&inputs).map_err(DriverError::from)?;
        for _ in 1..a.repeat.max(1) {
            times.push(runner.run(&inputs).map_err(DriverError::from)?.1);
        }
        return finish_run(&a, &start, &[], &outputs, Timing::of(&times), None, compiled.summary.cache);
    }
    let mut imported = tpuc_driver::import(&a.model)?;
    // Statuses eager would raise on (a linalg factorization's), read after the run.
    let checks = imported.checks();
    if dynamic::append_seed(&imported.module, &mut inputs, a.seed) {
        tracing::info!("random ops seeded with --seed {}", a.seed);
    }
    let options = a.pipeline.options(false, a.target.target)?;
    let cache = a.target.cache.open();
    let mut label = a.model.display().to_string();
    // Numbers the graph reads on the host and sizes tensors with (`torch.arange(n.max())`):
    // the program cut down to them runs first, and the whole is compiled at their values.
    if !imported.host_reads.is_empty() {
        let prelude = dynamic::host_read_prelude(&imported).map_err(DriverError::from)?;
        let what = format!("{label} (numbers read on the host)");
        let mut outputs = execute(&a, prelude, &inputs, &options, cache.as_ref(), what.clone(), 1)?.outputs;
        let symbols: Vec<String> = imported.host_reads.iter().map(|r| r.symbol.clone()).collect();
        let mut reads = dynamic::Sizes::new();
        dynamic::take_returned_sizes(&what, &mut outputs, |t| &t.bytes[..], &symbols, &mut reads).map_err(DriverError::from)?;
        imported.module = dynamic::with_sizes(&imported.module, &reads).map_err(DriverError::from)?;
        imported.host_reads.clear();
        imported.source = Default::default();
        tracing::info!("read on the host: {}", dynamic::bucket_name(&reads));
        label = format!("{label} [{}]", dynamic::bucket_name(&reads));
    }
    let ran = execute(&a, imported, &inputs, &options, cache.as_ref(), label, a.repeat)?;
    finish_run(&a, &start, &checks, &ran.outputs, ran.timing, ran.bucket, ran.source)
}

/// What [`execute`] ran: the outputs (cut to their real sizes), the timing of `--repeat`, the
/// bucket of a program with symbolic dims, and where its executable came from.
struct Ran {
    outputs: Vec<tpuc_driver::tensor::HostTensor>,
    timing: Option<Timing>,
    bucket: Option<tpuc_driver::dynamic::Sizes>,
    source: &'static str,
}

/// Lowers, compiles and runs an imported program on `inputs`, `repeat` times: at the inputs'
/// own sizes (`--buckets off`), static, over ranks or a mesh, or padded to a bucket.
fn execute(
    a: &RunArgs,
    mut imported: tpuc_driver::Imported,
    inputs: &[(String, tpuc_driver::tensor::HostTensor)],
    options: &tpuc_driver::LowerOptions,
    cache: Option<&tpuc_driver::exec::Cache>,
    mut label: String,
    repeat: usize,
) -> Result<Ran, Failure> {
    use tpuc_driver::dynamic;
    use tpuc_driver::tensor::HostTensor;
    let mut times = Vec::new();
    // `--buckets off`: the program at the inputs' own sizes, static, one compile per shape
    // (another graph per shape for the cache, as for buckets).
    let data_dependent = dynamic::data_dependent_symbols(&imported.module);
    if a.buckets.off()? && imported.module.symbols.len() > data_dependent.len() {
        let shapes: Vec<Vec<i64>> = inputs.iter().map(|(_, t)| t.dims.clone()).collect();
        let sizes = dynamic::infer_sizes(&imported.module, &shapes).map_err(DriverError::from)?;
        imported.module = dynamic::at_sizes(&imported.module, &sizes).map_err(DriverError::from)?;
        imported.source = Default::default();
        label = format!("{label} [{}]", dynamic::bucket_name(&sizes));
        tracing::info!("buckets off: compiled at {}", dynamic::bucket_name(&sizes));
    }
    let (outputs, bucket, source) = if imported.module.symbols.is_empty() {
        let lowered = tpuc_driver::lower(imported, &options, Emit::StableHlo)?;
        report_passes(&lowered, options.pass_timing);
        let compiled = compile_lowered(&lowered, &a.target, cache, &label)?;
        tracing::info!("{}", compiled.summary.line());
        if let Some(r) = &lowered.ranks {
            if repeat > 1 {
                return Err(Failure::User("--repeat times single-program runs; not --ranks".into()));
            }
            let runner = tpuc_driver::spmd::RankRunner::new(&compiled, &lowered.module, &lowered.weights, r.count).map_err(DriverError::from)?;
            let outputs = runner.run(inputs).map_err(DriverError::from)?;
            return Ok(Ran { outputs, timing: None, bucket: None, source: compiled.summary.cache });
        }
        if let Some(sh) = &lowered.sharding {
            let runner = tpuc_driver::spmd::ShardedRunner::new(&compiled, &lowered.module, &lowered.weights, sh).map_err(DriverError::from)?;
            let outputs = runner.run(inputs).map_err(DriverError::from)?;
            if repeat > 1 {
                // Whole calls (split, upload, execute on every device, download).
                let mut us = Vec::with_capacity(repeat - 1);
                for _ in 1..repeat {
                    let t = std::time::Instant::now();
                    runner.run(inputs).map_err(DriverError::from)?;
                    us.push(t.elapsed().as_secs_f64() * 1e6);
                }
                us.sort_by(f64::total_cmp);
                let timing = Timing { runs: us.len(), devices: Some(tpuc_driver::spmd::device_count(sh)), median_us: vec![("total", us[us.len() / 2])] };
                return Ok(Ran { outputs, timing: Some(timing), bucket: None, source: compiled.summary.cache });
            }
            return Ok(Ran { outputs, timing: None, bucket: None, source: compiled.summary.cache });
        }
        let runner = tpuc_driver::exec::Runner::new(&compiled, &lowered.module, &lowered.weights).map_err(DriverError::from)?;
        let (outputs, _) = runner.run(inputs).map_err(DriverError::from)?;
        for _ in 1..repeat.max(1) {
            times.push(runner.run(inputs).map_err(DriverError::from)?.1);
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
        let mut sizes = dynamic::infer_sizes(&imported.module, &shapes).map_err(DriverError::from)?;
        let bucket = dynamic::select_bucket(&plan, &sizes).map_err(DriverError::from)?;
        let bl = tpuc_driver::lower_bucket(&imported.module, &imported.weights, &bucket, &options, Emit::StableHlo)?;
        report_passes(&bl.lowered, options.pass_timing);
        let name = dynamic::bucket_name(&bucket);
        let compiled = compile_lowered(&bl.lowered, &a.target, cache, &format!("{label} [{name}]"))?;
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
        let mut outs = if let Some(sh) = &bl.lowered.sharding {
            if repeat > 1 {
                return Err(Failure::User("--repeat times single-device runs; not a --mesh bucket".into()));
            }
            let runner = tpuc_driver::spmd::ShardedRunner::new(&compiled, module, &bl.lowered.weights, sh).map_err(DriverError::from)?;
            runner.run(&padded).map_err(DriverError::from)?
        } else {
            let runner = tpuc_driver::exec::Runner::new(&compiled, module, &bl.lowered.weights).map_err(DriverError::from)?;
            let (outs, _) = runner.run(&padded).map_err(DriverError::from)?;
            for _ in 1..repeat.max(1) {
                times.push(runner.run(&padded).map_err(DriverError::from)?.1);
            }
            outs
        };
        dynamic::take_returned_sizes(&label, &mut outs, |t| &t.bytes[..], &bl.size_results, &mut sizes).map_err(DriverError::from)?;
        let outputs = outs
            .iter()
            .zip(&bl.result_layouts)
            .map(|(o, l)| dynamic::unpad(o, l, &sizes))
            .collect::<Result<Vec<_>, _>>()
            .map_err(DriverError::from)?;
        (outputs, Some(bucket), compiled.summary.cache)
    };
    Ok(Ran { outputs, timing: Timing::of(&times), bucket, source })
}

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

/// The end of `tpuc run`: the timing line (with --repeat), the outputs as the flags say, and
/// the JSON summary.
fn finish_run(
    a: &RunArgs,
    start: &tpuc_driver::session::Transfers,
    checks: &[tpuc_driver::checks::HostCheck],
    outputs: &[tpuc_driver::tensor::HostTensor],
    timing: Option<Timing>,
    bucket: Option<tpuc_driver::dynamic::Sizes>,
    source: &str,
) -> Result<(), Failure> {
    if let (Some(t), false) = (&timing, a.json) {
        println!("{}", t.line());
    }
    if let Some(failure) = tpuc_driver::checks::first_failure(checks, outputs) {
        return Err(Failure::User(failure));
    }
    let outputs = &tpuc_driver::checks::without_statuses(checks, outputs);
    let result = report_outputs(a, outputs);
    let moved = tpuc_driver::session::transfers().since(start);
    if a.json {
        let mut v = serde_json::json!({
            "bucket": bucket,
            "cache": source,
            "outputs": outputs.iter().map(|t| t.dims.clone()).collect::<Vec<_>>(),
            "ok": result.is_ok(),
            "h2d_bytes": moved.h2d_bytes,
            "d2h_bytes": moved.d2h_bytes,
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
