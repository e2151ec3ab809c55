//! The entry format shared by tier 2 (files) and tier 3 (objects).
//!
//! ```text
//! offset size  field
//!      0    8  magic  b"TPUCXEC\0"
//!      8    4  format version (u32 LE), currently 1
//!     12    4  header length (u32 LE), 64
//!     16    4  manifest length M (u32 LE)
//!     20    4  flags (u32 LE), 0
//!     24    8  payload length P (u64 LE)
//!     32   32  BLAKE3 of manifest bytes ++ payload bytes
//!     64    M  manifest, JSON (see `Manifest`)
//!   64+M    P  payload: the executable bytes, opaque
//! ```
//!
//! A reader checks, in order: size ≥ 64, magic, version, header length,
//! `64 + M + P` equals the size, the checksum, that the manifest parses and
//! names the requested key, and that its `payload_len` equals P. Any failure
//! is a [`Corrupt`] with the reason.

use bytes::Bytes;

use crate::key::{CacheKey, Manifest};

pub const MAGIC: [u8; 8] = *b"TPUCXEC\0";
pub const FORMAT_VERSION: u32 = 1;
pub const HEADER_LEN: usize = 64;

/// Why an entry was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Corrupt(pub String);

/// An encoded entry, kept in three parts so the payload is never copied to
/// build it.
#[derive(Clone)]
pub struct Encoded {
    pub header: [u8; HEADER_LEN],
    pub manifest: Bytes,
    pub payload: Bytes,
}

impl Encoded {
    pub fn new(manifest: &Manifest, payload: Bytes) -> Encoded {
        let manifest = Bytes::from(serde_json::to_vec(manifest).expect("manifest serializes"));
        Encoded::with_version(FORMAT_VERSION, manifest, payload)
    }

    /// Builds an entry with an arbitrary format version (tests write
    /// foreign-version entries with it).
    pub fn with_version(version: u32, manifest: Bytes, payload: Bytes) -> Encoded {
        let mut h = blake3::Hasher::new();
        h.update(&manifest);
        h.update(&payload);
        let mut header = [0u8; HEADER_LEN];
        header[0..8].copy_from_slice(&MAGIC);
        header[8..12].copy_from_slice(&version.to_le_bytes());
        header[12..16].copy_from_slice(&(HEADER_LEN as u32).to_le_bytes());
        header[16..20].copy_from_slice(&(manifest.len() as u32).to_le_bytes());
        header[20..24].copy_from_slice(&0u32.to_le_bytes());
        header[24..32].copy_from_slice(&(payload.len() as u64).to_le_bytes());
        header[32..64].copy_from_slice(h.finalize().as_bytes());
        Encoded {
            header,
            manifest,
            payload,
        }
    }

    pub fn len(&self) -> u64 {
        (HEADER_LEN + self.manifest.len() + self.payload.len()) as u64
    }

    pub fn is_empty(&self) -> bool {
        false
    }

    /// The whole entry as one buffer (copies).
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.len() as usize);
        v.extend_from_slice(&self.header);
        v.extend_from_slice(&self.manifest);
        v.extend_from_slice(&self.payload);
        v
    }
}

/// The parsed parts of an entry: where manifest and payload lie in the
/// buffer that was checked.
#[derive(Debug)]
pub struct Decoded {
    pub manifest: Manifest,
    pub payload_start: usize,
    pub payload_len: usize,
}

/// Checks an entry read from a tier. `key` is the key it was stored under.
pub fn decode(buf: &[u8], key: &CacheKey) -> Result<Decoded, Corrupt> {
    let (manifest, m_end, p_len) = check(buf, buf.len() as u64, Some(key), true)?;
    Ok(Decoded {
        manifest,
        payload_start: m_end,
        payload_len: p_len,
    })
}

/// Reads the manifest from the first bytes of an entry (at least header and
/// manifest) whose full size is `total_len`, skipping the payload checksum
/// (for listings). Still checks the header and lengths.
pub fn peek_manifest(prefix: &[u8], total_len: u64) -> Result<Manifest, Corrupt> {
    check(prefix, total_len, None, false).map(|(m, _, _)| m)
}

/// Length of header plus manifest, from a header.
pub fn manifest_end(header: &[u8; HEADER_LEN]) -> usize {
    HEADER_LEN + u32::from_le_bytes(header[16..20].try_into().unwrap()) as usize
}

