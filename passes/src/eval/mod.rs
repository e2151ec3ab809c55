//! tpuc's one evaluator of IR ops on host values, in two modes.
//!
//! **Exact** ([`eval_op`], [`eval_value`]): ops on static constants, as `fold-constants` folds
//! them and `sdpa-guard` evaluates a mask to prove it causal. Only results XLA would compute bit
//! for bit, within size limits.
//!
//! **Reference** ([`run_reference`]): every op the importer produces (all but `composite` and
//! `select_and_scatter_add`), run over a whole function: the numerical reference the
//! importer's tests compare with PyTorch eager. Floats are computed in f64 and rounded to the
//! result dtype after every op; primitive ops follow the StableHLO spec (gather clamps start
//! indices, scatter drops out-of-bounds updates, convolution and reduce_window handle dilation
//! and negative padding); integer division by zero gives -1 and remainder by zero the dividend,
//! as XLA does; float to integer conversions saturate (NaN gives 0).
//!
//! Both modes share the element semantics below; the reference mode adds what exactness rules
//! out (`reference.rs`: transcendental functions, float sums and contractions, windows,
//! gather/scatter, sort, scan and the high-level ops) and the function runner (`run.rs`).
//!
//! Exactness: data movement (broadcast, reshape, transpose, slice, concatenate, reverse) copies
//! element bytes, so it is exact for every dtype. Arithmetic covers bool, signed and small
//! unsigned integers (wrapping as XLA does) and the float dtypes up to f64; a float result is
//! computed in f64 and rounded once to the result dtype, which for `+ - * /` and `sqrt` of
//! f32/f16/bf16 operands equals the correctly rounded result (f64 has more than twice their
//! precision). What could differ from XLA is not folded: transcendental functions, integer
//! division by zero, float → integer conversions out of range, u64 and complex arithmetic.

mod columns;
mod reference;
mod run;

pub use columns::eval_f64s;
pub use run::run_reference;

use bytes::Bytes;
use tpuc_ir::{payload, Attrs, DType, Module, OpId, Opcode, ReduceKind, Scalar, TensorData, TensorType, ValueId};

/// Folding limit for results computed element by element (splats are always cheap).
pub const ARITH_LIMIT: i64 = 1 << 16;
/// Folding limit for data movement of dense constants. Larger ones (inlined weight matrices)
/// are left to `transpose-into-dot` and XLA: copying them here costs compile time and gains
/// nothing.
pub const MOVE_LIMIT: i64 = 1 << 16;

/// How one evaluation may compute: exactly within limits, or as the reference.
#[derive(Copy, Clone, Debug)]
struct Ctx {
    reference: bool,
    /// Results computed element by element up to this many elements (splats are always cheap).
    arith_limit: i64,
    /// Data movement of dense values up to this many elements.
    move_limit: i64,
}

impl Ctx {
    fn exact(arith_limit: i64) -> Ctx {
        Ctx { reference: false, arith_limit, move_limit: MOVE_LIMIT }
    }

    const REFERENCE: Ctx = Ctx { reference: true, arith_limit: i64::MAX, move_limit: i64::MAX };
}

fn strides(dims: &[i64]) -> Vec<i64> {
    let mut s = vec![1i64; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * dims[i + 1];
    }
    s
}

/// Calls `f(flat_index, multi_index)` for every element of `dims` in row-major order.
fn for_each_index(dims: &[i64], mut f: impl FnMut(usize, &[i64])) {
    let n: i64 = dims.iter().product();
    if n == 0 {
        return;
    }
    let mut idx = vec![0i64; dims.len()];
    for flat in 0..n as usize {
        f(flat, &idx);
        for d in (0..dims.len()).rev() {
            idx[d] += 1;
            if idx[d] < dims[d] {
                break;
            }
            idx[d] = 0;
        }
    }
}

