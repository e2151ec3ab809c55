"""histogram, histogramdd and linspace equal torch's CPU kernels bit for bit: the edges (a
linspace whose points are fused multiply-adds), an element on an edge in the bin that edge
opens, the last bin closed, elements outside a range dropped, weights, and density (which
rounds like eager up to the order of its sum)."""

import pytest
import torch

import tpuc  # noqa: F401  (registers the backend)
from test_raw_exports import _run_raw


def _compiled(f):
    torch._dynamo.reset()
    # histogram has no fake kernel for symbolic sizes: one graph per shape.
    return torch.compile(f, backend="tpuc", fullgraph=True, dynamic=False)


def _inputs(seed: int, n: int, d: int = 1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g) * (1 + seed % 7)
    if seed % 3 == 0:
        x = torch.round(x)  # many elements exactly on edges
    if seed % 5 == 0:
        x[: n // 2] = x[0]  # ties, and for n // 2 == n an equal min and max
    w = torch.rand(n, generator=g)
    return (x[:, 0] if d == 1 else x), w


def _check(want, got, exact_upto: int):
    for i, (a, b) in enumerate(zip(want, got)):
        if i < exact_upto:
            assert torch.equal(a, b), (i, a, b)
        else:
            torch.testing.assert_close(b, a, rtol=2e-6, atol=1e-7)


def test_histogram_bin_counts_edges_and_ranges():
    def f(x, w):
        a = torch.histogram(x, bins=7)
        b = torch.histogram(x, bins=13, range=(-3.0, 2.5), weight=w)
        c = torch.histogram(x, bins=1)
        return a[0], a[1], b[0], b[1], c[0], c[1]

    g = _compiled(f)
    for seed in range(30):
        x, w = _inputs(seed, 101)
        _check(f(x, w), g(x, w), exact_upto=4)


def test_histogram_equal_min_and_max_widens_by_half():
    f = lambda x: torch.histogram(x, bins=4)  # noqa: E731
    x = torch.full((9,), 2.0)
    got = _compiled(f)(x)
    assert torch.equal(got[1], torch.tensor([1.5, 1.75, 2.0, 2.25, 2.5]))
    assert torch.equal(got[0], f(x)[0])


def test_histogram_density_and_given_edges():
    def f(x, w, e):
        a = torch.histogram(x, bins=9, weight=w, density=True)
        b = torch.histogram(x, bins=e)
        c = torch.histogram(x, bins=e, weight=w, density=True)
        return b[0], b[1], a[0], a[1], c[0]

    g = _compiled(f)
    e = torch.tensor([-4.0, -1.0, -0.5, 0.0, 0.25, 3.0])
    for seed in range(10):
        x, w = _inputs(seed, 64)
        want, got = f(x, w, e), g(x, w, e)
        _check(want[:2], got[:2], exact_upto=2)
        assert torch.equal(want[3], got[3])
        _check(want[2:3] + want[4:], got[2:3] + got[4:], exact_upto=0)


@pytest.mark.parametrize("d", [1, 2, 3])
def test_histogramdd_bin_counts_ranges_weights_density(d):
    def f(x, w):
        a = torch.histogramdd(x, bins=[3, 5, 2][:d])
        b = torch.histogramdd(x, bins=4, range=[-1.0, 1.0] * d, weight=w)
        c = torch.histogramdd(x, bins=[3] * d, weight=w, density=True)
        return (a[0], *a[1], b[0], *b[1], c[0])

    g = _compiled(f)
    for seed in range(8):
        x, w = _inputs(seed, 50, d)
        x = x.reshape(50, d)
        want, got = f(x, w), g(x, w)
        _check(want, got, exact_upto=len(want) - 1)


def test_histogramdd_given_edges():
    def f(x, e0, e1):
        return torch.histogramdd(x, bins=[e0, e1])[0]

    g = _compiled(f)
    e0 = torch.tensor([-2.0, 0.0, 0.5, 3.0])
    e1 = torch.tensor([-1.0, 1.0])
    for seed in range(6):
        x, _ = _inputs(seed, 40, 2)
        assert torch.equal(f(x, e0, e1), g(x, e0, e1))


class _Linspace(torch.nn.Module):
    def forward(self, x):
        parts = [torch.linspace(s, e, n, dtype=x.dtype) for s, e, n in [(-3.7, 11.2, 17), (0.1, 0.7, 8), (-50.0, 49.0, 39)]]
        return x + torch.cat(parts)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_exported_linspace_is_bitwise_eager(dtype, tmp_path):
    x = torch.zeros(17 + 8 + 39, dtype=dtype)
    _run_raw(_Linspace(), (x,), tmp_path, tol=0.0)
