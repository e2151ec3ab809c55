//! Elementwise ops: arithmetic, comparisons, logic, unary math and activations.
//!
//! Binary ops follow ATen: operands are promoted with `result_type` (tensors beat zero-dim
//! tensors beat Python numbers within a category) and broadcast explicitly; true division
//! and float-only math promote integers to the default float dtype. Where the CPU kernel
//! uses a special form (pow by 2 is `x*x`, floor division goes through `fmod`), the same form
//! is emitted so results match eager bit for bit where the IR allows.

use super::*;
use Opcode as O;

pub const OPS: &[(&str, OpFn)] = &[
    ("add.Tensor", add),
    ("add.Scalar", add),
    ("sub.Tensor", sub),
    ("sub.Scalar", sub),
    ("rsub.Tensor", rsub),
    ("rsub.Scalar", rsub),
    ("mul.Tensor", mul),
    ("mul.Scalar", mul),
    ("div.Tensor", div),
    ("div.Scalar", div),
    ("true_divide.Tensor", div),
    ("div.Tensor_mode", div_mode),
    ("div.Scalar_mode", div_mode),
    ("floor_divide.default", floor_divide),
    ("floor_divide.Scalar", floor_divide),
    ("remainder.Tensor", remainder),
    ("remainder.Scalar", remainder),
    ("remainder.Scalar_Tensor", remainder),
    ("fmod.Tensor", fmod),
    ("fmod.Scalar", fmod),
    ("pow.Tensor_Scalar", pow_tensor_scalar),
    ("pow.Tensor_Tensor", pow_tensor_tensor),
    ("pow.Scalar", pow_tensor_tensor),
    ("maximum.default", maximum),
    ("minimum.default", minimum),
    ("max.other", maximum),
    ("min.other", minimum),
    ("fmax.default", fmax),
    ("fmin.default", fmin),
    ("atan2.default", atan2),
    ("eq.Tensor", eq),
    ("eq.Scalar", eq),
    ("ne.Tensor", ne),
    ("ne.Scalar", ne),
    ("lt.Tensor", lt),
    ("lt.Scalar", lt),
    ("le.Tensor", le),
    ("le.Scalar", le),
    ("gt.Tensor", gt),
    ("gt.Scalar", gt),
    ("ge.Tensor", ge),
    ("ge.Scalar", ge),
    ("logical_and.default", logical_and),
    ("logical_or.default", logical_or),
    ("logical_xor.default", logical_xor),
    ("logical_not.default", logical_not),
    ("bitwise_and.Tensor", bitwise_and),
    ("bitwise_and.Scalar", bitwise_and),
    ("__and__.Tensor", bitwise_and),
    ("__and__.Scalar", bitwise_and),
    ("bitwise_or.Tensor", bitwise_or),
    ("bitwise_or.Scalar", bitwise_or),
    ("__or__.Tensor", bitwise_or),
    ("__or__.Scalar", bitwise_or),
    ("bitwise_xor.Tensor", bitwise_xor),
    ("bitwise_xor.Scalar", bitwise_xor),
    ("__xor__.Tensor", bitwise_xor),
    ("__xor__.Scalar", bitwise_xor),
    ("bitwise_not.default", bitwise_not),
    ("where.self", where_),
    ("where.ScalarSelf", where_),
    ("where.ScalarOther", where_),
    ("where.Scalar", where_),
    ("masked_fill.Scalar", masked_fill),
    ("masked_fill.Tensor", masked_fill),
    ("clamp.default", clamp),
    ("clamp.Tensor", clamp),
    ("clip.default", clamp),
    ("clamp_min.default", clamp_min),
    ("clamp_min.Tensor", clamp_min),
    ("clamp_max.default", clamp_max),
    ("clamp_max.Tensor", clamp_max),
    ("hardtanh.default", hardtanh),
    ("relu6.default", relu6),
    ("addcmul.default", addcmul),
    ("addcdiv.default", addcdiv),
    ("lerp.Scalar", lerp),
    ("lerp.Tensor", lerp),
    ("abs.default", abs),
    ("neg.default", neg),
    ("positive.default", identity),
    ("sign.default", sign),
    ("sgn.default", sign),
    ("exp.default", exp),
    ("exp2.default", exp2),
    ("expm1.default", expm1),
    ("log.default", log),
    ("log1p.default", log1p),
    ("log2.default", log2),
    ("log10.default", log10),
    ("sqrt.default", sqrt),
    ("rsqrt.default", rsqrt),
    ("reciprocal.default", reciprocal),
    ("square.default", square),
    ("sin.default", sin),
    ("cos.default", cos),
    ("tan.default", tan),
    ("tanh.default", tanh),
    ("sinh.default", sinh),
    ("cosh.default", cosh),
    ("atan.default", atan),
    ("asin.default", asin),
    ("acos.default", acos),
    ("sigmoid.default", sigmoid),
    ("erf.default", erf),
    ("floor.default", floor),
    ("ceil.default", ceil),
    ("round.default", round),
    ("trunc.default", trunc),
    ("fix.default", trunc),
    ("isnan.default", isnan),
    ("isinf.default", isinf),
    ("isfinite.default", isfinite),
    ("nan_to_num.default", nan_to_num),
    ("relu.default", relu),
    ("gelu.default", gelu),
    ("silu.default", silu),
    ("mish.default", mish),
    ("hardsigmoid.default", hardsigmoid),
    ("hardswish.default", hardswish),
    ("leaky_relu.default", leaky_relu),
    ("elu.default", elu),
    ("selu.default", selu),
    ("celu.default", celu),
    ("softplus.default", softplus),
    ("logit.default", logit),
    ("log_sigmoid_forward.default", log_sigmoid_forward),
    ("log_sigmoid.default", log_sigmoid),
    ("glu.default", glu),
    ("hardshrink.default", hardshrink),
    ("softshrink.default", softshrink),
];

