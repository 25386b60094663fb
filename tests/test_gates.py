"""The seven gates: vetoes with their reasons, the GQA verdict of G3, and G7's threshold."""

from __future__ import annotations

import re

import pytest
from costmodel_fixtures import box, replace, tiny_model
from ditpar.errors import InputError
from ditpar.plan.cost import Plan, Tunables, make_shape, predict
from ditpar.plan.decide import gates
from ditpar.plan.decide.rank import rank_plans


def shape(model, px=128):
    return make_shape(model, px, px, 1, 10, cfg=False)


def test_g1_heads_sequence_and_framework():
    m, hw = tiny_model(), box()
    assert gates.availability(m, hw, shape(m), Plan(ulysses=8)).verdict == "pass"
    g = gates.availability(replace(m, heads=12, head_dim=8, hidden=96), hw, shape(m), Plan(ulysses=8))
    assert g.verdict == "veto" and "heads 12 not divisible" in g.reason
    g = gates.availability(m, hw, make_shape(m, 48, 48, 1, 10, cfg=False), Plan(ring=8))   # 9 tokens
    assert g.verdict == "veto" and "not divisible" in g.reason
    ascend = box(vendor="ascend", interconnect="HCCS")
    g = gates.availability(m, ascend, shape(m), Plan(pipefusion=2, dp=4))
    assert g.verdict == "veto" and "Ascend" in g.reason
    g = gates.availability(m, hw, shape(m), Plan(cfg=2, ulysses=4))
    assert g.verdict == "veto" and "classifier-free guidance" in g.reason


def test_g2_memory_veto_and_lossless_unlock():
    hw = box(memory_GB=10.0)                                    # 9 GB usable
    fits = tiny_model(params_b=2.0)                             # 4 GB of weights
    s = shape(fits)
    bd = predict(fits, hw, s, Plan(ulysses=8), Tunables())
    assert gates.memory_fit(fits, hw, s, Plan(ulysses=8), bd).verdict == "pass"
    big = tiny_model(params_b=6.0)                              # 12 GB: sharded over 8 ranks 1.5 GB
    bd = predict(big, hw, s, Plan(ulysses=8), Tunables())
    g = gates.memory_fit(big, hw, s, Plan(ulysses=8), bd)
    assert g.verdict == "warn" and "layer-wise weight sharding" in g.reason
    huge = tiny_model(params_b=100.0)                           # 200 GB: 25 GB even sharded
    bd = predict(huge, hw, s, Plan(ulysses=8), Tunables())
    assert gates.memory_fit(huge, hw, s, Plan(ulysses=8), bd).verdict == "veto"


def test_g3_gqa_decides_whether_composite_saves_cross_domain_bytes():
    hw = box(domain_size=4, devices=8)
    plan = Plan(ulysses=4, kv_allgather=2)
    for kv, word in ((8, "saves no cross-domain bytes"), (2, "saves cross-domain bytes, 50%")):
        m = tiny_model(kv)
        s = shape(m)
        g = gates.comm_lower_bound(m, hw, s, plan, predict(m, hw, s, plan, Tunables()), Tunables())
        assert word in g.reason, g.reason


def test_g5_masking_ceiling_from_masking_module():
    m, hw = tiny_model(), box(domain_size=8, devices=8)
    g = gates.masking_gate(m, hw, shape(m), Plan(ulysses=8), Tunables())
    assert "c/f" in g.reason and g.verdict == "info"
    assert gates.masking_gate(m, hw, shape(m), Plan(pipefusion=2, dp=4), Tunables()).verdict == "pass"


