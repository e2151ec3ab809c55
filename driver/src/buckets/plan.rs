//! Planning: one symbol's buckets from its policy ([`plan_symbol`], [`plan_symbol_hist`],
//! giving a [`SymbolPlan`]), and a program's plan over all its symbols ([`plan`], giving a
//! [`BucketPlan`]) with the `max_total` cap on their combinations enforced.

use super::candidates::{auto_buckets, linear_buckets, list_buckets};
use super::coarsen::{choose, Caps};
use super::waste::Waste;
use super::weights::{padding, Histogram, Weights};
use super::{BucketError, BucketPolicy, SymbolRange, MAX_HIST_SIZES, MAX_SMALL_BUCKETS, SMALL_LIMIT};
use serde::Serialize;

/// One symbol's buckets.
#[derive(Clone, Debug, Serialize)]
pub struct SymbolPlan {
    pub name: String,
    pub min: i64,
    pub max: i64,
    /// The policy as written (`auto`, `linear:128`, ...).
    pub policy: String,
    /// Strictly increasing, the first `>= min`, the last `== max`.
    pub buckets: Vec<i64>,
    /// Buckets below [`SMALL_LIMIT`].
    pub small_buckets: usize,
    /// Buckets of [`SMALL_LIMIT`] and above.
    pub large_buckets: usize,
    /// How many buckets the policy proposed before any cap.
    pub proposed: usize,
    /// For sizes uniform over the range.
    pub waste: Waste,
    /// Under the histogram, for `hist:` policies.
    pub hist_waste: Option<Waste>,
    #[serde(skip)]
    hist: Option<Histogram>,
}

impl SymbolPlan {
    fn new(name: &str, lo: i64, hi: i64, policy: String, buckets: Vec<i64>, proposed: usize, hist: Option<Histogram>) -> Self {
        let mut p = SymbolPlan {
            name: name.to_string(),
            min: lo,
            max: hi,
            policy,
            buckets: Vec::new(),
            small_buckets: 0,
            large_buckets: 0,
            proposed,
            waste: Waste::uniform(&[hi], lo),
            hist_waste: None,
            hist,
        };
        p.set_buckets(buckets);
        p
    }

    fn set_buckets(&mut self, buckets: Vec<i64>) {
        debug_assert!(buckets.windows(2).all(|w| w[0] < w[1]) && buckets.last() == Some(&self.max));
        self.small_buckets = buckets.iter().filter(|&&b| b < SMALL_LIMIT).count();
        self.large_buckets = buckets.len() - self.small_buckets;
        self.waste = Waste::uniform(&buckets, self.min);
        self.hist_waste = self.hist.as_ref().map(|h| Waste::histogram(&buckets, h));
        self.buckets = buckets;
    }

    fn weights(&self) -> Weights<'_> {
        match &self.hist {
            Some(h) => Weights::Hist(h),
            None => Weights::Uniform { lo: self.min },
        }
    }

    /// The bucket a size runs in: the smallest bucket `>= n`.
    pub fn select(&self, n: i64) -> Result<i64, BucketError> {
        if n < self.min || n > self.max {
            return Err(BucketError::OutOfRange { name: self.name.clone(), value: n, lo: self.min, hi: self.max });
        }
        Ok(self.buckets[self.buckets.partition_point(|&b| b < n)])
    }

    /// Expected padded elements under the symbol's distribution (histogram, else uniform).
    pub fn expected_padding(&self) -> u128 {
        padding(&self.buckets, self.min, self.weights())
    }

    /// Expected padded elements, real ones included: Σ w(n)·bucket(n).
    fn padded_elements(&self) -> f64 {
        let w = self.weights();
        let (_, s_hi) = w.prefix(self.max);
        let (_, s_lo) = w.prefix(self.min - 1);
        (self.expected_padding() + (s_hi - s_lo)) as f64
    }

    /// The bucket (never the last) whose removal adds the least expected padding, and how much.
    fn cheapest_removal(&self) -> Option<(usize, u128)> {
        let w = self.weights();
        let b = &self.buckets;
        (0..b.len().saturating_sub(1))
            .map(|r| {
                let prev = if r == 0 { self.min - 1 } else { b[r - 1] };
                let added = w.segment(prev, b[r + 1]) - w.segment(prev, b[r]) - w.segment(b[r], b[r + 1]);
                (r, added)
            })
            .min_by_key(|&(r, added)| (added, r))
    }
}

