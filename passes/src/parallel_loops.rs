//! `parallel-loops` (XLA CPU): the activation operand of a linear layer's matmul is passed
//! through always-true `select`s, so the loop kernel XLA fuses to compute it is split over
//! the CPU threads.
//!
//! Why: XLA CPU's `ParallelTaskAssigner` splits an elementwise loop fusion across threads only
//! when its cost model calls it big enough: a memory-bound fusion (modeled flops ≤ bytes
//! accessed) needs 512 KB of traffic, a compute-bound one `flops + 10·bytes ≥ 200 000`. The
//! kernel that produces a matmul's activations (a layer norm's normalization, attention's
//! head merge with the softmax division) is memory-bound and, for `M x K ≤ 64K` elements,
//! stays on one thread; the thread pool's worker then goes idle and the matmul that follows
//! (YNNPACK, on both threads) starts on one thread until the worker wakes up (tens of µs on
//! the 2-core VM it was measured on: the profiler shows the worker's region starting 25-35 µs
//! after the matmul). The always-true `select(iota_a + iota_b > c, y, 0)`s count two
//! modeled flops per element each (compare and select; the sum of iotas along two dims keeps
//! XLA from narrowing the compare to one dim); four of them make even a kernel with no flops
//! of its own and 8 bytes per element (one f32 read, one written) compute-bound, and XLA
//! splits it in two. They cost a few µs of vector work and leave every value unchanged.
//!
//! Measured (XLA CPU plugin of jaxlib 0.10.2, 2 cores, shuffled multi-process medians, time
//! relative to torch_xla's program): the GPT-2 block (d_model 256, seq 128), whose two layer
//! norms and head merge are 128 x 256, 1.052 → 1.038 with `weights-lhs` on all weights; the
//! same block written by hand in rank 2, 1.078 → 0.978. GPT-2-small's activations (128 x 768
//! and larger) are past the threshold already and are left alone.
//!
//! Needs: a verified module; the last structural pass of the CPU pipeline (canonicalization
//! would fold the selects away: the predicate is a constant once iota is folded).
//! Guarantees: for every `dot_general` of a function body with one operand a function argument
//! or constant (the weight) and the other a computed f32 value with a static shape of
//! `MIN_ELEMENTS` ≤ n < `MAX_ELEMENTS` elements and a non-unit dimension, that operand `y` is
//! replaced by `select(compare(iota_a + iota_b, -1 - j, gt), y, 0)` applied `SELECTS` times
//! (`j` = 0, 1, ..; `a`, `b` its first and last non-unit dims); a value feeding several such
//! dots is wrapped once. Values and types are unchanged. Changed when an operand was wrapped.

use crate::util::{func_blocks, Inserter};
use crate::{Pass, PassError};
use std::collections::HashMap;
use tpuc_ir::{Attr, Attrs, DType, Module, OpId, Opcode, Scalar, TensorData, TensorType, ValueId};

pub struct ParallelLoops;

/// Smallest operand wrapped (smaller kernels were not measured).
pub const MIN_ELEMENTS: i64 = 8 * 1024;
/// From here on (256 KB of f32 read and 256 KB written) XLA splits the fusion by itself.
pub const MAX_ELEMENTS: i64 = 64 * 1024;
/// Always-true selects per operand (two modeled flops per element each): enough for a kernel of
/// 8 bytes (one f32 read, one written) and no flops per element to count as compute-bound.
pub const SELECTS: usize = 4;

/// Whether `v` is computed in the function (not an argument or a constant).
fn computed(m: &Module, v: ValueId) -> bool {
    match crate::util::def_op(m, v) {
        None => false,
        Some(op) => m.ops[op].opcode != Opcode::Constant,
    }
}

/// Whether `v` is a weight: a function argument or a constant.
fn weight(m: &Module, v: ValueId) -> bool {
    !computed(m, v)
}

/// The activation operand to wrap, if `dot` is a linear layer whose activation qualifies.
fn candidate(m: &Module, dot: OpId) -> Option<ValueId> {
    let d = &m.ops[dot];
    let (l, r) = (d.operands[0], d.operands[1]);
    let x = match (weight(m, l), weight(m, r)) {
        (true, false) => r,
        (false, true) => l,
        _ => return None,
    };
    let t = &m.values[x].ty;
    let dims = t.static_dims()?;
    let n: i64 = dims.iter().product();
    (t.dtype == DType::F32
        && (MIN_ELEMENTS..MAX_ELEMENTS).contains(&n)
        && dims.iter().any(|&s| s > 1))
    .then_some(x)
}

fn wrap(m: &mut Module, before: OpId, y: ValueId) -> Result<ValueId, PassError> {
    fn fail(e: impl std::fmt::Display) -> PassError {
        crate::failed("parallel-loops", e)
    }
    let t = m.values[y].ty.clone();
    let dims = t.static_dims().expect("static (checked)");
    let axes: Vec<i64> = (0..dims.len() as i64)
        .filter(|&a| dims[a as usize] > 1)
        .collect();
    let (a0, a1) = (axes[0], *axes.last().expect("a non-unit dim (checked)"));
    let it = TensorType::from_static(DType::I32, &dims);
    let pt = TensorType::from_static(DType::Bool, &dims);
    let mut ins = Inserter::before(m, before);
    let zero = ins
        .constant(TensorData::splat(t.clone(), Scalar::Float(0.0)).map_err(fail)?)
        .map_err(fail)?;
    let iota = |ins: &mut Inserter, a: i64| {
        ins.build1(
            Opcode::Iota,
            &[],
            Attrs::new().with("dimension", Attr::Int(a)),
            Some(it.clone()),
        )
        .map_err(fail)
    };
    let (i0, i1) = (iota(&mut ins, a0)?, iota(&mut ins, a1)?);
    // A sum of iotas along two dims: XLA cannot narrow a compare of it to one dim, so every
    // compare and select below counts one flop per element.
    let sum = ins
        .build1(Opcode::Add, &[i0, i1], Attrs::new(), Some(it.clone()))
        .map_err(fail)?;
    let mut v = y;
    for j in 0..SELECTS {
        let c = ins
            .constant(TensorData::splat(it.clone(), Scalar::Int(-1 - j as i64)).map_err(fail)?)
            .map_err(fail)?;
        let p = ins
            .build1(
                Opcode::Compare,
                &[sum, c],
                Attrs::new().with("direction", Attr::Str("gt".into())),
                Some(pt.clone()),
            )
            .map_err(fail)?;
        v = ins
            .build1(Opcode::Select, &[p, v, zero], Attrs::new(), Some(t.clone()))
            .map_err(fail)?;
    }
    Ok(v)
}

impl Pass for ParallelLoops {
    fn name(&self) -> &'static str {
        "parallel-loops"
    }

    fn run(&self, m: &mut Module) -> Result<bool, PassError> {
        let mut changed = false;
        for b in func_blocks(m) {
            let mut wrapped: HashMap<ValueId, ValueId> = HashMap::new();
            for op in m.block_ops(b) {
                if m.ops[op].opcode != Opcode::DotGeneral {
                    continue;
                }
                let Some(x) = candidate(m, op) else { continue };
                let w = match wrapped.get(&x) {
                    Some(&w) => w,
                    None => {
                        let w = wrap(m, op, x)?;
                        wrapped.insert(x, w);
                        w
                    }
                };
                for v in m.ops[op].operands.iter_mut() {
                    if *v == x {
                        *v = w;
                    }
                }
                changed = true;
            }
        }
        Ok(changed)
    }
}
