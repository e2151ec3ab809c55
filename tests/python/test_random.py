"""Random ops in compiled graphs (strict): dropout, torch's samplers, seeded by torch's
generator. Distributions are checked on 1e6 draws with bounds at 5 sigma; the compiled
generator is checked bit for bit against its eager kernel."""

import math

import pytest
import torch
import torch.nn.functional as F

import tpuc
from rng_reference import uniform as _uniform_eager

N = 1_000_000
STRICT = {"strict": True}


def sigma5(std: float, n: int = N) -> float:
    return 5 * std / math.sqrt(n)


def compiled(f):
    return torch.compile(f, backend="tpuc", options=STRICT, fullgraph=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
def test_rand_is_uniform_on_0_1(dtype):
    torch.manual_seed(0)
    u = compiled(lambda: torch.rand(1000, 1000, dtype=dtype))().double()
    assert u.dtype == torch.float64 and float(u.min()) >= 0 and float(u.max()) < 1
    # Moments of U[0,1): mean 1/2 (sd 1/sqrt(12)), second moment 1/3 (sd sqrt(4/45)); the
    # coarser bf16/f16 grids shift the mean by at most half a step.
    step = {torch.bfloat16: 2**-8, torch.float16: 2**-11}.get(dtype, 0.0)
    assert abs(float(u.mean()) - 0.5 + step / 2) < sigma5(1 / math.sqrt(12)) + step / 2
    assert abs(float((u * u).mean()) - 1 / 3) < sigma5(math.sqrt(4 / 45)) + step
    # Tails: each tenth of the range holds its share of the draws (of the dtype's grid points
    # k / 2^m on a coarse grid: 25 or 26 of bf16's 256 per tenth).
    counts = torch.histc(u.float(), bins=10, min=0, max=1).double() / N
    bits = {torch.bfloat16: 8, torch.float16: 11}.get(dtype)
    if bits is None:
        want = torch.full((10,), 0.1, dtype=torch.float64)
    else:
        grid = torch.arange(2**bits, dtype=torch.float64) / 2**bits
        want = torch.histc(grid, bins=10, min=0, max=1) / 2**bits
    assert torch.all((counts - want).abs() < sigma5(math.sqrt(0.09))), (counts, want)


def test_randn_is_standard_normal():
    torch.manual_seed(1)
    z = compiled(lambda: torch.randn(N))().double()
    assert abs(float(z.mean())) < sigma5(1)
    assert abs(float((z * z).mean()) - 1) < sigma5(math.sqrt(2))
    # Tails: P(|z| > 2) = 0.0455, P(|z| > 3) = 0.0027.
    for k, p in ((2, 0.04550026), (3, 0.00269980)):
        assert abs(float((z.abs() > k).double().mean()) - p) < sigma5(math.sqrt(p * (1 - p))), k


def test_dropout_keep_rate_scale_and_mask_in_backward():
    torch.manual_seed(2)
    p = 0.3
    x = torch.randn(1000, 1000, requires_grad=True)
    f = compiled(lambda x: F.dropout(x, p, training=True))
    y = f(x)
    kept = y != 0
    assert abs(float(kept.double().mean()) - (1 - p)) < sigma5(math.sqrt(p * (1 - p)))
    torch.testing.assert_close(y[kept], x.detach()[kept] / (1 - p))
    # The backward uses the forward's mask: the gradient is the mask times 1/(1-p).
    y.sum().backward()
    torch.testing.assert_close(x.grad, kept.float() / (1 - p))


def test_bernoulli_randint_uniform_normal_exponential():
    torch.manual_seed(3)

    def f(p):
        return (torch.bernoulli(p), torch.randint(3, 10, (N,)), torch.empty(N).uniform_(-2, 4),
                torch.empty(N).normal_(5, 3), torch.empty(N).exponential_(2.0))

    b, ri, un, no, ex = compiled(f)(torch.full((N,), 0.2))
    assert abs(float(b.mean()) - 0.2) < sigma5(0.4)
    assert ri.dtype == torch.int64 and int(ri.min()) == 3 and int(ri.max()) == 9
    assert torch.all((torch.bincount(ri - 3).double() / N - 1 / 7).abs() < sigma5(math.sqrt(6 / 49)))
    assert float(un.min()) >= -2 and float(un.max()) < 4 and abs(float(un.mean()) - 1) < sigma5(6 / math.sqrt(12))
    assert abs(float(no.mean()) - 5) < sigma5(3) and abs(float(no.std()) - 3) < 0.02
    assert float(ex.min()) >= 0 and abs(float(ex.mean()) - 0.5) < sigma5(0.5)


def test_seeding_follows_torch():
    f = compiled(lambda x: torch.rand_like(x) + x)
    x = torch.zeros(64)
    torch.manual_seed(7)
    a, b = f(x), f(x)
    assert not torch.equal(a, b), "successive calls draw fresh numbers"
    torch.manual_seed(7)
    assert torch.equal(f(x), a) and torch.equal(f(x), b), "the same seed repeats the run"
    torch.manual_seed(8)
    assert not torch.equal(f(x), a), "another seed, another run"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
def test_compiled_generator_matches_the_reference_bit_for_bit(dtype):
    """Each call's seed is the next two 31-bit words of torch's generator; the graph's random
    ops are streams 0, 1, ... of it in graph order."""
    f = compiled(lambda: (torch.rand(17, 33, dtype=dtype), torch.rand(5, dtype=dtype)))
    torch.manual_seed(21)
    seed = torch.randint(0, 2**31 - 1, (2,), dtype=torch.int64)
    torch.manual_seed(21)
    a, b = f()
    assert torch.equal(a, _uniform_eager(seed, 0, [17, 33], dtype))
    assert torch.equal(b, _uniform_eager(seed, 1, [5], dtype))


def test_a_model_with_dropout_trains_as_one_forward_and_one_backward_program():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.GELU(), torch.nn.Dropout(0.1),
                                torch.nn.Linear(64, 16), torch.nn.Dropout(0.1))
    step_model = torch.compile(model, backend="tpuc", options=STRICT)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x = torch.randn(32, 16)
    losses = []
    for _ in range(5):
        loss = (step_model(x) - x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(float(loss))
    s = tpuc.stats()
    assert s["programs"] == 2 and s["aot_graphs"] == 2 and s.get("fallback_graphs", 0) == 0, s
    assert losses[-1] < losses[0]


def _hf(name):
    import transformers as T

    if name == "bert":
        cfg = T.BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                           vocab_size=100, max_position_embeddings=64)
        return cfg, T.BertForMaskedLM(cfg), lambda g: dict(input_ids=torch.randint(0, 100, (2, 16), generator=g),
                                                            labels=torch.randint(0, 100, (2, 16), generator=g))
    if name == "bart":
        cfg = T.BartConfig(d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
                           decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, vocab_size=100,
                           max_position_embeddings=64)
        return cfg, T.BartForConditionalGeneration(cfg), lambda g: dict(
            input_ids=torch.randint(3, 100, (2, 16), generator=g), labels=torch.randint(3, 100, (2, 16), generator=g))
    if name == "t5":
        cfg = T.T5Config(decoder_start_token_id=0, pad_token_id=0, d_model=32, d_ff=64, num_layers=1, num_heads=4,
                         d_kv=8, vocab_size=100)
        return cfg, T.T5ForConditionalGeneration(cfg), lambda g: dict(
            input_ids=torch.randint(0, 100, (2, 16), generator=g), labels=torch.randint(0, 100, (2, 16), generator=g))
    if name == "vit":
        cfg = T.ViTConfig(image_size=32, patch_size=8, num_channels=3, hidden_size=32, num_hidden_layers=2,
                          num_attention_heads=4, intermediate_size=64, num_labels=10,
                          # ViTConfig's defaults are 0.0; 0.1 is the paper's training setting.
                          hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)
        return cfg, T.ViTForImageClassification(cfg), lambda g: dict(
            pixel_values=torch.randn(2, 3, 32, 32, generator=g), labels=torch.randint(0, 10, (2,), generator=g))
    cfg = T.GPT2Config(n_embd=32, n_layer=2, n_head=4, vocab_size=100, n_positions=64)

    def batch(g):
        ids = torch.randint(0, 100, (2, 16), generator=g)
        return dict(input_ids=ids, labels=ids)

    return cfg, T.GPT2LMHeadModel(cfg), batch


