"""The Dynamo backend: `torch.compile(model, backend="tpuc", options={...})`.

  Dynamo FX graph
    └─ aot_autograd (core ATen decompositions; SDPA traced with the math backend)
         ├─ forward / inference graph ─┐
         └─ backward graph ────────────┴─ compile_graph:
              static shapes ─► every op supported? ─► CompiledGraph (one tpuc program)
                                 └─ no ─► strict: TpucUnsupportedError
                                          else: split (CapabilityBasedPartitioner): supported
                                          regions become CompiledGraphs, the rest runs eagerly,
                                          one warning naming the ops and their source lines
              symbolic shapes ─► ShapeSpecialized: retraced and compiled once per concrete shape

aot_autograd itself writes mutated buffers back (batch-norm running stats) from the outputs the
compiled forward returns, and wires the backward into autograd.
"""

from __future__ import annotations

import collections
import itertools
import logging
import os
import sys
import time
import warnings
from typing import Any

import torch
import torch.fx

from . import distributed as _dist
from . import ranks as _ranks
from ._torch_version import check_torch_version
from .errors import TpucError, TpucFallbackWarning, TpucUnsupportedError, node_source
from .options import Options
from .serialize import is_getitem, target_name
from .stats import STATS

log = logging.getLogger("tpuc")
_graph_ids = itertools.count()
_warned: set[tuple[str, str | None]] = set()
_supported: frozenset[str] | None = None

# Ops that only reshape or alias: a partition of these alone is not worth a compile.
NON_COMPUTE_OPS = [
    f"torch.ops.aten.{op}"
    for op in (
        "view.default", "_unsafe_view.default", "reshape.default", "permute.default", "t.default",
        "transpose.int", "expand.default", "unsqueeze.default", "squeeze.dim", "squeeze.dims",
        "alias.default", "clone.default", "slice.Tensor", "select.int", "detach.default",
    )
] + ["_operator.getitem"]


def supported_targets() -> frozenset[str]:
    """The FX targets tpuc lowers (from the Rust frontend's op registry)."""
    global _supported
    if _supported is None:
        from . import _C

        _supported = frozenset(_C.supported_targets())
    return _supported


def _configure_logging(opts: Options) -> None:
    if opts.debug and not any(getattr(h, "_tpuc", False) for h in log.handlers):
        h = logging.StreamHandler(sys.stderr)
        h.setFormatter(logging.Formatter("tpuc: %(message)s"))
        h._tpuc = True  # type: ignore[attr-defined]
        log.addHandler(h)
        log.setLevel(logging.DEBUG)


def tpuc_backend(gm: torch.fx.GraphModule, example_inputs, options: dict[str, Any] | None = None, **kwargs):
    """The Dynamo backend registered as "tpuc" (entry point `torch_dynamo_backends`)."""
    check_torch_version()
    # The XLA CPU plugin logs an INFO line for every client option through TSL logging.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    opts = Options.resolve(options)
    _configure_logging(opts)
    opts.apply_cache_env()
    opts.apply_host_aliasing()
    if kwargs.get("mode") not in (None, "default"):
        log.debug("mode=%r is ignored by tpuc", kwargs["mode"])
    STATS["dynamo_graphs"] += 1
    from torch._dynamo.backends.common import aot_autograd
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from .decompositions import inline_custom_ops

    if not (torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in example_inputs)):
        inline_custom_ops(gm)
    gid = next(_graph_ids)
    state = _Backend(opts, f"g{gid}")
    decompositions = _decompositions()
    aot = aot_autograd(
        fw_compiler=lambda g, ex: state.compile(g, ex, "forward"),
        bw_compiler=lambda g, ex: state.compile(g, ex, "backward"),
        inference_compiler=lambda g, ex: state.compile(g, ex, "inference"),
        decompositions=decompositions,
    )
    # The math backend traces F.scaled_dot_product_attention as primitive ops, so graphs reach
    # the flash op only when a program calls it directly.
    start = time.perf_counter()
    with sdpa_kernel(SDPBackend.MATH):
        compiled = aot(gm, example_inputs)
    log.debug("%s: Dynamo graph of %d nodes through aot_autograd and tpuc in %.1f ms", state.name,
              len(gm.graph.nodes), (time.perf_counter() - start) * 1e3)
    return compiled


