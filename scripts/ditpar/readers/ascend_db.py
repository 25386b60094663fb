"""Reader of torch_npu ``export_type`` db output: ``ascend_pytorch_profiler_<R>.db`` and ``analysis.db``.

The same AscendRank the text reader builds, from SQLite through the standard library. Times stay the
profiler's own integer nanoseconds (TASK.startNs/endNs, COMMUNICATION_OP.startNs/endNs): no float
round trip. Table and column names are the ones torch_npu writes and msprof-analyze reads:

- TASK x COMPUTE_TASK_INFO (names through STRING_IDS): the compute kernels, as in msprof-analyze's
  ``msprof_step_trace_time_adapter.py`` and ``compare_tools/.../npu_profiling_db_parser.py``
  (Ascend mstt @ 99c2e0f9, mirror xiaobingling93-pixel/Ascend-mstt);
- COMMUNICATION_OP (opName, opType, groupName, startNs, endNs, count, dataType): one row per HCCL op,
  the rows kernel_details.csv lists as ``hcom_*``;
- STEP_TIME (host ProfilerStep spans) and CANN_API type 10000 ("node") launches: a step owns the tasks
  whose launch lies inside its host span, and the window runs from the first such task to
  max(last task end, host end), as torch_npu's ``_step_info_db_parser.py`` does (Ascend/pytorch @ 171d4546);
  communication ops belong to the window that holds their start (``_trace_step_time_db_parser.py``);
- analysis.db StepTraceTime (the profiler's own step figures, us), CommAnalyzerTime / CommAnalyzerBandwidth
  (communication.json), CommAnalyzerMatrix (communication_matrix.json);
- META_DATA: SCHEMA_VERSION_MAJOR (1 is what this reader knows) and parallel_group_info (JSON).
"""

from __future__ import annotations

import json
import math
import re
import sqlite3
import struct
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote

import numpy as np
import pandas as pd

from ditpar.core import classify
from ditpar.core.events import make_events
from ditpar.core.profile import (
    BYTES_MESSAGE,
    COMM_OP_COLUMNS,
    LINK_COLUMNS,
    STEP_COLUMNS,
    STEP_TRACE_COLUMNS,
)
from ditpar.errors import InputError
from ditpar.readers import ascend
from ditpar.readers.common import check_times

PROFILER_DB_GLOB = "ascend_pytorch_profiler*.db"
ANALYSIS_DB = "analysis.db"
#: META_DATA SCHEMA_VERSION_MAJOR values whose tables this reader knows
KNOWN_SCHEMA_MAJOR = ("1",)
#: CANN_API.type of the "node" level (ENUM_API_TYPE 10000): the launches torch_npu maps to steps
NODE_API_TYPE = 10000

_NEED = {
    "TASK": ("startNs", "endNs", "deviceId", "connectionId", "globalTaskId", "streamId"),
    "COMPUTE_TASK_INFO": ("name", "globalTaskId", "taskType", "opType"),
    "STRING_IDS": ("id", "value"),
}
_OPTIONAL = {
    "COMMUNICATION_OP": ("opName", "startNs", "endNs", "groupName", "opType", "count", "dataType"),
    "STEP_TIME": ("id", "startNs", "endNs"),
    "CANN_API": ("startNs", "endNs", "type", "connectionId"),
    "ENUM_HCCL_DATA_TYPE": ("id", "name"),
    "RANK_DEVICE_MAP": ("rankId", "deviceId"),
    "META_DATA": ("name", "value"),
}
#: analysis.db StepTraceTime column -> ProfileSet.step_trace column (us)
STEP_TRACE_TABLE = {
    "computing": "computing_us",
    "communication_not_overlapped": "communication_not_overlapped_us",
    "overlapped": "overlapped_us",
    "communication": "communication_us",
    "free": "free_us",
    "stage": "stage_us",
    "bubble": "bubble_us",
}
_ANALYSIS_TABLES = {
    "StepTraceTime": ("step", *[c for c in STEP_TRACE_TABLE if c != "bubble"]),
    "CommAnalyzerTime": ("hccl_op_name", "group_name", "start_timestamp", "elapse_time", "transit_time",
                         "wait_time", "synchronization_time", "idle_time", "step"),
    "CommAnalyzerBandwidth": ("hccl_op_name", "transport_type", "transit_size"),
    "CommAnalyzerMatrix": ("hccl_op_name", "group_name", "src_rank", "dst_rank", "transport_type",
                           "transit_size", "transit_time", "bandwidth", "step"),
}


def find_db(out_dir: Path) -> Path | None:
    """The one ascend_pytorch_profiler*.db of a rank's output folder, or None."""
    found = sorted(out_dir.glob(PROFILER_DB_GLOB)) if out_dir.is_dir() else []
    if len(found) > 1:
        raise InputError(f"{out_dir}: {len(found)} profiler databases {[p.name for p in found]}; "
                         "expected one per rank folder")
    return found[0] if found else None


def has_db(folder: Path) -> bool:
    """True when the rank folder holds a db export and no kernel_details.csv (the text form wins)."""
    out_dir = ascend.find_output_dir(folder)
    return not (out_dir / ascend.KERNEL_FILE).is_file() and find_db(out_dir) is not None