/// The buckets `policy` gives one symbol under `max_buckets` (histogram files are read here).
pub fn plan_symbol(range: &SymbolRange, policy: &BucketPolicy, max_buckets: usize) -> Result<SymbolPlan, BucketError> {
    if max_buckets == 0 {
        return Err(BucketError::BadCap { what: "--max-buckets" });
    }
    let (lo, hi) = range.bounds()?;
    let name = range.name.as_str();
    let cands = match policy {
        BucketPolicy::Auto => auto_buckets(lo, hi),
        BucketPolicy::Linear(k) => linear_buckets(name, *k, lo, hi)?,
        BucketPolicy::List(list) => list_buckets(name, list, lo, hi)?,
        BucketPolicy::Hist { path, n } => {
            let hist = Histogram::read(path)?;
            let caps = n.map_or(Caps::for_max_buckets(max_buckets), Caps::Total);
            return plan_symbol_hist(range, &hist, caps, &policy.to_string())
                .map_err(|e| match e {
                    BucketError::Histogram { reason, .. } => BucketError::Histogram { path: path.display().to_string(), reason },
                    e => e,
                });
        }
    };
    let proposed = cands.len();
    let caps = Caps::for_max_buckets(max_buckets);
    let buckets = if caps.allows(&cands) { cands } else { choose(&cands, lo, Weights::Uniform { lo }, caps, true) };
    Ok(SymbolPlan::new(name, lo, hi, policy.to_string(), buckets, proposed, None))
}

/// The buckets among the histogram's sizes (and `hi`) that minimise its expected padding within
/// `caps`. Sizes of the histogram outside the range are an error.
pub fn plan_symbol_hist(range: &SymbolRange, hist: &Histogram, caps: Caps, label: &str) -> Result<SymbolPlan, BucketError> {
    if caps.cap(false) == 0 {
        return Err(BucketError::BadCap { what: "the bucket count" });
    }
    let (lo, hi) = range.bounds()?;
    let name = range.name.as_str();
    let err = |reason: String| BucketError::Histogram { path: label.to_string(), reason };
    if let Some(&(s, _)) = hist.entries().iter().find(|&&(s, _)| s < lo || s > hi) {
        return Err(err(format!("size {s} is outside the range {lo}..{hi} of symbol {name}")));
    }
    let mut cands: Vec<i64> = hist.entries().iter().map(|&(s, _)| s).filter(|&s| s >= 1 && s < hi).collect();
    cands.push(hi);
    if cands.len() > MAX_HIST_SIZES {
        return Err(err(format!("{} distinct sizes; at most {MAX_HIST_SIZES} are planned", cands.len())));
    }
    let proposed = cands.len();
    let buckets = choose(&cands, lo, Weights::Hist(hist), caps, false);
    Ok(SymbolPlan::new(name, lo, hi, label.to_string(), buckets, proposed, Some(hist.clone())))
}

/// A program's plan: one entry per symbol, and how many compiles the combinations make.
#[derive(Clone, Debug, Serialize)]
pub struct BucketPlan {
    pub symbols: Vec<SymbolPlan>,
    /// The product of the symbols' bucket counts (saturating).
    pub combinations: u64,
    pub max_buckets: usize,
    pub max_total: u64,
    /// What the caps changed, one line each.
    pub notes: Vec<String>,
}

impl BucketPlan {
    pub fn symbol(&self, name: &str) -> Option<&SymbolPlan> {
        self.symbols.iter().find(|s| s.name == name)
    }
}

fn combinations(symbols: &[SymbolPlan]) -> u64 {
    symbols.iter().fold(1u64, |acc, s| acc.saturating_mul(s.buckets.len() as u64))
}

