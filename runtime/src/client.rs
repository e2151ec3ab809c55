//! Clients, their devices and device buffers.

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::executable::{LoadedExecutable, Program};
use crate::options::CompileOptions;
use crate::plugin::Plugin;
use crate::sys::{DevicePtr, HostMemory, RawBuffer, RawClient};
use crate::types::{DeviceDescription, ElementType, Shape};

/// A PJRT client: the devices of one plugin in this process. Cheap to clone (shared);
/// destroyed when the last clone, buffer and loaded executable of it are gone.
#[derive(Clone)]
pub struct Client {
    plugin: Plugin,
    raw: Arc<RawClient>,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("plugin", &self.plugin.path())
            .finish()
    }
}

impl Client {
    pub(crate) fn new(plugin: Plugin, raw: Arc<RawClient>) -> Client {
        Client { plugin, raw }
    }

    pub(crate) fn raw(&self) -> &Arc<RawClient> {
        &self.raw
    }

    /// The plugin this client belongs to.
    pub fn plugin(&self) -> Plugin {
        self.plugin
    }

    /// `cpu`, `tpu`, `cuda`...
    pub fn platform_name(&self) -> Result<String> {
        self.raw.platform_name()
    }

    /// Platform-specific version text (e.g. the libtpu or CUDA version).
    pub fn platform_version(&self) -> Result<String> {
        self.raw.platform_version()
    }

    /// The devices this client can run on, in the plugin's order.
    pub fn devices(&self) -> Result<Vec<Device>> {
        self.raw
            .addressable_devices()?
            .into_iter()
            .map(|ptr| self.device(ptr))
            .collect()
    }

    pub(crate) fn device(&self, ptr: DevicePtr) -> Result<Device> {
        let (description, local_hardware_id) = self.raw.device_info(ptr)?;
        Ok(Device {
            client: Arc::clone(&self.raw),
            ptr,
            description,
            local_hardware_id,
        })
    }

    /// Compiles a program for this client's devices (`PJRT_Client_Compile`).
    pub fn compile(
        &self,
        program: &Program<'_>,
        options: &CompileOptions,
    ) -> Result<LoadedExecutable> {
        let raw = self
            .raw
            .compile(program.code(), program.format(), &options.to_proto_bytes())?;
        LoadedExecutable::new(self.clone(), Arc::new(raw))
    }

    /// Loads an executable from [`crate::Executable::serialize`] bytes
    /// (`PJRT_Executable_DeserializeAndLoad`). The bytes must come from the same plugin build.
    pub fn deserialize(&self, serialized: &[u8]) -> Result<LoadedExecutable> {
        let raw = self.raw.deserialize_and_load(serialized)?;
        LoadedExecutable::new(self.clone(), Arc::new(raw))
    }

    /// Copies dense, row-major, little-endian host data to a device (the client's first device
    /// when `device` is `None`). Returns once the plugin no longer reads `data`.
    pub fn buffer_from_host(
        &self,
        data: &[u8],
        element_type: ElementType,
        dims: &[i64],
        device: Option<&Device>,
    ) -> Result<Buffer> {
        let raw = self.host_buffer(data, element_type, dims, device, false)?;
        Ok(Buffer { raw })
    }

