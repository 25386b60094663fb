"""Write a torch_npu text rank folder again as an ``export_type`` db rank (tables as torch_npu writes them).

Test input only: the shipped CANN 8.3-format ranks become ``ascend_pytorch_profiler_<R>.db`` plus
``analysis.db`` with the same tasks, so the db reader can be checked against the text reader on the
same numbers, and damaged databases can be built without any file from ../shared. The table and
column names follow the real capture in ../shared/fixtures/ascend/msinsight-db-level1 (SCHEMA_VERSION 1.0.0).
"""

from __future__ import annotations

import csv
import json
import shutil
import sqlite3
import sys
from decimal import Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "scripts") not in sys.path:
    sys.path.insert(0, str(ROOT / "scripts"))

from ditpar.readers.ascend.text import double_hash  # noqa: E402

OUT_DIR = "ASCEND_PROFILER_OUTPUT"
FP16 = 3  # ENUM_HCCL_DATA_TYPE id of FP16 in the real capture


def _ns(text: str) -> int:
    return int(Decimal(text.strip()) * 1000)


def _group_name(digits: str, names: list[str]) -> str:
    """A communicator name whose double_hash ends in the op name's 3 digits (metadata names first)."""
    for name in names:
        if str(double_hash(name)).endswith(digits):
            return name
    k = 0
    while not str(double_hash(f"hccl_world_{k}")).endswith(digits):
        k += 1
    return f"hccl_world_{k}"


