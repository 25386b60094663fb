"""Measured masking from profiles: synthetic event tables with hand-computed answers, and the real
Ascend fixtures, where the exposed time of the only family must equal the profiler's own
Communication(Not Overlapped)."""

from __future__ import annotations

import csv
import json

import pandas as pd
import pytest
from conftest import need_shared, run_script
from ditpar.core.events import make_events
from ditpar.core.profile import ProfileSet
from ditpar.errors import InputError
from ditpar.masking import measured

US = 1000  # ns per us


def profile(rows, windows=None):
    """rows: (rank, stream, kind, name, family, group, start_us, dur_us)."""
    cols = ["rank", "stream", "kind", "name", "family", "group", "start_ns", "dur_ns"]
    data = [dict(zip(cols, (r, s, k, n, f, g, int(a * US), int(d * US)), strict=True))
            for r, s, k, n, f, g, a, d in rows]
    ev = make_events(pd.DataFrame(data))
    steps = pd.DataFrame(windows or [], columns=["rank", "step", "start_ns", "end_ns"])
    return ProfileSet(events=ev, steps=steps)


def off_arm(rank=0):
    # per layer (300 us): forward a2a 75, attention 200 (not overlapped), reverse a2a 25; 2 layers
    rows = []
    for layer in range(2):
        t = layer * 300
        rows += [(rank, "1", "comm", "a2a", "alltoall", "g1", t, 75),
                 (rank, "1", "compute", "FlashAttn", "", "", t + 75, 200),
                 (rank, "1", "comm", "a2a", "alltoall", "g1", t + 275, 25)]
    rows.append((rank, "1", "compute", "MatMul", "", "", 600, 100))
    rows.append((rank, "9", "comm", "ag", "allgather", "g2", 640, 50))  # another family, ignored
    return rows


def on_arm(rank=0):
    # per layer, n = 2: F0 [0,40) F1 [40,80) on comm stream 7; A0 [40,140) A1 [140,240); R0 [140,150)
    # R1 [240,250). C = 100, F = 200, exposed = [0,40) + [240,250) = 50 per layer
    rows = []
    for layer in range(2):
        t = layer * 300
        rows += [(rank, "7", "comm", "a2a", "alltoall", "g1", t, 40),
                 (rank, "7", "comm", "a2a", "alltoall", "g1", t + 40, 40),
                 (rank, "1", "compute", "FlashAttn", "", "", t + 40, 100),
                 (rank, "1", "compute", "FlashAttn", "", "", t + 140, 100),
                 (rank, "7", "comm", "a2a", "alltoall", "g1", t + 140, 10),
                 (rank, "7", "comm", "a2a", "alltoall", "g1", t + 240, 10)]
    rows.append((rank, "1", "compute", "MatMul", "", "", 600, 100))
    return rows


def test_off_on_pair_by_hand():
    res = measured.analyse(profile(on_arm()), "alltoall", "flash", layers=2, chunks=None,
                              off=profile(off_arm()), drain_us=10)
    row = res["rows"][0]
    assert res["chunks"] == 2  # 4 -> 8 ops
    assert row["comm_us"] == pytest.approx(100) and row["compute_us"] == pytest.approx(200)
    assert row["exposed_us"] == pytest.approx(50) and row["masking"] == pytest.approx(0.5)
    assert row["exposed_off_us"] == pytest.approx(100) and row["exposed_drop_us"] == pytest.approx(50)
    assert row["exposed_drop_frac"] == pytest.approx(0.5)
    # c = 50 <= f = 100: ceiling = ideal = 1 - 1/2; achieved 0.5 / 0.5
    assert row["regime"] == "compute-bound" and row["ceiling"] == pytest.approx(0.5)
    assert row["achieved_fraction"] == pytest.approx(1.0)


