//! `narrow-64bit`: TPU legalization of 64-bit types. TPUs have no f64 and emulate 64-bit
//! integers with pairs of 32-bit ones.
//!
//! Needs: a verified module before `fuse` (op regions are left as they are).
//! Guarantees:
//! - every f64 value inside a function is computed as f32 (constants rounded to f32, iotas and
//!   ops retyped); f64 arguments are converted to f32 where the body starts and f64 results are
//!   converted back before `return`, so callers keep the signature PyTorch promised (these
//!   boundary converts carry `tpuc.boundary = true`, which the driver's TPU check accepts);
//! - an i64 value becomes i32 when an interval analysis proves it fits (iotas, constants,
//!   converts from narrower integers, and the shape arithmetic, comparisons, selects, shape
//!   ops, gathers and min/max/sum reductions built on them) and every operand it must share a
//!   dtype with is narrowed too; where a narrowed value meets a wide one it is converted back
//!   to i64; narrowed results are converted back before `return`;
//! - an i64 gather or scatter index whose range is unknown (e.g. token ids from an argument)
//!   is saturated to the i32 range and converted: gather clamps start indices into the operand
//!   and scatter skips out-of-bounds updates, so saturating first changes no result.
//!
//! The pass's note lists what was narrowed. Changed when anything was.

use crate::util::{func_blocks, Inserter};
use crate::{Pass, PassError};
use bytes::Bytes;
use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use tpuc_ir::{payload, Attrs, DType, Module, OpId, Opcode, ReduceKind, Scalar, TensorData, TensorType, ValueId};

#[derive(Default)]
pub struct Narrow64 {
    notes: RefCell<Vec<String>>,
}

type Range = (i128, i128);

/// Marks the converts at the function boundary (`check_target_support` accepts f64 there).
fn boundary() -> Attrs {
    Attrs::new().with("tpuc.boundary", tpuc_ir::Attr::Bool(true))
}
const I32: Range = (i32::MIN as i128, i32::MAX as i128);

fn fits(r: Range) -> bool {
    r.0 >= I32.0 && r.1 <= I32.1
}

fn union(a: Range, b: Range) -> Range {
    (a.0.min(b.0), a.1.max(b.1))
}

/// Operand indices that must have the same dtype as each other, and whether the (first)
/// result shares it.
fn dtype_group(op: Opcode, n: usize) -> (Vec<usize>, bool) {
    use Opcode::*;
    match op {
        Constant | Iota | Convert | Composite | Return | Yield => (vec![], false),
        Compare => (vec![0, 1], false),
        Select => (vec![1, 2], true),
        IsFinite => (vec![0], false),
        ArgReduce => (vec![0], false),
        Gather => (vec![0], true),
        Scatter => (vec![0, 2], true),
        Pad => (vec![0, 1], true),
        Sort | BroadcastInDim | Reshape | Transpose | Slice | Reverse | Reduce | ReduceWindow | Scan => (vec![0], true),
        _ => ((0..n).collect(), true),
    }
}

#[derive(Default)]
struct Counts {
    f64_values: usize,
    f64_args: usize,
    i64_values: usize,
    results: usize,
    indices: usize,
}

struct State {
    /// Values retyped, with their original dtype.
    narrowed: HashMap<ValueId, DType>,
    /// Known ranges of integer values.
    range: HashMap<ValueId, Range>,
    counts: Counts,
}

impl State {
    fn range_of(&self, m: &Module, v: ValueId) -> Option<Range> {
        self.range.get(&v).copied().or_else(|| {
            let d = self.narrowed.get(&v).copied().unwrap_or(m.values[v].ty.dtype);
            if d == DType::I64 || d == DType::U64 {
                None
            } else {
                d.int_range()
            }
        })
    }
}

fn int_data_range(t: &TensorData) -> Option<Range> {
    let n = if t.is_splat() { 1 } else { t.ty.num_elements()? as usize };
    let mut r: Option<Range> = None;
    for i in 0..n {
        let x = match t.element(i) {
            Scalar::Int(i) => i as i128,
            Scalar::UInt(u) => u as i128,
            Scalar::Bool(b) => b as i128,
            Scalar::Float(_) => return None,
        };
        r = Some(r.map_or((x, x), |r| union(r, (x, x))));
    }
    Some(r.unwrap_or((0, 0)))
}

