//! `specialize`: one bucket of a program with symbolic dimensions.
//!
//! Needs: a verified module straight from the importer (before `fuse`), whose `main` may have
//! symbolic dims, and a padded size `B` for every symbol of the module.
//! Guarantees: the result is a verified module with only static dims, every symbol `s`
//! replaced by its bucket size, and one extra `symint` argument per symbol (appended after the
//! original arguments, named after the symbol) that carries the real size `n <= B` at run time.
//! For every real size the valid part of every result equals what the symbolic program computes
//! at that size, whatever the padding of the inputs holds (NaN and infinities included):
//!
//! - every value carries a *layout* per dim: `Exact` (not padded), `Uniform` (padded, but the
//!   contents are the same along the dim, e.g. a broadcast), or a list of *factors* (outer to
//!   inner): the dim is a row-major product of `(padded, extent)` pieces and an index is valid
//!   when every piece's index is below its extent (a plain padded dim is one factor;
//!   `reshape [2, s] -> [2*s]` keeps both);
//! - padding is masked lazily, as XLA's dynamic padder does: elementwise ops leave garbage in
//!   padding; an op that mixes positions along a padded dim first replaces the padding with a
//!   neutral value by `select(iota < n, x, fill)` (reduction identities, 0 for matmul
//!   contraction and convolution, -inf for softmax, the pad value for `pad`), so no NaN or
//!   Inf can leak; ops whose valid outputs never read padding (prefix scans, causal attention,
//!   row-wise ops) need nothing; `reverse` is rewritten as a gather from `n - 1 - i`; a
//!   contraction's zero mask is placed where its operand is produced (up through reshapes,
//!   transposes and slices that keep the dim), where XLA fuses it with the producer;
//! - operands that pair positions (elementwise ops, contractions) must lay a padded dim out
//!   alike: a prefix meeting a product of padded sizes of the same extent (a host-padded
//!   `[b*s, d]` input against a reshaped `[b, s, d]`) is regathered into the product's layout;
//!   any other mismatch is an error;
//! - what cannot be made exact is an error naming the op, its FX node and the padded dim:
//!   [`handling`] classifies every opcode (an exhaustive match: a new opcode needs a rule), and
//!   the error states the op's rule.
//!
//! The per-result layouts tell the caller how to cut the valid part out of each padded result.

use crate::{Pass, PassError};
use std::collections::{BTreeMap, HashMap};
use tpuc_ir::{
    ArgInfo, ArgKind, ArgReduceKind, ResultInfo, ResultKind, Attr, Attrs, BlockId, Builder, DType, Dim, Direction, LocId, Module, OpId,
    Opcode, ReduceKind, RegionId, Scalar, SymExpr, TensorType, ValueId, WindowKind,
};

pub use tpuc_ir::{DimLayout, Factor, Layout};

/// Normalizes a factor list: size-1 pieces dropped, all-static lists are `Exact`.
fn from_factors(f: Vec<Factor>) -> DimLayout {
    let f: Vec<Factor> = f.into_iter().filter(|x| x.padded != 1).collect();
    if f.iter().all(|x| x.extent.as_const() == Some(x.padded)) {
        DimLayout::Exact
    } else {
        DimLayout::Factors(f)
    }
}

/// A padded dim whose first `extent` of `padded` positions are valid (`Exact` when `padded`
/// is 1: sizes are at least 1).
fn prefix(padded: i64, extent: SymExpr) -> DimLayout {
    from_factors(vec![Factor { padded, extent }])
}

/// How [`specialize`] treats an op whose operands are padded (the classification table).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Handling {
    /// Position by position: padding stays padding, nothing to mask.
    Propagates,
    /// Masks padded dims it mixes with a neutral value first.
    Masks,
    /// Rewritten into ops that keep the valid part a prefix.
    Rewrites,
    /// Exact in the listed cases, an error naming the op otherwise.
    Conditional,
    /// Inlined, then its body is specialized.
    Inlines,
}

/// The classification of every opcode, with the rule in words.
pub fn handling(op: Opcode) -> (Handling, &'static str) {
    use Handling::*;
    use Opcode::*;
    match op {
        Constant => (Propagates, "static"),
        Iota => (Propagates, "valid prefix along its dimension, uniform along padded others"),
        Abs | Neg | Exp | Expm1 | Log | Log1p | Sqrt | Rsqrt | Tanh | Logistic | Sin | Cos | Tan | Erf | Floor | Ceil
        | RoundEven | Sign | Not | IsFinite | Convert | Add | Sub | Mul | Div | Rem | Pow | Max | Min | And | Or
        | Xor | Atan2 | Compare | Select | Gelu | Erfc | ErfInv | Lgamma | Digamma | Acosh | Asinh | Atanh
        | BesselI1e | Polygamma | Zeta | NextAfter | Real | Imag | Complex => {
            (Propagates, "elementwise; operands' padded dims must agree")
        }
        Fft => (Conditional, "transformed (trailing) dims not padded"),
        AllReduce | CollectiveBroadcast => (Propagates, "elementwise across ranks; every rank pads alike"),
        AllGather | ReduceScatter | AllToAll => (Conditional, "the gathered / scattered dim not padded"),
        Cholesky | TriangularSolve | Qr | HouseholderProduct | Eigh => {
            (Conditional, "matrix (trailing two) dims not padded")
        }
        BroadcastInDim => (Propagates, "broadcast dims become uniform"),
        Transpose => (Propagates, "permutes the layouts"),
        Reshape => (Conditional, "regroups factors; a padded factor cannot be split"),
        Slice => (Conditional, "a padded dim: whole, or a static slice inside the smallest size"),
        Concatenate => (Rewrites, "along a padded dim: joined, then each element gathered to its real place"),
        Pad => (Masks, "padding replaced by the pad value first; no interior or negative high padding"),
        Reverse => (Rewrites, "gather from n - 1 - i"),
        DotGeneral => (Masks, "contracting dims masked with 0 in both operands"),
        Convolution => (Masks, "input feature and spatial dims masked with 0; kernel not padded"),
        Reduce => (Masks, "reduced dims masked with the reduction's identity"),
        ArgReduce => (Masks, "masked with the lowest (argmax) or highest (argmin) value"),
        ReduceWindow => (Masks, "window dims masked with the window reduction's identity"),
        Scan => (Conditional, "prefix scans never read padding; a multi-factor dim is rejected"),
        Softmax | LogSoftmax => (Masks, "masked with -inf along the dimension"),
        LayerNorm => (Conditional, "normalized dims not padded"),
        Attention => (Conditional, "padded keys (set to 0, values too) only with is_causal and queries padded alike"),
        Gather => (Conditional, "padded dims indexed, taken whole, batch dims of the indices, or batch dims laid out alike in operand and indices"),
        Scatter => (Masks, "padded index positions point out of bounds (skipped); update windows whole"),
        SelectAndScatterAdd => (Conditional, "no padded dims"),
        Sort => (Masks, "padding filled to sort last (NaN ascending, lowest descending; the sort is stable)"),
        Composite => (Inlines, "inlined when an operand is padded"),
        Return | Yield => (Propagates, "results keep their layouts"),
    }
}

/// The pass: [`specialize`] to the bucket `sizes` (`--bucket NAME=SIZE` on the command line,
/// [`crate::PipelineOptions::bucket`]), replacing the module. Changed unless the module has no
/// symbols.
pub struct Specialize {
    pub sizes: Option<BTreeMap<String, i64>>,
}

impl Pass for Specialize {
    fn name(&self) -> &'static str {
        "specialize"
    }

    fn run(&self, m: &mut Module) -> Result<bool, PassError> {
        let sizes = self.sizes.as_ref().ok_or_else(|| PassError::Failed {
            pass: "specialize".into(),
            message: "no bucket to specialize to: give a size for every symbol (--bucket NAME=SIZE)".into(),
        })?;
        // A module without symbols is its only bucket.
        if m.symbols.iter().next().is_none() {
            return Ok(false);
        }
        *m = specialize(m, sizes)?;
        Ok(true)
    }
}

/// Per symbol (declaration order), the `main` argument of a specialized module that carries
/// its real size: the last arguments, one per symbol.
pub fn size_args(m: &Module) -> Vec<(String, usize)> {
    let nargs = m.main_func().map_or(0, |f| f.args.len());
    let syms: Vec<String> = m.symbols.iter().map(|s| s.name.to_string()).collect();
    let first = nargs.saturating_sub(syms.len());
    syms.into_iter().enumerate().map(|(k, s)| (s, first + k)).collect()
}

/// The layout of each result of a specialized module's `main` (all `Exact` where none is
/// recorded).
pub fn result_layouts(m: &Module) -> Vec<Layout> {
    let Some(f) = m.main_func() else { return Vec::new() };
    let entry = m.entry_block(f);
    let Some(ret) = m.terminator(entry) else { return Vec::new() };
    m.ops[ret]
        .operands
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            f.results.get(i).and_then(|r| r.layout.clone()).unwrap_or_else(|| vec![DimLayout::Exact; m.values[v].ty.rank()])
        })
        .collect()
}

