//! Plain data shared by the safe API: element types, shapes, named values.

use std::fmt;

use crate::ffi::buffer_type as bt;

/// Element type of a device buffer or executable output (our own enum; mapped to
/// `PJRT_Buffer_Type` at the FFI boundary).
///
/// Host data is dense, row-major and little-endian, `bool` is one byte (0 or 1), `bf16`/`f16`
/// are two bytes, the `f8` types one byte each.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ElementType {
    Bool,
    I8,
    I16,
    I32,
    I64,
    U8,
    U16,
    U32,
    U64,
    F16,
    BF16,
    F32,
    F64,
    /// Complex of two `f32` (real, imaginary).
    C64,
    /// Complex of two `f64` (real, imaginary).
    C128,
    F8E5M2,
    F8E4M3FN,
    F8E4M3B11FNUZ,
    F8E5M2FNUZ,
    F8E4M3FNUZ,
    F8E4M3,
    F8E3M4,
    F8E8M0FNU,
}

const TABLE: &[(ElementType, i32, usize, &str)] = &[
    (ElementType::Bool, bt::PRED, 1, "i1"),
    (ElementType::I8, bt::S8, 1, "i8"),
    (ElementType::I16, bt::S16, 2, "i16"),
    (ElementType::I32, bt::S32, 4, "i32"),
    (ElementType::I64, bt::S64, 8, "i64"),
    (ElementType::U8, bt::U8, 1, "ui8"),
    (ElementType::U16, bt::U16, 2, "ui16"),
    (ElementType::U32, bt::U32, 4, "ui32"),
    (ElementType::U64, bt::U64, 8, "ui64"),
    (ElementType::F16, bt::F16, 2, "f16"),
    (ElementType::BF16, bt::BF16, 2, "bf16"),
    (ElementType::F32, bt::F32, 4, "f32"),
    (ElementType::F64, bt::F64, 8, "f64"),
    (ElementType::C64, bt::C64, 8, "complex<f32>"),
    (ElementType::C128, bt::C128, 16, "complex<f64>"),
    (ElementType::F8E5M2, bt::F8E5M2, 1, "f8E5M2"),
    (ElementType::F8E4M3FN, bt::F8E4M3FN, 1, "f8E4M3FN"),
    (
        ElementType::F8E4M3B11FNUZ,
        bt::F8E4M3B11FNUZ,
        1,
        "f8E4M3B11FNUZ",
    ),
    (ElementType::F8E5M2FNUZ, bt::F8E5M2FNUZ, 1, "f8E5M2FNUZ"),
    (ElementType::F8E4M3FNUZ, bt::F8E4M3FNUZ, 1, "f8E4M3FNUZ"),
    (ElementType::F8E4M3, bt::F8E4M3, 1, "f8E4M3"),
    (ElementType::F8E3M4, bt::F8E3M4, 1, "f8E3M4"),
    (ElementType::F8E8M0FNU, bt::F8E8M0FNU, 1, "f8E8M0FNU"),
];

impl ElementType {
    /// Every element type, in declaration order.
    pub fn all() -> impl Iterator<Item = ElementType> {
        TABLE.iter().map(|row| row.0)
    }

    fn row(self) -> &'static (ElementType, i32, usize, &'static str) {
        TABLE
            .iter()
            .find(|row| row.0 == self)
            .expect("every ElementType has a table row")
    }

    /// Bytes per element on the host.
    pub fn size_in_bytes(self) -> usize {
        self.row().2
    }

    /// The StableHLO spelling (`f32`, `i1`, `ui8`, `bf16`, `f8E4M3FN`, ...).
    pub fn mlir_name(self) -> &'static str {
        self.row().3
    }

    pub(crate) fn to_pjrt(self) -> i32 {
        self.row().1
    }

    /// `None` for PJRT types tpuc does not name (sub-byte integers, `f4`, tokens, invalid).
    pub(crate) fn from_pjrt(value: i32) -> Option<ElementType> {
        TABLE.iter().find(|row| row.1 == value).map(|row| row.0)
    }
}

impl fmt::Display for ElementType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.mlir_name())
    }
}

/// An array shape: element type and dimensions (major to minor).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Shape {
    /// `Err(raw PJRT value)` when the plugin reported a type tpuc does not name.
    pub element_type: Result<ElementType, i32>,
    pub dims: Vec<i64>,
}

impl Shape {
    /// Number of elements (1 for a scalar).
    pub fn element_count(&self) -> i64 {
        self.dims.iter().product()
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("tensor<")?;
        for d in &self.dims {
            write!(f, "{d}x")?;
        }
        match self.element_type {
            Ok(t) => write!(f, "{t}>"),
            Err(raw) => write!(f, "pjrt_type_{raw}>"),
        }
    }
}

