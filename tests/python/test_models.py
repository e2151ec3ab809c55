"""The fixture models under torch.compile(backend="tpuc") against eager PyTorch: inference,
training with SGD and Adam, compile counts and resident weights."""

import copy

import make_fixtures as mf
import pytest
import torch

import tpuc

BUILDERS = {"mlp": mf.build_mlp, "gpt2_block": mf.build_gpt2_block, "cnn": mf.build_cnn}


def assert_close(got, want, rtol, atol, what):
    assert got.shape == want.shape and got.dtype == want.dtype, f"{what}: {got.shape} {got.dtype} vs {want.shape} {want.dtype}"
    assert got.stride() == want.stride(), f"{what}: strides {got.stride()} vs {want.stride()}"
    d = (got.double() - want.double()).abs().max().item() if want.numel() else 0.0
    assert torch.allclose(got, want, rtol=rtol, atol=atol), f"{what}: max abs diff {d:.3g}"


@pytest.mark.parametrize("name", list(BUILDERS))
def test_inference_matches_eager(name):
    model, args, _, _ = BUILDERS[name]()
    model.eval()
    compiled = torch.compile(model, backend="tpuc")
    with torch.no_grad():
        want = model(*args)
        got = compiled(*args)
        again = compiled(*args)
    assert_close(got, want, 1e-4, 1e-5, name)
    assert torch.equal(got, again)
    s = tpuc.stats()
    assert s["dynamo_graphs"] == 1 and s["programs"] == 1, s
    assert s.get("fallback_graphs", 0) == 0, s


@pytest.mark.parametrize("name", list(BUILDERS))
def test_inference_with_grad_enabled(name):
    """Outside no_grad, aot_autograd compiles a forward and a backward graph; the outputs are
    still eager's and carry a grad_fn."""
    model, args, _, _ = BUILDERS[name]()
    model.eval()
    compiled = torch.compile(model, backend="tpuc")
    got = compiled(*args)
    want = model(*args)
    assert got.requires_grad and got.grad_fn is not None
    assert_close(got.detach(), want.detach(), 1e-4, 1e-5, name)


def test_repeated_calls_compile_once_and_keep_weights_resident():
    model, (x,), _, _ = mf.build_mlp()
    model.eval()
    compiled = torch.compile(model, backend="tpuc")
    with torch.no_grad():
        for _ in range(5):
            compiled(x)
        s = tpuc.stats()
        assert s["programs"] == 1, s
        # fc1/fc2 weight and bias, each read in place once: aliased, or shared with a program
        # of an earlier test that aliased the same (reused) address. Never copied.
        assert in_place(s) == 4 and s.get("weight_copies", 0) == 0, s
        # A new input value is no recompile and no weight upload.
        compiled(x + 1)
        assert in_place(tpuc.stats()) == 4
        # An in-place change of a parameter needs nothing: the program reads its memory.
        model.fc1.weight.mul_(0.5)
        assert_close(compiled(x), model(x), 1e-5, 1e-6, "after in-place update")
        assert in_place(tpuc.stats()) == 4
        # A parameter whose storage was replaced is aliased again, alone.
        model.fc2.bias.data = torch.randn(8)
        assert_close(compiled(x), model(x), 1e-5, 1e-6, "after .data replacement")
        s = tpuc.stats()
        assert in_place(s) == 5 and s["programs"] == 1 and s.get("weight_copies", 0) == 0, s


def in_place(s: dict) -> int:
    """Weights a program reads in place: aliased by it, or shared with another program."""
    return s.get("weight_uploads", 0) + s.get("weight_shares", 0)


def _train(loss_module, call, args, make_opt, steps):
    opt = make_opt(loss_module.parameters())
    losses, grads0 = [], None
    for step in range(steps):
        opt.zero_grad()
        loss = call(*args)
        loss.backward()
        if step == 0:
            grads0 = {n: p.grad.detach().clone() for n, p in loss_module.named_parameters()}
        opt.step()
        losses.append(loss.item())
    return losses, grads0


OPTIMIZERS = {
    "sgd": lambda params: torch.optim.SGD(params, lr=0.05, momentum=0.9),
    "adam": lambda params: torch.optim.Adam(params, lr=1e-2),
}


