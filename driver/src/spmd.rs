//! Programs over several devices.
//!
//! - SPMD over a device mesh: the mesh and argument shardings given on the command line
//!   (`--mesh x=2,y=2`, `--shard fc1.weight=y,_`) or chosen by a policy ([`ShardPolicy`]),
//!   checked against the program, recorded in the IR ([`MeshSharding::to_ir`]) and emitted
//!   from there as Shardy. On the host each device gets its block of every argument (device p
//!   holds the block at p's row-major position in the mesh); a result comes back whole from
//!   the first device when replicated, or joined from every device's block when split
//!   ([`ShardedRunner`]).
//! - Per-rank programs (PyTorch's functional collectives): one XLA replica per rank, process
//!   groups resolved by [`Ranks`]; inputs and results carry all ranks' values stacked along a
//!   new leading dim ([`RankRunner`]).

use crate::exec::ExecError;
use crate::tensor::HostTensor;
use std::borrow::Cow;
use std::collections::BTreeMap;
use tpuc_ir::Module;

/// A device mesh and the shardings of `main`'s arguments (by name, as the user gives them) and
/// results, for a program partitioned over the mesh's devices (device p holds the shard at p's
/// row-major position in the mesh). [`MeshSharding::to_ir`] makes it the module's
/// [`tpuc_ir::Sharding`] (by argument index), which the emitter writes as Shardy.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct MeshSharding {
    /// Axis names and sizes, major to minor.
    pub axes: Vec<(String, i64)>,
    /// By argument name (`tpuc.name`): for each dim, the mesh axes it is split over, major
    /// first (none: that dim is whole on every device).
    pub args: std::collections::BTreeMap<String, Vec<Vec<String>>>,
    /// By result index, the same.
    pub results: std::collections::BTreeMap<usize, Vec<Vec<String>>>,
}


impl MeshSharding {
    /// The IR's sharding of `module`'s `main`: arguments by index (an argument the sharding
    /// names but `main` lacks is an error; [`check`] has said so first).
    pub fn to_ir(&self, module: &Module) -> Result<tpuc_ir::Sharding, String> {
        let f = module.main_func().ok_or("the module has no `main`")?;
        let mut args = BTreeMap::new();
        for (name, dims) in &self.args {
            let i = f.args.iter().position(|a| &a.name == name).ok_or_else(|| format!("no argument `{name}`"))?;
            args.insert(i, dims.clone());
        }
        Ok(tpuc_ir::Sharding { mesh: self.axes.clone(), args, results: self.results.clone() })
    }

    /// The sharding a module carries (IR text with a `mesh`), by argument name.
    pub fn of_ir(sh: &tpuc_ir::Sharding, module: &Module) -> MeshSharding {
        let names: Vec<String> = module.main_func().map(|f| f.args.iter().map(|a| a.name.clone()).collect()).unwrap_or_default();
        let args = sh.args.iter().filter_map(|(&i, d)| Some((names.get(i)?.clone(), d.clone()))).collect();
        MeshSharding { axes: sh.mesh.clone(), args, results: sh.results.clone() }
    }
}

/// Parses `x=2,y=2` (axis names and sizes, major to minor).
pub fn parse_mesh(text: &str) -> Result<Vec<(String, i64)>, String> {
    let mut axes: Vec<(String, i64)> = Vec::new();
    for part in text.split(',') {
        let (name, size) = part.split_once('=').ok_or_else(|| format!("mesh axis `{part}`: expected NAME=SIZE (e.g. --mesh x=2,y=2)"))?;
        let name = name.trim();
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') || name == "_" {
            return Err(format!("mesh axis name `{name}`: letters, digits and `_` only"));
        }
        if axes.iter().any(|(n, _)| n == name) {
            return Err(format!("mesh axis `{name}` given twice"));
        }
        let size: i64 = size.trim().parse().ok().filter(|&s| s >= 1).ok_or_else(|| format!("mesh axis `{name}`: size `{size}` is not a positive integer"))?;
        axes.push((name.to_string(), size));
    }
    Ok(axes)
}

