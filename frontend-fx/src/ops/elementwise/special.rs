//! Special functions and the remaining float math: the gamma family (`lgamma`, `digamma`,
//! `polygamma`), `erfc`, `erfinv`, `special_ndtri`, Hurwitz `special_zeta`, the Bessel
//! `special_i1` / `special_i1e`, the inverse hyperbolic functions, and `nextafter`,
//! `copysign`, `signbit`, `hypot`, `ldexp`, `frexp` and `round(decimals=)`.
//!
//! The special functions become IR ops that the emitter writes as CHLO, which XLA expands with
//! its own accurate approximations for every float width. Integer and bool inputs compute in
//! the default float dtype, as in ATen.

use super::binary::{binary_operands, true_div_dtype, trunc_v};
use crate::ops::build::*;
use Opcode as O;
use tpuc_ir::Direction;

/// I1(x) = i1e(x)·e^|x|.
pub(super) fn special_i1(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let x = cx.float_of(x)?;
    let e = cx.un(O::BesselI1e, x)?;
    let a = cx.un(O::Abs, x)?;
    let s = cx.un(O::Exp, a)?;
    one(cx.bin(O::Mul, e, s)?)
}

/// ndtri(p) = √2·erfinv(2p - 1), the quantile of the standard normal distribution.
pub(super) fn special_ndtri(cx: &mut Ctx) -> R<Vec<Val>> {
    let p = cx.t("self")?;
    let p = cx.float_of(p)?;
    let t = cx.bin_c(O::Mul, p, 2.0)?;
    let t = cx.bin_c(O::Sub, t, 1.0)?;
    let e = cx.un(O::ErfInv, t)?;
    one(cx.bin_c(O::Mul, e, std::f64::consts::SQRT_2)?)
}

/// polygamma(n, x); n = 0 is digamma.
pub(super) fn polygamma(cx: &mut Ctx) -> R<Vec<Val>> {
    let n = cx.int("n")?;
    if n < 0 {
        return err(format!("polygamma needs n >= 0, got {n}"));
    }
    let x = cx.t("self")?;
    let x = cx.float_of(x)?;
    if n == 0 {
        return one(cx.un(O::Digamma, x)?);
    }
    // 16-bit floats: the shifted sum below is computed in f32 and rounded once (in bf16 its 32
    // terms would round 32 times).
    let out_dt = cx.dtype(x);
    let x = cx.convert(x, crate::dtypes::compute_dtype(out_dt))?;
    // XLA's polygamma (through its Hurwitz zeta) loses accuracy for negative x; there the
    // recurrence ψ⁽ⁿ⁾(x) = ψ⁽ⁿ⁾(x + K) - (-1)ⁿ·n!·Σⱼ<K (x + j)^-(n+1) moves it to x + K.
    const K: usize = 32;
    let zero = cx.full_like(Scalar::Float(0.0), x)?;
    let neg = cx.cmp(Direction::Lt, x, zero)?;
    let shifted = cx.bin_c(O::Add, x, K as f64)?;
    let at = cx.select(neg, shifted, x)?;
    let nv = cx.full_like(Scalar::Float(n as f64), x)?;
    let base = cx.bin(O::Polygamma, nv, at)?;
    let power = cx.full_like(Scalar::Float(-(n as f64) - 1.0), x)?;
    let mut sum = zero;
    for j in 0..K {
        let xj = cx.bin_c(O::Add, x, j as f64)?;
        let t = cx.bin(O::Pow, xj, power)?;
        sum = cx.bin(O::Add, sum, t)?;
    }
    let fact: f64 = (1..=n).map(|k| k as f64).product();
    let sign = if n % 2 == 0 { 1.0 } else { -1.0 };
    let corr = cx.bin_c(O::Mul, sum, sign * fact)?;
    let fixed = cx.bin(O::Sub, base, corr)?;
    let y = cx.select(neg, fixed, base)?;
    one(cx.convert(y, out_dt)?)
}

/// A binary op computed in the float dtype the operands promote to.
fn float_binary(cx: &mut Ctx) -> R<(ValueId, ValueId)> {
    let (a, b, dt) = binary_operands(cx)?;
    let (x, y) = cx.pair(&a, &b, true_div_dtype(dt))?;
    Ok((x, y))
}

