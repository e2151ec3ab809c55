//! A loaded plugin (`Api`): opening the library and checking its function table, turning
//! `PJRT_Error`s into `Error`s (each read and destroyed once), and the plugin-level calls:
//! initialize, attributes, creating clients and topologies.

use std::mem::{self, offset_of, size_of};
use std::path::{Path, PathBuf};
use std::ptr::{self, NonNull};

use super::args::{copy_string, Padded};
use super::client::RawClient;
use super::live::Live;
use super::named_values::{read_named_values, NamedValuesIn};
use super::topology::RawTopology;
use crate::error::{Error, ErrorCode, Result};
use crate::ffi;
use crate::types::NamedValue;

/// A loaded plugin: its function table and what we know about it.
pub(crate) struct Api {
    pub(super) raw: *const ffi::PJRT_Api,
    pub(super) table_size: usize,
    pub(crate) path: PathBuf,
    pub(crate) version: (i32, i32),
}

// SAFETY: the table is immutable after GetPjrtApi and its functions may be called from any
// thread (see the module docs).
unsafe impl Send for Api {}
unsafe impl Sync for Api {}

/// Why a load failed, before we have an `Api` to describe the plugin.
pub(crate) enum LoadFailure {
    /// dlopen or the symbol lookup failed.
    Open(String),
    /// The table is unusable.
    Table(String),
    /// Unsupported version.
    Version(i32, i32),
}

