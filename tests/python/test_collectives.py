"""Per-rank programs with PyTorch's functional collectives (`torch.ops._c10d_functional.*`),
exported with torch.export under a fake process group of 4 ranks and run by `tpuc run --ranks
4` on 4 CPU devices (one replica per rank): every collective equal to a NumPy emulation of
the 4 ranks, and a tensor-parallel MLP equal to the unsharded one."""

import subprocess

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as fc
from cli_check import TPUC

R = 4


@pytest.fixture(scope="module", autouse=True)
def fake_world():
    from torch.testing._internal.distributed.fake_pg import FakeStore

    started = not dist.is_initialized()
    if started:
        dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=R)
    yield
    if started:
        dist.destroy_process_group()


class Collectives(torch.nn.Module):
    def forward(self, x):
        w = dist.group.WORLD
        return (
            fc.all_reduce(x, "sum", w) * 2,
            fc.all_reduce(x, "max", w),
            fc.all_reduce(x, "min", w),
            fc.all_reduce(x, "avg", w),
            fc.all_reduce(x, "product", w),
            fc.all_gather_tensor(x, 0, w),
            fc.reduce_scatter_tensor(x.repeat(R, 1), "sum", 0, w),
            fc.reduce_scatter_tensor(x.repeat(R, 1), "avg", 0, w),
            fc.all_to_all_single(x, None, None, w),
            torch.ops._c10d_functional.wait_tensor(torch.ops._c10d_functional.broadcast(x, 2, "0")),
        )


def emulate_collectives(xs):
    """What the 4 ranks return, stacked along dim 0."""
    each = lambda v: np.stack([v] * R)  # noqa: E731 - the same value on every rank
    rep = np.stack([np.tile(xs[r], (R, 1)) for r in range(R)])
    rows = xs.shape[1]
    scatter = lambda tot: np.stack([tot[rows * r:rows * (r + 1)] for r in range(R)])  # noqa: E731
    return [
        each(xs.sum(0) * 2), each(xs.max(0)), each(xs.min(0)), each(xs.mean(0)), each(xs.prod(0)),
        each(np.concatenate(list(xs), 0)),
        scatter(rep.sum(0)), scatter(rep.mean(0)),
        np.stack([np.stack([xs[j][r] for j in range(R)]) for r in range(R)]),
        each(xs[2]),
    ]


class TensorParallelMLP(torch.nn.Module):
    """Megatron MLP on one rank: its column shard of fc1, its row shard of fc2, one all-reduce."""

    def forward(self, x, w1, b1, w2):
        h = torch.relu(x @ w1.T + b1)
        return fc.all_reduce(h @ w2.T, "sum", dist.group.WORLD)


