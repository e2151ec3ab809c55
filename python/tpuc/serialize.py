"""An aot_autograd FX graph as torch.export schema JSON, in memory.

The graph is written unchanged (same nodes, names and targets) by torch's own graph serializer,
with a signature that says which placeholders are parameters, buffers or lifted constants (the
driver keeps those resident on the device) and which are user inputs, and the shape
environment's range of each symbol in the inputs' sizes. Node metadata is cut to
what the importer reads (`val` for tensor types, `stack_trace` for source lines, `custom` for
`tpuc.precision` regions) while the serializer runs (a node without a stack trace gets the
frame of its module's `forward`, see `errors.stack_trace`); Dynamo's other metadata (nn_module_stack
with class objects, from_node) is slow to write and partly rejected by the serializer.
"""

from __future__ import annotations

import operator

import torch
import torch.fx
from torch._export.serde import schema as S
from torch._export.serde import serialize as _serde
from torch.export.graph_signature import (
    ConstantArgument,
    ExportGraphSignature,
    InputKind,
    InputSpec,
    OutputKind,
    OutputSpec,
    SymIntArgument,
    TensorArgument,
    TokenArgument,
)

from .errors import TpucError, stack_trace

_KIND = {
    "user_input": InputKind.USER_INPUT,
    "parameter": InputKind.PARAMETER,
    "buffer": InputKind.BUFFER,
    "tensor_constant": InputKind.CONSTANT_TENSOR,
}

_OUT_KIND = {
    "user_output": OutputKind.USER_OUTPUT,
    "buffer_mutation": OutputKind.BUFFER_MUTATION,
    "parameter_mutation": OutputKind.PARAMETER_MUTATION,
}

_KEEP_META = ("val", "stack_trace", "custom")


def target_name(target) -> str:
    """The FX target as the serializer writes it (`torch.ops.aten.add.Tensor`, `_operator.mul`),
    the names `tpuc._C.supported_targets()` lists."""
    if isinstance(target, str):
        return target
    module = getattr(target, "__module__", "") or ""
    if module.startswith("torch._ops"):
        return f"{module.replace('torch._ops', 'torch.ops')}.{target.__name__}"
    return f"{module}.{getattr(target, '__name__', str(target))}"


