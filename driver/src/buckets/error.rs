//! [`BucketError`]: everything that can go wrong while planning buckets, with the messages the
//! CLI and the Python extension show.

use super::MAX_CANDIDATES;

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
