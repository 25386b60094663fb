"""Exact conversion of decimal microsecond strings (as profilers write them) into int64 nanoseconds.

Profilers write absolute stamps of about 1.7e15 us with three decimals; float64 spacing there is
0.25 us, so a float parse loses the last digits. This module never goes through float: it views
the strings as a byte matrix, checks their shape with array operations, gathers the integer digits
and the first three fraction digits of every row into one digit string, and lets numpy read those
as integers (vectorised; a million cells take well under a second).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd

from .errors import InputError

_MAX_WIDTH = 48  # longer cells cannot be a time written by a profiler; they are reported as bad
_MAX_WHOLE_US = (2**63 - 1) // 1000 - 1  # largest integer microsecond count whose ns fit int64


def us_to_ns(
    values: Iterable[object] | pd.Series,
    where: str = "value",
    first_row: int = 0,
    row_label: str = "row",
) -> np.ndarray:
    """Parse decimal microsecond strings (or ints) exactly into int64 nanoseconds.

    Surrounding whitespace (including the TAB torch_npu writes after Start Time) is ignored;
    digits below 1 ns are rounded half up in magnitude. Empty, ``N/A``, exponent or otherwise
    non-decimal cells raise :class:`InputError` naming ``where`` and the first bad row, numbered
    from ``first_row`` (e.g. 2 for the first data line of a CSV file).
    """
    cells = _as_object_array(values)
    n = cells.size
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    try:
        raw = cells.astype("S")
    except (UnicodeEncodeError, ValueError, TypeError):
        raw = np.array([_ascii_or_bad(c) for c in cells], dtype="S")
    if raw.dtype.itemsize > _MAX_WIDTH:
        long = np.char.str_len(raw) > _MAX_WIDTH
        _fail(where, row_label, first_row, int(np.flatnonzero(long)[0]), cells)
    ns, ok = _parse_matrix(raw)
    if not ok.all():
        _fail(where, row_label, first_row, int(np.flatnonzero(~ok)[0]), cells)
    return ns


def parse_us_column(frame: pd.DataFrame, column: str, where: str) -> np.ndarray:
    """Parse one column of a CSV table; errors name the file, the line and the column."""
    return us_to_ns(frame[column], where=f"{where}: column {column!r}", first_row=2, row_label="line")


def us_scalar_to_ns(value: object, where: str) -> int:
    """Parse one microsecond value exactly (string or int)."""
    return int(us_to_ns([value], where=where)[0])


def _as_object_array(values: Iterable[object] | pd.Series) -> np.ndarray:
    """Cells as an object array of str/int; missing values become empty strings (an error later)."""
    if isinstance(values, pd.Series):
        arr = values.to_numpy(dtype=object, na_value="")
    else:
        items = [] if values is None else list(values)
        arr = np.fromiter(items, dtype=object, count=len(items))  # no broadcasting of nested lists
    arr = arr.ravel()
    floats = np.fromiter((type(v) is float for v in arr), dtype=bool, count=arr.size) if arr.size else None
    if floats is not None and floats.any():
        # a float cell is only legal as an already-exact whole number; NaN means missing
        arr = arr.copy()
        for i in np.flatnonzero(floats):
            v = arr[i]
            arr[i] = str(int(v)) if v == v and v == int(v) and abs(v) < 2**53 else "" if v != v else repr(v)
    return arr


def _ascii_or_bad(cell: object) -> bytes:
    text = "" if cell is None else str(cell)
    try:
        return text.encode("ascii")
    except UnicodeEncodeError:
        return b"?"


def _parse_matrix(raw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Vectorised parse of an 'S' array. Returns (ns, ok) where ok marks well-formed cells."""
    n, width = raw.size, raw.dtype.itemsize
    m = raw.view(np.uint8).reshape(n, width)
    is_space = (m == 32) | (m == 9) | (m == 13) | (m == 10) | (m == 0)
    body = ~is_space
    # the body must be one contiguous run of non-space characters
    run_starts = body.copy()
    run_starts[:, 1:] &= is_space[:, :-1]
    one_run = run_starts.sum(axis=1, dtype=np.int32) == 1
    digit = m - np.uint8(48)  # wraps around for non-digits
    is_digit = digit < 10
    is_dot = m == 46
    is_sign = (m == 43) | (m == 45)
    first = np.argmax(body, axis=1)
    rows = np.arange(n)
    dots = is_dot.sum(axis=1, dtype=np.int32)
    signs = is_sign.sum(axis=1, dtype=np.int32)
    ok = (
        one_run
        & (is_digit | is_dot | is_sign | is_space).all(axis=1)
        & (dots <= 1)
        & is_digit.any(axis=1)
        & ((signs == 0) | ((signs == 1) & is_sign[rows, first]))
    )
    last = width - 1 - np.argmax(body[:, ::-1], axis=1)
    dot_pos = np.where(dots == 1, np.argmax(is_dot, axis=1), last + 1)
    # gather 16 integer digits (right-aligned at the point) and 4 fraction digits per row
    offsets = np.concatenate([np.arange(-16, 0), np.arange(1, 5)])
    src = dot_pos[:, None] + offsets[None, :]
    inside = (src >= 0) & (src < width)
    src_c = np.clip(src, 0, width - 1)
    gathered = np.take_along_axis(m, src_c, axis=1)
    g_digit = inside & np.take_along_axis(is_digit, src_c, axis=1)
    # integer digits must be contiguous up to the point: a non-digit left of a digit is bad
    whole_ok = g_digit[:, :16]
    first_whole = np.argmax(whole_ok, axis=1)
    has_whole = whole_ok.any(axis=1)
    contiguous = whole_ok.sum(axis=1, dtype=np.int32) == np.where(has_whole, 16 - first_whole, 0)
    ok &= contiguous
    # anything left of the 16 gathered integer digits must not be a digit (more than 16 digits)
    beyond = (dot_pos - 17 >= 0) & is_digit[rows, np.clip(dot_pos - 17, 0, width - 1)]
    ok &= ~beyond
    digits = np.where(g_digit, gathered, np.uint8(48))
    wide = np.ascontiguousarray(digits[:, :19]).view("S19").ravel().astype(np.uint64)
    round_up = digits[:, 19] >= 53
    ok &= wide // np.uint64(1000) <= np.uint64(_MAX_WHOLE_US)
    ns = np.where(ok, wide, np.uint64(0)).astype(np.int64) + (ok & round_up)
    negative = ok & (signs == 1) & (m[rows, first] == 45)
    return np.where(negative, -ns, ns).astype(np.int64, copy=False), ok


def _fail(where: str, row_label: str, first_row: int, i: int, cells: np.ndarray) -> None:
    cell = cells[i]
    text = "" if cell is None else str(cell)
    shown = repr(text.strip()[:40]) if text.strip() else "(empty)"
    raise InputError(f"{where}: {row_label} {i + first_row}: expected a decimal time in microseconds, got {shown}")
