"""Small hand-checkable model and machine for the cost-model tests (built directly, no TOML)."""

from __future__ import annotations

import dataclasses

from ditpar.plan.inputs.presets import HardwarePreset, LinkClass, ModelPreset


def tiny_model(kv_heads: int = 8, **kw) -> ModelPreset:
    """8 heads x 8 = 64 wide, FFN 256, two self-attention blocks, no text; 64x64 px -> 4x4 = 16 tokens."""
    base = dict(name="tiny", aliases=(), kind="image", params_b=0.001, hidden=64, heads=8, kv_heads=kv_heads,
                head_dim=8, ffn=256, blocks={"self": 2}, text_joint_tokens=0, text_cross_tokens=0,
                latent_channels=4, patch=(1, 2, 2), vae_stride=(1, 8, 8), vae_temporal_causal=False,
                cfg_default=False, default_width=64, default_height=64, default_frames=1, default_steps=10,
                sources={})
    base.update(kw)
    return ModelPreset(**base)


def box(domain_size: int = 4, devices: int = 8, intra: float = 100.0, inter: float = 10.0,
        interconnect: str = "NVLink", **kw) -> HardwarePreset:
    """One node of `devices` devices in domains of `domain_size`; 1 us latency on every class."""
    links = {"intra_domain": LinkClass("fast", intra, 1.0), "inter_domain": LinkClass("slow", inter, 1.0),
             "inter_node": LinkClass("net", 5.0, 1.0)}
    base = dict(name="box", aliases=(), vendor="nvidia", accelerator="X", interconnect=interconnect,
                devices_per_node=devices, nodes=1, peak_tflops_bf16=100.0, mfu=0.5, memory_GB=80.0,
                domain_size=domain_size, links=links, sources={}, hbm_bandwidth_GBps=1000.0)
    base.update(kw)
    return HardwarePreset(**base)


def replace(obj, **kw):
    return dataclasses.replace(obj, **kw)
