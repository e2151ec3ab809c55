//! The rules of ops exact only when the dims they work on are not padded: linear algebra
//! (trailing two dims), collectives that move blocks along a dim, and FFTs.

use super::ops::Step;
use super::{Sp, R};
use tpuc_ir::{payload, DimLayout, Layout, OpId, Opcode, ValueId};

impl Sp<'_> {
    /// Cholesky, triangular solve, QR, ...: matrix (trailing two) dims not padded.
    pub(super) fn linalg(&self, op: OpId, ins: Vec<ValueId>, lays: Vec<Layout>) -> R<Step> {
        let old = self.old;
        let d = &old.ops[op];
        for (k, l) in lays.iter().enumerate() {
            let r = l.len();
            if let Some(i) = (r.saturating_sub(2)..r).find(|&i| !l[i].is_exact()) {
                return Err(self.fail(format!("factors or solves over {}", self.padded_dim_note(d.operands()[k], i))));
            }
        }
        // Batch dims keep their layouts; each result drops to its own rank.
        let batch = &lays[lays.len() - 1];
        let outs = d
            .results()
            .iter()
            .map(|&v| {
                let r = old.values[v].ty.rank();
                let mut l: Vec<DimLayout> = batch[..batch.len().min(r)].to_vec();
                l.resize(r, DimLayout::Exact);
                for x in l.iter_mut().skip(batch.len().saturating_sub(2)) {
                    *x = DimLayout::Exact;
                }
                l
            })
            .collect();
        Ok(Step::Emit(ins, outs))
    }

    /// All-gather, reduce-scatter, all-to-all: the gathered / scattered dim not padded.
    pub(super) fn moves_blocks(&self, op: OpId, ins: Vec<ValueId>, lays: Vec<Layout>) -> R<Step> {
        let d = &self.old.ops[op];
        let dim = match d.opcode() {
            Opcode::AllGather => d.payload::<payload::AllGather>().dimension,
            Opcode::ReduceScatter => d.payload::<payload::ReduceScatter>().dimension,
            _ => d.payload::<payload::AllToAll>().dimension,
        } as usize;
        if !lays[0][dim].is_exact() {
            return Err(self.fail(format!("moves blocks along {}", self.padded_dim_note(d.operands()[0], dim))));
        }
        Ok(Step::Emit(ins, vec![lays[0].clone()]))
    }

    /// The transformed (trailing) dims not padded.
    pub(super) fn fft(&self, op: OpId, ins: Vec<ValueId>, lays: Vec<Layout>) -> R<Step> {
        let old = self.old;
        let d = &old.ops[op];
        let rank = |i: usize| old.values[d.operands()[i]].ty.rank();
        let k = d.payload::<payload::Fft>().fft_length.len();
        let r = rank(0);
        if let Some(i) = (r.saturating_sub(k)..r).find(|&i| !lays[0][i].is_exact()) {
            return Err(self.fail(format!("transforms {}", self.padded_dim_note(d.operands()[0], i))));
        }
        Ok(Step::Emit(ins, vec![lays[0].clone()]))
    }
}
