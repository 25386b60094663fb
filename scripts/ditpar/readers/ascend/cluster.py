"""Reader of msprof-analyze ``cluster`` output: ``cluster_analysis_output/`` in text or db form.

What msprof-analyze writes (Ascend mstt @ 99c2e0f9, mirror xiaobingling93-pixel/Ascend-mstt,
``profiler/msprof_analyze/cluster_analyse/``):
- cluster_step_trace_time.csv (``analysis/step_trace_time_analysis.py``): one row per rank (Type "rank",
  Index = global rank) and per pipeline stage (Type "stage"), step_trace_time.csv's columns;
- cluster_communication.json (``analysis/communication_analysis.py``): {rank set: {step: {op@hash:
  {global rank: communication.json's op entry}}}} plus "Total Op Info" sums;
- cluster_communication_matrix.json (``analysis/comm_matrix_analysis.py``): {rank set: {step: {op@hash:
  {"src-dst": link}}}}, links already in global ranks; "Total Op Info@hash" sums every op of a group;
- communication_group.json (``communication_group/communication_json_group.py``): rank lists of the
  p2p and collective groups and comm_group_parallel_info rows (type, rank_set, group_name = hash,
  group_id, pg_name);
- cluster_analysis.db (db mode): ClusterStepTraceTime, ClusterCommAnalyzerTime, ClusterCommAnalyzerBandwidth,
  ClusterCommAnalyzerMatrix, CommunicationGroup with the columns of ``common_func/tables_config.py``.

These are aggregates: every rank becomes a rank without device tasks (ProfileSet.partial_ranks) with
the profiler's step figures, its per-op communication times and the links. What needs kernel rows
(recomputed steps, union and exposed time, bubbles, masking) says so by name.
"""

from __future__ import annotations

import csv
import io
import os
import re
from pathlib import Path

import numpy as np
import pandas as pd

from ditpar import files, formats, limits
from ditpar.core import classify
from ditpar.core.events import make_events
from ditpar.core.profile import (
    COMM_OP_COLUMNS,
    LINK_COLUMNS,
    STEP_COLUMNS,
    STEP_TRACE_COLUMNS,
    GroupInfo,
)
from ditpar.errors import InputError
from ditpar.readers.ascend import text as ascend
from ditpar.readers.ascend.db import GBPS, MB, MS, US, Col, _Db, ident, refuse_repeated_rows
from ditpar.timeparse import us_to_ns

OUTPUT_DIR = "cluster_analysis_output"
STEP_CSV = "cluster_step_trace_time.csv"
COMM_JSON = "cluster_communication.json"
MATRIX_JSON = "cluster_communication_matrix.json"
GROUP_JSON = "communication_group.json"
CLUSTER_DB = "cluster_analysis.db"
FILES = (STEP_CSV, COMM_JSON, MATRIX_JSON, GROUP_JSON, CLUSTER_DB)
TOTAL = "Total Op Info"


def is_cluster_output(path: Path) -> bool:
    """A cluster_analysis_output folder (or one holding msprof-analyze's cluster files)."""
    return path.is_dir() and (path.name == OUTPUT_DIR or any((path / f).is_file() for f in FILES[:2] + (CLUSTER_DB,)))


def _there(path: Path) -> bool:
    """Something is at path: a file is read, anything else (a folder, FIFO, dangling link) is then named
    by files.read_input / regular_input as what it is, never taken for an absent file."""
    return os.path.lexists(path)


