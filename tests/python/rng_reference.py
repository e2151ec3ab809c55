"""The compiled generator's numbers, computed here in eager PyTorch as an independent check of
`frontend-fx/src/ops/build/random.rs` (which documents the algorithm): element `k` of stream
`stream` for the seed input `seed` (int64[2])."""

import math

import torch

_M = 0xFFFFFFFF
_GOLDEN, _OFFSET = 0x9E3779B9, 0x7F4A7C15
_BITS = {torch.float32: 24, torch.float64: 32, torch.float16: 11, torch.bfloat16: 8}


def _mulc(x: torch.Tensor, c: int) -> torch.Tensor:
    """x * c mod 2^32 for x < 2^32 held in int64 (split so that no product overflows)."""
    lo, hi = c & 0xFFFF, c >> 16
    return (x * lo + (((x * hi) & 0xFFFF) << 16)) & _M


def _mix(x: torch.Tensor) -> torch.Tensor:
    x = x ^ (x >> 16)
    x = _mulc(x, 0x7FEB352D)
    x = x ^ (x >> 15)
    x = _mulc(x, 0x846CA68B)
    return x ^ (x >> 16)


def uniform(seed: torch.Tensor, stream: int, size, dtype: torch.dtype) -> torch.Tensor:
    """Draw `stream` of `seed`: `size` numbers uniform on [0, 1) in `dtype`."""
    bits = _BITS[dtype]
    s = seed.to(torch.int64) & _M
    a = _mix((s[0] + ((stream * _GOLDEN + _OFFSET) & _M)) & _M)
    b = _mix(s[1] ^ a)
    k = torch.arange(math.prod(size), dtype=torch.int64)
    h = _mix((_mix(k ^ a) + b) & _M)
    u = (h >> (32 - bits)).to(torch.float64 if dtype == torch.float64 else torch.float32) * 2.0 ** -bits
    return u.to(dtype).reshape(size)
