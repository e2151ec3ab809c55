"""Hugging Face's `afmoe` (a mixture-of-experts decoder: sigmoid router with an expert bias,
top-k, batched expert GEMMs, shared experts) equal to eager through the CLI and torch.compile,
inference and training.

afmoe initialises its router's gate to zeros, so with default weights every router score is
sigmoid(0) = 0.5 and every token's top-k is a full tie. Which tied experts torch picks is its
kernel's business: on the CPU, the order `std::nth_element` leaves them in (experts 2 and 3 of
4 for k = 2); on CUDA, the lowest indices (0 and 1). tpuc's `topk` is a stable sort, so it
picks the lowest indices, as XLA's TopK does. The models here draw the router at random, as
trained checkpoints have it, and one test pins the tie rule with the default zero router.

The experts run as `batched_mm` here; transformers' default `grouped_mm`, which falls back for
float32 weights under tracing to its custom op `transformers::grouped_mm_fallback`, is tested
in test_grouped_mm_fallback.py.
"""

import copy

import pytest
import torch
import transformers
from cli_check import assert_cli_matches_eager


def _config():
    return transformers.AutoConfig.for_model(
        "afmoe", vocab_size=128, hidden_size=32, intermediate_size=64, moe_intermediate_size=16,
        num_hidden_layers=1, num_dense_layers=0, num_attention_heads=4, num_key_value_heads=4, head_dim=8,
        num_experts=4, num_experts_per_tok=2, num_shared_experts=1, max_position_embeddings=64,
        sliding_window=4, attention_dropout=0.0, use_cache=False,
    )


def _model(random_router=True):
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(_config(), experts_implementation="batched_mm")
    routers = [layer.mlp.router.gate.weight for layer in model.model.layers if hasattr(layer.mlp, "router")]
    assert routers and all(bool((w == 0).all()) for w in routers)  # afmoe's own init: every score ties
    if random_router:
        with torch.no_grad():
            for w in routers:
                w.normal_()
    ids = torch.randint(0, 128, (2, 8))
    return model, ids


class _Logits(torch.nn.Module):
    """The causal LM as a tensor-to-tensor module, for the CLI check."""

    def __init__(self, lm):
        super().__init__()
        self.lm = lm

    def forward(self, ids):
        return self.lm(ids).logits


def _stable_topk(x, k, dim=-1, largest=True, sorted=True):
    """Top-k whose ties go to the lowest indices: the rule tpuc implements."""
    values, indices = torch.sort(x, dim=dim, descending=largest, stable=True)
    return values.narrow(dim, 0, k), indices.narrow(dim, 0, k)


def test_cli_runs_the_export_equal_to_eager(tmp_path):
    model, ids = _model()
    assert_cli_matches_eager(_Logits(model), ids, tmp_path)


def test_torch_compile_matches_eager():
    model, ids = _model()
    model.eval()
    with torch.no_grad():
        want = model(ids).logits
        got = torch.compile(model, backend="tpuc", fullgraph=True, options={"strict": True})(ids).logits
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_training_loss_and_gradients_match_eager():
    model, ids = _model()
    model.train()
    eager = copy.deepcopy(model)
    want = eager(ids, labels=ids).loss
    want.backward()
    got = torch.compile(model, backend="tpuc", options={"strict": True})(ids, labels=ids).loss
    got.backward()
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    for (n, p), (_, q) in zip(model.named_parameters(), eager.named_parameters()):
        if q.grad is None:
            assert p.grad is None, n
            continue
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5, msg=n)


def test_tied_router_scores_pick_the_lowest_experts(monkeypatch):
    """The default zero router: every token's scores tie, and tpuc routes each to experts 0 and
    1, as eager does with a top-k that breaks ties by index (torch's CPU kernel picks 2 and 3)."""
    model, ids = _model(random_router=False)
    model.eval()
    with torch.no_grad():
        got = torch.compile(model, backend="tpuc", fullgraph=True, options={"strict": True})(ids).logits
        cpu_order = model(ids).logits
        monkeypatch.setattr(torch, "topk", _stable_topk)
        want = model(ids).logits
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    # the ties matter: the other choice of experts gives other logits
    assert not torch.allclose(cpu_order, want, rtol=1e-2, atol=1e-2)
