#!/usr/bin/env python3
"""The argument schemas of the ATen targets the importer registers, for tests/robustness.rs.

One line per target, tab-separated: the target as the registry names it, its arguments as
`name:Type` (`=` appended when the argument has a default), its return types. Targets without
an ATen schema (`_operator.*`, `math.*`, `torch.sym_*`) are left out; `torch.ops.NS.*` targets
of other namespaces (e.g. `_c10d_functional`) are looked up there.

Usage: .venv/bin/python make_op_schemas.py [OPS_DIR] > op_schemas.tsv (OPS_DIR defaults to
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

root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "src", "ops")
targets = []
for f in sorted(glob.glob(os.path.join(root, "**", "*.rs"), recursive=True)):
    m = re.search(r"pub(?:\(\w+\))? const OPS: &\[\(&str, OpFn\)\] = &\[(.*?)\n\];", open(f).read(), re.S)
    if m:
        targets += re.findall(r'\("([^"]+)",\s*[\w:]+\)', m.group(1))
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
    args = [f"{a.name}:{a.real_type}" + ("=" if a.has_default_value() else "") for a in s.arguments]
    rets = [str(r.real_type) for r in s.returns]
    lines.append(f"{t}\t{' '.join(args)}\t{' '.join(rets)}")
print("\n".join(lines))
