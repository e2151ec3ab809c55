//! Helpers the passes share: walking every block, recognising splat constants, inserting ops
//! before a given op, and removing dead ops. Uses come from the module's use lists
//! ([`Module::uses`]), so none of these rescans the module per edit.

use smallvec::SmallVec;
use tpuc_ir::{
    payload, Attrs, BlockId, DType, IrError, LocId, Module, OpId, Opcode, Scalar, TensorData, TensorType, ValueDef, ValueId,
};

/// Every block of every function, nested regions included, outer blocks first.
pub fn all_blocks(m: &Module) -> Vec<BlockId> {
    let mut out = Vec::new();
    let mut stack: Vec<BlockId> = m.funcs.iter().flat_map(|f| m.regions[f.body].blocks().iter().copied()).rev().collect();
    while let Some(b) = stack.pop() {
        out.push(b);
        for op in m.ops_in(b).rev() {
            for &r in m.ops[op].regions().iter().rev() {
                stack.extend(m.regions[r].blocks().iter().rev().copied());
            }
        }
    }
    out
}

/// The blocks of the functions' bodies only (not the regions of ops such as `composite`).
pub fn func_blocks(m: &Module) -> Vec<BlockId> {
    m.funcs.iter().flat_map(|f| m.regions[f.body].blocks().iter().copied()).collect()
}

/// The op defining `v` if it is an op result.
pub fn def_op(m: &Module, v: ValueId) -> Option<OpId> {
    match m.values[v].def() {
        ValueDef::Result { op, .. } => Some(op),
        ValueDef::BlockArg { .. } => None,
    }
}

/// The opcode of the op defining `v`.
pub fn def_opcode(m: &Module, v: ValueId) -> Option<Opcode> {
    def_op(m, v).map(|o| m.ops[o].opcode())
}

/// `v`'s defining op if it has opcode `want`.
pub fn def_is(m: &Module, v: ValueId, want: Opcode) -> Option<OpId> {
    def_op(m, v).filter(|&o| m.ops[o].opcode() == want)
}

/// The constant data of `v` if a `constant` op defines it.
pub fn constant_of(m: &Module, v: ValueId) -> Option<&TensorData> {
    def_is(m, v, Opcode::Constant).map(|o| m.ops[o].payload::<payload::Constant>().value)
}

/// The single value every element of `v` has, if `v` is a splat constant (or a one-element
/// one), possibly broadcast by `broadcast_in_dim`s, reshaped or converted to the same dtype.
pub fn splat_of(m: &Module, v: ValueId) -> Option<Scalar> {
    let mut v = v;
    loop {
        let op = def_op(m, v)?;
        let d = &m.ops[op];
        match d.opcode() {
            Opcode::Constant => return d.payload::<payload::Constant>().value.splat_value(),
            Opcode::BroadcastInDim | Opcode::Reshape => v = d.operands()[0],
            _ => return None,
        }
    }
}

/// The splat value of `v` as f64 (bools as 0/1).
pub fn splat_f64(m: &Module, v: ValueId) -> Option<f64> {
    splat_of(m, v).map(Scalar::as_f64)
}

/// True if `v` is a splat constant equal to `x` (compared as f64; `-0.0 == 0.0`).
pub fn is_splat(m: &Module, v: ValueId, x: f64) -> bool {
    splat_f64(m, v) == Some(x)
}

/// Operands of `v`'s defining op when it is `opcode`, in both orders for commutative ops: the
/// first pair returned satisfies `pred` on its second element if any order does.
pub fn binary_with(m: &Module, v: ValueId, opcode: Opcode, pred: impl Fn(ValueId) -> bool) -> Option<(ValueId, ValueId)> {
    let op = def_is(m, v, opcode)?;
    let ops = &m.ops[op].operands();
    let (a, b) = (ops[0], ops[1]);
    if pred(b) {
        Some((a, b))
    } else if opcode.has_trait(tpuc_ir::opcode::traits::COMMUTATIVE) && pred(a) {
        Some((b, a))
    } else {
        None
    }
}

/// Operands of `v`'s defining op if it is the binary op `opcode`.
pub fn binary(m: &Module, v: ValueId, opcode: Opcode) -> Option<(ValueId, ValueId)> {
    let op = def_is(m, v, opcode)?;
    let ops = &m.ops[op].operands();
    Some((ops[0], ops[1]))
}

/// The operand of `v`'s defining op if it is the unary op `opcode`.
pub fn unary(m: &Module, v: ValueId, opcode: Opcode) -> Option<ValueId> {
    def_is(m, v, opcode).map(|o| m.ops[o].operands()[0])
}

/// Looks through `convert`s (to any type) back to the converted value.
pub fn strip_converts(m: &Module, mut v: ValueId) -> ValueId {
    while let Some(x) = unary(m, v, Opcode::Convert) {
        v = x;
    }
    v
}

/// Ops built at a position of a block: each new op goes before `before` (at the end of the
/// block when `None`).
pub struct Inserter<'m> {
    pub m: &'m mut Module,
    pub block: BlockId,
    pub before: Option<OpId>,
    pub loc: Option<LocId>,
}

impl<'m> Inserter<'m> {
    /// Builds before `op` (in `op`'s block), with `op`'s provenance.
    pub fn before(m: &'m mut Module, op: OpId) -> Self {
        let block = m.ops[op].block().expect("attached op");
        let loc = *m.op_locs.get(op);
        Inserter { m, block, before: Some(op), loc }
    }

