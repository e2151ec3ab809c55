//! The IR text form (parser). Reads what [`crate::print`] writes.
//!
//! The parser checks syntax and name resolution only and builds ops without running shape
//! rules, so that [`crate::verify`] can report every broken rule of a hand-written module at
//! once. Errors carry the line and column.
//!
//! One file on purpose: one recursive-descent parser over one grammar (types, attributes,
//! ops, regions, metadata); its pieces call each other throughout.

use crate::attr::{Attr, Attrs, Scalar, TensorData};
use crate::dtype::DType;
use crate::layout::{DimLayout, Factor, Layout};
use crate::sharding::DimAxes;
use crate::module::{ArgInfo, ArgKind, BlockId, Loc, LocId, Module, OpId, RegionId, ResultInfo, ResultKind, ValueId};
use crate::opcode::Opcode;
use crate::sym::SymExpr;
use crate::types::{Dim, TensorType};
use bytes::Bytes;
use std::collections::HashMap;
use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ParseError {
    pub line: usize,
    pub col: usize,
    pub message: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.line, self.col, self.message)
    }
}

/// Parses a module from its text form.
pub fn parse_module(text: &str) -> Result<Module, ParseError> {
    let mut p = Parser { src: text.as_bytes(), text, pos: 0, m: Module::new(), values: HashMap::new(), pending_locs: Vec::new(), splits: Vec::new() };
    p.module()?;
    Ok(p.m)
}

/// Parses a tensor type such as `tensor<s0x(2*s0)xf32>`.
pub fn parse_tensor_type(text: &str) -> Result<TensorType, ParseError> {
    let mut p = Parser { src: text.as_bytes(), text, pos: 0, m: Module::new(), values: HashMap::new(), pending_locs: Vec::new(), splits: Vec::new() };
    let t = p.tensor_type()?;
    p.ws();
    if p.pos != p.src.len() {
        return Err(p.err("trailing characters after type"));
    }
    Ok(t)
}

/// Parses a symbolic expression such as `2*s0 + 1` or `floordiv(s0, 2)`.
pub fn parse_sym_expr(text: &str) -> Result<SymExpr, ParseError> {
    let mut p = Parser { src: text.as_bytes(), text, pos: 0, m: Module::new(), values: HashMap::new(), pending_locs: Vec::new(), splits: Vec::new() };
    let e = p.sym_expr()?;
    p.ws();
    if p.pos != p.src.len() {
        return Err(p.err("trailing characters after expression"));
    }
    Ok(e)
}

struct Parser<'a> {
    src: &'a [u8],
    text: &'a str,
    pos: usize,
    m: Module,
    values: HashMap<u32, ValueId>,
    pending_locs: Vec<(OpId, u32, usize)>,
    /// Each `sharding = [...]` in argument / result metadata: (function, position), checked
    /// once the module is read and `main` and the mesh are known.
    splits: Vec<(String, usize)>,
}

type PResult<T> = Result<T, ParseError>;

/// An argument's or result's metadata.
struct Meta {
    kind: String,
    name: String,
    layout: Option<Layout>,
    /// `sharding = ...` and where it was written.
    split: Option<(DimAxes, usize)>,
}

impl<'a> Parser<'a> {
    fn err(&self, message: impl Into<String>) -> ParseError {
        self.err_at(self.pos, message)
    }

    fn err_at(&self, mut pos: usize, message: impl Into<String>) -> ParseError {
        while pos < self.src.len() && self.src[pos].is_ascii_whitespace() {
            pos += 1;
        }
        let before = &self.src[..pos.min(self.src.len())];
        let line = before.iter().filter(|&&c| c == b'\n').count() + 1;
        let col = pos - before.iter().rposition(|&c| c == b'\n').map_or(0, |i| i + 1) + 1;
        ParseError { line, col, message: message.into() }
    }