    /// Like [`Client::buffer_from_host`], but the buffer may use `data` in place instead of a
    /// copy (the CPU plugin does when `data` is suitably aligned; other plugins copy). `data`
    /// stays borrowed until the buffer is dropped, which returns only once the plugin is done
    /// with it. For arguments of one execution: no copy and no wait for one.
    pub fn buffer_borrowing_host<'a>(
        &self,
        data: &'a [u8],
        element_type: ElementType,
        dims: &[i64],
        device: Option<&Device>,
    ) -> Result<BorrowedBuffer<'a>> {
        let raw = self.host_buffer(data, element_type, dims, device, true)?;
        Ok(BorrowedBuffer {
            buffer: Buffer { raw },
            _data: PhantomData,
        })
    }

    /// A buffer that reads `data`'s memory in place at every execution that takes it, for as
    /// long as the buffer lives; `None` when the plugin would hold a copy instead (memory that
    /// is not host memory, an alignment it does not take, an empty array). Whether it reads in
    /// place is asked of the buffer itself (its address), not assumed.
    ///
    /// A copy would be a snapshot: the values `data` had now, whatever happens to `data`
    /// later. An alias is never stale, which is what a caller needs for arrays that change
    /// behind its back (a tensor written through a path that leaves no trace).
    ///
    /// # Safety
    /// Unlike [`Client::buffer_borrowing_host`] the buffer outlives the borrow of `data`. The
    /// caller must make sure that whenever an execution that takes the buffer runs, the
    /// `data.len()` bytes at `data`'s address are live and hold the array, and that nothing
    /// writes them during that execution. Dropping the buffer is always safe.
    // An unsafe contract, not an unsafe call: the calls stay in `sys`.
    #[allow(unsafe_code)]
    pub unsafe fn buffer_aliasing_host(
        &self,
        data: &[u8],
        element_type: ElementType,
        dims: &[i64],
        device: Option<&Device>,
    ) -> Result<Option<Buffer>> {
        if data.is_empty() || !crate::transfers::host_aliasing() {
            return Ok(None);
        }
        let raw = self.host_buffer(data, element_type, dims, device, true)?;
        let in_place = raw.host_address(data.len())? == Some(data.as_ptr() as usize);
        Ok(in_place.then_some(Buffer { raw }))
    }

    fn host_buffer(
        &self,
        data: &[u8],
        element_type: ElementType,
        dims: &[i64],
        device: Option<&Device>,
        zero_copy: bool,
    ) -> Result<RawBuffer> {
        if let Some(&d) = dims.iter().find(|&&d| d < 0) {
            return Err(Error::InvalidArgument(format!(
                "negative dimension {d} in {dims:?}"
            )));
        }
        let count = dims
            .iter()
            .try_fold(1usize, |acc, &d| acc.checked_mul(d as usize));
        let expected = count.and_then(|c| c.checked_mul(element_type.size_in_bytes()));
        if expected != Some(data.len()) {
            return Err(Error::InvalidArgument(format!(
                "{} bytes given for a {dims:?} {element_type} array, which needs {}",
                data.len(),
                expected.map_or_else(|| "more than usize::MAX".to_string(), |e| e.to_string())
            )));
        }
        let ptr = match device {
            Some(d) if Arc::ptr_eq(&d.client, &self.raw) => d.ptr,
            Some(d) => {
                return Err(Error::InvalidArgument(format!(
                    "{} belongs to another client",
                    d.description.display
                )))
            }
            None => *self.raw.addressable_devices()?.first().ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "client of {} has no addressable device",
                    self.plugin.path().display()
                ))
            })?,
        };
        // Host memory is read in place only where allowed; a copy is a transfer.
        let zero_copy = zero_copy && crate::transfers::host_aliasing();
        let raw = self.raw.buffer_from_host(data, element_type.to_pjrt(), dims, ptr, zero_copy)?;
        let in_place = zero_copy && !data.is_empty() && raw.host_address(data.len())? == Some(data.as_ptr() as usize);
        if !in_place {
            crate::transfers::count_h2d(data.len());
        }
        Ok(raw)
    }
}

/// A [`Buffer`] that may use borrowed host memory in place (see
/// [`Client::buffer_borrowing_host`]); use it as a `&Buffer`.
pub struct BorrowedBuffer<'a> {
    buffer: Buffer,
    _data: PhantomData<&'a [u8]>,
}

impl std::ops::Deref for BorrowedBuffer<'_> {
    type Target = Buffer;
    fn deref(&self) -> &Buffer {
        &self.buffer
    }
}

impl fmt::Debug for BorrowedBuffer<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.buffer.fmt(f)
    }
}

/// One addressable device of a client.
#[derive(Clone)]
pub struct Device {
    client: Arc<RawClient>,
    ptr: DevicePtr,
    description: DeviceDescription,
    local_hardware_id: i32,
}

impl fmt::Debug for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Device")
            .field("id", &self.description.id)
            .field("kind", &self.description.kind)
            .field("local_hardware_id", &self.local_hardware_id)
            .finish()
    }
}

impl Device {
    /// Unique among the platform's devices.
    pub fn id(&self) -> i32 {
        self.description.id
    }

    /// Vendor string, e.g. `cpu`.
    pub fn kind(&self) -> &str {
        &self.description.kind
    }

    /// The plugin's device number on this host, -1 if it has none.
    pub fn local_hardware_id(&self) -> i32 {
        self.local_hardware_id
    }

    pub fn description(&self) -> &DeviceDescription {
        &self.description
    }
}

/// An array on a device. Freed when dropped; keeps its client alive.
pub struct Buffer {
    raw: RawBuffer,
}

impl fmt::Debug for Buffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.shape() {
            Ok(shape) => write!(f, "Buffer({shape})"),
            Err(_) => f.write_str("Buffer(?)"),
        }
    }
}

impl Buffer {
    pub(crate) fn from_raw(raw: RawBuffer) -> Buffer {
        Buffer { raw }
    }

    pub(crate) fn raw(&self) -> &RawBuffer {
        &self.raw
    }

