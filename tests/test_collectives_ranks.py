"""collectives.py computed rank by rank in the readers equals the whole-set analysis (issue 25)."""

from __future__ import annotations

import pandas as pd
import pytest
from conftest import ROOT, need_shared
from ditpar.analysis.collectives import analyse
from ditpar.analysis.collectives_ranks import RankCollectives, analyse_ranks
from ditpar.readers import load_profiles

SHIPPED = ROOT / "tests" / "data" / "ascend_cann83"


def _same(a, b) -> None:
    for name in ("table", "ranks", "streams", "overlap", "skew", "links"):
        x, y = getattr(a, name), getattr(b, name)
        pd.testing.assert_frame_equal(x.reset_index(drop=True), y[x.columns].reset_index(drop=True),
                                      check_dtype=False, obj=name)
    if a.layers is not None:
        pd.testing.assert_frame_equal(a.layers.reset_index(drop=True), b.layers.reset_index(drop=True),
                                      check_dtype=False)
    assert (a.checks, a.slowest_rank, a.slowest_by, a.not_dit) == (b.checks, b.slowest_rank, b.slowest_by, b.not_dit)


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("kw", [{}, {"layers": 2, "steps": 1}, {"layers": 3}, {"families": ["allreduce"]}])
def test_per_rank_equals_whole_set_on_shipped_ranks(kw, workers):
    whole = analyse(load_profiles(SHIPPED, workers=1), **kw)
    maker = RankCollectives(kw.get("families"), kw.get("layers"), kw.get("steps"))
    _same(whole, analyse_ranks(load_profiles(SHIPPED, workers=workers, per_rank=maker), maker))


@pytest.mark.parametrize("name", ["ascend/msinsight-text-level1", "ascend/msinsight-db-level1",
                                  "kineto/hta-timeline-sampled_rank-0.json.gz"])
def test_per_rank_equals_whole_set_on_real_captures(name):
    path = need_shared("fixtures", *name.split("/"))
    maker = RankCollectives(None, 2, None)
    _same(analyse(load_profiles(path, workers=1), layers=2),
          analyse_ranks(load_profiles(path, workers=2, per_rank=maker), maker))


def test_a_family_no_rank_has_is_an_error_listing_the_present():
    maker = RankCollectives(["alltoall"])
    with pytest.raises(Exception, match=r"--family alltoall: matches no collective; families present"):
        analyse_ranks(load_profiles(SHIPPED, workers=1, per_rank=maker), maker)
