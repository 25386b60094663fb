"""Columns of an SQLite rowid table read straight from the database file's pages, as numpy arrays.

The b-tree and record layout are SQLite's documented file format (https://www.sqlite.org/fileformat2.html,
sections 1.3 "The B-tree pages", 1.6 "B-tree Page Format" and 2.1 "Record Format"). Each cell's serial
type is kept, so a caller can tell an INTEGER from a NULL, REAL, TEXT or BLOB exactly as SQL's typeof
would. Anything outside the plain layout (an overflow page, a WITHOUT ROWID or generated column, a
record shorter than the columns asked for, a page of the wrong kind) is :class:`NotPlain`: the caller
then reads the table through SQLite, as it always could. Only ever a faster way to the same values.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: kinds of a cell (SQL typeof): NULL, INTEGER, REAL, TEXT or BLOB
NULL, INTEGER, REAL, TEXT = 0, 1, 2, 3
_LEAF, _INTERIOR = 0x0D, 0x05


class NotPlain(Exception):
    """The table is not laid out the plain way this reader knows; read it through SQLite."""


@dataclass
class Table:
    """One table's rows in b-tree (rowid) order: rowids, and per column its values (int64; 0 where the
    cell is not an INTEGER) and kinds (NULL, INTEGER, REAL or TEXT; TEXT stands for BLOB too)."""

    rowid: np.ndarray
    value: dict[str, np.ndarray]
    kind: dict[str, np.ndarray]


def page_geometry(buf: np.ndarray) -> tuple[int, int]:
    """(page size, usable bytes per page) from the 100-byte database header."""
    size = int(buf[16]) << 8 | int(buf[17])
    size = 65536 if size == 1 else size
    usable = size - int(buf[20])
    if size < 512 or size & (size - 1) or usable < 480:
        raise NotPlain(f"page size {size}, usable {usable}")
    return size, usable


def read_table(buf: np.ndarray, root: int, positions: dict[str, int], columns: int, alias: str | None = None,
               where: tuple[str, int] | None = None) -> Table:
    """The columns named in ``positions`` (name -> index in the record) of the table whose b-tree starts at
    page ``root`` and has ``columns`` columns. Each record's header is read as far as SQLite's would be for
    the same columns; where that is the whole record (the last column asked for), its header must list
    exactly ``columns`` types and its cells fill it to its last byte, as SQLite requires (a record that does
    not is NotPlain: SQLite then names the damage). ``alias``: the INTEGER PRIMARY KEY column,
    which the record stores as NULL and the rowid holds. ``where`` (column, value): only the rows whose cell
    there is that INTEGER (SQL's ``column = value`` on a column of INTEGER affinity), the other columns read
    for those rows alone."""
    page_size, usable = page_geometry(buf)
    leaves = _leaf_pages(buf, root, page_size)
    cells, page_end = _cells(buf, leaves, page_size, usable)
    length, n = _varint(buf, cells)
    n2 = _varint_length(buf, cells + n)  # the rowids' values are read below, for the rows kept
    payload = cells + n + n2
    if (length > usable - 35).any() or (length < 0).any():  # the record spills onto overflow pages
        raise NotPlain("overflow page")
    end = payload + length
    if (end > page_end).any():
        raise NotPlain("a record runs past its page")
    # the rowid alias is never read from the record (SQLite returns the rowid for it, whatever is stored)
    width = max((pos for name, pos in positions.items() if name != alias), default=-1) + 1
    if max(positions.values(), default=-1) >= columns:
        raise NotPlain("a column past the table's width")
    stypes, body = _header(buf, payload, width, end if width == columns else None)
    if where is not None:
        pos = positions[where[0]]
        value, kind = _values(buf, body[:, pos], stypes[:, pos])
        rows = np.flatnonzero((kind == INTEGER) & (value == where[1]))
        stypes, body, cells, n, end = stypes[rows], body[rows], cells[rows], n[rows], end[rows]
    rowid = _varint(buf, cells + n)[0]
    out = Table(rowid, {}, {})
    for name, pos in positions.items():
        if name == alias:  # the rowid is its value
            out.value[name], out.kind[name] = rowid, np.full(len(rowid), INTEGER, dtype=np.uint8)
        else:
            stype, at = stypes[:, pos], body[:, pos]
            if len(at) and ((at + _SIZES[np.minimum(stype, 9)] > end) & (stype < 12)).any():
                raise NotPlain("a record's header and body disagree")
            out.value[name], out.kind[name] = _values(buf, at, stype)
    return out


def _header(buf: np.ndarray, payload: np.ndarray, width: int, end: np.ndarray | None
            ) -> tuple[np.ndarray, np.ndarray]:
    """The serial types of the first ``width`` columns of each record and the byte offset of each of those
    cells, as (rows, width) arrays. With ``end`` (the records' ends; ``width`` is then every column), each
    header holds exactly ``width`` types and the cells end where the record ends. A header of one-byte
    varints (every integer, NULL and short text) is read in one gather; any other varint by varint."""
    n = len(payload)
    if not n or not width:
        return np.zeros((n, width), dtype=np.int64), np.zeros((n, width), dtype=np.int64)
    if payload.max() + width + 1 > len(buf):
        raise NotPlain("a record header past the file's end")
    head = np.empty((width + 1, n), dtype=np.uint8)  # column-major: each step below runs across all records
    for col in range(width + 1):  # one gather per byte: the header's first bytes of every record
        head[col] = buf[payload + col]
    hsize = head[0].astype(np.int64)
    fits = hsize == width + 1 if end is not None else hsize >= width + 1
    if not (head >= 0x80).any() and fits.all():
        stypes = head[1:].astype(np.int64)
        sizes = np.take(_SIZE_128, stypes)
        if (sizes < 0).any():
            raise NotPlain("a reserved serial type")
        body = np.empty_like(sizes)
        at = payload + hsize
        for col in range(width):  # a running sum across the columns (numpy's cumsum along axis 0 is slow)
            body[col] = at
            at = at + sizes[col]
        if end is not None and (at != end).any():
            raise NotPlain("a record's cells do not fill it")
        return stypes.T, body.T
    hsize, n1 = _varint(buf, payload)
    cursor, header_end = payload + n1, payload + hsize
    body = header_end.copy()
    stypes = np.empty((n, width), dtype=np.int64)
    offsets = np.empty((n, width), dtype=np.int64)
    for col in range(width):
        if (cursor >= header_end).any():
            raise NotPlain("a record has fewer columns than asked for")
        stype, k = _varint(buf, cursor)
        cursor = cursor + k
        stypes[:, col], offsets[:, col] = stype, body
        body = body + _serial_size(stype, 1 << 16)
    if (cursor > header_end).any() or (end is not None and ((cursor != header_end).any() or (body != end).any())):
        raise NotPlain("a record's header or cells do not fill it")
    return stypes, offsets


def _int64_at(buf: np.ndarray) -> np.ndarray:
    """The file as a little-endian int64 starting at every byte (a read-only strided view; what is
    gathered from it is byte-swapped to read big-endian)."""
    return np.ndarray(shape=(max(len(buf) - 7, 0),), dtype="<i8", buffer=buf, strides=(1,))


def _leaf_pages(buf: np.ndarray, root: int, page_size: int) -> np.ndarray:
    """Byte offsets of the table's leaf pages, in key order (interior pages walked depth first; an
    interior page whose children are all leaves hands them on in one step)."""
    pages = len(buf) // page_size
    leaves: list[np.ndarray] = []
    stack, seen = [root], set()
    while stack:
        page = stack.pop()
        if not 2 <= page <= pages or page in seen:  # page 1 holds the schema; a loop is damage
            raise NotPlain(f"page {page}")
        seen.add(page)
        off = (page - 1) * page_size
        kind = int(buf[off])
        if kind == _LEAF:
            leaves.append(np.array([off], dtype=np.int64))
            continue
        if kind != _INTERIOR:
            raise NotPlain(f"page {page} of kind {kind}")
        n = int(buf[off + 3]) << 8 | int(buf[off + 4])
        ptrs = buf[off + 12:off + 12 + 2 * n].astype(np.int64)
        ptrs = off + (ptrs[0::2] << 8 | ptrs[1::2])
        if len(ptrs) != n or (ptrs > off + page_size - 4).any():
            raise NotPlain(f"page {page}: cell pointers")
        kids = np.append(_be(buf, ptrs, 4), _be(buf, np.array([off + 8]), 4))
        if ((kids < 2) | (kids > pages)).any():
            raise NotPlain(f"page {page}: a child outside the file")
        offsets = (kids - 1) * page_size
        if (buf[offsets] == _LEAF).all():
            leaves.append(offsets)
        else:
            stack.extend(reversed(kids.tolist()))
    out = np.concatenate(leaves) if leaves else np.zeros(0, dtype=np.int64)
    if len(np.unique(out)) != len(out):  # a leaf reached twice: damage
        raise NotPlain("a leaf page twice")
    return out


def _cells(buf: np.ndarray, leaves: np.ndarray, page_size: int, usable: int) -> tuple[np.ndarray, np.ndarray]:
    """Byte offsets of every cell of the leaf pages, in order, and the end of each cell's page."""
    if not len(leaves):
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    counts = _be(buf, leaves + 3, 2)
    if (8 + 2 * counts > usable).any():
        raise NotPlain("a leaf page's cell count past its end")
    total = int(counts.sum())
    first = np.repeat(np.cumsum(counts) - counts, counts)
    page = np.repeat(leaves, counts)
    at = page + 8 + 2 * (np.arange(total, dtype=np.int64) - first)
    ptr = _be(buf, at, 2)
    if (ptr < 8).any() or (ptr >= usable).any():
        raise NotPlain("a cell pointer outside its page")
    return page + ptr, page + usable


def _be(buf: np.ndarray, at: np.ndarray, width: int) -> np.ndarray:
    """Unsigned big-endian integers of ``width`` bytes at byte offsets ``at`` (int64)."""
    if len(at) and (at.min() < 0 or at.max() + width > len(buf)):
        raise NotPlain("bytes past the file's end")
    out = np.zeros(len(at), dtype=np.int64)
    for k in range(width):
        out = out << 8 | buf[at + k]
    return out


def _varint(buf: np.ndarray, at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """SQLite varints (1 to 9 bytes, big-endian, 7 bits a byte, all 8 bits of a ninth) at ``at``: the
    values (int64, two's complement) and their lengths in bytes."""
    if len(at) and (at.min() < 0 or at.max() >= len(buf)):
        raise NotPlain("a varint outside the file")
    last = len(buf) - 1  # a varint cut by the file's end reads its last byte again; the bounds checks refuse it
    byte = buf[at].astype(np.int64)
    value, more = byte & 0x7F, byte >= 0x80
    length = np.ones(len(at), dtype=np.int64)
    for k in range(1, 9):  # whole-array steps: the varints of one column mostly share their length
        if not more.any():
            break
        byte = buf[np.minimum(at + k, last)].astype(np.int64)
        length += more
        if k == 8:
            value = np.where(more, value << 8 | byte, value)
            break
        value = np.where(more, value << 7 | (byte & 0x7F), value)
        more &= byte >= 0x80
    return value, length


def _varint_length(buf: np.ndarray, at: np.ndarray) -> np.ndarray:
    """The lengths in bytes of the varints at ``at`` (1 to 9), without their values."""
    if len(at) and (at.min() < 0 or at.max() >= len(buf)):
        raise NotPlain("a varint outside the file")
    last = len(buf) - 1
    length = np.ones(len(at), dtype=np.int64)
    more = buf[at] >= 0x80
    for k in range(1, 9):
        if not more.any():
            break
        length += more
        if k < 8:
            more &= buf[np.minimum(at + k, last)] >= 0x80
    return length


#: bytes of the integer serial types 0..9 (0: NULL, 1-6: integers, 7: a float, 8 and 9: the constants 0 and 1)
_SIZES = np.array([0, 1, 2, 3, 4, 6, 8, 8, 0, 0], dtype=np.int64)
#: kind of serial types 0..12 (12 stands for every larger one)
_KIND_13 = np.array([NULL, *[INTEGER] * 6, REAL, INTEGER, INTEGER, TEXT, TEXT, TEXT], dtype=np.uint8)
#: bytes of serial types 0..127 (-1: reserved)
_SIZE_128 = np.array([*_SIZES, -1, -1, *((t - 12) // 2 for t in range(12, 128))], dtype=np.int64)


def _serial_size(stype: np.ndarray, usable: int) -> np.ndarray:
    """Bytes of each cell's body from its serial type (10 and 11 are reserved: not plain)."""
    if ((stype == 10) | (stype == 11) | (stype < 0) | (stype > 2 * usable + 13)).any():
        raise NotPlain("a reserved or impossible serial type")
    return np.where(stype >= 12, (stype - 12) // 2, _SIZES[np.minimum(stype, 9)])


def _values(buf: np.ndarray, at: np.ndarray, stype: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each cell as (int64 value, kind): two's-complement big-endian integers of 1-8 bytes and the
    constants 0 and 1; REAL, TEXT and BLOB cells get 0 and their kind. The integer cells lie inside
    their record (read_table checked each one's end)."""
    if len(stype) and stype.min() == stype.max():  # one serial type for the whole column (the usual case)
        st = int(stype[0])
        kind = np.full(len(stype), _KIND_13[min(st, 12)], dtype=np.uint8)
        if 1 <= st <= 6:
            return _integers(buf, at, st), kind
        return np.full(len(stype), 1 if st == 9 else 0, dtype=np.int64), kind
    small = np.minimum(stype, 12)
    kind = np.take(_KIND_13, small)
    value = (stype == 9).astype(np.int64)
    rows = np.flatnonzero((small >= 1) & (small <= 6))
    if not len(rows):
        return value, kind
    types = stype[rows]
    widths = np.flatnonzero(np.bincount(types, minlength=7)).tolist()
    for st in widths:  # one read per serial type present
        these = rows if len(widths) == 1 else rows[types == st]
        value[these] = _integers(buf, at[these], st)
    return value, kind


def _integers(buf: np.ndarray, pos: np.ndarray, stype: int) -> np.ndarray:
    """The big-endian two's-complement integers of serial type ``stype`` (1-6) at ``pos``."""
    width = int(_SIZES[stype])
    if width >= 4:  # eight bytes in one gather (unaligned int64 at every byte), shifted to the width
        near = np.minimum(pos, len(buf) - 8)
        raw = _int64_at(buf)[near].byteswap().astype(np.int64)  # big-endian, as a native int64
        return (raw << (8 * (pos - near))) >> (64 - 8 * width)
    raw = buf[pos].astype(np.int64)
    for k in range(1, width):
        raw = raw << 8 | buf[pos + k]
    top = 1 << (8 * width - 1)
    return np.where(raw >= top, raw - 2 * top, raw)
