//! Compiling through the compilation cache: the cached payload (figures and executable), the
//! key components (program, options, plugin identity) and [`compile_cached`].

use super::compile::{compile_on, compile_options, compile_stablehlo, plugin_for, prepare, summary, CompileTarget, Figures};
use super::{CompileRequest, Compiled, ExecError, Target};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;
use tpuc_runtime as rt;

/// The version of the cached payload layout below; part of every key.
const PAYLOAD_MAGIC: &[u8; 8] = b"TPUCEXE1";

/// Cached payload: magic, u32 length of the figures' JSON, the JSON, the serialized executable.
fn encode_payload(figures: &Figures, executable: &[u8]) -> Vec<u8> {
    let json = serde_json::to_vec(figures).unwrap_or_default();
    let mut out = Vec::with_capacity(12 + json.len() + executable.len());
    out.extend_from_slice(PAYLOAD_MAGIC);
    out.extend_from_slice(&(json.len() as u32).to_le_bytes());
    out.extend_from_slice(&json);
    out.extend_from_slice(executable);
    out
}

fn decode_payload(bytes: &[u8]) -> Option<(Figures, &[u8])> {
    let rest = bytes.strip_prefix(PAYLOAD_MAGIC)?;
    let len = u32::from_le_bytes(rest.get(..4)?.try_into().ok()?) as usize;
    let json = rest.get(4..4 + len)?;
    Some((serde_json::from_slice(json).ok()?, rest.get(4 + len..)?))
}

/// What identifies a plugin for cache keys: platform, versions from its attributes, PJRT API
/// version and a digest of its library. The digest of a file is remembered per (path, size,
/// mtime) in `$XDG_CACHE_HOME/tpuc/plugin-digests.json` so a warm process does not hash a
/// 100 MB library again.
fn plugin_identity(plugin: &rt::Plugin, target: Target) -> tpuc_cache::PluginIdentity {
    let versions: Vec<String> = plugin
        .attributes()
        .iter()
        .filter(|nv| nv.name.contains("version"))
        .map(|nv| {
            let v = match &nv.value {
                rt::Value::Str(s) => s.clone(),
                rt::Value::Int(i) => i.to_string(),
                rt::Value::Ints(v) => v.iter().map(|i| i.to_string()).collect::<Vec<_>>().join("."),
                rt::Value::Float(f) => f.to_string(),
                rt::Value::Bool(b) => b.to_string(),
            };
            format!("{}={v}", nv.name)
        })
        .collect();
    tpuc_cache::PluginIdentity {
        platform_name: target.to_string(),
        platform_version: versions.join(","),
        pjrt_api_version: plugin.api_version().to_string(),
        file_hash: file_digest(plugin.path()),
    }
}

fn digest_memo_path() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("tpuc").join("plugin-digests.json"))
}

fn file_digest(path: &Path) -> String {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::metadata(path) else { return "unreadable".into() };
    let id = format!("{}|{}|{}|{}", path.display(), meta.len(), meta.mtime(), meta.mtime_nsec());
    let memo_path = digest_memo_path();
    let mut memo: BTreeMap<String, String> = memo_path
        .as_ref()
        .and_then(|p| std::fs::read(p).ok())
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default();
    if let Some(d) = memo.get(&id) {
        return d.clone();
    }
    let digest = match std::fs::read(path) {
        Ok(bytes) => tpuc_cache::Digest::of(&bytes).to_hex(),
        Err(_) => return "unreadable".into(),
    };
    memo.insert(id, digest.clone());
    if let Some(p) = memo_path {
        // Best effort, published atomically; a lost race only costs another hash later.
        if let Some(dir) = p.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        let tmp = p.with_extension(format!("{}.tmp", std::process::id()));
        if std::fs::write(&tmp, serde_json::to_vec(&memo).unwrap_or_default()).is_ok() {
            let _ = std::fs::rename(&tmp, &p);
        }
    }
    digest
}

/// How a cache entry is named for people (none of it is hashed): a label, and for a program
/// lowered from a graph that graph's fingerprint and the lowering options, which let a miss
/// that differs only in them name the option.
#[derive(Clone, Copy, Debug, Default)]
pub struct Provenance<'a> {
    pub label: &'a str,
    pub graph: Option<tpuc_cache::Digest>,
    pub lowering: &'a str,
}

