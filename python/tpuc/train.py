"""`tpuc.train_step`: a whole training step as one compiled program, its state on the device.

    step = tpuc.train_step(model, optimizer, clip_grad_norm=1.0)
    for batch in data:
        loss = step(**batch)          # forward, backward, clipping, update: one program
        scheduler.step()              # the learning rate is an input: no recompile
    print(loss.item())                # the loss comes down when read
    step.sync()                       # device state -> model.state_dict(), optimizer.state_dict()

The step program is built from two traces joined into one FX graph:

    aot_export_module(model + loss)    joint forward and backward, functional: batch-norm
                                       statistics as buffer mutations, gradients as outputs
    make_fx(tpuc.optim rule)           clipping and the optimizer update as pure tensor ops

    inputs   the state (parameters, buffers, optimizer state), the learning rate of each param
             group (float64), the batch (one set per micro-batch with accumulate=k), and the
             seed of random ops when the model draws any
    outputs  the loss, then the new value of every state entry that changes, each written as a
             mutation of its input: the driver donates the input to it, so the state is updated
             in place on the device

Parameters, buffers and optimizer state are uploaded once and stay resident; each call sends the
batch and the learning rates and gets back a device-backed loss. A host tensor changed behind the
step's back (`load_state_dict`, an edit under `torch.no_grad()`: anything that bumps its version
counter or replaces it) is uploaded again before the next step.
"""

from __future__ import annotations

import contextlib
import json
import os
import time

import torch
import torch.fx
from torch.utils import _pytree as pytree
from torch.utils.dlpack import to_dlpack

from . import _C
from . import optim as _optim
from ._torch_version import check_torch_version
from .errors import TpucError, node_source
from .graph import draw_seed
from .options import Options
from .stats import STATS

__all__ = ["train_step", "TrainStep", "DeviceLoss"]


def train_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, loss_fn=None, *, clip_grad_norm=None,
               accumulate: int = 1, mesh=None, policy=None, options: dict | None = None) -> "TrainStep":
    """A callable that runs one training step of `model` with `optimizer` as one compiled program.

    `loss_fn(model, *args, **kwargs)` returns the scalar loss; without it the model's output is
    the loss: its `.loss` (Hugging Face models given labels), else the output itself, which must be
    a scalar. `clip_grad_norm`: clip the gradients to this global 2-norm first, as
    `torch.nn.utils.clip_grad_norm_` does. `accumulate=k`: each call's batch is split into k
    micro-batches along dim 0, and their gradients are averaged in the same program, as eager's
    `(loss / k).backward()` per micro-batch; the loss returned is their mean. `mesh` ('x=4') and
    `policy` ('dp', 'fsdp', 'tp') compile the step as one SPMD program over the mesh's devices.
    `options`: tpuc's backend options (target, plugin, precision, dump_dir, ...)."""
    return TrainStep(model, optimizer, loss_fn, clip_grad_norm=clip_grad_norm, accumulate=accumulate,
                     mesh=mesh, policy=policy, options=options)


class DeviceLoss:
    """The loss of one step, on the device until read (`item()`, `float()`, `tensor()`)."""

    __slots__ = ("_array", "_value", "step")

    def __init__(self, array, step: int):
        self._array = array
        self._value = None
        self.step = step

    def tensor(self) -> torch.Tensor:
        if self._value is None:
            buf = self._array.to_host()
            dtype = _DTYPES[self._array.dtype]
            self._value = torch.frombuffer(buf, dtype=dtype).reshape(self._array.shape).clone()
            self._array = None
        return self._value

    def item(self) -> float:
        return self.tensor().item()

    def __float__(self) -> float:
        return float(self.item())

    def detach(self) -> torch.Tensor:
        return self.tensor()

    def cpu(self) -> torch.Tensor:
        return self.tensor()

    def __repr__(self) -> str:
        return f"DeviceLoss({self.item():.6g}, step={self.step})"

    def backward(self, *_a, **_k):
        raise TpucError("tpuc.train_step: the step already ran the backward pass and the optimizer update; "
                        "its loss is a value, not a graph", kind="train_step")


_DTYPES = {
    name: getattr(torch, name)
    for name in ("bool", "int8", "int16", "int32", "int64", "uint8", "float16", "bfloat16", "float32", "float64")
}


class _Entry:
    """One tensor of the step's state: a parameter, a buffer, or an optimizer state tensor."""

    __slots__ = ("name", "kind", "fqn", "param", "key", "group")

    def __init__(self, name, kind, fqn, param=None, key=None, group=None):
        self.name, self.kind, self.fqn, self.param, self.key, self.group = name, kind, fqn, param, key, group


