"""Kineto reader, pinned on tiny hand-written traces: each expected value worked out by hand from the JSON.

Both readers run on every trace (the typed msgspec blocks without falling back, and the general one),
so a wrong answer or a needless fallback of either one fails here.
"""

from __future__ import annotations

import gc
import json
import re

import numpy as np
import pandas as pd
import pytest
from ditpar.errors import InputError
from ditpar.readers.kineto import trace as kineto

BASE = 1_000_000_000  # baseTimeNanoseconds of the traces below (1 s)


def _k(name, ts, dur, stream=7, corr=None, cat="kernel", pid=0, **args):
    a = {"stream": stream, **args}
    if corr is not None:
        a["correlation"] = corr
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": 99, "ts": ts, "dur": dur, "args": a}


def _launch(corr, ts, ext=None, tid=9, cat="cuda_runtime"):
    args = {"correlation": corr, **({"External id": ext} if ext is not None else {})}
    return {"ph": "X", "cat": cat, "name": "cudaLaunchKernel", "pid": 9, "tid": tid, "ts": ts, "dur": 1, "args": args}


def _host(name, ts, dur=None, cat="user_annotation", tid=9, **args):
    ev = {"ph": "X", "cat": cat, "name": name, "pid": 9, "tid": tid, "ts": ts, "args": args}
    if dur is not None:
        ev["dur"] = dur
    return ev


def _write(tmp_path, events, name="t.json", **top):
    path = tmp_path / name
    path.write_text(json.dumps({"traceEvents": events, **top}))
    return path


def _both(path):
    """(typed blocks, general) readings; the typed one must not fall back (it raises if it would)."""
    return kineto._read(path, kineto._collect_blocks), kineto._read(path, kineto._collect)


def _each(path):
    return list(_both(path))


def _vals(series):
    """A nullable column as plain ints, None where missing."""
    return [None if pd.isna(x) else int(x) for x in series]


def _errors(path):
    """The message of each reader (both must refuse the trace with the same message)."""
    out = []
    for collect in (kineto._collect_blocks, kineto._collect):
        with pytest.raises(InputError) as err:
            kineto._read(path, collect)
        out.append(str(err.value))
    return out


def test_gpu_activities_base_time_device_stream_and_kinds(tmp_path):
    events = [
        _k(" gemm_a ", 10, 2.5, stream=7, pid=3),
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD", "pid": 3, "tid": 21, "ts": 20, "dur": 1},  # tid
        _k("Memset (Device)", 30, 0.5, cat="gpu_memset", stream="s9"),
        {"ph": "i", "cat": "kernel", "name": "instant", "pid": 3, "tid": 7, "ts": 40, "s": "t"},  # not X: skipped
        _k("gemm_on_cpu", 50, 3, cat="cpu_op"),  # a host op named like a kernel: not a GPU activity
    ]
    for r in _each(_write(tmp_path, events, baseTimeNanoseconds=BASE, distributedInfo={"rank": 0})):
        ev = r.events
        assert ev["name"].tolist() == ["gemm_a", "Memcpy HtoD", "Memset (Device)"]
        assert ev["start_ns"].tolist() == [BASE + 10_000, BASE + 20_000, BASE + 30_000]
        assert ev["dur_ns"].tolist() == [2500, 1000, 500]
        assert ev["device"].tolist() == [3, 3, 0]
        assert ev["stream"].tolist() == ["7", "21", "s9"]
        assert ev["kind"].tolist() == ["compute", "other", "other"]
        assert ev["rank"].tolist() == [0, 0, 0]
        assert (r.rank, r.rank_from) == (0, "distributedInfo.rank")
        # no ProfilerStep: one window over all activities, step NA, rank 0
        assert r.steps["rank"].tolist() == [0] and r.steps["step"].isna().all()
        assert r.steps[["start_ns", "end_ns"]].values.tolist() == [[BASE + 10_000, BASE + 30_500]]


