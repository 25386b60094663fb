"""Values of ditpar.plan.cost.timing worked out by hand (issue 29: the mapped tests let 16 of 20 sampled mutants
of timing.py through). PixArt-alpha on H100: 28 cross-attention blocks, hidden 1152, 1024x1024 -> 4096 tokens,
20 steps, CFG batched (batch 2)."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest
from ditpar.plan.cost import Plan, Tunables, make_shape, predict
from ditpar.plan.cost.plans import layout
from ditpar.plan.cost.timing import Breakdown, masking_hidden, slowest_stage_s
from ditpar.plan.cost.work import block_work
from ditpar.plan.inputs import presets


@pytest.fixture(scope="module")
def pixart():
    m = presets.load_model("PixArt-alpha")
    h = presets.load_hardware("H100", None, 8)
    return m, h, make_shape(m)


def test_one_device_compute_is_flops_over_rate_times_steps(pixart):
    """No communication and no re-layout on one card: compute = steps x FLOPs per step / (peak x mfu x efficiency)."""
    m, h, s = pixart
    bd = predict(m, h, s, Plan())
    rate = h.peak_tflops_bf16 * 1e12 * h.mfu
    assert s.steps == 20
    assert bd.compute_s == pytest.approx(20 * bd.flops_per_step / (rate * bd.compute_efficiency), rel=1e-12)
    assert bd.exposed_comm_s == 0.0 and bd.hidden_s == 0.0


def test_ulysses2_bytes_per_layer_and_step_by_hand(pixart):
    """U2: four all-to-alls (Q, K, V, O) per block, each moving half of the rank's local tensor
    2 (CFG batch) x 2048 tokens x 1152 x 2 B = 9,437,184 B, so 4 x 4,718,592 = 18,874,368 B per layer and 28 x that
    per step; the re-layout around them is priced at HBM speed inside compute."""
    m, h, s = pixart
    bd = predict(m, h, s, Plan(ulysses=2))
    per_call = 2 * 2048 * 1152 * 2 // 2
    assert per_call == 4_718_592
    assert bd.bytes_by_link_per_layer["intra_domain"] == 4 * per_call
    assert bd.bytes_by_link_per_step["intra_domain"] == 28 * 4 * per_call
    (blk,) = block_work(m, h, s, Plan(ulysses=2), layout(Plan(ulysses=2), Tunables().order))
    rate = h.peak_tflops_bf16 * 1e12 * h.mfu
    relayout = blk.relayout_bytes / (h.hbm_bandwidth_GBps * 1e9)
    assert bd.compute_s == pytest.approx(
        20 * (bd.flops_per_step / (rate * bd.compute_efficiency) + 28 * relayout), rel=1e-12)


def test_exposed_by_family_adds_up_to_exposed_by_link(pixart):
    m, h, s = pixart
    for plan in (Plan(ulysses=2), Plan(ring=4), Plan(cfg=2, ulysses=4)):
        bd = predict(m, h, s, plan)
        assert all(v >= 0 for v in bd.exposed_by_family_s.values())
        assert sum(bd.exposed_by_family_s.values()) == pytest.approx(bd.exposed_comm_s, rel=1e-12)
        assert bd.exposed_comm_s > 0


def test_sync_wait_per_blocking_call(pixart):
    """sync_us is waited at every collective call: U2 issues 4 per block, 28 blocks, 20 steps: 2240 calls, so 100 us
    each adds 0.224 s of exposed device time; the CFG all-gather (one call per step) adds 20 x 100 us = 2 ms."""
    m, h, s = pixart
    base, synced = predict(m, h, s, Plan(ulysses=2)), predict(m, h, s, Plan(ulysses=2), Tunables(sync_us=100.0))
    assert synced.exposed_comm_s - base.exposed_comm_s == pytest.approx(4 * 28 * 20 * 100e-6, rel=1e-9)
    # the device takes 0.224 s longer; the latency less, since host dispatch overlaps device work (p-norm)
    assert 0.0 < synced.latency_s - base.latency_s < 0.224
    cb, cs = predict(m, h, s, Plan(cfg=2)), predict(m, h, s, Plan(cfg=2), Tunables(sync_us=100.0))
    assert cs.exposed_by_family_s["CFG all-gather"] - cb.exposed_by_family_s["CFG all-gather"] == \
        pytest.approx(20 * 100e-6, rel=1e-9)


def test_ring_overlap_efficiency_moves_hidden_to_exposed(pixart):
    """What the ring hides at overlap 1 is hidden only half at 0.5; the other half is exposed."""
    m, h, s = pixart
    ideal = predict(m, h, s, Plan(ring=4), Tunables(overlap_efficiency=1.0))
    half = predict(m, h, s, Plan(ring=4), Tunables(overlap_efficiency=0.5))
    assert ideal.hidden_s > 0
    assert half.hidden_s == pytest.approx(0.5 * ideal.hidden_s, rel=1e-12)
    assert half.exposed_comm_s == pytest.approx(ideal.exposed_comm_s + 0.5 * ideal.hidden_s, rel=1e-12)


def test_masking_hidden_edges():
    assert masking_hidden(1.0, 10.0, 1) == 0.0          # one chunk hides nothing
    assert masking_hidden(0.0, 10.0, 4) == 0.0
    assert masking_hidden(1.0, 0.0, 4) == 0.0
    # per-chunk compute (2.5) covers per-chunk comm (0.25): every chunk but the first hides, 1 - 1/4
    assert masking_hidden(1.0, 10.0, 4) == pytest.approx(0.75)


def test_notes_for_replicas_and_stage_imbalance():
    flux, a100 = presets.load_model("FLUX.1-dev"), presets.load_hardware("A100", None, 8)
    s = make_shape(flux)
    assert any(n.startswith("dp=2:") for n in predict(flux, a100, s, Plan(ulysses=4, dp=2)).notes)
    assert not any(n.startswith("dp=") for n in predict(flux, a100, s, Plan(ulysses=8)).notes)
    # 57 blocks in 8 stages (8, 7, ..., 7): the first holds one block more
    pf8 = predict(flux, a100, s, Plan(pipefusion=8))
    assert any("stages hold unequal work (57 blocks in 8 contiguous stages)" in n for n in pf8.notes)
    assert pf8.exposed_by_family_s["PipeFusion P2P"] > 0
    assert sum(pf8.exposed_by_family_s.values()) == pytest.approx(pf8.exposed_comm_s, rel=1e-12)


def test_dtensor_note_counts_parallelized_linears():
    """The note's counts are linears (and their output redistributes) per block x blocks, summed over block kinds."""
    flux, h100 = presets.load_model("FLUX.1-dev"), presets.load_hardware("H100", None, 8)
    s, plan = make_shape(flux), Plan(tp=2)
    tun = Tunables(tp_linear_host_us=68.7, launch_us=25.0)   # the measured figure applies at 25 us a launch
    blocks = block_work(flux, h100, s, plan, layout(plan, tun.order))
    linears = sum(b.tp_linears * b.count for b in blocks)
    redis = sum(b.tp_redistributes * b.count for b in blocks)
    assert linears > 0 and all(b.count > 1 for b in blocks)
    # by hand: 19 joint blocks x 14 linears + 38 single blocks x 6 = 266 + 228 = 494; redistributes: a joint block's
    # 4 row-parallel all-reduces + 2 AdaLN gathers = 6, a single block's 1 + 1 = 2: 19 x 6 + 38 x 2 = 114 + 76 = 190;
    # (494 + 190) x 68.7 us = 46990.8 us = 47.0 ms
    assert (linears, redis) == (494, 190)
    note = next(n for n in predict(flux, h100, s, plan, tun).notes if n.startswith("DTensor TP host cost"))
    assert note.startswith("DTensor TP host cost: 494 parallelized linears and 190 output redistributes per forward "
                           "x 68.7 us = 47.0 ms host time per step")


