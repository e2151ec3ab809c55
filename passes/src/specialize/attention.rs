//! The rules of normalizations (`softmax`, `layer_norm`, `attention`), and what lets causal
//! attention skip masking its scores: recognizing causal scores and zeroing the key side's
//! padding where it is produced (`zero_key_side`, `zero_early`).

use super::layouts::kept_reshape_dim;
use super::masks::Fill;
use super::ops::Step;
use super::{prefix, Sp, R};
use tpuc_ir::{payload, DimLayout, Layout, OpId, Opcode, Scalar, TensorType, ValueId};

impl Sp<'_> {
    /// Masked with -inf along the dimension, unless its padding is known to be -inf.
    pub(super) fn softmax(&mut self, op: OpId, ins: Vec<ValueId>, lays: Vec<Layout>) -> R<Step> {
        let old = self.old;
        let d = &old.ops[op];
        let dim = match d.opcode() {
            Opcode::Softmax => d.payload::<payload::Softmax>().dimension,
            _ => d.payload::<payload::LogSoftmax>().dimension,
        } as usize;
        let dt = old.values[d.operands()[0]].ty.dtype;
        let padded = !lays[0][dim].is_exact();
        let known = padded
            && (self.clean_of(d.operands()[0], dim) == Some(f64::NEG_INFINITY)
                || self.causal_scores(d.operands()[0], dim, &lays[0])?);
        let x = if known { ins[0] } else { self.mask(ins[0], &lays[0], &[dim], Fill::Scalar(dt.lowest()))? };
        let mut l = lays[0].clone();
        if let DimLayout::Uniform(e) = &l[dim] {
            l[dim] = prefix(self.shape(ins[0])[dim], e.clone());
        }
        self.emit(op, &[x], &[])?;
        self.lay.insert(d.results()[0], l);
        if padded {
            // exp(-inf - max) = 0 in the padding of every valid row.
            let z = if d.opcode() == Opcode::Softmax { 0.0 } else { f64::NEG_INFINITY };
            self.set_clean(d.results()[0], dim, z);
        }
        Ok(Step::Done)
    }

    /// Exact only when the normalized dims are not padded.
    pub(super) fn layer_norm(&self, op: OpId, ins: Vec<ValueId>, lays: Vec<Layout>) -> R<Step> {
        let old = self.old;
        let d = &old.ops[op];
        let rank = |i: usize| old.values[d.operands()[i]].ty.rank();
        let nr = d.payload::<payload::LayerNorm>().normalized_rank as usize;
        let r = rank(0);
        if let Some(i) = (r - nr..r).find(|&i| !lays[0][i].is_exact()) {
            return Err(self.fail(format!("normalizes over {}", self.padded_dim_note(d.operands()[0], i))));
        }
        Ok(Step::Emit(ins, vec![lays[0].clone(), lays[0].clone(), lays[0].clone()]))
    }

    /// Padded keys are set to 0 (values too) and masked out by a `-inf` bias (a `false` in a
    /// boolean mask), so a valid query weighs exactly the valid keys, causal or not; causal
    /// attention over queries padded as its keys needs no bias. Mask dims are laid out as the
    /// queries and keys they cover (or broadcast).
    pub(super) fn attention(&mut self, op: OpId, ins: Vec<ValueId>, lays: Vec<Layout>) -> R<Step> {
        let old = self.old;
        let d = &old.ops[op];
        let r = old.values[d.operands()[0]].ty.rank();
        let (q, k, v) = (&lays[0], &lays[1], &lays[2]);
        if !q[r - 1].is_exact() || !k[r - 1].is_exact() || !v[r - 1].is_exact() {
            return Err(self.fail("the head dim is padded"));
        }
        let mut l = Vec::new();
        for i in 0..r - 2 {
            let x = self.unify(&q[i], &k[i], d.operands()[1], i)?;
            l.push(self.unify(&x, &v[i], d.operands()[2], i)?);
        }
        let key = self.unify(&k[r - 2], &v[r - 2], d.operands()[2], r - 2)?;
        // A mask's dims line up with the scores' [.., L, S] from the end; each is broadcast
        // (size 1) or laid out as the batch, query or key dim it covers.
        if let (Some(&m), Some(ml)) = (d.operands().get(3), lays.get(3)) {
            let mdims = &old.values[m].ty.dims;
            let Some(off) = r.checked_sub(ml.len()) else {
                return Err(self.fail(format!("the mask has more dims ({}) than the scores ({r})", ml.len())));
            };
            for (i, x) in ml.iter().enumerate() {
                if mdims[i] == tpuc_ir::Dim::Static(1) {
                    continue;
                }
                let want = match off + i {
                    j if j == r - 1 => &key,
                    j if j == r - 2 => &q[r - 2],
                    j => &l[j],
                };
                self.unify(x, want, m, i)?;
            }
        }
        l.push(q[r - 2].clone());
        l.push(DimLayout::Exact);
        if key.is_exact() {
            return Ok(Step::Emit(ins, vec![l]));
        }
        // A weight of 0 (or a bias of -inf) times a NaN in a padded key or value is NaN:
        // padded keys and values are 0, so the scores of padded keys are finite.
        let mut kl = k.clone();
        kl[r - 2] = key.clone();
        let mut vl = v.clone();
        vl[r - 2] = key.clone();
        let mut new_ins = ins.clone();
        new_ins[1] = self.mask(ins[1], &kl, &[r - 2], Fill::Scalar(Scalar::Float(0.0)))?;
        new_ins[2] = self.mask(ins[2], &vl, &[r - 2], Fill::Scalar(Scalar::Float(0.0)))?;
        // Causal attention never weighs a key past its query: over queries padded as the
        // keys, a valid query sees only valid keys.
        let causal = d.payload::<payload::Attention>().is_causal;
        if causal && q[r - 2] == key && ins.len() == 3 {
            return Ok(Step::Emit(new_ins, vec![l]));
        }
        let s = self.shape(ins[1])[r - 2];
        let dt = old.values[d.operands()[0]].ty.dtype;
        let mask = match ins.get(3) {
            // The caller's mask, widened along the keys where it broadcasts, with its padded
            // keys replaced: `false`, or -inf for an additive mask (NaN and +inf included).
            Some(&m) => {
                let mut shape = self.shape(m);
                let mdt = self.new.values[m].ty.dtype;
                let mut m = m;
                if shape.last() != Some(&s) {
                    let rank = shape.len();
                    let dims: Vec<i64> = (0..rank as i64).collect();
                    if rank == 0 {
                        shape.push(s);
                    } else {
                        shape[rank - 1] = s;
                    }
                    let full: Vec<tpuc_ir::Dim> = shape.iter().map(|&x| tpuc_ir::Dim::Static(x)).collect();
                    m = self.b().broadcast_in_dim(m, &dims, full).map_err(|e| self.ir(e))?;
                }
                let mut ml = vec![DimLayout::Exact; shape.len()];
                ml[shape.len() - 1] = key.clone();
                let fill = if mdt.is_bool() { Scalar::Bool(false) } else { mdt.lowest() };
                self.mask(m, &ml, &[shape.len() - 1], Fill::Scalar(fill))?
            }
            // A [1, S] bias: 0 at valid keys, -inf at padded ones.
            None => {
                let zero = self.b().splat(Scalar::Float(0.0), TensorType::from_static(dt, &[1, s])).map_err(|e| self.ir(e))?;
                self.mask(zero, &vec![DimLayout::Exact, key.clone()], &[1], Fill::Scalar(dt.lowest()))?
            }
        };
        if new_ins.len() == 4 {
            new_ins[3] = mask;
        } else {
            new_ins.push(mask);
        }
        Ok(Step::Emit(new_ins, vec![l]))
    }

    /// Whether softmax input `x` (old) over padded `dim` is `scores + bias` with a bias that is
    /// -inf wherever the key index exceeds the query index (`dim - 1`, padded alike): a valid
    /// query then never weighs a padded key, and once the scores' key side holds 0 in its
    /// padding (a cheap mask at the matmul that made them, inserted here), the padding of `x` is
    /// -inf in every valid row without masking the [.., L, S] scores themselves.
    fn causal_scores(&mut self, x: ValueId, dim: usize, lay: &Layout) -> R<bool> {
        if dim == 0 || lay[dim - 1] != lay[dim] || lay[dim].prefix_extent().is_none() {
            return Ok(false);
        }
        let Some(op) = self.old.defining_op(x) else { return Ok(false) };
        let d = &self.old.ops[op];
        if d.opcode() != Opcode::Add {
            return Ok(false);
        }
        for (s, bias) in [(d.operands()[0], d.operands()[1]), (d.operands()[1], d.operands()[0])] {
            if !self.causal_bias(self.vmap[&bias], dim) {
                continue;
            }
            if self.zero_key_side(self.vmap[&s], dim, &lay[dim])? {
                self.set_clean(x, dim, f64::NEG_INFINITY);
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Whether new value `bias` (a broadcast of a computable mask) is -inf at every (query i,
    /// key j > i), the query being dim `dim - 1` and the key dim `dim`.
    fn causal_bias(&self, bias: ValueId, dim: usize) -> bool {
        let (mut v, mut q, mut k) = (bias, Some(dim - 1), Some(dim));
        while let Some(op) = self.new.defining_op(v) {
            let od = &self.new.ops[op];
            if od.opcode() != Opcode::BroadcastInDim {
                break;
            }
            let bd = od.payload::<payload::BroadcastInDim>().broadcast_dimensions;
            q = q.and_then(|q| bd.iter().position(|&x| x == q as i64));
            k = k.and_then(|k| bd.iter().position(|&x| x == k as i64));
            v = od.operands()[0];
        }
        let (Some(q), Some(k)) = (q, k) else { return false };
        let Some((dims, vals)) = crate::eval::eval_f64s(&self.new, v, 1 << 22) else { return false };
        let stride = |d: usize| dims[d + 1..].iter().product::<i64>() as usize;
        let (sq, sk) = (stride(q), stride(k));
        vals.iter().enumerate().all(|(idx, &x)| {
            let (i, j) = ((idx / sq) % dims[q] as usize, (idx / sk) % dims[k] as usize);
            j <= i || x == f64::NEG_INFINITY
        })
    }

    /// Makes the padding along `dim` of new value `s` (scores) finite by masking with 0 the
    /// padded dim of the matmul operand it comes from (through reshapes, transposes and
    /// scaling by finite constants), inserted just before that matmul. False when `s` has no
    /// such source.
    fn zero_key_side(&mut self, s: ValueId, dim: usize, key: &DimLayout) -> R<bool> {
        let (mut v, mut d) = (s, dim);
        let padded = self.shape(s)[dim];
        loop {
            let Some(op) = self.new.defining_op(v) else { return Ok(false) };
            let od = &self.new.ops[op];
            match od.opcode() {
                Opcode::Reshape => {
                    let (inn, out) = (self.shape(od.operands()[0]), self.shape(v));
                    let tail = out.len() - d;
                    if inn.len() < tail || inn[inn.len() - tail..] != out[d..] {
                        return Ok(false);
                    }
                    d = inn.len() - tail;
                    v = od.operands()[0];
                }
                Opcode::Transpose => {
                    d = od.payload::<payload::Transpose>().permutation.get(d).copied().unwrap_or(0) as usize;
                    v = od.operands()[0];
                }
                Opcode::Mul | Opcode::Div | Opcode::Convert => {
                    let finite = od.operands().iter().skip(1).all(|&o| crate::util::splat_f64(&self.new, o).is_some_and(f64::is_finite));
                    if !finite {
                        return Ok(false);
                    }
                    v = od.operands()[0];
                }
                Opcode::DotGeneral => {
                    let dot = od.payload::<payload::DotGeneral>();
                    let (lb, rb) = (dot.lhs_batching_dimensions, dot.rhs_batching_dimensions);
                    let (lc, rc) = (dot.lhs_contracting_dimensions, dot.rhs_contracting_dimensions);
                    let free = |rank: usize, b: &[i64], c: &[i64]| -> Vec<usize> {
                        (0..rank).filter(|i| !b.contains(&(*i as i64)) && !c.contains(&(*i as i64))).collect()
                    };
                    let (ls, rs) = (self.shape(od.operands()[0]), self.shape(od.operands()[1]));
                    let (lf, rf) = (free(ls.len(), &lb, &lc), free(rs.len(), &rb, &rc));
                    let (side, sd) = if d < lb.len() {
                        return Ok(false);
                    } else if d < lb.len() + lf.len() {
                        (0, lf[d - lb.len()])
                    } else {
                        (1, rf[d - lb.len() - lf.len()])
                    };
                    let operand = od.operands()[side];
                    if self.shape(operand)[sd] != padded {
                        return Ok(false);
                    }
                    if self.zero_early(operand, sd, key)? {
                        return Ok(true);
                    }
                    let mut layout = vec![DimLayout::Exact; self.shape(operand).len()];
                    layout[sd] = key.clone();
                    let first = self.new.ops.len();
                    let masked = self.mask(operand, &layout, &[sd], Fill::Scalar(Scalar::Float(0.0)))?;
                    for i in first..self.new.ops.len() {
                        let o: OpId = tpuc_ir::EntityId::new(i);
                        self.new.detach_op(o);
                        self.new.insert_op_before(op, o);
                    }
                    self.new.set_operand(op, side, masked);
                    return Ok(true);
                }
                _ => return Ok(false),
            }
        }
    }

    /// Zeroes the padding of new value `v` along `dim` (laid out as `l`) where the value is
    /// first produced: up the chain of ops that move zeros to zeros and keep the dim whole
    /// (reshapes that keep it, transposes, slices of other dims, converts, scaling by a finite
    /// non-zero constant). There the select fuses with the producer and sees its layout: a mask
    /// after a head split pads the head dim to the TPU's 128 lanes, so masking K and V there
    /// cost libtpu 17 % more bytes than the static program. The uses built so far read the
    /// mask's result (ops built later may read either): padding holds nothing a consumer reads
    /// unmasked, so 0 serves as well as what was there. False when `v` has no producer to
    /// hoist to (block arguments, or another block).
    pub(super) fn zero_early(&mut self, v: ValueId, dim: usize, l: &DimLayout) -> R<bool> {
        let (mut cur, mut d) = (v, dim);
        // The last value of the chain that an op of `main`'s block defines.
        let mut at: Option<(ValueId, usize, OpId)> = None;
        loop {
            if self.zeroed.contains(&(cur, d)) {
                return Ok(true);
            }
            let Some(op) = self.new.defining_op(cur) else { break };
            if self.new.ops[op].block() != Some(self.block) {
                break;
            }
            at = Some((cur, d, op));
            let od = &self.new.ops[op];
            let next = match od.opcode() {
                Opcode::Reshape => kept_reshape_dim(&self.shape(od.operands()[0]), &self.shape(cur), d),
                Opcode::Transpose => od.payload::<payload::Transpose>().permutation.get(d).map(|&x| x as usize),
                Opcode::Slice => {
                    let whole = self.shape(od.operands()[0])[d] == self.shape(cur)[d]
                        && od.payload::<payload::Slice>().strides.get(d).is_none_or(|&x| x == 1);
                    whole.then_some(d)
                }
                Opcode::Convert => Some(d),
                Opcode::Mul | Opcode::Div => {
                    let ok = od.operands().len() == 2
                        && crate::util::splat_f64(&self.new, od.operands()[1]).is_some_and(|c| c.is_finite() && c != 0.0);
                    ok.then_some(d)
                }
                _ => None,
            };
            match next {
                Some(nd) => {
                    cur = od.operands()[0];
                    d = nd;
                }
                None => break,
            }
        }
        let Some((top, td, def)) = at else { return Ok(false) };
        if top == v {
            return Ok(false);
        }
        let mut layout = vec![DimLayout::Exact; self.shape(top).len()];
        layout[td] = l.clone();
        // Size values built for the mask sit right after `def`; cached ones may come later.
        let extents = std::mem::take(&mut self.extents);
        let first = self.new.ops.len();
        let masked = self.mask(top, &layout, &[td], Fill::Scalar(Scalar::Float(0.0)));
        self.extents = extents;
        let masked = masked?;
        let mut after = def;
        for i in first..self.new.ops.len() {
            let o: OpId = tpuc_ir::EntityId::new(i);
            self.new.detach_op(o);
            self.new.insert_op_after(after, o);
            after = o;
        }
        let select = self.new.defining_op(masked).expect("the mask is an op");
        self.new.replace_uses_except(top, masked, |o| o == select);
        self.zeroed.insert((masked, td));
        Ok(true)
    }
}
