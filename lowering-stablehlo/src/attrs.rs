//! Reading the attributes of a verified op.
//!
//! Emission takes a [`tpuc_ir::Verified`] module, and the verifier checked every attribute the
//! op table requires: present, of its kind, an enum's word one of its set. These readers rely on
//! that and never substitute a default: a missing attribute here is a verifier bug, reported as
//! a panic naming the attribute. Optional attributes (`precision`, `average`) are read with
//! `Attrs`' own `Option` getters where absence has a meaning.

use tpuc_ir::{AttrEnum, Attrs, GatherDims, ScatterDims};

#[track_caller]
fn missing(what: &str, name: &str) -> ! {
    panic!("verified module: required {what} attribute `{name}` is present")
}

#[track_caller]
pub(crate) fn ints<'a>(a: &'a Attrs, name: &str) -> &'a [i64] {
    a.ints(name).unwrap_or_else(|| missing("int list", name))
}

#[track_caller]
pub(crate) fn int(a: &Attrs, name: &str) -> i64 {
    a.int(name).unwrap_or_else(|| missing("int", name))
}

#[track_caller]
pub(crate) fn bool(a: &Attrs, name: &str) -> bool {
    a.bool(name).unwrap_or_else(|| missing("bool", name))
}

#[track_caller]
pub(crate) fn float(a: &Attrs, name: &str) -> f64 {
    a.float(name).unwrap_or_else(|| missing("float", name))
}

#[track_caller]
pub(crate) fn str<'a>(a: &'a Attrs, name: &str) -> &'a str {
    a.str(name).unwrap_or_else(|| missing("string", name))
}

/// An enum-valued attribute the op table requires (the verifier checked its word).
#[track_caller]
pub(crate) fn enum_attr<E: AttrEnum>(a: &Attrs, name: &str) -> E {
    a.get_enum(name).unwrap_or_else(|| missing(E::WHAT, name))
}

#[track_caller]
pub(crate) fn gather_dims(a: &Attrs) -> GatherDims {
    GatherDims::of(a).unwrap_or_else(|| missing("gather dimension", "dimension_numbers"))
}

#[track_caller]
pub(crate) fn scatter_dims(a: &Attrs) -> ScatterDims {
    ScatterDims::of(a).unwrap_or_else(|| missing("scatter dimension", "dimension_numbers"))
}
