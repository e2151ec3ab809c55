//! The op dispatch: [`Sp::op`] specializes one op by its opcode's rule (one method per rule,
//! grouped by kind of op in the sibling files), then builds it and records its results'
//! layouts; also building ops ([`Sp::emit`]) and composites, and the rules of iota and
//! elementwise ops.

use super::{BlockMode, Sp, R};
use tpuc_ir::{payload, Attrs, DimLayout, Layout, OpId, Opcode, RegionId, ValueId};

/// What an opcode's rule made of an op.
pub(super) enum Step {
    /// Build the op on these operands; its results get these layouts.
    Emit(Vec<ValueId>, Vec<Layout>),
    /// The rule built what replaces the op and recorded its results: nothing left to do.
    Done,
}

impl Sp<'_> {
    pub(super) fn op(&mut self, op: OpId) -> R<()> {
        let old = self.old;
        let d = &old.ops[op];
        self.cur = Some(op);
        self.set_loc(op);
        let ins: Vec<ValueId> = d.operands().iter().map(|v| self.vmap[v]).collect();
        let lays: Vec<Layout> = d.operands().iter().map(|v| self.lay[v].clone()).collect();
        let all_exact = lays.iter().all(|l| l.iter().all(DimLayout::is_exact));
        let static_results = d.results().iter().all(|&r| old.values[r].ty.is_static());
        if all_exact && static_results && d.opcode() != Opcode::Composite {
            let outs = self.emit(op, &ins, &[])?;
            for (&r, _) in d.results().iter().zip(&outs) {
                self.lay.insert(r, vec![DimLayout::Exact; old.values[r].ty.rank()]);
            }
            return Ok(());
        }
        use Opcode::*;
        let out_rank = old.values[d.results()[0]].ty.rank();
        let step = match d.opcode() {
            Constant => Step::Emit(ins, vec![vec![DimLayout::Exact; out_rank]]),
            Iota => self.iota(op, ins)?,
            Abs | Neg | Exp | Expm1 | Log | Log1p | Sqrt | Rsqrt | Tanh | Logistic | Sin | Cos | Tan | Erf | Floor
            | Ceil | RoundEven | Sign | Not | IsFinite | Convert | Add | Sub | Mul | Div | Rem | Pow | Max | Min | And
            | Or | Xor | Atan2 | Compare | Select | Gelu | Erfc | ErfInv | Lgamma | Digamma | Acosh | Asinh
            | Atanh | BesselI1e | Polygamma | Zeta | NextAfter | Real | Imag | Complex | ShiftLeft
            | ShiftRightArithmetic | ShiftRightLogical => self.elementwise(op, ins, lays)?,
            BroadcastInDim => self.broadcast_in_dim(op, ins, lays)?,
            Transpose => self.transpose(op, ins, lays)?,
            Reshape => self.reshape(op, ins, lays)?,
            Slice => self.slice(op, ins, lays)?,
            Concatenate => self.concatenate(op, ins, lays)?,
            Pad => self.pad(op, ins, lays)?,
            Reverse => self.reverse(op, ins, lays)?,
            BindSize => return self.bind_size(op, &ins, &lays),
            DotGeneral => self.dot_general(op, ins, lays)?,
            Convolution => self.convolution(op, ins, lays)?,
            Reduce => self.reduce(op, ins, lays)?,
            ArgReduce => self.arg_reduce(op, ins, lays)?,
            ReduceWindow => self.reduce_window(op, ins, lays)?,
            Scan => self.scan(op, ins, lays)?,
            Sort => self.sort(op, ins, lays)?,
            Softmax | LogSoftmax => self.softmax(op, ins, lays)?,
            LayerNorm => self.layer_norm(op, ins, lays)?,
            Attention => self.attention(op, ins, lays)?,
            Gather => self.gather(op, ins, lays)?,
            Scatter => self.scatter(op, ins, lays)?,
            SelectAndScatterAdd => return Err(self.fail("max-pool gradient over a padded dim")),
            Cholesky | TriangularSolve | Qr | HouseholderProduct | Eigh => self.linalg(op, ins, lays)?,
            AllReduce | CollectiveBroadcast => Step::Emit(ins, vec![lays[0].clone()]),
            AllGather | ReduceScatter | AllToAll => self.moves_blocks(op, ins, lays)?,
            Fft => self.fft(op, ins, lays)?,
            Composite => return self.composite(op, &ins),
            Return | Yield => unreachable!("terminators are handled by the block walk"),
        };
        let Step::Emit(new_ins, out_lays) = step else { return Ok(()) };
        let outs = self.emit(op, &new_ins, &[])?;
        for ((&r, _), l) in d.results().iter().zip(&outs).zip(out_lays) {
            self.lay.insert(r, l);
        }
        self.propagate_clean(op);
        Ok(())
    }

    /// `bind_size`: the operand itself, padded to the bucket of the size it defines (which
    /// must be the operand's size along the dim), its valid part the first `n`; `n` becomes the
    /// symbol's real size for every mask built after it.
    fn bind_size(&mut self, op: OpId, ins: &[ValueId], lays: &[Layout]) -> R<()> {
        let d = &self.old.ops[op];
        let dim = d.payload::<payload::BindSize>().dimension as usize;
        let r = d.results()[0];
        let Some(tpuc_ir::Dim::Sym(e)) = self.old.values[r].ty.dims.get(dim).cloned() else {
            return Err(self.fail("internal: the result dim is not a symbol"));
        };
        let sym = e.as_symbol().unwrap_or_default().to_string();
        if !lays[0][dim].is_exact() {
            return Err(self.fail(format!("a data-dependent size over {}", self.padded_dim_note(d.operands()[0], dim))));
        }
        let shape = self.shape(ins[0]);
        let have = shape[dim];
        let bucket = self.sizes.get(&sym).copied().unwrap_or(have);
        // A size already bucketed (an input symbol: a backward graph recomputing `x[m]` of the
        // `u0` its forward counted) may differ from this buffer's rows. The valid rows are a
        // prefix no longer than either, so the buffer is cut or zero-padded to the bucket.
        let mut v = ins[0];
        if bucket < have {
            let mut limit = shape.clone();
            limit[dim] = bucket;
            v = self.b().slice(v, &vec![0; shape.len()], &limit, &vec![1; shape.len()]).map_err(|e| self.ir(e))?;
        } else if bucket > have {
            let dt = self.new.values[v].ty.dtype;
            let zero = self.b().splat(tpuc_ir::Scalar::Int(0), tpuc_ir::TensorType::from_static(dt, &[])).map_err(|e| self.ir(e))?;
            let mut high = vec![0; shape.len()];
            high[dim] = bucket - have;
            v = self.b().pad(v, zero, &vec![0; shape.len()], &high, &vec![0; shape.len()]).map_err(|e| self.ir(e))?;
        }
        let have = bucket;
        // Several results may share one size: `unique`'s values and counts, or `x[m]` and
        // `y[m]` of one mask, whose counts are equal but computed twice where no CSE ran
        // first. One symbol is one size to torch, so its first count stands for all.
        self.size_val.entry(sym.clone()).or_insert(ins[1]);
        let mut layout = lays[0].clone();
        layout[dim] = super::prefix(have, e);
        self.vmap.insert(r, v);
        self.lay.insert(r, layout);
        Ok(())
    }

    /// Builds `op` with new operands and regions, its attributes and its specialized result
    /// types, and maps its results.
    pub(super) fn emit(&mut self, op: OpId, ins: &[ValueId], regions: &[RegionId]) -> R<Vec<ValueId>> {
        let attrs = self.old.ops[op].attrs.clone();
        self.emit_with(op, ins, attrs, regions)
    }

    /// [`Self::emit`] with other attributes.
    pub(super) fn emit_with(&mut self, op: OpId, ins: &[ValueId], attrs: Attrs, regions: &[RegionId]) -> R<Vec<ValueId>> {
        let d = &self.old.ops[op];
        let types = d.results().iter().map(|&r| self.spec_type(&self.old.values[r].ty)).collect::<R<Vec<_>>>()?;
        let n = self.new.create_op(d.opcode(), ins, attrs, Some(&types), regions).map_err(|e| self.ir(e))?;
        self.new.append_op(self.block, n);
        self.new.set_loc(n, self.loc);
        let outs = self.new.ops[n].results().to_vec();
        for (&r, &v) in d.results().iter().zip(&outs) {
            self.vmap.insert(r, v);
        }
        Ok(outs)
    }

    /// A composite: inlined when an operand is padded, else copied with its region.
    fn composite(&mut self, op: OpId, ins: &[ValueId]) -> R<()> {
        let old = self.old;
        let d = &old.ops[op];
        let body = old.regions[d.regions()[0]].blocks()[0];
        let padded = d.operands().iter().any(|v| self.lay[v].iter().any(|x| !x.is_exact()));
        let args = old.blocks[body].args().to_vec();
        if padded {
            for (i, &a) in args.iter().enumerate() {
                self.vmap.insert(a, ins[i]);
                let l = self.lay[&d.operands()[i]].clone();
                self.lay.insert(a, l);
            }
            let outs = self.block_ops(body, BlockMode::Inline)?;
            for (&r, o) in d.results().iter().zip(outs) {
                let (v, l) = (self.vmap[&o], self.lay[&o].clone());
                self.vmap.insert(r, v);
                self.lay.insert(r, l);
            }
            return Ok(());
        }
        let types = args.iter().map(|&a| self.spec_type(&old.values[a].ty)).collect::<R<Vec<_>>>()?;
        let (region, block) = self.new.new_region(&types);
        let new_args = self.new.blocks[block].args().to_vec();
        for (i, &a) in args.iter().enumerate() {
            self.vmap.insert(a, new_args[i]);
            self.lay.insert(a, vec![DimLayout::Exact; old.values[a].ty.rank()]);
        }
        let outer = std::mem::replace(&mut self.block, block);
        let (cur, loc) = (self.cur, self.loc);
        self.block_ops(body, BlockMode::Copy)?;
        self.block = outer;
        self.cur = cur;
        self.loc = loc;
        let outs = self.emit(op, ins, &[region])?;
        for (&r, _) in d.results().iter().zip(&outs) {
            self.lay.insert(r, vec![DimLayout::Exact; old.values[r].ty.rank()]);
        }
        Ok(())
    }

    /// A valid prefix along its dimension, uniform along padded others.
    fn iota(&self, op: OpId, ins: Vec<ValueId>) -> R<Step> {
        let d = &self.old.ops[op];
        let dim = d.payload::<payload::Iota>().dimension as usize;
        let l = self.old_dims(d.results()[0])
            .into_iter()
            .enumerate()
            .map(|(i, e)| match e {
                None => DimLayout::Exact,
                Some(e) if i == dim => self.prefix_of(e),
                Some(e) => DimLayout::Uniform(e),
            })
            .collect();
        Ok(Step::Emit(ins, vec![l]))
    }

    /// Elementwise ops: operands' padded dims must agree (a prefix meeting a product of
    /// padded sizes is regathered).
    fn elementwise(&mut self, op: OpId, mut ins: Vec<ValueId>, mut lays: Vec<Layout>) -> R<Step> {
        let d = &self.old.ops[op];
        // A prefix meeting a product of padded sizes position by position (a saved
        // `[b*s, d]` activation and a reshaped `[b, s, d]` gradient) is regathered into
        // the product's layout, as for contractions.
        for i in 0..lays[0].len() {
            let product = lays.iter().map(|l| &l[i]).find(|x| x.prefix_extent().is_none()).cloned();
            let Some(want) = product else { continue };
            for k in 0..ins.len() {
                if matches!(lays[k][i], DimLayout::Factors(_)) && lays[k][i] != want && lays[k][i].prefix_extent().is_some() {
                    ins[k] = self.regather(ins[k], i, &lays[k][i], &want)?;
                    lays[k][i] = want.clone();
                }
            }
        }
        let mut l = lays[0].clone();
        for (k, other) in lays.iter().enumerate().skip(1) {
            for (i, x) in other.iter().enumerate() {
                l[i] = self.unify(&l[i], x, d.operands()[k], i)?;
            }
        }
        Ok(Step::Emit(ins, vec![l]))
    }
}
