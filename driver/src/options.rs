//! The compile options, declared once: for each, its name in `torch.compile(...,
//! options={...})`, its `TPUC_*` environment variable, the `tpuc` flag that sets the same, its
//! default and what it does. The Python package reads this table (`tpuc._C.option_specs()`)
//! for the environment variables, the known names and its docs; the README's options table is
//! [`markdown_table`] (a test keeps them equal); a CLI test checks each flag exists. How each
//! value is parsed stays with its owner: [`crate::LowerOptions`] holds the lowering ones as
//! types (`Precision`, `Target`, ...).

/// One compile option.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OptionSpec {
    /// The name in `torch.compile(..., options={name: ...})`.
    pub name: &'static str,
    /// The environment variable that sets it when the options do not.
    pub env: Option<&'static str>,
    /// The `tpuc` command-line flag that sets the same thing, when there is one.
    pub flag: Option<&'static str>,
    /// The default, as the docs show it (empty: unset).
    pub default: &'static str,
    /// Whether the value is a boolean (`1/0`, `true/false`, `on/off`).
    pub boolean: bool,
    /// What it does (Markdown).
    pub help: &'static str,
    /// Whether it changes how a graph lowers: such options are named, with their values, in
    /// [`crate::LowerOptions::lowering_summary`] (what a cache miss's explanation compares).
    pub lowers: bool,
}

const fn opt(name: &'static str, env: &'static str, flag: Option<&'static str>, default: &'static str, help: &'static str) -> OptionSpec {
    OptionSpec { name, env: Some(env), flag, default, boolean: false, help, lowers: false }
}

const fn flag(name: &'static str, env: &'static str, flag: Option<&'static str>, on: bool, help: &'static str) -> OptionSpec {
    OptionSpec { name, env: Some(env), flag, default: if on { "on" } else { "off" }, boolean: true, help, lowers: false }
}

/// An option that changes the lowered program.
const fn lowers(o: OptionSpec) -> OptionSpec {
    OptionSpec { lowers: true, ..o }
}

/// Every option, in the order the docs list them.
pub const OPTIONS: &[OptionSpec] = &[
    opt("target", "TPUC_TARGET", Some("--target"), "`cpu`", "`gpu`: the CUDA PJRT plugin (`jax-cuda13-pjrt` or `jax-cuda12-pjrt`); `tpu`: libtpu, on the chips where the host has them, else compiled for `topology` without a device (the graph then runs eagerly; the executable lands in the cache and `dump_dir`)"),
    opt("topology", "TPUC_TOPOLOGY", Some("--topology"), "", "e.g. `v5e:2x2`"),
    opt("plugin", "TPUC_PLUGIN", Some("--plugin"), "found", "the PJRT plugin file (else `TPUC_PJRT_CPU_PLUGIN` / `TPUC_PJRT_TPU_PLUGIN` / `TPUC_PJRT_GPU_PLUGIN`, else the installed package)"),
    flag("strict", "TPUC_STRICT", None, false, "raise `TpucUnsupportedError` instead of running unsupported ops eagerly (the CLI always refuses them)"),
    opt("dump_dir", "TPUC_DUMP_DIR", Some("--dump-dir"), "", "per graph: FX code, graph JSON, IR after every pass, final IR, StableHLO, compile summary"),
    flag("debug", "TPUC_DEBUG", None, false, "log each compile (times, `cache=miss/memory/disk/shm/remote`) to stderr"),
    flag("verify_each", "TPUC_VERIFY_EACH", Some("--verify-each"), false, "verify the IR after every pass"),
    lowers(opt("precision", "TPUC_PRECISION", Some("--precision"), "from torch", "matmul / convolution precision `default`, `high` or `highest`; unset, `torch.get_float32_matmul_precision()` decides (`highest` → highest, `high` → high, `medium` → default), except on the TPU target, where torch's untouched `highest` (which cannot be told from a choice) means TPU's `default`, one bf16 pass, as TorchTPU does: set `precision` (or torch's `high`) for more")),
    lowers(opt("conv_precision", "TPUC_CONV_PRECISION", Some("--conv-precision"), "from torch", "convolution precision; unset: `precision` when set, else on the GPU target torch's `torch.backends.cudnn.allow_tf32` (true, torch's default → `default`, TF32) and elsewhere as matmuls")),
    lowers(flag("bf16", "TPUC_BF16", Some("--bf16"), false, "matmuls and convolutions in bf16 with f32 accumulation")),
    lowers(flag("allow_excess_precision", "TPUC_ALLOW_EXCESS_PRECISION", Some("--allow-excess-precision"), false, "drop round trips through narrower float types")),
    lowers(flag("fusion", "TPUC_FUSION", Some("--no-fusion"), true, "composites for attention, norms, GELU, RoPE, SwiGLU; off: plain StableHLO ops")),
    flag("no_recompile", "TPUC_NO_RECOMPILE", None, false, "after `tpuc.warmup(model, *examples)`, a compile raises a `TpucError` (kind `recompile`) naming the graph and the bucket"),
    opt("mesh", "TPUC_MESH", Some("--mesh"), "", "SPMD over a device mesh, e.g. `x=2,y=2` (see \"SPMD over a device mesh\")"),
    opt("shard_policy", "TPUC_SHARD_POLICY", Some("--shard-policy"), "", "with `mesh`: `dp`, `fsdp` or `tp`"),
    OptionSpec { name: "shard", env: None, flag: Some("--shard"), default: "", boolean: false, help: "with `mesh`: `{argument name: \"x,_\"}`, names as `dump_dir`'s IR shows them", lowers: false },
    flag("overlap", "TPUC_OVERLAP", None, true, "in a `torch.distributed` job: issue each collective as soon as its input exists, wait for it as late as possible; off: wait at once (to measure what overlap saves)"),
    flag("host_aliasing", "TPUC_HOST_ALIASING", Some("--no-host-aliasing"), true, "on the CPU plugin, read arguments and hand results over in host memory in place; off: copy every array across as an accelerator does (`tpuc.stats()`'s `h2d_bytes` / `d2h_bytes` count them)"),
    opt("buckets", "TPUC_BUCKETS", Some("--buckets"), "`auto`", "symbolic sizes: `auto`, `linear:K`, a list `128,256,512`, or `off` (one compile per shape)"),
];

