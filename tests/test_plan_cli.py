"""plan.py end to end: ranked table, JSON contract, score, bad input with exit 2 and one line."""

from __future__ import annotations

import csv
import json

import pytest
from conftest import ROOT, run_script

MAIN = ["--model", "Wan2.1-T2V-14B", "--hardware", "Atlas 800I A2", "--devices", "8"]
PLAN_KEYS = {"ulysses", "ring", "kv_allgather", "pipefusion", "cfg", "tp", "dp", "predicted_latency_s",
             "feasible", "gates"}


def test_main_job_json_contract():
    proc = run_script("plan.py", *MAIN, "--json", check=0)
    doc = json.loads(proc.stdout)
    assert doc["schema"] == "dit-parallel-opt/plan/v1"
    plans = doc["plans"]
    assert plans and all(PLAN_KEYS <= set(p) for p in plans)
    for p in plans:
        assert p["ulysses"] * p["ring"] * p["kv_allgather"] * p["attn2d"] * p["pipefusion"] * p["cfg"] * p["tp"] \
            * p["dp"] == 8
    feas = [p for p in plans if p["feasible"]]
    assert [p["predicted_latency_s"] for p in feas] == sorted(p["predicted_latency_s"] for p in feas)
    assert {g["gate"] for g in feas[0]["gates"]} == {f"G{i}" for i in range(1, 8)}
    # Ascend: xDiT has no PipeFusion on NPU, so every PipeFusion plan is vetoed by G1
    assert all(not p["feasible"] for p in plans if p["pipefusion"] > 1)
    assert "conclusion" in doc and doc["conclusion"].startswith("On Atlas 800I A2")


def test_table_and_plot(tmp_path):
    png = tmp_path / "plans.png"
    out = tmp_path / "plans.csv"
    proc = run_script("plan.py", *MAIN, "--plot", str(png), "--csv", str(out), check=0)
    assert "gates of #1" in proc.stdout and "conclusion:" in proc.stdout
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = list(csv.DictReader(out.open()))
    assert rows and "predicted_latency_s" in rows[0]


def test_ref_latency_scales_compute():
    base = json.loads(run_script("plan.py", *MAIN, "--json", check=0).stdout)
    single = [p for p in base["plans"] if p["name"] == "U8"][0]
    cal = json.loads(run_script("plan.py", *MAIN, "--json", "--ref-latency", "8000", check=0).stdout)
    assert cal["tunables"]["compute_scale"] > 1
    assert [p for p in cal["plans"] if p["name"] == "U8"][0]["compute_s"] > single["compute_s"]


@pytest.mark.parametrize("args,needle", [
    (["--model", "NoSuchModel", "--hardware", "H100", "--devices", "8"], "--model-config PATH"),
    (["--model", "FLUX.1-dev", "--hardware", "NoSuchBox", "--devices", "8"], "--hardware FILE.toml"),
    (["--model", "FLUX.1-dev", "--hardware", "H100", "--devices", "0"], "devices"),
    (["--model", "FLUX.1-dev", "--hardware", "H100", "--devices", "13"], "8-device nodes"),
    (["--model", "FLUX.1-dev", "--hardware", "H100", "--devices", "8", "--framework", "MindIE-SD"],
     "MindIE-SD: no nvidia support"),
    (["--model", "FLUX.1-dev", "--hardware", "H100", "--devices", "8", "--layout", "tp,ring"], "--layout"),
])
def test_bad_input_exits_2_with_one_line(args, needle):
    proc = run_script("plan.py", *args, check=2)
    assert proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and needle in proc.stderr, proc.stderr


def test_inconsistent_toml_exits_2(tmp_path):
    (tmp_path / "models").mkdir()
    (tmp_path / "hardware").mkdir()
    for sub in ("models", "hardware"):
        for f in (ROOT / "templates" / sub).glob("*.toml"):
            (tmp_path / sub / f.name).write_text(f.read_text())
    bad = tmp_path / "models" / "wan2.1-t2v-14b.toml"
    bad.write_text(bad.read_text().replace("heads = 40", "heads = 41"))
    proc = run_script("plan.py", *MAIN, check=2, env={"DITPAR_TEMPLATES": str(tmp_path)})
    assert proc.stderr.count("\n") == 1 and "wan2.1-t2v-14b.toml" in proc.stderr, proc.stderr


def test_score_keeps_rows_and_columns(tmp_path):
    from conftest import need_shared

    src = need_shared("calibration", "xdit_sd3.csv")
    out = tmp_path / "scored.csv"
    run_script("plan.py", "score", "--candidates", str(src), "--out", str(out), check=0)
    with src.open() as fh:
        orig = list(csv.reader(fh))
    with out.open() as fh:
        got = list(csv.reader(fh))
    assert got[0] == orig[0] + ["predicted_latency_s", "score_note", "predicted_low_s", "predicted_high_s"]
    assert [r[:-4] for r in got[1:]] == orig[1:]
    for r in got[1:]:
        if r[-4]:   # a scored row: low <= predicted <= high
            assert float(r[-2]) <= float(r[-4]) <= float(r[-1])
        else:
            assert r[-2] == r[-1] == ""
    notes = {r[-3] for r in got[1:] if r[-4] == ""}
    assert any("not stated" in n for n in notes)           # 'hybrid best' rows with empty degrees


def test_score_missing_column_exits_2(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("model,hardware\nFLUX.1-dev,H100\n")
    proc = run_script("plan.py", "score", "--candidates", str(bad), "--out", str(tmp_path / "o.csv"), check=2)
    assert "missing column" in proc.stderr and "present: model, hardware" in proc.stderr
    assert not (tmp_path / "o.csv").exists()


def test_worked_example_matches_the_tool():
    """references/plan-output.md section 1.1's main job is the tool's own output, line for line (issue 24:
    an example that no longer matched the tool sent agents astray). Rerun the command and paste when it moves."""
    import re

    text = (ROOT / "references" / "plan-output.md").read_text(encoding="utf-8")
    cmd = '$ python scripts/plan.py --model Wan2.1-T2V-14B --hardware "Atlas 800I A2" --devices 8\n'
    m = re.search(re.escape("```\n" + cmd) + r"(.*?)```\n", text, re.S)
    assert m, "section 1.1's worked example block is missing"
    got = run_script("plan.py", "--model", "Wan2.1-T2V-14B", "--hardware", "Atlas 800I A2", "--devices", "8",
                     check=0).stdout
    assert got.rstrip("\n") == m.group(1).rstrip("\n")
