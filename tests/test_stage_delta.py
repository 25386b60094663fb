"""Stage deltas: columns recomputed from events, the closure identity, step_trace CSVs, linearity."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from attribution_synth import events
from conftest import need_shared, run_script
from ditpar.analysis import stage_delta as sd
from ditpar.core.profile import ProfileSet
from ditpar.errors import InputError

L0 = ("fixtures", "ascend", "msinsight-text-level0")
L1 = ("fixtures", "ascend", "msinsight-text-level1")


def csv_of(level: tuple[str, ...], rank: int) -> str:
    return str(need_shared(*level, f"rank{rank}_ascend_pt", "ASCEND_PROFILER_OUTPUT", "step_trace_time.csv"))


def plan(extra_comm: int) -> ProfileSet:
    """Two steps; compute [0,400), a2a [300,300+x) partly exposed, a recv of 20 ns, a memcpy."""
    rows = []
    for base in (0, 10_000):
        rows += [("7", "compute", "mm", "", "", base, 400),
                 ("20", "comm", "a2a", "alltoall", "g", base + 300, 200 + extra_comm),
                 ("21", "comm", "recv", "recv", "p", base + 700 + extra_comm, 20),
                 ("9", "other", "Memcpy", "", "", base + 800 + extra_comm, 30)]
    steps = pd.DataFrame({"rank": [0, 0], "step": [1, 2], "start_ns": [0, 10_000], "end_ns": [10_000, 20_000]})
    return ProfileSet(events=events(rows), steps=steps)


def test_columns_from_events_by_hand():
    cols = sd.columns_from_events(plan(0)).iloc[0]
    # span [0, 830); compute 400; comm [300,500) + [700,720) = 220, of which 120 outside compute
    assert cols["computing_us"] == pytest.approx(0.400)
    assert cols["communication_us"] == pytest.approx(0.220)
    assert cols["communication_not_overlapped_us"] == pytest.approx(0.120)
    assert cols["overlapped_us"] == pytest.approx(0.100)
    assert cols["free_us"] == pytest.approx(0.830 - 0.520)
    assert cols["bubble_us"] == pytest.approx(0.020) and cols["stage_us"] == pytest.approx(0.810)


def test_delta_closes_exactly_for_event_columns_and_families():
    rep = sd.compare(sd.side_from_profile("A", plan(0)), sd.side_from_profile("B", plan(100)))
    d = {c["name"]: c["delta_us"] for c in rep.columns}
    assert d["Communication(Not Overlapped)"] == pytest.approx(0.100)
    assert d["Stage"] == pytest.approx(0.100) and d["Computing"] == pytest.approx(0.0)
    assert abs(rep.closure_error_us) < 1e-9 and rep.closed
    fam = {f["family"]: f for f in rep.families}
    # per step: the a2a grows by 100 ns, all of it exposed
    assert fam["alltoall"]["delta_sum_us"] == pytest.approx(0.100)
    assert fam["alltoall"]["delta_exposed_us"] == pytest.approx(0.100)
    assert fam["alltoall"]["a_count"] == 1.0


def test_step_trace_csvs_level0_vs_level1_rank0():
    rep = sd.compare(sd.Side("A", sd.read_step_trace_csv(csv_of(L0, 0)), "csv"),
                     sd.Side("B", sd.read_step_trace_csv(csv_of(L1, 0)), "csv"))
    d = {c["name"]: c for c in rep.columns}
    # values straight from the two CSVs
    assert d["Stage"]["a_us"] == pytest.approx(116251.25) and d["Stage"]["b_us"] == pytest.approx(136581.0)
    assert d["Computing"]["delta_us"] == pytest.approx(8873.756 - 8827.473, abs=1e-6)
    assert d["Communication(Not Overlapped)"]["delta_us"] == pytest.approx(101963.203 - 81515.607, abs=1e-6)
    expect = (136581.0 - 116251.25) - ((8873.756 - 8827.473) + (101963.203 - 81515.607) + (25744.05 - 25908.102))
    assert rep.closure_error_us == pytest.approx(expect, abs=1e-6)
    assert abs(rep.closure_error_us) < 1.0


def test_bad_step_trace_csv(tmp_path):
    bad = tmp_path / "step_trace_time.csv"
    bad.write_text("Step,Computing,Free\n1,2,3\n")
    with pytest.raises(InputError, match=r"missing column\(s\) \['Communication\(Not Overlapped\)'"):
        sd.read_step_trace_csv(str(bad))
    bad.write_text("Step,Computing,Communication(Not Overlapped),Overlapped,Communication,Free,Stage\n1,2,x,1,1,1,1\n")
    with pytest.raises(InputError, match=r"row 2 column 'Communication\(Not Overlapped\)'"):
        sd.read_step_trace_csv(str(bad))


def test_linearity_numbers():
    out = sd.linearity(1000.0, 600.0, 4, 8, 100.0, 150.0)
    assert out["speedup"] == pytest.approx(1000 / 600) and out["linearity"] == pytest.approx(1000 / 600 / 2)
    # shortfall 600 - 500 = 100; exposed excess 150 - 100/2 = 100 -> all of it
    assert out["shortfall_us"] == pytest.approx(100.0) and out["exposed_excess_us"] == pytest.approx(100.0)
    assert out["first_suspect"].startswith("exposed communication")
    with pytest.raises(InputError):
        sd.linearity(1000.0, 600.0, 4, 4)


def test_cli_csv_pair_json_and_closure():
    proc = run_script("stage_delta.py", csv_of(L1, 1), csv_of(L1, 0), "--json", check=0)
    doc = json.loads(proc.stdout)
    assert doc["schema"] == "dit-parallel-opt/stage_delta/v1"
    cols = {c["name"]: c for c in doc["columns"]}
    assert cols["Stage"]["delta_us"] == pytest.approx(136581.0 - 131912.5)
    assert set(cols["Free"]) == {"name", "a_us", "b_us", "delta_us"}
    # a zero tolerance cannot be met by the profiler's own rounding: exit 1
    run_script("stage_delta.py", csv_of(L1, 1), csv_of(L1, 0), "--tolerance-us", "0", check=1)


def test_cli_linearity_and_usage_errors():
    proc = run_script("stage_delta.py", "--linearity", "--cards", "4", "8", "--stage-us", "1000", "560", "--json", check=0)
    lin = json.loads(proc.stdout)["linearity"]
    assert lin["linearity"] == pytest.approx(1000 / 560 / 2)
    proc = run_script("stage_delta.py", "--linearity", "--stage-us", "1", "2", check=2)
    assert "--cards" in proc.stderr
    run_script("stage_delta.py", "only_one.csv", check=2)


def test_cli_two_ascend_profiles_every_rank():
    proc = run_script("stage_delta.py", str(need_shared(*L0)), str(need_shared(*L1)), "--json", check=0)
    doc = json.loads(proc.stdout)
    assert doc["a_source"] == doc["b_source"] == "step_trace_time.csv"
    assert [r["rank"] for r in doc["per_rank"]] == [0, 1]
    r1 = doc["per_rank"][1]
    assert r1["delta_stage_us"] == pytest.approx(131912.5 - 100602.25)  # the two rank-1 CSVs
    fam = {f["family"]: f for f in doc["families"]}
    # families from the event tables, one step each: our exposed allreduce at rank 0 of each side
    assert fam["allreduce"]["a_exposed_us"] == pytest.approx(81515.607, abs=0.05)
    assert fam["allreduce"]["b_exposed_us"] == pytest.approx(101963.203, abs=0.05)


def test_cli_two_kineto_profiles_columns_from_events_close_exactly():
    a = need_shared("fixtures", "kineto", "hta-nccl_data.json.gz")
    b = need_shared("fixtures", "kineto", "hta-timeline-sampled_rank-0.json.gz")
    doc = json.loads(run_script("stage_delta.py", str(a), str(b), "--json", check=0).stdout)
    assert doc["a_source"] == "events" and abs(doc["closure_error_us"]) < 1e-6
    assert doc["steps"] == {"a": {"0": 3}, "b": {"0": 2}}


# --- issue 14 item 5: device ids are not ranks -----------------------------------------------------------

def _rank_folder_with_device_2_as_rank_1(tmp_path):
    """The CANN 8.3 rank-2 folder (Device_id 2) relabelled as rank 1: device id and rank differ."""
    import shutil

    from conftest import ROOT

    src = next((ROOT / "tests" / "data" / "ascend_cann83").glob("node0_23103_*_ascend_pt"))
    dst = tmp_path / "node0_23103_ascend_pt"
    shutil.copytree(src, dst)
    info = dst / "profiler_info_2.json"
    (dst / "profiler_info_1.json").write_text(info.read_text().replace('"rank_id": 2', '"rank_id": 1'))
    info.unlink()
    a = str(next((ROOT / "tests" / "data" / "ascend_cann83").glob("node0_23101_*_ascend_pt"))
            / "ASCEND_PROFILER_OUTPUT" / "step_trace_time.csv")
    return a, dst


def test_bare_csv_in_a_rank_folder_reports_the_rank_not_the_device(tmp_path):
    a, folder = _rank_folder_with_device_2_as_rank_1(tmp_path)
    b = str(folder / "ASCEND_PROFILER_OUTPUT" / "step_trace_time.csv")
    assert "2,3," in (folder / "ASCEND_PROFILER_OUTPUT" / "step_trace_time.csv").read_text()  # Device_id 2
    doc = json.loads(run_script("stage_delta.py", a, b, "--json", check=0).stdout)
    assert doc["b_rank"] == 1 and doc["b_rank_from"] == "profiler_info_1.json rank_id"
    text = run_script("stage_delta.py", a, b, check=0).stdout
    assert "B: slowest rank 1 " in text and "rank 2" not in text
    # the whole folder agrees
    assert json.loads(run_script("stage_delta.py", a, str(folder), "--json", check=0).stdout)["b_rank"] == 1


def test_bare_csv_without_a_rank_names_the_device(tmp_path):
    a, folder = _rank_folder_with_device_2_as_rank_1(tmp_path)
    bare = tmp_path / "copied" / "step_trace_time.csv"
    bare.parent.mkdir()
    bare.write_text((folder / "ASCEND_PROFILER_OUTPUT" / "step_trace_time.csv").read_text())
    doc = json.loads(run_script("stage_delta.py", a, str(bare), "--json", check=0).stdout)
    assert doc["b_rank"] is None and doc["b_device"] == 2 and "Device_id" in doc["b_rank_from"]
    text = run_script("stage_delta.py", a, str(bare), check=0).stdout
    assert "B: slowest device 2 " in text and "slowest rank 2" not in text
