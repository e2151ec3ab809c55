//! Host to device: checking an argument's bytes against the signature and uploading them to
//! the program's device, or as shards to every device of its mesh.

use super::Program;
use crate::exec::{self, ExecError};
use tpuc_runtime as rt;

impl Program {
    /// Each device's shard of argument `arg` (dense bytes of its whole value).
    pub(super) fn upload_shards(&self, sh: &crate::MeshSharding, arg: usize, bytes: &[u8]) -> Result<Vec<rt::Buffer>, ExecError> {
        let (dims, element_type) = self.check_arg(arg, bytes)?;
        let (loaded, _) = self.runnable()?;
        let spec = &self.args[arg];
        let devices = loaded.devices();
        if !sh.args.contains_key(&spec.name) {
            // Replicated: the caller's bytes to every device, no host copy.
            return devices.iter().map(|d| Ok(loaded.client().buffer_from_host(bytes, element_type, &dims, Some(d))?)).collect();
        }
        let whole = crate::tensor::HostTensor { dtype: spec.ty.dtype, dims, bytes: bytes.to_vec() };
        let mut out = Vec::with_capacity(devices.len());
        for (d, device) in devices.iter().enumerate() {
            let s = crate::spmd::shard_for_device(sh, &spec.name, &whole, d as i64)?;
            out.push(loaded.client().buffer_from_host(&s.bytes, element_type, &s.dims, Some(device))?);
        }
        Ok(out)
    }

    pub(super) fn upload(&self, arg: usize, bytes: &[u8]) -> Result<rt::Buffer, ExecError> {
        let (dims, element_type) = self.check_arg(arg, bytes)?;
        let (loaded, device) = self.runnable()?;
        Ok(loaded.client().buffer_from_host(bytes, element_type, &dims, Some(device))?)
    }

    pub(super) fn check_arg(&self, arg: usize, bytes: &[u8]) -> Result<(Vec<i64>, rt::ElementType), ExecError> {
        let spec = &self.args[arg];
        if bytes.len() != spec.bytes {
            return Err(ExecError::BadInput(format!(
                "{}: argument {arg} (`{}`, {}) needs {} bytes, got {}",
                self.name,
                spec.name,
                spec.ty,
                spec.bytes,
                bytes.len()
            )));
        }
        Ok((spec.ty.static_dims().unwrap_or_default(), exec::element_type(spec.ty.dtype)))
    }

    pub(super) fn runnable(&self) -> Result<(&rt::LoadedExecutable, &rt::Device), ExecError> {
        match (&self.loaded, &self.device) {
            (Some(l), Some(d)) => Ok((l, d)),
            _ => Err(ExecError::Unsupported(format!(
                "{}: cannot run on {}: this host has no such device (the executable was compiled only)",
                self.name, self.summary.target
            ))),
        }
    }
}
