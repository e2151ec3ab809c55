//! `tpuc cache`: stats, ls, clear, evict and explain over the compilation cache.

use clap::{Args, Subcommand};
use std::path::PathBuf;
use tpuc_driver::{DriverError, Emit};

use crate::args::{CacheLocation, PipelineArgs, TargetArgs};
use crate::buckets::{bucket_combinations, BucketArgs};
use crate::common::{report_passes, Failure};

#[derive(Subcommand)]
pub enum CacheCommand {
    /// Hits and misses per tier, bytes, and compile time saved. Tier 2 is shared by every process
    /// on the host that uses it, whatever its project: the totals are the host's, and a last line
    /// gives the share of the entries compiled in the current directory (or below it).
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
pub struct CacheOnly {
    #[command(flatten)]
    cache: CacheLocation,
}

#[derive(Args)]
pub struct CacheTier {
    /// Only this tier: 1 memory, 2 host shared memory, 3 remote.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=3))]
    tier: Option<u32>,
    #[command(flatten)]
    cache: CacheLocation,
}

#[derive(Args)]
pub struct ExplainArgs {
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

pub fn run(c: CacheCommand) -> Result<(), Failure> {
    let open = |args: &CacheLocation| args.open();
    let tier = |n: Option<u32>| n.and_then(tpuc_cache::Tier::from_number);
    match c {
        CacheCommand::Stats(a) => {
            let cache = open(&a.cache);
            let r = cache.stats();
            let tier2 = cache.tier2_source().as_str();
            let show = |label: &str, s: &tpuc_cache::Stats| {
                println!("{label}: {} compiles ({} ms)", s.compiles, s.compile_ms);
                for (name, t) in [("memory", &s.memory), (tier2, &s.tier2), ("remote", &s.remote)] {
                    println!(
                        "  {name:<6} hits {:>6}  misses {:>6}  corrupt {:>4}  errors {:>4}  read {:>12} B  written {:>12} B  saved {:>8} ms",
                        t.hits, t.misses, t.corrupt, t.errors, t.bytes_read, t.bytes_written, t.saved_ms
                    );
                }
            };
            match &r.host {
                Some(h) => show("host (all processes using this tier-2 cache)", h),
                None => println!("no host totals: tier 2 is off (the persistent tier is on unless TPUC_CACHE_DISK=0; or set TPUC_CACHE_TIER2 or --cache-tier2)"),
            }
            for t in &r.tiers {
                let size = match (t.entries, t.bytes) {
                    (Some(e), Some(b)) => format!(", {e} entries, {b} B"),
                    _ => String::new(),
                };
                let budget = t.budget.map_or(String::new(), |b| format!(", budget {b} B"));
                println!("tier {} {}: {}{size}{budget}", t.tier as u32, if t.enabled { "on" } else { "off" }, t.detail);
            }
            if let (Some(share), Ok(here)) = (cache.tier2_share_here(), std::env::current_dir()) {
                let mut line = format!(
                    "tier 2 share of {}: {} entries, {} B; elsewhere on this host: {} entries, {} B",
                    here.display(),
                    share.entries,
                    share.bytes,
                    share.other_entries,
                    share.other_bytes
                );
                if share.unknown_entries > 0 {
                    line += &format!("; from older releases (no directory recorded): {} entries, {} B", share.unknown_entries, share.unknown_bytes);
                }
                println!("{line}");
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
