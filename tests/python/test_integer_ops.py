"""Bit shifts, gcd and lcm through torch.compile equal eager bit for bit at every integer dtype,
including the edges of ATen's CPU kernels: shift amounts that are negative or at least the bit
width (left: 0; right: the sign fill, or 0 for uint8), the extreme values of each dtype, zeros,
negative operands, and the consecutive Fibonacci numbers that take Euclid's loop the longest."""

import pytest
import torch

import tpuc  # noqa: F401 - registers the backend

INTS = [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8]


def compiled(f):
    return torch.compile(f, backend="tpuc", fullgraph=True, options={"strict": True})


def same(f, *args):
    want = f(*args)
    got = compiled(f)(*args)
    assert got.dtype == want.dtype and got.shape == want.shape
    assert torch.equal(got, want), (args, got, want)


def every_pair(values, dtype):
    """(x, y): every value against every value, as two flat tensors."""
    v = torch.tensor(values, dtype=dtype)
    return v.repeat_interleave(len(values)), v.repeat(len(values))


def shift_operands(dtype):
    info = torch.iinfo(dtype)
    xs = [0, 1, 5, 3, info.max, info.min]
    if dtype != torch.uint8:
        xs += [-1, -7]
    amounts = [a for a in range(-3, info.bits + 3) if info.min <= a <= info.max]
    amounts += [info.min, info.max]
    x = torch.tensor(xs, dtype=dtype).repeat_interleave(len(amounts))
    s = torch.tensor(amounts, dtype=dtype).repeat(len(xs))
    return x, s


@pytest.mark.parametrize("dtype", INTS, ids=str)
def test_shifts_follow_the_cpu_kernels(dtype):
    x, s = shift_operands(dtype)
    same(torch.bitwise_left_shift, x, s)
    same(torch.bitwise_right_shift, x, s)
    same(lambda a, b: a >> b, x, s)


def test_shift_overloads_and_promotion():
    x = torch.tensor([[-9, 4, 1 << 40], [7, -1, 0]])
    same(lambda a: a << 3, x)
    same(lambda a: a >> 65, x)
    same(lambda a: torch.bitwise_right_shift(a, 2), x)
    same(lambda a: torch.bitwise_left_shift(5, a.clamp(0, 60)), x)
    # int8 amounts promote with an int32 tensor; a broadcast row of amounts.
    same(torch.bitwise_left_shift, torch.tensor([[1], [-3]], dtype=torch.int32), torch.tensor([0, 31, 32, -1], dtype=torch.int8))


@pytest.mark.parametrize("dtype", INTS, ids=str)
def test_gcd_and_lcm(dtype):
    info = torch.iinfo(dtype)
    # INT_MIN is left out: eager traps on it (its gcd and lcm divide INT_MIN by -1).
    values = [0, 1, 6, 4, 9, 12, 7, info.max, info.max - 1]
    if dtype != torch.uint8:
        values += [-1, -4, -18, info.min + 1]
    x, y = every_pair(values, dtype)
    same(torch.gcd, x, y)
    same(torch.lcm, x, y)


def test_gcd_of_consecutive_fibonacci_numbers():
    """The worst case of Euclid's loop: 91 steps for int64."""
    fib = [1, 1]
    while fib[-1] + fib[-2] < 2**63:
        fib.append(fib[-1] + fib[-2])
    a, b = torch.tensor(fib[1:]), torch.tensor(fib[:-1])
    same(torch.gcd, a, b)
    same(torch.gcd, b, a)
    same(torch.lcm, a, -b)
    small = [f for f in fib if f < 2**31]
    same(torch.gcd, torch.tensor(small[1:], dtype=torch.int32), torch.tensor(small[:-1], dtype=torch.int32))
