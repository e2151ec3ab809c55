//! `excess-precision`: drops round trips through narrower float types
//! (`--allow-excess-precision`).
//!
//! Needs: a verified module.
//! Guarantees: `convert(convert(x: A → B) → A)` with A and B floats and B narrower than A
//! (fewer mantissa or exponent bits, e.g. f32 → bf16 → f32) is replaced by `x`: the program then
//! keeps more precision than it asked for (and skips the rounding), which is what the flag
//! allows. Round trips through wider types are exact and `fold-trivial` removes them anyway.
//! Changed when a round trip was removed.

use crate::util::{all_blocks, def_is, exactly_representable};
use crate::{Pass, PassError};
use tpuc_ir::{Module, Opcode};

pub struct ExcessPrecision;

impl Pass for ExcessPrecision {
    fn name(&self) -> &'static str {
        crate::PassId::ExcessPrecision.name()
    }

    fn run(&self, m: &mut Module) -> Result<bool, PassError> {
        let mut changed = false;
        for b in all_blocks(m) {
            for op in m.block_ops(b) {
                if m.ops[op].opcode() != Opcode::Convert || m.ops[op].block() != Some(b) {
                    continue;
                }
                let mid = m.ops[op].operands()[0];
                let Some(inner) = def_is(m, mid, Opcode::Convert) else { continue };
                let x = m.ops[inner].operands()[0];
                let (a, bt, c) = (m.values[x].ty.dtype, m.values[mid].ty.dtype, m.values[m.ops[op].results()[0]].ty.dtype);
                if a == c && a.is_float() && bt.is_float() && !exactly_representable(a, bt) {
                    crate::util::replace_op(m, op, x);
                    changed = true;
                }
            }
        }
        if changed {
            crate::util::remove_dead(m);
        }
        Ok(changed)
    }
}
