"""Tests that kill the mutants the core's tests let through (issue 29): masking bound edge cases,
interval algebra on empty and reversed spans, timeparse's chunked fast path, step breakdown windows.
Each expected value is worked out by hand in the comment beside it."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from ditpar.core.intervals import Intervals, gaps, union
from ditpar.errors import InputError
from ditpar.masking import bound

# ---------------------------------------------------------------- masking/bound.py


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan, "x", None, 2.5, 0, -3])
def test_check_chunks_rejects_every_non_count_with_input_error(value):
    # int(inf) raises OverflowError, int(nan) ValueError: both must come out as the one-line InputError
    with pytest.raises(InputError, match=r"--chunks: expected a whole number of chunks >= 1"):
        bound.check_chunks("--chunks", value)


def test_check_chunks_bounds():
    assert bound.check_chunks("n", 1) == 1
    assert bound.check_chunks("n", 4.0) == 4
    assert bound.check_chunks("n", bound.MAX_CHUNKS) == 100_000
    with pytest.raises(InputError, match="100001 is above 100000"):
        bound.check_chunks("n", bound.MAX_CHUNKS + 1)


def test_check_time_zero_and_negative():
    assert bound.check_time("t", 0, allow_zero=True) == 0.0
    with pytest.raises(InputError, match=r"t: expected a finite time > 0 us, got 0"):
        bound.check_time("t", 0)
    with pytest.raises(InputError, match=r">= 0 us, got -1"):
        bound.check_time("t", -1, allow_zero=True)
    with pytest.raises(InputError, match="finite"):
        bound.check_time("t", math.inf)


def layer_700_350_7():
    # C = 700, F = 350, n = 7, no drain: c = 100, f = 50, a = 100, b = 0
    # terms: fill 100, C - F = 350, forward 7*100 + 0 - 6*50 = 400, reverse 100 + 0 - 300 = -200
    return bound.make_layer(700, 350, 7)


def test_exposure_terms_by_hand():
    lay = layer_700_350_7()
    assert bound.exposure_terms(lay) == {"fill+drain": 100.0, "comm-minus-compute": 350.0,
                                         "forward-backlog": 400.0, "reverse-backlog": -200.0}
    assert bound.binding_term(lay) == "forward-backlog"
    assert bound.ceiling(lay) == pytest.approx(1 - 400 / 700)
    # drain 40: a = 60, b = 40; forward 7*60 + 40 - 300 = 160, reverse 60 + 280 - 300 = 40 -> C - F wins
    lay = bound.make_layer(700, 350, 7, drain_us=40)
    assert bound.exposure_terms(lay)["forward-backlog"] == pytest.approx(160)
    assert bound.exposure_terms(lay)["reverse-backlog"] == pytest.approx(40)
    assert bound.binding_term(lay) == "comm-minus-compute"


def test_overhead_making_the_base_exactly_zero_raises():
    # measured at 7 chunks with 100 us each: C - m*o = 700 - 700 = 0 -> no overhead-free communication
    with pytest.raises(InputError, match=r"--overhead-us: 7 chunks .* x 100 us overhead is not below --comm-us 700"):
        bound.best_chunks(layer_700_350_7(), 100.0, [1, 2])
    # 99 us: base 700 - 693 = 7 us > 0 works
    assert bound.best_chunks(layer_700_350_7(), 99.0, [1])["base_comm_us"] == pytest.approx(7.0)


def test_zero_overhead_table_and_candidates_start_at_one():
    out = bound.analyse(layer_700_350_7(), overhead_us=0.0)
    table = out["best"]["table"]
    assert [r["chunks"] for r in table] == list(range(1, 65))      # default candidates 1..64
    # one chunk: everything is exposed (E = c = C = 700), ceiling 0
    assert table[0]["comm_us"] == 700 and table[0]["exposed_us"] == 700 and table[0]["ceiling"] == 0.0
    # no overhead, n chunks: c = 700/n = a, f = 350/n; forward backlog n*a - (n-1)*f = 350 + 350/n binds
    # (above C - F = 350 and c), falling with n: the best candidate is the last, 64 -> 355.46875 us
    assert out["best"]["best_exposed_us"] == 350 + 350 / 64
    assert out["best"]["best_chunks"] == 64
    assert table[1]["exposed_us"] == 350 + 350 / 2                  # n = 2: 525
    assert out["best"]["base_comm_us"] == 700 and out["best"]["overhead_us"] == 0.0


def test_target_must_lie_strictly_between_zero_and_one():
    for t in (0, 0.0, 1, 1.5, -0.1, math.nan):
        with pytest.raises(InputError, match=r"--target: expected a masking rate in \(0, 1\)"):
            bound.analyse(layer_700_350_7(), target=t)


def test_already_reachable_target_needs_no_increase():
    # C = 700, F = 7000, n = 7 (c = 100, f = 1000, a = 100, b = 0); target 0.5:
    # compute: budget = 0.5*700 - 100 = 250; f >= (600 - 250)/7 = 50 and f >= 100 - 250/6 = 58.33
    #   -> F needed 7 * 58.33 = 408.33 < 7000: increase 0 (not negative)
    # comm: gamma = 7*0.5 - 1 = 2.5, x = max((6 - 2.5)/7, 1 - 2.5/6) = 0.5833 -> C allowed 7*1000/0.5833 = 12000
    lay = bound.make_layer(700, 7000, 7)
    t = bound.analyse(lay, target=0.5)["target"]
    assert t["reachable_at_this_n"] is True
    assert t["compute_needed_us"] == pytest.approx(7 * (100 - 250 / 6))
    assert t["compute_increase_us"] == 0.0
    assert t["comm_allowed_us"] == pytest.approx(12000)
    assert t["comm_reduction_us"] == 0.0
    assert t["chunks_needed_at_least"] == 2                         # ceil(1 / (1 - 0.5))


def test_unreachable_target_at_this_n():
    # n = 2: the ideal is 1 - 1/2 = 0.5, so 0.6 cannot be reached whatever F and C
    t = bound.analyse(bound.make_layer(700, 350, 2), target=0.6)["target"]
    assert t["reachable_at_this_n"] is False and t["compute_needed_us"] is None
    assert t["compute_increase_us"] is None and t["comm_reduction_us"] is None
    assert t["chunks_needed_at_least"] == 3                         # ceil(1 / 0.4) = 2.5 -> 3


def test_ideal_limit_and_regime_boundary():
    # n = 4, no drain (share 0): ideal up to min(4/3, 1/max(0, 1)) = 1
    lay = bound.make_layer(400, 400, 4)
    assert bound.ideal_limit(lay) == 1.0 and bound.regime(lay) == "compute-bound"   # c/f = 1, at the limit
    assert bound.regime(bound.make_layer(401, 400, 4)) == "comm-bound"
    assert bound.ideal_limit(bound.make_layer(400, 400, 1)) == math.inf
    # share 0.5 at n = 4: min(4/3, 1/0.5 = 2) = 4/3
    assert bound.ideal_limit(bound.make_layer(400, 400, 4, reverse_share=0.5)) == pytest.approx(4 / 3)


def test_measured_against_a_zero_ceiling():
    # one chunk: ceiling 0, so the achieved fraction is undefined (None), not a division by zero
    out = bound.analyse(bound.make_layer(700, 350, 1), measured=0.2)
    assert out["measured"] == 0.2 and out["achieved_fraction"] is None
    out = bound.analyse(layer_700_350_7(), measured=0.2)
    assert out["achieved_fraction"] == pytest.approx(0.2 / (3 / 7))
    with pytest.raises(InputError, match="--measured"):
        bound.analyse(layer_700_350_7(), measured=1.01)


def test_chunk_count_and_divisors():
    assert bound.divisors(12) == [1, 2, 3, 4, 6, 12]
    assert bound.chunk_count(5, 12) == 4 and bound.chunk_count(12, 12) == 12 and bound.chunk_count(1, 7) == 1


def test_exposure_for_order_by_hand():
    lay = layer_700_350_7()
    assert bound.exposure_for_order(lay, "alternating") == 700
    assert bound.exposure_for_order(lay, "forward-first") == pytest.approx(400)
    # pipelined: max(400, 700 - 350 + max(0, 50 - 100) + max(0, 50 - 0)) = max(400, 400) = 400
    assert bound.exposure_for_order(lay, "pipelined") == pytest.approx(400)
    # F = 700: f = 100; pipelined max(E_min, 0 + 0 + 100) where E_min = max(100, 0, 700 - 600, 100 - 600) = 100
    lay = bound.make_layer(700, 700, 7)
    assert bound.exposure_for_order(lay, "pipelined") == pytest.approx(100)
    assert bound.exposure_for_order(bound.make_layer(700, 700, 1), "forward-first") == 700
    with pytest.raises(InputError, match="unknown order 'zigzag'"):
        bound.exposure_for_order(lay, "zigzag")


# ---------------------------------------------------------------- core/intervals.py


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


# ---------------------------------------------------------------- timeparse.py

def oracle_ns(cell: str) -> int:
    """Independent reference: Python's decimal arithmetic, half up in magnitude."""
    from decimal import ROUND_HALF_UP, Decimal

    return int((Decimal(cell.strip()) * 1000).quantize(Decimal(1), rounding=ROUND_HALF_UP))


