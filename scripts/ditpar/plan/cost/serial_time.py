"""Seconds of the serial stages (VAE decode, text encoding), priced as memory-bound convolution stacks.

A VAE decoder at video resolution is a stack of wide convolutions at full output resolution; eager PyTorch runs
them far from the card's compute peak and the time follows the memory traffic per output pixel, not the FLOPs
(a Wan 2.1 VAE decode on H200, A800 and 910B moves 240-390 KB per output pixel-frame at HBM speed, bf16 terms,
while its achieved share of compute peak spreads 4x). So:

    decode seconds = max(bytes x traffic multiplier / HBM bandwidth, FLOPs / (peak x best measured fraction))

`bytes` is the eager activation and weight traffic this project counts from the decoder's structure
(plan/cost/serial.py, each conv reading its input and writing its output once); the traffic multiplier is what a
PUBLISHED single-device decode (`MEASUREMENTS`, each with its source) shows on top of that count: measured seconds x
the measured card's HBM bandwidth / counted bytes (cuDNN's implicit-GEMM passes, layout copies, the causal cache,
padding). Decoders fall in two kinds: 2D convolution stacks (SD AutoencoderKL, DC-AE) and causal 3D stacks (Wan,
CogVideoX, HunyuanVideo, Mochi, Step-Video). The multiplier used for a card is, first found: the median of that
kind's measurements on the same accelerator; on the same compute die (`DIE`); else of all of that kind's
measurements; `DecodeTime.basis` says which. The multiplier is a property of how a decoder family's kernels run,
so it is taken only for a family with a published decode of its own (AutoencoderKL, Wan, HunyuanVideo); the
others (CogVideoX, Mochi, Step-Video, DC-AE) are priced from their FLOPs at their kind's measured fraction of peak. The compute side never lets a decode run faster than the best
achieved fraction of peak among those same measurements. A run measured in fp32 is counted with fp32 bytes; its
achieved fraction is of the bf16/fp16 peak as measured (not corrected for TF32). The figures are never fitted to the latency tables the chooser is
judged on (../shared/calibration, benchmarks/published).
"""

from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass
from functools import cache

from ditpar.plan.cost import serial
from ditpar.plan.inputs.presets import load_model

KIND = {"autoencoderkl": "2d", "dcae": "2d", "cogvideox": "3d", "hunyuanvideo": "3d", "wan": "3d", "mochi": "3d",
        "stepvideo": "3d"}

#: accelerators sharing one compute die (the same SM / core design): a measurement on one is the nearest
#: evidence for another; the H20 is a cut-down GH100 with 148 of 989 TFLOPS and is kept apart
DIE = {"H100": "GH100", "H200": "GH100", "A100": "GA100", "L40": "AD102", "L20": "AD102", "RTX 4090": "AD102"}

HF_DOC = ("huggingface/diffusers@4fb44bdf910ee64c1ecdac09830e68a1ecbc2b2a:docs/source/en/hybrid_inference/"
          "vae_decode.md (https://huggingface.co/docs/diffusers/main/en/hybrid_inference/vae_decode; removed from "
          "the repository in 5794ffffbe9c697407b5dc1479f3cbb6886d4085)")
PEAK_4090 = "templates/hardware/rtx4090-pcie.toml peak_tflops_bf16 (Ada whitepaper: 165.2 dense FP16 tensor, FP32 accumulate)"

#: memory bandwidth of each measured card, GB/s (the hardware preset's hbm_bandwidth_GBps and its source)
HBM_GBPS = {"RTX 4090": (1008.0, "templates/hardware/rtx4090-pcie.toml (24 GB GDDR6X, 1,008 GB/s)"),
            "A100": (2039.0, "templates/hardware/a800-nvlink.toml (A800-SXM-80GB: 2,039 GB/s, as A100-SXM4-80GB)"),
            "H20": (4000.0, "templates/hardware/h20-nvlink.toml (96 GB HBM3, 4.0 TB/s)"),
            "H200": (4800.0, "templates/hardware/h200-nvlink.toml (141 GB HBM3e, 4.8 TB/s)"),
            "910B": (1600.0, "templates/hardware/atlas-800i-a2.toml (assumption: ~1.6 TB/s HBM2e)")}