def write_db_rank(text_rank: Path, target: Path, *, schema_major: str = "1", with_analysis: bool = True) -> Path:
    """Copy ``text_rank`` (a ``*_ascend_pt`` folder) as a db-export rank folder at ``target``."""
    out = target / OUT_DIR
    out.mkdir(parents=True)
    for info in text_rank.glob("profiler_info*.json"):
        shutil.copy(info, target / info.name)
    rank = json.loads(next(text_rank.glob("profiler_info*.json")).read_text())["rank_id"]
    meta_path = text_rank / "profiler_metadata.json"
    meta = json.loads(meta_path.read_text()) if meta_path.is_file() else {}
    groups = meta.get("parallel_group_info", {})
    text_out = text_rank / OUT_DIR
    with open(text_out / "kernel_details.csv", newline="", encoding="utf-8") as fh:
        kernels = list(csv.DictReader(fh))
    trace = json.loads((text_out / "trace_view.json").read_text())
    events = trace if isinstance(trace, list) else trace["traceEvents"]
    host = [(int(e["name"].split("#")[1]), _ns(str(e["ts"])), _ns(str(e["ts"])) + _ns(str(e["dur"])))
            for e in events if str(e.get("name", "")).startswith("ProfilerStep#")]
    strings: dict[str, int] = {}

    def sid(text: str) -> int:
        return strings.setdefault(text, len(strings) + 1)

    con = sqlite3.connect(out / f"ascend_pytorch_profiler_{rank}.db")
    con.executescript("""
        CREATE TABLE META_DATA (name TEXT, value TEXT);
        CREATE TABLE STRING_IDS (id INTEGER PRIMARY KEY, value TEXT);
        CREATE TABLE TASK (startNs INTEGER, endNs INTEGER, deviceId INTEGER, connectionId INTEGER,
            globalTaskId INTEGER, globalPid INTEGER, taskType INTEGER, contextId INTEGER, streamId INTEGER,
            taskId INTEGER, modelId INTEGER, depth integer);
        CREATE TABLE COMPUTE_TASK_INFO (name INTEGER, globalTaskId INTEGER PRIMARY KEY, blockDim INTEGER,
            mixBlockDim INTEGER, taskType INTEGER, opType INTEGER, inputFormats INTEGER, inputDataTypes INTEGER,
            inputShapes INTEGER, outputFormats INTEGER, outputDataTypes INTEGER, outputShapes INTEGER,
            attrInfo INTEGER, waitNs INTEGER);
        CREATE TABLE COMMUNICATION_OP (opName INTEGER, startNs INTEGER, endNs INTEGER, connectionId INTEGER,
            groupName INTEGER, opId INTEGER PRIMARY KEY, relay INTEGER, retry INTEGER, dataType INTEGER,
            algType INTEGER, count NUMERIC, opType INTEGER, waitNs INTEGER);
        CREATE TABLE ENUM_HCCL_DATA_TYPE (id INTEGER PRIMARY KEY, name TEXT);
        CREATE TABLE CANN_API (startNs INTEGER, endNs INTEGER, type INTEGER, globalTid INTEGER,
            connectionId INTEGER PRIMARY KEY, name INTEGER, depth integer);
        CREATE TABLE STEP_TIME (id INTEGER, startNs INTEGER, endNs INTEGER);
        CREATE TABLE RANK_DEVICE_MAP (rankId INTEGER, deviceId INTEGER);
    """)
    meta_rows = [("SCHEMA_VERSION_MAJOR", schema_major), ("SCHEMA_VERSION", f"{schema_major}.0.0")]
    if groups:
        meta_rows.append(("parallel_group_info", json.dumps(groups)))
    con.executemany("INSERT INTO META_DATA VALUES (?, ?)", meta_rows)
    con.executemany("INSERT INTO ENUM_HCCL_DATA_TYPE VALUES (?, ?)", [(FP16, "FP16"), (4, "FP32")])
    con.executemany("INSERT INTO STEP_TIME VALUES (?, ?, ?)", host)
    device = None
    for i, row in enumerate(kernels):
        start = _ns(row["Start Time(us)"])
        end = start + _ns(row["Duration(us)"])
        step = int(row["Step Id"])
        h_start = next(s for k, s, _ in host if k == step)
        conn = 1000 + i
        # the launch ("node" API, type 10000) lies inside its step's host span
        con.execute("INSERT INTO CANN_API VALUES (?, ?, 10000, 1, ?, ?, 0)", (h_start + 1, h_start + 2, conn,
                                                                               sid(row["Name"])))
        device = int(row.get("Device_id") or 0)
        stream = int(row["Stream ID"]) if row["Stream ID"].isdigit() else 8
        # every device task is a TASK row; compute kernels also have a COMPUTE_TASK_INFO row
        con.execute("INSERT INTO TASK VALUES (?, ?, ?, ?, ?, 1, 0, 0, ?, ?, 0, 0)",
                    (start, end, device, conn, i, stream, i))
        if row["Accelerator Core"] == "COMMUNICATION":
            digits = row["Name"].split("__")[1][:3]
            con.execute("INSERT INTO COMMUNICATION_OP VALUES (?, ?, ?, ?, ?, ?, 0, 0, ?, 0, ?, ?, 0)",
                        (sid(row["Name"]), start, end, conn, sid(_group_name(digits, list(groups))), i, FP16,
                         1024 * (i + 1), sid(row["Type"])))
            continue
        con.execute("INSERT INTO COMPUTE_TASK_INFO (name, globalTaskId, taskType, opType) VALUES (?, ?, ?, ?)",
                    (sid(row["Name"]), i, sid(row["Accelerator Core"]), sid(row["Type"])))
    con.execute("INSERT INTO RANK_DEVICE_MAP VALUES (?, ?)", (rank, device or 0))
    con.executemany("INSERT INTO STRING_IDS VALUES (?, ?)", [(i, t) for t, i in strings.items()])
    con.commit()
    con.close()
    if with_analysis:
        _write_analysis(text_out / "step_trace_time.csv", out / "analysis.db")
    return target


