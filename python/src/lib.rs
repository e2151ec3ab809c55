//! `tpuc._C`: the Python extension. A thin layer over `tpuc_driver::session`: it compiles
//! serialized programs in process and runs them on tensors the Python side hands over as
//! DLPack capsules of contiguous host tensors (`torch.utils.dlpack.to_dlpack`). The extension
//! consumes each capsule, so the producer's memory stays alive while it is read (with the GIL
//! released, during the execution), and reads it in place without a copy on our side (on CPU
//! the plugin reads it in place too). Results come back as `HostBuffer`s, whose bytes torch
//! wraps without a copy (`torch.frombuffer`, which keeps the `HostBuffer` alive); on CPU they
//! are the result buffers' own memory, so no copy is made on the way out either.
//!
//! Errors are `tpuc.errors.TpucError` (with `kind`, `node`, `target`, `source`, and `nodes`:
//! every node an import failed at); a Rust panic is caught at every entry point and raised as a
//! `TpucError` of kind `internal`.

// The module is `tpuc._C`, as torch names its own extension.
#![allow(non_snake_case)]

mod dlpack;

use dlpack::Consumed;
use pyo3::exceptions::PyBufferError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use std::ffi::{c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use tpuc_driver::exec::{ExecError, Target};
use tpuc_driver::session::{self, SessionOptions};
use tpuc_driver::job_graph;
use tpuc_driver::DriverError;
use tpuc_driver::{ConstValue, InputSlot, NodeRef, OutputSlot};

/// Raises `tpuc.errors.TpucError(message, kind=..., node=..., target=..., source=..., graph=...)`.
fn tpuc_error(py: Python<'_>, message: String, kind: &str, at: Option<NodeRef>, graph: Option<&str>) -> PyErr {
    tpuc_error_at(py, message, kind, at, &[], graph)
}

/// As [`tpuc_error`], with every failed node of an import as `nodes=[{"kind", "node",
/// "target", "source", "message"}, ...]`.
fn tpuc_error_at(
    py: Python<'_>,
    message: String,
    kind: &str,
    at: Option<NodeRef>,
    nodes: &[session::NodeFailure],
    graph: Option<&str>,
) -> PyErr {
    let build = || -> PyResult<PyErr> {
        let cls = py.import("tpuc.errors")?.getattr("TpucError")?;
        let kw = PyDict::new(py);
        kw.set_item("kind", kind)?;
        if let Some(at) = &at {
            kw.set_item("node", &at.node)?;
            kw.set_item("target", &at.target)?;
            kw.set_item("source", &at.source)?;
        }
        if !nodes.is_empty() {
            let list = pyo3::types::PyList::empty(py);
            for n in nodes {
                let d = PyDict::new(py);
                d.set_item("kind", n.kind)?;
                d.set_item("node", &n.at.node)?;
                d.set_item("target", &n.at.target)?;
                d.set_item("source", &n.at.source)?;
                d.set_item("message", &n.message)?;
                list.append(d)?;
            }
            kw.set_item("nodes", list)?;
        }
        kw.set_item("graph", graph)?;
        let value = cls.call((message.clone(),), Some(&kw))?;
        Ok(PyErr::from_value(value))
    };
    build().unwrap_or_else(|e| e)
}

fn driver_error(py: Python<'_>, e: DriverError, graph: &str) -> PyErr {
    let kind = session::error_kind(&e);
    let at = session::error_node(&e);
    let nodes = session::error_nodes(&e);
    let message = e.to_string();
    // Run-time errors of a program already start with its name.
    let message = if message.starts_with(&format!("{graph}:")) { format!("tpuc: {message}") } else { format!("tpuc: {graph}: {message}") };
    tpuc_error_at(py, message, kind, at, &nodes, Some(graph))
}

fn exec_error(py: Python<'_>, e: ExecError, graph: &str) -> PyErr {
    driver_error(py, DriverError::from(e), graph)
}

/// Runs `f`, turning a Rust panic into a `TpucError` of kind `internal`.
fn guard<T>(py: Python<'_>, what: &str, f: impl FnOnce() -> PyResult<T>) -> PyResult<T> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(payload) => {
            let msg = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".to_string());
            Err(tpuc_error(
                py,
                format!("tpuc internal error in {what} (a bug in tpuc; please report it): {msg}"),
                "internal",
                None,
                None,
            ))
        }
    }
}

/// A bucketed program's result: its buffer (beginning with the values) and real dims.
type CutBuffer = (HostBuffer, Vec<i64>);

/// Result bytes owned by Rust, exposed through the buffer protocol (writable, one byte per
/// item) so that `torch.frombuffer` wraps them without a copy.
#[pyclass(module = "tpuc._C")]
struct HostBuffer {
    data: session::HostArray,
}

#[pymethods]
impl HostBuffer {
    fn __len__(&self) -> usize {
        self.data.len()
    }

    unsafe fn __getbuffer__(slf: Bound<'_, Self>, view: *mut ffi::Py_buffer, flags: c_int) -> PyResult<()> {
        if view.is_null() {
            return Err(PyBufferError::new_err("view is null"));
        }
        let (buf, len) = {
            let mut this = slf.try_borrow_mut().map_err(|e| PyBufferError::new_err(e.to_string()))?;
            let bytes = this.data.as_mut_slice();
            (bytes.as_mut_ptr(), bytes.len())
        };
        // SAFETY: `view` is a valid Py_buffer to fill (checked non-null); the data lives in the
        // HostArray owned by `slf`, which the view keeps alive through `obj`; a HostArray's
        // bytes never move.
        unsafe {
            (*view).obj = slf.into_any().into_ptr();
            (*view).buf = buf as *mut c_void;
            (*view).len = len as isize;
            (*view).readonly = 0;
            (*view).itemsize = 1;
            (*view).format = if (flags & ffi::PyBUF_FORMAT) == ffi::PyBUF_FORMAT {
                c"B".as_ptr() as *mut _
            } else {
                std::ptr::null_mut()
            };
            (*view).ndim = 1;
            (*view).shape = if (flags & ffi::PyBUF_ND) == ffi::PyBUF_ND { &mut (*view).len } else { std::ptr::null_mut() };
            (*view).strides =
                if (flags & ffi::PyBUF_STRIDES) == ffi::PyBUF_STRIDES { &mut (*view).itemsize } else { std::ptr::null_mut() };
            (*view).suboffsets = std::ptr::null_mut();
            (*view).internal = std::ptr::null_mut();
        }
        Ok(())
    }