def test_fixed_layout_fast_path_over_several_arrow_chunks():
    import pyarrow as pa
    from ditpar.timeparse import us_to_ns, us_to_ns_arrow

    # 3 chunks of 40,000 same-width cells (120,000 rows > 65,536: two row blocks, one crossing chunks)
    rng = np.random.default_rng(7)
    base = 1736408883704643212
    ns = base + np.cumsum(rng.integers(0, 5_000, 120_000))
    cells = [f"{v // 1000}.{v % 1000:03d}\t" for v in ns.tolist()]
    assert len({len(c) for c in cells}) == 1
    arr = pa.chunked_array([cells[:40_000], cells[40_000:80_000], [], cells[80_000:]])
    got = us_to_ns_arrow(arr)
    assert got.dtype == np.int64 and np.array_equal(got, ns)
    assert int(got[-1]) == oracle_ns(cells[-1]) and int(got[65_536]) == oracle_ns(cells[65_536])
    # a slice (chunk offsets not 0) reads the same cells
    assert np.array_equal(us_to_ns_arrow(arr.slice(70_000, 20_000)), ns[70_000:90_000])
    assert np.array_equal(us_to_ns(cells[:1000]), ns[:1000])


def test_cells_without_whole_digits():
    import pyarrow as pa
    from ditpar.timeparse import us_to_ns, us_to_ns_arrow

    cells = [".250", ".5", "0.001", "7.", " .999 "]
    want = [250, 500, 1, 7000, 999]
    assert [oracle_ns(c) for c in cells] == want
    assert us_to_ns(cells).tolist() == want
    assert us_to_ns_arrow(pa.array(cells)).tolist() == want
    assert us_to_ns_arrow(pa.array([".250", ".125", ".001"])).tolist() == [250, 125, 1]   # fixed layout
    assert us_to_ns_arrow(pa.array([".250", "1.5"])).tolist() == [250, 1500]               # plain decimal
    for bad in (".", " . ", ""):
        with pytest.raises(InputError, match="expected a decimal time"):
            us_to_ns([bad])
        with pytest.raises(InputError, match="expected a decimal time"):
            us_to_ns_arrow(pa.array(["1.0", bad]))