/// Hurwitz zeta ζ(x, q) (`special_zeta(self=x, other=q)`).
pub(super) fn special_zeta(cx: &mut Ctx) -> R<Vec<Val>> {
    let (x, q) = float_binary(cx)?;
    one(cx.bin(O::Zeta, x, q)?)
}

pub(super) fn nextafter(cx: &mut Ctx) -> R<Vec<Val>> {
    let (a, b, dt) = binary_operands(cx)?;
    if !dt.is_float() {
        return err(format!("nextafter needs floating-point operands, got {}", dt.name()));
    }
    let (x, y) = cx.pair(&a, &b, dt)?;
    one(cx.bin(O::NextAfter, x, y)?)
}

/// True where the sign bit of `x` is set: x < 0, or x is -0.0 (1/x = -inf). (A NaN's sign bit
/// is not visible without a bit cast; NaNs read as positive.)
fn signbit_v(cx: &mut Ctx, x: ValueId) -> R<ValueId> {
    let d = cx.dtype(x);
    let zero = cx.full_like(Scalar::Int(0), x)?;
    if !d.is_float() {
        if d.is_bool() || d.is_unsigned_int() {
            return cx.full(Scalar::Bool(false), DType::Bool, &cx.dims(x));
        }
        return cx.cmp(Direction::Lt, x, zero);
    }
    let neg = cx.cmp(Direction::Lt, x, zero)?;
    let one_v = cx.full_like(Scalar::Float(1.0), x)?;
    let inv = cx.bin(O::Div, one_v, x)?;
    let ninf = cx.full_like(Scalar::Float(f64::NEG_INFINITY), x)?;
    let negzero = cx.cmp(Direction::Eq, inv, ninf)?;
    cx.bin(O::Or, neg, negzero)
}

pub(super) fn signbit(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    one(signbit_v(cx, x)?)
}

/// |self| with the sign of `other`.
pub(super) fn copysign(cx: &mut Ctx) -> R<Vec<Val>> {
    let (x, y) = float_binary(cx)?;
    let a = cx.un(O::Abs, x)?;
    let na = cx.un(O::Neg, a)?;
    let s = signbit_v(cx, y)?;
    one(cx.select(s, na, a)?)
}

/// √(x² + y²) without overflow: m·√(1 + (n/m)²) with m = max(|x|, |y|), n = min; infinite
/// when either is (even with a NaN), zero when both are.
pub(super) fn hypot(cx: &mut Ctx) -> R<Vec<Val>> {
    let (a, b, dt) = binary_operands(cx)?;
    if !dt.is_float() {
        return err(format!("hypot needs floating-point operands, got {}", dt.name()));
    }
    let (x, y) = cx.pair(&a, &b, dt)?;
    let ax = cx.un(O::Abs, x)?;
    let ay = cx.un(O::Abs, y)?;
    let m = cx.bin(O::Max, ax, ay)?;
    let n = cx.bin(O::Min, ax, ay)?;
    let r = cx.bin(O::Div, n, m)?;
    let r2 = cx.bin(O::Mul, r, r)?;
    let s = cx.bin_c(O::Add, r2, 1.0)?;
    let s = cx.un(O::Sqrt, s)?;
    let h = cx.bin(O::Mul, m, s)?;
    let zero = cx.full_like(Scalar::Float(0.0), m)?;
    let is_zero = cx.cmp(Direction::Eq, m, zero)?;
    let h = cx.select(is_zero, zero, h)?;
    let inf = cx.full_like(Scalar::Float(f64::INFINITY), m)?;
    let xi = cx.cmp(Direction::Eq, ax, inf)?;
    let yi = cx.cmp(Direction::Eq, ay, inf)?;
    let any_inf = cx.bin(O::Or, xi, yi)?;
    one(cx.select(any_inf, inf, h)?)
}

/// self·2^other, as ATen writes it (`self * pow(2.0, other)`).
pub(super) fn ldexp(cx: &mut Ctx) -> R<Vec<Val>> {
    let (x, e) = float_binary(cx)?;
    let two = cx.full_like(Scalar::Float(2.0), e)?;
    let p = cx.bin(O::Pow, two, e)?;
    one(cx.bin(O::Mul, x, p)?)
}

