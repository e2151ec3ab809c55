//! Shape and dtype rules of every op.
//!
//! [`check_op`] is the one place that knows what result types an op produces. Given operand
//! types, attributes and (optionally) the result types an op claims, it returns the result
//! types or a message saying which rule is broken. Ops whose results are fully determined by
//! their operands get their types inferred; ops whose result shape is a choice (constant,
//! reshape, broadcast_in_dim, iota, convert, gather's index dtype, ...) need them given, and
//! the rule checks them. The builder and the verifier both call it, so they cannot disagree.
//!
//! One file on purpose: one `match` over every opcode is the whole rule table, and the compiler
//! checks it is exhaustive; split, a new opcode's rule could be missed.

use crate::attr::{Attr, Attrs};
use crate::dims::{GatherDims, ScatterDims};
use crate::dtype::DType;
use crate::enums::FftType;
use crate::opcode::{AttrKind, Opcode};
use crate::payload::{self as p, Payload};
use crate::types::{Dim, TensorType};
use crate::sym::SymExpr;

pub type RuleResult<T> = Result<T, String>;

fn fail<T>(msg: impl Into<String>) -> RuleResult<T> {
    Err(msg.into())
}

/// ATen/NumPy broadcasting of two shapes (aligned from the right; a dim of 1 stretches).
pub fn broadcast_shapes(a: &[Dim], b: &[Dim]) -> RuleResult<Vec<Dim>> {
    let rank = a.len().max(b.len());
    let mut out = Vec::with_capacity(rank);
    for i in 0..rank {
        let da = if i + a.len() >= rank { Some(&a[i + a.len() - rank]) } else { None };
        let db = if i + b.len() >= rank { Some(&b[i + b.len() - rank]) } else { None };
        let d = match (da, db) {
            (Some(x), None) | (None, Some(x)) => x.clone(),
            (Some(x), Some(y)) if x == y => x.clone(),
            (Some(x), Some(y)) if x.is_one() => y.clone(),
            (Some(x), Some(y)) if y.is_one() => x.clone(),
            (Some(x), Some(y)) => return fail(format!("shapes do not broadcast: dim {x} vs {y}")),
            (None, None) => unreachable!(),
        };
        out.push(d);
    }
    Ok(out)
}

/// Resolves a reshape target with at most one `-1` entry against an input of `numel` elements.
pub fn infer_reshape(numel: i64, target: &[i64]) -> RuleResult<Vec<i64>> {
    let mut unknown = None;
    let mut known: i64 = 1;
    for (i, &d) in target.iter().enumerate() {
        if d == -1 {
            if unknown.replace(i).is_some() {
                return fail("reshape target has more than one -1");
            }
        } else if d < 0 {
            return fail(format!("reshape target has negative size {d}"));
        } else {
            known = known.checked_mul(d).ok_or("reshape target overflows")?;
        }
    }
    let mut out = target.to_vec();
    match unknown {
        Some(i) => {
            if known == 0 || numel % known != 0 {
                return fail(format!("cannot reshape {numel} elements to {target:?}"));
            }
            out[i] = numel / known;
        }
        None if known != numel => return fail(format!("cannot reshape {numel} elements to {target:?}")),
        None => {}
    }
    Ok(out)
}

/// Result dims of a dot_general: batch dims, lhs free dims, rhs free dims.
pub fn dot_general_dims(
    lhs: &[Dim],
    rhs: &[Dim],
    lhs_batch: &[i64],
    rhs_batch: &[i64],
    lhs_contract: &[i64],
    rhs_contract: &[i64],
) -> RuleResult<Vec<Dim>> {
    if lhs_batch.len() != rhs_batch.len() {
        return fail("lhs and rhs have different numbers of batching dimensions");
    }
    if lhs_contract.len() != rhs_contract.len() {
        return fail("lhs and rhs have different numbers of contracting dimensions");
    }
    check_dim_list("lhs batching/contracting", lhs.len(), lhs_batch.iter().chain(lhs_contract), true)?;
    check_dim_list("rhs batching/contracting", rhs.len(), rhs_batch.iter().chain(rhs_contract), true)?;
    for (&l, &r) in lhs_batch.iter().zip(rhs_batch) {
        if lhs[l as usize] != rhs[r as usize] {
            return fail(format!("batch dim sizes differ: lhs dim {l} is {}, rhs dim {r} is {}", lhs[l as usize], rhs[r as usize]));
        }
    }
    for (&l, &r) in lhs_contract.iter().zip(rhs_contract) {
        if lhs[l as usize] != rhs[r as usize] {
            return fail(format!(
                "contracting dim sizes differ: lhs dim {l} is {}, rhs dim {r} is {}",
                lhs[l as usize], rhs[r as usize]
            ));
        }
    }
    let mut out: Vec<Dim> = lhs_batch.iter().map(|&d| lhs[d as usize].clone()).collect();
    for (i, d) in lhs.iter().enumerate() {
        if !lhs_batch.contains(&(i as i64)) && !lhs_contract.contains(&(i as i64)) {
            out.push(d.clone());
        }
    }
    for (i, d) in rhs.iter().enumerate() {
        if !rhs_batch.contains(&(i as i64)) && !rhs_contract.contains(&(i as i64)) {
            out.push(d.clone());
        }
    }
    Ok(out)
}

