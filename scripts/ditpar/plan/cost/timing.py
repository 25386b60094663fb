"""Alpha-beta time of every collective, what overlaps compute, and step / end-to-end latency."""

from __future__ import annotations

from dataclasses import dataclass, field

from ditpar.plan.cost import cfg_calls, efficiency
from ditpar.plan.cost.memory import memory_per_rank
from ditpar.plan.cost.plans import DEFAULT_ORDER, Plan, layout
from ditpar.plan.cost.shape import Shape, guided_steps
from ditpar.plan.cost.small_work import DEFAULT_CALL_US
from ditpar.plan.cost.tp_layout import DEFAULT_LAYOUT, tp_layout_note
from ditpar.plan.cost.work import (
    LINK_KEYS,
    BlockWork,
    Collective,
    alltoall_time_s,
    block_work,
    effective_bw,
    step_collectives,
)


@dataclass(frozen=True)
class Tunables:
    """Knobs that are properties of the software stack, not of the model or the machine."""

    launch_us: float = 25.0       # host cost of one eager op (Python module call + dispatch + launch)
    sync_us: float = 0.0          # wait at each blocking collective call in a real pipeline (arrival skew,
                                  # host re-launch); never hidden by overlap
    call_us: float = DEFAULT_CALL_US  # fixed cost of every collective call on top of its link class's latency (small-work
                                  # pricing: cost/small_work.py; fitted on published tables, plan.py evaluate)
    masking_chunks: int = 1       # chunked Ulysses masking (1 = none); hidden share bounded by 1 - 1/n
    order: tuple[str, ...] = DEFAULT_ORDER
    overlap_efficiency: float = 0.0  # share of ring K/V passing that really hides under the attention block:
                                     # 1 = ideal (theory), 0 = none (what the published xDiT/yunchang runs show)
    compute_scale: float = 1.0    # >1 slows compute: set by --ref-latency calibration
    offload_text_encoder: bool = False  # text encoder off the device during denoising (memory only)
    vae_tiling: bool = False            # tiled VAE decode (memory only)
    kv_gather_one_call: bool = False    # AllGather-KV as one attention call after the gather (vLLM-Omni, SGLang,
                                        # LightX2V); False: diffusers' loop of per-chunk calls with merges
    tp_linear_host_us: float = 0.0      # extra host time per TP-parallelized linear at launch_us = 25 (DTensor
                                        # dispatch; set by ditpar.plan.decide.rank for a DTensor framework);
                                        # scales with launch_us, so --launch-us 0 (captured/compiled) removes it
    tp_layout: str = ""                 # which collectives TP issues per block (ditpar.plan.cost.tp_layout; set from
                                        # the framework profile's tp_layout, '' = the default layout)
    cfg_calls: str = ""                 # how the CFG branches run without CFG parallel: 'two' calls, one 'batch' of 2,
                                        # '' = as the model's pipeline does (set from the framework profile's cfg_calls)


# Extra host time of one DTensor ColwiseParallel linear over a plain one: benchmarks/dtensor_overhead.py on the
# repository's CPU host (Intel Xeon, torch 2.13.0+cpu, gloo, 2 processes, best of 7 x 300 calls; 3 runs gave
# 66.0, 68.7, 70.4 us, the median kept). This host and this torch: yours differs. Applied to every parallelized
# linear (Rowwise adds a redistribute on top, not counted). Public evidence of the mechanism:
# pytorch/pytorch#107305 (DTensor aten.addmm dispatch 0.476 -> 0.341 ms in 2023).
DTENSOR_LINEAR_HOST_US = 68.7
REFERENCE_LAUNCH_US = 25.0   # launch_us at which DTENSOR_LINEAR_HOST_US applies as measured


# A DTensor TP plan redistributes the output of every RowwiseParallel linear (Partial -> Replicate: its all-reduce)
# and of every ColwiseParallel(output_layouts=Replicate()) one (cache-dit's AdaLN: an all-gather) with
# DTensor.redistribute, a second DTensor call after the linear's own dispatch (pytorch/pytorch@004c2c9abc52
# torch/distributed/tensor/parallel/style.py, ColwiseParallel and RowwiseParallel._prepare_output_fn). Each is priced at
# the measured Colwise dispatch (DTENSOR_LINEAR_HOST_US), a lower bound: the benchmark's Rowwise figure also holds
# gloo's functional all-reduce and cannot separate the redistribute's host time.


