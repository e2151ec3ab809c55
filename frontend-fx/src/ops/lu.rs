//! LU factorization with partial pivoting and what is built on it: `linalg_lu_factor_ex`,
//! `linalg_lu`, `lu_unpack`, `linalg_lu_solve`, `_linalg_solve_ex`, `linalg_inv_ex`,
//! `_linalg_det` and `_linalg_slogdet`.
//!
//! The factorization is unrolled over the min(m, n) steps of a static matrix (at most
//! `MAX_STEPS`; larger matrices are refused): step k picks the row of largest |a[i, k]|,
//! i >= k (the first on ties, as LAPACK's getrf), swaps it with row k, stores the multipliers
//! a[i, k] / a[k, k] below the diagonal and subtracts their outer product with row k from the
//! trailing block. Every step works on the whole (batched) matrix with masks, so batches pivot
//! independently; rows are swapped by selects and masked sums, never by multiplying with a
//! permutation (0·inf would make NaN). Pivots are 0-based row numbers internally and 1-based
//! int32 at the ATen boundary, as LAPACK's. Solves apply the row swaps to the right-hand side
//! in order, then the unit lower and the upper triangular solves.

use crate::ops::build::*;
use arg_v;
use slice_static;
use Opcode as O;
use tpuc_ir::ArgReduceKind;

pub const OPS: &[(&str, OpFn)] = &[
    ("linalg_lu_factor_ex.default", lu_factor_ex),
    ("linalg_lu.default", linalg_lu),
    ("lu_unpack.default", lu_unpack),
    ("linalg_lu_solve.default", lu_solve),
    ("_linalg_solve_ex.default", solve_ex),
    ("linalg_inv_ex.default", inv_ex),
    ("_linalg_det.default", det),
    ("_linalg_slogdet.default", slogdet),
];

/// Largest number of elimination steps unrolled into a program.
pub const MAX_STEPS: i64 = 64;

/// `float_matrix`, within the unrolled steps.
fn matrix(cx: &Ctx, a: ValueId, what: &str) -> R<(i64, i64)> {
    let (m, n) = float_matrix(cx, a, what)?;
    if m.min(n) > MAX_STEPS {
        return err(format!(
            "{what} of {m}x{n} matrices: LU is unrolled over min(m, n) steps, at most {MAX_STEPS} (larger is not supported yet)"
        ));
    }
    Ok((m, n))
}

/// `square_matrix`, within the unrolled steps.
fn unrolled_square(cx: &Ctx, a: ValueId, what: &str) -> R<i64> {
    matrix(cx, a, what)?;
    square_matrix(cx, a, what)
}

fn rows(cx: &mut Ctx, dims: &[Dim]) -> R<ValueId> {
    cx.iota(DType::I64, dims, dims.len() - 2)
}
fn cols(cx: &mut Ctx, dims: &[Dim]) -> R<ValueId> {
    cx.iota(DType::I64, dims, dims.len() - 1)
}

/// `i op k` for a row or column iota `i` and a constant k.
fn at(cx: &mut Ctx, i: ValueId, dir: Direction, k: i64) -> R<ValueId> {
    let kv = cx.full_like(Scalar::Int(k), i)?;
    cx.cmp(dir, i, kv)
}

/// Rows k and p swapped in `a` [..., m, c]; `p` is [..., 1, 1] (a row number per batch).
fn swap_rows(cx: &mut Ctx, a: ValueId, k: i64, p: ValueId) -> R<ValueId> {
    let dims = cx.dims(a);
    let r = dims.len();
    let i = rows(cx, &dims)?;
    let pb = cx.broadcast_to(p, &dims)?;
    let is_p = cx.cmp(Direction::Eq, i, pb)?;
    let is_k = at(cx, i, Direction::Eq, k)?;
    let zero = cx.full_like(Scalar::Float(0.0), a)?;
    let only_p = cx.select(is_p, a, zero)?;
    let row_p = cx.reduce(only_p, ReduceKind::Sum, &[r - 2], true)?;
    let row_p = cx.broadcast_to(row_p, &dims)?;
    let m = dims[r - 2].as_static().unwrap_or(1);
    let row_k = slice_static(cx, a, r - 2, k, (k + 1).min(m), 1)?;
    let row_k = cx.broadcast_to(row_k, &dims)?;
    let t = cx.select(is_p, row_k, a)?;
    cx.select(is_k, row_p, t)
}

