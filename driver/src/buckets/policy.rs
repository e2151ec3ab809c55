//! The planner's inputs: a symbol's range ([`SymbolRange`], checked by `bounds`) and its bucket
//! policy ([`BucketPolicy`], parsed from and printed back to `auto`, `linear:K`, a list or
//! `hist:FILE[:N]`).

use super::{BucketError, MAX_SIZE};
use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

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

pub(super) fn join(v: &[i64]) -> String {
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
