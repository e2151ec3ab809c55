//! Reductions, scans, softmax, sorting and top-k.
//!
//! Sums and products of integers and bools accumulate in i64 as ATen does; f16/bf16 sums
//! accumulate in f32 (the CPU kernels' accumulation type) and round once at the end. An
//! empty or omitted dim list means all dims. Means divide the sum by the element count
//! (counted at run time for symbolic dims).
//!
//! One file on purpose: these ops share the accumulation-type and identity rules defined here.

use crate::ops::build::*;
use Opcode as O;
use tpuc_ir::{ArgReduceKind, Direction, ReduceKind, ScanKind, ScatterKind};

pub const OPS: &[(&str, OpFn)] = &[
    ("segment_reduce.default", segment_reduce),
    ("sum.default", sum),
    ("sum.dim_IntList", sum),
    ("mean.default", mean),
    ("mean.dim", mean),
    ("prod.default", prod),
    ("prod.dim_int", prod),
    ("amax.default", amax),
    ("amin.default", amin),
    ("max.default", max_all),
    ("min.default", min_all),
    ("max.dim", max_dim),
    ("min.dim", min_dim),
    ("aminmax.default", aminmax),
    ("argmax.default", argmax),
    ("argmin.default", argmin),
    ("any.default", any),
    ("any.dim", any),
    ("any.dims", any),
    ("all.default", all),
    ("_is_all_true.default", is_all_true),
    ("_is_any_true.default", is_any_true),
    ("all.dim", all),
    ("all.dims", all),
    ("var.default", var),
    ("var.dim", var),
    ("var.correction", var),
    ("std.default", std),
    ("std.dim", std),
    ("std.correction", std),
    ("var_mean.correction", var_mean),
    ("var_mean.dim", var_mean),
    ("std_mean.correction", std_mean),
    ("std_mean.dim", std_mean),
    ("logsumexp.default", logsumexp),
    ("linalg_vector_norm.default", vector_norm),
    ("norm.ScalarOpt_dim", norm),
    ("norm.Scalar", norm),
    ("cumsum.default", cumsum),
    ("cumprod.default", cumprod),
    ("logcumsumexp.default", logcumsumexp),
    ("cummax.default", cummax),
    ("cummin.default", cummin),
    ("_softmax.default", softmax_internal),
    ("_log_softmax.default", log_softmax_internal),
    ("softmax.int", softmax),
    ("log_softmax.int", log_softmax),
    ("_safe_softmax.default", safe_softmax),
    ("sort.default", sort),
    ("sort.stable", sort),
    ("argsort.default", argsort),
    ("argsort.stable", argsort),
    ("topk.default", topk),
    ("count_nonzero.dim_IntList", count_nonzero),
    ("count_nonzero.default", count_nonzero),
    ("histc.default", histc),
    ("_softmax_backward_data.default", softmax_backward),
    ("_log_softmax_backward_data.default", log_softmax_backward),
];

/// The reduced dims from a `dim` argument (omitted, None or empty: all).
fn reduce_dims(cx: &Ctx, x: ValueId, name: &str) -> R<Vec<usize>> {
    let r = cx.rank(x);
    let ds = if cx.has(name) { cx.ints(name)? } else { Vec::new() };
    if ds.is_empty() {
        return Ok((0..r).collect());
    }
    let mut out: Vec<usize> = ds.iter().map(|&d| norm_dim(d, r)).collect::<R<_>>()?;
    out.sort_unstable();
    out.dedup();
    // rank-0 tensors reduce over nothing
    if r == 0 {
        out.clear();
    }
    Ok(out)
}

fn keepdim(cx: &Ctx) -> R<bool> {
    // Overloads without `keepdim` (`sum.default`, ...) reduce to a scalar.
    Ok(cx.opt_bool("keepdim")?.unwrap_or(false))
}

/// Result dtype of sum/prod: the `dtype` argument, i64 for integers and bool, else the input's.
fn sum_dtype(cx: &Ctx, x: ValueId) -> R<DType> {
    Ok(match cx.opt_dtype("dtype")? {
        Some(d) => d,
        None => {
            let d = cx.dtype(x);
            if d.is_int() || d.is_bool() {
                if d == DType::U64 {
                    DType::U64
                } else {
                    DType::I64
                }
            } else {
                d
            }
        }
    })
}

