"""Ops that training graphs (and a few exports) reach and that tpuc lowers itself, equal to eager:
the transposed convolution's backward (UNet decoders), masked_scatter and its backward
(LLaVA-style image placeholders), adaptive average pooling's backward to sizes that do not
divide the input, grid sampling (2-D and 3-D) and its backward (deformable attention, spatial
transformers), embedding_bag (nn.EmbeddingBag) forward and backward, and random ops called
with `generator=None` (a vocoder drawing its own noise). Training runs through
`torch.compile(backend="tpuc", options={"strict": True})`: the loss and every gradient against
eager's; inference also through the CLI on a core-ATen export."""

import copy
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from cli_check import assert_cli_matches_eager

import tpuc

STRICT = {"strict": True}


def compiled(model):
    return torch.compile(model, backend="tpuc", options=STRICT, fullgraph=True)


def assert_training_matches_eager(model, inputs, label, rtol=1e-4, atol=1e-5):
    """One forward and backward of `model` on `inputs` (floating inputs get gradients too),
    compiled strictly and eagerly: the loss (sum of squares of the output) and the gradient
    of every parameter and input equal."""
    eager = copy.deepcopy(model)

    def run(f, m):
        xs = [x.detach().clone().requires_grad_(x.is_floating_point()) for x in inputs]
        loss = f(*xs).pow(2).sum()
        loss.backward()
        return loss.detach(), [x.grad for x in xs], {n: p.grad for n, p in m.named_parameters()}

    want_loss, want_in, want_p = run(eager, eager)
    got_loss, got_in, got_p = run(compiled(model), model)
    torch.testing.assert_close(got_loss, want_loss, rtol=rtol, atol=atol, msg=lambda m: f"{label}: loss: {m}")
    for i, (g, w) in enumerate(zip(got_in, want_in)):
        if w is None:
            assert g is None, f"{label}: input {i} has a gradient eager does not"
            continue
        torch.testing.assert_close(g, w, rtol=rtol, atol=atol, msg=lambda m: f"{label}: input {i}: {m}")
    assert set(got_p) == set(want_p)
    for n, w in want_p.items():
        assert got_p[n] is not None, f"{label}: {n} has no gradient"
        torch.testing.assert_close(got_p[n], w, rtol=rtol, atol=atol, msg=lambda m: f"{label}: {n}: {m}")
    s = tpuc.stats()
    assert s.get("fallback_graphs", 0) == 0, s


# ----------------------------------------------------------------- transposed convolution


class Decoder(nn.Module):
    """A UNet-style decoder step: a transposed convolution, then a convolution."""

    def __init__(self, cin, cout, k, stride, padding, output_padding, groups, bias, dilation=1, dims=2):
        super().__init__()
        ct = {1: nn.ConvTranspose1d, 2: nn.ConvTranspose2d, 3: nn.ConvTranspose3d}[dims]
        conv = {1: nn.Conv1d, 2: nn.Conv2d, 3: nn.Conv3d}[dims]
        self.up = ct(cin, cout, k, stride=stride, padding=padding, output_padding=output_padding, groups=groups,
                     bias=bias, dilation=dilation)
        self.conv = conv(cout, 3, 3, padding=1)

    def forward(self, x):
        return self.conv(torch.tanh(self.up(x)))


# (kernel, stride, padding, output_padding, dilation)
CONV_T_GEOMETRY = [(3, 1, 0, 0, 1), (3, 1, 1, 0, 1), (2, 2, 0, 0, 1), (4, 2, 1, 0, 1), (3, 2, 1, 1, 1),
                   (3, 2, 0, 1, 1), (3, 1, 2, 0, 2), (3, 2, 1, 2, 3)]


@pytest.mark.parametrize("geometry", CONV_T_GEOMETRY, ids=lambda g: "k{}s{}p{}op{}d{}".format(*g))
@pytest.mark.parametrize("groups", [1, 2])
@pytest.mark.parametrize("bias", [True, False])
def test_conv_transpose2d_trains_like_eager(geometry, groups, bias):
    k, s, p, op, d = geometry
    torch.manual_seed(0)
    model = Decoder(4, 6, k, s, p, op, groups, bias, dilation=d)
    assert_training_matches_eager(model, [torch.randn(2, 4, 5, 7)], f"conv_transpose2d {geometry} g{groups}")


