"""Cost model: FLOPs, bytes per collective and link class, times and memory, recomputed by hand."""

from __future__ import annotations

import itertools
import math

import pytest
from costmodel_fixtures import box, replace, tiny_model
from ditpar.errors import InputError
from ditpar.plan.cost import (
    Plan,
    Tunables,
    enumerate_plans,
    layout,
    make_shape,
    parse_resolution,
    predict,
)
from ditpar.plan.cost.timing import comm_time_s, masking_hidden
from ditpar.plan.cost.work import block_work, step_collectives
from ditpar.plan.inputs.presets import LinkClass

B = 2  # bytes per bf16 element


def work(model, hw, plan, width=64, height=64, cfg=False):
    shape = make_shape(model, width, height, 1, 10, cfg=cfg)
    return block_work(model, hw, shape, plan, layout(plan)), shape


def comm(bw, name):
    return next(c for c in bw.comms if c.name.startswith(name))


def test_tokens_from_vae_and_patch():
    m = tiny_model()
    s = make_shape(m, 64, 64, 1, 10)
    assert (s.tokens, s.frames_tok, s.tokens_per_frame) == (16, 1, 16)       # 64/8/2 = 4 per side
    video = tiny_model(kind="video", vae_stride=(4, 8, 8), vae_temporal_causal=True)
    assert make_shape(video, 64, 64, 81, 10).frames_tok == 21                 # 1 + 80 // 4


def test_flops_single_device_by_hand():
    [bw], _ = work(tiny_model(), box(), Plan())
    per_token = 2 * 64 * (64 + 2 * 64) + 2 * 64 * 64 + 2 * 2 * 64 * 256      # QKV + O + MLP
    assert per_token == 98304
    assert bw.linear_flops == 16 * per_token
    assert bw.attn_flops == 4 * 16 * 16 * 64                                   # QK^T and PV
    assert bw.count == 2 and bw.comms == []


def test_ulysses_bytes_by_hand():
    [bw], _ = work(tiny_model(), box(domain_size=4, devices=4), Plan(ulysses=4))
    c = comm(bw, "ulysses")
    # each of Q, K, V, O is 4 local tokens x 64 x 2 B = 512 B; a rank keeps 1/4 and sends 3/4
    assert c.calls == 4 and c.bytes_by_link == {"intra_domain": 384.0}
    assert bw.linear_flops == 16 * 98304 / 4 and bw.attn_flops == 4 * 16 * 16 * 64 / 4


def test_ring_and_kv_allgather_bytes_by_hand():
    [ring], _ = work(tiny_model(), box(domain_size=4, devices=4), Plan(ring=4))
    c = comm(ring, "ring")
    assert c.calls == 3 and c.bytes_by_link == {"intra_domain": 4 * 2 * 64 * B}   # local K and V block per hop
    [ag], _ = work(tiny_model(), box(domain_size=4, devices=4), Plan(kv_allgather=4))
    g = comm(ag, "AllGather-KV")
    assert g.calls == 1 and g.bytes_by_link == {"intra_domain": 3 * 4 * 2 * 64 * B}  # (G-1) shards
    assert c.calls * c.bytes_per_call == g.bytes_per_call                             # same volume, one call


def test_tp_allreduce_bytes_by_hand():
    [bw], _ = work(tiny_model(), box(domain_size=2, devices=2), Plan(tp=2))
    c = comm(bw, "TP")
    assert c.calls == 2                                                         # attention out + MLP out
    assert c.bytes_by_link == {"intra_domain": 2 * (2 - 1) / 2 * 16 * 64 * B}  # ring all-reduce
    assert bw.linear_flops == 16 * 98304 / 2


def test_pipefusion_and_cfg_bytes_by_hand():
    m, hw = tiny_model(cfg_default=True), box(domain_size=4, devices=4)
    plan = Plan(pipefusion=2, cfg=2)
    shape = make_shape(m, 64, 64, 1, 10)
    per_step = {c.name: c for c in step_collectives(m, hw, shape, plan, layout(plan))}
    assert per_step["PipeFusion P2P"].bytes_per_call == 16 * 64 * B / 2        # one patch of 2
    assert per_step["CFG all-gather"].bytes_per_call == 16 * 4 * 4 * B         # tokens x patch x channels
    [bw] = block_work(m, hw, shape, plan, layout(plan))
    assert bw.count == 1                                                        # 2 blocks over 2 stages


def _cross_bytes(model, plan):
    hw = box(domain_size=4, devices=8)
    bws, _ = work(model, hw, plan, 128, 128)
    return sum(c.bytes_by_link.get("inter_domain", 0.0) * c.calls for b in bws for c in b.comms)  # per block