    fn ws(&mut self) {
        while self.pos < self.src.len() {
            let c = self.src[self.pos];
            if c.is_ascii_whitespace() {
                self.pos += 1;
            } else if c == b'/' && self.src.get(self.pos + 1) == Some(&b'/') {
                while self.pos < self.src.len() && self.src[self.pos] != b'\n' {
                    self.pos += 1;
                }
            } else {
                break;
            }
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.src.get(self.pos).copied()
    }

    fn eat(&mut self, s: &str) -> bool {
        self.ws();
        if self.src[self.pos..].starts_with(s.as_bytes()) {
            self.pos += s.len();
            true
        } else {
            false
        }
    }

    fn expect(&mut self, s: &str) -> PResult<()> {
        if self.eat(s) {
            Ok(())
        } else {
            Err(self.err(format!("expected `{s}`, found {}", self.found())))
        }
    }

    fn found(&self) -> String {
        match self.src.get(self.pos) {
            None => "end of input".to_string(),
            Some(_) => {
                let rest = &self.text[self.pos..];
                let tok: String = rest.chars().take_while(|c| !c.is_whitespace()).take(20).collect();
                format!("`{tok}`")
            }
        }
    }

    fn ident(&mut self) -> PResult<&'a str> {
        self.ws();
        let start = self.pos;
        while self.pos < self.src.len() && (self.src[self.pos].is_ascii_alphanumeric() || self.src[self.pos] == b'_' || self.src[self.pos] == b'.') {
            self.pos += 1;
        }
        if start == self.pos || self.src[start].is_ascii_digit() {
            self.pos = start;
            return Err(self.err(format!("expected an identifier, found {}", self.found())));
        }
        Ok(&self.text[start..self.pos])
    }

    fn keyword(&mut self, kw: &str) -> PResult<()> {
        let start = self.pos;
        let id = self.ident()?;
        if id != kw {
            return Err(self.err_at(start, format!("expected `{kw}`, found `{id}`")));
        }
        Ok(())
    }

    fn int(&mut self) -> PResult<i64> {
        self.ws();
        let start = self.pos;
        if self.src.get(self.pos) == Some(&b'-') {
            self.pos += 1;
        }
        while self.pos < self.src.len() && self.src[self.pos].is_ascii_digit() {
            self.pos += 1;
        }
        self.text[start..self.pos].parse().map_err(|_| {
            self.pos = start;
            self.err(format!("expected an integer, found {}", self.found()))
        })
    }

    fn uint(&mut self) -> PResult<u32> {
        let start = self.pos;
        let v = self.int()?;
        u32::try_from(v).map_err(|_| self.err_at(start, "expected a small non-negative number"))
    }

    fn string(&mut self) -> PResult<String> {
        self.ws();
        if self.src.get(self.pos) != Some(&b'"') {
            return Err(self.err(format!("expected a string, found {}", self.found())));
        }
        self.pos += 1;
        let mut out = String::new();
        loop {
            let Some(c) = self.text[self.pos..].chars().next() else {
                return Err(self.err("unterminated string"));
            };
            self.pos += c.len_utf8();
            match c {
                '"' => return Ok(out),
                '\\' => {
                    let Some(e) = self.text[self.pos..].chars().next() else {
                        return Err(self.err("unterminated escape"));
                    };
                    self.pos += e.len_utf8();
                    match e {
                        'n' => out.push('\n'),
                        't' => out.push('\t'),
                        'r' => out.push('\r'),
                        '"' => out.push('"'),
                        '\\' => out.push('\\'),
                        '\'' => out.push('\''),
                        'u' => {
                            self.expect("{")?;
                            let start = self.pos;
                            while self.pos < self.src.len() && self.src[self.pos].is_ascii_hexdigit() {
                                self.pos += 1;
                            }
                            let code = u32::from_str_radix(&self.text[start..self.pos], 16)
                                .ok()
                                .and_then(char::from_u32)
                                .ok_or_else(|| self.err("bad \\u escape"))?;
                            out.push(code);
                            if self.src.get(self.pos) != Some(&b'}') {
                                return Err(self.err("bad \\u escape"));
                            }
                            self.pos += 1;
                        }
                        _ => return Err(self.err(format!("unknown escape `\\{e}`"))),
                    }
                }
                c => out.push(c),
            }
        }
    }

