"""plan/decide/rank.py at its edges (issue 29): the order of the ranking and its tie-breaks, the runner-up rule,
the gates each ranked plan carries, the errors when no (exact) plan fits, the weight all-gather of the G2
unlock worked out by hand, calibration to a measured latency, and the conclusion's sentences.

Where the test needs a controlled situation (every plan predicted equal, a chosen plan vetoed), it replaces
the prediction or a gate with a stub; the expected order then follows from the rule alone."""

from __future__ import annotations

import dataclasses
import math

import pytest
from costmodel_fixtures import box, tiny_model
from ditpar.errors import InputError
from ditpar.plan.cost import Plan, Tunables, make_shape, predict
from ditpar.plan.cost.timing import Breakdown
from ditpar.plan.decide import gates, rank
from ditpar.plan.decide.rank import (
    PlanResult,
    add_weight_gather,
    calibrate,
    conclusion,
    pair_tunables,
    rank_plans,
    runner_up,
)
from ditpar.plan.inputs.presets import LinkClass

TUN = Tunables()


def _setup(devices=4, width=256, **model_kw):
    m, hw = tiny_model(**model_kw), box(devices=devices, domain_size=devices)
    return m, hw, make_shape(m, width, width, 1, 10)


def _res(plan, latency, exact=True, feasible=True, **kw):
    bd = Breakdown(plan=plan, latency_s=latency)
    return PlanResult(plan, bd, [], feasible, exact=exact, **kw)


# ---------------------------------------------------------------- rank_plans: inputs, defaults, gates

def test_more_devices_than_the_machine_has():
    m = tiny_model()
    hw = dataclasses.replace(box(devices=4, domain_size=4), nodes=2)     # 2 nodes x 4 = 8 devices
    s = make_shape(m, 64, 64, 1, 10)
    assert rank_plans(m, hw, s, 8, TUN, detail=False)[0].plan.devices == 8
    with pytest.raises(InputError, match=r"--devices 9: box has 8 devices \(use a multi-node preset, "
                                         r"e\.g\. 'box, 2 nodes'\)"):
        rank_plans(m, hw, s, 9, TUN)


def test_one_device_ranks_the_single_plan():
    m, hw, s = _setup(devices=1)
    [r] = rank_plans(m, hw, s, 1, TUN)
    assert r.plan == Plan() and r.rank == 1 and r.feasible
    assert r.speedup_vs_1 == pytest.approx(1.0, rel=1e-12)
    assert [g.gate for g in r.gates] == ["G1", "G2", "G3", "G4", "G5", "G6"]   # no runner-up: no G7
    assert (r.gates[-1].verdict, r.gates[-1].reason) == ("info", "not in the top two: no A/B required")  # no pair


def test_defaults_rank_data_parallel_and_pipefusion_plans_and_attach_every_gate():
    m, hw, s = _setup()
    res = rank_plans(m, hw, s, 4, TUN)
    plans = [r.plan for r in res]
    assert Plan(dp=4) in plans and Plan(ulysses=2, dp=2) in plans           # with_dp defaults to True
    pf = [r.plan for r in res if r.plan.pipefusion > 1]
    assert pf and all(p.patches == 0 and p.warmup == 1 for p in pf)        # default patches and warm-up
    assert [r.rank for r in res] == list(range(1, len(res) + 1))
    single = predict(m, hw, s, Plan(), TUN).latency_s
    feas = [r for r in res if r.feasible]
    for r in feas:   # speed-up against one device, predicted on its own
        assert r.speedup_vs_1 == pytest.approx(single / predict(m, hw, s, r.plan, r.tunables).latency_s, rel=1e-12)
        assert r.pad_tokens == 0                                            # no framework profiles: no padding
    for r in res:
        if not r.feasible:
            assert r.pad_tokens == 0 and r.framework == "" and math.isnan(r.speedup_vs_1)
            assert [g.gate for g in r.gates] == ["G1"] and r.latency_s == math.inf
    # exact plans before approximate ones (allow_approximate defaults to False)
    exact_flags = [r.exact for r in feas]
    assert exact_flags == sorted(exact_flags, reverse=True) and not exact_flags[-1]


def test_gates_of_the_pair_and_of_the_others():
    m, hw, s = _setup()
    res = rank_plans(m, hw, s, 4, TUN)
    feas = [r for r in res if r.feasible]
    lead, second = feas[0], runner_up(feas)
    assert second is not None and second is not lead
    for r in feas:
        names = [g.gate for g in r.gates]
        assert names[:6] == ["G1", "G2", "G3", "G4", "G5", "G6"]
        g6 = r.gates[5]
        if r is lead or r is second:
            other = second if r is lead else lead
            assert g6.verdict == "warn" and g6.reason.startswith(f"run {r.plan.name} vs {other.plan.name} ")
            assert names[6:] == ["G7"]
        else:
            assert g6.verdict == "info" and g6.reason == "not in the top two: no A/B required"
            assert names[6:] == []
    assert lead.gates[-1] is second.gates[-1]                               # one G7 for the pair
    expected = gates.projection(m, hw, s, lead.plan, second.plan, pair_tunables(lead, second, TUN))
    assert lead.gates[-1] == expected