/// Checks the value of option `name` given as a word (a `torch.compile` option or its `TPUC_*`
/// variable) with the parser its owner uses, and returns it normalized (trimmed, lower case,
/// a bucket list without spaces); the error names the option and the valid words. Options
/// without a word syntax of their own pass through.
pub fn normalize(name: &str, value: &str) -> Result<String, String> {
    use tpuc_ir::AttrEnum;
    let v = value.trim();
    let bad = |why: String| format!("option {name}={value:?}: {why}");
    match name {
        "target" => {
            let t: crate::Target = v.to_ascii_lowercase().parse().map_err(|e: tpuc_platform::UnknownTarget| bad(e.to_string()))?;
            Ok(t.name().to_string())
        }
        "precision" | "conv_precision" => {
            let p: crate::Precision = v.to_ascii_lowercase().parse().map_err(bad)?;
            Ok(p.name().to_string())
        }
        "buckets" => {
            let words = v.to_ascii_lowercase().replace(' ', "");
            if words != "off" {
                words.parse::<crate::buckets::BucketPolicy>().map_err(|e| bad(e.to_string()))?;
            }
            Ok(words)
        }
        "shard_policy" => {
            let w = v.to_ascii_lowercase();
            crate::spmd::ShardPolicy::parse(&w)
                .map(|p| p.name().to_string())
                .ok_or_else(|| bad(format!("expected one of {}", crate::spmd::ShardPolicy::NAMES.join(", "))))
        }
        "mesh" => {
            crate::spmd::parse_mesh(v).map_err(bad)?;
            Ok(v.to_string())
        }
        _ => Ok(value.to_string()),
    }
}

/// The cache settings, given as options `cache_<name>` for the variable `TPUC_CACHE_<NAME>`.
pub const CACHE_PREFIX: &str = "cache_";

/// The options table of the README and the Python package's docs.
pub fn markdown_table() -> String {
    let code = |s: &str| format!("`{s}`");
    let mut out = String::from("| option | environment | flag | default | |\n|---|---|---|---|---|\n");
    for o in OPTIONS {
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} |\n",
            code(o.name),
            o.env.map(code).unwrap_or_default(),
            o.flag.map(code).unwrap_or_default(),
            o.default,
            o.help
        ));
    }
    out.push_str("| `cache_*` | `TPUC_CACHE_*` | `--cache-*` | | the cache settings above, e.g. `cache_tier2=\"team\"`; read when the process first compiles |\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_variables_are_unique_and_follow_one_rule() {
        let mut names: Vec<&str> = OPTIONS.iter().map(|o| o.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), OPTIONS.len());
        for o in OPTIONS {
            if let Some(env) = o.env {
                assert_eq!(env, format!("TPUC_{}", o.name.to_ascii_uppercase()), "{}", o.name);
            }
            assert!(!o.name.starts_with(CACHE_PREFIX), "{}", o.name);
        }
    }

    /// A cache miss's explanation names every option that changes the lowering.
    #[test]
    fn every_lowering_option_is_in_the_summary() {
        let s = crate::LowerOptions::default().lowering_summary();
        let named: Vec<&str> = s.split(' ').filter_map(|kv| kv.split_once('=').map(|(k, _)| k)).collect();
        let lowering: Vec<&str> = OPTIONS.iter().filter(|o| o.lowers).map(|o| o.name).collect();
        assert_eq!(named, lowering, "{s}");
    }

    #[test]
    fn option_words_are_checked_by_their_owners_parsers() {
        assert_eq!(normalize("target", " GPU ").unwrap(), "gpu");
        assert!(normalize("target", "cuda").unwrap_err().contains("valid targets: cpu, tpu, gpu"));
        assert_eq!(normalize("precision", "High").unwrap(), "high");
        assert!(normalize("conv_precision", "tf32").unwrap_err().contains("conv_precision"));
        assert_eq!(normalize("buckets", "128, 256").unwrap(), "128,256");
        assert_eq!(normalize("buckets", "off").unwrap(), "off");
        assert!(normalize("buckets", "sometimes").is_err());
        assert_eq!(normalize("shard_policy", "FSDP").unwrap(), "fsdp");
        assert!(normalize("shard_policy", "zero").unwrap_err().contains("dp, fsdp, tp"));
        assert!(normalize("mesh", "x=two").is_err());
        assert_eq!(normalize("dump_dir", "/tmp/x").unwrap(), "/tmp/x");
    }

    /// The README's table is this table: change the options here, then paste
    /// `markdown_table()` (the test prints it on a mismatch).
    #[test]
    fn the_readme_table_is_the_options_table() {
        let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md")).unwrap();
        let table = markdown_table();
        assert!(readme.contains(&table), "README.md's options table differs from driver/src/options.rs; it should read:\n{table}");
    }
}
