"""The gates at their thresholds (exactly at, just below, just above), every veto with its message, and
the verdicts that are information only (never a pass). Expected values are worked out by hand in the
comments from the rule each gate states, not read back from the gate."""

from __future__ import annotations

import math
import re

import pytest
from costmodel_fixtures import box, replace, tiny_model
from ditpar.plan.cost import Plan, Tunables, make_shape, predict
from ditpar.plan.cost.memory import VAE_BUFFERS, VAE_DECODE_CHANNELS, VAE_TILE_PX
from ditpar.plan.cost.shape import Shape
from ditpar.plan.cost.timing import Breakdown
from ditpar.plan.cost.work import BYTES_PER_ELEMENT, OPS_RING_HOP, OPS_ULYSSES
from ditpar.plan.decide import gates


def image(model, px=128):
    # tiny model: vae stride 8, patch 2 -> 128 px is an 8 x 8 = 64-token grid
    return make_shape(model, px, px, 1, 10, cfg=False)


def video(tokens_per_frame: int, frames_tok: int, cfg: bool = False) -> Shape:
    return Shape(width=64, height=64, frames=5, steps=10, cfg=cfg, frames_tok=frames_tok,
                 tokens_per_frame=tokens_per_frame, text_joint=0, text_cross=0)


# ---------------------------------------------------------------- G1 form availability

def test_g1_heads_must_divide_ulysses_times_tp():
    # 12 heads over U4 x TP2 = 8 ranks: 12 % 8 = 4, so no even head split (U4 alone: 12 % 4 = 0 passes);
    # 4 KV heads divide every split here (4, 8), so the head count is the only veto
    m = replace(tiny_model(kv_heads=4), heads=12, hidden=96)
    g = gates.availability(m, box(), image(m), Plan(ulysses=4, tp=2))
    assert (g.verdict, g.reason) == ("veto", "heads 12 not divisible by ulysses x tp = 8")
    assert gates.availability(m, box(), image(m), Plan(ulysses=4)).verdict == "pass"
    # U2 x TP2 = 4 divides 12: pass (the TP note is information attached to a pass)
    g = gates.availability(m, box(), image(m), Plan(ulysses=2, tp=2))
    assert g.verdict == "pass" and g.reason.startswith("TP: ")


def test_g1_head_split_larger_than_heads_is_a_veto_even_when_it_divides():
    # 8 heads on 16 ranks: 8 % 16 = 8 != 0 anyway, but also d > n; 8 on 8 is the boundary that passes
    m = tiny_model()
    g = gates.availability(m, box(devices=16), image(m), Plan(ulysses=8, tp=2))
    assert g.verdict == "veto" and g.reason.startswith("heads 8 not divisible by ulysses x tp = 16")
    assert gates.availability(m, box(), image(m), Plan(ulysses=8)).verdict == "pass"


def test_g1_framework_profiles_veto_only_a_split_above_the_head_count():
    from ditpar.plan.inputs.frameworks import all_frameworks

    fws = all_frameworks()
    m = replace(tiny_model(kv_heads=12), heads=12, hidden=96)
    # 16 > 12 heads: no framework can split heads over more ranks than heads
    g = gates.availability(m, box(devices=16), image(m), Plan(ulysses=8, tp=2), fws)
    assert (g.verdict, g.reason) == ("veto", "ulysses x tp = 16 > 12 heads")
    # 8 ranks on 8 heads (equal, not above) is left to the profiles, which run it
    m8 = tiny_model()
    g = gates.availability(m8, box(), image(m8), Plan(ulysses=8), fws)
    assert g.verdict == "pass" and g.reason.startswith("runs on ")


def test_g1_framework_veto_groups_the_vendors_nobody_supports_last():
    from ditpar.plan.inputs.frameworks import all_frameworks

    m = tiny_model()
    g = gates.availability(m, box(vendor="ascend"), image(m), Plan(pipefusion=2, dp=4), all_frameworks())
    assert g.verdict == "veto" and g.reason.startswith("no named framework runs it: ")
    parts = g.reason.removeprefix("no named framework runs it: ").split(" | ")
    # the frameworks without Ascend support come last, in one part, with the vendor named once
    assert parts[-1].endswith(": no ascend support") and "," in parts[-1]
    assert all("no ascend support" not in p for p in parts[:-1])


def test_g1_kv_heads_neither_dividing_nor_multiple_of_the_split():
    # 8 heads, 3 KV heads on U8: 3 < 8 and 8 % 3 = 2 -> veto; 2 KV heads: 8 % 2 = 0 (replicated) -> pass
    g = gates.availability(tiny_model(kv_heads=3), box(), image(tiny_model()), Plan(ulysses=8))
    assert (g.verdict, g.reason) == ("veto", "kv_heads 3 neither divides nor is a multiple of ulysses x tp = 8")
    assert gates.availability(tiny_model(kv_heads=2), box(), image(tiny_model()), Plan(ulysses=8)).verdict \
        == "pass"
    # KV heads equal to the split (8 = 8): pass
    assert gates.availability(tiny_model(kv_heads=8), box(), image(tiny_model()), Plan(ulysses=8)).verdict \
        == "pass"


def test_g1_spatial_attention_needs_tokens_per_frame_to_divide_sp_full_attention_does_not():
    # video of 4 frames x 6 tokens = 24 tokens; ring 4: 24 % 4 = 0 (full attention fine), 6 % 4 = 2
    full, spatial = tiny_model(), tiny_model(blocks={"spatial": 1, "temporal": 1})
    shp = video(tokens_per_frame=6, frames_tok=4)
    assert gates.availability(full, box(), shp, Plan(ring=4)).verdict == "pass"
    g = gates.availability(spatial, box(), shp, Plan(ring=4))
    assert (g.verdict, g.reason) == ("veto", "tokens per frame 6 not divisible by sp = 4")
    # ring 2: 6 % 2 = 0 for the spatial model too
    assert gates.availability(spatial, box(), shp, Plan(ring=2)).verdict == "pass"
    # sp = 1: no sequence split, nothing to divide (6 % 1 = 0 anyway; 7 tokens per frame with dp only)
    assert gates.availability(spatial, box(), video(7, 4), Plan(dp=2)).verdict == "pass"


def test_g1_sequence_must_divide_sp():
    # 5 x 5 = 25 tokens (80 px / 8 / 2 = 5): ring 5 divides, ring 4 does not (25 % 4 = 1)
    m = tiny_model()
    shp = make_shape(m, 80, 80, 1, 10, cfg=False)
    assert shp.tokens == 25
    g = gates.availability(m, box(), shp, Plan(ring=4))
    assert (g.verdict, g.reason) == ("veto", "sequence 25 tokens not divisible by ulysses x ring x kv_allgather = 4")
    assert gates.availability(m, box(), shp, Plan(ring=5)).verdict == "pass"


def test_padding_for_full_and_spatial_attention():
    from ditpar.plan.cost.work import padding_for

    # 2 frames x 13 tokens = 26; sp 4: full attention pads to 28 (2 tokens); spatial pads every frame
    # to 16 (3 each, 6 in all); sp 1 pads nothing
    full, spatial = tiny_model(), tiny_model(blocks={"spatial": 2})
    shp = video(tokens_per_frame=13, frames_tok=2)
    assert padding_for(full, shp, Plan(ring=4)) == 2
    assert padding_for(spatial, shp, Plan(ring=4)) == 6
    assert padding_for(full, shp, Plan(dp=4)) == 0
    assert padding_for(full, video(13, 2), Plan(ring=2)) == 0   # 26 % 2 = 0
    assert padding_for(spatial, video(12, 2), Plan(ring=4)) == 0


def test_g1_pipefusion_layers_and_patches_boundaries():
    m = tiny_model()   # 2 layers, 64 tokens per frame
    shp = image(m)
    assert gates.availability(m, box(), shp, Plan(pipefusion=2)).verdict == "pass"   # 2 = 2 layers
    g = gates.availability(m, box(), shp, Plan(pipefusion=3))
    assert (g.verdict, g.reason) == ("veto", "pipefusion 3 > 2 layers")
    # 64 patches over 64 tokens: 1 row each (boundary, pass); 65: 64 // 65 = 0 -> veto
    assert gates.availability(m, box(), shp, Plan(pipefusion=2, patches=64)).verdict == "pass"
    g = gates.availability(m, box(), shp, Plan(pipefusion=2, patches=65))
    assert (g.verdict, g.reason) == ("veto", "65 patches > 64 tokens")
    for vendor in ("ascend", "Huawei"):
        g = gates.availability(m, box(vendor=vendor), shp, Plan(pipefusion=2))
        assert g.verdict == "veto" and g.reason.startswith("PipeFusion is not available on Ascend NPUs")
    # no PipeFusion on Ascend: nothing to say about it
    assert gates.availability(m, box(vendor="ascend"), shp, Plan(ulysses=2)).verdict == "pass"