def _decompositions() -> dict:
    """The decompositions graphs are traced with: core ATen, but for the ops tpuc keeps whole."""
    from torch._decomp import core_aten_decompositions

    from .decompositions import extra_decompositions

    # The CPU flash-attention op's core decomposition returns the attention weights where the
    # logsumexp belongs (torch 2.15): [B, H, L, S] instead of [B, H, L], and with them the
    # backward's q/k/v gradients are wrong. tpuc lowers the op itself, so it is kept whole.
    decompositions = core_aten_decompositions()
    decompositions.pop(torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default, None)
    # Inference fast paths of nn.TransformerEncoderLayer / nn.MultiheadAttention (fused ops).
    decompositions.update(extra_decompositions())
    return decompositions


class SavedLayout:
    """A backward that runs ops eagerly (split, per shape) with the activations its
    forward saved laid out as aot traced them: a compiled forward returns them dense (see
    `CompiledGraph`), and an eager op that reads strides (`as_strided`) needs the traced ones.
    A backward compiled whole reads values only and is left as it is."""

    def __init__(self, inner, plan: list[tuple[int, tuple, tuple]]):
        self._boxed_call = True
        self.inner, self.plan = inner, plan

    @staticmethod
    def around(inner, gm: torch.fx.GraphModule):
        from .graph import CompiledGraph

        if isinstance(inner, CompiledGraph):
            return inner
        plan = []
        for i, n in enumerate(n for n in gm.graph.nodes if n.op == "placeholder"):
            v = n.meta.get("val")
            if not isinstance(v, torch.Tensor) or n.name.startswith("tangents") or v.dim() < 2:
                continue
            # Symbolic sizes are left alone: int() of one would specialize its symbol (a
            # guard, and a recompile at the next size); bucketed programs lay them out per call.
            shape, stride = tuple(v.shape), tuple(v.stride())
            if not all(type(d) is int for d in shape + stride):
                continue
            if not v.is_contiguous():
                plan.append((i, shape, stride))
        return SavedLayout(inner, plan) if plan else inner

    def __call__(self, args):
        from .graph import _restride

        for i, shape, stride in self.plan:
            t = args[i]
            if isinstance(t, torch.Tensor) and tuple(t.shape) == shape and t.stride() != stride:
                args[i] = _restride(t, shape, stride)
        return self.inner(args)


def _eager(gm: torch.fx.GraphModule):
    def run(args):
        return gm(*args)

    run._boxed_call = True  # type: ignore[attr-defined]
    return run


_HOST_READ = torch.ops.aten._local_scalar_dense.default
_NUMBERS = (torch.SymInt, torch.SymFloat, torch.SymBool, int, float, bool, type(None))


def _host_nodes(gm: torch.fx.GraphModule) -> set[str]:
    """The nodes that run on the host: numbers read from a tensor (`.item()`, which Dynamo
    captures as `_local_scalar_dense` with `capture_scalar_outputs`) and the nodes computing
    numbers (or checks) from those alone (`sym_sum` of several reads, `_assert_scalar`)."""
    host: set[str] = set()
    for n in gm.graph.nodes:
        if n.op != "call_function":
            continue
        if n.target is _HOST_READ:
            host.add(n.name)
        elif host and n.all_input_nodes and all(a.name in host for a in n.all_input_nodes) \
                and isinstance(n.meta.get("val"), _NUMBERS):
            host.add(n.name)
    return host


def _has_symbolic_shapes(gm: torch.fx.GraphModule) -> bool:
    """Whether some value of `gm` has a symbolic size (a placeholder's, or one computed from a
    number read on the host before the graph)."""
    for n in gm.graph.nodes:
        v = n.meta.get("val")
        if isinstance(v, torch.Tensor) and any(not isinstance(s, int) for s in v.shape):
            return True
    return False


def _is_symbolic(gm: torch.fx.GraphModule) -> bool:
    """Whether `gm` has symbolic input sizes, or sizes only its data knows (`nonzero`,
    `masked_select`: compiled padded to their bound, and cut to the size they return)."""
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

    for n in gm.graph.nodes:
        if n.op == "call_function" and free_unbacked_symbols(n.meta.get("val")):
            return True
        if n.op != "placeholder":
            continue
        v = n.meta.get("val")
        if isinstance(v, torch.SymInt):
            return True
        if isinstance(v, torch.Tensor) and any(not isinstance(s, int) for s in v.shape):
            return True
    return False


