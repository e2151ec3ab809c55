//! `tpuc compile`: a program (or StableHLO text) to a serialized XLA executable; a program with
//! symbolic dims to one executable per bucket, compiled on the thread pool.

use clap::Args;
use std::path::PathBuf;
use tpuc_driver::Emit;

use crate::args::{PipelineArgs, TargetArgs};
use crate::buckets::{bucket_combinations, BucketArgs};
use crate::pool;
use crate::common::{compile_lowered, compile_mlir, is_mlir, read_mlir, report_passes, Failure};

#[derive(Args)]
pub struct CompileArgs {
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

pub fn run(a: CompileArgs) -> Result<(), Failure> {
    let mut plan = None;
    let compiled = if is_mlir(&a.model) {
        compile_mlir(&a.model, &read_mlir(&a.model)?, &a.target)?
    } else {
        let imported = tpuc_driver::import(&a.model)?;
        if let Some(e) = imported.host_read_error() {
            return Err(tpuc_driver::DriverError::from(e).into());
        }
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
    let progress = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let started = std::time::Instant::now();
    let results = pool::map(
        &combos,
        jobs,
        |bucket| -> Result<tpuc_driver::exec::Compiled, Failure> {
            let bl = tpuc_driver::lower_bucket(&imported.module, &imported.weights, bucket, &options, Emit::StableHlo)?;
            report_passes(&bl.lowered, options.pass_timing);
            let label = format!("{} [{}]", a.model.display(), bucket_name(bucket));
            compile_lowered(&bl.lowered, &a.target, cache.as_ref(), &label)
        },
        |k| {
            if progress {
                eprint!("\rcompiled {k}/{} buckets", combos.len());
            }
        },
    );
    if progress {
        eprintln!();
    }
    let mut rows = Vec::new();
    let mut entries = Vec::new();
    for (bucket, compiled) in combos.iter().zip(results) {
        let compiled = compiled?;
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
