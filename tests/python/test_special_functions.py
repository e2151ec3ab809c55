"""Special functions against a high-precision reference (mpmath, which torch's sympy brings)
and against eager: Ai(x) over the series, both asymptotic ranges, the seams between them and
the special values."""

import mpmath
import pytest
import torch

import tpuc  # noqa: F401  (registers the backend)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_airy_ai_is_accurate_across_its_ranges(dtype):
    x = torch.cat([
        torch.linspace(-40, 40, 2001),
        torch.linspace(-7.2, -6.8, 101),  # the negative seam
        torch.linspace(5.3, 5.7, 101),  # the positive seam
        torch.tensor([0.0, 1e-20, -1e-20, 103.0, 103.9, 200.0]),
    ]).to(dtype)
    f = torch.special.airy_ai
    torch._dynamo.reset()
    got = torch.compile(f, backend="tpuc", fullgraph=True, dynamic=False)(x)
    want = f(x)
    exact = torch.tensor([float(mpmath.airyai(float(v))) for v in x.double()], dtype=torch.float64)
    # Error relative to the envelope: |Ai| beyond 0, the oscillation's amplitude below.
    envelope = torch.maximum(exact.abs(), torch.where(x < 0, 1 / (torch.pi ** 0.5 * x.double().abs().clamp(min=1) ** 0.25), 0))
    # Near the dtype's smallest normal (XLA's CPU backend flushes subnormals), absolute error.
    floor = torch.finfo(dtype).tiny / torch.finfo(dtype).eps
    err = ((got.double() - exact).abs() / envelope.clamp(min=floor)).max().item()
    assert err < (2e-7 if dtype == torch.float32 else 5e-8), err
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)  # eager is the less accurate one


def test_airy_ai_special_values_follow_aten():
    x = torch.tensor([float("inf"), float("-inf"), float("nan"), 104.0, 1e30])
    f = torch.special.airy_ai
    torch._dynamo.reset()
    got = torch.compile(f, backend="tpuc", fullgraph=True, dynamic=False)(x)
    torch.testing.assert_close(got, f(x), equal_nan=True, rtol=0, atol=0)