def run_ranks(tmp_path, model, per_rank_inputs, want, tol=1e-5, extra=()):
    ep = torch.export.export(model, tuple(torch.from_numpy(a[0]) for a in per_rank_inputs))
    pt2 = str(tmp_path / "model.pt2")
    torch.export.save(ep, pt2)
    ins, exp = [], []
    for i, a in enumerate(per_rank_inputs):
        ins.append(str(tmp_path / f"in_{i}.npy"))
        np.save(ins[-1], a)
    for i, w in enumerate(want):
        exp.append(str(tmp_path / f"want_{i}.npy"))
        np.save(exp[-1], w.astype(np.float32))
    p = subprocess.run([TPUC, "run", pt2, "--ranks", str(R), "--inputs", *ins, "--expect", *exp, "--rtol", str(tol),
                        "--atol", str(tol), "--no-cache", *extra], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    return p


def test_every_collective_equals_an_emulation_of_the_ranks(tmp_path):
    xs = np.random.default_rng(0).standard_normal((R, 4, 3)).astype(np.float32)
    p = run_ranks(tmp_path, Collectives(), [xs], emulate_collectives(xs))
    assert p.stdout.count(": ok") == 10


def test_tensor_parallel_mlp_equals_the_whole_mlp(tmp_path):
    rng = np.random.default_rng(1)
    d, h = 8, 32
    x = rng.standard_normal((5, d)).astype(np.float32)
    w1 = rng.standard_normal((h, d)).astype(np.float32)
    b1 = rng.standard_normal(h).astype(np.float32)
    w2 = rng.standard_normal((d, h)).astype(np.float32)
    whole = np.maximum(x @ w1.T + b1, 0) @ w2.T
    k = h // R
    inputs = [np.stack([x] * R), np.stack([w1[k * r:k * (r + 1)] for r in range(R)]),
              np.stack([b1[k * r:k * (r + 1)] for r in range(R)]), np.stack([w2[:, k * r:k * (r + 1)] for r in range(R)])]
    run_ranks(tmp_path, TensorParallelMLP(), inputs, [np.stack([whole] * R)], tol=1e-4)


def test_groups_and_their_errors(tmp_path):
    xs = np.random.default_rng(2).standard_normal((R, 4, 3)).astype(np.float32)

    class Pairs(torch.nn.Module):
        def forward(self, x):
            return fc.all_reduce(x, "sum", dist.group.WORLD)

    # Group "0" as two pairs: ranks 0,1 and 2,3 each reduce among themselves.
    pair = np.stack([xs[0] + xs[1]] * 2 + [xs[2] + xs[3]] * 2)
    run_ranks(tmp_path, Pairs(), [xs], [pair], extra=("--group", "0=0,1|2,3"))
    with pytest.raises(AssertionError, match="rank 4 is out of 0..4"):
        run_ranks(tmp_path, Pairs(), [xs], [pair], extra=("--group", "0=0,1|2,4"))
    # An all_gather of 4 over a group of 2 says so.
    with pytest.raises(AssertionError, match="group `0` has 2 ranks"):
        run_ranks(tmp_path, Collectives(), [xs], emulate_collectives(xs), extra=("--group", "0=0,1|2,3"))


def test_unsupported_reduce_op_names_the_node(tmp_path):
    class Xor(torch.nn.Module):
        def forward(self, x):
            return fc.all_reduce(x, "bxor", dist.group.WORLD)

    xs = np.ones((R, 2), np.int32)
    with pytest.raises(AssertionError, match="reduce op `bxor` on i32 is not supported"):
        run_ranks(tmp_path, Xor(), [xs], [xs])


# ---- the same programs through torch.compile: tpuc.run_ranks runs the ranks on 4 CPU devices


def _stacked(outs):
    """run_ranks' per-rank results as NumPy arrays stacked along a new leading dim."""
    if isinstance(outs[0], torch.Tensor):
        return [np.stack([o.numpy() for o in outs])]
    return [np.stack([o[i].numpy() for o in outs]) for i in range(len(outs[0]))]


def test_every_collective_through_torch_compile_equals_the_emulation():
    import tpuc

    torch._dynamo.reset()
    tpuc.reset_stats()
    xs = np.random.default_rng(3).standard_normal((R, 4, 3)).astype(np.float32)
    f = torch.compile(Collectives(), backend="tpuc", fullgraph=True)
    got = _stacked(tpuc.run_ranks(f, [torch.from_numpy(xs[r]) for r in range(R)]))
    want = emulate_collectives(xs)
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5, err_msg=f"result {i}")
    # One program over 4 devices; a second call compiles nothing.
    tpuc.run_ranks(f, [torch.from_numpy(xs[r]) for r in range(R)])
    assert tpuc.stats()["programs"] == 1


class ShardedMLP(torch.nn.Module):
    """A Megatron MLP module: on each rank fc1 holds a column shard, fc2 a row shard."""

    def __init__(self, d, h):
        super().__init__()
        self.fc1 = torch.nn.Linear(d, h)
        self.fc2 = torch.nn.Linear(h, d, bias=False)

    def forward(self, x):
        return fc.all_reduce(self.fc2(torch.relu(self.fc1(x))), "sum", dist.group.WORLD)


def test_tensor_parallel_module_through_torch_compile_equals_eager_on_one_device():
    import tpuc
    from torch.func import functional_call

    torch._dynamo.reset()
    torch.manual_seed(0)
    d, h = 16, 64
    whole = torch.nn.Sequential(torch.nn.Linear(d, h), torch.nn.ReLU(), torch.nn.Linear(h, d, bias=False)).eval()
    x = torch.randn(6, d)
    with torch.no_grad():
        want = whole(x)
    k = h // R
    shard = lambda r: {  # noqa: E731 - rank r's parameters of ShardedMLP
        "fc1.weight": whole[0].weight[k * r:k * (r + 1)].detach().clone(),
        "fc1.bias": whole[0].bias[k * r:k * (r + 1)].detach().clone(),
        "fc2.weight": whole[2].weight[:, k * r:k * (r + 1)].detach().contiguous(),
    }
    model = ShardedMLP(d, h).eval()
    f = torch.compile(lambda params, x: functional_call(model, params, (x,)), backend="tpuc", fullgraph=True)
    with torch.no_grad():
        outs = tpuc.run_ranks(f, [(shard(r), x) for r in range(R)])
    for r, o in enumerate(outs):
        torch.testing.assert_close(o, want, rtol=1e-5, atol=1e-5, msg=lambda m: f"rank {r}: {m}")


