"""comm_bench.py under torchrun with gloo in 2 and 4 processes: data checks, sizes, busbw, failures.

Launches are few and small (torchrun start-up costs seconds): one clean run per world size, one per
failure drill. Every launch has a timeout so a hang is a test failure, not a stuck CI job.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import time

import pytest
from conftest import ROOT, run_script, torchrun

# bus factor per op for n ranks, from nccl-tests src/*.cu (independent of the code under test)
FACTOR = {
    "all_reduce": lambda n: 2 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n, "all_to_all": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0, "sendrecv": lambda n: 1.0,
}
ALL_OPS = ["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "all_to_all_uneven",
           "all_to_all_padded", "broadcast", "sendrecv"]



def hand_size(op: str, requested: int, n: int, row_bytes: int = 256) -> int:
    """nccl-tests' size for float32 (per-rank split ops round the count down to a multiple of n)."""
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return requested // 4 // n * n * 4
    if op in ("all_to_all_uneven", "all_to_all_padded"):
        return requested // row_bytes * row_bytes
    return requested // 4 * 4


def check_rows(rows: list[dict], n_world: int) -> None:
    for r in rows:
        n = int(r["ranks"])
        k = int(r["concurrent"])
        assert r["correct"] in (True, "True"), r
        assert int(r["wrong"]) == 0
        assert int(r["bytes"]) == hand_size(r["op"], int(r["bytes"]), n)
        t = float(r["time_us"])
        assert float(r["time_min_us"]) <= t <= float(r["time_max_us"])
        alg = k * int(r["bytes"]) / 1e9 / (t * 1e-6)
        assert float(r["algbw_GBps"]) == pytest.approx(alg, rel=1e-9)
        if r["op"] in FACTOR:
            factor = FACTOR[r["op"]](n)
        else:  # uneven and padded all-to-all: the share of the payload that leaves the rank
            factor = float(r["bus_factor"])
        assert float(r["busbw_GBps"]) == pytest.approx(alg * factor, rel=1e-9)


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    out = tmp_path_factory.mktemp("cb2")
    proc = torchrun(2, "comm_bench.py", "--ops", "all", "--min-bytes", "4K", "--max-bytes", "64K",
                    "--factor", "4", "--iters", "3", "--warmup", "1", "--json",
                    "--csv", str(out / "b.csv"), "--plot", str(out / "b.png"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout), out


def test_two_ranks_every_op_correct(two_ranks):
    doc, out = two_ranks
    assert doc["schema"] == "dit-parallel-opt/comm_bench/v1"
    assert (doc["backend"], doc["world"], doc["timing"]) == ("gloo", 2, "wall-clock")
    assert doc["all_correct"] is True
    ops = sorted({r["op"] for r in doc["rows"]})
    assert ops == sorted(ALL_OPS)
    # 3 sizes (4K, 16K, 64K) per op
    assert len(doc["rows"]) == 3 * len(ALL_OPS)
    check_rows(doc["rows"], 2)
    by = {(r["op"], r["bytes"]): r for r in doc["rows"]}
    # hand values for 2 ranks at 16 KiB
    assert by[("all_gather", 16384)]["count"] == 2048
    assert by[("all_reduce", 16384)]["busbw_GBps"] == pytest.approx(by[("all_reduce", 16384)]["algbw_GBps"])
    assert by[("all_to_all", 16384)]["busbw_GBps"] == pytest.approx(0.5 * by[("all_to_all", 16384)]["algbw_GBps"])
    # uneven on 2 ranks: 64 rows split 1:2 -> 21 to self (largest remainder), 43 to the peer
    assert by[("all_to_all_uneven", 16384)]["bus_factor"] == pytest.approx(43 / 64)
    # padded: S_PAD = 128 rows (from the 43-row block), 2 x 128 rows x 256 B on the wire
    assert by[("all_to_all_padded", 16384)]["wire_bytes"] == 2 * 128 * 256


def test_two_ranks_csv_and_plot(two_ranks):
    doc, out = two_ranks
    with open(out / "b.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert list(rows[0])[:7] == ["op", "bytes", "ranks", "time_us", "algbw_GBps", "busbw_GBps", "correct"]
    assert len(rows) == len(doc["rows"])
    check_rows(rows, 2)
    assert (out / "b.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_four_ranks_groups_and_concurrency():
    proc = torchrun(4, "comm_bench.py", "--ops", "all", "--min-bytes", "16K", "--max-bytes", "16K",
                    "--iters", "2", "--warmup", "1", "--groups", "0,1;0,2;1,2,3", "--concurrent", "2",
                    "--json", "--world-size", "4")
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    assert doc["world"] == 4 and doc["all_correct"] is True
    groups = {(r["group"], r["ranks"]) for r in doc["rows"]}
    assert groups == {("0,1", 2), ("0,2", 2), ("1,2,3", 3)}
    assert len(doc["rows"]) == 3 * len(ALL_OPS)
    assert {r["concurrent"] for r in doc["rows"]} == {2}
    check_rows(doc["rows"], 4)
    tri = {r["op"]: r for r in doc["rows"] if r["group"] == "1,2,3"}
    # 3 ranks, 16 KiB float32: 4096 elements -> 1365 per rank -> 16380 B
    assert tri["all_gather"]["bytes"] == 16380
    assert tri["all_reduce"]["bus_factor"] == pytest.approx(4 / 3)


def test_hung_rank_ends_with_clear_error_within_timeout():
    start = time.monotonic()
    proc = torchrun(2, "comm_bench.py", "--ops", "all_reduce", "--min-bytes", "4K", "--max-bytes", "4K",
                    "--iters", "1", "--warmup", "0", "--timeout", "2", "--fault-drill", "hang:1", timeout=90)
    elapsed = time.monotonic() - start
    assert proc.returncode != 0
    assert "rank 0: all_reduce 4096 B on group world failed" in proc.stderr
    assert "hung past --timeout 2 s" in proc.stderr
    assert elapsed < 60


def test_dead_rank_ends_the_run():
    start = time.monotonic()
    proc = torchrun(2, "comm_bench.py", "--ops", "all_reduce", "--min-bytes", "4K", "--max-bytes", "4K",
                    "--iters", "1", "--warmup", "0", "--timeout", "5", "--fault-drill", "die:1", timeout=90)
    assert proc.returncode != 0
    assert "rank 1: --fault-drill die" in proc.stderr
    assert "exitcode: 17" in proc.stderr  # torchrun names the rank that died and its exit code
    assert time.monotonic() - start < 60


def test_wrong_data_exits_1_single_process():
    proc = run_script("comm_bench.py", "--ops", "all_reduce,all_to_all_padded", "--min-bytes", "64K",
                      "--max-bytes", "64K", "--iters", "1", "--warmup", "0", "--fault-drill", "corrupt:0")
    assert proc.returncode == 1, proc.stderr
    assert "wrong data in 2 of 2 rows" in proc.stderr
    assert proc.stderr.count("\n") == 1


@pytest.mark.parametrize("args,needle", [
    (["--min-bytes", "12Q"], "--min-bytes '12Q'"),
    (["--ops", "all_reduce,alltoallv"], "unknown op"),
    (["--min-bytes", "1M", "--max-bytes", "4K"], "larger than --max-bytes"),
    (["--fault-drill", "explode:1"], "--fault-drill"),
    (["--world-size", "4", "--ops", "all_reduce"], "the launched world has 1 rank"),
    (["--groups", "0,3", "--ops", "all_reduce"], "outside the launched world of 1"),
])
def test_bad_input_exits_2_with_one_line(args, needle):
    proc = run_script("comm_bench.py", *args)
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and needle in lines[0], proc.stderr


# --- backend choice and device binding, with fakes (no accelerator here) -----------------------


class _Recorder:
    def __init__(self):
        self.calls: list[tuple] = []


def _fake_dist_env(monkeypatch, local_rank: int):
    import torch.distributed as tdist

    rec = _Recorder()
    monkeypatch.setenv("RANK", str(local_rank))
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_RANK", str(local_rank))
    monkeypatch.setattr(tdist, "init_process_group", lambda **kw: rec.calls.append(("init", kw["backend"])))
    return rec


def test_hccl_sets_the_npu_before_init(monkeypatch):
    import types

    import torch
    from ditpar.comm import dist

    rec = _fake_dist_env(monkeypatch, 2)
    npu = types.SimpleNamespace(is_available=lambda: True, device_count=lambda: 8,
                                set_device=lambda i: rec.calls.append(("set_device", i)))
    monkeypatch.setitem(sys.modules, "torch_npu", types.SimpleNamespace(npu=npu))
    monkeypatch.setattr(torch, "npu", npu, raising=False)
    monkeypatch.setattr(torch, "device", lambda kind, idx=None: (kind, idx))
    ctx = dist.setup("auto", timeout_s=5)
    try:
        assert ctx.backend == "hccl" and ctx.device == ("npu", 2)
        assert rec.calls == [("set_device", 2), ("init", "hccl")]
    finally:
        ctx.watchdog.stop()


def test_nccl_sets_the_cuda_device_before_init(monkeypatch):
    import torch
    from ditpar.comm import dist
    from ditpar.errors import InputError

    rec = _fake_dist_env(monkeypatch, 1)
    monkeypatch.setattr(dist, "npu_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "set_device", lambda i: rec.calls.append(("set_device", i)))
    ctx = dist.setup("auto", timeout_s=5)
    ctx.watchdog.stop()
    assert ctx.backend == "nccl" and rec.calls == [("set_device", 1), ("init", "nccl")]
    assert dist.choose_backend("gloo") == "gloo"  # --backend forces
    monkeypatch.setenv("LOCAL_RANK", "3")  # more ranks on the node than devices
    with pytest.raises(InputError, match="only 2 CUDA device"):
        dist.setup("nccl", timeout_s=5)


def test_watchdog_exits_2_when_nothing_progresses():
    code = ("import sys, time; sys.path.insert(0, 'scripts'); from ditpar.comm.dist import Watchdog; "
            "w = Watchdog(3, 0.5); w.start(); w.pet('all_to_all 1 MiB'); time.sleep(20)")
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=30)
    assert proc.returncode == 2
    assert "rank 3: no progress for 0.5 s in all_to_all 1 MiB" in proc.stderr
    assert time.monotonic() - start < 10
