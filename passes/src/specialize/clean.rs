//! Known padding values: what the padding of a value holds after a mask, a softmax, ...,
//! carried through ops that keep positions, so that masks writing the same value again are
//! skipped.

use super::Sp;
use tpuc_ir::{payload, Attrs, OpId, Opcode, ValueId};

impl Sp<'_> {
    /// The value the padding along `dim` of old value `v` holds where the other padded dims
    /// are valid: from a splat constant, or tracked.
    pub(super) fn clean_of(&self, v: ValueId, dim: usize) -> Option<f64> {
        if let Some(&n) = self.vmap.get(&v) {
            if let Some(x) = crate::util::splat_f64(&self.new, n) {
                return Some(x);
            }
        }
        self.clean.get(&v).and_then(|c| c.get(dim).copied().flatten())
    }

    pub(super) fn set_clean(&mut self, v: ValueId, dim: usize, x: f64) {
        let rank = self.old.values[v].ty.rank();
        let c = self.clean.entry(v).or_insert_with(|| vec![None; rank]);
        if dim < c.len() {
            c[dim] = Some(x);
        }
    }

    /// Known padding values through ops that keep positions: elementwise ops on known values,
    /// transposes, and reshapes and broadcasts that keep a padded dim whole.
    pub(super) fn propagate_clean(&mut self, op: OpId) {
        let d = &self.old.ops[op];
        let Some(&r) = d.results().first() else { return };
        let lay = self.lay[&r].clone();
        let mut out: Vec<Option<f64>> = vec![None; lay.len()];
        match d.opcode() {
            Opcode::Transpose => {
                let p = d.payload::<payload::Transpose>().permutation;
                for (o, &i) in p.iter().enumerate() {
                    out[o] = self.clean_of(d.operands()[0], i as usize);
                }
            }
            Opcode::BroadcastInDim => {
                let bd = d.payload::<payload::BroadcastInDim>().broadcast_dimensions;
                let src = &self.lay[&d.operands()[0]];
                for (k, &o) in bd.iter().enumerate() {
                    if !lay[o as usize].is_exact() && src[k] == lay[o as usize] {
                        out[o as usize] = self.clean_of(d.operands()[0], k);
                    }
                }
            }
            Opcode::Reshape => {
                // A padded dim that keeps its place counted from the end (the same dims after
                // it) is the same dim.
                let (inn, outs) = (self.old_dims(d.operands()[0]), self.old_dims(r));
                let src = &self.lay[&d.operands()[0]];
                for (o, l) in lay.iter().enumerate() {
                    let tail = outs.len() - o;
                    if l.is_exact() || inn.len() < tail || inn[inn.len() - tail..] != outs[o..] {
                        continue;
                    }
                    let i = inn.len() - tail;
                    if src[i] == *l {
                        out[o] = self.clean_of(d.operands()[0], i);
                    }
                }
            }
            Opcode::Select => {
                for (dim, slot) in out.iter_mut().enumerate() {
                    let (a, b) = (self.clean_of(d.operands()[1], dim), self.clean_of(d.operands()[2], dim));
                    if let (Some(a), Some(b)) = (a, b) {
                        if a == b {
                            *slot = Some(a);
                        }
                    }
                }
            }
            opc if opc.is_elementwise() || opc == Opcode::Compare => {
                for (dim, slot) in out.iter_mut().enumerate() {
                    if lay[dim].is_exact() {
                        continue;
                    }
                    let vals: Option<Vec<f64>> = d.operands().iter().map(|&v| self.clean_of(v, dim)).collect();
                    *slot = vals.and_then(|v| elementwise_f64(opc, &d.attrs, &v));
                }
            }
            _ => return,
        }
        if out.iter().any(Option::is_some) {
            self.clean.insert(r, out);
        }
    }
}

/// An elementwise op on known scalar values (the padding values `Sp::clean_of` tracks).
fn elementwise_f64(op: Opcode, attrs: &Attrs, v: &[f64]) -> Option<f64> {
    let b = |x: bool| if x { 1.0 } else { 0.0 };
    Some(match (op, v) {
        (Opcode::Add, [x, y]) => x + y,
        (Opcode::Sub, [x, y]) => x - y,
        (Opcode::Mul, [x, y]) => x * y,
        (Opcode::Div, [x, y]) => x / y,
        (Opcode::Max, [x, y]) => x.max(*y),
        (Opcode::Min, [x, y]) => x.min(*y),
        (Opcode::Neg, [x]) => -x,
        (Opcode::Exp, [x]) => x.exp(),
        (Opcode::Convert, [x]) => *x,
        (Opcode::Not, [x]) => b(*x == 0.0),
        (Opcode::Compare, [x, y]) => b(payload::Compare::of(attrs)?.direction.holds(x.partial_cmp(y))),
        _ => return None,
    })
}