class _Db:
    """A read-only connection whose every failure is one InputError naming the file and the table."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._snapshot = None
        wal = _check_header(path)
        try:
            self.con = sqlite3.connect(self._uri(path, wal), uri=True, timeout=1.0)
            self.tables = {name: self._columns(name) for (name,) in
                           self.con.execute("SELECT name FROM sqlite_master WHERE type='table'").fetchall()}
        except sqlite3.Error as exc:
            raise InputError(f"{path}: cannot read as an SQLite database ({_reason(exc)})") from None

    def _uri(self, path: Path, wal: bool) -> str:
        """How to open it without writing beside it. A rollback-journal db: read-only (a writer's lock
        is then seen). A WAL db (torch_npu writes them so) would get -shm/-wal files created next to it:
        with no committed log it is opened immutable; with one (a run cut before its checkpoint) the
        db and its log are read from a private copy, so the logged rows count and the folder stays as it is."""
        if not wal:
            return f"file:{quote(str(path.resolve()))}?mode=ro"
        log = path.with_name(path.name + "-wal")
        try:
            logged = log.stat().st_size > 0
        except OSError:
            logged = False
        if not logged:
            return f"file:{quote(str(path.resolve()))}?mode=ro&immutable=1"
        import shutil
        import tempfile

        self._snapshot = tempfile.TemporaryDirectory(prefix="ditpar-db-")
        copy = Path(self._snapshot.name) / path.name
        try:
            shutil.copyfile(path, copy)
            shutil.copyfile(log, copy.with_name(copy.name + "-wal"))
        except OSError as exc:
            self._snapshot.cleanup()
            raise InputError(f"{log}: cannot read its write-ahead log ({_reason(exc)})") from None
        return f"file:{quote(str(copy))}?mode=ro"

    def _columns(self, table: str) -> tuple[str, ...]:
        return tuple(row[1] for row in self.con.execute(f'PRAGMA table_info("{table}")').fetchall())

    def require(self, table: str, columns: tuple[str, ...], optional: bool = False) -> bool:
        """True when the table has the columns; absent and optional: False; otherwise an InputError."""
        if table not in self.tables:
            if optional:
                return False
            raise InputError(f"{self.path}: missing table {table}; have {sorted(self.tables)}")
        missing = [c for c in columns if c not in self.tables[table]]
        if missing:
            raise InputError(f"{self.path}: table {table}: missing column(s) {missing}; "
                             f"have {list(self.tables[table])}")
        return True

    def rows(self, table: str, sql: str, params: tuple = ()) -> list[tuple]:
        try:
            return self.con.execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            raise InputError(f"{self.path}: table {table}: cannot read ({_reason(exc)})") from None

    def ints(self, table: str, sql: str, width: int) -> np.ndarray:
        """An integer query as an (n, width) int64 array, fetched in blocks (no Python tuple per row kept).
        Every cell must be a stored integer within int64: a REAL or TEXT cell (a stamp that lost digits, or
        no number) makes the block's inferred type non-integer and is named, never cast."""
        try:
            cur = self.con.execute(sql)
            blocks = []
            while rows := cur.fetchmany(1 << 16):
                block = np.array(rows)
                if block.dtype.kind != "i" or block.shape != (len(rows), width):
                    bad = next((r for r in rows if not all(type(v) is int and -2**63 <= v < 2**63 for v in r)),
                               rows[0])
                    raise InputError(f"{self.path}: table {table}: expected integers, got {bad!r}")
                blocks.append(block.astype(np.int64, copy=False))
        except sqlite3.Error as exc:
            raise InputError(f"{self.path}: table {table}: cannot read ({_reason(exc)})") from None
        return np.concatenate(blocks) if blocks else np.zeros((0, width), dtype=np.int64)

    def close(self) -> None:
        self.con.close()
        if self._snapshot is not None:
            self._snapshot.cleanup()


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def _check_header(path: Path) -> bool:
    """A file shorter than its own header says (page size x page count) was cut off while copying.
    Returns whether the db is in WAL mode (file format versions 2 at offsets 18 and 19, sqlite.org/fileformat)."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as fh:
            head = fh.read(100)
    except OSError as exc:
        raise InputError(f"{path}: cannot open ({_reason(exc)})") from None
    if len(head) < 100 or not head.startswith(b"SQLite format 3\x00"):
        raise InputError(f"{path}: not an SQLite database (no 'SQLite format 3' header); "
                         "expected torch_npu's export_type db output")
    page_size = struct.unpack(">H", head[16:18])[0]
    page_size = 65536 if page_size == 1 else page_size
    pages = struct.unpack(">I", head[28:32])[0]
    changes, valid_for = struct.unpack(">I", head[24:28])[0], struct.unpack(">I", head[92:96])[0]
    # the in-header size is valid when 'version-valid-for' equals the change counter (sqlite.org/fileformat)
    if pages and changes == valid_for and size < page_size * pages:
        raise InputError(f"{path}: truncated: {size} bytes, its header says {page_size * pages} "
                         f"({pages} pages of {page_size}); copy the file again")
    return head[18] == 2 or head[19] == 2


def _strings(db: _Db) -> dict[int, str]:
    return {int(i): ("" if v is None else str(v)) for i, v in db.rows("STRING_IDS", "SELECT id, value FROM STRING_IDS")}


def _check_schema(db: _Db) -> dict[str, str]:
    """META_DATA as a dict; a SCHEMA_VERSION_MAJOR this reader does not know is an input error."""
    if not db.require("META_DATA", _OPTIONAL["META_DATA"], optional=True):
        return {}
    meta = {str(k): ("" if v is None else str(v)) for k, v in db.rows("META_DATA", "SELECT name, value FROM META_DATA")}
    major = meta.get("SCHEMA_VERSION_MAJOR")
    if major is not None and major.strip() not in KNOWN_SCHEMA_MAJOR:
        raise InputError(f"{db.path}: table META_DATA: SCHEMA_VERSION {meta.get('SCHEMA_VERSION', major)!r}; "
                         f"this reader knows major version(s) {list(KNOWN_SCHEMA_MAJOR)}")
    return meta


def _columns(rows: list[tuple], width: int) -> list[list]:
    """SQLite rows as ``width`` column lists."""
    return [list(col) for col in zip(*rows, strict=True)] if rows else [[] for _ in range(width)]


def _exact_ints(column: list, where: str) -> np.ndarray:
    """Integers exactly as stored (a REAL or TEXT cell would already have lost digits: refuse it)."""
    bad = next((i for i, v in enumerate(column) if type(v) is not int), None)
    if bad is not None:
        raise InputError(f"{where}: row {bad + 1}: expected an integer ns stamp, got {column[bad]!r}")
    return np.array(column, dtype=np.int64) if column else np.zeros(0, dtype=np.int64)


def read_rank(folder: Path) -> ascend.AscendRank:
    """Read one rank of a db export: ``folder`` is the ``*_ascend_pt`` folder or its ASCEND_PROFILER_OUTPUT."""
    out_dir = ascend.find_output_dir(folder)
    rank_dir = out_dir.parent if out_dir.name == ascend.OUTPUT_DIR else out_dir
    path = find_db(out_dir)
    if path is None:
        raise InputError(f"{out_dir}: no {PROFILER_DB_GLOB}")
    db = _Db(path)
    try:
        for table, cols in _NEED.items():
            db.require(table, cols)
        meta = _check_schema(db)
        strings = _strings(db)
        rank, rank_from = ascend.rank_of(rank_dir)
        if rank is None:
            rank, rank_from = _db_rank(db, path)
        spans = _host_spans(db)
        step_sql = _span_case(spans[1], spans[2]) if spans is not None and _launch_key_unique(db) else None
        compute, coded = _compute_tasks(db, strings, step_sql)
        comm = _comm_ops(db, strings)
        if step_sql is None:
            windows = _step_windows(db, compute, comm, spans)
        else:
            windows = _joined_step_windows(db, compute, spans, step_sql)
        events, unplaced = _events(compute, comm, windows, _device(db, compute), coded)
        meta_groups = _meta_groups(db, meta)
    finally:
        db.close()
    sources = [path]
    meta_path = rank_dir / "profiler_metadata.json"
    if not meta_groups and meta_path.is_file():
        meta_groups = ascend._parallel_groups(meta_path)
        sources.append(meta_path)
    step_trace = comm_ops = links = None
    hashes: dict[str, str] = {}
    analysis = out_dir / ANALYSIS_DB
    if analysis.is_file():
        step_trace, comm_ops, links, hashes = read_analysis(analysis, comm)
        sources.append(analysis)
    # the communicator hash is msprof-analyze's double_hash of COMMUNICATION_OP.groupName; its last
    # 3 digits are the ones in the op names
    for group_name in sorted(set(comm["group_name"])) if len(comm) else []:
        if group_name:
            full = str(ascend.double_hash(group_name))
            hashes.setdefault(full[-3:], full)
    steps = windows[list(STEP_COLUMNS)].reset_index(drop=True)
    groups = ascend._groups(events, hashes, meta_groups, None)
    return ascend.AscendRank(rank, rank_from, events, steps, step_trace, comm_ops, groups, unplaced, sources, links,
                             BYTES_MESSAGE if events["bytes"].notna().any() else "")


#: the analysis.db tables a task-free read (``read_tables``) answers from -> the evidence name each gives
SUMMARY_TABLES = {"StepTraceTime": "step_trace", "CommAnalyzerTime": "communication", "CommAnalyzerMatrix": "links"}


def read_tables(folder: Path) -> ascend.AscendRank:
    """One db rank from the profiler's own summary tables only (no TASK row read): analysis.db
    StepTraceTime, CommAnalyzerTime (+ Bandwidth) and CommAnalyzerMatrix, with exact op starts and
    communicator names from the small COMMUNICATION_OP table. ``evidence`` names what it gave; a rank
    whose analysis.db has none of SUMMARY_TABLES is an input error that lists the tables it has."""
    out_dir = ascend.find_output_dir(folder)
    rank_dir = out_dir.parent if out_dir.name == ascend.OUTPUT_DIR else out_dir
    path = find_db(out_dir)
    if path is None:
        raise InputError(f"{out_dir}: no {PROFILER_DB_GLOB}")
    analysis = out_dir / ANALYSIS_DB
    if not analysis.is_file():
        raise InputError(f"{out_dir}: no {ANALYSIS_DB}: the profiler's summary tables "
                         f"({', '.join(SUMMARY_TABLES)}) are not there; have {sorted(p.name for p in out_dir.iterdir())}"
                         "; read the task rows instead (without --profiler-tables)")
    db = _Db(path)
    try:
        meta = _check_schema(db)
        rank, rank_from = ascend.rank_of(rank_dir)
        if rank is None:
            rank, rank_from = _db_rank(db, path)
        comm = (_comm_ops(db, _strings(db)) if db.require("STRING_IDS", _NEED["STRING_IDS"], optional=True)
                else None)
        meta_groups = _meta_groups(db, meta)
    finally:
        db.close()
    sources = [path, analysis]
    meta_path = rank_dir / "profiler_metadata.json"
    if not meta_groups and meta_path.is_file():
        meta_groups = ascend._parallel_groups(meta_path)
        sources.append(meta_path)
    have = _Db(analysis)
    try:
        tables = sorted(have.tables)
    finally:
        have.close()
    if not any(t in tables for t in SUMMARY_TABLES):
        raise InputError(f"{analysis}: none of the summary tables {list(SUMMARY_TABLES)}; have {tables}; "
                         "read the task rows instead (without --profiler-tables)")
    step_trace, comm_ops, links, hashes = read_analysis(analysis, comm)
    for group_name in sorted(set(comm["group_name"])) if comm is not None and len(comm) else []:
        if group_name:
            full = str(ascend.double_hash(group_name))
            hashes.setdefault(full[-3:], full)
    events = make_events({"rank": [], "start_ns": [], "dur_ns": []})
    groups = ascend._groups(events, hashes, meta_groups, None)
    read = ascend.AscendRank(rank, rank_from, events, pd.DataFrame(columns=list(STEP_COLUMNS)), step_trace,
                             comm_ops, groups, {}, sources, links, "transit" if comm_ops is not None else "")
    read.evidence = [name for table, name in SUMMARY_TABLES.items()
                     if {"step_trace": step_trace, "communication": comm_ops, "links": links}[name] is not None]
    return read


def _db_rank(db: _Db, path: Path) -> tuple[int | None, str]:
    if db.require("RANK_DEVICE_MAP", _OPTIONAL["RANK_DEVICE_MAP"], optional=True):
        ranks = {r for (r,) in db.rows("RANK_DEVICE_MAP", "SELECT rankId FROM RANK_DEVICE_MAP") if type(r) is int}
        if len(ranks) == 1 and min(ranks) >= 0:
            return min(ranks), "RANK_DEVICE_MAP rankId"
    m = re.fullmatch(r"ascend_pytorch_profiler_(\d+)\.db", path.name)
    if m:
        return int(m.group(1)), f"{path.name} file name"
    return None, "unknown"


def _device(db: _Db, compute: pd.DataFrame) -> int | None:
    if len(compute):
        devices = compute["device"].dropna().unique()
        if len(devices) == 1:
            return int(devices[0])
    if db.require("RANK_DEVICE_MAP", _OPTIONAL["RANK_DEVICE_MAP"], optional=True):
        devs = {d for (d,) in db.rows("RANK_DEVICE_MAP", "SELECT deviceId FROM RANK_DEVICE_MAP") if type(d) is int}
        if len(devs) == 1:
            return min(devs)
    return None


def _compute_tasks(db: _Db, strings: dict[int, str], step_sql: str | None = None
                   ) -> tuple[pd.DataFrame, dict[str, tuple[np.ndarray, list[str]]]]:
    """TASK rows of compute kernels (COMPUTE_TASK_INFO), in start order, with their connection ids; with
    ``step_sql`` (see _span_case) the index of the host span of each row's launch instead (``step_of``)."""
    join = "FROM TASK T JOIN COMPUTE_TASK_INFO C ON C.globalTaskId = T.globalTaskId"
    link = "COALESCE(T.connectionId, -2), "
    if step_sql is not None:
        join += f" LEFT JOIN CANN_API A ON A.connectionId = T.connectionId AND A.type = {NODE_API_TYPE}"
        link = f"COALESCE({step_sql}, -1), "
    head = f"SELECT T.startNs, T.endNs, COALESCE(T.deviceId, -1), COALESCE(T.streamId, -1), {link}"
    # the three string ids in one integer (fewer Python objects per row); a row whose ids do not fit gets
    # -1 and the whole read is made again with the ids apart
    fits = " AND ".join(f"(C.{c} IS NULL OR (typeof(C.{c}) = 'integer' AND C.{c} BETWEEN 0 AND {_ID_SPAN - 2}))"
                        for c in ("name", "opType", "taskType"))
    ids = (f"CASE WHEN {fits} THEN ((COALESCE(C.name, -1) + 1) * {_ID_SPAN} + COALESCE(C.opType, -1) + 1) "
           f"* {_ID_SPAN} + COALESCE(C.taskType, -1) + 1 ELSE -1 END")
    packed = db.ints("TASK", f"{head}{ids} {join} ORDER BY T.startNs, T.globalTaskId", 6)
    if not (packed[:, 5] < 0).any():
        cols = np.empty((len(packed), 8), dtype=np.int64)
        cols[:, :5] = packed[:, :5]
        key = packed[:, 5]
        del packed
        cols[:, 5], cols[:, 6], cols[:, 7] = key // _ID_SPAN**2 - 1, key // _ID_SPAN % _ID_SPAN - 1, key % _ID_SPAN - 1
    else:
        del packed
        cols = db.ints("TASK", f"{head}COALESCE(C.name, -1), COALESCE(C.opType, -1), COALESCE(C.taskType, -1) "
                               f"{join} ORDER BY T.startNs, T.globalTaskId", 8)
    where = f"{db.path}: table TASK"
    start, end = cols[:, 0].copy(), cols[:, 1].copy()
    if (end < start).any():
        i = int(np.flatnonzero(end < start)[0])
        raise InputError(f"{where}: compute task {i + 1}: endNs {int(end[i])} before startNs {int(start[i])}")
    check_times(start, end - start, where)
    device = pd.array(cols[:, 2], dtype="Int64")
    device[cols[:, 2] < 0] = pd.NA
    s_uniq, s_codes = np.unique(cols[:, 3], return_inverse=True)
    streams = np.array(["" if v < 0 else str(int(v)) for v in s_uniq] or [""], dtype=object)
    frame = pd.DataFrame({"start_ns": start, "end_ns": end, "device": device,
                          "stream": pd.Series(streams[s_codes.ravel()] if len(cols) else [], dtype=object),
                          "connection" if step_sql is None else "step_of": cols[:, 4].copy()})
    coded: dict[str, tuple[np.ndarray, list[str]]] = {}
    for key, col in (("name", 5), ("type", 6), ("core", 7)):
        codes, texts = _coded_texts(cols[:, col], strings)
        frame[key] = pd.Series(np.array(texts or [""], dtype=object)[codes] if len(codes) else [], dtype=object)
        coded[key] = (codes, texts)
    return frame, coded


