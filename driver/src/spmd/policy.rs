//! Sharding policies (`--shard-policy dp|fsdp|tp`): the shardings they choose for the
//! arguments and results `--shard` leaves open, and the column / row pairs of matmul weights
//! tensor parallelism splits.

use super::{axis_size, MeshSharding};
use std::collections::BTreeMap;
use tpuc_ir::Module;

/// Sharding policies: argument shardings chosen from the program, for arguments `--shard`
/// does not name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ShardPolicy {
    /// Data parallel: dim 0 (the batch) of every user input over all mesh axes.
    Dp,
    /// Fully sharded data parallel: `dp`, and each parameter's largest dim that splits evenly
    /// over all mesh axes.
    Fsdp,
    /// Tensor parallel (Megatron): the 2-D weights of matmuls over the last mesh axis, in
    /// column / row pairs (a matmul reading the output of a column-parallel one is row
    /// parallel), and the batch of user inputs over the other axes.
    Tp,
}

impl ShardPolicy {
    pub const NAMES: [&'static str; 3] = ["dp", "fsdp", "tp"];

    pub fn name(self) -> &'static str {
        match self {
            ShardPolicy::Dp => "dp",
            ShardPolicy::Fsdp => "fsdp",
            ShardPolicy::Tp => "tp",
        }
    }

    pub fn parse(s: &str) -> Option<ShardPolicy> {
        match s {
            "dp" => Some(ShardPolicy::Dp),
            "fsdp" => Some(ShardPolicy::Fsdp),
            "tp" => Some(ShardPolicy::Tp),
            _ => None,
        }
    }
}

/// Adds `policy`'s shardings to `sh` for the arguments of `module`'s main it does not shard
/// yet. Only even splits are chosen; an argument that cannot split stays replicated, and is
/// named in the returned notes (the argument, its dim and size, the mesh axes), one a line.
pub fn apply_policy(policy: ShardPolicy, module: &Module, sh: &mut MeshSharding) -> Vec<String> {
    let mut notes = Vec::new();
    let Some(func) = module.main_func() else { return notes };
    let entry = module.entry_block(func);
    let all: Vec<String> = sh.axes.iter().map(|(n, _)| n.clone()).collect();
    let size_of = |axes: &[String]| -> i64 { axes.iter().map(|a| axis_size(&sh.axes, a).unwrap_or(1)).product() };
    let (batch_axes, tp_axis): (Vec<String>, Option<String>) = match policy {
        ShardPolicy::Tp if all.len() > 1 => (all[..all.len() - 1].to_vec(), all.last().cloned()),
        ShardPolicy::Tp => (Vec::new(), all.last().cloned()),
        _ => (all.clone(), None),
    };
    let show_axes = |axes: &[String]| {
        let each: Vec<String> = axes.iter().map(|a| format!("{a}={}", axis_size(&sh.axes, a).unwrap_or(1))).collect();
        format!("{} ({} devices)", each.join(","), size_of(axes))
    };
    let show_dim = |d: &tpuc_ir::Dim| match d.as_static() {
        Some(n) => format!("size {n}"),
        None => "a symbolic size".to_string(),
    };
    let mut chosen: BTreeMap<String, Vec<Vec<String>>> = BTreeMap::new();
    let args = &module.blocks[entry].args();
    let mut unsplit_weights = Vec::new();
    for (i, info) in func.args.iter().enumerate() {
        let ty = &module.values[args[i]].ty;
        let dims: Vec<Option<i64>> = ty.dims.iter().map(|d| d.as_static()).collect();
        let mut spec = vec![Vec::new(); dims.len()];
        let splits = |d: usize, axes: &[String]| !axes.is_empty() && dims[d].is_some_and(|n| n % size_of(axes) == 0);
        if sh.args.contains_key(&info.name) {
            continue;
        }
        if info.kind == tpuc_ir::ArgKind::UserInput {
            if !dims.is_empty() && splits(0, &batch_axes) {
                spec[0] = batch_axes.clone();
                chosen.insert(info.name.clone(), spec);
            } else if !dims.is_empty() && !batch_axes.is_empty() {
                notes.push(format!(
                    "--shard-policy {}: input `{}` stays replicated: its batch (dim 0, {}) does not split evenly over {}",
                    policy.name(),
                    info.name,
                    show_dim(&ty.dims[0]),
                    show_axes(&batch_axes)
                ));
            }
        } else if policy == ShardPolicy::Fsdp && info.kind.is_weight() && !dims.is_empty() {
            // The largest dim that splits; ties go to the leading dim.
            let mut order: Vec<usize> = (0..dims.len()).collect();
            order.sort_by_key(|&d| std::cmp::Reverse(dims[d].unwrap_or(0)));
            if let Some(&d) = order.iter().find(|&&d| splits(d, &all)) {
                spec[d] = all.clone();
                chosen.insert(info.name.clone(), spec);
            } else {
                let shape: Vec<String> = ty.dims.iter().map(|d| d.to_string()).collect();
                unsplit_weights.push(format!("`{}` [{}]", info.name, shape.join(", ")));
            }
        }
    }
    if !unsplit_weights.is_empty() {
        notes.push(format!(
            "--shard-policy fsdp: {} weight(s) stay replicated: no dim splits evenly over {}: {}",
            unsplit_weights.len(),
            show_axes(&all),
            unsplit_weights.join(", ")
        ));
    }
    if let Some(axis) = tp_axis {
        for (i, dim) in megatron_pairs(module) {
            let ty = &module.values[args[i]].ty;
            let name = &func.args[i].name;
            if sh.args.contains_key(name) {
                continue;
            }
            if ty.dims[dim].as_static().is_some_and(|n| n % size_of(std::slice::from_ref(&axis)) == 0) {
                let mut spec = vec![Vec::new(); ty.rank()];
                spec[dim] = vec![axis.clone()];
                chosen.insert(name.clone(), spec);
            } else {
                notes.push(format!(
                    "--shard-policy tp: weight `{name}` stays replicated: dim {dim} ({}) does not split evenly over {}",
                    show_dim(&ty.dims[dim]),
                    show_axes(std::slice::from_ref(&axis))
                ));
            }
        }
    }
    for (name, spec) in chosen {
        sh.args.entry(name).or_insert(spec);
    }
    // Data parallel results stay split by batch: each device returns its rows and the host
    // joins them, instead of an all-gather on the devices.
    if matches!(policy, ShardPolicy::Dp | ShardPolicy::Fsdp) {
        for (i, ty) in crate::exec::result_types(module).iter().enumerate() {
            if ty.rank() > 0 && ty.dims[0].as_static().is_some_and(|n| n % size_of(&all) == 0) {
                let mut spec = vec![Vec::new(); ty.rank()];
                spec[0] = all.clone();
                sh.results.entry(i).or_insert(spec);
            }
        }
    }
    notes
}