def test_step_windows_and_multi_rank():
    rows = on_arm(0) + on_arm(1) + [(1, "7", "comm", "a2a", "alltoall", "g1", 5000, 999)]  # outside window
    win = [(0, 1, 0, 700 * US), (1, 1, 0, 700 * US)]
    res = measured.analyse(profile(rows, win), "alltoall", "Flash", layers=2, chunks=2)
    assert [r["rank"] for r in res["rows"]] == [0, 1]
    for r in res["rows"]:
        assert r["count"] == 8 and r["comm_us"] == pytest.approx(100) and r["exposed_us"] == pytest.approx(50)


def test_group_pins_the_communicator():
    rows = on_arm() + [(0, "8", "comm", "a2a", "alltoall", "g9", 700, 60)]  # another group, exposed
    whole = measured.analyse(profile(rows), "alltoall", "Flash", layers=2, chunks=2)
    pinned = measured.analyse(profile(rows), "alltoall", "Flash", layers=2, chunks=2, group="g1")
    assert whole["rows"][0]["comm_us"] == pytest.approx(130)
    assert pinned["rows"][0]["comm_us"] == pytest.approx(100)


def test_patterns_that_match_nothing_list_what_is_there():
    with pytest.raises(InputError, match=r"families present: alltoall \(8\)"):
        measured.analyse(profile(on_arm()), "alltoallv", "Flash", layers=1, chunks=2)
    with pytest.raises(InputError, match=r"top compute kernels: FlashAttn \(400.0 us\), MatMul \(100.0 us\)"):
        measured.analyse(profile(on_arm()), "alltoall", "sparse_fa", layers=1, chunks=2)
    with pytest.raises(InputError, match=r"communicators present: g1 \(8\)"):
        measured.analyse(profile(on_arm()), "alltoall", "Flash", layers=1, chunks=2, group="g7")
    with pytest.raises(InputError, match="--chunks: required"):
        measured.analyse(profile(on_arm()), "alltoall", "Flash", layers=1, chunks=None)


def test_uneven_growth_is_not_guessed():
    off = profile(off_arm()[:3] + [(0, "1", "comm", "a2a", "alltoall", "g1", 900, 5)])  # 3 ops
    on = profile(on_arm()[:5] + on_arm()[6:8])  # 5 ops: 1.67x is no chunk count
    with pytest.raises(InputError, match="not a whole number"):
        measured.analyse(on, "alltoall", "Flash", layers=1, chunks=None, off=off)


@pytest.mark.parametrize("level", ["msinsight-text-level0", "msinsight-text-level1"])
def test_real_ascend_exposed_equals_profiler_not_overlapped(level):
    path = need_shared("fixtures", "ascend", level)
    proc = run_script("mask_bound.py", "profile", str(path), "--family", "allreduce", "--consumer", "MatMul",
                      "--chunks", "4", "--json", check=0)
    doc = json.loads(proc.stdout)
    for row in doc["rows"]:
        trace = path / f"rank{row['rank']}_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "step_trace_time.csv"
        with trace.open(newline="") as fh:
            ref = next(csv.DictReader(fh))
        # the only family is allreduce: its exposed time is the profiler's Communication(Not Overlapped)
        assert row["exposed_us"] == pytest.approx(float(ref["Communication(Not Overlapped)"]), abs=0.05)
        assert row["comm_us"] == pytest.approx(float(ref["Communication"]), abs=0.05)
        assert row["count"] == 4
        assert row["masking"] == pytest.approx(1 - row["exposed_us"] / row["comm_us"])


def test_real_kineto_family_missing_is_exit_2():
    path = need_shared("fixtures", "kineto", "hta-nccl_data.json.gz")
    proc = run_script("mask_bound.py", "profile", str(path), "--family", "alltoall", "--consumer", "gemm",
                      "--chunks", "2", check=2)
    assert "families present: allreduce (15), broadcast (6)" in proc.stderr
    assert proc.stderr.count("\n") == 1


def test_missing_profile_is_exit_2(tmp_path):
    proc = run_script("mask_bound.py", "profile", str(tmp_path / "nope"), "--family", "alltoall",
                      "--consumer", "x", "--chunks", "2", check=2)
    assert "nope" in proc.stderr and "Traceback" not in proc.stderr
