"""torch.compile(backend="tpuc") with a device mesh: every graph compiled as an SPMD program
over 4 or 8 CPU devices in this process (forward and backward), equal to eager on one device,
under each sharding policy."""

import glob
import json
import os

import pytest
import torch
from grad_check import assert_grads_match
from make_fixtures import GPT2Block

import tpuc

POLICIES = [("x=2,y=2", "tp"), ("x=4", "dp"), ("x=2,y=4", "fsdp")]


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(16, 64), torch.nn.Linear(64, 16)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


MODELS = {"mlp": (MLP, (8, 16)), "gpt2_block": (lambda: GPT2Block(32, 4, 64), (4, 8, 32))}


@pytest.mark.parametrize("mesh,policy", POLICIES)
@pytest.mark.parametrize("name", sorted(MODELS))
def test_inference_and_training_equal_eager(name, mesh, policy, tmp_path):
    torch.manual_seed(0)
    make, shape = MODELS[name]
    model, x = make(), torch.randn(*shape)
    opts = {"mesh": mesh, "shard_policy": policy, "strict": True, "dump_dir": str(tmp_path)}
    compiled = torch.compile(model, backend="tpuc", fullgraph=True, options=opts)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-5)
    model(x).square().mean().backward()
    want = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    torch._dynamo.reset()
    torch.compile(model, backend="tpuc", fullgraph=True, options=opts)(x).square().mean().backward()
    for n, p in model.named_parameters():
        torch.testing.assert_close(p.grad, want[n], rtol=1e-4, atol=1e-5, msg=f"{name} {policy}: {n}")
    devices = 1
    for axis in mesh.split(","):
        devices *= int(axis.split("=")[1])
    summaries = [json.load(open(p)) for p in glob.glob(os.path.join(str(tmp_path), "*", "compile.json"))]
    assert summaries and all(s["partitions"] == devices for s in summaries)
    texts = [open(p).read() for p in glob.glob(os.path.join(str(tmp_path), "*", "module.stablehlo.mlir"))]
    assert all("sdy.mesh @mesh" in t for t in texts)
    assert any('{"' in t.split("sdy.sharding", 2)[-1] for t in texts), "the policy sharded nothing"


def test_option_errors():
    with pytest.raises(ValueError, match="need a mesh"):
        tpuc.Options.resolve({"shard_policy": "tp"})
    with pytest.raises(ValueError, match="expected one of dp, fsdp, tp"):
        tpuc.Options.resolve({"mesh": "x=2", "shard_policy": "zero3"})
    compiled = torch.compile(MLP(), backend="tpuc", options={"mesh": "x=0", "strict": True})
    with pytest.raises(Exception, match="mesh axis `x`: size `0` is not a positive integer"):
        compiled(torch.randn(8, 16))


def test_changing_shapes_compile_as_buckets_under_a_mesh():
    """Sizes that change compile as buckets under a mesh too: each bucket an SPMD program, the
    each call giving the weights' shards, results equal to eager."""
    torch.manual_seed(0)
    tpuc.reset_stats()
    model = MLP()
    compiled = torch.compile(model, backend="tpuc", options={"mesh": "x=2", "shard_policy": "dp", "strict": True})
    with torch.no_grad():
        for batch in (8, 6, 4, 6, 5):
            x = torch.randn(batch, 16)
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-5)
    s = tpuc.stats()
    assert s.get("specializations", 0) == 0 and s["buckets"] == 2, s  # buckets 8 and 4
    # SPMD shards are copies on every device, so each call gives them again: a kept copy could
    # be stale (a weight changed without a version bump), and no call may read one.
    assert s.get("weight_uploads", 0) == 0 and s["weight_copies"] == 4 * 5, s


@pytest.mark.parametrize("mesh,policy", POLICIES)
def test_gpt2_block_over_changing_lengths_trains_equal_to_eager_under_a_mesh(mesh, policy):
    torch.manual_seed(0)
    torch._dynamo.reset()
    tpuc.reset_stats()
    model = GPT2Block(32, 4, 64)
    compiled = torch.compile(model, backend="tpuc", options={"mesh": mesh, "shard_policy": policy, "strict": True})
    for seq in (8, 11, 16, 5):
        x = torch.randn(8, seq, 32)
        with torch.no_grad():
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-5, msg=f"seq {seq}")
        assert_grads_match(model, lambda: model(x).square().mean(), lambda: compiled(x).square().mean(), f"seq {seq} {policy}")
    assert tpuc.stats().get("specializations", 0) == 0, tpuc.stats()