@pytest.mark.parametrize("name", ["bert", "bart", "t5", "gpt2", "vit"])
def test_hf_default_config_trains_with_dropout_in_strict_mode(name):
    """Default configs (dropout 0.1) train 20 AdamW steps as one forward and one backward
    program per Dynamo graph, no fallback, each weight made resident once, reproducible with
    one seed, close to eager's loss curve (not equal: the random streams differ)."""
    torch.manual_seed(0)
    cfg, model, batch = _hf(name)
    assert max(getattr(cfg, k, 0) for k in ("hidden_dropout_prob", "dropout", "dropout_rate", "resid_pdrop")) > 0
    model.train()
    g = torch.Generator().manual_seed(1)
    batches = [batch(g) for _ in range(20)]
    init = {k: v.clone() for k, v in model.state_dict().items()}

    def train(m):
        model.load_state_dict(init)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        torch.manual_seed(0)
        losses = []
        for b in batches:
            loss = m(**b).loss
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(float(loss))
        return losses

    eager = train(model)
    tpuc.reset_stats()
    torch._dynamo.reset()
    got = train(torch.compile(model, backend="tpuc", options=STRICT))
    s = tpuc.stats()
    assert s["random_graphs"] >= 1 and s.get("fallback_graphs", 0) == 0, s
    assert s["programs"] == 2 * s["dynamo_graphs"], s
    assert s.get("weight_uploads", 0) <= len(list(model.parameters())) + len(list(model.buffers())), s
    for a, b in zip(got, eager):
        assert abs(a - b) <= 0.05 * abs(b), (got, eager)
    torch._dynamo.reset()
    assert train(torch.compile(model, backend="tpuc", options=STRICT)) == got, "one seed, one run"


