//! Use lists: every operand slot that reads a value, kept up to date by the only ways
//! operands change (`set_operand`, `replace_all_uses`, erasing), and their consistency check.

use super::*;

impl Module {
    /// The uses of `v` (operand slots of ops that are not erased).
    pub fn uses(&self, v: ValueId) -> &[Use] {
        &self.values[v].uses
    }

    /// True if some op that is not erased reads `v`.
    pub fn has_uses(&self, v: ValueId) -> bool {
        !self.values[v].uses.is_empty()
    }

    /// The ops reading `v`, once per use.
    pub fn users(&self, v: ValueId) -> impl Iterator<Item = OpId> + '_ {
        self.values[v].uses.iter().map(|u| u.op)
    }

    pub(super) fn push_use(&mut self, v: ValueId, u: Use) {
        let uses = &mut self.values[v].uses;
        self.ops[u.op].use_pos[u.index as usize] = uses.len() as u32;
        uses.push(u);
    }

    /// Drops use `u` of `v` in O(1): the last use takes its place in the list.
    pub(super) fn remove_use(&mut self, v: ValueId, u: Use) {
        if !self.values.is_valid(v) {
            return;
        }
        let pos = self.ops[u.op].use_pos[u.index as usize] as usize;
        let uses = &mut self.values[v].uses;
        if uses.get(pos) != Some(&u) {
            return;
        }
        uses.swap_remove(pos);
        if let Some(&moved) = uses.get(pos) {
            self.ops[moved.op].use_pos[moved.index as usize] = pos as u32;
        }
        self.ops[u.op].use_pos[u.index as usize] = u32::MAX;
    }

    /// Sets operand `index` of `op` to `v`.
    pub fn set_operand(&mut self, op: OpId, index: usize, v: ValueId) {
        let old = self.ops[op].operands[index];
        if old == v {
            return;
        }
        let u = Use { op, index: index as u32 };
        self.remove_use(old, u);
        self.ops[op].operands[index] = v;
        if !self.ops[op].erased {
            self.push_use(v, u);
        }
    }

    /// Replaces every use of `from` by `to`, touching only the uses.
    pub fn replace_all_uses(&mut self, from: ValueId, to: ValueId) {
        if from == to {
            return;
        }
        let uses = std::mem::take(&mut self.values[from].uses);
        for &u in &uses {
            self.ops[u.op].operands[u.index as usize] = to;
            self.push_use(to, u);
        }
    }

    /// Replaces the uses of `from` by `to` in the ops for which `keep_old` is false.
    pub fn replace_uses_except(&mut self, from: ValueId, to: ValueId, keep_old: impl Fn(OpId) -> bool) {
        if from == to {
            return;
        }
        let uses = std::mem::take(&mut self.values[from].uses);
        for u in uses {
            let target = if keep_old(u.op) { from } else { to };
            self.ops[u.op].operands[u.index as usize] = target;
            self.push_use(target, u);
        }
    }

    /// Every mismatch between the operands of ops that are not erased and the use lists
    /// (none in a module changed only through this API).
    pub fn use_list_errors(&self) -> Vec<String> {
        let mut errs = Vec::new();
        for (op, d) in self.ops.iter() {
            if d.erased {
                continue;
            }
            for (i, &v) in d.operands.iter().enumerate() {
                let at = d.use_pos.get(i).and_then(|&p| self.values.get(v)?.uses.get(p as usize));
                if self.values.is_valid(v) && at != Some(&Use { op, index: i as u32 }) {
                    errs.push(format!("operand {i} of {op} ({}) reads {v} but is not in its use list", d.opcode));
                }
            }
        }
        for (v, d) in self.values.iter() {
            for u in &d.uses {
                let od = &self.ops[u.op];
                if od.erased || od.operands.get(u.index as usize) != Some(&v) {
                    errs.push(format!("{v} lists operand {} of {} as a use, which reads something else", u.index, u.op));
                }
            }
        }
        errs
    }
}