@dataclass(frozen=True)
class DecodeMeasurement:
    """One published, single-device VAE decode time and what it was run on."""

    label: str
    source: str
    accelerator: str           # as the hardware presets spell it (an A800 is an A100 die)
    peak_tflops: float         # dense bf16/fp16 tensor peak of the measured card
    peak_source: str
    model: str                 # the preset whose [vae] is the measured VAE
    width: int
    height: int
    frames: int
    seconds: float
    dtype: str                 # precision of the measured run, as its source states or its code defaults
    notes: str = ""
    tiled: bool = False        # the measured run decoded with enable_tiling()

    @property
    def kind(self) -> str:
        return KIND[_model(self.model).vae.decoder]

    @property
    def flops(self) -> float:
        """FLOPs this project counts for the measured decode."""
        return serial.vae_decode_flops(_model(self.model), self.width, self.height, self.frames, self.tiled)

    @property
    def achieved_tflops(self) -> float:
        return self.flops / self.seconds / 1e12

    @property
    def fraction(self) -> float:
        """Achieved fraction of the card's dense bf16/fp16 peak."""
        return self.achieved_tflops / self.peak_tflops


    @property
    def bytes(self) -> float:
        """Bytes this project counts for the measured decode, in the measured run's precision."""
        m = _model(self.model)
        run = dataclasses.replace(m, vae=dataclasses.replace(m.vae, dtype=self.dtype))
        return serial.vae_decode_work(run, self.width, self.height, self.frames, self.tiled).bytes

    @property
    def traffic(self) -> float:
        """Traffic multiplier: measured seconds x the card's memory bandwidth / counted bytes."""
        return self.seconds * HBM_GBPS[self.accelerator][0] * 1e9 / self.bytes


MEASUREMENTS: tuple[DecodeMeasurement, ...] = (
    DecodeMeasurement("SD v1.5 VAE 1024px, RTX 4090", HF_DOC + ": SD v1.5 table, 'NVIDIA GeForce RTX 4090 | "
                      "1024x1024 | 0.148' (stabilityai/sd-vae-ft-mse)", "RTX 4090", 165.2, PEAK_4090,
                      "PixArt-alpha", 1024, 1024, 1, 0.148, "fp16", "the doc's examples send float16 latents"),
    DecodeMeasurement("SD v1.5 VAE 512px, RTX 4090", HF_DOC + ": SD v1.5 table, 'NVIDIA GeForce RTX 4090 | "
                      "512x512 | 0.031'", "RTX 4090", 165.2, PEAK_4090, "PixArt-alpha", 512, 512, 1, 0.031, "fp16"),
    DecodeMeasurement("SDXL VAE 1024px, RTX 4090", HF_DOC + ": SDXL table, 'NVIDIA GeForce RTX 4090 | 1024x1024 | "
                      "0.256' (madebyollin/sdxl-vae-fp16-fix, the same decoder as SD v1.5)", "RTX 4090", 165.2,
                      PEAK_4090, "HunyuanDiT", 1024, 1024, 1, 0.256, "fp16",
                      "1.7x the SD v1.5 time for the same decoder: the spread of one card's measurements"),
    DecodeMeasurement("SDXL VAE 512px, RTX 4090", HF_DOC + ": SDXL table, 'NVIDIA GeForce RTX 4090 | 512x512 | 0.057'",
                      "RTX 4090", 165.2, PEAK_4090, "HunyuanDiT", 512, 512, 1, 0.057, "fp16"),
    DecodeMeasurement("Wan 2.1 VAE 720p, A800", "nono-Sang/FastVAE@3d93a057218a9e81d1252fcd60883f5cc21d39af:README.md "
                      "('5s 720p video, A800 GPU, bf16', Wan2_1 table, 1 process: decode 9.256 s; "
                      "test/wan/test_vae_video_e2e.py: diffusers AutoencoderKLWan, --height 1280 --width 720)",
                      "A100", 312.0, "templates/hardware/a100-sxm-nvlink.toml (A800 = A100 die, BF16 312 dense)",
                      "Wan2.1-T2V-14B", 720, 1280, 81, 9.256, "bf16",
                      "frame count not stated: 81 assumed (5 s at Wan 2.1's 16 fps)"),
    DecodeMeasurement("Wan 2.2 VAE 720p, A800", "nono-Sang/FastVAE@3d93a057218a9e81d1252fcd60883f5cc21d39af:README.md "
                      "(Wan2_2 table, 1 process: decode 10.336 s; checkpoint Wan-AI/Wan2.2-TI2V-5B-Diffusers vae)",
                      "A100", 312.0, "templates/hardware/a100-sxm-nvlink.toml (A800 = A100 die, BF16 312 dense)",
                      "Wan2.2-TI2V-5B", 720, 1280, 81, 10.336, "bf16",
                      "frame count not stated: 81 assumed (the same input video as the Wan 2.1 row)"),
    DecodeMeasurement("Wan 2.1 VAE 720p x81, H20", "github.com/sgl-project/sglang/pull/16510 (description: 'Wan2.2 "
                      "720p video on single H20. VAE decoding time: 26.2795s', Wan2.2-T2V-A14B-Diffusers --height "
                      "720 --width 1280, default 81 frames; its VAE is the Wan 2.1 VAE)", "H20", 148.0,
                      "templates/hardware/h20-nvlink.toml (148 TFLOPS FP16/BF16 dense)", "Wan2.2-T2V-A14B",
                      1280, 720, 81, 26.2795, "fp32",
                      "sglang WanT2V480PConfig vae_precision 'fp32' (python/sglang/multimodal_gen/configs/"
                      "pipeline_configs/wan.py@055e9504f95aef218b05ae0cc4e73face0f3a9c1)"),
    DecodeMeasurement("Wan 2.1 VAE 480p x81, H200", "github.com/sgl-project/sglang/pull/27875 (description: 'H200 "
                      "2GPU Wan2.1-T2V-1.3B, CFG-only ... 832x480x81f ... origin/main: decode 2631.4 ms'; on main "
                      "a CFG-only run decodes on one GPU, the PR adds the CFG rank)", "H200", 989.0,
                      "templates/hardware/h200-nvlink.toml (989 dense BF16)", "Wan2.1-T2V-1.3B", 832, 480, 81,
                      2.6314, "bf16", "sglang WanT2V480PConfig vae_decode_precision 'bf16' (same file)"),
    DecodeMeasurement("Wan 2.1 VAE 720p x160, Ascend 910B3", "github.com/sgl-project/sglang/issues/20764 (Ascend NPU "
                      "910B3, CANN 8.5.0, Wan2.1-T2V-1.3B-Diffusers, size 1280x720, num_frames 160: "
                      "use_parallel_decode=false decoding time 48.8579 s)", "910B", 313.0,
                      "templates/hardware/atlas-800i-a2.toml (910B: 313 TFLOPS)", "Wan2.1-T2V-1.3B", 1280, 720,
                      160, 48.8579, "fp32", "sglang's default Wan vae_precision fp32; 160 frames -> 40 latent frames"),
    DecodeMeasurement("HunyuanVideo VAE 480p x77 tiled, H200", "github.com/sgl-project/sglang/pull/36012 (description: "
                      "4x H200, HunyuanVideo 848x480x77, on main the VAE 'falls back to sequential tiled decode, leaving "
                      "the other sequence-parallel ranks idle'; 'Lossless decode falls from a 5.713 s mean to 1.654 s')",
                      "H200", 989.0, "templates/hardware/h200-nvlink.toml (989 dense BF16)", "HunyuanVideo", 848, 480,
                      77, 5.713, "fp16", "sglang HunyuanConfig vae_precision 'fp16'; tiles assumed diffusers' "
                      "defaults (256 px every 192, 5 latent frames every 3), as sglang's VAE port keeps them",
                      tiled=True),
    DecodeMeasurement("FLUX.2 VAE 1024px, H200", "github.com/sgl-project/sglang/pull/33451 (title: 'FLUX.2 VAE decoder "
                      "fast path behind quality=high (H200: 1024^2 97.6->29.2 ms, ...)': 97.6 ms is the eager diffusers "
                      "decoder before the fast path)", "H200", 989.0, "templates/hardware/h200-nvlink.toml (989 dense BF16)",
                      "FLUX.2-dev", 1024, 1024, 1, 0.0976, "bf16", "the pipeline's bf16 VAE (not stated in the title)"),
    DecodeMeasurement("FLUX.2 VAE 2048px, H200", "github.com/sgl-project/sglang/pull/33451 (title: '... 2048^2 "
                      "437.2->168.5 ms')", "H200", 989.0, "templates/hardware/h200-nvlink.toml (989 dense BF16)",
                      "FLUX.2-dev", 2048, 2048, 1, 0.4372, "bf16", "the pipeline's bf16 VAE (not stated in the title)"),
)