    pub fn build(&mut self, opcode: Opcode, operands: &[ValueId], attrs: Attrs, results: Option<&[TensorType]>) -> Result<SmallVec<[ValueId; 1]>, IrError> {
        let op = self.m.create_op(opcode, operands, attrs, results, &[])?;
        match self.before {
            Some(b) => self.m.insert_op_before(b, op),
            None => self.m.append_op(self.block, op),
        }
        self.m.set_loc(op, self.loc);
        Ok(self.m.ops[op].results().into())
    }

    pub fn build1(&mut self, opcode: Opcode, operands: &[ValueId], attrs: Attrs, result: Option<TensorType>) -> Result<ValueId, IrError> {
        let r = result.map(|t| vec![t]);
        Ok(self.build(opcode, operands, attrs, r.as_deref())?[0])
    }

    pub fn constant(&mut self, data: TensorData) -> Result<ValueId, IrError> {
        self.build1(Opcode::Constant, &[], payload::Constant { value: &data }.attrs(), None)
    }

    /// Converts to `dtype` (returns `x` when it has that dtype already).
    pub fn convert(&mut self, x: ValueId, dtype: DType) -> Result<ValueId, IrError> {
        let t = self.m.values[x].ty.clone();
        if t.dtype == dtype {
            return Ok(x);
        }
        self.build1(Opcode::Convert, &[x], Attrs::new(), Some(t.with_dtype(dtype)))
    }
}

/// Replaces every use of `op`'s single result by `v` and erases `op`.
pub fn replace_op(m: &mut Module, op: OpId, v: ValueId) {
    let r = m.ops[op].results()[0];
    m.replace_all_uses(r, v);
    m.erase_op(op);
}

/// True if `op` can go when nothing reads its results: pure, not a terminator, attached.
fn removable_if_unused(m: &Module, op: OpId) -> bool {
    let d = &m.ops[op];
    d.block().is_some() && d.opcode().is_pure() && !d.opcode().is_terminator() && d.results().iter().all(|&r| !m.has_uses(r))
}

/// Erases the ops in `roots` whose results are unused, and then the ops that fed only them,
/// transitively. Costs only the ops visited: no module sweep.
pub fn erase_dead_from(m: &mut Module, roots: impl IntoIterator<Item = OpId>) -> bool {
    let mut work: Vec<OpId> = roots.into_iter().collect();
    let mut changed = false;
    while let Some(op) = work.pop() {
        if m.is_erased(op) || !removable_if_unused(m, op) {
            continue;
        }
        let operands = m.ops[op].operands().to_vec();
        m.erase_op(op);
        changed = true;
        work.extend(operands.iter().filter_map(|&v| def_op(m, v)));
    }
    changed
}

/// Removes pure ops whose results nobody uses, in every block: one backward walk per block
/// (a use comes after its definition, so erasing an op can only make earlier ops dead).
/// Returns whether anything was removed.
pub fn remove_dead(m: &mut Module) -> bool {
    let mut changed = false;
    for b in all_blocks(m) {
        if m.blocks[b].region().is_none() {
            continue;
        }
        let mut cur = m.terminator(b);
        while let Some(op) = cur {
            cur = m.prev_op(op);
            if removable_if_unused(m, op) {
                m.erase_op(op);
                changed = true;
            }
        }
    }
    changed
}

/// Static dims of a value's type (None if any is symbolic).
pub fn static_dims(m: &Module, v: ValueId) -> Option<Vec<i64>> {
    m.values[v].ty.static_dims()
}

/// True if converting any value of `from` to `to` and back gives the value itself.
pub fn exactly_representable(from: DType, to: DType) -> bool {
    use DType::*;
    if from == to {
        return true;
    }
    let int_bits = |d: DType| -> Option<(bool, u32)> {
        Some(match d {
            Bool => (false, 1),
            I8 => (true, 8),
            I16 => (true, 16),
            I32 => (true, 32),
            I64 => (true, 64),
            U8 => (false, 8),
            U16 => (false, 16),
            U32 => (false, 32),
            U64 => (false, 64),
            _ => return None,
        })
    };
    // (mantissa bits incl. implicit, exponent range rank)
    let float_prec = |d: DType| -> Option<(u32, u32)> {
        Some(match d {
            F8E4M3FN => (4, 1),
            F8E5M2 => (3, 2),
            F16 => (11, 2),
            BF16 => (8, 3),
            F32 => (24, 3),
            F64 => (53, 4),
            _ => return None,
        })
    };
    match (int_bits(from), int_bits(to), float_prec(from), float_prec(to)) {
        (Some((fs, fb)), Some((ts, tb)), _, _) => {
            if from == Bool {
                return true;
            }
            if fs && !ts {
                return false;
            }
            if fs == ts {
                tb >= fb
            } else {
                tb > fb
            }
        }
        (Some((_, fb)), None, _, Some((tm, _))) => from == Bool || fb < tm,
        (None, None, Some((fm, fe)), Some((tm, te))) => tm >= fm && te >= fe,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn representability() {
        use DType::*;
        assert!(exactly_representable(F32, F64));
        assert!(exactly_representable(BF16, F32));
        assert!(!exactly_representable(BF16, F16));
        assert!(!exactly_representable(F16, BF16));
        assert!(!exactly_representable(F64, F32));
        assert!(exactly_representable(I32, I64));
        assert!(!exactly_representable(I64, I32));
        assert!(exactly_representable(U8, I16));
        assert!(!exactly_representable(U8, I8));
        assert!(!exactly_representable(I8, U16));
        assert!(exactly_representable(I16, F32));
        assert!(!exactly_representable(I32, F32));
        assert!(exactly_representable(I32, F64));
        assert!(exactly_representable(Bool, F16));
        assert!(exactly_representable(Bool, I8));
    }
}
