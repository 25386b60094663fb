"""Property tests of the interval algebra against a brute-force model: sets of integer points."""

from __future__ import annotations

import numpy as np
import pytest
from ditpar.core.intervals import Intervals, difference, gaps, intersection, union, union_length
from hypothesis import given, settings
from hypothesis import strategies as st

LIMIT = 60
spans = st.lists(st.tuples(st.integers(-5, LIMIT), st.integers(0, 25)), max_size=12)


def build(pairs: list[tuple[int, int]]) -> Intervals:
    starts = np.array([s for s, _ in pairs], dtype=np.int64)
    return Intervals.from_spans(starts, starts + np.array([d for _, d in pairs], dtype=np.int64))


def points(pairs: list[tuple[int, int]]) -> set[int]:
    """Brute force: the integer points t with s <= t < s + d for some span."""
    return {t for s, d in pairs for t in range(s, s + d)}


def covered(iv: Intervals) -> set[int]:
    return {t for s, e in zip(iv.starts.tolist(), iv.ends.tolist(), strict=True) for t in range(s, e)}


def assert_normalised(iv: Intervals) -> None:
    assert iv.starts.dtype == np.int64 and iv.ends.dtype == np.int64
    assert (iv.ends > iv.starts).all()
    # sorted, disjoint and not touching: each start lies strictly after the previous end
    assert (iv.starts[1:] > iv.ends[:-1]).all()


@settings(max_examples=300, deadline=None)
@given(spans)
def test_union_covers_exactly_the_points(a):
    iv = build(a)
    assert_normalised(iv)
    assert covered(iv) == points(a)
    assert iv.total == len(points(a))


@settings(max_examples=300, deadline=None)
@given(spans, spans)
def test_intersection_difference_union(a, b):
    x, y = build(a), build(b)
    pa, pb = points(a), points(b)
    for result, expected in ((x & y, pa & pb), (x - y, pa - pb), (x | y, pa | pb),
                             (intersection(x, y), pa & pb), (difference(y, x), pb - pa)):
        assert_normalised(result)
        assert covered(result) == expected
        assert result.total == len(expected)


@settings(max_examples=300, deadline=None)
@given(spans, st.integers(-10, LIMIT), st.integers(0, 80))
def test_gaps_and_clip(a, lo, width):
    iv, hi = build(a), lo + width
    window = set(range(lo, hi))
    g = gaps(iv, lo, hi)
    assert_normalised(g)
    assert covered(g) == window - points(a)
    assert covered(iv.gaps(lo, hi)) == window - points(a)
    c = iv.clip(lo, hi)
    assert_normalised(c)
    assert covered(c) == window & points(a)


@settings(max_examples=200, deadline=None)
@given(spans)
def test_default_gaps_lie_between_first_start_and_last_end(a):
    iv = build(a)
    p = points(a)
    expected = set(range(min(p), max(p) + 1)) - p if p else set()
    assert covered(iv.gaps()) == expected


@settings(max_examples=300, deadline=None)
@given(spans, st.lists(st.tuples(st.integers(-10, LIMIT + 10), st.integers(0, 40)), max_size=10))
def test_overlap_with_each(a, queries):
    iv = build(a)
    s = np.array([q for q, _ in queries], dtype=np.int64)
    e = s + np.array([d for _, d in queries], dtype=np.int64)
    got = iv.overlap_with_each(s, e)
    expected = [len(points(a) & set(range(qs, qe))) for qs, qe in zip(s.tolist(), e.tolist(), strict=True)]
    assert got.tolist() == expected


@settings(max_examples=300, deadline=None)
@given(spans, st.lists(st.integers(-10, LIMIT + 30), max_size=20))
def test_covered_at(a, probe):
    iv = build(a)
    assert iv.covered_at(np.array(probe, dtype=np.int64)).tolist() == [t in points(a) for t in probe]


def test_touching_spans_merge_and_empty_spans_vanish():
    iv = Intervals.from_spans([0, 5, 9, 20], [5, 9, 9, 20])
    assert iv.starts.tolist() == [0] and iv.ends.tolist() == [9]


def test_exact_at_profiler_magnitudes():
    # 1.7e15 us in ns: float64 would lose these digits; int64 keeps them
    base = 1_736_408_883_704_643_212
    iv = Intervals.from_durations([base, base + 1], [3, 3])
    assert iv.total == 4
    with pytest.raises(TypeError):
        Intervals.from_spans(np.array([1.5]), np.array([2.5]))


@settings(max_examples=300, deadline=None)
@given(spans, spans)
def test_length_in_each_interval_of_another_set(a, b):
    x, y = build(a), build(b)
    want = [len(covered(x) & set(range(s, e))) for s, e in zip(y.starts.tolist(), y.ends.tolist(), strict=True)]
    got = x.length_in_each(y)
    assert got.dtype == np.int64 and got.tolist() == want
    assert got.tolist() == x.overlap_with_each(y.starts, y.ends).tolist()
    inside = x & y  # a subset of y: the path that skips the intersection
    assert inside.length_in_each(y).tolist() == want


def test_union_of_two_sets_is_the_union_of_their_spans():
    """a | b (merged by insertion, no sort) equals union() of all the spans, and covers exactly the
    points either covers: checked point by point on a small timeline, with touching and equal starts."""
    rng = np.random.default_rng(5)
    for _ in range(200):
        sets = []
        for _ in range(2):
            n = int(rng.integers(0, 6))
            s = rng.integers(0, 40, n)
            sets.append(union(s, s + rng.integers(0, 6, n)))
        a, b = sets
        got = a | b
        both = union(np.concatenate([a.starts, b.starts]), np.concatenate([a.ends, b.ends]))
        assert np.array_equal(got.starts, both.starts) and np.array_equal(got.ends, both.ends)
        points = np.arange(-1, 50)
        covered = a.covered_at(points) | b.covered_at(points)
        assert np.array_equal(got.covered_at(points), covered)
        assert (got.starts[1:] > got.ends[:-1]).all()  # normalised: touching spans merged


def test_union_length_is_the_total_of_the_union():
    """The sweep's length equals the union's total (unsorted spans, empty and reversed ones, touching ones)."""
    rng = np.random.default_rng(9)
    for _ in range(300):
        n = int(rng.integers(0, 8))
        s = rng.integers(0, 30, n)
        e = s + rng.integers(-3, 8, n)
        assert union_length(s, e) == union(s, e).total
    none = np.zeros(0, dtype=np.int64)
    assert union_length([0, 5, 5], [5, 9, 5]) == 9 and union_length(none, none) == 0