def test_no_base_time_means_stamps_as_written(tmp_path):
    for r in _each(_write(tmp_path, [_k("g", 7, 1)])):
        assert r.events["start_ns"].tolist() == [7000]
        assert r.world_size is None and (r.rank, r.rank_from) == (None, "unknown")


@pytest.mark.parametrize("base, ok", [(0, True), (2**62 - 1, True), (2**62, False), (-1, False),
                                      (5.0, False), (True, False), ("7", False)])
def test_base_time_range(tmp_path, base, ok):
    path = _write(tmp_path, [_k("g", 7, 1)], baseTimeNanoseconds=base)
    if ok:
        for r in _each(path):
            assert r.events["start_ns"].tolist() == [base + 7000]
    else:
        for msg in _errors(path):
            shown = repr(str(base) if isinstance(base, float) else base)  # floats are read as their text
            assert msg == f"{path}: baseTimeNanoseconds: expected a non-negative integer, got {shown}"


@pytest.mark.parametrize("dist, name, rank, source", [
    ({"rank": 3}, "t.json", 3, "distributedInfo.rank"),
    ({"rank": 0}, "rank5.json", 0, "distributedInfo.rank"),
    ({"rank": -1}, "rank5.json", 5, "file name rank5.json"),
    ({"rank": True}, "x_Rank-12.json", 12, "file name x_Rank-12.json"),
    ([1, 2], "rank_4.json", 4, "file name rank_4.json"),
    (None, "trace.json", None, "unknown"),
])
def test_rank_from_distributed_info_else_the_file_name(tmp_path, dist, name, rank, source):
    top = {} if dist is None else {"distributedInfo": dist}
    for r in _each(_write(tmp_path, [_k("g", 7, 1)], name=name, **top)):
        assert (r.rank, r.rank_from) == (rank, source)


def test_rank_above_the_limit_is_an_input_error(tmp_path):
    path = _write(tmp_path, [_k("g", 7, 1)], distributedInfo={"rank": 2**20})
    for msg in _errors(path):
        assert "distributedInfo.rank" in msg and "1048576" in msg


@pytest.mark.parametrize("size, expect", [(None, None), (1, 1), (4, 4), (2**31, 2**31), (0, "bad"),
                                          (2**31 + 1, "bad"), ("4", "bad"), (2.0, "bad")])
def test_world_size(tmp_path, size, expect):
    path = _write(tmp_path, [_k("g", 7, 1)], distributedInfo={"rank": 0, "world_size": size})
    if expect == "bad":
        for msg in _errors(path):
            shown = repr(str(size) if isinstance(size, float) else size)  # floats are read as their text
            assert msg == f"{path}: distributedInfo.world_size: expected a positive integer, got {shown}"
    else:
        for r in _each(path):
            assert r.world_size == expect


def test_world_size_without_distributed_info_object(tmp_path):
    for r in _each(_write(tmp_path, [_k("g", 7, 1)], distributedInfo=[{"world_size": 0}])):
        assert r.world_size is None


def _stepped(steps, launches, kernels, **top):
    evs = [_host(f"ProfilerStep#{n}", ts, dur) for n, ts, dur in steps]
    return evs + [_launch(c, ts) for c, ts in launches] + kernels


def test_step_of_each_kernel_at_the_span_boundaries(tmp_path):
    """Step 1 is [100, 150) us, step 2 [150, 200) us (touching). A launch at 100 is in step 1, at 150 in
    step 2, at 200 in none (the span's end is outside), at 99 in none, before any step."""
    events = _stepped([(2, 150, 50), (1, 100, 50)],  # written out of time order
                      [(11, 100), (12, 150), (13, 200), (14, 99), (12, 120)],  # a second launch of 12: first wins
                      [_k("a", 300, 5, corr=11), _k("b", 310, 5, corr=12), _k("c", 320, 5, corr=13),
                       _k("d", 330, 5, corr=14), _k("e", 340, 5)])
    for r in _each(_write(tmp_path, events, baseTimeNanoseconds=BASE)):
        assert _vals(r.events["step"]) == [1, 2, None, None, None]
        assert r.steps.values.tolist() == [[0, 1, BASE + 300_000, BASE + 305_000],
                                           [0, 2, BASE + 310_000, BASE + 315_000]]
        assert list(r.steps.columns) == ["rank", "step", "start_ns", "end_ns"]


