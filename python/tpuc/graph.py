"""One FX graph compiled by tpuc, callable by aot_autograd (boxed calling convention).

Per call:
  weights   each parameter/buffer/constant argument is read in place from its tensor's memory
            (CPU plugin): aliased once, again only when the tensor's data moved (checked by
            address every call); where a plugin cannot read host memory, copied every call
  inputs    contiguous CPU tensors are passed to Rust as DLPack capsules, which the extension
            consumes: each keeps its tensor's memory alive until the call returns; on the CPU
            plugin the executable reads them in place
  outputs   Rust-owned result bytes (on the CPU plugin: the output buffers' own memory) wrapped
            by torch.frombuffer (no copy), given the graph's dtype and shape in place (a new
            tensor, not a view); re-strided when the graph's output is not contiguous, but for
            a training forward's activations saved for its backward, which stay dense
"""

from __future__ import annotations

import logging
import math
import os
import time
import weakref

import torch
import torch.fx
from torch.utils.dlpack import to_dlpack

from . import _C
from . import ranks as _ranks
from .errors import TpucError
from .options import Options
from .serialize import graph_to_json, is_opaque_input, lift_tensor_constants
from .stats import STATS

log = logging.getLogger("tpuc")

_DTYPES = {
    name: getattr(torch, name)
    for name in (
        "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
        "float8_e4m3fn", "float8_e5m2", "float16", "bfloat16", "float32", "float64",
        "complex64", "complex128",
    )
    if hasattr(torch, name)
}


_LIVE: "weakref.WeakSet[CompiledGraph]" = weakref.WeakSet()
# Bumped by `invalidate_weights`: every weight copied to a device is copied again at its next use.
_GENERATION = [0]


def invalidate_weights() -> None:
    """Makes every compiled graph copy its weights to the device again at its next call. Only
    needed where weights are copies (an accelerator, or `host_aliasing` off) and a tensor was
    written without a version-counter bump (`_unsafe_preserve_version_counter`, DLPack or
    NumPy views of it); in-place ops, optimizer steps and `load_state_dict` are seen anyway."""
    _GENERATION[0] += 1
# Host address -> (graph ref, argument): the program that last aliased a weight at that address,
# whose buffer later programs share while it still reads that address.
_RESIDENT: dict[int, tuple] = {}


def compiled_graphs() -> list["CompiledGraph"]:
    """The CompiledGraphs alive in this process (for benchmarks and debugging)."""
    return sorted(_LIVE, key=lambda g: g.name)


