"""plan/cost/memory.py by hand (issue 29): weights (MoE experts, TP/PipeFusion shards), activations, the K/V
buffers of PipeFusion / AllGather-KV / ring, the text encoder, communicator buffers per vendor, the VAE decode
peak (tiled, video) and how the peak combines them. Every expected byte count is worked out in the comments.

tiny_model: hidden d = 64, FFN f = 256, 8 heads x 8, two self blocks; 64x64 px -> 16 tokens; bf16 (2 B).
Compared with rel = 1e-12: GB is 1e9 exactly, so an error of one part in 1e9 must show."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from costmodel_fixtures import box, replace, tiny_model
from ditpar.plan.cost import Plan, make_shape
from ditpar.plan.cost.memory import comm_buffers_GB, memory_per_rank, vae_decode_GB

B = 2


def exact(x):
    return pytest.approx(x, rel=1e-12, abs=0.0)


def parts_of(model, plan, cfg=False, width=64, height=64, frames=1, **kw):
    shape = make_shape(model, width, height, frames, 10, cfg=cfg)
    return memory_per_rank(model, shape, plan, **kw)


def test_without_hardware_the_peak_is_weights_activations_and_kv():
    m = tiny_model(params_b=1.0)
    peak, parts = parts_of(m, Plan())
    assert set(parts) == {"weights_GB", "activations_GB", "kv_buffers_GB"}
    # weights 1e9 x 2 B = 2 GB; activations 16 tokens x 2 B x (5 x 64 + 256) = 18432 B; no K/V buffer
    assert parts["weights_GB"] == exact(2.0)
    assert parts["activations_GB"] * 1e9 == exact(16 * B * (5 * 64 + 256)) == 18432
    assert parts["kv_buffers_GB"] == 0.0
    assert peak == exact(2.0 + 18432 / 1e9)


def test_activations_by_hand():
    act = lambda **kw: parts_of(**kw)[1]["activations_GB"] * 1e9   # noqa: E731
    m = tiny_model()
    assert act(model=m, plan=Plan(tp=2)) == exact(16 * B * (5 * 64 + 256 / 2))          # MLP hidden split: 14336
    assert act(model=m, plan=Plan(ulysses=2)) == exact(8 * B * (5 * 64 + 256))          # half the tokens: 9216
    joint = tiny_model(text_joint_tokens=8)
    assert act(model=joint, plan=Plan()) == exact((16 + 8) * B * (5 * 64 + 256))       # text joins the sequence
    # CFG on: batch 2 on one device, 2 / 2 = 1 per rank under cfg parallelism
    assert act(model=m, plan=Plan(), cfg=True) == exact(2 * 16 * B * 576)
    assert act(model=m, plan=Plan(cfg=2), cfg=True) == exact(1 * 16 * B * 576)


def test_weights_experts_and_shards():
    w = lambda m, plan: parts_of(m, plan)[1]["weights_GB"]   # noqa: E731
    assert w(tiny_model(params_b=1.5, experts=4), Plan()) == exact(1.5 * 4 * 2)          # every expert resident
    assert w(tiny_model(params_b=1.5, experts=4), Plan(tp=2)) == exact(1.5 * 4 * 2 / 2)
    assert w(tiny_model(params_b=1.5, experts=4), Plan(pipefusion=4)) == exact(1.5 * 4 * 2 / 4)
    assert w(tiny_model(params_b=1.5, experts=0), Plan()) == exact(3.0)                  # 0 experts: a dense model


def test_weights_of_a_model_without_an_experts_field():
    m = tiny_model(params_b=1.5)
    plain = SimpleNamespace(**{k: getattr(m, k) for k in ("params_b", "hidden", "ffn", "kv_heads", "head_dim",
                                                          "blocks", "heads")})
    shape = make_shape(m, 64, 64, 1, 10)
    assert memory_per_rank(plain, shape, Plan())[1]["weights_GB"] == exact(3.0)         # 1.5e9 x 2 B


def test_pipefusion_stale_kv_by_hand():
    m = tiny_model(blocks={"self": 4})
    parts = parts_of(m, Plan(pipefusion=2), cfg=True)[1]
    # 4 layers / 2 stages = 2 layers; K and V of the full 16 tokens, 64 wide, 2 B, batch 2 (CFG on one rank)
    assert parts["kv_buffers_GB"] * 1e9 == exact(2 * 16 * 64 * B * 2 * 2) == 16384
    # TP does not combine with PipeFusion in a plan, but the K/V width per rank is the TP share (8 heads / 2)
    both = parts_of(m, Plan(pipefusion=2, tp=2))[1]
    assert both["kv_buffers_GB"] * 1e9 == exact(2 * 16 * 32 * B * 1 * 2)


def test_kv_allgather_buffer_by_hand():
    parts = parts_of(tiny_model(), Plan(kv_allgather=2), cfg=True)[1]
    # the whole K/V of one layer after the gather: 2 x 16 tokens x 64 x 2 B x batch 2
    assert parts["kv_buffers_GB"] * 1e9 == exact(2 * 16 * 64 * B * 2) == 8192
    gqa = parts_of(tiny_model(kv_heads=2), Plan(ulysses=2, kv_allgather=2))[1]
    # GQA 2 K/V heads split by Ulysses 2: one head (8 wide) per rank
    assert gqa["kv_buffers_GB"] * 1e9 == exact(2 * 16 * 8 * B) == 512


def test_ring_buffer_by_hand():
    parts = parts_of(tiny_model(), Plan(ring=4), cfg=True)[1]
    # two K/V blocks in flight, each 16 / 4 = 4 tokens of K and V: 2 x 2 x 4 x 64 x 2 B x batch 2
    assert parts["kv_buffers_GB"] * 1e9 == exact(2 * 2 * 4 * 64 * B * 2) == 4096
    gqa = parts_of(tiny_model(kv_heads=2), Plan(ulysses=2, ring=2))[1]
    assert gqa["kv_buffers_GB"] * 1e9 == exact(2 * 2 * 8 * 8 * B) == 512     # 8 tokens per block, 8 wide


@pytest.mark.parametrize("plan", [Plan(), Plan(ulysses=2), Plan(tp=2), Plan(cfg=2), Plan(dp=2)])
def test_plans_without_kv_buffers(plan):
    assert parts_of(tiny_model(), plan, cfg=True)[1]["kv_buffers_GB"] == 0.0


@pytest.mark.parametrize("plan,comms", [(Plan(), 0), (Plan(dp=4), 0), (Plan(ulysses=2), 1),
                                        (Plan(ulysses=2, cfg=2), 2), (Plan(tp=2, ring=2, cfg=2), 3),
                                        (Plan(kv_allgather=2, pipefusion=2, ulysses=2, cfg=2), 4)])
def test_comm_buffers_per_communicator(plan, comms):
    # one communicator per dimension with degree > 1 (data parallelism has none in one request):
    # HCCL 2 x 200 MB per communicator, NCCL ~0.25 GB; an unknown vendor is priced as NCCL
    assert comm_buffers_GB(plan, "ascend") == exact(comms * 2 * 0.2)
    assert comm_buffers_GB(plan, "nvidia") == exact(comms * 0.25)
    assert comm_buffers_GB(plan, "other") == exact(comms * 0.25)


def test_comm_buffers_values():
    assert comm_buffers_GB(Plan(ulysses=2, cfg=2), "ascend") == exact(0.8)
    assert comm_buffers_GB(Plan(ulysses=2, cfg=2), "nvidia") == exact(0.5)
    assert comm_buffers_GB(Plan(ulysses=2), "nvidia") == exact(0.25)
    assert comm_buffers_GB(Plan(), "nvidia") == 0.0


def test_vae_decode_by_hand():
    # 128 channels x 2 B x 3 buffers = 768 B per pixel of each frame decoded at once
    img = tiny_model()
    s = make_shape(img, 1024, 1024, 1, 10)
    assert vae_decode_GB(img, s, tiled=False) * 1e9 == exact(1024 * 1024 * 768) == 805306368
    assert vae_decode_GB(img, s, tiled=True) * 1e9 == exact(512 * 512 * 768)            # one 512 px tile
    small = make_shape(img, 256, 128, 1, 10)
    assert vae_decode_GB(img, small, tiled=True) * 1e9 == exact(256 * 128 * 768)       # smaller than a tile
    video = tiny_model(kind="video", vae_stride=(4, 8, 8), vae_temporal_causal=True)
    for frames, at_once in ((1, 1), (2, 4), (17, 4)):   # one frame alone; else one latent frame = 4 frames
        vs = make_shape(video, 64, 32, frames, 10)
        assert vae_decode_GB(video, vs, tiled=False) * 1e9 == exact(at_once * 64 * 32 * 768)
    flat = tiny_model(kind="video", vae_stride=(1, 8, 8))                             # no temporal stride
    assert vae_decode_GB(flat, make_shape(flat, 64, 32, 5, 10), tiled=False) * 1e9 == exact(64 * 32 * 768)


def test_peak_with_hardware_activations_dominate():
    # stride 1, patch 1: one token per pixel, so an 8x8 px image (64 tokens) has more live activations than
    # its VAE decode
    m = tiny_model(params_b=1.0, text_encoder_params_b=5.0, vae_stride=(1, 1, 1), patch=(1, 1, 1))
    hw = box(devices=4)
    peak, parts = parts_of(m, Plan(ring=4), cfg=True, width=8, height=8, hw=hw)
    assert parts["text_encoder_GB"] == exact(5.0 * 2)                                  # 5e9 x 2 B, resident
    assert parts["comm_buffers_GB"] == exact(0.25)
    vae = 8 * 8 * 768                                                                   # 49152 B
    act = 16 * 2 * B * 576                                                              # 64 / 4 tokens, batch 2
    kv = 2 * 2 * 16 * 64 * B * 2                                                        # two 16-token K/V blocks
    assert parts["vae_decode_GB"] * 1e9 == exact(vae) and act + kv == 53248 > vae
    assert peak == exact(2.0 + 10.0 + 0.25 + (act + kv) / 1e9)
    off_peak, off = parts_of(m, Plan(ring=4), cfg=True, width=8, height=8, hw=hw, offload_text_encoder=True)
    assert off["text_encoder_GB"] == 0.0 and off_peak == exact(2.0 + 0.25 + (act + kv) / 1e9)


def test_peak_with_hardware_vae_dominates_and_tiling_default_is_off():
    m = tiny_model(params_b=1.0)
    hw = replace(box(devices=4), vendor="ascend")
    peak, parts = parts_of(m, Plan(ulysses=2, cfg=2), cfg=True, width=1024, height=1024, hw=hw)
    # 1024 px: 64 x 64 = 4096 tokens, 2048 per rank, batch 1: 2048 x 2 B x 576 = 2359296 B < 805306368 B VAE
    assert parts["activations_GB"] * 1e9 == exact(2048 * B * 576)
    assert parts["text_encoder_GB"] == 0.0                                              # unknown: 0
    assert parts["vae_decode_GB"] * 1e9 == exact(1024 * 1024 * 768)                   # not tiled by default
    assert peak == exact(2.0 + 0.0 + 2 * 0.4 + 1024 * 1024 * 768 / 1e9)
    tiled_peak, _ = parts_of(m, Plan(ulysses=2, cfg=2), cfg=True, width=1024, height=1024, hw=hw,
                             vae_tiling=True)
    assert tiled_peak == exact(2.0 + 0.8 + max(2048 * B * 576, 512 * 512 * 768) / 1e9)


def test_text_encoder_missing_or_zero_is_not_counted():
    m = tiny_model(text_encoder_params_b=0.0)
    assert parts_of(m, Plan(), hw=box())[1]["text_encoder_GB"] == 0.0
    none = replace(tiny_model(), text_encoder_params_b=None)
    assert parts_of(none, Plan(), hw=box())[1]["text_encoder_GB"] == 0.0
    bare = SimpleNamespace(**{k: getattr(m, k) for k in ("params_b", "hidden", "ffn", "kv_heads", "head_dim",
                                                         "blocks", "heads", "vae_stride")})
    shape = make_shape(m, 64, 64, 1, 10)
    assert memory_per_rank(bare, shape, Plan(), box())[1]["text_encoder_GB"] == 0.0
