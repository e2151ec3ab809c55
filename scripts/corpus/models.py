"""The corpus: every model type of transformers' AutoModel mapping and one model per timm module,
built small from its default config by rules written once (`shrink`), with random weights and
fixed seeds, and the inputs each one takes (`inputs_for`). Nothing is downloaded.

A family is named `hf:<model_type>` or `timm:<module>`.
"""

from __future__ import annotations

import torch

# Config attributes, by what they mean, and the value a small model gets. A value is only ever
# lowered (an attribute already smaller stays), and lists shrink element by element.
WIDTH = 32
RULES: dict[str, int] = {}
EXPERTS = ("num_experts", "n_routed_experts", "num_local_experts", "moe_num_experts")
RULE_LAYERS = ("num_hidden_layers", "n_layer", "num_layers", "encoder_layers", "decoder_layers", "n_layers",
               "num_decoder_layers", "num_encoder_layers", "depth", "num_blocks")
for _names, _value in [
    (("hidden_size", "d_model", "n_embd", "dim", "embed_dim", "embedding_size", "hidden_dim", "projection_dim",
      "text_embed_dim", "vision_embed_dim", "d_embed", "word_embed_proj_dim", "emb_dim", "encoder_hidden_size",
      "embedding_dim", "model_dim", "proj_dim", "qk_rope_head_dim", "kv_lora_rank", "q_lora_rank"), WIDTH),
    (("intermediate_size", "ffn_dim", "d_ff", "encoder_ffn_dim", "decoder_ffn_dim", "n_inner", "mlp_dim",
      "moe_intermediate_size", "shared_expert_intermediate_size", "d_inner", "ff_dim", "inner_dim",
      "decoder_intermediate_size"), 2 * WIDTH),
    (RULE_LAYERS, 2),
    (("num_attention_heads", "n_head", "encoder_attention_heads", "decoder_attention_heads", "num_heads",
      "n_heads", "attention_heads", "linear_num_heads", "linear_num_key_heads", "linear_num_value_heads",
      "index_n_heads"), 4),
    (("num_key_value_heads", "num_kv_heads", "n_kv_heads"), 2),
    (("head_dim", "v_head_dim", "qk_nope_head_dim", "attention_head_size", "d_kv", "linear_head_dim",
      "linear_key_head_dim", "linear_value_head_dim", "index_head_dim"), 8),
    (("vocab_size", "n_vocab"), 512),
    (EXPERTS, 4),
    (("num_experts_per_tok", "moe_topk", "top_k"), 2),
    (("image_size", "img_size"), 32),
    (("num_mel_bins", "n_mels"), 16),
]:
    for _n in _names:
        RULES[_n] = _value

# Sizes only the constructor's config gets (see `configs`): group norms' groups must divide
# channels the rules made small; a head's rotary part must fit in the head.
INIT_RULES = {"num_groups": 4, "num_channels_groups": 4, "qk_rope_head_dim": 4}

# Per-type overrides, applied after the rules: only what the rules cannot know.
OVERRIDES: dict[str, dict] = {
    # Patch sizes that do not divide the shrunk image.
    "vit": {"patch_size": 4},
    "deit": {"patch_size": 4},
    "beit": {"patch_size": 4},
}

SEQ = 16
BATCH = 2
# Parameters above which a timm model is cut to two blocks (see `_build_timm`).
BIG = 100_000_000


def hf_families() -> list[str]:
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    return [f"hf:{t}" for t in sorted(MODEL_MAPPING_NAMES)]


def timm_families() -> list[str]:
    try:
        from timm.models import _registry
    except ImportError:
        return []
    return [f"timm:{m}" for m in sorted(_registry._module_to_models) if _registry._module_to_models[m]]


def families() -> list[str]:
    return hf_families() + timm_families()


