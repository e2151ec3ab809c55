//! Matrix products: mm, bmm, addmm, matmul (with batch broadcasting), linear, baddbmm, mv,
//! dot, outer, einsum and the grouped GEMM of mixture-of-experts layers, all as `dot_general`.

use crate::ops::build::*;
use Opcode as O;
use tpuc_ir::ReduceKind;

pub const OPS: &[(&str, OpFn)] = &[
    ("mm.default", mm),
    ("bmm.default", bmm),
    ("matmul.default", matmul),
    ("addmm.default", addmm),
    ("addmv.default", addmv),
    ("baddbmm.default", baddbmm),
    ("addbmm.default", addbmm),
    ("mv.default", mv),
    ("dot.default", dot),
    ("vdot.default", dot),
    ("inner.default", inner),
    ("outer.default", outer),
    ("ger.default", outer),
    ("linear.default", linear),
    ("einsum.default", einsum),
    ("_grouped_mm.default", grouped_mm),
    // transformers' opaque stand-in for `_grouped_mm` (every MoE layer of transformers 5 on a
    // dtype `torch._grouped_mm` does not take), forward and backward.
    ("torch.ops.transformers.grouped_mm_fallback.default", grouped_mm_fallback),
    ("torch.ops.transformers.grouped_mm_fallback_backward.default", grouped_mm_fallback_backward),
];

fn need_rank(cx: &Ctx, v: ValueId, r: usize, op: &str) -> R<()> {
    if cx.rank(v) != r {
        return err(format!("{op} expects a rank-{r} tensor, got {}", cx.ty(v)));
    }
    Ok(())
}

fn mm(cx: &mut Ctx) -> R<Vec<Val>> {
    let a = cx.t("self")?;
    let b = cx.t("mat2")?;
    need_rank(cx, a, 2, "mm")?;
    need_rank(cx, b, 2, "mm")?;
    let (a, b) = same_dtype(cx, a, b)?;
    one(dg(cx, a, b, &[], &[], &[1], &[0])?)
}

fn bmm(cx: &mut Ctx) -> R<Vec<Val>> {
    let a = cx.t("self")?;
    let b = cx.t("mat2")?;
    need_rank(cx, a, 3, "bmm")?;
    need_rank(cx, b, 3, "bmm")?;
    let (a, b) = same_dtype(cx, a, b)?;
    one(dg(cx, a, b, &[0], &[0], &[2], &[1])?)
}

fn matmul(cx: &mut Ctx) -> R<Vec<Val>> {
    let a = cx.t("self")?;
    let b = cx.t("other")?;
    one(matmul_v(cx, a, b)?)
}

/// `beta * input + alpha * product`, with beta = 0 ignoring `input` (NaNs included).
fn add_scaled(cx: &mut Ctx, input: ValueId, prod: ValueId) -> R<ValueId> {
    let beta = cx.opt_num("beta")?.unwrap_or(Num::Int(1));
    let alpha = cx.opt_num("alpha")?.unwrap_or(Num::Int(1));
    let mut p = prod;
    if !alpha.is(1.0) {
        let k = cx.full_like(alpha.scalar(), p)?;
        p = cx.bin(O::Mul, p, k)?;
    }
    if beta.is(0.0) {
        return Ok(p);
    }
    let shape = cx.dims(p);
    let dt = cx.dtype(p);
    let i = cx.convert(input, dt)?;
    let mut i = cx.broadcast_to(i, &shape)?;
    if !beta.is(1.0) {
        let k = cx.full_like(beta.scalar(), i)?;
        i = cx.bin(O::Mul, i, k)?;
    }
    cx.bin(O::Add, i, p)
}

fn addmm(cx: &mut Ctx) -> R<Vec<Val>> {
    let s = cx.t("self")?;
    let a = cx.t("mat1")?;
    let b = cx.t("mat2")?;
    need_rank(cx, a, 2, "addmm")?;
    need_rank(cx, b, 2, "addmm")?;
    let (a, b) = same_dtype(cx, a, b)?;
    let p = dg(cx, a, b, &[], &[], &[1], &[0])?;
    one(add_scaled(cx, s, p)?)
}

