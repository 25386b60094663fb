"""db step windows placed inside SQLite (one join of TASK to its launch) against the row-by-row path and
against windows worked out here from the raw tables: the first start and the last end of every task
launched inside each host span, the end never before the span's own end."""

from __future__ import annotations

import sqlite3

import numpy as np
import pytest
from ascend_db_synth import write_db_rank
from conftest import ROOT, run_script
from ditpar.readers import ascend_db, load_profiles

RANK0 = sorted((ROOT / "tests" / "data" / "ascend_cann83").glob("*_ascend_pt"))[0]


def _db(rank):
    return next((rank / "ASCEND_PROFILER_OUTPUT").glob("ascend_pytorch_profiler_*.db"))


def _windows_by_hand(db) -> list[tuple[int, int, int]]:
    """(step, start, end) from the raw rows, with Python loops and no SQL join."""
    con = sqlite3.connect(db)
    host = con.execute("SELECT id, startNs, endNs FROM STEP_TIME ORDER BY startNs").fetchall()
    api = {c: (s, e) for s, e, c in con.execute("SELECT startNs, endNs, connectionId FROM CANN_API WHERE type = 10000")}
    tasks = con.execute("SELECT startNs, endNs, connectionId FROM TASK").fetchall()
    con.close()
    out = []
    for step, h_start, h_end in host:
        mine = [(s, e) for s, e, c in tasks if c in api and api[c][0] >= h_start and api[c][1] <= h_end]
        if mine:
            out.append((step, min(s for s, _ in mine), max(max(e for _, e in mine), h_end)))
        else:
            out.append((step, h_start, h_end))
    return out


def _spread_tasks(db) -> None:
    """Move a communication task (not a compute kernel) of each step past everything else, so that the
    window's end comes from a TASK row the compute query never reads."""
    con = sqlite3.connect(db)
    late = con.execute("SELECT MAX(endNs) FROM TASK").fetchone()[0] + 5_000
    for i, (tid,) in enumerate(con.execute("SELECT globalTaskId FROM TASK WHERE globalTaskId NOT IN "
                                           "(SELECT globalTaskId FROM COMPUTE_TASK_INFO) ORDER BY startNs").fetchall()):
        con.execute("UPDATE TASK SET startNs = ?, endNs = ? WHERE globalTaskId = ?", (late + 10 * i, late + 10 * i + 7, tid))
    con.commit()
    con.close()


def test_joined_windows_are_the_hand_windows_and_the_row_path(tmp_path, monkeypatch):
    rank = write_db_rank(RANK0, tmp_path / "a" / RANK0.name)
    _spread_tasks(_db(rank))
    expected = _windows_by_hand(_db(rank))
    assert len(expected) == 2 and expected[0][2] > 1764246877073869640  # the moved tasks set the ends
    joined = load_profiles(rank, workers=1)
    got = [(int(s), int(a), int(b)) for s, a, b in joined.steps[["step", "start_ns", "end_ns"]].itertuples(index=False)]
    assert got == expected
    monkeypatch.setattr(ascend_db, "_span_case", lambda h_start, h_end: None)  # the row-by-row path
    rows = load_profiles(rank, workers=1)
    assert rows.steps.equals(joined.steps) and rows.events.equals(joined.events)


def test_span_case_is_a_binary_search_of_disjoint_spans():
    """Each launch gets the span that holds it whole; one that straddles a border or lies between spans
    gets NULL; overlapping or reversed spans give no expression (the row-by-row path)."""
    starts, ends = np.array([10, 20, 30, 45, 60], dtype=np.int64), np.array([20, 30, 40, 50, 70], dtype=np.int64)
    sql = ascend_db._span_case(starts, ends)
    con = sqlite3.connect(":memory:")
    launches = {(10, 12): 0, (20, 20): 1, (25, 30): 1, (29, 31): None, (40, 41): None, (46, 50): 3,
                (60, 70): 4, (70, 71): None, (5, 9): None, (33, 39): 2}
    for (a, b), want in launches.items():
        got = con.execute(f"SELECT {sql} FROM (SELECT ? AS startNs, ? AS endNs) A", (a, b)).fetchone()[0]
        assert got == want, (a, b)
    assert ascend_db._span_case(np.array([10, 15]), np.array([20, 30])) is None      # overlap
    assert ascend_db._span_case(np.array([10]), np.array([5])) is None               # end before start


def test_launch_table_without_its_primary_key_takes_the_row_path(tmp_path, monkeypatch):
    """A CANN_API whose connectionId is not its key could repeat a launch: no join, the same answer."""
    rank = write_db_rank(RANK0, tmp_path / RANK0.name)
    plain = load_profiles(rank, workers=1)
    con = sqlite3.connect(_db(rank))
    con.executescript("CREATE TABLE API2 AS SELECT * FROM CANN_API; DROP TABLE CANN_API; "
                      "ALTER TABLE API2 RENAME TO CANN_API;")
    con.close()
    called = []
    monkeypatch.setattr(ascend_db, "_joined_step_windows", lambda *a: called.append(a))
    again = load_profiles(rank, workers=1)
    assert not called and again.steps.equals(plain.steps) and again.events.equals(plain.events)


def test_a_text_stamp_in_a_launch_is_one_line_naming_cann_api(tmp_path):
    rank = write_db_rank(RANK0, tmp_path / RANK0.name)
    con = sqlite3.connect(_db(rank))
    con.execute("UPDATE CANN_API SET endNs = 'late' WHERE connectionId = (SELECT MIN(connectionId) FROM CANN_API)")
    con.commit()
    con.close()
    err = run_script("step_breakdown.py", str(rank), check=2).stderr.strip()
    assert len(err.splitlines()) == 1 and "table CANN_API" in err and "'late'" in err, err


@pytest.mark.parametrize("column", ["name", "opType"])
def test_a_string_id_stored_as_text_is_named_by_the_unpacked_read(tmp_path, column):
    """An id that is not an integer cannot be packed: the read is made again with the ids apart, which
    refuses the cell and names it (exit 2, one line)."""
    rank = write_db_rank(RANK0, tmp_path / RANK0.name)
    plain = load_profiles(rank, workers=1).events
    con = sqlite3.connect(_db(rank))
    tid = con.execute("SELECT MIN(globalTaskId) FROM COMPUTE_TASK_INFO").fetchone()[0]
    con.execute(f"UPDATE COMPUTE_TASK_INFO SET {column} = 'x' WHERE globalTaskId = ?", (tid,))
    con.commit()
    con.close()
    err = run_script("step_breakdown.py", str(rank), check=2).stderr.strip()
    assert len(err.splitlines()) == 1 and "table TASK" in err and "'x'" in err, err
    assert len(plain) == 13
