"""Physical ceilings of measured bus bandwidth per link technology, from line rates, to reject impossible
--bench figures (MB/s written in a GB/s column, a stray exponent) before they replace a preset figure.

A busbw (nccl-tests definition, GB/s = 1e9 B/s, per rank and direction) cannot exceed the per-direction
line rate of the fastest generation of its technology, except that an in-network reduction (NVLink
SHARP, InfiniBand SHARP) sends each byte once and so reports up to twice the link's rate: NVIDIA/nccl-tests#212
measured ~480 GB/s NVLS all-reduce busbw on 450 GB/s-per-direction NVLink4. The ceiling is therefore
2 x the line rate below; the floor is a collective that took more than 10 s for its message.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: the busbw of an in-network reduction over the per-direction line rate (see the module docstring)
IN_NETWORK_FACTOR = 2.0
#: a single collective call longer than this is not a bandwidth measurement
MAX_CALL_S = 10.0


@dataclass(frozen=True)
class LineRate:
    """The fastest per-direction line rate of one link technology, in GB/s, and where it comes from."""

    technology: str
    GBps: float
    source: str

    @property
    def ceiling_GBps(self) -> float:
        return IN_NETWORK_FACTOR * self.GBps


LINE_RATES = {
    "PCIe": LineRate("PCIe", 128.0,
                     "PCIe 6.0 x16: 64 GT/s x 16 lanes = 128 GB/s per direction (PCI-SIG PCIe 6.0: 256 GB/s "
                     "bidirectional on x16); Gen4 x16 is 31.5, Gen5 x16 63. UPI/QPI paths between sockets "
                     "carry PCIe traffic and are bounded by it"),
    "NVLink": LineRate("NVLink", 900.0,
                       "NVLink 5 (Blackwell): 1.8 TB/s per GPU bidirectional = 900 GB/s per direction "
                       "(nvidia.com/en-us/data-center/nvlink); NVLink4 (H100/H200) 450 (NVIDIA/nccl-tests#212)"),
    "HCCS": LineRate("HCCS", 392.0,
                     "Ascend 910C in CloudMatrix384: over 392 GB/s unidirectional per NPU (fourteen 400 Gb/s "
                     "ports; ../shared/facts/parallelism-models-hardware.md); 910B full mesh 7 x 56 GB/s "
                     "= 392 (unverified, same file)"),
    "Infinity Fabric": LineRate("Infinity Fabric", 448.0,
                                "AMD Instinct MI300X / MI325X: seven xGMI (Infinity Fabric) links per GPU in an 8-GPU "
                                "full mesh, 64 GB/s per link and direction = 448 GB/s per GPU and direction (AMD MI300X "
                                "platform data sheet: 128 GB/s bidirectional per link, 896 GB/s per GPU; "
                                "rocm.blogs.amd.com/software-tools-optimization/mi300x-rccl-xgmi, 2025-03-02)"),
    "network": LineRate("network", 100.0,
                        "an 800 Gb/s NIC (InfiniBand XDR, 800GbE RoCE) = 100 GB/s per direction per rank; a 400G "
                        "ConnectX-7 NDR reaches 48-49 GB/s (NVIDIA/nccl-tests#267)"),
}

_NAMES = (  # (technology, pattern of a link name), first match wins
    ("NVLink", re.compile(r"nvlink|nvswitch|\bnv\d+\b", re.I)),
    ("HCCS", re.compile(r"hccs|\bsio\b|\bub\b|superpod", re.I)),
    ("Infinity Fabric", re.compile(r"infinity fabric|xgmi", re.I)),
    ("network", re.compile(r"\bib\b|infiniband|roce|ethernet|rdma|\bnic\b|\d+\s*ge\b", re.I)),
    ("PCIe", re.compile(r"pcie|\bsys\b|\bupi\b|\bqpi\b|\bpix\b|\bpxb\b|\bphb\b", re.I)),
)


def technology(link_key: str, link_name: str, interconnect: str) -> str:
    """The technology of a preset link class: from its name, else inter_node is the network and the other
    classes are the preset's interconnect."""
    for tech, pattern in _NAMES:
        if pattern.search(link_name):
            return tech
    return "network" if link_key == "inter_node" else interconnect


#: PCIe x16 per-direction rate by generation (PCI-SIG: 8, 16, 32, 64 GT/s per lane; 128b/130b coding
#: from Gen3, FLIT from Gen6): a link name that says its generation is held to it
PCIE_X16_GBPS = {3: 15.75, 4: 31.5, 5: 63.0, 6: 128.0}
#: NVLink per-direction rate per GPU by accelerator (half the bidirectional figure NVIDIA quotes)
NVLINK_GBPS = {
    "V100": (150.0, "V100 SXM2: NVLink 300 GB/s bidirectional (nvidia.com/en-us/data-center/v100)"),
    "A100": (300.0, "A100 SXM: NVLink3 600 GB/s bidirectional (NVIDIA/nccl-tests#149)"),
    "H100": (450.0, "H100 SXM: NVLink4 450 GB/s per direction (NVIDIA/nccl-tests#212)"),
    "H200": (450.0, "H200: NVLink4 450 GB/s per direction (../shared/facts/parallelism-models-hardware.md)"),
    "H20": (450.0, "H20: NVLink 4.0 900 GB/s bidirectional (../shared/facts/parallelism-models-hardware.md)"),
}


def line_rate(link_key: str, link_name: str, interconnect: str, accelerator: str = "") -> LineRate:
    """The line rate that bounds one preset link class: its generation's where the name (PCIe GenN) or the
    accelerator (NVLink) tells it, else the fastest of its technology."""
    tech = technology(link_key, link_name, interconnect)
    gen = re.search(r"gen\s*(\d)", link_name, re.I)
    if tech == "PCIe" and gen and int(gen.group(1)) in PCIE_X16_GBPS:
        g = int(gen.group(1))
        return LineRate(tech, PCIE_X16_GBPS[g], f"PCIe Gen{g} x16: {PCIE_X16_GBPS[g]:g} GB/s per direction (PCI-SIG)")
    if tech == "NVLink" and accelerator in NVLINK_GBPS:
        rate, source = NVLINK_GBPS[accelerator]
        return LineRate(tech, rate, source)
    return LINE_RATES[tech]


def plausible_range(rate: LineRate, nbytes: int) -> tuple[float, float]:
    """(floor, ceiling) of a measured busbw in GB/s on a link of this rate for a message of nbytes: the floor
    is the busbw of a call that took MAX_CALL_S (bus factor at least 1/2: all-gather of two ranks)."""
    return 0.5 * nbytes / MAX_CALL_S / 1e9, rate.ceiling_GBps