@pytest.mark.parametrize("buckets", ["off", "8,256", "16,256"])
def test_bucketed_draws_do_not_depend_on_the_bucket(buckets):
    """A draw's numbers for the real elements are those of the unpadded tensor whatever bucket
    the call runs in (positions follow the real sizes): the same mask with buckets off, padded
    to 8 or to 16, and equal to the generator's eager kernel."""
    p = 0.5
    f = torch.compile(lambda x: F.dropout(x, p, training=True), backend="tpuc",
                      options={"strict": True, "buckets": buckets})
    x = torch.ones(5, 7)
    torch._dynamo.mark_dynamic(x, 0, min=2, max=16)
    torch.manual_seed(11)
    seed = torch.randint(0, 2**31 - 1, (2,), dtype=torch.int64)
    want = (_uniform_eager(seed, 0, [5, 7], torch.float32) >= p).float() / (1 - p)
    torch.manual_seed(11)
    torch.testing.assert_close(f(x), want, rtol=0, atol=0)
    s = tpuc.stats()
    assert s.get("buckets", 0) == (0 if buckets == "off" else 1), s


def test_randperm_normal_overloads_and_dropout():
    # (Tensor.random_ breaks Dynamo's graph before any backend sees it.)
    torch.manual_seed(4)

    def f(m, sd):
        return (torch.randperm(1000), torch.normal(m, 2.0), torch.normal(m, sd), torch.normal(1.0, sd),
                torch.ops.aten.dropout(torch.ones(N), 0.25, True))

    perm, n1, n2, n3, d = compiled(f)(torch.full((N,), 3.0), torch.full((N,), 0.5))
    assert torch.equal(perm.sort().values, torch.arange(1000)) and not torch.equal(perm, torch.arange(1000))
    assert abs(float(n1.mean()) - 3) < sigma5(2) and abs(float(n1.std()) - 2) < 0.02
    assert abs(float(n2.mean()) - 3) < sigma5(0.5) and abs(float(n3.mean()) - 1) < sigma5(0.5)
    assert abs(float((d != 0).double().mean()) - 0.75) < sigma5(math.sqrt(0.1875))


class _Sampled(torch.nn.Module):
    def forward(self, x):
        h = F.dropout(x, 0.5, training=True)
        return h, torch.rand_like(x), torch.randn(1000, 100), torch.bernoulli(torch.full((1000, 100), 0.3)), \
            torch.randint(2, 7, (1000, 100))


