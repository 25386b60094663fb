"""--profiler-tables: step and collective figures from the profiler's own summary tables, no task row read."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest
from ascend_db_synth import write_db_rank
from conftest import ROOT, need_shared, run_script
from ditpar.analysis.breakdown import COLUMNS
from ditpar.errors import InputError
from ditpar.readers import load_profiles

SHIPPED = ROOT / "tests" / "data" / "ascend_cann83"
REAL_DB = ("fixtures", "ascend", "msinsight-db-level1")


def _analysis(base: Path, rank: int) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{base}/rank{rank}_ascend_pt/ASCEND_PROFILER_OUTPUT/analysis.db?mode=ro&immutable=1",
                           uri=True)


def _json(script: str, *args: str, check: int = 0) -> dict:
    return json.loads(run_script(script, *args, "--json", check=check).stdout)


@pytest.fixture(scope="module")
def real_without_tasks(tmp_path_factory) -> Path:
    """The real db capture with its TASK table dropped: a tables-only read must not notice."""
    base = need_shared(*REAL_DB)
    copy = tmp_path_factory.mktemp("notask") / "run"
    shutil.copytree(base, copy)
    for db in copy.rglob("ascend_pytorch_profiler_*.db"):
        con = sqlite3.connect(db)
        con.execute("DROP TABLE TASK")
        con.commit()
        con.close()
    return copy


def test_step_rows_are_step_trace_time_and_agree_with_the_tasks():
    """Each row is analysis.db StepTraceTime (read here directly) and within the stated tolerance of
    what the task rows give on the same capture."""
    base = need_shared(*REAL_DB)
    tables = _json("step_breakdown.py", str(base), "--profiler-tables")
    tasks = _json("step_breakdown.py", str(base))
    assert tables["status"] == "profiler-only" and tables["source"] == "profiler tables"
    assert tables["compared"] == 0 and tables["evidence"] == {"0": ["step_trace", "communication", "links"],
                                                               "1": ["step_trace", "communication", "links"]}
    assert [(r["rank"], r["step"]) for r in tables["rows"]] == [(0, 50), (1, 50)]
    for row, full in zip(tables["rows"], tasks["rows"], strict=True):
        ref = _analysis(base, row["rank"]).execute(
            "SELECT computing, communication, communication_not_overlapped, overlapped, free, stage, bubble "
            "FROM StepTraceTime WHERE step = '50'").fetchone()
        assert tuple(row[c] for c in COLUMNS) == pytest.approx(ref, abs=1e-9)
        for c in COLUMNS:
            if c in full["tolerance_us"]:
                assert abs(row[c] - full[c]) <= full["tolerance_us"][c], c


def test_collective_rows_are_comm_analyzer_time_and_agree_with_the_ops():
    """count and sum per communicator: CommAnalyzerTime (ms, read here) and COMMUNICATION_OP (ns) agree."""
    base = need_shared(*REAL_DB)
    out = _json("collectives.py", str(base), "--profiler-tables")
    assert out["source"] == "profiler tables" and out["ranks"] == []
    for rank in (0, 1):
        row = next(r for r in out["collectives"] if r["rank"] == rank)
        con = _analysis(base, rank)
        elapse_ms = [e for (e,) in con.execute("SELECT elapse_time FROM CommAnalyzerTime")]
        wait_ms = con.execute("SELECT sum(wait_time) FROM CommAnalyzerTime").fetchone()[0]
        n = len(elapse_ms)
        assert (row["count"], row["family"], row["group"]) == (n, "allreduce", "210")
        assert row["sum_us"] == sum(round(e * 1e6) for e in elapse_ms) / 1000  # each op's ms to whole ns
        assert row["wait_us"] == pytest.approx(wait_ms * 1000, rel=1e-12)
        assert row["union_us"] is None and row["exposed_us"] is None  # kernel-level: not from the tables
        con = sqlite3.connect(next((base / f"rank{rank}_ascend_pt").rglob("ascend_pytorch_profiler_*.db")).as_uri()
                              + "?mode=ro&immutable=1", uri=True)
        ops_ns = con.execute("SELECT count(*), sum(endNs - startNs) FROM COMMUNICATION_OP").fetchone()
        assert row["count"] == ops_ns[0] and row["sum_us"] == pytest.approx(ops_ns[1] / 1000, abs=0.001 * n)
    assert {(lk["rank"], lk["link"]) for lk in out["links"]} >= {(0, "0-1"), (1, "1-0")}


def test_no_task_row_is_read(real_without_tasks):
    """A db without its TASK table: the tables-only read gives the same rows; the task read names TASK."""
    base = need_shared(*REAL_DB)
    for script in ("step_breakdown.py", "collectives.py"):
        want = _json(script, str(base), "--profiler-tables")
        got = _json(script, str(real_without_tasks), "--profiler-tables")
        key = "rows" if script == "step_breakdown.py" else "collectives"
        assert got[key] == want[key]
    err = run_script("step_breakdown.py", str(real_without_tasks), check=2).stderr.strip()
    assert len(err.splitlines()) == 1 and "missing table TASK" in err, err


def test_text_and_db_tables_give_the_same_step_rows(tmp_path):
    """The shipped text ranks and the same ranks written as db (StepTraceTime): one answer."""
    for rank in sorted(SHIPPED.glob("*_ascend_pt")):
        write_db_rank(rank, tmp_path / rank.name)
    text = _json("step_breakdown.py", str(SHIPPED), "--profiler-tables")
    db = _json("step_breakdown.py", str(tmp_path), "--profiler-tables")
    assert text["rows"] and db["rows"] == text["rows"]
    assert {r: v for r, v in db["evidence"].items()} == {"0": ["step_trace"], "2": ["step_trace"]}


def test_a_missing_summary_table_is_one_line_naming_what_is_there(tmp_path):
    """No CommAnalyzerTime: collectives exits 2 naming the rank and what it has; no analysis.db: the
    folder's files are listed; a Kineto trace has no tables at all."""
    for rank in sorted(SHIPPED.glob("*_ascend_pt")):
        write_db_rank(rank, tmp_path / "a" / rank.name)  # analysis.db holds StepTraceTime only
        write_db_rank(rank, tmp_path / "b" / rank.name, with_analysis=False)
    err = run_script("collectives.py", str(tmp_path / "a"), "--profiler-tables", check=2).stderr.strip()
    assert len(err.splitlines()) == 1 and "communication" in err and "rank 0: step_trace" in err, err
    err = run_script("step_breakdown.py", str(tmp_path / "b"), "--profiler-tables", check=2).stderr.strip()
    assert len(err.splitlines()) == 1 and "no analysis.db" in err and "ascend_pytorch_profiler_" in err, err
    with pytest.raises(InputError, match="no profiler summary tables"):
        load_profiles(_empty_rank(tmp_path), tasks=False)
    kineto = tmp_path / "rank0.json"
    kineto.write_text('{"traceEvents": []}')
    err = run_script("collectives.py", str(kineto), "--profiler-tables", check=2).stderr.strip()
    assert len(err.splitlines()) == 1 and "no profiler summary tables" in err, err


