//! Loading plugins (once per file per process) and the libtpu environment.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::client::Client;
use crate::error::{Error, Result};
use crate::sys::{self, LoadFailure};
use crate::topology::Topology;
use crate::types::NamedValue;

/// A PJRT C API version (`major.minor`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ApiVersion {
    pub major: i32,
    pub minor: i32,
}

impl fmt::Display for ApiVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// The oldest plugin API accepted: our structs are laid out as in 0.81, and a plugin only
/// appends fields within a major version, so any 0.x with x >= 81 understands them.
pub const SUPPORTED_API: ApiVersion = ApiVersion {
    major: crate::ffi::API_MAJOR,
    minor: crate::ffi::LAYOUT_MINOR,
};

/// A loaded, initialized PJRT plugin. Cheap to copy; lives for the rest of the process.
#[derive(Clone, Copy)]
pub struct Plugin {
    inner: &'static Loaded,
}

struct Loaded {
    api: &'static sys::Api,
    attributes: Vec<NamedValue>,
}

impl fmt::Debug for Plugin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Plugin")
            .field("path", &self.path())
            .field("api", &self.api_version())
            .finish()
    }
}

/// Loaded plugins by canonical path, and failed loads (which are not retried: a library
/// that ran its initializers stays in the process).
static LOADED: Mutex<BTreeMap<PathBuf, Result<Plugin>>> = Mutex::new(BTreeMap::new());

impl Plugin {
    /// Loads the plugin at `path`: dlopen, `GetPjrtApi`, version check,
    /// `PJRT_Plugin_Initialize`, attributes. Loading the same file again returns the same
    /// plugin. For libtpu, sets its environment first (see [`libtpu_environment`]); only one
    /// libtpu can be loaded per process.
    pub fn load(path: impl AsRef<Path>) -> Result<Plugin> {
        let given = path.as_ref();
        if !given.is_file() {
            let reason = if given.exists() {
                "not a file"
            } else {
                "no such file"
            };
            return Err(Error::Load {
                path: given.to_path_buf(),
                reason: reason.into(),
            });
        }
        let key = std::fs::canonicalize(given).unwrap_or_else(|_| given.to_path_buf());
        let mut loaded = LOADED
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(result) = loaded.get(&key) {
            return result.clone();
        }
        if is_libtpu(&key) {
            if let Some(other) = loaded.keys().find(|k| is_libtpu(k)) {
                return Err(Error::Load {
                    path: given.to_path_buf(),
                    reason: format!(
                        "libtpu is already loaded from {}; a process can load it once",
                        other.display()
                    ),
                });
            }
            if let Err(reason) = libtpu_environment() {
                return Err(Error::Load {
                    path: given.to_path_buf(),
                    reason,
                });
            }
        }
        let result = if is_libtpu(&key) {
            // libtpu prints its start-up chatter (worker hostnames, huge pages, "logging
            // before InitGoogle") on stderr, whatever its log settings: it goes to its log
            // folder instead, with the rest of its logs.
            let _quiet = sys::StderrTo::file(&libtpu_log_dir().join("libtpu-stderr.log"));
            load_uncached(given)
        } else {
            load_uncached(given)
        };
        loaded.insert(key, result.clone());
        result
    }

    /// The file this plugin was loaded from (as first given).
    pub fn path(&self) -> &Path {
        &self.inner.api.path
    }

    /// The PJRT C API version the plugin was built with.
    pub fn api_version(&self) -> ApiVersion {
        let (major, minor) = self.inner.api.version;
        ApiVersion { major, minor }
    }

    /// `PJRT_Plugin_Attributes` (e.g. `xla_version`, `stablehlo_current_version`), read at load.
    pub fn attributes(&self) -> &[NamedValue] {
        &self.inner.attributes
    }

    /// Creates a client with no options (what the CPU plugin needs).
    pub fn create_client(&self) -> Result<Client> {
        self.create_client_with_options(&[])
    }

    /// Creates a client with platform-specific options (`PJRT_Client_Create`). The CPU plugin
    /// logs each option it reads on stderr (`cpu_device_count set via create_options`): that
    /// goes to `plugin-stderr.log` in [`libtpu_log_dir`]'s parent instead.
    pub fn create_client_with_options(&self, options: &[NamedValue]) -> Result<Client> {
        let _quiet = if options.is_empty() {
            None
        } else {
            let dir = libtpu_log_dir();
            let dir = dir.parent().unwrap_or(&dir);
            let _ = std::fs::create_dir_all(dir);
            sys::StderrTo::file(&dir.join("plugin-stderr.log"))
        };
        let raw = self.inner.api.create_client(options)?;
        Ok(Client::new(*self, Arc::new(raw)))
    }

