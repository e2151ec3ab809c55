//! Programs that update their own state (training steps, compiled with
//! [`super::SessionOptions::donate`]): an execution that donates the state to its updates and
//! keeps them on the device as the next state; state moved from one program of a model to
//! another (a new input shape); state read back to the host.
//!
//! Nothing but the user inputs goes up and nothing but the results that are not state comes
//! back: a step's traffic is its batch and its loss.

use super::{HostArray, Program};
use crate::exec::{ExecError, RunTimes};
use std::sync::Arc;
use std::time::Instant;
use tpuc_runtime as rt;

impl Program {
    /// Runs one step: `inputs` are the user inputs (as [`Program::run`] takes them); every
    /// state argument is donated to its update ([`Program::state_updates`]), which becomes the
    /// argument's resident value. Returns the other results, in order, on the device.
    ///
    /// A step that fails leaves the state it donated without a value ([`Program::has_weight`]
    /// is false): set it again before the next step.
    pub fn step(&mut self, inputs: &[&[u8]]) -> Result<(Vec<rt::Buffer>, RunTimes), ExecError> {
        let mut times = RunTimes::default();
        let t0 = Instant::now();
        if self.ranks.is_some() {
            return Err(ExecError::Unsupported(format!("{}: step runs single-device and SPMD programs, not per-rank ones", self.name)));
        }
        self.check_call(inputs.len())?;
        self.runnable()?;
        if let Some(sh) = self.sharding.clone() {
            return self.step_sharded(&sh, inputs, times, t0);
        }
        times.check = t0.elapsed();
        let t1 = Instant::now();
        let mut uploaded = Vec::with_capacity(inputs.len());
        for (&arg, bytes) in self.user_args.iter().zip(inputs) {
            uploaded.push(self.input(arg, bytes)?);
        }
        times.upload = t1.elapsed();
        let t2 = Instant::now();
        let loaded = self.loaded.as_ref().expect("runnable: checked above");
        let outputs = crate::exec::execute_step(loaded, &mut self.resident, &uploaded, &self.state_updates)?;
        times.execute = t2.elapsed();
        drop(uploaded);
        Ok((outputs, times))
    }

