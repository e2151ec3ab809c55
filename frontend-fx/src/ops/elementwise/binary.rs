//! Binary (and a few ternary) elementwise ops: arithmetic, division and remainder, powers,
//! minimum and maximum, comparisons, logical and bitwise ops, bit shifts, `where`,
//! `masked_fill`, clamps, `addcmul`/`addcdiv` and `lerp`.
//!
//! They follow ATen: operands are promoted with `result_type` (tensors beat zero-dim tensors
//! beat Python numbers within a category) and broadcast explicitly; true division and
//! float-only math promote integers to the default float dtype. Where the CPU kernel uses a
//! special form (pow by 2 is `x*x`, floor division goes through `fmod`), the same form is
//! emitted so results match eager bit for bit where the IR allows.

use crate::ops::build::*;
use Opcode as O;
use tpuc_ir::Direction;

/// `self` and `other` in their common integer dtype, broadcast; an error naming `what` for
/// other dtypes.
pub(super) fn int_pair(cx: &mut Ctx, what: &str) -> R<(ValueId, ValueId)> {
    let (a, b, dt) = binary_operands(cx)?;
    if !dt.is_int() {
        return err(format!("{what} needs integer operands, got {dt}"));
    }
    cx.pair(&a, &b, dt)
}

/// `self`, `other` and their common dtype.
pub(super) fn binary_operands(cx: &mut Ctx) -> R<(Operand, Operand, DType)> {
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

pub(super) fn add(cx: &mut Ctx) -> R<Vec<Val>> {
    let (a, b, dt) = binary_operands(cx)?;
    let alpha = cx.opt_num("alpha")?;
    let (x, y) = cx.pair(&a, &b, dt)?;
    let y = scale_by(cx, y, alpha)?;
    let op = if dt == DType::Bool { O::Or } else { O::Add };
    one(cx.bin(op, x, y)?)
}

pub(super) fn sub(cx: &mut Ctx) -> R<Vec<Val>> {
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
pub(super) fn rsub(cx: &mut Ctx) -> R<Vec<Val>> {
    let (a, b, dt) = binary_operands(cx)?;
    let alpha = cx.opt_num("alpha")?;
    let (x, y) = cx.pair(&a, &b, dt)?;
    let x = scale_by(cx, x, alpha)?;
    one(cx.bin(O::Sub, y, x)?)
}

pub(super) fn mul(cx: &mut Ctx) -> R<Vec<Val>> {
    let (a, b, dt) = binary_operands(cx)?;
    let (x, y) = cx.pair(&a, &b, dt)?;
    let op = if dt == DType::Bool { O::And } else { O::Mul };
    one(cx.bin(op, x, y)?)
}

pub(super) fn true_div_dtype(dt: DType) -> DType {
    if dt.is_float() || dt.is_complex() {
        dt
    } else {
        dtypes::DEFAULT_FLOAT
    }
}

pub(super) fn div(cx: &mut Ctx) -> R<Vec<Val>> {
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
    let neg = cx.cmp(Direction::Lt, v, z)?;
    let c = cx.un(O::Ceil, v)?;
    let f = cx.un(O::Floor, v)?;
    cx.select(neg, c, f)
}

pub(super) fn div_mode(cx: &mut Ctx) -> R<Vec<Val>> {
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

pub(super) fn floor_divide(cx: &mut Ctx) -> R<Vec<Val>> {
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
    let rnz = cx.cmp(Direction::Ne, r, zero)?;
    let rn = cx.cmp(Direction::Lt, r, zero)?;
    let yn = cx.cmp(Direction::Lt, y, zero)?;
    let differ = cx.cmp(Direction::Ne, rn, yn)?;
    let fix = cx.bin(O::And, rnz, differ)?;
    let ry = cx.bin(O::Add, r, y)?;
    cx.select(fix, ry, r)
}

pub(super) fn remainder(cx: &mut Ctx) -> R<Vec<Val>> {
    let (a, b, dt) = binary_operands(cx)?;
    let (x, y) = cx.pair(&a, &b, dt)?;
    one(remainder_v(cx, x, y)?)
}

pub(super) fn fmod(cx: &mut Ctx) -> R<Vec<Val>> {
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

pub(super) fn pow_tensor_scalar(cx: &mut Ctx) -> R<Vec<Val>> {
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

pub(super) fn pow_tensor_tensor(cx: &mut Ctx) -> R<Vec<Val>> {
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

pub(super) fn maximum(cx: &mut Ctx) -> R<Vec<Val>> {
    simple_binary(cx, O::Max)
}
pub(super) fn minimum(cx: &mut Ctx) -> R<Vec<Val>> {
    simple_binary(cx, O::Min)
}

pub(super) fn isnan_v(cx: &mut Ctx, x: ValueId) -> R<ValueId> {
    cx.cmp(Direction::Ne, x, x)
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
pub(super) fn fmax(cx: &mut Ctx) -> R<Vec<Val>> {
    fmaxmin(cx, O::Max)
}
pub(super) fn fmin(cx: &mut Ctx) -> R<Vec<Val>> {
    fmaxmin(cx, O::Min)
}

pub(super) fn atan2(cx: &mut Ctx) -> R<Vec<Val>> {
    let (a, b, dt) = binary_operands(cx)?;
    let dt = true_div_dtype(dt);
    let (x, y) = cx.pair(&a, &b, dt)?;
    one(cx.bin(O::Atan2, x, y)?)
}

fn compare(cx: &mut Ctx, dir: Direction) -> R<Vec<Val>> {
    let (a, b, dt) = binary_operands(cx)?;
    let (x, y) = cx.pair(&a, &b, dt)?;
    one(cx.cmp(dir, x, y)?)
}
pub(super) fn eq(cx: &mut Ctx) -> R<Vec<Val>> {
    compare(cx, Direction::Eq)
}
pub(super) fn ne(cx: &mut Ctx) -> R<Vec<Val>> {
    compare(cx, Direction::Ne)
}
pub(super) fn lt(cx: &mut Ctx) -> R<Vec<Val>> {
    compare(cx, Direction::Lt)
}
pub(super) fn le(cx: &mut Ctx) -> R<Vec<Val>> {
    compare(cx, Direction::Le)
}
pub(super) fn gt(cx: &mut Ctx) -> R<Vec<Val>> {
    compare(cx, Direction::Gt)
}
pub(super) fn ge(cx: &mut Ctx) -> R<Vec<Val>> {
    compare(cx, Direction::Ge)
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

pub(super) fn logical_and(cx: &mut Ctx) -> R<Vec<Val>> {
    let (x, y) = bool_pair(cx)?;
    one(cx.bin(O::And, x, y)?)
}
pub(super) fn logical_or(cx: &mut Ctx) -> R<Vec<Val>> {
    let (x, y) = bool_pair(cx)?;
    one(cx.bin(O::Or, x, y)?)
}
pub(super) fn logical_xor(cx: &mut Ctx) -> R<Vec<Val>> {
    let (x, y) = bool_pair(cx)?;
    one(cx.bin(O::Xor, x, y)?)
}
pub(super) fn logical_not(cx: &mut Ctx) -> R<Vec<Val>> {
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
pub(super) fn bitwise_and(cx: &mut Ctx) -> R<Vec<Val>> {
    bitwise(cx, O::And)
}
pub(super) fn bitwise_or(cx: &mut Ctx) -> R<Vec<Val>> {
    bitwise(cx, O::Or)
}
pub(super) fn bitwise_xor(cx: &mut Ctx) -> R<Vec<Val>> {
    bitwise(cx, O::Xor)
}
pub(super) fn bitwise_not(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    if !(cx.dtype(x).is_int() || cx.dtype(x).is_bool()) {
        return err(format!("bitwise_not needs integer or bool, got {}", cx.ty(x)));
    }
    one(cx.un(O::Not, x)?)
}

/// `bitwise_left_shift` / `bitwise_right_shift` as ATen's CPU kernels compute them: an amount
/// that is negative (of a signed dtype) or at least the bit width shifts every bit out, giving
/// 0, or for a right shift of a signed dtype the sign fill; right shifts of signed dtypes are
/// arithmetic, of unsigned ones logical. The IR ops' own rule for such amounts (XLA's) is not
/// relied on: they only see amounts inside the width where it matters.
fn shift(cx: &mut Ctx, left: bool) -> R<Vec<Val>> {
    let (x, s) = int_pair(cx, "a bit shift")?;
    let dt = cx.dtype(x);
    let width = dt.size_bytes() as i64 * 8;
    let w = cx.full_like(Scalar::Int(width), s)?;
    let mut out = cx.cmp(Direction::Ge, s, w)?;
    if dt.is_signed_int() {
        let zero = cx.full_like(Scalar::Int(0), s)?;
        let neg = cx.cmp(Direction::Lt, s, zero)?;
        out = cx.bin(O::Or, out, neg)?;
    }
    if !left && dt.is_signed_int() {
        let top = cx.full_like(Scalar::Int(width - 1), s)?;
        let s = cx.select(out, top, s)?;
        return one(cx.bin(O::ShiftRightArithmetic, x, s)?);
    }
    let shifted = cx.bin(if left { O::ShiftLeft } else { O::ShiftRightLogical }, x, s)?;
    let zero = cx.full_like(Scalar::Int(0), x)?;
    one(cx.select(out, zero, shifted)?)
}
pub(super) fn bitwise_left_shift(cx: &mut Ctx) -> R<Vec<Val>> {
    shift(cx, true)
}
pub(super) fn bitwise_right_shift(cx: &mut Ctx) -> R<Vec<Val>> {
    shift(cx, false)
}

pub(super) fn where_(cx: &mut Ctx) -> R<Vec<Val>> {
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

pub(super) fn masked_fill(cx: &mut Ctx) -> R<Vec<Val>> {
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

pub(super) fn clamp(cx: &mut Ctx) -> R<Vec<Val>> {
    let lo = opt_operand(cx, "min")?;
    let hi = opt_operand(cx, "max")?;
    if lo.is_none() && hi.is_none() {
        return err("clamp needs at least one of min and max");
    }
    clamp_impl(cx, lo, hi)
}
pub(super) fn clamp_min(cx: &mut Ctx) -> R<Vec<Val>> {
    let lo = cx.operand("min")?;
    clamp_impl(cx, Some(lo), None)
}
pub(super) fn clamp_max(cx: &mut Ctx) -> R<Vec<Val>> {
    let hi = cx.operand("max")?;
    clamp_impl(cx, None, Some(hi))
}

pub(super) fn clamp_const(cx: &mut Ctx, x: ValueId, lo: f64, hi: f64) -> R<ValueId> {
    let l = cx.full_like(Scalar::Float(lo), x)?;
    let h = cx.full_like(Scalar::Float(hi), x)?;
    let m = cx.bin(O::Max, x, l)?;
    cx.bin(O::Min, m, h)
}

pub(super) fn hardtanh(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let lo = cx.float("min_val")?;
    let hi = cx.float("max_val")?;
    one(clamp_const(cx, x, lo, hi)?)
}
pub(super) fn relu6(cx: &mut Ctx) -> R<Vec<Val>> {
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
    // One kernel in eager: 16-bit floats are computed in f32 and rounded once.
    let cd = crate::dtypes::compute_dtype(dt);
    let x = cx.mat(&s, cd, &shape)?;
    let a = cx.mat(&t1, cd, &shape)?;
    let b = cx.mat(&t2, cd, &shape)?;
    let p = cx.bin(op, a, b)?;
    let p = scale_by(cx, p, Some(value))?;
    let y = cx.bin(O::Add, x, p)?;
    one(cx.convert(y, dt)?)
}
pub(super) fn addcmul(cx: &mut Ctx) -> R<Vec<Val>> {
    addc(cx, O::Mul)
}
pub(super) fn addcdiv(cx: &mut Ctx) -> R<Vec<Val>> {
    addc(cx, O::Div)
}

/// `weight < 0.5 ? self + weight * (end - self) : end - (end - self) * (1 - weight)`.
pub(super) fn lerp(cx: &mut Ctx) -> R<Vec<Val>> {
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
    let small = cx.cmp(Direction::Lt, wv, half)?;
    let wd = cx.bin(O::Mul, wv, diff)?;
    let lo = cx.bin(O::Add, x, wd)?;
    let onev = cx.full_like(Scalar::Float(1.0), x)?;
    let omw = cx.bin(O::Sub, onev, wv)?;
    let d2 = cx.bin(O::Mul, diff, omw)?;
    let hi = cx.bin(O::Sub, y, d2)?;
    one(cx.select(small, lo, hi)?)
}
