//! Linear algebra through StableHLO's native factorization ops and XLA's expanded custom
//! calls: `linalg_cholesky_ex`, `cholesky_solve`, `cholesky_inverse`, `linalg_solve_triangular`,
//! `triangular_solve`; Householder QR (`linalg_qr`, `geqrf`, `linalg_householder_product`,
//! `ormqr`), the symmetric eigendecomposition (`_linalg_eigh`, Jacobi), and the SVD
//! (`_linalg_svd`, `linalg_pinv`) from the eigendecomposition of [[0, A], [Aᵀ, 0]]: its largest
//! min(m, n) eigenvalues are A's singular values and their eigenvectors [u; v]/√2 hold the
//! singular vectors (A's condition number is not squared, as it would be through AᵀA).
//!
//! Matrices are the trailing two dims; leading (batch) dims broadcast between the operands as
//! in ATen. `cholesky` leaves the unused triangle unspecified, so the factor is masked to its
//! triangle. `info` of `linalg_cholesky_ex` is 0, or the 1-based order of the first leading
//! minor that is not positive-definite, found by bisection over leading blocks (XLA's factor
//! is NaN throughout when it fails).

use crate::ops::build::*;
use Opcode as O;

pub const OPS: &[(&str, OpFn)] = &[
    ("linalg_cholesky_ex.default", cholesky_ex),
    ("cholesky_solve.default", cholesky_solve),
    ("cholesky_inverse.default", cholesky_inverse),
    ("linalg_solve_triangular.default", solve_triangular),
    ("triangular_solve.default", triangular_solve),
    ("linalg_qr.default", linalg_qr),
    ("geqrf.default", geqrf),
    ("linalg_householder_product.default", householder_product),
    ("ormqr.default", ormqr),
    ("_linalg_eigh.default", eigh),
    ("_linalg_svd.default", svd),
    ("linalg_pinv.atol_rtol_tensor", pinv),
];

/// True on the lower (or upper) triangle of the trailing [n, n], diagonal included.
fn triangle(cx: &mut Ctx, dims: &[Dim], lower: bool) -> R<ValueId> {
    let r = dims.len();
    let i = cx.iota(DType::I64, dims, r - 2)?;
    let j = cx.iota(DType::I64, dims, r - 1)?;
    cx.cmp(if lower { Direction::Ge } else { Direction::Le }, i, j)
}

/// The lower Cholesky factor L (A = L·Lᵀ), masked to its triangle.
fn cholesky_lower(cx: &mut Ctx, a: ValueId) -> R<ValueId> {
    let l = cx.b.build1(O::Cholesky, &[a], Attrs::new().with("lower", Attr::Bool(true)), None)?;
    let dims = cx.dims(l);
    let keep = triangle(cx, &dims, true)?;
    let z = cx.full_like(Scalar::Float(0.0), l)?;
    cx.select(keep, l, z)
}

fn cholesky_ex(cx: &mut Ctx) -> R<Vec<Val>> {
    let a = cx.t("self")?;
    let n = square_matrix(cx, a, "linalg_cholesky_ex")?;
    let upper = cx.bool("upper")?;
    let l = cholesky_lower(cx, a)?;
    let info = if cx.used(1) && n > 0 {
        Val::Tensor(cholesky_info(cx, a, l, n)?)
    } else if cx.used(1) {
        let mut bd = cx.dims(a);
        bd.truncate(bd.len() - 2);
        Val::Tensor(cx.full(Scalar::Int(0), DType::I32, &bd)?)
    } else {
        Val::Absent
    };
    let l = if upper { mt(cx, l)? } else { l };
    Ok(vec![Val::Tensor(l), info])
}

/// Whether the Cholesky factor `l` failed, per matrix: a pivot (its diagonal) that is not
/// positive and finite.
fn factor_failed(cx: &mut Ctx, l: ValueId) -> R<ValueId> {
    let piv = diagonal(cx, l)?;
    let fin = cx.un(O::IsFinite, piv)?;
    let zp = cx.full_like(Scalar::Float(0.0), piv)?;
    let pos = cx.cmp(Direction::Gt, piv, zp)?;
    let good = cx.bin(O::And, fin, pos)?;
    let last = cx.rank(good) - 1;
    let all_good = cx.reduce(good, ReduceKind::And, &[last], false)?;
    cx.un(O::Not, all_good)
}

