//! Programs that update their own state (training steps, compiled with
//! [`super::SessionOptions::donate`]): an execution that donates the state to its updates and
//! keeps them on the device as the next state; state moved from one program of a model to
//! another (a new input shape); state read back to the host.
//!
//! Nothing but the user inputs goes up and nothing but the results that are not state comes
//! back: a step's traffic is its batch and its loss.

use super::{HostArray, Program};
use crate::exec::{ExecError, RunTimes};
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
        if self.sharding.is_some() || self.ranks.is_some() {
            return Err(ExecError::Unsupported(format!("{}: step runs single-device programs", self.name)));
        }
        self.check_call(inputs.len())?;
        self.runnable()?;
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

    /// A copy of weight `arg`'s resident value on the host (dense, row-major).
    pub fn read_weight(&self, arg: usize) -> Result<HostArray, ExecError> {
        match self.resident.get(arg) {
            Some(Some(b)) => Ok(HostArray::from(b.to_host()?)),
            _ => Err(ExecError::BadInput(format!(
                "{}: argument {arg} has no resident value on one device",
                self.name
            ))),
        }
    }
}
