"""A rank without kernel_details.csv but with step trace and communication files takes part (issue 25).

Real captures often lack kernel_details.csv on some ranks; such a rank shows the profiler's own step
figures and its communication.json op times, and every table says which rank has which evidence.
"""

from __future__ import annotations

import csv
import json
import shutil

import pytest
from conftest import ROOT, need_shared, run_script
from ditpar.readers import load_profiles

DATA = ROOT / "tests" / "data" / "ascend_cann83"
RANK2 = "node0_23103_20251127201437507_ascend_pt"  # profiler_info_2.json


def _without_kernels(src, dst, rank_dir):
    shutil.copytree(src, dst)
    for path in [dst, *dst.rglob("*")]:
        path.chmod(path.stat().st_mode | 0o200)  # ../shared is read-only
    (dst / rank_dir / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv").unlink()
    return dst


@pytest.fixture()
def shipped_partial(tmp_path):
    return _without_kernels(DATA, tmp_path / "run", RANK2)


@pytest.fixture()
def real_partial(tmp_path):
    return _without_kernels(need_shared("fixtures", "ascend", "msinsight-text-level1"), tmp_path / "run",
                            "rank1_ascend_pt")


def _elapse_us(path) -> tuple[int, float]:
    """Count and summed Elapse Time (us) of communication.json, read here independently of the reader."""
    data = json.loads(path.read_text())
    ops = [op for step in data.values() for kind in step.values() for name, op in kind.items()
           if name != "Total Op Info"]
    return len(ops), sum(op["Communication Time Info"]["Elapse Time(ms)"] for op in ops) * 1000


def test_reader_keeps_a_rank_without_kernels_with_its_evidence(shipped_partial):
    ps = load_profiles([shipped_partial], workers=1)
    assert ps.ranks == [0] and ps.skipped == []
    assert ps.partial_ranks == {2: ["step_trace", "communication"]}
    assert ps.evidence() == {0: ["tasks", "step_trace", "communication"], 2: ["step_trace", "communication"]}


@pytest.mark.parametrize("workers", ["1", "2"])
def test_step_breakdown_shows_every_rank(real_partial, workers):
    doc = json.loads(run_script("step_breakdown.py", str(real_partial), "--json", "--workers", workers,
                                check=0).stdout)
    assert [(r["rank"], r["evidence"]) for r in doc["rows"]] == [
        (0, "tasks"), (1, "profiler step table only (no task rows)")]
    assert doc["status"] == "match" and doc["compared"] == 1 and doc["profiler_only_ranks"] == [1]
    with open(real_partial / "rank1_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "step_trace_time.csv") as fh:
        ref = next(csv.DictReader(fh))
    row = doc["rows"][1]
    assert row["computing_us"] == pytest.approx(float(ref["Computing"]), abs=1e-9)
    assert row["stage_us"] == pytest.approx(float(ref["Stage"]), abs=1e-9)
    assert row["reference"] is None and row["max_abs_diff_us"] is None
    assert doc["evidence"]["1"] == ["step_trace", "communication", "links"]


def test_collectives_shows_every_rank_exit_0(real_partial):
    proc = run_script("collectives.py", str(real_partial), "--json", check=0)
    doc = json.loads(proc.stdout)
    rows = {r["rank"]: r for r in doc["collectives"]}
    assert sorted(rows) == [0, 1]
    count, elapse_us = _elapse_us(real_partial / "rank1_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "communication.json")
    part = rows[1]
    assert part["count"] == count == 4
    assert part["sum_us"] == pytest.approx(elapse_us, abs=0.001 * count)  # each op rounded to 1 ns
    assert part["union_us"] is None and part["exposed_us"] is None  # need the rank's kernels
    assert part["evidence"].startswith("profiler communication table only")
    # the tasks of rank 1 (the complete capture) give the same summed time within the ms-float rounding
    full = json.loads(run_script("collectives.py", str(need_shared("fixtures", "ascend", "msinsight-text-level1")),
                                 "--json", check=0).stdout)
    whole = next(r for r in full["collectives"] if r["rank"] == 1)
    assert part["sum_us"] == pytest.approx(whole["sum_us"], abs=0.01)
    assert "all_ranks_present" not in {c["name"] for c in doc["checks"]}
    assert doc["evidence"] == {"0": ["tasks", "step_trace", "communication", "links"],
                               "1": ["step_trace", "communication", "links"]}
    assert {r["rank"] for r in doc["links"]} == {0, 1}


def test_bubbles_names_the_rank_it_cannot_answer_for(shipped_partial):
    proc = run_script("bubbles.py", str(shipped_partial), "--json", check=0)
    assert "rank 2 has no kernel_details.csv" in proc.stderr
    doc = json.loads(proc.stdout)
    assert [r["rank"] for r in doc["ranks"]] == [0] and doc["evidence"]["2"] == ["step_trace", "communication"]


def test_a_rank_with_nothing_usable_is_still_skipped(shipped_partial):
    for name in ("step_trace_time.csv", "communication.json"):
        (shipped_partial / RANK2 / "ASCEND_PROFILER_OUTPUT" / name).unlink()
    ps = load_profiles([shipped_partial], workers=1)
    assert ps.partial_ranks == {} and [s["rank"] for s in ps.skipped] == [2]
