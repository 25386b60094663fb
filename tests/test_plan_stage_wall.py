"""The VAE decode split over the cards as the plan's framework splits it, the stage wall, memory unlocks as plan
options (offload, sharding, text-encoder offload) and the 'fits, tight' memory verdict."""

from __future__ import annotations

import json

import pytest
from conftest import run_script
from ditpar.plan.cost import offload
from ditpar.plan.cost.vae_parallel import split_decode_s
from ditpar.plan.inputs import presets

WAN_1080P = ["--model", "Wan2.2-T2V-A14B", "--hardware", "H100-SXM NVLink x8", "--devices", "8",
             "--resolution", "1920x1080", "--frames", "81"]


def test_a_1080p_video_on_8_cards_under_vllm_omni_splits_the_decode_and_launches_it():
    doc = json.loads(run_script("plan.py", *WAN_1080P, "--framework", "vLLM-Omni", "--json", check=0).stdout)
    lead = next(p for p in doc["plans"] if p["feasible"])
    serial = doc["serial_stages"]
    assert lead["framework"] == "vLLM-Omni" and lead["vae_devices"] == 8
    one = serial["vae_decode_s"]                       # the decode on one card
    assert one > 20                                    # 1920x1080x81 through the Wan VAE on one H100: tens of seconds
    assert serial["vae_decode_s_by_plan"][lead["name"]] == pytest.approx(split_decode_s(one, 8), rel=1e-12)
    wall = serial["wall"]
    assert wall["plan"] == lead["name"] and wall["vae_devices"] == 8 and wall["wall"] == "dit_loop"
    assert wall["end_to_end_s"] == pytest.approx(serial["end_to_end_s"][lead["name"]], rel=1e-12)
    assert "vae_patch_parallel_size=8" in lead["run_recipe"]["config"]
    text = run_script("plan.py", *WAN_1080P, "--framework", "vLLM-Omni", check=0).stdout
    assert f"stage wall of #1 {lead['name']}: DiT loop" in text and "split over 8 cards on vLLM-Omni" in text


def test_without_a_framework_that_splits_it_the_decode_stays_on_one_card_and_the_line_says_what_a_split_gives():
    args = ["--model", "Wan2.2-TI2V-5B", "--hardware", "H100-SXM NVLink x8", "--devices", "8", "--steps", "4",
            "--framework", "diffusers-CP"]
    doc = json.loads(run_script("plan.py", *args, "--json", check=0).stdout)
    lead = next(p for p in doc["plans"] if p["feasible"])
    serial = doc["serial_stages"]
    assert lead["vae_devices"] == 1 and serial["vae_decode_s_by_plan"][lead["name"]] == serial["vae_decode_s"]
    assert serial["wall"]["wall"] == "vae_decode"     # 4 steps of a 5B DiT on 8 cards: the decode is the wall
    text = run_script("plan.py", *args, check=0).stdout
    assert "the VAE decode is the wall" in text and f"about {split_decode_s(serial['vae_decode_s'], 8):.2f} s" in text


def test_host_link_and_layer_offload_by_hand():
    h100 = presets.load_hardware("H100-SXM NVLink x8")
    assert offload.host_link_GBps(h100)[0] == pytest.approx(63.0 * 0.8)        # PCIe Gen5 x16 at 80 %
    assert offload.host_link_GBps(presets.load_hardware("RTX 4090"))[0] == pytest.approx(31.5 * 0.8)
    # 28 GB of weights over 25.2 GB/s = 1.111 s a step against 1.0 s of compute: 0.111 s exposed, x 50 steps
    exposed, resident = offload.layer_offload_s(28.0, 40, 1.0, 50, 25.2)
    assert exposed == pytest.approx((28.0 / 25.2 - 1.0) * 50) and resident == pytest.approx(28.0 * 2 / 40)
    assert offload.layer_offload_s(28.0, 40, 2.0, 50, 25.2)[0] == 0.0            # hidden behind compute
    assert offload.text_encoder_offload_s(5.68, 25.2) == pytest.approx(5.68 * 2 / 25.2)