/// Parses one `--shard NAME=AXES`: AXES one entry per dim, an axis name, several joined by
/// `+` (major first), or `_` for a dim kept whole.
pub fn parse_shard(text: &str) -> Result<(String, Vec<Vec<String>>), String> {
    let (name, axes) = text
        .rsplit_once('=')
        .ok_or_else(|| format!("--shard `{text}`: expected NAME=AXES, one entry per dim (e.g. fc1.weight=y,_)"))?;
    let dims = axes
        .split(',')
        .map(|d| match d.trim() {
            "_" | "" => Vec::new(),
            d => d.split('+').map(|a| a.trim().to_string()).collect(),
        })
        .collect();
    Ok((name.trim().to_string(), dims))
}

/// One argument's `--shard` entries as written on the command line (`y,_`, `x+y,_`).
pub fn format_shard(dims: &[Vec<String>]) -> String {
    dims.iter().map(|d| if d.is_empty() { "_".to_string() } else { d.join("+") }).collect::<Vec<_>>().join(",")
}

/// A sharding plan file (`--shard-plan FILE.json`): what `--mesh`, `--shard` and
/// `--shard-policy` say, in the same notation, every key optional:
/// `{"mesh": "x=2,y=2", "shard": {"fc1.weight": "y,_", "x": "x,_"}, "policy": "tp"}`.
/// `tpuc compile --json` of a sharded program reports its final plan (policy choices
/// included) under `"sharding"` in this form.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ShardPlan {
    pub mesh: Option<Vec<(String, i64)>>,
    pub shard: BTreeMap<String, Vec<Vec<String>>>,
    pub policy: Option<ShardPolicy>,
}

impl ShardPlan {
    /// Parses a plan file's text; unknown keys are errors (a misspelt key would otherwise
    /// silently shard nothing).
    pub fn parse(text: &str) -> Result<ShardPlan, String> {
        let v: serde_json::Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
        let obj = v.as_object().ok_or("expected an object with `mesh`, `shard` and `policy`")?;
        let mut plan = ShardPlan::default();
        for (key, value) in obj {
            match key.as_str() {
                "mesh" => {
                    let m = value.as_str().ok_or("`mesh`: expected a string such as \"x=2,y=2\"")?;
                    plan.mesh = Some(parse_mesh(m).map_err(|e| format!("`mesh`: {e}"))?);
                }
                "shard" => {
                    let entries = value.as_object().ok_or("`shard`: expected an object of argument name -> axes (\"y,_\")")?;
                    for (name, axes) in entries {
                        let axes = axes.as_str().ok_or_else(|| format!("`shard`.`{name}`: expected a string such as \"y,_\""))?;
                        let (_, dims) = parse_shard(&format!("{name}={axes}")).map_err(|e| format!("`shard`: {e}"))?;
                        plan.shard.insert(name.clone(), dims);
                    }
                }
                "policy" => {
                    let p = value.as_str().ok_or("`policy`: expected a string")?;
                    plan.policy = Some(ShardPolicy::parse(p).ok_or_else(|| format!("`policy` {p:?}: expected one of {}", ShardPolicy::NAMES.join(", ")))?);
                }
                other => return Err(format!("unknown key `{other}` (known: mesh, shard, policy)")),
            }
        }
        Ok(plan)
    }

    /// The plan a sharding amounts to (every argument's entries; no policy: its choices are in).
    pub fn of(sh: &MeshSharding) -> ShardPlan {
        ShardPlan { mesh: Some(sh.axes.clone()), shard: sh.args.clone(), policy: None }
    }

    /// The plan file's JSON.
    pub fn to_json(&self) -> serde_json::Value {
        let mut obj = serde_json::Map::new();
        if let Some(m) = &self.mesh {
            let text = m.iter().map(|(n, s)| format!("{n}={s}")).collect::<Vec<_>>().join(",");
            obj.insert("mesh".into(), text.into());
        }
        let shard: serde_json::Map<String, serde_json::Value> = self.shard.iter().map(|(n, d)| (n.clone(), format_shard(d).into())).collect();
        obj.insert("shard".into(), shard.into());
        if let Some(p) = self.policy {
            obj.insert("policy".into(), p.name().into());
        }
        obj.into()
    }
}