    // ---- module structure

    fn module(&mut self) -> PResult<()> {
        self.keyword("module")?;
        self.expect("{")?;
        loop {
            match self.peek() {
                Some(b'}') => {
                    self.pos += 1;
                    break;
                }
                None => return Err(self.err("expected `}` closing the module")),
                _ => {}
            }
            let start = self.pos;
            match self.ident()? {
                "symbol" => self.symbol()?,
                "mesh" => {
                    if self.m.mesh.is_some() {
                        return Err(self.err_at(start, "`mesh` declared twice"));
                    }
                    self.m.mesh = Some(crate::Mesh { axes: self.mesh_axes()? });
                }
                "func" => self.func()?,
                other => return Err(self.err_at(start, format!("expected `symbol`, `mesh` or `func`, found `{other}`"))),
            }
        }
        self.check_splits()?;
        let mut locs: HashMap<u32, LocId> = HashMap::new();
        while self.peek() == Some(b'#') {
            self.pos += 1;
            let n = self.uint()?;
            self.expect("=")?;
            self.keyword("loc")?;
            self.expect("(")?;
            let node = self.string()?;
            self.expect(",")?;
            let target = self.string()?;
            let source = if self.eat(",") { Some(self.string()?) } else { None };
            self.expect(")")?;
            let id = self.m.add_loc(Loc { node, target, source });
            if locs.insert(n, id).is_some() {
                return Err(self.err(format!("location #{n} defined twice")));
            }
        }
        if self.peek().is_some() {
            return Err(self.err(format!("unexpected {} after the module", self.found())));
        }
        for (op, n, pos) in std::mem::take(&mut self.pending_locs) {
            let id = *locs.get(&n).ok_or_else(|| self.err_at(pos, format!("location #{n} is not defined")))?;
            self.m.set_loc(op, Some(id));
        }
        Ok(())
    }

    fn symbol(&mut self) -> PResult<()> {
        self.expect("@")?;
        let name = self.ident()?;
        self.expect(":")?;
        self.expect("[")?;
        let min = self.int()?;
        self.expect(",")?;
        let max = if self.eat("inf") { None } else { Some(self.int()?) };
        self.expect("]")?;
        if self.m.symbols.get(name).is_some() {
            return Err(self.err(format!("symbol @{name} declared twice")));
        }
        self.m.symbols.declare(name, min, max);
        Ok(())
    }

    /// `{kind = "...", name = "..."}`, then optionally `, layout = [...]` (results) and
    /// `, sharding = [...]`.
    fn meta(&mut self, result: bool) -> PResult<Option<Meta>> {
        if self.peek() != Some(b'{') {
            return Ok(None);
        }
        self.pos += 1;
        self.keyword("kind")?;
        self.expect("=")?;
        let kind = self.string()?;
        self.expect(",")?;
        self.keyword("name")?;
        self.expect("=")?;
        let name = self.string()?;
        let (mut layout, mut split) = (None, None);
        while self.eat(",") {
            let pos = self.pos;
            match self.ident()? {
                "layout" if result && layout.is_none() => {
                    self.expect("=")?;
                    layout = Some(self.layout()?);
                }
                "sharding" if split.is_none() => {
                    self.expect("=")?;
                    split = Some((self.dim_axes()?, pos));
                }
                other => return Err(self.err_at(pos, format!("unexpected `{other}` in metadata"))),
            }
        }
        self.expect("}")?;
        Ok(Some(Meta { kind, name, layout, split }))
    }

    /// `["x" = 2, "y" = 2]`.
    fn mesh_axes(&mut self) -> PResult<Vec<(String, i64)>> {
        self.expect("[")?;
        let mut out = Vec::new();
        if self.eat("]") {
            return Ok(out);
        }
        loop {
            let name = self.string()?;
            self.expect("=")?;
            out.push((name, self.int()?));
            if self.eat("]") {
                return Ok(out);
            }
            self.expect(",")?;
        }
    }

