"""masking/bound.py at its edges (issue 29): chunk counts that are not counts (inf included), an
overhead leaving exactly no communication, zero overhead, targets at 0 and 1, a target already reached. Expected values are worked out by hand
in the comments."""

from __future__ import annotations

import math

import pytest
from ditpar.errors import InputError
from ditpar.masking import bound


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


def test_drain_equal_to_the_chunk_is_allowed_and_a_hair_above_is_clamped():
    # c = 700 / 7 = 100: a drain of exactly c (all of the chunk is the reverse collective) is valid,
    # one within the relative tolerance 1e-12 above is clamped to c, a clear excess is refused
    assert bound.make_layer(700, 350, 7, drain_us=100).drain_us == 100
    assert bound.make_layer(700, 350, 7, drain_us=100 * (1 + 1e-13)).drain_us == 100
    with pytest.raises(InputError, match="cannot exceed the chunk's whole communication c = C/n = 100 us"):
        bound.make_layer(700, 350, 7, drain_us=100.001)


def test_pipelined_order_adds_only_positive_waits():
    # C = 700, F = 416.5, n = 7, drain 40: c = 100, f = 59.5, a = 60, b = 40.
    # E_min = max(100, 283.5, 7*60 + 40 - 6*59.5 = 103, 60 + 280 - 357 = -17) = 283.5
    # pipelined: 283.5 + max(0, 59.5 - 60) + max(0, 59.5 - 40) = 283.5 + 0 + 19.5 = 303
    lay = bound.make_layer(700, 416.5, 7, drain_us=40)
    assert bound.exposure_min(lay) == pytest.approx(283.5)
    assert bound.exposure_for_order(lay, "pipelined") == pytest.approx(303)


def test_target_exactly_at_the_ideal_is_reachable():
    # n = 4: ideal 1 - 1/4 = 0.75. C = 400, no drain: c = a = 100, b = 0. At target 0.75 the budget
    # is 0.25*400 - 100 = 0, so f >= max(3*100/4, 100 - 0) = 100: F = 400; C allowed: gamma = 4*0.25 - 1 = 0,
    # least f/c = max(3/4, 1 - 0) = 1 -> C = 4 * f = 400 with F = 400
    lay = bound.make_layer(400, 400, 4)
    assert bound.compute_needed(lay, 0.75) == pytest.approx(400)
    assert bound.comm_needed(lay, 0.75) == pytest.approx(400)
    assert bound.compute_needed(lay, 0.76) is None and bound.comm_needed(lay, 0.76) is None


def test_compute_needed_below_one_us_per_chunk():
    # C = 7, F = 7, n = 7: c = a = 1, b = 0. Target 0.5: budget = 0.5*7 - 1 = 2.5;
    # f >= (6 - 2.5)/7 = 0.5 and f >= 1 - 2.5/6 = 0.5833 -> F needed = 7 * 0.5833 = 4.0833 (below 1 us a chunk)
    assert bound.compute_needed(bound.make_layer(7, 7, 7), 0.5) == pytest.approx(7 * (1 - 2.5 / 6))


# --- survivors of the full run (issue 29, third round) ---

def test_step_gain_in_us_by_hand():
    # C = 700, F = 7000, n = 7: compute-bound, E_min = c = 100, so 600 us saved per layer; 10 layers of a
    # 20,000 us step: 6,000 us = 30 % of the step, speedup 20000 / 14000
    lay = bound.make_layer(700, 7000, 7)
    g = bound.step_gain(lay, "us", layers=10, step_us=20000)
    assert g == {"unit": "us", "saving_per_layer_us": pytest.approx(600), "layers": 10, "step_us": 20000.0,
                 "step_saving_us": pytest.approx(6000), "step_saving_pct": pytest.approx(30),
                 "speedup": pytest.approx(20000 / 14000)}
    assert bound.step_gain(lay, "us", layers=10, step_us=7000)["step_saving_pct"] == pytest.approx(600 / 7)
    with pytest.raises(InputError, match=r"--step-us 6999: shorter than the collective alone \(700 us x 10 layers\)"):
        bound.step_gain(lay, "us", layers=10, step_us=6999)
    for layers, step in ((10, None), (None, 20000)):
        assert bound.step_gain(lay, "us", layers=layers, step_us=step) == {
            "unit": "us", "saving_per_layer_us": pytest.approx(600), "step_saving_pct": None, "speedup": None}


