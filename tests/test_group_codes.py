"""The lean groupings the per-rank analyses use on 1M-row tables, against pandas' own answers."""

from __future__ import annotations

import numpy as np
import pandas as pd
from ditpar.analysis.collectives import group_positions
from ditpar.core.events import few_codes, kind_counts


def test_group_positions_is_groupby_indices_with_missing_keys_dropped():
    rng = np.random.default_rng(1)
    for _ in range(80):
        n = int(rng.integers(0, 60))
        df = pd.DataFrame({"rank": rng.integers(0, 3, n),
                           "stream": pd.Series(rng.choice(["1", "2", "comm:x", None], n), dtype=object),
                           "core": rng.choice(["AI_CORE", "MIX"], n), "kind": rng.choice(["compute", "comm"], n)})
        cols = ["rank", "stream", "core", "kind"]
        want = df.groupby(cols, sort=False).indices if n else {}
        got = dict(group_positions(df, cols))
        assert set(got) == set(want)
        for key, rows in want.items():
            assert np.array_equal(got[key], rows)


def test_few_codes_and_kind_counts_by_hand():
    values = np.array(["b", None, "a", "b", float("nan"), "b"], dtype=object)
    codes, distinct = few_codes(values)
    assert distinct == ["a", "b"] and codes.tolist() == [1, -1, 0, 1, -1, 1]
    codes, distinct = few_codes(values, keep_missing=True)
    assert distinct == ["a", "b", None] and codes.tolist() == [1, 2, 0, 1, 2, 1]
    events = pd.DataFrame({"kind": ["comm", "compute", "compute", "other", "compute"]})
    assert list(kind_counts(events).items()) == [("compute", 3), ("comm", 1), ("other", 1)]
    assert kind_counts(events) == events["kind"].value_counts().to_dict()


def test_few_codes_by_identity_agrees_with_values():
    """A reader's column repeats a few string objects (grouped by identity); equal strings that are different
    objects, missing values and a column of other types must give the codes a comparison by value gives."""
    from ditpar.core.events import identity_groups

    rng = np.random.default_rng(3)
    texts = np.array(["comm", "compute", "other", None], dtype=object)
    values = texts[rng.integers(0, 4, 50_000)]
    values[::7] = "".join(["co", "mm"])  # equal to "comm", another object
    values[::11] = float("nan")
    groups, where = identity_groups(values)  # comm twice, compute, other, None, NaN
    assert len(where) == 6 and np.array_equal(values[where][groups[::13]].astype(str), values[::13].astype(str))
    for keep in (False, True):
        codes, distinct = few_codes(values, keep_missing=keep)
        want_codes, want = pd.factorize(pd.Series(values), sort=True, use_na_sentinel=True)
        assert distinct[:3] == list(want) == ["comm", "compute", "other"]
        missing = pd.isna(values)
        assert np.array_equal(codes[~missing], want_codes[~missing])
        assert set(codes[missing].tolist()) == ({3} if keep else {-1}) and (distinct[3:] == [None]) == keep
    # 1 == 1.0 == True: a column of other types is compared by value, as before
    mixed = np.array([1, 1.0, True, "a"] * 10, dtype=object)
    assert few_codes(mixed)[0].tolist() == [0, 0, 0, 1] * 10
    # more distinct objects than the identity table holds without a clash: None (few_codes then compares)
    assert identity_groups(np.array([str(i) for i in range(200_000)], dtype=object)) is None


def test_kind_counts_with_masks_is_the_same():
    from ditpar.core.events import kind_masks

    kinds = np.array(["compute", "comm", "other", "compute", "weird", "comm", "compute", None, "other"], dtype=object)
    events = pd.DataFrame({"kind": pd.Series(kinds, dtype=object)})
    want = {"compute": 3, "comm": 2, "other": 2, "weird": 1}
    assert kind_counts(events) == want == kind_counts(events, kind_masks(events))
    assert list(kind_counts(events, kind_masks(events))) == list(want)  # most rows first, ties by name
    only = pd.DataFrame({"kind": pd.Series(["compute"] * 4, dtype=object)})
    assert kind_counts(only, kind_masks(only)) == {"compute": 4}
