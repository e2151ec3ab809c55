//! Tensor creation: full/zeros/ones (and `_like` / `new_` forms), scalar_tensor, arange,
//! linspace, eye, tril/triu. Empty tensors are created as zeros (their contents are
//! undefined in torch).

use crate::ops::build::*;
use Opcode as O;
use tpuc_ir::Direction;

pub const OPS: &[(&str, OpFn)] = &[
    ("full.default", full),
    ("full_like.default", full_like),
    ("zeros.default", zeros),
    ("ones.default", ones),
    ("empty.memory_format", zeros),
    ("empty_strided.default", zeros),
    ("empty_permuted.default", zeros),
    ("zeros_like.default", zeros_like),
    ("ones_like.default", ones_like),
    ("empty_like.default", zeros_like),
    ("new_zeros.default", new_zeros),
    ("new_ones.default", new_ones),
    ("new_empty.default", new_zeros),
    ("new_empty_strided.default", new_zeros),
    ("new_full.default", new_full),
    ("fill.Scalar", fill),
    ("fill.Tensor", fill),
    ("zero.default", zero),
    ("scalar_tensor.default", scalar_tensor),
    ("arange.default", arange),
    ("arange.start", arange),
    ("arange.start_step", arange),
    ("linspace.default", linspace),
    ("eye.default", eye),
    ("eye.m", eye),
    ("tril.default", tril),
    ("triu.default", triu),
];

/// The dtype of a Python number when no dtype is given: bool, i64 or the default float.
fn num_dtype(n: Num) -> DType {
    match n {
        Num::Bool(_) => DType::Bool,
        Num::Int(_) => DType::I64,
        Num::Float(_) => dtypes::DEFAULT_FLOAT,
    }
}

fn full(cx: &mut Ctx) -> R<Vec<Val>> {
    let dims = cx.size_dims("size")?;
    let v = cx.num("fill_value")?;
    let dt = cx.opt_dtype("dtype")?.unwrap_or(num_dtype(v));
    one(cx.full(v.scalar(), dt, &dims)?)
}

fn filled(cx: &mut Ctx, value: Num, default: DType) -> R<Vec<Val>> {
    let dims = cx.size_dims("size")?;
    let dt = cx.opt_dtype("dtype")?.unwrap_or(default);
    one(cx.full(value.scalar(), dt, &dims)?)
}
fn zeros(cx: &mut Ctx) -> R<Vec<Val>> {
    filled(cx, Num::Int(0), dtypes::DEFAULT_FLOAT)
}
fn ones(cx: &mut Ctx) -> R<Vec<Val>> {
    filled(cx, Num::Int(1), dtypes::DEFAULT_FLOAT)
}

fn like(cx: &mut Ctx, value: Num) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let dt = cx.opt_dtype("dtype")?.unwrap_or(cx.dtype(x));
    let dims = cx.dims(x);
    one(cx.full(value.scalar(), dt, &dims)?)
}
fn full_like(cx: &mut Ctx) -> R<Vec<Val>> {
    let v = cx.num("fill_value")?;
    like(cx, v)
}
fn zeros_like(cx: &mut Ctx) -> R<Vec<Val>> {
    like(cx, Num::Int(0))
}
fn ones_like(cx: &mut Ctx) -> R<Vec<Val>> {
    like(cx, Num::Int(1))
}
fn zero(cx: &mut Ctx) -> R<Vec<Val>> {
    like(cx, Num::Int(0))
}
fn fill(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let v = cx.operand("value")?;
    let dt = cx.dtype(x);
    let dims = cx.dims(x);
    one(cx.mat(&v, dt, &dims)?)
}

fn new_filled(cx: &mut Ctx, value: Num) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let dt = cx.opt_dtype("dtype")?.unwrap_or(cx.dtype(x));
    let dims = cx.size_dims("size")?;
    one(cx.full(value.scalar(), dt, &dims)?)
}
fn new_zeros(cx: &mut Ctx) -> R<Vec<Val>> {
    new_filled(cx, Num::Int(0))
}
fn new_ones(cx: &mut Ctx) -> R<Vec<Val>> {
    new_filled(cx, Num::Int(1))
}
fn new_full(cx: &mut Ctx) -> R<Vec<Val>> {
    let v = cx.num("fill_value")?;
    new_filled(cx, v)
}