/// `self`, `other` and their common dtype.
fn binary_operands(cx: &mut Ctx) -> R<(Operand, Operand, DType)> {
    let a = cx.operand("self")?;
    let b = cx.operand("other")?;
    let dt = cx.result_type(&[a, b])?;
    Ok((a, b, dt))
}

fn simple_binary(cx: &mut Ctx, op: Opcode) -> R<Vec<Val>> {
    let (a, b, dt) = binary_operands(cx)?;
    let (x, y) = cx.pair(&a, &b, dt)?;
    one(cx.bin(op, x, y)?)
}

/// `x * alpha` unless alpha is 1.
fn scale_by(cx: &mut Ctx, x: ValueId, alpha: Option<Num>) -> R<ValueId> {
    match alpha {
        Some(a) if !a.is(1.0) => {
            let k = cx.full_like(a.scalar(), x)?;
            cx.bin(O::Mul, x, k)
        }
        _ => Ok(x),
    }
}

fn add(cx: &mut Ctx) -> R<Vec<Val>> {
    let (a, b, dt) = binary_operands(cx)?;
    let alpha = cx.opt_num("alpha")?;
    let (x, y) = cx.pair(&a, &b, dt)?;
    let y = scale_by(cx, y, alpha)?;
    let op = if dt == DType::Bool { O::Or } else { O::Add };
    one(cx.bin(op, x, y)?)
}

fn sub(cx: &mut Ctx) -> R<Vec<Val>> {
    let (a, b, dt) = binary_operands(cx)?;
    if dt == DType::Bool {
        return err("subtraction of bool tensors is not supported by torch");
    }
    let alpha = cx.opt_num("alpha")?;
    let (x, y) = cx.pair(&a, &b, dt)?;
    let y = scale_by(cx, y, alpha)?;
    one(cx.bin(O::Sub, x, y)?)
}

/// `other - alpha * self`.
fn rsub(cx: &mut Ctx) -> R<Vec<Val>> {
    let (a, b, dt) = binary_operands(cx)?;
    let alpha = cx.opt_num("alpha")?;
    let (x, y) = cx.pair(&a, &b, dt)?;
    let x = scale_by(cx, x, alpha)?;
    one(cx.bin(O::Sub, y, x)?)
}

fn mul(cx: &mut Ctx) -> R<Vec<Val>> {
    let (a, b, dt) = binary_operands(cx)?;
    let (x, y) = cx.pair(&a, &b, dt)?;
    let op = if dt == DType::Bool { O::And } else { O::Mul };
    one(cx.bin(op, x, y)?)
}

fn true_div_dtype(dt: DType) -> DType {
    if dt.is_float() || dt.is_complex() {
        dt
    } else {
        dtypes::DEFAULT_FLOAT
    }
}

fn div(cx: &mut Ctx) -> R<Vec<Val>> {
    let (a, b, dt) = binary_operands(cx)?;
    let dt = true_div_dtype(dt);
    let (x, y) = cx.pair(&a, &b, dt)?;
    one(cx.bin(O::Div, x, y)?)
}

/// Rounds toward zero.
pub fn trunc_v(cx: &mut Ctx, v: ValueId) -> R<ValueId> {
    let d = cx.dtype(v);
    if !d.is_float() {
        return Ok(v);
    }
    let z = cx.full_like(Scalar::Float(0.0), v)?;
    let neg = cx.cmp("lt", v, z)?;
    let c = cx.un(O::Ceil, v)?;
    let f = cx.un(O::Floor, v)?;
    cx.select(neg, c, f)
}

