//! SymInt nodes: `sym_size` and friends and Python-operator arithmetic on sizes. Their values
//! are tracked at compile time as [`SymExpr`]s (never as tensors); comparisons give SymBools,
//! known when both sides are constants (they only feed run-time assertions).
//!
//! A number read from a tensor (`_local_scalar_dense`, `.item()` in the model) is the symbol
//! torch recorded for it, its run-time value the tensor's element: uses as data compute with
//! it. A number that sizes a tensor is also listed in `Imported::host_reads`: the caller
//! computes it first and compiles the program at its value. A read boolean, and `sym_ite` on
//! one, are unknown at compile time; in exported graphs they feed the run-time assertions of
//! checks the model makes on its data (VITS's spline domain, LLaVA's image-placeholder count),
//! which tpuc does not evaluate. Anything else that needs their value fails naming the node. A
//! float read is refused.

use crate::ops::build::*;

pub const OPS: &[(&str, OpFn)] = &[
    ("sym_size.int", sym_size),
    ("sym_size.default", sym_size_all),
    ("sym_numel.default", sym_numel),
    ("sym_stride.int", sym_stride),
    ("sym_storage_offset.default", sym_storage_offset),
    ("_operator.add", add),
    ("_operator.sub", sub),
    ("_operator.mul", mul),
    ("_operator.floordiv", floordiv),
    ("_operator.mod", modulo),
    ("_operator.neg", neg),
    ("_operator.pos", pos),
    ("_operator.truediv", truediv),
    ("_operator.pow", pow),
    ("_operator.eq", eq),
    ("_operator.ne", ne),
    ("_operator.lt", lt),
    ("_operator.le", le),
    ("_operator.gt", gt),
    ("_operator.ge", ge),
    ("_operator.and_", and),
    ("_operator.or_", or),
    ("_operator.not_", not),
    ("torch.sym_not", not),
    ("torch.sym_max", sym_max),
    ("torch.sym_min", sym_min),
    ("torch.sym_float", sym_float),
    ("torch.sym_int", sym_int),
    ("math.ceil", ceil),
    ("math.floor", floor),
    ("math.trunc", trunc),
    ("_local_scalar_dense.default", local_scalar_dense),
    ("torch.sym_ite", sym_ite),
];

/// A Python scalar operand of a sym node.
#[derive(Clone, Debug)]
enum SV {
    Int(SymExpr),
    Float(f64),
    Bool(Option<bool>),
}

fn sv(cx: &Ctx, name: &str) -> R<SV> {
    match cx.opt(name)? {
        Some(Arg::Int(i)) => Ok(SV::Int(SymExpr::constant(i))),
        Some(Arg::Float(f)) => Ok(SV::Float(f)),
        Some(Arg::Bool(b)) => Ok(SV::Bool(Some(b))),
        Some(Arg::SymFloat(f)) => f.map(SV::Float).ok_or_else(|| OpError::Refused("symbolic floats are not supported".into())),
        Some(Arg::SymBool(b)) => Ok(SV::Bool(b)),
        Some(Arg::SymInt(s)) => Ok(SV::Int(cx.sym_of(&s)?)),
        Some(Arg::Tensor(n)) => match cx.st.env.get(&n) {
            Some(Val::Sym(e)) => Ok(SV::Int(e.clone())),
            Some(Val::Float(f)) => Ok(SV::Float(*f)),
            Some(Val::Bool(b)) => Ok(SV::Bool(*b)),
            _ => err(format!("`{n}` is not a Python scalar")),
        },
        Some(a) => err(format!("argument `{name}` is a {}, not a number", a.kind())),
        None => err(format!("missing argument `{name}`")),
    }
}

fn as_f(v: &SV) -> Option<f64> {
    match v {
        SV::Int(e) => e.as_const().map(|c| c as f64),
        SV::Float(f) => Some(*f),
        SV::Bool(b) => b.map(|b| f64::from(u8::from(b))),
    }
}

fn out(v: SV) -> R<Vec<Val>> {
    Ok(vec![match v {
        SV::Int(e) => Val::Sym(e),
        SV::Float(f) => Val::Float(f),
        SV::Bool(b) => Val::Bool(b),
    }])
}

fn int_of(v: &SV) -> Option<SymExpr> {
    match v {
        SV::Int(e) => Some(e.clone()),
        SV::Bool(Some(b)) => Some(SymExpr::constant(i64::from(*b))),
        _ => None,
    }
}

