//! Op attributes and dense tensor constants.

use crate::dtype::DType;
use crate::types::TensorType;
use bytes::Bytes;
use half::{bf16, f16};
use std::fmt;

/// A scalar value of any dtype, used for splat constants.
#[derive(Copy, Clone, Debug, PartialEq)]
pub enum Scalar {
    Bool(bool),
    Int(i64),
    UInt(u64),
    Float(f64),
}

impl Scalar {
    /// Little-endian bytes of this value converted to `dtype` (floats round to nearest; ints
    /// wrap; bool is 0/1). Complex dtypes take the value as the real part.
    pub fn to_bytes(self, dtype: DType) -> Vec<u8> {
        let f = self.as_f64();
        let i = self.as_i64();
        match dtype {
            DType::Bool => vec![u8::from(self.as_bool())],
            DType::I8 => (i as i8).to_le_bytes().to_vec(),
            DType::I16 => (i as i16).to_le_bytes().to_vec(),
            DType::I32 => (i as i32).to_le_bytes().to_vec(),
            DType::I64 => i.to_le_bytes().to_vec(),
            DType::U8 => (i as u8).to_le_bytes().to_vec(),
            DType::U16 => (i as u16).to_le_bytes().to_vec(),
            DType::U32 => (i as u32).to_le_bytes().to_vec(),
            DType::U64 => match self {
                Scalar::UInt(u) => u.to_le_bytes().to_vec(),
                _ => (i as u64).to_le_bytes().to_vec(),
            },
            DType::F16 => f16::from_f64(f).to_le_bytes().to_vec(),
            DType::BF16 => bf16::from_f64(f).to_le_bytes().to_vec(),
            DType::F32 => (f as f32).to_le_bytes().to_vec(),
            DType::F64 => f.to_le_bytes().to_vec(),
            DType::F8E4M3FN => vec![f8e4m3fn_from_f64(f)],
            DType::F8E5M2 => vec![f8e5m2_from_f64(f)],
            DType::C64 => [(f as f32).to_le_bytes(), 0f32.to_le_bytes()].concat(),
            DType::C128 => [f.to_le_bytes(), 0f64.to_le_bytes()].concat(),
        }
    }

    /// Reads one element of `dtype` from little-endian bytes (the real part for complex).
    pub fn from_bytes(dtype: DType, b: &[u8]) -> Scalar {
        fn arr<const N: usize>(b: &[u8]) -> [u8; N] {
            b[..N].try_into().expect("element bytes")
        }
        match dtype {
            DType::Bool => Scalar::Bool(b[0] != 0),
            DType::I8 => Scalar::Int(b[0] as i8 as i64),
            DType::I16 => Scalar::Int(i16::from_le_bytes(arr(b)) as i64),
            DType::I32 => Scalar::Int(i32::from_le_bytes(arr(b)) as i64),
            DType::I64 => Scalar::Int(i64::from_le_bytes(arr(b))),
            DType::U8 => Scalar::UInt(b[0] as u64),
            DType::U16 => Scalar::UInt(u16::from_le_bytes(arr(b)) as u64),
            DType::U32 => Scalar::UInt(u32::from_le_bytes(arr(b)) as u64),
            DType::U64 => Scalar::UInt(u64::from_le_bytes(arr(b))),
            DType::F16 => Scalar::Float(f16::from_le_bytes(arr(b)).to_f64()),
            DType::BF16 => Scalar::Float(bf16::from_le_bytes(arr(b)).to_f64()),
            DType::F32 | DType::C64 => Scalar::Float(f32::from_le_bytes(arr(b)) as f64),
            DType::F64 | DType::C128 => Scalar::Float(f64::from_le_bytes(arr(b))),
            DType::F8E4M3FN => Scalar::Float(f8e4m3fn_to_f64(b[0])),
            DType::F8E5M2 => Scalar::Float(f8e5m2_to_f64(b[0])),
        }
    }