#: one string id per 21 bits when three are packed in one int64 (_compute_tasks)
_ID_SPAN = 1 << 21


def _coded_texts(ids: np.ndarray, strings: dict[int, str]) -> tuple[np.ndarray, list[str]]:
    """STRING_IDS ids as codes into their distinct texts (one Python string per distinct id)."""
    uniq, codes = np.unique(ids, return_inverse=True)
    return codes.ravel().astype(np.int64), [strings.get(int(u), "") for u in uniq]


def _text(value: object) -> str:
    return "" if value is None else str(value)


def _comm_ops(db: _Db, strings: dict[int, str]) -> pd.DataFrame:
    """COMMUNICATION_OP rows: name, type, communicator, exact start/end, message bytes (count x dtype)."""
    columns = ["name", "type", "group_name", "start_ns", "end_ns", "bytes"]
    if not db.require("COMMUNICATION_OP", _OPTIONAL["COMMUNICATION_OP"], optional=True):
        return pd.DataFrame(columns=columns)
    sizes: dict[int, int] = {}
    if db.require("ENUM_HCCL_DATA_TYPE", _OPTIONAL["ENUM_HCCL_DATA_TYPE"], optional=True):
        for i, name in db.rows("ENUM_HCCL_DATA_TYPE", "SELECT id, name FROM ENUM_HCCL_DATA_TYPE"):
            if str(name).upper() in ascend.HCCL_DTYPE_BYTES:
                sizes[int(i)] = ascend.HCCL_DTYPE_BYTES[str(name).upper()]
    rows = db.rows("COMMUNICATION_OP", "SELECT opName, opType, groupName, startNs, endNs, count, dataType "
                                       "FROM COMMUNICATION_OP ORDER BY startNs")
    where = f"{db.path}: table COMMUNICATION_OP"
    cols = _columns(rows, 7)
    start = _exact_ints(list(cols[3]), f"{where} column startNs")
    end = _exact_ints(list(cols[4]), f"{where} column endNs")
    if (end < start).any():
        i = int(np.flatnonzero(end < start)[0])
        raise InputError(f"{where}: op {i + 1}: endNs {int(end[i])} before startNs {int(start[i])}")
    check_times(start, end - start, where)
    nbytes = []
    for count, dtype in zip(cols[5], cols[6], strict=True):
        size = sizes.get(dtype) if type(dtype) is int else None
        ok = isinstance(count, (int, float)) and not isinstance(count, bool) and math.isfinite(count) and count >= 0
        nbytes.append(int(round(count)) * size if ok and size else None)
    group_names = [strings.get(g, "") if type(g) is int else _text(g) for g in cols[2]]
    names = [strings.get(n, "") if type(n) is int else _text(n) for n in cols[0]]
    frame = pd.DataFrame({"name": pd.Series(names, dtype=object),
                          "type": pd.Series([strings.get(t, "") if type(t) is int else _text(t) for t in cols[1]],
                                            dtype=object),
                          "group_name": pd.Series(group_names, dtype=object),
                          "start_ns": start, "end_ns": end, "bytes": pd.array(nbytes, dtype="Int64")})
    return frame


