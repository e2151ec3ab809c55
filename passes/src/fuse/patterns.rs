//! The patterns `fuse` recognises. Each matcher looks at the op computing a candidate output
//! (ops are visited last to first, so the largest match around an op wins) and returns the
//! composite's name, attributes, inputs and outputs; [`super::outline`] checks that the ops in
//! between form a closed group and moves them.
//!
//! One file on purpose: the matchers share the small structural helpers at its top, and the
//! order they are tried in is read here.

use super::Match;
use crate::eval::eval_f64s;
use crate::util::{binary, def_is, def_op, splat_f64, unary};
use std::collections::HashMap;
use tpuc_ir::{payload, Attr, AttrEnum, DType, GeluApproximation, Module, OpId, Opcode, ReduceKind, ValueId};

/// What a matcher sees: the module (with its use lists) and the causal-mask proofs so far.
pub struct Ctx<'m> {
    pub m: &'m Module,
    /// Causal-mask proofs by (mask value, bool mask), kept for a whole pass run: after CSE the
    /// layers of a model share one mask, which is then evaluated once.
    pub causal: std::cell::RefCell<HashMap<(ValueId, bool), bool>>,
}

impl<'m> Ctx<'m> {
    pub fn new(m: &'m Module) -> Self {
        Ctx { m, causal: Default::default() }
    }

    fn uses(&self, v: ValueId) -> usize {
        self.m.uses(v).len()
    }

}

/// One pattern: a name for logs and its matcher.
pub struct Pattern {
    pub name: &'static str,
    pub matcher: fn(&Ctx, OpId) -> Option<Match>,
}

/// Every pattern, in the order `fuse` tries them (larger patterns first).
pub const ALL: &[Pattern] = &[
    Pattern { name: "attention (op)", matcher: attention_op },
    Pattern { name: "attention (decomposed)", matcher: attention_decomposed },
    Pattern { name: "rope", matcher: rope },
    Pattern { name: "swiglu", matcher: swiglu },
    Pattern { name: "layer_norm", matcher: layer_norm },
    Pattern { name: "rms_norm", matcher: rms_norm },
    Pattern { name: "gelu", matcher: gelu },
    Pattern { name: "silu", matcher: silu },
    Pattern { name: "softmax", matcher: softmax },
    Pattern { name: "log_softmax", matcher: log_softmax },
];

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-6 * b.abs().max(1.0)
}

/// Whether `v` is a splat of `want` as its dtype stores it: within 1e-6 (f32 and wider) or one
/// rounding step of a narrower float (a bf16 graph holds GELU's 0.044715 as 0.044677734375).
fn splat_near(m: &Module, v: ValueId, want: f64) -> bool {
    splat_f64(m, v).is_some_and(|c| near_in(c, want, m.values[v].ty.dtype))
}

/// `c` (a constant of dtype `dt`) is `want` as `dt` stores it.
fn near_in(c: f64, want: f64, dt: DType) -> bool {
    close(c, want) || (c - want).abs() <= dt.eps().unwrap_or(0.0) * want.abs()
}

fn rank(m: &Module, v: ValueId) -> usize {
    m.values[v].ty.rank()
}

fn result(m: &Module, op: OpId) -> Option<ValueId> {
    let d = &m.ops[op];
    (d.results().len() == 1).then(|| d.results()[0])
}

/// Looks through `broadcast_in_dim` and `reshape`.
fn unbcast(m: &Module, mut v: ValueId) -> ValueId {
    while let Some(op) = def_op(m, v) {
        match m.ops[op].opcode() {
            Opcode::BroadcastInDim | Opcode::Reshape => v = m.ops[op].operands()[0],
            _ => break,
        }
    }
    v
}

/// Operands of a commutative binary op with the one satisfying `pred` second.
fn either<T>(m: &Module, v: ValueId, opcode: Opcode, mut pred: impl FnMut(ValueId) -> Option<T>) -> Option<(ValueId, T)> {
    let (a, b) = binary(m, v, opcode)?;
    if let Some(t) = pred(b) {
        return Some((a, t));
    }
    if opcode.has_trait(tpuc_ir::opcode::traits::COMMUTATIVE) {
        if let Some(t) = pred(a) {
            return Some((b, t));
        }
    }
    None
}

/// `x * c` with a splat `c` (either order): (x, c).
fn mul_splat(m: &Module, v: ValueId) -> Option<(ValueId, f64)> {
    either(m, v, Opcode::Mul, |x| splat_f64(m, x))
}

/// The factors of a product tree of `mul`s.
fn factors(m: &Module, v: ValueId, out: &mut Vec<ValueId>, depth: usize) {
    match binary(m, v, Opcode::Mul) {
        Some((a, b)) if depth < 6 => {
            factors(m, a, out, depth + 1);
            factors(m, b, out, depth + 1);
        }
        _ => out.push(v),
    }
}

