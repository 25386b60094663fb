"""plan.py says how sure it is and shows the evidence first: measured rows above the ranking, the provenance of every
input figure, one end-to-end speedup with its caps, a range by stratum with its held-out coverage, and the
Measure-it line. Values checked by hand from the shipped tables and the formulas."""

from __future__ import annotations

import json
import math

import pytest
from conftest import run_script
from ditpar.plan.decide import evidence, uncertainty
from ditpar.plan.judge import conformal

L20 = ("--model", "FLUX.1-dev", "--hardware", "L20", "--devices", "4")
HEADER = ("source_repo,source_path,model,hardware,interconnect,n_devices,resolution_or_seq,steps,ulysses,ring,"
          "pipefusion,cfg,tp,other_config,latency_s,notes")


def plan_json(*args):
    return json.loads(run_script("plan.py", *args, "--json", check=0).stdout)


def test_flux_on_4_l20_prints_the_shipped_table_above_the_ranking_and_names_the_disagreement():
    text = run_script("plan.py", *L20, check=0).stdout
    assert text.index("evidence first: measured FLUX.1-dev on L20 PCIe at 4 cards") < text.index(
        "FLUX.1-dev on L20 PCIe x8")
    # cache-dit's CONTEXT_PARALLEL.md ring table: Ulysses-4 8.22 s, one device 23.56 s -> 2.87x; USP-2-2 8.55 s -> 2.76x
    assert "U4           measured     8.22 s  speedup  2.87x" in text
    assert "U2 R2        measured     8.55 s  speedup  2.76x" in text
    assert "the ranking disagrees: cachedit_context_parallel.csv: measured fastest U4 (8.22 s) is predicted #" in text
    doc = plan_json(*L20)
    ev = doc["evidence"]
    assert ev["devices"] == 4 and ev["agrees"] is False
    ring = next(r for r in ev["runs"] if r["file"] == "cachedit_context_parallel.csv" and len(r["plans"]) == 4)
    assert [p["name"] for p in ring["plans"]] == ["U4", "U2 R2", "R4", "AG4"]   # 8.22 < 8.55 < 9.16 < 9.82 s
    assert ring["one_device_s"] == 23.56 and ring["framework"] == "vipshop/cache-dit"
    assert "1888d468cf44" in ring["date"]   # no date in the table: the source's commit
    assert ev["measured_order"][:2] == ["U4", "U2 R2"]
    predicted = {p["name"]: p["rank"] for p in doc["plans"]}
    assert ring["plans"][0]["predicted_rank"] == predicted["U4"] > 1


def test_your_own_evidence_table_ranks_by_measurement(tmp_path):
    table = tmp_path / "mine.csv"
    rows = ["me/bench,run.md,FLUX.1-dev,L20,PCIe,1,1024x1024,28,1,1,1,1,1,pytorch,20,one card",
            "me/bench,run.md,FLUX.1-dev,L20,PCIe,4,1024x1024,28,2,2,1,1,1,pytorch,6,usp",
            "me/bench,run.md,FLUX.1-dev,L20,PCIe,4,1024x1024,28,4,1,1,1,1,pytorch,5,ulysses",
            "me/bench,run.md,Wan2.1-T2V-14B,L20,PCIe,4,832x480x81 frames,50,4,1,1,1,1,pytorch,50,other model"]
    table.write_text(HEADER + "\n" + "\n".join(rows) + "\n")
    ev = plan_json(*L20, "--evidence", str(table))["evidence"]
    assert ev["source"] == "your --evidence table"
    (run,) = ev["runs"]
    assert [(p["name"], p["measured_s"]) for p in run["plans"]] == [("U4", 5.0), ("U2 R2", 6.0)]
    assert [p["measured_speedup"] for p in run["plans"]] == pytest.approx([4.0, 20 / 6])
    assert ev["measured_order"] == ["U4", "U2 R2"]


def test_no_shipped_folder_is_said(monkeypatch, tmp_path):
    monkeypatch.setattr(evidence, "SHIPPED", tmp_path / "absent")
    paths, origin = evidence.tables(None)
    assert paths == [] and origin == f"no shipped evidence found at {tmp_path / 'absent'}"


