//! `canonicalize`: `fold-constants`, `fold-trivial` and `collapse-shapes` together, op by op,
//! until nothing changes, then `dce`.
//!
//! Needs: a verified module.
//! Guarantees: what the three rule sets guarantee, applied to a fixed point (at most
//! [`MAX_ROUNDS`] sweeps over the module), so a folded constant can enable a trivial fold
//! which enables a collapse in the same run; no dead pure op is left. Changed when any rule
//! fired or any op was removed.

use crate::util::all_blocks;
use crate::{Pass, PassError};
use tpuc_ir::Module;

pub const MAX_ROUNDS: usize = 16;

pub struct Canonicalize;

/// Runs the three rule sets to a fixed point; returns whether anything changed.
pub fn canonicalize(m: &mut Module) -> Result<bool, PassError> {
    let mut changed = false;
    for _ in 0..MAX_ROUNDS {
        let mut round = false;
        for b in all_blocks(m) {
            for op in m.block_ops(b) {
                if m.ops[op].block != Some(b) {
                    continue;
                }
                if crate::fold_constants::fold_op(m, op)? || crate::fold_trivial::fold_op(m, op)? || crate::collapse_shapes::collapse_op(m, op)? {
                    round = true;
                }
            }
        }
        if !round {
            break;
        }
        changed = true;
    }
    changed |= crate::util::remove_dead(m);
    Ok(changed)
}

impl Pass for Canonicalize {
    fn name(&self) -> &'static str {
        "canonicalize"
    }

    fn run(&self, m: &mut Module) -> Result<bool, PassError> {
        canonicalize(m)
    }
}