/// The broadcasts and reshapes between a reduction result `r` and `v`, looking through
/// elementwise unary ops and elementwise ops with a splat operand (which keep positions):
/// the chain from `v` down to `r`, or `None` if `v` is not computed from `r` that way.
fn path_to(m: &Module, v: ValueId, r: ValueId) -> Option<Vec<OpId>> {
    let mut chain = Vec::new();
    let mut cur = v;
    while cur != r {
        let op = def_op(m, cur)?;
        let d = &m.ops[op];
        if chain.len() > 12 {
            return None;
        }
        match d.opcode() {
            Opcode::BroadcastInDim | Opcode::Reshape => {
                chain.push(op);
                cur = d.operands()[0];
            }
            o if o.is_elementwise() && d.operands().len() == 1 => cur = d.operands()[0],
            o if o.is_elementwise() && d.operands().len() == 2 => {
                let (a, b) = (d.operands()[0], d.operands()[1]);
                cur = if splat_f64(m, b).is_some() {
                    a
                } else if splat_f64(m, a).is_some() {
                    b
                } else {
                    return None;
                };
            }
            _ => return None,
        }
    }
    Some(chain)
}

/// Whether `v` is the reduction result `r` (of an x over the dims `reduced`) broadcast back in
/// place: every dim of `v` stands for the x dim at the same position, or for a reduced (or
/// unit) dim. Keepdim reshapes, broadcasts and position-keeping elementwise ops may lie
/// between (see [`path_to`]).
fn broadcast_back(m: &Module, v: ValueId, r: ValueId, x_dims: &[tpuc_ir::Dim], reduced: &[i64]) -> bool {
    let Some(chain) = path_to(m, v, r) else { return false };
    // What x dim each dim of the current value stands for.
    let kept: Vec<i64> = (0..x_dims.len() as i64).filter(|d| !reduced.contains(d)).collect();
    let mut repr: Vec<Option<i64>> = kept.iter().map(|&d| Some(d)).collect();
    if repr.len() != m.values[r].ty.rank() {
        return false;
    }
    for &op in chain.iter().rev() {
        let (inp, out) = (m.ops[op].operands()[0], m.ops[op].results()[0]);
        let (od, nd) = (&m.values[inp].ty.dims, &m.values[out].ty.dims);
        let mut next = vec![None; nd.len()];
        if m.ops[op].opcode() == Opcode::Reshape {
            // Only unit dims may come or go; the others keep their order.
            let a: Vec<usize> = (0..od.len()).filter(|&i| !od[i].is_one()).collect();
            let b: Vec<usize> = (0..nd.len()).filter(|&i| !nd[i].is_one()).collect();
            if a.len() != b.len() || a.iter().zip(&b).any(|(&i, &j)| od[i] != nd[j]) {
                return false;
            }
            for (&i, &j) in a.iter().zip(&b) {
                next[j] = repr[i];
            }
        } else {
            let bd = m.ops[op].payload::<payload::BroadcastInDim>().broadcast_dimensions;
            for (i, &j) in bd.iter().enumerate() {
                if !od[i].is_one() {
                    next[j as usize] = repr[i];
                }
            }
        }
        repr = next;
    }
    repr.len() == x_dims.len()
        && repr.iter().enumerate().all(|(j, rp)| match rp {
            Some(d) => *d == j as i64,
            None => reduced.contains(&(j as i64)) || x_dims[j].is_one(),
        })
}

/// `reduce_sum(x, dims) / N` (through keepdim reshapes and broadcasts) with N the number of
/// reduced elements: (x, dims, the reduction's result). Where the mean goes back to x's
/// positions is checked by the callers ([`broadcast_back`]).
fn mean_of(m: &Module, v: ValueId) -> Option<(ValueId, Vec<i64>, ValueId)> {
    let u = unbcast(m, v);
    let (s, n) = if let Some((a, c)) = binary(m, u, Opcode::Div).and_then(|(a, b)| splat_f64(m, b).map(|c| (a, c))) {
        (a, c)
    } else {
        let (a, c) = mul_splat(m, u)?;
        (a, 1.0 / c)
    };
    let r = def_is(m, unbcast(m, s), Opcode::Reduce)?;
    let d = &m.ops[r];
    let reduce = d.payload::<payload::Reduce>();
    if reduce.kind != ReduceKind::Sum {
        return None;
    }
    let dims = reduce.dimensions.to_vec();
    let x = d.operands()[0];
    let xd = m.values[x].ty.static_dims()?;
    let count: i64 = dims.iter().map(|&i| xd[i as usize]).product();
    close(n, count as f64).then_some((x, dims, d.results()[0]))
}

/// True if `dims` are the trailing dims of a rank-`r` value.
fn trailing(dims: &[i64], r: usize) -> bool {
    let mut d = dims.to_vec();
    d.sort();
    !d.is_empty() && d.iter().enumerate().all(|(i, &x)| x as usize == r - d.len() + i)
}