def _write_analysis(step_trace_csv: Path, path: Path) -> None:
    """analysis.db StepTraceTime from step_trace_time.csv (the columns torch_npu's db export writes)."""
    with open(step_trace_csv, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE StepTraceTime (step TEXT, computing NUMERIC, communication_not_overlapped NUMERIC, "
                "overlapped NUMERIC, communication NUMERIC, free NUMERIC, stage NUMERIC, bubble NUMERIC, "
                "communication_not_overlapped_and_exclude_receive NUMERIC, preparing NUMERIC)")
    keys = ("Computing", "Communication(Not Overlapped)", "Overlapped", "Communication", "Free", "Stage", "Bubble",
            "Communication(Not Overlapped and Exclude Receive)", "Preparing")
    con.executemany("INSERT INTO StepTraceTime VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [(r["Step"], *[float(r[k]) for k in keys]) for r in rows])
    con.commit()
    con.close()


#: the many-spans rank: span i is [T0 + i*SPAN_NS, T0 + i*SPAN_NS + 900]
T0 = 1_764_000_000_000_000_000
SPAN_NS = 1000


def write_many_spans(text_rank: Path, target: Path, n: int) -> Path:
    """A db rank (tables as write_db_rank writes them) with ``n`` ProfilerStep spans whose answers follow
    from the arithmetic below, not from the reader: with s = T0 + i*SPAN_NS, span i (step id i + 1,
    rows written in reverse order) is [s, s + 900]; its launch lies at [s + 10, s + 20]; its compute
    kernel runs [s + 500, s + 1500] (past the span, into the next one's time); every third span also
    has a non-compute task [s + 1600, s + 1700] on the same launch; one HCCL op per span starts at
    s + 600. Window i is then [s + 500, s + 1700 if i % 3 == 0 else s + 1500]; the op at s + 600 lies in
    window i - 1 too when (i - 1) % 3 == 0, and so belongs to step i (the first window holding it),
    else to step i + 1. A last launch lies in the gap after the spans: its kernel gets no step."""
    folder = write_db_rank(text_rank, target, with_analysis=False)
    db = next((folder / OUT_DIR).glob("ascend_pytorch_profiler_*.db"))
    con = sqlite3.connect(db)
    for table in ("TASK", "COMPUTE_TASK_INFO", "CANN_API", "STEP_TIME", "COMMUNICATION_OP"):
        con.execute(f"DELETE FROM {table}")
    con.executemany("INSERT INTO STRING_IDS VALUES (?, ?)",
                    [(900001, "aclnnMm_MatMulCommon_MatMulV2"), (900002, "MatMulV2"), (900003, "AI_CORE"),
                     (900004, "hcom_allReduce__097_0_1"), (900005, "hcom_allReduce_"), (900006, "hccl_world_0")])
    spans, launches, tasks, infos, ops = [], [], [], [], []
    for i in range(n + 1):
        s = T0 + i * SPAN_NS
        conn = 10_000 + i
        if i < n:
            spans.append((i + 1, s, s + 900))
            launches.append((s + 10, s + 20, 10000, 1, conn, 900001, 0))
        else:  # a launch in no span
            launches.append((s + 950, s + 960, 10000, 1, conn, 900001, 0))
        tasks.append((s + 500, s + 1500, 0, conn, 2 * i, 1, 0, 0, 2, i, 0, 0))
        infos.append((900001, 2 * i, 900003, 900002))
        if i % 3 == 0 and i < n:
            tasks.append((s + 1600, s + 1700, 0, conn, 2 * i + 1, 1, 0, 0, 8, i, 0, 0))
        if i < n:
            ops.append((900004, s + 600, s + 650, conn, 900006, i, 0, 0, FP16, 0, 1024, 900005, 0))
    con.executemany("INSERT INTO STEP_TIME VALUES (?, ?, ?)", spans[::-1])
    con.executemany("INSERT INTO CANN_API VALUES (?, ?, ?, ?, ?, ?, ?)", launches)
    con.executemany("INSERT INTO TASK VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", tasks)
    con.executemany("INSERT INTO COMPUTE_TASK_INFO (name, globalTaskId, taskType, opType) VALUES (?, ?, ?, ?)", infos)
    con.executemany("INSERT INTO COMMUNICATION_OP VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", ops)
    con.commit()
    con.close()
    return folder
