"""Hardware presets for the machines of 2026 (B200, GB200/GB300 NVL72, H800, A800, H20-3e, L40S, Atlas A3,
Atlas 900 A3 SuperPoD).

Expected values are derived here from the datasheet figures the presets cite, not read back from the files:
a figure that drifts from its source, or a rack that stops being one NVLink domain, fails here.
"""

from __future__ import annotations

import json

import pytest
from conftest import run_script
from ditpar.plan.inputs import link_limits, presets

LINKS = ("intra_domain", "inter_domain", "inter_node")

# name on the command line -> canonical preset name
NEW = {
    "B200": "HGX B200 NVLink x8",
    "GB200 NVL72": "GB200 NVL72 (72 GPUs, one NVLink domain)",
    "GB300 NVL72": "GB300 NVL72 (72 GPUs, one NVLink domain)",
    "H800": "H800 NVLink x8",
    "A800": "A800-SXM-80GB NVLink x8",
    "H20-3e": "H20-3e NVLink x8",
    "L40S": "L40S PCIe x8 (2 sockets)",
    "Atlas 900 A3 SuperPoD": "Atlas 900 A3 SuperPoD (910C, 768 dies, one UB domain)",
}
ATLAS_A3 = "Atlas A3 (910C, 16 dies, HCCS)"


@pytest.mark.parametrize("spelling, name", [
    *NEW.items(),
    ("8xB200", NEW["B200"]), ("DGX B200", NEW["B200"]), ("GB200", NEW["GB200 NVL72"]),
    ("GB300", NEW["GB300 NVL72"]), ("8xH800", NEW["H800"]), ("A800-SXM4-80GB", NEW["A800"]),
    ("H20 141GB", NEW["H20-3e"]), ("8xL40S PCIe", NEW["L40S"]),
    ("Atlas 800T A3", ATLAS_A3), ("Atlas 800I A3", ATLAS_A3), ("A3", ATLAS_A3),
    ("CloudMatrix384", NEW["Atlas 900 A3 SuperPoD"]), ("CM384", NEW["Atlas 900 A3 SuperPoD"]),
])
def test_names_resolve(spelling, name):
    assert presets.load_hardware(spelling).name == name


def test_the_plain_names_keep_their_presets():
    """The new presets take no name an older one answered to."""
    assert presets.load_hardware("H20").name == "H20 NVLink x8"
    assert presets.load_hardware("L40").name == "L40 PCIe x8 (2 sockets)"
    assert presets.load_hardware("H100").name == "H100-SXM NVLink x8"
    assert presets.load_hardware("A100").name == "A100-SXM-80GB NVLink x8"


@pytest.mark.parametrize("hardware", [*NEW, "Atlas 800T A3"])
def test_plan_ranks_flux_on_eight_devices(hardware):
    proc = run_script("plan.py", "--model", "FLUX.1-dev", "--hardware", hardware, "--devices", "8", check=0)
    assert "  1 " in proc.stdout and "conclusion:" in proc.stdout, proc.stdout[-2000:]


