//! Hand-written declarations of the subset of the PJRT C API that tpuc uses.
//!
//! Layouts follow PJRT C API 0.81 (`xla/pjrt/c/pjrt_c_api.h` at that version, read from the
//! `xla-cpu-pjrt==0.0.1` wheel); nothing here is copied from that header. The rules of the ABI
//! this relies on:
//!
//! * Every argument struct starts with `struct_size` (the offset of its last field plus that
//!   field's size, see [`Args::struct_size`]) and `extension_start`. Fields are only ever
//!   appended within a major version, so a newer plugin accepts these structs and an older
//!   plugin ignores the fields it does not know.
//! * `PJRT_Api` is a table of function pointers that also only grows at the end; a field is
//!   present only if it lies within the table's own `struct_size` (checked in `sys`).
//! * C enums are `int`-sized here; `bool` is C's `_Bool` (one byte, same as Rust's `bool`).
//!
//! Only the structs that tpuc calls are declared; table entries it does not call are typed as
//! [`Unused`] so that the offsets of the later entries stay right. The unit tests at the bottom
//! pin the sizes and offsets that were checked against the header by hand.
//!
//! One file on purpose: the declarations mirror the C header's structs in its order, so a
//! layout is checked against the header by reading the two side by side.
#![allow(
    non_camel_case_types,
    non_snake_case,
    non_upper_case_globals,
    dead_code
)]

use std::ffi::{c_char, c_int, c_void};

/// The minor API version whose struct layouts these declarations reproduce.
pub const LAYOUT_MINOR: c_int = 81;
/// The only major version there is.
pub const API_MAJOR: c_int = 0;

// ------------------------------------------------------------------ opaque handles

macro_rules! opaque {
    ($($name:ident),* $(,)?) => {
        $(
            #[repr(C)]
            pub struct $name {
                _private: [u8; 0],
            }
        )*
    };
}

opaque!(
    PJRT_Error,
    PJRT_Event,
    PJRT_Client,
    PJRT_Device,
    PJRT_Memory,
    PJRT_DeviceDescription,
    PJRT_TopologyDescription,
    PJRT_Executable,
    PJRT_LoadedExecutable,
    PJRT_Buffer,
    PJRT_SerializedExecutable,
    PJRT_SerializedTopology,
    PJRT_ExecuteContext,
);

/// Head of an extension chain. tpuc passes no extensions (always null).
#[repr(C)]
pub struct PJRT_Extension_Base {
    pub struct_size: usize,
    pub type_: c_int,
    pub next: *mut PJRT_Extension_Base,
}

/// Implemented by every argument struct: it starts with `struct_size` and
/// `extension_start`, and all-zero bytes are a valid value of it.
///
/// # Safety
/// The implementing type must be `#[repr(C)]`, begin with a `usize` `struct_size` field, and
/// be valid when zero-initialized (only integers, bools, raw pointers, `Option<fn>`, unions of
/// those).
pub unsafe trait Args: Sized {
    /// `PJRT_STRUCT_SIZE(T, last_field)`: the offset of the last field plus its size.
    fn struct_size() -> usize;
}

/// Size of the field a projection closure points at (used by `args!`).
pub fn field_size<T, F>(_project: fn(&T) -> &F) -> usize {
    std::mem::size_of::<F>()
}

macro_rules! args {
    ($($t:ident => $last:ident),* $(,)?) => {
        $(
            // SAFETY: every struct listed is #[repr(C)], starts with `struct_size: usize` and
            // holds only plain data for which all-zero bytes are valid.
            unsafe impl Args for $t {
                fn struct_size() -> usize {
                    std::mem::offset_of!($t, $last) + field_size(|s: &$t| &s.$last)
                }
            }
        )*
    };
}

// ------------------------------------------------------------------ common

pub type PJRT_Error_Code = c_int;
pub const PJRT_Error_Code_UNIMPLEMENTED: PJRT_Error_Code = 12;

#[repr(C)]
pub struct PJRT_Api_Version {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub major_version: c_int,
    pub minor_version: c_int,
}

#[repr(C)]
pub struct PJRT_Error_Destroy_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub error: *mut PJRT_Error,
}

#[repr(C)]
pub struct PJRT_Error_Message_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub error: *const PJRT_Error,
    pub message: *const c_char,
    pub message_size: usize,
}

#[repr(C)]
pub struct PJRT_Error_GetCode_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub error: *const PJRT_Error,
    pub code: PJRT_Error_Code,
}

pub type PJRT_NamedValue_Type = c_int;
pub const PJRT_NamedValue_kString: PJRT_NamedValue_Type = 0;
pub const PJRT_NamedValue_kInt64: PJRT_NamedValue_Type = 1;
pub const PJRT_NamedValue_kInt64List: PJRT_NamedValue_Type = 2;
pub const PJRT_NamedValue_kFloat: PJRT_NamedValue_Type = 3;
pub const PJRT_NamedValue_kBool: PJRT_NamedValue_Type = 4;

