"""torch_npu text reader, pinned on tiny hand-written rank folders: each expected value worked out by hand."""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pytest
from ditpar.core.profile import BYTES_MESSAGE, BYTES_TRANSIT
from ditpar.errors import IncompleteRankError, InputError
from ditpar.readers.ascend import text as ascend

HEADER = ["Step Id", "Device_id", "Stream ID", "Name", "Type", "Accelerator Core", "Start Time(us)", "Duration(us)"]
T0 = "1764246877073569"  # an absolute microsecond stamp (needs exact parsing)
AR = "hcom_allReduce__123_0_1"  # communicator 123, op index 0


def _row(step, dev, stream, name, typ, core, start, dur):
    return [str(step), str(dev), str(stream), name, typ, core, start, dur]


def _rank(tmp_path, rows, header=HEADER, name="rank_ascend_pt", trace=None, comm=None, step_trace=None,
          info=None, meta=None, matrix=None):
    rank = tmp_path / name
    out = rank / "ASCEND_PROFILER_OUTPUT"
    out.mkdir(parents=True)
    (out / "kernel_details.csv").write_text("\n".join(",".join(r) for r in [header, *rows]) + "\n", encoding="utf-8")
    for fname, doc in (("trace_view.json", trace), ("communication.json", comm),
                       ("communication_matrix.json", matrix)):
        if doc is not None:
            (out / fname).write_text(json.dumps(doc))
    if step_trace is not None:
        (out / "step_trace_time.csv").write_text(step_trace)
    if meta is not None:
        (rank / "profiler_metadata.json").write_text(json.dumps(meta))
    for fname, doc in (info or {}).items():
        (rank / fname).write_text(json.dumps(doc))
    return rank


def _vals(series):
    return [None if pd.isna(x) else int(x) for x in series]


BASIC = [
    _row(3, 1, 2, "MatMul", "MatMulV2", "AI_CORE", f"{T0}.640", "100.250"),
    _row(3, 1, "N/A", "Add", "Add", "AI_VECTOR_CORE", f"{T0}.900", "20.125"),
    _row(4, 1, 5, AR, "hcom_allReduce_", "N/A", f"{T0[:-3]}600.000", "30"),
]


def test_events_steps_and_streams(tmp_path):
    r = ascend.read_rank(_rank(tmp_path, BASIC))
    ev = r.events.sort_values("start_ns").reset_index(drop=True)
    base = int(T0) * 1000
    assert ev["start_ns"].tolist() == [base + 640, base + 900, (int(T0) - 569 + 600) * 1000]
    assert ev["dur_ns"].tolist() == [100_250, 20_125, 30_000]
    assert ev["stream"].tolist() == ["2", "", "comm:123"]
    assert ev["core"].tolist() == ["AI_CORE", "AI_VECTOR_CORE", ""]
    assert ev["kind"].tolist() == ["compute", "compute", "comm"]
    assert ev["group"].tolist() == ["", "", "123"]
    assert _vals(ev["device"]) == [1, 1, 1] and _vals(ev["step"]) == [3, 3, 4]
    assert r.steps.values.tolist() == [[0, 3, base + 640, base + 100_890], [0, 4, ev["start_ns"][2],
                                                                           ev["start_ns"][2] + 30_000]]
    assert (r.rank, r.rank_from) == (None, "unknown")
    assert r.step_trace is None and r.comm_ops is None and r.links is None
    assert r.bytes_from == "" and ev["bytes"].isna().all()
    assert sorted(r.groups) == ["123"]


def test_steps_na_one_window_and_no_step_column(tmp_path):
    rows = [_row("N/A", 0, 1, "A", "A", "AI_CORE", "10", "5"), _row("", 0, 1, "B", "B", "AI_CORE", "30", "2")]
    r = ascend.read_rank(_rank(tmp_path, rows))
    assert r.steps["rank"].tolist() == [0] and r.steps["step"].isna().all()
    assert r.steps[["start_ns", "end_ns"]].values.tolist() == [[10_000, 32_000]]
    header = [h for h in HEADER if h != "Step Id"]
    rows = [[c for i, c in enumerate(row) if i != 0] for row in rows]
    r = ascend.read_rank(_rank(tmp_path, rows, header=header, name="b"))
    assert r.events["step"].isna().all() and r.steps[["start_ns", "end_ns"]].values.tolist() == [[10_000, 32_000]]


def test_device_from_trace_view_only_without_a_device_column(tmp_path):
    trace = [{"ph": "M", "name": "process_labels", "pid": 5, "args": {"labels": "NPU 6"}},
             {"ph": "M", "name": "process_labels", "pid": 7, "args": {"labels": "CPU"}}]
    header = [h for h in HEADER if h != "Device_id"]
    rows = [[c for i, c in enumerate(row) if i != 1] for row in BASIC[:2]]
    assert _vals(ascend.read_rank(_rank(tmp_path, rows, header=header, trace=trace)).events["device"]) == [6, 6]
    assert _vals(ascend.read_rank(_rank(tmp_path, rows, header=header, name="b")).events["device"]) == [None, None]
    assert _vals(ascend.read_rank(_rank(tmp_path, BASIC[:2], trace=trace, name="c")).events["device"]) == [1, 1]


@pytest.mark.parametrize("column, cell, message", [
    ("Step Id", "x3", "column 'Step Id': line 3: expected an integer, got 'x3'"),
    ("Device_id", "1.5", "column 'Device_id': line 3: expected an integer, got '1.5'"),
    ("Duration(us)", "-1.0", "line 3: negative Duration(us) '-1.0'"),
])
def test_bad_cells_name_line_and_column(tmp_path, column, cell, message):
    rows = [list(r) for r in BASIC]
    rows[1][HEADER.index(column)] = cell
    rank = _rank(tmp_path, rows)
    with pytest.raises(InputError) as err:
        ascend.read_rank(rank)
    assert str(err.value) == f"{rank}/ASCEND_PROFILER_OUTPUT/kernel_details.csv: {message}"