/// The same data in `to` (values known to fit for integers; floats rounded).
fn retype_data(t: &TensorData, to: DType) -> Option<TensorData> {
    let ty = t.ty.with_dtype(to);
    if t.is_splat() {
        let s = t.element(0);
        return TensorData::splat(ty, s).ok();
    }
    let n = t.ty.num_elements()? as usize;
    let mut out = Vec::with_capacity(n * to.size_bytes());
    for i in 0..n {
        out.extend_from_slice(&t.element(i).to_bytes(to));
    }
    TensorData::new(ty, Bytes::from(out)).ok()
}

/// The range of an op's (first) integer result from its operands' ranges.
fn result_range(m: &Module, st: &State, op: OpId) -> Option<Range> {
    use Opcode::*;
    let d = &m.ops[op];
    let r = |i: usize| st.range_of(m, d.operands()[i]);
    let rt = &m.values[d.results()[0]].ty;
    Some(match d.opcode() {
        Constant => int_data_range(d.payload::<payload::Constant>().value)?,
        Iota => {
            let n = rt.dims.get(d.payload::<payload::Iota>().dimension as usize)?.as_static()?;
            (0, (n - 1).max(0) as i128)
        }
        ArgReduce => {
            let x = &m.values[d.operands()[0]].ty;
            let n = x.dims.get(d.payload::<payload::ArgReduce>().dimension as usize)?.as_static()?;
            (0, (n - 1).max(0) as i128)
        }
        Convert => {
            let from = m.values[d.operands()[0]].ty.dtype;
            if from.is_float() || from.is_complex() {
                return None;
            }
            r(0)?
        }
        Add => {
            let (a, b) = (r(0)?, r(1)?);
            (a.0 + b.0, a.1 + b.1)
        }
        Sub => {
            let (a, b) = (r(0)?, r(1)?);
            (a.0 - b.1, a.1 - b.0)
        }
        Mul => {
            let (a, b) = (r(0)?, r(1)?);
            let p = [a.0 * b.0, a.0 * b.1, a.1 * b.0, a.1 * b.1];
            (*p.iter().min()?, *p.iter().max()?)
        }
        Neg => {
            let a = r(0)?;
            (-a.1, -a.0)
        }
        Abs => {
            let a = r(0)?;
            let hi = a.0.abs().max(a.1.abs());
            (if a.0 >= 0 { a.0 } else if a.1 <= 0 { -a.1 } else { 0 }, hi)
        }
        Sign => (-1, 1),
        Max => {
            let (a, b) = (r(0)?, r(1)?);
            (a.0.max(b.0), a.1.max(b.1))
        }
        Min => {
            let (a, b) = (r(0)?, r(1)?);
            (a.0.min(b.0), a.1.min(b.1))
        }
        Div => {
            let a = r(0)?;
            let ma = a.0.abs().max(a.1.abs());
            (-ma, ma)
        }
        Rem => {
            let (a, b) = (r(0)?, r(1)?);
            let mb = (b.0.abs().max(b.1.abs()) - 1).max(0);
            let ma = a.0.abs().max(a.1.abs());
            let k = ma.min(mb);
            (if a.0 >= 0 { 0 } else { -k }, if a.1 <= 0 { 0 } else { k })
        }
        Not => {
            let a = r(0)?;
            (-a.1 - 1, -a.0 - 1)
        }
        And | Or | Xor => {
            let (a, b) = (r(0)?, r(1)?);
            if a.0 < 0 || b.0 < 0 {
                return None;
            }
            if d.opcode() == And {
                (0, a.1.min(b.1))
            } else {
                let top = a.1.max(b.1);
                (0, ((top as u128) + 1).next_power_of_two() as i128 - 1)
            }
        }
        Select => union(r(1)?, r(2)?),
        BroadcastInDim | Reshape | Transpose | Slice | Reverse | Gather | Sort => r(0)?,
        Pad => union(r(0)?, r(1)?),
        Concatenate => (0..d.operands().len()).map(r).collect::<Option<Vec<_>>>()?.into_iter().reduce(union)?,
        Reduce | Scan => {
            let a = r(0)?;
            let x = &m.values[d.operands()[0]].ty;
            let (n, kind): (i128, ReduceKind) = if d.opcode() == Reduce {
                let payload::Reduce { dimensions, kind } = d.payload();
                let static_dim = |i: i64| x.dims.get(i as usize).and_then(|d| d.as_static()).map(|v| v as i128);
                (dimensions.iter().map(|&i| static_dim(i)).product::<Option<i128>>()?, kind)
            } else {
                let payload::Scan { dimension, kind } = d.payload();
                (x.dims.get(dimension as usize)?.as_static()? as i128, kind.into())
            };
            match kind {
                ReduceKind::Max | ReduceKind::Min => a,
                ReduceKind::Sum => (a.0.min(n * a.0), a.1.max(n * a.1)),
                ReduceKind::Prod | ReduceKind::And | ReduceKind::Or => return None,
            }
        }
        _ => return None,
    })
}