#[repr(C)]
#[derive(Clone, Copy)]
pub union PJRT_NamedValue_Value {
    pub string_value: *const c_char,
    pub int64_value: i64,
    pub int64_array_value: *const i64,
    pub float_value: f32,
    pub bool_value: bool,
}

#[repr(C)]
pub struct PJRT_NamedValue {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub name: *const c_char,
    pub name_size: usize,
    pub type_: PJRT_NamedValue_Type,
    pub value: PJRT_NamedValue_Value,
    /// Number of elements for strings and lists, 1 for scalars.
    pub value_size: usize,
}

// ------------------------------------------------------------------ plugin

#[repr(C)]
pub struct PJRT_Plugin_Initialize_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
}

#[repr(C)]
pub struct PJRT_Plugin_Attributes_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub attributes: *const PJRT_NamedValue,
    pub num_attributes: usize,
}

// ------------------------------------------------------------------ events

#[repr(C)]
pub struct PJRT_Event_Destroy_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub event: *mut PJRT_Event,
}

#[repr(C)]
pub struct PJRT_Event_Await_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub event: *mut PJRT_Event,
}

// ------------------------------------------------------------------ client

#[repr(C)]
pub struct PJRT_Client_Create_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub create_options: *const PJRT_NamedValue,
    pub num_options: usize,
    pub kv_get_callback: Unused,
    pub kv_get_user_arg: *mut c_void,
    pub kv_put_callback: Unused,
    pub kv_put_user_arg: *mut c_void,
    pub client: *mut PJRT_Client,
    pub kv_try_get_callback: Unused,
    pub kv_try_get_user_arg: *mut c_void,
}

#[repr(C)]
pub struct PJRT_Client_Destroy_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub client: *mut PJRT_Client,
}

/// Shared shape of `PJRT_Client_PlatformName_Args` and `PJRT_Client_PlatformVersion_Args`.
#[repr(C)]
pub struct PJRT_Client_String_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub client: *mut PJRT_Client,
    pub value: *const c_char,
    pub value_size: usize,
}

#[repr(C)]
pub struct PJRT_Client_AddressableDevices_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub client: *mut PJRT_Client,
    pub addressable_devices: *const *mut PJRT_Device,
    pub num_addressable_devices: usize,
}

#[repr(C)]
pub struct PJRT_Program {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    /// Not written by the compile calls despite the non-const C type.
    pub code: *mut c_char,
    pub code_size: usize,
    pub format: *const c_char,
    pub format_size: usize,
}

#[repr(C)]
pub struct PJRT_Client_Compile_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub client: *mut PJRT_Client,
    pub program: *const PJRT_Program,
    pub compile_options: *const c_char,
    pub compile_options_size: usize,
    pub executable: *mut PJRT_LoadedExecutable,
}

pub type PJRT_Buffer_Type = c_int;

pub type PJRT_HostBufferSemantics = c_int;
pub const PJRT_HostBufferSemantics_kImmutableOnlyDuringCall: PJRT_HostBufferSemantics = 0;
pub const PJRT_HostBufferSemantics_kImmutableUntilTransferCompletes: PJRT_HostBufferSemantics = 1;
/// The buffer may alias the host memory until it is destroyed (`done_with_host_buffer` fires
/// then); plugins that cannot alias copy instead.
pub const PJRT_HostBufferSemantics_kImmutableZeroCopy: PJRT_HostBufferSemantics = 2;

pub type PJRT_Buffer_MemoryLayout_Type = c_int;
pub const PJRT_Buffer_MemoryLayout_Type_Tiled: PJRT_Buffer_MemoryLayout_Type = 0;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct PJRT_Buffer_MemoryLayout_Tiled {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub minor_to_major: *const i64,
    pub minor_to_major_size: usize,
    pub tile_dims: *const i64,
    pub tile_dim_sizes: *const usize,
    pub num_tiles: usize,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct PJRT_Buffer_MemoryLayout_Strides {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub byte_strides: *const i64,
    pub num_byte_strides: usize,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub union PJRT_Buffer_MemoryLayout_Union {
    pub tiled: PJRT_Buffer_MemoryLayout_Tiled,
    pub strides: PJRT_Buffer_MemoryLayout_Strides,
}

#[repr(C)]
pub struct PJRT_Buffer_MemoryLayout {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub layout: PJRT_Buffer_MemoryLayout_Union,
    pub type_: PJRT_Buffer_MemoryLayout_Type,
}

#[repr(C)]
pub struct PJRT_Client_BufferFromHostBuffer_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub client: *mut PJRT_Client,
    pub data: *const c_void,
    pub type_: PJRT_Buffer_Type,
    pub dims: *const i64,
    pub num_dims: usize,
    pub byte_strides: *const i64,
    pub num_byte_strides: usize,
    pub host_buffer_semantics: PJRT_HostBufferSemantics,
    pub device: *mut PJRT_Device,
    pub memory: *mut PJRT_Memory,
    pub device_layout: *mut PJRT_Buffer_MemoryLayout,
    pub done_with_host_buffer: *mut PJRT_Event,
    pub buffer: *mut PJRT_Buffer,
}

// ------------------------------------------------------------------ devices

#[repr(C)]
pub struct PJRT_DeviceDescription_Id_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub device_description: *mut PJRT_DeviceDescription,
    pub id: c_int,
}

