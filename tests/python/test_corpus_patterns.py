"""Patterns the model corpus (scripts/corpus) found in real models, each reduced to a few lines
and checked against eager: through `torch.compile(backend="tpuc")` strictly (inference, and a
training step's loss and gradients) and, where torch.export takes it, through the CLI.

- VITS's spline flow writes the rows a mask selects with values computed from rows the same
  mask selects (`out[m] = f(x[m], w[m, :])`): a data-dependent number of rows, one symbol
  bound by several results.
- Longformer's overlapping chunks are an `as_strided` view of a transposed tensor whose
  strides refer to the storage, not to the tensor's row-major order.
- Checks a model makes on its data (`torch._check_tensor_all`, as transformers' VITS checks its
  spline's discriminant) export as `_is_all_true`, a number read from it and assertions on
  that number: the CLI takes them (it does not evaluate the assertions).
- timm's Sequencer splits a fixed width between two branches, and its LSTM breaks the graph
  before they are joined: blocks of different splits share the code after the break, which
  Dynamo then compiles with the widths `s` and `384 - s`. A dim that shrinks as a symbol
  grows cannot be padded, so that graph is compiled per shape.
- VITS sizes its output by a number read from the data (`torch.arange(lengths.max())`): the CLI
  runs the program cut down to that number first, then the program at its value; `tpuc
  compile`, which has no inputs to read it from, refuses naming the node.
- Higgs Audio normalizes the rows a mask selects and scatters them back with
  `masked_scatter`: a source of data-dependent size. It also adds to the rows of one mask what
  it computed from another selection by the same mask: two counts torch asserts equal.
"""

import copy

import pytest
import torch
import torch.nn as nn
from cli_check import assert_cli_matches_eager
from test_backward_ops import assert_training_matches_eager

import tpuc

STRICT = {"strict": True}


def assert_infers_like_eager(model, *inputs):
    """`model` in eval mode, compiled strictly, equals eager on `inputs`."""
    model.eval()
    with torch.no_grad():
        want = model(*inputs)
        got = torch.compile(copy.deepcopy(model), backend="tpuc", options=STRICT)(*inputs)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


class MaskedRows(nn.Module):
    """VITS's `_unconstrained_rational_quadratic_spline`, reduced: identity outside the
    interval, a function of the selected rows inside."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4 * 5)

    def forward(self, x):
        w = self.proj(x).reshape(*x.shape, 5)
        inside = (x >= -1) & (x <= 1)
        out = torch.zeros_like(x)
        out[~inside] = x[~inside]
        out[inside] = x[inside].tanh() * w[inside, :].softmax(-1)[:, 0]
        return out


@pytest.mark.parametrize("scale", [1.5, 0.5], ids=["mixed", "all-inside"])
def test_masked_rows_infer_like_eager(scale):
    torch.manual_seed(0)
    assert_infers_like_eager(MaskedRows(), torch.randn(2, 3, 4) * scale)


def test_masked_rows_train_like_eager():
    torch.manual_seed(0)
    assert_training_matches_eager(MaskedRows(), [torch.randn(2, 3, 4) * 1.5], "masked rows")


@pytest.mark.parametrize("scale", [1.5, 0.5], ids=["mixed", "all-inside"])
def test_masked_rows_run_in_the_cli(scale, tmp_path):
    torch.manual_seed(0)
    assert_cli_matches_eager(MaskedRows(), torch.randn(2, 3, 4) * scale, tmp_path, tol=1e-5)


class OverlappingChunks(nn.Module):
    """Longformer's `_chunk`: [batch·heads, seq, dim] (a transposed tensor) viewed as chunks of
    2w rows, then `as_strided` into chunks overlapping by w."""

    def __init__(self, w=2):
        super().__init__()
        self.w = w
        self.q = nn.Linear(8, 8)

    def forward(self, x):  # x: [seq, batch, 8]
        seq, batch, _ = x.shape
        h = self.q(x).view(seq, batch * 2, 4).transpose(0, 1)  # [batch·heads, seq, 4], not contiguous
        h = h.view(h.size(0), seq // (2 * self.w), 2 * self.w, 4)
        size = list(h.size())
        size[1] = size[1] * 2 - 1
        stride = list(h.stride())
        stride[1] = stride[1] // 2
        chunks = h.as_strided(size=size, stride=stride)
        return chunks.pow(2).sum(-1)


def test_overlapping_chunks_infer_like_eager():
    torch.manual_seed(0)
    assert_infers_like_eager(OverlappingChunks(), torch.randn(8, 2, 8))
    assert tpuc.stats().get("fallback_graphs", 0) == 0


def test_overlapping_chunks_train_like_eager():
    torch.manual_seed(0)
    assert_training_matches_eager(OverlappingChunks(), [torch.randn(8, 2, 8)], "overlapping chunks")


class CheckedData(nn.Module):
    def forward(self, x):
        d = x.pow(2) + 1
        torch._check_tensor_all(d > 0)
        return d.sqrt() * x


def test_checks_on_data_run_in_the_cli(tmp_path):
    torch.manual_seed(0)
    m = CheckedData()
    ep = torch.export.export(m, (torch.randn(3, 4),)).run_decompositions()
    targets = {str(n.target) for n in ep.graph.nodes}
    assert "aten._is_all_true.default" in targets and "aten._local_scalar_dense.default" in targets, targets
    assert_cli_matches_eager(m, torch.randn(3, 4), tmp_path, tol=1e-6)


class SplitWidths(nn.Module):
    """Sequencer's two branches of widths `w` and `32 - w`, joined after a graph break."""

    def __init__(self, w):
        super().__init__()
        self.a, self.b, self.fc = nn.Linear(32, w), nn.Linear(32, 32 - w), nn.Linear(32, 32)

    def forward(self, x):
        v, h = self.a(x), self.b(x)
        torch._dynamo.graph_break()
        return self.fc(torch.cat([v, h], -1))