def test_datasheet_figures():
    """Dense BF16 = the sparse datasheet figure / 2; per-GPU memory = the system figure / GPUs."""
    b200, gb200, gb300 = (presets.load_hardware(n) for n in ("B200", "GB200", "GB300"))
    assert b200.peak_tflops_bf16 == 36_000 / 8 / 2            # HGX B200: FP16/BF16 36 PFLOPS sparse, 8 GPUs
    assert b200.memory_GB == 1440 / 8                          # DGX B200: 1,440 GB total
    assert b200.hbm_bandwidth_GBps == 64_000 / 8               # DGX B200: 64 TB/s total
    assert gb200.peak_tflops_bf16 == 5_000 / 2                 # GB200's B200 at 1,200 W: BF16 5,000 sparse
    assert gb200.memory_GB == round(13_400 / 72)               # GB200 NVL72: 13.4 TB HBM3e
    assert gb200.hbm_bandwidth_GBps == 8_000                   # 8 TB/s per GPU
    assert gb300.hbm_bandwidth_GBps == 576_000 / 72            # GB300 NVL72: 576 TB/s per rack
    assert gb300.peak_tflops_bf16 == 180_000 / 72              # GB300 NVL72: 180 PFLOPS dense
    assert gb300.memory_GB == 279 and 72 * gb300.memory_GB / 1000 == pytest.approx(20, abs=0.2)   # rack 20 TB
    h100, a100, h20 = (presets.load_hardware(n) for n in ("H100", "A100", "H20"))
    h800, a800, h20e = (presets.load_hardware(n) for n in ("H800", "A800", "H20-3e"))
    assert (h800.peak_tflops_bf16, h800.memory_GB, h800.hbm_bandwidth_GBps) == (989, 80, 3350)   # H100 SXM: 1,979 sparse
    assert (h800.peak_tflops_bf16, h800.memory_GB) == (h100.peak_tflops_bf16, h100.memory_GB)
    assert (a800.peak_tflops_bf16, a800.memory_GB, a800.hbm_bandwidth_GBps) == (312, 80, 2039)
    assert (h20e.peak_tflops_bf16, h20e.memory_GB) == (h20.peak_tflops_bf16, 141)
    l40s, l40 = presets.load_hardware("L40S"), presets.load_hardware("L40")
    assert l40s.peak_tflops_bf16 == 362.05                     # datasheet: 362.05 dense, 733 sparse
    assert l40s.peak_tflops_bf16 == pytest.approx(2 * l40.peak_tflops_bf16, abs=0.1)
    assert (l40s.memory_GB, l40s.hbm_bandwidth_GBps, l40s.interconnect) == (48, 864, "PCIe")


def test_nvlink_figures():
    """NVLink5 = NCCL's model, 18 links x 40.1 GB/s; the export parts sit below their full-NVLink twins."""
    for name in ("B200", "GB200", "GB300"):
        assert presets.load_hardware(name).links["intra_domain"].bandwidth_GBps == pytest.approx(18 * 40.1, abs=2)
    nvlink = {n: presets.load_hardware(n).links["intra_domain"] for n in ("H100", "H800", "A100", "A800")}
    assert nvlink["H800"].bandwidth_GBps < nvlink["H100"].bandwidth_GBps
    assert nvlink["A800"].bandwidth_GBps < nvlink["A100"].bandwidth_GBps
    assert nvlink["H800"].bandwidth_GBps <= 400 / 2                       # 400 GB/s bidirectional
    assert nvlink["H800"].bandwidth_GBps == 160 and nvlink["H800"].evidence == "measured"
    assert nvlink["A800"].bandwidth_GBps == round(nvlink["A100"].bandwidth_GBps * 400 / 600)
    assert nvlink["A800"].evidence == "derived"


def test_an_nvl72_rack_is_one_nvlink_domain():
    for name in ("GB200", "GB300"):
        rack = presets.load_hardware(name)
        assert (rack.devices_per_node, rack.domain_size, rack.nodes) == (72, 72, 1)
        for group in (range(16), range(32), range(72), range(40, 72)):
            assert rack.class_for(group) == "intra_domain", (name, group)
        two = presets.load_hardware(name, None, 144)
        assert two.nodes == 2 and two.class_for([0, 72]) == "inter_node"
        assert "devices_per_node = 72" in rack.notes and "inter_node" in rack.notes


@pytest.mark.parametrize("devices", [16, 32, 72])
def test_gb200_plans_inside_the_rack_use_only_nvlink(devices):
    proc = run_script("plan.py", "--model", "FLUX.1-dev", "--hardware", "GB200 NVL72", "--devices", str(devices),
                      "--json", check=0)
    doc = json.loads(proc.stdout)
    plans = doc["plans"]
    assert plans and any(p["feasible"] for p in plans)
    priced = [p for p in plans if "bytes_per_layer_by_link" in p]     # a plan G1 vetoes is not priced
    assert all(p in priced for p in plans if p["feasible"])
    for p in priced:
        for key in ("exposed_by_link_s", "bytes_per_layer_by_link"):
            assert p[key]["inter_domain"] == 0 and p[key]["inter_node"] == 0, (p["name"], key, p[key])
    assert any(p["bytes_per_layer_by_link"]["intra_domain"] > 0 for p in priced)


