"""Programs saved as `torch.export.export` gives them, without `run_decompositions()`, run in the
CLI equal to eager: ops torch would decompose reach tpuc whole (`aten.diff` from transformers'
masking code, among others)."""

import subprocess

import numpy as np
import pytest
import torch
import transformers
from cli_check import TPUC


def _run_raw(model, args, tmp_path, tol=1e-5):
    model.eval()
    with torch.no_grad():
        want = model(*args)
        if not isinstance(want, torch.Tensor):
            want = want.logits
        ep = torch.export.export(model, args)
    pt2 = str(tmp_path / "raw.pt2")
    torch.export.save(ep, pt2)
    files = []
    for i, a in enumerate(args):
        np.save(tmp_path / f"in{i}.npy", a.numpy())
        files.append(str(tmp_path / f"in{i}.npy"))
    np.save(tmp_path / "want.npy", want.numpy())
    p = subprocess.run([TPUC, "run", pt2, "--inputs", *files, "--expect", str(tmp_path / "want.npy"),
                        "--rtol", str(tol), "--atol", str(tol), "--no-cache"], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout


class _Diff(torch.nn.Module):
    def forward(self, x):
        a = torch.diff(x, dim=-1)
        b = torch.diff(x, n=2, dim=0, prepend=x[:1] * 2, append=x[-1:] - 1)
        c = torch.diff(x > 0, dim=1).to(x.dtype)
        d = torch.diff(x, n=9, dim=1)  # n above the size: empty, as in torch
        return torch.cat([a.flatten(), b.flatten(), c.flatten(), d.flatten()])


def test_diff_with_prepend_append_bool_and_large_n(tmp_path):
    torch.manual_seed(0)
    _run_raw(_Diff(), (torch.randn(4, 5),), tmp_path)


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_a_hugging_face_decoder_exported_as_it_comes(arch, tmp_path):
    torch.manual_seed(0)
    if arch == "gpt2":
        cfg = transformers.GPT2Config(vocab_size=128, n_positions=32, n_embd=32, n_layer=2, n_head=4, use_cache=False)
        model = transformers.GPT2LMHeadModel(cfg)
    else:
        cfg = transformers.LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                       num_attention_heads=4, num_key_value_heads=2, use_cache=False)
        model = transformers.LlamaForCausalLM(cfg)
    ids = torch.randint(0, 128, (2, 16))
    _run_raw(model, (ids,), tmp_path, tol=1e-4)