def _host_spans(db: _Db) -> tuple[list[int | None], np.ndarray, np.ndarray] | None:
    """STEP_TIME's host spans in start order (ids, exact starts, exact ends), or None when the db has no
    STEP_TIME rows or no CANN_API table to map launches to them."""
    if not db.require("STEP_TIME", _OPTIONAL["STEP_TIME"], optional=True):
        return None
    host = db.rows("STEP_TIME", "SELECT id, startNs, endNs FROM STEP_TIME ORDER BY startNs")
    if not host or not db.require("CANN_API", _OPTIONAL["CANN_API"], optional=True):
        return None
    where = f"{db.path}: table STEP_TIME"
    ids = [_step_id(s, where) for s, _, _ in host]
    h_start = _exact_ints([_as_int(v) for _, v, _ in host], f"{where} column startNs")
    h_end = _exact_ints([_as_int(v) for _, _, v in host], f"{where} column endNs")
    return ids, h_start, h_end


def _span_case(h_start: np.ndarray, h_end: np.ndarray) -> str | None:
    """An SQL expression over the launch row ``A``: the index of the host span that holds it whole, else NULL.

    Only when the spans are ordered and disjoint (each launch then fits at most the last span starting at
    or before it), so a binary search of nested CASEs is exact; otherwise None (overlapping spans take the
    row-by-row path, where a task counts in every span that holds its launch)."""
    if len(h_start) == 0 or bool((h_end < h_start).any()) or bool((h_start[1:] < h_end[:-1]).any()):
        return None

    def pick(lo: int, hi: int) -> str:  # spans lo..hi-1; the one with the last start <= A.startNs
        if hi - lo == 1:
            return (f"CASE WHEN A.startNs >= {int(h_start[lo])} AND A.endNs <= {int(h_end[lo])} "
                    f"THEN {lo} END")
        mid = (lo + hi) // 2
        return f"CASE WHEN A.startNs < {int(h_start[mid])} THEN {pick(lo, mid)} ELSE {pick(mid, hi)} END"

    return pick(0, len(h_start))