@cache
def _model(name: str):
    return load_model(name)


@dataclass(frozen=True)
class Efficiency:
    """Achieved fraction of peak used for one decoder kind on one accelerator, and what it rests on."""

    fraction: float
    basis: str
    measurements: tuple[str, ...]


def _nearest_measurements(decoder: str, accelerator: str, measurements: tuple[DecodeMeasurement, ...],
                          what: tuple[str, str]) -> tuple[list[DecodeMeasurement], str]:
    """The published decodes a figure for this decoder kind on this accelerator rests on: same accelerator, else
    same die, else every decode of the kind; and the basis in words."""
    kind = KIND.get(decoder)
    if kind is None:
        raise serial.NotPriced(f"decoder family {decoder!r} has no {what[0]}; known: {', '.join(sorted(KIND))}")
    same_kind = [m for m in measurements if m.kind == kind]
    if not same_kind:
        raise serial.NotPriced(f"no published {kind} VAE decode measurement to derive {what[1]} from")
    tiers = (
        ([m for m in same_kind if m.accelerator == accelerator], f"measured on {accelerator}"),
        ([m for m in same_kind if accelerator in DIE and DIE.get(m.accelerator) == DIE[accelerator]],
         f"no {kind} measurement on {accelerator}; measured on the same die ({DIE.get(accelerator, '')})"),
        (same_kind, f"no {kind} measurement on {accelerator} or its die: the global {kind} figure"),
    )
    chosen, basis = next((c, b) for c, b in tiers if c)
    return chosen, f"{basis}, median of {len(chosen)}"