def test_missing_column_header_only_and_missing_file(tmp_path):
    header = [h for h in HEADER if h != "Duration(us)"]
    rank = _rank(tmp_path, [r[:-1] for r in BASIC], header=header)
    with pytest.raises(InputError) as err:
        ascend.read_rank(rank)
    assert str(err.value).endswith(f"kernel_details.csv: missing column(s) ['Duration(us)']; have {header}")
    rank = _rank(tmp_path, [], name="b")
    with pytest.raises(InputError, match=r"kernel_details\.csv: header only, no kernel rows"):
        ascend.read_rank(rank)
    empty = tmp_path / "c" / "ASCEND_PROFILER_OUTPUT"
    empty.mkdir(parents=True)
    (empty / "x.db").write_text("")
    with pytest.raises(IncompleteRankError) as err:
        ascend.read_rank(tmp_path / "c")
    assert str(err.value) == (f"{empty}: no kernel_details.csv (export_type db: ascend_pytorch_profiler_<rank>.db is "
                              f"missing); found ['x.db']")


def test_all_zero_durations(tmp_path):
    rows = [_row(1, 0, 1, "A", "A", "AI_CORE", "10", "0"), _row(1, 0, 1, "B", "B", "AI_CORE", "30", "0.000")]
    with pytest.raises(InputError, match="all 2 kernel durations are 0"):
        ascend.read_rank(_rank(tmp_path, rows))


def test_duplicate_rows_counted_once(tmp_path, capsys):
    rows = [BASIC[0], BASIC[1], BASIC[1], BASIC[2], BASIC[0]]
    r = ascend.read_rank(_rank(tmp_path, rows))
    assert r.events["name"].tolist() == ["MatMul", "Add", AR]
    assert "2 duplicate row(s)" in capsys.readouterr().err
    # the same start in another step is another task
    rows = [BASIC[0], _row(4, 1, 2, "MatMul", "MatMulV2", "AI_CORE", f"{T0}.640", "100.250")]
    assert len(ascend.read_rank(_rank(tmp_path, rows, name="b")).events) == 2


@pytest.mark.parametrize("files, folder, rank, source", [
    ({"profiler_info_5.json": {"rank_id": 2}}, "x_ascend_pt", 2, "profiler_info_5.json rank_id"),
    ({"profiler_info_5.json": {"rank_id": 0}}, "x_ascend_pt", 0, "profiler_info_5.json rank_id"),
    ({"profiler_info_5.json": {"rank_id": -1}}, "x_ascend_pt", 5, "profiler_info_5.json file name"),
    ({"profiler_info_5.json": [1]}, "x_ascend_pt", 5, "profiler_info_5.json file name"),
    ({"profiler_info_0.json": {}}, "x_ascend_pt", 0, "profiler_info_0.json file name"),
    ({"profiler_info.json": {}}, "rank_0_ascend_pt", 0, "folder name rank_0_ascend_pt"),
    ({}, "Rank-3_ascend_pt", 3, "folder name Rank-3_ascend_pt"),
    ({}, "node0_ascend_pt", None, "unknown"),
])
def test_rank_of(tmp_path, files, folder, rank, source):
    r = ascend.read_rank(_rank(tmp_path, BASIC[:1], name=folder, info=files))
    assert (r.rank, r.rank_from) == (rank, source)