/// LAPACK's `info` for the Cholesky factor `l` of `a` ([..., n, n]): 0, or the 1-based order of
/// the first leading minor that is not positive-definite. XLA's factor is NaN throughout when
/// it fails, so the order is found by bisection: the factorization of `a`'s leading k×k block,
/// padded with the identity, fails exactly when the minor of order k does, and failing is
/// monotone in k. ⌈log₂ n⌉ more factorizations, each matrix of a batch bisected on its own.
fn cholesky_info(cx: &mut Ctx, a: ValueId, l: ValueId, n: i64) -> R<ValueId> {
    let failed = factor_failed(cx, l)?;
    let bd = cx.dims(failed);
    let r = bd.len();
    let dims = cx.dims(a);
    // The minor of order `lo` is positive-definite, that of order `hi` is not (where failed).
    let mut lo = cx.full(Scalar::Int(0), DType::I32, &bd)?;
    let mut hi = cx.full(Scalar::Int(n), DType::I32, &bd)?;
    let (i, j) = (cx.iota(DType::I32, &dims, r)?, cx.iota(DType::I32, &dims, r + 1)?);
    let eye = {
        let same = cx.cmp(Direction::Eq, i, j)?;
        let (one, zero) = (cx.full_like(Scalar::Float(1.0), a)?, cx.full_like(Scalar::Float(0.0), a)?);
        cx.select(same, one, zero)?
    };
    let bcast = (0..r as i64).collect::<Vec<_>>();
    for _ in 0..(64 - (n.max(1) - 1).leading_zeros()) {
        let sum = cx.bin(O::Add, lo, hi)?;
        let mid = cx.bin_c(O::Div, sum, 2.0)?;
        let k = cx.b.broadcast_in_dim(mid, &bcast, dims.clone())?;
        let (in_i, in_j) = (cx.cmp(Direction::Lt, i, k)?, cx.cmp(Direction::Lt, j, k)?);
        let inside = cx.bin(O::And, in_i, in_j)?;
        let block = cx.select(inside, a, eye)?;
        let f = cx.b.build1(O::Cholesky, &[block], Attrs::new().with("lower", Attr::Bool(true)), None)?;
        let fails = factor_failed(cx, f)?;
        hi = cx.select(fails, mid, hi)?;
        lo = cx.select(fails, lo, mid)?;
    }
    let zero = cx.full_like(Scalar::Int(0), hi)?;
    cx.select(failed, hi, zero)
}

/// Solves (L·Lᵀ)·X = B, or (Uᵀ·U)·X = B with `upper`, for the factor `f`.
fn solve_with_factor(cx: &mut Ctx, b: ValueId, f: ValueId, upper: bool) -> R<ValueId> {
    let (f, b) = broadcast_batch(cx, f, b)?;
    // lower: L·Y = B, then Lᵀ·X = Y; upper: Uᵀ·Y = B, then U·X = Y.
    let y = tri_solve(cx, f, b, [true, !upper, false, upper])?;
    tri_solve(cx, f, y, [true, !upper, false, !upper])
}

fn cholesky_solve(cx: &mut Ctx) -> R<Vec<Val>> {
    let b = cx.t("self")?;
    let f = cx.t("input2")?;
    square_matrix(cx, f, "cholesky_solve")?;
    let upper = cx.bool("upper")?;
    let dt = cx.result_type(&[Operand::T(b), Operand::T(f)])?;
    let (b, f) = (cx.convert(b, dt)?, cx.convert(f, dt)?);
    one(solve_with_factor(cx, b, f, upper)?)
}

fn cholesky_inverse(cx: &mut Ctx) -> R<Vec<Val>> {
    let f = cx.t("self")?;
    square_matrix(cx, f, "cholesky_inverse")?;
    let upper = cx.bool("upper")?;
    let eye = identity_matrix(cx, &cx.dims(f), cx.dtype(f))?;
    one(solve_with_factor(cx, eye, f, upper)?)
}