def test_without_detail_only_g1_and_g2():
    m, hw, s = _setup()
    res = rank_plans(m, hw, s, 4, TUN, detail=False)
    assert all([g.gate for g in r.gates] == ["G1", "G2"] for r in res if r.feasible)
    assert [r.rank for r in res] == list(range(1, len(res) + 1))


# ---------------------------------------------------------------- order and tie-breaks

def _flat_predict(monkeypatch, latency=lambda plan: 1.0):
    """Every plan predicted by `latency(plan)`, nothing else (memory 0: G2 passes)."""
    def fake(model, hw, shape, plan, tun):
        return Breakdown(plan=plan, latency_s=latency(plan), compute_s=latency(plan) / 2)
    monkeypatch.setattr(rank, "predict", fake)


def test_tie_breaks_exact_then_one_request_then_fewer_replicas(monkeypatch):
    _flat_predict(monkeypatch)
    m, hw, s = _setup()
    res = rank_plans(m, hw, s, 4, TUN, detail=False)
    feas = [r for r in res if r.feasible]
    keys = [(not r.exact, r.plan.dp > 1, r.plan.dp) for r in feas]
    assert keys == sorted(keys)                         # equal latency: exact, then dp = 1, then smaller dp
    assert feas[0].exact and feas[0].plan.dp == 1 and not feas[-1].exact
    dp_plans = [r.plan.dp for r in feas if r.exact and r.plan.dp > 1]
    assert dp_plans == sorted(dp_plans) and dp_plans[0] == 2 and dp_plans[-1] == 4
    assert all(not r.feasible for r in res[len(feas):])  # vetoed plans last


def test_allow_approximate_ranks_by_latency_alone(monkeypatch):
    # PipeFusion plans predicted fastest: ranked first once approximate plans are allowed, last otherwise
    _flat_predict(monkeypatch, lambda plan: 0.5 if plan.pipefusion > 1 else 1.0)
    m, hw, s = _setup()
    allowed = [r for r in rank_plans(m, hw, s, 4, TUN, detail=False, allow_approximate=True) if r.feasible]
    assert allowed[0].plan.pipefusion > 1 and not allowed[0].exact
    strict = [r for r in rank_plans(m, hw, s, 4, TUN, detail=False) if r.feasible]
    assert strict[0].exact and strict[-1].plan.pipefusion > 1
    first_approx = next(i for i, r in enumerate(strict) if not r.exact)
    assert all(not r.exact for r in strict[first_approx:])


def test_data_parallel_plans_rank_after_one_request_plans_even_when_faster(monkeypatch):
    _flat_predict(monkeypatch, lambda plan: 0.1 if plan.dp > 1 else 1.0)
    m, hw, s = _setup()
    feas = [r for r in rank_plans(m, hw, s, 4, TUN, detail=False) if r.feasible and r.exact]
    first_dp = next(i for i, r in enumerate(feas) if r.plan.dp > 1)
    assert first_dp > 0 and all(r.plan.dp > 1 for r in feas[first_dp:])


# ---------------------------------------------------------------- no (exact) plan fits

def test_only_data_parallelism_left_is_not_a_plan_for_one_request(monkeypatch):
    real = gates.availability

    def only_dp(model, hw, shape, plan, frameworks=None):
        if plan.dp == plan.devices:
            return real(model, hw, shape, plan, frameworks)
        return gates.Gate("G1", "form availability", "veto", f"stub veto of {plan.name}; detail")
    monkeypatch.setattr(gates, "availability", only_dp)
    m, hw, s = _setup(devices=2)
    with pytest.raises(InputError) as err:
        rank_plans(m, hw, s, 2, TUN)
    msg = str(err.value)
    # the first three vetoes, sorted, each cut at its first ';'
    assert msg == ("no plan can use 2 devices for one request of tiny on box (G1/G2 vetoes, e.g.): "
                   "stub veto of A2D2 | stub veto of AG2 | stub veto of PF2")


