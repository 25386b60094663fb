"""torch_npu export_type db reader: the real 2-rank capture, and the shipped text ranks written again as db."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest
from ascend_db_synth import write_db_rank
from conftest import ROOT, need_shared, run_script
from ditpar.analysis.breakdown import COLUMNS
from ditpar.readers import load_profiles

SHIPPED = ROOT / "tests" / "data" / "ascend_cann83"
TIME_KEYS = ("rank", "family", "group", "count", "sum_us", "union_us", "exposed_us")


def _db(folder: Path, name: str) -> sqlite3.Connection:
    path = next((folder / "ASCEND_PROFILER_OUTPUT").glob(name))
    return sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)


@pytest.fixture(scope="module")
def shipped_as_db(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("db")
    for rank in sorted(SHIPPED.glob("*_ascend_pt")):
        write_db_rank(rank, base / rank.name)
    return base


def test_real_db_reproduces_its_own_step_trace_time_exactly():
    """The db keeps the profiler's own ns: every column of StepTraceTime is reproduced to the ns."""
    base = need_shared("fixtures", "ascend", "msinsight-db-level1")
    out = json.loads(run_script("step_breakdown.py", str(base), "--json", check=0).stdout)
    assert out["ranks"] == [0, 1] and out["compared"] == 2 and out["status"] == "match"
    for row in out["rows"]:
        con = sqlite3.connect(f"file:{base}/rank{row['rank']}_ascend_pt/ASCEND_PROFILER_OUTPUT/analysis.db?mode=ro&immutable=1",
                              uri=True)
        ref = con.execute("SELECT computing, communication, communication_not_overlapped, free, stage "
                          "FROM StepTraceTime WHERE step = '50'").fetchone()
        ours = (row["computing_us"], row["communication_us"], row["communication_not_overlapped_us"],
                row["free_us"], row["stage_us"])
        assert ours == pytest.approx(ref, abs=1e-6)  # float us written from the same integer ns


def test_real_db_times_are_the_tables_integers():
    """Event stamps are TASK/COMMUNICATION_OP integers, untouched (no float us in between)."""
    base = need_shared("fixtures", "ascend", "msinsight-db-level1")
    ps = load_profiles(base, workers=1)
    con = _db(base / "rank1_ascend_pt", "ascend_pytorch_profiler_*.db")
    compute = con.execute("SELECT T.startNs, T.endNs - T.startNs FROM TASK T JOIN COMPUTE_TASK_INFO C "
                          "ON C.globalTaskId = T.globalTaskId").fetchall()
    comm = con.execute("SELECT startNs, endNs - startNs FROM COMMUNICATION_OP").fetchall()
    ev = ps.events[ps.events["rank"] == 1]
    assert sorted(zip(ev["start_ns"].tolist(), ev["dur_ns"].tolist(), strict=True)) == sorted(compute + comm)
    assert ev["start_ns"].dtype == "int64" and int(ev["start_ns"].min()) == min(s for s, _ in compute + comm)
    # communicator: the op names' 3 digits, full hash = double_hash(groupName) = analysis.db group_name
    assert ps.groups["210"].full_hash == "17148521525495523210"
    assert set(ev.loc[ev["kind"] == "comm", "family"]) == {"allreduce"}
    # message bytes: COMMUNICATION_OP count x FP32 (dataType 4)
    counts = [c for (c,) in con.execute("SELECT count FROM COMMUNICATION_OP ORDER BY startNs")]
    assert ev.loc[ev["kind"] == "comm", "bytes"].tolist() == [4 * c for c in counts]
    assert ps.bytes_from == {0: "message", 1: "message"}


def test_real_db_collectives_equal_communication_op_sums():
    base = need_shared("fixtures", "ascend", "msinsight-db-level1")
    out = json.loads(run_script("collectives.py", str(base), "--json", check=0).stdout)
    for rank in (0, 1):
        con = _db(base / f"rank{rank}_ascend_pt", "ascend_pytorch_profiler_*.db")
        total_ns = con.execute("SELECT sum(endNs - startNs), count(*) FROM COMMUNICATION_OP").fetchone()
        row = next(r for r in out["collectives"] if r["rank"] == rank)
        assert (row["count"], row["sum_us"]) == (total_ns[1], total_ns[0] / 1000)
        # communication.json's analysis.db twin: the per-op wait time, summed, in us
        con = _db(base / f"rank{rank}_ascend_pt", "analysis.db")
        wait_ms = con.execute("SELECT sum(wait_time) FROM CommAnalyzerTime").fetchone()[0]
        assert row["wait_us"] == pytest.approx(wait_ms * 1000, rel=1e-9)


def test_text_and_db_captures_each_match_their_own_step_trace():
    """msinsight text-level1 and db-level1 are two captures of one job: each agrees with its profiler."""
    for name in ("msinsight-text-level1", "msinsight-db-level1"):
        base = need_shared("fixtures", "ascend", name)
        out = json.loads(run_script("step_breakdown.py", str(base), "--json", check=0).stdout)
        assert out["status"] == "match" and out["compared"] == 2, name