/// Parses `--group NAME=RANKS`: the rank groups of process group NAME, `|`-separated lists of
/// ranks (`0,1|2,3`: two groups of two), each rank of `0..count` in exactly one group.
pub fn parse_group(text: &str, count: i64) -> Result<(String, Vec<Vec<i64>>), String> {
    let (name, ranks) = text.split_once('=').ok_or_else(|| format!("--group `{text}`: expected NAME=RANKS (e.g. 1=0,1|2,3)"))?;
    let mut groups = Vec::new();
    for g in ranks.split('|') {
        let members: Vec<i64> = g
            .split(',')
            .map(|r| r.trim().parse::<i64>().map_err(|_| format!("--group {name}: `{r}` is not a rank")))
            .collect::<Result<_, _>>()?;
        groups.push(members);
    }
    let mut seen = vec![false; count.max(0) as usize];
    for &r in groups.iter().flatten() {
        if !(0..count).contains(&r) || std::mem::replace(&mut seen[r as usize], true) {
            return Err(format!("--group {name}: rank {r} is out of 0..{count} or listed twice"));
        }
    }
    if seen.iter().any(|s| !s) || groups.iter().any(|g| g.len() != groups[0].len()) {
        return Err(format!("--group {name}: the groups must cover every rank of 0..{count} in groups of one size"));
    }
    Ok((name.trim().to_string(), groups))
}

/// Devices in the mesh.
pub fn device_count(sh: &MeshSharding) -> i64 {
    sh.axes.iter().map(|(_, s)| s).product()
}

/// The size of mesh axis `name`, if the mesh has it.
fn axis_size(axes: &[(String, i64)], name: &str) -> Option<i64> {
    axes.iter().find(|(n, _)| n == name).map(|(_, s)| *s)
}

/// Checks `sh` against `main`'s arguments and results: every name an argument, every index a
/// result, one entry per dim, known axes each used once per value, static dims that divide
/// evenly.
pub fn check(sh: &MeshSharding, module: &Module) -> Result<(), String> {
    let Some(func) = module.main_func() else { return Err("the program has no main function".into()) };
    let entry = module.entry_block(func);
    let args: BTreeMap<&str, usize> = func.args.iter().enumerate().map(|(i, a)| (a.name.as_str(), i)).collect();
    for (name, dims) in &sh.args {
        let Some(&i) = args.get(name.as_str()) else {
            let known: Vec<&str> = args.keys().copied().collect();
            return Err(format!("--shard names `{name}`, which is not an argument of the program (arguments: {})", known.join(", ")));
        };
        check_value(sh, &format!("--shard {name}"), &format!("`{name}`"), &module.values[module.blocks[entry].args()[i]].ty, dims)?;
    }
    let results = crate::exec::result_types(module);
    for (&i, dims) in &sh.results {
        let ty = results.get(i).ok_or_else(|| format!("result {i} does not exist (the program has {})", results.len()))?;
        check_value(sh, &format!("result {i}"), &format!("result {i}"), ty, dims)?;
    }
    Ok(())
}

fn check_value(sh: &MeshSharding, what: &str, value: &str, ty: &tpuc_ir::TensorType, dims: &[Vec<String>]) -> Result<(), String> {
    if dims.len() != ty.rank() {
        return Err(format!("{what}: {} entries for {value}: {ty}, which has {} dims", dims.len(), ty.rank()));
    }
    let mut used: Vec<&str> = Vec::new();
    for (d, axes) in dims.iter().enumerate() {
        let mut parts = 1;
        for a in axes {
            let Some(size) = axis_size(&sh.axes, a) else {
                let known: Vec<&str> = sh.axes.iter().map(|(n, _)| n.as_str()).collect();
                return Err(format!("{what}: unknown mesh axis `{a}` (the mesh has {})", known.join(", ")));
            };
            if used.contains(&a.as_str()) {
                return Err(format!("{what}: mesh axis `{a}` used twice"));
            }
            used.push(a);
            parts *= size;
        }
        if let Some(n) = ty.dims[d].as_static() {
            if n % parts != 0 {
                return Err(format!("{what}: dim {d} of {value} ({ty}) has size {n}, which does not split into {parts} equal shards"));
            }
        }
    }
    Ok(())
}

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
            for (w_side, contract_attr) in [(1usize, "rhs_contracting_dimensions"), (0, "lhs_contracting_dimensions")] {
                let (w, act) = (d.operands()[w_side], d.operands()[1 - w_side]);
                let Some((i, transposed)) = source(w) else { continue };
                let Some(&[c @ (0 | 1)]) = d.attrs.ints(contract_attr) else { continue };
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

/// The mesh coordinates of device `p` (row-major).
fn coords(sh: &MeshSharding, p: i64) -> BTreeMap<&str, i64> {
    let mut out = BTreeMap::new();
    let mut rest = p;
    for (name, size) in sh.axes.iter().rev() {
        out.insert(name.as_str(), rest % size);
        rest /= size;
    }
    out
}

/// The block of `t` that device `p` holds under the sharding `dims` of argument `name`
/// (`t` itself, borrowed, when the argument is not sharded).
pub fn shard_for_device<'t>(sh: &MeshSharding, name: &str, t: &'t HostTensor, p: i64) -> Result<Cow<'t, HostTensor>, ExecError> {
    let Some(dims) = sh.args.get(name) else { return Ok(Cow::Borrowed(t)) };
    let (start, size) = block_of(sh, &format!("`{name}`"), dims, &t.dims, p)?;
    Ok(Cow::Owned(block(t, &start, &size)))
}