def test_g7_threshold_flips_the_order():
    m = tiny_model(blocks={"self": 4})
    hw = box(domain_size=4, devices=8, inter=1.0)
    s = make_shape(m, 512, 512, 1, 10, cfg=False)
    tun = Tunables(launch_us=0.0)
    a, b = Plan(ulysses=4, ring=2), Plan(ulysses=8)
    la, lb = predict(m, hw, s, a, tun).latency_s, predict(m, hw, s, b, tun).latency_s
    assert la < lb
    g = gates.projection(m, hw, s, a, b, tun)
    m_ = re.search(r"once (\w+) bandwidth (exceeds|drops below) ([0-9.e+]+) GB/s", g.reason)
    assert m_, g.reason
    key, direction, bw = m_.group(1), m_.group(2), float(m_.group(3))
    now = hw.links[key].bandwidth_GBps
    beyond = bw * 1.05 if direction == "exceeds" else bw / 1.05
    short = bw / 1.05 if direction == "exceeds" else bw * 1.05
    far, near = gates._scale_link(hw, key, beyond / now), gates._scale_link(hw, key, short / now)
    assert predict(m, far, s, b, tun).latency_s < predict(m, far, s, a, tun).latency_s
    assert predict(m, near, s, b, tun).latency_s > predict(m, near, s, a, tun).latency_s


def test_rank_plans_orders_feasible_first_and_names_devices_error():
    m, hw = tiny_model(), box()
    res = rank_plans(m, hw, shape(m), 8, Tunables())
    exact = [r for r in res if r.feasible and r.exact]
    approx = [r for r in res if r.feasible and not r.exact]
    # all cards on the request first (fastest first), then data-parallel plans (replicas serve other requests)
    whole = [r.latency_s for r in exact if r.plan.dp == 1]
    replicas = [r.latency_s for r in exact if r.plan.dp > 1]
    assert [r.latency_s for r in exact] == sorted(whole) + sorted(replicas) and whole and replicas
    assert res[0].feasible and res[0].exact
    # approximate (PipeFusion) plans come after every exact one unless allowed
    assert approx and min(r.rank for r in approx) > max(r.rank for r in res if r.feasible and r.exact)
    free = rank_plans(m, hw, shape(m), 8, Tunables(), allow_approximate=True)
    lat = [r.latency_s for r in free if r.feasible and r.plan.dp == 1]
    assert lat == sorted(lat)
    assert all(r.gates[0].gate == "G1" for r in res)
    assert {g.gate for g in res[0].gates} == {"G1", "G2", "G3", "G4", "G5", "G6", "G7"}
    with pytest.raises(InputError, match="has 8 devices"):
        rank_plans(m, hw, shape(m), 16, Tunables())


def test_g5_ignores_tp_collectives_and_counts_attention_once():
    """The TP AdaLN all-gather is not a sequence collective: it does not hide behind attention. A plan
    with two maskable families (all-to-all and K/V gather) hides both behind one attention per block."""
    from ditpar.plan.cost import layout
    from ditpar.plan.cost.timing import comm_time_s
    from ditpar.plan.cost.work import block_work
    from ditpar.plan.inputs import presets

    flux, h100 = presets.resolve_model("FLUX.1-dev"), presets.resolve_hardware("H100")
    s = make_shape(flux, 1024, 1024, 1, 28, cfg=None)
    g = gates.masking_gate(flux, h100, s, Plan(tp=8), Tunables())
    assert g.verdict == "pass" and "TP" not in g.reason
    m, hw = tiny_model(2), box(domain_size=8, devices=8)
    plan = Plan(ulysses=2, kv_allgather=4)
    blocks = block_work(m, hw, shape(m), plan, layout(plan))
    rate = hw.peak_tflops_bf16 * 1e12 * hw.mfu
    comm = sum(comm_time_s(hw, c) * c.calls * b.count for b in blocks for c in b.comms)
    att = sum(b.attn_flops / rate * b.count for b in blocks)
    assert {c.family for b in blocks for c in b.comms} == {"alltoall", "allgather"}
    cf = float(re.search(r"c/f = ([0-9.]+)", gates.masking_gate(m, hw, shape(m), plan, Tunables()).reason)[1])
    assert cf == pytest.approx(comm / att, abs=0.006)