def test_g1_cfg_ring_with_gather_and_device_count():
    m = tiny_model()
    g = gates.availability(m, box(), image(m), Plan(cfg=2))
    assert (g.verdict, g.reason) == ("veto", "cfg=2 needs classifier-free guidance (the request runs without it)")
    assert gates.availability(m, box(), make_shape(m, 128, 128, 1, 10, cfg=True), Plan(cfg=2)).verdict == "pass"
    g = gates.availability(m, box(), image(m), Plan(ring=2, kv_allgather=2))
    assert (g.verdict, g.reason) == ("veto", "ring and AllGather-KV are alternatives for one slot")
    # 8 devices on a box of 8 (one node): pass; 16: veto naming both counts
    assert gates.availability(m, box(), image(m), Plan(ulysses=8)).verdict == "pass"
    g = gates.availability(m, box(), image(m), Plan(ulysses=8, dp=2))
    assert (g.verdict, g.reason) == ("veto", "16 devices > 8 on box")
    # two nodes of 8: 16 devices fit
    assert gates.availability(m, box(nodes=2), image(m), Plan(ulysses=8, dp=2)).verdict == "pass"


def test_g1_several_vetoes_are_all_named_in_order():
    m = tiny_model()
    g = gates.availability(m, box(), image(m), Plan(cfg=2, ring=2, kv_allgather=2, dp=2))
    assert g.reason == ("cfg=2 needs classifier-free guidance (the request runs without it); "
                        "ring and AllGather-KV are alternatives for one slot; 16 devices > 8 on box")


def test_g1_pass_notes_are_information_not_conditions():
    m = tiny_model()
    assert gates.availability(m, box(), image(m), Plan(ulysses=4)).reason == \
        "degrees divide heads, sequence and layers"
    g = gates.availability(m, box(), image(m), Plan(ulysses=2, kv_allgather=2, dp=2))
    assert g.verdict == "pass"
    assert g.reason == ("AllGather-KV exists in LightX2V (seq_p_attn_type kv_all_gather) and SGLang, not xDiT; "
                        "dp=2 serves other requests; one request gains nothing")
    g = gates.availability(m, box(), image(m), Plan(tp=2))
    assert g.reason == "TP: MindIE-SD, SGLang, vLLM-Omni and a few xDiT models; not with PipeFusion"


# ---------------------------------------------------------------- G2 memory fit

def bd(total: float, plan: Plan, **parts: float) -> Breakdown:
    return Breakdown(plan=plan, memory_GB=total, memory_parts_GB={f"{k}_GB": v for k, v in parts.items()})


def test_g2_fits_exactly_at_the_headroom():
    # 10 GB card x 0.9 headroom = 9 GB usable: 9.0 passes, 9.0 + 1e-9 does not. Above the headroom and up to
    # TIGHT_LIMIT of the card (0.95 x 10 = 9.5 GB) the plan "fits, tight" (feasible, the GB left said: 10 - 9 = 1.0,
    # 10 - 9.5 = 0.5); only 9.5 + 1e-9 is a veto
    hw, m = box(memory_GB=10.0), tiny_model()
    g = gates.memory_fit(m, hw, image(m), Plan(), bd(9.0, Plan(), weights=9.0))
    assert (g.verdict, g.reason) == ("pass", "9.000 GB per rank (weights 9.0) <= 9.000 GB (90% of 10 GB)")
    left = ("GB left for the allocator, workspace and fragmentation; it runs if nothing else holds memory on the card "
            "(watch the first request's peak: torch.cuda.max_memory_reserved / npu-smi)")
    g = gates.memory_fit(m, hw, image(m), Plan(), bd(9.0 + 1e-9, Plan(), weights=9.0 + 1e-9))
    assert (g.verdict, g.reason) == ("tight", "fits, tight: 9.000 GB per rank (weights 9.0) is above 9.000 GB (90% of "
                                              f"10 GB) but within 95% of it: 1.0 {left}")   # no text encoder: no hint
    g = gates.memory_fit(m, hw, image(m), Plan(), bd(9.5, Plan(), weights=9.5))
    assert (g.verdict, g.reason) == ("tight", "fits, tight: 9.5 GB per rank (weights 9.5) is above 9.0 GB (90% of "
                                              f"10 GB) but within 95% of it: 0.5 {left}")
    g = gates.memory_fit(m, hw, image(m), Plan(), bd(9.5 + 1e-9, Plan(), weights=9.5 + 1e-9))
    assert (g.verdict, g.reason) == ("veto", "9.5 GB > 9.0 GB (90% of 10 GB) (weights 9.5)")   # nothing usable: head only


def test_g2_sharding_that_fits_is_applied_and_the_users_flag_named_beside_it():
    # weights 6 + text encoder 4 + activations 1 = 11 > 9 on U8 (8 ranks). Offloading the text encoder
    # alone: 6 + 1 = 7 <= 9; sharding alone: 6/8 + 4 + 1 = 5.75 <= 9. Issue 42 (one memory story): every plan
    # that sharding alone fits is ranked with sharding (warn), as the others are; the flag that avoids it is named.
    hw, m, plan = box(memory_GB=10.0), tiny_model(), Plan(ulysses=8)
    g = gates.memory_fit(m, hw, image(m), plan, bd(11.0, plan, weights=6.0, text_encoder=4.0, activations=1.0))
    assert g.verdict == "warn"
    assert g.reason.endswith("lossless unlock: layer-wise weight sharding over the 8 ranks (all-gather each layer's "
                             "weights before use) needs 5.8 GB; without sharding, --offload-text-encoder (it runs "
                             "once before denoising) needs 7.0 GB (set it and re-run); re-run G3 with the weight "
                             "all-gathers")


def test_g2_offload_fitting_exactly_at_the_cap_is_enough():
    # weights 8 + text encoder 4 + activations 1 = 13; offload: 8 + 1 = 9.0 = cap (fits), so no sharding
    hw, m, plan = box(memory_GB=10.0), tiny_model(), Plan(ulysses=8)
    g = gates.memory_fit(m, hw, image(m), plan, bd(13.0, plan, weights=8.0, text_encoder=4.0, activations=1.0))
    assert ("without sharding, --offload-text-encoder (it runs once before denoising) needs 9.0 GB (set it and "
            "re-run)") in g.reason
    # weights 8.5: offload alone leaves 9.5 > 9; sharding alone 8.5/8 + 4 + 1 = 6.06: the ranking applies it
    g = gates.memory_fit(m, hw, image(m), plan, bd(13.5, plan, weights=8.5, text_encoder=4.0, activations=1.0))
    assert g.verdict == "warn"
    assert g.reason == ("13.5 GB > 9.0 GB (90% of 10 GB) (weights 8.5, text_encoder 4.0, activations 1.0); lossless unlock: "
                        "layer-wise weight sharding over the 8 ranks (all-gather each layer's weights before "
                        "use) needs 6.1 GB; re-run G3 with the weight all-gathers")


def test_g2_two_steps_when_neither_alone_suffices():
    # weights 16 + text encoder 8 + activations 1 = 25: offload 17, shard 2 + 8 + 1 = 11, both 3.0
    hw, m, plan = box(memory_GB=10.0), tiny_model(), Plan(ulysses=8)
    g = gates.memory_fit(m, hw, image(m), plan, bd(25.0, plan, weights=16.0, text_encoder=8.0, activations=1.0))
    assert g.verdict == "veto"
    assert g.reason.endswith("lossless unlock: --offload-text-encoder (it runs once before denoising) + "
                             "layer-wise weight sharding over the 8 ranks (all-gather each layer's weights "
                             "before use) needs 3.0 GB")


