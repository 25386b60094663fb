"""Kineto reader on the real HTA fixtures and on small hand-written traces."""

from __future__ import annotations

import gzip
import json

import pytest
from conftest import need_shared
from ditpar.errors import InputError
from ditpar.readers import load_profiles

BASE = 1711964646000000000  # baseTimeNanoseconds of hta-nccl_data.json.gz


def test_nccl_data_fixture():
    ps = load_profiles([need_shared("fixtures", "kineto", "hta-nccl_data.json.gz")])
    assert ps.fmt == "kineto" and ps.ranks == [0]
    ev = ps.events
    comm = ev[ev["kind"] == "comm"]
    assert comm["family"].value_counts().to_dict() == {"allreduce": 15, "broadcast": 6}
    assert set(comm["stream"]) == {"40"} and set(comm["group"]) == {"0"}
    assert ps.groups["0"].role == "default_pg" and ps.groups["0"].ranks == (0, 1)
    # the AllReduce at ts 4458677009853.422 us (relative to baseTimeNanoseconds): 6637568 Float elements
    op = comm[comm["start_ns"] == BASE + 4458677009853422]
    assert len(op) == 1 and op["family"].iloc[0] == "allreduce"
    assert op["dur_ns"].iloc[0] == 2636669
    assert op["bytes"].iloc[0] == 6637568 * 4
    assert (ev.loc[ev["kind"] == "other", "name"].str.startswith(("Memcpy", "Memset"))).all()
    assert (ev["kind"] == "other").sum() == 960 + 114  # gpu_memcpy + gpu_memset events
    assert (ev["kind"] == "compute").sum() == 2700 - 21
    assert ps.steps["step"].tolist() == [4, 5, 6]
    assert set(ev["step"].dropna()) == {4, 5, 6}
    assert ps.unclassified == {}
    assert ps.step_trace is None and ps.comm_ops is None


def test_sampled_rank_fixture_sendrecv_without_args_is_reported():
    ps = load_profiles([need_shared("fixtures", "kineto", "hta-timeline-sampled_rank-0.json.gz")])
    comm = ps.events[ps.events["kind"] == "comm"]
    assert len(comm) == 10 and set(comm["family"]) == {"other_comm"}
    assert sum(ps.unclassified.values()) == 10
    # integer microsecond stamps stay exact
    assert comm.iloc[0]["start_ns"] == 1682725898094377000
    assert ps.steps["step"].tolist() == [551, 552]


def write(path, doc, gz=False):
    data = json.dumps(doc).encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def kernel(name, ts, dur, stream=7, corr=None, **args):
    a = {"stream": stream, "device": 0, **args}
    if corr is not None:
        a["correlation"] = corr
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": ts, "dur": dur, "args": a}


def test_exact_absolute_stamps_and_no_steps(tmp_path):
    # absolute 1.7e15 us stamps written as JSON numbers: parsed from their text, not via float
    doc = {"traceEvents": [
        kernel("gemm", "TS0", 10.5),
        kernel("ncclDevKernel_SendRecv(x)", "TS1", 4.25, stream=20,
               **{"Collective name": "all_to_all", "In msg nelems": 1024, "Out msg nelems": 1024,
                  "dtype": "BFloat16", "Process Group Name": "3", "Process Group Description": "ulysses",
                  "Process Group Ranks": "[0, 1, 2, 3]"}),
    ], "distributedInfo": {"rank": 2, "world_size": 4}}
    text = json.dumps(doc).replace('"TS0"', "1764246877073569.641").replace('"TS1"', "1764246877073570.003")
    path = tmp_path / "t.json"
    path.write_text(text, encoding="utf-8")
    ps = load_profiles([path])
    ev = ps.events
    assert ps.ranks == [2]
    assert ev["start_ns"].tolist() == [1764246877073569641, 1764246877073570003]
    assert ev["dur_ns"].tolist() == [10500, 4250]
    assert ev["family"].tolist() == ["", "alltoall"]
    assert ev["bytes"].iloc[1] == 2048 and ev["group"].tolist() == ["", "3"]
    assert ps.groups["3"].role == "ulysses" and ps.groups["3"].ranks == (0, 1, 2, 3)
    # no ProfilerStep annotation: one whole-capture window, step NA
    assert len(ps.steps) == 1 and ps.steps["step"].isna().all()
    assert ps.steps["start_ns"].iloc[0] == 1764246877073569641
    assert ps.steps["end_ns"].iloc[0] == 1764246877073569641 + 10500  # gemm ends last


def test_bare_array_gz_and_steps_from_launch_correlation(tmp_path):
    events = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#7", "pid": 1, "tid": 1, "ts": 100, "dur": 50},
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#8", "pid": 1, "tid": 1, "ts": 150, "dur": 50},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 120, "dur": 1,
         "args": {"correlation": 11}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 160, "dur": 1,
         "args": {"correlation": 12}},
        kernel("k1", 190, 30, corr=11),  # launched in step 7, runs after the host step ended
        kernel("k2", 221, 5, corr=12),
        {"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "GPU"}},
    ]
    ps = load_profiles([write(tmp_path / "rank3.pt.trace.json.gz", events, gz=True)])
    assert ps.ranks == [3]  # from the file name
    assert ps.events["step"].tolist() == [7, 8]
    assert ps.steps[["step", "start_ns", "end_ns"]].values.tolist() == [[7, 190000, 220000], [8, 221000, 226000]]


def test_two_ranks_from_a_folder(tmp_path):
    for r in (0, 1):
        write(tmp_path / f"worker{r}.json",
              {"traceEvents": [kernel("gemm", 10 + r, 1)], "distributedInfo": {"rank": r}})
    ps = load_profiles([tmp_path])
    assert ps.ranks == [0, 1] and len(ps.sources) == 2


def test_unknown_rank_with_several_files_is_an_error(tmp_path):
    for r in (0, 1):
        write(tmp_path / f"worker{r}.json", {"traceEvents": [kernel("gemm", 10 + r, 1)]})
    with pytest.raises(InputError, match="cannot tell its rank"):
        load_profiles([tmp_path])


def test_not_a_trace_object(tmp_path):
    with pytest.raises(InputError, match="without a 'traceEvents' array"):
        load_profiles([write(tmp_path / "x.json", {"foo": 1})])