fn addmv(cx: &mut Ctx) -> R<Vec<Val>> {
    let s = cx.t("self")?;
    let a = cx.t("mat")?;
    let v = cx.t("vec")?;
    need_rank(cx, a, 2, "addmv")?;
    need_rank(cx, v, 1, "addmv")?;
    let (a, v) = same_dtype(cx, a, v)?;
    let p = dg(cx, a, v, &[], &[], &[1], &[0])?;
    one(add_scaled(cx, s, p)?)
}

fn baddbmm(cx: &mut Ctx) -> R<Vec<Val>> {
    let s = cx.t("self")?;
    let a = cx.t("batch1")?;
    let b = cx.t("batch2")?;
    need_rank(cx, a, 3, "baddbmm")?;
    need_rank(cx, b, 3, "baddbmm")?;
    let (a, b) = same_dtype(cx, a, b)?;
    let p = dg(cx, a, b, &[0], &[0], &[2], &[1])?;
    one(add_scaled(cx, s, p)?)
}

fn addbmm(cx: &mut Ctx) -> R<Vec<Val>> {
    let s = cx.t("self")?;
    let a = cx.t("batch1")?;
    let b = cx.t("batch2")?;
    need_rank(cx, a, 3, "addbmm")?;
    need_rank(cx, b, 3, "addbmm")?;
    let (a, b) = same_dtype(cx, a, b)?;
    // sum over the batch and the inner dim at once: contract (0, 2) with (0, 1)
    let p = dg(cx, a, b, &[], &[], &[0, 2], &[0, 1])?;
    one(add_scaled(cx, s, p)?)
}

fn mv(cx: &mut Ctx) -> R<Vec<Val>> {
    let a = cx.t("self")?;
    let v = cx.t("vec")?;
    need_rank(cx, a, 2, "mv")?;
    need_rank(cx, v, 1, "mv")?;
    let (a, v) = same_dtype(cx, a, v)?;
    one(dg(cx, a, v, &[], &[], &[1], &[0])?)
}

fn dot(cx: &mut Ctx) -> R<Vec<Val>> {
    let a = cx.t("self")?;
    let b = cx.opt_t("tensor")?.map_or_else(|| cx.t("other"), Ok)?;
    need_rank(cx, a, 1, "dot")?;
    need_rank(cx, b, 1, "dot")?;
    let (a, b) = same_dtype(cx, a, b)?;
    one(dg(cx, a, b, &[], &[], &[0], &[0])?)
}

fn inner(cx: &mut Ctx) -> R<Vec<Val>> {
    let a = cx.t("self")?;
    let b = cx.t("other")?;
    let (a, b) = same_dtype(cx, a, b)?;
    let (ra, rb) = (cx.rank(a), cx.rank(b));
    if ra == 0 || rb == 0 {
        let (x, y) = cx.pair(&Operand::T(a), &Operand::T(b), cx.dtype(a))?;
        return one(cx.bin(O::Mul, x, y)?);
    }
    one(dg(cx, a, b, &[], &[], &[ra as i64 - 1], &[rb as i64 - 1])?)
}

fn outer(cx: &mut Ctx) -> R<Vec<Val>> {
    let a = cx.t("self")?;
    let b = cx.opt_t("vec2")?.map_or_else(|| cx.t("other"), Ok)?;
    need_rank(cx, a, 1, "outer")?;
    need_rank(cx, b, 1, "outer")?;
    let dt = cx.result_type(&[Operand::T(a), Operand::T(b)])?;
    let shape = vec![cx.dims(a)[0].clone(), cx.dims(b)[0].clone()];
    let a = cx.convert(a, dt)?;
    let b = cx.convert(b, dt)?;
    let x = cx.b.broadcast_in_dim(a, &[0], shape.clone())?;
    let y = cx.b.broadcast_in_dim(b, &[1], shape)?;
    one(cx.bin(O::Mul, x, y)?)
}