def test_g2_vae_tiling_suggested_only_when_the_decode_is_the_peak():
    m = tiny_model()
    shp = make_shape(m, 1024, 1024, 1, 10, cfg=False)
    # tiled decode of an image: min(1024^2, 512^2) px x 128 channels x 2 bytes x 3 buffers
    tiled = VAE_TILE_PX * VAE_DECODE_CHANNELS * BYTES_PER_ELEMENT * VAE_BUFFERS / 1e9
    assert tiled == pytest.approx(512 * 512 * 128 * 2 * 3 / 1e9)   # 0.20 GB
    hw = box(memory_GB=10.0)
    # weights 8 + decode 3 (> activations 1) = 11 > 9; tiling: 8 + max(1, 0.2) = 9.0 <= 9 on one device
    g = gates.memory_fit(m, hw, shp, Plan(), bd(11.0, Plan(), weights=8.0, activations=1.0, vae_decode=3.0))
    assert g.verdict == "veto"
    assert g.reason.endswith("lossless unlock: --vae-tiling (tiled decode; same result up to tile-seam "
                             "blending) needs 9.0 GB")
    # the decode below the activations (3 < 4): tiling lowers nothing, so it is never named
    g = gates.memory_fit(m, hw, shp, Plan(), bd(12.0, Plan(), weights=8.0, activations=4.0, vae_decode=3.0))
    assert g.verdict == "veto" and "--vae-tiling" not in g.reason
    assert g.reason == "12.0 GB > 9.0 GB (90% of 10 GB) (weights 8.0, activations 4.0, vae_decode 3.0)"


def test_g2_veto_names_what_even_every_step_needs():
    # weights 100 + text encoder 4 + activations 1 on 8 ranks: everything gives 12.5 + 1 = 13.5 > 9
    hw, m, plan = box(memory_GB=10.0), tiny_model(), Plan(ulysses=8)
    g = gates.memory_fit(m, hw, image(m), plan, bd(105.0, plan, weights=100.0, text_encoder=4.0, activations=1.0))
    assert g.verdict == "veto"
    assert g.reason.endswith("; even --offload-text-encoder (it runs once before denoising) + layer-wise weight "
                             "sharding over the 8 ranks (all-gather each layer's weights before use) needs 13.5 GB")


def test_g2_sharding_divides_by_ranks_outside_tp_and_pipefusion():
    # U2 x TP4: weights are already split by TP, sharding spreads them over 8 / (4 x 1) = 2 ranks:
    # 16 / 2 + 1 = 9.0 fits exactly (with 8 ranks it would be 3.0, the same verdict but another figure)
    hw, m, plan = box(memory_GB=10.0), tiny_model(), Plan(ulysses=2, tp=4)
    g = gates.memory_fit(m, hw, image(m), plan, bd(17.0, plan, weights=16.0, activations=1.0))
    assert g.verdict == "warn" and "over the 8 ranks" in g.reason and "needs 9.0 GB" in g.reason
    # TP8 alone: 8 / 8 = 1 rank, nothing to shard over
    plan = Plan(tp=8)
    g = gates.memory_fit(m, hw, image(m), plan, bd(17.0, plan, weights=16.0, activations=1.0))
    assert (g.verdict, g.reason) == ("veto", "17.0 GB > 9.0 GB (90% of 10 GB) (weights 16.0, activations 1.0)")


def test_g2_names_resident_experts():
    hw, m = box(memory_GB=10.0), tiny_model(experts=2)
    g = gates.memory_fit(m, hw, image(m), Plan(), bd(12.0, Plan(), weights=12.0))
    assert g.reason == "12.0 GB > 9.0 GB (90% of 10 GB) (x2 experts resident) (weights 12.0)"


# ---------------------------------------------------------------- G3, G4, G5, G6: information only

def test_g3_is_information_and_names_no_collectives_for_one_device():
    m, hw = tiny_model(), box()
    g = gates.comm_lower_bound(m, hw, image(m), Plan(), predict(m, hw, image(m), Plan(), Tunables()), Tunables())
    assert (g.verdict, g.reason) == ("info", "per rank per layer: no per-layer collectives")
    plan = Plan(ulysses=4, kv_allgather=2)
    g = gates.comm_lower_bound(m, box(domain_size=4), image(m), plan,
                               predict(m, box(domain_size=4), image(m), plan, Tunables()), Tunables())
    assert g.verdict == "info" and "vs pure Ulysses U8" in g.reason and "MHA (kv_heads = heads)" in g.reason


def test_g4_composite_plumbing_by_hand():
    # 2 layers; U2 R2: one Ulysses exchange plus one ring hop of extra ops per layer
    m = tiny_model(head_dim=128, hidden=1024)
    shp = make_shape(m, 1024, 1024, 1, 10, cfg=False)          # 64 x 64 = 4096 tokens
    hw, tun = box(hbm_bandwidth_GBps=10.0), Tunables(launch_us=5.0)
    g = gates.plumbing(m, hw, shp, Plan(ulysses=2, ring=2), tun)
    ops = OPS_ULYSSES + OPS_RING_HOP
    host_ms = ops * 5.0 * 2 * 1e-3
    # K and V, read and written: 2 x 2 x 4096 tokens / 2 (ring) x 8 kv heads x 128 / 2 (ulysses) x 2 bytes
    copies = 2 * 2 * 4096 / 2 * (8 * 128) / 2 * 2
    assert copies == 8_388_608
    assert g.verdict == "info"
    assert g.reason == (f"composite U2 R2: ~{ops} extra eager ops/layer = {host_ms:.2f} ms/step host time, "
                        f"K/V re-layout {2 * copies / 1e6:.0f} MB/step = {2 * copies / 10e9 * 1e3:.2f} ms at "
                        f"HBM 10 GB/s; measure it in G6")
    # AllGather-KV instead of the ring: the gather's ops, two chunks (diffusers' TemplatedRingAttention: 16 + 20)
    g = gates.plumbing(m, hw, shp, Plan(ulysses=2, kv_allgather=2), tun)
    assert f"~{OPS_ULYSSES + 36} extra eager ops/layer" in g.reason
    # pure ring (no Ulysses): only ring hops; R4 has 3
    g = gates.plumbing(m, hw, shp, Plan(ring=4), tun)
    assert f"~{3 * OPS_RING_HOP} extra eager ops/layer" in g.reason
    # CFG on, no cfg split: the batch of 2 doubles the copies
    g2 = gates.plumbing(m, hw, make_shape(m, 1024, 1024, 1, 10, cfg=True), Plan(ulysses=2, ring=2), tun)
    assert f"K/V re-layout {4 * copies / 1e6:.0f} MB/step" in g2.reason
    # no HBM figure: no time for the copies
    g = gates.plumbing(m, box(hbm_bandwidth_GBps=0.0), shp, Plan(ulysses=2, ring=2), tun)
    assert "ms at HBM" not in g.reason and g.reason.endswith("MB/step; measure it in G6")


def test_g4_pure_forms_have_no_plumbing():
    m = tiny_model()
    for plan in (Plan(), Plan(ulysses=8), Plan(tp=2, dp=2)):
        assert gates.plumbing(m, box(), image(m), plan, Tunables()).reason == "no composite sequence form"


def test_g5_reports_the_chunk_ideal():
    m, hw = tiny_model(), box(domain_size=8, devices=8)
    g = gates.masking_gate(m, hw, image(m), Plan(ulysses=8), Tunables(), chunks=5)
    assert g.verdict == "info" and "with 5 chunks" in g.reason and "(ideal 80%)" in g.reason   # 1 - 1/5


def test_g6_top_two_only():
    p, q = Plan(ulysses=8), Plan(ulysses=4, ring=2)
    for rank in (1, 2):
        g = gates.ab_gate(rank, p, [q])
        assert g.verdict == "warn" and g.reason.startswith("run U8 vs U4 R2 in one window")
    assert gates.ab_gate(3, p, [q]).reason == "not in the top two: no A/B required"
    assert gates.ab_gate(3, p, [q]).verdict == "info"
    assert gates.ab_gate(1, p, []).verdict == "info"


# ---------------------------------------------------------------- G7 projection

def test_threshold_bisection_by_hand():
    # f(s) = s - t changes sign at t; log bisection stops within 0.1 %
    for t in (2.0, 0.5, 63.0, 1 / 63):
        assert gates._threshold(lambda s, t=t: s - t, 1 / 64, 64) == pytest.approx(t, rel=1e-3)
        assert gates._threshold(lambda s, t=t: t - s, 1 / 64, 64) == pytest.approx(t, rel=1e-3)
    assert gates._threshold(lambda s: s - 1.0, 1 / 64, 64) == 1.0          # zero at s = 1 exactly
    for t in (65.0, 1 / 65):                                                  # beyond the search range
        assert gates._threshold(lambda s, t=t: s - t, 1 / 64, 64) is None
    assert gates._threshold(lambda s: 1.0, 1 / 64, 64) is None               # never changes sign