def read_cluster(folder: Path) -> list[ascend.AscendRank]:
    """One AscendRank per global rank the cluster files name; none has device tasks."""
    if _there(folder / CLUSTER_DB) and not _there(folder / STEP_CSV) and not _there(folder / COMM_JSON):
        step_trace, comm_ops, links, groups = _read_db(folder / CLUSTER_DB)
        sources = [folder / CLUSTER_DB]
    else:
        step_trace = _read_step_csv(folder / STEP_CSV) if _there(folder / STEP_CSV) else None
        comm_ops = _read_comm_json(folder / COMM_JSON) if _there(folder / COMM_JSON) else None
        links = _read_matrix_json(folder / MATRIX_JSON) if _there(folder / MATRIX_JSON) else None
        groups = _read_groups_json(folder / GROUP_JSON) if _there(folder / GROUP_JSON) else {}
        sources = [folder / f for f in FILES[:4] if _there(folder / f)]
    ranks = sorted({int(r) for t in (step_trace, comm_ops, links) if t is not None for r in t["rank"]})
    if len(ranks) > limits.MAX_DEVICES:
        raise InputError(f"{folder}: msprof-analyze's cluster files name {len(ranks)} ranks; at most "
                         f"{limits.MAX_DEVICES} are read (the largest job the tools take)")
    if not ranks:
        have = sorted(p.name for p in folder.iterdir())
        raise InputError(f"{folder}: no rank in msprof-analyze's cluster files; expected {STEP_CSV}, {COMM_JSON} "
                         f"or {CLUSTER_DB} with rows; found {have or 'an empty folder'}")
    reads = []
    for rank in ranks:
        def mine(t: pd.DataFrame | None, rank: int = rank) -> pd.DataFrame | None:
            return None if t is None or not (t["rank"] == rank).any() else t[t["rank"] == rank].assign(rank=0)
        st, co, lk = mine(step_trace), mine(comm_ops), mine(links)
        read = ascend.AscendRank(rank, f"{folder.name} Index / rank id", make_events({"rank": [], "start_ns": [],
                                 "dur_ns": []}), pd.DataFrame(columns=list(STEP_COLUMNS)), st, co,
                                 {k: GroupInfo(g.group, g.name, g.role, g.ranks, g.full_hash) for k, g in groups.items()},
                                 {}, list(sources), lk, "transit" if co is not None else "")
        read.evidence = [name for name, t in (("step_trace", st), ("communication", co), ("links", lk))
                         if t is not None]
        reads.append(read)
    return reads


def _text_table(path: Path, need: list[str]) -> tuple[list[str], list[list[str]]]:
    """A CSV input read once through files.read_input_text (FIFO once, BOM dropped, non-UTF-8 named):
    its header (each name once, every column of ``need`` there) and its data rows as text cells."""
    text = files.read_input_text(path)
    try:
        rows = list(csv.reader(io.StringIO(text, newline="")))
    except csv.Error as exc:
        raise InputError(f"{path}: cannot parse as CSV ({exc})") from None
    if not rows or not any(c.strip() for c in rows[0]):
        raise InputError(f"{path}: empty file; expected a CSV header line")
    header = [c.strip() for c in rows[0]]
    twice = sorted({c for c in header if header.count(c) > 1})
    if twice:
        raise InputError(f"{path}: column(s) {twice} appear more than once in the header")
    missing = [c for c in need if c not in header]
    if missing:
        raise InputError(f"{path}: missing column(s) {missing}; have {header}")
    return header, rows[1:]


def _read_step_csv(path: Path) -> pd.DataFrame:
    """Type 'rank' rows of cluster_step_trace_time.csv as step_trace rows (Index = global rank); rows are
    named by their line in the file; a (rank, step) given twice is an error naming both lines."""
    header, body = _text_table(path, ["Step", "Type", "Index", *[h for h in ascend.STEP_TRACE_HEADER if h != "Bubble"]])
    col = {h: i for i, h in enumerate(header)}
    rows = []
    seen: dict[tuple, int] = {}
    for line, cells in enumerate(body, 2):
        if not any(c.strip() for c in cells):
            continue
        if len(cells) != len(header):
            raise InputError(f"{path}: line {line}: {len(cells)} cells; the header has {len(header)}")
        if cells[col["Type"]].strip() != "rank":
            continue
        where = f"{path}: line {line}"
        rank = limits.integer(_digits(cells[col["Index"]], f"{where}: Index"), f"{where}: Index", 0,
                              limits.MAX_RANK_ID)
        row = {"rank": rank, "step": _step(cells[col["Step"]], where)}
        if (rank, row["step"]) in seen:
            raise InputError(f"{path}: lines {seen[(rank, row['step'])]} and {line}: rank {rank} step {row['step']} "
                             "twice; expected one row per rank and step")
        seen[(rank, row["step"])] = line
        for name, key in ascend.STEP_TRACE_HEADER.items():
            row[key] = _number(cells[col[name]], f"{where} column {name!r}") if name in col else float("nan")
        rows.append(row)
    return _step_frame(rows)