def _launch_key_unique(db: _Db) -> bool:
    """True when CANN_API.connectionId is its INTEGER PRIMARY KEY (one launch per connection id, as torch_npu
    writes it), so that joining tasks to launches neither repeats nor drops a task."""
    try:
        info = db.con.execute('PRAGMA table_info("CANN_API")').fetchall()
    except sqlite3.Error:
        return False
    keys = [(row[1], str(row[2]).upper()) for row in info if row[5]]
    return keys == [("connectionId", "INTEGER")]


def _joined_step_windows(db: _Db, compute: pd.DataFrame, spans: tuple, step_sql: str) -> pd.DataFrame:
    """Step windows when SQLite can place every task by its launch (``compute`` already has ``step_of``):
    per span the first start and last end of every TASK row launched inside it, aggregated in one pass."""
    ids, h_start, h_end = spans
    bad = db.rows("CANN_API", "SELECT startNs, endNs, connectionId FROM CANN_API "
                              f"WHERE type = {NODE_API_TYPE} AND NOT (typeof(startNs) = 'integer' "
                              "AND typeof(endNs) = 'integer') LIMIT 1")
    if bad:
        raise InputError(f"{db.path}: table CANN_API: expected integers, got {tuple(bad[0])!r}")
    # a TEXT cell sorts after every number (a MAX, refused by ints); see _step_windows for REAL cells
    agg = db.ints("TASK", f"SELECT COALESCE({step_sql}, -1) AS span, MIN(T.startNs), MAX(T.endNs) FROM TASK T "
                          f"JOIN CANN_API A ON A.connectionId = T.connectionId WHERE A.type = {NODE_API_TYPE} "
                          "GROUP BY span", 3)
    found = {int(i): (int(lo), int(hi)) for i, lo, hi in agg if i >= 0}
    out = []
    for i in range(len(ids)):
        lo, hi = found.get(i, (int(h_start[i]), int(h_end[i])))
        out.append({"rank": 0, "step": ids[i], "start_ns": lo, "end_ns": max(hi, int(h_end[i]))})
    frame = pd.DataFrame(out)
    frame["step"] = pd.array(frame["step"], dtype="Int64")
    return frame