#[repr(C)]
pub struct PJRT_DeviceDescription_ProcessIndex_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub device_description: *mut PJRT_DeviceDescription,
    pub process_index: c_int,
}

/// Shared shape of `PJRT_DeviceDescription_Kind_Args`, `_DebugString_Args`, `_ToString_Args`.
#[repr(C)]
pub struct PJRT_DeviceDescription_String_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub device_description: *mut PJRT_DeviceDescription,
    pub value: *const c_char,
    pub value_size: usize,
}

#[repr(C)]
pub struct PJRT_Device_GetDescription_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub device: *mut PJRT_Device,
    pub device_description: *mut PJRT_DeviceDescription,
}

#[repr(C)]
pub struct PJRT_Device_LocalHardwareId_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub device: *mut PJRT_Device,
    pub local_hardware_id: c_int,
}

// ------------------------------------------------------------------ executables

#[repr(C)]
pub struct PJRT_Executable_Destroy_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub executable: *mut PJRT_Executable,
}

#[repr(C)]
pub struct PJRT_LoadedExecutable_Destroy_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub executable: *mut PJRT_LoadedExecutable,
}

#[repr(C)]
pub struct PJRT_LoadedExecutable_GetExecutable_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub loaded_executable: *mut PJRT_LoadedExecutable,
    pub executable: *mut PJRT_Executable,
}

/// Shared shape of `PJRT_Executable_Name_Args` and `PJRT_Executable_Fingerprint_Args`.
#[repr(C)]
pub struct PJRT_Executable_String_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub executable: *mut PJRT_Executable,
    pub value: *const c_char,
    pub value_size: usize,
}

/// Shared shape of `PJRT_Executable_NumReplicas_Args`, `_NumPartitions_Args` and
/// `_NumOutputs_Args`.
#[repr(C)]
pub struct PJRT_Executable_Count_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub executable: *mut PJRT_Executable,
    pub count: usize,
}

#[repr(C)]
pub struct PJRT_LoadedExecutable_AddressableDevices_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub executable: *mut PJRT_LoadedExecutable,
    pub addressable_devices: *const *mut PJRT_Device,
    pub num_addressable_devices: usize,
}

#[repr(C)]
pub struct PJRT_ExecuteOptions {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub send_callbacks: *mut *mut c_void,
    pub recv_callbacks: *mut *mut c_void,
    pub num_send_ops: usize,
    pub num_recv_ops: usize,
    pub launch_id: c_int,
    pub non_donatable_input_indices: *const i64,
    pub num_non_donatable_input_indices: usize,
    pub context: *mut PJRT_ExecuteContext,
    pub call_location: *const c_char,
    pub num_tasks: usize,
    pub task_ids: *mut c_int,
    pub incarnation_ids: *mut i64,
}

#[repr(C)]
pub struct PJRT_LoadedExecutable_Execute_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub executable: *mut PJRT_LoadedExecutable,
    pub options: *mut PJRT_ExecuteOptions,
    /// `[num_devices][num_args]`.
    pub argument_lists: *const *const *mut PJRT_Buffer,
    pub num_devices: usize,
    pub num_args: usize,
    /// `[num_devices][num_outputs]`, allocated by the caller, filled by the plugin.
    pub output_lists: *const *mut *mut PJRT_Buffer,
    /// `[num_devices]`, filled by the plugin when non-null.
    pub device_complete_events: *mut *mut PJRT_Event,
    pub execute_device: *mut PJRT_Device,
}

#[repr(C)]
pub struct PJRT_Executable_GetCostAnalysis_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub executable: *mut PJRT_Executable,
    pub num_properties: usize,
    pub properties: *const PJRT_NamedValue,
}

#[repr(C)]
pub struct PJRT_Executable_GetCompiledMemoryStats_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub executable: *mut PJRT_Executable,
    pub generated_code_size_in_bytes: i64,
    pub argument_size_in_bytes: i64,
    pub output_size_in_bytes: i64,
    pub alias_size_in_bytes: i64,
    pub temp_size_in_bytes: i64,
    pub host_generated_code_size_in_bytes: i64,
    pub host_argument_size_in_bytes: i64,
    pub host_output_size_in_bytes: i64,
    pub host_alias_size_in_bytes: i64,
    pub host_temp_size_in_bytes: i64,
    pub peak_memory_in_bytes: i64,
}

#[repr(C)]
pub struct PJRT_Executable_OutputElementTypes_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub executable: *mut PJRT_Executable,
    pub output_types: *mut PJRT_Buffer_Type,
    pub num_output_types: usize,
}