/// `x @ w.T + b`.
pub fn linear_v(cx: &mut Ctx, x: ValueId, w: ValueId, bias: Option<ValueId>) -> R<ValueId> {
    let (x, w) = same_dtype(cx, x, w)?;
    let rx = cx.rank(x);
    let y = match cx.rank(w) {
        2 if rx >= 1 => dg(cx, x, w, &[], &[], &[rx as i64 - 1], &[1])?,
        1 if rx >= 1 => dg(cx, x, w, &[], &[], &[rx as i64 - 1], &[0])?,
        _ => return err(format!("linear of {} with weight {}", cx.ty(x), cx.ty(w))),
    };
    match bias {
        None => Ok(y),
        Some(b) => {
            let shape = cx.dims(y);
            let dt = cx.dtype(y);
            let b = cx.convert(b, dt)?;
            let b = cx.broadcast_to(b, &shape)?;
            cx.bin(O::Add, y, b)
        }
    }
}

fn linear(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("input")?;
    let w = cx.t("weight")?;
    let b = cx.opt_t("bias")?;
    one(linear_v(cx, x, w, b)?)
}

// ------------------------------------------------------------------ einsum

/// A tensor with one label per dim.
struct Labeled {
    v: ValueId,
    labels: Vec<char>,
}

fn parse_einsum(eq: &str, ranks: &[usize]) -> R<(Vec<Vec<char>>, Vec<char>)> {
    let eq: String = eq.chars().filter(|c| !c.is_whitespace()).collect();
    let (lhs, out) = match eq.split_once("->") {
        Some((l, o)) => (l.to_string(), Some(o.to_string())),
        None => (eq.clone(), None),
    };
    let terms: Vec<&str> = lhs.split(',').collect();
    if terms.len() != ranks.len() {
        return err(format!("einsum `{eq}` has {} operands, got {}", terms.len(), ranks.len()));
    }
    // Ellipsis dims get labels from a private range.
    let mut max_ell = 0usize;
    let mut parsed = Vec::new();
    for (t, &r) in terms.iter().zip(ranks) {
        let explicit = t.replace("...", "").chars().count();
        let has_ell = t.contains("...");
        let ell = if has_ell { r.checked_sub(explicit).ok_or("einsum: too many labels")? } else { 0 };
        if !has_ell && explicit != r {
            return err(format!("einsum term `{t}` does not match rank {r}"));
        }
        max_ell = max_ell.max(ell);
        let mut labels = Vec::new();
        let mut rest = t.as_bytes();
        while !rest.is_empty() {
            if rest.starts_with(b"...") {
                for k in 0..ell {
                    labels.push(char::from_u32(0xE000 + (max_ell.max(ell) - ell + k) as u32).unwrap_or('?'));
                }
                rest = &rest[3..];
            } else {
                let c = rest[0] as char;
                if !c.is_ascii_alphabetic() {
                    return err(format!("einsum: bad label `{c}`"));
                }
                labels.push(c);
                rest = &rest[1..];
            }
        }
        parsed.push(labels);
    }
    // Re-align ellipsis labels to the right (broadcast semantics).
    for (labels, t) in parsed.iter_mut().zip(&terms) {
        if t.contains("...") {
            let ell: Vec<usize> = labels.iter().enumerate().filter(|(_, c)| (**c as u32) >= 0xE000).map(|(i, _)| i).collect();
            let n = ell.len();
            for (k, i) in ell.into_iter().enumerate() {
                labels[i] = char::from_u32(0xE000 + (max_ell - n + k) as u32).unwrap_or('?');
            }
        }
    }
    let ell_labels: Vec<char> = (0..max_ell).filter_map(|k| char::from_u32(0xE000 + k as u32)).collect();
    let out = match out {
        Some(o) => {
            let mut labels = Vec::new();
            let mut rest = o.as_str();
            while !rest.is_empty() {
                if let Some(r) = rest.strip_prefix("...") {
                    labels.extend(&ell_labels);
                    rest = r;
                } else {
                    let c = rest.chars().next().unwrap_or(' ');
                    labels.push(c);
                    rest = &rest[c.len_utf8()..];
                }
            }
            labels
        }
        None => {
            let mut counts: std::collections::BTreeMap<char, usize> = Default::default();
            for l in parsed.iter().flatten() {
                if (*l as u32) < 0xE000 {
                    *counts.entry(*l).or_default() += 1;
                }
            }
            let mut labels = ell_labels.clone();
            labels.extend(counts.into_iter().filter(|(_, n)| *n == 1).map(|(c, _)| c));
            labels
        }
    };
    Ok((parsed, out))
}

