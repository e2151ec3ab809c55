//! Columnar evaluation of mask and index arithmetic, for the passes that prove facts about a
//! computed mask (`sdpa-guard`, `fuse`'s causal check).
//!
//! The exact evaluator goes element by element through `Scalar`s and bytes; a causal mask of a
//! 128-token model (13 ops over 16K elements) cost it about 3 ms per proof. Here a value is a
//! row-major `Vec<f64>` and each op one loop, for the few ops such masks are made of: constants,
//! `iota`, `broadcast_in_dim`, `reshape`, `transpose`, `convert`, `add`/`sub`/`mul`/`max`/`min`/
//! `neg`/`abs`, `compare`, `select` and the bool `and`/`or`/`xor`/`not`.
//!
//! Every result is the value the exact evaluator gives (a property test checks it), or `None`
//! (the caller then uses the exact evaluator): f64 holds bools, i32 and i64 values below 2^53
//! and f32/f64 values exactly; integer results must stay in that range and in their dtype's
//! (no wrapping here), float results are rounded to f32 after every op on f32, and only bool,
//! i32, i64, f32 and f64 take part.

use super::eval_value;
use std::collections::HashMap;
use tpuc_ir::{payload, DType, Module, Opcode, Scalar, ValueId};

/// A static-shaped value as numbers in row-major order.
#[derive(Clone, Debug)]
struct Col {
    dims: Vec<i64>,
    dtype: DType,
    vals: Vec<f64>,
}

const EXACT_INT: f64 = 9_007_199_254_740_992.0; // 2^53

fn handled(d: DType) -> bool {
    matches!(d, DType::Bool | DType::I32 | DType::I64 | DType::F32 | DType::F64)
}

/// Rounds `x` to what `dtype` stores, or `None` if it does not hold `x` exactly (integers) or
/// is not handled here.
fn fit(dtype: DType, x: f64) -> Option<f64> {
    match dtype {
        DType::F64 => Some(x),
        DType::F32 => Some(x as f32 as f64),
        DType::Bool => Some(if x != 0.0 { 1.0 } else { 0.0 }),
        // `+ 0.0` turns an integer -0 (from negating 0) into 0.
        DType::I32 => (x.fract() == 0.0 && x >= i32::MIN as f64 && x <= i32::MAX as f64).then_some(x + 0.0),
        DType::I64 => (x.fract() == 0.0 && x.abs() < EXACT_INT).then_some(x + 0.0),
        _ => None,
    }
}

/// The value of `v` and its static dims as f64s (bools 0/1): columnar when every op on the
/// way is one of those above, else through the exact evaluator. `None` when neither can.
pub fn eval_f64s(m: &Module, v: ValueId, limit: i64) -> Option<(Vec<i64>, Vec<f64>)> {
    let mut memo = HashMap::new();
    if let Some(c) = col(m, v, limit, &mut memo, 0) {
        return Some((c.dims, c.vals));
    }
    let t = eval_value(m, v, limit)?;
    Some((t.ty.static_dims()?, super::to_f64s(&t)))
}

fn col(m: &Module, v: ValueId, limit: i64, memo: &mut HashMap<ValueId, Option<Col>>, depth: usize) -> Option<Col> {
    if let Some(c) = memo.get(&v) {
        return c.clone();
    }
    let r = if depth > 256 { None } else { col_uncached(m, v, limit, memo, depth) };
    memo.insert(v, r.clone());
    r
}