/// frexp(x) = (m, e) with x = m·2^e, 0.5 ≤ |m| < 1 and e int32; zeros, infinities and NaN give
/// (x, 0) as in ATen (so -0.0 keeps its sign). Without a bit cast the exponent comes from
/// floor(log2 |x|) + 1, which may be one off next to a power of two and is corrected by
/// comparing |m| with ½ and 1. x is scaled by 2^-e one bit of |e| at a time, by exact powers
/// of two of at most 2^±64 (f32) or 2^±512 (f64): every intermediate lies between x and m,
/// so none leaves the normal range (2^-e itself may: 2^-128 is subnormal in f32). 16-bit floats
/// compute in f32, where they and their mantissas are exact.
///
/// XLA's CPU runtime flushes subnormal operands to zero, so a subnormal x (f32, bf16 and f64;
/// f16's are normal in f32) comes back as (x, 0), which still multiplies back to x, instead of
/// eager's mantissa in [0.5, 1) and exponent.
pub(super) fn frexp(cx: &mut Ctx) -> R<Vec<Val>> {
    let x0 = cx.t("self")?;
    let dt = cx.dtype(x0);
    if !dt.is_float() {
        return err(format!("frexp needs a floating-point tensor, got {}", dt.name()));
    }
    let cd = crate::dtypes::compute_dtype(dt);
    let (bits, step) = if cd == DType::F64 { (11, 512) } else { (8, 64) };
    let x = cx.convert(x0, cd)?;
    let zero = cx.full_like(Scalar::Float(0.0), x)?;
    let one_v = cx.full_like(Scalar::Float(1.0), x)?;
    let finite = cx.un(O::IsFinite, x)?;
    let nonzero = cx.cmp(Direction::Ne, x, zero)?;
    let regular = cx.bin(O::And, finite, nonzero)?;
    let ax = cx.un(O::Abs, x)?;
    let safe = cx.select(regular, ax, one_v)?;
    let l = cx.un(O::Log, safe)?;
    // A flushed subnormal compares unequal to 0 but its log is -inf: it stays x, exponent 0.
    let l_finite = cx.un(O::IsFinite, l)?;
    let regular = cx.bin(O::And, regular, l_finite)?;
    let l = cx.select(regular, l, zero)?;
    let l = cx.bin_c(O::Mul, l, std::f64::consts::LOG2_E)?;
    let l = cx.un(O::Floor, l)?;
    let e = cx.bin_c(O::Add, l, 1.0)?;
    let e = cx.convert(e, DType::I32)?;
    // m = x·2^-e, bit by bit of |e|: down for e > 0, up for e < 0.
    let izero = cx.full_like(Scalar::Int(0), e)?;
    let up = cx.cmp(Direction::Lt, e, izero)?;
    let ne = cx.un(O::Neg, e)?;
    let mag = cx.select(up, ne, e)?;
    let mut m = x;
    for b in 0..bits {
        let w: i64 = 1 << b;
        let mask = cx.full_like(Scalar::Int(w), mag)?;
        let bit = cx.bin(O::And, mag, mask)?;
        let set = cx.cmp(Direction::Ne, bit, izero)?;
        let k = w.min(step);
        let f_up = cx.full_like(Scalar::Float((k as f64).exp2()), x)?;
        let f_down = cx.full_like(Scalar::Float((-k as f64).exp2()), x)?;
        let f = cx.select(up, f_up, f_down)?;
        let mut scaled = m;
        for _ in 0..w / k {
            scaled = cx.bin(O::Mul, scaled, f)?;
        }
        m = cx.select(set, scaled, m)?;
    }
    let ione = cx.full_like(Scalar::Int(1), e)?;
    let am = cx.un(O::Abs, m)?;
    let hi = cx.cmp(Direction::Ge, am, one_v)?;
    let halved = cx.bin_c(O::Mul, m, 0.5)?;
    let m = cx.select(hi, halved, m)?;
    let inc = cx.bin(O::Add, e, ione)?;
    let e = cx.select(hi, inc, e)?;
    let half = cx.full_like(Scalar::Float(0.5), x)?;
    let lo = cx.cmp(Direction::Lt, am, half)?;
    let doubled = cx.bin_c(O::Mul, m, 2.0)?;
    let m = cx.select(lo, doubled, m)?;
    let dec = cx.bin(O::Sub, e, ione)?;
    let e = cx.select(lo, dec, e)?;
    let m = cx.select(regular, m, x)?;
    let e = cx.select(regular, e, izero)?;
    Ok(vec![Val::Tensor(cx.convert(m, dt)?), Val::Tensor(e)])
}

