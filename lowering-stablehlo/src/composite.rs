//! The IR's `composite` op → `stablehlo.composite`.
//!
//! ```text
//! %3 = stablehlo.composite "tpuc.gelu" %2 {composite_attributes = {approximate = "tanh"}, decomposition = @tpuc.gelu.impl0} : (tensor<2x8xf32>) -> tensor<2x8xf32>
//! ...
//! func.func private @tpuc.gelu.impl0(%arg0: tensor<2x8xf32>) -> (tensor<2x8xf32>) { ... }
//! ```
//!
//! The op's region becomes a private function (the decomposition) written after the module's
//! own functions. Composites whose decompositions print identically share one function, so a
//! model with twelve identical layers carries one attention body, not twelve. Every attribute
//! but `name` is a composite attribute: bools, 64-bit ints, f64 floats, strings, `array<i64>`s.

use crate::emitter::{write_str_lit, write_symbol, Emitter, V};
use crate::EmitError;
use smallvec::SmallVec;
use std::collections::HashMap;
use std::fmt::Write;
use tpuc_ir::{Attr, OpId, Opcode};

/// Placeholder for the function name while a body is written (names are chosen after
/// deduplication).
const NAME_MARK: &str = "@__tpuc_decomposition__";

/// The decomposition functions written so far.
#[derive(Default)]
pub(crate) struct Decompositions {
    /// Function texts in order of first use.
    pub funcs: Vec<String>,
    /// Body text (with the placeholder name) → function name.
    by_body: HashMap<String, String>,
    /// Functions per composite name, for numbering.
    count: HashMap<String, usize>,
}

/// An MLIR float literal (always with a `.` or an exponent MLIR reads as a float).
fn float_lit(out: &mut String, f: f64) {
    if f.is_finite() {
        let s = format!("{f:?}");
        if s.contains('.') {
            out.push_str(&s);
        } else if let Some((m, e)) = s.split_once('e') {
            let _ = write!(out, "{m}.0e{e}");
        } else {
            let _ = write!(out, "{s}.0");
        }
    } else {
        let _ = write!(out, "0x{:016X}", f.to_bits());
    }
    out.push_str(" : f64");
}

fn write_attr(out: &mut String, a: &Attr) -> bool {
    match a {
        Attr::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Attr::Int(i) => {
            let _ = write!(out, "{i} : i64");
        }
        Attr::Float(f) => float_lit(out, *f),
        Attr::Str(s) => write_str_lit(out, s),
        Attr::Ints(v) => {
            out.push_str("array<i64");
            for (i, x) in v.iter().enumerate() {
                out.push_str(if i == 0 { ": " } else { ", " });
                let _ = write!(out, "{x}");
            }
            out.push('>');
        }
        Attr::DType(d) => out.push_str(d.mlir_name()),
        // Tensors are not composite attributes tpuc writes.
        Attr::Tensor(_) => return false,
    }
    true
}

impl Emitter<'_> {
    /// Lowers a `composite`: writes (or reuses) its decomposition function, then the call.
    pub(crate) fn composite(&mut self, op: OpId) -> Result<SmallVec<[V; 3]>, EmitError> {
        let m = self.m;
        let d = m.op(op);
        let name = d.payload::<tpuc_ir::payload::Composite>().name.to_string();
        let block = m.regions[d.regions()[0]].blocks()[0];

        // The decomposition, into a side buffer with its own SSA numbering.
        let saved_out = std::mem::take(&mut self.out);
        let (saved_next, saved_depth, saved_loc) = (self.next, self.depth, self.cur_loc);
        self.next = 0;
        self.out.push_str("  func.func private ");
        self.out.push_str(NAME_MARK);
        self.out.push('(');
        for (i, &a) in m.blocks[block].args().iter().enumerate() {
            if i > 0 {
                self.out.push_str(", ");
            }
            self.set(a, V::Arg(i as u32));
            let _ = write!(self.out, "%arg{i}: ");
            let t = self.ty_of(a);
            self.ty(&t);
        }
        self.out.push_str(") -> (");
        for (i, &r) in d.results().iter().enumerate() {
            if i > 0 {
                self.out.push_str(", ");
            }
            let t = self.ty_of(r);
            self.ty(&t);
        }
        self.out.push_str(") {\n");
        self.depth = 2;
        let mut result = Ok(());
        for inner in m.ops_in(block) {
            self.set_op(inner);
            if m.op(inner).opcode() == Opcode::Yield {
                self.out.push_str("    return");
                for (i, &v) in m.op(inner).operands().iter().enumerate() {
                    self.out.push_str(if i == 0 { " " } else { ", " });
                    let n = self.get(v);
                    self.val(n);
                }
                for (i, &v) in m.op(inner).operands().iter().enumerate() {
                    self.out.push_str(if i == 0 { " : " } else { ", " });
                    let t = self.ty_of(v);
                    self.ty(&t);
                }
                self.end();
            } else if let Err(e) = self.lower_op(inner) {
                result = Err(e);
                break;
            }
        }
        self.out.push_str("  }\n");
        let body = std::mem::replace(&mut self.out, saved_out);
        self.next = saved_next;
        self.depth = saved_depth;
        self.set_op(op);
        self.cur_loc = saved_loc;
        result?;

        let fname = match self.decompositions.by_body.get(&body) {
            Some(f) => f.clone(),
            None => {
                let k = self.decompositions.count.entry(name.clone()).or_insert(0);
                let f = format!("{name}.impl{k}");
                *k += 1;
                let mut sym = String::new();
                write_symbol(&mut sym, &f);
                self.decompositions.funcs.push(body.replacen(NAME_MARK, &sym, 1));
                self.decompositions.by_body.insert(body, f.clone());
                f
            }
        };

        // The call.
        let n = d.results().len();
        let results: SmallVec<[V; 3]> = if n == 1 {
            smallvec::smallvec![self.def()]
        } else {
            let base = self.def_multi(n);
            (0..n as u32).map(|i| V::Res(base, i)).collect()
        };
        self.s("stablehlo.composite ");
        write_str_lit(&mut self.out, &name);
        for (i, &v) in d.operands().iter().enumerate() {
            self.s(if i == 0 { " " } else { ", " });
            let x = self.get(v);
            self.val(x);
        }
        self.s(" {");
        let mut attrs = String::new();
        for (k, a) in d.attrs.iter().filter(|(k, _)| *k != "name") {
            let mut one = String::new();
            if write_attr(&mut one, a) {
                attrs.push_str(if attrs.is_empty() { "" } else { ", " });
                let _ = write!(attrs, "{k} = {one}");
            }
        }
        if !attrs.is_empty() {
            let _ = write!(self.out, "composite_attributes = {{{attrs}}}, ");
        }
        self.s("decomposition = ");
        write_symbol(&mut self.out, &fname);
        self.s("} : (");
        for (i, &v) in d.operands().iter().enumerate() {
            if i > 0 {
                self.s(", ");
            }
            let t = self.ty_of(v);
            self.ty(&t);
        }
        self.s(") -> ");
        if n != 1 {
            self.s("(");
        }
        for (i, &r) in d.results().iter().enumerate() {
            if i > 0 {
                self.s(", ");
            }
            let t = self.ty_of(r);
            self.ty(&t);
        }
        if n != 1 {
            self.s(")");
        }
        self.end();
        Ok(results)
    }
}