#[repr(C)]
pub struct PJRT_Executable_OutputDimensions_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub executable: *mut PJRT_Executable,
    pub num_outputs: usize,
    /// Concatenated dimensions of all outputs.
    pub dims: *const i64,
    /// `[num_outputs]`: the rank of each output.
    pub dim_sizes: *const usize,
}

pub type SerializedExecutableDeleter = Option<unsafe extern "C" fn(*mut PJRT_SerializedExecutable)>;

#[repr(C)]
pub struct PJRT_Executable_Serialize_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub executable: *const PJRT_Executable,
    pub serialized_bytes: *const c_char,
    pub serialized_bytes_size: usize,
    pub serialized_executable: *mut PJRT_SerializedExecutable,
    pub serialized_executable_deleter: SerializedExecutableDeleter,
}

#[repr(C)]
pub struct PJRT_Executable_DeserializeAndLoad_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub client: *mut PJRT_Client,
    pub serialized_executable: *const c_char,
    pub serialized_executable_size: usize,
    pub loaded_executable: *mut PJRT_LoadedExecutable,
    pub overridden_serialized_compile_options: *const c_char,
    pub overridden_serialized_compile_options_size: usize,
}

// ------------------------------------------------------------------ buffers

#[repr(C)]
pub struct PJRT_Buffer_Destroy_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub buffer: *mut PJRT_Buffer,
}

#[repr(C)]
pub struct PJRT_Buffer_ElementType_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub buffer: *mut PJRT_Buffer,
    pub type_: PJRT_Buffer_Type,
}

#[repr(C)]
pub struct PJRT_Buffer_Dimensions_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub buffer: *mut PJRT_Buffer,
    pub dims: *const i64,
    pub num_dims: usize,
}

#[repr(C)]
pub struct PJRT_Buffer_GetMemoryLayout_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub buffer: *mut PJRT_Buffer,
    /// Owned by the buffer.
    pub layout: PJRT_Buffer_MemoryLayout,
}

#[repr(C)]
pub struct PJRT_Buffer_OnDeviceSizeInBytes_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub buffer: *mut PJRT_Buffer,
    pub on_device_size_in_bytes: usize,
}

#[repr(C)]
pub struct PJRT_Buffer_IsOnCpu_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub buffer: *mut PJRT_Buffer,
    pub is_on_cpu: bool,
}

#[repr(C)]
pub struct PJRT_Buffer_ReadyEvent_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub buffer: *mut PJRT_Buffer,
    /// The caller destroys it.
    pub event: *mut PJRT_Event,
}

#[repr(C)]
pub struct PJRT_Buffer_UnsafePointer_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub buffer: *mut PJRT_Buffer,
    pub buffer_pointer: usize,
}

#[repr(C)]
pub struct PJRT_Buffer_ToHostBuffer_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub src: *mut PJRT_Buffer,
    pub host_layout: *mut PJRT_Buffer_MemoryLayout,
    pub dst: *mut c_void,
    pub dst_size: usize,
    pub event: *mut PJRT_Event,
}

// ------------------------------------------------------------------ topology

#[repr(C)]
pub struct PJRT_TopologyDescription_Create_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub topology_name: *const c_char,
    pub topology_name_size: usize,
    pub create_options: *const PJRT_NamedValue,
    pub num_options: usize,
    pub topology: *mut PJRT_TopologyDescription,
}

#[repr(C)]
pub struct PJRT_TopologyDescription_Destroy_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub topology: *mut PJRT_TopologyDescription,
}

/// Shared shape of `PJRT_TopologyDescription_PlatformName_Args` and `_PlatformVersion_Args`.
#[repr(C)]
pub struct PJRT_TopologyDescription_String_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub topology: *mut PJRT_TopologyDescription,
    pub value: *const c_char,
    pub value_size: usize,
}

#[repr(C)]
pub struct PJRT_TopologyDescription_GetDeviceDescriptions_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub topology: *mut PJRT_TopologyDescription,
    pub descriptions: *const *mut PJRT_DeviceDescription,
    pub num_descriptions: usize,
}

pub type SerializedTopologyDeleter = Option<unsafe extern "C" fn(*mut PJRT_SerializedTopology)>;

#[repr(C)]
pub struct PJRT_TopologyDescription_Serialize_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub topology: *mut PJRT_TopologyDescription,
    pub serialized_bytes: *const c_char,
    pub serialized_bytes_size: usize,
    pub serialized_topology: *mut PJRT_SerializedTopology,
    pub serialized_topology_deleter: SerializedTopologyDeleter,
}

#[repr(C)]
pub struct PJRT_Compile_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub topology: *const PJRT_TopologyDescription,
    pub program: *const PJRT_Program,
    pub compile_options: *const c_char,
    pub compile_options_size: usize,
    pub client: *mut PJRT_Client,
    pub executable: *mut PJRT_Executable,
}