def block_host_s(bw: BlockWork, tun: Tunables) -> float:
    """Host time of one block: eager ops x launch_us, plus the TP framework's per-linear dispatch cost and its output
    redistributes, scaled by launch_us / 25 (zero under captured or compiled execution, launch_us = 0)."""
    tp_extra = (bw.tp_linears + bw.tp_redistributes) * tun.tp_linear_host_us * tun.launch_us / REFERENCE_LAUNCH_US
    return (bw.kernels * tun.launch_us + tp_extra) * 1e-6


def comm_time_s(hw, c: Collective) -> float:
    """alpha-beta: alpha_steps x latency + bytes / bandwidth (the slowest link class decides, except for an
    all-to-all on shared PCIe, where all classes leave through one port: ditpar.plan.cost.work.alltoall_time_s)."""
    if not c.bytes_by_link:
        return 0.0
    if c.family == "alltoall":
        beta = alltoall_time_s(hw, c.bytes_by_link, c.group_size, c.flows)
    else:
        beta = max(v / (effective_bw(hw, k, c.group_size, c.flows.get(k, 1), c.family) * 1e9)
                   for k, v in c.bytes_by_link.items())
    alpha = c.alpha_steps * max(hw.links[k].latency_us for k in c.bytes_by_link) * 1e-6
    return alpha + beta


def masking_hidden(comm_s: float, compute_s: float, chunks: int) -> float:
    """Comm hidden by chunked masking with n chunks: C x ceiling (ditpar.masking's closed form,
    which is (1 - 1/n) when per-chunk compute covers per-chunk comm, less when it does not)."""
    if chunks <= 1 or comm_s <= 0 or compute_s <= 0:
        return 0.0
    from ditpar.masking.bound import ceiling, make_layer

    return comm_s * ceiling(make_layer(comm_s * 1e6, compute_s * 1e6, chunks))


@dataclass
class Breakdown:
    """Predicted time of one plan, split the way plan.py prints it (seconds)."""

    plan: Plan
    latency_s: float = 0.0
    step_s: float = 0.0
    compute_s: float = 0.0                  # per request, all steps
    exposed_by_link_s: dict[str, float] = field(default_factory=lambda: dict.fromkeys(LINK_KEYS, 0.0))
    exposed_by_family_s: dict[str, float] = field(default_factory=dict)
    # the part of exposed_by_link_s spent in all-to-alls priced by a link's all-to-all table (alltoall_GBps): its
    # figure rests on other evidence than the link's ring/bandwidth figures and moves on its own in the band
    exposed_alltoall_by_link_s: dict[str, float] = field(default_factory=lambda: dict.fromkeys(LINK_KEYS, 0.0))
    hidden_s: float = 0.0                   # communication overlapped with compute
    host_bound_s: float = 0.0               # extra time where host dispatch exceeds device work
    pipeline_s: float = 0.0                 # PipeFusion warm-up and fill
    bytes_by_link_per_step: dict[str, float] = field(default_factory=lambda: dict.fromkeys(LINK_KEYS, 0.0))
    bytes_by_link_per_layer: dict[str, float] = field(default_factory=lambda: dict.fromkeys(LINK_KEYS, 0.0))
    memory_GB: float = 0.0
    memory_parts_GB: dict[str, float] = field(default_factory=dict)
    flops_per_step: float = 0.0
    compute_efficiency: float = 1.0         # FLOP-weighted share of the large-GEMM rate this plan's per-card
                                            # GEMM and attention shapes reach (1 = no shape term; efficiency.py)
    notes: list[str] = field(default_factory=list)
    link_evidence: dict[str, str] = field(default_factory=dict)  # what each link class's figure rests on (bands)

    @property
    def exposed_comm_s(self) -> float:
        return float(sum(self.exposed_by_link_s.values()))


def _add(d: dict[str, float], key: str, value: float) -> None:
    d[key] = d.get(key, 0.0) + value


def block_efficiencies(curve, bw: BlockWork, scale: float = 1.0) -> tuple[float, float, float]:
    """(projections, attention, cross-attention) efficiency of one block relative to large GEMMs; a patch
    share `scale` shrinks the rows on the card, not the keys (PipeFusion attends the whole stale K/V)."""
    lin = efficiency.linear_efficiency(curve, bw.gemms, scale)
    rows, kv, hd = bw.attn_shape
    att = efficiency.attention_efficiency(curve, rows * scale, kv, hd)
    crows, ckv, chd = bw.cross_shape
    cross = efficiency.attention_efficiency(curve, crows * scale, ckv, chd)
    return lin, att, cross