@pytest.mark.parametrize("name", NEW)
def test_every_figure_has_a_source(name):
    h = presets.load_hardware(name)
    need = ["peak_tflops_bf16", "mfu", "memory_GB", "hbm_bandwidth_GBps"]
    for key in LINKS:
        if key in h.implied_links:
            continue
        need += [key, f"{key}_latency"]
        link = h.links[key]
        need += [f"{key}_{m}" for m, v in (("ring", link.ring_GBps), ("alltoall", link.alltoall_GBps)) if v]
    missing = [k for k in need if not h.sources.get(k, "").strip()]
    assert not missing, (name, missing)


@pytest.mark.parametrize("name", NEW)
def test_borrowed_figures_are_said_to_be_borrowed(name):
    """Every new preset borrows something (an mfu at least): its notes say so, and a link figure measured on
    another device is marked other-class or derived, never measured."""
    h = presets.load_hardware(name)
    assert "borrowed" in h.notes.lower(), name
    assert "borrowed" in h.sources["mfu"].lower(), name
    for key in LINKS:
        if key in h.implied_links:
            continue
        if "borrowed" in h.sources[key].lower():
            assert h.links[key].evidence in ("other-class", "derived"), (name, key)


def test_superpod_figures_are_the_cloudmatrix384_papers():
    """384 NPUs x 2 dies = 768 ranks; per die half a 910C's 752 TFLOPS, 128 GB and 3.2 TB/s (arXiv 2506.12708)."""
    pod, a3 = presets.load_hardware("Atlas 900 A3 SuperPoD"), presets.load_hardware("Atlas A3")
    assert (pod.devices_per_node, pod.nodes, pod.domain_size) == (48 * 8 * 2, 1, 16)   # 48 servers x 8 NPUs x 2 dies
    assert pod.domain_size == a3.devices_per_node                                        # one server = one HCCS island
    assert (pod.peak_tflops_bf16, pod.memory_GB, pod.hbm_bandwidth_GBps) == (752 / 2, 128 / 2, 3200 / 2)
    assert pod.devices_per_node * pod.peak_tflops_bf16 / 1000 == pytest.approx(289, abs=0.5)   # "~289 PFLOPS BF16"
    assert pod.devices_per_node * pod.memory_GB / 1000 == pytest.approx(48, rel=0.03)          # "~48 TB HBM"
    links = pod.links
    assert links["intra_domain"].bandwidth_GBps == a3.links["intra_domain"].bandwidth_GBps == 102    # EP8 dispatch
    assert links["inter_domain"].bandwidth_GBps == a3.links["inter_node"].bandwidth_GBps == 87       # EP16 dispatch
    assert links["inter_domain"].bandwidth_GBps < 392 / 2                         # UB line rate per die
    assert links["inter_node"].bandwidth_GBps == 400 / 8 / 2 * 0.8                # 400 Gb/s RDMA per NPU, per die
    assert (links["inter_node"].evidence, pod.mfu, a3.mfu) == ("derived", 0.5, 0.5)
    tech = {k: link_limits.technology(k, links[k].name, pod.interconnect) for k in LINKS}
    assert tech == {"intra_domain": "HCCS", "inter_domain": "HCCS", "inter_node": "network"}
    for die_count in (16, 64, 384, 768):                                          # every group inside the UB domain
        assert pod.class_for(range(die_count)) != "inter_node"
    assert pod.class_for(range(16)) == "intra_domain" and pod.class_for(range(64)) == "inter_domain"
    two = presets.load_hardware("Atlas 900 A3 SuperPoD", None, 1536)
    assert two.nodes == 2 and two.class_for([0, 768]) == "inter_node"
    assert presets.load_hardware("Atlas 800T A3").devices_per_node == 16          # the server preset stays a server


def test_superpod_64_dies_never_touch_the_network():
    proc = run_script("plan.py", "--model", "Wan2.1-T2V-14B", "--hardware", "Atlas 900 A3 SuperPoD",
                      "--devices", "64", "--json", check=0)
    doc = json.loads(proc.stdout)
    priced = [p for p in doc["plans"] if "bytes_per_layer_by_link" in p]
    assert priced and any(p["feasible"] for p in priced)
    for p in priced:
        for key in ("exposed_by_link_s", "bytes_per_layer_by_link"):
            assert p[key]["inter_node"] == 0, (p["name"], key, p[key])
    assert any(p["bytes_per_layer_by_link"]["inter_domain"] > 0 for p in priced)    # UB between servers is used