def test_set_is_given_and_never_narrows_a_band():
    # H800's intra_domain figures are measured on the class (x1.5); the same figure typed with --set is given (x2):
    # latencies stay, every band's high end grows by exposed x (2 - 1) - exposed x (1.5 - 1) = 0.5 x exposed
    args = ("--model", "FLUX.1-dev", "--hardware", "H800", "--devices", "8")
    base = plan_json(*args)
    bw = next(r["GBps"] for r in base["link_figures"] if r["link"] == "intra_domain")   # one bus figure, 160 GB/s
    given = plan_json(*args, "--set", f"links.intra_domain.bandwidth_GBps={bw:g}")
    rec = next(r for r in given["link_figures"] if r["link"] == "intra_domain")
    assert rec["measured"] is False and rec["provenance"] == "given"
    old = {p["name"]: p for p in base["plans"] if p["feasible"]}
    checked = 0
    for p in given["plans"]:
        if not p["feasible"] or p["pipeline_s"]:
            continue
        q = old[p["name"]]
        assert p["predicted_latency_s"] == pytest.approx(q["predicted_latency_s"])
        assert p["predicted_high_s"] >= q["predicted_high_s"] - 1e-9 and p["predicted_low_s"] <= q["predicted_low_s"] + 1e-9
        exposed = p["exposed_by_link_s"]["intra_domain"]
        assert p["predicted_high_s"] - q["predicted_high_s"] == pytest.approx(0.5 * exposed, rel=1e-6, abs=1e-9)
        checked += exposed > 0
    assert checked


def test_provenance_of_inputs():
    doc = plan_json("--model", "FLUX.1-dev", "--hardware", "H800", "--devices", "8", "--set", "mfu=0.4",
                    "--ref-latency", "30")
    kinds = {r["figure"]: r["provenance"] for r in doc["inputs"]}
    assert kinds["model"] == "preset" and kinds["mfu"] == "given" and kinds["compute rate"] == "measured"
    assert kinds["intra_domain bus bandwidth (every pattern; no per-pattern figure)"] == "preset"   # evidence measured
    # H800's mfu is borrowed from the H100 preset (its sources say so): borrowed, and the range's machine stratum
    plain = plan_json("--model", "FLUX.1-dev", "--hardware", "H800", "--devices", "8")
    assert {r["figure"]: r["provenance"] for r in plain["inputs"]}["mfu"] == "borrowed"
    lead = plain["plans"][0]["name"]
    assert plain["serial_stages"]["end_to_end_speedup"][lead]["stratum"] == "new or borrowed machine"


def test_amdahl_cap_and_the_card_count_by_hand():
    # one device 29.04 s of DiT + 0.32 s serial, 4 cards: (29.36) / (7.26 + 0.32) = 3.8734
    assert uncertainty.amdahl_cap(29.04, 0.32, 4) == pytest.approx(29.36 / 7.58)
    assert uncertainty.amdahl_cap(10.0, 0.0, 8) == pytest.approx(8.0)
    lo, hi = uncertainty.stratified_range(3.0, "all in collection", cap=3.2)
    q = uncertainty.RANGE_Q["all in collection"][0]
    assert lo == pytest.approx(3.0 * math.exp(-q)) and hi == 3.2


def test_no_printed_speedup_above_the_cap_and_one_headline():
    # Wan2.1-T2V-14B on 8 x Atlas 800I A2: the serial stages bind the end-to-end figure
    doc = plan_json("--model", "Wan2.1-T2V-14B", "--hardware", "Atlas 800I A2", "--devices", "8")
    e2e = doc["serial_stages"]["end_to_end_speedup"]
    total = doc["serial_stages"]["total_s"]
    for p in doc["plans"]:
        if not p["feasible"]:
            continue
        e = e2e[p["name"]]
        cards = p["devices"] // p["dp"] if "devices" in p else 8 // p["dp"]
        single = p["speedup_vs_1"] * p["predicted_latency_s"]
        # the serial stages as this plan runs them (its framework splits the VAE decode: vae_decode_s_by_plan)
        own = doc["serial_stages"]["text_encode_s"] + doc["serial_stages"]["vae_decode_s_by_plan"][p["name"]]
        cap = min(cards, (single + total) / (single / cards + own))
        assert e["cap"] == pytest.approx(cap)
        assert e["speedup"] <= cap + 1e-9 and e["high"] <= cap + 1e-9 and e["dit_speedup"] <= cards
    lead = doc["plans"][0]
    e = e2e[lead["name"]]
    assert e["cap_binds"] and e["high"] == pytest.approx(e["cap"])
    text = run_script("plan.py", "--model", "Wan2.1-T2V-14B", "--hardware", "Atlas 800I A2", "--devices", "8",
                      check=0).stdout
    line = next(ln for ln in text.splitlines() if ln.startswith("speedup of #1"))
    assert f"{e['speedup']:.1f}x end to end" in line and f"DiT loop {e['dit_speedup']:.1f}x" in line
    assert "80% range" in line and "held-out coverage" in line and "capped at" in line