def test_per_rank_programs_over_changing_sizes_are_bucketed():
    """A batch size that changes makes Dynamo's graph symbolic: the per-rank program is compiled
    once per bucket (the ranks' arguments padded, the real size passed along, results cut),
    and a collective along the padded dim (all_gather) falls back to one program per shape."""
    import tpuc
    from torch.func import functional_call

    torch._dynamo.reset()
    tpuc.reset_stats()
    torch.manual_seed(0)
    d, h = 8, 32
    whole = torch.nn.Sequential(torch.nn.Linear(d, h), torch.nn.ReLU(), torch.nn.Linear(h, d, bias=False)).eval()
    k = h // R
    shards = [{
        "fc1.weight": whole[0].weight[k * r:k * (r + 1)].detach().clone(),
        "fc1.bias": whole[0].bias[k * r:k * (r + 1)].detach().clone(),
        "fc2.weight": whole[2].weight[:, k * r:k * (r + 1)].detach().contiguous(),
    } for r in range(R)]
    model = ShardedMLP(d, h).eval()
    f = torch.compile(lambda params, x: functional_call(model, params, (x,)), backend="tpuc", fullgraph=True)
    with torch.no_grad():
        for n in (3, 5, 6, 9, 2, 16):
            x = torch.randn(n, d)
            for r, o in enumerate(tpuc.run_ranks(f, [(shards[r], x) for r in range(R)])):
                torch.testing.assert_close(o, whole(x), rtol=1e-5, atol=1e-5, msg=lambda m: f"batch {n}, rank {r}: {m}")
    s = tpuc.stats()
    # Batch 3 is Dynamo's first, static graph; the others fall in buckets 8, 16 and 2.
    assert s["buckets"] == 3 and s["programs"] == 4 and s.get("specializations", 0) == 0, s

    torch._dynamo.reset()
    tpuc.reset_stats()
    g = torch.compile(lambda x: fc.all_gather_tensor(x * 2, 0, dist.group.WORLD), backend="tpuc", fullgraph=True)
    for n in (3, 5, 7):
        xs = [torch.randn(n, 2) for _ in range(R)]
        for r, o in enumerate(tpuc.run_ranks(g, xs)):
            torch.testing.assert_close(o, torch.cat(xs) * 2, msg=lambda m: f"rows {n}, rank {r}: {m}")
    assert tpuc.stats()["specializations"] == 2, tpuc.stats()


class ReduceFromRanks(torch.autograd.Function):
    """Megatron's `g`: an all-reduce forward (the row-parallel layer's partial sums), the
    identity backward (functional all_reduce has no autograd formula)."""

    @staticmethod
    def forward(ctx, x):
        return fc.wait_tensor(fc.all_reduce(x, "sum", dist.group.WORLD))

    @staticmethod
    def backward(ctx, g):
        return g


class TrainableShardedMLP(ShardedMLP):
    def forward(self, x):
        return ReduceFromRanks.apply(self.fc2(torch.relu(self.fc1(x))))