args!(
    PJRT_Error_Destroy_Args => error,
    PJRT_Error_Message_Args => message_size,
    PJRT_Error_GetCode_Args => code,
    PJRT_Plugin_Initialize_Args => extension_start,
    PJRT_Plugin_Attributes_Args => num_attributes,
    PJRT_Event_Destroy_Args => event,
    PJRT_Event_Await_Args => event,
    PJRT_Client_Create_Args => kv_try_get_user_arg,
    PJRT_Client_Destroy_Args => client,
    PJRT_Client_String_Args => value_size,
    PJRT_Client_AddressableDevices_Args => num_addressable_devices,
    PJRT_Program => format_size,
    PJRT_Client_Compile_Args => executable,
    PJRT_Buffer_MemoryLayout => type_,
    PJRT_Buffer_MemoryLayout_Tiled => num_tiles,
    PJRT_Client_BufferFromHostBuffer_Args => buffer,
    PJRT_DeviceDescription_Id_Args => id,
    PJRT_DeviceDescription_ProcessIndex_Args => process_index,
    PJRT_DeviceDescription_String_Args => value_size,
    PJRT_Device_GetDescription_Args => device_description,
    PJRT_Device_LocalHardwareId_Args => local_hardware_id,
    PJRT_Executable_Destroy_Args => executable,
    PJRT_LoadedExecutable_Destroy_Args => executable,
    PJRT_LoadedExecutable_GetExecutable_Args => executable,
    PJRT_Executable_String_Args => value_size,
    PJRT_Executable_Count_Args => count,
    PJRT_LoadedExecutable_AddressableDevices_Args => num_addressable_devices,
    PJRT_ExecuteOptions => incarnation_ids,
    PJRT_LoadedExecutable_Execute_Args => execute_device,
    PJRT_Executable_GetCostAnalysis_Args => properties,
    PJRT_Executable_GetCompiledMemoryStats_Args => peak_memory_in_bytes,
    PJRT_Executable_OutputElementTypes_Args => num_output_types,
    PJRT_Executable_OutputDimensions_Args => dim_sizes,
    PJRT_Executable_Serialize_Args => serialized_executable_deleter,
    PJRT_Executable_DeserializeAndLoad_Args => overridden_serialized_compile_options_size,
    PJRT_Buffer_Destroy_Args => buffer,
    PJRT_Buffer_ElementType_Args => type_,
    PJRT_Buffer_Dimensions_Args => num_dims,
    PJRT_Buffer_ToHostBuffer_Args => event,
    PJRT_Buffer_GetMemoryLayout_Args => layout,
    PJRT_Buffer_OnDeviceSizeInBytes_Args => on_device_size_in_bytes,
    PJRT_Buffer_IsOnCpu_Args => is_on_cpu,
    PJRT_Buffer_ReadyEvent_Args => event,
    PJRT_Buffer_UnsafePointer_Args => buffer_pointer,
    PJRT_TopologyDescription_Create_Args => topology,
    PJRT_TopologyDescription_Destroy_Args => topology,
    PJRT_TopologyDescription_String_Args => value_size,
    PJRT_TopologyDescription_GetDeviceDescriptions_Args => num_descriptions,
    PJRT_TopologyDescription_Serialize_Args => serialized_topology_deleter,
    PJRT_Compile_Args => executable,
    PJRT_NamedValue => value_size,
);

// ------------------------------------------------------------------ the function table

/// A PJRT function: takes a pointer to its argument struct, returns null or an error.
pub type Fn<A> = Option<unsafe extern "C" fn(args: *mut A) -> *mut PJRT_Error>;
/// A PJRT function that returns nothing (only the two error accessors).
pub type VoidFn<A> = Option<unsafe extern "C" fn(args: *mut A)>;
/// A table entry tpuc never calls; declared only to keep later offsets right.
pub type Unused = Option<unsafe extern "C" fn()>;

/// `GetPjrtApi`, the one symbol a plugin exports.
pub type GetPjrtApiFn = unsafe extern "C" fn() -> *const PJRT_Api;

/// The `PJRT_Api` function table, in 0.81 order. A plugin's table may be shorter (its
/// `struct_size` says how long); `sys` never reads an entry past it.
#[repr(C)]
pub struct PJRT_Api {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub pjrt_api_version: PJRT_Api_Version,

    pub PJRT_Error_Destroy: VoidFn<PJRT_Error_Destroy_Args>,
    pub PJRT_Error_Message: VoidFn<PJRT_Error_Message_Args>,
    pub PJRT_Error_GetCode: Fn<PJRT_Error_GetCode_Args>,

    pub PJRT_Plugin_Initialize: Fn<PJRT_Plugin_Initialize_Args>,
    pub PJRT_Plugin_Attributes: Fn<PJRT_Plugin_Attributes_Args>,

    pub PJRT_Event_Destroy: Fn<PJRT_Event_Destroy_Args>,
    pub PJRT_Event_IsReady: Unused,
    pub PJRT_Event_Error: Unused,
    pub PJRT_Event_Await: Fn<PJRT_Event_Await_Args>,
    pub PJRT_Event_OnReady: Unused,