/// The packed factor (L below the diagonal, unit diagonal implied, U on and above) and the
/// 0-based pivot rows [..., min(m, n)] (i64).
fn factor(cx: &mut Ctx, a: ValueId) -> R<(ValueId, ValueId)> {
    let dims = cx.dims(a);
    let r = dims.len();
    let (m, n) = (dims[r - 2].as_static().unwrap_or(0), dims[r - 1].as_static().unwrap_or(0));
    let i = rows(cx, &dims)?;
    let j = cols(cx, &dims)?;
    let mut a = a;
    let mut pivots = Vec::new();
    for k in 0..m.min(n) {
        let ck = slice_static(cx, a, r - 1, k, k + 1, 1)?; // [..., m, 1]
        let cd = cx.dims(ck);
        let ci = rows(cx, &cd)?;
        let above = at(cx, ci, Direction::Lt, k)?;
        let mag = cx.un(O::Abs, ck)?;
        let minus = cx.full_like(Scalar::Float(-1.0), mag)?;
        let mag = cx.select(above, minus, mag)?;
        let p = arg_v(cx, mag, r - 2, ArgReduceKind::Argmax, true)?; // [..., 1, 1]
        a = swap_rows(cx, a, k, p)?;
        pivots.push(p);
        let pivot = slice_static(cx, a, r - 2, k, k + 1, 1)?;
        let pivot = slice_static(cx, pivot, r - 1, k, k + 1, 1)?; // [..., 1, 1]
        let ck = slice_static(cx, a, r - 1, k, k + 1, 1)?;
        let pb = cx.broadcast_to(pivot, &cd)?;
        let l = cx.bin(O::Div, ck, pb)?; // [..., m, 1]
        let rk = slice_static(cx, a, r - 2, k, k + 1, 1)?; // [..., 1, n]
        let lb = cx.broadcast_to(l, &dims)?;
        let rb = cx.broadcast_to(rk, &dims)?;
        let below = at(cx, i, Direction::Gt, k)?;
        let right = at(cx, j, Direction::Gt, k)?;
        let block = cx.bin(O::And, below, right)?;
        let prod = cx.bin(O::Mul, lb, rb)?;
        let zero = cx.full_like(Scalar::Float(0.0), a)?;
        let upd = cx.select(block, prod, zero)?;
        a = cx.bin(O::Sub, a, upd)?;
        let on_k = at(cx, j, Direction::Eq, k)?;
        let store = cx.bin(O::And, below, on_k)?;
        a = cx.select(store, lb, a)?;
    }
    let piv = if pivots.is_empty() {
        let mut pd = dims[..r - 2].to_vec();
        pd.push(Dim::Static(0));
        cx.full(Scalar::Int(0), DType::I64, &pd)?
    } else {
        let p = cat_v(cx, &pivots, r as i64 - 1)?; // [..., 1, k]
        let mut pd = cx.dims(p);
        pd.remove(r - 2);
        cx.reshape(p, pd)?
    };
    Ok((a, piv))
}

/// Applies the row swaps `piv` (0-based, [..., k]) to `b` [..., m, c], in order or reversed.
fn apply_pivots(cx: &mut Ctx, b: ValueId, piv: ValueId, reverse: bool) -> R<ValueId> {
    let k = cx.dims(piv).last().and_then(|d| d.as_static()).unwrap_or(0);
    let pr = cx.rank(piv);
    let mut b = b;
    let order: Vec<i64> = if reverse { (0..k).rev().collect() } else { (0..k).collect() };
    for s in order {
        let p = slice_static(cx, piv, pr - 1, s, s + 1, 1)?;
        let mut pd = cx.dims(p);
        pd.push(Dim::Static(1));
        let p = cx.reshape(p, pd)?;
        b = swap_rows(cx, b, s, p)?;
    }
    Ok(b)
}

