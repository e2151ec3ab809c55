"""Graphs with functional collectives inside a torch.distributed job (`torchrun`, one process
per rank): the collectives run in the job's own process group, the compute between them runs
as tpuc programs.

    aot graph with _c10d_functional ops (DTensor TP, SimpleFSDP, funcol code)
      └─ regions: every compute node is keyed by the collectives upstream of it and those
         downstream of it; nodes with one key form one region (a convex set: no path leaves
         a region and comes back), compiled as one tpuc program, weights resident
      └─ schedule: each collective is issued as soon as its input exists and waited at its
         `wait_tensor` as late as its first user allows, so that regions that do not depend
         on it run while it is in flight
      └─ run: the split graph runs node by node; collectives through torch's own ops (the
         transport is the job's: gloo here, NCCL or a TPU process group elsewhere)

Keying by both directions is what makes the overlap: in a backward, the gradient of a layer's
weights (downstream: that layer's reduce-scatter only) is a region of its own, so its
collective starts before the next layer's gradients are computed.

Every rank splits its own graph: nothing assumes that ranks compiled the same program (code
that branches on the rank gets its own programs on each rank). A rank whose compile fails
raises an error naming the rank and the graph; under torchrun the job then ends, since the
elastic agent stops every worker when one fails.
"""

from __future__ import annotations

import functools
import heapq
import time

import torch
import torch.fx

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


def regions(gm: torch.fx.GraphModule, eager: set[str]) -> list[list[torch.fx.Node]]:
    """The compute regions of `gm` around its collectives and the nodes in `eager` (names of
    nodes that run in eager PyTorch: unsupported ops), in graph order. A multi-output node's
    getitems join its region."""
    nodes = list(gm.graph.nodes)
    is_eager = {}
    for n in nodes:
        if n.op != "call_function":
            continue
        if is_getitem(n):
            src = n.args[0]
            is_eager[n] = is_eager.get(src, True) if isinstance(src, torch.fx.Node) else True
        else:
            is_eager[n] = is_collective(n) or n.name in eager
    # Bit sets over the eager nodes: which of them each node depends on, and which depend on it.
    bit = {n: 1 << k for k, n in enumerate(n for n in nodes if is_eager.get(n))}
    up: dict[torch.fx.Node, int] = {}
    for n in nodes:
        u = 0
        for i in n.all_input_nodes:
            u |= up[i] | bit.get(i, 0)
        up[n] = u
    down: dict[torch.fx.Node, int] = {}
    for n in reversed(nodes):
        d = 0
        for user in n.users:
            d |= down[user] | bit.get(user, 0)
        down[n] = d
    groups: dict[tuple[int, int], list[torch.fx.Node]] = {}
    key_of: dict[torch.fx.Node, tuple[int, int]] = {}
    for n in nodes:
        if n.op != "call_function" or is_eager.get(n):
            continue
        if is_getitem(n) and n.args[0] in key_of:
            key = key_of[n.args[0]]
        else:
            key = (up[n], down[n])
        key_of[n] = key
        groups.setdefault(key, []).append(n)
    return _merge(nodes, [_Region(k[0], k[1], g) for k, g in groups.items()])


# Ops whose cost is worth overlapping a collective with; a region without any is "light".
_HEAVY = ("mm", "bmm", "addmm", "baddbmm", "convolution", "_scaled_dot_product", "linear", "matmul", "einsum",
          "_flash_attention", "_efficient_attention", "convolution_backward")


class _Region:
    def __init__(self, up: int, down: int, nodes: list[torch.fx.Node]):
        self.up, self.down, self.nodes = up, down, nodes
        self.light = not any(n.op == "call_function" and
                             getattr(n.target, "__name__", "").split(".")[0].startswith(_HEAVY) for n in nodes)


