"""The evidence block tests the printed range, not only the order: each measured speedup of the request's shape is
set beside the end-to-end speedup and range plan.py prints for that plan, and one falling outside is named."""

from __future__ import annotations

import json
import math

import pytest
from conftest import run_script
from ditpar.plan.cost.shape import Shape
from ditpar.plan.decide import evidence_speedups, uncertainty

L20 = ("--model", "FLUX.1-dev", "--hardware", "L20", "--devices", "4")
HEADER = ("source_repo,source_path,model,hardware,interconnect,n_devices,resolution_or_seq,steps,ulysses,ring,"
          "pipefusion,cfg,tp,other_config,latency_s,notes")


def plan_json(*args):
    return json.loads(run_script("plan.py", *args, "--json", check=0).stdout)


def shape(w=1024, h=1024, frames=1, steps=28) -> Shape:
    return Shape(width=w, height=h, frames=frames, steps=steps, cfg=False, frames_tok=1, tokens_per_frame=4096,
                 text_joint=512, text_cross=0)


def test_same_shape_and_the_flags_that_ask_for_a_run_by_hand():
    run = {"resolution": "832x480x81 frames", "steps": "50"}
    assert evidence_speedups.same_shape(run, shape(832, 480, 81, 50))
    assert not evidence_speedups.same_shape(run, shape(832, 480, 81, 40))
    assert not evidence_speedups.same_shape(run, shape(1280, 720, 81, 50))
    assert evidence_speedups.ask_for(run) == "--resolution 832x480 --frames 81 --steps 50"
    assert evidence_speedups.ask_for({"resolution": "1024px", "steps": ""}) == "--resolution 1024x1024"
    assert not evidence_speedups.same_shape({"resolution": "1024x1024", "steps": ""}, shape())   # steps not stated
    assert evidence_speedups.ask_for({"resolution": "about a megapixel", "steps": "28"}) == ""


def test_flux_on_4_l20_names_the_ulysses_rows_above_the_range():
    doc = plan_json(*L20)
    ev, ranges = doc["evidence"], doc["serial_stages"]["end_to_end_speedup"]
    ring = next(r for r in ev["runs"] if r["file"] == "cachedit_context_parallel.csv" and len(r["plans"]) == 4)
    assert ring["same_shape"] and not ring["compiled"]
    u4 = ring["plans"][0]
    assert u4["name"] == "U4" and u4["measured_speedup"] == pytest.approx(23.56 / 8.22)   # 2.866x, by hand
    assert u4["predicted_speedup"] == ranges["U4"]["speedup"]
    # the printed range is the prediction x e^-q .. x e^q of the question's stratum (none of these bounds is capped)
    q = uncertainty.RANGE_Q[ranges["U4"]["stratum"]][0]
    assert (u4["range_low"], u4["range_high"]) == pytest.approx((u4["predicted_speedup"] * math.exp(-q),
                                                                 u4["predicted_speedup"] * math.exp(q)))
    inside = {p["name"]: u4["range_low"] <= p["measured_speedup"] <= u4["range_high"] for p in [u4]}
    assert u4["inside_range"] is inside["U4"] is False and u4["measured_speedup"] > u4["range_high"]
    assert ev["speedups_agree"] is False
    text = run_script("plan.py", *L20, check=0).stdout
    assert (f"U4 measured 2.87x against {u4['predicted_speedup']:.2f}x predicted (above the range "
            f"{u4['range_low']:.2f}-{u4['range_high']:.2f}x)") in text
    # the compiled runs of the same page are shown without a verdict
    compiled = [r for r in ev["runs"] if r["compiled"]]
    assert compiled and all(p["inside_range"] is None for r in compiled for p in r["plans"])


def _own_table(tmp_path, u4_s: float, steps: int = 28) -> str:
    table = tmp_path / "mine.csv"
    rows = ["me/bench,run.md,FLUX.1-dev,L20,PCIe,1,1024x1024,28,1,1,1,1,1,pytorch,20,one card",
            f"me/bench,run.md,FLUX.1-dev,L20,PCIe,4,1024x1024,{steps},4,1,1,1,1,pytorch,{u4_s},ulysses"]
    table.write_text(HEADER + "\n" + "\n".join(rows) + "\n")
    return str(table)