/// ATen's floor division (`div_floor_integer` / `div_floor_floating`).
pub fn floor_div_v(cx: &mut Ctx, x: ValueId, y: ValueId) -> R<ValueId> {
    let dt = cx.dtype(x);
    let zero = cx.full_like(Scalar::Int(0), x)?;
    if dt.is_unsigned_int() || dt.is_bool() {
        return cx.bin(O::Div, x, y);
    }
    if dt.is_int() {
        let q = cx.bin(O::Div, x, y)?;
        let r = cx.bin(O::Rem, x, y)?;
        let xn = cx.cmp("lt", x, zero)?;
        let yn = cx.cmp("lt", y, zero)?;
        let differ = cx.bin(O::Xor, xn, yn)?;
        let rnz = cx.cmp("ne", r, zero)?;
        let fix = cx.bin(O::And, differ, rnz)?;
        let one_ = cx.full_like(Scalar::Int(1), x)?;
        let q1 = cx.bin(O::Sub, q, one_)?;
        return cx.select(fix, q1, q);
    }
    // if b == 0: a / b
    // mod = fmod(a, b); div = (a - mod) / b
    // if mod != 0 and (b < 0) != (mod < 0): div -= 1
    // if div != 0: fd = floor(div); if div - fd > 0.5: fd += 1   else: fd = copysign(0, a / b)
    let plain = cx.bin(O::Div, x, y)?;
    let m = cx.bin(O::Rem, x, y)?;
    let am = cx.bin(O::Sub, x, m)?;
    let d0 = cx.bin(O::Div, am, y)?;
    let mnz = cx.cmp("ne", m, zero)?;
    let yn = cx.cmp("lt", y, zero)?;
    let mn = cx.cmp("lt", m, zero)?;
    let differ = cx.cmp("ne", yn, mn)?;
    let fix = cx.bin(O::And, mnz, differ)?;
    let one_ = cx.full_like(Scalar::Float(1.0), x)?;
    let d1 = cx.bin(O::Sub, d0, one_)?;
    let d = cx.select(fix, d1, d0)?;
    let fd = cx.un(O::Floor, d)?;
    let frac = cx.bin(O::Sub, d, fd)?;
    let half = cx.full_like(Scalar::Float(0.5), x)?;
    let up = cx.cmp("gt", frac, half)?;
    let fd1 = cx.bin(O::Add, fd, one_)?;
    let fdr = cx.select(up, fd1, fd)?;
    let signed_zero = cx.bin(O::Mul, plain, zero)?;
    let dnz = cx.cmp("ne", d, zero)?;
    let res = cx.select(dnz, fdr, signed_zero)?;
    let ynz = cx.cmp("ne", y, zero)?;
    cx.select(ynz, res, plain)
}

fn div_mode(cx: &mut Ctx) -> R<Vec<Val>> {
    let mode = match cx.opt("rounding_mode")? {
        Some(Arg::Str(s)) => Some(s),
        None => None,
        Some(a) => return err(format!("rounding_mode must be a string, got a {}", a.kind())),
    };
    let (a, b, dt) = binary_operands(cx)?;
    match mode.as_deref() {
        None => {
            let dt = true_div_dtype(dt);
            let (x, y) = cx.pair(&a, &b, dt)?;
            one(cx.bin(O::Div, x, y)?)
        }
        Some("trunc") => {
            let (x, y) = cx.pair(&a, &b, dt)?;
            let q = cx.bin(O::Div, x, y)?;
            one(trunc_v(cx, q)?)
        }
        Some("floor") => {
            let (x, y) = cx.pair(&a, &b, dt)?;
            one(floor_div_v(cx, x, y)?)
        }
        Some(m) => err(format!("unknown rounding_mode `{m}`")),
    }
}

fn floor_divide(cx: &mut Ctx) -> R<Vec<Val>> {
    let (a, b, dt) = binary_operands(cx)?;
    let (x, y) = cx.pair(&a, &b, dt)?;
    one(floor_div_v(cx, x, y)?)
}

/// Python-style remainder (sign of the divisor).
pub fn remainder_v(cx: &mut Ctx, x: ValueId, y: ValueId) -> R<ValueId> {
    let r = cx.bin(O::Rem, x, y)?;
    if cx.dtype(x).is_unsigned_int() {
        return Ok(r);
    }
    let zero = cx.full_like(Scalar::Int(0), x)?;
    let rnz = cx.cmp("ne", r, zero)?;
    let rn = cx.cmp("lt", r, zero)?;
    let yn = cx.cmp("lt", y, zero)?;
    let differ = cx.cmp("ne", rn, yn)?;
    let fix = cx.bin(O::And, rnz, differ)?;
    let ry = cx.bin(O::Add, r, y)?;
    cx.select(fix, ry, r)
}

fn remainder(cx: &mut Ctx) -> R<Vec<Val>> {
    let (a, b, dt) = binary_operands(cx)?;
    let (x, y) = cx.pair(&a, &b, dt)?;
    one(remainder_v(cx, x, y)?)
}

fn fmod(cx: &mut Ctx) -> R<Vec<Val>> {
    simple_binary(cx, O::Rem)
}

/// `x ** e` for a constant exponent, with the CPU kernel's special cases.
pub fn pow_const(cx: &mut Ctx, x: ValueId, e: f64) -> R<ValueId> {
    let sq = |cx: &mut Ctx, x| cx.bin(O::Mul, x, x);
    if e == 0.0 {
        return cx.full_like(Scalar::Int(1), x);
    }
    if e == 1.0 {
        return Ok(x);
    }
    if e == 2.0 {
        return sq(cx, x);
    }
    if e == 3.0 {
        let s = sq(cx, x)?;
        return cx.bin(O::Mul, s, x);
    }
    let float = cx.dtype(x).is_float();
    if float && e == 0.5 {
        return cx.un(O::Sqrt, x);
    }
    if float && e == -0.5 {
        return cx.un(O::Rsqrt, x);
    }
    if float && e == -1.0 {
        let o = cx.full_like(Scalar::Float(1.0), x)?;
        return cx.bin(O::Div, o, x);
    }
    if float && e == -2.0 {
        let s = sq(cx, x)?;
        let o = cx.full_like(Scalar::Float(1.0), x)?;
        return cx.bin(O::Div, o, s);
    }
    let k = cx.full_like(Scalar::Float(e), x)?;
    cx.bin(O::Pow, x, k)
}

