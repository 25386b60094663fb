"""The db reader on hostile input (round 3): the per-table schema check, identifiers that need quoting,
exact int64 stamps, STEP_TIME structure, and step assignment on many spans, each with answers
worked out here (tests/damaged_corpus_r3_db.py runs the scripts end to end)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest
from ascend_db_synth import SPAN_NS, T0, write_db_rank, write_many_spans
from conftest import ROOT
from ditpar.errors import InputError
from ditpar.readers import load_profiles
from ditpar.readers.ascend import db as ascend_db
from ditpar.readers.ascend.db import Col

RANK0 = sorted((ROOT / "tests" / "data" / "ascend_cann83").glob("*_ascend_pt"))[0]


def _db(rank: Path) -> Path:
    return next((rank / "ASCEND_PROFILER_OUTPUT").glob("ascend_pytorch_profiler_*.db"))


def _table(folder: Path, rows: list[tuple], decl: str = "a, b") -> Path:
    """A db file with one table T (untyped columns unless ``decl`` says otherwise) holding ``rows``."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "t.db"
    con = sqlite3.connect(path)
    con.execute(f"CREATE TABLE T ({decl})")
    con.executemany(f"INSERT INTO T VALUES ({', '.join('?' * len(rows[0]))})", rows)
    con.commit()
    con.close()
    return path


def _check(path: Path, schema: dict[str, Col]) -> str | None:
    db = ascend_db._Db(path)
    try:
        db.check("T", schema)
    except InputError as exc:
        return str(exc)
    finally:
        db.close()
    return None


def test_schema_check_names_table_row_column_value_and_expectation(tmp_path):
    count = {"a": Col("int", 0, 10, what="a count")}
    path = _table(tmp_path / "a", [(3, "x"), (11, "y"), (7, "z")])
    assert _check(path, count) == f"{path}: table T row 2 column a: 11: expected a count in 0..10"
    path = _table(tmp_path / "b", [(3, "x"), (2.5, "y")])
    assert _check(path, count) == f"{path}: table T row 2 column a: 2.5: expected a count in 0..10"
    # an untyped column keeps '7' as TEXT: refused where an INTEGER belongs
    path = _table(tmp_path / "c", [("7", 1)])
    assert _check(path, count) == f"{path}: table T row 1 column a: '7': expected a count in 0..10"
    # rows are counted in storage order, not by rowid (an INTEGER PRIMARY KEY of 500 is still row 2)
    path = _table(tmp_path / "d", [(3, 1), (500, 12)], decl="b INTEGER PRIMARY KEY, a")
    assert _check(path, count) == f"{path}: table T row 2 column a: 12: expected a count in 0..10"


@pytest.mark.parametrize(("kind", "good", "bad"), [
    ("int_text", [5, "08", " 7 ", None, ""], ["1x", "-3", 11.0, "99999999999999999999", 2.5]),
    ("num", [0, 2.5, "1.5", " 3 ", None], ["nan", "inf", 1e308, -0.5, "x", b"\x00"]),
    ("int", [0, 10, None], [-1, 11, "3", 1.5, 2**62]),
])
def test_schema_kinds_accept_and_refuse_exactly(tmp_path, kind, good, bad):
    col = {"a": Col(kind, 0, 10, True, "a value")}
    for i, value in enumerate(good):
        assert _check(_table(tmp_path / f"g{i}", [(value, 0)]), col) is None, value
    for i, value in enumerate(bad):
        msg = _check(_table(tmp_path / f"b{i}", [(1, 0), (value, 0)]), col)
        assert msg is not None and "table T row 2 column a: " in msg and msg.endswith(
            "expected a value in 0..10 or empty"), (value, msg)


def test_identifiers_are_quoted():
    assert ascend_db.ident('we"ird') == '"we""ird"'
    assert ascend_db.ident("TASK") == '"TASK"'