/// Gathers elements: result element `i` is source element `src_index(multi_index(i))`.
fn gather_bytes(src: &TensorData, out_ty: &TensorType, move_limit: i64, src_index: impl Fn(&[i64]) -> i64) -> Option<TensorData> {
    let dims = out_ty.static_dims()?;
    let n = out_ty.num_elements()?;
    // One element (a splat, or a one-element tensor such as a scalar read back from text)
    // stays a splat however far it is broadcast.
    if src.is_splat() || src.ty.num_elements() == Some(1) {
        let sz = src.ty.dtype.size_bytes();
        return TensorData::splat_bytes(out_ty.clone(), src.raw_bytes().slice(..sz)).ok();
    }
    if n > move_limit {
        return None;
    }
    let sz = src.ty.dtype.size_bytes();
    let raw = src.raw_bytes();
    let mut out = Vec::with_capacity(n as usize * sz);
    for_each_index(&dims, |_, idx| {
        let s = src_index(idx) as usize * sz;
        out.extend_from_slice(&raw[s..s + sz]);
    });
    TensorData::new(out_ty.clone(), Bytes::from(out)).ok()
}

/// A number in the interpreter: floats as f64, everything else as i64 (bool 0/1).
#[derive(Copy, Clone, Debug, PartialEq)]
enum N {
    F(f64),
    I(i64),
}

fn supported(d: DType) -> bool {
    !matches!(d, DType::U64 | DType::C64 | DType::C128)
}

/// A scalar as a number (a u64 past i64::MAX wraps, as the dtype's bytes hold it).
fn num(s: Scalar) -> N {
    match s {
        Scalar::Float(f) => N::F(f),
        Scalar::Bool(b) => N::I(i64::from(b)),
        Scalar::Int(i) => N::I(i),
        Scalar::UInt(u) => N::I(u as i64),
    }
}

fn read(d: &TensorData, i: usize) -> N {
    num(d.element(i))
}

/// Rounds / wraps a number to `dtype` (the value the dtype stores).
fn store(dtype: DType, x: N) -> Scalar {
    match (dtype, x) {
        (DType::Bool, N::I(i)) => Scalar::Bool(i != 0),
        (DType::Bool, N::F(f)) => Scalar::Bool(f != 0.0),
        (d, N::F(f)) if d.is_float() => Scalar::Float(f),
        (_, N::F(f)) => Scalar::Float(f),
        (d, N::I(i)) if d.is_float() => Scalar::Float(i as f64),
        (d, N::I(i)) if d.is_unsigned_int() => Scalar::UInt(i as u64),
        (_, N::I(i)) => Scalar::Int(i),
    }
}

/// Builds a tensor from numbers, one per element or one for a splat.
fn build(ty: &TensorType, vals: Vec<N>, splat: bool) -> Option<TensorData> {
    if splat {
        let b = store(ty.dtype, vals[0]).to_bytes(ty.dtype);
        return TensorData::splat_bytes(ty.clone(), Bytes::from(b)).ok();
    }
    let mut out = Vec::with_capacity(vals.len() * ty.dtype.size_bytes());
    for v in vals {
        out.extend_from_slice(&store(ty.dtype, v).to_bytes(ty.dtype));
    }
    TensorData::new(ty.clone(), Bytes::from(out)).ok()
}

/// The value `x` has after being stored in `dtype` (for checks such as exact integer range).
fn rounded(dtype: DType, x: N) -> N {
    let b = store(dtype, x).to_bytes(dtype);
    read_scalar(dtype, &b)
}

fn read_scalar(dtype: DType, b: &[u8]) -> N {
    num(Scalar::from_bytes(dtype, b))
}

fn as_f(x: N) -> f64 {
    match x {
        N::F(f) => f,
        N::I(i) => i as f64,
    }
}

fn as_i(x: N) -> i64 {
    match x {
        N::I(i) => i,
        N::F(f) => f as i64,
    }
}

