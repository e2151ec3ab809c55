//! Where the valid part of a padded value lies. A program specialized to one bucket (the
//! `specialize` pass) pads every symbolic dim to a static size; the layout of each of `main`'s
//! results, recorded in its [`crate::ResultInfo`], says which positions hold the result of
//! the symbolic program, so the caller can cut them out.
//!
//! Text form (a result's `layout` attribute, one entry per dim):
//! `[exact, uniform(s), factors((8, s)), factors((2, 2), (8, s))]`.

use crate::sym::SymExpr;
use std::fmt;

/// One piece of a padded dim: `padded` positions of which the first `extent` are valid.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Factor {
    pub padded: i64,
    pub extent: SymExpr,
}

/// How the valid part of one dim sits in its padded buffer.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum DimLayout {
    /// Not padded: every position is valid.
    Exact,
    /// Padded to the bucket, but every position along the dim holds the same contents (the
    /// first `extent` are the valid ones).
    Uniform(SymExpr),
    /// Padded; valid where every factor's index is below its extent. The dim is the row-major
    /// product of the factors, outer to inner (`reshape [2, s] -> [2*s]` keeps both pieces).
    Factors(Vec<Factor>),
}

/// The layout of every dim of one value.
pub type Layout = Vec<DimLayout>;

impl DimLayout {
    pub fn is_exact(&self) -> bool {
        matches!(self, DimLayout::Exact)
    }

    /// The factors of a padded dim of `padded` positions (a uniform dim counts as a prefix).
    pub fn factors(&self, padded: i64) -> Vec<Factor> {
        match self {
            DimLayout::Exact => vec![Factor { padded, extent: SymExpr::constant(padded) }],
            DimLayout::Uniform(e) => vec![Factor { padded, extent: e.clone() }],
            DimLayout::Factors(f) => f.clone(),
        }
    }

    /// A plain prefix: `Exact` (`Some(None)`), `Uniform` or one factor (`Some(Some(extent))`);
    /// `None` for a product of factors.
    pub fn prefix_extent(&self) -> Option<Option<&SymExpr>> {
        match self {
            DimLayout::Exact => Some(None),
            DimLayout::Uniform(e) => Some(Some(e)),
            DimLayout::Factors(f) if f.len() == 1 => Some(Some(&f[0].extent)),
            DimLayout::Factors(_) => None,
        }
    }
}

impl fmt::Display for DimLayout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DimLayout::Exact => f.write_str("exact"),
            DimLayout::Uniform(e) => write!(f, "uniform({e})"),
            DimLayout::Factors(fs) => {
                f.write_str("factors(")?;
                for (i, x) in fs.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "({}, {})", x.padded, x.extent)?;
                }
                f.write_str(")")
            }
        }
    }
}

/// `[exact, uniform(s), ...]`: how a result's `layout` attribute prints.
pub fn layout_text(layout: &[DimLayout]) -> String {
    format!("[{}]", layout.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", "))
}
