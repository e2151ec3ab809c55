//! Running a compiled program: the user inputs of one execution, a run on one device, an SPMD
//! run over the mesh and a per-rank run.

use super::{HostArray, Program};
use crate::exec::{argument_list, ExecError, RunTimes};
use std::time::Instant;
use tpuc_ir::DType;
use tpuc_runtime as rt;

/// One user input of an execution.
pub(super) enum Input<'a> {
    Borrowed(rt::BorrowedBuffer<'a>),
    Kept(std::sync::Arc<rt::Buffer>),
}

impl std::ops::Deref for Input<'_> {
    type Target = rt::Buffer;
    fn deref(&self) -> &rt::Buffer {
        match self {
            Input::Borrowed(b) => b,
            Input::Kept(b) => b,
        }
    }
}

impl Program {
    /// True when this host can run the program (a TPU compile without a device cannot).
    pub fn can_run(&self) -> bool {
        self.loaded.is_some()
    }

    /// Positions of the user-input arguments, in order.
    pub fn user_args(&self) -> &[usize] {
        &self.user_args
    }

    /// A user input for one execution: a scalar i64 (a symbol's real size, a SymInt input)
    /// from the buffers kept per value, else borrowed (see [`Program::borrow`]). Scalars
    /// recur call after call (the sizes of a decode loop), and a buffer of their own costs
    /// a transfer each.
    pub(super) fn input<'a>(&self, arg: usize, bytes: &'a [u8]) -> Result<Input<'a>, ExecError> {
        let ty = &self.args[arg].ty;
        if ty.rank() == 0 && ty.dtype == DType::I64 && bytes.len() == 8 {
            let value = i64::from_le_bytes(bytes.try_into().expect("8 bytes"));
            let mut kept = self.scalars.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(b) = kept.get(&value) {
                return Ok(Input::Kept(b.clone()));
            }
            let b = std::sync::Arc::new(self.upload(arg, bytes)?);
            if kept.len() >= 4096 {
                kept.clear();
            }
            kept.insert(value, b.clone());
            return Ok(Input::Kept(b));
        }
        Ok(Input::Borrowed(self.borrow(arg, bytes)?))
    }

    /// A user input for one execution: used in place where the plugin can (CPU).
    fn borrow<'a>(&self, arg: usize, bytes: &'a [u8]) -> Result<rt::BorrowedBuffer<'a>, ExecError> {
        let (dims, element_type) = self.check_arg(arg, bytes)?;
        let (loaded, device) = self.runnable()?;
        Ok(loaded.client().buffer_borrowing_host(bytes, element_type, &dims, Some(device))?)
    }

    /// Checks a call's input count and that every weight has a value.
    pub(super) fn check_call(&self, inputs: usize) -> Result<(), ExecError> {
        if inputs != self.user_args.len() {
            return Err(ExecError::BadInput(format!(
                "{}: the program takes {} input(s), got {inputs}",
                self.name,
                self.user_args.len(),
            )));
        }
        if let Some(i) = (0..self.args.len()).find(|&i| self.args[i].kind.is_weight() && !self.has_weight(i)) {
            return Err(ExecError::BadInput(format!(
                "{}: {} `{}` has no value (set_weight was not called, or a failed step consumed it)",
                self.name,
                self.args[i].kind.name(),
                self.args[i].name
            )));
        }
        Ok(())
    }

    /// Runs with `inputs`, one dense row-major byte slice per user-input argument in order
    /// (read in place on CPU, so no copy is made on the way in). Every weight must have been
    /// set. Returns the results' bytes, in order: on CPU the result buffers' own memory, handed
    /// over without a copy.
    pub fn run(&self, inputs: &[&[u8]]) -> Result<(Vec<HostArray>, RunTimes), ExecError> {
        let mut times = RunTimes::default();
        let t0 = Instant::now();
        self.check_call(inputs.len())?;
        if let Some(n) = self.ranks {
            return Err(ExecError::BadInput(format!(
                "{}: a per-rank program runs all its {n} ranks at once (run_ranks)",
                self.name
            )));
        }
        let (loaded, _) = self.runnable()?;
        times.check = t0.elapsed();
        if let Some(sh) = &self.sharding {
            return self.run_sharded(sh, loaded, inputs, times);
        }
        let t1 = Instant::now();
        let mut uploaded = Vec::with_capacity(inputs.len());
        for (&arg, bytes) in self.user_args.iter().zip(inputs) {
            uploaded.push(self.input(arg, bytes)?);
        }
        let args = argument_list(&self.resident, &uploaded);
        times.upload = t1.elapsed();
        let t2 = Instant::now();
        let outputs = loaded.execute(&args)?;
        times.execute = t2.elapsed();
        let t3 = Instant::now();
        drop(args);
        // Give the inputs back before returning (waits until the plugin is done with them).
        drop(uploaded);
        let host = rt::Buffer::into_host_all(outputs)?;
        times.download = t3.elapsed();
        Ok((host, times))
    }

    /// Runs a per-rank program: `per_rank[r]` holds rank r's value of every argument of
    /// `main` (weights included: ranks hold different shards of them), dense row-major bytes
    /// in argument order. Rank r runs on device r. Returns each rank's results.
    pub fn run_ranks(&self, per_rank: &[Vec<&[u8]>]) -> Result<Vec<Vec<HostArray>>, ExecError> {
        let Some(n) = self.ranks else {
            return Err(ExecError::BadInput(format!("{}: not a per-rank program (compiled without ranks)", self.name)));
        };
        let (loaded, _) = self.runnable()?;
        if per_rank.len() as i64 != n {
            return Err(ExecError::BadInput(format!("{}: the program has {n} ranks, got inputs for {}", self.name, per_rank.len())));
        }
        let mut uploaded: Vec<Vec<rt::Buffer>> = Vec::with_capacity(per_rank.len());
        for (r, (inputs, device)) in per_rank.iter().zip(loaded.devices()).enumerate() {
            if inputs.len() != self.args.len() {
                return Err(ExecError::BadInput(format!(
                    "{}: rank {r}: the program takes {} argument(s), got {}",
                    self.name,
                    self.args.len(),
                    inputs.len()
                )));
            }
            let mut mine = Vec::with_capacity(inputs.len());
            for (arg, bytes) in inputs.iter().enumerate() {
                let (dims, element_type) = self.check_arg(arg, bytes)?;
                mine.push(loaded.client().buffer_from_host(bytes, element_type, &dims, Some(device))?);
            }
            uploaded.push(mine);
        }
        let args: Vec<Vec<&rt::Buffer>> = uploaded.iter().map(|u| u.iter().collect()).collect();
        let outputs = loaded.execute_partitioned(&args)?;
        drop(args);
        outputs.into_iter().map(|o| Ok(rt::Buffer::into_host_all(o)?)).collect()
    }

    /// An SPMD run: every device's shard of each input uploaded, all devices run, the
    /// (replicated) results read from the first.
    fn run_sharded(
        &self,
        sh: &crate::MeshSharding,
        loaded: &rt::LoadedExecutable,
        inputs: &[&[u8]],
        mut times: RunTimes,
    ) -> Result<(Vec<HostArray>, RunTimes), ExecError> {
        let t1 = Instant::now();
        let mut uploaded: Vec<Vec<rt::Buffer>> = loaded.devices().iter().map(|_| Vec::new()).collect();
        for (&arg, bytes) in self.user_args.iter().zip(inputs) {
            for (d, b) in self.upload_shards(sh, arg, bytes)?.into_iter().enumerate() {
                uploaded[d].push(b);
            }
        }
        let args = crate::spmd::device_argument_lists(&self.resident_shards, &uploaded);
        times.upload = t1.elapsed();
        let t2 = Instant::now();
        let mut outputs = loaded.execute_partitioned(&args)?;
        times.execute = t2.elapsed();
        let t3 = Instant::now();
        let host = if sh.results.is_empty() {
            // Every result replicated: the first device's, without a copy.
            let first = if outputs.is_empty() { Vec::new() } else { outputs.swap_remove(0) };
            rt::Buffer::into_host_all(first)?
        } else {
            let per_device = outputs
                .into_iter()
                .map(|o| crate::spmd::outputs_to_host(o, &self.results))
                .collect::<Result<Vec<_>, _>>()?;
            crate::spmd::join_results(sh, &self.results, per_device)?.into_iter().map(|t| rt::HostArray::from(t.bytes)).collect()
        };
        times.download = t3.elapsed();
        Ok((host, times))
    }
}