fn check(
    buf: &[u8],
    total_len: u64,
    key: Option<&CacheKey>,
    verify: bool,
) -> Result<(Manifest, usize, usize), Corrupt> {
    if buf.len() < HEADER_LEN || total_len < HEADER_LEN as u64 {
        return Err(Corrupt(format!(
            "truncated: {total_len} bytes, shorter than the {HEADER_LEN}-byte header"
        )));
    }
    if buf[0..8] != MAGIC {
        return Err(Corrupt("bad magic".into()));
    }
    let u32_at = |o: usize| u32::from_le_bytes(buf[o..o + 4].try_into().unwrap());
    let version = u32_at(8);
    if version != FORMAT_VERSION {
        return Err(Corrupt(format!(
            "format version {version}, expected {FORMAT_VERSION}"
        )));
    }
    let header_len = u32_at(12) as usize;
    if header_len != HEADER_LEN {
        return Err(Corrupt(format!(
            "header length {header_len}, expected {HEADER_LEN}"
        )));
    }
    let m_len = u32_at(16) as usize;
    let p_len = u64::from_le_bytes(buf[24..32].try_into().unwrap());
    let expected = (HEADER_LEN as u64)
        .checked_add(m_len as u64)
        .and_then(|v| v.checked_add(p_len))
        .ok_or_else(|| Corrupt("lengths overflow".into()))?;
    if expected != total_len {
        return Err(Corrupt(format!(
            "size {total_len} bytes, header says {expected} (truncated or extended)"
        )));
    }
    let m_end = HEADER_LEN + m_len;
    if buf.len() < m_end {
        return Err(Corrupt("truncated manifest".into()));
    }
    if verify {
        let mut h = blake3::Hasher::new();
        h.update(&buf[HEADER_LEN..]);
        if h.finalize().as_bytes() != &buf[32..64] {
            return Err(Corrupt("checksum mismatch".into()));
        }
    }
    let manifest: Manifest = serde_json::from_slice(&buf[HEADER_LEN..m_end])
        .map_err(|e| Corrupt(format!("manifest does not parse: {e}")))?;
    if let Some(key) = key {
        if manifest.key != *key {
            return Err(Corrupt(format!(
                "manifest names key {}, stored under {}",
                manifest.key.short(),
                key.short()
            )));
        }
    }
    if manifest.payload_len != p_len {
        return Err(Corrupt(
            "manifest and header disagree on the payload length".into(),
        ));
    }
    Ok((manifest, m_end, p_len as usize))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::{Digest, KeySummary, PluginIdentity};

    fn manifest(key: CacheKey, len: u64) -> Manifest {
        Manifest {
            format: FORMAT_VERSION,
            key,
            components: KeySummary {
                graph: Digest::of(b"g"),
                program: None,
                lowering: String::new(),
                label: String::new(),
                compile_options: String::new(),
                compile_options_hash: Digest::of(b""),
                target: "cpu".into(),
                topology: String::new(),
                plugin: PluginIdentity::default(),
                tool_version: "t".into(),
            },
            payload_len: len,
            compile_ms: 1,
            created_unix_ms: 0,
            created_by: String::new(),
            created_in: String::new(),
        }
    }

    #[test]
    fn round_trip_and_each_corruption() {
        let key = Digest::of(b"k");
        let payload = Bytes::from(vec![7u8; 1000]);
        let enc = Encoded::new(&manifest(key, 1000), payload.clone());
        let buf = enc.to_vec();
        let d = decode(&buf, &key).unwrap();
        assert_eq!(
            &buf[d.payload_start..d.payload_start + d.payload_len],
            &payload[..]
        );

        assert!(decode(&buf[..buf.len() - 1], &key)
            .unwrap_err()
            .0
            .contains("truncated"));
        assert!(decode(&buf[..10], &key)
            .unwrap_err()
            .0
            .contains("truncated"));
        let mut flipped = buf.clone();
        flipped[buf.len() - 3] ^= 1;
        assert_eq!(decode(&flipped, &key).unwrap_err().0, "checksum mismatch");
        let mut v2 = buf.clone();
        v2[8] = 2;
        assert!(decode(&v2, &key)
            .unwrap_err()
            .0
            .contains("format version 2"));
        assert!(decode(&buf, &Digest::of(b"other"))
            .unwrap_err()
            .0
            .contains("names key"));
    }
}
