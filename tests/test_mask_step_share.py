"""mask_bound.py calc on shares of the step (a profile's "% of step") and the step-level gain."""

from __future__ import annotations

import json

import pytest
from conftest import run_script
from ditpar.errors import InputError
from ditpar.masking import bound


def test_shares_of_the_step_give_the_step_saving():
    # By hand: C = 30 %, F = 25 %, n = 4, Ulysses reverse share 0.25 -> c = 7.5 %, f = 6.25 %,
    # a = 5.625, b = 1.875; the four bounds are c = 7.5, C - F = 5, 4a + b - 3f = 5.625,
    # a + 4b - 3f = -5.625, so E_min = 7.5 % and the step shrinks by 30 - 7.5 = 22.5 %:
    # speedup 100 / 77.5 = 1.2903.
    proc = run_script("mask_bound.py", "calc", "--comm-pct", "30", "--compute-pct", "25", "--chunks", "4",
                      "--reverse-share", "0.25", "--json", check=0)
    doc = json.loads(proc.stdout)
    assert doc["unit"] == "pct"
    assert doc["ceiling"] == pytest.approx(0.75)
    step = doc["step"]
    assert step["exposed_after_pct"] == pytest.approx(7.5)
    assert step["step_saving_pct"] == pytest.approx(22.5)
    assert step["speedup"] == pytest.approx(100 / 77.5)
    assert doc["traffic_model"] == "given"


def test_per_layer_times_with_layers_and_step_give_the_share():
    # By hand: C = 700, F = 540, n = 7, drain 0 -> c = 100, bounds c = 100, C - F = 160,
    # 7*100 - 6*540/7*... : forward-backlog n*a + b - (n-1)*f = 700 - 6*77.142857 = 237.142857 -> E_min;
    # saved per layer 700 - 237.142857 = 462.857143 us; x 40 layers = 18514.2857 us of a 100 ms step.
    layer = bound.make_layer(700, 540, 7)
    gain = bound.step_gain(layer, "us", layers=40, step_us=100_000)
    assert gain["saving_per_layer_us"] == pytest.approx(700 - (700 - 6 * 540 / 7))
    assert gain["step_saving_us"] == pytest.approx(40 * (6 * 540 / 7))
    assert gain["step_saving_pct"] == pytest.approx(100 * 40 * (6 * 540 / 7) / 100_000)


def test_step_shorter_than_the_collective_is_refused():
    with pytest.raises(InputError, match="shorter than the collective"):
        bound.step_gain(bound.make_layer(700, 540, 7), "us", layers=40, step_us=20_000)


def test_share_above_100_percent_is_refused():
    with pytest.raises(InputError, match="at most 100"):
        bound.step_gain(bound.make_layer(130, 25, 4), "pct")


@pytest.mark.parametrize("args, phrase", [
    (["--comm-pct", "30", "--compute-us", "5"], "give both"),
    (["--comm-pct", "30", "--compute-pct", "25", "--layers", "40", "--step-us", "1000"], "already of the step"),
    (["--comm-us", "700", "--compute-us", "540", "--layers", "40"], "give both"),
    (["--comm-pct", "30", "--compute-pct", "25", "--overhead-us", "5"], "per-layer times"),
])
def test_mixed_units_are_usage_errors(args, phrase):
    proc = run_script("mask_bound.py", "calc", *args, "--chunks", "4", check=2)
    assert phrase in proc.stderr and proc.stderr.count("\n") == 1


def test_default_traffic_model_is_named():
    proc = run_script("mask_bound.py", "calc", "--comm-us", "700", "--compute-us", "540", "--chunks", "7",
                      check=0)
    assert "--reverse-share 0.25" in proc.stderr and "drain 0" in proc.stderr
