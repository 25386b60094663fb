"""Pipeline simulator: hand-timed schedules, agreement with the closed form on a grid, brute-force
optimality of the closed-form bound, deadlock detection, CLI and Gantt chart."""

from __future__ import annotations

import itertools
import json

import pytest
from conftest import run_script
from ditpar.errors import InputError
from ditpar.masking import bound, simulator


def layer(C, F, n, D=None, r=None):
    return bound.make_layer(C, F, n, D, r)


def spans(res, kind):
    return [(o.start_us, o.end_us) for o in res.ops if o.kind == kind]


def test_hand_timed_pipelined_two_chunks():
    # a = 3, b = 1, f = 2, n = 2 (C = 8, F = 4), by hand:
    # F0 [0,3] F1 [3,6]; A0 [3,5]; R0 waits F1 -> [6,7]; A1 [6,8]; R1 [8,9]; exposed [0,3]+[5,6]+[8,9] = 5
    res = simulator.simulate(layer(8, 4, 2, D=1), "pipelined")
    assert spans(res, "forward") == [(0, 3), (3, 6)]
    assert spans(res, "attention") == [(3, 5), (6, 8)]
    assert spans(res, "reverse") == [(6, 7), (8, 9)]
    assert res.makespan_us == 9 and res.exposed_us == 5
    assert res.exposed_spans() == [(0, 3), (5, 6), (8, 9)]


def test_hand_timed_forward_first_four_chunks():
    # a = b = 1.5, f = 2, n = 4 (C = 12, F = 8): forwards [0,6], attention [1.5, 9.5] without a gap,
    # reverses [6,7.5] [7.5,9] [9,10.5] [10.5,12]; exposed = 1.5 + (12 - 9.5) = 4 = C - F
    res = simulator.simulate(layer(12, 8, 4, D=1.5), "forward-first")
    assert spans(res, "attention") == [(1.5, 3.5), (3.5, 5.5), (5.5, 7.5), (7.5, 9.5)]
    assert spans(res, "reverse") == [(6, 7.5), (7.5, 9), (9, 10.5), (10.5, 12)]
    assert res.exposed_us == pytest.approx(4)
    # pipelined, same layer, by hand: 5 (the comm stream idles 0.5 waiting for A0 and 0.5 for A3)
    assert simulator.simulate(layer(12, 8, 4, D=1.5), "pipelined").exposed_us == pytest.approx(5)


def test_alternating_serialises_everything():
    res = simulator.simulate(layer(12, 8, 4, D=1.5), "alternating")
    assert res.exposed_us == pytest.approx(12) and res.makespan_us == pytest.approx(20)


GRID_N = [1, 2, 3, 4, 7, 8]
GRID_CF = [0.2, 0.46, 0.9, 1.0, 1.3, 2.0, 5.0]
GRID_R = [0.0, 0.1, 0.25, 1 / 3, 0.5, 0.75, 1.0]


@pytest.mark.parametrize("n", GRID_N)
def test_simulator_matches_closed_form_on_grid(n):
    for cf, r, order in itertools.product(GRID_CF, GRID_R, simulator.ORDERS):
        lay = layer(700, 700 / cf, n, r=r)
        sim = simulator.simulate(lay, order)
        assert sim.exposed_us == pytest.approx(bound.exposure_for_order(lay, order), rel=1e-12, abs=1e-9)
        # no layer is ever idle on both streams in these orders: makespan = F + exposed
        assert sim.makespan_us == pytest.approx(lay.compute_us + sim.exposed_us, rel=1e-12)
    for cf, r in itertools.product(GRID_CF, GRID_R):
        lay = layer(700, 700 / cf, n, r=r)
        best = simulator.simulate(lay, "forward-first")
        assert best.masking == pytest.approx(bound.ceiling(lay), abs=1e-12)
        if cf <= 1:
            assert best.masking == pytest.approx(1 - 1 / n, abs=1e-12)


def _valid_comm_orders(n):
    items = [("forward", g) for g in range(n)] + [("reverse", g) for g in range(n)]
    for perm in itertools.permutations(items):
        pos = {it: i for i, it in enumerate(perm)}
        if all(pos[("forward", g)] < pos[("reverse", g)] for g in range(n)):
            yield list(perm)


