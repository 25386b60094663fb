"""Damaged and hostile input, round 3: torch_npu db exports and msprof-analyze cluster output.

Each case failed before the fix (a hang, a traceback, a silent answer or a message naming the wrong
thing): a FIFO, device or folder where a database or its companions belong, hostile JSON in
META_DATA and the cluster files, a Python literal built to exhaust the parser, cells of the wrong type
or far out of range, repeated and reversed rows, and empty tables that used to read as a full result.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path

from damaged_corpus import OUT, OUT_DIR, RANK0, RANK2, Case


def _step(name: str, folder: Path, reason: str, script: str = "step_breakdown.py",
          extra: tuple[str, ...] = ()) -> Case:
    return Case(f"{script.split('.')[0]}:r3-{name}", script, [str(folder), *extra, "--json", "--csv", f"{OUT}/o.csv"],
                outputs=["o.csv"], reason=reason)


def _sql(db: Path, *statements: str) -> None:
    con = sqlite3.connect(db)
    for sql in statements:
        con.execute(sql)
    con.commit()
    con.close()


def _db_cases(base: Path) -> list[Case]:
    from ascend_db_synth import write_db_rank

    cases: list[Case] = []

    def rank(name: str) -> tuple[Path, Path]:
        folder = write_db_rank(RANK0, base / "r3db" / name / RANK0.name)
        return folder, next((folder / OUT_DIR).glob("ascend_pytorch_profiler_*.db"))

    def damaged(name: str, reason: str, *sql: str, script: str = "step_breakdown.py") -> None:
        folder, db = rank(name)
        _sql(db, *sql)
        cases.append(_step(name, folder, reason, script))

    # inputs opened directly: the header check opened the db itself (a FIFO hung it), a folder or FIFO
    # named analysis.db or profiler_metadata.json was taken as absent
    folder, db = rank("db-fifo")
    db.unlink()
    os.mkfifo(db)
    cases.append(_step("db-fifo", folder, "is a FIFO"))
    folder, db = rank("db-dev-zero")
    db.unlink()
    db.symlink_to("/dev/zero")
    cases.append(_step("db-dev-zero", folder, "is a device"))
    folder, db = rank("db-dir")
    db.unlink()
    db.mkdir()
    cases.append(_step("db-dir", folder, "is a folder"))
    for name, make in (("analysis-dir", Path.mkdir), ("analysis-fifo", os.mkfifo)):
        folder, db = rank(name)
        analysis = folder / OUT_DIR / "analysis.db"
        analysis.unlink()
        make(analysis)
        what = "is a folder" if name.endswith("dir") else "is a FIFO"
        cases.append(_step(name, folder, f"analysis.db: {what}"))
    cases.append(_step("analysis-dir-tables", base / "r3db" / "analysis-dir" / RANK0.name, "analysis.db: is a folder",
                       "collectives.py", ("--profiler-tables",)))
    folder, db = rank("wal-dir")
    con = sqlite3.connect(db)
    con.execute("PRAGMA journal_mode=WAL")
    con.close()
    Path(f"{db}-wal").mkdir()
    cases.append(_step("wal-dir", folder, "-wal: is a folder"))
    folder, db = rank("metadata-dir")
    _sql(db, "DELETE FROM META_DATA WHERE name = 'parallel_group_info'")
    (folder / "profiler_metadata.json").mkdir()
    cases.append(_step("metadata-dir", folder, "profiler_metadata.json: is a folder"))
    # parsers: META_DATA's JSON went through json.loads (a deep or huge document was a traceback)
    damaged("meta-json-deep", "nests too deeply",
            "UPDATE META_DATA SET value = '" + "[" * 100_000 + "' WHERE name = 'parallel_group_info'")
    damaged("meta-json-bigint", "holds an integer of 5001 digits",
            "UPDATE META_DATA SET value = '{\"g\": " + "9" * 5001 + "}' WHERE name = 'parallel_group_info'")
    # cells: types and ranges
    damaged("task-name-text", "table COMPUTE_TASK_INFO row 2 column name: 'x'",
            "UPDATE COMPUTE_TASK_INFO SET name = 'x' WHERE rowid = 1")
    damaged("task-name-unknown-id", "column name: id 999999 is not in STRING_IDS",
            "UPDATE COMPUTE_TASK_INFO SET name = 999999 WHERE rowid = 1")
    damaged("task-device-huge", "table TASK row 2 column deviceId: 1099511627776",
            "UPDATE TASK SET deviceId = 1099511627776 WHERE rowid = 2")
    damaged("task-start-negative", "table TASK row 1 column startNs: -5",
            "UPDATE TASK SET startNs = -5 WHERE rowid = 1")
    damaged("comm-count-2-62", f"column count: {2**62}", f"UPDATE COMMUNICATION_OP SET count = {2**62} WHERE rowid = 2",
            script="collectives.py")
    damaged("comm-count-1e300", "column count: 1e+300", "UPDATE COMMUNICATION_OP SET count = 1e300 WHERE rowid = 2",
            script="collectives.py")
    damaged("comm-opname-text", "table COMMUNICATION_OP row 1 column opName: 'hcom_allReduce_'",
            "UPDATE COMMUNICATION_OP SET opName = 'hcom_allReduce_' WHERE rowid = (SELECT MIN(rowid) FROM COMMUNICATION_OP)",
            script="collectives.py")
    damaged("comm-dtype-unknown", "column dataType: id 77 is not in ENUM_HCCL_DATA_TYPE",
            "UPDATE COMMUNICATION_OP SET dataType = 77 WHERE rowid = (SELECT MIN(rowid) FROM COMMUNICATION_OP)",
            script="collectives.py")
    damaged("analysis-time-1e306", "table StepTraceTime row 1 column computing: 1e+306", script="step_breakdown.py")
    folder = cases[-1].args[0]
    _sql(Path(folder) / OUT_DIR / "analysis.db", "UPDATE StepTraceTime SET computing = 1e306 WHERE rowid = 1")
    # structure: repeated and reversed rows, empty tables
    damaged("task-dup-row", "table TASK rows 1 and 14: globalTaskId 0 twice",
            "INSERT INTO TASK SELECT * FROM TASK WHERE globalTaskId = (SELECT MIN(globalTaskId) FROM COMPUTE_TASK_INFO)")
    damaged("comm-dup-row", "table COMMUNICATION_OP rows 1 and 5: identical",
            "INSERT INTO COMMUNICATION_OP (opName, startNs, endNs, connectionId, groupName, opId, relay, retry, "
            "dataType, algType, count, opType, waitNs) SELECT opName, startNs, endNs, connectionId, groupName, 99, "
            "relay, retry, dataType, algType, count, opType, waitNs FROM COMMUNICATION_OP WHERE rowid = 2",
            script="collectives.py")
    damaged("step-reversed", "table STEP_TIME row 1: endNs", "UPDATE STEP_TIME SET endNs = startNs - 1 WHERE rowid = 1")
    damaged("step-dup", "table STEP_TIME rows 1 and 3: step", "INSERT INTO STEP_TIME SELECT * FROM STEP_TIME WHERE rowid = 1")
    damaged("task-empty", "table TASK has no rows", "DELETE FROM TASK", script="collectives.py")
    damaged("strings-empty", "table STRING_IDS has no rows", "DELETE FROM STRING_IDS")
    return cases


def _cluster_cases(base: Path) -> list[Case]:
    from msprof_cluster_synth import build_cluster

    ranks = {0: RANK0, 2: RANK2}
    cases: list[Case] = []

    def cluster(name: str, db: bool, damage: Callable[[Path], None], reason: str,
                script: str = "collectives.py") -> None:
        out = build_cluster(ranks, base / "r3cluster" / name, db=db)
        damage(out)
        cases.append(_step(f"cluster-{name}", out, reason, script))

    def edit_json(file: str, change: Callable[[dict], None]) -> Callable[[Path], None]:
        def run(out: Path) -> None:
            doc = json.loads((out / file).read_text())
            change(doc)
            (out / file).write_text(json.dumps(doc))
        return run

    def replace(file: str, old: str, new: str) -> Callable[[Path], None]:
        def run(out: Path) -> None:
            text = (out / file).read_text()
            assert old in text, old
            (out / file).write_text(text.replace(old, new, 1))
        return run

    def fifo_db(out: Path) -> None:
        (out / "cluster_analysis.db").unlink()
        os.mkfifo(out / "cluster_analysis.db")

    def csv_dir(out: Path) -> None:
        (out / "cluster_step_trace_time.csv").unlink()
        (out / "cluster_step_trace_time.csv").mkdir()

    def first_op(doc: dict) -> dict:
        steps = next(iter(doc.values()))
        ops = next(iter(steps.values()))
        per_rank = next(v for k, v in ops.items() if not k.startswith("Total Op Info"))
        return next(iter(per_rank.values()))["Communication Time Info"]

    def set_time(value: float) -> Callable[[dict], None]:
        return lambda doc: first_op(doc).__setitem__("Elapse Time(ms)", value)

    cluster("db-fifo", True, fifo_db, "cluster_analysis.db: is a FIFO", "step_breakdown.py")
    cluster("csv-dir", False, csv_dir, "cluster_step_trace_time.csv: is a folder", "step_breakdown.py")
    cluster("comm-time-1e306", False, edit_json("cluster_communication.json", set_time(1e306)),
            "Elapse Time(ms) 1e+306")
    cluster("comm-bigint", False, replace("cluster_communication.json", '"Elapse Time(ms)": ',
                                          '"Elapse Time(ms)": ' + "1" * 5000 + ", \"x\": "),
            "holds an integer of 5000 digits")
    link = {"Transport Type": "HCCS", "Transit Size(MB)": 1.5, "Transit Time(ms)": 0.25, "Bandwidth(GB/s)": 1e308}
    cluster("matrix-bw-1e308", False,
            lambda out: (out / "cluster_communication_matrix.json").write_text(json.dumps(
                {"(0, 2)": {"step3": {"Total Op Info@17522688603477080586": {"0-2": link}}}})),
            "Bandwidth(GB/s): '1e+308' is out of range")
    cluster("csv-rank-huge", False, replace("cluster_step_trace_time.csv", ",rank,2,", ",rank,999999999,"),
            "999999999' is out of range", "step_breakdown.py")
    cluster("db-rank-set-deep", True, lambda out: _sql(out / "cluster_analysis.db",
                                                       "UPDATE CommunicationGroup SET rank_set = '" + "[" * 100_000 + "'"),
            "rank_set: nests more than")
    cluster("db-rank-negative", True, lambda out: _sql(out / "cluster_analysis.db",
                                                       "UPDATE ClusterCommAnalyzerTime SET rank_id = -4 WHERE rowid = 1"),
            "table ClusterCommAnalyzerTime row 1 column rank_id: -4")
    cluster("db-start-text", True, lambda out: _sql(out / "cluster_analysis.db",
                                                    "UPDATE ClusterCommAnalyzerTime SET start_timestamp = 'soon' "
                                                    "WHERE rowid = 2"),
            "table ClusterCommAnalyzerTime row 2 column start_timestamp: 'soon'")
    cluster("db-dup-row", True, lambda out: _sql(out / "cluster_analysis.db",
                                                 "INSERT INTO ClusterCommAnalyzerTime SELECT * FROM ClusterCommAnalyzerTime "
                                                 "WHERE rowid = 1"),
            "table ClusterCommAnalyzerTime rows 1 and")
    cluster("db-bw-1e308", True, lambda out: _sql(out / "cluster_analysis.db",
                                                  "INSERT INTO ClusterCommAnalyzerMatrix VALUES ('(0, 2)', 'step3', "
                                                  "'Total Op Info', '17522688603477080586', '0', '2', 1.5, 0.25, "
                                                  "1e308, 'HCCS', '')"),
            "table ClusterCommAnalyzerMatrix row 1 column bandwidth: 1e+308")
    cluster("db-step-1e306", True, lambda out: _sql(out / "cluster_analysis.db",
                                                    "UPDATE ClusterStepTraceTime SET free = 1e306 WHERE rowid = 1"),
            "table ClusterStepTraceTime row 1 column free: 1e+306", "step_breakdown.py")
    return cases


def cases(base: Path) -> list[Case]:
    """Every round-3 db and cluster case, its inputs written under base."""
    return _db_cases(base) + _cluster_cases(base)
