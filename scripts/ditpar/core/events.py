"""The one event table every reader produces and every analysis reads (see DESIGN.md).

One row per device task. Times are exact int64 nanoseconds; strings are plain object columns.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ditpar.errors import InputError

KINDS = ("compute", "comm", "other")
FAMILIES = (
    "alltoall",
    "alltoallv",
    "allgather",
    "reducescatter",
    "allreduce",
    "broadcast",
    "send",
    "recv",
    "batchsendrecv",
    "other_comm",
)

#: column -> pandas dtype
COLUMNS: dict[str, str] = {
    "rank": "int64",
    "device": "Int64",
    "stream": "object",
    "kind": "object",
    "core": "object",
    "name": "object",
    "family": "object",
    "group": "object",
    "start_ns": "int64",
    "dur_ns": "int64",
    "step": "Int64",
    "bytes": "Int64",
}


def make_events(data: dict[str, object] | pd.DataFrame) -> pd.DataFrame:
    """Build an event table from columns; missing optional columns are filled with nulls."""
    frame = pd.DataFrame(data)
    n = len(frame)
    out = {}
    for col, dtype in COLUMNS.items():
        if col in frame:
            values = frame[col]
        elif col in ("start_ns", "dur_ns", "rank"):
            raise InputError(f"event table: column {col!r} is required; have {sorted(frame.columns)}")
        elif dtype == "object":
            values = pd.Series([""] * n, dtype="object")
        else:
            values = pd.Series([pd.NA] * n, dtype=dtype)
        series = pd.Series(values).reset_index(drop=True)
        # a column already of its type is kept as it is (no copy of a million-row column)
        out[col] = series if str(series.dtype) == dtype else series.astype(dtype)
    return pd.DataFrame(out, copy=False)


def empty_events() -> pd.DataFrame:
    """An event table with no rows (a copy of one built once: make_events costs a few ms a call)."""
    global _EMPTY
    if _EMPTY is None:
        _EMPTY = make_events({"rank": [], "start_ns": [], "dur_ns": []})
    return _EMPTY.copy()


_EMPTY: pd.DataFrame | None = None


def by_rank(events: pd.DataFrame):
    """(rank, that rank's rows) in rank order; a one-rank table is given as it is (a groupby would copy
    every column of it: 100 MB for a 1M-row rank read where it is analysed)."""
    rank = events["rank"].to_numpy(np.int64)
    if rank.size and rank.min() == rank.max():
        yield int(rank[0]), events
        return
    for key, rows in events.groupby("rank", sort=True):
        yield int(key), rows


def kind_masks(events: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(compute rows, comm rows) of an event table; comm is looked for among the few non-compute rows."""
    kind = events["kind"].to_numpy()
    is_compute = kind == "compute"
    is_comm = np.zeros(kind.size, dtype=bool)
    is_comm[~is_compute] = kind[~is_compute] == "comm"
    return is_compute, is_comm


def validate_events(events: pd.DataFrame, check_kinds: bool = True) -> None:
    """Raise if the table breaks the contract (missing columns, float times, unknown kinds).

    ``check_kinds=False`` skips the scan of every row's kind, for tables whose kinds all come from
    the classifier (which checks its few distinct decisions itself).
    """
    missing = [c for c in COLUMNS if c not in events]
    if missing:
        raise InputError(f"event table: missing columns {missing}; have {list(events.columns)}")
    for col in ("start_ns", "dur_ns"):
        if events[col].dtype != np.int64:
            raise InputError(f"event table: {col} must be int64 ns, not {events[col].dtype}")
    if not check_kinds:
        return
    bad = sorted({str(k) for k in pd.unique(events["kind"].to_numpy(dtype=object))} - set(KINDS))
    if bad:
        raise InputError(f"event table: unknown kind(s) {bad}; expected one of {list(KINDS)}")


def end_ns(events: pd.DataFrame) -> np.ndarray:
    """End time of each event (start + duration), int64 ns."""
    return events["start_ns"].to_numpy(np.int64) + events["dur_ns"].to_numpy(np.int64)


def few_codes(values: np.ndarray, keep_missing: bool = False) -> tuple[np.ndarray, list]:
    """Codes of a column with few distinct values and those values (sorted), by one comparison per
    distinct value: pd.factorize's hash table for a 1M-row column costs about 60 MB, this about 17.
    Missing values (None, NaN) get -1, or with ``keep_missing`` a code of their own (value None)."""
    missing = np.asarray(pd.isna(values), dtype=bool)
    distinct = sorted(set(values[~missing].tolist()), key=lambda v: (type(v).__name__, v))
    codes = np.full(values.size, -1, dtype=np.int64)
    for k, value in enumerate(distinct):
        codes[values == value] = k
    codes[missing] = -1
    if keep_missing and missing.any():
        codes[missing] = len(distinct)
        distinct.append(None)
    return codes, distinct


def kind_counts(events: pd.DataFrame) -> dict[str, int]:
    """{kind: rows}, most rows first: value_counts().to_dict() without its 1M-entry hash table (few_codes)."""
    codes, kinds = few_codes(events["kind"].to_numpy())
    counts = np.bincount(codes[codes >= 0], minlength=len(kinds))
    return {k: int(c) for c, k in sorted(zip(counts.tolist(), kinds, strict=True), key=lambda ck: -ck[0]) if c}