impl<'a> From<&'a str> for Provenance<'a> {
    fn from(label: &'a str) -> Self {
        Provenance { label, ..Default::default() }
    }
}

/// The cache key components of compiling `key_program` (StableHLO without locations) for `req`.
pub fn key_components(key_program: &str, req: &CompileRequest, from: Provenance<'_>) -> Result<tpuc_cache::KeyComponents, ExecError> {
    let plugin = plugin_for(req)?;
    Ok(key_components_for(&plugin, key_program, req, from))
}

fn key_components_for(plugin: &rt::Plugin, key_program: &str, req: &CompileRequest, from: Provenance<'_>) -> tpuc_cache::KeyComponents {
    let options = compile_options(req);
    tpuc_cache::KeyComponents {
        program: tpuc_cache::Digest::of(key_program.as_bytes()),
        graph: from.graph,
        lowering: from.lowering.to_string(),
        compile_options: tpuc_cache::CompileOptions {
            canonical: options.to_proto_bytes(),
            summary: if req.replicas > 1 {
                format!("partitions={} replicas={}", req.partitions, req.replicas)
            } else {
                format!("partitions={}", req.partitions)
            },
        },
        target: req.target.to_string(),
        topology: req.topology.clone().unwrap_or_default(),
        plugin: plugin_identity(plugin, req.target),
        tool_version: format!("tpuc {} payload {}", env!("CARGO_PKG_VERSION"), String::from_utf8_lossy(PAYLOAD_MAGIC)),
        label: from.label.to_string(),
    }
}

/// Compiles through the cache: `stablehlo` is what the plugin compiles (it may carry debug
/// locations), `key_program` the same program without locations, which the key hashes. A hit
/// skips the compile; on CPU the cached executable is loaded into a client. Cache failures
/// are misses (the cache logs them); only a real compile error is an error.
pub fn compile_cached(
    stablehlo: &str,
    key_program: &str,
    req: &CompileRequest,
    cache: &tpuc_cache::Cache,
    from: Provenance<'_>,
) -> Result<Compiled, ExecError> {
    let plugin = plugin_for(req)?;
    let kc = key_components_for(&plugin, key_program, req, from);
    let start = Instant::now();
    let mut fresh: Option<(Option<rt::LoadedExecutable>, CompileTarget, f64)> = None;
    let outcome = cache.get_or_compile(&kc, || -> Result<Vec<u8>, ExecError> {
        let target = prepare(&plugin, req)?;
        let t = Instant::now();
        let (executable, loaded) = compile_on(&target, stablehlo, req)?;
        let secs = t.elapsed().as_secs_f64();
        let payload = encode_payload(&Figures::of(&executable), &executable.serialize()?);
        fresh = Some((loaded, target, secs));
        Ok(payload)
    })?;
    let fetch = start.elapsed().as_secs_f64();
    let Some((figures, executable)) = decode_payload(&outcome.bytes) else {
        tracing::warn!(key = %outcome.key, "cached payload has an unknown layout; compiling without the cache");
        return compile_stablehlo(stablehlo, req);
    };
    let source = outcome.source.as_str();
    let (loaded, target, compile_seconds) = match fresh {
        Some((loaded, target, secs)) => (loaded, target, secs),
        None => {
            let target = prepare(&plugin, req)?;
            let t = Instant::now();
            let loaded = match &target {
                CompileTarget::Client(client, _) => Some(client.deserialize(executable)?),
                CompileTarget::Topology(..) => None,
            };
            // For a hit, the time until the executable is ready: fetch and check, then load
            // (client creation is not counted, as for a compile).
            (loaded, target, fetch + t.elapsed().as_secs_f64())
        }
    };
    let mut summary = summary(&plugin, &target, req, compile_seconds, executable.len(), figures, source);
    summary.cache_key = Some(outcome.key.to_hex());
    summary.cache_note = match outcome.source {
        tpuc_cache::Source::Compiled => outcome.miss_explanation.clone(),
        _ => Some(format!("saved {:.3} s of compile time", outcome.compile_time.as_secs_f64())),
    };
    Ok(Compiled { summary, serialized: executable.to_vec(), loaded })
}