def test_tensor_parallel_training_steps_equal_the_whole_mlp():
    """Forward, backward and SGD steps of a Megatron MLP, each rank with its own parameter
    shards (functional_call), over batches of changing size: every rank's gradients equal the
    matching slices of the whole MLP's, and after three steps so do the weights. A parameter
    shared by every rank whose gradients differ between ranks is refused, not silently given
    rank 0's; a backward outside the run_ranks call of its forward is refused too."""
    import tpuc
    from torch.func import functional_call

    torch._dynamo.reset()
    tpuc.reset_stats()
    torch.manual_seed(0)
    d, h, k, lr = 8, 32, 32 // R, 0.1
    whole = torch.nn.Sequential(torch.nn.Linear(d, h), torch.nn.ReLU(), torch.nn.Linear(h, d, bias=False))
    cut = {  # where rank r's shard of each parameter sits in the whole MLP's
        "fc1.weight": lambda t, r: t[k * r:k * (r + 1)],
        "fc1.bias": lambda t, r: t[k * r:k * (r + 1)],
        "fc2.weight": lambda t, r: t[:, k * r:k * (r + 1)],
    }
    wp = {"fc1.weight": whole[0].weight, "fc1.bias": whole[0].bias, "fc2.weight": whole[2].weight}
    shards = [{n: c(wp[n], r).detach().clone().requires_grad_() for n, c in cut.items()} for r in range(R)]
    model = TrainableShardedMLP(d, h)

    def step(params, x):
        loss = functional_call(model, params, (x,)).square().mean()
        loss.backward()
        return loss.detach()

    f = torch.compile(step, backend="tpuc")
    for i, n in enumerate((6, 9, 5)):  # the batch changes: the later steps are bucketed
        x = torch.randn(n, d)
        whole.zero_grad()
        want = whole(x).square().mean()
        want.backward()
        losses = tpuc.run_ranks(f, [(shards[r], x) for r in range(R)])
        for r in range(R):
            torch.testing.assert_close(losses[r], want.detach(), msg=lambda m: f"step {i}, rank {r} loss: {m}")
            for n, c in cut.items():
                torch.testing.assert_close(shards[r][n].grad, c(wp[n].grad, r), rtol=1e-5, atol=1e-6,
                                           msg=lambda m: f"step {i}, rank {r}, {n}.grad: {m}")
        with torch.no_grad():
            for p in whole.parameters():
                p -= lr * p.grad
            for r in range(R):
                for p in shards[r].values():
                    p -= lr * p.grad
                    p.grad = None
    for r in range(R):
        for n, c in cut.items():
            torch.testing.assert_close(shards[r][n], c(wp[n], r), rtol=1e-5, atol=1e-6, msg=lambda m: f"rank {r}, {n}: {m}")
    s = tpuc.stats()
    assert s["buckets"] >= 2 and s.get("specializations", 0) == 0, s

    def forward_only(params, x):
        return functional_call(model, params, (x,)).square().mean()

    torch._dynamo.reset()
    losses = tpuc.run_ranks(torch.compile(forward_only, backend="tpuc"), [(shards[r], x) for r in range(R)])
    with pytest.raises(Exception, match="runs inside the same tpuc.run_ranks call"):
        losses[0].backward()

    # A backward that saves nothing belongs to the latest forward call.
    torch._dynamo.reset()
    ws = [torch.full((3, 2), float(r), requires_grad=True) for r in range(R)]

    def scaled(w):
        loss = (w * (2.0 + w.shape[0])).sum()
        loss.backward()
        return loss.detach()

    tpuc.run_ranks(torch.compile(scaled, backend="tpuc"), [(w,) for w in ws])
    assert all(torch.equal(w.grad, torch.full((3, 2), 5.0)) for w in ws)

    # Data parallel with the module's own parameters (one tensor on every rank) and different
    # batches: the ranks' gradients differ, and tpuc says so.
    torch._dynamo.reset()
    plain = torch.nn.Linear(d, d)

    def dp_step(x):
        loss = ReduceFromRanks.apply(plain(x)).square().mean()
        loss.backward()
        return loss.detach()

    with pytest.raises(Exception, match="is one tensor on every rank, but rank 1's gradient differs"):
        tpuc.run_ranks(torch.compile(dp_step, backend="tpuc"), [torch.randn(4, d) for _ in range(R)])


