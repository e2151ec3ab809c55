//! The rules of shape ops: broadcast, transpose, reshape, slice, concatenate, pad, reverse.

use super::masks::Fill;
use super::ops::Step;
use super::{prefix, Sp, R};
use tpuc_ir::{payload, DimLayout, Layout, OpId, Opcode, ValueId};

impl Sp<'_> {
    /// Broadcast dims become uniform; the others keep their layouts.
    pub(super) fn broadcast_in_dim(&self, op: OpId, ins: Vec<ValueId>, lays: Vec<Layout>) -> R<Step> {
        let old = self.old;
        let d = &old.ops[op];
        let bd = d.payload::<payload::BroadcastInDim>().broadcast_dimensions;
        let in_shape = self.shape(ins[0]);
        let dims = self.old_dims(d.results()[0]);
        let out_shape = self.spec_type(&old.values[d.results()[0]].ty)?.static_dims().unwrap_or_default();
        let mut l: Layout =
            dims.iter().map(|e| e.clone().map_or(DimLayout::Exact, DimLayout::Uniform)).collect();
        for (i, &o) in bd.iter().enumerate() {
            let o = o as usize;
            if in_shape[i] == out_shape[o] {
                l[o] = lays[0][i].clone();
            }
        }
        Ok(Step::Emit(ins, vec![l]))
    }

    /// Permutes the layouts.
    pub(super) fn transpose(&self, op: OpId, ins: Vec<ValueId>, lays: Vec<Layout>) -> R<Step> {
        let d = &self.old.ops[op];
        let p = d.payload::<payload::Transpose>().permutation;
        Ok(Step::Emit(ins, vec![p.iter().map(|&i| lays[0][i as usize].clone()).collect()]))
    }

    /// Regroups factors; a prefix split into a product of sizes is regathered first.
    pub(super) fn reshape(&mut self, op: OpId, ins: Vec<ValueId>, lays: Vec<Layout>) -> R<Step> {
        let d = &self.old.ops[op];
        match self.reshape_layout(d.operands()[0], &lays[0], d.results()[0]) {
            Ok(l) => Ok(Step::Emit(ins, vec![l])),
            Err(e) => {
                // A prefix split into a product of sizes (a host-padded `[b*s, v]` viewed as
                // `[b, s, v]`): regathered into the product's layout, the split is clean.
                let Some((x, lay)) = self.regather_splits(ins[0], d.operands()[0], &lays[0], d.results()[0])? else {
                    return Err(e);
                };
                let l = self.reshape_layout(d.operands()[0], &lay, d.results()[0])?;
                Ok(Step::Emit(vec![x], vec![l]))
            }
        }
    }

    /// A padded dim: whole, or a static slice inside the smallest size.
    pub(super) fn slice(&mut self, op: OpId, ins: Vec<ValueId>, lays: Vec<Layout>) -> R<Step> {
        let d = &self.old.ops[op];
        let s = d.payload::<payload::Slice>();
        let (st, lim, str_) = (s.start_indices, s.limit_indices, s.strides);
        let shape = self.shape(ins[0]);
        // A symbolic dim is sliced whole, with the limit i64::MAX: the bucket's size now.
        let limits: Vec<i64> = lim.iter().zip(&shape).map(|(&l, &n)| l.min(n)).collect();
        if limits != lim {
            let mut attrs = d.attrs.clone();
            attrs.update(payload::Slice { limit_indices: &limits, ..s }.attrs());
            let outs = self.emit_with(op, &ins, attrs, &[])?;
            let l = lays[0]
                .iter()
                .enumerate()
                .map(|(i, x)| if st[i] == 0 && limits[i] == shape[i] && str_[i] == 1 { x.clone() } else { DimLayout::Exact })
                .collect::<Vec<_>>();
            if let Some(i) = (0..l.len()).find(|&i| !lays[0][i].is_exact() && l[i].is_exact()) {
                return Err(self.fail(format!("cuts {}", self.padded_dim_note(d.operands()[0], i))));
            }
            self.lay.insert(d.results()[0], l);
            let _ = outs;
            return Ok(Step::Done);
        }
        let mut l = Vec::with_capacity(lays[0].len());
        for (i, x) in lays[0].iter().enumerate() {
            l.push(match x {
                DimLayout::Exact => DimLayout::Exact,
                _ if st[i] == 0 && lim[i] == shape[i] && str_[i] == 1 => x.clone(),
                DimLayout::Uniform(_) => DimLayout::Exact,
                DimLayout::Factors(f) if f.len() == 1 => {
                    let lo = self.old.symbols.range_of(&f[0].extent).0;
                    if lim[i] > lo {
                        return Err(self.fail(format!(
                            "{} is cut at {} but can be as small as {lo}",
                            self.padded_dim_note(d.operands()[0], i),
                            lim[i]
                        )));
                    }
                    DimLayout::Exact
                }
                DimLayout::Factors(_) => {
                    return Err(self.not_prefix("uses", d.operands()[0], i))
                }
            });
        }
        Ok(Step::Emit(ins, vec![l]))
    }

    /// Along a padded dim: joined, then each element gathered to its real place.
    pub(super) fn concatenate(&mut self, op: OpId, ins: Vec<ValueId>, lays: Vec<Layout>) -> R<Step> {
        let d = &self.old.ops[op];
        let dim = d.payload::<payload::Concatenate>().dimension as usize;
        let mut l = lays[0].clone();
        for (k, other) in lays.iter().enumerate().skip(1) {
            for (i, x) in other.iter().enumerate() {
                if i != dim {
                    l[i] = self.unify(&l[i], x, d.operands()[k], i)?;
                }
            }
        }
        let last = lays.len() - 1;
        if lays[..last].iter().all(|x| x[dim].is_exact()) {
            // Only the last operand is padded: the valid part stays a prefix.
            l[dim] = match (&lays[last][dim], self.old_dims(d.results()[0])[dim].clone()) {
                (DimLayout::Exact, _) | (_, None) => DimLayout::Exact,
                (x, Some(e)) => match x.prefix_extent() {
                    Some(_) => self.prefix_of(e),
                    None => return Err(self.not_prefix("joins", d.operands()[last], dim)),
                },
            };
            Ok(Step::Emit(ins, vec![l]))
        } else {
            // A padded operand before another: join, then gather every valid element
            // to its place (KV caches: `cat([past, new])`).
            let x = self.concat_gather(op, &ins, &lays, dim)?;
            let e = self.old_dims(d.results()[0])[dim].clone().unwrap_or_default();
            l[dim] = prefix(self.shape(x)[dim], e);
            self.vmap.insert(d.results()[0], x);
            self.lay.insert(d.results()[0], l);
            Ok(Step::Done)
        }
    }

    /// Padding replaced by the pad value first; no interior or negative high padding.
    pub(super) fn pad(&mut self, op: OpId, ins: Vec<ValueId>, lays: Vec<Layout>) -> R<Step> {
        let d = &self.old.ops[op];
        let payload::Pad { edge_padding_low: lo, edge_padding_high: hi, interior_padding: int } = d.payload();
        let dims = self.old_dims(d.results()[0]);
        let mut mask_dims = Vec::new();
        let mut l = lays[0].clone();
        for (i, x) in lays[0].iter().enumerate() {
            if x.is_exact() {
                continue;
            }
            if x.prefix_extent().is_none() || int[i] != 0 || hi[i] < 0 {
                return Err(self.fail(format!(
                    "pads {} with interior or negative high padding, or it is a product of padded dims",
                    self.padded_dim_note(d.operands()[0], i)
                )));
            }
            mask_dims.push(i);
            let _ = lo;
            let e = dims[i].clone().unwrap_or_default();
            l[i] = self.prefix_of(e);
        }
        let x = self.mask(ins[0], &lays[0], &mask_dims, Fill::Value(ins[1]))?;
        Ok(Step::Emit(vec![x, ins[1]], vec![l]))
    }

    /// A padded prefix is gathered from `n - 1 - i`.
    pub(super) fn reverse(&mut self, op: OpId, ins: Vec<ValueId>, lays: Vec<Layout>) -> R<Step> {
        let d = &self.old.ops[op];
        let dims = d.payload::<payload::Reverse>().dimensions;
        let mut l = lays[0].clone();
        let mut keep = Vec::new();
        let mut gathers = Vec::new();
        for &dd in dims {
            let i = dd as usize;
            match &lays[0][i] {
                DimLayout::Exact => keep.push(dd),
                DimLayout::Uniform(_) => {}
                DimLayout::Factors(f) if f.len() == 1 => gathers.push((i, f[0].extent.clone())),
                DimLayout::Factors(_) => {
                    return Err(self.not_prefix("reverses", d.operands()[0], i))
                }
            }
            if let DimLayout::Uniform(_) = &lays[0][i] {
                l[i] = lays[0][i].clone();
            }
        }
        let mut x = ins[0];
        if !keep.is_empty() {
            x = self
                .b()
                .build1(Opcode::Reverse, &[x], payload::Reverse { dimensions: &keep }.attrs(), None)
                .map_err(|e| self.ir(e))?;
        }
        for (i, e) in gathers {
            x = self.reverse_prefix(x, i, &e)?;
        }
        self.vmap.insert(d.results()[0], x);
        self.lay.insert(d.results()[0], l);
        Ok(Step::Done)
    }
}
