"""Two architectures that need ops beyond the usual transformer set, equal to eager through
torch.compile and through the CLI (torch.export -> tpuc run):
- a ViT whose learned position embedding is resized to the input's patch grid with
  antialiased bicubic interpolation (as timm's `resample_abs_pos_embed` does), so
  `_upsample_bicubic2d_aa` runs inside the graph;
- a top-2 mixture-of-experts layer whose experts run as grouped GEMMs over the tokens sorted
  by expert (`torch._grouped_mm` with cumulative offsets, as torchtitan's MoE does)."""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from cli_check import assert_cli_matches_eager


class TinyViT(nn.Module):
    """Patch embedding, a position embedding trained for an 8x8 grid resized to the input's
    grid, two encoder layers and a classification head."""

    def __init__(self, d=32, patch=4, grid=8, classes=10):
        super().__init__()
        self.patch, self.grid = patch, grid
        self.embed = nn.Conv2d(3, d, patch, stride=patch)
        self.cls = nn.Parameter(torch.randn(1, 1, d) * 0.02)
        self.pos = nn.Parameter(torch.randn(1, 1 + grid * grid, d))
        layer = nn.TransformerEncoderLayer(d, 4, 2 * d, dropout=0.0, batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(d, classes)

    def resized_pos(self, h, w):
        cls_pos, grid_pos = self.pos[:, :1], self.pos[:, 1:]
        d = grid_pos.shape[-1]
        g = grid_pos.reshape(1, self.grid, self.grid, d).permute(0, 3, 1, 2)
        g = F.interpolate(g, size=(h, w), mode="bicubic", antialias=True, align_corners=False)
        return torch.cat([cls_pos, g.permute(0, 2, 3, 1).reshape(1, h * w, d)], dim=1)

    def forward(self, img):
        x = self.embed(img)  # [B, d, h, w]
        b, d, h, w = x.shape
        x = torch.cat([self.cls.expand(b, -1, -1), x.flatten(2).transpose(1, 2)], dim=1)
        x = self.encoder(x + self.resized_pos(h, w))
        return self.head(x[:, 0])


class GroupedMoE(nn.Module):
    """Top-2 routing over 4 SwiGLU experts; tokens sorted by expert, each expert's slice
    multiplied by its weights in one `_grouped_mm` per projection, results weighted and
    scattered back."""

    def __init__(self, d=16, hidden=32, experts=4, top_k=2):
        super().__init__()
        self.experts, self.top_k = experts, top_k
        self.router = nn.Linear(d, experts, bias=False)
        self.w1 = nn.Parameter(torch.randn(experts, d, hidden) / d ** 0.5)
        self.w3 = nn.Parameter(torch.randn(experts, d, hidden) / d ** 0.5)
        self.w2 = nn.Parameter(torch.randn(experts, hidden, d) / hidden ** 0.5)

    def forward(self, x):
        b, s, d = x.shape
        t = x.reshape(b * s, d)
        probs = self.router(t).softmax(-1)
        weight, expert = probs.topk(self.top_k, dim=-1)  # [T, k]
        flat_expert = expert.reshape(-1)
        order = flat_expert.argsort(stable=True)
        token = order // self.top_k
        counts = F.one_hot(flat_expert, self.experts).sum(0)
        offs = counts.cumsum(0).to(torch.int32)
        xs = t[token]
        h = F.silu(torch._grouped_mm(xs, self.w1, offs=offs)) * torch._grouped_mm(xs, self.w3, offs=offs)
        ys = torch._grouped_mm(h, self.w2, offs=offs) * weight.reshape(-1)[order, None]
        out = torch.zeros_like(t).index_add(0, token, ys)
        return x + out.reshape(b, s, d)


MODELS = {
    "vit_bicubic_aa_pos": (TinyViT, lambda: torch.randn(2, 3, 24, 24)),  # 6x6 patches: the 8x8 embedding shrinks
    "moe_grouped_mm": (GroupedMoE, lambda: torch.randn(2, 8, 16)),
}


def make(name):
    torch.manual_seed(0)
    cls, inp = MODELS[name]
    return cls(), inp()


@pytest.mark.parametrize("name", sorted(MODELS))
def test_torch_compile_matches_eager(name):
    model, x = make(name)
    model.eval()
    with torch.no_grad():
        want = model(x)
        got = torch.compile(model, backend="tpuc", fullgraph=True, options={"strict": True})(x)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_training_gradients_match_eager(name):
    model, x = make(name)
    model(x).square().mean().backward()
    want = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    torch.compile(model, backend="tpuc", fullgraph=True, options={"strict": True})(x).square().mean().backward()
    for n, p in model.named_parameters():
        torch.testing.assert_close(p.grad, want[n], rtol=1e-4, atol=1e-5, msg=f"{name}: {n}")


@pytest.mark.parametrize("name", sorted(MODELS))
def test_cli_runs_the_export_equal_to_eager(name, tmp_path):
    assert_cli_matches_eager(*make(name), tmp_path)
