//! The verifier.
//!
//! Checks, collecting every failure rather than stopping at the first:
//! - each function's body is one block whose arguments match the argument metadata and whose
//!   last op is `return`; result metadata matches the returned values;
//! - every op obeys its op-table entry and shape rule ([`crate::infer::check_op`]): operand and
//!   result counts, attribute presence and kinds, result types, region count;
//! - terminators end blocks and only end blocks (`return` in function bodies, `yield` in op
//!   regions);
//! - SSA: every operand is defined before its use, in the same block or an enclosing one
//!   (a `composite`'s region is isolated: it sees only its own block arguments);
//!   every value's recorded definition matches where it is defined;
//! - a `composite`'s region has one block whose arguments match the operand types and whose
//!   `yield` matches the result types;
//! - every symbol a type mentions is declared, and symbol names can be printed (no `x`);
//! - the use lists agree with the operands (a pass that wrote `operands` directly breaks this).
//!
//! Each error names the op (and its FX provenance when known).

use crate::entity::SecondaryMap;
use crate::infer::check_op;
use crate::module::{BlockId, Module, OpId, ValueDef, ValueId};
use crate::opcode::Opcode;
use crate::types::{Dim, TensorType};
use std::fmt;

/// One broken rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyError {
    pub op: Option<OpId>,
    /// Op name and provenance, rendered for messages.
    pub context: String,
    pub message: String,
}

impl fmt::Display for VerifyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.context.is_empty() {
            write!(f, "{}", self.message)
        } else {
            write!(f, "{}: {}", self.context, self.message)
        }
    }
}

/// A module the verifier accepted: the proof that code generation asks for (as naga's backends
/// take the validator's `ModuleInfo`). It borrows the module, so the module cannot change while
/// the proof lives; the only way to get one is [`verify`].
#[derive(Clone, Copy, Debug)]
pub struct Verified<'m> {
    module: &'m Module,
}

impl<'m> Verified<'m> {
    /// The verified module.
    pub fn module(&self) -> &'m Module {
        self.module
    }
}

impl std::ops::Deref for Verified<'_> {
    type Target = Module;
    fn deref(&self) -> &Module {
        self.module
    }
}

/// Verifies a module: its proof ([`Verified`]), or every error found.
pub fn verify(m: &Module) -> Result<Verified<'_>, Vec<VerifyError>> {
    let mut v = Verifier { m, errors: Vec::new(), defined: SecondaryMap::with_default(false) };
    v.run();
    if v.errors.is_empty() {
        Ok(Verified { module: m })
    } else {
        Err(v.errors)
    }
}

struct Verifier<'m> {
    m: &'m Module,
    errors: Vec<VerifyError>,
    /// Values visible at the current point.
    defined: SecondaryMap<ValueId, bool>,
}

