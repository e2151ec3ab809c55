//! `precision`: the matmul / convolution precision policy.
//!
//! Needs: a verified module.
//! Guarantees: every `dot_general` and `attention` (in every block, composite bodies included)
//! on floating-point operands carries `precision` = the policy
//! ([`crate::PipelineOptions::precision`]: the user's `--precision`, else `default` on TPU and
//! `highest` on CPU and GPU), every `convolution` the convolution policy
//! ([`crate::PipelineOptions::conv_precision`]: `--conv-precision`, else `--precision`, else
//! the target's: on GPU `default`, TF32, as torch's cuDNN convolutions are by default), or its
//! own `precision_scope` where the source scoped one (a region under
//! `tpuc.precision(...)` in the torch.compile path), which the emitter writes as the StableHLO
//! precision config. On TPU
//! `default` is one bf16 pass with f32 accumulation, `high` three, `highest` six; XLA's CPU
//! backend computes f32 either way. Changed when an attribute was set or changed.

use crate::util::all_blocks;
use crate::{Pass, PassError, Precision};
use tpuc_ir::{payload, Module};

pub struct SetPrecision {
    /// Matmuls and attention.
    pub precision: Precision,
    /// Convolutions.
    pub conv: Precision,
}

impl Pass for SetPrecision {
    fn name(&self) -> &'static str {
        crate::PassId::Precision.name()
    }

    fn run(&self, m: &mut Module) -> Result<bool, PassError> {
        let mut changed = false;
        for b in all_blocks(m) {
            for op in m.block_ops(b) {
                let d = &m.ops[op];
                if !d.opcode().has_matmul_precision() {
                    continue;
                }
                let dt = m.values[d.operands()[0]].ty.dtype;
                let policy = if d.opcode() == tpuc_ir::Opcode::Convolution { self.conv } else { self.precision };
                let Some((precision, scope)) = payload::matmul_precision(d) else { continue };
                let want = scope.unwrap_or(policy);
                if !(dt.is_float() || dt.is_complex()) || precision == Some(want) {
                    continue;
                }
                payload::set_matmul_precision(&mut m.ops[op], want);
                changed = true;
            }
        }
        Ok(changed)
    }
}