/// `v` is `x * x` or `x ** 2`: x.
fn square_of(m: &Module, v: ValueId) -> Option<ValueId> {
    if let Some((a, b)) = binary(m, v, Opcode::Mul) {
        return (a == b).then_some(a);
    }
    let (a, e) = binary(m, v, Opcode::Pow)?;
    (splat_f64(m, e) == Some(2.0)).then_some(a)
}

/// A per-feature parameter broadcast along the trailing dims: the parameter.
fn trailing_param(m: &Module, v: ValueId) -> Option<ValueId> {
    let b = def_is(m, v, Opcode::BroadcastInDim)?;
    let w = m.ops[b].operands()[0];
    let bd = m.ops[b].payload::<payload::BroadcastInDim>().broadcast_dimensions;
    let r = rank(m, v);
    (trailing(bd, r) || bd.is_empty() && rank(m, w) == 0).then_some(w)
}

// ------------------------------------------------------------------------- attention

fn attention_op(cx: &Ctx, op: OpId) -> Option<Match> {
    let m = cx.m;
    let d = &m.ops[op];
    if d.opcode() != Opcode::Attention {
        return None;
    }
    let a = d.payload::<payload::Attention>();
    let attrs =
        vec![("scale", Attr::Float(a.scale)), ("causal", Attr::Bool(a.is_causal)), ("has_mask", Attr::Bool(d.operands().len() > 3))];
    Some(Match { name: "tpuc.attention", attrs, inputs: d.operands().to_vec(), outputs: vec![result(m, op)?] })
}

/// q's path into the scores dot: reshapes that flatten leading dims and splat scalings.
fn walk_q(m: &Module, mut v: ValueId, rank: usize) -> (ValueId, f64) {
    let mut scale = 1.0;
    let mut best = None;
    loop {
        if m.values[v].ty.rank() == rank {
            best = Some((v, scale));
        }
        if let Some(x) = flatten_source(m, v) {
            v = x;
        } else if let Some((x, c)) = mul_splat(m, v) {
            scale *= c;
            v = x;
        } else {
            return best.unwrap_or((v, scale));
        }
    }
}

/// `reshape(x)` that merges leading dims and keeps the last two: x. (A reshape that drops a
/// leading unit dim, as `unbind` of a stacked qkv leaves, is one too: the walks above keep
/// the deepest value of the attention's own rank.)
fn flatten_source(m: &Module, v: ValueId) -> Option<ValueId> {
    let x = unary(m, v, Opcode::Reshape)?;
    let (vt, xt) = (&m.values[v].ty, &m.values[x].ty);
    let (rv, rx) = (vt.rank(), xt.rank());
    (rx > rv && rv >= 2 && vt.dims[rv - 2..] == xt.dims[rx - 2..]).then_some(x)
}

/// The grouped-KV repeat `reshape(broadcast(reshape(x)))` from [B, G, S, E] to
/// [B, G*R, S, E]: (x, R).
fn repeat_kv(m: &Module, v: ValueId) -> Option<(ValueId, i64)> {
    let five = unary(m, v, Opcode::Reshape)?;
    let b = def_is(m, five, Opcode::BroadcastInDim)?;
    let inner = m.ops[b].operands()[0];
    let x = unary(m, inner, Opcode::Reshape)?;
    let (xd, fd, vd) = (m.values[x].ty.static_dims()?, m.values[five].ty.static_dims()?, m.values[v].ty.static_dims()?);
    let r = xd.len();
    if r < 3 || fd.len() != r + 1 || vd.len() != r {
        return None;
    }
    let h = r - 3;
    let ok = fd[..=h] == xd[..=h] && fd[h + 2..] == xd[h + 1..] && vd[h] == xd[h] * fd[h + 1] && vd[h + 1..] == xd[h + 1..];
    ok.then_some((x, fd[h + 1]))
}

/// k's path: like q's, plus the transpose of the last two dims and a grouped-KV repeat.
fn walk_k(m: &Module, mut v: ValueId, rank: usize) -> Option<(ValueId, f64)> {
    let mut scale = 1.0;
    let mut transposed = false;
    let mut best = None;
    loop {
        if transposed && m.values[v].ty.rank() == rank {
            best = Some((v, scale));
        }
        if let Some((x, _)) = repeat_kv(m, v).filter(|_| transposed) {
            v = x;
        } else if let Some(x) = flatten_source(m, v) {
            v = x;
        } else if let Some((x, c)) = mul_splat(m, v) {
            scale *= c;
            v = x;
        } else if let Some(t) = def_is(m, v, Opcode::Transpose).filter(|_| !transposed) {
            let p = m.ops[t].payload::<payload::Transpose>().permutation;
            let r = p.len();
            let swap = r >= 2 && p[r - 1] == r as i64 - 2 && p[r - 2] == r as i64 - 1 && p[..r - 2].iter().enumerate().all(|(i, &x)| x == i as i64);
            if !swap {
                break;
            }
            transposed = true;
            v = m.ops[t].operands()[0];
        } else {
            break;
        }
    }
    transposed.then_some(best.unwrap_or((v, scale)))
}

