//! `tpuc plan-buckets`: the bucket plan of a program's symbolic dims (or of `--range` symbols)
//! as a table or JSON, without compiling.

use clap::Args;
use std::path::PathBuf;

use crate::buckets::{bucket_combinations, BucketArgs};
use crate::common::{named, write_output, Failure};

#[derive(Args)]
#[command(after_help = "Policies: auto (powers of two below 128, then 128 x {1,2,3,4,6,8,12,16,24,...}), \
    linear:K (multiples of K), a list 128,256,512 (must reach the maximum), hist:FILE[:N] (the buckets \
    minimising expected padding under a JSON histogram {\"size\": count}). Every plan ends at the \
    symbol's maximum.\n\nExamples:\n  tpuc plan-buckets model.pt2\n  tpuc plan-buckets --range seq=1..2048 \
    --range batch=1..64 --buckets seq=linear:128 --max-buckets 16 --json\n  tpuc plan-buckets model.pt2 \
    --max-size s0=4096 --hist s0=lengths.json")]
pub struct PlanBucketsArgs {
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

pub fn run(a: PlanBucketsArgs) -> Result<(), Failure> {
    use tpuc_driver::buckets::SymbolRange;
    if a.buckets.off()? {
        return write_output(None, "buckets off: one compile per input shape (tpuc run --buckets off)\n");
    }
    let mut module = None;
    let ranges: Vec<SymbolRange> = match (&a.model, a.ranges.is_empty()) {
        (Some(_), false) => return Err(Failure::User("give MODEL or --range, not both".to_string())),
        (None, true) => return Err(Failure::User("give MODEL, or the symbols with --range NAME=LO..HI".to_string())),
        (Some(model), true) => {
            let imported = tpuc_driver::import(model)?;
            let ranges = imported.module.symbols.iter().map(|s| SymbolRange::new(&*s.name, s.min, s.max)).collect();
            module = Some(imported.module);
            ranges
        }
        (None, false) => a.ranges.iter().map(|r| parse_range(r)).collect::<Result<_, _>>()?,
    };
    let plan = a.buckets.plan(ranges)?;
    // A plan is only worth printing for a program that buckets: every bucket is specialized
    // (no compile), and the first that fails is the answer, naming the op and its node.
    if let (Some(model), Some(m)) = (&a.model, &module) {
        for bucket in bucket_combinations(&plan) {
            if let Err(e) = tpuc_driver::check_bucket(m, &bucket) {
                return Err(Failure::User(format!(
                    "{} cannot be bucketed (bucket {}): {e}; run it with --buckets off (one compile per shape) or export it with static shapes",
                    model.display(),
                    tpuc_driver::dynamic::bucket_name(&bucket)
                )));
            }
        }
    }
    if a.json {
        let v = serde_json::to_value(&plan).map_err(|e| Failure::Internal(e.to_string()))?;
        return write_output(None, &format!("{v}\n"));
    }
    write_output(None, &bucket_table(&plan))
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