    unsafe fn __releasebuffer__(&self, _view: *mut ffi::Py_buffer) {}
}

/// A result that stays on the device until read (`to_host`).
#[pyclass(module = "tpuc._C")]
struct DeviceArray {
    buffer: Option<session::DeviceBuffer>,
    #[pyo3(get)]
    dtype: &'static str,
    #[pyo3(get)]
    shape: Vec<i64>,
}

#[pymethods]
impl DeviceArray {
    /// The array's bytes on the host (the device buffer is released: read once).
    fn to_host(&mut self, py: Python<'_>) -> PyResult<HostBuffer> {
        guard(py, "DeviceArray.to_host", || {
            let b = self.buffer.take().ok_or_else(|| tpuc_error(py, "tpuc: this DeviceArray was already read".into(), "internal", None, None))?;
            let mut host = py
                .detach(|| session::DeviceBuffer::into_host_all(vec![b]))
                .map_err(|e| exec_error(py, ExecError::from(e), "DeviceArray"))?;
            Ok(HostBuffer { data: host.pop().expect("one array") })
        })
    }
}

/// A compiled graph with its weights resident on the device.
#[pyclass(module = "tpuc._C")]
struct Program {
    inner: session::Program,
    calls: AtomicU64,
    /// Nanoseconds inside `Program.run` (argument parsing excluded), and inside PJRT execute.
    run_ns: AtomicU64,
    execute_ns: AtomicU64,
    upload_ns: AtomicU64,
    download_ns: AtomicU64,
}

/// What an argument of a program's `main` is.
#[pyclass(module = "tpuc._C", eq, eq_int, frozen, from_py_object)]
#[derive(Copy, Clone, PartialEq, Eq)]
enum ArgKind {
    UserInput,
    Parameter,
    Buffer,
    Constant,
    /// A symbolic size passed as a rank-0 integer tensor.
    SymInt,
    /// The seed input of random ops (a user input of int64[2], drawn per call).
    Seed,
}

impl ArgKind {
    fn of(a: &session::ArgInfo) -> ArgKind {
        use tpuc_driver::ArgKind as K;
        match a.kind {
            K::UserInput if a.name == tpuc_driver::SEED_INPUT => ArgKind::Seed,
            K::UserInput => ArgKind::UserInput,
            K::Parameter => ArgKind::Parameter,
            K::Buffer => ArgKind::Buffer,
            K::Constant => ArgKind::Constant,
            K::SymInt => ArgKind::SymInt,
        }
    }
}

/// One argument of a program's `main`.
#[pyclass(module = "tpuc._C", frozen, get_all)]
struct Arg {
    name: String,
    kind: ArgKind,
    /// torch's name of the dtype (`float32`).
    dtype: &'static str,
    /// The static dims (empty where a dim is symbolic).
    dims: Vec<i64>,
    bytes: usize,
}

#[pymethods]
impl Arg {
    /// A parameter, buffer or constant: a value that comes with the program, not the call.
    #[getter]
    fn is_weight(&self) -> bool {
        matches!(self.kind, ArgKind::Parameter | ArgKind::Buffer | ArgKind::Constant)
    }
}

/// Where one input of the graph goes.
#[pyclass(module = "tpuc._C", frozen)]
enum Input {
    /// Argument `index` of `main`.
    Arg { index: usize },
    /// A constant the program folded in (the call's value is not read).
    Const { value: Py<PyAny> },
}

/// Where one output of the graph comes from.
#[pyclass(module = "tpuc._C", frozen)]
enum Output {
    /// Result `index` of `main`.
    Result { index: usize },
    /// A constant.
    Const { value: Py<PyAny> },
    /// A symbolic size expression (`8*s27`).
    Sym { expr: String },
}

fn const_to_py<'py>(py: Python<'py>, c: &ConstValue) -> PyResult<Bound<'py, PyAny>> {
    Ok(match c {
        ConstValue::None => py.None().into_bound(py),
        ConstValue::Int(i) => i.into_pyobject(py)?.into_any(),
        ConstValue::Float(f) => f.into_pyobject(py)?.into_any(),
        ConstValue::Bool(b) => b.into_pyobject(py)?.to_owned().into_any(),
        ConstValue::Str(s) => s.into_pyobject(py)?.into_any(),
    })
}

