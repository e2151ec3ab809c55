//! The FFT family as a raw (not decomposed) export carries it: `fft_fft`, `fft_ifft`,
//! `fft_rfft`, `fft_irfft` and their `2` and `n` forms, `hann_window` and `stft`.
//!
//! Each transform resizes its input to the signal sizes asked for (`n` / `s`: trimmed, or
//! zero-padded at the end), then runs the same transforms as `_fft_r2c` / `_fft_c2c` /
//! `_fft_c2r` (see `complex`), scaled by `norm`: "backward" (the default) scales the inverse
//! by 1/n, "ortho" both ways by 1/√n, "forward" the forward by 1/n.

use crate::ops::build::*;
use Opcode as O;
use tpuc_ir::FftType;

pub const OPS: &[(&str, OpFn)] = &[
    ("fft_fft.default", fft_fft),
    ("fft_ifft.default", fft_ifft),
    ("fft_rfft.default", fft_rfft),
    ("fft_irfft.default", fft_irfft),
    ("fft_fft2.default", fft_fft2),
    ("fft_ifft2.default", fft_ifft2),
    ("fft_rfft2.default", fft_rfft2),
    ("fft_irfft2.default", fft_irfft2),
    ("fft_fftn.default", fft_fftn),
    ("fft_ifftn.default", fft_ifftn),
    ("fft_rfftn.default", fft_rfftn),
    ("fft_irfftn.default", fft_irfftn),
    ("hann_window.default", hann_window),
    ("hann_window.periodic", hann_window),
    ("stft.default", stft),
];

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    /// Complex to complex, forward or inverse.
    C2c { inverse: bool },
    /// Real to the half spectrum.
    R2c,
    /// Half spectrum to real.
    C2r,
}

/// How the op names its dims and sizes.
#[derive(Clone, Copy)]
enum Form {
    /// `n: int?`, `dim: int = -1`.
    One,
    /// `s: int[]?`, `dim: int[] = [-2, -1]`.
    Two,
    /// `s: int[]?`, `dim: int[]?`: every dim, or the last `len(s)`.
    N,
}

macro_rules! transforms {
    ($($name:ident: $kind:expr, $form:expr;)*) => {
        $(fn $name(cx: &mut Ctx) -> R<Vec<Val>> {
            transform(cx, $kind, $form)
        })*
    };
}

transforms! {
    fft_fft: Kind::C2c { inverse: false }, Form::One;
    fft_ifft: Kind::C2c { inverse: true }, Form::One;
    fft_rfft: Kind::R2c, Form::One;
    fft_irfft: Kind::C2r, Form::One;
    fft_fft2: Kind::C2c { inverse: false }, Form::Two;
    fft_ifft2: Kind::C2c { inverse: true }, Form::Two;
    fft_rfft2: Kind::R2c, Form::Two;
    fft_irfft2: Kind::C2r, Form::Two;
    fft_fftn: Kind::C2c { inverse: false }, Form::N;
    fft_ifftn: Kind::C2c { inverse: true }, Form::N;
    fft_rfftn: Kind::R2c, Form::N;
    fft_irfftn: Kind::C2r, Form::N;
}

/// The transformed dims (normalized, static) and the signal size asked for along each.
fn dims_and_sizes(cx: &Ctx, x: ValueId, form: Form) -> R<(Vec<usize>, Vec<Option<i64>>)> {
    let r = cx.rank(x);
    let (dims, sizes): (Vec<i64>, Vec<Option<i64>>) = match form {
        Form::One => (vec![cx.int("dim")?], vec![cx.opt_int("n")?]),
        Form::Two | Form::N => {
            let s = cx.opt_ints("s")?;
            let dims = match (cx.opt_ints("dim")?, &s, form) {
                (Some(d), _, _) => d,
                (None, _, Form::Two) => vec![-2, -1],
                (None, Some(s), _) => (r as i64 - s.len() as i64..r as i64).collect(),
                (None, None, _) => (0..r as i64).collect(),
            };
            let sizes = match s {
                Some(s) if s.len() != dims.len() => {
                    return err(format!("`s` has {} sizes for {} dims", s.len(), dims.len()))
                }
                Some(s) => s.into_iter().map(Some).collect(),
                None => vec![None; dims.len()],
            };
            (dims, sizes)
        }
    };
    let out = checked_fft_dims(cx, x, dims)?;
    if let Some(n) = sizes.iter().flatten().find(|&&n| n < 1) {
        return err(format!("FFT signal size {n} must be positive"));
    }
    Ok((out, sizes))
}