pub fn sum_v(cx: &mut Ctx, x: ValueId, dims: &[usize], keep: bool, out: DType) -> R<ValueId> {
    let acc = acc_dtype(out);
    let xv = cx.convert(x, acc)?;
    let s = cx.reduce(xv, ReduceKind::Sum, dims, keep)?;
    cx.convert(s, out)
}

fn sum(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let dims = reduce_dims(cx, x, "dim")?;
    let out = sum_dtype(cx, x)?;
    let k = keepdim(cx)?;
    one(sum_v(cx, x, &dims, k, out)?)
}

fn mean(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let dims = reduce_dims(cx, x, "dim")?;
    let out = cx.opt_dtype("dtype")?.unwrap_or(cx.dtype(x));
    if !(out.is_float() || out.is_complex()) {
        return err(format!("mean needs a floating-point dtype, got {out}"));
    }
    let k = keepdim(cx)?;
    one(mean_v(cx, x, &dims, k, out)?)
}

fn prod(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let dims = if cx.has("dim") {
        vec![norm_dim(cx.int("dim")?, cx.rank(x))?]
    } else {
        (0..cx.rank(x)).collect()
    };
    let out = sum_dtype(cx, x)?;
    let k = keepdim(cx)?;
    let acc = acc_dtype(out);
    let xv = cx.convert(x, acc)?;
    let p = cx.reduce(xv, ReduceKind::Prod, &dims, k)?;
    one(cx.convert(p, out)?)
}

/// On bools max is `or` and min is `and`.
fn bool_kind(kind: ReduceKind) -> ReduceKind {
    match kind {
        ReduceKind::Max => ReduceKind::Or,
        ReduceKind::Min => ReduceKind::And,
        k => k,
    }
}

fn minmax_reduce(cx: &mut Ctx, kind: ReduceKind, dim_arg: &str) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let dims = reduce_dims(cx, x, dim_arg)?;
    let k = keepdim(cx)?;
    let kind = if cx.dtype(x).is_bool() { bool_kind(kind) } else { kind };
    one(cx.reduce(x, kind, &dims, k)?)
}

fn amax(cx: &mut Ctx) -> R<Vec<Val>> {
    minmax_reduce(cx, ReduceKind::Max, "dim")
}
fn amin(cx: &mut Ctx) -> R<Vec<Val>> {
    minmax_reduce(cx, ReduceKind::Min, "dim")
}
fn max_all(cx: &mut Ctx) -> R<Vec<Val>> {
    minmax_reduce(cx, ReduceKind::Max, "__all__")
}
fn min_all(cx: &mut Ctx) -> R<Vec<Val>> {
    minmax_reduce(cx, ReduceKind::Min, "__all__")
}

fn max_min_dim(cx: &mut Ctx, kind: ReduceKind) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let r = cx.rank(x);
    let d = norm_dim(cx.int("dim")?, r)?;
    let k = keepdim(cx)?;
    let dims: Vec<usize> = if r == 0 { vec![] } else { vec![d] };
    let rk = if cx.dtype(x).is_bool() { bool_kind(kind) } else { kind };
    let arg = if kind == ReduceKind::Max { ArgReduceKind::Argmax } else { ArgReduceKind::Argmin };
    let v = cx.reduce(x, rk, &dims, k)?;
    let i = if cx.used(1) {
        if r == 0 {
            Val::Tensor(cx.full(Scalar::Int(0), DType::I64, &[])?)
        } else {
            Val::Tensor(arg_v(cx, x, d, arg, k)?)
        }
    } else {
        Val::Absent
    };
    Ok(vec![Val::Tensor(v), i])
}
fn max_dim(cx: &mut Ctx) -> R<Vec<Val>> {
    max_min_dim(cx, ReduceKind::Max)
}
fn min_dim(cx: &mut Ctx) -> R<Vec<Val>> {
    max_min_dim(cx, ReduceKind::Min)
}

fn aminmax(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let k = keepdim(cx)?;
    let dims: Vec<usize> = match cx.opt_int("dim")? {
        Some(d) => vec![norm_dim(d, cx.rank(x))?],
        None => (0..cx.rank(x)).collect(),
    };
    let lo = cx.reduce(x, ReduceKind::Min, &dims, k)?;
    let hi = cx.reduce(x, ReduceKind::Max, &dims, k)?;
    Ok(vec![Val::Tensor(lo), Val::Tensor(hi)])
}

