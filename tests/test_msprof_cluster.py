"""msprof-analyze cluster_analysis_output (text and db): answers from aggregates, the rest named (issue 25).

No real msprof-analyze output is in ../shared: tests/msprof_cluster_synth.py writes one from the real
level-1 capture in msprof-analyze's formats (sources cited there).
"""

from __future__ import annotations

import csv
import json
import shutil

import pytest
from conftest import need_shared, run_script
from ditpar.readers import load_profiles
from msprof_cluster_synth import build_cluster


@pytest.fixture(scope="module")
def level1():
    return need_shared("fixtures", "ascend", "msinsight-text-level1")


@pytest.fixture(scope="module", params=["text", "db"])
def cluster(request, level1, tmp_path_factory):
    ranks = {r: level1 / f"rank{r}_ascend_pt" for r in (0, 1)}
    return build_cluster(ranks, tmp_path_factory.mktemp(request.param), db=request.param == "db")


def test_step_rows_are_the_profilers_own(cluster, level1):
    doc = json.loads(run_script("step_breakdown.py", str(cluster), "--json", check=0).stdout)
    assert doc["status"] == "profiler-only" and doc["compared"] == 0 and doc["profiler_only_ranks"] == [0, 1]
    for row in doc["rows"]:
        with open(level1 / f"rank{row['rank']}_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "step_trace_time.csv") as fh:
            ref = next(csv.DictReader(fh))
        assert (row["step"], row["computing_us"], row["free_us"], row["stage_us"]) == (
            50, float(ref["Computing"]), float(ref["Free"]), float(ref["Stage"]))


def test_collectives_from_aggregates_match_the_rank_files(cluster, level1):
    doc = json.loads(run_script("collectives.py", str(cluster), "--json", check=0).stdout)
    for rank in (0, 1):
        data = json.loads((level1 / f"rank{rank}_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "communication.json")
                          .read_text())
        ops = [op for k, op in data["step50"]["collective"].items() if k != "Total Op Info"]
        row = next(r for r in doc["collectives"] if r["rank"] == rank)
        assert row["count"] == len(ops) == 4
        assert row["sum_us"] == pytest.approx(sum(o["Communication Time Info"]["Elapse Time(ms)"] for o in ops) * 1000,
                                              abs=0.004)
        assert row["wait_us"] == pytest.approx(sum(o["Communication Time Info"]["Wait Time(ms)"] for o in ops) * 1000)
        assert row["union_us"] is None and row["exposed_us"] is None
        assert row["group_name"] == "" and row["group"] == "586"
    acc = {c["name"]: c for c in doc["checks"]}["exposed_le_union_le_sum"]
    assert acc["status"] == "NO EVIDENCE" and "kernel rows" in acc["detail"]
    links = {(r["rank"], r["link"]): r for r in doc["links"]}
    assert links[(1, "1-0")]["src_rank"] == 1 and links[(1, "1-0")]["mapped_by"].startswith("msprof-analyze")
    assert links[(0, "0-1")]["bytes"] == 61210624  # rank 0's allreduce-total link 0-1, Transit Size(MB) x 1e6


def test_text_and_db_cluster_outputs_read_the_same(level1, tmp_path):
    ranks = {r: level1 / f"rank{r}_ascend_pt" for r in (0, 1)}
    text = load_profiles(build_cluster(ranks, tmp_path / "t"))
    db = load_profiles(build_cluster(ranks, tmp_path / "d", db=True))
    assert text.partial_ranks == db.partial_ranks == {0: ["step_trace", "communication", "links"],
                                                      1: ["step_trace", "communication", "links"]}
    cols = ["rank", "step", "name", "family", "group", "group_hash", "start_ns", "bytes"]
    assert text.comm_ops[cols].equals(db.comm_ops[cols])
    assert text.groups["586"].full_hash == db.groups["586"].full_hash == "17522688603477080586"
    assert text.groups["586"].ranks == db.groups["586"].ranks == (0, 1)


def test_what_needs_kernel_rows_says_so(cluster):
    proc = run_script("bubbles.py", str(cluster), check=2)
    assert "needs device tasks (kernel_details.csv" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    proc = run_script("mask_bound.py", "profile", str(cluster), "--family", "allreduce", "--consumer", "MatMul",
                      "--chunks", "2", check=2)
    assert "needs device tasks" in proc.stderr


def test_a_run_folder_with_cluster_output_reads_the_ranks(level1, tmp_path):
    """msprof-analyze writes cluster_analysis_output beside the rank folders: the ranks are read, its JSON
    files are not taken for Kineto traces."""
    run = tmp_path / "run"
    shutil.copytree(level1, run)
    build_cluster({r: level1 / f"rank{r}_ascend_pt" for r in (0, 1)}, run)
    ps = load_profiles(run, workers=1)
    assert ps.fmt == "ascend" and ps.ranks == [0, 1] and ps.partial_ranks == {}