def _digits(value: object, where: str) -> str:
    """A rank cell as its digits (limits.integer then bounds it); anything else is named."""
    text = "" if value is None else str(value).strip()
    if not re.fullmatch(r"\d{1,12}", text):
        raise InputError(f"{where}: {_short(value)}: expected a global rank (an integer 0..{limits.MAX_RANK_ID})")
    return text


def _step(value: object, where: str) -> int | None:
    text = "" if value is None else str(value).strip()
    m = re.fullmatch(r"(?:step)?(\d{1,12})", text)
    if not text or text == "step":
        return None
    if not m:
        raise InputError(f"{where}: step {_short(value)}: expected an integer or empty")
    return int(m.group(1))


#: a time in us read from a cluster file: at most 2**62 ns (the bound every reader puts on times)
MAX_US = 2**62 / 1e3


def _number(value: object, where: str) -> float:
    """A time in us: a finite number 0..MAX_US (1e306 us would overflow every sum made of it)."""
    try:
        x = float(str(value).strip())
    except ValueError:
        raise InputError(f"{where}: expected a time in us, got {_short(value)}") from None
    if not (np.isfinite(x) and 0 <= x <= MAX_US):
        raise InputError(f"{where}: expected a finite time in 0..{MAX_US:g} us, got {_short(value)}")
    return x


def _step_frame(rows: list[dict]) -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=list(STEP_TRACE_COLUMNS))
    frame["rank"] = frame["rank"].astype(np.int64)
    frame["step"] = pd.array(frame["step"], dtype="Int64")
    return frame


def _object(data: object, path: Path, what: str) -> dict:
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected an object keyed by {what}, got {type(data).__name__}")
    return data


def _read_comm_json(path: Path) -> pd.DataFrame:
    """cluster_communication.json -> comm_ops rows of every global rank (communication.json's fields)."""
    data = _object(formats.load_json(path, parse_float=str), path, "rank set")  # floats as text: exact starts
    rows = []
    for rank_set, steps in data.items():
        for step_key, ops in _object(steps, path, "step").items():
            step = _step(step_key, f"{path}: {_short(rank_set)}")
            for op_key, per_rank in _object(ops, path, "op").items():
                if str(op_key).startswith(TOTAL):
                    continue
                for rank, op in _object(per_rank, path, "rank").items():
                    where = f"{path}: {_short(rank_set)}.{_short(step_key)}.{_short(op_key)}: key {_short(rank)}"
                    rank_id = limits.integer(_digits(rank, where), where, 0, limits.MAX_RANK_ID)
                    row = _checked(ascend._comm_row(path, step, str(op_key), op, {}), f"{path}: op {op_key!r}",
                                   op["Communication Time Info"])
                    rows.append({**row, "rank": rank_id})
    return _comm_frame(rows, path)


def _checked(row: dict, where: str, info: dict) -> dict:
    """A comm_ops row whose times are NaN (not given) or 0..MAX_US us: 1e306 ms is refused, not inf.
    ``info``: the op's 'Communication Time Info', for the value as the file gives it."""
    for key, field in ascend._TIME_FIELDS.items():
        value = row[key]
        if value == value and not 0 <= value <= MAX_US:
            raise InputError(f"{where}: {field} {info.get(field)}: expected a time in 0..{MAX_US / 1e3:g} ms")
    return row