fn arg_reduce(cx: &mut Ctx, kind: ArgReduceKind) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let k = keepdim(cx)?;
    match cx.opt_int("dim")? {
        Some(d) => {
            let r = cx.rank(x);
            if r == 0 {
                return one(cx.full(Scalar::Int(0), DType::I64, &[])?);
            }
            let d = norm_dim(d, r)?;
            one(arg_v(cx, x, d, kind, k)?)
        }
        None => {
            let t = cx.ty(x);
            let n = t.num_elements_expr();
            let flat = cx.reshape(x, vec![Dim::from_expr(n)])?;
            let a = arg_v(cx, flat, 0, kind, false)?;
            if k {
                let ones = vec![Dim::Static(1); t.rank()];
                return one(cx.reshape(a, ones)?);
            }
            one(a)
        }
    }
}
fn argmax(cx: &mut Ctx) -> R<Vec<Val>> {
    arg_reduce(cx, ArgReduceKind::Argmax)
}
fn argmin(cx: &mut Ctx) -> R<Vec<Val>> {
    arg_reduce(cx, ArgReduceKind::Argmin)
}

fn any_all(cx: &mut Ctx, kind: ReduceKind) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let dims = reduce_dims(cx, x, "dim")?;
    let k = keepdim(cx)?;
    let b = cx.truthy(x)?;
    let r = cx.reduce(b, kind, &dims, k)?;
    if cx.dtype(x) == DType::U8 {
        return one(cx.convert(r, DType::U8)?);
    }
    one(r)
}
fn any(cx: &mut Ctx) -> R<Vec<Val>> {
    any_all(cx, ReduceKind::Or)
}
fn all(cx: &mut Ctx) -> R<Vec<Val>> {
    any_all(cx, ReduceKind::And)
}

/// `_is_all_true` / `_is_any_true`: `all` / `any` of a boolean tensor (what `torch._check`
/// and the export's assertions on tensors read).
fn is_all_true(cx: &mut Ctx) -> R<Vec<Val>> {
    any_all(cx, ReduceKind::And)
}
fn is_any_true(cx: &mut Ctx) -> R<Vec<Val>> {
    any_all(cx, ReduceKind::Or)
}

/// The correction of var/std: `correction` (default 1) or `unbiased` (default true).
fn correction(cx: &Ctx) -> R<f64> {
    if let Some(c) = cx.opt_num("correction")? {
        return Ok(c.as_f64());
    }
    // A None `correction`, and the `correction` overloads (which have no `unbiased`), mean 1.
    Ok(if cx.opt_bool("unbiased")?.unwrap_or(true) { 1.0 } else { 0.0 })
}

fn var_like(cx: &mut Ctx, std: bool, with_mean: bool) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let x = cx.float_of(x)?;
    let dims = reduce_dims(cx, x, "dim")?;
    let k = keepdim(cx)?;
    let c = correction(cx)?;
    let (v, m) = var_v(cx, x, &dims, c, k)?;
    let v = if std { cx.un(O::Sqrt, v)? } else { v };
    if with_mean {
        Ok(vec![Val::Tensor(v), Val::Tensor(m)])
    } else {
        one(v)
    }
}
fn var(cx: &mut Ctx) -> R<Vec<Val>> {
    var_like(cx, false, false)
}
fn std(cx: &mut Ctx) -> R<Vec<Val>> {
    var_like(cx, true, false)
}
fn var_mean(cx: &mut Ctx) -> R<Vec<Val>> {
    var_like(cx, false, true)
}
fn std_mean(cx: &mut Ctx) -> R<Vec<Val>> {
    var_like(cx, true, true)
}

fn logsumexp(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let x = cx.float_of(x)?;
    let dims = reduce_dims(cx, x, "dim")?;
    let k = keepdim(cx)?;
    one(logsumexp_v(cx, x, &dims, k)?)
}

