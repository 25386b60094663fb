"""AMD Instinct MI300X / MI325X presets: vendor 'amd', the Infinity Fabric (xGMI) full mesh, RCCL named.

Expected values come from the figures the presets cite (AMD product pages, AMD's xGMI blog), derived here,
not read back from the files.
"""

from __future__ import annotations

import json

import pytest
from conftest import run_script
from ditpar.errors import InputError
from ditpar.plan.inputs import presets

MI300X = "MI300X Infinity Fabric x8"
MI325X = "MI325X Infinity Fabric x8"
RAW_LINK_GBPS = 64.0      # xGMI per link and direction (AMD: 128 GB/s bidirectional per link)
USABLE_SHARE = 0.75       # AMD's blog: 'approximately 48 GB/s per link ... about 75% of the theoretical peak'
LINKS_PER_GPU = 7         # each GPU has a direct link to its seven peers


@pytest.mark.parametrize("spelling, name", [
    ("MI300X", MI300X), ("8xMI300X", MI300X), ("Instinct MI300X", MI300X), ("AMD MI300X", MI300X),
    ("MI325X", MI325X), ("8xMI325X", MI325X), ("Instinct MI325X", MI325X),
])
def test_names_resolve(spelling, name):
    assert presets.load_hardware(spelling).name == name


def test_interconnect_words_resolve_in_a_table_row():
    """A published row may say xGMI or Infinity Fabric in its interconnect column; NVLink is refused."""
    assert presets.resolve_hardware("MI300X", "Infinity Fabric").name == MI300X
    assert presets.resolve_hardware("MI325X", "xGMI, 2 nodes", 16).nodes == 2
    with pytest.raises(InputError, match="Infinity Fabric"):
        presets.resolve_hardware("MI300X", "NVLink")


def test_datasheet_figures():
    """Dense BF16 is half the sparse 2614.9 TFLOPS on both parts (the same CDNA 3 die); memory and HBM
    bandwidth are the product pages' 192 GB / 5.3 TB/s and 256 GB / 6 TB/s."""
    x, y = presets.load_hardware("MI300X"), presets.load_hardware("MI325X")
    for h in (x, y):
        assert (h.vendor, h.interconnect, h.devices_per_node, h.domain_size) == ("amd", "Infinity Fabric", 8, 8)
        assert h.peak_tflops_bf16 == pytest.approx(2614.9 / 2, abs=0.06)
    assert (x.memory_GB, x.hbm_bandwidth_GBps) == (192, 5.3e3)
    assert (y.memory_GB, y.hbm_bandwidth_GBps) == (256, 6.0e3)


@pytest.mark.parametrize("name", ["MI300X", "MI325X"])
def test_the_mesh_gives_a_group_only_its_own_links(name):
    """48 GB/s usable per link (64 x 0.75); a k-GPU group reaches k-1 peers over k-1 links, so 2 GPUs get one
    link and 8 GPUs all seven; the aggregate stays below the line rate of seven links."""
    link = presets.load_hardware(name).links["intra_domain"]
    per_link = RAW_LINK_GBPS * USABLE_SHARE
    assert link.per_peer_GBps == per_link == 48
    for k, want in ((2, 48), (4, 3 * 48), (8, 7 * 48)):
        assert link.bus_bandwidth_GBps(k) == pytest.approx(min((k - 1) * per_link, LINKS_PER_GPU * per_link))
        assert link.bus_bandwidth_GBps(k) == want
    assert link.bandwidth_GBps <= LINKS_PER_GPU * RAW_LINK_GBPS
    assert link.evidence == "derived"


def test_a_figure_above_the_line_rate_is_refused(tmp_path):
    """The Infinity Fabric ceiling is 2 x 7 x 64 = 896 GB/s (link_limits: 2 x the line rate): 900 per peer is
    refused naming the technology (48000, MB/s typed as GB/s, is already out of the schema's range)."""
    text = (presets.templates_dir() / "hardware" / "mi300x-xgmi.toml").read_text(encoding="utf-8")
    bad = tmp_path / "mi.toml"
    bad.write_text(text.replace("per_peer_GBps = 48.0", "per_peer_GBps = 900.0"), encoding="utf-8")
    with pytest.raises(InputError, match=r"above 896 GB/s.*Infinity Fabric"):
        presets.load_hardware(str(bad))