@pytest.mark.parametrize("dims", [1, 3])
def test_conv_transpose1d_and_3d_train_like_eager(dims):
    torch.manual_seed(0)
    model = Decoder(4, 2, 3, 2, 1, 1, 2, True, dims=dims)
    shape = {1: (2, 4, 9), 3: (1, 4, 3, 4, 5)}[dims]
    assert_training_matches_eager(model, [torch.randn(*shape)], f"conv_transpose{dims}d")


# ----------------------------------------------------------------- masked_scatter


class ImagePlaceholders(nn.Module):
    """LLaVA-style: token embeddings whose image-placeholder positions take the projected
    image features, in order (`inputs_embeds.masked_scatter(mask, image_features)`)."""

    IMAGE = 7

    def __init__(self, vocab=16, d=8, vision=6):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.proj = nn.Sequential(nn.Linear(vision, d), nn.GELU(), nn.Linear(d, d))
        self.head = nn.Linear(d, vocab)

    def forward(self, ids, pixels):
        embeds = self.embed(ids)
        feats = self.proj(pixels).reshape(-1, embeds.shape[-1])
        mask = (ids == self.IMAGE).unsqueeze(-1).expand_as(embeds)
        h = embeds.masked_scatter(mask, feats.to(embeds.dtype))
        return self.head(torch.tanh(h))


def _placeholder_inputs():
    ids = torch.tensor([[7, 7, 7, 1, 2, 3], [4, 7, 7, 7, 5, 7]])
    ids[1, 5] = 2  # six placeholders, for 2 images of 3 patches
    return ids, torch.randn(2, 3, 6)


def test_masked_scatter_trains_like_eager():
    torch.manual_seed(0)
    ids, pixels = _placeholder_inputs()
    assert_training_matches_eager(ImagePlaceholders(), [ids, pixels], "masked_scatter")


def test_masked_scatter_backward_with_more_source_than_placeholders():
    """A source larger than the mask's count: its tail gets a zero gradient, as eager's."""

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.src = nn.Parameter(torch.randn(5, 4))
            self.base = nn.Parameter(torch.randn(3, 4))

        def forward(self, keep):
            return self.base.masked_scatter(keep, self.src * 2)

    torch.manual_seed(0)
    keep = torch.tensor([[True, False, True, False], [False, False, False, False], [True, True, False, True]])
    assert_training_matches_eager(M(), [keep], "masked_scatter larger source")


def test_masked_scatter_runs_in_the_cli(tmp_path):
    torch.manual_seed(0)
    ids, pixels = _placeholder_inputs()
    assert_cli_matches_eager(ImagePlaceholders(), (ids, pixels), tmp_path, tol=1e-5)


# ----------------------------------------------------------------- adaptive average pooling


class Pooled(nn.Module):
    def __init__(self, size, dims=2):
        super().__init__()
        conv = nn.Conv2d if dims == 2 else nn.Conv3d
        pool = nn.AdaptiveAvgPool2d if dims == 2 else nn.AdaptiveAvgPool3d
        self.conv = conv(3, 4, 3, padding=1)
        self.pool = pool(size)

    def forward(self, x):
        return self.pool(torch.relu(self.conv(x))).flatten(1)


@pytest.mark.parametrize("size,shape", [((3, 3), (2, 3, 7, 8)), ((2, 5), (2, 3, 9, 11)), ((4, 4), (1, 3, 8, 8)),
                                        ((5, 3), (2, 3, 4, 7)), ((1, 1), (2, 3, 5, 6))])
def test_adaptive_avg_pool2d_trains_like_eager(size, shape):
    torch.manual_seed(0)
    assert_training_matches_eager(Pooled(size), [torch.randn(*shape)], f"adaptive_avg_pool2d {size} of {shape}")


def test_adaptive_avg_pool3d_trains_like_eager():
    torch.manual_seed(0)
    assert_training_matches_eager(Pooled((2, 3, 2), dims=3), [torch.randn(1, 3, 5, 7, 4)], "adaptive_avg_pool3d")


def test_adaptive_avg_pool2d_runs_in_the_cli(tmp_path):
    torch.manual_seed(0)
    assert_cli_matches_eager(Pooled((2, 5)), torch.randn(2, 3, 9, 11), tmp_path, tol=1e-5)