fn tri(cx: &mut Ctx, a: ValueId, b: ValueId, lower: bool, unit: bool, transpose: bool) -> R<ValueId> {
    tri_solve(cx, a, b, [true, lower, unit, transpose])
}

/// X with A·X = B (or Aᴴ·X = B) from A's packed factor and pivots; batch dims equal.
fn lu_solve_v(cx: &mut Ctx, lu: ValueId, piv: ValueId, b: ValueId, adjoint: bool) -> R<ValueId> {
    if !adjoint {
        let pb = apply_pivots(cx, b, piv, false)?;
        let y = tri(cx, lu, pb, true, true, false)?;
        return tri(cx, lu, y, false, false, false);
    }
    let z = tri(cx, lu, b, false, false, true)?;
    let w = tri(cx, lu, z, true, true, true)?;
    apply_pivots(cx, w, piv, true)
}

fn to_i32_1based(cx: &mut Ctx, piv: ValueId) -> R<ValueId> {
    let p = cx.bin_c(O::Add, piv, 1.0)?;
    cx.convert(p, DType::I32)
}

fn from_i32_1based(cx: &mut Ctx, piv: ValueId) -> R<ValueId> {
    let p = cx.convert(piv, DType::I64)?;
    cx.bin_c(O::Sub, p, 1.0)
}

/// info: the 1-based step of the first zero pivot, 0 if none.
fn singular_info(cx: &mut Ctx, lu: ValueId) -> R<ValueId> {
    let d = diagonal(cx, lu)?;
    let dd = cx.dims(d);
    let k = dd.last().and_then(|x| x.as_static()).unwrap_or(0);
    if k == 0 {
        let bd = dd[..dd.len() - 1].to_vec();
        return cx.full(Scalar::Int(0), DType::I32, &bd);
    }
    let zero = cx.full_like(Scalar::Float(0.0), d)?;
    let good = cx.cmp(Direction::Ne, d, zero)?;
    first_failure(cx, good)
}

/// (-1)^(number of steps that swapped) per batch, in `dtype`.
fn perm_sign(cx: &mut Ctx, piv: ValueId, dtype: DType) -> R<ValueId> {
    let pd = cx.dims(piv);
    let step = cx.iota(DType::I64, &pd, pd.len() - 1)?;
    let swapped = cx.cmp(Direction::Ne, piv, step)?;
    let c = cx.convert(swapped, DType::I64)?;
    let c = cx.reduce(c, ReduceKind::Sum, &[pd.len() - 1], false)?;
    let two = cx.full_like(Scalar::Int(2), c)?;
    let odd = cx.bin(O::Rem, c, two)?;
    let oddf = cx.convert(odd, dtype)?;
    let twof = cx.bin_c(O::Mul, oddf, 2.0)?;
    let one_v = cx.full_like(Scalar::Float(1.0), twof)?;
    cx.bin(O::Sub, one_v, twof)
}

fn lu_factor_ex(cx: &mut Ctx) -> R<Vec<Val>> {
    let a = cx.t("A")?;
    matrix(cx, a, "linalg_lu_factor")?;
    if !cx.bool("pivot")? {
        return err("LU without pivoting is not supported (pivot=False)");
    }
    let (lu, piv) = factor(cx, a)?;
    let info = singular_info(cx, lu)?;
    let p = to_i32_1based(cx, piv)?;
    Ok(vec![Val::Tensor(lu), Val::Tensor(p), Val::Tensor(info)])
}