def test_rank_of_file_and_output_folder_forms(tmp_path):
    rank = _rank(tmp_path, BASIC[:1], name="rank_4_ascend_pt")
    assert ascend.rank_of_file(rank / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv") == (4, "folder name rank_4_ascend_pt")
    assert ascend.rank_of_file(rank / "profiler_info.json") == (4, "folder name rank_4_ascend_pt")
    assert ascend.read_rank(rank / "ASCEND_PROFILER_OUTPUT").rank == 4
    assert ascend.find_output_dir(rank) == rank / "ASCEND_PROFILER_OUTPUT"
    assert ascend.find_output_dir(rank / "ASCEND_PROFILER_OUTPUT") == rank / "ASCEND_PROFILER_OUTPUT"


def test_an_optional_file_that_is_a_folder_is_an_input_error(tmp_path):
    rank = _rank(tmp_path, BASIC[:1])
    (rank / "ASCEND_PROFILER_OUTPUT" / "step_trace_time.csv").mkdir()
    with pytest.raises(InputError, match="step_trace_time.csv: is a folder"):
        ascend.read_rank(rank)


def test_hccl_dtype_sizes_are_the_bit_counts_of_their_names():
    assert ascend.HCCL_DTYPE_BYTES == {k: int(re.search(r"\d+", k).group()) // 8 for k in ascend.HCCL_DTYPE_BYTES}
    assert len(ascend.HCCL_DTYPE_BYTES) == 18


def test_double_hash_by_hand():
    # "ab": h29 = 97 * 29 + 98 = 2911, h131 = 97 * 131 + 98 = 12805
    assert ascend.double_hash("ab") == (2911 << 32) | 12805
    assert ascend.double_hash("") == 0
    # the 32-bit mask: 200 characters overflow both hashes, which stay below 2**32
    h = ascend.double_hash("z" * 200)
    assert h >> 32 < 2**32 and h & 0xFFFFFFFF < 2**32 and h >> 32 != 0


ST_HEADER = "Device_id,Step,Computing,Communication(Not Overlapped),Overlapped,Communication,Free,Stage,Bubble"


def test_step_trace(tmp_path):
    text = ST_HEADER + "\n0,3,160.376,49.000,35.500,84.500,0.625,210.001,0\n0,,1,2,3,4,5,6,7\n"
    r = ascend.read_rank(_rank(tmp_path, BASIC[:1], step_trace=text))
    st = r.step_trace
    assert _vals(st["step"]) == [3, None] and _vals(st["device"]) == [0, 0] and st["rank"].tolist() == [0, 0]
    assert st["computing_us"].tolist() == [160.376, 1.0] and st["bubble_us"].tolist() == [0.0, 7.0]
    assert st["free_us"].tolist() == [0.625, 5.0]
    no_bubble = "Step,Computing,Communication(Not Overlapped),Overlapped,Communication,Free,Stage\n3,1,2,3,4,5,6\n"
    st = ascend.read_rank(_rank(tmp_path, BASIC[:1], step_trace=no_bubble, name="b")).step_trace
    assert np.isnan(st["bubble_us"].iloc[0]) and "device" not in st and st["stage_us"].tolist() == [6.0]


@pytest.mark.parametrize("cell", ["abc", "-1", "inf", ""])
def test_step_trace_bad_time(tmp_path, cell):
    text = ST_HEADER + f"\n0,3,1,2,3,4,5,6,0\n0,4,1,2,3,4,{cell},6,0\n"
    path = _rank(tmp_path, BASIC[:1], step_trace=text) / "ASCEND_PROFILER_OUTPUT" / "step_trace_time.csv"
    with pytest.raises(InputError) as err:
        ascend.read_step_trace(path)
    assert str(err.value) == f"{path}: row 3 column 'Free': expected a finite time >= 0 us, got {cell!r}"


def _op(start, transit=None, **times):
    info = {"Start Timestamp(us)": start, "Elapse Time(ms)": 0.05, "Transit Time(ms)": 0.01, "Wait Time(ms)": 0.039,
            "Synchronization Time(ms)": 0.002, "Idle Time(ms)": 0.001, **times}
    op = {"Communication Time Info": info}
    if transit is not None:
        op["Communication Bandwidth Info"] = {k: {"Transit Size(MB)": v} for k, v in transit.items()}
    return op


def test_communication_ops_and_transit_bytes(tmp_path):
    comm = {"step3": {"collective": {
        f"{AR}@5862276114690318123": _op(10.5, {"HCCS": 1.5, "RDMA": 0.25, "SDMA": 99, "PCIE": "0.125", "SIO": 0}),
        "hcom_send__123_1_1@5862276114690318123": _op(20, {"SDMA": 3}),
        "hcom_broadcast__123_2_1": _op(30),
        "Total Op Info": {"anything": 1}}},
        "step": {"p2p": {"hcom_receive__456_0_1@77": _op(40, {"HCCS": 0}, **{"Idle Time(ms)": None})}}}
    r = ascend.read_rank(_rank(tmp_path, BASIC, comm=comm))
    ops = r.comm_ops
    assert ops["name"].tolist() == [AR, "hcom_send__123_1_1", "hcom_broadcast__123_2_1", "hcom_receive__456_0_1"]
    assert _vals(ops["step"]) == [3, 3, 3, None]
    assert _vals(ops["bytes"]) == [1_875_000, None, None, 0]  # HCCS + RDMA + PCIE + SIO; SDMA not counted
    assert ops["start_ns"].tolist() == [10_500, 20_000, 30_000, 40_000]
    assert ops["elapse_us"].tolist() == [50.0] * 4 and ops["wait_us"].tolist() == [39.0] * 4
    assert ops["synchronization_us"].tolist() == [2.0] * 4
    assert ops["idle_us"].tolist()[:3] == [1.0] * 3 and np.isnan(ops["idle_us"].iloc[3])
    assert ops["group"].tolist() == ["123", "123", "123", "456"] and ops["rank"].tolist() == [0] * 4
    assert ops["group_hash"].tolist() == ["5862276114690318123"] * 2 + ["", "77"]
    assert r.groups["123"].full_hash == "5862276114690318123" and r.groups["456"].full_hash == "77"
    # no trace_view: the one comm kernel takes its op's transit bytes (its name is unique)
    assert _vals(r.events["bytes"]) == [None, None, 1_875_000] and r.bytes_from == BYTES_TRANSIT


def test_transit_bytes_not_taken_for_a_repeated_name(tmp_path):
    comm = {"step3": {"collective": {f"{AR}@1": _op(10, {"HCCS": 1})}},
            "step4": {"collective": {f"{AR}@1": _op(20, {"HCCS": 2})}}}
    r = ascend.read_rank(_rank(tmp_path, BASIC, comm=comm))
    assert r.events["bytes"].isna().all() and r.bytes_from == ""


@pytest.mark.parametrize("change, message", [
    (lambda op: op["Communication Bandwidth Info"]["HCCS"].update({"Transit Size(MB)": -0.0000005}),
     "Transit Size(MB) total -5e-07 is not a valid size"),
    (lambda op: op["Communication Bandwidth Info"]["HCCS"].update({"Transit Size(MB)": "x"}),
     "HCCS Transit Size(MB): expected a number, got 'x'"),
    (lambda op: op["Communication Time Info"].update({"Wait Time(ms)": -1}),
     "Wait Time(ms): expected a finite time >= 0 ms, got -1"),
    (lambda op: op["Communication Time Info"].update({"Elapse Time(ms)": "nan"}),
     "Elapse Time(ms): expected a finite time >= 0 ms, got 'nan'"),
    (lambda op: op["Communication Time Info"].pop("Start Timestamp(us)"),
     "expected 'Start Timestamp(us)' in 'Communication Time Info'"),
    (lambda op: op.pop("Communication Time Info"), "expected 'Communication Time Info'"),
])
def test_communication_damage_names_the_op(tmp_path, change, message):
    op = _op(10, {"HCCS": 1})
    change(op)
    rank = _rank(tmp_path, BASIC, comm={"step3": {"collective": {f"{AR}@1": op}}})
    with pytest.raises(InputError) as err:
        ascend.read_rank(rank)
    assert str(err.value) == f"{rank}/ASCEND_PROFILER_OUTPUT/communication.json: op '{AR}@1': {message}"


def test_communication_transit_size_zero_and_boundary(tmp_path):
    rank = _rank(tmp_path, BASIC, comm={"step3": {"collective": {f"{AR}@1": _op(10, {"HCCS": 0})}}})
    assert _vals(ascend.read_rank(rank).comm_ops["bytes"]) == [0]
    too_big = (2**62) / 1e6
    rank = _rank(tmp_path, BASIC, comm={"step3": {"collective": {f"{AR}@1": _op(10, {"HCCS": too_big})}}}, name="b")
    with pytest.raises(InputError, match="is not a valid size"):
        ascend.read_rank(rank)


@pytest.mark.parametrize("doc, message", [
    ([1], "expected an object keyed by step, got list"),
    ({"stepX": {}}, "key 'stepX': expected 'step<N>' holding p2p/collective ops"),
    ({"step1": []}, "key 'step1': expected 'step<N>' holding p2p/collective ops"),
    ({"step1": {"p2p": [1]}}, "step1.p2p: expected an object of ops"),
])
def test_communication_structure_errors(tmp_path, doc, message):
    rank = _rank(tmp_path, BASIC, comm=doc)
    with pytest.raises(InputError) as err:
        ascend.read_rank(rank)
    assert str(err.value) == f"{rank}/ASCEND_PROFILER_OUTPUT/communication.json: {message}"


def _trace_view(ops, steps=()):
    evs = [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "HCCL"}},
           {"ph": "M", "name": "process_name", "pid": 2, "args": {"name": "Python"}},
           {"ph": "M", "name": "thread_name", "pid": 1, "tid": 10, "args": {"name": "Group 123 Communication"}},
           {"ph": "M", "name": "thread_name", "pid": 1, "tid": 11, "args": {"name": "Plane 0"}},
           {"ph": "M", "name": "thread_name", "pid": 1, "tid": 12, "args": {"name": "Group hccl_world Aicpu Communication"}},
           {"ph": "M", "name": "thread_name", "pid": 2, "tid": 10, "args": {"name": "Group 999 Communication"}},
           {"ph": "M", "name": "process_labels", "pid": 1, "args": {"labels": "NPU 2"}}]
    for name, ts, dur, count, dtype, tid, pid in ops:
        evs.append({"ph": "X", "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur,
                    "args": {"count": count, "data_type": dtype}})
    for step, ts, dur in steps:
        evs.append({"ph": "X", "name": f"ProfilerStep#{step}", "pid": 2, "tid": 3, "ts": ts, "dur": dur})
    return evs