def test_conformal_quantile_and_fallback_by_hand():
    assert conformal.conformal_q([float(i) for i in range(1, 11)], 0.8) == 9.0   # ceil(11 x 0.8) = 9th
    assert conformal.conformal_q([1.0, 2.0], 0.8) is None                        # ceil(3 x 0.8) = 3 > 2
    # round a: 20 in-collection rows 0.05..1.00; round b: 5 new-framework rows 0.1..0.5; round c: 1 machine row 0.05
    recs = ([{"round": "a", "stratum": "all in collection", "residual": round(0.05 * i, 2)} for i in range(1, 21)]
            + [{"round": "b", "stratum": "new framework", "residual": -round(0.1 * i, 1)} for i in range(1, 6)]
            + [{"round": "c", "stratum": "new or borrowed machine", "residual": 0.05}])
    t = conformal.quantile_table(recs, 0.8)
    assert t["all in collection"] == {"q": 0.85, "n": 20, "own": True, "rounds": 1}   # ceil(21 x 0.8) = 17th
    # pooled, 26 rows: ceil(27 x 0.8) = 22nd smallest; 16 rows are <= 0.5 (a 10, b 5, c 1), then a's 0.55 .. 0.80
    assert t["pooled"]["q"] == 0.80
    assert t["new framework"] == {"q": 0.80, "n": 5, "own": False, "rounds": 1}        # 5 rows < 20: pooled, same level
    # the machine stratum (a given or borrowed figure widens): the pooled q at 0.9, ceil(27 x 0.9) = 25th = 0.95
    assert t["new or borrowed machine"]["q"] == 0.95 and t["new or borrowed machine"]["own"] is False
    cov = conformal.loro_coverage(recs, 0.8)
    # a out: b + c, 6 rows, pooled ceil(7 x 0.8) = 6th = 0.5 -> a's 0.05..0.50 inside, 10 of 20
    # b out: a + c, 21 rows, ceil(22 x 0.8) = 18th = 0.85 (c's 0.05 first) -> b's 0.1..0.5 all inside
    # c out: a + b, 25 rows, pooled at 0.9 ceil(26 x 0.9) = 24th = 0.95 -> 0.05 inside; its pooled 0.8 q: 21st = 0.80
    assert (cov["all in collection"]["coverage"], cov["all in collection"]["n"]) == (0.5, 20)
    assert cov["all in collection"]["median_width"] == pytest.approx(math.exp(1.0))   # e^(2 x 0.5)
    assert (cov["new framework"]["coverage"], cov["new framework"]["n"]) == (1.0, 5)
    assert (cov["new or borrowed machine"]["coverage"], cov["new or borrowed machine"]["n"]) == (1.0, 1)
    assert cov["all strata"]["coverage"] == pytest.approx(16 / 26) and cov["all strata"]["rounds"] == 3
    # one pooled q on every row: a 0.5 (10 of 20), b 0.85 (5 of 5), c 0.80 (1 of 1)
    assert cov["pooled"]["coverage"] == pytest.approx(16 / 26) and cov["pooled"]["largest_round_share"] == 20 / 26
    assert cov["all in collection"]["within"] is False and cov["new framework"]["within"] is False
    # the machine stratum is never narrower than the in-collection one: 20 in-collection rows 1.0 x10 and 2.0 x10
    # (own q: the 17th, 2.0), 100 new-framework rows 0.1, one machine row; pooled at 0.9: ceil(122 x 0.9) = 110th = 1.0
    recs = ([{"round": "a", "stratum": "all in collection", "residual": 1.0 + (i >= 10)} for i in range(20)]
            + [{"round": "b", "stratum": "new framework", "residual": 0.1} for _ in range(100)]
            + [{"round": "c", "stratum": "new or borrowed machine", "residual": 0.05}])
    t = conformal.quantile_table(recs, 0.8)
    assert (t["all in collection"]["q"], t["new framework"]["q"], t["new or borrowed machine"]["q"]) == (2.0, 0.1, 2.0)


