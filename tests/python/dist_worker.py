"""One rank of a real `torchrun` job (gloo, CPU) that trains a 2-block transformer with tpuc and
the same setup eagerly, and compares them. Run by test_distributed.py, or by hand:

    torchrun --standalone --nproc_per_node=2 tests/python/dist_worker.py --setup fsdp2

Setups (how PyTorch distributes training):
  ddp         DDP(torch.compile(model)): gradients all-reduced by DDP's hooks, outside the graphs
  fsdp2       each block compiled, then fully_shard(block), then fully_shard(model)
  tp          DTensor tensor parallelism (parallelize_module: q/k/v/up colwise, o/down rowwise),
              the whole model compiled: graphs carry _c10d_functional collectives
  simplefsdp  every parameter a DTensor Shard(0), gathered in the forward by a parametrization
              (all-gather in the forward, reduce-scatter in the backward), the whole model compiled
  tp_infer    the tp model in inference (no_grad), compared with eager
  llama_infer a Llama-style model (RMSNorm, RoPE, SwiGLU) tensor parallel, in inference
  branch      a function with an all-reduce whose compute differs by rank (code that branches
              on the rank): every rank compiles its own programs, results equal to eager
  fail        like branch, but rank 1's graph has an op tpuc cannot compile (strict): rank 1
              raises naming itself and the graph, and the job ends instead of hanging

Every rank prints one line `RESULT {json}` (and writes it to `--out`/rank_R.json) with the losses of both runs, the largest difference
of every full parameter after training, and the number of programs tpuc compiled on that rank.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
import unknown_ops  # beside this file: custom ops that tpuc never lowers

D, HEADS, SEQ, BATCH, STEPS, LR = 32, 4, 8, 2, 3, 0.1


class Attention(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads, self.hd = heads, d // heads
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))

    def forward(self, x):
        b, s, _ = x.shape
        # -1 heads: under tensor parallelism each rank holds heads / world of them.
        q, k, v = (f(x).view(b, s, -1, self.hd).transpose(1, 2) for f in (self.q, self.k, self.v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o(y.transpose(1, 2).reshape(b, s, -1))


class MLP(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.up, self.down = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        return self.down(F.gelu(self.up(x)))


class Block(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn, self.mlp = Attention(d, heads), MLP(d)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class LlamaBlock(nn.Module):
    """A Llama-style block: RMSNorm, attention with rotary embeddings, SwiGLU MLP."""

    def __init__(self, d: int, heads: int):
        super().__init__()
        self.hd = d // heads
        self.norm1, self.norm2 = nn.RMSNorm(d), nn.RMSNorm(d)
        self.q, self.k, self.v, self.o = (nn.Linear(d, d, bias=False) for _ in range(4))
        self.gate, self.up = nn.Linear(d, 2 * d, bias=False), nn.Linear(d, 2 * d, bias=False)
        self.down = nn.Linear(2 * d, d, bias=False)

    def rope(self, t):
        s, half = t.shape[2], self.hd // 2
        freq = 1.0 / (10000 ** (torch.arange(half, dtype=torch.float32) / half))
        ang = torch.arange(s, dtype=torch.float32)[:, None] * freq[None, :]
        cos, sin = ang.cos(), ang.sin()
        a, b = t[..., :half], t[..., half:]
        return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)

    def forward(self, x):
        b, s, _ = x.shape
        h = self.norm1(x)
        q, k, v = (f(h).view(b, s, -1, self.hd).transpose(1, 2) for f in (self.q, self.k, self.v))
        y = F.scaled_dot_product_attention(self.rope(q), self.rope(k), v, is_causal=True)
        x = x + self.o(y.transpose(1, 2).reshape(b, s, -1))
        h = self.norm2(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class Model(nn.Module):
    def __init__(self, d: int = D, heads: int = HEADS, depth: int = 2, block=None):
        super().__init__()
        self.blocks = nn.ModuleList((block or Block)(d, heads) for _ in range(depth))
        self.head = nn.Linear(d, 1)

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return self.head(x).square().mean()


class Gathered(nn.Module):
    """SimpleFSDP's parametrization: the parameter is a DTensor sharded on dim 0; the module
    computes with its replicated local value, whose gradient is Partial (reduce-scattered)."""

    def forward(self, p):
        from torch.distributed.tensor import Partial, Replicate

        return p.redistribute(placements=[Replicate()]).to_local(grad_placements=[Partial()])


def build_parallel(setup: str, model: nn.Module, mesh) -> nn.Module:
    """`model` (its Blocks) parallelized in place: tensor parallel (`tp`, `tp_infer`) or
    SimpleFSDP's layout (`simplefsdp`)."""
    if setup in ("tp", "tp_infer", "llama_infer"):
        from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

        plan = {f"attn.{n}": ColwiseParallel() for n in ("q", "k", "v")}
        plan.update({"attn.o": RowwiseParallel(), "mlp.up": ColwiseParallel(), "mlp.down": RowwiseParallel()})
        llama = {n: ColwiseParallel() for n in ("q", "k", "v", "gate", "up")}
        llama.update({"o": RowwiseParallel(), "down": RowwiseParallel()})
        for blk in model.modules():
            if isinstance(blk, (Block, LlamaBlock)):
                parallelize_module(blk, mesh, plan if isinstance(blk, Block) else llama)
        return model
    from torch.distributed.tensor import Shard, distribute_tensor
    from torch.nn.utils import parametrize

    for mod in list(model.modules()):
        for name, p in list(mod.named_parameters(recurse=False)):
            setattr(mod, name, nn.Parameter(distribute_tensor(p.detach(), mesh, [Shard(0)])))
            parametrize.register_parametrization(mod, name, Gathered(), unsafe=True)
    return model


