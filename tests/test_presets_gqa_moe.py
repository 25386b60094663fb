"""A GQA DiT (Lumina-Image-2.0: 24 query / 8 K/V heads) and an MoE DiT (HiDream-I1-Full: 2 of 4 routed experts + a
shared one): presets written from their configs, the configs in tests/data/model_configs read the same way.

Expected values are derived here from the configs' own numbers (heads, widths, rounding rules of the FFN classes),
not read back from the presets.
"""

from __future__ import annotations

import json

import pytest
from conftest import ROOT, run_script
from ditpar.plan.inputs import model_config, presets

CONFIGS = ROOT / "tests" / "data" / "model_configs"


def _plan_json(*args: str) -> dict:
    return json.loads(run_script("plan.py", *args, "--hardware", "H100", "--devices", "8", "--json").stdout)


def _swiglu(width: int) -> int:
    """HiDream's FeedForwardSwiGLU: int(2 w / 3), rounded up to a multiple of 256."""
    w = int(2 * width / 3)
    return 256 * -(-w // 256)


def test_lumina_is_gqa_and_its_ffn_has_no_two_thirds_factor():
    m = presets.load_model("Lumina-Image-2.0")
    assert (m.heads, m.kv_heads, m.head_dim, m.hidden) == (24, 8, 2304 // 24, 2304)
    assert m.heads // m.kv_heads == 3
    assert m.ffn == 256 * -(-(4 * 2304) // 256) == 9216          # LuminaFeedForward: 4 x dim, multiple_of 256
    assert presets.load_model("Lumina2").name == "Lumina-Image-2.0"


def test_hidream_ffn_is_two_routed_experts_and_a_shared_one():
    m = presets.load_model("HiDream-I1-Full")
    hidden = 20 * 128
    assert m.hidden == hidden and m.kv_heads == m.heads == 20
    assert (_swiglu(4 * hidden), _swiglu(2 * hidden)) == (6912, 3584)
    assert m.ffn == 2 * _swiglu(4 * hidden) + _swiglu(2 * hidden) == 17408
    assert m.text_joint_tokens == 3 * 128                                # T5 + last Llama layer + the block's Llama layer
    assert presets.load_model("HiDream-I1").name == "HiDream-I1-Full"


@pytest.mark.parametrize("folder, preset", [("Lumina-Image-2.0", "Lumina-Image-2.0"),
                                            ("HiDream-I1-Full", "HiDream-I1-Full")])
def test_the_config_gives_the_presets_prediction(folder, preset):
    """Every plan on 8 H100 within 2 % (the configs' estimated parameter counts differ from the cards' round
    figures: that moves memory, not time)."""
    cfg = _plan_json("--model-config", str(CONFIGS / folder))
    pre = _plan_json("--model", preset)
    by = {p["name"]: p["predicted_latency_s"] for p in pre["plans"] if p["feasible"]}
    got = {p["name"]: p["predicted_latency_s"] for p in cfg["plans"] if p["feasible"]}
    assert set(got) == set(by)
    for name, t in got.items():
        assert t == pytest.approx(by[name], rel=0.02), name
    fields = cfg["model_fields"]
    m = presets.load_model(preset)
    assert (fields["heads"], fields["kv_heads"], fields["hidden"], fields["ffn"]) == (m.heads, m.kv_heads, m.hidden,
                                                                                     m.ffn)


def test_gqa_is_priced_on_the_wire():
    """Ulysses moves Q, K, V and O: (24 + 8 + 8 + 24) / (4 x 24) = 2/3 of the bytes the same model would with
    24 K/V heads; ring passes K and V only: 8 / 24 = 1/3."""
    gqa = _plan_json("--model", "Lumina-Image-2.0")
    mha = _plan_json("--model", "Lumina-Image-2.0", "--kv-heads", "24")

    def wire(doc, name):
        return next(p for p in doc["plans"] if p["name"] == name)["bytes_per_layer_by_link"]["intra_domain"]

    assert wire(gqa, "U8") / wire(mha, "U8") == pytest.approx((24 + 8 + 8 + 24) / (4 * 24), rel=1e-9)
    assert wire(gqa, "R8") / wire(mha, "R8") == pytest.approx(8 / 24, rel=1e-9)


def test_a_lumina_config_without_hidden_size_names_the_key(tmp_path):
    data = json.loads((CONFIGS / "Lumina-Image-2.0" / "transformer" / "config.json").read_text(encoding="utf-8"))
    del data["hidden_size"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    proc = run_script("plan.py", "--model-config", str(path), "--hardware", "H100", "--devices", "8", check=2)
    assert "hidden_size" in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_the_hidream_memory_holds_every_expert():
    """params_b (17B, all four experts) sets the weights: 17e9 x 2 bytes = 34 GB on one card in bf16."""
    doc = _plan_json("--model", "HiDream-I1-Full")
    tp1 = next(p for p in doc["plans"] if p["name"] == "cfg2 U4")
    assert tp1["memory_parts_GB"]["weights_GB"] == pytest.approx(17e9 * 2 / 1e9, rel=1e-6)
    est = model_config.load(str(CONFIGS / "HiDream-I1-Full"))
    assert est.params_b > 17.0        # the config's estimate counts every expert, shared one included
