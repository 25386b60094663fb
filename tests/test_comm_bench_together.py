"""comm_bench.py: disjoint groups at the same moment (--simultaneous) and the overlap probe."""

from __future__ import annotations

import json

import pytest
from conftest import torchrun
from ditpar.comm import bench, overlap_probe, simultaneous
from ditpar.errors import InputError


def test_simultaneous_groups_each_run_their_own_op():
    proc = torchrun(4, "comm_bench.py", "--simultaneous", "--groups", "0,1@all_to_all;2,3@all_gather",
                    "--min-bytes", "64K", "--max-bytes", "128K", "--iters", "2", "--warmup", "1", "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads(proc.stdout)
    got = sorted((r["op"], r["group"], r["bytes"]) for r in doc["rows"])
    assert got == [("all_gather", "2,3", 65536), ("all_gather", "2,3", 131072),
                   ("all_to_all", "0,1", 65536), ("all_to_all", "0,1", 131072)]
    assert all(r["correct"] and r["simultaneous"] == "0,1;2,3" and r["ranks"] == 2 for r in doc["rows"])


@pytest.mark.parametrize("text, phrase", [
    ("0,1;1,2", "must be disjoint"),
    ("0,1@all_to_all,all_gather;2,3@all_gather", "same number of ops"),
    ("0@all_to_all;1,2@all_to_all", "at least 2 ranks"),
])
def test_simultaneous_groups_are_checked(text, phrase):
    with pytest.raises(InputError, match=phrase):
        groups, ops = simultaneous.parse_group_ops(text, 4, bench.parse_ops("all_to_all"))
        simultaneous.check_simultaneous(groups, ops)


def test_per_group_op_needs_simultaneous():
    proc = torchrun(2, "comm_bench.py", "--groups", "0,1@all_gather", "--iters", "1", "--warmup", "0")
    assert proc.returncode != 0 and "needs --simultaneous" in proc.stderr


def test_hidden_share_by_hand():
    # C = 100 us alone, matmul 120 us alone, 150 us together: 70 us hid, 0.7 of the shorter (C).
    s = overlap_probe.summarise(100.0, [118.0, 120.0, 125.0], [149.0, 150.0, 160.0])
    assert s["matmul_us"] == 120.0 and s["both_us"] == 150.0
    assert s["hidden_us"] == pytest.approx(70.0) and s["hidden_frac"] == pytest.approx(0.7)
    # fully serial: together = C + M -> nothing hides
    assert overlap_probe.summarise(100.0, [120.0], [220.0])["hidden_frac"] == 0.0
    assert overlap_probe.verdict(0.7).startswith("overlaps")
    assert "do not build" in overlap_probe.verdict(0.49)
    assert overlap_probe.verdict(0.5).startswith("overlaps")   # the threshold itself counts as overlap


def test_beside_matmul_reports_the_probe():
    proc = torchrun(2, "comm_bench.py", "--ops", "all_to_all", "--beside-matmul", "--min-bytes", "256K",
                    "--max-bytes", "256K", "--iters", "3", "--warmup", "1", "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    row = json.loads(proc.stdout)["rows"][0]
    assert row["matmul_us"] > 0 and row["both_us"] > 0
    assert row["hidden_us"] == pytest.approx(row["time_us"] + row["matmul_us"] - row["both_us"])
    assert 0.0 <= row["hidden_frac"] <= 1.0
