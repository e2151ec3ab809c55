//! Element types of tensors.

use crate::attr::Scalar;
use std::fmt;
use std::str::FromStr;

/// The element type of a tensor.
///
/// The text form (`f32`, `bf16`, `i64`, `bool`, ...) is what the IR printer writes and the
/// parser reads; [`DType::mlir_name`] gives the StableHLO / MLIR spelling.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DType {
    Bool,
    I8,
    I16,
    I32,
    I64,
    U8,
    U16,
    U32,
    U64,
    F8E4M3FN,
    F8E5M2,
    F16,
    BF16,
    F32,
    F64,
    /// Complex with f32 parts.
    C64,
    /// Complex with f64 parts.
    C128,
}

/// Broad class of a dtype, as used by type-promotion and verifier rules.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DTypeClass {
    Bool,
    SignedInt,
    UnsignedInt,
    Float,
    Complex,
}

impl DType {
    pub const ALL: [DType; 17] = [
        DType::Bool,
        DType::I8,
        DType::I16,
        DType::I32,
        DType::I64,
        DType::U8,
        DType::U16,
        DType::U32,
        DType::U64,
        DType::F8E4M3FN,
        DType::F8E5M2,
        DType::F16,
        DType::BF16,
        DType::F32,
        DType::F64,
        DType::C64,
        DType::C128,
    ];

