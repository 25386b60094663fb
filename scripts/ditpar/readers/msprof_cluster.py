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

import ast
import re
from pathlib import Path

import numpy as np
import pandas as pd

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
from ditpar.readers import ascend
from ditpar.readers.jsonstream import load_json
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


def read_cluster(folder: Path) -> list[ascend.AscendRank]:
    """One AscendRank per global rank the cluster files name; none has device tasks."""
    if (folder / CLUSTER_DB).is_file() and not (folder / STEP_CSV).is_file() and not (folder / COMM_JSON).is_file():
        step_trace, comm_ops, links, groups = _read_db(folder / CLUSTER_DB)
        sources = [folder / CLUSTER_DB]
    else:
        step_trace = _read_step_csv(folder / STEP_CSV) if (folder / STEP_CSV).is_file() else None
        comm_ops = _read_comm_json(folder / COMM_JSON) if (folder / COMM_JSON).is_file() else None
        links = _read_matrix_json(folder / MATRIX_JSON) if (folder / MATRIX_JSON).is_file() else None
        groups = _read_groups_json(folder / GROUP_JSON) if (folder / GROUP_JSON).is_file() else {}
        sources = [folder / f for f in FILES[:4] if (folder / f).is_file()]
    ranks = sorted({int(r) for t in (step_trace, comm_ops, links) if t is not None for r in t["rank"]})
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


def _read_step_csv(path: Path) -> pd.DataFrame:
    """Type 'rank' rows of cluster_step_trace_time.csv as step_trace rows (Index = global rank)."""
    frame = ascend.read_text_table(path, ["Step", "Type", "Index",
                                          *[h for h in ascend.STEP_TRACE_HEADER if h != "Bubble"]])
    frame = frame[frame["Type"].str.strip() == "rank"].reset_index(drop=True)
    rows = []
    for i, rec in frame.iterrows():
        where = f"{path}: rank row {i + 1}"
        index = rec["Index"].strip()
        if not re.fullmatch(r"\d{1,9}", index):
            raise InputError(f"{where}: Index {index!r}: expected a global rank")
        row = {"rank": int(index), "step": _step(rec["Step"], where)}
        for col, key in ascend.STEP_TRACE_HEADER.items():
            row[key] = _number(rec[col], f"{where} column {col!r}") if col in rec else float("nan")
        rows.append(row)
    return _step_frame(rows)


def _step(value: object, where: str) -> int | None:
    text = "" if value is None else str(value).strip()
    m = re.fullmatch(r"(?:step)?(\d{1,12})", text)
    if not text or text == "step":
        return None
    if not m:
        raise InputError(f"{where}: step {value!r}: expected an integer or empty")
    return int(m.group(1))


def _number(value: object, where: str) -> float:
    try:
        x = float(str(value).strip())
    except ValueError:
        raise InputError(f"{where}: expected a time in us, got {value!r}") from None
    if not (np.isfinite(x) and x >= 0):
        raise InputError(f"{where}: expected a finite time >= 0 us, got {value!r}")
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
    data = _object(load_json(path, "msprof-analyze cluster_communication.json"), path, "rank set")
    rows = []
    for rank_set, steps in data.items():
        for step_key, ops in _object(steps, path, "step").items():
            step = _step(step_key, f"{path}: {rank_set}")
            for op_key, per_rank in _object(ops, path, "op").items():
                if str(op_key).startswith(TOTAL):
                    continue
                for rank, op in _object(per_rank, path, "rank").items():
                    if not re.fullmatch(r"\d{1,9}", str(rank)):
                        raise InputError(f"{path}: {rank_set}.{step_key}.{op_key}: key {rank!r}: expected a rank")
                    row = ascend._comm_row(path, step, str(op_key), op, {})
                    rows.append({**row, "rank": int(rank)})
    return _comm_frame(rows, path)


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
    data = _object(load_json(path, "msprof-analyze cluster_communication_matrix.json"), path, "rank set")
    rows = []
    for rank_set, steps in data.items():
        for step_key, ops in _object(steps, path, "step").items():
            step = _step(step_key, f"{path}: {rank_set}")
            for op_key, links in _object(ops, path, "op").items():
                name, _, group_hash = str(op_key).partition("@")
                if name != TOTAL:
                    continue
                for link, info in _object(links, path, "link").items():
                    where = f"{path}: {op_key} link {link!r}"
                    if not isinstance(info, dict):
                        raise InputError(f"{where}: expected an object")
                    rows.append(_link_row(step, group_hash, str(link), info.get("Transport Type"),
                                          info.get("Transit Size(MB)"), info.get("Transit Time(ms)"),
                                          info.get("Bandwidth(GB/s)"), where))
    return _link_frame(rows)


def _link_row(step, group_hash, link, transport, size_mb, time_ms, bw, where) -> dict:
    m = re.fullmatch(r"(\d{1,9})-(\d{1,9})", link)
    if not m:
        raise InputError(f"{where}: expected a 'src-dst' link of global ranks")
    size = ascend._number(size_mb, f"{where}: Transit Size(MB)")
    time_us = ascend._ms_to_us(time_ms, f"{where}: Transit Time(ms)")
    if not (np.isfinite(size) and 0 <= size < 2**62 / 1e6):
        raise InputError(f"{where}: Transit Size(MB) {size_mb!r} is not a valid size")
    return {"rank": int(m.group(1)), "step": step, "op": "all", "group_hash": group_hash, "link": link,
            "transport": "" if transport is None else str(transport), "bytes": int(round(size * 1e6)),
            "transit_us": time_us,
            "profiler_bandwidth_GBps": ascend._number(bw, f"{where}: Bandwidth(GB/s)") if bw is not None
            else float("nan")}


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
        if isinstance(ranks, str):
            try:
                ranks = ast.literal_eval(ranks) if ranks.strip() else []
            except (ValueError, SyntaxError):
                raise InputError(f"{where}: row {i + 1}: rank_set {ranks!r}: expected a list of ranks") from None
        if not isinstance(ranks, (list, tuple, set)) or not all(isinstance(r, int) for r in ranks):
            raise InputError(f"{where}: row {i + 1}: rank_set {ranks!r}: expected a list of ranks")
        out[full[-3:]] = GroupInfo(group=full[-3:], name=str(row.get("group_id", "") or ""),
                                   role=str(row.get("pg_name", "") or ""), ranks=tuple(sorted(ranks)), full_hash=full)
    return out


