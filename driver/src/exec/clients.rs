//! The clients of targets with devices of their own (a GPU, TPU chips): one per plugin and
//! process, shared by every compile and run. A client owns its devices (the CUDA plugin
//! reserves most of the GPU's memory for its allocator when it is created), so a second one
//! would compete for them; and arrays meet only on the client that made them.

use super::{ExecError, Target};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};
use tpuc_runtime as rt;

/// The process's client of `plugin` for `target`, created on first use. Errors name the target
/// when the plugin finds no device.
pub(crate) fn device_client(plugin: &rt::Plugin, target: Target) -> Result<rt::Client, ExecError> {
    static CLIENTS: OnceLock<Mutex<HashMap<PathBuf, rt::Client>>> = OnceLock::new();
    let mut clients = CLIENTS.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
    if let Some(c) = clients.get(plugin.path()) {
        return Ok(c.clone());
    }
    let no_device = |why: String| {
        ExecError::Unsupported(match target {
            Target::Gpu => format!(
                "--target gpu: the CUDA PJRT plugin {} found no usable GPU ({why}); on a host without an NVIDIA GPU use --target cpu",
                plugin.path().display()
            ),
            Target::Tpu => format!("--target tpu: libtpu found no TPU chips ({why}); without chips, compile for a --topology"),
            Target::Cpu => format!("the CPU plugin could not create a client ({why})"),
        })
    };
    let client = plugin.create_client_with_options(&client_options(target)).map_err(|e| no_device(e.to_string()))?;
    if client.devices().map_err(|e| no_device(e.to_string()))?.is_empty() {
        return Err(no_device("no addressable device".into()));
    }
    clients.insert(plugin.path().to_path_buf(), client.clone());
    Ok(client)
}

/// Create options: on GPU, JAX's allocator variables where set (`XLA_PYTHON_CLIENT_MEM_FRACTION`,
/// `XLA_PYTHON_CLIENT_PREALLOCATE`, `XLA_PYTHON_CLIENT_ALLOCATOR`), which users of the plugin
/// know; the plugin's defaults otherwise.
fn client_options(target: Target) -> Vec<rt::NamedValue> {
    let mut options = Vec::new();
    if target != Target::Gpu {
        return options;
    }
    if let Some(f) = std::env::var("XLA_PYTHON_CLIENT_MEM_FRACTION").ok().and_then(|v| v.parse::<f32>().ok()) {
        options.push(rt::NamedValue::float("memory_fraction", f));
    }
    if let Ok(v) = std::env::var("XLA_PYTHON_CLIENT_PREALLOCATE") {
        options.push(rt::NamedValue::bool("preallocate", !matches!(v.as_str(), "0" | "false" | "False")));
    }
    if let Ok(v) = std::env::var("XLA_PYTHON_CLIENT_ALLOCATOR") {
        options.push(rt::NamedValue::string("allocator", v));
    }
    options
}
