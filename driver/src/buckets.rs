//! Bucket plans for bounded symbolic dimensions.
//!
//! A program with a symbolic dimension `s` in `[lo, hi]` is compiled once per *bucket*: a few
//! sizes `b_1 < b_2 < ... < b_k = hi`; an input of size `n` runs in the smallest bucket `>= n`
//! ([`SymbolPlan::select`]) padded to it. This module chooses the buckets; it compiles nothing.
//!
//! Policies ([`BucketPolicy`], parsed from strings):
//! - `auto` (default): the powers of two below 128, then 128 × {1, 2, 3, 4, 6, 8, 12, 16, 24,
//!   32, ...} (alternately ×1.5 and ×4/3 after 256), clipped to `[lo, hi]`; the last bucket is
//!   `hi` itself when `hi` is not on that grid. Lengths 1..2048 give 1..64 (7 buckets) and
//!   128, 256, 384, 512, 768, 1024, 1536, 2048 (8 buckets).
//! - `linear:K`: the multiples of K, then `hi`.
//! - an explicit list `128,256,512`: sorted and deduplicated; it must reach `hi` (entries above
//!   `hi` are replaced by `hi` itself, entries below `lo` are dropped).
//! - `hist:FILE[:N]`: FILE is a JSON histogram of observed sizes, `{"size": count, ...}`; the
//!   buckets are chosen among the observed sizes (plus `hi`, always the last bucket, so every
//!   size of the range is still served) to minimise the expected padded elements
//!   Σ count(n)·(bucket(n) − n), exactly, by dynamic programming. With N, at most N buckets in
//!   all; without, the `max_buckets` caps below.
//!
//! Caps. `max_buckets` N (default 8) bounds each symbol's buckets of 128 and above; the buckets
//! below 128 are bounded separately by min(N, 7): 7 is the number of powers of two below 128,
//! all of which `auto` keeps, since padding a short input to 128 would waste up to 99 % of the
//! work. So `auto` on 1..2048 stays at 8 compiles for sizes of 128 and above and 15 in all, and a
//! symbol never gets more than N + min(N, 7) buckets. A policy that gives more is *coarsened*:
//! keeping `hi`, the planner keeps the subset of the policy's buckets within the caps whose
//! worst-case padding ratio, max over n of (bucket(n) − n)/bucket(n), is smallest. As the first
//! gap often fixes that maximum (1..2048 padded to 128 wastes 99 % at n = 1), the comparison
//! goes on: every gap between consecutive buckets has a worst ratio (at the size just above the
//! previous bucket), and plans compare by these ratios sorted from the largest,
//! lexicographically, then by the expected padding (sizes uniform over the range). This is exact
//! (a dynamic programme over the policy's buckets, [`MAX_CANDIDATES`] at most). A histogram
//! policy minimises the expected padding under the histogram instead.
//!
//! Symbols multiply: a program with two symbols compiles every pair of buckets. The product is
//! capped too (`max_total`, default 32): while it is exceeded, one bucket is dropped from the
//! symbol where that costs least, measured as the increase of log(expected padded elements)
//! per unit of log(bucket count) saved (the expected padding under the symbol's histogram, else
//! under uniform sizes); within that symbol, the bucket whose removal adds the least padding
//! goes. Dropped buckets are then given back, the most padding saved per unit of log(count)
//! first, while the product stays within the cap (one at a time can overshoot: 7 × 5 = 35 → 7 ×
//! 4 = 28 where 8 × 4 = 32 fits). `max_total` is the hard limit on compiles; `max_buckets` shapes
//! each symbol.
//!
//! Waste statistics ([`Waste`]) describe a plan for sizes uniform over `[lo, hi]` and, for a
//! histogram policy, under the histogram as well.

use serde::Serialize;
use std::cmp::Ordering;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// Buckets below this size are "small" and capped separately (see the module documentation).
pub const SMALL_LIMIT: i64 = 128;
/// At most this many small buckets per symbol: the powers of two below [`SMALL_LIMIT`].
pub const MAX_SMALL_BUCKETS: usize = 7;
/// Default cap on a symbol's buckets of [`SMALL_LIMIT`] and above.
pub const DEFAULT_MAX_BUCKETS: usize = 8;
/// Default cap on the number of bucket combinations (compiles) of a program.
pub const DEFAULT_MAX_TOTAL: u64 = 32;
/// A policy may propose at most this many buckets for one symbol (before the caps); the exact
/// coarsening is quadratic in it.
pub const MAX_CANDIDATES: usize = 1024;
/// A histogram may hold at most this many distinct sizes.
pub const MAX_HIST_SIZES: usize = 4096;
/// [`Waste::worst_above_256`] looks at sizes above this.
pub const WORST_ABOVE: i64 = 256;
/// Sizes beyond this are rejected (keeps the exact arithmetic in range).
pub const MAX_SIZE: i64 = 1 << 40;

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BucketError {
    #[error("bad bucket policy `{text}`: {reason} (expected auto, linear:K, a list such as 128,256,512, or hist:FILE[:N])")]
    BadPolicy { text: String, reason: String },
    #[error(
        "symbol {name} has no upper bound (range {lo}..inf): planning buckets ahead of time needs one; \
         give it when exporting (`torch.export.Dim(\"{name}\", max=2048)`), when marking the dimension \
         dynamic for torch.compile (`torch._dynamo.mark_dynamic(t, dim, min={lo}, max=2048)`), or here \
         (`--max-size {name}=2048`)"
    )]
    Unbounded { name: String, lo: i64 },
    #[error("symbol {name}: bad range {lo}..{hi}: {reason}")]
    BadRange { name: String, lo: i64, hi: i64, reason: String },
    #[error("the bucket list {list} does not cover the maximum {hi} of symbol {name}: add {hi} (or a larger size)")]
    ListTooShort { name: String, list: String, hi: i64 },
    #[error("symbol {name}: {policy} gives {count} buckets over {lo}..{hi}; at most {MAX_CANDIDATES} are planned (use a coarser policy)")]
    TooManyCandidates { name: String, policy: String, count: u64, lo: i64, hi: i64 },
    #[error("histogram {path}: {reason}")]
    Histogram { path: String, reason: String },
    #[error("size {value} of symbol {name} is outside its range {lo}..{hi}")]
    OutOfRange { name: String, value: i64, lo: i64, hi: i64 },
    #[error("{what} must be at least 1")]
    BadCap { what: &'static str },
}

