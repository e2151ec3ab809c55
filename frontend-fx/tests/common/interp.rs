//! A slow reference interpreter of tpuc IR, for checking the importer's numerics against
//! PyTorch eager outputs without XLA. Values are f64 arrays rounded to their dtype after every
//! op; primitive ops follow the StableHLO spec (gather clamps start indices, scatter drops
//! out-of-bounds updates, convolution and reduce_window handle dilation and negative padding).

#![allow(clippy::needless_range_loop)]

use std::collections::HashMap;
use tpuc_ir::{Attrs, DType, Dim, Module, Opcode, ValueId};

#[derive(Clone, Debug)]
pub struct T {
    pub dtype: DType,
    pub shape: Vec<usize>,
    pub data: Vec<f64>,
}

fn numel(s: &[usize]) -> usize {
    s.iter().product()
}

fn strides(s: &[usize]) -> Vec<usize> {
    let mut st = vec![1; s.len()];
    for i in (0..s.len().saturating_sub(1)).rev() {
        st[i] = st[i + 1] * s[i + 1];
    }
    st
}

fn unravel(mut i: usize, s: &[usize]) -> Vec<usize> {
    let mut out = vec![0; s.len()];
    for d in (0..s.len()).rev() {
        if s[d] > 0 {
            out[d] = i % s[d];
            i /= s[d];
        }
    }
    out
}

fn ravel(idx: &[usize], s: &[usize]) -> usize {
    idx.iter().zip(strides(s)).map(|(i, st)| i * st).sum()
}

pub fn round_to(d: DType, v: f64) -> f64 {
    match d {
        DType::F32 => v as f32 as f64,
        DType::F16 => half::f16::from_f64(v).to_f64(),
        DType::BF16 => half::bf16::from_f64(v).to_f64(),
        DType::Bool => {
            if v != 0.0 {
                1.0
            } else {
                0.0
            }
        }
        d if d.is_int() => {
            if v.is_nan() {
                0.0
            } else {
                let t = v.trunc();
                match d {
                    DType::I8 => (t as i64 as i8) as f64,
                    DType::I16 => (t as i64 as i16) as f64,
                    DType::I32 => (t as i64 as i32) as f64,
                    DType::U8 => (t as i64 as u8) as f64,
                    _ => t,
                }
            }
        }
        _ => v,
    }
}

impl T {
    fn new(dtype: DType, shape: Vec<usize>, data: Vec<f64>) -> T {
        let data = data.into_iter().map(|v| round_to(dtype, v)).collect();
        T { dtype, shape, data }
    }
    fn at(&self, idx: &[usize]) -> f64 {
        self.data[ravel(idx, &self.shape)]
    }
}

fn ints<'a>(a: &'a Attrs, n: &str) -> &'a [i64] {
    a.ints(n).unwrap_or_else(|| panic!("attr {n}"))
}

fn static_shape(dims: &[Dim], syms: &HashMap<String, i64>) -> Vec<usize> {
    dims.iter()
        .map(|d| match d {
            Dim::Static(n) => *n as usize,
            Dim::Sym(e) => e.eval(&|s| syms.get(s).copied()).unwrap_or_else(|| panic!("unknown symbol in {e}")) as usize,
        })
        .collect()
}

fn erf(x: f64) -> f64 {
    libm::erf(x)
}

/// Runs `main` on `args` (symbol values inferred from the argument shapes).
pub fn run(m: &Module, args: &[T]) -> Vec<T> {
    let f = m.main_func().expect("main");
    let block = m.entry_block(f);
    let mut env: HashMap<ValueId, T> = HashMap::new();
    let mut syms: HashMap<String, i64> = HashMap::new();
    for (i, &v) in m.blocks[block].args.iter().enumerate() {
        let t = &args[i];
        let ty = m.value_type(v);
        assert_eq!(ty.rank(), t.shape.len(), "arg {i} rank: {ty} vs {:?}", t.shape);
        for (d, &n) in ty.dims.iter().zip(&t.shape) {
            if let Dim::Sym(e) = d {
                // solve a linear size c*s + k = n for its one symbol
                if let [s] = e.symbols().as_slice() {
                    let at = |v: i64| e.eval(&|_| Some(v));
                    if let (Some(k), Some(c1)) = (at(0), at(1)) {
                        let c = c1 - k;
                        if c != 0 && (n as i64 - k) % c == 0 {
                            syms.insert(s.to_string(), (n as i64 - k) / c);
                        }
                    }
                }
            }
        }
        let mut t = t.clone();
        t.dtype = ty.dtype;
        env.insert(v, t);
    }
    for op in m.ops_in(block) {
        let od = m.op(op);
        let xs: Vec<&T> = od.operands.iter().map(|v| env.get(v).expect("operand")).collect();
        if od.opcode == Opcode::Return {
            return xs.into_iter().cloned().collect();
        }
        let rts: Vec<(DType, Vec<usize>)> =
            od.results.iter().map(|&r| (m.value_type(r).dtype, static_shape(&m.value_type(r).dims, &syms))).collect();
        let outs = eval(od.opcode, &xs, &od.attrs, &rts);
        for (k, (&r, t)) in od.results.iter().zip(outs).enumerate() {
            assert_eq!(t.shape, rts[k].1, "{} result shape", od.opcode);
            env.insert(r, t);
        }
    }
    panic!("no return");
}