def _step_windows(db: _Db, compute: pd.DataFrame, comm: pd.DataFrame, spans: tuple | None) -> pd.DataFrame:
    """Step windows and, per compute task, the index of its step (column ``step_of`` of ``compute``)."""
    compute["step_of"] = -1
    out = []
    if spans is not None:
        ids, h_start, h_end = spans
        api = db.ints("CANN_API", "SELECT startNs, endNs, COALESCE(connectionId, -1) FROM CANN_API "
                                  f"WHERE type = {NODE_API_TYPE}", 3)
        a_start, a_end, a_conn = api[:, 0], api[:, 1], api[:, 2]
        # every TASK row launched in a step counts for its window, not only the compute kernels: the
        # compute rows (read already) and, for the other TASK rows, one row per connection id with their
        # first start and last end (aggregated in SQLite: the same min and max, a third of the rows)
        # a TEXT cell sorts after every number (it would be a MAX, and is refused by ints); a REAL cell in
        # an INTEGER column is a non-integral value (SQLite stores integral ones as integers): one that is
        # neither a MIN nor a MAX does not change any window
        other = db.ints("TASK", "SELECT COALESCE(T.connectionId, -2), MIN(T.startNs), MAX(T.endNs) FROM TASK T "
                                "LEFT JOIN COMPUTE_TASK_INFO C ON C.globalTaskId = T.globalTaskId "
                                "WHERE C.globalTaskId IS NULL GROUP BY T.connectionId", 3)
        c_conn = compute["connection"].to_numpy(np.int64)
        t_conn = np.concatenate([c_conn, other[:, 0]])
        t_start = np.concatenate([compute["start_ns"].to_numpy(np.int64), other[:, 1]])
        t_end = np.concatenate([compute["end_ns"].to_numpy(np.int64), other[:, 2]])
        step_of = np.full(len(c_conn), -1, dtype=np.int64)
        for i in range(len(ids)):
            inside = (a_start >= h_start[i]) & (a_end <= h_end[i])
            mine = np.isin(t_conn, a_conn[inside])
            if mine.any():
                lo, hi = int(t_start[mine].min()), max(int(t_end[mine].max()), int(h_end[i]))
            else:
                lo, hi = int(h_start[i]), int(h_end[i])
            out.append({"rank": 0, "step": ids[i], "start_ns": lo, "end_ns": hi})
            step_of[mine[:len(c_conn)] & (step_of < 0)] = i  # a task launched in two spans: the first
        compute["step_of"] = step_of
    if not out:
        starts = [int(compute["start_ns"].min())] if len(compute) else []
        ends = [int(compute["end_ns"].max())] if len(compute) else []
        if len(comm):
            starts.append(int(comm["start_ns"].min()))
            ends.append(int(comm["end_ns"].max()))
        if not starts:
            return pd.DataFrame(columns=list(STEP_COLUMNS))
        out.append({"rank": 0, "step": None, "start_ns": min(starts), "end_ns": max(ends)})
        compute["step_of"] = -1
    frame = pd.DataFrame(out)
    frame["step"] = pd.array(frame["step"], dtype="Int64")
    return frame


def _as_int(value: object) -> object:
    """STEP_TIME stamps: integers, or integer text (torch_npu writes both)."""
    if isinstance(value, str) and re.fullmatch(r"-?\d{1,19}", value.strip()):
        return int(value.strip())
    return value


def _step_id(value: object, where: str) -> int | None:
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if type(value) is int:
        return value
    if isinstance(value, str) and re.fullmatch(r"\d{1,12}", value.strip()):
        return int(value.strip())
    raise InputError(f"{where}: step id {value!r}: expected an integer")


def _codes_of(values: pd.Series) -> tuple[np.ndarray, list[str]]:
    codes, uniques = pd.factorize(values.reset_index(drop=True), use_na_sentinel=False)
    return codes.astype(np.int64), [_text(v) for v in uniques]


def _append_codes(first: tuple[np.ndarray, list[str]], codes: np.ndarray, texts: list[str]
                  ) -> tuple[np.ndarray, list[str]]:
    """Two coded columns one after the other (the second's codes shifted past the first's texts)."""
    return np.concatenate([first[0], codes + len(first[1])]), [*first[1], *texts]