fn scalar_tensor(cx: &mut Ctx) -> R<Vec<Val>> {
    let v = cx.num("s")?;
    let dt = cx.opt_dtype("dtype")?.unwrap_or(dtypes::DEFAULT_FLOAT);
    one(cx.scalar(v.scalar(), dt)?)
}

/// A Python-number-or-SymInt argument of arange.
enum Bound {
    Num(Num),
    Sym(SymExpr),
}

fn bound(cx: &Ctx, name: &str, default: Option<Num>) -> R<Bound> {
    match cx.opt(name)? {
        None => default.map(Bound::Num).ok_or_else(|| OpError::Refused(format!("missing argument `{name}`"))),
        Some(Arg::SymInt(s)) => {
            let e = cx.sym_of(&s)?;
            Ok(match e.as_const() {
                Some(c) => Bound::Num(Num::Int(c)),
                None => Bound::Sym(e),
            })
        }
        Some(Arg::Tensor(_)) => match cx.opt_sym(name) {
            Ok(Some(e)) => Ok(match e.as_const() {
                Some(c) => Bound::Num(Num::Int(c)),
                None => Bound::Sym(e),
            }),
            _ => Ok(Bound::Num(cx.num(name)?)),
        },
        Some(_) => Ok(Bound::Num(cx.num(name)?)),
    }
}

fn arange(cx: &mut Ctx) -> R<Vec<Val>> {
    let has_start = cx.has("start");
    let start = if has_start { bound(cx, "start", None)? } else { Bound::Num(Num::Int(0)) };
    let end = bound(cx, "end", None)?;
    let step = bound(cx, "step", Some(Num::Int(1)))?;
    let any_float = [&start, &end, &step].iter().any(|b| matches!(b, Bound::Num(Num::Float(_))));
    let dt = cx.opt_dtype("dtype")?.unwrap_or(if any_float { dtypes::DEFAULT_FLOAT } else { DType::I64 });
    let step_n = match step {
        Bound::Num(n) => n,
        Bound::Sym(_) => return err("arange with a symbolic step is not supported"),
    };
    let start_n = match start {
        Bound::Num(n) => n,
        Bound::Sym(_) => return err("arange with a symbolic start is not supported"),
    };
    match end {
        Bound::Sym(e) => {
            // arange(start, n, step) over integers
            if any_float {
                return err("arange with a symbolic end and float bounds is not supported");
            }
            let (s, st) = (start_n.scalar().as_i64(), step_n.scalar().as_i64());
            if st <= 0 {
                return err("arange with a symbolic end needs a positive step");
            }
            let v = sym_range(cx, &SymExpr::constant(s), e, st)?;
            one(cx.convert(v, dt)?)
        }
        Bound::Num(end_n) => {
            let (s, e, st) = (start_n.as_f64(), end_n.as_f64(), step_n.as_f64());
            if st == 0.0 || !st.is_finite() || !s.is_finite() || !e.is_finite() {
                return err("arange needs a finite, non-zero step and finite bounds");
            }
            if (e - s) / st < 0.0 {
                return err("arange: upper bound and step have different signs");
            }
            let n = ((e - s) / st).ceil();
            if n > MAX_SIZE as f64 {
                return err("arange is too long");
            }
            let n = n as i64;
            let ints = dt.is_int() || !any_float && s.fract() == 0.0 && st.fract() == 0.0 && (s.abs() + st.abs() * n as f64) < (1u64 << 24) as f64;
            if ints && !any_float {
                let mut v = cx.iota(DType::I64, &[Dim::Static(n)], 0)?;
                if st != 1.0 {
                    v = cx.bin_c(O::Mul, v, st)?;
                }
                if s != 0.0 {
                    v = cx.bin_c(O::Add, v, s)?;
                }
                return one(cx.convert(v, dt)?);
            }
            if n > 1 << 24 {
                return err("arange with float bounds is too long");
            }
            // start + step * i in double, rounded once to the dtype (the CPU kernel's form)
            let vals: Vec<f64> = (0..n).map(|i| s + st * i as f64).collect();
            if dt.is_int() {
                let iv: Vec<i64> = vals.iter().map(|&v| v as i64).collect();
                let c = cx.const_i64(&[n], &iv)?;
                return one(cx.convert(c, dt)?);
            }
            one(cx.const_f(&[n], &vals, dt)?)
        }
    }
}