class _LossModule(torch.nn.Module):
    """`model` and the loss as one module whose forward takes the call's tensors flat and
    returns `(loss,)`, as aot_export_module wants it."""

    def __init__(self, model, loss_fn, spec, template, positions):
        super().__init__()
        self.model = model
        self._loss_fn, self._spec, self._template, self._positions = loss_fn, spec, template, positions

    def forward(self, *tensors):
        flat = list(self._template)
        for pos, t in zip(self._positions, tensors):
            flat[pos] = t
        args, kwargs = pytree.tree_unflatten(flat, self._spec)
        if self._loss_fn is not None:
            loss = self._loss_fn(self.model, *args, **kwargs)
        else:
            out = self.model(*args, **kwargs)
            loss = out.get("loss") if isinstance(out, dict) else getattr(out, "loss", out)
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1 or not loss.dtype.is_floating_point:
            what = type(loss).__name__ if not isinstance(loss, torch.Tensor) else f"a {loss.dtype} tensor of shape {list(loss.shape)}"
            raise TpucError(f"tpuc.train_step: the loss must be a floating scalar tensor, got {what}; pass loss_fn="
                            "(model, *args, **kwargs) -> loss, or labels to a model that computes its loss",
                            kind="train_step")
        return (loss.reshape(()),)


class _Program:
    """One compiled step program (one per input signature) and where its arguments go."""

    def __init__(self, program, entries_by_name):
        self.program = program
        self.state_args: list[tuple[int, _Entry]] = []
        self.user_args: list[str] = []
        for ai, a in enumerate(program.args):
            if a.kind in (_C.ArgKind.Parameter, _C.ArgKind.Buffer):
                e = entries_by_name.get(a.name)
                if e is not None:
                    self.state_args.append((ai, e))
        for ai in program.user_args:
            self.user_args.append(program.args[ai].name)
        self.random = program.seed_arg is not None


