//! `fuse`: recognises attention, rotary embeddings, GELU, LayerNorm, RMSNorm, softmax,
//! log-softmax, SiLU and SwiGLU and wraps each in a `composite` op (`tpuc.attention`,
//! `tpuc.rope`, `tpuc.gelu`, `tpuc.layer_norm`, `tpuc.rms_norm`, `tpuc.softmax`,
//! `tpuc.log_softmax`, `tpuc.silu`, `tpuc.swiglu`) whose region is the decomposition, which the
//! emitter writes as a `stablehlo.composite`: XLA inlines the decomposition, and a TPU kernel
//! can later replace the composite by name.
//!
//! Both forms the importer produces are recognised: a high-level op (`attention`, `gelu`,
//! `layer_norm`, `softmax`, `log_softmax`) and the core-ATen decomposition as a chain of
//! primitive ops (SDPA as scale/bmm/mask/softmax/bmm with grouped KV heads repeated, HF's
//! NewGELU tanh formula, mean/variance layer norms, `x * rsqrt(mean(x²) + eps)`, `exp/sum`
//! softmax, `x * sigmoid(x)`, `x * cos + rotate_half(x) * sin`). The patterns are in
//! [`patterns`]; each names the composite's inputs, outputs and attributes, and [`outline`]
//! moves the ops between them into the region.
//!
//! Needs: a verified module; run before `canonicalize` merges the transposes that delimit
//! attention's q, k and v (the default pipeline runs `cse` and `sdpa-guard` first).
//! Guarantees: the region is a copy of exactly the ops that computed the outputs from the
//! inputs (constants and iotas they use are copied along), so the fused program computes the
//! same values as the unfused one; the originals are removed when nothing else uses them. The
//! attributes describe what the body computes (`scale`, `causal`, `epsilon`, `dimension`,
//! `approximate`); a mask that is not provably causal becomes an input. Changed when a
//! composite was made.

pub mod patterns;

use crate::util::{def_op, func_blocks};
use crate::{Pass, PassError};
use std::collections::{HashMap, HashSet};
use tpuc_ir::{Attr, Attrs, BlockId, Module, OpId, Opcode, ValueDef, ValueId};

pub struct Fuse;