impl Narrow64 {
    fn block(&self, m: &mut Module, b: tpuc_ir::BlockId, is_entry_of_func: bool) -> Result<Counts, PassError> {
        let fail = |e: tpuc_ir::IrError| crate::failed(crate::PassId::Narrow64.name(), e);
        let mut st = State { narrowed: HashMap::new(), range: HashMap::new(), counts: Counts::default() };
        // f64 arguments: converted once where the body starts.
        if is_entry_of_func {
            let args = m.blocks[b].args().to_vec();
            let mut after: Option<OpId> = None;
            for a in args {
                if m.values[a].ty.dtype != DType::F64 {
                    continue;
                }
                let ty = m.values[a].ty.with_dtype(DType::F32);
                let c = m.create_op(Opcode::Convert, &[a], boundary(), Some(&[ty]), &[]).map_err(fail)?;
                let cv = m.ops[c].results()[0];
                m.replace_all_uses(a, cv);
                m.set_operand(c, 0, a);
                match after {
                    Some(p) => m.insert_op_after(p, c),
                    None => m.prepend_op(b, c),
                }
                after = Some(c);
                st.counts.f64_args += 1;
            }
        }
        let mut skip: HashSet<OpId> = HashSet::new();
        for op in m.block_ops(b) {
            if skip.contains(&op) {
                continue;
            }
            let opcode = m.ops[op].opcode();
            if opcode == Opcode::Return || opcode == Opcode::Yield {
                // Back to the promised dtypes at the boundary.
                let n = m.ops[op].operands().len();
                for i in 0..n {
                    let v = m.ops[op].operands()[i];
                    if let Some(&orig) = st.narrowed.get(&v) {
                        let ty = m.values[v].ty.with_dtype(orig);
                        let w = Inserter::before(m, op).build1(Opcode::Convert, &[v], boundary(), Some(ty)).map_err(fail)?;
                        m.set_operand(op, i, w);
                        st.counts.results += 1;
                    }
                }
                continue;
            }
            let n = m.ops[op].operands().len();
            let (group, shares) = dtype_group(opcode, n);
            // f64 results: always computed as f32.
            let results = m.ops[op].results().to_vec();
            let mut retyped_f64 = false;
            for &r in &results {
                if m.values[r].ty.dtype == DType::F64 && m.ops[op].regions().is_empty() {
                    m.values[r].ty.dtype = DType::F32;
                    st.narrowed.insert(r, DType::F64);
                    st.counts.f64_values += 1;
                    retyped_f64 = true;
                }
            }
            if retyped_f64 && opcode == Opcode::Constant {
                if let Some(t) = retype_data(m.ops[op].payload::<payload::Constant>().value, DType::F32) {
                    m.ops[op].attrs.update(payload::Constant { value: &t }.attrs());
                }
            }
            // i64: narrow the result when its range fits and its dtype group is narrowed.
            let res0 = results.first().copied();
            let int_result = res0.filter(|&r| m.values[r].ty.dtype == DType::I64 && !st.narrowed.contains_key(&r));
            let group_i64: Vec<usize> = group
                .iter()
                .copied()
                .filter(|&i| {
                    let v = m.ops[op].operands()[i];
                    st.narrowed.get(&v) == Some(&DType::I64) || m.values[v].ty.dtype == DType::I64
                })
                .collect();
            let group_narrowed = group_i64.iter().all(|&i| st.narrowed.get(&m.ops[op].operands()[i]) == Some(&DType::I64));
            let mut narrow_result = false;
            if let Some(r) = int_result {
                let range = result_range(m, &st, op);
                if let Some(range) = range {
                    st.range.insert(r, range);
                }
                let ok_opcode = !matches!(opcode, Opcode::Sort | Opcode::Scatter | Opcode::DotGeneral | Opcode::Convolution | Opcode::ReduceWindow | Opcode::Composite);
                narrow_result = ok_opcode && m.ops[op].regions().is_empty() && range.is_some_and(fits) && (!shares || group_narrowed);
                if opcode == Opcode::Constant && narrow_result {
                    match retype_data(m.ops[op].payload::<payload::Constant>().value, DType::I32) {
                        Some(t) => m.ops[op].attrs.update(payload::Constant { value: &t }.attrs()),
                        None => narrow_result = false,
                    }
                }
                if narrow_result {
                    m.values[r].ty.dtype = DType::I32;
                    st.narrowed.insert(r, DType::I64);
                    st.counts.i64_values += 1;
                }
            }
            // Where a narrowed i64 meets a wide one, widen it back.
            let widen_group = !m.ops[op].regions().is_empty() || (!group_narrowed) || (shares && int_result.is_some() && !narrow_result);
            if widen_group {
                let idx: Vec<usize> = if m.ops[op].regions().is_empty() { group_i64.clone() } else { (0..n).collect() };
                for i in idx {
                    let v = m.ops[op].operands()[i];
                    if let Some(&orig) = st.narrowed.get(&v) {
                        if orig == DType::I64 || !m.ops[op].regions().is_empty() {
                            let w = Inserter::before(m, op).convert(v, orig).map_err(fail)?;
                            m.set_operand(op, i, w);
                        }
                    }
                }
            }
            // Unknown-range i64 indices of gathers and scatters: saturate to i32.
            if matches!(opcode, Opcode::Gather | Opcode::Scatter) {
                let idx = m.ops[op].operands()[1];
                if m.values[idx].ty.dtype == DType::I64 && m.values[idx].ty.is_static() {
                    let ty = m.values[idx].ty.clone();
                    let mut ins = Inserter::before(m, op);
                    let lo = ins.constant(TensorData::splat(ty.clone(), Scalar::Int(i32::MIN as i64)).map_err(|e| crate::failed(crate::PassId::Narrow64.name(), e))?).map_err(fail)?;
                    let hi = ins.constant(TensorData::splat(ty.clone(), Scalar::Int(i32::MAX as i64)).map_err(|e| crate::failed(crate::PassId::Narrow64.name(), e))?).map_err(fail)?;
                    let a = ins.build1(Opcode::Min, &[idx, hi], Attrs::new(), None).map_err(fail)?;
                    let c = ins.build1(Opcode::Max, &[a, lo], Attrs::new(), None).map_err(fail)?;
                    let n32 = ins.build1(Opcode::Convert, &[c], Attrs::new(), Some(TensorType::clone(&ty).with_dtype(DType::I32))).map_err(fail)?;
                    m.set_operand(op, 1, n32);
                    st.counts.indices += 1;
                    for v in [lo, hi, a, c, n32] {
                        if let Some(o) = crate::util::def_op(m, v) {
                            skip.insert(o);
                        }
                    }
                }
            }
        }
        Ok(st.counts)
    }
}

