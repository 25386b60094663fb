"""core/intervals.py on empty, reversed and touching spans (issue 29): clip and gaps with hi <= lo never
give a negative length. Expected values are worked out by hand
in the comments."""

from __future__ import annotations

import numpy as np
import pytest
from ditpar.core.intervals import Intervals, gaps, union


def test_clip_with_hi_at_or_below_lo_is_empty():
    iv = Intervals.from_spans([0, 20], [10, 30])
    for lo, hi in ((15, 5), (5, 5), (25, 0)):
        out = iv.clip(lo, hi)
        assert len(out) == 0 and out.total == 0       # never a negative length
    assert iv.clip(5, 6).total == 1                   # one ns inside [0, 10)
    assert iv.clip(5, 25).total == 5 + 5              # [5, 10) and [20, 25)


def test_reversed_and_empty_spans_are_dropped():
    iv = union([10, 30, 5], [0, 40, 5])               # [10, 0) reversed, [5, 5) empty
    assert (iv.starts.tolist(), iv.ends.tolist(), iv.total) == ([30], [40], 10)
    assert union([10], [0]).total == 0 and len(union([3], [3])) == 0
    with pytest.raises(ValueError, match="differ in length"):
        union([1, 2], [3])
    with pytest.raises(TypeError, match="integers"):
        union(np.array([1.5]), np.array([2.5]))


def test_union_merges_touching_but_not_separated_spans():
    iv = union([20, 0, 10], [30, 10, 15])             # [0,10) touches [10,15); [20,30) stands apart
    assert iv.starts.tolist() == [0, 20] and iv.ends.tolist() == [15, 30]
    iv = union([0, 11], [10, 12])                     # one ns apart: two intervals
    assert len(iv) == 2


def test_gaps_on_reversed_window_and_defaults():
    iv = Intervals.from_spans([10, 30], [20, 40])
    assert gaps(iv, 50, 0).total == 0
    g = iv.gaps()                                     # between first start and last end: [20, 30)
    assert (g.starts.tolist(), g.ends.tolist()) == ([20], [30])
    g = iv.gaps(0, 50)                                # [0,10) [20,30) [40,50)
    assert g.starts.tolist() == [0, 20, 40] and g.ends.tolist() == [10, 30, 50]
    g = iv.gaps(15, 35)                               # clipped: [20, 30) only
    assert (g.starts.tolist(), g.ends.tolist()) == ([20], [30])
    assert Intervals.empty().gaps().total == 0
    assert Intervals.empty().gaps(5, 9).total == 4    # nothing covered: the whole window


def test_covered_at_half_open_edges():
    iv = Intervals.from_spans([10], [20])
    assert iv.covered_at([9, 10, 19, 20]).tolist() == [False, True, True, False]


def test_overlap_and_length_in_each_by_hand():
    iv = Intervals.from_spans([10, 30], [20, 40])
    # [0, 15): 5; [15, 35): 5 + 5; [40, 50): 0; [0, 5): 0 (before every interval)
    assert iv.overlap_with_each([0, 15, 40, 0], [15, 35, 50, 5]).tolist() == [5, 10, 0, 0]
    other = Intervals.from_spans([0, 15, 38], [12, 32, 60])
    assert iv.length_in_each(other).tolist() == [2, 7, 2]
    assert iv.length_in_each(Intervals.empty()).tolist() == []
    assert Intervals.empty().length_in_each(other).tolist() == [0, 0, 0]


def test_difference_and_intersection_by_hand():
    a = Intervals.from_spans([0, 20], [10, 30])
    b = Intervals.from_spans([5, 25], [22, 27])
    d = a - b                                          # [0,10) - [5,22) = [0,5); [20,30) - both = [22,25) [27,30)
    assert d.starts.tolist() == [0, 22, 27] and d.ends.tolist() == [5, 25, 30]
    i = a & b                                          # [5,10) [20,22) [25,27)
    assert i.starts.tolist() == [5, 20, 25] and i.ends.tolist() == [10, 22, 27]
    assert (a - Intervals.empty()).total == 20 and (Intervals.empty() & a).total == 0
    assert Intervals.from_durations([0, 5], [3, 3]).total == 6     # [0,3) [5,8): 3 + 3


def test_length_in_each_ignores_what_lies_before_the_first_interval():
    # [0, 5) lies before other's only interval [10, 20): nothing of it is inside; [12, 14) gives 2
    assert Intervals.from_spans([0], [5]).length_in_each(Intervals.from_spans([10], [20])).tolist() == [0]
    assert Intervals.from_spans([0, 12], [5, 14]).length_in_each(Intervals.from_spans([10], [20])).tolist() == [2]


def test_intervals_are_immutable_values():
    import dataclasses

    iv = Intervals.from_spans([0], [5])
    with pytest.raises(dataclasses.FrozenInstanceError):
        iv.starts = np.array([1])
