//! Devices: `DevicePtr`, a client-owned device, and reading a `PJRT_DeviceDescription` into a
//! `DeviceDescription`.

use std::ptr::NonNull;

use super::api::Api;
use super::args::{copy_string, Padded};
use crate::error::Result;
use crate::ffi;
use crate::types::DeviceDescription;

/// A device pointer owned by a client (valid while the client lives).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DevicePtr(pub(super) NonNull<ffi::PJRT_Device>);

// SAFETY: an address of a client-owned, thread-safe device object; only dereferenced by the
// plugin while the owning client is alive (holders keep an Arc<RawClient>).
unsafe impl Send for DevicePtr {}
unsafe impl Sync for DevicePtr {}

pub(super) fn describe(
    api: &'static Api,
    desc: *mut ffi::PJRT_DeviceDescription,
) -> Result<DeviceDescription> {
    let mut id = Padded::<ffi::PJRT_DeviceDescription_Id_Args>::new();
    id.device_description = desc;
    call!(api, PJRT_DeviceDescription_Id, id.ptr())?;
    let mut process = Padded::<ffi::PJRT_DeviceDescription_ProcessIndex_Args>::new();
    process.device_description = desc;
    call!(api, PJRT_DeviceDescription_ProcessIndex, process.ptr())?;
    let mut kind = Padded::<ffi::PJRT_DeviceDescription_String_Args>::new();
    kind.device_description = desc;
    call!(api, PJRT_DeviceDescription_Kind, kind.ptr())?;
    let mut display = Padded::<ffi::PJRT_DeviceDescription_String_Args>::new();
    display.device_description = desc;
    call!(api, PJRT_DeviceDescription_ToString, display.ptr())?;
    // SAFETY: the strings are owned by the description, which outlives this call.
    unsafe {
        Ok(DeviceDescription {
            id: id.id,
            process_index: process.process_index,
            kind: copy_string(kind.value, kind.value_size),
            display: copy_string(display.value, display.value_size),
        })
    }
}
