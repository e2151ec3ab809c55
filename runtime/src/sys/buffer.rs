//! Buffers: `RawBuffer`, an owned `PJRT_Buffer` (its type, dims, host address), `HostMemory`,
//! a buffer's own host memory, and `PendingHost`, a device-to-host copy in flight.

use std::ffi::c_void;
use std::ptr::NonNull;
use std::sync::Arc;

use super::api::Api;
use super::args::{copy_slice, zeroed, Padded};
use super::client::RawClient;
use super::event::RawEvent;
use super::live::Live;
use crate::error::Result;
use crate::ffi;

pub(crate) struct RawBuffer {
    pub(super) api: &'static Api,
    pub(super) ptr: NonNull<ffi::PJRT_Buffer>,
    /// For a buffer that may alias host memory: fires once the plugin is done with that memory
    /// (after the buffer is destroyed).
    pub(super) host_done: Option<RawEvent>,
    pub(super) _client: Arc<RawClient>,
    pub(super) _live: Live,
}

// SAFETY: see the module docs (PjRtBuffer is thread-safe).
unsafe impl Send for RawBuffer {}
unsafe impl Sync for RawBuffer {}

impl Drop for RawBuffer {
    fn drop(&mut self) {
        let mut a = Padded::<ffi::PJRT_Buffer_Destroy_Args>::new();
        a.buffer = self.ptr.as_ptr();
        let _ = call!(self.api, PJRT_Buffer_Destroy, a.ptr());
        // Borrowed host memory is the caller's again only once the plugin says so.
        if let Some(done) = self.host_done.take() {
            let _ = done.wait();
        }
    }
}

impl RawBuffer {
    pub(crate) fn client(&self) -> &Arc<RawClient> {
        &self._client
    }

    pub(crate) fn element_type(&self) -> Result<i32> {
        let mut a = Padded::<ffi::PJRT_Buffer_ElementType_Args>::new();
        a.buffer = self.ptr.as_ptr();
        call!(self.api, PJRT_Buffer_ElementType, a.ptr())?;
        Ok(a.type_)
    }

    pub(crate) fn dims(&self) -> Result<Vec<i64>> {
        let mut a = Padded::<ffi::PJRT_Buffer_Dimensions_Args>::new();
        a.buffer = self.ptr.as_ptr();
        call!(self.api, PJRT_Buffer_Dimensions, a.ptr())?;
        // SAFETY: an array owned by the buffer.
        Ok(unsafe { copy_slice(a.dims, a.num_dims) })
    }

    /// Where the buffer's bytes are in this process's memory, when the plugin keeps them in
    /// host memory, dense and row-major, `size` bytes long (the CPU plugin does); `None` when
    /// they are elsewhere or laid out otherwise. Waits until the buffer is ready. The address
    /// stays valid while the buffer lives.
    pub(crate) fn host_address(&self, size: usize) -> Result<Option<usize>> {
        let mut on_cpu = Padded::<ffi::PJRT_Buffer_IsOnCpu_Args>::new();
        on_cpu.buffer = self.ptr.as_ptr();
        match call!(self.api, PJRT_Buffer_IsOnCpu, on_cpu.ptr()) {
            Ok(()) if on_cpu.is_on_cpu => {}
            // Not on the host, or a plugin without the query: the caller copies.
            _ => return Ok(None),
        }
        let mut layout = Padded::<ffi::PJRT_Buffer_GetMemoryLayout_Args>::new();
        layout.buffer = self.ptr.as_ptr();
        if call!(self.api, PJRT_Buffer_GetMemoryLayout, layout.ptr()).is_err() {
            return Ok(None);
        }
        if layout.layout.type_ != ffi::PJRT_Buffer_MemoryLayout_Type_Tiled {
            return Ok(None);
        }
        // SAFETY: `type_` says the union holds the tiled variant; its arrays are owned by the
        // buffer, which is alive.
        let row_major = unsafe {
            let tiled = layout.layout.layout.tiled;
            let n = tiled.minor_to_major_size;
            let m2m: &[i64] = if n == 0 || tiled.minor_to_major.is_null() {
                &[]
            } else {
                std::slice::from_raw_parts(tiled.minor_to_major, n)
            };
            tiled.num_tiles == 0 && m2m.iter().rev().copied().eq(0..n as i64)
        };
        if !row_major {
            return Ok(None);
        }
        let mut bytes = Padded::<ffi::PJRT_Buffer_OnDeviceSizeInBytes_Args>::new();
        bytes.buffer = self.ptr.as_ptr();
        call!(self.api, PJRT_Buffer_OnDeviceSizeInBytes, bytes.ptr())?;
        if bytes.on_device_size_in_bytes != size {
            return Ok(None);
        }
        let mut ready = Padded::<ffi::PJRT_Buffer_ReadyEvent_Args>::new();
        ready.buffer = self.ptr.as_ptr();
        call!(self.api, PJRT_Buffer_ReadyEvent, ready.ptr())?;
        if let Some(event) = RawEvent::new(self.api, ready.event) {
            event.wait()?;
        }
        let mut p = Padded::<ffi::PJRT_Buffer_UnsafePointer_Args>::new();
        p.buffer = self.ptr.as_ptr();
        call!(self.api, PJRT_Buffer_UnsafePointer, p.ptr())?;
        Ok((p.buffer_pointer != 0 || size == 0).then_some(p.buffer_pointer))
    }

