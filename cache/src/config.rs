//! The cache's configuration: the tiers' settings, their defaults and the `TPUC_CACHE_*`
//! environment variables that set them.

use std::path::PathBuf;
use std::time::Duration;

use crate::LOG;

/// Tier-2 settings.
#[derive(Clone, Debug)]
pub struct Tier2Config {
    /// One path component: letters, digits, `.`, `_`, `-`.
    pub name: String,
    /// The directory holding names; `/dev/shm/tpuc` by default.
    pub root: PathBuf,
    /// Budget in bytes; least recently used entries are evicted on publish.
    pub max_bytes: Option<u64>,
    /// How long to wait for another process compiling the same key before
    /// compiling here too.
    pub lock_timeout: Duration,
    /// Temporary files older than this are removed even if their writer's
    /// pid looks alive (pid reuse).
    pub orphan_age: Duration,
    /// The persistent tier (hits are reported as `disk`), not a shared-memory one (`shm`).
    pub persistent: bool,
}

/// The name of the persistent tier-2 directory under the user's cache directory.
pub const DISK_TIER_NAME: &str = "executables";
/// The persistent tier's default budget (10 GiB).
pub const DISK_TIER_MAX_BYTES: u64 = 10 << 30;

impl Tier2Config {
    /// The persistent tier used when no tier-2 name is given: `executables/` under
    /// `cache_home/tpuc` (the caller passes `$XDG_CACHE_HOME`, else `~/.cache`), 10 GiB,
    /// least recently used entries evicted, shared by the processes of the user as tier 2
    /// always is (atomic publish, per-key lock).
    pub fn persistent(cache_home: impl Into<PathBuf>) -> Self {
        Tier2Config {
            root: cache_home.into().join("tpuc"),
            max_bytes: Some(DISK_TIER_MAX_BYTES),
            persistent: true,
            ..Tier2Config::new(DISK_TIER_NAME)
        }
    }

    pub fn new(name: impl Into<String>) -> Self {
        Tier2Config {
            name: name.into(),
            root: PathBuf::from("/dev/shm/tpuc"),
            max_bytes: Some(4 << 30),
            lock_timeout: Duration::from_secs(30 * 60),
            orphan_age: Duration::from_secs(10 * 60),
            persistent: false,
        }
    }
}

/// Tier-3 settings.
#[derive(Clone, Debug)]
pub struct Tier3Config {
    /// `gs://bucket/prefix`, `file:///path` or a plain path.
    pub root: String,
    /// Per-request timeout (reads block a compile at most about this long).
    pub timeout: Duration,
    pub connect_timeout: Duration,
    /// After a network failure, skip the remote for this long.
    pub retry_after: Duration,
    /// Budget applied by [`Cache::evict`].
    pub max_bytes: Option<u64>,
    /// Allow `http://` endpoints (emulators).
    pub allow_http: bool,
    /// A GCS service-account JSON (may hold `gcs_base_url` and
    /// `"disable_oauth": true` for emulators). Otherwise `GOOGLE_*`
    /// variables and application default credentials apply.
    pub gcs_service_account_key: Option<String>,
}

impl Tier3Config {
    pub fn new(root: impl Into<String>) -> Self {
        Tier3Config {
            root: root.into(),
            timeout: Duration::from_secs(3),
            connect_timeout: Duration::from_secs(1),
            retry_after: Duration::from_secs(60),
            max_bytes: None,
            allow_http: false,
            gcs_service_account_key: None,
        }
    }
}

#[derive(Clone, Debug)]
pub struct CacheConfig {
    /// Tier-1 budget in bytes.
    pub memory_max_bytes: u64,
    pub tier2: Option<Tier2Config>,
    pub tier3: Option<Tier3Config>,
    /// How long dropping the cache waits for background uploads.
    pub flush_timeout: Duration,
    /// Stand-in for `hostname:pid` in manifests (tests); `None` = real.
    pub creator: Option<String>,
    /// Stand-in for the working directory recorded in manifests (tests); `None` = the
    /// process's.
    pub created_in: Option<PathBuf>,
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            memory_max_bytes: 1 << 30,
            tier2: None,
            tier3: None,
            flush_timeout: Duration::from_secs(30),
            creator: None,
            created_in: None,
        }
    }
}

/// Parses `123`, `64K`, `512M`, `4G` (powers of 1024).
pub fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let (num, mul) = match s.chars().last()?.to_ascii_uppercase() {
        'K' => (&s[..s.len() - 1], 1u64 << 10),
        'M' => (&s[..s.len() - 1], 1 << 20),
        'G' => (&s[..s.len() - 1], 1 << 30),
        'T' => (&s[..s.len() - 1], 1 << 40),
        _ => (s, 1),
    };
    num.trim().parse::<u64>().ok()?.checked_mul(mul)
}