fn ew1(x: &T, rt: &(DType, Vec<usize>), f: impl Fn(f64) -> f64) -> T {
    T::new(rt.0, rt.1.clone(), x.data.iter().map(|&v| f(v)).collect())
}

fn ew2(x: &T, y: &T, rt: &(DType, Vec<usize>), f: impl Fn(f64, f64) -> f64) -> T {
    assert_eq!(x.shape, y.shape, "elementwise shapes");
    T::new(rt.0, rt.1.clone(), x.data.iter().zip(&y.data).map(|(&a, &b)| f(a, b)).collect())
}

fn int_op(a: f64, b: f64, f: impl Fn(i64, i64) -> i64) -> f64 {
    f(a as i64, b as i64) as f64
}

fn identity(kind: &str, d: DType) -> f64 {
    match kind {
        "sum" | "add" | "or" => 0.0,
        "prod" | "mul" | "and" => 1.0,
        "max" => {
            if d.is_float() {
                f64::NEG_INFINITY
            } else if d == DType::Bool || d.is_unsigned_int() {
                0.0
            } else {
                match d {
                    DType::I8 => i8::MIN as f64,
                    DType::I16 => i16::MIN as f64,
                    DType::I32 => i32::MIN as f64,
                    _ => i64::MIN as f64,
                }
            }
        }
        "min" => {
            if d.is_float() {
                f64::INFINITY
            } else if d == DType::Bool {
                1.0
            } else {
                match d {
                    DType::I8 => i8::MAX as f64,
                    DType::I16 => i16::MAX as f64,
                    DType::I32 => i32::MAX as f64,
                    DType::U8 => u8::MAX as f64,
                    _ => i64::MAX as f64,
                }
            }
        }
        _ => panic!("kind {kind}"),
    }
}

fn combine(kind: &str, a: f64, b: f64) -> f64 {
    match kind {
        "sum" | "add" => a + b,
        "prod" | "mul" => a * b,
        "max" => {
            if a.is_nan() || b.is_nan() {
                f64::NAN
            } else {
                a.max(b)
            }
        }
        "min" => {
            if a.is_nan() || b.is_nan() {
                f64::NAN
            } else {
                a.min(b)
            }
        }
        "and" => f64::from(u8::from(a != 0.0 && b != 0.0)),
        "or" => f64::from(u8::from(a != 0.0 || b != 0.0)),
        "replace" => b,
        _ => panic!("kind {kind}"),
    }
}

fn softmax_rows(x: &T, dim: usize, log: bool) -> Vec<f64> {
    let mut out = x.data.clone();
    let n = x.shape[dim];
    let st = strides(&x.shape)[dim];
    for base in 0..x.data.len() {
        let idx = unravel(base, &x.shape);
        if idx[dim] != 0 {
            continue;
        }
        let vals: Vec<f64> = (0..n).map(|k| x.data[base + k * st]).collect();
        let m = vals.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let m = if m.is_finite() { m } else { 0.0 };
        let s: f64 = vals.iter().map(|v| (v - m).exp()).sum();
        for k in 0..n {
            out[base + k * st] = if log { vals[k] - m - s.ln() } else { (vals[k] - m).exp() / s };
        }
    }
    out
}