#[pymethods]
impl Program {
    /// Imports, lowers and compiles a torch.export-schema program (JSON bytes).
    #[staticmethod]
    #[pyo3(signature = (program, *, name="graph", target="cpu", topology=None, plugin=None, dump_dir=None, verify_each=false, bucket=None, precision=None, conv_precision=None, bf16=false, allow_excess_precision=false, fusion=true, mesh=None, shard_policy=None, shard=None, ranks=None, groups=None, donate=false))]
    #[allow(clippy::too_many_arguments)]
    fn compile(
        py: Python<'_>,
        program: &Bound<'_, PyBytes>,
        name: &str,
        target: &str,
        topology: Option<String>,
        plugin: Option<PathBuf>,
        dump_dir: Option<PathBuf>,
        verify_each: bool,
        bucket: Option<std::collections::BTreeMap<String, i64>>,
        precision: Option<&str>,
        conv_precision: Option<&str>,
        bf16: bool,
        allow_excess_precision: bool,
        fusion: bool,
        mesh: Option<&str>,
        shard_policy: Option<&str>,
        shard: Option<std::collections::BTreeMap<String, String>>,
        ranks: Option<i64>,
        groups: Option<std::collections::BTreeMap<String, Vec<Vec<i64>>>>,
        donate: bool,
    ) -> PyResult<Program> {
        guard(py, "Program.compile", || {
            let target: Target = target.parse().map_err(|e| tpuc_error(py, format!("tpuc: {e}"), "options", None, None))?;
            let precision = match precision {
                None => None,
                Some(p) => Some(p.parse().map_err(|e| tpuc_error(py, format!("tpuc: precision: {e}"), "options", None, None))?),
            };
            let conv_precision = match conv_precision {
                None => None,
                Some(p) => Some(p.parse().map_err(|e| tpuc_error(py, format!("tpuc: conv_precision: {e}"), "options", None, None))?),
            };
            let opt_err = |m: String| tpuc_error(py, format!("tpuc: {m}"), "options", None, None);
            let sharding = match mesh {
                None if shard.is_some() || shard_policy.is_some() => {
                    return Err(opt_err("`shard` and `shard_policy` need a `mesh`".into()));
                }
                None => None,
                Some(m) => {
                    let axes = tpuc_driver::spmd::parse_mesh(m).map_err(|e| opt_err(format!("mesh: {e}")))?;
                    let mut args = std::collections::BTreeMap::new();
                    for (name, axes) in shard.unwrap_or_default() {
                        let (_, dims) = tpuc_driver::spmd::parse_shard(&format!("{name}={axes}")).map_err(|e| opt_err(format!("shard: {e}")))?;
                        args.insert(name, dims);
                    }
                    Some(tpuc_driver::MeshSharding { axes, args, results: Default::default() })
                }
            };
            let shard_policy = match shard_policy {
                None => None,
                Some(p) => Some(tpuc_driver::spmd::ShardPolicy::parse(p).ok_or_else(|| {
                    opt_err(format!("shard_policy {p:?}: expected one of {}", tpuc_driver::spmd::ShardPolicy::NAMES.join(", ")))
                })?),
            };
            let ranks = match ranks {
                None if groups.is_some() => return Err(opt_err("`groups` needs `ranks`".into())),
                None => None,
                Some(n) if n < 1 => return Err(opt_err(format!("ranks {n}: expected a positive count"))),
                Some(_) if sharding.is_some() => return Err(opt_err("`ranks` and `mesh` exclude each other".into())),
                Some(count) => {
                    let mut named = std::collections::BTreeMap::new();
                    for (name, members) in groups.unwrap_or_default() {
                        let text = members.iter().map(|g| g.iter().map(i64::to_string).collect::<Vec<_>>().join(",")).collect::<Vec<_>>().join("|");
                        let (name, members) = tpuc_driver::spmd::parse_group(&format!("{name}={text}"), count).map_err(|e| opt_err(format!("groups: {e}")))?;
                        named.insert(name, members);
                    }
                    Some(tpuc_driver::Ranks { count, groups: named })
                }
            };
            let options = SessionOptions {
                ranks,
                sharding,
                shard_policy,
                target,
                topology,
                plugin,
                dump_dir,
                verify_each,
                name: name.to_string(),
                bucket,
                precision,
                conv_precision,
                bf16,
                allow_excess_precision,
                no_fusion: !fusion,
                donate,
            };
            let bytes = program.as_bytes().to_vec();
            let result = py.detach(|| catch_unwind(AssertUnwindSafe(|| session::compile(bytes, &options))));
            let compiled = match result {
                Ok(r) => r.map_err(|e| driver_error(py, e, name))?,
                Err(p) => std::panic::resume_unwind(p),
            };
            Ok(Program {
                inner: compiled,
                calls: AtomicU64::new(0),
                run_ns: AtomicU64::new(0),
                execute_ns: AtomicU64::new(0),
                upload_ns: AtomicU64::new(0),
                download_ns: AtomicU64::new(0),
            })
        })
    }

    #[getter]
    fn name(&self) -> &str {
        &self.inner.name
    }

    /// Per signature input (the graph's placeholders, then the seed input where there is
    /// one): `Input.Arg(index)`, an argument of `main`, or `Input.Const(value)`.
    #[getter]
    fn input_slots(&self, py: Python<'_>) -> PyResult<Vec<Input>> {
        self.inner
            .inputs
            .iter()
            .map(|s| match s {
                InputSlot::Arg(i) => Ok(Input::Arg { index: *i }),
                InputSlot::Const(c) => Ok(Input::Const { value: const_to_py(py, c)?.unbind() }),
            })
            .collect()
    }

    /// Per signature output: `Output.Result(index)`, `Output.Const(value)` or
    /// `Output.Sym(expr)` (a symbolic size, evaluated by `sym_output`).
    #[getter]
    fn output_slots(&self, py: Python<'_>) -> PyResult<Vec<Output>> {
        self.inner
            .outputs
            .iter()
            .map(|s| match s {
                OutputSlot::Result(i) => Ok(Output::Result { index: *i }),
                OutputSlot::Const(c) => Ok(Output::Const { value: const_to_py(py, c)?.unbind() }),
                OutputSlot::Sym(e) => Ok(Output::Sym { expr: e.to_string() }),
            })
            .collect()
    }

    /// The statuses to check after each run, as torch's `_linalg_check_errors` checks them:
    /// (result index, API name, is_matrix), in graph order (see `tpuc_driver::checks`).
    #[getter]
    fn checks(&self) -> Vec<(usize, String, bool)> {
        self.inner.checks.iter().map(|c| (c.result, c.api.clone(), c.is_matrix)).collect()
    }