/// Sums away labels of `t` that are not in `keep`.
fn sum_out(cx: &mut Ctx, t: Labeled, keep: &[char]) -> R<Labeled> {
    let dims: Vec<usize> = t.labels.iter().enumerate().filter(|(_, l)| !keep.contains(l)).map(|(i, _)| i).collect();
    if dims.is_empty() {
        return Ok(t);
    }
    let v = cx.reduce(t.v, ReduceKind::Sum, &dims, false)?;
    let labels = t.labels.iter().filter(|l| keep.contains(l)).copied().collect();
    Ok(Labeled { v, labels })
}

fn contract(cx: &mut Ctx, a: Labeled, b: Labeled, keep: &[char]) -> R<Labeled> {
    // broadcast size-1 dims of a shared label to the other's size
    let batch: Vec<char> = a.labels.iter().filter(|l| b.labels.contains(l) && keep.contains(l)).copied().collect();
    let contr: Vec<char> = a.labels.iter().filter(|l| b.labels.contains(l) && !keep.contains(l)).copied().collect();
    let pos = |t: &Labeled, l: &char| t.labels.iter().position(|x| x == l).map_or(0, |p| p as i64);
    let (mut av, mut bv) = (a.v, b.v);
    for l in batch.iter().chain(&contr) {
        let (pa, pb) = (pos(&a, l) as usize, pos(&b, l) as usize);
        let (da, db) = (cx.dims(av)[pa].clone(), cx.dims(bv)[pb].clone());
        if da != db {
            if da.is_one() {
                let mut s = cx.dims(av);
                s[pa] = db.clone();
                av = cx.broadcast_to(av, &s)?;
            } else if db.is_one() {
                let mut s = cx.dims(bv);
                s[pb] = da.clone();
                bv = cx.broadcast_to(bv, &s)?;
            } else {
                return err(format!("einsum: label `{l}` has sizes {da} and {db}"));
            }
        }
    }
    let lb: Vec<i64> = batch.iter().map(|l| pos(&a, l)).collect();
    let rb: Vec<i64> = batch.iter().map(|l| pos(&b, l)).collect();
    let lc: Vec<i64> = contr.iter().map(|l| pos(&a, l)).collect();
    let rc: Vec<i64> = contr.iter().map(|l| pos(&b, l)).collect();
    let v = dg(cx, av, bv, &lb, &rb, &lc, &rc)?;
    let mut labels = batch.clone();
    labels.extend(a.labels.iter().filter(|l| !b.labels.contains(l)));
    labels.extend(b.labels.iter().filter(|l| !a.labels.contains(l)));
    Ok(Labeled { v, labels })
}