fn eval(op: Opcode, xs: &[&T], a: &Attrs, rts: &[(DType, Vec<usize>)]) -> Vec<T> {
    use Opcode::*;
    let rt = &rts[0];
    let r = |t: T| vec![t];
    match op {
        Constant => {
            let v = a.tensor("value").expect("value");
            let n = numel(&rt.1);
            r(T::new(rt.0, rt.1.clone(), (0..n).map(|i| v.element(i).as_f64()).collect()))
        }
        Iota => {
            let d = a.int("dimension").unwrap() as usize;
            let n = numel(&rt.1);
            r(T::new(rt.0, rt.1.clone(), (0..n).map(|i| unravel(i, &rt.1)[d] as f64).collect()))
        }
        Abs => r(ew1(xs[0], rt, f64::abs)),
        Neg => r(ew1(xs[0], rt, |v| -v)),
        Exp => r(ew1(xs[0], rt, f64::exp)),
        Expm1 => r(ew1(xs[0], rt, f64::exp_m1)),
        Log => r(ew1(xs[0], rt, f64::ln)),
        Log1p => r(ew1(xs[0], rt, f64::ln_1p)),
        Sqrt => r(ew1(xs[0], rt, f64::sqrt)),
        Rsqrt => r(ew1(xs[0], rt, |v| 1.0 / v.sqrt())),
        Tanh => r(ew1(xs[0], rt, f64::tanh)),
        Logistic => r(ew1(xs[0], rt, |v| 1.0 / (1.0 + (-v).exp()))),
        Sin => r(ew1(xs[0], rt, f64::sin)),
        Cos => r(ew1(xs[0], rt, f64::cos)),
        Tan => r(ew1(xs[0], rt, f64::tan)),
        Erf => r(ew1(xs[0], rt, erf)),
        Floor => r(ew1(xs[0], rt, f64::floor)),
        Ceil => r(ew1(xs[0], rt, f64::ceil)),
        RoundEven => r(ew1(xs[0], rt, |v| {
            let f = v.floor();
            let d = v - f;
            if d > 0.5 || (d == 0.5 && f % 2.0 != 0.0) {
                f + 1.0
            } else {
                f
            }
        })),
        Sign => r(ew1(xs[0], rt, |v| if v.is_nan() { v } else if v > 0.0 { 1.0 } else if v < 0.0 { -1.0 } else { 0.0 })),
        Not => {
            let b = xs[0].dtype == DType::Bool;
            r(ew1(xs[0], rt, |v| if b { f64::from(u8::from(v == 0.0)) } else { !(v as i64) as f64 }))
        }
        IsFinite => r(ew1(xs[0], rt, |v| f64::from(u8::from(v.is_finite())))),
        Convert => {
            let to_bool = rt.0 == DType::Bool;
            r(ew1(xs[0], rt, |v| if to_bool { f64::from(u8::from(v != 0.0)) } else { v }))
        }
        Add => r(ew2(xs[0], xs[1], rt, |a, b| a + b)),
        Sub => r(ew2(xs[0], xs[1], rt, |a, b| a - b)),
        Mul => r(ew2(xs[0], xs[1], rt, |a, b| a * b)),
        Div => {
            let int = rt.0.is_int();
            r(ew2(xs[0], xs[1], rt, |a, b| if int { if b == 0.0 { -1.0 } else { (a / b).trunc() } } else { a / b }))
        }
        Rem => r(ew2(xs[0], xs[1], rt, |a, b| a % b)),
        Pow => r(ew2(xs[0], xs[1], rt, f64::powf)),
        Max => r(ew2(xs[0], xs[1], rt, |a, b| combine("max", a, b))),
        Min => r(ew2(xs[0], xs[1], rt, |a, b| combine("min", a, b))),
        And => {
            let b = rt.0 == DType::Bool;
            r(ew2(xs[0], xs[1], rt, |x, y| if b { combine("and", x, y) } else { int_op(x, y, |p, q| p & q) }))
        }
        Or => {
            let b = rt.0 == DType::Bool;
            r(ew2(xs[0], xs[1], rt, |x, y| if b { combine("or", x, y) } else { int_op(x, y, |p, q| p | q) }))
        }
        Xor => {
            let b = rt.0 == DType::Bool;
            r(ew2(xs[0], xs[1], rt, |x, y| if b { f64::from(u8::from((x != 0.0) != (y != 0.0))) } else { int_op(x, y, |p, q| p ^ q) }))
        }
        Atan2 => r(ew2(xs[0], xs[1], rt, f64::atan2)),
        Compare => {
            let dir = a.str("direction").unwrap().to_string();
            r(ew2(xs[0], xs[1], rt, move |x, y| {
                f64::from(u8::from(match dir.as_str() {
                    "eq" => x == y,
                    "ne" => x != y,
                    "lt" => x < y,
                    "le" => x <= y,
                    "gt" => x > y,
                    _ => x >= y,
                }))
            }))
        }
        Select => {
            let (p, t, f) = (xs[0], xs[1], xs[2]);
            r(T::new(rt.0, rt.1.clone(), (0..p.data.len()).map(|i| if p.data[i] != 0.0 { t.data[i] } else { f.data[i] }).collect()))
        }
        BroadcastInDim => {
            let bd = ints(a, "broadcast_dimensions");
            let x = xs[0];
            let n = numel(&rt.1);
            r(T::new(
                rt.0,
                rt.1.clone(),
                (0..n)
                    .map(|i| {
                        let ri = unravel(i, &rt.1);
                        let xi: Vec<usize> = bd.iter().enumerate().map(|(k, &d)| if x.shape[k] == 1 { 0 } else { ri[d as usize] }).collect();
                        x.at(&xi)
                    })
                    .collect(),
            ))
        }
        Reshape => {
            assert_eq!(xs[0].data.len(), numel(&rt.1));
            r(T::new(rt.0, rt.1.clone(), xs[0].data.clone()))
        }
        Transpose => {
            let p = ints(a, "permutation");
            let x = xs[0];
            let n = numel(&rt.1);
            r(T::new(
                rt.0,
                rt.1.clone(),
                (0..n)
                    .map(|i| {
                        let ri = unravel(i, &rt.1);
                        let mut xi = vec![0; p.len()];
                        for (k, &pk) in p.iter().enumerate() {
                            xi[pk as usize] = ri[k];
                        }
                        x.at(&xi)
                    })
                    .collect(),
            ))
        }
        Slice => {
            let s = ints(a, "start_indices");
            let st = ints(a, "strides");
            let x = xs[0];
            let n = numel(&rt.1);
            r(T::new(
                rt.0,
                rt.1.clone(),
                (0..n)
                    .map(|i| {
                        let ri = unravel(i, &rt.1);
                        let xi: Vec<usize> = ri.iter().enumerate().map(|(k, &v)| s[k] as usize + v * st[k] as usize).collect();
                        x.at(&xi)
                    })
                    .collect(),
            ))
        }
        Concatenate => {
            let d = a.int("dimension").unwrap() as usize;
            let n = numel(&rt.1);
            let mut offs = vec![0];
            for x in xs {
                offs.push(offs.last().unwrap() + x.shape[d]);
            }
            r(T::new(
                rt.0,
                rt.1.clone(),
                (0..n)
                    .map(|i| {
                        let mut ri = unravel(i, &rt.1);
                        let k = (0..xs.len()).find(|&k| ri[d] < offs[k + 1]).unwrap();
                        ri[d] -= offs[k];
                        xs[k].at(&ri)
                    })
                    .collect(),
            ))
        }
        Pad => {
            let lo = ints(a, "edge_padding_low");
            let it = ints(a, "interior_padding");
            let x = xs[0];
            let pv = xs[1].data[0];
            let mut out = vec![pv; numel(&rt.1)];
            for i in 0..x.data.len() {
                let xi = unravel(i, &x.shape);
                let pos: Vec<i64> = xi.iter().enumerate().map(|(k, &v)| lo[k] + v as i64 * (it[k] + 1)).collect();
                if pos.iter().zip(&rt.1).all(|(&p, &s)| p >= 0 && (p as usize) < s) {
                    let pu: Vec<usize> = pos.iter().map(|&p| p as usize).collect();
                    out[ravel(&pu, &rt.1)] = x.data[i];
                }
            }
            r(T::new(rt.0, rt.1.clone(), out))
        }
        Reverse => {
            let ds = ints(a, "dimensions");
            let x = xs[0];
            r(T::new(
                rt.0,
                rt.1.clone(),
                (0..x.data.len())
                    .map(|i| {
                        let mut ri = unravel(i, &rt.1);
                        for &d in ds {
                            ri[d as usize] = x.shape[d as usize] - 1 - ri[d as usize];
                        }
                        x.at(&ri)
                    })
                    .collect(),
            ))
        }
        DotGeneral => {
            let (lb, rb, lc, rc) =
                (ints(a, "lhs_batching_dimensions"), ints(a, "rhs_batching_dimensions"), ints(a, "lhs_contracting_dimensions"), ints(a, "rhs_contracting_dimensions"));
            let (x, y) = (xs[0], xs[1]);
            let lfree: Vec<usize> = (0..x.shape.len()).filter(|d| !lb.contains(&(*d as i64)) && !lc.contains(&(*d as i64))).collect();
            let rfree: Vec<usize> = (0..y.shape.len()).filter(|d| !rb.contains(&(*d as i64)) && !rc.contains(&(*d as i64))).collect();
            let cshape: Vec<usize> = lc.iter().map(|&d| x.shape[d as usize]).collect();
            let cn = numel(&cshape);
            let n = numel(&rt.1);
            let mut out = Vec::with_capacity(n);
            for i in 0..n {
                let ri = unravel(i, &rt.1);
                let mut xi = vec![0; x.shape.len()];
                let mut yi = vec![0; y.shape.len()];
                for (k, (&l, &rr)) in lb.iter().zip(rb).enumerate() {
                    xi[l as usize] = ri[k];
                    yi[rr as usize] = ri[k];
                }
                for (k, &d) in lfree.iter().enumerate() {
                    xi[d] = ri[lb.len() + k];
                }
                for (k, &d) in rfree.iter().enumerate() {
                    yi[d] = ri[lb.len() + lfree.len() + k];
                }
                let mut acc = 0.0;
                for c in 0..cn {
                    let ci = unravel(c, &cshape);
                    for (k, (&l, &rr)) in lc.iter().zip(rc).enumerate() {
                        xi[l as usize] = ci[k];
                        yi[rr as usize] = ci[k];
                    }
                    acc += x.at(&xi) * y.at(&yi);
                }
                out.push(acc);
            }
            r(T::new(rt.0, rt.1.clone(), out))
        }
        Convolution => r(conv(xs[0], xs[1], a, rt)),
        Reduce => {
            let dims: Vec<usize> = ints(a, "dimensions").iter().map(|&d| d as usize).collect();
            let kind = a.str("kind").unwrap();
            let x = xs[0];
            let mut out = vec![identity(kind, x.dtype); numel(&rt.1)];
            for i in 0..x.data.len() {
                let xi = unravel(i, &x.shape);
                let ri: Vec<usize> = xi.iter().enumerate().filter(|(k, _)| !dims.contains(k)).map(|(_, &v)| v).collect();
                let o = ravel(&ri, &rt.1);
                out[o] = combine(kind, out[o], x.data[i]);
            }
            r(T::new(rt.0, rt.1.clone(), out))
        }
        ArgReduce => {
            let d = a.int("dimension").unwrap() as usize;
            let max = a.str("kind").unwrap() == "argmax";
            let x = xs[0];
            let mut best = vec![(f64::NAN, usize::MAX); numel(&rt.1)];
            for i in 0..x.data.len() {
                let xi = unravel(i, &x.shape);
                let ri: Vec<usize> = xi.iter().enumerate().filter(|(k, _)| *k != d).map(|(_, &v)| v).collect();
                let o = ravel(&ri, &rt.1);
                let v = x.data[i];
                let (bv, bi) = best[o];
                let better = bi == usize::MAX || v.is_nan() && !bv.is_nan() || if max { v > bv } else { v < bv } || (v == bv && xi[d] < bi);
                if better {
                    best[o] = (v, xi[d]);
                }
            }
            r(T::new(rt.0, rt.1.clone(), best.into_iter().map(|(_, i)| i as f64).collect()))
        }
        ReduceWindow => r(reduce_window(xs[0], a, rt)),
        Gather => r(gather(xs[0], xs[1], a, rt)),
        Scatter => r(scatter(xs[0], xs[1], xs[2], a, rt)),
        Sort => {
            let d = a.int("dimension").unwrap() as usize;
            let desc = a.bool("descending").unwrap();
            let x = xs[0];
            let n = x.shape[d];
            let st = strides(&x.shape)[d];
            let mut vals = x.data.clone();
            let mut idxs = vec![0.0; x.data.len()];
            for base in 0..x.data.len() {
                if unravel(base, &x.shape)[d] != 0 {
                    continue;
                }
                let mut row: Vec<(f64, usize)> = (0..n).map(|k| (x.data[base + k * st], k)).collect();
                let key = |v: f64| if v.is_nan() { f64::INFINITY } else { v };
                row.sort_by(|p, q| {
                    let o = key(p.0).partial_cmp(&key(q.0)).unwrap();
                    if desc {
                        o.reverse()
                    } else {
                        o
                    }
                });
                for (k, (v, i)) in row.into_iter().enumerate() {
                    vals[base + k * st] = v;
                    idxs[base + k * st] = i as f64;
                }
            }
            vec![T::new(rts[0].0, rts[0].1.clone(), vals), T::new(rts[1].0, rts[1].1.clone(), idxs)]
        }
        Scan => {
            let d = a.int("dimension").unwrap() as usize;
            let kind = a.str("kind").unwrap();
            let x = xs[0];
            let st = strides(&x.shape)[d];
            let mut out = x.data.clone();
            for i in 0..x.data.len() {
                if unravel(i, &x.shape)[d] > 0 {
                    out[i] = round_to(x.dtype, combine(kind, out[i - st], x.data[i]));
                }
            }
            r(T::new(rt.0, rt.1.clone(), out))
        }
        Softmax | LogSoftmax => {
            let d = a.int("dimension").unwrap() as usize;
            r(T::new(rt.0, rt.1.clone(), softmax_rows(xs[0], d, op == LogSoftmax)))
        }
        Gelu => {
            let tanh = a.str("approximate").unwrap() == "tanh";
            r(ew1(xs[0], rt, |x| {
                if tanh {
                    0.5 * x * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x)).tanh())
                } else {
                    0.5 * x * (1.0 + erf(x / std::f64::consts::SQRT_2))
                }
            }))
        }
        LayerNorm => {
            let k = a.int("normalized_rank").unwrap() as usize;
            let eps = a.float("epsilon").unwrap();
            let x = xs[0];
            let inner: usize = x.shape[x.shape.len() - k..].iter().product();
            let rows = x.data.len() / inner.max(1);
            let mut y = vec![0.0; x.data.len()];
            let mut means = vec![0.0; rows];
            let mut rstds = vec![0.0; rows];
            for rr in 0..rows {
                let s = &x.data[rr * inner..(rr + 1) * inner];
                let m = s.iter().sum::<f64>() / inner as f64;
                let v = s.iter().map(|v| (v - m) * (v - m)).sum::<f64>() / inner as f64;
                let rs = 1.0 / (v + eps).sqrt();
                for j in 0..inner {
                    y[rr * inner + j] = (s[j] - m) * rs;
                }
                means[rr] = m;
                rstds[rr] = rs;
            }
            vec![T::new(rts[0].0, rts[0].1.clone(), y), T::new(rts[1].0, rts[1].1.clone(), means), T::new(rts[2].0, rts[2].1.clone(), rstds)]
        }
        Attention => r(attention(xs, a, rt)),
        #[allow(unreachable_patterns)]
        _ => panic!("interpreter: {op} not supported"),
    }
}