/// Checks that `dims` are distinct (if `unique`) and within `0..rank`.
fn check_dim_list<'a>(what: &str, rank: usize, dims: impl Iterator<Item = &'a i64>, unique: bool) -> RuleResult<()> {
    let mut seen = vec![false; rank];
    for &d in dims {
        if d < 0 || d as usize >= rank {
            return fail(format!("{what}: dimension {d} out of range for rank {rank}"));
        }
        if unique && std::mem::replace(&mut seen[d as usize], true) {
            return fail(format!("{what}: dimension {d} repeated"));
        }
    }
    Ok(())
}

/// The op's typed attributes ([`crate::payload`]); `check_op` has checked them against the op
/// table before, so the error is for a caller that did not.
fn view<'a, P: Payload<'a>>(attrs: &'a Attrs) -> RuleResult<P> {
    P::of(attrs).ok_or_else(|| format!("the attributes of `{}` do not fit the op table", P::OPCODE))
}

fn same_type(what: &str, a: &TensorType, b: &TensorType) -> RuleResult<()> {
    if a == b {
        Ok(())
    } else {
        fail(format!("{what}: {a} vs {b}"))
    }
}

fn need_float(what: &str, t: &TensorType) -> RuleResult<()> {
    if t.dtype.is_float() || t.dtype.is_complex() {
        Ok(())
    } else {
        fail(format!("{what} needs a floating-point operand, got {t}"))
    }
}

fn dim_static(d: &Dim, what: &str) -> RuleResult<i64> {
    d.as_static().ok_or_else(|| format!("{what} must be static, got {d}"))
}

/// Checks an op and returns its result types. `given` is what the op claims (None when
/// building: then the types must be inferable).
pub fn check_op(
    opcode: Opcode,
    operands: &[&TensorType],
    attrs: &Attrs,
    given: Option<&[TensorType]>,
) -> RuleResult<Vec<TensorType>> {
    let info = opcode.info();
    if !info.operands.accepts(operands.len()) {
        return fail(format!("expects {} operands, got {}", info.operands, operands.len()));
    }
    if let Some(g) = given {
        if !info.results.accepts(g.len()) {
            return fail(format!("expects {} results, got {}", info.results, g.len()));
        }
    }
    for spec in info.attrs {
        match attrs.get(spec.name) {
            Some(a) if !spec.kind.matches(a) => {
                return fail(match (spec.kind, a) {
                    (AttrKind::Enum(e), Attr::Str(v)) => format!("{} `{v}` is not one of {}", e.what, e.names.join(", ")),
                    _ => format!("attribute `{}` must be of kind {}, got {}", spec.name, spec.kind.name(), a.kind_name()),
                })
            }
            None if spec.required => return fail(format!("missing required attribute `{}`", spec.name)),
            _ => {}
        }
    }
    for (name, _) in attrs.iter() {
        if !info.attrs.iter().any(|s| s.name == name) && !name.starts_with("tpuc.") && !opcode.has_trait(crate::opcode::traits::OPEN_ATTRS) {
            return fail(format!("unknown attribute `{name}`"));
        }
    }
    let inferred = infer(opcode, operands, attrs, given)?;
    match (inferred, given) {
        (Some(inf), Some(g)) => {
            if inf.as_slice() != g {
                let show = |ts: &[TensorType]| ts.iter().map(|t| t.to_string()).collect::<Vec<_>>().join(", ");
                return fail(format!("result type should be {}, op says {}", show(&inf), show(g)));
            }
            Ok(inf)
        }
        (Some(inf), None) => Ok(inf),
        (None, Some(g)) => Ok(g.to_vec()),
        (None, None) => fail("result types cannot be inferred for this op; give them explicitly"),
    }
}