def graph_to_json(gm: torch.fx.GraphModule, input_kinds: list[str], input_targets: list[str] | None = None,
                  output_kinds: list[str] | None = None, output_targets: list[str | None] | None = None) -> bytes:
    """Serializes `gm`. `input_kinds[i]` is the kind of placeholder i (`user_input`, `parameter`,
    `buffer`, `tensor_constant`); `input_targets[i]` names a weight (default: the placeholder).
    `output_kinds[k]` is output k's kind (`user_output`, default; `buffer_mutation` or
    `parameter_mutation` of the weight `output_targets[k]` names). Every node needs
    `meta["val"]` (aot_autograd and make_fx graphs have it)."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(input_kinds) != len(placeholders):
        raise ValueError(f"{len(input_kinds)} input kinds for {len(placeholders)} placeholders")
    # An opaque object no node reads (a DTensor's device mesh, which aot_autograd passes along
    # with its local tensor) is written as a None constant input.
    opaque = {n for n in placeholders if is_opaque_input(n)}
    read = sorted(n.name for n in opaque if n.users)
    if read:
        raise TpucError(f"tpuc: graph input{'s' if len(read) > 1 else ''} {', '.join(read)}: an opaque object (such as a "
                        "DTensor's device mesh) that the graph reads; tpuc takes tensors, SymInts and constants",
                        kind="unsupported_input")
    input_specs = []
    for i, (n, kind) in enumerate(zip(placeholders, input_kinds)):
        v = None if n in opaque else n.meta.get("val")
        if n.users and all(_threads_token(u, n) for u in n.users):
            # An effect token (aot_autograd passes None for it at run time): the front end
            # orders the effects by it and gives it no argument.
            input_specs.append(InputSpec(kind=InputKind.TOKEN, arg=TokenArgument(name=n.name), target=None))
            continue
        if isinstance(v, torch.Tensor):
            arg = TensorArgument(name=n.name)
        elif isinstance(v, torch.SymInt):
            arg = SymIntArgument(name=n.name)
            kind = "user_input"
        else:
            arg = ConstantArgument(name=n.name, value=v)
            kind = "user_input"
        target = None
        if kind != "user_input":
            target = input_targets[i] if input_targets else n.name
        input_specs.append(InputSpec(kind=_KIND[kind], arg=arg, target=target,
                                     persistent=True if kind == "buffer" else None))
    output_specs = []
    out = gm.graph.output_node().args[0]
    outs = out if isinstance(out, (list, tuple)) else [out]
    for k, o in enumerate(outs):
        if isinstance(o, torch.fx.Node) and is_getitem(o) and o.args[1] == 0 and _threads_token(o.args[0]):
            output_specs.append(OutputSpec(kind=OutputKind.TOKEN, arg=TokenArgument(name=o.name), target=None))
            continue
        if isinstance(o, torch.fx.Node):
            v = o.meta.get("val")
            arg = SymIntArgument(name=o.name) if isinstance(v, torch.SymInt) else TensorArgument(name=o.name)
        else:
            arg = ConstantArgument(name="", value=o)
        kind = _OUT_KIND[output_kinds[k]] if output_kinds else OutputKind.USER_OUTPUT
        target = output_targets[k] if output_targets and kind != OutputKind.USER_OUTPUT else None
        output_specs.append(OutputSpec(kind=kind, arg=arg, target=target))
    signature = ExportGraphSignature(input_specs=input_specs, output_specs=output_specs)

    saved = {}
    try:
        for n in gm.graph.nodes:
            saved[n] = n.meta
            n.meta = {k: n.meta[k] for k in _KEEP_META if k in n.meta}
            trace = stack_trace(saved[n])
            if trace:
                n.meta["stack_trace"] = trace
            if n in opaque:
                n.meta["val"] = None
        serialized = _serde.GraphModuleSerializer(signature, []).serialize(gm)
    finally:
        for n, meta in saved.items():
            n.meta = meta
    program = S.ExportedProgram(
        graph_module=serialized,
        opset_version={"aten": torch._C._get_max_operator_version()},
        range_constraints=_range_constraints(placeholders),
        schema_version=S.SchemaVersion(major=_serde.SCHEMA_VERSION[0], minor=_serde.SCHEMA_VERSION[1]),
        verifiers=[],
        torch_version=torch.__version__,
        guards_code=[],
    )
    return _serde._to_json_bytes(program)


def _range_constraints(placeholders: list[torch.fx.Node]) -> dict:
    """The shape environment's range of every symbol in an input's sizes, as torch.export writes
    them: the importer gives its symbols these ranges (bucket plans and size checks read them)."""
    ranges = {}
    for n in placeholders:
        v = n.meta.get("val")
        sizes = [v] if isinstance(v, torch.SymInt) else list(v.shape) if isinstance(v, torch.Tensor) else []
        for s in sizes:
            if isinstance(s, torch.SymInt):
                for sym in s.node.expr.free_symbols:
                    r = s.node.shape_env.var_to_range.get(sym)
                    if r is not None:
                        ranges[sym] = r
    return _serde.serialize_range_constraints(ranges)


def _threads_token(node: torch.fx.Node, token: torch.fx.Node | None = None) -> bool:
    """Whether `node` is a `with_effects` call (taking `token` as its effect token, if given)."""
    effects = getattr(torch.ops.higher_order, "with_effects", None)
    return (node.op == "call_function" and effects is not None and node.target is effects
            and (token is None or (bool(node.args) and node.args[0] is token)))


def is_opaque_input(n: torch.fx.Node) -> bool:
    """A placeholder holding neither a tensor, a SymInt nor a constant (a script object)."""
    return n.op == "placeholder" and not isinstance(
        n.meta.get("val"), (torch.Tensor, torch.SymInt, int, float, bool, str, type(None)))


def lift_tensor_constants(gm: torch.fx.GraphModule) -> list[tuple[str, torch.Tensor]]:
    """Turns every `get_attr` of a tensor into a new placeholder after the existing ones (the
    serializer writes no get_attr nodes). Returns (placeholder name, tensor) in order."""
    lifted = []
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    anchor = placeholders[-1] if placeholders else None
    for n in list(gm.graph.nodes):
        if n.op != "get_attr":
            continue
        value = _getattr_path(gm, n.target)
        if not isinstance(value, torch.Tensor):
            continue
        if anchor is None:
            ctx = gm.graph.inserting_before(next(iter(gm.graph.nodes)))
        else:
            ctx = gm.graph.inserting_after(anchor)
        with ctx:
            p = gm.graph.placeholder(f"c_{n.name}")
        p.meta = dict(n.meta)
        if "val" not in p.meta:
            p.meta["val"] = value
        n.replace_all_uses_with(p)
        gm.graph.erase_node(n)
        anchor = p
        lifted.append((p.name, value))
    if lifted:
        gm.recompile()
    return lifted


def _getattr_path(obj, target: str):
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


def is_getitem(node: torch.fx.Node) -> bool:
    return node.op == "call_function" and node.target is operator.getitem