def test_memory_vetoes_name_the_smallest_lossless_unlock():
    # text encoder 10e9 x 2 B = 20 GB on every rank > 95 % of 20 GB (past the tight band). The memory unlocks apply
    # and price the cheapest lossless one instead of refusing: the offloaded encoder leaves 22.003 - 20 = 2.003 GB,
    # and its 20 GB cross the H100's host link (PCIe Gen5 x16 63 GB/s x 0.8 = 50.4 GB/s) once a request: +0.397 s
    m = tiny_model(params_b=1.0, text_encoder_params_b=10.0)
    hw = dataclasses.replace(box(devices=1, domain_size=1), memory_GB=20.0, accelerator="H100")
    s = make_shape(m, 64, 64, 1, 10)
    bare = predict(m, hw, s, Plan(), TUN)
    assert bare.memory_parts_GB["text_encoder_GB"] == pytest.approx(20.0) and bare.memory_GB > 20.0 * 0.95
    (single,) = rank_plans(m, hw, s, 1, TUN)
    assert single.feasible and single.unlocks == ("te",)
    assert single.breakdown.memory_GB == pytest.approx(bare.memory_GB - 20.0, rel=1e-12)
    assert single.latency_s == pytest.approx(bare.latency_s + 20.0 / 50.4, rel=1e-9)
    g2 = next(g for g in single.gates if g.gate == "G2")
    assert (g2.verdict, g2.reason) == ("warn", "does not fit as is (22.0 GB per rank > 18.0 GB, 90% of 20 GB); unlocked "
                                               "by text-encoder offload, applied and priced (+0.40 s): 2.0 GB per rank")
    # nothing fits: 11e9 x 2 B = 22 GB of weights alone exceed the 20 GB card; one card cannot shard them and the
    # box's accelerator has no known host link to stream them from: still a refusal, naming no unlock
    big = tiny_model(params_b=11.0, text_encoder_params_b=10.0)
    with pytest.raises(InputError) as err:
        rank_plans(big, dataclasses.replace(hw, accelerator="X"), s, 1, TUN)
    msg = str(err.value)
    assert msg.startswith("no plan can use 1 devices for one request of tiny on box (G1/G2 vetoes, e.g.): 42.0 GB > "
                          "18.0 GB (90% of 20 GB) (weights 22.0, ")
    assert msg.count(" GB > ") == 1 and "lossless" not in msg and "fits with the unlock" not in msg


def test_no_exact_plan_names_the_best_approximate_one_and_the_exact_vetoes(monkeypatch):
    real = gates.availability

    def only_pf(model, hw, shape, plan, frameworks=None):
        if plan.pipefusion > 1:
            return real(model, hw, shape, plan, frameworks)
        return gates.Gate("G1", "form availability", "veto", f"stub veto of {plan.name}; detail")
    monkeypatch.setattr(gates, "availability", only_pf)
    m, hw, s = _setup(devices=2)
    with pytest.raises(InputError) as err:
        rank_plans(m, hw, s, 2, TUN)
    assert str(err.value) == (
        "no exact plan can use 2 devices for tiny on box; only approximate plans fit (best PF2: stale activations "
        "change the output): add --allow-approximate to rank them (exact plans fail: stub veto of A2D2 | "
        "stub veto of AG2)")
    res = rank_plans(m, hw, s, 2, TUN, allow_approximate=True)
    assert res[0].plan == Plan(pipefusion=2) and res[0].feasible and not res[0].exact


def test_no_exact_plan_quotes_the_smallest_exact_memory_veto(monkeypatch):
    def mem(model, hw, shape, plan, bd):
        if plan.pipefusion > 1:
            return gates.Gate("G2", "memory fit", "pass", "fits")
        return gates.Gate("G2", "memory fit", "veto", f"{plan.name} needs {bd.memory_GB:.6f} GB; more")
    monkeypatch.setattr(gates, "memory_fit", mem)
    m, hw, s = _setup(devices=2, params_b=1.0)
    exact = [p for p in (Plan(ulysses=2), Plan(ring=2), Plan(kv_allgather=2), Plan(tp=2))]
    smallest = min(exact, key=lambda p: predict(m, hw, s, p, TUN).memory_GB)
    assert smallest == Plan(tp=2)                         # TP halves the weights
    with pytest.raises(InputError) as err:
        rank_plans(m, hw, s, 2, TUN)
    gb = predict(m, hw, s, smallest, TUN).memory_GB
    assert str(err.value).endswith(f"(exact plans fail: TP2: TP2 needs {gb:.6f} GB; more)")


# ---------------------------------------------------------------- runner-up and the pair's tunables