def test_slowest_stage_skips_kinds_absent_from_the_stage_table():
    """A kind with no blocks (count 0) is left out instead of divided by zero."""
    model = SimpleNamespace(blocks={"joint": 4})
    assert slowest_stage_s(model, {"joint": 2.0, "single": 0.0}, [2.0, 0.0], 2) == pytest.approx(2.0)


def test_breakdown_starts_from_zero():
    bd = Breakdown(plan=Plan())
    assert (bd.latency_s, bd.compute_s, bd.flops_per_step, bd.exposed_comm_s) == (0.0, 0.0, 0.0, 0.0)
    assert (bd.memory_GB, bd.compute_efficiency) == (0.0, 1.0)   # 1 = no shape term until predict sets it
    assert dataclasses.asdict(bd)["pipeline_s"] == 0.0


def test_sync_wait_on_the_cfg_all_gather_under_pipefusion():
    """The PipeFusion path prices the CFG all-gather with its own line: 20 steps x one call x 100 us = 2 ms more."""
    m, h = presets.load_model("PixArt-alpha"), presets.load_hardware("H100", None, 8)
    s, plan = make_shape(m), Plan(cfg=2, pipefusion=2)
    base, synced = predict(m, h, s, plan), predict(m, h, s, plan, Tunables(sync_us=100.0))
    assert synced.exposed_by_family_s["CFG all-gather"] - base.exposed_by_family_s["CFG all-gather"] == \
        pytest.approx(20 * 100e-6, rel=1e-9)