def _size_plan(gm: torch.fx.GraphModule, static: set[int], buffers: set[int]):
    """Where each symbol's size is read at a call: (placeholder, dim or None for a SymInt input,
    symbol, lo, hi) for every placeholder dim (or SymInt input) that is exactly one symbol, with
    the symbol's range (hi None when unbounded), as the compiler reads them from the serialized
    graph (which its buckets compile). None when some symbol of an input shape is not read
    anywhere (it cannot be bucketed then)."""
    from . import _C
    from .graph import serialized

    return _C.size_plan(serialized(gm, static, buffers)[3])


class _Backend:
    """Compiles the aot graphs of one Dynamo graph."""

    def __init__(self, opts: Options, name: str):
        self.opts = opts
        self.name = name
        # The latest calls of a per-rank training step's forward graph (whichever bucket or
        # shape ran them), where its backward finds the forward inputs it writes gradients for.
        self.ranked_calls: collections.deque | None = None

    def compile(self, gm: torch.fx.GraphModule, example_inputs, kind: str):
        try:
            return self._compile(gm, example_inputs, kind)
        except TpucError as e:
            # In a torch.distributed job every rank compiles its own graphs: say which one failed
            # (under torchrun the job then ends, so no other rank waits in a collective for it).
            label = _dist.rank_label()
            if label and e.args and not str(e.args[0]).startswith("rank "):
                e.args = (f"{label}: {e.args[0]}", *e.args[1:])
            raise

    def _compile(self, gm: torch.fx.GraphModule, example_inputs, kind: str):
        STATS["aot_graphs"] += 1
        static: set[int] = set()
        buffers: set[int] = set()
        meta = None
        if kind != "backward":
            ctx = torch._guards.TracingContext.try_get()
            meta = getattr(ctx, "fw_metadata", None) if ctx is not None else None
            if meta is not None:
                static = set(meta.static_input_indices)
                buffers = {i for i, info in enumerate(meta.input_info) if info.mutates_data} & static
        name = f"{self.name}_{kind}"
        if kind == "forward" and meta is not None:
            # Outputs past aot's forward returns are activations saved for the backward.
            gm.meta["tpuc_saved_from"] = meta.num_forward
        collectives = _dist.has_collectives(gm)
        ranked = False
        if collectives and _ranks.active() is None and _dist.in_job():
            # A torch.distributed job: the collectives run in the job's process group and the
            # compute between them as tpuc programs (see `distributed.py`).
            if _is_symbolic(gm):
                inner = ShapeSpecialized(self, gm, name, static, buffers, bucketed=False)
            else:
                inner = self.build(gm, name, static, buffers)
        elif collectives or _ranks.active() is not None or (kind == "backward" and self.ranked_calls is not None):
            ranked = True
            if meta is not None and any(i.mutates_metadata for i in meta.input_info):
                raise TpucError(f"tpuc: {name}: per-rank programs do not change an argument's shape or strides in "
                                "place (resize_, as_strided_, ...)", kind="ranks", graph=name)
            # Arguments updated in place (an optimizer step, batch-norm running statistics):
            # the graph returns their new values first, in this order.
            mutated = list(getattr(meta, "mutated_inp_runtime_indices", [])) if meta is not None else []
            calls = backward_of = None
            if kind == "forward":
                calls = self.ranked_calls = collections.deque(maxlen=8)
            elif kind == "backward":
                if self.ranked_calls is None:
                    raise TpucError(f"tpuc: {name}: a per-rank backward whose forward ran outside run_ranks",
                                    kind="ranks", graph=name)
                backward_of = self.ranked_calls
            ranked = dict(collectives=collectives, calls=calls, backward_of=backward_of, mutated=mutated)
            if _is_symbolic(gm):
                inner = ShapeSpecialized(self, gm, name, static, buffers, ranked=ranked)
            else:
                inner = RankedGraph(self, gm, name, static, buffers, **ranked)
        elif _is_symbolic(gm) and not _host_nodes(gm):
            inner = ShapeSpecialized(self, gm, name, static, buffers)
        else:
            inner = self.build(gm, name, static, buffers)
        if kind == "backward" and not ranked:
            # (Per-rank programs find their saved values by identity among the forward's
            # results and read them as values, as a whole compiled graph does.)
            inner = SavedLayout.around(inner, gm)
        return inner

    def build(self, gm: torch.fx.GraphModule, name: str, static: set[int], buffers: set[int]):
        """A boxed callable running `gm` (static shapes) through tpuc, split if needed."""
        from .graph import CompiledGraph

        supported = supported_targets()
        job = _dist.in_job() and _ranks.active() is None and _dist.has_collectives(gm)
        # Numbers read on the host (`.item()`) and the arithmetic on them alone run there: the
        # graph is split at them, and the parts after take the numbers as inputs (values, or
        # sizes, whose parts are compiled per bucket). A designed split, not a fallback: strict
        # mode allows it.
        reads = _host_nodes(gm)
        unsupported = {
            n.name
            for n in gm.graph.nodes
            if n.op == "call_function" and not is_getitem(n) and target_name(n.target) not in supported
            and not (job and _dist.is_collective(n))
        } - reads
        by_name = {n.name: n for n in gm.graph.nodes}
        for _ in range(32):
            if unsupported and self.opts.strict:
                raise TpucUnsupportedError(_unsupported_message(gm, unsupported, name, strict=True),
                                           kind="unsupported_op", graph=name,
                                           **_first_node_fields(by_name, unsupported))
            try:
                if job:
                    return self._split(gm, name, static, buffers, unsupported, reads, job=True)
                if not unsupported and not reads:
                    compiled = CompiledGraph(gm, name, static, buffers, self.opts)
                    if not compiled.can_run:
                        self._warn_cannot_run(compiled)
                        return _eager(gm)
                    return compiled
                return self._split(gm, name, static, buffers, unsupported, reads)
            except TpucError as e:
                # Ops the registry knows but cannot lower with these arguments: run those nodes
                # eagerly too (in strict mode, raise). The importer names every such node of the
                # graph in one error (`e.nodes`); a node it could not check because it reads the
                # result of a failed one, or one that fails only in lowering, takes another round.
                failed = {n["node"] for n in e.nodes if n["kind"] in ("unsupported_op", "op", "lowering")}
                failed = {n for n in failed if n in by_name} - unsupported
                if e.kind in ("unsupported_op", "op", "lowering") and failed:
                    if self.opts.strict:
                        raise
                    unsupported |= failed
                    continue
                raise
        raise TpucError(f"tpuc: {name}: gave up splitting the graph", kind="internal", graph=name)

    def _split(self, gm, name, static, buffers, unsupported: set[str], reads: set[str], job: bool = False):
        """The graph with `unsupported` nodes, host reads (`reads`, see `build`) and, in a
        torch.distributed job, its collectives run eagerly, and the rest compiled in parts (a
        part with symbolic shapes, from a size read on the host, per bucket)."""
        from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
        from torch.fx.passes.operator_support import OperatorSupportBase

        from .graph import CompiledGraph, GraphModuleWrapper, copy_graph_module

        class Support(OperatorSupportBase):
            def is_node_supported(self, submodules, node) -> bool:
                return node.op == "call_function" and node.name not in unsupported and node.name not in reads

        work = copy_graph_module(gm)
        placeholders = {n.name: i for i, n in enumerate(n for n in work.graph.nodes if n.op == "placeholder")}
        partitioner = CapabilityBasedPartitioner(work, Support(), allows_single_node_partition=False,
                                                 non_compute_ops=NON_COMPUTE_OPS)
        if job:
            from torch.fx.passes.infra.partitioner import Partition

            non_compute = set(NON_COMPUTE_OPS)
            partitions = [Partition(id=k, nodes=nodes) for k, nodes in enumerate(_dist.regions(work, unsupported | reads))
                          if any(target_name(n.target) not in non_compute for n in nodes)]
        else:
            partitions = partitioner.propose_partitions()
        fused = partitioner.fuse_partitions(partitions, prefix="tpuc_part_")
        if job:
            _dist.schedule(fused, overlap=self.opts.overlap)
        compiled_parts = 0
        for node in list(fused.graph.nodes):
            if node.op != "call_module" or not str(node.target).startswith("tpuc_part_"):
                continue
            sub = fused.get_submodule(node.target)
            sub_static, sub_buffers = set(), set()
            sub_placeholders = [p for p in sub.graph.nodes if p.op == "placeholder"]
            for i, (p, a) in enumerate(zip(sub_placeholders, node.args)):
                if isinstance(a, torch.fx.Node):
                    if "val" in a.meta:
                        p.meta["val"] = a.meta["val"]
                    if a.op == "placeholder" and placeholders.get(a.name) in static:
                        sub_static.add(i)
                        if placeholders[a.name] in buffers:
                            sub_buffers.add(i)
            part = f"{name}_part{compiled_parts}"
            if _has_symbolic_shapes(sub):
                compiled = ShapeSpecialized(self, sub, part, sub_static, sub_buffers)
            else:
                compiled = CompiledGraph(sub, part, sub_static, sub_buffers, self.opts)
                if not compiled.can_run:
                    self._warn_cannot_run(compiled)
                    continue
            setattr(fused, node.target, GraphModuleWrapper(compiled, sub))
            compiled_parts += 1
        fused.recompile()
        STATS["host_reads"] += len(reads)
        if job:
            STATS["job_regions"] += compiled_parts
        if not unsupported:
            if reads:
                log.info("tpuc: %s: %d number(s) read on the host (.item()); the graph runs as %d compiled part(s) "
                         "around them", name, len(reads), compiled_parts)
            return _eager(fused)
        STATS["fallback_graphs"] += 1
        STATS["eager_ops"] += len(unsupported)
        new = {(by.target_name, by.source) for by in _describe(gm, unsupported)} - _warned
        if new:
            _warned.update(new)
            warnings.warn(_unsupported_message(gm, unsupported, name, strict=False, parts=compiled_parts),
                          TpucFallbackWarning, stacklevel=2)
        return _eager(fused)

    def _warn_cannot_run(self, compiled) -> None:
        key = ("cannot-run", compiled.name)
        if key in _warned:
            return
        _warned.add(key)
        p = compiled.program
        warnings.warn(
            f"tpuc: {compiled.name}: {p.summary}. This host cannot run it, so the graph runs in eager "
            "PyTorch here (the executable is in the cache and, with dump_dir, on disk)",
            RuntimeWarning,
            stacklevel=2,
        )


