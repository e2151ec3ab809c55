//! `fold-trivial`: removes ops that do nothing.
//!
//! Needs: a verified module.
//! Guarantees: each rule below replaces an op by a value it already computes, exactly (up to
//! the sign of a zero in `x + 0`, which XLA's own simplifier folds the same way):
//! - `x + 0`, `0 + x`, `x - 0`, `x * 1`, `1 * x`, `x / 1`, `and(x, true)` (bool only: an
//!   integer `and(x, 1)` is not `x`), `or(x, false)` (the constant a splat, possibly broadcast)
//!   → `x`;
//! - `max(x, x)`, `min(x, x)`, `and(x, x)`, `or(x, x)`, `select(p, x, x)` → `x`;
//!   `select(true, a, b)` → `a`, `select(false, a, b)` → `b`;
//! - `neg(neg x)`, `not(not x)` → `x`;
//! - `convert` to the operand's own type → `x`; `convert(convert(x))` whose inner step is exact
//!   (a type that holds every value of `x`'s) → one `convert` (or `x` when back at its type);
//! - `reshape` to the same shape, `broadcast_in_dim` to the same type with dims 0..r,
//!   `transpose` by the identity, a `slice` taking everything, a `pad` by nothing, a
//!   `concatenate` of one operand, a `reduce` over no dims → `x`.
//!
//! Changed when a rule fired.

use crate::util::{def_is, exactly_representable, is_splat, splat_of, Inserter};
use crate::{Pass, PassError};
use tpuc_ir::{payload, Attrs, Module, OpId, Opcode, ValueId};

pub struct FoldTrivial;

fn identity_perm(p: &[i64]) -> bool {
    p.iter().enumerate().all(|(i, &d)| d == i as i64)
}

/// The value `op` can be replaced by, if a rule applies (rules that need a new op build it).
fn simplify(m: &mut Module, op: OpId) -> Result<Option<ValueId>, PassError> {
    use Opcode::*;
    let d = &m.ops[op];
    if d.results().len() != 1 || !d.regions().is_empty() {
        return Ok(None);
    }
    let rt = m.values[d.results()[0]].ty.clone();
    let xs = d.operands().to_vec();
    let ty = |v: ValueId| &m.values[v].ty;
    let same = |v: ValueId| m.values[v].ty == rt;
    let r = match d.opcode() {
        Add | Or if xs[0] == xs[1] && d.opcode() == Or => Some(xs[0]),
        Add | Or => {
            if is_splat(m, xs[1], 0.0) && same(xs[0]) {
                Some(xs[0])
            } else if is_splat(m, xs[0], 0.0) && same(xs[1]) {
                Some(xs[1])
            } else {
                None
            }
        }
        Sub if is_splat(m, xs[1], 0.0) => Some(xs[0]),
        Mul | And if xs[0] == xs[1] && d.opcode() == And => Some(xs[0]),
        // and(x, 1) of integers keeps only the lowest bit: only and(p, true) is the identity.
        And if !rt.dtype.is_bool() => None,
        Mul | And => {
            if is_splat(m, xs[1], 1.0) && same(xs[0]) {
                Some(xs[0])
            } else if is_splat(m, xs[0], 1.0) && same(xs[1]) {
                Some(xs[1])
            } else {
                None
            }
        }
        Div if is_splat(m, xs[1], 1.0) => Some(xs[0]),
        Max | Min if xs[0] == xs[1] => Some(xs[0]),
        Select if xs[1] == xs[2] => Some(xs[1]),
        Select => match splat_of(m, xs[0]).map(|s| s.as_bool()) {
            Some(true) => Some(xs[1]),
            Some(false) => Some(xs[2]),
            None => None,
        },
        Neg | Not => def_is(m, xs[0], d.opcode()).map(|inner| m.ops[inner].operands()[0]),
        Convert if same(xs[0]) => Some(xs[0]),
        Convert => {
            let Some(inner) = def_is(m, xs[0], Convert) else { return Ok(None) };
            let x = m.ops[inner].operands()[0];
            let (from, mid) = (ty(x).dtype, ty(xs[0]).dtype);
            if !exactly_representable(from, mid) {
                None
            } else if same(x) {
                Some(x)
            } else {
                Some(Inserter::before(m, op).build1(Convert, &[x], Attrs::new(), Some(rt)).map_err(|e| crate::failed(crate::PassId::FoldTrivial.name(), e))?)
            }
        }
        Reshape if same(xs[0]) => Some(xs[0]),
        BroadcastInDim if same(xs[0]) && identity_perm(d.payload::<payload::BroadcastInDim>().broadcast_dimensions) => Some(xs[0]),
        Transpose if identity_perm(d.payload::<payload::Transpose>().permutation) => Some(xs[0]),
        Slice if same(xs[0]) && {
            let s = d.payload::<payload::Slice>();
            s.strides.iter().all(|&s| s == 1) && s.start_indices.iter().all(|&s| s == 0)
        } =>
        {
            Some(xs[0])
        }
        Pad if {
            let p = d.payload::<payload::Pad>();
            [p.edge_padding_low, p.edge_padding_high, p.interior_padding].iter().all(|s| s.iter().all(|&s| s == 0))
        } =>
        {
            Some(xs[0])
        }
        Concatenate if xs.len() == 1 => Some(xs[0]),
        Reduce if d.payload::<payload::Reduce>().dimensions.is_empty() && same(xs[0]) => Some(xs[0]),
        _ => None,
    };
    Ok(r)
}

/// Applies the first rule that fits `op`; returns whether one did.
pub fn fold_op(m: &mut Module, op: OpId) -> Result<bool, PassError> {
    match simplify(m, op)? {
        Some(v) => {
            crate::util::replace_op(m, op, v);
            Ok(true)
        }
        None => Ok(false),
    }
}

impl crate::rewrite::Rule for FoldTrivial {
    fn name(&self) -> &'static str {
        crate::PassId::FoldTrivial.name()
    }

    fn apply(&self, m: &mut Module, op: OpId) -> Result<bool, PassError> {
        fold_op(m, op)
    }
}

impl Pass for FoldTrivial {
    fn name(&self) -> &'static str {
        crate::PassId::FoldTrivial.name()
    }

    fn run(&self, m: &mut Module) -> Result<bool, PassError> {
        crate::rewrite::sweep(m, &[self])
    }
}