fn einsum(cx: &mut Ctx) -> R<Vec<Val>> {
    let eq = cx.str("equation")?;
    let xs = cx.tensors("tensors")?;
    if xs.is_empty() {
        return err("einsum without operands");
    }
    let ranks: Vec<usize> = xs.iter().map(|&x| cx.rank(x)).collect();
    let (terms, out) = parse_einsum(&eq, &ranks)?;
    for t in &terms {
        let mut seen = std::collections::HashSet::new();
        if !t.iter().all(|c| seen.insert(*c)) {
            return err(format!("einsum `{eq}`: repeated labels in one operand (diagonals) are not supported"));
        }
    }
    let ops: Vec<Operand> = xs.iter().map(|&x| Operand::T(x)).collect();
    let dt = cx.result_type(&ops)?;
    let mut items: Vec<Labeled> = Vec::new();
    let all_terms = terms.clone();
    for (&x, labels) in xs.iter().zip(terms) {
        let v = cx.convert(x, dt)?;
        items.push(Labeled { v, labels });
    }
    let mut acc: Option<Labeled> = None;
    for (i, t) in items.into_iter().enumerate() {
        // labels needed later: the output and operands not yet folded in
        let later: Vec<char> = {
            let mut l = out.clone();
            l.extend(all_terms.iter().skip(i + 1).flatten());
            l
        };
        acc = Some(match acc {
            None => t,
            Some(a) => {
                let mut keep = later.clone();
                keep.retain(|c| a.labels.contains(c) || t.labels.contains(c));
                let a = sum_out(cx, a, &[keep.clone(), t.labels.clone()].concat())?;
                let t = sum_out(cx, t, &[keep.clone(), a.labels.clone()].concat())?;
                contract(cx, a, t, &keep)?
            }
        });
    }
    let Some(acc) = acc else { return err("einsum without operands") };
    let acc = sum_out(cx, acc, &out)?;
    if acc.labels.len() != out.len() {
        return err(format!("einsum `{eq}`: output labels not found in the inputs"));
    }
    let perm: Vec<i64> = out.iter().map(|l| acc.labels.iter().position(|x| x == l).map_or(0, |p| p as i64)).collect();
    one(cx.transpose(acc.v, &perm)?)
}

/// Rows of `a` [M, K] in groups by `offs` [G], each times its group's `b[g]` [K, N] → [M, N];
/// rows past the last offset are zero.
fn grouped_rows(cx: &mut Ctx, a: ValueId, b: ValueId, offs: ValueId, what: &str) -> R<ValueId> {
    let (sa, sb) = (cx.dims(a), cx.dims(b));
    let g = cx.dims(offs)[0].clone();
    if cx.rank(a) != 2 || cx.rank(b) != 3 || sb[0] != g || sa[1] != sb[1] {
        return err(format!("{what}: {} and {} with {} groups do not multiply", cx.ty(a), cx.ty(b), g));
    }
    let p = dg(cx, a, b, &[], &[], &[1], &[1])?; // [M, G, N]
    let mask = group_mask(cx, offs, &sa[0])?; // [G, M]
    pick_group(cx, p, mask, &[1, 0], 1)
}

/// The operands of transformers' grouped GEMM ops: input [S, K] and weight [G, K, N] of one
/// floating dtype, offs [G] cumulative row counts.
fn fallback_operands(cx: &mut Ctx, what: &str) -> R<(ValueId, ValueId, ValueId)> {
    let (a, b, offs) = (cx.t("input")?, cx.t("weight")?, cx.t("offs")?);
    if cx.dtype(a) != cx.dtype(b) || !cx.dtype(a).is_float() {
        return err(format!("{what} needs two floating-point operands of one dtype, got {} and {}", cx.ty(a), cx.ty(b)));
    }
    if cx.rank(offs) != 1 || !cx.dtype(offs).is_int() {
        return err(format!("{what}: offs must be a 1-D integer tensor, got {}", cx.ty(offs)));
    }
    Ok((a, b, offs))
}

/// `transformers::grouped_mm_fallback(input, weight, offs)`: `_grouped_mm` of 2-D tokens and
/// 3-D expert weights; rows past the last offset are zero, as its loop leaves them.
fn grouped_mm_fallback(cx: &mut Ctx) -> R<Vec<Val>> {
    let (a, b, offs) = fallback_operands(cx, "grouped_mm_fallback")?;
    one(grouped_rows(cx, a, b, offs, "grouped_mm_fallback")?)
}

