"""Damaged inputs: the readers and the breakdown raise the project's own errors, never anything else."""

from __future__ import annotations

import gzip
import json
import shutil
import tempfile
from pathlib import Path

import pytest
from conftest import ROOT
from ditpar.analysis.breakdown import step_breakdown
from ditpar.errors import DitParError, InputError
from ditpar.readers import load_profiles
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

RANK0 = ROOT / "tests" / "data" / "ascend_cann83" / "node0_23101_20251127201437501_ascend_pt"
FILES = [
    "ASCEND_PROFILER_OUTPUT/kernel_details.csv",
    "ASCEND_PROFILER_OUTPUT/step_trace_time.csv",
    "ASCEND_PROFILER_OUTPUT/trace_view.json",
    "ASCEND_PROFILER_OUTPUT/communication.json",
    "profiler_metadata.json",
    "profiler_info_0.json",
]
# derandomize: the same examples on every run, so a test never decides by chance whether CI lands
SETTINGS = settings(max_examples=120, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow])

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=12,
)


def read_everything(path: Path) -> None:
    """What a tool does with a path: read it and break it down; only DitParError may escape."""
    try:
        step_breakdown(load_profiles([path]))
    except DitParError:
        pass


def damage_bytes(data: bytes, draw) -> bytes:
    how = draw(st.sampled_from(["truncate", "splice", "empty", "garbage", "drop-line"]))
    if how == "truncate":
        return data[: draw(st.integers(0, max(0, len(data) - 1)))]
    if how == "splice":
        at = draw(st.integers(0, len(data)))
        return data[:at] + draw(st.binary(min_size=1, max_size=12)) + data[at + draw(st.integers(0, 12)):]
    if how == "empty":
        return b""
    if how == "garbage":
        return draw(st.binary(max_size=64))
    lines = data.split(b"\n")
    del lines[draw(st.integers(0, len(lines) - 1))]
    return b"\n".join(lines)


def damage_csv(text: str, draw) -> str:
    rows = [r.split(",") for r in text.split("\r\n") if r]
    how = draw(st.sampled_from(["drop-column", "cell", "header-cell"]))
    if how == "drop-column":
        i = draw(st.integers(0, len(rows[0]) - 1))
        rows = [r[:i] + r[i + 1:] for r in rows]
    elif how == "cell":
        r = draw(st.integers(1, len(rows) - 1))
        c = draw(st.integers(0, len(rows[r]) - 1))
        rows[r][c] = draw(st.sampled_from(["", "N/A", "abc", "1e5", "-1", "9" * 30, "1.2.3", " ", "\t"]))
    else:
        c = draw(st.integers(0, len(rows[0]) - 1))
        rows[0][c] = draw(st.text(max_size=5))
    return "\r\n".join(",".join(r) for r in rows) + "\r\n"


def damage_json(doc, draw):
    """Replace one value somewhere in the document with an arbitrary JSON value."""
    if isinstance(doc, (dict, list)) and doc and draw(st.booleans()):
        keys = list(doc.keys()) if isinstance(doc, dict) else list(range(len(doc)))
        k = draw(st.sampled_from(keys))
        doc[k] = damage_json(doc[k], draw)
        return doc
    return draw(json_values)


@SETTINGS
@given(st.data())
def test_damaged_ascend_folder(data):
    with tempfile.TemporaryDirectory() as tmp:
        dst = Path(tmp) / RANK0.name
        shutil.copytree(RANK0, dst)
        target = dst / data.draw(st.sampled_from(FILES))
        raw = target.read_bytes()
        mode = data.draw(st.sampled_from(["bytes", "structure"]))
        if mode == "bytes":
            target.write_bytes(damage_bytes(raw, data.draw))
        elif target.suffix == ".csv":
            target.write_bytes(damage_csv(raw.decode(), data.draw).encode())
        else:
            target.write_text(json.dumps(damage_json(json.loads(raw), data.draw)))
        read_everything(dst)


def small_trace() -> dict:
    def k(name, ts, dur, stream, corr, **args):
        return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": ts, "dur": dur,
                "args": {"stream": stream, "correlation": corr, **args}}
    return {
        "schemaVersion": 1,
        "distributedInfo": {"rank": 0, "world_size": 2, "pg_config": [{"pg_name": "0", "pg_desc": "default_pg",
                                                                     "ranks": [0, 1]}]},
        "traceEvents": [
            {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 9, "tid": 9, "ts": 0, "dur": 100},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 9, "tid": 9, "ts": 5, "dur": 1,
             "args": {"correlation": 1}},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 9, "tid": 9, "ts": 6, "dur": 1,
             "args": {"correlation": 2}},
            k("gemm", 10.5, 20.25, 7, 1),
            k("ncclDevKernel_AllReduce_Sum_f32_RING_LL(x)", 12.0, 30.0, 20, 2, **{
                "Collective name": "allreduce", "In msg nelems": 10, "Out msg nelems": 10, "dtype": "Float",
                "Process Group Name": "0"}),
            {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoD", "pid": 0, "tid": 7, "ts": 50, "dur": 2,
             "args": {"stream": 7}},
        ],
        "baseTimeNanoseconds": 1700000000000000000,
    }


@SETTINGS
@given(st.data(), st.booleans())
def test_damaged_kineto_trace(data, gz):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / ("rank0.json.gz" if gz else "rank0.json")
        doc = small_trace()
        mode = data.draw(st.sampled_from(["bytes", "structure", "gzip-bytes"]))
        text = json.dumps(damage_json(doc, data.draw) if mode == "structure" else doc).encode()
        if mode == "bytes":
            text = damage_bytes(text, data.draw)
        blob = gzip.compress(text) if gz else text
        if mode == "gzip-bytes":
            blob = damage_bytes(blob, data.draw)
        path.write_bytes(blob)
        read_everything(path)


@pytest.mark.parametrize("key", ["name", "Collective name"])
@pytest.mark.parametrize("value", [["x"], {"a": 1}, 7, None])
def test_found_case_non_string_kernel_name(tmp_path, key, value):
    """Found by the fuzz above (once random): a kernel whose name was a list raised TypeError."""
    doc = small_trace()
    gemm = doc["traceEvents"][3]
    if key == "name":
        gemm["name"] = value
    else:
        gemm["args"]["Collective name"] = value
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps(doc))
    if value is None and key == "Collective name":
        load_profiles([path])  # an absent Collective name is allowed
        return
    with pytest.raises(InputError, match="expected a string"):
        load_profiles([path])


def test_deeply_nested_json_is_an_input_error(tmp_path):
    path = tmp_path / "deep.json"
    path.write_text('{"traceEvents": [' + "[" * 100000 + "]" * 100000 + "]}")
    read_everything(path)


def test_empty_and_profile_less_folders(tmp_path):
    read_everything(tmp_path)
    (tmp_path / "notes.txt").write_text("hello")
    (tmp_path / "sub").mkdir()
    read_everything(tmp_path)
