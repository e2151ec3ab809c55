//! Host tensors handed over as DLPack capsules (`torch.utils.dlpack.to_dlpack(t)`,
//! `t.__dlpack__()`), read in place.
//!
//! A capsule is consumed as the DLPack protocol says: renamed to `used_dltensor` (so no other
//! consumer can take it as well), and its deleter called when the [`Consumed`] guard drops. The
//! producer's managed tensor keeps the memory alive until then (torch's holds a reference to the
//! tensor's storage), whatever Python does with the tensor object meanwhile, so the bytes may
//! be read with the GIL released as long as the guard lives.
//!
//! The structures are those of `dlpack.h` (version 1.1), both the legacy `DLManagedTensor` and
//! the versioned `DLManagedTensorVersioned`.

use pyo3::ffi;
use pyo3::prelude::*;
use std::ffi::{c_void, CStr};
use tpuc_driver::DType;

#[repr(C)]
struct DLDevice {
    device_type: i32,
    device_id: i32,
}

#[repr(C)]
#[derive(Copy, Clone, Debug)]
struct DLDataType {
    code: u8,
    bits: u8,
    lanes: u16,
}

#[repr(C)]
struct DLTensor {
    data: *mut c_void,
    device: DLDevice,
    ndim: i32,
    dtype: DLDataType,
    shape: *const i64,
    /// In elements; null for a compact row-major tensor.
    strides: *const i64,
    byte_offset: u64,
}

#[repr(C)]
struct DLManagedTensor {
    dl_tensor: DLTensor,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut DLManagedTensor)>,
}

#[repr(C)]
struct DLPackVersion {
    major: u32,
    minor: u32,
}

#[repr(C)]
struct DLManagedTensorVersioned {
    version: DLPackVersion,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut DLManagedTensorVersioned)>,
    flags: u64,
    dl_tensor: DLTensor,
}

const LEGACY: &CStr = c"dltensor";
const LEGACY_USED: &CStr = c"used_dltensor";
const VERSIONED: &CStr = c"dltensor_versioned";
const VERSIONED_USED: &CStr = c"used_dltensor_versioned";

/// `kDLCPU` and `kDLCUDAHost` (pinned host memory): memory this process reads directly.
const HOST_DEVICES: [i32; 2] = [1, 3];

/// A managed tensor taken from its capsule; the deleter runs on drop.
enum Managed {
    Legacy(*mut DLManagedTensor),
    Versioned(*mut DLManagedTensorVersioned),
}

/// A consumed capsule's tensor: its bytes stay valid until this is dropped.
pub struct Consumed {
    managed: Managed,
}

impl Drop for Consumed {
    fn drop(&mut self) {
        // SAFETY: the pointer came from a capsule this guard consumed (renamed), so the
        // producer will not free it; calling its deleter once is the consumer's duty.
        unsafe {
            match self.managed {
                Managed::Legacy(p) => {
                    if let Some(d) = (*p).deleter {
                        d(p)
                    }
                }
                Managed::Versioned(p) => {
                    if let Some(d) = (*p).deleter {
                        d(p)
                    }
                }
            }
        }
    }
}

/// A host tensor's layout and bytes, as read from its DLPack description.
pub struct HostView<'a> {
    pub dtype: Option<DType>,
    /// `code:bits:lanes` of the DLPack dtype, for messages.
    dl_dtype: DLDataType,
    pub dims: Vec<i64>,
    pub bytes: &'a [u8],
}

impl HostView<'_> {
    /// The dtype as messages show it: the tpuc name, or the raw DLPack triple.
    pub fn dtype_name(&self) -> String {
        match self.dtype {
            Some(d) => d.to_string(),
            None => format!("DLPack dtype (code {}, bits {}, lanes {})", self.dl_dtype.code, self.dl_dtype.bits, self.dl_dtype.lanes),
        }
    }
}

fn dtype_of(t: DLDataType) -> Option<DType> {
    if t.lanes != 1 {
        return None;
    }
    Some(match (t.code, t.bits) {
        (0, 8) => DType::I8,
        (0, 16) => DType::I16,
        (0, 32) => DType::I32,
        (0, 64) => DType::I64,
        (1, 8) => DType::U8,
        (1, 16) => DType::U16,
        (1, 32) => DType::U32,
        (1, 64) => DType::U64,
        (2, 16) => DType::F16,
        (2, 32) => DType::F32,
        (2, 64) => DType::F64,
        (4, 16) => DType::BF16,
        (5, 64) => DType::C64,
        (5, 128) => DType::C128,
        (6, 8) => DType::Bool,
        (10, 8) => DType::F8E4M3FN,
        (12, 8) => DType::F8E5M2,
        _ => return None,
    })
}

