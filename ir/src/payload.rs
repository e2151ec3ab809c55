//! Typed views of op attributes, one struct per op that has attributes, generated from the op
//! table ([`crate::opcode`]).
//!
//! An op's attributes are stored as an [`Attrs`] list of words and values (that is what the text
//! form prints and parses). Code that reads or builds them goes through these views instead of
//! spelling the words: [`Reduce`] has `dimensions: &[i64]` and `kind: ReduceKind`, a required
//! attribute is a plain field, an optional one an `Option`, an enum-valued one its Rust enum
//! ([`crate::enums`]), a tensor `&TensorData`. Each view has
//!
//! - `of(&Attrs) -> Option<Self>`: `None` when a required attribute is missing or any attribute
//!   is of another kind, which `create_op` and the verifier refuse: on a checked op it is `Some`;
//! - `attrs(&self) -> Attrs`: the attributes, for building an op;
//!
//! and [`crate::OpData::payload`] reads the view of an op, panicking (naming the op and the
//! attribute) if the op is not of the view's opcode or its attributes are not what the table
//! says, an invariant of every checked op:
//!
//! ```
//! # use tpuc_ir::{payload, ReduceKind};
//! let attrs = payload::Reduce { dimensions: &[1], kind: ReduceKind::Sum }.attrs();
//! let r = payload::Reduce::of(&attrs).unwrap();
//! assert_eq!((r.dimensions, r.kind), (&[1][..], ReduceKind::Sum));
//! ```

use crate::attr::{Attr, Attrs, TensorData};
use crate::enums::{
    ArgReduceKind, AttrEnum, Direction, FftType, GeluApproximation, Precision, ReduceKind, ScanKind, ScatterKind, WindowKind,
};
use crate::module::OpData;
use crate::opcode::Opcode;

/// The typed view of one op's attributes.
pub trait Payload<'a>: Sized {
    /// The op whose attributes these are.
    const OPCODE: Opcode;
    /// The view; `None` when a required attribute is missing or an attribute has another kind.
    fn of(attrs: &'a Attrs) -> Option<Self>;
    /// The attributes, for building the op.
    fn attrs(&self) -> Attrs;
}

/// Panics for an op whose attributes do not fit its table entry (a verifier invariant), naming
/// the first attribute that does not.
#[track_caller]
pub(crate) fn invalid(opcode: Opcode, attrs: &Attrs) -> ! {
    let bad = opcode.info().attrs.iter().find(|s| match attrs.get(s.name) {
        Some(a) => !s.kind.matches(a),
        None => s.required,
    });
    match bad {
        Some(s) => panic!(
            "checked op `{opcode}`: attribute `{}` is missing or not a {} (the verifier refuses such an op)",
            s.name,
            s.kind.name()
        ),
        None => panic!("checked op `{opcode}`: its attributes do not fit the op table"),
    }
}

/// The field type of a kind token, borrowing for `'l`.
macro_rules! value_ty {
    ($l:lifetime, Bool) => { bool };
    ($l:lifetime, Int) => { i64 };
    ($l:lifetime, Float) => { f64 };
    ($l:lifetime, Str) => { &$l str };
    ($l:lifetime, Ints) => { &$l [i64] };
    ($l:lifetime, DType) => { crate::dtype::DType };
    ($l:lifetime, Tensor) => { &$l TensorData };
    ($l:lifetime, Enum($enum:ident)) => { $enum };
}

macro_rules! field_ty {
    ($l:lifetime, req, $($kind:tt)+) => { value_ty!($l, $($kind)+) };
    ($l:lifetime, opt, $($kind:tt)+) => { Option<value_ty!($l, $($kind)+)> };
}

/// Reads an [`Attr`] as a kind token's value; `None` for another kind.
macro_rules! read_value {
    ($a:expr, Bool) => { match $a { Attr::Bool(v) => Some(*v), _ => None } };
    ($a:expr, Int) => { match $a { Attr::Int(v) => Some(*v), _ => None } };
    ($a:expr, Float) => { match $a { Attr::Float(v) => Some(*v), _ => None } };
    ($a:expr, Str) => { match $a { Attr::Str(v) => Some(v.as_str()), _ => None } };
    ($a:expr, Ints) => { match $a { Attr::Ints(v) => Some(v.as_slice()), _ => None } };
    ($a:expr, DType) => { match $a { Attr::DType(v) => Some(*v), _ => None } };
    ($a:expr, Tensor) => { match $a { Attr::Tensor(v) => Some(v), _ => None } };
    ($a:expr, Enum($enum:ident)) => { match $a { Attr::Str(v) => <$enum as AttrEnum>::parse(v), _ => None } };
}