/// Result `index` of an SPMD run, split by `dims`, from every device's piece: the whole
/// tensor, each device's block put at its place (devices that hold the same block agree; the
/// first is taken).
pub fn assemble(sh: &MeshSharding, index: usize, dims: &[Vec<String>], whole_dims: &[i64], pieces: &[HostTensor]) -> Result<HostTensor, ExecError> {
    let first = pieces.first().ok_or_else(|| ExecError::BadInput("no device output".into()))?;
    let e = first.dtype.size_bytes();
    let mut out = HostTensor {
        dtype: first.dtype,
        dims: whole_dims.to_vec(),
        bytes: vec![0u8; whole_dims.iter().product::<i64>() as usize * e],
    };
    let mut seen = std::collections::HashSet::new();
    for (p, piece) in pieces.iter().enumerate() {
        let (start, size) = block_of(sh, &format!("result {index}"), dims, whole_dims, p as i64)?;
        if piece.dims != size {
            return Err(ExecError::BadInput(format!("result {index}: device {p} returned {:?}, expected a block of {size:?}", piece.dims)));
        }
        if seen.insert(start.clone()) {
            crate::boxes::copy_box_to(&piece.bytes, &size, &mut out.bytes, whole_dims, &start, &size, e);
        }
    }
    Ok(out)
}

/// Where device `p`'s block of a value of shape `shape` split by `dims` starts, and its size.
fn block_of(sh: &MeshSharding, what: &str, dims: &[Vec<String>], shape: &[i64], p: i64) -> Result<(Vec<i64>, Vec<i64>), ExecError> {
    if dims.len() != shape.len() {
        return Err(ExecError::BadInput(format!("{what} has {} dims, its sharding names {}", shape.len(), dims.len())));
    }
    let c = coords(sh, p);
    let mut start = vec![0i64; shape.len()];
    let mut size = shape.to_vec();
    for (d, axes) in dims.iter().enumerate() {
        let (mut parts, mut index) = (1i64, 0i64);
        for a in axes {
            let n = axis_size(&sh.axes, a).unwrap_or(1);
            index = index * n + c.get(a.as_str()).copied().unwrap_or(0);
            parts *= n;
        }
        if shape[d] % parts != 0 {
            return Err(ExecError::BadInput(format!("dim {d} of {what} has size {}, which does not split into {parts} equal shards", shape[d])));
        }
        size[d] = shape[d] / parts;
        start[d] = index * size[d];
    }
    Ok((start, size))
}