def test_trace_view_read(tmp_path):
    ops = [(AR, 100.5, 30, 1024, "fp16", 10, 1),        # an op of group 123: 2048 bytes
           ("hcom_send__123_1_1", 200, 5, "16", "INT64", 12, 1),  # count as text: 128 bytes
           (AR + "x", 300, 5, 1, "FP32", 11, 1),         # a Plane thread: part of an op, not an op
           ("hcom_x__999_0_1", 400, 5, 1, "FP32", 10, 2),  # not the HCCL process
           ("hcom_y__123_3_1", 500, 5, 1.5, "NOPE", 10, 1)]  # unknown dtype, float count: no bytes
    path = tmp_path / "trace_view.json"
    path.write_text(json.dumps(_trace_view(ops, steps=[(3, 50, 400), (4, 450, 100)])))
    tv = ascend._read_trace_view(path)
    assert tv.comm["name"].tolist() == [AR, "hcom_send__123_1_1", "hcom_y__123_3_1"]
    assert tv.comm["start_ns"].tolist() == [100_500, 200_000, 500_000]
    assert tv.comm["dur_ns"].tolist() == [30_000, 5_000, 5_000]
    assert _vals(tv.comm["bytes"]) == [2048, 128, None]
    assert tv.comm["thread_group"].tolist() == ["123", "hccl_world", "123"]
    assert tv.group_threads == ["Group 123 Communication", "Group hccl_world Aicpu Communication"]
    assert tv.device == 2
    assert tv.host_steps.values.tolist() == [[3, 50_000, 450_000], [4, 450_000, 550_000]]
    assert ascend._read_trace_view(tmp_path / "none.json") is None


def test_trace_view_bytes_and_host_step_ends(tmp_path):
    base = (int(T0) - 569) * 1000
    ops = [(AR, f"{T0[:-3]}600.000", 30, 1024, "FP32", 10, 1)]
    trace = _trace_view(ops, steps=[(3, f"{T0[:-3]}560", 50), (4, f"{T0[:-3]}599", 1)])
    r = ascend.read_rank(_rank(tmp_path, BASIC, trace=trace))
    assert _vals(r.events["bytes"]) == [None, None, 4096] and r.bytes_from == BYTES_MESSAGE
    # step 3 ends at its host span's end (610 us) after its last task (569.640 + 100.250 = 669.890: later wins)
    assert r.steps["end_ns"].tolist() == [base + 669_890, base + 630_000]
    trace = _trace_view(ops, steps=[(3, f"{T0[:-3]}560", 200), (4, f"{T0[:-3]}599", 100)])
    r = ascend.read_rank(_rank(tmp_path, BASIC, trace=trace, name="b"))
    assert r.steps["end_ns"].tolist() == [base + 760_000, base + 699_000]
    assert r.groups["123"].name == "123"


