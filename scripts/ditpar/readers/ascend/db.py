"""Reader of torch_npu ``export_type`` db output: ``ascend_pytorch_profiler_<R>.db`` and ``analysis.db``.

The same AscendRank the text reader builds, from SQLite through the standard library (the three large
tables, TASK, COMPUTE_TASK_INFO and CANN_API, straight from the file's pages where the layout is the plain
one: sqlite_pages, checked as SQL checks them; anything else through SQLite). Times stay the
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

import math
import mmap
import os
import re
import sqlite3
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import numpy as np
import pandas as pd

from ditpar import files, formats, limits
from ditpar.core import classify
from ditpar.core.events import empty_events, make_events
from ditpar.core.profile import (
    BYTES_MESSAGE,
    COMM_OP_COLUMNS,
    LINK_COLUMNS,
    STEP_COLUMNS,
    STEP_TRACE_COLUMNS,
)
from ditpar.errors import InputError
from ditpar.readers.ascend import sqlite_pages
from ditpar.readers.ascend import text as ascend
from ditpar.readers.common import LIMIT, check_times, duplicate_mask

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


# --- what every column read must hold ----------------------------------------------------------


@dataclass(frozen=True)
class Col:
    """One column's type and range. kind: "int" (a stored INTEGER), "int_text" (an INTEGER or a decimal
    TEXT, as torch_npu writes STEP_TIME and msprof-analyze its rank columns), "num" (a finite INTEGER,
    REAL or numeric TEXT), "text" (anything but a BLOB). ``null``: NULL (or empty text) allowed."""

    kind: str
    lo: float = 0
    hi: float = 0
    null: bool = False
    what: str = "a value"

    def expect(self) -> str:
        """The words for a message: what the column holds and its range."""
        if self.kind == "text":
            return self.what
        return f"{self.what} in {_bound(self.lo)}..{_bound(self.hi)}" + (" or empty" if self.null else "")


def _bound(x: float) -> str:
    for k in (62, 63, 64):
        if x in (2**k - 1, 2**k):
            return f"2**{k}" + ("-1" if x == 2**k - 1 else "")
    return f"{x:g}" if isinstance(x, float) else str(x)


INT64 = 2**63 - 1
#: stamps in ns: 0..2**62 (146 years; keeps start + duration inside int64)
NS = Col("int", 0, LIMIT - 1, what="an integer ns stamp")
#: a STRING_IDS id (or NULL): the text is looked up, an id STRING_IDS lacks is refused where it is read
STRING_ID = Col("int", 0, INT64, True, "a STRING_IDS id")
#: analysis tables: times in us and ms, sizes in MB, bandwidth in GB/s (1e9 GB/s is far beyond any link)
US = Col("num", 0, LIMIT / 1e3, what="a time in us")
MS = Col("num", 0, LIMIT / 1e6, True, "a time in ms")
MB = Col("num", 0, LIMIT / 1e6, what="a size in MB")
MAX_GBPS = 1e9
GBPS = Col("num", 0, MAX_GBPS, True, "a bandwidth in GB/s")
STEP_LABEL = Col("text", what="a step label")
RANK = Col("int_text", 0, limits.MAX_RANK_ID, what="a rank id")
TEXT = Col("text", null=True, what="text")
#: an element count of COMMUNICATION_OP: count x 16 bytes (the widest type) stays below 2**62
MAX_COUNT = 2**58

SCHEMA: dict[str, dict[str, Col]] = {
    "TASK": {"startNs": NS, "endNs": NS, "deviceId": Col("int", 0, limits.MAX_DEVICES - 1, True, "a device id"),
             "connectionId": Col("int", 0, INT64, True, "a connection id"),
             "globalTaskId": Col("int", 0, INT64, what="a task id"),
             "streamId": Col("int", 0, 2**32 - 1, True, "a stream id")},
    "COMPUTE_TASK_INFO": {"name": STRING_ID, "globalTaskId": Col("int", 0, INT64, what="a task id"),
                          "taskType": STRING_ID, "opType": STRING_ID},
    "STRING_IDS": {"id": Col("int", 0, INT64, what="a string id"), "value": TEXT},
    "COMMUNICATION_OP": {"opName": STRING_ID, "startNs": NS, "endNs": NS, "groupName": STRING_ID,
                         "opType": STRING_ID, "count": Col("int", 0, MAX_COUNT, True, "an element count"),
                         "dataType": Col("int", 0, 2**32 - 1, True, "an ENUM_HCCL_DATA_TYPE id")},
    "STEP_TIME": {"id": Col("int_text", 0, 10**12 - 1, True, "a step number"),
                  "startNs": Col("int_text", 0, LIMIT - 1, what="an integer ns stamp"),
                  "endNs": Col("int_text", 0, LIMIT - 1, what="an integer ns stamp")},
    "CANN_API": {"startNs": NS, "endNs": NS, "type": Col("int", 0, 2**32 - 1, what="an API type id"),
                 "connectionId": Col("int", 0, INT64, True, "a connection id")},
    "ENUM_HCCL_DATA_TYPE": {"id": Col("int", 0, 2**32 - 1, what="a data type id"), "name": TEXT},
    "RANK_DEVICE_MAP": {"rankId": Col("int", 0, limits.MAX_RANK_ID, what="a rank id"),
                        "deviceId": Col("int", 0, limits.MAX_DEVICES - 1, what="a device id")},
    "META_DATA": {"name": TEXT, "value": TEXT},
    # analysis.db
    "StepTraceTime": {"step": Col("int_text", 0, 10**12 - 1, True, "a step number"),
                      **{c: US for c in STEP_TRACE_TABLE}},
    "CommAnalyzerTime": {"hccl_op_name": TEXT, "group_name": TEXT, "start_timestamp": US,
                         **{c: MS for c in ("elapse_time", "transit_time", "wait_time", "synchronization_time",
                                            "idle_time")}, "step": STEP_LABEL},
    "CommAnalyzerBandwidth": {"hccl_op_name": TEXT, "transport_type": TEXT, "transit_size": MB},
    "CommAnalyzerMatrix": {"hccl_op_name": TEXT, "group_name": TEXT, "src_rank": RANK, "dst_rank": RANK,
                           "transport_type": TEXT, "transit_size": MB, "transit_time": MS, "bandwidth": GBPS,
                           "step": STEP_LABEL},
}


def ident(name: str) -> str:
    """An SQL identifier quoted for any name a hostile file may hold (double quotes doubled)."""
    return '"' + name.replace('"', '""') + '"'


def _num_text(value: object) -> float | None:
    """SQLite helper: a TEXT cell as a finite number, else NULL (registered on every connection)."""
    try:
        x = float(str(value).strip())
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def _ok_sql(name: str, col: Col) -> str:
    """An SQL expression that is 1 when the cell of ``name`` fits ``col`` and 0 otherwise (never NULL:
    each comparison is reached only for a cell of the right type). Kept to plain typeof and BETWEEN
    tests for the INTEGER kinds, so a million TASK rows are checked in a few tenths of a second."""
    c = ident(name)
    if col.kind == "text":
        return f"(typeof({c}) <> 'blob')"
    rng = f"BETWEEN {col.lo!r} AND {col.hi!r}"
    if col.kind == "int":
        ok = f"(typeof({c}) = 'integer' AND {c} {rng})"
        return f"({c} IS NULL OR {ok})" if col.null else ok
    if col.kind == "int_text":
        digits = (f"(typeof({c}) = 'text' AND trim({c}) <> '' AND trim({c}) NOT GLOB '*[^0-9]*' "
                  f"AND length(trim({c})) <= 18 AND CAST(trim({c}) AS INTEGER) {rng})")
        ok = f"((typeof({c}) = 'integer' AND {c} {rng}) OR {digits})"
    else:
        ok = (f"((typeof({c}) IN ('integer', 'real') AND {c} {rng}) "
              f"OR (typeof({c}) = 'text' AND COALESCE(ditpar_num({c}) {rng}, 0)))")
    if col.null:
        ok = f"({c} IS NULL OR (typeof({c}) = 'text' AND trim({c}) = '') OR {ok})"
    return ok


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
        self._buf: np.ndarray | None = None  # the file's bytes, mapped once for pages()
        wal = _check_header(path)
        try:
            self.con = sqlite3.connect(self._uri(path, wal), uri=True, timeout=1.0)
            self.con.create_function("ditpar_num", 1, _num_text, deterministic=True)
            self.tables: dict[str, tuple[str, ...]] = {}
            # every table's columns in one query (a PRAGMA per table cost a millisecond per rank)
            for name, column in self.con.execute(
                    "SELECT m.name, p.name FROM sqlite_master AS m, pragma_table_info(m.name) AS p "
                    "WHERE m.type = 'table' ORDER BY m.rowid, p.cid").fetchall():
                if isinstance(name, str):
                    self.tables[name] = (*self.tables.get(name, ()), column)
        except (sqlite3.Error, ValueError) as exc:  # ValueError: a name holding a NUL character
            raise InputError(f"{path}: cannot read as an SQLite database ({_reason(exc)})") from None

    def _uri(self, path: Path, wal: bool) -> str:
        """How to open it without writing beside it. A rollback-journal db: read-only (a writer's lock
        is then seen). A WAL db (torch_npu writes them so) would get -shm/-wal files created next to it:
        with no committed log it is opened immutable; with one (a run cut before its checkpoint) the
        db and its log are read from a private copy, so the logged rows count and the folder stays as it is."""
        if not wal:
            return f"file:{quote(str(path.resolve()))}?mode=ro"
        log = path.with_name(path.name + "-wal")
        logged = os.path.lexists(log)
        if logged:  # a log that is a FIFO, device, folder or dangling link would block or fail the copy
            why = files.input_problem(log)
            if why:
                raise InputError(f"{why} (the write-ahead log of {path.name})")
            logged = log.stat().st_size > 0
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

    def check(self, table: str, schema: dict[str, Col] | None = None, where: str = "") -> None:
        """Every row of ``table`` holds in each column of ``schema`` (default SCHEMA[table]) the type and
        range given there; the first cell that does not is one InputError naming table, row, column, the
        value and what was expected. One scan in SQLite (a million TASK rows: a fraction of a second).
        ``where``: an SQL condition on the rows that are read (others are not checked)."""
        cols = {c: k for c, k in (schema or SCHEMA[table]).items() if c in self.tables.get(table, ())}
        if not cols:
            return
        tests = [_ok_sql(c, k) for c, k in cols.items()]
        cond = " OR ".join(f"NOT {t}" for t in tests)
        scope = f"({where}) AND " if where else ""
        sql = (f"SELECT rowid, {', '.join(tests)}, {', '.join(ident(c) for c in cols)} FROM {ident(table)} "
               f"WHERE {scope}({cond}) LIMIT 1")
        bad = self.rows(table, sql)
        if not bad:
            return
        rowid, oks, values = bad[0][0], bad[0][1:1 + len(cols)], bad[0][1 + len(cols):]
        name, value = next((c, v) for c, ok, v in zip(cols, oks, values, strict=True) if not ok)
        raise InputError(f"{self.path}: table {table} {self.row_of(table, rowid)} column {name}: "
                         f"{_shown(value)}: expected {cols[name].expect()}")

    def row_of(self, table: str, rowid: object) -> str:
        """'row N' (N counted from 1 in the table's storage order) for a rowid."""
        if type(rowid) is not int:
            return "row ?"
        got = self.rows(table, f"SELECT COUNT(*) FROM {ident(table)} WHERE rowid <= ?", (rowid,))
        return f"row {got[0][0]}"

    def empty(self, table: str) -> bool:
        """True when the table has no row."""
        return not self.rows(table, f"SELECT EXISTS (SELECT 1 FROM {ident(table)})")[0][0]

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

    def pages(self, table: str, schema: dict[str, Col], where: tuple[str, int] | None = None
              ) -> sqlite_pages.Table | None:
        """The ``schema`` columns of ``table`` read straight from the file's pages (sqlite_pages), with each
        cell's kind for _fits; None where that read does not apply (a private WAL copy, a rollback journal
        beside the file, a column without INTEGER affinity, a layout sqlite_pages does not know): the
        caller then reads through SQLite. Several times faster than fetching the rows through SQLite.
        ``where`` (column, value): only the rows holding that INTEGER there (SQL ``column = value``)."""
        if self._snapshot is not None or os.path.lexists(f"{self.path}-journal"):
            return None
        try:
            found = self.con.execute("SELECT rootpage, sql FROM sqlite_master WHERE type = 'table' AND name = ?",
                                     (table,)).fetchall()
            info = self.con.execute(f"PRAGMA table_xinfo({ident(table)})").fetchall()
        except sqlite3.Error:
            return None
        if len(found) != 1 or type(found[0][0]) is not int or not isinstance(found[0][1], str):
            return None
        sql = found[0][1].upper()
        declared = {row[1]: (row[0], str(row[2] or "").upper(), row[5], row[6] if len(row) > 6 else 0) for row in info}
        if "WITHOUT" in sql or "DESC" in sql or any(d[3] for d in declared.values()):
            return None  # WITHOUT ROWID, an INTEGER PRIMARY KEY DESC (no rowid alias) or a generated column
        if any(c not in declared or "INT" not in declared[c][1] or col.kind != "int" for c, col in schema.items()):
            return None
        keys = [name for name, d in declared.items() if d[2]]
        alias = keys[0] if len(keys) == 1 and declared[keys[0]][1] == "INTEGER" else None
        try:
            if self._buf is None:
                with open(self.path, "rb") as fh:
                    self._buf = np.frombuffer(mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ), dtype=np.uint8)
            read = sqlite_pages.read_table(self._buf, found[0][0], {c: declared[c][0] for c in schema}, len(declared),
                                           alias, where)
        except (OSError, ValueError, IndexError, sqlite_pages.NotPlain):  # IndexError: a damaged page; SQLite names it
            return None
        return read

    def close(self) -> None:
        self._buf = None
        self.con.close()
        if self._snapshot is not None:
            self._snapshot.cleanup()