fn walk_v(m: &Module, mut v: ValueId, rank: usize) -> ValueId {
    if let Some(x) = flatten_source(m, v).filter(|&x| m.values[v].ty.rank() != rank || m.values[x].ty.rank() == rank) {
        v = x;
    }
    if let Some((x, _)) = repeat_kv(m, v) {
        v = x;
    }
    v
}

/// Whether a computable mask (additive: finite = keep; bool: true = keep) is exactly the
/// causal one over its last two dims [L, S] (key j visible to query i iff j <= i + S - L).
fn is_causal_mask(m: &Module, mask: ValueId, bool_mask: bool) -> bool {
    let Some((dims, vals)) = eval_f64s(m, mask, 1 << 22) else { return false };
    if dims.len() < 2 {
        return false;
    }
    let (l, s) = (dims[dims.len() - 2], dims[dims.len() - 1]);
    vals.iter().enumerate().all(|(i, &x)| {
        let (row, col) = ((i as i64 / s) % l, i as i64 % s);
        let keep = if bool_mask { x != 0.0 } else { x == 0.0 };
        let drop = if bool_mask { x == 0.0 } else { x == f64::NEG_INFINITY };
        if col <= row + s - l {
            keep
        } else {
            drop
        }
    })
}

/// Scores `s` = [mask] (scale · dot(q', k')): (the dot, scale of the scores, mask, bool mask).
fn split_scores(m: &Module, s: ValueId) -> Option<(OpId, f64, Option<ValueId>, bool)> {
    let to_dot = |v: ValueId| -> Option<(OpId, f64)> {
        let mut v = v;
        let mut scale = 1.0;
        loop {
            if let Some(dot) = def_is(m, v, Opcode::DotGeneral) {
                return Some((dot, scale));
            }
            if let Some(x) = unary(m, v, Opcode::Reshape) {
                v = x;
            } else if let Some((x, c)) = mul_splat(m, v) {
                scale *= c;
                v = x;
            } else {
                return None;
            }
        }
    };
    if let Some((dot, scale)) = to_dot(s) {
        return Some((dot, scale, None, false));
    }
    if let Some((a, b)) = binary(m, s, Opcode::Add) {
        if let Some((dot, scale)) = to_dot(a) {
            return Some((dot, scale, Some(b), false));
        }
        if let Some((dot, scale)) = to_dot(b) {
            return Some((dot, scale, Some(a), false));
        }
    }
    let sel = def_is(m, s, Opcode::Select)?;
    let o = &m.ops[sel].operands();
    if splat_f64(m, o[2])? == f64::NEG_INFINITY {
        let (dot, scale) = to_dot(o[1])?;
        return Some((dot, scale, Some(o[0]), true));
    }
    None
}