/// A kind token's value as an [`Attr`].
macro_rules! to_attr {
    ($v:expr, Bool) => { Attr::Bool($v) };
    ($v:expr, Int) => { Attr::Int($v) };
    ($v:expr, Float) => { Attr::Float($v) };
    ($v:expr, Str) => { Attr::Str($v.to_string()) };
    ($v:expr, Ints) => { Attr::Ints($v.to_vec()) };
    ($v:expr, DType) => { Attr::DType($v) };
    ($v:expr, Tensor) => { Attr::Tensor($v.clone()) };
    ($v:expr, Enum($enum:ident)) => { AttrEnum::attr($v) };
}

macro_rules! read_field {
    ($attrs:expr, $name:expr, req, $($kind:tt)+) => {
        read_value!($attrs.get($name)?, $($kind)+)?
    };
    ($attrs:expr, $name:expr, opt, $($kind:tt)+) => {
        match $attrs.get($name) {
            None => None,
            Some(a) => Some(read_value!(a, $($kind)+)?),
        }
    };
}

macro_rules! write_field {
    ($attrs:expr, $name:expr, $v:expr, req, $($kind:tt)+) => {
        $attrs.set($name, to_attr!($v, $($kind)+))
    };
    ($attrs:expr, $name:expr, $v:expr, opt, $($kind:tt)+) => {
        if let Some(v) = $v {
            $attrs.set($name, to_attr!(v, $($kind)+))
        }
    };
}