def test_sampling_interval_by_hand():
    # Bin(5, 0.8): P(X <= 1) = 0.00672, P(X <= 2) = 0.05792 -> 2 / 5; P(X <= 4) = 0.67232 < 0.95 -> 5 / 5
    assert conformal.sampling_interval(5, 0.8) == (0.4, 1.0)
    # Bin(10, 0.5): P(X <= 1) = 11 / 1024, P(X <= 2) = 56 / 1024 >= 0.05 -> 0.2; P(X <= 7) = 968 / 1024 < 0.95,
    # P(X <= 8) = 1013 / 1024 -> 0.8
    assert conformal.sampling_interval(10, 0.5) == (0.2, 0.8)


def test_a_given_or_borrowed_machine_never_narrows_the_shipped_range():
    q = {k: v[0] for k, v in uncertainty.RANGE_Q.items()}
    assert q["new or borrowed machine"] >= max(q["all in collection"], q["new framework"])
    # H800's mfu is borrowed (machine stratum); the in-collection question on H100 is not: the range is not narrower
    # and the same H100 question with its mfu typed by the user (--set: given) takes the machine stratum too
    e = {}
    for key, extra in (("H100", ()), ("H800", ()), ("H100 --set", ("--set", "mfu=0.5"))):
        doc = plan_json("--model", "FLUX.1-dev", "--hardware", key.split()[0], "--devices", "4", *extra)
        r = doc["serial_stages"]["end_to_end_speedup"][doc["plans"][0]["name"]]
        if r["high"] < r["cap"]:
            e[key] = (r["stratum"], r["high"] / r["speedup"])
    assert e["H100"] == ("all in collection", pytest.approx(math.exp(q["all in collection"])))
    machine = ("new or borrowed machine", pytest.approx(math.exp(q["new or borrowed machine"])))
    assert e["H800"] == e["H100 --set"] == machine


def test_round_of_and_family():
    assert conformal.round_of("benchmarks/published/mochi_xdit_l40.csv") == "round 5 (2026-12-05)"
    assert conformal.round_of("xdit_flux.csv") is None
    assert conformal.family("Wan2.1-T2V-14B") == "wan" and conformal.family("FLUX.2-dev") == "flux"


def test_measure_it_lists_every_link_figure_of_the_short_list():
    doc = plan_json(*L20)
    mi = doc["measure_it"]
    ops = {(f["link"], f["op"]) for f in mi["figures"]}
    # short list U2 R2, U2 AG2, R2 TP2, U2 TP2, U4: all-to-all (U), send/recv (ring), all-gather (AG, TP AdaLN),
    # all-reduce (TP), all on the one PCIe domain of cards 0-3
    assert ops == {("intra_domain", "all_to_all"), ("intra_domain", "sendrecv"), ("intra_domain", "all_gather"),
                   ("intra_domain", "all_reduce")}
    a2a = next(f for f in mi["figures"] if f["op"] == "all_to_all")
    assert a2a["groups"] == [[0, 1], [0, 1, 2, 3]] and '--groups "0,1;0,1,2,3"' in a2a["command"]
    assert mi["plan_bench"] and "scripts/plan_bench.py" in mi["plan_bench"]
    text = run_script("plan.py", *L20, check=0).stdout
    assert text.rstrip().splitlines()[-1].startswith("Measure it: the short list's order rests on 4 link figure(s)")


def test_shipped_range_is_the_fit_on_the_unseen_rounds():
    """uncertainty.RANGE_Q and COLLECTION are what `plan.py evaluate --tables benchmarks/published --coverage` fits:
    q per stratum at 0.8 on every unseen round, its held-out coverage, and the families, machines and frameworks."""
    from conftest import ROOT
    from ditpar.plan.cost import Tunables
    from ditpar.plan.judge import evaluate

    rep = conformal.report(evaluate.load_tables(ROOT / "benchmarks" / "published"), Tunables(), levels=(0.8,))
    lv = rep["levels"]["0.8"]
    assert rep["rows"] == sum(rep["by_round"].values())
    for stratum, (q, n, own, cov, held, rounds) in uncertainty.RANGE_Q.items():
        fit = lv["q"][stratum]
        assert (round(fit["q"], 3), fit["n"], fit["own"], fit["rounds"]) == (q, n, own, rounds), stratum
        got = lv["held_out"][stratum]
        assert (round(got["coverage"], 2), got["n"]) == (cov, held), stratum
    for key, values in uncertainty.COLLECTION.items():
        assert values <= set(rep["collection"][key]), key