fn pow_tensor_scalar(cx: &mut Ctx) -> R<Vec<Val>> {
    let a = cx.operand("self")?;
    let e = cx.num("exponent")?;
    let dt = cx.result_type(&[a, Operand::N(e)])?;
    let shape = cx.broadcast_shape(&[a])?;
    let x = cx.mat(&a, dt, &shape)?;
    if dt.is_int() && e.as_f64() < 0.0 {
        return err("integers to negative integer powers are not allowed");
    }
    one(pow_const(cx, x, e.as_f64())?)
}

fn pow_tensor_tensor(cx: &mut Ctx) -> R<Vec<Val>> {
    let a = cx.operand("self")?;
    let b = cx.operand("exponent")?;
    let dt = cx.result_type(&[a, b])?;
    if let Operand::N(base) = a {
        if base.is(1.0) {
            let shape = cx.broadcast_shape(&[b])?;
            return one(cx.full(Scalar::Int(1), dt, &shape)?);
        }
    }
    let (x, y) = cx.pair(&a, &b, dt)?;
    one(cx.bin(O::Pow, x, y)?)
}

fn maximum(cx: &mut Ctx) -> R<Vec<Val>> {
    simple_binary(cx, O::Max)
}
fn minimum(cx: &mut Ctx) -> R<Vec<Val>> {
    simple_binary(cx, O::Min)
}

fn isnan_v(cx: &mut Ctx, x: ValueId) -> R<ValueId> {
    cx.cmp("ne", x, x)
}

/// NaN-ignoring max/min.
fn fmaxmin(cx: &mut Ctx, op: Opcode) -> R<Vec<Val>> {
    let (a, b, dt) = binary_operands(cx)?;
    let (x, y) = cx.pair(&a, &b, dt)?;
    let m = cx.bin(op, x, y)?;
    if !dt.is_float() {
        return one(m);
    }
    let xn = isnan_v(cx, x)?;
    let yn = isnan_v(cx, y)?;
    let t = cx.select(yn, x, m)?;
    one(cx.select(xn, y, t)?)
}
fn fmax(cx: &mut Ctx) -> R<Vec<Val>> {
    fmaxmin(cx, O::Max)
}
fn fmin(cx: &mut Ctx) -> R<Vec<Val>> {
    fmaxmin(cx, O::Min)
}

fn atan2(cx: &mut Ctx) -> R<Vec<Val>> {
    let (a, b, dt) = binary_operands(cx)?;
    let dt = true_div_dtype(dt);
    let (x, y) = cx.pair(&a, &b, dt)?;
    one(cx.bin(O::Atan2, x, y)?)
}

fn compare(cx: &mut Ctx, dir: &str) -> R<Vec<Val>> {
    let (a, b, dt) = binary_operands(cx)?;
    let (x, y) = cx.pair(&a, &b, dt)?;
    one(cx.cmp(dir, x, y)?)
}
fn eq(cx: &mut Ctx) -> R<Vec<Val>> {
    compare(cx, "eq")
}
fn ne(cx: &mut Ctx) -> R<Vec<Val>> {
    compare(cx, "ne")
}
fn lt(cx: &mut Ctx) -> R<Vec<Val>> {
    compare(cx, "lt")
}
fn le(cx: &mut Ctx) -> R<Vec<Val>> {
    compare(cx, "le")
}
fn gt(cx: &mut Ctx) -> R<Vec<Val>> {
    compare(cx, "gt")
}
fn ge(cx: &mut Ctx) -> R<Vec<Val>> {
    compare(cx, "ge")
}

/// Both operands as bool tensors of their broadcast shape.
fn bool_pair(cx: &mut Ctx) -> R<(ValueId, ValueId)> {
    let a = cx.operand("self")?;
    let b = cx.operand("other")?;
    let shape = cx.broadcast_shape(&[a, b])?;
    let mut out = [None, None];
    for (i, o) in [a, b].iter().enumerate() {
        let d = match o {
            Operand::T(v) | Operand::W(v) => cx.dtype(*v),
            Operand::N(n) => n.dtype(),
        };
        let v = cx.mat(o, d, &shape)?;
        out[i] = Some(cx.truthy(v)?);
    }
    match out {
        [Some(x), Some(y)] => Ok((x, y)),
        _ => err("internal: operands"),
    }
}

fn logical_and(cx: &mut Ctx) -> R<Vec<Val>> {
    let (x, y) = bool_pair(cx)?;
    one(cx.bin(O::And, x, y)?)
}
fn logical_or(cx: &mut Ctx) -> R<Vec<Val>> {
    let (x, y) = bool_pair(cx)?;
    one(cx.bin(O::Or, x, y)?)
}
fn logical_xor(cx: &mut Ctx) -> R<Vec<Val>> {
    let (x, y) = bool_pair(cx)?;
    one(cx.bin(O::Xor, x, y)?)
}
fn logical_not(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let b = cx.truthy(x)?;
    one(cx.un(O::Not, b)?)
}

fn bitwise(cx: &mut Ctx, op: Opcode) -> R<Vec<Val>> {
    let (a, b, dt) = binary_operands(cx)?;
    if !(dt.is_int() || dt.is_bool()) {
        return err(format!("bitwise ops need integer or bool operands, got {dt}"));
    }
    let (x, y) = cx.pair(&a, &b, dt)?;
    one(cx.bin(op, x, y)?)
}
fn bitwise_and(cx: &mut Ctx) -> R<Vec<Val>> {
    bitwise(cx, O::And)
}
fn bitwise_or(cx: &mut Ctx) -> R<Vec<Val>> {
    bitwise(cx, O::Or)
}
fn bitwise_xor(cx: &mut Ctx) -> R<Vec<Val>> {
    bitwise(cx, O::Xor)
}
fn bitwise_not(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    if !(cx.dtype(x).is_int() || cx.dtype(x).is_bool()) {
        return err(format!("bitwise_not needs integer or bool, got {}", cx.ty(x)));
    }
    one(cx.un(O::Not, x)?)
}