    pub PJRT_Client_Create: Fn<PJRT_Client_Create_Args>,
    pub PJRT_Client_Destroy: Fn<PJRT_Client_Destroy_Args>,
    pub PJRT_Client_PlatformName: Fn<PJRT_Client_String_Args>,
    pub PJRT_Client_ProcessIndex: Unused,
    pub PJRT_Client_PlatformVersion: Fn<PJRT_Client_String_Args>,
    pub PJRT_Client_Devices: Unused,
    pub PJRT_Client_AddressableDevices: Fn<PJRT_Client_AddressableDevices_Args>,
    pub PJRT_Client_LookupDevice: Unused,
    pub PJRT_Client_LookupAddressableDevice: Unused,
    pub PJRT_Client_AddressableMemories: Unused,
    pub PJRT_Client_Compile: Fn<PJRT_Client_Compile_Args>,
    pub PJRT_Client_DefaultDeviceAssignment: Unused,
    pub PJRT_Client_BufferFromHostBuffer: Fn<PJRT_Client_BufferFromHostBuffer_Args>,

    pub PJRT_DeviceDescription_Id: Fn<PJRT_DeviceDescription_Id_Args>,
    pub PJRT_DeviceDescription_ProcessIndex: Fn<PJRT_DeviceDescription_ProcessIndex_Args>,
    pub PJRT_DeviceDescription_Attributes: Unused,
    pub PJRT_DeviceDescription_Kind: Fn<PJRT_DeviceDescription_String_Args>,
    pub PJRT_DeviceDescription_DebugString: Fn<PJRT_DeviceDescription_String_Args>,
    pub PJRT_DeviceDescription_ToString: Fn<PJRT_DeviceDescription_String_Args>,

    pub PJRT_Device_GetDescription: Fn<PJRT_Device_GetDescription_Args>,
    pub PJRT_Device_IsAddressable: Unused,
    pub PJRT_Device_LocalHardwareId: Fn<PJRT_Device_LocalHardwareId_Args>,
    pub PJRT_Device_AddressableMemories: Unused,
    pub PJRT_Device_DefaultMemory: Unused,
    pub PJRT_Device_MemoryStats: Unused,

    pub PJRT_Memory_Id: Unused,
    pub PJRT_Memory_Kind: Unused,
    pub PJRT_Memory_DebugString: Unused,
    pub PJRT_Memory_ToString: Unused,
    pub PJRT_Memory_AddressableByDevices: Unused,

    pub PJRT_Executable_Destroy: Fn<PJRT_Executable_Destroy_Args>,
    pub PJRT_Executable_Name: Fn<PJRT_Executable_String_Args>,
    pub PJRT_Executable_NumReplicas: Fn<PJRT_Executable_Count_Args>,
    pub PJRT_Executable_NumPartitions: Fn<PJRT_Executable_Count_Args>,
    pub PJRT_Executable_NumOutputs: Fn<PJRT_Executable_Count_Args>,
    pub PJRT_Executable_SizeOfGeneratedCodeInBytes: Unused,
    pub PJRT_Executable_GetCostAnalysis: Fn<PJRT_Executable_GetCostAnalysis_Args>,
    pub PJRT_Executable_OutputMemoryKinds: Unused,
    pub PJRT_Executable_OptimizedProgram: Unused,
    pub PJRT_Executable_Serialize: Fn<PJRT_Executable_Serialize_Args>,

    pub PJRT_LoadedExecutable_Destroy: Fn<PJRT_LoadedExecutable_Destroy_Args>,
    pub PJRT_LoadedExecutable_GetExecutable: Fn<PJRT_LoadedExecutable_GetExecutable_Args>,
    pub PJRT_LoadedExecutable_AddressableDevices: Fn<PJRT_LoadedExecutable_AddressableDevices_Args>,
    pub PJRT_LoadedExecutable_Delete: Unused,
    pub PJRT_LoadedExecutable_IsDeleted: Unused,
    pub PJRT_LoadedExecutable_Execute: Fn<PJRT_LoadedExecutable_Execute_Args>,
    pub PJRT_Executable_DeserializeAndLoad: Fn<PJRT_Executable_DeserializeAndLoad_Args>,
    pub PJRT_LoadedExecutable_Fingerprint: Unused,

