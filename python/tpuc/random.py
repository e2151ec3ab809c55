"""Random ops in compiled graphs, seeded by torch.

aot graphs carry torch's random ops (`native_dropout`, `rand`, `randn`, `bernoulli`, ...), whose
state lives in torch's generator. tpuc rewrites each into arithmetic on one op of its own,

    tpuc::uniform(Tensor seed, int stream, SymInt[] size, ScalarType dtype) -> Tensor

a counter-based generator (`frontend-fx/src/ops/random.rs` lowers it; `_uniform_eager` below
is its eager kernel, bit for bit the same), and gives the graph one more input, the seed. Each
call draws the seed (two 31-bit integers) from torch's default generator, so:

- `torch.manual_seed(s)` makes a run reproducible and successive calls get fresh numbers;
- no executable holds random state, so a cached one stays correct;
- the backward of dropout uses the mask the forward drew (aot saves `native_dropout`'s mask).

Each random op of a graph is its own stream (its draws are independent of the others). The
numbers are not eager's (eager's generator is a different algorithm), as with inductor.
"""

from __future__ import annotations

import math
import operator

import torch
import torch.fx

_M = 0xFFFFFFFF
_GOLDEN, _OFFSET = 0x9E3779B9, 0x7F4A7C15
_BITS = {torch.float32: 24, torch.float64: 32, torch.float16: 11, torch.bfloat16: 8}

_lib = torch.library.Library("tpuc", "DEF")
_lib.define("uniform(Tensor seed, int stream, SymInt[] size, ScalarType dtype) -> Tensor")


def _mulc(x: torch.Tensor, c: int) -> torch.Tensor:
    """x * c mod 2^32 for x < 2^32 held in int64 (split so that no product overflows)."""
    lo, hi = c & 0xFFFF, c >> 16
    return (x * lo + (((x * hi) & 0xFFFF) << 16)) & _M


def _mix(x: torch.Tensor) -> torch.Tensor:
    x = x ^ (x >> 16)
    x = _mulc(x, 0x7FEB352D)
    x = x ^ (x >> 15)
    x = _mulc(x, 0x846CA68B)
    return x ^ (x >> 16)


def _uniform_eager(seed: torch.Tensor, stream: int, size, dtype: torch.dtype) -> torch.Tensor:
    bits = _BITS.get(dtype)
    if bits is None:
        raise TypeError(f"tpuc.uniform makes floats, not {dtype}")
    s = seed.to(torch.int64) & _M
    a = _mix((s[0] + ((stream * _GOLDEN + _OFFSET) & _M)) & _M)
    b = _mix(s[1] ^ a)
    n = math.prod(size)
    k = torch.arange(n, dtype=torch.int64)
    h = _mix((_mix(k ^ a) + b) & _M)
    u = (h >> (32 - bits)).to(torch.float64 if dtype == torch.float64 else torch.float32) * 2.0 ** -bits
    return u.to(dtype).reshape(size)


@torch.library.impl(_lib, "uniform", "CompositeExplicitAutograd")
def _uniform_impl(seed, stream, size, dtype):
    return _uniform_eager(seed, stream, list(size), dtype)


@torch.library.register_fake("tpuc::uniform", lib=_lib)
def _uniform_fake(seed, stream, size, dtype):
    return torch.empty(size, dtype=dtype, device=seed.device)


aten = torch.ops.aten
_uniform = torch.ops.tpuc.uniform.default
_RANDOM_FROM = getattr(aten.random, "from")  # a Python keyword

# The random ops rewritten, by overload. The `*.generator` overloads (`torch.randn(size,
# generator=g)`) reach graphs with `generator=None` (Dynamo breaks the graph at a Generator
# object), which is the plain op; a node with a generator of its own is left alone (the
# compiler refuses it).
_RAND = {aten.rand.default, aten.rand_like.default, aten.rand.generator}
_RANDN = {aten.randn.default, aten.randn_like.default, aten.randn.generator}
_RANDPERM = {aten.randperm.default, aten.randperm.generator}
_RANDINT = {aten.randint.low, aten.randint.default, aten.randint_like.default, aten.randint_like.low_dtype,
            aten.randint.generator, aten.randint.low_generator}
_NORMAL = {aten.normal.Tensor_float, aten.normal.float_Tensor, aten.normal.Tensor_Tensor, aten.normal.float_float}
RANDOM_OPS = _RAND | _RANDN | _RANDPERM | _RANDINT | _NORMAL | {
    aten.native_dropout.default, aten.bernoulli.default, aten.bernoulli.p, aten.uniform.default,
    aten.normal_functional.default, aten.exponential.default, aten.dropout.default, _RANDOM_FROM, aten.random.to,
}


def _is_random(n: torch.fx.Node) -> bool:
    return n.op == "call_function" and n.target in RANDOM_OPS and n.kwargs.get("generator") is None


def has_random(gm: torch.fx.GraphModule) -> bool:
    return any(_is_random(n) for n in gm.graph.nodes)


