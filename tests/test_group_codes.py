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