def test_trace_view_ops_when_kernel_details_has_none(tmp_path):
    ops = [(AR, 100, 30, 1024, "FP32", 10, 1), ("hcom_send__123_1_1", 5, 5, 2, "INT8", 10, 1)]
    rows = [_row(1, 0, 1, "A", "A", "AI_CORE", "10", "5")]
    r = ascend.read_rank(_rank(tmp_path, rows, trace=_trace_view(ops)))
    ev = r.events
    assert ev["name"].tolist() == ["hcom_send__123_1_1", "A", AR]  # in time order
    assert ev["start_ns"].tolist() == [5_000, 10_000, 100_000]
    assert ev["stream"].tolist() == ["comm:123", "1", "comm:123"]
    assert ev["core"].tolist() == ["COMMUNICATION", "AI_CORE", "COMMUNICATION"]
    assert _vals(ev["device"]) == [2, 0, 2] and _vals(ev["step"]) == [None, 1, None]
    assert _vals(ev["bytes"]) == [2, None, 4096] and ev["rank"].tolist() == [0, 0, 0]


def test_a_repeated_op_name_is_matched_by_its_start(tmp_path):
    rows = [_row(1, 0, 1, AR, "hcom_allReduce_", "N/A", "100", "5"), _row(2, 0, 1, AR, "hcom_allReduce_", "N/A", "200", "5"),
            _row(2, 0, 1, "hcom_send__123_1_1", "x", "N/A", "300", "5")]
    ops = [(AR, 200, 5, 4, "INT8", 10, 1), (AR, 100, 5, 2, "INT8", 10, 1), ("hcom_send__123_1_1", 300, 5, 8, "INT8", 10, 1)]
    r = ascend.read_rank(_rank(tmp_path, rows, trace=_trace_view(ops)))
    assert _vals(r.events["bytes"]) == [2, 4, 8]


def test_groups_from_metadata(tmp_path):
    names = ["group_name_1", "group_name_2"]
    meta = {"parallel_group_info": {
        names[0]: {"group_name": "tp", "global_ranks": [0, 1, True, "2"]},
        names[1]: {"group_name": "dp", "global_ranks": "0,1"},
        "junk": 5}}
    r = ascend.read_rank(_rank(tmp_path, BASIC, meta=meta))
    for name, role, ranks in ((names[0], "tp", (0, 1)), (names[1], "dp", ())):
        full = str(ascend.double_hash(name))
        g = r.groups[full[-3:]]
        assert (g.name, g.role, g.ranks, g.full_hash) == (name, role, ranks, full)
    assert "123" in r.groups and r.groups["123"].name == ""


def test_metadata_that_is_not_an_object_is_an_error_as_in_the_db_reader(tmp_path):
    with pytest.raises(InputError, match=r"expected a JSON object \(torch_npu's profiler_metadata.json\), got list"):
        ascend.read_rank(_rank(tmp_path, BASIC, meta=[1], name="list"))


@pytest.mark.parametrize("meta, message", [({"parallel_group_info": [1]}, "parallel_group_info: expected an object")])
def test_metadata_errors(tmp_path, meta, message):
    with pytest.raises(InputError, match=message):
        ascend.read_rank(_rank(tmp_path, BASIC, meta=meta))
    for harmless in ({"x": 1}, {"parallel_group_info": None}):
        r = ascend.read_rank(_rank(tmp_path, BASIC, meta=harmless, name=f"h{len(str(harmless))}"))
        assert sorted(r.groups) == ["123"]


def _link(size, time, bw=5.0, transport="HCCS"):
    d = {"Transport Type": transport, "Transit Size(MB)": size, "Transit Time(ms)": time}
    if bw is not None:
        d["Bandwidth(GB/s)"] = bw
    return d


def test_matrix(tmp_path):
    matrix = {"step3": {"collective": {
        "allreduce-top1@x": {"0-1": _link(9, 9)},
        "allreduce-total@123": {"0-1": _link(1.5, 0.25), "1-0": _link(0, 0, bw=None, transport="SIO")}},
        "p2p": {"send-total": {"0-2": _link("2", "0.5", bw="4")}}},
        "step": {"collective": {}}}
    links = ascend.read_rank(_rank(tmp_path, BASIC, matrix=matrix)).links
    assert links["op"].tolist() == ["allreduce", "allreduce", "send"]
    assert links["group_hash"].tolist() == ["123", "123", ""]
    assert links["link"].tolist() == ["0-1", "1-0", "0-2"] and links["transport"].tolist() == ["HCCS", "SIO", "HCCS"]
    assert links["bytes"].tolist() == [1_500_000, 0, 2_000_000]
    assert links["transit_us"].tolist() == [250.0, 0.0, 500.0]
    bw = links["profiler_bandwidth_GBps"].tolist()
    assert bw[0] == 5.0 and np.isnan(bw[1]) and bw[2] == 4.0
    assert _vals(links["step"]) == [3, 3, 3] and links["rank"].tolist() == [0, 0, 0]


@pytest.mark.parametrize("link, message", [
    (_link(-1, 1), "Transit Size(MB) -1.0 is not a valid non-negative number"),
    (_link("nan", 1), "Transit Size(MB) nan is not a valid non-negative number"),
    (_link(1, 1, bw=-2), "Bandwidth(GB/s) -2.0 is not a valid non-negative number"),
    (_link(1, 1, bw="inf"), "Bandwidth(GB/s) inf is not a valid non-negative number"),
    (_link(2**62 / 1e6, 1), "Transit Size(MB) 4611686018427.388 is not a valid non-negative number"),
    (_link(1, -1), "Transit Time(ms): expected a finite time >= 0 ms, got -1"),
    ([1], "expected an object"),
])
def test_matrix_damage(tmp_path, link, message):
    rank = _rank(tmp_path, BASIC, matrix={"step3": {"collective": {"allreduce-total@1": {"0-1": link}}}})
    with pytest.raises(InputError) as err:
        ascend.read_rank(rank)
    assert str(err.value) == f"{rank}/ASCEND_PROFILER_OUTPUT/communication_matrix.json: allreduce-total@1 link '0-1': {message}"