impl Pass for Narrow64 {
    fn name(&self) -> &'static str {
        crate::PassId::Narrow64.name()
    }

    fn run(&self, m: &mut Module) -> Result<bool, PassError> {
        self.notes.borrow_mut().clear();
        let mut total = Counts::default();
        for b in func_blocks(m) {
            let c = self.block(m, b, true)?;
            total.f64_values += c.f64_values;
            total.f64_args += c.f64_args;
            total.i64_values += c.i64_values;
            total.results += c.results;
            total.indices += c.indices;
        }
        let changed = total.f64_values + total.f64_args + total.i64_values + total.indices > 0;
        if changed {
            let n = |k: usize, one: &str, many: &str| format!("{k} {}", if k == 1 { one } else { many });
            let mut parts = Vec::new();
            if total.f64_values + total.f64_args > 0 {
                parts.push(format!(
                    "{} computed as f32 ({} converted on entry)",
                    n(total.f64_values, "f64 value", "f64 values"),
                    n(total.f64_args, "f64 argument", "f64 arguments")
                ));
            }
            if total.i64_values > 0 {
                parts.push(format!("{} that fit computed as i32 (iotas, constants, index and shape arithmetic)", n(total.i64_values, "i64 value", "i64 values")));
            }
            if total.indices > 0 {
                parts.push(format!("{} saturated to i32", n(total.indices, "i64 gather/scatter index", "i64 gather/scatter indices")));
            }
            if total.results > 0 {
                parts.push(format!("{} converted back to 64 bits at the return", n(total.results, "result", "results")));
            }
            self.notes.borrow_mut().push(format!("TPU legalization narrowed {}", parts.join("; ")));
        }
        Ok(changed)
    }

    fn notes(&self) -> Vec<String> {
        self.notes.borrow().clone()
    }
}
