"""CFG as frameworks run it: branches of unequal text (a short negative prompt), CFG truncation (cfg_trunc_ratio), and
batch-2 GEMMs against batch-1 ones. Expected figures are the same model's predictions of each branch priced alone,
added by hand (a two-call step is the sum of its calls; a guided step and an unguided step add up to the request)."""

from __future__ import annotations

import dataclasses

import pytest
from conftest import run_script
from ditpar.errors import InputError
from ditpar.plan.cost import Plan, make_shape, predict
from ditpar.plan.cost.shape import guided_steps
from ditpar.plan.inputs import presets


def _qwen():
    return presets.resolve_model("Qwen-Image"), presets.resolve_hardware("H100", None, 8)


def test_guided_steps_follow_diffusers_rule_by_hand():
    m, _ = _qwen()
    # step i is guided while (i + 1) / N <= ratio: 50 x 0.25 = 12.5 -> 12; 30 x 0.5 = 15; ratio 0 -> none
    assert guided_steps(make_shape(m, steps=50, cfg_trunc_ratio=0.25)) == 12
    assert guided_steps(make_shape(m, steps=30, cfg_trunc_ratio=0.5)) == 15
    assert guided_steps(make_shape(m, steps=30, cfg_trunc_ratio=0.0)) == 0
    assert guided_steps(make_shape(m, steps=30)) == 30
    assert guided_steps(make_shape(m, steps=30, cfg=False)) == 0


def test_two_calls_pay_the_short_negative_call_not_a_second_prompt_call():
    m, hw = _qwen()
    s = make_shape(m, 1024, 1024, 1, 10, negative_tokens=8)
    cond = predict(m, hw, make_shape(m, 1024, 1024, 1, 10, cfg=False), Plan(ulysses=4)).latency_s
    neg = predict(m, hw, dataclasses.replace(make_shape(m, 1024, 1024, 1, 10, cfg=False), text_joint=8),
                  Plan(ulysses=4)).latency_s
    got = predict(m, hw, s, Plan(ulysses=4)).latency_s
    assert got == pytest.approx(cond + neg)
    assert neg < cond                                   # 4096 + 8 tokens against 4096 + 512


def test_cfg_parallel_waits_for_the_longer_branch():
    m, hw = _qwen()
    even = predict(m, hw, make_shape(m, 1024, 1024, 1, 10), Plan(ulysses=4, cfg=2)).latency_s
    short_neg = predict(m, hw, make_shape(m, 1024, 1024, 1, 10, negative_tokens=8), Plan(ulysses=4, cfg=2)).latency_s
    assert short_neg == pytest.approx(even)             # the prompt's rank is the critical path
    long_neg = predict(m, hw, make_shape(m, 1024, 1024, 1, 10, negative_tokens=1024), Plan(ulysses=4, cfg=2))
    as_long = dataclasses.replace(make_shape(m, 1024, 1024, 1, 10), text_joint=1024)
    assert long_neg.latency_s == pytest.approx(predict(m, hw, as_long, Plan(ulysses=4, cfg=2)).latency_s)
    # CFG parallel's gain over two calls shrinks when the negative call is short: (cond + neg) / cond < 2
    two = predict(m, hw, make_shape(m, 1024, 1024, 1, 10, negative_tokens=8), Plan(ulysses=4)).latency_s
    two_even = predict(m, hw, make_shape(m, 1024, 1024, 1, 10), Plan(ulysses=4)).latency_s
    assert two / short_neg < two_even / even


def test_a_batch_of_two_pads_both_branches_to_the_longer_text():
    m = presets.resolve_model("PixArt-alpha")           # one call on a batch of 2 (cross-attention text)
    hw = presets.resolve_hardware("H100", None, 4)
    s = make_shape(m, 1024, 1024, 1, 10)
    assert predict(m, hw, dataclasses.replace(s, text_uncond=10), Plan(ulysses=2)).latency_s == pytest.approx(
        predict(m, hw, s, Plan(ulysses=2)).latency_s)
    longer = dataclasses.replace(s, text_cross=2 * s.text_cross)
    assert predict(m, hw, dataclasses.replace(s, text_uncond=2 * s.text_cross), Plan(ulysses=2)).latency_s == \
        pytest.approx(predict(m, hw, longer, Plan(ulysses=2)).latency_s)