def test_widths_split_across_a_graph_break_infer_like_eager():
    torch.manual_seed(0)
    assert_infers_like_eager(nn.Sequential(SplitWidths(8), SplitWidths(16), SplitWidths(20)), torch.randn(2, 5, 32))


def test_widths_split_across_a_graph_break_train_like_eager():
    # The backward cuts the join's gradient into `s` and `32 - s` columns.
    torch.manual_seed(0)
    m = nn.Sequential(SplitWidths(8), SplitWidths(16), SplitWidths(20))
    eager = copy.deepcopy(m)
    x = torch.randn(2, 5, 32)
    torch.compile(m, backend="tpuc", options=STRICT)(x).pow(2).sum().backward()
    eager(x).pow(2).sum().backward()
    for (name, p), q in zip(m.named_parameters(), eager.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-6, msg=lambda e: f"{name}: {e}")


class MaskedRowsScatter(nn.Module):
    """Higgs Audio's audio-token layers: `x.masked_scatter(mask, f(x[mask]))`."""

    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(8)

    def forward(self, x, mask):
        return x.masked_scatter(mask.unsqueeze(-1), self.norm(x[mask]))


def _masked_rows_scatter_inputs():
    torch.manual_seed(0)
    return torch.randn(2, 5, 8), torch.rand(2, 5) > 0.5


def test_masked_scatter_of_selected_rows_runs_in_the_cli(tmp_path):
    x, mask = _masked_rows_scatter_inputs()
    assert_cli_matches_eager(MaskedRowsScatter(), (x, mask), tmp_path, tol=1e-5)


def test_masked_scatter_of_selected_rows_infers_and_trains_like_eager():
    x, mask = _masked_rows_scatter_inputs()
    assert_infers_like_eager(MaskedRowsScatter(), x, mask)
    assert_training_matches_eager(MaskedRowsScatter(), [x, mask], "masked rows scattered")


class LengthsToMask(nn.Module):
    """VITS's duration predictor, reduced: lengths computed from the data, the output as long
    as the longest."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 1)

    def forward(self, x):  # x: [batch, time, 4]
        lengths = (self.proj(x).squeeze(-1) > 0).sum(-1) + 1
        pos = torch.arange(lengths.max())
        mask = (pos[None, :] < lengths[:, None]).float()
        return mask.cumsum(-1) * x.mean()


@pytest.mark.parametrize("time", [6, 9])
def test_a_size_read_from_the_data_runs_in_the_cli(time, tmp_path):
    torch.manual_seed(0)
    assert_cli_matches_eager(LengthsToMask(), torch.randn(2, time, 4), tmp_path, tol=1e-5)


def test_compiling_ahead_of_a_size_read_from_the_data_names_the_node(tmp_path):
    import subprocess

    from cli_check import TPUC

    m = LengthsToMask().eval()
    pt2 = str(tmp_path / "m.pt2")
    torch.export.save(torch.export.export(m, (torch.randn(2, 6, 4),)).run_decompositions(), pt2)
    p = subprocess.run([TPUC, "compile", pt2, "--no-cache"], capture_output=True, text=True)
    assert p.returncode != 0
    assert "_local_scalar_dense" in p.stderr and "sizes a tensor" in p.stderr and "test_corpus_patterns.py" in p.stderr, p.stderr


class RowsOfOneMaskTwice(nn.Module):
    """Higgs Audio's text rows: `x[~m] += f(x[~m])`, the mask inverted (and counted) twice."""

    def __init__(self):
        super().__init__()
        self.mlp = nn.Linear(8, 8)

    def forward(self, x, mask):
        h = x.clone()
        text = self.mlp(h[~mask])
        h[~mask] += text
        return h


def test_two_counts_of_one_mask_run_in_the_cli(tmp_path):
    x, mask = _masked_rows_scatter_inputs()
    assert_cli_matches_eager(RowsOfOneMaskTwice(), (x, mask), tmp_path, tol=1e-5)