/// One element of an elementwise op; `None` where folding could differ from XLA.
fn elementwise(opcode: Opcode, dtype: DType, attrs: &Attrs, xs: &[N]) -> Option<N> {
    use Opcode::*;
    let float = dtype.is_float();
    let boolean = dtype == DType::Bool;
    Some(match opcode {
        Neg if float => N::F(-as_f(xs[0])),
        Neg => N::I(as_i(xs[0]).wrapping_neg()),
        Abs if float => N::F(as_f(xs[0]).abs()),
        Abs => N::I(as_i(xs[0]).wrapping_abs()),
        Sqrt if float => N::F(as_f(xs[0]).sqrt()),
        Not if boolean => N::I(i64::from(as_i(xs[0]) == 0)),
        Not => N::I(!as_i(xs[0])),
        Add if boolean => N::I(i64::from(as_i(xs[0]) != 0 || as_i(xs[1]) != 0)),
        Mul if boolean => N::I(i64::from(as_i(xs[0]) != 0 && as_i(xs[1]) != 0)),
        Add if float => N::F(as_f(xs[0]) + as_f(xs[1])),
        Sub if float => N::F(as_f(xs[0]) - as_f(xs[1])),
        Mul if float => N::F(as_f(xs[0]) * as_f(xs[1])),
        Div if float => N::F(as_f(xs[0]) / as_f(xs[1])),
        Add if !boolean => N::I(as_i(xs[0]).wrapping_add(as_i(xs[1]))),
        Sub if !boolean => N::I(as_i(xs[0]).wrapping_sub(as_i(xs[1]))),
        Mul if !boolean => N::I(as_i(xs[0]).wrapping_mul(as_i(xs[1]))),
        Div if !boolean => {
            let (a, b) = (as_i(xs[0]), as_i(xs[1]));
            if b == 0 {
                return None;
            }
            N::I(a.wrapping_div(b))
        }
        Rem if !boolean && !float => {
            let (a, b) = (as_i(xs[0]), as_i(xs[1]));
            if b == 0 {
                return None;
            }
            N::I(a.wrapping_rem(b))
        }
        Max | Min if float => {
            let (a, b) = (as_f(xs[0]), as_f(xs[1]));
            if a.is_nan() || b.is_nan() {
                N::F(f64::NAN)
            } else if a == b {
                // max(-0, +0) is +0, min(-0, +0) is -0.
                let neg = a.is_sign_negative() && b.is_sign_negative();
                let any_neg = a.is_sign_negative() || b.is_sign_negative();
                N::F(if opcode == Max { if neg { a } else { a.abs() } } else if any_neg { -a.abs() } else { a })
            } else if (opcode == Max) == (a > b) {
                N::F(a)
            } else {
                N::F(b)
            }
        }
        Max => N::I(as_i(xs[0]).max(as_i(xs[1]))),
        Min => N::I(as_i(xs[0]).min(as_i(xs[1]))),
        And => N::I(as_i(xs[0]) & as_i(xs[1])),
        Or => N::I(as_i(xs[0]) | as_i(xs[1])),
        Xor => N::I(as_i(xs[0]) ^ as_i(xs[1])),
        ShiftLeft | ShiftRightArithmetic | ShiftRightLogical if dtype.is_int() => {
            // The element's bits and the amount, both read as unsigned of the dtype's width;
            // amounts at or past the width saturate, as XLA does.
            let bits = dtype.size_bytes() as u32 * 8;
            let mask = if bits == 64 { u64::MAX } else { (1u64 << bits) - 1 };
            let (x, s) = (as_i(xs[0]) as u64 & mask, as_i(xs[1]) as u64 & mask);
            let signed = ((x << (64 - bits)) as i64) >> (64 - bits);
            let inside = s < u64::from(bits);
            N::I(match opcode {
                ShiftLeft if inside => (x << s) as i64,
                ShiftRightLogical if inside => (x >> s) as i64,
                ShiftRightArithmetic => signed >> s.min(u64::from(bits) - 1),
                _ => 0,
            })
        }
        Select => {
            if as_i(xs[0]) != 0 {
                xs[1]
            } else {
                xs[2]
            }
        }
        Compare => {
            let dir = payload::Compare::of(attrs)?.direction;
            // Floats compare as IEEE does (NaN is unordered: only `ne` holds).
            let r = dir.holds(match (xs[0], xs[1]) {
                (N::F(a), N::F(b)) => a.partial_cmp(&b),
                (a, b) => Some(as_i(a).cmp(&as_i(b))),
            });
            N::I(i64::from(r))
        }
        _ => return None,
    })
}

