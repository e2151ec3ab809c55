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
//!   Inf can leak; attention zeroes padded keys and values and masks the keys out of the
//!   scores with `-inf` (`false` in a boolean mask), so padded query rows may hold garbage
//!   (NaN for a fully masked row) that stays in the padding; ops whose valid outputs never
//!   read padding (prefix scans, causal attention over queries padded as its keys, row-wise
//!   ops) need nothing; `reverse` is rewritten as a gather from `n - 1 - i`; a
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
    ArgInfo, ArgKind, ResultInfo, ResultKind, Attrs, BlockId, Builder, DType, Dim, LocId, Module, OpId, SymExpr, TensorType,
    ValueId,
};

pub use tpuc_ir::{DimLayout, Factor, Layout};

mod attention;
mod clean;
mod contract;
mod gather;
mod layouts;
mod linalg;
mod masks;
mod ops;
mod reduce;
mod rules;
mod shape;
#[cfg(test)]
mod tests;

pub use rules::{handling, Handling};

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

/// The pass: [`specialize`] to the bucket `sizes` (`--bucket NAME=SIZE` on the command line,
/// [`crate::PipelineOptions::bucket`]), replacing the module. Changed unless the module has no
/// symbols.
pub struct Specialize {
    pub sizes: Option<BTreeMap<String, i64>>,
}

impl Pass for Specialize {
    fn name(&self) -> &'static str {
        crate::PassId::Specialize.name()
    }

    fn run(&self, m: &mut Module) -> Result<bool, PassError> {
        let sizes = self.sizes.as_ref().ok_or_else(|| PassError::Failed {
            pass: crate::PassId::Specialize.name().into(),
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
    let returned = size_results(m);
    let syms: Vec<String> = m.symbols.iter().map(|s| s.name.to_string()).filter(|s| !returned.contains(s)).collect();
    let first = nargs.saturating_sub(syms.len());
    syms.into_iter().enumerate().map(|(k, s)| (s, first + k)).collect()
}

/// The data-dependent sizes of a specialized module (the symbols `bind_size` ops defined), in
/// the order `main` returns their real values: as its last results, after the user's.
pub fn size_results(m: &Module) -> Vec<String> {
    let Some(f) = m.main_func() else { return Vec::new() };
    f.results().iter().filter(|r| r.kind == ResultKind::Size).map(|r| r.name.clone()).collect()
}

/// The symbols `bind_size` ops define (data-dependent sizes), each with its bound: the size of
/// the op's operand along the bound dim.
pub fn defined_sizes(m: &Module) -> Vec<(String, SymExpr)> {
    let mut out: Vec<(String, SymExpr)> = Vec::new();
    for (_, d) in m.ops.iter() {
        if d.opcode() != tpuc_ir::Opcode::BindSize {
            continue;
        }
        let dim = d.payload::<tpuc_ir::payload::BindSize>().dimension;
        let ty = &m.values[d.results()[0]].ty;
        let Some(Dim::Sym(e)) = ty.dims.get(dim as usize) else { continue };
        let Some(sym) = e.as_symbol() else { continue };
        if out.iter().any(|(s, _)| s == sym) {
            continue;
        }
        let bound = m.values[d.operands()[0]].ty.dims[dim as usize].to_expr();
        out.push((sym.to_string(), bound));
    }
    out
}

/// The layout of each result of a specialized module's `main` (all `Exact` where none is
/// recorded).
pub fn result_layouts(m: &Module) -> Vec<Layout> {
    let Some(f) = m.main_func() else { return Vec::new() };
    let entry = m.entry_block(f);
    let Some(ret) = m.terminator(entry) else { return Vec::new() };
    m.ops[ret]
        .operands()
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            f.results().get(i).and_then(|r| r.layout.clone()).unwrap_or_else(|| vec![DimLayout::Exact; m.values[v].ty.rank()])
        })
        .collect()
}