/// The dense block of `t` at `start` with extent `size`.
fn block(t: &HostTensor, start: &[i64], size: &[i64]) -> HostTensor {
    let e = t.dtype.size_bytes();
    let mut bytes = vec![0u8; size.iter().product::<i64>() as usize * e];
    crate::boxes::copy_box(&t.bytes, &t.dims, start, &mut bytes, size, size, e);
    HostTensor { dtype: t.dtype, dims: size.to_vec(), bytes }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tpuc_ir::DType;

    fn iota(dims: &[i64]) -> HostTensor {
        let n: i64 = dims.iter().product();
        HostTensor { dtype: DType::I32, dims: dims.to_vec(), bytes: (0..n as i32).flat_map(|v| v.to_le_bytes()).collect() }
    }

    fn values(t: &HostTensor) -> Vec<i32> {
        t.bytes.chunks(4).map(|c| i32::from_le_bytes(c.try_into().unwrap())).collect()
    }

    #[test]
    fn parses_meshes_and_shards() {
        assert_eq!(parse_mesh("x=2,y=4").unwrap(), vec![("x".into(), 2), ("y".into(), 4)]);
        assert!(parse_mesh("x=2,x=2").unwrap_err().contains("twice"));
        assert!(parse_mesh("x=0").unwrap_err().contains("positive"));
        assert!(parse_mesh("x").unwrap_err().contains("NAME=SIZE"));
        let (n, d) = parse_shard("fc1.weight=y,_").unwrap();
        assert_eq!((n.as_str(), d), ("fc1.weight", vec![vec!["y".to_string()], vec![]]));
        assert_eq!(parse_shard("x=x+y,_").unwrap().1, vec![vec!["x".to_string(), "y".to_string()], vec![]]);
    }

    #[test]
    fn shard_plans_round_trip_through_their_json() {
        let text = r#"{"mesh": "x=2,y=2", "shard": {"fc1.weight": "x+y,_", "x": "_,y"}, "policy": "tp"}"#;
        let plan = ShardPlan::parse(text).unwrap();
        assert_eq!(plan.mesh, Some(vec![("x".into(), 2), ("y".into(), 2)]));
        assert_eq!(plan.shard["x"], vec![vec![], vec!["y".to_string()]]);
        assert_eq!(plan.policy, Some(ShardPolicy::Tp));
        assert_eq!(ShardPlan::parse(&plan.to_json().to_string()).unwrap(), plan);
        assert_eq!(ShardPlan::parse("{}").unwrap(), ShardPlan::default());
        assert!(ShardPlan::parse(r#"{"policy": "zero3"}"#).unwrap_err().contains("expected one of dp, fsdp, tp"));
        assert!(ShardPlan::parse(r#"{"mesh": 4}"#).unwrap_err().contains("`mesh`"));
        assert!(ShardPlan::parse("[]").unwrap_err().contains("expected an object"));
    }

    #[test]
    fn devices_hold_their_row_major_blocks() {
        let sh = MeshSharding {
            axes: vec![("x".into(), 2), ("y".into(), 2)],
            args: [("a".to_string(), vec![vec!["x".to_string()], vec!["y".to_string()]]), ("b".to_string(), vec![vec![], vec!["x".to_string(), "y".to_string()]])]
                .into_iter()
                .collect(),
            results: Default::default(),
        };
        let t = iota(&[4, 4]);
        // Device 1 = (x 0, y 1): rows 0..2, cols 2..4.
        assert_eq!(values(&shard_for_device(&sh, "a", &t, 1).unwrap()), vec![2, 3, 6, 7]);
        // Device 2 = (x 1, y 0): rows 2..4, cols 0..2.
        assert_eq!(values(&shard_for_device(&sh, "a", &t, 2).unwrap()), vec![8, 9, 12, 13]);
        // b: cols split 4 ways, x major: device 3 takes col 3.
        assert_eq!(values(&shard_for_device(&sh, "b", &t, 3).unwrap()), vec![3, 7, 11, 15]);
        // Unsharded arguments are whole on every device.
        assert!(matches!(shard_for_device(&sh, "c", &t, 2).unwrap(), Cow::Borrowed(b) if *b == t));
        // A dim that does not divide is an error naming it.
        let e = shard_for_device(&sh, "a", &iota(&[3, 4]), 0).unwrap_err().to_string();
        assert!(e.contains("dim 0 of `a`"), "{e}");
    }

    #[test]
    fn results_join_from_their_pieces() {
        let mut sh = MeshSharding { axes: vec![("x".into(), 2), ("y".into(), 3)], ..Default::default() };
        for dims in [vec![vec!["x".to_string()], vec!["y".to_string()]], vec![vec![], vec!["y".to_string(), "x".to_string()]], vec![vec!["x".to_string()], vec![]]] {
            sh.args.insert("r".into(), dims.clone());
            sh.results.insert(0, dims);
            let t = iota(&[4, 6]);
            let pieces: Vec<HostTensor> = (0..6).map(|p| shard_for_device(&sh, "r", &t, p).unwrap().into_owned()).collect();
            assert_eq!(assemble(&sh, 0, &sh.results[&0], &t.dims, &pieces).unwrap(), t);
        }
        // A piece of the wrong shape is an error, not a silent mix-up.
        let bad = vec![iota(&[1, 1]); 6];
        assert!(assemble(&sh, 0, &sh.results[&0], &[4, 6], &bad).unwrap_err().to_string().contains("device 0 returned"));
    }

    #[test]
    fn blocks_of_rank_3_and_0() {
        let t = iota(&[2, 3, 4]);
        assert_eq!(values(&block(&t, &[1, 1, 2], &[1, 2, 2])), vec![18, 19, 22, 23]);
        let s = iota(&[]);
        assert_eq!(block(&s, &[], &[]), s);
    }
}

/// An executable on several devices: the program's argument specs, each weight's buffer on
/// every device (uploaded once), the result types.
struct MultiDevice<'c> {
    loaded: &'c tpuc_runtime::LoadedExecutable,
    specs: Vec<crate::exec::ArgSpec>,
    /// Per argument: the weight's buffer on each device, or `None` for a user input.
    resident: Vec<Option<Vec<tpuc_runtime::Buffer>>>,
    results: Vec<tpuc_ir::TensorType>,
}

/// Which piece of an argument's value each device takes.
#[derive(Clone, Copy)]
enum Piece<'a> {
    /// Its block under a mesh sharding.
    Shard(&'a MeshSharding),
    /// The whole value.
    Whole,
    /// Row d of a value stacked along a new leading dim (per-rank inputs).
    Row,
}

impl Piece<'_> {
    fn of<'t>(self, name: &str, t: &'t HostTensor, d: usize) -> Result<Cow<'t, HostTensor>, ExecError> {
        match self {
            Piece::Shard(sh) => shard_for_device(sh, name, t, d as i64),
            Piece::Whole => Ok(Cow::Borrowed(t)),
            Piece::Row => {
                let mut start = vec![0i64; t.dims.len()];
                start[0] = d as i64;
                let mut size = t.dims.clone();
                size[0] = 1;
                let mut b = block(t, &start, &size);
                b.dims.remove(0);
                Ok(Cow::Owned(b))
            }
        }
    }
}