fn norm_v(cx: &mut Ctx, x: ValueId, ord: f64, dims: &[usize], keep: bool) -> R<ValueId> {
    let a = cx.un(O::Abs, x)?;
    if ord == f64::INFINITY {
        return cx.reduce(a, ReduceKind::Max, dims, keep);
    }
    if ord == f64::NEG_INFINITY {
        return cx.reduce(a, ReduceKind::Min, dims, keep);
    }
    if ord == 0.0 {
        let z = cx.full_like(Scalar::Float(0.0), x)?;
        let nz = cx.cmp(Direction::Ne, x, z)?;
        let f = cx.convert(nz, cx.dtype(x))?;
        return cx.reduce(f, ReduceKind::Sum, dims, keep);
    }
    if ord == 1.0 {
        return cx.reduce(a, ReduceKind::Sum, dims, keep);
    }
    if ord == 2.0 {
        let sq = cx.bin(O::Mul, x, x)?;
        let s = cx.reduce(sq, ReduceKind::Sum, dims, keep)?;
        return cx.un(O::Sqrt, s);
    }
    let p = cx.bin_c(O::Pow, a, ord)?;
    let s = cx.reduce(p, ReduceKind::Sum, dims, keep)?;
    cx.bin_c(O::Pow, s, 1.0 / ord)
}

fn vector_norm(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let x = match cx.opt_dtype("dtype")? {
        Some(d) => cx.convert(x, d)?,
        None => cx.float_of(x)?,
    };
    let ord = cx.opt_num("ord")?.map_or(2.0, Num::as_f64);
    let dims = reduce_dims(cx, x, "dim")?;
    let k = keepdim(cx)?;
    one(norm_v(cx, x, ord, &dims, k)?)
}

fn norm(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let x = cx.float_of(x)?;
    let ord = cx.opt_num("p")?.map_or(2.0, Num::as_f64);
    let dims = reduce_dims(cx, x, "dim")?;
    let k = keepdim(cx)?;
    one(norm_v(cx, x, ord, &dims, k)?)
}