@pytest.mark.parametrize("form", ["raw", "core"])
def test_cli_runs_an_exported_program_with_random_ops_from_its_seed(form, tmp_path):
    """A `.pt2` carrying ATen's random ops (dropout, rand_like, randn, bernoulli, randint as
    torch.export writes them, raw or decomposed) runs with `tpuc run --seed N`: the same seed
    gives the same outputs, another seed others, the first draw is the generator's (bit for
    bit its eager kernel) and each sampler's distribution is right."""
    import subprocess

    import numpy as np
    from cli_check import TPUC

    x = torch.ones(1000, 100)
    ep = torch.export.export(_Sampled(), (x,))
    pt2 = str(tmp_path / "m.pt2")
    torch.export.save(ep.run_decompositions() if form == "core" else ep, pt2)
    np.save(tmp_path / "x.npy", x.numpy())

    def run(seed):
        out = tmp_path / f"out{seed}"
        p = subprocess.run([TPUC, "run", pt2, "--inputs", str(tmp_path / "x.npy"), "--seed", str(seed), "--out-dir",
                            str(out), "--no-cache"], capture_output=True, text=True)
        assert p.returncode == 0, p.stdout + p.stderr
        return [torch.from_numpy(np.load(out / f"output_{i}.npy")) for i in range(5)]

    a, b, c = run(3), run(3), run(4)
    assert all(torch.equal(u, v) for u, v in zip(a, b)), "one seed, one result"
    assert not any(torch.equal(u, v) for u, v in zip(a, c)), "another seed, other numbers"
    seed = torch.tensor([3, 0], dtype=torch.int64)  # --seed 3: its low and high 31 bits
    want = (_uniform_eager(seed, 0, [1000, 100], torch.float32) >= 0.5).float() * 2
    assert torch.equal(a[0], want)
    h, u, z, bern, ri = a
    n = h.numel()
    assert abs(float((h != 0).double().mean()) - 0.5) < sigma5(0.5, n)
    assert float(u.min()) >= 0 and float(u.max()) < 1 and abs(float(u.double().mean()) - 0.5) < sigma5(math.sqrt(1 / 12), n)
    assert abs(float(z.double().mean())) < sigma5(1, n) and abs(float(z.double().std()) - 1) < 0.01
    assert abs(float(bern.double().mean()) - 0.3) < sigma5(math.sqrt(0.21), n)
    assert ri.dtype == torch.int64 and int(ri.min()) == 2 and int(ri.max()) == 6


class _DroppedAttention(torch.nn.Module):
    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, dropout_p=0.5, is_causal=True)


@pytest.mark.parametrize("form", ["raw", "core"])
def test_cli_attention_with_dropout_is_one_composite_and_drops_what_the_seed_says(form, tmp_path):
    """SDPA with dropout_p > 0 in a `.pt2` (kept whole in raw form, decomposed around
    native_dropout in core form) lowers to one tpuc.attention composite whose keep mask is
    drawn outside it, and computes softmax(causal(q k^T / sqrt(E))) * keep / (1 - p) @ v with
    the keep mask of the generator's first stream for --seed."""
    import subprocess

    import numpy as np
    from cli_check import TPUC

    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 16, 8) for _ in range(3))
    ep = torch.export.export(_DroppedAttention(), (q, k, v))
    pt2 = str(tmp_path / "m.pt2")
    torch.export.save(ep.run_decompositions() if form == "core" else ep, pt2)
    names = []
    for n, t in zip("qkv", (q, k, v)):
        np.save(tmp_path / f"{n}.npy", t.numpy())
        names.append(str(tmp_path / f"{n}.npy"))
    ir = subprocess.run([TPUC, "lower", pt2, "--emit", "ir"], capture_output=True, text=True)
    assert ir.returncode == 0, ir.stderr
    assert ir.stdout.count('name = "tpuc.attention"') == 1 and "dropout = 0.5" in ir.stdout, ir.stdout
    p = subprocess.run([TPUC, "run", pt2, "--inputs", *names, "--seed", "5", "--out-dir", str(tmp_path / "out"),
                        "--no-cache"], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    got = torch.from_numpy(np.load(tmp_path / "out" / "output_0.npy"))
    keep = _uniform_eager(torch.tensor([5, 0]), 0, [2, 3, 16, 16], torch.float32) >= 0.5
    s = (q @ k.transpose(-1, -2)) / math.sqrt(8)
    s = s.masked_fill(~torch.ones(16, 16, dtype=torch.bool).tril(), float("-inf"))
    torch.testing.assert_close(got, (s.softmax(-1) * keep / 0.5) @ v, rtol=1e-5, atol=1e-5)


class _Block(torch.nn.Module):
    """A post-norm transformer block with dropout on attention, after GELU and in both residuals."""

    def __init__(self, p: float):
        super().__init__()
        self.p = p
        self.qkv, self.o = torch.nn.Linear(32, 96), torch.nn.Linear(32, 32)
        self.ff1, self.ff2 = torch.nn.Linear(32, 64), torch.nn.Linear(64, 32)
        self.ln1, self.ln2 = torch.nn.LayerNorm(32), torch.nn.LayerNorm(32)

    def forward(self, x):
        B, L, _ = x.shape
        q, k, v = self.qkv(x).view(B, L, 3, 4, 8).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, dropout_p=self.p if self.training else 0.0)
        h = self.ln1(x + F.dropout(self.o(a.transpose(1, 2).reshape(B, L, 32)), self.p, self.training))
        f = F.dropout(F.gelu(self.ff1(h)), self.p, self.training)
        return self.ln2(h + F.dropout(self.ff2(f), self.p, self.training))


