//! tpuc-runtime: our own bindings to the PJRT C API, for compiling StableHLO and running it
//! through PJRT plugins (the XLA CPU plugin, libtpu, ...). Knows nothing of the compiler's IR.
//!
//! ```no_run
//! use tpuc_runtime::{discover, CompileOptions, ElementType, Plugin, Program, Target};
//! # fn main() -> tpuc_runtime::Result<()> {
//! let plugin = Plugin::load(discover().plugin(Target::Cpu)?)?;
//! let client = plugin.create_client()?;
//! let module = "func.func @main(%x: tensor<2xf32>) -> tensor<2xf32> {
//!   %0 = stablehlo.add %x, %x : tensor<2xf32>
//!   return %0 : tensor<2xf32>
//! }";
//! let exe = client.compile(&Program::mlir(module), &CompileOptions::default())?;
//! let x = client.buffer_from_host(&[0u8; 8], ElementType::F32, &[2], None)?;
//! let out = exe.execute(&[&x])?;
//! let bytes: Vec<u8> = out[0].to_host()?;
//! # Ok(()) }
//! ```
//!
//! Per-call transfers without copies where the plugin allows: `Client::buffer_borrowing_host`
//! lets an argument use host memory in place (the borrow ends when the buffer drops), and
//! `Buffer::into_host_all` hands results over as `HostArray`s that own the device buffer's own
//! host memory (the CPU plugin) or a copy (any other device).
//!
//! Every host ↔ device transfer is counted ([`transfers`]); [`set_host_aliasing`]`(false)` makes
//! the CPU plugin copy as an accelerator would. [`LoadedExecutable::execute_with`] donates the
//! arguments the caller gives up, so a program that updates state in place (arguments aliased to
//! results) reuses their memory.
//!
//! Layout: `ffi` holds the hand-written C declarations, `sys` every unsafe call (and the
//! rules it keeps: each PJRT object freed once, errors read and destroyed, plugins never
//! unloaded); the other modules are safe. All handles are `Send + Sync` (see `sys`).
#![deny(unsafe_code)]

mod client;
mod discover;
mod error;
mod executable;
#[allow(unsafe_code)]
mod ffi;
mod options;
mod plugin;
mod sys;
mod topology;
mod transfers;
mod types;

pub use client::{BorrowedBuffer, Buffer, Client, Device, HostArray};
pub use discover::{discover, plugin_env_var, site_packages_files, Discovery, Found, Origin, Target, ENV_PLUGIN};
pub use error::{Error, ErrorCode, Result};
pub use executable::{Arg, Executable, LoadedExecutable, Program};
pub use options::{CompileOptions, OptionOverride};
pub use plugin::{
    libtpu_environment, libtpu_log_dir, tpu_chips_in, tpu_topology_options, ApiVersion, Plugin,
    SUPPORTED_API,
};
pub use topology::Topology;
pub use transfers::{host_aliasing, set_host_aliasing, transfers, Transfers};
pub use types::{
    lookup, Availability, CompiledMemoryStats, DeviceDescription, ElementType, NamedValue, Shape,
    Value,
};

/// How many PJRT objects (clients, topologies, executables, buffers, events) this process
/// currently owns through the runtime. Each is destroyed exactly once, when its handle drops;
/// a diagnostic for leak checks.
pub fn live_pjrt_objects() -> isize {
    sys::live_objects()
}