/// round(x, decimals): as ATen, round-half-even of x·10^d divided by 10^d (d > 0), or of
/// x / 10^-d multiplied back (d < 0).
pub(super) fn round_decimals(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let d = cx.int("decimals")?;
    if !cx.dtype(x).is_float() {
        if d >= 0 {
            return one(x);
        }
        return err("round with negative decimals of an integer tensor is not supported");
    }
    if d == 0 {
        return one(cx.un(O::RoundEven, x)?);
    }
    let p = 10f64.powi(d.unsigned_abs().min(400) as i32);
    let (scale, unscale) = if d > 0 { (O::Mul, O::Div) } else { (O::Div, O::Mul) };
    let s = cx.bin_c(scale, x, p)?;
    let r = cx.un(O::RoundEven, s)?;
    one(cx.bin_c(unscale, r, p)?)
}

/// erfcx(x) = e^(x²)·erfc(x); from x = 8 (f32) or 25 (f64) on, where e^(x²) overflows or
/// erfc underflows, the asymptotic series (1 - 1/(2x²) + 3/(4x⁴) - 15/(8x⁶)) / (x√π).
pub(super) fn special_erfcx(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let x = cx.float_of(x)?;
    let big = if cx.dtype(x) == DType::F64 { 25.0 } else { 8.0 };
    let x2 = cx.bin(O::Mul, x, x)?;
    let e = cx.un(O::Exp, x2)?;
    let c = cx.un(O::Erfc, x)?;
    let direct = cx.bin(O::Mul, e, c)?;
    // Asymptotic form, evaluated at max(x, big) so it stays finite where it is not used.
    let bigv = cx.full_like(Scalar::Float(big), x)?;
    let xa = cx.bin(O::Max, x, bigv)?;
    let one_v = cx.full_like(Scalar::Float(1.0), x)?;
    let xa2 = cx.bin(O::Mul, xa, xa)?;
    let u = cx.bin(O::Div, one_v, xa2)?;
    // 1 + u·(-1/2 + u·(3/4 + u·(-15/8)))
    let mut p = cx.full_like(Scalar::Float(-15.0 / 8.0), x)?;
    for c in [3.0 / 4.0, -0.5, 1.0] {
        let pu = cx.bin(O::Mul, p, u)?;
        p = cx.bin_c(O::Add, pu, c)?;
    }
    let den = cx.bin_c(O::Mul, xa, std::f64::consts::PI.sqrt())?;
    let asym = cx.bin(O::Div, p, den)?;
    let is_big = cx.cmp(Direction::Ge, x, bigv)?;
    one(cx.select(is_big, asym, direct)?)
}

/// Which Chebyshev polynomial: first (T) to fourth (W) kind.
#[derive(Copy, Clone, PartialEq)]
enum Cheb {
    T,
    U,
    V,
    W,
}