class _Described:
    def __init__(self, node: torch.fx.Node):
        self.node = node.name
        self.target_name = target_name(node.target).removeprefix("torch.ops.")
        self.source = node_source(node)


def _describe(gm, names: set[str]) -> list[_Described]:
    return [_Described(n) for n in gm.graph.nodes if n.name in names]


def _first_node_fields(by_name, names: set[str]) -> dict:
    for n in by_name.values():
        if n.name in names:
            d = _Described(n)
            return {"node": d.node, "target": d.target_name, "source": d.source}
    return {}


def _unsupported_message(gm, names: set[str], graph: str, strict: bool, parts: int = 0) -> str:
    ds = _describe(gm, names)
    by_op: dict[str, list[_Described]] = {}
    for d in ds:
        by_op.setdefault(d.target_name, []).append(d)
    lines = []
    for op, items in sorted(by_op.items()):
        where = "; ".join(f"node `{d.node}`" + (f" at {d.source}" if d.source else "") for d in items[:4])
        more = f" (+{len(items) - 4} more)" if len(items) > 4 else ""
        lines.append(f"  {op}: {where}{more}")
    if strict:
        head = (f"tpuc: {graph}: {len(ds)} node(s) use ops tpuc cannot compile, and strict mode is on "
                "(strict=True / TPUC_STRICT=1); without it they would run in eager PyTorch:")
    else:
        head = (f"tpuc: {graph}: {len(ds)} node(s) use ops tpuc cannot compile; they run in eager PyTorch "
                f"and the rest of the graph in {parts} compiled part(s) (strict=True / TPUC_STRICT=1 "
                "raises instead):")
    return head + "\n" + "\n".join(lines)