def _read_groups_json(path: Path) -> dict[str, GroupInfo]:
    data = _object(load_json(path, "msprof-analyze communication_group.json"), path, "group type")
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


def _read_db(path: Path):
    from ditpar.readers.ascend_db import _Db

    db = _Db(path)
    try:
        present = {t for t, cols in _DB_TABLES.items() if db.require(t, cols, optional=True)}
        if not present & {"ClusterStepTraceTime", "ClusterCommAnalyzerTime"}:
            raise InputError(f"{path}: missing table ClusterStepTraceTime and ClusterCommAnalyzerTime; "
                             f"have {sorted(db.tables)}")
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


def _db_steps(db) -> pd.DataFrame:
    cols = _DB_TABLES["ClusterStepTraceTime"] + (("bubble",) if "bubble" in db.tables["ClusterStepTraceTime"] else ())
    rows = []
    for i, rec in enumerate(db.rows("ClusterStepTraceTime", f'SELECT {", ".join(f"[{c}]" for c in cols)} '
                                                           "FROM ClusterStepTraceTime")):
        rec = dict(zip(cols, rec, strict=True))
        if str(rec["type"]).strip() != "rank":
            continue
        where = f"{db.path}: table ClusterStepTraceTime row {i + 1}"
        if not re.fullmatch(r"\d{1,9}", str(rec["index"]).strip()):
            raise InputError(f"{where}: index {rec['index']!r}: expected a global rank")
        row = {"rank": int(str(rec["index"]).strip()), "step": _step(rec["step"], where)}
        for col in cols[3:]:
            row[f"{col}_us"] = _number(rec[col], f"{where} column {col}")
        rows.append(row)
    return _step_frame(rows)


def _db_comm(db, with_bytes: bool) -> pd.DataFrame:
    transit: dict[tuple[int, str], float] = {}
    if with_bytes:
        seen = set()
        for rank, op, group, band, size in db.rows("ClusterCommAnalyzerBandwidth", "SELECT rank_id, hccl_op_name, "
                                                   "group_name, band_type, transit_size FROM ClusterCommAnalyzerBandwidth"):
            key = (rank, op, group, band)
            if str(band) in ascend._TRANSPORTS and key not in seen:  # one row per packet-size bucket
                seen.add(key)
                k = (int(rank), f"{op}@{group}")
                transit[k] = transit.get(k, 0.0) + _number(size, f"{db.path}: table ClusterCommAnalyzerBandwidth")
    rows = []
    # tables_config.py names the column elapsed_time; analysis.db's CommAnalyzerTime says elapse_time
    elapsed = next((c for c in ("elapsed_time", "elapse_time") if c in db.tables["ClusterCommAnalyzerTime"]), None)
    if elapsed is None:
        raise InputError(f"{db.path}: table ClusterCommAnalyzerTime: missing column elapsed_time; "
                         f"have {list(db.tables['ClusterCommAnalyzerTime'])}")
    sql = (f"SELECT step, rank_id, hccl_op_name, group_name, start_timestamp, {elapsed}, transit_time, wait_time, "
           "synchronization_time, idle_time FROM ClusterCommAnalyzerTime")
    for i, (step, rank, op, group, start, *times) in enumerate(db.rows("ClusterCommAnalyzerTime", sql)):
        if str(op).startswith(TOTAL):
            continue
        where = f"{db.path}: table ClusterCommAnalyzerTime row {i + 1}"
        if type(rank) is not int:
            raise InputError(f"{where}: rank_id {rank!r}: expected an integer")
        info = {"Start Timestamp(us)": start, **dict(zip(ascend._TIME_FIELDS.values(), times, strict=True))}
        row = ascend._comm_row(db.path, _step(step, where), f"{op}@{group}", {"Communication Time Info": info}, {})
        size = transit.get((rank, f"{op}@{group}"))
        row["bytes"] = int(round(size * 1e6)) if size is not None else None
        rows.append({**row, "rank": rank})
    return _comm_frame(rows, db.path)


def _db_links(db) -> pd.DataFrame:
    rows = []
    sql = ("SELECT step, hccl_op_name, group_name, src_rank, dst_rank, transit_size, transit_time, bandwidth, "
           "transport_type FROM ClusterCommAnalyzerMatrix")
    for i, (step, op, group, src, dst, size, time_ms, bw, transport) in enumerate(db.rows("ClusterCommAnalyzerMatrix",
                                                                                         sql)):
        if str(op) != TOTAL:
            continue
        where = f"{db.path}: table ClusterCommAnalyzerMatrix row {i + 1}"
        rows.append(_link_row(_step(step, where), str(group or ""), f"{src}-{dst}", transport, size, time_ms, bw,
                              where))
    return _link_frame(rows)


def describe(folder: Path) -> str:
    """One line on what the cluster folder holds, for messages."""
    return ", ".join(sorted(p.name for p in folder.iterdir() if p.name in FILES)) or "none of msprof-analyze's files"


