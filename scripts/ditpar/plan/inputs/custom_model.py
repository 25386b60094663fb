"""In-house models without a preset: a minimal TOML (templates/models/custom-example.toml) and CLI
overrides (--heads --kv-heads --layers --tokens) on any model; every other field gets a stated default."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from ditpar.errors import InputError
from ditpar.plan.inputs.presets import ModelPreset, _read_toml

REQUIRED = ("name", "heads", "kv_heads", "head_dim", "layers", "hidden", "ffn", "text_tokens", "cfg")
# stated defaults of every other field (references/parallel-selection.md, "Describe an in-house model")
DEFAULTS = {"text_attention": "cross", "ffn_matrices": 2, "latent_channels": 16, "steps": 50,
            "experts": 1, "text_encoder_params_b": 0.0}


def _int(data: dict, key: str, path, minimum: int = 1) -> int:
    v = data.get(key)
    if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
        raise InputError(f"{path}: key '{key}' must be an integer >= {minimum}, got {v!r}")
    return v


def block_params(hidden: int, heads: int, kv_heads: int, head_dim: int, ffn: int, mats: int, cross: bool) -> float:
    """Weights of one block: QKV + output projections (+ cross-attention Q, K, V, O) + MLP."""
    dq, dkv = heads * head_dim, kv_heads * head_dim
    attn = hidden * (dq + 2 * dkv) + dq * hidden
    return attn * (2 if cross else 1) + mats * hidden * ffn


def load(path_text: str) -> ModelPreset:
    """ModelPreset from a minimal model file; a missing or bad key is one InputError naming it."""
    path = Path(path_text)
    data = _read_toml(path)
    missing = [k for k in REQUIRED if k not in data]
    if missing:
        raise InputError(f"{path}: missing key(s) {', '.join(missing)} (template: templates/models/custom-example.toml)")
    has_tokens, has_latent = "tokens" in data, "latent" in data
    if has_tokens == has_latent:
        raise InputError(f"{path}: give either 'tokens' or 'latent' = [t, h, w] with 'patch' = [t, h, w]")
    if not isinstance(data["name"], str) or not data["name"].strip():
        raise InputError(f"{path}: key 'name' must be a non-empty string")
    if not isinstance(data["cfg"], bool):
        raise InputError(f"{path}: key 'cfg' must be true or false, got {data['cfg']!r}")
    heads, kv, hd = (_int(data, k, path) for k in ("heads", "kv_heads", "head_dim"))
    layers, hidden, ffn = (_int(data, k, path) for k in ("layers", "hidden", "ffn"))
    text = _int(data, "text_tokens", path, minimum=0)
    if heads % kv:
        raise InputError(f"{path}: key 'kv_heads' ({kv}) must divide 'heads' ({heads})")
    opts = {k: data.get(k, v) for k, v in DEFAULTS.items()}
    if opts["text_attention"] not in ("cross", "joint"):
        raise InputError(f"{path}: key 'text_attention' must be 'cross' or 'joint', got {opts['text_attention']!r}")
    mats = opts["ffn_matrices"]
    if mats not in (2, 3):
        raise InputError(f"{path}: key 'ffn_matrices' must be 2 or 3, got {mats!r}")
    if has_tokens:
        tokens = _int(data, "tokens", path)
        grid, patch = (1, 1, tokens), (1, 1, 1)
    else:
        grid, patch = (_triple(data, k, path) for k in ("latent", "patch"))
    cross = opts["text_attention"] == "cross" and text > 0
    kind = "cross" if cross else ("joint" if text > 0 else "self")
    params_b = layers * block_params(hidden, heads, kv, hd, ffn, mats, cross) / 1e9
    if "params_b" in data:
        params_b = float(data["params_b"])
    t, h, w = grid
    return ModelPreset(
        name=data["name"], aliases=(), kind="video" if t > 1 else "image", params_b=params_b, hidden=hidden,
        heads=heads, kv_heads=kv, head_dim=hd, ffn=ffn, blocks={kind: layers},
        text_joint_tokens=text if kind == "joint" else 0, text_cross_tokens=text if cross else 0,
        latent_channels=_int(opts, "latent_channels", path), patch=patch, vae_stride=(1, 1, 1),
        vae_temporal_causal=False, cfg_default=data["cfg"], default_width=w, default_height=h,
        default_frames=t, default_steps=_int(opts, "steps", path),
        sources={"model": f"{path} (in-house model file; params_b derived from widths unless given)"},
        experts=_int(opts, "experts", path), ffn_matrices=mats, family=str(data.get("family", "custom")),
        text_encoder_params_b=float(opts["text_encoder_params_b"]),
        notes="in-house model: the sizes in --resolution are latent grid units, not pixels", path=str(path))


def _triple(data: dict, key: str, path) -> tuple[int, int, int]:
    v = data.get(key)
    if not (isinstance(v, list) and len(v) == 3 and all(isinstance(x, int) and not isinstance(x, bool) and x > 0
                                                        for x in v)):
        raise InputError(f"{path}: key '{key}' must be three positive integers [t, h, w], got {v!r}")
    return (v[0], v[1], v[2])


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
