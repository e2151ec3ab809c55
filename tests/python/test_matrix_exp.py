"""`torch.linalg.matrix_exp` through torch.compile: scaling and squaring per matrix of a batch,
against eager and the float64 result. float32 computes in float64, so it is within rounding of
the exact exponential where eager (scaling and squaring in float32) may be a few digits off;
16-bit floats compute in float32 and round once."""

import pytest
import torch

import tpuc  # noqa: F401 - registers the backend


def compiled(f):
    return torch.compile(f, backend="tpuc", fullgraph=True, options={"strict": True})


def matrices():
    torch.manual_seed(0)
    return {
        "small": torch.randn(4, 4) * 0.1,
        "batch_of_norms": torch.randn(3, 5, 5) * torch.tensor([0.01, 1.0, 6.0]).reshape(3, 1, 1),
        "zero": torch.zeros(2, 3, 3),
        "diagonal": torch.diag(torch.tensor([-2.5, 0.0, 1.0, 3.0])),
        "nilpotent_large": torch.triu(torch.randn(5, 5) * 1e6, diagonal=1),
        "rotation": torch.tensor([[0.0, 30.0], [-30.0, 0.0]]),
        "one_by_one": torch.tensor([[[2.0]], [[-40.0]]]),
        "batch_dims": torch.randn(2, 2, 3, 3),
    }


@pytest.mark.parametrize("name", list(matrices()))
def test_float32(name):
    a = matrices()[name]
    got = compiled(torch.linalg.matrix_exp)(a)
    want = torch.linalg.matrix_exp(a)
    exact = torch.linalg.matrix_exp(a.double())
    assert got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got, want, atol=1e-3, rtol=1e-5)
    # Rounding of the float64 result, up to a few units in the last place.
    torch.testing.assert_close(got.double(), exact, atol=1e-30, rtol=4e-7)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "f16"])
def test_sixteen_bit_rounds_once(dtype):
    a = (torch.randn(3, 4, 4) * 2).to(dtype)
    got = compiled(torch.linalg.matrix_exp)(a)
    assert got.dtype == dtype
    exact = torch.linalg.matrix_exp(a.double()).to(dtype)
    step = dict(atol=1e-2, rtol=1.6e-2) if dtype == torch.bfloat16 else dict(atol=1e-3, rtol=1e-3)
    torch.testing.assert_close(got, exact, **step)


def test_complex_input_is_refused_naming_the_op():
    a = torch.randn(2, 2, dtype=torch.complex64)
    with pytest.raises(Exception, match="linalg_matrix_exp.default.*float matrices"):
        compiled(torch.linalg.matrix_exp)(a)
