//! `RawTopology`: an owned `PJRT_TopologyDescription`, its devices, its serialized form, and
//! compiling for it without a client (`PJRT_Compile`).

use std::ptr::NonNull;
use std::sync::Arc;

use super::api::Api;
use super::args::{copy_slice, copy_string, program, Padded};
use super::device::describe;
use super::executable::{Owner, RawExecutable};
use super::live::Live;
use crate::error::Result;
use crate::ffi;
use crate::types::DeviceDescription;

pub(crate) struct RawTopology {
    pub(super) api: &'static Api,
    pub(super) ptr: NonNull<ffi::PJRT_TopologyDescription>,
    pub(super) _live: Live,
}

// SAFETY: see the module docs (a topology description is immutable once created).
unsafe impl Send for RawTopology {}
unsafe impl Sync for RawTopology {}

destroy_on_drop!(RawTopology, PJRT_TopologyDescription_Destroy_Args.topology, PJRT_TopologyDescription_Destroy);

impl RawTopology {
    getter!(platform_name -> String = PJRT_TopologyDescription_PlatformName(PJRT_TopologyDescription_String_Args.topology));
    getter!(platform_version -> String = PJRT_TopologyDescription_PlatformVersion(PJRT_TopologyDescription_String_Args.topology));

    pub(crate) fn devices(&self) -> Result<Vec<DeviceDescription>> {
        let mut a = Padded::<ffi::PJRT_TopologyDescription_GetDeviceDescriptions_Args>::new();
        a.topology = self.ptr.as_ptr();
        call!(
            self.api,
            PJRT_TopologyDescription_GetDeviceDescriptions,
            a.ptr()
        )?;
        // SAFETY: an array owned by the topology.
        let raw = unsafe { copy_slice(a.descriptions, a.num_descriptions) };
        raw.into_iter()
            .filter(|d| !d.is_null())
            .map(|d| describe(self.api, d))
            .collect()
    }

    pub(crate) fn serialize(&self) -> Result<Vec<u8>> {
        let mut a = Padded::<ffi::PJRT_TopologyDescription_Serialize_Args>::new();
        a.topology = self.ptr.as_ptr();
        call!(self.api, PJRT_TopologyDescription_Serialize, a.ptr())?;
        // SAFETY: the bytes live until the deleter runs, which happens once, right after.
        unsafe {
            let bytes = copy_slice(a.serialized_bytes.cast::<u8>(), a.serialized_bytes_size);
            if let (Some(deleter), false) = (
                a.serialized_topology_deleter,
                a.serialized_topology.is_null(),
            ) {
                deleter(a.serialized_topology);
            }
            Ok(bytes)
        }
    }

    /// `PJRT_Compile`: compiles for this topology without a client.
    pub(crate) fn compile(
        self: &Arc<Self>,
        code: &[u8],
        format: &'static str,
        options: &[u8],
    ) -> Result<RawExecutable> {
        let program = program(code, format);
        let mut a = Padded::<ffi::PJRT_Compile_Args>::new();
        a.topology = self.ptr.as_ptr();
        a.program = &program;
        a.compile_options = options.as_ptr().cast();
        a.compile_options_size = options.len();
        call!(self.api, PJRT_Compile, a.ptr())?;
        let ptr = NonNull::new(a.executable)
            .ok_or_else(|| self.api.contract("PJRT_Compile", "returned no executable"))?;
        Ok(RawExecutable {
            api: self.api,
            ptr,
            _live: Live::new(),
            _owner: Owner::Topology(Arc::clone(self)),
        })
    }
}