impl<'c> MultiDevice<'c> {
    fn new(
        compiled: &'c crate::exec::Compiled,
        module: &Module,
        weights: &BTreeMap<String, tpuc_ir::TensorData>,
        devices: i64,
        what: &str,
        piece: Piece<'_>,
    ) -> Result<Self, ExecError> {
        let (specs, results) = (crate::exec::arg_specs(module), crate::exec::result_types(module));
        Self::with_specs(compiled, specs, results, weights, devices, what, piece)
    }

    fn with_specs(
        compiled: &'c crate::exec::Compiled,
        specs: Vec<crate::exec::ArgSpec>,
        results: Vec<tpuc_ir::TensorType>,
        weights: &BTreeMap<String, tpuc_ir::TensorData>,
        devices: i64,
        what: &str,
        piece: Piece<'_>,
    ) -> Result<Self, ExecError> {
        let loaded = crate::exec::loaded_of(compiled)?;
        if loaded.devices().len() as i64 != devices {
            return Err(ExecError::Unsupported(format!("the executable runs on {} devices, {what}", loaded.devices().len())));
        }
        let mut resident = Vec::with_capacity(specs.len());
        for spec in &specs {
            if !spec.kind.is_weight() {
                resident.push(None);
                continue;
            }
            let w = crate::exec::weight_of(weights, spec)?;
            let whole = HostTensor { dtype: w.ty.dtype, dims: w.ty.static_dims().unwrap_or_default(), bytes: w.to_dense_bytes().to_vec() };
            let mut per_device = Vec::with_capacity(devices as usize);
            for (d, device) in loaded.devices().iter().enumerate() {
                let s = piece.of(&spec.name, &whole, d)?;
                per_device.push(loaded.client().buffer_from_host(&s.bytes, crate::exec::element_type(s.dtype), &s.dims, Some(device))?);
            }
            resident.push(Some(per_device));
        }
        Ok(MultiDevice { loaded, specs, resident, results })
    }

