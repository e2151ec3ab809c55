"""`grid_sampler_3d` (F.grid_sample on volumes) through torch.compile against eager: trilinear
and nearest sampling, zeros, border and reflection padding, both `align_corners`, with grid
points inside, on the edges, far outside and not finite. float32 follows the CPU kernel's
arithmetic (to a few units in the last place); 16-bit floats compute in float32 and round once,
so they are compared with the float64 result, rounded (eager rounds every step of its
coordinate arithmetic, which can move a nearest sample to the next voxel)."""

import itertools

import pytest
import torch

import tpuc  # noqa: F401 - registers the backend

MODES = list(itertools.product([0, 1], [0, 1, 2], [False, True]))
STEP = {torch.bfloat16: dict(atol=1e-2, rtol=1.6e-2), torch.float16: dict(atol=1e-3, rtol=1e-3)}


def sample(x, grid, mode, padding, align_corners):
    return torch.ops.aten.grid_sampler_3d(x, grid, mode, padding, align_corners)


def inputs(dtype):
    torch.manual_seed(0)
    x = torch.randn(2, 3, 4, 5, 6)
    grid = torch.rand(2, 3, 4, 5, 3) * 2.8 - 1.4
    grid[0, 0, 0, :] = torch.tensor([[-1.0, -1.0, -1.0], [1.0, 1.0, 1.0], [0.0, 0.0, 0.0], [1.0, -1.0, 0.5], [-1.1, 0.2, 1.05]])
    grid[1, 0, 0, :] = torch.tensor([[9.0, -7.5, 30.0], [float("nan"), 0.0, 0.0], [0.0, float("inf"), 0.0],
                                     [-float("inf"), 0.3, 0.3], [3.0, 3.0, -3.0]])
    return x.to(dtype), grid.to(dtype)


@pytest.mark.parametrize("mode,padding,align_corners", MODES)
def test_float32_equals_eager(mode, padding, align_corners):
    x, grid = inputs(torch.float32)
    f = lambda a, g: sample(a, g, mode, padding, align_corners)  # noqa: E731
    want = f(x, grid)
    got = torch.compile(f, backend="tpuc", fullgraph=True, options={"strict": True})(x, grid)
    assert got.dtype == want.dtype and got.shape == want.shape == (2, 3, 3, 4, 5)
    torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-6, equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "f16"])
@pytest.mark.parametrize("mode,padding,align_corners", MODES[::3])
def test_sixteen_bit_rounds_once(dtype, mode, padding, align_corners):
    x, grid = inputs(dtype)
    f = lambda a, g: sample(a, g, mode, padding, align_corners)  # noqa: E731
    got = torch.compile(f, backend="tpuc", fullgraph=True, options={"strict": True})(x, grid)
    assert got.dtype == dtype
    torch.testing.assert_close(got, f(x.double(), grid.double()).to(dtype), **STEP[dtype], equal_nan=True)


def test_bicubic_is_refused_naming_the_op():
    x, grid = inputs(torch.float32)
    f = lambda a, g: sample(a, g, 2, 0, False)  # noqa: E731
    with pytest.raises(Exception, match="grid_sampler_3d"):
        torch.compile(f, backend="tpuc", fullgraph=True, options={"strict": True})(x, grid)