def _shrink_value(name: str, value):
    lname = name.lower()
    if isinstance(value, float) and ("dropout" in lname or "pdrop" in lname or "drop_rate" in lname
                                     or "drop_path" in lname or "layerdrop" in lname):
        return 0.0
    if isinstance(value, bool) or name not in RULES:
        if isinstance(value, (list, tuple)) and name in ("hidden_sizes", "embed_dims", "dims", "channels"):
            return type(value)(min(v, WIDTH) if isinstance(v, int) else v for v in value)
        if isinstance(value, (list, tuple)) and name in ("depths", "num_layers_per_block", "layers"):
            return type(value)(min(v, 1) if isinstance(v, int) else v for v in value)
        return value
    want = RULES[name]
    if isinstance(value, int) and value > want:
        return want
    return value


def shrink(config, model_type: str = ""):
    """Shrinks `config` (and every sub-config) in place by RULES, then the type's OVERRIDES."""
    from transformers import PretrainedConfig

    for name, value in list(vars(config).items()):
        if isinstance(value, PretrainedConfig):
            shrink(value)
        elif isinstance(value, dict) and "model_type" in value:
            continue
        else:
            try:
                setattr(config, name, _shrink_value(name, value))
            except (AttributeError, TypeError, ValueError):
                pass
    return _finish(config, model_type)


def _finish(config, model_type: str):
    """What every shrunk config gets after its sizes: lists cut to the layers, token ids inside
    the vocabulary, no cache, then the type's OVERRIDES."""
    # Lists tied to the number of layers.
    n = getattr(config, "num_hidden_layers", None)
    v = getattr(config, "layer_types", None)
    if isinstance(v, list) and isinstance(n, int) and len(v) > n:
        try:
            config.layer_types = v[:n]
        except AttributeError:  # derived from other attributes (Mamba's)
            pass
    # Token ids must exist in the shrunk vocabulary.
    vocab = getattr(config, "vocab_size", None)
    if isinstance(vocab, int):
        for name in ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id", "sep_token_id",
                     "cls_token_id", "mask_token_id"):
            v = getattr(config, name, None)
            if isinstance(v, int) and v >= vocab:
                setattr(config, name, vocab - 1 - ("pad" in name))
            elif isinstance(v, list):
                setattr(config, name, [min(x, vocab - 1) for x in v])
    # No key-value cache in the outputs (torch.export cannot return one; eager needs none).
    if hasattr(config, "use_cache"):
        config.use_cache = False
    for k, v in OVERRIDES.get(model_type, {}).items():
        setattr(config, k, v)
    return config


def _shrunk_kwargs(config_cls):
    """The constructor arguments of a config class at their defaults, shrunk by RULES; a
    sub-config's recursively (as a config of its own class)."""
    import inspect

    from transformers import PretrainedConfig

    default = config_cls()
    kw = {}
    for name in inspect.signature(config_cls.__init__).parameters:
        if name in ("self", "kwargs", "args") or not hasattr(default, name):
            continue
        value = getattr(default, name)
        if isinstance(value, PretrainedConfig):
            kw[name] = _finish(type(value)(**_shrunk_kwargs(type(value))), "")
        elif isinstance(value, dict) and "model_type" in value:
            continue
        else:
            kw[name] = _shrink_value(name, value)
    # Lists with an entry per layer (`layer_types`), cut to the layers kept.
    layers = next((k for k in RULE_LAYERS if isinstance(kw.get(k), int)), None)
    if layers:
        was = getattr(default, layers)
        for name, value in kw.items():
            if isinstance(value, (list, tuple)) and len(value) == was and was > kw[layers]:
                kw[name] = type(value)(value[: kw[layers]])
    for name, value in INIT_RULES.items():
        if isinstance(kw.get(name), int) and kw[name] > value:
            kw[name] = value
    # Parts of a head the defaults have equal stay equal, at the smaller of their shrunk
    # values (Mistral 4's rotary and non-rotary halves).
    shrunk = {n: v for n, v in kw.items()
              if n.endswith("head_dim") and isinstance(v, int) and not isinstance(v, bool) and v != getattr(default, n)}
    for a in shrunk:
        for b in shrunk:
            if a < b and getattr(default, a) == getattr(default, b):
                kw[a] = kw[b] = min(kw[a], kw[b])
    # Heads that divide the width at every stage (Swin's 3, 6, 12, 24 over widths 32, 64, ...):
    # rounded down to powers of two.
    for name in ("num_attention_heads", "num_heads", "n_head"):
        v = kw.get(name)
        if isinstance(v, (list, tuple)) and v and all(isinstance(h, int) and h > 0 for h in v):
            kw[name] = type(v)(1 << (h.bit_length() - 1) for h in v)
        elif isinstance(v, int) and v > 0 and v & (v - 1):
            kw[name] = 1 << (v.bit_length() - 1)
    # Relations the defaults hold, kept: as many key-value heads as heads (MLA's keys are
    # per head; None means as many), expert groups that divide the experts.
    for heads, kv in (("num_attention_heads", "num_key_value_heads"), ("n_head", "n_kv_heads")):
        if heads in kw and kv in kw and getattr(default, kv) in (None, getattr(default, heads)):
            kw[kv] = kw[heads]
    experts = next((kw[k] for k in EXPERTS if isinstance(kw.get(k), int)), None)
    if experts and isinstance(kw.get("n_group"), int) and experts % kw["n_group"]:
        kw["n_group"] = 1
    if isinstance(kw.get("topk_group"), int) and isinstance(kw.get("n_group"), int):
        kw["topk_group"] = min(kw["topk_group"], kw["n_group"])
    return kw


