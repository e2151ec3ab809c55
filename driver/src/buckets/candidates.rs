//! The candidate buckets each policy proposes for one symbol, before any cap: the `auto` grid,
//! the multiples of `linear:K`, an explicit list; all clipped to the symbol's range and ending
//! with its maximum.

use super::policy::join;
use super::{BucketError, MAX_CANDIDATES, SMALL_LIMIT};

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
