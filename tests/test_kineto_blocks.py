"""The typed block reader (msgspec) of Kineto traces against the general one (json, one event at a time)."""

from __future__ import annotations

import copy
import gzip
import json
import re

import pandas as pd
import pytest
from conftest import need_shared
from ditpar.readers import jsonstream
from ditpar.readers.kineto import trace as kineto

pytest.importorskip("msgspec")


def _both(path, monkeypatch):
    """(typed-block read, general read) of one trace; the block read must not have fallen back."""
    calls = []
    real = kineto._collect

    def general(p):
        calls.append(p)
        return real(p)

    monkeypatch.setattr(kineto, "_collect", general)
    fast = kineto.read_trace(path)
    fell_back = bool(calls)
    monkeypatch.setattr(kineto, "_collect_blocks", real)  # force the general reader
    slow = kineto.read_trace(path)
    return fast, slow, fell_back


def _same(a, b):
    pd.testing.assert_frame_equal(a.events, b.events)
    pd.testing.assert_frame_equal(a.steps, b.steps)
    assert (a.rank, a.rank_from, a.groups, a.unclassified) == (b.rank, b.rank_from, b.groups, b.unclassified)


@pytest.mark.parametrize("name", ["hta-nccl_data.json.gz", "hta-timeline-sampled_rank-0.json.gz"])
@pytest.mark.parametrize("chunk", [1 << 22, 4096])
def test_blocks_equal_the_general_reader_on_real_traces(tmp_path, monkeypatch, name, chunk):
    """Small buffers cut events inside strings and nested args: a wrong cut never decodes."""
    src = need_shared("fixtures", "kineto", name)
    path = tmp_path / "rank0.json"
    path.write_bytes(gzip.decompress(src.read_bytes()))
    monkeypatch.setattr(jsonstream, "_CHUNK", chunk)
    fast, slow, fell_back = _both(path, monkeypatch)
    assert not fell_back and len(fast.events) > 1000
    _same(fast, slow)


def _doc():
    kernel = {"ph": "X", "cat": "kernel", "name": "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*)",
              "pid": 0, "tid": 7, "ts": "#1712345678901234.567", "dur": "#12.5",
              "args": {"stream": 7, "correlation": 11, "Collective name": "allreduce",
                       "Process Group Name": "0", "In msg nelems": 1024, "Out msg nelems": 1024,
                       "dtype": "Float", "Process Group Ranks": "[0, 1]", "note": "a},{b"}}
    launch = {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 9,
              "ts": 1712345678901200, "dur": 3, "args": {"correlation": 11, "External id": 5}}
    step = {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#3", "pid": 1, "tid": 9,
            "ts": 1712345678900000, "dur": 5000}
    gemm = {"ph": "X", "cat": "kernel", "name": "sm90_gemm", "pid": 0, "tid": 7,
            "ts": "#1712345678901300.125", "dur": 40, "args": {"stream": 7, "correlation": 12}}
    other = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 9, "ts": 1712345678901100,
             "dur": 2, "args": {"Input Dims": [[2, 3], [3, 4]], "nested": {"x": {"y": "},"}}}}
    return {"schemaVersion": 1, "distributedInfo": {"rank": 0},
            "traceEvents": [step, other, launch, kernel, other, gemm, {"ph": "M", "name": "process_name"}]}


@pytest.mark.parametrize("change, falls_back", [
    (lambda d: None, False),
    (lambda d: d["traceEvents"][3].update(ts="1712345678901234.567"), True),  # a string stamp
    (lambda d: d["traceEvents"][1].update(name=None), True),                  # null name off the GPU
    (lambda d: d["traceEvents"][3].update(pid=0.5), True),                   # a float pid
    (lambda d: d["traceEvents"][3]["args"].update(correlation=True), True),  # a bool correlation
    (lambda d: d["traceEvents"][3]["args"].pop("stream"), False),            # stream from tid
    (lambda d: d["traceEvents"].insert(2, 42), True),                        # a number among events
    # other phases are skipped whole by both readers, whatever their members hold
    (lambda d: d["traceEvents"].insert(1, {"ph": "s", "id": 7, "cat": "ac2g", "name": None, "ts": "x",
                                          "pid": [1], "args": 3}), False),
    (lambda d: d["traceEvents"].insert(1, {"ph": "M", "name": "process_name", "args": {"name": 5}}), False),
    (lambda d: d["traceEvents"].insert(1, {"ph": "Q", "name": "no such phase"}), True),  # the general way
    (lambda d: d["traceEvents"].insert(1, {"name": "no phase", "cat": "cpu_op"}), True),
])
def test_unusual_values_give_what_the_general_reader_gives(tmp_path, monkeypatch, change, falls_back):
    doc = copy.deepcopy(_doc())
    change(doc)
    path = tmp_path / "rank0.json"
    # "#..." strings become JSON numbers written exactly (a Python float would lose the digits)
    path.write_text(re.sub(r'"#([-0-9.eE]+)"', r"\1", json.dumps(doc, indent=1)))
    fast, slow, fell_back = _both(path, monkeypatch)
    assert fell_back == falls_back
    _same(fast, slow)
    kernels = fast.events[fast.events["name"].str.startswith("nccl")]
    assert kernels["start_ns"].tolist() == [1712345678901234567]  # exact, whichever reader


@pytest.mark.parametrize("change, phrase", [
    (lambda d: d["traceEvents"][5].update(args=[1, 2]), "'args' is a list"),
    (lambda d: d["traceEvents"][5].pop("dur"), "no 'dur'"),
    (lambda d: d["traceEvents"][5].pop("ts"), "no 'ts'"),
    (lambda d: d["traceEvents"][0].pop("dur"), "no 'dur'"),  # ProfilerStep#3 without its span
])
def test_kernel_args_not_an_object_or_no_dur_is_an_error_of_both_readers(tmp_path, monkeypatch, change, phrase):
    """Issue 22: such a kernel was dropped or timed 0 ns; both readers now name the event (number 5)."""
    from ditpar.errors import InputError

    doc = copy.deepcopy(_doc())
    change(doc)
    path = tmp_path / "rank0.json"
    path.write_text(re.sub(r'"#([-0-9.eE]+)"', r"\1", json.dumps(doc, indent=1)))
    with pytest.raises(InputError, match=re.escape(phrase)) as fast:
        kineto.read_trace(path)
    monkeypatch.setattr(kineto, "_collect_blocks", kineto._collect)  # force the general reader
    with pytest.raises(InputError, match=re.escape(phrase)) as slow:
        kineto.read_trace(path)
    assert str(fast.value) == str(slow.value)
    assert "event 5 " in str(fast.value) or "event 0 " in str(fast.value)