    pub fn as_f64(self) -> f64 {
        match self {
            Scalar::Bool(b) => f64::from(u8::from(b)),
            Scalar::Int(i) => i as f64,
            Scalar::UInt(u) => u as f64,
            Scalar::Float(f) => f,
        }
    }

    pub fn as_i64(self) -> i64 {
        match self {
            Scalar::Bool(b) => i64::from(b),
            Scalar::Int(i) => i,
            Scalar::UInt(u) => u as i64,
            Scalar::Float(f) => f as i64,
        }
    }

    pub fn as_bool(self) -> bool {
        match self {
            Scalar::Bool(b) => b,
            Scalar::Int(i) => i != 0,
            Scalar::UInt(u) => u != 0,
            Scalar::Float(f) => f != 0.0,
        }
    }
}

// fp8 conversions (round to nearest even on the way in). f8E4M3FN: bias 7, no infinities, NaN
// is S.1111.111, max 448. f8E5M2: bias 15, IEEE-like with infinities.
fn f8e4m3fn_to_f64(b: u8) -> f64 {
    let sign = if b & 0x80 != 0 { -1.0 } else { 1.0 };
    let e = ((b >> 3) & 0xF) as i32;
    let m = (b & 0x7) as f64;
    if e == 0xF && (b & 0x7) == 0x7 {
        return f64::NAN;
    }
    if e == 0 {
        sign * m / 8.0 * 2f64.powi(-6)
    } else {
        sign * (1.0 + m / 8.0) * 2f64.powi(e - 7)
    }
}

fn f8e5m2_to_f64(b: u8) -> f64 {
    // f8E5M2 is the top byte of an IEEE f16.
    f16::from_bits((b as u16) << 8).to_f64()
}

fn f8_from_f64_generic(f: f64, decode: fn(u8) -> f64) -> u8 {
    if f.is_nan() {
        return 0x7F;
    }
    // Exhaustive nearest search over the 256 codes (ties to even code), skipping NaNs.
    let mut best = 0u8;
    let mut best_err = f64::INFINITY;
    for code in 0..=255u8 {
        let v = decode(code);
        if v.is_nan() {
            continue;
        }
        let err = (v - f).abs();
        if err < best_err || (err == best_err && code & 1 == 0 && (v.is_sign_negative() == f.is_sign_negative())) {
            best = code;
            best_err = err;
        }
    }
    best
}

fn f8e4m3fn_from_f64(f: f64) -> u8 {
    // As PyTorch converts: f8E4M3FN has no infinity, and magnitudes of 480 or more (past the
    // rounding midpoint above the largest finite value 448) become NaN rather than saturating.
    if f.is_nan() || f.abs() >= 480.0 {
        return if f.is_sign_negative() && !f.is_nan() { 0xFF } else { 0x7F };
    }
    f8_from_f64_generic(f, f8e4m3fn_to_f64)
}

fn f8e5m2_from_f64(f: f64) -> u8 {
    if f.is_nan() {
        return 0x7E;
    }
    // As in f16: from halfway past the largest finite value (57344) on, round to infinity
    // (which the nearest-value search below would never pick).
    if f.abs() >= 61440.0 {
        return if f < 0.0 { 0xFC } else { 0x7C };
    }
    f8_from_f64_generic(f, f8e5m2_to_f64)
}