impl Api {
    /// dlopens `path`, calls `GetPjrtApi` and checks the version. The library is never closed.
    pub(crate) fn open(
        path: &Path,
        min_minor: i32,
    ) -> std::result::Result<&'static Api, LoadFailure> {
        #[cfg(unix)]
        let lib = {
            use libloading::os::unix::{Library, RTLD_LAZY, RTLD_LOCAL};
            // SAFETY: loading a library runs its initializers; that is what loading a plugin
            // means. The caller serializes loads (a global lock) and loads each file once.
            unsafe { Library::open(Some(path), RTLD_LAZY | RTLD_LOCAL) }
                .map_err(|e| LoadFailure::Open(e.to_string()))?
        };
        #[cfg(not(unix))]
        let lib = {
            // SAFETY: as above.
            unsafe { libloading::Library::new(path) }
                .map_err(|e| LoadFailure::Open(e.to_string()))?
        };
        // SAFETY: `GetPjrtApi` has this signature in every PJRT plugin.
        let get: Result<ffi::GetPjrtApiFn, _> =
            unsafe { lib.get::<ffi::GetPjrtApiFn>(b"GetPjrtApi\0") }.map(|sym| *sym);
        let get = match get {
            Ok(get) => get,
            Err(e) => {
                // Not a plugin. Keep it loaded anyway: unloading arbitrary libraries can run
                // destructors that assume the process is exiting.
                mem::forget(lib);
                return Err(LoadFailure::Open(format!(
                    "not a PJRT plugin: it does not export GetPjrtApi ({e})"
                )));
            }
        };
        // From here on plugin code has run; the library must stay loaded.
        mem::forget(lib);
        // SAFETY: calling the plugin's entry point; it returns a pointer to a static table.
        let raw = unsafe { get() };
        if raw.is_null() {
            return Err(LoadFailure::Table("GetPjrtApi returned null".into()));
        }
        let version_end =
            offset_of!(ffi::PJRT_Api, pjrt_api_version) + size_of::<ffi::PJRT_Api_Version>();
        // SAFETY: every table starts with its struct_size.
        let table_size = unsafe { ptr::addr_of!((*raw).struct_size).read() };
        if table_size < version_end {
            return Err(LoadFailure::Table(format!(
                "PJRT_Api table is only {table_size} bytes"
            )));
        }
        // SAFETY: the version lies inside the table (checked above).
        let (major, minor) = unsafe {
            let v = ptr::addr_of!((*raw).pjrt_api_version);
            (
                ptr::addr_of!((*v).major_version).read(),
                ptr::addr_of!((*v).minor_version).read(),
            )
        };
        if major != ffi::API_MAJOR || minor < min_minor {
            return Err(LoadFailure::Version(major, minor));
        }
        let api = Box::leak(Box::new(Api {
            raw,
            table_size,
            path: path.to_path_buf(),
            version: (major, minor),
        }));
        // Without these two nothing can be reported; refuse such a table.
        func!(api, PJRT_Error_Message).map_err(|e| LoadFailure::Table(e.to_string()))?;
        func!(api, PJRT_Error_Destroy).map_err(|e| LoadFailure::Table(e.to_string()))?;
        Ok(api)
    }

    fn api_string(&self) -> String {
        format!("{}.{}", self.version.0, self.version.1)
    }

    pub(super) fn unsupported(&self, function: &'static str) -> Error {
        Error::Unsupported {
            function,
            plugin: self.path.clone(),
            api: self.api_string(),
        }
    }

    pub(crate) fn contract(&self, function: &'static str, what: impl Into<String>) -> Error {
        Error::Contract {
            function,
            what: what.into(),
            plugin: self.path.clone(),
        }
    }

    /// Turns a returned `PJRT_Error*` into a `Result`, destroying the error.
    pub(super) fn check(&self, function: &'static str, err: *mut ffi::PJRT_Error) -> Result<()> {
        if err.is_null() {
            return Ok(());
        }
        let (code, message) = self.take_error(err);
        Err(Error::Plugin {
            function,
            code,
            message,
            plugin: self.path.clone(),
            api: self.api_string(),
        })
    }

    /// Reads message and code of `err`, then destroys it.
    fn take_error(&self, err: *mut ffi::PJRT_Error) -> (ErrorCode, String) {
        let mut message = String::new();
        if let Ok(f) = func!(self, PJRT_Error_Message) {
            let mut a = Padded::<ffi::PJRT_Error_Message_Args>::new();
            a.error = err;
            // SAFETY: `err` is a live error from this plugin; the message lives as long as it.
            unsafe {
                f(a.ptr());
                message = copy_string(a.message, a.message_size);
            }
        }
        let mut code = ErrorCode::Unknown;
        if let Ok(f) = func!(self, PJRT_Error_GetCode) {
            let mut a = Padded::<ffi::PJRT_Error_GetCode_Args>::new();
            a.error = err;
            // SAFETY: as above.
            let err2 = unsafe { f(a.ptr()) };
            if err2.is_null() {
                code = ErrorCode::from_raw(a.code);
            } else {
                self.destroy_error(err2);
            }
        }
        self.destroy_error(err);
        (code, message)
    }

    fn destroy_error(&self, err: *mut ffi::PJRT_Error) {
        if let Ok(f) = func!(self, PJRT_Error_Destroy) {
            let mut a = Padded::<ffi::PJRT_Error_Destroy_Args>::new();
            a.error = err;
            // SAFETY: `err` is live and destroyed exactly once, here.
            unsafe { f(a.ptr()) };
        }
    }

    /// `PJRT_Plugin_Initialize`, when the plugin has it.
    pub(crate) fn initialize(&'static self) -> Result<()> {
        if func!(self, PJRT_Plugin_Initialize).is_err() {
            return Ok(());
        }
        let mut a = Padded::<ffi::PJRT_Plugin_Initialize_Args>::new();
        call!(self, PJRT_Plugin_Initialize, a.ptr())
    }

    /// `PJRT_Plugin_Attributes`; an empty list when the plugin lacks the function.
    pub(crate) fn attributes(&'static self) -> Result<Vec<NamedValue>> {
        if func!(self, PJRT_Plugin_Attributes).is_err() {
            return Ok(Vec::new());
        }
        let mut a = Padded::<ffi::PJRT_Plugin_Attributes_Args>::new();
        call!(self, PJRT_Plugin_Attributes, a.ptr())?;
        // SAFETY: the plugin returned `num_attributes` values that live for the process.
        Ok(unsafe { read_named_values(a.attributes, a.num_attributes) })
    }

    pub(crate) fn create_client(&'static self, options: &[NamedValue]) -> Result<RawClient> {
        let options = NamedValuesIn::new(options);
        let mut a = Padded::<ffi::PJRT_Client_Create_Args>::new();
        a.create_options = options.as_ptr();
        a.num_options = options.len();
        call!(self, PJRT_Client_Create, a.ptr())?;
        let ptr = NonNull::new(a.client)
            .ok_or_else(|| self.contract("PJRT_Client_Create", "returned no client"))?;
        Ok(RawClient {
            api: self,
            ptr,
            _live: Live::new(),
        })
    }

    pub(crate) fn create_topology(
        &'static self,
        name: &str,
        options: &[NamedValue],
    ) -> Result<RawTopology> {
        let options = NamedValuesIn::new(options);
        let mut a = Padded::<ffi::PJRT_TopologyDescription_Create_Args>::new();
        a.topology_name = name.as_ptr().cast();
        a.topology_name_size = name.len();
        a.create_options = options.as_ptr();
        a.num_options = options.len();
        call!(self, PJRT_TopologyDescription_Create, a.ptr())?;
        let ptr = NonNull::new(a.topology).ok_or_else(|| {
            self.contract("PJRT_TopologyDescription_Create", "returned no topology")
        })?;
        Ok(RawTopology {
            api: self,
            ptr,
            _live: Live::new(),
        })
    }
}
