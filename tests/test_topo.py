"""topo.py: parse npu-smi / nvidia-smi topology matrices into domains and legal card groups.

The sample files in tests/data/topo were written for these tests in the tools' documented output
formats; the expected domains and groups below are derived by hand from each matrix.
"""

from __future__ import annotations

import json

import pytest
from conftest import ROOT, run_script
from ditpar.errors import InputError
from ditpar.plan.inputs.topology import link_rank, parse_topology

DATA = ROOT / "tests" / "data" / "topo"
Q0, Q1 = [0, 1, 2, 3], [4, 5, 6, 7]
ALL8 = list(range(8))

CASES = {
    # file: (format, domains, groups 2/4/8, class inside / between domains)
    "nvidia_h100_nv18.txt": ("nvidia-smi", [ALL8], [[0, 1], [2, 3], [4, 5], [6, 7]], [Q0, Q1], "NV18", None),
    "nvidia_a100_nv12.txt": ("nvidia-smi", [ALL8], [[0, 1], [2, 3], [4, 5], [6, 7]], [Q0, Q1], "NV12", None),
    # Socket 0 = GPUs 0-3, PIX pairs (0,1) (2,3), NODE across switches; SYS between sockets.
    "nvidia_l40_pcie_2socket.txt": ("nvidia-smi", [Q0, Q1], [[0, 1], [2, 3], [4, 5], [6, 7]], [Q0, Q1], "NODE", "SYS"),
    # Same sockets, but each PCIe switch holds a non-adjacent pair: pairs follow PIX, not ids.
    "nvidia_l20_pcie_crossed_pairs.txt": ("nvidia-smi", [Q0, Q1], [[0, 2], [1, 3], [4, 6], [5, 7]], [Q0, Q1], "NODE", "SYS"),
    # Even GPUs on socket 0, odd GPUs on socket 1.
    "nvidia_4090_pcie_interleaved.txt": ("nvidia-smi", [[0, 2, 4, 6], [1, 3, 5, 7]],
                                         [[0, 2], [4, 6], [1, 3], [5, 7]], [[0, 2, 4, 6], [1, 3, 5, 7]], "PXB", "SYS"),
    # DGX-1 hybrid cube mesh: NVLink joins all 8 but not every pair; pairs take the NV2 links.
    "nvidia_v100_dgx1_hybrid_cube.txt": ("nvidia-smi", [ALL8], [[0, 3], [1, 2], [4, 7], [5, 6]], [Q0, Q1], "SYS", None),
    "npu_910b_hccs_8.txt": ("npu-smi", [ALL8], [[0, 1], [2, 3], [4, 5], [6, 7]], [Q0, Q1], "HCCS", None),
    "npu_910a_2x4_islands.txt": ("npu-smi", [Q0, Q1], [[0, 1], [2, 3], [4, 5], [6, 7]], [Q0, Q1], "HCCS", "SYS"),
    "npu_950_ub_2x4_islands.txt": ("npu-smi", [Q0, Q1], [[0, 1], [2, 3], [4, 5], [6, 7]], [Q0, Q1], "UB", "SYS"),
}


@pytest.mark.parametrize("fname", sorted(CASES))
def test_sample_domains_and_groups(fname):
    fmt, domains, g2, g4, inner, between = CASES[fname]
    topo = parse_topology((DATA / fname).read_text(encoding="utf-8"), fname)
    assert topo.fmt == fmt
    assert topo.devices == ALL8
    assert topo.domains() == domains
    groups = topo.groups()
    assert groups[2] == g2
    assert groups[4] == g4
    assert groups[8] == [ALL8]
    summary = topo.summary()
    assert summary["intra_domain_class"] == inner
    assert summary["inter_domain_class"] == between
    assert summary["domain_size"] == len(domains[0])