/// A dense tensor value with a static type: either one element repeated (`splat`) or all
/// elements, little-endian, row-major. The bytes are shared (`Bytes`), so weights can point into a
/// memory-mapped archive without copying.
#[derive(Clone, PartialEq)]
pub struct TensorData {
    pub ty: TensorType,
    bytes: Bytes,
    splat: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TensorDataError {
    #[error("tensor data needs a static type, got {0}")]
    NotStatic(Box<TensorType>),
    #[error("tensor data for {ty} needs {expected} bytes, got {got}")]
    WrongLength { ty: Box<TensorType>, expected: usize, got: usize },
}

impl TensorData {
    /// All elements. `bytes.len()` must equal the type's size.
    pub fn new(ty: TensorType, bytes: Bytes) -> Result<Self, TensorDataError> {
        let expected = ty.size_bytes().ok_or_else(|| TensorDataError::NotStatic(Box::new(ty.clone())))?;
        if bytes.len() != expected {
            return Err(TensorDataError::WrongLength { ty: Box::new(ty), expected, got: bytes.len() });
        }
        Ok(TensorData { ty, bytes, splat: false })
    }

    /// One value repeated over a static type.
    /// [`TensorData::new`] over bytes owned as a vector.
    pub fn from_vec(ty: TensorType, bytes: Vec<u8>) -> Result<Self, TensorDataError> {
        Self::new(ty, Bytes::from(bytes))
    }

    pub fn splat(ty: TensorType, value: Scalar) -> Result<Self, TensorDataError> {
        if !ty.is_static() {
            return Err(TensorDataError::NotStatic(Box::new(ty)));
        }
        let bytes = Bytes::from(value.to_bytes(ty.dtype));
        Ok(TensorData { ty, bytes, splat: true })
    }

    /// One element's raw bytes repeated over a static type.
    pub fn splat_bytes(ty: TensorType, element: Bytes) -> Result<Self, TensorDataError> {
        if !ty.is_static() {
            return Err(TensorDataError::NotStatic(Box::new(ty)));
        }
        let expected = ty.dtype.size_bytes();
        if element.len() != expected {
            return Err(TensorDataError::WrongLength { ty: Box::new(ty), expected, got: element.len() });
        }
        Ok(TensorData { ty, bytes: element, splat: true })
    }

    pub fn is_splat(&self) -> bool {
        self.splat
    }

    /// The raw bytes: one element if splat, otherwise all.
    pub fn raw_bytes(&self) -> &Bytes {
        &self.bytes
    }

    /// The splat value, or the only element of a one-element tensor.
    pub fn splat_value(&self) -> Option<Scalar> {
        if self.splat || self.ty.num_elements() == Some(1) {
            Some(Scalar::from_bytes(self.ty.dtype, &self.bytes))
        } else {
            None
        }
    }

    /// All elements as bytes (expands a splat).
    pub fn to_dense_bytes(&self) -> Bytes {
        if !self.splat {
            return self.bytes.clone();
        }
        let n = self.ty.num_elements().unwrap_or(0) as usize;
        Bytes::from(self.bytes.repeat(n))
    }

    /// Element `i` (row-major) as a scalar.
    pub fn element(&self, i: usize) -> Scalar {
        let sz = self.ty.dtype.size_bytes();
        let off = if self.splat { 0 } else { i * sz };
        Scalar::from_bytes(self.ty.dtype, &self.bytes[off..off + sz])
    }

    /// Same bytes reinterpreted with another shape of equal element count.
    pub fn reshaped(&self, ty: TensorType) -> Result<Self, TensorDataError> {
        if self.splat {
            Self::splat_bytes(ty, self.bytes.clone())
        } else {
            Self::new(ty, self.bytes.clone())
        }
    }
}

impl fmt::Debug for TensorData {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TensorData({}, {} bytes{})", self.ty, self.bytes.len(), if self.splat { ", splat" } else { "" })
    }
}

/// An attribute value.
#[derive(Clone, Debug, PartialEq)]
pub enum Attr {
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Ints(Vec<i64>),
    DType(DType),
    Tensor(TensorData),
}

impl Attr {
    pub fn kind_name(&self) -> &'static str {
        match self {
            Attr::Bool(_) => "bool",
            Attr::Int(_) => "int",
            Attr::Float(_) => "float",
            Attr::Str(_) => "string",
            Attr::Ints(_) => "int list",
            Attr::DType(_) => "dtype",
            Attr::Tensor(_) => "tensor",
        }
    }
}