fn conv(x: &T, w: &T, a: &Attrs, rt: &(DType, Vec<usize>)) -> T {
    let ws = ints(a, "window_strides");
    let pad = ints(a, "padding");
    let ld = ints(a, "lhs_dilation");
    let rd = ints(a, "rhs_dilation");
    let g = a.int("feature_group_count").unwrap() as usize;
    let bg = a.int("batch_group_count").unwrap() as usize;
    let sp = x.shape.len() - 2;
    let (nb, c) = (x.shape[0], x.shape[1]);
    let (o, ci) = (w.shape[0], w.shape[1]);
    let out_shape = rt.1.clone();
    let n_out = numel(&out_shape);
    let mut out = vec![0.0; n_out];
    let og = o / g; // output features per feature group
    let ob = o / bg; // output features per batch group
    let nbg = nb / bg;
    let kshape: Vec<usize> = w.shape[2..].to_vec();
    let kn = numel(&kshape);
    for (oi, slot) in out.iter_mut().enumerate() {
        let idx = unravel(oi, &out_shape);
        let (n, f) = (idx[0], idx[1]);
        let fg = f / og; // feature group
        let bgi = f / ob; // batch group
        let bn = bgi * nbg + n;
        let mut acc = 0.0;
        for cin in 0..ci {
            let xc = fg * ci + cin;
            if xc >= c {
                continue;
            }
            for kk in 0..kn {
                let k = unravel(kk, &kshape);
                let mut xi = vec![bn, xc];
                let mut ok = true;
                for s in 0..sp {
                    let p = idx[2 + s] as i64 * ws[s] + k[s] as i64 * rd[s] - pad[2 * s];
                    if p < 0 || p % ld[s] != 0 {
                        ok = false;
                        break;
                    }
                    let q = (p / ld[s]) as usize;
                    if q >= x.shape[2 + s] {
                        ok = false;
                        break;
                    }
                    xi.push(q);
                }
                if !ok {
                    continue;
                }
                let mut wi = vec![f, cin];
                wi.extend(k.iter());
                acc += x.at(&xi) * w.at(&wi);
            }
        }
        *slot = acc;
    }
    T::new(rt.0, out_shape, out)
}