fn where_(cx: &mut Ctx) -> R<Vec<Val>> {
    let c = cx.operand("condition")?;
    let a = cx.operand("self")?;
    let b = cx.operand("other")?;
    let dt = cx.result_type(&[a, b])?;
    let shape = cx.broadcast_shape(&[c, a, b])?;
    let cd = match c {
        Operand::T(v) | Operand::W(v) => cx.dtype(v),
        Operand::N(n) => n.dtype(),
    };
    let cv = cx.mat(&c, cd, &shape)?;
    let cv = cx.truthy(cv)?;
    let x = cx.mat(&a, dt, &shape)?;
    let y = cx.mat(&b, dt, &shape)?;
    one(cx.select(cv, x, y)?)
}

fn masked_fill(cx: &mut Ctx) -> R<Vec<Val>> {
    let s = cx.t("self")?;
    let m = cx.operand("mask")?;
    let v = cx.operand("value")?;
    let dt = cx.dtype(s);
    let shape = cx.broadcast_shape(&[Operand::T(s), m])?;
    let x = cx.broadcast_to(s, &shape)?;
    let md = match m {
        Operand::T(v) | Operand::W(v) => cx.dtype(v),
        Operand::N(n) => n.dtype(),
    };
    let mv = cx.mat(&m, md, &shape)?;
    let mv = cx.truthy(mv)?;
    let fill = cx.mat(&v, dt, &shape)?;
    one(cx.select(mv, fill, x)?)
}

/// `min(max(x, lo), hi)` with ATen's promotion over all three.
fn clamp_impl(cx: &mut Ctx, lo: Option<Operand>, hi: Option<Operand>) -> R<Vec<Val>> {
    let a = cx.operand("self")?;
    let mut all = vec![a];
    all.extend(lo);
    all.extend(hi);
    let dt = cx.result_type(&all)?;
    let shape = cx.broadcast_shape(&all)?;
    let mut x = cx.mat(&a, dt, &shape)?;
    if let Some(l) = lo {
        let l = cx.mat(&l, dt, &shape)?;
        x = cx.bin(O::Max, x, l)?;
    }
    if let Some(h) = hi {
        let h = cx.mat(&h, dt, &shape)?;
        x = cx.bin(O::Min, x, h)?;
    }
    one(x)
}

fn opt_operand(cx: &mut Ctx, name: &str) -> R<Option<Operand>> {
    if cx.has(name) {
        Ok(Some(cx.operand(name)?))
    } else {
        Ok(None)
    }
}

fn clamp(cx: &mut Ctx) -> R<Vec<Val>> {
    let lo = opt_operand(cx, "min")?;
    let hi = opt_operand(cx, "max")?;
    if lo.is_none() && hi.is_none() {
        return err("clamp needs at least one of min and max");
    }
    clamp_impl(cx, lo, hi)
}
fn clamp_min(cx: &mut Ctx) -> R<Vec<Val>> {
    let lo = cx.operand("min")?;
    clamp_impl(cx, Some(lo), None)
}
fn clamp_max(cx: &mut Ctx) -> R<Vec<Val>> {
    let hi = cx.operand("max")?;
    clamp_impl(cx, None, Some(hi))
}

fn clamp_const(cx: &mut Ctx, x: ValueId, lo: f64, hi: f64) -> R<ValueId> {
    let l = cx.full_like(Scalar::Float(lo), x)?;
    let h = cx.full_like(Scalar::Float(hi), x)?;
    let m = cx.bin(O::Max, x, l)?;
    cx.bin(O::Min, m, h)
}

fn hardtanh(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let lo = cx.float_or("min_val", -1.0)?;
    let hi = cx.float_or("max_val", 1.0)?;
    one(clamp_const(cx, x, lo, hi)?)
}
fn relu6(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    one(clamp_const(cx, x, 0.0, 6.0)?)
}

/// `self + value * t1 (*|/) t2`.
fn addc(cx: &mut Ctx, op: Opcode) -> R<Vec<Val>> {
    let s = cx.operand("self")?;
    let t1 = cx.operand("tensor1")?;
    let t2 = cx.operand("tensor2")?;
    let value = cx.opt_num("value")?.unwrap_or(Num::Int(1));
    let mut dt = cx.result_type(&[s, t1, t2])?;
    if op == O::Div {
        dt = true_div_dtype(dt);
    }
    let shape = cx.broadcast_shape(&[s, t1, t2])?;
    let x = cx.mat(&s, dt, &shape)?;
    let a = cx.mat(&t1, dt, &shape)?;
    let b = cx.mat(&t2, dt, &shape)?;
    let p = cx.bin(op, a, b)?;
    let p = scale_by(cx, p, Some(value))?;
    one(cx.bin(O::Add, x, p)?)
}
fn addcmul(cx: &mut Ctx) -> R<Vec<Val>> {
    addc(cx, O::Mul)
}
fn addcdiv(cx: &mut Ctx) -> R<Vec<Val>> {
    addc(cx, O::Div)
}

