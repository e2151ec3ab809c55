"""Decompositions tpuc adds to core ATen's: some of torch's own (ops outside core ATen that its
table writes in ops tpuc lowers), and ones for fused CPU kernels torch does not decompose.

`nn.TransformerEncoderLayer` and `nn.MultiheadAttention` take PyTorch's "fast path" in inference
(`eval()` under `no_grad`): one fused op, `aten._transformer_encoder_layer_fwd` or
`aten._native_multi_head_attention`, which core ATen has no decomposition for. Written here in
the ops they are made of (linear, layer norm, masked softmax attention, GELU/ReLU), following
the kernels' semantics (aten/src/ATen/native/transformers): a mask is "masked where nonzero"
(the module passes additive float masks, the kernel converts them to bool), its `mask_type`
says its layout (0: `[L, L]`, 1: key padding `[B, L]`, 2: broadcastable to `[B, H, L, L]`),
and a fully masked row of attention weights is zero.
"""

from __future__ import annotations

import functools
import math

import torch
import torch.nn.functional as F

aten = torch.ops.aten


def _masked_softmax(scores: torch.Tensor, mask: torch.Tensor | None, mask_type: int | None) -> torch.Tensor:
    if mask is None:
        return torch.softmax(scores, dim=-1)
    masked = mask if mask.dtype == torch.bool else mask != 0
    b, h, lq, lk = scores.shape
    if mask_type == 1:  # key padding [B, Lk]
        masked = masked.reshape(b, 1, 1, lk)
    elif mask_type == 0:  # [Lq, Lk]
        masked = masked.reshape(1, 1, lq, lk)
    masked = masked.expand(b, h, lq, lk)
    s = scores.masked_fill(masked, float("-inf"))
    p = torch.softmax(s, dim=-1)
    # A row with every key masked is zero (softmax alone would make it NaN).
    return p.masked_fill(masked.all(dim=-1, keepdim=True), 0.0)


def native_multi_head_attention(query, key, value, embed_dim, num_head, qkv_weight, qkv_bias, proj_weight,
                                proj_bias, mask=None, need_weights=True, average_attn_weights=True,
                                mask_type=None):
    b, lq, e = query.shape
    d = embed_dim // num_head
    if query is key and key is value:
        q, k, v = F.linear(query, qkv_weight, qkv_bias).chunk(3, dim=-1)
    else:
        wq, wk, wv = qkv_weight.chunk(3, dim=0)
        bq, bk, bv = qkv_bias.chunk(3, dim=0)
        q, k, v = F.linear(query, wq, bq), F.linear(key, wk, bk), F.linear(value, wv, bv)

    def heads(t):
        return t.reshape(t.shape[0], t.shape[1], num_head, d).transpose(1, 2)

    q, k, v = heads(q), heads(k), heads(v)
    scores = torch.matmul(q / math.sqrt(d), k.transpose(-2, -1))
    p = _masked_softmax(scores, mask, mask_type)
    out = torch.matmul(p, v).transpose(1, 2).reshape(b, lq, e)
    out = F.linear(out, proj_weight, proj_bias)
    if not need_weights:
        return out, torch.empty(0, dtype=query.dtype, device=query.device)
    weights = p.mean(dim=1) if average_attn_weights else p
    return out, weights


def transformer_encoder_layer_fwd(src, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias,
                                  use_gelu, norm_first, eps, norm_weight_1, norm_bias_1, norm_weight_2,
                                  norm_bias_2, ffn_weight_1, ffn_bias_1, ffn_weight_2, ffn_bias_2, mask=None,
                                  mask_type=None):
    def norm(t, w, b):
        return F.layer_norm(t, (embed_dim,), w, b, eps)

    x = norm(src, norm_weight_1, norm_bias_1) if norm_first else src
    x = native_multi_head_attention(x, x, x, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias,
                                    mask, False, True, mask_type)[0]
    x = x + src
    if not norm_first:
        x = norm(x, norm_weight_1, norm_bias_1)
    residual = x
    if norm_first:
        x = norm(x, norm_weight_2, norm_bias_2)
    h = F.linear(x, ffn_weight_1, ffn_bias_1)
    h = F.gelu(h) if use_gelu else F.relu(h)
    x = F.linear(h, ffn_weight_2, ffn_bias_2) + residual
    if not norm_first:
        x = norm(x, norm_weight_2, norm_bias_2)
    return x


