//! The blocks of a value on the devices of a mesh: which block device p holds, cutting it
//! out of the whole value on the host, and putting the devices' blocks of a result together.

use super::{axis_size, MeshSharding};
use crate::exec::ExecError;
use crate::tensor::HostTensor;
use std::borrow::Cow;
use std::collections::BTreeMap;

/// The mesh coordinates of device `p` (row-major).
fn coords(sh: &MeshSharding, p: i64) -> BTreeMap<&str, i64> {
    let mut out = BTreeMap::new();
    let mut rest = p;
    for (name, size) in sh.axes.iter().rev() {
        out.insert(name.as_str(), rest % size);
        rest /= size;
    }
    out
}

/// The block of `t` that device `p` holds under the sharding `dims` of argument `name`
/// (`t` itself, borrowed, when the argument is not sharded).
pub fn shard_for_device<'t>(sh: &MeshSharding, name: &str, t: &'t HostTensor, p: i64) -> Result<Cow<'t, HostTensor>, ExecError> {
    let Some(dims) = sh.args.get(name) else { return Ok(Cow::Borrowed(t)) };
    let (start, size) = block_of(sh, &format!("`{name}`"), dims, &t.dims, p)?;
    Ok(Cow::Owned(block(t, &start, &size)))
}

/// Result `index` of an SPMD run, split by `dims`, from every device's piece: the whole
/// tensor, each device's block put at its place (devices that hold the same block agree; the
/// first is taken).
pub fn assemble(sh: &MeshSharding, index: usize, dims: &[Vec<String>], whole_dims: &[i64], pieces: &[HostTensor]) -> Result<HostTensor, ExecError> {
    let first = pieces.first().ok_or_else(|| ExecError::BadInput("no device output".into()))?;
    let e = first.dtype.size_bytes();
    let mut out = HostTensor {
        dtype: first.dtype,
        dims: whole_dims.to_vec(),
        bytes: vec![0u8; whole_dims.iter().product::<i64>() as usize * e],
    };
    let mut seen = std::collections::HashSet::new();
    for (p, piece) in pieces.iter().enumerate() {
        let (start, size) = block_of(sh, &format!("result {index}"), dims, whole_dims, p as i64)?;
        if piece.dims != size {
            return Err(ExecError::BadInput(format!("result {index}: device {p} returned {:?}, expected a block of {size:?}", piece.dims)));
        }
        if seen.insert(start.clone()) {
            crate::boxes::copy_box_to(&piece.bytes, &size, &mut out.bytes, whole_dims, &start, &size, e);
        }
    }
    Ok(out)
}

/// Where device `p`'s block of a value of shape `shape` split by `dims` starts, and its size.
fn block_of(sh: &MeshSharding, what: &str, dims: &[Vec<String>], shape: &[i64], p: i64) -> Result<(Vec<i64>, Vec<i64>), ExecError> {
    if dims.len() != shape.len() {
        return Err(ExecError::BadInput(format!("{what} has {} dims, its sharding names {}", shape.len(), dims.len())));
    }
    let c = coords(sh, p);
    let mut start = vec![0i64; shape.len()];
    let mut size = shape.to_vec();
    for (d, axes) in dims.iter().enumerate() {
        let (mut parts, mut index) = (1i64, 0i64);
        for a in axes {
            let n = axis_size(&sh.axes, a).unwrap_or(1);
            index = index * n + c.get(a.as_str()).copied().unwrap_or(0);
            parts *= n;
        }
        if shape[d] % parts != 0 {
            return Err(ExecError::BadInput(format!("dim {d} of {what} has size {}, which does not split into {parts} equal shards", shape[d])));
        }
        size[d] = shape[d] / parts;
        start[d] = index * size[d];
    }
    Ok((start, size))
}

/// The dense block of `t` at `start` with extent `size`.
pub(super) fn block(t: &HostTensor, start: &[i64], size: &[i64]) -> HostTensor {
    let e = t.dtype.size_bytes();
    let mut bytes = vec![0u8; size.iter().product::<i64>() as usize * e];
    crate::boxes::copy_box(&t.bytes, &t.dims, start, &mut bytes, size, size, e);
    HostTensor { dtype: t.dtype, dims: size.to_vec(), bytes }
}