def test_comm_time_alpha_beta_by_hand():
    """H100 NVLink: 370 GB/s, 10 us per step. 3.7 GB all-gather with 7 latency steps = 7 x 10 us + 3.7e9 / 370e9 s."""
    from ditpar.plan.cost.timing import comm_time_s
    from ditpar.plan.cost.work import Collective
    h = presets.load_hardware("H100", None, 8)
    c = Collective("g", "ulysses", "allgather", 1.0, {"intra_domain": 3.7e9}, alpha_steps=7, group_size=8)
    assert comm_time_s(h, c) == pytest.approx(70e-6 + 0.01, rel=1e-12)
    assert comm_time_s(h, Collective("none", "ulysses", "allgather", 1.0, {})) == 0.0


def test_plan_efficiency_of_no_blocks_is_one():
    from ditpar.plan.cost import efficiency
    from ditpar.plan.cost.timing import _plan_efficiency
    assert _plan_efficiency(efficiency.curve_for(presets.load_hardware("H100", None, 8)), [], 1) == 1.0


def test_masking_hides_only_the_ulysses_all_to_all(pixart):
    """Chunked masking (4 chunks) hides part of Ulysses' all-to-all; TP's all-reduce has nothing to hide behind."""
    m, h, s = pixart
    four = Tunables(masking_chunks=4)
    assert predict(m, h, s, Plan(ulysses=2), four).hidden_s > 0
    assert predict(m, h, s, Plan(ulysses=2)).hidden_s == 0.0
    assert predict(m, h, s, Plan(tp=2), four).hidden_s == 0.0


def test_masking_hidden_in_seconds_matches_the_bound_in_microseconds():
    """1 s of comm against 0.5 s of attention in 4 chunks: the bound works in us, the cost model in s."""
    from ditpar.masking.bound import ceiling, make_layer
    assert masking_hidden(1.0, 0.5, 4) == pytest.approx(ceiling(make_layer(1_000_000.0, 500_000.0, 4)), rel=1e-12)
    assert masking_hidden(2.0, 1.0, 4) == pytest.approx(2 * ceiling(make_layer(2_000_000.0, 1_000_000.0, 4)), rel=1e-12)


def test_a_fully_synchronous_pipefusion_step_waits_for_the_other_stage(pixart):
    """With every step a warm-up step, the whole latent passes the 2 stages of 14 blocks one after another: the
    rank computes its own stage (half the one-card compute) and waits for the other (pipeline time: the other
    stage's whole time, at least its compute)."""
    m, h, s = pixart
    one = predict(m, h, s, Plan())
    sync = predict(m, h, s, Plan(pipefusion=2, warmup=20))
    assert sync.compute_s == pytest.approx(0.5 * one.compute_s, rel=1e-9)
    assert sync.pipeline_s == pytest.approx(sync.compute_s + sync.host_bound_s
                                            + sync.exposed_comm_s - sync.exposed_by_family_s["PipeFusion P2P"], rel=1e-9)
    assert predict(m, h, s, Plan(pipefusion=2, warmup=1)).compute_s > 0


@pytest.mark.parametrize("model,hw", [("PixArt-alpha", "H100"), ("FLUX.1-dev", "A100"), ("SD3-Medium", "L40")])
def test_breakdown_columns_add_up_to_the_latency(model, hw):
    """compute + exposed communication + host-bound + pipeline = latency for every form, PipeFusion included
    (its warm-up once counted the other stages as this rank's compute and the stage imbalance twice)."""
    m, h = presets.load_model(model), presets.load_hardware(hw, None, 8)
    s = make_shape(m)
    for plan in (Plan(), Plan(ulysses=2), Plan(ring=4), Plan(tp=2), Plan(cfg=2, ulysses=2), Plan(pipefusion=2),
                 Plan(pipefusion=8), Plan(cfg=2, pipefusion=4), Plan(pipefusion=2, ulysses=2), Plan(pipefusion=4, warmup=3)):
        bd = predict(m, h, s, plan)
        parts = bd.compute_s + bd.exposed_comm_s + bd.host_bound_s + bd.pipeline_s
        assert parts == pytest.approx(bd.latency_s, rel=1e-9), plan.name
        assert sum(bd.exposed_by_family_s.values()) == pytest.approx(bd.exposed_comm_s, rel=1e-9, abs=1e-12), plan.name
        assert min(bd.compute_s, bd.exposed_comm_s, bd.host_bound_s, bd.pipeline_s, bd.hidden_s) >= 0, plan.name