def test_a3_sixteen_dies_sio_pairs_inside_one_hccs_domain():
    topo = parse_topology((DATA / "npu_a3_16die_sio_hccs.txt").read_text(encoding="utf-8"))
    assert topo.devices == list(range(16))
    assert topo.classes == {"SIO": 8, "HCCS": 16 * 15 // 2 - 8}
    assert topo.domains() == [list(range(16))]
    levels = topo.levels()
    assert levels[0] == {"class": "SIO", "groups": [[2 * i, 2 * i + 1] for i in range(8)]}
    groups = topo.groups()
    assert groups[2] == [[2 * i, 2 * i + 1] for i in range(8)]
    assert groups[4] == [[4 * i + j for j in range(4)] for i in range(4)]
    assert groups[8] == [list(range(8)), list(range(8, 16))]
    assert groups[16] == [list(range(16))]


def test_pair_counts_per_class():
    topo = parse_topology((DATA / "nvidia_l40_pcie_2socket.txt").read_text(encoding="utf-8"))
    # 4 PIX pairs, 2 x 4 NODE pairs inside sockets, 4 x 4 SYS pairs across.
    assert topo.classes == {"PIX": 4, "NODE": 8, "SYS": 16}
    assert list(topo.classes) == sorted(topo.classes, key=link_rank)


def test_hybrid_cube_mesh_warns_about_non_fabric_pairs():
    topo = parse_topology((DATA / "nvidia_v100_dgx1_hybrid_cube.txt").read_text(encoding="utf-8"))
    assert topo.link(0, 5) == "SYS" and topo.link(0, 3) == "NV2"
    assert any("not fully" in w for w in topo.warnings)


def test_group_check_cross_and_inside():
    topo = parse_topology((DATA / "npu_910a_2x4_islands.txt").read_text(encoding="utf-8"))
    inside = topo.check_group([4, 5, 6, 7])
    assert not inside["crosses_domains"] and inside["warning"] is None and inside["slowest_class"] == "HCCS"
    cross = topo.check_group([0, 1, 4, 5])
    assert cross["crosses_domains"] and cross["slowest_class"] == "SYS"
    assert cross["domains_touched"] == [Q0, Q1] and not cross["whole_domains"]
    assert "crosses domains {0,1,2,3} and {4,5,6,7}" in cross["warning"]
    with pytest.raises(InputError, match="device\\(s\\) 9 not in the matrix"):
        topo.check_group([0, 9])


def test_cli_json_keys_and_group_warning():
    # 0,1,4,5 crosses the two HCCS islands: not legal, so the check fails (exit 1) with the JSON still printed
    proc = run_script("topo.py", str(DATA / "npu_910a_2x4_islands.txt"), "--group", "0,1,4,5", "--json", check=1)
    doc = json.loads(proc.stdout)
    assert doc["group_check"]["legal"] is False
    assert doc["schema"] == "dit-parallel-opt/topo/v1"
    assert doc["domains"] == [Q0, Q1]
    assert doc["groups"]["2"] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert doc["groups"]["4"] == [Q0, Q1] and doc["groups"]["8"] == [ALL8]
    assert doc["group_check"]["crosses_domains"] is True
    assert "warning: group 0,1,4,5 crosses domains" in proc.stderr


def test_cli_table_from_stdin_and_csv(tmp_path):
    import subprocess
    import sys

    out = tmp_path / "groups.csv"
    text = (DATA / "npu_910b_hccs_8.txt").read_text(encoding="utf-8")
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "topo.py"), "-", "--csv", str(out)],
                          input=text, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "1 domain(s) of 8; inside a domain: HCCS" in proc.stdout
    assert " 4 cards: {0,1,2,3} {4,5,6,7}" in proc.stdout
    lines = out.read_text().splitlines()
    assert lines[0] == "size,group" and "2,\"0,1\"" in lines and "8,\"0,1,2,3,4,5,6,7\"" in lines


HEADER = "\tGPU0\tGPU1\tGPU2\tCPU Affinity\n"


