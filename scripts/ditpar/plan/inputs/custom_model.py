"""In-house models without a preset: a minimal TOML (templates/models/custom-example.toml) and CLI
overrides (--heads --kv-heads --layers --tokens) on any model; every other field gets a stated default."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from ditpar.errors import InputError
from ditpar.plan.inputs import schema
from ditpar.plan.inputs.presets import ModelPreset, _read_toml

REQUIRED = ("name", "heads", "kv_heads", "head_dim", "layers", "cfg")
# widths a model file may leave out, each with the estimate used and why (every DiT preset has hidden =
# heads x head_dim; a plain MLP is 4x wide; 512 is T5's usual maximum prompt length)
ESTIMATES = {"hidden": "heads x head_dim", "ffn": "4 x hidden", "text_tokens": "512 (T5's usual maximum prompt length)"}
# stated defaults of every other field (references/parallel-selection.md, "Describe an in-house model")
DEFAULTS = {"attention": "softmax", "text_attention": "cross", "ffn_matrices": 2, "latent_channels": 16, "steps": 50,
            "experts": 1, "text_encoder_params_b": 0.0}


def block_params(hidden: int, heads: int, kv_heads: int, head_dim: int, ffn: int, mats: int, cross: bool) -> float:
    """Weights of one block: QKV + output projections (+ cross-attention Q, K, V, O) + MLP."""
    dq, dkv = heads * head_dim, kv_heads * head_dim
    attn = hidden * (dq + 2 * dkv) + dq * hidden
    return attn * (2 if cross else 1) + mats * hidden * ffn


def load(path_text: str) -> ModelPreset:
    """ModelPreset from a minimal model file; a missing, unknown or bad key is one InputError naming it
    (types and ranges: plan/inputs/schema.py CUSTOM_MODEL)."""
    path = Path(path_text)
    data = _read_toml(path)
    missing = [k for k in REQUIRED if k not in data]
    if missing:
        raise InputError(f"{path}: missing key(s) {', '.join(missing)} (template: templates/models/custom-example.toml)")
    schema.check(data, schema.CUSTOM_MODEL, path)
    has_tokens, has_latent = "tokens" in data, "latent" in data
    if has_tokens == has_latent or has_latent != ("patch" in data):
        raise InputError(f"{path}: give either 'tokens' or 'latent' = [t, h, w] with 'patch' = [t, h, w]")
    heads, kv, hd, layers = (data[k] for k in ("heads", "kv_heads", "head_dim", "layers"))
    hidden = data.get("hidden", heads * hd)
    ffn = data.get("ffn", 4 * hidden)
    text = data.get("text_tokens", 512)
    estimated = [f"{k} = {ESTIMATES[k]}" for k in ESTIMATES if k not in data]
    if heads % kv:
        raise InputError(f"{path}: key 'kv_heads' ({kv}) must divide 'heads' ({heads})")
    opts = {k: data.get(k, v) for k, v in DEFAULTS.items()}
    mats = opts["ffn_matrices"]
    if has_tokens:
        grid, patch = (1, 1, data["tokens"]), (1, 1, 1)
    else:
        grid, patch = tuple(data["latent"]), tuple(data["patch"])
    cross = opts["text_attention"] == "cross" and text > 0
    kind = "cross" if cross else ("joint" if text > 0 else "self")
    params_b = float(data.get("params_b", layers * block_params(hidden, heads, kv, hd, ffn, mats, cross) / 1e9))
    t, h, w = grid
    return ModelPreset(
        name=data["name"], aliases=(), kind="video" if t > 1 else "image", params_b=params_b, hidden=hidden,
        heads=heads, kv_heads=kv, head_dim=hd, ffn=ffn, blocks={kind: layers},
        text_joint_tokens=text if kind == "joint" else 0, text_cross_tokens=text if cross else 0,
        latent_channels=opts["latent_channels"], patch=patch, vae_stride=(1, 1, 1),
        vae_temporal_causal=False, cfg_default=data["cfg"], default_width=w, default_height=h,
        default_frames=t, default_steps=opts["steps"],
        sources={"model": f"{path} (in-house model file; params_b derived from widths unless given)",
                 **({"estimated": "; ".join(estimated)} if estimated else {})},
        experts=opts["experts"], ffn_matrices=mats, family=data.get("family", "custom"), attention=opts["attention"],
        text_encoder_params_b=float(opts["text_encoder_params_b"]),
        notes="in-house model: the sizes in --resolution are latent grid units, not pixels", path=str(path))


def override(model: ModelPreset, *, heads: int | None = None, kv_heads: int | None = None,
             layers: int | None = None) -> ModelPreset:
    """The model with --heads / --kv-heads / --layers applied; weights re-derived for the change."""
    if heads is None and kv_heads is None and layers is None:
        return model
    for flag, v in (("--heads", heads), ("--kv-heads", kv_heads), ("--layers", layers)):
        if v is not None and v < 1:
            raise InputError(f"{flag} {v}: expected a positive integer")
    h = heads or model.heads
    kv = kv_heads or (model.kv_heads if heads is None or h % model.kv_heads == 0 else h)
    if h % kv:
        raise InputError(f"--kv-heads {kv} must divide --heads {h}")
    blocks = dict(model.blocks)
    if layers is not None:
        if len(blocks) != 1:
            raise InputError(f"--layers: {model.name} has block kinds {', '.join(blocks)}; describe it in a "
                             f"--model-file instead")
        blocks = {next(iter(blocks)): layers}
    cross = next(iter(model.blocks)).startswith("cross")
    mats = model.ffn_matrices
    old = model.n_layers * block_params(model.hidden, model.heads, model.kv_heads, model.head_dim, model.ffn,
                                        mats, cross)
    new = sum(blocks.values()) * block_params(model.hidden, h, kv, model.head_dim, model.ffn, mats, cross)
    return dataclasses.replace(model, heads=h, kv_heads=kv, blocks=blocks,
                               params_b=model.params_b * new / old,
                               name=f"{model.name} (overridden)")


def with_tokens(shape, tokens: int | None):
    """The shape with --tokens image/video tokens (one frame of that many tokens)."""
    if tokens is None:
        return shape
    if tokens < 1:
        raise InputError(f"--tokens {tokens}: expected a positive integer")
    return dataclasses.replace(shape, frames_tok=1, tokens_per_frame=int(tokens))