    /// Uploads each device's piece of every user input and runs on all devices; returns each
    /// device's outputs.
    fn execute(&self, inputs: &[(String, HostTensor)], piece: Piece<'_>) -> Result<Vec<Vec<tpuc_runtime::Buffer>>, ExecError> {
        let client = self.loaded.client();
        let devices = self.loaded.devices();
        let mut uploaded: Vec<Vec<tpuc_runtime::Buffer>> = Vec::with_capacity(devices.len());
        for (d, device) in devices.iter().enumerate() {
            let mut mine = Vec::with_capacity(inputs.len());
            let user = self.specs.iter().filter(|s| !s.kind.is_weight());
            for (spec, (_, t)) in user.zip(inputs) {
                let s = piece.of(&spec.name, t, d)?;
                mine.push(client.buffer_from_host(&s.bytes, crate::exec::element_type(s.dtype), &s.dims, Some(device))?);
            }
            uploaded.push(mine);
        }
        Ok(self.loaded.execute_partitioned(&device_argument_lists(&self.resident, &uploaded))?)
    }

    fn to_host(&self, outputs: Vec<tpuc_runtime::Buffer>) -> Result<Vec<HostTensor>, ExecError> {
        outputs_to_host(outputs, &self.results)
    }
}

/// Each device's arguments of one execute, in order: the resident weights' buffers on that
/// device in their slots, the device's freshly uploaded user inputs, in order, in the others.
pub(crate) fn device_argument_lists<'a, R: std::borrow::Borrow<Vec<tpuc_runtime::Buffer>>>(
    resident: &'a [Option<R>],
    uploaded: &'a [Vec<tpuc_runtime::Buffer>],
) -> Vec<Vec<&'a tpuc_runtime::Buffer>> {
    uploaded
        .iter()
        .enumerate()
        .map(|(d, mine)| {
            let mut next = mine.iter();
            resident
                .iter()
                .map(|slot| match slot {
                    Some(per_device) => &per_device.borrow()[d],
                    None => next.next().expect("one upload per user input"),
                })
                .collect()
        })
        .collect()
}

/// One device's outputs on the host, with the buffers' own (per-device) dims.
pub(crate) fn outputs_to_host(outputs: Vec<tpuc_runtime::Buffer>, results: &[tpuc_ir::TensorType]) -> Result<Vec<HostTensor>, ExecError> {
    let dims = outputs.iter().map(|b| b.shape().map(|s| s.dims)).collect::<Result<Vec<_>, _>>()?;
    Ok(tpuc_runtime::Buffer::into_host_all(outputs)?
        .into_iter()
        .zip(results)
        .zip(dims)
        .map(|((bytes, ty), dims)| HostTensor { dtype: ty.dtype, dims, bytes: bytes.into_vec() })
        .collect())
}

/// Runs an SPMD executable on the devices of its mesh: the weights' shards uploaded once per
/// device, each call's inputs split per device, the (replicated) results read from the first
/// device.
pub struct ShardedRunner<'c> {
    inner: MultiDevice<'c>,
    sharding: MeshSharding,
}

impl<'c> ShardedRunner<'c> {
    pub fn new(
        compiled: &'c crate::exec::Compiled,
        module: &Module,
        weights: &BTreeMap<String, tpuc_ir::TensorData>,
        sharding: &MeshSharding,
    ) -> Result<Self, ExecError> {
        let n = device_count(sharding);
        let inner = MultiDevice::new(compiled, module, weights, n, &format!("the mesh has {n}"), Piece::Shard(sharding))?;
        Ok(ShardedRunner { inner, sharding: sharding.clone() })
    }

    /// For a StableHLO module sharded by its producer (a JAX module with `sdy` shardings): every
    /// argument a user input, in order.
    pub fn from_signature(compiled: &'c crate::exec::Compiled, sig: &crate::signature::Signature, sharding: &MeshSharding) -> Result<Self, ExecError> {
        let n = device_count(sharding);
        let specs = sig
            .args
            .iter()
            .map(|(name, ty)| crate::exec::ArgSpec { name: name.clone(), kind: tpuc_ir::ArgKind::UserInput, ty: ty.clone() })
            .collect();
        let no_weights = BTreeMap::new();
        let inner = MultiDevice::with_specs(compiled, specs, sig.results.to_vec(), &no_weights, n, &format!("the mesh has {n}"), Piece::Shard(sharding))?;
        Ok(ShardedRunner { inner, sharding: sharding.clone() })
    }

    /// Runs with `inputs` (source label, whole tensor) for the user inputs in signature order.
    pub fn run(&self, inputs: &[(String, HostTensor)]) -> Result<Vec<HostTensor>, ExecError> {
        crate::exec::check_inputs(&self.inner.specs, inputs)?;
        let per_device = self
            .inner
            .execute(inputs, Piece::Shard(&self.sharding))?
            .into_iter()
            .map(|o| self.inner.to_host(o))
            .collect::<Result<Vec<_>, _>>()?;
        join_results(&self.sharding, &self.inner.results, per_device)
    }
}

