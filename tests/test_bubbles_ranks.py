"""bubbles.py with each rank's gaps found where it is read equals the whole-set analysis (issue 25)."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from conftest import ROOT, need_shared, run_script
from ditpar.analysis.bubbles import analyse
from ditpar.analysis.bubbles_ranks import RankGaps, analyse_ranks
from ditpar.core.profile import ProfileSet, function_name
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


# --- the summary path (keep_gaps=False): only GapSummary travels, the figures stay the same -------------

def _same_figures(a, b) -> None:
    """Every figure of the report but the gap table (which the summary path does not carry)."""
    assert (a.tolerance_ns, a.tolerance, a.tolerance_sweep, a.families) == (
        b.tolerance_ns, b.tolerance, b.tolerance_sweep, b.families)
    assert a.totals() == b.totals()
    pd.testing.assert_frame_equal(a.by_family(), b.by_family())
    for x, y in zip(a.ranks, b.ranks, strict=True):
        assert (x.rank, x.stream, x.totals, x.gap_count, len(x.windows)) == (
            y.rank, y.stream, y.totals, y.gap_count, len(y.windows))
        assert list(x.totals) == list(y.totals)  # the same key order: the JSON is the same
        pd.testing.assert_frame_equal(x.by_family, y.by_family)
    assert a.lag_summary == b.lag_summary


def _summary_report(ps, tolerance_us=None, **kw):
    maker = RankGaps(kw.get("families"), None, kw.get("consumer"), keep_gaps=False)
    ps.rank_results = {0: maker(ps)}
    ps.rank_results_of = function_name(maker)
    return analyse_ranks(ps, maker, tolerance_us)


def test_summary_on_the_hand_example_at_two_tolerances():
    """bubbles.HAND by hand: at 20 ns gaps 1 and 2 are released (90 ns); at 0 ns none is."""
    from attribution_synth import events
    from test_bubbles import HAND

    def ps():
        return ProfileSet(events=events(HAND), steps=ProfileSet(events=events(HAND)).steps)

    t = _summary_report(ps(), 0.02).ranks[0].totals
    assert (t["released_ns"], t["running_ns"], t["other_ns"], t["idle_ns"]) == (90, 40, 30, 90)
    # nothing released: gap 1 running 40 (a2a [100,140)), idle 10; gap 2 running 40 + 35, idle 25;
    # gap 3 other 30 (side compute 20 + memcpy 10), idle 70
    rep = _summary_report(ps(), 0.0)
    t = rep.ranks[0].totals
    assert (t["gaps_total_ns"], t["released_ns"], t["running_ns"], t["other_ns"], t["idle_ns"]) == (
        250, 0, 115, 30, 105)
    assert rep.ranks[0].gaps is None and rep.ranks[0].gap_count == 3
    fam = rep.by_family().set_index("family")
    assert fam.loc["alltoall", "exposed_ns"] == 80 and fam.loc["alltoall", "releases"] == 0
    fam = _summary_report(ps(), 0.02).by_family().set_index("family")
    assert (fam.loc["alltoall", "releases"], fam.loc["alltoall", "released_ns"]) == (1, 50)
    assert (fam.loc["allgather", "releases"], fam.loc["allgather", "released_ns"]) == (1, 40)


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("kw", [{}, {"families": ["allreduce"]}, {"consumer": "MatMul"},
                                {"families": ["send"], "consumer": "Add"}])
def test_summary_equals_whole_set_on_shipped_ranks(kw, workers):
    maker = RankGaps(kw.get("families"), None, kw.get("consumer"), keep_gaps=False)
    for tol in (None, 0.0, 5.0, 1e6):  # the chosen one, none released, some, every candidate released
        whole = analyse(load_profiles(SHIPPED, workers=1), tolerance_us=tol, **kw)
        _same_figures(whole, analyse_ranks(load_profiles(SHIPPED, workers=workers, per_rank=maker), maker, tol))


@pytest.mark.parametrize("name", ["ascend/msinsight-text-level1", "ascend/msinsight-db-level1",
                                  "kineto/hta-timeline-sampled_rank-0.json.gz"])
def test_summary_equals_whole_set_on_real_captures(name):
    path = need_shared("fixtures", *name.split("/"))
    maker = RankGaps(None, None, None, keep_gaps=False)
    for tol in (None, 5.0):
        _same_figures(analyse(load_profiles(path, workers=1), tolerance_us=tol),
                      analyse_ranks(load_profiles(path, workers=2, per_rank=maker), maker, tol))


def test_script_json_is_the_same_with_and_without_the_gap_table(tmp_path):
    """--csv carries every gap (keep_gaps); without it only summaries travel: one JSON answer."""
    plain = json.loads(run_script("bubbles.py", str(SHIPPED), "--json", check=0).stdout)
    with_csv = json.loads(run_script("bubbles.py", str(SHIPPED), "--json", "--csv", str(tmp_path / "g.csv"),
                                     check=0).stdout)
    assert plain == with_csv
    rows = pd.read_csv(tmp_path / "g.csv")
    assert [len(rows[rows["rank"] == r["rank"]]) for r in plain["ranks"]] == [r["gaps"] for r in plain["ranks"]]


def test_summary_counts_a_familyless_collective_as_the_gap_table_does():
    """A comm row without a family (not from the shipped readers, but the table allows it): its
    'releases' count, like the gap table's, includes the unreleased gaps (release_family "")."""
    from attribution_synth import events
    from test_bubbles import HAND

    rows = [r if r[2] != "ag" else (*r[:3], "", *r[4:]) for r in HAND]
    for tol in (0.0, 0.02):
        whole = bubbles_analyse(rows, tol)
        summary = _summary_report(ProfileSet(events=events(rows), steps=ProfileSet(events=events(rows)).steps), tol)
        _same_figures(whole, summary)
    assert whole.by_family().set_index("family").loc["", "releases"] == 2  # gap 2 released, gap 3 unreleased


def bubbles_analyse(rows, tol_us):
    from attribution_synth import events

    return analyse(ProfileSet(events=events(rows), steps=ProfileSet(events=events(rows)).steps), tolerance_us=tol_us)
