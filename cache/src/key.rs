//! Cache keys: what goes into them, how they are hashed, and how two keys for
//! the same graph are compared to explain a miss.
//!
//! A key is a BLAKE3 hash over a length-prefixed, tagged encoding of every
//! component that changes the executable: the program digest, the canonical
//! compile options, target, topology, the PJRT plugin's identity and tpuc's
//! version. Display-only fields (the compile options' summary, the label) are
//! kept in the manifest but never hashed, so renaming a model or rewording a
//! summary does not miss.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A 32-byte BLAKE3 digest, printed as 64 lowercase hex digits.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest(pub [u8; 32]);

impl Digest {
    /// BLAKE3 of `bytes`.
    pub fn of(bytes: &[u8]) -> Digest {
        Digest(*blake3::hash(bytes).as_bytes())
    }

    pub fn to_hex(&self) -> String {
        let mut s = String::with_capacity(64);
        for b in self.0 {
            s.push(char::from_digit((b >> 4) as u32, 16).unwrap());
            s.push(char::from_digit((b & 15) as u32, 16).unwrap());
        }
        s
    }

    /// Parses 64 hex digits (either case).
    pub fn from_hex(s: &str) -> Option<Digest> {
        let s = s.as_bytes();
        if s.len() != 64 {
            return None;
        }
        let mut out = [0u8; 32];
        for (i, pair) in s.chunks(2).enumerate() {
            let hi = (pair[0] as char).to_digit(16)?;
            let lo = (pair[1] as char).to_digit(16)?;
            out[i] = (hi * 16 + lo) as u8;
        }
        Some(Digest(out))
    }

    /// The first 12 hex digits, for messages.
    pub fn short(&self) -> String {
        self.to_hex()[..12].to_string()
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Digest({})", self.short())
    }
}

impl Serialize for Digest {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_hex())
    }
}

impl<'de> Deserialize<'de> for Digest {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Digest::from_hex(&s).ok_or_else(|| serde::de::Error::custom("expected 64 hex digits"))
    }
}

/// The cache key: a digest over all key components. Its hex form names the
/// entry in every tier.
pub type CacheKey = Digest;

/// Compile options as they reach the compiler, in a canonical byte form (for
/// example a deterministically serialized `CompileOptionsProto`), plus a
/// human summary such as `"partitions=4"`. Only `canonical` is hashed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CompileOptions {
    pub canonical: Vec<u8>,
    pub summary: String,
}

/// Which PJRT plugin compiles: everything about it that can change the
/// executable. `file_hash` is a digest of the plugin's shared library.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PluginIdentity {
    pub platform_name: String,
    pub platform_version: String,
    pub pjrt_api_version: String,
    pub file_hash: String,
}

/// Everything a cache key is made of. The caller supplies canonical forms:
/// the program digest must be taken over the program with locations and
/// debug names stripped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyComponents {
    /// Digest of the canonical program (e.g. `Digest::of(stablehlo_text)`).
    pub program: Digest,
    /// The *graph fingerprint* used to explain misses: the source graph before any lowering
    /// choice (e.g. a digest of the FX graph JSON), so that entries compiled from it with
    /// other lowering options are found; `None` = the program digest. Not hashed (the program
    /// already reflects every choice).
    pub graph: Option<Digest>,
    /// Display only, not hashed: the lowering options that made `program` from the graph
    /// (e.g. `precision=highest bf16=off`), named when a miss differs in them.
    pub lowering: String,
    pub compile_options: CompileOptions,
    /// The kind of device compiled for, e.g. `"tpu"` or `"cpu"`.
    pub target: String,
    /// The device topology, e.g. `"v6e:2x2"`; empty when there is none.
    pub topology: String,
    pub plugin: PluginIdentity,
    /// tpuc's own version (and anything else about the tool that changes
    /// its output).
    pub tool_version: String,
    /// Display only, not hashed: a name for people (model file, graph name).
    pub label: String,
}

/// Domain separator and key-scheme version. Changing the encoding below
/// must change this string.
const KEY_DOMAIN: &[u8] = b"tpuc-cache key v1";