/// `linalg_solve_triangular(A, B, upper, left, unitriangular)`: A·X = B (left) or X·A = B.
fn solve_triangular(cx: &mut Ctx) -> R<Vec<Val>> {
    let a = cx.t("self")?;
    let b = cx.t("B")?;
    square_matrix(cx, a, "linalg_solve_triangular")?;
    let upper = cx.bool("upper")?;
    let left = cx.bool("left")?;
    let unit = cx.bool("unitriangular")?;
    let dt = cx.result_type(&[Operand::T(a), Operand::T(b)])?;
    let (a, b) = (cx.convert(a, dt)?, cx.convert(b, dt)?);
    let (a, b) = broadcast_batch(cx, a, b)?;
    one(tri_solve(cx, a, b, [left, !upper, unit, false])?)
}

/// `triangular_solve(b, A, upper, transpose, unitriangular)` -> (X, A).
fn triangular_solve(cx: &mut Ctx) -> R<Vec<Val>> {
    let b = cx.t("self")?;
    let a = cx.t("A")?;
    square_matrix(cx, a, "triangular_solve")?;
    let upper = cx.bool("upper")?;
    let transpose = cx.bool("transpose")?;
    let unit = cx.bool("unitriangular")?;
    let (a2, b2) = broadcast_batch(cx, a, b)?;
    let x = tri_solve(cx, a2, b2, [true, !upper, unit, transpose])?;
    Ok(vec![Val::Tensor(x), Val::Tensor(a2)])
}

fn qr_v(cx: &mut Ctx, a: ValueId) -> R<(ValueId, ValueId)> {
    match cx.b.build(O::Qr, &[a], Attrs::new(), None)?.as_slice() {
        [p, t] => Ok((*p, *t)),
        _ => err("internal: qr results"),
    }
}

fn reflectors(cx: &mut Ctx, a: ValueId, tau: ValueId) -> R<ValueId> {
    Ok(cx.b.build1(O::HouseholderProduct, &[a, tau], Attrs::new(), None)?)
}

/// `a` [..., m, n] with `cols` columns (zero-padded or cut).
fn with_cols(cx: &mut Ctx, a: ValueId, cols: i64) -> R<ValueId> {
    let d = cx.dims(a);
    let r = d.len();
    let n = d[r - 1].as_static().unwrap_or(cols);
    if n == cols {
        return Ok(a);
    }
    if n > cols {
        return slice_static(cx, a, r - 1, 0, cols, 1);
    }
    let zero = cx.scalar(Scalar::Float(0.0), cx.dtype(a))?;
    let mut hi = vec![0i64; r];
    hi[r - 1] = cols - n;
    Ok(cx.b.pad(a, zero, &vec![0; r], &hi, &vec![0; r])?)
}

/// The full m×m Q of packed reflectors `p` [..., m, n] and `tau` [..., k].
fn full_q(cx: &mut Ctx, p: ValueId, tau: ValueId, m: i64) -> R<ValueId> {
    let tr = cx.rank(tau);
    let k = match cx.dims(tau).last().and_then(|d| d.as_static()) {
        Some(k) if tr + 1 == cx.rank(p) && k <= m => k,
        _ => return err(format!("tau {} does not fit the reflectors {}", cx.ty(tau), cx.ty(p))),
    };
    let pm = with_cols(cx, p, m)?;
    let tau = if k < m {
        let zero = cx.scalar(Scalar::Float(0.0), cx.dtype(tau))?;
        let mut hi = vec![0i64; tr];
        hi[tr - 1] = m - k;
        cx.b.pad(tau, zero, &vec![0; tr], &hi, &vec![0; tr])?
    } else {
        tau
    };
    reflectors(cx, pm, tau)
}

