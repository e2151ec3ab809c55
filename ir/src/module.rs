//! The module: arenas of values, ops, blocks and regions, the functions, symbols and
//! provenance.
//!
//! A module holds one or more functions (`main` first). A function's body is a region with one
//! block whose arguments are the function's inputs and whose last op is `return`. Ops may own
//! regions (each a list of blocks ending in `yield`). Everything is addressed by typed ids.
//!
//! Mutation is O(1) amortised, as in Cranelift's layout and MLIR's use lists:
//! - a block keeps its ops in a doubly linked list threaded through [`OpData`] (`prev`/`next`),
//!   with sequence numbers for O(1) "comes before" ([`Module::is_before`]); inserting or
//!   removing an op never shifts other ops;
//! - every value keeps the list of its uses (op and operand index), and every operand slot
//!   its position in that list, so [`Module::replace_all_uses`] touches only those uses and
//!   dropping one use is O(1) however many the value has. Operands change only through
//!   [`Module::set_operand`] and the other methods here, and the verifier checks that the use
//!   lists agree with the operands;
//! - erased ops stay in the arena until [`Module::compact`] renumbers the live entities.

use crate::attr::{Attr, Attrs, Scalar, TensorData};
use crate::dtype::DType;
use crate::enums::{AttrEnum, Direction, ReduceKind};
use crate::entity::{entity_id, PrimaryMap, SecondaryMap};
use crate::infer::check_op;
use crate::opcode::Opcode;
use crate::sym::SymbolTable;
use crate::types::{Dim, Dims, TensorType};
use smallvec::SmallVec;
use std::fmt;

entity_id!(
    /// An SSA value: an op result or a block argument.
    ValueId, "v"
);
entity_id!(
    /// An op.
    OpId, "op"
);
entity_id!(
    /// A block: arguments and an ordered list of ops.
    BlockId, "bb"
);
entity_id!(
    /// A region: an ordered list of blocks.
    RegionId, "region"
);
entity_id!(
    /// A provenance record.
    LocId, "loc"
);

/// Where a value comes from.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ValueDef {
    Result { op: OpId, index: u32 },
    BlockArg { block: BlockId, index: u32 },
}

/// One use of a value: operand `index` of `op`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Use {
    pub op: OpId,
    pub index: u32,
}

#[derive(Clone, Debug)]
pub struct ValueData {
    pub ty: TensorType,
    pub def: ValueDef,
    /// Every operand that refers to this value, from ops that are not erased (attached or
    /// detached), in no particular order.
    uses: SmallVec<[Use; 2]>,
}

impl ValueData {
    pub fn new(ty: TensorType, def: ValueDef) -> Self {
        ValueData { ty, def, uses: SmallVec::new() }
    }
}

#[derive(Clone, Debug)]
pub struct OpData {
    pub opcode: Opcode,
    /// Read freely; change only through [`Module::set_operand`] (use lists).
    pub operands: SmallVec<[ValueId; 3]>,
    /// For each operand, the position of its [`Use`] in the operand's use list.
    use_pos: SmallVec<[u32; 3]>,
    pub results: SmallVec<[ValueId; 1]>,
    pub attrs: Attrs,
    pub regions: SmallVec<[RegionId; 1]>,
    /// The block the op is in; `None` while detached or once erased.
    pub block: Option<BlockId>,
    prev: Option<OpId>,
    next: Option<OpId>,
    /// Position key within the block: increasing along the list.
    seq: u64,
    erased: bool,
}

#[derive(Clone, Debug, Default)]
pub struct BlockData {
    pub args: Vec<ValueId>,
    first: Option<OpId>,
    last: Option<OpId>,
    len: usize,
    /// The region owning the block.
    pub region: Option<RegionId>,
}

impl BlockData {
    pub fn new(region: Option<RegionId>) -> Self {
        BlockData { region, ..Default::default() }
    }
    /// Number of ops in the block.
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

#[derive(Clone, Debug, Default)]
pub struct RegionData {
    pub blocks: Vec<BlockId>,
    /// The op owning the region; `None` for a function body.
    pub parent: Option<OpId>,
}

/// Spacing of sequence numbers given to appended ops; inserts between two ops take the
/// midpoint until no integer is left, then the block is renumbered.
const SEQ_GAP: u64 = 1 << 20;

/// The ops of a block in order (follows the links; see [`Module::ops_in`]).
pub struct OpIter<'m> {
    m: &'m Module,
    next: Option<OpId>,
    back: Option<OpId>,
    left: usize,
}