def test_a_table_named_with_a_quote_reads_as_without_it(tmp_path):
    """A table and a column whose names hold double quotes (and one named like an injection) neither break
    the schema read nor change the answer."""
    plain = write_db_rank(RANK0, tmp_path / "plain" / RANK0.name)
    odd = write_db_rank(RANK0, tmp_path / "odd" / RANK0.name)
    con = sqlite3.connect(_db(odd))
    con.execute('CREATE TABLE "we""ird" ("x""y" INTEGER)')
    con.execute('CREATE TABLE "TASK"") --" (a)')
    con.commit()
    con.close()
    a, b = load_profiles(plain, workers=1), load_profiles(odd, workers=1)
    assert a.events.equals(b.events) and a.steps.equals(b.steps)
    db = ascend_db._Db(_db(odd))
    try:
        assert db.tables['we"ird'] == ('x"y',) and db.tables['TASK") --'] == ("a",)
    finally:
        db.close()


def test_stamps_near_2_62_stay_exact(tmp_path):
    """Stamps float64 cannot hold (odd, above 2**53) come through to the ns: never via float."""
    rank = write_db_rank(RANK0, tmp_path / RANK0.name)
    shift = 2**62 - 2 * 1_764_246_877_074_100_000 + 1_000_001  # odd; every stamp stays below 2**62
    con = sqlite3.connect(_db(rank))
    for table in ("TASK", "COMMUNICATION_OP", "CANN_API", "STEP_TIME"):
        con.execute(f"UPDATE {table} SET startNs = startNs + ?, endNs = endNs + ?", (shift, shift))
    want = sorted(s for (s,) in con.execute("SELECT T.startNs FROM TASK T JOIN COMPUTE_TASK_INFO C "
                                            "ON C.globalTaskId = T.globalTaskId"))
    con.commit()
    con.close()
    assert want[0] > 2**61 and want[0] % 2 == 1 and float(want[0]) != want[0]
    ev = load_profiles(rank, workers=1).events
    assert sorted(ev.loc[ev["kind"] == "compute", "start_ns"].tolist()) == want


def test_overlapping_step_spans_are_named(tmp_path):
    rank = write_db_rank(RANK0, tmp_path / RANK0.name)
    con = sqlite3.connect(_db(rank))
    (s1, e1), (_, e2) = con.execute("SELECT startNs, endNs FROM STEP_TIME ORDER BY rowid").fetchall()
    con.execute("UPDATE STEP_TIME SET startNs = ? WHERE rowid = 2", (e1 - 5,))
    con.commit()
    con.close()
    with pytest.raises(InputError) as err:
        load_profiles(rank, workers=1)
    assert str(err.value) == (f"{_db(rank)}: table STEP_TIME rows 1 and 2: overlapping spans ({s1}..{e1} and "
                              f"{e1 - 5}..{e2} ns); expected one ProfilerStep span after another")


def test_many_spans_place_every_task_and_op(tmp_path):
    """3,000 spans, written in reverse order: every window, kernel step and op step is the one the
    generator's arithmetic gives (see write_many_spans); an op in two windows goes to the first."""
    n = 3000
    ps = load_profiles(write_many_spans(RANK0, tmp_path / RANK0.name, n), workers=1)
    s = T0 + np.arange(n, dtype=np.int64) * SPAN_NS
    assert ps.steps["step"].tolist() == list(range(1, n + 1))
    assert ps.steps["start_ns"].tolist() == (s + 500).tolist()
    assert ps.steps["end_ns"].tolist() == np.where(np.arange(n) % 3 == 0, s + 1700, s + 1500).tolist()
    ev = ps.events
    comp = ev[ev["kind"] == "compute"].sort_values("start_ns")
    assert comp["step"].tolist()[:n] == list(range(1, n + 1)) and comp["step"].isna().tolist()[n:] == [True]
    ops = ev[ev["kind"] == "comm"].sort_values("start_ns")
    i = np.arange(n)
    want = np.where((i >= 1) & ((i - 1) % 3 == 0), i, i + 1)
    assert ops["start_ns"].tolist() == (s + 600).tolist() and ops["step"].tolist() == want.tolist()
    assert ops["bytes"].tolist() == [2048] * n  # count 1024 x FP16


