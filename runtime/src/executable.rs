//! Programs, compiled executables and loaded (runnable) executables.

use std::fmt;
use std::sync::Arc;

use crate::client::{Buffer, Client, Device};
use crate::error::{Error, Result};
use crate::sys::{RawExecutable, RawLoaded};
use crate::types::{Availability, CompiledMemoryStats, ElementType, NamedValue, Shape};

/// Source code to compile, borrowed.
#[derive(Clone, Copy, Debug)]
pub struct Program<'a> {
    code: &'a [u8],
    format: &'static str,
}

impl<'a> Program<'a> {
    /// An MLIR module (StableHLO), as text or bytecode (PJRT format `mlir`).
    pub fn mlir<T: AsRef<[u8]> + ?Sized>(code: &'a T) -> Self {
        Program {
            code: code.as_ref(),
            format: "mlir",
        }
    }

    /// A serialized `xla.HloModuleProto` (PJRT format `hlo`).
    pub fn hlo_proto(code: &'a [u8]) -> Self {
        Program {
            code,
            format: "hlo",
        }
    }

    pub fn code(&self) -> &'a [u8] {
        self.code
    }

    pub fn format(&self) -> &'static str {
        self.format
    }
}

/// A compiled program (`PJRT_Executable`): inspect it, serialize it. From
/// [`crate::Topology::compile`] (no devices needed) or [`LoadedExecutable::executable`].
/// Cheap to clone.
#[derive(Clone)]
pub struct Executable {
    raw: Arc<RawExecutable>,
}

impl fmt::Debug for Executable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Executable")
            .field("name", &self.name().unwrap_or_default())
            .finish()
    }
}

fn available<T>(result: Result<T>) -> Availability<T> {
    match result {
        Ok(v) => Availability::Available(v),
        Err(Error::Plugin {
            function,
            code,
            message,
            ..
        }) => Availability::NotAvailable(format!("{function}: {code}: {message}")),
        Err(e) => Availability::NotAvailable(e.to_string()),
    }
}

impl Executable {
    pub(crate) fn new(raw: RawExecutable) -> Executable {
        Executable { raw: Arc::new(raw) }
    }

    /// The module's name.
    pub fn name(&self) -> Result<String> {
        self.raw.name()
    }

    /// Outputs per device.
    pub fn num_outputs(&self) -> Result<usize> {
        self.raw.num_outputs()
    }

    pub fn num_replicas(&self) -> Result<usize> {
        self.raw.num_replicas()
    }

    pub fn num_partitions(&self) -> Result<usize> {
        self.raw.num_partitions()
    }

    /// Output element types and per-device dimensions, if the plugin reports them.
    /// (The C API has no query for parameters; callers know their inputs.)
    pub fn output_shapes(&self) -> Availability<Vec<Shape>> {
        let types = match available(self.raw.output_element_types()) {
            Availability::Available(t) => t,
            Availability::NotAvailable(why) => return Availability::NotAvailable(why),
        };
        let dims = match available(self.raw.output_dims()) {
            Availability::Available(d) => d,
            Availability::NotAvailable(why) => return Availability::NotAvailable(why),
        };
        if types.len() != dims.len() {
            return Availability::NotAvailable(format!(
                "plugin reported {} output types but {} output shapes",
                types.len(),
                dims.len()
            ));
        }
        Availability::Available(
            types
                .into_iter()
                .zip(dims)
                .map(|(t, dims)| Shape {
                    element_type: ElementType::from_pjrt(t).ok_or(t),
                    dims,
                })
                .collect(),
        )
    }

    /// The plugin's cost estimates (`flops`, `bytes accessed`, `optimal_seconds`, ...).
    pub fn cost_analysis(&self) -> Availability<Vec<NamedValue>> {
        available(self.raw.cost_analysis())
    }

    /// Memory the executable needs (arguments, outputs, temporaries, code).
    pub fn memory_stats(&self) -> Availability<CompiledMemoryStats> {
        available(self.raw.memory_stats())
    }

    /// A fingerprint that is equal for equal compilations, if the plugin computes one.
    pub fn fingerprint(&self) -> Availability<String> {
        available(self.raw.fingerprint())
    }

    /// Plugin-specific bytes for [`Client::deserialize`] (same plugin build only).
    pub fn serialize(&self) -> Result<Vec<u8>> {
        self.raw.serialize()
    }
}

/// One argument of [`LoadedExecutable::execute_with`].
#[derive(Debug)]
pub enum Arg<'a> {
    /// Read only: the caller keeps the buffer.
    Borrowed(&'a Buffer),
    /// Given up to the execution, which may reuse its memory for the result it is aliased to.
    Donated(Buffer),
}

impl Arg<'_> {
    fn buffer(&self) -> &Buffer {
        match self {
            Arg::Borrowed(b) => b,
            Arg::Donated(b) => b,
        }
    }
}

/// An executable loaded on a client's devices, ready to run. Keeps its client alive.
pub struct LoadedExecutable {
    client: Client,
    raw: Arc<RawLoaded>,
    executable: Executable,
    num_outputs: usize,
    devices: Vec<Device>,
}

impl fmt::Debug for LoadedExecutable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LoadedExecutable")
            .field("executable", &self.executable)
            .field("num_outputs", &self.num_outputs)
            .field("devices", &self.devices)
            .finish()
    }
}

