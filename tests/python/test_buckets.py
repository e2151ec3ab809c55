"""Bucketed dynamic shapes against eager PyTorch: models exported with a dynamic dim run through
`tpuc run` at sizes crossing several bucket boundaries, with the padding of the inputs filled
with NaN, infinities or 1e30, and every output must equal eager's at the real size.

Each test exports one model with `torch.export` (a `Dim` with a range), runs `tpuc run --json`
(the debug binary lit uses, or TPUC_BIN) with a per-test executable cache in /dev/shm so each
bucket compiles once, and compares with `--expect` (integer outputs bit-identical)."""

import copy
import json
import os
import subprocess
import sys

import make_fixtures as mf
import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.export import Dim

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TPUC = os.environ.get("TPUC_BIN") or os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")), "debug", "tpuc")

# Sizes around the auto policy's bucket edges (1, 2, 4, ..., 64, 128, 256, 384).
SIZES = [1, 2, 3, 5, 8, 9, 31, 33, 63, 64, 65, 100, 127, 128, 129, 200, 255, 256, 257, 300]
FILLS = ["nan", "inf", "-inf", "1e30"]


class MeanPoolMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 16)
        self.out = nn.Linear(16, 4)

    def forward(self, x):  # x [b, s, 8]
        h = torch.relu(self.fc(x))
        return self.out(h.mean(dim=1)), h.amax(dim=1)


class LastToken(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        h = torch.tanh(self.fc(x))
        return h[:, -1], torch.softmax(h, dim=1), torch.log_softmax(h, dim=1)


class ConvOverBatch(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(4, 6, kernel_size=3, padding=1)

    def forward(self, x):  # x [s, 4, 10]
        return torch.relu(self.conv(x)).sum(dim=0)


class ConvOverTime(nn.Module):
    """Convolutions along the dynamic time dim: same-length, strided, dilated and transposed."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv1d(4, 8, 3, padding=1)
        self.c2 = nn.Conv1d(8, 8, 5, stride=2, padding=2)
        self.c3 = nn.Conv1d(8, 6, 3, dilation=2, padding=2)
        self.up = nn.ConvTranspose1d(8, 4, 4, stride=2, padding=1)

    def forward(self, x):  # x [b, 4, t]
        h = torch.relu(self.c1(x))
        s = self.c2(h)  # length (t - 1) // 2 + 1
        d = self.c3(h)  # length t
        u = self.up(s)  # length 2 * ((t - 1) // 2 + 1)
        return s, d, u, d.mean(-1), s.amax(-1)


class GroupNormOverTime(nn.Module):
    """wav2vec2's feature-extractor head: a convolution, then group norm over time (one group
    per channel) and layer norm over channels."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(1, 8, 5, stride=2)
        self.gn = nn.GroupNorm(8, 8)
        self.gn2 = nn.GroupNorm(2, 8)
        self.ln = nn.LayerNorm(8)

    def forward(self, x):  # x [b, 1, t]
        h = F.gelu(self.gn(self.conv(x)))
        return self.ln(h.transpose(1, 2)), self.gn2(h)


class RMSNormCumsum(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(8))

    def forward(self, x):
        r = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.w
        return r, torch.cumsum(r, dim=1), torch.cummax(r, dim=1).values


class ArgmaxOverSeq(nn.Module):
    def forward(self, x):
        return x.argmax(dim=1), x.argmin(dim=1), x.max(dim=1).values, (x > 0).any(dim=1), x.sum(dim=1)


class SortTopk(nn.Module):
    def forward(self, x):
        top = torch.topk(x[..., :2], 1, dim=1)  # ties (column 2) pick any index in torch
        asc = torch.sort(x, dim=1, stable=True)
        desc = torch.sort(x, dim=1, descending=True, stable=True)
        return top.values, top.indices, asc.values, asc.indices, desc.values, desc.indices


class BatchNormTraining(nn.Module):
    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm1d(8)

    def forward(self, x):  # x [s, 8]: statistics over the dynamic batch
        return self.bn(x)


class SelfAttention(nn.Module):
    """Attention over the dynamic length without is_causal: unmasked, with an additive float
    mask input, or with a boolean key mask input; then a mean over the length, which reads
    the padded query rows only through its mask."""

    def __init__(self, mask=None):
        super().__init__()
        self.qkv = nn.Linear(16, 48)
        self.mask = mask

    def forward(self, x, m=None):  # x [b, s, 16]; m [b, 1, s, s] float or [b, s] bool
        b, s, _ = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, 2, 8).permute(2, 0, 3, 1, 4)
        if self.mask == "bool":
            m = m[:, None, None, :]
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=m)
        return o, o.mean(dim=2)