fn attention_decomposed(cx: &Ctx, op: OpId) -> Option<Match> {
    let m = cx.m;
    // The output: the second dot, or the reshape that unflattens it.
    let (d2, out) = match m.ops[op].opcode() {
        Opcode::Reshape => (def_is(m, m.ops[op].operands()[0], Opcode::DotGeneral)?, result(m, op)?),
        Opcode::DotGeneral => (op, result(m, op)?),
        _ => return None,
    };
    let (p_flat, v_flat) = (m.ops[d2].operands()[0], m.ops[d2].operands()[1]);
    // Probabilities: softmax over the last dim, possibly behind the fully-masked-row guard,
    // possibly dropped out (before or after the flattening reshape).
    let (p_flat, mut dropout) = match dropout_of(m, p_flat) {
        Some((x, keep, rate)) => (x, Some((keep, rate))),
        None => (p_flat, None),
    };
    let mut p = unary(m, p_flat, Opcode::Reshape).unwrap_or(p_flat);
    if dropout.is_none() {
        if let Some((x, keep, rate)) = dropout_of(m, p) {
            (p, dropout) = (x, Some((keep, rate)));
        }
    }
    if let Some(sel) = def_is(m, p, Opcode::Select) {
        if splat_f64(m, m.ops[sel].operands()[1]) == Some(0.0) {
            p = m.ops[sel].operands()[2];
        }
    }
    // 16-bit scores: torch's decompositions compute their softmax in f32 between two converts,
    // `convert(softmax(convert(s)))`; the composite's body keeps them (and so its rounding).
    let mut narrow = None;
    if let Some(c) = def_is(m, p, Opcode::Convert) {
        let (x, dt) = (m.ops[c].operands()[0], m.values[p].ty.dtype);
        if matches!(dt, DType::BF16 | DType::F16) && m.values[x].ty.dtype == DType::F32 {
            (p, narrow) = (x, Some(dt));
        }
    }
    let sm = def_is(m, p, Opcode::Softmax)?;
    let mut s = m.ops[sm].operands()[0];
    if m.ops[sm].payload::<payload::Softmax>().dimension != rank(m, s) as i64 - 1 {
        return None;
    }
    if let Some(dt) = narrow {
        s = unary(m, s, Opcode::Convert).filter(|&x| m.values[x].ty.dtype == dt)?;
    }
    let (d1, s_scale, mask, bool_mask) = split_scores(m, s)?;
    let r_out = m.values[out].ty.rank();
    let (q, q_scale) = walk_q(m, m.ops[d1].operands()[0], r_out);
    let (k, k_scale) = walk_k(m, m.ops[d1].operands()[1], r_out)?;
    let v = walk_v(m, v_flat, r_out);
    // Shapes: q [..., L, E], k and v [..., S, E], the output [..., L, Ev].
    let (qt, kt, vt, ot) = (&m.values[q].ty, &m.values[k].ty, &m.values[v].ty, &m.values[out].ty);
    let r = qt.rank();
    if r < 3 || kt.rank() != r || vt.rank() != r || ot.rank() != r || qt.dims[r - 1] != kt.dims[r - 1] || kt.dims[r - 2] != vt.dims[r - 2] || ot.dims[r - 1] != vt.dims[r - 1] || ot.dims[r - 2] != qt.dims[r - 2] {
        return None;
    }
    let mut inputs = vec![q, k, v];
    let mut causal = false;
    if let Some(mk) = mask {
        let mut src = mk;
        while let Some(b) = def_is(m, src, Opcode::BroadcastInDim) {
            src = m.ops[b].operands()[0];
        }
        let proved = *cx.causal.borrow_mut().entry((src, bool_mask)).or_insert_with(|| is_causal_mask(m, src, bool_mask));
        if proved {
            causal = true;
        } else {
            inputs.push(src);
        }
    }
    let mut attrs = vec![
        ("scale", Attr::Float(q_scale * k_scale * s_scale)),
        ("causal", Attr::Bool(causal)),
        ("has_mask", Attr::Bool(inputs.len() > 3)),
    ];
    if let Some((keep, rate)) = dropout {
        inputs.push(keep);
        attrs.push(("dropout", Attr::Float(rate)));
    }
    Some(Match { name: "tpuc.attention", attrs, inputs, outputs: vec![out] })
}

/// Dropout written out, `(x * convert(keep)) * 1/(1 - rate)` with a boolean `keep` mask (as
/// the random ops lower it, and as core ATen decomposes `native_dropout`): (x, keep, rate).
/// The mask is the composite's last input, so its draw stays outside the region.
fn dropout_of(m: &Module, v: ValueId) -> Option<(ValueId, ValueId, f64)> {
    let (kept, scale) = mul_splat(m, v)?;
    let mask = |k: ValueId| {
        let src = unary(m, k, Opcode::Convert)?;
        (m.values[src].ty.dtype == tpuc_ir::DType::Bool && m.values[src].ty.dims == m.values[k].ty.dims).then_some(src)
    };
    let (x, keep) = either(m, kept, Opcode::Mul, mask)?;
    // The rate, rounded to the 1e-6 a splat constant's f32 rounding leaves of it.
    (scale >= 1.0).then(|| (x, keep, ((1.0 - 1.0 / scale) * 1e6).round() / 1e6))
}

// ------------------------------------------------------------------------- rope

/// `concatenate(-x[..., h:], x[..., :h])` on the last dim: x.
fn rotate_half(m: &Module, v: ValueId) -> Option<ValueId> {
    let c = def_is(m, v, Opcode::Concatenate)?;
    let d = &m.ops[c];
    let r = rank(m, v);
    if d.operands().len() != 2 || d.payload::<payload::Concatenate>().dimension != r as i64 - 1 {
        return None;
    }
    let neg = unary(m, d.operands()[0], Opcode::Neg)?;
    let slice_of = |s: ValueId, lo: bool| -> Option<ValueId> {
        let op = def_is(m, s, Opcode::Slice)?;
        let sd = &m.ops[op];
        let x = sd.operands()[0];
        let n = m.values[x].ty.dims[r - 1].as_static()?;
        let payload::Slice { start_indices: st, limit_indices: li, strides: str_ } = sd.payload();
        let full_rest = (0..r - 1).all(|i| st[i] == 0 && str_[i] == 1 && Some(li[i]) == m.values[x].ty.dims[i].as_static());
        let want = if lo { (0, n / 2) } else { (n / 2, n) };
        (full_rest && n % 2 == 0 && str_[r - 1] == 1 && (st[r - 1], li[r - 1]) == want).then_some(x)
    };
    let x2 = slice_of(neg, false)?;
    let x1 = slice_of(d.operands()[1], true)?;
    (x1 == x2).then_some(x1)
}