def decode_efficiency(decoder: str, accelerator: str,
                      measurements: tuple[DecodeMeasurement, ...] = MEASUREMENTS) -> Efficiency:
    """Measured fraction of peak for this decoder family's kind on this accelerator (see module docstring)."""
    chosen, basis = _nearest_measurements(decoder, accelerator, measurements, ("efficiency kind", "an efficiency"))
    return Efficiency(statistics.median(m.fraction for m in chosen), basis, tuple(m.label for m in chosen))


@dataclass(frozen=True)
class Traffic:
    """Traffic multiplier used for one decoder kind on one accelerator, the compute ceiling, and their basis."""

    multiplier: float
    ceiling: float             # best achieved fraction of peak among the same measurements (the compute side)
    basis: str
    measurements: tuple[str, ...]


def decode_traffic(decoder: str, accelerator: str,
                   measurements: tuple[DecodeMeasurement, ...] = MEASUREMENTS) -> Traffic:
    """Measured traffic multiplier for this decoder family's kind on this accelerator (module docstring)."""
    chosen, basis = _nearest_measurements(decoder, accelerator, measurements, ("decoder kind", "a traffic multiplier"))
    return Traffic(statistics.median(m.traffic for m in chosen), max(m.fraction for m in chosen), basis,
                   tuple(m.label for m in chosen))


def vae_decode_s(flops: float, nbytes: float, peak_tflops: float, efficiency: float,
                 hbm_GBps: float = 0.0) -> float:
    """Seconds of a decode: compute at peak x efficiency, never faster than its bytes at HBM bandwidth."""
    compute = flops / (peak_tflops * 1e12 * efficiency)
    memory = nbytes / (hbm_GBps * 1e9) if hbm_GBps > 0 else 0.0
    return max(compute, memory)


@dataclass(frozen=True)
class DecodeTime:
    """A predicted decode: seconds, the work behind it and the efficiency's basis."""

    seconds: float
    flops: float
    bytes: float
    efficiency: float          # the compute ceiling (best measured fraction of peak for the kind)
    basis: str
    traffic: float = 1.0       # the traffic multiplier on the counted bytes


def predict_decode(model, hw, width: int, height: int, frames: int = 1, tiled: bool = False) -> DecodeTime:
    """Decode seconds of one sample on one device of `hw` (a HardwarePreset), untiled as the default pipeline
    or with enable_tiling(): the counted bytes times the measured traffic multiplier at the card's memory
    bandwidth, never faster than the best measured compute rate; a decoder family with no published decode
    (CogVideoX, Mochi, Step-Video, DC-AE) at its kind's measured fraction of peak instead; NotPriced when the VAE
    (or its tiling) was not read."""
    work = serial.vae_decode_work(model, width, height, frames, tiled)
    if not any(_model(m.model).vae.decoder == model.vae.decoder for m in MEASUREMENTS):
        # no published decode of this decoder family: its traffic is unmeasured, so its kind's achieved fraction of
        # peak prices it (the FLOPs model)
        eff = decode_efficiency(model.vae.decoder, hw.accelerator)
        sec = vae_decode_s(work.flops, work.bytes, hw.peak_tflops_bf16, eff.fraction, hw.hbm_bandwidth_GBps)
        return DecodeTime(sec, work.flops, work.bytes, eff.fraction,
                          f"no published {model.vae.decoder} decode: FLOPs at the {KIND[model.vae.decoder]} achieved "
                          f"fraction of peak ({eff.basis})")
    tr = decode_traffic(model.vae.decoder, hw.accelerator)
    hbm = float(getattr(hw, "hbm_bandwidth_GBps", 0.0) or 0.0)
    if hbm <= 0:
        raise serial.NotPriced(f"{hw.name}: VAE decode not priced (the hardware preset gives no hbm_bandwidth_GBps)")
    sec = vae_decode_s(work.flops, work.bytes * tr.multiplier, hw.peak_tflops_bf16, tr.ceiling, hbm)
    return DecodeTime(sec, work.flops, work.bytes, tr.ceiling, tr.basis, tr.multiplier)


def text_encode_s(flops: float, hw) -> float:
    """Seconds of the text encoder: its GEMMs at the preset's large-GEMM efficiency (mfu); a stated assumption
    (no published text-encoder timing was used): it is milliseconds beside seconds of decode."""
    return flops / (hw.peak_tflops_bf16 * 1e12 * hw.mfu)
