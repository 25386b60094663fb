"""Tensor parallelism priced as cache-dit runs it: collectives per block kind (recomputed by hand from the
FluxTensorParallelismPlanner layer plan) and the DTensor host cost per parallelized linear, by framework."""

from __future__ import annotations

import dataclasses

import pytest
from ditpar.plan.cost import Plan, Tunables, layout, make_shape, predict
from ditpar.plan.cost.timing import DTENSOR_LINEAR_HOST_US, block_host_s
from ditpar.plan.cost.work import block_work
from ditpar.plan.decide import shortlist
from ditpar.plan.decide.rank import rank_plans
from ditpar.plan.inputs import presets
from ditpar.plan.inputs.frameworks import all_frameworks, resolve_frameworks, tp_host_tunables

B = 2  # bf16 bytes


def _flux_tp(tp: int):
    m, hw = presets.resolve_model("FLUX.1-dev"), presets.resolve_hardware("H100")
    shape = make_shape(m, 1024, 1024, 1, 28, cfg=None)
    plan = Plan(tp=tp)
    return m, hw, shape, plan, {b.kind: b for b in block_work(m, hw, shape, plan, layout(plan))}


def test_flux_joint_block_tp8_collectives_by_hand():
    m, _, shape, _, blocks = _flux_tp(8)
    assert (m.hidden, shape.tokens, shape.text_joint) == (3072, 4096, 512)
    joint = {c.name: c for c in blocks["joint"].comms}
    assert set(joint) == {"TP all-reduce (image)", "TP all-reduce (text)", "TP AdaLN all-gather"}
    img, txt, ada = joint["TP all-reduce (image)"], joint["TP all-reduce (text)"], joint["TP AdaLN all-gather"]
    # to_out.0 and ff.net.2 (image), to_add_out and ff_context.net.2 (text): ring all-reduce sends 2*7/8 of it
    assert (img.calls, txt.calls) == (2.0, 2.0)
    assert img.bytes_per_call == pytest.approx(2 * 7 / 8 * 4096 * 3072 * B) == 44_040_192
    assert txt.bytes_per_call == pytest.approx(2 * 7 / 8 * 512 * 3072 * B) == 5_505_024
    assert (img.alpha_steps, txt.alpha_steps) == (14, 14)
    # norm1.linear and norm1_context.linear: Colwise with Replicate output = all-gather of 6*3072 per sample
    assert ada.family == "allgather" and ada.calls == 2.0 and ada.alpha_steps == 7
    assert ada.bytes_per_call == pytest.approx(7 / 8 * 6 * 3072 * B)
    # the bytes of the old 2-call count are kept; the alpha terms double (4 calls instead of 2) plus 2 gathers
    assert 2 * img.bytes_per_call + 2 * txt.bytes_per_call == pytest.approx(2 * 2 * 7 / 8 * 4608 * 3072 * B)
    assert blocks["joint"].kernels == 55 + 2 * (4 + 2)
    assert blocks["joint"].tp_linears == 14       # 12 projections + 2 AdaLN linears


def test_flux_single_block_tp4_collectives_by_hand():
    _, _, _, _, blocks = _flux_tp(4)
    single = {c.name: c for c in blocks["single"].comms}
    ar, ada = single["TP all-reduce"], single["TP AdaLN all-gather"]
    assert ar.calls == 1.0 and ar.alpha_steps == 6            # proj_out only
    assert ar.bytes_per_call == pytest.approx(2 * 3 / 4 * (4096 + 512) * 3072 * B)
    assert ada.calls == 1.0 and ada.bytes_per_call == pytest.approx(3 / 4 * 3 * 3072 * B)   # norm.linear, 3*hidden
    assert blocks["single"].kernels == 30 + 2 * 2 and blocks["single"].tp_linears == 6


def test_no_tp_no_tp_collectives_or_linears():
    _, _, _, _, blocks = _flux_tp(1)
    assert all(not b.comms and b.tp_linears == 0 for b in blocks.values())