/// How a symbol's buckets are chosen. `FromStr` reads `auto`, `linear:K`, `128,256,512` and
/// `hist:FILE[:N]`; `Display` writes the same form back.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum BucketPolicy {
    #[default]
    Auto,
    Linear(i64),
    List(Vec<i64>),
    Hist { path: PathBuf, n: Option<usize> },
}

impl FromStr for BucketPolicy {
    type Err = BucketError;

    fn from_str(text: &str) -> Result<Self, BucketError> {
        let bad = |reason: &str| BucketError::BadPolicy { text: text.to_string(), reason: reason.to_string() };
        let t = text.trim();
        if t == "auto" {
            return Ok(BucketPolicy::Auto);
        }
        if let Some(k) = t.strip_prefix("linear:") {
            let k: i64 = k.trim().parse().map_err(|_| bad("K must be a positive integer"))?;
            if !(1..=MAX_SIZE).contains(&k) {
                return Err(bad("K must be a positive integer"));
            }
            return Ok(BucketPolicy::Linear(k));
        }
        if let Some(rest) = t.strip_prefix("hist:") {
            // FILE may itself contain ':'; a trailing `:N` with N a number is the count.
            let (path, n) = match rest.rsplit_once(':') {
                Some((p, n)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => {
                    let n: usize = n.parse().map_err(|_| bad("N must be a positive integer"))?;
                    if n == 0 {
                        return Err(bad("N must be at least 1"));
                    }
                    (p, Some(n))
                }
                _ => (rest, None),
            };
            if path.is_empty() {
                return Err(bad("hist needs a file"));
            }
            return Ok(BucketPolicy::Hist { path: PathBuf::from(path), n });
        }
        if t.starts_with(|c: char| c.is_ascii_digit()) {
            let mut list = Vec::new();
            for item in t.split(',') {
                let v: i64 = item.trim().parse().map_err(|_| bad(&format!("`{}` is not a size", item.trim())))?;
                if !(1..=MAX_SIZE).contains(&v) {
                    return Err(bad(&format!("bucket {v} is not a positive size")));
                }
                list.push(v);
            }
            list.sort_unstable();
            list.dedup();
            return Ok(BucketPolicy::List(list));
        }
        Err(bad("unknown policy"))
    }
}

impl fmt::Display for BucketPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BucketPolicy::Auto => f.write_str("auto"),
            BucketPolicy::Linear(k) => write!(f, "linear:{k}"),
            BucketPolicy::List(l) => f.write_str(&join(l)),
            BucketPolicy::Hist { path, n: None } => write!(f, "hist:{}", path.display()),
            BucketPolicy::Hist { path, n: Some(n) } => write!(f, "hist:{}:{n}", path.display()),
        }
    }
}

fn join(v: &[i64]) -> String {
    v.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(",")
}

/// A symbol and its inclusive range; `hi` is `None` when unbounded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SymbolRange {
    pub name: String,
    pub lo: i64,
    pub hi: Option<i64>,
}

impl SymbolRange {
    pub fn new(name: impl Into<String>, lo: i64, hi: Option<i64>) -> Self {
        SymbolRange { name: name.into(), lo, hi }
    }

    /// The range as `(lo, hi)`, or why it cannot be planned.
    pub fn bounds(&self) -> Result<(i64, i64), BucketError> {
        let hi = self.hi.ok_or_else(|| BucketError::Unbounded { name: self.name.clone(), lo: self.lo })?;
        let bad = |reason: &str| BucketError::BadRange { name: self.name.clone(), lo: self.lo, hi, reason: reason.to_string() };
        if self.lo < 0 {
            return Err(bad("sizes are never negative"));
        }
        if hi < self.lo {
            return Err(bad("the maximum is below the minimum"));
        }
        if hi < 1 {
            return Err(bad("the range holds no positive size"));
        }
        if hi > MAX_SIZE {
            return Err(bad(&format!("sizes above {MAX_SIZE} are not planned")));
        }
        Ok((self.lo, hi))
    }
}

/// Observed sizes and how often each occurred, sorted by size, counts positive.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Histogram {
    counts: Vec<(i64, u64)>,
    /// Running totals after each entry: Σ count, Σ count·size.
    cum: Vec<(u128, u128)>,
}

