//! Arithmetic builders shared across families: floor division, batched matmul with ATen's
//! broadcasting, and a range over a symbolic length.

use super::ctx::*;
use tpuc_ir::Opcode as O;

/// ATen's floor division (`div_floor_integer` / `div_floor_floating`).
pub fn floor_div_v(cx: &mut Ctx, x: ValueId, y: ValueId) -> R<ValueId> {
    let dt = cx.dtype(x);
    let zero = cx.full_like(Scalar::Int(0), x)?;
    if dt.is_unsigned_int() || dt.is_bool() {
        return cx.bin(O::Div, x, y);
    }
    if dt.is_int() {
        let q = cx.bin(O::Div, x, y)?;
        let r = cx.bin(O::Rem, x, y)?;
        let xn = cx.cmp(Direction::Lt, x, zero)?;
        let yn = cx.cmp(Direction::Lt, y, zero)?;
        let differ = cx.bin(O::Xor, xn, yn)?;
        let rnz = cx.cmp(Direction::Ne, r, zero)?;
        let fix = cx.bin(O::And, differ, rnz)?;
        let one_ = cx.full_like(Scalar::Int(1), x)?;
        let q1 = cx.bin(O::Sub, q, one_)?;
        return cx.select(fix, q1, q);
    }
    // if b == 0: a / b
    // mod = fmod(a, b); div = (a - mod) / b
    // if mod != 0 and (b < 0) != (mod < 0): div -= 1
    // if div != 0: fd = floor(div); if div - fd > 0.5: fd += 1   else: fd = copysign(0, a / b)
    let plain = cx.bin(O::Div, x, y)?;
    let m = cx.bin(O::Rem, x, y)?;
    let am = cx.bin(O::Sub, x, m)?;
    let d0 = cx.bin(O::Div, am, y)?;
    let mnz = cx.cmp(Direction::Ne, m, zero)?;
    let yn = cx.cmp(Direction::Lt, y, zero)?;
    let mn = cx.cmp(Direction::Lt, m, zero)?;
    let differ = cx.cmp(Direction::Ne, yn, mn)?;
    let fix = cx.bin(O::And, mnz, differ)?;
    let one_ = cx.full_like(Scalar::Float(1.0), x)?;
    let d1 = cx.bin(O::Sub, d0, one_)?;
    let d = cx.select(fix, d1, d0)?;
    let fd = cx.un(O::Floor, d)?;
    let frac = cx.bin(O::Sub, d, fd)?;
    let half = cx.full_like(Scalar::Float(0.5), x)?;
    let up = cx.cmp(Direction::Gt, frac, half)?;
    let fd1 = cx.bin(O::Add, fd, one_)?;
    let fdr = cx.select(up, fd1, fd)?;
    let signed_zero = cx.bin(O::Mul, plain, zero)?;
    let dnz = cx.cmp(Direction::Ne, d, zero)?;
    let res = cx.select(dnz, fdr, signed_zero)?;
    let ynz = cx.cmp(Direction::Ne, y, zero)?;
    cx.select(ynz, res, plain)
}

/// `torch.matmul` semantics.
pub fn matmul_v(cx: &mut Ctx, a: ValueId, b: ValueId) -> R<ValueId> {
    let (a, b) = same_dtype(cx, a, b)?;
    let (ra, rb) = (cx.rank(a), cx.rank(b));
    match (ra, rb) {
        (0, _) | (_, 0) => err("matmul of a zero-dim tensor"),
        (1, 1) => dg(cx, a, b, &[], &[], &[0], &[0]),
        (_, 1) => dg(cx, a, b, &[], &[], &[ra as i64 - 1], &[0]),
        (1, _) => dg(cx, a, b, &[], &[], &[0], &[rb as i64 - 2]),
        (_, 2) => dg(cx, a, b, &[], &[], &[ra as i64 - 1], &[0]),
        _ => {
            let da = cx.dims(a);
            let db = cx.dims(b);
            let batch = infer::broadcast_shapes(&da[..ra - 2], &db[..rb - 2])?;
            let nb = batch.len();
            let mut sa = batch.clone();
            sa.extend_from_slice(&da[ra - 2..]);
            let mut sb = batch.clone();
            sb.extend_from_slice(&db[rb - 2..]);
            let a2 = cx.broadcast_to(a, &sa)?;
            let b2 = cx.broadcast_to(b, &sb)?;
            let bd: Vec<i64> = (0..nb as i64).collect();
            dg(cx, a2, b2, &bd, &bd, &[nb as i64 + 1], &[nb as i64])
        }
    }
}

/// Both operands in their promoted dtype.
pub fn same_dtype(cx: &mut Ctx, a: ValueId, b: ValueId) -> R<(ValueId, ValueId)> {
    let dt = cx.result_type(&[Operand::T(a), Operand::T(b)])?;
    Ok((cx.convert(a, dt)?, cx.convert(b, dt)?))
}

pub fn dg(cx: &mut Ctx, a: ValueId, b: ValueId, lb: &[i64], rb: &[i64], lc: &[i64], rc: &[i64]) -> R<ValueId> {
    Ok(cx.b.dot_general(a, b, lb, rb, lc, rc)?)
}

/// `start, start + step, ..` below the symbolic `end` (`step > 0`) as i64: an iota of the
/// symbolic length `ceil((end - start) / step)`, scaled and shifted by `start` (a constant, or
/// a size read from the data: its run-time value).
pub fn sym_range(cx: &mut Ctx, start: &SymExpr, end: SymExpr, step: i64) -> R<ValueId> {
    let span = end.sub(start);
    let len = if step == 1 { span } else { span.add(&SymExpr::constant(step - 1)).floordiv(step) };
    let mut v = cx.iota(DType::I64, &[Dim::from_expr(len)], 0)?;
    if step != 1 {
        v = cx.bin_c(O::Mul, v, step as f64)?;
    }
    match start.as_const() {
        Some(0) => {}
        Some(c) => v = cx.bin_c(O::Add, v, c as f64)?,
        None => {
            let shape = cx.dims(v);
            let at = cx.sym_operand(start)?;
            let at = cx.mat(&at, DType::I64, &shape)?;
            v = cx.bin(O::Add, v, at)?;
        }
    }
    Ok(v)
}