/// The attributes of one op, sorted by name (so printing is deterministic).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Attrs(Vec<(AttrName, Attr)>);

/// An attribute's name: the op table's names are `'static` (no allocation to build, clone or
/// drop an op's attributes); a name read from text that no op declares is owned.
pub type AttrName = std::borrow::Cow<'static, str>;

/// `name` as an [`AttrName`], borrowed from the op table when some op declares it.
pub fn attr_name(name: &str) -> AttrName {
    static NAMES: std::sync::OnceLock<std::collections::HashSet<&'static str>> = std::sync::OnceLock::new();
    let names = NAMES.get_or_init(|| {
        crate::Opcode::ALL.iter().flat_map(|op| op.info().attrs.iter().map(|a| a.name)).collect()
    });
    match names.get(name) {
        Some(&s) => AttrName::Borrowed(s),
        None => AttrName::Owned(name.to_string()),
    }
}

impl Attrs {
    pub fn new() -> Self {
        Attrs(Vec::new())
    }

    pub fn with(mut self, name: impl Into<AttrName>, value: Attr) -> Self {
        self.set(name, value);
        self
    }

    pub fn set(&mut self, name: impl Into<AttrName>, value: Attr) {
        let name = name.into();
        match self.0.binary_search_by(|(k, _)| k.as_ref().cmp(name.as_ref())) {
            Ok(i) => self.0[i].1 = value,
            Err(i) => self.0.insert(i, (name, value)),
        }
    }

    /// Sets every attribute of `other`, keeping the others.
    pub fn update(&mut self, other: Attrs) {
        for (name, value) in other.0 {
            self.set(name, value);
        }
    }

    pub fn get(&self, name: &str) -> Option<&Attr> {
        self.0.binary_search_by(|(k, _)| k.as_ref().cmp(name)).ok().map(|i| &self.0[i].1)
    }

    pub fn remove(&mut self, name: &str) -> Option<Attr> {
        self.0.binary_search_by(|(k, _)| k.as_ref().cmp(name)).ok().map(|i| self.0.remove(i).1)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &Attr)> {
        self.0.iter().map(|(k, v)| (k.as_ref(), v))
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn int(&self, name: &str) -> Option<i64> {
        match self.get(name) {
            Some(Attr::Int(v)) => Some(*v),
            _ => None,
        }
    }

    pub fn float(&self, name: &str) -> Option<f64> {
        match self.get(name) {
            Some(Attr::Float(v)) => Some(*v),
            Some(Attr::Int(v)) => Some(*v as f64),
            _ => None,
        }
    }

    pub fn bool(&self, name: &str) -> Option<bool> {
        match self.get(name) {
            Some(Attr::Bool(v)) => Some(*v),
            _ => None,
        }
    }

    /// An enum-valued attribute ([`crate::enums`]); `None` when absent or not one of its
    /// words (which `create_op` and the verifier refuse).
    pub fn get_enum<E: crate::enums::AttrEnum>(&self, name: &str) -> Option<E> {
        self.str(name).and_then(E::parse)
    }

    pub fn str(&self, name: &str) -> Option<&str> {
        match self.get(name) {
            Some(Attr::Str(v)) => Some(v),
            _ => None,
        }
    }

    pub fn ints(&self, name: &str) -> Option<&[i64]> {
        match self.get(name) {
            Some(Attr::Ints(v)) => Some(v),
            _ => None,
        }
    }

    pub fn dtype(&self, name: &str) -> Option<DType> {
        match self.get(name) {
            Some(Attr::DType(v)) => Some(*v),
            _ => None,
        }
    }

    pub fn tensor(&self, name: &str) -> Option<&TensorData> {
        match self.get(name) {
            Some(Attr::Tensor(v)) => Some(v),
            _ => None,
        }
    }
}