fn reduce_window(x: &T, a: &Attrs, rt: &(DType, Vec<usize>)) -> T {
    let kind = a.str("kind").unwrap();
    let wd = ints(a, "window_dimensions");
    let ws = ints(a, "window_strides");
    let bd = ints(a, "base_dilations");
    let wdl = ints(a, "window_dilations");
    let pad = ints(a, "padding");
    let r = x.shape.len();
    let wshape: Vec<usize> = wd.iter().map(|&v| v as usize).collect();
    let wn = numel(&wshape);
    let init = identity(kind, x.dtype);
    let n = numel(&rt.1);
    let mut out = vec![init; n];
    for (oi, slot) in out.iter_mut().enumerate() {
        let idx = unravel(oi, &rt.1);
        let mut acc = init;
        for kk in 0..wn {
            let k = unravel(kk, &wshape);
            let mut xi = Vec::with_capacity(r);
            let mut ok = true;
            for d in 0..r {
                let p = idx[d] as i64 * ws[d] + k[d] as i64 * wdl[d] - pad[2 * d];
                if p < 0 || p % bd[d] != 0 || (p / bd[d]) as usize >= x.shape[d] {
                    ok = false;
                    break;
                }
                xi.push((p / bd[d]) as usize);
            }
            let v = if ok { x.at(&xi) } else { init };
            acc = combine(kind, acc, v);
        }
        *slot = acc;
    }
    T::new(rt.0, rt.1.clone(), out)
}

