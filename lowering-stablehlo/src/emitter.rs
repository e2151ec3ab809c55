//! The emitter: one output `String`, SSA names, types, locations and one writer per StableHLO
//! op shape. Lowerings ([`crate::lower`], [`crate::reduce`], [`crate::expand`]) call these
//! writers and never format MLIR themselves, so every op is spelled in one place.
//!
//! One file on purpose: every StableHLO spelling in one place (see above) is the point of it.

use crate::literal::{lit_bytes, write_elem, write_hex, Lit};
use crate::{EmitError, EmitOptions};
use smallvec::SmallVec;
use std::fmt::Write;
use tpuc_ir::{
    DType, Dim, LocId, Module, OpId, Opcode, SecondaryMap, TensorData, TensorType, ValueId,
};

/// A static tensor type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Ty {
    pub dt: DType,
    pub dims: SmallVec<[i64; 6]>,
}

impl Ty {
    pub fn new(dt: DType, dims: &[i64]) -> Ty {
        Ty {
            dt,
            dims: dims.into(),
        }
    }
    pub fn scalar(dt: DType) -> Ty {
        Ty {
            dt,
            dims: SmallVec::new(),
        }
    }
    pub fn with_dt(&self, dt: DType) -> Ty {
        Ty {
            dt,
            dims: self.dims.clone(),
        }
    }
    pub fn rank(&self) -> usize {
        self.dims.len()
    }
    /// The type without the dims in `removed`.
    pub fn without(&self, removed: &[i64]) -> Ty {
        Ty {
            dt: self.dt,
            dims: self
                .dims
                .iter()
                .enumerate()
                .filter(|(i, _)| !removed.contains(&(*i as i64)))
                .map(|(_, &d)| d)
                .collect(),
        }
    }
    pub fn num_elements(&self) -> i64 {
        self.dims.iter().product()
    }
}

/// An SSA name in the output.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum V {
    Undef,
    Arg(u32),
    N(u32),
    /// Result `.1` of a multi-result op `%N:k`.
    Res(u32, u32),
}

/// 0, 1, ..., n-1
pub(crate) fn iota_list(n: usize) -> SmallVec<[i64; 6]> {
    (0..n as i64).collect()
}

pub(crate) struct Emitter<'m> {
    pub m: &'m Module,
    pub opts: &'m EmitOptions,
    pub out: String,
    pub scratch: String,
    pub(crate) next: u32,
    names: SecondaryMap<ValueId, V>,
    pub(crate) depth: usize,
    /// The IR op being lowered (for locations and error messages).
    pub cur_op: Option<OpId>,
    pub(crate) cur_loc: Option<u32>,
    /// Decomposition functions of composites (see [`crate::composite`]), written after the
    /// module's own functions.
    pub(crate) decompositions: crate::composite::Decompositions,
    loc_alias: SecondaryMap<LocId, u32>,
    loc_order: Vec<LocId>,
}

/// Fails on the first symbolic dimension, naming what carries it.
pub(crate) fn check_static(m: &Module) -> Result<(), EmitError> {
    fn sym(t: &TensorType) -> Option<&Dim> {
        t.dims.iter().find(|d| !d.is_static())
    }
    for f in &m.funcs {
        let entry = m.entry_block(f);
        for (i, &a) in m.blocks[entry].args().iter().enumerate() {
            if let Some(d) = sym(m.value_type(a)) {
                let name = f
                    .args
                    .get(i)
                    .map_or(String::new(), |a| format!(" (`{}`)", a.name));
                return Err(EmitError::DynamicDim {
                    dim: d.to_string(),
                    context: format!("argument {i}{name} of @{}", f.name),
                });
            }
        }
        let mut stack: Vec<OpId> = m.ops_in(entry).rev().collect();
        while let Some(op) = stack.pop() {
            let d = m.op(op);
            for &r in d.results() {
                if let Some(dim) = sym(m.value_type(r)) {
                    return Err(EmitError::DynamicDim {
                        dim: dim.to_string(),
                        context: format!("result of `{}`{}", d.opcode(), op_context(m, op)),
                    });
                }
            }
            for &region in d.regions() {
                for &b in m.regions[region].blocks() {
                    for &a in m.blocks[b].args() {
                        if let Some(dim) = sym(m.value_type(a)) {
                            return Err(EmitError::DynamicDim {
                                dim: dim.to_string(),
                                context: format!(
                                    "region argument of `{}`{}",
                                    d.opcode(),
                                    op_context(m, op)
                                ),
                            });
                        }
                    }
                    stack.extend(m.ops_in(b).rev());
                }
            }
        }
    }
    Ok(())
}

