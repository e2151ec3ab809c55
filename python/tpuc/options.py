"""Backend options: `torch.compile(..., options={...})`, else `TPUC_*` environment variables,
else defaults.

Each option's name, variable, `tpuc` flag, default and meaning are declared once, in the
driver (`driver/src/options.rs`); `SPECS` and the table below come from there, and the README
shows the same table.

Cache options (`cache_tier2="job"`, `cache_tier2_root="/dev/shm/tpuc"`, `cache_tier3_root=...`,
`cache_memory_max_bytes`, ...) are exported as the environment variables of the same name, which
the driver's cache reads when it is first used in the process.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, NamedTuple

from . import _C


class Spec(NamedTuple):
    """One option as the driver declares it."""

    name: str
    env: str | None
    flag: str | None
    default: str
    boolean: bool
    help: str


_specs, _table = _C.option_specs()
SPECS: dict[str, Spec] = {s[0]: Spec(*s) for s in _specs}
__doc__ += "\n" + _table

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")


@dataclasses.dataclass(frozen=True)
class Options:
    target: str = "cpu"
    topology: str | None = None
    plugin: str | None = None
    strict: bool = False
    dump_dir: str | None = None
    debug: bool = False
    verify_each: bool = False
    buckets: str = "auto"
    no_recompile: bool = False
    precision: str | None = None
    conv_precision: str | None = None
    bf16: bool = False
    allow_excess_precision: bool = False
    fusion: bool = True
    overlap: bool = True
    host_aliasing: bool = True
    mesh: str | None = None
    shard_policy: str | None = None
    shard: tuple[tuple[str, str], ...] = ()
    # TPUC_CACHE_* settings given as options (name without the TPUC_ prefix, lower case).
    cache: tuple[tuple[str, str], ...] = ()

    @staticmethod
    def resolve(options: dict[str, Any] | None = None, env: dict[str, str] | None = None) -> "Options":
        env = os.environ if env is None else env
        options = dict(options or {})
        fields = set(SPECS)
        values: dict[str, Any] = {}
        for name, spec in SPECS.items():
            raw = env.get(spec.env) if spec.env else None
            if raw is not None:
                values[name] = raw
        cache = []
        for key, value in options.items():
            if key.startswith("cache_"):
                cache.append((f"TPUC_{key.upper()}", "" if value is None else str(value)))
            elif key in fields:
                values[key] = value
            else:
                known = ", ".join(sorted(fields | {"cache_tier2", "cache_tier2_root", "cache_tier3_root", "..."}))
                raise ValueError(f"tpuc: unknown option {key!r} (known: {known})")
        for name in values:
            if SPECS[name].boolean:
                values[name] = _as_bool(name, values[name])
        if "buckets" in values and isinstance(values["buckets"], (list, tuple)):
            values["buckets"] = ",".join(str(x) for x in values["buckets"])
        # Words are checked by the driver's parsers (`_C.normalize_option`), the one place that
        # knows them; an empty value leaves an option unset.
        for name in ("target", "buckets", "precision", "conv_precision", "shard_policy", "mesh"):
            if name in values:
                v = values[name]
                values[name] = None if v in ("", None) else _C.normalize_option(name, str(v))
        if values.get("target") is None:
            values.pop("target", None)
        if values.get("buckets") is None:
            values.pop("buckets", None)
        if "shard" in values:
            sh = values["shard"]
            if not isinstance(sh, dict):
                raise ValueError(f"tpuc: option shard={sh!r}: expected a dict of argument name -> axes ('x,_')")
            values["shard"] = tuple(sorted((str(k), str(v)) for k, v in sh.items()))
        for name in ("topology", "plugin", "dump_dir", "mesh", "shard_policy"):
            if name in values and values[name] in ("", None):
                values[name] = None
            elif name in values:
                values[name] = str(values[name])
        opts = Options(cache=tuple(cache), **values)
        if opts.target == "tpu" and not opts.topology and not _C.tpu_chips_here():
            raise ValueError("tpuc: target='tpu' needs a topology (e.g. options={'topology': 'v5e:2x2'} or TPUC_TOPOLOGY)")
        if (opts.shard or opts.shard_policy) and not opts.mesh:
            raise ValueError("tpuc: options shard and shard_policy need a mesh (e.g. options={'mesh': 'x=2,y=2'})")
        if opts.target != "tpu" and opts.topology:
            raise ValueError("tpuc: topology applies to target='tpu' only")
        return opts

    def conv_precision_value(self) -> str | None:
        """The convolution precision to compile with: the `conv_precision` option; else, on the
        GPU target, torch's `torch.backends.cudnn.allow_tf32` (True, its default: `default`,
        TF32) unless `precision` was set; else None (convolutions follow `precision`)."""
        if self.conv_precision is not None:
            return self.conv_precision
        if self.target == "gpu" and self.precision is None:
            import torch

            return "default" if torch.backends.cudnn.allow_tf32 else "highest"
        return None

    def apply_host_aliasing(self) -> None:
        """Sets the process-wide host aliasing of the runtime (see the `host_aliasing` option)."""
        _C.set_host_aliasing(self.host_aliasing)

    def matmul_precision(self) -> str | None:
        """The precision to compile with: the `precision` option, else torch's global
        `torch.get_float32_matmul_precision()` (`highest` -> highest, `high` -> high, `medium` ->
        default). On the TPU target torch's untouched `highest` cannot be told from a choice and
        means TPU's `default` (one bf16 pass, as TorchTPU does); None there lets the pipeline
        use the target's default."""
        if self.precision is not None:
            return self.precision
        import torch

        p = torch.get_float32_matmul_precision()
        if self.target == "tpu" and p == "highest":
            return None
        return {"highest": "highest", "high": "high", "medium": "default"}.get(p)

    def plugin_path(self) -> str | None:
        """The plugin file: the `plugin` option, else the target's `TPUC_PJRT_*_PLUGIN`, else the
        plugin package installed in this Python (the driver's own discovery looks at the
        executable's and the working directory's `.venv`, which a Python process may not
        share), else None (the driver discovers it)."""
        if self.plugin:
            return self.plugin
        if os.environ.get(f"TPUC_PJRT_{self.target.upper()}_PLUGIN") or os.environ.get("TPUC_PJRT_PLUGIN"):
            return None
        return _installed_plugin(self.target)

    def apply_cache_env(self) -> None:
        """Exports the cache options for the driver's cache (read when it is first used)."""
        for key, value in self.cache:
            os.environ[key] = value


