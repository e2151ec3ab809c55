"""`tpuc.precision(...)`: the matmul / convolution precision of one region of a model.

    with tpuc.precision("highest"):
        logits = self.head(h)       # these matmuls at f32 accuracy on TPU (six bf16 passes)

The region's nodes carry the annotation `{"tpuc.precision": ...}` through Dynamo and
aot_autograd as FX node metadata (`torch.fx.traceback.annotate`), so it costs no graph break;
their backward nodes carry it too. Inside the region it overrides the graph's policy (the
`precision` option or `torch.get_float32_matmul_precision()`) and the `bf16` option; regions
nest, the innermost wins. The precision is part of the compiled program, so changing it
compiles again (a cache miss). Outside torch.compile it has no effect (eager keeps its own
precision).
"""

from __future__ import annotations

import contextlib

PRECISIONS = ("default", "high", "highest")


@contextlib.contextmanager
def precision(value: str):
    """Scopes the matmul / convolution precision (`default`, `high` or `highest`) of the code
    inside the `with` block in graphs compiled by tpuc."""
    if value not in PRECISIONS:
        raise ValueError(f"tpuc.precision({value!r}): expected one of {', '.join(PRECISIONS)}")
    import torch.fx.traceback

    with torch.fx.traceback.annotate({"tpuc.precision": value}):
        yield