/// Converts one element from `from` to `to`, or `None` where the result is implementation
/// defined (NaN or out-of-range floats to integers, integers that f64 cannot hold exactly).
fn convert_elem(from: DType, to: DType, x: N) -> Option<N> {
    if to == DType::Bool {
        return Some(N::I(i64::from(match x {
            N::F(f) => f != 0.0,
            N::I(i) => i != 0,
        })));
    }
    match x {
        N::F(f) if to.is_float() => Some(N::F(f)),
        N::F(f) => {
            let t = f.trunc();
            if !t.is_finite() {
                return None;
            }
            let back = rounded(to, N::I(t as i64));
            (as_f(back) == t).then_some(back)
        }
        N::I(i) if to.is_float() => {
            if i.unsigned_abs() > (1u64 << 53) && from != DType::Bool {
                return None;
            }
            Some(N::F(i as f64))
        }
        N::I(i) => Some(N::I(i)),
    }
}

/// Evaluates an op on constant operands. `None` when the op is not foldable here (or its
/// result would be too large, or could differ from what XLA computes).
pub fn eval_op(m: &Module, op: OpId, args: &[&TensorData]) -> Option<TensorData> {
    eval_op_limit(m, op, args, ARITH_LIMIT)
}

/// [`eval_op`] with another limit on elements computed one by one.
pub fn eval_op_limit(m: &Module, op: OpId, args: &[&TensorData], arith_limit: i64) -> Option<TensorData> {
    let d = &m.ops[op];
    if d.results().len() != 1 || !d.regions().is_empty() {
        return None;
    }
    let rt = &m.values[d.results()[0]].ty;
    eval_one(d.opcode(), &d.attrs, args, rt, Ctx::exact(arith_limit))
}

/// Evaluates an op without regions whose result types are `results` (static), in `cx`'s mode.
fn eval(opcode: Opcode, a: &Attrs, args: &[&TensorData], results: &[TensorType], cx: Ctx) -> Option<Vec<TensorData>> {
    match results {
        [rt] => eval_one(opcode, a, args, rt, cx).map(|t| vec![t]),
        _ if cx.reference => reference::multi(opcode, a, args, results),
        _ => None,
    }
}