/// What a pattern found.
#[derive(Debug)]
pub struct Match {
    pub name: &'static str,
    pub attrs: Vec<(&'static str, Attr)>,
    pub inputs: Vec<ValueId>,
    pub outputs: Vec<ValueId>,
}

/// Constants up to this many elements are copied into a composite's region; larger ones (inlined
/// weights) must be inputs.
const CLONE_CONSTANT_LIMIT: i64 = 4096;

/// Moves the ops computing `outputs` from `inputs` into a new `composite` placed where the
/// first output was computed. Returns `None` (changing nothing) if the ops do not form a
/// closed group: they reach a value that is neither an input nor computable from constants, or
/// an op that is impure or has regions, or an input is defined after the composite's place.
pub fn outline(m: &mut Module, block: BlockId, mt: &Match) -> Result<Option<OpId>, PassError> {
    let fail = |e: tpuc_ir::IrError| crate::failed(crate::PassId::Fuse.name(), e);
    let inputs: HashSet<ValueId> = mt.inputs.iter().copied().collect();
    if inputs.len() != mt.inputs.len() || mt.outputs.iter().any(|o| inputs.contains(o)) {
        return Ok(None);
    }
    // The backward slice: only the ops between the outputs and the inputs are visited.
    let mut slice: HashSet<OpId> = HashSet::new();
    let mut stack: Vec<ValueId> = mt.outputs.clone();
    while let Some(v) = stack.pop() {
        if inputs.contains(&v) {
            continue;
        }
        let Some(op) = def_op(m, v) else { return Ok(None) };
        if m.ops[op].block() != Some(block) {
            return Ok(None);
        }
        if !slice.insert(op) {
            continue;
        }
        let d = &m.ops[op];
        if !d.opcode().is_pure() || !d.regions().is_empty() {
            return Ok(None);
        }
        if d.opcode() == Opcode::Constant {
            let t = d.payload::<tpuc_ir::payload::Constant>().value;
            if !t.is_splat() && t.ty.num_elements().unwrap_or(i64::MAX) > CLONE_CONSTANT_LIMIT {
                return Ok(None);
            }
        }
        stack.extend(d.operands().iter().copied());
    }
    if slice.is_empty() {
        return Ok(None);
    }
    let mut ordered: Vec<OpId> = slice.iter().copied().collect();
    ordered.sort_by(|&a, &b| if a == b { std::cmp::Ordering::Equal } else if m.is_before(a, b) { std::cmp::Ordering::Less } else { std::cmp::Ordering::Greater });
    // The composite goes where the first output is computed; every input must exist by then.
    let Some(place) = mt
        .outputs
        .iter()
        .filter_map(|&o| def_op(m, o))
        .reduce(|a, b| if m.is_before(b, a) { b } else { a })
    else {
        return Ok(None);
    };
    for &i in &mt.inputs {
        if let ValueDef::Result { op, .. } = m.values[i].def() {
            if m.ops[op].block() != Some(block) || !m.is_before(op, place) {
                return Ok(None);
            }
        }
    }
    // The region: arguments for the inputs, then copies of the slice in block order.
    let arg_types: Vec<_> = mt.inputs.iter().map(|&v| m.values[v].ty.clone()).collect();
    let (region, rb) = m.new_region(&arg_types);
    let mut map: HashMap<ValueId, ValueId> = HashMap::new();
    for (k, &i) in mt.inputs.iter().enumerate() {
        map.insert(i, m.blocks[rb].args()[k]);
    }
    for &op in &ordered {
        let d = &m.ops[op];
        let (opcode, attrs) = (d.opcode(), d.attrs.clone());
        let operands: Vec<ValueId> = d.operands().iter().map(|v| map[v]).collect();
        let types: Vec<_> = d.results().iter().map(|&r| m.values[r].ty.clone()).collect();
        let results = d.results().to_vec();
        let c = m.create_op_unchecked(opcode, &operands, attrs, types, &[]);
        m.append_op(rb, c);
        let loc = *m.op_locs.get(op);
        m.set_loc(c, loc);
        for (k, &r) in results.iter().enumerate() {
            map.insert(r, m.ops[c].results()[k]);
        }
    }
    let yielded: Vec<ValueId> = mt.outputs.iter().map(|v| map[v]).collect();
    let y = m.create_op(Opcode::Yield, &yielded, Attrs::new(), Some(&[]), &[]).map_err(fail)?;
    m.append_op(rb, y);
    let mut attrs = tpuc_ir::payload::Composite { name: mt.name }.attrs();
    for (k, v) in &mt.attrs {
        attrs.set(*k, v.clone());
    }
    let out_types: Vec<_> = mt.outputs.iter().map(|&v| m.values[v].ty.clone()).collect();
    let comp = m.create_op(Opcode::Composite, &mt.inputs, attrs, Some(&out_types), &[region]).map_err(fail)?;
    let loc = *m.op_locs.get(place);
    m.set_loc(comp, loc);
    m.insert_op_before(place, comp);
    // Uses outside the slice now read the composite's results (through the use lists).
    let results = m.ops[comp].results().to_vec();
    for (&o, &r) in mt.outputs.iter().zip(results.iter()) {
        m.replace_uses_except(o, r, |user| slice.contains(&user));
    }
    // Ops of the slice still used outside stay (their copies live in the region); the rest go.
    crate::util::erase_dead_from(m, ordered.iter().rev().copied());
    Ok(Some(comp))
}

impl Pass for Fuse {
    fn name(&self) -> &'static str {
        crate::PassId::Fuse.name()
    }

    fn run(&self, m: &mut Module) -> Result<bool, PassError> {
        let mut changed = false;
        for b in func_blocks(m) {
            // Larger patterns first (attention contains a softmax, SwiGLU a SiLU); within a
            // pattern, ops last to first, so the match ending at an op's latest use wins (a
            // layer norm with its affine step, not without). One snapshot of the block per
            // pattern; ops an outline erased are skipped, composites it made are not visited.
            for pattern in patterns::ALL {
                let mut causal = Default::default();
                for op in m.block_ops(b).into_iter().rev() {
                    if m.ops[op].block() != Some(b) {
                        continue;
                    }
                    let mt = {
                        let cx = patterns::Ctx { m, causal: std::mem::take(&mut causal) };
                        let r = (pattern.matcher)(&cx, op);
                        causal = cx.causal;
                        r
                    };
                    let Some(mt) = mt else { continue };
                    if outline(m, b, &mt)?.is_some() {
                        tracing::debug!(composite = mt.name, pattern = pattern.name, "fused");
                        changed = true;
                    }
                }
            }
        }
        Ok(changed)
    }
}