@pytest.mark.parametrize("name", ["MI300X", "MI325X"])
def test_borrowed_figures_are_said_and_sourced(name):
    h = presets.load_hardware(name)
    assert "borrowed" in h.notes.lower() and h.sources["mfu"].lower().startswith("borrowed from the h100")
    assert h.mfu == presets.load_hardware("H100").mfu
    for key in ("peak_tflops_bf16", "memory_GB", "hbm_bandwidth_GBps", "intra_domain", "intra_domain_latency",
                "inter_node", "inter_node_latency"):
        assert h.sources.get(key, "").strip(), (name, key)
    assert h.links["inter_node"].evidence == "other-class"


def test_flux_on_eight_mi300x_names_rccl_and_the_notes():
    proc = run_script("plan.py", "--model", "FLUX.1-dev", "--hardware", "MI300X", "--devices", "8", check=0)
    out = proc.stdout
    assert "  1 " in out and "conclusion:" in out, out[-2000:]
    assert "collectives: RCCL (torch backend 'nccl'" in out
    notes = presets.load_hardware("MI300X").notes
    assert f"machine: {notes}" in out
    # the 2-card all-to-all is priced at one link, 48 GB/s
    assert "all-to-all over 2 cards                               48 GB/s" in out
    doc = json.loads(run_script("plan.py", "--model", "FLUX.1-dev", "--hardware", "MI300X", "--devices", "8",
                                "--json").stdout)
    assert doc["machine"] == {"notes": notes, "torch_backend": "nccl", "collective_library": "RCCL"}
    amd = {fw["name"] for fw in doc["frameworks"] if "amd" in fw["vendors"]}
    assert amd == {"cache-dit", "vLLM-Omni", "SGLang-diffusion"}
    assert all(p["framework"] in amd for p in doc["plans"] if p["feasible"] and p.get("framework"))


def test_nvidia_answers_name_no_other_library():
    """On NVIDIA the library is the backend's own name: no collectives line; the machine line is the notes."""
    out = run_script("plan.py", "--model", "FLUX.1-dev", "--hardware", "H100", "--devices", "8", check=0).stdout
    assert "collectives:" not in out
    doc = json.loads(run_script("plan.py", "--model", "FLUX.1-dev", "--hardware", "B200", "--devices", "8",
                                "--json").stdout)
    assert doc["machine"]["collective_library"] == "NCCL" and doc["machine"]["torch_backend"] == "nccl"


def test_an_xgmi_matrix_is_an_infinity_fabric_box():
    from ditpar.plan.inputs.topology import apply_topology, parse_topology

    n = 8
    rows = ["\t" + "\t".join(f"GPU{i}" for i in range(n))]
    rows += [f"GPU{i}\t" + "\t".join("X" if i == k else "XGMI" for k in range(n)) for i in range(n)]
    topo = parse_topology("\n".join(rows) + "\n", "rocm-smi")
    assert topo.interconnect() == "Infinity Fabric" and topo.domains() == [list(range(n))]
    assert apply_topology(topo, presets.load_hardware("MI300X")).domain_size == 8
    with pytest.raises(InputError, match="Infinity Fabric box"):
        apply_topology(topo, presets.load_hardware("H100"))


def test_comm_bench_names_rccl_on_rocm(monkeypatch):
    import torch
    from ditpar.comm import dist

    monkeypatch.setattr(torch.version, "hip", "6.3.0", raising=False)
    assert dist.library("nccl") == "RCCL"
    monkeypatch.setattr(torch.version, "hip", None, raising=False)
    assert (dist.library("nccl"), dist.library("hccl"), dist.library("gloo")) == ("NCCL", "HCCL", "gloo")
