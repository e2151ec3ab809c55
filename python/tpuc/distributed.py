"""Graphs with functional collectives inside a torch.distributed job (`torchrun`, one process
per rank): the collectives run in the job's own process group, the compute between them runs
as tpuc programs.

    aot graph with _c10d_functional ops (DTensor TP, SimpleFSDP, funcol code)
      └─ regions: the compute between the collectives, cut so that it overlaps them, each
         compiled as one tpuc program, weights resident
      └─ schedule: each collective issued as soon as its input exists and waited at its
         `wait_tensor` as late as its first user allows
      └─ run: the split graph runs node by node; collectives through torch's own ops (the
         transport is the job's: gloo here, NCCL or a TPU process group elsewhere)

Both decisions are the compiler's (`driver/src/job_graph.rs`): this module hands it the FX
graph's node table and applies its answer.

Every rank splits its own graph: nothing assumes that ranks compiled the same program (code
that branches on the rank gets its own programs on each rank). A rank whose compile fails
raises an error naming the rank and the graph; under torchrun the job then ends, since the
elastic agent stops every worker when one fails.
"""

from __future__ import annotations

import functools
import time

import torch
import torch.fx

from . import _C
from .serialize import is_getitem
from .stats import STATS

COLLECTIVE_NAMESPACE = "_c10d_functional"


def is_collective(node: torch.fx.Node) -> bool:
    return node.op == "call_function" and str(getattr(node.target, "namespace", "")) == COLLECTIVE_NAMESPACE


def is_wait(node: torch.fx.Node) -> bool:
    return is_collective(node) and getattr(node.target, "__name__", "").startswith("wait_tensor")


def has_collectives(gm: torch.fx.GraphModule) -> bool:
    return any(is_collective(n) for n in gm.graph.nodes)


def in_job() -> bool:
    """True in a process of a real torch.distributed job (not the "fake" tracing group that
    `run_ranks` and tests use)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return False
    try:
        return dist.get_backend() != "fake"
    except Exception:
        return False


def rank_label() -> str | None:
    """`rank R of W` inside a torch.distributed job, else None."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return f"rank {dist.get_rank()} of {dist.get_world_size()}"
    return None


def _table(gm: torch.fx.GraphModule, eager: set[str] = frozenset()):
    """`gm`'s node table for `_C.JobGraph`, and its nodes in graph order."""
    nodes = list(gm.graph.nodes)
    index = {n: k for k, n in enumerate(nodes)}
    table = _C.JobGraph()
    K = _C.NodeKind
    for n in nodes:
        if n.op == "placeholder":
            kind = K.Placeholder
        elif n.op == "output":
            kind = K.Output
        elif n.op != "call_function":
            kind = K.Other
        elif is_getitem(n):
            kind = K.Getitem
        elif is_wait(n):
            kind = K.Wait
        elif is_collective(n):
            kind = K.Collective
        else:
            kind = K.Eager if n.name in eager else K.Compute
        table.add(kind, getattr(n.target, "__name__", "") if kind is not K.Other else "",
                  [index[i] for i in n.all_input_nodes])
    return table, nodes


def regions(gm: torch.fx.GraphModule, eager: set[str]) -> list[list[torch.fx.Node]]:
    """The compute regions of `gm` around its collectives and the nodes in `eager` (names of
    nodes that run in eager PyTorch: unsupported ops), each compiled as one program
    (`tpuc_driver::job_graph::regions` decides them)."""
    table, nodes = _table(gm, eager)
    return [[nodes[k] for k in region] for region in table.regions()]


def schedule(gm: torch.fx.GraphModule, overlap: bool = True) -> None:
    """Puts `gm`'s nodes in the order `tpuc_driver::job_graph::schedule` gives: collectives as
    early as their inputs allow, waits as late as their users allow (without `overlap`, each
    wait right after its collective, for measurements). Every collective call is timed into
    `stats()["collective_blocked_ns"]`: the host time spent issuing and waiting for them."""
    table, nodes = _table(gm)
    order = table.schedule(overlap)
    if order is None:  # a cycle cannot be: leave the graph as it is
        return
    # The first node stays (a placeholder: nothing precedes it); every other follows the one
    # before it in the new order.
    for prev, n in zip(order, order[1:]):
        nodes[prev].append(nodes[n])
    for n in gm.graph.nodes:
        if is_collective(n):
            n.target = _timed(n.target)
    gm.graph.lint()
    gm.recompile()


@functools.cache
def _timed(op):
    """`op` (a collective or its wait), counting the time spent in it."""

    def call(*args, **kwargs):
        t0 = time.perf_counter_ns()
        try:
            return op(*args, **kwargs)
        finally:
            STATS["collective_blocked_ns"] += time.perf_counter_ns() - t0

    call.__name__ = call.__qualname__ = f"timed_{getattr(op, '__name__', 'collective').replace('.', '_')}"
    call.__module__ = __name__
    return call