    pub PJRT_Buffer_Destroy: Fn<PJRT_Buffer_Destroy_Args>,
    pub PJRT_Buffer_ElementType: Fn<PJRT_Buffer_ElementType_Args>,
    pub PJRT_Buffer_Dimensions: Fn<PJRT_Buffer_Dimensions_Args>,
    pub PJRT_Buffer_UnpaddedDimensions: Unused,
    pub PJRT_Buffer_DynamicDimensionIndices: Unused,
    pub PJRT_Buffer_GetMemoryLayout: Fn<PJRT_Buffer_GetMemoryLayout_Args>,
    pub PJRT_Buffer_OnDeviceSizeInBytes: Fn<PJRT_Buffer_OnDeviceSizeInBytes_Args>,
    pub PJRT_Buffer_Device: Unused,
    pub PJRT_Buffer_Memory: Unused,
    pub PJRT_Buffer_Delete: Unused,
    pub PJRT_Buffer_IsDeleted: Unused,
    pub PJRT_Buffer_CopyToDevice: Unused,
    pub PJRT_Buffer_ToHostBuffer: Fn<PJRT_Buffer_ToHostBuffer_Args>,
    pub PJRT_Buffer_IsOnCpu: Fn<PJRT_Buffer_IsOnCpu_Args>,
    pub PJRT_Buffer_ReadyEvent: Fn<PJRT_Buffer_ReadyEvent_Args>,
    pub PJRT_Buffer_UnsafePointer: Fn<PJRT_Buffer_UnsafePointer_Args>,
    pub PJRT_Buffer_IncreaseExternalReferenceCount: Unused,
    pub PJRT_Buffer_DecreaseExternalReferenceCount: Unused,
    pub PJRT_Buffer_OpaqueDeviceMemoryDataPointer: Unused,

    pub PJRT_CopyToDeviceStream_Destroy: Unused,
    pub PJRT_CopyToDeviceStream_AddChunk: Unused,
    pub PJRT_CopyToDeviceStream_TotalBytes: Unused,
    pub PJRT_CopyToDeviceStream_GranuleSize: Unused,
    pub PJRT_CopyToDeviceStream_CurrentBytes: Unused,

    pub PJRT_TopologyDescription_Create: Fn<PJRT_TopologyDescription_Create_Args>,
    pub PJRT_TopologyDescription_Destroy: Fn<PJRT_TopologyDescription_Destroy_Args>,
    pub PJRT_TopologyDescription_PlatformName: Fn<PJRT_TopologyDescription_String_Args>,
    pub PJRT_TopologyDescription_PlatformVersion: Fn<PJRT_TopologyDescription_String_Args>,
    pub PJRT_TopologyDescription_GetDeviceDescriptions:
        Fn<PJRT_TopologyDescription_GetDeviceDescriptions_Args>,
    pub PJRT_TopologyDescription_Serialize: Fn<PJRT_TopologyDescription_Serialize_Args>,
    pub PJRT_TopologyDescription_Attributes: Unused,

    pub PJRT_Compile: Fn<PJRT_Compile_Args>,

    // Appended after the first layout; each may be missing from an older plugin's table.
    pub PJRT_Executable_OutputElementTypes: Fn<PJRT_Executable_OutputElementTypes_Args>,
    pub PJRT_Executable_OutputDimensions: Fn<PJRT_Executable_OutputDimensions_Args>,
    pub PJRT_Buffer_CopyToMemory: Unused,
    pub PJRT_Client_CreateViewOfDeviceBuffer: Unused,
    pub PJRT_Executable_Fingerprint: Fn<PJRT_Executable_String_Args>,
    pub PJRT_Client_TopologyDescription: Unused,
    pub PJRT_Executable_GetCompiledMemoryStats: Fn<PJRT_Executable_GetCompiledMemoryStats_Args>,
    // Later entries (PJRT_Memory_Kind_Id onwards) are not used and not declared.
}