/// `weight < 0.5 ? self + weight * (end - self) : end - (end - self) * (1 - weight)`.
fn lerp(cx: &mut Ctx) -> R<Vec<Val>> {
    let s = cx.operand("self")?;
    let e = cx.operand("end")?;
    let w = cx.operand("weight")?;
    let dt = cx.result_type(&[s, e])?;
    let shape = cx.broadcast_shape(&[s, e, w])?;
    let x = cx.mat(&s, dt, &shape)?;
    let y = cx.mat(&e, dt, &shape)?;
    let wv = cx.mat(&w, dt, &shape)?;
    let diff = cx.bin(O::Sub, y, x)?;
    let half = cx.full_like(Scalar::Float(0.5), x)?;
    let small = cx.cmp("lt", wv, half)?;
    let wd = cx.bin(O::Mul, wv, diff)?;
    let lo = cx.bin(O::Add, x, wd)?;
    let onev = cx.full_like(Scalar::Float(1.0), x)?;
    let omw = cx.bin(O::Sub, onev, wv)?;
    let d2 = cx.bin(O::Mul, diff, omw)?;
    let hi = cx.bin(O::Sub, y, d2)?;
    one(cx.select(small, lo, hi)?)
}

// ------------------------------------------------------------------ unary

fn identity(cx: &mut Ctx) -> R<Vec<Val>> {
    one(cx.t("self")?)
}

macro_rules! float_unary {
    ($($f:ident => $op:ident),* $(,)?) => {$(
        fn $f(cx: &mut Ctx) -> R<Vec<Val>> {
            let x = cx.t("self")?;
            let x = cx.float_of(x)?;
            one(cx.un(O::$op, x)?)
        }
    )*};
}
float_unary!(exp => Exp, expm1 => Expm1, log => Log, log1p => Log1p, sqrt => Sqrt, rsqrt => Rsqrt,
    sin => Sin, cos => Cos, tan => Tan, tanh => Tanh, sigmoid => Logistic, erf => Erf);

/// Rounding ops are the identity on integers.
macro_rules! rounding {
    ($($f:ident => $op:ident),* $(,)?) => {$(
        fn $f(cx: &mut Ctx) -> R<Vec<Val>> {
            let x = cx.t("self")?;
            if !cx.dtype(x).is_float() {
                return one(x);
            }
            one(cx.un(O::$op, x)?)
        }
    )*};
}
rounding!(floor => Floor, ceil => Ceil);

fn round(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    if cx.has("decimals") && cx.int_or("decimals", 0)? != 0 {
        return err("round with decimals is not supported");
    }
    if !cx.dtype(x).is_float() {
        return one(x);
    }
    one(cx.un(O::RoundEven, x)?)
}

fn trunc(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    one(trunc_v(cx, x)?)
}

fn abs(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    if cx.dtype(x).is_bool() || cx.dtype(x).is_unsigned_int() {
        return one(x);
    }
    one(cx.un(O::Abs, x)?)
}

fn neg(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    if cx.dtype(x).is_bool() {
        return err("negation of a bool tensor is not supported by torch");
    }
    one(cx.un(O::Neg, x)?)
}

fn sign(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    if cx.dtype(x).is_bool() {
        return one(x);
    }
    if cx.dtype(x).is_unsigned_int() {
        let z = cx.full_like(Scalar::Int(0), x)?;
        let nz = cx.cmp("ne", x, z)?;
        return one(cx.convert(nz, cx.dtype(x))?);
    }
    one(cx.un(O::Sign, x)?)
}

fn exp2(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let x = cx.float_of(x)?;
    let two = cx.full_like(Scalar::Float(2.0), x)?;
    one(cx.bin(O::Pow, two, x)?)
}

fn log_base(cx: &mut Ctx, base: f64) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let x = cx.float_of(x)?;
    let l = cx.un(O::Log, x)?;
    one(cx.bin_c(O::Div, l, base.ln())?)
}
fn log2(cx: &mut Ctx) -> R<Vec<Val>> {
    log_base(cx, 2.0)
}
fn log10(cx: &mut Ctx) -> R<Vec<Val>> {
    log_base(cx, 10.0)
}

fn reciprocal(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let x = cx.float_of(x)?;
    let o = cx.full_like(Scalar::Float(1.0), x)?;
    one(cx.bin(O::Div, o, x)?)
}

fn square(cx: &mut Ctx) -> R<Vec<Val>> {
    let mut x = cx.t("self")?;
    if cx.dtype(x).is_bool() {
        x = cx.convert(x, DType::I64)?;
    }
    one(cx.bin(O::Mul, x, x)?)
}

fn sinh_cosh(cx: &mut Ctx, plus: bool) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let x = cx.float_of(x)?;
    let e = cx.un(O::Exp, x)?;
    let nx = cx.un(O::Neg, x)?;
    let en = cx.un(O::Exp, nx)?;
    let s = cx.bin(if plus { O::Add } else { O::Sub }, e, en)?;
    one(cx.bin_c(O::Mul, s, 0.5)?)
}
fn sinh(cx: &mut Ctx) -> R<Vec<Val>> {
    sinh_cosh(cx, false)
}
fn cosh(cx: &mut Ctx) -> R<Vec<Val>> {
    sinh_cosh(cx, true)
}

