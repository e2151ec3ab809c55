"""Per-rank programs in one process: code written for N ranks with PyTorch's functional
collectives, run by `torch.compile(backend="tpuc")` on N devices at once.

    outs = tpuc.run_ranks(compiled_fn, [args_of_rank_0, args_of_rank_1, ...])

The function is traced once, on rank 0's arguments, under a process group of N ranks (the
"fake" backend when none is set up: it only traces, nothing is sent anywhere). Each graph tpuc
compiles during the call becomes one executable with N replicas, one per device; its
`_c10d_functional` collectives are XLA collectives between the devices. Every graph argument is
resolved per rank:

- a tensor among the function's arguments takes each rank's own value (found by identity in
  rank 0's arguments);
- a tensor an earlier graph of the same call returned takes that graph's per-rank results;
- a parameter or buffer of a module is the same on every rank.

Anything else (a tensor computed by eager code between two graphs, after a graph break) has no
per-rank value, and the call raises rather than use rank 0's value for all ranks: compile with
`fullgraph=True`. The function's results must be graph results or arguments; `run_ranks`
returns one result per rank.

A graph with symbolic sizes (a batch or length that changes between calls) is compiled once
per bucket, as on one device: each rank's arguments are padded to the bucket and its results
cut to their real sizes; where a collective moves data along a padded dim, once per shape.

DTensor arguments (a module parallelized with `parallelize_module`, its per-rank parameters
from `rank_parameters`) are resolved through their local tensors, which aot_autograd hands the
compiled graphs; subclass results are rebuilt around each rank's local results.

A training step runs per rank when `fn` calls `loss.backward()`: the backward graph runs on
every rank, rank 0's gradients go back to autograd and the other ranks' are accumulated into
the `.grad` of their own leaf tensors (see `RankedGraph` in `backend.py`).

A graph that updates an argument in place (an optimizer step, batch-norm statistics) updates
every rank's own tensor; a tensor shared by all ranks must get the same value on each.

Process groups: the world is all ranks. Another group (a DeviceMesh dimension, `new_group`)
is resolved from rank 0's members by translation (`[0, 2]` of 4 ranks: groups `0,2` and
`1,3`), or given with `groups={"name": [[0, 2], [1, 3]]}`.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Sequence

import torch
import torch.utils._pytree as pytree
from torch.utils._python_dispatch import is_traceable_wrapper_subclass

from .errors import TpucError

_ACTIVE = threading.local()


def key(t: torch.Tensor) -> tuple:
    """What identifies a tensor across views of it (`detach()`, aot's output aliases)."""
    return (t.data_ptr(), tuple(t.shape), tuple(t.stride()), t.dtype)


class RankBatch:
    """One `run_ranks` call: the rank count, the process groups, and for every tensor rank 0
    has seen (arguments, graph results) its value on each rank."""

    def __init__(self, ranks: int, groups: dict[str, list[list[int]]]):
        self.ranks = ranks
        self.groups = groups
        self._values: dict[tuple, list[torch.Tensor]] = {}
        self._ambiguous: set[tuple] = set()
        # Tensors inside a tensor-subclass argument (a DTensor's local shard): the subclass
        # tensor on every rank and the attribute holding this one.
        self.inner: dict[tuple, tuple[list[torch.Tensor], str]] = {}

    def add(self, rank0: torch.Tensor, per_rank: list[torch.Tensor]) -> None:
        k = key(rank0)
        old = self._values.get(k)
        if old is not None and any(a is not b for a, b in zip(old, per_rank)):
            self._ambiguous.add(k)
        self._values[k] = per_rank

    def per_rank(self, t: torch.Tensor, what: str, replicated: bool) -> list[torch.Tensor]:
        """`t`'s value on every rank. `replicated`: a module's parameter or buffer."""
        k = key(t)
        if k in self._ambiguous:
            raise TpucError(f"tpuc: run_ranks: {what} is one tensor in rank 0's arguments but several on other ranks",
                            kind="ranks")
        found = self._values.get(k)
        if found is not None:
            return found
        if replicated:
            return [t] * self.ranks
        raise TpucError(
            f"tpuc: run_ranks: {what} ({tuple(t.shape)}, {t.dtype}) is neither an argument of the function nor a result "
            "of an earlier compiled graph (eager code between graphs has no per-rank values): compile with fullgraph=True",
            kind="ranks")


def active() -> RankBatch | None:
    """The batch of the `run_ranks` call in progress on this thread, if any."""
    return getattr(_ACTIVE, "batch", None)


def run_ranks(fn: Callable, per_rank_args: Sequence[Any], *, groups: dict[str, Sequence[Sequence[int]]] | None = None) -> list:
    """Runs `fn` (a function or module compiled with `torch.compile(..., backend="tpuc")`) as
    `len(per_rank_args)` ranks on as many devices: `per_rank_args[r]` is rank r's argument
    tuple (a single tensor is one argument). Every rank's arguments must have the same
    structure, shapes and dtypes. Returns rank r's result at index r."""
    import torch.distributed as dist

    n = len(per_rank_args)
    if n < 1:
        raise ValueError("tpuc: run_ranks needs the arguments of one rank at least")
    calls = [a if isinstance(a, tuple) else (a,) for a in per_rank_args]
    flat0, spec0 = pytree.tree_flatten(calls[0])
    flats = [flat0]
    for r, a in enumerate(calls[1:], 1):
        flat, spec = pytree.tree_flatten(a)
        if spec != spec0:
            raise ValueError(f"tpuc: run_ranks: rank {r}'s arguments differ in structure from rank 0's")
        for i, (x, y) in enumerate(zip(flat0, flat)):
            if isinstance(x, torch.Tensor) != isinstance(y, torch.Tensor) or (
                    isinstance(x, torch.Tensor) and (x.shape != y.shape or x.dtype != y.dtype)):
                what = f"{tuple(y.shape)} {y.dtype}" if isinstance(y, torch.Tensor) else type(y).__name__
                want = f"{tuple(x.shape)} {x.dtype}" if isinstance(x, torch.Tensor) else type(x).__name__
                raise ValueError(f"tpuc: run_ranks: rank {r}'s argument leaf {i} is {what}, rank 0's is {want}: "
                                 "every rank runs the same program")
        flats.append(flat)
    _ensure_world(n)
    batch = RankBatch(n, {str(k): [list(map(int, g)) for g in v] for k, v in (groups or {}).items()})
    for i, x in enumerate(flat0):
        if isinstance(x, torch.Tensor):
            _add_with_inner(batch, x, [f[i] for f in flats])
    if active() is not None:
        raise TpucError("tpuc: run_ranks calls do not nest", kind="ranks")
    _ACTIVE.batch = batch
    try:
        out = fn(*calls[0])
    finally:
        _ACTIVE.batch = None
    leaves, spec = pytree.tree_flatten(out)
    per_leaf = [_per_rank_result(batch, x, f"result leaf {i}") if isinstance(x, torch.Tensor) else [x] * n
                for i, x in enumerate(leaves)]
    return [pytree.tree_unflatten([p[r] for p in per_leaf], spec) for r in range(n)]


def rank_parameters(module: torch.nn.Module, full: dict[str, torch.Tensor]) -> list[dict[str, torch.Tensor]]:
    """Every rank's parameters and buffers of a module parallelized with DTensor
    (`parallelize_module`, `distribute_tensor`), for `run_ranks` through
    `torch.func.functional_call`. In one process the module's DTensors hold rank 0's shards
    only; `full` (the unsharded state dict, e.g. taken before `parallelize_module`) supplies the
    values, cut for rank r as DTensor places them (`Shard(d)`: `torch.chunk` along `d` at the
    rank's mesh coordinate; `Replicate()`: whole). Plain tensors are the same on every rank."""
    from torch.distributed.tensor import DTensor

    state = dict(module.named_parameters())
    state.update(module.named_buffers())
    missing = sorted(set(state) - set(full))
    if missing:
        raise ValueError(f"tpuc: rank_parameters: `full` has no value for {', '.join(missing)}")
    ranks = None
    out: list[dict[str, torch.Tensor]] = []
    for name, p in state.items():
        if not isinstance(p, DTensor):
            continue
        mesh, placements = p.device_mesh, p.placements
        grid = mesh.mesh
        if ranks is None:
            ranks = grid.numel()
            out = [{} for _ in range(ranks)]
        elif grid.numel() != ranks:
            raise ValueError(f"tpuc: rank_parameters: `{name}` is placed on {grid.numel()} ranks, others on {ranks}")
        value = full[name].detach()
        if tuple(value.shape) != tuple(p.shape):
            raise ValueError(f"tpuc: rank_parameters: `{name}` is {tuple(p.shape)}, `full` holds {tuple(value.shape)}")
        for r in range(ranks):
            coord = [int(c) for c in (grid == r).nonzero()[0]]
            local = value
            for axis, pl in enumerate(placements):
                if pl.is_shard():
                    local = torch.chunk(local, grid.shape[axis], dim=pl.dim)[coord[axis]]
                elif not pl.is_replicate():
                    raise ValueError(f"tpuc: rank_parameters: `{name}` is placed {pl}; only Shard and Replicate are")
            with torch.no_grad():
                d = DTensor.from_local(local.clone(), mesh, placements, run_check=False)
            out[r][name] = d.requires_grad_(p.requires_grad)  # a leaf, like the module's parameter
    if ranks is None:
        raise ValueError("tpuc: rank_parameters: the module holds no DTensor: parallelize it first")
    for name, p in state.items():
        if not isinstance(p, DTensor):
            for r in range(ranks):
                out[r][name] = p
    return out


def _add_with_inner(batch: RankBatch, x: torch.Tensor, per_rank: list[torch.Tensor]) -> None:
    """Registers `x`'s per-rank values and, for a tensor subclass (a DTensor), those of the
    tensors inside it: aot_autograd hands the compiled graphs those (each rank's local shard)."""
    batch.add(x, per_rank)
    if is_traceable_wrapper_subclass(x):
        names, _ = x.__tensor_flatten__()
        for name in names:
            inner = getattr(x, name)
            if isinstance(inner, torch.Tensor):  # (other entries are opaque: a device mesh)
                batch.inner[key(inner)] = (per_rank, name)
                _add_with_inner(batch, inner, [getattr(v, name) for v in per_rank])


def _per_rank_result(batch: RankBatch, x: torch.Tensor, what: str) -> list[torch.Tensor]:
    """A result's value on every rank; a subclass result (a DTensor) is rebuilt around each
    rank's inner tensors."""
    if not is_traceable_wrapper_subclass(x):
        return batch.per_rank(x, what, replicated=False)
    names, ctx = x.__tensor_flatten__()
    inner = {name: _per_rank_result(batch, v, f"{what}.{name}") if isinstance(v, torch.Tensor) else [v] * batch.ranks
             for name, v in ((name, getattr(x, name)) for name in names)}
    return [type(x).__tensor_unflatten__({name: v[r] for name, v in inner.items()}, ctx, x.shape, x.stride())
            for r in range(batch.ranks)]


def _ensure_world(n: int) -> None:
    """A process group of `n` ranks for Dynamo to trace collectives against: the one set up
    already, else the "fake" backend's (tracing only)."""
    import torch.distributed as dist

    if dist.is_initialized():
        w = dist.get_world_size()
        if w != n:
            raise ValueError(f"tpuc: run_ranks: got the arguments of {n} ranks, but the process group has {w}")
        return
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=n)