def test_runner_up_rules():
    assert runner_up([]) is None
    u2, r2 = Plan(ulysses=2), Plan(ring=2)
    lead = _res(u2, 1.0)
    # the next plan differing only in dp is the same plan on fewer cards: skipped
    twin, other = _res(Plan(ulysses=2, dp=2), 1.1), _res(r2, 1.2)
    assert runner_up([lead, other]) is other
    dp_lead = _res(Plan(ulysses=2, dp=2), 1.0)
    assert runner_up([dp_lead, _res(u2, 1.1), other]) is other
    assert runner_up([lead, twin, other]) is other
    # a leader using every card is compared with plans that do too; a dp leader with dp plans as well
    dp_other = _res(Plan(ring=2, dp=2), 1.1)
    assert runner_up([lead, dp_other, other]) is other
    assert runner_up([lead, dp_other]) is None
    assert runner_up([dp_lead, dp_other]) is dp_other
    # an exact leader skips approximate plans; an approximate leader takes either
    approx = _res(Plan(pipefusion=2), 1.1, exact=False)
    assert runner_up([lead, approx, other]) is other
    assert runner_up([lead, approx]) is None
    a_lead = _res(Plan(pipefusion=2, ulysses=2), 1.0, exact=False)
    assert runner_up([a_lead, approx]) is approx
    assert runner_up([a_lead, other]) is other
    assert runner_up([lead, other, _res(Plan(tp=2), 1.3)]) is other      # the first that qualifies


def test_pair_tunables_take_the_tp_plans():
    tp_tun = dataclasses.replace(TUN, tp_linear_host_us=7.0)
    u_tun = dataclasses.replace(TUN, launch_us=1.0)
    tp = _res(Plan(tp=2), 1.0, tunables=tp_tun)
    u = _res(Plan(ulysses=2), 1.1, tunables=u_tun)
    assert pair_tunables(tp, u, TUN) is tp_tun
    assert pair_tunables(u, tp, TUN) is tp_tun
    assert pair_tunables(u, None, TUN) is TUN                 # no TP plan: the ranking's tunables
    assert pair_tunables(u, _res(Plan(ring=2), 1.2, tunables=u_tun), TUN) is TUN
    assert pair_tunables(_res(Plan(tp=2), 1.0), u, TUN) is TUN   # a TP plan without its own tunables


def test_latency_is_the_breakdowns():
    assert _res(Plan(), 2.5).latency_s == 2.5


# ---------------------------------------------------------------- weight all-gather of the G2 unlock

def _bd(compute_s):
    return Breakdown(plan=Plan(ulysses=4), latency_s=1.0, compute_s=compute_s, hidden_s=0.25, memory_GB=10.0,
                     memory_parts_GB={"weights_GB": 8.0, "activations_GB": 2.0})


def test_weight_gather_exposed_by_hand():
    hw = box(devices=4, domain_size=4, intra=100.0)          # 1 us latency, NVLink: 100 GB/s per rank
    s = make_shape(tiny_model(), 64, 64, 1, 10)
    bd = _bd(compute_s=0.1)                                  # 10 steps: 0.01 s of compute per step
    add_weight_gather(hw, s, Plan(ulysses=4), bd)
    # ring all-gather of 8 GB over 4 ranks: 3/4 x 8e9 B / 100e9 B/s = 0.06 s + 3 hops x 1 us
    gather = 0.06 + 3e-6
    exposed = (gather - 0.01) * 10
    assert bd.latency_s == pytest.approx(1.0 + exposed, rel=1e-12)
    assert bd.exposed_by_link_s["intra_domain"] == pytest.approx(exposed, rel=1e-12)
    assert bd.exposed_by_family_s["weight all-gather (layer-wise sharding)"] == pytest.approx(exposed, rel=1e-12)
    assert bd.hidden_s == pytest.approx(0.25 + gather * 10 - exposed, rel=1e-12)
    assert bd.memory_GB == pytest.approx(10.0 - 8.0 * 3 / 4, rel=1e-12)
    assert bd.memory_parts_GB == {"weights_GB": 2.0, "activations_GB": 2.0}
    assert bd.notes == ["weights sharded layer-wise over all ranks (G2 unlock); their all-gather is included"]


def test_weight_gather_hidden_behind_compute_and_shared_pcie():
    hw = box(devices=4, domain_size=4, intra=100.0, interconnect="PCIe")   # 4 senders share: 100 x 2/4
    s = make_shape(tiny_model(), 64, 64, 1, 10)
    bd = _bd(compute_s=10.0)                                 # 1 s of compute per step hides the gather
    add_weight_gather(hw, s, Plan(ulysses=4), bd)
    gather = 0.75 * 8e9 / 50e9 + 3e-6
    assert bd.latency_s == 1.0 and bd.exposed_by_link_s["intra_domain"] == 0.0
    assert bd.exposed_by_family_s["weight all-gather (layer-wise sharding)"] == 0.0
    assert bd.hidden_s == pytest.approx(0.25 + gather * 10, rel=1e-12)