fn linalg_qr(cx: &mut Ctx) -> R<Vec<Val>> {
    let a = cx.t("A")?;
    let (m, n) = float_matrix(cx, a, "linalg_qr")?;
    let mode = cx.str("mode")?;
    let k = m.min(n);
    let (p, tau) = qr_v(cx, a)?;
    let r = cx.rank(p);
    // R: the upper triangle, k×n (reduced, r) or m×n (complete).
    let rows_r = if mode == "complete" { m } else { k };
    let rr = slice_static(cx, p, r - 2, 0, rows_r, 1)?;
    let dims = cx.dims(rr);
    let up = triangle(cx, &dims, false)?;
    let z = cx.full_like(Scalar::Float(0.0), rr)?;
    let rmat = cx.select(up, rr, z)?;
    let q = match mode.as_str() {
        "r" => cx.full(Scalar::Float(0.0), cx.dtype(a), &[Dim::Static(0)])?,
        "reduced" => {
            // The first k columns of Q: reflectors of the m×k leading block.
            let pk = with_cols(cx, p, k)?;
            reflectors(cx, pk, tau)?
        }
        "complete" => full_q(cx, p, tau, m)?,
        other => return err(format!("linalg_qr mode {other:?} (reduced, complete, r)")),
    };
    Ok(vec![Val::Tensor(q), Val::Tensor(rmat)])
}

fn geqrf(cx: &mut Ctx) -> R<Vec<Val>> {
    let a = cx.t("self")?;
    float_matrix(cx, a, "geqrf")?;
    let (p, tau) = qr_v(cx, a)?;
    Ok(vec![Val::Tensor(p), Val::Tensor(tau)])
}

fn householder_product(cx: &mut Ctx) -> R<Vec<Val>> {
    let a = cx.t("input")?;
    let tau = cx.t("tau")?;
    let (m, n) = float_matrix(cx, a, "linalg_householder_product")?;
    if n > m {
        return err(format!("linalg_householder_product needs n <= m, got {}", cx.ty(a)));
    }
    let tau = cx.convert(tau, cx.dtype(a))?;
    one(reflectors(cx, a, tau)?)
}

/// `ormqr(a, tau, c, left, transpose)`: op(Q)·c (left) or c·op(Q), Q the full m×m product.
fn ormqr(cx: &mut Ctx) -> R<Vec<Val>> {
    let a = cx.t("self")?;
    let tau = cx.t("input2")?;
    let c = cx.t("input3")?;
    let (m, _) = float_matrix(cx, a, "ormqr")?;
    let left = cx.bool("left")?;
    let transpose = cx.bool("transpose")?;
    let tau = cx.convert(tau, cx.dtype(a))?;
    let q = full_q(cx, a, tau, m)?;
    let q = if transpose { mt(cx, q)? } else { q };
    let c = cx.convert(c, cx.dtype(a))?;
    let out = if left { matmul_v(cx, q, c)? } else { matmul_v(cx, c, q)? };
    one(out)
}

fn eigh(cx: &mut Ctx) -> R<Vec<Val>> {
    let a = cx.t("A")?;
    square_matrix(cx, a, "linalg_eigh")?;
    let uplo = cx.str("UPLO")?;
    let lower = match uplo.as_str() {
        "L" | "l" => true,
        "U" | "u" => false,
        other => return err(format!("linalg_eigh UPLO {other:?} (L or U)")),
    };
    let r = cx.b.build(O::Eigh, &[a], Attrs::new().with("lower", Attr::Bool(lower)), None)?;
    match r.as_slice() {
        [v, w] => Ok(vec![Val::Tensor(*w), Val::Tensor(*v)]),
        _ => err("internal: eigh results"),
    }
}

fn eigh_v(cx: &mut Ctx, a: ValueId) -> R<(ValueId, ValueId)> {
    match cx.b.build(O::Eigh, &[a], Attrs::new().with("lower", Attr::Bool(true)), None)?.as_slice() {
        [v, w] => Ok((*v, *w)),
        _ => err("internal: eigh results"),
    }
}