# ----------------------------------------------------------------- grid sampling


class Sampled(nn.Module):
    """Features sampled at a grid, as deformable attention and spatial transformers do: the
    gradient reaches the features (an add-scatter) and the grid (the weights' slopes)."""

    def __init__(self, mode, padding, align_corners, dims=2):
        super().__init__()
        self.conv = (nn.Conv2d if dims == 2 else nn.Conv3d)(3, 4, 3, padding=1)
        self.how = dict(mode=mode, padding_mode=padding, align_corners=align_corners)

    def forward(self, x, grid):
        return F.grid_sample(self.conv(x), grid, **self.how)


GRID_CASES = [(m, p, a) for m in ("bilinear", "nearest") for p in ("zeros", "border", "reflection")
              for a in (False, True)]


def _grid(*shape):
    # Points inside and beyond [-1, 1], so that every padding mode folds or clips some.
    return torch.rand(*shape) * 2.6 - 1.3


@pytest.mark.parametrize("mode,padding,align_corners", GRID_CASES, ids=lambda v: str(v))
def test_grid_sample_2d_trains_like_eager(mode, padding, align_corners):
    torch.manual_seed(0)
    assert_training_matches_eager(Sampled(mode, padding, align_corners), [torch.randn(2, 3, 5, 7), _grid(2, 4, 6, 2)],
                                  f"grid_sample 2-D {mode} {padding} align_corners={align_corners}")


@pytest.mark.parametrize("mode,padding,align_corners", [("bilinear", "zeros", False), ("bilinear", "reflection", True),
                                                        ("nearest", "border", False)], ids=lambda v: str(v))
def test_grid_sample_3d_trains_like_eager(mode, padding, align_corners):
    torch.manual_seed(0)
    assert_training_matches_eager(Sampled(mode, padding, align_corners, dims=3),
                                  [torch.randn(1, 3, 4, 5, 3), _grid(1, 2, 3, 4, 3)],
                                  f"grid_sample 3-D {mode} {padding} align_corners={align_corners}")


@pytest.mark.parametrize("mode,padding,align_corners", GRID_CASES, ids=lambda v: str(v))
def test_grid_sample_2d_runs_in_the_cli(mode, padding, align_corners, tmp_path):
    torch.manual_seed(0)
    assert_cli_matches_eager(Sampled(mode, padding, align_corners), (torch.randn(2, 3, 5, 7), _grid(2, 4, 6, 2)),
                             tmp_path, tol=1e-5)


def test_bicubic_grid_sample_is_refused_in_the_cli_by_name(tmp_path):
    torch.manual_seed(0)
    with pytest.raises(AssertionError, match="grid_sampler_2d supports bilinear"):
        assert_cli_matches_eager(Sampled("bicubic", "zeros", False), (torch.randn(1, 3, 5, 7), _grid(1, 4, 6, 2)),
                                 tmp_path)


# ----------------------------------------------------------------- embedding_bag


class Bags(nn.Module):
    def __init__(self, mode, padding_idx=None, include_last_offset=False, scale_grad_by_freq=False):
        super().__init__()
        self.bag = nn.EmbeddingBag(12, 5, mode=mode, padding_idx=padding_idx, include_last_offset=include_last_offset,
                                   scale_grad_by_freq=scale_grad_by_freq)
        self.head = nn.Linear(5, 3)

    def forward(self, ids, offsets, weights=None):
        return self.head(self.bag(ids, offsets, per_sample_weights=weights))


IDS = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9, 11, 0, 2])
OFFSETS = torch.tensor([0, 3, 3, 5, 8])  # bag 1 is empty


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("padding_idx", [None, 2])
def test_embedding_bag_trains_like_eager(mode, padding_idx):
    torch.manual_seed(0)
    model = Bags(mode, padding_idx)
    assert_training_matches_eager(model, [IDS, OFFSETS], f"embedding_bag {mode} pad {padding_idx}")