fn rope(cx: &Ctx, op: OpId) -> Option<Match> {
    let m = cx.m;
    let out = result(m, op)?;
    let (a, b) = binary(m, out, Opcode::Add)?;
    for (cos_term, sin_term) in [(a, b), (b, a)] {
        let Some((ms, mr)) = binary(m, sin_term, Opcode::Mul) else { continue };
        for (rot, sin) in [(ms, mr), (mr, ms)] {
            let Some(x) = rotate_half(m, rot) else { continue };
            let Some((c0, c1)) = binary(m, cos_term, Opcode::Mul) else { continue };
            let cos = if c0 == x { c1 } else if c1 == x { c0 } else { continue };
            return Some(Match { name: "tpuc.rope", attrs: vec![], inputs: vec![x, unbcast(m, cos), unbcast(m, sin)], outputs: vec![out] });
        }
    }
    None
}

// ------------------------------------------------------------------------- SiLU / SwiGLU

/// `x * sigmoid(x)` (either order): x.
fn silu_of(m: &Module, v: ValueId) -> Option<ValueId> {
    let (a, b) = binary(m, v, Opcode::Mul)?;
    if unary(m, b, Opcode::Logistic) == Some(a) {
        Some(a)
    } else if unary(m, a, Opcode::Logistic) == Some(b) {
        Some(b)
    } else {
        None
    }
}

fn swiglu(cx: &Ctx, op: OpId) -> Option<Match> {
    let m = cx.m;
    let out = result(m, op)?;
    let (up, gate) = either(m, out, Opcode::Mul, |v| silu_of(m, v))?;
    Some(Match { name: "tpuc.swiglu", attrs: vec![], inputs: vec![gate, up], outputs: vec![out] })
}

fn silu(cx: &Ctx, op: OpId) -> Option<Match> {
    let m = cx.m;
    let out = result(m, op)?;
    let x = silu_of(m, out)?;
    Some(Match { name: "tpuc.silu", attrs: vec![], inputs: vec![x], outputs: vec![out] })
}

// ------------------------------------------------------------------------- norms

/// The normalised value of a layer norm written out: `(x - mean) * rsqrt(var + eps)` or
/// `(x - mean) / sqrt(var + eps)`: (x, eps, normalized rank).
fn layer_norm_core(m: &Module, v: ValueId) -> Option<(ValueId, f64, usize)> {
    let (d, denom) = if let Some((d, r)) = either(m, v, Opcode::Mul, |r| unary(m, unbcast(m, r), Opcode::Rsqrt)) {
        (d, r)
    } else {
        let (d, s) = binary(m, v, Opcode::Div)?;
        (d, unary(m, unbcast(m, s), Opcode::Sqrt)?)
    };
    let (var, eps) = either(m, denom, Opcode::Add, |e| splat_f64(m, e))?;
    let (x, mu) = binary(m, d, Opcode::Sub)?;
    let (mx, dims, mr) = mean_of(m, mu)?;
    let x_dims = m.values[x].ty.dims.clone();
    if mx != x || !trailing(&dims, rank(m, x)) || !broadcast_back(m, mu, mr, &x_dims, &dims) {
        return None;
    }
    let (sq, vdims, vr) = mean_of(m, var)?;
    let dd = square_of(m, sq)?;
    // The centred value, the same op or an equal recomputation.
    let same = dd == d || binary(m, dd, Opcode::Sub).is_some_and(|(x2, mu2)| x2 == x && mean_of(m, mu2).is_some_and(|(x3, d3, r3)| x3 == x && broadcast_back(m, mu2, r3, &x_dims, &d3)));
    let scale = m.ops[def_op(m, v)?].operands().iter().copied().find(|&o| o != d)?;
    (same && vdims == dims && broadcast_back(m, scale, vr, &x_dims, &dims)).then_some((x, eps, dims.len()))
}

/// Peels `y * w + b` (either order, either step optional) off `out`: (y, w, b).
fn peel_affine(m: &Module, out: ValueId) -> Vec<(ValueId, Option<ValueId>, Option<ValueId>)> {
    let mut c = vec![(out, None, None)];
    if let Some((yw, b)) = either(m, out, Opcode::Add, |v| trailing_param(m, v)) {
        if let Some((y, w)) = either(m, yw, Opcode::Mul, |v| trailing_param(m, v)) {
            c.insert(0, (y, Some(w), Some(b)));
        }
        c.push((yw, None, Some(b)));
    }
    if let Some((y, w)) = either(m, out, Opcode::Mul, |v| trailing_param(m, v)) {
        c.push((y, Some(w), None));
    }
    c
}