fn index_vector(idx: &T, batch: &[usize], ivd: usize) -> Vec<i64> {
    if ivd == idx.shape.len() {
        return vec![idx.at(batch) as i64];
    }
    (0..idx.shape[ivd])
        .map(|k| {
            let mut full = batch.to_vec();
            full.insert(ivd, k);
            idx.at(&full) as i64
        })
        .collect()
}

fn gather(x: &T, ix: &T, a: &Attrs, rt: &(DType, Vec<usize>)) -> T {
    let offset_dims: Vec<usize> = ints(a, "offset_dims").iter().map(|&v| v as usize).collect();
    let collapsed = ints(a, "collapsed_slice_dims");
    let obatch = ints(a, "operand_batching_dims");
    let ibatch = ints(a, "start_indices_batching_dims");
    let sim = ints(a, "start_index_map");
    let ivd = a.int("index_vector_dim").unwrap() as usize;
    let sizes = ints(a, "slice_sizes");
    let r = x.shape.len();
    let n = numel(&rt.1);
    let batch_dims: Vec<usize> = (0..rt.1.len()).filter(|d| !offset_dims.contains(d)).collect();
    let window_operand_dims: Vec<usize> = (0..r).filter(|d| !collapsed.contains(&(*d as i64)) && !obatch.contains(&(*d as i64))).collect();
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let ri = unravel(i, &rt.1);
        let bi: Vec<usize> = batch_dims.iter().map(|&d| ri[d]).collect();
        let start = index_vector(ix, &bi, ivd);
        let mut xi = vec![0i64; r];
        for (k, &d) in sim.iter().enumerate() {
            let d = d as usize;
            let size = if sizes[d] < 0 { x.shape[d] as i64 } else { sizes[d] };
            xi[d] = start[k].clamp(0, x.shape[d] as i64 - size);
        }
        for (k, &d) in obatch.iter().enumerate() {
            let ds = ibatch[k] as usize;
            let pos = if ds < ivd { ds } else { ds - 1 };
            xi[d as usize] += bi[pos] as i64;
        }
        for (k, &d) in window_operand_dims.iter().enumerate() {
            xi[d] += ri[offset_dims[k]] as i64;
        }
        let xu: Vec<usize> = xi.iter().map(|&v| v as usize).collect();
        out.push(x.at(&xu));
    }
    T::new(rt.0, rt.1.clone(), out)
}