def _fits(read: sqlite_pages.Table, schema: dict[str, Col], rows: np.ndarray | None = None) -> bool:
    """Every cell of ``read`` (or of its ``rows``) holds what :meth:`_Db.check` asks of an "int" column:
    a stored INTEGER within the column's range, or NULL where the column allows it."""
    for name, col in schema.items():
        value, kind = read.value[name], read.kind[name]
        if rows is not None:
            value, kind = value[rows], kind[rows]
        if not len(value):
            continue
        if (kind == sqlite_pages.INTEGER).all():  # the usual case: two reductions, no mask of the rows
            if value.min() < col.lo or value.max() > col.hi:
                return False
            continue
        ok = (kind == sqlite_pages.INTEGER) & (value >= col.lo) & (value <= col.hi)
        if col.null:
            ok |= kind == sqlite_pages.NULL
        if not ok.all():
            return False
    return True


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def _shown(value: object) -> str:
    """A cell for a message: its repr, cut to 60 characters."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _check_header(path: Path) -> bool:
    """A file shorter than its own header says (page size x page count) was cut off while copying.
    Returns whether the db is in WAL mode (file format versions 2 at offsets 18 and 19, sqlite.org/fileformat).
    Only a regular file is opened (files.regular_input): a FIFO would block the read, /dev/zero never end
    SQLite's, a folder is named as one; the path is then registered as an input of the run."""
    files.regular_input(path)
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


