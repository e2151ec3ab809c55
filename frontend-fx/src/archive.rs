//! Reading `.pt2` archives: the zip written by `torch.export.save`.
//!
//! Layout (torch 2.15): under one top-level folder `<prefix>/`: `models/model.json` (the
//! program), `data/weights/model_weights_config.json` with raw little-endian `weight_N`
//! storages, `data/constants/model_constants_config.json` with `tensor_N` storages, plus
//! `archive_format`, `byteorder` and a pickled `data/sample_inputs/model.pt` (ignored).
//!
//! The archive is memory-mapped ([`bytes::Bytes`] over the map); torch writes entries
//! uncompressed ("stored"), so a weight whose storage is contiguous is a zero-copy slice of the
//! map. Compressed entries are inflated on demand; strided or offset views are copied into
//! row-major order.
//!
//! Integrity: every entry read is checked against the CRC-32 its zip header records (the
//! `zip` crate checks the entries it inflates; stored entries are checked here, once each), so
//! an archive with a flipped bit is refused with an error naming the entry instead of
//! computing with a damaged weight. The check reads each stored byte once, at memory speed.

use crate::dtypes;
use crate::error::ImportError;
use crate::schema::{self, PayloadConfig, TensorMeta};
use bytes::Bytes;
use std::collections::{BTreeMap, HashMap};
use std::io::{Cursor, Read};
use tpuc_ir::{DType, TensorData, TensorType};
use zip::CompressionMethod;

/// Largest element count accepted for one weight (2^40).
const MAX_ELEMENTS: u64 = 1 << 40;
/// Largest JSON entry inflated from a compressed archive (1 GiB).
const MAX_INFLATE: u64 = 1 << 30;

pub struct Archive {
    zip: zip::ZipArchive<Cursor<Bytes>>,
    data: Bytes,
    /// `<prefix>/` including the slash (may be empty).
    pub prefix: String,
    /// Model name (`model` for `models/model.json`).
    pub model: String,
    names: HashMap<String, usize>,
    /// Stored entries whose CRC-32 was checked.
    checked: std::collections::HashSet<usize>,
}

impl Archive {
    pub fn open(data: Bytes) -> Result<Archive, ImportError> {
        // zip 2.x: 9.x rejects some archives torch writes (zip64 end records after large
        // stored entries) with "Invalid Central Directory header".
        // A zip whose central directory is missing or cut is a damaged file (a copy or
        // download that stopped early), not a malformed program.
        let zip = zip::ZipArchive::new(Cursor::new(data.clone())).map_err(|e| {
            ImportError::Archive(format!("{e}: the file is damaged or incomplete (truncated?); save or copy it again"))
        })?;
        let mut names = HashMap::new();
        for i in 0..zip.len() {
            if let Some(name) = zip.name_for_index(i) {
                names.insert(name.to_string(), i);
            }
        }
        // The program: `<prefix>models/model.json`, else the first `<prefix>models/*.json`.
        let mut candidates: Vec<&String> = names
            .keys()
            .filter(|n| {
                let (dir, file) = n.rsplit_once('/').unwrap_or(("", n.as_str()));
                (dir == "models" || dir.ends_with("/models")) && file.ends_with(".json")
            })
            .collect();
        candidates.sort_by_key(|n| (!n.ends_with("models/model.json"), n.len(), n.to_string()));
        let program = candidates.first().ok_or_else(|| ImportError::MissingFile("models/model.json".into()))?;
        let idx = program.rfind("models/").unwrap_or(0);
        let prefix = program.get(..idx).unwrap_or("").to_string();
        let model = program
            .get(idx + "models/".len()..)
            .and_then(|f| f.strip_suffix(".json"))
            .unwrap_or("model")
            .to_string();
        Ok(Archive { zip, data, prefix, model, names, checked: Default::default() })
    }

    pub fn has(&self, rel: &str) -> bool {
        self.names.contains_key(&format!("{}{}", self.prefix, rel))
    }