fn sym_size(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let d = norm_dim(cx.int("dim")?, cx.rank(x))?;
    let dims = cx.dims(x);
    let e = dims.get(d).map(Dim::to_expr).ok_or("dim out of range")?;
    Ok(vec![Val::Sym(e)])
}

fn sym_size_all(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    Ok(cx.dims(x).iter().map(|d| Val::Sym(d.to_expr())).collect())
}

fn sym_numel(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    Ok(vec![Val::Sym(cx.ty(x).num_elements_expr())])
}

fn sym_stride(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let dims = cx.dims(x);
    let d = norm_dim(cx.int("dim")?, dims.len())?;
    let s = dims.iter().skip(d + 1).fold(SymExpr::constant(1), |a, d| a.mul(&d.to_expr()));
    Ok(vec![Val::Sym(s)])
}

fn sym_storage_offset(_cx: &mut Ctx) -> R<Vec<Val>> {
    Ok(vec![Val::Sym(SymExpr::constant(0))])
}

fn arith(cx: &mut Ctx, op: char) -> R<Vec<Val>> {
    let a = sv(cx, "a")?;
    let b = sv(cx, "b")?;
    if let (Some(x), Some(y)) = (int_of(&a), int_of(&b)) {
        let r = match op {
            '+' => x.add(&y),
            '-' => x.sub(&y),
            '*' => x.mul(&y),
            _ => return err("internal: operator"),
        };
        return out(SV::Int(r));
    }
    match (as_f(&a), as_f(&b)) {
        (Some(x), Some(y)) => out(SV::Float(match op {
            '+' => x + y,
            '-' => x - y,
            _ => x * y,
        })),
        _ => err("symbolic float arithmetic is not supported"),
    }
}
fn add(cx: &mut Ctx) -> R<Vec<Val>> {
    arith(cx, '+')
}
fn sub(cx: &mut Ctx) -> R<Vec<Val>> {
    arith(cx, '-')
}
fn mul(cx: &mut Ctx) -> R<Vec<Val>> {
    arith(cx, '*')
}

fn divmod(cx: &mut Ctx, rem: bool) -> R<Vec<Val>> {
    let a = sv(cx, "a")?;
    let b = sv(cx, "b")?;
    if let (Some(x), Some(y)) = (int_of(&a), int_of(&b)) {
        let Some(c) = y.as_const() else { return err(format!("division by the symbolic size {y}")) };
        if c == 0 {
            return err("integer division by zero");
        }
        if let Some(v) = x.as_const() {
            // Python floor division and modulo
            let t = v.checked_div(c).ok_or("integer division overflows")?;
            let q = if v % c != 0 && ((v < 0) != (c < 0)) { t - 1 } else { t };
            let r = v.wrapping_sub(c.wrapping_mul(q));
            return out(SV::Int(SymExpr::constant(if rem { r } else { q })));
        }
        if c < 0 {
            return err(format!("division of {x} by a negative constant"));
        }
        return out(SV::Int(if rem { x.modulo(c) } else { x.floordiv(c) }));
    }
    match (as_f(&a), as_f(&b)) {
        (Some(x), Some(y)) if y != 0.0 => {
            let q = (x / y).floor();
            out(SV::Float(if rem { x - y * q } else { q }))
        }
        _ => err("symbolic float arithmetic is not supported"),
    }
}
fn floordiv(cx: &mut Ctx) -> R<Vec<Val>> {
    divmod(cx, false)
}
fn modulo(cx: &mut Ctx) -> R<Vec<Val>> {
    divmod(cx, true)
}

fn neg(cx: &mut Ctx) -> R<Vec<Val>> {
    match sv(cx, "a")? {
        SV::Int(e) => out(SV::Int(e.neg())),
        SV::Float(f) => out(SV::Float(-f)),
        SV::Bool(b) => out(SV::Int(match b {
            Some(b) => SymExpr::constant(-i64::from(b)),
            None => return err("negation of an unknown SymBool"),
        })),
    }
}
fn pos(cx: &mut Ctx) -> R<Vec<Val>> {
    out(sv(cx, "a")?)
}

