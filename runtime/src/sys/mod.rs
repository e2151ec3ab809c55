//! Every unsafe call into a PJRT plugin lives here, behind small safe functions.
//!
//! Rules this module keeps:
//! * A function-table entry is read only when it lies inside the plugin's own table
//!   (`PJRT_Api.struct_size`); a missing entry is `Error::Unsupported`, never a crash.
//! * Argument structs are zeroed, get their exact `struct_size`, and sit in front of a zeroed
//!   tail (`Padded`), so a plugin that reads past the fields we know reads zeros (= "unset").
//! * Every `PJRT_Error` is read (message, code) and destroyed exactly once (`Api::check`).
//! * Each owned PJRT object is one Rust value whose `Drop` destroys it exactly once: `RawClient`,
//!   `RawTopology`, `RawExecutable`, `RawLoaded`, `RawBuffer`, `RawEvent`; the serialized bytes
//!   of executables and topologies are copied out and their deleter called at once.
//! * Objects that must not outlive another hold an `Arc` to it (buffers and loaded executables
//!   keep their client alive, an executable keeps the loaded executable or topology it came
//!   from), so destruction order is always valid.
//! * Plugin libraries are never unloaded: `Api` values are leaked (`&'static`), because
//!   plugins start threads and libtpu cannot be loaded twice.
//!
//! Thread safety: the PJRT C API wraps the C++ `PjRtClient`, `PjRtBuffer`,
//! `PjRtLoadedExecutable`, `PjRtExecutable` and `PjRtTopologyDescription` objects, whose
//! methods are documented as thread-safe (JAX calls them from many Python threads), and the
//! function table is immutable after `GetPjrtApi`. Events are only awaited and destroyed by
//! their single owner. So every handle here is `Send + Sync`; mutation happens only in `Drop`,
//! which Rust runs once, after the last shared use.
//!
//! Layout, one job a file (the `// SAFETY:` comments in them that say "see the module docs"
//! mean the thread-safety paragraph above):
//! * `api`: opening a plugin, its function table, reading and destroying `PJRT_Error`s, and
//!   the plugin-level calls (initialize, attributes, creating clients and topologies);
//! * `args`: zero-padded argument structs, `PJRT_Program`, copies of plugin-owned strings and
//!   arrays;
//! * `named_values`: `PJRT_NamedValue` lists, both directions;
//! * `live`: the count of live PJRT objects;
//! * `event`: `RawEvent`; `device`: device pointers and descriptions;
//! * `client`: `RawClient`; `topology`: `RawTopology` (compiling without devices);
//! * `executable`: `RawExecutable` and `RawLoaded` (running);
//! * `buffer`: `RawBuffer`, its host memory and device-to-host copies;
//! * `stderr`: redirecting stderr around plugin start-up.
//!
//! The `func!`, `call!`, `destroy_on_drop!` and `getter!` macros below serve every file; they stand before the `mod` lines so
//! that those files see them.
#![allow(unsafe_code)]

// ------------------------------------------------------------------ the function table

/// Reads one entry of the plugin's function table, if the table is long enough to have it.
macro_rules! func {
    ($api:expr, $name:ident) => {{
        let api: &$crate::sys::Api = $api;
        let offset = std::mem::offset_of!($crate::ffi::PJRT_Api, $name);
        let entry = if api.table_size >= offset + std::mem::size_of::<usize>() {
            // SAFETY: the entry lies inside the table the plugin gave us (checked above), and
            // the table lives as long as the never-unloaded library.
            unsafe { std::ptr::addr_of!((*api.raw).$name).read() }
        } else {
            None
        };
        entry.ok_or_else(|| api.unsupported(stringify!($name)))
    }};
}

/// Calls a table entry with a pointer to its (padded) arguments and checks the result.
macro_rules! call {
    ($api:expr, $name:ident, $args:expr) => {{
        let api: &$crate::sys::Api = $api;
        match func!(api, $name) {
            Ok(f) => {
                // SAFETY: `f` comes from the plugin's table with the declared signature;
                // `$args` points to a live, correctly laid-out argument struct whose pointers
                // are valid for the duration of the call (callers keep their targets alive).
                let err = unsafe { f($args) };
                api.check(stringify!($name), err)
            }
            Err(e) => Err(e),
        }
    }};
}

/// `impl Drop for $ty` that destroys the owned handle `self.ptr` with `PJRT_*_Destroy`
/// (`$args.$field` takes the handle; an error on the way out is dropped). Callers have
/// `Padded` and `ffi` in scope.
macro_rules! destroy_on_drop {
    ($ty:ty, $args:ident . $field:ident, $destroy:ident) => {
        impl Drop for $ty {
            fn drop(&mut self) {
                let mut a = Padded::<ffi::$args>::new();
                a.$field = self.ptr.as_ptr();
                let _ = call!(self.api, $destroy, a.ptr());
            }
        }
    };
}

/// A method reading one value of the object `self.ptr` (passed in `$args.$field`) from
/// `PJRT_*`: `-> String` copies the string the object owns, `-> usize` returns the count.
macro_rules! getter {
    ($name:ident -> String = $call:ident($args:ident . $field:ident)) => {
        // SAFETY: the string is owned by the object, which `self` keeps alive.
        getter!($name -> String = $call($args.$field), |a| unsafe { copy_string(a.value, a.value_size) });
    };
    ($name:ident -> usize = $call:ident($args:ident . $field:ident)) => {
        getter!($name -> usize = $call($args.$field), |a| a.count);
    };
    ($name:ident -> $ret:ty = $call:ident($args:ident . $field:ident), |$a:ident| $read:expr) => {
        pub(crate) fn $name(&self) -> Result<$ret> {
            let mut $a = Padded::<ffi::$args>::new();
            $a.$field = self.ptr.as_ptr();
            call!(self.api, $call, $a.ptr())?;
            Ok($read)
        }
    };
}

mod api;
mod args;
mod buffer;
mod client;
mod device;
mod event;
mod executable;
mod live;
mod named_values;
mod stderr;
mod topology;

pub(crate) use api::{Api, LoadFailure};
pub(crate) use buffer::{HostMemory, RawBuffer};
pub(crate) use client::RawClient;
pub(crate) use device::DevicePtr;
pub(crate) use executable::{RawExecutable, RawLoaded};
pub(crate) use live::live_objects;
pub(crate) use stderr::StderrTo;
pub(crate) use topology::RawTopology;
