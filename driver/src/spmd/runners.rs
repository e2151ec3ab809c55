//! Running on several devices: the weights resident on every device, each device's piece of
//! the inputs, and the runners of SPMD programs ([`ShardedRunner`]) and per-rank programs
//! ([`RankRunner`]).

use super::blocks::{assemble, block, shard_for_device};
use super::{device_count, MeshSharding};
use crate::exec::ExecError;
use crate::tensor::HostTensor;
use std::borrow::Cow;
use std::collections::BTreeMap;
use tpuc_ir::Module;

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