impl Iterator for OpIter<'_> {
    type Item = OpId;
    fn next(&mut self) -> Option<OpId> {
        if self.left == 0 {
            return None;
        }
        let op = self.next?;
        self.left -= 1;
        self.next = self.m.ops[op].next;
        Some(op)
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl DoubleEndedIterator for OpIter<'_> {
    fn next_back(&mut self) -> Option<OpId> {
        if self.left == 0 {
            return None;
        }
        let op = self.back?;
        self.left -= 1;
        self.back = self.m.ops[op].prev;
        Some(op)
    }
}

impl ExactSizeIterator for OpIter<'_> {}

/// Where an op came from in the user's program.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct Loc {
    /// The FX node's name (`addmm_1`).
    pub node: String,
    /// The FX node's target (`torch.ops.aten.addmm.default`).
    pub target: String,
    /// The innermost user source line (`model.py:12 in forward`), when the graph recorded one.
    pub source: Option<String>,
}

impl Loc {
    pub fn new(node: impl Into<String>, target: impl Into<String>, source: Option<String>) -> Self {
        Loc { node: node.into(), target: target.into(), source }
    }
}

impl fmt::Display for Loc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "node `{}` ({})", self.node, self.target)?;
        if let Some(s) = &self.source {
            write!(f, " at {s}")?;
        }
        Ok(())
    }
}

/// What a function argument stands for (from the torch.export signature).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum ArgKind {
    UserInput,
    Parameter,
    Buffer,
    Constant,
    /// A symbolic size passed as a rank-0 integer tensor.
    SymInt,
}

impl ArgKind {
    pub fn name(self) -> &'static str {
        match self {
            ArgKind::UserInput => "input",
            ArgKind::Parameter => "parameter",
            ArgKind::Buffer => "buffer",
            ArgKind::Constant => "constant",
            ArgKind::SymInt => "symint",
        }
    }
    pub fn parse(s: &str) -> Option<ArgKind> {
        [ArgKind::UserInput, ArgKind::Parameter, ArgKind::Buffer, ArgKind::Constant, ArgKind::SymInt]
            .into_iter()
            .find(|k| k.name() == s)
    }
    /// Parameters, buffers and constants: values that come with the program.
    pub fn is_weight(self) -> bool {
        matches!(self, ArgKind::Parameter | ArgKind::Buffer | ArgKind::Constant)
    }
}

/// What a function result stands for.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum ResultKind {
    UserOutput,
    /// New value of a buffer the program mutates (named by `ResultInfo::name`).
    BufferMutation,
    /// New value of a user input the program mutates.
    UserInputMutation,
    /// Gradient of a parameter or input (joint graphs).
    Gradient,
    /// Loss output (joint graphs).
    Loss,
}

