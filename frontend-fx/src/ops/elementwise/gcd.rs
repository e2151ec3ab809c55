//! Integer number theory: `gcd` and `lcm`, element by element, as ATen's CPU kernels compute
//! them.
//!
//! The kernel runs Euclid's loop on the magnitudes, `while a != 0 { (a, b) = (b % a, a) }`,
//! and returns `b`; `lcm` is `|a / g * b|` (wrapping) with `g = gcd(a, b)`, 0 when `g` is 0.
//! `gcd(INT_MIN, 0)` stays negative, as in the kernel (`std::abs` wraps).
//! The IR has no loop, so the loop is unrolled as often as it can run for the dtype: by Lamé's
//! theorem consecutive Fibonacci numbers take the most steps among operands of bounded
//! magnitude, so simulating them up to the dtype's largest magnitude gives an exact bound
//! (91 steps for int64, 45 for int32). A step after `a` reached 0 changes nothing.

use super::binary::int_pair;
use crate::ops::build::*;
use Opcode as O;
use tpuc_ir::Direction;

/// The most iterations Euclid's loop takes for operands of magnitude at most `max`.
fn euclid_steps(max: u128) -> usize {
    let iterations = |mut a: u128, mut b: u128| {
        let mut n = 0;
        while a != 0 {
            (a, b) = (b % a, a);
            n += 1;
        }
        n
    };
    let (mut f0, mut f1) = (1u128, 1u128);
    let mut most = iterations(1, 1).max(iterations(0, 1));
    while f0 + f1 <= max {
        (f0, f1) = (f1, f0 + f1);
        most = most.max(iterations(f0, f1)).max(iterations(f1, f0));
    }
    most
}

/// |x| for signed dtypes (wrapping, as `std::abs` does in practice), x for unsigned ones.
fn magnitude(cx: &mut Ctx, x: ValueId) -> R<ValueId> {
    if cx.dtype(x).is_unsigned_int() {
        Ok(x)
    } else {
        cx.un(O::Abs, x)
    }
}

/// ATen's `calc_gcd` of two integer values of one type.
pub fn gcd_v(cx: &mut Ctx, x: ValueId, y: ValueId) -> R<ValueId> {
    let dt = cx.dtype(x);
    let Some((lo, hi)) = dt.int_range() else {
        return err(format!("gcd needs integers, got {dt}"));
    };
    let steps = euclid_steps(lo.unsigned_abs().max(hi.unsigned_abs()));
    let mut a = magnitude(cx, x)?;
    let mut b = magnitude(cx, y)?;
    let zero = cx.full_like(Scalar::Int(0), a)?;
    let one_ = cx.full_like(Scalar::Int(1), a)?;
    for _ in 0..steps {
        let live = cx.cmp(Direction::Ne, a, zero)?;
        let divisor = cx.select(live, a, one_)?;
        let r = cx.bin(O::Rem, b, divisor)?;
        b = cx.select(live, a, b)?;
        a = cx.select(live, r, zero)?;
    }
    Ok(b)
}

pub(super) fn gcd(cx: &mut Ctx) -> R<Vec<Val>> {
    let (x, y) = int_pair(cx, "gcd")?;
    one(gcd_v(cx, x, y)?)
}

/// `|x / g * y|`, 0 where `g` is 0. C++ computes int8 and int16 in `int` and wraps once when
/// storing, so those go through i32.
pub(super) fn lcm(cx: &mut Ctx) -> R<Vec<Val>> {
    let (x, y) = int_pair(cx, "lcm")?;
    let dt = cx.dtype(x);
    let g = gcd_v(cx, x, y)?;
    let wide = if matches!(dt, DType::I8 | DType::I16) { DType::I32 } else { dt };
    let (x, y, g) = (cx.convert(x, wide)?, cx.convert(y, wide)?, cx.convert(g, wide)?);
    let zero = cx.full_like(Scalar::Int(0), g)?;
    let one_ = cx.full_like(Scalar::Int(1), g)?;
    let none = cx.cmp(Direction::Eq, g, zero)?;
    let divisor = cx.select(none, one_, g)?;
    let q = cx.bin(O::Div, x, divisor)?;
    let p = cx.bin(O::Mul, q, y)?;
    let p = magnitude(cx, p)?;
    let l = cx.select(none, zero, p)?;
    one(cx.convert(l, dt)?)
}

#[cfg(test)]
mod tests {
    use super::euclid_steps;

    #[test]
    fn euclid_bounds_cover_every_pair_of_small_operands() {
        for max in [1u128, 2, 7, 100, 255] {
            let mut most = 0;
            for a in 0..=max {
                for b in 0..=max {
                    let (mut x, mut y, mut n) = (a, b, 0);
                    while x != 0 {
                        (x, y) = (y % x, x);
                        n += 1;
                    }
                    most = most.max(n);
                }
            }
            assert_eq!(euclid_steps(max), most, "max {max}");
        }
        assert_eq!(euclid_steps(1 << 63), 91);
        assert_eq!(euclid_steps(1 << 31), 45);
    }
}