/// The 2-D weights of main's matmuls (as argument indices) and the dim of each to split for
/// tensor parallelism:
/// walking the program in order, a value is "split" when it derives from a column-parallel
/// matmul's output; a matmul reading a split activation is row parallel (its weight split
/// along the contracted dim, its output whole again), any other is column parallel (the
/// weight split along its output dim).
fn megatron_pairs(module: &Module) -> Vec<(usize, usize)> {
    use tpuc_ir::{ArgKind, Opcode};
    let Some(func) = module.main_func() else { return Vec::new() };
    let entry = module.entry_block(func);
    let weight_arg: BTreeMap<tpuc_ir::ValueId, usize> = module.blocks[entry]
        .args()
        .iter()
        .enumerate()
        .filter(|(i, &v)| func.args[*i].kind == ArgKind::Parameter && module.values[v].ty.rank() == 2)
        .map(|(i, &v)| (v, i))
        .collect();
    // A parameter seen through converts and transposes (bf16 casts, weights_lhs).
    let source = |mut v: tpuc_ir::ValueId| -> Option<(usize, bool)> {
        let mut transposed = false;
        loop {
            if let Some(&i) = weight_arg.get(&v) {
                return Some((i, transposed));
            }
            let tpuc_ir::ValueDef::Result { op, .. } = module.values[v].def() else { return None };
            let d = module.op(op);
            match d.opcode() {
                Opcode::Convert => v = d.operands()[0],
                Opcode::Transpose => {
                    transposed = !transposed;
                    v = d.operands()[0];
                }
                _ => return None,
            }
        }
    };
    let mut split: std::collections::HashSet<tpuc_ir::ValueId> = std::collections::HashSet::new();
    let mut out = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for op in module.ops_in(entry) {
        let d = module.op(op);
        let mut handled = false;
        if d.opcode() == Opcode::DotGeneral && d.operands().len() == 2 {
            let dot = d.payload::<tpuc_ir::payload::DotGeneral>();
            for (w_side, contracting) in [(1usize, dot.rhs_contracting_dimensions), (0, dot.lhs_contracting_dimensions)] {
                let (w, act) = (d.operands()[w_side], d.operands()[1 - w_side]);
                let Some((i, transposed)) = source(w) else { continue };
                let &[c @ (0 | 1)] = contracting else { continue };
                // The weight's own contracted dim (through an odd number of transposes of a
                // 2-D value the dims swap).
                let contracted = if transposed { 1 - c as usize } else { c as usize };
                let row = split.contains(&act);
                let dim = if row { contracted } else { 1 - contracted };
                if seen.insert(i) {
                    out.push((i, dim));
                }
                if !row {
                    split.extend(d.results().iter().copied());
                }
                handled = true;
                break;
            }
        }
        if !handled && d.operands().iter().any(|v| split.contains(v)) {
            split.extend(d.results().iter().copied());
        }
    }
    out
}

/// Lays out a training step's state alike on every device, for programs whose state updates
/// are aliased to their arguments ([`tpuc_ir::Module::state_aliases`]):
/// - an optimizer state tensor (`optim/<key>/<parameter>`, the names `tpuc.train_step`
///   gives, see [`crate::step_export`]) that no split was chosen for takes its parameter's
///   split when it has the parameter's type (tensor parallelism splits only parameters);
/// - every state update takes its argument's split.
///
/// Returns whether `sh` changed.
pub fn align_state(module: &Module, sh: &mut MeshSharding) -> bool {
    let Some(func) = module.main_func() else { return false };
    let entry = module.entry_block(func);
    let args = module.blocks[entry].args();
    let mut changed = false;
    for (i, info) in func.args.iter().enumerate() {
        let Some(param) = info.name.strip_prefix("optim/").and_then(|rest| rest.split_once('/')).map(|(_, p)| format!("param/{p}")) else {
            continue;
        };
        if sh.args.contains_key(&info.name) {
            continue;
        }
        let Some(j) = func.args.iter().position(|a| a.name == param) else { continue };
        if module.values[args[i]].ty != module.values[args[j]].ty {
            continue;
        }
        if let Some(spec) = sh.args.get(&param).cloned() {
            sh.args.insert(info.name.clone(), spec);
            changed = true;
        }
    }
    for (arg, result) in module.state_aliases() {
        let want = sh.args.get(&func.args[arg].name).cloned();
        if sh.results.get(&result) != want.as_ref() {
            match want {
                Some(spec) => sh.results.insert(result, spec),
                None => sh.results.remove(&result),
            };
            changed = true;
        }
    }
    changed
}