/// The Chebyshev polynomials by their closed forms, exact for every degree (ATen runs the
/// recurrence up to n, or uses the same trigonometric form for |x| < 1 and n > 6). With
/// x = cos θ (|x| < 1) or ±cosh φ (|x| > 1), m = trunc(n) and h = m + ½:
///   T = cos mθ, U = sin (m+1)θ / sin θ, V = cos hθ / cos(θ/2), W = sin hθ / sin(θ/2),
/// with cosh / sinh for x > 1; for x < -1, T(-y) = (-1)^m T(y), U likewise, V(-y) = (-1)^m W(y)
/// and W(-y) = (-1)^m V(y). At x = ±1 the values are ATen's; n < 0 gives 0. Computed in f64.
fn chebyshev(cx: &mut Ctx, kind: Cheb, shifted: bool) -> R<Vec<Val>> {
    let xo = cx.operand("x")?;
    let no = cx.operand("n")?;
    let dt = true_div_dtype(cx.result_type(&[xo, no])?);
    if !dt.is_float() {
        return err(format!("Chebyshev polynomials need real operands, got {}", dt.name()));
    }
    let (x, n) = cx.pair(&xo, &no, DType::F64)?;
    let x = if shifted {
        let t = cx.bin_c(O::Mul, x, 2.0)?;
        cx.bin_c(O::Sub, t, 1.0)?
    } else {
        x
    };
    let m = trunc_v(cx, n)?;
    let one_v = cx.full_like(Scalar::Float(1.0), x)?;
    let zero = cx.full_like(Scalar::Float(0.0), x)?;
    let ax = cx.un(O::Abs, x)?;
    // (-1)^m
    let two = cx.full_like(Scalar::Float(2.0), m)?;
    let rem = cx.bin(O::Rem, m, two)?;
    let odd = cx.cmp(Direction::Ne, rem, zero)?;
    let neg_one = cx.full_like(Scalar::Float(-1.0), x)?;
    let parity = cx.select(odd, neg_one, one_v)?;
    let half = cx.bin_c(O::Add, m, 0.5)?;
    let m1 = cx.bin_c(O::Add, m, 1.0)?;
    // Inside: θ = acos x.
    let inside = {
        let s = {
            let a = cx.bin(O::Sub, one_v, x)?;
            let b = cx.bin(O::Add, one_v, x)?;
            let p = cx.bin(O::Mul, a, b)?;
            cx.un(O::Sqrt, p)?
        };
        let th = cx.bin(O::Atan2, s, x)?;
        let mul = |cx: &mut Ctx, k: ValueId| cx.bin(O::Mul, k, th);
        match kind {
            Cheb::T => {
                let a = mul(cx, m)?;
                cx.un(O::Cos, a)?
            }
            Cheb::U => {
                let a = mul(cx, m1)?;
                let num = cx.un(O::Sin, a)?;
                let den = cx.un(O::Sin, th)?;
                cx.bin(O::Div, num, den)?
            }
            Cheb::V | Cheb::W => {
                let a = mul(cx, half)?;
                let h = cx.bin_c(O::Mul, th, 0.5)?;
                let (num, den) = if kind == Cheb::V {
                    (cx.un(O::Cos, a)?, cx.un(O::Cos, h)?)
                } else {
                    (cx.un(O::Sin, a)?, cx.un(O::Sin, h)?)
                };
                cx.bin(O::Div, num, den)?
            }
        }
    };
    // Outside: φ = acosh |x|; the hyperbolic forms at |x| (the parity rule gives the sign).
    let outside = {
        let phi = cx.un(O::Acosh, ax)?;
        let ch = |cx: &mut Ctx, k: ValueId, sinh: bool| -> R<ValueId> {
            let a = cx.bin(O::Mul, k, phi)?;
            let e = cx.un(O::Exp, a)?;
            let na = cx.un(O::Neg, a)?;
            let en = cx.un(O::Exp, na)?;
            let s = cx.bin(if sinh { O::Sub } else { O::Add }, e, en)?;
            cx.bin_c(O::Mul, s, 0.5)
        };
        let one_f = cx.full_like(Scalar::Float(1.0), phi)?;
        let half_f = cx.full_like(Scalar::Float(0.5), phi)?;
        let pos_kind = |cx: &mut Ctx, k: Cheb| -> R<ValueId> {
            match k {
                Cheb::T => ch(cx, m, false),
                Cheb::U => {
                    let num = ch(cx, m1, true)?;
                    let den = ch(cx, one_f, true)?;
                    cx.bin(O::Div, num, den)
                }
                Cheb::V => {
                    let num = ch(cx, half, false)?;
                    let den = ch(cx, half_f, false)?;
                    cx.bin(O::Div, num, den)
                }
                Cheb::W => {
                    let num = ch(cx, half, true)?;
                    let den = ch(cx, half_f, true)?;
                    cx.bin(O::Div, num, den)
                }
            }
        };
        let at_pos = pos_kind(cx, kind)?;
        let mirrored = match kind {
            Cheb::V => pos_kind(cx, Cheb::W)?,
            Cheb::W => pos_kind(cx, Cheb::V)?,
            k => pos_kind(cx, k)?,
        };
        let signed = cx.bin(O::Mul, mirrored, parity)?;
        let negx = cx.cmp(Direction::Lt, x, zero)?;
        cx.select(negx, signed, at_pos)?
    };
    let lt1 = cx.cmp(Direction::Lt, ax, one_v)?;
    let r = cx.select(lt1, inside, outside)?;
    // x = ±1 exactly.
    let at_one = {
        let two_m1 = {
            let t = cx.bin_c(O::Mul, m, 2.0)?;
            cx.bin_c(O::Add, t, 1.0)?
        };
        let (pos, neg) = match kind {
            Cheb::T => (one_v, parity),
            Cheb::U => (m1, cx.bin(O::Mul, parity, m1)?),
            Cheb::V => (one_v, cx.bin(O::Mul, parity, two_m1)?),
            Cheb::W => (two_m1, parity),
        };
        let xpos = cx.cmp(Direction::Gt, x, zero)?;
        cx.select(xpos, pos, neg)?
    };
    let is_one = cx.cmp(Direction::Eq, ax, one_v)?;
    let r = cx.select(is_one, at_one, r)?;
    // Degree 0 is 1 everywhere (no 0/0 from the forms), negative degrees 0.
    let m0 = cx.cmp(Direction::Eq, m, zero)?;
    let r = cx.select(m0, one_v, r)?;
    let mneg = cx.cmp(Direction::Lt, m, zero)?;
    let r = cx.select(mneg, zero, r)?;
    // NaN in, NaN out.
    let xnan = cx.cmp(Direction::Ne, x, x)?;
    let r = cx.select(xnan, x, r)?;
    one(cx.convert(r, dt)?)
}

