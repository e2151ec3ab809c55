//! `weights-lhs`: a matmul whose rhs is the larger operand (`x[.., M, K] · w[N, K]ᵀ`, a linear
//! layer with `M = batch·seq` small next to the weight) is computed as `(w · xᵀ)ᵀ`: the same
//! `dot_general` with the operands swapped, followed by a transpose back.
//!
//! Why: XLA CPU hands f32 matmuls to YNNPACK, which repacks the rhs operand on every call;
//! with the weight as the rhs that is the whole weight matrix each time (for GPT-2 small's
//! MLP 9 MB per layer), with the activations as the rhs only `M x K`. XLA folds the transpose
//! into the consumer (a bias add, GELU, the residual add or attention's head-split copy all
//! read it through their own loop), so no separate copy appears. Measured (XLA CPU plugin of
//! jaxlib 0.10.2, 2 cores, interleaved medians): 12 GPT-2-small layers at seq 128, 139 → 123
//! ms as exported, 138 → 126 ms after `run_decompositions()` (rank-2 matmuls). Weights that
//! stay in the 2 MB L2 gain nothing (the d_model-256 block, weights 0.25-1 MB: 1.10 of
//! torch_xla's time swapped, 1.09 not, shuffled multi-process medians), so small weights stay
//! the rhs (`MIN_WEIGHT_ELEMENTS`).
//!
//! Needs: a verified module; run after `transpose-into-dot` (so a weight read through a
//! transpose is already a `[N, K]` rhs contracting its dim 1).
//! Guarantees: every `dot_general` without batch dims whose rhs is rank 2, contracts the rhs's
//! dim 1 and the lhs's last dim, and has more elements than the lhs and at least
//! `MIN_WEIGHT_ELEMENTS`, is replaced by
//! `transpose(dot_general(rhs, lhs), [1, .., r-1, 0])` with the same attributes (precision)
//! (for a rank-2 lhs, `reshape(transpose(reshape(dot_general(rhs, lhs), [N, 1, M])))`);
//! the result type is unchanged and so is the math (the same products and sums; the backend
//! may order the sums differently, as it may for any matmul). Changed when a dot was rewritten.

use crate::util::{all_blocks, Inserter};
use crate::{Pass, PassError};
use tpuc_ir::{payload, Attrs, Module, OpId, Opcode, TensorType};

pub struct WeightsLhs;

/// Whether `dot` is `x[.., K] · w[N, K]ᵀ` with `w` the larger operand.
fn applies(m: &Module, dot: OpId) -> bool {
    let d = &m.ops[dot];
    let a = d.payload::<payload::DotGeneral>();
    let (lt, rt) = (&m.values[d.operands()[0]].ty, &m.values[d.operands()[1]].ty);
    let (Some(ln), Some(rn)) = (lt.num_elements(), rt.num_elements()) else { return false };
    let lr = lt.rank() as i64;
    a.lhs_batching_dimensions.is_empty()
        && a.rhs_batching_dimensions.is_empty()
        && rt.rank() == 2
        && lr >= 2
        && a.rhs_contracting_dimensions == [1]
        && a.lhs_contracting_dimensions == [lr - 1]
        && rn > ln
        && rn >= MIN_WEIGHT_ELEMENTS
}

/// The smallest weight swapped (2 MB of f32): weights that stay in L2 gain nothing from the
/// swap (the GPT-2 block's 0.25-1 MB), GPT-2-small's (2.4-9 MB) run faster as the lhs (see the
/// header for the measurements).
pub const MIN_WEIGHT_ELEMENTS: i64 = 512 * 1024;

fn rewrite(m: &mut Module, dot: OpId) -> Result<(), PassError> {
    let fail = |e| crate::failed(crate::PassId::WeightsLhs.name(), e);
    let d = m.ops[dot].clone();
    let (x, w) = (d.operands()[0], d.operands()[1]);
    let lr = m.values[x].ty.rank() as i64;
    let mut attrs = d.attrs.clone();
    let swapped = payload::DotGeneral { lhs_contracting_dimensions: &[1], rhs_contracting_dimensions: &[lr - 1], ..d.payload() };
    attrs.update(swapped.attrs());
    let mut ins = Inserter::before(m, dot);
    let swapped = ins.build1(Opcode::DotGeneral, &[w, x], attrs, None).map_err(fail)?;
    // [N, f0, .., f(r-2)] → [f0, .., f(r-2), N]. A rank-2 `transpose(dot(w, x))` XLA's
    // algebraic simplifier turns straight back into `x · wᵀ`; through a unit dim
    // (`[N, M] → [N, 1, M] → [1, M, N] → [M, N]`) it stays.
    let (src, perm) = if lr == 2 {
        let dims = m.values[swapped].ty.static_dims().expect("static (checked)");
        let t3 = TensorType::from_static(m.values[swapped].ty.dtype, &[dims[0], 1, dims[1]]);
        let mut ins = Inserter::before(m, dot);
        (ins.build1(Opcode::Reshape, &[swapped], Attrs::new(), Some(t3)).map_err(fail)?, vec![1, 2, 0])
    } else {
        (swapped, (1..lr).chain([0]).collect())
    };
    let mut ins = Inserter::before(m, dot);
    let mut back = ins
        .build1(Opcode::Transpose, &[src], payload::Transpose { permutation: &perm }.attrs(), None)
        .map_err(fail)?;
    if lr == 2 {
        let rt = m.values[m.ops[dot].results()[0]].ty.clone();
        let mut ins = Inserter::before(m, dot);
        back = ins.build1(Opcode::Reshape, &[back], Attrs::new(), Some(rt)).map_err(fail)?;
    }
    crate::util::replace_op(m, dot, back);
    Ok(())
}

impl Pass for WeightsLhs {
    fn name(&self) -> &'static str {
        crate::PassId::WeightsLhs.name()
    }

    fn run(&self, m: &mut Module) -> Result<bool, PassError> {
        let mut changed = false;
        for b in all_blocks(m) {
            for op in m.block_ops(b) {
                if m.ops[op].opcode() == Opcode::DotGeneral && applies(m, op) {
                    rewrite(m, op)?;
                    changed = true;
                }
            }
        }
        Ok(changed)
    }
}