def _comm_frame(rows: list[dict], path: Path) -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=[*[c for c in COMM_OP_COLUMNS if c != "start_ns"], "start_text"])
    decided = classify.classify_ascend(frame["name"], pd.Series([""] * len(frame)),
                                       pd.Series(["COMMUNICATION"] * len(frame)))
    frame["family"] = decided.family
    frame["group"] = decided.group
    frame["start_ns"] = us_to_ns(frame["start_text"].astype(str), where=f"{path}: Start Timestamp(us)")
    frame["rank"] = frame["rank"].astype(np.int64)
    frame["step"] = pd.array(frame["step"], dtype="Int64")
    frame["bytes"] = pd.array(frame["bytes"], dtype="Int64")
    return frame[list(COMM_OP_COLUMNS)]


def _read_matrix_json(path: Path) -> pd.DataFrame:
    """cluster_communication_matrix.json 'Total Op Info@hash' links (global ranks), one row per link."""
    data = _object(formats.load_json(path, parse_float=str), path, "rank set")
    rows = []
    for rank_set, steps in data.items():
        for step_key, ops in _object(steps, path, "step").items():
            step = _step(step_key, f"{path}: {_short(rank_set)}")
            for op_key, links in _object(ops, path, "op").items():
                name, _, group_hash = str(op_key).partition("@")
                if name != TOTAL:
                    continue
                for link, info in _object(links, path, "link").items():
                    where = f"{path}: {_short(op_key)} link {_short(link)}"
                    if not isinstance(info, dict):
                        raise InputError(f"{where}: expected an object")
                    rows.append(_link_row(step, group_hash, str(link), info.get("Transport Type"),
                                          info.get("Transit Size(MB)"), info.get("Transit Time(ms)"),
                                          info.get("Bandwidth(GB/s)"), where))
    return _link_frame(rows)


def _link_row(step: int | None, group_hash: str, link: str, transport: object, size_mb: object, time_ms: object,
              bw: object, where: str) -> dict:
    """One link of global ranks: ranks 0..MAX_RANK_ID, size under 2**62 bytes, time and bandwidth bounded."""
    m = re.fullmatch(r"(\d{1,12})-(\d{1,12})", link)
    if not m:
        raise InputError(f"{where}: expected a 'src-dst' link of global ranks")
    src = limits.integer(m.group(1), f"{where}: source rank", 0, limits.MAX_RANK_ID)
    limits.integer(m.group(2), f"{where}: destination rank", 0, limits.MAX_RANK_ID)
    size = limits.number(_plain(size_mb), f"{where}: Transit Size(MB)", 0, MB.hi)
    time_us = limits.number(_plain(time_ms), f"{where}: Transit Time(ms)", 0, MS.hi) * 1000.0
    gbps = float("nan") if bw is None else limits.number(_plain(bw), f"{where}: Bandwidth(GB/s)", 0, GBPS.hi)
    return {"rank": src, "step": step, "op": "all", "group_hash": group_hash, "link": link,
            "transport": "" if transport is None else str(transport), "bytes": int(round(size * 1e6)),
            "transit_us": time_us, "profiler_bandwidth_GBps": gbps}


def _plain(value: object) -> object:
    """A JSON number kept as text (parse_float=str) or an SQLite cell, for limits.number."""
    return value.strip() if isinstance(value, str) else value


def _link_frame(rows: list[dict]) -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=list(LINK_COLUMNS))
    frame["rank"] = frame["rank"].astype(np.int64)
    frame["step"] = pd.array(frame["step"], dtype="Int64")
    return frame