impl KeyComponents {
    /// The cache key.
    pub fn key(&self) -> CacheKey {
        let mut h = blake3::Hasher::new();
        field(&mut h, "domain", KEY_DOMAIN);
        field(&mut h, "program", &self.program.0);
        field(&mut h, "compile_options", &self.compile_options.canonical);
        field(&mut h, "target", self.target.as_bytes());
        field(&mut h, "topology", self.topology.as_bytes());
        field(
            &mut h,
            "plugin.platform_name",
            self.plugin.platform_name.as_bytes(),
        );
        field(
            &mut h,
            "plugin.platform_version",
            self.plugin.platform_version.as_bytes(),
        );
        field(
            &mut h,
            "plugin.pjrt_api_version",
            self.plugin.pjrt_api_version.as_bytes(),
        );
        field(&mut h, "plugin.file_hash", self.plugin.file_hash.as_bytes());
        field(&mut h, "tool_version", self.tool_version.as_bytes());
        Digest(*h.finalize().as_bytes())
    }

    /// The graph fingerprint: entries sharing it differ only in options,
    /// target, plugin or tool.
    pub fn graph(&self) -> Digest {
        self.graph.unwrap_or(self.program)
    }

    /// The components as recorded in a manifest.
    pub fn summary(&self) -> KeySummary {
        KeySummary {
            graph: self.graph(),
            program: Some(self.program),
            lowering: self.lowering.clone(),
            label: self.label.clone(),
            compile_options: self.compile_options.summary.clone(),
            compile_options_hash: Digest::of(&self.compile_options.canonical),
            target: self.target.clone(),
            topology: self.topology.clone(),
            plugin: self.plugin.clone(),
            tool_version: self.tool_version.clone(),
        }
    }
}

/// Tag, then length, then bytes: no two different component lists encode
/// to the same byte string.
fn field(h: &mut blake3::Hasher, tag: &str, bytes: &[u8]) {
    h.update(&(tag.len() as u64).to_le_bytes());
    h.update(tag.as_bytes());
    h.update(&(bytes.len() as u64).to_le_bytes());
    h.update(bytes);
}

/// The key components in the form stored in manifests: hashes where the
/// component is large, summaries for people.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeySummary {
    pub graph: Digest,
    /// The program digest, where it differs from `graph` (manifests written before it was
    /// recorded have none: their graph is the program).
    #[serde(default)]
    pub program: Option<Digest>,
    /// The lowering options' summary (empty when the caller gave none).
    #[serde(default)]
    pub lowering: String,
    #[serde(default)]
    pub label: String,
    pub compile_options: String,
    pub compile_options_hash: Digest,
    pub target: String,
    pub topology: String,
    pub plugin: PluginIdentity,
    pub tool_version: String,
}

impl KeySummary {
    /// The key components that differ between `self` (an existing entry)
    /// and `want` (the requested one), phrased "old → new".
    pub fn differences(&self, want: &KeySummary) -> Vec<String> {
        let mut out = Vec::new();
        if self.graph != want.graph {
            out.push(format!(
                "program {} → {}",
                self.graph.short(),
                want.graph.short()
            ));
        } else {
            let (a, b) = (self.program.unwrap_or(self.graph), want.program.unwrap_or(want.graph));
            if a != b {
                // The same source graph lowered to another program: by other lowering
                // options when they differ (only those named), else by another lowering (a
                // tpuc change).
                if self.lowering != want.lowering {
                    out.push(format!("lowering options {}", changed_options(&self.lowering, &want.lowering)));
                } else {
                    out.push(format!("program {} → {} (same graph and lowering options)", a.short(), b.short()));
                }
            }
        }
        if self.compile_options_hash != want.compile_options_hash {
            if self.compile_options != want.compile_options {
                out.push(format!(
                    "compile options: {} → {}",
                    show(&self.compile_options),
                    show(&want.compile_options)
                ));
            } else {
                // The summary names only partitions and replicas: something else changed.
                out.push(format!("compile options besides {} changed", show(&want.compile_options)));
            }
        }
        if self.target != want.target {
            out.push(format!(
                "target {} → {}",
                show(&self.target),
                show(&want.target)
            ));
        }
        if self.topology != want.topology {
            out.push(format!(
                "topology {} → {}",
                show(&self.topology),
                show(&want.topology)
            ));
        }
        let (a, b) = (&self.plugin, &want.plugin);
        if a.platform_name != b.platform_name {
            out.push(format!(
                "plugin platform {} → {}",
                show(&a.platform_name),
                show(&b.platform_name)
            ));
        }
        if a.platform_version != b.platform_version {
            out.push(format!(
                "plugin version changed ({} → {})",
                show(&a.platform_version),
                show(&b.platform_version)
            ));
        }
        if a.pjrt_api_version != b.pjrt_api_version {
            out.push(format!(
                "PJRT API version {} → {}",
                show(&a.pjrt_api_version),
                show(&b.pjrt_api_version)
            ));
        }
        if a.file_hash != b.file_hash {
            out.push("plugin library changed (file hash differs)".to_string());
        }
        if self.tool_version != want.tool_version {
            out.push(format!(
                "tpuc version {} → {}",
                show(&self.tool_version),
                show(&want.tool_version)
            ));
        }
        out
    }
}