def test_pipefusion_hop_hidden_under_the_next_patch(pixart):
    """PF2 on PixArt: 28 blocks split 14/14 (no imbalance), compute-bound, so every per-patch hand-off (hop) hides
    behind the next patch: hidden = hop x (steps - warm-up) x patches."""
    from ditpar.plan.cost.timing import comm_time_s
    from ditpar.plan.cost.work import step_collectives
    m, h, s = pixart
    plan = Plan(pipefusion=2)
    bd = predict(m, h, s, plan, Tunables(call_us=0.0))   # the hop alone (no fixed per-call cost)
    hop = sum(comm_time_s(h, c) for c in step_collectives(m, h, s, plan, layout(plan, Tunables().order))
              if c.dim == "pipefusion")
    assert hop > 0
    assert bd.hidden_s == pytest.approx(hop * (20 - 1) * plan.num_patches, rel=1e-9)


def test_pipefusion_compute_is_its_flops_at_its_patch_efficiency(pixart):
    """With no warm-up step every step runs m patches through the rank's stage: compute = steps x FLOPs per step
    / (rate x the plan's efficiency at patch rows). 2 patches of 2 x 2048 rows run at the large-GEMM rate, so
    exactly half a card's compute; 16 patches of 512 rows run slower."""
    m, h, s = pixart
    rate = h.peak_tflops_bf16 * 1e12 * h.mfu
    one = predict(m, h, s, Plan())
    two = predict(m, h, s, Plan(pipefusion=2, warmup=0))
    assert two.compute_s == pytest.approx(0.5 * one.compute_s, rel=1e-12)
    small = predict(m, h, s, Plan(pipefusion=2, patches=16, warmup=0))
    assert small.compute_s == pytest.approx(20 * small.flops_per_step / (rate * small.compute_efficiency), rel=1e-9)
    assert small.compute_efficiency < one.compute_efficiency
    assert small.compute_s > 0.5 * one.compute_s


def test_no_hbm_figure_means_no_relayout_time(pixart):
    m, h, s = pixart
    bare = dataclasses.replace(h, hbm_bandwidth_GBps=0.0)
    bd = predict(m, bare, s, Plan(ulysses=2))
    rate = h.peak_tflops_bf16 * 1e12 * h.mfu
    assert bd.compute_s == pytest.approx(20 * bd.flops_per_step / (rate * bd.compute_efficiency), rel=1e-12)


def test_pipefusion_families_add_up_with_ulysses_inside(pixart):
    m, h, s = pixart
    bd = predict(m, h, s, Plan(pipefusion=2, ulysses=2))
    assert bd.exposed_by_family_s["ulysses all-to-all Q,K,V,O"] > 0
    assert sum(bd.exposed_by_family_s.values()) == pytest.approx(bd.exposed_comm_s, rel=1e-12)


def test_breakdown_carries_each_link_figure_evidence():
    """The band reads what each link figure rests on from the breakdown: L20's all-to-all figures were measured
    on another device class, the Atlas HCCS figures are derived."""
    m = presets.load_model("FLUX.1-dev")
    l20, atlas = presets.load_hardware("L20", None, 8), presets.load_hardware("Atlas 800I A2", None, 8)
    assert predict(m, l20, make_shape(m), Plan(ulysses=4)).link_evidence["intra_domain"] == "other-class"
    assert predict(m, atlas, make_shape(m), Plan(ulysses=4)).link_evidence["intra_domain"] == "derived"


def test_a_patch_shrinks_the_attention_rows_not_the_keys(pixart):
    """PipeFusion's patch attends the whole stale K/V: only the query rows shrink. PixArt's block holds
    16 heads x 4096 tokens x 2 (CFG batch) = 131072 query rows; a 1/128 share leaves 1024, below the grid's 4096."""
    from ditpar.plan.cost import efficiency
    from ditpar.plan.cost.timing import block_efficiencies
    m, h, s = pixart
    plan = Plan(pipefusion=2)
    (blk,) = block_work(m, h, s, plan, layout(plan, Tunables().order))
    curve = efficiency.curve_for(h)
    rows, kv, hd = blk.attn_shape
    assert (rows, kv) == (131072, 4096)
    _, att, _ = block_efficiencies(curve, blk, 1.0 / 128)
    assert att == efficiency.attention_efficiency(curve, 1024, 4096, hd)
    assert att < efficiency.attention_efficiency(curve, rows, kv, hd) == 1.0