def test_truncated_guidance_adds_guided_and_unguided_steps_by_hand():
    m, hw = _qwen()
    s = make_shape(m, 1024, 1024, 1, 20, cfg_trunc_ratio=0.25)     # 5 guided steps of 20
    full = make_shape(m, 1024, 1024, 1, 20)
    off = make_shape(m, 1024, 1024, 1, 20, cfg=False)
    for plan in (Plan(), Plan(ulysses=4), Plan(ulysses=4, cfg=2)):
        guided = predict(m, hw, full, plan).step_s
        alone = predict(m, hw, off, dataclasses.replace(plan, cfg=1)).step_s
        bd = predict(m, hw, s, plan)
        assert bd.latency_s == pytest.approx(5 * guided + 15 * alone), plan.name
        assert bd.step_s == pytest.approx(bd.latency_s / 20)
    # CFG parallel gains on guided steps only: U4 on 4 cards gains from truncation, cfg2 U4 on 8 does not
    u4 = predict(m, hw, s, Plan(ulysses=4)).latency_s / predict(m, hw, full, Plan(ulysses=4)).latency_s
    c2 = predict(m, hw, s, Plan(ulysses=4, cfg=2)).latency_s / predict(m, hw, full, Plan(ulysses=4, cfg=2)).latency_s
    assert u4 < 0.7 < c2


def test_batch_two_gemms_run_nearer_the_large_gemm_rate_than_one_rank_of_cfg_parallel():
    m = presets.resolve_model("SD3-medium")
    hw = presets.resolve_hardware("H100", None, 2)
    s = make_shape(m, 512, 512, 1, 10)                  # 1024 image tokens: small GEMMs
    batch2 = predict(m, hw, s, Plan()).compute_efficiency
    per_rank = predict(m, hw, s, Plan(cfg=2)).compute_efficiency
    assert batch2 > per_rank


def test_schedule_flags_are_checked_and_reported():
    m, _ = _qwen()
    with pytest.raises(InputError, match="0..1"):
        make_shape(m, cfg_trunc_ratio=1.5)
    with pytest.raises(InputError, match="no text tokens"):
        make_shape(presets.resolve_model("Example-MHA-56H-50L"), negative_tokens=4)
    r = run_script("plan.py", "--model", "Qwen-Image", "--hardware", "H100", "--devices", "8", "--negative-tokens",
                   "8", "--cfg-trunc-ratio", "0.5", "--json")
    assert r.returncode == 0, r.stderr
    import json

    shape = json.loads(r.stdout)["shape"]
    assert (shape["negative_text_tokens"], shape["cfg_trunc_ratio"], shape["guided_steps"]) == (8, 0.5, 25)


def test_a_framework_that_runs_two_calls_prices_sd3_as_two_batch_one_calls():
    """vLLM-Omni's CFG without a CFG group is two transformer calls (profile cfg_calls = "two"): SD3, a batched
    diffusers pipeline, costs twice its one-branch step there, and stays one batch-2 call without a framework."""
    from ditpar.plan.cost import Tunables
    from ditpar.plan.inputs import frameworks

    omni = next(f for f in frameworks.all_frameworks() if f.name == "vLLM-Omni")
    assert omni.cfg_calls == "two" and "cfg_calls" in omni.sources
    m = presets.resolve_model("SD3-medium")
    hw = presets.resolve_hardware("H100", None, 8)
    s = make_shape(m, 1024, 1024, 1, 10)
    tun = frameworks.tp_host_tunables(Tunables(), omni, Plan(tp=4))
    assert tun.cfg_calls == "two"
    one = predict(m, hw, dataclasses.replace(s, cfg=False), Plan(tp=4), tun).latency_s
    assert predict(m, hw, s, Plan(tp=4), tun).latency_s == pytest.approx(2 * one)
    assert predict(m, hw, s, Plan(tp=4)).latency_s != pytest.approx(2 * one)


