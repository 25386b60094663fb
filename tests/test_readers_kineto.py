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


def test_sampled_rank_fixture_sendrecv_classified_by_host_annotations():
    """The 10 SendRecv kernels carry no args; the nccl:* annotation holding each launch names them.

    By hand from the JSON: kernel correlation -> cudaLaunchKernel (same correlation) -> the
    nccl:<op> user_annotation on the launching thread whose span holds the launch (the launches'
    External ids equal their correlations here, so they link to no annotation).
    """
    ps = load_profiles([need_shared("fixtures", "kineto", "hta-timeline-sampled_rank-0.json.gz")])
    comm = ps.events[ps.events["kind"] == "comm"].sort_values("start_ns")
    assert len(comm) == 10 and ps.unclassified == {}
    by_start_us = dict(zip((comm["start_ns"] // 1000).tolist(), comm["family"].tolist(), strict=True))
    assert by_start_us == {
        1682725898094377: "alltoall", 1682725898125052: "alltoall", 1682725898295662: "allreduce",
        1682725898348496: "allreduce", 1682725898585321: "allgather", 1682725898741096: "alltoall",
        1682725898854684: "alltoall", 1682725899131066: "allreduce", 1682725899146327: "allreduce",
        1682725899185890: "allgather"}
    # integer microsecond stamps stay exact
    assert comm.iloc[0]["start_ns"] == 1682725898094377000
    assert ps.steps["step"].tolist() == [551, 552]


def test_sampled_rank_fixture_family_alltoall_is_accepted():
    from conftest import run_script

    path = need_shared("fixtures", "kineto", "hta-timeline-sampled_rank-0.json.gz")
    doc = json.loads(run_script("collectives.py", str(path), "--family", "alltoall", "--json", check=0).stdout)
    rows = doc["collectives"]
    assert [(r["family"], r["count"]) for r in rows] == [("alltoall", 4)]
    # 30669 + 62783 + 67827 + 21124 us of the four all-to-all kernels
    assert rows[0]["sum_us"] == pytest.approx(182403.0)


def launch(corr, ts, ext=None, tid=9):
    args = {"correlation": corr, **({"External id": ext} if ext is not None else {})}
    return {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 9, "tid": tid, "ts": ts,
            "dur": 1, "args": args}


def host(name, ts, dur, ext=None, cat="cpu_op", tid=9, **args):
    a = {**({"External id": ext} if ext is not None else {}), **args}
    return {"ph": "X", "cat": cat, "name": name, "pid": 9, "tid": tid, "ts": ts, "dur": dur, "args": a}


def test_record_param_comms_linked_by_external_id(tmp_path):
    """Hand-made: each SendRecv kernel's family, group and bytes come from its launch's annotation."""
    doc = {"traceEvents": [
        # all_to_all: launch External id 77 -> record_param_comms 77 (Collective name, PG, sizes)
        host("record_param_comms", 10, 20, ext=77, **{
            "Collective name": "all_to_all", "Process Group Name": "3", "Process Group Description": "ulysses",
            "Process Group Ranks": "[0, 1, 2, 3]", "In msg nelems": 1024, "Out msg nelems": 1024,
            "dtype": "BFloat16"}),
        launch(1, 12, ext=77),
        kernel("ncclDevKernel_SendRecv(x)", 40, 5, stream=20, corr=1),
        # send: linked by External id although another annotation (nccl:all_reduce) also encloses it
        host("nccl:all_reduce", 50, 30, cat="user_annotation"),
        host("record_param_comms", 55, 10, ext=88, **{"Collective name": "send"}),
        launch(2, 60, ext=88),
        kernel("ncclDevKernel_SendRecv(x)", 90, 5, stream=20, corr=2),
        # no External id link: the innermost enclosing annotation on the launching thread wins
        host("nccl:all_gather", 100, 50, cat="user_annotation"),
        host("nccl:all_to_all", 110, 10, cat="user_annotation"),
        launch(3, 115, ext=999),
        kernel("ncclDevKernel_SendRecv(x)", 160, 5, stream=20, corr=3),
        # an annotation on another thread does not hold the launch: unclassified, kernel name fallback
        host("nccl:all_to_all", 200, 50, cat="user_annotation", tid=5),
        launch(4, 210),
        kernel("ncclDevKernel_SendRecv(x)", 260, 5, stream=20, corr=4),
        # the kernel's own Collective name wins over the annotation
        host("nccl:all_to_all", 300, 50, cat="user_annotation"),
        launch(5, 310),
        kernel("ncclDevKernel_AllReduce_Sum_f32(x)", 360, 5, stream=20, corr=5, **{"Collective name": "allreduce"}),
        # a compute kernel launched inside a comm annotation stays compute
        host("nccl:all_to_all", 400, 50, cat="user_annotation"),
        launch(6, 410),
        kernel("gemm", 460, 5, stream=7, corr=6),
    ], "distributedInfo": {"rank": 0, "world_size": 4}}
    ps = load_profiles([write(tmp_path / "t.json", doc)])
    ev = ps.events.sort_values("start_ns")
    assert ev["family"].tolist() == ["alltoall", "send", "alltoall", "other_comm", "allreduce", ""]
    assert ev["kind"].tolist() == ["comm"] * 5 + ["compute"]
    assert ev["group"].tolist() == ["3", "", "", "", "", ""]
    assert ev["bytes"].iloc[0] == 2048 and ps.groups["3"].role == "ulysses"
    assert ps.unclassified == {"ncclDevKernel_SendRecv without Collective name (all-to-all or send/recv?)": 1}


@pytest.mark.parametrize("where", ["kernel name", "kernel Collective name", "annotation Collective name"])
@pytest.mark.parametrize("bad", [["a"], {"x": 1}, 3])
def test_non_string_names_are_input_errors(tmp_path, where, bad):
    """A kernel name or a Collective name that is not a string is a one-line input error."""
    if where == "kernel name":
        events = [kernel(bad, 1, 1)]
    elif where == "kernel Collective name":
        events = [kernel("ncclDevKernel_SendRecv(x)", 2, 1, **{"Collective name": bad})]
    else:
        events = [host("record_param_comms", 1, 5, ext=1, **{"Collective name": bad}),
                  launch(1, 2, ext=1), kernel("ncclDevKernel_SendRecv(x)", 9, 1, corr=1)]
    with pytest.raises(InputError, match="expected a string"):
        load_profiles([write(tmp_path / "t.json", {"traceEvents": events})])


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


# --- issue 22: silent acceptance -----------------------------------------------------------------

def test_duplicated_kernels_are_counted_once_with_the_ascend_warning(tmp_path, capsys):
    events = [kernel("gemm", 10, 4), kernel("gemm", 10, 4), kernel("gemm", 20, 6), kernel("gemm", 20, 6, stream=8)]
    ps = load_profiles([write(tmp_path / "t.json", {"traceEvents": events})])
    # the copy of the first kernel goes; the one at ts 20 on another stream is another kernel
    assert ps.events["dur_ns"].tolist() == [4000, 6000, 6000]
    assert sorted(ps.events["stream"].tolist()) == ["7", "7", "8"]
    err = capsys.readouterr().err
    assert "1 duplicate row(s)" in err and "each kernel counted once" in err


def test_all_zero_durations_are_an_input_error(tmp_path):
    events = [kernel("gemm", 10, 0), kernel("ncclKernel_AllReduce", 12, 0, stream=9)]
    with pytest.raises(InputError, match="all 2 kernel durations are 0"):
        load_profiles([write(tmp_path / "t.json", {"traceEvents": events})])


def _stepped(steps):
    evs = [host(f"ProfilerStep#{n}", ts, dur, cat="user_annotation") for n, ts, dur in steps]
    return evs + [launch(11, 120), kernel("k1", 130, 5, corr=11)]


def test_a_step_written_twice_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match=r"ProfilerStep#2 appears 2 times \(starting at 100 us, 140 us\)"):
        load_profiles([write(tmp_path / "t.json", _stepped([(2, 100, 50), (2, 140, 50)]))])


def test_overlapping_steps_are_an_input_error(tmp_path):
    with pytest.raises(InputError, match=r"ProfilerStep#2 and ProfilerStep#3 overlap"):
        load_profiles([write(tmp_path / "t.json", _stepped([(2, 100, 50), (3, 140, 50)]))])
    ps = load_profiles([write(tmp_path / "u.json", _stepped([(2, 100, 40), (3, 140, 50)]))])  # touching: fine
    assert ps.events["step"].tolist() == [2]
    # up to 1 us of overlap is clock rounding, not a second capture
    ps = load_profiles([write(tmp_path / "v.json", _stepped([(2, 100, 40.5), (3, 140, 50)]))])
    assert ps.steps["step"].tolist() == [2]


def test_ranks_of_jobs_with_different_world_sizes_are_refused(tmp_path):
    for r, world in ((0, 2), (1, 8)):
        write(tmp_path / f"worker{r}.json",
              {"traceEvents": [kernel("gemm", 10 + r, 1)], "distributedInfo": {"rank": r, "world_size": world}})
    with pytest.raises(InputError, match="different jobs") as err:
        load_profiles([tmp_path])
    text = str(err.value)
    assert "world size 2: " in text and "worker0.json (rank 0)" in text
    assert "world size 8: " in text and "worker1.json (rank 1)" in text


def test_communication_matrix_that_is_a_folder_is_an_input_error(tmp_path):
    import shutil

    from conftest import ROOT

    src = ROOT / "tests" / "data" / "ascend_cann83" / "node0_23101_20251127201437501_ascend_pt"
    rank = tmp_path / src.name
    shutil.copytree(src, rank)
    matrix = rank / "ASCEND_PROFILER_OUTPUT" / "communication_matrix.json"
    if matrix.exists():
        matrix.unlink()
    matrix.mkdir()
    with pytest.raises(InputError, match="communication_matrix.json: is a folder"):
        load_profiles([rank])


def test_rank_outside_its_world_size_is_refused(tmp_path):
    path = write(tmp_path / "t.json", {"traceEvents": [kernel("gemm", 10, 1)], "distributedInfo": {"rank": 5, "world_size": 2}})
    with pytest.raises(InputError, match=r"rank 5 \(distributedInfo.rank\) is outside its job's world size 2"):
        load_profiles([path])