def test_a_model_bigger_than_one_card_gets_a_plan_with_offload_not_a_refusal():
    """Wan2.1-T2V-14B (28 GB of bf16 weights, 11.4 GB text encoder) on one 24 GB RTX 4090."""
    args = ["--model", "Wan2.1-T2V-14B", "--hardware", "RTX 4090", "--devices", "1"]
    doc = json.loads(run_script("plan.py", *args, "--json", check=0).stdout)
    (p,) = [p for p in doc["plans"] if p["feasible"]]
    assert "offload" in p["memory_unlocks"] and p["memory_verdict"].startswith("fits with")
    assert p["memory_GB"] <= 24 * 0.9
    assert p["memory_parts_GB"]["weights_GB"] == pytest.approx(28.0 * 2 / 40, rel=1e-3)   # two of 40 blocks resident
    link = 31.5 * 0.8
    step = p["compute_s"] / doc["shape"]["steps"]
    want = max(0.0, 28.0 / link - step) * doc["shape"]["steps"]
    assert p["exposed_by_collective_s"]["weight offload (host to device)"] == pytest.approx(want, rel=1e-3)
    g2 = next(g for g in p["gates"] if g["gate"] == "G2")
    assert g2["verdict"] == "warn" and "unlocked by" in g2["reason"]
    text = run_script("plan.py", *args, check=0).stdout
    assert "diffusion_offload_config" in text and "fits only with" in text


def test_sharding_is_the_unlock_on_several_cards_and_nothing_fits_is_still_a_refusal():
    doc = json.loads(run_script("plan.py", "--model", "FLUX.2-dev", "--hardware", "RTX 4090", "--devices", "2",
                                "--json", check=0).stdout)
    lead = next(p for p in doc["plans"] if p["feasible"])
    assert set(lead["memory_unlocks"]) & {"shard", "offload"} and lead["memory_GB"] <= 24 * 0.9
    # Wan2.1-T2V-14B on 2 x T4 (16 GB) at 1080p x 161 frames: too big as is, so the cheapest unlock that fits is the
    # answer (a slow one): LightX2V's U2 with the text encoder offloaded and the DiT weights streamed layer by layer
    # (cpu_offload): 14e9 x 2 B = 28 GB over 40 blocks, 2 resident = 1.4 GB, + 0.25 GB comm buffers + the
    # activations, within 95 % of the card (15.2 GB) but above the 90 % headroom: fits, tight
    doc = json.loads(run_script("plan.py", "--model", "Wan2.1-T2V-14B", "--hardware", "T4", "--devices", "2",
                                "--resolution", "1920x1080", "--frames", "161", "--json", check=0).stdout)
    (u2,) = [p for p in doc["plans"] if p["feasible"]]
    parts = u2["memory_parts_GB"]
    assert (u2["name"], u2["framework"], u2["memory_unlocks"]) == ("U2", "LightX2V", ["te", "offload"])
    assert parts["weights_GB"] == pytest.approx(28.0 * 2 / 40) and parts["text_encoder_GB"] == 0.0
    assert u2["memory_GB"] == pytest.approx(1.4 + 0.25 + parts["activations_GB"])
    assert 16 * 0.9 < u2["memory_GB"] <= 16 * 0.95 and u2["memory_verdict"].endswith(", tight")
    # nothing fits: at 241 frames the latent has (241 - 1) / 4 + 1 = 61 frames, not 41, and U2's activations (the
    # smallest of any 2-card plan; no unlock moves them) grow with the tokens to x 61/41: more than the whole card
    assert parts["activations_GB"] * 61 / 41 > 16.0
    proc = run_script("plan.py", "--model", "Wan2.1-T2V-14B", "--hardware", "T4", "--devices", "2",
                      "--resolution", "1920x1080", "--frames", "241", check=2)
    assert proc.stderr.startswith("plan.py: error: no plan can use 2 devices") and len(proc.stderr.splitlines()) == 1
    assert f"activations {parts['activations_GB'] * 61 / 41:.1f}, " in proc.stderr