def copy_graph_module(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """A new GraphModule over a copy of gm's graph (node meta copied shallowly), sharing
    gm's attributes."""
    g = torch.fx.Graph()
    out = g.graph_copy(gm.graph, {})
    g.output(out)
    return torch.fx.GraphModule(gm, g)


# Per FX graph (and which placeholders are weights): its copy with constants lifted, the
# constants, the argument count and the program JSON. The buckets of one graph compile the same
# program, so it is serialized once (about 60 ms for a small GPT-2 on the development machine).
_SERIALIZED: "weakref.WeakKeyDictionary[torch.fx.GraphModule, dict]" = weakref.WeakKeyDictionary()


def serialized(gm: torch.fx.GraphModule, static: set[int], buffers: set[int]):
    key = (frozenset(static), frozenset(buffers))
    per_graph = _SERIALIZED.setdefault(gm, {})
    if key in per_graph:
        return per_graph[key]
    copy = copy_graph_module(gm)
    constants = lift_tensor_constants(copy)
    placeholders = [n for n in copy.graph.nodes if n.op == "placeholder"]
    # An opaque input the graph returns as it is (a DTensor's device mesh, which aot_autograd
    # saves for the backward) bypasses the program: that output is the call's argument.
    passthrough = []
    out_node = copy.graph.output_node()
    out = out_node.args[0]
    if isinstance(out, (list, tuple)):
        outs = list(out)
        for k, o in enumerate(outs):
            if isinstance(o, torch.fx.Node) and is_opaque_input(o):
                passthrough.append((k, placeholders.index(o)))
                outs[k] = None
        if passthrough:
            out_node.args = (type(out)(outs),)
            copy.recompile()
    n_args = len(placeholders) - len(constants)
    kinds = []
    for i, p in enumerate(placeholders):
        if i >= n_args:
            kinds.append("tensor_constant")
        elif i in static and isinstance(p.meta.get("val"), torch.Tensor):
            kinds.append("buffer" if i in buffers else "parameter")
        else:
            kinds.append("user_input")
    per_graph[key] = (copy, constants, n_args, graph_to_json(copy, kinds), passthrough)
    return per_graph[key]


class CompiledGraph:
    """`gm` compiled as one tpuc program. `static` lists the placeholders that are parameters or
    buffers (kept resident on the device), `buffers` those of them the graph mutates."""

    def __init__(self, gm: torch.fx.GraphModule, name: str, static: set[int], buffers: set[int],
                 opts: Options, bucket: dict[str, int] | None = None, ranks: int | None = None,
                 groups: dict[str, list[list[int]]] | None = None):
        # aot_autograd calls `f(args)` when f has `_boxed_call`; an instance attribute, because
        # the backward's `disable()` wrapper copies the instance's __dict__, not class attributes.
        self._boxed_call = True
        self.name = name
        from .stats import check_no_recompile

        what = "bucket " + ",".join(f"{k}={v}" for k, v in sorted(bucket.items())) if bucket else "a new shape"
        check_no_recompile(opts, name, what)
        t0 = time.perf_counter()
        # A training forward's outputs from this index on are saved for its backward only.
        saved_from = gm.meta.get("tpuc_saved_from")
        gm, constants, n_args, program_json, self.passthrough = serialized(gm, static, buffers)
        t_ser = time.perf_counter() - t0
        self.num_args = n_args
        self.constants = {n_args + k: t for k, (_, t) in enumerate(constants)}
        if opts.dump_dir:
            d = os.path.join(opts.dump_dir, name)
            os.makedirs(d, exist_ok=True)
            with open(os.path.join(d, "graph.json"), "wb") as f:
                f.write(program_json)
            with open(os.path.join(d, "fx_graph.py"), "w") as f:
                f.write(gm.print_readable(print_output=False))
        self.program = _C.Program.compile(
            program_json, name=name, target=opts.target, topology=opts.topology, plugin=opts.plugin_path(),
            dump_dir=opts.dump_dir, verify_each=opts.verify_each, bucket=bucket,
            precision=opts.matmul_precision(), conv_precision=opts.conv_precision_value(), bf16=opts.bf16, allow_excess_precision=opts.allow_excess_precision,
            fusion=opts.fusion, mesh=opts.mesh, shard_policy=opts.shard_policy, shard=dict(opts.shard) or None,
            ranks=ranks, groups=groups,
        )
        # Per-rank programs (see `ranks.py`): every argument is given per rank, per call. A
        # backward's scalar tangent that no graph produced is the gradient autograd seeds
        # `loss.backward()` with, the same on every rank.
        self.ranks = ranks
        self.tangents = {i for i, n in enumerate(n for n in gm.graph.nodes if n.op == "placeholder")
                         if n.name.startswith("tangents")} if ranks is not None else set()
        self.static = static
        # Bucketed: the padded size of every symbol.
        self.bucket = bucket
        # A program is made ready once per graph (and bucket); an XLA compile is a cache miss.
        STATS["programs"] += 1
        if self.program.cache == "miss":
            STATS["compiles"] += 1
        STATS[f"cache_{self.program.cache}"] += 1
        imp, passes, emit = self.program.lower_seconds
        log.debug(
            "compiled %s (%d nodes, %d arguments of which %d resident) for %s in %.1f ms: serialize %.1f ms, "
            "import %.1f ms, passes %.1f ms, emit %.1f ms, XLA compile %.1f ms; cache=%s",
            name, len(gm.graph.nodes), len(self.program.args), len(self.program.args) - len(self.program.user_args), opts.target,
            (time.perf_counter() - t0) * 1e3, t_ser * 1e3, imp * 1e3, passes * 1e3, emit * 1e3,
            self.program.compile_seconds * 1e3, self.program.cache,
        )
        self.can_run = self.program.can_run
        # Time spent in __call__ (for benchmarks: what tpuc adds around the PJRT calls).
        self.calls = 0
        self.call_ns = 0
        _LIVE.add(self)

        # ---- the call plan
        # A program with random ops takes one more argument, the seed: each call draws it from
        # torch's default generator (`torch.manual_seed` reproduces a run), so no executable
        # holds random state (the front end lowers the random ops; see `frontend-fx/src/ops/random.rs`).
        self.seed_arg = self.program.seed_arg
        if self.seed_arg is not None:
            STATS["random_graphs"] += 1
        arg_to_ph = {}
        for ph, slot in enumerate(self.program.input_slots):
            if isinstance(slot, _C.Input.Arg) and slot.index != self.seed_arg:
                arg_to_ph[slot.index] = ph
        args = self.program.args
        size_args = dict((ai, sym) for sym, ai in self.program.size_args)
        # (A SymInt argument of a program without a bucket is a number the program reads as a
        # value, such as a scalar read with `.item()` before it: every shape is static, or the
        # program would not have compiled. Its value is passed per call.)
        self.arg_to_ph = arg_to_ph
        self.size_arg_set = set(size_args)
        self.weight_plan = [(arg_to_ph[ai], ai) for ai, a in enumerate(args) if a.is_weight]
        # Per weight: the address read in place (an int), or (address, version, generation) of
        # the copy on the device; None before the first call.
        self.weight_state: list = [None] * len(self.weight_plan)
        # Where device memory is not host memory, a copied weight stays on the device until its
        # tensor changes; on the CPU plugin one it cannot read in place is copied every call.
        self.copies_resident = opts.target != "cpu" or not opts.host_aliasing
        # User arguments: a placeholder, the seed, or (bucketed) the real size of a symbol.
        self.user_plan = [_SEED if ai == self.seed_arg else arg_to_ph[ai] if ai in arg_to_ph else size_args[ai]
                          for ai in self.program.user_args]
        out = gm.graph.output_node().args[0]
        self.returns_sequence = isinstance(out, (list, tuple))
        out_nodes = list(out) if self.returns_sequence else [out]
        results = self.program.results
        plan = []
        for k, slot in enumerate(self.program.output_slots):
            if isinstance(slot, _C.Output.Result) and isinstance(_val(out_nodes[k]), torch.SymInt):
                plan.append(("int", slot.index))  # a data-dependent size the program counted
            elif isinstance(slot, _C.Output.Result):
                dt, dims, nbytes = results[slot.index]
                stride = None
                v = _val(out_nodes[k])
                # (Not for a bucketed graph: int() of a symbolic stride would specialize its
                # symbols in the shape environment; bucketed results come back contiguous.)
                # Saved activations stay dense: the backward reads them as values, and where it
                # runs ops eagerly it lays them out itself (`backend.SavedLayout`). Re-striding
                # them here cost a copy out and one back in per tensor and step.
                saved = saved_from is not None and k >= saved_from
                if bucket is None and not saved and isinstance(v, torch.Tensor) and v.dim() > 1 and not v.is_contiguous():
                    try:
                        stride = tuple(int(s) for s in v.stride())
                    except Exception:  # symbolic strides: keep contiguous
                        stride = None
                plan.append((slot.index, _DTYPES[dt], tuple(dims), nbytes, stride))
            elif isinstance(slot, _C.Output.Const):
                plan.append((None, slot.value))
            elif bucket is not None and slot.expr in bucket:
                plan.append(("size", slot.expr))
            elif bucket is not None and self._sym_output_ok(k):
                plan.append(("expr", k))  # a size expression (`8*s27`), evaluated per call
            else:
                raise TpucError(f"tpuc: {name}: output {k} is the symbolic size {slot.expr}: graphs are compiled per shape",
                                kind="dynamic_shape", graph=name)
        self.out_plan = plan
        # Outputs that are views of an input (`x[a:b]`, the parts of `tensor_split`) are returned
        # as views of the argument, as eager returns them: aot_autograd rebuilds such an output
        # from the compiled one's strides and storage offset, which a new result does not carry.
        self.input_views = [] if bucket is not None else _input_views(gm, out_nodes, saved_from)
        # Statuses eager raises on (linalg's `info`): read after each run by torch's own check.
        self.checks = [(ri, _DTYPES[results[ri][0]], tuple(results[ri][1]), api, is_matrix)
                       for ri, api, is_matrix in self.program.checks]

    def _sym_output_ok(self, k: int) -> bool:
        try:
            self.program.sym_output(k, self.bucket)
            return True
        except TpucError:
            return False

    def _upload(self, j: int, ai: int, t: torch.Tensor) -> None:
        """Gives weight argument `ai` its value from `t`.

        Where the plugin can (the CPU plugin, aligned host memory), the program reads `t`'s
        memory in place at every run: no copy, and no stale value whatever writes that memory
        between calls (in-place ops, copies that keep the version counter, DLPack writers),
        which the version counter alone cannot see. The call checks before every run that `t`
        still lives at that address (`weight_state[j]`); storage that moved (`set_`, `.data =`,
        a storage resized away and back, FSDP2's unsharded parameters) is aliased again.

        On an accelerator (or with the `host_aliasing` option off) the value is copied to the
        device and kept there until the tensor changes: its address or its version counter (any
        in-place op, an optimizer step, `load_state_dict`). A write that keeps the version
        counter (`torch.autograd._unsafe_preserve_version_counter`, DLPack or NumPy views) is
        not seen: call `tpuc.invalidate_weights()` after one. On the CPU plugin a weight it
        cannot read in place is copied for every call, never kept as a snapshot."""
        ptr = t.data_ptr()
        # Where weights are copies (an accelerator, or host aliasing off) nothing is read in
        # place, not even through a buffer another program aliases at the same address.
        if not self.copies_resident and t.is_cpu and t.is_contiguous() and not (t.is_neg() or t.is_conj()):
            # A tensor another program already reads in place (another bucket, another graph
            # of the same model) shares that buffer.
            owner = _RESIDENT.get(ptr)
            g = owner[0]() if owner is not None else None
            if g is not None and g is not self and g.program.weight_address(owner[1]) == ptr \
                    and self.program.adopt_weight(ai, g.program, owner[1]):
                self.weight_state[j] = ptr
                STATS["weight_shares"] += 1
                return
            if self.program.alias_weight(ai, to_dlpack(t.detach())):
                self.weight_state[j] = ptr
                _RESIDENT[ptr] = (weakref.ref(self), ai)
                STATS["weight_uploads"] += 1
                return
        src = t.detach()
        if src.device.type != "cpu":
            src = src.cpu()
        if not src.is_contiguous():
            src = src.contiguous()
        self.program.set_weight(ai, to_dlpack(_resolved(src)))
        self.weight_state[j] = (ptr, t._version, _GENERATION[0]) if self.copies_resident else None
        STATS["weight_copies"] += 1

    def __call__(self, args, sizes: dict[str, int] | None = None):
        t0 = time.perf_counter_ns()
        if self.ranks is not None or _ranks.active() is not None:
            return self._call_ranks(args, sizes)
        consts = self.constants
        for j, (ph, ai) in enumerate(self.weight_plan):
            t = args[ph] if ph < self.num_args else consts[ph]
            st = self.weight_state[j]
            if type(st) is int:
                if st != t.data_ptr() or not t.is_contiguous():
                    self._upload(j, ai, t)
            elif st != (t.data_ptr(), t._version, _GENERATION[0]):
                self._upload(j, ai, t)
        if self.bucket is not None:
            return self._call_bucketed(args, sizes, t0)
        outs = self._outputs(self.program.run(self._user_inputs(args)), None)
        for k, ph in self.passthrough:
            outs[k] = args[ph]
        for k, ph, size, stride, offset in self.input_views:
            base = args[ph]
            outs[k] = base.as_strided(size, stride, base.storage_offset() + offset)
        self.calls += 1
        self.call_ns += time.perf_counter_ns() - t0
        return outs

    def _call_bucketed(self, args, sizes: dict[str, int], t0: int):
        """A bucketed program's call: the inputs at their real sizes (the extension pads them
        into reused staging buffers and passes the real sizes), the results cut to their real
        shapes (in place where the valid part is a prefix)."""
        outs = self._cut_outputs(self.program.run_bucketed(self._user_inputs(args), sizes), sizes)
        for k, ph in self.passthrough:
            outs[k] = args[ph]
        self.calls += 1
        self.call_ns += time.perf_counter_ns() - t0
        return outs

    def _check(self, status) -> None:
        """Raises torch.linalg.LinAlgError as eager does where a status (`status(ri, dtype,
        shape)`: the result as a tensor) is nonzero."""
        for ri, dtype, shape, api, is_matrix in self.checks:
            torch.ops.aten._linalg_check_errors(status(ri, dtype, shape), api, is_matrix=is_matrix)

    def _cut_outputs(self, results, sizes: dict[str, int]) -> list:
        """The graph's outputs from one bucketed run's results (each a buffer and real dims)."""
        if self.checks:
            self._check(lambda ri, dtype, _: _tensor_of(results[ri][0], dtype, tuple(results[ri][1]), math.prod(results[ri][1])))
        outs = []
        for p in self.out_plan:
            ri = p[0]
            if ri is None:
                outs.append(p[1])
            elif ri == "size":
                outs.append(sizes[p[1]])
            elif ri == "expr":
                outs.append(self.program.sym_output(p[1], sizes))
            elif ri == "int":
                outs.append(int(_tensor_of(results[p[1]][0], torch.int64, (), 1)))
            else:
                buf, dims = results[ri]
                n = math.prod(dims)
                outs.append(_tensor_of(buf, p[1], tuple(dims), n) if n else torch.empty(dims, dtype=p[1]))
        return outs

    def _user_inputs(self, args) -> list:
        """The user inputs of one call as DLPack capsules of contiguous host tensors (the real
        sizes of a bucketed program's symbols are not among them: the extension adds them)."""
        inputs = []
        for ph in self.user_plan:
            if isinstance(ph, str):
                continue
            if ph is _SEED:
                inputs.append(to_dlpack(draw_seed()))
                continue
            t = args[ph]
            if not isinstance(t, torch.Tensor):  # a SymInt input: its value
                inputs.append(to_dlpack(_size_tensor(int(t))))
                continue
            if not (t.is_cpu and t.is_contiguous()) or t.is_neg() or t.is_conj():
                t = _resolved(t.detach().cpu().contiguous())
            inputs.append(to_dlpack(t))
        return inputs

    def _call_ranks(self, args, sizes: dict[str, int] | None = None):
        """A per-rank program's call inside `tpuc.run_ranks`: every argument's value on each
        rank, all ranks run at once; returns rank 0's results (the batch keeps the others). A
        bucketed program takes the arguments at their real sizes (`sizes`: every symbol's) and
        its results come back cut to them."""
        batch = _ranks.active()
        if batch is None:
            raise TpucError(f"tpuc: {self.name}: a program over {self.ranks} ranks (functional collectives) runs "
                            "through tpuc.run_ranks(fn, [args of rank 0, args of rank 1, ...])", kind="ranks", graph=self.name)
        if self.ranks != batch.ranks:
            was = "for one device" if self.ranks is None else f"for {self.ranks} ranks"
            raise TpucError(f"tpuc: {self.name}: compiled {was}, called by run_ranks with {batch.ranks} ranks; "
                            "use a fresh torch.compile (or torch._dynamo.reset())", kind="ranks", graph=self.name)
        per_rank: list[list] = [[] for _ in range(batch.ranks)]
        for ai, arg in enumerate(self.program.args):
            aname = arg.name
            if ai in self.size_arg_set:
                continue
            if ai == self.seed_arg:  # one seed for all ranks, as their generators are seeded alike
                seed = draw_seed()
                for row in per_rank:
                    row.append(to_dlpack(seed))
                continue
            ph = self.arg_to_ph[ai]
            t = args[ph] if ph < self.num_args else self.constants[ph]
            if not isinstance(t, torch.Tensor):  # a SymInt argument: one value for all ranks
                for row in per_rank:
                    row.append(to_dlpack(_size_tensor(int(t))))
                continue
            replicated = ph >= self.num_args or ph in self.static or (ph in self.tangents and t.numel() == 1)
            for r, v in enumerate(batch.per_rank(t, f"{self.name}: argument `{aname}`", replicated)):
                v = v.detach()
                if not (v.is_cpu and v.is_contiguous()):
                    v = v.cpu().contiguous()
                per_rank[r].append(to_dlpack(_resolved(v)))
        if self.bucket is not None:
            results = [self._cut_outputs(res, sizes) for res in self.program.run_ranks_bucketed(per_rank, sizes)]
        else:
            results = [self._outputs(bufs, None) for bufs in self.program.run_ranks(per_rank)]
        for k, out in enumerate(results[0]):
            if isinstance(out, torch.Tensor):
                batch.add(out, [res[k] for res in results])
        for k, ph in self.passthrough:
            results[0][k] = args[ph]
        self.calls += 1
        return results[0]

    def _outputs(self, bufs, sizes) -> list:
        """The graph's outputs from one run's result buffers."""
        if self.checks:
            self._check(lambda ri, dtype, shape: _tensor_of(bufs[ri], dtype, shape))
        outs = []
        for p in self.out_plan:
            ri = p[0]
            if ri is None:
                outs.append(p[1])
                continue
            if ri == "size":
                outs.append(sizes[p[1]])
                continue
            if ri == "int":
                outs.append(int(_tensor_of(bufs[p[1]], torch.int64, ())))
                continue
            _, dtype, shape, nbytes, stride = p
            if nbytes == 0:
                t = torch.empty(shape, dtype=dtype)
            else:
                t = _tensor_of(bufs[ri], dtype, shape)
            if stride is not None:
                t = _restride(t, shape, stride)
            outs.append(t)
        return outs


def _input_views(gm: torch.fx.GraphModule, out_nodes: list, saved_from: int | None) -> list:
    """(output, placeholder, size, stride, storage offset from the placeholder's) for each
    output (but saved activations) that views a tensor placeholder's memory, with a static
    layout."""
    from torch.multiprocessing.reductions import StorageWeakRef

    bases = {}
    for i, p in enumerate(n for n in gm.graph.nodes if n.op == "placeholder"):
        v = p.meta.get("val")
        if isinstance(v, torch.Tensor) and type(v.storage_offset()) is int:
            bases.setdefault(StorageWeakRef(v.untyped_storage()), (i, v.storage_offset()))
    views = []
    for k, o in enumerate(out_nodes):
        v = o.meta.get("val") if isinstance(o, torch.fx.Node) else None
        if not isinstance(v, torch.Tensor) or o.op == "placeholder" or (saved_from is not None and k >= saved_from):
            continue
        base = bases.get(StorageWeakRef(v.untyped_storage()))
        layout = (*v.shape, *v.stride(), v.storage_offset())
        if base is not None and all(type(d) is int for d in layout):
            views.append((k, base[0], tuple(v.shape), tuple(v.stride()), v.storage_offset() - base[1]))
    return views


_SIZES: dict[int, torch.Tensor] = {}
# The seed argument's place in a call plan.
_SEED = object()


def draw_seed() -> torch.Tensor:
    """A random program's seed input for one call: two 31-bit words from torch's default
    generator."""
    return torch.randint(0, 2**31 - 1, (2,), dtype=torch.int64)


def _contiguous_strides(shape: tuple) -> tuple:
    strides, acc = [], 1
    for n in reversed(shape):
        strides.append(acc)
        acc *= max(n, 1)
    return tuple(reversed(strides))


def _val(node):
    """The value torch recorded for an output node (None for a constant output)."""
    return node.meta.get("val") if isinstance(node, torch.fx.Node) else None


def _tensor_of(buf, dtype: torch.dtype, shape: tuple, count: int = -1) -> torch.Tensor:
    """A new tensor (not a view: `_base` None, as eager's fresh results are) over a result's
    host memory, no copy. `as_strided_` changes the 1-d tensor's own shape instead of making a
    view of it, which aot_autograd would take for an output aliasing another tensor."""
    return torch.frombuffer(buf, dtype=dtype, count=count).as_strided_(shape, _contiguous_strides(shape))


def _size_tensor(n: int) -> torch.Tensor:
    """A 0-d int64 tensor holding `n` (kept: the same sizes recur every call)."""
    t = _SIZES.get(n)
    if t is None:
        t = _SIZES[n] = torch.tensor(n, dtype=torch.int64)
    return t


def _resolved(t: torch.Tensor) -> torch.Tensor:
    """`t` with its lazy negation and conjugation applied: DLPack describes the stored
    elements only, without those bits."""
    if t.is_neg() or t.is_conj():
        t = t.resolve_neg().resolve_conj()
        if not t.is_contiguous():
            t = t.contiguous()
    return t


def _restride(t: torch.Tensor, shape: tuple, stride: tuple) -> torch.Tensor:
    """`t` (dense, row-major) laid out with the strides eager gives the same output.

    An expanded output (`expand`, `broadcast_to`, ...) has stride 0 along its broadcast dims:
    its values repeat there, so one slice along each such dim is stored and the rest is a view
    of it, as in eager. A layout whose elements overlap in other ways has no tensor to copy into;
    it is returned dense (equal values, other strides).
    """
    base_shape = tuple(1 if st == 0 else n for n, st in zip(shape, stride))
    if base_shape != tuple(shape):
        for d, n in enumerate(base_shape):
            if n == 1 and shape[d] != 1:
                t = t.narrow(d, 0, 1)
    base = torch.empty_strided(base_shape, stride, dtype=t.dtype)
    if torch._debug_has_internal_overlap(base) != 0:
        return t.expand(shape) if base_shape != tuple(shape) else t
    base.copy_(t)
    return base if base_shape == tuple(shape) else base.as_strided(shape, stride)


class GraphModuleWrapper(torch.nn.Module):
    """A compiled part (boxed: a CompiledGraph, or a ShapeSpecialized one) as the submodule
    `gm` of a partitioned FX graph was."""

    def __init__(self, compiled, gm: torch.fx.GraphModule):
        super().__init__()
        self.compiled = compiled
        self.returns_sequence = isinstance(gm.graph.output_node().args[0], (list, tuple))

    def forward(self, *args):
        outs = self.compiled(list(args))
        return tuple(outs) if self.returns_sequence else outs[0]