def test_slowest_stage_cuts_the_blocks_in_order():
    """Blocks a, b, b, b (per-block times 10, 1, 1, 1) in 2 stages of 2: [a, b] = 11 and [b, b] = 2, so 11."""
    model = SimpleNamespace(blocks={"a": 1, "b": 3})
    per_kind = {"a": 10.0 * 0.5, "b": 1.0 * 1.5}        # one stage's average: per-block time x blocks / stages
    assert slowest_stage_s(model, per_kind, [0.5, 1.5], 2) == pytest.approx(11.0)


def test_no_imbalance_note_for_even_stages(pixart):
    m, h, s = pixart   # 28 blocks in 2 stages of 14
    assert not any("unequal" in n for n in predict(m, h, s, Plan(pipefusion=2)).notes)


def test_dtensor_note_only_for_tp_with_a_per_linear_cost(pixart):
    m, h, s = pixart
    def noted(plan, tun):
        return any(n.startswith("DTensor TP host cost") for n in predict(m, h, s, plan, tun).notes)
    assert noted(Plan(tp=2), Tunables(tp_linear_host_us=68.7))
    assert not noted(Plan(ulysses=2), Tunables(tp_linear_host_us=68.7))      # no TP, no parallelized linear
    assert not noted(Plan(tp=2), Tunables())                                  # not a DTensor framework
    assert not noted(Plan(tp=2), Tunables(tp_linear_host_us=68.7, launch_us=0.0))   # captured: no dispatch


def test_cfg_all_gather_bytes_per_step_by_hand(pixart):
    """cfg2 gathers the other branch's output latent once per step: 128 x 128 x 4 channels x 2 B = 131,072 B."""
    m, h, s = pixart
    assert predict(m, h, s, Plan(cfg=2)).bytes_by_link_per_step["intra_domain"] == 128 * 128 * 4 * 2


def test_masking_with_two_chunks_hides_half():
    # 2 chunks, compute per chunk (1.0 s) covers comm per chunk (0.5 s): the ceiling is 1 - 1/2 of the 1 s collective
    assert masking_hidden(1.0, 2.0, 2) == pytest.approx(0.5)


def test_the_slowest_stage_can_be_the_last():
    # blocks in the model's order: 4 single then 2 joint; 2 stages of 3 -> (S, S, S) and (S, J, J). One block costs
    # single 2.0 / 2 = 1.0 and joint 3.0 / 1 = 3.0 (per_kind is one stage's average: 2 singles, 1 joint a stage):
    # stage 1 = 3.0, stage 2 = 1 + 3 + 3 = 7.0
    model = SimpleNamespace(blocks={"single": 4, "joint": 2})
    assert slowest_stage_s(model, {"single": 2.0, "joint": 3.0}, [2.0, 1.0], 2) == pytest.approx(7.0)


def test_a_stage_table_with_no_blocks_left_is_its_sum():
    model = SimpleNamespace(blocks={"joint": 2})
    assert slowest_stage_s(model, {"joint": 1.5}, [0.0], 2) == pytest.approx(1.5)
    with pytest.raises(ValueError):   # one count per kind, or the pairing is wrong
        slowest_stage_s(model, {"joint": 1.5}, [1.0, 1.0], 2)


def test_pipefusion_p2p_bytes_count_once_per_patch():
    # tiny model: 16 tokens x hidden 64 x 2 B, split into 2 patches = 1024 B a patch; 2 patches a step on the
    # pair's link (ranks 0 and 1, one domain): 2048 B a step; no per-block collective under PipeFusion
    from costmodel_fixtures import box, tiny_model

    m, hw = tiny_model(), box()
    bd = predict(m, hw, make_shape(m, 64, 64, 1, 10, cfg=False), Plan(pipefusion=2))
    assert bd.bytes_by_link_per_step["intra_domain"] == pytest.approx(2048.0)
    assert bd.bytes_by_link_per_layer["intra_domain"] == 0.0