    /// `[{"x"}, {}]`.
    fn dim_axes(&mut self) -> PResult<DimAxes> {
        self.expect("[")?;
        let mut out = Vec::new();
        if self.eat("]") {
            return Ok(out);
        }
        loop {
            self.expect("{")?;
            let mut axes = Vec::new();
            if !self.eat("}") {
                loop {
                    axes.push(self.string()?);
                    if self.eat("}") {
                        break;
                    }
                    self.expect(",")?;
                }
            }
            out.push(axes);
            if self.eat("]") {
                return Ok(out);
            }
            self.expect(",")?;
        }
    }

    /// Each `sharding = ...` is on `main` and the module has a `mesh`.
    fn check_splits(&mut self) -> PResult<()> {
        let main = self.m.main_func().map(|f| f.name.clone());
        for (func, pos) in std::mem::take(&mut self.splits) {
            if self.m.mesh.is_none() {
                return Err(self.err_at(pos, "a `sharding` needs the module's `mesh`"));
            }
            if main.as_deref() != Some(&func) {
                return Err(self.err_at(pos, format!("`sharding` on `{func}`, which is not `main`")));
            }
        }
        Ok(())
    }

    /// `[exact, uniform(s), factors((8, s), (2, 2))]` (see [`crate::layout`]).
    fn layout(&mut self) -> PResult<Layout> {
        self.expect("[")?;
        let mut out = Vec::new();
        if self.eat("]") {
            return Ok(out);
        }
        loop {
            let pos = self.pos;
            let word = self.ident()?;
            out.push(match word {
                "exact" => DimLayout::Exact,
                "uniform" => {
                    self.expect("(")?;
                    let e = self.sym_expr()?;
                    self.expect(")")?;
                    DimLayout::Uniform(e)
                }
                "factors" => {
                    self.expect("(")?;
                    let mut fs = Vec::new();
                    loop {
                        self.expect("(")?;
                        let padded = self.int()?;
                        self.expect(",")?;
                        let extent = self.sym_expr()?;
                        self.expect(")")?;
                        fs.push(Factor { padded, extent });
                        if self.eat(")") {
                            break;
                        }
                        self.expect(",")?;
                    }
                    DimLayout::Factors(fs)
                }
                other => return Err(self.err_at(pos, format!("expected `exact`, `uniform(...)` or `factors(...)`, found `{other}`"))),
            });
            if self.eat("]") {
                return Ok(out);
            }
            self.expect(",")?;
        }
    }

    fn def_value(&mut self, n: u32, v: ValueId, pos: usize) -> PResult<()> {
        if self.values.insert(n, v).is_some() {
            return Err(self.err_at(pos, format!("value %{n} defined twice")));
        }
        Ok(())
    }