def _empty_rank(tmp_path: Path) -> Path:
    rank = tmp_path / "c" / "rank0_ascend_pt"
    (rank / "ASCEND_PROFILER_OUTPUT").mkdir(parents=True)
    (rank / "profiler_info_0.json").write_text('{"rank_id": 0}')
    return rank


def test_a_table_without_rows_is_one_line_saying_why():
    """issue 42 item 10c: --profiler-tables reads no task row, so the headline, per-rank and streams tables
    have no rows: each is one line naming it and why, not a header over nothing."""
    proc = run_script("collectives.py", str(need_shared(*REAL_DB)), "--profiler-tables", check=0)
    lines = proc.stdout.splitlines()
    for name in ("Headline (exposed communication per family)", "Per-rank table (comm union, exposed, overlap)",
                 "Streams table"):
        hit = [ln for ln in lines if ln.startswith(f"{name}: no rows (--profiler-tables reads no task row")]
        assert len(hit) == 1, name
    # no table header is printed without a row under it
    for i, line in enumerate(lines[:-1]):
        if set(line) == {"-", " "} and line.strip():
            assert i + 1 < len(lines) and lines[i + 1].strip(), f"empty table under {lines[i - 1]!r}"
    assert "rank  stream" not in proc.stdout and "comm_union_us" not in proc.stdout
    # the collectives table has rows and stays a table
    assert "Collectives per rank x (family, group)" in proc.stdout
    # with the tasks read, the tables are back
    full = run_script("collectives.py", str(need_shared(*REAL_DB)), check=0).stdout
    assert "no rows (" not in full and "rank  stream" in full