    /// The value of signature output `k`, a symbolic size expression (`("sym", text)` in
    /// `output_slots`), for the real sizes `sizes` (symbol -> size).
    fn sym_output(&self, py: Python<'_>, k: usize, sizes: std::collections::BTreeMap<String, i64>) -> PyResult<i64> {
        let err = |m: String| self.bad_input(py, m);
        match self.inner.outputs.get(k) {
            Some(OutputSlot::Sym(e)) => e.eval(&|s| sizes.get(s).copied()).ok_or_else(|| err(format!("output {k}: no size for a symbol of `{e}`"))),
            _ => Err(err(format!("output {k} is not a symbolic size"))),
        }
    }

    /// `main`'s arguments.
    #[getter]
    fn args(&self) -> Vec<Arg> {
        self.inner
            .args
            .iter()
            .map(|a| Arg {
                name: a.name.clone(),
                kind: ArgKind::of(a),
                dtype: session::torch_dtype_name(a.ty.dtype),
                dims: a.ty.static_dims().unwrap_or_default(),
                bytes: a.bytes,
            })
            .collect()
    }

    /// `main`'s results: (torch dtype name, dims, bytes).
    #[getter]
    fn results(&self) -> Vec<(&'static str, Vec<i64>, usize)> {
        self.inner
            .results
            .iter()
            .map(|t| (session::torch_dtype_name(t.dtype), t.static_dims().unwrap_or_default(), t.size_bytes().unwrap_or(0)))
            .collect()
    }

    /// The argument index of the seed input a program with random ops takes (int64[2]: two
    /// 31-bit words, drawn from torch's generator per call), or None.
    #[getter]
    fn seed_arg(&self) -> Option<usize> {
        self.inner.args.iter().position(|a| ArgKind::of(a) == ArgKind::Seed)
    }

    /// Argument indices of the user inputs, in the order `run` takes them.
    #[getter]
    fn user_args(&self) -> Vec<usize> {
        self.inner.user_args().to_vec()
    }

    #[getter]
    fn stablehlo(&self) -> &str {
        &self.inner.stablehlo
    }

    /// Where the executable came from (`miss` = compiled; cache tiers otherwise).
    #[getter]
    fn cache(&self) -> &str {
        self.inner.summary.cache
    }

    /// The compile summary line.
    #[getter]
    fn summary(&self) -> String {
        self.inner.summary.line()
    }

    /// The compile summary as JSON (target, cache, cost and memory figures, ...).
    #[getter]
    fn summary_json(&self) -> String {
        serde_json::to_string(&self.inner.summary).unwrap_or_default()
    }

    #[getter]
    fn compile_seconds(&self) -> f64 {
        self.inner.summary.compile_seconds
    }

    /// Seconds spent importing, in passes and emitting StableHLO.
    #[getter]
    fn lower_seconds(&self) -> (f64, f64, f64) {
        let t = &self.inner.timings;
        (t.import.as_secs_f64(), t.passes.iter().fold(0.0, |acc, p| acc + p.1.as_secs_f64()), t.emit.as_secs_f64())
    }

    #[getter]
    fn can_run(&self) -> bool {
        self.inner.can_run()
    }