def test_compute_divides_each_part_by_its_own_efficiency():
    """FLUX.1-dev ring-8 on H100 (Hopper curve): the attention of a hop block is below the large-GEMM rate. Compute a
    step = sum over block kinds of count x ((linear / e_lin + attention / e_att) / rate + re-layout bytes / HBM)."""
    from ditpar.plan.cost import efficiency
    from ditpar.plan.cost.timing import block_efficiencies

    m, h = presets.load_model("FLUX.1-dev"), presets.load_hardware("H100", None, 8)
    s, plan = make_shape(m), Plan(ring=8)
    curve = efficiency.curve_for(h)
    rate = h.peak_tflops_bf16 * 1e12 * h.mfu
    want = 0.0
    for b in block_work(m, h, s, plan, layout(plan)):
        e_lin, e_att, e_cross = block_efficiencies(curve, b)
        assert e_att < 1.0                                # a 576-key pass: the attention runs below the GEMM rate
        want += b.count * ((b.linear_flops / e_lin + b.cross_flops / e_cross + b.attn_flops / e_att) / rate
                           + b.relayout_bytes / (h.hbm_bandwidth_GBps * 1e9))
    assert predict(m, h, s, plan).compute_s == pytest.approx(want * s.steps, rel=1e-12)


# ---------------------------------------------------------------- survivors of the full run (issue 29), on the
# tiny model of costmodel_fixtures (64 wide, 8 heads x 8, FFN 256, 16 tokens) and its box (100 TFLOPS x mfu 0.5 =
# 5e13 FLOP/s, no GEMM curve: every efficiency 1; intra_domain 100 GB/s, inter_domain 10 GB/s, 1 us per step;
# HBM 1000 GB/s). One self block on one card: 16 x 98304 projection FLOPs + 4 x 16 x 16 x 64 attention = 1638400.

def _close(x, rel=1e-12):
    return pytest.approx(x, rel=rel, abs=0.0)   # these times are ~1e-6 s: approx's default abs 1e-12 would hide a lot


def _tiny(**kw):
    from costmodel_fixtures import tiny_model
    return tiny_model(**kw)


def _box(**kw):
    from costmodel_fixtures import box
    return box(**kw)


def test_tunables_are_frozen():
    # predict's default argument is one shared Tunables(): a caller must not be able to change it for everyone
    with pytest.raises(dataclasses.FrozenInstanceError):
        Tunables().launch_us = 0.0


def test_default_tunables_assume_one_masking_chunk_and_no_memory_savers():
    from ditpar.plan.decide.report import payload
    m = _tiny(text_encoder_params_b=1.5)
    s = make_shape(m, 2048, 2048, 1, 10)
    assert payload([], m, _box(), s, Tunables(), "")["tunables"]["masking_chunks"] == 1   # 1 = no masking
    parts = predict(m, _box(), s, Plan()).memory_parts_GB
    # the text encoder stays resident: 1.5e9 params x 2 B; the VAE decodes 2048 x 2048 px untiled:
    # 128 channels x 2 B x 3 buffers (a 512 x 512 tile would need 0.2 GB)
    assert parts["text_encoder_GB"] == _close(1.5e9 * 2 / 1e9, rel=1e-12)
    assert parts["vae_decode_GB"] == _close(2048 * 2048 * 128 * 2 * 3 / 1e9, rel=1e-12)


def test_compute_scale_divides_the_rate_by_hand():
    # 2 blocks x 1638400 FLOPs x 10 steps / (100e12 x 0.5 / compute_scale 2) = 1.31072e-6 s; no host (launch 0)
    m = _tiny()
    bd = predict(m, _box(), make_shape(m, 64, 64, 1, 10), Plan(), Tunables(launch_us=0.0, compute_scale=2.0))
    assert bd.compute_s == _close(2 * 1638400 * 10 / (100e12 * 0.5 / 2), rel=1e-13)
    assert bd.latency_s == bd.compute_s


def test_pipefusion_note_only_for_pipefusion():
    m = _tiny()
    s = make_shape(m, 64, 64, 1, 10)
    assert not any(n.startswith("PipeFusion") for n in predict(m, _box(), s, Plan()).notes)
    assert "PipeFusion: 1 synchronous warm-up step(s), 2 patches, stale KV" in \
        predict(m, _box(), s, Plan(pipefusion=2)).notes


def test_plan_efficiency_is_the_flop_weighted_harmonic_mean():
    # one block of 2 projection and 2 attention FLOPs, small shapes on the Hopper curve (both below the large-GEMM
    # rate): FLOPs / FLOP-time = 4 / (2 / e_lin + 2 / e_att)
    from ditpar.plan.cost import efficiency
    from ditpar.plan.cost.efficiency import Gemm
    from ditpar.plan.cost.timing import _plan_efficiency
    from ditpar.plan.cost.work import BlockWork
    curve = efficiency.curve_for(presets.load_hardware("H100", None, 8))
    gemms = (Gemm(64.0, 64.0, 64.0),)
    bw = BlockWork("self", 1.0, 2.0, 2.0, 0.0, [], 0.0, gemms=gemms, attn_shape=(64.0, 64.0, 64.0))
    e_lin = efficiency.linear_efficiency(curve, gemms)
    e_att = efficiency.attention_efficiency(curve, 64.0, 64.0, 64.0)
    assert e_lin < 1.0 and e_att < 1.0 and e_lin != e_att
    assert _plan_efficiency(curve, [bw], 1) == _close(4 / (2 / e_lin + 2 / e_att), rel=1e-12)