fn col_uncached(m: &Module, v: ValueId, limit: i64, memo: &mut HashMap<ValueId, Option<Col>>, depth: usize) -> Option<Col> {
    let op = crate::util::def_op(m, v)?;
    let d = &m.ops[op];
    let ty = &m.values[v].ty;
    let dims = ty.static_dims()?;
    let n = ty.num_elements()?;
    if d.results().len() != 1 || !handled(ty.dtype) || n > limit {
        return None;
    }
    let dtype = ty.dtype;
    let mut args = Vec::with_capacity(d.operands().len());
    for &x in d.operands() {
        args.push(col(m, x, limit, memo, depth + 1)?);
    }
    let n = n as usize;
    let a = &d.attrs;
    let vals: Vec<f64> = match d.opcode() {
        Opcode::Constant => {
            let t = payload::Constant::of(a)?.value;
            let read = |s: Scalar| match s {
                Scalar::Float(f) => Some(f),
                Scalar::Int(i) => Some(i as f64),
                Scalar::UInt(u) => Some(u as f64),
                Scalar::Bool(b) => Some(f64::from(u8::from(b))),
            };
            if let Some(s) = t.splat_value() {
                vec![fit(dtype, read(s)?)?; n]
            } else {
                (0..n).map(|i| read(t.element(i)).and_then(|x| fit(dtype, x))).collect::<Option<_>>()?
            }
        }
        Opcode::Iota => {
            let dim = usize::try_from(payload::Iota::of(a)?.dimension).ok().filter(|&k| k < dims.len())?;
            let inner: i64 = dims[dim + 1..].iter().product();
            (0..n as i64).map(|i| fit(dtype, ((i / inner) % dims[dim]) as f64)).collect::<Option<_>>()?
        }
        Opcode::Reshape => args[0].vals.clone(),
        Opcode::BroadcastInDim => {
            let x = &args[0];
            let bd = payload::BroadcastInDim::of(a)?.broadcast_dimensions;
            let xs = super::strides(&x.dims);
            // Source stride of each result dim (0 where the operand has no such dim or size 1).
            let mut src = vec![0i64; dims.len()];
            for (k, &rd) in bd.iter().enumerate() {
                if x.dims[k] != 1 {
                    src[usize::try_from(rd).ok()?] = xs[k];
                }
            }
            gather(&dims, &src, &x.vals)
        }
        Opcode::Transpose => {
            let x = &args[0];
            let p = payload::Transpose::of(a)?.permutation;
            let xs = super::strides(&x.dims);
            let src: Vec<i64> = p.iter().map(|&k| xs[k as usize]).collect();
            gather(&dims, &src, &x.vals)
        }
        Opcode::Convert => {
            // Float to integer rounds in ways not mirrored here.
            if args[0].dtype.is_float() && !dtype.is_float() && dtype != DType::Bool {
                return None;
            }
            args[0].vals.iter().map(|&x| fit(dtype, x)).collect::<Option<_>>()?
        }
        Opcode::Neg | Opcode::Abs => {
            let f = if d.opcode() == Opcode::Neg { |x: f64| -x } else { f64::abs };
            args[0].vals.iter().map(|&x| fit(dtype, f(x))).collect::<Option<_>>()?
        }
        Opcode::Not if dtype == DType::Bool => args[0].vals.iter().map(|&x| if x != 0.0 { 0.0 } else { 1.0 }).collect(),
        Opcode::Add | Opcode::Sub | Opcode::Mul | Opcode::Max | Opcode::Min => {
            if dtype == DType::Bool {
                return None;
            }
            let f: fn(f64, f64) -> f64 = match d.opcode() {
                Opcode::Add => |x, y| x + y,
                Opcode::Sub => |x, y| x - y,
                Opcode::Mul => |x, y| x * y,
                // NaN propagates through max and min, as in XLA.
                Opcode::Max => |x, y| if x.is_nan() || y.is_nan() { f64::NAN } else { x.max(y) },
                _ => |x, y| if x.is_nan() || y.is_nan() { f64::NAN } else { x.min(y) },
            };
            zip(&args[0].vals, &args[1].vals, |x, y| fit(dtype, f(x, y)))?
        }
        Opcode::And | Opcode::Or | Opcode::Xor if dtype == DType::Bool => {
            let f: fn(bool, bool) -> bool = match d.opcode() {
                Opcode::And => |x, y| x && y,
                Opcode::Or => |x, y| x || y,
                _ => |x, y| x != y,
            };
            zip(&args[0].vals, &args[1].vals, |x, y| Some(f64::from(u8::from(f(x != 0.0, y != 0.0)))))?
        }
        Opcode::Compare => {
            let dir = payload::Compare::of(a)?.direction;
            zip(&args[0].vals, &args[1].vals, |x, y| Some(f64::from(u8::from(dir.holds(x.partial_cmp(&y))))))?
        }
        Opcode::Select => {
            let (p, t, f) = (&args[0].vals, &args[1].vals, &args[2].vals);
            (0..n).map(|i| if p[i] != 0.0 { t[i] } else { f[i] }).collect()
        }
        _ => return None,
    };
    (vals.len() == n).then_some(Col { dims, dtype, vals })
}

