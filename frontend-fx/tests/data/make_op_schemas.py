#!/usr/bin/env python3
"""Two tables from the argument schemas of the ATen targets the importer registers.

`op_schemas.tsv` (the default output), for tests/robustness.rs: one line per target,
tab-separated: the target as the registry names it, its arguments as `name:Type` (`=` appended
when the argument has a default), its return types.

`--defaults`: the importer's defaults table (src/ops/build/defaults.tsv): one line per argument
whose schema default is not None, tab-separated: target, argument, kind (`bool`, `int`,
`float`, `ints`, `str`, `dtype`) and the value (`ints` comma-separated, `dtype` as the export
schema's ScalarType number). An omitted argument takes this value in every lowering.

Targets without an ATen schema (`_operator.*`, `math.*`, `torch.sym_*`) are left out;
`torch.ops.NS.*` targets of other namespaces (e.g. `_c10d_functional`) are looked up there.

Usage: .venv/bin/python make_op_schemas.py [--defaults] [OPS_DIR] > FILE (OPS_DIR defaults to
the crate's src/ops). Needs torch 2.15."""
import glob
import os
import re
import sys

import torch

try:  # transformers' grouped GEMM ops (torch.ops.transformers.*) are defined on import
    import transformers.integrations.moe  # noqa: F401
except ImportError:
    pass

argv = sys.argv[1:]
defaults = "--defaults" in argv
argv = [a for a in argv if a != "--defaults"]
root = argv[0] if argv else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "src", "ops")
targets = []
for f in sorted(glob.glob(os.path.join(root, "**", "*.rs"), recursive=True)):
    m = re.search(r"pub(?:\(\w+\))? const OPS: &\[\(&str, OpFn\)\] = &\[(.*?)\n\];", open(f).read(), re.S)
    if m:
        targets += re.findall(r'\("([^"]+)",\s*[\w:]+\)', m.group(1))
# torch's ScalarType numbering (c10), as a schema default holds it, to torch dtypes.
C10_DTYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16, torch.float32, torch.float64]


def default_row(t, a):
    """The defaults-table line of argument `a` of target `t`, or None (no default, None, or a
    kind the importer does not read)."""
    if not a.has_default_value() or a.default_value is None:
        return None
    v, ty = a.default_value, str(a.real_type)
    if isinstance(v, bool):
        kind, text = "bool", str(v).lower()
    elif ty == "Optional[ScalarType]":
        from torch._export.serde.serialize import _TORCH_TO_SERIALIZE_DTYPE

        kind, text = "dtype", str(_TORCH_TO_SERIALIZE_DTYPE[C10_DTYPES[v]].value)
    elif ty in ("MemoryFormat", "Layout", "Device"):
        return None
    elif isinstance(v, int):
        kind, text = "int", str(v)
    elif isinstance(v, float):
        kind, text = "float", repr(v)
    elif isinstance(v, (list, tuple)) and all(isinstance(e, int) and not isinstance(e, bool) for e in v):
        kind, text = "ints", ",".join(map(str, v))
    elif isinstance(v, str):
        kind, text = "str", v
    else:
        raise SystemExit(f"{t}: argument {a.name} has a default of a kind the table does not hold: {v!r} ({ty})")
    return f"{t}\t{a.name}\t{kind}\t{text}"


lines = []
for t in sorted(set(targets)):
    if t.startswith(("_operator.", "math.")) or (t.startswith("torch.") and not t.startswith("torch.ops.")):
        continue
    # `torch.ops.NS.op.overload` (other namespaces, e.g. _c10d_functional), else an aten op.
    ns, rest = (t[len("torch.ops."):].split(".", 1) if t.startswith("torch.ops.") else ("aten", t))
    name, ov = rest.split(".", 1)
    try:
        s = getattr(getattr(getattr(torch.ops, ns), name), ov)._schema
    except (AttributeError, RuntimeError):
        continue
    if defaults:
        lines += [r for r in (default_row(t, a) for a in s.arguments) if r is not None]
        continue
    args = [f"{a.name}:{a.real_type}" + ("=" if a.has_default_value() else "") for a in s.arguments]
    rets = [str(r.real_type) for r in s.returns]
    lines.append(f"{t}\t{' '.join(args)}\t{' '.join(rets)}")
print("\n".join(lines))