impl Consumed {
    /// Takes the tensor out of `obj`, which must be an unconsumed DLPack capsule.
    pub fn take(obj: &Bound<'_, PyAny>) -> Result<Consumed, String> {
        let cap = obj.as_ptr();
        // SAFETY: `obj` is a live object and we hold the GIL; PyCapsule_IsValid accepts any
        // object (false, without an exception, for non-capsules and other names). After a
        // successful GetPointer the capsule is renamed before anything else can see it.
        unsafe {
            if ffi::PyCapsule_IsValid(cap, LEGACY.as_ptr()) == 1 {
                let p = ffi::PyCapsule_GetPointer(cap, LEGACY.as_ptr()) as *mut DLManagedTensor;
                if p.is_null() || ffi::PyCapsule_SetName(cap, LEGACY_USED.as_ptr()) != 0 {
                    ffi::PyErr_Clear();
                    return Err("cannot take the tensor out of the DLPack capsule".into());
                }
                return Ok(Consumed { managed: Managed::Legacy(p) });
            }
            if ffi::PyCapsule_IsValid(cap, VERSIONED.as_ptr()) == 1 {
                let p = ffi::PyCapsule_GetPointer(cap, VERSIONED.as_ptr()) as *mut DLManagedTensorVersioned;
                if p.is_null() || ffi::PyCapsule_SetName(cap, VERSIONED_USED.as_ptr()) != 0 {
                    ffi::PyErr_Clear();
                    return Err("cannot take the tensor out of the DLPack capsule".into());
                }
                let c = Consumed { managed: Managed::Versioned(p) };
                if (*p).version.major != 1 {
                    return Err(format!("DLPack version {}.{} is not supported (1.x is)", (*p).version.major, (*p).version.minor));
                }
                return Ok(c);
            }
        }
        let kind = obj.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "?".into());
        if kind == "PyCapsule" {
            Err("the DLPack capsule was already consumed (pass a fresh one per call)".into())
        } else {
            Err(format!("expected a DLPack capsule (torch.utils.dlpack.to_dlpack(t)), got {kind}"))
        }
    }

    fn tensor(&self) -> &DLTensor {
        // SAFETY: the managed tensor stays valid until this guard drops.
        unsafe {
            match self.managed {
                Managed::Legacy(p) => &(*p).dl_tensor,
                Managed::Versioned(p) => &(*p).dl_tensor,
            }
        }
    }

    /// The tensor's bytes in place. Only host memory in compact row-major order is accepted
    /// (strides of size-1 dims do not matter); anything else is an error naming what it is.
    pub fn host_view(&self) -> Result<HostView<'_>, String> {
        let t = self.tensor();
        if !HOST_DEVICES.contains(&t.device.device_type) {
            return Err(format!("the tensor is on DLPack device type {}, not in host memory", t.device.device_type));
        }
        let ndim = usize::try_from(t.ndim).map_err(|_| format!("negative rank {}", t.ndim))?;
        // SAFETY: DLPack promises `ndim` entries behind `shape` and (when not null) `strides`.
        let dims: Vec<i64> = if ndim == 0 { Vec::new() } else { unsafe { std::slice::from_raw_parts(t.shape, ndim) }.to_vec() };
        let strides: Option<&[i64]> =
            if t.strides.is_null() || ndim == 0 { None } else { Some(unsafe { std::slice::from_raw_parts(t.strides, ndim) }) };
        if dims.iter().any(|&d| d < 0) {
            return Err(format!("negative size in shape {dims:?}"));
        }
        let elem_bits = usize::from(t.dtype.bits) * usize::from(t.dtype.lanes);
        if elem_bits % 8 != 0 {
            return Err(format!("elements of {elem_bits} bits are not supported"));
        }
        let numel = dims.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d as usize)).ok_or("the tensor's size overflows")?;
        let len = numel.checked_mul(elem_bits / 8).ok_or("the tensor's size overflows")?;
        if let (Some(strides), true) = (strides, numel > 1) {
            let mut want = 1i64;
            for k in (0..ndim).rev() {
                if dims[k] != 1 && strides[k] != want {
                    return Err(format!(
                        "the tensor is not contiguous (shape {dims:?}, strides {strides:?}); pass t.contiguous()"
                    ));
                }
                want = want.saturating_mul(dims[k]);
            }
        }
        let bytes: &[u8] = if len == 0 {
            &[]
        } else {
            if t.data.is_null() {
                return Err("the tensor has no data".into());
            }
            // SAFETY: a compact host tensor of `len` bytes starts `byte_offset` bytes past
            // `data` (checked above: host device, compact strides); the producer keeps it alive
            // until this guard drops, and the returned view borrows the guard.
            unsafe { std::slice::from_raw_parts((t.data as *const u8).add(t.byte_offset as usize), len) }
        };
        Ok(HostView { dtype: dtype_of(t.dtype), dl_dtype: t.dtype, dims, bytes })
    }
}