    /// The IR text spelling.
    pub fn name(self) -> &'static str {
        match self {
            DType::Bool => "bool",
            DType::I8 => "i8",
            DType::I16 => "i16",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::U8 => "u8",
            DType::U16 => "u16",
            DType::U32 => "u32",
            DType::U64 => "u64",
            DType::F8E4M3FN => "f8e4m3fn",
            DType::F8E5M2 => "f8e5m2",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::C64 => "c64",
            DType::C128 => "c128",
        }
    }

    /// The MLIR builtin type spelling used in StableHLO (`i1`, `ui8`, `f8E4M3FN`, ...).
    pub fn mlir_name(self) -> &'static str {
        match self {
            DType::Bool => "i1",
            DType::I8 => "i8",
            DType::I16 => "i16",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::U8 => "ui8",
            DType::U16 => "ui16",
            DType::U32 => "ui32",
            DType::U64 => "ui64",
            DType::F8E4M3FN => "f8E4M3FN",
            DType::F8E5M2 => "f8E5M2",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::C64 => "complex<f32>",
            DType::C128 => "complex<f64>",
        }
    }

    /// Size of one element in bytes (bool is stored as one byte, as PyTorch does).
    pub fn size_bytes(self) -> usize {
        match self {
            DType::Bool | DType::I8 | DType::U8 | DType::F8E4M3FN | DType::F8E5M2 => 1,
            DType::I16 | DType::U16 | DType::F16 | DType::BF16 => 2,
            DType::I32 | DType::U32 | DType::F32 => 4,
            DType::I64 | DType::U64 | DType::F64 | DType::C64 => 8,
            DType::C128 => 16,
        }
    }

    pub fn class(self) -> DTypeClass {
        match self {
            DType::Bool => DTypeClass::Bool,
            DType::I8 | DType::I16 | DType::I32 | DType::I64 => DTypeClass::SignedInt,
            DType::U8 | DType::U16 | DType::U32 | DType::U64 => DTypeClass::UnsignedInt,
            DType::F8E4M3FN | DType::F8E5M2 | DType::F16 | DType::BF16 | DType::F32 | DType::F64 => {
                DTypeClass::Float
            }
            DType::C64 | DType::C128 => DTypeClass::Complex,
        }
    }

    pub fn is_float(self) -> bool {
        self.class() == DTypeClass::Float
    }
    pub fn is_int(self) -> bool {
        matches!(self.class(), DTypeClass::SignedInt | DTypeClass::UnsignedInt)
    }
    pub fn is_signed_int(self) -> bool {
        self.class() == DTypeClass::SignedInt
    }
    pub fn is_unsigned_int(self) -> bool {
        self.class() == DTypeClass::UnsignedInt
    }
    pub fn is_bool(self) -> bool {
        self == DType::Bool
    }
    /// The float type of a complex type's parts (c64: f32, c128: f64); other types unchanged.
    pub fn complex_part(self) -> DType {
        match self {
            DType::C64 => DType::F32,
            DType::C128 => DType::F64,
            d => d,
        }
    }

    /// The complex type with parts of this float type (f32: c64, f64: c128), if there is one.
    pub fn complex_of(self) -> Option<DType> {
        match self {
            DType::F32 => Some(DType::C64),
            DType::F64 => Some(DType::C128),
            _ => None,
        }
    }

    pub fn is_complex(self) -> bool {
        self.class() == DTypeClass::Complex
    }

    /// Whether the dtype has infinities: every float and complex dtype but `f8e4m3fn`, which
    /// spends its top exponent on finite values (up to 448) and NaN. Converting an infinity to
    /// it gives NaN, so an identity or padding value of "-inf" must not be used there.
    pub fn has_inf(self) -> bool {
        match self {
            DType::F8E4M3FN => false,
            d => d.is_float() || d.is_complex(),
        }
    }

    /// The largest finite value of a float dtype (`torch.finfo(d).max`; complex dtypes give
    /// their parts'), `None` for integers and bool.
    pub fn finite_max(self) -> Option<f64> {
        Some(match self.complex_part() {
            DType::F8E4M3FN => 448.0,
            DType::F8E5M2 => 57344.0,
            DType::F16 => 65504.0,
            DType::BF16 => 3.3895313892515355e38,
            DType::F32 => f64::from(f32::MAX),
            DType::F64 => f64::MAX,
            _ => return None,
        })
    }

    /// The gap between 1 and the next larger value of a float dtype (`torch.finfo(d).eps`;
    /// complex dtypes give their parts'), `None` for integers and bool.
    pub fn eps(self) -> Option<f64> {
        Some(match self.complex_part() {
            DType::F8E4M3FN => 0.125,
            DType::F8E5M2 => 0.25,
            DType::F16 => 0.0009765625,
            DType::BF16 => 0.0078125,
            DType::F32 => f64::from(f32::EPSILON),
            DType::F64 => f64::EPSILON,
            _ => return None,
        })
    }

    /// The values of an integer dtype, inclusive (`torch.iinfo(d)`; bool is `0..=1`), `None`
    /// for floats and complex.
    pub fn int_range(self) -> Option<(i128, i128)> {
        Some(match self {
            DType::Bool => (0, 1),
            DType::I8 => (i8::MIN.into(), i8::MAX.into()),
            DType::I16 => (i16::MIN.into(), i16::MAX.into()),
            DType::I32 => (i32::MIN.into(), i32::MAX.into()),
            DType::I64 => (i64::MIN.into(), i64::MAX.into()),
            DType::U8 => (0, u8::MAX.into()),
            DType::U16 => (0, u16::MAX.into()),
            DType::U32 => (0, u32::MAX.into()),
            DType::U64 => (0, u64::MAX.into()),
            _ => return None,
        })
    }

    /// The smallest value of the dtype, which `max` ignores: the identity of max reductions
    /// and the padding of max windows. `-inf` for floats with infinities, the most negative
    /// finite value for those without (`-448` for `f8e4m3fn`), MIN for integers, `false` for
    /// bool; complex dtypes give their real part's (a [`Scalar`] is the real part).
    pub fn lowest(self) -> Scalar {
        self.extreme(false)
    }

    /// The largest value of the dtype, which `min` ignores: `+inf` for floats with infinities,
    /// the largest finite value for those without, MAX for integers, `true` for bool.
    pub fn highest(self) -> Scalar {
        self.extreme(true)
    }

    fn extreme(self, high: bool) -> Scalar {
        let sign = if high { 1.0 } else { -1.0 };
        match self {
            DType::Bool => Scalar::Bool(high),
            d if d.has_inf() => Scalar::Float(sign * f64::INFINITY),
            d => match (d.finite_max(), d.int_range()) {
                (Some(m), _) => Scalar::Float(sign * m),
                (None, Some((lo, hi))) => {
                    let v = if high { hi } else { lo };
                    if d.is_unsigned_int() {
                        Scalar::UInt(v as u64)
                    } else {
                        Scalar::Int(v as i64)
                    }
                }
                (None, None) => unreachable!("every dtype is bool, float, complex or integer"),
            },
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown dtype `{0}`")]
pub struct UnknownDType(pub String);

impl FromStr for DType {
    type Err = UnknownDType;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        DType::ALL
            .iter()
            .copied()
            .find(|d| d.name() == s)
            .ok_or_else(|| UnknownDType(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Expected values are torch.finfo / torch.iinfo of the matching torch dtype.

    fn extremes(d: DType) -> (Scalar, Scalar) {
        (d.lowest(), d.highest())
    }

    #[test]
    fn bool_extremes() {
        assert_eq!(extremes(DType::Bool), (Scalar::Bool(false), Scalar::Bool(true)));
        assert_eq!(DType::Bool.int_range(), Some((0, 1)));
        assert!(!DType::Bool.has_inf());
        assert_eq!((DType::Bool.finite_max(), DType::Bool.eps()), (None, None));
    }

    #[test]
    fn signed_int_extremes() {
        let cases = [
            (DType::I8, -128i64, 127i64),
            (DType::I16, -32768, 32767),
            (DType::I32, -2147483648, 2147483647),
            (DType::I64, -9223372036854775808, 9223372036854775807),
        ];
        for (d, lo, hi) in cases {
            assert_eq!(extremes(d), (Scalar::Int(lo), Scalar::Int(hi)), "{d}");
            assert_eq!(d.int_range(), Some((lo.into(), hi.into())), "{d}");
            assert!(!d.has_inf() && d.finite_max().is_none() && d.eps().is_none(), "{d}");
        }
    }

    #[test]
    fn unsigned_int_extremes() {
        let cases = [
            (DType::U8, 255u64),
            (DType::U16, 65535),
            (DType::U32, 4294967295),
            (DType::U64, 18446744073709551615),
        ];
        for (d, hi) in cases {
            assert_eq!(extremes(d), (Scalar::UInt(0), Scalar::UInt(hi)), "{d}");
            assert_eq!(d.int_range(), Some((0, hi.into())), "{d}");
            assert!(!d.has_inf() && d.finite_max().is_none() && d.eps().is_none(), "{d}");
        }
    }

    #[test]
    fn f8e4m3fn_has_no_infinity_so_its_extremes_are_finite() {
        let d = DType::F8E4M3FN;
        assert!(!d.has_inf());
        assert_eq!(extremes(d), (Scalar::Float(-448.0), Scalar::Float(448.0)));
        assert_eq!((d.finite_max(), d.eps()), (Some(448.0), Some(0.125)));
        assert_eq!(d.int_range(), None);
        // Stored as an element, the identity of max is the lowest finite code, not NaN.
        for s in [d.lowest(), d.highest()] {
            let back = Scalar::from_bytes(d, &s.to_bytes(d));
            assert_eq!(back, s);
        }
        assert_eq!(d.lowest().to_bytes(d), vec![0xFE]);
        assert_eq!(d.highest().to_bytes(d), vec![0x7E]);
    }

    #[test]
    fn float_extremes_with_infinities() {
        let cases = [
            (DType::F8E5M2, 57344.0, 0.25),
            (DType::F16, 65504.0, 0.0009765625),
            (DType::BF16, 3.3895313892515355e38, 0.0078125),
            (DType::F32, 3.4028234663852886e38, 1.1920928955078125e-07),
            (DType::F64, 1.7976931348623157e308, 2.220446049250313e-16),
        ];
        for (d, max, eps) in cases {
            assert!(d.has_inf(), "{d}");
            assert_eq!(extremes(d), (Scalar::Float(f64::NEG_INFINITY), Scalar::Float(f64::INFINITY)), "{d}");
            assert_eq!((d.finite_max(), d.eps(), d.int_range()), (Some(max), Some(eps), None), "{d}");
            // The largest finite value is one the dtype holds exactly.
            assert_eq!(Scalar::from_bytes(d, &Scalar::Float(max).to_bytes(d)), Scalar::Float(max), "{d}");
        }
    }

    #[test]
    fn complex_extremes_are_their_parts() {
        for (c, part) in [(DType::C64, DType::F32), (DType::C128, DType::F64)] {
            assert!(c.has_inf());
            assert_eq!(extremes(c), extremes(part));
            assert_eq!((c.finite_max(), c.eps(), c.int_range()), (part.finite_max(), part.eps(), None));
        }
    }

    #[test]
    fn every_dtype_has_ordered_extremes() {
        for d in DType::ALL {
            let (lo, hi) = extremes(d);
            assert!(lo.as_f64() < hi.as_f64(), "{d}");
            assert_eq!(d.has_inf(), (d.is_float() || d.is_complex()) && d != DType::F8E4M3FN, "{d}");
        }
    }
}