def test_steps_without_launches_or_without_kernels_inside_give_one_window(tmp_path):
    no_launch = _stepped([(1, 100, 50)], [], [_k("a", 300, 5, corr=11), _k("b", 400, 2)])
    outside = _stepped([(1, 100, 50)], [(11, 160)], [_k("a", 300, 5, corr=11), _k("b", 400, 2)])
    for events in (no_launch, outside):
        for r in _each(_write(tmp_path, events)):
            assert r.events["step"].isna().all()
            assert r.steps["rank"].tolist() == [0] and r.steps["step"].isna().all()
            assert r.steps[["start_ns", "end_ns"]].values.tolist() == [[300_000, 402_000]]


def test_step_names_and_categories_taken(tmp_path):
    events = [_host("ProfilerStep#1", 100, 50, cat="cpu_op"), _host("ProfilerStep#2", 150, 50, cat=None),
              _host("ProfilerStep#3", 200, 50, cat="python_function"),   # another category: not a step
              _host("ProfilerStep#4x", 250, 50),                         # not a step name
              _launch(11, 120), _launch(12, 160), _launch(13, 210), _launch(14, 260),
              _k("a", 300, 1, corr=11), _k("b", 310, 1, corr=12), _k("c", 320, 1, corr=13), _k("d", 330, 1, corr=14)]
    events[1].pop("cat")
    for r in _each(_write(tmp_path, events)):
        assert _vals(r.events["step"]) == [1, 2, None, None]


def test_steps_launches_and_base_time_together_are_exact(tmp_path):
    base = 1_700_000_000_000_000_000
    events = _stepped([(5, 1_000_000, 10)], [(1, 1_000_005)], [_k("a", 1_000_020, 2, corr=1)])
    for r in _each(_write(tmp_path, events, baseTimeNanoseconds=base)):
        assert _vals(r.events["step"]) == [5]
        assert r.steps.values.tolist() == [[0, 5, base + 1_000_020_000, base + 1_000_022_000]]


def test_step_overlap_tolerance_is_exactly_one_microsecond(tmp_path):
    ok = _stepped([(2, 100, 41), (3, 140, 50)], [(11, 120)], [_k("a", 300, 5, corr=11)])
    for r in _each(_write(tmp_path, ok)):
        assert _vals(r.events["step"]) == [2]
    bad = _stepped([(2, 100, 41.001), (3, 140, 50)], [(11, 120)], [_k("a", 300, 5, corr=11)])
    path = _write(tmp_path, bad, name="bad.json")
    for msg in _errors(path):
        assert msg == (f"{path}: ProfilerStep#2 and ProfilerStep#3 overlap (140 us < 141 us); steps of one "
                       f"capture follow one another")


def test_the_first_overlap_is_named(tmp_path):
    steps = [(1, 0, 50), (2, 40, 60), (3, 100, 50), (4, 140, 60), (5, 300, 10)]
    path = _write(tmp_path, _stepped(steps, [(11, 120)], [_k("a", 300, 5, corr=11)]))
    for msg in _errors(path):
        assert "ProfilerStep#1 and ProfilerStep#2 overlap (40 us < 50 us)" in msg
    # the second and third of three steps overlap; the first pair does not
    steps = [(1, 0, 50), (2, 60, 60), (3, 100, 50)]
    path = _write(tmp_path, _stepped(steps, [(11, 120)], [_k("a", 300, 5, corr=11)]), name="u.json")
    for msg in _errors(path):
        assert "ProfilerStep#2 and ProfilerStep#3 overlap (100 us < 120 us)" in msg