def _block_time(hw, bw: BlockWork, tun: Tunables, flops_rate: float, bd: Breakdown, scale: float,
                curve=None) -> float:
    """Time of one block on one rank for one forward (patch share `scale` of its work), recording parts."""
    e_lin, e_att, e_cross = block_efficiencies(curve, bw, scale)
    lin = (bw.linear_flops / e_lin + bw.cross_flops / e_cross) * scale / flops_rate
    att = bw.attn_flops * scale / flops_rate / e_att
    compute = lin + att
    exposed_total = 0.0
    sync = (tun.sync_us + tun.call_us) * 1e-6
    for c in bw.comms:
        one = comm_time_s(hw, _scaled(c, scale))
        t = one * c.calls
        if c.overlap == "ring":        # R attention sub-blocks; hop i+1's K,V travel during block i
            per = att / (c.calls + 1)
            exposed = per + c.calls * max(per, one) - att
            hidden = t - exposed
        elif c.overlap == "masking":   # Ulysses: only chunked masking hides part of it (behind attention)
            hidden = masking_hidden(t, att, tun.masking_chunks)
            exposed = t - hidden
        else:
            hidden, exposed = 0.0, t
        lost = (1.0 - tun.overlap_efficiency) * hidden if c.overlap == "ring" else 0.0
        exposed += sync * c.calls + lost
        hidden -= lost
        link = max(c.bytes_by_link,
                   key=lambda k: c.bytes_by_link[k] / effective_bw(hw, k, c.group_size, c.flows.get(k, 1), c.family))
        _add(bd.exposed_by_family_s, c.name, exposed * bw.count)
        bd.exposed_by_link_s[link] += exposed * bw.count
        if c.family == "alltoall" and hw.links[link].alltoall_bus_GBps(c.group_size) > 0:
            bd.exposed_alltoall_by_link_s[link] += exposed * bw.count
        bd.hidden_s += hidden * bw.count
        exposed_total += exposed
    hbm = float(getattr(hw, "hbm_bandwidth_GBps", 0) or 0)
    relayout = bw.relayout_bytes * scale / (hbm * 1e9) if hbm else 0.0
    compute += relayout
    device = compute + exposed_total
    host = block_host_s(bw, tun)
    bd.compute_s += compute * bw.count
    both = host_device_s(host, device)
    if both > device:
        bd.host_bound_s += (both - device) * bw.count
    return both * bw.count


# Host dispatch and device work overlap through the launch queue, but not perfectly where they are of a size: the
# queue drains at every launch that arrives late, so the device idles in short gaps even when the mean host time is
# below the device time. A p-norm of the two (p = HOST_DEVICE_P) is max(host, device) when one dominates and
# 2^(1/p) = 1.19 x max when they are equal. p = 4 is chosen a priori (not fitted): it keeps the time strictly above
# the busier side and makes a host-bound plan still depend on its device work (FLUX.1-dev TP8 on 8 cards and TP4 on
# 4 cards issue the same ops per rank, and pure max() priced them alike).
HOST_DEVICE_P = 4.0


def host_device_s(host: float, device: float) -> float:
    """Time of one block whose host dispatch takes `host` and whose device work takes `device` seconds."""
    if host <= 0 or device <= 0:
        return max(host, device)
    p = HOST_DEVICE_P
    return (host ** p + device ** p) ** (1.0 / p)


STEP_GATHERS = ("cfg",)   # per-step collectives outside the blocks (the CFG pair's output all-gather)


def _step_gathers(hw, per_step: list[Collective], tun: Tunables, bd: Breakdown | None, times: float) -> float:
    """Seconds per step of the all-gathers that close a step (STEP_GATHERS: the CFG pair's outputs), each exposed with
    its fixed call cost; recorded `times` times into `bd` (by collective and by link) when given. The sequence group's
    output all-gather is not among them (ditpar.plan.cost.work.sp_output_gather says why)."""
    total = 0.0
    for c in per_step:
        if c.dim not in STEP_GATHERS:
            continue
        t = comm_time_s(hw, c) + (tun.sync_us + tun.call_us) * 1e-6
        total += t
        if bd is not None and times:
            _add(bd.exposed_by_family_s, c.name, t * times)
            bd.exposed_by_link_s[next(iter(c.bytes_by_link))] += t * times
    return total