def _as_bool(name: str, v: Any) -> bool:
    if isinstance(v, bool):
        return v
    s = str(v).strip().lower()
    if s in _TRUE:
        return True
    if s in _FALSE:
        return False
    raise ValueError(f"tpuc: option {name}={v!r}: expected a boolean (1/0, true/false)")


_PLUGIN_FILES = {
    "cpu": [("lammps_jax_pjrt_cpu", "pjrt_c_api_cpu_plugin.so")],
    "tpu": [("libtpu", "libtpu.so")],
    "gpu": [("jax_plugins.xla_cuda13", "xla_cuda_plugin.so"), ("jax_plugins.xla_cuda12", "xla_cuda_plugin.so")],
}
_plugin_cache: dict[str, str | None] = {}


def _installed_plugin(target: str) -> str | None:
    if target not in _plugin_cache:
        import importlib.util

        found = None
        for package, file in _PLUGIN_FILES[target]:
            try:
                spec = importlib.util.find_spec(package)
            except ImportError:
                spec = None
            if spec is not None and spec.submodule_search_locations:
                for d in spec.submodule_search_locations:
                    path = os.path.join(d, file)
                    if os.path.isfile(path):
                        found = path
                        break
            if found:
                break
        _plugin_cache[target] = found
    return _plugin_cache[target]