def test_a_patch_shrinks_the_cross_attention_rows():
    # a 1/2 patch share leaves 512 of 1024 query rows against the same 77 text keys
    from ditpar.plan.cost import efficiency
    from ditpar.plan.cost.timing import block_efficiencies
    from ditpar.plan.cost.work import BlockWork
    curve = efficiency.curve_for(presets.load_hardware("H100", None, 8))
    bw = BlockWork("cross", 1.0, 0.0, 0.0, 1.0, [], 0.0, cross_shape=(1024.0, 77.0, 72.0))
    half = efficiency.attention_efficiency(curve, 512.0, 77.0, 72.0)
    assert half != efficiency.attention_efficiency(curve, 2048.0, 77.0, 72.0)
    assert block_efficiencies(curve, bw, 0.5)[2] == half


def test_stage_imbalance_of_a_short_patch_is_kept():
    # 3 blocks in 2 stages (2 + 1), no host time: the slowest stage holds 2 blocks against the average 1.5: +33 %
    # (a patch of ~5e-8 s: the rounding tolerance is 1e-9 of it, not 1e-9 / it)
    m = _tiny(blocks={"self": 3})
    bd = predict(m, _box(), make_shape(m, 64, 64, 1, 10), Plan(pipefusion=2), Tunables(launch_us=0.0))
    assert "PipeFusion: stages hold unequal work (3 blocks in 2 contiguous stages); the slowest sets the pace " \
           "(+33% per patch)" in bd.notes


def test_pipefusion_step_with_sync_wait_by_hand():
    """PF2, 4 blocks (2 a stage), 2 steps (1 warm-up), sync 10 us, no host time. Per patch: compute 2 blocks x
    1638400 / 2 / 5e13 = 3.2768e-8 s; hand-off 16 x 64 x 2 B / 2 = 1024 B: 1 us + 1024 / 100e9 + 10 us sync =
    1.101024e-5 s, longer than the compute, so it sets the patch time. Warm-up step: 2 stages x 6.5536e-8 + one
    2048 B hand-off (1 us + 2.048e-8) = 1.151552e-6. Steady step 2 x 1.101024e-5; fill (2-1) x 1.101024e-5."""
    m = _tiny(blocks={"self": 4})
    bd = predict(m, _box(), make_shape(m, 64, 64, 1, 2), Plan(pipefusion=2),
                 Tunables(launch_us=0.0, sync_us=10.0, call_us=0.0))
    patch = 1e-6 + 1024 / 100e9 + 10e-6
    assert bd.step_s == _close(2 * patch, rel=1e-12)
    assert bd.latency_s == _close(1.151552e-6 + 2 * patch + patch, rel=1e-12)
    assert bd.pipeline_s == _close(6.5536e-8 + patch, rel=1e-12)     # other stage of the warm-up + fill
    # hidden: the part of each hand-off under its patch's compute, 2 patches in the one steady step
    assert bd.hidden_s == _close(2 * 3.2768e-8, rel=1e-9)


def test_pipefusion_warm_up_steps_carry_the_whole_latent_ring():
    """PF2 x R2 with every step a warm-up step: each of the rank's 2 blocks runs the whole latent, as R2 runs each
    of its 4: half of R2's ring time per step, hidden and exposed alike (overlap 0.5 splits the ring's time)."""
    m = _tiny(blocks={"self": 4})
    s, hw, tun = make_shape(m, 64, 64, 1, 10), _box(domain_size=8, devices=8), \
        Tunables(launch_us=0.0, overlap_efficiency=0.5)
    r2 = predict(m, hw, s, Plan(ring=2), tun)
    pf = predict(m, hw, s, Plan(pipefusion=2, ring=2, warmup=10), tun)
    assert r2.hidden_s > 0 and r2.exposed_by_family_s["ring K,V pass"] > 0
    assert pf.hidden_s == _close(r2.hidden_s / 2, rel=1e-12)
    assert pf.exposed_by_family_s["ring K,V pass"] == _close(r2.exposed_by_family_s["ring K,V pass"] / 2,
                                                                     rel=1e-12)