def test_the_first_step_written_twice_is_named(tmp_path):
    steps = [(7, 0, 50), (5, 100, 50), (7, 200, 50), (5, 300, 50), (7, 400, 50)]
    path = _write(tmp_path, _stepped(steps, [(11, 120)], [_k("a", 300, 5, corr=11)]))
    for msg in _errors(path):
        assert msg == (f"{path}: ProfilerStep#7 appears 3 times (starting at 0 us, 200 us, 400 us); expected one "
                       f"span per step (two captures written into one trace?)")


@pytest.mark.parametrize("what, events, where", [
    ("kernel", [_k("a", 5_000_000_000_000_000, 1)], "GPU activity"),
    ("step", _stepped([(1, 5_000_000_000_000_000, 1)], [(11, 1)], [_k("a", 3, 1, corr=11)]), "ProfilerStep"),
    ("launch", _stepped([(1, 0, 10)], [(11, 5_000_000_000_000_000)], [_k("a", 3, 1, corr=11)]), "launch"),
])
def test_stamps_out_of_range_are_input_errors(tmp_path, what, events, where):
    path = _write(tmp_path, events)
    for msg in _errors(path):
        assert msg == f"{path}: {where}: entry 0: start 5000000000000000000 ns is out of range (over 2**62 ns)"


def test_a_launch_without_its_stamp_is_an_input_error(tmp_path):
    events = _stepped([(1, 0, 10)], [(11, 5)], [_k("a", 3, 1, corr=11)])
    del events[1]["ts"]
    for msg in _errors(_write(tmp_path, events)):
        assert "launch ts" in msg


def test_launches_without_usable_args_are_ignored(tmp_path):
    events = _stepped([(1, 0, 100)], [(11, 5)], [_k("a", 200, 1, corr=11), _k("b", 210, 1, corr=12),
                                                  _k("c", 220, 1, corr=13)])
    events += [{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 9, "tid": 9, "ts": 6, "dur": 1,
                "args": None},
               {"ph": "X", "cat": "cuda_driver", "name": "cuLaunchKernel", "pid": 9, "tid": 9, "ts": 7, "dur": 1},
               {"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpy", "pid": 9, "tid": 9, "ts": 8, "dur": 1,
                "args": {"External id": 4}},
               _launch(12, 9, cat="cuda_driver"),
               {"ph": "f", "cat": "cuda_runtime", "name": "flow", "pid": 9, "tid": 9, "ts": 8, "id": 13}]
    for r in _each(_write(tmp_path, events)):
        assert _vals(r.events["step"]) == [1, 1, None]


def test_duplicates_dropped_and_the_first_named_in_the_warning(tmp_path, capsys):
    events = [_k("a", 10, 4, corr=1), _k("a", 10, 4, corr=1), _k("b", 20, 6, corr=2), _k("b", 20, 6, corr=2),
              _k("c", 30, 1, corr=3)]
    events = _stepped([(1, 0, 100)], [(1, 5), (2, 6), (3, 200)], events)
    path = _write(tmp_path, events)
    for collect in (kineto._collect_blocks, kineto._collect):
        r = kineto._read(path, collect)
        assert r.events["name"].tolist() == ["a", "b", "c"]
        assert _vals(r.events["step"]) == [1, 1, None]  # the correlations follow the rows kept
        err = capsys.readouterr().err
        assert "2 duplicate row(s)" in err and "(first at kernel 'a' at ts 10 us)" in err


