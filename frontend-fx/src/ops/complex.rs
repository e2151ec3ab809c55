//! Complex numbers and the FFT: `view_as_complex` / `view_as_real`, `complex`, `polar`,
//! `real` / `imag`, `angle`, conjugation, and `_fft_r2c` / `_fft_c2c` / `_fft_c2r` (what
//! `torch.fft.*` decomposes to).
//!
//! The IR's `fft` transforms up to three trailing dims; the transformed dims move last and
//! back, and more than three are transformed in groups (transforms along different dims
//! commute). XLA's inverse transforms divide by the signal size; ATen's `normalization`
//! (0: none, 1: 1/√n, 2: 1/n, with n the product of the signal sizes) is applied on top.

use crate::ops::build::*;
use Opcode as O;
use tpuc_ir::FftType;

pub const OPS: &[(&str, OpFn)] = &[
    ("view_as_complex.default", view_as_complex),
    ("view_as_real.default", view_as_real),
    ("complex.default", complex),
    ("polar.default", polar),
    ("real.default", real),
    ("imag.default", imag),
    ("angle.default", angle),
    ("_conj.default", conj),
    ("conj.default", conj),
    ("conj_physical.default", conj),
    ("_conj_physical.default", conj),
    ("resolve_conj.default", identity_view),
    ("resolve_neg.default", identity_view),
    ("_fft_r2c.default", fft_r2c),
    ("_fft_c2c.default", fft_c2c),
    ("_fft_c2r.default", fft_c2r),
];

fn identity_view(cx: &mut Ctx) -> R<Vec<Val>> {
    one(cx.t("self")?)
}

/// [..., 2] real → [...] complex.
fn view_as_complex(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let dims = cx.dims(x);
    if dims.last() != Some(&Dim::Static(2)) || cx.dtype(x).complex_of().is_none() {
        return err(format!("view_as_complex needs an f32 or f64 tensor whose last dim is 2, got {}", cx.ty(x)));
    }
    let d = dims.len() - 1;
    let re = select_v(cx, x, d, 0)?;
    let im = select_v(cx, x, d, 1)?;
    one(cx.bin(O::Complex, re, im)?)
}

/// [...] complex → [..., 2] real.
fn view_as_real(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    if !cx.dtype(x).is_complex() {
        return err(format!("view_as_real needs a complex tensor, got {}", cx.ty(x)));
    }
    one(real_pairs(cx, x)?)
}

fn complex(cx: &mut Ctx) -> R<Vec<Val>> {
    let a = cx.operand("real")?;
    let b = cx.operand("imag")?;
    let dt = cx.result_type(&[a, b])?;
    if dt.complex_of().is_none() {
        return err(format!("complex needs f32 or f64 parts, got {}", dt.name()));
    }
    let (re, im) = cx.pair(&a, &b, dt)?;
    one(cx.bin(O::Complex, re, im)?)
}

/// abs·(cos θ + i sin θ).
fn polar(cx: &mut Ctx) -> R<Vec<Val>> {
    let a = cx.operand("abs")?;
    let t = cx.operand("angle")?;
    let dt = cx.result_type(&[a, t])?;
    if dt.complex_of().is_none() {
        return err(format!("polar needs f32 or f64 operands, got {}", dt.name()));
    }
    let (r, th) = cx.pair(&a, &t, dt)?;
    let c = cx.un(O::Cos, th)?;
    let s = cx.un(O::Sin, th)?;
    let re = cx.bin(O::Mul, r, c)?;
    let im = cx.bin(O::Mul, r, s)?;
    one(cx.bin(O::Complex, re, im)?)
}

fn real(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    if !cx.dtype(x).is_complex() {
        return one(x);
    }
    one(cx.un(O::Real, x)?)
}

fn imag(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    if !cx.dtype(x).is_complex() {
        return err("imag is not implemented for real tensors (as in torch)");
    }
    one(cx.un(O::Imag, x)?)
}