class LatentQueries(nn.Module):
    """Static queries (a parameter) over keys of the dynamic length: nothing causal can help."""

    def __init__(self):
        super().__init__()
        self.q = nn.Parameter(torch.randn(1, 2, 4, 8))
        self.kv = nn.Linear(16, 32)

    def forward(self, x):
        b, s, _ = x.shape
        k, v = self.kv(x).view(b, s, 2, 2, 8).permute(2, 0, 3, 1, 4)
        return F.scaled_dot_product_attention(self.q.expand(b, -1, -1, -1), k, v)


def tiny_llama():
    import transformers

    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                   intermediate_size=64, vocab_size=128, max_position_embeddings=256)

    class Logits(nn.Module):
        def __init__(self):
            super().__init__()
            self.m = transformers.LlamaForCausalLM(cfg)

        def forward(self, input_ids, attention_mask):
            return self.m(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits

    return Logits().eval()


class EncoderWithKeyPadding(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)

    def forward(self, x, pad):  # pad [b, s]: True = ignore that key
        return self.layer(x, src_key_padding_mask=pad)


def gpt2_block():
    torch.manual_seed(0)
    return mf.GPT2Block(32, 4, 32)


def _run(tmp_path, model, example, dynamic, sizes, make_inputs, fills=("nan",), rtol=1e-4, atol=1e-5, training=False,
         decompose=True, extra=()):
    torch.manual_seed(0)
    model = model.train(training)
    ep = torch.export.export(model, example, dynamic_shapes=dynamic)
    pt2 = str(tmp_path / "m.pt2")
    torch.export.save(ep.run_decompositions() if decompose else ep, pt2)
    env = dict(os.environ, TPUC_CACHE_TIER2_ROOT=str(tmp_path / "shm"))
    buckets = set()
    for n in sizes:
        inputs = make_inputs(n)
        fresh = copy.deepcopy(model)
        with torch.no_grad():
            want = fresh(*inputs)
        want = want if isinstance(want, tuple) else (want,)
        if training:
            # A training-mode export returns the updated buffers first.
            want = tuple(b for _, b in fresh.named_buffers()) + want
        ins, exp = [], []
        for i, t in enumerate(inputs):
            p = str(tmp_path / f"in{i}.npy")
            np.save(p, t.numpy())
            ins.append(p)
        for i, t in enumerate(want):
            p = str(tmp_path / f"want{i}.npy")
            np.save(p, t.detach().numpy())
            exp.append(p)
        for fill in fills:
            cmd = [TPUC, "run", pt2, "--inputs", *ins, "--expect", *exp, "--json", f"--pad-fill={fill}",
                   "--cache-tier2", "buckets", "--rtol", str(rtol), "--atol", str(atol), *extra]
            p = subprocess.run(cmd, capture_output=True, text=True, env=env)
            assert p.returncode == 0, f"n={n} fill={fill}:\n{p.stdout}\n{p.stderr}"
            report = json.loads(p.stdout.strip().splitlines()[-1])
            assert report["ok"], report
            assert report["outputs"] == [list(t.shape) for t in want], report
            buckets.add(json.dumps(report["bucket"], sort_keys=True))
    return buckets


def seq_input(b, d):
    return lambda n: (torch.randn(b, n, d),)


def test_mean_pool_mlp_every_bucket_edge(tmp_path):
    s = Dim("s", min=1, max=300)
    buckets = _run(tmp_path, MeanPoolMLP(), (torch.randn(2, 5, 8),), ({1: s},), SIZES, seq_input(2, 8), fills=FILLS)
    # 1, 2, 4, ..., 128, 256, 300: ten buckets serve the twenty sizes.
    assert len(buckets) == 10, buckets


def test_mean_pool_mlp_all_sizes_up_to_70(tmp_path):
    s = Dim("s", min=1, max=70)
    _run(tmp_path, MeanPoolMLP(), (torch.randn(2, 5, 8),), ({1: s},), range(1, 71), seq_input(2, 8))


def test_last_token_softmax(tmp_path):
    s = Dim("s", min=1, max=300)
    _run(tmp_path, LastToken(), (torch.randn(2, 5, 8),), ({1: s},), SIZES, seq_input(2, 8), fills=FILLS)


def test_causal_gpt2_block(tmp_path):
    s = Dim("s", min=2, max=300)
    _run(tmp_path, gpt2_block(), (torch.randn(2, 5, 32),), ({1: s},), [n for n in SIZES if n >= 2], seq_input(2, 32), rtol=1e-4, atol=1e-4)


def test_convolution_over_a_dynamic_batch(tmp_path):
    s = Dim("s", min=1, max=300)
    _run(tmp_path, ConvOverBatch(), (torch.randn(3, 4, 10),), ({0: s},), SIZES, lambda n: (torch.randn(n, 4, 10),), fills=FILLS, atol=1e-4)


def test_convolutions_over_a_dynamic_time_dim(tmp_path):
    sizes = [3, 4, 5, 9, 16, 17, 31, 33, 64, 65, 129, 300]
    buckets = _run(tmp_path, ConvOverTime(), (torch.randn(2, 4, 37),), ({2: Dim("t", min=3, max=300)},), sizes,
                   lambda n: (torch.randn(2, 4, n),), fills=FILLS)
    # Bucketed (4, 8, ..., 384), not compiled per length.
    assert len(buckets) == 8, buckets


def test_group_norm_over_a_dynamic_time_dim(tmp_path):
    sizes = [9, 10, 16, 33, 64, 65, 129, 300]
    _run(tmp_path, GroupNormOverTime(), (torch.randn(2, 1, 37),), ({2: Dim("t", min=9, max=300)},), sizes,
         lambda n: (torch.randn(2, 1, n),), fills=FILLS, rtol=1e-4, atol=1e-4)


def test_causal_gpt2_block_export_form_attention_op(tmp_path):
    """As exported (no decompositions): SDPA is one attention op, causal over padded keys."""
    s = Dim("s", min=2, max=300)
    _run(tmp_path, gpt2_block(), (torch.randn(2, 5, 32),), ({1: s},), [2, 3, 9, 33, 129, 300], seq_input(2, 32),
         fills=FILLS, atol=1e-4, decompose=False)


def test_rms_norm_and_cumulative_ops(tmp_path):
    s = Dim("s", min=1, max=300)
    _run(tmp_path, RMSNormCumsum(), (torch.randn(2, 5, 8),), ({1: s},), SIZES, seq_input(2, 8), atol=1e-4)


def test_argmax_argmin_any_over_the_dynamic_dim(tmp_path):
    s = Dim("s", min=1, max=300)
    _run(tmp_path, ArgmaxOverSeq(), (torch.randn(2, 5, 8),), ({1: s},), SIZES, seq_input(2, 8), fills=FILLS)


def test_sort_and_topk_along_the_dynamic_dim(tmp_path):
    s = Dim("s", min=1, max=300)

    def inputs(n):
        x = torch.randn(2, n, 4)
        x[0, n // 2, 1] = float("nan")  # NaN sorts last ascending, first descending
        x[1, :, 2] = 1.0  # ties keep their order (stable)
        return (x,)

    _run(tmp_path, SortTopk(), inputs(5), ({1: s},), SIZES, inputs, fills=FILLS)


def test_batch_norm_training_statistics_over_a_dynamic_batch(tmp_path):
    b = Dim("b", min=2, max=300)
    _run(tmp_path, BatchNormTraining(), (torch.randn(6, 8),), ({0: b},), [n for n in SIZES if n >= 2], lambda n: (torch.randn(n, 8),), training=True, atol=1e-4)


def test_encoder_with_key_padding_mask(tmp_path):
    s = Dim("s", min=2, max=200)

    def inputs(n):
        pad = torch.zeros(2, n, dtype=torch.bool)
        pad[1, n // 2 + 1:] = True
        return torch.randn(2, n, 16), pad

    _run(tmp_path, EncoderWithKeyPadding().eval(), inputs(6), ({1: s}, {1: s}), [2, 3, 9, 33, 65, 129, 200], inputs, atol=1e-4)


@pytest.mark.parametrize("decompose", [False, True], ids=["attention-op", "decomposed"])
def test_dynamic_llama_by_bucket_and_with_buckets_off(tmp_path, decompose):
    """A Hugging Face Llama exported with a dynamic length and an attention mask: its SDPA has
    an explicit mask and no is_causal, so padded keys are masked out with the mask. Equal to
    eager at five lengths in five buckets, with the padding of the ids and the mask holding 0
    or 1 (a mask that would attend to padded keys); then with --buckets off, one compile per
    shape and no bucket."""
    seq = Dim("seq", min=2, max=256)
    lengths = [3, 17, 64, 100, 256]

    def inputs(n):
        return torch.randint(0, 128, (1, n)), torch.ones(1, n, dtype=torch.long)

    buckets = _run(tmp_path, tiny_llama(), inputs(8), ({1: seq}, {1: seq}), lengths, inputs, fills=("nan", "1"),
                   atol=1e-4, decompose=decompose)
    assert sorted(list(json.loads(b).values())[0] for b in buckets) == [4, 32, 64, 128, 256], buckets
    buckets = _run(tmp_path, tiny_llama(), inputs(8), ({1: seq}, {1: seq}), lengths, inputs, atol=1e-4,
                   decompose=decompose, extra=("--buckets", "off"))
    assert buckets == {"null"}, buckets


@pytest.mark.parametrize("decompose", [False, True], ids=["attention-op", "decomposed"])
@pytest.mark.parametrize("mask", [None, "float", "bool"])
def test_attention_over_padded_keys_is_exact_under_any_padding(tmp_path, mask, decompose):
    """Attention without is_causal over a padded length: padded keys and values hold NaN,
    infinities or 1e30 (and a mask input's padding whatever the fill makes of it, attend
    included), and every valid output equals eager's; padded query rows stay in the padding."""
    s = Dim("s", min=2, max=200)

    def inputs(n):
        x = torch.randn(2, n, 16)
        if mask == "float":
            m = torch.randn(2, 1, n, n)
            m[1, 0, :, n // 2 + 1:] = float("-inf")  # every row keeps its first keys
            return x, m
        if mask == "bool":
            m = torch.ones(2, n, dtype=torch.bool)
            m[1, n // 2 + 1:] = False
            return x, m
        return (x,)

    dynamic = ({1: s},) if mask is None else ({1: s}, {2: s, 3: s} if mask == "float" else {1: s})
    _run(tmp_path, SelfAttention(mask), inputs(6), dynamic, [2, 3, 9, 33, 65, 129, 200], inputs, fills=FILLS, atol=1e-4,
         decompose=decompose)


@pytest.mark.parametrize("decompose", [False, True], ids=["attention-op", "decomposed"])
def test_static_queries_over_padded_keys(tmp_path, decompose):
    s = Dim("s", min=1, max=200)
    _run(tmp_path, LatentQueries(), (torch.randn(2, 6, 16),), ({1: s},), [1, 2, 9, 33, 129, 200], seq_input(2, 16),
         fills=FILLS, atol=1e-4, decompose=decompose)


def test_plan_buckets_refuses_a_program_it_cannot_bucket(tmp_path):
    """Reversing a flattened [2, s] (a product of padded dims, not a prefix) cannot be
    bucketed: plan-buckets says so, naming the node, instead of printing a plan that compile
    would then fail on; --buckets off runs it."""

    class FlipFlat(nn.Module):
        def forward(self, x):
            return torch.flip(x.reshape(-1), [0])

    ep = torch.export.export(FlipFlat(), (torch.randn(2, 8),), dynamic_shapes=({1: Dim("s", min=2, max=64)},))
    pt2 = str(tmp_path / "m.pt2")
    torch.export.save(ep, pt2)
    p = subprocess.run([TPUC, "plan-buckets", pt2], capture_output=True, text=True)
    assert p.returncode == 1 and p.stdout == "", p.stdout + p.stderr
    assert "cannot be bucketed" in p.stderr and "`reverse` at node `flip`" in p.stderr, p.stderr
    assert "--buckets off" in p.stderr, p.stderr
    x = torch.randn(2, 13)
    np.save(tmp_path / "x.npy", x.numpy())
    np.save(tmp_path / "want.npy", torch.flip(x.reshape(-1), [0]).numpy())
    p = subprocess.run([TPUC, "run", pt2, "--inputs", str(tmp_path / "x.npy"), "--expect", str(tmp_path / "want.npy"),
                        "--buckets", "off", "--no-cache", "--atol", "1e-5"], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr


def test_two_symbols_batch_and_sequence(tmp_path):
    b, s = Dim("b", min=1, max=64), Dim("s", min=1, max=300)
    buckets = _run(
        tmp_path, MeanPoolMLP(), (torch.randn(3, 5, 8),), ({0: b, 1: s},), [1, 3, 9, 100, 257],
        lambda n: (torch.randn(max(1, n % 64), n, 8),),
    )
    assert all(len(json.loads(k)) == 2 for k in buckets), buckets


def test_size_outside_the_range_is_a_clear_error(tmp_path):
    model = MeanPoolMLP()
    ep = torch.export.export(model, (torch.randn(2, 5, 8),), dynamic_shapes=({1: Dim("s", min=1, max=64)},))
    pt2 = str(tmp_path / "m.pt2")
    torch.export.save(ep.run_decompositions(), pt2)
    x = str(tmp_path / "x.npy")
    np.save(x, torch.randn(2, 65, 8).numpy())
    p = subprocess.run([TPUC, "run", pt2, "--inputs", x, "--no-cache"], capture_output=True, text=True)
    assert p.returncode == 1, p.stderr
    assert "size 65 of symbol `s" in p.stderr and "outside its range [1, 64]" in p.stderr, p.stderr


def test_dim_names_are_kept_by_tpuc_save(tmp_path):
    """`tpuc.save` records the `Dim` names torch.export.save drops: the IR, bucket plans and
    range errors name `seq` and `max_len` (a name with an `x`, parenthesized in types)."""
    import tpuc

    class MatMul(nn.Module):
        def forward(self, x, y):
            return torch.sin(x) @ y

    seq, max_len = Dim("seq", min=2, max=128), Dim("max_len", min=1, max=64)
    ep = torch.export.export(MatMul(), (torch.randn(3, 8), torch.randn(8, 5)),
                             dynamic_shapes=({1: seq}, {0: seq, 1: max_len}))
    plain, named = str(tmp_path / "plain.pt2"), str(tmp_path / "named.pt2")
    torch.export.save(ep, plain)
    tpuc.save(ep.run_decompositions(), named)
    ir = subprocess.run([TPUC, "import", plain], capture_output=True, text=True, check=True).stdout
    assert "@seq" not in ir, ir
    ir = subprocess.run([TPUC, "import", named], capture_output=True, text=True, check=True).stdout
    assert "symbol @seq : [2, 128]" in ir and "symbol @max_len : [1, 64]" in ir, ir
    assert "tensor<seqx(max_len)xf32>" in ir, ir
    plan = subprocess.run([TPUC, "plan-buckets", named], capture_output=True, text=True, check=True).stdout
    assert [line.split()[0] for line in plan.splitlines()[1:3]] == ["seq", "max_len"], plan
    # The printed IR parses back and compiles.
    ir_file = tmp_path / "m.tpuc"
    ir_file.write_text(ir)
    subprocess.run([TPUC, "opt", str(ir_file)], capture_output=True, text=True, check=True)
    x, y = str(tmp_path / "x.npy"), str(tmp_path / "y.npy")
    np.save(x, torch.randn(3, 200).numpy())
    np.save(y, torch.randn(200, 5).numpy())
    p = subprocess.run([TPUC, "run", named, "--inputs", x, y, "--no-cache"], capture_output=True, text=True)
    assert p.returncode == 1, p.stderr
    assert "size 200 of symbol `seq`" in p.stderr and "outside its range [2, 128]" in p.stderr, p.stderr
    xs, ys = torch.randn(3, 20), torch.randn(20, 7)
    np.save(x, xs.numpy())
    np.save(y, ys.numpy())
    expect = str(tmp_path / "e.npy")
    np.save(expect, ep.module()(xs, ys).numpy())
    p = subprocess.run([TPUC, "run", named, "--inputs", x, y, "--expect", expect, "--no-cache"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr


def test_every_bucket_compiles_for_a_tpu_topology(tmp_path):
    """The bucketed programs (masks, gathers, size arguments) are programs libtpu accepts."""
    s = Dim("s", min=2, max=300)
    ep = torch.export.export(gpt2_block(), (torch.randn(2, 5, 32),), dynamic_shapes=({1: s},))
    pt2 = str(tmp_path / "m.pt2")
    torch.export.save(ep.run_decompositions(), pt2)
    p = subprocess.run([TPUC, "compile", pt2, "--target", "tpu", "--topology", "v5e:2x2", "--buckets", "8,128,300",
                        "--no-cache", "--json"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    entries = json.loads(p.stdout.strip().splitlines()[-1])["buckets"]
    assert [list(e["sizes"].values())[0] for e in entries] == [8, 128, 300]
    assert all(e["target"] == "tpu" and e["executable_bytes"] > 0 for e in entries), entries
