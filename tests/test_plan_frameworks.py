"""Framework profiles, exactness, padding, GQA K/V replication, custom models (issue 13)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from ditpar.errors import InputError  # noqa: E402
from ditpar.plan.cost import Plan, Tunables, layout, make_shape  # noqa: E402
from ditpar.plan.cost.work import block_work, kv_heads_after_split  # noqa: E402
from ditpar.plan.decide.gates import MEMORY_HEADROOM, TIGHT_LIMIT  # noqa: E402
from ditpar.plan.decide.rank import rank_plans  # noqa: E402
from ditpar.plan.inputs import custom_model, frameworks, presets  # noqa: E402

GQA = ROOT / "templates" / "models" / "custom-example.toml"


def test_every_preset_pair_ranks_a_runnable_exact_feasible_plan_first():
    """The guard: every model x hardware x {2,4,8} devices x framework profile. Rank 1 is a plan that
    framework runs, exact (approximate plans not allowed), and within device memory (its unlocks applied)."""
    fws = frameworks.all_frameworks()
    answered = refused = 0
    for mname in presets.list_models():
        model = presets.load_model(mname)
        shape = make_shape(model)
        for hname in presets.list_hardware():
            for devices in (2, 4, 8):
                if devices > presets.load_hardware(hname).n_devices:
                    continue
                hw = presets.resolve_hardware(hname, None, devices)
                for fw in fws:
                    try:
                        res = rank_plans(model, hw, shape, devices, Tunables(), frameworks=[fw], detail=False)
                    except InputError as exc:
                        assert "plan can use" in str(exc)
                        refused += 1
                        continue
                    top = res[0]
                    where = f"{mname} on {hname} x{devices} with {fw.name}: {top.plan.name}"
                    assert top.feasible and top.framework == fw.name, where
                    assert frameworks.runs(fw, model, hw, shape, top.plan) is None, where
                    assert top.exact, where
                    # within the headroom, or 'fits, tight' (G2 tight) up to the card's memory
                    g2 = next(g for g in top.gates if g.gate == "G2")
                    mem_ok = top.breakdown.memory_GB <= hw.memory_GB * MEMORY_HEADROOM + 1e-9 or (
                        g2.verdict == "tight" and top.breakdown.memory_GB <= hw.memory_GB * TIGHT_LIMIT + 1e-9)
                    assert mem_ok, where
                    answered += 1
    assert answered > 1000 and refused > 0


def _rank1(model, hw, devices, names, **kw):
    m = presets.resolve_model(model)
    h = presets.resolve_hardware(hw, None, devices)
    fws = frameworks.resolve_frameworks(names)
    res = rank_plans(m, h, make_shape(m, **kw), devices, Tunables(), frameworks=fws)
    return res[0], res


def test_issue_examples_rank_runnable_exact_plans():
    top, res = _rank1("FLUX.1-schnell", "H100", 4, None)
    assert top.exact and top.plan.pipefusion == 1
    # PipeFusion plans are listed, marked approximate, and ranked after every exact plan
    pf = [r for r in res if r.feasible and r.plan.pipefusion > 1]
    assert pf and all(not r.exact for r in pf)
    for model in ("Wan2.1-T2V-1.3B", "CogVideoX-5b"):
        top, _ = _rank1(model, "H100", 8, None)
        assert top.plan.kv_allgather == 1 and top.plan.pipefusion == 1, (model, top.plan.name)
    # xDiT has no PipeFusion for CogVideoX: G1 says so
    _, res = _rank1("CogVideoX-5b", "H100", 8, ["xDiT"])
    pf = next(r for r in res if r.plan.pipefusion > 1 and r.plan.cfg == 1 and r.plan.sp == 1 and r.plan.tp == 1)
    assert not pf.feasible and "xDiT: no pipefusion for cogvideox" in pf.gates[0].reason


def test_indivisible_sequence_is_padded_by_a_padding_framework_and_costed():
    m = presets.resolve_model("Qwen-Image")
    shape = make_shape(m)
    assert shape.tokens == 6889   # 83 x 83
    hw = presets.resolve_hardware("H100", None, 8)
    res = rank_plans(m, hw, shape, 8, Tunables(), frameworks=frameworks.resolve_frameworks(["cache-dit"]))
    u8 = next(r for r in res if r.plan == Plan(ulysses=8))
    assert u8.feasible and u8.pad_tokens == 6896 - 6889   # ceil(6889 / 8) * 8 = 6896
    # xDiT rejects it (no padding in its profile): vetoed with the framework's reason
    from ditpar.plan.inputs.frameworks import runs

    # xDiT pads Qwen-Image (transformer_qwen.py chunk_and_pad_sequence); LightX2V pads only Wan (pre_infer.py);
    # vLLM-Omni pads with zeros since its later releases (sequence_parallel.md)
    xdit, lx, omni = frameworks.resolve_frameworks(["xDiT", "LightX2V", "vLLM-Omni"])
    assert runs(xdit, m, hw, shape, Plan(ulysses=8)) is None and runs(omni, m, hw, shape, Plan(ulysses=8)) is None
    assert runs(lx, m, hw, shape, Plan(ulysses=8)) == "sequence 6889 tokens not divisible by sp 8 (no padding)"
    assert runs(omni, m, hw, shape, Plan(ulysses=1, cfg=1, tp=1, dp=8)) is None
    # diffusers pads (ulysses_anything) only with one sequence form: U8 yes, U4 x its ring (the K/V all-gather) 2 no
    (diff,) = frameworks.resolve_frameworks(["diffusers"])
    assert runs(diff, m, hw, shape, Plan(ulysses=8)) is None
    assert "no padding" in runs(diff, m, hw, shape, Plan(ulysses=4, kv_allgather=2))


def _gqa_model():
    return custom_model.load(str(GQA))


@pytest.mark.parametrize("devices, kv_per_rank", [(4, 3), (8, 3)])
def test_gqa_48q_6kv_ulysses_bytes_by_hand(devices, kv_per_rank):
    """48 query / 6 K/V heads, head_dim 128: U4 replicates K/V to lcm(6,4) = 12 heads (3 per rank),
    U8 to lcm(6,8) = 24 heads (3 per rank); never 1.5 or 0.75 heads."""
    m = custom_model.override(_gqa_model(), layers=1)
    assert (m.heads, m.kv_heads, m.head_dim) == (48, 6, 128)
    assert kv_heads_after_split(6, 1, devices) == kv_per_rank
    hw = presets.resolve_hardware("H100", None, devices)
    shape = custom_model.with_tokens(make_shape(m, cfg=False), 4096)
    plan = Plan(ulysses=devices)
    (blk,) = block_work(m, hw, shape, plan, layout(plan))
    a2a = next(c for c in blk.comms if c.family == "alltoall")
    n = 4096 / devices                                   # tokens per rank
    q_o = 2 * 48 * 128                                   # Q and O widths
    k_v = 2 * kv_per_rank * devices * 128                # K and V replicated to kv_per_rank x U heads
    tensor = n * 2 * (q_o + k_v)                         # bf16 bytes of Q, K, V, O on one rank
    sent = tensor * (devices - 1) / devices              # every peer gets 1/U of it
    assert a2a.bytes_per_call * a2a.calls == pytest.approx(sent)
    expect = {4: 4096 / 4 * 2 * (12288 + 3072) * 3 / 4, 8: 4096 / 8 * 2 * (12288 + 6144) * 7 / 8}[devices]
    assert sent == expect


def test_kv_heads_are_never_fractional():
    assert kv_heads_after_split(8, 1, 4) == 2 and kv_heads_after_split(4, 1, 8) == 1
    assert kv_heads_after_split(6, 2, 4) == 3     # 3 per TP rank, replicated to lcm(3, 4) = 12, 3 per rank
    for kv in (1, 2, 3, 4, 6, 8, 40):
        for u in (1, 2, 3, 4, 6, 8, 16):
            assert isinstance(kv_heads_after_split(kv, 1, u), int) and kv_heads_after_split(kv, 1, u) >= 1


def test_moe_experts_all_resident():
    from ditpar.plan.cost.memory import memory_per_rank

    m = presets.resolve_model("Wan2.2-T2V-A14B")
    _, parts = memory_per_rank(m, make_shape(m), Plan(ulysses=8))
    assert parts["weights_GB"] == pytest.approx(14.0 * 2 * 2)   # 2 experts x 14B x 2 bytes


def test_model_file_and_overrides_and_bad_input(tmp_path):
    m = _gqa_model()
    assert m.blocks == {"cross": 40} and m.text_cross_tokens == 512 and m.cfg_default
    shape = make_shape(m)
    assert shape.tokens == 21 * 45 * 80
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "x"\nheads = 8\n')
    with pytest.raises(InputError, match="missing key"):
        custom_model.load(str(bad))
    with pytest.raises(InputError, match="must divide"):
        custom_model.override(m, kv_heads=5)
    with pytest.raises(InputError, match="unknown"):
        frameworks.resolve_frameworks(["NoSuchFramework"])
    o = custom_model.override(presets.resolve_model("Wan2.1-T2V-14B"), heads=48, kv_heads=6, layers=20)
    assert (o.heads, o.kv_heads, o.n_layers) == (48, 6, 20)


@pytest.mark.parametrize("args, needle", [
    (["--framework", "nope"], "unknown; known"),
    (["--model-file", "missing.toml"], "missing.toml: no such file or folder"),
    (["--kv-heads", "7"], "must divide"),
])
def test_cli_bad_input_exits_2_with_one_line(args, needle):
    base = ["--hardware", "H100", "--devices", "4"]
    if "--model-file" not in args:
        base += ["--model", "Wan2.1-T2V-14B"]
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "plan.py"), *base, *args],
                       capture_output=True, text=True)
    assert p.returncode == 2 and needle in p.stderr and len(p.stderr.strip().splitlines()) == 1


def test_cli_json_carries_framework_exact_speedup():
    import json

    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "plan.py"), "--model", "FLUX.1-schnell",
                        "--hardware", "H100", "--devices", "4", "--framework", "xDiT", "--json"],
                       capture_output=True, text=True, check=True)
    data = json.loads(p.stdout)
    top = data["plans"][0]
    assert top["framework"] == "xDiT" and top["exact"] is True and top["speedup_vs_1"] > 1
    assert "xDiT" in data["conclusion"]
    single = [q for q in data["plans"] if q["name"] == "DP4"]
    assert single and single[0]["speedup_vs_1"] == pytest.approx(1.0, rel=0.02)


def test_memory_parts_by_hand_and_g2_names_the_unlock():
    from ditpar.plan.cost.memory import memory_per_rank

    m = presets.resolve_model("Wan2.2-T2V-A14B")
    hw = presets.resolve_hardware("H100", None, 8)
    peak, parts = memory_per_rank(m, make_shape(m), Plan(cfg=2, ulysses=4), hw)
    assert parts["text_encoder_GB"] == pytest.approx(5.68 * 2)                   # umT5-XXL, bf16
    assert parts["vae_decode_GB"] == pytest.approx(4 * 1280 * 720 * 128 * 2 * 3 / 1e9)   # 4 frames at once
    assert parts["comm_buffers_GB"] == pytest.approx(2 * 0.25)                   # cfg and ulysses communicators
    assert peak == pytest.approx(parts["weights_GB"] + parts["text_encoder_GB"] + parts["comm_buffers_GB"]
                                 + max(parts["activations_GB"] + parts["kv_buffers_GB"], parts["vae_decode_GB"]))
    _, off = memory_per_rank(m, make_shape(m), Plan(), hw, offload_text_encoder=True, vae_tiling=True)
    assert off["text_encoder_GB"] == 0 and off["vae_decode_GB"] == pytest.approx(4 * 512 * 512 * 128 * 2 * 3 / 1e9)
    # FLUX.1-dev on 24 GB cards: TP2 plans fit only without the resident T5 -> the ranking offloads it, charges
    # its 9.8 GB over the RTX 4090's PCIe Gen4 host link (31.5 GB/s x 0.8) once, and G2 says what unlocked the plan
    flux = presets.resolve_model("FLUX.1-dev")
    box = presets.resolve_hardware("RTX 4090", None, 4)
    res = rank_plans(flux, box, make_shape(flux), 4, Tunables(), frameworks=frameworks.all_frameworks(),
                     detail=False)
    u2tp2 = next(r for r in res if r.plan == Plan(ulysses=2, tp=2))   # 23.1 GB of 24: above 95 % as it is
    assert u2tp2.feasible and u2tp2.unlocks == ("te",) and "unlocked by text-encoder offload" in u2tp2.gates[-1].reason
    te_s = u2tp2.breakdown.exposed_by_family_s["text-encoder offload (host to device)"]
    assert te_s == pytest.approx(flux.text_encoder_params_b * 2 / (31.5 * 0.8))
    import dataclasses

    res = rank_plans(flux, box, make_shape(flux), 4, dataclasses.replace(Tunables(), offload_text_encoder=True),
                     frameworks=frameworks.all_frameworks(), detail=False)
    assert next(r for r in res if r.plan == Plan(ulysses=2, tp=2)).feasible


def test_framework_profile_file(tmp_path):
    src = (ROOT / "templates" / "frameworks" / "lightx2v.toml").read_text()
    mine = tmp_path / "mine.toml"
    mine.write_text(src.replace('name = "LightX2V"', 'name = "Mine"').replace(
        'incompatible = [["ulysses", "ring"], ["ulysses", "kv_allgather"], ["ring", "kv_allgather"]]',
        'incompatible = []').replace('gqa_kv_replication = false', 'gqa_kv_replication = true').replace(
        'kv_allgather = ["hunyuan-image3"]', 'kv_allgather = ["*"]'))
    (fw,) = frameworks.resolve_frameworks([str(mine)])
    wan = presets.resolve_model("Wan2.1-T2V-14B")
    hw = presets.resolve_hardware("H100", None, 8)
    assert frameworks.runs(fw, wan, hw, make_shape(wan), Plan(ulysses=4, kv_allgather=2)) is None
    gqa = custom_model.override(wan, kv_heads=4)
    shape = make_shape(gqa)
    assert frameworks.runs(fw, gqa, hw, shape, Plan(ulysses=8)) is None        # K/V heads replicated 4 -> 8
    (lx,) = frameworks.resolve_frameworks(["lightx2v"])
    assert "no K/V head replication" in frameworks.runs(lx, gqa, hw, shape, Plan(ulysses=8))
    bad = tmp_path / "bad.toml"
    bad.write_text(src.replace('sequence_indivisible = "reject"', 'sequence_indivisible = "maybe"'))
    with pytest.raises(InputError, match="sequence_indivisible"):
        frameworks.resolve_frameworks([str(bad)])


def test_framework_matrix_in_reference_matches_profiles():
    text = (ROOT / "references" / "parallel-selection.md").read_text()
    assert frameworks.matrix_markdown() in text
