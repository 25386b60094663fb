"""plan.py details agents stumbled on (issue 24): rounding in G2, head padding shown, speedup digits."""

from __future__ import annotations

import json

from conftest import run_script
from ditpar.plan.decide.gates import _gb


def plan_json(*args):
    return json.loads(run_script("plan.py", *args, "--json", check=0).stdout)


def test_memory_figures_keep_the_digits_that_decide():
    # 57.62 GB against a 57.6 GB cap printed as "57.6 GB > 58 GB" before; now the two differ on the page
    assert (_gb(57.62, 57.6), _gb(57.6, 57.62)) == ("57.62", "57.60")
    assert (_gb(16.8, 72.0), _gb(72.0, 16.8)) == ("16.8", "72.0")
    doc = plan_json("--model", "FLUX.1-dev", "--hardware", "H100", "--devices", "4")
    g2 = next(g for g in doc["plans"][0]["gates"] if g["gate"] == "G2")
    assert "<= 72.0 GB (90% of 80 GB)" in g2["reason"]


def test_head_padding_is_shown_where_it_is_priced():
    # 30 heads over Ulysses 4: 30 -> 32 heads (ceil(30 / 4) x 4), 32 / 30 - 1 = 6.7 % more attention
    doc = plan_json("--model", "FLUX.1-dev", "--hardware", "H100", "--devices", "4", "--heads", "30")
    by = {p["name"]: p for p in doc["plans"]}
    assert by["U4"]["pad_heads"] == {"from": 30, "to": 32}
    assert by["U2 R2"]["pad_heads"] is None            # 30 heads divide by 2
    assert by["R4"]["pad_heads"] is None               # no Ulysses, no head split
    from types import SimpleNamespace

    from ditpar.plan.decide.report import padding_note

    model = SimpleNamespace(heads=30)
    plan = SimpleNamespace(ulysses=4, tp=1)
    assert padding_note(SimpleNamespace(pad_tokens=0, plan=plan), model) == (
        "; heads padded 30 -> 32 per TP rank for Ulysses 4 (+6.7% attention work, priced)")
    # TP2 x U4 on 30 heads: 15 per TP rank -> 16
    assert "heads padded 15 -> 16" in padding_note(
        SimpleNamespace(pad_tokens=8, plan=SimpleNamespace(ulysses=4, tp=2)), model)


def test_a_chip_name_that_fits_several_boxes_is_said():
    # 910B: Atlas 800I A2 (910B3) is chosen, but the Atlas 800T A2 carries 910B1/910B2
    proc = run_script("plan.py", "--model", "FLUX.1-dev", "--hardware", "910B", "--devices", "4", check=0)
    assert "resolved to Atlas 800I A2" in proc.stderr and "Atlas 800T A2" in proc.stderr
    assert "as '910B2'" in proc.stderr   # the first shortest alias of the other box that extends '910B'
    # a full box name is unambiguous: no note
    quiet = run_script("plan.py", "--model", "FLUX.1-dev", "--hardware", "Atlas 800I A2", "--devices", "4", check=0)
    assert "also fits" not in quiet.stderr


def test_runtime_names_the_host_cost():
    # graphs = 0 us per op: no plan is host-bound; eager = 25 us; --launch-us overrides a named runtime
    graphs = plan_json("--model", "FLUX.1-dev", "--hardware", "H100", "--devices", "8", "--runtime", "graphs")
    assert graphs["tunables"]["launch_us"] == 0 and graphs["tunables"]["runtime"] == "graphs"
    assert all(p["host_bound_s"] == 0 for p in graphs["plans"] if p["feasible"])
    eager = plan_json("--model", "FLUX.1-dev", "--hardware", "H100", "--devices", "8")
    assert eager["tunables"]["launch_us"] == 25 and eager["tunables"]["runtime"] == "eager"
    mine = plan_json("--model", "FLUX.1-dev", "--hardware", "H100", "--devices", "8", "--runtime", "graphs",
                     "--launch-us", "7")
    assert mine["tunables"]["launch_us"] == 7 and mine["tunables"]["runtime"] == "--launch-us"
    compiled = plan_json("--model", "FLUX.1-dev", "--hardware", "H100", "--devices", "8", "--runtime", "compile")
    assert compiled["tunables"]["launch_us"] == 12.5


def test_part_of_a_box_names_its_cards_and_domains():
    # L40 preset: 8 cards in two sockets of 4 (domains 0-3 and 4-7); 6 cards take 0-5, spanning both
    doc = plan_json("--model", "CogVideoX1.5-5B", "--hardware", "L40", "--devices", "6")
    assert doc["cards"] == {"used": [0, 1, 2, 3, 4, 5], "of": 8, "domains": [[0, 1, 2, 3], [4, 5]],
                            "largest_group_in_one_domain": 4}
    text = run_script("plan.py", "--model", "CogVideoX1.5-5B", "--hardware", "L40", "--devices", "6",
                      check=0).stdout
    assert "cards used: 0-5 of 8 (ranks fill card 0 upward); their domains: 0-3 | 4-5" in text
    assert "every group of more than 4" in text
    whole = run_script("plan.py", "--model", "FLUX.1-dev", "--hardware", "H100", "--devices", "8", check=0).stdout
    assert "cards used" not in whole