def _group_rows(rows: list[dict], where: str) -> dict[str, GroupInfo]:
    """comm_group_parallel_info rows -> communicators keyed by the 3 digits the op names carry."""
    out: dict[str, GroupInfo] = {}
    for i, row in enumerate(rows):
        full = str(row.get("group_name", "") or "")
        if not re.fullmatch(r"\d{1,20}", full):
            continue  # p2p groups named otherwise cannot be matched to op names
        ranks = row.get("rank_set", [])
        at = f"{where}: row {i + 1}: rank_set"
        if isinstance(ranks, str):  # the db writes the list as text: a literal, parsed without evaluating code
            ranks = formats.python_literal(ranks, at) if ranks.strip() else []
        if not isinstance(ranks, (list, tuple, set)) or not all(type(r) is int for r in ranks):
            raise InputError(f"{at} {_short(ranks)}: expected a list of ranks")
        if len(ranks) > limits.MAX_DEVICES:
            raise InputError(f"{at}: {len(ranks)} ranks; a group has at most {limits.MAX_DEVICES}")
        for r in ranks:
            limits.integer(r, at, 0, limits.MAX_RANK_ID)
        if len(set(ranks)) != len(ranks):
            twice = sorted(r for r in set(ranks) if list(ranks).count(r) > 1)[0]
            raise InputError(f"{at}: rank {twice} more than once; expected each rank once")
        out[full[-3:]] = GroupInfo(group=full[-3:], name=str(row.get("group_id", "") or ""),
                                   role=str(row.get("pg_name", "") or ""), ranks=tuple(sorted(ranks)), full_hash=full)
    return out


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _read_groups_json(path: Path) -> dict[str, GroupInfo]:
    data = _object(formats.load_json(path), path, "group type")
    rows = data.get("comm_group_parallel_info", [])
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise InputError(f"{path}: comm_group_parallel_info: expected a list of objects")
    return _group_rows(rows, f"{path}: comm_group_parallel_info")


# --- cluster_analysis.db ------------------------------------------------------------------------

_DB_TABLES = {
    "ClusterStepTraceTime": ("step", "type", "index", "computing", "communication_not_overlapped", "overlapped",
                             "communication", "free", "stage"),
    "ClusterCommAnalyzerTime": ("step", "rank_id", "hccl_op_name", "group_name", "start_timestamp",
                                "transit_time", "wait_time", "synchronization_time", "idle_time"),
    "ClusterCommAnalyzerBandwidth": ("rank_id", "hccl_op_name", "group_name", "band_type", "transit_size"),
    "ClusterCommAnalyzerMatrix": ("step", "hccl_op_name", "group_name", "src_rank", "dst_rank", "transit_size",
                                  "transit_time", "bandwidth", "transport_type"),
    "CommunicationGroup": ("type", "rank_set", "group_name", "group_id", "pg_name"),
}


_CLUSTER_TEXT = Col("text", null=True, what="text")
_CLUSTER_RANK = Col("int", 0, limits.MAX_RANK_ID, True, "a global rank id")
_CLUSTER_LINK_RANK = Col("int_text", 0, limits.MAX_RANK_ID, what="a global rank id")
_CLUSTER_MB = Col("num", 0, MB.hi, True, "a size in MB")
#: column -> type and range of every column read from cluster_analysis.db (checked in SQLite first)
DB_SCHEMA: dict[str, dict[str, Col]] = {
    "ClusterStepTraceTime": {"step": _CLUSTER_TEXT, "type": _CLUSTER_TEXT, "index": _CLUSTER_TEXT,
                             **{c: US for c in ("computing", "communication_not_overlapped", "overlapped",
                                                "communication", "free", "stage", "bubble")}},
    "ClusterCommAnalyzerTime": {"step": _CLUSTER_TEXT, "rank_id": _CLUSTER_RANK, "hccl_op_name": _CLUSTER_TEXT,
                                "group_name": _CLUSTER_TEXT, "start_timestamp": US,
                                **{c: MS for c in ("elapsed_time", "elapse_time", "transit_time", "wait_time",
                                                   "synchronization_time", "idle_time")}},
    "ClusterCommAnalyzerBandwidth": {"rank_id": _CLUSTER_RANK, "hccl_op_name": _CLUSTER_TEXT,
                                     "group_name": _CLUSTER_TEXT, "band_type": _CLUSTER_TEXT,
                                     "transit_size": _CLUSTER_MB},
    "ClusterCommAnalyzerMatrix": {"step": _CLUSTER_TEXT, "hccl_op_name": _CLUSTER_TEXT, "group_name": _CLUSTER_TEXT,
                                  "src_rank": _CLUSTER_LINK_RANK, "dst_rank": _CLUSTER_LINK_RANK,
                                  "transit_size": MB, "transit_time": MS, "bandwidth": GBPS,
                                  "transport_type": _CLUSTER_TEXT},
    "CommunicationGroup": {c: _CLUSTER_TEXT for c in _DB_TABLES["CommunicationGroup"]},
}