/// (P, L, U) with A = P·L·U from a packed factor and 0-based pivots.
fn unpack(cx: &mut Ctx, lu: ValueId, piv: ValueId) -> R<(ValueId, ValueId, ValueId)> {
    let dims = cx.dims(lu);
    let r = dims.len();
    let (m, n) = (dims[r - 2].as_static().unwrap_or(0), dims[r - 1].as_static().unwrap_or(0));
    let k = m.min(n);
    let dt = cx.dtype(lu);
    // L: [..., m, k], strictly lower part plus the unit diagonal.
    let l = slice_static(cx, lu, r - 1, 0, k, 1)?;
    let ld = cx.dims(l);
    let (i, j) = (rows(cx, &ld)?, cols(cx, &ld)?);
    let below = cx.cmp(Direction::Gt, i, j)?;
    let diag = cx.cmp(Direction::Eq, i, j)?;
    let zero = cx.full_like(Scalar::Float(0.0), l)?;
    let one_v = cx.full_like(Scalar::Float(1.0), l)?;
    let l = cx.select(below, l, zero)?;
    let l = cx.select(diag, one_v, l)?;
    // U: [..., k, n], upper part.
    let u = slice_static(cx, lu, r - 2, 0, k, 1)?;
    let ud = cx.dims(u);
    let (i, j) = (rows(cx, &ud)?, cols(cx, &ud)?);
    let upper = cx.cmp(Direction::Le, i, j)?;
    let zu = cx.full_like(Scalar::Float(0.0), u)?;
    let u = cx.select(upper, u, zu)?;
    // P = (swaps applied to I)ᵀ.
    let mut pd = dims[..r - 2].to_vec();
    pd.extend([Dim::Static(m), Dim::Static(m)]);
    let eye = identity_matrix(cx, &pd, dt)?;
    let swapped = apply_pivots(cx, eye, piv, false)?;
    let p = mt(cx, swapped)?;
    Ok((p, l, u))
}

fn linalg_lu(cx: &mut Ctx) -> R<Vec<Val>> {
    let a = cx.t("A")?;
    matrix(cx, a, "linalg_lu")?;
    if !cx.bool("pivot")? {
        return err("LU without pivoting is not supported (pivot=False)");
    }
    let (lu, piv) = factor(cx, a)?;
    let (p, l, u) = unpack(cx, lu, piv)?;
    Ok(vec![Val::Tensor(p), Val::Tensor(l), Val::Tensor(u)])
}

fn lu_unpack(cx: &mut Ctx) -> R<Vec<Val>> {
    let lu = cx.t("LU_data")?;
    let piv = cx.t("LU_pivots")?;
    matrix(cx, lu, "lu_unpack")?;
    let piv = from_i32_1based(cx, piv)?;
    let (p, l, u) = unpack(cx, lu, piv)?;
    Ok(vec![Val::Tensor(p), Val::Tensor(l), Val::Tensor(u)])
}

fn lu_solve(cx: &mut Ctx) -> R<Vec<Val>> {
    let lu = cx.t("LU")?;
    let piv = cx.t("pivots")?;
    let b = cx.t("B")?;
    unrolled_square(cx, lu, "linalg_lu_solve")?;
    let left = cx.bool("left")?;
    let adjoint = cx.bool("adjoint")?;
    let piv = from_i32_1based(cx, piv)?;
    let b = cx.convert(b, cx.dtype(lu))?;
    // X·A = B is Aᵀ·Xᵀ = Bᵀ.
    let (b, adjoint) = if left { (b, adjoint) } else { (mt(cx, b)?, !adjoint) };
    let (lu2, b2) = broadcast_batch(cx, lu, b)?;
    let pd = cx.dims(lu2);
    let mut want = pd[..pd.len() - 2].to_vec();
    want.push(cx.dims(piv).last().cloned().unwrap_or(Dim::Static(0)));
    let piv = cx.broadcast_to(piv, &want)?;
    let x = lu_solve_v(cx, lu2, piv, b2, adjoint)?;
    one(if left { x } else { mt(cx, x)? })
}

