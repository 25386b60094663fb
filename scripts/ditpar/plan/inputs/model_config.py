"""A model from its own diffusers config (plan.py --model-config): a ModelPreset read from a model folder
(model_index.json, transformer/config.json, vae/config.json, the text encoders' config.json) or from one
transformer config.json. Disk only, never the network, never the weights; every file through
ditpar.formats.load_json (one InputError per parser failure).

Each diffusers transformer class the frameworks run is mapped from its __init__ keys
(huggingface/diffusers@58eb52c0803ea9af3abec60841c2a093bdf1f951:src/diffusers/models/transformers/<file>, named
per class in CLASSES). A class not listed is read from the generic keys (num_attention_heads,
attention_head_dim, num_layers, ...) and every guessed field is named in a warning. A missing key that
nothing can stand in for is one InputError naming the key, the file and the plan.py flag that supplies it.
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ditpar import formats, limits
from ditpar.errors import InputError
from ditpar.plan.inputs import not_dit, schema
from ditpar.plan.inputs.presets import ModelPreset, VaeSpec

DIFFUSERS = "huggingface/diffusers@58eb52c0803ea9af3abec60841c2a093bdf1f951"
TRANSFORMERS = f"{DIFFUSERS}:src/diffusers/models/transformers/"
PIPELINES = f"{DIFFUSERS}:src/diffusers/pipelines/"
AUTOENCODERS = f"{DIFFUSERS}:src/diffusers/models/autoencoders/"

# flags of plan.py that stand in for a key the config lacks
FLAG = {"heads": "--heads", "kv_heads": "--kv-heads", "layers": "--layers", "tokens": "--tokens"}

#: the model fields --json prints (plan.py: model_fields) and a preset file takes
FIELDS = ("name", "kind", "family", "params_b", "experts", "text_encoder_params_b", "hidden", "heads", "kv_heads",
          "head_dim", "ffn", "ffn_matrices", "attention", "blocks", "text_joint_tokens", "text_cross_tokens",
          "image_cross_tokens", "latent_channels", "patch", "vae_stride", "vae_temporal_causal", "cfg_default",
          "default_width", "default_height", "default_frames", "default_steps")


class _Config:
    """One parsed config.json with its path: typed reads whose errors name the key and the file."""

    def __init__(self, data: Any, path: Path, supplied: Mapping[str, int | None] | None = None):
        if not isinstance(data, dict):
            raise InputError(f"{path}: expected a JSON object (a diffusers config.json)")
        self.data, self.path, self.supplied = data, path, dict(supplied or {})
        self.guessed: list[str] = []

    def has(self, key: str) -> bool:
        return self.data.get(key) is not None

    def int(self, key: str, default: int | None = None, *, flag: str = "", lo: int = 0, hi: int = 1 << 24) -> int:
        """An integer key; missing: the flag's value, else the default, else one InputError naming key and flag."""
        value = self.data.get(key)
        if value is None:
            if flag and self.supplied.get(flag) is not None:
                return int(self.supplied[flag])
            if default is not None:
                return default
            hint = f"; give {FLAG[flag]} N" if flag else ""
            raise InputError(f"{self.path}: key '{key}' is missing{hint}")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value) \
                or not lo <= int(value) <= hi:
            raise InputError(f"{self.path}: key '{key}' = {value!r}; expected an integer in [{lo}, {hi}]")
        return int(value)

    def num(self, key: str, default: float) -> float:
        value = self.data.get(key)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                or not 0 < value < 1e6:
            raise InputError(f"{self.path}: key '{key}' = {value!r}; expected a positive number")
        return float(value)

    def ints(self, key: str, default: tuple[int, ...] | None = None) -> tuple[int, ...]:
        value = self.data.get(key)
        if value is None:
            if default is None:
                raise InputError(f"{self.path}: key '{key}' is missing")
            return default
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            value = [value]
        if not isinstance(value, list) or not value or not all(
                isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 1 << 20 for v in value):
            raise InputError(f"{self.path}: key '{key}' = {value!r}; expected a list of integers")
        return tuple(value)

    def flag_bool(self, key: str, default: bool) -> bool:
        value = self.data.get(key)
        return default if value is None else bool(value)

    def guess(self, what: str, value: Any) -> Any:
        self.guessed.append(f"{what} = {value}")
        return value


@dataclass(frozen=True)
class Dims:
    """What the cost model needs of one transformer, read from its config."""

    heads: int
    kv_heads: int
    head_dim: int
    hidden: int
    ffn: int                     # FFN inner width one token runs through (the active experts' sum)
    ffn_matrices: int
    blocks: dict[str, int]
    patch: tuple[int, int, int]  # on the VAE latent (2x2 packing of FLUX-style models included)
    in_channels: int
    ffn_params: int = 0          # FFN inner width held in memory (all experts; 0 = ffn)
    attention: str = "softmax"
    modulation: float = 0.0      # adaLN weights per block in units of hidden^2 (FLUX joint 12, single 3)
    notes: str = ""


@dataclass(frozen=True)
class ClassSpec:
    """One diffusers transformer class: how its keys map, and the pipeline defaults its config does not hold."""

    family: str                  # a family the framework profiles list, else 'custom' (only their '*' forms run it)
    source: str                  # the file read in diffusers
    read: Callable[[_Config], Dims]
    kind: str                    # image | video
    text_tokens: int             # text tokens that join attention or are cross-attended (pipeline default)
    text_source: str
    text_mode: str               # joint | cross
    cfg: bool
    shape: tuple[int, int, int, int]   # default width, height, frames, steps
    packed: bool = False         # 2x2 latent patches packed into channels by the pipeline (FLUX, Qwen-Image)


def _ffn_mult(c: _Config, hidden: int, key: str = "mlp_ratio", default: float = 4.0) -> int:
    return int(hidden * c.num(key, default))