class _Writer:
    """Writes the replacement of one random node before it."""

    def __init__(self, graph: torch.fx.Graph, node: torch.fx.Node, seed: torch.fx.Node, streams):
        self.g, self.node, self.seed, self.streams = graph, node, seed, streams

    def call(self, target, *args, **kwargs) -> torch.fx.Node:
        n = self.g.call_function(target, args, kwargs)
        for k in ("stack_trace", "nn_module_stack", "source_fn_stack", "custom"):
            if k in self.node.meta:
                n.meta[k] = self.node.meta[k]
        return n

    def uniform(self, size, dtype) -> torch.fx.Node:
        return self.call(_uniform, self.seed, next(self.streams), list(size), dtype)

    def normal(self, size, dtype) -> torch.fx.Node:
        """Box-Muller on two streams, in f32 (f64 for f64 results)."""
        work = torch.float64 if dtype == torch.float64 else torch.float32
        u1, u2 = self.uniform(size, work), self.uniform(size, work)
        r = self.call(aten.sqrt.default, self.call(aten.mul.Tensor, self.call(aten.log1p.default, self.call(
            aten.neg.default, u1)), -2.0))
        z = self.call(aten.mul.Tensor, r, self.call(aten.cos.default, self.call(aten.mul.Tensor, u2, 2 * math.pi)))
        return z if dtype == work else self.convert(z, dtype)

    def convert(self, x, dtype) -> torch.fx.Node:
        return self.call(aten._to_copy.default, x, dtype=dtype)


# Where a random op without a tensor of its result's shape takes its size.
_SIZE_ARG = {aten.rand.default: 0, aten.randn.default: 0, aten.randint.default: 1, aten.randint.low: 2,
             aten.normal.float_float: 2, aten.randperm.default: 0, aten.rand.generator: 0, aten.randn.generator: 0,
             aten.randint.generator: 1, aten.randint.low_generator: 2, aten.randperm.generator: 0}


def _size_args(w: "_Writer", node: torch.fx.Node) -> list:
    """The result's size as the op's arguments (ints, and FX nodes for symbolic sizes): a
    symbolic size must stay tied to the graph's values, not be baked in."""
    out = node.meta["val"]
    out = out[0] if isinstance(out, (tuple, list)) else out
    if node.target in _SIZE_ARG:
        size = node.args[_SIZE_ARG[node.target]] if len(node.args) > _SIZE_ARG[node.target] else node.kwargs["size"]
        return [size] if node.target in _RANDPERM else list(size)
    src = next((a for a in node.args if isinstance(a, torch.fx.Node) and isinstance(a.meta.get("val"), torch.Tensor)
                and tuple(a.meta["val"].shape) == tuple(out.shape)), None)
    sizes = []
    for d, n in enumerate(out.shape):
        if isinstance(n, int):
            sizes.append(n)
        elif src is not None:
            sizes.append(w.call(aten.sym_size.int, src, d))
        else:
            raise NotImplementedError(f"{node.target}: symbolic size {n} with no tensor to read it from")
    return sizes


def _dtype_of(n) -> torch.dtype:
    return n.meta["val"].dtype


def _arg(node: torch.fx.Node, i: int, name: str, default=None):
    if len(node.args) > i:
        return node.args[i]
    return node.kwargs.get(name, default)