def test_metadata_json_with_a_bom_is_read(tmp_path):
    path = tmp_path / "profiler_metadata.json"
    path.write_bytes(b'\xef\xbb\xbf{"parallel_group_info": {"g": {"group_name": "tp", "global_ranks": [0, 2]}, "x": 1}}')
    assert ascend_db._metadata_groups(path) == {"g": {"group_name": "tp", "global_ranks": [0, 2]}}


def test_rank_from_a_huge_file_name_is_bounded(tmp_path):
    rank = write_db_rank(RANK0, tmp_path / RANK0.name)
    con = sqlite3.connect(_db(rank))
    con.execute("DELETE FROM RANK_DEVICE_MAP")
    con.commit()
    con.close()
    path = _db(rank).rename(_db(rank).with_name("ascend_pytorch_profiler_99999999.db"))
    db = ascend_db._Db(path)
    try:
        with pytest.raises(InputError) as err:
            ascend_db._db_rank(db, path)
    finally:
        db.close()
    assert str(err.value) == (f"{path}: rank in the file name: '99999999' is out of range; "
                              "expected an integer 0..1048575")


def test_two_steps_with_the_same_zero_length_span_are_named(tmp_path):
    rank = write_db_rank(RANK0, tmp_path / RANK0.name)
    con = sqlite3.connect(_db(rank))
    (s1, _), _ = con.execute("SELECT startNs, endNs FROM STEP_TIME ORDER BY rowid").fetchall()
    con.execute("UPDATE STEP_TIME SET startNs = ?, endNs = ?", (s1, s1))
    con.commit()
    con.close()
    with pytest.raises(InputError) as err:
        load_profiles(rank, workers=1)
    assert str(err.value) == (f"{_db(rank)}: table STEP_TIME rows 1 and 2: the same span ({s1}..{s1} and {s1}..{s1} "
                              "ns); expected one ProfilerStep span after another")


def test_a_compute_info_row_given_twice_is_refused_naming_its_rows(tmp_path):
    """Repeated rows are refused, not counted once with a warning: torch_npu keys TASK and
    COMPUTE_TASK_INFO by globalTaskId, so a copy is damage (the kernel would count twice)."""
    rank = write_db_rank(RANK0, tmp_path / RANK0.name)
    con = sqlite3.connect(_db(rank))
    con.executescript("CREATE TABLE C2 AS SELECT * FROM COMPUTE_TASK_INFO ORDER BY globalTaskId; "
                      "DROP TABLE COMPUTE_TASK_INFO; ALTER TABLE C2 RENAME TO COMPUTE_TASK_INFO;")
    n, gid = con.execute("SELECT COUNT(*), MAX(globalTaskId) FROM COMPUTE_TASK_INFO").fetchone()
    con.execute("INSERT INTO COMPUTE_TASK_INFO SELECT * FROM COMPUTE_TASK_INFO WHERE globalTaskId = ?", (gid,))
    start = con.execute("SELECT startNs FROM TASK WHERE globalTaskId = ?", (gid,)).fetchone()[0]
    con.commit()
    con.close()
    with pytest.raises(InputError) as err:
        load_profiles(rank, workers=1)
    assert str(err.value) == (f"{_db(rank)}: table COMPUTE_TASK_INFO rows {n} and {n + 1}: globalTaskId {gid} twice "
                              f"(startNs {start}); expected one row per task (a repeated row would count the kernel "
                              "twice)")


def test_unknown_schema_quotes_the_field_it_checks(tmp_path):
    """SCHEMA_VERSION_MAJOR is what is checked: the message quotes it (before, it quoted SCHEMA_VERSION,
    which here still reads '1.0.0' and so named a version the reader knows)."""
    rank = write_db_rank(RANK0, tmp_path / RANK0.name)
    con = sqlite3.connect(_db(rank))
    con.execute("UPDATE META_DATA SET value = '7' WHERE name = 'SCHEMA_VERSION_MAJOR'")
    con.commit()
    con.close()
    with pytest.raises(InputError) as err:
        load_profiles(rank, workers=1)
    assert str(err.value) == (f"{_db(rank)}: table META_DATA: SCHEMA_VERSION_MAJOR '7' (SCHEMA_VERSION '1.0.0'); "
                              "this reader knows major version(s) ['1']")
