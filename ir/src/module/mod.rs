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

use crate::attr::{Attrs, Scalar, TensorData};
use crate::dtype::DType;
use crate::enums::{Direction, ReduceKind};
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

/// A value: its type (passes may change it, e.g. when narrowing) and where it is defined (set
/// by the module only).
#[derive(Clone, Debug)]
pub struct ValueData {
    pub ty: TensorType,
    pub(crate) def: ValueDef,
    /// Every operand that refers to this value, from ops that are not erased (attached or
    /// detached), in no particular order.
    uses: SmallVec<[Use; 2]>,
}

impl ValueData {
    pub(crate) fn new(ty: TensorType, def: ValueDef) -> Self {
        ValueData { ty, def, uses: SmallVec::new() }
    }
    /// The op result or block argument that defines the value.
    pub fn def(&self) -> ValueDef {
        self.def
    }
}

/// An op. Its structure (opcode, operands, results, regions, place) is read through
/// accessors and changed only through [`Module`]'s methods, which keep use lists, block lists
/// and parents consistent; its attributes are the passes' to edit.
#[derive(Clone, Debug)]
pub struct OpData {
    pub(crate) opcode: Opcode,
    /// Changed only through [`Module::set_operand`] and friends (use lists).
    pub(crate) operands: SmallVec<[ValueId; 3]>,
    /// For each operand, the position of its [`Use`] in the operand's use list.
    use_pos: SmallVec<[u32; 3]>,
    pub(crate) results: SmallVec<[ValueId; 1]>,
    pub attrs: Attrs,
    pub(crate) regions: SmallVec<[RegionId; 1]>,
    /// The block the op is in; `None` while detached or once erased.
    pub(crate) block: Option<BlockId>,
    prev: Option<OpId>,
    next: Option<OpId>,
    /// Position key within the block: increasing along the list.
    seq: u64,
    erased: bool,
}

#[derive(Clone, Debug, Default)]
pub struct BlockData {
    pub(crate) args: Vec<ValueId>,
    first: Option<OpId>,
    last: Option<OpId>,
    len: usize,
    /// The region owning the block.
    pub(crate) region: Option<RegionId>,
}

impl OpData {
    pub fn opcode(&self) -> Opcode {
        self.opcode
    }
    pub fn operands(&self) -> &[ValueId] {
        &self.operands
    }
    pub fn results(&self) -> &[ValueId] {
        &self.results
    }
    pub fn regions(&self) -> &[RegionId] {
        &self.regions
    }
    /// The block the op is in; `None` while detached or once erased.
    pub fn block(&self) -> Option<BlockId> {
        self.block
    }
    /// The typed view of the op's attributes ([`crate::payload`]): `op.payload::<payload::Reduce>()`.
    /// Panics, naming the op and the attribute, when the op is not `P`'s or its attributes do not
    /// fit the op table, which `create_op` and the verifier refuse.
    #[track_caller]
    pub fn payload<'a, P: crate::payload::Payload<'a>>(&'a self) -> P {
        if self.opcode != P::OPCODE {
            panic!("a `{}` op read as `{}`", self.opcode, P::OPCODE);
        }
        P::of(&self.attrs).unwrap_or_else(|| crate::payload::invalid(self.opcode, &self.attrs))
    }
}