/// The inferred result types, or `None` if the op's results are a free choice (then `given`
/// has been checked for consistency).
fn infer(
    opcode: Opcode,
    ops: &[&TensorType],
    attrs: &Attrs,
    given: Option<&[TensorType]>,
) -> RuleResult<Option<Vec<TensorType>>> {
    use Opcode::*;
    let one = |t: TensorType| Ok(Some(vec![t]));
    let given1 = given.and_then(|g| g.first());
    match opcode {
        Constant => {
            one(view::<p::Constant>(attrs)?.value.ty.clone())
        }
        Iota => {
            let d = view::<p::Iota>(attrs)?.dimension;
            let Some(t) = given1 else { return Ok(None) };
            if d < 0 || d as usize >= t.rank() {
                return fail(format!("iota dimension {d} out of range for {t}"));
            }
            if !(t.dtype.is_int() || t.dtype.is_float()) {
                return fail(format!("iota needs an integer or float type, got {t}"));
            }
            Ok(None)
        }
        Abs | Neg | Sign => {
            if ops[0].dtype.is_bool() || ops[0].dtype.is_unsigned_int() && opcode == Neg {
                return fail(format!("{opcode} does not apply to {}", ops[0]));
            }
            one(ops[0].clone())
        }
        Exp | Expm1 | Log | Log1p | Sqrt | Rsqrt | Tanh | Logistic | Sin | Cos | Tan | Erf | Floor | Ceil
        | RoundEven | Erfc | ErfInv | Lgamma | Digamma | Acosh | Asinh | Atanh | BesselI1e => {
            need_float(opcode.name(), ops[0])?;
            one(ops[0].clone())
        }
        Not => {
            if !(ops[0].dtype.is_bool() || ops[0].dtype.is_int()) {
                return fail(format!("not needs bool or integer, got {}", ops[0]));
            }
            one(ops[0].clone())
        }
        IsFinite => {
            need_float("is_finite", ops[0])?;
            one(ops[0].with_dtype(DType::Bool))
        }
        Convert => {
            let Some(t) = given1 else { return Ok(None) };
            if t.dims != ops[0].dims {
                return fail(format!("convert keeps the shape: {} to {t}", ops[0]));
            }
            Ok(None)
        }
        Add | Sub | Mul | Div | Rem | Pow | Max | Min | Atan2 => {
            same_type("operand types differ", ops[0], ops[1])?;
            one(ops[0].clone())
        }
        Polygamma | Zeta | NextAfter => {
            same_type("operand types differ", ops[0], ops[1])?;
            need_float(opcode.name(), ops[0])?;
            one(ops[0].clone())
        }
        And | Or | Xor => {
            same_type("operand types differ", ops[0], ops[1])?;
            if !(ops[0].dtype.is_bool() || ops[0].dtype.is_int()) {
                return fail(format!("{opcode} needs bool or integer, got {}", ops[0]));
            }
            one(ops[0].clone())
        }
        ShiftLeft | ShiftRightArithmetic | ShiftRightLogical => {
            same_type("operand types differ", ops[0], ops[1])?;
            if !ops[0].dtype.is_int() {
                return fail(format!("{opcode} needs integers, got {}", ops[0]));
            }
            one(ops[0].clone())
        }
        Compare => {
            same_type("operand types differ", ops[0], ops[1])?;
            one(ops[0].with_dtype(DType::Bool))
        }
        Select => {
            if ops[0].dtype != DType::Bool || ops[0].dims != ops[1].dims {
                return fail(format!("select predicate must be bool of the value shape, got {} for {}", ops[0], ops[1]));
            }
            same_type("select branches differ", ops[1], ops[2])?;
            one(ops[1].clone())
        }
        BroadcastInDim => {
            let bd = view::<p::BroadcastInDim>(attrs)?.broadcast_dimensions;
            let Some(t) = given1 else { return Ok(None) };
            if bd.len() != ops[0].rank() {
                return fail(format!("broadcast_dimensions has {} entries for operand rank {}", bd.len(), ops[0].rank()));
            }
            if t.dtype != ops[0].dtype {
                return fail("broadcast_in_dim changes the dtype");
            }
            check_dim_list("broadcast_dimensions", t.rank(), bd.iter(), true)?;
            for (i, &d) in bd.iter().enumerate() {
                let (od, rd) = (&ops[0].dims[i], &t.dims[d as usize]);
                if od != rd && !od.is_one() {
                    return fail(format!("operand dim {i} ({od}) cannot broadcast to result dim {d} ({rd})"));
                }
            }
            Ok(None)
        }
        Reshape => {
            let Some(t) = given1 else { return Ok(None) };
            if t.dtype != ops[0].dtype {
                return fail("reshape changes the dtype");
            }
            // The count comparison below is modulo 2^64; a static count must not overflow.
            if [t, ops[0]].iter().any(|x| x.is_static() && x.num_elements().is_none()) {
                return fail(format!("reshape element count overflows: {} to {t}", ops[0]));
            }
            // Static counts compare as integers (no expression arithmetic on the hot path).
            let same_count = match (t.num_elements(), ops[0].num_elements()) {
                (Some(a), Some(b)) => a == b,
                _ => t.num_elements_expr() == ops[0].num_elements_expr(),
            };
            if !same_count {
                return fail(format!("reshape changes the element count: {} to {t}", ops[0]));
            }
            Ok(None)
        }
        Transpose => {
            let p = view::<p::Transpose>(attrs)?.permutation;
            if p.len() != ops[0].rank() {
                return fail(format!("permutation {p:?} does not match rank {}", ops[0].rank()));
            }
            check_dim_list("permutation", p.len(), p.iter(), true)?;
            one(ops[0].with_dims(p.iter().map(|&i| ops[0].dims[i as usize].clone())))
        }
        Slice => {
            let p::Slice { start_indices: s, limit_indices: l, strides: st } = view(attrs)?;
            let r = ops[0].rank();
            if s.len() != r || l.len() != r || st.len() != r {
                return fail(format!("slice attributes must have {r} entries"));
            }
            let mut dims = Vec::with_capacity(r);
            for i in 0..r {
                if st[i] <= 0 || s[i] < 0 || l[i] < s[i] {
                    return fail(format!("bad slice on dim {i}: start {}, limit {}, stride {}", s[i], l[i], st[i]));
                }
                match &ops[0].dims[i] {
                    Dim::Static(n) if l[i] > *n => {
                        return fail(format!("slice limit {} exceeds dim {i} of size {n}", l[i]))
                    }
                    // A symbolic dim is taken whole (limit i64::MAX), or cut at a static limit
                    // (`topk`'s first k), which the symbol's smallest size must reach: checked
                    // where sizes are known (bucketing, run time).
                    Dim::Sym(_) if s[i] == 0 && st[i] == 1 && l[i] == i64::MAX => {
                        dims.push(ops[0].dims[i].clone());
                        continue;
                    }
                    Dim::Sym(_) if l[i] == i64::MAX => {
                        return fail(format!("slice of symbolic dim {i} must take it whole or stop at a static limit"))
                    }
                    Dim::Sym(_) | Dim::Static(_) => {}
                }
                let len = l[i] - s[i];
                dims.push(Dim::Static(len / st[i] + i64::from(len % st[i] != 0)));
            }
            one(ops[0].with_dims(dims))
        }
        Concatenate => {
            let d = view::<p::Concatenate>(attrs)?.dimension;
            let r = ops[0].rank();
            if d < 0 || d as usize >= r {
                return fail(format!("concatenate dimension {d} out of range for rank {r}"));
            }
            let d = d as usize;
            let mut size = ops[0].dims[d].clone();
            for (k, t) in ops.iter().enumerate().skip(1) {
                if t.dtype != ops[0].dtype || t.rank() != r {
                    return fail(format!("concatenate operand {k} is {t}, operand 0 is {}", ops[0]));
                }
                for i in 0..r {
                    if i != d && t.dims[i] != ops[0].dims[i] {
                        return fail(format!("concatenate operand {k} differs in dim {i}: {} vs {}", t.dims[i], ops[0].dims[i]));
                    }
                }
                size = size.add(&t.dims[d]);
            }
            let mut dims = ops[0].dims.clone();
            dims[d] = size;
            one(ops[0].with_dims(dims))
        }
        Pad => {
            let p::Pad { edge_padding_low: lo, edge_padding_high: hi, interior_padding: int_ } = view(attrs)?;
            let r = ops[0].rank();
            if lo.len() != r || hi.len() != r || int_.len() != r {
                return fail(format!("pad attributes must have {r} entries"));
            }
            if ops[1].rank() != 0 || ops[1].dtype != ops[0].dtype {
                return fail(format!("padding value must be a scalar of {}, got {}", ops[0].dtype, ops[1]));
            }
            let mut dims = Vec::with_capacity(r);
            for i in 0..r {
                if int_[i] < 0 {
                    return fail("interior padding must be non-negative");
                }
                let d = &ops[0].dims[i];
                let grown = match d {
                    Dim::Static(n) => {
                        // In i128 so that no attribute values can overflow.
                        let w = |x: i64| x as i128;
                        let v = w(*n) + w(lo[i]) + w(hi[i]) + (w(*n) - 1).max(0) * w(int_[i]);
                        let v = i64::try_from(v).map_err(|_| format!("padding of dim {i} overflows"))?;
                        if v < 0 {
                            return fail(format!("padding makes dim {i} negative"));
                        }
                        Dim::Static(v)
                    }
                    Dim::Sym(e) => {
                        if int_[i] != 0 {
                            return fail("interior padding of a symbolic dim");
                        }
                        let both = lo[i].checked_add(hi[i]).ok_or_else(|| format!("padding of dim {i} overflows"))?;
                        Dim::from_expr(e.add(&crate::sym::SymExpr::constant(both)))
                    }
                };
                dims.push(grown);
            }
            one(ops[0].with_dims(dims))
        }
        Reverse => {
            check_dim_list("reverse dimensions", ops[0].rank(), view::<p::Reverse>(attrs)?.dimensions.iter(), true)?;
            one(ops[0].clone())
        }
        BindSize => {
            let d = view::<p::BindSize>(attrs)?.dimension;
            if d < 0 || d as usize >= ops[0].rank() {
                return fail(format!("bind_size dimension {d} out of range for {}", ops[0]));
            }
            if !(ops[1].rank() == 0 && ops[1].dtype == DType::I64) {
                return fail(format!("bind_size takes its size as an i64 scalar, got {}", ops[1]));
            }
            let Some(t) = given1 else { return fail("bind_size needs its result type") };
            let d = d as usize;
            let same_elsewhere = t.dtype == ops[0].dtype
                && t.rank() == ops[0].rank()
                && t.dims.iter().zip(&ops[0].dims).enumerate().all(|(k, (a, b))| k == d || a == b);
            if !same_elsewhere {
                return fail(format!("bind_size result {t} must be the operand's type {} but for dim {d}", ops[0]));
            }
            if !matches!(&t.dims[d], Dim::Sym(e) if e.as_symbol().is_some()) {
                return fail(format!("bind_size result dim {d} must be one symbol, got {}", t.dims[d]));
            }
            Ok(None)
        }
        DotGeneral => {
            let a = view::<p::DotGeneral>(attrs)?;
            let dims = dot_general_dims(
                &ops[0].dims,
                &ops[1].dims,
                a.lhs_batching_dimensions,
                a.rhs_batching_dimensions,
                a.lhs_contracting_dimensions,
                a.rhs_contracting_dimensions,
            )?;
            if ops[0].dtype != ops[1].dtype {
                return fail(format!("dot_general operand dtypes differ: {} vs {}", ops[0].dtype, ops[1].dtype));
            }
            // The result dtype may be wider than the operands' (preferred element type).
            let dtype = given1.map_or(ops[0].dtype, |t| t.dtype);
            one(TensorType::new(dtype, dims))
        }
        Convolution => infer_convolution(ops, attrs, given1).map(|t| Some(vec![t])),
        Reduce => {
            let dims = view::<p::Reduce>(attrs)?.dimensions;
            check_dim_list("reduce dimensions", ops[0].rank(), dims.iter(), true)?;
            one(ops[0].with_dims(
                ops[0].dims.iter().enumerate().filter(|(i, _)| !dims.contains(&(*i as i64))).map(|(_, d)| d.clone()),
            ))
        }
        ArgReduce => {
            let d = view::<p::ArgReduce>(attrs)?.dimension;
            check_dim_list("arg_reduce dimension", ops[0].rank(), [d].iter(), true)?;
            let dtype = given1.map_or(DType::I64, |t| t.dtype);
            if !dtype.is_int() {
                return fail("arg_reduce result must be an integer type");
            }
            one(TensorType::new(
                dtype,
                ops[0].dims.iter().enumerate().filter(|(i, _)| *i as i64 != d).map(|(_, d)| d.clone()),
            ))
        }
        ReduceWindow => infer_reduce_window(ops[0], attrs).map(|t| Some(vec![t])),
        Gather => infer_gather(ops[0], ops[1], attrs).map(|t| Some(vec![t])),
        Scatter => {
            if ops[2].dtype != ops[0].dtype {
                return fail("scatter updates must have the operand's dtype");
            }
            if !ops[1].dtype.is_int() {
                return fail("scatter indices must be integers");
            }
            let sd = ScatterDims::of(attrs).ok_or("scatter's dimension numbers are incomplete")?;
            if sd.update_window_dims.len() + sd.inserted_window_dims.len() + sd.input_batching_dims.len() != ops[0].rank() {
                return fail("update_window_dims + inserted_window_dims + input_batching_dims must cover the operand rank");
            }
            one(ops[0].clone())
        }
        SelectAndScatterAdd => {
            let a = view::<p::SelectAndScatterAdd>(attrs)?;
            let t = infer_reduce_window_shape(ops[0], [a.window_dimensions, a.window_strides, a.padding], None, None)?;
            if t.dims != ops[1].dims || t.dtype != ops[1].dtype {
                return fail(format!("source must have the window output type {t}, got {}", ops[1]));
            }
            one(ops[0].clone())
        }
        Cholesky => {
            need_float("cholesky", ops[0])?;
            let r = ops[0].rank();
            if r < 2 || ops[0].dims[r - 1] != ops[0].dims[r - 2] {
                return fail(format!("cholesky needs square matrices in the trailing dims, got {}", ops[0]));
            }
            one(ops[0].clone())
        }
        TriangularSolve => {
            need_float("triangular_solve", ops[0])?;
            if ops[0].dtype != ops[1].dtype {
                return fail(format!("triangular_solve operand types differ: {} and {}", ops[0], ops[1]));
            }
            let (a, b) = (ops[0], ops[1]);
            let r = a.rank();
            if r < 2 || b.rank() != r || a.dims[r - 1] != a.dims[r - 2] || a.dims[..r - 2] != b.dims[..r - 2] {
                return fail(format!("triangular_solve needs a [..., n, n] and b [..., n, m] or [..., m, n] with equal batch dims, got {a} and {b}"));
            }
            let left = view::<p::TriangularSolve>(attrs)?.left_side;
            let k = if left { r - 2 } else { r - 1 };
            if b.dims[k] != a.dims[r - 1] {
                return fail(format!("triangular_solve: {b} does not match the side of {a}"));
            }
            one(b.clone())
        }
        Qr => {
            need_float("qr", ops[0])?;
            let r = ops[0].rank();
            if r < 2 {
                return fail(format!("qr needs matrices [..., m, n], got {}", ops[0]));
            }
            let (m, n) = (dim_static(&ops[0].dims[r - 2], "qr rows")?, dim_static(&ops[0].dims[r - 1], "qr columns")?);
            let mut tau = ops[0].dims[..r - 2].to_vec();
            tau.push(Dim::Static(m.min(n)));
            Ok(Some(vec![ops[0].clone(), TensorType::new(ops[0].dtype, tau)]))
        }
        HouseholderProduct => {
            need_float("householder_product", ops[0])?;
            let (a, t) = (ops[0], ops[1]);
            let r = a.rank();
            if r < 2 || t.rank() != r - 1 || a.dtype != t.dtype || a.dims[..r - 2] != t.dims[..r - 2] {
                return fail(format!("householder_product needs a [..., m, n] and tau [..., k] of one type, got {a} and {t}"));
            }
            let (m, n, k) = (dim_static(&a.dims[r - 2], "rows")?, dim_static(&a.dims[r - 1], "columns")?, dim_static(&t.dims[r - 2], "tau")?);
            if n > m || k > n {
                return fail(format!("householder_product needs k <= n <= m, got {a} and {t}"));
            }
            one(a.clone())
        }
        Eigh => {
            need_float("eigh", ops[0])?;
            let r = ops[0].rank();
            if r < 2 || ops[0].dims[r - 1] != ops[0].dims[r - 2] {
                return fail(format!("eigh needs square matrices, got {}", ops[0]));
            }
            let vals = TensorType::new(ops[0].dtype, ops[0].dims[..r - 1].iter().cloned());
            Ok(Some(vec![ops[0].clone(), vals]))
        }
        Real | Imag => {
            if !ops[0].dtype.is_complex() {
                return fail(format!("{opcode} needs a complex operand, got {}", ops[0]));
            }
            one(ops[0].with_dtype(ops[0].dtype.complex_part()))
        }
        Complex => {
            same_type("operand types differ", ops[0], ops[1])?;
            let Some(c) = ops[0].dtype.complex_of() else {
                return fail(format!("complex needs f32 or f64 parts, got {}", ops[0]));
            };
            one(ops[0].with_dtype(c))
        }
        AllReduce | CollectiveBroadcast => one(ops[0].clone()),
        AllGather | ReduceScatter | AllToAll => {
            let (d, n) = match opcode {
                AllGather => view::<p::AllGather>(attrs).map(|a| (a.dimension, a.group_size))?,
                ReduceScatter => view::<p::ReduceScatter>(attrs).map(|a| (a.dimension, a.group_size))?,
                _ => view::<p::AllToAll>(attrs).map(|a| (a.dimension, a.group_size))?,
            };
            check_dim_list("collective dimension", ops[0].rank(), [d].iter(), false)?;
            if n < 1 {
                return fail(format!("group_size must be positive, got {n}"));
            }
            let mut dims = ops[0].dims.clone();
            let di = d as usize;
            match opcode {
                AllGather => dims[di] = dims[di].mul(&Dim::Static(n)),
                ReduceScatter => match dims[di].as_static() {
                    Some(k) if k % n == 0 => dims[di] = Dim::Static(k / n),
                    _ => return fail(format!("reduce_scatter: dim {d} of {} does not split into {n} equal blocks", ops[0])),
                },
                _ => {
                    if dims[di].as_static().is_none_or(|k| k % n != 0) {
                        return fail(format!("all_to_all: dim {d} of {} does not split into {n} equal blocks", ops[0]));
                    }
                }
            }
            one(ops[0].with_dims(dims))
        }
        Fft => {
            let p::Fft { fft_type: ty, fft_length: len } = view(attrs)?;
            let r = ops[0].rank();
            if len.is_empty() || len.len() > 3 || len.len() > r || len.iter().any(|&n| n < 1) {
                return fail(format!("fft_length {len:?} must give 1 to 3 positive sizes of trailing dims of {}", ops[0]));
            }
            let mut dims = ops[0].dims.clone();
            let k = len.len();
            let last = *len.last().unwrap_or(&1);
            // The operand's trailing dims, and the result's last one, per type.
            let (want_in_last, out_last, out_dtype) = match ty {
                FftType::Fft | FftType::Ifft => {
                    if !ops[0].dtype.is_complex() {
                        return fail(format!("{ty} needs a complex operand, got {}", ops[0]));
                    }
                    (last, last, ops[0].dtype)
                }
                FftType::Rfft => {
                    let Some(c) = ops[0].dtype.complex_of() else {
                        return fail(format!("rfft needs an f32 or f64 operand, got {}", ops[0]));
                    };
                    (last, last / 2 + 1, c)
                }
                FftType::Irfft => {
                    if !ops[0].dtype.is_complex() {
                        return fail(format!("irfft needs a complex operand, got {}", ops[0]));
                    }
                    (last / 2 + 1, last, ops[0].dtype.complex_part())
                }
            };
            for (i, &n) in len.iter().enumerate() {
                let want = if i + 1 == k { want_in_last } else { n };
                if dims[r - k + i] != Dim::Static(want) {
                    return fail(format!("{ty} with fft_length {len:?} needs trailing dims {want} in {}", ops[0]));
                }
            }
            dims[r - 1] = Dim::Static(out_last);
            one(TensorType::new(out_dtype, dims))
        }
        Sort => {
            let d = view::<p::Sort>(attrs)?.dimension;
            check_dim_list("sort dimension", ops[0].rank(), [d].iter(), true)?;
            Ok(Some(vec![ops[0].clone(), ops[0].with_dtype(DType::I64)]))
        }
        Scan => {
            let d = view::<p::Scan>(attrs)?.dimension;
            check_dim_list("scan dimension", ops[0].rank(), [d].iter(), true)?;
            one(ops[0].clone())
        }
        Softmax | LogSoftmax => {
            need_float(opcode.name(), ops[0])?;
            let d = if opcode == Softmax { view::<p::Softmax>(attrs)?.dimension } else { view::<p::LogSoftmax>(attrs)?.dimension };
            check_dim_list("softmax dimension", ops[0].rank(), [d].iter(), true)?;
            one(ops[0].clone())
        }
        Gelu => {
            need_float("gelu", ops[0])?;
            one(ops[0].clone())
        }
        LayerNorm => {
            need_float("layer_norm", ops[0])?;
            let n = view::<p::LayerNorm>(attrs)?.normalized_rank;
            if n < 1 || n as usize > ops[0].rank() {
                return fail(format!("normalized_rank {n} out of range for {}", ops[0]));
            }
            let keep = ops[0].rank() - n as usize;
            let stats = ops[0].with_dims(
                ops[0].dims.iter().enumerate().map(|(i, d)| if i < keep { d.clone() } else { Dim::Static(1) }),
            );
            Ok(Some(vec![ops[0].clone(), stats.clone(), stats]))
        }
        Attention => {
            let (q, k, v) = (ops[0], ops[1], ops[2]);
            let r = q.rank();
            if r < 2 || k.rank() != r || v.rank() != r {
                return fail(format!("attention needs q, k, v of one rank >= 2: {q}, {k}, {v}"));
            }
            need_float("attention", q)?;
            if k.dtype != q.dtype || v.dtype != q.dtype {
                return fail("attention operands must share a dtype");
            }
            if q.dims[r - 1] != k.dims[r - 1] {
                return fail(format!("q and k head dims differ: {} vs {}", q.dims[r - 1], k.dims[r - 1]));
            }
            if k.dims[r - 2] != v.dims[r - 2] {
                return fail(format!("k and v sequence lengths differ: {} vs {}", k.dims[r - 2], v.dims[r - 2]));
            }
            if let Some(m) = ops.get(3) {
                let want = [q.dims[r - 2].clone(), k.dims[r - 2].clone()];
                broadcast_shapes(&m.dims, &want)
                    .map_err(|e| format!("attention mask {m} does not broadcast to [L, S]: {e}"))?;
                if !(m.dtype.is_bool() || m.dtype == q.dtype) {
                    return fail(format!("attention mask must be bool or {}, got {}", q.dtype, m.dtype));
                }
            }
            let mut dims = q.dims.clone();
            dims[r - 1] = v.dims[r - 1].clone();
            one(q.with_dims(dims))
        }
        Return | Yield => Ok(Some(vec![])),
        // Result types come from the region's `yield`; the verifier checks them against it.
        Composite => {
            if view::<p::Composite>(attrs)?.name.is_empty() {
                return fail("composite name is empty");
            }
            Ok(None)
        }
    }
}

