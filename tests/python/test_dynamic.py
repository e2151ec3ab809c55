"""Dynamic shapes through torch.compile(backend="tpuc"): a graph with SymInt sizes is compiled
once per bucket (padded, masked, exact), a decode-style loop over lengths compiles no more than
its buckets, weights are uploaded once for all buckets and graphs, and Hugging Face generate()
gives eager's tokens."""

import pytest
import torch
import transformers  # in requirements-dev.txt: these tests run, never skip
from grad_check import assert_grads_match
from make_fixtures import GPT2Block

import tpuc


class Pool(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(16, 16)

    def forward(self, x):
        h = torch.relu(self.fc(x))
        return h.mean(1), torch.softmax(h, 1), h[:, -1], h.argmax(1)


def _check(got, want, what):
    for k, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape and g.dtype == w.dtype, f"{what} output {k}: {g.shape} {g.dtype} vs {w.shape} {w.dtype}"
        if w.dtype.is_floating_point:
            assert torch.allclose(g, w, rtol=1e-4, atol=1e-5), f"{what} output {k}: max diff {(g - w).abs().max():.3g}"
        else:
            assert torch.equal(g, w), f"{what} output {k}"


def test_lengths_compile_once_per_bucket_and_match_eager():
    torch.manual_seed(0)
    model = Pool().eval()
    compiled = torch.compile(model, backend="tpuc")
    with torch.no_grad():
        for n in range(2, 70):
            x = torch.randn(2, n, 16)
            _check(compiled(x), model(x), f"n={n}")
    s = tpuc.stats()
    # The first length is a static graph; lengths 3..69 fall into the buckets 4, 8, 16, 32,
    # 64 and 128 of the auto grid.
    assert s["buckets"] == 6, s
    assert s["programs"] == 7, s
    assert s["weight_uploads"] == 2, s
    # A second pass over the lengths compiles nothing.
    with torch.no_grad():
        for n in range(3, 70):
            compiled(torch.randn(2, n, 16))
    assert tpuc.stats()["programs"] == 7


def test_mark_dynamic_range_bounds_the_last_bucket():
    torch.manual_seed(0)
    model = Pool().eval()
    compiled = torch.compile(model, backend="tpuc")
    with torch.no_grad():
        for n in (5, 40, 100):
            x = torch.randn(2, n, 16)
            torch._dynamo.mark_dynamic(x, 1, min=2, max=100)
            _check(compiled(x), model(x), f"n={n}")
    s = tpuc.stats()
    # 5 -> 8, 40 -> 64, 100 -> 100 (the range's end), one symbolic graph.
    assert s["buckets"] == 3 and s["dynamo_graphs"] == 1, s


def test_the_size_plan_is_the_compilers_reading_of_the_graph():
    """Where a call reads each symbol's size is what the importer makes of the serialized graph:
    one entry per input dim that is exactly one symbol, duck-shaped dims sharing it, with the
    shape environment's range (which the serialized graph carries)."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from tpuc import _C
    from tpuc.graph import serialized

    def plan(f, *args):
        gm = make_fx(f, tracing_mode="symbolic")(*args)
        return _C.size_plan(serialized(gm, set(), set())[3])

    got = plan(lambda x, y: (x.sum(1), y * 2), torch.randn(4, 3), torch.randn(4))
    assert [(i, d, lo, hi) for i, d, _, lo, hi in got] == [(0, 0, 2, None), (0, 1, 2, None), (1, 0, 2, None)], got
    assert got[0][2] == got[2][2] != got[1][2], got  # x's rows and y share one symbol
    assert _C.size_plan(b"{}") is None  # a graph that does not import: compiled per shape


def test_linear_policy_and_off():
    torch.manual_seed(0)
    model = Pool().eval()
    compiled = torch.compile(model, backend="tpuc", options={"buckets": "linear:32"})
    with torch.no_grad():
        for n in (2, 3, 30, 33, 64):
            x = torch.randn(2, n, 16)
            _check(compiled(x), model(x), f"n={n}")
    assert tpuc.stats()["buckets"] == 2  # 32 and 64 (2 is the first, static graph)
    torch._dynamo.reset()
    tpuc.reset_stats()
    compiled = torch.compile(model, backend="tpuc", options={"buckets": "off"})
    with torch.no_grad():
        for n in (2, 3, 30):
            x = torch.randn(2, n, 16)
            _check(compiled(x), model(x), f"off n={n}")
    s = tpuc.stats()
    assert s.get("buckets", 0) == 0 and s["specializations"] >= 2, s


def test_bad_bucket_option_is_a_clear_error():
    with pytest.raises(ValueError, match="buckets"):
        tpuc.options.Options.resolve({"buckets": "linear:0"})


def test_hf_generate_same_tokens_few_compiles_weights_once():
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=128, n_positions=512)
    model = transformers.GPT2LMHeadModel(cfg).eval()
    ids = torch.randint(0, 128, (1, 5))
    with torch.no_grad():
        want = model.generate(ids, max_new_tokens=40, do_sample=False, pad_token_id=0)
        model.forward = torch.compile(model.forward, backend="tpuc")
        got = model.generate(ids, max_new_tokens=40, do_sample=False, pad_token_id=0)
        assert torch.equal(got, want)
        first = dict(tpuc.stats())
        again = model.generate(ids, max_new_tokens=40, do_sample=False, pad_token_id=0)
    assert torch.equal(again, want)
    s = tpuc.stats()
    # Prompt and first decode step are static graphs; the decode steps after them run in
    # buckets 8, 16, 32 and 64 (two symbolic graphs that Dynamo traces share the programs
    # through the executable cache).
    assert s["buckets"] <= 8, s
    assert first["programs"] <= 10, first
    assert s["programs"] == first["programs"], (first, s)
    n_weights = sum(1 for _ in model.parameters()) + sum(1 for _ in model.buffers())
    assert s["weight_uploads"] <= n_weights, s


def test_hf_generate_with_the_static_cache_is_two_programs():
    """The recommended way to decode: one prompt and one decode program, nothing compiled by
    the second generate(), each weight made resident once, the same tokens as eager."""
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=128, n_positions=512)
    model = transformers.GPT2LMHeadModel(cfg).eval()
    ids = torch.randint(0, 128, (1, 5))
    kw = dict(max_new_tokens=24, do_sample=False, pad_token_id=0, cache_implementation="static")
    with torch.no_grad():
        want = model.generate(ids, **kw)
        model.forward = torch.compile(model.forward, backend="tpuc")
        assert torch.equal(model.generate(ids, **kw), want)
        first = dict(tpuc.stats())
        assert torch.equal(model.generate(ids, **kw), want)
    s = tpuc.stats()
    assert first["programs"] == 2 and s["programs"] == 2, (first, s)
    n_weights = sum(1 for _ in model.parameters()) + sum(1 for _ in model.buffers())
    assert s["weight_uploads"] <= n_weights, s


def test_warmup_then_no_recompile_raises_naming_the_bucket():
    torch.manual_seed(0)
    model = Pool().eval()
    compiled = torch.compile(model, backend="tpuc", options={"no_recompile": True})
    # Length 2 first compiles as a static graph, then (second pass) in bucket 2 of the dynamic
    # graph Dynamo makes at length 3; 3 and 5 run in buckets 4 and 8.
    assert tpuc.warmup(compiled, torch.randn(2, 2, 16), torch.randn(2, 3, 16), torch.randn(2, 5, 16)) == 4
    with torch.no_grad():
        for n in (2, 3, 4, 6, 8):  # all in compiled buckets
            x = torch.randn(2, n, 16)
            _check(compiled(x), model(x), f"n={n}")
        with pytest.raises(Exception, match=r"compiling bucket s\d+=16 after warm-up"):
            compiled(torch.randn(2, 9, 16))


def test_training_over_changing_lengths_equals_eager():
    """Forward and backward graphs both bucketed: the backward contracts a saved `[b*s, d]`
    activation (padded at its end by the host) with a `[b, s, d]` gradient reshaped in the
    program, whose padded rows sit after every sequence; the specializer regathers the first
    into the second's layout. Weight gradients were silently wrong before."""
    torch._dynamo.reset()
    tpuc.reset_stats()
    torch.manual_seed(0)
    model = GPT2Block(32, 4, 64)
    compiled = torch.compile(model, backend="tpuc", options={"strict": True})
    for seq in (8, 11, 16, 5, 13):
        x = torch.randn(8, seq, 32)
        assert_grads_match(model, lambda: model(x).square().mean(), lambda: compiled(x).square().mean(), f"seq {seq}")
    s = tpuc.stats()
    assert s.get("specializations", 0) == 0 and s["buckets"] >= 4, s
    assert s["weight_uploads"] == 12, s  # each parameter once, for every bucket and both graphs


def _hf_model(name: str):
    small = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=64, vocab_size=64,
                 max_position_embeddings=64)
    if name == "bert":
        cfg = transformers.BertConfig(**small, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
        return transformers.BertForMaskedLM(cfg)
    if name == "gpt2-classifier":
        cfg = transformers.GPT2Config(n_layer=1, n_embd=32, n_head=4, vocab_size=64, n_positions=64, attn_pdrop=0.0,
                                      resid_pdrop=0.0, embd_pdrop=0.0, num_labels=3, pad_token_id=0)
        return transformers.GPT2ForSequenceClassification(cfg)
    cfg = transformers.LlamaConfig(**small, num_key_value_heads=2)
    return transformers.LlamaForCausalLM(cfg)


@pytest.mark.parametrize("name", ["bert", "llama", "gpt2-classifier"])
def test_hf_training_over_changing_lengths_is_bucketed(name):
    """BERT slices its position and token-type buffers to the sequence length (a symbolic end on
    a static dim: gathered along an iota of the length); Llama's rotary embedding and grouped
    KV heads; the GPT-2 classifier pools each sequence's last token by advanced indexing. All
    train equal to eager over changing lengths with every graph bucketed."""
    torch._dynamo.reset()
    tpuc.reset_stats()
    torch.manual_seed(0)
    model = _hf_model(name).train()
    compiled = torch.compile(model, backend="tpuc")
    for seq in (8, 11, 16, 5, 13):
        ids = torch.randint(1, 64, (2, seq))
        labels = torch.tensor([0, 2]) if name == "gpt2-classifier" else ids
        assert_grads_match(model, lambda: model(input_ids=ids, labels=labels).loss,
                           lambda: compiled(input_ids=ids, labels=labels).loss, f"{name} seq {seq}", atol=1e-6)
    s = tpuc.stats()
    # Length 8: the static forward and backward; 11..16 and 5: buckets 16 and 8 of both.
    assert s.get("specializations", 0) == 0 and s["buckets"] == 4 and s["programs"] == 6, s


class TailLoss(torch.nn.Module):
    """Losses over slices of the length (the shifted positions of a causal LM, the last token,
    the inside, the last three, a static window): their backwards write the gradient into part
    of the length with slice_scatter / select_scatter along the symbolic dim, bounds counted
    from either end."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(16, 16)

    def forward(self, x):
        h = torch.tanh(self.fc(x))
        return (h[:, 2:].square().sum() + h[:, -1].sum() + h[:, 1:-1].mean() + h[:, -3:].square().mean()
                + h[:, 1:4].sum() + h.mean())


def test_tail_slice_backward_over_changing_lengths_is_bucketed():
    torch._dynamo.reset()
    tpuc.reset_stats()
    torch.manual_seed(0)
    model = TailLoss()
    compiled = torch.compile(model, backend="tpuc", options={"strict": True})
    for seq in (6, 9, 13, 5, 16):
        x = torch.randn(3, seq, 16)
        assert_grads_match(model, lambda: model(x), lambda: compiled(x), f"seq {seq}")
    s = tpuc.stats()
    assert s.get("specializations", 0) == 0 and s["buckets"] >= 2, s


def test_hf_gpt2_training_over_changing_lengths_equals_eager():
    """The LM loss views a host-padded [b*s, V] as [b, s, V]: the specializer regathers the
    prefix into the split's layout instead of compiling per shape. Every graph is bucketed:
    the label gather pairs rows through a gather batch dim, and the logits slice's backward
    (a slice_scatter along the length) keeps the length symbolic."""
    torch._dynamo.reset()
    tpuc.reset_stats()
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=1, n_embd=32, n_head=4, vocab_size=64, n_positions=64,
                                  attn_pdrop=0.0, resid_pdrop=0.0, embd_pdrop=0.0)
    model = transformers.GPT2LMHeadModel(cfg).train()
    compiled = torch.compile(model, backend="tpuc")
    for seq in (8, 11, 16, 5):
        ids = torch.randint(0, 64, (2, seq))
        assert_grads_match(model, lambda: model(input_ids=ids, labels=ids).loss,
                           lambda: compiled(input_ids=ids, labels=ids).loss, f"seq {seq}", atol=1e-6)
    s = tpuc.stats()
    # Length 8 is one static graph pair; 11, 16 and 5 fall in buckets 16 and 8 of the dynamic
    # pair (forward and backward of the model and of the loss): 4 + 2 x 4 compiles.
    assert s.get("specializations", 0) == 0 and s["buckets"] == 8 and s["programs"] == 12, s
