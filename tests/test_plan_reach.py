"""Reach: an unknown name points to the closest presets and the way to describe a model or machine without
one; --list shows every preset and profile; the smallest machine file plan.py accepts is shipped and runs."""

from __future__ import annotations

import json

from conftest import ROOT, run_script

TEMPLATES = ROOT / "templates"


def test_an_unknown_model_names_the_closest_presets_and_the_config_way():
    err = run_script("plan.py", "--model", "flux", "--hardware", "H100", "--devices", "8", check=2).stderr
    assert err.startswith("plan.py: error: unknown model 'flux'; closest: FLUX.1-dev, FLUX.1-schnell, FLUX.2-dev; ")
    assert "--model-config PATH" in err and "--model-file FILE.toml" in err
    n_models = len([p for p in (TEMPLATES / "models").glob("*.toml") if not p.stem.startswith("custom")])
    assert f"plan.py --list models lists all {n_models}" in err and "CogVideoX" not in err   # no full list


def test_an_unknown_machine_names_the_file_way():
    err = run_script("plan.py", "--model", "FLUX.1-dev", "--hardware", "Z9000", "--devices", "8", check=2).stderr
    assert "unknown hardware 'Z9000'; " in err and "--hardware FILE.toml" in err
    assert f"lists all {len(list((TEMPLATES / 'hardware').glob('*.toml')))}" in err


def test_list_shows_every_preset_and_profile():
    for kind, folder in (("models", "models"), ("hardware", "hardware"), ("frameworks", "frameworks")):
        doc = json.loads(run_script("plan.py", "--list", kind, "--json", check=0).stdout)
        assert doc["schema"] == "dit-parallel-opt/plan-list/v1" and doc["kind"] == kind
        files = [p for p in (TEMPLATES / folder).glob("*.toml") if not p.stem.startswith("custom")]
        assert len(doc["presets"]) == len(files)   # custom-example.toml is a model file, not a preset
    text = run_script("plan.py", "--list", "hardware", check=0).stdout
    assert "GB200 NVL72 (72 GPUs, one NVLink domain)" in text and "H800" in text
    run_script("plan.py", "--list", "gpus", check=2)


def test_the_smallest_machine_file_runs():
    doc = json.loads(run_script("plan.py", "--model", "FLUX.1-dev", "--hardware", str(TEMPLATES / "my-hardware.toml"),
                                "--devices", "4", "--json", check=0).stdout)
    assert doc["plans"] and doc["hardware"] == "My PCIe box x4"


def test_domains_describe_a_box_no_preset_has():
    from ditpar.plan.inputs import presets
    from ditpar.plan.inputs.topology import apply_domains

    hw = apply_domains("3,3", presets.resolve_hardware("L40 PCIe", None, 6))
    assert (hw.devices_per_node, hw.domain_size) == (6, 3)
    assert hw.class_for([0, 1, 2]) == "intra_domain" and hw.class_for([2, 3]) == "inter_domain"
    base = ["--model", "FLUX.1-dev", "--hardware", "L40 PCIe", "--devices", "6"]
    note = run_script("plan.py", *base, check=0).stderr
    assert "6 of the preset's 8 devices per node, in domains of 4" in note and "--domains (e.g. 3,3)" in note
    quiet = run_script("plan.py", *base, "--domains", "3,3", "--json", check=0)
    assert "--domains (e.g." not in quiet.stderr
    by_plan = {p["name"]: p for p in json.loads(quiet.stdout)["plans"]}
    default = {p["name"]: p for p in json.loads(run_script("plan.py", *base, "--json", check=0).stdout)["plans"]}
    # R2 TP3: its ring hops cross the socket at other ranks once the box is 3 + 3 instead of 4 + 2
    assert by_plan["R2 TP3"]["exposed_by_link_s"] != default["R2 TP3"]["exposed_by_link_s"]
    assert "unequal sizes" in run_script("plan.py", *base, "--domains", "4,2", check=2).stderr
    assert "both describe the node" in run_script("plan.py", *base, "--domains", "3,3", "--topo",
                                                  str(ROOT / "tests" / "data" / "topo" / "nvidia_l40_pcie_2socket.txt"),
                                                  check=2).stderr
    assert "no links.inter_domain" in run_script("plan.py", "--model", "FLUX.1-dev", "--hardware", "H100",
                                                 "--devices", "6", "--domains", "3,3", check=2).stderr


def test_a_borrowed_mfu_is_said_in_the_answer():
    text = run_script("plan.py", "--model", "FLUX.1-dev", "--hardware", "B200", "--devices", "8", check=0).stdout
    assert "mfu borrowed from the H100 preset, not measured on this machine" in text
    own = run_script("plan.py", "--model", "FLUX.1-dev", "--hardware", "H100", "--devices", "8", check=0).stdout
    assert "borrowed" not in own.split("compute:", 1)[1].splitlines()[0]


def test_a_chips_own_name_suggests_only_boxes_of_that_chip():
    """'L40' is the L40 preset's own alias: L40S (another chip whose name extends it) is not offered; 'H20' does not
    offer the H20-3e; 'A100' still offers the PCIe box of the same A100 and '910B' the 800T A2 (both same chip)."""
    from ditpar.plan.inputs import presets

    assert presets.other_matches("L40", presets.load_hardware("L40").name) == []
    assert presets.other_matches("8xL40", presets.load_hardware("8xL40").name) == []
    assert presets.other_matches("H20", presets.load_hardware("H20").name) == []
    assert presets.other_matches("A100", presets.load_hardware("A100").name) == [
        ("A100-PCIe-80GB x8 (2 sockets)", "A100 PCIe")]
    assert [n for n, _ in presets.other_matches("910B", presets.load_hardware("910B").name)] == [
        "Atlas 800T A2 (910B x8, HCCS)"]
    proc = run_script("plan.py", "--model", "FLUX.1-dev", "--hardware", "L40", "--devices", "4", check=0)
    assert "also fits" not in proc.stderr
