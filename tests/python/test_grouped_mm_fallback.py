"""transformers' grouped GEMM of mixture-of-experts layers, `transformers::grouped_mm_fallback`
and its backward: every MoE model of transformers 5 runs its experts through it on float32
weights (the default `grouped_mm` experts implementation falls back to this opaque custom op
under tracing). Checked against eager: the op alone with an empty group and rows past the last
offset, forward and backward; a Qwen2-MoE decoder through the CLI, through torch.compile, and
three AdamW steps."""

import copy

import pytest
import torch
import transformers
import transformers.integrations.moe  # noqa: F401  (defines torch.ops.transformers.*)
from cli_check import assert_cli_matches_eager

import tpuc  # noqa: F401


def _fallback(x, w, offs):
    return torch.ops.transformers.grouped_mm_fallback(x, w, offs)


@pytest.mark.parametrize("offs", [[3, 3, 7], [0, 4, 9], [9, 9, 9]], ids=["empty-middle-and-tail", "empty-first", "one-group"])
def test_op_forward_and_backward_equal_eager(offs):
    torch.manual_seed(0)
    x = torch.randn(9, 5, requires_grad=True)
    w = torch.randn(3, 5, 4, requires_grad=True)
    o = torch.tensor(offs, dtype=torch.int32)
    r = torch.randn(9, 4)
    want = _fallback(x, w, o)
    (want * r).sum().backward()
    want_gx, want_gw = x.grad.clone(), w.grad.clone()
    x.grad = w.grad = None
    f = torch.compile(_fallback, backend="tpuc", fullgraph=True, options={"strict": True})
    got = f(x, w, o)
    (got * r).sum().backward()
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(x.grad, want_gx, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(w.grad, want_gw, rtol=1e-5, atol=1e-5)
    assert tpuc.stats().get("fallback_graphs", 0) == 0


def _qwen2_moe():
    cfg = transformers.AutoConfig.for_model(
        "qwen2_moe", vocab_size=128, hidden_size=32, intermediate_size=64, moe_intermediate_size=16,
        shared_expert_intermediate_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        num_experts=4, num_experts_per_tok=2, max_position_embeddings=64, use_cache=False,
    )
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg)
    ids = torch.randint(0, 128, (2, 12), generator=torch.Generator().manual_seed(1))
    return model, ids


def test_moe_decoder_in_the_cli_equals_eager(tmp_path):
    model, ids = _qwen2_moe()

    class Logits(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, ids):
            return self.m(input_ids=ids).logits

    assert_cli_matches_eager(Logits(model), ids, tmp_path)


def test_moe_decoder_trains_equal_to_eager():
    model, ids = _qwen2_moe()
    model.train()
    reference = copy.deepcopy(model)
    compiled = torch.compile(model, backend="tpuc", options={"strict": True})
    with torch.no_grad():
        torch.testing.assert_close(compiled.eval()(input_ids=ids).logits, reference.eval()(input_ids=ids).logits,
                                   rtol=1e-4, atol=1e-4)
    model.train()
    reference.train()
    losses = []
    for m, call in ((reference, reference), (model, compiled)):
        opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
        run = []
        for _ in range(3):
            opt.zero_grad()
            loss = call(input_ids=ids, labels=ids).loss
            loss.backward()
            opt.step()
            run.append(loss.item())
        losses.append(run)
    assert losses[0] == pytest.approx(losses[1], rel=1e-4, abs=1e-5)
    for (n, p), q in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-3, atol=1e-4, msg=n)
    assert tpuc.stats().get("fallback_graphs", 0) == 0