def _events(compute: pd.DataFrame, comm: pd.DataFrame, windows: pd.DataFrame, device: int | None,
            coded: dict[str, tuple[np.ndarray, list[str]]] | None = None) -> tuple[pd.DataFrame, dict[str, int]]:
    """The event table: compute kernels and HCCL ops, classified as the text reader classifies them
    (``coded``: the compute rows' name/type/core as codes and distinct texts, one decision per triple)."""
    n_c, n_m = len(compute), len(comm)
    names = pd.concat([compute["name"], comm["name"]], ignore_index=True)
    cores = pd.concat([compute["core"], pd.Series(["COMMUNICATION"] * n_m, dtype=object)], ignore_index=True)
    if coded is None or len(coded["name"][0]) != n_c:
        types = pd.concat([compute["type"], comm["type"]], ignore_index=True)
        decided = classify.classify_ascend(names, types, cores)
    else:  # the compute rows' distinct ids, then the few HCCL rows: one decision per distinct triple
        m_cores = (np.zeros(n_m, dtype=np.int64), ["COMMUNICATION"])
        parts = [_append_codes(coded[key], *extra) for key, extra in
                 (("name", _codes_of(comm["name"])), ("type", _codes_of(comm["type"])), ("core", m_cores))]
        decided = classify.classify_ascend_coded(*parts)
    start = np.concatenate([compute["start_ns"].to_numpy(np.int64), comm["start_ns"].to_numpy(np.int64)])
    end = np.concatenate([compute["end_ns"].to_numpy(np.int64), comm["end_ns"].to_numpy(np.int64)])
    # nullable integer columns built as values + mask (no Python object per row)
    step_val, step_na = np.zeros(n_c + n_m, dtype=np.int64), np.ones(n_c + n_m, dtype=bool)
    ids = windows["step"].array if len(windows) else pd.array([], dtype="Int64")
    sid_ok = ~np.asarray(ids.isna(), dtype=bool)
    sid = np.asarray(ids.to_numpy(dtype=np.int64, na_value=0), dtype=np.int64)
    of = compute["step_of"].to_numpy(np.int64) if n_c else np.zeros(0, dtype=np.int64)
    placed = np.flatnonzero(of >= 0)
    placed = placed[sid_ok[of[placed]]]
    step_val[placed], step_na[placed] = sid[of[placed]], False
    if n_m and len(windows) and sid_ok.any():
        w_start = windows["start_ns"].to_numpy(np.int64)
        w_end = windows["end_ns"].to_numpy(np.int64)
        m_start = comm["start_ns"].to_numpy(np.int64)
        for i in np.flatnonzero(sid_ok):
            hit = np.flatnonzero((m_start >= w_start[i]) & (m_start < w_end[i])) + n_c
            free = hit[step_na[hit]]
            step_val[free], step_na[free] = sid[i], False
    stream = np.concatenate([compute["stream"].to_numpy(dtype=object), np.full(n_m, "", dtype=object)])
    is_comm = decided.comm
    stream[is_comm] = np.array([f"comm:{g}" for g in decided.group[is_comm]], dtype=object)
    c_dev = compute["device"].array if n_c else pd.array([], dtype="Int64")
    dev_val = np.concatenate([np.asarray(c_dev.to_numpy(dtype=np.int64, na_value=0), dtype=np.int64),
                              np.full(n_m, 0 if device is None else device, dtype=np.int64)])
    dev_na = np.concatenate([np.asarray(c_dev.isna(), dtype=bool), np.full(n_m, device is None)])
    m_bytes = pd.array(comm["bytes"].array, dtype="Int64") if n_m else pd.array([], dtype="Int64")
    bytes_val = np.concatenate([np.zeros(n_c, dtype=np.int64),
                                np.asarray(m_bytes.to_numpy(dtype=np.int64, na_value=0), dtype=np.int64)])
    bytes_na = np.concatenate([np.ones(n_c, dtype=bool), np.asarray(m_bytes.isna(), dtype=bool)])
    table = pd.DataFrame({
        "rank": np.zeros(n_c + n_m, dtype=np.int64),
        "device": pd.arrays.IntegerArray(dev_val, dev_na),
        "stream": pd.Series(stream, dtype=object),
        "kind": pd.Series(decided.kind, dtype=object),
        "core": pd.Series(cores.to_numpy(dtype=object), dtype=object),
        "name": pd.Series(names.to_numpy(dtype=object), dtype=object),
        "family": pd.Series(decided.family, dtype=object),
        "group": pd.Series(decided.group, dtype=object),
        "start_ns": start,
        "dur_ns": end - start,
        "step": pd.arrays.IntegerArray(step_val, step_na),
        "bytes": pd.arrays.IntegerArray(bytes_val, bytes_na),
    })
    order = np.argsort(start, kind="stable")
    return make_events(table.take(order).reset_index(drop=True)), dict(decided.unclassified)


def _meta_groups(db: _Db, meta: dict[str, str]) -> dict[str, dict]:
    """parallel_group_info from META_DATA (a JSON object keyed by group name), as profiler_metadata.json has it."""
    text = meta.get("parallel_group_info")
    if not text:
        return {}
    try:
        info = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{db.path}: table META_DATA: parallel_group_info is not JSON ({exc.msg})") from None
    if not isinstance(info, dict):
        raise InputError(f"{db.path}: table META_DATA: parallel_group_info: expected an object keyed by group name")
    return {str(k): v for k, v in info.items() if isinstance(v, dict)}


def read_analysis(path: Path, comm: pd.DataFrame | None = None
                  ) -> tuple[pd.DataFrame | None, pd.DataFrame | None, pd.DataFrame | None, dict[str, str]]:
    """analysis.db: StepTraceTime, CommAnalyzerTime (+ Bandwidth bytes), CommAnalyzerMatrix totals."""
    db = _Db(path)
    try:
        step_trace = _step_trace(db) if db.require("StepTraceTime", _ANALYSIS_TABLES["StepTraceTime"],
                                                     optional=True) else None
        comm_ops, hashes = (_comm_time(db, comm) if db.require("CommAnalyzerTime", _ANALYSIS_TABLES["CommAnalyzerTime"],
                                                                 optional=True) else (None, {}))
        links = (_matrix(db) if db.require("CommAnalyzerMatrix", _ANALYSIS_TABLES["CommAnalyzerMatrix"], optional=True)
                 else None)
    finally:
        db.close()
    return step_trace, comm_ops, links, hashes


def _us_value(value: object, where: str) -> float:
    try:
        x = float(value)  # NUMERIC cells: int, float or numeric text
    except (TypeError, ValueError):
        raise InputError(f"{where}: expected a number, got {value!r}") from None
    if not (math.isfinite(x) and x >= 0):
        raise InputError(f"{where}: expected a finite time >= 0, got {value!r}")
    return x


def _us_column(values: list, where: Callable[[int], str], allow_none: bool) -> np.ndarray:
    """_us_value over a column in one vectorized pass (None -> NaN where allowed); on a bad cell the
    row-by-row path names it exactly as _us_value does."""
    try:
        x = np.array(values, dtype=np.float64)
        good = np.isfinite(x) & (x >= 0)
        if allow_none:
            good |= np.equal(np.array(values, dtype=object), None)
        if bool(good.all()) and x.shape == (len(values),):
            return x
    except (TypeError, ValueError, OverflowError):
        pass
    return np.array([float("nan") if v is None and allow_none else _us_value(v, where(i)) for i, v in enumerate(values)],
                    dtype=np.float64)


_STEP_LABEL = re.compile(r"step(\d*)")


def _step_of_label(value: object) -> int | None:
    """'step12' -> 12; anything else (or 'step' alone) -> None."""
    m = _STEP_LABEL.fullmatch(_text(value))
    return int(m.group(1)) if m and m.group(1) else None


