//! `transpose-into-dot`: a transpose feeding a `dot_general` becomes the dot's dimension
//! numbers.
//!
//! `dot_general(transpose(x, p), y)` contracts and batches over dims of the transposed value;
//! the same product over `x` uses those dims mapped through `p`. The result's dims are the batch
//! dims, then the lhs free dims in operand order, then the rhs free dims: the rewrite is exact
//! when `p` keeps the free dims of that operand in the same relative order (then the result is
//! unchanged), and is skipped otherwise.
//!
//! Needs: a verified module.
//! Guarantees: every `dot_general` operand defined by such a `transpose` is replaced by the
//! transpose's operand with remapped dimension numbers; the same result type; the transpose
//! is left for `dce`. Changed when a dot was rewritten.
//!
//! Whether this helps depends on the backend: on TPU XLA assigns layouts itself and a
//! transposed operand costs nothing, so the pipeline always runs it there; on the XLA CPU
//! plugin a dot contracting the rhs's dim 1 (`[1]x[1]`) measured slower than an explicit
//! transpose + `[1]x[0]` dot (see `default_pipeline`).

use crate::util::{all_blocks, def_is};
use crate::{Pass, PassError};
use tpuc_ir::{payload, Module, OpId, Opcode};

pub struct TransposeIntoDot;

/// Folds a transposed operand `side` (0 = lhs, 1 = rhs) of `dot`; returns whether it did.
fn fold_side(m: &mut Module, dot: OpId, side: usize) -> bool {
    let operand = m.ops[dot].operands()[side];
    let Some(t) = def_is(m, operand, Opcode::Transpose) else { return false };
    let p = m.ops[t].payload::<payload::Transpose>().permutation;
    let x = m.ops[t].operands()[0];
    let a = m.ops[dot].payload::<payload::DotGeneral>();
    let (batch, contract) = if side == 0 {
        (a.lhs_batching_dimensions, a.lhs_contracting_dimensions)
    } else {
        (a.rhs_batching_dimensions, a.rhs_contracting_dimensions)
    };
    let free: Vec<i64> = (0..p.len() as i64).filter(|i| !batch.contains(i) && !contract.contains(i)).collect();
    let mapped_free: Vec<i64> = free.iter().map(|&i| p[i as usize]).collect();
    if mapped_free.windows(2).any(|w| w[0] > w[1]) {
        return false;
    }
    let nb: Vec<i64> = batch.iter().map(|&i| p[i as usize]).collect();
    let nc: Vec<i64> = contract.iter().map(|&i| p[i as usize]).collect();
    let folded = if side == 0 {
        payload::DotGeneral { lhs_batching_dimensions: &nb, lhs_contracting_dimensions: &nc, ..a }
    } else {
        payload::DotGeneral { rhs_batching_dimensions: &nb, rhs_contracting_dimensions: &nc, ..a }
    };
    let attrs = folded.attrs();
    m.ops[dot].attrs.update(attrs);
    m.set_operand(dot, side, x);
    true
}

impl Pass for TransposeIntoDot {
    fn name(&self) -> &'static str {
        crate::PassId::TransposeIntoDot.name()
    }

    fn run(&self, m: &mut Module) -> Result<bool, PassError> {
        let mut changed = false;
        for b in all_blocks(m) {
            for op in m.block_ops(b) {
                if m.ops[op].opcode() != Opcode::DotGeneral {
                    continue;
                }
                for side in 0..2 {
                    changed |= fold_side(m, op, side);
                }
            }
        }
        if changed {
            crate::util::remove_dead(m);
        }
        Ok(changed)
    }
}