/// Evaluates a one-result op.
fn eval_one(opcode: Opcode, a: &Attrs, args: &[&TensorData], rt: &TensorType, cx: Ctx) -> Option<TensorData> {
    use Opcode::*;
    let rt = rt.clone();
    let rdims = rt.static_dims()?;
    let n = rt.num_elements()?;
    let limit = cx.arith_limit;
    match opcode {
        Constant => Some(payload::Constant::of(a)?.value.clone()),
        BroadcastInDim => {
            let bd = payload::BroadcastInDim::of(a)?.broadcast_dimensions;
            let x = args[0];
            let xd = x.ty.static_dims()?;
            let xs = strides(&xd);
            gather_bytes(x, &rt, cx.move_limit, |idx| {
                bd.iter().enumerate().map(|(i, &r)| if xd[i] == 1 { 0 } else { idx[r as usize] * xs[i] }).sum()
            })
        }
        Reshape => args[0].reshaped(rt).ok(),
        Transpose => {
            let p = payload::Transpose::of(a)?.permutation;
            let x = args[0];
            let xs = strides(&x.ty.static_dims()?);
            gather_bytes(x, &rt, cx.move_limit, |idx| p.iter().enumerate().map(|(i, &src)| idx[i] * xs[src as usize]).sum())
        }
        Slice => {
            let payload::Slice { start_indices: s, strides: st, .. } = payload::Slice::of(a)?;
            let x = args[0];
            let xs = strides(&x.ty.static_dims()?);
            gather_bytes(x, &rt, cx.move_limit, |idx| idx.iter().enumerate().map(|(i, &j)| (s[i] + j * st[i]) * xs[i]).sum())
        }
        Reverse => {
            let dims = payload::Reverse::of(a)?.dimensions;
            let x = args[0];
            let xd = x.ty.static_dims()?;
            let xs = strides(&xd);
            gather_bytes(x, &rt, cx.move_limit, |idx| {
                idx.iter().enumerate().map(|(i, &j)| if dims.contains(&(i as i64)) { xd[i] - 1 - j } else { j } * xs[i]).sum()
            })
        }
        Concatenate => {
            if n > cx.move_limit {
                return None;
            }
            let dim = payload::Concatenate::of(a)?.dimension as usize;
            let sz = rt.dtype.size_bytes();
            let mut out = Vec::with_capacity(n as usize * sz);
            let mut dense: Vec<Bytes> = Vec::new();
            for t in args {
                dense.push(t.to_dense_bytes());
            }
            let outer: i64 = rdims[..dim].iter().product();
            for o in 0..outer {
                for (t, bytes) in args.iter().zip(&dense) {
                    let td = t.ty.static_dims()?;
                    let chunk: i64 = td[dim..].iter().product::<i64>() * sz as i64;
                    let start = (o * chunk) as usize;
                    out.extend_from_slice(&bytes[start..start + chunk as usize]);
                }
            }
            TensorData::new(rt, Bytes::from(out)).ok()
        }
        Iota => {
            if n > limit || !supported(rt.dtype) {
                return None;
            }
            let dim = payload::Iota::of(a)?.dimension as usize;
            let mut vals = Vec::with_capacity(n as usize);
            for_each_index(&rdims, |_, idx| {
                vals.push(if rt.dtype.is_float() { N::F(idx[dim] as f64) } else { N::I(idx[dim]) })
            });
            build(&rt, vals, false)
        }
        Convert => {
            let x = args[0];
            let (from, to) = (x.ty.dtype, rt.dtype);
            if !supported(from) || !supported(to) {
                return None;
            }
            let convert = |v: N| match convert_elem(from, to, v) {
                Some(r) => Some(r),
                None if cx.reference => Some(reference::convert(to, v)),
                None => None,
            };
            if x.is_splat() {
                let v = convert(read(x, 0))?;
                return build(&rt, vec![v], true);
            }
            if n > limit {
                return None;
            }
            let vals = (0..n as usize).map(|i| convert(read(x, i))).collect::<Option<Vec<_>>>()?;
            build(&rt, vals, false)
        }
        op if op.is_elementwise() => {
            let dtype = args.first().map_or(rt.dtype, |t| t.ty.dtype);
            // Select's first operand is bool: check the value operands' dtype.
            let value_dtype = if op == Select { args[1].ty.dtype } else { dtype };
            if !supported(value_dtype) || !supported(rt.dtype) {
                return None;
            }
            let all_splat = args.iter().all(|t| t.is_splat());
            if !all_splat && n > limit {
                return None;
            }
            let count = if all_splat { 1 } else { n as usize };
            let mut vals = Vec::with_capacity(count);
            let mut xs = Vec::with_capacity(args.len());
            for i in 0..count {
                xs.clear();
                xs.extend(args.iter().map(|t| read(t, i)));
                let r = match elementwise(op, value_dtype, a, &xs) {
                    Some(r) => r,
                    None if cx.reference => reference::elementwise(op, value_dtype, a, &xs)?,
                    None => return None,
                };
                vals.push(r);
            }
            build(&rt, vals, all_splat)
        }
        Reduce => {
            let x = args[0];
            let payload::Reduce { dimensions: dims, kind } = payload::Reduce::of(a)?;
            let kind = match (kind, x.ty.dtype == DType::Bool) {
                (ReduceKind::Max | ReduceKind::Sum, true) => ReduceKind::Or,
                (ReduceKind::Min | ReduceKind::Prod, true) => ReduceKind::And,
                (k, _) => k,
            };
            let xd = x.ty.static_dims()?;
            let total = x.ty.num_elements()?;
            let dtype = x.ty.dtype;
            if total > limit || !supported(dtype) || !supported(rt.dtype) {
                return None;
            }
            // Float sums depend on the order XLA chooses: only fold exact kinds.
            if dtype.is_float() && matches!(kind, ReduceKind::Sum | ReduceKind::Prod) && !cx.reference {
                return None;
            }
            let init = identity(kind, dtype)?;
            combine(kind, dtype, init, init)?;
            let mut acc = vec![init; n as usize];
            let ostr = strides(&rdims);
            for_each_index(&xd, |flat, idx| {
                let mut o = 0i64;
                let mut k = 0;
                for (i, &j) in idx.iter().enumerate() {
                    if !dims.contains(&(i as i64)) {
                        o += j * ostr[k];
                        k += 1;
                    }
                }
                let cur = acc[o as usize];
                acc[o as usize] = combine(kind, dtype, cur, read(x, flat)).unwrap_or(cur);
            });
            build(&rt, acc, false)
        }
        _ if cx.reference => reference::single(opcode, a, args, &rt),
        _ => None,
    }
}

