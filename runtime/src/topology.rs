//! Topologies: devices described without being attached, for ahead-of-time compilation.

use std::fmt;
use std::sync::Arc;

use crate::error::Result;
use crate::executable::{Executable, Program};
use crate::options::CompileOptions;
use crate::plugin::Plugin;
use crate::sys::RawTopology;
use crate::types::DeviceDescription;

/// A description of devices (e.g. a `v5e:2x2` TPU slice) that need not be present. From
/// [`Plugin::create_topology`]. Cheap to clone.
#[derive(Clone)]
pub struct Topology {
    plugin: Plugin,
    name: String,
    raw: Arc<RawTopology>,
}

impl fmt::Debug for Topology {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Topology")
            .field("name", &self.name)
            .field("plugin", &self.plugin.path())
            .finish()
    }
}

impl Topology {
    pub(crate) fn new(plugin: Plugin, name: &str, raw: Arc<RawTopology>) -> Topology {
        Topology {
            plugin,
            name: name.to_string(),
            raw,
        }
    }

    /// The name it was created with.
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn plugin(&self) -> Plugin {
        self.plugin
    }

    pub fn platform_name(&self) -> Result<String> {
        self.raw.platform_name()
    }

    pub fn platform_version(&self) -> Result<String> {
        self.raw.platform_version()
    }

    /// All devices of the topology.
    pub fn devices(&self) -> Result<Vec<DeviceDescription>> {
        self.raw.devices()
    }

    /// Plugin-specific bytes describing the topology (for cache keys).
    pub fn serialize(&self) -> Result<Vec<u8>> {
        self.raw.serialize()
    }

    /// Compiles for this topology without a client or device (`PJRT_Compile`). The result can
    /// be inspected and serialized; running it needs a client of the same platform.
    pub fn compile(&self, program: &Program<'_>, options: &CompileOptions) -> Result<Executable> {
        let raw = self
            .raw
            .compile(program.code(), program.format(), &options.to_proto_bytes())?;
        Ok(Executable::new(raw))
    }
}