pub(super) fn chebyshev_t(cx: &mut Ctx) -> R<Vec<Val>> {
    chebyshev(cx, Cheb::T, false)
}
pub(super) fn chebyshev_u(cx: &mut Ctx) -> R<Vec<Val>> {
    chebyshev(cx, Cheb::U, false)
}
pub(super) fn chebyshev_v(cx: &mut Ctx) -> R<Vec<Val>> {
    chebyshev(cx, Cheb::V, false)
}
pub(super) fn chebyshev_w(cx: &mut Ctx) -> R<Vec<Val>> {
    chebyshev(cx, Cheb::W, false)
}
pub(super) fn shifted_chebyshev_t(cx: &mut Ctx) -> R<Vec<Val>> {
    chebyshev(cx, Cheb::T, true)
}
pub(super) fn shifted_chebyshev_u(cx: &mut Ctx) -> R<Vec<Val>> {
    chebyshev(cx, Cheb::U, true)
}
pub(super) fn shifted_chebyshev_v(cx: &mut Ctx) -> R<Vec<Val>> {
    chebyshev(cx, Cheb::V, true)
}
pub(super) fn shifted_chebyshev_w(cx: &mut Ctx) -> R<Vec<Val>> {
    chebyshev(cx, Cheb::W, true)
}

/// j0(x) = sin x / x, 1 at 0 (and within f64's reach of it, where the ratio loses nothing).
pub(super) fn spherical_bessel_j0(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("x")?;
    let x = cx.float_of(x)?;
    let dt = cx.dtype(x);
    let xd = cx.convert(x, DType::F64)?;
    let s = cx.un(O::Sin, xd)?;
    let r = cx.bin(O::Div, s, xd)?;
    let zero = cx.full_like(Scalar::Float(0.0), xd)?;
    let one_v = cx.full_like(Scalar::Float(1.0), xd)?;
    let at0 = cx.cmp(Direction::Eq, xd, zero)?;
    let r = cx.select(at0, one_v, r)?;
    // sin(±inf)/±inf is NaN; the limit is 0.
    let ax = cx.un(O::Abs, xd)?;
    let inf = cx.full_like(Scalar::Float(f64::INFINITY), xd)?;
    let isinf = cx.cmp(Direction::Eq, ax, inf)?;
    let r = cx.select(isinf, zero, r)?;
    one(cx.convert(r, dt)?)
}

/// Which orthogonal polynomial family runs the three-term recurrence.
#[derive(Copy, Clone)]
enum Recur {
    HermiteH,
    HermiteHe,
    Laguerre,
    Legendre,
}

/// Largest degree the recurrence families are unrolled to; higher degrees give NaN.
const MAX_DEGREE: i64 = 100;

