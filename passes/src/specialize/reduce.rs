//! The rules of reductions and ops along one dim: `reduce`, `arg_reduce`, `reduce_window`
//! (masked with the reduction's identity), `scan` (prefix scans never read padding) and
//! `sort` (padding filled to sort last).

use super::masks::Fill;
use super::ops::Step;
use super::{prefix, Sp, R};
use tpuc_ir::{payload, ArgReduceKind, DimLayout, Layout, OpId, ReduceKind, Scalar, ValueId};

impl Sp<'_> {
    /// Reduced dims masked with the reduction's identity.
    pub(super) fn reduce(&mut self, op: OpId, ins: Vec<ValueId>, lays: Vec<Layout>) -> R<Step> {
        let old = self.old;
        let d = &old.ops[op];
        let payload::Reduce { dimensions, kind } = d.payload();
        let rank = |i: usize| old.values[d.operands()[i]].ty.rank();
        let dims = as_usize(dimensions);
        let dt = old.values[d.operands()[0]].ty.dtype;
        let fill = kind.identity(dt);
        let f = fill.as_f64();
        let need: Vec<usize> = dims.iter().copied().filter(|&i| self.clean_of(d.operands()[0], i) != Some(f)).collect();
        let x = self.mask(ins[0], &lays[0], &need, Fill::Scalar(fill))?;
        let l = (0..rank(0)).filter(|i| !dims.contains(i)).map(|i| lays[0][i].clone()).collect();
        Ok(Step::Emit(vec![x], vec![l]))
    }

    /// Masked with the lowest (argmax) or highest (argmin) value.
    pub(super) fn arg_reduce(&mut self, op: OpId, ins: Vec<ValueId>, lays: Vec<Layout>) -> R<Step> {
        let old = self.old;
        let d = &old.ops[op];
        let payload::ArgReduce { dimension, kind } = d.payload();
        let rank = |i: usize| old.values[d.operands()[i]].ty.rank();
        let dim = dimension as usize;
        let dt = old.values[d.operands()[0]].ty.dtype;
        let fill = if kind == ArgReduceKind::Argmax { dt.lowest() } else { dt.highest() };
        let x = self.mask(ins[0], &lays[0], &[dim], Fill::Scalar(fill))?;
        let l = (0..rank(0)).filter(|&i| i != dim).map(|i| lays[0][i].clone()).collect();
        Ok(Step::Emit(vec![x], vec![l]))
    }

    /// Window dims masked with the window reduction's identity.
    pub(super) fn reduce_window(&mut self, op: OpId, ins: Vec<ValueId>, lays: Vec<Layout>) -> R<Step> {
        let old = self.old;
        let d = &old.ops[op];
        let a = d.payload::<payload::ReduceWindow>();
        let dt = old.values[d.operands()[0]].ty.dtype;
        let fill = ReduceKind::from(a.kind).identity(dt);
        let (win, st, bd, wd, pad) = (a.window_dimensions, a.window_strides, a.base_dilations, a.window_dilations, a.padding);
        let dims = self.old_dims(d.results()[0]);
        let mut l = Vec::new();
        let mut mask_dims = Vec::new();
        for (i, x) in lays[0].iter().enumerate() {
            let trivial = win[i] == 1
                && st.get(i).copied().unwrap_or(1) == 1
                && bd.get(i).copied().unwrap_or(1) == 1
                && wd.get(i).copied().unwrap_or(1) == 1
                && pad.get(2 * i).copied().unwrap_or(0) == 0
                && pad.get(2 * i + 1).copied().unwrap_or(0) == 0;
            if x.is_exact() || trivial {
                l.push(x.clone());
                continue;
            }
            if x.prefix_extent().is_none() {
                return Err(self.not_prefix("uses", d.operands()[0], i));
            }
            mask_dims.push(i);
            l.push(match &dims[i] {
                Some(e) => self.prefix_of(e.clone()),
                None => DimLayout::Exact,
            });
        }
        let x = self.mask(ins[0], &lays[0], &mask_dims, Fill::Scalar(fill))?;
        Ok(Step::Emit(vec![x], vec![l]))
    }

    /// Prefix scans never read padding; a multi-factor dim is rejected.
    pub(super) fn scan(&self, op: OpId, ins: Vec<ValueId>, lays: Vec<Layout>) -> R<Step> {
        let d = &self.old.ops[op];
        let dim = d.payload::<payload::Scan>().dimension as usize;
        let mut l = lays[0].clone();
        l[dim] = match &lays[0][dim] {
            DimLayout::Exact => DimLayout::Exact,
            DimLayout::Uniform(e) => {
                prefix(self.shape(ins[0])[dim], e.clone())
            }
            DimLayout::Factors(f) if f.len() == 1 => lays[0][dim].clone(),
            DimLayout::Factors(_) => {
                return Err(self.not_prefix("scans", d.operands()[0], dim))
            }
        };
        Ok(Step::Emit(ins, vec![l]))
    }

    /// Padding filled to sort last (NaN ascending, lowest descending; the sort is stable).
    pub(super) fn sort(&mut self, op: OpId, ins: Vec<ValueId>, lays: Vec<Layout>) -> R<Step> {
        let old = self.old;
        let d = &old.ops[op];
        let payload::Sort { dimension, descending } = d.payload();
        let dim = dimension as usize;
        let mut l = lays[0].clone();
        if lays[0][dim].is_exact() {
            Ok(Step::Emit(ins, vec![l.clone(), l]))
        } else {
            let e = match lays[0][dim].prefix_extent() {
                Some(Some(e)) => e.clone(),
                _ => return Err(self.not_prefix("sorts along", d.operands()[0], dim)),
            };
            // The padding sorts after every valid element: the sort is stable, and NaN
            // is the largest value (torch's order), so ascending pads with NaN (or the
            // largest integer) and descending with the lowest value.
            let dt = old.values[d.operands()[0]].ty.dtype;
            let fill = match (descending, dt.is_float()) {
                (false, true) => Scalar::Float(f64::NAN),
                (false, false) => dt.highest(),
                (true, _) => dt.lowest(),
            };
            let x = self.mask(ins[0], &lays[0], &[dim], Fill::Scalar(fill))?;
            l[dim] = prefix(self.shape(ins[0])[dim], e);
            Ok(Step::Emit(vec![x], vec![l.clone(), l]))
        }
    }
}

fn as_usize(v: &[i64]) -> Vec<usize> {
    v.iter().map(|&x| x as usize).collect()
}
