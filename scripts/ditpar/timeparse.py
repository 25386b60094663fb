"""Exact conversion of decimal microsecond strings (as profilers write them) into int64 nanoseconds.

Profilers write absolute stamps of about 1.7e15 us with three decimals; float64 spacing there is
0.25 us, so a float parse loses the last digits. This module never goes through float: it views
the strings as a byte matrix, groups the rows by layout and reads each group's digit columns as
one integer dot product with powers of ten (vectorised; a million cells take a fraction of a second).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

import numpy as np
import pandas as pd

from ditpar.errors import InputError

_MAX_WIDTH = 48  # longer cells cannot be a time written by a profiler; they are reported as bad
_MAX_WHOLE_US = (2**63 - 1) // 1000 - 1  # largest integer microsecond count whose ns fit int64
_CHUNK = 1 << 16


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
    ns = np.empty(n, dtype=np.int64)
    ok = np.empty(n, dtype=bool)
    for lo in range(0, n, _CHUNK):  # chunks keep the temporaries in cache
        ns[lo:lo + _CHUNK], ok[lo:lo + _CHUNK] = _parse_matrix(raw[lo:lo + _CHUNK])
    if not ok.all():
        _fail(where, row_label, first_row, int(np.flatnonzero(~ok)[0]), cells)
    return ns


def us_to_ns_arrow(array: object, where: str = "value", first_row: int = 0, row_label: str = "row") -> np.ndarray:
    """:func:`us_to_ns` for an Arrow string array, without a Python string per cell.

    Cells written the way profilers write them (digits, optionally a point and up to three
    decimals, around them only the whitespace :func:`us_to_ns` ignores) are read by Arrow's own
    kernels: the digits without the point as one integer, times 10**(3 - decimals), exact. Every
    other cell goes through the byte-matrix parser of :func:`us_to_ns`, so both agree on values
    and errors.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    if not isinstance(array, pa.ChunkedArray):
        array = pa.chunked_array([array])  # chunks are kept: no copy of the column
    n = len(array)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    fixed = _fixed_layout_ns(array)
    if fixed is None:
        fixed = _padded_layout_ns(array)
    if fixed is not None:
        return fixed
    long = pc.fill_null(pc.greater(pc.binary_length(array), _MAX_WIDTH), False).to_numpy(zero_copy_only=False)
    if long.any():   # us_to_ns's rule, before any other: the first cell over the width limit is named
        _fail(where, row_label, first_row, int(np.flatnonzero(long)[0]), _CellsOf(array))
    text = pc.ascii_trim(pc.fill_null(array, ""), characters=" \t\n\r\x00")  # nulls: careful path
    quick = _plain_decimal_ns(text)
    if quick is not None:
        return quick
    # at most 16 whole digits below 9e15 us and at most 3 decimals: as decimal(19, 3) the unscaled
    # integer is the count of ns, exact, and fits int64 (Arrow's cast would also take exponents
    # and signs: the pattern keeps those for the careful path)
    hit_arr = pc.match_substring_regex(text, r"^(?:[0-9]{1,15}|[1-8][0-9]{15})(?:\.[0-9]{0,3})?$")
    hit = hit_arr.to_numpy(zero_copy_only=False)
    ns = np.zeros(n, dtype=np.int64)
    if hit.all():
        ns[:] = _decimal_ns(text)
    elif hit.any():
        ns[hit] = _decimal_ns(pc.if_else(hit_arr, text, "0"))[hit]
    rest = np.flatnonzero(~hit)
    if rest.size:
        whole = array.cast(pa.large_string()).combine_chunks()  # 64-bit offsets: one layout for every size
        values, ok = _arrow_matrix(whole.take(pa.array(rest)))
        ns[rest] = values
        if not ok.all():
            _fail(where, row_label, first_row, int(rest[np.flatnonzero(~ok)[0]]), _CellsOf(whole))
    return ns


_LAYOUT = re.compile(r"s*(d{0,16})(?:\.(d{0,3}))?s*")