class RankedGraph:
    """A graph of a per-rank program (see `ranks.py`): compiled when first called, for the rank
    count and process groups of the `run_ranks` call, as one executable over that many devices.
    A graph without collectives also runs on one device outside `run_ranks`."""

    def __init__(self, backend: _Backend, gm: torch.fx.GraphModule, name: str, static: set[int], buffers: set[int],
                 collectives: bool, bucket: dict[str, int] | None = None, calls: collections.deque | None = None,
                 backward_of: collections.deque | None = None, mutated: list[int] | None = None):
        self._boxed_call = True  # an instance attribute: see CompiledGraph
        self.backend, self.gm, self.name, self.static, self.buffers = backend, gm, name, static, buffers
        self.collectives = collectives
        self.bucket = bucket  # a bucket of a graph with symbolic sizes (see ShapeSpecialized)
        self.by_ranks: dict[tuple, Any] = {}
        self.single = None
        # A training step's forward records its calls (their results' keys and arguments) in
        # `calls`; its backward finds its forward's call in `backward_of`.
        self.calls = calls
        self.backward_of = backward_of
        # Arguments the graph updates in place, in the order their new values lead its results.
        self.mutated = mutated or []

    def program(self, batch):
        """The program for the rank count and explicit groups of `batch` (inferred groups follow
        from the process groups, which do not change while the graph lives), compiled if new."""
        from .graph import CompiledGraph

        key = (batch.ranks, tuple(sorted((k, tuple(map(tuple, v))) for k, v in batch.groups.items())))
        fn = self.by_ranks.get(key)
        if fn is None:
            groups = _ranks.resolve_groups(self.gm, batch, self.name)
            opts = self.backend.opts
            if opts.mesh:
                raise TpucError(f"tpuc: {self.name}: the mesh option and run_ranks exclude each other", kind="ranks",
                                graph=self.name)
            fn = CompiledGraph(self.gm, f"{self.name}_r{batch.ranks}", self.static, self.buffers, opts,
                               bucket=self.bucket, ranks=batch.ranks, groups=groups)
            if not fn.can_run:
                raise TpucError(f"tpuc: {self.name}: compiled for {opts.target}, which this host cannot run",
                                kind="ranks", graph=self.name)
            self.by_ranks[key] = fn
        return fn

    def __call__(self, args, sizes: dict[str, int] | None = None):
        from .graph import CompiledGraph

        batch = _ranks.active()
        if batch is None:
            if self.backward_of is not None:
                raise TpucError(f"tpuc: {self.name}: the backward of a per-rank forward runs inside the same "
                                "tpuc.run_ranks call (call .backward() in the function run_ranks runs)", kind="ranks",
                                graph=self.name)
            if self.collectives:
                import torch.distributed as dist

                where = ("only torch.distributed's tracing group (\"fake\") is set up in this process"
                         if dist.is_available() and dist.is_initialized() else
                         "torch.distributed is not initialized in this process")
                raise TpucError(f"tpuc: {self.name}: this graph has functional collectives, but {where}: run the "
                                "program as a job (torchrun --nproc_per_node=N script.py, which calls "
                                "torch.distributed.init_process_group), or emulate N ranks in this process "
                                "through tpuc.run_ranks(fn, [args of rank 0, args of rank 1, ...])", kind="ranks",
                                graph=self.name)
            if self.single is None:
                self.single = (self.backend.build(self.gm, self.name, self.static, self.buffers) if self.bucket is None
                               else CompiledGraph(self.gm, self.name, self.static, self.buffers, self.backend.opts,
                                                  bucket=self.bucket))
            return self.single(args) if self.bucket is None else self.single(args, sizes)
        fn = self.program(batch)
        if self.backward_of is not None:
            return self._backward(fn, args, sizes, batch)
        outs = fn(args, sizes)
        if self.mutated:
            self._write_back(args, outs, batch)
        if self.calls is not None:
            self.calls.append(({_ranks.key(o) for o in outs if isinstance(o, torch.Tensor)}, list(args)))
        return outs

    def _write_back(self, args, outs, batch) -> None:
        """Updates in place on every rank: aot_autograd copies rank 0's new values into rank 0's
        arguments; each other rank's go into that rank's own tensors here. A tensor shared by all
        ranks (a module's buffer) can take only one value, so every rank must have computed it."""
        if len(outs) < len(self.mutated) or any(i >= len(args) for i in self.mutated):
            raise TpucError(f"tpuc: {self.name}: {len(self.mutated)} updated arguments for {len(args)} arguments and "
                            f"{len(outs)} results", kind="internal", graph=self.name)
        with torch.no_grad():
            for j, i in enumerate(self.mutated):
                targets = batch.per_rank(args[i], f"{self.name}: argument {i} (updated in place)", replicated=True)
                values = batch.per_rank(outs[j], f"{self.name}: the new value of argument {i}", replicated=False)
                for r in range(1, batch.ranks):
                    if targets[r] is targets[0]:
                        self._require_same(values, r, f"argument {i} ({tuple(args[i].shape)})",
                                           f"rank {r} updates it to other values than rank 0",
                                           "give each rank its own tensor (torch.func.functional_call)")
                    else:
                        targets[r].copy_(values[r])

    def _require_same(self, values: list[torch.Tensor], r: int, what: str, differs: str, fix: str) -> None:
        """`what` is one tensor shared by every rank, so it can only take a value every rank
        computed alike: raises when rank r's differs from rank 0's."""
        if not torch.equal(values[r], values[0]):
            raise TpucError(f"tpuc: {self.name}: {what} is one tensor on every rank, but {differs}: {fix}", kind="ranks",
                            graph=self.name)

    def _backward(self, fn, args, sizes, batch):
        """A training step's backward over all ranks. Rank 0's gradients go back to autograd;
        the other ranks' gradients of the forward's leaf tensors (each rank's own parameters,
        e.g. through `functional_call`) are accumulated into their `.grad` here, as autograd
        would for those ranks. A leaf shared by all ranks (a module's parameter) takes rank 0's
        gradient, which must then be every rank's."""
        fw_args = None
        keys = {_ranks.key(a) for a in args if isinstance(a, torch.Tensor)}
        # The saved tensors (forward results) name the forward call; a backward that saves
        # nothing (`(2 * w).sum()`) belongs to the latest one.
        for out_keys, call_args in reversed(self.backward_of):
            if out_keys & keys:
                fw_args = call_args
                break
        else:
            if self.backward_of:
                fw_args = self.backward_of[-1][1]
        if fw_args is None:
            raise TpucError(f"tpuc: {self.name}: this backward's forward call is not among the last "
                            f"{self.backward_of.maxlen} forward calls: run each backward inside the run_ranks call of "
                            "its forward", kind="ranks", graph=self.name)
        outs = fn(args, sizes)
        if len(outs) != len(fw_args):
            raise TpucError(f"tpuc: {self.name}: {len(outs)} gradients for {len(fw_args)} forward inputs",
                            kind="internal", graph=self.name)
        for k, (g, x) in enumerate(zip(outs, fw_args)):
            if not isinstance(g, torch.Tensor) or not isinstance(x, torch.Tensor):
                continue
            grads = batch.per_rank(g, f"{self.name}: gradient {k}", replicated=False)
            owner = batch.inner.get(_ranks.key(x))
            if owner is not None:
                # The local part of a subclass argument (a DTensor parameter): each other rank's
                # gradient, wrapped like its tensor, goes back through that rank's own autograd
                # graph (from_local to the local leaf, or into a DTensor leaf's .grad).
                outers, attr = owner
                for r in range(1, batch.ranks):
                    outer = outers[r]
                    if outer.requires_grad:
                        names, ctx = outer.__tensor_flatten__()
                        parts = {n: grads[r] if n == attr else getattr(outer, n) for n in names}
                        torch.autograd.backward(outer, type(outer).__tensor_unflatten__(parts, ctx, outer.shape,
                                                                                         outer.stride()))
                continue
            leaves = batch.per_rank(x, f"{self.name}: forward input {k}", replicated=True)
            for r in range(1, batch.ranks):
                leaf = leaves[r]
                if leaf is leaves[0]:
                    self._require_same(grads, r, f"forward input {k} ({tuple(x.shape)})",
                                       f"rank {r}'s gradient differs from rank 0's",
                                       "give each rank its own parameters (torch.func.functional_call) or all-reduce "
                                       "the gradients in the step")
                elif leaf.is_leaf and leaf.requires_grad:
                    leaf.grad = grads[r].clone() if leaf.grad is None else leaf.grad + grads[r]
        return outs