def test_composite_saves_cross_domain_bytes_only_with_gqa():
    pure, composite = Plan(ulysses=8), Plan(ulysses=4, kv_allgather=2)
    # 128x128 px -> 64 tokens, 8 per rank. Pure U8: 4 all-to-alls of 8 x 64 x 2 B = 1024 B, 1/8 to each
    # peer, 4 of 7 peers in the other domain -> 4 x 512 B. K/V heads are replicated up to U, so GQA
    # changes nothing for pure Ulysses.
    assert _cross_bytes(tiny_model(8), pure) == 2048
    assert _cross_bytes(tiny_model(2), pure) == 2048
    # Composite: Ulysses inside the domain (0 cross bytes), K/V gathered across: shard of 32 tokens x
    # (K, V) x kv width per rank x 2 B; MHA 2 heads x 8 = 16 -> 2048 B: no saving.
    assert _cross_bytes(tiny_model(8), composite) == 32 * 2 * 16 * B == 2048
    # GQA 2 KV heads: one KV head (8 wide) per rank -> 1024 B: half the cross-domain bytes.
    assert _cross_bytes(tiny_model(2), composite) == 32 * 2 * 8 * B == 1024


def test_alpha_beta_time():
    [bw], _ = work(tiny_model(), box(domain_size=4, devices=4, intra=100.0), Plan(ulysses=4))
    c = comm(bw, "ulysses")
    assert comm_time_s(box(domain_size=4, devices=4, intra=100.0), c) == pytest.approx(3 * 1e-6 + 384 / 100e9)


def test_shared_pcie_path_divides_bandwidth():
    hw = box(domain_size=8, devices=8, intra=24.0, interconnect="PCIe")
    [bw], _ = work(tiny_model(), hw, Plan(ulysses=8), 128, 128)
    c = comm(bw, "ulysses")
    # 8 senders share the PCIe path: 24 x 2/8 = 6 GB/s; NVLink would keep 24
    assert comm_time_s(hw, c) == pytest.approx(7e-6 + c.bytes_per_call / 6e9)


def _pcie_box(**links) -> object:
    """Two 4-card sockets on PCIe with measured pattern figures (numbers chosen to check by hand)."""
    hw = box(domain_size=4, devices=8, intra=24.0, inter=20.0, interconnect="PCIe")
    new = dict(hw.links)
    new["intra_domain"] = LinkClass("PCIe", 24.0, 1.0, ring_GBps=22.0, alltoall_GBps=((4, 2.0),))
    new["inter_domain"] = LinkClass("SYS", 20.0, 1.0, alltoall_GBps=((8, 1.0),))
    new.update(links)
    return replace(hw, links=new)


def test_measured_pcie_alltoall_figure_replaces_flow_sharing():
    hw = _pcie_box()
    [bw], _ = work(tiny_model(), hw, Plan(ulysses=4), 128, 128)
    c = comm(bw, "ulysses")
    # 4 ranks in one socket: the measured 2 GB/s busbw covers their contention (no further 2/flows)
    assert set(c.bytes_by_link) == {"intra_domain"}
    assert comm_time_s(hw, c) == pytest.approx(3e-6 + c.bytes_per_call / 2e9)
    # a pair is a plain exchange at the link rate
    [bw2], _ = work(tiny_model(), hw, Plan(ulysses=2), 128, 128)
    c2 = comm(bw2, "ulysses")
    assert comm_time_s(hw, c2) == pytest.approx(1e-6 + c2.bytes_per_call / 24e9)


def test_pcie_alltoall_across_sockets_sums_classes_through_one_port():
    hw = _pcie_box()
    [bw], _ = work(tiny_model(), hw, Plan(ulysses=8), 128, 128)
    c = comm(bw, "ulysses")
    # each rank sends 3/8 of its tensor inside its socket and 4/8 across: all leave through one port,
    # at the 8-rank figure of the slowest class (1 GB/s), not max(intra, inter) at their own rates
    intra, inter = c.bytes_by_link["intra_domain"], c.bytes_by_link["inter_domain"]
    assert inter == pytest.approx(intra * 4 / 3)
    assert comm_time_s(hw, c) == pytest.approx(7e-6 + (intra + inter) / 1e9)
    # on NVLink the classes run in parallel: the slower class alone decides
    nv = box(domain_size=4, devices=8, intra=100.0, inter=10.0)
    [bwn], _ = work(tiny_model(), nv, Plan(ulysses=8), 128, 128)
    cn = comm(bwn, "ulysses")
    assert comm_time_s(nv, cn) == pytest.approx(7e-6 + cn.bytes_by_link["inter_domain"] / 10e9)