def _heads(c: _Config, hkey: str = "num_attention_heads", dkey: str = "attention_head_dim") -> tuple[int, int, int]:
    heads = c.int(hkey, flag="heads", lo=1, hi=limits.MAX_HEADS)
    head_dim = c.int(dkey, lo=1, hi=4096)
    kv = c.supplied.get("kv_heads") or heads
    return heads, kv, head_dim


def _patch(c: _Config, key: str = "patch_size", tkey: str = "patch_size_t") -> tuple[int, int, int]:
    p = c.data.get(key)
    if isinstance(p, list):
        got = c.ints(key)
        if len(got) == 3:
            return got
        if len(got) == 1:
            return (1, got[0], got[0])
        raise InputError(f"{c.path}: key '{key}' = {p!r}; expected one size or [t, h, w]")
    s = c.int(key, 1, lo=1, hi=64)
    t = c.int(tkey, 1, lo=1, hi=64) if c.has(tkey) else 1
    return (t, s, s)


def _flux(c: _Config, mlp: float = 4.0, mats: int = 2) -> Dims:
    heads, kv, hd = _heads(c)
    hidden = heads * hd
    ffn = int(hidden * c.num("mlp_ratio", mlp))
    return Dims(heads, kv, hd, hidden, ffn, mats,
                {"joint": c.int("num_layers", flag="layers", lo=1, hi=limits.MAX_LAYERS), "single": c.int("num_single_layers", 0)},
                _patch(c), c.int("in_channels", 64, lo=1), modulation=12.0)


def _flux2(c: _Config) -> Dims:
    # Flux2FeedForward: linear_in to 2 x inner (SwiGLU), inner = mlp_ratio x dim: three matrices' worth;
    # the AdaLN modulation is shared by all blocks (Flux2Modulation on the model), none per block
    d = _flux(c, mlp=3.0, mats=3)
    return Dims(d.heads, d.kv_heads, d.head_dim, d.hidden, d.ffn, 3, d.blocks, d.patch, c.int("in_channels", 128, lo=1))


def _joint(c: _Config, mlp: float = 4.0) -> Dims:
    """MMDiT: every block dual stream (Qwen-Image, SD3, HunyuanVideo 1.5)."""
    heads, kv, hd = _heads(c)
    hidden = heads * hd
    return Dims(heads, kv, hd, hidden, int(hidden * c.num("mlp_ratio", mlp)), 2,
                {"joint": c.int("num_layers", flag="layers", lo=1, hi=limits.MAX_LAYERS)}, _patch(c), c.int("in_channels", 16, lo=1),
                modulation=12.0)


def _hunyuan_video(c: _Config) -> Dims:
    d = _flux(c)
    return Dims(d.heads, d.kv_heads, d.head_dim, d.hidden, d.ffn, 2, d.blocks, _patch(c),
                c.int("in_channels", 16, lo=1), modulation=12.0,
                notes=f"{c.int('num_refiner_layers', 2)} token-refiner layers on the text not counted")


def _wan(c: _Config) -> Dims:
    heads, kv, hd = _heads(c)
    hidden = heads * hd
    vace = len(c.data.get("vace_layers") or [])
    blocks = {"cross": c.int("num_layers", flag="layers", lo=1, hi=limits.MAX_LAYERS) + vace}
    return Dims(heads, kv, hd, hidden, c.int("ffn_dim", lo=1), 2, blocks, _patch(c), c.int("in_channels", 16, lo=1),
                notes=f"{vace} VACE blocks counted as Wan blocks" if vace else "")


def _cogvideox(c: _Config) -> Dims:
    heads, kv, hd = _heads(c)
    hidden = heads * hd
    return Dims(heads, kv, hd, hidden, 4 * hidden, 2, {"single": c.int("num_layers", flag="layers", lo=1, hi=limits.MAX_LAYERS)},
                _patch(c), c.int("in_channels", 16, lo=1), modulation=12.0)


def _cross(c: _Config, ffn: Callable[[int], int] = lambda d: 4 * d, mats: int = 2, attention: str = "softmax") -> Dims:
    """Self-attention, cross-attention to the text, FFN (PixArt, LTX-Video, Cosmos)."""
    heads, kv, hd = _heads(c)
    hidden = heads * hd
    return Dims(heads, kv, hd, hidden, ffn(hidden), mats, {"cross": c.int("num_layers", flag="layers", lo=1, hi=limits.MAX_LAYERS)},
                _patch(c), c.int("in_channels", 4, lo=1), attention=attention)


def _cosmos(c: _Config) -> Dims:
    return _cross(c, ffn=lambda d: int(d * c.num("mlp_ratio", 4.0)))


def _sana(c: _Config) -> Dims:
    # GLUMBConv: 1x1 conv to 2 x inner (gated) + depthwise 3x3 + 1x1 back: three matrices' worth; linear attention
    return _cross(c, ffn=lambda d: int(d * c.num("mlp_ratio", 2.5)), mats=3, attention="linear")


