//! Enum-valued attributes: the closed sets of words some ops take (a comparison's direction,
//! a reduction's kind, a matmul's precision, GELU's approximation).
//!
//! The op table names each set ([`crate::opcode::AttrKind::Enum`]), so `create_op` and the
//! verifier reject a word outside it and code after them (passes, the emitter) reads the value
//! as a Rust enum with [`crate::Attrs::get_enum`] and matches it exhaustively. In the text
//! form and in [`crate::Attr`] the value stays its word (`direction = "lt"`).

use crate::attr::{Attr, Scalar};
use crate::dtype::DType;
use std::fmt;

/// An attribute value from a closed set of words.
pub trait AttrEnum: Copy + Eq + fmt::Debug + 'static {
    /// Every value, in declaration order.
    const ALL: &'static [Self];
    /// Every value's word, in the same order.
    const NAMES: &'static [&'static str];
    /// What the set is called in messages.
    const WHAT: &'static str;

    fn name(self) -> &'static str {
        Self::NAMES[Self::ALL.iter().position(|&v| v == self).expect("value in ALL")]
    }

    fn parse(word: &str) -> Option<Self> {
        Self::NAMES.iter().position(|&n| n == word).map(|i| Self::ALL[i])
    }

    /// The attribute holding this value.
    fn attr(self) -> Attr {
        Attr::Str(self.name().to_string())
    }
}

macro_rules! attr_enum {
    ($(#[$meta:meta])* $name:ident, $what:literal { $($(#[$vmeta:meta])* $variant:ident = $word:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vmeta])* $variant),+
        }

        impl AttrEnum for $name {
            const ALL: &'static [Self] = &[$($name::$variant),+];
            const NAMES: &'static [&'static str] = &[$($word),+];
            const WHAT: &'static str = $what;
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(AttrEnum::name(*self))
            }
        }

        impl std::str::FromStr for $name {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                <$name as AttrEnum>::parse(s)
                    .ok_or_else(|| format!("{} `{s}` is not one of {}", $what, <$name as AttrEnum>::NAMES.join(", ")))
            }
        }
    };
}

attr_enum!(
    /// `compare`'s `direction`.
    Direction, "direction" { Eq = "eq", Ne = "ne", Lt = "lt", Le = "le", Gt = "gt", Ge = "ge" }
);

impl Direction {
    /// StableHLO's spelling (`LT`).
    pub fn stablehlo(self) -> &'static str {
        match self {
            Direction::Eq => "EQ",
            Direction::Ne => "NE",
            Direction::Lt => "LT",
            Direction::Le => "LE",
            Direction::Gt => "GT",
            Direction::Ge => "GE",
        }
    }

    /// The direction with the operands swapped (`a < b` is `b > a`).
    pub fn swapped(self) -> Direction {
        match self {
            Direction::Lt => Direction::Gt,
            Direction::Le => Direction::Ge,
            Direction::Gt => Direction::Lt,
            Direction::Ge => Direction::Le,
            d => d,
        }
    }

    /// Applies the comparison to an ordering (`None`: unordered, NaN involved).
    pub fn holds(self, ord: Option<std::cmp::Ordering>) -> bool {
        use std::cmp::Ordering::*;
        match (self, ord) {
            (Direction::Ne, None) => true,
            (_, None) => false,
            (Direction::Eq, Some(o)) => o == Equal,
            (Direction::Ne, Some(o)) => o != Equal,
            (Direction::Lt, Some(o)) => o == Less,
            (Direction::Le, Some(o)) => o != Greater,
            (Direction::Gt, Some(o)) => o == Greater,
            (Direction::Ge, Some(o)) => o != Less,
        }
    }
}

attr_enum!(
    /// `reduce`'s `kind`.
    ReduceKind, "reduction" { Sum = "sum", Prod = "prod", Max = "max", Min = "min", And = "and", Or = "or" }
);

attr_enum!(
    /// `arg_reduce`'s `kind`.
    ArgReduceKind, "arg reduction" { Argmax = "argmax", Argmin = "argmin" }
);

attr_enum!(
    /// `reduce_window`'s `kind` (pooling).
    WindowKind, "window reduction" { Sum = "sum", Max = "max", Min = "min" }
);

attr_enum!(
    /// `scatter`'s `kind`: how an update combines with the value it lands on.
    ScatterKind, "scatter kind" { Replace = "replace", Add = "add", Mul = "mul", Max = "max", Min = "min" }
);

