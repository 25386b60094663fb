"""Masking effectiveness checklist: each item's PASS / FAIL / NO EVIDENCE on hand-built profiles,
the real Ascend fixtures (against step_trace_time.csv read here), output hashes and exit codes."""

from __future__ import annotations

import csv
import json

import pytest
from conftest import need_shared, run_script
from ditpar.errors import InputError
from ditpar.masking import verify
from test_mask_profile import off_arm, on_arm, profile

PASS, FAIL, NOEV = "PASS", "FAIL", "NO EVIDENCE"


def by_name(items):
    return {i["name"]: i for i in items}


def test_all_pass_on_the_synthetic_pair(tmp_path):
    a, b = tmp_path / "off.bin", tmp_path / "on.bin"
    a.write_bytes(b"\x00\x01same")
    b.write_bytes(b"\x00\x01same")
    items = verify.run_checks(profile(off_arm()), profile(on_arm()), "alltoall", None, 2, [str(a), str(b)])
    assert [i["status"] for i in items] == [PASS, PASS, PASS, PASS]
    got = by_name(items)
    assert "rank 0: 4 -> 8 (2x)" in got["op count of the family grew about n-fold"]["detail"]
    # not overlapped (all families, from events): off 2 x 100 (the allgather hides under MatMul), on 2 x 50
    assert "rank 0: 200.0 -> 100.0 us/step" in got["Communication(Not Overlapped) fell"]["detail"]


def test_wrong_chunk_count_fails():
    items = verify.run_checks(profile(off_arm()), profile(on_arm()), "alltoall", None, 4, None)
    assert items[0]["status"] == FAIL and "expected 4x" in items[0]["detail"]


def test_compute_on_the_comm_stream_fails():
    rows = on_arm() + [(0, "7", "compute", "Transpose", "", "", 90, 5)]
    item = verify.check_side_stream(profile(rows), "alltoall", None)
    assert item["status"] == FAIL and "1 compute kernels (Transpose)" in item["detail"]


def test_synthetic_comm_streams_are_no_evidence():
    rows = [(r, "comm:g1" if k == "comm" else s, k, n, f, g, t, d) for r, s, k, n, f, g, t, d in on_arm()]
    assert verify.check_side_stream(profile(rows), "alltoall", None)["status"] == NOEV


def test_not_overlapped_that_rises_fails():
    item = verify.check_not_overlapped(profile(on_arm()), profile(off_arm()))  # arms swapped
    assert item["status"] == FAIL


def test_missing_inputs_are_no_evidence_not_pass():
    items = verify.run_checks(None, None, None, None, None, None)
    assert all(i["status"] == NOEV for i in items)


def test_family_that_matches_nothing_is_an_error():
    with pytest.raises(InputError, match=r"masking-off profile: .*families present: alltoall \(4\), allgather \(1\)"):
        verify.run_checks(profile(off_arm()), profile(on_arm()), "allgatherv", None, 2, None)


def test_real_fixture_not_overlapped_against_step_trace():
    root = need_shared("fixtures", "ascend")
    off, on = root / "msinsight-text-level0", root / "msinsight-text-level1"
    proc = run_script("mask_bound.py", "verify", "--off", str(off), "--on", str(on), "--family", "allreduce",
                      "--chunks", "1", "--json", check=1)
    doc = json.loads(proc.stdout)
    items = by_name(doc["checks"])
    assert items["op count of the family grew about n-fold"]["status"] == PASS  # 4 -> 4 on both ranks
    # Ascend communication ops carry no stream id: ownership cannot be judged
    assert items["zero compute kernels on the communication stream"]["status"] == NOEV
    detail = items["Communication(Not Overlapped) fell"]["detail"]
    assert detail.startswith("step_trace_time.csv")
    for rank in (0, 1):
        vals = []
        for arm in (off, on):
            with (arm / f"rank{rank}_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "step_trace_time.csv").open() as fh:
                vals.append(float(next(csv.DictReader(fh))["Communication(Not Overlapped)"]))
        assert f"rank {rank}: {vals[0]:.1f} -> {vals[1]:.1f} us/step" in detail
    # level1 exposes more than level0 (two different runs, not an off/on pair): FAIL, exit 1
    assert items["Communication(Not Overlapped) fell"]["status"] == FAIL
    assert items["outputs byte-identical"]["status"] == NOEV


def test_cli_exit_codes(tmp_path):
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    a.write_bytes(b"x" * 100)
    b.write_bytes(b"x" * 100)
    c.write_bytes(b"x" * 99 + b"y")
    ok = run_script("mask_bound.py", "verify", "--outputs", str(a), str(b), check=0)
    assert "verdict: PASS (1 of 4 items had evidence)" in ok.stdout
    bad = run_script("mask_bound.py", "verify", "--outputs", str(a), str(c), check=1)
    assert "verdict: FAIL" in bad.stdout
    none = run_script("mask_bound.py", "verify", check=2)
    assert "no item had evidence" in none.stderr
    missing = run_script("mask_bound.py", "verify", "--outputs", str(a), str(tmp_path / "gone"), check=2)
    assert "output file not found" in missing.stderr and missing.stderr.count("\n") == 1


def test_real_kineto_comm_stream_carries_only_collectives():
    path = need_shared("fixtures", "kineto", "hta-nccl_data.json.gz")
    from ditpar.readers import load_profiles

    ev = load_profiles(path).events
    comm_streams = set(ev.loc[ev["kind"] == "comm", "stream"])
    n_comm = int((ev["kind"] == "comm").sum())
    n_compute_there = int(((ev["kind"] == "compute") & ev["stream"].isin(comm_streams)).sum())
    proc = run_script("mask_bound.py", "verify", "--on", str(path), "--family", "allreduce|broadcast", check=0)
    assert n_compute_there == 0 and comm_streams == {"40"}
    assert f"PASS         zero compute kernels on the communication stream  rank 0 stream 40: {n_comm} " \
           f"collectives, 0 compute kernels" in proc.stdout
    assert "verdict: PASS (1 of 4 items had evidence)" in proc.stdout
