//! The ops of a block: a doubly linked list threaded through the ops, with sequence numbers
//! that answer "comes before" in O(1); walking, inserting, moving, detaching and erasing.

use super::*;

impl Module {
    /// The ops of `block` in order. The iterator borrows the module: collect it (or use
    /// [`Module::block_ops`]) to edit the block while walking.
    pub fn ops_in(&self, block: BlockId) -> OpIter<'_> {
        let b = &self.blocks[block];
        OpIter { m: self, next: b.first, back: b.last, left: b.len }
    }

    /// Ops of a block in order (a snapshot, so the block may be edited while iterating).
    pub fn block_ops(&self, block: BlockId) -> Vec<OpId> {
        self.ops_in(block).collect()
    }

    pub fn first_op(&self, block: BlockId) -> Option<OpId> {
        self.blocks[block].first
    }

    /// The op after `op` in its block.
    pub fn next_op(&self, op: OpId) -> Option<OpId> {
        self.ops[op].next
    }

    /// The op before `op` in its block.
    pub fn prev_op(&self, op: OpId) -> Option<OpId> {
        self.ops[op].prev
    }

    /// True if `a` comes before `b`; both must be in the same block.
    pub fn is_before(&self, a: OpId, b: OpId) -> bool {
        debug_assert_eq!(self.ops[a].block, self.ops[b].block);
        self.ops[a].seq < self.ops[b].seq
    }

    /// Appends a detached op at the end of `block`.
    pub fn append_op(&mut self, block: BlockId, op: OpId) {
        let last = self.blocks[block].last;
        self.link(block, op, last, None);
    }

    /// Inserts a detached op just before `before` (in `before`'s block).
    pub fn insert_op_before(&mut self, before: OpId, op: OpId) {
        let block = self.ops[before].block.expect("insert before an attached op");
        let prev = self.ops[before].prev;
        self.link(block, op, prev, Some(before));
    }

    /// Inserts a detached op just after `after` (in `after`'s block).
    pub fn insert_op_after(&mut self, after: OpId, op: OpId) {
        let block = self.ops[after].block.expect("insert after an attached op");
        let next = self.ops[after].next;
        self.link(block, op, Some(after), next);
    }

    /// Inserts a detached op at the start of `block`.
    pub fn prepend_op(&mut self, block: BlockId, op: OpId) {
        let first = self.blocks[block].first;
        self.link(block, op, None, first);
    }

    fn link(&mut self, block: BlockId, op: OpId, prev: Option<OpId>, next: Option<OpId>) {
        assert!(self.ops[op].block.is_none() && !self.ops[op].erased, "{op} is attached or erased");
        let lo = prev.map_or(0, |p| self.ops[p].seq);
        let seq = match next {
            None => lo + SEQ_GAP,
            Some(n) => {
                let hi = self.ops[n].seq;
                if hi - lo >= 2 {
                    lo + (hi - lo) / 2
                } else {
                    0 // renumbered below
                }
            }
        };
        let d = &mut self.ops[op];
        d.block = Some(block);
        d.prev = prev;
        d.next = next;
        d.seq = seq;
        match prev {
            Some(p) => self.ops[p].next = Some(op),
            None => self.blocks[block].first = Some(op),
        }
        match next {
            Some(n) => self.ops[n].prev = Some(op),
            None => self.blocks[block].last = Some(op),
        }
        self.blocks[block].len += 1;
        if seq == 0 {
            self.renumber(block);
        }
    }

    fn renumber(&mut self, block: BlockId) {
        let mut cur = self.blocks[block].first;
        let mut seq = 0;
        while let Some(op) = cur {
            seq += SEQ_GAP;
            self.ops[op].seq = seq;
            cur = self.ops[op].next;
        }
    }

    /// Removes an op from its block, keeping it (and its uses) for re-insertion.
    pub fn detach_op(&mut self, op: OpId) {
        let Some(b) = self.ops[op].block.take() else { return };
        let (prev, next) = (self.ops[op].prev.take(), self.ops[op].next.take());
        match prev {
            Some(p) => self.ops[p].next = next,
            None => self.blocks[b].first = next,
        }
        match next {
            Some(n) => self.ops[n].prev = prev,
            None => self.blocks[b].last = prev,
        }
        self.blocks[b].len -= 1;
    }

    /// Detaches `op`, drops its uses of its operands and erases the ops of its regions. Its
    /// results must be unused by the time the module is used again.
    pub fn erase_op(&mut self, op: OpId) {
        if self.ops[op].erased {
            return;
        }
        self.detach_op(op);
        for r in self.ops[op].regions.clone() {
            for b in self.regions[r].blocks.clone() {
                let mut cur = self.blocks[b].last;
                while let Some(inner) = cur {
                    cur = self.ops[inner].prev;
                    self.erase_op(inner);
                }
            }
        }
        let operands = std::mem::take(&mut self.ops[op].operands);
        for (i, &v) in operands.iter().enumerate() {
            self.remove_use(v, Use { op, index: i as u32 });
        }
        self.ops[op].operands = operands;
        self.ops[op].erased = true;
    }

    /// True once [`Module::erase_op`] removed the op.
    pub fn is_erased(&self, op: OpId) -> bool {
        self.ops[op].erased
    }
}