/// Checks that window lists have an entry per dim (`padding`: two) of `rank` dims.
fn window_attrs(rank: usize, lists: &[(&str, &[i64])]) -> RuleResult<()> {
    for &(n, v) in lists {
        let want = if n == "padding" { 2 * rank } else { rank };
        if v.len() != want {
            return fail(format!("`{n}` must have {want} entries, has {}", v.len()));
        }
    }
    Ok(())
}

fn window_out(size: i64, lo: i64, hi: i64, window: i64, stride: i64, base_dil: i64, win_dil: i64) -> RuleResult<i64> {
    if stride <= 0 || window <= 0 || base_dil <= 0 || win_dil <= 0 {
        return fail("window sizes, strides and dilations must be positive");
    }
    if size < 0 {
        return fail(format!("negative size {size}"));
    }
    // In i128 so that no attribute values can overflow.
    let w = |x: i64| x as i128;
    let dilated_in = if size == 0 { 0 } else { (w(size) - 1) * w(base_dil) + 1 };
    let padded = dilated_in + w(lo) + w(hi);
    let dilated_w = (w(window) - 1) * w(win_dil) + 1;
    if padded < dilated_w {
        return Ok(0);
    }
    i64::try_from((padded - dilated_w) / w(stride) + 1).or_else(|_| fail("window output size overflows"))
}

