"""Exceptions and warnings the backend raises. Errors about one FX node name it, its op and the
user's source line."""

from __future__ import annotations

import functools
import inspect
import re


class TpucError(RuntimeError):
    """A tpuc failure. `node`, `target` and `source` name the FX node, its op and the user's
    source line (`model.py:12 in forward`) when the error concerns one node; `kind` says what
    failed (`unsupported_op`, `op`, `lowering`, `plugin`, `internal`, ...).

    `nodes` lists every node the error concerns, in graph order, as dicts with `kind`, `node`,
    `target`, `source` and `message`: an import reports all the nodes it cannot import at once
    (`node`, `target`, `source` and `kind` are those of the first). It holds just the one node
    for an error about one node, and is empty otherwise."""

    def __init__(self, message: str, kind: str = "other", node: str | None = None,
                 target: str | None = None, source: str | None = None, graph: str | None = None,
                 nodes: list[dict] | None = None):
        super().__init__(message)
        self.kind = kind
        self.node = node
        self.target = target
        self.source = source
        self.graph = graph
        if nodes is None:
            nodes = [] if node is None else [
                {"kind": kind, "node": node, "target": target, "source": source, "message": message}]
        self.nodes = nodes


class TpucUnsupportedError(TpucError):
    """The graph has ops tpuc cannot compile and `strict` is on."""


class TpucFallbackWarning(UserWarning):
    """Some ops of a graph run in eager PyTorch because tpuc cannot compile them."""


_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')


def user_frame(stack_trace: str | None) -> str | None:
    """The innermost frame of an FX stack trace outside torch, as `file.py:LINE in func` (the
    same rule the Rust importer uses)."""
    if not stack_trace:
        return None
    frames = _FRAME.findall(stack_trace)
    if not frames:
        return None

    def in_torch(path: str) -> bool:
        return any(s in path for s in ("/site-packages/torch/", "/dist-packages/torch/", "/torch/nn/", "/torch/_"))

    pick = next((f for f in reversed(frames) if not in_torch(f[0])), frames[-1])
    return f"{pick[0].rsplit('/', 1)[-1]}:{pick[1]} in {pick[2]}"


def stack_trace(meta: dict) -> str | None:
    """A node's stack trace; for a node Dynamo recorded none for, the frame of the `forward`
    of the innermost module it was traced in. (Dynamo records frames of the user's code only,
    so the nodes of a torch.nn module compiled by itself, `torch.compile(nn.EmbeddingBag(...))`,
    and the backward nodes of such a module have none.)"""
    trace = meta.get("stack_trace")
    if trace:
        return trace
    stack = meta.get("nn_module_stack") or meta.get("fwd_nn_module_stack")
    if not stack:
        return None
    entry = list(stack.values())[-1]
    cls = entry[1] if isinstance(entry, (tuple, list)) and len(entry) > 1 else None
    return _forward_frame(cls) if isinstance(cls, type) else None


@functools.cache
def _forward_frame(cls: type) -> str | None:
    try:
        fn = inspect.unwrap(cls.forward)
        code = fn.__code__
    except (AttributeError, TypeError, ValueError):
        return None
    return f'  File "{code.co_filename}", line {code.co_firstlineno}, in {cls.__name__}.forward\n'


def node_source(node) -> str | None:
    return user_frame(stack_trace(node.meta))
