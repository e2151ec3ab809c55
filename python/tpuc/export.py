"""Saving a `torch.export` program for the `tpuc` CLI with the names of its dims.

`torch.export.save` keeps torch's symbol names (`s27`) and drops the names given with
`torch.export.Dim("seq")`; `tpuc.save` writes them beside the program (the archive entry
`extra/tpuc_dim_names.json`, which torch ignores when loading), so the IR, errors and bucket
plans of `tpuc compile`/`run`/`plan-buckets` speak of `seq`.
"""

from __future__ import annotations

import json


def dim_names(ep) -> dict[str, str]:
    """torch's symbol name -> the user's `Dim` name, for the symbols of `ep` that have one."""
    shape_env = None
    for node in ep.graph.nodes:
        val = node.meta.get("val") if node.op == "placeholder" else None
        fake_mode = getattr(val, "fake_mode", None)
        if fake_mode is not None and fake_mode.shape_env is not None:
            shape_env = fake_mode.shape_env
            break
    if shape_env is None:
        return {}
    debug = getattr(shape_env, "source_name_to_debug_name", {}) or {}
    names = {}
    for sym in ep.range_constraints:
        for source in shape_env.var_to_sources.get(sym, ()):
            key = source.name() if callable(source.name) else source.name
            name = debug.get(key)
            if name:
                names[str(sym)] = name
                break
    return names


def save(ep, f, *, extra_files: dict | None = None, **kwargs) -> None:
    """`torch.export.save(ep, f, ...)` that also records the `Dim` names of `ep`'s symbols
    (see the module doc). Load it with `torch.export.load` or compile it with `tpuc`."""
    import torch.export

    extra = dict(extra_files or {})
    names = dim_names(ep)
    if names:
        extra["tpuc_dim_names.json"] = json.dumps(names, sort_keys=True)
    torch.export.save(ep, f, extra_files=extra, **kwargs)