def test_step_gain_in_percent_at_and_over_100():
    # 100 % of the step is the most a share can be; 100.5 of either is refused
    g = bound.step_gain(bound.make_layer(100, 100, 2), "pct")
    assert g["exposed_before_pct"] == 100
    for comm, compute in ((100.5, 50), (50, 100.5)):
        with pytest.raises(InputError, match="a share of the step is at most 100 %"):
            bound.step_gain(bound.make_layer(comm, compute, 2), "pct")


def test_chunk_count_refuses_zero_chunks_or_heads_and_a_layer_is_a_frozen_value():
    from dataclasses import FrozenInstanceError

    for requested, heads in ((0, 8), (4, 0), (2.5, 8)):
        with pytest.raises(InputError, match="expected a whole number of chunks >= 1"):
            bound.chunk_count(requested, heads)
    assert bound.chunk_count(4, 6) == 3          # divisors of 6 up to 4: 1, 2, 3
    lay = bound.Layer(700.0, 350.0, 7)           # no drain unless one is given
    assert lay.drain_us == 0.0 and lay.forward_us == 100.0
    with pytest.raises(FrozenInstanceError):
        lay.chunks = 2


def test_input_edges_of_the_full_run():
    with pytest.raises(InputError, match=r"--comm-us: expected a time in us, got 'abc'"):
        bound.make_layer("abc", 350, 7)
    with pytest.raises(InputError, match="give one of them, not both"):
        bound.make_layer(700, 350, 7, drain_us=10, reverse_share=0.5)
    with pytest.raises(InputError, match=r"--reverse-share: expected a share in \[0, 1\], got -0.5"):
        bound.make_layer(700, 350, 7, reverse_share=-0.5)
    lay = bound.make_layer(700, 350, 7)
    assert bound.analyse(lay, measured=1.0)["measured"] == 1.0          # a rate of exactly 1 is a rate
    # a target of 0 is reached by any C at this n (gamma = n - 1, least f/c = 0)
    assert bound.comm_needed(lay, 0.0) == math.inf
    # C = 2 us measured at 7 chunks with 0.2 us per chunk: C0 = 2 - 1.4 = 0.6 us > 0, a valid (small) base
    assert bound.best_chunks(bound.make_layer(2, 1, 7), 0.2, [1, 7])["base_comm_us"] == pytest.approx(0.6)


def test_two_chunks_are_masked_in_every_order_but_alternating():
    # C = F = 400, n = 2, no drain: c = f = 200; compute-bound (c/f = 1 <= 2), E_min = c = 200;
    # pipelined: max(200, 400 - 400 + max(0, 200 - 200) + max(0, 200 - 0)) = 200; alternating exposes C
    lay = bound.make_layer(400, 400, 2)
    got = {o: bound.exposure_for_order(lay, o) for o in ("forward-first", "pipelined", "alternating")}
    assert got == {"forward-first": pytest.approx(200), "pipelined": pytest.approx(200), "alternating": 400}


def test_what_one_and_two_chunks_need_by_hand():
    # n = 2, C = F = 400, no drain: c = f = a = 200, b = 0, target 0.25.
    # compute: budget = 0.75 * 400 - 200 = 100; f >= (200 - 100) / 2 = 50 and f >= 200 - 100 / 1 = 100 -> F = 200
    # comm: gamma = 2 * 0.75 - 1 = 0.5; x = max((1 - 0.5) / 2, 1 - 0.5 / 1) = 0.5 -> C = 2 * 200 / 0.5 = 800
    two = bound.make_layer(400, 400, 2)
    assert bound.compute_needed(two, 0.25) == pytest.approx(200)
    assert bound.comm_needed(two, 0.25) == pytest.approx(800)
    # n = 1 masks nothing: a target of 0 needs no compute and allows any C (no division by n - 1 = 0)
    one = bound.make_layer(700, 350, 1)
    assert bound.compute_needed(one, 0.0) == 0.0 and bound.comm_needed(one, 0.0) == math.inf