    fn func(&mut self) -> PResult<()> {
        self.expect("@")?;
        let name = self.ident()?.to_string();
        let fname = name.clone();
        self.expect("(")?;
        let mut args = Vec::new();
        let mut arg_nums = Vec::new();
        if !self.eat(")") {
            loop {
                let pos = self.pos;
                self.expect("%")?;
                let n = self.uint()?;
                self.expect(":")?;
                let ty = self.tensor_type()?;
                let mpos = self.pos;
                let info = match self.meta(false)? {
                    Some(Meta { kind, name, split, .. }) => {
                        let sharding = split.map(|(axes, spos)| {
                            self.splits.push((fname.clone(), spos));
                            axes
                        });
                        ArgInfo {
                            kind: ArgKind::parse(&kind).ok_or_else(|| self.err_at(mpos, format!("unknown argument kind `{kind}`")))?,
                            name,
                            sharding,
                        }
                    }
                    None => ArgInfo::new(ArgKind::UserInput, format!("arg{}", args.len())),
                };
                args.push((ty, info));
                arg_nums.push((n, pos));
                if self.eat(")") {
                    break;
                }
                self.expect(",")?;
            }
        }
        self.expect("->")?;
        self.expect("(")?;
        let mut results = Vec::new();
        // A function whose results carry no metadata (the printer writes none when the
        // function has none) keeps none, so print → parse → print is the identity.
        let mut any_result_meta = false;
        if !self.eat(")") {
            loop {
                let _ty = self.tensor_type()?;
                let mpos = self.pos;
                let meta = self.meta(true)?;
                any_result_meta |= meta.is_some();
                let info = match meta {
                    Some(Meta { kind, name, layout, split }) => {
                        let sharding = split.map(|(axes, spos)| {
                            self.splits.push((fname.clone(), spos));
                            axes
                        });
                        ResultInfo {
                            kind: ResultKind::parse(&kind)
                                .ok_or_else(|| self.err_at(mpos, format!("unknown result kind `{kind}`")))?,
                            name,
                            layout,
                            sharding,
                        }
                    }
                    None => ResultInfo::new(ResultKind::UserOutput, format!("result{}", results.len())),
                };
                results.push(info);
                if self.eat(")") {
                    break;
                }
                self.expect(",")?;
            }
        }
        if !any_result_meta {
            results.clear();
        }
        let (fi, block) = self.m.add_func(&name, args);
        self.m.funcs[fi].results = results;
        for (i, (n, pos)) in arg_nums.into_iter().enumerate() {
            let v = self.m.blocks[block].args[i];
            self.def_value(n, v, pos)?;
        }
        self.expect("{")?;
        self.ops_until_close(block)?;
        Ok(())
    }

    /// Parses ops into `block` until `}` (consumed) or, inside regions, `^bb` (not consumed).
    fn ops_until_close(&mut self, block: BlockId) -> PResult<bool> {
        loop {
            match self.peek() {
                Some(b'}') => {
                    self.pos += 1;
                    return Ok(true);
                }
                Some(b'^') => return Ok(false),
                None => return Err(self.err("expected `}`")),
                _ => self.op(block)?,
            }
        }
    }

    fn op(&mut self, block: BlockId) -> PResult<()> {
        let mut result_nums = Vec::new();
        if self.peek() == Some(b'%') {
            loop {
                let pos = self.pos;
                self.expect("%")?;
                result_nums.push((self.uint()?, pos));
                if !self.eat(",") {
                    break;
                }
            }
            self.expect("=")?;
        }
        let npos = self.pos;
        let name = self.ident()?;
        let opcode: Opcode = name.parse().map_err(|_| self.err_at(npos, format!("unknown op `{name}`")))?;
        let mut operands = Vec::new();
        if self.peek() == Some(b'%') {
            loop {
                let pos = self.pos;
                self.expect("%")?;
                let n = self.uint()?;
                let v = *self.values.get(&n).ok_or_else(|| self.err_at(pos, format!("use of undefined value %{n}")))?;
                operands.push(v);
                if !self.eat(",") {
                    break;
                }
            }
        }
        let attrs = if self.peek() == Some(b'{') { self.attr_dict()? } else { Attrs::new() };
        let mut regions = Vec::new();
        if self.peek() == Some(b'(') {
            self.pos += 1;
            loop {
                regions.push(self.region()?);
                if self.eat(")") {
                    break;
                }
                self.expect(",")?;
            }
        }
        let mut types = Vec::new();
        if self.eat(":") {
            loop {
                types.push(self.tensor_type()?);
                if !self.eat(",") {
                    break;
                }
            }
        }
        if types.len() != result_nums.len() {
            return Err(self.err(format!("{} results named but {} types given", result_nums.len(), types.len())));
        }
        let op = self.m.create_op_unchecked(opcode, &operands, attrs, types, &regions);
        self.m.append_op(block, op);
        for (i, (n, pos)) in result_nums.into_iter().enumerate() {
            let v = self.m.ops[op].results[i];
            self.def_value(n, v, pos)?;
        }
        let lpos = self.pos;
        if self.peek() == Some(b'l') && self.src[self.pos..].starts_with(b"loc(") {
            self.keyword("loc")?;
            self.expect("(")?;
            self.expect("#")?;
            let n = self.uint()?;
            self.expect(")")?;
            self.pending_locs.push((op, n, lpos));
        }
        Ok(())
    }

