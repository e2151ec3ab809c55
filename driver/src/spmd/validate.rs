//! Checking a mesh sharding against the program: names, indices, dims and axes, and even
//! splits of static dims.

use super::{axis_size, MeshSharding};
use std::collections::BTreeMap;
use tpuc_ir::Module;

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
