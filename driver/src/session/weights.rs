//! Weights resident on the device: set by copy, aliased to host memory read in place, or
//! shared with another bucket of the same graph.

use super::Program;
use crate::exec::ExecError;

impl Program {
    /// Uploads the value of weight argument `arg` (dense, row-major bytes) and keeps it on the
    /// device until the next `set_weight` of that argument.
    pub fn set_weight(&mut self, arg: usize, bytes: &[u8]) -> Result<(), ExecError> {
        let spec = self.args.get(arg).ok_or_else(|| ExecError::BadInput(format!("{}: no argument {arg}", self.name)))?;
        if !spec.kind.is_weight() {
            return Err(ExecError::BadInput(format!("{}: argument {arg} (`{}`) is not a weight", self.name, spec.name)));
        }
        if let Some(sh) = &self.sharding {
            self.resident_shards[arg] = Some(std::sync::Arc::new(self.upload_shards(sh, arg, bytes)?));
            return Ok(());
        }
        let buffer = self.upload(arg, bytes)?;
        self.resident[arg] = Some(std::sync::Arc::new(buffer));
        self.aliases[arg] = None;
        Ok(())
    }

    /// Makes weight `arg` read `bytes`' memory in place at every run, where the plugin can
    /// (the CPU plugin, for aligned host memory): no copy, and never a stale value, whatever
    /// writes that memory between runs. Returns false, changing nothing, where it cannot (a
    /// plugin whose memory is not host memory, unaligned data, an SPMD program): the caller
    /// then gives the value with [`Program::set_weight`] before each run that needs it.
    ///
    /// # Safety
    /// Until the next `set_weight`/`alias_weight` of `arg` (or the program's end), whenever
    /// the program runs, the `bytes.len()` bytes at `bytes`' address must be live and hold
    /// the weight, and nothing may write them during the run. A caller holding a tensor checks
    /// before each run that the tensor still lives at [`Program::weight_address`].
    pub unsafe fn alias_weight(&mut self, arg: usize, bytes: &[u8]) -> Result<bool, ExecError> {
        let spec = self.args.get(arg).ok_or_else(|| ExecError::BadInput(format!("{}: no argument {arg}", self.name)))?;
        if !spec.kind.is_weight() {
            return Err(ExecError::BadInput(format!("{}: argument {arg} (`{}`) is not a weight", self.name, spec.name)));
        }
        if self.sharding.is_some() || self.ranks.is_some() {
            return Ok(false);
        }
        let (dims, element_type) = self.check_arg(arg, bytes)?;
        let (loaded, device) = self.runnable()?;
        // SAFETY: forwarded to our caller (see above).
        let aliased = unsafe { loaded.client().buffer_aliasing_host(bytes, element_type, &dims, Some(device))? };
        let Some(buffer) = aliased else { return Ok(false) };
        self.resident[arg] = Some(std::sync::Arc::new(buffer));
        self.aliases[arg] = Some(bytes.as_ptr() as usize);
        Ok(true)
    }

    /// The host address weight `arg` is read from in place at every run, when it is (see
    /// [`Program::alias_weight`]).
    pub fn weight_address(&self, arg: usize) -> Option<usize> {
        self.aliases.get(arg).copied().flatten()
    }

    /// Makes weight `arg` share the resident buffer of `other`'s weight `other_arg` (another
    /// bucket of the same graph: same client, same type). False when `other` has no such value.
    pub fn adopt_weight(&mut self, arg: usize, other: &Program, other_arg: usize) -> Result<bool, ExecError> {
        let (Some(mine), Some(theirs)) = (self.args.get(arg), other.args.get(other_arg)) else {
            return Err(ExecError::BadInput(format!("{}: no argument {arg}", self.name)));
        };
        // Per-rank programs take every argument per call.
        if !mine.kind.is_weight() || mine.ty != theirs.ty || self.ranks.is_some() || other.ranks.is_some() {
            return Ok(false);
        }
        match (&self.sharding, &other.sharding) {
            (None, None) => match other.resident.get(other_arg) {
                Some(Some(b)) => {
                    self.resident[arg] = Some(b.clone());
                    self.aliases[arg] = other.aliases[other_arg];
                    Ok(true)
                }
                _ => Ok(false),
            },
            // SPMD programs (the buckets of one graph under a mesh) share a weight's shards
            // when they split it alike over the same mesh.
            (Some(a), Some(b)) if a.axes == b.axes && a.args.get(&mine.name) == b.args.get(&theirs.name) => {
                match other.resident_shards.get(other_arg) {
                    Some(Some(shards)) => {
                        self.resident_shards[arg] = Some(shards.clone());
                        Ok(true)
                    }
                    _ => Ok(false),
                }
            }
            _ => Ok(false),
        }
    }

    /// True when weight `arg` has a resident value.
    pub fn has_weight(&self, arg: usize) -> bool {
        self.resident.get(arg).is_some_and(Option::is_some) || self.resident_shards.get(arg).is_some_and(Option::is_some)
    }
}