impl Histogram {
    /// From (size, count) pairs; duplicates add up, zero counts are dropped.
    pub fn new(pairs: impl IntoIterator<Item = (i64, u64)>) -> Result<Self, String> {
        let mut map = std::collections::BTreeMap::new();
        for (size, count) in pairs {
            if !(0..=MAX_SIZE).contains(&size) {
                return Err(format!("size {size} is not a dimension size"));
            }
            *map.entry(size).or_insert(0u64) += count;
        }
        let counts: Vec<(i64, u64)> = map.into_iter().filter(|&(_, c)| c > 0).collect();
        if counts.is_empty() {
            return Err("no observed sizes (every count is zero, or there are none)".to_string());
        }
        let mut cum = Vec::with_capacity(counts.len());
        let (mut w, mut s) = (0u128, 0u128);
        for &(n, c) in &counts {
            w += c as u128;
            s += c as u128 * n as u128;
            cum.push((w, s));
        }
        Ok(Histogram { counts, cum })
    }

    /// Parses `{"size": count, ...}`.
    pub fn from_json(text: &str) -> Result<Self, String> {
        let v: serde_json::Value = serde_json::from_str(text).map_err(|e| format!("bad JSON: {e}"))?;
        let obj = v.as_object().ok_or("expected an object {\"size\": count, ...}")?;
        let mut pairs = Vec::with_capacity(obj.len());
        for (k, c) in obj {
            let size: i64 = k.trim().parse().map_err(|_| format!("key `{k}` is not a size"))?;
            let count = c.as_u64().ok_or_else(|| format!("the count of size {size} is not a non-negative integer"))?;
            pairs.push((size, count));
        }
        Self::new(pairs)
    }

    pub fn read(path: &Path) -> Result<Self, BucketError> {
        let err = |reason: String| BucketError::Histogram { path: path.display().to_string(), reason };
        let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
        Self::from_json(&text).map_err(err)
    }

    /// (size, count), sorted by size.
    pub fn entries(&self) -> &[(i64, u64)] {
        &self.counts
    }

    /// Σ count and Σ count·size over sizes `<= x`.
    fn prefix(&self, x: i64) -> (u128, u128) {
        let i = self.counts.partition_point(|&(n, _)| n <= x);
        if i == 0 {
            (0, 0)
        } else {
            self.cum[i - 1]
        }
    }
}

/// The distribution of sizes the expected padding is measured under.
#[derive(Clone, Copy, Debug)]
enum Weights<'a> {
    /// Every size of `[lo, hi]` once.
    Uniform { lo: i64 },
    Hist(&'a Histogram),
}

impl Weights<'_> {
    /// Σ w(n) and Σ w(n)·n over sizes `n <= x`.
    fn prefix(&self, x: i64) -> (u128, u128) {
        match *self {
            Weights::Uniform { lo } => {
                if x < lo {
                    return (0, 0);
                }
                let count = (x - lo + 1) as u128;
                (count, (lo as u128 + x as u128) * count / 2)
            }
            Weights::Hist(h) => h.prefix(x),
        }
    }

    /// Σ w(n)·(b − n) over `p < n <= b`: the padded elements bucket `b` adds after `p`.
    fn segment(&self, p: i64, b: i64) -> u128 {
        let (w0, s0) = self.prefix(p);
        let (w1, s1) = self.prefix(b);
        b as u128 * (w1 - w0) - (s1 - s0)
    }
}

/// A padding ratio `num / den` compared exactly.
#[derive(Clone, Copy, Debug)]
struct Ratio {
    num: i128,
    den: i128,
}

impl Ratio {
    const ZERO: Ratio = Ratio { num: 0, den: 1 };

    /// The worst ratio of bucket `b` serving `p < n <= b`: n = p + 1.
    fn gap(p: i64, b: i64) -> Ratio {
        Ratio { num: (b - p - 1) as i128, den: b as i128 }
    }
}

impl PartialEq for Ratio {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Ratio {}
impl PartialOrd for Ratio {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Ratio {
    fn cmp(&self, o: &Self) -> Ordering {
        (self.num * o.den).cmp(&(o.num * self.den))
    }
}

/// Per-symbol caps on the number of buckets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Caps {
    /// At most `small` buckets below [`SMALL_LIMIT`] and `large` at or above it.
    Split { small: usize, large: usize },
    /// At most this many buckets in all.
    Total(usize),
}

impl Caps {
    /// The caps `--max-buckets n` sets.
    pub fn for_max_buckets(n: usize) -> Caps {
        Caps::Split { small: n.min(MAX_SMALL_BUCKETS), large: n }
    }

    /// Whether bucket `b` counts against the small cap.
    fn is_small(&self, b: i64) -> bool {
        matches!(self, Caps::Split { .. }) && b < SMALL_LIMIT
    }

    /// The cap of the small (`true`) or the other region.
    fn cap(&self, small: bool) -> usize {
        match *self {
            Caps::Split { small: s, large } => {
                if small {
                    s
                } else {
                    large
                }
            }
            Caps::Total(n) => n,
        }
    }