    fn region(&mut self) -> PResult<RegionId> {
        self.expect("{")?;
        let region = self.m.regions.push(Default::default());
        loop {
            self.expect("^bb")?;
            self.uint()?;
            self.expect("(")?;
            let mut arg_types = Vec::new();
            let mut nums = Vec::new();
            if !self.eat(")") {
                loop {
                    let pos = self.pos;
                    self.expect("%")?;
                    nums.push((self.uint()?, pos));
                    self.expect(":")?;
                    arg_types.push(self.tensor_type()?);
                    if self.eat(")") {
                        break;
                    }
                    self.expect(",")?;
                }
            }
            self.expect(":")?;
            let block = self.m.blocks.push(crate::module::BlockData::new(Some(region)));
            self.m.regions[region].blocks.push(block);
            for (i, ty) in arg_types.into_iter().enumerate() {
                let v = self.m.values.push(crate::module::ValueData::new(
                    ty,
                    crate::module::ValueDef::BlockArg { block, index: i as u32 },
                ));
                self.m.blocks[block].args.push(v);
            }
            for (i, (n, pos)) in nums.into_iter().enumerate() {
                let v = self.m.blocks[block].args[i];
                self.def_value(n, v, pos)?;
            }
            if self.ops_until_close(block)? {
                return Ok(region);
            }
        }
    }

    // ---- attributes

    fn attr_dict(&mut self) -> PResult<Attrs> {
        self.expect("{")?;
        let mut attrs = Attrs::new();
        if self.eat("}") {
            return Ok(attrs);
        }
        loop {
            let pos = self.pos;
            let name = self.ident()?;
            self.expect("=")?;
            let v = self.attr()?;
            if attrs.get(name).is_some() {
                return Err(self.err_at(pos, format!("attribute `{name}` given twice")));
            }
            attrs.set(crate::attr::attr_name(name), v);
            if self.eat("}") {
                return Ok(attrs);
            }
            self.expect(",")?;
        }
    }

    fn number(&mut self) -> PResult<Attr> {
        self.ws();
        let start = self.pos;
        if self.eat("-inf") {
            return Ok(Attr::Float(f64::NEG_INFINITY));
        }
        let mut is_float = false;
        let mut i = self.pos;
        if matches!(self.src.get(i), Some(b'-') | Some(b'+')) {
            i += 1;
        }
        while i < self.src.len() {
            let c = self.src[i];
            if c.is_ascii_digit() {
                i += 1;
            } else if c == b'.' || c == b'e' || c == b'E' {
                is_float = true;
                i += 1;
                if (c == b'e' || c == b'E') && matches!(self.src.get(i), Some(b'-') | Some(b'+')) {
                    i += 1;
                }
            } else {
                break;
            }
        }
        let tok = &self.text[start..i];
        self.pos = i;
        if is_float {
            tok.parse().map(Attr::Float).map_err(|_| self.err_at(start, format!("bad float `{tok}`")))
        } else {
            tok.parse().map(Attr::Int).map_err(|_| self.err_at(start, format!("bad integer `{tok}`")))
        }
    }