impl LoadedExecutable {
    pub(crate) fn new(client: Client, raw: Arc<RawLoaded>) -> Result<LoadedExecutable> {
        debug_assert!(Arc::ptr_eq(raw.client(), client.raw()));
        let executable = Executable::new(raw.executable()?);
        let num_outputs = executable.num_outputs()?;
        let devices = raw
            .addressable_devices()?
            .into_iter()
            .map(|d| client.device(d))
            .collect::<Result<_>>()?;
        Ok(LoadedExecutable {
            client,
            raw,
            executable,
            num_outputs,
            devices,
        })
    }

    /// The compiled program (for inspection and serialization).
    pub fn executable(&self) -> &Executable {
        &self.executable
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The devices this executable runs on.
    pub fn devices(&self) -> &[Device] {
        &self.devices
    }

    /// Runs a single-device executable on its device with `args` (which must live on that
    /// device) and waits for it to finish. Returns one buffer per output.
    pub fn execute(&self, args: &[&Buffer]) -> Result<Vec<Buffer>> {
        if self.devices.len() != 1 {
            return Err(Error::InvalidArgument(format!(
                "execute runs single-device executables; this one spans {} devices",
                self.devices.len()
            )));
        }
        if let Some(foreign) = args
            .iter()
            .find(|b| !Arc::ptr_eq(b.raw().client(), self.client.raw()))
        {
            return Err(Error::InvalidArgument(format!(
                "argument {foreign:?} belongs to another client"
            )));
        }
        let raw_args: Vec<_> = args.iter().map(|b| b.raw()).collect();
        let outputs = self.raw.execute(&raw_args, &[], self.num_outputs)?;
        Ok(outputs.into_iter().map(Buffer::from_raw).collect())
    }

    /// Runs a single-device executable like [`LoadedExecutable::execute`], with some arguments
    /// given up: an [`Arg::Donated`] buffer that the program aliases to a result (StableHLO's
    /// `tf.aliasing_output`) becomes that result, without a copy; the others are read only.
    /// Donated buffers are consumed either way.
    pub fn execute_with(&self, args: Vec<Arg<'_>>) -> Result<Vec<Buffer>> {
        if self.devices.len() != 1 {
            return Err(Error::InvalidArgument(format!(
                "execute_with runs single-device executables; this one spans {} devices",
                self.devices.len()
            )));
        }
        if let Some(foreign) = args.iter().map(Arg::buffer).find(|b| !Arc::ptr_eq(b.raw().client(), self.client.raw())) {
            return Err(Error::InvalidArgument(format!("argument {foreign:?} belongs to another client")));
        }
        let donated: Vec<bool> = args.iter().map(|a| matches!(a, Arg::Donated(_))).collect();
        let raw_args: Vec<_> = args.iter().map(|a| a.buffer().raw()).collect();
        let outputs = self.raw.execute(&raw_args, &donated, self.num_outputs)?;
        drop(raw_args);
        // The donated buffers are spent: their memory is the aliased results' now.
        drop(args);
        Ok(outputs.into_iter().map(Buffer::from_raw).collect())
    }

    /// [`LoadedExecutable::execute_partitioned`] with some arguments given up, as
    /// [`LoadedExecutable::execute_with`] does on one device: `args[d]` are device `d`'s
    /// arguments; an argument position is donated only where every device donates it.
    pub fn execute_partitioned_with(&self, args: Vec<Vec<Arg<'_>>>) -> Result<Vec<Vec<Buffer>>> {
        if args.len() != self.devices.len() {
            return Err(Error::InvalidArgument(format!(
                "{} argument lists for an executable on {} devices",
                args.len(),
                self.devices.len()
            )));
        }
        for (d, list) in args.iter().enumerate() {
            if let Some(b) = list.iter().map(Arg::buffer).find(|b| !Arc::ptr_eq(b.raw().client(), self.client.raw())) {
                return Err(Error::InvalidArgument(format!("argument {b:?} of device {d} belongs to another client")));
            }
        }
        let n = args.first().map_or(0, Vec::len);
        let donated: Vec<bool> = (0..n).map(|i| args.iter().all(|l| matches!(l.get(i), Some(Arg::Donated(_))))).collect();
        let raw_args: Vec<Vec<_>> = args.iter().map(|l| l.iter().map(|a| a.buffer().raw()).collect()).collect();
        let outputs = self.raw.execute_on_devices(&raw_args, &donated, self.num_outputs)?;
        drop(raw_args);
        drop(args);
        Ok(outputs.into_iter().map(|o| o.into_iter().map(Buffer::from_raw).collect()).collect())
    }

    /// Runs on all of the executable's devices at once (an SPMD program: one partition per
    /// device, in [`LoadedExecutable::devices`] order); `args[d]` are device `d`'s arguments,
    /// each living on that device. Waits for every device; returns each device's outputs.
    pub fn execute_partitioned(&self, args: &[Vec<&Buffer>]) -> Result<Vec<Vec<Buffer>>> {
        self.execute_partitioned_with(args.iter().map(|l| l.iter().map(|&b| Arg::Borrowed(b)).collect()).collect())
    }
}