def build(setup: str, backend: str | None, options: dict, init: dict, mesh):
    """The model of `setup`, with `init`'s values, compiled with `backend` (None: eager)."""
    model = Model(block=LlamaBlock if setup == "llama_infer" else None)
    model.load_state_dict(init)
    compile_kw = dict(backend=backend, options=options) if backend not in (None, "eager", "aot_eager") else \
        dict(backend=backend)
    if setup == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP

        inner = torch.compile(model, **compile_kw) if backend else model
        return DDP(inner), model
    if setup == "fsdp2":
        from torch.distributed.fsdp import fully_shard

        for blk in model.blocks:
            if backend:
                blk.compile(**compile_kw)
            fully_shard(blk, mesh=mesh)
        fully_shard(model, mesh=mesh)
        return model, model
    if setup in ("tp", "tp_infer", "llama_infer", "simplefsdp"):
        model = build_parallel(setup, model, mesh)
        return (torch.compile(model, **compile_kw) if backend else model), model
    raise SystemExit(f"unknown setup {setup!r}")


def full_params(model) -> dict[str, torch.Tensor]:
    out = {}
    for name, p in model.named_parameters():
        name = name.replace("parametrizations.", "").replace(".original", "").replace("_orig_mod.", "")
        out[name] = (p.full_tensor() if hasattr(p, "full_tensor") else p).detach().clone()
    return out


def run(setup: str, backend: str | None, options: dict, init: dict, batches, mesh):
    model, plain = build(setup, backend, options, init, mesh)
    losses = []
    if setup in ("tp_infer", "llama_infer"):
        with torch.no_grad():
            for x in batches:
                losses.append(float(model(x)))
        return losses, full_params(plain)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    for x in batches:
        loss = model(x)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(float(loss.detach()))
    return losses, full_params(plain)


def branchy(x, w):
    """Compute that differs by rank around an all-reduce (the rank is a constant to Dynamo)."""
    y = x @ w
    if dist.get_rank() == 1:
        y = torch.sin(y) * 3
    y = torch.ops._c10d_functional.wait_tensor(torch.ops._c10d_functional.all_reduce(y, "sum", "0"))
    return torch.tanh(y @ w.t())


def failing(x, w):
    y = x @ w
    if dist.get_rank() == 1:
        y = unknown_ops.unknown_a(y)  # no lowering in tpuc: a strict compile fails on rank 1 only
    y = torch.ops._c10d_functional.wait_tensor(torch.ops._c10d_functional.all_reduce(y, "sum", "0"))
    return y * 2


def run_function(setup: str, backend: str | None, options: dict):
    fn = branchy if setup == "branch" else failing
    g = torch.Generator().manual_seed(7 + dist.get_rank())
    x, w = torch.randn(4, 8, generator=g), torch.randn(8, 8, generator=g)
    if backend:
        fn = torch.compile(fn, backend=backend, options=options, fullgraph=True)
    outs = [fn(x, w) for _ in range(2)]
    return [float(o.sum()) for o in outs], {"out": outs[-1]}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--setup", required=True)
    ap.add_argument("--backend", default="tpuc", help="tpuc, inductor, aot_eager or eager")
    ap.add_argument("--strict", type=int, default=1)
    ap.add_argument("--out", help="write each rank's result to OUT/rank_R.json as well")
    args = ap.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh("cpu", (world,))
    torch.manual_seed(0)
    init = Model(block=LlamaBlock if args.setup == "llama_infer" else None).state_dict()
    # Data parallel setups give each rank its own batch; tensor parallel ones one batch for all.
    data_seed = 100 + (0 if args.setup in ("tp", "tp_infer", "llama_infer") else rank)
    g = torch.Generator().manual_seed(data_seed)
    batches = [torch.randn(BATCH, SEQ, D, generator=g) for _ in range(STEPS)]

    go = run_function if args.setup in ("branch", "fail") else \
        (lambda setup, backend, options: run(setup, backend, options, init, batches, mesh))
    want_losses, want = go(args.setup, None, {})
    if args.backend == "tpuc":
        import tpuc

        tpuc.reset_stats()
    torch._dynamo.reset()
    options = {"strict": bool(args.strict)}
    got_losses, got = go(args.setup, args.backend, options)
    stats = tpuc.stats() if args.backend == "tpuc" else {}  # noqa: F821 - imported above for tpuc
    diffs = {n: float((got[n] - want[n]).abs().max()) for n in want}
    result = json.dumps(dict(
        rank=rank, world=world, setup=args.setup, backend=args.backend, eager=want_losses, compiled=got_losses,
        loss_diff=max(abs(a - b) for a, b in zip(want_losses, got_losses)), param_diff=max(diffs.values()),
        worst_param=max(diffs, key=diffs.get), programs=stats.get("programs", 0), stats=stats,
    ))
    print("RESULT " + result, flush=True)
    if args.out:
        with open(os.path.join(args.out, f"rank_{rank}.json"), "w") as f:
            f.write(result)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    # A plain exit: scripts/torchrun_exit_check.sh runs 40 jobs of this worker beside a CPU
    # burner and checks that every one exits 0 without an abort.
    sys.exit(main())