fn linspace(cx: &mut Ctx) -> R<Vec<Val>> {
    let s = cx.num("start")?.as_f64();
    let e = cx.num("end")?.as_f64();
    let steps = cx.int("steps")?;
    if !(0..=1 << 24).contains(&steps) {
        return err(format!("linspace steps {steps} out of range"));
    }
    let dt = cx.opt_dtype("dtype")?.unwrap_or(dtypes::DEFAULT_FLOAT);
    // ATen's CPU kernel: the first half counts up from start, the second down from end; the
    // float kernels compute each point as one fused multiply-add.
    let half = steps / 2;
    let vals: Vec<f64> = if dt.is_int() {
        let step = if steps > 1 { (e - s) / (steps - 1) as f64 } else { 0.0 };
        (0..steps).map(|i| if i < half { s + step * i as f64 } else { e - step * (steps - i - 1) as f64 }).collect()
    } else if dt == DType::F64 {
        let step = if steps > 1 { (e - s) / (steps - 1) as f64 } else { 0.0 };
        (0..steps).map(|i| if i < half { step.mul_add(i as f64, s) } else { (-step).mul_add((steps - i - 1) as f64, e) }).collect()
    } else {
        let (s, e) = (s as f32, e as f32);
        let step = if steps > 1 { (e - s) / (steps - 1) as f32 } else { 0.0 };
        (0..steps).map(|i| (if i < half { step.mul_add(i as f32, s) } else { (-step).mul_add((steps - i - 1) as f32, e) }) as f64).collect()
    };
    if dt.is_int() {
        let iv: Vec<i64> = vals.iter().map(|&v| v as i64).collect();
        let c = cx.const_i64(&[steps], &iv)?;
        return one(cx.convert(c, dt)?);
    }
    one(cx.const_f(&[steps], &vals, dt)?)
}

fn eye(cx: &mut Ctx) -> R<Vec<Val>> {
    let n = cx.int("n")?;
    let m = cx.opt_int("m")?.unwrap_or(n);
    if !(0..=MAX_SIZE).contains(&n) || !(0..=MAX_SIZE).contains(&m) {
        return err("eye size out of range");
    }
    let dt = cx.opt_dtype("dtype")?.unwrap_or(dtypes::DEFAULT_FLOAT);
    let shape = [Dim::Static(n), Dim::Static(m)];
    let r = cx.iota(DType::I64, &shape, 0)?;
    let c = cx.iota(DType::I64, &shape, 1)?;
    let eq = cx.cmp(Direction::Eq, r, c)?;
    one(cx.convert(eq, dt)?)
}

/// Keeps elements with `col - row` <= diagonal (lower) or >= diagonal (upper).
fn triangle(cx: &mut Ctx, lower: bool) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let d = cx.int("diagonal")?;
    let dims = cx.dims(x);
    let r = dims.len();
    if r < 2 {
        return err("tril/triu need a tensor of rank >= 2");
    }
    let shape = [dims[r - 2].clone(), dims[r - 1].clone()];
    let rows = cx.iota(DType::I64, &shape, 0)?;
    let cols = cx.iota(DType::I64, &shape, 1)?;
    let diff = cx.bin(O::Sub, cols, rows)?;
    let dv = cx.full_like(Scalar::Int(d), diff)?;
    let keep = cx.cmp(if lower { Direction::Le } else { Direction::Ge }, diff, dv)?;
    let keep = cx.broadcast_to(keep, &dims)?;
    let z = cx.full_like(Scalar::Int(0), x)?;
    one(cx.select(keep, x, z)?)
}
fn tril(cx: &mut Ctx) -> R<Vec<Val>> {
    triangle(cx, true)
}
fn triu(cx: &mut Ctx) -> R<Vec<Val>> {
    triangle(cx, false)
}
