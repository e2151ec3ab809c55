//! Host tensors and `.npy` files: what `tpuc run` reads and writes.

use std::path::Path;
use tpuc_ir::{DType, TensorType};

/// A dense, row-major, little-endian host tensor.
#[derive(Clone, Debug, PartialEq)]
pub struct HostTensor {
    pub dtype: DType,
    pub dims: Vec<i64>,
    pub bytes: Vec<u8>,
}

#[derive(Debug, thiserror::Error)]
pub enum NpyError {
    #[error("cannot read {path}: {source}")]
    Io { path: String, source: std::io::Error },
    #[error("{path} is not a valid .npy file: {message}")]
    Format { path: String, message: String },
    #[error("{path}: .npy dtype `{descr}` is not supported (supported: bool, int8-64, uint8-64, float16/32/64, complex64/128)")]
    Dtype { path: String, descr: String },
}

/// The npy `descr` of a dtype (little-endian), if numpy has one.
pub fn npy_descr(d: DType) -> Option<&'static str> {
    Some(match d {
        DType::Bool => "|b1",
        DType::I8 => "|i1",
        DType::I16 => "<i2",
        DType::I32 => "<i4",
        DType::I64 => "<i8",
        DType::U8 => "|u1",
        DType::U16 => "<u2",
        DType::U32 => "<u4",
        DType::U64 => "<u8",
        DType::F16 => "<f2",
        DType::F32 => "<f4",
        DType::F64 => "<f8",
        DType::C64 => "<c8",
        DType::C128 => "<c16",
        DType::BF16 | DType::F8E4M3FN | DType::F8E5M2 => return None,
    })
}

fn dtype_of_descr(descr: &str) -> Option<DType> {
    let normalized = match descr.as_bytes().first() {
        Some(b'=') => format!("<{}", &descr[1..]),
        _ => descr.to_string(),
    };
    DType::ALL.into_iter().find(|&d| {
        npy_descr(d).is_some_and(|n| n == normalized || (n.starts_with('|') && n[1..] == normalized[1..]))
    })
}

impl HostTensor {
    pub fn ty(&self) -> TensorType {
        TensorType::from_static(self.dtype, &self.dims)
    }

    /// Reads a C-order, little-endian `.npy` file.
    pub fn read_npy(path: &Path) -> Result<HostTensor, NpyError> {
        let p = path.display().to_string();
        let bytes = std::fs::read(path).map_err(|source| NpyError::Io { path: p.clone(), source })?;
        Self::parse_npy(&bytes, &p)
    }

    pub fn parse_npy(bytes: &[u8], path: &str) -> Result<HostTensor, NpyError> {
        let fmt = |message: String| NpyError::Format { path: path.to_string(), message };
        let npy = npyz::NpyFile::new(bytes).map_err(|e| fmt(e.to_string()))?;
        let header = npy.header().clone();
        if header.order() != npyz::Order::C {
            return Err(fmt("Fortran-order arrays are not supported; save with np.ascontiguousarray".into()));
        }
        let descr = header.dtype().descr();
        let descr = descr.trim_matches('\'').to_string();
        let dtype = dtype_of_descr(&descr).ok_or(NpyError::Dtype { path: path.to_string(), descr })?;
        let dims: Vec<i64> = header.shape().iter().map(|&d| d as i64).collect();
        let n: u64 = header.shape().iter().product();
        let len = usize::try_from(n).ok().and_then(|n| n.checked_mul(dtype.size_bytes())).ok_or_else(|| fmt("array too large".into()))?;
        let data: &[u8] = npy.into_inner();
        if data.len() < len {
            return Err(fmt(format!("truncated: {} bytes of data for {len} expected", data.len())));
        }
        Ok(HostTensor { dtype, dims, bytes: data[..len].to_vec() })
    }