/// The whole results of an SPMD run from each device's outputs (`per_device[d][i]`: device
/// d's piece of result i): replicated results from the first device, split ones joined.
pub fn join_results(sh: &MeshSharding, types: &[tpuc_ir::TensorType], per_device: Vec<Vec<HostTensor>>) -> Result<Vec<HostTensor>, ExecError> {
    // Per result, its piece from every device.
    let mut pieces: Vec<Vec<HostTensor>> = types.iter().map(|_| Vec::with_capacity(per_device.len())).collect();
    for outs in per_device {
        for (column, t) in pieces.iter_mut().zip(outs) {
            column.push(t);
        }
    }
    let mut out = Vec::with_capacity(types.len());
    for (i, (ty, column)) in types.iter().zip(pieces).enumerate() {
        let whole = ty.static_dims().unwrap_or_default();
        if let Some(dims) = sh.results.get(&i) {
            out.push(assemble(sh, i, dims, &whole, &column)?);
            continue;
        }
        let first = column.into_iter().next().ok_or_else(|| ExecError::BadInput("missing device output".into()))?;
        // Without a sharding the partitioner may still split a result (a module from another
        // producer): a piece that is not the whole value cannot be placed.
        if first.dims != whole {
            return Err(ExecError::Unsupported(format!(
                "result {i} came back split ({:?} of {whole:?} per device) without a sharding that says how; annotate the result",
                first.dims
            )));
        }
        out.push(first);
    }
    Ok(out)
}

/// Runs a per-rank program (one replica per rank, collectives between them) on as many
/// devices: every user input holds all ranks' values stacked along a new leading dim, so does
/// every result; weights are the same on every rank.
pub struct RankRunner<'c> {
    inner: MultiDevice<'c>,
}

impl<'c> RankRunner<'c> {
    pub fn new(
        compiled: &'c crate::exec::Compiled,
        module: &Module,
        weights: &BTreeMap<String, tpuc_ir::TensorData>,
        ranks: i64,
    ) -> Result<Self, ExecError> {
        let inner = MultiDevice::new(compiled, module, weights, ranks, &format!("the program has {ranks} ranks"), Piece::Whole)?;
        Ok(RankRunner { inner })
    }

    /// Runs with `inputs` (source label, tensor of all ranks stacked along dim 0) for the user
    /// inputs in signature order; returns the results stacked the same way.
    pub fn run(&self, inputs: &[(String, HostTensor)]) -> Result<Vec<HostTensor>, ExecError> {
        let ranks = self.inner.loaded.devices().len() as i64;
        let user: Vec<&crate::exec::ArgSpec> = self.inner.specs.iter().filter(|s| !s.kind.is_weight()).collect();
        if user.len() != inputs.len() {
            return Err(ExecError::BadInput(format!("the program takes {} input(s) per rank, got {}", user.len(), inputs.len())));
        }
        for (k, (spec, (source, t))) in user.iter().zip(inputs).enumerate() {
            let want = spec.ty.static_dims().unwrap_or_default();
            if t.dtype != spec.ty.dtype || t.dims.first() != Some(&ranks) || t.dims[1..] != want[..] {
                return Err(ExecError::BadInput(format!(
                    "input {k} (`{}`) expects {ranks} ranks' {} stacked ([{ranks}, ...]), got {} from {source}",
                    spec.name,
                    spec.ty,
                    t.ty()
                )));
            }
        }
        // Rank r's input: row r of the stack.
        let outputs = self.inner.execute(inputs, Piece::Row)?;
        let mut stacked: Vec<HostTensor> = Vec::new();
        for per_rank in outputs {
            for (i, out) in self.inner.to_host(per_rank)?.into_iter().enumerate() {
                match stacked.get_mut(i) {
                    Some(s) => s.bytes.extend_from_slice(&out.bytes),
                    None => {
                        let mut dims = vec![ranks];
                        dims.extend(&out.dims);
                        stacked.push(HostTensor { dtype: out.dtype, dims, bytes: out.bytes });
                    }
                }
            }
        }
        Ok(stacked)
    }
}