/// Specializes `module`'s `main` to the bucket `sizes` (a padded size per symbol): the new
/// module, each result's layout recorded in its `ResultInfo`. See the module docs.
pub fn specialize(module: &Module, sizes: &BTreeMap<String, i64>) -> Result<Module, PassError> {
    let fail = |m: String| PassError::Failed { pass: crate::PassId::Specialize.name().into(), message: m };
    let func = module.main_func().ok_or_else(|| fail("the module has no `main`".into()))?;
    // Data-dependent sizes are padded to their `bind_size` operand's size unless given.
    let defined = defined_sizes(module);
    let is_defined = |name: &str| defined.iter().any(|(d, _)| d == name);
    let mut with_defaults = sizes.clone();
    for (sym, bound) in &defined {
        if !with_defaults.contains_key(sym) {
            let b = bound.eval(&|s| sizes.get(s).copied()).ok_or_else(|| {
                fail(format!("the data-dependent size `{sym}` is bounded by `{bound}`, which has no size in this bucket"))
            })?;
            with_defaults.insert(sym.clone(), b);
        }
    }
    let sizes = &with_defaults;
    for s in module.symbols.iter() {
        if is_defined(&s.name) {
            continue;
        }
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
        new: Module { mesh: module.mesh.clone(), ..Module::new() },
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
        defined: defined.iter().map(|(s, _)| s.clone()).collect(),
    };
    let mut args = Vec::new();
    for (i, &a) in module.blocks[entry].args().iter().enumerate() {
        let ty = &module.values[a].ty;
        args.push((sp.spec_type(ty)?, func.args[i].clone()));
    }
    let mut size_args = Vec::new();
    for s in module.symbols.iter().filter(|s| !is_defined(&s.name)) {
        size_args.push((s.name.to_string(), args.len()));
        args.push((TensorType::scalar(DType::I64), ArgInfo::new(ArgKind::SymInt, s.name.to_string())));
    }
    let (fi, block) = sp.new.add_func("main", args);
    sp.new.funcs[fi].results = func.results().to_vec();
    sp.new.symbols = module.symbols.clone();
    sp.block = block;
    let new_args = sp.new.blocks[block].args().to_vec();
    for (i, &a) in module.blocks[entry].args().iter().enumerate() {
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
    if infos.is_empty() && (!defined.is_empty() || layouts.iter().any(|l| !l.iter().all(DimLayout::is_exact))) {
        *infos = (0..layouts.len()).map(|i| ResultInfo::new(ResultKind::UserOutput, format!("result{i}"))).collect();
    }
    for (info, layout) in infos.iter_mut().zip(layouts) {
        info.layout = (!layout.iter().all(DimLayout::is_exact)).then_some(layout);
    }
    // Data-dependent sizes are returned after the results, so that the caller can cut them.
    for (sym, _) in &defined {
        new.funcs[fi].results.push(ResultInfo::new(ResultKind::Size, sym.clone()));
    }
    new.compact();
    tpuc_ir::verify(&new).map_err(|errs| PassError::VerifyAfter { pass: crate::PassId::Specialize.name().into(), errors: errs })?;
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

/// One specialization under way: the old module it reads, the new one it builds, and per old
/// value its new value and layout. Its methods are spread over this folder's files by job.
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
    /// The data-dependent sizes (`bind_size` symbols), returned after `main`'s results.
    defined: Vec<String>,
}

type R<T> = Result<T, PassError>;

impl<'a> Sp<'a> {
    /// The error for the current op, ending with its rule from [`handling`] so that the
    /// message says what the op would need to be bucketed.
    fn fail(&self, msg: impl std::fmt::Display) -> PassError {
        let mut m = String::from("cannot bucket ");
        let mut rule = None;
        if let Some(op) = self.cur {
            let opcode = self.old.ops[op].opcode();
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
        PassError::Failed { pass: crate::PassId::Specialize.name().into(), message: m }
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
                // Padded to its size at the bucket, a dim that shrinks as a symbol grows
                // would be shorter than its real size.
                Dim::Sym(e) if !e.is_nondecreasing() => {
                    return Err(self.fail(format!(
                        "dim `{e}` shrinks as a symbol grows (padded to its size at the bucket, it would be shorter than at a smaller real size)"
                    )))
                }
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
            if d.opcode().is_terminator() {
                let outs: Vec<ValueId> = d.operands().to_vec();
                if mode != BlockMode::Inline {
                    let mut new_ops: Vec<ValueId> = outs.iter().map(|v| self.vmap[v]).collect();
                    if mode == BlockMode::Main {
                        // Data-dependent sizes are returned after the results (see `size_results`).
                        for sym in &self.defined {
                            let v = self.size_val.get(sym).copied().ok_or_else(|| {
                                self.fail(format!("internal: the data-dependent size `{sym}` was not bound before the results"))
                            })?;
                            new_ops.push(v);
                        }
                    }
                    self.cur = Some(op);
                    self.set_loc(op);
                    let t = self.new.create_op(d.opcode(), &new_ops, Attrs::new(), Some(&[]), &[]).map_err(|e| self.ir(e))?;
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
}