def _hidream(c: _Config) -> Dims:
    """HiDream-I1: dual- then single-stream blocks; MoE SwiGLU FFN: top-k routed experts + a shared expert."""
    heads, kv, hd = _heads(c)
    hidden = heads * hd

    def swiglu(width: int) -> int:   # HiDreamImageFeedForwardSwiGLU: int(2 w / 3) rounded up to 256
        w = int(2 * width / 3)
        return 256 * ((w + 255) // 256)

    expert, shared = swiglu(4 * hidden), swiglu(2 * hidden)
    routed, top_k = c.int("num_routed_experts", 4, lo=1), c.int("num_activated_experts", 2, lo=1)
    return Dims(heads, kv, hd, hidden, top_k * expert + shared, 3,
                {"joint": c.int("num_layers", flag="layers", lo=1, hi=limits.MAX_LAYERS), "single": c.int("num_single_layers", 0)},
                (1, 2, 2), c.int("in_channels", 64, lo=1), ffn_params=routed * expert + shared, modulation=12.0,
                notes=f"MoE FFN: {top_k} of {routed} routed experts + a shared one per token")


def _z_image(c: _Config) -> Dims:
    """Z-Image: single-stream blocks over text + image tokens (GQA: n_kv_heads), refiners before them."""
    heads = c.int("n_heads", flag="heads", lo=1, hi=limits.MAX_HEADS)
    hidden = c.int("dim", lo=1)
    if hidden % heads:
        raise InputError(f"{c.path}: key 'dim' ({hidden}) is not a multiple of 'n_heads' ({heads})")
    kv = c.supplied.get("kv_heads") or c.int("n_kv_heads", heads, lo=1, hi=limits.MAX_HEADS)
    patch = c.ints("all_patch_size", (2,))[0]
    tpatch = c.ints("all_f_patch_size", (1,))[0]
    refiners = c.int("n_refiner_layers", 2)
    blocks = {"single": c.int("n_layers", flag="layers", lo=1, hi=limits.MAX_LAYERS)}
    if refiners:
        blocks["self"] = refiners
    return Dims(heads, kv, hidden // heads, hidden, int(hidden / 3 * 8), 3, blocks, (tpatch, patch, patch),
                c.int("in_channels", 16, lo=1),
                notes=f"{refiners} noise-refiner blocks as 'self'; {refiners} context-refiner blocks on the text not counted")


def _lumina2(c: _Config) -> Dims:
    """Lumina-Image 2.0: single-stream blocks over text + image tokens (GQA: num_kv_heads), noise refiners before
    them; the SwiGLU FFN is 4 x hidden (x ffn_dim_multiplier) rounded up to multiple_of, no 2/3 factor
    (LuminaFeedForward in diffusers' attention.py)."""
    heads = c.int("num_attention_heads", flag="heads", lo=1, hi=limits.MAX_HEADS)
    hidden = c.int("hidden_size", lo=1)
    if hidden % heads:
        raise InputError(f"{c.path}: key 'hidden_size' ({hidden}) is not a multiple of 'num_attention_heads' ({heads})")
    kv = c.supplied.get("kv_heads") or c.int("num_kv_heads", heads, lo=1, hi=limits.MAX_HEADS)
    inner = 4 * hidden
    if c.has("ffn_dim_multiplier"):
        inner = int(c.num("ffn_dim_multiplier", 1.0) * inner)
    step = c.int("multiple_of", 256, lo=1)
    patch = c.int("patch_size", 2, lo=1)
    refiners = c.int("num_refiner_layers", 2)
    blocks = {"single": c.int("num_layers", flag="layers", lo=1, hi=limits.MAX_LAYERS)}
    if refiners:
        blocks["self"] = refiners
    # adaLN: Linear(min(hidden, 1024) -> 4 hidden) per block (Lumina2TransformerBlock's LuminaRMSNormZero)
    return Dims(heads, kv, hidden // heads, hidden, step * ((inner + step - 1) // step), 3, blocks, (1, patch, patch),
                c.int("in_channels", 16, lo=1), modulation=4.0 * min(hidden, 1024) / hidden,
                notes=f"{refiners} noise-refiner blocks as 'self'; {refiners} context-refiner blocks on the text not counted")


def _sd3(c: _Config) -> Dims:
    d = _joint(c)
    dual = len(c.data.get("dual_attention_layers") or [])
    return Dims(d.heads, d.kv_heads, d.head_dim, d.hidden, d.ffn, 2, d.blocks, d.patch, d.in_channels,
                modulation=12.0, notes=f"{dual} blocks with a second attention (SD3.5) priced as one" if dual else "")


def _t(name: str) -> str:
    return TRANSFORMERS + name


CLASSES: dict[str, ClassSpec] = {
    "FluxTransformer2DModel": ClassSpec(
        "flux", _t("transformer_flux.py"), _flux, "image", 512,
        PIPELINES + "flux/pipeline_flux.py (max_sequence_length 512)", "joint", False, (1024, 1024, 1, 28), packed=True),
    "ChromaTransformer2DModel": ClassSpec(
        "custom", _t("transformer_chroma.py"), _flux, "image", 512,
        PIPELINES + "chroma/pipeline_chroma.py (max_sequence_length 512)", "joint", True, (1024, 1024, 1, 35),
        packed=True),
    "Flux2Transformer2DModel": ClassSpec(
        "flux", _t("transformer_flux2.py"), _flux2, "image", 512,
        PIPELINES + "flux2/pipeline_flux2.py (max_sequence_length 512)", "joint", False, (1024, 1024, 1, 50),
        packed=True),
    "QwenImageTransformer2DModel": ClassSpec(
        "qwen-image", _t("transformer_qwenimage.py"), _joint, "image", 512,
        PIPELINES + "qwenimage/pipeline_qwenimage.py (max_sequence_length 512, an upper bound)", "joint", True,
        (1328, 1328, 1, 50), packed=True),
    "HiDreamImageTransformer2DModel": ClassSpec(
        "custom", _t("transformer_hidream_image.py"), _hidream, "image", 384,
        PIPELINES + "hidream_image/pipeline_hidream_image.py (max_sequence_length 128); every block joins three "
        "128-token streams: T5 and the last Llama layer, plus that block's Llama layer "
        "(HiDream-ai/HiDream-I1@b957ee4391bf:hi_diffusers/models/transformers/transformer_hidream_image.py, forward)",
        "joint", True,
        (1024, 1024, 1, 50), packed=True),
    "SD3Transformer2DModel": ClassSpec(
        "sd3", _t("transformer_sd3.py"), _sd3, "image", 333,
        PIPELINES + "stable_diffusion_3/pipeline_stable_diffusion_3.py (77 CLIP + max_sequence_length 256 T5)",
        "joint", True, (1024, 1024, 1, 28)),
    "PixArtTransformer2DModel": ClassSpec(
        "pixart", _t("pixart_transformer_2d.py"), _cross, "image", 300,
        PIPELINES + "pixart_alpha/pipeline_pixart_sigma.py (max_sequence_length 300; PixArtAlphaPipeline: 120)",
        "cross", True, (1024, 1024, 1, 20)),
    "SanaTransformer2DModel": ClassSpec(
        "sana", _t("sana_transformer.py"), _sana, "image", 300,
        PIPELINES + "sana/pipeline_sana.py (max_sequence_length 300)", "cross", True, (1024, 1024, 1, 20)),
    "Lumina2Transformer2DModel": ClassSpec(
        "custom", _t("transformer_lumina2.py"), _lumina2, "image", 256,
        PIPELINES + "lumina2/pipeline_lumina2.py (max_sequence_length 256; guidance_scale 4.0, 30 steps)", "joint",
        True, (1024, 1024, 1, 30)),
    "ZImageTransformer2DModel": ClassSpec(
        "z-image", _t("transformer_z_image.py"), _z_image, "image", 512,
        PIPELINES + "z_image/pipeline_z_image.py (max_sequence_length 512)", "joint", True, (1024, 1024, 1, 50)),
    "WanTransformer3DModel": ClassSpec(
        "wan", _t("transformer_wan.py"), _wan, "video", 512,
        PIPELINES + "wan/pipeline_wan.py (max_sequence_length 512)", "cross", True, (1280, 720, 81, 50)),
    "WanVACETransformer3DModel": ClassSpec(
        "custom", _t("transformer_wan_vace.py"), _wan, "video", 512,
        PIPELINES + "wan/pipeline_wan_vace.py (max_sequence_length 512)", "cross", True, (1280, 720, 81, 50)),
    "SkyReelsV2Transformer3DModel": ClassSpec(
        "custom", _t("transformer_skyreels_v2.py"), _wan, "video", 512,
        PIPELINES + "skyreels_v2/pipeline_skyreels_v2.py (max_sequence_length 512)", "cross", True,
        (960, 544, 97, 50)),
    "HunyuanVideoTransformer3DModel": ClassSpec(
        "hunyuanvideo", _t("transformer_hunyuan_video.py"), _hunyuan_video, "video", 256,
        PIPELINES + "hunyuan_video/pipeline_hunyuan_video.py (max_sequence_length 256)", "joint", False,
        (1280, 720, 129, 50)),
    "HunyuanVideo15Transformer3DModel": ClassSpec(
        "hunyuanvideo-1.5", _t("transformer_hunyuan_video15.py"), _joint, "video", 1000,
        PIPELINES + "hunyuan_video1_5/pipeline_hunyuan_video1_5.py (tokenizer_max_length 1000)", "joint", True,
        (1280, 720, 121, 50)),
    "CogVideoXTransformer3DModel": ClassSpec(
        "cogvideox", _t("cogvideox_transformer_3d.py"), _cogvideox, "video", 226,
        "config key max_text_seq_length (CogVideoXTransformer3DModel default 226)", "joint", True,
        (720, 480, 49, 50)),
    "LTXVideoTransformer3DModel": ClassSpec(
        "ltx", _t("transformer_ltx.py"), _cross, "video", 128,
        PIPELINES + "ltx/pipeline_ltx.py (max_sequence_length 128)", "cross", True, (704, 512, 161, 50)),
    "CosmosTransformer3DModel": ClassSpec(
        "custom", _t("transformer_cosmos.py"), _cosmos, "video", 512,
        PIPELINES + "cosmos/pipeline_cosmos_text2world.py (max_sequence_length 512)", "cross", True,
        (1280, 704, 121, 36)),
}

#: classes that are not diffusion transformers, refused with the reason
NOT_DIT = {"UNet2DConditionModel": "a UNet, not a diffusion transformer",
           "UNet3DConditionModel": "a UNet, not a diffusion transformer",
           "UNetSpatioTemporalConditionModel": "a UNet, not a diffusion transformer",
           "UNetMotionModel": "a UNet, not a diffusion transformer",
           "UNet2DModel": "a UNet, not a diffusion transformer"}


# --------------------------------------------------------------------------------------------
# reading the files


def _load(path: Path, supplied: Mapping[str, int | None] | None = None) -> _Config:
    return _Config(formats.load_json(path), path, supplied)


def _refuse_not_dit(c: _Config) -> None:
    known = not_dit.by_config(c.data)
    if known is not None:
        raise InputError(not_dit.refusal(known, str(c.path)))
    cls = str(c.data.get("_class_name") or "")
    if cls in NOT_DIT or cls.startswith("UNet"):
        raise InputError(f"{c.path}: _class_name {cls} is {NOT_DIT.get(cls, 'a UNet, not a diffusion transformer')}; "
                         f"plan.py prices diffusion transformers only")
    arch = c.data.get("architectures")
    if not cls and isinstance(arch, list) and arch:
        raise InputError(f"{c.path}: architectures {', '.join(map(str, arch))}: a transformers (language or "
                         f"vision) model config, not a diffusion transformer; give the model folder or its "
                         f"transformer/config.json")
    if not cls and "model_type" in c.data:
        raise InputError(f"{c.path}: model_type {c.data['model_type']!r}: a transformers model config, not a "
                         f"diffusion transformer")


def _component(index: _Config, folder: Path, name: str) -> tuple[str, Path] | None:
    """(class name, config path) of one model_index.json entry, or None when it is absent or null."""
    entry = index.data.get(name)
    if not isinstance(entry, list) or len(entry) != 2 or entry[1] is None:
        return None
    return str(entry[1]), folder / name / "config.json"


def _paths(path: Path) -> tuple[Path, Path | None, list[tuple[str, Path]], _Config | None, int]:
    """(transformer config, vae config or None, [(name, text-encoder config)], model_index or None, experts)."""
    if path.is_dir():
        index_path = path / "model_index.json"
        if not index_path.exists():
            if (path / "config.json").exists():
                return path / "config.json", None, [], None, 1
            if (path / "transformer" / "config.json").exists():   # a folder holding transformer/ (and vae/)
                return _paths(path / "transformer" / "config.json")
            raise InputError(f"{path}: neither model_index.json (a diffusers model folder) nor config.json")
        index = _load(index_path)
        if "transformer" not in index.data:
            unet = index.data.get("unet")
            why = f"a UNet pipeline ({unet[1] if isinstance(unet, list) and len(unet) == 2 else 'unet'})" if unet \
                else "no 'transformer' entry"
            raise InputError(f"{index_path}: {why}, not a diffusion transformer; plan.py prices diffusion "
                             f"transformers only")
        got = _component(index, path, "transformer")
        if got is None:
            raise InputError(f"{index_path}: key 'transformer' is not [library, class name]: "
                             f"{index.data.get('transformer')!r}")
        vae = _component(index, path, "vae")
        encoders = [(k, p) for k in sorted(index.data) if k.startswith("text_encoder")
                    for _c, p in [_component(index, path, k) or ("", None)] if p is not None]
        experts = 2 if _component(index, path, "transformer_2") else 1
        return got[1], vae[1] if vae else None, encoders, index, experts
    if path.name == "model_index.json":
        return _paths(path.parent)
    # one config.json: a vae/ beside a transformer/ folder is read when present
    vae = path.parent.parent / "vae" / "config.json" if path.parent.name == "transformer" else None
    return path, vae if vae is not None and vae.exists() else None, [], None, 1


# --------------------------------------------------------------------------------------------
# VAE: compression, latent channels and the decoder as plan/cost/serial.py walks it


@dataclass(frozen=True)
class _Vae:
    stride: tuple[int, int, int]
    latent_channels: int
    causal: bool
    spec: VaeSpec | None
    source: str


def _vae(c: _Config, kind: str) -> _Vae:
    cls = str(c.data.get("_class_name") or "")
    src = f"{c.path} ({cls or 'no _class_name'})"
    if cls in ("AutoencoderKL", "AutoencoderKLFlux2"):
        boc = c.ints("block_out_channels", (64,))
        s = 2 ** (len(boc) - 1)
        lat = c.int("latent_channels", 4, lo=1)
        spec = VaeSpec("autoencoderkl", boc, c.ints("layers_per_block", (1,)), lat,
                       c.flag_bool("mid_block_add_attention", True), "bf16",
                       post_quant_conv=c.flag_bool("use_post_quant_conv", True))
        return _Vae((1, s, s), lat, False, spec, src + "; " + AUTOENCODERS + "autoencoder_kl.py")
    if cls in ("AutoencoderKLWan", "AutoencoderKLQwenImage"):
        mult = c.ints("dim_mult", (1, 2, 4, 4))
        base = c.int("decoder_base_dim", c.int("base_dim", 96, lo=1), lo=1)
        patch = c.int("patch_size", 1, lo=1) if c.has("patch_size") else 1
        s = 2 ** (len(mult) - 1) * patch
        down = c.data.get("temperal_downsample") or [False, True, True]
        t = 2 ** sum(bool(x) for x in down) if kind == "video" else 1
        lat = c.int("z_dim", 16, lo=1)
        wan = cls == "AutoencoderKLWan"
        tile, stride = 256 // s, 192 // s   # tile_sample_min 256 px, tile_sample_stride 192 px
        spec = VaeSpec("wan", tuple(base * m for m in mult), (c.int("num_res_blocks", 2),), lat, True,
                       "fp32" if wan else "bf16", post_quant_conv=True, residual_up=c.flag_bool("is_residual", False),
                       patch_size=patch, frame_batch=1, tile_latent=(tile, tile), tile_latent_stride=(stride, stride))
        return _Vae((t, s, s), lat, t > 1, spec, src + "; " + AUTOENCODERS
                    + ("autoencoder_kl_wan.py (dtype fp32: diffusers' Wan examples)" if wan
                       else "autoencoder_kl_qwenimage.py"))
    if cls == "AutoencoderKLHunyuanVideo":
        boc = c.ints("block_out_channels", (128, 256, 512, 512))
        s = c.int("spatial_compression_ratio", 8, lo=1)
        t = c.int("temporal_compression_ratio", 4, lo=1)
        lat = c.int("latent_channels", 16, lo=1)
        spec = VaeSpec("hunyuanvideo", boc, c.ints("layers_per_block", (2,)), lat,
                       c.flag_bool("mid_block_add_attention", True), "bf16", post_quant_conv=True,
                       frame_tile=5, frame_tile_stride=3, tile_latent=(32, 32), tile_latent_stride=(24, 24))
        return _Vae((t, s, s), lat, True, spec, src + "; " + AUTOENCODERS + "autoencoder_kl_hunyuan_video.py")
    if cls == "AutoencoderKLCogVideoX":
        boc = c.ints("block_out_channels", (128, 256, 256, 512))
        s = 2 ** (len(boc) - 1)
        t = c.int("temporal_compression_ratio", 4, lo=1)
        lat = c.int("latent_channels", 16, lo=1)
        spec = VaeSpec("cogvideox", boc, c.ints("layers_per_block", (3,)), lat, False, "bf16", frame_batch=2,
                       tile_latent=(30, 45), tile_latent_stride=(25, 36))
        return _Vae((t, s, s), lat, True, spec, src + "; " + AUTOENCODERS + "autoencoder_kl_cogvideox.py")
    if cls == "AutoencoderDC":
        boc = c.ints("decoder_block_out_channels", c.ints("encoder_block_out_channels", (128, 256, 512, 512, 1024, 1024)))
        s = 2 ** (len(boc) - 1)
        lat = c.int("latent_channels", 32, lo=1)
        types = c.data.get("decoder_block_types") or []
        vit = sum(1 for x in types if "ViT" in str(x)) if isinstance(types, list) else 0
        lpb = c.ints("decoder_layers_per_block", (3,))
        spec = VaeSpec("dcae", boc, lpb if len(set(lpb)) > 1 else lpb[:1], lat, False, "bf16", vit_stages=vit)
        return _Vae((1, s, s), lat, False, spec, src + "; " + AUTOENCODERS + "autoencoder_dc.py")
    # any other VAE: compression from its generic keys, decode not priced
    lat = c.int("latent_channels", c.int("z_dim", 0)) or c.int("z_channels", 0)
    if not lat:
        raise InputError(f"{c.path}: key 'latent_channels' is missing (a VAE config of class {cls or '?'})")
    if c.has("spatial_compression_ratio"):
        s = c.int("spatial_compression_ratio", lo=1)
    else:
        s = c.guess("vae spatial stride (2^(blocks-1))", 2 ** (len(c.ints("block_out_channels", (1, 1, 1, 1))) - 1))
    t = c.int("temporal_compression_ratio", 1, lo=1) if kind == "video" else 1
    return _Vae((t, s, s), lat, t > 1, None, src + " (decoder not walked: decode not priced)")


# --------------------------------------------------------------------------------------------
# text encoders: parameters estimated from their configs


def _attn_params(d: int, heads: int, kv: int, hd: int) -> int:
    return d * (heads * hd + 2 * kv * hd) + heads * hd * d


def _lm_params(c: Mapping[str, Any], where: Path) -> tuple[int, str]:
    """Parameters of a transformers text model from its config (T5 / UMT5, CLIP text, decoder LLMs)."""
    cfg = _Config(c, where)
    if cfg.has("d_model") and cfg.has("d_ff"):    # T5EncoderModel, UMT5EncoderModel: encoder stack only
        d, ff, layers = cfg.int("d_model", lo=1), cfg.int("d_ff", lo=1), cfg.int("num_layers", lo=1)
        heads, dkv = cfg.int("num_heads", lo=1), cfg.int("d_kv", lo=1)
        mats = 3 if str(c.get("feed_forward_proj", "")).startswith("gated") else 2
        n = layers * (4 * d * heads * dkv + mats * d * ff) + cfg.int("vocab_size", 32128) * d
        return n, f"T5 encoder: {layers} x (4 x {d} x {heads * dkv} + {mats} x {d} x {ff}) + vocab x {d}"
    if isinstance(c.get("text_config"), dict) and not cfg.has("hidden_size"):
        n, how = _lm_params({**c["text_config"], "architectures": c.get("architectures")}, where)
        vis = c.get("vision_config")
        if isinstance(vis, dict):
            v = _vision_params(vis, where)
            return n + v, how + f" + vision tower {v / 1e9:.2f}B"
        return n, how
    d, layers = cfg.int("hidden_size", lo=1), cfg.int("num_hidden_layers", lo=1)
    ff, heads = cfg.int("intermediate_size", 4 * d, lo=1), cfg.int("num_attention_heads", lo=1)
    kv, hd = cfg.int("num_key_value_heads", heads, lo=1), cfg.int("head_dim", d // heads, lo=1)
    vocab = cfg.int("vocab_size", 0)
    arch = " ".join(map(str, c.get("architectures") or [c.get("_class_name", "")]))
    clip = "CLIP" in arch or c.get("model_type") in ("clip_text_model", "clip")
    mats = 2 if clip else 3          # CLIP: fc1/fc2; LLMs: gated (gate, up, down)
    n = layers * (_attn_params(d, heads, kv, hd) + mats * d * ff) + vocab * d
    if clip:
        n += cfg.int("max_position_embeddings", 77) * d
    elif re.search(r"For(CausalLM|ConditionalGeneration)", arch) and not c.get("tie_word_embeddings", False):
        n += vocab * d               # the output head, held with the model
    vis = c.get("vision_config")
    extra = ""
    if isinstance(vis, dict) and not clip:
        v = _vision_params(vis, where)
        n += v
        extra = f" + vision tower {v / 1e9:.2f}B"
    return n, f"{arch or 'text model'}: {layers} x (attention + {mats} x {d} x {ff}) + vocab {vocab} x {d}{extra}"


def _vision_params(vis: Mapping[str, Any], where: Path) -> int:
    c = _Config(vis, where)
    d = c.int("hidden_size", c.int("embed_dim", 0))
    layers = c.int("depth", c.int("num_hidden_layers", 0))
    if not d or not layers:
        return 0
    ff = c.int("intermediate_size", 4 * d)
    return layers * (4 * d * d + 3 * d * ff)


# --------------------------------------------------------------------------------------------
# the preset


def _block_params(kind: str, dims: Dims) -> float:
    d = dims.hidden
    attn = _attn_params(d, dims.heads, dims.kv_heads, dims.head_dim)
    ffn = dims.ffn_matrices * d * (dims.ffn_params or dims.ffn)
    base = kind.split("_")[0]
    if base == "joint":
        return 2 * (attn + ffn) + dims.modulation * d * d
    if base == "cross":
        return 2 * attn + ffn
    mod = 3.0 if dims.modulation else 0.0
    return attn + ffn + mod * d * d


def _unknown(c: _Config, cls: str) -> tuple[ClassSpec, Dims]:
    """A class not in CLASSES: the generic keys, every guess named."""
    heads = c.int("num_attention_heads", flag="heads", lo=1, hi=limits.MAX_HEADS) if not c.has("n_heads") else c.int("n_heads", lo=1)
    if c.has("attention_head_dim"):
        hd = c.int("attention_head_dim", lo=1)
    elif c.has("dim") or c.has("hidden_size"):
        hidden = c.int("dim") if c.has("dim") else c.int("hidden_size")
        hd = c.guess("head_dim (hidden / heads)", hidden // heads)
    else:
        raise InputError(f"{c.path}: key 'attention_head_dim' is missing (class {cls or '?'})")
    kv = c.supplied.get("kv_heads") or (c.int("num_key_value_heads", heads) if c.has("num_key_value_heads")
                                        else c.int("n_kv_heads", heads) if c.has("n_kv_heads") else heads)
    hidden = heads * hd
    layer_key = next((k for k in ("num_layers", "n_layers", "depth", "num_hidden_layers") if c.has(k)), "num_layers")
    layers = c.int(layer_key, flag="layers", lo=1, hi=limits.MAX_LAYERS)
    singles = c.int("num_single_layers", 0)
    if singles or c.has("joint_attention_dim"):
        blocks, mode = ({"joint": layers, "single": singles} if singles else {"joint": layers}), "joint"
    else:
        blocks, mode = {"cross": layers}, "cross"
        c.guess("blocks", "cross (self-attention, cross-attention to the text, FFN)")
    if c.has("ffn_dim"):
        ffn = c.int("ffn_dim", lo=1)
    else:
        ffn = c.guess("ffn (mlp_ratio x hidden)", int(hidden * c.num("mlp_ratio", 4.0)))
    text = next((c.int(k) for k in ("max_text_seq_length", "text_len", "max_sequence_length") if c.has(k)), None)
    if text is None:
        text = c.guess("text tokens", 512)
    video = "3D" in cls or c.has("patch_size_t") or isinstance(c.data.get("patch_size"), list)
    kind = c.guess("kind", "video" if video else "image")
    shape = (1280, 720, 81, 50) if video else (1024, 1024, 1, 50)
    c.guess("default shape and steps", f"{shape[0]}x{shape[1]}" + (f"x{shape[2]}f" if video else "") + f", {shape[3]}")
    cfg = c.guess("cfg_default", True)
    spec = ClassSpec("custom", f"generic keys of {cls or 'a class not mapped'}", lambda _c: dims, kind, text,
                     "guessed", mode, cfg, shape)
    dims = Dims(heads, kv, hd, hidden, ffn, 2, blocks, _patch(c), c.int("in_channels", 16, lo=1))
    return spec, dims


def load(path_text: str, *, heads: int | None = None, kv_heads: int | None = None, layers: int | None = None,
         tokens: int | None = None, warn: Callable[[str], None] | None = None) -> ModelPreset:
    """ModelPreset of a diffusers model folder or one transformer config.json. heads / kv_heads / layers /
    tokens are plan.py's flags: they stand in for a key the config lacks (the caller applies them on top
    as overrides too). Warnings (guessed fields, parts not priced) go to `warn` (stderr by default)."""
    warn = warn or (lambda line: sys.stderr.write(f"plan.py: warning: {line}\n"))
    path = Path(path_text)
    if not path.exists():
        raise InputError(f"--model-config {path_text}: no such file or folder")
    known = not_dit.by_layout(path)
    if known is not None:
        raise InputError(not_dit.refusal(known, str(path)))
    t_path, vae_path, encoders, index, experts = _paths(path)
    if not t_path.exists():
        raise InputError(f"{t_path}: missing (the transformer's config of {path})")
    c = _load(t_path, {"heads": heads, "kv_heads": kv_heads, "layers": layers})
    _refuse_not_dit(c)
    cls = str(c.data.get("_class_name") or "")
    if cls in CLASSES:
        spec = CLASSES[cls]
        dims = spec.read(c)
    else:
        spec, dims = _unknown(c, cls)
    notes = [n for n in (dims.notes,) if n]
    text_tokens, text_source = spec.text_tokens, spec.text_source
    if cls == "CogVideoXTransformer3DModel":
        text_tokens = c.int("max_text_seq_length", 226)
    pipeline = str(index.data.get("_class_name", "")) if index else ""
    if cls == "PixArtTransformer2DModel" and "Alpha" in pipeline:
        text_tokens, text_source = 120, PIPELINES + "pixart_alpha/pipeline_pixart_alpha.py (max_sequence_length 120)"
    width, height, frames, steps = spec.shape
    if cls in ("SD3Transformer2DModel", "PixArtTransformer2DModel") and c.has("sample_size"):
        width = height = c.int("sample_size", lo=1) * 8
    if cls == "CogVideoXTransformer3DModel":
        width, height = c.int("sample_width", 90) * 8, c.int("sample_height", 60) * 8
        frames = c.int("sample_frames", 49)
    kind = spec.kind
    image_cross = 0
    if spec.read is _wan and c.has("image_dim"):   # I2V: 257 CLIP image tokens cross-attended (Wan2.1-I2V preset)
        image_cross = 257
        notes.append("image_dim set: 257 CLIP image tokens in cross-attention")
    # VAE
    if vae_path is not None and vae_path.exists():
        vae = _vae(_load(vae_path), kind)
        vae_guesses = []
    elif cls in CLASSES:
        st = (4, 8, 8) if kind == "video" else (1, 8, 8)
        lat = dims.in_channels // 4 if spec.packed else dims.in_channels
        vae = _Vae(st, lat, kind == "video", None, "no vae/config.json: the class's usual VAE assumed")
        warn(f"{t_path}: no vae/config.json beside it: assumed vae_stride = {list(st)}, latent_channels = {lat} "
             f"(the usual VAE of {cls}); VAE decode not priced")
        vae_guesses = []
    elif tokens is not None:
        vae = _Vae((1, 1, 1), dims.in_channels, False, None, "--tokens gives the image/video tokens")
        vae_guesses = []
    else:
        raise InputError(f"{t_path}: no vae/config.json beside it, so the latent compression of class {cls or '?'} "
                         f"is unknown; give --tokens N (image/video tokens of one sample)")
    c.guessed.extend(vae_guesses)
    patch = dims.patch
    if spec.packed and dims.in_channels == 4 * vae.latent_channels:
        patch = (1, 2, 2)    # 2x2 latent patches packed into channels by the pipeline, patch_size 1 on them
    elif spec.packed:
        patch = (1, 2, 2)
        notes.append(f"in_channels {dims.in_channels} is not 4 x the VAE's {vae.latent_channels}: 2x2 packing assumed")
    # text encoders
    te_params, te_how = 0.0, []
    for name, p in encoders:
        if not p.exists():
            warn(f"{p}: missing; the text encoder {name} is not counted (text encoding and its memory not priced)")
            te_params, te_how = 0.0, []
            break
        n, how = _lm_params(formats.load_json(p), p)
        te_params += n
        te_how.append(f"{name} {n / 1e9:.2f}B ({how})")
    # parameters of the transformer
    params = sum(n * _block_params(k, dims) for k, n in dims.blocks.items())
    params += dims.hidden * (dims.in_channels * math.prod(dims.patch) * 2 + 4096)   # embed, proj_out, text proj.
    name = _model_name(path, t_path, c)
    cross = spec.text_mode == "cross" and any(k.startswith("cross") for k in dims.blocks)
    joint = any(k.split("_")[0] in ("joint", "single") for k in dims.blocks)
    sources = {"config": str(t_path), "class": f"{cls or '?'}: {spec.source}",
               "params_b": "estimated from the config: blocks x (attention + FFN + modulation) + embeddings",
               "text_tokens": text_source, "vae": vae.source}
    if te_how:
        sources["text_encoder_params_b"] = "; ".join(te_how)
    if c.guessed:
        warn(f"{t_path}: class {cls or '?'} read from generic keys or defaults; guessed: " + "; ".join(c.guessed))
    if vae.spec is None:
        notes.append("VAE decode not priced (decoder not read)")
    blocks = {k: n for k, n in dims.blocks.items() if n}
    if not blocks:
        raise InputError(f"{t_path}: no transformer blocks (every layer count is 0); give --layers N")
    if dims.heads % dims.kv_heads:
        raise InputError(f"{t_path}: {dims.kv_heads} K/V heads do not divide {dims.heads} query heads; "
                         f"give --kv-heads N")
    model = ModelPreset(
        name=name, aliases=(), kind=kind, params_b=params / 1e9, hidden=dims.hidden, heads=dims.heads,
        kv_heads=dims.kv_heads, head_dim=dims.head_dim, ffn=dims.ffn, blocks=blocks,
        text_joint_tokens=text_tokens if joint and not cross else 0, text_cross_tokens=text_tokens if cross else 0,
        latent_channels=vae.latent_channels, patch=patch, vae_stride=vae.stride,
        vae_temporal_causal=vae.causal, cfg_default=spec.cfg, default_width=width, default_height=height,
        default_frames=frames if kind == "video" else 1, default_steps=steps, sources=sources,
        image_cross_tokens=image_cross, attention=dims.attention, experts=experts, ffn_matrices=dims.ffn_matrices, family=spec.family,
        text_encoder_params_b=te_params / 1e9, vae=vae.spec, notes="; ".join(notes), path=str(t_path))
    _check(model, t_path)
    return model


def _check(model: ModelPreset, where: Path) -> None:
    """The model read holds to the preset schema's ranges (plan/inputs/schema.py MODEL), as a preset file must."""
    data = {k: v for k, v in fields(model).items() if k != "vae" and not (k == "text_encoder_params_b" and not v)}
    data = {**{k: v for k, v in data.items() if not k.endswith("params_b")},   # the widths first: they explain
            **{k: v for k, v in data.items() if k.endswith("params_b")}}        # a parameter count out of range
    try:
        schema.check(data, schema.MODEL, where)
    except InputError as exc:
        raise InputError(f"{exc} (as read from the config, in preset terms: templates/PRESETS.md 2)") from None


def _model_name(path: Path, t_path: Path, c: _Config) -> str:
    """The folder's name (a preset's canonical name when the folder is named as one of its aliases, so
    framework entries that name checkpoints apply); else the config's _name_or_path."""
    from ditpar.plan.inputs import presets

    if path.is_dir():
        raw = path.resolve().name
    elif t_path.parent.name == "transformer":
        raw = t_path.resolve().parent.parent.name
    elif t_path.stem != "config":
        raw = t_path.stem
    else:
        raw = str(c.data.get("_name_or_path") or t_path.resolve().parent.name or "model")
    formats.check_text(raw, f"{path}: the model's name {raw[:60]!r}", one_line=True)
    try:
        hit = presets._lookup(presets.model_registry(), raw)
    except InputError:
        hit = None
    return hit or raw


def fields(model: ModelPreset) -> dict[str, Any]:
    """The model fields the cost model read (plan.py --json: model_fields), in preset-file terms."""
    out = {k: getattr(model, k) for k in FIELDS}
    out["blocks"] = dict(model.blocks)
    out["patch"], out["vae_stride"] = list(model.patch), list(model.vae_stride)
    out["params_b"] = round(model.params_b, 3)
    out["text_encoder_params_b"] = round(model.text_encoder_params_b, 3)
    out["vae"] = None if model.vae is None else {"decoder": model.vae.decoder,
                                                  "block_out_channels": list(model.vae.block_out_channels),
                                                  "latent_channels": model.vae.latent_channels,
                                                  "dtype": model.vae.dtype}
    out["sources"] = dict(model.sources)
    return out


def looks_like_config(cell: str) -> bool:
    """Whether a table's model cell names a config folder or file rather than a preset name."""
    p = Path(cell)
    return cell.endswith(".json") or (p.is_dir() and ((p / "model_index.json").exists() or (p / "config.json").exists()))


def resolve(cell: str, warn: Callable[[str], None] | None = None) -> ModelPreset:
    """A model cell of a latency table (plan.py score / evaluate): a config folder or .json file, else a preset
    name (presets.resolve_model)."""
    from ditpar.plan.inputs import presets

    if looks_like_config(cell):
        return load(cell, warn=warn or (lambda _line: None))
    return presets.resolve_model(cell)