impl BlockData {
    pub(crate) fn new(region: Option<RegionId>) -> Self {
        BlockData { region, ..Default::default() }
    }
    /// The block's arguments, in order.
    pub fn args(&self) -> &[ValueId] {
        &self.args
    }
    /// The region owning the block.
    pub fn region(&self) -> Option<RegionId> {
        self.region
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
    pub(crate) blocks: Vec<BlockId>,
    /// The op owning the region; `None` for a function body.
    pub(crate) parent: Option<OpId>,
}

impl RegionData {
    pub fn blocks(&self) -> &[BlockId] {
        &self.blocks
    }
    /// The op owning the region; `None` for a function body.
    pub fn parent(&self) -> Option<OpId> {
        self.parent
    }
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
    /// The real value of a data-dependent size (named by `ResultInfo::name`, the symbol): an
    /// i64 scalar that a bucketed program returns after the other results, by which the
    /// caller cuts them.
    Size,
    /// A status a host check reads after the run (named by `ResultInfo::name`, the checking
    /// API): LAPACK's `info` of a linalg factorization, nonzero where eager raises.
    Check,
}

impl ResultKind {
    pub fn name(self) -> &'static str {
        match self {
            ResultKind::UserOutput => "output",
            ResultKind::BufferMutation => "buffer_mutation",
            ResultKind::UserInputMutation => "input_mutation",
            ResultKind::Gradient => "gradient",
            ResultKind::Loss => "loss",
            ResultKind::Size => "size",
            ResultKind::Check => "check",
        }
    }
    pub fn parse(s: &str) -> Option<ResultKind> {
        [
            ResultKind::UserOutput,
            ResultKind::BufferMutation,
            ResultKind::UserInputMutation,
            ResultKind::Gradient,
            ResultKind::Loss,
            ResultKind::Size,
            ResultKind::Check,
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
    /// How an argument of `main` is split over the module's [`Module::mesh`] (`None`: whole on
    /// every device).
    pub sharding: Option<crate::DimAxes>,
}

impl ArgInfo {
    pub fn new(kind: ArgKind, name: impl Into<String>) -> Self {
        ArgInfo { kind, name: name.into(), sharding: None }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResultInfo {
    pub kind: ResultKind,
    pub name: String,
    /// Where the valid part of a padded result lies (programs specialized to a bucket);
    /// `None`: the whole result is valid.
    pub layout: Option<crate::Layout>,
    /// How a result of `main` is split over the module's [`Module::mesh`] (`None`: whole).
    pub sharding: Option<crate::DimAxes>,
}

impl ResultInfo {
    pub fn new(kind: ResultKind, name: impl Into<String>) -> Self {
        ResultInfo { kind, name: name.into(), layout: None, sharding: None }
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

impl Func {
    /// The arguments' metadata (read; the fields are the function's own to edit).
    pub fn args(&self) -> &[ArgInfo] {
        &self.args
    }
    /// The results' metadata (empty when the function carries none).
    pub fn results(&self) -> &[ResultInfo] {
        &self.results
    }
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
    /// An SPMD program's device mesh; how each of `main`'s arguments and results is split over
    /// it is in their metadata ([`ArgInfo::sharding`], [`ResultInfo::sharding`]).
    pub mesh: Option<crate::Mesh>,
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

    /// `main`'s state updates: `(argument, result)` for every result that is the new value of a
    /// parameter or buffer argument (a [`ResultKind::BufferMutation`] naming it, of the same
    /// type), each argument at most once. A runtime may donate the argument to that result
    /// (the emitter marks the pair `tf.aliasing_output`), so the state is updated in place.
    pub fn state_aliases(&self) -> Vec<(usize, usize)> {
        let Some(f) = self.main_func() else { return Vec::new() };
        let entry = self.entry_block(f);
        let args = self.blocks[entry].args();
        let results: &[ValueId] = match self.terminator(entry) {
            Some(ret) => self.ops[ret].operands(),
            None => &[],
        };
        let mut taken = vec![false; args.len()];
        let mut pairs = Vec::new();
        for (j, info) in f.results().iter().enumerate() {
            if info.kind != ResultKind::BufferMutation || j >= results.len() {
                continue;
            }
            let found = f.args().iter().enumerate().position(|(i, a)| {
                !taken[i]
                    && matches!(a.kind, ArgKind::Parameter | ArgKind::Buffer)
                    && a.name == info.name
                    && i < args.len()
                    && self.values[args[i]].ty == self.values[results[j]].ty
                    && args[i] != results[j]
            });
            if let Some(i) = found {
                taken[i] = true;
                pairs.push((i, j));
            }
        }
        pairs
    }

    /// [`Module::main_func`], to edit its metadata.
    pub fn main_func_mut(&mut self) -> Option<&mut Func> {
        let i = self.funcs.iter().position(|f| f.name == "main").or((!self.funcs.is_empty()).then_some(0))?;
        self.funcs.get_mut(i)
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

    /// Keeps only `keep`, a subsequence of `block`'s arguments in their order, as its
    /// arguments (renumbered); the others must have no uses left.
    pub fn retain_block_args(&mut self, block: BlockId, keep: Vec<ValueId>) -> Result<(), IrError> {
        let old = &self.blocks[block].args;
        let mut it = old.iter();
        if !keep.iter().all(|k| it.any(|a| a == k)) {
            return Err(IrError::Other("retain_block_args: not a subsequence of the block's arguments".into()));
        }
        if let Some(&a) = old.iter().find(|a| !keep.contains(a) && self.has_uses(**a)) {
            return Err(IrError::Other(format!("retain_block_args: dropped argument {a:?} still has uses")));
        }
        for (i, &a) in keep.iter().enumerate() {
            self.values[a].def = ValueDef::BlockArg { block, index: i as u32 };
        }
        self.blocks[block].args = keep;
        Ok(())
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

mod builder;
mod compact;
mod oplist;
mod uses;

pub use builder::Builder;
