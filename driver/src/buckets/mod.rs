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

mod candidates;
mod coarsen;
mod error;
mod plan;
mod policy;
mod waste;
mod weights;
#[cfg(test)]
mod tests;

pub use candidates::{auto_buckets, linear_buckets, list_buckets};
pub use coarsen::Caps;
pub use error::BucketError;
pub use plan::{plan, plan_symbol, plan_symbol_hist, BucketPlan, SymbolPlan};
pub use policy::{BucketPolicy, SymbolRange};
pub use waste::Waste;
pub use weights::Histogram;

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
