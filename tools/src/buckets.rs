//! The bucket flags (`--buckets`, `--hist`, `--max-buckets`, `--max-total`, `--max-size`) of
//! `plan-buckets`, `compile`, `run` and `cache explain`, and the plan they make.

use clap::Args;

use crate::common::{named, Failure};

/// How a program with symbolic dims is cut into buckets (`plan-buckets`, `compile`, `run`).
#[derive(Args, Clone, Default)]
pub struct BucketArgs {
    /// The bucket policy: auto, linear:K, a list such as 128,256,512, or hist:FILE[:N];
    /// NAME=POLICY sets one symbol's (repeatable) [default: auto]. `off` (run only): no
    /// buckets, one compile per input shape.
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

impl BucketArgs {
    /// Whether `--buckets off` was given: no buckets, one static program per input shape. It
    /// names no symbol and takes no other bucket flag.
    pub fn off(&self) -> Result<bool, Failure> {
        let is_off = |b: &String| b.trim().eq_ignore_ascii_case("off");
        if !self.buckets.iter().any(is_off) {
            if let Some(b) = self.buckets.iter().find(|b| named(b).is_some_and(|(_, p)| p.trim().eq_ignore_ascii_case("off"))) {
                return Err(Failure::User(format!("bad --buckets `{b}`: `off` turns buckets off for every symbol; give it as --buckets off")));
            }
            return Ok(false);
        }
        if self.buckets.len() > 1 || !self.hist.is_empty() {
            return Err(Failure::User("--buckets off compiles one program per shape: it takes no other bucket policy".into()));
        }
        Ok(true)
    }


    /// The bucket plan of the program's symbols that its inputs give (not the data-dependent
    /// ones, `nonzero`'s count, which the program computes within their bound).
    pub fn plan_for(&self, module: &tpuc_ir::Module) -> Result<tpuc_driver::buckets::BucketPlan, Failure> {
        use tpuc_driver::buckets::SymbolRange;
        let data_dependent = tpuc_driver::dynamic::data_dependent_symbols(module);
        self.plan(
            module
                .symbols
                .iter()
                .filter(|s| !data_dependent.iter().any(|d| *d == *s.name))
                .map(|s| SymbolRange::new(&*s.name, s.min, s.max))
                .collect(),
        )
    }

    pub fn plan(&self, mut ranges: Vec<tpuc_driver::buckets::SymbolRange>) -> Result<tpuc_driver::buckets::BucketPlan, Failure> {
        use tpuc_driver::buckets::{self, BucketPolicy, SymbolRange};
        if self.off()? {
            if ranges.is_empty() {
                // Only data-dependent sizes: the program is one whatever `off` says.
                return buckets::plan(&[], self.max_buckets, self.max_total).map_err(|e| Failure::User(e.to_string()));
            }
            return Err(Failure::User(
                "--buckets off compiles one program per input shape, which only `tpuc run` knows: give a bucket policy here, or export with static shapes".into(),
            ));
        }
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

/// Every combination of the symbols' buckets, the first symbol outermost.
pub fn bucket_combinations(plan: &tpuc_driver::buckets::BucketPlan) -> Vec<tpuc_driver::dynamic::Sizes> {
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
