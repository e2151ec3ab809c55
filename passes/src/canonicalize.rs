//! `canonicalize`: `fold-constants`, `fold-trivial` and `collapse-shapes` together, op by op,
//! until nothing changes, then `dce`.
//!
//! Needs: a verified module.
//! Guarantees: what the three rule sets guarantee, applied to a fixed point, so a folded
//! constant can enable a trivial fold which enables a collapse in the same run; no dead pure op
//! is left. Changed when any rule fired or any op was removed.
//!
//! [`crate::rewrite::fixed_point`] drives it: every op once in program order, then only the ops
//! a rewrite can have given a new match (see [`crate::rewrite`]).

use crate::rewrite::{fixed_point, Rule};
use crate::{Pass, PassError, PassId};
use tpuc_ir::Module;

pub struct Canonicalize;

/// The rule sets, tried in this order on each op.
const RULES: [&dyn Rule; 3] = [
    &crate::fold_constants::FoldConstants,
    &crate::fold_trivial::FoldTrivial,
    &crate::collapse_shapes::CollapseShapes,
];

/// Runs the three rule sets to a fixed point, then removes dead ops; returns whether anything
/// changed.
pub fn canonicalize(m: &mut Module) -> Result<bool, PassError> {
    let mut changed = fixed_point(m, &RULES)?;
    changed |= crate::util::remove_dead(m);
    Ok(changed)
}

impl Pass for Canonicalize {
    fn name(&self) -> &'static str {
        PassId::Canonicalize.name()
    }

    fn run(&self, m: &mut Module) -> Result<bool, PassError> {
        canonicalize(m)
    }
}
