//! The rules of contractions: `dot_general` and `convolution` mask their contracted padded
//! dims with 0 (as early as the operands' producers allow).

use super::masks::Fill;
use super::ops::Step;
use super::{Sp, R};
use tpuc_ir::{payload, DimLayout, Layout, OpId, Scalar, ValueId};

impl Sp<'_> {
    /// Contracting dims masked with 0 in both operands, after pairing their layouts.
    pub(super) fn dot_general(&mut self, op: OpId, mut ins: Vec<ValueId>, mut lays: Vec<Layout>) -> R<Step> {
        let d = &self.old.ops[op];
        let dot = d.payload::<payload::DotGeneral>();
        let (lb, rb, lc, rc) = (
            dot.lhs_batching_dimensions.to_vec(),
            dot.rhs_batching_dimensions.to_vec(),
            dot.lhs_contracting_dimensions.to_vec(),
            dot.rhs_contracting_dimensions.to_vec(),
        );
        // A contracted dim pairs position i of one side with position i of the other:
        // both must lay it out alike. A prefix meeting a product of padded sizes (a
        // saved `[b*s, d]` activation, padded at its end by the host, against a
        // `[b, s, d]` gradient reshaped in the program) is regathered into the product's
        // layout; other mismatches are errors, never a silent pairing of different rows.
        let mut regathered = [false, false];
        for (&x, &y) in lc.iter().zip(&rc) {
            if let (_, Some(side)) = self.pair_dims(&mut ins, &mut lays, [x as usize, y as usize], d.operands()[1])? {
                regathered[side] = true;
            }
        }
        // Both sides of a padded contraction must hold 0 there (0 * NaN is NaN); a side
        // known to hold 0 already is left alone.
        let (mut lm, mut rm) = (Vec::new(), Vec::new());
        for (&x, &y) in lc.iter().zip(&rc) {
            let (x, y) = (x as usize, y as usize);
            if regathered[0] || self.clean_of(d.operands()[0], x) != Some(0.0) {
                lm.push(x);
            }
            if regathered[1] || self.clean_of(d.operands()[1], y) != Some(0.0) {
                rm.push(y);
            }
        }
        // Zeroed as early as their producers allow, else at the matmul.
        let early = |sp: &mut Self, v: ValueId, lay: &Layout, dims: Vec<usize>| -> R<Vec<usize>> {
            let mut left = Vec::new();
            for x in dims {
                if lay[x].is_exact() || !sp.zero_early(v, x, &lay[x])? {
                    left.push(x);
                }
            }
            Ok(left)
        };
        let (lm, rm) = (early(self, ins[0], &lays[0], lm)?, early(self, ins[1], &lays[1], rm)?);
        let lhs = self.mask(ins[0], &lays[0], &lm, Fill::Scalar(Scalar::Float(0.0)))?;
        let rhs = self.mask(ins[1], &lays[1], &rm, Fill::Scalar(Scalar::Float(0.0)))?;
        let mut l = Vec::new();
        for (&x, &y) in lb.iter().zip(&rb) {
            l.push(self.unify(&lays[0][x as usize], &lays[1][y as usize], d.operands()[1], y as usize)?);
        }
        for (side, (b, c)) in [(&lb, &lc), (&rb, &rc)].into_iter().enumerate() {
            for (i, x) in lays[side].iter().enumerate() {
                if !b.contains(&(i as i64)) && !c.contains(&(i as i64)) {
                    l.push(x.clone());
                }
            }
        }
        Ok(Step::Emit(vec![lhs, rhs], vec![l]))
    }

    /// Input feature and spatial dims masked with 0; the kernel is not padded.
    pub(super) fn convolution(&mut self, op: OpId, ins: Vec<ValueId>, lays: Vec<Layout>) -> R<Step> {
        let old = self.old;
        let d = &old.ops[op];
        let rank = |i: usize| old.values[d.operands()[i]].ty.rank();
        if lays[1].iter().any(|x| !x.is_exact()) {
            return Err(self.fail("the convolution kernel has a padded dim"));
        }
        let nd = rank(0);
        if d.payload::<payload::Convolution>().batch_group_count != 1 && !lays[0][0].is_exact() {
            return Err(self.fail("a grouped-batch convolution over a padded batch"));
        }
        let dims = self.old_dims(d.results()[0]);
        let mut l = vec![lays[0][0].clone(), DimLayout::Exact];
        for i in 2..nd {
            l.push(match &lays[0][i] {
                DimLayout::Exact => DimLayout::Exact,
                x if x.prefix_extent().is_some() => match &dims[i] {
                    Some(e) => self.prefix_of(e.clone()),
                    None => DimLayout::Exact,
                },
                _ => return Err(self.not_prefix("uses", d.operands()[0], i)),
            });
        }
        let x = self.mask(ins[0], &lays[0], &(1..nd).collect::<Vec<_>>(), Fill::Scalar(Scalar::Float(0.0)))?;
        Ok(Step::Emit(vec![x, ins[1]], vec![l]))
    }
}
