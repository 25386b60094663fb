"""Request shape -> token counts: latent grid from VAE strides, tokens from patch sizes."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ditpar import limits
from ditpar.errors import InputError


@dataclass(frozen=True)
class Shape:
    """One request: pixels, frames, steps, whether CFG doubles the batch, and the token counts."""

    width: int
    height: int
    frames: int
    steps: int
    cfg: bool
    frames_tok: int        # token grid along time (1 for images)
    tokens_per_frame: int  # token grid h x w
    text_joint: int        # text tokens concatenated into self-attention (MMDiT)
    text_cross: int        # text tokens that image tokens cross-attend to
    pad_tokens: int = 0    # tokens a framework appends so the sequence divides the SP degree (costed)
    text_uncond: int = -1  # text tokens of the unconditional (negative-prompt) branch; -1 = as many as the prompt
    cfg_trunc_ratio: float = 1.0  # share of the steps that run guided (diffusers' cfg_trunc_ratio; 1 = every step)
    sparse_attention: bool = False  # the request runs a sparse or sliding-window attention kernel (priced dense)

    @property
    def tokens(self) -> int:
        """Image/video tokens of one sample (padding included)."""
        return self.frames_tok * self.tokens_per_frame + self.pad_tokens

    @property
    def batch(self) -> int:
        """Samples per denoising forward (2 with classifier-free guidance)."""
        return 2 if self.cfg else 1

    def describe(self) -> str:
        size = f"{self.width}x{self.height}" + (f"x{self.frames}f" if self.frames > 1 else "")
        return (f"{size}, {self.steps} steps, cfg={'on' if self.cfg else 'off'}: "
                f"{self.tokens} tokens ({self.frames_tok}x{self.tokens_per_frame})"
                + (f" incl. {self.pad_tokens} padding" if self.pad_tokens else "")
                + (f" + {self.text_joint} joint text" if self.text_joint else "")
                + (f", {self.text_cross} cross-attn text" if self.text_cross else "")
                + (f", negative prompt {self.text_uncond} text tokens" if self.cfg and self.text_uncond >= 0 else "")
                + (f", guidance on {guided_steps(self)} of {self.steps} steps (cfg_trunc_ratio {self.cfg_trunc_ratio:g})"
                   if self.cfg and self.cfg_trunc_ratio < 1 else ""))


def guided_steps(shape: Shape) -> int:
    """Steps that run both CFG branches: step i (from 0) is guided while (i + 1) / steps <= cfg_trunc_ratio, as
    diffusers' Lumina2Pipeline decides (huggingface/diffusers@93e192fb28a3:src/diffusers/pipelines/lumina2/
    pipeline_lumina2.py, do_classifier_free_truncation); every step without CFG truncation, none without CFG."""
    if not shape.cfg:
        return 0
    if shape.cfg_trunc_ratio >= 1:
        return shape.steps
    return sum(1 for i in range(shape.steps) if (i + 1) / shape.steps <= shape.cfg_trunc_ratio)


def latent_frames(model, frames: int) -> int:
    """Latent frames after the VAE's temporal stride (causal VAEs keep the first frame apart)."""
    stride = int(model.vae_stride[0])
    if frames <= 1 or stride <= 1:
        return max(1, frames)
    if getattr(model, "vae_temporal_causal", False):
        return (frames - 1) // stride + 1
    return max(1, frames // stride)


def make_shape(model, width: int | None = None, height: int | None = None, frames: int | None = None,
               steps: int | None = None, cfg: bool | None = None, negative_tokens: int | None = None,
               cfg_trunc_ratio: float | None = None, sparse_attention: bool = False,
               prompt_tokens: int | None = None) -> Shape:
    """Build the shape of a request, filling what is not given from the model preset's defaults; `negative_tokens`
    (the unconditional branch's text tokens) and `cfg_trunc_ratio` (the guided share of the steps) are the
    request's CFG schedule (default: a negative prompt as long as the prompt, guidance on every step); `prompt_tokens`
    the prompt's (the conditional branch's) tokens in the model's text stream (default: the preset's figure)."""
    width = int(width or model.default_width)
    height = int(height or model.default_height)
    frames = int(frames or (model.default_frames if model.kind == "video" else 1))
    steps = int(steps or model.default_steps)
    cfg = bool(model.cfg_default if cfg is None else cfg)
    if width <= 0 or height <= 0 or frames <= 0 or steps <= 0:
        raise InputError(f"shape {width}x{height}x{frames}, {steps} steps: every size must be positive")
    text = max(int(model.text_joint_tokens), int(model.text_cross_tokens))
    for flag, value in (("--negative-tokens", negative_tokens), ("--prompt-tokens", prompt_tokens)):
        if value is not None and not 0 <= value <= limits.MAX_TOKENS:
            raise InputError(f"{flag} {value}: expected 0..{limits.MAX_TOKENS:,}")
        if value is not None and text == 0:
            raise InputError(f"{flag}: {model.name} carries no text tokens in its transformer "
                             "(text_joint_tokens and text_cross_tokens are 0)")
    if prompt_tokens is not None and prompt_tokens == 0 and model.text_cross_tokens and not model.text_joint_tokens:
        raise InputError("--prompt-tokens 0: the model cross-attends to its text; expected at least 1")
    ratio = 1.0 if cfg_trunc_ratio is None else float(cfg_trunc_ratio)
    if not 0.0 <= ratio <= 1.0:
        raise InputError(f"--cfg-trunc-ratio {cfg_trunc_ratio}: expected a share of the steps, 0..1")
    # an in-house model file (vae_stride 1, 1, 1) gives its sizes in latent grid units, not pixels: its sides get
    # the bound of --tokens (a file's tokens = 65536 is one side of 65536), the grid's product too (below)
    grid_units = tuple(int(x) for x in model.vae_stride) == (1, 1, 1)
    side = limits.MAX_TOKENS if grid_units else limits.MAX_PIXELS_SIDE
    for name, value, top in (("width", width, side), ("height", height, side),
                             ("frames", frames, limits.MAX_FRAMES), ("steps", steps, limits.MAX_STEPS)):
        if value > top:  # the bounds of --resolution, --frames and --steps hold for a table's rows too
            raise InputError(f"shape {width}x{height}x{frames}, {steps} steps: {name} {value} is out of range "
                             f"1..{top}")
    pt, ph, pw = (int(x) for x in model.patch)
    st, sh, sw = (int(x) for x in model.vae_stride)
    lat_h, lat_w = height // sh, width // sw
    if lat_h < ph or lat_w < pw:
        raise InputError(f"{width}x{height}: smaller than one patch of {model.name}")
    if model.kind != "video" and frames > 1:
        raise InputError(f"--frames {frames}: {model.name} is an image model")
    if hasattr(model, "visual_grid"):   # the preset's own rounding (a partial patch counts)
        grid_t, grid_h, grid_w = model.visual_grid(width, height, frames)
    else:
        grid_t, grid_h, grid_w = max(1, latent_frames(model, frames) // max(1, pt)), lat_h // ph, lat_w // pw
    if grid_units and grid_t * grid_h * grid_w > limits.MAX_TOKENS:
        raise InputError(f"shape {width}x{height}x{frames}: {grid_t * grid_h * grid_w:,} tokens is out of range "
                         f"1..{limits.MAX_TOKENS:,} (the bound of --tokens)")
    joint, cross = int(model.text_joint_tokens), int(model.text_cross_tokens)
    if prompt_tokens is not None:
        joint, cross = (int(prompt_tokens), cross) if joint else (joint, int(prompt_tokens))
    return Shape(width=width, height=height, frames=frames, steps=steps, cfg=cfg, frames_tok=int(grid_t),
                 tokens_per_frame=int(grid_h * grid_w), text_joint=joint, text_cross=cross,
                 text_uncond=-1 if negative_tokens is None else int(negative_tokens), cfg_trunc_ratio=ratio,
                 sparse_attention=bool(sparse_attention))


_SQUARE = re.compile(r"^\s*(\d+)\s*px\s*$", re.I)
_SIZE = re.compile(r"^\s*(\d+)\s*[x×*]\s*(\d+)(?:\s*[x×*,]\s*(\d+)\s*(?:f|frames?)?)?\s*$", re.I)
_FRAMES = re.compile(r"(\d+)\s*(?:f|frames?)\b", re.I)


def parse_resolution(text: str) -> tuple[int, int, int | None]:
    """Parse 'WxH', 'WxHxF frames', 'WxH, F frames' or 'Npx' (square) into (width, height, frames or None)."""
    raw = str(text).strip()
    square = _SQUARE.match(raw)
    if square:   # '1024px': a square image, as the published tables write it
        return int(square.group(1)), int(square.group(1)), None
    head = raw.split(",")[0]
    m = _SIZE.match(head)
    if not m:
        raise InputError(f"resolution {raw!r}: expected WxH, WxHxF frames, 'WxH, F frames' or Npx")
    width, height, frames = int(m.group(1)), int(m.group(2)), m.group(3)
    if frames is None:
        fm = _FRAMES.search(raw[len(head):])
        frames = fm.group(1) if fm else None
    return width, height, (int(frames) if frames is not None else None)