    /// Whether `buckets` respects the caps.
    pub fn allows(&self, buckets: &[i64]) -> bool {
        let small = buckets.iter().filter(|&&b| self.is_small(b)).count();
        small <= self.cap(true) && buckets.len() - small <= self.cap(false)
    }
}

/// The `auto` grid within `[lo, hi]`, ending with `hi`.
pub fn auto_buckets(lo: i64, hi: i64) -> Vec<i64> {
    let mut grid = Vec::new();
    let mut p = 1;
    while p < SMALL_LIMIT {
        grid.push(p);
        p *= 2;
    }
    // 128·2^k, and 192·2^k between 128·2^k and 128·2^(k+1) from k = 1 on: 128, 256, 384, 512, 768, ...
    let mut k = 0;
    loop {
        let a = SMALL_LIMIT << k;
        if a >= hi {
            break;
        }
        grid.push(a);
        if k >= 1 {
            let b = (SMALL_LIMIT / 2 * 3) << k;
            if b >= hi {
                break;
            }
            grid.push(b);
        }
        k += 1;
    }
    clip(grid, lo, hi)
}

/// Multiples of `k` within `[lo, hi)`, then `hi`.
pub fn linear_buckets(name: &str, k: i64, lo: i64, hi: i64) -> Result<Vec<i64>, BucketError> {
    let first = (lo.max(1) + k - 1) / k * k;
    let count = if first >= hi { 1 } else { ((hi - 1 - first) / k + 2) as u64 };
    if count > MAX_CANDIDATES as u64 {
        return Err(BucketError::TooManyCandidates { name: name.to_string(), policy: format!("linear:{k}"), count, lo, hi });
    }
    Ok(clip((0..).map(|i| first + i * k).take_while(|&v| v < hi).collect(), lo, hi))
}

/// An explicit list within `[lo, hi]`: it must reach `hi`.
pub fn list_buckets(name: &str, list: &[i64], lo: i64, hi: i64) -> Result<Vec<i64>, BucketError> {
    if list.last().is_none_or(|&m| m < hi) {
        return Err(BucketError::ListTooShort { name: name.to_string(), list: join(list), hi });
    }
    if list.len() > MAX_CANDIDATES {
        return Err(BucketError::TooManyCandidates {
            name: name.to_string(),
            policy: "the list".to_string(),
            count: list.len() as u64,
            lo,
            hi,
        });
    }
    Ok(clip(list.to_vec(), lo, hi))
}

/// The sorted grid's entries in `[lo, hi)`, then `hi`.
fn clip(grid: Vec<i64>, lo: i64, hi: i64) -> Vec<i64> {
    let mut out: Vec<i64> = grid.into_iter().filter(|&b| b >= lo && b >= 1 && b < hi).collect();
    out.push(hi);
    out
}

/// The subset of `cands` (sorted, in `[lo, hi]`, ending with `hi`) that keeps `hi`, respects
/// `caps` and is best by [`LexiCost`] (when `minimise_worst`: padding ratios first, then the
/// expected padded elements under `weights`) or by the expected padded elements alone; ties go to
/// fewer buckets. Exact.
fn choose(cands: &[i64], lo: i64, weights: Weights<'_>, caps: Caps, minimise_worst: bool) -> Vec<i64> {
    assert!(!cands.is_empty() && cands.windows(2).all(|w| w[0] < w[1]));
    let path = if minimise_worst {
        dp(cands, lo, caps, LexiCost::default(), |p, b| (Ratio::gap(p, b), weights.segment(p, b)), |v, (r, c)| v.with(r, c)).1
    } else {
        dp(cands, lo, caps, 0u128, |p, b| weights.segment(p, b), |v, c| v + c).1
    };
    path.into_iter().map(|i| cands[i]).collect()
}

/// How [`choose`] ranks plans when it bounds the worst case: the gaps' worst padding ratios
/// sorted from the largest, compared lexicographically (the smallest worst case; among equal
/// worst cases the smallest second-worst gap, and so on), then the expected padded elements.
/// The first gap's ratio (lo up to the first bucket) counts like the others.
#[derive(Clone, Debug, Default)]
struct LexiCost {
    /// Descending.
    ratios: Vec<Ratio>,
    padding: u128,
}

impl LexiCost {
    fn with(&self, r: Ratio, padding: u128) -> LexiCost {
        let mut ratios = Vec::with_capacity(self.ratios.len() + 1);
        let at = self.ratios.partition_point(|&x| x >= r);
        ratios.extend_from_slice(&self.ratios[..at]);
        ratios.push(r);
        ratios.extend_from_slice(&self.ratios[at..]);
        LexiCost { ratios, padding: self.padding + padding }
    }
}

impl Ord for LexiCost {
    fn cmp(&self, o: &Self) -> Ordering {
        // Missing entries are 0: a shorter list of the same ratios plus zeros is equal.
        let n = self.ratios.len().max(o.ratios.len());
        let at = |v: &[Ratio], i: usize| v.get(i).copied().unwrap_or(Ratio::ZERO);
        (0..n)
            .map(|i| at(&self.ratios, i).cmp(&at(&o.ratios, i)))
            .find(|c| c.is_ne())
            .unwrap_or(Ordering::Equal)
            .then(self.padding.cmp(&o.padding))
    }
}
impl PartialOrd for LexiCost {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl PartialEq for LexiCost {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o).is_eq()
    }
}
impl Eq for LexiCost {}