def _strings(db: _Db, required: bool = True) -> dict[int, str]:
    """STRING_IDS as {id: text}. Empty while names are to be looked up in it (``required``): an error naming
    the table (every kernel would be nameless); an id given twice with two texts: an error naming both rows."""
    db.check("STRING_IDS")
    rows = db.rows("STRING_IDS", "SELECT rowid, id, value FROM STRING_IDS")
    if not rows and required:
        raise InputError(f"{db.path}: table STRING_IDS has no rows; expected the kernel and op names the other "
                         "tables refer to (an export cut before its strings were written?)")
    ids = [i for _, i, _ in rows]
    if len(set(ids)) == len(ids):  # each id once (as torch_npu writes it): no text to compare
        return dict(zip(ids, [v if type(v) is str else "" if v is None else str(v) for _, _, v in rows], strict=True))
    out: dict[int, str] = {}
    first: dict[int, int] = {}
    for n, (_, i, v) in enumerate(rows, 1):
        text = "" if v is None else str(v)
        if i in out and out[i] != text:
            raise InputError(f"{db.path}: table STRING_IDS rows {first[i]} and {n}: id {i} stands for "
                             f"{_shown(out[i])} and {_shown(text)}; expected one text per id")
        out.setdefault(i, text)
        first.setdefault(i, n)
    return out