    #[getter]
    fn serialized<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.inner.serialized)
    }

    /// Uploads weight argument `arg` from a DLPack capsule of a contiguous host tensor of the
    /// argument's dtype and shape (consumed: pass a fresh capsule per call); the value stays on
    /// the device until the next `set_weight` of that argument.
    fn set_weight(&mut self, py: Python<'_>, arg: usize, tensor: &Bound<'_, PyAny>) -> PyResult<()> {
        guard(py, "Program.set_weight", || {
            let name = self.inner.name.clone();
            let owner = Consumed::take(tensor).map_err(|m| self.bad_input(py, format!("weight argument {arg}: {m}")))?;
            let view = owner.host_view().map_err(|m| self.bad_input(py, format!("weight argument {arg}: {m}")))?;
            self.check_view(py, arg, &view)?;
            self.inner.set_weight(arg, view.bytes).map_err(|e| exec_error(py, e, &name))
        })
    }

    /// Makes weight `arg` read the tensor of a DLPack capsule (consumed) in place at every run,
    /// where the plugin can: True then, and `weight_address(arg)` is the address it reads.
    /// False (nothing changed) where it cannot; give the value with `set_weight` before each
    /// run then. The caller must run the program only while a tensor holding the weight lives
    /// at that address: `graph.py` checks every weight's `data_ptr()` before every run.
    fn alias_weight(&mut self, py: Python<'_>, arg: usize, tensor: &Bound<'_, PyAny>) -> PyResult<bool> {
        guard(py, "Program.alias_weight", || {
            let name = self.inner.name.clone();
            let owner = Consumed::take(tensor).map_err(|m| self.bad_input(py, format!("weight argument {arg}: {m}")))?;
            let view = owner.host_view().map_err(|m| self.bad_input(py, format!("weight argument {arg}: {m}")))?;
            self.check_view(py, arg, &view)?;
            // SAFETY: the contract above: the Python caller runs the program only after checking
            // that the weight's tensor still lives at `weight_address(arg)`.
            unsafe { self.inner.alias_weight(arg, view.bytes) }.map_err(|e| exec_error(py, e, &name))
        })
    }

    /// The host address weight `arg` is read from in place at every run, or None.
    fn weight_address(&self, arg: usize) -> Option<usize> {
        self.inner.weight_address(arg)
    }

    /// True when weight `arg` has a resident value.
    fn has_weight(&self, arg: usize) -> bool {
        self.inner.has_weight(arg)
    }

    /// Shares `other`'s resident value of weight `other_arg` as weight `arg` (another bucket of
    /// the same graph); False when `other` has none or the types differ.
    fn adopt_weight(&mut self, py: Python<'_>, arg: usize, other: &Program, other_arg: usize) -> PyResult<bool> {
        let name = self.inner.name.clone();
        self.inner.adopt_weight(arg, &other.inner, other_arg).map_err(|e| exec_error(py, e, &name))
    }

    /// Moves `other`'s resident value of weight `other_arg` to this program's weight `arg` (the
    /// state of a training step following the program that runs next); False when `other` has
    /// none, the types differ or the programs run on different clients.
    fn take_weight(&mut self, py: Python<'_>, arg: usize, other: &Bound<'_, Program>, other_arg: usize) -> PyResult<bool> {
        let name = self.inner.name.clone();
        let mut other = other.try_borrow_mut().map_err(|_| self.bad_input(py, "take_weight: the other program is this one".into()))?;
        self.inner.take_weight(arg, &mut other.inner, other_arg).map_err(|e| exec_error(py, e, &name))
    }

    /// A copy of weight `arg`'s resident value (a HostBuffer of its dense bytes).
    fn read_weight(&self, py: Python<'_>, arg: usize) -> PyResult<HostBuffer> {
        guard(py, "Program.read_weight", || {
            let inner = &self.inner;
            let data = py.detach(|| inner.read_weight(arg)).map_err(|e| exec_error(py, e, &self.inner.name))?;
            Ok(HostBuffer { data })
        })
    }

    /// Runs one step of a program compiled with `donate=True`: the user inputs as `run` takes
    /// them; every state argument is donated to its update, which stays resident as its next
    /// value. Returns the other results as DeviceArrays (on the device until read).
    fn step(&mut self, py: Python<'_>, inputs: Vec<Bound<'_, PyAny>>) -> PyResult<Vec<DeviceArray>> {
        guard(py, "Program.step", || {
            let t0 = std::time::Instant::now();
            let owners = self.consume(py, &inputs)?;
            let bytes = self.input_bytes(py, &owners)?;
            let kept: Vec<usize> = (0..self.inner.results.len()).filter(|r| !self.inner.state_updates.iter().any(|&(_, u)| u == *r)).collect();
            let inner = &mut self.inner;
            let result = py.detach(|| catch_unwind(AssertUnwindSafe(|| inner.step(&bytes))));
            drop(owners);
            let outputs = self.finished(py, result, t0)?;
            Ok(outputs
                .into_iter()
                .zip(kept)
                .map(|(b, r)| {
                    let t = &self.inner.results[r];
                    DeviceArray { buffer: Some(b), dtype: session::torch_dtype_name(t.dtype), shape: t.static_dims().unwrap_or_default() }
                })
                .collect())
        })
    }

    /// Bucketed programs: per symbol, the argument taking its real size.
    #[getter]
    fn size_args(&self) -> Vec<(String, usize)> {
        self.inner.size_args.clone()
    }

    /// Runs with the user inputs given as DLPack capsules of contiguous host tensors, one per
    /// user argument in order (consumed: each holds its tensor's memory until the call
    /// returns). Returns one HostBuffer per result.
    fn run(&self, py: Python<'_>, inputs: Vec<Bound<'_, PyAny>>) -> PyResult<Vec<HostBuffer>> {
        guard(py, "Program.run", || {
            let t0 = std::time::Instant::now();
            // The owners live until the end of this function, past the execution below.
            let owners = self.consume(py, &inputs)?;
            let bytes = self.input_bytes(py, &owners)?;
            let inner = &self.inner;
            let result = py.detach(|| catch_unwind(AssertUnwindSafe(|| inner.run(&bytes))));
            drop(owners);
            let outputs = self.finished(py, result, t0)?;
            Ok(outputs.into_iter().map(|data| HostBuffer { data }).collect())
        })
    }

    /// Runs a bucketed program on user inputs of their real sizes (DLPack capsules of
    /// contiguous host tensors, the user inputs in order without the size arguments), with
    /// `sizes` the real size of every symbol. Returns per result its buffer and real dims; the
    /// buffer begins with the result's values (see `session::CutResult`).
    fn run_bucketed(
        &self,
        py: Python<'_>,
        inputs: Vec<Bound<'_, PyAny>>,
        sizes: std::collections::BTreeMap<String, i64>,
    ) -> PyResult<Vec<CutBuffer>> {
        guard(py, "Program.run_bucketed", || {
            let t0 = std::time::Instant::now();
            let owners = self.consume(py, &inputs)?;
            let mut views = Vec::with_capacity(owners.len());
            for (k, owner) in owners.iter().enumerate() {
                let view = owner.host_view().map_err(|m| self.bad_input(py, format!("input {k}: {m}")))?;
                if let Some(&arg) = self.inner.tensor_inputs.get(k) {
                    self.check_dtype(py, arg, &view, &format!("input {k}"))?;
                }
                views.push(view);
            }
            let pairs: Vec<(&[u8], &[i64])> = views.iter().map(|v| (v.bytes, v.dims.as_slice())).collect();
            let inner = &self.inner;
            let result = py.detach(|| catch_unwind(AssertUnwindSafe(|| inner.run_bucketed(&pairs, &sizes))));
            drop(pairs);
            drop(views);
            drop(owners);
            let outputs = self.finished(py, result, t0)?;
            Ok(outputs.into_iter().map(|c| (HostBuffer { data: c.bytes }, c.dims)).collect())
        })
    }

    /// Runs a per-rank program: `per_rank[r]` holds rank r's value of every argument of `main`
    /// in order, as DLPack capsules of contiguous host tensors. Returns each rank's results.
    fn run_ranks(&self, py: Python<'_>, per_rank: Vec<Vec<Bound<'_, PyAny>>>) -> PyResult<Vec<Vec<HostBuffer>>> {
        guard(py, "Program.run_ranks", || {
            let owners = self.consume_per_rank(py, &per_rank)?;
            let mut bytes: Vec<Vec<&[u8]>> = Vec::with_capacity(owners.len());
            for (r, mine) in owners.iter().enumerate() {
                let mut row = Vec::with_capacity(mine.len());
                for (k, owner) in mine.iter().enumerate() {
                    let view = owner.host_view().map_err(|m| self.bad_input(py, format!("rank {r}, argument {k}: {m}")))?;
                    self.check_view(py, k, &view)?;
                    row.push(view.bytes);
                }
                bytes.push(row);
            }
            let inner = &self.inner;
            let result = py.detach(|| catch_unwind(AssertUnwindSafe(|| inner.run_ranks(&bytes))));
            drop(owners);
            let outputs = match result {
                Ok(r) => r.map_err(|e| exec_error(py, e, &self.inner.name))?,
                Err(p) => std::panic::resume_unwind(p),
            };
            self.calls.fetch_add(1, Ordering::Relaxed);
            Ok(outputs.into_iter().map(|o| o.into_iter().map(|data| HostBuffer { data }).collect()).collect())
        })
    }

    /// Runs a bucketed per-rank program: `per_rank[r]` holds rank r's value of every argument
    /// of `main` but the size arguments, in order, at their real sizes (DLPack capsules of
    /// contiguous host tensors), with `sizes` the real size of every symbol. Returns each
    /// rank's results, each as its buffer and real dims (see `session::CutResult`).
    fn run_ranks_bucketed(
        &self,
        py: Python<'_>,
        per_rank: Vec<Vec<Bound<'_, PyAny>>>,
        sizes: std::collections::BTreeMap<String, i64>,
    ) -> PyResult<Vec<Vec<CutBuffer>>> {
        guard(py, "Program.run_ranks_bucketed", || {
            let owners = self.consume_per_rank(py, &per_rank)?;
            let given: Vec<usize> = (0..self.inner.args.len()).filter(|a| !self.inner.size_args.iter().any(|(_, s)| s == a)).collect();
            let mut views = Vec::with_capacity(owners.len());
            for (r, mine) in owners.iter().enumerate() {
                let mut row = Vec::with_capacity(mine.len());
                for (k, owner) in mine.iter().enumerate() {
                    let view = owner.host_view().map_err(|m| self.bad_input(py, format!("rank {r}, argument {k}: {m}")))?;
                    if let Some(&arg) = given.get(k) {
                        self.check_dtype(py, arg, &view, &format!("rank {r}: argument {k}"))?;
                    }
                    row.push(view);
                }
                views.push(row);
            }
            let pairs: Vec<Vec<(&[u8], &[i64])>> = views.iter().map(|row| row.iter().map(|v| (v.bytes, v.dims.as_slice())).collect()).collect();
            let inner = &self.inner;
            let result = py.detach(|| catch_unwind(AssertUnwindSafe(|| inner.run_ranks_bucketed(&pairs, &sizes))));
            drop(pairs);
            drop(views);
            drop(owners);
            let outputs = match result {
                Ok(r) => r.map_err(|e| exec_error(py, e, &self.inner.name))?,
                Err(p) => std::panic::resume_unwind(p),
            };
            self.calls.fetch_add(1, Ordering::Relaxed);
            Ok(outputs.into_iter().map(|o| o.into_iter().map(|c| (HostBuffer { data: c.bytes }, c.dims)).collect()).collect())
        })
    }

    /// The number of ranks of a per-rank program (None otherwise).
    #[getter]
    fn ranks(&self) -> Option<i64> {
        self.inner.ranks
    }

    /// Counters since compile: calls, and total nanoseconds in run, upload, execute, download.
    fn run_stats(&self) -> (u64, u64, u64, u64, u64) {
        (
            self.calls.load(Ordering::Relaxed),
            self.run_ns.load(Ordering::Relaxed),
            self.upload_ns.load(Ordering::Relaxed),
            self.execute_ns.load(Ordering::Relaxed),
            self.download_ns.load(Ordering::Relaxed),
        )
    }
}