    fn attr(&mut self) -> PResult<Attr> {
        match self.peek() {
            Some(b'"') => Ok(Attr::Str(self.string()?)),
            Some(b'[') => {
                self.pos += 1;
                let mut v = Vec::new();
                if self.eat("]") {
                    return Ok(Attr::Ints(v));
                }
                loop {
                    v.push(self.int()?);
                    if self.eat("]") {
                        return Ok(Attr::Ints(v));
                    }
                    self.expect(",")?;
                }
            }
            Some(c) if c.is_ascii_digit() || c == b'-' => self.number(),
            Some(_) => {
                let start = self.pos;
                let id = self.ident()?;
                match id {
                    "true" => Ok(Attr::Bool(true)),
                    "false" => Ok(Attr::Bool(false)),
                    "nan" => Ok(Attr::Float(f64::NAN)),
                    "inf" => Ok(Attr::Float(f64::INFINITY)),
                    "dense" => {
                        self.pos = start;
                        Ok(Attr::Tensor(self.dense()?))
                    }
                    other => other
                        .parse::<DType>()
                        .map(Attr::DType)
                        .map_err(|_| self.err_at(start, format!("unknown attribute value `{other}`"))),
                }
            }
            None => Err(self.err("expected an attribute value")),
        }
    }

    /// An unsigned integer too large for i64 (consumed when it is one, else nothing is).
    fn big_uint(&mut self) -> Option<u64> {
        self.ws();
        let start = self.pos;
        let end = start + self.src[start..].iter().take_while(|c| c.is_ascii_digit()).count();
        if matches!(self.src.get(end), Some(b'.' | b'e' | b'E')) {
            return None;
        }
        let tok = &self.text[start..end];
        match (tok.parse::<i64>(), tok.parse::<u64>()) {
            (Err(_), Ok(u)) => {
                self.pos = end;
                Some(u)
            }
            _ => None,
        }
    }

    fn dense(&mut self) -> PResult<TensorData> {
        self.keyword("dense")?;
        self.expect("<")?;
        let vpos = self.pos;
        enum V {
            Hex(Vec<u8>),
            Scalar(Scalar),
        }
        let v = match self.peek() {
            Some(b'"') => {
                let s = self.string()?;
                let hex = s.strip_prefix("0x").ok_or_else(|| self.err_at(vpos, "dense data must start with 0x"))?;
                V::Hex(decode_hex(hex).ok_or_else(|| self.err_at(vpos, "bad hex in dense data"))?)
            }
            // u64 splats above i64::MAX print as plain unsigned integers.
            _ => match self.big_uint() {
                Some(u) => V::Scalar(Scalar::UInt(u)),
                None => match self.attr()? {
                    Attr::Bool(b) => V::Scalar(Scalar::Bool(b)),
                    Attr::Int(i) => V::Scalar(Scalar::Int(i)),
                    Attr::Float(f) => V::Scalar(Scalar::Float(f)),
                    _ => return Err(self.err_at(vpos, "expected a scalar or hex string in dense<...>")),
                },
            },
        };
        self.expect(">")?;
        self.expect(":")?;
        let tpos = self.pos;
        let ty = self.tensor_type()?;
        let data = match v {
            V::Scalar(s) => {
                if let (Scalar::Int(i), true) = (s, ty.dtype.is_unsigned_int()) {
                    TensorData::splat(ty, Scalar::UInt(i as u64))
                } else {
                    TensorData::splat(ty, s)
                }
            }
            V::Hex(bytes) => {
                let full = ty.size_bytes();
                if full == Some(bytes.len()) {
                    TensorData::new(ty, Bytes::from(bytes))
                } else if bytes.len() == ty.dtype.size_bytes() {
                    TensorData::splat_bytes(ty, Bytes::from(bytes))
                } else {
                    TensorData::new(ty, Bytes::from(bytes))
                }
            }
        };
        data.map_err(|e| self.err_at(tpos, e.to_string()))
    }

    // ---- types