    /// [`Program::step`] over a mesh: each device's shard of the state is donated to its shard
    /// of the update; the results that are not state must be replicated, and come from the
    /// first device.
    fn step_sharded(&mut self, sh: &crate::MeshSharding, inputs: &[&[u8]], mut times: RunTimes, t0: Instant) -> Result<(Vec<rt::Buffer>, RunTimes), ExecError> {
        let updated: Vec<usize> = self.state_updates.iter().map(|&(_, r)| r).collect();
        if let Some(r) = sh.results.keys().find(|r| !updated.contains(r)) {
            return Err(ExecError::Unsupported(format!("{}: result {r} is split over the mesh; a step returns replicated results", self.name)));
        }
        let (loaded, _) = self.runnable()?;
        let devices = loaded.devices().len();
        times.check = t0.elapsed();
        let t1 = Instant::now();
        let mut uploaded: Vec<Vec<rt::Buffer>> = (0..devices).map(|_| Vec::new()).collect();
        for (&arg, bytes) in self.user_args.iter().zip(inputs) {
            for (d, b) in self.upload_shards(sh, arg, bytes)?.into_iter().enumerate() {
                uploaded[d].push(b);
            }
        }
        if let Some(&(arg, _)) = self.state_updates.iter().find(|&&(arg, _)| self.resident_shards[arg].is_none()) {
            return Err(ExecError::BadInput(format!("{}: state argument `{}` has no value", self.name, self.args[arg].name)));
        }
        let n = self.args.len();
        let mut owned: Vec<Option<Vec<rt::Buffer>>> = (0..n).map(|_| None).collect();
        let mut shared: Vec<Option<Arc<Vec<rt::Buffer>>>> = vec![None; n];
        for &(arg, _) in &self.state_updates {
            match self.resident_shards[arg].take().map(Arc::try_unwrap) {
                Some(Ok(v)) => owned[arg] = Some(v),
                Some(Err(arc)) => shared[arg] = Some(arc),
                None => unreachable!("checked above"),
            }
        }
        let loaded = self.loaded.as_ref().expect("runnable: checked above");
        let mut per_device: Vec<Vec<rt::Arg<'_>>> = (0..devices).map(|_| Vec::with_capacity(n)).collect();
        let mut next_input = 0;
        for i in 0..n {
            if let Some(v) = owned[i].take() {
                for (d, b) in v.into_iter().enumerate() {
                    per_device[d].push(rt::Arg::Donated(b));
                }
            } else if let Some(v) = shared[i].as_deref().or(self.resident_shards[i].as_deref()) {
                for (d, list) in per_device.iter_mut().enumerate() {
                    list.push(rt::Arg::Borrowed(&v[d]));
                }
            } else {
                for (d, list) in per_device.iter_mut().enumerate() {
                    list.push(rt::Arg::Borrowed(&uploaded[d][next_input]));
                }
                next_input += 1;
            }
        }
        times.upload = t1.elapsed();
        let t2 = Instant::now();
        let outputs = loaded.execute_partitioned_with(per_device)?;
        times.execute = t2.elapsed();
        drop(shared);
        drop(uploaded);
        let mut outputs: Vec<Vec<Option<rt::Buffer>>> = outputs.into_iter().map(|o| o.into_iter().map(Some).collect()).collect();
        for &(arg, result) in &self.state_updates {
            let shards = outputs
                .iter_mut()
                .map(|o| o.get_mut(result).and_then(Option::take))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| ExecError::Unsupported(format!("{}: result {result} missing from the execution", self.name)))?;
            self.resident_shards[arg] = Some(Arc::new(shards));
        }
        let first = outputs.into_iter().next().unwrap_or_default();
        Ok((first.into_iter().flatten().collect(), times))
    }

    /// Moves the resident value of `other`'s weight `other_arg` to this program's weight `arg`
    /// (two programs of one model: the state follows the program that runs next). False,
    /// changing nothing, when `other` has no such value or the types differ.
    pub fn take_weight(&mut self, arg: usize, other: &mut Program, other_arg: usize) -> Result<bool, ExecError> {
        let (Some(mine), Some(theirs)) = (self.args.get(arg), other.args.get(other_arg)) else {
            return Err(ExecError::BadInput(format!("{}: no argument {arg}", self.name)));
        };
        if !mine.kind.is_weight() || mine.ty != theirs.ty || self.sharding.is_some() || other.sharding.is_some() {
            return Ok(false);
        }
        let same_client = match (&self.loaded, &other.loaded) {
            (Some(a), Some(b)) => a.client().plugin().path() == b.client().plugin().path(),
            _ => false,
        };
        if !same_client {
            return Ok(false);
        }
        match other.resident.get_mut(other_arg).and_then(Option::take) {
            Some(b) => {
                self.resident[arg] = Some(b);
                self.aliases[arg] = other.aliases[other_arg].take();
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// A copy of weight `arg`'s resident value on the host (dense, row-major), joined from
    /// every device's shard for a program over a mesh.
    pub fn read_weight(&self, arg: usize) -> Result<HostArray, ExecError> {
        if let (Some(sh), Some(Some(shards))) = (&self.sharding, self.resident_shards.get(arg)) {
            let spec = &self.args[arg];
            let whole = spec.ty.static_dims().unwrap_or_default();
            let Some(split) = sh.args.get(&spec.name) else {
                return Ok(HostArray::from(shards[0].to_host()?));
            };
            let pieces = shards
                .iter()
                .map(|b| Ok(crate::tensor::HostTensor { dtype: spec.ty.dtype, dims: b.shape()?.dims, bytes: b.to_host()? }))
                .collect::<Result<Vec<_>, ExecError>>()?;
            return Ok(HostArray::from(crate::spmd::assemble(sh, arg, split, &whole, &pieces)?.bytes));
        }
        match self.resident.get(arg) {
            Some(Some(b)) => Ok(HostArray::from(b.to_host()?)),
            _ => Err(ExecError::BadInput(format!("{}: argument {arg} has no resident value", self.name))),
        }
    }
}