/// Specializes `module`'s `main` to the bucket `sizes` (a padded size per symbol): the new
/// module, each result's layout recorded in its `ResultInfo`. See the module docs.
pub fn specialize(module: &Module, sizes: &BTreeMap<String, i64>) -> Result<Module, PassError> {
    let fail = |m: String| PassError::Failed { pass: "specialize".into(), message: m };
    let func = module.main_func().ok_or_else(|| fail("the module has no `main`".into()))?;
    for s in module.symbols.iter() {
        match sizes.get(&*s.name) {
            None => return Err(fail(format!("no bucket size for symbol `{}`", s.name))),
            Some(&b) if b < s.min.max(1) => {
                return Err(fail(format!("bucket size {b} for `{}` is below its smallest size {}", s.name, s.min.max(1))))
            }
            _ => {}
        }
    }
    let entry = module.entry_block(func);
    let mut sp = Sp {
        old: module,
        new: Module::new(),
        sizes,
        vmap: HashMap::new(),
        lay: HashMap::new(),
        size_val: BTreeMap::new(),
        extents: HashMap::new(),
        locs: HashMap::new(),
        clean: HashMap::new(),
        block: tpuc_ir::EntityId::new(0),
        loc: None,
        cur: None,
        zeroed: Default::default(),
    };
    let mut args = Vec::new();
    for (i, &a) in module.blocks[entry].args.iter().enumerate() {
        let ty = &module.values[a].ty;
        args.push((sp.spec_type(ty)?, func.args[i].clone()));
    }
    let mut size_args = Vec::new();
    for s in module.symbols.iter() {
        size_args.push((s.name.to_string(), args.len()));
        args.push((TensorType::scalar(DType::I64), ArgInfo { kind: ArgKind::SymInt, name: s.name.to_string() }));
    }
    let (fi, block) = sp.new.add_func("main", args);
    sp.new.funcs[fi].results = func.results.clone();
    sp.new.symbols = module.symbols.clone();
    sp.block = block;
    let new_args = sp.new.blocks[block].args.clone();
    for (i, &a) in module.blocks[entry].args.iter().enumerate() {
        sp.vmap.insert(a, new_args[i]);
        let ty = &module.values[a].ty;
        let layout = ty
            .dims
            .iter()
            .map(|d| match d {
                Dim::Static(_) => DimLayout::Exact,
                Dim::Sym(e) => prefix(sp.eval(e).unwrap_or(0), e.clone()),
            })
            .collect();
        sp.lay.insert(a, layout);
    }
    for (s, i) in &size_args {
        sp.size_val.insert(s.clone(), new_args[*i]);
    }
    let results = sp.block_ops(entry, BlockMode::Main)?;
    let layouts: Vec<Layout> = results.iter().map(|&v| sp.lay[&v].clone()).collect();
    let mut new = sp.new;
    // Padded results say where their valid part is (metadata is made for a `main` that had
    // none only when one needs it).
    let infos = &mut new.funcs[fi].results;
    if infos.is_empty() && layouts.iter().any(|l| !l.iter().all(DimLayout::is_exact)) {
        *infos = (0..layouts.len()).map(|i| ResultInfo::new(ResultKind::UserOutput, format!("result{i}"))).collect();
    }
    for (info, layout) in infos.iter_mut().zip(layouts) {
        info.layout = (!layout.iter().all(DimLayout::is_exact)).then_some(layout);
    }
    new.compact();
    tpuc_ir::verify(&new).map_err(|errs| PassError::VerifyAfter { pass: "specialize".into(), errors: errs })?;
    Ok(new)
}

#[derive(Copy, Clone, PartialEq, Eq)]
enum BlockMode {
    /// `main`'s body: `return` is built and its operands returned.
    Main,
    /// A composite body copied into a new region: `yield` is built.
    Copy,
    /// A composite body inlined: `yield`'s operands are returned, not built.
    Inline,
}

struct Sp<'a> {
    old: &'a Module,
    new: Module,
    sizes: &'a BTreeMap<String, i64>,
    /// Old value → new value.
    vmap: HashMap<ValueId, ValueId>,
    /// Old value → layout.
    lay: HashMap<ValueId, Layout>,
    /// Symbol → the new `main` argument with its real size.
    size_val: BTreeMap<String, ValueId>,
    /// Real-size expressions already built (in `main`'s block).
    extents: HashMap<SymExpr, ValueId>,
    locs: HashMap<LocId, LocId>,
    /// The new block being built.
    block: BlockId,
    /// The new location of the op being specialized.
    loc: Option<LocId>,
    /// Old value -> per dim, the value its padding is known to hold wherever the other padded
    /// dims are valid (after a mask, a softmax, ...): masks that would write the same value
    /// again are skipped.
    clean: HashMap<ValueId, Vec<Option<f64>>>,
    /// The old op being specialized (for errors).
    cur: Option<OpId>,
    /// New values (and dims) whose padding a hoisted mask set to 0 (see `zero_early`).
    zeroed: std::collections::HashSet<(ValueId, usize)>,
}

type R<T> = Result<T, PassError>;

impl<'a> Sp<'a> {
    /// The error for the current op, ending with its rule from [`handling`] so that the
    /// message says what the op would need to be bucketed.
    fn fail(&self, msg: impl std::fmt::Display) -> PassError {
        let mut m = String::from("cannot bucket ");
        let mut rule = None;
        if let Some(op) = self.cur {
            let opcode = self.old.ops[op].opcode;
            m += &format!("`{opcode}`");
            if let Some(l) = self.old.loc(op) {
                m += &format!(" at {l}");
            }
            m += ": ";
            rule = Some(handling(opcode).1);
        }
        m += &msg.to_string();
        if let Some(rule) = rule {
            m += &format!(" (bucketing rule: {rule})");
        }
        PassError::Failed { pass: "specialize".into(), message: m }
    }

    fn ir(&self, e: tpuc_ir::IrError) -> PassError {
        self.fail(format!("internal: {e}"))
    }

    fn eval(&self, e: &SymExpr) -> Option<i64> {
        e.eval(&|s| self.sizes.get(s).copied())
    }

    /// The layout of a dim of size `e` whose valid part is a prefix, padded to `e` at the bucket.
    fn prefix_of(&self, e: SymExpr) -> DimLayout {
        prefix(self.eval(&e).unwrap_or(0), e)
    }

    fn spec_type(&self, ty: &TensorType) -> R<TensorType> {
        let mut dims = Vec::with_capacity(ty.rank());
        for d in &ty.dims {
            dims.push(match d {
                Dim::Static(n) => *n,
                Dim::Sym(e) => match self.eval(e) {
                    Some(v) if v >= 0 => v,
                    _ => return Err(self.fail(format!("dim `{e}` has no size in this bucket"))),
                },
            });
        }
        Ok(TensorType::from_static(ty.dtype, &dims))
    }

