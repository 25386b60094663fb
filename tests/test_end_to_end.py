"""The serial stages (text encoder, VAE decode) on top of the DiT loop: which rows hold them, how they enter the
speedup and the --ref-latency calibration. Expected values are worked out here from the presets' own numbers."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from conftest import run_script
from ditpar.plan.cost import make_shape, predict, serial_time
from ditpar.plan.cost.end_to_end import serial_stages
from ditpar.plan.inputs import presets
from ditpar.plan.judge import evaluate


def _row(**over) -> pd.Series:
    base = {"source_repo": "xdit-project/xDiT", "source_path": "docs/x.md", "model": "FLUX.1-dev",
            "hardware": "H100", "interconnect": "NVLink", "n_devices": "4", "resolution_or_seq": "1024x1024",
            "steps": "28", "ulysses": "4", "ring": "1", "pipefusion": "1", "cfg": "1", "tp": "1",
            "other_config": "pytorch", "latency_s": "4.24", "notes": "kind=table"}
    return pd.Series({**base, **over})


@pytest.mark.parametrize("other, notes, scope", [
    ("pytorch", "kind=table", "end_to_end"),
    ("xDiT (diffusers-based); DiT forward only (VAE decode bar segment excluded)", "", "dit"),
    ("optimal configuration; PER-ITERATION latency (one diffusion step), not end-to-end", "", "dit"),
    ("pytorch", "kind=table; wall time includes text encoder and VAE decoder", "end_to_end"),
    # xDiT's CogVideoX charts and diffusers' PR tables time one step of the loop: no decode in them (issue 23)
    ("xDiT (diffusers-based); latency per denoising step, not end-to-end (chart 'Latency/Step')", "", "dit"),
    ("diffusers native context parallel; latency per step", "", "dit"),
    ("pytorch", "chart 'Latency/Step for CogVideo-2b (50 Steps) on A100'", "dit"),
    ("diffusers native context parallel; one whole 50-step generation", "", "end_to_end"),
    # SGLang's CI rows are client-side end to end; their notes reason about steps and branches without timing one step
    ("SGLang-Diffusion server; expected_e2e_ms", "FLUX.1-dev (guidance-distilled: one branch per step)", "end_to_end"),
    ("SGLang-Diffusion server; expected_e2e_ms", "0.249 s per step leaves room for one branch only", "end_to_end"),
    # DiffSynth's one-card row: a per-step hook time without the text encoder and the VAE
    ("bf16", "555.5 ms per denoising step, i.e. a per-step hook time without text encoder and VAE", "dit"),
])
def test_row_scope_follows_what_the_row_says(other, notes, scope):
    assert evaluate.row_scope(_row(other_config=other, notes=notes)) == scope


def test_text_encoder_is_two_flops_per_parameter_and_token_at_the_preset_rate():
    model, hw = presets.resolve_model("FLUX.1-dev"), presets.resolve_hardware("H100", None, 8)
    shape = make_shape(model, 1024, 1024, 1, 28, cfg=None)
    st = serial_stages(model, hw, shape)
    # 4.88e9 parameters x 512 T5 tokens x 2 FLOPs, at 989 TFLOPS x mfu 0.32 (templates/hardware/h100-sxm-nvlink.toml)
    assert st.text_encode_s == pytest.approx(2 * 4.88e9 * 512 / (989e12 * 0.32), rel=1e-12)
    decode = serial_time.predict_decode(model, hw, 1024, 1024, 1).seconds
    assert st.vae_decode_s == pytest.approx(decode, rel=1e-12) and st.total_s == pytest.approx(
        st.text_encode_s + decode, rel=1e-12)


def test_cfg_encodes_the_negative_prompt_too():
    model, hw = presets.resolve_model("Wan2.1-T2V-14B"), presets.resolve_hardware("Atlas 800I A2", None, 8)
    with_cfg = serial_stages(model, hw, make_shape(model, 832, 480, 81, 50, cfg=True))
    without = serial_stages(model, hw, make_shape(model, 832, 480, 81, 50, cfg=False))
    assert with_cfg.text_encode_s == pytest.approx(2 * without.text_encode_s, rel=1e-12)
    assert with_cfg.vae_decode_s == pytest.approx(without.vae_decode_s, rel=1e-12)   # one sample is decoded


def test_vae_parallel_rows_split_the_decode_over_their_cards():
    row = _row(model="Wan2.1-T2V-14B", hardware="Atlas 800I A2", interconnect="HCCS", n_devices="4",
               resolution_or_seq="832x480x81 frames", steps="50", ulysses="4",
               other_config="MindIE-SD operator optimization; VAE decode parallel over the cards")
    model, hw, shape, plan, _ = evaluate.row_context(row)
    split = evaluate.row_serial(row, model, hw, shape, plan)
    whole = serial_stages(model, hw, shape)
    # Amdahl with the serial share of the published split pairs (0.053, 0.379, 0.498, 0.087: median 0.233)
    ltx, wan = 2 * 397.07 / 730.73 - 1, 2 * 1814.8 / 2631.4 - 1       # the two middle pairs, on 2 cards each
    share = (ltx + wan) / 2
    assert split.vae_devices == 4 and split.vae_decode_s == pytest.approx(
        whole.vae_decode_s * (share + (1 - share) / 4), rel=1e-12)
    assert split.text_encode_s == pytest.approx(whole.text_encode_s, rel=1e-12)   # every rank encodes


@pytest.mark.parametrize("text, cards, degree", [
    ("VAE patch parallel 2", 8, 2), ("vae_patch_parallel_size=4", 8, 4), ("parallel_vae_size 2", 4, 2),
    ("parallel VAE 8", 8, 8), ("DistVAE", 4, 4), ("--use_parallel_vae", 8, 8), ("vae parallel degree 16", 8, 8),
    ("VAE patch parallel 1", 8, 1), ("torch.compile; Ulysses 4", 4, 1), ("patch-parallel VAE", 2, 2)],
    ids=["vae-pp-2", "vllm-omni-kw", "trtllm-kw", "parallel-vae-8", "distvae", "xdit-flag", "capped-at-cards",
         "stated-one", "none", "patch-parallel-vae"])
def test_the_vae_split_a_row_states_is_read_with_its_degree(text, cards, degree):
    from ditpar.plan.cost.vae_parallel import stated_vae_degree

    assert stated_vae_degree(text, cards) == degree


def test_the_split_share_reproduces_each_published_pair_it_rests_on():
    """Each pair's own share gives back its split time (sglang 36012: HunyuanVideo 5.713 -> 1.654 s on 4 H200)."""
    from ditpar.plan.cost import vae_parallel as vp

    hy = next(m for m in vp.SPLITS if m.cards == 4)
    assert hy.serial_share == pytest.approx((1.654 / 5.713 - 0.25) / 0.75, rel=1e-12)
    assert vp.split_decode_s(5.713, 4, hy.serial_share) == pytest.approx(1.654, rel=1e-12)
    assert vp.SERIAL_SHARE == pytest.approx(sorted(m.serial_share for m in vp.SPLITS)[1:3][0] / 2
                                            + sorted(m.serial_share for m in vp.SPLITS)[1:3][1] / 2)
    assert vp.split_decode_s(10.0, 1) == 10.0


