//! `fold-constants`: evaluates ops whose operands are all constants.
//!
//! Needs: a verified module.
//! Guarantees: a pure, single-result op whose operands are all `constant`s is replaced by a
//! `constant` holding its value when [`crate::eval`] can compute it exactly: always for splats
//! (so `broadcast_in_dim` of a scalar constant becomes one splat constant) and reshapes
//! (which share the bytes), for data movement of up to [`crate::eval::MOVE_LIMIT`] elements
//! and arithmetic of up to [`crate::eval::ARITH_LIMIT`]. `iota` alone is not folded (it is
//! cheaper than its constant). The constant keeps the folded op's provenance. Changed when
//! an op was folded; the folded ops' operands are left for `dce`.

use crate::util::{constant_of, Inserter};
use crate::{Pass, PassError};
use tpuc_ir::{Module, OpId, Opcode};

pub struct FoldConstants;

/// Folds `op` if it can; returns whether it did.
pub fn fold_op(m: &mut Module, op: OpId) -> Result<bool, PassError> {
    let d = &m.ops[op];
    if !d.opcode().is_pure()
        || d.opcode().is_terminator()
        || d.operands().is_empty()
        || d.results().len() != 1
        || !d.regions().is_empty()
        || matches!(d.opcode(), Opcode::Constant | Opcode::Composite)
    {
        return Ok(false);
    }
    let mut args = Vec::with_capacity(d.operands().len());
    for &v in d.operands() {
        match constant_of(m, v) {
            Some(t) => args.push(t),
            None => return Ok(false),
        }
    }
    let Some(value) = crate::eval::eval_op(m, op, &args) else { return Ok(false) };
    if value.ty != m.values[m.ops[op].results()[0]].ty {
        return Ok(false);
    }
    let c = Inserter::before(m, op).constant(value).map_err(|e| crate::failed(crate::PassId::FoldConstants.name(), e))?;
    crate::util::replace_op(m, op, c);
    Ok(true)
}

impl crate::rewrite::Rule for FoldConstants {
    fn name(&self) -> &'static str {
        crate::PassId::FoldConstants.name()
    }

    fn apply(&self, m: &mut Module, op: OpId) -> Result<bool, PassError> {
        fold_op(m, op)
    }
}

impl Pass for FoldConstants {
    fn name(&self) -> &'static str {
        crate::PassId::FoldConstants.name()
    }

    fn run(&self, m: &mut Module) -> Result<bool, PassError> {
        crate::rewrite::sweep(m, &[self])
    }
}