def _check_schema(db: _Db) -> dict[str, str]:
    """META_DATA as a dict; a SCHEMA_VERSION_MAJOR this reader does not know is an input error."""
    if not db.require("META_DATA", _OPTIONAL["META_DATA"], optional=True):
        return {}
    db.check("META_DATA")
    meta = {str(k): ("" if v is None else str(v)) for k, v in db.rows("META_DATA", "SELECT name, value FROM META_DATA")}
    major = meta.get("SCHEMA_VERSION_MAJOR")
    if major is not None and major.strip() not in KNOWN_SCHEMA_MAJOR:
        # the field checked is SCHEMA_VERSION_MAJOR: quote it (SCHEMA_VERSION may say something else)
        full = f" (SCHEMA_VERSION {_shown(meta['SCHEMA_VERSION'])})" if "SCHEMA_VERSION" in meta else ""
        raise InputError(f"{db.path}: table META_DATA: SCHEMA_VERSION_MAJOR {_shown(major)}{full}; "
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


def _optional_file(path: Path) -> bool:
    """True when something is at ``path`` (a file, or anything that must then be named as not one: a
    folder, FIFO or dangling link is an error from files.regular_input / read_input, never 'absent')."""
    return os.path.lexists(path)


def _metadata_groups(path: Path) -> dict[str, dict]:
    """profiler_metadata.json parallel_group_info, read as the text export reads it (one rule for both)."""
    return ascend._parallel_groups(path)


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
        tasks = _task_pages(db)
        if tasks is None:  # read through SQLite: checked there, each bad cell named
            db.check("TASK")
            db.check("COMPUTE_TASK_INFO")
        if len(tasks.task.rowid) == 0 if tasks is not None else db.empty("TASK"):
            raise InputError(f"{path}: table TASK has no rows; expected the device tasks of the capture "
                             "(an export cut before the device data was written?)")
        strings = _strings(db)
        rank, rank_from = ascend.rank_of(rank_dir)
        if rank is None:
            rank, rank_from = _db_rank(db, path)
        spans = _host_spans(db)
        compute, coded = _compute_tasks(db, strings, tasks)
        comm = _comm_ops(db, strings)
        windows = _step_windows(db, compute, comm, spans, tasks)
        events, unplaced = _events(compute, comm, windows, _device(db, compute), coded)
        meta_groups = _meta_groups(db, meta)
    finally:
        db.close()
    sources = [path]
    meta_path = rank_dir / "profiler_metadata.json"
    if not meta_groups and _optional_file(meta_path):
        meta_groups = _metadata_groups(meta_path)
        sources.append(meta_path)
    step_trace = comm_ops = links = None
    hashes: dict[str, str] = {}
    analysis = out_dir / ANALYSIS_DB
    if _optional_file(analysis):
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
    if not _optional_file(analysis):  # a folder or FIFO there is named by _Db below, not taken as absent
        raise InputError(f"{out_dir}: no {ANALYSIS_DB}: the profiler's summary tables "
                         f"({', '.join(SUMMARY_TABLES)}) are not there; have {sorted(p.name for p in out_dir.iterdir())}"
                         "; read the task rows instead (without --profiler-tables)")
    db = _Db(path)
    try:
        meta = _check_schema(db)
        rank, rank_from = ascend.rank_of(rank_dir)
        if rank is None:
            rank, rank_from = _db_rank(db, path)
        comm = (_comm_ops(db, _strings(db, required=False))
                if db.require("STRING_IDS", _NEED["STRING_IDS"], optional=True) else None)
        meta_groups = _meta_groups(db, meta)
    finally:
        db.close()
    sources = [path, analysis]
    meta_path = rank_dir / "profiler_metadata.json"
    if not meta_groups and _optional_file(meta_path):
        meta_groups = _metadata_groups(meta_path)
        sources.append(meta_path)
    have = _Db(analysis)
    tables = sorted(have.tables)
    if not any(t in tables for t in SUMMARY_TABLES):
        have.close()
        raise InputError(f"{analysis}: none of the summary tables {list(SUMMARY_TABLES)}; have {tables}; "
                         "read the task rows instead (without --profiler-tables)")
    step_trace, comm_ops, links, hashes = read_analysis(analysis, comm, have)
    for group_name in sorted(set(comm["group_name"])) if comm is not None and len(comm) else []:
        if group_name:
            full = str(ascend.double_hash(group_name))
            hashes.setdefault(full[-3:], full)
    events = empty_events()
    groups = ascend._groups(events, hashes, meta_groups, None)
    read = ascend.AscendRank(rank, rank_from, events, pd.DataFrame(columns=list(STEP_COLUMNS)), step_trace,
                             comm_ops, groups, {}, sources, links, "transit" if comm_ops is not None else "")
    read.evidence = [name for table, name in SUMMARY_TABLES.items()
                     if {"step_trace": step_trace, "communication": comm_ops, "links": links}[name] is not None]
    return read


def _db_rank(db: _Db, path: Path) -> tuple[int | None, str]:
    if db.require("RANK_DEVICE_MAP", _OPTIONAL["RANK_DEVICE_MAP"], optional=True):
        db.check("RANK_DEVICE_MAP")
        ranks = {r for (r,) in db.rows("RANK_DEVICE_MAP", "SELECT rankId FROM RANK_DEVICE_MAP")}
        if len(ranks) == 1:
            return min(ranks), "RANK_DEVICE_MAP rankId"
    m = re.fullmatch(r"ascend_pytorch_profiler_(\d+)\.db", path.name)
    if m:
        rank = limits.integer(m.group(1)[:12], f"{path}: rank in the file name", 0, limits.MAX_RANK_ID)
        return rank, f"{path.name} file name"
    return None, "unknown"


def _device(db: _Db, compute: pd.DataFrame) -> int | None:
    if len(compute):
        devices = compute["device"].dropna().unique()
        if len(devices) == 1:
            return int(devices[0])
    if db.require("RANK_DEVICE_MAP", _OPTIONAL["RANK_DEVICE_MAP"], optional=True):
        db.check("RANK_DEVICE_MAP")
        devs = {d for (d,) in db.rows("RANK_DEVICE_MAP", "SELECT deviceId FROM RANK_DEVICE_MAP")}
        if len(devs) == 1:
            return min(devs)
    return None


@dataclass
class _Tasks:
    """TASK and COMPUTE_TASK_INFO read from the file's pages and checked (_task_pages); ``compute``: the TASK
    rows that have a COMPUTE_TASK_INFO row, ``info``: that row for each of them."""

    task: sqlite_pages.Table
    compute: np.ndarray
    info: np.ndarray
    cti: sqlite_pages.Table


def _task_pages(db: _Db) -> _Tasks | None:
    """TASK and COMPUTE_TASK_INFO from the file's pages, every cell as SCHEMA asks, joined on globalTaskId
    in numpy (what the SQL JOIN of _compute_tasks gives); None where the pages cannot be read, a cell
    does not fit (db.check then names it) or COMPUTE_TASK_INFO repeats a globalTaskId (read through
    SQLite, as before, so the repeated task is named there)."""
    task = db.pages("TASK", SCHEMA["TASK"])
    cti = db.pages("COMPUTE_TASK_INFO", SCHEMA["COMPUTE_TASK_INFO"]) if task is not None else None
    if cti is None or not (_fits(task, SCHEMA["TASK"]) and _fits(cti, SCHEMA["COMPUTE_TASK_INFO"])):
        return None
    c_gid = cti.value["globalTaskId"]
    order = np.argsort(c_gid, kind="stable")
    keys = c_gid[order]
    if len(keys) > 1 and not bool((keys[1:] != keys[:-1]).all()):
        return None
    t_gid = task.value["globalTaskId"]
    at = np.minimum(np.searchsorted(keys, t_gid), max(len(keys) - 1, 0))
    hit = keys[at] == t_gid if len(keys) else np.zeros(len(t_gid), dtype=bool)
    compute = np.flatnonzero(hit)
    return _Tasks(task, compute, order[at[compute]], cti)


def _or_null(read: sqlite_pages.Table, column: str, rows: np.ndarray, fill: int) -> np.ndarray:
    """A column's values at ``rows`` with ``fill`` where the cell is NULL (SQL's COALESCE)."""
    value = read.value[column][rows]
    value[read.kind[column][rows] == sqlite_pages.NULL] = fill
    return value


def _compute_rows(db: _Db, tasks: _Tasks | None) -> np.ndarray:
    """The compute kernels as an (n, 9) int64 array ordered by start then globalTaskId: start, end,
    device (-1: NULL), stream (-1), connection (-2), globalTaskId, name, opType, taskType ids (-1)."""
    if tasks is not None:
        t, c, rows, info = tasks.task, tasks.cti, tasks.compute, tasks.info
        cols = np.column_stack([t.value["startNs"][rows], t.value["endNs"][rows], _or_null(t, "deviceId", rows, -1),
                                _or_null(t, "streamId", rows, -1), _or_null(t, "connectionId", rows, -2),
                                t.value["globalTaskId"][rows], _or_null(c, "name", info, -1),
                                _or_null(c, "opType", info, -1), _or_null(c, "taskType", info, -1)])
        return cols[np.lexsort((cols[:, 5], cols[:, 0]))]
    join = "FROM TASK T JOIN COMPUTE_TASK_INFO C ON C.globalTaskId = T.globalTaskId"
    head = ("SELECT T.startNs, T.endNs, COALESCE(T.deviceId, -1), COALESCE(T.streamId, -1), "
            "COALESCE(T.connectionId, -2), T.globalTaskId, ")
    # the three string ids in one integer (fewer Python objects per row); a row whose ids do not fit gets
    # -1 and the whole read is made again with the ids apart
    fits = " AND ".join(f"(C.{c} IS NULL OR (typeof(C.{c}) = 'integer' AND C.{c} BETWEEN 0 AND {_ID_SPAN - 2}))"
                        for c in ("name", "opType", "taskType"))
    ids = (f"CASE WHEN {fits} THEN ((COALESCE(C.name, -1) + 1) * {_ID_SPAN} + COALESCE(C.opType, -1) + 1) "
           f"* {_ID_SPAN} + COALESCE(C.taskType, -1) + 1 ELSE -1 END")
    packed = db.ints("TASK", f"{head}{ids} {join} ORDER BY T.startNs, T.globalTaskId", 7)
    if not (packed[:, 6] < 0).any():
        cols = np.empty((len(packed), 9), dtype=np.int64)
        cols[:, :6] = packed[:, :6]
        key = packed[:, 6]
        del packed
        cols[:, 6], cols[:, 7], cols[:, 8] = key // _ID_SPAN**2 - 1, key // _ID_SPAN % _ID_SPAN - 1, key % _ID_SPAN - 1
    else:
        del packed
        cols = db.ints("TASK", f"{head}COALESCE(C.name, -1), COALESCE(C.opType, -1), COALESCE(C.taskType, -1) "
                               f"{join} ORDER BY T.startNs, T.globalTaskId", 9)
    return cols


def _compute_tasks(db: _Db, strings: dict[int, str], tasks: _Tasks | None = None
                   ) -> tuple[pd.DataFrame, dict[str, tuple[np.ndarray, list[str]]]]:
    """TASK rows of compute kernels (COMPUTE_TASK_INFO), in start order, with their connection ids.
    A task read twice (TASK or COMPUTE_TASK_INFO repeating a globalTaskId) is refused: see _no_repeated_task."""
    cols = _compute_rows(db, tasks)
    where = f"{db.path}: table TASK"
    start, end = cols[:, 0].copy(), cols[:, 1].copy()
    if (end < start).any():
        i = int(np.flatnonzero(end < start)[0])
        raise InputError(f"{where}: compute task {i + 1}: endNs {int(end[i])} before startNs {int(start[i])}")
    check_times(start, end - start, where)
    _no_repeated_task(db, start, cols[:, 5])
    device = pd.array(cols[:, 2], dtype="Int64")
    device[cols[:, 2] < 0] = pd.NA
    s_uniq, s_codes = np.unique(cols[:, 3], return_inverse=True)
    streams = np.array(["" if v < 0 else str(int(v)) for v in s_uniq] or [""], dtype=object)
    frame = pd.DataFrame({"start_ns": start, "end_ns": end, "device": device,
                          "stream": pd.Series(streams[s_codes.ravel()] if len(cols) else [], dtype=object),
                          "connection": cols[:, 4].copy()})
    coded: dict[str, tuple[np.ndarray, list[str]]] = {}
    for key, col, column in (("name", 6, "name"), ("type", 7, "opType"), ("core", 8, "taskType")):
        codes, texts = _coded_texts(cols[:, col], strings, db, column)
        frame[key] = pd.Series(np.array(texts or [""], dtype=object)[codes] if len(codes) else [], dtype=object)
        coded[key] = (codes, texts)
    return frame, coded


def _no_repeated_task(db: _Db, start: np.ndarray, task_id: np.ndarray) -> None:
    """Refuse a task read twice: the same globalTaskId (and so the same start) in two joined rows.

    torch_npu writes one TASK row per device task and COMPUTE_TASK_INFO keyed by globalTaskId (its
    INTEGER PRIMARY KEY), so a repeated row is damage (a merge or copy gone wrong), not a profiler
    habit: counted twice it would double the kernel's time, counted once it would hide the damage.
    Only rows whose start repeats are compared (common.duplicate_mask), so the check costs little."""
    dup = duplicate_mask(start, lambda rows: {"task": task_id[rows]})
    if dup is None:
        return
    i = int(np.flatnonzero(dup)[0])
    gid = int(task_id[i])
    for table in ("TASK", "COMPUTE_TASK_INFO"):
        rowids = [r for (r,) in db.rows(table, f"SELECT rowid FROM {table} WHERE globalTaskId = ? LIMIT 2", (gid,))]
        if len(rowids) > 1:
            rows = " and ".join(db.row_of(table, r).removeprefix("row ") for r in rowids)
            raise InputError(f"{db.path}: table {table} rows {rows}: globalTaskId {gid} twice (startNs "
                             f"{int(start[i])}); expected one row per task (a repeated row would count the "
                             f"kernel twice)")
    raise InputError(f"{db.path}: table TASK: globalTaskId {gid} is read twice (startNs {int(start[i])}); "
                     "expected one row per task")


#: one string id per 21 bits when three are packed in one int64 (_compute_tasks)
_ID_SPAN = 1 << 21


def _coded_texts(ids: np.ndarray, strings: dict[int, str], db: _Db | None = None, column: str = ""
                 ) -> tuple[np.ndarray, list[str]]:
    """STRING_IDS ids as codes into their distinct texts (one Python string per distinct id); an id that
    STRING_IDS lacks (-1 stands for NULL) is an error naming COMPUTE_TASK_INFO's column and row."""
    uniq, codes = np.unique(ids, return_inverse=True)
    missing = [int(u) for u in uniq if u >= 0 and int(u) not in strings]
    if missing and db is not None:
        got = db.rows("COMPUTE_TASK_INFO", f"SELECT rowid FROM COMPUTE_TASK_INFO WHERE {ident(column)} = ? LIMIT 1",
                      (missing[0],))
        row = db.row_of("COMPUTE_TASK_INFO", got[0][0]) if got else "row ?"
        raise InputError(f"{db.path}: table COMPUTE_TASK_INFO {row} column {column}: id {missing[0]} is not in "
                         f"STRING_IDS ({len(missing)} such id(s)); expected an id of table STRING_IDS")
    return codes.ravel().astype(np.int64), [strings.get(int(u), "") for u in uniq]


def _text(value: object) -> str:
    return "" if value is None else str(value)


def _comm_ops(db: _Db, strings: dict[int, str]) -> pd.DataFrame:
    """COMMUNICATION_OP rows: name, type, communicator, exact start/end, message bytes (count x dtype).
    Every cell is checked against SCHEMA first; a name id STRING_IDS lacks, a dataType id that
    ENUM_HCCL_DATA_TYPE lacks and a row repeated verbatim are errors naming the row."""
    columns = ["name", "type", "group_name", "start_ns", "end_ns", "bytes"]
    if not db.require("COMMUNICATION_OP", _OPTIONAL["COMMUNICATION_OP"], optional=True):
        return pd.DataFrame(columns=columns)
    db.check("COMMUNICATION_OP")
    sizes: dict[int, int] = {}
    enum: set[int] | None = None
    if db.require("ENUM_HCCL_DATA_TYPE", _OPTIONAL["ENUM_HCCL_DATA_TYPE"], optional=True):
        db.check("ENUM_HCCL_DATA_TYPE")
        enum = set()
        for i, name in db.rows("ENUM_HCCL_DATA_TYPE", "SELECT id, name FROM ENUM_HCCL_DATA_TYPE"):
            enum.add(i)
            if str(name).upper() in ascend.HCCL_DTYPE_BYTES:
                sizes[int(i)] = ascend.HCCL_DTYPE_BYTES[str(name).upper()]
    rows = db.rows("COMMUNICATION_OP", "SELECT opName, opType, groupName, startNs, endNs, count, dataType "
                                       "FROM COMMUNICATION_OP ORDER BY rowid")
    where = f"{db.path}: table COMMUNICATION_OP"
    refuse_repeated_rows(where, rows, "one row per op (a repeated row would count the op twice)")
    for n, row in enumerate(rows, 1):
        for col, value in (("opName", row[0]), ("opType", row[1]), ("groupName", row[2])):
            if value is not None and value not in strings:
                raise InputError(f"{where} row {n} column {col}: id {value} is not in STRING_IDS; "
                                 "expected an id of table STRING_IDS")
        if enum is not None and row[6] is not None and row[6] not in enum:
            raise InputError(f"{where} row {n} column dataType: id {row[6]} is not in ENUM_HCCL_DATA_TYPE "
                             f"(ids {sorted(enum)[:16]}); expected one of them")
    rows.sort(key=lambda r: r[3])
    cols = _columns(rows, 7)
    start = _exact_ints(list(cols[3]), f"{where} column startNs")
    end = _exact_ints(list(cols[4]), f"{where} column endNs")
    if (end < start).any():
        i = int(np.flatnonzero(end < start)[0])
        raise InputError(f"{where}: op {i + 1}: endNs {int(end[i])} before startNs {int(start[i])}")
    check_times(start, end - start, where)
    nbytes = []
    for count, dtype in zip(cols[5], cols[6], strict=True):
        size = sizes.get(dtype) if dtype is not None else None
        nbytes.append(count * size if count is not None and size else None)
    frame = pd.DataFrame({"name": pd.Series([_name(strings, n) for n in cols[0]], dtype=object),
                          "type": pd.Series([_name(strings, t) for t in cols[1]], dtype=object),
                          "group_name": pd.Series([_name(strings, g) for g in cols[2]], dtype=object),
                          "start_ns": start, "end_ns": end, "bytes": pd.array(nbytes, dtype="Int64")})
    return frame


def _name(strings: dict[int, str], sid: int | None) -> str:
    return "" if sid is None else strings[sid]


def _host_spans(db: _Db) -> tuple[list[int | None], np.ndarray, np.ndarray] | None:
    """STEP_TIME's host spans in start order (ids, exact starts, exact ends), or None when the db has no
    STEP_TIME rows or no CANN_API table to map launches to them.

    Every span must end at or after its start, no two may share a step id or their time, and none may
    overlap another (torch_npu's ProfilerStep spans follow one another; a launch then has at most one
    span): each is an error naming the rows (counted from 1 in the table's storage order)."""
    if not db.require("STEP_TIME", _OPTIONAL["STEP_TIME"], optional=True):
        return None
    db.check("STEP_TIME")
    host = db.rows("STEP_TIME", "SELECT id, startNs, endNs FROM STEP_TIME ORDER BY rowid")
    if not host:
        return None
    where = f"{db.path}: table STEP_TIME"
    ids = [_step_id(s, where) for s, _, _ in host]
    start = np.array([int(_as_int(v)) for _, v, _ in host], dtype=np.int64)  # checked: int or digits
    end = np.array([int(_as_int(v)) for _, _, v in host], dtype=np.int64)
    back = np.flatnonzero(end < start)
    if back.size:
        i = int(back[0])
        raise InputError(f"{where} row {i + 1}: endNs {int(end[i])} before startNs {int(start[i])}; "
                         "expected a ProfilerStep span")
    first: dict[object, int] = {}
    for i, key in enumerate(ids):
        if key is not None and key in first:
            raise InputError(f"{where} rows {first[key] + 1} and {i + 1}: step {key} twice; expected one span per step")
        first.setdefault(key, i)
    order = np.argsort(start, kind="stable")
    s, e = start[order], end[order]
    clash = np.flatnonzero((s[1:] < e[:-1]) | ((s[1:] == s[:-1]) & (e[1:] == e[:-1])))  # zero-length twins too
    if clash.size:
        a, b = int(order[clash[0]]), int(order[clash[0] + 1])
        what = "the same span" if (start[a], end[a]) == (start[b], end[b]) else "overlapping spans"
        raise InputError(f"{where} rows {min(a, b) + 1} and {max(a, b) + 1}: {what} ({int(start[a])}..{int(end[a])} "
                         f"and {int(start[b])}..{int(end[b])} ns); expected one ProfilerStep span after another")
    if not db.require("CANN_API", _OPTIONAL["CANN_API"], optional=True):
        return None
    return [ids[i] for i in order], s, e


def _span_of(h_start: np.ndarray, h_end: np.ndarray, a_start: np.ndarray, a_end: np.ndarray) -> np.ndarray:
    """Index of the host span that holds each launch whole, else -1: spans sorted and disjoint
    (_host_spans), so the one candidate is the last span starting at or before the launch (a binary
    search: n log n for any number of spans, where one SQL CASE per span took minutes for 50,000)."""
    i = np.searchsorted(h_start, a_start, side="right") - 1
    ok = i >= 0
    ok[ok] &= a_end[ok] <= h_end[i[ok]]
    return np.where(ok, i, -1)


def _launches(db: _Db) -> np.ndarray:
    """CANN_API node launches (type NODE_API_TYPE) as an (n, 4) int64 array: start, end, connection id (-1:
    NULL), rowid, in storage order; every cell of those rows checked against SCHEMA (the file's pages where
    they can be read, else SQLite; a bad cell is named by db.check either way)."""
    node = f"type = {NODE_API_TYPE}"
    read = db.pages("CANN_API", SCHEMA["CANN_API"], ("type", NODE_API_TYPE))
    if read is not None and _fits(read, SCHEMA["CANN_API"]):
        rows = np.arange(len(read.rowid))
        return np.column_stack([read.value["startNs"], read.value["endNs"], _or_null(read, "connectionId", rows, -1),
                                read.rowid])
    db.check("CANN_API", where=node)
    return db.ints("CANN_API", f"SELECT startNs, endNs, COALESCE(connectionId, -1), rowid FROM CANN_API WHERE {node}", 4)


def _other_tasks(db: _Db, tasks: _Tasks | None) -> np.ndarray:
    """The TASK rows that are not compute kernels, as (connection id (-2: NULL), start, end) rows: from the
    pages each row, else one row per connection id with its first start and last end (aggregated in
    SQLite: the same min and max per step, a third of the rows)."""
    if tasks is not None:
        t = tasks.task
        rows = np.setdiff1d(np.arange(len(t.rowid)), tasks.compute, assume_unique=True)
        return np.column_stack([_or_null(t, "connectionId", rows, -2), t.value["startNs"][rows], t.value["endNs"][rows]])
    return db.ints("TASK", "SELECT COALESCE(T.connectionId, -2), MIN(T.startNs), MAX(T.endNs) FROM TASK T "
                           "LEFT JOIN COMPUTE_TASK_INFO C ON C.globalTaskId = T.globalTaskId "
                           "WHERE C.globalTaskId IS NULL GROUP BY T.connectionId", 3)


def _step_windows(db: _Db, compute: pd.DataFrame, comm: pd.DataFrame, spans: tuple | None,
                  tasks: _Tasks | None = None) -> pd.DataFrame:
    """Step windows and, per compute task, the index of its step (column ``step_of`` of ``compute``).

    A task belongs to the span that holds its launch (CANN_API node row with its connectionId); the
    window runs from the first start to max(last end, span end) of every TASK row so launched."""
    compute["step_of"] = -1
    out = []
    if spans is not None:
        ids, h_start, h_end = spans
        api = _launches(db)
        span = _span_of(h_start, h_end, api[:, 0], api[:, 1])
        keep = (span >= 0) & (api[:, 2] >= 0)
        l_conn, l_span, l_row = api[keep, 2], span[keep], api[keep, 3]
        order = np.argsort(l_conn, kind="stable")
        l_conn, l_span, l_row = l_conn[order], l_span[order], l_row[order]
        twice = np.flatnonzero(l_conn[1:] == l_conn[:-1])
        if twice.size:
            k = int(twice[0])
            rows = " and ".join(db.row_of("CANN_API", int(r)).removeprefix("row ") for r in l_row[k:k + 2])
            raise InputError(f"{db.path}: table CANN_API rows {rows}: connectionId {int(l_conn[k])} launched twice; "
                             "expected one launch per connection id")
        # every TASK row launched in a step counts for its window, not only the compute kernels
        other = _other_tasks(db, tasks)
        c_conn = compute["connection"].to_numpy(np.int64)
        t_conn = np.concatenate([c_conn, other[:, 0]])
        t_start = np.concatenate([compute["start_ns"].to_numpy(np.int64), other[:, 1]])
        t_end = np.concatenate([compute["end_ns"].to_numpy(np.int64), other[:, 2]])
        at = np.searchsorted(l_conn, t_conn)
        found = at < len(l_conn)
        found[found] &= l_conn[at[found]] == t_conn[found]
        t_span = np.full(len(t_conn), -1, dtype=np.int64)
        t_span[found] = l_span[at[found]]
        n = len(ids)
        lo = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
        hi = np.full(n, np.iinfo(np.int64).min, dtype=np.int64)
        sel = np.flatnonzero(t_span >= 0)
        if sel.size:  # per span min and max (unbuffered ufunc.at: no sort of the tasks)
            np.minimum.at(lo, t_span[sel], t_start[sel])
            np.maximum.at(hi, t_span[sel], t_end[sel])
        none = lo > hi  # no task launched in the span: the host span itself
        lo[none], hi[none] = h_start[none], h_end[none]
        hi = np.maximum(hi, h_end)
        out = [{"rank": 0, "step": ids[i], "start_ns": int(lo[i]), "end_ns": int(hi[i])} for i in range(n)]
        compute["step_of"] = t_span[:len(c_conn)]
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
        keep = np.flatnonzero(sid_ok)
        win = _first_window(windows["start_ns"].to_numpy(np.int64)[keep], windows["end_ns"].to_numpy(np.int64)[keep],
                            comm["start_ns"].to_numpy(np.int64))
        hit = np.flatnonzero(win >= 0)
        step_val[hit + n_c], step_na[hit + n_c] = sid[keep[win[hit]]], False
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


def _first_window(w_start: np.ndarray, w_end: np.ndarray, points: np.ndarray) -> np.ndarray:
    """For each point, the first window (in the given order) with start <= point < end, else -1.

    Windows may overlap (a step's tasks run past the next step's host start). Each window takes the
    points of its range not yet taken: the points sorted once, the taken ones skipped through a
    next-free pointer with path halving, so the work is near-linear in windows + points (a loop of one
    mask over all points per window was quadratic: minutes for 50,000 steps)."""
    order = np.argsort(points, kind="stable")
    pts = points[order]
    out = np.full(len(points), -1, dtype=np.int64)
    nxt = list(range(len(pts) + 1))  # nxt[j]: the first free sorted index >= j

    def free(j: int) -> int:
        while nxt[j] != j:
            nxt[j] = nxt[nxt[j]]
            j = nxt[j]
        return j

    lows = np.searchsorted(pts, w_start, side="left").tolist()
    highs = np.searchsorted(pts, w_end, side="left").tolist()
    for w, (lo, hi) in enumerate(zip(lows, highs, strict=True)):
        j = free(lo)
        while j < hi:
            out[order[j]] = w
            nxt[j] = j + 1
            j = free(j + 1)
    return out


def _meta_groups(db: _Db, meta: dict[str, str]) -> dict[str, dict]:
    """parallel_group_info from META_DATA (a JSON object keyed by group name), as profiler_metadata.json has it."""
    text = meta.get("parallel_group_info")
    if not text:
        return {}
    info = formats.json_text(text, f"{db.path}: table META_DATA: parallel_group_info")
    if not isinstance(info, dict):
        raise InputError(f"{db.path}: table META_DATA: parallel_group_info: expected an object keyed by group name")
    return {str(k): v for k, v in info.items() if isinstance(v, dict)}


def read_analysis(path: Path, comm: pd.DataFrame | None = None, opened: _Db | None = None
                  ) -> tuple[pd.DataFrame | None, pd.DataFrame | None, pd.DataFrame | None, dict[str, str]]:
    """analysis.db: StepTraceTime, CommAnalyzerTime (+ Bandwidth bytes), CommAnalyzerMatrix totals.
    ``opened``: the db already open at ``path`` (closed here)."""
    db = opened if opened is not None else _Db(path)
    try:
        for table, cols in _ANALYSIS_TABLES.items():  # every cell read, against SCHEMA, before any is used
            if db.require(table, cols, optional=True):
                db.check(table)
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
                # a finite number >= 0 as it is; anything else through _us_value, which names it
                mb = float(size) if type(size) in (int, float) and 0 <= size < math.inf else _us_value(
                    size, f"{db.path}: table CommAnalyzerBandwidth op {op!r} transit_size")
                transit[str(op)] = transit.get(str(op), 0.0) + mb
    over = next((op for op, mb in transit.items() if mb * 1e6 >= LIMIT), None)
    if over is not None:
        raise InputError(f"{db.path}: table CommAnalyzerBandwidth op {over!r}: transit_size total {transit[over]!r} MB "
                         "is not a valid size; expected under 2**62 bytes")
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
    labels: dict[object, int | None] = {}  # a few distinct step labels: each parsed once
    steps = [labels[v] if v in labels else labels.setdefault(v, _step_of_label(v)) for v in cols[8]]
    starts = [int(exact[n]) if n in exact else int(round(float(u) * 1000)) for n, u in zip(names, start_us.tolist(),
                                                                                           strict=True)]
    hashes: dict[str, str] = {}
    groups = [_text(v) for v in cols[1]]
    for name, group in zip(names, groups, strict=True):
        hm = classify.HCOM_NAME.match(name)
        if hm and group:
            hashes.setdefault(hm.group("group"), group)
    n = len(rows)
    codes, texts = _codes_of(pd.Series(names, dtype=object))
    decided = classify.classify_ascend_coded((codes, texts), (np.zeros(n, dtype=np.int64), [""]),
                                             (np.zeros(n, dtype=np.int64), ["COMMUNICATION"]))
    nbytes = [int(round(transit[n] * 1e6)) if n in transit else None for n in names]
    out = {"rank": np.zeros(n, dtype=np.int64), "step": _int64_array(steps), "name": names,
           "family": decided.family, "group": decided.group, "group_hash": groups,
           "start_ns": np.array(starts, dtype=np.int64),
           **dict(zip(("elapse_us", "transit_us", "wait_us", "synchronization_us", "idle_us"), times, strict=True)),
           "bytes": _int64_array(nbytes)}
    return pd.DataFrame(out, columns=list(COMM_OP_COLUMNS)), hashes


def _int64_array(values: list[int | None]) -> pd.arrays.IntegerArray:
    """A nullable Int64 array of Python ints and Nones (values + mask, no conversion per cell by pandas)."""
    mask = np.fromiter((v is None for v in values), dtype=bool, count=len(values))
    data = np.fromiter((0 if v is None else v for v in values), dtype=np.int64, count=len(values))
    return pd.arrays.IntegerArray(data, mask)


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


def refuse_repeated_rows(where: str, rows: list[tuple], expected: str) -> None:
    """A row repeated verbatim is damage (the profiler writes each row once; counted twice it doubles an
    op's time): InputError naming both rows (from 1) and what one row stands for."""
    seen: dict[tuple, int] = {}
    for n, row in enumerate(rows, 1):
        if row in seen:
            raise InputError(f"{where} rows {seen[row]} and {n}: identical in every column read; expected {expected}")
        seen[row] = n