    /// The bytes of `<prefix><rel>`: a zero-copy slice for stored entries.
    pub fn read(&mut self, rel: &str) -> Result<Bytes, ImportError> {
        let full = format!("{}{}", self.prefix, rel);
        let &idx = self.names.get(&full).ok_or_else(|| ImportError::MissingFile(full.clone()))?;
        let bad = |e: zip::result::ZipError| ImportError::Archive(format!("`{full}`: {e}"));
        let f = self.zip.by_index_raw(idx).map_err(bad)?;
        if f.compression() == CompressionMethod::Stored && f.compressed_size() == f.size() {
            let start = f.data_start();
            let len = f.size();
            let end = start.checked_add(len).filter(|&e| e <= self.data.len() as u64).ok_or_else(|| {
                ImportError::Archive(format!("`{full}`: entry runs past the end of the archive (truncated?)"))
            })?;
            let crc = f.crc32();
            let bytes = self.data.slice(start as usize..end as usize);
            if !self.checked.contains(&idx) {
                let got = crc32fast::hash(&bytes);
                if got != crc {
                    return Err(ImportError::Archive(format!(
                        "`{full}`: CRC-32 mismatch (recorded {crc:08x}, computed {got:08x}): the file is damaged; save or copy it again"
                    )));
                }
                self.checked.insert(idx);
            }
            return Ok(bytes);
        }
        drop(f);
        let f = self.zip.by_index(idx).map_err(bad)?;
        let size = f.size();
        if size > MAX_INFLATE {
            return Err(ImportError::Archive(format!("`{full}`: compressed entry of {size} bytes is too large")));
        }
        let mut out = Vec::with_capacity(size as usize);
        f.take(MAX_INFLATE).read_to_end(&mut out).map_err(|e| ImportError::Archive(format!("`{full}`: {e}")))?;
        Ok(Bytes::from(out))
    }

    /// The user's names of the program's symbols (`{"s27": "seq"}`): the archive entry
    /// `extra/tpuc_dim_names.json` that `tpuc.save` writes from the `torch.export.Dim` names
    /// (`torch.export.save` itself keeps only torch's `s27`). Empty when absent.
    pub fn dim_names(&mut self) -> Result<HashMap<String, String>, ImportError> {
        const ENTRY: &str = "extra/tpuc_dim_names.json";
        if !self.has(ENTRY) {
            return Ok(HashMap::new());
        }
        let json = self.read(ENTRY)?;
        serde_json::from_slice(&json)
            .map_err(|e| ImportError::Json { file: format!("{}{ENTRY}", self.prefix), message: e.to_string() })
    }

    /// Checks `byteorder` (when present) says little-endian.
    pub fn check_byteorder(&mut self) -> Result<(), ImportError> {
        if !self.has("byteorder") {
            return Ok(());
        }
        let b = self.read("byteorder")?;
        let s = String::from_utf8_lossy(&b);
        if s.trim() != "little" {
            return Err(ImportError::Archive(format!("byteorder is `{}`; only little-endian archives are supported", s.trim())));
        }
        Ok(())
    }

