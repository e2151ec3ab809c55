"""Training tiny-config Hugging Face models through torch.compile(backend="tpuc"), equal to eager.

Random weights from configs (no download), dropout off, a few AdamW steps on the same batch;
losses and every parameter after the steps are compared with an eager copy. BERT's graph
returns expanded views (position and token-type ids), which once failed after execution.
"""

import copy

import pytest
import torch

import transformers  # in requirements-dev.txt: these tests run, never skip

import tpuc


def _bert():
    cfg = transformers.BertConfig(
        vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
        max_position_embeddings=32, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, num_labels=3,
    )
    model = transformers.BertForSequenceClassification(cfg)
    ids = torch.randint(0, 64, (2, 12))
    return model, {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": torch.tensor([0, 2])}


def _gpt2():
    cfg = transformers.GPT2Config(
        vocab_size=64, n_embd=32, n_layer=2, n_head=4, n_positions=32,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
    )
    model = transformers.GPT2LMHeadModel(cfg)
    ids = torch.randint(0, 64, (2, 12))
    return model, {"input_ids": ids, "labels": ids}


def _llama():
    cfg = transformers.LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=32,
    )
    model = transformers.LlamaForCausalLM(cfg)
    ids = torch.randint(0, 64, (2, 12))
    return model, {"input_ids": ids, "labels": ids}


MODELS = {"bert": _bert, "gpt2": _gpt2, "llama": _llama}


def _steps(model, call, batch, steps):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = call(**batch).loss
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("name", list(MODELS))
def test_training_a_few_adamw_steps_matches_eager(name):
    torch.manual_seed(0)
    model, batch = MODELS[name]()
    model.train()
    eager = copy.deepcopy(model)
    compiled = torch.compile(model, backend="tpuc", options={"strict": True})
    got = _steps(model, compiled, batch, 3)
    want = _steps(eager, eager, batch, 3)
    assert got == pytest.approx(want, rel=1e-4, abs=1e-5), (got, want)
    for (k, g), (_, w) in zip(model.named_parameters(), eager.named_parameters()):
        # AdamW normalises each gradient by its own magnitude, so round-off differences in
        # near-zero gradients move weights by up to lr per step; 3 steps of lr 1e-3.
        assert torch.allclose(g, w, rtol=1e-3, atol=4e-3), f"{name}: {k} max diff {(g - w).abs().max().item():.3g}"
    assert tpuc.stats()["programs"] >= 2