    /// Element type and dimensions.
    pub fn shape(&self) -> Result<Shape> {
        let raw_type = self.raw.element_type()?;
        Ok(Shape {
            element_type: ElementType::from_pjrt(raw_type).ok_or(raw_type),
            dims: self.raw.dims()?,
        })
    }

    /// Where the array's bytes lie in this process's memory, when the plugin keeps them in host
    /// memory, dense and row-major (the CPU plugin); `None` on a device of its own. Valid while
    /// the buffer lives: for tests of donation and in-place reads.
    pub fn host_address(&self) -> Result<Option<usize>> {
        let dims = self.raw.dims()?;
        match dense_size(&self.raw, &dims)? {
            Some(n) => self.raw.host_address(n),
            None => Ok(None),
        }
    }

    /// Copies the array to a new dense, row-major `Vec<u8>` and waits for the copy (one
    /// device-to-host copy, straight into the vector).
    pub fn to_host(&self) -> Result<Vec<u8>> {
        let rank = self.raw.dims()?.len();
        let bytes = self.raw.to_host(rank)?;
        crate::transfers::count_d2h(bytes.len());
        Ok(bytes)
    }

    /// Moves arrays to the host: each in place when the plugin keeps it in host memory, dense
    /// and row-major (the CPU plugin: no copy, the buffer's memory is handed over) and host
    /// aliasing is on, copied otherwise, with all the copies in flight at once.
    pub fn into_host_all(buffers: Vec<Buffer>) -> Result<Vec<HostArray>> {
        let mut out: Vec<Option<HostArray>> = Vec::with_capacity(buffers.len());
        let mut copies = Vec::new();
        let in_place_allowed = crate::transfers::host_aliasing();
        for (i, b) in buffers.into_iter().enumerate() {
            let dims = b.raw.dims()?;
            let size = dense_size(&b.raw, &dims)?;
            let raw = match size.filter(|_| in_place_allowed) {
                Some(n) => match HostMemory::take(b.raw, n)? {
                    Ok(memory) => {
                        out.push(Some(HostArray(Host::InPlace(memory))));
                        continue;
                    }
                    Err(raw) => raw,
                },
                None => b.raw,
            };
            // The buffer stays alive until its copy has finished.
            let pending = raw.start_to_host(dims.len(), size)?;
            copies.push((i, pending, raw));
            out.push(None);
        }
        for (i, pending, _buffer) in copies {
            let bytes = pending.finish()?;
            crate::transfers::count_d2h(bytes.len());
            out[i] = Some(HostArray(Host::Copied(bytes)));
        }
        Ok(out
            .into_iter()
            .map(|a| a.expect("every array filled"))
            .collect())
    }
}

/// The dense row-major byte size of a buffer, when its element type has a whole byte size.
fn dense_size(raw: &RawBuffer, dims: &[i64]) -> Result<Option<usize>> {
    Ok(ElementType::from_pjrt(raw.element_type()?)
        .map(|t| t.size_in_bytes())
        .filter(|&n| n > 0)
        .and_then(|n| {
            dims.iter().try_fold(n, |acc, &d| {
                usize::try_from(d).ok().and_then(|d| acc.checked_mul(d))
            })
        }))
}

/// An array's dense, row-major bytes in host memory: either a device buffer's own memory
/// (kept alive by owning the buffer) or a copy.
pub struct HostArray(Host);

enum Host {
    InPlace(HostMemory),
    Copied(Vec<u8>),
}

impl From<Vec<u8>> for HostArray {
    /// Bytes assembled on the host (e.g. a result joined from several devices' pieces).
    fn from(bytes: Vec<u8>) -> Self {
        HostArray(Host::Copied(bytes))
    }
}

impl HostArray {
    /// True when the bytes are the device buffer's own memory (no copy was made).
    pub fn in_place(&self) -> bool {
        matches!(self.0, Host::InPlace(_))
    }

    pub fn len(&self) -> usize {
        self.as_slice().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn as_slice(&self) -> &[u8] {
        match &self.0 {
            Host::InPlace(m) => m.as_slice(),
            Host::Copied(v) => v,
        }
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        match &mut self.0 {
            Host::InPlace(m) => m.as_mut_slice(),
            Host::Copied(v) => v,
        }
    }

    /// The bytes as a vector (a copy only when they are in place).
    pub fn into_vec(self) -> Vec<u8> {
        match self.0 {
            Host::Copied(v) => v,
            Host::InPlace(m) => m.as_slice().to_vec(),
        }
    }
}

impl std::ops::Deref for HostArray {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl fmt::Debug for HostArray {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "HostArray({} bytes, {})",
            self.len(),
            if self.in_place() {
                "in place"
            } else {
                "copied"
            }
        )
    }
}