# Ops outside core ATen that torch's own decomposition table writes in ops tpuc lowers (checked
# by the OpInfo suite, tests/opinfo). grid_sampler_2d is core ATen and the front end lowers it
# (bilinear and nearest; the CLI takes it so): torch's decomposition is kept for bicubic.
FROM_TORCH = (
    aten._batch_norm_with_update_functional.default,
    aten.adaptive_max_pool3d.default,
    aten.dist.default,
    aten.grid_sampler_2d.default,
    aten.tril_indices.default,
    aten.triu_indices.default,
)


@functools.cache
def extra_decompositions() -> dict:
    """The table entries tpuc adds (op overload -> Python decomposition), built once."""
    from torch._decomp import get_decompositions

    table = get_decompositions(list(FROM_TORCH))
    table.update({
        aten._transformer_encoder_layer_fwd.default: transformer_encoder_layer_fwd,
        aten._native_multi_head_attention.default: native_multi_head_attention,
    })
    return table


def inline_custom_ops(gm: torch.fx.GraphModule) -> int:
    """Calls of custom ops whose implementation is Python code over ATen ops, replaced in
    Dynamo's graph by that code, which aot_autograd then traces (functionalized). Only for
    graphs that compute no gradients: the implementations write with `out=` ops autograd
    cannot differentiate, and the ops' own backward formulas need the op itself, so a training
    graph keeps the op (run eagerly between compiled parts, or refused under `strict`).
    Returns how many calls were replaced."""
    table = _inlined()
    n = 0
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target in table:
            node.target = table[node.target]
            n += 1
    if n:
        gm.recompile()
    return n


@functools.cache
def _inlined() -> dict:
    return _linear_cross_entropy()


def _linear_cross_entropy() -> dict:
    """`F.linear_cross_entropy`'s chunked custom ops as their own implementation: a Python loop
    over batch chunks of ATen ops (projection, log-softmax, the loss and, for the scalar
    reductions, the gradients it precomputes in its forward). Empty where this torch has no
    such op."""
    try:
        from torch.nn.modules import linear_cross_entropy as lce
        chunked = torch.ops.torch_nn._linear_cross_entropy_batch_chunked.default
        no_reduction = torch.ops.torch_nn._linear_cross_entropy_batch_chunked_no_reduction.default
        accumulate = lce._linear_cross_entropy_batch_chunked_accumulator
    except (ImportError, AttributeError):
        return {}

    def scalar(input, linear_weight, target, linear_bias, weight, reduction, ignore_index, label_smoothing,
               batch_chunk_size, acc_policy, acc_dtype, allow_retain_graph, compute_input_grad,
               compute_linear_weight_grad, compute_linear_bias_grad):
        return accumulate(input, linear_weight, target, linear_bias, weight, reduction, ignore_index,
                          label_smoothing, batch_chunk_size, acc_policy, acc_dtype, compute_input_grad,
                          compute_linear_weight_grad, compute_linear_bias_grad)

    def per_sample(input, linear_weight, target, linear_bias, weight, ignore_index, batch_chunk_size,
                   acc_policy, acc_dtype):
        return accumulate(input, linear_weight, target, linear_bias, weight, "none", ignore_index, 0.0,
                          batch_chunk_size, acc_policy, acc_dtype, compute_input_grad=False,
                          compute_linear_weight_grad=False, compute_linear_bias_grad=False)[0]

    return {chunked: scalar, no_reduction: per_sample}