/// `segment_reduce(data, reduce, lengths= | offsets=, axis, initial)`: `data` cut along `axis`
/// into consecutive segments (given by their lengths, or by offsets `[.., S + 1]`), each reduced
/// to one element (`sum`, `mean`, `prod`, `max`, `min`). The segments come in at run time, so
/// every segment is a mask over the whole axis ([.., S, N, ..] elements, reduced over N). As
/// the CPU kernel: `initial` joins every segment's reduction (and is the value of an empty
/// one), a mean divides the sum with `initial` by the length; an empty segment without
/// `initial` is the reduction's identity (-inf for max, NaN for mean). 16-bit floats reduce in
/// f32 and round once.
fn segment_reduce(cx: &mut Ctx) -> R<Vec<Val>> {
    let data = cx.t("data")?;
    let how = cx.str("reduce")?;
    let kind = match how.as_str() {
        "sum" | "mean" => ReduceKind::Sum,
        "prod" => ReduceKind::Prod,
        "max" => ReduceKind::Max,
        "min" => ReduceKind::Min,
        other => return err(format!("segment_reduce: unknown reduction {other:?}")),
    };
    let out_dt = cx.dtype(data);
    if !out_dt.is_float() {
        return err(format!("segment_reduce of {}: torch reduces floating tensors only", out_dt.name()));
    }
    let r = cx.rank(data);
    let axis = norm_dim(cx.int("axis")?, r)?;
    let cd = dtypes::compute_dtype(out_dt);
    let x = cx.convert(data, cd)?;
    let (starts, ends) = if let Some(l) = cx.opt_t("lengths")? {
        let l = cx.convert(l, DType::I64)?;
        let last = cx.rank(l).max(1) - 1;
        let ends = scan(cx, l, last, ScanKind::Sum)?;
        (cx.bin(O::Sub, ends, l)?, ends)
    } else if let Some(o) = cx.opt_t("offsets")? {
        let o = cx.convert(o, DType::I64)?;
        if cx.rank(o) == 0 {
            return err("segment_reduce: offsets must have at least one dim");
        }
        let last = cx.rank(o) - 1;
        let n = static_of(&cx.dims(o)[last], "segment_reduce offsets")?;
        if n < 1 {
            return err("segment_reduce: offsets must have at least one element");
        }
        let starts = slice_static(cx, o, last, 0, n - 1, 1)?;
        let ends = slice_static(cx, o, last, 1, n, 1)?;
        (starts, ends)
    } else {
        return err("segment_reduce needs `lengths` or `offsets` (`indices` is not supported, as in torch's CPU kernel)");
    };
    let sd = cx.dims(starts);
    if sd.len() != axis + 1 {
        return err(format!("segment_reduce: segments {} must have the {axis} leading dims of the data and one more", cx.ty(starts)));
    }
    // [.., S, N, ..]: each segment against every position along the axis.
    let dd = cx.dims(x);
    let mut shape: Vec<Dim> = dd[..axis].to_vec();
    shape.push(sd[axis].clone());
    shape.extend_from_slice(&dd[axis..]);
    let lead: Vec<i64> = (0..=axis as i64).collect();
    let pos = cx.iota(DType::I64, &shape, axis + 1)?;
    let sb = cx.b.broadcast_in_dim(starts, &lead, shape.clone())?;
    let eb = cx.b.broadcast_in_dim(ends, &lead, shape.clone())?;
    let ge = cx.cmp(Direction::Ge, pos, sb)?;
    let lt = cx.cmp(Direction::Lt, pos, eb)?;
    let inside = cx.bin(O::And, ge, lt)?;
    let spread: Vec<i64> = (0..r).map(|d| if d < axis { d as i64 } else { d as i64 + 1 }).collect();
    let xb = cx.b.broadcast_in_dim(x, &spread, shape)?;
    let id = cx.full_like(kind.identity(cd), xb)?;
    let masked = cx.select(inside, xb, id)?;
    let mut y = cx.reduce(masked, kind, &[axis + 1], false)?;
    let initial = cx.opt_num("initial")?.map(Num::as_f64);
    let init = match initial {
        Some(v) => {
            let iv = cx.full_like(Scalar::Float(v), y)?;
            let join = match kind {
                ReduceKind::Sum => O::Add,
                ReduceKind::Prod => O::Mul,
                ReduceKind::Max => O::Max,
                _ => O::Min,
            };
            y = cx.bin(join, y, iv)?;
            Some(iv)
        }
        None => None,
    };
    if how == "mean" {
        let len = cx.bin(O::Sub, ends, starts)?;
        let len = cx.convert(len, cd)?;
        let yd = cx.dims(y);
        let lb = cx.b.broadcast_in_dim(len, &lead, yd)?;
        let mean = cx.bin(O::Div, y, lb)?;
        y = match init {
            // An empty segment is `initial` itself.
            Some(iv) => {
                let zero = cx.full_like(Scalar::Float(0.0), lb)?;
                let empty = cx.cmp(Direction::Eq, lb, zero)?;
                cx.select(empty, iv, mean)?
            }
            None => mean,
        };
    }
    one(cx.convert(y, out_dt)?)
}

fn cum(cx: &mut Ctx, kind: ScanKind) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let out = sum_dtype(cx, x)?;
    let r = cx.rank(x);
    let d = norm_dim(cx.int("dim")?, r)?;
    let acc = acc_dtype(out);
    let xv = cx.convert(x, acc)?;
    if r == 0 {
        return one(cx.convert(xv, out)?);
    }
    let s = scan(cx, xv, d, kind)?;
    one(cx.convert(s, out)?)
}
fn cumsum(cx: &mut Ctx) -> R<Vec<Val>> {
    cum(cx, ScanKind::Sum)
}
fn cumprod(cx: &mut Ctx) -> R<Vec<Val>> {
    cum(cx, ScanKind::Prod)
}

/// Largest [.., n, n] table the exact logcumsumexp builds (elements).
const LOGCUMSUMEXP_TABLE: i64 = 1 << 24;