/// Plans every symbol with its policy, then enforces `max_total` over their combinations.
pub fn plan(symbols: &[(SymbolRange, BucketPolicy)], max_buckets: usize, max_total: u64) -> Result<BucketPlan, BucketError> {
    if max_total == 0 {
        return Err(BucketError::BadCap { what: "--max-total" });
    }
    let mut plans = Vec::with_capacity(symbols.len());
    let mut notes = Vec::new();
    for (range, policy) in symbols {
        let p = plan_symbol(range, policy, max_buckets)?;
        if p.buckets.len() < p.proposed && !matches!(policy, BucketPolicy::Hist { .. }) {
            notes.push(format!(
                "{}: {} gives {} buckets; --max-buckets {max_buckets} keeps {} ({} of {SMALL_LIMIT} and above, at most {} below)",
                p.name,
                p.policy,
                p.proposed,
                p.buckets.len(),
                p.large_buckets,
                max_buckets.min(MAX_SMALL_BUCKETS)
            ));
        }
        plans.push(p);
    }
    let before: Vec<usize> = plans.iter().map(|p| p.buckets.len()).collect();
    let initial = combinations(&plans);
    coarsen_total(&mut plans, max_total);
    if initial > max_total {
        let changed: Vec<String> = plans
            .iter()
            .zip(&before)
            .filter(|(p, &b)| p.buckets.len() != b)
            .map(|(p, &b)| format!("{} {b} → {}", p.name, p.buckets.len()))
            .collect();
        notes.push(format!(
            "{initial} combinations exceed --max-total {max_total}: coarsened {} (where padding grows least)",
            changed.join(", ")
        ));
    }
    Ok(BucketPlan { combinations: combinations(&plans), symbols: plans, max_buckets, max_total, notes })
}

/// Drops buckets until the product of the counts is at most `max_total` (see the module
/// documentation for the rule).
fn coarsen_total(plans: &mut [SymbolPlan], max_total: u64) {
    if combinations(plans) <= max_total {
        return;
    }
    let original: Vec<Vec<i64>> = plans.iter().map(|p| p.buckets.clone()).collect();
    while combinations(plans) > max_total {
        let mut best: Option<(f64, usize, usize)> = None;
        for (si, p) in plans.iter().enumerate() {
            let Some((r, added)) = p.cheapest_removal() else { continue };
            let k = p.buckets.len() as f64;
            let cost = (added as f64 / p.padded_elements()).ln_1p() / (k / (k - 1.0)).ln();
            if best.is_none_or(|(c, _, _)| cost < c) {
                best = Some((cost, si, r));
            }
        }
        let Some((_, si, r)) = best else { break };
        let mut b = plans[si].buckets.clone();
        b.remove(r);
        plans[si].set_buckets(b);
    }
    // Dropping one bucket at a time can overshoot (7 × 5 = 35 > 32 → 7 × 4 = 28): give dropped
    // buckets back, the most padding saved per unit of log(bucket count) first, while the
    // product stays within the cap.
    loop {
        let total = combinations(plans);
        let mut best: Option<(f64, usize, i64)> = None;
        for (si, p) in plans.iter().enumerate() {
            let k = p.buckets.len() as u64;
            if total / k * (k + 1) > max_total {
                continue;
            }
            let w = p.weights();
            for &b in &original[si] {
                let at = p.buckets.partition_point(|&x| x < b);
                if p.buckets[at] == b {
                    continue;
                }
                let prev = if at == 0 { p.min - 1 } else { p.buckets[at - 1] };
                let next = p.buckets[at];
                let saved = w.segment(prev, next) - w.segment(prev, b) - w.segment(b, next);
                if saved == 0 {
                    continue;
                }
                let padded = p.padded_elements();
                let gain = (padded / (padded - saved as f64)).ln() / ((k + 1) as f64 / k as f64).ln();
                if best.is_none_or(|(g, _, _)| gain > g) {
                    best = Some((gain, si, b));
                }
            }
        }
        let Some((_, si, b)) = best else { break };
        let mut v = plans[si].buckets.clone();
        let at = v.partition_point(|&x| x < b);
        v.insert(at, b);
        plans[si].set_buckets(v);
    }
}
