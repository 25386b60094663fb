"""bubbles.py with each rank's gaps found where it is read equals the whole-set analysis (issue 25)."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from conftest import ROOT, need_shared, run_script
from ditpar.analysis.bubbles import analyse
from ditpar.analysis.bubbles_ranks import RankGaps, analyse_ranks
from ditpar.readers import load_profiles

SHIPPED = ROOT / "tests" / "data" / "ascend_cann83"


def _same(a, b) -> None:
    assert (a.tolerance_ns, a.tolerance, a.tolerance_sweep, a.families) == (
        b.tolerance_ns, b.tolerance, b.tolerance_sweep, b.families)
    assert a.totals() == b.totals()
    pd.testing.assert_frame_equal(a.by_family(), b.by_family())
    for x, y in zip(a.ranks, b.ranks, strict=True):
        assert (x.rank, x.stream, x.totals) == (y.rank, y.stream, y.totals)
        pd.testing.assert_frame_equal(x.gaps, y.gaps)
    if a.lags is not None:
        pd.testing.assert_frame_equal(a.lags, b.lags)
        assert a.lag_summary == b.lag_summary


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("kw", [{}, {"families": ["allreduce"]}, {"consumer": "MatMul"},
                                {"families": ["send"], "consumer": "Add"}])
def test_per_rank_equals_whole_set_on_shipped_ranks(kw, workers):
    whole = analyse(load_profiles(SHIPPED, workers=1), **kw)
    maker = RankGaps(kw.get("families"), None, kw.get("consumer"))
    _same(whole, analyse_ranks(load_profiles(SHIPPED, workers=workers, per_rank=maker), maker))


@pytest.mark.parametrize("name", ["ascend/msinsight-text-level1", "ascend/msinsight-db-level1",
                                  "kineto/hta-timeline-sampled_rank-0.json.gz"])
def test_per_rank_equals_whole_set_on_real_captures(name):
    path = need_shared("fixtures", *name.split("/"))
    maker = RankGaps(None, None, None)
    _same(analyse(load_profiles(path, workers=1), tolerance_us=5.0),
          analyse_ranks(load_profiles(path, workers=2, per_rank=maker), maker, 5.0))
    _same(analyse(load_profiles(path, workers=1)), analyse_ranks(load_profiles(path, workers=1, per_rank=maker),
                                                                  maker))


def test_script_answers_the_same_with_and_without_a_rank_choice():
    """--rank takes the one-table path; all ranks by default the per-rank path: the same figures."""
    per_rank = json.loads(run_script("bubbles.py", str(SHIPPED), "--json", check=0).stdout)
    chosen = json.loads(run_script("bubbles.py", str(SHIPPED), "--rank", "0", "--rank", "2", "--json", check=0).stdout)
    assert per_rank["ranks"] == chosen["ranks"] and per_rank["tolerance_us"] == chosen["tolerance_us"]


def test_consumer_matching_nothing_lists_the_common_kernels():
    maker = RankGaps(None, None, "NoSuchKernel")
    with pytest.raises(Exception, match=r"--consumer 'NoSuchKernel': matches no compute kernel; most common"):
        analyse_ranks(load_profiles(SHIPPED, workers=1, per_rank=maker), maker)