def test_matrix_size_just_below_the_limit_is_taken(tmp_path):
    size = 4611686018427.0  # MB: 4.611686018427e18 bytes < 2**62
    rank = _rank(tmp_path, BASIC, matrix={"step3": {"collective": {"allreduce-total@1": {"0-1": _link(size, 0)}}}})
    got = ascend.read_rank(rank).links["bytes"].tolist()[0]
    assert abs(got - 4_611_686_018_427_000_000) <= 1024  # float64 MB x 1e6: within a unit of the last place


@pytest.mark.parametrize("doc, message", [
    ([1], "expected an object keyed by step, got list"),
    ({"s1": {}}, "key 's1': expected 'step<N>' holding p2p/collective links"),
    ({"step1": {"p2p": 3}}, "step1.p2p: expected an object of ops"),
    ({"step1": {"p2p": {"send-total": [1]}}}, "step1.p2p.send-total: expected an object of links"),
])
def test_matrix_structure_errors(tmp_path, doc, message):
    rank = _rank(tmp_path, BASIC, matrix=doc)
    with pytest.raises(InputError) as err:
        ascend.read_rank(rank)
    assert str(err.value) == f"{rank}/ASCEND_PROFILER_OUTPUT/communication_matrix.json: {message}"


def test_group_hash_from_the_first_op_that_carries_one(tmp_path):
    comm = {"step3": {"collective": {"hcom_broadcast__123_2_1": _op(30), f"{AR}@999": _op(10),
                                     "hcom_send__123_1_1@888": _op(20), "custom_op@55": _op(40)}}}
    r = ascend.read_rank(_rank(tmp_path, BASIC, comm=comm))
    assert r.groups["123"].full_hash == "999"
    assert r.comm_ops["group_hash"].tolist() == ["", "999", "888", "55"]


def test_step_trace_empty_device_cell(tmp_path):
    text = ST_HEADER + "\n,3,1,2,3,4,5,6,0\nN/A,4,1,2,3,4,5,6,0\n"
    st = ascend.read_rank(_rank(tmp_path, BASIC[:1], step_trace=text)).step_trace
    assert _vals(st["device"]) == [None, None] and _vals(st["step"]) == [3, 4]


def test_metadata_name_wins_over_the_trace_thread_and_ambiguous_ids_keep_both(tmp_path):
    # double_hash("group_name_1") ends in 909; group_name_0 and group_name_51 both end in 612 (found by search)
    assert str(ascend.double_hash("group_name_1"))[-3:] == "909"
    assert str(ascend.double_hash("group_name_0"))[-3:] == str(ascend.double_hash("group_name_51"))[-3:] == "612"
    meta = {"parallel_group_info": {"group_name_1": {"group_name": "tp", "global_ranks": [0, 1]},
                                    "group_name_0": {"group_name": "dp", "global_ranks": [0, 2]},
                                    "group_name_51": {"group_name": "cfg", "global_ranks": [0, 4]}}}
    ops = [("hcom_barrier", 50, 1, 0, "FP32", 10, 1),  # no communicator in the name: named by nothing
           ("hcom_allReduce__909_0_1", 100, 30, 4, "FP32", 10, 1), ("hcom_allReduce__555_0_1", 200, 30, 4, "FP32", 10, 1),
           ("hcom_allReduce__123_5_1", 300, 30, 4, "FP32", 12, 1)]
    rows = [_row(1, 0, 1, "A", "A", "AI_CORE", "10", "5")]
    r = ascend.read_rank(_rank(tmp_path, rows, trace=_trace_view(ops), meta=meta))
    g = r.groups
    assert (g["909"].name, g["909"].role, g["909"].ranks) == ("group_name_1", "tp", (0, 1))
    assert (g["612"].name, g["612"].role, g["612"].ranks, g["612"].full_hash) == (
        "group_name_0|group_name_51", "dp|cfg", (), "")
    # no metadata for 555: the thread's group (the trace has no thread for 555: "123") names it
    assert g["555"].name == "123" and g["123"].name == "hccl_world"


def test_steps_of_no_events():
    events = pd.DataFrame({"step": pd.array([], dtype="Int64"), "start_ns": np.zeros(0, np.int64),
                           "dur_ns": np.zeros(0, np.int64)})
    steps = ascend._steps(events, None)
    assert steps.empty and list(steps.columns) == ["rank", "step", "start_ns", "end_ns"]