/// The `name=value` settings that differ between two option summaries, `name=old → new`
/// each (settings only one side has show `(none)` on the other); the whole summaries when
/// they are not lists of settings.
fn changed_options(old: &str, new: &str) -> String {
    fn parse(s: &str) -> Option<Vec<(&str, &str)>> {
        s.split_whitespace().map(|kv| kv.split_once('=')).collect()
    }
    let (Some(a), Some(b)) = (parse(old), parse(new)) else {
        return format!("{} → {}", show(old), show(new));
    };
    let find = |list: &[(&str, &str)], k: &str| list.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string());
    let mut names: Vec<&str> = a.iter().map(|(k, _)| *k).collect();
    names.extend(b.iter().map(|(k, _)| *k).filter(|k| !a.iter().any(|(n, _)| n == k)));
    let parts: Vec<String> = names
        .into_iter()
        .filter_map(|k| {
            let (x, y) = (find(&a, k), find(&b, k));
            (x != y).then(|| format!("{k}={} → {}", x.as_deref().unwrap_or("(none)"), y.as_deref().unwrap_or("(none)")))
        })
        .collect();
    if parts.is_empty() {
        format!("{} → {}", show(old), show(new))
    } else {
        parts.join(", ")
    }
}

/// `cpu`, or `tpu v5e:2x2`: what an entry was compiled for.
fn compiled_for(k: &KeySummary) -> String {
    if k.topology.is_empty() {
        k.target.clone()
    } else {
        format!("{} {}", k.target, k.topology)
    }
}

fn show(s: &str) -> &str {
    if s.is_empty() {
        "(none)"
    } else {
        s
    }
}

/// The JSON manifest stored with every entry (inside the entry file, and as
/// a separate index object under `graphs/<graph>/<key>.json`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// Entry format version the manifest was written with.
    pub format: u32,
    pub key: CacheKey,
    pub components: KeySummary,
    pub payload_len: u64,
    /// How long the compile took, in milliseconds: what a hit saves.
    pub compile_ms: u64,
    /// When the entry was made, milliseconds since the Unix epoch.
    pub created_unix_ms: u64,
    /// `hostname:pid` of the process that compiled it.
    #[serde(default)]
    pub created_by: String,
    /// The working directory of the process that compiled it (absolute), which tells one
    /// project's entries from another's in a tier shared by every process on the host; empty
    /// in entries written before it was recorded.
    #[serde(default)]
    pub created_in: String,
}

/// Explains a miss from the manifests of entries with the same graph fingerprint but another
/// key, compiled for the same target and topology: names the components that differ in the
/// closest one (fewest differences, newest first), on one line. `None` when there is no such
/// entry: the first compile of this graph for this target and topology is a plain miss, never
/// a comparison with what another target needed (see [`first_compile_detail`]).
pub(crate) fn explain_from_candidates(
    want: &KeySummary,
    candidates: &[(String, Manifest)],
) -> Option<String> {
    closest(want, candidates, true).map(|(tier, diffs)| {
        format!(
            "{} (closest entry for this graph, in {tier})",
            diffs.join("; ")
        )
    })
}

/// For a miss that [`explain_from_candidates`] leaves plain: what this graph is cached for
/// instead (`None` when nothing), and the detail for `-v`: how the closest such entry
/// differs.
pub(crate) fn first_compile_detail(
    want: &KeySummary,
    candidates: &[(String, Manifest)],
) -> Option<(String, String)> {
    let mut others: Vec<String> = candidates
        .iter()
        .filter(|(_, m)| m.components.graph == want.graph)
        .map(|(_, m)| compiled_for(&m.components))
        .collect();
    others.sort();
    others.dedup();
    if others.is_empty() {
        return None;
    }
    let summary = format!(
        "first compile of this graph for {}; it is cached for {}",
        compiled_for(want),
        others.join(", ")
    );
    let detail = closest(want, candidates, false)
        .map(|(tier, diffs)| format!("the closest entry (in {tier}) differs in: {}", diffs.join("; ")))
        .unwrap_or_default();
    Some((summary, detail))
}