/// The identity of a reduction `kind` over `dtype`: what an empty reduction gives and what
/// padding holds.
fn identity(kind: ReduceKind, dtype: DType) -> Option<N> {
    let zero = if dtype.is_float() { N::F(0.0) } else { N::I(0) };
    Some(match kind {
        ReduceKind::Sum | ReduceKind::Or => zero,
        ReduceKind::Prod => {
            if dtype.is_float() {
                N::F(1.0)
            } else {
                N::I(1)
            }
        }
        // All bits set (true for bool).
        ReduceKind::And if dtype == DType::Bool => N::I(1),
        ReduceKind::And => N::I(-1),
        // Finite for dtypes without infinities (f8e4m3fn), where -inf would store as NaN.
        ReduceKind::Max => num(dtype.lowest()),
        ReduceKind::Min => num(dtype.highest()),
    })
}

/// Combines an accumulator with a value by a reduction `kind`; `None` for a kind the dtype
/// has no meaning for (`and`/`or` on floats).
fn combine(kind: ReduceKind, dtype: DType, acc: N, v: N) -> Option<N> {
    use Opcode::*;
    let float = dtype.is_float();
    let none = Attrs::new();
    Some(match kind {
        ReduceKind::Sum if float => N::F(as_f(acc) + as_f(v)),
        ReduceKind::Sum => N::I(as_i(acc).wrapping_add(as_i(v))),
        ReduceKind::Prod if float => N::F(as_f(acc) * as_f(v)),
        ReduceKind::Prod => N::I(as_i(acc).wrapping_mul(as_i(v))),
        ReduceKind::Max => elementwise(Max, dtype, &none, &[acc, v])?,
        ReduceKind::Min => elementwise(Min, dtype, &none, &[acc, v])?,
        ReduceKind::And if !float => elementwise(And, dtype, &none, &[acc, v])?,
        ReduceKind::Or if !float => elementwise(Or, dtype, &none, &[acc, v])?,
        ReduceKind::And | ReduceKind::Or => return None,
    })
}

/// Evaluates `v` if it depends only on constants and iotas (no function arguments), with
/// intermediate results up to `limit` elements.
pub fn eval_value(m: &Module, v: ValueId, limit: i64) -> Option<TensorData> {
    let mut memo = std::collections::HashMap::new();
    eval_rec(m, v, &mut memo, 0, limit)
}

fn eval_rec(
    m: &Module,
    v: ValueId,
    memo: &mut std::collections::HashMap<ValueId, Option<TensorData>>,
    depth: usize,
    limit: i64,
) -> Option<TensorData> {
    if let Some(r) = memo.get(&v) {
        return r.clone();
    }
    if depth > 256 {
        return None;
    }
    let op = crate::util::def_op(m, v)?;
    let d = &m.ops[op];
    if d.results().len() != 1 || !d.opcode().is_pure() {
        return None;
    }
    let mut args = Vec::with_capacity(d.operands().len());
    for &x in d.operands() {
        args.push(eval_rec(m, x, memo, depth + 1, limit)?);
    }
    let refs: Vec<&TensorData> = args.iter().collect();
    let r = eval_op_limit(m, op, &refs, limit);
    memo.insert(v, r.clone());
    r
}