def test_measured_ring_figure_on_pcie():
    hw = _pcie_box()
    [bw], _ = work(tiny_model(), hw, Plan(ring=4), 128, 128)
    c = comm(bw, "ring")
    # 4 hops inside one socket: the measured ring busbw (22) instead of 24 x 2/4 = 12
    assert list(c.bytes_by_link) == ["intra_domain"]
    assert comm_time_s(hw, c) == pytest.approx(1e-6 + c.bytes_per_call / 22e9)
    # ring of 8 across both sockets: two cross hops (one each way) keep the full 20 GB/s, which is
    # now the slowest hop; a ring of 4 strided over the sockets puts 4 flows on the socket link: 10
    [bw8], _ = work(tiny_model(), hw, Plan(ring=8), 128, 128)
    c8 = comm(bw8, "ring")
    assert list(c8.bytes_by_link) == ["inter_domain"]
    assert comm_time_s(hw, c8) == pytest.approx(1e-6 + c8.bytes_per_call / 20e9)
    [bw24], _ = work(tiny_model(), hw, Plan(ulysses=2, ring=4), 128, 128)
    c24 = comm(bw24, "ring")
    # rings {0,2,4,6} and {1,3,5,7} run at once: 4 hops cross the socket link (2 each way) -> 20 x 2/4
    assert c24.flows == {"intra_domain": 4, "inter_domain": 4}
    assert list(c24.bytes_by_link) == ["inter_domain"]
    assert comm_time_s(hw, c24) == pytest.approx(1e-6 + c24.bytes_per_call / 10e9)


def test_ring_overlap_and_masking_ceiling():
    assert masking_hidden(1.0, 4.0, 4) == pytest.approx(0.75)                  # compute-bound: 1 - 1/n
    assert masking_hidden(4.0, 1.0, 4) < 1.0                                   # cannot hide more than F
    m, hw = tiny_model(), box(domain_size=4, devices=4)
    s = make_shape(m, 64, 64, 1, 10)
    # priced without the fixed per-call cost (call_us=0): the sums below count bytes, FLOPs and alphas only
    ideal = predict(m, hw, s, Plan(ring=4), Tunables(launch_us=0, overlap_efficiency=1.0, call_us=0))
    none = predict(m, hw, s, Plan(ring=4), Tunables(launch_us=0, overlap_efficiency=0.0, call_us=0))
    [bw] = block_work(m, hw, s, Plan(ring=4), layout(Plan(ring=4)))
    rate = hw.peak_tflops_bf16 * 1e12 * hw.mfu
    att, hop = bw.attn_flops / rate, comm_time_s(hw, bw.comms[0])
    per = att / 4
    exposed_ideal = per + 3 * max(per, hop) - att                              # R sub-blocks, R-1 hops
    lin = bw.linear_flops / rate
    # per hop the fp32 out/LSE update reads out (4 B), the block's out (2 B) and writes out (4 B):
    # 4 local tokens x 64 wide x 10 B, for 3 hops; and the USP layer's layout copies of Q, K, V, O
    # (2 copies each, read + write) run with Ulysses = 1 too: 2 x 2 x 4 tokens x 2 B x (64+64+64+64)
    assert bw.relayout_bytes == 3 * 4 * 64 * 10 + 2 * 2 * 4 * 2 * 256
    assert bw.kernels == 30 + 32 + 3 * 12      # block + USP layout ops (no all-to-all call) + 3 hops (OPS_RING_HOP)
    merge = bw.relayout_bytes / (hw.hbm_bandwidth_GBps * 1e9)
    assert ideal.step_s == pytest.approx(2 * (lin + att + merge + exposed_ideal))
    assert none.step_s == pytest.approx(2 * (lin + att + merge + 3 * hop))


def test_host_dispatch_floor():
    m, hw = tiny_model(), box()
    s = make_shape(m, 64, 64, 1, 10)
    bd = predict(m, hw, s, Plan(), Tunables(launch_us=100.0))
    assert bd.step_s == pytest.approx(2 * 30 * 100e-6)                         # tiny blocks are host-bound
    assert bd.host_bound_s > 0


def test_memory_weights_shard_under_tp_and_pipefusion():
    m = tiny_model(params_b=1.0)
    s = make_shape(m, 64, 64, 1, 10)
    hw = box(devices=4)
    assert predict(m, hw, s, Plan(), Tunables()).memory_parts_GB["weights_GB"] == pytest.approx(2.0)
    assert predict(m, hw, s, Plan(tp=2), Tunables()).memory_parts_GB["weights_GB"] == pytest.approx(1.0)
    assert predict(m, hw, s, Plan(pipefusion=2), Tunables()).memory_parts_GB["weights_GB"] == pytest.approx(1.0)
    assert predict(m, hw, s, Plan(ulysses=4), Tunables()).memory_parts_GB["weights_GB"] == pytest.approx(2.0)
    kv = predict(m, hw, s, Plan(pipefusion=2), Tunables()).memory_parts_GB["kv_buffers_GB"]
    assert kv == pytest.approx(2 * 16 * 64 * B * 1 / 1e9)                    # 1 layer per stage, full K/V