def test_scale_link_scales_every_bandwidth_figure_of_one_class():
    from ditpar.plan.inputs.presets import LinkClass

    hw = box()
    links = dict(hw.links)
    links["intra_domain"] = LinkClass("fast", 100.0, 1.0, per_peer_GBps=40.0, ring_GBps=30.0,
                                      alltoall_GBps=((4, 20.0), (8, 10.0)))
    hw = replace(hw, links=links)
    out = gates._scale_link(hw, "intra_domain", 2.0)
    got = out.links["intra_domain"]
    assert (got.bandwidth_GBps, got.per_peer_GBps, got.ring_GBps) == (200.0, 80.0, 60.0)
    assert got.alltoall_GBps == ((4, 40.0), (8, 20.0))
    assert got.latency_us == 1.0
    assert out.links["inter_domain"] == hw.links["inter_domain"]          # other classes untouched
    assert hw.links["intra_domain"].bandwidth_GBps == 100.0               # the input is not changed
    plain = gates._scale_link(box(), "inter_node", 0.5).links["inter_node"]
    assert (plain.bandwidth_GBps, plain.per_peer_GBps) == (2.5, 0.0)      # no per-peer figure stays 0


def _fake_gap(flip_GBps: dict[str, float], faster_above: bool):
    """b - a latency as a function of each link's bandwidth: b wins above (or below) flip_GBps."""
    def gap(model, hw, shape, a, b, tun):
        total = 0.0
        for key, t in flip_GBps.items():
            if key in hw.links:
                bw = hw.links[key].bandwidth_GBps
                total += (t - bw) if faster_above else (bw - t)
        return total
    return gap


def test_g7_bandwidth_flip_within_and_beyond_64x(monkeypatch):
    m, hw, tun = tiny_model(blocks={"self": 4}), box(domain_size=4, devices=8), Tunables(launch_us=0.0)
    shp = make_shape(m, 512, 512, 1, 10, cfg=False)
    a, b = Plan(ulysses=4, ring=2), Plan(ulysses=8)
    assert predict(m, hw, shp, b, tun).latency_s > predict(m, hw, shp, a, tun).latency_s * 1.001
    # inter_domain is 10 GB/s: a flip at 630 GB/s (63x) is found, one at 650 (65x) is not
    monkeypatch.setattr(gates, "_gap", _fake_gap({"inter_domain": 630.0}, faster_above=True))
    g = gates.projection(m, hw, shp, a, b, tun)
    assert g.verdict == "info"
    found = re.search(r"U8 beats U4 R2 once inter_domain bandwidth exceeds ([0-9.]+) GB/s \(now 10\)", g.reason)
    assert found and float(found[1]) == pytest.approx(630, rel=2e-3), g.reason
    # 635 GB/s is 63.5x: inside the 64x range (a range ending at 63x would miss it)
    monkeypatch.setattr(gates, "_gap", _fake_gap({"inter_domain": 635.0}, faster_above=True))
    found = re.search(r"exceeds ([0-9.]+) GB/s \(now 10\)", gates.projection(m, hw, shp, a, b, tun).reason)
    assert found and float(found[1]) == pytest.approx(635, rel=2e-3)
    monkeypatch.setattr(gates, "_gap", _fake_gap({"inter_domain": 650.0}, faster_above=True))
    assert "bandwidth" not in gates.projection(m, hw, shp, a, b, tun).reason.split("; no link bandwidth")[0]
    # lower side: b wins when intra_domain (100 GB/s) drops below 1.6 GB/s (1/62.5 x), not below 1.5 (1/66.7 x)
    monkeypatch.setattr(gates, "_gap", _fake_gap({"intra_domain": 1.6}, faster_above=False))
    g = gates.projection(m, hw, shp, a, b, tun)
    found = re.search(r"once intra_domain bandwidth drops below ([0-9.]+) GB/s \(now 100\)", g.reason)
    assert found and float(found[1]) == pytest.approx(1.6, rel=2e-3), g.reason
    monkeypatch.setattr(gates, "_gap", _fake_gap({"intra_domain": 1.5}, faster_above=False))
    assert "intra_domain" not in gates.projection(m, hw, shp, a, b, tun).reason


def test_g7_skips_a_link_class_the_hardware_lacks(monkeypatch):
    m, tun = tiny_model(blocks={"self": 4}), Tunables(launch_us=0.0)
    hw = box(domain_size=8, devices=8)
    hw = replace(hw, links={k: v for k, v in hw.links.items() if k != "inter_domain"})
    shp = make_shape(m, 512, 512, 1, 10, cfg=False)
    a, b = Plan(ulysses=4, ring=2), Plan(ulysses=8)
    la, lb = predict(m, hw, shp, a, tun).latency_s, predict(m, hw, shp, b, tun).latency_s
    assert lb > la * 1.001
    # flips on every class: only the two the machine has are reported, in the gate's order
    monkeypatch.setattr(gates, "_gap", _fake_gap({"inter_domain": 20.0, "intra_domain": 200.0,
                                                  "inter_node": 10.0}, faster_above=True))
    g = gates.projection(m, hw, shp, a, b, tun)
    assert "inter_domain" not in g.reason
    assert [k for k in re.findall(r"once (\w+) bandwidth", g.reason)] == ["intra_domain", "inter_node"]
    assert g.reason.startswith(f"U4 R2 leads U8 by {lb / la - 1:.1%}; ")
    assert g.reason.endswith(" (projection, not measurement)")


def test_g7_kv_head_projection_names_the_largest_count_that_flips():
    # U8 leads U2 AG4 with 8 KV heads; the K/V gather shrinks with the KV heads. By brute force over
    # the divisors of 8 heads below 8 (4, 2, 1), the first (largest) where AG4 is faster is reported.
    # Bytes only (no host cost, no per-call cost): AG4 wins from 4 KV heads on.
    m, hw = tiny_model(blocks={"self": 4}), box(domain_size=4, devices=8, inter=1.0)
    tun = Tunables(launch_us=0.0, call_us=0.0)
    shp = make_shape(m, 512, 512, 1, 10, cfg=False)
    a, b = Plan(ulysses=8), Plan(ulysses=2, kv_allgather=4)

    def flips(t):
        return [h for h in (4, 2, 1) if predict(replace(m, kv_heads=h), hw, shp, b, t).latency_s
                < predict(replace(m, kv_heads=h), hw, shp, a, t).latency_s]
    assert flips(tun) == [4, 2, 1]
    g = gates.projection(m, hw, shp, a, b, tun)
    assert g.reason.count("KV heads drop") == 1 and "U2 AG4 beats U8 once KV heads drop to 4 (now 8)" in g.reason
    # With the fixed cost per collective call (10 us shipped): U8 makes 4 all-to-alls a layer (Q, K, V, O), U2 AG4
    # those 4 and one K/V gather, so AG4 pays 4 layers x 10 steps x 1 call x 10 us = 0.4 ms more than U8. At 4 KV
    # heads its byte lead is smaller than that, so the largest count that flips is 2.
    called = Tunables(launch_us=0.0, call_us=10.0)
    m4 = replace(m, kv_heads=4)
    extra = ((predict(m4, hw, shp, b, called).latency_s - predict(m4, hw, shp, b, tun).latency_s)
             - (predict(m4, hw, shp, a, called).latency_s - predict(m4, hw, shp, a, tun).latency_s))
    assert extra == pytest.approx(4 * 10 * 1 * 10e-6, rel=1e-6)
    lead4 = predict(m4, hw, shp, a, tun).latency_s - predict(m4, hw, shp, b, tun).latency_s
    assert 0 < lead4 < extra
    assert flips(called) == [2, 1]
    g = gates.projection(m, hw, shp, a, b, called)
    assert g.reason.count("KV heads drop") == 1 and "U2 AG4 beats U8 once KV heads drop to 2 (now 8)" in g.reason
    # 2 KV heads: only 1 is below; AG8 (slower with 2) wins with 1
    m2 = replace(m, kv_heads=2)
    b = Plan(kv_allgather=8)
    assert predict(m2, hw, shp, b, tun).latency_s > predict(m2, hw, shp, a, tun).latency_s * 1.001
    assert predict(replace(m, kv_heads=1), hw, shp, b, tun).latency_s < \
        predict(replace(m, kv_heads=1), hw, shp, a, tun).latency_s
    assert "AG8 beats U8 once KV heads drop to 1 (now 2)" in gates.projection(m2, hw, shp, a, b, tun).reason