def test_weight_gather_across_domains_uses_the_slow_class():
    hw = box(devices=4, domain_size=2, intra=100.0, inter=10.0)
    hw = dataclasses.replace(hw, links={**hw.links, "inter_domain": LinkClass("slow", 10.0, 2.0)})   # 2 us
    s = make_shape(tiny_model(), 64, 64, 1, 10)
    bd = _bd(compute_s=0.1)
    add_weight_gather(hw, s, Plan(ulysses=4), bd)
    gather = 0.75 * 8e9 / 10e9 + 3 * 2e-6
    assert bd.exposed_by_link_s["inter_domain"] == pytest.approx((gather - 0.01) * 10, rel=1e-12)
    assert bd.exposed_by_link_s["intra_domain"] == 0.0


# ---------------------------------------------------------------- calibration

def test_calibrate_rejects_non_positive_and_too_small_references():
    m, hw, s = _setup()
    for bad in (0.0, -1.0, math.nan):
        with pytest.raises(InputError, match=r"--ref-latency .*: expected a positive number of seconds"):
            calibrate(m, hw, s, bad, TUN)
    single = predict(m, hw, s, Plan(), TUN)
    fixed = single.latency_s - single.compute_s               # host-bound tiny model: launch time dominates
    assert fixed > 0.01
    with pytest.raises(InputError, match=r"is below the modelled non-compute time"):
        calibrate(m, hw, s, fixed, TUN)                       # exactly the non-compute time: nothing left
    with pytest.raises(InputError, match=r"--ref-latency 0\.01 s is below the modelled non-compute time 0\.015 s"):
        calibrate(m, hw, s, 0.01, TUN)
    tun = calibrate(m, hw, s, fixed * 1.5, TUN)
    # host and device combine as a p-norm: the eight multiplicative corrections end within 1e-4 here (the
    # first guess, fixed + compute, is 27 % off: compute is 0.1 % of the latency at scale 1)
    assert predict(m, hw, s, Plan(), tun).latency_s == pytest.approx(fixed * 1.5, rel=1e-4)


def test_calibrate_compute_bound_scale_by_hand():
    m, hw, s = _setup(width=512)
    tun = dataclasses.replace(TUN, launch_us=0.0, compute_scale=2.0)
    base = predict(m, hw, s, Plan(), dataclasses.replace(tun, compute_scale=1.0))
    assert base.latency_s == pytest.approx(base.compute_s, rel=1e-12)     # nothing but compute
    got = calibrate(m, hw, s, 3 * base.compute_s, tun)
    # latency = compute x scale: a 3x slower measurement means compute_scale 3 (whatever it was before)
    assert got.compute_scale == pytest.approx(3.0, rel=1e-12)
    assert dataclasses.replace(got, compute_scale=2.0) == tun


# ---------------------------------------------------------------- conclusion

def _bd_links(plan, latency, intra=0.0, inter=0.0):
    return Breakdown(plan=plan, latency_s=latency, exposed_by_link_s={"intra_domain": intra, "inter_domain": inter,
                                                                       "inter_node": 0.0})


def test_conclusion_of_nothing_and_of_one_plan():
    m, hw, s = _setup()
    assert conclusion([_res(Plan(ulysses=4), math.inf, feasible=False)], m, hw, s) == "No feasible plan."
    only = _res(Plan(ulysses=4), 2.0, speedup_vs_1=1.5, framework="xDiT")
    assert conclusion([only], m, hw, s) == ("Only U4 is feasible (on xDiT): predicted 2 s, 1.5x one device in the "
                                            "DiT loop.")
    # the speedup said is capped at the card count: 5.0x predicted on U4 is said as 4.0x
    capped = _res(Plan(ulysses=4), 2.0, speedup_vs_1=5.0, framework="xDiT")
    assert conclusion([capped], m, hw, s) == ("Only U4 is feasible (on xDiT): predicted 2 s, 4.0x one device in the "
                                              "DiT loop.")
    approx_fast = _res(Plan(pipefusion=4), 1.0, exact=False)
    approx_slow = _res(Plan(pipefusion=2, ulysses=2), 3.0, exact=False)
    text = conclusion([only, approx_slow, approx_fast], m, hw, s)
    assert text == ("Only U4 is feasible among exact plans (on xDiT): predicted 2 s, 1.5x one device in the DiT loop. "
                    "A faster "
                    "approximate plan exists (PF4, 1 s, stale activations): --allow-approximate ranks it.")
    two = conclusion([only, approx_slow], m, hw, s)
    assert two == "Only U4 is feasible among exact plans (on xDiT): predicted 2 s, 1.5x one device in the DiT loop."
    a_only = _res(Plan(pipefusion=4), 1.0, exact=False, speedup_vs_1=3.0)
    assert conclusion([a_only], m, hw, s) == "Only PF4 is feasible: predicted 1 s, 3.0x one device in the DiT loop."