/// atan2(imag, real); for real input 0 or π (NaN stays NaN), in the default float dtype for
/// integers.
fn angle(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    if cx.dtype(x).is_complex() {
        let (re, im) = parts(cx, x)?;
        return one(cx.bin(O::Atan2, im, re)?);
    }
    let x = cx.float_of(x)?;
    let zero = cx.full_like(Scalar::Float(0.0), x)?;
    let pi = cx.full_like(Scalar::Float(std::f64::consts::PI), x)?;
    let neg = cx.cmp(Direction::Lt, x, zero)?;
    let r = cx.select(neg, pi, zero)?;
    let nan = cx.cmp(Direction::Ne, x, x)?;
    one(cx.select(nan, x, r)?)
}

fn conj(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    if !cx.dtype(x).is_complex() {
        return one(x);
    }
    let (re, im) = parts(cx, x)?;
    let nim = cx.un(O::Neg, im)?;
    one(cx.bin(O::Complex, re, nim)?)
}

// ------------------------------------------------------------------------------------ FFT

/// The transformed dims, normalized and checked distinct and static.
fn fft_dims(cx: &Ctx, x: ValueId) -> R<Vec<usize>> {
    checked_fft_dims(cx, x, cx.ints("dim")?)
}

/// The factor turning an unnormalized (forward) or XLA-normalized (inverse) transform of
/// signal size `n` into ATen's `normalization`.
fn norm_factor(cx: &Ctx, n: f64, inverse: bool) -> R<f64> {
    norm_scale(cx.int("normalization")?, n, inverse)
}

fn signal_size(cx: &Ctx, x: ValueId, dims: &[usize]) -> f64 {
    let d = cx.dims(x);
    dims.iter().map(|&i| d[i].as_static().unwrap_or(1) as f64).product()
}

fn fft_r2c(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let x = cx.float_of(x)?;
    if cx.dtype(x).complex_of().is_none() {
        return err(format!("an FFT needs f32 or f64 input, got {}", cx.ty(x)));
    }
    let dims = fft_dims(cx, x)?;
    let onesided = cx.bool("onesided")?;
    let n = signal_size(cx, x, &dims);
    let y = if onesided {
        let (&last, rest) = dims.split_last().ok_or("no fft dims")?;
        let (m, inv) = to_end(cx, x, &[last])?;
        let len = *cx.static_dims(m, "fft")?.last().unwrap_or(&1);
        let y = fft_op(cx, m, FftType::Rfft, vec![len])?;
        let y = back(cx, y, inv)?;
        c2c_along(cx, y, rest, false)?
    } else {
        let zero = cx.full_like(Scalar::Float(0.0), x)?;
        let c = cx.bin(O::Complex, x, zero)?;
        c2c_along(cx, c, &dims, false)?
    };
    let k = norm_factor(cx, n, false)?;
    one(scale(cx, y, k)?)
}

fn fft_c2c(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    if !cx.dtype(x).is_complex() {
        return err(format!("_fft_c2c needs a complex input, got {}", cx.ty(x)));
    }
    let dims = fft_dims(cx, x)?;
    let forward = cx.bool("forward")?;
    let n = signal_size(cx, x, &dims);
    let y = c2c_along(cx, x, &dims, !forward)?;
    let k = norm_factor(cx, n, !forward)?;
    one(scale(cx, y, k)?)
}

fn fft_c2r(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    if !cx.dtype(x).is_complex() {
        return err(format!("_fft_c2r needs a complex input, got {}", cx.ty(x)));
    }
    let dims = fft_dims(cx, x)?;
    let out_len = cx.int("last_dim_size")?;
    if out_len < 1 {
        return err(format!("_fft_c2r last_dim_size {out_len} must be positive"));
    }
    let (&last, rest) = dims.split_last().ok_or("no fft dims")?;
    let n = signal_size(cx, x, rest) * out_len as f64;
    let y = c2c_along(cx, x, rest, true)?;
    let (m, inv) = to_end(cx, y, &[last])?;
    let y = irfft_last(cx, m, out_len)?;
    let y = back(cx, y, inv)?;
    let k = norm_factor(cx, n, true)?;
    one(scale(cx, y, k)?)
}
