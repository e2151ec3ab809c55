//! torch dtypes: the serialized `ScalarType` numbers and ATen's type promotion.

use crate::error::ImportError;
use tpuc_ir::DType;

/// Maps torch's `ScalarType` enum number (torch/_export/serde/schema.yaml) to an IR dtype.
pub fn from_torch(n: i64) -> Result<DType, ImportError> {
    Ok(match n {
        1 => DType::U8,
        2 => DType::I8,
        3 => DType::I16,
        4 => DType::I32,
        5 => DType::I64,
        6 => DType::F16,
        7 => DType::F32,
        8 => DType::F64,
        10 => DType::C64,
        11 => DType::C128,
        12 => DType::Bool,
        13 => DType::BF16,
        28 => DType::U16,
        29 => DType::F8E4M3FN,
        30 => DType::F8E5M2,
        34 => DType::U32,
        35 => DType::U64,
        9 => return Err(ImportError::UnsupportedDType("dtype complex32 (torch.chalf) is not supported: StableHLO has no complex type with f16 parts".into())),
        _ => return Err(ImportError::UnknownDType(n)),
    })
}

/// The dtype torch uses for Python floats and `torch.get_default_dtype()`.
pub const DEFAULT_FLOAT: DType = DType::F32;

/// The dtype ATen's CPU kernels compute in: float32 for the 16-bit floats (they load f16/bf16,
/// compute and accumulate in f32 and round once when storing the result), the dtype itself
/// otherwise. Ops that accumulate (pooling, reductions, norms) compute in it so that their
/// results agree with eager's to one rounding step.
pub fn compute_dtype(d: DType) -> DType {
    match d {
        DType::F16 | DType::BF16 => DType::F32,
        d => d,
    }
}

/// Coarse category for `result_type`: bool < integer < floating < complex.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Category {
    Bool,
    Int,
    Float,
    Complex,
}

pub fn category(d: DType) -> Category {
    if d.is_bool() {
        Category::Bool
    } else if d.is_int() {
        Category::Int
    } else if d.is_complex() {
        Category::Complex
    } else {
        Category::Float
    }
}

fn float_rank(d: DType) -> u8 {
    match d {
        DType::F8E4M3FN | DType::F8E5M2 => 0,
        DType::F16 | DType::BF16 => 1,
        DType::F32 => 2,
        _ => 3,
    }
}

/// `torch.promote_types`. `None` where torch refuses (uint16/32/64 with signed types, fp8
/// mixed with other types).
pub fn promote(a: DType, b: DType) -> Option<DType> {
    use DType::*;
    if a == b {
        return Some(a);
    }
    if a == Bool {
        return Some(b);
    }
    if b == Bool {
        return Some(a);
    }
    let barebones = |d: DType| matches!(d, U16 | U32 | U64);
    if barebones(a) || barebones(b) {
        return None;
    }
    let (ca, cb) = (category(a), category(b));
    match (ca, cb) {
        (Category::Int, Category::Int) => {
            let bits = |d: DType| d.size_bytes() * 8;
            match (a.is_unsigned_int(), b.is_unsigned_int()) {
                (false, false) => Some(if bits(a) >= bits(b) { a } else { b }),
                (true, true) => None, // both unsigned and different: one of them is u16/u32/u64
                _ => {
                    let (u, s) = if a.is_unsigned_int() { (a, b) } else { (b, a) };
                    if u != U8 {
                        return None;
                    }
                    // u8 with a signed type: the smallest signed type holding both.
                    Some(match s {
                        I8 | I16 => I16,
                        other => other,
                    })
                }
            }
        }
        (Category::Int, Category::Float) => Some(b),
        (Category::Float, Category::Int) => Some(a),
        (Category::Float, Category::Float) => {
            if float_rank(a) == 0 || float_rank(b) == 0 {
                return None;
            }
            if float_rank(a) == float_rank(b) {
                // f16 with bf16
                Some(F32)
            } else if float_rank(a) > float_rank(b) {
                Some(a)
            } else {
                Some(b)
            }
        }
        (Category::Complex, Category::Complex) => Some(if a == C128 || b == C128 { C128 } else { C64 }),
        (Category::Complex, _) | (_, Category::Complex) => {
            let (c, o) = if ca == Category::Complex { (a, b) } else { (b, a) };
            if c == C128 || o == F64 {
                Some(C128)
            } else {
                Some(C64)
            }
        }
        (Category::Bool, _) | (_, Category::Bool) => Some(if ca == Category::Bool { b } else { a }),
    }
}