def test_rounding_signs_and_the_int64_edge():
    import pyarrow as pa
    from ditpar.timeparse import us_to_ns, us_to_ns_arrow

    cells = ["1.2345", "1.2344", "-1.5", "+2", "-0.0005", "9223372036854774", "0000000000000001.5"]
    want = [oracle_ns(c) for c in cells]
    assert want == [1235, 1234, -1500, 2000, -1, 9223372036854774000, 1500]
    assert us_to_ns(cells).tolist() == want
    assert us_to_ns_arrow(pa.array(cells)).tolist() == want
    # (2**63 - 1) // 1000 - 1 = 9223372036854774 us is the largest accepted; one more is refused
    for bad in ("9223372036854775", "12345678901234567"):
        with pytest.raises(InputError, match=f"got '{bad}'"):
            us_to_ns([bad])
        with pytest.raises(InputError, match=f"got '{bad}'"):
            us_to_ns_arrow(pa.array([bad]))
        with pytest.raises(InputError, match=f"got '{bad}'"):
            us_to_ns_arrow(pa.array(["1.000", bad]))


def test_errors_name_the_first_bad_row_counted_from_first_row():
    import pyarrow as pa
    from ditpar.timeparse import parse_us_column, texts_to_ns, us_to_ns, us_to_ns_arrow

    cells = ["1.5", "2", "abc", "x"]
    with pytest.raises(InputError) as e:
        us_to_ns(cells, where="k.csv: column 'Start'", first_row=2, row_label="line")
    assert str(e.value) == "k.csv: column 'Start': line 4: expected a decimal time in microseconds, got 'abc'"
    with pytest.raises(InputError) as e:
        us_to_ns_arrow(pa.array(cells), where="t")
    assert str(e.value) == "t: row 2: expected a decimal time in microseconds, got 'abc'"
    with pytest.raises(InputError, match=r"t: row 1: .* got \(empty\)"):
        us_to_ns_arrow(pa.array(["1", None, "2"]), where="t")
    frame = pd.DataFrame({"Start": ["1", "2", "1e3"]})
    with pytest.raises(InputError, match=r"^f: column 'Start': line 4: .* got '1e3'$"):
        parse_us_column(frame, "Start", "f")
    # a long list goes through Arrow: the same row named
    many = ["1.000"] * 5000 + ["bad"] + ["2.000"] * 10
    with pytest.raises(InputError, match="x: row 5000: .* got 'bad'"):
        texts_to_ns(many, where="x")
    assert texts_to_ns(["1.5"] * 4096).tolist() == [1500] * 4096
    assert texts_to_ns([1, "2.5"] * 2048)[:2].tolist() == [1000, 2500]       # ints: the object parser
    with pytest.raises(InputError, match=r"row 3: .*got '" + "9" * 40):
        us_to_ns(["1", "2", "3", "9" * 60])                                   # too long: shown cut to 40


