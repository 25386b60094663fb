"""The db reader's task read: a stamp not stored as an integer is named (exit 2), wherever the row is."""

from __future__ import annotations

import sqlite3

import pytest
from ascend_db_synth import write_db_rank
from conftest import ROOT, run_script

RANK0 = sorted((ROOT / "tests" / "data" / "ascend_cann83").glob("*_ascend_pt"))[0]


@pytest.mark.parametrize("rows", ["compute", "other"])
def test_a_real_stamp_in_task_is_one_line_naming_the_table(tmp_path, rows):
    """A REAL startNs on a compute kernel's TASK row (read row by row) or on a communication task's
    (aggregated in SQLite for the step windows) is refused, not cast: exit 2, one line, table TASK."""
    rank = write_db_rank(RANK0, tmp_path / RANK0.name)
    db = next((rank / "ASCEND_PROFILER_OUTPUT").glob("ascend_pytorch_profiler_*.db"))
    con = sqlite3.connect(db)
    test = "IN" if rows == "compute" else "NOT IN"
    tid = con.execute(f"SELECT globalTaskId FROM TASK WHERE globalTaskId {test} "
                      "(SELECT globalTaskId FROM COMPUTE_TASK_INFO) ORDER BY startNs LIMIT 1 OFFSET 3").fetchone()[0]
    # a REAL with a fraction (an integral REAL, as every float at ns magnitude is, is stored back as an integer)
    con.execute("UPDATE TASK SET startNs = 1.25 WHERE globalTaskId = ?", (tid,))
    assert con.execute("SELECT typeof(startNs) FROM TASK WHERE globalTaskId = ?", (tid,)).fetchone() == ("real",)
    con.commit()
    con.close()
    err = run_script("step_breakdown.py", str(rank), check=2).stderr.strip()
    assert len(err.splitlines()) == 1 and "table TASK" in err and "integer" in err and ".25" in err, err


def test_string_ids_too_large_to_pack_give_the_same_events(tmp_path):
    """Name ids beyond 2**21 are read unpacked: the same kernels, names and types as the small ids give."""
    from ditpar.readers import load_profiles

    small = write_db_rank(RANK0, tmp_path / "small" / RANK0.name)
    large = write_db_rank(RANK0, tmp_path / "large" / RANK0.name)
    db = next((large / "ASCEND_PROFILER_OUTPUT").glob("ascend_pytorch_profiler_*.db"))
    con = sqlite3.connect(db)
    shift = 1 << 40
    con.execute("UPDATE STRING_IDS SET id = id + ? WHERE id IN (SELECT name FROM COMPUTE_TASK_INFO)", (shift,))
    con.execute("UPDATE COMPUTE_TASK_INFO SET name = name + ?", (shift,))
    con.commit()
    con.close()
    a, b = load_profiles(small, workers=1).events, load_profiles(large, workers=1).events
    assert len(a) > 10 and a.equals(b)