fn scatter(x: &T, ix: &T, upd: &T, a: &Attrs, rt: &(DType, Vec<usize>)) -> T {
    let uwd: Vec<usize> = ints(a, "update_window_dims").iter().map(|&v| v as usize).collect();
    let iwd = ints(a, "inserted_window_dims");
    let ibd = ints(a, "input_batching_dims");
    let sibd = ints(a, "scatter_indices_batching_dims");
    let sdod = ints(a, "scatter_dims_to_operand_dims");
    let ivd = a.int("index_vector_dim").unwrap() as usize;
    let kind = a.str("kind").unwrap();
    let r = x.shape.len();
    let mut out = x.data.clone();
    let scatter_dims: Vec<usize> = (0..upd.shape.len()).filter(|d| !uwd.contains(d)).collect();
    let window_operand_dims: Vec<usize> = (0..r).filter(|d| !iwd.contains(&(*d as i64)) && !ibd.contains(&(*d as i64))).collect();
    for i in 0..upd.data.len() {
        let ui = unravel(i, &upd.shape);
        let si: Vec<usize> = scatter_dims.iter().map(|&d| ui[d]).collect();
        let start = index_vector(ix, &si, ivd);
        let mut xi = vec![0i64; r];
        for (k, &d) in sdod.iter().enumerate() {
            xi[d as usize] = start[k];
        }
        for (k, &d) in ibd.iter().enumerate() {
            let ds = sibd[k] as usize;
            let pos = if ds < ivd { ds } else { ds - 1 };
            xi[d as usize] += si[pos] as i64;
        }
        for (k, &d) in window_operand_dims.iter().enumerate() {
            xi[d] += ui[uwd[k]] as i64;
        }
        if xi.iter().zip(&x.shape).all(|(&v, &s)| v >= 0 && (v as usize) < s) {
            let xu: Vec<usize> = xi.iter().map(|&v| v as usize).collect();
            let o = ravel(&xu, &x.shape);
            out[o] = round_to(x.dtype, combine(kind, out[o], upd.data[i]));
        }
    }
    T::new(rt.0, rt.1.clone(), out)
}

