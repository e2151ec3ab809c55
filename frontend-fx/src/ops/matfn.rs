//! Matrix functions: `linalg_matrix_exp`, by scaling and squaring.
//!
//! exp(A) = exp(A / 2^s)^(2^s): with s the smallest count that brings the 1-norm of A / 2^s to
//! at most 1 (per matrix of the batch), the Taylor polynomial of degree 18, evaluated by Horner
//! (T = I + A·T/k for k = 18..1), is exact to f64 rounding (the remainder is below 1/19! <
//! 1e-17), and s squarings undo the scaling. The halving and the squarings are unrolled to a
//! fixed count, each applied where it is below the matrix's own s: 64 of them, enough for 1-norms
//! up to 2^64 (beyond that exp overflows for all but special matrices; nilpotent ones, whose
//! Taylor polynomial is exact, still come out right).
//!
//! float32 computes in float64 and 16-bit floats in float32, rounding once: results are then
//! closer to the exact exponential than eager's, whose own scaling and squaring in the input
//! dtype loses a few digits on matrices of larger norm.

use crate::ops::build::*;
use Opcode as O;

pub const OPS: &[(&str, OpFn)] = &[
    ("linalg_matrix_exp.default", matrix_exp),
];

/// Taylor degree of exp on matrices of 1-norm at most 1.
const DEGREE: u32 = 18;
/// The most halvings (and squarings) applied.
const MAX_SQUARINGS: u32 = 64;

/// The batched product a·b of [..., n, n] matrices.
fn matmul(cx: &mut Ctx, a: ValueId, b: ValueId) -> R<ValueId> {
    let r = cx.rank(a) as i64;
    let batch: Vec<i64> = (0..r - 2).collect();
    Ok(cx.b.dot_general(a, b, &batch, &batch, &[r - 1], &[r - 2])?)
}

/// `v` [...] as [..., 1, 1] broadcast to `dims` [..., n, n].
fn per_matrix(cx: &mut Ctx, v: ValueId, dims: &[Dim]) -> R<ValueId> {
    let mut col = cx.dims(v);
    col.extend([Dim::Static(1), Dim::Static(1)]);
    let v = cx.reshape(v, col)?;
    cx.broadcast_to(v, dims)
}

fn matrix_exp(cx: &mut Ctx) -> R<Vec<Val>> {
    let a = cx.t("self")?;
    let (m, n) = float_matrix(cx, a, "matrix_exp")?;
    if m != n {
        return err(format!("matrix_exp needs square matrices, got {}", cx.ty(a)));
    }
    let dt = cx.dtype(a);
    if n == 0 {
        return one(a);
    }
    let wd = if dt == DType::F32 { DType::F64 } else { dtypes::compute_dtype(dt) };
    let x = cx.convert(a, wd)?;
    let dims = cx.dims(x);
    let r = dims.len();

    // s = ceil(log2(‖A‖₁)) clamped to [0, MAX_SQUARINGS]; NaN compares false below (no step).
    let abs = cx.un(O::Abs, x)?;
    let cols = cx.reduce(abs, ReduceKind::Sum, &[r - 2], false)?;
    let norm = cx.reduce(cols, ReduceKind::Max, &[r - 2], false)?;
    let l = cx.un(O::Log, norm)?;
    let l = cx.bin_c(O::Div, l, std::f64::consts::LN_2)?;
    let s = cx.un(O::Ceil, l)?;
    let s = cx.bin_c(O::Max, s, 0.0)?;
    let s = cx.bin_c(O::Min, s, f64::from(MAX_SQUARINGS))?;

    // 2^-s, exactly, by halving.
    let mut scale = cx.full_like(Scalar::Float(1.0), s)?;
    let mut steps = Vec::with_capacity(MAX_SQUARINGS as usize);
    for i in 0..MAX_SQUARINGS {
        let k = cx.full_like(Scalar::Float(f64::from(i)), s)?;
        let step = cx.cmp(Direction::Lt, k, s)?;
        let half = cx.bin_c(O::Mul, scale, 0.5)?;
        scale = cx.select(step, half, scale)?;
        steps.push(step);
    }
    let scale = per_matrix(cx, scale, &dims)?;
    let y = cx.bin(O::Mul, x, scale)?;

    // Horner: T = I + Y·T / k for k = DEGREE..1, from T = I.
    let eye = identity_matrix(cx, &dims, wd)?;
    let mut t = eye;
    for k in (1..=DEGREE).rev() {
        let p = matmul(cx, y, t)?;
        let p = cx.bin_c(O::Div, p, f64::from(k))?;
        t = cx.bin(O::Add, eye, p)?;
    }

    for step in steps {
        let sq = matmul(cx, t, t)?;
        let step = per_matrix(cx, step, &dims)?;
        t = cx.select(step, sq, t)?;
    }
    one(cx.convert(t, dt)?)
}
