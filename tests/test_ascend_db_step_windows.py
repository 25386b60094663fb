"""db step windows against windows worked out here from the raw tables: the first start and the last end of
every task launched inside each host span, the end never before the span's own end; launches placed in
spans by a binary search, communication ops in the first window that holds their start."""

from __future__ import annotations

import sqlite3

import numpy as np
import pytest
from ascend_db_synth import write_db_rank
from conftest import ROOT, run_script
from ditpar.readers import load_profiles
from ditpar.readers.ascend import db as ascend_db

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


def test_windows_are_the_hand_windows(tmp_path):
    rank = write_db_rank(RANK0, tmp_path / "a" / RANK0.name)
    _spread_tasks(_db(rank))
    expected = _windows_by_hand(_db(rank))
    assert len(expected) == 2 and expected[0][2] > 1764246877073869640  # the moved tasks set the ends
    ps = load_profiles(rank, workers=1)
    got = [(int(s), int(a), int(b)) for s, a, b in ps.steps[["step", "start_ns", "end_ns"]].itertuples(index=False)]
    assert got == expected


def test_span_of_is_a_binary_search_of_disjoint_spans():
    """Each launch gets the span that holds it whole; one that straddles a border or lies between spans
    gets -1 (a launch at a shared border belongs to the span that starts there)."""
    starts, ends = np.array([10, 20, 30, 45, 60], dtype=np.int64), np.array([20, 30, 40, 50, 70], dtype=np.int64)
    launches = {(10, 12): 0, (20, 20): 1, (25, 30): 1, (29, 31): -1, (40, 41): -1, (46, 50): 3,
                (60, 70): 4, (70, 71): -1, (5, 9): -1, (33, 39): 2}
    a = np.array([k[0] for k in launches], dtype=np.int64)
    b = np.array([k[1] for k in launches], dtype=np.int64)
    assert ascend_db._span_of(starts, ends, a, b).tolist() == list(launches.values())


def test_first_window_takes_each_point_once_in_window_order():
    """Overlapping windows: a point belongs to the first window (in step order) that holds it."""
    w_start = np.array([0, 5, 20, 3], dtype=np.int64)
    w_end = np.array([10, 25, 30, 4], dtype=np.int64)
    points = np.array([9, 10, 3, 24, 25, 30, -1, 5, 29, 3], dtype=np.int64)
    assert ascend_db._first_window(w_start, w_end, points).tolist() == [0, 1, 0, 1, 2, -1, -1, 0, 2, 0]
    assert ascend_db._first_window(w_start, w_end, np.zeros(0, dtype=np.int64)).tolist() == []


def test_launch_table_without_its_primary_key_gives_the_same_answer(tmp_path):
    """A CANN_API whose connectionId is not its key: the same windows and events; a connection id that
    two launches share is refused, naming both rows."""
    rank = write_db_rank(RANK0, tmp_path / RANK0.name)
    plain = load_profiles(rank, workers=1)
    con = sqlite3.connect(_db(rank))
    con.executescript("CREATE TABLE API2 AS SELECT * FROM CANN_API; DROP TABLE CANN_API; "
                      "ALTER TABLE API2 RENAME TO CANN_API;")
    con.close()
    again = load_profiles(rank, workers=1)
    assert again.steps.equals(plain.steps) and again.events.equals(plain.events)
    con = sqlite3.connect(_db(rank))
    con.execute("INSERT INTO CANN_API SELECT startNs, endNs, type, globalTid, connectionId, name, depth FROM CANN_API "
                "WHERE rowid = 3")
    n = con.execute("SELECT COUNT(*) FROM CANN_API").fetchone()[0]
    con.commit()
    con.close()
    err = run_script("step_breakdown.py", str(rank), check=2).stderr.strip()
    assert len(err.splitlines()) == 1 and f"table CANN_API rows 3 and {n}: connectionId" in err, err


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
    row = con_row(_db(rank), tid)
    assert err.endswith(f"table COMPUTE_TASK_INFO row {row} column {column}: 'x': expected a STRING_IDS id in "
                        "0..2**63-1 or empty"), err
    assert len(err.splitlines()) == 1 and len(plain) == 13


def con_row(db, tid: int) -> int:
    """Position (from 1, storage order) of COMPUTE_TASK_INFO's row of task ``tid``."""
    con = sqlite3.connect(db)
    ids = [t for (t,) in con.execute("SELECT globalTaskId FROM COMPUTE_TASK_INFO ORDER BY rowid")]
    con.close()
    return ids.index(tid) + 1