/// The dynamic programme behind [`choose`]: over chains of candidates ending at the last one,
/// with at most `caps.small` candidates below [`SMALL_LIMIT`] and `caps.large` above, minimise
/// `fold(fold(zero, segment(lo − 1, b₁)), segment(b₁, b₂))...`. Exact when `fold` preserves the
/// order (`a <= b` implies `fold(a, s) <= fold(b, s)`), as sums and [`LexiCost`] do. Returns the
/// best value and the chosen indices.
fn dp<V: Clone + Ord, S: Copy>(
    cands: &[i64],
    lo: i64,
    caps: Caps,
    zero: V,
    segment: impl Fn(i64, i64) -> S,
    fold: impl Fn(&V, S) -> V,
) -> (V, Vec<usize>) {
    let m = cands.len();
    let small = |i: usize| caps.is_small(cands[i]);
    let cap = |i: usize| caps.cap(small(i));
    let kmax = caps.cap(true).max(caps.cap(false)).max(1);
    // best[i * (kmax + 1) + k]: the best chain ending at candidate i with k buckets in i's region.
    let idx = |i: usize, k: usize| i * (kmax + 1) + k;
    let mut best: Vec<Option<V>> = vec![None; m * (kmax + 1)];
    let mut parent: Vec<Option<(usize, usize)>> = vec![None; m * (kmax + 1)];
    for i in 0..m {
        for k in 1..=cap(i).min(kmax) {
            let mut cur: Option<V> = None;
            let mut from = None;
            if k == 1 {
                cur = Some(fold(&zero, segment(lo - 1, cands[i])));
            }
            for j in 0..i {
                // The same region continues the count; small → large starts it at 1.
                let kj_range = if small(j) == small(i) {
                    if k < 2 {
                        continue;
                    }
                    k - 1..=k - 1
                } else {
                    if k != 1 {
                        continue;
                    }
                    1..=cap(j).min(kmax)
                };
                for kj in kj_range {
                    let Some(prev) = &best[idx(j, kj)] else { continue };
                    let v = fold(prev, segment(cands[j], cands[i]));
                    if cur.as_ref().is_none_or(|c| v < *c) {
                        cur = Some(v);
                        from = Some((j, kj));
                    }
                }
            }
            best[idx(i, k)] = cur;
            parent[idx(i, k)] = from;
        }
    }
    let last = m - 1;
    let mut end: Option<(V, usize)> = None;
    for k in 1..=cap(last).min(kmax) {
        if let Some(v) = &best[idx(last, k)] {
            if end.as_ref().is_none_or(|(e, _)| v < e) {
                end = Some((v.clone(), k));
            }
        }
    }
    let (value, k) = end.expect("the last candidate alone is always a chain");
    let mut path = vec![last];
    let mut at = (last, k);
    while let Some(p) = parent[idx(at.0, at.1)] {
        path.push(p.0);
        at = p;
    }
    path.reverse();
    (value, path)
}

/// Expected padded elements Σ w(n)·(bucket(n) − n) of `buckets` under `weights`.
fn padding(buckets: &[i64], lo: i64, weights: Weights<'_>) -> u128 {
    let mut prev = lo - 1;
    let mut total = 0;
    for &b in buckets {
        total += weights.segment(prev, b);
        prev = b;
    }
    total
}

/// Padding waste of a plan, as fractions in [0, 1]; (bucket − n)/bucket is the share of a padded
/// input of size n that is padding.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Waste {
    /// The largest (bucket − n)/bucket over the sizes.
    pub worst: f64,
    /// The same over sizes above [`WORST_ABOVE`] (`None` when there are none).
    pub worst_above_256: Option<f64>,
    /// The mean of (bucket − n)/bucket over the sizes.
    pub mean: f64,
    /// Σ(bucket − n) / Σ bucket: the share of all padded elements that is padding.
    pub tokens: f64,
}

impl Waste {
    /// For sizes uniform over `[lo, hi]`.
    pub fn uniform(buckets: &[i64], lo: i64) -> Waste {
        let mut prev = lo - 1;
        let (mut worst, mut above): (f64, Option<f64>) = (0.0, None);
        let (mut ratio_sum, mut pad, mut padded, mut sizes) = (0.0f64, 0u128, 0u128, 0u128);
        for &b in buckets {
            let k = (b - prev) as u128; // sizes prev+1 ..= b
            worst = worst.max((b - prev - 1) as f64 / b as f64);
            let first_above = (prev + 1).max(WORST_ABOVE + 1);
            if first_above <= b {
                let r = (b - first_above) as f64 / b as f64;
                above = Some(above.map_or(r, |a| a.max(r)));
            }
            let seg_pad = k * (k - 1) / 2;
            ratio_sum += seg_pad as f64 / b as f64;
            pad += seg_pad;
            padded += k * b as u128;
            sizes += k;
            prev = b;
        }
        Waste { worst, worst_above_256: above, mean: ratio_sum / sizes as f64, tokens: pad as f64 / padded as f64 }
    }