def _scaled(c: Collective, scale: float) -> Collective:
    if scale == 1.0:
        return c
    return Collective(c.name, c.dim, c.family, c.calls, {k: v * scale for k, v in c.bytes_by_link.items()},
                      c.alpha_steps, c.overlap, c.group_size, c.flows)


def _record_bytes(bd: Breakdown, blocks: list[BlockWork], per_step: list[Collective], patches: int) -> None:
    layers = sum(b.count for b in blocks) or 1.0
    for b in blocks:
        for c in b.comms:
            for k, v in c.bytes_by_link.items():
                bd.bytes_by_link_per_step[k] += v * c.calls * b.count
    for k in LINK_KEYS:
        bd.bytes_by_link_per_layer[k] = bd.bytes_by_link_per_step[k] / layers
    for c in per_step:
        mult = patches if c.dim == "pipefusion" else 1
        for k, v in c.bytes_by_link.items():
            bd.bytes_by_link_per_step[k] += v * mult


def predict(model, hw, shape: Shape, plan: Plan, tun: Tunables = Tunables()) -> Breakdown:
    """Predicted end-to-end DiT latency of one request under a plan, with its breakdown."""
    if shape.cfg and guided_steps(shape) < shape.steps:   # CFG truncation: the late steps run one branch
        return _truncated(model, hw, shape, plan, tun)
    if cfg_calls.two_calls(model, shape, plan, tun.cfg_calls):   # the pipeline calls the transformer once per CFG branch
        return _two_calls(model, hw, shape, plan, tun)
    shape = cfg_calls.critical_shape(shape)       # a batch of 2 or CFG parallel: the longer branch sets the step
    groups = layout(plan, tun.order)
    blocks = block_work(model, hw, shape, plan, groups, tun.kv_gather_one_call, tun.tp_layout or DEFAULT_LAYOUT)
    per_step = step_collectives(model, hw, shape, plan, groups)
    rate = hw.peak_tflops_bf16 * 1e12 * hw.mfu / tun.compute_scale
    curve = efficiency.curve_for(hw)
    bd = Breakdown(plan=plan)
    bd.link_evidence = {k: getattr(v, "evidence", "derived") for k, v in hw.links.items()}
    bd.flops_per_step = sum((b.linear_flops + b.attn_flops + b.cross_flops) * b.count for b in blocks)
    bd.compute_efficiency = _plan_efficiency(curve, blocks, plan.num_patches if plan.pipefusion > 1 else 1)
    _record_bytes(bd, blocks, per_step, plan.num_patches)
    steps = shape.steps
    pf = plan.pipefusion
    if pf == 1:
        step = sum(_block_time(hw, b, tun, rate, bd, 1.0, curve) for b in blocks)
        cfg_t = _step_gathers(hw, per_step, tun, bd, 1.0)
        bd.step_s = step + cfg_t
        _scale_totals(bd, steps)
        bd.latency_s = steps * bd.step_s
    else:
        m = plan.num_patches
        warm = min(plan.warmup, steps)
        # steady state: each stage runs its blocks on one patch, then hands the patch on (overlapped)
        probe = Breakdown(plan=plan)
        per_kind = {b.kind: _block_time(hw, b, tun, rate, probe, 1.0 / m, curve) for b in blocks}
        patch_compute = sum(per_kind.values())
        imbalance = slowest_stage_s(model, per_kind, [b.count for b in blocks], pf) - patch_compute
        if imbalance <= 1e-9 * patch_compute:   # even stages: only rounding of the per-block split is left
            imbalance = 0.0
        p2p = [c for c in per_step if c.dim == "pipefusion"]
        hop = sum(comm_time_s(hw, c) + (tun.sync_us + tun.call_us) * 1e-6 for c in p2p)
        patch_t = max(patch_compute + imbalance, hop)
        # the hand-off shows only where it outlasts the slowest stage's patch; the imbalance is the pipeline's
        exposed_patch = patch_t - patch_compute - imbalance
        # warm-up: the whole latent passes the stages one after another (synchronous pipeline)
        probe_full = Breakdown(plan=plan)
        stage_full = sum(_block_time(hw, b, tun, rate, probe_full, 1.0, curve) for b in blocks)
        hop_full = sum(comm_time_s(hw, _scaled(c, float(m))) for c in p2p)
        sync_step = pf * stage_full + (pf - 1) * hop_full
        cfg_t = _step_gathers(hw, per_step, tun, None, 0.0)
        async_steps = steps - warm
        fill = (pf - 1) * patch_t if async_steps > 0 else 0.0
        bd.step_s = m * patch_t + cfg_t
        total = warm * (sync_step + cfg_t) + async_steps * bd.step_s + fill
        # attribute, so that compute + exposed + host-bound + pipeline = latency: the rank's own stage is its
        # compute (per patch in the steady state, on the whole latent in a warm-up step); the other stages of a
        # warm-up step, the fill and the stage imbalance are pipeline time
        mult = async_steps * m
        bd.compute_s = probe.compute_s * mult + probe_full.compute_s * warm
        bd.host_bound_s = probe.host_bound_s * mult + probe_full.host_bound_s * warm
        bd.hidden_s = probe.hidden_s * mult + probe_full.hidden_s * warm + (hop - exposed_patch) * mult
        for k in LINK_KEYS:
            bd.exposed_by_link_s[k] = probe.exposed_by_link_s[k] * mult + probe_full.exposed_by_link_s[k] * warm
            bd.exposed_alltoall_by_link_s[k] = (probe.exposed_alltoall_by_link_s[k] * mult
                                                + probe_full.exposed_alltoall_by_link_s[k] * warm)
        for k, v in probe.exposed_by_family_s.items():
            bd.exposed_by_family_s[k] = v * mult + probe_full.exposed_by_family_s.get(k, 0.0) * warm
        if p2p:
            link = next(iter(p2p[0].bytes_by_link))
            pf_exposed = exposed_patch * mult + (pf - 1) * hop_full * warm
            bd.exposed_by_link_s[link] += pf_exposed
            _add(bd.exposed_by_family_s, "PipeFusion P2P", pf_exposed)
        if cfg_t:
            _step_gathers(hw, per_step, tun, bd, float(steps))
        bd.pipeline_s = warm * (pf - 1) * stage_full + fill + imbalance * mult
        if imbalance > 0:
            bd.notes.append(f"PipeFusion: stages hold unequal work ({model.n_layers} blocks in {pf} contiguous stages);"
                            f" the slowest sets the pace (+{imbalance / patch_compute:.0%} per patch)")
        bd.latency_s = total
        bd.notes.append(f"PipeFusion: {warm} synchronous warm-up step(s), {m} patches, stale KV")
    per_linear = tun.tp_linear_host_us * tun.launch_us / REFERENCE_LAUNCH_US
    if plan.tp > 1 and per_linear > 0:
        linears = sum(b.tp_linears * b.count for b in blocks)
        redis = sum(b.tp_redistributes * b.count for b in blocks)
        bd.notes.append(f"DTensor TP host cost: {linears:g} parallelized linears and {redis:g} output redistributes "
                        f"per forward x {per_linear:.1f} us = {(linears + redis) * per_linear / 1e3:.1f} ms host time "
                        "per step (benchmarks/dtensor_overhead.py, measured on a CPU host; the redistributes priced as "
                        "one more dispatch, a lower bound; --launch-us 0 removes it)")
    if plan.tp > 1:
        bd.notes.append(tp_layout_note(tun.tp_layout, blocks))
    if plan.dp > 1:
        bd.notes.append(f"dp={plan.dp}: replicas serve other requests; one request's latency does not improve")
    mem, parts = memory_per_rank(model, shape, plan, hw, offload_text_encoder=tun.offload_text_encoder,
                                 vae_tiling=tun.vae_tiling)
    bd.memory_GB, bd.memory_parts_GB = mem, parts
    return bd