def test_g7_equal_plans_and_no_flip_stay_information():
    m, hw, tun = tiny_model(blocks={"self": 4}), box(domain_size=4, devices=8), Tunables(launch_us=0.0)
    shp = make_shape(m, 512, 512, 1, 10, cfg=False)
    g = gates.projection(m, hw, shp, Plan(ulysses=8), Plan(ulysses=8), tun)
    assert (g.verdict, g.reason) == ("info", "U8 and U8 are predicted equal (within 0.1%): only the G6 "
                                     "measurement can order them")


def test_g7_no_flip_message(monkeypatch):
    m, hw, tun = tiny_model(kv_heads=1, blocks={"self": 4}), box(domain_size=4, devices=8), Tunables(launch_us=0.0)
    shp = make_shape(m, 512, 512, 1, 10, cfg=False)
    a, b = Plan(ulysses=4, ring=2), Plan(ulysses=8)
    monkeypatch.setattr(gates, "_gap", lambda *args: 1.0)    # b is slower at every bandwidth
    g = gates.projection(m, hw, shp, a, b, tun)
    lead = predict(m, hw, shp, b, tun).latency_s / predict(m, hw, shp, a, tun).latency_s - 1
    assert not math.isclose(lead, 0.0)
    assert g.reason == (f"U4 R2 leads U8 by {lead:.1%}; no link bandwidth scaled for every pattern "
                        "at once (1/64x..64x) nor KV-head count flips the order (projection, not measurement)")


def test_g3_pure_ulysses_is_not_compared_with_itself_and_saves_no_has_no_percentage():
    m, hw = tiny_model(), box(domain_size=4)
    g = gates.comm_lower_bound(m, hw, image(m), Plan(ulysses=8), predict(m, hw, image(m), Plan(ulysses=8),
                                                                         Tunables()), Tunables())
    assert g.verdict == "info" and "vs pure Ulysses" not in g.reason and "inter_domain" in g.reason
    # MHA: the K/V gather moves as many cross-domain bytes as Ulysses (saving 0): no percentage
    plan = Plan(ulysses=4, kv_allgather=2)
    g = gates.comm_lower_bound(m, hw, image(m), plan, predict(m, hw, image(m), plan, Tunables()), Tunables())
    assert g.reason.endswith("(saves no cross-domain bytes; MHA (kv_heads = heads))")


def test_g2_vae_tiling_not_named_when_the_decode_only_equals_the_activations():
    # decode 3 = activations 3: tiling leaves max(3, 0.2) = 3, so there is nothing to unlock with it;
    # one device, no text encoder: no step at all, the head alone
    m, hw = tiny_model(), box(memory_GB=10.0)
    shp = make_shape(m, 1024, 1024, 1, 10, cfg=False)
    g = gates.memory_fit(m, hw, shp, Plan(), bd(103.0, Plan(), weights=100.0, activations=3.0, vae_decode=3.0))
    assert (g.verdict, g.reason) == ("veto", "103.0 GB > 9.0 GB (90% of 10 GB) (weights 100.0, activations 3.0, vae_decode 3.0)")


def test_g3_compares_inter_domain_bytes_when_either_plan_has_them():
    # 2 nodes x 4 devices in domains of 2. U2 AG4: Ulysses stays inside a 2-device domain and the gather
    # spans the nodes (inter_node), so it moves no inter-domain bytes; pure U8 crosses the domains of a
    # node. The cross-domain class compared is inter_domain (the pure plan has it): 0 vs > 0 = saves 100 %.
    m, hw = tiny_model(), box(domain_size=2, devices=4, nodes=2)
    plan = Plan(ulysses=2, kv_allgather=4)
    bd = predict(m, hw, image(m), plan, Tunables())
    pure = predict(m, hw, image(m), Plan(ulysses=8), Tunables())
    assert bd.bytes_by_link_per_layer["inter_domain"] == 0 < pure.bytes_by_link_per_layer["inter_domain"]
    g = gates.comm_lower_bound(m, hw, image(m), plan, bd, Tunables())
    assert "vs pure Ulysses U8: inter_domain 0.00 vs 0.00 MB (saves cross-domain bytes, 100%;" in g.reason


def test_g3_no_comparison_when_neither_plan_crosses_a_domain():
    # one domain of 8: neither U4 AG2 nor U8 has inter-domain or inter-node bytes: nothing to compare
    m, hw = tiny_model(), box(domain_size=8, devices=8)
    plan = Plan(ulysses=4, kv_allgather=2)
    g = gates.comm_lower_bound(m, hw, image(m), plan, predict(m, hw, image(m), plan, Tunables()), Tunables())
    assert g.verdict == "info" and g.reason.startswith("per rank per layer: intra_domain ")
    assert "vs pure Ulysses" not in g.reason


def test_g1_sequence_and_frame_checks_apply_from_sp_2():
    # 2 frames x 7 tokens = 14: ring 2 divides 14 but not 7 -> the spatial model is vetoed at sp = 2
    spatial = tiny_model(blocks={"spatial": 2})
    g = gates.availability(spatial, box(), video(7, 2), Plan(ring=2))
    assert (g.verdict, g.reason) == ("veto", "tokens per frame 7 not divisible by sp = 2")
    # 3 frames x 5 tokens = 15 odd: full attention with ring 2 is vetoed on the sequence
    g = gates.availability(tiny_model(), box(), video(5, 3), Plan(ring=2))
    assert (g.verdict, g.reason) == ("veto", "sequence 15 tokens not divisible by ulysses x ring x kv_allgather = 2")


def test_threshold_zero_at_the_range_edge():
    # a zero exactly at s = 64 counts on the non-positive side: s - 64 never turns positive inside the
    # range (None); 64 - s is positive at s = 1 and not at 64: a flip at the edge, found
    assert gates._threshold(lambda s: s - 64, 1 / 64, 64) is None
    assert gates._threshold(lambda s: 64 - s, 1 / 64, 64) == pytest.approx(64, rel=1e-3)


def test_g2_vae_tiling_not_named_when_the_image_fits_one_tile():
    # 128 px: 16,384 px < one 512 x 512 tile, so the tiled decode equals the untiled one (0.0126 GB):
    # tiling lowers nothing and is never named, even in the "even ... needs" line
    m, hw = tiny_model(), box(memory_GB=10.0)
    untiled = 128 * 128 * VAE_DECODE_CHANNELS * BYTES_PER_ELEMENT * VAE_BUFFERS / 1e9
    g = gates.memory_fit(m, hw, image(m), Plan(), bd(100.0, Plan(), weights=100.0, vae_decode=untiled))
    assert (g.verdict, g.reason) == ("veto", "100.0 GB > 9.0 GB (90% of 10 GB) (weights 100.0, vae_decode 0.0)")


def test_g5_default_is_four_chunks():
    m, hw = tiny_model(), box(domain_size=8, devices=8)
    g = gates.masking_gate(m, hw, image(m), Plan(ulysses=8), Tunables())
    assert "with 4 chunks" in g.reason and "(ideal 75%)" in g.reason      # 1 - 1/4


def test_g7_kv_head_count_the_model_cannot_use_is_skipped(monkeypatch):
    # the cost model refuses 4 KV heads (raised here on purpose); the projection goes on to 2, where
    # U2 AG4 already beats U8 (test above: it flips at 4, 2 and 1)
    m, hw, tun = tiny_model(blocks={"self": 4}), box(domain_size=4, devices=8, inter=1.0), Tunables(launch_us=0.0)
    shp = make_shape(m, 512, 512, 1, 10, cfg=False)
    real = gates.predict

    def predict_no_4(model, *args):
        if model.kv_heads == 4:
            raise ValueError("4 KV heads not supported")
        return real(model, *args)
    monkeypatch.setattr(gates, "predict", predict_no_4)
    g = gates.projection(m, hw, shp, Plan(ulysses=8), Plan(ulysses=2, kv_allgather=4), tun)
    assert "U2 AG4 beats U8 once KV heads drop to 2 (now 8)" in g.reason


# --- survivors of a fresh draw after the merges (seed 1 on plan/decide/gates.py) ---