def test_dropout_keeps_the_composites_of_a_training_block(tmp_path):
    """A training block with dropout on attention, after GELU and in the residuals makes the
    same composites (forward and backward) as the block with dropout off."""
    import collections
    import glob
    import re

    def composites(p):
        d = tmp_path / f"p{p}"
        torch._dynamo.reset()
        torch.manual_seed(0)
        m = _Block(p).train()
        f = torch.compile(m, backend="tpuc", options={"strict": True, "dump_dir": str(d)})
        f(torch.randn(2, 16, 32)).sum().backward()
        names = collections.Counter()
        for path in glob.glob(str(d / "*" / "module.tpuc")):
            kind = "backward" if "backward" in path else "forward"
            for name in re.findall(r'name = "(tpuc\.[a-z_]+)"', open(path).read()):
                names[(kind, name)] += 1
        return names

    on, off = composites(0.1), composites(0.0)
    assert on == off and ("forward", "tpuc.gelu") in on, (on, off)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_randn_and_dropout_in_16_bit_floats(dtype):
    """randn and dropout with 16-bit results: normal moments and tails within the dtype's
    rounding, dropout's keep rate, its 1/(1-p) scale (rounded once to the dtype, as eager's
    kernel does) and its mask in backward."""
    torch.manual_seed(4)
    z = compiled(lambda: torch.randn(N, dtype=dtype))()
    assert z.dtype == dtype
    z = z.double()
    eps = torch.finfo(dtype).eps
    assert abs(float(z.mean())) < sigma5(1) + eps
    assert abs(float((z * z).mean()) - 1) < sigma5(math.sqrt(2)) + 4 * eps
    for k, p in ((2, 0.04550026), (3, 0.00269980)):
        # Rounding moves draws across k by at most eps * k: a band of density phi(k).
        band = 2 * eps * k * math.exp(-k * k / 2) / math.sqrt(2 * math.pi)
        assert abs(float((z.abs() > k).double().mean()) - p) < sigma5(math.sqrt(p * (1 - p))) + band, k
    p = 0.3
    x = torch.randn(1000, 1000, dtype=dtype, requires_grad=True)
    y = compiled(lambda x: F.dropout(x, p, training=True))(x)
    assert y.dtype == dtype
    kept = y != 0
    assert abs(float(kept.double().mean()) - (1 - p)) < sigma5(math.sqrt(p * (1 - p)))
    want = F.dropout(x.detach(), p, training=False) * (1 / (1 - p))
    torch.testing.assert_close(y[kept], want[kept].to(dtype))
    y.float().sum().backward()
    torch.testing.assert_close(x.grad, (kept.to(dtype) * (1 / (1 - p))).to(dtype))
