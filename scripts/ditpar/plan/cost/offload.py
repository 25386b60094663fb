"""Host-to-device traffic of the memory unlocks that move weights over PCIe: layer-wise DiT weight offload and
text-encoder offload. The host link of each accelerator is its PCIe generation x16 at 80 % of the signalling rate
(pinned host memory; the 80 % is an assumption stated here, not a measurement), or NVLink-C2C where the CPU shares it.

Layer-wise offload keeps two blocks on the card (the one computing and the one arriving) and streams every block's
weights once per denoising step, prefetched behind the previous block's compute (vLLM-Omni layerwise offload,
LightX2V `cpu_offload` at block granularity): per step the exposed time is max(0, weights / host link - compute).
Text-encoder offload moves the encoder onto the card for the prompt and off again: its bytes once per request.
"""

from __future__ import annotations

from ditpar.plan.cost.work import BYTES_PER_ELEMENT

PCIE_X16_GBPS = {3: 15.75, 4: 31.5, 5: 63.0, 6: 121.0}   # PCI-SIG per-direction x16 rates (8/16/32/64 GT/s, 128b/130b; Gen6 FLIT)
ACHIEVED = 0.8                                           # assumption: pinned-memory copies reach 80 % of the rate

#: accelerator -> (PCIe generation to the host, or None with a C2C figure in GB/s, and the source)
HOST_LINK = {
    "H100": (5, "nvidia.com/en-us/data-center/h100/ (SXM: PCIe Gen5 128 GB/s)"),
    "H200": (5, "nvidia.com/en-us/data-center/h200/ (PCIe Gen5 128 GB/s)"),
    "H800": (5, "H800 is an H100 with a cut NVLink: PCIe Gen5 as H100"),
    "H20": (5, "H20 (GH100 die): PCIe Gen5 x16 (NVIDIA H20 product brief)"),
    "H20-3e": (5, "as H20"),
    "B200": (5, "HGX B200: PCIe Gen5 to the host (nvidia.com/en-us/data-center/hgx/)"),
    "A100": (4, "nvidia.com/en-us/data-center/a100/ (PCIe Gen4 64 GB/s)"),
    "A800": (4, "as A100"),
    "L40": (4, "nvidia.com/en-us/data-center/l40/ (PCIe Gen4 x16 64 GB/s bidirectional)"),
    "L40S": (4, "nvidia.com/en-us/data-center/l40s/ (PCIe Gen4 x16)"),
    "L20": (4, "AD102 board as L40: PCIe Gen4 x16"),
    "RTX 4090": (4, "nvidia.com/en-us/geforce/graphics-cards/40-series/rtx-4090/ (PCIe Gen4)"),
    "V100": (3, "nvidia.com/en-us/data-center/v100/ (PCIe Gen3 32 GB/s)"),
    "T4": (3, "nvidia.com/en-us/data-center/tesla-t4/ (PCIe Gen3 x16)"),
    "910A": (4, "assumption: Ascend 910 PCIe 4.0 x16"),
    "910B": (4, "assumption: Ascend 910B PCIe 4.0 x16 (Atlas 800 A2 host link not anchored)"),
    "910C": (5, "assumption: Ascend 910C PCIe 5.0 x16 (not anchored)"),
}
C2C_GBPS = {"GB200": (450.0, "nvidia.com/en-us/data-center/gb200-nvl72/ (NVLink-C2C 900 GB/s, 450 per direction)"),
            "GB300": (450.0, "as GB200 (NVLink-C2C 900 GB/s)")}


def host_link_GBps(hw) -> tuple[float, str] | None:
    """(achieved host-to-device GB/s, basis) of one card of `hw`, or None when the accelerator's host link is unknown."""
    acc = str(getattr(hw, "accelerator", ""))
    if acc in C2C_GBPS:
        bw, src = C2C_GBPS[acc]
        return bw * ACHIEVED, f"NVLink-C2C {bw:g} GB/s per direction x {ACHIEVED:.0%} ({src})"
    if acc in HOST_LINK:
        gen, src = HOST_LINK[acc]
        bw = PCIE_X16_GBPS[gen]
        return bw * ACHIEVED, f"PCIe Gen{gen} x16 {bw:g} GB/s x {ACHIEVED:.0%} ({src})"
    return None


def layer_offload_s(weights_GB: float, layers: int, compute_step_s: float, steps: int, link_GBps: float) -> tuple[float, float]:
    """(exposed seconds over the request, GB left resident) of streaming `weights_GB` per step over the host link,
    each block prefetched behind the previous block's compute; two blocks stay on the card."""
    transfer = weights_GB / link_GBps
    exposed = max(0.0, transfer - compute_step_s) * steps
    return exposed, weights_GB * min(1.0, 2.0 / max(1, layers))


def text_encoder_offload_s(params_b: float, link_GBps: float) -> float:
    """Seconds a request spends moving an offloaded text encoder onto the card (bf16 weights, once)."""
    return params_b * 1e9 * BYTES_PER_ELEMENT / 1e9 / link_GBps
