"""Exact interval algebra on int64 nanosecond arrays: union, intersection, difference, gaps.

An :class:`Intervals` value is a normalised set: sorted, disjoint, non-touching half-open
intervals [start, end) with end > start. Every operation is vectorised with numpy and exact
on integers, so lengths add up to the nanosecond.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

_I64 = np.int64


def _as_i64(values) -> np.ndarray:
    arr = np.asarray(values)
    if arr.dtype.kind == "f":
        raise TypeError("interval bounds must be integers (ns); floats lose digits at 1.7e15 us")
    return arr.astype(_I64, copy=False).ravel()


@dataclass(frozen=True)
class Intervals:
    """A normalised set of half-open integer intervals."""

    starts: np.ndarray
    ends: np.ndarray

    @classmethod
    def empty(cls) -> Intervals:
        z = np.zeros(0, dtype=_I64)
        return cls(z, z.copy())

    @classmethod
    def from_spans(cls, starts, ends) -> Intervals:
        """Union of arbitrary spans (unsorted, overlapping, empty ones dropped)."""
        return union(starts, ends)

    @classmethod
    def from_durations(cls, starts, durations) -> Intervals:
        s = _as_i64(starts)
        return union(s, s + _as_i64(durations))

    def __len__(self) -> int:
        return int(self.starts.size)

    @property
    def total(self) -> int:
        """Total covered length."""
        return int((self.ends - self.starts).sum())

    def __or__(self, other: Intervals) -> Intervals:
        # both sets are sorted: the smaller one's intervals are inserted into the larger's order (no sort
        # of the whole, and no copy beyond the merged arrays: 1M-interval sets meet in per-rank analyses)
        big, small = (self, other) if len(self) >= len(other) else (other, self)
        if not len(small):
            return big
        at = np.searchsorted(big.starts, small.starts, side="right")
        return _merge_sorted(np.insert(big.starts, at, small.starts), np.insert(big.ends, at, small.ends), own=True)

    def __and__(self, other: Intervals) -> Intervals:
        return intersection(self, other)

    def __sub__(self, other: Intervals) -> Intervals:
        return difference(self, other)

    def clip(self, lo: int, hi: int) -> Intervals:
        """The part of the set inside [lo, hi)."""
        if hi <= lo:
            return Intervals.empty()
        return intersection(self, Intervals(np.array([lo], _I64), np.array([hi], _I64)))

    def gaps(self, lo: int | None = None, hi: int | None = None) -> Intervals:
        """Complement inside [lo, hi); by default between the first start and the last end."""
        if lo is None:
            lo = int(self.starts[0]) if len(self) else 0
        if hi is None:
            hi = int(self.ends[-1]) if len(self) else lo
        return gaps(self, lo, hi)

    def covered_at(self, points) -> np.ndarray:
        """Boolean mask: which points lie inside the set."""
        p = _as_i64(points)
        idx = np.searchsorted(self.starts, p, side="right") - 1
        ok = idx >= 0
        out = np.zeros(p.shape, dtype=bool)
        out[ok] = p[ok] < self.ends[idx[ok]]
        return out

    def length_in_each(self, other: Intervals) -> np.ndarray:
        """Covered length of this set inside each interval of ``other`` (itself a normalised set).

        Each piece of the intersection lies in exactly one interval of ``other``: one search per piece
        and a sum per run (exact int64), against two searches per query in overlap_with_each.
        """
        out = np.zeros(len(other), dtype=_I64)
        if not len(self) or not len(other):
            return out
        owner = np.searchsorted(other.starts, self.starts, side="right") - 1
        if bool(((owner >= 0) & (self.ends <= other.ends[np.maximum(owner, 0)])).all()):
            pieces = self  # already inside ``other`` (e.g. a class of gaps against the gaps)
        else:
            pieces = intersection(self, other)
            if not len(pieces):
                return out
            owner = np.searchsorted(other.starts, pieces.starts, side="right") - 1
        first = np.flatnonzero(np.concatenate([[True], owner[1:] != owner[:-1]]))
        out[owner[first]] = np.add.reduceat(pieces.ends - pieces.starts, first)
        return out

    def overlap_with_each(self, starts, ends) -> np.ndarray:
        """Length of the intersection of this set with each span [starts[i], ends[i])."""
        s, e = _as_i64(starts), _as_i64(ends)
        prefix = np.concatenate([[0], np.cumsum(self.ends - self.starts)])
        return _covered_before(self, prefix, e) - _covered_before(self, prefix, s)


def _covered_before(iv: Intervals, prefix: np.ndarray, points: np.ndarray) -> np.ndarray:
    """Covered length of the set in (-inf, point) for each point."""
    k = np.searchsorted(iv.starts, points, side="right")  # intervals starting at or before point
    full = prefix[np.maximum(k - 1, 0)]
    last = k - 1
    partial = np.zeros(points.shape, dtype=_I64)
    ok = last >= 0
    partial[ok] = np.minimum(points[ok], iv.ends[last[ok]]) - iv.starts[last[ok]]
    return np.where(ok, full + partial, 0)


def union(starts, ends) -> Intervals:
    """Merge arbitrary spans into a normalised set; touching spans merge, empty spans vanish."""
    s, e = _as_i64(starts), _as_i64(ends)
    if s.shape != e.shape:
        raise ValueError("starts and ends differ in length")
    keep = e > s
    if not bool(keep.all()):  # copies only when an empty span is dropped
        s, e = s[keep], e[keep]
    del keep
    if s.size == 0:
        return Intervals.empty()
    if not bool((s[1:] >= s[:-1]).all()):  # the order among equal starts does not matter
        order = np.argsort(s, kind="stable")
        s, e = s[order], e[order]
    return _merge_sorted(s, e)


def union_length(starts, ends) -> int:
    """Length of the union of spans, without building the set: a sweep over the spans in start order, each
    adding what it reaches past the furthest end before it (empty spans add nothing)."""
    s, e = _as_i64(starts), _as_i64(ends)
    if s.shape != e.shape:
        raise ValueError("starts and ends differ in length")
    if s.size == 0:
        return 0
    if not bool((s[1:] >= s[:-1]).all()):
        order = np.argsort(s, kind="stable")
        s, e = s[order], e[order]
    reach = np.maximum.accumulate(e)
    floor = np.empty_like(s)
    floor[0] = s[0]
    np.maximum(s[1:], reach[:-1], out=floor[1:])
    del reach
    np.subtract(e, floor, out=floor)
    np.maximum(floor, 0, out=floor)
    return int(floor.sum())


def _merge_sorted(s: np.ndarray, e: np.ndarray, own: bool = False) -> Intervals:
    """Merge non-empty spans sorted by start into a normalised set (touching spans merge); ``own``: ``e``
    is a scratch copy that may be overwritten (one 1M-span temporary less)."""
    run_end = np.maximum.accumulate(e, out=e if own else None)
    new = np.empty(s.size, dtype=bool)
    new[0] = True
    np.greater(s[1:], run_end[:-1], out=new[1:])
    first = np.flatnonzero(new)
    del new
    last = np.empty_like(first)
    np.subtract(first[1:], 1, out=last[:-1])
    last[-1] = s.size - 1
    return Intervals(s[first], run_end[last])


def _overlaps(a: Intervals, b: Intervals) -> Intervals:
    """a & b of two normalised sets: each interval of ``a`` cut by the intervals of ``b`` it meets.

    The pieces come out in order, non-empty, and never touch (two pieces are separated by a gap of
    ``a`` or of ``b``, both normalised), so the result needs no merge: two binary searches and a
    linear expansion.
    """
    lo = np.searchsorted(b.ends, a.starts, side="right")  # first b ending after each a starts
    hi = np.searchsorted(b.starts, a.ends, side="left")  # first b starting at or after each a ends
    counts = np.maximum(hi - lo, 0)
    total = int(counts.sum())
    if total == 0:
        return Intervals.empty()
    owner = np.repeat(np.arange(len(a)), counts)  # the a interval of each piece
    j = np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts) + lo[owner]  # its b interval
    return Intervals(np.maximum(a.starts[owner], b.starts[j]), np.minimum(a.ends[owner], b.ends[j]))


def intersection(a: Intervals, b: Intervals) -> Intervals:
    """Points in both sets."""
    if not len(a) or not len(b):
        return Intervals.empty()
    return _overlaps(a, b) if len(a) <= len(b) else _overlaps(b, a)


def difference(a: Intervals, b: Intervals) -> Intervals:
    """Points in a and not in b: a cut by the gaps of b over a's extent."""
    if not len(a) or not len(b):
        return a
    return _overlaps(a, gaps(b, int(a.starts[0]), int(a.ends[-1])))


def gaps(iv: Intervals, lo: int, hi: int) -> Intervals:
    """Complement of the set inside [lo, hi): the spaces between its intervals, clipped (linear time)."""
    if hi <= lo:
        return Intervals.empty()
    first = int(np.searchsorted(iv.ends, lo, side="right"))  # intervals ending after lo
    last = int(np.searchsorted(iv.starts, hi, side="left"))  # ... and starting before hi
    s, e = iv.starts[first:last], iv.ends[first:last]
    g_start = np.concatenate([np.array([lo], _I64), e])
    g_end = np.concatenate([s, np.array([hi], _I64)])
    g_start = np.maximum(g_start, lo)
    g_end = np.minimum(g_end, hi)
    keep = g_end > g_start
    return Intervals(g_start[keep], g_end[keep])