class PlainMLP(torch.nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.fc1 = torch.nn.Linear(d, h)
        self.fc2 = torch.nn.Linear(h, d)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def test_dtensor_parallelize_module_through_run_ranks_equals_eager():
    """PyTorch's own tensor parallelism: parallelize_module (ColwiseParallel fc1, RowwiseParallel
    fc2) on a DeviceMesh of 4 ranks; tpuc.rank_parameters cuts every rank's DTensor shards from
    the unsharded state dict, and run_ranks runs the graph Dynamo traces (local shards, the
    all-reduce of the row-parallel output) on 4 devices: every rank equals the unsharded MLP,
    and a training step gives every rank's DTensor parameters the gradients of their shards."""
    import tpuc
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
    from torch.func import functional_call

    torch._dynamo.reset()
    tpuc.reset_stats()
    torch.manual_seed(0)
    model = PlainMLP(8, 32)
    full = {k: v.detach().clone() for k, v in model.state_dict().items()}
    whole = PlainMLP(8, 32)
    whole.load_state_dict(full)
    parallelize_module(model, init_device_mesh("cpu", (R,)), {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()})
    params = tpuc.rank_parameters(model, full)
    assert [tuple(params[r]["fc1.weight"].to_local().shape) for r in range(R)] == [(8, 8)] * R
    torch.testing.assert_close(params[3]["fc2.weight"].to_local(), full["fc2.weight"][:, 24:])
    f = torch.compile(lambda p, x: functional_call(model, p, (x,)), backend="tpuc", fullgraph=True)
    x = torch.randn(6, 8)
    with torch.no_grad():
        outs = tpuc.run_ranks(f, [(params[r], x) for r in range(R)])
        want = whole(x)
    for r, o in enumerate(outs):
        torch.testing.assert_close(o, want, rtol=1e-5, atol=1e-5, msg=lambda m: f"rank {r}: {m}")
    assert tpuc.stats()["programs"] == 1

    # Training: the forward is compiled, backward() runs in the function run_ranks calls (torch
    # itself cannot trace a DTensor backward inside a compiled frame, with aot_eager either).
    torch._dynamo.reset()
    fwd = torch.compile(lambda p, x: functional_call(model, p, (x,)).square().mean(), backend="tpuc", fullgraph=True)

    def step(p, x):
        loss = fwd(p, x)
        loss.backward()
        return loss.detach()

    losses = tpuc.run_ranks(step, [(params[r], x) for r in range(R)])
    want = whole(x).square().mean()
    want.backward()
    k = 32 // R
    cut = {"fc1.weight": lambda t, r: t[k * r:k * (r + 1)], "fc1.bias": lambda t, r: t[k * r:k * (r + 1)],
           "fc2.weight": lambda t, r: t[:, k * r:k * (r + 1)], "fc2.bias": lambda t, r: t}
    wgrads = dict((n, p.grad) for n, p in whole.named_parameters())
    for r in range(R):
        torch.testing.assert_close(losses[r], want.detach(), msg=lambda m: f"rank {r} loss: {m}")
        for n, c in cut.items():
            g = params[r][n].grad
            assert g is not None, f"rank {r}: {n} has no gradient"
            torch.testing.assert_close(g.to_local(), c(wgrads[n], r), rtol=1e-5, atol=1e-6,
                                       msg=lambda m: f"rank {r}, {n}.grad: {m}")


def test_in_place_updates_per_rank():
    """Graphs that update arguments in place run per rank: an SGD step on all-reduced gradients
    (data parallel) and batch-norm training statistics of per-rank buffers each update every
    rank's own tensors; a buffer shared by all ranks that the ranks update differently is
    refused, not left with rank 0's values."""
    import tpuc
    from torch.func import functional_call

    torch._dynamo.reset()
    torch.manual_seed(0)
    ps = [torch.randn(3, 2) for _ in range(R)]
    gs = [torch.randn(3, 2) for _ in range(R)]
    want = [p - 0.1 * sum(gs) / R for p in ps]

    def sgd(p, g):
        p.sub_(0.1 * fc.wait_tensor(fc.all_reduce(g, "avg", dist.group.WORLD)))

    tpuc.run_ranks(torch.compile(sgd, backend="tpuc"), [(ps[r], gs[r]) for r in range(R)])
    for r in range(R):
        torch.testing.assert_close(ps[r], want[r], msg=lambda m: f"rank {r}: {m}")

    torch._dynamo.reset()
    bn = torch.nn.BatchNorm1d(4)
    states = [{k: v.clone() for k, v in bn.state_dict().items()} for _ in range(R)]
    xs = [torch.randn(8, 4) + r for r in range(R)]
    f = torch.compile(lambda s, x: functional_call(bn, s, (x,)), backend="tpuc")
    with torch.no_grad():
        outs = tpuc.run_ranks(f, [(states[r], xs[r]) for r in range(R)])
    for r in range(R):
        ref = torch.nn.BatchNorm1d(4)
        torch.testing.assert_close(outs[r], ref(xs[r]), rtol=1e-5, atol=1e-5, msg=lambda m: f"rank {r}: {m}")
        for k in ("running_mean", "running_var", "num_batches_tracked"):
            torch.testing.assert_close(states[r][k], getattr(ref, k), msg=lambda m: f"rank {r} {k}: {m}")

    torch._dynamo.reset()
    with torch.no_grad(), pytest.raises(Exception, match="is one tensor on every rank, but rank 1 updates it"):
        tpuc.run_ranks(torch.compile(lambda x: bn(x), backend="tpuc"), [(x,) for x in xs])


def test_device_mesh_groups_through_torch_compile():
    import tpuc
    from torch.distributed.device_mesh import init_device_mesh

    torch._dynamo.reset()
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))

    def f(x):
        # dp groups are ranks {0, 2} and {1, 3}; tp groups {0, 1} and {2, 3}.
        return fc.all_reduce(x, "sum", mesh.get_group("dp")), fc.all_gather_tensor(x, 0, mesh.get_group("tp"))

    xs = [torch.full((2,), float(r + 1)) for r in range(R)]
    outs = tpuc.run_ranks(torch.compile(f, backend="tpuc", fullgraph=True), xs)
    dp = {0: 4.0, 1: 6.0, 2: 4.0, 3: 6.0}
    tp = {0: [1, 1, 2, 2], 1: [1, 1, 2, 2], 2: [3, 3, 4, 4], 3: [3, 3, 4, 4]}
    for r, (a, b) in enumerate(outs):
        assert a.tolist() == [dp[r]] * 2, (r, a)
        assert b.tolist() == [float(v) for v in tp[r]], (r, b)
    # The same groups given explicitly; groups that do not cover the ranks are refused.
    torch._dynamo.reset()
    dp_name = mesh.get_group("dp").group_name
    outs = tpuc.run_ranks(torch.compile(f, backend="tpuc", fullgraph=True), xs, groups={dp_name: [[0, 2], [1, 3]]})
    assert [o[0][0].item() for o in outs] == [4.0, 6.0, 4.0, 6.0]
    torch._dynamo.reset()
    with pytest.raises(Exception, match="must cover every rank"):
        tpuc.run_ranks(torch.compile(f, backend="tpuc", fullgraph=True), xs, groups={dp_name: [[0, 2]]})


