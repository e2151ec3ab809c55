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
#![allow(unsafe_code)]

use std::ffi::{c_char, c_void};
use std::mem::{self, offset_of, size_of};
use std::ops::{Deref, DerefMut};
use std::path::{Path, PathBuf};
use std::ptr::{self, NonNull};
use std::sync::Arc;

use crate::error::{Error, ErrorCode, Result};
use crate::ffi::{self, Args};
use crate::types::{CompiledMemoryStats, DeviceDescription, NamedValue, Value};

// ------------------------------------------------------------------ argument structs

/// An argument struct followed by zeroed bytes (see the module rules).
#[repr(C)]
struct Padded<T: Args> {
    args: T,
    _zeros: [u64; 16],
}

impl<T: Args> Padded<T> {
    fn new() -> Self {
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
    fn ptr(&mut self) -> *mut T {
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
fn zeroed<T: Args>() -> T {
    Padded::<T>::new().args
}

/// Copies a (pointer, length) string owned by the plugin.
///
/// # Safety
/// `data` must be null or point to `len` readable bytes.
unsafe fn copy_string(data: *const c_char, len: usize) -> String {
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
unsafe fn copy_slice<T: Copy>(data: *const T, len: usize) -> Vec<T> {
    if data.is_null() || len == 0 {
        return Vec::new();
    }
    std::slice::from_raw_parts(data, len).to_vec()
}

// ------------------------------------------------------------------ accounting

static LIVE: std::sync::atomic::AtomicIsize = std::sync::atomic::AtomicIsize::new(0);

/// Counts live PJRT objects: one inside every owning handle, so each count pairs with the
/// handle's `Drop`, which is where the object is destroyed.
struct Live;

impl Live {
    fn new() -> Live {
        LIVE.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Live
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        LIVE.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// PJRT objects (clients, topologies, executables, buffers, events) currently owned by this
/// process through the runtime.
pub(crate) fn live_objects() -> isize {
    LIVE.load(std::sync::atomic::Ordering::SeqCst)
}

// ------------------------------------------------------------------ the function table

/// Reads one entry of the plugin's function table, if the table is long enough to have it.
macro_rules! func {
    ($api:expr, $name:ident) => {{
        let api: &Api = $api;
        let offset = offset_of!(ffi::PJRT_Api, $name);
        let entry = if api.table_size >= offset + size_of::<usize>() {
            // SAFETY: the entry lies inside the table the plugin gave us (checked above), and
            // the table lives as long as the never-unloaded library.
            unsafe { ptr::addr_of!((*api.raw).$name).read() }
        } else {
            None
        };
        entry.ok_or_else(|| api.unsupported(stringify!($name)))
    }};
}

/// Calls a table entry with a pointer to its (padded) arguments and checks the result.
macro_rules! call {
    ($api:expr, $name:ident, $args:expr) => {{
        let api: &Api = $api;
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

/// A loaded plugin: its function table and what we know about it.
pub(crate) struct Api {
    raw: *const ffi::PJRT_Api,
    table_size: usize,
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

    fn unsupported(&self, function: &'static str) -> Error {
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
    fn check(&self, function: &'static str, err: *mut ffi::PJRT_Error) -> Result<()> {
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

/// Reads a plugin-owned `PJRT_NamedValue` array into owned values.
///
/// # Safety
/// `values` must be null or point to `len` valid named values whose data is readable.
unsafe fn read_named_values(values: *const ffi::PJRT_NamedValue, len: usize) -> Vec<NamedValue> {
    let mut out = Vec::with_capacity(len);
    if values.is_null() {
        return out;
    }
    for i in 0..len {
        let v = &*values.add(i);
        let name = copy_string(v.name, v.name_size);
        let value = match v.type_ {
            ffi::PJRT_NamedValue_kString => {
                Value::Str(copy_string(v.value.string_value, v.value_size))
            }
            ffi::PJRT_NamedValue_kInt64 => Value::Int(v.value.int64_value),
            ffi::PJRT_NamedValue_kInt64List => {
                Value::Ints(copy_slice(v.value.int64_array_value, v.value_size))
            }
            ffi::PJRT_NamedValue_kFloat => Value::Float(v.value.float_value),
            ffi::PJRT_NamedValue_kBool => Value::Bool(v.value.bool_value),
            other => Value::Str(format!("<unknown PJRT_NamedValue type {other}>")),
        };
        out.push(NamedValue { name, value });
    }
    out
}

/// `PJRT_NamedValue`s pointing into borrowed `NamedValue`s, for create calls.
struct NamedValuesIn<'a> {
    raw: Vec<ffi::PJRT_NamedValue>,
    _borrow: std::marker::PhantomData<&'a [NamedValue]>,
}

impl<'a> NamedValuesIn<'a> {
    fn new(values: &'a [NamedValue]) -> Self {
        let raw = values
            .iter()
            .map(|nv| {
                let mut v = zeroed::<ffi::PJRT_NamedValue>();
                v.name = nv.name.as_ptr().cast();
                v.name_size = nv.name.len();
                match &nv.value {
                    Value::Str(s) => {
                        v.type_ = ffi::PJRT_NamedValue_kString;
                        v.value.string_value = s.as_ptr().cast();
                        v.value_size = s.len();
                    }
                    Value::Int(i) => {
                        v.type_ = ffi::PJRT_NamedValue_kInt64;
                        v.value.int64_value = *i;
                        v.value_size = 1;
                    }
                    Value::Ints(list) => {
                        v.type_ = ffi::PJRT_NamedValue_kInt64List;
                        v.value.int64_array_value = list.as_ptr();
                        v.value_size = list.len();
                    }
                    Value::Float(f) => {
                        v.type_ = ffi::PJRT_NamedValue_kFloat;
                        v.value.float_value = *f;
                        v.value_size = 1;
                    }
                    Value::Bool(b) => {
                        v.type_ = ffi::PJRT_NamedValue_kBool;
                        v.value.bool_value = *b;
                        v.value_size = 1;
                    }
                }
                v
            })
            .collect();
        NamedValuesIn {
            raw,
            _borrow: std::marker::PhantomData,
        }
    }
    fn as_ptr(&self) -> *const ffi::PJRT_NamedValue {
        if self.raw.is_empty() {
            ptr::null()
        } else {
            self.raw.as_ptr()
        }
    }
    fn len(&self) -> usize {
        self.raw.len()
    }
}

/// A `PJRT_Program` borrowing its code and format.
fn program(code: &[u8], format: &'static str) -> ffi::PJRT_Program {
    let mut p = zeroed::<ffi::PJRT_Program>();
    // The compile calls only read `code` despite its non-const C type.
    p.code = code.as_ptr().cast_mut().cast();
    p.code_size = code.len();
    p.format = format.as_ptr().cast();
    p.format_size = format.len();
    p
}

// ------------------------------------------------------------------ events

struct RawEvent {
    api: &'static Api,
    ptr: NonNull<ffi::PJRT_Event>,
    _live: Live,
}

impl RawEvent {
    fn new(api: &'static Api, ptr: *mut ffi::PJRT_Event) -> Option<RawEvent> {
        NonNull::new(ptr).map(|ptr| RawEvent {
            api,
            ptr,
            _live: Live::new(),
        })
    }

    /// Blocks until the event is ready; its error, if any.
    fn wait(self) -> Result<()> {
        let mut a = Padded::<ffi::PJRT_Event_Await_Args>::new();
        a.event = self.ptr.as_ptr();
        call!(self.api, PJRT_Event_Await, a.ptr())
        // `self` drops here: the event is destroyed after the await.
    }
}

impl Drop for RawEvent {
    fn drop(&mut self) {
        let mut a = Padded::<ffi::PJRT_Event_Destroy_Args>::new();
        a.event = self.ptr.as_ptr();
        let _ = call!(self.api, PJRT_Event_Destroy, a.ptr());
    }
}

// ------------------------------------------------------------------ device descriptions

/// A device pointer owned by a client (valid while the client lives).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DevicePtr(NonNull<ffi::PJRT_Device>);

// SAFETY: an address of a client-owned, thread-safe device object; only dereferenced by the
// plugin while the owning client is alive (holders keep an Arc<RawClient>).
unsafe impl Send for DevicePtr {}
unsafe impl Sync for DevicePtr {}

fn describe(
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

// ------------------------------------------------------------------ clients

pub(crate) struct RawClient {
    api: &'static Api,
    ptr: NonNull<ffi::PJRT_Client>,
    _live: Live,
}

// SAFETY: see the module docs (PjRtClient is thread-safe).
unsafe impl Send for RawClient {}
unsafe impl Sync for RawClient {}

impl Drop for RawClient {
    fn drop(&mut self) {
        let mut a = Padded::<ffi::PJRT_Client_Destroy_Args>::new();
        a.client = self.ptr.as_ptr();
        let _ = call!(self.api, PJRT_Client_Destroy, a.ptr());
    }
}

impl RawClient {
    pub(crate) fn platform_name(&self) -> Result<String> {
        let mut a = Padded::<ffi::PJRT_Client_String_Args>::new();
        a.client = self.ptr.as_ptr();
        call!(self.api, PJRT_Client_PlatformName, a.ptr())?;
        // SAFETY: owned by the client, which is alive.
        Ok(unsafe { copy_string(a.value, a.value_size) })
    }

    pub(crate) fn platform_version(&self) -> Result<String> {
        let mut a = Padded::<ffi::PJRT_Client_String_Args>::new();
        a.client = self.ptr.as_ptr();
        call!(self.api, PJRT_Client_PlatformVersion, a.ptr())?;
        // SAFETY: owned by the client, which is alive.
        Ok(unsafe { copy_string(a.value, a.value_size) })
    }

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

// ------------------------------------------------------------------ topologies

pub(crate) struct RawTopology {
    api: &'static Api,
    ptr: NonNull<ffi::PJRT_TopologyDescription>,
    _live: Live,
}

// SAFETY: see the module docs (a topology description is immutable once created).
unsafe impl Send for RawTopology {}
unsafe impl Sync for RawTopology {}

impl Drop for RawTopology {
    fn drop(&mut self) {
        let mut a = Padded::<ffi::PJRT_TopologyDescription_Destroy_Args>::new();
        a.topology = self.ptr.as_ptr();
        let _ = call!(self.api, PJRT_TopologyDescription_Destroy, a.ptr());
    }
}

impl RawTopology {
    pub(crate) fn platform_name(&self) -> Result<String> {
        let mut a = Padded::<ffi::PJRT_TopologyDescription_String_Args>::new();
        a.topology = self.ptr.as_ptr();
        call!(self.api, PJRT_TopologyDescription_PlatformName, a.ptr())?;
        // SAFETY: owned by the topology, which is alive.
        Ok(unsafe { copy_string(a.value, a.value_size) })
    }

    pub(crate) fn platform_version(&self) -> Result<String> {
        let mut a = Padded::<ffi::PJRT_TopologyDescription_String_Args>::new();
        a.topology = self.ptr.as_ptr();
        call!(self.api, PJRT_TopologyDescription_PlatformVersion, a.ptr())?;
        // SAFETY: owned by the topology, which is alive.
        Ok(unsafe { copy_string(a.value, a.value_size) })
    }

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

// ------------------------------------------------------------------ executables

/// What an executable must not outlive.
enum Owner {
    Topology(#[allow(dead_code)] Arc<RawTopology>),
    Loaded(#[allow(dead_code)] Arc<RawLoaded>),
}

pub(crate) struct RawExecutable {
    api: &'static Api,
    ptr: NonNull<ffi::PJRT_Executable>,
    _owner: Owner,
    _live: Live,
}

// SAFETY: see the module docs (PjRtExecutable is immutable and thread-safe).
unsafe impl Send for RawExecutable {}
unsafe impl Sync for RawExecutable {}

impl Drop for RawExecutable {
    fn drop(&mut self) {
        let mut a = Padded::<ffi::PJRT_Executable_Destroy_Args>::new();
        a.executable = self.ptr.as_ptr();
        let _ = call!(self.api, PJRT_Executable_Destroy, a.ptr());
    }
}

impl RawExecutable {
    pub(crate) fn name(&self) -> Result<String> {
        let mut a = Padded::<ffi::PJRT_Executable_String_Args>::new();
        a.executable = self.ptr.as_ptr();
        call!(self.api, PJRT_Executable_Name, a.ptr())?;
        // SAFETY: owned by the executable, which is alive.
        Ok(unsafe { copy_string(a.value, a.value_size) })
    }

    pub(crate) fn fingerprint(&self) -> Result<String> {
        let mut a = Padded::<ffi::PJRT_Executable_String_Args>::new();
        a.executable = self.ptr.as_ptr();
        call!(self.api, PJRT_Executable_Fingerprint, a.ptr())?;
        // SAFETY: owned by the executable, which is alive.
        Ok(unsafe { copy_string(a.value, a.value_size) })
    }

    pub(crate) fn num_outputs(&self) -> Result<usize> {
        let mut a = Padded::<ffi::PJRT_Executable_Count_Args>::new();
        a.executable = self.ptr.as_ptr();
        call!(self.api, PJRT_Executable_NumOutputs, a.ptr())?;
        Ok(a.count)
    }

    pub(crate) fn num_replicas(&self) -> Result<usize> {
        let mut a = Padded::<ffi::PJRT_Executable_Count_Args>::new();
        a.executable = self.ptr.as_ptr();
        call!(self.api, PJRT_Executable_NumReplicas, a.ptr())?;
        Ok(a.count)
    }

    pub(crate) fn num_partitions(&self) -> Result<usize> {
        let mut a = Padded::<ffi::PJRT_Executable_Count_Args>::new();
        a.executable = self.ptr.as_ptr();
        call!(self.api, PJRT_Executable_NumPartitions, a.ptr())?;
        Ok(a.count)
    }

    pub(crate) fn output_element_types(&self) -> Result<Vec<i32>> {
        let mut a = Padded::<ffi::PJRT_Executable_OutputElementTypes_Args>::new();
        a.executable = self.ptr.as_ptr();
        call!(self.api, PJRT_Executable_OutputElementTypes, a.ptr())?;
        // SAFETY: an array owned by the executable.
        Ok(unsafe { copy_slice(a.output_types.cast_const(), a.num_output_types) })
    }

    pub(crate) fn output_dims(&self) -> Result<Vec<Vec<i64>>> {
        let mut a = Padded::<ffi::PJRT_Executable_OutputDimensions_Args>::new();
        a.executable = self.ptr.as_ptr();
        call!(self.api, PJRT_Executable_OutputDimensions, a.ptr())?;
        // SAFETY: arrays owned by the executable: `num_outputs` ranks, then all dims.
        let ranks = unsafe { copy_slice(a.dim_sizes, a.num_outputs) };
        let total: usize = ranks.iter().sum();
        let dims = unsafe { copy_slice(a.dims, total) };
        let mut out = Vec::with_capacity(ranks.len());
        let mut at = 0;
        for rank in ranks {
            out.push(dims[at..at + rank].to_vec());
            at += rank;
        }
        Ok(out)
    }

    pub(crate) fn cost_analysis(&self) -> Result<Vec<NamedValue>> {
        let mut a = Padded::<ffi::PJRT_Executable_GetCostAnalysis_Args>::new();
        a.executable = self.ptr.as_ptr();
        call!(self.api, PJRT_Executable_GetCostAnalysis, a.ptr())?;
        // SAFETY: properties owned by the executable.
        Ok(unsafe { read_named_values(a.properties, a.num_properties) })
    }

    pub(crate) fn memory_stats(&self) -> Result<CompiledMemoryStats> {
        let mut a = Padded::<ffi::PJRT_Executable_GetCompiledMemoryStats_Args>::new();
        a.executable = self.ptr.as_ptr();
        call!(self.api, PJRT_Executable_GetCompiledMemoryStats, a.ptr())?;
        Ok(CompiledMemoryStats {
            generated_code_size_in_bytes: a.generated_code_size_in_bytes,
            argument_size_in_bytes: a.argument_size_in_bytes,
            output_size_in_bytes: a.output_size_in_bytes,
            alias_size_in_bytes: a.alias_size_in_bytes,
            temp_size_in_bytes: a.temp_size_in_bytes,
            host_generated_code_size_in_bytes: a.host_generated_code_size_in_bytes,
            host_argument_size_in_bytes: a.host_argument_size_in_bytes,
            host_output_size_in_bytes: a.host_output_size_in_bytes,
            host_alias_size_in_bytes: a.host_alias_size_in_bytes,
            host_temp_size_in_bytes: a.host_temp_size_in_bytes,
            peak_memory_in_bytes: a.peak_memory_in_bytes,
        })
    }

    pub(crate) fn serialize(&self) -> Result<Vec<u8>> {
        let mut a = Padded::<ffi::PJRT_Executable_Serialize_Args>::new();
        a.executable = self.ptr.as_ptr();
        call!(self.api, PJRT_Executable_Serialize, a.ptr())?;
        // SAFETY: the bytes live until the deleter runs, which happens once, right after.
        unsafe {
            let bytes = copy_slice(a.serialized_bytes.cast::<u8>(), a.serialized_bytes_size);
            if let (Some(deleter), false) = (
                a.serialized_executable_deleter,
                a.serialized_executable.is_null(),
            ) {
                deleter(a.serialized_executable);
            }
            Ok(bytes)
        }
    }
}

pub(crate) struct RawLoaded {
    api: &'static Api,
    ptr: NonNull<ffi::PJRT_LoadedExecutable>,
    client: Arc<RawClient>,
    _live: Live,
}

// SAFETY: see the module docs (PjRtLoadedExecutable::Execute is thread-safe).
unsafe impl Send for RawLoaded {}
unsafe impl Sync for RawLoaded {}

impl Drop for RawLoaded {
    fn drop(&mut self) {
        let mut a = Padded::<ffi::PJRT_LoadedExecutable_Destroy_Args>::new();
        a.executable = self.ptr.as_ptr();
        let _ = call!(self.api, PJRT_LoadedExecutable_Destroy, a.ptr());
    }
}

impl RawLoaded {
    pub(crate) fn client(&self) -> &Arc<RawClient> {
        &self.client
    }

    /// The compiled program behind this loaded executable (a new object, freed separately).
    pub(crate) fn executable(self: &Arc<Self>) -> Result<RawExecutable> {
        let mut a = Padded::<ffi::PJRT_LoadedExecutable_GetExecutable_Args>::new();
        a.loaded_executable = self.ptr.as_ptr();
        call!(self.api, PJRT_LoadedExecutable_GetExecutable, a.ptr())?;
        let ptr = NonNull::new(a.executable).ok_or_else(|| {
            self.api.contract(
                "PJRT_LoadedExecutable_GetExecutable",
                "returned no executable",
            )
        })?;
        Ok(RawExecutable {
            api: self.api,
            ptr,
            _live: Live::new(),
            _owner: Owner::Loaded(Arc::clone(self)),
        })
    }

    pub(crate) fn addressable_devices(&self) -> Result<Vec<DevicePtr>> {
        let mut a = Padded::<ffi::PJRT_LoadedExecutable_AddressableDevices_Args>::new();
        a.executable = self.ptr.as_ptr();
        call!(self.api, PJRT_LoadedExecutable_AddressableDevices, a.ptr())?;
        // SAFETY: an array owned by the executable.
        let raw = unsafe { copy_slice(a.addressable_devices, a.num_addressable_devices) };
        Ok(raw
            .into_iter()
            .filter_map(NonNull::new)
            .map(DevicePtr)
            .collect())
    }

    /// Runs a single-device executable on the device it was compiled for and waits for it.
    pub(crate) fn execute(
        &self,
        args: &[&RawBuffer],
        num_outputs: usize,
    ) -> Result<Vec<RawBuffer>> {
        let mut per_device = self.execute_on_devices(&[args.to_vec()], num_outputs)?;
        Ok(per_device.pop().unwrap_or_default())
    }

    /// Runs on every device of the executable at once, `args[d]` the arguments of device `d`
    /// (in [`RawLoaded::addressable_devices`] order), and waits for all of them. Returns the
    /// outputs of each device.
    pub(crate) fn execute_on_devices(
        &self,
        args: &[Vec<&RawBuffer>],
        num_outputs: usize,
    ) -> Result<Vec<Vec<RawBuffer>>> {
        let n = args.len();
        let num_args = args.first().map_or(0, Vec::len);
        if args.iter().any(|a| a.len() != num_args) {
            return Err(Error::InvalidArgument("every device needs the same number of arguments".into()));
        }
        let arg_ptrs: Vec<Vec<*mut ffi::PJRT_Buffer>> =
            args.iter().map(|a| a.iter().map(|b| b.ptr.as_ptr()).collect()).collect();
        let arg_lists: Vec<*const *mut ffi::PJRT_Buffer> = arg_ptrs.iter().map(|a| a.as_ptr()).collect();
        let mut outputs: Vec<Vec<*mut ffi::PJRT_Buffer>> = vec![vec![ptr::null_mut(); num_outputs]; n];
        let output_lists: Vec<*mut *mut ffi::PJRT_Buffer> = outputs.iter_mut().map(|o| o.as_mut_ptr()).collect();
        let mut events: Vec<*mut ffi::PJRT_Event> = vec![ptr::null_mut(); n];
        let mut options = Padded::<ffi::PJRT_ExecuteOptions>::new();

        let mut a = Padded::<ffi::PJRT_LoadedExecutable_Execute_Args>::new();
        a.executable = self.ptr.as_ptr();
        a.options = options.ptr();
        a.argument_lists = arg_lists.as_ptr();
        a.num_devices = n;
        a.num_args = num_args;
        a.output_lists = output_lists.as_ptr();
        a.device_complete_events = events.as_mut_ptr();
        let result = call!(self.api, PJRT_LoadedExecutable_Execute, a.ptr());
        // Own whatever the plugin produced before looking at the result.
        let done: Vec<RawEvent> = events.iter().filter_map(|&e| RawEvent::new(self.api, e)).collect();
        let buffers: Vec<Vec<RawBuffer>> = outputs
            .iter()
            .map(|o| {
                o.iter()
                    .filter_map(|&p| NonNull::new(p))
                    .map(|ptr| RawBuffer {
                        api: self.api,
                        ptr,
                        host_done: None,
                        _live: Live::new(),
                        _client: Arc::clone(&self.client),
                    })
                    .collect()
            })
            .collect();
        result?;
        for d in done {
            d.wait()?;
        }
        if let Some(short) = buffers.iter().find(|b| b.len() != num_outputs) {
            return Err(self.api.contract(
                "PJRT_LoadedExecutable_Execute",
                format!("returned {} of {num_outputs} outputs", short.len()),
            ));
        }
        Ok(buffers)
    }
}

// ------------------------------------------------------------------ buffers

pub(crate) struct RawBuffer {
    api: &'static Api,
    ptr: NonNull<ffi::PJRT_Buffer>,
    /// For a buffer that may alias host memory: fires once the plugin is done with that memory
    /// (after the buffer is destroyed).
    host_done: Option<RawEvent>,
    _client: Arc<RawClient>,
    _live: Live,
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

/// Redirects the process's stderr (fd 2) to a file until dropped. Output other threads write
/// to stderr meanwhile goes to the file too, so it is held only around plugin start-up.
pub(crate) struct StderrTo {
    saved: libc::c_int,
}

impl StderrTo {
    /// `None` (stderr untouched) when the file cannot be opened.
    pub(crate) fn file(path: &std::path::Path) -> Option<StderrTo> {
        use std::os::fd::IntoRawFd;
        let file = std::fs::OpenOptions::new().create(true).append(true).open(path).ok()?;
        let fd = file.into_raw_fd();
        // SAFETY: plain descriptor calls on descriptors this function owns (`fd`, the
        // duplicate `saved`) and on 2, which the drop restores.
        unsafe {
            let saved = libc::dup(2);
            if saved < 0 {
                libc::close(fd);
                return None;
            }
            let ok = libc::dup2(fd, 2) >= 0;
            libc::close(fd);
            if !ok {
                libc::close(saved);
                return None;
            }
            Some(StderrTo { saved })
        }
    }
}

impl Drop for StderrTo {
    fn drop(&mut self) {
        // SAFETY: restores the descriptor saved by `file` and closes the copy.
        unsafe {
            libc::dup2(self.saved, 2);
            libc::close(self.saved);
        }
    }
}
