//! [`Builder`]: appends ops at the end of a block with a current provenance, inferring
//! result types through the op table's shape rules.

use super::*;
use crate::dims::{GatherDims, ScatterDims};
use crate::enums::ScatterKind;
use crate::payload;

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

    /// `gather` of `x` at `indices` by its dimension numbers.
    pub fn gather(&mut self, x: ValueId, indices: ValueId, dims: GatherDims) -> Result<ValueId, IrError> {
        self.build1(Opcode::Gather, &[x, indices], dims.attrs(), None)
    }

    /// `scatter` of `updates` into `x` at `indices`, combined by `kind`.
    pub fn scatter(&mut self, x: ValueId, indices: ValueId, updates: ValueId, dims: ScatterDims, kind: ScatterKind) -> Result<ValueId, IrError> {
        self.build1(Opcode::Scatter, &[x, indices, updates], dims.attrs(kind), None)
    }

    pub fn compare(&mut self, direction: Direction, x: ValueId, y: ValueId) -> Result<ValueId, IrError> {
        self.build1(Opcode::Compare, &[x, y], payload::Compare { direction }.attrs(), None)
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
        self.build1(Opcode::Constant, &[], payload::Constant { value: &value }.attrs(), None)
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
        self.build1(Opcode::Iota, &[], payload::Iota { dimension }.attrs(), Some(ty))
    }

    pub fn broadcast_in_dim(&mut self, x: ValueId, dims: &[i64], shape: Vec<Dim>) -> Result<ValueId, IrError> {
        let rt = self.ty(x).with_dims(shape);
        if rt == *self.ty(x) && dims.iter().enumerate().all(|(i, &d)| d == i as i64) {
            return Ok(x);
        }
        self.build1(Opcode::BroadcastInDim, &[x], payload::BroadcastInDim { broadcast_dimensions: dims }.attrs(), Some(rt))
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
        self.build1(Opcode::Transpose, &[x], payload::Transpose { permutation: perm }.attrs(), None)
    }

    pub fn slice(&mut self, x: ValueId, start: &[i64], limit: &[i64], strides: &[i64]) -> Result<ValueId, IrError> {
        self.build1(
            Opcode::Slice,
            &[x],
            payload::Slice { start_indices: start, limit_indices: limit, strides }.attrs(),
            None,
        )
    }

    pub fn concatenate(&mut self, xs: &[ValueId], dimension: i64) -> Result<ValueId, IrError> {
        if xs.len() == 1 {
            return Ok(xs[0]);
        }
        self.build1(Opcode::Concatenate, xs, payload::Concatenate { dimension }.attrs(), None)
    }

    pub fn pad(&mut self, x: ValueId, value: ValueId, low: &[i64], high: &[i64], interior: &[i64]) -> Result<ValueId, IrError> {
        self.build1(
            Opcode::Pad,
            &[x, value],
            payload::Pad { edge_padding_low: low, edge_padding_high: high, interior_padding: interior }.attrs(),
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
            payload::DotGeneral {
                lhs_batching_dimensions: lhs_batch,
                rhs_batching_dimensions: rhs_batch,
                lhs_contracting_dimensions: lhs_contract,
                rhs_contracting_dimensions: rhs_contract,
                precision: None,
                precision_scope: None,
            }
            .attrs(),
            None,
        )
    }

    /// Reduction by `kind` over `dims` (removed).
    pub fn reduce(&mut self, x: ValueId, kind: ReduceKind, dims: &[i64]) -> Result<ValueId, IrError> {
        self.build1(
            Opcode::Reduce,
            &[x],
            payload::Reduce { dimensions: dims, kind }.attrs(),
            None,
        )
    }

    /// Appends `return`.
    pub fn ret(&mut self, values: &[ValueId]) -> Result<(), IrError> {
        self.build(Opcode::Return, values, Attrs::new(), Some(&[]))?;
        Ok(())
    }
}