def test_run_ranks_errors():
    import tpuc

    torch._dynamo.reset()

    def f(x):
        return fc.all_reduce(x, "sum", dist.group.WORLD)

    g = torch.compile(f, backend="tpuc", fullgraph=True)
    xs = [torch.ones(3) * r for r in range(R)]
    assert [o.tolist() for o in tpuc.run_ranks(g, xs)] == [[6.0] * 3] * R
    # Called directly, a graph with collectives says how to run it.
    with pytest.raises(Exception, match="through tpuc.run_ranks"):
        g(xs[0])
    # Every rank runs the same program.
    with pytest.raises(ValueError, match="rank 2's argument leaf 0 is \\(4,\\) torch.float32, rank 0's is \\(3,\\)"):
        tpuc.run_ranks(g, [xs[0], xs[1], torch.ones(4), xs[3]])
    with pytest.raises(ValueError, match="got the arguments of 2 ranks, but the process group has 4"):
        tpuc.run_ranks(g, xs[:2])

    # Two graphs: the second reads the first's per-rank results.
    def two_graphs(x):
        y = fc.all_reduce(x, "sum", dist.group.WORLD)
        torch._dynamo.graph_break()
        return fc.all_reduce(y * 2 + x, "sum", dist.group.WORLD)

    torch._dynamo.reset()
    assert [o.tolist() for o in tpuc.run_ranks(torch.compile(two_graphs, backend="tpuc"), xs)] == [[54.0] * 3] * R

    # Eager code between two graphs has no per-rank values: refused, not computed on rank 0's.
    @torch._dynamo.disable
    def double(t):
        return t * 2

    def eager_between(x):
        y = fc.all_reduce(x, "sum", dist.group.WORLD)
        z = double(y)
        return fc.all_reduce(z, "sum", dist.group.WORLD)

    torch._dynamo.reset()
    with pytest.raises(Exception, match="eager code between graphs has no per-rank values"):
        tpuc.run_ranks(torch.compile(eager_between, backend="tpuc"), xs)


@pytest.mark.parametrize("topology", ["v5e:2x2", "v6e:2x2"])
def test_per_rank_programs_compile_for_tpu_topologies(tmp_path, topology):
    import json

    ep = torch.export.export(Collectives(), (torch.randn(4, 3),))
    pt2 = str(tmp_path / "collectives.pt2")
    torch.export.save(ep, pt2)
    p = subprocess.run([TPUC, "compile", pt2, "--ranks", str(R), "--target", "tpu", "--topology", topology, "--json",
                        "--no-cache"], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    v = json.loads(p.stdout.strip().splitlines()[-1])
    assert (v["replicas"], v["topology"], v["platform"]) == (R, topology, "tpu"), v
