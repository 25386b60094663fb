"""Calibration from one measured plan at any card count (plan.py --ref-latency with --ref-plan), and its judge on
the unseen rounds (plan.py evaluate --calibrated-check)."""

from __future__ import annotations

import dataclasses
import json
import math

from conftest import ROOT, run_script
from ditpar.plan.cost import make_shape, predict
from ditpar.plan.cost.plans import Plan
from ditpar.plan.cost.timing import Tunables
from ditpar.plan.decide.rank import calibrate
from ditpar.plan.inputs import presets
from ditpar.plan.judge.calibrated_check import measured_request_s, summary


def _flux():
    model = presets.resolve_model("flux.1-dev")
    return model, presets.resolve_hardware("h100"), make_shape(model, 1024, 1024, None, None)


def test_two_rows_one_device_reference_by_hand():
    # launch 0: the one-device prediction is all compute (6.6814 s at scale 1), so a measured 10 s one-device row
    # gives compute scale 10 / C1 by hand, and the other row (U4) is predicted at that scale
    model, hw, shape = _flux()
    tun = Tunables(launch_us=0.0)
    c1 = predict(model, hw, shape, Plan(), tun).compute_s
    assert predict(model, hw, shape, Plan(), tun).latency_s == c1
    got = calibrate(model, hw, shape, 10.0, tun)
    assert math.isclose(got.compute_scale, 10.0 / c1, rel_tol=1e-9)
    u4 = predict(model, hw, shape, Plan(ulysses=4), got)
    u4_by_hand = predict(model, hw, shape, Plan(ulysses=4), dataclasses.replace(tun, compute_scale=10.0 / c1))
    assert math.isclose(u4.latency_s, u4_by_hand.latency_s, rel_tol=1e-9)


def test_two_rows_multi_card_reference_by_hand():
    # the reference is U4 measured at 2.5 s: the fitted scale reproduces it, and the other row (one device, all
    # compute at launch 0) is then that scale x C1 by hand
    model, hw, shape = _flux()
    tun = Tunables(launch_us=0.0)
    got = calibrate(model, hw, shape, 2.5, tun, Plan(ulysses=4))
    assert math.isclose(predict(model, hw, shape, Plan(ulysses=4), got).latency_s, 2.5, rel_tol=1e-8)
    c1 = predict(model, hw, shape, Plan(), tun).compute_s
    assert math.isclose(predict(model, hw, shape, Plan(), got).latency_s, got.compute_scale * c1, rel_tol=1e-9)
    assert got.compute_scale > 1.0   # 2.5 s is slower than the 2.17 s predicted at scale 1


def test_summary_by_hand():
    s = summary([math.log2(1.2), -1.0, math.log2(1.3)])
    assert s["n"] == 3 and math.isclose(s["within_25pct"], 1 / 3)
    assert math.isclose(s["median_abs_log2"], math.log2(1.3))


def test_per_step_row_taken_per_request():
    # xDiT's CogVideoX-2b A100 chart: 1.44 s per denoising step, 50 steps -> 72 s of DiT loop; an end-to-end row as is
    from types import SimpleNamespace

    step = SimpleNamespace(measured=1.44, shape=SimpleNamespace(steps=50),
                           row={"other_config": "xDiT; latency per denoising step, not end-to-end", "notes": ""})
    assert math.isclose(measured_request_s(step), 72.0)
    e2e = SimpleNamespace(measured=30.0, shape=SimpleNamespace(steps=50),
                          row={"other_config": "", "notes": "guidance-distilled: one branch per step"})
    assert measured_request_s(e2e) == 30.0


def test_ref_plan_cli():
    base = ("--model", "flux.1-dev", "--hardware", "h100", "--devices", "4", "--json")
    out = json.loads(run_script("plan.py", *base, "--ref-latency", "6", "--ref-plan", "U4", check=0).stdout)
    u4 = next(p for p in out["plans"] if p["name"] == "U4")
    serial = 0.164   # text encoder and VAE decode priced for this request (the serial-stages line)
    assert abs(u4["predicted_latency_s"] - (6.0 - serial)) < 0.01, u4["predicted_latency_s"]   # the DiT loop
    p = run_script("plan.py", *base, "--ref-plan", "U4", check=2)
    assert "--ref-latency" in p.stderr and "Traceback" not in p.stderr
    p = run_script("plan.py", *base, "--ref-latency", "6", "--ref-plan", "X4", check=2)
    assert "--ref-plan" in p.stderr and "'X4'" in p.stderr


def test_calibrated_check_on_unseen_rounds():
    p = run_script("plan.py", "evaluate", "--tables", str(ROOT / "benchmarks" / "published"), "--in-sample-only",
                   "--calibrated-check", "--json", check=0)
    rep = json.loads(p.stdout)["calibrated_check"]
    one = rep["one device"]
    # one target per speedup row of the unseen rounds: the 196 rows of benchmarks/unseen_residuals.csv
    assert one["calibrated"]["n"] == one["uncalibrated"]["n"] == 196
    assert one["calibrated"]["within_25pct"] > one["uncalibrated"]["within_25pct"]
    multi = rep["one multi-card row"]
    assert multi["calibrated"]["median_abs_log2"] < multi["uncalibrated"]["median_abs_log2"]


def test_a_reference_plan_no_framework_could_run_is_refused_in_one_line():
    # FLUX.1-dev has 24 heads: U999 splits them 999 ways; R2000 asks for more cards than any job (1024) has
    base = ["--model", "FLUX.1-dev", "--hardware", "L20", "--devices", "4", "--ref-latency", "5"]
    heads = run_script("plan.py", *base, "--ref-plan", "U999", check=2).stderr.strip().splitlines()
    assert heads == ["plan.py: error: --ref-plan U999: Ulysses x TP = 999 splits more than the 24 heads of "
                     "FLUX.1-dev; no framework runs it"]
    cards = run_script("plan.py", *base, "--ref-plan", "R2000", check=2).stderr.strip().splitlines()
    assert cards == ["plan.py: error: --ref-plan R2000: 2000 cards; expected at most 1024"]