/// (U [..., m, k], S [..., k] descending, V [..., n, k]) of `a` [..., m, n], k = min(m, n).
fn svd_thin(cx: &mut Ctx, a: ValueId, m: i64, n: i64) -> R<(ValueId, ValueId, ValueId)> {
    let r = cx.rank(a);
    let k = m.min(n);
    let dims = cx.dims(a);
    let batch = dims[..r - 2].to_vec();
    if k == 0 || batch.iter().any(|d| d.as_static() == Some(0)) {
        // Nothing to decompose: empty factors of the right shapes.
        let dt = cx.dtype(a);
        let shaped = |cx: &mut Ctx, tail: &[i64]| -> R<ValueId> {
            let mut d = batch.clone();
            d.extend(tail.iter().map(|&x| Dim::Static(x)));
            cx.full(Scalar::Float(0.0), dt, &d)
        };
        return Ok((shaped(cx, &[m, k])?, shaped(cx, &[k])?, shaped(cx, &[n, k])?));
    }
    let zeros = |cx: &mut Ctx, rows: i64, cols: i64| -> R<ValueId> {
        let mut d = batch.clone();
        d.extend([Dim::Static(rows), Dim::Static(cols)]);
        cx.full(Scalar::Float(0.0), cx.dtype(a), &d)
    };
    let zm = zeros(cx, m, m)?;
    let zn = zeros(cx, n, n)?;
    let at = mt(cx, a)?;
    let top = cx.b.concatenate(&[zm, a], r as i64 - 1)?;
    let bottom = cx.b.concatenate(&[at, zn], r as i64 - 1)?;
    let b = cx.b.concatenate(&[top, bottom], r as i64 - 2)?;
    let (vecs, vals) = eigh_v(cx, b)?;
    let size = m + n;
    // The largest k eigenpairs, in descending order.
    let order: Vec<i64> = (0..k).map(|i| size - 1 - i).collect();
    let idx = cx.const_i64(&[k], &order)?;
    let s = take_along(cx, vals, r - 2, idx)?;
    let x = take_along(cx, vecs, r - 1, idx)?; // [..., m+n, k]
    let x = cx.bin_c(O::Mul, x, std::f64::consts::SQRT_2)?;
    let u = slice_static(cx, x, r - 2, 0, m, 1)?;
    let v = slice_static(cx, x, r - 2, m, size, 1)?;
    Ok((u, s, v))
}

/// `q` [..., m, k] with orthonormal columns completed to an m×m orthogonal matrix (its first k
/// columns kept): Householder QR of q has R = diag(±1), so Q·diag(R) starts with q.
fn complete(cx: &mut Ctx, q: ValueId, m: i64, k: i64) -> R<ValueId> {
    if k == m {
        return Ok(q);
    }
    let r = cx.rank(q);
    let (p, tau) = qr_v(cx, q)?;
    let full = full_q(cx, p, tau, m)?;
    let rest = slice_static(cx, full, r - 1, k, m, 1)?;
    cx.b.concatenate(&[q, rest], r as i64 - 1).map_err(Into::into)
}

fn svd(cx: &mut Ctx) -> R<Vec<Val>> {
    let a = cx.t("A")?;
    let (m, n) = float_matrix(cx, a, "linalg_svd")?;
    let full = cx.bool("full_matrices")?;
    let compute_uv = cx.bool("compute_uv")?;
    let k = m.min(n);
    let (u, s, v) = svd_thin(cx, a, m, n)?;
    if !compute_uv {
        let e = cx.full(Scalar::Float(0.0), cx.dtype(a), &[Dim::Static(0)])?;
        return Ok(vec![Val::Tensor(e), Val::Tensor(s), Val::Tensor(e)]);
    }
    let (u, v) = if full { (complete(cx, u, m, k)?, complete(cx, v, n, k)?) } else { (u, v) };
    let vh = mt(cx, v)?;
    Ok(vec![Val::Tensor(u), Val::Tensor(s), Val::Tensor(vh)])
}