macro_rules! payloads {
    ($( $(#[doc = $doc:literal])* $variant:ident = $name:literal, $operands:expr, $results:expr,
        [$($field:ident: $presence:ident $kind:ident $(($enum:ident))?),*], $traits:expr, $regions:expr; )*) => {
        $( payloads!(@scan $variant $name [$($field: $presence $kind $(($enum))?),*] $($kind)*); )*
    };
    // No attributes: no view.
    (@scan $variant:ident $name:literal []) => {};
    // A view borrows (has a lifetime) when one of its kinds does.
    (@scan $variant:ident $name:literal $fields:tt Ints $($rest:ident)*) => { payloads!(@emit $variant $name {'a} $fields); };
    (@scan $variant:ident $name:literal $fields:tt Str $($rest:ident)*) => { payloads!(@emit $variant $name {'a} $fields); };
    (@scan $variant:ident $name:literal $fields:tt Tensor $($rest:ident)*) => { payloads!(@emit $variant $name {'a} $fields); };
    (@scan $variant:ident $name:literal $fields:tt $other:ident $($rest:ident)*) => {
        payloads!(@scan $variant $name $fields $($rest)*);
    };
    (@scan $variant:ident $name:literal $fields:tt) => { payloads!(@emit $variant $name {} $fields); };
    (@emit $variant:ident $name:literal {$($lt:lifetime)?} [$($field:ident: $presence:ident $kind:ident $(($enum:ident))?),*]) => {
        #[doc = concat!("The attributes of `", $name, "`.")]
        #[derive(Copy, Clone, Debug, PartialEq)]
        pub struct $variant<$($lt)?> {
            $(pub $field: field_ty!('a, $presence, $kind $(($enum))?),)*
        }

        impl<'a> $variant<$($lt)?> {
            /// The view of `attrs`; `None` when they do not fit the op table.
            pub fn of(attrs: &'a Attrs) -> Option<Self> {
                Some($variant {
                    $($field: read_field!(attrs, stringify!($field), $presence, $kind $(($enum))?),)*
                })
            }

            /// The attributes, for building the op.
            pub fn attrs(&self) -> Attrs {
                let mut a = Attrs::new();
                $(write_field!(a, stringify!($field), self.$field, $presence, $kind $(($enum))?);)*
                a
            }
        }

        impl<'a> Payload<'a> for $variant<$($lt)?> {
            const OPCODE: Opcode = Opcode::$variant;
            fn of(attrs: &'a Attrs) -> Option<Self> {
                $variant::of(attrs)
            }
            fn attrs(&self) -> Attrs {
                $variant::attrs(self)
            }
        }
    };
}

crate::opcode::op_table!(payloads);

/// The precision attributes of an op with matmuls ([`Opcode::has_matmul_precision`]):
/// `(precision, precision_scope)`; `None` for other ops.
#[track_caller]
pub fn matmul_precision(op: &OpData) -> Option<(Option<Precision>, Option<Precision>)> {
    match op.opcode() {
        Opcode::DotGeneral => Some(op.payload::<DotGeneral>()).map(|p| (p.precision, p.precision_scope)),
        Opcode::Convolution => Some(op.payload::<Convolution>()).map(|p| (p.precision, p.precision_scope)),
        Opcode::Attention => Some(op.payload::<Attention>()).map(|p| (p.precision, p.precision_scope)),
        _ => None,
    }
}

/// Sets the `precision` of an op with matmuls, keeping its other attributes.
#[track_caller]
pub fn set_matmul_precision(op: &mut OpData, precision: Precision) {
    // The one attribute changes in place (rebuilding the whole view's attributes cost the
    // precision pass twice its time); the three ops spell it alike in the op table.
    match op.opcode() {
        Opcode::DotGeneral | Opcode::Convolution | Opcode::Attention => op.attrs.set(PRECISION, precision.attr()),
        other => panic!("`{other}` has no matmul precision"),
    }
}

/// The matmul precision's attribute word in `dot_general`, `convolution` and `attention`.
const PRECISION: &str = "precision";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;
    use crate::opcode::AttrKind;

    #[test]
    fn the_matmul_precision_word_is_the_tables() {
        for op in [Opcode::DotGeneral, Opcode::Convolution, Opcode::Attention] {
            assert!(op.info().attrs.iter().any(|a| a.name == PRECISION), "{op}");
        }
    }

    #[test]
    fn views_round_trip_through_attributes() {
        let r = Reduce { dimensions: &[0, 2], kind: ReduceKind::Max };
        assert_eq!(Reduce::of(&r.attrs()), Some(r));
        let d = DotGeneral {
            lhs_batching_dimensions: &[0],
            rhs_batching_dimensions: &[0],
            lhs_contracting_dimensions: &[2],
            rhs_contracting_dimensions: &[1],
            precision: Some(Precision::Highest),
            precision_scope: None,
        };
        let a = d.attrs();
        assert_eq!(a.get("precision_scope"), None);
        assert_eq!(a.str("precision"), Some("highest"));
        assert_eq!(DotGeneral::of(&a), Some(d));
        let c = Compare { direction: Direction::Le };
        assert_eq!(Compare::of(&c.attrs()), Some(c));
        let l = LayerNorm { normalized_rank: 2, epsilon: 1e-5 };
        assert_eq!(LayerNorm::of(&l.attrs()), Some(l));
        let s = AllReduce { kind: ReduceKind::Sum, group: "dp", average: Some(true) };
        assert_eq!(AllReduce::of(&s.attrs()), Some(s));
    }

    #[test]
    fn a_view_needs_every_required_attribute_of_its_kind() {
        let mut a = Reduce { dimensions: &[0], kind: ReduceKind::Sum }.attrs();
        a.set("kind", Attr::Str("median".into()));
        assert_eq!(Reduce::of(&a), None);
        a.remove("kind");
        assert_eq!(Reduce::of(&a), None);
        let mut a = Slice { start_indices: &[0], limit_indices: &[1], strides: &[1] }.attrs();
        a.set("strides", Attr::Int(1));
        assert_eq!(Slice::of(&a), None);
    }

    #[test]
    fn views_follow_the_op_table() {
        // Each view writes exactly the attributes its table entry lists, of their kinds.
        let t = crate::types::TensorType::new(DType::F32, [crate::types::Dim::Static(1)]);
        let value = TensorData::splat(t, crate::attr::Scalar::Float(1.0)).unwrap();
        let views: [(Opcode, Attrs); 5] = [
            (Opcode::Constant, Constant { value: &value }.attrs()),
            (Opcode::Scatter, Scatter {
                update_window_dims: &[],
                inserted_window_dims: &[0],
                input_batching_dims: &[],
                scatter_indices_batching_dims: &[],
                scatter_dims_to_operand_dims: &[0],
                index_vector_dim: 1,
                kind: ScatterKind::Add,
            }.attrs()),
            (Opcode::Fft, Fft { fft_type: FftType::Rfft, fft_length: &[8] }.attrs()),
            (Opcode::Composite, Composite { name: "tpuc.x" }.attrs()),
            (Opcode::Gelu, Gelu { approximate: GeluApproximation::Tanh }.attrs()),
        ];
        for (op, a) in views {
            let specs = op.info().attrs;
            assert_eq!(a.len(), specs.iter().filter(|s| s.required).count(), "{op}");
            for s in specs.iter().filter(|s| s.required) {
                let v = a.get(s.name).unwrap_or_else(|| panic!("{op} lacks {}", s.name));
                assert!(s.kind.matches(v), "{op}.{} is not a {}", s.name, s.kind.name());
            }
        }
        assert!(matches!(Opcode::Reduce.info().attrs[1].kind, AttrKind::Enum(e) if e.what == ReduceKind::WHAT));
    }
}
