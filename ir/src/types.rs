//! Tensor types: a dtype and a list of dimensions, each static or symbolic.

use crate::dtype::DType;
use crate::sym::SymExpr;
use smallvec::SmallVec;
use std::fmt;

/// One dimension of a tensor type. `Sym` never holds a constant expression: constructors fold
/// those into `Static`, so `==` on dims is exact.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Dim {
    Static(i64),
    Sym(SymExpr),
}

impl Dim {
    pub fn from_expr(e: SymExpr) -> Dim {
        match e.as_const() {
            Some(c) => Dim::Static(c),
            None => Dim::Sym(e),
        }
    }

    pub fn symbol(name: &str) -> Dim {
        Dim::Sym(SymExpr::symbol(name))
    }

    pub fn as_static(&self) -> Option<i64> {
        match self {
            Dim::Static(n) => Some(*n),
            Dim::Sym(_) => None,
        }
    }

    pub fn is_static(&self) -> bool {
        matches!(self, Dim::Static(_))
    }

    pub fn to_expr(&self) -> SymExpr {
        match self {
            Dim::Static(n) => SymExpr::constant(*n),
            Dim::Sym(e) => e.clone(),
        }
    }

    pub fn mul(&self, other: &Dim) -> Dim {
        match (self, other) {
            (Dim::Static(a), Dim::Static(b)) => Dim::Static(a.wrapping_mul(*b)),
            _ => Dim::from_expr(self.to_expr().mul(&other.to_expr())),
        }
    }

    pub fn add(&self, other: &Dim) -> Dim {
        match (self, other) {
            (Dim::Static(a), Dim::Static(b)) => Dim::Static(a.wrapping_add(*b)),
            _ => Dim::from_expr(self.to_expr().add(&other.to_expr())),
        }
    }

    pub fn is_one(&self) -> bool {
        matches!(self, Dim::Static(1))
    }
}

impl From<i64> for Dim {
    fn from(n: i64) -> Dim {
        Dim::Static(n)
    }
}

impl fmt::Display for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dim::Static(n) => write!(f, "{n}"),
            // A symbol whose name holds an `x` is parenthesized: bare, its `x` would read as the
            // separator of a tensor type's dimensions (`tensor<(max_len)x4xf32>`).
            Dim::Sym(e) if e.is_atomic() && !e.as_symbol().is_some_and(|s| s.contains('x')) => write!(f, "{e}"),
            Dim::Sym(e) => write!(f, "({e})"),
        }
    }
}

pub type Dims = SmallVec<[Dim; 4]>;

/// A ranked tensor type. Rank 0 is a scalar.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TensorType {
    pub dtype: DType,
    pub dims: Dims,
}

impl TensorType {
    pub fn new(dtype: DType, dims: impl IntoIterator<Item = Dim>) -> Self {
        TensorType { dtype, dims: dims.into_iter().collect() }
    }

    pub fn from_static(dtype: DType, dims: &[i64]) -> Self {
        TensorType { dtype, dims: dims.iter().map(|&d| Dim::Static(d)).collect() }
    }

    pub fn scalar(dtype: DType) -> Self {
        TensorType { dtype, dims: SmallVec::new() }
    }

    pub fn rank(&self) -> usize {
        self.dims.len()
    }

    pub fn is_static(&self) -> bool {
        self.dims.iter().all(Dim::is_static)
    }

    /// The dims if all are static.
    pub fn static_dims(&self) -> Option<Vec<i64>> {
        self.dims.iter().map(Dim::as_static).collect()
    }

    /// Number of elements if all dims are static.
    pub fn num_elements(&self) -> Option<i64> {
        self.dims.iter().try_fold(1i64, |acc, d| d.as_static().and_then(|n| acc.checked_mul(n)))
    }

    /// Number of elements as an expression (static or symbolic).
    pub fn num_elements_expr(&self) -> SymExpr {
        self.dims.iter().fold(SymExpr::constant(1), |acc, d| acc.mul(&d.to_expr()))
    }

    /// Size in bytes if static (`None` also for a negative dim or a size that overflows).
    pub fn size_bytes(&self) -> Option<usize> {
        let n = usize::try_from(self.num_elements()?).ok()?;
        n.checked_mul(self.dtype.size_bytes())
    }

    pub fn with_dtype(&self, dtype: DType) -> Self {
        TensorType { dtype, dims: self.dims.clone() }
    }

    pub fn with_dims(&self, dims: impl IntoIterator<Item = Dim>) -> Self {
        TensorType::new(self.dtype, dims)
    }
}

impl fmt::Display for TensorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("tensor<")?;
        for d in &self.dims {
            write!(f, "{d}x")?;
        }
        write!(f, "{}>", self.dtype)
    }
}