/// logcumsumexp along `dim`. Exactly, as a logsumexp over each prefix: the row [n] becomes a
/// [n, n] table with the elements after the diagonal at -inf, reduced with each prefix's own
/// maximum as the shift. Above `LOGCUMSUMEXP_TABLE` elements it is M + log(cumsum(exp(x - M)))
/// with M the row's maximum, in f64: exact unless a prefix lies entirely more than ~700 below M
/// (then -inf). +inf and NaN propagate from where they appear.
fn logcumsumexp(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let x = cx.float_of(x)?;
    let dt = cx.dtype(x);
    if cx.rank(x) == 0 {
        return one(x);
    }
    let d = norm_dim(cx.int("dim")?, cx.rank(x))?;
    let dims = cx.dims(x);
    let n = dims[d].as_static();
    let total = cx.ty(x).num_elements().zip(n).map(|(e, n)| e.saturating_mul(n));
    if let (Some(n), Some(t)) = (n, total) {
        if t <= LOGCUMSUMEXP_TABLE && n > 0 {
            // [.., n (i), n (j)] with x_j where j <= i, the new dim i right before j = d.
            let r = dims.len();
            let mut tdims = dims.clone();
            tdims.insert(d, Dim::Static(n));
            let bd: Vec<i64> = (0..r as i64).map(|k| if k < d as i64 { k } else { k + 1 }).collect();
            let xt = cx.b.broadcast_in_dim(x, &bd, tdims.clone())?;
            let i = cx.iota(DType::I64, &tdims, d)?;
            let j = cx.iota(DType::I64, &tdims, d + 1)?;
            let keep = cx.cmp(Direction::Le, j, i)?;
            let ninf = cx.full_like(Scalar::Float(f64::NEG_INFINITY), xt)?;
            let y = cx.select(keep, xt, ninf)?;
            let m = cx.reduce(y, ReduceKind::Max, &[d + 1], true)?;
            let mb = cx.broadcast_to(m, &tdims)?;
            let fin = cx.un(O::IsFinite, mb)?;
            let zero = cx.full_like(Scalar::Float(0.0), mb)?;
            let mb = cx.select(fin, mb, zero)?;
            let sh = cx.bin(O::Sub, y, mb)?;
            let e = cx.un(O::Exp, sh)?;
            let s = cx.reduce(e, ReduceKind::Sum, &[d + 1], false)?;
            let l = cx.un(O::Log, s)?;
            let m = cx.reduce(y, ReduceKind::Max, &[d + 1], false)?;
            let fin = cx.un(O::IsFinite, m)?;
            let z = cx.full_like(Scalar::Float(0.0), m)?;
            let m = cx.select(fin, m, z)?;
            return one(cx.bin(O::Add, l, m)?);
        }
    }
    let xd = cx.convert(x, max_float(DType::F64, dt))?;
    let m = cx.reduce(xd, ReduceKind::Max, &[d], true)?;
    let m = cx.broadcast_to(m, &cx.dims(xd))?;
    // A row whose max is ±inf or NaN: shift by 0 instead (exp keeps the infinities).
    let fin = cx.un(O::IsFinite, m)?;
    let zero = cx.full_like(Scalar::Float(0.0), m)?;
    let m = cx.select(fin, m, zero)?;
    let sh = cx.bin(O::Sub, xd, m)?;
    let e = cx.un(O::Exp, sh)?;
    let c = scan(cx, e, d, ScanKind::Sum)?;
    let l = cx.un(O::Log, c)?;
    let r = cx.bin(O::Add, l, m)?;
    one(cx.convert(r, dt)?)
}

/// cummax/cummin: values by scan; indices of the last position holding the running extreme
/// (ATen keeps the latest index on ties: `x >= running` updates the index).
fn cum_ext(cx: &mut Ctx, kind: ScanKind) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let r = cx.rank(x);
    let d = norm_dim(cx.int("dim")?, r)?;
    if r == 0 {
        let z = cx.full(Scalar::Int(0), DType::I64, &[])?;
        return Ok(vec![Val::Tensor(x), Val::Tensor(z)]);
    }
    let v = scan(cx, x, d, kind)?;
    let idx = if cx.used(1) {
        // positions where x equals the running value; the index is the running max of those
        let dims = cx.dims(x);
        let io = cx.iota(DType::I64, &dims, d)?;
        let hit = cx.cmp(Direction::Eq, x, v)?;
        let neg = cx.full(Scalar::Int(-1), DType::I64, &dims)?;
        let cand = cx.select(hit, io, neg)?;
        Val::Tensor(scan(cx, cand, d, ScanKind::Max)?)
    } else {
        Val::Absent
    };
    Ok(vec![Val::Tensor(v), idx])
}
fn cummax(cx: &mut Ctx) -> R<Vec<Val>> {
    cum_ext(cx, ScanKind::Max)
}
fn cummin(cx: &mut Ctx) -> R<Vec<Val>> {
    cum_ext(cx, ScanKind::Min)
}

