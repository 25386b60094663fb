"""The ranked plan table: gate columns labelled, one number format, reasons whole (issue 14.17)."""

from __future__ import annotations

import json
import re

from conftest import run_script

ARGS = ["--model", "Wan2.1-T2V-14B", "--hardware", "Atlas 800I A2", "--devices", "8"]
SECONDS = ["latency_s", "step_s", "compute_s", "x_intra_s", "x_inter_s", "x_node_s", "hidden_s",
           "host_s", "pipe_s"]


def _table():
    text = run_script("plan.py", *ARGS, check=0).stdout.splitlines()
    start = next(i for i, line in enumerate(text) if line.lstrip().startswith("# plan"))
    rows = []
    for line in text[start + 1:]:
        if not line.strip():
            break
        rows.append(line)
    return text[start], rows


def test_each_gate_verdict_sits_under_its_label():
    doc = json.loads(run_script("plan.py", *ARGS, "--json", check=0).stdout)
    short = {"pass": "ok", "veto": "VETO", "warn": "warn", "info": "i"}
    head, rows = _table()
    labels = {m.group(): m.start() for m in re.finditer(r"G\d", head)}
    assert list(labels) == [f"G{i}" for i in range(1, 8)]
    feasible = [p for p in doc["plans"] if p["feasible"]]
    assert len(rows) == 10
    for row, plan in zip(rows, feasible, strict=False):
        verdicts = {g["gate"]: short[g["verdict"]] for g in plan["gates"]}
        for gate, col in labels.items():
            cell = row[col:].split(" ", 1)[0] if len(row) > col else ""
            assert cell == verdicts.get(gate, "-"), (row, gate)


def test_seconds_have_one_format():
    head, rows = _table()
    for row in rows:
        cells = row.split()
        # '#', plan words, then the 9 seconds columns and mem_GB before the gates
        numbers = [c for c in cells if re.fullmatch(r"-?\d+(\.\d+)?", c)]
        # latency, then the speedup and e2e_x (one decimal: ratios of two predictions, issues 24 and 42), then seconds
        seconds = [numbers[1]] + numbers[4:3 + len(SECONDS)]
        assert all(re.fullmatch(r"\d+\.\d{3}", c) for c in seconds), row
        assert re.fullmatch(r"\d+\.\d", numbers[2]) and re.fullmatch(r"\d+\.\d", numbers[3]), row


def test_infeasible_reasons_are_not_cut_at_semicolons():
    # memory vetoes carry '; even ... needs' when no unlock fits: Wan2.1-14B at 720p on 4 x T4 (16 GB) has some
    # (on 2 x L20 every plan now fits: offload, sharding or 'fits, tight')
    args = ["--model", "Wan2.1-T2V-14B", "--hardware", "T4", "--devices", "4"]
    doc = json.loads(run_script("plan.py", *args, "--json", check=0).stdout)
    reasons = {p["gates"][-1]["reason"] for p in doc["plans"] if not p["feasible"]}
    with_semicolon = [r for r in reasons if ";" in r]
    assert with_semicolon
    text = run_script("plan.py", *args, "--all", check=0).stdout
    for reason in with_semicolon:
        assert reason in text