    fn b(&mut self) -> Builder<'_> {
        Builder { module: &mut self.new, block: self.block, loc: self.loc }
    }

    fn shape(&self, v: ValueId) -> Vec<i64> {
        self.new.values[v].ty.static_dims().unwrap_or_default()
    }

    /// The error for an op that needs a padded dim to be one prefix, met with a product of
    /// padded dims (e.g. `[2*s]` from a reshape).
    fn not_prefix(&self, what: &str, v: ValueId, d: usize) -> PassError {
        self.fail(format!("{what} {}, a product of padded dims", self.padded_dim_note(v, d)))
    }

    /// The layout of an old value's dim `d` (for messages: which symbol pads it).
    fn padded_dim_note(&self, v: ValueId, d: usize) -> String {
        match &self.old.values[v].ty.dims.get(d) {
            Some(Dim::Sym(e)) => format!("dim {d} (size {e}, padded)"),
            _ => format!("dim {d}"),
        }
    }

    // ------------------------------------------------------------------ blocks

    fn block_ops(&mut self, old_block: BlockId, mode: BlockMode) -> R<Vec<ValueId>> {
        let old = self.old;
        for op in old.ops_in(old_block) {
            let d = &old.ops[op];
            if d.opcode.is_terminator() {
                let outs: Vec<ValueId> = d.operands.to_vec();
                if mode != BlockMode::Inline {
                    let new_ops: Vec<ValueId> = outs.iter().map(|v| self.vmap[v]).collect();
                    self.cur = Some(op);
                    self.set_loc(op);
                    let t = self.new.create_op(d.opcode, &new_ops, Attrs::new(), Some(&[]), &[]).map_err(|e| self.ir(e))?;
                    self.new.append_op(self.block, t);
                }
                return Ok(outs);
            }
            self.op(op)?;
        }
        Ok(Vec::new())
    }

    fn set_loc(&mut self, op: OpId) {
        self.loc = self.old.op_locs.get(op).map(|l| {
            *self.locs.entry(l).or_insert_with(|| self.new.add_loc(self.old.locs[l].clone()))
        });
    }

    // ------------------------------------------------------------------ ops

    fn op(&mut self, op: OpId) -> R<()> {
        let old = self.old;
        let d = &old.ops[op];
        self.cur = Some(op);
        self.set_loc(op);
        let ins: Vec<ValueId> = d.operands.iter().map(|v| self.vmap[v]).collect();
        let lays: Vec<Layout> = d.operands.iter().map(|v| self.lay[v].clone()).collect();
        let all_exact = lays.iter().all(|l| l.iter().all(DimLayout::is_exact));
        let static_results = d.results.iter().all(|&r| old.values[r].ty.is_static());
        if all_exact && static_results && d.opcode != Opcode::Composite {
            let outs = self.emit(op, &ins, &[])?;
            for (&r, _) in d.results.iter().zip(&outs) {
                self.lay.insert(r, vec![DimLayout::Exact; old.values[r].ty.rank()]);
            }
            return Ok(());
        }
        use Opcode::*;
        let rank = |i: usize| old.values[d.operands[i]].ty.rank();
        let out_rank = old.values[d.results[0]].ty.rank();
        let a = &d.attrs;
        let ints = |name: &str| a.ints(name).unwrap_or(&[]).to_vec();
        let (new_ins, out_lays): (Vec<ValueId>, Vec<Layout>) = match d.opcode {
            Constant => (ins, vec![vec![DimLayout::Exact; out_rank]]),
            Iota => {
                let dim = a.int("dimension").unwrap_or(0) as usize;
                let l = self.old_dims(d.results[0])
                    .into_iter()
                    .enumerate()
                    .map(|(i, e)| match e {
                        None => DimLayout::Exact,
                        Some(e) if i == dim => self.prefix_of(e),
                        Some(e) => DimLayout::Uniform(e),
                    })
                    .collect();
                (ins, vec![l])
            }
            Abs | Neg | Exp | Expm1 | Log | Log1p | Sqrt | Rsqrt | Tanh | Logistic | Sin | Cos | Tan | Erf | Floor
            | Ceil | RoundEven | Sign | Not | IsFinite | Convert | Add | Sub | Mul | Div | Rem | Pow | Max | Min | And
            | Or | Xor | Atan2 | Compare | Select | Gelu | Erfc | ErfInv | Lgamma | Digamma | Acosh | Asinh
            | Atanh | BesselI1e | Polygamma | Zeta | NextAfter | Real | Imag | Complex => {
                // A prefix meeting a product of padded sizes position by position (a saved
                // `[b*s, d]` activation and a reshaped `[b, s, d]` gradient) is regathered into
                // the product's layout, as for contractions.
                let (mut ins, mut lays) = (ins.to_vec(), lays.to_vec());
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
                        l[i] = self.unify(&l[i], x, d.operands[k], i)?;
                    }
                }
                (ins, vec![l])
            }
            BroadcastInDim => {
                let bd = ints("broadcast_dimensions");
                let in_shape = self.shape(ins[0]);
                let dims = self.old_dims(d.results[0]);
                let out_shape = self.spec_type(&old.values[d.results[0]].ty)?.static_dims().unwrap_or_default();
                let mut l: Layout =
                    dims.iter().map(|e| e.clone().map_or(DimLayout::Exact, DimLayout::Uniform)).collect();
                for (i, &o) in bd.iter().enumerate() {
                    let o = o as usize;
                    if in_shape[i] == out_shape[o] {
                        l[o] = lays[0][i].clone();
                    }
                }
                (ins, vec![l])
            }
            Transpose => {
                let p = ints("permutation");
                (ins, vec![p.iter().map(|&i| lays[0][i as usize].clone()).collect()])
            }
            Reshape => match self.reshape_layout(d.operands[0], &lays[0], d.results[0]) {
                Ok(l) => (ins, vec![l]),
                Err(e) => {
                    // A prefix split into a product of sizes (a host-padded `[b*s, v]` viewed as
                    // `[b, s, v]`): regathered into the product's layout, the split is clean.
                    let Some((x, lay)) = self.regather_splits(ins[0], d.operands[0], &lays[0], d.results[0])? else {
                        return Err(e);
                    };
                    let l = self.reshape_layout(d.operands[0], &lay, d.results[0])?;
                    (vec![x], vec![l])
                }
            },
            Slice => {
                let (st, lim, str_) = (ints("start_indices"), ints("limit_indices"), ints("strides"));
                let shape = self.shape(ins[0]);
                // A symbolic dim is sliced whole, with the limit i64::MAX: the bucket's size now.
                let limits: Vec<i64> = lim.iter().zip(&shape).map(|(&l, &n)| l.min(n)).collect();
                if limits != lim {
                    let mut attrs = a.clone();
                    attrs.set("limit_indices", Attr::Ints(limits.clone()));
                    let outs = self.emit_with(op, &ins, attrs, &[])?;
                    let l = lays[0]
                        .iter()
                        .enumerate()
                        .map(|(i, x)| if st[i] == 0 && limits[i] == shape[i] && str_[i] == 1 { x.clone() } else { DimLayout::Exact })
                        .collect::<Vec<_>>();
                    if let Some(i) = (0..l.len()).find(|&i| !lays[0][i].is_exact() && l[i].is_exact()) {
                        return Err(self.fail(format!("cuts {}", self.padded_dim_note(d.operands[0], i))));
                    }
                    self.lay.insert(d.results[0], l);
                    let _ = outs;
                    return Ok(());
                }
                let mut l = Vec::with_capacity(lays[0].len());
                for (i, x) in lays[0].iter().enumerate() {
                    l.push(match x {
                        DimLayout::Exact => DimLayout::Exact,
                        _ if st[i] == 0 && lim[i] == shape[i] && str_[i] == 1 => x.clone(),
                        DimLayout::Uniform(_) => DimLayout::Exact,
                        DimLayout::Factors(f) if f.len() == 1 => {
                            let lo = self.old.symbols.range_of(&f[0].extent).0;
                            if lim[i] > lo {
                                return Err(self.fail(format!(
                                    "{} is cut at {} but can be as small as {lo}",
                                    self.padded_dim_note(d.operands[0], i),
                                    lim[i]
                                )));
                            }
                            DimLayout::Exact
                        }
                        DimLayout::Factors(_) => {
                            return Err(self.not_prefix("uses", d.operands[0], i))
                        }
                    });
                }
                (ins, vec![l])
            }
            Concatenate => {
                let dim = a.int("dimension").unwrap_or(0) as usize;
                let mut l = lays[0].clone();
                for (k, other) in lays.iter().enumerate().skip(1) {
                    for (i, x) in other.iter().enumerate() {
                        if i != dim {
                            l[i] = self.unify(&l[i], x, d.operands[k], i)?;
                        }
                    }
                }
                let last = lays.len() - 1;
                if lays[..last].iter().all(|x| x[dim].is_exact()) {
                    // Only the last operand is padded: the valid part stays a prefix.
                    l[dim] = match (&lays[last][dim], self.old_dims(d.results[0])[dim].clone()) {
                        (DimLayout::Exact, _) | (_, None) => DimLayout::Exact,
                        (x, Some(e)) => match x.prefix_extent() {
                            Some(_) => self.prefix_of(e),
                            None => return Err(self.not_prefix("joins", d.operands[last], dim)),
                        },
                    };
                    (ins, vec![l])
                } else {
                    // A padded operand before another: join, then gather every valid element
                    // to its place (KV caches: `cat([past, new])`).
                    let x = self.concat_gather(op, &ins, &lays, dim)?;
                    let e = self.old_dims(d.results[0])[dim].clone().unwrap_or_default();
                    l[dim] = prefix(self.shape(x)[dim], e);
                    self.vmap.insert(d.results[0], x);
                    self.lay.insert(d.results[0], l);
                    return Ok(());
                }
            }
            Pad => {
                let (lo, hi, int) = (ints("edge_padding_low"), ints("edge_padding_high"), ints("interior_padding"));
                let dims = self.old_dims(d.results[0]);
                let mut mask_dims = Vec::new();
                let mut l = lays[0].clone();
                for (i, x) in lays[0].iter().enumerate() {
                    if x.is_exact() {
                        continue;
                    }
                    if x.prefix_extent().is_none() || int[i] != 0 || hi[i] < 0 {
                        return Err(self.fail(format!(
                            "pads {} with interior or negative high padding, or it is a product of padded dims",
                            self.padded_dim_note(d.operands[0], i)
                        )));
                    }
                    mask_dims.push(i);
                    let _ = lo;
                    let e = dims[i].clone().unwrap_or_default();
                    l[i] = self.prefix_of(e);
                }
                let x = self.mask(ins[0], &lays[0], &mask_dims, Fill::Value(ins[1]))?;
                (vec![x, ins[1]], vec![l])
            }
            Reverse => {
                let dims = ints("dimensions");
                let mut l = lays[0].clone();
                let mut keep = Vec::new();
                let mut gathers = Vec::new();
                for &dd in &dims {
                    let i = dd as usize;
                    match &lays[0][i] {
                        DimLayout::Exact => keep.push(dd),
                        DimLayout::Uniform(_) => {}
                        DimLayout::Factors(f) if f.len() == 1 => gathers.push((i, f[0].extent.clone())),
                        DimLayout::Factors(_) => {
                            return Err(self.not_prefix("reverses", d.operands[0], i))
                        }
                    }
                    if let DimLayout::Uniform(_) = &lays[0][i] {
                        l[i] = lays[0][i].clone();
                    }
                }
                let mut x = ins[0];
                if !keep.is_empty() {
                    x = self
                        .b()
                        .build1(Reverse, &[x], Attrs::new().with("dimensions", Attr::Ints(keep)), None)
                        .map_err(|e| self.ir(e))?;
                }
                for (i, e) in gathers {
                    x = self.reverse_prefix(x, i, &e)?;
                }
                self.vmap.insert(d.results[0], x);
                self.lay.insert(d.results[0], l);
                return Ok(());
            }
            DotGeneral => {
                let (lb, rb, lc, rc) = (
                    ints("lhs_batching_dimensions"),
                    ints("rhs_batching_dimensions"),
                    ints("lhs_contracting_dimensions"),
                    ints("rhs_contracting_dimensions"),
                );
                // A contracted dim pairs position i of one side with position i of the other:
                // both must lay it out alike. A prefix meeting a product of padded sizes (a
                // saved `[b*s, d]` activation, padded at its end by the host, against a
                // `[b, s, d]` gradient reshaped in the program) is regathered into the product's
                // layout; other mismatches are errors, never a silent pairing of different rows.
                let (mut ins, mut lays) = (ins.to_vec(), lays.to_vec());
                let mut regathered = [false, false];
                for (&x, &y) in lc.iter().zip(&rc) {
                    if let (_, Some(side)) = self.pair_dims(&mut ins, &mut lays, [x as usize, y as usize], d.operands[1])? {
                        regathered[side] = true;
                    }
                }
                // Both sides of a padded contraction must hold 0 there (0 * NaN is NaN); a side
                // known to hold 0 already is left alone.
                let (mut lm, mut rm) = (Vec::new(), Vec::new());
                for (&x, &y) in lc.iter().zip(&rc) {
                    let (x, y) = (x as usize, y as usize);
                    if regathered[0] || self.clean_of(d.operands[0], x) != Some(0.0) {
                        lm.push(x);
                    }
                    if regathered[1] || self.clean_of(d.operands[1], y) != Some(0.0) {
                        rm.push(y);
                    }
                }
                // Zeroed as early as their producers allow, else at the matmul.
                let early = |sp: &mut Self, v: ValueId, lay: &Layout, dims: Vec<usize>| -> R<Vec<usize>> {
                    let mut left = Vec::new();
                    for x in dims {
                        if lay[x].is_exact() || !sp.zero_early(v, x, &lay[x])? {
                            left.push(x);
                        }
                    }
                    Ok(left)
                };
                let (lm, rm) = (early(self, ins[0], &lays[0], lm)?, early(self, ins[1], &lays[1], rm)?);
                let lhs = self.mask(ins[0], &lays[0], &lm, Fill::Scalar(Scalar::Float(0.0)))?;
                let rhs = self.mask(ins[1], &lays[1], &rm, Fill::Scalar(Scalar::Float(0.0)))?;
                let mut l = Vec::new();
                for (&x, &y) in lb.iter().zip(&rb) {
                    l.push(self.unify(&lays[0][x as usize], &lays[1][y as usize], d.operands[1], y as usize)?);
                }
                for (side, (b, c)) in [(&lb, &lc), (&rb, &rc)].into_iter().enumerate() {
                    for (i, x) in lays[side].iter().enumerate() {
                        if !b.contains(&(i as i64)) && !c.contains(&(i as i64)) {
                            l.push(x.clone());
                        }
                    }
                }
                (vec![lhs, rhs], vec![l])
            }
            Convolution => {
                if lays[1].iter().any(|x| !x.is_exact()) {
                    return Err(self.fail("the convolution kernel has a padded dim"));
                }
                let nd = rank(0);
                if a.int("batch_group_count").unwrap_or(1) != 1 && !lays[0][0].is_exact() {
                    return Err(self.fail("a grouped-batch convolution over a padded batch"));
                }
                let dims = self.old_dims(d.results[0]);
                let mut l = vec![lays[0][0].clone(), DimLayout::Exact];
                for i in 2..nd {
                    l.push(match &lays[0][i] {
                        DimLayout::Exact => DimLayout::Exact,
                        x if x.prefix_extent().is_some() => match &dims[i] {
                            Some(e) => self.prefix_of(e.clone()),
                            None => DimLayout::Exact,
                        },
                        _ => return Err(self.not_prefix("uses", d.operands[0], i)),
                    });
                }
                let x = self.mask(ins[0], &lays[0], &(1..nd).collect::<Vec<_>>(), Fill::Scalar(Scalar::Float(0.0)))?;
                (vec![x, ins[1]], vec![l])
            }
            Reduce => {
                let dims = as_usize(&ints("dimensions"));
                let kind: ReduceKind = a.get_enum("kind").ok_or_else(|| self.fail("no reduction kind"))?;
                let dt = old.values[d.operands[0]].ty.dtype;
                let fill = kind.identity(dt);
                let f = fill.as_f64();
                let need: Vec<usize> = dims.iter().copied().filter(|&i| self.clean_of(d.operands[0], i) != Some(f)).collect();
                let x = self.mask(ins[0], &lays[0], &need, Fill::Scalar(fill))?;
                let l = (0..rank(0)).filter(|i| !dims.contains(i)).map(|i| lays[0][i].clone()).collect();
                (vec![x], vec![l])
            }
            ArgReduce => {
                let dim = a.int("dimension").unwrap_or(0) as usize;
                let kind: ArgReduceKind = a.get_enum("kind").ok_or_else(|| self.fail("no kind"))?;
                let dt = old.values[d.operands[0]].ty.dtype;
                let fill = if kind == ArgReduceKind::Argmax { dt.lowest() } else { dt.highest() };
                let x = self.mask(ins[0], &lays[0], &[dim], Fill::Scalar(fill))?;
                let l = (0..rank(0)).filter(|&i| i != dim).map(|i| lays[0][i].clone()).collect();
                (vec![x], vec![l])
            }
            ReduceWindow => {
                let kind: WindowKind = a.get_enum("kind").ok_or_else(|| self.fail("no kind"))?;
                let dt = old.values[d.operands[0]].ty.dtype;
                let fill = ReduceKind::from(kind).identity(dt);
                let (win, st, bd, wd, pad) = (
                    ints("window_dimensions"),
                    ints("window_strides"),
                    ints("base_dilations"),
                    ints("window_dilations"),
                    ints("padding"),
                );
                let dims = self.old_dims(d.results[0]);
                let mut l = Vec::new();
                let mut mask_dims = Vec::new();
                for (i, x) in lays[0].iter().enumerate() {
                    let trivial = win[i] == 1
                        && st.get(i).copied().unwrap_or(1) == 1
                        && bd.get(i).copied().unwrap_or(1) == 1
                        && wd.get(i).copied().unwrap_or(1) == 1
                        && pad.get(2 * i).copied().unwrap_or(0) == 0
                        && pad.get(2 * i + 1).copied().unwrap_or(0) == 0;
                    if x.is_exact() || trivial {
                        l.push(x.clone());
                        continue;
                    }
                    if x.prefix_extent().is_none() {
                        return Err(self.not_prefix("uses", d.operands[0], i));
                    }
                    mask_dims.push(i);
                    l.push(match &dims[i] {
                        Some(e) => self.prefix_of(e.clone()),
                        None => DimLayout::Exact,
                    });
                }
                let x = self.mask(ins[0], &lays[0], &mask_dims, Fill::Scalar(fill))?;
                (vec![x], vec![l])
            }
            Scan => {
                let dim = a.int("dimension").unwrap_or(0) as usize;
                let mut l = lays[0].clone();
                l[dim] = match &lays[0][dim] {
                    DimLayout::Exact => DimLayout::Exact,
                    DimLayout::Uniform(e) => {
                        prefix(self.shape(ins[0])[dim], e.clone())
                    }
                    DimLayout::Factors(f) if f.len() == 1 => lays[0][dim].clone(),
                    DimLayout::Factors(_) => {
                        return Err(self.not_prefix("scans", d.operands[0], dim))
                    }
                };
                (ins, vec![l])
            }
            Sort => {
                let dim = a.int("dimension").unwrap_or(0) as usize;
                let mut l = lays[0].clone();
                if lays[0][dim].is_exact() {
                    (ins, vec![l.clone(), l])
                } else {
                    let e = match lays[0][dim].prefix_extent() {
                        Some(Some(e)) => e.clone(),
                        _ => return Err(self.not_prefix("sorts along", d.operands[0], dim)),
                    };
                    // The padding sorts after every valid element: the sort is stable, and NaN
                    // is the largest value (torch's order), so ascending pads with NaN (or the
                    // largest integer) and descending with the lowest value.
                    let dt = old.values[d.operands[0]].ty.dtype;
                    let descending = a.bool("descending").unwrap_or(false);
                    let fill = match (descending, dt.is_float()) {
                        (false, true) => Scalar::Float(f64::NAN),
                        (false, false) => dt.highest(),
                        (true, _) => dt.lowest(),
                    };
                    let x = self.mask(ins[0], &lays[0], &[dim], Fill::Scalar(fill))?;
                    l[dim] = prefix(self.shape(ins[0])[dim], e);
                    (vec![x], vec![l.clone(), l])
                }
            }
            Softmax | LogSoftmax => {
                let dim = a.int("dimension").unwrap_or(0) as usize;
                let dt = old.values[d.operands[0]].ty.dtype;
                let padded = !lays[0][dim].is_exact();
                let known = padded
                    && (self.clean_of(d.operands[0], dim) == Some(f64::NEG_INFINITY)
                        || self.causal_scores(d.operands[0], dim, &lays[0])?);
                let x = if known { ins[0] } else { self.mask(ins[0], &lays[0], &[dim], Fill::Scalar(dt.lowest()))? };
                let mut l = lays[0].clone();
                if let DimLayout::Uniform(e) = &l[dim] {
                    l[dim] = prefix(self.shape(ins[0])[dim], e.clone());
                }
                self.emit(op, &[x], &[])?;
                self.lay.insert(d.results[0], l);
                if padded {
                    // exp(-inf - max) = 0 in the padding of every valid row.
                    let z = if d.opcode == Softmax { 0.0 } else { f64::NEG_INFINITY };
                    self.set_clean(d.results[0], dim, z);
                }
                return Ok(());
            }
            LayerNorm => {
                let nr = a.int("normalized_rank").unwrap_or(1) as usize;
                let r = rank(0);
                if let Some(i) = (r - nr..r).find(|&i| !lays[0][i].is_exact()) {
                    return Err(self.fail(format!("normalizes over {}", self.padded_dim_note(d.operands[0], i))));
                }
                (ins, vec![lays[0].clone(), lays[0].clone(), lays[0].clone()])
            }
            Attention => {
                let r = rank(0);
                let (q, k, v) = (&lays[0], &lays[1], &lays[2]);
                if !q[r - 1].is_exact() || !k[r - 1].is_exact() || !v[r - 1].is_exact() {
                    return Err(self.fail("the head dim is padded"));
                }
                let causal = a.bool("is_causal").unwrap_or(false);
                let keys_ok = k[r - 2].is_exact() || causal && q[r - 2] == k[r - 2] && ins.len() == 3;
                if !keys_ok {
                    return Err(self.fail(format!(
                        "attends over padded keys ({}) without is_causal over equally padded queries",
                        self.padded_dim_note(d.operands[1], r - 2)
                    )));
                }
                if ins.len() == 4 && lays[3].iter().any(|x| !x.is_exact()) {
                    return Err(self.fail("the attention mask has a padded dim"));
                }
                let mut l = Vec::new();
                for i in 0..r - 2 {
                    let x = self.unify(&q[i], &k[i], d.operands[1], i)?;
                    l.push(self.unify(&x, &v[i], d.operands[2], i)?);
                }
                l.push(q[r - 2].clone());
                l.push(DimLayout::Exact);
                // Causal attention never weighs a padded key for a valid query, but a weight of
                // 0 times a NaN in a padded key or value is NaN: padded keys and values are 0.
                let (k, v) = (lays[1].clone(), lays[2].clone());
                let km = self.mask(ins[1], &k, &[r - 2], Fill::Scalar(Scalar::Float(0.0)))?;
                let vm = self.mask(ins[2], &v, &[r - 2], Fill::Scalar(Scalar::Float(0.0)))?;
                let mut new_ins = ins.clone();
                new_ins[1] = km;
                new_ins[2] = vm;
                (new_ins, vec![l])
            }
            Gather => {
                let (mut ins, mut lays) = (ins, lays);
                self.pair_batch_dims(op, &mut ins, &mut lays)?;
                let l = self.gather_layout(op, &lays)?;
                (ins, vec![l])
            }
            Scatter => {
                let idx = self.scatter_indices(op, &ins, &lays)?;
                (vec![ins[0], idx, ins[2]], vec![lays[0].clone()])
            }
            SelectAndScatterAdd => return Err(self.fail("max-pool gradient over a padded dim")),
            Cholesky | TriangularSolve | Qr | HouseholderProduct | Eigh => {
                for (k, l) in lays.iter().enumerate() {
                    let r = l.len();
                    if let Some(i) = (r.saturating_sub(2)..r).find(|&i| !l[i].is_exact()) {
                        return Err(self.fail(format!("factors or solves over {}", self.padded_dim_note(d.operands[k], i))));
                    }
                }
                // Batch dims keep their layouts; each result drops to its own rank.
                let batch = &lays[lays.len() - 1];
                let outs = d
                    .results
                    .iter()
                    .map(|&v| {
                        let r = old.values[v].ty.rank();
                        let mut l: Vec<DimLayout> = batch[..batch.len().min(r)].to_vec();
                        l.resize(r, DimLayout::Exact);
                        for x in l.iter_mut().skip(batch.len().saturating_sub(2)) {
                            *x = DimLayout::Exact;
                        }
                        l
                    })
                    .collect();
                (ins, outs)
            }
            AllReduce | CollectiveBroadcast => (ins, vec![lays[0].clone()]),
            AllGather | ReduceScatter | AllToAll => {
                let dim = a.int("dimension").unwrap_or(0) as usize;
                if !lays[0][dim].is_exact() {
                    return Err(self.fail(format!("moves blocks along {}", self.padded_dim_note(d.operands[0], dim))));
                }
                (ins, vec![lays[0].clone()])
            }
            Fft => {
                let k = a.ints("fft_length").map_or(1, |l| l.len());
                let r = rank(0);
                if let Some(i) = (r.saturating_sub(k)..r).find(|&i| !lays[0][i].is_exact()) {
                    return Err(self.fail(format!("transforms {}", self.padded_dim_note(d.operands[0], i))));
                }
                (ins, vec![lays[0].clone()])
            }
            Composite => return self.composite(op, &ins),
            Return | Yield => unreachable!("terminators are handled by the block walk"),
        };
        let outs = self.emit(op, &new_ins, &[])?;
        for ((&r, _), l) in d.results.iter().zip(&outs).zip(out_lays) {
            self.lay.insert(r, l);
        }
        self.propagate_clean(op);
        Ok(())
    }

    /// The value the padding along `dim` of old value `v` holds where the other padded dims
    /// are valid: from a splat constant, or tracked.
    fn clean_of(&self, v: ValueId, dim: usize) -> Option<f64> {
        if let Some(&n) = self.vmap.get(&v) {
            if let Some(x) = crate::util::splat_f64(&self.new, n) {
                return Some(x);
            }
        }
        self.clean.get(&v).and_then(|c| c.get(dim).copied().flatten())
    }

    fn set_clean(&mut self, v: ValueId, dim: usize, x: f64) {
        let rank = self.old.values[v].ty.rank();
        let c = self.clean.entry(v).or_insert_with(|| vec![None; rank]);
        if dim < c.len() {
            c[dim] = Some(x);
        }
    }

    /// Known padding values through ops that keep positions: elementwise ops on known values,
    /// transposes, and reshapes and broadcasts that keep a padded dim whole.
    fn propagate_clean(&mut self, op: OpId) {
        let d = &self.old.ops[op];
        let Some(&r) = d.results.first() else { return };
        let lay = self.lay[&r].clone();
        let mut out: Vec<Option<f64>> = vec![None; lay.len()];
        match d.opcode {
            Opcode::Transpose => {
                let p = d.attrs.ints("permutation").unwrap_or(&[]).to_vec();
                for (o, &i) in p.iter().enumerate() {
                    out[o] = self.clean_of(d.operands[0], i as usize);
                }
            }
            Opcode::BroadcastInDim => {
                let bd = d.attrs.ints("broadcast_dimensions").unwrap_or(&[]).to_vec();
                let src = &self.lay[&d.operands[0]];
                for (k, &o) in bd.iter().enumerate() {
                    if !lay[o as usize].is_exact() && src[k] == lay[o as usize] {
                        out[o as usize] = self.clean_of(d.operands[0], k);
                    }
                }
            }
            Opcode::Reshape => {
                // A padded dim that keeps its place counted from the end (the same dims after
                // it) is the same dim.
                let (inn, outs) = (self.old_dims(d.operands[0]), self.old_dims(r));
                let src = &self.lay[&d.operands[0]];
                for (o, l) in lay.iter().enumerate() {
                    let tail = outs.len() - o;
                    if l.is_exact() || inn.len() < tail || inn[inn.len() - tail..] != outs[o..] {
                        continue;
                    }
                    let i = inn.len() - tail;
                    if src[i] == *l {
                        out[o] = self.clean_of(d.operands[0], i);
                    }
                }
            }
            Opcode::Select => {
                for (dim, slot) in out.iter_mut().enumerate() {
                    let (a, b) = (self.clean_of(d.operands[1], dim), self.clean_of(d.operands[2], dim));
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
                    let vals: Option<Vec<f64>> = d.operands.iter().map(|&v| self.clean_of(v, dim)).collect();
                    *slot = vals.and_then(|v| elementwise_f64(opc, &d.attrs, &v));
                }
            }
            _ => return,
        }
        if out.iter().any(Option::is_some) {
            self.clean.insert(r, out);
        }
    }

    /// Builds `op` with new operands and regions, its attributes and its specialized result
    /// types, and maps its results.
    fn emit(&mut self, op: OpId, ins: &[ValueId], regions: &[RegionId]) -> R<Vec<ValueId>> {
        let attrs = self.old.ops[op].attrs.clone();
        self.emit_with(op, ins, attrs, regions)
    }

    /// [`Self::emit`] with other attributes.
    fn emit_with(&mut self, op: OpId, ins: &[ValueId], attrs: Attrs, regions: &[RegionId]) -> R<Vec<ValueId>> {
        let d = &self.old.ops[op];
        let types = d.results.iter().map(|&r| self.spec_type(&self.old.values[r].ty)).collect::<R<Vec<_>>>()?;
        let n = self.new.create_op(d.opcode, ins, attrs, Some(&types), regions).map_err(|e| self.ir(e))?;
        self.new.append_op(self.block, n);
        self.new.set_loc(n, self.loc);
        let outs = self.new.ops[n].results.to_vec();
        for (&r, &v) in d.results.iter().zip(&outs) {
            self.vmap.insert(r, v);
        }
        Ok(outs)
    }

    /// A composite: inlined when an operand is padded, else copied with its region.
    fn composite(&mut self, op: OpId, ins: &[ValueId]) -> R<()> {
        let old = self.old;
        let d = &old.ops[op];
        let body = old.regions[d.regions[0]].blocks[0];
        let padded = d.operands.iter().any(|v| self.lay[v].iter().any(|x| !x.is_exact()));
        let args = old.blocks[body].args.clone();
        if padded {
            for (i, &a) in args.iter().enumerate() {
                self.vmap.insert(a, ins[i]);
                let l = self.lay[&d.operands[i]].clone();
                self.lay.insert(a, l);
            }
            let outs = self.block_ops(body, BlockMode::Inline)?;
            for (&r, o) in d.results.iter().zip(outs) {
                let (v, l) = (self.vmap[&o], self.lay[&o].clone());
                self.vmap.insert(r, v);
                self.lay.insert(r, l);
            }
            return Ok(());
        }
        let types = args.iter().map(|&a| self.spec_type(&old.values[a].ty)).collect::<R<Vec<_>>>()?;
        let (region, block) = self.new.new_region(&types);
        let new_args = self.new.blocks[block].args.clone();
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
        for (&r, _) in d.results.iter().zip(&outs) {
            self.lay.insert(r, vec![DimLayout::Exact; old.values[r].ty.rank()]);
        }
        Ok(())
    }

    /// Per dim of an old value: its expression when symbolic.
    fn old_dims(&self, v: ValueId) -> Vec<Option<SymExpr>> {
        self.old.values[v]
            .ty
            .dims
            .iter()
            .map(|d| match d {
                Dim::Static(_) => None,
                Dim::Sym(e) => Some(e.clone()),
            })
            .collect()
    }

    /// Two operands' layouts of one dim of an elementwise op.
    fn unify(&self, a: &DimLayout, b: &DimLayout, v: ValueId, d: usize) -> R<DimLayout> {
        Ok(match (a, b) {
            (DimLayout::Uniform(_), x) | (x, DimLayout::Uniform(_)) => x.clone(),
            (x, y) if x == y => x.clone(),
            (DimLayout::Exact, _) | (_, DimLayout::Exact) => {
                return Err(self.fail(format!("{} is padded in one operand and not in another", self.padded_dim_note(v, d))))
            }
            _ => {
                return Err(self.fail(format!(
                    "{} is padded differently in two operands (e.g. a reshaped product of sizes meets an iota)",
                    self.padded_dim_note(v, d)
                )))
            }
        })
    }

    /// Regroups the input's factors into the output dims.
    fn reshape_layout(&self, x: ValueId, lay: &Layout, out: ValueId) -> R<Layout> {
        let in_shape = self.spec_type(&self.old.values[x].ty)?.static_dims().unwrap_or_default();
        let out_ty = self.spec_type(&self.old.values[out].ty)?;
        let out_shape = out_ty.static_dims().unwrap_or_default();
        let mut pieces: Vec<Factor> = Vec::new();
        for (i, l) in lay.iter().enumerate() {
            pieces.extend(l.factors(in_shape[i]).into_iter().filter(|f| f.padded != 1));
        }
        pieces.reverse(); // pop from the outermost
        let mut res = Vec::with_capacity(out_shape.len());
        for &q in &out_shape {
            let mut got: Vec<Factor> = Vec::new();
            let mut prod: i64 = 1;
            while prod < q {
                let Some(f) = pieces.pop() else { break };
                if prod * f.padded <= q {
                    prod *= f.padded;
                    got.push(f);
                } else if f.extent.as_const() == Some(f.padded) && f.padded % (q / prod) == 0 && q % prod == 0 {
                    let take = q / prod;
                    got.push(Factor { padded: take, extent: SymExpr::constant(take) });
                    let rest = f.padded / take;
                    pieces.push(Factor { padded: rest, extent: SymExpr::constant(rest) });
                    prod = q;
                } else {
                    return Err(self.fail(format!(
                        "reshape {} -> {} splits a padded dim of size {} (padded to {})",
                        self.old.values[x].ty, self.old.values[out].ty, f.extent, f.padded
                    )));
                }
            }
            if prod != q {
                return Err(self.fail(format!("reshape {} -> {}: internal factor mismatch", self.old.values[x].ty, self.old.values[out].ty)));
            }
            res.push(from_factors(got));
        }
        Ok(res)
    }

    /// For a reshape of old value `x` (new `xv`, laid out `lay`) into `out`: every input dim
    /// that is a prefix and that the reshape splits into several output dims, regathered into
    /// the layout of those dims (their padded sizes, their real sizes from `out`'s type).
    /// None when no dim is such a split or the sizes do not agree.
    fn regather_splits(&mut self, xv: ValueId, x: ValueId, lay: &Layout, out: ValueId) -> R<Option<(ValueId, Layout)>> {
        let in_shape = self.spec_type(&self.old.values[x].ty)?.static_dims().unwrap_or_default();
        let out_shape = self.spec_type(&self.old.values[out].ty)?.static_dims().unwrap_or_default();
        let out_dims = self.old_dims(out);
        let (mut v, mut lay, mut changed) = (xv, lay.clone(), false);
        for i in 0..in_shape.len() {
            let Some(Some(extent)) = lay[i].prefix_extent() else { continue };
            if matches!(lay[i], DimLayout::Uniform(_)) {
                continue;
            }
            let extent = extent.clone();
            // The output dims j..k that hold input dim i alone.
            let lead: i64 = in_shape[..i].iter().product();
            let (mut j, mut p) = (0, 1i64);
            while j < out_shape.len() && p < lead {
                p *= out_shape[j];
                j += 1;
            }
            if p != lead {
                continue;
            }
            let (mut k, mut q) = (j, 1i64);
            while k < out_shape.len() && q < in_shape[i] {
                q *= out_shape[k];
                k += 1;
            }
            if q != in_shape[i] {
                continue;
            }
            let target: Vec<Factor> = (j..k)
                .filter(|&m| out_shape[m] != 1)
                .map(|m| Factor { padded: out_shape[m], extent: out_dims[m].clone().unwrap_or_else(|| SymExpr::constant(out_shape[m])) })
                .collect();
            let total = target.iter().fold(SymExpr::constant(1), |acc, f| acc.mul(&f.extent));
            if target.len() < 2 || total != extent {
                continue;
            }
            let want = DimLayout::Factors(target);
            v = self.regather(v, i, &lay[i], &want)?;
            lay[i] = want;
            changed = true;
        }
        Ok(changed.then_some((v, lay)))
    }

    fn gather_layout(&self, op: OpId, lays: &[Layout]) -> R<Layout> {
        let d = &self.old.ops[op];
        let a = &d.attrs;
        let ints = |n: &str| a.ints(n).unwrap_or(&[]).to_vec();
        let (offset, collapsed, obatch, start_map, sizes) =
            (ints("offset_dims"), ints("collapsed_slice_dims"), ints("operand_batching_dims"), ints("start_index_map"), ints("slice_sizes"));
        let ivd = a.int("index_vector_dim").unwrap_or(0) as usize;
        let op_shape = self.spec_type(&self.old.values[d.operands[0]].ty)?.static_dims().unwrap_or_default();
        let out_rank = self.old.values[d.results[0]].ty.rank();
        if lays[1].get(ivd).is_some_and(|x| !x.is_exact()) {
            return Err(self.fail("the index vector dim of a gather is padded"));
        }
        // Offset dims: operand dims not collapsed, in order.
        let kept: Vec<usize> = (0..op_shape.len()).filter(|i| !collapsed.contains(&(*i as i64)) && !obatch.contains(&(*i as i64))).collect();
        let mut offset_lays = Vec::new();
        for &i in &kept {
            let x = &lays[0][i];
            if x.is_exact() {
                offset_lays.push(DimLayout::Exact);
            } else if sizes[i] == op_shape[i] && !start_map.contains(&(i as i64)) {
                offset_lays.push(x.clone());
            } else if sizes[i] == 1 || start_map.contains(&(i as i64)) && sizes[i] <= 1 {
                offset_lays.push(DimLayout::Exact);
            } else {
                return Err(self.fail(format!("gathers a window of {}", self.padded_dim_note(d.operands[0], i))));
            }
        }
        let batch_lays: Vec<DimLayout> = lays[1].iter().enumerate().filter(|(i, _)| *i != ivd).map(|(_, x)| x.clone()).collect();
        let (mut bi, mut oi) = (batch_lays.into_iter(), offset_lays.into_iter());
        Ok((0..out_rank)
            .map(|i| if offset.contains(&(i as i64)) { oi.next() } else { bi.next() }.unwrap_or(DimLayout::Exact))
            .collect())
    }

    /// Operands 0 and 1 pair positions along dim `dims[0]` of the first and `dims[1]` of the
    /// second (a contraction, a gather's batch dims), so they must lay it out alike: a prefix
    /// meeting a product of padded sizes of the same extent is regathered into the product's
    /// layout (`ins` and `lays` updated); any other mismatch is an error naming old value `v`'s
    /// dim. Returns the agreed layout and the side regathered, if one was.
    fn pair_dims(&mut self, ins: &mut [ValueId], lays: &mut [Layout], dims: [usize; 2], v: ValueId) -> R<(DimLayout, Option<usize>)> {
        let (a, b) = (lays[0][dims[0]].clone(), lays[1][dims[1]].clone());
        let mismatch = match self.unify(&a, &b, v, dims[1]) {
            Ok(agreed) => return Ok((agreed, None)),
            Err(e) => e,
        };
        let (side, want) = match (a.prefix_extent(), b.prefix_extent()) {
            (Some(Some(_)), None) => (0, b),
            (None, Some(Some(_))) => (1, a),
            _ => return Err(mismatch),
        };
        let dim = dims[side];
        ins[side] = self.regather(ins[side], dim, &lays[side][dim], &want)?;
        lays[side][dim] = want.clone();
        Ok((want, Some(side)))
    }

    /// A batched gather pairs operand and index positions along each batch dim (see
    /// [`Sp::pair_dims`]); both layouts are the agreed one after.
    fn pair_batch_dims(&mut self, op: OpId, ins: &mut [ValueId], lays: &mut [Layout]) -> R<()> {
        let d = &self.old.ops[op];
        let ints = |n: &str| d.attrs.ints(n).unwrap_or(&[]).to_vec();
        let index = d.operands[1];
        for (o, i) in ints("operand_batching_dims").into_iter().zip(ints("start_indices_batching_dims")) {
            let (o, i) = (o as usize, i as usize);
            let (agreed, _) = self.pair_dims(ins, lays, [o, i], index)?;
            lays[0][o] = agreed.clone();
            lays[1][i] = agreed;
        }
        Ok(())
    }

    /// A scatter's indices with every padded position pointing out of bounds (scatter skips
    /// such updates), after checking that the updates' padding is all in those positions or
    /// lands in the operand's padding.
    fn scatter_indices(&mut self, op: OpId, ins: &[ValueId], lays: &[Layout]) -> R<ValueId> {
        let d = &self.old.ops[op];
        let a = &d.attrs;
        let ints = |n: &str| a.ints(n).unwrap_or(&[]).to_vec();
        let (window, inserted, obatch) = (ints("update_window_dims"), ints("inserted_window_dims"), ints("input_batching_dims"));
        let ivd = a.int("index_vector_dim").unwrap_or(0) as usize;
        if !obatch.is_empty() && lays.iter().any(|l| l.iter().any(|x| !x.is_exact())) {
            return Err(self.fail("batched scatter with padded dims"));
        }
        if lays[1].get(ivd).is_some_and(|x| !x.is_exact()) {
            return Err(self.fail("the index vector dim of a scatter is padded"));
        }
        // Updates: scatter dims follow the indices' dims; window dims follow the operand's
        // dims that are not inserted.
        let batch: Vec<&DimLayout> = lays[1].iter().enumerate().filter(|(i, _)| *i != ivd).map(|(_, x)| x).collect();
        let op_dims: Vec<usize> = (0..lays[0].len()).filter(|i| !inserted.contains(&(*i as i64))).collect();
        let upd_shape = self.shape(ins[2]);
        let op_shape = self.shape(ins[0]);
        let (mut bi, mut wi) = (0, 0);
        for (k, x) in lays[2].iter().enumerate() {
            if window.contains(&(k as i64)) {
                let od = op_dims.get(wi).copied().unwrap_or(0);
                wi += 1;
                let full = upd_shape[k] == op_shape[od] && *x == lays[0][od];
                if !x.is_exact() && !full {
                    return Err(self.fail(format!("the scatter's update window {}", self.padded_dim_note(d.operands[2], k))));
                }
            } else {
                let want = batch.get(bi).copied().cloned().unwrap_or(DimLayout::Exact);
                bi += 1;
                if !x.is_exact() && self.unify(x, &want, d.operands[2], k).is_err() {
                    return Err(self.fail(format!("the scatter's updates are padded unlike its indices ({})", self.padded_dim_note(d.operands[2], k))));
                }
            }
        }
        let dims: Vec<usize> = (0..lays[1].len()).filter(|&i| i != ivd && !lays[1][i].is_exact()).collect();
        let dt = self.new.values[ins[1]].ty.dtype;
        self.mask(ins[1], &lays[1], &dims, Fill::Scalar(dt.highest()))
    }

    /// Whether softmax input `x` (old) over padded `dim` is `scores + bias` with a bias that is
    /// -inf wherever the key index exceeds the query index (`dim - 1`, padded alike): a valid
    /// query then never weighs a padded key, and once the scores' key side holds 0 in its
    /// padding (a cheap mask at the matmul that made them, inserted here), the padding of `x` is
    /// -inf in every valid row without masking the [.., L, S] scores themselves.
    fn causal_scores(&mut self, x: ValueId, dim: usize, lay: &Layout) -> R<bool> {
        if dim == 0 || lay[dim - 1] != lay[dim] || lay[dim].prefix_extent().is_none() {
            return Ok(false);
        }
        let Some(op) = self.old.defining_op(x) else { return Ok(false) };
        let d = &self.old.ops[op];
        if d.opcode != Opcode::Add {
            return Ok(false);
        }
        for (s, bias) in [(d.operands[0], d.operands[1]), (d.operands[1], d.operands[0])] {
            if !self.causal_bias(self.vmap[&bias], dim) {
                continue;
            }
            if self.zero_key_side(self.vmap[&s], dim, &lay[dim])? {
                self.set_clean(x, dim, f64::NEG_INFINITY);
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Whether new value `bias` (a broadcast of a computable mask) is -inf at every (query i,
    /// key j > i), the query being dim `dim - 1` and the key dim `dim`.
    fn causal_bias(&self, bias: ValueId, dim: usize) -> bool {
        let (mut v, mut q, mut k) = (bias, Some(dim - 1), Some(dim));
        while let Some(op) = self.new.defining_op(v) {
            let od = &self.new.ops[op];
            if od.opcode != Opcode::BroadcastInDim {
                break;
            }
            let bd = od.attrs.ints("broadcast_dimensions").unwrap_or(&[]);
            q = q.and_then(|q| bd.iter().position(|&x| x == q as i64));
            k = k.and_then(|k| bd.iter().position(|&x| x == k as i64));
            v = od.operands[0];
        }
        let (Some(q), Some(k)) = (q, k) else { return false };
        let Some((dims, vals)) = crate::eval::eval_f64s(&self.new, v, 1 << 22) else { return false };
        let stride = |d: usize| dims[d + 1..].iter().product::<i64>() as usize;
        let (sq, sk) = (stride(q), stride(k));
        vals.iter().enumerate().all(|(idx, &x)| {
            let (i, j) = ((idx / sq) % dims[q] as usize, (idx / sk) % dims[k] as usize);
            j <= i || x == f64::NEG_INFINITY
        })
    }

    /// Makes the padding along `dim` of new value `s` (scores) finite by masking with 0 the
    /// padded dim of the matmul operand it comes from (through reshapes, transposes and
    /// scaling by finite constants), inserted just before that matmul. False when `s` has no
    /// such source.
    fn zero_key_side(&mut self, s: ValueId, dim: usize, key: &DimLayout) -> R<bool> {
        let (mut v, mut d) = (s, dim);
        let padded = self.shape(s)[dim];
        loop {
            let Some(op) = self.new.defining_op(v) else { return Ok(false) };
            let od = &self.new.ops[op];
            match od.opcode {
                Opcode::Reshape => {
                    let (inn, out) = (self.shape(od.operands[0]), self.shape(v));
                    let tail = out.len() - d;
                    if inn.len() < tail || inn[inn.len() - tail..] != out[d..] {
                        return Ok(false);
                    }
                    d = inn.len() - tail;
                    v = od.operands[0];
                }
                Opcode::Transpose => {
                    d = od.attrs.ints("permutation").and_then(|p| p.get(d)).copied().unwrap_or(0) as usize;
                    v = od.operands[0];
                }
                Opcode::Mul | Opcode::Div | Opcode::Convert => {
                    let finite = od.operands.iter().skip(1).all(|&o| crate::util::splat_f64(&self.new, o).is_some_and(f64::is_finite));
                    if !finite {
                        return Ok(false);
                    }
                    v = od.operands[0];
                }
                Opcode::DotGeneral => {
                    let ints = |n: &str| od.attrs.ints(n).unwrap_or(&[]).to_vec();
                    let (lb, rb) = (ints("lhs_batching_dimensions"), ints("rhs_batching_dimensions"));
                    let (lc, rc) = (ints("lhs_contracting_dimensions"), ints("rhs_contracting_dimensions"));
                    let free = |rank: usize, b: &[i64], c: &[i64]| -> Vec<usize> {
                        (0..rank).filter(|i| !b.contains(&(*i as i64)) && !c.contains(&(*i as i64))).collect()
                    };
                    let (ls, rs) = (self.shape(od.operands[0]), self.shape(od.operands[1]));
                    let (lf, rf) = (free(ls.len(), &lb, &lc), free(rs.len(), &rb, &rc));
                    let (side, sd) = if d < lb.len() {
                        return Ok(false);
                    } else if d < lb.len() + lf.len() {
                        (0, lf[d - lb.len()])
                    } else {
                        (1, rf[d - lb.len() - lf.len()])
                    };
                    let operand = od.operands[side];
                    if self.shape(operand)[sd] != padded {
                        return Ok(false);
                    }
                    if self.zero_early(operand, sd, key)? {
                        return Ok(true);
                    }
                    let mut layout = vec![DimLayout::Exact; self.shape(operand).len()];
                    layout[sd] = key.clone();
                    let first = self.new.ops.len();
                    let masked = self.mask(operand, &layout, &[sd], Fill::Scalar(Scalar::Float(0.0)))?;
                    for i in first..self.new.ops.len() {
                        let o: OpId = tpuc_ir::EntityId::new(i);
                        self.new.detach_op(o);
                        self.new.insert_op_before(op, o);
                    }
                    self.new.set_operand(op, side, masked);
                    return Ok(true);
                }
                _ => return Ok(false),
            }
        }
    }

    /// Zeroes the padding of new value `v` along `dim` (laid out as `l`) where the value is
    /// first produced: up the chain of ops that move zeros to zeros and keep the dim whole
    /// (reshapes that keep it, transposes, slices of other dims, converts, scaling by a finite
    /// non-zero constant). There the select fuses with the producer and sees its layout: a mask
    /// after a head split pads the head dim to the TPU's 128 lanes, so masking K and V there
    /// cost libtpu 17 % more bytes than the static program. The uses built so far read the
    /// mask's result (ops built later may read either): padding holds nothing a consumer reads
    /// unmasked, so 0 serves as well as what was there. False when `v` has no producer to
    /// hoist to (block arguments, or another block).
    fn zero_early(&mut self, v: ValueId, dim: usize, l: &DimLayout) -> R<bool> {
        let (mut cur, mut d) = (v, dim);
        // The last value of the chain that an op of `main`'s block defines.
        let mut at: Option<(ValueId, usize, OpId)> = None;
        loop {
            if self.zeroed.contains(&(cur, d)) {
                return Ok(true);
            }
            let Some(op) = self.new.defining_op(cur) else { break };
            if self.new.ops[op].block != Some(self.block) {
                break;
            }
            at = Some((cur, d, op));
            let od = &self.new.ops[op];
            let next = match od.opcode {
                Opcode::Reshape => kept_reshape_dim(&self.shape(od.operands[0]), &self.shape(cur), d),
                Opcode::Transpose => od.attrs.ints("permutation").and_then(|p| p.get(d)).map(|&x| x as usize),
                Opcode::Slice => {
                    let whole = self.shape(od.operands[0])[d] == self.shape(cur)[d]
                        && od.attrs.ints("strides").is_none_or(|s| s.get(d).is_none_or(|&x| x == 1));
                    whole.then_some(d)
                }
                Opcode::Convert => Some(d),
                Opcode::Mul | Opcode::Div => {
                    let ok = od.operands.len() == 2
                        && crate::util::splat_f64(&self.new, od.operands[1]).is_some_and(|c| c.is_finite() && c != 0.0);
                    ok.then_some(d)
                }
                _ => None,
            };
            match next {
                Some(nd) => {
                    cur = od.operands[0];
                    d = nd;
                }
                None => break,
            }
        }
        let Some((top, td, def)) = at else { return Ok(false) };
        if top == v {
            return Ok(false);
        }
        let mut layout = vec![DimLayout::Exact; self.shape(top).len()];
        layout[td] = l.clone();
        // Size values built for the mask sit right after `def`; cached ones may come later.
        let extents = std::mem::take(&mut self.extents);
        let first = self.new.ops.len();
        let masked = self.mask(top, &layout, &[td], Fill::Scalar(Scalar::Float(0.0)));
        self.extents = extents;
        let masked = masked?;
        let mut after = def;
        for i in first..self.new.ops.len() {
            let o: OpId = tpuc_ir::EntityId::new(i);
            self.new.detach_op(o);
            self.new.insert_op_after(after, o);
            after = o;
        }
        let select = self.new.defining_op(masked).expect("the mask is an op");
        self.new.replace_uses_except(top, masked, |o| o == select);
        self.zeroed.insert((masked, td));
        Ok(true)
    }

    // ------------------------------------------------------------------ masks

    /// `x` with the padding of `dims` replaced by `fill`.
    fn mask(&mut self, x: ValueId, lay: &Layout, dims: &[usize], fill: Fill) -> R<ValueId> {
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
    fn concat_gather(&mut self, op: OpId, ins: &[ValueId], lays: &[Layout], dim: usize) -> R<ValueId> {
        let d = &self.old.ops[op];
        let mut extents = Vec::with_capacity(ins.len());
        for (k, l) in lays.iter().enumerate() {
            let p = self.shape(ins[k])[dim];
            extents.push(match l[dim].prefix_extent() {
                Some(None) => SymExpr::constant(p),
                Some(Some(e)) => e.clone(),
                None => {
                    return Err(self.not_prefix("joins", d.operands[k], dim))
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
        let attrs = Attrs::new()
            .with("offset_dims", Attr::Ints((0..r).filter(|&i| i != dim as i64).collect()))
            .with("collapsed_slice_dims", Attr::Ints(vec![dim as i64]))
            .with("operand_batching_dims", Attr::Ints(vec![]))
            .with("start_indices_batching_dims", Attr::Ints(vec![]))
            .with("start_index_map", Attr::Ints(vec![dim as i64]))
            .with("index_vector_dim", Attr::Int(1))
            .with("slice_sizes", Attr::Ints(sizes));
        let mut out = shape;
        out[dim] = p;
        let ty = TensorType::from_static(self.new.values[x].ty.dtype, &out);
        self.b().build1(Opcode::Gather, &[x, idx], attrs, Some(ty)).map_err(|e| self.ir(e))
    }

    /// `reverse` of a padded prefix along `dim`: position `i` takes `x[n - 1 - i]`.
    /// New value `x`, whose `dim` is a prefix (`from`), laid out as the product of padded
    /// factors `to` of the same extent: position i, read as digits over `to`'s padded sizes,
    /// takes the row whose index those digits give over the real sizes (clamped into range
    /// where a digit is past its extent: padding, masked by the caller).
    fn regather(&mut self, x: ValueId, dim: usize, from: &DimLayout, to: &DimLayout) -> R<ValueId> {
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

    fn reverse_prefix(&mut self, x: ValueId, dim: usize, e: &SymExpr) -> R<ValueId> {
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
        (Opcode::Compare, [x, y]) => b(attrs.get_enum::<Direction>("direction")?.holds(x.partial_cmp(y))),
        _ => return None,
    })
}

enum Fill {
    Scalar(Scalar),
    Value(ValueId),
}

fn as_usize(v: &[i64]) -> Vec<usize> {
    v.iter().map(|&x| x as usize).collect()
}

/// For a row-major reshape from `inn` to `out`: the input dim whose positions output dim `d`
/// walks one for one (same size, same product of the dims before it), if any.
fn kept_reshape_dim(inn: &[i64], out: &[i64], d: usize) -> Option<usize> {
    let before: i64 = out[..d].iter().product();
    let mut p = 1i64;
    for (e, &n) in inn.iter().enumerate() {
        if p == before && n == out[d] {
            return Some(e);
        }
        p *= n;
        if p > before {
            return None;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reshapes_keep_a_dim_when_its_size_and_the_product_before_it_agree() {
        // [1, s, 64] -> [1, s, 4, 16]: s is kept; the split dim is not.
        assert_eq!(kept_reshape_dim(&[1, 128, 64], &[1, 128, 4, 16], 1), Some(1));
        assert_eq!(kept_reshape_dim(&[1, 128, 64], &[1, 128, 4, 16], 2), None);
        // [1, 4, s, 16] -> [4, s, 16], and size-1 dims before it.
        assert_eq!(kept_reshape_dim(&[1, 4, 128, 16], &[4, 128, 16], 1), Some(2));
        assert_eq!(kept_reshape_dim(&[128, 192], &[1, 128, 192], 1), Some(0));
        // [2, s] -> [2*s]: the merged dim walks two input dims.
        assert_eq!(kept_reshape_dim(&[2, 8], &[16], 0), None);
    }

    fn bucket(text: &str, s0: i64) -> Result<Module, PassError> {
        let m = tpuc_ir::parse_module(text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        specialize(&m, &BTreeMap::from([("s0".to_string(), s0)]))
    }

    #[test]
    fn an_op_its_rule_rejects_is_an_error_stating_the_rule() {
        // layer_norm is exact only when its normalized dims are not padded.
        let ln = |x: &str, stat: &str| {
            format!(
                "module {{\n  symbol @s0 : [1, 64]\n  func @main(%0: tensor<{x}xf32> {{kind = \"input\", name = \"x\"}}) -> (tensor<{x}xf32> {{kind = \"output\", name = \"y\"}}) {{\n    \
                 %1, %2, %3 = layer_norm %0 {{epsilon = 1e-5, normalized_rank = 1}} : tensor<{x}xf32>, tensor<{stat}xf32>, tensor<{stat}xf32>\n    return %1\n  }}\n}}\n"
            )
        };
        let (kind, rule) = handling(Opcode::LayerNorm);
        assert_eq!(kind, Handling::Conditional);
        let sp = bucket(&ln("s0x16", "s0x1"), 8).unwrap();
        assert_eq!(size_args(&sp), [("s0".to_string(), 1)]);
        let err = bucket(&ln("4xs0", "4x1"), 8).err().expect("layer_norm over a padded dim is rejected");
        let msg = err.to_string();
        assert!(msg.contains("cannot bucket `layer_norm`") && msg.contains("normalizes over dim 1"), "{msg}");
        assert!(msg.contains(&format!("(bucketing rule: {rule})")), "{msg}");
    }
}
