"""Small guards shared by the readers: untrusted JSON values, int64 ranges of times and sizes, and the
policies every reader applies alike (rows repeated verbatim counted once, a capture without any duration)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from ditpar.errors import InputError

#: times and sizes above this cannot be real (2**62 ns is 146 years); it keeps start + dur in int64
LIMIT = 2**62


def hashable(value: object) -> object:
    """A JSON value usable as a dict key: scalars as they are, anything else as its text."""
    return value if value is None or isinstance(value, (str, int, float)) else str(value)


def as_int(value: object) -> int | None:
    """A JSON integer (not a bool), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def check_times(start: np.ndarray, dur: np.ndarray, where: str) -> None:
    """Reject stamps and durations whose sum could leave int64, and negative durations."""
    if start.size and (int(np.abs(start).max()) >= LIMIT):
        i = int(np.argmax(np.abs(start)))
        raise InputError(f"{where}: entry {i}: start {int(start[i])} ns is out of range (over 2**62 ns)")
    if dur.size and (int(dur.min()) < 0 or int(dur.max()) >= LIMIT):
        i = int(np.argmin(dur)) if int(dur.min()) < 0 else int(np.argmax(dur))
        raise InputError(f"{where}: entry {i}: duration {int(dur[i])} ns is negative or out of range")


def byte_counts(values: np.ndarray) -> pd.Series:
    """Float byte counts to nullable integers; NaN, infinite, negative or absurd values become NA."""
    arr = np.asarray(values, dtype=float)
    good = np.isfinite(arr) & (arr >= 0) & (arr < LIMIT)
    out = pd.Series(pd.NA, index=range(arr.size), dtype="Int64")
    if good.any():
        out[good] = np.round(arr[good]).astype(np.int64)
    return out


def factorize(values: pd.Series | np.ndarray | list) -> tuple[np.ndarray, list]:
    """Codes and distinct values (missing values kept as a value), for per-distinct-value work."""
    codes, uniques = pd.factorize(pd.Series(values).reset_index(drop=True), use_na_sentinel=False)
    return codes, list(uniques)


def text_of(value: object) -> str:
    """A cell as stripped text; missing values are empty."""
    if value is None or (isinstance(value, float) and value != value) or value is pd.NA:
        return ""
    return str(value).strip()


def require_durations(dur: np.ndarray, where: str) -> None:
    """A capture whose every kernel lasts 0 ns measured nothing: an input error, never an empty table."""
    if dur.size and not bool(dur.any()):
        raise InputError(f"{where}: all {dur.size} kernel durations are 0; expected a profile with timed kernels "
                         f"(a capture that recorded no durations measures nothing)")


def duplicate_mask(start: np.ndarray, keys: Callable[[np.ndarray], dict[str, np.ndarray]]) -> np.ndarray | None:
    """Mask of rows identical to an earlier one in ``start`` and every key column, else None.

    Identical rows share their start stamp, so only rows whose start repeats are compared in full:
    ``keys(rows)`` gives the other columns at those rows only (a large capture has few such rows).
    """
    if start.size < 2 or bool((start[1:] > start[:-1]).all()):
        return None
    ordered = np.sort(start)  # a few ms per million stamps; hashing them all costs 20 times more
    repeated = ordered[1:][ordered[1:] == ordered[:-1]]
    if not repeated.size:
        return None
    rows = np.flatnonzero(np.isin(start, repeated))  # in file order: 'first' stays the first
    key = pd.DataFrame({"start": start[rows],
                        **{k: pd.Series(v, dtype=object).factorize()[0] for k, v in keys(rows).items()}})
    dup = np.zeros(start.size, dtype=bool)
    dup[rows] = key.duplicated(keep="first").to_numpy()
    return dup if dup.any() else None


def warn_duplicates(path: object, count: int, first: str) -> None:
    """The one warning every reader gives for rows repeated verbatim (they are then counted once)."""
    sys.stderr.write(f"{Path(sys.argv[0]).name}: warning: {path}: {count} duplicate row(s), identical in every "
                     f"column read (first at {first}); each kernel counted once\n")