@pytest.mark.parametrize("text, fragment", [
    ("hello world\nnothing to see\n", "no device matrix found"),
    ("", "no device matrix found"),
    (HEADER + "GPU0\t X \tNV4\tNV4\t0-7\nGPU1\tNV4\t X \n", "row GPU1 has 2 cells, expected 3 (ragged matrix)"),
    (HEADER + "GPU0\t X \tNV4\tNV4\t0-7\nGPU1\tNV4\t X \tNV4\t0-7\n", "matrix rows missing for GPU2"),
    (HEADER + "GPU0\t X \tFOO\tNV4\nGPU1\tFOO\t X \tNV4\nGPU2\tNV4\tNV4\t X \n", "unknown link class 'FOO'"),
    (HEADER + "GPU0\t X \tNV4\tSYS\nGPU1\tNV4\t X \tNV4\nGPU2\tNV4\tNV4\t X \n", "matrix not symmetric"),
    (HEADER + "GPU0\tNV4\tNV4\tNV4\nGPU1\tNV4\t X \tNV4\nGPU2\tNV4\tNV4\t X \n", "on the diagonal, expected X"),
])
def test_bad_input_is_an_input_error(text, fragment):
    with pytest.raises(InputError) as err:
        parse_topology(text, "t.txt")
    assert fragment in str(err.value)


def test_cli_bad_input_exits_2(tmp_path):
    ragged = tmp_path / "ragged.txt"
    lines = (DATA / "nvidia_h100_nv18.txt").read_text(encoding="utf-8").splitlines()
    lines[3] = "\t".join(lines[3].split("\t")[:5])  # GPU2 row cut after four cells
    ragged.write_text("\n".join(lines), encoding="utf-8")
    proc = run_script("topo.py", str(ragged), check=2)
    assert "row GPU2 has 4 cells, expected 8 (ragged matrix)" in proc.stderr
    assert "Traceback" not in proc.stderr
    junk = tmp_path / "junk.txt"
    junk.write_text("+------+\n| npu-smi 24.1 |\n", encoding="utf-8")
    proc = run_script("topo.py", str(junk), check=2)
    assert "no device matrix found" in proc.stderr and proc.stderr.count("\n") == 1
    run_script("topo.py", str(tmp_path / "missing.txt"), check=2)
    run_script("topo.py", str(DATA / "npu_910b_hccs_8.txt"), "--group", "0,x", check=2)


def test_interleaved_domains_give_a_visible_devices_order_and_a_preset():
    from ditpar.plan.inputs import presets
    from ditpar.plan.inputs.topology import apply_topology

    topo = parse_topology((DATA / "nvidia_4090_pcie_interleaved.txt").read_text(encoding="utf-8"))
    s = topo.summary()
    assert s["visible_devices_order"] == [0, 2, 4, 6, 1, 3, 5, 7] and not s["contiguous"]
    hw = apply_topology(topo, presets.load_hardware("RTX 4090"))
    assert (hw.devices_per_node, hw.domain_size) == (8, 4)
    assert hw.domains == ((0, 2, 4, 6), (1, 3, 5, 7))
    assert hw.class_for([0, 2]) == "intra_domain" and hw.class_for([0, 1]) == "inter_domain"
    a3 = apply_topology(parse_topology((DATA / "npu_a3_16die_sio_hccs.txt").read_text(encoding="utf-8")),
                        presets.load_hardware("910C"))
    assert (a3.devices_per_node, a3.domain_size) == (16, 16)


# --- issue 14 item 6: one rule for the listing and the check ---------------------------------------------

@pytest.mark.parametrize("fname", sorted(p.name for p in DATA.glob("*.txt")))
def test_every_listed_group_passes_the_check(fname):
    topo = parse_topology((DATA / fname).read_text(encoding="utf-8"), fname)
    for k, groups in topo.groups().items():
        for g in groups:
            check = topo.check_group(g)
            assert check["legal"], (fname, k, g)
            assert check["slowest_class"] == topo.best_class(k) or len(g) == 1


def test_full_mesh_group_outside_the_tiling_is_legal_and_said_so():
    # 910B: all 28 pairs HCCS, so {0,1,4,5} is as good as the listed {0,1,2,3}
    topo = parse_topology((DATA / "npu_910b_hccs_8.txt").read_text(encoding="utf-8"))
    check = topo.check_group([0, 1, 4, 5])
    assert check["legal"] and check["warning"] is None and check["best_class"] == "HCCS"
    proc = run_script("topo.py", str(DATA / "npu_910b_hccs_8.txt"), "--group", "0,1,4,5", check=0)
    assert "group 0,1,4,5: legal; slowest link HCCS" in proc.stdout
    assert "4 cards: {0,1,2,3} {4,5,6,7}   (slowest link HCCS)" in proc.stdout
    assert proc.stdout.count("is legal when it lies inside one domain") == 1  # the rule, stated once