def test_shipped_ranks_as_db_give_the_text_answers(shipped_as_db):
    """Same tasks written as db: step_breakdown rows and collective times equal the text reader's."""
    text = json.loads(run_script("step_breakdown.py", str(SHIPPED), "--json", check=0).stdout)
    db = json.loads(run_script("step_breakdown.py", str(shipped_as_db), "--json", check=0).stdout)
    assert db["ranks"] == text["ranks"] == [0, 2]
    keep = ("rank", "step", *COLUMNS, "reference", "max_abs_diff_us", "segments", "evidence")
    assert [{k: r[k] for k in keep} for r in db["rows"]] == [{k: r[k] for k in keep} for r in text["rows"]]
    # the db holds the profiler's own ns: no rounding of stamps to allow for
    assert {r["stamp_error_ns"] for r in db["rows"]} == {0} and {r["stamp_error_ns"] for r in text["rows"]} == {1}
    text_c = json.loads(run_script("collectives.py", str(SHIPPED), "--json", check=0).stdout)["collectives"]
    db_c = json.loads(run_script("collectives.py", str(shipped_as_db), "--json", check=0).stdout)["collectives"]
    assert [{k: r[k] for k in TIME_KEYS} for r in db_c] == [{k: r[k] for k in TIME_KEYS} for r in text_c]


def test_db_groups_come_from_meta_data_parallel_group_info(shipped_as_db):
    ps = load_profiles(shipped_as_db, workers=1)
    text = load_profiles(SHIPPED, workers=1)
    for key in ("097", "170"):
        assert (ps.groups[key].role, ps.groups[key].ranks) == (text.groups[key].role, text.groups[key].ranks)


def test_text_export_wins_when_both_are_present(tmp_path):
    """A folder with kernel_details.csv and a db is read from the text (the established reader)."""
    rank = sorted(SHIPPED.glob("*_ascend_pt"))[0]
    both = write_db_rank(rank, tmp_path / rank.name)
    for f in (rank / "ASCEND_PROFILER_OUTPUT").iterdir():
        (both / "ASCEND_PROFILER_OUTPUT" / f.name).write_bytes(f.read_bytes())
    ps = load_profiles(both, workers=1)
    assert any(p.name == "kernel_details.csv" for p in ps.sources[0])


def _cut_before_checkpoint(rank: Path, dst: Path, shift_ns: int) -> Path:
    """A copy of a db rank as a run cut before its checkpoint leaves it: the profiler db in WAL mode, its
    last transaction (every TASK time + shift_ns) only in the -wal file beside it (no -shm)."""
    live = dst / "live" / rank.name
    shutil.copytree(rank, live)
    db = next((live / "ASCEND_PROFILER_OUTPUT").glob("ascend_pytorch_profiler*.db"))
    con = sqlite3.connect(db)
    assert con.execute("PRAGMA journal_mode=WAL").fetchone() == ("wal",)
    con.execute("PRAGMA wal_autocheckpoint=0")
    con.execute("UPDATE TASK SET startNs = startNs + ?, endNs = endNs + ?", (shift_ns, shift_ns))
    con.commit()
    snap = dst / "snap" / rank.name
    shutil.copytree(live, snap)  # while the writer is open: the update is in the copied -wal only
    con.close()
    for shm in snap.rglob("*-shm"):
        shm.unlink()
    assert next((snap / "ASCEND_PROFILER_OUTPUT").glob("*.db-wal")).stat().st_size > 0
    return snap


def _compute_starts(path: Path):
    ps = load_profiles(path, workers=1)
    ev = ps.events
    return sorted(ev.loc[ev["kind"] == "compute", "start_ns"].tolist())


def test_wal_database_is_read_with_its_log_and_nothing_is_written_beside_it(shipped_as_db, tmp_path):
    rank = sorted(shipped_as_db.glob("*_ascend_pt"))[0]
    snap = _cut_before_checkpoint(rank, tmp_path, 1000)
    before = sorted(p.name for p in (snap / "ASCEND_PROFILER_OUTPUT").iterdir())
    assert _compute_starts(snap) == [s + 1000 for s in _compute_starts(rank)]  # the logged rows count
    assert sorted(p.name for p in (snap / "ASCEND_PROFILER_OUTPUT").iterdir()) == before  # no -shm made
    # the same db without its log: the main file alone (the rows before the last transaction), still no files
    next((snap / "ASCEND_PROFILER_OUTPUT").glob("*.db-wal")).unlink()
    assert _compute_starts(snap) == _compute_starts(rank)
    assert [p.name for p in (snap / "ASCEND_PROFILER_OUTPUT").iterdir() if p.name.endswith(("-wal", "-shm"))] == []


@pytest.mark.parametrize("given", ["PROF_000001_20250101/device_0/msprof_20250101.db", "PROF_000001_20250101", "."])
def test_cann_msprof_output_is_named_as_unsupported(tmp_path, given):
    """msprof's own PROF_*/msprof_*.db: one line naming it and what to give instead (exit 2)."""
    db = tmp_path / "PROF_000001_20250101" / "device_0" / "msprof_20250101.db"
    db.parent.mkdir(parents=True)
    sqlite3.connect(db).execute("CREATE TABLE TASK (startNs INTEGER)").connection.commit()
    for script in ("step_breakdown.py", "collectives.py"):
        err = run_script(script, str(tmp_path / given), check=2).stderr.strip()
        assert len(err.splitlines()) == 1 and "PROF_" in err and "is not read" in err and "_ascend_pt" in err, err