impl Verifier<'_> {
    fn context(&self, op: OpId) -> String {
        let name = self.m.ops[op].opcode.name();
        match self.m.loc(op) {
            Some(l) => format!("op `{name}` from {l}"),
            None => format!("op `{name}`"),
        }
    }

    fn op_err(&mut self, op: OpId, message: impl Into<String>) {
        let context = self.context(op);
        self.errors.push(VerifyError { op: Some(op), context, message: message.into() });
    }

    fn err(&mut self, context: String, message: impl Into<String>) {
        self.errors.push(VerifyError { op: None, context, message: message.into() });
    }

    fn run(&mut self) {
        for s in self.m.symbols.iter() {
            if !crate::sym::is_symbol_name(&s.name) {
                self.err(String::new(), format!("symbol name `{}` is not printable (letters, digits and `_`, not starting with a digit, not `mod` or `floordiv`)", s.name));
            }
            if s.max.is_some_and(|mx| mx < s.min) {
                self.err(String::new(), format!("symbol `{}` has an empty range [{}, {:?}]", s.name, s.min, s.max));
            }
        }
        let mut names = std::collections::HashSet::new();
        for f in &self.m.funcs {
            if !names.insert(f.name.as_str()) {
                self.err(format!("func @{}", f.name), "defined twice");
            }
        }
        for fi in 0..self.m.funcs.len() {
            self.func(fi);
        }
        self.sharding();
        for e in self.m.use_list_errors() {
            self.err(String::new(), e);
        }
    }

    /// The mesh has distinct axes of positive size; only `main`'s arguments and results carry a
    /// sharding, only with a mesh, and each split fits its value's type.
    fn sharding(&mut self) {
        let m = self.m;
        if let Some(mesh) = &m.mesh {
            let mut axes = std::collections::HashSet::new();
            for (a, n) in &mesh.axes {
                if *n < 1 || !axes.insert(a.as_str()) {
                    self.err("mesh".into(), format!("axis `{a}` of size {n}: axes need distinct names and sizes of at least 1"));
                }
            }
        }
        let main = m.main_func().map(|f| f as *const crate::Func);
        for f in &m.funcs {
            let ctx = format!("func @{}", f.name);
            let args: Vec<Option<&crate::DimAxes>> = f.args.iter().map(|a| a.sharding.as_ref()).collect();
            let results: Vec<Option<&crate::DimAxes>> = f.results.iter().map(|r| r.sharding.as_ref()).collect();
            if args.iter().chain(&results).all(Option::is_none) {
                continue;
            }
            if main != Some(f as *const crate::Func) {
                self.err(ctx, "only `main`'s arguments and results can be sharded");
                continue;
            }
            let Some(mesh) = &m.mesh else {
                self.err(ctx, "a sharded argument or result needs the module's `mesh`");
                continue;
            };
            let Some(&entry) = m.regions[f.body].blocks.first() else { continue };
            let arg_values: &[ValueId] = &m.blocks[entry].args;
            let result_values: Vec<ValueId> = m.terminator(entry).map(|o| m.ops[o].operands.to_vec()).unwrap_or_default();
            for (what, splits, values) in [("argument", &args, arg_values), ("result", &results, &result_values[..])] {
                for (i, dims) in splits.iter().enumerate() {
                    let Some(dims) = dims else { continue };
                    let Some(&v) = values.get(i) else {
                        self.err(ctx.clone(), format!("sharding of {what} {i}, which does not exist"));
                        continue;
                    };
                    if let Some(msg) = crate::sharding::dim_axes_error(mesh, dims, &m.values[v].ty) {
                        self.err(ctx.clone(), format!("{what} {i}: sharding {}: {msg}", crate::sharding::dim_axes_text(dims)));
                    }
                }
            }
        }
    }

    fn func(&mut self, fi: usize) {
        let f = &self.m.funcs[fi];
        let ctx = format!("func @{}", f.name);
        let blocks = &self.m.regions[f.body].blocks;
        if blocks.len() != 1 {
            self.err(ctx, format!("body must have exactly one block, has {}", blocks.len()));
            return;
        }
        let b = blocks[0];
        if f.args.len() != self.m.blocks[b].args.len() {
            self.err(
                ctx.clone(),
                format!("{} arguments but metadata for {}", self.m.blocks[b].args.len(), f.args.len()),
            );
        }
        self.defined = SecondaryMap::with_default(false);
        self.block(b, true);
        match self.m.terminator(b) {
            Some(last) if self.m.ops[last].opcode == Opcode::Return => {
                let n = self.m.ops[last].operands.len();
                if !f.results.is_empty() && f.results.len() != n {
                    self.err(ctx.clone(), format!("returns {n} values but has metadata for {}", f.results.len()));
                }
                let returned = self.m.ops[last].operands.clone();
                for (i, (info, &v)) in f.results.iter().zip(&returned).enumerate() {
                    if let Some(l) = &info.layout {
                        let dims = self.m.values[v].ty.dims.clone();
                        if let Some(msg) = layout_error(l, &dims) {
                            self.err(ctx.clone(), format!("result {i}: layout {}: {msg}", crate::layout::layout_text(l)));
                        }
                    }
                }
            }
            _ => self.err(ctx, "body does not end with `return`"),
        }
    }

    fn check_type(&mut self, op: Option<OpId>, t: &TensorType) {
        for d in &t.dims {
            match d {
                Dim::Static(n) if *n < 0 => {
                    let msg = format!("type {t} has a negative dimension");
                    match op {
                        Some(op) => self.op_err(op, msg),
                        None => self.err(String::new(), msg),
                    }
                }
                Dim::Sym(e) => {
                    for s in e.symbols() {
                        if self.m.symbols.get(&s).is_none() {
                            let msg = format!("type {t} uses undeclared symbol `{s}`");
                            match op {
                                Some(op) => self.op_err(op, msg),
                                None => self.err(String::new(), msg),
                            }
                        }
                    }
                }
                _ => {}
            }
        }
    }

    fn block(&mut self, b: BlockId, in_func_body: bool) {
        for (i, &a) in self.m.blocks[b].args.iter().enumerate() {
            if self.m.values[a].def != (ValueDef::BlockArg { block: b, index: i as u32 }) {
                self.err(format!("block {b}"), format!("argument {i} records a wrong definition"));
            }
            let t = self.m.values[a].ty.clone();
            self.check_type(None, &t);
            self.defined.set(a, true);
        }
        let m = self.m;
        let n = m.blocks[b].len();
        for (i, op) in m.ops_in(b).enumerate() {
            self.op(op, b, i + 1 == n, in_func_body);
        }
    }

    /// A composite's region: one block whose arguments have the operands' types and whose
    /// `yield` gives values of the result types.
    fn composite_signature(&mut self, op: OpId, r: crate::module::RegionId) {
        let m = self.m;
        let d = &m.ops[op];
        let blocks = &m.regions[r].blocks;
        if blocks.len() != 1 {
            self.op_err(op, format!("composite region must have one block, has {}", blocks.len()));
            return;
        }
        let b = blocks[0];
        let args: Vec<&TensorType> = m.blocks[b].args.iter().map(|&a| &m.values[a].ty).collect();
        let operands: Vec<&TensorType> = d.operands.iter().filter(|v| m.values.is_valid(**v)).map(|&v| &m.values[v].ty).collect();
        if args != operands {
            let show = |ts: &[&TensorType]| ts.iter().map(|t| t.to_string()).collect::<Vec<_>>().join(", ");
            self.op_err(op, format!("composite region arguments ({}) differ from its operands ({})", show(&args), show(&operands)));
        }
        if let Some(last) = m.terminator(b) {
            if m.ops[last].opcode == Opcode::Yield {
                let yielded: Vec<&TensorType> =
                    m.ops[last].operands.iter().filter(|v| m.values.is_valid(**v)).map(|&v| &m.values[v].ty).collect();
                let results: Vec<&TensorType> = d.results.iter().map(|&v| &m.values[v].ty).collect();
                if yielded != results {
                    let show = |ts: &[&TensorType]| ts.iter().map(|t| t.to_string()).collect::<Vec<_>>().join(", ");
                    self.op_err(op, format!("composite region yields ({}) but the op returns ({})", show(&yielded), show(&results)));
                }
            }
        }
    }

    fn op(&mut self, op: OpId, block: BlockId, is_last: bool, in_func_body: bool) {
        let d = &self.m.ops[op];
        if d.block != Some(block) {
            self.op_err(op, format!("records block {:?} but is in {block}", d.block));
        }
        for (i, &v) in d.operands.iter().enumerate() {
            if !self.m.values.is_valid(v) || !self.defined[v] {
                self.op_err(op, format!("operand {i} ({v}) is not defined before this use"));
            }
        }
        // Terminators.
        let term = d.opcode.is_terminator();
        if term && !is_last {
            self.op_err(op, "terminator in the middle of a block");
        }
        if !term && is_last {
            self.op_err(op, "block does not end with a terminator");
        }
        if d.opcode == Opcode::Return && !in_func_body {
            self.op_err(op, "`return` inside an op region (use `yield`)");
        }
        if d.opcode == Opcode::Yield && in_func_body {
            self.op_err(op, "`yield` in a function body (use `return`)");
        }
        // Op table and shape rule.
        let operand_types: Vec<&TensorType> = d
            .operands
            .iter()
            .filter(|v| self.m.values.is_valid(**v))
            .map(|&v| &self.m.values[v].ty)
            .collect();
        let result_types: Vec<TensorType> = d.results.iter().map(|&v| self.m.values[v].ty.clone()).collect();
        if operand_types.len() == d.operands.len() {
            if let Err(e) = check_op(d.opcode, &operand_types, &d.attrs, Some(&result_types)) {
                self.op_err(op, e);
            }
        }
        if d.regions.len() != d.opcode.info().regions {
            self.op_err(op, format!("expects {} regions, has {}", d.opcode.info().regions, d.regions.len()));
        }
        for t in &result_types {
            self.check_type(Some(op), t);
        }
        for &r in &d.regions.clone() {
            if self.m.regions[r].parent != Some(op) {
                self.op_err(op, format!("region {r} records another parent"));
            }
            let isolated = self.m.ops[op].opcode == Opcode::Composite;
            if isolated {
                self.composite_signature(op, r);
            }
            for &b in &self.m.regions[r].blocks.clone() {
                // Values of a nested region are not visible after it; a composite's region sees
                // only its own arguments.
                let saved = self.defined.clone();
                if isolated {
                    self.defined = SecondaryMap::with_default(false);
                }
                self.block(b, false);
                if !matches!(self.m.terminator(b).map(|o| self.m.ops[o].opcode), Some(Opcode::Yield)) {
                    self.op_err(op, format!("region block {b} does not end with `yield`"));
                }
                self.defined = saved;
            }
        }
        for (i, &r) in self.m.ops[op].results.iter().enumerate() {
            if self.m.values[r].def != (ValueDef::Result { op, index: i as u32 }) {
                self.op_err(op, format!("result {i} records a wrong definition"));
            }
            self.defined.set(r, true);
        }
    }
}

/// Why `layout` cannot describe a value with `dims`: one entry per dim, and a product of
/// factors only over a static dim of that many positions.
fn layout_error(layout: &[crate::DimLayout], dims: &[crate::Dim]) -> Option<String> {
    if layout.len() != dims.len() {
        return Some(format!("{} entries for a value of rank {}", layout.len(), dims.len()));
    }
    for (i, (l, d)) in layout.iter().zip(dims).enumerate() {
        if let crate::DimLayout::Factors(fs) = l {
            let product = fs.iter().try_fold(1i64, |acc, f| acc.checked_mul(f.padded));
            if fs.iter().any(|f| f.padded < 1) || product != d.as_static() {
                return Some(format!("dim {i}: factors of {} positions for a dim of {d}", product.map_or("too many".to_string(), |p| p.to_string())));
            }
        }
    }
    None
}