def test_dtensor_host_term_by_hand_and_zero_at_launch_0():
    _, _, _, _, blocks = _flux_tp(8)
    joint = blocks["joint"]
    dt = Tunables(tp_linear_host_us=DTENSOR_LINEAR_HOST_US)
    # 14 parallelized linears + 6 output redistributes (4 Rowwise -> Replicate all-reduces, 2 AdaLN Colwise ->
    # Replicate all-gathers), each one DTensor dispatch
    assert (joint.tp_linears, joint.tp_redistributes) == (14, 6) and blocks["single"].tp_redistributes == 2
    assert block_host_s(joint, dt) == pytest.approx((67 * 25 + 20 * 68.7) * 1e-6)
    assert block_host_s(joint, Tunables()) == pytest.approx(67 * 25e-6)          # no DTensor framework
    assert block_host_s(joint, dataclasses.replace(dt, launch_us=10)) == pytest.approx((67 * 10 + 20 * 68.7 * 0.4) * 1e-6)
    assert block_host_s(joint, dataclasses.replace(dt, launch_us=0)) == 0.0      # captured / compiled


def test_dtensor_host_cost_only_for_the_framework_that_runs_the_plan():
    every = {fw.name: fw for fw in all_frameworks()}
    assert every["cache-dit"].tp_impl == "dtensor"
    assert every["xDiT"].tp_impl != "dtensor" and every["ParaAttention"].tp_impl == "none"
    tun = Tunables()
    assert tp_host_tunables(tun, every["cache-dit"], Plan(tp=8)).tp_linear_host_us == DTENSOR_LINEAR_HOST_US
    assert tp_host_tunables(tun, every["cache-dit"], Plan(ulysses=8)).tp_linear_host_us == 0.0
    assert tp_host_tunables(tun, every["diffusers-CP"], Plan(tp=8)).tp_linear_host_us == 0.0   # not read
    assert tp_host_tunables(tun, None, Plan(tp=8)) is tun

    m, hw = presets.resolve_model("FLUX.1-dev"), presets.resolve_hardware("H100")
    shape = make_shape(m, 1024, 1024, 1, 28, cfg=None)

    def tp8(fw: str, launch: float = 25.0):
        res = rank_plans(m, hw, shape, 8, Tunables(launch_us=launch), frameworks=resolve_frameworks([fw]),
                         detail=False)
        return next(r for r in res if r.plan.name == "TP8").latency_s

    plain = predict(m, hw, shape, Plan(tp=8), Tunables()).latency_s
    with_dt = predict(m, hw, shape, Plan(tp=8), Tunables(tp_linear_host_us=DTENSOR_LINEAR_HOST_US)).latency_s
    assert with_dt > plain
    assert tp8("cache-dit") == pytest.approx(with_dt)
    assert tp8("diffusers-CP") == pytest.approx(plain)
    assert tp8("cache-dit", 0.0) == pytest.approx(tp8("diffusers-CP", 0.0))


@pytest.mark.parametrize("devices", [4, 8])
def test_flux_h100_tp_and_ulysses_share_the_short_list(devices):
    """With cache-dit's collectives and DTensor host cost, TP and Ulysses of the same degree are within each
    other's bands on FLUX.1-dev 1024px / H100: plan.py says the model cannot order them (measure)."""
    m, hw = presets.resolve_model("FLUX.1-dev"), presets.resolve_hardware("H100")
    shape = make_shape(m, 1024, 1024, 1, 28, cfg=None)
    res = rank_plans(m, hw, shape, devices, Tunables(), frameworks=all_frameworks())
    short = [r.plan.name for r in shortlist.annotate(res, frozenset())]
    assert {f"TP{devices}", f"U{devices}"} <= set(short)
    assert all(r.exact and r.plan.dp == 1 for r in shortlist.annotate(res, frozenset()))


def test_bad_tp_impl_is_one_clear_error(tmp_path):
    from ditpar.errors import InputError
    from ditpar.plan.inputs.frameworks import parse_framework
    from ditpar.plan.inputs.presets import _read_toml, templates_dir

    data = _read_toml(templates_dir() / "frameworks" / "cache-dit.toml")
    data["tp_impl"] = "megatron"
    with pytest.raises(InputError, match=r"cache-dit.toml: key 'tp_impl' must be one of dtensor, explicit, none, unknown"):
        parse_framework(data, tmp_path / "cache-dit.toml")
    del data["tp_impl"]
    assert parse_framework(data, tmp_path / "x.toml").tp_impl == "unknown"
