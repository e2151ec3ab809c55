//! Host ↔ device traffic, counted, and whether host memory may be used in place.
//!
//! Every array that crosses between host memory and a device through this crate is counted
//! here: [`crate::Client::buffer_from_host`] and its borrowing variants (unless the plugin
//! reads the host memory in place), [`crate::Buffer::to_host`] and
//! [`crate::Buffer::into_host_all`] (unless the bytes are handed over in place). The counts
//! are process-wide and never reset; callers take differences.
//!
//! [`set_host_aliasing`]`(false)` makes a plugin whose device memory is host memory (the XLA
//! CPU plugin) behave as an accelerator does: no argument read from host memory in place, no
//! result handed over in place, so every transfer is a copy and is counted. Tests use it to
//! check what an accelerator would move.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

static H2D_BYTES: AtomicU64 = AtomicU64::new(0);
static D2H_BYTES: AtomicU64 = AtomicU64::new(0);
static H2D_COUNT: AtomicU64 = AtomicU64::new(0);
static D2H_COUNT: AtomicU64 = AtomicU64::new(0);
static HOST_ALIASING: AtomicBool = AtomicBool::new(true);

/// Bytes and arrays moved so far in this process.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Transfers {
    /// Host → device bytes.
    pub h2d_bytes: u64,
    /// Device → host bytes.
    pub d2h_bytes: u64,
    /// Host → device arrays.
    pub h2d_arrays: u64,
    /// Device → host arrays.
    pub d2h_arrays: u64,
}

impl Transfers {
    /// What moved between `earlier` and `self`.
    pub fn since(&self, earlier: &Transfers) -> Transfers {
        Transfers {
            h2d_bytes: self.h2d_bytes - earlier.h2d_bytes,
            d2h_bytes: self.d2h_bytes - earlier.d2h_bytes,
            h2d_arrays: self.h2d_arrays - earlier.h2d_arrays,
            d2h_arrays: self.d2h_arrays - earlier.d2h_arrays,
        }
    }
}

/// The process's transfer counts.
pub fn transfers() -> Transfers {
    Transfers {
        h2d_bytes: H2D_BYTES.load(Ordering::Relaxed),
        d2h_bytes: D2H_BYTES.load(Ordering::Relaxed),
        h2d_arrays: H2D_COUNT.load(Ordering::Relaxed),
        d2h_arrays: D2H_COUNT.load(Ordering::Relaxed),
    }
}

pub(crate) fn count_h2d(bytes: usize) {
    H2D_BYTES.fetch_add(bytes as u64, Ordering::Relaxed);
    H2D_COUNT.fetch_add(1, Ordering::Relaxed);
}

pub(crate) fn count_d2h(bytes: usize) {
    D2H_BYTES.fetch_add(bytes as u64, Ordering::Relaxed);
    D2H_COUNT.fetch_add(1, Ordering::Relaxed);
}

/// Allows (the default) or forbids using host memory in place, process-wide (see the module
/// docs).
pub fn set_host_aliasing(on: bool) {
    HOST_ALIASING.store(on, Ordering::Relaxed);
}

/// Whether host memory may be used in place.
pub fn host_aliasing() -> bool {
    HOST_ALIASING.load(Ordering::Relaxed)
}
