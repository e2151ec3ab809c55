//! Argument structs for the function table: zeroed and padded (`Padded`, `zeroed`), the
//! `PJRT_Program` of a compile call, and copies of strings and arrays the plugin owns.

use std::ffi::c_char;
use std::mem;
use std::ops::{Deref, DerefMut};
use std::ptr;

use crate::ffi::{self, Args};

/// An argument struct followed by zeroed bytes (see the module rules).
#[repr(C)]
pub(super) struct Padded<T: Args> {
    args: T,
    _zeros: [u64; 16],
}

impl<T: Args> Padded<T> {
    pub(super) fn new() -> Self {
        // SAFETY: `Args` guarantees all-zero bytes are a valid `T`; the tail is plain u64s.
        let mut p: Self = unsafe { mem::zeroed() };
        // SAFETY: `Args` guarantees `T` starts with its `usize` struct_size.
        unsafe {
            ptr::addr_of_mut!(p.args)
                .cast::<usize>()
                .write(T::struct_size())
        };
        p
    }
    /// Pointer to the arguments, derived from the whole padded struct so that it also covers
    /// the zeroed tail (`args` is the first field of a `repr(C)` struct).
    pub(super) fn ptr(&mut self) -> *mut T {
        (self as *mut Self).cast::<T>()
    }
}

impl<T: Args> Deref for Padded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.args
    }
}

impl<T: Args> DerefMut for Padded<T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.args
    }
}

/// A zeroed struct with its `struct_size` set, for structs passed by value inside arguments.
pub(super) fn zeroed<T: Args>() -> T {
    Padded::<T>::new().args
}

/// Copies a (pointer, length) string owned by the plugin.
///
/// # Safety
/// `data` must be null or point to `len` readable bytes.
pub(super) unsafe fn copy_string(data: *const c_char, len: usize) -> String {
    if data.is_null() || len == 0 {
        return String::new();
    }
    let bytes = std::slice::from_raw_parts(data.cast::<u8>(), len);
    String::from_utf8_lossy(bytes).into_owned()
}

/// Copies a (pointer, count) array owned by the plugin.
///
/// # Safety
/// `data` must be null or point to `len` readable, initialized `T`s.
pub(super) unsafe fn copy_slice<T: Copy>(data: *const T, len: usize) -> Vec<T> {
    if data.is_null() || len == 0 {
        return Vec::new();
    }
    std::slice::from_raw_parts(data, len).to_vec()
}

/// A `PJRT_Program` borrowing its code and format.
pub(super) fn program(code: &[u8], format: &'static str) -> ffi::PJRT_Program {
    let mut p = zeroed::<ffi::PJRT_Program>();
    // The compile calls only read `code` despite its non-const C type.
    p.code = code.as_ptr().cast_mut().cast();
    p.code_size = code.len();
    p.format = format.as_ptr().cast();
    p.format_size = format.len();
    p
}