def test_g2_sharding_ranks_divide_by_tp_times_pipefusion():
    # U2 x TP2 x PF2 on 8 cards: sharding spreads the weights over 8 / (2 x 2) = 2 ranks: 16 / 2 + 1 = 9.0 GB
    # fits the 9 GB usable exactly (over all 8 it would need 16 / 8 + 1 = 3.0 GB)
    hw, m, plan = box(memory_GB=10.0), tiny_model(), Plan(ulysses=2, tp=2, pipefusion=2)
    g = gates.memory_fit(m, hw, image(m), plan, bd(17.0, plan, weights=16.0, activations=1.0))
    assert g.verdict == "warn" and "needs 9.0 GB" in g.reason


def test_g3_compares_with_pure_ulysses_only_when_heads_divide_ulysses_times_tp():
    # 12 heads, U2 R2 TP2: the pure form is U4 x TP2 = 8-way head split, and 12 % 8 != 0: no comparison.
    # (4 / 2 = 2 would divide 12: a wrong split count would add a comparison.)
    m = tiny_model(kv_heads=12, heads=12)
    plan = Plan(ulysses=2, ring=2, tp=2)
    hw = box()
    g = gates.comm_lower_bound(m, hw, image(m), plan, predict(m, hw, image(m), plan, Tunables()), Tunables())
    assert "vs pure Ulysses" not in g.reason
    # 16 heads: 16 % 8 == 0, so U2 R2 TP2 is compared with U4 TP2
    m16 = tiny_model(kv_heads=16, heads=16)
    g = gates.comm_lower_bound(m16, hw, image(m16), plan, predict(m16, hw, image(m16), plan, Tunables()),
                               Tunables())
    assert "vs pure Ulysses U4 TP2" in g.reason


def test_g5_ceiling_of_a_compute_bound_all_to_all():
    # Wan2.1-T2V-14B U8 on Atlas 800I A2: c/f is tiny (compute-bound), so with the default 4 chunks the
    # ceiling is the ideal 1 - 1/4 = 75 % (mask_bound's rule: c/f <= min(n/(n-1), 1/max(r, 1-r)))
    import json

    from conftest import run_script

    doc = json.loads(run_script("plan.py", "--model", "Wan2.1-T2V-14B", "--hardware", "Atlas 800I A2",
                                "--devices", "8", "--json", check=0).stdout)
    g5 = next(g for g in doc["plans"][0]["gates"] if g["gate"] == "G5")
    cf = float(re.search(r"c/f = ([0-9.]+)", g5["reason"]).group(1))
    assert cf < 1 and "(compute-bound); with 4 chunks at most 75% of it can hide (ideal 75%)" in g5["reason"]


# --- survivors of draws 2, 3, 5 and 7 (issue 29, second round) ---

def test_g2_vae_tiling_compares_the_tiled_decode_with_the_untiled_one():
    # 1024 x 1024 image: untiled decode = 1024^2 px x 128 channels x 2 bytes x 3 buffers = 0.805 GB, tiled =
    # one 512 x 512 tile = 0.201 GB. weights 8.5 + activations 0.5 + decode 0.805 = 9.805 > 9; tiled:
    # 8.5 + max(0.5, 0.201) = 9.0 <= 9 fits (an "untiled" tiled figure would leave nothing to suggest)
    m, hw = tiny_model(), box(memory_GB=10.0)
    shp = make_shape(m, 1024, 1024, 1, 10, cfg=False)
    untiled = 1024 * 1024 * VAE_DECODE_CHANNELS * BYTES_PER_ELEMENT * VAE_BUFFERS / 1e9
    assert untiled == pytest.approx(0.805, abs=1e-3)
    g = gates.memory_fit(m, hw, shp, Plan(), bd(8.5 + 0.5 + untiled, Plan(), weights=8.5, activations=0.5,
                                                vae_decode=untiled))
    assert g.verdict == "veto"
    assert g.reason.endswith("lossless unlock: --vae-tiling (tiled decode; same result up to tile-seam "
                             "blending) needs 9.0 GB")


def test_g4_copy_time_divides_by_hbm_bytes_per_second():
    # the by-hand case above: 2 layers x 8,388,608 bytes = 2^24 B per step; at 134.217728 GB/s that is
    # 2^24 / 1.34217728e11 s = 0.125 ms exactly, printed half-to-even as 0.12 (a divisor off by 1 B/s
    # tips it over the half and prints 0.13)
    m = tiny_model(head_dim=128, hidden=1024)
    shp = make_shape(m, 1024, 1024, 1, 10, cfg=False)
    hw, tun = box(hbm_bandwidth_GBps=134.217728), Tunables(launch_us=5.0)
    g = gates.plumbing(m, hw, shp, Plan(ulysses=2, ring=2), tun)
    assert "K/V re-layout 17 MB/step = 0.12 ms at HBM 134 GB/s" in g.reason


def test_g5_comm_bound_ceiling_is_three_quarters_of_f_over_c():
    # U8 over two 4-device domains, a 1024 px image (4096 tokens) and a 10 GB/s cross-domain link: the
    # all-to-all outlasts attention (c/f ~ 3.8 > 1).
    # With 4 chunks and no drain the exposed part is max(C/4, C - 3F/4) (fill and forward backlog), so
    # the ceiling is 1 - (1 - 0.75 F/C) = 0.75 / (c/f), below the 75 % ideal: comm-bound
    m, hw = tiny_model(), box(domain_size=4, devices=8, intra=1000.0, inter=10.0)
    g = gates.masking_gate(m, hw, image(m, 1024), Plan(ulysses=8), Tunables())
    cf = float(re.search(r"c/f = ([0-9.]+)", g.reason).group(1))
    pct = int(re.search(r"at most (\d+)% of it", g.reason).group(1))
    assert 1 < cf < 10 and "(comm-bound)" in g.reason and 0 < pct < 75
    assert abs(pct - 75 / cf) <= 0.5 + 1e-6 + 75 / cf * 0.01   # printed c/f has 2 decimals, the % none


def _fixed_latency(monkeypatch, latency_s: dict[str, float]):
    from types import SimpleNamespace

    monkeypatch.setattr(gates, "predict", lambda model, hw, shape, plan, tun: SimpleNamespace(
        latency_s=latency_s[plan.name]))


def test_g7_runner_up_exactly_0_1_percent_slower_is_predicted_equal(monkeypatch):
    # leader 1.0 s, runner-up 1.001 s = 1.0 x 1.001: on the "equal within 0.1 %" boundary, so equal;
    # 1.0011 s is 0.11 % slower: ordered, with the lead printed as 0.1 %
    m, hw, tun = tiny_model(), box(), Tunables()
    a, b = Plan(ulysses=8), Plan(ulysses=4, ring=2)
    _fixed_latency(monkeypatch, {"U8": 1.0, "U4 R2": 1.001})
    g = gates.projection(m, hw, image(m), a, b, tun)
    assert g.reason.startswith("U8 and U4 R2 are predicted equal (within 0.1%)")
    _fixed_latency(monkeypatch, {"U8": 1.0, "U4 R2": 1.0011})
    g = gates.projection(m, hw, image(m), a, b, tun)
    assert g.reason.startswith("U8 leads U4 R2 by 0.1%; no link bandwidth")


def test_threshold_zero_at_the_lower_edge_counts_as_non_positive():
    # 1/64 - s is 0 at s = 1/64 and negative everywhere above: no sign change inside the range (None);
    # s - 1/64 is 0 at the edge and positive at 1: that flip is found at 1/64
    assert gates._threshold(lambda s: 1 / 64 - s, 1 / 64, 64) is None
    assert gates._threshold(lambda s: s - 1 / 64, 1 / 64, 64) == pytest.approx(1 / 64, rel=1e-3)


def test_g1_kv_heads_more_than_the_split_must_be_a_multiple_of_it():
    # 24 heads, 12 KV heads on U8: 24 % 8 = 0, but 12 % 8 = 4 and 8 % 12 = 8: the KV heads split neither
    # evenly nor by replication -> veto (this passed before: only KV heads below the split were checked);
    # 16 KV heads on U8: 16 % 8 = 0 -> pass
    m = tiny_model(kv_heads=12, heads=24, hidden=192)
    g = gates.availability(m, box(), image(m), Plan(ulysses=8))
    assert (g.verdict, g.reason) == ("veto", "kv_heads 12 neither divides nor is a multiple of ulysses x tp = 8")
    m = tiny_model(kv_heads=16, heads=16, hidden=128)
    assert gates.availability(m, box(), image(m), Plan(ulysses=8)).verdict == "pass"