/// [`window_out`] of a dim that may be symbolic: for a size expression `n` (at least 1 wherever
/// the program runs), `floor(((n - 1) * base_dil + 1 + lo + hi - dilated window) / stride) + 1`.
fn window_out_dim(size: &Dim, lo: i64, hi: i64, window: i64, stride: i64, base_dil: i64, win_dil: i64) -> RuleResult<Dim> {
    match size {
        Dim::Static(n) => Ok(Dim::Static(window_out(*n, lo, hi, window, stride, base_dil, win_dil)?)),
        Dim::Sym(e) => {
            if stride <= 0 || window <= 0 || base_dil <= 0 || win_dil <= 0 {
                return fail("window sizes, strides and dilations must be positive");
            }
            let dilated_w = (window - 1).checked_mul(win_dil).and_then(|x| x.checked_add(1));
            let shift = dilated_w.and_then(|dw| (1 - base_dil).checked_add(lo)?.checked_add(hi)?.checked_sub(dw));
            let shift = shift.ok_or_else(|| "window attributes overflow".to_string())?;
            let out = e.mul_const(base_dil).add(&SymExpr::constant(shift)).floordiv(stride).add(&SymExpr::constant(1));
            Ok(Dim::from_expr(out))
        }
    }
}

/// The result of a window over `x` given its `window_dimensions`, `window_strides` and
/// `padding`.
fn infer_reduce_window_shape(
    x: &TensorType,
    [wdims, wstrides, padding]: [&[i64]; 3],
    base: Option<&[i64]>,
    wdil: Option<&[i64]>,
) -> RuleResult<TensorType> {
    let r = x.rank();
    window_attrs(r, &[("window_dimensions", wdims), ("window_strides", wstrides), ("padding", padding)])?;
    let mut dims = Vec::with_capacity(r);
    for i in 0..r {
        let (w, s, lo, hi) = (wdims[i], wstrides[i], padding[2 * i], padding[2 * i + 1]);
        let bd = base.map_or(1, |b| b[i]);
        let wd = wdil.map_or(1, |b| b[i]);
        if w == 1 && s == 1 && lo == 0 && hi == 0 && bd == 1 {
            dims.push(x.dims[i].clone());
            continue;
        }
        dims.push(window_out_dim(&x.dims[i], lo, hi, w, s, bd, wd)?);
    }
    Ok(x.with_dims(dims))
}