/// " (node `add_1` at model.py:3)", " (node `add_1`)" or "".
pub(crate) fn op_context(m: &Module, op: OpId) -> String {
    match m.loc(op) {
        Some(l) => match &l.source {
            Some(s) => format!(" (node `{}` at {s})", l.node),
            None => format!(" (node `{}`)", l.node),
        },
        None => String::new(),
    }
}

/// Writes an MLIR string literal.
pub(crate) fn write_str_lit(out: &mut String, s: &str) {
    out.push('"');
    for &b in s.as_bytes() {
        match b {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            0x20..=0x7E => out.push(b as char),
            _ => {
                let _ = write!(out, "\\{b:02X}");
            }
        }
    }
    out.push('"');
}

/// Writes `@name`, quoting names that are not bare identifiers.
pub(crate) fn write_symbol(out: &mut String, s: &str) {
    out.push('@');
    let bare = s.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '$' | '.'));
    if bare {
        out.push_str(s);
    } else {
        write_str_lit(out, s);
    }
}

/// `model.py:12 in forward` → (`model.py`, 12).
fn split_source(s: &str) -> Option<(&str, u32)> {
    let s = s.split(" in ").next()?.trim();
    let (file, line) = s.rsplit_once(':')?;
    Some((file, line.trim().parse().ok()?))
}

impl<'m> Emitter<'m> {
    pub fn new(m: &'m Module, opts: &'m EmitOptions) -> Self {
        // Size the output once: ~160 bytes per op plus two hex digits per constant byte.
        let constant_bytes: usize = m
            .ops
            .values()
            .filter(|o| o.opcode() == Opcode::Constant && o.block().is_some())
            .filter_map(|o| tpuc_ir::payload::Constant::of(&o.attrs).map(|c| c.value))
            .map(|t| if t.is_splat() { 0 } else { t.raw_bytes().len() })
            .sum();
        Emitter {
            m,
            opts,
            out: String::with_capacity(256 + 160 * m.ops.len() + 2 * constant_bytes),
            scratch: String::new(),
            next: 0,
            names: SecondaryMap::with_default(V::Undef),
            depth: 0,
            cur_op: None,
            cur_loc: None,
            loc_alias: SecondaryMap::with_default(u32::MAX),
            loc_order: Vec::new(),
            decompositions: Default::default(),
        }
    }

    pub fn finish(self) -> String {
        self.out
    }

    // ---- module structure

    pub fn module(&mut self) -> Result<(), EmitError> {
        if self.opts.module_name.is_empty() {
            self.out.push_str("module {\n");
        } else {
            self.out.push_str("module ");
            write_symbol(&mut self.out, &self.opts.module_name);
            self.out.push_str(" {\n");
        }
        if let Some(mesh) = &self.m.mesh {
            self.out.push_str("  sdy.mesh @mesh = <[");
            for (i, (name, size)) in mesh.axes.iter().enumerate() {
                if i > 0 {
                    self.out.push_str(", ");
                }
                write_str_lit(&mut self.out, name);
                let _ = write!(self.out, "={size}");
            }
            self.out.push_str("]>\n");
        }
        let main = self.m.main_func().map(|f| f as *const _);
        for fi in 0..self.m.funcs.len() {
            let is_main = main == Some(&self.m.funcs[fi] as *const _);
            self.func(fi, is_main)?;
        }
        for f in std::mem::take(&mut self.decompositions.funcs) {
            self.out.push_str(&f);
        }
        self.out.push_str("}\n");
        for (i, &l) in self.loc_order.iter().enumerate() {
            let loc = &self.m.locs[l];
            let _ = write!(self.out, "#loc{i} = loc(");
            write_str_lit(&mut self.out, &loc.node);
            if let Some((file, line)) = loc.source.as_deref().and_then(split_source) {
                self.out.push('(');
                write_str_lit(&mut self.out, file);
                let _ = write!(self.out, ":{line}:0)");
            }
            self.out.push_str(")\n");
        }
        Ok(())
    }

