"""plan/cost/work.py by hand (issue 29): TP collectives per block kind (ring all-reduce 2(p-1)/p of the tensor,
all-gather (p-1)/p), whole heads per rank, block kinds, sequence padding, FLOPs per token and GEMM shapes,
link classes and bandwidths, all-to-all splits and ring hops per link class, long skips crossing PipeFusion
stages, and one rank's block work (cross-attention, linear attention, head padding, kernels, layout copies,
attention shapes). Every expected value is worked out in the comments.

tiny_model: hidden d = 64, 8 heads x 8 (dq = 64), FFN f = 256, 64x64 px -> 16 tokens; bf16 (2 B)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from costmodel_fixtures import box, replace, tiny_model
from ditpar.errors import InputError
from ditpar.plan.cost import Plan, layout, make_shape
from ditpar.plan.cost.efficiency import Gemm
from ditpar.plan.cost.work import (
    _skips_crossing,
    alltoall_flows,
    alltoall_split,
    alltoall_time_s,
    block_gemms,
    block_work,
    concurrent_ring_flows,
    effective_bw,
    heads_per_rank,
    kv_gather_ops,
    kv_heads_after_split,
    linear_flops_per_token,
    link_bw,
    link_key,
    padding_for,
    parse_kind,
    ring_flows,
    ring_link,
    shared_link,
    slower,
    slowest_ring,
    step_collectives,
    tp_collectives,
    tp_linears,
    worst_group,
)
from ditpar.plan.inputs.presets import LinkClass

B = 2
FLOWS = {"intra_domain": 2}


def exact(x):
    return pytest.approx(x, rel=1e-12, abs=0.0)   # a GB/s figure off by one part in 1e9 must show


# ---------------------------------------------------------------- TP

@pytest.mark.parametrize("base,mats,expected", [
    ("self", 2, 6), ("self", 3, 7), ("self", 1, 6),          # a gated MLP adds its gate projection
    ("cross", 3, 11), ("joint", 2, 14), ("joint", 3, 16),     # joint: image and text stream each
    ("single", 3, 6),                                          # FLUX single stream: one fused proj_mlp
])
def test_tp_linears(base, mats, expected):
    assert tp_linears(base, mats) == expected


def test_tp_collectives_self_block():
    [ar] = tp_collectives("self", 16.0, 0.0, 64, 2, "intra_domain", FLOWS, 1.0)
    # ring all-reduce over 2 ranks sends 2 (2-1)/2 = 1 x the 16 x 64 x 2 B tensor; 2 row-parallel projections
    assert (ar.name, ar.dim, ar.family, ar.calls) == ("TP all-reduce", "tp", "allreduce", 2.0)
    assert ar.bytes_by_link == {"intra_domain": 16 * 64 * B}
    assert (ar.alpha_steps, ar.group_size, ar.flows) == (2, 2, FLOWS)
    [cross] = tp_collectives("cross", 16.0, 4.0, 64, 2, "intra_domain", FLOWS, 1.0)
    assert cross.calls == 3.0 and cross.bytes_by_link == {"intra_domain": (16 + 4) * 64 * B}


def test_tp_collectives_joint_block_tp4():
    image, text, gather = tp_collectives("joint", 16.0, 8.0, 64, 4, "inter_domain", FLOWS, 2.0)
    # 2 (4-1)/4 = 1.5 of each tensor; 4 all-reduces split between the streams (2 each); 2(p-1) = 6 steps
    assert (image.name, image.calls, image.alpha_steps, image.group_size) == ("TP all-reduce (image)", 2.0, 6, 4)
    assert image.bytes_by_link == {"inter_domain": 1.5 * 16 * 64 * B}
    assert (text.name, text.calls) == ("TP all-reduce (text)", 2.0)
    assert text.bytes_by_link == {"inter_domain": 1.5 * 8 * 64 * B} and text.alpha_steps == 6
    # 2 AdaLN linears gathered, 6 x 64 wide, (4-1)/4 of it per sample, 2 samples, 3 steps
    assert (gather.name, gather.family, gather.calls, gather.alpha_steps) == ("TP AdaLN all-gather", "allgather",
                                                                               2.0, 3)
    assert gather.bytes_by_link == {"inter_domain": 0.75 * 6 * 64 * B * 2} and gather.group_size == 4
    no_text = tp_collectives("joint", 16.0, 0.0, 64, 4, "inter_domain", FLOWS, 1.0)
    assert [c.name for c in no_text] == ["TP all-reduce (image)", "TP AdaLN all-gather"]


def test_tp_collectives_single_block():
    ar, gather = tp_collectives("single", 16.0, 8.0, 64, 2, "intra_domain", FLOWS, 2.0)
    assert ar.calls == 1.0 and ar.bytes_by_link == {"intra_domain": (16 + 8) * 64 * B}
    assert gather.calls == 1.0 and gather.bytes_by_link == {"intra_domain": 0.5 * 3 * 64 * B * 2}
    assert gather.alpha_steps == 1


@pytest.mark.parametrize("heads,split,expected", [(8, 2, 4), (2, 4, 1), (3, 2, 3), (12, 8, 3), (8, 1, 8)])
def test_heads_per_rank(heads, split, expected):
    # heads / split when it divides, else replicated to lcm(heads, split) first: lcm(3, 2) / 2 = 3
    assert heads_per_rank(heads, split) == expected


def test_kv_heads_after_tp_then_ulysses():
    assert kv_heads_after_split(8, 2, 2) == 2       # 8 / 2 / 2
    assert kv_heads_after_split(2, 2, 4) == 1       # 1 per TP rank, replicated for Ulysses 4
    assert kv_heads_after_split(4, 1, 8) == 1
    assert kv_heads_after_split(6, 3, 1) == 2


# ---------------------------------------------------------------- kinds, padding, FLOPs, GEMMs

@pytest.mark.parametrize("kind,expected", [("spatial", ("cross", "spatial")), ("temporal", ("self", "temporal")),
                                           ("cross", ("cross", "full")), ("joint", ("joint", "full")),
                                           ("self_temporal", ("self", "temporal")),
                                           ("single_spatial", ("single", "spatial"))])
def test_parse_kind(kind, expected):
    assert parse_kind(kind) == expected


@pytest.mark.parametrize("kind", ["foo", "self_diagonal", "_full", ""])
def test_parse_kind_rejects(kind):
    with pytest.raises(InputError, match=r"block kind .*: expected <joint\|single\|cross\|self>\[_spatial\|_temporal\]"):
        parse_kind(kind)


def test_padding_for_by_hand():
    m = tiny_model()
    s = make_shape(m, 64, 64, 1, 10)                                  # 16 tokens
    assert padding_for(m, s, Plan()) == 0
    assert padding_for(m, s, Plan(ulysses=3)) == 18 - 16              # ceil(16 / 3) x 3
    assert padding_for(m, s, Plan(ulysses=4)) == 0
    assert padding_for(m, s, Plan(ulysses=3, ring=2)) == 18 - 16      # sp 6: ceil(16 / 6) x 6 = 18
    assert padding_for(m, s, Plan(ring=5)) == 20 - 16
    video = tiny_model(kind="video", vae_stride=(4, 8, 8), vae_temporal_causal=True,
                       blocks={"spatial": 1, "temporal": 1})
    vs = make_shape(video, 64, 64, 9, 10)                             # 3 latent frames x 16 tokens
    assert padding_for(video, vs, Plan(ulysses=3)) == 3 * (18 - 16)   # each frame padded on its own
    assert padding_for(video, vs, Plan(ulysses=4)) == 0
    full = tiny_model(kind="video", vae_stride=(4, 8, 8), vae_temporal_causal=True)
    assert padding_for(full, make_shape(full, 64, 64, 9, 10), Plan(ulysses=5)) == 50 - 48


def test_linear_flops_per_token_by_hand():
    m = tiny_model()
    # QKV 2 x 64 x (64 + 2 x 64) = 24576, O 2 x 64 x 64 = 8192, MLP 2 x 2 x 64 x 256 = 65536
    assert linear_flops_per_token(m, "self") == 24576 + 8192 + 65536
    assert linear_flops_per_token(m, "joint") == 24576 + 8192 + 65536
    # cross adds its Q and output projections: 2 x 64 x 64 each
    assert linear_flops_per_token(m, "cross") == 98304 + 2 * 8192
    gated = tiny_model(kv_heads=2, ffn_matrices=3)                    # K/V 2 heads x 8 = 16 wide
    assert linear_flops_per_token(gated, "self") == 2 * 64 * (64 + 32) + 8192 + 2 * 3 * 64 * 256
    # single stream: fused QKV + 2 MLP-in matrices, fused (attention 64 + MLP 256) -> 64 out
    assert linear_flops_per_token(gated, "single") == 2 * 64 * 96 + 2 * 2 * 64 * 256 + 2 * (64 + 256) * 64
    bare = SimpleNamespace(hidden=64, ffn=256, heads=8, kv_heads=8, head_dim=8)   # no ffn_matrices: 2
    assert linear_flops_per_token(bare, "self") == 98304


def test_block_gemms_by_hand():
    m = tiny_model(kv_heads=2)
    # column-parallel: N split by TP (QKV 64 + 32 -> 48, MLP in 256 -> 128); row-parallel: K split (O 32, MLP out 128)
    assert block_gemms(m, "self", 10.0, 2) == (Gemm(10.0, 48.0, 64), Gemm(10.0, 64, 32.0), Gemm(10.0, 128.0, 64),
                                               Gemm(10.0, 64, 128.0))
    assert block_gemms(m, "cross", 10.0, 2)[4:] == (Gemm(10.0, 32.0, 64), Gemm(10.0, 64, 32.0))
    gated = tiny_model(ffn_matrices=3)
    assert block_gemms(gated, "self", 4.0, 1)[2] == Gemm(4.0, 512.0, 64)            # gate + up: 2 x 256
    # single: fused QKV + MLP-in (64 + 128 + 256) / 2 = 224, fused out K = (64 + 256) / 2 = 160
    assert block_gemms(m := tiny_model(), "single", 10.0, 2) == (Gemm(10.0, 224.0, 64), Gemm(10.0, 64, 160.0))
    assert block_gemms(replace(m, ffn_matrices=0), "self", 1.0, 1)[2] == Gemm(1.0, 256.0, 64)  # 0: plain MLP


# ---------------------------------------------------------------- links

def _bare_hw(**kw):
    base = dict(devices_per_node=8, domain_size=4, interconnect="NVLink",
                links={"intra_domain": SimpleNamespace(bandwidth_GBps=100.0),
                       "inter_domain": SimpleNamespace(bandwidth_GBps=10.0),
                       "inter_node": SimpleNamespace(bandwidth_GBps=5.0)})
    base.update(kw)
    return SimpleNamespace(**base)


def test_link_key_without_a_class_map():
    hw = _bare_hw()
    assert link_key(hw, 0, 3) == "intra_domain"
    assert link_key(hw, 3, 4) == "inter_domain"
    assert link_key(hw, 7, 8) == "inter_node"
    assert link_key(hw, 0, 12) == "inter_node"
    assert link_key(box(domain_size=2, devices=4), 1, 2) == "inter_domain"


def test_link_bw_full_mesh_and_plain():
    mesh = LinkClass("HCCS", 100.0, 1.0, per_peer_GBps=30.0)
    hw = replace(box(), links={**box().links, "intra_domain": mesh})
    assert link_bw(hw, "intra_domain", 4) == 90.0        # (4 - 1) x 30 < 100
    assert link_bw(hw, "intra_domain", 8) == 100.0       # capped by the link
    assert link_bw(hw, "intra_domain", 1) == 30.0        # at least a pair
    assert link_bw(hw, "intra_domain") == 30.0
    assert link_bw(_bare_hw(), "inter_domain", 8) == 10.0   # no bus model: the bandwidth
    assert slower(hw, ["intra_domain", "inter_domain"], 4) == "inter_domain"
    assert slower(hw, ["inter_node", "inter_domain"]) == "inter_node"


def test_shared_links():
    assert shared_link(box(), "inter_node") is True
    assert shared_link(box(), "intra_domain") is False
    assert shared_link(box(interconnect="PCIe"), "inter_domain") is True
    assert shared_link(box(interconnect="pcie"), "intra_domain") is True


def test_effective_bw_by_family():
    links = dict(box().links)
    links["intra_domain"] = LinkClass("HCCS", 100.0, 1.0, per_peer_GBps=30.0, ring_GBps=70.0,
                                      alltoall_GBps=((4, 60.0),))
    hw = replace(box(), links=links)
    assert effective_bw(hw, "intra_domain", 4, 4, "alltoall") == 60.0     # measured figure for 4 ranks
    assert effective_bw(hw, "intra_domain", 2, 2, "alltoall") == 30.0     # a pair: one peer, one direct link
    assert effective_bw(hw, "intra_domain", 4, 4, "p2p") == 30.0          # one neighbour: one direct link
    assert effective_bw(hw, "intra_domain", 4, 4, "allgather") == 70.0    # measured ring busbw
    plain = box(interconnect="PCIe", intra=24.0)
    assert effective_bw(plain, "intra_domain", 4, 2) == 24.0              # two flows: full rate (one each way)
    assert effective_bw(plain, "intra_domain", 4, 3) == pytest.approx(24.0 * 2 / 3)
    assert effective_bw(plain, "intra_domain", 4, 8, "p2p") == pytest.approx(6.0)   # no per-peer figure
    assert effective_bw(box(intra=24.0), "intra_domain", 8, 8) == 24.0    # switched fabric: not divided


def test_alltoall_split_flows_and_time():
    hw = box(domain_size=2, devices=4, intra=100.0, inter=10.0)
    group = [0, 1, 2, 3]
    # rank 0 keeps 1/4, sends 1/4 to rank 1 (same domain) and 2/4 to ranks 2, 3
    assert alltoall_split(hw, group, 400.0) == {"intra_domain": 100.0, "inter_domain": 200.0}
    assert alltoall_flows(hw, group) == {"intra_domain": 4, "inter_domain": 4}
    assert alltoall_split(hw, [0, 1], 400.0) == {"intra_domain": 200.0}
    assert alltoall_split(hw, [], 400.0) == {}
    split = {"intra_domain": 100.0, "inter_domain": 200.0}
    # NVLink: classes in parallel, the slowest decides: 200 B / 10 GB/s
    assert alltoall_time_s(hw, split, 4, {}) == exact(200 / 10e9)
    assert alltoall_time_s(hw, {}, 4, {}) == 0.0
    pcie = box(domain_size=2, devices=4, intra=100.0, inter=10.0, interconnect="PCIe")
    # shared port, nothing measured: the classes add up, each at its own (flow-shared) rate
    assert alltoall_time_s(pcie, split, 4, {"intra_domain": 4, "inter_domain": 4}) == \
        exact(100 / (100e9 * 2 / 4) + 200 / (10e9 * 2 / 4))
    assert alltoall_time_s(pcie, split, 4, {}) == exact(100 / 100e9 + 200 / 10e9)   # 1 flow each
    # a measured busbw of the slowest class covers all bytes
    links = dict(pcie.links)
    links["inter_domain"] = LinkClass("SYS", 10.0, 1.0, alltoall_GBps=((4, 5.0),))
    measured = replace(pcie, links=links)
    assert alltoall_time_s(measured, split, 4, {}) == exact(300 / 5e9)


def test_alltoall_split_takes_the_worst_rank():
    # 6 ranks in domains of 4: ranks 0-3 send 2/6 across, ranks 4-5 send 4/6 across (the worst)
    hw = box(domain_size=4, devices=8, intra=100.0, inter=10.0)
    assert alltoall_split(hw, [0, 1, 2, 3, 4, 5], 600.0) == {"intra_domain": 100.0, "inter_domain": 400.0}


def test_ring_flows_and_links():
    hw = box(domain_size=2, devices=4, intra=100.0, inter=10.0)
    assert ring_flows(hw, [0, 1, 2, 3]) == {"intra_domain": 2, "inter_domain": 2}   # 0-1, 1-2, 2-3, 3-0
    assert ring_flows(hw, [0, 2]) == {"inter_domain": 2}
    assert concurrent_ring_flows(hw, [[0, 2], [1, 3], [4]]) == {"inter_domain": 4}
    assert concurrent_ring_flows(hw, [[0], [1]]) == {}
    assert ring_link(hw, [0, 1, 2, 3]) == "inter_domain"
    assert ring_link(hw, [0, 1]) == "intra_domain"
    key, flows = slowest_ring(hw, [[0, 1], [2, 3]])
    assert (key, flows) == ("intra_domain", {"intra_domain": 4})
    key, flows = slowest_ring(hw, [[0, 1], [1, 2]])
    assert key == "inter_domain" and flows == {"intra_domain": 2, "inter_domain": 2}
    key, flows = slowest_ring(hw, [[3]])                                   # nothing to pass: one hop to itself
    assert key == "intra_domain" and flows == {"intra_domain": 1}
    assert worst_group(hw, [[0, 1], [0, 1, 2]], len) == [0, 1, 2]


def test_ring_link_counts_shared_paths():
    # PCIe: a ring of 4 inside one socket has 4 senders on the shared switch (24 x 2/4 = 12 GB/s), the
    # socket link one each way (20 GB/s): the switch is the slower hop of the ring 0-1-2-3 over 2 sockets
    pcie = box(domain_size=2, devices=4, intra=24.0, inter=20.0, interconnect="PCIe")
    assert ring_link(pcie, [0, 1, 2, 3]) == "inter_domain"                 # own flows: 2 each -> 24 vs 20
    assert ring_link(pcie, [0, 1, 2, 3], {"intra_domain": 8, "inter_domain": 2}) == "intra_domain"   # 6 vs 20


# ---------------------------------------------------------------- long skips and per-step collectives

def test_skips_crossing_stages():
    m = SimpleNamespace(long_skips=0, blocks={"self": 8})
    assert _skips_crossing(m, 2) == 0.0
    m8 = SimpleNamespace(long_skips=4, blocks={"self": 8})
    assert _skips_crossing(m8, 1) == 0.0
    assert _skips_crossing(m8, 2) == 4 / 2                  # layers 0-3 skip to 7-4: all on the other stage
    m9 = SimpleNamespace(long_skips=4, blocks={"self": 9})
    # 3 stages of 3: skip 0->8, 1->7, 2->6 cross (stage 0 -> 2); 3->5 stays on stage 1
    assert _skips_crossing(m9, 3) == 3 / 3
    assert _skips_crossing(SimpleNamespace(blocks={"self": 8}), 2) == 0.0
    assert _skips_crossing(SimpleNamespace(long_skips=None, blocks={"self": 8}), 2) == 0.0
    split = SimpleNamespace(long_skips=2, blocks={"joint": 4, "single": 4})
    assert _skips_crossing(split, 2) == 2 / 2               # 8 layers in all: 0->7, 1->6 cross


def test_pipefusion_p2p_with_long_skips_and_cfg_gather():
    m = tiny_model(blocks={"self": 8}, long_skips=4, cfg_default=True, text_joint_tokens=4)
    hw = box(domain_size=4, devices=4)
    s = make_shape(m, 64, 64, 1, 10, cfg=True)
    plan = Plan(pipefusion=2, patches=4)
    [p2p] = step_collectives(m, hw, s, plan, layout(plan))
    # (16 + 4) tokens x 64 x 2 B x batch 2 / 4 patches, plus the 4 / 2 = 2 skip activations per stage: x 3
    assert (p2p.name, p2p.family, p2p.overlap) == ("PipeFusion P2P", "p2p", "pipeline")
    assert p2p.bytes_by_link == {"intra_domain": 20 * 64 * B * 2 / 4 * 3}
    cfg = Plan(cfg=2, ulysses=2)
    [gather] = step_collectives(m, hw, s, cfg, layout(cfg))
    # 16 tokens x patch 1x2x2 x 4 latent channels x 2 B / sp 2
    assert gather.bytes_by_link == {"intra_domain": 16 * 4 * 4 * B / 2} and gather.family == "allgather"
    assert step_collectives(m, hw, s, Plan(ulysses=4), layout(Plan(ulysses=4))) == []


# ---------------------------------------------------------------- block work

def _work(model, plan, width=64, cfg=False, frames=1, hw=None):
    hw = hw or box(domain_size=8, devices=8)
    s = make_shape(model, width, width, frames, 10, cfg=cfg)
    return block_work(model, hw, s, plan, layout(plan)), s


def test_cross_attention_block_by_hand():
    m = tiny_model(blocks={"cross": 1}, text_cross_tokens=8, image_cross_tokens=2)
    [bw], _ = _work(m, Plan(tp=2), cfg=True)
    # batch 2 (CFG on one rank), share = 2 / (sp 1 x tp 2) = 1; context 8 text + 2 image tokens
    # image->context scores 4 x 16 x 10 x 64 x 1 + K/V projections of the context 2 x 10 x 64 x 2 x 64 x 2 / 2
    assert bw.cross_flops == 4 * 16 * 10 * 64 * 1 + 2 * 10 * 64 * 2 * 64 * 2 / 2
    assert bw.linear_flops == 16 * (98304 + 2 * 8192) * 1
    assert bw.cross_shape == (16 * 2 * 4, 10.0, 8.0)      # rows 16 x batch 2, 4 heads per TP rank; 10 keys
    assert bw.tp_linears == 10
    assert bw.kernels == 45 + 2 * 3                       # cross block + 3 all-reduces
    [self_bw], _ = _work(tiny_model(), Plan(tp=2))
    assert self_bw.cross_flops == 0.0 and self_bw.cross_shape == (0.0, 0.0, 0.0)


def test_linear_attention_flops_and_no_attention_shape():
    m = tiny_model(attention="linear")
    [bw], _ = _work(m, Plan(ulysses=2))
    # phi(K)^T V then Q: 4 x 16 tokens x head_dim 8 x dq 64, half the tokens per rank
    assert bw.attn_flops == 4 * 16 * 8 * 64 / 2
    assert bw.attn_shape == (0.0, 0.0, 0.0)


def test_ulysses_head_padding_by_hand():
    m = tiny_model(heads=6, kv_heads=2)                  # Q 6 heads x 8 = 48 wide, K/V 2 heads x 8
    [bw], _ = _work(m, Plan(ulysses=4))                  # 16 tokens, 4 per rank
    # 6 heads padded to 8 for Ulysses 4: the rank with 2 heads sets the pace (x 8/6)
    assert bw.attn_flops == pytest.approx(4 * 16 * 16 * 48 / 4 * 8 / 6)
    assert bw.attn_shape == (16 * 2.0, 16, 8.0)           # all 16 query tokens x 2 heads; 16 keys
    c = next(c for c in bw.comms if c.name.startswith("ulysses"))
    # Q and O padded to 8 heads (64 wide); K/V 2 heads replicated to one per rank (4 x 8 = 32 wide):
    # 4 tokens x 2 B x (2 x 64 + 2 x 32) = 1536 B; a quarter per call, 3 of 4 shares leave the rank
    assert c.bytes_per_call == pytest.approx(1536 / 4 * 3 / 4)
    assert c.alpha_steps == 3 and c.group_size == 4 and c.calls == 4.0


def test_kernels_relayout_and_shapes_per_form():
    m = tiny_model()
    [single], _ = _work(m, Plan())
    assert single.kernels == 30 and single.relayout_bytes == 0.0 and single.tp_linears == 0
    assert single.attn_shape == (16 * 8.0, 16, 8.0)                  # 16 tokens x 8 heads, 16 keys
    assert single.gemms == block_gemms(m, "self", 16.0, 1)
    [ag], _ = _work(m, Plan(kv_allgather=4))
    # no USP layer; K/V gathered and re-laid out once: 2 x 16 tokens x (K, V) x 64 x 2 B; then, as diffusers'
    # TemplatedRingAttention runs it, one attention per gathered chunk and 3 fp32 merges of the rank's out
    # (4 rows x 64 wide x (4 + 2 + 4) B); ops: 16 for the gather and first chunk + 20 per further chunk
    assert ag.kernels == 30 + 16 + 3 * 20
    assert ag.relayout_bytes == 2 * 16 * 2 * 64 * B + 3 * 4 * 64 * (4 + 2 + 4)
    assert ag.attn_shape == (4 * 8.0, 4, 8.0)                        # 4 local queries x 8 heads, one chunk of 4 keys
    [u], _ = _work(m, Plan(ulysses=4))
    assert u.kernels == 30 + 36
    assert u.relayout_bytes == 2 * 2 * 4 * B * (2 * 64 + 2 * 64)     # 2 copies, read + write, of Q, K, V, O
    assert u.attn_shape == (16 * 2.0, 16, 8.0)                       # all 16 tokens x 2 heads
    [pf], _ = _work(m, Plan(pipefusion=2))
    assert pf.kernels == 30 + 8 and pf.count == 1.0
    [ur], _ = _work(m, Plan(ulysses=2, ring=2))
    assert ur.kernels == 30 + 36 + 12
    # ring hop per pass: 16 / 2 = 8 keys; queries 16 / 2 = 8 tokens x 4 heads
    assert ur.attn_shape == (8 * 4.0, 8.0, 8.0)
    [tp], _ = _work(tiny_model(blocks={"joint": 1}, text_joint_tokens=4), Plan(tp=2))
    assert tp.kernels == 55 + 2 * (4 + 2) and tp.tp_linears == 14


def test_factorised_video_blocks():
    m = tiny_model(kind="video", vae_stride=(4, 8, 8), vae_temporal_causal=True,
                   blocks={"spatial": 1, "temporal": 1}, text_cross_tokens=4)
    (sp, tm), s = _work(m, Plan(ulysses=2), frames=9)                 # 3 frames x 16 tokens = 48
    assert (sp.kind, tm.kind) == ("spatial", "temporal")
    # spatial: each token attends the 16 of its frame; temporal: the 3 at its position
    assert sp.attn_flops == 4 * 48 * 16 * 64 / 2
    assert tm.attn_flops == 4 * 48 * 3 * 64 / 2
    # temporal attention is local when SP splits inside frames: no all-to-all, no USP layer
    assert tm.comms == [] and tm.kernels == 30 and tm.relayout_bytes == 0.0
    assert tm.attn_shape == (24 * 4.0, 3, 8.0)                        # 24 local tokens x 4 heads; 3 keys
    assert [c.name for c in sp.comms] == ["ulysses all-to-all Q,K,V,O"] and sp.kernels == 45 + 36
    # ring on the temporal block: no hop either
    (_, tr), _ = _work(m, Plan(ring=2), frames=9)
    assert tr.comms == [] and tr.kernels == 30 and tr.relayout_bytes == 0.0


def test_more_edges_by_hand():
    m = tiny_model()
    nine = make_shape(m, 48, 48, 1, 10)                               # 3 x 3 = 9 tokens
    assert padding_for(m, nine, Plan(ulysses=2)) == 10 - 9            # sp 2 already pads an odd sequence
    assert padding_for(m, nine, Plan(ulysses=3)) == 0
    # ffn_matrices 0 or None in a preset: the plain two-matrix MLP
    assert linear_flops_per_token(replace(m, ffn_matrices=0), "self") == 98304
    assert linear_flops_per_token(replace(m, ffn_matrices=None), "cross") == 98304 + 2 * 8192
    # a per-peer or ring figure below 1 GB/s is still a figure
    slow = dict(box().links)
    slow["intra_domain"] = LinkClass("slow", 8.0, 1.0, per_peer_GBps=0.5)
    assert effective_bw(replace(box(), links=slow), "intra_domain", 4, 4, "p2p") == 0.5
    slow["intra_domain"] = LinkClass("slow", 8.0, 1.0, ring_GBps=0.5)
    assert effective_bw(replace(box(), links=slow), "intra_domain", 4, 4, "allgather") == 0.5


def test_joint_text_enters_joint_and_single_blocks_only():
    for kind, tokens in (("self", 16), ("cross", 16), ("joint", 20), ("single", 20)):
        m = tiny_model(blocks={kind: 1}, text_joint_tokens=4)
        [bw], _ = _work(m, Plan())
        assert bw.linear_flops == tokens * linear_flops_per_token(m, parse_kind(kind)[0])
        assert bw.attn_flops == 4 * tokens * tokens * 64                  # text tokens attend and are attended


def test_pipefusion_p2p_is_one_call_per_patch():
    m = tiny_model(blocks={"self": 4})
    plan = Plan(pipefusion=2)
    s = make_shape(m, 64, 64, 1, 10)
    [p2p] = step_collectives(m, box(domain_size=4, devices=4), s, plan, layout(plan))
    # 16 tokens x 64 x 2 B / 2 patches, no long skips
    assert p2p.calls == 1.0 and p2p.bytes_by_link == {"intra_domain": 16 * 64 * B / 2}


def test_tp_linears_default_is_the_plain_mlp():
    assert (tp_linears("self"), tp_linears("cross"), tp_linears("joint"), tp_linears("single")) == (6, 10, 14, 6)


def test_alltoall_split_worst_rank_whatever_the_group_order():
    hw = box(domain_size=4, devices=8, intra=100.0, inter=10.0)
    # ranks 4 and 5 (the worst: 4 of 6 shares cross the domains) listed first, rank 3 (2 of 6 across) last
    assert alltoall_split(hw, [4, 5, 0, 1, 2, 3], 600.0) == {"intra_domain": 100.0, "inter_domain": 400.0}


def test_ring_with_kv_allgather_block_size():
    # the formulas split the sequence over r x g for each hop block (the ranking never combines the two:
    # enumerate_plans and G1 keep them apart; block_work still prices the combination consistently)
    m = tiny_model()
    [bw], _ = _work(m, Plan(ring=2, kv_allgather=2))
    ring = next(c for c in bw.comms if c.name == "ring K,V pass")
    assert ring.bytes_per_call == (16 / 4) * 2 * 64 * B                   # a quarter of the sequence per hop
    # layout copies of Q, K, V, O (4 local tokens), one fp32 out/LSE merge per hop, gathered K/V re-laid out,
    # one more fp32 merge for the second gathered chunk (4 rows x 64 wide x 10 B)
    assert bw.relayout_bytes == 2 * 2 * 4 * B * 256 + 1 * 4 * 64 * 10 + 2 * 8 * 2 * 64 * B + 1 * 4 * 64 * 10


def test_ulysses_with_tp_by_hand():
    m = tiny_model()
    [bw], _ = _work(m, Plan(ulysses=2, tp=2), cfg=True)
    # TP 2: 4 heads (32 wide) per rank; Ulysses 2 splits them again; K/V 8 heads -> 2 per rank after both
    # (8 / 2 / 2), entering Ulysses 2 x 2 x 8 = 32 wide. 8 local tokens, batch 2 (CFG on one rank):
    # Q, K, V, O tensor 8 x 2 B x 2 x (2 x 32 + 2 x 32) = 4096 B, a quarter per call, half of it leaves
    c = next(c for c in bw.comms if c.name.startswith("ulysses"))
    assert c.bytes_per_call == 4096 / 4 / 2
    assert bw.relayout_bytes == 2 * 2 * 8 * B * 2 * 128                # the USP layer's layout copies
    tp = next(c for c in bw.comms if c.name == "TP all-reduce")
    assert tp.bytes_by_link == {"intra_domain": 1.0 * 8 * 2 * 64 * B}  # 8 tokens x batch 2, full width


def test_tp_allreduce_rows_include_the_batch():
    [bw], _ = _work(tiny_model(), Plan(tp=2), cfg=True)
    # 16 tokens x batch 2 rows, 64 wide, 2 B; ring all-reduce over 2 sends 2 (2-1)/2 = 1 x the tensor
    assert next(c for c in bw.comms if c.name == "TP all-reduce").bytes_by_link == {"intra_domain": 32 * 64 * B}


def test_cfg_gather_is_one_call_per_step():
    m = tiny_model(cfg_default=True)
    plan = Plan(cfg=2)
    [gather] = step_collectives(m, box(domain_size=4, devices=4), make_shape(m, 64, 64, 1, 10, cfg=True), plan,
                                layout(plan))
    assert (gather.name, gather.dim, gather.calls) == ("CFG all-gather", "cfg", 1.0)
    assert gather.bytes_by_link == {"intra_domain": 16 * 4 * 4 * B}


def test_tp_linears_of_a_gated_mlp_block():
    [bw], _ = _work(tiny_model(ffn_matrices=3), Plan(tp=2))
    assert bw.tp_linears == 6 + 1                                      # q, k, v, out, up, down + the gate
    [plain], _ = _work(tiny_model(ffn_matrices=0), Plan(tp=2))
    assert plain.tp_linears == 6                                       # 0 in a preset: the plain MLP


def test_cross_attention_without_image_context_and_allgather_steps():
    m = tiny_model(blocks={"cross": 1}, text_cross_tokens=8)            # no image_cross_tokens: 0
    [bw], _ = _work(m, Plan())
    assert bw.cross_shape == (16 * 8.0, 8.0, 8.0)                       # 16 rows x 8 heads; the 8 text keys
    assert bw.cross_flops == 4 * 16 * 8 * 64 + 2 * 8 * 64 * 2 * 64      # scores + context K/V projections
    [ag], _ = _work(tiny_model(), Plan(kv_allgather=4))
    g = next(c for c in ag.comms if c.name == "AllGather-KV")
    assert (g.alpha_steps, g.group_size, g.calls) == (3, 4, 1.0)        # ring all-gather: g - 1 steps


def test_cfg_all_gather_is_priced_on_the_slowest_pair():
    """cfg2 x U3 on an 8-card A100-PCIe box (sockets of 4): the CFG pairs are [0,3], [1,4], [2,5]; two of them
    cross the sockets, and the step waits for them. CogVideoX-5b: 13 x 30 x 45 = 17,550 tokens x (1 x 2 x 2) x 16
    channels x 2 B / 3 (Ulysses share) = 748,800 B on inter_domain (it was charged to [0,3]'s intra_domain)."""
    from ditpar.plan.cost import Plan, Tunables, make_shape
    from ditpar.plan.cost.plans import layout
    from ditpar.plan.cost.work import step_collectives
    from ditpar.plan.inputs import presets
    m, h = presets.load_model("CogVideoX-5b"), presets.load_hardware("A100-PCIe", None, 8)
    plan = Plan(cfg=2, ulysses=3)
    groups = layout(plan, Tunables().order)
    assert groups["cfg"] == [[0, 3], [1, 4], [2, 5]]
    (c,) = [c for c in step_collectives(m, h, make_shape(m), plan, groups) if c.dim == "cfg"]
    assert c.bytes_by_link == {"inter_domain": 17550 * 4 * 16 * 2 / 3} == {"inter_domain": 748800.0}


# ---------------------------------------------------------------- survivors of the full run (issue 29)

@pytest.mark.parametrize("degree,ops", [(0, 0), (1, 0), (2, 16 + 20), (4, 16 + 3 * 20)])
def test_kv_gather_ops_by_degree(degree, ops):
    # 16 ops for the gather and the first chunk, 20 per further chunk; none at degree 1 (G4 adds
    # kv_gather_ops(plan.kv_allgather) to every composite plan, AG1 included)
    assert kv_gather_ops(degree) == ops


def test_whole_heads_are_integers():
    # a head count, never a float: lcm(3, 2) / 2 = 3, lcm(12, 8) / 8 = 3
    assert type(heads_per_rank(3, 2)) is int and heads_per_rank(3, 2) == 3
    assert type(heads_per_rank(12, 8)) is int and type(kv_heads_after_split(8, 2, 2)) is int


def test_link_key_follows_the_presets_domains():
    # domains listed out of rank order: 0, 2, 4, 6 share the fast domain, so 0-1 cross it although
    # 0 // 4 == 1 // 4, and 0-2 do not
    hw = box(domain_size=4, devices=8, domains=((0, 2, 4, 6), (1, 3, 5, 7)))
    assert link_key(hw, 0, 1) == "inter_domain"
    assert link_key(hw, 0, 2) == "intra_domain"
    # without a class map: ranks 1 and 2 sit in domain 0 of 4 (1 // 4 == 2 // 4 == 0), 5 and 6 in domain 1
    assert link_key(_bare_hw(), 1, 2) == "intra_domain"
    assert link_key(_bare_hw(), 5, 6) == "intra_domain"


def test_slower_prices_a_pair_by_default():
    # full mesh 100 GB/s, 30 per peer: a pair gets 30 GB/s (< 40 of the plain inter_domain link), a group of
    # 3 gets 2 x 30 = 60 (> 40)
    links = {**box().links, "intra_domain": LinkClass("HCCS", 100.0, 1.0, per_peer_GBps=30.0),
             "inter_domain": LinkClass("slow", 40.0, 1.0)}
    hw = replace(box(), links=links)
    assert slower(hw, ["intra_domain", "inter_domain"]) == "intra_domain"
    assert slower(hw, ["intra_domain", "inter_domain"], 3) == "inter_domain"


def test_step_collectives_run_over_pairs():
    # the CFG all-gather joins the two CFG ranks, a PipeFusion hand-off one stage and the next: groups of 2
    # (a full-mesh link prices a pair at one per-peer link, not (k-1) of them)
    m = tiny_model(blocks={"self": 4}, cfg_default=True)
    s = make_shape(m, 64, 64, 1, 10, cfg=True)
    hw = box(domain_size=4, devices=4)
    cfg, pf = Plan(cfg=2), Plan(pipefusion=2)
    [gather] = step_collectives(m, hw, s, cfg, layout(cfg))
    [p2p] = step_collectives(m, hw, s, pf, layout(pf))
    assert gather.group_size == 2 and p2p.group_size == 2


def test_pipefusion_p2p_carries_this_ranks_sequence_share():
    # PF2 x U2: each stage holds (16 + 4 text) / sp 2 = 10 tokens; 10 x 64 x 2 B / 2 patches = 640 B per hand-off
    m = tiny_model(blocks={"self": 4}, text_joint_tokens=4)
    plan = Plan(pipefusion=2, ulysses=2)
    [p2p] = step_collectives(m, box(domain_size=4, devices=4), make_shape(m, 64, 64, 1, 10), plan, layout(plan))
    assert p2p.bytes_by_link == {"intra_domain": 10 * 64 * B / 2}


def test_skips_crossing_one_skip_and_uneven_stages():
    # one skip, 0 -> 7 over 2 stages of 4: it crosses; 1 crossing / 2 stages
    assert _skips_crossing(SimpleNamespace(long_skips=1, blocks={"self": 8}), 2) == 1 / 2
    # 10 layers over 6 stages: layer i on stage floor(i x 6 / 10) = 0 0 1 1 2 3 3 4 4 5; skips 0-9, 1-8, 2-7,
    # 3-6 and 4-5 (stages 2 -> 3) all cross: 5 / 6 (the float per-stage count 10 / 6 put layer 5 on stage 2)
    assert _skips_crossing(SimpleNamespace(long_skips=5, blocks={"self": 10}), 6) == 5 / 6
    # 40 layers over 6 stages, 20 skips: layers 0-19 sit on stages 0-2 (19 x 6 // 40 = 2) and 20-39 on 3-5
    # (20 x 6 // 40 = 3 exactly): all 20 pairs cross, 20 / 6 (the float count put layer 20 on stage 2: 19 / 6)
    assert _skips_crossing(SimpleNamespace(long_skips=20, blocks={"self": 40}), 6) == 20 / 6
    # 12 layers over 3 stages of 4, 6 skips: 0-11, 1-10, 2-9 and 3-8 cross; 4-7 and 5-6 stay on stage 1: 4 / 3
    assert _skips_crossing(SimpleNamespace(long_skips=6, blocks={"self": 12}), 3) == 4 / 3


def test_tp_text_all_reduce_of_one_text_row():
    # a joint block with exactly one text row on the rank still runs the text stream's all-reduce:
    # 2 (2-1)/2 = 1 x 1 row x 64 x 2 B
    image, text, gather = tp_collectives("joint", 16.0, 1.0, 64, 2, "intra_domain", FLOWS, 1.0)
    assert text.name == "TP all-reduce (text)" and text.bytes_by_link == {"intra_domain": 1 * 64 * B}


def test_measured_alltoall_below_one_GBps_is_still_a_figure():
    links = {**box().links, "intra_domain": LinkClass("slow", 8.0, 1.0, alltoall_GBps=((4, 0.5),))}
    assert effective_bw(replace(box(), links=links), "intra_domain", 4, 4, "alltoall") == 0.5


def test_alltoall_split_keeps_the_first_of_equally_slow_ranks():
    # 2 nodes of 4, domains of 2; group 0 1 2 | 4 5 6: every rank sends 3 of 6 shares across the nodes (the slow
    # class decides on a switched fabric: a tie). Rank 0 (listed first) sends 1 share to rank 1 (its domain) and
    # 1 to rank 2; rank 6 would send 2 across domains and none inside
    hw = box(domain_size=2, devices=4, nodes=2)
    assert alltoall_split(hw, [0, 1, 2, 4, 5, 6], 600.0) == \
        {"intra_domain": 100.0, "inter_domain": 100.0, "inter_node": 300.0}


def test_cross_attention_scores_split_by_sequence_parallelism():
    # U2: share = batch 1 / (sp 2 x tp 1) = 1/2; scores 4 x 16 x 8 context x 64 x 1/2; the context K/V
    # projections are not split by SP: 2 x 8 x 64 x 2 x 64
    m = tiny_model(blocks={"cross": 1}, text_cross_tokens=8)
    [bw], _ = _work(m, Plan(ulysses=2))
    assert bw.cross_flops == 4 * 16 * 8 * 64 / 2 + 2 * 8 * 64 * 2 * 64


def test_ring_hop_and_layout_bytes_with_the_cfg_batch():
    # U2 x R2, CFG batch 2 on every rank: 16 tokens, 4 per rank; K/V 8 heads -> 4 per rank after Ulysses (32 wide)
    m = tiny_model()
    [bw], _ = _work(m, Plan(ulysses=2, ring=2), cfg=True)
    ring = next(c for c in bw.comms if c.name == "ring K,V pass")
    # hop: 16 / 2 tokens x (K, V) x 32 x 2 B x batch 2
    assert ring.bytes_per_call == 8 * 2 * 32 * B * 2 == 2048
    # layout copies 2 x 2 x 4 tokens x 2 B x batch 2 x (2 x 64 + 2 x 64) = 16384; one fp32 out/LSE merge per hop
    # over the rank's 8 query rows of 64 / U2 = 32 wide, batch 2: 8 x 32 x 2 x (4 + 2 + 4) = 5120
    assert bw.relayout_bytes == 2 * 2 * 4 * B * 2 * 256 + 8 * 32 * 2 * 10 == 21504
    # 8 query tokens x batch 2 x 4 heads per pass; 8 keys per hop
    assert bw.attn_shape == (8 * 2 * 4.0, 8.0, 8.0)
    # cfg2 x R2: the two CFG ranks take one sample each, so batch 1: 8 x 2 x 64 x 2 B x 1
    [split], _ = _work(m, Plan(cfg=2, ring=2), cfg=True)
    assert next(c for c in split.comms if c.name == "ring K,V pass").bytes_per_call == 8 * 2 * 64 * B == 2048


def test_kv_allgather_of_two_with_ulysses_and_the_cfg_batch():
    # U2 x AG2, batch 2: 4 tokens per rank, K/V 4 heads (32 wide) per rank after Ulysses
    m = tiny_model()
    [bw], _ = _work(m, Plan(ulysses=2, kv_allgather=2), cfg=True)
    ag = next(c for c in bw.comms if c.name == "AllGather-KV")
    # each rank's shard: 16 / 2 tokens x (K, V) x 32 x 2 B x batch 2 = 2048; (2 - 1) shards arrive
    assert ag.bytes_by_link == {"intra_domain": 1 * 8 * 2 * 32 * B * 2} and ag.alpha_steps == 1
    # USP copies 2 x 2 x 4 x 2 B x 2 x 256 = 16384; gathered K/V re-laid out 2 x 16 x 2 x 32 x 2 B x 2 = 8192;
    # one fp32 merge for the second chunk: 8 rows x 64 / 2 wide x batch 2 x 10 B = 5120
    assert bw.relayout_bytes == 16384 + 8192 + 5120
    assert bw.kernels == 30 + 36 + (16 + 20)             # block + Ulysses layer + AllGather-KV of 2


def test_kv_allgather_leaves_temporal_blocks_alone():
    m = tiny_model(kind="video", vae_stride=(4, 8, 8), vae_temporal_causal=True,
                   blocks={"spatial": 1, "temporal": 1}, text_cross_tokens=4)
    (sp, tm), _ = _work(m, Plan(kv_allgather=2), frames=9)
    # temporal attention is local under SP: no gather, no ops, no copies; the spatial block gathers (16 + 20 ops)
    assert tm.comms == [] and tm.kernels == 30 and tm.relayout_bytes == 0.0
    assert sp.kernels == 45 + 36


def test_tp_text_rows_with_sequence_split_and_cfg_batch():
    # joint block, U2 x TP2, batch 2: text 4 / sp 2 x 2 = 4 rows, image 16 / 2 x 2 = 16 rows, 2 (2-1)/2 = 1 x each
    m = tiny_model(blocks={"joint": 1}, text_joint_tokens=4)
    [bw], _ = _work(m, Plan(ulysses=2, tp=2), cfg=True)
    by_name = {c.name: c.bytes_by_link for c in bw.comms}
    assert by_name["TP all-reduce (text)"] == {"intra_domain": 4 * 64 * B}
    assert by_name["TP all-reduce (image)"] == {"intra_domain": 16 * 64 * B}


def test_head_padding_at_one_head_per_tp_rank():
    # 2 heads x 8 (dq 16), TP2 x U2: one head per TP rank padded to 2 for Ulysses 2 (x 2): the rank attends
    # 16 x 16 x 16 x 4 / (sp 2 x tp 2) x 2 = 8192 FLOPs
    [bw], _ = _work(tiny_model(heads=2, kv_heads=2), Plan(ulysses=2, tp=2))
    assert bw.attn_flops == 4 * 16 * 16 * 16 / 4 * 2
    # 1 head over TP2 (half a head per rank; G1 vetoes the plan): priced unpadded, 4 x 16 x 16 x 8 / 2
    [half], _ = _work(tiny_model(heads=1, kv_heads=1), Plan(tp=2))
    assert half.attn_flops == 4 * 16 * 16 * 8 / 2


def test_block_work_of_a_model_without_optional_fields():
    # a model object without ffn_matrices, image_cross_tokens or attention: a plain two-matrix MLP, text context
    # only, softmax attention
    bare = SimpleNamespace(hidden=64, ffn=256, heads=8, kv_heads=8, head_dim=8, blocks={"cross": 1})
    s = make_shape(tiny_model(blocks={"cross": 1}, text_cross_tokens=8), 64, 64, 1, 10)
    [bw] = block_work(bare, box(domain_size=8, devices=8), s, Plan(tp=2), layout(Plan(tp=2)))
    assert bw.cross_shape == (16 * 4.0, 8.0, 8.0)                      # 16 rows x 4 heads per TP rank; 8 keys
    assert bw.tp_linears == 10                                         # cross block, no gate
    # scores 4 x 16 x 8 keys x 64 x share 1/2 (TP 2) + context K/V 2 x 8 x 64 x 2 x 64 / TP 2
    assert bw.cross_flops == 4 * 16 * 8 * 64 / 2 + 2 * 8 * 64 * 2 * 64 / 2
    assert bw.gemms[2] == Gemm(16.0, 256 / 2, 64)                       # MLP in: 1 x 256 / TP 2
    assert block_gemms(bare, "self", 1.0, 1)[2] == Gemm(1.0, 256.0, 64)
