//! Element types of tensors.

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