/// `transformers::grouped_mm_fallback_backward(input, weight, offs, grad_output)` →
/// (grad_input, grad_weight): each row's gradient through its own group's weight, and each
/// group's weight gradient from its rows only (zero for an empty group).
fn grouped_mm_fallback_backward(cx: &mut Ctx) -> R<Vec<Val>> {
    let what = "grouped_mm_fallback_backward";
    let (a, b, offs) = fallback_operands(cx, what)?;
    let dy = cx.t("grad_output")?;
    let (sa, sb) = (cx.dims(a), cx.dims(b));
    let g = cx.dims(offs)[0].clone();
    if cx.rank(dy) != 2 || cx.dims(dy) != vec![sa[0].clone(), sb[2].clone()] || cx.dtype(dy) != cx.dtype(a) {
        return err(format!("{what}: grad_output {} does not match input {} and weight {}", cx.ty(dy), cx.ty(a), cx.ty(b)));
    }
    let bt = cx.transpose(b, &[0, 2, 1])?; // [G, N, K]
    let da = grouped_rows(cx, dy, bt, offs, what)?;
    // dW[g] = Σ over the rows s of group g of a[s]ᵀ dy[s]: both sides zero outside the group,
    // so that NaN or Inf in another group's rows stays out.
    let mask = group_mask(cx, offs, &sa[0])?; // [G, S]
    let mut in_group = |v: ValueId| -> R<ValueId> {
        let mut shape = vec![g.clone()];
        shape.extend(cx.dims(v));
        let gv = cx.b.broadcast_in_dim(v, &[1, 2], shape.clone())?;
        let m = cx.b.broadcast_in_dim(mask, &[0, 1], shape)?;
        let zero = cx.full_like(Scalar::Float(0.0), gv)?;
        cx.select(m, gv, zero)
    };
    let ga = in_group(a)?; // [G, S, K]
    let gdy = in_group(dy)?; // [G, S, N]
    let dw = dg(cx, ga, gdy, &[0], &[0], &[1], &[1])?; // [G, K, N]
    Ok(vec![Val::Tensor(da), Val::Tensor(dw)])
}

/// Which group each position of a ragged dim of length `len` belongs to, as a mask [G, len]:
/// group g spans `[offs[g-1], offs[g])` (from 0 for g = 0); positions past the last offset
/// are in no group.
fn group_mask(cx: &mut Ctx, offs: ValueId, len: &Dim) -> R<ValueId> {
    let g = cx.dims(offs)[0].clone();
    let gs = static_of(&g, "group count")?;
    let end = cx.convert(offs, DType::I64)?;
    let start = if gs > 1 {
        let zero = cx.const_i64(&[1], &[0])?;
        let head = cx.b.slice(end, &[0], &[gs - 1], &[1])?;
        cx.b.concatenate(&[zero, head], 0)?
    } else {
        cx.const_i64(&[gs], &vec![0; gs as usize])?
    };
    let shape = vec![g, len.clone()];
    let pos = cx.iota(DType::I64, &shape, 1)?;
    let start = cx.b.broadcast_in_dim(start, &[0], shape.clone())?;
    let end = cx.b.broadcast_in_dim(end, &[0], shape)?;
    let ge = cx.cmp(Direction::Ge, pos, start)?;
    let lt = cx.cmp(Direction::Lt, pos, end)?;
    cx.bin(O::And, ge, lt)
}

/// `p` [..] where `mask` (broadcast along `dims` of p) holds, else 0, then summed over
/// `group_dim`: selects each row's own group product without letting other groups' NaN or
/// Inf through.
fn pick_group(cx: &mut Ctx, p: ValueId, mask: ValueId, dims: &[i64], group_dim: usize) -> R<ValueId> {
    let shape = cx.dims(p);
    let m = cx.b.broadcast_in_dim(mask, dims, shape)?;
    let zero = cx.full_like(Scalar::Float(0.0), p)?;
    let s = cx.select(m, p, zero)?;
    cx.reduce(s, ReduceKind::Sum, &[group_dim], false)
}

