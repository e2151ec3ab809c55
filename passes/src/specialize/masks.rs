//! Masks and index arithmetic built into the new module: padding replaced by a fill value,
//! validity vectors of factored dims, real sizes from the size arguments, and the gathers that
//! move valid elements (concatenation, regathering, reversal).

use super::{Sp, R};
use tpuc_ir::{
    Builder, DType, Dim, DimLayout, Direction, Factor, GatherDims, Layout, OpId, Opcode, Scalar, SymExpr, TensorType, ValueId,
};

/// What [`Sp::mask`] writes into the padding: a constant, or a scalar value (a `pad`'s).
pub(super) enum Fill {
    Scalar(Scalar),
    Value(ValueId),
}

impl Sp<'_> {
    /// `x` with the padding of `dims` replaced by `fill`.
    pub(super) fn mask(&mut self, x: ValueId, lay: &Layout, dims: &[usize], fill: Fill) -> R<ValueId> {
        let shape = self.shape(x);
        let dt = self.new.values[x].ty.dtype;
        let mut cond: Option<ValueId> = None;
        for &dm in dims {
            if lay[dm].is_exact() {
                continue;
            }
            let f = lay[dm].factors(shape[dm]);
            let v = self.valid(shape[dm], &f)?;
            let full: Vec<Dim> = shape.iter().map(|&s| Dim::Static(s)).collect();
            let bv = self.b().broadcast_in_dim(v, &[dm as i64], full).map_err(|e| self.ir(e))?;
            cond = Some(match cond {
                None => bv,
                Some(c) => self.b().binary(Opcode::And, c, bv).map_err(|e| self.ir(e))?,
            });
        }
        let Some(cond) = cond else { return Ok(x) };
        let ty = TensorType::from_static(dt, &shape);
        let fillv = match fill {
            Fill::Scalar(s) => self.b().splat(s, ty).map_err(|e| self.ir(e))?,
            Fill::Value(v) => {
                let full: Vec<Dim> = shape.iter().map(|&s| Dim::Static(s)).collect();
                self.b().broadcast_in_dim(v, &[], full).map_err(|e| self.ir(e))?
            }
        };
        self.b().select(cond, x, fillv).map_err(|e| self.ir(e))
    }

    /// One factor's index at every position of a padded dim, from the dim's `iota` (i64):
    /// `iota / stride` (the product of the padded sizes of the factors inside it), taken
    /// modulo the factor's padded size unless it is the outermost (`modulo` None).
    fn factor_index(&mut self, iota: ValueId, stride: i64, modulo: Option<i64>) -> R<ValueId> {
        let t = self.new.values[iota].ty.clone();
        let mut idx = iota;
        if stride > 1 {
            let s = self.b().splat(Scalar::Int(stride), t.clone()).map_err(|e| self.ir(e))?;
            idx = self.b().binary(Opcode::Div, idx, s).map_err(|e| self.ir(e))?;
        }
        if let Some(p) = modulo {
            let p = self.b().splat(Scalar::Int(p), t).map_err(|e| self.ir(e))?;
            idx = self.b().binary(Opcode::Rem, idx, p).map_err(|e| self.ir(e))?;
        }
        Ok(idx)
    }

    /// A bool vector of `padded` positions: true where every factor's index is in range.
    fn valid(&mut self, padded: i64, factors: &[Factor]) -> R<ValueId> {
        let i64t = TensorType::from_static(DType::I64, &[padded]);
        let iota = self.b().iota(i64t.clone(), 0).map_err(|e| self.ir(e))?;
        let mut stride = padded;
        let mut cond: Option<ValueId> = None;
        for (k, f) in factors.iter().enumerate() {
            stride /= f.padded.max(1);
            if f.extent.as_const() == Some(f.padded) {
                continue;
            }
            let idx = self.factor_index(iota, stride, (k > 0).then_some(f.padded))?;
            let n = self.extent(&f.extent)?;
            let nb = self.b().broadcast_in_dim(n, &[], vec![Dim::Static(padded)]).map_err(|e| self.ir(e))?;
            let c = self.b().compare(Direction::Lt, idx, nb).map_err(|e| self.ir(e))?;
            cond = Some(match cond {
                None => c,
                Some(p) => self.b().binary(Opcode::And, p, c).map_err(|e| self.ir(e))?,
            });
        }
        match cond {
            Some(c) => Ok(c),
            None => self.b().splat(Scalar::Bool(true), TensorType::from_static(DType::Bool, &[padded])).map_err(|e| self.ir(e)),
        }
    }

    /// The real value of a size expression, as an i64 scalar computed from the size arguments.
    fn extent(&mut self, e: &SymExpr) -> R<ValueId> {
        if let Some(&v) = self.extents.get(e) {
            return Ok(v);
        }
        // Size arithmetic is built in `main`'s block; composites that need it are inlined.
        let size_val = &self.size_val;
        let mut b = Builder { module: &mut self.new, block: self.block, loc: self.loc };
        let built = b.sym_value(e, &mut |s| size_val.get(s).copied());
        let v = built.map_err(|err| self.ir(err))?.ok_or_else(|| self.fail(format!("no size for a symbol of `{e}`")))?;
        self.extents.insert(e.clone(), v);
        Ok(v)
    }

    /// `concatenate` along a padded dim: the operands joined at their padded sizes, then output
    /// position `i` gathers from the operand whose real range holds it.
    pub(super) fn concat_gather(&mut self, op: OpId, ins: &[ValueId], lays: &[Layout], dim: usize) -> R<ValueId> {
        let d = &self.old.ops[op];
        let mut extents = Vec::with_capacity(ins.len());
        for (k, l) in lays.iter().enumerate() {
            let p = self.shape(ins[k])[dim];
            extents.push(match l[dim].prefix_extent() {
                Some(None) => SymExpr::constant(p),
                Some(Some(e)) => e.clone(),
                None => {
                    return Err(self.not_prefix("joins", d.operands()[k], dim))
                }
            });
        }
        let joined = self.b().concatenate(ins, dim as i64).map_err(|e| self.ir(e))?;
        let shape = self.shape(joined);
        let p = shape[dim];
        let t = TensorType::from_static(DType::I64, &[p]);
        let iota = self.b().iota(t.clone(), 0).map_err(|e| self.ir(e))?;
        let mut idx = iota;
        let (mut real_start, mut padded_start) = (SymExpr::constant(0), 0i64);
        for (k, e) in extents.iter().enumerate() {
            if k > 0 {
                // From the real start of operand k on: padded_start + (i - real_start).
                let r = self.extent(&real_start)?;
                let rb = self.b().broadcast_in_dim(r, &[], vec![Dim::Static(p)]).map_err(|e| self.ir(e))?;
                let off = self.b().splat(Scalar::Int(padded_start), t.clone()).map_err(|e| self.ir(e))?;
                let rel = self.b().binary(Opcode::Sub, iota, rb).map_err(|e| self.ir(e))?;
                let src = self.b().binary(Opcode::Add, rel, off).map_err(|e| self.ir(e))?;
                let here = self.b().compare(Direction::Ge, iota, rb).map_err(|e| self.ir(e))?;
                idx = self.b().select(here, src, idx).map_err(|e| self.ir(e))?;
            }
            real_start = real_start.add(e);
            padded_start += self.shape(ins[k])[dim];
        }
        self.gather_along(joined, idx, dim)
    }

    /// `x` with position `i` of `dim` taken from `x[idx[i]]` (gather clamps indices into range).
    fn gather_along(&mut self, x: ValueId, idx: ValueId, dim: usize) -> R<ValueId> {
        let shape = self.shape(x);
        let p = self.shape(idx)[0];
        let idx = self.b().reshape(idx, vec![Dim::Static(p), Dim::Static(1)]).map_err(|e| self.ir(e))?;
        let r = shape.len() as i64;
        let mut sizes = shape.clone();
        sizes[dim] = 1;
        let attrs = GatherDims {
            offset_dims: (0..r).filter(|&i| i != dim as i64).collect(),
            collapsed_slice_dims: vec![dim as i64],
            start_index_map: vec![dim as i64],
            index_vector_dim: 1,
            slice_sizes: sizes,
            ..GatherDims::default()
        }
        .attrs();
        let mut out = shape;
        out[dim] = p;
        let ty = TensorType::from_static(self.new.values[x].ty.dtype, &out);
        self.b().build1(Opcode::Gather, &[x, idx], attrs, Some(ty)).map_err(|e| self.ir(e))
    }

    /// New value `x`, whose `dim` is a prefix (`from`), laid out as the product of padded
    /// factors `to` of the same extent: position i, read as digits over `to`'s padded sizes,
    /// takes the row whose index those digits give over the real sizes (clamped into range
    /// where a digit is past its extent: padding, masked by the caller).
    pub(super) fn regather(&mut self, x: ValueId, dim: usize, from: &DimLayout, to: &DimLayout) -> R<ValueId> {
        let DimLayout::Factors(fs) = to else { return Err(self.fail("internal: regather to a layout without factors")) };
        let total = fs.iter().fold(SymExpr::constant(1), |acc, f| acc.mul(&f.extent));
        if from.prefix_extent() != Some(Some(&total)) {
            return Err(self.fail(format!(
                "dim {dim} is a prefix of {} meeting a product of padded sizes of another extent ({total})",
                from.prefix_extent().flatten().map_or("?".to_string(), |e| e.to_string())
            )));
        }
        let p: i64 = fs.iter().map(|f| f.padded).product();
        let src = self.shape(x)[dim];
        let t = TensorType::from_static(DType::I64, &[p]);
        let iota = self.b().iota(t.clone(), 0).map_err(|e| self.ir(e))?;
        let mut idx: Option<ValueId> = None;
        let mut stride = p;
        for (k, f) in fs.iter().enumerate() {
            stride /= f.padded.max(1);
            let mut digit = self.factor_index(iota, stride, (k > 0).then_some(f.padded))?;
            // Weight of this digit: the product of the real sizes of the factors inside it.
            let inner = fs[k + 1..].iter().fold(SymExpr::constant(1), |acc, g| acc.mul(&g.extent));
            if inner.as_const() != Some(1) {
                let w = self.extent(&inner)?;
                let wb = self.b().broadcast_in_dim(w, &[], vec![Dim::Static(p)]).map_err(|e| self.ir(e))?;
                digit = self.b().binary(Opcode::Mul, digit, wb).map_err(|e| self.ir(e))?;
            }
            idx = Some(match idx {
                None => digit,
                Some(acc) => self.b().binary(Opcode::Add, acc, digit).map_err(|e| self.ir(e))?,
            });
        }
        let idx = idx.ok_or_else(|| self.fail("internal: regather without factors"))?;
        let hi = self.b().splat(Scalar::Int(src - 1), t).map_err(|e| self.ir(e))?;
        let idx = self.b().binary(Opcode::Min, idx, hi).map_err(|e| self.ir(e))?;
        self.gather_along(x, idx, dim)
    }

    /// `reverse` of a padded prefix along `dim`: position `i` takes `x[n - 1 - i]`.
    pub(super) fn reverse_prefix(&mut self, x: ValueId, dim: usize, e: &SymExpr) -> R<ValueId> {
        let shape = self.shape(x);
        let p = shape[dim];
        let t = TensorType::from_static(DType::I64, &[p]);
        let n = self.extent(e)?;
        let one = self.b().scalar(Scalar::Int(1), DType::I64).map_err(|e| self.ir(e))?;
        let last = self.b().binary(Opcode::Sub, n, one).map_err(|e| self.ir(e))?;
        let lastb = self.b().broadcast_in_dim(last, &[], vec![Dim::Static(p)]).map_err(|e| self.ir(e))?;
        let iota = self.b().iota(t.clone(), 0).map_err(|e| self.ir(e))?;
        let idx = self.b().binary(Opcode::Sub, lastb, iota).map_err(|e| self.ir(e))?;
        let zero = self.b().splat(Scalar::Int(0), t).map_err(|e| self.ir(e))?;
        let idx = self.b().binary(Opcode::Max, idx, zero).map_err(|e| self.ir(e))?;
        self.gather_along(x, idx, dim)
    }
}