def test_round_resampled_interval_by_hand():
    # round A: ten rows at 0.1; round B: ten at 1.0 (one stratum, under 20 rows: the pooled q). One round out: A is
    # covered by B's q (1.0), B not by A's (0.1): 0.5. A draw of A twice or B twice has no other round to hold out
    # against, so only the draws holding both say anything, and each says 0.5.
    recs = [{"round": rnd, "stratum": "all in collection", "residual": e} for rnd, e in (("A", 0.1), ("B", 1.0))
            for _ in range(10)]
    assert conformal.loro_coverage(recs, 0.8)["pooled"]["coverage"] == 0.5
    spread = conformal.round_resampled(recs, 0.8)["pooled"]
    assert spread["low"] == spread["high"] == 0.5
    assert 0 < spread["draws"] < conformal.RESAMPLE_DRAWS   # about half the draws hold both rounds
    # identical rounds: every draw gives the one-round-out figure itself
    same = [{"round": rnd, "stratum": "all in collection", "residual": e} for rnd in "ABC" for e in (0.1, 0.2, 0.3)]
    fixed = conformal.loro_coverage(same, 0.5)["pooled"]["coverage"]
    got = conformal.round_resampled(same, 0.5)["pooled"]
    assert got["low"] == got["high"] == fixed
    # a draw of one round three times (3 of 27 draws' worth) has nothing to hold it out against
    assert conformal.RESAMPLE_DRAWS * 0.8 < got["draws"] < conformal.RESAMPLE_DRAWS


def test_a_row_keeps_the_stratum_it_was_scored_in():
    # SGLang's CI baselines (round 6) were scored at 578f4ec, when no published table ran SGLang: a new framework. The
    # eighth round added an SGLang table, so today's collection holds the framework; the row keeps its label.
    import csv

    from conftest import ROOT
    from ditpar.plan.cost import Tunables
    from ditpar.plan.judge import evaluate

    with open(ROOT / "benchmarks" / "unseen_residuals.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    by_table = {}
    for r in rows:
        by_table.setdefault(r["table"], set()).add(r["stratum_at_scoring"])
    assert by_table["sglang_ci_h100_perf_baselines.csv"] == {"new framework"}
    # round 1's CogVideoX1.5 tables: the one CogVideoX table then published (xdit_cogvideo.csv) states no card count,
    # so no row of the family was scored: a new model family
    assert by_table["xdit_cogvideox15_l20.csv"] == by_table["xdit_cogvideox15_l40.csv"] == {"new model family"}
    now, _ = conformal.sample(evaluate.load_tables(ROOT / "benchmarks" / "published"), Tunables())
    assert {r["stratum"] for r in now if r["table"] == "sglang_ci_h100_perf_baselines.csv"} == {"all in collection"}
    recs = conformal.prechange_sample(conformal.PRECHANGE, {r["table"]: r["stratum"] for r in now})
    assert {r["stratum"] for r in recs if r["table"] == "sglang_ci_h100_perf_baselines.csv"} == {"new framework"}


def test_residual_file_without_or_with_a_bad_stratum_is_refused(tmp_path):
    from ditpar.errors import InputError

    head = "round,table,scored_at_commit,abs_log2_speedup_error"
    old = tmp_path / "old.csv"
    old.write_text(head + "\nr1,t.csv,abc,0.1\n")
    with pytest.raises(InputError, match="stratum_at_scoring"):
        conformal.prechange_sample(old, {"t.csv": "new framework"})
    bad = tmp_path / "bad.csv"
    bad.write_text(head + ",stratum_at_scoring\nr1,t.csv,abc,0.1,brand new\n")
    with pytest.raises(InputError, match=r"line 2: stratum_at_scoring 'brand new': expected one of all in collection"):
        conformal.prechange_sample(bad, {"t.csv": "new framework"})