def test_group_inside_one_fabric_domain_can_still_be_illegal():
    # DGX-1 hybrid cube: one NVLink domain, but 0-5 is SYS while {0,1,2,3} stays on NVLink (NV1 at worst)
    topo = parse_topology((DATA / "nvidia_v100_dgx1_hybrid_cube.txt").read_text(encoding="utf-8"))
    check = topo.check_group([0, 1, 4, 5])
    assert not check["crosses_domains"] and not check["legal"]
    assert check["slowest_class"] == "SYS" and check["best_class"] == "NV1"
    assert "not legal" in check["warning"] and "{0,1,2,3}" in check["warning"]
    islands = parse_topology((DATA / "npu_910a_2x4_islands.txt").read_text(encoding="utf-8"))
    assert not islands.check_group([0, 1, 4, 5])["legal"] and islands.check_group([4, 5, 6, 7])["legal"]
    assert islands.check_group(list(range(8)))["legal"]  # all cards: SYS is the best 8 cards get


# --- issue 22: a topology must match the preset it is applied to ----------------------------------------

@pytest.mark.parametrize("fname, hardware, fabric", [
    ("nvidia_h100_nv18.txt", "A100 PCIe", "NVLink"),       # an all-NVLink box on a PCIe preset
    ("nvidia_l40_pcie_2socket.txt", "H100", "PCIe"),       # a PCIe box on an NVLink preset
    ("npu_910b_hccs_8.txt", "L20", "HCCS"),
])
def test_topology_of_another_fabric_is_refused_naming_both(fname, hardware, fabric):
    from ditpar.plan.inputs import presets
    from ditpar.plan.inputs.topology import apply_topology

    base = presets.load_hardware(hardware)
    with pytest.raises(InputError) as err:
        apply_topology(parse_topology((DATA / fname).read_text(encoding="utf-8")), base, f"--topo {fname}")
    text = str(err.value)
    assert text.startswith(f"--topo {fname}: the matrix shows a {fabric} box")
    assert f"preset '{base.name}'" in text and f"is {base.interconnect}" in text


def test_two_islands_on_a_one_domain_preset_is_refused_naming_the_missing_figure():
    """910A islands (HCCS inside, SYS between) on the 910B preset, whose node is one HCCS domain: the
    cross-island hop has no figure there and was priced at the HCCS speed."""
    from ditpar.plan.inputs import presets
    from ditpar.plan.inputs.topology import apply_topology

    base = presets.load_hardware("Atlas 800T A2")
    assert base.implied_links == ("inter_domain",)
    with pytest.raises(InputError, match=r"has 2 domains \(joined by SYS\).*gives no links.inter_domain figure"):
        apply_topology(parse_topology((DATA / "npu_910a_2x4_islands.txt").read_text(encoding="utf-8")), base)
    # the 910A preset states its cross-island figure: accepted
    hw = apply_topology(parse_topology((DATA / "npu_910a_2x4_islands.txt").read_text(encoding="utf-8")),
                        presets.load_hardware("910A"))
    assert hw.domain_size == 4 and hw.links["inter_domain"].bandwidth_GBps < hw.links["intra_domain"].bandwidth_GBps


def test_plan_topo_mismatch_exits_2_with_one_line():
    proc = run_script("plan.py", "--model", "FLUX.1-dev", "--hardware", "A100 PCIe", "--devices", "8", "--topo",
                      str(DATA / "nvidia_h100_nv18.txt"), check=2)
    assert proc.stderr.count("\n") == 1 and "NVLink box" in proc.stderr and "is PCIe" in proc.stderr


def test_a_group_that_is_not_legal_fails_the_check_in_text_too():
    proc = run_script("topo.py", str(DATA / "npu_910a_2x4_islands.txt"), "--group", "0,1,4,5", check=1)
    assert "group 0,1,4,5: NOT legal" in proc.stdout
    run_script("topo.py", str(DATA / "npu_910a_2x4_islands.txt"), "--group", "0,1,2,3", check=0)
    run_script("topo.py", str(DATA / "npu_910a_2x4_islands.txt"), check=0)   # a listing is no check
