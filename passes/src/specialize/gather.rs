//! The rules of `gather` and `scatter`: the gather's output layout, pairing batch dims of
//! operand and indices, and a scatter's padded index positions pointed out of bounds.

use super::masks::Fill;
use super::ops::Step;
use super::{Sp, R};
use tpuc_ir::{DimLayout, GatherDims, Layout, OpId, ScatterDims, ValueId};

impl Sp<'_> {
    /// Padded dims indexed, taken whole, batch dims of the indices, or batch dims laid out
    /// alike in operand and indices.
    pub(super) fn gather(&mut self, op: OpId, mut ins: Vec<ValueId>, mut lays: Vec<Layout>) -> R<Step> {
        self.pair_batch_dims(op, &mut ins, &mut lays)?;
        let l = self.gather_layout(op, &lays)?;
        Ok(Step::Emit(ins, vec![l]))
    }

    /// Padded index positions point out of bounds (skipped); update windows whole.
    pub(super) fn scatter(&mut self, op: OpId, ins: Vec<ValueId>, lays: Vec<Layout>) -> R<Step> {
        let idx = self.scatter_indices(op, &ins, &lays)?;
        Ok(Step::Emit(vec![ins[0], idx, ins[2]], vec![lays[0].clone()]))
    }

    fn gather_layout(&self, op: OpId, lays: &[Layout]) -> R<Layout> {
        let d = &self.old.ops[op];
        let g = GatherDims::of(&d.attrs).ok_or_else(|| self.fail("a gather without its dimension numbers"))?;
        let (offset, collapsed, obatch, start_map, sizes) =
            (&g.offset_dims, &g.collapsed_slice_dims, &g.operand_batching_dims, &g.start_index_map, &g.slice_sizes);
        let ivd = g.index_vector_dim as usize;
        let op_shape = self.spec_type(&self.old.values[d.operands()[0]].ty)?.static_dims().unwrap_or_default();
        let out_rank = self.old.values[d.results()[0]].ty.rank();
        if lays[1].get(ivd).is_some_and(|x| !x.is_exact()) {
            return Err(self.fail("the index vector dim of a gather is padded"));
        }
        // Offset dims: operand dims not collapsed, in order.
        let kept: Vec<usize> = (0..op_shape.len()).filter(|i| !collapsed.contains(&(*i as i64)) && !obatch.contains(&(*i as i64))).collect();
        let mut offset_lays = Vec::new();
        for &i in &kept {
            let x = &lays[0][i];
            if x.is_exact() {
                offset_lays.push(DimLayout::Exact);
            } else if sizes[i] == op_shape[i] && !start_map.contains(&(i as i64)) {
                offset_lays.push(x.clone());
            } else if sizes[i] == 1 || start_map.contains(&(i as i64)) && sizes[i] <= 1 {
                offset_lays.push(DimLayout::Exact);
            } else {
                return Err(self.fail(format!("gathers a window of {}", self.padded_dim_note(d.operands()[0], i))));
            }
        }
        let batch_lays: Vec<DimLayout> = lays[1].iter().enumerate().filter(|(i, _)| *i != ivd).map(|(_, x)| x.clone()).collect();
        let (mut bi, mut oi) = (batch_lays.into_iter(), offset_lays.into_iter());
        Ok((0..out_rank)
            .map(|i| if offset.contains(&(i as i64)) { oi.next() } else { bi.next() }.unwrap_or(DimLayout::Exact))
            .collect())
    }

    /// A batched gather pairs operand and index positions along each batch dim (see
    /// [`Sp::pair_dims`]); both layouts are the agreed one after.
    fn pair_batch_dims(&mut self, op: OpId, ins: &mut [ValueId], lays: &mut [Layout]) -> R<()> {
        let d = &self.old.ops[op];
        let g = GatherDims::of(&d.attrs).ok_or_else(|| self.fail("a gather without its dimension numbers"))?;
        let index = d.operands()[1];
        for (o, i) in g.operand_batching_dims.into_iter().zip(g.start_indices_batching_dims) {
            let (o, i) = (o as usize, i as usize);
            let (agreed, _) = self.pair_dims(ins, lays, [o, i], index)?;
            lays[0][o] = agreed.clone();
            lays[1][i] = agreed;
        }
        Ok(())
    }

    /// A scatter's indices with every padded position pointing out of bounds (scatter skips
    /// such updates), after checking that the updates' padding is all in those positions or
    /// lands in the operand's padding.
    fn scatter_indices(&mut self, op: OpId, ins: &[ValueId], lays: &[Layout]) -> R<ValueId> {
        let d = &self.old.ops[op];
        let sd = ScatterDims::of(&d.attrs).ok_or_else(|| self.fail("a scatter without its dimension numbers"))?;
        let (window, inserted, obatch) = (&sd.update_window_dims, &sd.inserted_window_dims, &sd.input_batching_dims);
        let ivd = sd.index_vector_dim as usize;
        if !obatch.is_empty() && lays.iter().any(|l| l.iter().any(|x| !x.is_exact())) {
            return Err(self.fail("batched scatter with padded dims"));
        }
        if lays[1].get(ivd).is_some_and(|x| !x.is_exact()) {
            return Err(self.fail("the index vector dim of a scatter is padded"));
        }
        // Updates: scatter dims follow the indices' dims; window dims follow the operand's
        // dims that are not inserted.
        let batch: Vec<&DimLayout> = lays[1].iter().enumerate().filter(|(i, _)| *i != ivd).map(|(_, x)| x).collect();
        let op_dims: Vec<usize> = (0..lays[0].len()).filter(|i| !inserted.contains(&(*i as i64))).collect();
        let upd_shape = self.shape(ins[2]);
        let op_shape = self.shape(ins[0]);
        let (mut bi, mut wi) = (0, 0);
        for (k, x) in lays[2].iter().enumerate() {
            if window.contains(&(k as i64)) {
                let od = op_dims.get(wi).copied().unwrap_or(0);
                wi += 1;
                let full = upd_shape[k] == op_shape[od] && *x == lays[0][od];
                if !x.is_exact() && !full {
                    return Err(self.fail(format!("the scatter's update window {}", self.padded_dim_note(d.operands()[2], k))));
                }
            } else {
                let want = batch.get(bi).copied().cloned().unwrap_or(DimLayout::Exact);
                bi += 1;
                if !x.is_exact() && self.unify(x, &want, d.operands()[2], k).is_err() {
                    return Err(self.fail(format!("the scatter's updates are padded unlike its indices ({})", self.padded_dim_note(d.operands()[2], k))));
                }
            }
        }
        let dims: Vec<usize> = (0..lays[1].len()).filter(|&i| i != ivd && !lays[1][i].is_exact()).collect();
        let dt = self.new.values[ins[1]].ty.dtype;
        self.mask(ins[1], &lays[1], &dims, Fill::Scalar(dt.highest()))
    }
}
