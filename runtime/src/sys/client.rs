//! `RawClient`: an owned `PJRT_Client`, its platform and devices, compiling and loading
//! executables, and buffers made from host data.

use std::ptr::NonNull;
use std::sync::Arc;

use super::api::Api;
use super::args::{copy_slice, copy_string, program, Padded};
use super::buffer::RawBuffer;
use super::device::{describe, DevicePtr};
use super::event::RawEvent;
use super::executable::RawLoaded;
use super::live::Live;
use crate::error::Result;
use crate::ffi;
use crate::types::DeviceDescription;

pub(crate) struct RawClient {
    pub(super) api: &'static Api,
    pub(super) ptr: NonNull<ffi::PJRT_Client>,
    pub(super) _live: Live,
}

// SAFETY: see the module docs (PjRtClient is thread-safe).
unsafe impl Send for RawClient {}
unsafe impl Sync for RawClient {}

destroy_on_drop!(RawClient, PJRT_Client_Destroy_Args.client, PJRT_Client_Destroy);

impl RawClient {
    getter!(platform_name -> String = PJRT_Client_PlatformName(PJRT_Client_String_Args.client));
    getter!(platform_version -> String = PJRT_Client_PlatformVersion(PJRT_Client_String_Args.client));

    pub(crate) fn addressable_devices(&self) -> Result<Vec<DevicePtr>> {
        let mut a = Padded::<ffi::PJRT_Client_AddressableDevices_Args>::new();
        a.client = self.ptr.as_ptr();
        call!(self.api, PJRT_Client_AddressableDevices, a.ptr())?;
        // SAFETY: an array owned by the client.
        let raw = unsafe { copy_slice(a.addressable_devices, a.num_addressable_devices) };
        Ok(raw
            .into_iter()
            .filter_map(NonNull::new)
            .map(DevicePtr)
            .collect())
    }

    /// Description and local hardware id of one of this client's devices.
    pub(crate) fn device_info(&self, device: DevicePtr) -> Result<(DeviceDescription, i32)> {
        let mut d = Padded::<ffi::PJRT_Device_GetDescription_Args>::new();
        d.device = device.0.as_ptr();
        call!(self.api, PJRT_Device_GetDescription, d.ptr())?;
        if d.device_description.is_null() {
            return Err(self
                .api
                .contract("PJRT_Device_GetDescription", "returned no description"));
        }
        let desc = describe(self.api, d.device_description)?;
        let mut hw = Padded::<ffi::PJRT_Device_LocalHardwareId_Args>::new();
        hw.device = device.0.as_ptr();
        let local = match call!(self.api, PJRT_Device_LocalHardwareId, hw.ptr()) {
            Ok(()) => hw.local_hardware_id,
            Err(_) => -1,
        };
        Ok((desc, local))
    }

    pub(crate) fn compile(
        self: &Arc<Self>,
        code: &[u8],
        format: &'static str,
        options: &[u8],
    ) -> Result<RawLoaded> {
        let program = program(code, format);
        let mut a = Padded::<ffi::PJRT_Client_Compile_Args>::new();
        a.client = self.ptr.as_ptr();
        a.program = &program;
        a.compile_options = options.as_ptr().cast();
        a.compile_options_size = options.len();
        call!(self.api, PJRT_Client_Compile, a.ptr())?;
        let ptr = NonNull::new(a.executable).ok_or_else(|| {
            self.api
                .contract("PJRT_Client_Compile", "returned no executable")
        })?;
        Ok(RawLoaded {
            api: self.api,
            ptr,
            _live: Live::new(),
            client: Arc::clone(self),
        })
    }

    pub(crate) fn deserialize_and_load(self: &Arc<Self>, serialized: &[u8]) -> Result<RawLoaded> {
        let mut a = Padded::<ffi::PJRT_Executable_DeserializeAndLoad_Args>::new();
        a.client = self.ptr.as_ptr();
        a.serialized_executable = serialized.as_ptr().cast();
        a.serialized_executable_size = serialized.len();
        call!(self.api, PJRT_Executable_DeserializeAndLoad, a.ptr())?;
        let ptr = NonNull::new(a.loaded_executable).ok_or_else(|| {
            self.api.contract(
                "PJRT_Executable_DeserializeAndLoad",
                "returned no executable",
            )
        })?;
        Ok(RawLoaded {
            api: self.api,
            ptr,
            _live: Live::new(),
            client: Arc::clone(self),
        })
    }

    /// Makes a buffer of dense row-major host data on `device`.
    ///
    /// Copying (`zero_copy == false`): the plugin may read `data` until the transfer completes;
    /// we wait for that (`done_with_host_buffer`) before returning, which lets the plugin skip
    /// its own staging copy.
    ///
    /// Zero copy: the buffer may alias `data` (the CPU plugin does when `data` is aligned) until
    /// it is destroyed; the returned buffer holds the `done_with_host_buffer` event and waits for
    /// it after destroying itself, so once the buffer is dropped the plugin no longer reads
    /// `data`. The caller keeps `data` alive and unchanged until then.
    pub(crate) fn buffer_from_host(
        self: &Arc<Self>,
        data: &[u8],
        element_type: i32,
        dims: &[i64],
        device: DevicePtr,
        zero_copy: bool,
    ) -> Result<RawBuffer> {
        let mut a = Padded::<ffi::PJRT_Client_BufferFromHostBuffer_Args>::new();
        a.client = self.ptr.as_ptr();
        a.data = data.as_ptr().cast();
        a.type_ = element_type;
        a.dims = dims.as_ptr();
        a.num_dims = dims.len();
        a.host_buffer_semantics = if zero_copy {
            ffi::PJRT_HostBufferSemantics_kImmutableZeroCopy
        } else {
            ffi::PJRT_HostBufferSemantics_kImmutableUntilTransferCompletes
        };
        a.device = device.0.as_ptr();
        let result = call!(self.api, PJRT_Client_BufferFromHostBuffer, a.ptr());
        // Take ownership of both outputs first, so that each is freed on every path.
        let done = RawEvent::new(self.api, a.done_with_host_buffer);
        let buffer = NonNull::new(a.buffer).map(|ptr| RawBuffer {
            api: self.api,
            ptr,
            host_done: None,
            _live: Live::new(),
            _client: Arc::clone(self),
        });
        result?;
        let mut buffer = buffer.ok_or_else(|| {
            self.api
                .contract("PJRT_Client_BufferFromHostBuffer", "returned no buffer")
        })?;
        if zero_copy {
            buffer.host_done = done;
        } else if let Some(done) = done {
            done.wait()?;
        }
        Ok(buffer)
    }
}