def _read_db(path: Path) -> tuple:
    """cluster_analysis.db: (step_trace, comm_ops, links, groups); every column read is checked against
    DB_SCHEMA first (named by table, row and column), then rows repeated verbatim are refused."""
    db = _Db(path)
    try:
        present = {t for t, cols in _DB_TABLES.items() if db.require(t, cols, optional=True)}
        if not present & {"ClusterStepTraceTime", "ClusterCommAnalyzerTime"}:
            raise InputError(f"{path}: missing table ClusterStepTraceTime and ClusterCommAnalyzerTime; "
                             f"have {sorted(db.tables)}")
        for table in sorted(present):
            db.check(table, DB_SCHEMA[table])
        step_trace = _db_steps(db) if "ClusterStepTraceTime" in present else None
        comm_ops = _db_comm(db, "ClusterCommAnalyzerBandwidth" in present) if "ClusterCommAnalyzerTime" in present \
            else None
        links = _db_links(db) if "ClusterCommAnalyzerMatrix" in present else None
        groups = {}
        if "CommunicationGroup" in present:
            cols = _DB_TABLES["CommunicationGroup"]
            groups = _group_rows([dict(zip(cols, r, strict=True)) for r in
                                  db.rows("CommunicationGroup", f"SELECT {', '.join(cols)} FROM CommunicationGroup")],
                                 f"{path}: table CommunicationGroup")
    finally:
        db.close()
    return step_trace, comm_ops, links, groups


def _once(db: _Db, table: str, rows: list[tuple]) -> None:
    """msprof-analyze writes one row per op (or link) and rank: a copy is refused (db.refuse_repeated_rows)."""
    refuse_repeated_rows(f"{db.path}: table {table}", rows,
                         "each row once (a repeated row would be counted twice)")


def _db_steps(db: _Db) -> pd.DataFrame:
    cols = _DB_TABLES["ClusterStepTraceTime"] + (("bubble",) if "bubble" in db.tables["ClusterStepTraceTime"] else ())
    rows = []
    seen: dict[tuple, int] = {}
    for i, rec in enumerate(db.rows("ClusterStepTraceTime", f'SELECT {", ".join(ident(c) for c in cols)} '
                                                           "FROM ClusterStepTraceTime ORDER BY rowid")):
        rec = dict(zip(cols, rec, strict=True))
        if str(rec["type"]).strip() != "rank":
            continue
        where = f"{db.path}: table ClusterStepTraceTime row {i + 1}"
        rank = limits.integer(_digits(rec["index"], f"{where} column index"), f"{where} column index", 0,
                              limits.MAX_RANK_ID)
        row = {"rank": rank, "step": _step(rec["step"], where)}
        if (rank, row["step"]) in seen:
            raise InputError(f"{db.path}: table ClusterStepTraceTime rows {seen[(rank, row['step'])]} and {i + 1}: "
                             f"rank {rank} step {row['step']} twice; expected one row per rank and step")
        seen[(rank, row["step"])] = i + 1
        for col in cols[3:]:
            row[f"{col}_us"] = _number(rec[col], f"{where} column {col}")
        rows.append(row)
    return _step_frame(rows)