    /// Copies the buffer into a new dense, row-major `Vec<u8>` (one copy, straight into the
    /// vector), waiting for the transfer.
    pub(crate) fn to_host(&self, rank: usize) -> Result<Vec<u8>> {
        self.start_to_host(rank, None)?.finish()
    }

    /// Starts a device-to-host copy into a new vector and returns without waiting, so several
    /// copies can be in flight at once. `size` is the dense row-major byte size when the caller
    /// knows it (saves asking the plugin).
    pub(crate) fn start_to_host(&self, rank: usize, size: Option<usize>) -> Result<PendingHost> {
        // Ask for row-major explicitly: a device's own layout may be tiled or permuted.
        let minor_to_major: Vec<i64> = (0..rank as i64).rev().collect();
        let mut layout = Box::new(zeroed::<ffi::PJRT_Buffer_MemoryLayout>());
        layout.type_ = ffi::PJRT_Buffer_MemoryLayout_Type_Tiled;
        let mut tiled = zeroed::<ffi::PJRT_Buffer_MemoryLayout_Tiled>();
        tiled.minor_to_major = minor_to_major.as_ptr();
        tiled.minor_to_major_size = minor_to_major.len();
        layout.layout.tiled = tiled;

        let size = match size {
            Some(n) => n,
            None => {
                // A call without a destination answers the size needed.
                let mut q = Padded::<ffi::PJRT_Buffer_ToHostBuffer_Args>::new();
                q.src = self.ptr.as_ptr();
                q.host_layout = &mut *layout;
                let result = call!(self.api, PJRT_Buffer_ToHostBuffer, q.ptr());
                drop(RawEvent::new(self.api, q.event));
                result?;
                q.dst_size
            }
        };

        let mut out: Vec<u8> = Vec::with_capacity(size);
        let mut a = Padded::<ffi::PJRT_Buffer_ToHostBuffer_Args>::new();
        a.src = self.ptr.as_ptr();
        a.host_layout = &mut *layout;
        a.dst = out.as_mut_ptr().cast::<c_void>();
        a.dst_size = size;
        let result = call!(self.api, PJRT_Buffer_ToHostBuffer, a.ptr());
        let event = RawEvent::new(self.api, a.event);
        result?;
        // The vector's heap block does not move when `out` moves into the pending copy, and the
        // layout stays boxed and alive until the copy completes.
        Ok(PendingHost {
            out,
            size,
            event,
            _layout: layout,
            _minor_to_major: minor_to_major,
        })
    }
}

/// A buffer's own host memory (see [`RawBuffer::host_address`]), kept valid by owning the
/// buffer.
pub(crate) struct HostMemory {
    addr: usize,
    len: usize,
    _buffer: RawBuffer,
}

impl HostMemory {
    /// The buffer's memory when it is host memory, dense, row-major and `size` bytes long;
    /// the buffer back otherwise.
    pub(crate) fn take(
        buffer: RawBuffer,
        size: usize,
    ) -> Result<std::result::Result<HostMemory, RawBuffer>> {
        Ok(match buffer.host_address(size)? {
            Some(addr) => Ok(HostMemory {
                addr,
                len: size,
                _buffer: buffer,
            }),
            None => Err(buffer),
        })
    }

    pub(crate) fn as_slice(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: `addr` is the ready buffer's host memory of `len` bytes, alive as long as the
        // buffer we own; the plugin no longer writes it (the buffer is a finished execution's
        // output and only we hold it).
        unsafe { std::slice::from_raw_parts(self.addr as *const u8, self.len) }
    }

    pub(crate) fn as_mut_slice(&mut self) -> &mut [u8] {
        if self.len == 0 {
            return &mut [];
        }
        // SAFETY: as in `as_slice`; `&mut self` makes this the only access.
        unsafe { std::slice::from_raw_parts_mut(self.addr as *mut u8, self.len) }
    }
}

/// A device-to-host copy in flight; [`PendingHost::finish`] waits for it.
pub(crate) struct PendingHost {
    out: Vec<u8>,
    size: usize,
    event: Option<RawEvent>,
    _layout: Box<ffi::PJRT_Buffer_MemoryLayout>,
    _minor_to_major: Vec<i64>,
}

impl PendingHost {
    pub(crate) fn finish(mut self) -> Result<Vec<u8>> {
        if let Some(event) = self.event.take() {
            event.wait()?;
        }
        // SAFETY: the completed transfer wrote exactly `size` bytes into the reserved capacity.
        unsafe { self.out.set_len(self.size) };
        Ok(std::mem::take(&mut self.out))
    }
}

impl Drop for PendingHost {
    fn drop(&mut self) {
        // Never free the destination while the plugin may still write into it.
        if let Some(event) = self.event.take() {
            let _ = event.wait();
        }
    }
}