def test_conclusion_of_a_pair_by_hand():
    m, hw, s = _setup(kv_heads=2)
    a = PlanResult(Plan(ulysses=4), _bd_links(Plan(ulysses=4), 2.0, intra=0.2, inter=0.5), [], True,
                   speedup_vs_1=3.0, framework="xDiT")
    a.gates.append(gates.Gate("G7", "projection", "info", "first part; U4 stays ahead unless X; or Y (projection, "
                                                          "not measurement)"))
    b = _res(Plan(ring=4), 2.5)
    fast = _res(Plan(pipefusion=4), 1.5, exact=False)
    text = conclusion([a, b, fast], m, hw, s)
    # 2.5 / 2 - 1 = 25 % ahead; exposed 0.7 s of 2 s = 35 %, most of it inter_domain; 2 of 8 K/V heads: GQA;
    # head split (issue 42): 8 / 4 = 2 query heads per rank; 2 K/V heads over U4 replicated to lcm(2, 4) = 4, 1 per rank
    assert text == (f"On box with 4 devices, tiny at {s.describe()} (GQA): U4 on xDiT (exact; heads: 8 query heads / "
                    "U4 = 2 per rank; 2 K/V heads do not divide by U4: replicated to 4 (1 per rank, priced)) is "
                    "predicted fastest "
                    "(2 s, 3.0x one device in the DiT loop; end to end: the headline), 25.0% ahead of R4; its "
                    "exposed communication is 35% of the latency, "
                    "mostly inter_domain. Conditions: U4 stays ahead unless X; or Y. This is a prediction: confirm with "
                    "the G6 A/B pair before committing. A faster approximate plan exists (PF4, 1.5 s, stale "
                    "activations): it changes the output; --allow-approximate ranks it.")


def test_conclusion_approximate_leader_padding_and_no_g7():
    m, hw, s = _setup()
    a = PlanResult(Plan(pipefusion=4), _bd_links(Plan(pipefusion=4), 1.0, intra=0.1), [], True, exact=False,
                   speedup_vs_1=2.0, pad_tokens=12)
    a.gates.append(gates.Gate("G7", "projection", "info", "PF4 and U4 are predicted equal"))
    b = _res(Plan(ulysses=4), 1.2, exact=True)
    slower_approx = _res(Plan(pipefusion=2, ulysses=2), 1.1, exact=False)
    text = conclusion([a, slower_approx, b], m, hw, s)
    assert " (no GQA): PF4 (approximate (stale activations)) is predicted fastest (1 s, 2.0x one device in the DiT " \
           "loop; end to end: the headline), " \
           "10.0% ahead of U2 PF2; its exposed communication is 10% of the latency, mostly intra_domain. " \
           "Conditions: PF4 and U4 are predicted equal. " in text
    assert text.endswith("before committing. The sequence is padded by 12 tokens.")
    plain = _res(Plan(ulysses=4), 1.0, exact=True)
    plain.breakdown.exposed_by_link_s = {"intra_domain": 0.0, "inter_domain": 0.0, "inter_node": 0.0}
    t2 = conclusion([plain, _res(Plan(ring=4), 1.2)], m, hw, s)
    assert "Conditions: . " in t2 and "U4 (exact; heads: 8 query heads / U4 = 2 per rank; " in t2
    assert ") is predicted fastest" in t2 and "approximate plan" not in t2


# ---------------------------------------------------------------- framework profiles: padding, TP host cost, sharding

def _fw(name, **kw):
    from ditpar.plan.inputs.frameworks import all_frameworks

    base = next(fw for fw in all_frameworks() if fw.name == "xDiT")
    every = {"ulysses": ("*",), "ring": ("*",), "kv_allgather": ("*",), "tp": ("*",), "pipefusion": (),
             "cfg": ("*",), "dp": ("*",)}
    fields = dict(name=name, aliases=(), vendors=("nvidia",), sequence_indivisible="pad", weight_sharding=False,
                  tp_impl="none", forms=every, form_vendors={}, exclude={}, vendor_families={}, incompatible=(),
                  unverified=())
    fields.update(kw)
    return dataclasses.replace(base, **fields)