def test_message_bytes(tmp_path):
    nc = "ncclDevKernel_AllGather_RING_LL(x)"
    events = [
        _k(nc, 10, 1, **{"Collective name": "allgather", "In msg nelems": 10, "Out msg nelems": 40, "dtype": "Half"}),
        _k(nc, 20, 1, **{"Collective name": "allgather", "In msg nelems": 30, "dtype": "Float"}),
        _k(nc, 30, 1, **{"Collective name": "allgather", "In msg nelems": 30, "dtype": "NoSuchType"}),
        _k("gemm", 40, 1, **{"In msg nelems": 30, "dtype": "Float"}),   # not a collective: no bytes
    ]
    for r in _each(_write(tmp_path, events)):
        assert _vals(r.events["bytes"]) == [80, 120, None, None]


def test_dtype_sizes():
    """C types by numpy's item sizes; the others by the bit count in their name (complex: two parts)."""
    c_types = {"Float": np.float32, "Double": np.float64, "Half": np.float16, "Byte": np.uint8, "Char": np.int8,
               "Short": np.int16, "Int": np.int32, "Long": np.int64, "Bool": np.bool_,
               "ComplexFloat": np.complex64, "ComplexDouble": np.complex128}
    expect = {k: np.dtype(v).itemsize for k, v in c_types.items()}
    for name in ("BFloat16", "UInt16", "UInt32", "UInt64", "Float8_e4m3fn", "Float8_e5m2", "Float8_e4m3fnuz",
                 "Float8_e5m2fnuz", "QInt8", "QUInt8", "QInt32"):
        expect[name] = int(re.search(r"\d+", name).group()) // 8
    expect["ComplexHalf"] = 2 * expect["Half"]
    assert kineto.DTYPE_BYTES == expect


SR = "ncclDevKernel_SendRecv(x)"


def test_annotations_fill_what_the_kernel_lacks(tmp_path):
    events = [
        # 1: linked by External id to an annotation on another thread that does not enclose the launch
        _host("record_param_comms", 500, 10, cat="cpu_op", tid=3, **{
            "External id": 77, "Collective name": "all_to_all", "Process Group Name": "4",
            "In msg nelems": 8, "Out msg nelems": 8, "dtype": "Float"}),
        _launch(1, 12, ext=77),
        _k(SR, 40, 5, corr=1),
        # 2: the kernel's own group and In size stay; the annotation's group is not taken
        _host("nccl:all_to_all", 50, 30, **{"Process Group Name": "5", "Process Group Description": "ulysses",
                                            "In msg nelems": 2, "Out msg nelems": 2, "dtype": "Half"}),
        _launch(2, 60),
        _k(SR, 90, 5, corr=2, **{"Process Group Name": "6", "In msg nelems": 100, "dtype": "Float"}),
        # 3: launched exactly at the annotation's start; 4: exactly at its end (both inside)
        _host("nccl:all_gather", 100, 20),
        _launch(3, 100),
        _launch(4, 120),
        _k(SR, 130, 5, corr=3),
        _k(SR, 140, 5, corr=4),
        # 5: an annotation without dur is a point: a launch at its stamp is inside
        _host("nccl:all_reduce", 200),
        _launch(5, 200),
        _k(SR, 210, 5, corr=5),
        # 6: the same thread holds annotations, none around the launch; 7: no launch at all
        _launch(6, 300),
        _k(SR, 310, 5, corr=6),
        _k(SR, 320, 5, corr=7),
        # a record_param_comms without Collective name and an nccl: op on a python thread name nothing
        _host("record_param_comms", 400, 50, cat="cpu_op"),
        _host("nccl:all_gather", 400, 50, cat="python_function"),
        _launch(8, 410),
        _k(SR, 420, 5, corr=8),
        # 9: the only Out size known: the annotation's sizes are not taken (the kernel has one)
        _host("nccl:all_to_all", 500, 30, tid=11, **{"In msg nelems": 1, "Out msg nelems": 1, "dtype": "Float"}),
        _launch(9, 510, tid=11),
        _k(SR, 520, 5, corr=9, **{"Out msg nelems": 3, "dtype": "Half"}),
    ]
    for r in _each(_write(tmp_path, events)):
        ev = r.events
        assert ev["family"].tolist() == ["alltoall", "alltoall", "allgather", "allgather", "allreduce",
                                         "other_comm", "other_comm", "other_comm", "alltoall"]
        assert ev["group"].tolist() == ["4", "6", "", "", "", "", "", "", ""]
        assert _vals(ev["bytes"]) == [32, 400, None, None, None, None, None, None, 6]
        assert r.groups["4"].role == "" and r.groups["4"].ranks == ()
        assert "5" not in r.groups and r.groups["6"].role == ""