/// One participant of ATen's `result_type`.
#[derive(Copy, Clone, Debug, PartialEq)]
pub enum Participant {
    /// A tensor with at least one dimension.
    Dimensioned(DType),
    /// A zero-dimensional tensor.
    ZeroDim(DType),
    /// A Python number (wrapped scalar): its dtype is bool, i64 or f64 / c128.
    Wrapped(DType),
}

fn promote_opt(a: Option<DType>, b: DType) -> Result<Option<DType>, String> {
    match a {
        None => Ok(Some(b)),
        Some(a) => promote(a, b).map(Some).ok_or_else(|| format!("torch does not promote {a} with {b}")),
    }
}

/// `combine_categories` from ATen's TensorIterator.
fn combine(higher: Option<DType>, lower: Option<DType>) -> Result<Option<DType>, String> {
    let (Some(h), Some(l)) = (higher, lower) else { return Ok(higher.or(lower)) };
    if h.is_complex() {
        return Ok(Some(h));
    }
    if l.is_complex() {
        // Keep the value type of a float `higher`.
        if h.is_float() {
            return Ok(Some(if h == DType::F64 { DType::C128 } else { DType::C64 }));
        }
        return Ok(Some(l));
    }
    if h.is_float() {
        return Ok(Some(h));
    }
    if h.is_bool() || l.is_float() {
        return promote_opt(Some(h), l);
    }
    Ok(Some(h))
}

/// ATen's `result_type`: dimensioned tensors beat zero-dim tensors beat Python numbers, unless
/// a lower group has a higher category (bool < int < float < complex). A wrapped float counts
/// as the default dtype, a wrapped complex as the default complex dtype.
pub fn result_type(parts: &[Participant]) -> Result<DType, String> {
    let (mut dim, mut zero, mut wrapped) = (None, None, None);
    for p in parts {
        match *p {
            Participant::Dimensioned(d) => dim = promote_opt(dim, d)?,
            Participant::ZeroDim(d) => zero = promote_opt(zero, d)?,
            Participant::Wrapped(d) => {
                let d = match category(d) {
                    Category::Float => DEFAULT_FLOAT,
                    Category::Complex => DType::C64,
                    _ => d,
                };
                wrapped = promote_opt(wrapped, d)?
            }
        }
    }
    let r = combine(dim, combine(zero, wrapped)?)?;
    r.ok_or_else(|| "result_type of nothing".to_string())
}

#[cfg(test)]
mod tests {
    use super::Participant::*;
    use super::*;
    use DType::*;

    #[test]
    fn promotion_rules() {
        assert_eq!(result_type(&[Dimensioned(F16), Wrapped(F64)]), Ok(F16));
        assert_eq!(result_type(&[Dimensioned(I32), Wrapped(F64)]), Ok(F32));
        assert_eq!(result_type(&[Dimensioned(I32), Wrapped(I64)]), Ok(I32));
        assert_eq!(result_type(&[Dimensioned(F32), ZeroDim(F64)]), Ok(F32));
        assert_eq!(result_type(&[Dimensioned(I32), ZeroDim(F64)]), Ok(F64));
        assert_eq!(result_type(&[Dimensioned(Bool), Wrapped(Bool)]), Ok(Bool));
        assert_eq!(result_type(&[Dimensioned(Bool), Wrapped(I64)]), Ok(I64));
        assert_eq!(result_type(&[Dimensioned(U8), Dimensioned(I8)]), Ok(I16));
        assert_eq!(result_type(&[Dimensioned(BF16), Dimensioned(F16)]), Ok(F32));
        assert_eq!(result_type(&[ZeroDim(I64), Wrapped(F64)]), Ok(F32));
        assert_eq!(result_type(&[Dimensioned(I64), ZeroDim(I32)]), Ok(I64));
        assert_eq!(result_type(&[Dimensioned(I8), ZeroDim(I64)]), Ok(I8));
        assert_eq!(result_type(&[Dimensioned(F32), Wrapped(C128)]), Ok(C64));
    }
}