def _two_calls(model, hw, shape: Shape, plan: Plan, tun: Tunables) -> Breakdown:
    """Two transformer calls per step on the same ranks: the prompt's, then the negative prompt's (its own length)."""
    note = ("CFG branches run as two transformer calls per step (batch 1 each), as this model's pipeline does: every "
            "op and collective call paid twice")
    one = predict(model, hw, cfg_calls.branch_shape(shape, cfg_calls.text_tokens(shape)), plan, tun)
    if not cfg_calls.uneven(shape):
        return cfg_calls.doubled(one, note)
    other = predict(model, hw, cfg_calls.branch_shape(shape, shape.text_uncond), plan, tun)
    bd = cfg_calls.summed(one, other, f"{note}; the negative prompt's call carries {shape.text_uncond} text tokens "
                                      f"against the prompt's {cfg_calls.text_tokens(shape)}")
    bd.step_s = one.step_s + other.step_s
    bd.flops_per_step = one.flops_per_step + other.flops_per_step
    for k in bd.bytes_by_link_per_step:
        bd.bytes_by_link_per_step[k] += other.bytes_by_link_per_step.get(k, 0.0)
        bd.bytes_by_link_per_layer[k] += other.bytes_by_link_per_layer.get(k, 0.0)
    return bd


def _truncated(model, hw, shape: Shape, plan: Plan, tun: Tunables) -> Breakdown:
    """CFG on the first guided_steps(shape) steps only (cfg_trunc_ratio): those steps as the plan runs a CFG step, the
    rest as one branch on one CFG group (a CFG-parallel plan's other group idles; no CFG all-gather)."""
    import dataclasses

    steps, guided = shape.steps, guided_steps(shape)
    inner = dataclasses.replace(plan, cfg=1)
    late = dataclasses.replace(shape, cfg=False, steps=steps - guided, cfg_trunc_ratio=1.0, text_uncond=-1)
    if guided == 0:
        bd = predict(model, hw, late, inner, tun)
        bd.plan = plan
    else:
        bd = predict(model, hw, dataclasses.replace(shape, steps=guided, cfg_trunc_ratio=1.0), plan, tun)
        off = predict(model, hw, late, dataclasses.replace(inner, warmup=0) if plan.pipefusion > 1 else inner, tun)
        bd = cfg_calls.summed(bd, off)
    bd.step_s = bd.latency_s / steps
    bd.notes.append(f"CFG truncation: both branches on {guided} of {steps} steps (cfg_trunc_ratio "
                    f"{shape.cfg_trunc_ratio:g}), the prompt's branch alone on the other {steps - guided}"
                    + (f"; cfg={plan.cfg} leaves {plan.devices // plan.cfg} of its {plan.devices} cards idle on those"
                       if plan.cfg > 1 else ""))
    mem, parts = memory_per_rank(model, shape, plan, hw, offload_text_encoder=tun.offload_text_encoder,
                                 vae_tiling=tun.vae_tiling)
    bd.memory_GB, bd.memory_parts_GB = mem, parts
    return bd