def test_a_64b_model_on_one_141_gb_card_fits_tight(tmp_path):
    """128 GB of bf16 weights on one H200 (141 GB): above the 90 % headroom (126.9 GB), within 95 % (133.95 GB)."""
    f = tmp_path / "big.toml"
    f.write_text('name = "Big-64B"\nheads = 64\nkv_heads = 64\nhead_dim = 128\nlayers = 60\nparams_b = 64\n'
                 'hidden = 8192\nffn = 32768\ntext_tokens = 256\ncfg = false\nlatent = [1, 128, 128]\n'
                 'patch = [1, 2, 2]\n', encoding="utf-8")
    args = ["--model-file", str(f), "--hardware", "H200", "--devices", "1"]
    doc = json.loads(run_script("plan.py", *args, "--json", check=0).stdout)
    (p,) = [p for p in doc["plans"] if p["feasible"]]
    assert p["memory_parts_GB"]["weights_GB"] == pytest.approx(128.0)
    assert 141 * 0.9 < p["memory_GB"] <= 141 * 0.95 and p["memory_verdict"] == "fits, tight" and not p["memory_unlocks"]
    g2 = next(g for g in p["gates"] if g["gate"] == "G2")
    assert g2["verdict"] == "tight" and f"{141 - p['memory_GB']:.1f} GB left" in g2["reason"]
    text = run_script("plan.py", *args, check=0).stdout
    assert " tight " in text and "fits, tight (G2)" in text


def _ranked(name, rank, latency_s, vae_devices, framework, dp=1, exact=True, devices=8):
    from types import SimpleNamespace as NS

    return NS(plan=NS(name=name, dp=dp, devices=devices), rank=rank, feasible=True, exact=exact, framework=framework,
              vae_devices=vae_devices, breakdown=NS(latency_s=latency_s))


def test_a_plan_faster_end_to_end_than_the_dit_loop_leader_is_named_with_its_margin():
    from ditpar.plan.cost.end_to_end import SerialStages
    from ditpar.plan.decide.stages import end_to_end_lead, end_to_end_lead_line

    stages = SerialStages(text_encode_s=0.5, vae_decode_s=10.0, vae_serial_s=10.0)
    split8 = split_decode_s(10.0, 8)
    lead = _ranked("U8", 1, 20.0, 1, "A")              # 20 + 0.5 + 10 = 30.5 s end to end
    rival = _ranked("U4 R2", 2, 21.0, 8, "B")          # 21 + 0.5 + split8 (3.29 s at the fitted serial share 0.233): 24.8 s
    dp = _ranked("U4 DP2", 3, 5.0, 4, "B", dp=2)       # serves other requests: never the answer
    approx = _ranked("PF8", 4, 1.0, 8, "C", exact=False)
    e = end_to_end_lead(stages, [lead, rival, dp, approx])
    assert e["plan"] == "U4 R2" and e["rank"] == 2
    assert e["end_to_end_s"] == pytest.approx(21.0 + 0.5 + split8) and e["lead_end_to_end_s"] == pytest.approx(30.5)
    line = end_to_end_lead_line(stages, [lead, rival, dp, approx])
    assert line.startswith("end to end, #2 U4 R2 on B is faster: ") and "for #1 U8" in line
    assert f"over 8 cards ({split8:.2f} s against 10.00 s on one card)" in line
    # inside the 5 % margin: not named (30.5 x 0.95 = 28.975; a rival at 25.5 + 0.5 + 3.29 = 29.29 s is above it)
    near = _ranked("U4 R2", 2, 25.5, 8, "B")
    assert 0.95 * 30.5 < 25.5 + 0.5 + split8 < 30.5
    assert end_to_end_lead(stages, [lead, near]) is None and end_to_end_lead_line(stages, [lead, near]) == ""
    # the leader already fastest end to end, or no decode priced: nothing
    assert end_to_end_lead(stages, [rival, lead]) is None
    assert end_to_end_lead(SerialStages(0.5, None), [lead, rival]) is None