def _db_comm(db: _Db, with_bytes: bool) -> pd.DataFrame:
    transit: dict[tuple[int, str], float] = {}
    if with_bytes:
        seen = set()
        for rank, op, group, band, size in db.rows("ClusterCommAnalyzerBandwidth", "SELECT rank_id, hccl_op_name, "
                                                   "group_name, band_type, transit_size FROM ClusterCommAnalyzerBandwidth"):
            key = (rank, op, group, band)
            if str(band) in ascend._TRANSPORTS and key not in seen and rank is not None and size is not None:
                seen.add(key)  # one row per packet-size bucket, each repeating its transport's total
                k = (rank, f"{op}@{group}")
                transit[k] = transit.get(k, 0.0) + float(size)
    over = next((k for k, mb in transit.items() if mb * 1e6 >= 2**62), None)
    if over is not None:
        raise InputError(f"{db.path}: table ClusterCommAnalyzerBandwidth rank {over[0]} op {over[1]!r}: transit_size "
                         f"total {transit[over]!r} MB; expected under 2**62 bytes")
    rows = []
    # tables_config.py names the column elapsed_time; analysis.db's CommAnalyzerTime says elapse_time
    elapsed = next((c for c in ("elapsed_time", "elapse_time") if c in db.tables["ClusterCommAnalyzerTime"]), None)
    if elapsed is None:
        raise InputError(f"{db.path}: table ClusterCommAnalyzerTime: missing column elapsed_time; "
                         f"have {list(db.tables['ClusterCommAnalyzerTime'])}")
    sql = (f"SELECT step, rank_id, hccl_op_name, group_name, start_timestamp, {elapsed}, transit_time, wait_time, "
           "synchronization_time, idle_time FROM ClusterCommAnalyzerTime ORDER BY rowid")
    got = db.rows("ClusterCommAnalyzerTime", sql)
    _once(db, "ClusterCommAnalyzerTime", got)
    for i, (step, rank, op, group, start, *times) in enumerate(got):
        if str(op).startswith(TOTAL):
            continue
        where = f"{db.path}: table ClusterCommAnalyzerTime row {i + 1}"
        if type(rank) is not int:
            raise InputError(f"{where} column rank_id: {rank!r}: expected a global rank id in 0..{limits.MAX_RANK_ID}")
        info = {"Start Timestamp(us)": start, **dict(zip(ascend._TIME_FIELDS.values(), times, strict=True))}
        row = ascend._comm_row(db.path, _step(step, where), f"{op}@{group}", {"Communication Time Info": info}, {})
        size = transit.get((rank, f"{op}@{group}"))
        row["bytes"] = int(round(size * 1e6)) if size is not None else None
        rows.append({**row, "rank": rank})
    return _comm_frame(rows, db.path)


def _db_links(db: _Db) -> pd.DataFrame:
    rows = []
    sql = ("SELECT step, hccl_op_name, group_name, src_rank, dst_rank, transit_size, transit_time, bandwidth, "
           "transport_type FROM ClusterCommAnalyzerMatrix ORDER BY rowid")
    got = db.rows("ClusterCommAnalyzerMatrix", sql)
    _once(db, "ClusterCommAnalyzerMatrix", got)
    for i, (step, op, group, src, dst, size, time_ms, bw, transport) in enumerate(got):
        if str(op) != TOTAL:
            continue
        where = f"{db.path}: table ClusterCommAnalyzerMatrix row {i + 1}"
        rows.append(_link_row(_step(step, where), str(group or ""), f"{str(src).strip()}-{str(dst).strip()}",
                              transport, size, time_ms, bw, where))
    return _link_frame(rows)


def describe(folder: Path) -> str:
    """One line on what the cluster folder holds, for messages."""
    return ", ".join(sorted(p.name for p in folder.iterdir() if p.name in FILES)) or "none of msprof-analyze's files"