/// The closest entry of the same graph (of the same target and topology when `same_target`):
/// its tier and its differences from `want`.
fn closest<'a>(
    want: &KeySummary,
    candidates: &'a [(String, Manifest)],
    same_target: bool,
) -> Option<(&'a str, Vec<String>)> {
    let mut best: Option<(usize, u64, &str, Vec<String>)> = None;
    for (tier, m) in candidates {
        let c = &m.components;
        if c.graph != want.graph {
            continue;
        }
        if same_target && (c.target != want.target || c.topology != want.topology) {
            continue;
        }
        let diffs = c.differences(want);
        if diffs.is_empty() {
            continue;
        }
        let better = match &best {
            None => true,
            Some((n, t, _, _)) => diffs.len() < *n || (diffs.len() == *n && m.created_unix_ms > *t),
        };
        if better {
            best = Some((diffs.len(), m.created_unix_ms, tier.as_str(), diffs));
        }
    }
    best.map(|(_, _, tier, diffs)| (tier, diffs))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> KeyComponents {
        KeyComponents {
            program: Digest::of(b"module {}"),
            graph: None,
            lowering: String::new(),
            compile_options: CompileOptions {
                canonical: b"p=1".to_vec(),
                summary: "partitions=1".into(),
            },
            target: "tpu".into(),
            topology: "v6e:2x2".into(),
            plugin: PluginIdentity {
                platform_name: "tpu".into(),
                platform_version: "0.0.52".into(),
                pjrt_api_version: "0.117".into(),
                file_hash: "abc".into(),
            },
            tool_version: "0.1.0".into(),
            label: "m".into(),
        }
    }

    #[test]
    fn hex_round_trip() {
        let d = Digest::of(b"x");
        assert_eq!(Digest::from_hex(&d.to_hex()), Some(d));
        assert_eq!(Digest::from_hex("zz"), None);
    }

    #[test]
    fn field_boundaries_matter() {
        let mut a = base();
        let mut b = base();
        a.target = "tp".into();
        a.topology = "uv6e:2x2".into();
        b.target = "tpu".into();
        b.topology = "v6e:2x2".into();
        assert_ne!(a.key(), b.key());
    }

    #[test]
    fn explains_topology_and_options() {
        let old = base();
        let mut new = base();
        new.topology = "v5e:2x2".into();
        new.compile_options = CompileOptions {
            canonical: b"p=4".to_vec(),
            summary: "partitions=4".into(),
        };
        let diffs = old.summary().differences(&new.summary());
        assert_eq!(
            diffs,
            vec![
                "compile options: partitions=1 → partitions=4",
                "topology v6e:2x2 → v5e:2x2"
            ]
        );
    }

    #[test]
    fn compile_options_with_the_same_summary_do_not_contradict_it() {
        let old = base();
        let mut new = base();
        new.compile_options.canonical = b"p=1 q=2".to_vec();
        assert_eq!(old.summary().differences(&new.summary()), vec!["compile options besides partitions=1 changed"]);
    }

    #[test]
    fn explains_a_lowering_option_by_the_source_graph() {
        let mut old = base();
        old.graph = Some(Digest::of(b"fx graph"));
        old.lowering = "precision=highest bf16=off".into();
        let mut new = old.clone();
        new.program = Digest::of(b"module { bf16 dots }");
        new.lowering = "precision=highest bf16=on".into();
        assert_ne!(old.key(), new.key());
        assert_eq!(old.graph(), new.graph());
        let diffs = old.summary().differences(&new.summary());
        assert_eq!(diffs, vec!["lowering options bf16=off → on"]);
        // Another program from the same graph and options: said plainly.
        new.lowering = old.lowering.clone();
        let diffs = old.summary().differences(&new.summary());
        assert!(diffs[0].ends_with("(same graph and lowering options)"), "{diffs:?}");
        // Only the options that changed are named, added or dropped ones included.
        new.lowering = "precision=high bf16=on fusion=off".into();
        let diffs = old.summary().differences(&new.summary());
        assert_eq!(diffs, vec!["lowering options precision=highest → high, bf16=off → on, fusion=(none) → off"]);
        // Lowering options are not part of the key: the program is.
        let mut same = old.clone();
        same.lowering = "anything".into();
        assert_eq!(old.key(), same.key());
    }
}