attr_enum!(
    /// `fft`'s `fft_type`: complex to complex forward / inverse, real to complex (the
    /// non-redundant half), complex to real.
    FftType, "fft type" { Fft = "fft", Ifft = "ifft", Rfft = "rfft", Irfft = "irfft" }
);

attr_enum!(
    /// `scan`'s `kind` (cumulative ops).
    ScanKind, "scan kind" { Sum = "sum", Prod = "prod", Max = "max", Min = "min" }
);

impl ReduceKind {
    /// The value the reduction ignores: its result over no elements, and the padding or mask
    /// fill that leaves a result unchanged (0, 1, the dtype's lowest / highest, false, true).
    pub fn identity(self, dt: DType) -> Scalar {
        match self {
            ReduceKind::Sum | ReduceKind::Or => Scalar::Int(0),
            ReduceKind::Prod | ReduceKind::And => Scalar::Int(1),
            ReduceKind::Max => dt.lowest(),
            ReduceKind::Min => dt.highest(),
        }
    }
}

impl From<WindowKind> for ReduceKind {
    fn from(k: WindowKind) -> ReduceKind {
        match k {
            WindowKind::Sum => ReduceKind::Sum,
            WindowKind::Max => ReduceKind::Max,
            WindowKind::Min => ReduceKind::Min,
        }
    }
}

impl From<ScanKind> for ReduceKind {
    fn from(k: ScanKind) -> ReduceKind {
        match k {
            ScanKind::Sum => ReduceKind::Sum,
            ScanKind::Prod => ReduceKind::Prod,
            ScanKind::Max => ReduceKind::Max,
            ScanKind::Min => ReduceKind::Min,
        }
    }
}

impl ScatterKind {
    /// The reduction combining an update with its target; `None` for `replace`.
    pub fn combiner(self) -> Option<ReduceKind> {
        match self {
            ScatterKind::Replace => None,
            ScatterKind::Add => Some(ReduceKind::Sum),
            ScatterKind::Mul => Some(ReduceKind::Prod),
            ScatterKind::Max => Some(ReduceKind::Max),
            ScatterKind::Min => Some(ReduceKind::Min),
        }
    }
}

attr_enum!(
    /// `gelu`'s `approximate`.
    GeluApproximation, "approximation" { None = "none", Tanh = "tanh" }
);

attr_enum!(
    /// Matmul / convolution precision (the StableHLO precision config of `dot_general` and
    /// `convolution`): on TPU `default` is one bf16 pass with f32 accumulation, `high` three
    /// passes (bf16_3x), `highest` six (f32 accuracy). The one precision type of the project:
    /// the pass pipeline's policy, the driver and the CLI use it too.
    Precision, "precision" { Default = "default", High = "high", Highest = "highest" }
);

impl Precision {
    /// StableHLO's spelling (`HIGHEST`).
    pub fn stablehlo(self) -> &'static str {
        match self {
            Precision::Default => "DEFAULT",
            Precision::High => "HIGH",
            Precision::Highest => "HIGHEST",
        }
    }
}

/// The word set of an [`AttrEnum`], for the op table.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct EnumSpec {
    pub what: &'static str,
    pub names: &'static [&'static str],
}

impl EnumSpec {
    pub const fn of<E: AttrEnum>() -> EnumSpec {
        EnumSpec { what: E::WHAT, names: E::NAMES }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip<E: AttrEnum + fmt::Display>() {
        assert_eq!(E::ALL.len(), E::NAMES.len());
        for &v in E::ALL {
            assert_eq!(E::parse(v.name()), Some(v));
            assert_eq!(v.to_string(), v.name());
        }
        assert_eq!(E::parse("no-such-word"), None);
    }

    #[test]
    fn every_enum_round_trips_through_its_words() {
        round_trip::<Direction>();
        round_trip::<ReduceKind>();
        round_trip::<ArgReduceKind>();
        round_trip::<WindowKind>();
        round_trip::<ScatterKind>();
        round_trip::<ScanKind>();
        round_trip::<GeluApproximation>();
        round_trip::<Precision>();
    }

    #[test]
    fn directions() {
        use std::cmp::Ordering::*;
        assert!(Direction::Le.holds(Some(Equal)) && !Direction::Lt.holds(Some(Equal)));
        assert!(Direction::Ne.holds(None) && !Direction::Eq.holds(None));
        for &d in Direction::ALL {
            for o in [Less, Equal, Greater] {
                assert_eq!(d.swapped().holds(Some(o.reverse())), d.holds(Some(o)));
            }
        }
    }
}