fn atan(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let x = cx.float_of(x)?;
    let o = cx.full_like(Scalar::Float(1.0), x)?;
    one(cx.bin(O::Atan2, x, o)?)
}

/// sqrt((1 - x) * (1 + x))
fn sqrt_one_minus_sq(cx: &mut Ctx, x: ValueId) -> R<ValueId> {
    let o = cx.full_like(Scalar::Float(1.0), x)?;
    let a = cx.bin(O::Sub, o, x)?;
    let b = cx.bin(O::Add, o, x)?;
    let p = cx.bin(O::Mul, a, b)?;
    cx.un(O::Sqrt, p)
}
fn asin(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let x = cx.float_of(x)?;
    let s = sqrt_one_minus_sq(cx, x)?;
    one(cx.bin(O::Atan2, x, s)?)
}
fn acos(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let x = cx.float_of(x)?;
    let s = sqrt_one_minus_sq(cx, x)?;
    one(cx.bin(O::Atan2, s, x)?)
}

fn isnan(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    one(isnan_v(cx, x)?)
}
fn isinf(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    if !cx.dtype(x).is_float() {
        let f = cx.full(Scalar::Bool(false), DType::Bool, &cx.dims(x))?;
        return one(f);
    }
    let a = cx.un(O::Abs, x)?;
    let inf = cx.full_like(Scalar::Float(f64::INFINITY), x)?;
    one(cx.cmp("eq", a, inf)?)
}
fn isfinite(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    if !cx.dtype(x).is_float() {
        let f = cx.full(Scalar::Bool(true), DType::Bool, &cx.dims(x))?;
        return one(f);
    }
    one(cx.un(O::IsFinite, x)?)
}

/// Largest finite value of a float dtype.
pub fn finfo_max(d: DType) -> f64 {
    match d {
        DType::F16 => 65504.0,
        DType::BF16 => 3.3895313892515355e38,
        DType::F32 => f32::MAX as f64,
        DType::F8E4M3FN => 448.0,
        DType::F8E5M2 => 57344.0,
        _ => f64::MAX,
    }
}

fn nan_to_num(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let d = cx.dtype(x);
    if !d.is_float() {
        return one(x);
    }
    let nan = cx.float_or("nan", 0.0)?;
    let pinf = cx.opt_float("posinf")?.unwrap_or(finfo_max(d));
    let ninf = cx.opt_float("neginf")?.unwrap_or(-finfo_max(d));
    let isn = isnan_v(cx, x)?;
    let inf = cx.full_like(Scalar::Float(f64::INFINITY), x)?;
    let minf = cx.full_like(Scalar::Float(f64::NEG_INFINITY), x)?;
    let isp = cx.cmp("eq", x, inf)?;
    let ism = cx.cmp("eq", x, minf)?;
    let nv = cx.full_like(Scalar::Float(nan), x)?;
    let pv = cx.full_like(Scalar::Float(pinf), x)?;
    let mv = cx.full_like(Scalar::Float(ninf), x)?;
    let r = cx.select(isn, nv, x)?;
    let r = cx.select(isp, pv, r)?;
    one(cx.select(ism, mv, r)?)
}

// ------------------------------------------------------------------ activations

pub fn relu_v(cx: &mut Ctx, x: ValueId) -> R<ValueId> {
    let z = cx.full_like(Scalar::Int(0), x)?;
    cx.bin(O::Max, x, z)
}

fn relu(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    if cx.dtype(x).is_bool() {
        return err("relu of a bool tensor is not supported by torch");
    }
    one(relu_v(cx, x)?)
}

fn gelu(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let approx = cx.str_or("approximate", "none")?;
    if approx != "none" && approx != "tanh" {
        return err(format!("gelu approximate `{approx}` is not `none` or `tanh`"));
    }
    let v = cx.b.build1(O::Gelu, &[x], Attrs::new().with("approximate", Attr::Str(approx)), None)?;
    one(v)
}

fn silu(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let s = cx.un(O::Logistic, x)?;
    one(cx.bin(O::Mul, x, s)?)
}

/// `(x * beta) > threshold ? x : log1p(exp(x * beta)) / beta`
fn softplus_v(cx: &mut Ctx, x: ValueId, beta: f64, threshold: f64) -> R<ValueId> {
    let xb = if beta == 1.0 { x } else { cx.bin_c(O::Mul, x, beta)? };
    let big = {
        let t = cx.full_like(Scalar::Float(threshold), x)?;
        cx.cmp("gt", xb, t)?
    };
    let e = cx.un(O::Exp, xb)?;
    let l = cx.un(O::Log1p, e)?;
    let l = if beta == 1.0 { l } else { cx.bin_c(O::Div, l, beta)? };
    cx.select(big, x, l)
}

fn softplus(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let beta = cx.float_or("beta", 1.0)?;
    let th = cx.float_or("threshold", 20.0)?;
    one(softplus_v(cx, x, beta, th)?)
}

fn mish(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let sp = softplus_v(cx, x, 1.0, 20.0)?;
    let t = cx.un(O::Tanh, sp)?;
    one(cx.bin(O::Mul, x, t)?)
}