def test_annotation_group_completes_the_groups(tmp_path):
    events = [_host("nccl:all_to_all", 50, 30, **{"Process Group Name": "5", "Process Group Description": "ulysses",
                                                  "Process Group Ranks": "[0, 2, -1]"}),
              _launch(2, 60), _k(SR, 90, 5, corr=2)]
    for r in _each(_write(tmp_path, events)):
        assert r.events["group"].tolist() == ["5"]
        assert (r.groups["5"].role, r.groups["5"].ranks) == ("ulysses", (0, 2, -1))


def test_record_param_comms_with_args_and_only_a_group_name(tmp_path):
    events = [_host("record_param_comms", 10, 20, cat="cpu_op", **{"External id": 3, "Collective name": "send",
                                                                  "Process Group Name": 8}),
              _launch(1, 12, ext=3), _k(SR, 40, 5, corr=1)]
    for r in _each(_write(tmp_path, events)):
        assert r.events["family"].tolist() == ["send"] and r.events["group"].tolist() == ["8"]
        assert (r.groups["8"].role, r.groups["8"].ranks) == ("", ())


def test_groups_from_pg_config_then_kernel_args(tmp_path):
    dist = {"rank": 0, "pg_config": [
        "not an object", {"pg_desc": "no name"},
        {"pg_name": "0", "pg_desc": "default_pg", "ranks": [0, True, "x", 1]},
        {"pg_name": 1, "ranks": "0,1"},
    ]}
    nc = "ncclDevKernel_AllReduce_Sum_f32(x)"
    events = [_k(nc, 10, 1, **{"Collective name": "allreduce", "Process Group Name": "0",
                               "Process Group Description": "from args", "Process Group Ranks": "[5]"}),
              _k(nc, 20, 1, **{"Collective name": "allreduce", "Process Group Name": "7",
                               "Process Group Description": "tp", "Process Group Ranks": [2, 3]}),
              _k(nc, 30, 1, **{"Collective name": "allreduce", "Process Group Name": "7",
                               "Process Group Description": "second", "Process Group Ranks": "[9]"})]
    for r in _each(_write(tmp_path, events, distributedInfo=dist)):
        assert sorted(r.groups) == ["0", "1", "7"]
        assert (r.groups["0"].role, r.groups["0"].ranks) == ("default_pg", (0, 1))
        assert (r.groups["1"].role, r.groups["1"].ranks) == ("", ())
        assert (r.groups["7"].role, r.groups["7"].ranks) == ("tp", (2, 3))


def test_a_trace_without_gpu_activities(tmp_path):
    for r in _each(_write(tmp_path, [_host("ProfilerStep#1", 0, 10), _launch(1, 2)])):
        assert r.events.empty and r.steps.empty
        assert list(r.steps.columns) == ["rank", "step", "start_ns", "end_ns"]


def test_clip():
    assert kineto._clip("a" * 38) == "'" + "a" * 38 + "'"
    assert kineto._clip("a" * 39) == "'" + "a" * 36 + "..."


def test_cycle_collector_paused_while_reading_and_restored():
    assert gc.isenabled()
    with kineto._no_cycle_collection():
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with kineto._no_cycle_collection():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_a_pid_that_is_not_an_integer_gives_no_device(tmp_path):
    for r in _each(_write(tmp_path, [_k("g", 7, 1, pid="gpu1"), _k("h", 8, 1, pid=2)])):
        assert _vals(r.events["device"]) == [None, 2]
    r = kineto.read_trace(_write(tmp_path, [_k("g", 7, 1, pid=0.5)], name="u.json"))  # the general way
    assert _vals(r.events["device"]) == [None] and r.events["start_ns"].tolist() == [7000]