fn solve_ex(cx: &mut Ctx) -> R<Vec<Val>> {
    let a = cx.t("A")?;
    let b = cx.t("B")?;
    unrolled_square(cx, a, "linalg_solve")?;
    let left = cx.bool("left")?;
    let dt = cx.result_type(&[Operand::T(a), Operand::T(b)])?;
    let (a, b) = (cx.convert(a, dt)?, cx.convert(b, dt)?);
    let (ad, bd) = (cx.dims(a), cx.dims(b));
    // B is a (batch of) vector(s) when it is 1-D or has A's shape without the last dim.
    let vector = bd.len() == 1 || (bd.len() + 1 == ad.len() && bd[..] == ad[..ad.len() - 1]);
    let b = if vector {
        let mut d = bd.clone();
        d.push(Dim::Static(1));
        cx.reshape(b, d)?
    } else {
        b
    };
    let a_eff = if left { a } else { mt(cx, a)? };
    let b_eff = if left || vector { b } else { mt(cx, b)? };
    let (lu, piv) = factor(cx, a_eff)?;
    let (lu2, b2) = broadcast_batch(cx, lu, b_eff)?;
    let ld = cx.dims(lu2);
    let mut want = ld[..ld.len() - 2].to_vec();
    want.push(cx.dims(piv).last().cloned().unwrap_or(Dim::Static(0)));
    let piv2 = cx.broadcast_to(piv, &want)?;
    let x = lu_solve_v(cx, lu2, piv2, b2, false)?;
    let x = if vector {
        let mut d = cx.dims(x);
        d.pop();
        cx.reshape(x, d)?
    } else if left {
        x
    } else {
        mt(cx, x)?
    };
    let info = singular_info(cx, lu)?;
    let p = to_i32_1based(cx, piv)?;
    Ok(vec![Val::Tensor(x), Val::Tensor(lu), Val::Tensor(p), Val::Tensor(info)])
}

fn inv_ex(cx: &mut Ctx) -> R<Vec<Val>> {
    let a = cx.t("A")?;
    unrolled_square(cx, a, "linalg_inv")?;
    let (lu, piv) = factor(cx, a)?;
    let eye = identity_matrix(cx, &cx.dims(a), cx.dtype(a))?;
    let x = lu_solve_v(cx, lu, piv, eye, false)?;
    let info = singular_info(cx, lu)?;
    Ok(vec![Val::Tensor(x), Val::Tensor(info)])
}

fn det(cx: &mut Ctx) -> R<Vec<Val>> {
    let a = cx.t("A")?;
    unrolled_square(cx, a, "linalg_det")?;
    let (lu, piv) = factor(cx, a)?;
    let d = diagonal(cx, lu)?;
    let last = cx.rank(d) - 1;
    let prod = cx.reduce(d, ReduceKind::Prod, &[last], false)?;
    let s = perm_sign(cx, piv, cx.dtype(a))?;
    let det = cx.bin(O::Mul, prod, s)?;
    let p = to_i32_1based(cx, piv)?;
    Ok(vec![Val::Tensor(det), Val::Tensor(lu), Val::Tensor(p)])
}

fn slogdet(cx: &mut Ctx) -> R<Vec<Val>> {
    let a = cx.t("A")?;
    unrolled_square(cx, a, "linalg_slogdet")?;
    let (lu, piv) = factor(cx, a)?;
    let d = diagonal(cx, lu)?;
    let last = cx.rank(d) - 1;
    let sd = cx.un(O::Sign, d)?;
    let sprod = cx.reduce(sd, ReduceKind::Prod, &[last], false)?;
    let ps = perm_sign(cx, piv, cx.dtype(a))?;
    let sign = cx.bin(O::Mul, sprod, ps)?;
    let ad = cx.un(O::Abs, d)?;
    let ld = cx.un(O::Log, ad)?;
    let logabs = cx.reduce(ld, ReduceKind::Sum, &[last], false)?;
    let p = to_i32_1based(cx, piv)?;
    Ok(vec![Val::Tensor(sign), Val::Tensor(logabs), Val::Tensor(lu), Val::Tensor(p)])
}