/// Hermite (physicists' H, probabilists' He), Laguerre and Legendre polynomials of degree
/// trunc(n), by the same three-term recurrence ATen runs, unrolled to degree `MAX_DEGREE` (a
/// degree above that gives NaN: visible, never a wrong number); n < 0 gives 0. Computed in f64.
fn recurrence(cx: &mut Ctx, fam: Recur) -> R<Vec<Val>> {
    let xo = cx.operand("x")?;
    let no = cx.operand("n")?;
    let dt = true_div_dtype(cx.result_type(&[xo, no])?);
    if !dt.is_float() {
        return err(format!("orthogonal polynomials need real operands, got {}", dt.name()));
    }
    let (x, n) = cx.pair(&xo, &no, DType::F64)?;
    let m = trunc_v(cx, n)?;
    let one_v = cx.full_like(Scalar::Float(1.0), x)?;
    let p1 = match fam {
        Recur::HermiteH => cx.bin_c(O::Mul, x, 2.0)?,
        Recur::HermiteHe | Recur::Legendre => x,
        Recur::Laguerre => cx.bin(O::Sub, one_v, x)?,
    };
    let nan = cx.full_like(Scalar::Float(f64::NAN), x)?;
    let zero = cx.full_like(Scalar::Float(0.0), x)?;
    // Degrees above the bound: NaN; below 0: 0; then each degree's value where m equals it.
    let big = cx.full_like(Scalar::Float(MAX_DEGREE as f64), m)?;
    let over = cx.cmp(Direction::Gt, m, big)?;
    let mut r = cx.select(over, nan, zero)?;
    let (mut prev, mut cur) = (one_v, p1);
    for k in 0..=MAX_DEGREE {
        let p = if k == 0 { prev } else { cur };
        let kv = cx.full_like(Scalar::Float(k as f64), m)?;
        let at = cx.cmp(Direction::Eq, m, kv)?;
        r = cx.select(at, p, r)?;
        if k >= 1 {
            let kf = k as f64;
            // p_{k+1} from p_k (cur) and p_{k-1} (prev).
            let next = match fam {
                Recur::HermiteH => {
                    let a = cx.bin(O::Mul, x, cur)?;
                    let a = cx.bin_c(O::Mul, a, 2.0)?;
                    let b = cx.bin_c(O::Mul, prev, 2.0 * kf)?;
                    cx.bin(O::Sub, a, b)?
                }
                Recur::HermiteHe => {
                    let a = cx.bin(O::Mul, x, cur)?;
                    let b = cx.bin_c(O::Mul, prev, kf)?;
                    cx.bin(O::Sub, a, b)?
                }
                Recur::Laguerre => {
                    let c = cx.full_like(Scalar::Float(2.0 * kf + 1.0), x)?;
                    let c = cx.bin(O::Sub, c, x)?;
                    let a = cx.bin(O::Mul, c, cur)?;
                    let b = cx.bin_c(O::Mul, prev, kf)?;
                    let d = cx.bin(O::Sub, a, b)?;
                    cx.bin_c(O::Div, d, kf + 1.0)?
                }
                Recur::Legendre => {
                    let a = cx.bin(O::Mul, x, cur)?;
                    let a = cx.bin_c(O::Mul, a, 2.0 * kf + 1.0)?;
                    let b = cx.bin_c(O::Mul, prev, kf)?;
                    let d = cx.bin(O::Sub, a, b)?;
                    cx.bin_c(O::Div, d, kf + 1.0)?
                }
            };
            prev = cur;
            cur = next;
        }
    }
    let xnan = cx.cmp(Direction::Ne, x, x)?;
    let r = cx.select(xnan, x, r)?;
    one(cx.convert(r, dt)?)
}

pub(super) fn hermite_h(cx: &mut Ctx) -> R<Vec<Val>> {
    recurrence(cx, Recur::HermiteH)
}
pub(super) fn hermite_he(cx: &mut Ctx) -> R<Vec<Val>> {
    recurrence(cx, Recur::HermiteHe)
}
pub(super) fn laguerre_l(cx: &mut Ctx) -> R<Vec<Val>> {
    recurrence(cx, Recur::Laguerre)
}
pub(super) fn legendre_p(cx: &mut Ctx) -> R<Vec<Val>> {
    recurrence(cx, Recur::Legendre)
}
