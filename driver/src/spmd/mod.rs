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

mod blocks;
mod plan;
mod policy;
mod runners;
mod validate;
#[cfg(test)]
mod tests;

use tpuc_ir::Module;

pub use blocks::{assemble, shard_for_device};
pub use plan::{format_shard, parse_group, parse_mesh, parse_shard, ShardPlan};
pub use policy::{align_state, apply_policy, ShardPolicy};
pub(crate) use runners::{device_argument_lists, outputs_to_host};
pub use runners::{join_results, RankRunner, ShardedRunner};
pub use validate::check;

/// A device mesh and the shardings of `main`'s arguments (by name, as the user gives them) and
/// results, for a program partitioned over the mesh's devices (device p holds the shard at p's
/// row-major position in the mesh). [`MeshSharding::to_ir`] makes it the module's
/// mesh and its arguments' and results' metadata, which passes keep and the emitter writes as Shardy.
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
    /// Makes this the sharding of `module`: its mesh, and the split of each named argument and
    /// each listed result of `main` in their metadata (every other one whole). An argument the
    /// sharding names but `main` lacks is an error ([`check`] has said so first).
    pub fn to_ir(&self, module: &mut Module) -> Result<(), String> {
        let f = module.main_func().ok_or("the module has no `main`")?;
        if let Some(name) = self.args.keys().find(|n| !f.args().iter().any(|a| &a.name == *n)) {
            return Err(format!("no argument `{name}`"));
        }
        let results = module.terminator(module.entry_block(f)).map_or(0, |o| module.ops[o].operands().len());
        if let Some(&i) = self.results.keys().find(|&&i| i >= results) {
            return Err(format!("result {i} does not exist (the program has {results})"));
        }
        let f = module.main_func_mut().expect("checked above");
        for a in &mut f.args {
            a.sharding = self.args.get(&a.name).cloned();
        }
        // A sharded result needs metadata to carry its split, even in a function that had none.
        if f.results.is_empty() && !self.results.is_empty() {
            f.results = (0..results).map(|i| tpuc_ir::ResultInfo::new(tpuc_ir::ResultKind::UserOutput, format!("result{i}"))).collect();
        }
        for (i, r) in f.results.iter_mut().enumerate() {
            r.sharding = self.results.get(&i).cloned();
        }
        module.mesh = Some(tpuc_ir::Mesh { axes: self.axes.clone() });
        Ok(())
    }

    /// The sharding `module` carries (IR text with a `mesh`, or one that [`MeshSharding::to_ir`]
    /// recorded and passes kept), arguments by name.
    pub fn of_ir(module: &Module) -> Option<MeshSharding> {
        let mesh = module.mesh.as_ref()?;
        let f = module.main_func()?;
        let args = f.args.iter().filter_map(|a| Some((a.name.clone(), a.sharding.clone()?))).collect();
        let results = f.results.iter().enumerate().filter_map(|(i, r)| Some((i, r.sharding.clone()?))).collect();
        Some(MeshSharding { axes: mesh.axes.clone(), args, results })
    }
}

/// Devices in the mesh.
pub fn device_count(sh: &MeshSharding) -> i64 {
    sh.axes.iter().map(|(_, s)| s).product()
}

/// The size of mesh axis `name`, if the mesh has it.
fn axis_size(axes: &[(String, i64)], name: &str) -> Option<i64> {
    axes.iter().find(|(n, _)| n == name).map(|(_, s)| *s)
}