def test_framework_padding_is_costed_and_noted():
    m, hw, s = _setup(devices=2, width=48)                 # 48 px -> 3 x 3 = 9 tokens
    res = {r.plan.name: r for r in rank_plans(m, hw, s, 2, TUN, frameworks=[_fw("padder")], detail=False)}
    r2 = res["R2"]
    # 9 tokens over sp 2: padded to ceil(9 / 2) x 2 = 10
    assert r2.pad_tokens == 1 and r2.framework == "padder"
    assert "sequence not divisible by sp = 2: padder padding, costed as 1 padded tokens (the largest shard sets " \
           "the pace)" in r2.breakdown.notes
    padded = dataclasses.replace(s, pad_tokens=1)
    assert r2.latency_s == predict(m, hw, padded, Plan(ring=2), r2.tunables).latency_s
    assert res["TP2"].pad_tokens == 0 and res["DP2"].pad_tokens == 0
    uneven = {r.plan.name: r for r in rank_plans(m, hw, s, 2, TUN, detail=False,
                                                  frameworks=[_fw("splitter", sequence_indivisible="uneven")])}
    assert any("splitter uneven split, costed as 1 padded tokens" in n for n in uneven["U2"].breakdown.notes)


def test_tp_host_cost_of_the_first_preferred_runner():
    from ditpar.plan.cost.timing import DTENSOR_LINEAR_HOST_US

    m, hw, s = _setup(devices=2)
    fws = [_fw("dtensor-stack", tp_impl="dtensor"), _fw("plain-stack")]   # neither is on the preference list
    res = {r.plan.name: r for r in rank_plans(m, hw, s, 2, TUN, frameworks=fws, detail=False)}
    tp = res["TP2"]
    assert tp.framework == "dtensor-stack" and tp.tunables.tp_linear_host_us == DTENSOR_LINEAR_HOST_US > 0
    assert res["U2"].tunables.tp_linear_host_us == 0.0                   # no TP: no per-linear host cost
    flipped = {r.plan.name: r for r in rank_plans(m, hw, s, 2, TUN, frameworks=fws[::-1], detail=False)}
    assert flipped["TP2"].framework == "plain-stack" and flipped["TP2"].tunables.tp_linear_host_us == 0.0


def test_weight_sharding_unlock_needs_a_framework_that_shards():
    # 10e9 weights x 2 B = 20 GB > 90 % of 16 GB; sharded over 2 ranks: 10 GB fits
    m = tiny_model(params_b=10.0)
    hw = dataclasses.replace(box(devices=2, domain_size=2), memory_GB=16.0)
    s = make_shape(m, 64, 64, 1, 10)
    none = {r.plan.name: r for r in rank_plans(m, hw, s, 2, TUN, frameworks=[_fw("a"), _fw("b")], detail=False)}
    g2 = none["U2"].gates[-1]
    assert not none["U2"].feasible and g2.verdict == "veto" and g2.gate == "G2"
    assert g2.reason.endswith("needs 10.3 GB; but none of a, b shards weights")
    assert "re-run" not in g2.reason
    assert none["TP2"].feasible                                           # TP shards by itself
    some = {r.plan.name: r for r in rank_plans(m, hw, s, 2, TUN, detail=False,
                                                frameworks=[_fw("a"), _fw("sharder", weight_sharding=True)])}
    u2 = some["U2"]
    assert u2.feasible and u2.framework == "sharder" and u2.gates[-1].verdict == "warn"
    assert u2.breakdown.memory_parts_GB["weights_GB"] == pytest.approx(10.0, rel=1e-12)   # 20 GB over 2 ranks
    assert "weights sharded layer-wise over all ranks (G2 unlock); their all-gather is included" in u2.breakdown.notes
    bare = {r.plan.name: r for r in rank_plans(m, hw, s, 2, TUN, detail=False)}   # no profiles: applied
    assert bare["U2"].feasible and bare["U2"].framework == ""
    assert bare["U2"].breakdown.memory_parts_GB["weights_GB"] == pytest.approx(10.0, rel=1e-12)