    /// Describes a topology by name without any device (`PJRT_TopologyDescription_Create`),
    /// e.g. `v5e:2x2` with [`tpu_topology_options`] on libtpu. Compile for it with
    /// [`Topology::compile`].
    pub fn create_topology(&self, name: &str, options: &[NamedValue]) -> Result<Topology> {
        let raw = self.inner.api.create_topology(name, options)?;
        Ok(Topology::new(*self, name, Arc::new(raw)))
    }
}

fn load_uncached(path: &Path) -> Result<Plugin> {
    let load_error = |reason: String| Error::Load {
        path: path.to_path_buf(),
        reason,
    };
    let api = sys::Api::open(path, SUPPORTED_API.minor).map_err(|failure| match failure {
        LoadFailure::Open(reason) | LoadFailure::Table(reason) => load_error(reason),
        LoadFailure::Version(major, minor) => Error::ApiVersion {
            path: path.to_path_buf(),
            major,
            minor,
        },
    })?;
    let version = format!("{}.{}", api.version.0, api.version.1);
    api.initialize()
        .map_err(|e| load_error(format!("initialization failed (PJRT C API {version}): {e}")))?;
    let attributes = api.attributes().map_err(|e| {
        load_error(format!(
            "reading attributes failed (PJRT C API {version}): {e}"
        ))
    })?;
    Ok(Plugin {
        inner: Box::leak(Box::new(Loaded { api, attributes })),
    })
}

fn is_libtpu(path: &Path) -> bool {
    path.file_name()
        .is_some_and(|n| n.to_string_lossy().starts_with("libtpu"))
}

/// The options libtpu needs to describe a topology with no TPU attached (a 2x2x1-chip host,
/// one slice): `chip_config_name="default"`, `chips_per_host_bounds=[2,2,1]`, `num_slices=1`.
pub fn tpu_topology_options() -> Vec<NamedValue> {
    vec![
        NamedValue::string("chip_config_name", "default"),
        NamedValue::ints("chips_per_host_bounds", vec![2, 2, 1]),
        NamedValue::int("num_slices", 1),
    ]
}

/// Where libtpu writes its logs unless `TPU_LOG_DIR` is already set: `$TPUC_TPU_LOG_DIR`, else
/// `$XDG_CACHE_HOME/tpuc/libtpu-logs`, else `$HOME/.cache/tpuc/libtpu-logs`, else
/// `<temp>/tpuc-libtpu-logs`.
pub fn libtpu_log_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("TPU_LOG_DIR").filter(|v| !v.is_empty()) {
        return PathBuf::from(dir);
    }
    if let Some(dir) = std::env::var_os("TPUC_TPU_LOG_DIR").filter(|v| !v.is_empty()) {
        return PathBuf::from(dir);
    }
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(|h| PathBuf::from(h).join(".cache"))
        });
    match cache {
        Some(cache) => cache.join("tpuc").join("libtpu-logs"),
        None => std::env::temp_dir().join("tpuc-libtpu-logs"),
    }
}

/// Sets what libtpu reads when it loads, unless already set: `TPU_LOG_DIR=`[`libtpu_log_dir`]
/// (no `/tmp/tpu_logs`), creating the log folder; and on a host without TPU chips (compiling
/// for a topology only) `ALLOW_MULTIPLE_LIBTPU_LOAD=1` (no `/tmp/libtpu_lockfile`, so several
/// compiling processes can load it) and `TPU_SKIP_MDS_QUERY=1` (no GCE metadata lookups, which
/// time out off Google Cloud). On a TPU VM those two keep libtpu's defaults: it needs the
/// metadata to find its chips, and the lock file to keep a second process off them.
///
/// Called by [`Plugin::load`] before libtpu is opened. Setting the environment races with C
/// code reading it on other threads; a process that has already started other plugins'
/// threads should set these variables itself before it starts (then they are left alone).
pub fn libtpu_environment() -> std::result::Result<(), String> {
    let ours = std::env::var_os("TPU_LOG_DIR").is_none_or(|v| v.is_empty());
    let dir = libtpu_log_dir();
    std::fs::create_dir_all(&dir)
        .map_err(|e| format!("cannot create TPU_LOG_DIR {}: {e}", dir.display()))?;
    if ours {
        // libtpu writes new log files at every load (91 after a day of use): keep the last few.
        prune_libtpu_logs(&dir, LIBTPU_LOGS_KEPT);
    }
    let mut vars = vec![("TPU_LOG_DIR", dir.into_os_string())];
    if !tpu_chips_in(Path::new("/dev")) {
        vars.push(("ALLOW_MULTIPLE_LIBTPU_LOAD", "1".into()));
        vars.push(("TPU_SKIP_MDS_QUERY", "1".into()));
    }
    for (var, value) in vars {
        if std::env::var_os(var).is_none() {
            std::env::set_var(var, value);
        }
    }
    Ok(())
}

