"""FLOPs and bytes of the serial stages of one request: the VAE decode and the text encoding.

The DiT cost model prices only the denoising loop; a published end-to-end latency also holds the text
encoder (before) and the VAE decode (after), both run once on one device. This module counts their work
from the decoder's structure, as the model preset's `[vae]` table gives it (templates/PRESETS.md):

* a convolution costs 2 x kernel volume x C_in x C_out FLOPs per output position (3x3 = 9, 3x3x3 = 27,
  1x1 shortcuts = 1); a causal 3D conv produces as many frames as it is given (its padding frames come
  from the cache), so its output positions are frames x height x width of that stage;
* attention costs its four C x C projections per token plus 4 x tokens^2 x C for Q K^T and P V;
* bytes are the activation traffic of eager PyTorch: each conv reads its input and writes its output, each
  norm + activation pair reads and writes its tensor twice, each residual add reads two and writes one,
  each nearest up-sampling reads the small and writes the large tensor, weights are read once per call.
  Elementwise FLOPs (norms, SiLU, adds) are not counted: they are bytes, not FLOPs.

Each decoder family walks its stages as diffusers' class does (named in `DECODER_CLASS`), including how the
default pipeline feeds it frames: CogVideoX in batches of 2 latent frames, Wan one latent frame at a time,
HunyuanVideo in temporal tiles of 5 latent frames every 3. Spatial tiling (`enable_tiling`) is off by
default in diffusers for every family here; `tiled=True` counts it where [vae] gives the tiles (the
HunyuanVideo and Mochi pipeline examples, and xDiT's `--enable_tiling`, switch it on).
A model whose VAE was not read has no `[vae]` table and `vae_decode_work` raises NotPriced (never 0).
"""

from __future__ import annotations

from dataclasses import dataclass, field

DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}

#: the diffusers class whose forward each family's walk follows (huggingface/diffusers, src/diffusers/models/...)
DECODER_CLASS = {
    "autoencoderkl": "autoencoders/vae.py Decoder (AutoencoderKL)",
    "cogvideox": "autoencoders/autoencoder_kl_cogvideox.py CogVideoXDecoder3D (AutoencoderKLCogVideoX._decode)",
    "hunyuanvideo": "autoencoders/autoencoder_kl_hunyuan_video.py HunyuanVideoDecoder3D "
                    "(AutoencoderKLHunyuanVideo._temporal_tiled_decode)",
    "wan": "autoencoders/autoencoder_kl_wan.py WanDecoder3d (AutoencoderKLWan._decode, one latent frame per call)",
    "dcae": "autoencoders/autoencoder_dc.py Decoder (AutoencoderDC), EfficientViTBlock with "
            "attention_processor.py SanaMultiscaleLinearAttention and transformers/sana_transformer.py GLUMBConv",
    "mochi": "autoencoders/autoencoder_kl_mochi.py MochiDecoder3D (AutoencoderKLMochi._decode)",
    "stepvideo": "not in diffusers: stepfun-ai/Step-Video-T2V stepvideo/vae/vae.py VideoDecoder (AutoencoderKL.decode)",
}


class NotPriced(ValueError):
    """The serial stage cannot be priced for this model (no [vae] table, or a decoder family not walked)."""


@dataclass
class StageWork:
    """FLOPs and bytes of one serial stage, with a per-part breakdown (FLOPs) for reports and tests."""

    flops: float = 0.0
    bytes: float = 0.0
    parts: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def _add(self, part: str, flops: float, nbytes: float) -> None:
        self.flops += flops
        self.bytes += nbytes
        self.parts[part] = self.parts.get(part, 0.0) + flops