/// Result element at multi-index `idx` = `src[Σ idx[d] · src_stride[d]]`, in row-major order:
/// the innermost dim as one strided run, the source offset of the outer dims kept up to date
/// incrementally.
fn gather(dims: &[i64], src_stride: &[i64], src: &[f64]) -> Vec<f64> {
    let n: i64 = dims.iter().product();
    let mut out = Vec::with_capacity(n.max(0) as usize);
    let Some(last) = dims.len().checked_sub(1) else {
        out.extend(src.first().copied());
        return out;
    };
    if n <= 0 {
        return out;
    }
    let (run, step) = (dims[last], src_stride[last]);
    let mut idx = vec![0i64; last];
    let mut base = 0i64;
    loop {
        let mut o = base;
        for _ in 0..run {
            out.push(src[o as usize]);
            o += step;
        }
        // The next index of the outer dims, row-major.
        let mut d = last;
        loop {
            if d == 0 {
                return out;
            }
            d -= 1;
            idx[d] += 1;
            base += src_stride[d];
            if idx[d] < dims[d] {
                break;
            }
            base -= src_stride[d] * dims[d];
            idx[d] = 0;
        }
    }
}

fn zip(x: &[f64], y: &[f64], f: impl Fn(f64, f64) -> Option<f64>) -> Option<Vec<f64>> {
    if x.len() != y.len() {
        return None;
    }
    x.iter().zip(y).map(|(&a, &b)| f(a, b)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use tpuc_ir::{ArgInfo, AttrEnum, Builder, Direction, TensorData, TensorType};

    /// Random graphs of the handled ops over [3, 4] values, some with dtypes or results the
    /// columnar path refuses; wherever both evaluate, they must agree bit for bit.
    fn build(steps: &[(u8, usize, usize, u8)]) -> (Module, ValueId) {
        let mut m = Module::new();
        let (_, b) = m.add_func("main", Vec::<(TensorType, ArgInfo)>::new());
        let mut bl = Builder::new(&mut m, b);
        let dts = [DType::I64, DType::F32, DType::I32, DType::F64, DType::Bool, DType::I8];
        let mut pool: Vec<ValueId> = Vec::new();
        for (i, dt) in dts.iter().enumerate() {
            let t = TensorType::from_static(*dt, &[3, 4]);
            if *dt != DType::Bool {
                pool.push(bl.iota(t.clone(), (i % 2) as i64).unwrap());
            }
            let vals: Vec<Scalar> = (0..12)
                .map(|k| match dt {
                    DType::Bool => Scalar::Bool(k % 3 == 0),
                    d if d.is_float() => Scalar::Float([0.5, -1.25, f64::INFINITY, f64::NEG_INFINITY, f64::NAN, 3e9, 1e-8, 2.0][k % 8]),
                    _ => Scalar::Int([0, -1, 7, i64::from(i32::MAX), -5, 3][k % 6]),
                })
                .collect();
            let bytes: Vec<u8> = vals.iter().flat_map(|s| s.to_bytes(*dt)).collect();
            let data = TensorData::new(t.clone(), bytes.into()).unwrap();
            pool.push(bl.constant(data).unwrap());
        }
        for &(k, x, y, z) in steps {
            let (a, c) = (pool[x % pool.len()], pool[y % pool.len()]);
            let (ta, tc) = (bl.ty(a).clone(), bl.ty(c).clone());
            let r = match k % 9 {
                0 => bl.binary([Opcode::Add, Opcode::Sub, Opcode::Mul, Opcode::Max, Opcode::Min][z as usize % 5], a, c).ok(),
                1 => bl.compare(Direction::ALL[z as usize % 6], a, c).ok(),
                2 => bl.convert(a, dts[z as usize % dts.len()]).ok(),
                3 => bl.unary([Opcode::Neg, Opcode::Abs, Opcode::Not][z as usize % 3], a).ok(),
                4 if tc.dtype == DType::Bool => {
                    let t = pool.iter().copied().find(|&p| bl.ty(p) == &ta);
                    t.and_then(|t| bl.select(c, a, t).ok())
                }
                5 => bl.transpose(a, &[1, 0]).and_then(|t| bl.reshape(t, vec![12i64.into()])).and_then(|r| bl.reshape(r, vec![3i64.into(), 4i64.into()])).ok(),
                6 => {
                    let row = bl.slice(a, &[0, 0], &[1, 4], &[1, 1]).ok();
                    row.and_then(|r| bl.broadcast_in_dim(r, &[0, 1], vec![3i64.into(), 4i64.into()]).ok())
                }
                7 => bl.binary([Opcode::And, Opcode::Or, Opcode::Xor][z as usize % 3], a, c).ok(),
                _ => {
                    let two = TensorData::splat(TensorType::scalar(ta.dtype), Scalar::Int(2)).unwrap();
                    let s = bl.build1(Opcode::Constant, &[], payload::Constant { value: &two }.attrs(), None).ok();
                    s.and_then(|s| bl.broadcast_in_dim(s, &[], ta.dims.to_vec()).ok())
                }
            };
            if let Some(r) = r {
                pool.push(r);
            }
        }
        let last = *pool.last().unwrap();
        (m, last)
    }

    #[test]
    fn gather_walks_every_index_in_row_major_order() {
        // A [2, 3, 4] transpose of a [4, 3, 2] source, a broadcast along a size-1 stride,
        // a scalar and an empty result.
        let src: Vec<f64> = (0..24).map(f64::from).collect();
        let (dims, strides) = ([2i64, 3, 4], [1i64, 2, 6]);
        let mut want = Vec::new();
        for i in 0..2 {
            for j in 0..3 {
                for k in 0..4 {
                    want.push(src[(i * strides[0] + j * strides[1] + k * strides[2]) as usize]);
                }
            }
        }
        assert_eq!(gather(&dims, &strides, &src), want);
        assert_eq!(gather(&[2, 3], &[0, 1], &src[..3]), vec![0.0, 1.0, 2.0, 0.0, 1.0, 2.0]);
        assert_eq!(gather(&[], &[], &[7.0]), vec![7.0]);
        assert!(gather(&[2, 0, 3], &[0, 0, 1], &src).is_empty());
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, failure_persistence: None, ..ProptestConfig::default() })]
        #[test]
        fn columns_agree_with_the_exact_evaluator(steps in prop::collection::vec((0u8..9, 0usize..64, 0usize..64, 0u8..12), 1..12)) {
            let (m, v) = build(&steps);
            let mut memo = HashMap::new();
            if let (Some(c), Some(t)) = (col(&m, v, 1 << 20, &mut memo, 0), eval_value(&m, v, 1 << 20)) {
                let want = crate::eval::to_f64s(&t);
                let same = c.vals.len() == want.len() && c.vals.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()));
                prop_assert!(same, "{}\ncolumns {:?}\nexact   {:?}", tpuc_ir::print_module(&m), c.vals, want);
            }
        }
    }
}
