"""The one event table every reader produces and every analysis reads (see DESIGN.md).

One row per device task. Times are exact int64 nanoseconds; strings are plain object columns.
"""

from __future__ import annotations

from collections.abc import Iterable

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
    """(compute rows, comm rows) of an event table: by the few distinct kind objects where identity_groups finds
    them (2.5x faster on a 1M-row rank), else comm is looked for among the few non-compute rows."""
    kind = events["kind"].to_numpy()
    found = identity_groups(kind)  # a reader's column repeats a few string objects: one test per object
    if found is not None:
        groups, where = found
        distinct = kind[where].tolist()
        compute = np.array([isinstance(k, str) and k == "compute" for k in distinct], dtype=bool)
        comm = np.array([isinstance(k, str) and k == "comm" for k in distinct], dtype=bool)
        return compute[groups], comm[groups]
    is_compute = kind == "compute"
    is_comm = np.zeros(kind.size, dtype=bool)
    is_comm[~is_compute] = kind[~is_compute] == "comm"
    return is_compute, is_comm


def validate_events(events: pd.DataFrame, check_kinds: bool = True, columns: Iterable[str] | None = None) -> None:
    """Raise if the table breaks the contract (missing columns, float times, unknown kinds).

    ``check_kinds=False`` skips the scan of every row's kind, for tables whose kinds all come from
    the classifier (which checks its few distinct decisions itself). ``columns``: those the table must
    have when its reader was asked for only some (start_ns and dur_ns always; None: every column).
    """
    must = COLUMNS if columns is None else [c for c in COLUMNS if c in columns or c in ("start_ns", "dur_ns")]
    missing = [c for c in must if c not in events]
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
    quick = _int_codes(values) if values.dtype.kind in "iu" else _text_codes(values, keep_missing)
    if quick is not None:
        return quick
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


def _int_codes(values: np.ndarray) -> tuple[np.ndarray, list] | None:
    """few_codes of an integer column spanning a small range (e.g. one rank's rank column), by a table over
    the range; None for a wide one."""
    if values.size == 0:
        return None
    lo, hi = int(values.min()), int(values.max())
    if hi - lo >= 1 << 16:
        return None
    at = (values - lo).astype(np.int64) if lo else values.astype(np.int64, copy=False)
    seen = np.bincount(at, minlength=hi - lo + 1) > 0
    return (np.cumsum(seen, dtype=np.int64) - 1)[at], (np.flatnonzero(seen) + lo).tolist()


def _text_codes(values: np.ndarray, keep_missing: bool) -> tuple[np.ndarray, list] | None:
    """few_codes of an object column of strings (and missing values) that repeats a few string objects, as a
    reader's columns do (built by indexing their distinct texts): grouped by identity, then the few objects by
    value; no string is hashed or compared per row. None for any other column (few_codes compares values)."""
    found = identity_groups(values)
    if found is None:
        return None
    groups, where = found
    objects = values[where]
    missing = np.asarray(pd.isna(objects), dtype=bool)
    if not all(type(o) is str for o in objects[~missing].tolist()):
        return None  # 1 == 1.0 == True: other types go by value
    distinct = sorted(set(objects[~missing].tolist()))
    code_of = {text: k for k, text in enumerate(distinct)}
    none = len(distinct) if keep_missing and missing.any() else -1
    remap = np.array([none if gone else code_of[o] for o, gone in zip(objects.tolist(), missing.tolist(), strict=True)],
                     dtype=np.int64)
    if none >= 0:
        distinct.append(None)
    return remap[groups], distinct


#: slots of the identity table (2**16: 512 KB); more distinct objects than it holds without a clash: None
_IDENTITY_BITS = 16


def identity_groups(values: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(group of each item, one position per group) of an object array by identity (items that are the same
    Python object), when its distinct objects fit a small table without a clash; else None.

    The addresses are read as integers (the array's own memory, no copy) and placed by a multiplicative hash;
    every item is then checked against its slot's object, so a clash is detected, never merged."""
    import ctypes

    if values.dtype != object or values.ndim != 1 or values.size == 0:
        return None
    values = np.ascontiguousarray(values)
    n = values.size
    addr = np.ctypeslib.as_array((ctypes.c_uint64 * n).from_address(values.ctypes.data))
    slot = addr >> np.uint64(4)  # objects are 16-byte aligned; in place below: one temporary of n
    slot *= np.uint64(0x9E3779B97F4A7C15)
    slot >>= np.uint64(64 - _IDENTITY_BITS)
    where = np.full(1 << _IDENTITY_BITS, -1, dtype=np.int64)
    where[slot] = np.arange(n, dtype=np.int64)  # some position of each slot's object; -1: an empty slot
    if not np.array_equal(addr[where[slot]], addr):
        return None  # two objects share a slot (or too many distinct objects)
    used = where >= 0
    group_of_slot = np.cumsum(used, dtype=np.int64) - 1
    return group_of_slot[slot], where[used]


def kind_counts(events: pd.DataFrame, masks: tuple[np.ndarray, np.ndarray] | None = None) -> dict[str, int]:
    """{kind: rows}, most rows first: value_counts().to_dict() without its 1M-entry hash table (few_codes).
    ``masks`` (kind_masks of the table): only the rows of neither kind are looked at."""
    if masks is None:
        codes, kinds = few_codes(events["kind"].to_numpy())
        counts = np.bincount(codes[codes >= 0], minlength=len(kinds))
    else:
        rest_codes, rest = few_codes(events["kind"].to_numpy()[~(masks[0] | masks[1])])
        tally = dict(zip(rest, np.bincount(rest_codes[rest_codes >= 0], minlength=len(rest)).tolist(), strict=True))
        for kind, mask in (("compute", masks[0]), ("comm", masks[1])):
            if mask.any():
                tally[kind] = int(mask.sum())
        kinds = sorted(tally, key=lambda v: (type(v).__name__, v))  # few_codes' order
        counts = np.array([tally[k] for k in kinds], dtype=np.int64)
    return {k: int(c) for c, k in sorted(zip(counts.tolist(), kinds, strict=True), key=lambda ck: -ck[0]) if c}
