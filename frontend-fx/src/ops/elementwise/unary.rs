//! Unary math: exponentials, logarithms, roots, trigonometric and hyperbolic functions,
//! rounding (the identity on integers), sign and absolute value, and the float classification
//! and cleanup ops (`isnan`, `isinf`, `isfinite`, `nan_to_num`).

use super::binary::{isnan_v, trunc_v};
use crate::ops::build::*;
use Opcode as O;
use tpuc_ir::Direction;

pub(super) fn identity(cx: &mut Ctx) -> R<Vec<Val>> {
    one(cx.t("self")?)
}

macro_rules! float_unary {
    ($($f:ident => $op:ident),* $(,)?) => {$(
        pub(super) fn $f(cx: &mut Ctx) -> R<Vec<Val>> {
            let x = cx.t("self")?;
            let x = cx.float_of(x)?;
            one(cx.un(O::$op, x)?)
        }
    )*};
}
float_unary!(exp => Exp, expm1 => Expm1, log => Log, log1p => Log1p, sqrt => Sqrt, rsqrt => Rsqrt,
    sin => Sin, cos => Cos, tan => Tan, tanh => Tanh, sigmoid => Logistic, erf => Erf);
// The special functions the IR has as ops (see special.rs for the composed ones).
float_unary!(erfc => Erfc, erfinv => ErfInv, lgamma => Lgamma, digamma => Digamma, acosh => Acosh,
    asinh => Asinh, atanh => Atanh, special_i1e => BesselI1e);

/// Rounding ops are the identity on integers.
macro_rules! rounding {
    ($($f:ident => $op:ident),* $(,)?) => {$(
        pub(super) fn $f(cx: &mut Ctx) -> R<Vec<Val>> {
            let x = cx.t("self")?;
            if !cx.dtype(x).is_float() {
                return one(x);
            }
            one(cx.un(O::$op, x)?)
        }
    )*};
}
rounding!(floor => Floor, ceil => Ceil);

pub(super) fn round(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    // `round.default` has no `decimals`.
    if cx.opt_int("decimals")?.is_some_and(|d| d != 0) {
        return err("round with decimals is not supported");
    }
    if !cx.dtype(x).is_float() {
        return one(x);
    }
    one(cx.un(O::RoundEven, x)?)
}

pub(super) fn trunc(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    one(trunc_v(cx, x)?)
}

pub(super) fn abs(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    if cx.dtype(x).is_complex() {
        return one(complex_abs(cx, x)?);
    }
    if cx.dtype(x).is_bool() || cx.dtype(x).is_unsigned_int() {
        return one(x);
    }
    one(cx.un(O::Abs, x)?)
}

pub(super) fn neg(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    if cx.dtype(x).is_bool() {
        return err("negation of a bool tensor is not supported by torch");
    }
    one(cx.un(O::Neg, x)?)
}

pub(super) fn sign(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    if cx.dtype(x).is_bool() {
        return one(x);
    }
    if cx.dtype(x).is_unsigned_int() {
        let z = cx.full_like(Scalar::Int(0), x)?;
        let nz = cx.cmp(Direction::Ne, x, z)?;
        return one(cx.convert(nz, cx.dtype(x))?);
    }
    one(cx.un(O::Sign, x)?)
}

pub(super) fn exp2(cx: &mut Ctx) -> R<Vec<Val>> {
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
pub(super) fn log2(cx: &mut Ctx) -> R<Vec<Val>> {
    log_base(cx, 2.0)
}
pub(super) fn log10(cx: &mut Ctx) -> R<Vec<Val>> {
    log_base(cx, 10.0)
}

pub(super) fn reciprocal(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let x = cx.float_of(x)?;
    let o = cx.full_like(Scalar::Float(1.0), x)?;
    one(cx.bin(O::Div, o, x)?)
}

pub(super) fn square(cx: &mut Ctx) -> R<Vec<Val>> {
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
pub(super) fn sinh(cx: &mut Ctx) -> R<Vec<Val>> {
    sinh_cosh(cx, false)
}
pub(super) fn cosh(cx: &mut Ctx) -> R<Vec<Val>> {
    sinh_cosh(cx, true)
}

/// atan(x) as atan2(2x, 2): exact (scaling by 2 rounds nothing; an overflow to inf still
/// gives ±π/2). The XLA CPU plugin (0.11.2) computes `atan2(x, 1)`, with a constant 1, wrongly
/// for most elements of longer vectors on some x86 hosts (AMD EPYC seen: 338 of 400 off),
/// while atan2 with any other divisor is right.
pub(super) fn atan(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let x = cx.float_of(x)?;
    let two = cx.full_like(Scalar::Float(2.0), x)?;
    let x2 = cx.bin(O::Mul, x, two)?;
    one(cx.bin(O::Atan2, x2, two)?)
}

/// sqrt((1 - x) * (1 + x))
fn sqrt_one_minus_sq(cx: &mut Ctx, x: ValueId) -> R<ValueId> {
    let o = cx.full_like(Scalar::Float(1.0), x)?;
    let a = cx.bin(O::Sub, o, x)?;
    let b = cx.bin(O::Add, o, x)?;
    let p = cx.bin(O::Mul, a, b)?;
    cx.un(O::Sqrt, p)
}
pub(super) fn asin(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let x = cx.float_of(x)?;
    let s = sqrt_one_minus_sq(cx, x)?;
    one(cx.bin(O::Atan2, x, s)?)
}
pub(super) fn acos(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let x = cx.float_of(x)?;
    let s = sqrt_one_minus_sq(cx, x)?;
    one(cx.bin(O::Atan2, s, x)?)
}

pub(super) fn isnan(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    one(isnan_v(cx, x)?)
}
pub(super) fn isinf(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    if !cx.dtype(x).is_float() {
        let f = cx.full(Scalar::Bool(false), DType::Bool, &cx.dims(x))?;
        return one(f);
    }
    let a = cx.un(O::Abs, x)?;
    let inf = cx.full_like(Scalar::Float(f64::INFINITY), x)?;
    one(cx.cmp(Direction::Eq, a, inf)?)
}
pub(super) fn isfinite(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    if !cx.dtype(x).is_float() {
        let f = cx.full(Scalar::Bool(true), DType::Bool, &cx.dims(x))?;
        return one(f);
    }
    one(cx.un(O::IsFinite, x)?)
}

pub(super) fn nan_to_num(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let d = cx.dtype(x);
    if !d.is_float() {
        return one(x);
    }
    // A None `nan` is 0.
    let nan = cx.opt_float("nan")?.unwrap_or(0.0);
    let max = d.finite_max().unwrap_or(f64::MAX);
    let pinf = cx.opt_float("posinf")?.unwrap_or(max);
    let ninf = cx.opt_float("neginf")?.unwrap_or(-max);
    let isn = isnan_v(cx, x)?;
    let inf = cx.full_like(Scalar::Float(f64::INFINITY), x)?;
    let minf = cx.full_like(Scalar::Float(f64::NEG_INFINITY), x)?;
    let isp = cx.cmp(Direction::Eq, x, inf)?;
    let ism = cx.cmp(Direction::Eq, x, minf)?;
    let nv = cx.full_like(Scalar::Float(nan), x)?;
    let pv = cx.full_like(Scalar::Float(pinf), x)?;
    let mv = cx.full_like(Scalar::Float(ninf), x)?;
    let r = cx.select(isn, nv, x)?;
    let r = cx.select(isp, pv, r)?;
    one(cx.select(ism, mv, r)?)
}
