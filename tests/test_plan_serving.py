"""Serving answers of plan.py: --objective throughput (replicas x plan, requests per second), the work-per-rank line,
the fixed cost per collective call (small work), and linear attention's state all-reduce (no head rule)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from conftest import ROOT, run_script

LINEAR = str(ROOT / "tests" / "data" / "planbench" / "tiny-linear.toml")
OWN_STACK = str(ROOT / "templates" / "frameworks" / "custom-own-stack.toml")
FLUX = ["--model", "FLUX.1-dev", "--hardware", "H100", "--devices", "8", "--resolution", "1024x1024"]


def _result(name: str, dp: int, latency: float, feasible: bool = True, exact: bool = True):
    from ditpar.plan.cost import Plan
    from ditpar.plan.inputs.plan_names import parse_plan_name

    deg = {k: v for k, v in parse_plan_name(name).items() if k != "patches"}
    plan = Plan(**{**deg, "dp": dp})
    return SimpleNamespace(plan=plan, latency_s=latency, feasible=feasible, exact=exact, framework="fw")


def test_requests_per_second_by_hand():
    from ditpar.plan.decide import throughput

    hw = SimpleNamespace(devices_per_node=8)
    stages = SimpleNamespace(total_s=0.5)
    rows = throughput.splits([_result("TP8", 1, 2.0), _result("U4", 2, 3.0), _result("U4", 2, 2.9, exact=False),
                              _result("single", 8, 9.5), _result("U2", 4, 4.0, feasible=False)], stages, hw, 8)
    by = {r["replicas"]: r for r in rows}
    assert sorted(by) == [1, 2, 8]                        # the infeasible 4 x U2 and the approximate U4 left out
    assert by[1]["requests_per_s"] == pytest.approx(1 / 2.5)      # 0.4
    assert by[2]["requests_per_s"] == pytest.approx(2 / 3.5)      # 0.5714
    assert by[8]["requests_per_s"] == pytest.approx(8 / 10.0)     # 0.8
    assert by[2]["request_latency_s"] == pytest.approx(3.5) and by[2]["plan"] == "U4"
    rec = throughput.record(rows, "throughput")
    assert rec["throughput_best"]["replicas"] == 8 and rec["latency_best"]["replicas"] == 1 and rec["differ"]
    text = "\n".join(throughput.lines(rec, "throughput"))
    assert "8 x single" in text and "1 x TP8" in text and "0.8 requests/s" in text


def test_two_nodes_divide_requests_per_second():
    from ditpar.plan.decide import throughput

    rows = throughput.splits([_result("U8", 2, 1.0)], None, SimpleNamespace(devices_per_node=8), 16)
    assert rows[0]["nodes"] == 2 and rows[0]["requests_per_s_per_node"] == pytest.approx(1.0)   # 2 / 1 s / 2 nodes


def test_flux_on_8_h100_throughput_objective():
    proc = run_script("plan.py", *FLUX, "--objective", "throughput", "--json", check=0)
    doc = json.loads(proc.stdout)
    thr = doc["throughput"]["throughput_best"]
    assert doc["objective"] == "throughput" and thr["replicas"] > 1
    plans = {p["name"]: p for p in doc["plans"] if p["feasible"]}
    serial = doc["serial_stages"]["total_s"]
    # requests per second from the plan's own predicted latency and the serial stages, independently
    assert thr["requests_per_s"] == pytest.approx(thr["replicas"] / (plans[thr["name"]]["predicted_latency_s"] + serial))
    best = max(doc["throughput"]["splits"], key=lambda s: s["requests_per_s"])
    assert best["replicas"] == thr["replicas"]
    lead = next(p for p in doc["plans"] if p["feasible"])
    work = doc["work_per_rank"]
    assert work["plan"] == lead["name"]
    sp = lead["ulysses"] * lead["ring"] * lead["kv_allgather"]
    assert work["image_tokens_per_rank"] == pytest.approx(4096 / sp)
    text = run_script("plan.py", *FLUX, "--objective", "throughput", check=0).stdout
    assert "throughput-best split" in text and "requests/s" in text and "For throughput run" in text
    assert f"work per rank under {lead['name']} (latency-best)" in text


def test_latency_objective_still_names_the_throughput_split():
    text = run_script("plan.py", *FLUX, check=0).stdout
    assert "throughput-best split:" in text and "(--objective throughput lists every split)" in text
    assert "conclusion:\n  On H100" in text           # the latency answer leads


def test_throughput_without_replicas_is_a_usage_error():
    proc = run_script("plan.py", *FLUX, "--objective", "throughput", "--no-dp", check=2)
    assert proc.stderr.count("\n") == 1 and "drop --no-dp" in proc.stderr


def test_scaling_stop_matches_independent_predictions():
    from ditpar.plan.cost import Plan, Tunables, make_shape, predict
    from ditpar.plan.decide.scaling import scaling_stop
    from ditpar.plan.inputs import presets

    m = presets.resolve_model("FLUX.1-dev")
    hw = presets.resolve_hardware("H100", None, 8)
    s = make_shape(m, 1024, 1024, 1, 28, cfg=False)
    got = scaling_stop(m, hw, s, Plan(ulysses=8), Tunables())
    lat = {u: predict(m, hw, s, Plan(ulysses=u), Tunables()).latency_s for u in (1, 2, 4, 8)}
    assert [x["gain"] for x in got["steps"]] == pytest.approx([lat[1] / lat[2], lat[2] / lat[4], lat[4] / lat[8]])
    assert [x["work_to"] for x in got["steps"]] == [4608 / 2, 4608 / 4, 4608 / 8]    # (4096 + 512) / sp
    first = next((x for x in got["steps"] if x["gain"] < 1.10), None)
    assert got["stop"] == first


def test_call_cost_is_charged_per_collective_call():
    """U2 issues 4 all-to-alls per block: FLUX has 19 + 38 blocks, 28 steps -> 6384 calls; 100 us more per call is
    0.6384 s more (no overlap hides it; no host cost, so no host-bound block absorbs it)."""
    from ditpar.plan.cost import Plan, Tunables, make_shape, predict
    from ditpar.plan.inputs import presets

    m = presets.resolve_model("FLUX.1-dev")
    hw = presets.resolve_hardware("H100", None, 2)
    s = make_shape(m, 1024, 1024, 1, 28, cfg=False)
    a = predict(m, hw, s, Plan(ulysses=2), Tunables(launch_us=0.0, call_us=0.0)).latency_s
    b = predict(m, hw, s, Plan(ulysses=2), Tunables(launch_us=0.0, call_us=100.0)).latency_s
    assert b - a == pytest.approx(4 * 57 * 28 * 100e-6, rel=1e-6)


def test_linear_state_bytes_by_hand():
    from ditpar.plan.cost.linear_attention import state_allreduce_bytes, state_bytes

    # 20 heads of 112: (112 + 1) x 112 fp32 each = 50,624 B; 20 heads = 1,012,480 B; ring all-reduce over 4
    # sends 2 x 3 / 4 of it = 1,518,720 B
    assert state_bytes(112, 20, 1) == 1_012_480
    assert state_allreduce_bytes(112, 20, 1, 4) == 1_518_720
    assert state_allreduce_bytes(112, 20, 1, 1) == 0


def test_linear_attention_model_file_priced_without_the_head_rule(tmp_path):
    f = tmp_path / "lin.toml"
    f.write_text('name = "Lin"\nheads = 20\nkv_heads = 20\nhead_dim = 112\nlayers = 20\nhidden = 2240\nffn = 5600\n'
                 'text_tokens = 300\ncfg = true\nattention = "linear"\nlatent = [21, 22, 40]\npatch = [1, 1, 1]\n')
    doc = json.loads(run_script("plan.py", "--model-file", str(f), "--hardware", "H100", "--devices", "8",
                                "--framework", OWN_STACK, "--json", check=0).stdout)
    plans = {p["name"]: p for p in doc["plans"]}
    ag8 = plans["AG8"]
    assert ag8["feasible"], ag8["gates"]
    # batch 2 (CFG in one rank), 20 heads x 113 x 112 x 4 B = 1,012,480 B a sample; x 2 samples x 2 x 7 / 8
    assert ag8["bytes_per_layer_by_link"]["intra_domain"] == pytest.approx(3_543_680)
    assert set(ag8["exposed_by_collective_s"]) <= {"linear-attention state all-reduce", "CFG all-gather"}
    assert not plans["U8"]["feasible"] and "heads 20" in plans["U8"]["gates"][0]["reason"]


def test_attention_key_of_a_model_file_is_checked(tmp_path):
    f = tmp_path / "bad.toml"
    f.write_text('name = "B"\nheads = 4\nkv_heads = 4\nhead_dim = 8\nlayers = 2\ncfg = true\ntokens = 16\n'
                 'attention = "sparse"\n')
    proc = run_script("plan.py", "--model-file", str(f), "--hardware", "H100", "--devices", "2", check=2)
    assert proc.stderr.count("\n") == 1 and "attention" in proc.stderr and "bad.toml" in proc.stderr


def test_plan_bench_builds_linear_attention_and_matches_one_device():
    from test_plan_bench import FAST, _doc, spawn

    doc = _doc(spawn(2, "--model-file", LINEAR, "--plans", "AG2", "U2", "R2", "cfg2", "TP2", "--json", *FAST))
    by = {r["name"]: r for r in doc["plans"]}
    for r in by.values():
        assert r["checked"] and r["max_abs_err"] <= r["tolerance"], r
    # AG2: the state of batch 2 x 4 heads x (8 + 1) x 8 = 576 fp32 elements, all-reduced over 2: 2 x 1 / 2 of it
    assert by["AG2"]["elements_per_rank_per_block"] == 576
    priced = json.loads(run_script("plan.py", "--model-file", LINEAR, "--hardware", "H100", "--devices", "2",
                                   "--framework", OWN_STACK, "--json", check=0).stdout)
    ag2 = next(p for p in priced["plans"] if p["name"] == "AG2")
    assert sum(ag2["bytes_per_layer_by_link"].values()) == 576 * 4                     # fp32 state


def test_two_call_cfg_doubles_a_step_of_batch_one():
    """Wan runs its CFG branches as two transformer calls: without CFG parallel a step is two batch-1 forwards (the
    same plan priced without CFG, twice); CFG parallel runs one forward per rank and is not doubled."""
    import dataclasses

    from ditpar.plan.cost import Plan, make_shape, predict
    from ditpar.plan.inputs import presets

    m = presets.resolve_model("Wan2.1-T2V-1.3B")
    hw = presets.resolve_hardware("H100", None, 4)
    s = make_shape(m, 832, 480, 17, 10)
    assert s.cfg
    one = predict(m, hw, dataclasses.replace(s, cfg=False), Plan(ulysses=4)).latency_s
    assert predict(m, hw, s, Plan(ulysses=4)).latency_s == pytest.approx(2 * one)
    flux = presets.resolve_model("PixArt-alpha")          # a batched pipeline: one call on a batch of 2
    sp = make_shape(flux, 1024, 1024, 1, 10)
    assert predict(flux, hw, sp, Plan(ulysses=2)).latency_s != pytest.approx(
        2 * predict(flux, hw, dataclasses.replace(sp, cfg=False), Plan(ulysses=2)).latency_s)


def test_a_split_within_five_percent_with_lower_latency_is_named():
    """16 x single at 16 / 2000 s = 0.008 requests/s; 4 x U4 at 4 / 520 s = 0.00769 (96 %, within 5 %) with a
    quarter of the latency; 2 x U8 at 2 / 270 s = 0.0074 (93 %) is not."""
    from ditpar.plan.decide import throughput

    rows = throughput.splits([_result("single", 16, 2000.0), _result("U4", 4, 520.0), _result("U8", 2, 270.0)],
                             None, SimpleNamespace(devices_per_node=8), 16)
    rec = throughput.record(rows, "throughput")
    assert rec["throughput_best"]["replicas"] == 16
    assert rec["near_best"]["replicas"] == 4 and rec["near_best"]["requests_per_s"] == pytest.approx(4 / 520)
    text = throughput.conclusion_sentence(rec)
    assert "(0.004 per node)" in text and "4 x U4 serves 96% of that" in text and "520 s a request" in text


def test_work_outside_the_loop_by_hand():
    """FLUX.1-dev 1024^2 on 8 H100: the serial stages hold all 8 cards of 1 x U8 (8 x their seconds as its framework runs
    them, the decode split over the 8), one card of a single-card replica, and U8's
    per-step output all-gather is 7 latency steps of 10 us + one 10 us call + 7 shards of 4096 x 2 x 2 x 16 x 2 B / 8
    at the preset's 370 GB/s bus bandwidth, named beside the latency, not in it."""
    r = run_script("plan.py", *FLUX, "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    out = d["outside_loop"]
    st = d["serial_stages"]
    serial = st["text_encode_s"] + st["vae_decode_s_by_plan"]["U8"]      # xDiT splits FLUX's decode over the 8
    one_u8 = next(s for s in out["splits"] if s["cards_per_replica"] == 8)
    assert one_u8["card_seconds"] == pytest.approx(8 * serial)
    single = next(s for s in out["splits"] if s["cards_per_replica"] == 1)
    assert single["card_seconds"] == pytest.approx(st["text_encode_s"] + st["vae_decode_s"])
    g = out["sp_output_gather"]
    assert (g["plan"], g["group_size"], g["latency_steps"]) == ("U8", 8, 7)
    shard = 4096 * 2 * 2 * 16 * 2 / 8
    assert g["per_step_s"] == pytest.approx(7 * 10e-6 + 10e-6 + 7 * shard / 370e9, rel=0.02)
    assert g["per_request_s"] == pytest.approx(28 * g["per_step_s"])
    lead = next(p for p in d["plans"] if p["name"] == "U8")
    assert "SP output all-gather" not in lead["exposed_by_collective_s"]
    split = next(s for s in d["throughput"]["splits"] if s["replicas"] == 1)      # 1 x U8 on xDiT (DistVAE)
    assert split["request_latency_s"] == pytest.approx(lead["predicted_latency_s"] + serial)
    assert split["request_latency_s"] == pytest.approx(st["end_to_end_s"]["U8"])   # the stage-wall figure
    text = run_script("plan.py", *FLUX).stdout
    assert "outside the DiT loop, growing with the cards" in text and "U8 gathers its output over 8 cards" in text


def test_plan_bench_measures_the_throughput_side_of_a_replica_split():
    """'U2 DP2' on 4 ranks runs two U2 replicas at once: requests_per_s = 2 / request_s; a plan without DP serves
    1 / request_s; both in the JSON rows, the CSV columns and the table."""
    from test_plan_bench import FAST, _doc, spawn

    doc = _doc(spawn(4, "--model-file", LINEAR, "--plans", "U2 DP2", "DP4", "U4", "--json", *FAST))
    by = {r["name"]: r for r in doc["plans"]}
    assert by["U2 DP2"]["requests_per_s"] == pytest.approx(2 / by["U2 DP2"]["request_s"])
    assert by["U4"]["requests_per_s"] == pytest.approx(1 / by["U4"]["request_s"])
    assert by["DP4"]["requests_per_s"] == pytest.approx(4 / by["DP4"]["request_s"])      # 4 x single
    from ditpar.planbench.report import CSV_COLUMNS

    assert "requests_per_s" in CSV_COLUMNS