fn layer_norm(cx: &Ctx, op: OpId) -> Option<Match> {
    let m = cx.m;
    let out = *m.ops[op].results().first()?;
    for (y, w, b) in peel_affine(m, out) {
        let (x, eps, n) = if let Some(ln) = def_op(m, y).filter(|&o| m.ops[o].opcode() == Opcode::LayerNorm && m.ops[o].results()[0] == y) {
            // The op form: its statistics must be unused (inference).
            let d = &m.ops[ln];
            if d.results()[1..].iter().any(|&r| cx.uses(r) > 0) {
                continue;
            }
            let a = d.payload::<payload::LayerNorm>();
            (d.operands()[0], a.epsilon, a.normalized_rank as usize)
        } else if let Some(core) = layer_norm_core(m, y) {
            core
        } else {
            continue;
        };
        if w.is_some_and(|w| rank(m, w) != n) || b.is_some_and(|b| rank(m, b) != n) {
            continue;
        }
        let mut inputs = vec![x];
        inputs.extend(w);
        inputs.extend(b);
        let attrs = vec![
            ("epsilon", Attr::Float(eps)),
            ("normalized_rank", Attr::Int(n as i64)),
            ("has_weight", Attr::Bool(w.is_some())),
            ("has_bias", Attr::Bool(b.is_some())),
        ];
        return Some(Match { name: "tpuc.layer_norm", attrs, inputs, outputs: vec![out] });
    }
    None
}

/// `x * rsqrt(mean(x²) + eps)` (either order): (x, eps, normalized rank).
fn rms_core(m: &Module, v: ValueId) -> Option<(ValueId, f64, usize)> {
    let (a, b) = binary(m, v, Opcode::Mul)?;
    for (x, r) in [(a, b), (b, a)] {
        let Some(rs) = unary(m, unbcast(m, r), Opcode::Rsqrt) else { continue };
        let Some((ms, eps)) = either(m, rs, Opcode::Add, |e| splat_f64(m, e)) else { continue };
        let Some((sq, dims, red)) = mean_of(m, ms) else { continue };
        let x_dims = m.values[x].ty.dims.clone();
        if square_of(m, sq) == Some(x) && trailing(&dims, rank(m, x)) && broadcast_back(m, r, red, &x_dims, &dims) {
            return Some((x, eps, dims.len()));
        }
    }
    None
}

fn rms_norm(cx: &Ctx, op: OpId) -> Option<Match> {
    let m = cx.m;
    let out = result(m, op)?;
    let mut cands = Vec::new();
    if let Some((y, w)) = either(m, out, Opcode::Mul, |v| trailing_param(m, v)) {
        cands.push((y, Some(w)));
    }
    cands.push((out, None));
    for (y, w) in cands {
        let Some((x, eps, n)) = rms_core(m, y) else { continue };
        if w.is_some_and(|w| rank(m, w) != n) {
            continue;
        }
        let mut inputs = vec![x];
        inputs.extend(w);
        let attrs = vec![("epsilon", Attr::Float(eps)), ("normalized_rank", Attr::Int(n as i64)), ("has_weight", Attr::Bool(w.is_some()))];
        return Some(Match { name: "tpuc.rms_norm", attrs, inputs, outputs: vec![out] });
    }
    None
}

// ------------------------------------------------------------------------- GELU

fn gelu(cx: &Ctx, op: OpId) -> Option<Match> {
    let m = cx.m;
    let d = &m.ops[op];
    let out = result(m, op)?;
    if d.opcode() == Opcode::Gelu {
        return Some(Match { name: "tpuc.gelu", attrs: vec![("approximate", d.payload::<payload::Gelu>().approximate.attr())], inputs: vec![d.operands()[0]], outputs: vec![out] });
    }
    if d.opcode() != Opcode::Mul {
        return None;
    }
    // 0.5 · x · (1 + t) in any association: the product's factors.
    let mut fs = Vec::new();
    factors(m, out, &mut fs, 0);
    let mut half = false;
    let mut rest = Vec::new();
    for f in fs {
        if !half && splat_near(m, f, 0.5) {
            half = true;
        } else {
            rest.push(f);
        }
    }
    if !half || rest.len() != 2 {
        return None;
    }
    for (x, one_plus) in [(rest[0], rest[1]), (rest[1], rest[0])] {
        let Some((t, _)) = either(m, one_plus, Opcode::Add, |c| splat_f64(m, c).filter(|&c| close(c, 1.0))) else { continue };
        if let Some(u) = unary(m, t, Opcode::Tanh) {
            // √(2/π) · (x + 0.044715 · x³)
            let mut uf = Vec::new();
            factors(m, u, &mut uf, 0);
            let c = uf.iter().position(|&f| splat_near(m, f, (2.0 / std::f64::consts::PI).sqrt()));
            let (Some(ci), 2) = (c, uf.len()) else { continue };
            let inner = uf[1 - ci];
            let Some((x2, cube)) = either(m, inner, Opcode::Add, |v| {
                let mut cf = Vec::new();
                factors(m, v, &mut cf, 0);
                let k = cf.iter().position(|&f| splat_near(m, f, 0.044715))?;
                cf.remove(k);
                Some(cf)
            }) else {
                continue;
            };
            let cubed = match cube.as_slice() {
                [p] => binary(m, *p, Opcode::Pow).is_some_and(|(b, e)| b == x && splat_f64(m, e) == Some(3.0)),
                [a, b] => (*a == x && square_of(m, *b) == Some(x)) || (*b == x && square_of(m, *a) == Some(x)),
                [a, b, c] => *a == x && *b == x && *c == x,
                _ => false,
            };
            if x2 == x && cubed {
                return Some(Match { name: "tpuc.gelu", attrs: vec![("approximate", GeluApproximation::Tanh.attr())], inputs: vec![x], outputs: vec![out] });
            }
        } else if let Some(w) = unary(m, t, Opcode::Erf) {
            let scaled = mul_splat(m, w).is_some_and(|(y, c)| y == x && near_in(c, std::f64::consts::FRAC_1_SQRT_2, m.values[w].ty.dtype))
                || binary(m, w, Opcode::Div).is_some_and(|(y, c)| y == x && splat_near(m, c, std::f64::consts::SQRT_2));
            if scaled {
                return Some(Match { name: "tpuc.gelu", attrs: vec![("approximate", GeluApproximation::None.attr())], inputs: vec![x], outputs: vec![out] });
            }
        }
    }
    None
}