impl Program {
    /// Takes every rank's DLPack capsules (see `consume`).
    fn consume_per_rank(&self, py: Python<'_>, per_rank: &[Vec<Bound<'_, PyAny>>]) -> PyResult<Vec<Vec<Consumed>>> {
        per_rank
            .iter()
            .enumerate()
            .map(|(r, inputs)| {
                inputs
                    .iter()
                    .enumerate()
                    .map(|(k, t)| Consumed::take(t).map_err(|m| self.bad_input(py, format!("rank {r}, argument {k}: {m}"))))
                    .collect::<PyResult<Vec<_>>>()
            })
            .collect()
    }

    /// Takes over DLPack capsules (see `Consumed`): each keeps its tensor's memory alive until
    /// dropped, past the execution that reads it.
    fn consume(&self, py: Python<'_>, inputs: &[Bound<'_, PyAny>]) -> PyResult<Vec<Consumed>> {
        inputs
            .iter()
            .enumerate()
            .map(|(k, t)| Consumed::take(t).map_err(|m| self.bad_input(py, format!("input {k}: {m}"))))
            .collect()
    }

    /// The bytes of each consumed user input, checked against its argument.
    fn input_bytes<'o>(&self, py: Python<'_>, owners: &'o [Consumed]) -> PyResult<Vec<&'o [u8]>> {
        let mut bytes: Vec<&[u8]> = Vec::with_capacity(owners.len());
        for (k, owner) in owners.iter().enumerate() {
            let view = owner.host_view().map_err(|m| self.bad_input(py, format!("input {k}: {m}")))?;
            if let Some(&arg) = self.inner.user_args().get(k) {
                self.check_view(py, arg, &view)?;
            }
            bytes.push(view.bytes);
        }
        Ok(bytes)
    }

    /// A run's outcome: its outputs, after counting the call and its times (`t0`: its start).
    fn finished<T>(
        &self,
        py: Python<'_>,
        result: std::thread::Result<Result<(T, tpuc_driver::exec::RunTimes), ExecError>>,
        t0: std::time::Instant,
    ) -> PyResult<T> {
        let (outputs, times) = match result {
            Ok(r) => r.map_err(|e| exec_error(py, e, &self.inner.name))?,
            Err(p) => std::panic::resume_unwind(p),
        };
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.execute_ns.fetch_add(times.execute.as_nanos() as u64, Ordering::Relaxed);
        self.upload_ns.fetch_add(times.upload.as_nanos() as u64, Ordering::Relaxed);
        self.download_ns.fetch_add(times.download.as_nanos() as u64, Ordering::Relaxed);
        self.run_ns.fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
        Ok(outputs)
    }

    fn bad_input(&self, py: Python<'_>, message: String) -> PyErr {
        exec_error(py, ExecError::BadInput(format!("{}: {message}", self.inner.name)), &self.inner.name)
    }

    /// Checks a tensor against argument `arg`'s dtype and shape, naming both on a mismatch.
    /// A bucketed program's input has its argument's dtype (its real shape fits the bucket:
    /// the session checks that as it pads).
    fn check_dtype(&self, py: Python<'_>, arg: usize, view: &dlpack::HostView<'_>, what: &str) -> PyResult<()> {
        match self.inner.args.get(arg) {
            Some(spec) if view.dtype != Some(spec.ty.dtype) => {
                Err(self.bad_input(py, format!("{what} (`{}`) is {}, got a {} tensor", spec.name, spec.ty, view.dtype_name())))
            }
            _ => Ok(()),
        }
    }

    fn check_view(&self, py: Python<'_>, arg: usize, view: &dlpack::HostView<'_>) -> PyResult<()> {
        let Some(spec) = self.inner.args.get(arg) else {
            return Err(self.bad_input(py, format!("no argument {arg}")));
        };
        let dims = spec.ty.static_dims().unwrap_or_default();
        if view.dtype != Some(spec.ty.dtype) || view.dims != dims {
            return Err(self.bad_input(
                py,
                format!(
                    "argument {arg} (`{}`) is {}, got a {} tensor of shape {:?}",
                    spec.name,
                    spec.ty,
                    view.dtype_name(),
                    view.dims
                ),
            ));
        }
        Ok(())
    }
}