@pytest.mark.parametrize("padding_idx", [None, 4])
def test_embedding_bag_per_sample_weights_train_like_eager(padding_idx):
    torch.manual_seed(0)
    model = Bags("sum", padding_idx)
    assert_training_matches_eager(model, [IDS, OFFSETS, torch.rand(len(IDS))], f"embedding_bag weights pad {padding_idx}")


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag_include_last_offset_and_2d_input(mode):
    torch.manual_seed(0)
    closed = torch.cat([OFFSETS, torch.tensor([len(IDS)])])
    assert_training_matches_eager(Bags(mode, include_last_offset=True), [IDS, closed], f"embedding_bag {mode} closed")
    torch._dynamo.reset()

    class TwoD(Bags):
        def forward(self, ids):
            return self.head(self.bag(ids))

    assert_training_matches_eager(TwoD(mode, padding_idx=3), [torch.tensor([[1, 3, 5], [3, 3, 3], [7, 1, 1]])],
                                  f"embedding_bag {mode} 2-D")


@pytest.mark.parametrize("mode", ["sum", "mean"])
def test_embedding_bag_scale_grad_by_freq(mode):
    torch.manual_seed(0)
    assert_training_matches_eager(Bags(mode, scale_grad_by_freq=True), [IDS, OFFSETS], f"embedding_bag {mode} by freq")


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag_inference(mode):
    torch.manual_seed(0)
    model = Bags(mode, padding_idx=2).eval()
    with torch.no_grad():
        torch.testing.assert_close(compiled(model)(IDS, OFFSETS), model(IDS, OFFSETS), rtol=1e-5, atol=1e-6)


def test_embedding_bag_auxiliary_results_are_the_cpu_kernels():
    """offset2bag, bag_size and max_indices as eager's CPU kernel gives them (where its
    backward reads them): a backward that falls back to eager can take tpuc's."""
    w = torch.randn(12, 5)
    for mode in (0, 1, 2):
        for pad in (-1, 2):
            def f(w, i, o):
                return torch.ops.aten._embedding_bag(w, i, o, False, mode, False, None, False, pad)

            got = compiled(f)(w, IDS, OFFSETS)
            want = f(w, IDS, OFFSETS)
            torch.testing.assert_close(got[0], want[0], rtol=1e-6, atol=1e-6)
            assert torch.equal(got[1], want[1]), (mode, pad, got[1], want[1])
            if mode != 0:
                assert torch.equal(got[2], want[2]), (mode, pad, got[2], want[2])
            if mode == 2:
                assert torch.equal(got[3], want[3]), (mode, pad, got[3], want[3])
            torch._dynamo.reset()


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag_runs_in_the_cli(mode, tmp_path):
    torch.manual_seed(0)
    assert_cli_matches_eager(Bags(mode, padding_idx=2), (IDS, OFFSETS), tmp_path, tol=1e-5)


def test_embedding_bag_with_per_sample_weights_runs_in_the_cli(tmp_path):
    torch.manual_seed(0)
    assert_cli_matches_eager(Bags("sum"), (IDS, OFFSETS, torch.rand(len(IDS))), tmp_path, tol=1e-5)


def test_refusal_of_a_bare_torch_module_names_its_forward(monkeypatch):
    """A torch.nn module compiled by itself has no frames of the user's code in its graphs: a
    refusal names the module's forward instead (here in the fallback warning, with
    `_embedding_bag` taken off the supported list, and in strict mode's error from the
    compiler, for sparse gradients it refuses)."""
    import inspect

    import tpuc.backend

    line = inspect.unwrap(nn.EmbeddingBag.forward).__code__.co_firstlineno
    where = f"sparse.py:{line} in EmbeddingBag.forward"
    supported = tpuc.supported_targets() - {"torch.ops.aten._embedding_bag.default"}
    monkeypatch.setattr(tpuc.backend, "_supported", supported)
    bag = nn.EmbeddingBag(12, 5, mode="mean")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = torch.compile(bag, backend="tpuc")(IDS, OFFSETS)
    torch.testing.assert_close(got, bag(IDS, OFFSETS))
    ours = [str(w.message) for w in caught if issubclass(w.category, tpuc.TpucFallbackWarning)]
    assert ours and f"node `_embedding_bag` at {where}" in ours[0], ours
    monkeypatch.undo()
    torch._dynamo.reset()
    sparse = nn.EmbeddingBag(12, 5, mode="sum", sparse=True)
    with pytest.raises(Exception) as info:
        compiled(sparse)(IDS, OFFSETS).sum().backward()
    # Dynamo wraps backend errors (BackendCompilerFailed, with ours as inner_exception).
    chain, e = [], info.value
    while e is not None and len(chain) < 8:
        chain.append(e)
        e = getattr(e, "inner_exception", None) or e.__cause__
    err = next((e for e in chain if isinstance(e, tpuc.TpucError)), None)
    assert err is not None, repr(info.value)
    assert err.target.endswith("_embedding_bag_backward.default") and err.source == where, (err.target, err.source)
    assert "sparse=True" in str(err), str(err)


