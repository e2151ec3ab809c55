//! Finding PJRT plugins without flags.
//!
//! Order, per target:
//! 1. `TPUC_PJRT_CPU_PLUGIN` / `TPUC_PJRT_TPU_PLUGIN` (an explicit file for that target);
//! 2. the project's `.venv`: the nearest `.venv/lib/python3*/site-packages` above the running
//!    executable, then above the current directory;
//! 3. the active Python: `$VIRTUAL_ENV`'s site-packages, then `python3`'s own site-packages.
//!
//! `TPUC_PJRT_PLUGIN` names one plugin for callers that do not pick a target; see
//! [`Discovery::default_plugin`]. Inside site-packages the files are
//! `lammps_jax_pjrt_cpu/pjrt_c_api_cpu_plugin.so` (CPU) and `libtpu/libtpu.so` (TPU), which
//! `scripts/setup.sh` installs, and the CUDA plugin of `jax-cuda13-pjrt` or `jax-cuda12-pjrt`
//! (GPU), `jax_plugins/xla_cuda13/xla_cuda_plugin.so` or `.../xla_cuda12/...`.

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::error::{Error, Result};

/// Environment variable naming a plugin for callers that do not pick a target.
pub const ENV_PLUGIN: &str = "TPUC_PJRT_PLUGIN";

pub use tpuc_platform::Target;

/// The environment variable that names `target`'s plugin file.
pub fn plugin_env_var(target: Target) -> &'static str {
    match target {
        Target::Cpu => "TPUC_PJRT_CPU_PLUGIN",
        Target::Tpu => "TPUC_PJRT_TPU_PLUGIN",
        Target::Gpu => "TPUC_PJRT_GPU_PLUGIN",
    }
}

/// `target`'s plugin files inside a Python site-packages folder, in order of preference.
pub fn site_packages_files(target: Target) -> &'static [&'static str] {
    match target {
        Target::Cpu => &["lammps_jax_pjrt_cpu/pjrt_c_api_cpu_plugin.so"],
        Target::Tpu => &["libtpu/libtpu.so"],
        Target::Gpu => &["jax_plugins/xla_cuda13/xla_cuda_plugin.so", "jax_plugins/xla_cuda12/xla_cuda_plugin.so"],
    }
}

/// How a plugin path was found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    /// From this environment variable.
    Env(&'static str),
    /// From the project's virtual environment at this folder (the `.venv`).
    ProjectVenv(PathBuf),
    /// From the active Python's site-packages at this folder.
    Python(PathBuf),
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Env(var) => write!(f, "${var}"),
            Origin::ProjectVenv(venv) => write!(f, "project venv {}", venv.display()),
            Origin::Python(site) => write!(f, "python site-packages {}", site.display()),
        }
    }
}

/// One plugin path and where it came from. The file exists, except that paths named by an
/// environment variable are taken as given (loading reports a missing file).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found {
    pub path: PathBuf,
    pub origin: Origin,
}

/// What [`discover`] found.
#[derive(Clone, Debug, Default)]
pub struct Discovery {
    /// `$TPUC_PJRT_PLUGIN`, if set.
    pub explicit: Option<Found>,
    pub cpu: Option<Found>,
    pub tpu: Option<Found>,
    pub gpu: Option<Found>,
    /// Every location looked at, for error messages, with the target it was for (`None`:
    /// both).
    pub searched: Vec<(Option<Target>, String)>,
}

impl Discovery {
    pub fn get(&self, target: Target) -> Option<&Found> {
        match target {
            Target::Cpu => self.cpu.as_ref(),
            Target::Tpu => self.tpu.as_ref(),
            Target::Gpu => self.gpu.as_ref(),
        }
    }

    /// The plugin file for `target`, or an error listing where we looked.
    pub fn plugin(&self, target: Target) -> Result<&Path> {
        self.get(target)
            .map(|f| f.path.as_path())
            .ok_or_else(|| Error::NotFound {
                target: target.to_string(),
                env: plugin_env_var(target).to_string(),
                searched: self
                    .searched
                    .iter()
                    .filter(|(t, _)| t.is_none_or(|t| t == target))
                    .map(|(_, s)| s.clone())
                    .collect(),
            })
    }

    /// `$TPUC_PJRT_PLUGIN` if set, else the CPU plugin.
    pub fn default_plugin(&self) -> Result<&Path> {
        match &self.explicit {
            Some(found) => Ok(&found.path),
            None => self.plugin(Target::Cpu).map_err(|e| match e {
                Error::NotFound {
                    target, searched, ..
                } => Error::NotFound {
                    target,
                    env: format!("{ENV_PLUGIN} or {}", plugin_env_var(Target::Cpu)),
                    searched,
                },
                other => other,
            }),
        }
    }
}

