"""Models that are not diffusion transformers in the cost model's sense: recognised by name, by a config's
model_type / architectures, or by their checkpoint's file layout, and refused in one line saying what they are."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class NotDit:
    """One known model that plan.py cannot price, with the marks that identify it and the one-line reason."""

    name: str
    what: str                        # what the model is, for the refusal line
    todo: str                        # what the user can do instead
    names: tuple[str, ...]           # spellings of --model that mean it
    model_types: tuple[str, ...]     # config.json model_type values
    classes: tuple[str, ...]         # config.json architectures / _class_name values
    layout: tuple[str, ...]          # files that together mark its checkpoint folder (no model_index.json)
    source: str


BAGEL = NotDit(
    name="BAGEL-7B-MoT",
    what=("a unified autoregressive + flow-matching model (Mixture-of-Transformers: one Qwen2 decoder whose "
          "layers hold an understanding and a generation expert, text tokens generated causally, image latents "
          "denoised against the prompt's KV cache), not a diffusion transformer in the cost model's sense"),
    todo=("time its two stages apart (vLLM-Omni serves it as a thinker stage and a DiT stage), or price only its "
          "denoising loop with --model-file FILE.toml from its llm_config.json (its heads, K/V heads and layers; "
          "the prompt as joint text tokens), knowing the autoregressive stage is left out"),
    names=("BAGEL", "BAGEL-7B-MoT", "ByteDance-Seed/BAGEL-7B-MoT", "BAGEL 7B MoT", "BAGEL-7B"),
    model_types=("bagel",),
    classes=("BagelForConditionalGeneration", "OmniBagelForConditionalGeneration", "Bagel"),
    layout=("llm_config.json", "vit_config.json"),
    source=("ByteDance-Seed/Bagel@a384f612:app.py (reads llm_config.json as Qwen2Config with layer_module "
            "Qwen2MoTDecoderLayer, vit_config.json as SiglipVisionConfig, ae.safetensors); "
            "ByteDance-Seed/Bagel@4d8a4882:modeling/bagel/bagel.py (BagelConfig, Bagel); "
            "vllm-project/vllm-omni:vllm_omni/config/stage_config.py (model_type 'bagel' -> "
            "BagelForConditionalGeneration) and @07573727:vllm_omni/model_executor/stage_configs/bagel.yaml "
            "(stage 0 thinker, llm; stage 1 dit, diffusion)"),
)

KNOWN = (BAGEL,)


def _key(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


def by_name(name: str) -> NotDit | None:
    """The known non-DiT model a --model name means, or None."""
    key = _key(name)
    return next((m for m in KNOWN if key and key in {_key(n) for n in m.names}), None)


def by_config(data: Mapping[str, Any]) -> NotDit | None:
    """The known non-DiT model a config.json describes (model_type, architectures or _class_name), or None."""
    arch = data.get("architectures")
    classes = {str(a) for a in arch} if isinstance(arch, list) else set()
    classes.add(str(data.get("_class_name") or ""))
    model_type = str(data.get("model_type") or "").lower()
    return next((m for m in KNOWN if model_type in m.model_types or classes & set(m.classes)), None)


def by_layout(path: Path) -> NotDit | None:
    """The known non-DiT model whose checkpoint folder this is (or holds this file), or None."""
    folder = path if path.is_dir() else path.parent
    if (folder / "model_index.json").exists():
        return None
    if not path.is_dir() and path.name not in {f for m in KNOWN for f in m.layout}:
        return None
    return next((m for m in KNOWN if all((folder / f).is_file() for f in m.layout)), None)


def refusal(model: NotDit, where: str) -> str:
    """The one line plan.py prints (exit 2) for a known non-DiT model."""
    return f"{where}: {model.name} is {model.what}; plan.py prices diffusion transformers only: {model.todo}"