    /// Loads every tensor of `data/weights/` and `data/constants/` by qualified name.
    pub fn payloads(&mut self) -> Result<Payloads, ImportError> {
        let mut out = Payloads::default();
        for (dir, cfg) in [("data/weights/", "weights_config"), ("data/constants/", "constants_config")] {
            let rel = format!("{dir}{}_{cfg}.json", self.model);
            if !self.has(&rel) {
                continue;
            }
            let json = self.read(&rel)?;
            let config: PayloadConfig = serde_json::from_slice(&json)
                .map_err(|e| ImportError::Json { file: format!("{}{rel}", self.prefix), message: e.to_string() })?;
            // Deterministic order (and each storage file read once).
            let entries: BTreeMap<&String, &schema::PayloadMeta> = config.config.iter().collect();
            let mut files: HashMap<String, Bytes> = HashMap::new();
            for (name, meta) in entries {
                if meta.use_pickle {
                    out.unavailable.insert(
                        name.clone(),
                        "it is stored pickled (a tensor subclass), which tpuc cannot read".to_string(),
                    );
                    continue;
                }
                let Some(tm) = &meta.tensor_meta else {
                    if dir == "data/constants/" && !meta.path_name.starts_with("tensor") {
                        continue; // custom objects
                    }
                    return Err(ImportError::Weight { name: name.clone(), message: "no tensor_meta".into() });
                };
                let file_rel = format!("{dir}{}", meta.path_name);
                let storage = match files.get(&file_rel) {
                    Some(b) => b.clone(),
                    None => {
                        let b = self.read(&file_rel)?;
                        files.insert(file_rel.clone(), b.clone());
                        b
                    }
                };
                let data = strided_view(name, tm, &storage)?;
                out.tensors.insert(name.clone(), data);
            }
        }
        Ok(out)
    }
}

#[derive(Default)]
pub struct Payloads {
    pub tensors: HashMap<String, TensorData>,
    /// Weights present but not readable, with the reason.
    pub unavailable: HashMap<String, String>,
}

/// Static integer from a serialized `SymInt` (weights never have symbolic sizes).
fn static_int(name: &str, v: &schema::SymIntJson, what: &str) -> Result<i64, ImportError> {
    v.as_int().ok_or_else(|| ImportError::Weight { name: name.into(), message: format!("{what} is symbolic") })
}

/// The tensor `as_strided(storage, sizes, strides, storage_offset)` in row-major order.
pub fn strided_view(name: &str, tm: &TensorMeta, storage: &Bytes) -> Result<TensorData, ImportError> {
    let err = |m: String| ImportError::Weight { name: name.into(), message: m };
    let dtype: DType = dtypes::from_torch(tm.dtype)?;
    let es = dtype.size_bytes() as u64;
    let sizes = tm.sizes.iter().map(|v| static_int(name, v, "size")).collect::<Result<Vec<_>, _>>()?;
    let strides = if tm.strides.is_empty() && !sizes.is_empty() {
        contiguous_strides(&sizes)
    } else {
        tm.strides.iter().map(|v| static_int(name, v, "stride")).collect::<Result<Vec<_>, _>>()?
    };
    if strides.len() != sizes.len() {
        return Err(err(format!("{} sizes but {} strides", sizes.len(), strides.len())));
    }
    let offset = match &tm.storage_offset {
        Some(v) => static_int(name, v, "storage offset")?,
        None => 0,
    };
    if offset < 0 || sizes.iter().any(|&s| s < 0) || strides.iter().any(|&s| s < 0) {
        return Err(err(format!("negative size, stride or offset: sizes {sizes:?}, strides {strides:?}, offset {offset}")));
    }
    let mut numel: u64 = 1;
    for &s in &sizes {
        numel = numel.checked_mul(s as u64).filter(|&n| n <= MAX_ELEMENTS).ok_or_else(|| err(format!("too many elements: {sizes:?}")))?;
    }
    let ty = TensorType::from_static(dtype, &sizes);
    if numel == 0 {
        return TensorData::new(ty, Bytes::new()).map_err(|e| err(e.to_string()));
    }
    // Last element's storage index.
    let mut last: u64 = offset as u64;
    for (&s, &st) in sizes.iter().zip(&strides) {
        let step = (s as u64 - 1).checked_mul(st as u64).ok_or_else(|| err("stride overflow".into()))?;
        last = last.checked_add(step).ok_or_else(|| err("stride overflow".into()))?;
    }
    let needed = last.checked_add(1).and_then(|n| n.checked_mul(es)).ok_or_else(|| err("size overflow".into()))?;
    if needed > storage.len() as u64 {
        return Err(err(format!("needs {needed} bytes of storage, the file has {}", storage.len())));
    }
    let contiguous = sizes
        .iter()
        .zip(strides.iter().zip(contiguous_strides(&sizes)))
        .all(|(&s, (&st, want))| s == 1 || st == want);
    // A view may repeat storage (stride 0), but not blow a small file up without bound.
    let dense = numel.checked_mul(es).ok_or_else(|| err("size overflow".into()))?;
    if !contiguous && dense > (storage.len() as u64).saturating_mul(64).max(1 << 20) {
        return Err(err(format!("a {dense}-byte view of a {}-byte storage is not supported", storage.len())));
    }
    let bytes = if contiguous {
        let start = offset as u64 * es;
        storage.slice(start as usize..(start + numel * es) as usize)
    } else {
        let mut out = Vec::with_capacity((numel * es) as usize);
        let rank = sizes.len();
        let mut idx = vec![0i64; rank];
        for _ in 0..numel {
            let mut pos: u64 = offset as u64;
            for d in 0..rank {
                pos += idx[d] as u64 * strides[d] as u64;
            }
            let s = (pos * es) as usize;
            out.extend_from_slice(storage.get(s..s + es as usize).ok_or_else(|| err("storage index out of range".into()))?);
            for d in (0..rank).rev() {
                idx[d] += 1;
                if idx[d] < sizes[d] {
                    break;
                }
                idx[d] = 0;
            }
        }
        Bytes::from(out)
    };
    TensorData::new(ty, bytes).map_err(|e| err(e.to_string()))
}