# ---------------------------------------------------------------- analysis/breakdown.py

U = 1000   # ns per us: every span below is written in us


def profile(events, windows=(), trace=None):
    from ditpar.core.profile import ProfileSet

    ev = pd.DataFrame([{"rank": r, "start_ns": s * U, "dur_ns": (e - s) * U, "kind": k, "name": n}
                       for r, s, e, k, n in events])
    ev["start_ns"] = ev["start_ns"].astype(np.int64)
    ev["dur_ns"] = ev["dur_ns"].astype(np.int64)
    steps = pd.DataFrame([{"rank": r, "step": st, "start_ns": s * U, "end_ns": e * U} for r, st, s, e in windows],
                         columns=["rank", "step", "start_ns", "end_ns"])
    st = None if trace is None else pd.DataFrame(trace)
    return ProfileSet(events=ev, steps=steps, step_trace=st)


def by_step(bd):
    return {(r["rank"], r["step"]): r for r in bd.rows}


EVENTS = [(0, 10, 40, "compute", "mm"), (0, 30, 60, "comm", "allreduce"),
          (0, 160, 200, "compute", "mm"), (0, 210, 230, "comm", "hcom_receive_1")]
WINDOWS = [(0, 1, 0, 100), (0, 2, 100, 150), (0, 3, 150, 300)]