/// `x` trimmed or zero-padded at the end of `dim` to `n` entries.
fn resize(cx: &mut Ctx, x: ValueId, dim: usize, n: i64) -> R<ValueId> {
    let have = cx.static_dims(x, "fft")?[dim];
    if have > n {
        return slice_static(cx, x, dim, 0, n, 1);
    }
    if have < n {
        let r = cx.rank(x);
        let zero = cx.scalar(Scalar::Float(0.0), cx.dtype(x))?;
        let mut hi = vec![0i64; r];
        hi[dim] = n - have;
        return Ok(cx.b.pad(x, zero, &vec![0; r], &hi, &vec![0; r])?);
    }
    Ok(x)
}

/// The `normalization` mode (0 none, 1 by √n, 2 by n) of `norm` for a forward or inverse
/// transform.
fn norm_mode(cx: &Ctx, inverse: bool) -> R<i64> {
    // A None `norm` is "backward".
    Ok(match (cx.opt_str("norm")?.as_deref().unwrap_or("backward"), inverse) {
        ("backward", false) | ("forward", true) => 0,
        ("ortho", _) => 1,
        ("backward", true) | ("forward", false) => 2,
        (other, _) => return err(format!("unknown FFT norm `{other}` (backward, ortho or forward)")),
    })
}

fn as_complex(cx: &mut Ctx, x: ValueId) -> R<ValueId> {
    if cx.dtype(x).is_complex() {
        return Ok(x);
    }
    let x = cx.float_of(x)?;
    let zero = cx.full_like(Scalar::Float(0.0), x)?;
    cx.bin(O::Complex, x, zero)
}

fn transform(cx: &mut Ctx, kind: Kind, form: Form) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let (dims, sizes) = dims_and_sizes(cx, x, form)?;
    let x = match kind {
        Kind::R2c => {
            if cx.dtype(x).is_complex() {
                return err(format!("{} needs a real input, got {}", cx.node.target, cx.ty(x)));
            }
            let x = cx.float_of(x)?;
            if cx.dtype(x).complex_of().is_none() {
                return err(format!("an FFT needs f32 or f64 input, got {}", cx.ty(x)));
            }
            x
        }
        _ => as_complex(cx, x)?,
    };
    // The real inverse's last dim is its output length; the others resize first.
    let (last, rest) = dims.split_last().expect("at least one dim");
    let resized = if kind == Kind::C2r { &dims[..rest.len()] } else { &dims[..] };
    let mut x = x;
    for (&d, n) in resized.iter().zip(&sizes) {
        if let Some(n) = n {
            x = resize(cx, x, d, *n)?;
        }
    }
    let shape = cx.static_dims(x, "fft")?;
    let rest_n: f64 = rest.iter().map(|&d| shape[d] as f64).product();
    let (y, n, inverse) = match kind {
        Kind::C2c { inverse } => (c2c_along(cx, x, &dims, inverse)?, rest_n * shape[*last] as f64, inverse),
        Kind::R2c => {
            let (m, inv) = to_end(cx, x, &[*last])?;
            let len = shape[*last];
            let y = fft_op(cx, m, FftType::Rfft, vec![len])?;
            let y = back(cx, y, inv)?;
            (c2c_along(cx, y, rest, false)?, rest_n * len as f64, false)
        }
        Kind::C2r => {
            let out_len = sizes.last().copied().flatten().unwrap_or(2 * (shape[*last] - 1));
            if out_len < 1 {
                return err(format!("{}: output length {out_len} must be positive", cx.node.target));
            }
            let y = c2c_along(cx, x, rest, true)?;
            let (m, inv) = to_end(cx, y, &[*last])?;
            let y = irfft_last(cx, m, out_len)?;
            (back(cx, y, inv)?, rest_n * out_len as f64, true)
        }
    };
    let k = norm_scale(norm_mode(cx, inverse)?, n, inverse)?;
    one(scale(cx, y, k)?)
}