def _merge(nodes: list[torch.fx.Node], regions: list[_Region]) -> list[list[torch.fx.Node]]:
    """Fewer, larger regions. In a topological order of the regions, each joins the one before
    it where that keeps the split graph acyclic (no node outside the two on a path from one to
    the other) and costs no overlap: the earlier one does not newly wait for a collective
    unless it is light, and no collective that only one of them feeds waits for the other's
    heavy compute."""
    # Units: the regions, then every other node (collectives, eager ops, placeholders).
    unit_of: dict[torch.fx.Node, int] = {}
    for k, r in enumerate(regions):
        for n in r.nodes:
            unit_of[n] = k
    count = len(regions)
    for n in nodes:
        if n not in unit_of:
            unit_of[n] = count
            count += 1
    preds: list[set[int]] = [set() for _ in range(count)]
    for n in nodes:
        u = unit_of[n]
        for i in n.all_input_nodes:
            if unit_of[i] != u:
                preds[u].add(unit_of[i])
    # Ancestors of every unit (bit sets), in a topological order of the units.
    first = {}
    for pos, n in enumerate(nodes):
        first.setdefault(unit_of[n], pos)
    indegree = [len(p) for p in preds]
    succs: list[list[int]] = [[] for _ in range(count)]
    for u, ps in enumerate(preds):
        for v in ps:
            succs[v].append(u)
    ready = [(first[u], u) for u in range(count) if indegree[u] == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        _, u = heapq.heappop(ready)
        order.append(u)
        for w in succs[u]:
            indegree[w] -= 1
            if indegree[w] == 0:
                heapq.heappush(ready, (first[w], w))
    if len(order) != count:  # cannot happen for keyed regions: keep them as they are
        return [r.nodes for r in regions]
    anc = [0] * count
    for u in order:
        for v in preds[u]:
            anc[u] |= anc[v] | (1 << v)
    alive = {k: True for k in range(len(regions))}
    last = None
    for u in order:
        if u >= len(regions):
            continue
        if last is not None:
            cur, r = regions[last], regions[u]
            between = anc[u] & ~(1 << last)
            cycle = any(between >> x & 1 and anc[x] >> last & 1 for x in range(count))
            extra_waits = r.up & ~cur.up
            # Collectives one part feeds and the other does not: in one program they would
            # wait for the other part's compute too.
            delayed_by_r, delayed_by_cur = cur.down & ~r.down, r.down & ~cur.down
            if not cycle and (not extra_waits or cur.light) and (not delayed_by_r or r.light) \
                    and (not delayed_by_cur or cur.light):
                cur.nodes.extend(r.nodes)
                cur.up |= r.up
                cur.down |= r.down
                cur.light = cur.light and r.light
                alive[u] = False
                merged = anc[last] | anc[u]
                bl, bu = 1 << last, 1 << u
                anc[last] = merged & ~(bl | bu)
                for x in range(count):
                    if anc[x] & (bl | bu):
                        anc[x] = (anc[x] | anc[last] | bl) & ~bu
                continue
        last = u
    return [regions[k].nodes for k in range(len(regions)) if alive[k]]


def schedule(gm: torch.fx.GraphModule, overlap: bool = True) -> None:
    """Reorders `gm`'s nodes (a topological order still): collectives as early as their inputs
    allow, compute that feeds one before other compute, waits as late as their users allow,
    everything else in its order. Without
    `overlap`, each wait follows its collective at once (what running every collective as its
    own step costs; for measurements). Every collective call is timed into
    `stats()["collective_blocked_ns"]`: the host time spent issuing and waiting for them."""
    graph = gm.graph
    nodes = list(graph.nodes)
    position = {n: k for k, n in enumerate(nodes)}
    indegree = {n: len(set(n.all_input_nodes)) for n in nodes}
    ready: list[tuple[int, int, torch.fx.Node]] = []

    def feeds_collective(n: torch.fx.Node) -> bool:
        return any(is_collective(u) or (is_getitem(u) and feeds_collective(u)) for u in n.users)

    def rank(n: torch.fx.Node) -> int:
        if n.op == "placeholder":
            return 0
        if n.op == "output":
            return 5
        if is_wait(n):
            return 4
        if is_collective(n) or (is_getitem(n) and is_collective(n.args[0])):
            return 1
        # Compute a collective waits for goes first, so the collective is in flight while the
        # rest runs.
        return 2 if feeds_collective(n) else 3

    def push(n):
        heapq.heappush(ready, (rank(n), position[n], n))

    for n in nodes:
        if indegree[n] == 0:
            push(n)
    order = []
    while ready:
        _, _, n = heapq.heappop(ready)
        order.append(n)
        for user in n.users:
            indegree[user] -= 1
            if indegree[user] == 0:
                push(user)
    if len(order) != len(nodes):  # a cycle cannot be: leave the graph as it is
        return
    # The first node stays (a placeholder: nothing precedes it); every other follows the one
    # before it in the new order.
    for prev, n in zip(order, order[1:]):
        prev.append(n)
    if not overlap:
        for n in list(graph.nodes):
            if is_wait(n) and isinstance(n.args[0], torch.fx.Node):
                n.args[0].append(n)
    for n in graph.nodes:
        if is_collective(n):
            n.target = _timed(n.target)
    graph.lint()
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