/// Every element as f64 (bools 0/1).
pub fn to_f64s(t: &TensorData) -> Vec<f64> {
    let n = t.ty.num_elements().unwrap_or(0) as usize;
    (0..n).map(|i| as_f(read(t, i))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn module(body: &str) -> Module {
        let text = format!("module {{\n  func @main() -> (tensor<3xf32>) {{\n{body}\n  }}\n}}\n");
        tpuc_ir::parse_module(&text).unwrap_or_else(|e| panic!("{e}\n{text}"))
    }

    /// The op defining `main`'s first result, and its operands' constant values.
    fn last_op(m: &Module) -> (OpId, Vec<TensorData>) {
        let f = m.main_func().unwrap();
        let ret = m.terminator(m.entry_block(f)).unwrap();
        let op = crate::util::def_op(m, m.ops[ret].operands()[0]).unwrap();
        let args = m.ops[op].operands().iter().map(|&v| eval_value(m, v, ARITH_LIMIT).unwrap()).collect();
        (op, args)
    }

    #[test]
    fn exact_mode_leaves_what_could_differ_from_xla() {
        let m = module(
            "    %0 = constant {value = dense<\"0x0000803F0000004000004040\"> : tensor<3xf32>} : tensor<3xf32>\n    \
             %1 = exp %0 : tensor<3xf32>\n    return %1",
        );
        let (op, args) = last_op(&m);
        let refs: Vec<&TensorData> = args.iter().collect();
        assert!(eval_op(&m, op, &refs).is_none(), "exp is not folded");
        let d = &m.ops[op];
        let r = eval(d.opcode(), &d.attrs, &refs, &[m.values[d.results()[0]].ty.clone()], Ctx::REFERENCE).unwrap();
        assert_eq!(to_f64s(&r[0]), [1f64, 2.0, 3.0].map(|x| x.exp() as f32 as f64));
    }

    #[test]
    fn integer_reductions_start_from_the_dtype_identity_and_combine_bitwise() {
        let ty = |dims: &[i64]| TensorType::from_static(DType::I8, dims);
        let x = TensorData::new(ty(&[2, 2]), vec![0b0110u8, 0b0011, 0x80, 0x7f].into()).unwrap();
        let empty = TensorData::new(ty(&[2, 0]), Vec::new().into()).unwrap();
        let reduce = |x: &TensorData, kind: ReduceKind| {
            let a = payload::Reduce { dimensions: &[1], kind }.attrs();
            to_f64s(&eval_one(Opcode::Reduce, &a, &[x], &ty(&[2]), Ctx::exact(ARITH_LIMIT)).unwrap())
        };
        assert_eq!(reduce(&x, ReduceKind::And), [2.0, 0.0]);
        assert_eq!(reduce(&x, ReduceKind::Or), [7.0, -1.0]);
        assert_eq!(reduce(&x, ReduceKind::Max), [6.0, 127.0]);
        assert_eq!(reduce(&empty, ReduceKind::Max), [-128.0, -128.0]);
        assert_eq!(reduce(&empty, ReduceKind::Min), [127.0, 127.0]);
        assert_eq!(reduce(&empty, ReduceKind::And), [-1.0, -1.0]);
    }

    #[test]
    fn max_and_min_of_nothing_are_finite_in_f8e4m3fn() {
        // f8e4m3fn has no infinity (-inf would store as NaN): its extremes are ±448. f8e5m2
        // has infinities, so they stay the identities there.
        for (dt, high) in [(DType::F8E4M3FN, 448.0), (DType::F8E5M2, f64::INFINITY)] {
            let empty = TensorData::new(TensorType::from_static(dt, &[2, 0]), Vec::new().into()).unwrap();
            for (kind, want) in [(ReduceKind::Max, -high), (ReduceKind::Min, high)] {
                let a = payload::Reduce { dimensions: &[1], kind }.attrs();
                for cx in [Ctx::exact(ARITH_LIMIT), Ctx::REFERENCE] {
                    let r = eval_one(Opcode::Reduce, &a, &[&empty], &TensorType::from_static(dt, &[2]), cx).unwrap();
                    assert_eq!(to_f64s(&r), [want, want], "{kind} in {dt}");
                }
            }
        }
    }
}
