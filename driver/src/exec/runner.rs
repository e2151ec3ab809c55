//! Running a compiled program on one device: argument specs of `main`, input checks, the
//! [`Runner`] that keeps weights resident and uploads the user inputs of each run.

use super::{Compiled, ExecError};
use crate::tensor::HostTensor;
use std::collections::BTreeMap;
use std::time::Instant;
use tpuc_ir::{ArgKind, DType, Module, TensorData, TensorType};
use tpuc_runtime as rt;

/// The element type PJRT uses for an IR dtype.
pub fn element_type(d: DType) -> rt::ElementType {
    use rt::ElementType as E;
    match d {
        DType::Bool => E::Bool,
        DType::I8 => E::I8,
        DType::I16 => E::I16,
        DType::I32 => E::I32,
        DType::I64 => E::I64,
        DType::U8 => E::U8,
        DType::U16 => E::U16,
        DType::U32 => E::U32,
        DType::U64 => E::U64,
        DType::F8E4M3FN => E::F8E4M3FN,
        DType::F8E5M2 => E::F8E5M2,
        DType::F16 => E::F16,
        DType::BF16 => E::BF16,
        DType::F32 => E::F32,
        DType::F64 => E::F64,
        DType::C64 => E::C64,
        DType::C128 => E::C128,
    }
}

/// One argument of `main` as `run` needs it.
pub(crate) struct ArgSpec {
    pub(crate) name: String,
    pub(crate) kind: ArgKind,
    pub(crate) ty: TensorType,
}

pub(crate) fn arg_specs(module: &Module) -> Vec<ArgSpec> {
    let Some(func) = module.main_func() else { return Vec::new() };
    let entry = module.entry_block(func);
    module.blocks[entry]
        .args()
        .iter()
        .zip(&func.args)
        .map(|(&v, info)| ArgSpec { name: info.name.clone(), kind: info.kind, ty: module.values[v].ty.clone() })
        .collect()
}

fn show_inputs(specs: &[&ArgSpec]) -> String {
    specs.iter().map(|s| format!("{}: {}", s.name, s.ty)).collect::<Vec<_>>().join(", ")
}

/// Time spent in each step of one [`Runner::run`].
#[derive(Clone, Copy, Debug, Default)]
pub struct RunTimes {
    /// Checking the inputs against the signature.
    pub check: std::time::Duration,
    /// Host → device copies of the inputs.
    pub upload: std::time::Duration,
    /// The PJRT execute call (until the outputs are ready).
    pub execute: std::time::Duration,
    /// Device → host copies of the outputs.
    pub download: std::time::Duration,
}

impl RunTimes {
    pub fn total(&self) -> std::time::Duration {
        self.check + self.upload + self.execute + self.download
    }
}

/// A loaded executable with its weights resident on the device: weights are uploaded once,
/// then each [`Runner::run`] uploads only the user inputs.
pub struct Runner<'c> {
    loaded: &'c rt::LoadedExecutable,
    specs: Vec<ArgSpec>,
    /// One slot per argument: the resident weight buffer, or `None` for a user input.
    resident: Vec<Option<std::sync::Arc<rt::Buffer>>>,
    results: Vec<TensorType>,
}

impl<'c> Runner<'c> {
    /// Uploads the weight arguments (parameters, buffers, constants) of `module`'s `main`.
    pub fn new(compiled: &'c Compiled, module: &Module, weights: &BTreeMap<String, TensorData>) -> Result<Self, ExecError> {
        let loaded = loaded_of(compiled)?;
        let specs = arg_specs(module);
        let client = loaded.client();
        let mut resident = Vec::with_capacity(specs.len());
        for spec in &specs {
            if !spec.kind.is_weight() {
                resident.push(None);
                continue;
            }
            let w = weight_of(weights, spec)?;
            let dims = w.ty.static_dims().unwrap_or_default();
            let bytes = w.to_dense_bytes();
            resident.push(Some(std::sync::Arc::new(client.buffer_from_host(&bytes, element_type(w.ty.dtype), &dims, None)?)));
        }
        Ok(Runner { loaded, specs, resident, results: result_types(module) })
    }

    /// A runner for a StableHLO module compiled as given (no tpuc IR beside it): every
    /// argument of `sig` is a user input, in order.
    pub fn from_signature(compiled: &'c Compiled, sig: &crate::signature::Signature) -> Result<Self, ExecError> {
        let loaded = loaded_of(compiled)?;
        let specs: Vec<ArgSpec> =
            sig.args.iter().map(|(name, ty)| ArgSpec { name: name.clone(), kind: ArgKind::UserInput, ty: ty.clone() }).collect();
        let resident = vec![None; specs.len()];
        Ok(Runner { loaded, specs, resident, results: sig.results.to_vec() })
    }