def test_g7_a_faster_runner_up_is_not_called_equal(monkeypatch):
    # runner-up 0.9 s vs leader 1.0 s: 1 - 0.9 / 1.0 = 10.0 % faster, said so (it was "predicted equal");
    # leader 1.001 s vs 1.0 s: 1.0 x 1.001 = 1.001 is not below it, so still equal within 0.1 %;
    # leader 1.0011 s: 1 - 1 / 1.0011 = 0.11 % faster, printed 0.1 %
    m, hw, tun = tiny_model(), box(), Tunables()
    a, b = Plan(ulysses=8), Plan(ulysses=4, ring=2)
    _fixed_latency(monkeypatch, {"U8": 1.0, "U4 R2": 0.9})
    assert gates.projection(m, hw, image(m), a, b, tun).reason == (
        "U4 R2 is predicted 10.0% faster than U8 here, though ranked second: only the G6 measurement can "
        "order them")
    _fixed_latency(monkeypatch, {"U8": 1.001, "U4 R2": 1.0})
    assert gates.projection(m, hw, image(m), a, b, tun).reason.startswith("U8 and U4 R2 are predicted equal")
    _fixed_latency(monkeypatch, {"U8": 1.0011, "U4 R2": 1.0})
    assert gates.projection(m, hw, image(m), a, b, tun).reason.startswith("U4 R2 is predicted 0.1% faster than U8")


# --- survivors of the draws after the G1 and G7 fixes (issue 29, second round) ---

def test_g2_offload_keeps_the_comm_buffers():
    # weights 6 + text encoder 4 + comm buffers 1 + activations 1 = 12 > 9: offloading the encoder leaves
    # 6 + 1 + 1 = 8.0 GB (the buffers stay: they are added, not subtracted)
    hw, m, plan = box(memory_GB=10.0), tiny_model(), Plan()
    g = gates.memory_fit(m, hw, image(m), plan, bd(12.0, plan, weights=6.0, text_encoder=4.0, comm_buffers=1.0,
                                                   activations=1.0))
    assert g.reason.endswith("lossless unlock: --offload-text-encoder (it runs once before denoising) needs 8.0 GB")


def test_g2_a_small_text_encoder_and_no_activation_figure():
    # a 0.5 GB text encoder still counts: weights 8.8 + 0.5 = 9.3 > 9 but <= 9.5 (95 % of 10): fits, tight, and
    # the hint names the encoder, 0.5 GB >= the 0.3 GB over the headroom
    hw, m, plan = box(memory_GB=10.0), tiny_model(), Plan()
    g = gates.memory_fit(m, hw, image(m), plan, bd(9.3, plan, weights=8.8, text_encoder=0.5))
    assert g.verdict == "tight"
    assert g.reason.endswith("; --offload-text-encoder frees 0.5 GB (it runs once, before denoising)")
    # a 0.8 GB encoder: 8.8 + 0.8 = 9.6 > 9.5, a veto; offload -> 8.8 GB <= 9
    g = gates.memory_fit(m, hw, image(m), plan, bd(9.6, plan, weights=8.8, text_encoder=0.8))
    assert g.verdict == "veto"
    assert g.reason.endswith("--offload-text-encoder (it runs once before denoising) needs 8.8 GB")
    # no activation figure at all (0): the 1024 px decode 0.805 GB is the peak: 8.75 + 0.805 = 9.555 > 9.5, a veto;
    # tiled 0.201: 8.75 + 0.201 = 8.951 <= 9, printed 9.0
    shp = make_shape(m, 1024, 1024, 1, 10, cfg=False)
    untiled = 1024 * 1024 * VAE_DECODE_CHANNELS * BYTES_PER_ELEMENT * VAE_BUFFERS / 1e9
    assert untiled == pytest.approx(0.805, abs=5e-4)
    g = gates.memory_fit(m, hw, shp, plan, bd(8.75 + untiled, plan, weights=8.75, vae_decode=untiled))
    assert g.verdict == "veto"
    assert g.reason.endswith("--vae-tiling (tiled decode; same result up to tile-seam blending) needs 9.0 GB")


def test_g3_composite_costing_more_cross_node_bytes_names_gqa(monkeypatch):
    from types import SimpleNamespace

    # U2 R4 moves 150 MB per layer across nodes, pure U8 100 MB: saving = 1 - 150/100 = -50 % -> "costs", 50 %;
    # 8 query heads, 2 KV heads -> GQA
    m, hw = tiny_model(kv_heads=2), box()
    monkeypatch.setattr(gates, "predict", lambda *a: SimpleNamespace(bytes_by_link_per_layer={"inter_node": 100e6}))
    mine = SimpleNamespace(bytes_by_link_per_layer={"inter_node": 150e6})
    g = gates.comm_lower_bound(m, hw, image(m), Plan(ulysses=2, ring=4), mine, Tunables())
    assert g.reason == ("per rank per layer: inter_node 150.00 MB; vs pure Ulysses U8: inter_node 150.00 vs 100.00 MB "
                        "(costs cross-domain bytes, 50%; GQA 8q/2kv)")


def test_threshold_stops_once_the_bracket_is_within_0_1_percent():
    # each evaluation is a cost-model run: f(lo), f(hi), f(1), f(bracket start), then halvings of the log
    # bracket [1, 64] until 64^(1/2^k) < 1.001: 64^(1/4096) = 1.00102, 64^(1/8192) = 1.00051 -> k = 13;
    # 4 + 13 = 17 evaluations (not 40 halvings)
    calls = []

    def f(s):
        calls.append(s)
        return s - 2.0
    assert gates._threshold(f, 1 / 64, 64) == pytest.approx(2.0, rel=1e-3)
    assert len(calls) == 17


def test_g2_no_weights_figure_counts_as_none():
    # parts without a weights figure (0): text encoder 9.2 + activations 0.5 = 9.7 > 9.5 (95 % of 10: past the
    # tight band, a veto); offloading the encoder leaves the 0.5 GB of activations
    hw, m, plan = box(memory_GB=10.0), tiny_model(), Plan()
    g = gates.memory_fit(m, hw, image(m), plan, bd(9.7, plan, text_encoder=9.2, activations=0.5))
    assert g.verdict == "veto"
    assert g.reason.endswith("--offload-text-encoder (it runs once before denoising) needs 0.5 GB")


def test_g4_counts_joint_text_cfg_batch_and_pipefusion_stages_by_hand():
    # 4 blocks over 2 PipeFusion stages = 2 layers a rank; 64 joint text tokens beside 4096 image tokens; CFG on
    # without CFG parallel, so each rank carries the batch of 2
    m = tiny_model(head_dim=128, hidden=1024, blocks={"self": 4}, text_joint_tokens=64, cfg_default=True)
    shp = make_shape(m, 1024, 1024, 1, 10, cfg=True)
    assert (shp.tokens, shp.text_joint, shp.batch) == (4096, 64, 2)
    hw, tun = box(hbm_bandwidth_GBps=1.0), Tunables(launch_us=5.0)
    g = gates.plumbing(m, hw, shp, Plan(ulysses=2, ring=2, pipefusion=2), tun)
    ops = OPS_ULYSSES + OPS_RING_HOP                          # 36 + 12 = 48 per layer
    host_ms = 48 * 5.0 * 2 * 1e-3                             # 0.48 ms over the rank's 2 layers
    # K and V read and written: 2 x 2 x (4096 + 64) tokens / ring 2 x (8 kv heads x 128) / ulysses 2 x 2 B x batch 2
    copies = 2 * 2 * 4160 / 2 * 1024 / 2 * 2 * 2
    assert copies == 17_039_360
    mb = copies * 2 / 1e6                                     # 34 MB a step over 2 layers
    ms = copies * 2 / 1e9 * 1e3                               # at 1 GB/s: 34.08 ms
    assert g.reason == (f"composite U2 R2 PF2: ~{ops} extra eager ops/layer = {host_ms:.2f} ms/step host time, "
                        f"K/V re-layout {mb:.0f} MB/step = {ms:.2f} ms at HBM 1 GB/s; measure it in G6")


def test_g2_the_denoising_phase_holds_activations_and_kv_buffers_together():
    # weights 10 + activations 6 + kv buffers 2 + VAE decode 5 = 23 > 9 on U4 (4 ranks). The denoising phase
    # (6 + 2 = 8) outweighs the decode (5), so tiling the VAE frees nothing and is not offered; sharding alone
    # leaves 10 / 4 + max(8, 5) = 10.5 > 9: a veto that names what it tried
    hw, m, plan = box(memory_GB=10.0), tiny_model(), Plan(ulysses=4)
    g = gates.memory_fit(m, hw, image(m), plan, bd(23.0, plan, weights=10.0, activations=6.0, kv_buffers=2.0,
                                                   vae_decode=5.0))
    assert g.verdict == "veto"
    assert g.reason.endswith("; even layer-wise weight sharding over the 4 ranks (all-gather each layer's weights "
                             "before use) needs 10.5 GB")


