"""16-bit floats compute as eager's CPU kernels do: load, compute and accumulate in float32,
round once (docs/precision.md). Each case compares with eager on real inputs at a tolerance of
one rounding step, where computing in bf16 (rounding every partial result) misses it; and the
ops the bf16 OpInfo run brought in (segment_reduce, as_strided_scatter, the chunked
linear_cross_entropy), forward and backward."""

import pytest
import torch
import torch.nn.functional as F

import tpuc  # noqa: F401 - registers the backend

STEP = {torch.bfloat16: dict(atol=1e-2, rtol=1.6e-2), torch.float16: dict(atol=1e-3, rtol=1e-3)}


def compiled(f):
    return torch.compile(f, backend="tpuc", fullgraph=True, options={"strict": True})


def close(got, want, dtype):
    assert got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got, want, **STEP[dtype], equal_nan=True)


def param(values, dtype, like):
    """A parameter rounded to the run's 16-bit dtype, then in `like`'s dtype (widened exactly
    for the float64 reference)."""
    return values.to(dtype).to(like.dtype)


CASES = {
    # 9- and 27-element windows: a bf16 running sum rounds at every step.
    "avg_pool2d": lambda x, dt: F.avg_pool2d(x, 3, stride=2, padding=1),
    "adaptive_avg_pool3d": lambda x, dt: F.adaptive_avg_pool3d(x.reshape(2, 3, 4, 6, 5), (3, 2, 4)),
    # The bias is added to the f32 accumulator, not to a rounded convolution.
    "conv2d_bias": lambda x, dt: F.conv2d(x, param(torch.linspace(-1, 1, 108).reshape(4, 3, 3, 3), dt, x),
                                          param(torch.tensor([0.3, -7.0, 100.0, 0.01]), dt, x)),
    "conv_transpose2d_bias": lambda x, dt: F.conv_transpose2d(x, param(torch.linspace(-1, 1, 54).reshape(3, 2, 3, 3), dt, x),
                                                              param(torch.tensor([0.5, -3.0]), dt, x), stride=2),
    # 32 terms of a shifted series for negative arguments.
    "polygamma_2": lambda x, dt: torch.polygamma(2, x * 4),
    # _trilinear: 100 products per output; rounding each in f16 drifted two steps.
    "bilinear": lambda x, dt: F.bilinear(x, x.flip(-1), param(torch.linspace(-1, 1, 500).reshape(5, 10, 10), dt, x),
                                         param(torch.tensor([0.5, -3.0, 1.0, 0.0, 2.0]), dt, x)),
}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "f16"])
@pytest.mark.parametrize("name", list(CASES))
def test_accumulates_in_f32_and_rounds_once(name, dtype):
    """Within one rounding step of the exact result (float64, rounded once), and of eager's
    where eager rounds once too (its float16 transposed convolution and bilinear round the
    partial products)."""
    torch.manual_seed(0)
    x = torch.randn(2, 3, 12, 10).to(dtype)
    f = CASES[name]
    got = compiled(f)(x, dtype)
    close(got, f(x.double(), dtype).to(dtype), dtype)
    if not (name in ("conv_transpose2d_bias", "bilinear") and dtype == torch.float16):
        close(got, f(x, dtype), dtype)


def test_flash_attention_for_cpu_in_f32():
    torch.manual_seed(1)
    q, k, v = (torch.randn(2, 4, 16, 8).to(torch.bfloat16) * 3 for _ in range(3))

    def f(q, k, v):
        return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, True)[0]

    close(compiled(f)(q, k, v), f(q, k, v), torch.bfloat16)


def test_batch_norm_training_in_bf16_updates_its_running_stats():
    torch.manual_seed(2)
    bn = torch.nn.BatchNorm2d(5).to(torch.bfloat16)
    ref = torch.nn.BatchNorm2d(5).to(torch.bfloat16)
    ref.load_state_dict(bn.state_dict())
    x = torch.randn(4, 5, 6, 6).to(torch.bfloat16) * 2 + 1
    got = compiled(bn)(x)
    close(got, ref(x), torch.bfloat16)
    close(bn.running_mean, ref.running_mean, torch.bfloat16)
    close(bn.running_var, ref.running_var, torch.bfloat16)


# ----------------------------------------------------------------- segment_reduce


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
def test_segment_reduce_every_opinfo_sample(dtype):
    """All of the OpInfo's samples (lengths and offsets, every reduction, with and without
    `initial`, empty segments, 2-d data along either axis), not only the suite's first two."""
    from torch.testing._internal.common_methods_invocations import op_db

    ops = [o for o in op_db if o.name == "_segment_reduce"]
    assert {o.variant_test_name for o in ops} == {"lengths", "offsets"}
    n = 0
    for op in ops:
        for s in op.sample_inputs("cpu", dtype):
            # Eager's CPU kernel accumulates 16-bit floats in their own dtype: the reference is
            # the float64 result, rounded once.
            want = op.op(s.input.double(), *s.args, **s.kwargs).to(dtype)
            torch._dynamo.reset()
            got = compiled(lambda x, kw: op.op(x, *s.args, **kw))(s.input, s.kwargs)
            tol = dict(atol=1e-5, rtol=1e-5) if dtype == torch.float32 else STEP[dtype]
            torch.testing.assert_close(got, want, equal_nan=True, **tol, msg=lambda m: f"{op.variant_test_name} {s}: {m}")
            n += 1
    assert n > 100


def test_as_strided_scatter():
    x = torch.arange(24.0).reshape(4, 6)
    src = torch.randn(3, 2)

    def f(x, src):
        return torch.as_strided_scatter(x, src, (3, 2), (6, 2), 1)

    torch.testing.assert_close(compiled(f)(x, src), f(x, src), atol=0, rtol=0)


# ----------------------------------------------------------------- linear_cross_entropy


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_chunked_linear_cross_entropy(reduction):
    """The chunked custom op compiles as its own Python implementation where no gradient is
    computed (equal to eager); a training step keeps the op, run eagerly between compiled
    parts, with eager's gradients (its backward formula needs the op itself)."""
    from torch.nn.modules.linear_cross_entropy_options import LinearCrossEntropyOptions

    opts = LinearCrossEntropyOptions(batch_chunk_size=3, allow_retain_graph=True)
    torch.manual_seed(3)
    x0, w0 = torch.randn(10, 16), torch.randn(7, 16)
    target = torch.randint(0, 7, (10,))

    def f(x, w, t):
        return F.linear_cross_entropy(torch.tanh(x), w, t, reduction=reduction, options=opts) * 2

    with torch.no_grad():
        torch.testing.assert_close(compiled(f)(x0, w0, target), f(x0, w0, target), atol=1e-5, rtol=1e-5)

    def step(fn):
        x, w = x0.clone().requires_grad_(), w0.clone().requires_grad_()
        loss = fn(x, w, target)
        (loss.sum() if reduction == "none" else loss).backward()
        return loss.detach(), x.grad, w.grad

    torch._dynamo.reset()
    for got, want in zip(step(torch.compile(f, backend="tpuc")), step(f)):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
