"""An incomplete rank (no kernel_details.csv, and no step trace or communication file that would let it
take part: see test_partial_ranks.py) is skipped, named on stderr and in JSON, never silently."""

from __future__ import annotations

import json
import shutil

import pytest
from conftest import ROOT, run_script
from ditpar.errors import InputError
from ditpar.readers import load_profiles

DATA = ROOT / "tests" / "data" / "ascend_cann83"
RANK0 = "node0_23101_20251127201437501_ascend_pt"  # profiler_info_0.json
RANK2 = "node0_23103_20251127201437507_ascend_pt"  # profiler_info_2.json


@pytest.fixture()
def half_broken(tmp_path):
    """The two shipped ranks, rank 2 without its kernel_details.csv, step trace and communication files."""
    run = tmp_path / "run"
    shutil.copytree(DATA / RANK0, run / RANK0)
    shutil.copytree(DATA / RANK2, run / RANK2)
    for name in ("kernel_details.csv", "step_trace_time.csv", "communication.json"):
        (run / RANK2 / "ASCEND_PROFILER_OUTPUT" / name).unlink()
    return run


def test_reader_keeps_complete_ranks_and_names_the_skipped_one(half_broken):
    ps = load_profiles([half_broken])
    whole = load_profiles([DATA / RANK0])
    assert ps.ranks == [0]
    assert ps.events.equals(whole.events)  # the complete rank reads exactly as on its own
    assert len(ps.skipped) == 1
    skipped = ps.skipped[0]
    assert skipped["rank"] == 2 and skipped["path"].endswith(RANK2)
    assert "no kernel_details.csv" in skipped["reason"]


def test_one_incomplete_rank_alone_is_still_an_input_error(half_broken):
    with pytest.raises(InputError, match="no kernel_details.csv"):
        load_profiles([half_broken / RANK2])


def test_every_rank_incomplete_is_an_input_error(half_broken):
    for name in ("kernel_details.csv", "step_trace_time.csv", "communication.json"):
        (half_broken / RANK0 / "ASCEND_PROFILER_OUTPUT" / name).unlink()
    with pytest.raises(InputError, match="every rank is incomplete"):
        load_profiles([half_broken])


def test_collectives_needs_all_ranks_exit_1(half_broken):
    proc = run_script("collectives.py", str(half_broken), "--json", check=1)
    doc = json.loads(proc.stdout)
    assert [r["rank"] for r in doc["ranks"]] == [0]
    assert [(s["rank"], "no kernel_details.csv" in s["reason"]) for s in doc["skipped_ranks"]] == [(2, True)]
    chk = {c["name"]: c for c in doc["checks"]}["all_ranks_present"]
    assert chk["status"] == "FAIL" and "rank 2" in chk["detail"]
    assert "skipped rank 2" in proc.stderr and "exit 1" in proc.stderr
    # complete input: no such check and an empty list
    full = json.loads(run_script("collectives.py", str(DATA), "--json", check=0).stdout)
    assert full["skipped_ranks"] == [] and "all_ranks_present" not in {c["name"] for c in full["checks"]}


def test_step_breakdown_per_rank_answer_exit_0_with_the_skip_named(half_broken):
    proc = run_script("step_breakdown.py", str(half_broken), "--json", check=0)
    doc = json.loads(proc.stdout)
    assert doc["ranks"] == [0] and [s["rank"] for s in doc["skipped_ranks"]] == [2]
    assert "skipped rank 2" in proc.stderr and "other ranks only" in proc.stderr
    alone = json.loads(run_script("step_breakdown.py", str(DATA / RANK0), "--json", check=0).stdout)
    assert doc["rows"] == alone["rows"]


def test_bubbles_names_the_skip(half_broken):
    proc = run_script("bubbles.py", str(half_broken), "--json", check=0)
    assert [s["rank"] for s in json.loads(proc.stdout)["skipped_ranks"]] == [2]
    assert "skipped rank 2" in proc.stderr


def test_stage_delta_cross_rank_answer_exit_1(half_broken):
    proc = run_script("stage_delta.py", str(half_broken), str(DATA), "--json", check=1)
    doc = json.loads(proc.stdout)
    assert [(s["side"], s["rank"]) for s in doc["skipped_ranks"]] == [("A", 2)]
    assert "skipped rank 2" in proc.stderr
