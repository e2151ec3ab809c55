"""Exports a training step of a Hugging Face model with `tpuc.train_step(...).export`, for
`tpuc run DIR --steps N` to replay without Python (on this machine, or on one with only the
`tpuc` binary and a PJRT plugin, e.g. a GPU machine: `--no-state` leaves the state files out,
and scripts/gpu_check.py writes them there from the same seed).

    .venv/bin/python scripts/export_train_step.py --model gpt2 --out DIR [--batch 4 --seq 128] [--no-state]

Writes DIR (the export), DIR/ids.npy (one batch of token ids; the labels are the same ids).
Models: gpt2 (124M), bert (BERT-base, masked LM), gpt2-tiny (for tests). AdamW, lr 1e-4,
weight decay 0.01, gradient clipping at 1.0, dropout off, random weights from seed 0.
"""

import argparse
import os
import time

import numpy as np
import torch
import transformers

import tpuc


def model_of(name: str) -> torch.nn.Module:
    torch.manual_seed(0)
    if name == "gpt2":
        cfg = transformers.GPT2Config(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
        return transformers.GPT2LMHeadModel(cfg)
    if name == "gpt2-tiny":
        cfg = transformers.GPT2Config(vocab_size=128, n_positions=64, n_embd=32, n_layer=2, n_head=4,
                                      resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
        return transformers.GPT2LMHeadModel(cfg)
    if name == "bert":
        cfg = transformers.BertConfig(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
        return transformers.BertForMaskedLM(cfg)
    raise SystemExit(f"unknown model {name!r}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="gpt2")
    ap.add_argument("--out", required=True)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--no-state", action="store_true", help="leave the state files out")
    a = ap.parse_args()
    model = model_of(a.model).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
    step = tpuc.train_step(model, opt, clip_grad_norm=1.0)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, model.config.vocab_size, (a.batch, a.seq), generator=g)
    t0 = time.perf_counter()
    step.export(a.out, input_ids=ids, labels=ids, state=not a.no_state)
    print(f"exported {a.model} to {a.out} in {time.perf_counter() - t0:.1f} s "
          f"({os.path.getsize(os.path.join(a.out, 'program.json')) / 1e6:.1f} MB program)")
    np.save(os.path.join(a.out, "ids.npy"), ids.numpy())


if __name__ == "__main__":
    main()