/// Finds the plugins (see the module docs for the order). Never fails; a target that was not
/// found is `None`. Runs `python3` only when a target is in no `.venv`.
pub fn discover() -> Discovery {
    let mut d = Discovery::default();
    if let Some(path) = env_path(ENV_PLUGIN) {
        d.explicit = Some(Found {
            path,
            origin: Origin::Env(ENV_PLUGIN),
        });
    }
    for target in Target::ALL {
        if let Some(path) = env_path(plugin_env_var(target)) {
            set(
                &mut d,
                target,
                Found {
                    path,
                    origin: Origin::Env(plugin_env_var(target)),
                },
            );
        } else {
            d.searched
                .push((Some(target), format!("${}", plugin_env_var(target))));
        }
    }

    // The project's .venv, above the executable, then above the current directory.
    let mut starts = Vec::new();
    if let Ok(exe) = std::env::current_exe() {
        starts.extend(exe.parent().map(Path::to_path_buf));
    }
    if let Ok(cwd) = std::env::current_dir() {
        starts.push(cwd);
    }
    let mut venvs: Vec<PathBuf> = Vec::new();
    for start in &starts {
        if let Some(venv) = start
            .ancestors()
            .map(|a| a.join(".venv"))
            .find(|v| v.is_dir())
        {
            if !venvs.contains(&venv) {
                venvs.push(venv);
            }
        }
    }
    if venvs.is_empty() {
        d.searched.push((
            None,
            format!(
                "a .venv above {}",
                starts
                    .iter()
                    .map(|s| s.display().to_string())
                    .collect::<Vec<_>>()
                    .join(" or ")
            ),
        ));
    }
    for venv in &venvs {
        for site in venv_site_packages(venv) {
            search_site(&mut d, &site, || Origin::ProjectVenv(venv.clone()));
        }
    }

    // The active Python, only when something is still missing (the GPU plugin alone is
    // looked for in the active virtualenv only: most hosts have none, and asking python3
    // costs every compile a process start).
    if d.gpu.is_none() {
        if let Some(venv) = env_path("VIRTUAL_ENV") {
            for site in venv_site_packages(&venv) {
                search_site(&mut d, &site, || Origin::Python(site.clone()));
            }
        }
    }
    if d.cpu.is_none() || d.tpu.is_none() {
        let mut sites = Vec::new();
        if let Some(venv) = env_path("VIRTUAL_ENV") {
            sites.extend(venv_site_packages(&venv));
        }
        sites.extend(python_site_packages());
        if sites.is_empty() {
            d.searched
                .push((None, "python3 site-packages (no python3 answered)".into()));
        }
        for site in sites {
            search_site(&mut d, &site, || Origin::Python(site.clone()));
        }
    }
    d
}

fn env_path(var: &str) -> Option<PathBuf> {
    std::env::var_os(var)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

fn set(d: &mut Discovery, target: Target, found: Found) {
    let slot = match target {
        Target::Cpu => &mut d.cpu,
        Target::Tpu => &mut d.tpu,
        Target::Gpu => &mut d.gpu,
    };
    if slot.is_none() {
        *slot = Some(found);
    }
}

fn search_site(d: &mut Discovery, site: &Path, origin: impl Fn() -> Origin) {
    for target in Target::ALL {
        if d.get(target).is_some() {
            continue;
        }
        for file in site_packages_files(target) {
            let path = site.join(file);
            if path.is_file() {
                set(
                    d,
                    target,
                    Found {
                        path,
                        origin: origin(),
                    },
                );
                break;
            }
            d.searched.push((Some(target), path.display().to_string()));
        }
    }
}

/// `<venv>/lib/python3*/site-packages`, sorted for determinism.
fn venv_site_packages(venv: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(venv.join("lib")) else {
        return out;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        if name.to_string_lossy().starts_with("python3") {
            let site = entry.path().join("site-packages");
            if site.is_dir() {
                out.push(site);
            }
        }
    }
    out.sort();
    out
}

/// Site-packages folders of `python3` on PATH (global and user).
fn python_site_packages() -> Vec<PathBuf> {
    let script =
        "import site\nfor p in site.getsitepackages() + [site.getusersitepackages()]: print(p)";
    let Ok(out) = Command::new("python3").arg("-c").arg(script).output() else {
        return Vec::new();
    };
    if !out.status.success() {
        return Vec::new();
    }
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(PathBuf::from)
        .filter(|p| p.is_dir())
        .collect()
}