// ------------------------------------------------------------------------- softmax

/// `reduce(kind, x, [d])` broadcast back in place (keepdim reshapes and broadcasts): (x, d).
fn reduced(m: &Module, v: ValueId, kind: ReduceKind) -> Option<(ValueId, i64)> {
    let r = def_is(m, unbcast(m, v), Opcode::Reduce)?;
    let d = &m.ops[r];
    match d.payload::<payload::Reduce>() {
        payload::Reduce { kind: k, dimensions: [dim] } if k == kind => {
            let x = d.operands()[0];
            let x_dims = m.values[x].ty.dims.clone();
            broadcast_back(m, v, d.results()[0], &x_dims, &[*dim]).then_some((x, *dim))
        }
        _ => None,
    }
}

/// `x - max(x, d)`: (x, d); plain `x` otherwise (with no dim).
fn shifted(m: &Module, z: ValueId) -> (ValueId, Option<i64>) {
    if let Some((x, mx)) = binary(m, z, Opcode::Sub) {
        if let Some((x2, d)) = reduced(m, mx, ReduceKind::Max) {
            if x2 == x {
                return (x, Some(d));
            }
        }
    }
    (z, None)
}

fn softmax(cx: &Ctx, op: OpId) -> Option<Match> {
    let m = cx.m;
    let d = &m.ops[op];
    let out = result(m, op)?;
    if d.opcode() == Opcode::Softmax {
        return Some(Match { name: "tpuc.softmax", attrs: vec![("dimension", Attr::Int(d.payload::<payload::Softmax>().dimension))], inputs: vec![d.operands()[0]], outputs: vec![out] });
    }
    let (e, s) = binary(m, out, Opcode::Div)?;
    let z = unary(m, e, Opcode::Exp)?;
    let (e2, dim) = reduced(m, s, ReduceKind::Sum)?;
    if e2 != e {
        return None;
    }
    let (x, d2) = shifted(m, z);
    if d2.is_some_and(|d2| d2 != dim) {
        return None;
    }
    Some(Match { name: "tpuc.softmax", attrs: vec![("dimension", Attr::Int(dim))], inputs: vec![x], outputs: vec![out] })
}

fn log_softmax(cx: &Ctx, op: OpId) -> Option<Match> {
    let m = cx.m;
    let d = &m.ops[op];
    let out = result(m, op)?;
    if d.opcode() == Opcode::LogSoftmax {
        return Some(Match { name: "tpuc.log_softmax", attrs: vec![("dimension", Attr::Int(d.payload::<payload::LogSoftmax>().dimension))], inputs: vec![d.operands()[0]], outputs: vec![out] });
    }
    let (z, l) = binary(m, out, Opcode::Sub)?;
    let s = unary(m, unbcast(m, l), Opcode::Log)?;
    let (e, dim) = reduced(m, s, ReduceKind::Sum)?;
    let r = def_is(m, unbcast(m, s), Opcode::Reduce)?;
    if !broadcast_back(m, l, m.ops[r].results()[0], &m.values[e].ty.dims.clone(), &[dim]) {
        return None;
    }
    if unary(m, e, Opcode::Exp)? != z {
        return None;
    }
    let (x, d2) = shifted(m, z);
    if d2.is_some_and(|d2| d2 != dim) {
        return None;
    }
    Some(Match { name: "tpuc.log_softmax", attrs: vec![("dimension", Attr::Int(dim))], inputs: vec![x], outputs: vec![out] })
}