def test_cfg_gather_exposed_on_its_own_link_under_pipefusion():
    # cfg2 x PF2 on domains of 2: the stages pair up inside a domain ([0,1], [2,3]), the CFG pairs across ([0,2],
    # [1,3]): the gather of 16 x (1 x 2 x 2) x 4 channels x 2 B = 512 B (1 us + 512 / 10e9) x 10 steps is inter_domain
    m = _tiny(blocks={"self": 4}, cfg_default=True)
    bd = predict(m, _box(domain_size=2, devices=4), make_shape(m, 64, 64, 1, 10, cfg=True), Plan(cfg=2, pipefusion=2),
                 Tunables(call_us=0.0))
    assert bd.exposed_by_link_s["inter_domain"] == _close(10 * (1e-6 + 512 / 10e9), rel=1e-12)


def test_exposure_goes_to_the_slowest_class_of_a_collective():
    # U4 over 2 domains of 2: each all-to-all sends 1 share inside the domain (100 GB/s) and 2 across (10 GB/s);
    # the across part takes longer, so all of the exposure is booked on inter_domain
    m = _tiny()
    bd = predict(m, _box(domain_size=2, devices=4), make_shape(m, 64, 64, 1, 10), Plan(ulysses=4))
    assert bd.exposed_by_link_s["intra_domain"] == 0.0
    assert bd.exposed_by_link_s["inter_domain"] == bd.exposed_comm_s > 0


def test_dtensor_note_at_one_us_per_linear():
    # 1 us per linear at launch 25 us: TP2 parallelizes 6 linears in each of 2 self blocks = 12, and redistributes
    # the outputs of its 2 row-parallel projections in each (no AdaLN in a self block) = 4: (12 + 4) x 1 us = 0.016 ms
    m = _tiny()
    tun = Tunables(tp_linear_host_us=1.0, launch_us=25.0)
    notes = predict(m, _box(), make_shape(m, 64, 64, 1, 10), Plan(tp=2), tun).notes
    assert any(n.startswith("DTensor TP host cost: 12 parallelized linears and 4 output redistributes per forward "
                            "x 1.0 us = 0.0 ms host time per step") for n in notes)


def test_masking_moves_all_to_all_time_from_exposed_to_hidden():
    # 2 chunks hide part of the Ulysses all-to-all: exposed + hidden is the 1-chunk exposed time (all of it)
    m = _tiny()
    s, name = make_shape(m, 64, 64, 1, 10), "ulysses all-to-all Q,K,V,O"
    two = predict(m, _box(), s, Plan(ulysses=2), Tunables(launch_us=0.0, masking_chunks=2))
    one = predict(m, _box(), s, Plan(ulysses=2), Tunables(launch_us=0.0))
    assert two.hidden_s > 0
    assert two.exposed_by_family_s[name] + two.hidden_s == _close(one.exposed_by_family_s[name], rel=1e-12)


def test_hardware_without_an_hbm_figure_prices_no_relayout():
    # a hardware object with no hbm_bandwidth_GBps at all: 1 GB of layout copies cost nothing; 5e13 FLOPs at
    # 5e13 FLOP/s take 1 s
    from ditpar.plan.cost.timing import _block_time
    from ditpar.plan.cost.work import BlockWork
    bw = BlockWork("self", 1.0, 5e13, 0.0, 0.0, [], 0.0, relayout_bytes=1e9)
    assert _block_time(SimpleNamespace(links={}), bw, Tunables(launch_us=0.0), 5e13, Breakdown(plan=Plan()), 1.0) \
        == 1.0


def test_pipefusion_layout_copies_per_patch():
    """PF2 x U2, no warm-up, 10 steps: each patch runs half of every block. A block per rank: (786432 + 32768) FLOPs
    / 5e13 = 1.6384e-8 s, plus the USP copies 2 x 2 x 8 tokens x 2 B x (2 x 64 + 2 x 64) = 16384 B at 1000 GB/s =
    1.6384e-8 s; 2 blocks, 2 half patches, 10 steps: 6.5536e-7 s."""
    m = _tiny(blocks={"self": 4})
    bd = predict(m, _box(domain_size=8, devices=8), make_shape(m, 64, 64, 1, 10), Plan(pipefusion=2, ulysses=2,
                                                                                        warmup=0),
                 Tunables(launch_us=0.0))
    assert bd.compute_s == _close(10 * 2 * 2 * (1.6384e-8 + 1.6384e-8) / 2, rel=1e-12)
