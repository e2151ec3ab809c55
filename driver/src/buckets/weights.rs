//! The size distributions padding is measured under: [`Histogram`]s of observed sizes (read from
//! `hist:` JSON files), uniform sizes over a range, and the exact expected padding of a bucket
//! list under either.

use super::{BucketError, MAX_SIZE};
use std::path::Path;

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
pub(super) enum Weights<'a> {
    /// Every size of `[lo, hi]` once.
    Uniform { lo: i64 },
    Hist(&'a Histogram),
}

impl Weights<'_> {
    /// Σ w(n) and Σ w(n)·n over sizes `n <= x`.
    pub(super) fn prefix(&self, x: i64) -> (u128, u128) {
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
    pub(super) fn segment(&self, p: i64, b: i64) -> u128 {
        let (w0, s0) = self.prefix(p);
        let (w1, s1) = self.prefix(b);
        b as u128 * (w1 - w0) - (s1 - s0)
    }
}

/// Expected padded elements Σ w(n)·(bucket(n) − n) of `buckets` under `weights`.
pub(super) fn padding(buckets: &[i64], lo: i64, weights: Weights<'_>) -> u128 {
    let mut prev = lo - 1;
    let mut total = 0;
    for &b in buckets {
        total += weights.segment(prev, b);
        prev = b;
    }
    total
}