/// The `PJRT_Buffer_Type` values (a C enum counted from 0), as far as tpuc names them.
pub mod buffer_type {
    use super::PJRT_Buffer_Type;
    pub const INVALID: PJRT_Buffer_Type = 0;
    pub const PRED: PJRT_Buffer_Type = 1;
    pub const S8: PJRT_Buffer_Type = 2;
    pub const S16: PJRT_Buffer_Type = 3;
    pub const S32: PJRT_Buffer_Type = 4;
    pub const S64: PJRT_Buffer_Type = 5;
    pub const U8: PJRT_Buffer_Type = 6;
    pub const U16: PJRT_Buffer_Type = 7;
    pub const U32: PJRT_Buffer_Type = 8;
    pub const U64: PJRT_Buffer_Type = 9;
    pub const F16: PJRT_Buffer_Type = 10;
    pub const F32: PJRT_Buffer_Type = 11;
    pub const F64: PJRT_Buffer_Type = 12;
    pub const BF16: PJRT_Buffer_Type = 13;
    pub const C64: PJRT_Buffer_Type = 14;
    pub const C128: PJRT_Buffer_Type = 15;
    pub const F8E5M2: PJRT_Buffer_Type = 16;
    pub const F8E4M3FN: PJRT_Buffer_Type = 17;
    pub const F8E4M3B11FNUZ: PJRT_Buffer_Type = 18;
    pub const F8E5M2FNUZ: PJRT_Buffer_Type = 19;
    pub const F8E4M3FNUZ: PJRT_Buffer_Type = 20;
    pub const S4: PJRT_Buffer_Type = 21;
    pub const U4: PJRT_Buffer_Type = 22;
    pub const TOKEN: PJRT_Buffer_Type = 23;
    pub const S2: PJRT_Buffer_Type = 24;
    pub const U2: PJRT_Buffer_Type = 25;
    pub const F8E4M3: PJRT_Buffer_Type = 26;
    pub const F8E3M4: PJRT_Buffer_Type = 27;
    pub const F8E8M0FNU: PJRT_Buffer_Type = 28;
    pub const F4E2M1FN: PJRT_Buffer_Type = 29;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    // Expected values worked out by hand from the 0.81 header on x86-64 / aarch64 (LP64).
    #[test]
    fn struct_sizes_match_the_0_81_layout() {
        assert_eq!(size_of::<PJRT_Api_Version>(), 24);
        assert_eq!(size_of::<PJRT_NamedValue>(), 56);
        assert_eq!(offset_of!(PJRT_NamedValue, value), 40);
        assert_eq!(PJRT_Client_Create_Args::struct_size(), 88);
        assert_eq!(PJRT_Program::struct_size(), 48);
        assert_eq!(PJRT_Client_Compile_Args::struct_size(), 56);
        assert_eq!(size_of::<PJRT_Buffer_MemoryLayout_Tiled>(), 56);
        assert_eq!(PJRT_Buffer_MemoryLayout::struct_size(), 76);
        assert_eq!(size_of::<PJRT_Buffer_MemoryLayout>(), 80);
        assert_eq!(PJRT_Client_BufferFromHostBuffer_Args::struct_size(), 120);
        assert_eq!(
            offset_of!(PJRT_Client_BufferFromHostBuffer_Args, host_buffer_semantics),
            72
        );
        assert_eq!(PJRT_ExecuteOptions::struct_size(), 112);
        assert_eq!(PJRT_Buffer_GetMemoryLayout_Args::struct_size(), 104);
        assert_eq!(PJRT_Buffer_IsOnCpu_Args::struct_size(), 25);
        assert_eq!(PJRT_Buffer_UnsafePointer_Args::struct_size(), 32);
        assert_eq!(PJRT_Buffer_ReadyEvent_Args::struct_size(), 32);
        assert_eq!(PJRT_Buffer_OnDeviceSizeInBytes_Args::struct_size(), 32);
        assert_eq!(PJRT_LoadedExecutable_Execute_Args::struct_size(), 80);
        assert_eq!(
            PJRT_Executable_GetCompiledMemoryStats_Args::struct_size(),
            112
        );
        assert_eq!(PJRT_Executable_DeserializeAndLoad_Args::struct_size(), 64);
        assert_eq!(PJRT_Compile_Args::struct_size(), 64);
        assert_eq!(PJRT_Error_GetCode_Args::struct_size(), 28);
        assert_eq!(PJRT_DeviceDescription_Id_Args::struct_size(), 28);
        assert_eq!(PJRT_Buffer_ToHostBuffer_Args::struct_size(), 56);
        assert_eq!(PJRT_TopologyDescription_Create_Args::struct_size(), 56);
    }

    #[test]
    fn function_table_offsets() {
        let slot = |n: usize| 40 + 8 * n;
        assert_eq!(offset_of!(PJRT_Api, PJRT_Error_Destroy), slot(0));
        assert_eq!(offset_of!(PJRT_Api, PJRT_Plugin_Initialize), slot(3));
        assert_eq!(offset_of!(PJRT_Api, PJRT_Client_Create), slot(10));
        assert_eq!(
            offset_of!(PJRT_Api, PJRT_Client_BufferFromHostBuffer),
            slot(22)
        );
        assert_eq!(offset_of!(PJRT_Api, PJRT_DeviceDescription_Id), slot(23));
        assert_eq!(offset_of!(PJRT_Api, PJRT_Executable_Destroy), slot(40));
        assert_eq!(
            offset_of!(PJRT_Api, PJRT_LoadedExecutable_Destroy),
            slot(50)
        );
        assert_eq!(offset_of!(PJRT_Api, PJRT_Buffer_Destroy), slot(58));
        assert_eq!(offset_of!(PJRT_Api, PJRT_Buffer_GetMemoryLayout), slot(63));
        assert_eq!(
            offset_of!(PJRT_Api, PJRT_Buffer_OnDeviceSizeInBytes),
            slot(64)
        );
        assert_eq!(offset_of!(PJRT_Api, PJRT_Buffer_IsOnCpu), slot(71));
        assert_eq!(offset_of!(PJRT_Api, PJRT_Buffer_ReadyEvent), slot(72));
        assert_eq!(offset_of!(PJRT_Api, PJRT_Buffer_UnsafePointer), slot(73));
        assert_eq!(
            offset_of!(PJRT_Api, PJRT_TopologyDescription_Create),
            slot(82)
        );
        assert_eq!(offset_of!(PJRT_Api, PJRT_Compile), slot(89));
        assert_eq!(
            offset_of!(PJRT_Api, PJRT_Executable_GetCompiledMemoryStats),
            slot(96)
        );
    }
}