def rewrite(gm: torch.fx.GraphModule) -> bool:
    """Rewrites `gm`'s random ops in place onto `tpuc.uniform` and a new last placeholder
    `tpuc_rng_seed` (int64[2]). Returns whether it changed anything."""
    randoms = [n for n in gm.graph.nodes if _is_random(n)]
    if not randoms:
        return False
    g = gm.graph
    placeholders = [n for n in g.nodes if n.op == "placeholder"]
    where = g.inserting_after(placeholders[-1]) if placeholders else g.inserting_before(next(iter(g.nodes)))
    with where:
        seed = g.placeholder("tpuc_rng_seed")
    fake_mode = torch._guards.detect_fake_mode([p.meta.get("val") for p in placeholders if "val" in p.meta])
    with fake_mode or torch._subclasses.fake_tensor.FakeTensorMode():
        seed.meta["val"] = torch.empty(2, dtype=torch.int64)
    streams = iter(range(1 << 30))
    for node in randoms:
        with g.inserting_before(node):
            w = _Writer(g, node, seed, streams)
            out = node.meta["val"]
            t = node.target
            size = _size_args(w, node)
            if t is aten.native_dropout.default:
                x, p = node.args[0], float(_arg(node, 1, "p"))
                train = _arg(node, 2, "train", True)
                if train is False:
                    keep = w.call(aten.ones_like.default, x, dtype=torch.bool)
                    res = x
                else:
                    u = w.uniform(size, torch.float32)
                    keep = w.call(aten.ge.Scalar, u, p)
                    scale = 0.0 if p >= 1 else 1.0 / (1.0 - p)
                    res = w.call(aten.mul.Tensor, w.call(aten.mul.Tensor, x, keep), scale)
                for user in list(node.users):
                    if user.op == "call_function" and user.target is operator.getitem:
                        user.replace_all_uses_with(res if user.args[1] == 0 else keep)
                        g.erase_node(user)
                new = None
            elif t in _RAND:
                new = w.uniform(size, out.dtype)
            elif t in _RANDN:
                new = w.normal(size, out.dtype)
            elif t is aten.bernoulli.default:
                u = w.uniform(size, torch.float32)
                p = node.args[0]
                pf = p if _dtype_of(p) == torch.float32 else w.convert(p, torch.float32)
                new = w.convert(w.call(aten.lt.Tensor, u, pf), out.dtype)
            elif t is aten.bernoulli.p:
                u = w.uniform(size, torch.float32)
                new = w.convert(w.call(aten.lt.Scalar, u, float(_arg(node, 1, "p", 0.5))), out.dtype)
            elif t is aten.uniform.default:
                lo, hi = float(_arg(node, 1, "from", 0.0)), float(_arg(node, 2, "to", 1.0))
                u = w.uniform(size, out.dtype)
                new = w.call(aten.add.Tensor, w.call(aten.mul.Tensor, u, hi - lo), lo)
            elif t is aten.normal_functional.default:
                mean, std = float(_arg(node, 1, "mean", 0.0)), float(_arg(node, 2, "std", 1.0))
                z = w.normal(size, out.dtype)
                new = w.call(aten.add.Tensor, w.call(aten.mul.Tensor, z, std), mean)
            elif t is aten.dropout.default:
                x, p, train = node.args[0], float(node.args[1]), node.args[2]
                if not train:
                    new = x
                else:
                    keep = w.call(aten.ge.Scalar, w.uniform(size, torch.float32), p)
                    new = w.call(aten.mul.Tensor, w.call(aten.mul.Tensor, x, keep), 0.0 if p >= 1 else 1 / (1 - p))
            elif t in _NORMAL:
                mean, std = _arg(node, 0, "mean", 0.0), _arg(node, 1, "std", 1.0)
                z = w.normal(size, out.dtype)
                new = w.call(aten.add.Tensor, w.call(aten.mul.Tensor, z, std), mean)
            elif t in _RANDPERM:
                u = w.uniform(size, torch.float64)
                new = w.convert(w.call(aten.argsort.stable, u, stable=True), out.dtype)
            elif t in (_RANDOM_FROM, aten.random.to):
                low, high = (0, node.args[1]) if t is aten.random.to else (node.args[1], node.args[2])
                if high is None:
                    raise NotImplementedError("random_(from) without `to` is not supported")
                u = w.uniform(size, torch.float64)
                r = w.call(aten.floor.default, w.call(aten.mul.Tensor, u, float(int(high) - int(low))))
                new = w.convert(w.call(aten.add.Tensor, r, float(low)), out.dtype)
            elif t is aten.exponential.default:
                lambd = float(_arg(node, 1, "lambd", 1.0))
                u = w.uniform(size, out.dtype)
                new = w.call(aten.mul.Tensor, w.call(aten.log1p.default, w.call(aten.neg.default, u)), -1.0 / lambd)
            else:  # randint / randint_like: low + floor(u * (high - low)), u with 32 bits
                if t in (aten.randint.default, aten.randint.generator):
                    low, high = 0, int(node.args[0])
                elif t in (aten.randint.low, aten.randint.low_generator):
                    low, high = int(node.args[0]), int(node.args[1])
                elif t is aten.randint_like.default:
                    low, high = 0, int(node.args[1])
                else:
                    low, high = int(node.args[1]), int(node.args[2])
                u = w.uniform(size, torch.float64)
                r = w.call(aten.floor.default, w.call(aten.mul.Tensor, u, float(high - low)))
                new = w.convert(w.call(aten.add.Tensor, r, float(low)), out.dtype)
            if new is not None:
                node.replace_all_uses_with(new)
        g.erase_node(node)
    _propagate(gm)
    g.lint()
    gm.recompile()
    return True


def _propagate(gm: torch.fx.GraphModule) -> None:
    """Fills in `meta["val"]` of the nodes the rewrite made (fake tensors, as aot's)."""
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    vals = [p.meta.get("val") for p in placeholders]
    mode = torch._guards.detect_fake_mode([v for v in vals if v is not None])
    if mode is None:
        mode = torch._subclasses.fake_tensor.FakeTensorMode()
    FakeTensorProp(gm, mode).propagate_dont_convert_inputs(*vals)


class Seeded:
    """A compiled graph whose last input is the seed: each call draws one from torch's
    default generator (`torch.manual_seed` reproduces a run)."""

    _boxed_call = True

    def __init__(self, inner):
        self.inner = inner

    def __call__(self, args):
        seed = torch.randint(0, 2**31 - 1, (2,), dtype=torch.int64)
        return self.inner([*args, seed])

    def __getattr__(self, name):
        return getattr(self.inner, name)