def resolve_groups(gm: torch.fx.GraphModule, batch: RankBatch, graph: str) -> dict[str, list[list[int]]]:
    """The rank groups of every process group `gm`'s collectives name: given ones, the world,
    or the translates of rank 0's members."""
    import torch.distributed as dist
    from torch.distributed.distributed_c10d import _resolve_process_group

    names = set()
    for node in gm.graph.nodes:
        if node.op == "call_function" and str(getattr(node.target, "namespace", "")) == "_c10d_functional":
            # The group name is the last argument of every functional collective.
            if isinstance(node.kwargs.get("group_name"), str):
                names.add(node.kwargs["group_name"])
            elif node.args and isinstance(node.args[-1], str):
                names.add(node.args[-1])
    out = {}
    n = batch.ranks
    for name in sorted(names):
        if name in batch.groups:
            out[name] = batch.groups[name]
            continue
        try:
            members = sorted(dist.get_process_group_ranks(_resolve_process_group(name)))
        except Exception as e:
            raise TpucError(f"tpuc: {graph}: unknown process group `{name}` ({e}); give its ranks with "
                            f"run_ranks(..., groups={{{name!r}: [[...], ...]}})", kind="ranks", graph=graph) from None
        out[name] = _translates(members, n, name, graph)
    return out


def _translates(members: list[int], n: int, name: str, graph: str) -> list[list[int]]:
    """The partition of `0..n` into translates of rank 0's group `members`."""
    if len(members) == n:
        return [list(range(n))]
    used = [False] * n
    groups = []
    for base in range(n):
        if used[base]:
            continue
        g = [base + m - members[0] for m in members]
        if any(r >= n or used[r] for r in g):
            raise TpucError(f"tpuc: {graph}: process group `{name}` (rank 0's members {members}) does not tile the "
                            f"{n} ranks; give its groups with run_ranks(..., groups={{{name!r}: [[...], ...]}})",
                            kind="ranks", graph=graph)
        for r in g:
            used[r] = True
        groups.append(g)
    return groups