def test_cfg_calls_of_a_profile_is_checked(tmp_path):
    from ditpar.plan.inputs import frameworks

    src = (frameworks.templates_dir() / "frameworks" / "vllm-omni.toml").read_text()
    bad = tmp_path / "bad.toml"
    bad.write_text(src.replace('cfg_calls = "two"', 'cfg_calls = "three"', 1))
    from ditpar.formats import load_toml

    with pytest.raises(InputError, match="cfg_calls"):
        frameworks.parse_framework(load_toml(bad), bad)


def test_sparse_attention_vetoes_ring_and_names_its_source():
    from ditpar.plan.decide.gates import RING_SPARSE, availability

    m = presets.resolve_model("Wan2.1-T2V-14B")
    hw = presets.resolve_hardware("H100", None, 8)
    dense = make_shape(m, 832, 480, 17, 4)
    sparse = make_shape(m, 832, 480, 17, 4, sparse_attention=True)
    assert availability(m, hw, dense, Plan(ring=4)).verdict == "pass"
    g = availability(m, hw, sparse, Plan(ring=4))
    assert g.verdict == "veto" and RING_SPARSE in g.reason and "ring_attn.py L174-196" in g.reason
    assert availability(m, hw, sparse, Plan(ulysses=4)).verdict == "pass"


def test_g1_names_the_frameworks_without_cfg_parallel_for_the_model():
    """xDiT's Wan T2V runner lacks use_cfg_parallel (its profile's exclude list): a cfg2 plan's G1 says so."""
    from ditpar.plan.decide.gates import availability
    from ditpar.plan.inputs import frameworks

    m = presets.resolve_model("Wan2.1-T2V-14B")
    hw = presets.resolve_hardware("H100", None, 8)
    g = availability(m, hw, make_shape(m, 832, 480, 17, 4), Plan(ulysses=4, cfg=2), frameworks.all_frameworks())
    assert g.verdict == "pass"
    assert "no CFG parallel for Wan2.1-T2V-14B on" in g.reason and "xDiT" in g.reason.split("no CFG parallel")[1]
    g1 = availability(m, hw, make_shape(m, 832, 480, 17, 4), Plan(ulysses=4), frameworks.all_frameworks())
    assert "no CFG parallel" not in g1.reason


def test_prompt_tokens_set_the_conditional_branch_and_a_cond_only_conditioning_is_its_critical_path():
    """--prompt-tokens sets the prompt's tokens in the model's stream (Qwen-Image: joint; PixArt: cross); with a
    reference's tokens only the conditional branch carries (prompt 512 + 1024, negative 512) CFG parallel waits for
    the conditional rank and two calls pay 1536 + 512."""
    m, hw = _qwen()
    s = make_shape(m, 1024, 1024, 1, 10, prompt_tokens=120)
    assert (s.text_joint, s.text_cross) == (120, 0)
    px = presets.resolve_model("PixArt-alpha")
    assert make_shape(px, prompt_tokens=40).text_cross == 40
    cond_only = make_shape(m, 1024, 1024, 1, 10, prompt_tokens=1536, negative_tokens=512)
    long = dataclasses.replace(make_shape(m, 1024, 1024, 1, 10), text_joint=1536)
    assert predict(m, hw, cond_only, Plan(ulysses=4, cfg=2)).latency_s == pytest.approx(
        predict(m, hw, long, Plan(ulysses=4, cfg=2)).latency_s)
    c = predict(m, hw, dataclasses.replace(long, cfg=False), Plan(ulysses=4)).latency_s
    n = predict(m, hw, dataclasses.replace(long, cfg=False, text_joint=512), Plan(ulysses=4)).latency_s
    assert predict(m, hw, cond_only, Plan(ulysses=4)).latency_s == pytest.approx(c + n)
    with pytest.raises(InputError, match="--prompt-tokens"):
        make_shape(m, prompt_tokens=-1)
