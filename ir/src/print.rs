//! The IR text form (printer). [`crate::parse`] reads it back; print → parse → print is the
//! identity.
//!
//! ```text
//! module {
//!   symbol @s0 : [2, 64]
//!   func @main(%0: tensor<s0x16xf32> {kind = "input", name = "x"}) -> (tensor<s0x16xf32> {kind = "output", name = "out"}) {
//!     %1 = neg %0 : tensor<s0x16xf32> loc(#0)
//!     return %1
//!   }
//! }
//! #0 = loc("neg", "torch.ops.aten.neg.default", "model.py:3 in forward")
//! ```
//!
//! Values are renumbered `%0, %1, ...` in print order, blocks `^bb0, ...` per region, and
//! locations `#0, #1, ...` in order of first use, so the output does not depend on arena order.

use crate::attr::{Attr, Attrs, Scalar, TensorData};
use crate::dtype::DType;
use crate::module::{BlockId, LocId, Module, OpId, RegionId, ValueId};
use crate::entity::SecondaryMap;
use std::fmt::Write;

/// Prints a module in the text form.
pub fn print_module(m: &Module) -> String {
    let mut p = Printer { m, out: String::new(), names: SecondaryMap::with_default(u32::MAX), next: 0, locs: Vec::new(), loc_ids: SecondaryMap::with_default(u32::MAX) };
    p.module();
    p.out
}

struct Printer<'m> {
    m: &'m Module,
    out: String,
    names: SecondaryMap<ValueId, u32>,
    next: u32,
    locs: Vec<LocId>,
    loc_ids: SecondaryMap<LocId, u32>,
}

impl Printer<'_> {
    fn module(&mut self) {
        self.out.push_str("module {\n");
        for s in self.m.symbols.iter() {
            let max = s.max.map_or("inf".to_string(), |v| v.to_string());
            let _ = writeln!(self.out, "  symbol @{} : [{}, {}]", s.name, s.min, max);
        }
        if let Some(mesh) = &self.m.mesh {
            let _ = writeln!(self.out, "  mesh {}", crate::sharding::mesh_text(&mesh.axes));
        }
        for fi in 0..self.m.funcs.len() {
            self.func(fi);
        }
        self.out.push_str("}\n");
        for (i, &l) in self.locs.iter().enumerate() {
            let loc = &self.m.locs[l];
            let _ = write!(self.out, "#{i} = loc({}, {}", quote(&loc.node), quote(&loc.target));
            if let Some(s) = &loc.source {
                let _ = write!(self.out, ", {}", quote(s));
            }
            self.out.push_str(")\n");
        }
    }

    fn name(&mut self, v: ValueId) -> u32 {
        let n = self.names[v];
        if n != u32::MAX {
            return n;
        }
        let n = self.next;
        self.next += 1;
        self.names.set(v, n);
        n
    }

    fn value(&mut self, v: ValueId) {
        let n = self.names[v];
        if n == u32::MAX {
            // A use before definition (invalid IR): print a marker the parser rejects.
            let _ = write!(self.out, "%<undefined {v}>");
        } else {
            let _ = write!(self.out, "%{n}");
        }
    }

    fn func(&mut self, fi: usize) {
        let f = &self.m.funcs[fi];
        let split = |d: &Option<crate::DimAxes>| {
            d.as_ref().map(|d| format!(", sharding = {}", crate::sharding::dim_axes_text(d))).unwrap_or_default()
        };
        let entry = self.m.regions[f.body].blocks.first().copied();
        let _ = write!(self.out, "  func @{}(", f.name);
        if let Some(b) = entry {
            for (i, &a) in self.m.blocks[b].args.iter().enumerate() {
                if i > 0 {
                    self.out.push_str(", ");
                }
                let n = self.name(a);
                let _ = write!(self.out, "%{n}: {}", self.m.values[a].ty);
                if let Some(info) = f.args.get(i) {
                    let s = split(&info.sharding);
                    let _ = write!(self.out, " {{kind = \"{}\", name = {}{s}}}", info.kind.name(), quote(&info.name));
                }
            }
        }
        self.out.push_str(") -> (");
        let ret_types: Vec<String> = entry
            .and_then(|b| self.m.terminator(b))
            .map(|op| self.m.ops[op].operands.iter().map(|&v| self.m.values[v].ty.to_string()).collect())
            .unwrap_or_default();
        for (i, t) in ret_types.iter().enumerate() {
            if i > 0 {
                self.out.push_str(", ");
            }
            self.out.push_str(t);
            if let Some(info) = f.results.get(i) {
                let _ = write!(self.out, " {{kind = \"{}\", name = {}", info.kind.name(), quote(&info.name));
                if let Some(l) = &info.layout {
                    let _ = write!(self.out, ", layout = {}", crate::layout::layout_text(l));
                }
                let _ = write!(self.out, "{}}}", split(&info.sharding));
            }
        }
        self.out.push_str(") {\n");
        if let Some(b) = entry {
            let m = self.m;
            for op in m.ops_in(b) {
                self.op(op, 2);
            }
        }
        self.out.push_str("  }\n");
    }

    fn indent(&mut self, depth: usize) {
        for _ in 0..depth {
            self.out.push_str("  ");
        }
    }

    fn op(&mut self, op: OpId, depth: usize) {
        let d = &self.m.ops[op];
        self.indent(depth);
        for (i, &r) in d.results.iter().enumerate() {
            if i > 0 {
                self.out.push_str(", ");
            }
            let n = self.name(r);
            let _ = write!(self.out, "%{n}");
        }
        if !d.results.is_empty() {
            self.out.push_str(" = ");
        }
        self.out.push_str(d.opcode.name());
        for (i, &v) in d.operands.iter().enumerate() {
            self.out.push_str(if i == 0 { " " } else { ", " });
            self.value(v);
        }
        if !d.attrs.is_empty() {
            self.out.push(' ');
            write_attrs(&mut self.out, &d.attrs);
        }
        if !d.regions.is_empty() {
            self.out.push_str(" (");
            for (i, &r) in d.regions.iter().enumerate() {
                if i > 0 {
                    self.out.push_str(", ");
                }
                self.region(r, depth);
            }
            self.out.push(')');
        }
        if !d.results.is_empty() {
            self.out.push_str(" : ");
            for (i, &r) in d.results.iter().enumerate() {
                if i > 0 {
                    self.out.push_str(", ");
                }
                let _ = write!(self.out, "{}", self.m.values[r].ty);
            }
        }
        if let Some(l) = *self.m.op_locs.get(op) {
            let mut id = self.loc_ids[l];
            if id == u32::MAX {
                id = self.locs.len() as u32;
                self.locs.push(l);
                self.loc_ids.set(l, id);
            }
            let _ = write!(self.out, " loc(#{id})");
        }
        self.out.push('\n');
    }

    fn region(&mut self, r: RegionId, depth: usize) {
        self.out.push_str("{\n");
        for (bi, &b) in self.m.regions[r].blocks.clone().iter().enumerate() {
            self.block_header(b, bi, depth);
            let m = self.m;
            for op in m.ops_in(b) {
                self.op(op, depth + 1);
            }
        }
        self.indent(depth);
        self.out.push('}');
    }

    fn block_header(&mut self, b: BlockId, index: usize, depth: usize) {
        self.indent(depth);
        let _ = write!(self.out, "^bb{index}(");
        for (i, &a) in self.m.blocks[b].args.clone().iter().enumerate() {
            if i > 0 {
                self.out.push_str(", ");
            }
            let n = self.name(a);
            let _ = write!(self.out, "%{n}: {}", self.m.values[a].ty);
        }
        self.out.push_str("):\n");
    }
}