/// `0.5 - 0.5 cos(2πk / N)`, N the length (periodic) or the length - 1.
fn hann_window(cx: &mut Ctx) -> R<Vec<Val>> {
    let len = cx.int("window_length")?;
    // `hann_window.default` has no `periodic`: true.
    let periodic = cx.opt_bool("periodic")?.unwrap_or(true);
    let dt = cx.out_type(0).map_or(dtypes::DEFAULT_FLOAT, |t| t.dtype);
    if len < 0 {
        return err(format!("hann_window of negative length {len}"));
    }
    if len <= 1 {
        return one(cx.full(Scalar::Float(1.0), dt, &[Dim::Static(len)])?);
    }
    let n = if periodic { len } else { len - 1 };
    let work = if dt == DType::F64 { DType::F64 } else { DType::F32 };
    let k = cx.iota(work, &[Dim::Static(len)], 0)?;
    let c = cx.bin_c(O::Mul, k, 2.0 * std::f64::consts::PI / n as f64)?;
    let c = cx.un(O::Cos, c)?;
    let c = cx.bin_c(O::Mul, c, -0.5)?;
    let w = cx.bin_c(O::Add, c, 0.5)?;
    one(cx.convert(w, dt)?)
}

/// `stft(x, n_fft, hop_length, win_length, window, normalized, onesided, return_complex)` on a
/// real [L] or [B, L] signal (a raw export pads for `center` before it): frames of `n_fft` every
/// `hop_length`, times the window (zero-padded to `n_fft`, centred), transformed: [B?, freqs,
/// frames], complex, or [..., 2] real when `return_complex` is false.
fn stft(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    if cx.dtype(x).is_complex() {
        return err("stft of a complex signal is not supported");
    }
    let x = cx.float_of(x)?;
    let r = cx.rank(x);
    if r != 1 && r != 2 {
        return err(format!("stft needs a [L] or [B, L] signal, got {}", cx.ty(x)));
    }
    let len = cx.static_dims(x, "stft")?[r - 1];
    let n_fft = cx.int("n_fft")?;
    let hop = cx.opt_int("hop_length")?.unwrap_or(n_fft / 4);
    let win_length = cx.opt_int("win_length")?.unwrap_or(n_fft);
    if n_fft < 1 || hop < 1 || win_length < 1 || win_length > n_fft || n_fft > len {
        return err(format!("stft: n_fft {n_fft}, hop_length {hop}, win_length {win_length} for a signal of {len}"));
    }
    let frames = 1 + (len - n_fft) / hop;
    // Every frame's positions, flattened: f * hop + k.
    let fk = [Dim::Static(frames), Dim::Static(n_fft)];
    let f = cx.iota(DType::I64, &fk, 0)?;
    let f = cx.bin_c(O::Mul, f, hop as f64)?;
    let k = cx.iota(DType::I64, &fk, 1)?;
    let pos = cx.bin(O::Add, f, k)?;
    let pos = cx.reshape(pos, vec![Dim::Static(frames * n_fft)])?;
    let mut framed = take_along(cx, x, r - 1, pos)?;
    let mut shape = cx.dims(x);
    shape.pop();
    shape.extend(fk.iter().cloned());
    framed = cx.reshape(framed, shape.clone())?;
    if let Some(w) = cx.opt_t("window")? {
        let w = cx.convert(w, cx.dtype(framed))?;
        let left = (n_fft - win_length) / 2;
        let w = if left > 0 || win_length < n_fft {
            let zero = cx.scalar(Scalar::Float(0.0), cx.dtype(w))?;
            cx.b.pad(w, zero, &[left], &[n_fft - win_length - left], &[0])?
        } else {
            w
        };
        let w = cx.broadcast_to(w, &shape)?;
        framed = cx.bin(O::Mul, framed, w)?;
    }
    // A None `onesided` is true for real input (complex input is refused above).
    let onesided = cx.opt_bool("onesided")?.unwrap_or(true);
    let last = shape.len() - 1;
    let y = if onesided {
        fft_op(cx, framed, FftType::Rfft, vec![n_fft])?
    } else {
        let c = as_complex(cx, framed)?;
        c2c_along(cx, c, &[last], false)?
    };
    let y = if cx.bool("normalized")? { scale(cx, y, 1.0 / (n_fft as f64).sqrt())? } else { y };
    // [B?, frames, freqs] → [B?, freqs, frames].
    let mut perm: Vec<i64> = (0..shape.len() as i64).collect();
    perm.swap(last - 1, last);
    let y = cx.transpose(y, &perm)?;
    // A None `return_complex` is true, as torch has it for real input.
    if cx.opt_bool("return_complex")?.unwrap_or(true) {
        return one(y);
    }
    one(real_pairs(cx, y)?)
}
