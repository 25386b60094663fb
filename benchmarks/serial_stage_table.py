#!/usr/bin/env python3
"""Print the serial stages of one request per model preset: VAE decode GFLOPs and predicted seconds per card.

Decode FLOPs and bytes come from each preset's [vae] table (plan/cost/serial.py), seconds from the published
decode times (plan/cost/serial_time.py: bytes x traffic multiplier at HBM speed, or FLOPs at the measured fraction
of peak for a decoder without a published decode); a preset without [vae] prints 'not priced'. With --crosscheck, every
priced decoder is also counted by torch.utils.flop_counter around diffusers' own class (needs torch and
diffusers importable; the figures are compared, nothing is timed).
Run: python benchmarks/serial_stage_table.py [--hardware "H100-SXM NVLink x8" ...] [--tiled] [--crosscheck] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

from ditpar.plan.cost import serial, serial_time  # noqa: E402
from ditpar.plan.inputs import presets  # noqa: E402

DEFAULT_HW = ("H100-SXM NVLink x8", "A100-SXM-80GB NVLink x8", "L40 PCIe x8 (2 sockets)", "L20 PCIe x8 (2 sockets)",
              "Atlas 800I A2 (910B x8, HCCS)")


def rows(hardware: list[str], tiled: bool = False) -> list[dict]:
    hws = [presets.load_hardware(h) for h in hardware]
    out = []
    for name in presets.list_models():
        m = presets.load_model(name)
        row = {"model": m.name, "shape": f"{m.default_width}x{m.default_height}x{m.default_frames}"}
        try:
            work = serial.vae_decode_work(m, m.default_width, m.default_height, m.default_frames, tiled)
        except serial.NotPriced as exc:
            out.append({**row, "decoder": "", "decode_GFLOP": None, "note": str(exc)})
            continue
        row.update(decoder=m.vae.decoder, dtype=m.vae.dtype, decode_GFLOP=work.flops / 1e9, decode_GB=work.bytes / 1e9)
        for hw in hws:
            t = serial_time.predict_decode(m, hw, m.default_width, m.default_height, m.default_frames, tiled)
            row[f"{hw.accelerator}_s"] = t.seconds
            row[f"{hw.accelerator}_eff"] = t.efficiency
            row[f"{hw.accelerator}_basis"] = t.basis
        out.append(row)
    return out


def crosscheck() -> list[tuple[str, float, float]]:
    """FLOPs of serial.py beside torch's FlopCounterMode on diffusers' decoder classes (meta tensors)."""
    import diffusers as d
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    builders = {
        "FLUX.1-dev": lambda: d.AutoencoderKL(latent_channels=16, block_out_channels=(128, 256, 512, 512),
                                              layers_per_block=2, down_block_types=("DownEncoderBlock2D",) * 4,
                                              up_block_types=("UpDecoderBlock2D",) * 4, use_post_quant_conv=False,
                                              use_quant_conv=False),
        "CogVideoX-5b": d.AutoencoderKLCogVideoX, "HunyuanVideo": d.AutoencoderKLHunyuanVideo,
        "Wan2.1-T2V-14B": d.AutoencoderKLWan, "Mochi-1": d.AutoencoderKLMochi, "Qwen-Image": d.AutoencoderKLQwenImage,
        "Wan2.2-TI2V-5B": lambda: d.AutoencoderKLWan(base_dim=160, z_dim=48, is_residual=True, in_channels=12,
                                                     out_channels=12, decoder_base_dim=256, scale_factor_temporal=4,
                                                     scale_factor_spatial=16, patch_size=2),
        "SANA-1.6B-4K": lambda: d.AutoencoderDC(latent_channels=32, upsample_block_type="interpolate",
                                                downsample_block_type="conv", decoder_layers_per_block=(3,) * 6,
                                                decoder_block_types=("ResBlock",) * 3 + ("EfficientViTBlock",) * 3,
                                                encoder_block_types=("ResBlock",) * 3 + ("EfficientViTBlock",) * 3),
    }
    out = []
    for name, build in builders.items():
        m = presets.load_model(name)
        t, sh, sw = m.vae_stride
        lat_t = m.latent_frames(m.default_frames)
        with torch.device("meta"):
            vae = build().eval()
            shape = (1, m.vae.latent_channels, lat_t, m.default_height // sh, m.default_width // sw)
            z = torch.empty(shape if m.kind == "video" or m.vae.decoder == "wan" else (shape[0], shape[1], *shape[3:]))
        with torch.no_grad(), FlopCounterMode(display=False) as fc:
            vae.decode(z)
        ours = serial.vae_decode_flops(m, m.default_width, m.default_height, m.default_frames)
        out.append((name, ours, float(fc.get_total_flops())))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 epilog="example: python benchmarks/serial_stage_table.py --json > serial.json")
    ap.add_argument("--hardware", nargs="*", default=list(DEFAULT_HW), help="hardware preset names")
    ap.add_argument("--tiled", action="store_true", help="price the decode with the VAE's enable_tiling()")
    ap.add_argument("--crosscheck", action="store_true", help="also count with torch FlopCounterMode on diffusers")
    ap.add_argument("--json", action="store_true", help="JSON on stdout")
    args = ap.parse_args()
    table = rows(args.hardware, args.tiled)
    checks = crosscheck() if args.crosscheck else []
    if args.json:
        print(json.dumps({"rows": table, "crosscheck": [{"model": n, "serial_flops": a, "flop_counter": b}
                                                        for n, a, b in checks]}, indent=1))
        return 0
    accs = [presets.load_hardware(h).accelerator for h in args.hardware]
    print(f"{'model':18s} {'shape':>14s} {'decoder':>13s} {'GFLOP':>10s} " + " ".join(f"{a + ' s':>9s}" for a in accs))
    for r in table:
        if r["decode_GFLOP"] is None:
            print(f"{r['model']:18s} {r['shape']:>14s} {'':>13s} {'not priced':>10s}")
            continue
        print(f"{r['model']:18s} {r['shape']:>14s} {r['decoder']:>13s} {r['decode_GFLOP']:10.0f} "
              + " ".join(f"{r[a + '_s']:9.2f}" for a in accs))
    print("\ntraffic multiplier on the counted bytes (AutoencoderKL, Wan, HunyuanVideo decoders), compute ceiling, basis:")
    for kind, decoder in (("2d", "autoencoderkl"), ("3d", "wan")):
        for a in accs:
            t = serial_time.decode_traffic(decoder, a)
            print(f"  {kind} {a:9s} x{t.multiplier:5.2f}  ceiling {t.ceiling:.3f}  {t.basis}")
    print("efficiency (fraction of dense bf16 peak) for the decoders without a published decode of their own:")
    for kind, decoder in (("2d", "dcae"), ("3d", "cogvideox")):
        for a in accs:
            e = serial_time.decode_efficiency(decoder, a)
            print(f"  {kind} {a:9s} {e.fraction:.3f}  {e.basis}")
    for n, a, b in checks:
        print(f"crosscheck {n:16s} serial.py {a:.6e}  FlopCounterMode {b:.6e}  ratio {a / b:.9f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
