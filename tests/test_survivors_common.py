"""The readers' shared guards (readers/common.py), each value worked out by hand."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from ditpar.errors import InputError
from ditpar.readers import common

LIMIT = 2**62  # 146 years in ns: the bound the readers promise


def test_hashable_keeps_scalars_and_writes_the_rest_as_text():
    assert common.hashable(None) is None
    assert common.hashable("a") == "a"
    three = common.hashable(3)
    assert three == 3 and type(three) is int
    assert common.hashable(1.5) == 1.5
    assert common.hashable([1, 2]) == "[1, 2]"
    assert common.hashable({"a": 1}) == "{'a': 1}"


def test_as_int_takes_integers_only():
    assert common.as_int(5) == 5 and common.as_int(0) == 0 and common.as_int(-3) == -3
    for value in (True, False, 1.0, "5", None, [1]):
        assert common.as_int(value) is None


def test_check_times_accepts_up_to_just_below_the_limit():
    common.check_times(np.array([0, LIMIT - 1, -(LIMIT - 1)], dtype=np.int64),
                       np.array([0, 5, LIMIT - 1], dtype=np.int64), "w")
    common.check_times(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), "w")


@pytest.mark.parametrize("start, message", [
    ([0, 5, LIMIT], f"w: entry 2: start {LIMIT} ns is out of range (over 2**62 ns)"),
    ([3, -LIMIT, 7], f"w: entry 1: start {-LIMIT} ns is out of range (over 2**62 ns)"),
])
def test_check_times_names_the_stamp_out_of_range(start, message):
    with pytest.raises(InputError) as err:
        common.check_times(np.array(start, dtype=np.int64), np.zeros(0, dtype=np.int64), "w")
    assert str(err.value) == message


@pytest.mark.parametrize("dur, message", [
    ([3, -1, 2], "w: entry 1: duration -1 ns is negative or out of range"),
    ([5, LIMIT, 0], f"w: entry 1: duration {LIMIT} ns is negative or out of range"),
    ([5, LIMIT, -2], "w: entry 2: duration -2 ns is negative or out of range"),
])
def test_check_times_names_the_bad_duration(dur, message):
    with pytest.raises(InputError) as err:
        common.check_times(np.array([1], dtype=np.int64), np.array(dur, dtype=np.int64), "w")
    assert str(err.value) == message


def test_byte_counts():
    out = common.byte_counts(np.array([1.4, 2.6, 0.0, np.nan, np.inf, -1.0, float(LIMIT), float(LIMIT - 1024)]))
    assert str(out.dtype) == "Int64" and out.index.tolist() == list(range(8))
    assert [None if pd.isna(x) else int(x) for x in out] == [1, 3, 0, None, None, None, None, LIMIT - 1024]
    allgood = common.byte_counts(np.array([4.0, 8.0]))
    assert allgood.tolist() == [4, 8]
    assert common.byte_counts(np.array([np.nan])).isna().all()


def test_factorize_keeps_missing_values_as_a_value():
    codes, uniques = common.factorize(pd.Series(["b", "a", "b", None], index=[5, 6, 7, 8]))
    assert codes.tolist() == [0, 1, 0, 2]
    assert uniques[:2] == ["b", "a"] and pd.isna(uniques[2]) and len(uniques) == 3


@pytest.mark.parametrize("value, text", [(None, ""), (float("nan"), ""), (pd.NA, ""), (" x ", "x"), (3, "3"),
                                         (1.5, "1.5"), ("nan", "nan"), (0.0, "0.0")])
def test_text_of(value, text):
    assert common.text_of(value) == text


def test_require_durations():
    common.require_durations(np.array([0, 1], dtype=np.int64), "w")
    common.require_durations(np.zeros(0, dtype=np.int64), "w")
    with pytest.raises(InputError) as err:
        common.require_durations(np.array([0, 0], dtype=np.int64), "w")
    assert str(err.value) == ("w: all 2 kernel durations are 0; expected a profile with timed kernels (a capture "
                              "that recorded no durations measures nothing)")


def _keys(col):
    col = np.asarray(col, dtype=object)
    return lambda rows: {"k": col[rows]}


@pytest.mark.parametrize("start, key, dup", [
    ([5, 5], ["a", "a"], [False, True]),                    # two rows: the second is the copy
    ([5, 5], ["a", "b"], None),                             # same start, another key: two kernels
    ([1, 2, 3, 3], list("abcc"), [False, False, False, True]),
    ([1, 2, 3, 3], list("abcd"), None),
    ([10, 20, 10, 30, 20, 10], list("xyxzyw"), [False, False, True, False, True, False]),
    ([3, 1, 2], list("abc"), None),                         # unsorted, no repeat
    ([1, 2, 3], list("aaa"), None),
    ([7], ["a"], None),
    ([], [], None),
])
def test_duplicate_mask(start, key, dup):
    got = common.duplicate_mask(np.array(start, dtype=np.int64), _keys(key))
    assert (None if got is None else got.tolist()) == dup


def test_duplicate_mask_compares_only_repeated_stamps():
    seen = []

    def keys(rows):
        seen.append(rows.tolist())
        return {"k": np.array(["a"] * rows.size, dtype=object)}
    got = common.duplicate_mask(np.array([4, 9, 4, 6, 9, 2], dtype=np.int64), keys)
    assert got.tolist() == [False, False, True, False, True, False]
    assert seen == [[0, 1, 2, 4]]


def test_warn_duplicates(capsys, monkeypatch):
    monkeypatch.setattr("sys.argv", ["/x/collectives.py"])
    common.warn_duplicates("run/p.json", 3, "kernel 'a' at ts 10 us")
    assert capsys.readouterr().err == ("collectives.py: warning: run/p.json: 3 duplicate row(s), identical in every "
                                       "column read (first at kernel 'a' at ts 10 us); each kernel counted once\n")