/// `min(max(x + 3, 0), 6) / 6`
fn hardsigmoid_v(cx: &mut Ctx, x: ValueId) -> R<ValueId> {
    let p = cx.bin_c(O::Add, x, 3.0)?;
    let c = clamp_const(cx, p, 0.0, 6.0)?;
    cx.bin_c(O::Div, c, 6.0)
}
fn hardsigmoid(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    one(hardsigmoid_v(cx, x)?)
}
fn hardswish(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let p = cx.bin_c(O::Add, x, 3.0)?;
    let c = clamp_const(cx, p, 0.0, 6.0)?;
    let m = cx.bin(O::Mul, x, c)?;
    one(cx.bin_c(O::Div, m, 6.0)?)
}

fn leaky_relu(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let slope = cx.float_or("negative_slope", 0.01)?;
    let z = cx.full_like(Scalar::Int(0), x)?;
    let pos = cx.cmp("gt", x, z)?;
    let n = cx.bin_c(O::Mul, x, slope)?;
    one(cx.select(pos, x, n)?)
}

/// `x <= 0 ? expm1(x * input_scale) * alpha * scale : x * scale`
fn elu_v(cx: &mut Ctx, x: ValueId, alpha: f64, scale: f64, input_scale: f64) -> R<ValueId> {
    let z = cx.full_like(Scalar::Int(0), x)?;
    let neg = cx.cmp("le", x, z)?;
    let xi = if input_scale == 1.0 { x } else { cx.bin_c(O::Mul, x, input_scale)? };
    let e = cx.un(O::Expm1, xi)?;
    let n = cx.bin_c(O::Mul, e, alpha * scale)?;
    let p = if scale == 1.0 { x } else { cx.bin_c(O::Mul, x, scale)? };
    cx.select(neg, n, p)
}

fn elu(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let alpha = cx.float_or("alpha", 1.0)?;
    let scale = cx.float_or("scale", 1.0)?;
    let input_scale = cx.float_or("input_scale", 1.0)?;
    one(elu_v(cx, x, alpha, scale, input_scale)?)
}

fn selu(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    one(elu_v(cx, x, 1.673_263_242_354_377_3, 1.050_700_987_355_480_5, 1.0)?)
}

fn celu(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let alpha = cx.float_or("alpha", 1.0)?;
    one(elu_v(cx, x, alpha, 1.0, 1.0 / alpha)?)
}

/// `log(x / (1 - x))`, with x clamped to [eps, 1 - eps] when eps is given.
fn logit(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let mut x = cx.float_of(x)?;
    if let Some(eps) = cx.opt_float("eps")? {
        x = clamp_const(cx, x, eps, 1.0 - eps)?;
    }
    let o = cx.full_like(Scalar::Float(1.0), x)?;
    let d = cx.bin(O::Sub, o, x)?;
    let q = cx.bin(O::Div, x, d)?;
    one(cx.un(O::Log, q)?)
}

/// `log(sigmoid(x)) = min(x, 0) - log1p(exp(-|x|))` (the CPU kernel's stable form).
fn log_sigmoid_v(cx: &mut Ctx, x: ValueId) -> R<ValueId> {
    let z = cx.full_like(Scalar::Float(0.0), x)?;
    let m = cx.bin(O::Min, x, z)?;
    let a = cx.un(O::Abs, x)?;
    let na = cx.un(O::Neg, a)?;
    let e = cx.un(O::Exp, na)?;
    let l = cx.un(O::Log1p, e)?;
    cx.bin(O::Sub, m, l)
}
fn log_sigmoid(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    one(log_sigmoid_v(cx, x)?)
}
fn log_sigmoid_forward(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let y = log_sigmoid_v(cx, x)?;
    let buf = if cx.used(1) { Val::Tensor(cx.full(Scalar::Int(0), cx.dtype(x), &[Dim::Static(0)])?) } else { Val::Absent };
    Ok(vec![Val::Tensor(y), buf])
}

/// `a * sigmoid(b)` of the two halves along `dim`.
fn glu(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    if cx.rank(x) == 0 {
        return err("glu does not take a rank-0 tensor (it halves a dim)");
    }
    let d = norm_dim(cx.int_or("dim", -1)?, cx.rank(x))?;
    let n = static_of(&cx.dim_size(x, d)?, "glu dim")?;
    if n % 2 != 0 {
        return err(format!("glu needs an even dim, got {n}"));
    }
    let a = super::shape::slice_static(cx, x, d, 0, n / 2, 1)?;
    let b = super::shape::slice_static(cx, x, d, n / 2, n, 1)?;
    let s = cx.un(O::Logistic, b)?;
    one(cx.bin(O::Mul, a, s)?)
}

fn hardshrink(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let l = cx.float_or("lambd", 0.5)?;
    let a = cx.un(O::Abs, x)?;
    let lv = cx.full_like(Scalar::Float(l), x)?;
    let keep = cx.cmp("gt", a, lv)?;
    let z = cx.full_like(Scalar::Float(0.0), x)?;
    one(cx.select(keep, x, z)?)
}

fn softshrink(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let l = cx.float_or("lambd", 0.5)?;
    let lv = cx.full_like(Scalar::Float(l), x)?;
    let nl = cx.full_like(Scalar::Float(-l), x)?;
    let up = cx.cmp("gt", x, lv)?;
    let dn = cx.cmp("lt", x, nl)?;
    let xm = cx.bin(O::Sub, x, lv)?;
    let xp = cx.bin(O::Add, x, lv)?;
    let z = cx.full_like(Scalar::Float(0.0), x)?;
    let r = cx.select(dn, xp, z)?;
    one(cx.select(up, xm, r)?)
}