    /// `, sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>` for a value of rank `rank` split by
    /// `dims` (`None`: replicated), when the module is sharded; `what` names it in errors. The
    /// leading comma is left out when the dictionary has nothing before it.
    fn sdy_sharding(&mut self, what: &str, dims: Option<&Vec<Vec<String>>>, rank: usize) -> Result<(), EmitError> {
        if self.m.mesh.is_none() {
            return Ok(());
        }
        if let Some(d) = dims {
            if d.len() != rank {
                return Err(EmitError::Sharding(format!("{what} has rank {rank}, its sharding names {} dims", d.len())));
            }
        }
        if !self.out.ends_with('{') {
            self.out.push_str(", ");
        }
        self.out.push_str("sdy.sharding = #sdy.sharding<@mesh, [");
        for i in 0..rank {
            if i > 0 {
                self.out.push_str(", ");
            }
            self.out.push('{');
            for (j, axis) in dims.map_or(&[][..], |d| &d[i][..]).iter().enumerate() {
                if j > 0 {
                    self.out.push_str(", ");
                }
                write_str_lit(&mut self.out, axis);
            }
            self.out.push('}');
        }
        self.out.push_str("]>");
        Ok(())
    }

    /// The sharding of main's argument / result `index`, if any.
    fn arg_dims(&self, index: usize) -> Option<&'m Vec<Vec<String>>> {
        self.m.main_func()?.args().get(index)?.sharding.as_ref()
    }
    fn result_dims(&self, index: usize) -> Option<&'m Vec<Vec<String>>> {
        self.m.main_func()?.results().get(index)?.sharding.as_ref()
    }

    fn func(&mut self, fi: usize, is_main: bool) -> Result<(), EmitError> {
        let m = self.m;
        let f = &m.funcs[fi];
        let entry = m.entry_block(f);
        self.next = 0;
        self.cur_op = None;
        self.cur_loc = None;
        self.out.push_str(if is_main {
            "  func.func public "
        } else {
            "  func.func private "
        });
        write_symbol(&mut self.out, if is_main { "main" } else { &f.name });
        self.out.push('(');
        let aliases = if is_main && self.opts.donate_state { m.state_aliases() } else { Vec::new() };
        for (i, &a) in m.blocks[entry].args().iter().enumerate() {
            if i > 0 {
                self.out.push_str(", ");
            }
            self.names.set(a, V::Arg(i as u32));
            let _ = write!(self.out, "%arg{i}: ");
            let t = self.ty_of(a);
            self.ty(&t);
            if let Some(info) = f.args.get(i) {
                let _ = write!(
                    self.out,
                    " {{tpuc.kind = \"{}\", tpuc.name = ",
                    info.kind.name()
                );
                write_str_lit(&mut self.out, &info.name);
                if is_main {
                    self.sdy_sharding(&format!("`{}`", info.name), self.arg_dims(i), t.rank())?;
                }
                if let Some(&(_, result)) = aliases.iter().find(|&&(arg, _)| arg == i) {
                    let _ = write!(self.out, ", tf.aliasing_output = {result} : i32");
                }
                self.out.push('}');
            } else if is_main && self.m.mesh.is_some() {
                self.out.push_str(" {");
                self.sdy_sharding(&format!("argument {i}"), self.arg_dims(i), t.rank())?;
                self.out.push('}');
            }
        }
        self.out.push(')');
        let ret = m.terminator(entry).filter(|&o| m.op(o).opcode() == Opcode::Return);
        let ret_vals: &[ValueId] = ret.map_or(&[], |o| m.op(o).operands());
        if !ret_vals.is_empty() {
            self.out.push_str(" -> (");
            for (i, &v) in ret_vals.iter().enumerate() {
                if i > 0 {
                    self.out.push_str(", ");
                }
                let t = self.ty_of(v);
                self.ty(&t);
                if let Some(info) = f.results().get(i) {
                    let _ = write!(
                        self.out,
                        " {{tpuc.kind = \"{}\", tpuc.name = ",
                        info.kind.name()
                    );
                    write_str_lit(&mut self.out, &info.name);
                    if is_main {
                        self.sdy_sharding(&format!("result {i}"), self.result_dims(i), t.rank())?;
                    }
                    self.out.push('}');
                } else if is_main && self.m.mesh.is_some() {
                    self.out.push_str(" {");
                    self.sdy_sharding(&format!("result {i}"), self.result_dims(i), t.rank())?;
                    self.out.push('}');
                }
            }
            self.out.push(')');
        }
        self.out.push_str(" {\n");
        self.depth = 2;
        for op in m.ops_in(entry) {
            self.set_op(op);
            if m.op(op).opcode() == Opcode::Return {
                self.indent();
                self.out.push_str("return");
                for (i, &v) in m.op(op).operands().iter().enumerate() {
                    self.out.push_str(if i == 0 { " " } else { ", " });
                    let n = self.get(v);
                    self.val(n);
                }
                for (i, &v) in m.op(op).operands().iter().enumerate() {
                    self.out.push_str(if i == 0 { " : " } else { ", " });
                    let t = self.ty_of(v);
                    self.ty(&t);
                }
                self.end();
            } else {
                self.lower_op(op)?;
            }
        }
        self.out.push_str("  }\n");
        Ok(())
    }

    pub(crate) fn set_op(&mut self, op: OpId) {
        self.cur_op = Some(op);
        self.cur_loc = None;
        if !self.opts.debug_locations {
            return;
        }
        if let Some(l) = *self.m.op_locs.get(op) {
            let mut id = self.loc_alias[l];
            if id == u32::MAX {
                id = self.loc_order.len() as u32;
                self.loc_order.push(l);
                self.loc_alias.set(l, id);
            }
            self.cur_loc = Some(id);
        }
    }

    // ---- IR values

    /// The static type of an IR value (checked by [`check_static`]).
    pub fn ty_of(&self, v: ValueId) -> Ty {
        let t = self.m.value_type(v);
        Ty {
            dt: t.dtype,
            dims: t.dims.iter().map(|d| d.as_static().unwrap_or(-1)).collect(),
        }
    }

    pub fn get(&self, v: ValueId) -> V {
        self.names[v]
    }

    pub fn set(&mut self, v: ValueId, name: V) {
        self.names.set(v, name);
    }

    pub fn unsupported(&self, reason: impl Into<String>) -> EmitError {
        let op = self.cur_op.expect("lowering an op");
        EmitError::Unsupported {
            opcode: self.m.op(op).opcode(),
            context: op_context(self.m, op),
            reason: reason.into(),
        }
    }

    // ---- low-level writing

    fn indent(&mut self) {
        for _ in 0..self.depth {
            self.out.push_str("  ");
        }
    }

    /// Starts `%N = ` and returns `%N`.
    pub fn def(&mut self) -> V {
        self.indent();
        let n = self.next;
        self.next += 1;
        let _ = write!(self.out, "%{n} = ");
        V::N(n)
    }

    /// Starts `%N:k = ` and returns `N`.
    pub fn def_multi(&mut self, k: usize) -> u32 {
        self.indent();
        let n = self.next;
        self.next += 1;
        let _ = write!(self.out, "%{n}:{k} = ");
        n
    }

    /// Ends an op line (with its location).
    pub fn end(&mut self) {
        if let Some(id) = self.cur_loc {
            let _ = write!(self.out, " loc(#loc{id})");
        }
        self.out.push('\n');
    }

    pub fn s(&mut self, s: &str) {
        self.out.push_str(s);
    }

    pub fn val(&mut self, v: V) {
        let _ = match v {
            V::Undef => write!(self.out, "%undef"),
            V::Arg(i) => write!(self.out, "%arg{i}"),
            V::N(n) => write!(self.out, "%{n}"),
            V::Res(n, i) => write!(self.out, "%{n}#{i}"),
        };
    }

    pub fn ty(&mut self, t: &Ty) {
        self.out.push_str("tensor<");
        for d in &t.dims {
            let _ = write!(self.out, "{d}x");
        }
        self.out.push_str(t.dt.mlir_name());
        self.out.push('>');
    }

    /// `(t1, t2) -> r`
    pub fn fn_ty(&mut self, args: &[&Ty], result: &Ty) {
        self.out.push('(');
        for (i, t) in args.iter().enumerate() {
            if i > 0 {
                self.out.push_str(", ");
            }
            self.ty(t);
        }
        self.out.push_str(") -> ");
        self.ty(result);
    }

    /// `[1, 2, 3]`
    pub fn ints(&mut self, v: &[i64]) {
        self.out.push('[');
        for (i, x) in v.iter().enumerate() {
            if i > 0 {
                self.out.push_str(", ");
            }
            let _ = write!(self.out, "{x}");
        }
        self.out.push(']');
    }

    /// The body of a `#stablehlo.gather<...>` / `#stablehlo.scatter<...>` attribute: each
    /// non-empty list as `name = [..]`, then `index_vector_dim = N`.
    pub fn dimension_numbers(&mut self, lists: &[(&str, &[i64])], index_vector_dim: i64) {
        for &(name, v) in lists {
            if !v.is_empty() {
                self.out.push_str(name);
                self.out.push_str(" = ");
                self.ints(v);
                self.out.push_str(", ");
            }
        }
        let _ = write!(self.out, "index_vector_dim = {index_vector_dim}");
    }

    /// `array<i64: 1, 2>`
    pub fn array_i64(&mut self, v: &[i64]) {
        self.out.push_str("array<i64");
        for (i, x) in v.iter().enumerate() {
            self.out.push_str(if i == 0 { ": " } else { ", " });
            let _ = write!(self.out, "{x}");
        }
        self.out.push('>');
    }

    /// `dense<[[0, 0], [1, 1]]> : tensor<2x2xi64>` from a flat [lo0, hi0, lo1, hi1, ...] list.
    pub fn padding_attr(&mut self, pad: &[i64]) {
        let n = pad.len() / 2;
        if n == 0 {
            self.out.push_str("dense<> : tensor<0x2xi64>");
            return;
        }
        self.out.push_str("dense<[");
        for i in 0..n {
            if i > 0 {
                self.out.push_str(", ");
            }
            let _ = write!(self.out, "[{}, {}]", pad[2 * i], pad[2 * i + 1]);
        }
        let _ = write!(self.out, "]> : tensor<{n}x2xi64>");
    }

    // ---- constants

    /// `%N = stablehlo.constant dense<lit> : ty`
    pub fn splat(&mut self, ty: &Ty, lit: Lit) -> V {
        let bytes = lit_bytes(lit, ty.dt);
        self.splat_bytes(ty, &bytes)
    }

    fn splat_bytes(&mut self, ty: &Ty, raw: &[u8]) -> V {
        let r = self.def();
        self.out.push_str("stablehlo.constant dense<");
        if ty.num_elements() != 0 {
            write_elem(&mut self.out, &mut self.scratch, ty.dt, raw);
        }
        self.out.push_str("> : ");
        self.ty(ty);
        self.end();
        r
    }

    /// The IR's `constant`: one repeated element (a splat, or dense data whose elements are all
    /// equal) as a literal, everything else as little-endian hex.
    pub fn constant(&mut self, data: &TensorData, ty: &Ty) -> V {
        let raw = data.raw_bytes();
        let size = ty.dt.size_bytes();
        if data.is_splat() || ty.num_elements() == 0 {
            return self.splat_bytes(ty, raw);
        }
        // Real weights differ within the first elements, so this scan stops early for them.
        let first = &raw[..size];
        if raw.chunks_exact(size).all(|e| e == first) {
            return self.splat_bytes(ty, first);
        }
        let r = self.def();
        self.out.push_str("stablehlo.constant dense<\"0x");
        write_hex(&mut self.out, data.raw_bytes());
        self.out.push_str("\"> : ");
        self.ty(ty);
        self.end();
        r
    }

    // ---- ops

    /// `stablehlo.<op> %x : ty` (result type = operand type)
    pub fn unary(&mut self, op: &str, x: V, ty: &Ty) -> V {
        let r = self.def();
        self.out.push_str("stablehlo.");
        self.out.push_str(op);
        self.out.push(' ');
        self.val(x);
        self.out.push_str(" : ");
        self.ty(ty);
        self.end();
        r
    }

    /// `stablehlo.<op> %x : (in) -> out`
    pub fn unary_to(&mut self, op: &str, x: V, in_ty: &Ty, out_ty: &Ty) -> V {
        let r = self.def();
        self.out.push_str("stablehlo.");
        self.out.push_str(op);
        self.out.push(' ');
        self.val(x);
        self.out.push_str(" : ");
        self.fn_ty(&[in_ty], out_ty);
        self.end();
        r
    }

    /// `stablehlo.<op> %a, %b : ty`
    pub fn binary(&mut self, op: &str, a: V, b: V, ty: &Ty) -> V {
        let r = self.def();
        self.out.push_str("stablehlo.");
        self.out.push_str(op);
        self.out.push(' ');
        self.val(a);
        self.out.push_str(", ");
        self.val(b);
        self.out.push_str(" : ");
        self.ty(ty);
        self.end();
        r
    }

    /// `stablehlo.complex %re, %im : (parts, parts) -> complex`
    pub fn complex(&mut self, re: V, im: V, parts: &Ty, out: &Ty) -> V {
        let r = self.def();
        self.out.push_str("stablehlo.complex ");
        self.val(re);
        self.out.push_str(", ");
        self.val(im);
        self.out.push_str(" : ");
        self.fn_ty(&[parts, parts], out);
        self.end();
        r
    }

    /// `stablehlo.custom_call @target(args) {backend_config = ..} : (args) -> (results)`, the
    /// results numbered `%N#i` (a single result too); returns N.
    pub fn custom_call(&mut self, target: &str, args: &[V], arg_tys: &[Ty], results: &[&Ty], config: Option<&str>) -> u32 {
        let n = self.def_multi(results.len());
        let _ = write!(self.out, "stablehlo.custom_call @{target}(");
        for (i, &a) in args.iter().enumerate() {
            if i > 0 {
                self.out.push_str(", ");
            }
            self.val(a);
        }
        self.out.push(')');
        if let Some(c) = config {
            let _ = write!(self.out, " {{backend_config = \"{c}\"}}");
        }
        self.out.push_str(" : (");
        for (i, t) in arg_tys.iter().enumerate() {
            if i > 0 {
                self.out.push_str(", ");
            }
            self.ty(t);
        }
        self.out.push_str(") -> (");
        for (i, t) in results.iter().enumerate() {
            if i > 0 {
                self.out.push_str(", ");
            }
            self.ty(t);
        }
        self.out.push(')');
        self.end();
        n
    }

    /// `stablehlo.cholesky %a, lower = B : ty`
    pub fn cholesky(&mut self, a: V, lower: bool, ty: &Ty) -> V {
        let r = self.def();
        self.out.push_str("stablehlo.cholesky ");
        self.val(a);
        let _ = write!(self.out, ", lower = {lower} : ");
        self.ty(ty);
        self.end();
        r
    }

    /// `stablehlo.triangular_solve` (generic form); `flags` are left_side, lower,
    /// unit_diagonal and transpose_a.
    pub fn triangular_solve(&mut self, a: V, b: V, flags: [bool; 4], a_ty: &Ty, b_ty: &Ty) -> V {
        let [left, lower, unit, transpose] = flags;
        let r = self.def();
        self.out.push_str("\"stablehlo.triangular_solve\"(");
        self.val(a);
        self.out.push_str(", ");
        self.val(b);
        let t = if transpose { "TRANSPOSE" } else { "NO_TRANSPOSE" };
        let _ = write!(
            self.out,
            ") {{left_side = {left}, lower = {lower}, unit_diagonal = {unit}, transpose_a = #stablehlo<transpose {t}>}} : "
        );
        self.fn_ty(&[a_ty, b_ty], b_ty);
        self.end();
        r
    }

    /// `stablehlo.fft %x, type = T, length = [..] : (in) -> out`
    pub fn fft(&mut self, x: V, fft_type: &str, length: &[i64], in_ty: &Ty, out_ty: &Ty) -> V {
        let r = self.def();
        self.out.push_str("stablehlo.fft ");
        self.val(x);
        let lens: Vec<String> = length.iter().map(|n| n.to_string()).collect();
        let _ = write!(self.out, ", type = {fft_type}, length = [{}] : ", lens.join(", "));
        self.fn_ty(&[in_ty], out_ty);
        self.end();
        r
    }

    /// `stablehlo.compare DIR, %a, %b, TYPE` with the comparison type of the operands' dtype.
    pub fn compare(&mut self, dir: &str, a: V, b: V, ty: &Ty) -> V {
        let r = self.def();
        let _ = write!(self.out, "stablehlo.compare {dir}, ");
        self.val(a);
        self.out.push_str(", ");
        self.val(b);
        let _ = write!(self.out, ", {} : ", compare_type(ty.dt));
        self.fn_ty(&[ty, ty], &ty.with_dt(DType::Bool));
        self.end();
        r
    }

    /// `stablehlo.select %p, %a, %b` (p: bool of `ty`'s shape)
    pub fn select(&mut self, p: V, a: V, b: V, ty: &Ty) -> V {
        let r = self.def();
        self.out.push_str("stablehlo.select ");
        self.val(p);
        self.out.push_str(", ");
        self.val(a);
        self.out.push_str(", ");
        self.val(b);
        self.out.push_str(" : ");
        self.ty(&ty.with_dt(DType::Bool));
        self.out.push_str(", ");
        self.ty(ty);
        self.end();
        r
    }

    /// `stablehlo.clamp %lo, %x, %hi` with scalar bounds.
    pub fn clamp(&mut self, lo: V, x: V, hi: V, ty: &Ty) -> V {
        let r = self.def();
        self.out.push_str("stablehlo.clamp ");
        self.val(lo);
        self.out.push_str(", ");
        self.val(x);
        self.out.push_str(", ");
        self.val(hi);
        self.out.push_str(" : ");
        let s = Ty::scalar(ty.dt);
        self.fn_ty(&[&s, ty, &s], ty);
        self.end();
        r
    }

    /// `stablehlo.convert`, or `x` itself when the dtype is already `dt`.
    pub fn convert(&mut self, x: V, ty: &Ty, dt: DType) -> V {
        if ty.dt == dt {
            return x;
        }
        self.unary_to("convert", x, ty, &ty.with_dt(dt))
    }

    /// `stablehlo.reshape`, or `x` itself when the shape is unchanged.
    pub fn reshape(&mut self, x: V, ty: &Ty, to: &Ty) -> V {
        if ty == to {
            return x;
        }
        self.unary_to("reshape", x, ty, to)
    }

    pub fn broadcast_in_dim(&mut self, x: V, ty: &Ty, dims: &[i64], to: &Ty) -> V {
        if ty == to && dims.iter().enumerate().all(|(i, &d)| d == i as i64) {
            return x;
        }
        let r = self.def();
        self.out.push_str("stablehlo.broadcast_in_dim ");
        self.val(x);
        self.out.push_str(", dims = ");
        self.ints(dims);
        self.out.push_str(" : ");
        self.fn_ty(&[ty], to);
        self.end();
        r
    }

    pub fn transpose(&mut self, x: V, ty: &Ty, perm: &[i64], to: &Ty) -> V {
        let r = self.def();
        self.out.push_str("stablehlo.transpose ");
        self.val(x);
        self.out.push_str(", dims = ");
        self.ints(perm);
        self.out.push_str(" : ");
        self.fn_ty(&[ty], to);
        self.end();
        r
    }

    pub fn iota(&mut self, dim: i64, ty: &Ty) -> V {
        let r = self.def();
        let _ = write!(self.out, "stablehlo.iota dim = {dim} : ");
        self.ty(ty);
        self.end();
        r
    }

    /// `stablehlo.dot_general` with optional batching dims and precision.
    #[allow(clippy::too_many_arguments)]
    pub fn dot_general(
        &mut self,
        a: V,
        b: V,
        (ta, tb): (&Ty, &Ty),
        (lb, rb): (&[i64], &[i64]),
        (lc, rc): (&[i64], &[i64]),
        precision: Option<&str>,
        to: &Ty,
    ) -> V {
        let r = self.def();
        self.out.push_str("stablehlo.dot_general ");
        self.val(a);
        self.out.push_str(", ");
        self.val(b);
        if !lb.is_empty() {
            self.out.push_str(", batching_dims = ");
            self.ints(lb);
            self.out.push_str(" x ");
            self.ints(rb);
        }
        self.out.push_str(", contracting_dims = ");
        self.ints(lc);
        self.out.push_str(" x ");
        self.ints(rc);
        if let Some(p) = precision {
            let _ = write!(self.out, ", precision = [{p}, {p}]");
        }
        self.out.push_str(" : ");
        self.fn_ty(&[ta, tb], to);
        self.end();
        r
    }

    /// `stablehlo.reduce(%x init: %i) applies stablehlo.<body> across dimensions = [...]`
    pub fn reduce_applies(
        &mut self,
        x: V,
        ty: &Ty,
        init: V,
        body: &str,
        dims: &[i64],
        to: &Ty,
    ) -> V {
        let r = self.def();
        self.out.push_str("stablehlo.reduce(");
        self.val(x);
        self.out.push_str(" init: ");
        self.val(init);
        let _ = write!(self.out, ") applies stablehlo.{body} across dimensions = ");
        self.ints(dims);
        self.out.push_str(" : ");
        self.fn_ty(&[ty, &Ty::scalar(ty.dt)], to);
        self.end();
        r
    }

    // ---- regions (generic op form)

    /// Opens `({` + newline and writes `^bb0(args):`; returns the block arguments. Body ops
    /// written afterwards are indented one level deeper.
    pub fn region_begin(&mut self, args: &[&Ty]) -> SmallVec<[V; 4]> {
        self.out.push_str("({\n");
        self.block_header(args)
    }

    /// Between two regions of one op: `}, {` and the next block header.
    pub fn region_next(&mut self, args: &[&Ty]) -> SmallVec<[V; 4]> {
        self.depth -= 1;
        self.indent();
        self.out.push_str("}, {\n");
        self.block_header(args)
    }

    fn block_header(&mut self, args: &[&Ty]) -> SmallVec<[V; 4]> {
        self.indent();
        self.out.push_str("^bb0(");
        let mut vs = SmallVec::new();
        for (i, t) in args.iter().enumerate() {
            if i > 0 {
                self.out.push_str(", ");
            }
            let n = self.next;
            self.next += 1;
            let _ = write!(self.out, "%{n}: ");
            self.ty(t);
            vs.push(V::N(n));
        }
        self.out.push_str("):\n");
        self.depth += 1;
        vs
    }

    /// `stablehlo.return %a, ... : t, ...` inside a region.
    pub fn region_return(&mut self, vals: &[(V, &Ty)]) {
        self.indent();
        self.out.push_str("stablehlo.return");
        for (i, (v, _)) in vals.iter().enumerate() {
            self.out.push_str(if i == 0 { " " } else { ", " });
            self.val(*v);
        }
        for (i, (_, t)) in vals.iter().enumerate() {
            self.out.push_str(if i == 0 { " : " } else { ", " });
            self.ty(t);
        }
        self.end();
    }

    /// Closes the last region: `})` (the caller writes the op's type and ends the line).
    pub fn region_end(&mut self) {
        self.depth -= 1;
        self.indent();
        self.out.push_str("})");
    }

    /// The `reducer(...) (...) {` form of a variadic reduce: writes the header with the block
    /// arguments grouped per input (lhs_i, rhs_i); returns (lhs values, rhs values).
    pub fn reducer_begin(&mut self, tys: &[&Ty]) -> (SmallVec<[V; 4]>, SmallVec<[V; 4]>) {
        self.out.push('\n');
        self.indent();
        self.out.push_str(" reducer");
        let (mut lhs, mut rhs) = (SmallVec::new(), SmallVec::new());
        for t in tys {
            let (a, b) = (self.next, self.next + 1);
            self.next += 2;
            let _ = write!(self.out, "(%{a}: ");
            self.ty(t);
            let _ = write!(self.out, ", %{b}: ");
            self.ty(t);
            self.out.push_str(") ");
            lhs.push(V::N(a));
            rhs.push(V::N(b));
        }
        self.out.push_str("{\n");
        self.depth += 1;
        (lhs, rhs)
    }

    /// Closes a `reducer` body.
    pub fn reducer_end(&mut self) {
        self.depth -= 1;
        self.indent();
        self.out.push('}');
        self.end();
    }
}

/// The comparison type of a dtype.
pub(crate) fn compare_type(dt: DType) -> &'static str {
    if dt.is_float() || dt.is_complex() {
        "FLOAT"
    } else if dt.is_signed_int() {
        "SIGNED"
    } else {
        "UNSIGNED"
    }
}