    /// Replaces the resident value of a weight argument (e.g. after an optimizer step); the
    /// other weights stay on the device.
    pub fn update_weight(&mut self, name: &str, tensor: &HostTensor) -> Result<(), ExecError> {
        let i = self
            .specs
            .iter()
            .position(|s| s.kind.is_weight() && s.name == name)
            .ok_or_else(|| ExecError::BadInput(format!("`{name}` is not a weight argument of this program")))?;
        if tensor.ty() != self.specs[i].ty {
            return Err(ExecError::BadInput(format!(
                "weight `{name}` expects {}, got {}",
                self.specs[i].ty,
                tensor.ty()
            )));
        }
        let b = self.loaded.client().buffer_from_host(&tensor.bytes, element_type(tensor.dtype), &tensor.dims, None)?;
        self.resident[i] = Some(std::sync::Arc::new(b));
        Ok(())
    }

    /// The loaded executable, the argument specs and the resident weights.
    pub(crate) fn into_parts(self) -> (&'c rt::LoadedExecutable, Vec<ArgSpec>, Vec<Option<std::sync::Arc<rt::Buffer>>>) {
        (self.loaded, self.specs, self.resident)
    }

    /// The user inputs the program takes, as `name: type`.
    pub fn input_signature(&self) -> Vec<String> {
        self.specs.iter().filter(|s| !s.kind.is_weight()).map(|s| format!("{}: {}", s.name, s.ty)).collect()
    }

    /// Runs with `inputs` (source label, tensor) for the user inputs in signature order. Checks
    /// count, shape and dtype of every input first and names the argument on a mismatch.
    pub fn run(&self, inputs: &[(String, HostTensor)]) -> Result<(Vec<HostTensor>, RunTimes), ExecError> {
        let mut times = RunTimes::default();
        let t0 = Instant::now();
        check_inputs(&self.specs, inputs)?;
        times.check = t0.elapsed();
        let t1 = Instant::now();
        let client = self.loaded.client();
        let mut uploaded = Vec::with_capacity(inputs.len());
        for (_, t) in inputs {
            // Used in place where the plugin can (CPU): the inputs outlive the execution.
            uploaded.push(client.buffer_borrowing_host(&t.bytes, element_type(t.dtype), &t.dims, None)?);
        }
        let args = argument_list(&self.resident, &uploaded);
        times.upload = t1.elapsed();
        let t2 = Instant::now();
        let outputs = self.loaded.execute(&args)?;
        times.execute = t2.elapsed();
        drop(args);
        drop(uploaded);
        let t3 = Instant::now();
        let host = rt::Buffer::into_host_all(outputs)?
            .into_iter()
            .zip(&self.results)
            .map(|(bytes, ty)| HostTensor { dtype: ty.dtype, dims: ty.static_dims().unwrap_or_default(), bytes: bytes.into_vec() })
            .collect();
        times.download = t3.elapsed();
        Ok((host, times))
    }
}

/// The loaded executable to run, or why there is none (compiled for a device this host lacks).
pub(crate) fn loaded_of(compiled: &Compiled) -> Result<&rt::LoadedExecutable, ExecError> {
    compiled.loaded.as_ref().ok_or_else(|| {
        ExecError::Unsupported(format!(
            "cannot run on {}: this host has no such device (the executable was compiled only)",
            compiled.summary.target
        ))
    })
}

/// The data of weight argument `spec`.
pub(crate) fn weight_of<'w>(weights: &'w BTreeMap<String, TensorData>, spec: &ArgSpec) -> Result<&'w TensorData, ExecError> {
    weights.get(&spec.name).ok_or_else(|| {
        ExecError::BadInput(format!(
            "no data for {} `{}`: a bare model.json carries no weights; run the .pt2 archive",
            spec.kind.name(),
            spec.name
        ))
    })
}