pub fn contiguous_strides(sizes: &[i64]) -> Vec<i64> {
    let mut st = vec![1i64; sizes.len()];
    for i in (0..sizes.len().saturating_sub(1)).rev() {
        st[i] = st[i + 1].saturating_mul(sizes[i + 1].max(1));
    }
    st
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::SymIntJson;

    fn meta(sizes: &[i64], strides: &[i64], off: i64) -> TensorMeta {
        TensorMeta {
            dtype: 4, // i32
            sizes: sizes.iter().map(|&s| SymIntJson::Int(s)).collect(),
            strides: strides.iter().map(|&s| SymIntJson::Int(s)).collect(),
            storage_offset: Some(SymIntJson::Int(off)),
        }
    }

    fn storage(n: i32) -> Bytes {
        Bytes::from((0..n).flat_map(|i| i.to_le_bytes()).collect::<Vec<u8>>())
    }

    fn values(t: &TensorData) -> Vec<i64> {
        (0..t.ty.num_elements().unwrap() as usize).map(|i| t.element(i).as_i64()).collect()
    }

    #[test]
    fn contiguous_is_zero_copy() {
        let s = storage(12);
        let t = strided_view("w", &meta(&[2, 3], &[3, 1], 6), &s).unwrap();
        assert_eq!(values(&t), vec![6, 7, 8, 9, 10, 11]);
        assert_eq!(t.raw_bytes().as_ptr(), s[24..].as_ptr());
    }

    #[test]
    fn transposed_and_offset_views_are_copied() {
        let s = storage(12);
        let t = strided_view("w", &meta(&[3, 2], &[1, 3], 0), &s).unwrap();
        assert_eq!(values(&t), vec![0, 3, 1, 4, 2, 5]);
        let t = strided_view("w", &meta(&[2, 2], &[4, 2], 1), &s).unwrap();
        assert_eq!(values(&t), vec![1, 3, 5, 7]);
        // expanded (stride 0)
        let t = strided_view("w", &meta(&[2, 3], &[0, 1], 0), &s).unwrap();
        assert_eq!(values(&t), vec![0, 1, 2, 0, 1, 2]);
    }

    #[test]
    fn out_of_range_is_an_error() {
        let s = storage(4);
        assert!(strided_view("w", &meta(&[2, 3], &[3, 1], 0), &s).is_err());
        assert!(strided_view("w", &meta(&[2, 3], &[3, -1], 0), &s).is_err());
        assert!(strided_view("w", &meta(&[1 << 40, 1 << 40], &[1, 1], 0), &s).is_err());
    }
}