/// Option `name`'s value checked and normalized by the driver (`tpuc_driver::options::normalize`):
/// the one place option words are parsed. Raises ValueError naming the option and the valid words.
#[pyfunction]
fn normalize_option(name: &str, value: &str) -> PyResult<String> {
    tpuc_driver::options::normalize(name, value).map_err(|e| pyo3::exceptions::PyValueError::new_err(format!("tpuc: {e}")))
}

/// Whether this host has TPU chips (`target="tpu"` then needs no topology).
#[pyfunction]
fn tpu_chips_here() -> bool {
    tpuc_driver::exec::tpu_chips_here()
}

/// Every FX target the importer lowers, sorted (`torch.ops.aten.add.Tensor`, `_operator.mul`, ...).
/// The compile options (`tpuc_driver::options::OPTIONS`): per option (name, environment
/// variable or None, command-line flag or None, default as documented, whether boolean, help),
/// and the options table as Markdown.
#[pyfunction]
#[allow(clippy::type_complexity)]
fn option_specs() -> (Vec<(&'static str, Option<&'static str>, Option<&'static str>, &'static str, bool, &'static str)>, String) {
    let specs = tpuc_driver::options::OPTIONS.iter().map(|o| (o.name, o.env, o.flag, o.default, o.boolean, o.help)).collect();
    (specs, tpuc_driver::options::markdown_table())
}

#[pyfunction]
fn supported_targets(py: Python<'_>) -> PyResult<Vec<String>> {
    guard(py, "supported_targets", || Ok(tpuc_driver::supported_targets()))
}

/// One line per discovered PJRT plugin.
#[pyfunction]
fn plugins(py: Python<'_>) -> PyResult<Vec<String>> {
    guard(py, "plugins", || Ok(py.detach(tpuc_driver::exec::describe_plugins)))
}

/// Panics on purpose: tests check that a panic becomes a TpucError.
/// The executable cache's figures as JSON: this process's hits and misses per tier, the host's
/// totals over every process using the same tier-2 cache, and each tier's state and size.
#[pyfunction]
fn cache_stats(py: Python<'_>) -> PyResult<String> {
    guard(py, "cache_stats", || {
        let r = py.detach(|| tpuc_driver::session::cache().stats());
        let tiers: Vec<serde_json::Value> = r
            .tiers
            .iter()
            .map(|t| {
                serde_json::json!({
                    "tier": t.tier as u32, "enabled": t.enabled, "detail": t.detail,
                    "entries": t.entries, "bytes": t.bytes, "budget": t.budget,
                })
            })
            .collect();
        Ok(serde_json::json!({ "process": r.process, "host": r.host, "tiers": tiers }).to_string())
    })
}

/// The bucket for size `n` of a symbol with range `[lo, hi]` (`hi` None: unbounded, buckets of
/// the policy's grid on demand) under `policy` (auto, linear:K, a list 128,256,...).
#[pyfunction]
#[pyo3(signature = (policy, n, lo, hi=None))]
fn select_bucket(py: Python<'_>, policy: &str, n: i64, lo: i64, hi: Option<i64>) -> PyResult<i64> {
    use tpuc_driver::buckets::{plan_symbol, BucketPolicy, SymbolRange};
    guard(py, "select_bucket", || {
        let err = |m: String| tpuc_error(py, format!("tpuc: {m}"), "options", None, None);
        let p: BucketPolicy = policy.parse().map_err(|e: tpuc_driver::buckets::BucketError| err(e.to_string()))?;
        let lo = lo.max(1);
        // Unbounded: the grid up to the first point at or above n (compiled as sizes arrive).
        let hi = hi.unwrap_or_else(|| n.max(lo).saturating_mul(2).max(256));
        let plan = plan_symbol(&SymbolRange::new("s", lo, Some(hi)), &p, usize::MAX).map_err(|e| err(e.to_string()))?;
        plan.select(n).map_err(|e| err(e.to_string()))
    })
}

/// Where each symbol's size is read at a call of the serialized graph `program_json`:
/// `(input, dim or None for a SymInt input, symbol, min, max or None)` per input dim that is
/// exactly one symbol, the symbols named and ranged as the compiler sees them. None when no
/// input size is symbolic, when some symbol's size cannot be read from the inputs, or when the
/// graph does not import (compiling it per shape then says why).
#[pyfunction]
#[allow(clippy::type_complexity)]
fn size_plan(py: Python<'_>, program_json: &[u8]) -> PyResult<Option<Vec<(usize, Option<usize>, String, i64, Option<i64>)>>> {
    guard(py, "size_plan", || {
        let bytes = program_json.to_vec();
        let Ok(imported) = py.detach(|| tpuc_driver::import_bytes(bytes)) else { return Ok(None) };
        let reads = tpuc_driver::dynamic::size_reads(&imported);
        Ok(reads.map(|v| v.into_iter().map(|r| (r.input, r.dim, r.symbol, r.min, r.max)).collect()))
    })
}

/// Host ↔ device traffic of this process so far: (h2d_bytes, d2h_bytes, h2d_arrays,
/// d2h_arrays). Arrays the CPU plugin reads or hands over in place are not traffic.
#[pyfunction]
fn transfer_stats() -> (u64, u64, u64, u64) {
    let t = session::transfers();
    (t.h2d_bytes, t.d2h_bytes, t.h2d_arrays, t.d2h_arrays)
}

/// Allows or forbids using host memory in place (the CPU plugin), process-wide.
#[pyfunction]
fn set_host_aliasing(on: bool) {
    session::set_host_aliasing(on)
}

#[pyfunction]
fn _panic_for_test(py: Python<'_>) -> PyResult<()> {
    guard(py, "_panic_for_test", || panic!("deliberate panic for a test"))
}

macro_rules! py_node_kind {
    ($($(#[$doc:meta])* $v:ident,)*) => {
        /// The kind of an FX node in a torch.distributed job's graph: `tpuc_driver::job_graph::NodeKind`,
        /// its variants listed once there.
        #[pyclass(module = "tpuc._C", eq, eq_int, frozen, from_py_object)]
        #[derive(Copy, Clone, PartialEq, Eq)]
        enum NodeKind {
            $($(#[$doc])* $v,)*
        }

        impl From<NodeKind> for job_graph::NodeKind {
            fn from(k: NodeKind) -> Self {
                match k {
                    $(NodeKind::$v => job_graph::NodeKind::$v,)*
                }
            }
        }
    };
}
tpuc_driver::node_kinds!(py_node_kind);

/// A job graph's node table, built node by node in graph order; the split into regions and the
/// schedule of its collectives are decided in `tpuc_driver::job_graph`.
#[pyclass(module = "tpuc._C")]
#[derive(Default)]
struct JobGraph {
    nodes: Vec<job_graph::JobNode>,
}

#[pymethods]
impl JobGraph {
    #[new]
    fn new() -> Self {
        JobGraph::default()
    }

    /// Adds a node reading the nodes `inputs` (indices of nodes added before); returns its index.
    fn add(&mut self, kind: NodeKind, target: String, inputs: Vec<usize>) -> PyResult<usize> {
        let n = self.nodes.len();
        if let Some(bad) = inputs.iter().find(|&&i| i >= n) {
            return Err(pyo3::exceptions::PyValueError::new_err(format!("node {n} reads node {bad}, which is not added yet")));
        }
        self.nodes.push(job_graph::JobNode { kind: kind.into(), target, inputs });
        Ok(n)
    }

    /// The compute regions, each a list of node indices, to compile as one program each.
    fn regions(&self) -> Vec<Vec<usize>> {
        job_graph::regions(&self.nodes)
    }

    /// The node order that overlaps collectives with compute (each wait right after its
    /// collective without `overlap`).
    fn schedule(&self, overlap: bool) -> Option<Vec<usize>> {
        job_graph::schedule(&self.nodes, overlap)
    }
}

#[pymodule]
fn _C(m: &Bound<'_, PyModule>) -> PyResult<()> {
    // The driver's warnings (a damaged cache entry, a tier turned off) on stderr, as the CLI
    // prints them; RUST_LOG sets the level.
    tpuc_driver::logging::init(0);
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<Program>()?;
    m.add_class::<HostBuffer>()?;
    m.add_class::<DeviceArray>()?;
    m.add_class::<NodeKind>()?;
    m.add_class::<ArgKind>()?;
    m.add_class::<Arg>()?;
    m.add_class::<Input>()?;
    m.add_class::<Output>()?;
    m.add_class::<JobGraph>()?;
    m.add_function(wrap_pyfunction!(transfer_stats, m)?)?;
    m.add_function(wrap_pyfunction!(set_host_aliasing, m)?)?;
    m.add_function(wrap_pyfunction!(supported_targets, m)?)?;
    m.add_function(wrap_pyfunction!(option_specs, m)?)?;
    m.add_function(wrap_pyfunction!(normalize_option, m)?)?;
    m.add_function(wrap_pyfunction!(tpu_chips_here, m)?)?;
    m.add_function(wrap_pyfunction!(size_plan, m)?)?;
    m.add_function(wrap_pyfunction!(plugins, m)?)?;
    m.add_function(wrap_pyfunction!(cache_stats, m)?)?;
    m.add_function(wrap_pyfunction!(select_bucket, m)?)?;
    m.add_function(wrap_pyfunction!(_panic_for_test, m)?)?;
    Ok(())
}