    fn tensor_type(&mut self) -> PResult<TensorType> {
        self.keyword("tensor")?;
        if self.src.get(self.pos) != Some(&b'<') {
            return Err(self.err("expected `<` after `tensor`"));
        }
        self.pos += 1;
        let mut dims = Vec::new();
        loop {
            let start = self.pos;
            // A dim: integer, symbol, or parenthesized expression, followed by `x`.
            let c = *self.src.get(self.pos).ok_or_else(|| self.err("unterminated tensor type"))?;
            if c.is_ascii_digit() {
                let n = self.int()?;
                self.expect_x()?;
                dims.push(Dim::Static(n));
                continue;
            }
            if c == b'(' {
                self.pos += 1;
                let e = self.sym_expr()?;
                self.expect(")")?;
                self.expect_x()?;
                dims.push(Dim::from_expr(e));
                continue;
            }
            // Identifier: a symbol if followed by `x`, else the dtype closing the type.
            let id_start = self.pos;
            while self.pos < self.src.len() && (self.src[self.pos].is_ascii_alphanumeric() || self.src[self.pos] == b'_') && self.src[self.pos] != b'x' {
                self.pos += 1;
            }
            let id = &self.text[id_start..self.pos];
            if id.is_empty() {
                return Err(self.err_at(start, format!("expected a dimension or dtype, found {}", self.found())));
            }
            if self.src.get(self.pos) == Some(&b'x') {
                self.pos += 1;
                self.check_symbol(id, start)?;
                dims.push(Dim::symbol(id));
                continue;
            }
            let dtype: DType = id.parse().map_err(|_| self.err_at(start, format!("unknown dtype `{id}`")))?;
            if self.src.get(self.pos) != Some(&b'>') {
                return Err(self.err("expected `>` closing the tensor type"));
            }
            self.pos += 1;
            return Ok(TensorType::new(dtype, dims));
        }
    }

    fn expect_x(&mut self) -> PResult<()> {
        if self.src.get(self.pos) == Some(&b'x') {
            self.pos += 1;
            Ok(())
        } else {
            Err(self.err("expected `x` after a dimension"))
        }
    }

    fn check_symbol(&self, _name: &str, _pos: usize) -> PResult<()> {
        // Symbols may be used before (or without) a declaration in stand-alone types; the
        // verifier checks that a module declares every symbol its types use.
        Ok(())
    }

    fn sym_expr(&mut self) -> PResult<SymExpr> {
        let mut acc = self.sym_term()?;
        loop {
            if self.eat("+") {
                acc = acc.add(&self.sym_term()?);
            } else if self.peek() == Some(b'-') {
                self.pos += 1;
                acc = acc.sub(&self.sym_term()?);
            } else {
                return Ok(acc);
            }
        }
    }

    fn sym_term(&mut self) -> PResult<SymExpr> {
        let mut acc = self.sym_factor()?;
        while self.eat("*") {
            acc = acc.mul(&self.sym_factor()?);
        }
        Ok(acc)
    }

    fn sym_factor(&mut self) -> PResult<SymExpr> {
        match self.peek() {
            Some(b'-') => {
                self.pos += 1;
                Ok(self.sym_factor()?.neg())
            }
            Some(b'(') => {
                self.pos += 1;
                let e = self.sym_expr()?;
                self.expect(")")?;
                Ok(e)
            }
            Some(c) if c.is_ascii_digit() => Ok(SymExpr::constant(self.int()?)),
            Some(_) => {
                let start = self.pos;
                let id = self.ident()?;
                match id {
                    "floordiv" | "mod" => {
                        self.expect("(")?;
                        let e = self.sym_expr()?;
                        self.expect(",")?;
                        let cpos = self.pos;
                        let c = self.int()?;
                        self.expect(")")?;
                        if c <= 0 {
                            return Err(self.err_at(cpos, "divisor must be positive"));
                        }
                        Ok(if id == "floordiv" { e.floordiv(c) } else { e.modulo(c) })
                    }
                    _ => {
                        if id.contains('.') {
                            return Err(self.err_at(start, format!("bad symbol name `{id}`")));
                        }
                        Ok(SymExpr::symbol(id))
                    }
                }
            }
            None => Err(self.err("expected an expression")),
        }
    }
}

fn decode_hex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    let b = s.as_bytes();
    let val = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    (0..b.len() / 2).map(|i| Some(val(b[2 * i])? << 4 | val(b[2 * i + 1])?)).collect()
}