fn infer_reduce_window(x: &TensorType, attrs: &Attrs) -> RuleResult<TensorType> {
    let a = view::<p::ReduceWindow>(attrs)?;
    window_attrs(x.rank(), &[("base_dilations", a.base_dilations), ("window_dilations", a.window_dilations)])?;
    let window = [a.window_dimensions, a.window_strides, a.padding];
    infer_reduce_window_shape(x, window, Some(a.base_dilations), Some(a.window_dilations))
}

fn infer_convolution(ops: &[&TensorType], attrs: &Attrs, given: Option<&TensorType>) -> RuleResult<TensorType> {
    let (lhs, rhs) = (ops[0], ops[1]);
    if lhs.rank() < 3 || rhs.rank() != lhs.rank() {
        return fail(format!("convolution needs lhs and rhs of one rank >= 3: {lhs}, {rhs}"));
    }
    if lhs.dtype != rhs.dtype {
        return fail(format!("convolution operand dtypes differ: {} vs {}", lhs.dtype, rhs.dtype));
    }
    let sp = lhs.rank() - 2;
    let a = view::<p::Convolution>(attrs)?;
    let v = [a.window_strides, a.padding, a.lhs_dilation, a.rhs_dilation];
    window_attrs(sp, &[("window_strides", v[0]), ("padding", v[1]), ("lhs_dilation", v[2]), ("rhs_dilation", v[3])])?;
    let (fgc, bgc) = (a.feature_group_count, a.batch_group_count);
    if fgc < 1 || bgc < 1 {
        return fail("group counts must be positive");
    }
    let c = dim_static(&lhs.dims[1], "input feature dim")?;
    let i = dim_static(&rhs.dims[1], "kernel input feature dim")?;
    let o = dim_static(&rhs.dims[0], "kernel output feature dim")?;
    if i.checked_mul(fgc) != Some(c) {
        return fail(format!("input features {c} != kernel input features {i} * feature_group_count {fgc}"));
    }
    if o % fgc != 0 || o % bgc != 0 {
        return fail(format!("output features {o} not divisible by the group counts"));
    }
    let batch = match &lhs.dims[0] {
        Dim::Static(n) => Dim::Static(n / bgc),
        d if bgc == 1 => d.clone(),
        _ => return fail("batch_group_count with a symbolic batch"),
    };
    let mut dims = vec![batch, Dim::Static(o)];
    for s in 0..sp {
        let k = dim_static(&rhs.dims[2 + s], "kernel spatial dim")?;
        dims.push(window_out_dim(&lhs.dims[2 + s], v[1][2 * s], v[1][2 * s + 1], k, v[0][s], v[2][s], v[3][s])?);
    }
    Ok(TensorType::new(given.map_or(lhs.dtype, |t| t.dtype), dims))
}