fn softmax_internal_impl(cx: &mut Ctx, op: Opcode) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let dim = cx.int("dim")?;
    let h2f = cx.bool("half_to_float")?;
    let xd = cx.dtype(x);
    let out = if h2f && matches!(xd, DType::F16 | DType::BF16) { DType::F32 } else { xd };
    one(softmax_v(cx, x, dim, op, out)?)
}
fn softmax_internal(cx: &mut Ctx) -> R<Vec<Val>> {
    softmax_internal_impl(cx, O::Softmax)
}
fn log_softmax_internal(cx: &mut Ctx) -> R<Vec<Val>> {
    softmax_internal_impl(cx, O::LogSoftmax)
}

fn softmax_pub(cx: &mut Ctx, op: Opcode) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let dim = cx.int("dim")?;
    let out = match cx.opt_dtype("dtype")? {
        Some(d) => d,
        None => {
            let d = cx.dtype(x);
            if d.is_float() {
                d
            } else {
                dtypes::DEFAULT_FLOAT
            }
        }
    };
    let x = cx.convert(x, out)?;
    one(softmax_v(cx, x, dim, op, out)?)
}
fn softmax(cx: &mut Ctx) -> R<Vec<Val>> {
    softmax_pub(cx, O::Softmax)
}
fn log_softmax(cx: &mut Ctx) -> R<Vec<Val>> {
    softmax_pub(cx, O::LogSoftmax)
}

/// Softmax that gives 0 for rows that are entirely -inf.
fn safe_softmax(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let dim = cx.int("dim")?;
    let out = cx.opt_dtype("dtype")?.unwrap_or(cx.dtype(x));
    let s = softmax_v(cx, x, dim, O::Softmax, out)?;
    let d = norm_dim(dim, cx.rank(x))?;
    let ninf = cx.full_like(Scalar::Float(f64::NEG_INFINITY), x)?;
    let masked = cx.cmp(Direction::Eq, x, ninf)?;
    let allm = cx.reduce(masked, ReduceKind::And, &[d], true)?;
    let shape = cx.dims(s);
    let allm = cx.broadcast_to(allm, &shape)?;
    let z = cx.full_like(Scalar::Float(0.0), s)?;
    one(cx.select(allm, z, s)?)
}

fn sort(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let r = cx.rank(x);
    let d = cx.int("dim")?;
    let desc = cx.bool("descending")?;
    if r == 0 {
        let z = cx.full(Scalar::Int(0), DType::I64, &[])?;
        return Ok(vec![Val::Tensor(x), Val::Tensor(z)]);
    }
    let (v, i) = sort_v(cx, x, norm_dim(d, r)?, desc)?;
    Ok(vec![Val::Tensor(v), Val::Tensor(i)])
}

fn argsort(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let r = cx.rank(x);
    let d = cx.int("dim")?;
    let desc = cx.bool("descending")?;
    if r == 0 {
        return one(cx.full(Scalar::Int(0), DType::I64, &[])?);
    }
    let (_, i) = sort_v(cx, x, norm_dim(d, r)?, desc)?;
    one(i)
}

fn topk(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let r = cx.rank(x);
    let k = cx.int("k")?;
    let d = norm_dim(cx.int("dim")?, r)?;
    let largest = cx.bool("largest")?;
    if r == 0 {
        let z = cx.full(Scalar::Int(0), DType::I64, &[])?;
        return Ok(vec![Val::Tensor(x), Val::Tensor(z)]);
    }
    // A symbolic dim must be at least k long: checked where its size is known.
    let n = cx.dims(x)[d].as_static().unwrap_or(i64::MAX);
    if k < 0 || k > n {
        return err(format!("topk k={k} out of range for a dim of size {n}"));
    }
    let (v, i) = sort_v(cx, x, d, largest)?;
    let v = slice_static(cx, v, d, 0, k, 1)?;
    let i = slice_static(cx, i, d, 0, k, 1)?;
    Ok(vec![Val::Tensor(v), Val::Tensor(i)])
}

fn count_nonzero(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let dims = reduce_dims(cx, x, "dim")?;
    let b = cx.truthy(x)?;
    let i = cx.convert(b, DType::I64)?;
    one(cx.reduce(i, ReduceKind::Sum, &dims, false)?)
}