def test_breakdown_by_hand_with_an_empty_window_between_busy_steps():
    from ditpar.analysis.breakdown import step_breakdown

    # computing [10,40) [160,200); comm [30,60) [210,230); not overlapped [40,60) [210,230);
    # free = gaps of the busy union in [10, 230): [60,160) (starts in step 1) and [200,210) (step 3).
    # step 2 [100,150) owns no segment start: no row. Bubble = the receive, 20.
    # stage 1: 160 - 10 = 150; stage 3: 230 - 160 - 20 = 50
    bd = step_breakdown(profile(EVENTS, WINDOWS))
    rows = by_step(bd)
    assert sorted(rows) == [(0, 1), (0, 3)]
    want = {1: dict(computing_us=30, communication_us=30, communication_not_overlapped_us=20, overlapped_us=10,
                    free_us=100, stage_us=150, bubble_us=0),
            3: dict(computing_us=40, communication_us=20, communication_not_overlapped_us=20, overlapped_us=0,
                    free_us=10, stage_us=50, bubble_us=20)}
    for step, cols in want.items():
        assert {c: rows[(0, step)][c] for c in cols} == cols
    assert bd.compared == 0 and bd.ok and rows[(0, 1)]["reference"] is None


def test_breakdown_overlapping_windows_take_the_first_in_start_order():
    from ditpar.analysis.breakdown import step_breakdown

    # windows [0,100) step 1 and [50,200) step 2; a segment starting at 60 lies in both: step 1 has it.
    # compute [10,20) [60,70) [150,160); free [20,60) and [70,150) both start in step 1
    ev = [(0, 10, 20, "compute", "a"), (0, 60, 70, "compute", "b"), (0, 150, 160, "compute", "c")]
    rows = by_step(step_breakdown(profile(ev, [(0, 2, 50, 200), (0, 1, 0, 100)])))
    assert (rows[(0, 1)]["computing_us"], rows[(0, 1)]["free_us"], rows[(0, 1)]["stage_us"]) == (20, 120, 140)
    assert (rows[(0, 2)]["computing_us"], rows[(0, 2)]["free_us"], rows[(0, 2)]["stage_us"]) == (10, 0, 10)


def test_breakdown_segments_outside_every_window_are_not_counted():
    from ditpar.analysis.breakdown import step_breakdown

    # compute [0,5) before the only window [10,50): dropped; [20,30) counted; free [5,20) starts outside
    ev = [(0, 0, 5, "compute", "a"), (0, 20, 30, "compute", "b")]
    rows = by_step(step_breakdown(profile(ev, [(0, 7, 10, 50)])))
    assert (rows[(0, 7)]["computing_us"], rows[(0, 7)]["free_us"], rows[(0, 7)]["stage_us"]) == (10, 0, 10)


def trace_row(rank, step, **cols):
    from ditpar.analysis.breakdown import COLUMNS

    return {"rank": rank, "step": step, **{c: cols.get(c, math.nan) for c in COLUMNS}}


def test_reference_step_without_tasks_is_reported():
    from ditpar.analysis.breakdown import step_breakdown

    trace = [trace_row(0, 1, computing_us=30), trace_row(0, 3, computing_us=40), trace_row(0, 2, computing_us=0)]
    bd = step_breakdown(profile(EVENTS, WINDOWS, trace))
    assert bd.compared == 2 and not bd.mismatches
    assert bd.unmatched_reference == ["rank 0 step 2: in step_trace_time.csv but no tasks in that step"]
    assert not bd.ok