/// Checks the count, dtype and shape of the user inputs against the program's signature,
/// naming the argument on a mismatch.
pub(crate) fn check_inputs(specs: &[ArgSpec], inputs: &[(String, HostTensor)]) -> Result<(), ExecError> {
    let user: Vec<&ArgSpec> = specs.iter().filter(|s| !s.kind.is_weight()).collect();
    if user.len() != inputs.len() {
        return Err(ExecError::BadInput(format!(
            "the program takes {} input(s) ({}), got {}",
            user.len(),
            show_inputs(&user),
            inputs.len()
        )));
    }
    for (k, (spec, (source, t))) in user.iter().zip(inputs).enumerate() {
        if t.dims.len() != spec.ty.rank() || t.ty() != spec.ty {
            return Err(ExecError::BadInput(format!(
                "input {k} (`{}`) expects {}, got {} from {source}",
                spec.name,
                spec.ty,
                t.ty()
            )));
        }
    }
    Ok(())
}

/// The arguments of one execute, in order: the resident weights in their slots and the
/// freshly uploaded user inputs, in order, in the others.
pub(crate) fn argument_list<'a, R: std::ops::Deref<Target = rt::Buffer>, B: std::ops::Deref<Target = rt::Buffer>>(
    resident: &'a [Option<R>],
    uploaded: &'a [B],
) -> Vec<&'a rt::Buffer> {
    let mut next = uploaded.iter();
    resident
        .iter()
        .map(|slot| match slot {
            Some(b) => &**b,
            None => &**next.next().expect("one upload per user input"),
        })
        .collect()
}

/// One execution of a program that updates its own state: `resident` holds a buffer per weight
/// argument (`None` for a user input, taken from `inputs` in order); for each `(argument,
/// result)` of `updates` the argument's buffer is donated to the execution and the result
/// becomes its resident value. Returns the other results, in order, on the device.
///
/// A state buffer shared elsewhere (another clone of its `Arc`) is read rather than donated,
/// so the update is a copy; one that is donated is gone even when the execution fails (its
/// slot is then left empty).
pub(crate) fn execute_step<B: std::ops::Deref<Target = rt::Buffer>>(
    loaded: &rt::LoadedExecutable,
    resident: &mut [Option<std::sync::Arc<rt::Buffer>>],
    inputs: &[B],
    updates: &[(usize, usize)],
) -> Result<Vec<rt::Buffer>, ExecError> {
    use std::sync::Arc;
    let n = resident.len();
    let mut owned: Vec<Option<rt::Buffer>> = (0..n).map(|_| None).collect();
    let mut shared: Vec<Option<Arc<rt::Buffer>>> = vec![None; n];
    if let Some(&(arg, _)) = updates.iter().find(|&&(arg, _)| resident.get(arg).is_none_or(Option::is_none)) {
        return Err(ExecError::BadInput(format!("state argument {arg} has no value")));
    }
    for &(arg, _) in updates {
        match resident[arg].take().map(Arc::try_unwrap) {
            Some(Ok(b)) => owned[arg] = Some(b),
            Some(Err(arc)) => shared[arg] = Some(arc),
            None => unreachable!("checked above"),
        }
    }
    let mut next_input = inputs.iter();
    let mut args = Vec::with_capacity(n);
    for i in 0..n {
        args.push(if let Some(b) = owned[i].take() {
            rt::Arg::Donated(b)
        } else if let Some(b) = shared[i].as_deref().or(resident[i].as_deref()) {
            rt::Arg::Borrowed(b)
        } else {
            rt::Arg::Borrowed(next_input.next().ok_or_else(|| ExecError::BadInput("too few inputs for the program".into()))?)
        });
    }
    let outputs = loaded.execute_with(args)?;
    drop(shared);
    let mut outputs: Vec<Option<rt::Buffer>> = outputs.into_iter().map(Some).collect();
    for &(arg, result) in updates {
        let b = outputs.get_mut(result).and_then(Option::take).ok_or_else(|| ExecError::Unsupported(format!("result {result} missing from the execution")))?;
        resident[arg] = Some(Arc::new(b));
    }
    Ok(outputs.into_iter().flatten().collect())
}

/// Compiles-then-runs convenience: weights from `weights`, user inputs from `inputs`.
pub fn run(
    compiled: &Compiled,
    module: &Module,
    weights: &BTreeMap<String, TensorData>,
    inputs: &[(String, HostTensor)],
) -> Result<Vec<HostTensor>, ExecError> {
    Ok(Runner::new(compiled, module, weights)?.run(inputs)?.0)
}

pub(crate) fn result_types(module: &Module) -> Vec<TensorType> {
    let Some(func) = module.main_func() else { return Vec::new() };
    let entry = module.entry_block(func);
    match module.terminator(entry) {
        Some(ret) => module.ops[ret].operands().iter().map(|&v| module.values[v].ty.clone()).collect(),
        None => Vec::new(),
    }
}
