"""Ascend (torch_npu) reader on the real msinsight fixtures and on the shipped CANN 8.3-format set."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import ROOT, need_shared
from ditpar.core.events import COLUMNS
from ditpar.errors import InputError
from ditpar.readers import discover, load_profiles
from ditpar.readers.ascend.text import double_hash

CANN83 = ROOT / "tests" / "data" / "ascend_cann83"
RANK0_83 = CANN83 / "node0_23101_20251127201437501_ascend_pt"


def test_double_hash_matches_msprof_analyze_values():
    # values verified against communication.json '@' suffixes and analysis.db (facts §1.10)
    assert double_hash("group_name_0") == 5862276093215481612
    assert str(double_hash("group_name_5")).endswith("318097")
    assert str(double_hash("group_name_13")).endswith("952346")
    assert str(double_hash("group_name_19")).endswith("756128")
    assert str(double_hash("group_name_20")).endswith("102170")
    assert double_hash("90.91.105.46%enp189s0f0_60000_0_1736410538306028") == 17148521525495523210


@pytest.mark.parametrize("level", ["msinsight-text-level0", "msinsight-text-level1"])
def test_fixture_events(level):
    ps = load_profiles([need_shared("fixtures", "ascend", level)])
    assert ps.fmt == "ascend" and ps.ranks == [0, 1]
    assert list(ps.events.columns) == list(COLUMNS)
    for rank in (0, 1):
        ev = ps.events[ps.events["rank"] == rank]
        assert len(ev) == 191  # rows of kernel_details.csv
        comm = ev[ev["kind"] == "comm"]
        assert len(comm) == 4 and set(comm["family"]) == {"allreduce"}
        assert (comm["stream"] == "comm:" + comm["group"]).all()
        assert set(ev["step"].dropna()) == {50}
    # exact stamp of the first kernel of level1 rank 0: 1736408883704643.212 us
    if level.endswith("level1"):
        first = ps.events[ps.events["rank"] == 0].iloc[0]
        assert first["name"] == "trans_TransData_0" and first["start_ns"] == 1736408883704643212
        assert first["dur_ns"] == 53741 and first["stream"] == "2" and first["core"] == "AI_VECTOR_CORE"
        # message size of hcom_allReduce__586_0_1 from trace_view: count 4097000 x FP32
        op = ps.events[(ps.events["rank"] == 0) & (ps.events["name"] == "hcom_allReduce__586_0_1")].iloc[0]
        assert op["bytes"] == 4097000 * 4
        assert ps.groups["586"].full_hash == "17522688603477080586"
        ops = ps.comm_ops[ps.comm_ops["rank"] == 0]
        assert len(ops) == 4
        first_op = ops[ops["name"] == "hcom_allReduce__586_0_1"].iloc[0]
        assert first_op["elapse_us"] == pytest.approx(79089.52021875)
        assert first_op["idle_us"] == pytest.approx(73203.70259375)
        # HCCS transit bytes: 28.647232 MB; SDMA repeats it and is not added
        assert first_op["bytes"] == 28647232
    else:
        assert ps.comm_ops is None  # level0 has no communication.json
    assert ps.unclassified == {}


def test_fixture_step_trace_parsed():
    ps = load_profiles([need_shared("fixtures", "ascend", "msinsight-text-level1")])
    row = ps.step_trace[ps.step_trace["rank"] == 0].iloc[0]
    assert row["step"] == 50
    assert row["computing_us"] == pytest.approx(8873.756000000001)
    assert row["stage_us"] == 136581.0


def test_path_forms_find_the_same_ranks():
    level1 = need_shared("fixtures", "ascend", "msinsight-text-level1")
    rank0 = level1 / "rank0_ascend_pt"
    assert load_profiles([rank0]).ranks == [0]
    assert load_profiles([rank0 / "ASCEND_PROFILER_OUTPUT"]).ranks == [0]
    assert load_profiles(str(level1 / "rank1_ascend_pt")).ranks == [1]
    # a parent and one of its ranks: the rank is read once
    assert load_profiles([level1, rank0]).ranks == [0, 1]
    assert [fmt for fmt, _ in discover(level1)] == ["ascend", "ascend"]


def test_cann83_set():
    ps = load_profiles([CANN83])
    assert ps.ranks == [0, 2]  # from profiler_info_<rank>.json, not the folder order
    assert set(ps.events["device"]) == {0, 2}  # Device_id column
    comm = ps.events[ps.events["kind"] == "comm"]
    assert set(comm["core"]) == {"COMMUNICATION"}
    assert sorted(set(comm["family"])) == ["allreduce", "recv", "send"]
    assert set(comm["bytes"]) == {262144 * 2, 1048576 * 2}
    assert ps.groups["097"].role == "pp" and ps.groups["097"].name == "group_name_5"
    assert ps.groups["097"].ranks == (0, 2)
    assert ps.groups["097"].full_hash == str(double_hash("group_name_5"))
    # dp is group_name_20 on both ranks but with other members on each: no single member list
    assert ps.groups["170"].role == "dp" and ps.groups["170"].ranks == ()
    assert ps.steps["step"].tolist() == [3, 4, 3, 4]
    assert "device" in ps.step_trace and ps.step_trace["device"].tolist() == [0, 0, 2, 2]


def test_cann83_block_dim_header_variant(tmp_path):
    """Older header (Block Dim, no Device_id, core HCCL) reads the same events."""
    dst = tmp_path / "rank0_ascend_pt"
    shutil.copytree(RANK0_83, dst)
    kd = dst / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"
    lines = kd.read_bytes().decode("utf-8").split("\r\n")
    header = lines[0].replace("Block Num", "Block Dim").split(",")
    drop = header.index("Device_id")
    out = [",".join(c for i, c in enumerate(header) if i != drop)]
    for line in filter(None, lines[1:]):
        cells = line.split(",")  # the synthetic rows quote shapes; cut only the Device_id cell
        out.append(",".join(cells[:drop] + cells[drop + 1:]).replace("COMMUNICATION", "HCCL"))
    kd.write_bytes(("\r\n".join(out) + "\r\n").encode("utf-8"))
    new = load_profiles([dst]).events
    ref = load_profiles([RANK0_83]).events
    assert new["start_ns"].tolist() == ref["start_ns"].tolist()
    assert new["kind"].tolist() == ref["kind"].tolist()
    assert set(new.loc[new["kind"] == "comm", "core"]) == {"HCCL"}


def test_trace_view_supplies_comm_ops_when_kernel_details_has_none(tmp_path):
    dst = tmp_path / "rank0_ascend_pt"
    shutil.copytree(RANK0_83, dst)
    kd = dst / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"
    lines = kd.read_bytes().decode("utf-8").split("\r\n")
    kd.write_bytes(("\r\n".join(ln for ln in lines if "hcom_" not in ln) + "\r\n").encode("utf-8"))
    ps = load_profiles([dst])
    comm = ps.events[ps.events["kind"] == "comm"]
    ref = load_profiles([RANK0_83]).events
    ref_comm = ref[ref["kind"] == "comm"]
    assert comm["name"].tolist() == ref_comm["name"].tolist()
    assert comm["start_ns"].tolist() == ref_comm["start_ns"].tolist()
    assert comm["dur_ns"].tolist() == ref_comm["dur_ns"].tolist()
    assert (comm["stream"] == ["comm:097", "comm:170", "comm:097", "comm:170"]).all()


def test_rank_from_folder_name_when_no_profiler_info(tmp_path):
    dst = tmp_path / "rank7_ascend_pt"
    shutil.copytree(RANK0_83, dst)
    (dst / "profiler_info_0.json").unlink()
    assert load_profiles([dst]).ranks == [7]


def test_duplicate_rank_is_an_error(tmp_path):
    for name in ("a_ascend_pt", "b_ascend_pt"):
        shutil.copytree(RANK0_83, tmp_path / name)
    with pytest.raises(InputError, match="rank 0"):
        load_profiles([tmp_path])


def test_mixing_formats_is_an_error(tmp_path):
    shutil.copytree(RANK0_83, tmp_path / "x_ascend_pt")
    (tmp_path / "rank1.json").write_text(json.dumps({"traceEvents": []}), encoding="utf-8")
    with pytest.raises(InputError, match="mixed profile formats"):
        load_profiles([tmp_path])


def test_missing_kernel_details_lists_what_is_there(tmp_path):
    dst = tmp_path / "r_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    dst.mkdir(parents=True)
    (dst / "analysis.db").write_bytes(b"")
    with pytest.raises(InputError, match=r"no kernel_details.csv \(export_type db: ascend_pytorch_profiler_<rank>.db is missing\).*\['analysis.db'\]"):
        load_profiles([dst.parent])


def test_relative_paths(monkeypatch):
    monkeypatch.chdir(ROOT)
    assert load_profiles([Path("tests/data/ascend_cann83")]).ranks == [0, 2]


def test_rank_read_for_some_columns_keeps_their_values_and_checks_every_cell(tmp_path):
    """A per-rank analysis that reads a few event columns gets those columns with the full read's values; a
    damaged cell of a column it does not read is still named (the Device_id of line 4)."""
    from ditpar.readers.ascend.text import read_rank

    dst = tmp_path / "rank0_ascend_pt"
    shutil.copytree(RANK0_83, dst)
    (dst / "ASCEND_PROFILER_OUTPUT" / "trace_view.json").unlink()  # its comm ops would need every column
    wanted = frozenset({"rank", "start_ns", "dur_ns", "kind", "name"})
    some, full = read_rank(dst, wanted).events, read_rank(dst).events
    # the reader's own columns (steps, message bytes) stay; device, stream, core, family and group are not built
    assert list(some.columns) == ["rank", "kind", "name", "start_ns", "dur_ns", "step", "bytes"]
    assert len(some) == len(full) == 13
    for col in some.columns:
        assert some[col].tolist() == full[col].tolist(), col
    kd = dst / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"
    lines = kd.read_bytes().decode("utf-8").split("\r\n")
    lines[3] = lines[3].replace("3,0,", "3,x,", 1)  # Step Id 3, Device_id "x"
    kd.write_bytes("\r\n".join(lines).encode("utf-8"))
    for columns in (wanted, None):
        with pytest.raises(InputError, match=r"column 'Device_id': line 4: expected an integer, got 'x'"):
            read_rank(dst, columns)