class ShapeSpecialized:
    """A graph with symbolic shapes. With the `buckets` option (default `auto`) each symbol's
    size is rounded up to a bucket of the policy's grid and the symbolic graph is compiled once
    per bucket (padded, masked, exact: see tpuc's `specialize` pass); the buckets of one graph
    share their resident weights. Where that is off or impossible (a symbol no input dim names,
    an op that cannot be bucketed), the graph is retraced with make_fx on the real inputs
    (static shapes) and compiled once per concrete shape."""

    def __init__(self, backend: _Backend, gm: torch.fx.GraphModule, name: str, static: set[int], buffers: set[int],
                 ranked: dict | None = None, bucketed: bool = True):
        self._boxed_call = True  # an instance attribute: see CompiledGraph
        # A per-rank graph: every bucket (or shape) is a RankedGraph, compiled for the rank
        # count of the `run_ranks` call, with these keyword arguments (see RankedGraph).
        self.ranked = ranked
        self.backend = backend
        self.gm = gm
        self.name = name
        self.static = static
        self.buffers = buffers
        self.cache: dict[tuple, Any] = {}
        self.buckets: dict[tuple, Any] = {}
        self.picked: dict[tuple[str, int], int] = {}  # (symbol, size) -> bucket
        self.dispatch: dict[tuple, Any] = {}  # sizes seen -> their bucket's program
        bucketed = bucketed and backend.opts.buckets != "off"
        self.size_plan = _size_plan(gm, static, buffers) if bucketed else None

    def __call__(self, args):
        if self.size_plan is not None:
            sizes = {}
            for ph, dim, sym, _, _ in self.size_plan:
                v = args[ph]
                sizes[sym] = int(v.shape[dim]) if dim is not None else int(v)
            fn = self.dispatch.get(tuple(sizes.values()))
            if fn is not None:
                return fn(args, sizes)
            if all(n >= 1 for n in sizes.values()):
                return self._bucketed(args, sizes)
        key = tuple((tuple(a.shape), a.dtype) if isinstance(a, torch.Tensor) else a for a in args)
        fn = self.cache.get(key)
        if fn is None:
            gm, name = _retrace(self.gm, args), f"{self.name}_s{len(self.cache)}"
            if self.ranked is not None:
                fn = RankedGraph(self.backend, gm, name, self.static, self.buffers, **self.ranked)
            else:
                fn = self.backend.build(gm, name, self.static, self.buffers)
            self.cache[key] = fn
            STATS["specializations"] += 1
        return fn(args)

    def _bucketed(self, args, sizes: dict[str, int]):
        from . import _C
        from .graph import CompiledGraph

        policy = self.backend.opts.buckets
        bucket = {}
        for _, _, sym, lo, hi in self.size_plan:
            if sym not in bucket:
                n = sizes[sym]
                b = self.picked.get((sym, n))
                if b is None:
                    b = self.picked[(sym, n)] = _C.select_bucket(policy, n, lo, hi)
                bucket[sym] = b
        key = tuple(sorted(bucket.items()))
        fn = self.buckets.get(key)
        if fn is None:
            label = ",".join(f"{k}={v}" for k, v in key)
            name = f"{self.name}_b{len(self.buckets)}"
            try:
                if self.ranked is not None:
                    fn = RankedGraph(self.backend, self.gm, name, self.static, self.buffers, bucket=bucket, **self.ranked)
                    batch = _ranks.active()
                    if batch is not None:
                        fn.program(batch)  # compiled now, so that a bucket it cannot be falls back here
                else:
                    fn = CompiledGraph(self.gm, name, self.static, self.buffers, self.backend.opts, bucket=bucket)
            except TpucError as e:
                if self.backend.opts.strict or e.kind == "recompile":
                    raise
                log.debug("%s: cannot bucket (%s); compiling per shape instead", self.name, e)
                self.size_plan = None
                return self(args)
            if not getattr(fn, "can_run", True):
                self.size_plan = None
                return self(args)
            log.debug("%s: bucket %s compiled for sizes %s", self.name, label, sizes)
            self.buckets[key] = fn
            STATS["buckets"] += 1
        self.dispatch[tuple(sizes.values())] = fn
        return fn(args, sizes)


def _retrace(gm: torch.fx.GraphModule, args) -> torch.fx.GraphModule:
    """`gm` traced again at the concrete shapes of `args` (static sizes), keeping node metadata."""
    import torch.fx.traceback as fx_traceback
    from torch.fx.experimental.proxy_tensor import make_fx

    interp = torch.fx.Interpreter(gm)

    def run(*a):
        return interp.run(*a)

    with fx_traceback.preserve_node_meta(), torch.no_grad():
        return make_fx(run, tracing_mode="fake")(*args)