    /// Under a histogram of sizes (every observed size must be served by `buckets`).
    pub fn histogram(buckets: &[i64], hist: &Histogram) -> Waste {
        let (mut worst, mut above): (f64, Option<f64>) = (0.0, None);
        let (mut ratio_sum, mut pad, mut padded, mut total) = (0.0f64, 0u128, 0u128, 0u128);
        for &(n, c) in hist.entries() {
            let b = buckets[buckets.partition_point(|&b| b < n)];
            let r = (b - n) as f64 / b as f64;
            worst = worst.max(r);
            if n > WORST_ABOVE {
                above = Some(above.map_or(r, |a| a.max(r)));
            }
            ratio_sum += c as f64 * r;
            pad += c as u128 * (b - n) as u128;
            padded += c as u128 * b as u128;
            total += c as u128;
        }
        Waste { worst, worst_above_256: above, mean: ratio_sum / total as f64, tokens: pad as f64 / padded as f64 }
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn uniform_plan(lo: i64, hi: i64, policy: &str, n: usize) -> SymbolPlan {
        plan_symbol(&SymbolRange::new("s", lo, Some(hi)), &policy.parse().unwrap(), n).unwrap()
    }

    #[test]
    fn auto_on_1_to_2048() {
        let p = uniform_plan(1, 2048, "auto", DEFAULT_MAX_BUCKETS);
        assert_eq!(p.buckets, [1, 2, 4, 8, 16, 32, 64, 128, 256, 384, 512, 768, 1024, 1536, 2048]);
        assert_eq!((p.small_buckets, p.large_buckets), (7, 8));
        assert!(p.waste.worst_above_256.unwrap() <= 1.0 / 3.0);
        assert!(p.waste.tokens <= 0.15, "{:?}", p.waste);
    }

    #[test]
    fn auto_clips_to_the_range() {
        assert_eq!(auto_buckets(2, 64), [2, 4, 8, 16, 32, 64]);
        assert_eq!(auto_buckets(100, 1000), [128, 256, 384, 512, 768, 1000]);
        assert_eq!(auto_buckets(1, 1), [1]);
        assert_eq!(auto_buckets(5, 5), [5]);
        assert_eq!(auto_buckets(1, 6144), [1, 2, 4, 8, 16, 32, 64, 128, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144]);
    }

    #[test]
    fn auto_coarsens_large_buckets_to_the_cap() {
        // 1..4096: 10 buckets of 128 and above on the grid; two go.
        let p = uniform_plan(1, 4096, "auto", 8);
        assert_eq!(p.large_buckets, 8);
        assert_eq!(p.small_buckets, 7);
        assert_eq!(p.proposed, 17);
        assert_eq!(*p.buckets.last().unwrap(), 4096);
        // Just past a grid point: the nearly empty last gap merges.
        let p = uniform_plan(1, 2100, "auto", 8);
        assert_eq!(&p.buckets[7..], [128, 256, 384, 512, 768, 1024, 1536, 2100]);
    }

    #[test]
    fn linear_and_lists() {
        let p = uniform_plan(1, 2048, "linear:128", 16);
        assert_eq!(p.buckets, (1..=16).map(|i| i * 128).collect::<Vec<_>>());
        assert!(p.waste.tokens < 0.06, "{:?}", p.waste);
        assert_eq!(linear_buckets("s", 100, 1, 250).unwrap(), [100, 200, 250]);
        assert_eq!(linear_buckets("s", 100, 150, 200).unwrap(), [200]);
        let p = uniform_plan(1, 2048, "linear:128", 8);
        assert_eq!((p.buckets.len(), p.proposed), (8, 16));
        let p = uniform_plan(1, 300, "512,128,256,128", 8);
        assert_eq!(p.buckets, [128, 256, 300]);
        let e = plan_symbol(&SymbolRange::new("seq", 1, Some(2048)), &"128,256,512".parse().unwrap(), 8).unwrap_err();
        assert_eq!(e.to_string(), "the bucket list 128,256,512 does not cover the maximum 2048 of symbol seq: add 2048 (or a larger size)");
        let e = plan_symbol(&SymbolRange::new("seq", 1, Some(1 << 20)), &BucketPolicy::Linear(1), 8).unwrap_err();
        assert!(matches!(e, BucketError::TooManyCandidates { .. }), "{e}");
    }

    #[test]
    fn policies_parse_and_print() {
        for (text, want) in [
            ("auto", BucketPolicy::Auto),
            ("linear:128", BucketPolicy::Linear(128)),
            ("512, 128,256,128", BucketPolicy::List(vec![128, 256, 512])),
            ("hist:sizes.json", BucketPolicy::Hist { path: "sizes.json".into(), n: None }),
            ("hist:C:/x.json:4", BucketPolicy::Hist { path: "C:/x.json".into(), n: Some(4) }),
        ] {
            assert_eq!(text.parse::<BucketPolicy>().unwrap(), want, "{text}");
            assert_eq!(want.to_string().parse::<BucketPolicy>().unwrap(), want);
        }
        for bad in ["", "pow2", "linear:", "linear:0", "linear:-4", "128,abc", "0,128", "hist:", "hist:f:0"] {
            let e = bad.parse::<BucketPolicy>().unwrap_err();
            assert!(e.to_string().starts_with(&format!("bad bucket policy `{bad}`")), "{e}");
        }
    }

    #[test]
    fn unbounded_and_bad_ranges() {
        let e = plan_symbol(&SymbolRange::new("s0", 2, None), &BucketPolicy::Auto, 8).unwrap_err();
        let msg = e.to_string();
        for part in ["s0 has no upper bound", "torch.export.Dim(\"s0\", max=", "mark_dynamic(t, dim, min=2, max=", "--max-size s0="] {
            assert!(msg.contains(part), "{msg}");
        }
        assert!(plan_symbol(&SymbolRange::new("s", 10, Some(5)), &BucketPolicy::Auto, 8).is_err());
        assert!(plan_symbol(&SymbolRange::new("s", -1, Some(5)), &BucketPolicy::Auto, 8).is_err());
        assert!(plan_symbol(&SymbolRange::new("s", 0, Some(0)), &BucketPolicy::Auto, 8).is_err());
        assert!(plan_symbol(&SymbolRange::new("s", 1, Some(5)), &BucketPolicy::Auto, 0).is_err());
        // Size 0 is served by the first bucket.
        let p = uniform_plan(0, 4, "auto", 8);
        assert_eq!(p.buckets, [1, 2, 4]);
        assert_eq!(p.select(0).unwrap(), 1);
    }

    #[test]
    fn select_checks_the_range() {
        let p = uniform_plan(2, 2048, "auto", 8);
        assert_eq!(p.select(2).unwrap(), 2);
        assert_eq!(p.select(129).unwrap(), 256);
        assert_eq!(p.select(2048).unwrap(), 2048);
        assert_eq!(p.select(2049).unwrap_err().to_string(), "size 2049 of symbol s is outside its range 2..2048");
        assert!(p.select(1).is_err());
    }

    #[test]
    fn waste_matches_hand_counts() {
        // Buckets 2, 4 over 1..4: paddings 1, 0, 1, 0 over buckets 2, 2, 4, 4.
        let w = Waste::uniform(&[2, 4], 1);
        assert_eq!(w.worst, 0.5);
        assert_eq!(w.mean, (0.5 + 0.25) / 4.0);
        assert_eq!(w.tokens, 2.0 / 12.0);
        assert_eq!(w.worst_above_256, None);
        let w = Waste::uniform(&[300, 512], 1);
        assert_eq!(w.worst_above_256, Some((512.0 - 301.0) / 512.0));
        let h = Histogram::new([(3, 2), (4, 1)]).unwrap();
        let w = Waste::histogram(&[4], &h);
        assert_eq!(w.tokens, 2.0 / 12.0);
        assert_eq!(w.mean, 0.5 / 3.0);
    }

    #[test]
    fn histogram_policy() {
        let h = Histogram::from_json(r#"{"100": 50, "120": 5, "500": 40, "1000": 1, "7": 0}"#).unwrap();
        let r = SymbolRange::new("len", 1, Some(2048));
        let p = plan_symbol_hist(&r, &h, Caps::for_max_buckets(2), "hist:h.json").unwrap();
        // Two buckets of 128 and above: 2048 is forced, 500 serves the big mass; small: both.
        assert_eq!(p.buckets, [100, 120, 500, 2048]);
        let p = plan_symbol_hist(&r, &h, Caps::for_max_buckets(1), "h").unwrap();
        assert_eq!(p.buckets, [120, 2048]);
        assert!(p.hist_waste.is_some());
        // hist:FILE:N counts every bucket.
        let p = plan_symbol_hist(&r, &h, Caps::Total(3), "h").unwrap();
        assert_eq!(p.buckets, [120, 500, 2048]);
        let p = plan_symbol_hist(&r, &h, Caps::Total(10), "h").unwrap();
        assert_eq!(p.buckets, [100, 120, 500, 1000, 2048]);
        let e = plan_symbol_hist(&SymbolRange::new("len", 1, Some(600)), &h, Caps::Total(4), "h.json").unwrap_err();
        assert!(e.to_string().contains("size 1000 is outside the range 1..600 of symbol len"), "{e}");
        assert!(Histogram::from_json("[1]").is_err());
        assert!(Histogram::from_json(r#"{"x": 1}"#).is_err());
        assert!(Histogram::from_json(r#"{"3": -1}"#).is_err());
        assert!(Histogram::from_json(r#"{"3": 0}"#).is_err());
    }

    #[test]
    fn total_cap_coarsens_the_cheapest_symbol() {
        let syms = [
            (SymbolRange::new("seq", 1, Some(2048)), BucketPolicy::Auto),
            (SymbolRange::new("batch", 1, Some(64)), BucketPolicy::Auto),
        ];
        let p = plan(&syms, 8, 32).unwrap();
        // 15 × 7 = 105; dropping one at a time reaches 7 × 4 = 28, then seq gets one back.
        assert_eq!(p.combinations, 32);
        assert_eq!(p.symbols[0].buckets, [128, 256, 384, 512, 768, 1024, 1536, 2048]);
        assert_eq!(p.symbols[1].buckets, [8, 16, 32, 64]);
        assert_eq!(p.combinations, p.symbols.iter().map(|s| s.buckets.len() as u64).product::<u64>());
        assert_eq!(p.notes.len(), 1, "{:?}", p.notes);
        for s in &p.symbols {
            assert_eq!(*s.buckets.last().unwrap(), s.max);
        }
        let one = plan(&syms, 8, 1).unwrap();
        assert_eq!(one.symbols[0].buckets, [2048]);
        assert_eq!(one.symbols[1].buckets, [64]);
        assert!(plan(&syms, 8, 0).is_err());
        let none = plan(&[], 8, 32).unwrap();
        assert_eq!(none.combinations, 1);
    }

    /// Every subset of `cands` that keeps the last and fits `caps`.
    fn subsets(cands: &[i64], caps: Caps) -> Vec<Vec<i64>> {
        let m = cands.len();
        (0u32..1 << (m - 1))
            .map(|mask| {
                let mut v: Vec<i64> = (0..m - 1).filter(|i| mask & (1 << i) != 0).map(|i| cands[i]).collect();
                v.push(cands[m - 1]);
                v
            })
            .filter(|v| caps.allows(v))
            .collect()
    }

    /// The plan's [`LexiCost`] under uniform sizes, computed directly.
    fn lexi(b: &[i64], lo: i64) -> LexiCost {
        let mut prev = lo - 1;
        let mut ratios: Vec<Ratio> = b
            .iter()
            .map(|&x| {
                let r = Ratio::gap(prev, x);
                prev = x;
                r
            })
            .collect();
        ratios.sort_by(|a, b| b.cmp(a));
        LexiCost { ratios, padding: padding(b, lo, Weights::Uniform { lo }) }
    }

    fn range_and_grid() -> impl Strategy<Value = (i64, i64, Vec<i64>)> {
        (0i64..300, 1i64..700).prop_flat_map(|(lo, span)| {
            let hi = (lo + span).max(1);
            (Just(lo), Just(hi), proptest::collection::vec(lo.max(1)..=hi, 0..10))
        })
        .prop_map(|(lo, hi, mut v)| {
            v.retain(|&x| x < hi);
            v.sort_unstable();
            v.dedup();
            v.push(hi);
            (lo, hi, v)
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

        #[test]
        fn plans_cover_their_range(lo in 0i64..3000, span in 0i64..5000, policy in 0usize..4, k in 1i64..400, n in 1usize..10) {
            let hi = (lo + span).max(1);
            let policy = match policy {
                0 => BucketPolicy::Auto,
                1 => BucketPolicy::Linear(k.max(hi / 100 + 1)),
                2 => {
                    let mut l = vec![k, k * 3, hi];
                    l.sort_unstable();
                    l.dedup();
                    BucketPolicy::List(l)
                }
                _ => BucketPolicy::List(vec![hi + k]),
            };
            let p = plan_symbol(&SymbolRange::new("s", lo, Some(hi)), &policy, n).unwrap();
            let b = &p.buckets;
            prop_assert!(b.windows(2).all(|w| w[0] < w[1]), "{b:?}");
            prop_assert_eq!(*b.last().unwrap(), hi);
            prop_assert!(b[0] >= lo.max(1));
            prop_assert!(Caps::for_max_buckets(n).allows(b), "{b:?}");
            prop_assert!(b.len() <= n + n.min(MAX_SMALL_BUCKETS));
            let mut last = 0;
            for size in lo..=hi.min(lo + 3000) {
                let got = p.select(size).unwrap();
                prop_assert!(got >= size && b.binary_search(&got).is_ok());
                prop_assert!(got >= last, "select is monotone");
                last = got;
            }
            prop_assert!(p.select(hi + 1).is_err());
            prop_assert!(lo == 0 || p.select(lo - 1).is_err());
            let w = &p.waste;
            prop_assert!((0.0..1.0).contains(&w.tokens) && w.mean <= w.worst + 1e-12 && w.worst <= 1.0);
        }

        #[test]
        fn coarsening_is_optimal(grid in range_and_grid(), small in 1usize..4, large in 1usize..4, total in proptest::bool::ANY) {
            let (lo, _hi, cands) = grid;
            let caps = if total { Caps::Total(large) } else { Caps::Split { small, large } };
            let w = Weights::Uniform { lo };
            let got = choose(&cands, lo, w, caps, true);
            prop_assert!(caps.allows(&got));
            let best = subsets(&cands, caps).iter().map(|s| lexi(s, lo)).min().unwrap();
            let got = lexi(&got, lo);
            prop_assert_eq!(got.ratios.first(), best.ratios.first(), "the smallest worst case");
            prop_assert!(got == best, "{got:?} vs {best:?}");
        }

        #[test]
        fn histogram_dp_is_optimal(
            lo in 1i64..50,
            sizes in proptest::collection::btree_map(1i64..400, 1u64..1000, 1..11),
            extra in 0i64..100,
            n in 1usize..5,
            total in proptest::bool::ANY,
        ) {
            let sizes: Vec<(i64, u64)> = sizes.into_iter().map(|(s, c)| (s + lo, c)).collect();
            let hi = sizes.last().unwrap().0 + extra;
            let h = Histogram::new(sizes.iter().copied()).unwrap();
            let caps = if total { Caps::Total(n) } else { Caps::for_max_buckets(n) };
            let p = plan_symbol_hist(&SymbolRange::new("s", lo, Some(hi)), &h, caps, "h").unwrap();
            prop_assert!(caps.allows(&p.buckets));
            let mut cands: Vec<i64> = sizes.iter().map(|&(s, _)| s).filter(|&s| s < hi).collect();
            cands.push(hi);
            let best = subsets(&cands, caps).iter().map(|s| padding(s, lo, Weights::Hist(&h))).min().unwrap();
            prop_assert_eq!(p.expected_padding(), best);
        }

        #[test]
        fn total_cap_holds(his in proptest::collection::vec(1i64..3000, 1..4), cap in 1u64..40) {
            let syms: Vec<_> = his.iter().enumerate().map(|(i, &h)| (SymbolRange::new(format!("s{i}"), 1, Some(h)), BucketPolicy::Auto)).collect();
            let p = plan(&syms, 8, cap).unwrap();
            prop_assert!(p.combinations <= cap);
            for s in &p.symbols {
                prop_assert_eq!(*s.buckets.last().unwrap(), s.max);
                prop_assert!(s.buckets.windows(2).all(|w| w[0] < w[1]));
            }
        }
    }
}