def _fixed_layout_ns(array: object) -> np.ndarray | None:
    """int64 ns when every cell has the first cell's layout (same width, digits, point and whitespace in
    the same places, e.g. ``1736408883704643.212<TAB>`` as torch_npu writes Start Time), else None.

    Such a column is a byte matrix: the digits are read column by column as exact integers, in row
    blocks that stay in cache; each block is checked to hold digits, the point and the whitespace
    exactly where the first cell has them.
    """
    import pyarrow as pa

    if array.null_count or not all(c.type in (pa.string(), pa.large_string()) for c in array.chunks):
        return None
    n, width, parts = len(array), None, []
    for chunk in array.chunks:
        if not len(chunk):
            continue
        offsets = np.frombuffer(chunk.buffers()[1], dtype=np.int32 if chunk.type == pa.string() else np.int64)
        offsets = offsets[chunk.offset:chunk.offset + len(chunk) + 1]
        lengths = np.diff(offsets)
        width = int(lengths[0]) if width is None else width
        if width == 0 or width > _MAX_WIDTH or bool((lengths != width).any()):
            return None
        parts.append(np.frombuffer(chunk.buffers()[2], dtype=np.uint8)[int(offsets[0]):int(offsets[-1])])
    first = parts[0][:width].tolist()
    kinds = "".join("d" if 48 <= b <= 57 else "." if b == 46 else "s" if _SPACE_LUT[b] else "x" for b in first)
    m = _LAYOUT.fullmatch(kinds)
    if m is None or not (m.group(1) or m.group(2)):
        return None
    decimals = len(m.group(2) or "")
    digits = [*range(m.start(1), m.end(1)), *(range(m.start(2), m.end(2)) if decimals else ())]
    fixed = [col for col in range(width) if col not in digits]  # the point and the whitespace
    ns = np.empty(n, dtype=np.uint64)
    lo = 0
    for block in _row_blocks(parts, width):
        if any(bool((block[:, col] != first[col]).any()) for col in fixed):
            return None
        value = _digits_value(block, digits)
        if value is None:
            return None
        ns[lo:lo + len(block)] = value
        lo += len(block)
    np.multiply(ns, np.uint64(10 ** (3 - decimals)), out=ns)
    if int(ns.max()) > _MAX_WHOLE_US * 1000:
        return None
    return ns.view(np.int64)


#: SWAR steps turning 8 ASCII digits read as one little-endian uint64 (less 0x30 in every byte) into their value:
#: adjacent digits, then pairs, then quads are joined by one multiply each (every lane stays within its bits)
_SWAR = ((0x0F0F0F0F0F0F0F0F, 10 * 2**8 + 1, 8), (0x00FF00FF00FF00FF, 100 * 2**16 + 1, 16),
         (0x0000FFFF0000FFFF, 10000 * 2**32 + 1, 32))


