//! Plugin discovery for people: which PJRT plugins are found, whether they load, and where to
//! get a missing one (`tpuc plugins`).

use super::Target;
use std::path::Path;
use tpuc_runtime as rt;

/// One line per discovered plugin: target, path, API version, platform.
pub fn describe_plugins() -> Vec<String> {
    plugin_report().0
}

/// The pip package that carries `target`'s plugin, at the version tpuc is tested with.
pub fn plugin_package(target: Target) -> &'static str {
    match target {
        Target::Cpu => "lammps-jax-pjrt-cpu==0.11.2",
        Target::Tpu => "libtpu==0.0.52",
        Target::Gpu => "jax-cuda13-pjrt==0.11.2",
    }
}

/// One line per plugin (as [`describe_plugins`]) and how many of them load.
pub fn plugin_report() -> (Vec<String>, usize) {
    let d = rt::discover();
    let mut lines = Vec::new();
    let mut usable = 0;
    if let Some(f) = &d.explicit {
        let (line, ok) = describe_one("default", &f.path, &f.origin.to_string(), None);
        lines.push(line);
        usable += ok as usize;
    }
    for target in Target::ALL {
        match d.get(target) {
            Some(f) => {
                let (line, ok) = describe_one(&target.to_string(), &f.path, &f.origin.to_string(), Some(target));
                lines.push(line);
                usable += ok as usize;
            }
            None => lines.push(format!(
                "{target}: not found: `pip install --no-deps {}` into the active virtualenv (or the project's .venv: \
                 scripts/setup.sh), or set {} to the plugin file ({})",
                plugin_package(target),
                rt::plugin_env_var(target),
                rt::site_packages_files(target).join(" or ")
            )),
        }
    }
    (lines, usable)
}

fn describe_one(label: &str, path: &Path, origin: &str, target: Option<Target>) -> (String, bool) {
    match rt::Plugin::load(path) {
        Err(e) => (format!("{label}: {} (from {origin}): cannot load: {e}", path.display()), false),
        Ok(p) => {
            let platform = match target {
                Some(Target::Tpu) => p
                    .create_topology("v5e:2x2", &rt::tpu_topology_options())
                    .and_then(|t| Ok(format!("{} {}", t.platform_name()?, first_line(&t.platform_version()?))))
                    .unwrap_or_else(|e| format!("platform unknown ({e})")),
                _ => p
                    .create_client()
                    .and_then(|c| Ok(format!("{} {}", c.platform_name()?, c.platform_version()?)))
                    .unwrap_or_else(|e| format!("platform unknown ({e})")),
            };
            (format!("{label}: {} (from {origin}), PJRT API {}, platform {platform}", path.display(), p.api_version()), true)
        }
    }
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or("")
}
