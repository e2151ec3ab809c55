//! Training steps exported by `tpuc.train_step(...).export(dir)`, replayed without Python
//! (`tpuc run DIR --steps N`).
//!
//! The folder holds `step.json` (this manifest), `program.json` (the step program in the
//! torch.export schema: the state as parameter and buffer inputs, its updates as mutation
//! outputs, then the learning rates, the batch and, for random ops, the seed as user inputs)
//! and `state/N.npy` (the state, named in the manifest).
//!
//! A replay compiles the program with every state update aliased to its argument
//! ([`crate::LowerOptions::donate_state`]), uploads the state once, and runs the steps with
//! the state donated from one to the next: only the batch goes up and the loss comes down.

use crate::exec::{self, ExecError, RunTimes};
use crate::tensor::HostTensor;
use crate::{DriverError, Imported};
use std::path::{Path, PathBuf};
use tpuc_ir::{DType, TensorData};
use tpuc_runtime as rt;

/// The manifest (`step.json`).
#[derive(Clone, Debug, serde::Deserialize)]
pub struct Manifest {
    pub format: String,
    pub version: u32,
    /// The program file, relative to the folder.
    pub program: String,
    /// The state, in program order.
    pub state: Vec<StateFile>,
    /// Each param group's learning rate at export (the replay keeps them).
    pub lr: Vec<f64>,
    /// The batch inputs of one step (per micro-batch with `accumulate` > 1), in order.
    pub batch: Vec<BatchSpec>,
    pub accumulate: usize,
    /// Steps the model had taken when it was exported.
    pub steps_done: u64,
}

#[derive(Clone, Debug, serde::Deserialize)]
pub struct StateFile {
    /// The argument's name (`param/fc.weight`, `optim/exp_avg/fc.weight`, ...).
    pub name: String,
    /// The `.npy` file, relative to the folder.
    pub file: String,
    pub dtype: String,
    pub shape: Vec<i64>,
}

#[derive(Clone, Debug, serde::Deserialize)]
pub struct BatchSpec {
    pub dtype: String,
    pub shape: Vec<i64>,
}

/// An exported step folder.
pub struct StepExport {
    pub dir: PathBuf,
    pub manifest: Manifest,
}

/// The name of the manifest inside an export folder.
pub const MANIFEST: &str = "step.json";

/// Whether `path` is an exported step folder.
pub fn is_step_export(path: &Path) -> bool {
    path.is_dir() && path.join(MANIFEST).is_file()
}

impl StepExport {
    /// Reads the manifest of the folder `dir`.
    pub fn open(dir: &Path) -> Result<StepExport, DriverError> {
        let path = dir.join(MANIFEST);
        let bad = |m: String| DriverError::Exec(ExecError::BadInput(format!("{}: {m}", path.display())));
        let text = std::fs::read(&path).map_err(|e| bad(e.to_string()))?;
        let manifest: Manifest = serde_json::from_slice(&text).map_err(|e| bad(e.to_string()))?;
        if manifest.format != "tpuc-train-step" || manifest.version != 1 {
            return Err(bad(format!("not a tpuc training step of version 1 (format `{}`, version {})", manifest.format, manifest.version)));
        }
        Ok(StepExport { dir: dir.to_path_buf(), manifest })
    }

    /// The step program with its state as weights (from the `.npy` files).
    pub fn import(&self) -> Result<Imported, DriverError> {
        let mut imported = crate::import(&self.dir.join(&self.manifest.program))?;
        for s in &self.manifest.state {
            let path = self.dir.join(&s.file);
            let t = HostTensor::read_npy(&path).map_err(ExecError::from)?;
            if t.dims != s.shape {
                return Err(ExecError::BadInput(format!("{}: shape {:?}, the manifest says {:?} for `{}`", path.display(), t.dims, s.shape, s.name)).into());
            }
            let data = TensorData::from_vec(t.ty(), t.bytes)
                .map_err(|e| ExecError::BadInput(format!("{}: {e}", path.display())))?;
            imported.weights.insert(s.name.clone(), data);
        }
        imported.has_weight_data = true;
        Ok(imported)
    }

    /// The learning-rate input of every step: one float64 per param group.
    pub fn lr_input(&self) -> HostTensor {
        HostTensor {
            dtype: DType::F64,
            dims: vec![self.manifest.lr.len() as i64],
            bytes: self.manifest.lr.iter().flat_map(|v| v.to_le_bytes()).collect(),
        }
    }
}

/// A compiled step program with its state resident: each [`StepRunner::step`] donates the state
/// to its update.
pub struct StepRunner<'c> {
    loaded: &'c rt::LoadedExecutable,
    specs: Vec<exec::ArgSpec>,
    resident: Vec<Option<std::sync::Arc<rt::Buffer>>>,
    updates: Vec<(usize, usize)>,
    /// Types of the results that are not state updates, in order.
    outputs: Vec<tpuc_ir::TensorType>,
}

impl<'c> StepRunner<'c> {
    /// Uploads the state of `module`'s `main` (its weights) for a program lowered with
    /// `donate_state`.
    pub fn new(compiled: &'c exec::Compiled, module: &tpuc_ir::Module, weights: &std::collections::BTreeMap<String, TensorData>) -> Result<Self, ExecError> {
        let runner = exec::Runner::new(compiled, module, weights)?;
        let updates = module.state_aliases();
        let results = exec::result_types(module);
        let outputs = (0..results.len()).filter(|r| !updates.iter().any(|&(_, u)| u == *r)).map(|r| results[r].clone()).collect();
        let (loaded, specs, resident) = runner.into_parts();
        Ok(StepRunner { loaded, specs, resident, updates, outputs })
    }

    /// How many state arguments each step donates to their updates.
    pub fn state_updates(&self) -> usize {
        self.updates.len()
    }

    /// Runs one step on `inputs` (the user inputs in order: learning rates, batch, seed) and
    /// returns the results that are not state (the loss first).
    pub fn step(&mut self, inputs: &[(String, HostTensor)]) -> Result<(Vec<HostTensor>, RunTimes), ExecError> {
        let mut times = RunTimes::default();
        let t0 = std::time::Instant::now();
        exec::check_inputs(&self.specs, inputs)?;
        times.check = t0.elapsed();
        let t1 = std::time::Instant::now();
        let client = self.loaded.client();
        let mut uploaded = Vec::with_capacity(inputs.len());
        for (_, t) in inputs {
            uploaded.push(client.buffer_borrowing_host(&t.bytes, exec::element_type(t.dtype), &t.dims, None)?);
        }
        times.upload = t1.elapsed();
        let t2 = std::time::Instant::now();
        let outputs = exec::execute_step(self.loaded, &mut self.resident, &uploaded, &self.updates)?;
        times.execute = t2.elapsed();
        drop(uploaded);
        let t3 = std::time::Instant::now();
        let host = rt::Buffer::into_host_all(outputs)?
            .into_iter()
            .zip(&self.outputs)
            .map(|(bytes, ty)| HostTensor { dtype: ty.dtype, dims: ty.static_dims().unwrap_or_default(), bytes: bytes.into_vec() })
            .collect();
        times.download = t3.elapsed();
        Ok((host, times))
    }
}
