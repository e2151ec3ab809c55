"""Backend options: `torch.compile(..., options={...})`, else `TPUC_*` environment variables,
else defaults.

| option | env | default | meaning |
|---|---|---|---|
| target | TPUC_TARGET | cpu | `cpu` (run here) or `tpu` (compile for `topology`) |
| topology | TPUC_TOPOLOGY | - | TPU topology, e.g. `v5e:2x2` |
| plugin | TPUC_PLUGIN | discovered | PJRT plugin file for the target |
| strict | TPUC_STRICT | 0 | raise instead of running unsupported ops eagerly |
| dump_dir | TPUC_DUMP_DIR | - | write every graph (FX, JSON, IR per pass, StableHLO, summary) here |
| debug | TPUC_DEBUG | 0 | log every compile (with its cache source) to stderr |
| verify_each | TPUC_VERIFY_EACH | 0 | verify the IR after every pass |
| precision | TPUC_PRECISION | from torch | matmul/convolution precision: `default` (TPU: one bf16 pass), `high` (3 passes), `highest` (6; f32 accuracy); unset: `torch.get_float32_matmul_precision()` (`highest` → highest, `high` → high, `medium` → default), except that on the TPU target torch's untouched `highest` means TPU's `default` (TorchTPU's bf16-pass default), so set `precision="highest"` or `high` to ask for more |
| bf16 | TPUC_BF16 | 0 | matmuls and convolutions in bf16 with f32 accumulation |
| allow_excess_precision | TPUC_ALLOW_EXCESS_PRECISION | 0 | drop round trips through narrower float types |
| fusion | TPUC_FUSION | 1 | composites for attention, norms, GELU, RoPE, SwiGLU (0: plain ops) |
| no_recompile | TPUC_NO_RECOMPILE | 0 | after `tpuc.warmup(...)`, any compile raises (naming the graph and bucket) |
| mesh | TPUC_MESH | - | run every graph as an SPMD program over a device mesh, e.g. `x=2,y=2` (CPU: that many devices in this process; TPU: one partition per chip) |
| shard_policy | TPUC_SHARD_POLICY | - | with `mesh`: `dp`, `fsdp` or `tp` (see the README's SPMD section) |
| shard | - | - | with `mesh`: `{argument name: "x,_"}` for arguments the policy should not decide (names as in `dump_dir`'s IR) |
| overlap | TPUC_OVERLAP | 1 | in a torch.distributed job: issue each collective as soon as its input exists and wait for it as late as possible (0: wait at once; for measuring what overlap saves) |
| buckets | TPUC_BUCKETS | auto | graphs with symbolic sizes: `auto`, `linear:K` or a list `128,256,512` (padded buckets, compiled as sizes arrive), or `off` (one compile per shape) |
| cache_* | TPUC_CACHE_* | - | executable cache settings, passed to the driver as `TPUC_CACHE_*` |

Cache options (`cache_tier2="job"`, `cache_tier2_root="/dev/shm/tpuc"`, `cache_tier3_root=...`,
`cache_memory_max_bytes`, ...) are exported as the environment variables of the same name, which
the driver's cache reads when it is first used in the process.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

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
    bf16: bool = False
    allow_excess_precision: bool = False
    fusion: bool = True
    overlap: bool = True
    mesh: str | None = None
    shard_policy: str | None = None
    shard: tuple[tuple[str, str], ...] = ()
    # TPUC_CACHE_* settings given as options (name without the TPUC_ prefix, lower case).
    cache: tuple[tuple[str, str], ...] = ()

    @staticmethod
    def resolve(options: dict[str, Any] | None = None, env: dict[str, str] | None = None) -> "Options":
        env = os.environ if env is None else env
        options = dict(options or {})
        fields = {f.name for f in dataclasses.fields(Options)} - {"cache"}
        values: dict[str, Any] = {}
        for name in fields - {"shard"}:
            raw = env.get(f"TPUC_{name.upper()}")
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
        for name in ("strict", "debug", "verify_each", "no_recompile", "bf16", "allow_excess_precision", "fusion", "overlap"):
            if name in values:
                values[name] = _as_bool(name, values[name])
        if "target" in values:
            t = str(values["target"]).lower()
            if t not in ("cpu", "tpu"):
                raise ValueError(f"tpuc: option target={values['target']!r}: expected 'cpu' or 'tpu'")
            values["target"] = t
        if "buckets" in values:
            b = values["buckets"]
            values["buckets"] = ",".join(str(x) for x in b) if isinstance(b, (list, tuple)) else str(b).strip().lower()
            if values["buckets"] != "off":
                from . import _C

                try:
                    _C.select_bucket(values["buckets"], 1, 1)
                except Exception as e:
                    raise ValueError(f"tpuc: option buckets={b!r}: {e}") from None
        if "precision" in values:
            p = values["precision"]
            p = None if p in ("", None) else str(p).strip().lower()
            if p not in (None, "default", "high", "highest"):
                raise ValueError(f"tpuc: option precision={values['precision']!r}: expected 'default', 'high' or 'highest'")
            values["precision"] = p
        if "shard" in values:
            sh = values["shard"]
            if not isinstance(sh, dict):
                raise ValueError(f"tpuc: option shard={sh!r}: expected a dict of argument name -> axes ('x,_')")
            values["shard"] = tuple(sorted((str(k), str(v)) for k, v in sh.items()))
        if "shard_policy" in values and values["shard_policy"] not in (None, ""):
            values["shard_policy"] = str(values["shard_policy"]).strip().lower()
            if values["shard_policy"] not in ("dp", "fsdp", "tp"):
                raise ValueError(f"tpuc: option shard_policy={values['shard_policy']!r}: expected 'dp', 'fsdp' or 'tp'")
        for name in ("topology", "plugin", "dump_dir", "mesh", "shard_policy"):
            if name in values and values[name] in ("", None):
                values[name] = None
            elif name in values:
                values[name] = str(values[name])
        opts = Options(cache=tuple(cache), **values)
        if opts.target == "tpu" and not opts.topology:
            raise ValueError("tpuc: target='tpu' needs a topology (e.g. options={'topology': 'v5e:2x2'} or TPUC_TOPOLOGY)")
        if (opts.shard or opts.shard_policy) and not opts.mesh:
            raise ValueError("tpuc: options shard and shard_policy need a mesh (e.g. options={'mesh': 'x=2,y=2'})")
        if opts.target == "cpu" and opts.topology:
            raise ValueError("tpuc: topology applies to target='tpu' only")
        return opts

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
    "cpu": ("lammps_jax_pjrt_cpu", "pjrt_c_api_cpu_plugin.so"),
    "tpu": ("libtpu", "libtpu.so"),
}
_plugin_cache: dict[str, str | None] = {}


def _installed_plugin(target: str) -> str | None:
    if target not in _plugin_cache:
        import importlib.util

        package, file = _PLUGIN_FILES[target]
        found = None
        spec = importlib.util.find_spec(package)
        if spec is not None and spec.submodule_search_locations:
            for d in spec.submodule_search_locations:
                path = os.path.join(d, file)
                if os.path.isfile(path):
                    found = path
                    break
        _plugin_cache[target] = found
    return _plugin_cache[target]