def test_a_rank_names_every_file_it_read(tmp_path):
    # issue 29, readers/ascend/text.py full run: the sources list is what reports cite; each optional file read joins it
    comm = {"step3": {"collective": {f"{AR}@1": _op(10.5)}}}
    meta = {"parallel_group_info": {"group_name_1": {"group_name": "tp", "global_ranks": [0, 1]}}}
    st = ST_HEADER + "\n0,3,1,2,3,4,5,6,0\n"
    rank = _rank(tmp_path, BASIC, comm=comm, step_trace=st, meta=meta)
    out = rank / "ASCEND_PROFILER_OUTPUT"
    r = ascend.read_rank(rank)
    assert r.sources == [out / "kernel_details.csv", out / "communication.json", out / "step_trace_time.csv",
                         rank / "profiler_metadata.json"]
    bare = ascend.read_rank(_rank(tmp_path, BASIC, name="bare"))
    assert bare.sources == [tmp_path / "bare" / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"]


def test_csv_header_faults_are_one_line_each(tmp_path):
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(InputError) as err:
        ascend.read_text_table(empty, ["Step"])
    assert str(err.value) == f"{empty}: empty file; expected a CSV header line"
    twice = tmp_path / "twice.csv"
    twice.write_text("Step,Free,Step\n1,2,3\n")
    with pytest.raises(InputError) as err:
        ascend.read_text_table(twice, ["Step"])
    assert str(err.value) == f"{twice}: column(s) ['Step'] appear more than once in the header"
    binary = tmp_path / "binary.csv"
    binary.write_bytes(b"\xff\xfe\x00Step\n")
    with pytest.raises(InputError) as err:
        ascend.read_text_table(binary, ["Step"])
    assert str(err.value).startswith(f"{binary}: cannot read the CSV header (UnicodeDecodeError: ")
    missing = tmp_path / "missing.csv"
    missing.write_text("Free\n1\n")
    with pytest.raises(InputError) as err:
        ascend.read_text_table(missing, ["Step", "Free"])
    assert str(err.value) == f"{missing}: missing column(s) ['Step']; have ['Free']"
    ragged = tmp_path / "ragged.csv"
    ragged.write_text("Step,Free\n1,2\n3,4,5,6\n")
    with pytest.raises(InputError) as err:
        ascend.read_text_table(ragged, ["Step"])
    assert str(err.value).startswith(f"{ragged}: cannot parse as CSV (")


def test_header_names_are_read_without_spaces_or_bom(tmp_path):
    path = tmp_path / "padded.csv"
    path.write_text("\ufeffStep , Free\n3,1.5\n", encoding="utf-8")
    frame = ascend.read_text_table(path, ["Step", "Free"])
    assert list(frame.columns) == ["Step", "Free"] and frame["Free"].tolist() == ["1.5"]


# --- survivors of readers/ascend/text.py's full run, second pass (issue 29) ---

BIG_US = "4611686018427388"   # 4,611,686,018,427,388,000 ns: just over 2**62 = 4,611,686,018,427,387,904


def test_a_kernel_details_that_is_a_folder_is_named_as_such(tmp_path):
    (tmp_path / "r_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv").mkdir(parents=True)
    with pytest.raises(IncompleteRankError) as err:
        ascend.read_rank(tmp_path / "r_ascend_pt")
    assert str(err.value) == f"{tmp_path}/r_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv: is a folder; expected a file"


def test_a_profiler_info_that_is_a_folder_is_an_input_error(tmp_path):
    rank = _rank(tmp_path, BASIC)
    (rank / "profiler_info_0.json").mkdir()
    with pytest.raises(InputError) as err:
        ascend.read_rank(rank)
    assert str(err.value) == f"{rank}/profiler_info_0.json: is a folder; expected a file"


def test_stamps_beyond_2_62_ns_are_refused_in_every_file(tmp_path):
    rows = [_row(3, 1, 2, "MatMul", "MatMulV2", "AI_CORE", BIG_US, "1")]
    rank = _rank(tmp_path, rows)
    with pytest.raises(InputError) as err:
        ascend.read_rank(rank)
    assert str(err.value) == (f"{rank}/ASCEND_PROFILER_OUTPUT/kernel_details.csv: row: entry 0: start "
                              "4611686018427388000 ns is out of range (over 2**62 ns)")
    op = tmp_path / "op.json"
    op.write_text(json.dumps(_trace_view([(AR, BIG_US, 30, 1024, "FP32", 10, 1)])))
    with pytest.raises(InputError) as err:
        ascend._read_trace_view(op)
    assert str(err.value) == f"{op}: communication op: entry 0: start 4611686018427388000 ns is out of range (over 2**62 ns)"
    step = tmp_path / "step.json"
    step.write_text(json.dumps(_trace_view([], steps=[(3, BIG_US, 5)])))
    with pytest.raises(InputError) as err:
        ascend._read_trace_view(step)
    assert str(err.value) == f"{step}: ProfilerStep: entry 0: start 4611686018427388000 ns is out of range (over 2**62 ns)"


def test_the_first_negative_duration_is_named_by_its_line(tmp_path):
    # line 2 lasts 0 (allowed), line 3 -0.001 us (-1 ns, the smallest negative), line 4 -5 us
    rows = [_row(3, 1, 2, n, n, "AI_CORE", f"{T0}.{i}", d) for i, (n, d) in enumerate((("A", "0"), ("B", "-0.001"),
                                                                                     ("C", "-5")), 1)]
    rank = _rank(tmp_path, rows)
    with pytest.raises(InputError) as err:
        ascend.read_rank(rank)
    assert str(err.value) == f"{rank}/ASCEND_PROFILER_OUTPUT/kernel_details.csv: line 3: negative Duration(us) '-0.001'"
    one = _rank(tmp_path, rows[1:2], name="one")
    with pytest.raises(InputError) as err:
        ascend.read_rank(one)
    assert str(err.value) == f"{one}/ASCEND_PROFILER_OUTPUT/kernel_details.csv: line 2: negative Duration(us) '-0.001'"


def test_trace_view_ops_are_complete_events_with_text_names(tmp_path):
    # an instant event named like an op is no op; a complete event whose name is not text is skipped
    evs = _trace_view([(AR, 100, 30, 1024, "FP32", 10, 1)])
    evs.append({"ph": "i", "name": "hcom_broadcast__123_5_1", "pid": 1, "tid": 10, "ts": 150, "args": {}})
    evs.append({"ph": "X", "name": 7, "pid": 1, "tid": 10, "ts": 160, "dur": 1})
    path = tmp_path / "trace_view.json"
    path.write_text(json.dumps(evs))
    assert ascend._read_trace_view(path).comm["name"].tolist() == [AR]


def test_communication_summary_first_does_not_hide_the_ops(tmp_path):
    comm = {"step3": {"collective": {"Total Op Info": {"anything": 1}, f"{AR}@1": _op(10.5)}}}
    assert ascend.read_rank(_rank(tmp_path, BASIC, comm=comm)).comm_ops["name"].tolist() == [AR]


def test_a_rank_names_its_trace_view_and_matrix(tmp_path):
    trace = _trace_view([(AR, f"{T0[:-3]}600.000", 30, 1024, "FP32", 10, 1)])
    matrix = {"step3": {"collective": {"allreduce-total@123": {"0-1": _link(1.5, 0.25)}}}}
    rank = _rank(tmp_path, BASIC, trace=trace, matrix=matrix)
    out = rank / "ASCEND_PROFILER_OUTPUT"
    assert ascend.read_rank(rank).sources == [out / "kernel_details.csv", out / "trace_view.json",
                                              out / "communication_matrix.json"]


def test_families_groups_and_nullable_integer_columns(tmp_path):
    # communication.json ops and trace_view ops added to the events carry their family and group; step and bytes
    # are nullable integers (Int64), as in every reader
    comm = {"step3": {"collective": {f"{AR}@1": _op(10.5, {"HCCS": 1}), "hcom_send__123_1_1@1": _op(20)}},
            "step": {"p2p": {"hcom_receive__456_0_1@77": _op(40)}}}
    matrix = {"step3": {"collective": {"allreduce-total@123": {"0-1": _link(1.5, 0.25)}}}}
    r = ascend.read_rank(_rank(tmp_path, BASIC, comm=comm, matrix=matrix))
    assert r.comm_ops["family"].tolist() == ["allreduce", "send", "recv"]
    assert (str(r.comm_ops["step"].dtype), str(r.comm_ops["bytes"].dtype), str(r.links["step"].dtype)) == \
        ("Int64", "Int64", "Int64")
    ops = [(AR, 100, 30, 1024, "FP32", 10, 1), ("hcom_send__123_1_1", 5, 5, 2, "INT8", 10, 1)]
    ev = ascend.read_rank(_rank(tmp_path, [_row(1, 0, 1, "A", "A", "AI_CORE", "10", "5")], trace=_trace_view(ops),
                                name="t")).events
    assert ev["family"].tolist() == ["send", "", "allreduce"] and ev["group"].tolist() == ["123", "", "123"]
    assert str(ev["step"].dtype) == "Int64"


def test_the_first_bad_cell_is_named(tmp_path):
    # kernel_details: bad Step Id cells on lines 3 ('x') and 4 ('y'): line 3 is named; an unparseable duration is
    # named by its line (header = line 1)
    rows = [list(r) for r in BASIC]
    rows[1][0], rows[2][0] = "x", "y"
    rank = _rank(tmp_path, rows)
    with pytest.raises(InputError) as err:
        ascend.read_rank(rank)
    assert str(err.value) == f"{rank}/ASCEND_PROFILER_OUTPUT/kernel_details.csv: column 'Step Id': line 3: expected " \
                             "an integer, got 'x'"
    rows = [list(r) for r in BASIC]
    rows[1][HEADER.index("Duration(us)")] = "abc"
    rank = _rank(tmp_path, rows, name="dur")
    with pytest.raises(InputError) as err:
        ascend.read_rank(rank)
    assert str(err.value) == f"{rank}/ASCEND_PROFILER_OUTPUT/kernel_details.csv: column 'Duration(us)': line 3: " \
                             "expected a decimal time in microseconds, got 'abc'"
    # step_trace_time.csv: bad Free cells on rows 2 and 3: row 2 is named
    text = ST_HEADER + "\n0,3,1,2,3,4,x,6,0\n0,4,1,2,3,4,y,6,0\n"
    path = _rank(tmp_path, BASIC[:1], step_trace=text, name="st") / "ASCEND_PROFILER_OUTPUT" / "step_trace_time.csv"
    with pytest.raises(InputError) as err:
        ascend.read_step_trace(path)
    assert str(err.value) == f"{path}: row 2 column 'Free': expected a finite time >= 0 us, got 'x'"


def test_kernel_details_without_a_type_column(tmp_path):
    header = [h for h in HEADER if h != "Type"]
    rows = [[c for c, h in zip(r, HEADER, strict=True) if h != "Type"] for r in BASIC]
    ev = ascend.read_rank(_rank(tmp_path, rows, header=header)).events
    assert ev["name"].tolist() == ["MatMul", "Add", AR]
    assert ev["kind"].tolist() == ["compute", "compute", "comm"] and ev["family"].tolist() == ["", "", "allreduce"]


def test_rows_differing_only_in_a_missing_step_are_not_duplicates(tmp_path):
    # the same task at the same start on the same stream, once without a step, once in step 1, once in step 0:
    # three different rows (a missing step must not read as step 1 or 0)
    rows = [_row(s, 1, 2, "MatMul", "MatMulV2", "AI_CORE", f"{T0}.640", "100.250") for s in ("", 1, 0)]
    assert _vals(ascend.read_rank(_rank(tmp_path, rows)).events["step"]) == [None, 1, 0]


def test_communication_transit_size_just_below_the_limit_is_taken(tmp_path):
    size = 4611686018427.0  # MB: 4,611,686,018,427,000,000 bytes < 2**62 = 4,611,686,018,427,387,904
    rank = _rank(tmp_path, BASIC, comm={"step3": {"collective": {f"{AR}@1": _op(10, {"HCCS": size})}}})
    [got] = _vals(ascend.read_rank(rank).comm_ops["bytes"])
    # taken, to float64 precision (MB x 1e6 in doubles: their spacing is 1024 B at 2**62)
    assert abs(got - 4_611_686_018_427_000_000) <= 1024