/// The value of a [`NamedValue`] (plugin attributes, create options, cost properties).
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Str(String),
    Int(i64),
    Ints(Vec<i64>),
    Float(f32),
    Bool(bool),
}

impl Value {
    /// The value as a number, for `Int` and `Float`.
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Value::Int(v) => Some(*v as f64),
            Value::Float(v) => Some(f64::from(*v)),
            _ => None,
        }
    }
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Str(s) => write!(f, "{s:?}"),
            Value::Int(v) => write!(f, "{v}"),
            Value::Ints(v) => write!(f, "{v:?}"),
            Value::Float(v) => write!(f, "{v}"),
            Value::Bool(v) => write!(f, "{v}"),
        }
    }
}

/// A key-value pair as PJRT passes them (`PJRT_NamedValue`).
#[derive(Clone, Debug, PartialEq)]
pub struct NamedValue {
    pub name: String,
    pub value: Value,
}

impl NamedValue {
    pub fn new(name: impl Into<String>, value: Value) -> Self {
        NamedValue {
            name: name.into(),
            value,
        }
    }
    pub fn string(name: impl Into<String>, value: impl Into<String>) -> Self {
        Self::new(name, Value::Str(value.into()))
    }
    pub fn int(name: impl Into<String>, value: i64) -> Self {
        Self::new(name, Value::Int(value))
    }
    pub fn ints(name: impl Into<String>, value: impl Into<Vec<i64>>) -> Self {
        Self::new(name, Value::Ints(value.into()))
    }
    pub fn float(name: impl Into<String>, value: f32) -> Self {
        Self::new(name, Value::Float(value))
    }
    pub fn bool(name: impl Into<String>, value: bool) -> Self {
        Self::new(name, Value::Bool(value))
    }
}

impl fmt::Display for NamedValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={}", self.name, self.value)
    }
}

/// Finds a value by name.
pub fn lookup<'a>(values: &'a [NamedValue], name: &str) -> Option<&'a Value> {
    values.iter().find(|v| v.name == name).map(|v| &v.value)
}

/// The answer to an optional query (cost analysis, memory statistics, output shapes...):
/// a plugin that does not offer it gives `NotAvailable` with its reason, never an error.
#[derive(Clone, Debug, PartialEq)]
pub enum Availability<T> {
    Available(T),
    /// Why not: the plugin's own message, or which function the plugin lacks.
    NotAvailable(String),
}

impl<T> Availability<T> {
    pub fn ok(self) -> Option<T> {
        match self {
            Availability::Available(v) => Some(v),
            Availability::NotAvailable(_) => None,
        }
    }
    pub fn as_ref(&self) -> Availability<&T> {
        match self {
            Availability::Available(v) => Availability::Available(v),
            Availability::NotAvailable(r) => Availability::NotAvailable(r.clone()),
        }
    }
    pub fn is_available(&self) -> bool {
        matches!(self, Availability::Available(_))
    }
}

/// Memory an executable needs, from `PJRT_Executable_GetCompiledMemoryStats` (bytes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CompiledMemoryStats {
    pub generated_code_size_in_bytes: i64,
    pub argument_size_in_bytes: i64,
    pub output_size_in_bytes: i64,
    pub alias_size_in_bytes: i64,
    pub temp_size_in_bytes: i64,
    pub host_generated_code_size_in_bytes: i64,
    pub host_argument_size_in_bytes: i64,
    pub host_output_size_in_bytes: i64,
    pub host_alias_size_in_bytes: i64,
    pub host_temp_size_in_bytes: i64,
    pub peak_memory_in_bytes: i64,
}

/// A device as a topology or client describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceDescription {
    /// Unique among the devices of the platform.
    pub id: i32,
    pub process_index: i32,
    /// Vendor string, e.g. `cpu` or `TPU v5 lite`.
    pub kind: String,
    /// Short human-readable form, e.g. `CpuDevice(id=0)`.
    pub display: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn element_types_round_trip_through_pjrt_values() {
        for t in ElementType::all() {
            assert_eq!(ElementType::from_pjrt(t.to_pjrt()), Some(t));
        }
        assert_eq!(ElementType::from_pjrt(bt::S4), None);
        assert_eq!(ElementType::from_pjrt(bt::INVALID), None);
    }

    #[test]
    fn shapes_print_like_mlir() {
        let s = Shape {
            element_type: Ok(ElementType::BF16),
            dims: vec![2, 3],
        };
        assert_eq!(s.to_string(), "tensor<2x3xbf16>");
        assert_eq!(s.element_count(), 6);
        let scalar = Shape {
            element_type: Ok(ElementType::Bool),
            dims: vec![],
        };
        assert_eq!(scalar.to_string(), "tensor<i1>");
        assert_eq!(scalar.element_count(), 1);
    }
}