def test_rows_after_one_without_reference_are_still_compared():
    from ditpar.analysis.breakdown import step_breakdown

    # step 1 has no reference row; step 3's computing differs by 1 us: reported
    bd = step_breakdown(profile(EVENTS, WINDOWS, [trace_row(0, 3, computing_us=41)]))
    rows = by_step(bd)
    assert rows[(0, 1)]["reference"] is None and rows[(0, 1)]["max_abs_diff_us"] is None
    assert bd.compared == 1
    assert bd.mismatches == ["rank 0 step 3: computing_us 40.000 vs profiler 41.000 (|diff| 1.000 > 0.05 us)"]


def test_tolerance_boundaries_and_nan_reference_columns():
    from ditpar.analysis.breakdown import step_breakdown

    # computing 40: 40.05 is at the 0.05 us tolerance (agrees), 40.06 beyond; stage 50: 50.25 at its 0.25
    ok = step_breakdown(profile(EVENTS, WINDOWS, [trace_row(0, 3, computing_us=40.05, stage_us=50.25)]))
    assert ok.mismatches == [] and ok.compared == 1
    assert by_step(ok)[(0, 3)]["max_abs_diff_us"] == 0.25
    assert by_step(ok)[(0, 3)]["reference"] == {"computing_us": 40.05, "stage_us": 50.25}   # NaN columns left out
    bad = step_breakdown(profile(EVENTS, WINDOWS, [trace_row(0, 3, computing_us=40.06, stage_us=50.26)]))
    assert [m.split(":")[1].split()[0] for m in bad.mismatches] == ["computing_us", "stage_us"]
    # every column NaN: compared, nothing to differ, no figure
    nan = step_breakdown(profile(EVENTS, WINDOWS, [trace_row(0, 3)]))
    assert nan.compared == 1 and by_step(nan)[(0, 3)]["max_abs_diff_us"] is None and nan.ok


def test_one_unnumbered_step_matches_the_single_reference_step():
    from ditpar.analysis.breakdown import step_breakdown

    # no step windows: one whole-capture row (step None) = the profiler's single step 5
    ev = [(0, 10, 40, "compute", "a"), (0, 50, 60, "comm", "allreduce")]
    bd = step_breakdown(profile(ev, (), [trace_row(0, 5, computing_us=30, free_us=10)]))
    assert bd.compared == 1 and bd.ok and bd.rows[0]["step"] is None
    assert bd.rows[0]["reference"] == {"computing_us": 30.0, "free_us": 10.0}
    # our one numbered step against the profiler's one unnumbered row
    bd = step_breakdown(profile(ev, [(0, 4, 0, 100)], [trace_row(0, None, computing_us=30)]))
    assert bd.compared == 1 and bd.ok
    # two reference steps for that rank: no guessing, both reported unmatched
    bd = step_breakdown(profile(ev, (), [trace_row(0, 5, computing_us=30), trace_row(0, 6, computing_us=0)]))
    assert bd.compared == 0 and len(bd.unmatched_reference) == 2
    # two ranks: rank 1's reference does not pair with rank 0's row
    ev2 = ev + [(1, 10, 20, "compute", "a")]
    bd = step_breakdown(profile(ev2, [(1, 1, 0, 100)], [trace_row(1, 1, computing_us=10),
                                                         trace_row(1, 2, computing_us=0)]))
    assert bd.compared == 1 and bd.unmatched_reference == [
        "rank 1 step 2: in step_trace_time.csv but no tasks in that step"]


def test_no_tasks_is_an_input_error():
    from ditpar.analysis.breakdown import step_breakdown
    from ditpar.core.profile import ProfileSet

    empty = pd.DataFrame({"rank": pd.Series([], dtype=np.int64), "start_ns": pd.Series([], dtype=np.int64),
                          "dur_ns": pd.Series([], dtype=np.int64), "kind": [], "name": []})
    with pytest.raises(InputError, match="no device tasks"):
        step_breakdown(ProfileSet(events=empty))