def test_memory_unlock_hint_names_the_plan_needing_least_memory():
    m = tiny_model(params_b=1.0, text_encoder_params_b=10.0)              # 20 GB text encoder on every rank
    hw = dataclasses.replace(box(devices=2, domain_size=2), memory_GB=20.0)
    s = make_shape(m, 64, 64, 1, 10)
    from ditpar.plan.cost import enumerate_plans

    runnable = [p for p in enumerate_plans(2, False) if gates.availability(m, hw, s, p).verdict != "veto"]
    least = min(runnable, key=lambda p: predict(m, hw, s, p, TUN).memory_GB)
    assert least.tp * least.pipefusion == 2                                # a plan that halves the weights
    # the text-encoder offload is applied: every plan ranks, the least at its memory less the 20 GB text encoder
    after = predict(m, hw, s, least, TUN).memory_GB - 20.0
    ranked = {r.plan.name: r for r in rank_plans(m, hw, s, 2, TUN, detail=False, allow_approximate=True)}
    assert all(ranked[p.name].feasible and ranked[p.name].unlocks == ("te",) for p in runnable)
    assert ranked[least.name].breakdown.memory_GB == pytest.approx(after, rel=1e-12)
    # a refusal still names the unlock that fits: 10e9 x 2 B = 20 GB of weights on 16 GB cards, no text encoder,
    # no host link, a framework that runs only the sequence forms and shards no weights: sharding over 2 ranks
    # would fit (20 / 2 = 10 GB + the rest), so the hint names the one-request plan needing least memory (not DP2)
    big = tiny_model(params_b=10.0)
    hw16 = dataclasses.replace(hw, memory_GB=16.0)
    forms = {"ulysses": ("*",), "ring": ("*",), "kv_allgather": ("*",), "tp": (), "pipefusion": (), "cfg": ("*",),
             "dp": ("*",)}
    with pytest.raises(InputError) as err:
        rank_plans(big, hw16, s, 2, TUN, frameworks=[_fw("a", forms=forms)])
    msg = str(err.value)
    seq = [Plan(ulysses=2), Plan(ring=2), Plan(kv_allgather=2)]
    mem = {p.name: predict(big, hw16, s, p, TUN) for p in seq}
    named = msg.split("; ")[-2].split(" fits with the unlock:")[0]
    assert named in mem and mem[named].memory_GB == min(b.memory_GB for b in mem.values())
    parts = mem[named].memory_parts_GB
    needs = (parts["weights_GB"] / 2 + parts["comm_buffers_GB"]
             + max(parts["activations_GB"] + parts["kv_buffers_GB"], parts["vae_decode_GB"]))
    assert msg.endswith(f"; {named} fits with the unlock: layer-wise weight sharding over the 2 ranks (all-gather "
                        f"each layer's weights before use) needs {needs:.1f} GB; but none of a shards weights")


def test_no_exact_plan_lists_exact_vetoes_only(monkeypatch):
    real = gates.availability

    def only_pf(model, hw, shape, plan, frameworks=None):
        if plan.pipefusion > 1:
            return real(model, hw, shape, plan, frameworks)               # PF4 > 2 layers: vetoed, approximate
        return gates.Gate("G1", "form availability", "veto", f"stub veto of {plan.name}; detail")
    monkeypatch.setattr(gates, "availability", only_pf)
    m, hw, s = _setup(devices=4)
    from ditpar.plan.cost import enumerate_plans

    exact = sorted(f"stub veto of {p.name}" for p in enumerate_plans(4, False) if p.pipefusion == 1)[:2]
    with pytest.raises(InputError) as err:
        rank_plans(m, hw, s, 4, TUN)
    assert str(err.value).endswith(f"(exact plans fail: {exact[0]} | {exact[1]})")
    assert "pipefusion 4" not in str(err.value)


def test_g7_of_a_tp_leader_uses_its_tp_host_cost(monkeypatch):
    from ditpar.plan.cost.timing import DTENSOR_LINEAR_HOST_US

    # TP2 predicted fastest, then U2, then the rest (the ranking's prediction replaced; G7 predicts for itself)
    order = {Plan(tp=2): 1.0, Plan(ulysses=2): 2.0}
    monkeypatch.setattr(rank, "predict", lambda model, hw, shape, plan, tun: Breakdown(
        plan=plan, latency_s=order.get(plan, 3.0), compute_s=0.5))
    m, hw, s = _setup(devices=2)
    res = rank_plans(m, hw, s, 2, TUN, frameworks=[_fw("dtensor-stack", tp_impl="dtensor")])
    feas = [r for r in res if r.feasible]
    lead, second = feas[0], feas[1]
    assert (lead.plan, second.plan) == (Plan(tp=2), Plan(ulysses=2))
    assert lead.tunables.tp_linear_host_us == DTENSOR_LINEAR_HOST_US
    assert lead.gates[-1] == gates.projection(m, hw, s, lead.plan, second.plan, lead.tunables)
    assert lead.gates[-1] != gates.projection(m, hw, s, lead.plan, second.plan, TUN)


def test_padding_note_names_the_first_runner_and_its_way():
    m, hw, s = _setup(devices=2, width=48)                 # 9 tokens: sp 2 needs 1 more
    fws = [_fw("padder"), _fw("splitter", sequence_indivisible="uneven")]   # kept in this order (not listed)
    r2 = next(r for r in rank_plans(m, hw, s, 2, TUN, frameworks=fws, detail=False) if r.plan == Plan(ring=2))
    assert r2.framework == "padder"
    assert [n for n in r2.breakdown.notes if n.startswith("sequence not divisible")] == [
        "sequence not divisible by sp = 2: padder padding, costed as 1 padded tokens (the largest shard sets the pace)"]