impl CacheConfig {
    /// The configuration the `TPUC_CACHE_*` variables describe. Bad values
    /// are warned about and ignored.
    pub fn from_env() -> Self {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// Like [`from_env`](Self::from_env) with another variable source.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Self {
        let get = |k: &str| get(k).filter(|v| !v.trim().is_empty());
        let size = |k: &str| {
            get(k).and_then(|v| {
                let r = parse_size(&v);
                if r.is_none() {
                    tracing::warn!(target: LOG, "ignoring {k}={v:?}: not a size");
                }
                r
            })
        };
        let millis = |k: &str| {
            get(k).and_then(|v| match v.trim().parse::<u64>() {
                Ok(ms) => Some(Duration::from_millis(ms)),
                Err(_) => {
                    tracing::warn!(target: LOG, "ignoring {k}={v:?}: not milliseconds");
                    None
                }
            })
        };
        let mut c = CacheConfig::default();
        if let Some(m) = size("TPUC_CACHE_MEMORY_MAX_BYTES") {
            c.memory_max_bytes = m;
        }
        if let Some(t) = millis("TPUC_CACHE_FLUSH_TIMEOUT_MS") {
            c.flush_timeout = t;
        }
        // Tier 2: a named directory under /dev/shm/tpuc when TPUC_CACHE_TIER2 names one, else
        // the persistent one under the user's cache directory unless TPUC_CACHE_DISK is off.
        let off = |v: &str| matches!(v.trim().to_ascii_lowercase().as_str(), "0" | "off" | "false" | "no");
        if let Some(name) = get("TPUC_CACHE_TIER2") {
            let mut t = Tier2Config::new(name);
            if let Some(r) = get("TPUC_CACHE_TIER2_ROOT") {
                t.root = PathBuf::from(r);
            }
            if let Some(m) = size("TPUC_CACHE_TIER2_MAX_BYTES") {
                t.max_bytes = Some(m);
            }
            c.tier2 = Some(t);
        } else if !get("TPUC_CACHE_DISK").is_some_and(|v| off(&v)) {
            let home = get("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .filter(|p| p.is_absolute())
                .or_else(|| get("HOME").map(|h| PathBuf::from(h).join(".cache")));
            if let Some(home) = home {
                let mut t = Tier2Config::persistent(home);
                if let Some(m) = size("TPUC_CACHE_DISK_MAX_BYTES") {
                    t.max_bytes = Some(m);
                }
                c.tier2 = Some(t);
            }
        }
        if let Some(root) = get("TPUC_CACHE_TIER3_ROOT") {
            let mut t = Tier3Config::new(root);
            if let Some(d) = millis("TPUC_CACHE_TIER3_TIMEOUT_MS") {
                t.timeout = d;
                t.connect_timeout = t.connect_timeout.min(d);
            }
            t.max_bytes = size("TPUC_CACHE_TIER3_MAX_BYTES");
            t.allow_http =
                get("TPUC_CACHE_TIER3_ALLOW_HTTP").is_some_and(|v| v == "1" || v == "true");
            c.tier3 = Some(t);
        }
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("123"), Some(123));
        assert_eq!(parse_size("4G"), Some(4 << 30));
        assert_eq!(parse_size("64k"), Some(64 << 10));
        assert_eq!(parse_size("x"), None);
    }

    #[test]
    fn env_config() {
        let c = CacheConfig::from_lookup(|k| match k {
            "TPUC_CACHE_TIER2" => Some("jobA".into()),
            "TPUC_CACHE_TIER2_MAX_BYTES" => Some("1M".into()),
            "TPUC_CACHE_TIER3_ROOT" => Some("gs://b/p".into()),
            "TPUC_CACHE_TIER3_TIMEOUT_MS" => Some("250".into()),
            _ => None,
        });
        let t2 = c.tier2.unwrap();
        assert_eq!((t2.name.as_str(), t2.max_bytes), ("jobA", Some(1 << 20)));
        let t3 = c.tier3.unwrap();
        assert_eq!(t3.timeout, Duration::from_millis(250));
        assert!(CacheConfig::from_lookup(|_| None).tier2.is_none());
    }

    #[test]
    fn a_persistent_tier_by_default() {
        let env = |vars: &'static [(&'static str, &'static str)]| {
            CacheConfig::from_lookup(move |k| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())).tier2
        };
        let t = env(&[("HOME", "/home/u")]).unwrap();
        assert_eq!((t.root, t.name.as_str(), t.max_bytes), (PathBuf::from("/home/u/.cache/tpuc"), "executables", Some(10 << 30)));
        let t = env(&[("HOME", "/home/u"), ("XDG_CACHE_HOME", "/var/c"), ("TPUC_CACHE_DISK_MAX_BYTES", "2G")]).unwrap();
        assert_eq!((t.root, t.max_bytes), (PathBuf::from("/var/c/tpuc"), Some(2 << 30)));
        // A relative XDG_CACHE_HOME is invalid (the XDG spec): the default applies.
        assert_eq!(env(&[("HOME", "/h"), ("XDG_CACHE_HOME", "rel")]).unwrap().root, PathBuf::from("/h/.cache/tpuc"));
        for off in ["0", "off", "false", "no"] {
            let vars: &'static [(&str, &str)] = Box::leak(Box::new([("HOME", "/h"), ("TPUC_CACHE_DISK", off)]));
            assert!(env(vars).is_none(), "{off}");
        }
        // A named tier 2 is host shared memory, as before.
        assert_eq!(env(&[("HOME", "/h"), ("TPUC_CACHE_TIER2", "job")]).unwrap().root, PathBuf::from("/dev/shm/tpuc"));
    }
}