def test_a_measured_speedup_inside_and_outside_its_range(tmp_path):
    pred = plan_json(*L20)["serial_stages"]["end_to_end_speedup"]["U4"]
    inside = plan_json(*L20, "--evidence", _own_table(tmp_path, 20 / pred["speedup"]))["evidence"]
    (p,) = inside["runs"][0]["plans"]
    assert p["measured_speedup"] == pytest.approx(pred["speedup"]) and p["inside_range"] is True
    assert inside["speedups_agree"] is True
    assert inside["speedup_verdict"].startswith("speedups agree: each of 1 measured speedup(s) of your shape")
    slow = plan_json(*L20, "--evidence", _own_table(tmp_path, 20 / (pred["low"] * 0.9)))["evidence"]
    assert slow["runs"][0]["plans"][0]["inside_range"] is False and slow["speedups_agree"] is False
    assert "below the range" in slow["speedup_verdict"]


def test_another_shape_is_shown_not_judged_and_the_flags_to_ask_for_it_are_given(tmp_path):
    ev = plan_json(*L20, "--evidence", _own_table(tmp_path, 6.0, steps=50))["evidence"]
    # the one-device row is at 28 steps, the 4-card row at 50: two runs; the 4-card one is another shape
    (run,) = ev["runs"]
    assert run["same_shape"] is False and run["plans"][0]["predicted_speedup"] is None
    assert ev["speedups_agree"] is None
    assert ev["speedup_verdict"].endswith("ask for their shape (--resolution 1024x1024 --steps 50)")


def test_the_one_device_row_against_the_prediction(tmp_path):
    doc = plan_json(*L20, "--evidence", _own_table(tmp_path, 6.0))
    run = doc["evidence"]["runs"][0]
    # DP4 runs each request on one card: its end-to-end seconds are the one-device prediction, found independently
    assert run["one_device_predicted_s"] == pytest.approx(doc["serial_stages"]["end_to_end_s"]["DP4"], rel=1e-3)
    text = run_script("plan.py", *L20, "--evidence", _own_table(tmp_path, 6.0), check=0).stdout
    assert f"one device: measured 20 s against {run['one_device_predicted_s']:.4g} s predicted end to end" in text
    assert "--ref-latency 20 prices every plan from it" in text


def test_a_compiled_run_of_the_shape_is_shown_without_a_verdict(tmp_path):
    table = tmp_path / "compiled.csv"
    rows = ["me/bench,run.md,FLUX.1-dev,L20,PCIe,1,1024x1024,28,1,1,1,1,1,torch.compile,10,one card",
            "me/bench,run.md,FLUX.1-dev,L20,PCIe,4,1024x1024,28,4,1,1,1,1,torch.compile,1,ulysses"]
    table.write_text(HEADER + "\n" + "\n".join(rows) + "\n")
    ev = plan_json(*L20, "--evidence", str(table))["evidence"]
    (run,) = ev["runs"]
    (p,) = run["plans"]
    # 10x on 4 cards is far outside any range, yet a compiled run is not judged against an eager prediction
    assert run["compiled"] and p["measured_speedup"] == pytest.approx(10.0) and p["inside_range"] is None
    assert ev["speedups_agree"] is None and "1 measured speedup(s) of a compiled run are not judged" in ev["speedup_verdict"]
    text = run_script("plan.py", *L20, "--evidence", str(table), check=0).stdout
    assert "[torch.compile: the prediction prices eager; not judged]" in text
    assert ": outside" not in text and ": inside" not in text


def test_a_run_outside_the_request_bounds_is_never_a_shape_to_ask_for():
    # plan.py refuses a side above 16,384 px, more than 10,000 frames or steps: the evidence block neither matches such
    # a run nor suggests its flags
    huge = {"resolution": "99999999999999999999x3", "steps": "50"}
    assert evidence_speedups.ask_for(huge) == "" and not evidence_speedups.same_shape(huge, shape())
    frames = {"resolution": "1024x1024x20000 frames", "steps": "28"}
    assert evidence_speedups.ask_for(frames) == ""
    assert evidence_speedups.ask_for({"resolution": "1024x1024", "steps": "1e9"}) == "--resolution 1024x1024"