    /// Writes a `.npy` file (format 1.0, C order, little-endian).
    pub fn write_npy(&self, path: &Path) -> std::io::Result<()> {
        let descr = npy_descr(self.dtype).ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::Unsupported, format!("{} has no .npy dtype", self.dtype))
        })?;
        let shape = match self.dims.len() {
            0 => "()".to_string(),
            1 => format!("({},)", self.dims[0]),
            _ => format!("({})", self.dims.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", ")),
        };
        let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
        // Magic (6) + version (2) + length (2) + header + '\n' is a multiple of 64.
        let total = 10 + header.len() + 1;
        header.push_str(&" ".repeat((64 - total % 64) % 64));
        header.push('\n');
        let mut out = Vec::with_capacity(10 + header.len() + self.bytes.len());
        out.extend_from_slice(b"\x93NUMPY\x01\x00");
        out.extend_from_slice(&(header.len() as u16).to_le_bytes());
        out.extend_from_slice(header.as_bytes());
        out.extend_from_slice(&self.bytes);
        std::fs::write(path, out)
    }

    /// Element `i` as f64 (complex: the real part).
    pub fn element_f64(&self, i: usize) -> f64 {
        let sz = self.dtype.size_bytes();
        tpuc_ir::Scalar::from_bytes(self.dtype, &self.bytes[i * sz..(i + 1) * sz]).as_f64()
    }

    pub fn num_elements(&self) -> usize {
        self.dims.iter().product::<i64>().max(0) as usize
    }
}

/// Result of comparing an output with an expected tensor.
#[derive(Clone, Debug)]
pub struct Comparison {
    pub max_abs_err: f64,
    pub max_rel_err: f64,
    /// Elements outside `atol + rtol * |expected|`.
    pub mismatches: usize,
    /// The first mismatching element: index, got, expected.
    pub first_mismatch: Option<(usize, f64, f64)>,
}

/// Compares like `numpy.allclose` (NaN equals NaN); shapes and dtypes must agree.
pub fn compare(got: &HostTensor, want: &HostTensor, rtol: f64, atol: f64) -> Result<Comparison, String> {
    if got.dims != want.dims {
        return Err(format!("shape {:?} differs from expected {:?}", got.dims, want.dims));
    }
    if got.dtype != want.dtype {
        return Err(format!("dtype {} differs from expected {}", got.dtype, want.dtype));
    }
    let mut c = Comparison { max_abs_err: 0.0, max_rel_err: 0.0, mismatches: 0, first_mismatch: None };
    for i in 0..got.num_elements() {
        let (g, w) = (got.element_f64(i), want.element_f64(i));
        if g.is_nan() && w.is_nan() || g == w {
            continue;
        }
        let abs = (g - w).abs();
        let abs = if abs.is_nan() { f64::INFINITY } else { abs };
        c.max_abs_err = c.max_abs_err.max(abs);
        if w != 0.0 {
            c.max_rel_err = c.max_rel_err.max(abs / w.abs());
        }
        // A NaN tolerance or expected value makes the comparison unordered: a mismatch.
        if !abs.partial_cmp(&(atol + rtol * w.abs())).is_some_and(|o| o.is_le()) {
            c.mismatches += 1;
            c.first_mismatch.get_or_insert((i, g, w));
        }
    }
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn npy_roundtrip_all_dtypes() {
        let dir = std::env::temp_dir().join(format!("tpuc-npy-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for d in DType::ALL.into_iter().filter(|&d| npy_descr(d).is_some()) {
            for dims in [vec![], vec![3], vec![2, 3]] {
                let n: i64 = dims.iter().product();
                let bytes: Vec<u8> = (0..n as usize * d.size_bytes()).map(|i| (i % 2) as u8).collect();
                let t = HostTensor { dtype: d, dims: dims.clone(), bytes };
                let p = dir.join("t.npy");
                t.write_npy(&p).unwrap();
                assert_eq!(HostTensor::read_npy(&p).unwrap(), t, "{d} {dims:?}");
            }
        }
        std::fs::remove_dir_all(dir).ok();
    }

    #[test]
    fn compare_flags_mismatches() {
        let f = |v: &[f32]| HostTensor { dtype: DType::F32, dims: vec![v.len() as i64], bytes: v.iter().flat_map(|x| x.to_le_bytes()).collect() };
        let c = compare(&f(&[1.0, 2.0, f32::NAN]), &f(&[1.0, 2.001, f32::NAN]), 1e-5, 1e-5).unwrap();
        assert_eq!(c.mismatches, 1);
        assert_eq!(c.first_mismatch.unwrap().0, 1);
        let c = compare(&f(&[1.0, 2.0]), &f(&[1.0, 2.0 + 1e-7]), 1e-5, 0.0).unwrap();
        assert_eq!(c.mismatches, 0);
    }
}