/// `histc`: counts of `x` in `bins` equal-width bins over [min, max] (the data's range when
/// min == max), the last bin closed, values outside ignored; the bin of a value is
/// `int((x - min) * bins / (max - min))` as the CPU kernel computes it.
fn histc(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let dt = cx.dtype(x);
    if !dt.is_float() {
        return err("histc needs a floating-point input");
    }
    let bins = cx.int("bins")?;
    if !(1..=MAX_TABLE).contains(&bins) {
        return err(format!("histc bins {bins} out of range"));
    }
    let lo_arg = cx.float("min")?;
    let hi_arg = cx.float("max")?;
    let n = cx.ty(x).num_elements_expr();
    let flat = cx.reshape(x, vec![Dim::from_expr(n)])?;
    let (lo, hi) = if lo_arg == hi_arg {
        let lo = cx.reduce(flat, ReduceKind::Min, &[0], false)?;
        let hi = cx.reduce(flat, ReduceKind::Max, &[0], false)?;
        // equal data range: widen by one on each side
        let same = cx.cmp(Direction::Eq, lo, hi)?;
        let lo1 = cx.bin_c(O::Sub, lo, 1.0)?;
        let hi1 = cx.bin_c(O::Add, hi, 1.0)?;
        (cx.select(same, lo1, lo)?, cx.select(same, hi1, hi)?)
    } else {
        if lo_arg > hi_arg {
            return err("histc: max must be larger than min");
        }
        (cx.scalar(Scalar::Float(lo_arg), dt)?, cx.scalar(Scalar::Float(hi_arg), dt)?)
    };
    let shape = cx.dims(flat);
    let lob = cx.broadcast_to(lo, &shape)?;
    let hib = cx.broadcast_to(hi, &shape)?;
    let ge = cx.cmp(Direction::Ge, flat, lob)?;
    let le = cx.cmp(Direction::Le, flat, hib)?;
    let valid = cx.bin(O::And, ge, le)?;
    let off = cx.bin(O::Sub, flat, lob)?;
    let scaled = cx.bin_c(O::Mul, off, bins as f64)?;
    let width = cx.bin(O::Sub, hib, lob)?;
    let q = cx.bin(O::Div, scaled, width)?;
    let pos = cx.convert(q, DType::I64)?;
    let last = cx.full_like(Scalar::Int(bins - 1), pos)?;
    let pos = cx.bin(O::Min, pos, last)?;
    let zero_i = cx.full_like(Scalar::Int(0), pos)?;
    let pos = cx.select(valid, pos, zero_i)?;
    let ones = cx.full(Scalar::Int(1), dt, &shape)?;
    let zeros = cx.full(Scalar::Int(0), dt, &shape)?;
    let upd = cx.select(valid, ones, zeros)?;
    let init = cx.full(Scalar::Int(0), dt, &[Dim::Static(bins)])?;
    one(scatter_rows(cx, init, pos, upd, ScatterKind::Add)?)
}

pub fn softmax_backward(cx: &mut Ctx) -> R<Vec<Val>> {
    let g = cx.t("grad_output")?;
    let y = cx.t("output")?;
    let dim = norm_dim(cx.int("dim")?, cx.rank(y))?;
    let dt = cx.opt_dtype("input_dtype")?.unwrap_or(cx.dtype(g));
    let gy = cx.bin(O::Mul, g, y)?;
    let s = cx.reduce(gy, ReduceKind::Sum, &[dim], true)?;
    let shape = cx.dims(g);
    let s = cx.broadcast_to(s, &shape)?;
    let d = cx.bin(O::Sub, g, s)?;
    let r = cx.bin(O::Mul, y, d)?;
    one(cx.convert(r, dt)?)
}

pub fn log_softmax_backward(cx: &mut Ctx) -> R<Vec<Val>> {
    let g = cx.t("grad_output")?;
    let y = cx.t("output")?;
    let dim = norm_dim(cx.int("dim")?, cx.rank(y))?;
    let dt = cx.opt_dtype("input_dtype")?.unwrap_or(cx.dtype(g));
    let s = cx.reduce(g, ReduceKind::Sum, &[dim], true)?;
    let shape = cx.dims(g);
    let s = cx.broadcast_to(s, &shape)?;
    let e = cx.un(O::Exp, y)?;
    let es = cx.bin(O::Mul, e, s)?;
    let r = cx.bin(O::Sub, g, es)?;
    one(cx.convert(r, dt)?)
}