def stage_split(layers: int, stages: int) -> list[int]:
    """Blocks per pipeline stage: contiguous, as even as possible, the first stages one block more (xDiT's split)."""
    q, r = divmod(layers, stages)
    return [q + (1 if i < r else 0) for i in range(stages)]


def slowest_stage_s(model, per_kind: dict[str, float], counts: list[float], stages: int) -> float:
    """Per-patch time of the slowest pipeline stage: the model's blocks in order (its [blocks] table order) cut into
    contiguous stages; `per_kind` is one stage's average time per kind (count = blocks / stages)."""
    one = {k: per_kind[k] / c for k, c in zip(per_kind, counts, strict=True) if c > 0}
    order = [k for k, n in model.blocks.items() for _ in range(int(n)) if k in one]
    if not order:
        return sum(per_kind.values())
    worst, start = 0.0, 0
    for size in stage_split(len(order), stages):
        worst = max(worst, sum(one[k] for k in order[start:start + size]))
        start += size
    return worst


def _plan_efficiency(curve, blocks: list[BlockWork], patches: int) -> float:
    """FLOP-weighted efficiency of all blocks (FLOPs over FLOP-time at the large-GEMM rate)."""
    flops = time = 0.0
    for b in blocks:
        e_lin, e_att, e_cross = block_efficiencies(curve, b, 1.0 / patches)
        flops += (b.linear_flops + b.attn_flops + b.cross_flops) * b.count
        time += (b.linear_flops / e_lin + b.attn_flops / e_att + b.cross_flops / e_cross) * b.count
    return flops / time if time else 1.0


def _scale_totals(bd: Breakdown, steps: int) -> None:
    bd.compute_s *= steps
    bd.hidden_s *= steps
    bd.host_bound_s *= steps
    for k in list(bd.exposed_by_link_s):
        bd.exposed_by_link_s[k] *= steps
        bd.exposed_alltoall_by_link_s[k] *= steps
    for k in list(bd.exposed_by_family_s):
        bd.exposed_by_family_s[k] *= steps
