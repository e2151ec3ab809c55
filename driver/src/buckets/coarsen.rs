//! Per-symbol caps ([`Caps`]) and the exact coarsening that keeps the best subset of a policy's
//! candidates within them: a dynamic programme ranking plans by their gaps' worst padding
//! ratios ([`LexiCost`]) or by the expected padding alone.

use super::weights::Weights;
use super::{MAX_SMALL_BUCKETS, SMALL_LIMIT};
use std::cmp::Ordering;

/// A padding ratio `num / den` compared exactly.
#[derive(Clone, Copy, Debug)]
pub(super) struct Ratio {
    num: i128,
    den: i128,
}

impl Ratio {
    const ZERO: Ratio = Ratio { num: 0, den: 1 };

    /// The worst ratio of bucket `b` serving `p < n <= b`: n = p + 1.
    pub(super) fn gap(p: i64, b: i64) -> Ratio {
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
    pub(super) fn cap(&self, small: bool) -> usize {
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

/// The subset of `cands` (sorted, in `[lo, hi]`, ending with `hi`) that keeps `hi`, respects
/// `caps` and is best by [`LexiCost`] (when `minimise_worst`: padding ratios first, then the
/// expected padded elements under `weights`) or by the expected padded elements alone; ties go to
/// fewer buckets. Exact.
pub(super) fn choose(cands: &[i64], lo: i64, weights: Weights<'_>, caps: Caps, minimise_worst: bool) -> Vec<i64> {
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
pub(super) struct LexiCost {
    /// Descending.
    pub(super) ratios: Vec<Ratio>,
    pub(super) padding: u128,
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