/// How many of libtpu's own log files [`libtpu_environment`] keeps in tpuc's log folder.
pub const LIBTPU_LOGS_KEPT: usize = 12;

/// Removes all but the newest `keep` of libtpu's log files (`tpu_driver.*.log.*`) in `dir`,
/// and its links to removed ones; `libtpu-stderr.log` (which tpuc appends to) starts over
/// past 8 MiB. Best effort: what cannot be removed stays.
pub fn prune_libtpu_logs(dir: &Path, keep: usize) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let mut logs = Vec::new();
    let mut links = Vec::new();
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Ok(meta) = e.path().symlink_metadata() else { continue };
        if meta.file_type().is_symlink() {
            links.push(e.path());
        } else if name.starts_with("tpu_driver.") && name.contains(".log.") && meta.is_file() {
            logs.push((meta.modified().unwrap_or(std::time::SystemTime::UNIX_EPOCH), e.path()));
        } else if name == "libtpu-stderr.log" && meta.len() > 8 << 20 {
            let _ = std::fs::remove_file(e.path());
        }
    }
    logs.sort_by_key(|l| std::cmp::Reverse(l.0));
    for (_, path) in logs.iter().skip(keep) {
        let _ = std::fs::remove_file(path);
    }
    for link in links {
        if !link.exists() {
            let _ = std::fs::remove_file(link);
        }
    }
}

/// Whether the device folder `dev` shows TPU chips: `accel<N>` nodes (TPU v2-v5e) or numbered
/// VFIO groups under `vfio/` (v5p, v6e).
pub fn tpu_chips_in(dev: &Path) -> bool {
    let numbered = |name: &str, prefix: &str| {
        name.strip_prefix(prefix)
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    };
    let any = |dir: &Path, prefix: &str| {
        std::fs::read_dir(dir).is_ok_and(|entries| {
            entries
                .flatten()
                .any(|e| numbered(&e.file_name().to_string_lossy(), prefix))
        })
    };
    any(dev, "accel") || any(&dev.join("vfio"), "")
}

#[cfg(test)]
mod tests {
    use super::{prune_libtpu_logs, tpu_chips_in};

    #[test]
    fn libtpu_logs_keep_the_newest_and_their_links() {
        let dir = std::env::temp_dir().join(format!("tpuc-logs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let t0 = std::time::SystemTime::now() - std::time::Duration::from_secs(1000);
        let mut names = Vec::new();
        for i in 0..6 {
            let name = format!("tpu_driver.vm.root.log.INFO.20261203-2000{i:02}.{i}");
            let f = std::fs::File::create(dir.join(&name)).unwrap();
            f.set_modified(t0 + std::time::Duration::from_secs(i * 10)).unwrap();
            names.push(name);
        }
        std::os::unix::fs::symlink(&names[5], dir.join("tpu_driver.INFO")).unwrap();
        std::os::unix::fs::symlink(&names[0], dir.join("tpu_driver.WARNING")).unwrap();
        std::fs::write(dir.join("libtpu-stderr.log"), b"small").unwrap();
        std::fs::write(dir.join("unrelated.txt"), b"x").unwrap();
        prune_libtpu_logs(&dir, 2);
        let mut left: Vec<String> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        left.sort();
        let mut want = vec![names[4].clone(), names[5].clone(), "libtpu-stderr.log".into(), "tpu_driver.INFO".into(), "unrelated.txt".into()];
        want.sort();
        assert_eq!(left, want);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn tpu_chips_are_accel_nodes_or_numbered_vfio_groups() {
        let root = std::env::temp_dir().join(format!("tpuc-dev-{}", std::process::id()));
        let dev = |name: &str| root.join(name);
        for d in ["none", "accel", "vfio/vfio", "vfio_group/vfio"] {
            std::fs::create_dir_all(dev(d)).unwrap();
        }
        // A host without chips: neither kind of node (the VFIO control node alone is not one).
        std::fs::write(dev("none/accelerometer"), b"").unwrap();
        assert!(!tpu_chips_in(&dev("none")));
        assert!(!tpu_chips_in(&dev("vfio")));
        std::fs::write(dev("accel/accel0"), b"").unwrap();
        assert!(tpu_chips_in(&dev("accel")));
        std::fs::write(dev("vfio_group/vfio/0"), b"").unwrap();
        assert!(tpu_chips_in(&dev("vfio_group")));
        assert!(!tpu_chips_in(&root.join("missing")));
        std::fs::remove_dir_all(&root).unwrap();
    }
}