@pytest.mark.parametrize("chunk", [1 << 22, 300, 120])
@pytest.mark.parametrize("bad_at", [4, 9])
def test_the_typed_reader_numbers_events_as_the_general_one(tmp_path, monkeypatch, chunk, bad_at):
    """Events decoded in blocks and one at a time (small buffers mix both) keep their file positions."""
    from ditpar.readers import jsonstream

    events = [_k(f"k{i}", 10 + i, 1) for i in range(12)]
    events[bad_at] = _host("ProfilerStep#3", 5)  # a step without its span
    path = _write(tmp_path, events)
    monkeypatch.setattr(jsonstream, "_CHUNK", chunk)
    fast, slow = _errors(path)
    assert fast == slow == f"{path}: event {bad_at} (ProfilerStep#3): no 'dur'; a step without its span cannot hold kernels"


def test_message_bytes_of_a_lone_collective(tmp_path):
    one = _k("ncclDevKernel_AllGather_RING_LL(x)", 10, 1,
             **{"Collective name": "allgather", "In msg nelems": 3, "Out msg nelems": 12, "dtype": "BFloat16"})
    for r in _each(_write(tmp_path, [one])):
        assert _vals(r.events["bytes"]) == [24]


def test_event_structs_stay_off_the_cycle_collector():
    """Millions of decoded events hold no cycles: none of their structs is tracked by the collector."""
    msgspec = pytest.importorskip("msgspec")
    from ditpar.readers.kineto import events as ke

    text = b'[{"ph":"X","cat":"kernel","name":"k","ts":1,"dur":2,"args":{"stream":7,"Process Group Ranks":[0,1]}},{"ph":"M","name":"x"}]'
    x, m = msgspec.json.decode(text, type=list[ke.AnyEvent])
    assert isinstance(x, ke.Event) and isinstance(m, ke.OtherPhase) and isinstance(x.args, ke.Args)
    assert x.args.pg_ranks == [0, 1]  # a list inside: a tracked struct would be tracked for it
    assert not any(gc.is_tracked(o) for o in (x, m, x.args, ke.NO_ARGS))


def test_kineto_events_exports():
    namespace: dict = {}
    exec("from ditpar.readers.kineto.events import *", namespace)
    assert sorted(k for k in namespace if not k.startswith("__")) == ["AnyEvent", "Args", "Event", "NO_ARGS", "UNSET"]


def test_a_launch_external_id_that_is_a_bool_links_to_nothing(tmp_path):
    events = [_host("record_param_comms", 500, 10, cat="cpu_op", tid=3, **{"External id": 1, "Collective name": "send"}),
              _host("nccl:all_to_all", 10, 20), _launch(1, 12), _k(SR, 40, 5, corr=1)]
    events[2]["args"]["External id"] = True  # not an integer: the enclosing annotation decides
    path = _write(tmp_path, events)
    for r in (kineto.read_trace(path), kineto._read(path, kineto._collect)):
        assert r.events["family"].tolist() == ["alltoall"]


def test_annotations_are_not_read_when_no_kernel_needs_them(tmp_path):
    events = [_host("nccl:all_to_all", "later", 20), _launch(1, 12), _k("gemm", 40, 5, corr=1)]
    for r in _each(_write(tmp_path, events)):
        assert r.events["name"].tolist() == ["gemm"]


# --- survivors of the full run (issue 29, third round) ---

def test_rank_0_from_the_file_name(tmp_path):
    for r in _each(_write(tmp_path, [_k("g", 7, 1)], name="trace_rank0.json")):
        assert (r.rank, r.rank_from) == (0, "file name trace_rank0.json")


