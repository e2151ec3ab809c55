//! Reduction builders: mean, variance, arg-reductions, logsumexp, softmax, sort and scans
//! (cumulative sum, product, max, min).

use super::ctx::*;
use tpuc_ir::Opcode as O;
use tpuc_ir::{ArgReduceKind, ScanKind};

pub fn mean_v(cx: &mut Ctx, x: ValueId, dims: &[usize], keep: bool, out: DType) -> R<ValueId> {
    let acc = acc_dtype(out);
    let xv = cx.convert(x, acc)?;
    let s = cx.reduce(xv, ReduceKind::Sum, dims, keep)?;
    let n = cx.count(xv, dims, acc)?;
    let shape = cx.dims(s);
    let n = cx.broadcast_to(n, &shape)?;
    let m = cx.bin(O::Div, s, n)?;
    cx.convert(m, out)
}

/// Index of the first max/min along `dim` (removed unless `keep`).
pub fn arg_v(cx: &mut Ctx, x: ValueId, dim: usize, kind: ArgReduceKind, keep: bool) -> R<ValueId> {
    let xv = if cx.dtype(x).is_bool() { cx.convert(x, DType::U8)? } else { x };
    let a = cx.b.build1(
        O::ArgReduce,
        &[xv],
        Attrs::new().with("dimension", Attr::Int(dim as i64)).with("kind", kind.attr()),
        Some(TensorType::new(DType::I64, cx.dims(x).into_iter().enumerate().filter(|(i, _)| *i != dim).map(|(_, d)| d))),
    )?;
    if keep {
        let kept = keep_dims(&cx.dims(x), &[dim]);
        return cx.reshape(a, kept);
    }
    Ok(a)
}

/// Variance over `dims` with `correction`, two-pass: sum((x - mean)^2) / (N - correction).
pub fn var_v(cx: &mut Ctx, x: ValueId, dims: &[usize], correction: f64, keep: bool) -> R<(ValueId, ValueId)> {
    let out = cx.dtype(x);
    let acc = acc_dtype(out);
    let xv = cx.convert(x, acc)?;
    let s = cx.reduce(xv, ReduceKind::Sum, dims, true)?;
    let n = cx.count(xv, dims, acc)?;
    let nb = {
        let sh = cx.dims(s);
        cx.broadcast_to(n, &sh)?
    };
    let mean = cx.bin(O::Div, s, nb)?;
    let shape = cx.dims(xv);
    let mb = cx.broadcast_to(mean, &shape)?;
    let d = cx.bin(O::Sub, xv, mb)?;
    let sq = cx.bin(O::Mul, d, d)?;
    let ss = cx.reduce(sq, ReduceKind::Sum, dims, keep)?;
    let c = cx.scalar(Scalar::Float(correction), acc)?;
    let denom = cx.bin(O::Sub, n, c)?;
    let zero = cx.scalar(Scalar::Float(0.0), acc)?;
    let denom = cx.bin(O::Max, denom, zero)?;
    let sh = cx.dims(ss);
    let denom = cx.broadcast_to(denom, &sh)?;
    let var = cx.bin(O::Div, ss, denom)?;
    let mean_out = if keep { mean } else { cx.reshape(mean, sh)? };
    Ok((cx.convert(var, out)?, cx.convert(mean_out, out)?))
}

/// `log(sum(exp(x - m))) + m` over `dims` with `m = amax(x)` (infinite maxima replaced by 0),
/// as ATen computes it.
pub fn logsumexp_v(cx: &mut Ctx, x: ValueId, dims: &[usize], k: bool) -> R<ValueId> {
    let m = cx.reduce(x, ReduceKind::Max, dims, true)?;
    let am = cx.un(O::Abs, m)?;
    let inf = cx.full_like(Scalar::Float(f64::INFINITY), m)?;
    let is_inf = cx.cmp(Direction::Eq, am, inf)?;
    let z = cx.full_like(Scalar::Float(0.0), m)?;
    let m = cx.select(is_inf, z, m)?;
    let shape = cx.dims(x);
    let mb = cx.broadcast_to(m, &shape)?;
    let d = cx.bin(O::Sub, x, mb)?;
    let e = cx.un(O::Exp, d)?;
    let s = cx.reduce(e, ReduceKind::Sum, dims, k)?;
    let l = cx.un(O::Log, s)?;
    let m2 = if k { m } else { cx.reshape(m, cx.dims(l))? };
    cx.bin(O::Add, l, m2)
}

/// Softmax-like op along `dim`, computed in f32 for half types and converted to `out`.
pub fn softmax_v(cx: &mut Ctx, x: ValueId, dim: i64, op: Opcode, out: DType) -> R<ValueId> {
    let r = cx.rank(x);
    let xin = cx.float_of(x)?;
    let compute = max_float(acc_dtype(cx.dtype(xin)), out);
    let xv = cx.convert(xin, compute)?;
    if r == 0 {
        let v = if op == O::Softmax { cx.full_like(Scalar::Float(1.0), xv)? } else { cx.full_like(Scalar::Float(0.0), xv)? };
        return cx.convert(v, out);
    }
    let d = norm_dim(dim, r)?;
    let s = cx.b.build1(op, &[xv], Attrs::new().with("dimension", Attr::Int(d as i64)), None)?;
    cx.convert(s, out)
}

pub fn sort_v(cx: &mut Ctx, x: ValueId, dim: usize, descending: bool) -> R<(ValueId, ValueId)> {
    let r = cx.b.build(
        O::Sort,
        &[x],
        Attrs::new().with("dimension", Attr::Int(dim as i64)).with("descending", Attr::Bool(descending)),
        None,
    )?;
    match r.as_slice() {
        [v, i] => Ok((*v, *i)),
        _ => err("internal: sort results"),
    }
}

pub fn scan(cx: &mut Ctx, x: ValueId, dim: usize, kind: ScanKind) -> R<ValueId> {
    Ok(cx.b.build1(
        O::Scan,
        &[x],
        Attrs::new().with("dimension", Attr::Int(dim as i64)).with("kind", kind.attr()),
        None,
    )?)
}

/// Accumulation dtype: i64 for integers and bool, f32 for half types.
pub fn acc_dtype(d: DType) -> DType {
    match d {
        DType::Bool | DType::I8 | DType::I16 | DType::I32 | DType::I64 | DType::U8 | DType::U16 | DType::U32 => DType::I64,
        other => dtypes::compute_dtype(other),
    }
}

/// f64 when either dtype is f64, else `a`.
pub fn max_float(a: DType, b: DType) -> DType {
    if a == DType::F64 || b == DType::F64 {
        DType::F64
    } else {
        a
    }
}