/// Quotes a string with escapes the parser understands.
pub fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// `{a = 1, b = [1, 2]}`
pub fn write_attrs(out: &mut String, attrs: &Attrs) {
    out.push('{');
    for (i, (k, v)) in attrs.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        out.push_str(k);
        out.push_str(" = ");
        write_attr(out, v);
    }
    out.push('}');
}

pub fn write_attr(out: &mut String, a: &Attr) {
    match a {
        Attr::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Attr::Int(i) => {
            let _ = write!(out, "{i}");
        }
        Attr::Float(f) => write_float(out, *f),
        Attr::Str(s) => out.push_str(&quote(s)),
        Attr::Ints(v) => {
            out.push('[');
            for (i, x) in v.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                let _ = write!(out, "{x}");
            }
            out.push(']');
        }
        Attr::DType(d) => out.push_str(d.name()),
        Attr::Tensor(t) => write_tensor(out, t),
    }
}

/// Floats always carry a `.`, an exponent, or are `nan` / `inf` / `-inf`, so they never read
/// back as integers. Rust's shortest round-trip formatting keeps them exact.
pub fn write_float(out: &mut String, f: f64) {
    if f.is_nan() {
        out.push_str("nan");
    } else if f.is_infinite() {
        out.push_str(if f > 0.0 { "inf" } else { "-inf" });
    } else {
        let _ = write!(out, "{f:?}");
    }
}

/// `dense<1.5> : tensor<4xf32>` for splats, `dense<"0x0000803F..."> : tensor<...>` otherwise
/// (little-endian element bytes in hex).
pub fn write_tensor(out: &mut String, t: &TensorData) {
    out.push_str("dense<");
    if t.is_splat() {
        write_scalar(out, t.element(0), t.ty.dtype, t.raw_bytes());
    } else {
        out.push_str("\"0x");
        write_hex(out, t.raw_bytes());
        out.push('"');
    }
    let _ = write!(out, "> : {}", t.ty);
}

fn write_scalar(out: &mut String, s: Scalar, dtype: DType, raw: &[u8]) {
    match s {
        Scalar::Bool(b) => out.push_str(if b { "true" } else { "false" }),
        Scalar::Int(i) => {
            let _ = write!(out, "{i}");
        }
        Scalar::UInt(u) => {
            let _ = write!(out, "{u}");
        }
        Scalar::Float(f) if f.is_finite() && !dtype.is_complex() && Scalar::Float(f).to_bytes(dtype) == raw => {
            write_float(out, f)
        }
        Scalar::Float(_) => {
            // Non-finite values (NaN payloads) and complex splats: exact bits.
            out.push_str("\"0x");
            write_hex(out, raw);
            out.push('"');
        }
    }
}

pub fn write_hex(out: &mut String, bytes: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    out.reserve(bytes.len() * 2);
    for &b in bytes {
        out.push(HEX[(b >> 4) as usize] as char);
        out.push(HEX[(b & 15) as usize] as char);
    }
}
