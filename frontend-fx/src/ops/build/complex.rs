//! Complex-number and FFT builders: a complex tensor's real and imaginary parts, its modulus,
//! moving transformed dims to the end and back, the transforms themselves and their scaling.

use super::ctx::*;
use super::shape::*;
use tpuc_ir::FftType;
use tpuc_ir::Opcode as O;

pub fn parts(cx: &mut Ctx, x: ValueId) -> R<(ValueId, ValueId)> {
    Ok((cx.un(O::Real, x)?, cx.un(O::Imag, x)?))
}

/// A complex tensor [...] as its real and imaginary parts side by side, [..., 2].
pub fn real_pairs(cx: &mut Ctx, x: ValueId) -> R<ValueId> {
    let (re, im) = parts(cx, x)?;
    let mut d1 = cx.dims(re);
    d1.push(Dim::Static(1));
    let re = cx.reshape(re, d1.clone())?;
    let im = cx.reshape(im, d1)?;
    let last = cx.rank(re) as i64 - 1;
    Ok(cx.b.concatenate(&[re, im], last)?)
}

/// |x| of a complex tensor: √(re² + im²).
pub fn complex_abs(cx: &mut Ctx, x: ValueId) -> R<ValueId> {
    let (re, im) = parts(cx, x)?;
    let a = cx.bin(O::Mul, re, re)?;
    let b = cx.bin(O::Mul, im, im)?;
    let s = cx.bin(O::Add, a, b)?;
    cx.un(O::Sqrt, s)
}

/// `dims` normalized, each once, static, at least one.
pub fn checked_fft_dims(cx: &Ctx, x: ValueId, dims: Vec<i64>) -> R<Vec<usize>> {
    let r = cx.rank(x);
    let mut out = Vec::new();
    for d in dims {
        let d = norm_dim(d, r)?;
        if d >= r {
            return err(format!("an FFT over dim {d} of a rank-{r} tensor"));
        }
        if out.contains(&d) {
            return err(format!("fft dim {d} given twice"));
        }
        if cx.dims(x)[d].as_static().is_none() {
            return err("an FFT over a symbolic dim is not supported");
        }
        out.push(d);
    }
    if out.is_empty() {
        return err("an FFT needs at least one dim");
    }
    Ok(out)
}

/// `x` with `dims` moved last (in order), and the permutation that undoes it.
pub fn to_end(cx: &mut Ctx, x: ValueId, dims: &[usize]) -> R<(ValueId, Option<Vec<i64>>)> {
    let r = cx.rank(x);
    let mut perm: Vec<i64> = (0..r as i64).filter(|d| !dims.contains(&(*d as usize))).collect();
    perm.extend(dims.iter().map(|&d| d as i64));
    if perm.iter().enumerate().all(|(i, &p)| p == i as i64) {
        return Ok((x, None));
    }
    let mut inv = vec![0i64; r];
    for (i, &p) in perm.iter().enumerate() {
        inv[p as usize] = i as i64;
    }
    Ok((cx.transpose(x, &perm)?, Some(inv)))
}

pub fn back(cx: &mut Ctx, y: ValueId, inv: Option<Vec<i64>>) -> R<ValueId> {
    match inv {
        Some(p) => cx.transpose(y, &p),
        None => Ok(y),
    }
}

pub fn fft_op(cx: &mut Ctx, x: ValueId, ty: FftType, length: Vec<i64>) -> R<ValueId> {
    let attrs = Attrs::new().with("fft_type", ty.attr()).with("fft_length", Attr::Ints(length));
    Ok(cx.b.build1(O::Fft, &[x], attrs, None)?)
}

/// Complex-to-complex transform along `dims` (XLA's inverse divides by their sizes).
pub fn c2c_along(cx: &mut Ctx, x: ValueId, dims: &[usize], inverse: bool) -> R<ValueId> {
    if dims.is_empty() {
        return Ok(x);
    }
    if dims.len() > 3 {
        let (head, tail) = dims.split_at(dims.len() - 3);
        let y = c2c_along(cx, x, head, inverse)?;
        return c2c_along(cx, y, tail, inverse);
    }
    let (m, inv) = to_end(cx, x, dims)?;
    let sizes = cx.static_dims(m, "fft")?;
    let len = sizes[sizes.len() - dims.len()..].to_vec();
    let y = fft_op(cx, m, if inverse { FftType::Ifft } else { FftType::Fft }, len)?;
    back(cx, y, inv)
}

/// The half spectrum `m` (its last dim) cut or zero-padded to the `out_len / 2 + 1` entries a
/// real inverse transform of length `out_len` reads, then transformed.
pub fn irfft_last(cx: &mut Ctx, m: ValueId, out_len: i64) -> R<ValueId> {
    let want = out_len / 2 + 1;
    let have = *cx.static_dims(m, "fft")?.last().unwrap_or(&1);
    let r = cx.rank(m);
    let m = if have > want {
        slice_static(cx, m, r - 1, 0, want, 1)?
    } else if have < want {
        let zero = cx.scalar(Scalar::Float(0.0), cx.dtype(m))?;
        let mut hi = vec![0i64; r];
        hi[r - 1] = want - have;
        cx.b.pad(m, zero, &vec![0; r], &hi, &vec![0; r])?
    } else {
        m
    };
    fft_op(cx, m, FftType::Irfft, vec![out_len])
}

/// Multiplies by `k` unless it is 1.
pub fn scale(cx: &mut Ctx, x: ValueId, k: f64) -> R<ValueId> {
    if k == 1.0 {
        return Ok(x);
    }
    cx.bin_c(O::Mul, x, k)
}

/// [`norm_factor`] for the normalization `mode` (0 none, 1 by √n, 2 by n).
pub fn norm_scale(mode: i64, n: f64, inverse: bool) -> R<f64> {
    let wanted = match mode {
        0 => 1.0,
        1 => 1.0 / n.sqrt(),
        2 => 1.0 / n,
        m => return err(format!("unknown FFT normalization {m} (0 none, 1 by √n, 2 by n)")),
    };
    // XLA's inverse already divided by n.
    Ok(if inverse { wanted * n } else { wanted })
}
