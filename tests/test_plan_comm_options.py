"""Async Ulysses and FP8 all-to-all priced for the leading Ulysses plan (decide/comm_price.py), with values
worked by hand, and the framework profiles' [comm_options] tables."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from ditpar.errors import InputError  # noqa: E402
from ditpar.plan.cost import Plan, Tunables  # noqa: E402
from ditpar.plan.cost.efficiency import Gemm  # noqa: E402
from ditpar.plan.cost.work import BlockWork, Collective  # noqa: E402
from ditpar.plan.decide import comm_price  # noqa: E402
from ditpar.plan.inputs import comm_options, frameworks  # noqa: E402

FAM = comm_price.FAMILY


@pytest.fixture
def one_block(monkeypatch):
    """One block kind, 10 blocks, an all-to-all of 1e9 bytes sent per call over a 4-rank group, priced at
    1 GB/s (1 s per call); its QKV GEMM 1000 x 3000 x 1000 on a 1 TFLOP/s card with no shape curve (6 ms)."""
    c = Collective(FAM, "ulysses", "alltoall", 4.0, {"intra_domain": 1e9}, group_size=4)
    b = BlockWork("self", 10.0, 0.0, 0.0, 0.0, [c], 0.0, gemms=(Gemm(1000, 3000, 1000),))
    monkeypatch.setattr(comm_price, "block_work", lambda *a, **k: [b])
    monkeypatch.setattr(comm_price, "comm_time_s", lambda hw, col: col.bytes_per_call / 1e9)
    monkeypatch.setattr(comm_price.efficiency, "curve_for", lambda hw: None)
    model = SimpleNamespace(name="m", heads=8, kv_heads=8, head_dim=128, ffn=4096, hidden=1024)
    shape = SimpleNamespace(steps=2, cfg=False)

    def result(exposed: float):
        return SimpleNamespace(plan=Plan(ulysses=4), feasible=True,
                               breakdown=SimpleNamespace(exposed_by_family_s={FAM: exposed}, latency_s=500.0))

    def hw(hbm: float):
        return SimpleNamespace(peak_tflops_bf16=1.0, mfu=1.0, hbm_bandwidth_GBps=hbm)
    return model, shape, result, hw


def test_fp8_ratio_by_hand():
    assert comm_price.fp8_ratio(128) == pytest.approx((1 + 4 / 128) / 2)   # 0.515625
    assert comm_price.fp8_ratio(64) == pytest.approx(0.53125)


def test_price_by_hand(one_block):
    model, shape, result, hw = one_block
    p = comm_price.price(model, hw(100.0), shape, result(100.0), Tunables())
    # async: 2 x min(1 s all-to-all, 6 ms / 3 per projection) = 4 ms per block, x 10 blocks x 2 steps
    assert p["async_hides_up_to_s"] == pytest.approx(0.08)
    # fp8: (1 - 0.515625) s per call x 4 calls x 10 x 2 = 38.75 s
    assert p["fp8_saves_comm_s"] == pytest.approx(38.75)
    # quantise: 1e9 x 4/3 local bytes x 3 / 100 GB/s = 0.04 s per call x 80 calls = 3.2 s
    assert p["fp8_quantise_s"] == pytest.approx(3.2)
    assert p["fp8_net_s"] == pytest.approx(35.55)
    capped = comm_price.price(model, hw(100.0), shape, result(10.0), Tunables())
    assert capped["fp8_saves_comm_s"] == pytest.approx(10.0)   # never more than the exposed all-to-all


def test_lines_say_figure_basis_setting_and_exactness(one_block, monkeypatch):
    model, shape, result, hw = one_block
    monkeypatch.setattr(frameworks, "runs", lambda *a: None)
    fw = SimpleNamespace(name="FW", comm_options={
        "async_ulysses": {"setting": "async=on", "source": "s"}, "fp8_alltoall": {"setting": "fp8=on", "source": "s"}})
    payload: dict = {}
    text = comm_price.attach(payload, [result(100.0)], model, hw(100.0), shape, Tunables(), [fw])
    assert "async Ulysses on FW would hide up to 0.08 s of the 100 s exposed all-to-all of U4" in text
    assert "exact=yes; to try it: async=on" in text
    assert "FP8 all-to-all on FW would save 35.5 s" in text and "exact=NO (FP8" in text
    opts = {o["option"]: o for o in payload["comm_options"]["options"]}
    assert opts["fp8_alltoall"]["exact"] is False and opts["async_ulysses"]["exact"] is True
    assert opts["async_ulysses"]["latency_s"] == pytest.approx(500.0 - 0.08)
    # a slow HBM (5 GB/s): quantising costs 64 s > 38.75 s saved -> it says it would not pay
    text = comm_price.attach({}, [result(100.0)], model, hw(5.0), shape, Tunables(), [fw])
    assert "FP8 all-to-all on FW would not pay for U4: quantising costs 64 s" in text


def test_no_ulysses_plan_says_why():
    payload: dict = {}
    r = SimpleNamespace(plan=Plan(ring=4), feasible=True)
    assert comm_price.attach(payload, [r], None, None, None, Tunables(), []) == ""
    assert payload["comm_options"]["plan"] is None and "no feasible Ulysses plan" in payload["comm_options"]["reason"]


def test_profiles_carry_the_options_with_sources():
    got = {fw.name: set(fw.comm_options) for fw in frameworks.all_frameworks()}
    assert got["TensorRT-LLM-VisualGen"] == {"async_ulysses"}
    assert got["cache-dit"] == {"async_ulysses", "fp8_alltoall"}
    assert got["LightX2V"] == {"fp8_alltoall"}
    for fw in frameworks.all_frameworks():
        for opt in fw.comm_options.values():
            assert "@" in opt["source"] and ":" in opt["source"]


@pytest.mark.parametrize("bad, msg", [({"comm_options": {"zip": {}}}, "comm_options.zip is not an option"),
                                      ({"comm_options": {"fp8_alltoall": {"setting": "x"}}},
                                       "comm_options.fp8_alltoall.source must be a non-empty string"),
                                      ({"comm_options": 3}, "[comm_options] must be a table")],
                         ids=["unknown", "no-source", "not-table"])
def test_bad_tables_name_file_and_key(bad, msg):
    with pytest.raises(InputError, match=r"^f\.toml: .*") as e:
        comm_options.parse(bad, Path("f.toml"))
    assert msg in str(e.value)


def test_plan_json_and_text_for_wan_on_8_h100():
    cmd = [sys.executable, str(ROOT / "scripts" / "plan.py"), "--model", "wan2.1-t2v-14b", "--hardware",
           "h100-sxm-nvlink", "--devices", "8"]
    out = subprocess.run(cmd + ["--json"], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    co = json.loads(out.stdout)["comm_options"]
    assert co["plan"] and co["exposed_alltoall_s"] > 0
    assert 0 < co["async_hides_up_to_s"] <= co["exposed_alltoall_s"] / 2 + 1e-9   # at most 2 of the 4 calls
    names = {(o["framework"], o["option"]) for o in co["options"]}
    assert ("TensorRT-LLM-VisualGen", "async_ulysses") in names
    text = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=ROOT).stdout
    assert f"async Ulysses on TensorRT-LLM-VisualGen would hide up to {co['async_hides_up_to_s']:.3g} s" in text


def test_recipe_of_the_lead_names_the_setting_on_its_framework():
    cmd = [sys.executable, str(ROOT / "scripts" / "plan.py"), "--model", "wan2.1-t2v-14b", "--hardware",
           "h100-sxm-nvlink", "--devices", "8", "--framework", "tensorrt-llm", "--json"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)
    co = d["comm_options"]
    lead = next(p for p in d["plans"] if p["name"] == co["plan"])
    assert lead["run_recipe"]["framework"] == "TensorRT-LLM-VisualGen"
    assert any(n.startswith("async_ulysses: async_ulysses=True in parallel_config") for n in lead["run_recipe"]["notes"])
    assert lead["predicted_latency_s"] == pytest.approx(co["options"][0]["latency_s"] + co["options"][0]["saves_s"])


def test_expert_parallel_note_for_hidream_only():
    from ditpar.plan.decide import experts
    from ditpar.plan.inputs import presets

    hd = presets.load_model("HiDream-I1-Full")
    assert hd.token_experts == 4   # HiDream-I1 transformer config: num_routed_experts 4
    assert experts.record(hd)["offered"] is False
    assert experts.line(hd).startswith("expert parallel: not offered: HiDream-I1-Full routes each token to a few of its 4")
    assert experts.record(presets.load_model("FLUX.1-dev")) is None and experts.line(presets.load_model("FLUX.1-dev")) == ""
    assert experts.record(presets.load_model("Wan2.2-T2V-A14B")) is None   # whole-model experts are not per-token


def test_two_call_cfg_plan_prices_batch_one_calls():
    """Wan runs the CFG branches as two batch-1 calls when the plan has no CFG degree: the all-to-all seconds are
    those of two batch-1 calls per step, so async Ulysses hides at most half of the exposed all-to-all
    (2 of 4 calls; the rest of exposed is the per-call sync)."""
    from ditpar.plan.cost import make_shape, predict
    from ditpar.plan.inputs import presets

    m = presets.load_model("Wan2.1-T2V-14B")
    hw = presets.resolve_hardware("h100-sxm-nvlink", None, 8)
    shape, t = make_shape(m), Tunables()
    plan = Plan(ulysses=8)
    bd = predict(m, hw, shape, plan, t)
    p = comm_price.price(m, hw, shape, SimpleNamespace(plan=plan, breakdown=bd), t)
    assert 0.45 * p["exposed_alltoall_s"] < p["async_hides_up_to_s"] <= 0.5 * p["exposed_alltoall_s"]
    assert p["fp8_saves_comm_s"] < 0.5 * p["exposed_alltoall_s"]   # 1 - 0.516 of the link time
