"""Models built on complex numbers and the FFT, equal to eager through torch.compile and through
the CLI (torch.export -> tpuc run): a Llama-style attention block with complex rotary
embeddings (torch.polar / view_as_complex, as Meta's reference code writes them) and an
FNet-style block (token mixing by a 2-D FFT, real part kept)."""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from cli_check import assert_cli_matches_eager


def rope_freqs(dim: int, seq: int, theta: float = 10000.0) -> torch.Tensor:
    inv = 1.0 / theta ** (torch.arange(0, dim, 2).float() / dim)
    angles = torch.outer(torch.arange(seq).float(), inv)
    return torch.polar(torch.ones_like(angles), angles)  # complex64 [seq, dim/2]


def apply_rope(x: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
    xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    out = torch.view_as_real(xc * freqs[None, :, None, :]).flatten(3)
    return out.type_as(x)


class LlamaComplexRopeBlock(nn.Module):
    def __init__(self, d=32, heads=4, seq=8):
        super().__init__()
        self.heads, self.hd = heads, d // heads
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(d, d, bias=False) for _ in range(4))
        self.norm = nn.RMSNorm(d)
        self.w1, self.w3 = nn.Linear(d, 2 * d, bias=False), nn.Linear(d, 2 * d, bias=False)
        self.w2 = nn.Linear(2 * d, d, bias=False)
        self.register_buffer("freqs", rope_freqs(self.hd, seq), persistent=False)

    def forward(self, x):
        b, s, d = x.shape
        h = self.norm(x)
        q = self.wq(h).view(b, s, self.heads, self.hd)
        k = self.wk(h).view(b, s, self.heads, self.hd)
        v = self.wv(h).view(b, s, self.heads, self.hd)
        freqs = self.freqs[:s]
        q, k = apply_rope(q, freqs), apply_rope(k, freqs)
        a = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        x = x + self.wo(a.transpose(1, 2).reshape(b, s, d))
        h = self.norm(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class FNetBlock(nn.Module):
    def __init__(self, d=32):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.ff = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        x = self.ln1(x + torch.fft.fft2(x.to(torch.complex64)).real)
        return self.ln2(x + self.ff(x))


MODELS = {"llama_complex_rope": LlamaComplexRopeBlock, "fnet": FNetBlock}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_torch_compile_matches_eager(name):
    torch.manual_seed(0)
    model = MODELS[name]().eval()
    x = torch.randn(2, 8, 32)
    with torch.no_grad():
        want = model(x)
        got = torch.compile(model, backend="tpuc", options={"strict": True})(x)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_training_gradients_match_eager(name):
    torch.manual_seed(0)
    model = MODELS[name]()
    x = torch.randn(2, 8, 32)
    model(x).square().mean().backward()
    want = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    torch.compile(model, backend="tpuc", options={"strict": True})(x).square().mean().backward()
    for n, p in model.named_parameters():
        torch.testing.assert_close(p.grad, want[n], rtol=1e-4, atol=1e-5, msg=f"{name}: {n}")


@pytest.mark.parametrize("name", sorted(MODELS))
def test_cli_runs_the_export_equal_to_eager(name, tmp_path):
    torch.manual_seed(0)
    assert_cli_matches_eager(MODELS[name](), torch.randn(2, 8, 32), tmp_path)


class _Spectral(nn.Module):
    """The FFT family, hann_window and stft as a raw (not decomposed) export keeps them."""

    def forward(self, x, a):
        s = torch.stft(a, 16, hop_length=4, window=torch.hann_window(16), return_complex=True)
        s2 = torch.stft(a, 16, hop_length=5, win_length=10, window=torch.hann_window(10, periodic=False),
                        normalized=True, return_complex=True)
        return (torch.fft.rfft2(x).abs(), s.abs(), torch.view_as_real(s2), torch.fft.irfft(torch.fft.fft(x), n=10),
                torch.fft.fftn(x, s=(6, 9), norm="ortho").real, torch.fft.ifft2(x, norm="forward").imag,
                torch.fft.irfftn(torch.fft.rfftn(x, dim=(0, 2)), s=(2, 8), dim=(0, 2), norm="forward"),
                torch.fft.rfft(x, n=5, dim=1, norm="ortho").angle(), torch.fft.ifftn(x).real)


def test_raw_export_of_the_fft_family_and_stft_runs_equal_to_eager(tmp_path):
    import subprocess

    import numpy as np
    from cli_check import TPUC

    torch.manual_seed(0)
    x, a = torch.randn(2, 8, 8), torch.randn(2, 64)
    ep = torch.export.export(_Spectral(), (x, a))
    targets = {str(n.target) for n in ep.graph.nodes if n.op == "call_function"}
    assert {"aten.fft_rfft2.default", "aten.stft.default", "aten.hann_window.default"} <= targets, targets
    pt2 = str(tmp_path / "m.pt2")
    torch.export.save(ep, pt2)
    np.save(tmp_path / "x.npy", x.numpy())
    np.save(tmp_path / "a.npy", a.numpy())
    want = []
    for i, o in enumerate(_Spectral()(x, a)):
        np.save(tmp_path / f"want{i}.npy", o.numpy())
        want.append(str(tmp_path / f"want{i}.npy"))
    p = subprocess.run([TPUC, "run", pt2, "--inputs", str(tmp_path / "x.npy"), str(tmp_path / "a.npy"), "--expect",
                        *want, "--rtol", "1e-4", "--atol", "1e-4", "--no-cache"], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr


def test_an_unsupported_op_torch_decomposes_says_how_to_export_it(tmp_path):
    """A raw export's op that tpuc lacks but torch decomposes (PReLU's `prelu`) names the fix;
    the decomposed export of the same model runs."""
    import subprocess

    from cli_check import TPUC

    model, x = nn.Sequential(nn.Linear(8, 8), nn.PReLU()).eval(), torch.randn(4, 8)
    ep = torch.export.export(model, (x,))
    torch.export.save(ep, str(tmp_path / "raw.pt2"))
    p = subprocess.run([TPUC, "import", str(tmp_path / "raw.pt2")], capture_output=True, text=True)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "unsupported op `torch.ops.aten.prelu.default`" in p.stderr, p.stderr
    assert "torch decomposes it: save the program after `ep = ep.run_decompositions()`" in p.stderr, p.stderr
    assert_cli_matches_eager(model, x, tmp_path)


def test_the_list_of_ops_torch_decomposes_is_current():
    import importlib.util
    import os

    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))
    spec = importlib.util.spec_from_file_location("make_decomposable",
                                                  os.path.join(root, "frontend-fx/tests/data/make_decomposable.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    have = open(os.path.join(root, "frontend-fx/src/decomposable.txt")).read().split()
    assert have == mod.names(), "rerun frontend-fx/tests/data/make_decomposable.py > frontend-fx/src/decomposable.txt"