# --- survivors of gates.py's full run (issue 29) ---

def test_gb_prints_the_fewest_decimals_that_tell_the_two_apart():
    assert gates._gb(57.64, 57.61) == "57.64"        # equal at 1 decimal (57.6), apart at 2
    assert gates._gb(57.641, 57.644) == "57.641"     # equal at 2 (57.64), apart at 3
    assert gates._gb(57.6001, 57.6002) == "57.600"   # equal at 3 decimals: 3 are printed, never 4
    assert gates._gb(9.5, 9.0) == "9.5"


def test_g4_composite_of_two_and_its_copies_by_hand():
    # same model and shape as test_g4_composite_plumbing_by_hand: 2 layers, 4096 tokens, 8 KV heads x 128, 2 B
    m = tiny_model(head_dim=128, hidden=1024)
    shp = make_shape(m, 1024, 1024, 1, 10, cfg=False)
    hw, tun = box(hbm_bandwidth_GBps=10.0), Tunables(launch_us=5.0)
    # R2 alone (sp 2, no Ulysses) is composite: one ring hop of ops a layer
    g = gates.plumbing(m, hw, shp, Plan(ring=2), tun)
    assert g.verdict == "info" and g.reason.startswith(f"composite R2: ~{OPS_RING_HOP} extra eager ops/layer")
    # U2 AG2: 2 x 2 x 4096 / 2 (gather) x 1024 / 2 (ulysses) x 2 B = 8,388,608 B a layer, x 2 layers = 17 MB
    g = gates.plumbing(m, hw, shp, Plan(ulysses=2, kv_allgather=2), tun)
    assert "K/V re-layout 17 MB/step" in g.reason
    # U2 R2 TP2: TP halves the K/V heads again: 4,194,304 B a layer, 8 MB a step
    g = gates.plumbing(m, hw, shp, Plan(ulysses=2, ring=2, tp=2), tun)
    assert "K/V re-layout 8 MB/step" in g.reason
    # cfg2 U2 R2 with CFG on: each CFG rank carries one sample, so the copies are the batch-1 figure, 17 MB
    cfg = make_shape(m, 1024, 1024, 1, 10, cfg=True)
    assert "K/V re-layout 17 MB/step" in gates.plumbing(m, hw, cfg, Plan(cfg=2, ulysses=2, ring=2), tun).reason


def test_g5_compute_scale_slows_the_attention_it_hides_behind():
    # tiny model at 64 px (16 tokens), U2, 2 blocks: each block 4 all-to-alls of 1 us + 512 B / 100 GB/s; attention
    # 4 x 16 x 16 x 64 / 2 FLOPs at 100e12 x 0.5 / compute_scale 2
    m = tiny_model()
    shp = make_shape(m, 64, 64, 1, 10, cfg=False)
    comm = 2 * 4 * (1e-6 + 512 / 100e9)
    att = 2 * (4 * 16 * 16 * 64 / 2) / (100e12 * 0.5 / 2)
    g = gates.masking_gate(m, box(), shp, Plan(ulysses=2), Tunables(compute_scale=2.0))
    assert g.reason.startswith(f"ulysses all-to-all Q,K,V,O: c/f = {comm / att:.2f} (")
    assert f"{comm / att:.2f}" == "3067.38"


def test_g1_one_patch_over_a_one_token_frame():
    # 16 px: a 1 x 1 latent grid (ceil(16 / 8 / 2) = 1), one token per frame; 1 patch of 1 token is allowed
    m = tiny_model()
    shp = make_shape(m, 16, 16, 1, 10, cfg=False)
    assert shp.tokens_per_frame == 1
    assert gates.availability(m, box(), shp, Plan(pipefusion=2, patches=1)).verdict == "pass"
    g = gates.availability(m, box(), shp, Plan(pipefusion=2, patches=2))
    assert (g.verdict, g.reason) == ("veto", "2 patches > 1 tokens")


def test_g3_composite_crossing_where_pure_ulysses_does_not(monkeypatch):
    from types import SimpleNamespace

    # pure U8 crosses no node (0 B), U2 R4 150 MB: no finite saving; it costs cross-node bytes, no percentage
    m, hw = tiny_model(kv_heads=2), box()
    monkeypatch.setattr(gates, "predict", lambda *a: SimpleNamespace(bytes_by_link_per_layer={"inter_node": 0.0}))
    mine = SimpleNamespace(bytes_by_link_per_layer={"inter_node": 150e6})
    g = gates.comm_lower_bound(m, hw, image(m), Plan(ulysses=2, ring=4), mine, Tunables())
    assert g.reason == ("per rank per layer: inter_node 150.00 MB; vs pure Ulysses U8: inter_node 150.00 vs 0.00 MB "
                        "(costs cross-domain bytes; GQA 8q/2kv)")


def test_g7_bandwidth_search_ends_at_exactly_1_64(monkeypatch):
    m, hw, tun = tiny_model(blocks={"self": 4}), box(domain_size=4, devices=8), Tunables(launch_us=0.0)
    shp = make_shape(m, 512, 512, 1, 10, cfg=False)
    a, b = Plan(ulysses=4, ring=2), Plan(ulysses=8)
    # intra_domain 100 GB/s: a flip at 1.58 GB/s (1/63.3 x) is inside the 1/64 x end and found; one at 1.55 GB/s
    # (1/64.5 x) is beyond it
    monkeypatch.setattr(gates, "_gap", _fake_gap({"intra_domain": 1.58}, faster_above=False))
    found = re.search(r"intra_domain bandwidth drops below ([0-9.]+) GB/s", gates.projection(m, hw, shp, a, b, tun).reason)
    assert found and float(found[1]) == pytest.approx(1.58, rel=2e-3)
    monkeypatch.setattr(gates, "_gap", _fake_gap({"intra_domain": 1.55}, faster_above=False))
    assert "intra_domain" not in gates.projection(m, hw, shp, a, b, tun).reason


def test_g7_kv_heads_giving_a_tie_do_not_flip_the_order(monkeypatch):
    from types import SimpleNamespace

    # U8 leads U4 R2 (1.0 vs 2.0 s) with 8 KV heads; with 4 they tie (1.0 and 1.0: not faster), with 2 U4 R2 wins
    lat = {(8, "U8"): 1.0, (8, "U4 R2"): 2.0, (4, "U8"): 1.0, (4, "U4 R2"): 1.0, (2, "U8"): 1.0, (2, "U4 R2"): 0.5,
           (1, "U8"): 1.0, (1, "U4 R2"): 0.5}
    monkeypatch.setattr(gates, "predict", lambda model, hw, shape, plan, tun: SimpleNamespace(
        latency_s=lat[(model.kv_heads, plan.name)]))
    monkeypatch.setattr(gates, "_gap", lambda *args: 1.0)      # no bandwidth flip
    m = tiny_model()
    g = gates.projection(m, box(), image(m), Plan(ulysses=8), Plan(ulysses=4, ring=2), Tunables())
    assert "U4 R2 beats U8 once KV heads drop to 2 (now 8)" in g.reason


def test_g7_direction_of_a_flip_worth_less_than_a_second(monkeypatch):
    # the gap is in seconds: U8 gains 1 ms per GB/s above a 630 GB/s flip, so at 1.5 x the threshold it is
    # (630 - 945) x 1e-3 = -0.315 s: faster, the bandwidth "exceeds" the threshold (a gap above -1 s still counts)
    m, hw, tun = tiny_model(blocks={"self": 4}), box(domain_size=4, devices=8), Tunables(launch_us=0.0)
    shp = make_shape(m, 512, 512, 1, 10, cfg=False)
    fake = _fake_gap({"inter_domain": 630.0}, faster_above=True)
    monkeypatch.setattr(gates, "_gap", lambda *args: fake(*args) * 1e-3)
    g = gates.projection(m, hw, shp, Plan(ulysses=4, ring=2), Plan(ulysses=8), tun)
    assert re.search(r"once inter_domain bandwidth exceeds 63\d GB/s \(now 10\)", g.reason), g.reason