@pytest.mark.parametrize("opt", list(OPTIMIZERS))
@pytest.mark.parametrize("name", list(BUILDERS))
def test_training_matches_eager(name, opt):
    model, _, loss_module, args = BUILDERS[name]()
    model.train()
    eager = copy.deepcopy(loss_module)
    compiled = torch.compile(loss_module, backend="tpuc")
    steps = 5
    got_losses, got_grads = _train(loss_module, compiled, args, OPTIMIZERS[opt], steps)
    want_losses, want_grads = _train(eager, eager, args, OPTIMIZERS[opt], steps)
    assert got_losses == pytest.approx(want_losses, rel=1e-4, abs=1e-6)
    for n in want_grads:
        assert_close(got_grads[n], want_grads[n], 1e-3, 1e-5, f"step-0 gradient of {n}")
    # Weights whose gradient is zero in exact arithmetic (a conv bias followed by batch norm,
    # the key part of the attention's qkv bias) get round-off gradients (~1e-9) in both runs.
    # SGD leaves them put; Adam divides such a gradient by its own magnitude and moves the weight
    # by up to lr per step in a direction set by round-off, differently in each run. The Adam
    # comparison masks those elements (and the running mean that follows the conv bias); SGD
    # checks every element.
    scale = max(g.abs().max().item() for g in want_grads.values())
    got_state, want_state = loss_module.state_dict(), eager.state_dict()
    assert got_state.keys() == want_state.keys()
    masked = 0
    for k, want in want_state.items():
        got = got_state[k]
        what = f"{name}/{opt} after {steps} steps: {k}"
        if opt == "adam" and k in want_grads:
            # Exactly zero in one run and round-off in the other is the same case.
            g, h = want_grads[k], got_grads[k]
            keep = (g.abs() >= 1e-6 * scale) | ((g == 0) & (h == 0))
            masked += int((~keep).sum())
            got, want = got[keep], want[keep]
        elif opt == "adam" and k == "model.bn1.running_mean" and (want_grads["model.conv1.bias"].abs() < 1e-6 * scale).all():
            continue
        assert_close(got, want, 1e-4, 1e-5, what)
    total = sum(g.numel() for g in want_grads.values())
    assert masked <= 0.05 * total, f"{masked} of {total} weights have a zero gradient"
    s = tpuc.stats()
    # One forward and one backward program, compiled once for all steps.
    assert s["programs"] == 2 and s["aot_graphs"] == 2, s


def test_batch_norm_running_stats_written_back():
    model, (x,), _, _ = mf.build_cnn()
    model.train()
    eager = copy.deepcopy(model)
    compiled = torch.compile(model, backend="tpuc")
    with torch.no_grad():
        for _ in range(3):
            got = compiled(x)
            want = eager(x)
    assert_close(got, want, 1e-4, 1e-5, "cnn train-mode forward")
    for k in ("bn1.running_mean", "bn1.running_var", "bn1.num_batches_tracked"):
        assert_close(model.state_dict()[k], eager.state_dict()[k], 1e-5, 1e-6, k)
    assert model.bn1.num_batches_tracked.item() == eager.bn1.num_batches_tracked.item() == 3 + 3


def test_dynamic_shapes_training_matches_eager():
    """dynamic=True gives graphs with symbolic sizes; tpuc compiles them once per bucket
    (forward and backward): batches 4 and 6 run in buckets 4 and 8."""
    _, _, loss_module, _ = mf.build_mlp()
    eager = copy.deepcopy(loss_module)
    compiled = torch.compile(loss_module, backend="tpuc", dynamic=True)
    torch.manual_seed(1)
    for batch in (4, 6, 4):
        x, t = torch.randn(batch, 16), torch.randint(0, 8, (batch,))
        got, want = compiled(x, t), eager(x, t)
        got.backward()
        want.backward()
        assert got.item() == pytest.approx(want.item(), rel=1e-5)
    for (n, p), q in zip(loss_module.named_parameters(), eager.parameters()):
        assert_close(p.grad, q.grad, 1e-4, 1e-6, n)
    s = tpuc.stats()
    assert s["dynamo_graphs"] == 1 and s["buckets"] == 4 and s["programs"] == 4, s