impl ResultKind {
    pub fn name(self) -> &'static str {
        match self {
            ResultKind::UserOutput => "output",
            ResultKind::BufferMutation => "buffer_mutation",
            ResultKind::UserInputMutation => "input_mutation",
            ResultKind::Gradient => "gradient",
            ResultKind::Loss => "loss",
        }
    }
    pub fn parse(s: &str) -> Option<ResultKind> {
        [
            ResultKind::UserOutput,
            ResultKind::BufferMutation,
            ResultKind::UserInputMutation,
            ResultKind::Gradient,
            ResultKind::Loss,
        ]
        .into_iter()
        .find(|k| k.name() == s)
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArgInfo {
    pub kind: ArgKind,
    /// The input's name in the signature (`x`) or the weight's qualified name (`fc1.weight`).
    pub name: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResultInfo {
    pub kind: ResultKind,
    pub name: String,
    /// Where the valid part of a padded result lies (programs specialized to a bucket);
    /// `None`: the whole result is valid.
    pub layout: Option<crate::Layout>,
}

impl ResultInfo {
    pub fn new(kind: ResultKind, name: impl Into<String>) -> Self {
        ResultInfo { kind, name: name.into(), layout: None }
    }
}

/// A function: a name, a body region with one entry block, and per-argument/result metadata.
#[derive(Clone, Debug)]
pub struct Func {
    pub name: String,
    pub body: RegionId,
    pub args: Vec<ArgInfo>,
    pub results: Vec<ResultInfo>,
}

/// A compilation unit.
#[derive(Clone, Debug, Default)]
pub struct Module {
    pub symbols: SymbolTable,
    pub values: PrimaryMap<ValueId, ValueData>,
    pub ops: PrimaryMap<OpId, OpData>,
    pub blocks: PrimaryMap<BlockId, BlockData>,
    pub regions: PrimaryMap<RegionId, RegionData>,
    pub funcs: Vec<Func>,
    pub locs: PrimaryMap<LocId, Loc>,
    /// Provenance of each op (side table).
    pub op_locs: SecondaryMap<OpId, Option<LocId>>,
}

/// Errors from building IR.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IrError {
    #[error("{opcode}: {message}")]
    Op { opcode: Opcode, message: String },
    #[error("function `{0}` not found")]
    NoSuchFunc(String),
    #[error("{0}")]
    Other(String),
}

impl Module {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a function with the given arguments; returns its index and entry block. The body
    /// is empty: append ops and finish with `return`.
    pub fn add_func(&mut self, name: &str, args: Vec<(TensorType, ArgInfo)>) -> (usize, BlockId) {
        let region = self.regions.push(RegionData::default());
        let block = self.blocks.push(BlockData::new(Some(region)));
        self.regions[region].blocks.push(block);
        let mut infos = Vec::with_capacity(args.len());
        for (i, (ty, info)) in args.into_iter().enumerate() {
            let v = self.values.push(ValueData::new(ty, ValueDef::BlockArg { block, index: i as u32 }));
            self.blocks[block].args.push(v);
            infos.push(info);
        }
        self.funcs.push(Func { name: name.to_string(), body: region, args: infos, results: Vec::new() });
        (self.funcs.len() - 1, block)
    }

    pub fn func(&self, name: &str) -> Option<&Func> {
        self.funcs.iter().find(|f| f.name == name)
    }

    /// The entry block of a function.
    pub fn entry_block(&self, func: &Func) -> BlockId {
        self.regions[func.body].blocks[0]
    }

    /// The last op of a block (its terminator in a well-formed module).
    pub fn terminator(&self, block: BlockId) -> Option<OpId> {
        self.blocks[block].last
    }

    /// The `main` function (or the first one).
    pub fn main_func(&self) -> Option<&Func> {
        self.func("main").or_else(|| self.funcs.first())
    }

    /// Adds a region (with one block having `arg_types`) to be attached to an op.
    pub fn new_region(&mut self, arg_types: &[TensorType]) -> (RegionId, BlockId) {
        let region = self.regions.push(RegionData::default());
        let block = self.blocks.push(BlockData::new(Some(region)));
        self.regions[region].blocks.push(block);
        for (i, ty) in arg_types.iter().enumerate() {
            let v = self.values.push(ValueData::new(ty.clone(), ValueDef::BlockArg { block, index: i as u32 }));
            self.blocks[block].args.push(v);
        }
        (region, block)
    }

    pub fn value_type(&self, v: ValueId) -> &TensorType {
        &self.values[v].ty
    }

    pub fn op(&self, op: OpId) -> &OpData {
        &self.ops[op]
    }

    pub fn loc(&self, op: OpId) -> Option<&Loc> {
        self.op_locs.get(op).map(|l| &self.locs[l])
    }

    /// The op defining `v`, if it is an op result.
    pub fn defining_op(&self, v: ValueId) -> Option<OpId> {
        match self.values[v].def {
            ValueDef::Result { op, .. } => Some(op),
            ValueDef::BlockArg { .. } => None,
        }
    }

    /// Creates an op (checking it with the op's shape rule) without placing it in a block.
    /// `results` may be `None` when the rule can infer the result types.
    pub fn create_op(
        &mut self,
        opcode: Opcode,
        operands: &[ValueId],
        attrs: Attrs,
        results: Option<&[TensorType]>,
        regions: &[RegionId],
    ) -> Result<OpId, IrError> {
        let operand_types: SmallVec<[&TensorType; 4]> = operands.iter().map(|&v| &self.values[v].ty).collect();
        let result_types = check_op(opcode, &operand_types, &attrs, results)
            .map_err(|message| IrError::Op { opcode, message })?;
        drop(operand_types);
        if regions.len() != opcode.info().regions {
            return Err(IrError::Op {
                opcode,
                message: format!("expects {} regions, got {}", opcode.info().regions, regions.len()),
            });
        }
        Ok(self.create_op_unchecked(opcode, operands, attrs, result_types, regions))
    }

    /// Creates an op with the given result types and no checks (the parser uses this so that
    /// the verifier can report every broken rule at once).
    pub fn create_op_unchecked(
        &mut self,
        opcode: Opcode,
        operands: &[ValueId],
        attrs: Attrs,
        result_types: Vec<TensorType>,
        regions: &[RegionId],
    ) -> OpId {
        let op = self.ops.push(OpData {
            opcode,
            operands: operands.into(),
            use_pos: smallvec::smallvec![u32::MAX; operands.len()],
            results: SmallVec::new(),
            attrs,
            regions: regions.into(),
            block: None,
            prev: None,
            next: None,
            seq: 0,
            erased: false,
        });
        for (i, &v) in operands.iter().enumerate() {
            // The parser may hand over ids that name no value; the verifier reports them.
            if self.values.is_valid(v) {
                self.push_use(v, Use { op, index: i as u32 });
            }
        }
        for (i, ty) in result_types.into_iter().enumerate() {
            let v = self.values.push(ValueData::new(ty, ValueDef::Result { op, index: i as u32 }));
            self.ops[op].results.push(v);
        }
        for &r in regions {
            self.regions[r].parent = Some(op);
        }
        op
    }

    // ---------------------------------------------------------------- layout

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

    // ---------------------------------------------------------------- uses

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

    fn push_use(&mut self, v: ValueId, u: Use) {
        let uses = &mut self.values[v].uses;
        self.ops[u.op].use_pos[u.index as usize] = uses.len() as u32;
        uses.push(u);
    }

    /// Drops use `u` of `v` in O(1): the last use takes its place in the list.
    fn remove_use(&mut self, v: ValueId, u: Use) {
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

    // ---------------------------------------------------------------- compaction

    /// Drops erased ops, their results and regions, and every block, region, value and
    /// location no function reaches, renumbering the rest in walk order (as naga's
    /// `compact`). Ids held across the call are invalid afterwards. Detached ops that are not
    /// erased are dropped too. The printed module is unchanged.
    pub fn compact(&mut self) {
        // The old module is consumed: attributes, types and locations move, nothing is cloned.
        let mut old = std::mem::take(self);
        let mut new = Module { symbols: std::mem::take(&mut old.symbols), ..Module::default() };
        let mut vmap: SecondaryMap<ValueId, Option<ValueId>> = SecondaryMap::with_default(None);
        let mut lmap: SecondaryMap<LocId, Option<LocId>> = SecondaryMap::with_default(None);
        let funcs = std::mem::take(&mut old.funcs);
        for f in funcs {
            let body = old.compact_region(f.body, None, &mut new, &mut vmap, &mut lmap);
            new.funcs.push(Func { name: f.name, body, args: f.args, results: f.results });
        }
        *self = new;
    }

    /// Moves region `r` of `self` (being compacted away) into `new`.
    fn compact_region(
        &mut self,
        r: RegionId,
        parent: Option<OpId>,
        new: &mut Module,
        vmap: &mut SecondaryMap<ValueId, Option<ValueId>>,
        lmap: &mut SecondaryMap<LocId, Option<LocId>>,
    ) -> RegionId {
        let nr = new.regions.push(RegionData { blocks: Vec::new(), parent });
        for b in std::mem::take(&mut self.regions[r].blocks) {
            let nb = new.blocks.push(BlockData::new(Some(nr)));
            new.regions[nr].blocks.push(nb);
            for (i, &a) in self.blocks[b].args.iter().enumerate() {
                let ty = take_type(&mut self.values[a].ty);
                let na = new.values.push(ValueData::new(ty, ValueDef::BlockArg { block: nb, index: i as u32 }));
                new.blocks[nb].args.push(na);
                vmap.set(a, Some(na));
            }
            let mut cur = self.first_op(b);
            while let Some(op) = cur {
                cur = self.next_op(op);
                // Regions first: their ops get the lower ids, as when they were built.
                let regions: SmallVec<[RegionId; 1]> = std::mem::take(&mut self.ops[op].regions)
                    .into_iter()
                    .map(|ir| self.compact_region(ir, None, new, vmap, lmap))
                    .collect();
                let d = &mut self.ops[op];
                let operands: SmallVec<[ValueId; 3]> =
                    d.operands.iter().map(|&v| vmap[v].expect("compact needs a verified module")).collect();
                let attrs = std::mem::take(&mut d.attrs);
                let (opcode, results) = (d.opcode, std::mem::take(&mut d.results));
                let types: Vec<TensorType> = results.iter().map(|&v| take_type(&mut self.values[v].ty)).collect();
                let nop = new.create_op_unchecked(opcode, &operands, attrs, types, &regions);
                new.append_op(nb, nop);
                for (&o, &n) in results.iter().zip(&new.ops[nop].results) {
                    vmap.set(o, Some(n));
                }
                if let Some(l) = *self.op_locs.get(op) {
                    let nl = match lmap[l] {
                        Some(nl) => nl,
                        None => {
                            let nl = new.locs.push(std::mem::take(&mut self.locs[l]));
                            lmap.set(l, Some(nl));
                            nl
                        }
                    };
                    new.op_locs.set(nop, Some(nl));
                }
            }
        }
        nr
    }

    pub fn set_loc(&mut self, op: OpId, loc: Option<LocId>) {
        self.op_locs.set(op, loc);
    }

    pub fn add_loc(&mut self, loc: Loc) -> LocId {
        self.locs.push(loc)
    }

    /// Number of ops attached to blocks, nested regions included.
    pub fn num_live_ops(&self) -> usize {
        self.ops.values().filter(|o| o.block.is_some()).count()
    }
}

/// The type, leaving a rank-0 one of the same dtype (no allocation) in its place.
fn take_type(ty: &mut TensorType) -> TensorType {
    std::mem::replace(ty, TensorType { dtype: ty.dtype, dims: Dims::new() })
}

/// Appends ops at the end of a block, with a current provenance. The convenience methods infer
/// result types through the op table's shape rules and return an error naming the op when a
/// rule is broken.
pub struct Builder<'m> {
    pub module: &'m mut Module,
    pub block: BlockId,
    pub loc: Option<LocId>,
}

impl<'m> Builder<'m> {
    pub fn new(module: &'m mut Module, block: BlockId) -> Self {
        Builder { module, block, loc: None }
    }

    pub fn ty(&self, v: ValueId) -> &TensorType {
        &self.module.values[v].ty
    }

    /// Builds an op and returns all its results.
    pub fn build(
        &mut self,
        opcode: Opcode,
        operands: &[ValueId],
        attrs: Attrs,
        results: Option<&[TensorType]>,
    ) -> Result<SmallVec<[ValueId; 1]>, IrError> {
        let op = self.module.create_op(opcode, operands, attrs, results, &[])?;
        self.module.append_op(self.block, op);
        self.module.set_loc(op, self.loc);
        Ok(self.module.ops[op].results.clone())
    }

    /// Builds a single-result op.
    pub fn build1(
        &mut self,
        opcode: Opcode,
        operands: &[ValueId],
        attrs: Attrs,
        result: Option<TensorType>,
    ) -> Result<ValueId, IrError> {
        let r = result.map(|t| vec![t]);
        Ok(self.build(opcode, operands, attrs, r.as_deref())?[0])
    }

    pub fn unary(&mut self, opcode: Opcode, x: ValueId) -> Result<ValueId, IrError> {
        self.build1(opcode, &[x], Attrs::new(), None)
    }

    pub fn binary(&mut self, opcode: Opcode, x: ValueId, y: ValueId) -> Result<ValueId, IrError> {
        self.build1(opcode, &[x, y], Attrs::new(), None)
    }

    pub fn compare(&mut self, direction: Direction, x: ValueId, y: ValueId) -> Result<ValueId, IrError> {
        self.build1(Opcode::Compare, &[x, y], Attrs::new().with("direction", direction.attr()), None)
    }

    pub fn select(&mut self, pred: ValueId, on_true: ValueId, on_false: ValueId) -> Result<ValueId, IrError> {
        self.build1(Opcode::Select, &[pred, on_true, on_false], Attrs::new(), None)
    }

    /// Converts to `dtype`; returns `x` itself when it already has that dtype.
    pub fn convert(&mut self, x: ValueId, dtype: DType) -> Result<ValueId, IrError> {
        let t = self.ty(x);
        if t.dtype == dtype {
            return Ok(x);
        }
        let rt = t.with_dtype(dtype);
        self.build1(Opcode::Convert, &[x], Attrs::new(), Some(rt))
    }

    pub fn constant(&mut self, value: TensorData) -> Result<ValueId, IrError> {
        self.build1(Opcode::Constant, &[], Attrs::new().with("value", Attr::Tensor(value)), None)
    }

    /// A constant of one value over a static type.
    pub fn splat(&mut self, value: Scalar, ty: TensorType) -> Result<ValueId, IrError> {
        let data = TensorData::splat(ty, value).map_err(|e| IrError::Other(e.to_string()))?;
        self.constant(data)
    }

    /// A rank-0 constant.
    pub fn scalar(&mut self, value: Scalar, dtype: DType) -> Result<ValueId, IrError> {
        self.splat(value, TensorType::scalar(dtype))
    }

    /// The run-time value of the size expression `e` as an i64 scalar, built from the values of
    /// its symbols (`symbol`): sums of products, `floordiv`/`mod` by constants (sizes are never
    /// negative, so truncating division is floor). `None` when `symbol` has no value for one.
    pub fn sym_value(
        &mut self,
        e: &crate::sym::SymExpr,
        symbol: &mut dyn FnMut(&str) -> Option<ValueId>,
    ) -> Result<Option<ValueId>, IrError> {
        use crate::sym::Atom;
        let mut total: Option<ValueId> = None;
        for (coeff, atoms) in e.terms() {
            let mut term = if coeff != 1 || atoms.is_empty() { Some(self.scalar(Scalar::Int(coeff), DType::I64)?) } else { None };
            for atom in atoms {
                let v = match atom {
                    Atom::Sym(s) => match symbol(s) {
                        Some(v) => v,
                        None => return Ok(None),
                    },
                    Atom::FloorDiv(x, c) | Atom::Mod(x, c) => {
                        let Some(xv) = self.sym_value(x, symbol)? else { return Ok(None) };
                        let cv = self.scalar(Scalar::Int(*c), DType::I64)?;
                        self.binary(if matches!(atom, Atom::FloorDiv(..)) { Opcode::Div } else { Opcode::Rem }, xv, cv)?
                    }
                };
                term = Some(match term {
                    None => v,
                    Some(t) => self.binary(Opcode::Mul, t, v)?,
                });
            }
            let term = term.expect("a term has a coefficient or atoms");
            total = Some(match total {
                None => term,
                Some(t) => self.binary(Opcode::Add, t, term)?,
            });
        }
        match total {
            Some(v) => Ok(Some(v)),
            None => self.scalar(Scalar::Int(0), DType::I64).map(Some),
        }
    }

    /// A value of `x`'s dtype and shape filled with `value` (broadcast from a scalar, so it
    /// works for symbolic shapes too).
    pub fn full_like(&mut self, value: Scalar, x: ValueId) -> Result<ValueId, IrError> {
        let t = self.ty(x).clone();
        if t.is_static() {
            return self.splat(value, t);
        }
        let s = self.scalar(value, t.dtype)?;
        self.broadcast_in_dim(s, &[], t.dims.to_vec())
    }

    pub fn iota(&mut self, ty: TensorType, dimension: i64) -> Result<ValueId, IrError> {
        self.build1(Opcode::Iota, &[], Attrs::new().with("dimension", Attr::Int(dimension)), Some(ty))
    }

    pub fn broadcast_in_dim(&mut self, x: ValueId, dims: &[i64], shape: Vec<Dim>) -> Result<ValueId, IrError> {
        let rt = self.ty(x).with_dims(shape);
        if rt == *self.ty(x) && dims.iter().enumerate().all(|(i, &d)| d == i as i64) {
            return Ok(x);
        }
        self.build1(Opcode::BroadcastInDim, &[x], Attrs::new().with("broadcast_dimensions", Attr::Ints(dims.to_vec())), Some(rt))
    }

    /// NumPy-style broadcast of `x` to `shape` (trailing alignment).
    pub fn broadcast_to(&mut self, x: ValueId, shape: &[Dim]) -> Result<ValueId, IrError> {
        let r = self.ty(x).rank();
        if r > shape.len() {
            return Err(IrError::Other(format!("cannot broadcast {} to rank {}", self.ty(x), shape.len())));
        }
        let off = shape.len() - r;
        let dims: Vec<i64> = (0..r).map(|i| (i + off) as i64).collect();
        self.broadcast_in_dim(x, &dims, shape.to_vec())
    }

    /// Reshape; returns `x` when the shape is unchanged.
    pub fn reshape(&mut self, x: ValueId, shape: Vec<Dim>) -> Result<ValueId, IrError> {
        let rt = self.ty(x).with_dims(shape);
        if rt == *self.ty(x) {
            return Ok(x);
        }
        self.build1(Opcode::Reshape, &[x], Attrs::new(), Some(rt))
    }

    /// Transpose; returns `x` for the identity permutation.
    pub fn transpose(&mut self, x: ValueId, perm: &[i64]) -> Result<ValueId, IrError> {
        if perm.iter().enumerate().all(|(i, &p)| p == i as i64) {
            return Ok(x);
        }
        self.build1(Opcode::Transpose, &[x], Attrs::new().with("permutation", Attr::Ints(perm.to_vec())), None)
    }

    pub fn slice(&mut self, x: ValueId, start: &[i64], limit: &[i64], strides: &[i64]) -> Result<ValueId, IrError> {
        self.build1(
            Opcode::Slice,
            &[x],
            Attrs::new()
                .with("start_indices", Attr::Ints(start.to_vec()))
                .with("limit_indices", Attr::Ints(limit.to_vec()))
                .with("strides", Attr::Ints(strides.to_vec())),
            None,
        )
    }

    pub fn concatenate(&mut self, xs: &[ValueId], dimension: i64) -> Result<ValueId, IrError> {
        if xs.len() == 1 {
            return Ok(xs[0]);
        }
        self.build1(Opcode::Concatenate, xs, Attrs::new().with("dimension", Attr::Int(dimension)), None)
    }

    pub fn pad(&mut self, x: ValueId, value: ValueId, low: &[i64], high: &[i64], interior: &[i64]) -> Result<ValueId, IrError> {
        self.build1(
            Opcode::Pad,
            &[x, value],
            Attrs::new()
                .with("edge_padding_low", Attr::Ints(low.to_vec()))
                .with("edge_padding_high", Attr::Ints(high.to_vec()))
                .with("interior_padding", Attr::Ints(interior.to_vec())),
            None,
        )
    }

    pub fn dot_general(
        &mut self,
        lhs: ValueId,
        rhs: ValueId,
        lhs_batch: &[i64],
        rhs_batch: &[i64],
        lhs_contract: &[i64],
        rhs_contract: &[i64],
    ) -> Result<ValueId, IrError> {
        self.build1(
            Opcode::DotGeneral,
            &[lhs, rhs],
            Attrs::new()
                .with("lhs_batching_dimensions", Attr::Ints(lhs_batch.to_vec()))
                .with("rhs_batching_dimensions", Attr::Ints(rhs_batch.to_vec()))
                .with("lhs_contracting_dimensions", Attr::Ints(lhs_contract.to_vec()))
                .with("rhs_contracting_dimensions", Attr::Ints(rhs_contract.to_vec())),
            None,
        )
    }

    /// Reduction by `kind` over `dims` (removed).
    pub fn reduce(&mut self, x: ValueId, kind: ReduceKind, dims: &[i64]) -> Result<ValueId, IrError> {
        self.build1(
            Opcode::Reduce,
            &[x],
            Attrs::new().with("dimensions", Attr::Ints(dims.to_vec())).with("kind", kind.attr()),
            None,
        )
    }

    /// Appends `return`.
    pub fn ret(&mut self, values: &[ValueId]) -> Result<(), IrError> {
        self.build(Opcode::Return, values, Attrs::new(), Some(&[]))?;
        Ok(())
    }
}