/// `_grouped_mm(a, b, offs)`, the grouped GEMM of mixture-of-experts layers:
/// - a [M, K] × b [G, K, N], offs over M: rows of group g times b[g] → [M, N];
/// - a [G, M, K] × b [K, N], offs over N: a[g] times the columns of group g → [M, N];
/// - a [M, K] × b [K, N], offs over K: a[:, Kg] × b[Kg, :] per group → [G, M, N];
/// - a [G, M, K] × b [G, K, N], no offs: a batched product.
///
/// Rows or columns past the last offset are zero (ATen leaves them uninitialised). Lowered densely (every group's
/// product, then a select per row), which costs G times the FLOPs of the ragged product.
fn grouped_mm(cx: &mut Ctx) -> R<Vec<Val>> {
    let a = cx.t("self")?;
    let b = cx.t("mat2")?;
    let offs = cx.opt_t("offs")?;
    if cx.opt_t("bias")?.is_some() {
        return err("_grouped_mm with a bias is not supported (nor is it by ATen)");
    }
    let (da, db) = (cx.dtype(a), cx.dtype(b));
    if da != db || !da.is_float() {
        return err(format!("_grouped_mm needs two floating-point operands of one dtype, got {} and {}", cx.ty(a), cx.ty(b)));
    }
    if let Some(od) = cx.opt_dtype("out_dtype")? {
        if od != da {
            return err(format!("_grouped_mm: out_dtype {} must match the operands' dtype {}", od.name(), da.name()));
        }
    }
    let (ra, rb) = (cx.rank(a), cx.rank(b));
    let (sa, sb) = (cx.dims(a), cx.dims(b));
    let offs = match (offs, ra, rb) {
        (None, 3, 3) => {
            if sa[0] != sb[0] || sa[2] != sb[1] {
                return err(format!("_grouped_mm: {} and {} do not multiply", cx.ty(a), cx.ty(b)));
            }
            return one(dg(cx, a, b, &[0], &[0], &[2], &[1])?);
        }
        (None, _, _) => return err(format!("_grouped_mm of {} and {} needs offs", cx.ty(a), cx.ty(b))),
        (Some(o), _, _) => o,
    };
    if cx.rank(offs) != 1 || !cx.dtype(offs).is_int() {
        return err(format!("_grouped_mm: offs must be a 1-D integer tensor, got {}", cx.ty(offs)));
    }
    let g = cx.dims(offs)[0].clone();
    match (ra, rb) {
        (2, 3) => one(grouped_rows(cx, a, b, offs, "_grouped_mm")?),
        (3, 2) => {
            if sa[0] != g || sa[2] != sb[0] {
                return err(format!("_grouped_mm: {} and {} with {} groups do not multiply", cx.ty(a), cx.ty(b), g));
            }
            let p = dg(cx, a, b, &[], &[], &[2], &[0])?; // [G, M, N]
            let mask = group_mask(cx, offs, &sb[1])?; // [G, N]
            one(pick_group(cx, p, mask, &[0, 2], 0)?)
        }
        (2, 2) => {
            if sa[1] != sb[0] {
                return err(format!("_grouped_mm: {} and {} do not multiply", cx.ty(a), cx.ty(b)));
            }
            let mask = group_mask(cx, offs, &sa[1])?; // [G, K]
            // Both operands masked per group so that NaN or Inf outside a group stays out.
            // per_group(v, k_dim): v repeated per group [G, ..], zero outside the group's K.
            let mut per_group = |v: ValueId, k_dim: i64| -> R<ValueId> {
                let mut shape = vec![g.clone()];
                shape.extend(cx.dims(v));
                let gv = cx.b.broadcast_in_dim(v, &[1, 2], shape.clone())?;
                let m = cx.b.broadcast_in_dim(mask, &[0, k_dim], shape)?;
                let zero = cx.full_like(Scalar::Float(0.0), gv)?;
                cx.select(m, gv, zero)
            };
            let ga = per_group(a, 2)?; // [G, M, K]
            let gb = per_group(b, 1)?; // [G, K, N]
            one(dg(cx, ga, gb, &[0], &[0], &[2], &[1])?)
        }
        _ => err(format!("_grouped_mm of {} and {} with offs is not a grouped product", cx.ty(a), cx.ty(b))),
    }
}