def _digits_value(block: np.ndarray, digits: list[int]) -> np.ndarray | None:
    """The integer the ``digits`` columns of a byte matrix spell in each row (at most 19 digits: exact in
    uint64), or None when one of those bytes is not a digit. Eight digits at a time (_SWAR)."""
    rows, nd = len(block), len(digits)
    words = -(-nd // 8)
    padded = np.full((rows, words * 8), 48, dtype=np.uint8)  # leading '0's: the same value
    padded[:, words * 8 - nd:] = block[:, digits]
    padded -= np.uint8(48)  # anything but a digit wraps above 9
    if int(padded.max()) > 9:
        return None
    x = padded.view(np.uint64)  # (rows, words); little-endian: the first digit in the lowest byte
    if not np.little_endian:
        x = x.byteswap()
    for mask, mul, shift in _SWAR:
        np.bitwise_and(x, np.uint64(mask), out=x)
        np.multiply(x, np.uint64(mul), out=x)
        np.right_shift(x, np.uint64(shift), out=x)
    value = x[:, 0].copy()
    for k in range(1, words):
        np.multiply(value, np.uint64(10**8), out=value)
        np.add(value, x[:, k], out=value)
    return value


def _padded_layout_ns(array: object) -> np.ndarray | None:
    """:func:`_fixed_layout_ns` for cells that differ only in their count of whole digits (torch_npu's
    Duration: ``20.125``, ``100.250``): each cell padded on the left with zeros to the longest (the same
    value), when every cell still has a digit of its own (an empty or blank cell never reads as 0); else None."""
    import pyarrow.compute as pc

    if array.null_count:
        return None
    span = pc.min_max(pc.binary_length(array)).as_py()
    shortest, width = span["min"], span["max"]
    if shortest is None or shortest == width or not 0 < width <= _MAX_WIDTH:
        return None  # one width (the fixed layout said no) or nothing to pad
    padded = pc.utf8_lpad(array, width, "0")  # counts characters: a multi-byte cell keeps another width
    first = next(c for c in padded.chunks if len(c))[0].as_py().encode("utf-8", "replace")
    kinds = "".join("d" if 48 <= b <= 57 else "." if b == 46 else "s" if _SPACE_LUT[b] else "x" for b in first)
    m = _LAYOUT.fullmatch(kinds)
    if m is None or len(first) != width:
        return None
    # the cell's own text must reach a digit: the point and its decimals, or (no decimals) a whole digit
    own = width - m.end(1) + (0 if m.group(2) else 1)
    if shortest < own:
        return None
    return _fixed_layout_ns(padded)


def _row_blocks(parts: list[np.ndarray], width: int) -> Iterator[np.ndarray]:
    """Byte matrices of about _CHUNK rows from consecutive cell buffers (small copies, reused memory)."""
    group, rows = [], 0
    for part in parts:
        group.append(part)
        rows += part.size // width
        if rows >= _CHUNK:
            yield np.concatenate(group).reshape(rows, width)
            group, rows = [], 0
    if group:
        yield np.concatenate(group).reshape(rows, width)


def texts_to_ns(values: list, where: str = "value") -> np.ndarray:
    """:func:`us_to_ns` for a long list of cells (a reader's column): through Arrow when every cell is a
    string (several times faster), else cell by cell; values and errors are the same either way."""
    if len(values) >= 4096:
        import pyarrow as pa

        try:
            array = pa.array(values, pa.string())
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            array = None  # not all strings (ints, None): the object parser reads and reports them
        if array is not None:
            return us_to_ns_arrow(array, where=where)
    return us_to_ns(values, where=where)


def _plain_decimal_ns(text: object) -> np.ndarray | None:
    """int64 ns when every cell is digits with at most one point and 3 decimals, in range; else None.

    Arrow's decimal cast rejects a second point, a fourth decimal and empty cells; the bytes are
    checked for anything but digits and points (signs, exponents), the whole digits for 16 at most
    and the values for the int64 range. Any other column goes the cell-by-cell way.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    for chunk in text.chunks:
        if not len(chunk):
            continue
        offsets = np.frombuffer(chunk.buffers()[1], dtype=np.int32 if chunk.type == pa.string() else np.int64)
        lo, hi = int(offsets[chunk.offset]), int(offsets[chunk.offset + len(chunk)])
        data = np.frombuffer(chunk.buffers()[2], dtype=np.uint8)[lo:hi] if hi > lo else np.zeros(0, np.uint8)
        # signs and exponent letters lie outside '.'..'9'; '/' (between them) fails the cast below
        if data.size and (int(data.min()) < ord(".") or int(data.max()) > ord("9")):
            return None
    point = pc.find_substring(text, ".").to_numpy(zero_copy_only=False)
    whole = np.where(point >= 0, point, pc.binary_length(text).to_numpy(zero_copy_only=False))
    if int(whole.max()) > 16:  # leading zeros too: the careful path allows 16 whole digits
        return None
    try:
        ns = _decimal_ns(text)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    if ns.size and (int(ns.min()) < 0 or int(ns.max()) > _MAX_WHOLE_US * 1000):
        return None
    return ns


def _decimal_ns(text: object) -> np.ndarray:
    """int64 ns of plain decimal strings (<= 16 whole digits, <= 3 decimals): Arrow's decimal cast, exact."""
    import pyarrow as pa
    import pyarrow.compute as pc

    parts = []
    for chunk in pc.cast(text, pa.decimal128(19, 3)).chunks:
        if not len(chunk):
            continue
        # a decimal128 is a little-endian 128-bit unscaled integer; below 2**63 its low word is the value
        words = np.frombuffer(chunk.buffers()[1], dtype="<i8")
        parts.append(words[2 * chunk.offset:2 * (chunk.offset + len(chunk)):2])
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def _arrow_matrix(array: object) -> tuple[np.ndarray, np.ndarray]:
    """(ns, ok) of a large_string Arrow array by the byte-matrix parser; nulls and long cells are not ok."""
    n = len(array)
    _, off_buf, data_buf = array.buffers()
    offsets = np.frombuffer(off_buf, dtype=np.int64, count=n + 1, offset=array.offset * 8)
    data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(0, dtype=np.uint8)
    lengths = np.diff(offsets)
    valid = array.is_valid().to_numpy(zero_copy_only=False) & (lengths <= _MAX_WIDTH)
    lengths = np.where(valid, lengths, 0)
    width = max(int(lengths.max()), 1)
    if data.size == 0:
        data = np.zeros(1, dtype=np.uint8)
    cols = np.arange(width, dtype=np.int64)
    ns = np.zeros(n, dtype=np.int64)
    ok = np.zeros(n, dtype=bool)
    last = data.size - 1
    for lo in range(0, n, _CHUNK):
        hi = min(n, lo + _CHUNK)
        idx = offsets[lo:hi, None] + cols
        inside = cols < lengths[lo:hi, None]
        matrix = np.where(inside, data[np.minimum(idx, last)], np.uint8(0)).astype(np.uint8)
        ns[lo:hi], ok[lo:hi] = _parse_matrix(matrix.view(f"S{width}").ravel())
    return ns, ok & valid


class _CellsOf:
    """Index an Arrow array like the object array :func:`_fail` expects (one cell at a time)."""

    def __init__(self, array: object):
        self.array = array

    def __getitem__(self, i: int) -> object:
        return self.array[i].as_py()


def parse_us_column(frame: pd.DataFrame, column: str, where: str) -> np.ndarray:
    """Parse one column of a CSV table; errors name the file, the line and the column."""
    return us_to_ns(frame[column], where=f"{where}: column {column!r}", first_row=2, row_label="line")


def us_scalar_to_ns(value: object, where: str) -> int:
    """Parse one microsecond value exactly (string or int)."""
    return int(us_to_ns([value], where=where)[0])


def _as_object_array(values: Iterable[object] | pd.Series) -> np.ndarray:
    """Cells as a flat object array; missing values of a Series become empty strings (an error later).

    Non-string cells are read from their text (str()), so an int is exact and a float cell that
    was already a float is read as Python prints it.
    """
    if isinstance(values, pd.Series):
        return values.to_numpy(dtype=object, na_value="").ravel()
    items = [] if values is None else list(values)
    return np.fromiter(items, dtype=object, count=len(items))  # no broadcasting of nested lists


def _ascii_or_bad(cell: object) -> bytes:
    text = "" if cell is None else str(cell)
    try:
        return text.encode("ascii")
    except UnicodeEncodeError:
        return b"?"


_SPACE_LUT = np.zeros(256, dtype=bool)
_SPACE_LUT[[0, 9, 10, 13, 32]] = True


def _parse_matrix(raw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Vectorised parse of an 'S' array. Returns (ns, ok) where ok marks well-formed cells.

    Rows are grouped by layout (where the text starts, ends and has its point, and whether it
    has a sign); within a group every digit sits in a known column, so the value is one integer
    dot product of the digit columns with powers of ten.
    """
    n, width = raw.size, raw.dtype.itemsize
    m = raw.view(np.uint8).reshape(n, width)
    body = ~_SPACE_LUT[m]
    has_body = body.any(axis=1)
    first = np.argmax(body, axis=1).astype(np.int32)
    last = (width - 1 - np.argmax(body[:, ::-1], axis=1)).astype(np.int32)
    # the text must be one run: as many body characters as the run is long
    ok = has_body & (body.sum(axis=1, dtype=np.int32) == last - first + 1)
    is_dot = m == 46
    dots = is_dot.sum(axis=1, dtype=np.int32)
    ok &= dots <= 1
    dot_pos = np.where(dots == 1, np.argmax(is_dot, axis=1), last + 1).astype(np.int32)
    lead = m[np.arange(n), first]
    signed = (lead == 43) | (lead == 45)
    negative = lead == 45
    key = ((first * 64 + last) * 64 + dot_pos) * 2 + signed
    key[~ok] = -1
    uniq, inverse = np.unique(key, return_inverse=True)
    order = np.argsort(inverse, kind="stable")
    bounds = np.searchsorted(inverse[order], np.arange(uniq.size + 1))
    ns = np.zeros(n, dtype=np.int64)
    for g, k in enumerate(uniq.tolist()):
        if k < 0:
            continue
        rows = order[bounds[g]:bounds[g + 1]]
        sign, k = k % 2, k // 2
        d, k = k % 64, k // 64
        lo, hi = k // 64 + sign, k % 64  # first digit column, last column
        whole_cols = list(range(lo, d))
        frac_cols = list(range(d + 1, min(hi, d + 3) + 1))
        if not whole_cols and not frac_cols or len(whole_cols) > 16:
            ok[rows] = False
            continue
        digit_cols = whole_cols + list(range(d + 1, hi + 1))
        block = m if rows.size == n else m[rows]
        digits = block[:, digit_cols] - np.uint8(48)
        good = (digits < 10).all(axis=1)
        n_whole, n_frac = len(whole_cols), len(frac_cols)
        weights = [10 ** (n_whole - 1 - c + 3) for c in range(n_whole)] + [10 ** (2 - c) for c in range(n_frac)]
        value = np.zeros(rows.size, dtype=np.uint64)
        for c, w in enumerate(weights):
            value += digits[:, c].astype(np.uint64) * np.uint64(w)
        if len(digit_cols) > n_whole + n_frac:  # a fourth fraction digit decides the rounding
            value += digits[:, n_whole + n_frac] >= 5
        good &= value <= np.uint64(_MAX_WHOLE_US * 1000)
        ok[rows] = good
        ns[rows] = np.where(good, value, 0).astype(np.int64)
    return np.where(negative & ok, -ns, ns), ok


def _fail(where: str, row_label: str, first_row: int, i: int, cells: np.ndarray) -> None:
    cell = cells[i]
    text = "" if cell is None else str(cell)
    shown = repr(text.strip()[:40]) if text.strip() else "(empty)"
    raise InputError(f"{where}: {row_label} {i + first_row}: expected a decimal time in microseconds, got {shown}")