fn truediv(cx: &mut Ctx) -> R<Vec<Val>> {
    let a = sv(cx, "a")?;
    let b = sv(cx, "b")?;
    match (as_f(&a), as_f(&b)) {
        (Some(x), Some(y)) => out(SV::Float(x / y)),
        _ => err("true division of symbolic sizes is not supported"),
    }
}

fn pow(cx: &mut Ctx) -> R<Vec<Val>> {
    let a = sv(cx, "a")?;
    let b = sv(cx, "b")?;
    if let (Some(x), Some(SV::Int(y))) = (int_of(&a), Some(b.clone())) {
        if let Some(n) = y.as_const().filter(|n| (0..=16).contains(n)) {
            let mut acc = SymExpr::constant(1);
            for _ in 0..n {
                acc = acc.mul(&x);
            }
            return out(SV::Int(acc));
        }
    }
    match (as_f(&a), as_f(&b)) {
        (Some(x), Some(y)) => out(SV::Float(x.powf(y))),
        _ => err("symbolic powers are not supported"),
    }
}

fn compare(cx: &mut Ctx, f: fn(f64, f64) -> bool, eq_if_same: Option<bool>) -> R<Vec<Val>> {
    let a = sv(cx, "a")?;
    let b = sv(cx, "b")?;
    if let (Some(x), Some(y)) = (as_f(&a), as_f(&b)) {
        return out(SV::Bool(Some(f(x, y))));
    }
    if let (Some(x), Some(y), Some(r)) = (int_of(&a), int_of(&b), eq_if_same) {
        if x == y {
            return out(SV::Bool(Some(r)));
        }
    }
    out(SV::Bool(None))
}
fn eq(cx: &mut Ctx) -> R<Vec<Val>> {
    compare(cx, |a, b| a == b, Some(true))
}
fn ne(cx: &mut Ctx) -> R<Vec<Val>> {
    compare(cx, |a, b| a != b, Some(false))
}
fn lt(cx: &mut Ctx) -> R<Vec<Val>> {
    compare(cx, |a, b| a < b, Some(false))
}
fn le(cx: &mut Ctx) -> R<Vec<Val>> {
    compare(cx, |a, b| a <= b, Some(true))
}
fn gt(cx: &mut Ctx) -> R<Vec<Val>> {
    compare(cx, |a, b| a > b, Some(false))
}
fn ge(cx: &mut Ctx) -> R<Vec<Val>> {
    compare(cx, |a, b| a >= b, Some(true))
}

fn logic(cx: &mut Ctx, and_: bool) -> R<Vec<Val>> {
    let a = sv(cx, "a")?;
    let b = sv(cx, "b")?;
    let tb = |v: &SV| match v {
        SV::Bool(b) => *b,
        other => as_f(other).map(|f| f != 0.0),
    };
    let r = match (tb(&a), tb(&b)) {
        (Some(x), Some(y)) => Some(if and_ { x && y } else { x || y }),
        (Some(false), None) | (None, Some(false)) if and_ => Some(false),
        (Some(true), None) | (None, Some(true)) if !and_ => Some(true),
        _ => None,
    };
    out(SV::Bool(r))
}
fn and(cx: &mut Ctx) -> R<Vec<Val>> {
    logic(cx, true)
}
fn or(cx: &mut Ctx) -> R<Vec<Val>> {
    logic(cx, false)
}
fn not(cx: &mut Ctx) -> R<Vec<Val>> {
    match sv(cx, "a")? {
        SV::Bool(b) => out(SV::Bool(b.map(|b| !b))),
        other => out(SV::Bool(as_f(&other).map(|f| f == 0.0))),
    }
}

fn minmax(cx: &mut Ctx, max: bool) -> R<Vec<Val>> {
    let a = sv(cx, "a")?;
    let b = sv(cx, "b")?;
    if let (Some(x), Some(y)) = (int_of(&a), int_of(&b)) {
        if x == y {
            return out(SV::Int(x));
        }
        if let (Some(p), Some(q)) = (x.as_const(), y.as_const()) {
            return out(SV::Int(SymExpr::constant(if max { p.max(q) } else { p.min(q) })));
        }
        // Decide through the symbols' ranges when they do not overlap.
        let (xl, xh) = cx.b.module.symbols.range_of(&x);
        let (yl, yh) = cx.b.module.symbols.range_of(&y);
        if xh.is_some_and(|h| h <= yl) {
            return out(SV::Int(if max { y } else { x }));
        }
        if yh.is_some_and(|h| h <= xl) {
            return out(SV::Int(if max { x } else { y }));
        }
        return err(format!("sym_{}({x}, {y}) depends on run-time sizes", if max { "max" } else { "min" }));
    }
    match (as_f(&a), as_f(&b)) {
        (Some(x), Some(y)) => out(SV::Float(if max { x.max(y) } else { x.min(y) })),
        _ => err("symbolic float min/max is not supported"),
    }
}
fn sym_max(cx: &mut Ctx) -> R<Vec<Val>> {
    minmax(cx, true)
}
fn sym_min(cx: &mut Ctx) -> R<Vec<Val>> {
    minmax(cx, false)
}