class TrainStep:
    """See `train_step`."""

    def __init__(self, model, optimizer, loss_fn=None, *, clip_grad_norm=None, accumulate=1, mesh=None, policy=None,
                 options=None):
        check_torch_version()
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"tpuc.train_step: model must be a torch.nn.Module, got {type(model).__name__}")
        if not isinstance(accumulate, int) or accumulate < 1:
            raise ValueError(f"tpuc.train_step: accumulate must be a positive int, got {accumulate!r}")
        options = dict(options or {})
        if mesh is not None:
            options["mesh"] = mesh
        if policy is not None:
            if mesh is None and "mesh" not in options:
                raise ValueError("tpuc.train_step: policy needs a mesh (e.g. mesh='x=4')")
            options["shard_policy"] = policy
        self.opts = Options.resolve(options)
        self.opts.apply_cache_env()
        self.opts.apply_host_aliasing()
        self.model, self.optimizer, self.loss_fn = model, optimizer, loss_fn
        self.clip_grad_norm = None if clip_grad_norm is None else float(clip_grad_norm)
        self.accumulate = accumulate
        self.rule = _optim.rule_for(optimizer)
        self.steps = 0
        self._programs: dict = {}
        # The program whose resident buffers hold the device state (None before the first step).
        self._owner: _Program | None = None
        # Per state entry: (id, version) of the host tensor as last uploaded or synced.
        self._host: dict[str, tuple] = {}
        self._entries = self._state_entries()
        self._by_name = {e.name: e for e in self._entries}
        self._fqn_of = {id(e.param): e.fqn for e in self._entries if e.kind == "param"}
        # Time spent in __call__ outside the program's execution (host overhead), for benchmarks.
        self.call_ns = 0
        self.run_ns = 0

    # ---- state
    def _state_entries(self) -> list[_Entry]:
        entries = []
        params = {}
        for fqn, p in self.model.named_parameters(remove_duplicate=True):
            params[id(p)] = fqn
            entries.append(_Entry(f"param/{fqn}", "param", fqn, param=p))
        for fqn, _b in self.model.named_buffers(remove_duplicate=True):
            entries.append(_Entry(f"buffer/{fqn}", "buffer", fqn))
        for gi, group in enumerate(self.optimizer.param_groups):
            for p in group["params"]:
                fqn = params.get(id(p))
                if fqn is None:
                    raise TpucError("tpuc.train_step: the optimizer holds a tensor that is not a parameter of the model",
                                    kind="optimizer")
                for key in self.rule.state_keys(group):
                    entries.append(_Entry(f"optim/{key}/{fqn}", "optim", fqn, param=p, key=key, group=gi))
            if self.rule.names[0] == "SGD" and group["momentum"] != 0 and group.get("dampening", 0) != 0:
                entries.append(_Entry(f"tpuc/first/{gi}", "first", None, group=gi))
        return entries

    def _host_value(self, e: _Entry) -> torch.Tensor | None:
        """The host tensor behind entry `e` now (None: an optimizer state torch has not made)."""
        if e.kind == "param":
            return e.param
        if e.kind == "buffer":
            return self.model.get_buffer(e.fqn)
        if e.kind == "optim":
            return self.optimizer.state.get(e.param, {}).get(e.key)
        return None

    def _initial(self, e: _Entry) -> torch.Tensor:
        v = self._host_value(e)
        if v is not None:
            return v
        if e.kind == "first":
            # 1 until the group's first step (SGD takes the gradient as its momentum then).
            return torch.tensor(1.0 if not self.optimizer.state.get(self.optimizer.param_groups[e.group]["params"][0]) else 0.0)
        return self.rule.initial(e.param, e.key, self.optimizer.param_groups[e.group])

    def _stamp(self, e: _Entry):
        v = self._host_value(e)
        return None if v is None else (id(v), v._version)

    # ---- the call
    def __call__(self, *args, **kwargs):
        t0 = time.perf_counter_ns()
        spec, template, positions, tensors, key = self._signature(args, kwargs)
        prog = self._programs.get(key)
        if prog is None:
            prog = self._programs[key] = self._compile(spec, template, positions, tensors)
        if not prog.program.can_run:
            raise TpucError(f"tpuc.train_step: the step was compiled for {self.opts.target}"
                            f"{' ' + self.opts.topology if self.opts.topology else ''}, and this host has no such device "
                            "(step.compile(...) compiles without running)", kind="device")
        self._make_owner(prog)
        self._refresh(prog)
        k = self.accumulate
        inputs = [to_dlpack(torch.tensor([float(g["lr"]) for g in self.optimizer.param_groups], dtype=torch.float64))]
        for mb in range(k):
            for t in tensors:
                part = t.chunk(k, 0)[mb] if k > 1 else t
                part = part.detach()
                if not (part.is_cpu and part.is_contiguous()):
                    part = part.cpu().contiguous()
                inputs.append(to_dlpack(part))
        if prog.random:
            inputs.append(to_dlpack(draw_seed()))
        t1 = time.perf_counter_ns()
        try:
            results = prog.program.step(inputs)
        except Exception:
            # The state the failed step donated is gone: the next step uploads it from the host.
            self._owner = None
            raise
        t2 = time.perf_counter_ns()
        self.steps += 1
        STATS["train_steps"] += 1
        loss = DeviceLoss(results[0], self.steps)
        self.run_ns += t2 - t1
        self.call_ns += time.perf_counter_ns() - t0
        return loss

    def compile(self, *args, **kwargs) -> dict:
        """Compiles the step for this call signature without running it (e.g. for a TPU
        topology on a host without chips); returns the compile summary: `target`, `topology`,
        `cache`, `cost` and `memory` (`argument_bytes`, `output_bytes`, `temp_bytes` per device)
        where the plugin reports them."""
        spec, template, positions, tensors, key = self._signature(args, kwargs)
        prog = self._programs.get(key)
        if prog is None:
            prog = self._programs[key] = self._compile(spec, template, positions, tensors)
        return json.loads(prog.program.summary_json)

    def _signature(self, args, kwargs):
        """The call's tensors, its constants and the key of its program."""
        flat, spec = pytree.tree_flatten((args, kwargs))
        positions = [i for i, v in enumerate(flat) if isinstance(v, torch.Tensor)]
        tensors = [flat[i] for i in positions]
        for i, v in enumerate(flat):
            if i not in positions and not isinstance(v, (int, float, bool, str, type(None))):
                raise TpucError(f"tpuc.train_step: argument {i} of type {type(v).__name__} is neither a tensor nor a "
                                "constant (int, float, bool, str, None)", kind="train_step")
        k = self.accumulate
        if k > 1:
            for t in tensors:
                if t.dim() == 0 or t.shape[0] % k:
                    raise TpucError(f"tpuc.train_step: accumulate={k} splits every tensor argument along dim 0, "
                                    f"got shape {list(t.shape)}", kind="train_step")
        template = [None if i in positions else v for i, v in enumerate(flat)]
        key = (
            str(spec), tuple(template),
            tuple((tuple(t.shape), t.dtype) for t in tensors),
            self.model.training, torch.is_grad_enabled(),
            _autocast_state(),
            tuple(self.rule.hyper(g) for g in self.optimizer.param_groups),
            tuple(len(g["params"]) for g in self.optimizer.param_groups),
        )
        return spec, template, positions, tensors, key

    def _make_owner(self, prog: _Program) -> None:
        """Makes `prog` hold the device state: moved from the previous owner where it has it,
        uploaded from the host otherwise."""
        if self._owner is prog:
            return
        old = self._owner
        if old is not None:
            theirs = {e.name: ai for ai, e in old.state_args}
            for ai, e in prog.state_args:
                if e.name in theirs and prog.program.take_weight(ai, old.program, theirs[e.name]):
                    continue
                self._upload(prog, ai, e)
        else:
            for ai, e in prog.state_args:
                self._upload(prog, ai, e)
        self._owner = prog

    def _upload(self, prog: _Program, ai: int, e: _Entry) -> None:
        v = self._initial(e).detach()
        if not (v.is_cpu and v.is_contiguous()):
            v = v.cpu().contiguous()
        prog.program.set_weight(ai, to_dlpack(v))
        self._host[e.name] = self._stamp(e)

    def _refresh(self, prog: _Program) -> None:
        """Uploads the entries whose host tensor changed since it was last uploaded or synced."""
        host = self._host
        for ai, e in prog.state_args:
            if self._stamp(e) != host.get(e.name):
                self._upload(prog, ai, e)

    # ---- writing the state back
    def sync(self) -> None:
        """Writes the device state into the model's parameters and buffers and the optimizer's
        `state`, as eager training would hold them: `model.state_dict()` and
        `optimizer.state_dict()` are then a checkpoint."""
        prog = self._owner
        if prog is None:
            return
        with torch.no_grad():
            for ai, e in prog.state_args:
                buf = prog.program.read_weight(ai)
                a = prog.program.args[ai]
                dt, dims = a.dtype, a.dims
                value = torch.frombuffer(buf, dtype=_DTYPES[dt]).reshape(dims) if len(buf) else torch.empty(dims, dtype=_DTYPES[dt])
                if e.kind == "param":
                    e.param.copy_(value)
                elif e.kind == "buffer":
                    self.model.get_buffer(e.fqn).copy_(value)
                elif e.kind == "optim":
                    state = self.optimizer.state[e.param]
                    if e.key in state and isinstance(state[e.key], torch.Tensor) and state[e.key].shape == value.shape:
                        state[e.key].copy_(value)
                    else:
                        state[e.key] = value.clone()
                self._host[e.name] = self._stamp(e)

    def export(self, path: str, *args, state: bool = True, **kwargs) -> None:
        """Writes the step program for the given example call, its state and a manifest into the
        folder `path`, for `tpuc run PATH --steps N --inputs ...` to replay without Python:

            step.json      the manifest: program, state files, inputs, learning rates, seed
            program.json   the step program (torch.export schema)
            state/N.npy    the state as it is now (after a sync), in program order

        The learning rates are the param groups' current ones. `state=False` leaves out the
        state files of the parameters, buffers and optimizer state (the manifest still names
        them, with dtype and shape), for a user who writes them elsewhere, e.g. on the machine
        that replays the step."""
        import numpy as np

        self.sync()
        flat, spec = pytree.tree_flatten((args, kwargs))
        positions = [i for i, v in enumerate(flat) if isinstance(v, torch.Tensor)]
        tensors = [flat[i] for i in positions]
        template = [None if i in positions else v for i, v in enumerate(flat)]
        program_json, state_names = self._trace(spec, template, positions, tensors)
        os.makedirs(os.path.join(path, "state"), exist_ok=True)
        with open(os.path.join(path, "program.json"), "wb") as f:
            f.write(program_json)
        files = []
        values = [(name, self._initial(self._by_name[name])) for name in state_names]
        # Constants the trace lifted out of the graph travel as state that never changes.
        values += list(self._constants.items())
        for i, (name, v) in enumerate(values):
            v = v.detach().cpu().contiguous()
            file = f"state/{i}.npy"
            if state or name in self._constants:
                np.save(os.path.join(path, file), _to_numpy(v))
            files.append({"name": name, "file": file, "dtype": str(v.dtype).removeprefix("torch."), "shape": list(v.shape)})
        batch = [{"dtype": str(t.dtype).removeprefix("torch."),
                  "shape": [t.shape[0] // self.accumulate, *t.shape[1:]] if self.accumulate > 1 else list(t.shape)}
                 for t in tensors] * self.accumulate
        manifest = {
            "format": "tpuc-train-step", "version": 1, "program": "program.json", "state": files,
            "lr": [float(g["lr"]) for g in self.optimizer.param_groups],
            "batch": batch, "accumulate": self.accumulate, "steps_done": self.steps,
        }
        with open(os.path.join(path, "step.json"), "w") as f:
            json.dump(manifest, f, indent=1)

    # ---- building the program
    def _compile(self, spec, template, positions, tensors) -> _Program:
        t0 = time.perf_counter()
        program_json, state_names = self._trace(spec, template, positions, tensors)
        t1 = time.perf_counter()
        name = f"train_step{len(self._programs)}"
        opts = self.opts
        if opts.dump_dir:
            d = os.path.join(opts.dump_dir, name)
            os.makedirs(d, exist_ok=True)
            with open(os.path.join(d, "graph.json"), "wb") as f:
                f.write(program_json)
        try:
            program = self._compile_program(program_json, name, opts)
        except TpucError as e:
            raise self._located(e, spec, template, positions, tensors) from None
        STATS["programs"] += 1
        if program.cache == "miss":
            STATS["compiles"] += 1
        STATS[f"cache_{program.cache}"] += 1
        prog = _Program(program, self._by_name)
        # Constants lifted from the graph are set once.
        for ai, a in enumerate(program.args):
            if a.kind == _C.ArgKind.Constant and program.can_run:
                program.set_weight(ai, to_dlpack(self._constants[a.name].detach().contiguous()))
        self.trace_seconds = t1 - t0
        self.compile_seconds = time.perf_counter() - t1
        return prog

    def _compile_program(self, program_json: bytes, name: str, opts: Options):
        return _C.Program.compile(
            program_json, name=name, target=opts.target, topology=opts.topology, plugin=opts.plugin_path(),
            dump_dir=opts.dump_dir, verify_each=opts.verify_each, precision=opts.matmul_precision(),
            conv_precision=opts.conv_precision_value(), bf16=opts.bf16,
            allow_excess_precision=opts.allow_excess_precision, fusion=opts.fusion, mesh=opts.mesh,
            shard_policy=opts.shard_policy, shard=dict(opts.shard) or None, donate=True,
        )

    def _located(self, e: TpucError, spec, template, positions, tensors) -> TpucError:
        """`e` with the user's source line of the op it names. The joint graph's nodes carry
        torch's own frames, never the model's (aot's graph module, or for a custom op with a
        registered gradient, torch's autograd wrapper of it): the model's forward is traced once
        more (torch.export, non-strict, only on this error path) to find the first node of the
        same op. An op that only the backward or the optimizer has keeps the error as it is."""
        if not e.target:
            return e
        k = self.accumulate
        micro = tuple(t.chunk(k, 0)[0].detach() if k > 1 else t.detach() for t in tensors)
        try:
            from .serialize import target_name

            wrapper = _LossModule(self.model, self.loss_fn, spec, template, positions)
            ep = torch.export.export(wrapper, micro, strict=False)
            source = next((node_source(n) for n in ep.graph.nodes
                           if n.op == "call_function" and target_name(n.target) == e.target), None)
        except Exception:
            source = None
        if source is None:
            return e
        first = str(e).splitlines()[0]
        cut = first.find(" (")
        message = (first[:cut] if cut > 0 else first) + f" ({source})"
        rest = [n for n in e.nodes if n.get("target") != e.target]
        note = f"\n  ... and {len(rest)} more node(s) of other ops; tpuc.train_step(..., options={{'dump_dir': ...}}) writes the graph" if rest else ""
        return TpucError(message + note, kind=e.kind, node=e.node, target=e.target, source=source, graph=e.graph,
                         nodes=e.nodes)

    def _trace(self, spec, template, positions, tensors):
        """The step's FX graph for this call signature, serialized; and the state names in
        program order."""
        from torch._functorch.aot_autograd import aot_export_module
        from torch.fx.experimental.proxy_tensor import make_fx
        from torch.nn.attention import SDPBackend, sdpa_kernel

        from .backend import _decompositions
        from .serialize import graph_to_json, lift_tensor_constants

        k = self.accumulate
        micro = [t.chunk(k, 0)[0].detach() if k > 1 else t.detach() for t in tensors]
        wrapper = _LossModule(self.model, self.loss_fn, spec, template, positions)
        decomps = _decompositions()
        def export():
            with sdpa_kernel(SDPBackend.MATH):
                return aot_export_module(wrapper, tuple(micro), trace_joint=True, output_loss_index=0,
                                         decompositions=decomps)

        try:
            try:
                joint, sig = export()
            except AssertionError as e:
                if "did not receive a gradient" not in str(e):
                    raise
                # A parameter name the loss does not reach gets no gradient, which aot refuses:
                # a parameter the model never uses, or one name of a tied weight that the
                # forward reads under its other name (BERT's `cls.predictions.bias`). Such a
                # name is traced as a constant of the step.
                with _without_gradients(wrapper, micro):
                    joint, sig = export()
        except TpucError:
            raise
        except Exception as e:
            where = _user_frame_of(e)
            raise TpucError(f"tpuc.train_step: could not trace the model's forward and backward"
                            f"{f' at {where}' if where else ''}: {type(e).__name__}: "
                            f"{str(e).splitlines()[0] if str(e) else ''}{_hint(e)}", kind="trace", source=where) from e
        if sig.user_inputs_to_mutate:
            raise TpucError("tpuc.train_step: the model writes into its inputs "
                            f"({', '.join(sig.user_inputs_to_mutate.values())}); a step takes them as values",
                            kind="train_step")
        ph = [n for n in joint.graph.nodes if n.op == "placeholder"]
        n_params, n_buffers = len(sig.parameters), len(sig.buffers)
        # Tied weights reach aot under each of their names: every name maps to one state entry.
        canon = {}
        for name in sig.parameters:
            p = wrapper.get_parameter(name)
            canon[name] = self._fqn_of[id(p)]
        param_names = [canon[s] for s in sig.parameters]
        strip = lambda s: s[len("model."):] if s.startswith("model.") else s
        buffer_names = [strip(s) for s in sig.buffers]
        outs = list(joint.graph.output_node().args[0])
        n_mut = len(sig.buffers_to_mutate)
        mutation_of = [strip(sig.buffers_to_mutate[n.name]) for n in outs[:n_mut]]
        grad_nodes = outs[n_mut + len(sig.user_outputs):]
        grads_to = sig.backward_signature.gradients_to_parameters
        grad_fqns = [canon[grads_to[n.name]] for n in grad_nodes]

        # The optimizer's part: parameters that are in a param group and get a gradient.
        groups = self.optimizer.param_groups
        updated = []  # (group index, fqn)
        for gi, group in enumerate(groups):
            for p in group["params"]:
                fqn = self._fqn_of[id(p)]
                if fqn in grad_fqns:
                    updated.append((gi, fqn))
        params_now = dict(self.model.named_parameters(remove_duplicate=True))
        opt_entries = {(e.fqn, e.key): e for e in self._entries if e.kind == "optim"}
        first_groups = sorted(e.group for e in self._entries if e.kind == "first")
        rule, clip = self.rule, self.clip_grad_norm
        keys_of = [rule.state_keys(groups[gi]) for gi, _f in updated]

        def opt_fn(params, grads, losses, states, firsts, lrs):
            # Flat in, flat out: make_fx flattens both.
            loss = losses[0] if k == 1 else sum(losses[1:], losses[0]) / k
            grads = grads[0] if k == 1 else [sum(gs[1:], gs[0]) / k for gs in zip(*grads)]
            if clip is not None:
                grads = _optim.clip_by_global_norm(list(grads), clip)
            first = dict(zip(first_groups, firsts))
            out_params, out_states = [], []
            for (gi, _fqn), p, g, st, keys in zip(updated, params, grads, states, keys_of):
                q, ns = rule.update(p, g, dict(zip(keys, st)), lrs[gi], groups[gi], first.get(gi))
                out_params.append(q)
                out_states += [ns[key] for key in keys]
            return [loss, *out_params, *out_states, *[torch.zeros_like(f) for f in firsts]]

        ex_params = [params_now[f].detach() for _gi, f in updated]
        ex_grads = [[params_now[f].detach() for _gi, f in updated] for _ in range(k)]
        ex_losses = [torch.zeros((), dtype=_loss_dtype(joint, sig)) for _ in range(k)]
        ex_states = [[self._initial(opt_entries[(f, key)]).detach() for key in keys]
                     for (_gi, f), keys in zip(updated, keys_of)]
        first_entries = {e.group: e for e in self._entries if e.kind == "first"}
        ex_firsts = [self._initial(first_entries[gi]) for gi in first_groups]
        ex_lrs = torch.zeros(len(groups), dtype=torch.float64)
        opt_args = (ex_params, ex_grads, ex_losses, ex_states, ex_firsts, ex_lrs)
        try:
            opt_gm = make_fx(opt_fn, decomposition_table=decomps, tracing_mode="fake")(*opt_args)
        except Exception as e:
            raise TpucError(f"tpuc.train_step: could not trace the optimizer update: {type(e).__name__}: {e}",
                            kind="trace") from e

        # ---- join: the state, then the learning rates, then each micro-batch's inputs
        root = torch.nn.Module()
        _own_constants(root, joint, "j")
        _own_constants(root, opt_gm, "o")
        g = torch.fx.Graph()
        state_nodes: dict[str, torch.fx.Node] = {}
        state_order: list[str] = []

        def state_ph(name, val):
            if name in state_nodes:
                return
            n = g.placeholder(f"s{len(state_order)}")
            n.meta["val"] = val
            state_nodes[name] = n
            state_order.append(name)

        for i, f in enumerate(param_names):
            state_ph(f"param/{f}", ph[i].meta["val"])
        for i, f in enumerate(buffer_names):
            state_ph(f"buffer/{f}", ph[n_params + i].meta["val"])
        opt_ph = iter([n for n in opt_gm.graph.nodes if n.op == "placeholder"])
        take = lambda n: [next(opt_ph) for _ in range(n)]
        opt_params = take(len(updated))
        opt_grads = [take(len(updated)) for _ in range(k)]
        opt_losses = take(k)
        opt_states = [take(len(keys)) for keys in keys_of]
        opt_firsts = take(len(first_groups))
        (opt_lrs,) = take(1)
        for (_gi, f), keys, nodes in zip(updated, keys_of, opt_states):
            for key, n in zip(keys, nodes):
                state_ph(f"optim/{key}/{f}", n.meta["val"])
        for gi, n in zip(first_groups, opt_firsts):
            state_ph(f"tpuc/first/{gi}", n.meta["val"])
        lr_node = g.placeholder("lr")
        lr_node.meta["val"] = opt_lrs.meta["val"]
        user_ph = ph[n_params + n_buffers:]
        batch_nodes = []
        for mb in range(k):
            row = []
            for j, u in enumerate(user_ph):
                n = g.placeholder(f"x{mb}_{j}" if k > 1 else f"x{j}")
                n.meta["val"] = u.meta["val"]
                row.append(n)
            batch_nodes.append(row)

        # ---- the joint graph, once per micro-batch (buffer updates chain through them)
        buffers = {f: state_nodes[f"buffer/{f}"] for f in buffer_names}
        losses, grads = [], []
        for mb in range(k):
            val_map = {}
            for i in range(n_params):
                val_map[ph[i]] = state_nodes[f"param/{param_names[i]}"]
            for i in range(n_buffers):
                val_map[ph[n_params + i]] = buffers[buffer_names[i]]
            for j, u in enumerate(user_ph):
                val_map[u] = batch_nodes[mb][j]
            out = list(g.graph_copy(joint.graph, val_map))
            for f, n in zip(mutation_of, out[:n_mut]):
                buffers[f] = n
            losses.append(out[n_mut])
            mine: dict[str, torch.fx.Node] = {}
            for f, n in zip(grad_fqns, out[n_mut + len(sig.user_outputs):]):
                # A tied weight's gradient is the sum over its names.
                mine[f] = n if f not in mine else _add(g, mine[f], n)
            grads.append([mine[f] for _gi, f in updated])

        # ---- the optimizer
        val_map = {}
        for (_gi, f), n in zip(updated, opt_params):
            val_map[n] = state_nodes[f"param/{f}"]
        for mb in range(k):
            for j, n in enumerate(opt_grads[mb]):
                val_map[n] = grads[mb][j]
        for mb, n in enumerate(opt_losses):
            val_map[n] = losses[mb]
        for (_gi, f), keys, nodes in zip(updated, keys_of, opt_states):
            for key, n in zip(keys, nodes):
                val_map[n] = state_nodes[f"optim/{key}/{f}"]
        for gi, n in zip(first_groups, opt_firsts):
            val_map[n] = state_nodes[f"tpuc/first/{gi}"]
        val_map[opt_lrs] = lr_node
        out = iter(g.graph_copy(opt_gm.graph, val_map))

        # ---- outputs: the loss, then every state entry that changes
        results, kinds, targets = [next(out)], ["user_output"], [None]
        for _gi, f in updated:
            results.append(next(out)); kinds.append("parameter_mutation"); targets.append(f"param/{f}")
        for (_gi, f), keys in zip(updated, keys_of):
            for key in keys:
                results.append(next(out)); kinds.append("buffer_mutation"); targets.append(f"optim/{key}/{f}")
        for gi in first_groups:
            results.append(next(out)); kinds.append("buffer_mutation"); targets.append(f"tpuc/first/{gi}")
        for f in dict.fromkeys(buffer_names):
            if buffers[f] is not state_nodes[f"buffer/{f}"]:
                results.append(buffers[f]); kinds.append("buffer_mutation"); targets.append(f"buffer/{f}")
        g.output(tuple(results))
        gm = torch.fx.GraphModule(root, g)
        gm.graph.eliminate_dead_code()
        gm.recompile()
        constants = lift_tensor_constants(gm)
        self._constants = {name: t for name, t in constants}
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        n_state = len(state_order)
        input_kinds, input_targets = [], []
        for i, n in enumerate(placeholders):
            if i < n_state:
                input_kinds.append("parameter" if state_order[i].startswith("param/") else "buffer")
                input_targets.append(state_order[i])
            elif n.name in self._constants:
                input_kinds.append("tensor_constant")
                input_targets.append(n.name)
            else:
                input_kinds.append("user_input")
                input_targets.append(n.name)
        program_json = graph_to_json(gm, input_kinds, input_targets, output_kinds=kinds, output_targets=targets)
        return program_json, state_order


def _own_constants(root: torch.nn.Module, gm: torch.fx.GraphModule, prefix: str) -> None:
    """Moves the tensors `gm`'s get_attr nodes read onto `root` under names of their own (the
    two traced graphs number their constants alike)."""
    for n in gm.graph.nodes:
        if n.op == "get_attr":
            value = gm
            for part in n.target.split("."):
                value = getattr(value, part)
            name = f"_{prefix}_{n.target.replace('.', '_')}"
            setattr(root, name, value)
            n.target = name


def _add(g: torch.fx.Graph, a: torch.fx.Node, b: torch.fx.Node) -> torch.fx.Node:
    n = g.call_function(torch.ops.aten.add.Tensor, (a, b))
    n.meta["val"] = a.meta["val"]
    return n


@contextlib.contextmanager
def _without_gradients(wrapper: torch.nn.Module, args):
    """While tracing: every parameter name that one eager forward's loss does not depend on is
    registered with a copy that needs no gradient (each name of a tied weight counts alone, as
    aot traces them)."""
    names = dict(wrapper.named_parameters(remove_duplicate=False))
    copies = {n: p.detach().clone().requires_grad_(p.requires_grad) for n, p in names.items()}
    with torch.enable_grad():
        (loss,) = torch.func.functional_call(wrapper, copies, tuple(args), tie_weights=False)
    wanted = [n for n, c in copies.items() if c.requires_grad]
    grads = torch.autograd.grad(loss, [copies[n] for n in wanted], allow_unused=True)
    unused = [n for n, g in zip(wanted, grads) if g is None]
    saved = []
    for n in unused:
        owner_path, _, attr = n.rpartition(".")
        owner = wrapper.get_submodule(owner_path) if owner_path else wrapper
        saved.append((owner, attr, owner._parameters[attr]))
        owner._parameters[attr] = torch.nn.Parameter(names[n].detach().clone(), requires_grad=False)
    try:
        yield
    finally:
        for owner, attr, p in saved:
            owner._parameters[attr] = p


def _user_frame_of(e: BaseException) -> str | None:
    """The innermost frame of `e`'s traceback in the user's code (outside torch and tpuc), as
    `file.py:LINE in func`."""
    import traceback

    pick = None
    for frame in traceback.extract_tb(e.__traceback__):
        path = frame.filename
        if "/torch/" in path or "/tpuc/" in path or "/transformers/utils/" in path or path.startswith("<"):
            continue
        pick = frame
    return f"{os.path.basename(pick.filename)}:{pick.lineno} in {pick.name}" if pick else None


def _hint(e: BaseException) -> str:
    text = f"{type(e).__name__} {e}"
    if "DataDependent" in text or "_local_scalar_dense" in text or "data-dependent" in text.lower():
        return ("; the step branches on (or reads) a tensor's value, which one compiled program cannot: "
                "compute both branches with torch.where, or move the decision out of the step")
    return ""


def _loss_dtype(joint, sig) -> torch.dtype:
    out = list(joint.graph.output_node().args[0])
    v = out[len(sig.buffers_to_mutate)].meta.get("val")
    return v.dtype if isinstance(v, torch.Tensor) else torch.float32


def _autocast_state() -> tuple:
    return tuple(
        (dev, torch.is_autocast_enabled(dev), torch.get_autocast_dtype(dev) if torch.is_autocast_enabled(dev) else None)
        for dev in ("cpu", "cuda")
    )


def _to_numpy(t: torch.Tensor):
    if t.dtype == torch.bfloat16:
        import ml_dtypes

        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()