# ----------------------------------------------------------------- random ops with a generator argument


class Noisy(nn.Module):
    """Draws its own noise as a vocoder does: `torch.randn(..., generator=None)`."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 16)

    def forward(self, x, generator=None):
        noise = torch.randn(x.shape, generator=generator, dtype=x.dtype)
        u = torch.rand(x.shape, generator=generator)
        k = torch.randint(0, 5, x.shape, generator=generator)
        k2 = torch.randint(5, 9, x.shape, generator=generator)
        perm = torch.randperm(16, generator=generator)
        return self.fc(x + noise), u, k, k2, perm


def _first_draws(seed: torch.Tensor):
    """What Noisy draws for `seed`: its streams in graph order (randn takes two, Box-Muller)."""
    from rng_reference import uniform as _uniform_eager

    u1, u2 = _uniform_eager(seed, 0, [64, 16], torch.float32), _uniform_eager(seed, 1, [64, 16], torch.float32)
    noise = torch.sqrt(torch.log1p(-u1) * -2.0) * torch.cos(u2 * (2 * torch.pi))
    u = _uniform_eager(seed, 2, [64, 16], torch.float32)
    k = torch.floor(_uniform_eager(seed, 3, [64, 16], torch.float64) * 5).long()
    k2 = torch.floor(_uniform_eager(seed, 4, [64, 16], torch.float64) * 4).long() + 5
    perm = torch.argsort(_uniform_eager(seed, 5, [16], torch.float64), stable=True)
    return noise, u, k, k2, perm


def _check_draws(model, x, outs, seed):
    noise, u, k, k2, perm = _first_draws(seed)
    with torch.no_grad():
        torch.testing.assert_close(outs[0], model.fc(x + noise), rtol=1e-5, atol=1e-5)
    assert torch.equal(outs[1], u)
    assert torch.equal(outs[2], k) and torch.equal(outs[3], k2) and torch.equal(outs[4], perm)


def test_generator_overloads_draw_from_torchs_generator_when_compiled():
    torch.manual_seed(0)
    model = Noisy()
    x = torch.randn(64, 16)
    f = compiled(model)
    torch.manual_seed(5)
    seed = torch.randint(0, 2**31 - 1, (2,), dtype=torch.int64)
    torch.manual_seed(5)
    outs = f(x)
    _check_draws(model, x, outs, seed)
    # Training through it: the noise is an input-independent draw, the gradient eager's for it.
    out = f(x.requires_grad_())[0]
    out.sum().backward()
    torch.testing.assert_close(x.grad, model.fc.weight.sum(0).expand(64, 16), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("form", ["raw", "core"])
def test_generator_overloads_run_in_the_cli_from_the_seed(form, tmp_path):
    import subprocess

    import numpy as np
    from cli_check import TPUC

    torch.manual_seed(0)
    model = Noisy().eval()
    x = torch.randn(64, 16)
    ep = torch.export.export(model, (x,))
    targets = {str(n.target) for n in ep.run_decompositions().graph.nodes}
    assert {"aten.randn.generator", "aten.rand.generator", "aten.randperm.generator"} <= targets, targets
    pt2 = str(tmp_path / "m.pt2")
    torch.export.save(ep.run_decompositions() if form == "core" else ep, pt2)
    np.save(tmp_path / "x.npy", x.numpy())
    p = subprocess.run([TPUC, "run", pt2, "--inputs", str(tmp_path / "x.npy"), "--seed", "3", "--out-dir",
                        str(tmp_path / "out"), "--no-cache"], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    outs = [torch.from_numpy(np.load(tmp_path / "out" / f"output_{i}.npy")) for i in range(5)]
    _check_draws(model, x, outs, torch.tensor([3, 0], dtype=torch.int64))
