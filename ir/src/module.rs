//! The module: arenas of values, ops, blocks and regions, the functions, symbols and
//! provenance.
//!
//! A module holds one or more functions (`main` first). A function's body is a region with one
//! block whose arguments are the function's inputs and whose last op is `return`. Ops may own
//! regions (each a list of blocks ending in `yield`). Everything is addressed by typed ids; a
//! block keeps its ops in order in a `Vec`.

use crate::attr::{Attr, Attrs, Scalar, TensorData};
use crate::dtype::DType;
use crate::entity::{entity_id, PrimaryMap, SecondaryMap};
use crate::infer::check_op;
use crate::opcode::Opcode;
use crate::sym::SymbolTable;
use crate::types::{Dim, TensorType};
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

#[derive(Clone, Debug)]
pub struct ValueData {
    pub ty: TensorType,
    pub def: ValueDef,
}

#[derive(Clone, Debug)]
pub struct OpData {
    pub opcode: Opcode,
    pub operands: SmallVec<[ValueId; 3]>,
    pub results: SmallVec<[ValueId; 1]>,
    pub attrs: Attrs,
    pub regions: SmallVec<[RegionId; 1]>,
    /// The block the op is in; `None` once detached.
    pub block: Option<BlockId>,
}

#[derive(Clone, Debug, Default)]
pub struct BlockData {
    pub args: Vec<ValueId>,
    pub ops: Vec<OpId>,
    /// The region owning the block.
    pub region: Option<RegionId>,
}

#[derive(Clone, Debug, Default)]
pub struct RegionData {
    pub blocks: Vec<BlockId>,
    /// The op owning the region; `None` for a function body.
    pub parent: Option<OpId>,
}

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
        let block = self.blocks.push(BlockData { region: Some(region), ..Default::default() });
        self.regions[region].blocks.push(block);
        let mut infos = Vec::with_capacity(args.len());
        for (i, (ty, info)) in args.into_iter().enumerate() {
            let v = self.values.push(ValueData { ty, def: ValueDef::BlockArg { block, index: i as u32 } });
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

    /// The `main` function (or the first one).
    pub fn main_func(&self) -> Option<&Func> {
        self.func("main").or_else(|| self.funcs.first())
    }

    /// Adds a region (with one block having `arg_types`) to be attached to an op.
    pub fn new_region(&mut self, arg_types: &[TensorType]) -> (RegionId, BlockId) {
        let region = self.regions.push(RegionData::default());
        let block = self.blocks.push(BlockData { region: Some(region), ..Default::default() });
        self.regions[region].blocks.push(block);
        for (i, ty) in arg_types.iter().enumerate() {
            let v = self.values.push(ValueData { ty: ty.clone(), def: ValueDef::BlockArg { block, index: i as u32 } });
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
            results: SmallVec::new(),
            attrs,
            regions: regions.into(),
            block: None,
        });
        for (i, ty) in result_types.into_iter().enumerate() {
            let v = self.values.push(ValueData { ty, def: ValueDef::Result { op, index: i as u32 } });
            self.ops[op].results.push(v);
        }
        for &r in regions {
            self.regions[r].parent = Some(op);
        }
        op
    }

    /// Appends a detached op at the end of `block`.
    pub fn append_op(&mut self, block: BlockId, op: OpId) {
        self.ops[op].block = Some(block);
        self.blocks[block].ops.push(op);
    }

    /// Inserts a detached op before position `index` of `block`.
    pub fn insert_op(&mut self, block: BlockId, index: usize, op: OpId) {
        self.ops[op].block = Some(block);
        self.blocks[block].ops.insert(index, op);
    }

    /// Removes an op from its block (its results must be unused).
    pub fn detach_op(&mut self, op: OpId) {
        if let Some(b) = self.ops[op].block.take() {
            self.blocks[b].ops.retain(|&o| o != op);
        }
    }

    /// Replaces every use of `from` by `to` in ops (including nested regions) and returns.
    pub fn replace_all_uses(&mut self, from: ValueId, to: ValueId) {
        for op in self.ops.values_mut() {
            for v in op.operands.iter_mut() {
                if *v == from {
                    *v = to;
                }
            }
        }
    }

    /// Uses of every value: how many operands refer to it from attached ops.
    pub fn use_counts(&self) -> SecondaryMap<ValueId, u32> {
        let mut counts = SecondaryMap::with_default(0u32);
        for (_, op) in self.ops.iter() {
            if op.block.is_none() {
                continue;
            }
            for &v in &op.operands {
                counts.set(v, counts[v] + 1);
            }
        }
        counts
    }

    pub fn set_loc(&mut self, op: OpId, loc: Option<LocId>) {
        self.op_locs.set(op, loc);
    }

    pub fn add_loc(&mut self, loc: Loc) -> LocId {
        self.locs.push(loc)
    }

    /// Ops of a block in order (a snapshot, so the block may be edited while iterating).
    pub fn block_ops(&self, block: BlockId) -> Vec<OpId> {
        self.blocks[block].ops.clone()
    }

    /// Number of ops attached to blocks, nested regions included.
    pub fn num_live_ops(&self) -> usize {
        self.ops.values().filter(|o| o.block.is_some()).count()
    }
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

    pub fn compare(&mut self, direction: &str, x: ValueId, y: ValueId) -> Result<ValueId, IrError> {
        self.build1(Opcode::Compare, &[x, y], Attrs::new().with("direction", Attr::Str(direction.into())), None)
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

    /// Reduction by `kind` (sum, prod, max, min, and, or) over `dims` (removed).
    pub fn reduce(&mut self, x: ValueId, kind: &str, dims: &[i64]) -> Result<ValueId, IrError> {
        self.build1(
            Opcode::Reduce,
            &[x],
            Attrs::new().with("dimensions", Attr::Ints(dims.to_vec())).with("kind", Attr::Str(kind.into())),
            None,
        )
    }

    /// Appends `return`.
    pub fn ret(&mut self, values: &[ValueId]) -> Result<(), IrError> {
        self.build(Opcode::Return, values, Attrs::new(), Some(&[]))?;
        Ok(())
    }
}