@pytest.mark.parametrize("n", [1, 2, 3])
def test_closed_form_is_the_minimum_over_every_schedule(n):
    """Brute force: every comm order x every compute order; none beats E_min, and some reaches it."""
    for cf, r in itertools.product([0.3, 0.8, 1.0, 1.3, 2.0, 4.0], [0.0, 0.25, 0.6, 1.0]):
        lay = layer(60, 60 / cf, n, r=r)
        e_min = bound.exposure_min(lay)
        best = float("inf")
        for comp in itertools.permutations(range(n)):
            comp_q = [("attention", g) for g in comp]
            for comm_q in _valid_comm_orders(n):
                try:
                    res = simulator.run_streams(lay, comm_q, comp_q)
                except InputError:
                    continue  # deadlocked order
                assert res.exposed_us >= e_min - 1e-9
                best = min(best, res.exposed_us)
        assert best == pytest.approx(e_min, abs=1e-9)


def test_seed_drain_formula_is_not_a_ceiling():
    # the MindIE-SD skill's 1 - (c + (n-1)(c-f) + D)/C with the reverse D inside c: 0.6236 for c/f = 1.3, n = 7,
    # D = c/4, yet forward-first issue reaches 0.7692 in simulation
    lay = layer(700, 700 / 1.3, 7, r=0.25)
    c, f, D = 100, 100 / 1.3, 25
    mindie = 1 - (c + 6 * (c - f) + D) / 700
    assert mindie == pytest.approx(0.6236, abs=1e-4)
    assert simulator.simulate(lay, "forward-first").masking == pytest.approx(1 / 1.3)


def test_batched_transforms_expose_the_reverses():
    # reverse waits on an output transform enqueued after all attention: with c/f = 0.46, n = 7, r = 1/4,
    # the reverses (7 x 25 us) run after the compute stream empties except for the transforms (7 x 0)
    lay = layer(700, 700 / 0.46, 7, r=0.25)
    per_chunk = simulator.simulate(lay, "forward-first")
    batched = simulator.simulate(lay, "forward-first", 0.0, "batched")
    assert per_chunk.exposed_us == pytest.approx(100)
    assert batched.exposed_us == pytest.approx(75 + 7 * 25)  # fill + every reverse
    with pytest.raises(InputError, match="deadlock"):
        simulator.simulate(lay, "pipelined", 0.0, "batched")


def test_transform_per_chunk_counts_as_compute():
    # with a per-chunk transform t the chunk's compute is f + t: same as a layer with F + n t
    lay = layer(700, 400, 7, r=0.25)
    with_t = simulator.simulate(lay, "forward-first", 10.0, "per-chunk")
    folded = simulator.simulate(layer(700, 470, 7, r=0.25), "forward-first")
    assert with_t.exposed_us == pytest.approx(folded.exposed_us)


def test_simulate_cli_json_and_plot(tmp_path):
    png = tmp_path / "g.png"
    csv = tmp_path / "ops.csv"
    proc = run_script("mask_bound.py", "simulate", "--comm-us", "700", "--compute-us", "538.4615384615385",
                      "--chunks", "7", "--reverse-share", "0.25", "--order", "all", "--json",
                      "--plot", str(png), "--csv", str(csv), check=0)
    doc = json.loads(proc.stdout)
    by = {r["order"]: r for r in doc["orders"]}
    assert by["forward-first"]["exposed_us"] == pytest.approx(700 - 538.4615384615385)
    f = 538.4615384615385 / 7  # 76.92 > a = 75 > b = 25: the comm stream idles f - a and f - b
    assert by["pipelined"]["exposed_us"] == pytest.approx(700 - 538.4615384615385 + (f - 75) + (f - 25))
    assert by["alternating"]["masking"] == pytest.approx(0)
    assert doc["ceiling"] == pytest.approx(1 / 1.3)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10000
    assert len(csv.read_text().splitlines()) == 1 + 3 * 21  # 7 forward + 7 attention + 7 reverse per order


def test_simulate_cli_bad_order_exits_2():
    proc = run_script("mask_bound.py", "simulate", "--comm-us", "7", "--compute-us", "5", "--chunks", "2",
                      "--order", "zigzag", check=2)
    assert "zigzag" in proc.stderr and proc.stderr.count("\n") == 1


def test_post_reverse_work_favours_pipelined_by_hand():
    # c/f = 2, n = 7, a = 75, b = 25, f = 50, p = 50 per chunk after its reverse.
    # forward-first by hand: forwards end 525, A6 [525,575], P0..P6 back to back from 575 -> 925.
    # pipelined by hand: ... A6 [650,700], R6 [700,725], P5 [700,750], P6 [750,800] -> 800.
    lay = layer(700, 350, 7, r=0.25)
    ff = simulator.simulate(lay, "forward-first", post_us=50)
    sp = simulator.simulate(lay, "pipelined", post_us=50)
    assert ff.makespan_us == pytest.approx(925) and sp.makespan_us == pytest.approx(800)
    assert spans(sp, "post")[-2:] == [(700, 750), (750, 800)]