def _step_trace(db: _Db) -> pd.DataFrame:
    cols = [c for c in STEP_TRACE_TABLE if c in db.tables["StepTraceTime"]]
    rows = db.rows("StepTraceTime", f"SELECT step, {', '.join(cols)} FROM StepTraceTime")
    out = []
    for i, row in enumerate(rows):
        where = f"{db.path}: table StepTraceTime row {i + 1}"
        rec: dict[str, object] = {"rank": 0, "step": _step_id(row[0], where)}
        for col, value in zip(cols, row[1:], strict=True):
            rec[STEP_TRACE_TABLE[col]] = _us_value(value, f"{where} column {col}")
        out.append(rec)
    frame = pd.DataFrame(out, columns=list(STEP_TRACE_COLUMNS))
    frame["rank"] = frame["rank"].astype(np.int64)
    frame["step"] = pd.array(frame["step"], dtype="Int64")
    return frame


def _comm_time(db: _Db, comm: pd.DataFrame | None) -> tuple[pd.DataFrame, dict[str, str]]:
    """CommAnalyzerTime rows as ProfileSet.comm_ops (ms -> us); start exact from COMMUNICATION_OP by op name."""
    rows = db.rows("CommAnalyzerTime", "SELECT hccl_op_name, group_name, start_timestamp, elapse_time, transit_time, "
                                       "wait_time, synchronization_time, idle_time, step FROM CommAnalyzerTime")
    transit: dict[str, float] = {}
    if db.require("CommAnalyzerBandwidth", _ANALYSIS_TABLES["CommAnalyzerBandwidth"], optional=True):
        seen = set()
        for op, transport, size in db.rows("CommAnalyzerBandwidth", "SELECT hccl_op_name, transport_type, "
                                                                   "transit_size FROM CommAnalyzerBandwidth"):
            # one row per packet-size bucket, each repeating its transport's total: count it once
            if str(transport) in ascend._TRANSPORTS and (op, transport) not in seen:
                seen.add((op, transport))
                transit[str(op)] = transit.get(str(op), 0.0) + _us_value(size, f"{db.path}: table "
                                                                         f"CommAnalyzerBandwidth op {op!r} transit_size")
    exact = {}
    if comm is not None and len(comm):
        unique = comm.drop_duplicates("name", keep=False)
        exact = dict(zip(unique["name"], unique["start_ns"], strict=True))
    # column by column (a 1M-task rank has thousands of ops); a bad cell is named as _us_value names it
    cols = _columns(rows, 9)

    def where(i: int, column: str = "") -> str:
        return f"{db.path}: table CommAnalyzerTime row {i + 1}" + (f" column {column}" if column else "")

    names = [_text(v) for v in cols[0]]
    start_us = _us_column(cols[2], lambda i: where(i, "start_timestamp"), allow_none=False)
    times = [_us_column(col, where, allow_none=True) * 1000.0 for col in cols[3:8]]
    steps = [_step_of_label(v) for v in cols[8]]
    starts = [int(exact[n]) if n in exact else int(round(float(u) * 1000)) for n, u in zip(names, start_us.tolist(),
                                                                                           strict=True)]
    hashes: dict[str, str] = {}
    groups = [_text(v) for v in cols[1]]
    for name, group in zip(names, groups, strict=True):
        hm = classify.HCOM_NAME.match(name)
        if hm and group:
            hashes.setdefault(hm.group("group"), group)
    out = {"rank": [0] * len(rows), "step": steps, "name": names, "group_hash": groups, "start_ns": starts,
           **dict(zip(("elapse_us", "transit_us", "wait_us", "synchronization_us", "idle_us"), times, strict=True)),
           "bytes": [int(round(transit[n] * 1e6)) if n in transit else None for n in names]}
    frame = pd.DataFrame(out, columns=[c for c in COMM_OP_COLUMNS if c not in ("family", "group")])
    frame["rank"] = frame["rank"].astype(np.int64)
    decided = classify.classify_ascend(frame["name"], pd.Series([""] * len(frame)),
                                       pd.Series(["COMMUNICATION"] * len(frame)))
    frame["family"] = decided.family
    frame["group"] = decided.group
    frame["step"] = pd.array(frame["step"], dtype="Int64")
    frame["bytes"] = pd.array(frame["bytes"], dtype="Int64")
    frame["start_ns"] = frame["start_ns"].astype(np.int64)
    return frame[list(COMM_OP_COLUMNS)], hashes


def _matrix(db: _Db) -> pd.DataFrame:
    """CommAnalyzerMatrix ``<op>-total`` rows as ProfileSet.links (link "src-dst", group-local ranks)."""
    rows = db.rows("CommAnalyzerMatrix", "SELECT hccl_op_name, group_name, src_rank, dst_rank, transport_type, "
                                         "transit_size, transit_time, bandwidth, step FROM CommAnalyzerMatrix")
    out = []
    for i, (op, group, src, dst, transport, size, time_ms, bw, step) in enumerate(rows):
        km = re.fullmatch(r"(?P<op>[A-Za-z0-9_]+)-total", _text(op))
        if not km:
            continue  # top/middle/bottom slices repeat what the total holds
        where = f"{db.path}: table CommAnalyzerMatrix row {i + 1}"
        out.append({"rank": 0, "step": _step_of_label(step), "op": km.group("op"),
                    "group_hash": _text(group), "link": f"{_text(src)}-{_text(dst)}", "transport": _text(transport),
                    "bytes": int(round(_us_value(size, f"{where} transit_size") * 1e6)),
                    "transit_us": _us_value(time_ms, f"{where} transit_time") * 1000.0,
                    "profiler_bandwidth_GBps": _us_value(bw, f"{where} bandwidth") if bw is not None else float("nan")})
    frame = pd.DataFrame(out, columns=list(LINK_COLUMNS))
    frame["rank"] = frame["rank"].astype(np.int64)
    frame["step"] = pd.array(frame["step"], dtype="Int64")
    return frame
