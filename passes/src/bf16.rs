//! `bf16`: matmuls and convolutions in bf16 with f32 accumulation.
//!
//! Needs: a verified module.
//! Guarantees: every `dot_general` and `convolution` whose operands are f32 (in every block,
//! composite bodies included) gets both operands converted to bf16 and keeps its f32 result
//! type, which StableHLO reads as the preferred (accumulation) element type, except those with
//! a `precision_scope` (the source asked for their precision explicitly). Nothing else
//! changes: norms, softmax, reductions and elementwise math stay in f32. Converts of
//! constant weights are folded by a later `canonicalize` (small ones) or by XLA. Changed when
//! an op was rewritten.

use crate::util::{all_blocks, Inserter};
use crate::{Pass, PassError};
use tpuc_ir::{payload, DType, Module, Opcode, Precision};

pub struct Bf16Matmuls;

impl Pass for Bf16Matmuls {
    fn name(&self) -> &'static str {
        crate::PassId::Bf16.name()
    }

    fn run(&self, m: &mut Module) -> Result<bool, PassError> {
        let mut changed = false;
        for b in all_blocks(m) {
            for op in m.block_ops(b) {
                let d = &m.ops[op];
                let scoped = |(_, scope): (Option<Precision>, Option<Precision>)| scope.is_some();
                if !matches!(d.opcode(), Opcode::DotGeneral | Opcode::Convolution)
                    || payload::matmul_precision(d).is_some_and(scoped)
                {
                    continue;
                }
                let (l, r) = (d.operands()[0], d.operands()[1]);
                if m.values[l].ty.dtype != DType::F32 || m.values[r].ty.dtype != DType::F32 {
                    continue;
                }
                let mut ins = Inserter::before(m, op);
                let lb = ins.convert(l, DType::BF16).map_err(|e| crate::failed(crate::PassId::Bf16.name(), e))?;
                let rb = if r == l { lb } else { ins.convert(r, DType::BF16).map_err(|e| crate::failed(crate::PassId::Bf16.name(), e))? };
                m.set_operand(op, 0, lb);
                m.set_operand(op, 1, rb);
                changed = true;
            }
        }
        Ok(changed)
    }
}