fn infer_gather(operand: &TensorType, idx: &TensorType, attrs: &Attrs) -> RuleResult<TensorType> {
    let g = GatherDims::of(attrs).ok_or("gather's dimension numbers are incomplete")?;
    let (offset_dims, collapsed, obatch, ibatch, sim, sizes) =
        (&g.offset_dims, &g.collapsed_slice_dims, &g.operand_batching_dims, &g.start_indices_batching_dims, &g.start_index_map, &g.slice_sizes);
    let ivd = g.index_vector_dim;
    if !idx.dtype.is_int() {
        return fail(format!("gather indices must be integers, got {idx}"));
    }
    if sizes.len() != operand.rank() {
        return fail(format!("slice_sizes has {} entries for operand rank {}", sizes.len(), operand.rank()));
    }
    if ivd < 0 || ivd as usize > idx.rank() {
        return fail(format!("index_vector_dim {ivd} out of range"));
    }
    check_dim_list("collapsed_slice_dims", operand.rank(), collapsed.iter().chain(obatch), true)?;
    check_dim_list("start_index_map", operand.rank(), sim.iter(), true)?;
    let ivd = ivd as usize;
    let index_len = if ivd == idx.rank() { 1 } else { dim_static(&idx.dims[ivd], "index vector dim")? };
    if index_len != sim.len() as i64 {
        return fail(format!("index vector has {index_len} entries, start_index_map has {}", sim.len()));
    }
    if obatch.len() != ibatch.len() {
        return fail("operand and index batching dims differ in number");
    }
    for (i, &s) in sizes.iter().enumerate() {
        if let Dim::Static(n) = operand.dims[i] {
            if s < 0 || s > n {
                return fail(format!("slice size {s} out of range for operand dim {i} of size {n}"));
            }
        }
        if (collapsed.contains(&(i as i64)) || obatch.contains(&(i as i64))) && s > 1 {
            return fail(format!("collapsed or batching dim {i} must have slice size <= 1"));
        }
    }
    let batch: Vec<Dim> = idx.dims.iter().enumerate().filter(|(i, _)| *i != ivd).map(|(_, d)| d.clone()).collect();
    let offsets: Vec<Dim> = sizes
        .iter()
        .enumerate()
        .filter(|(i, _)| !collapsed.contains(&(*i as i64)) && !obatch.contains(&(*i as i64)))
        .map(|(i, &s)| if s == 1 || operand.dims[i].is_static() { Dim::Static(s) } else { operand.dims[i].clone() })
        .collect();
    if offsets.len() != offset_dims.len() {
        return fail(format!("offset_dims has {} entries, {} slice dims remain", offset_dims.len(), offsets.len()));
    }
    let rank = batch.len() + offsets.len();
    check_dim_list("offset_dims", rank, offset_dims.iter(), true)?;
    let (mut bi, mut oi) = (0, 0);
    let mut dims = Vec::with_capacity(rank);
    for i in 0..rank {
        if offset_dims.contains(&(i as i64)) {
            dims.push(offsets[oi].clone());
            oi += 1;
        } else {
            dims.push(batch[bi].clone());
            bi += 1;
        }
    }
    Ok(operand.with_dims(dims))
}