def test_an_end_to_end_row_is_scored_as_dit_plus_serial_and_a_dit_row_as_dit_alone():
    row = _row()
    model, hw, shape, plan, _ = evaluate.row_context(row)
    dit = predict(model, hw, shape, plan).latency_s
    stages = serial_stages(model, hw, shape)
    assert evaluate.score_row(row)[0] == pytest.approx(dit + stages.total_s, rel=1e-12)
    dit_row = _row(other_config="xDiT; DiT forward only (VAE decode bar segment excluded)")
    assert evaluate.score_row(dit_row)[0] == pytest.approx(dit, rel=1e-12)


def test_a_model_without_vae_data_adds_nothing_and_says_so():
    model, hw = presets.resolve_model("Example-MHA-56H-50L"), presets.resolve_hardware("H100", None, 8)
    st = serial_stages(model, hw, make_shape(model, 1280, 704, 121, 50, cfg=None))
    assert st.vae_decode_s is None and not st.priced and st.total_s == 0.0
    assert any("VAE decode not priced" in n for n in st.notes)


def test_ref_latency_is_end_to_end_the_serial_stages_come_off_first():
    """--ref-latency R on one card: the DiT prediction becomes R minus the serial stages, and the JSON says so."""
    proc = run_script("plan.py", "--model", "FLUX.1-dev", "--hardware", "H100", "--devices", "1",
                      "--ref-latency", "6.71", "--json", check=0)
    doc = json.loads(proc.stdout)
    serial = doc["serial_stages"]
    (single,) = [p for p in doc["plans"] if p["feasible"]]   # one card: the one plan
    assert single["predicted_latency_s"] + serial["total_s"] == pytest.approx(6.71, rel=1e-6)
    assert serial["end_to_end_s"][single["name"]] == pytest.approx(6.71, rel=1e-6)
    model, hw = presets.resolve_model("FLUX.1-dev"), presets.resolve_hardware("H100", None, 1)
    assert serial["total_s"] == pytest.approx(serial_stages(model, hw, make_shape(model, 1024, 1024, 1, 28, cfg=None))
                                              .total_s, rel=1e-9)