class _Walk:
    """Accumulates the work of a decoder walk in one dtype."""

    def __init__(self, dtype: str) -> None:
        self.b = DTYPE_BYTES[dtype]
        self.calls = 1            # decoder calls (frame batches, tiles): the weights are read once per call
        self.work = StageWork()

    def conv(self, part: str, kernel: int, c_in: int, c_out: int, positions: float,
             in_positions: float | None = None, groups: int = 1) -> None:
        """One convolution: 2 x kernel x (C_in / groups) x C_out per output position (a linear layer is a 1x1
        conv); reads input, writes output."""
        inp = positions if in_positions is None else in_positions
        flops = 2.0 * kernel * (c_in // groups) * c_out * positions
        nbytes = self.b * (c_in * inp + c_out * positions + self.calls * kernel * (c_in // groups) * c_out)
        self.work._add(part, flops, nbytes)

    def elementwise(self, part: str, channels: int, positions: float, passes: float) -> None:
        """Read-and-write passes over a tensor (norm, activation); no FLOPs counted."""
        self.work._add(part, 0.0, self.b * 2.0 * passes * channels * positions)

    def add(self, part: str, channels: int, positions: float) -> None:
        """A residual add: two reads and one write."""
        self.work._add(part, 0.0, self.b * 3.0 * channels * positions)

    def upsample(self, part: str, channels: int, pos_in: float, pos_out: float) -> None:
        """Nearest up-sampling: reads the small tensor, writes the large one."""
        self.work._add(part, 0.0, self.b * channels * (pos_in + pos_out))

    def attention(self, part: str, seqs: int, tokens: float, channels: int, mask: bool = False) -> None:
        """Single-head attention over `tokens` per sequence: 4 C x C projections + 4 N^2 C; a materialised
        additive mask (HunyuanVideo's causal mask) is read once, N^2 elements."""
        proj = 4 * 2.0 * tokens * channels * channels
        core = 4.0 * tokens * tokens * channels
        nbytes = self.b * (8.0 * channels * tokens + 4 * channels * channels) + (self.b * tokens * tokens if mask else 0.0)
        self.work._add(part, seqs * (proj + core), seqs * nbytes)
        self.elementwise(part, channels, seqs * tokens, 1)   # the group norm before the projections

    def resnet(self, part: str, c_in: int, c_out: int, positions: float, kernel: int,
               shortcut_kernel: int = 1) -> None:
        """Norm, act, conv, norm, act, conv, (1x1 shortcut when widths differ), residual add."""
        self.elementwise(part, c_in, positions, 2)
        self.conv(part, kernel, c_in, c_out, positions)
        self.elementwise(part, c_out, positions, 2)
        self.conv(part, kernel, c_out, c_out, positions)
        if c_in != c_out:
            self.conv(part, shortcut_kernel, c_in, c_out, positions)
        self.add(part, c_out, positions)


def _mid_block(walk: _Walk, vae, c: int, pos: float, taps: int, seqs: float, tokens: float,
               mask: bool = False) -> None:
    """The decoders' mid block: resnet, attention over ``seqs`` sequences of ``tokens`` (if the VAE has it), resnet."""
    walk.resnet("mid", c, c, pos, taps)
    if vae.mid_attention:
        walk.attention("mid_attention", seqs, tokens, c, mask=mask)
    walk.resnet("mid", c, c, pos, taps)


def _latent_hw(model, width: int, height: int) -> tuple[int, int]:
    _, sh, sw = model.vae_stride
    return max(1, height // sh), max(1, width // sw)


def _autoencoderkl(model, vae, walk: _Walk, width: int, height: int, frames: int) -> None:
    """diffusers Decoder: conv_in, mid (resnet, attention, resnet), up blocks of layers+1 resnets with a
    nearest x2 + 3x3 conv up-sampler on all but the last, norm, conv_out. A video model (Latte) decodes
    every frame as an image (frames act as batch)."""
    h, w = _latent_hw(model, width, height)
    rev = list(reversed(vae.block_out_channels))
    n = max(1, frames)
    pos = float(n * h * w)
    if vae.post_quant_conv:
        walk.conv("post_quant_conv", 1, vae.latent_channels, vae.latent_channels, pos)
    walk.conv("conv_in", 9, vae.latent_channels, rev[0], pos)
    _mid_block(walk, vae, rev[0], pos, 9, n, h * w)
    c_prev = rev[0]
    nb = len(rev)
    for i, c in enumerate(rev):
        layers = vae.layers(nb - 1 - i) + 1
        for j in range(layers):
            walk.resnet(f"up{i}", c_prev if j == 0 else c, c, pos, 9)
        c_prev = c
        if i != nb - 1:
            walk.upsample(f"up{i}", c, pos, 4 * pos)
            pos *= 4
            walk.conv(f"up{i}_upsampler", 9, c, c, pos)
    walk.elementwise("conv_out", rev[-1], pos, 2)
    walk.conv("conv_out", 9, rev[-1], 3, pos)


def _cogvideox_time_up(f: int) -> int:
    """CogVideoXUpsample3D with compress_time: an odd batch keeps its first frame, the rest double."""
    if f > 1 and f % 2 == 1:
        return 1 + 2 * (f - 1)
    return 2 * f if f > 1 else 1


def _frame_batches(total: int, batch: int) -> list[int]:
    """CogVideoX's _decode: max(T // batch, 1) calls; the first takes the remainder."""
    if batch <= 0 or total <= batch:
        return [total]
    n = total // batch
    return [batch + total % batch] + [batch] * (n - 1)


def _cogvideox(model, vae, walk: _Walk, width: int, height: int, frames: int) -> None:
    """CogVideoXDecoder3D: causal 3x3x3 convs, spatially conditioned norms (two 1x1x1 convs from the latent
    per norm), mid of 2 resnets (no attention), up blocks of layers+1 resnets, 2D 3x3 up-sampler convs (the
    first two also double time), run on batches of `frame_batch` latent frames."""
    h, w = _latent_hw(model, width, height)
    rev = list(reversed(vae.block_out_channels))
    nb = len(rev)
    time_ups = {i for i in range(nb - 1) if 2 ** (i + 1) <= model.vae_stride[0]}
    zc = vae.latent_channels

    def snorm(part: str, c: int, pos: float) -> None:
        walk.conv(part, 1, zc, c, pos)
        walk.conv(part, 1, zc, c, pos)
        walk.elementwise(part, c, pos, 2)

    def resnet(part: str, c_in: int, c_out: int, pos: float) -> None:
        snorm(part, c_in, pos)
        walk.conv(part, 27, c_in, c_out, pos)
        snorm(part, c_out, pos)
        walk.conv(part, 27, c_out, c_out, pos)
        if c_in != c_out:
            walk.conv(part, 1, c_in, c_out, pos)
        walk.add(part, c_out, pos)

    for f in _frame_batches(model.latent_frames(frames), vae.frame_batch):
        hh, ww, ff = h, w, f
        pos = float(ff * hh * ww)
        walk.conv("conv_in", 27, zc, rev[0], pos)
        for _ in range(2):
            resnet("mid", rev[0], rev[0], pos)
        c_prev = rev[0]
        for i, c in enumerate(rev):
            for j in range(vae.layers(nb - 1 - i) + 1):
                resnet(f"up{i}", c_prev if j == 0 else c, c, pos)
            c_prev = c
            if i != nb - 1:
                f2 = _cogvideox_time_up(ff) if i in time_ups else ff
                new = float(f2 * hh * 2 * ww * 2)
                walk.upsample(f"up{i}", c, pos, new)
                ff, hh, ww, pos = f2, hh * 2, ww * 2, new
                walk.conv(f"up{i}_upsampler", 9, c, c, pos)
        snorm("conv_out", rev[-1], pos)
        walk.conv("conv_out", 27, rev[-1], 3, pos)


def _temporal_tiles(total: int, tile: int, stride: int) -> list[int]:
    """HunyuanVideo's _temporal_tiled_decode: a tile of `tile` latent frames starts every `stride`."""
    if tile <= 0 or stride <= 0 or total <= tile - 1:
        return [total]
    return [min(tile, total - i) for i in range(0, total, stride)]


def _hunyuanvideo(model, vae, walk: _Walk, width: int, height: int, frames: int) -> None:
    """HunyuanVideoDecoder3D: causal 3x3x3 convs, mid (resnet, causal attention over every token of the tile
    with a materialised mask, resnet), up blocks of layers+1 resnets; up-samplers (nearest, first frame
    spatial only) followed by a causal 3x3x3 conv; run on temporal tiles."""
    h, w = _latent_hw(model, width, height)
    rev = list(reversed(vae.block_out_channels))
    nb = len(rev)
    n_time = {2: 1, 4: 2, 8: 3}.get(model.vae_stride[0], 0)
    zc = vae.latent_channels
    for f in _temporal_tiles(model.latent_frames(frames), vae.frame_tile, vae.frame_tile_stride):
        hh, ww, ff = h, w, f
        pos = float(ff * hh * ww)
        if vae.post_quant_conv:
            walk.conv("post_quant_conv", 1, zc, zc, pos)
        walk.conv("conv_in", 27, zc, rev[0], pos)
        _mid_block(walk, vae, rev[0], pos, 27, 1, pos, mask=True)
        c_prev = rev[0]
        for i, c in enumerate(rev):
            for j in range(vae.layers(nb - 1 - i) + 1):
                walk.resnet(f"up{i}", c_prev if j == 0 else c, c, pos, 27)
            c_prev = c
            if i != nb - 1:
                spatial = i < nb - 1
                timed = i >= nb - 1 - n_time
                f2 = 1 + 2 * (ff - 1) if timed and ff > 1 else ff
                s = 2 if spatial else 1
                new = float(f2 * hh * s * ww * s)
                walk.upsample(f"up{i}", c, pos, new)
                ff, hh, ww, pos = f2, hh * s, ww * s, new
                walk.conv(f"up{i}_upsampler", 27, c, c, pos)
        walk.elementwise("conv_out", rev[-1], pos, 2)
        walk.conv("conv_out", 27, rev[-1], 3, pos)


def _wan(model, vae, walk: _Walk, width: int, height: int, frames: int) -> None:
    """WanDecoder3d, one latent frame per call with a causal cache: conv_in, mid (resnet, per-frame attention,
    resnet), up blocks of layers+1 resnets with causal 3x3x3 convs; an `upsample3d` block runs a (3,1,1) time
    conv C -> 2C (skipped on the first chunk, so frames = 1 + 2 (T - 1)) then nearest x2 and a 2D 3x3 conv;
    Wan 2.1 halves the width in the up-sampler conv, Wan 2.2 (residual_up) keeps it and adds a DupUp3D
    shortcut; RMS norm, conv_out to 3 x patch^2 channels."""
    h, w = _latent_hw(model, width, height)
    rev = list(reversed(vae.block_out_channels))
    nb = len(rev)
    n_time = {1: 0, 2: 1, 4: 2, 8: 3}.get(model.vae_stride[0], 0)
    time_ups = set(range(n_time))
    zc = vae.latent_channels
    lat = model.latent_frames(frames)
    ff = lat
    pos = float(ff * h * w)
    hh, ww = h, w
    if vae.post_quant_conv:
        walk.conv("post_quant_conv", 1, zc, zc, pos)
    walk.calls = lat
    walk.conv("conv_in", 27, zc, rev[0], pos)
    _mid_block(walk, vae, rev[0], pos, 27, ff, hh * ww)
    c_prev = rev[0]
    for i, c in enumerate(rev):
        for j in range(vae.layers(nb - 1 - i) + 1):
            walk.resnet(f"up{i}", c_prev if j == 0 else c, c, pos, 27)
        if i != nb - 1:
            c_up = c if vae.residual_up else c // 2
            f2 = ff
            if i in time_ups:
                walk.conv(f"up{i}_time_conv", 3, c, 2 * c, float(max(0, ff - 1) * hh * ww), in_positions=pos)
                f2 = 1 + 2 * (ff - 1) if ff > 1 else 1
            new = float(f2 * hh * 2 * ww * 2)
            walk.upsample(f"up{i}", c, f2 * hh * ww, new)
            if vae.residual_up:
                walk.upsample(f"up{i}_shortcut", c, pos, new)
                walk.add(f"up{i}_shortcut", c, new)
            ff, hh, ww, pos = f2, hh * 2, ww * 2, new
            walk.conv(f"up{i}_upsampler", 9, c, c_up, pos)
            c_prev = c_up
        else:
            c_prev = c
    walk.elementwise("conv_out", rev[-1], pos, 2)
    walk.conv("conv_out", 27, rev[-1], 3 * vae.patch_size ** 2, pos)


DCAE_HEAD_DIM = 32       # AutoencoderDC attention_head_dim default (SanaMultiscaleLinearAttention heads of 32)
DCAE_SCALES = (5,)       # decoder_qkv_multiscales of the EfficientViT stages: one extra 5x5 depthwise scale
GLUMB_EXPAND = 4         # GLUMBConv expand_ratio default


def _dcae_vit(walk: _Walk, part: str, c: int, pos: float) -> None:
    """EfficientViTBlock: multi-scale ReLU linear attention (q, k, v projections, a depthwise 5x5 + grouped 1x1 per
    extra scale, V K^T and (V K^T) Q per head of 32 with V padded by one row, out projection) and a GLUMBConv
    (1x1 to 2 x 4C, depthwise 3x3, gated, 1x1 back to C)."""
    heads = c // DCAE_HEAD_DIM
    for _ in range(3):
        walk.conv(part, 1, c, c, pos)
    for k in DCAE_SCALES:
        walk.conv(part, k * k, 3 * c, 3 * c, pos, groups=3 * c)
        walk.conv(part, 1, 3 * c, 3 * c, pos, groups=3 * heads)
    all_heads = heads * (1 + len(DCAE_SCALES))
    d = DCAE_HEAD_DIM
    walk.work._add(part, all_heads * 2 * (2.0 * (d + 1) * d * pos), walk.b * 4.0 * all_heads * d * pos)
    walk.conv(part, 1, c * (1 + len(DCAE_SCALES)), c, pos)
    walk.elementwise(part, c, pos, 1)
    hidden = GLUMB_EXPAND * c
    walk.conv(part, 1, c, 2 * hidden, pos)
    walk.elementwise(part, 2 * hidden, pos, 1)
    walk.conv(part, 9, 2 * hidden, 2 * hidden, pos, groups=2 * hidden)
    walk.elementwise(part, 2 * hidden, pos, 1)
    walk.conv(part, 1, hidden, c, pos)
    walk.elementwise(part, c, pos, 1)
    walk.add(part, c, pos)


def _dcae(model, vae, walk: _Walk, width: int, height: int, frames: int) -> None:
    """AutoencoderDC Decoder: channel-repeat shortcut + 3x3 conv_in, then from the deepest stage up: an up block
    (nearest x2 + 3x3 conv C_in -> C_out, pixel-shuffled repeat shortcut) except on the deepest, then the
    stage's blocks (ResBlock: 3x3 conv, act, 3x3 conv, RMS norm, add; the last `vit_stages` stages use
    EfficientViT blocks); RMS norm, ReLU, conv_out 3x3 to RGB. An interpolate and a pixel-shuffle up block
    cost the same FLOPs."""
    h, w = _latent_hw(model, width, height)
    boc = vae.block_out_channels
    nb = len(boc)
    n = max(1, frames)
    pos = float(n * h * w)
    walk.conv("conv_in", 9, vae.latent_channels, boc[-1], pos)
    walk.add("conv_in", boc[-1], pos)
    for i in reversed(range(nb)):
        layers = vae.layers(i)
        part = f"stage{i}"
        if i < nb - 1 and layers > 0:
            new = 4 * pos
            walk.upsample(part, boc[i + 1], pos, new)
            pos = new
            walk.conv(part, 9, boc[i + 1], boc[i], pos)
            walk.add(part, boc[i], pos)
        for _ in range(layers):
            if i >= nb - vae.vit_stages:
                _dcae_vit(walk, part, boc[i], pos)
            else:
                walk.conv(part, 9, boc[i], boc[i], pos)
                walk.elementwise(part, boc[i], pos, 1)
                walk.conv(part, 9, boc[i], boc[i], pos)
                walk.elementwise(part, boc[i], pos, 1)
                walk.add(part, boc[i], pos)
    walk.elementwise("conv_out", boc[0], pos, 2)
    walk.conv("conv_out", 9, boc[0], 3, pos)


def _mochi(model, vae, walk: _Walk, width: int, height: int, frames: int) -> None:
    """MochiDecoder3D: 1x1x1 conv_in, a block of resnets (two causal 3x3x3 convs, replicate padding), up blocks
    whose resnets run at the input width and a linear projection C_in -> C_out x t x s^2 followed by
    depth-to-space, a block of resnets at the narrowest width, a linear proj_out. Frames grow by each block's
    temporal expansion (the first frames are dropped afterwards: no FLOPs saved)."""
    h, w = _latent_hw(model, width, height)
    boc = vae.block_out_channels
    lpb = vae.layers_per_block
    texp = vae.temporal_expansions
    nb = len(boc)
    pos = float(model.latent_frames(frames) * h * w)
    walk.conv("conv_in", 1, vae.latent_channels, boc[-1], pos)
    for _ in range(lpb[-1]):
        walk.resnet("block_in", boc[-1], boc[-1], pos, 27)
    for i in range(nb - 1):
        c_in, c_out, t = boc[-i - 1], boc[-i - 2], texp[-i - 1]
        for _ in range(lpb[-i - 2]):
            walk.resnet(f"up{i}", c_in, c_in, pos, 27)
        walk.conv(f"up{i}_proj", 1, c_in, c_out * t * 4, pos)
        pos *= 4 * t
        walk.elementwise(f"up{i}_proj", c_out, pos, 1)
    for _ in range(lpb[0]):
        walk.resnet("block_out", boc[0], boc[0], pos, 27)
    walk.elementwise("proj_out", boc[0], pos, 1)
    walk.conv("proj_out", 1, boc[0], 3, pos)


STEPVIDEO_TIME_UP_LEVELS = 2   # VideoDecoder temporal_up_layers [2, 3]: the two deepest levels double time


def _stepvideo(model, vae, walk: _Walk, width: int, height: int, frames: int) -> None:
    """Step-Video-T2V VideoDecoder (version 2), one call per chunk of `frame_batch` latent frames: causal 3x3x3
    conv_in to 4 x z x 8 channels, a causal conv to C x 8 then 3D pixel shuffle x2 (first frame dropped), mid
    (resnet, causal single-head attention over every token of the chunk, resnet), up levels of layers+1
    resnets; the two deepest levels up-sample with nearest x2 in time and space then two causal 3x3x3 convs,
    the next with nearest x2 and a 2D 3x3 conv; norm, causal conv_out (the first frames are dropped: no FLOPs
    saved)."""
    h, w = _latent_hw(model, width, height)
    rev = list(reversed(vae.block_out_channels))
    nb = len(rev)
    zc = vae.latent_channels
    wide = 4 * zc * 8
    unpatch = model.vae_stride[1] // 2 ** (nb - 1)
    lat = model.latent_frames(frames)
    batch = vae.frame_batch or lat
    chunks = [min(batch, lat - i) for i in range(0, lat, batch)]
    for t in chunks:
        pos = float(t * h * w)
        walk.conv("conv_in", 27, zc, wide, pos)
        walk.conv("conv_unpatchify", 27, wide, rev[0] * unpatch ** 3, pos)
        ff, hh, ww = unpatch * t - (unpatch - 1), h * unpatch, w * unpatch
        pos = float(ff * hh * ww)
        walk.upsample("conv_unpatchify", rev[0], pos, pos)
        _mid_block(walk, vae, rev[0], pos, 27, 1, pos)
        c_prev = rev[0]
        for i, c in enumerate(rev):
            for j in range(vae.layers(nb - 1 - i) + 1):
                walk.resnet(f"up{i}", c_prev if j == 0 else c, c, pos, 27)
            c_prev = c
            if i == nb - 1:
                continue
            timed = i < STEPVIDEO_TIME_UP_LEVELS
            ff2 = 2 * ff if timed else ff
            new = float(ff2 * hh * 2 * ww * 2)
            walk.upsample(f"up{i}", c, pos, new)
            ff, hh, ww, pos = ff2, hh * 2, ww * 2, new
            if timed:
                walk.resnet(f"up{i}_upsampler", c, c, pos, 27)
            else:
                walk.conv(f"up{i}_upsampler", 9, c, c, pos)
        walk.elementwise("conv_out", rev[-1], pos, 2)
        walk.conv("conv_out", 27, rev[-1], 3, pos)


_WALKS = {"autoencoderkl": _autoencoderkl, "cogvideox": _cogvideox, "hunyuanvideo": _hunyuanvideo, "wan": _wan,
          "dcae": _dcae, "mochi": _mochi, "stepvideo": _stepvideo}


def _spatial_tiles(latent: int, tile: int, stride: int) -> list[int]:
    """diffusers' tiled_decode: a tile of `tile` latent positions starts every `stride` (clipped at the edge)."""
    return [min(tile, latent - i) for i in range(0, latent, stride)]


def vae_decode_work(model, width: int, height: int, frames: int = 1, tiled: bool = False) -> StageWork:
    """FLOPs and bytes of decoding one sample of width x height x frames, as the default pipeline runs it, or
    with the VAE's enable_tiling() when `tiled` (each spatial tile decoded whole: overlaps are counted twice).
    Raises NotPriced when the model has no [vae] table, its decoder family is not walked here, or tiling is
    asked of a VAE whose [vae] does not describe its tiles."""
    vae = getattr(model, "vae", None)
    if vae is None:
        raise NotPriced(f"{model.name}: VAE decode not priced (the preset has no [vae] table)")
    walk_fn = _WALKS.get(vae.decoder)
    if walk_fn is None:
        raise NotPriced(f"{model.name}: VAE decode not priced (decoder family {vae.decoder!r} is not walked; "
                        f"walked: {', '.join(sorted(_WALKS))})")
    walk = _Walk(vae.dtype)
    if not tiled:
        walk_fn(model, vae, walk, width, height, frames)
        return walk.work
    if not vae.tile_latent:
        raise NotPriced(f"{model.name}: tiled VAE decode not priced ([vae] gives no tile_latent / tile_latent_stride)")
    _, sh, sw = model.vae_stride
    lat_h, lat_w = _latent_hw(model, width, height)
    (th, tw), (sth, stw) = vae.tile_latent, vae.tile_latent_stride
    if lat_h <= th and lat_w <= tw:      # diffusers tiles only a latent larger than one tile
        walk_fn(model, vae, walk, width, height, frames)
        return walk.work
    for hh in _spatial_tiles(lat_h, th, sth):
        for ww in _spatial_tiles(lat_w, tw, stw):
            walk_fn(model, vae, walk, ww * sw, hh * sh, frames)
    walk.work.notes.append(f"tiled: latent tiles {th}x{tw} every {sth}x{stw}")
    return walk.work


def vae_decode_flops(model, width: int, height: int, frames: int = 1, tiled: bool = False) -> float:
    """FLOPs of decoding one sample (see vae_decode_work); NotPriced when the VAE was not read."""
    return vae_decode_work(model, width, height, frames, tiled).flops


def text_encode_flops(model, tokens: int) -> float:
    """FLOPs of encoding one prompt: 2 x encoder parameters x tokens (a dense forward; attention over a few
    hundred tokens is under 1 % of it). Tiny beside the decode; NotPriced when the encoder size is unknown."""
    params_b = float(getattr(model, "text_encoder_params_b", 0.0) or 0.0)
    if params_b <= 0:
        raise NotPriced(f"{model.name}: text encoding not priced (text_encoder_params_b is not given)")
    return 2.0 * params_b * 1e9 * tokens