/// A⁺ = V·diag(1/σ)·Uᵀ over the singular values above max(atol, rtol·σ_max) (ATen's rule;
/// rtol defaults to max(m, n)·ε when neither tolerance is given, else 0).
fn pinv(cx: &mut Ctx) -> R<Vec<Val>> {
    let a = cx.t("self")?;
    let (m, n) = float_matrix(cx, a, "linalg_pinv")?;
    let atol = cx.opt_t("atol")?;
    let rtol = cx.opt_t("rtol")?;
    // A Hermitian input is read from its lower triangle only, as ATen's eigh-based path does.
    let a = if cx.bool("hermitian")? && m == n {
        let dims = cx.dims(a);
        let low = triangle(cx, &dims, true)?;
        let at = mt(cx, a)?;
        cx.select(low, a, at)?
    } else {
        a
    };
    let (u, s, v) = svd_thin(cx, a, m, n)?;
    let dt = cx.dtype(a);
    let sr = cx.rank(s);
    let smax = cx.reduce(s, ReduceKind::Max, &[sr - 1], true)?;
    let eps = dt.eps().unwrap_or(f64::from(f32::EPSILON));
    let rtol_v = match (rtol, atol) {
        (Some(r), _) => cx.convert(r, dt)?,
        (None, None) => cx.full(Scalar::Float(m.max(n) as f64 * eps), dt, &[])?,
        (None, Some(_)) => cx.full(Scalar::Float(0.0), dt, &[])?,
    };
    let atol_v = match atol {
        Some(t) => cx.convert(t, dt)?,
        None => cx.full(Scalar::Float(0.0), dt, &[])?,
    };
    // Tolerances broadcast against the batch: [..., 1].
    let add_last = |cx: &mut Ctx, t: ValueId| -> R<ValueId> {
        let mut d = cx.dims(t);
        d.push(Dim::Static(1));
        cx.reshape(t, d)
    };
    let rtol_v = add_last(cx, rtol_v)?;
    let atol_v = add_last(cx, atol_v)?;
    let sd = cx.dims(smax);
    let shape = tpuc_ir::infer::broadcast_shapes(&tpuc_ir::infer::broadcast_shapes(&sd, &cx.dims(rtol_v))?, &cx.dims(atol_v))?;
    let smax = cx.broadcast_to(smax, &shape)?;
    let rt = cx.broadcast_to(rtol_v, &shape)?;
    let at = cx.broadcast_to(atol_v, &shape)?;
    let rel = cx.bin(O::Mul, rt, smax)?;
    let cut = cx.bin(O::Max, at, rel)?;
    let mut full_s = shape.clone();
    if let Some(last) = full_s.last_mut() {
        *last = cx.dims(s).last().cloned().unwrap_or(Dim::Static(0));
    }
    let s_b = cx.broadcast_to(s, &full_s)?;
    let cut_b = cx.broadcast_to(cut, &full_s)?;
    let keep = cx.cmp(Direction::Gt, s_b, cut_b)?;
    let one_v = cx.full_like(Scalar::Float(1.0), s_b)?;
    let inv = cx.bin(O::Div, one_v, s_b)?;
    let zero = cx.full_like(Scalar::Float(0.0), s_b)?;
    let inv = cx.select(keep, inv, zero)?; // [..., k]
    // V·diag(inv): scale V's columns.
    let vd = cx.dims(v);
    let batch_v = vd[..vd.len() - 2].to_vec();
    let want = tpuc_ir::infer::broadcast_shapes(&batch_v, &full_s[..full_s.len() - 1])?;
    let (u, v) = {
        let mut dv = want.clone();
        dv.extend_from_slice(&vd[vd.len() - 2..]);
        let ud = cx.dims(u);
        let mut du = want.clone();
        du.extend_from_slice(&ud[ud.len() - 2..]);
        (cx.broadcast_to(u, &du)?, cx.broadcast_to(v, &dv)?)
    };
    let ir = cx.rank(inv);
    let inv_row = {
        let mut d = cx.dims(inv);
        d.insert(ir - 1, Dim::Static(1));
        cx.reshape(inv, d)?
    };
    let inv_row = cx.broadcast_to(inv_row, &cx.dims(v))?;
    let vs = cx.bin(O::Mul, v, inv_row)?;
    let ut = mt(cx, u)?;
    one(matmul_v(cx, vs, ut)?)
}
