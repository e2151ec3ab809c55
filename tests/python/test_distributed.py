"""Real multi-process jobs: `torchrun --nproc_per_node=N` on the gloo backend runs
dist_worker.py, which trains a 2-block transformer with tpuc (strict) and eagerly in every rank
and compares them, for each way PyTorch distributes training (DDP, FSDP2, DTensor tensor
parallelism, SimpleFSDP). Graphs with collectives run them in the job's process group; the
compute between them is compiled by tpuc. No mocks: real processes, real gloo, the real CPU
plugin."""

import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "dist_worker.py")


def torchrun(setup: str, ranks: int, tmp_path, timeout: int = 600) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={ranks}", WORKER,
           "--setup", setup, "--out", str(tmp_path)]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


def results(tmp_path, ranks: int) -> list[dict]:
    return [json.load(open(os.path.join(tmp_path, f"rank_{r}.json"))) for r in range(ranks)]


CASES = [(s, 2) for s in ("ddp", "fsdp2", "tp", "simplefsdp", "tp_infer", "llama_infer", "branch")] + \
        [(s, 4) for s in ("ddp", "fsdp2", "tp", "simplefsdp")]


@pytest.mark.parametrize("setup,ranks", CASES, ids=[f"{s}-{r}ranks" for s, r in CASES])
def test_job_trains_equal_to_eager(setup, ranks, tmp_path):
    p = torchrun(setup, ranks, tmp_path)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-6000:]
    rs = results(tmp_path, ranks)
    for r in rs:
        assert r["loss_diff"] <= 1e-5 and r["param_diff"] <= 1e-5, r
        assert r["programs"] > 0, r
        assert r["stats"].get("fallback_graphs", 0) == 0, r
        if setup in ("tp", "simplefsdp", "tp_infer", "llama_infer", "branch"):
            # The collectives ran in the job, between programs tpuc compiled.
            assert r["stats"].get("job_regions", 0) > 1, r
    if setup != "branch":
        # The same graphs on every rank: the same programs.
        assert len({r["programs"] for r in rs}) == 1, [r["programs"] for r in rs]
    print(setup, ranks, "programs per rank:", [r["programs"] for r in rs])


def test_a_rank_that_cannot_compile_ends_the_job(tmp_path):
    """Rank 1's graph has an op tpuc cannot compile (strict): rank 1 raises an error naming
    itself and the graph, and torchrun ends the job; rank 0 does not wait in its all-reduce."""
    p = torchrun("fail", 2, tmp_path, timeout=300)
    assert p.returncode != 0
    err = p.stdout + p.stderr
    assert "rank 1 of 2: tpuc: g0_inference" in err and "unknown_a" in err, err[-4000:]
    assert not os.path.exists(os.path.join(tmp_path, "rank_0.json"))


def test_collectives_without_a_job_say_what_to_do():
    import torch

    import tpuc

    def f(x):
        y = torch.ops._c10d_functional.all_reduce(x * 2, "sum", "0")
        return torch.ops._c10d_functional.wait_tensor(y) + 1

    with pytest.raises(tpuc.TpucError, match="torch.distributed is not initialized.*torchrun.*run_ranks"):
        torch.compile(f, backend="tpuc")(torch.randn(4))


def test_independent_compute_is_scheduled_between_a_collective_and_its_wait():
    """The split graph issues the all-reduce as soon as its input exists, runs the compute that
    does not need it, and only then waits (the order the job runs, checked on the graph)."""
    import torch
    import torch.distributed as dist
    from torch.fx.experimental.proxy_tensor import make_fx
    from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner, Partition
    from torch.fx.passes.operator_support import OperatorSupportBase
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from tpuc import distributed as jd

    started = not dist.is_initialized()
    if started:
        dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
    try:
        def f(x, w, y, v):
            a = torch.ops._c10d_functional.all_reduce(torch.tanh(x @ w), "sum", "0")
            b = torch.relu(y @ v) * 2  # needs no collective
            return torch.ops._c10d_functional.wait_tensor(a) + b

        args = [torch.randn(8, 8) for _ in range(4)]
        gm = make_fx(f)(*args)
        regions = jd.regions(gm, set())
        assert len(regions) == 3, [[n.name for n in r] for r in regions]

        class All(OperatorSupportBase):
            def is_node_supported(self, submodules, node):
                return True

        fused = CapabilityBasedPartitioner(gm, All()).fuse_partitions(
            [Partition(id=k, nodes=r) for k, r in enumerate(regions)], prefix="part_")
        jd.schedule(fused)
        order = [n.op if n.op == "call_module" else getattr(n.target, "__name__", n.op)
                 for n in fused.graph.nodes if n.op in ("call_module", "call_function")]
        assert order == ["call_module", "timed_all_reduce_default", "call_module", "timed_wait_tensor_default",
                         "call_module"], order
        torch.testing.assert_close(fused(*args), f(*args))
    finally:
        if started:
            dist.destroy_process_group()