def test_pipefusion_latency_by_hand():
    m, hw = tiny_model(blocks={"self": 4}), box(domain_size=4, devices=2)
    s = make_shape(m, 64, 64, 1, 10)
    tun = Tunables(launch_us=0.0, call_us=0.0)   # the by-hand sums below have no fixed per-call cost
    plan = Plan(pipefusion=2, warmup=1)
    bd = predict(m, hw, s, plan, tun)
    single = predict(m, hw, s, Plan(), tun)
    rate = hw.peak_tflops_bf16 * 1e12 * hw.mfu
    [bw] = block_work(m, hw, s, Plan(), layout(Plan()))
    block = (bw.linear_flops + bw.attn_flops) / rate
    patch = 2 * block / 2                                    # 2 blocks per stage, half the tokens
    hop = comm_time_s(hw, step_collectives(m, hw, s, plan, layout(plan))[0])
    patch_t = max(patch, hop)
    assert hop == pytest.approx(1e-6 + 16 * 64 * B / 2 / 100e9)               # alpha + half the latent
    hop_full = 1e-6 + 16 * 64 * B / 100e9
    warm = 2 * (2 * block) + hop_full                       # sync step: stages in turn, one full hop
    expected = warm + 9 * 2 * patch_t + 1 * patch_t          # 9 async steps of 2 patches + fill
    assert bd.latency_s == pytest.approx(expected)
    assert single.latency_s == pytest.approx(10 * 4 * block)


def _brute(devices, cfg_ok):
    out = set()
    rng = range(1, devices + 1)
    for cfg, u, r, g, a, tp, pf, dp in itertools.product((1, 2) if cfg_ok else (1,), rng, rng, rng, rng, rng, rng,
                                                         rng):
        one_slot = sum(x > 1 for x in (r, g, a)) <= 1   # ring, AllGather-KV and Attention2D share one slot
        if cfg * u * r * g * a * tp * pf * dp == devices and one_slot and not (tp > 1 and pf > 1):
            out.add((cfg, u, r, g, a, tp, pf, dp))
    return out


@pytest.mark.parametrize("devices,cfg_ok", [(4, True), (8, True), (6, False)])
def test_enumeration_matches_brute_force(devices, cfg_ok):
    got = {(p.cfg, p.ulysses, p.ring, p.kv_allgather, p.attn2d, p.tp, p.pipefusion, p.dp)
           for p in enumerate_plans(devices, cfg_ok)}
    assert got == _brute(devices, cfg_ok)
    with pytest.raises(InputError):
        enumerate_plans(0, True)


def test_layout_innermost_first():
    groups = layout(Plan(ulysses=2, ring=2, cfg=2))
    assert groups["ulysses"] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert groups["ring"] == [[0, 2], [1, 3], [4, 6], [5, 7]]
    assert groups["cfg"] == [[0, 4], [1, 5], [2, 6], [3, 7]]
    flipped = layout(Plan(ulysses=2, ring=2), order=("ring", "ulysses", "tp", "kv_allgather", "pipefusion",
                                                        "cfg", "dp"))
    assert flipped["ring"] == [[0, 1], [2, 3]]


def test_parse_resolution():
    assert parse_resolution("1024x1024") == (1024, 1024, None)
    assert parse_resolution("512x512x16 frames") == (512, 512, 16)
    assert parse_resolution("1280x720, 81 frames") == (1280, 720, 81)
    assert parse_resolution("1024px") == (1024, 1024, None)     # square, as published tables write it
    with pytest.raises(InputError):
        parse_resolution("seqlen 512")


def test_gqa_ulysses_kv_replication_cost():
    # kv_heads 2 < U 4: K/V are replicated to one head per rank (4 x 8 = 32 wide instead of 64)
    mha = comm(work(tiny_model(8), box(devices=4), Plan(ulysses=4))[0][0], "ulysses").bytes_per_call
    gqa = comm(work(tiny_model(2), box(devices=4), Plan(ulysses=4))[0][0], "ulysses").bytes_per_call
    assert math.isclose(mha, 4 * B * (2 * 64 + 2 * 64) / 4 * 3 / 4)           # 384 B per call
    assert math.isclose(gqa, 4 * B * (2 * 64 + 2 * 32) / 4 * 3 / 4)           # 288 B per call