fn attention(xs: &[&T], a: &Attrs, rt: &(DType, Vec<usize>)) -> T {
    let (q, k, v) = (xs[0], xs[1], xs[2]);
    let mask = xs.get(3);
    let scale = a.float("scale").unwrap();
    let causal = a.bool("is_causal").unwrap();
    let r = q.shape.len();
    let (l, e) = (q.shape[r - 2], q.shape[r - 1]);
    let s = k.shape[r - 2];
    let ev = v.shape[r - 1];
    let batch: usize = q.shape[..r - 2].iter().product();
    let mut out = vec![0.0; numel(&rt.1)];
    for b in 0..batch {
        let bidx = unravel(b, &q.shape[..r - 2]);
        for i in 0..l {
            let mut scores = vec![f64::NEG_INFINITY; s];
            for j in 0..s {
                if causal && j > i {
                    continue;
                }
                let mut acc = 0.0;
                for t in 0..e {
                    let mut qi = bidx.clone();
                    qi.extend([i, t]);
                    let mut ki = bidx.clone();
                    ki.extend([j, t]);
                    acc += q.at(&qi) * k.at(&ki);
                }
                let mut sc = acc * scale;
                if let Some(m) = mask {
                    // broadcast the mask to [..., L, S]
                    let mr = m.shape.len();
                    let mut full = bidx.clone();
                    full.extend([i, j]);
                    let mi: Vec<usize> = (0..mr).map(|d| {
                        let fd = full.len() - mr + d;
                        if m.shape[d] == 1 { 0 } else { full[fd] }
                    }).collect();
                    let mv = m.at(&mi);
                    if m.dtype == DType::Bool {
                        if mv == 0.0 {
                            sc = f64::NEG_INFINITY;
                        }
                    } else {
                        sc += mv;
                    }
                }
                scores[j] = sc;
            }
            let mx = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let p: Vec<f64> = if mx == f64::NEG_INFINITY { vec![0.0; s] } else { scores.iter().map(|x| (x - mx).exp()).collect() };
            let sum: f64 = p.iter().sum();
            for t in 0..ev {
                let mut acc = 0.0;
                for j in 0..s {
                    if p[j] == 0.0 {
                        continue;
                    }
                    let mut vi = bidx.clone();
                    vi.extend([j, t]);
                    acc += p[j] / sum * v.at(&vi);
                }
                let mut oi = bidx.clone();
                oi.extend([i, t]);
                out[ravel(&oi, &rt.1)] = acc;
            }
        }
    }
    T::new(rt.0, rt.1.clone(), out)
}