fn sym_float(cx: &mut Ctx) -> R<Vec<Val>> {
    let a = sv(cx, "a")?;
    match as_f(&a) {
        Some(f) => out(SV::Float(f)),
        None => err("sym_float of a symbolic size is not supported"),
    }
}

fn round_with(cx: &mut Ctx, f: fn(f64) -> f64) -> R<Vec<Val>> {
    let a = sv(cx, "a")?;
    if let SV::Int(e) = &a {
        return out(SV::Int(e.clone()));
    }
    match as_f(&a) {
        Some(v) if v.is_finite() && v.abs() < 9.0e15 => out(SV::Int(SymExpr::constant(f(v) as i64))),
        _ => err("rounding a symbolic or non-finite float is not supported"),
    }
}
fn sym_int(cx: &mut Ctx) -> R<Vec<Val>> {
    round_with(cx, f64::trunc)
}
fn ceil(cx: &mut Ctx) -> R<Vec<Val>> {
    round_with(cx, f64::ceil)
}
fn floor(cx: &mut Ctx) -> R<Vec<Val>> {
    round_with(cx, f64::floor)
}
fn trunc(cx: &mut Ctx) -> R<Vec<Val>> {
    round_with(cx, f64::trunc)
}

/// `_local_scalar_dense(t)`: the one element of `t` as the node's SymInt (bound to its
/// run-time value when torch recorded a bare symbol), or an unknown SymBool.
fn local_scalar_dense(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    if cx.ty(x).num_elements() != Some(1) {
        return err(format!("_local_scalar_dense of {}, not one element", cx.ty(x)));
    }
    let name = cx.outs.first().and_then(OutSlot::name).unwrap_or_default().to_string();
    let dt = cx.dtype(x);
    let Some(v) = cx.st.sym_ints.get(&name) else {
        if dt.is_bool() {
            return Ok(vec![Val::Bool(None)]);
        }
        return err(format!(
            "a tensor of {dt} read as a Python number (`.item()`) is not supported in an exported graph; \
             under torch.compile the graph splits there"
        ));
    };
    let e = crate::meta::parse_symint(v, &cx.st.rename).map_err(|e| OpError::Refused(e.to_string()))?;
    if let Some(s) = e.as_symbol() {
        let flat = cx.reshape(x, vec![])?;
        let value = cx.convert(flat, DType::I64)?;
        let first = match cx.st.bound.borrow_mut().entry(s.to_string()) {
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(value);
                true
            }
            std::collections::hash_map::Entry::Occupied(_) => false,
        };
        // A number that sizes a tensor is read on the host before the program is compiled
        // at its value (see `HostRead`).
        if first && cx.st.sizes_a_tensor(s) {
            cx.st.host_reads.borrow_mut().push(crate::HostRead { symbol: s.to_string(), value, node: name });
        }
    }
    Ok(vec![Val::Sym(e)])
}

/// `torch.sym_ite(b, t, f)`: `t` or `f` for a known `b`; for an unknown one, a symbol of the
/// node's own name, which nothing binds (see the module header).
fn sym_ite(cx: &mut Ctx) -> R<Vec<Val>> {
    let b = sv(cx, "b")?;
    let t = sv(cx, "t")?;
    let f = sv(cx, "f")?;
    match b {
        SV::Bool(Some(c)) => out(if c { t } else { f }),
        SV::Bool(None) => {
            let name = cx.outs.first().and_then(OutSlot::name).unwrap_or("sym_ite").to_string();
            out(SV::Int(SymExpr::symbol(name.as_str())))
        }
        _ => err("sym_ite needs a SymBool condition"),
    }
}