def _fit_rope_sections(config) -> None:
    """Multimodal rotary sections (`mrope_section`) split half the head dim: scaled down with
    it, in the same proportions."""
    for holder in (config, getattr(config, "text_config", None)):
        if holder is None:
            continue
        heads, width = getattr(holder, "num_attention_heads", None), getattr(holder, "hidden_size", None)
        hd = getattr(holder, "head_dim", None)
        if not isinstance(hd, int):
            hd = width // heads if isinstance(heads, int) and heads and isinstance(width, int) else 0
        for attr in ("rope_parameters", "rope_scaling"):
            rp = getattr(holder, attr, None)
            if not isinstance(rp, dict):
                continue
            # Absent, the model takes Qwen2-VL's [16, 24, 24] of a 128-wide head.
            uses = "mrope_section" in getattr(type(holder), "ignore_keys_at_rope_validation", ())
            sec = rp.get("mrope_section") or ([16, 24, 24] if uses else None)
            rotary = int(hd * rp.get("partial_rotary_factor", getattr(holder, "partial_rotary_factor", 1.0) or 1.0))
            if not sec or not rotary or sum(sec) == rotary // 2:
                continue
            half, total = rotary // 2, sum(sec)
            new = [max(1, v * half // total) for v in sec]
            new[0] += half - sum(new)
            rp["mrope_section"] = new


def configs(name: str):
    """The shrunk configs to try for a transformers type, in order: RULES set on the default
    config's attributes; then RULES given to the config's constructor, which recomputes what
    it derives (MLA's `head_dim` from `qk_rope_head_dim`, say) and so keeps it consistent."""
    import transformers

    cls = transformers.CONFIG_MAPPING[name]
    yield lambda: shrink(cls(), name)

    def by_init():
        config = _finish(cls(**_shrunk_kwargs(cls)), name)
        _fit_rope_sections(config)
        return config

    yield by_init


def _runs_eagerly(model, kwargs) -> bool:
    """Whether the model's eval forward runs on its inputs (the global RNG, the model's mode
    and its weights as they were)."""
    rng, mode = torch.get_rng_state(), model.training
    try:
        with torch.no_grad():
            model.eval()(**kwargs)
        return True
    except Exception:  # noqa: BLE001 - the next shrunk config is tried
        return False
    finally:
        model.train(mode)
        torch.set_rng_state(rng)


def build(family: str, head: bool):
    """(model, kwargs, has_loss) for a family; `head` picks a task head that computes a loss
    from `labels`, where the type has one: the first of `configs`, and of the inputs for it
    (the main input alone, then with every other input kind the forward takes), whose model
    runs eagerly (else the first that builds). Raises where the harness cannot build it."""
    kind, name = family.split(":", 1)
    if kind == "timm":
        torch.manual_seed(0)
        return _build_timm(name)
    first, error = None, None
    for make in configs(name):
        try:
            model, config, task = _build_hf(name, make, head)
            main = _with_labels(inputs_for(model, config), config, task)
        except Exception as e:  # noqa: BLE001
            error = error or e
            continue
        if _runs_eagerly(model, main):
            return model, main, task is not None
        # The other input kinds beside the same main inputs and labels.
        every = {**inputs_for(model, config, every_kind=True), **main}
        if every.keys() != main.keys() and _runs_eagerly(model, every):
            return model, every, task is not None
        first = first or (model, main, task is not None)
    if first is None:
        raise error
    return first


def _with_labels(kwargs: dict, config, task) -> dict:
    """The inputs with the labels a task head computes its loss from."""
    if task == "causal" and "input_ids" in kwargs:
        kwargs["labels"] = kwargs["input_ids"]
    elif task in ("seqcls", "imgcls"):
        kwargs["labels"] = torch.randint(0, max(getattr(config, "num_labels", 2), 1), (BATCH,))
    return kwargs


def _build_hf(name: str, make_config, head: bool):
    """(model, config, task) of a transformers type from a shrunk config: the task head that
    computes a loss where `head` asks for one and the type has it."""
    torch.manual_seed(0)
    import transformers
    from transformers.models.auto import modeling_auto as ma

    config = make_config()
    cls_name, task = ma.MODEL_MAPPING_NAMES[name], None
    if head:
        for mapping, t in ((ma.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, "causal"),
                           (ma.MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES, "seqcls"),
                           (ma.MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES, "imgcls")):
            if name in mapping:
                cls_name, task = mapping[name], t
                break
    if isinstance(cls_name, (list, tuple)):
        cls_name = cls_name[0]
    cls = getattr(transformers, cls_name)
    model = cls(config)
    _draw_zero_routers(model)
    return model, config, task


def _draw_zero_routers(model) -> None:
    """Draws mixture-of-experts router weights that a config initialises to zeros (afmoe's), as
    a trained checkpoint has them. A zero router gives every expert the same score, so every
    token's top-k is a full tie, and which tied experts win is the kernel's own order (CPU
    torch: `std::nth_element`'s; CUDA torch and XLA: the lowest indices). Comparing that says
    nothing about the compiler; tests/python/test_afmoe.py pins the tie rule separately."""
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "router" in name and p.dim() >= 2 and p.numel() and bool((p == 0).all()):
                p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.02)


SMALL = ("atto", "femto", "pico", "nano", "tiny", "mini", "small", "xs", "18", "10", "b0", "002", "050")


def _smallest(names: list[str]) -> str:
    """The model of a timm module that its name says is smallest (the first of SMALL that a
    name has as a word or a number of its own), else the shortest name."""
    import re

    for word in SMALL:
        pat = rf"(?<!\d){word}(?!\d)" if word[0].isdigit() else rf"(^|[_\-.]){word}"
        hits = [n for n in names if re.search(pat, n)]
        if hits:
            return min(sorted(hits), key=len)
    return min(sorted(names), key=len)


def _build_timm(module: str):
    """The module's smallest model, 10 classes, no dropout, at 64x64 where it takes that (ViTs
    are built for it), else at its default input size."""
    import timm
    from timm.models import _registry

    name = _smallest(sorted(_registry._module_to_models[module]))
    kw = dict(pretrained=False, num_classes=10, drop_rate=0.0)

    def create(**extra):
        try:
            return timm.create_model(name, img_size=64, **kw, **extra)
        except TypeError:
            return timm.create_model(name, **kw, **extra)

    model = create()
    if sum(p.numel() for p in model.parameters()) > BIG:
        # A module whose smallest model is large (a 412M-parameter ViT) keeps two blocks where
        # its constructor takes a depth, else a quarter of its channels where it rounds them
        # (EfficientNet-style builders): trained with AdamW it would not fit this machine.
        import functools

        from timm.models._efficientnet_builder import round_channels

        for extra in ({"depth": 2}, {"round_chs_fn": functools.partial(round_channels, multiplier=0.25)}):
            try:
                torch.manual_seed(0)
                model = create(**extra)
                break
            except (TypeError, ValueError, AssertionError):
                continue
    c, h, w = getattr(model, "pretrained_cfg", None) and model.pretrained_cfg.get("input_size") or (3, 224, 224)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(BATCH, c, 64, 64, generator=g)
    try:
        with torch.no_grad():
            model.eval()(x)
    except Exception:  # noqa: BLE001 - a model that needs its own input size gets it
        x = torch.randn(BATCH, c, h, w, generator=g)
    return model, {"x": x}, False


def inputs_for(model, config, every_kind: bool = False) -> dict:
    """The inputs of the model's main input kind, made from its config; with `every_kind`, also
    those of every other kind its forward takes (CLIP's pixel values beside its text)."""
    import inspect

    g = torch.Generator().manual_seed(1)
    main = getattr(model, "main_input_name", "input_ids")
    if main not in INPUT_KINDS:
        raise NotImplementedError(f"no inputs for main input {main!r}")
    kinds = [main]
    if every_kind:
        takes = inspect.signature(model.forward).parameters
        kinds += [k for k in INPUT_KINDS if k != main and k in takes]
    kw = {}
    for k in kinds:
        kw.update(INPUT_KINDS[k](config, g))
    return kw


def _token_inputs(config, g) -> dict:
    vocab = getattr(config, "vocab_size", None) or getattr(getattr(config, "text_config", None), "vocab_size", 512)
    ids = torch.randint(3, max(vocab - 2, 4), (BATCH, SEQ), generator=g)
    kw = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    if getattr(config, "is_encoder_decoder", False):
        kw["decoder_input_ids"] = ids  # a base encoder-decoder has no labels to shift
    return kw


def _image_inputs(config, g) -> dict:
    vision = getattr(config, "vision_config", None) or config
    c = getattr(vision, "num_channels", 3)
    s = getattr(vision, "image_size", 32)
    s = s[0] if isinstance(s, (list, tuple)) else s
    return {"pixel_values": torch.randn(BATCH, c, s, s, generator=g)}


def _feature_inputs(config, g) -> dict:
    mel = getattr(config, "num_mel_bins", 16)
    frames = 2 * getattr(config, "max_source_positions", 50)
    return {"input_features": torch.randn(BATCH, mel, frames, generator=g)}


# A maker of inputs per kind (the forward argument that names it).
INPUT_KINDS = {
    "input_ids": _token_inputs,
    "pixel_values": _image_inputs,
    "input_values": lambda config, g: {"input_values": torch.randn(BATCH, 1600, generator=g)},
    "input_features": _feature_inputs,
}


def first_float(out):
    """The first floating tensor of a model output (the loss of a head, else its main output)."""
    if isinstance(out, torch.Tensor):
        return out if out.is_floating_point() else None
    vals = out.values() if isinstance(out, dict) else out.to_tuple() if hasattr(out, "to_tuple") else out
    for v in vals:
        t = first_float(v) if isinstance(v, (torch.Tensor, tuple, list, dict)) else None
        if t is not None:
            return t
    return None


def flat_tensors(out) -> list[torch.Tensor]:
    """Every tensor of a model output, in order."""
    if isinstance(out, torch.Tensor):
        return [out]
    if hasattr(out, "to_tuple"):
        out = out.to_tuple()
    if isinstance(out, dict):
        out = list(out.values())
    if isinstance(out, (tuple, list)):
        return [t for v in out for t in flat_tensors(v)]
    return []