def test_profiler_step_0_holds_its_kernels(tmp_path):
    """ProfilerStep#0 [100, 150) and #1 [150, 200) us: launches at 110 and 160 put kernel a in step 0, b in 1."""
    events = _stepped([(0, 100, 50), (1, 150, 50)], [(11, 110), (12, 160)],
                      [_k("a", 300, 5, corr=11), _k("b", 310, 5, corr=12)])
    for r in _each(_write(tmp_path, events)):
        assert _vals(r.events["step"]) == [0, 1]
        assert r.steps.values.tolist() == [[0, 0, 300_000, 305_000], [0, 1, 310_000, 315_000]]


def test_the_first_repeated_step_in_time_is_named_and_three_starts_shown(tmp_path):
    two = _write(tmp_path, _stepped([(7, 0, 50), (5, 100, 50), (7, 200, 50), (5, 300, 50)], [(11, 120)],
                                    [_k("a", 300, 5, corr=11)]), "two.json")
    for msg in _errors(two):   # 7 and 5 both repeat; 7 comes first in time
        assert msg.startswith(f"{two}: ProfilerStep#7 appears 2 times (starting at 0 us, 200 us);")
    four = _write(tmp_path, _stepped([(3, 0, 50), (3, 100, 50), (3, 200, 50), (3, 300, 50)], [(11, 120)],
                                     [_k("a", 300, 5, corr=11)]), "four.json")
    for msg in _errors(four):
        assert msg.startswith(f"{four}: ProfilerStep#3 appears 4 times (starting at 0 us, 100 us, 200 us);")


def _general(path):
    """read_trace (the typed reading falls back on a value of another type) and the general reader."""
    return [kineto.read_trace(path), kineto._read(path, kineto._collect)]


def test_an_annotation_whose_args_are_not_an_object_still_names_the_collective(tmp_path):
    # nccl:all_reduce [100, 120) us with "args": 5 (no members): the SendRecv kernel launched at 110 inside it
    # takes all_reduce from its name
    note = {"ph": "X", "cat": "user_annotation", "name": "nccl:all_reduce", "pid": 9, "tid": 9, "ts": 100,
            "dur": 20, "args": 5}
    for r in _general(_write(tmp_path, [note, _launch(1, 110), _k(SR, 130, 5, corr=1)])):
        assert r.events["family"].tolist() == ["allreduce"] and r.events["group"].tolist() == [""]


def test_a_point_annotation_does_not_hold_a_launch_one_us_later(tmp_path):
    # nccl:all_gather at 200 without dur is the point [200, 200]: a launch at 201 is outside it
    events = [_host("nccl:all_gather", 200), _launch(1, 201), _k(SR, 210, 5, corr=1),
              _host("nccl:all_reduce", 300), _launch(2, 300), _k(SR, 310, 5, corr=2)]
    for r in _each(_write(tmp_path, events)):
        assert r.events["family"].tolist() == ["other_comm", "allreduce"]


def test_a_launch_on_a_thread_without_annotations(tmp_path):
    # the annotation is on thread 9, the launch on thread 4 (no External id): nothing encloses it
    events = [_host("nccl:all_gather", 100, 50), _launch(1, 110, tid=4), _k(SR, 130, 5, corr=1)]
    for r in _each(_write(tmp_path, events)):
        assert r.events["family"].tolist() == ["other_comm"]


def test_an_event_whose_category_is_not_text_is_skipped(tmp_path):
    odd = [{"ph": "X", "cat": ["kernel"], "name": "x", "pid": 0, "tid": 1, "ts": 5, "dur": 1},
           {"ph": "X", "cat": 5, "name": "y", "pid": 0, "tid": 1, "ts": 6, "dur": 1}]
    for r in _general(_write(tmp_path, odd + [_k("gemm", 7, 1)])):
        assert r.events["name"].tolist() == ["gemm"]
