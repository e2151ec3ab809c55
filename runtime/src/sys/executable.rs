//! Executables: `RawExecutable`, an owned compiled program (its outputs, costs, serialized
//! form), and `RawLoaded`, one loaded onto a client's devices, which runs it.

use std::ptr::{self, NonNull};
use std::sync::Arc;

use super::api::Api;
use super::args::{copy_slice, copy_string, Padded};
use super::buffer::RawBuffer;
use super::client::RawClient;
use super::device::DevicePtr;
use super::event::RawEvent;
use super::live::Live;
use super::named_values::read_named_values;
use super::topology::RawTopology;
use crate::error::{Error, Result};
use crate::ffi;
use crate::types::{CompiledMemoryStats, NamedValue};

/// What an executable must not outlive.
pub(super) enum Owner {
    Topology(#[allow(dead_code)] Arc<RawTopology>),
    Loaded(#[allow(dead_code)] Arc<RawLoaded>),
}

pub(crate) struct RawExecutable {
    pub(super) api: &'static Api,
    pub(super) ptr: NonNull<ffi::PJRT_Executable>,
    pub(super) _owner: Owner,
    pub(super) _live: Live,
}

// SAFETY: see the module docs (PjRtExecutable is immutable and thread-safe).
unsafe impl Send for RawExecutable {}
unsafe impl Sync for RawExecutable {}

destroy_on_drop!(RawExecutable, PJRT_Executable_Destroy_Args.executable, PJRT_Executable_Destroy);

impl RawExecutable {
    getter!(name -> String = PJRT_Executable_Name(PJRT_Executable_String_Args.executable));
    getter!(fingerprint -> String = PJRT_Executable_Fingerprint(PJRT_Executable_String_Args.executable));
    getter!(num_outputs -> usize = PJRT_Executable_NumOutputs(PJRT_Executable_Count_Args.executable));
    getter!(num_replicas -> usize = PJRT_Executable_NumReplicas(PJRT_Executable_Count_Args.executable));
    getter!(num_partitions -> usize = PJRT_Executable_NumPartitions(PJRT_Executable_Count_Args.executable));

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
    pub(super) api: &'static Api,
    pub(super) ptr: NonNull<ffi::PJRT_LoadedExecutable>,
    pub(super) client: Arc<RawClient>,
    pub(super) _live: Live,
}

// SAFETY: see the module docs (PjRtLoadedExecutable::Execute is thread-safe).
unsafe impl Send for RawLoaded {}
unsafe impl Sync for RawLoaded {}

destroy_on_drop!(RawLoaded, PJRT_LoadedExecutable_Destroy_Args.executable, PJRT_LoadedExecutable_Destroy);

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
    /// `donated[i]`: argument `i` may be donated to an output it is aliased with (the caller
    /// drops it afterwards); the others are never donated.
    pub(crate) fn execute(
        &self,
        args: &[&RawBuffer],
        donated: &[bool],
        num_outputs: usize,
    ) -> Result<Vec<RawBuffer>> {
        let mut per_device = self.execute_on_devices(&[args.to_vec()], donated, num_outputs)?;
        Ok(per_device.pop().unwrap_or_default())
    }

    /// Runs on every device of the executable at once, `args[d]` the arguments of device `d`
    /// (in [`RawLoaded::addressable_devices`] order), and waits for all of them. Returns the
    /// outputs of each device. `donated` as in [`RawLoaded::execute`], by argument position
    /// (the same on every device; empty: none).
    pub(crate) fn execute_on_devices(
        &self,
        args: &[Vec<&RawBuffer>],
        donated: &[bool],
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
        // Every argument not given up is marked non-donatable: a program with aliased
        // arguments then copies them instead of taking over a buffer its caller still holds.
        let keep: Vec<i64> = (0..num_args).filter(|&i| !donated.get(i).copied().unwrap_or(false)).map(|i| i as i64).collect();
        let mut options = Padded::<ffi::PJRT_ExecuteOptions>::new();
        options.non_donatable_input_indices = keep.as_ptr();
        options.num_non_donatable_input_indices = keep.len();

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
