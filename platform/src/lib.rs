//! The platforms tpuc compiles for.
//!
//! One [`Target`] type for every crate that needs to know it: the pass pipeline (which passes
//! run, the default precision policy), the runtime (which PJRT plugin), the driver, the CLI and
//! the Python extension. The crate depends on nothing, so the runtime can use it without
//! knowing the compiler and the compiler without knowing the runtime.

use std::fmt;
use std::str::FromStr;

/// What a program is compiled for.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Target {
    /// The XLA CPU plugin.
    #[default]
    Cpu,
    /// TPUs through libtpu (compiling for a topology works on any host).
    Tpu,
    /// NVIDIA GPUs through the CUDA PJRT plugin of `jax-cuda13-pjrt` / `jax-cuda12-pjrt`.
    Gpu,
}

impl Target {
    /// Every target.
    pub const ALL: [Target; 3] = [Target::Cpu, Target::Tpu, Target::Gpu];

    /// The name on the command line, in options and in cache manifests.
    pub fn name(self) -> &'static str {
        match self {
            Target::Cpu => "cpu",
            Target::Tpu => "tpu",
            Target::Gpu => "gpu",
        }
    }

    /// Whether the target's device memory is the host's (the CPU plugin): arrays can be read
    /// and handed over in place. Every accelerator copies across its link instead.
    pub fn host_memory(self) -> bool {
        self == Target::Cpu
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A name that is not a target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownTarget(pub String);

impl fmt::Display for UnknownTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = Target::ALL.iter().map(|t| t.name()).collect();
        write!(f, "unknown target `{}`; valid targets: {}", self.0, names.join(", "))
    }
}

impl std::error::Error for UnknownTarget {}

impl FromStr for Target {
    type Err = UnknownTarget;
    fn from_str(s: &str) -> Result<Target, UnknownTarget> {
        Target::ALL.into_iter().find(|t| t.name() == s).ok_or_else(|| UnknownTarget(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_names_list_the_valid_ones() {
        for t in Target::ALL {
            assert_eq!(t.name().parse::<Target>(), Ok(t));
            assert_eq!(t.to_string(), t.name());
        }
        assert_eq!("cuda".parse::<Target>().unwrap_err().to_string(), "unknown target `cuda`; valid targets: cpu, tpu, gpu");
    }
}