def test_a_ref_latency_inside_the_serial_stages_is_refused_with_them_named():
    proc = run_script("plan.py", "--model", "FLUX.1-dev", "--hardware", "H100", "--devices", "8",
                      "--ref-latency", "0.01", check=2)
    assert proc.stderr.startswith("plan.py: error: --ref-latency 0.01 s: expected more than the serial stages")
    assert len(proc.stderr.strip().splitlines()) == 1


def test_end_to_end_speedup_and_its_held_out_range():
    """Every feasible plan's end-to-end speedup is (one card + serial) / (plan + its serial, the decode split as its
    framework splits it), capped by Amdahl's bound (one card + serial) / (one card / cards + its serial), and its
    range that times e^-q..e^q of its stratum, capped alike; the text names the leading plan's, end to end first."""
    import math

    from ditpar.plan.decide import uncertainty

    proc = run_script("plan.py", "--model", "Wan2.1-T2V-14B", "--hardware", "Atlas 800I A2", "--devices", "8",
                      "--json", check=0)
    doc = json.loads(proc.stdout)
    serial = doc["serial_stages"]
    assert serial["total_s"] > 20 and serial["speedup_range_level"] == 0.8
    feasible = [p for p in doc["plans"] if p["feasible"]]
    assert set(serial["end_to_end_speedup"]) == {p["name"] for p in feasible}
    assert {p["framework"] for p in feasible} == {"MindIE-SD", "vLLM-Omni"}   # vLLM-Omni runs the AllGather-KV plans
    for p in feasible:
        single = p["speedup_vs_1"] * p["predicted_latency_s"]
        cards = 8 // p["dp"]
        # the one card decodes alone; the plan's framework splits Wan's decode over its cards where its profile does:
        # MindIE-SD (--vae_parallel, Ascend/MindIE-SD@3066189522a6:examples/wan/infer_t2v.sh L21) and vLLM-Omni
        # (vae_patch_parallel_size over the DiT group, vllm-project/vllm-omni@1882a997163a:docs/user_guide/diffusion/
        # parallelism/vae_parallelism.md), the two frameworks that run plans on this Ascend box
        own = serial["text_encode_s"] + serial["vae_decode_s_by_plan"][p["name"]]
        assert p["framework"] in ("MindIE-SD", "vLLM-Omni")
        assert p["vae_devices"] == 8 // p["dp"]
        assert serial["end_to_end_s"][p["name"]] == pytest.approx(p["predicted_latency_s"] + own)
        cap = min(cards, (single + serial["total_s"]) / (single / cards + own))
        want = min(cap, (single + serial["total_s"]) / (p["predicted_latency_s"] + own))
        got = serial["end_to_end_speedup"][p["name"]]
        assert got["speedup"] == pytest.approx(want) and got["speedup"] <= p["speedup_vs_1"] + 1e-9
        q = uncertainty.RANGE_Q[got["stratum"]][0]
        assert (got["low"], got["high"]) == pytest.approx((min(cap, want * math.exp(-q)), min(cap, want * math.exp(q))))
    text = run_script("plan.py", "--model", "Wan2.1-T2V-14B", "--hardware", "Atlas 800I A2", "--devices", "8").stdout
    lead = serial["end_to_end_speedup"][feasible[0]["name"]]
    assert (f"speedup of #1 {feasible[0]['name']} over one device: {lead['speedup']:.1f}x end to end (serial stages "
            f"included; DiT loop {lead['dit_speedup']:.1f}x); 80% range {lead['low']:.1f}-{lead['high']:.1f}x") in text
