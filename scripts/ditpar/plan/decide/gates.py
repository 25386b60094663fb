"""The seven gates of plan selection as executable checks: each returns a verdict and a reason.

G1 form availability, G2 memory fit, G3 communication lower bound per link class, G4 compute
plumbing of composite forms, G5 masking ceiling c/f, G6 the same-window A/B plan, G7 projection
(overtaking thresholds between the top two plans). A veto in G1 or G2 makes a plan infeasible.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from ditpar.plan.cost.plans import Plan, layout
from ditpar.plan.cost.shape import Shape
from ditpar.plan.cost.timing import Breakdown, Tunables, comm_time_s, predict
from ditpar.plan.cost.work import (
    BYTES_PER_ELEMENT,
    OPS_ATTN2D,
    OPS_RING_HOP,
    OPS_ULYSSES,
    block_work,
    kv_gather_ops,
    parse_kind,
)

MEMORY_HEADROOM = 0.9  # usable share of device memory (allocator, workspace, fragmentation)
# Between the headroom and 95 % of the card a plan "fits, tight" (G2 verdict 'tight'): feasible and ranked, with the
# GB left said. The estimate is of the model's tensors, and runs published at 91 % of a card exist (a 64B-parameter
# DiT, 128 GB of bf16 weights, on one 141 GB H200); the last 5 % stay for the runtime's context and workspace
# (about 1 GB on a 24 GB card), so a peak above 95 % is not run as it is.
TIGHT_LIMIT = 0.95


# Ring attention computes dense attention block by block and merges the blocks by their log-sum-exp: ModelTC/LightX2V@
# f8aee98b5462:lightx2v/common/ops/attn/ring_attn.py L174-196 refuses an attention backend without apply_with_lse (only
# flash_attn.py and sage_attn.py define it; radial_attn, svg_attn, svg2_attn, nbhd_attn, sparge_attn, draft_attn and
# the dynamic / general sparse backends do not) and a window_size; Ulysses gives each rank whole sequences of its
# heads (ulysses_attn.py calls the backend's apply), so a sparse kernel runs there.
RING_SPARSE = ("ring attention runs dense attention block by block (LightX2V's RingAttn refuses a backend without "
               "per-block LSE, i.e. its sparse ones, and a sliding window: ring_attn.py L174-196); the request's sparse "
               "attention runs under Ulysses, where each rank attends whole sequences")


@dataclass
class Gate:
    gate: str       # G1 .. G7
    name: str
    verdict: str    # pass | veto | warn | info
    reason: str

    def as_dict(self) -> dict[str, str]:
        return {"gate": self.gate, "name": self.name, "verdict": self.verdict, "reason": self.reason}


def _heads_ok(n: int, d: int) -> bool:
    return d <= n and n % d == 0


def availability(model, hw, shape: Shape, plan: Plan, frameworks=None) -> Gate:
    """G1: what no framework can change (layers, patches, CFG, devices), then, with framework profiles,
    which named framework runs the plan (divisibility of heads, KV heads and sequence is theirs to
    handle: pad, uneven split, replicate or reject); without profiles, plain divisibility."""
    why = []
    head_split = plan.ulysses * plan.tp
    seq = shape.tokens
    spatial = any(parse_kind(k)[1] == "spatial" for k in model.blocks)
    if frameworks is None:
        if not _heads_ok(model.heads, head_split):
            why.append(f"heads {model.heads} not divisible by ulysses x tp = {head_split}")
        if model.kv_heads % head_split and head_split % model.kv_heads:   # e.g. 12 KV heads on U8: neither
            why.append(f"kv_heads {model.kv_heads} neither divides nor is a multiple of ulysses x tp = {head_split}")
        if plan.sp > 1 and seq % plan.sp:
            why.append(f"sequence {seq} tokens not divisible by ulysses x ring x kv_allgather = {plan.sp}")
        if spatial and plan.sp > 1 and shape.tokens_per_frame % plan.sp:
            why.append(f"tokens per frame {shape.tokens_per_frame} not divisible by sp = {plan.sp}")
    elif head_split > model.heads:
        why.append(f"ulysses x tp = {head_split} > {model.heads} heads")
    layers = sum(int(v) for v in model.blocks.values())
    if plan.pipefusion > layers:
        why.append(f"pipefusion {plan.pipefusion} > {layers} layers")
    if plan.pipefusion > 1:
        rows = shape.tokens_per_frame  # PipeFusion cuts patches along the token sequence
        if rows // max(plan.num_patches, 1) < 1:
            why.append(f"{plan.num_patches} patches > {rows} tokens")
        if frameworks is None and str(getattr(hw, "vendor", "")).lower() in ("ascend", "huawei"):
            why.append("PipeFusion is not available on Ascend NPUs (xDiT parallel_state.py: "
                       "'pipefusion is not ready for npu yet'; MindIE-SD has none)")
    if plan.cfg > 1 and not shape.cfg:
        why.append("cfg=2 needs classifier-free guidance (the request runs without it)")
    if plan.ring > 1 and getattr(shape, "sparse_attention", False):
        why.append(RING_SPARSE)
    if plan.ring > 1 and plan.kv_allgather > 1:
        why.append("ring and AllGather-KV are alternatives for one slot")
    elif plan.attn2d > 1 and plan.ring * plan.kv_allgather > 1:
        why.append("Attention2D, ring and AllGather-KV are alternatives for one slot")
    if plan.devices > hw.devices_per_node * hw.nodes:
        why.append(f"{plan.devices} devices > {hw.devices_per_node * hw.nodes} on {hw.name}")
    if why:
        return Gate("G1", "form availability", "veto", "; ".join(why))
    notes = []
    if frameworks is not None:
        from ditpar.plan.inputs.frameworks import runs_each

        lacks = dict(zip([fw.name for fw in frameworks], runs_each(frameworks, model, hw, shape, plan), strict=True))
        ok = [n for n, w in lacks.items() if w is None]
        if not ok:
            vendor = str(getattr(hw, "vendor", "")).lower()
            other = [n for n, w in lacks.items() if w == f"no {vendor} support"]
            parts = [f"{n}: {w}" for n, w in lacks.items() if n not in other]
            if other:
                parts.append(f"{', '.join(other)}: no {vendor} support")
            return Gate("G1", "form availability", "veto", "no named framework runs it: " + " | ".join(parts))
        notes.append(f"runs on {', '.join(ok)}")
        no_cfg = sorted(n for n, w in lacks.items() if w is not None and plan.cfg > 1 and "cfg" in w)
        if no_cfg:
            notes.append(f"no CFG parallel for {model.name} on {', '.join(no_cfg)} (it runs both CFG branches on "
                         "the same ranks there: the plans without cfg2)")
    elif plan.kv_allgather > 1:
        notes.append("AllGather-KV exists in LightX2V (seq_p_attn_type kv_all_gather) and SGLang, not xDiT")
    if plan.tp > 1 and frameworks is None:
        notes.append("TP: MindIE-SD, SGLang, vLLM-Omni and a few xDiT models; not with PipeFusion")
    if plan.dp > 1:
        notes.append(f"dp={plan.dp} serves other requests; one request gains nothing")
    return Gate("G1", "form availability", "pass", "; ".join(notes) or "degrees divide heads, sequence and layers")


def _gb(value: float, other: float) -> str:
    """GB with as many decimals as it takes to tell value from other (57.6 vs 57.6 is no comparison)."""
    for digits in (1, 2, 3):
        if round(value, digits) != round(other, digits):
            return f"{value:.{digits}f}"
    return f"{value:.3f}"


def _headroom_hint(parts: dict[str, float], over_GB: float) -> str:
    """What frees the GB a tight plan lacks for the full headroom (the resident text encoder first)."""
    te = parts.get("text_encoder_GB", 0.0)
    if te >= over_GB > 0:
        return f"; --offload-text-encoder frees {te:.1f} GB (it runs once, before denoising)"
    return ""


def memory_fit(model, hw, shape: Shape, plan: Plan, bd: Breakdown, can_shard: bool = True) -> Gate:
    """G2: peak memory per rank within the device; when it does not fit, name the lossless steps, in
    order, that make it fit: text-encoder offload, VAE tiling, layer-wise weight sharding. Weight
    sharding is applied by the ranking (warn) when it alone suffices; the flags are the user's to set."""
    from ditpar.plan.cost.memory import vae_decode_GB

    cap = hw.memory_GB * MEMORY_HEADROOM
    p = bd.memory_parts_GB
    parts = ", ".join(f"{k.removesuffix('_GB')} {v:.1f}" for k, v in p.items())
    experts = int(getattr(model, "experts", 1) or 1)
    if bd.memory_GB <= cap:
        return Gate("G2", "memory fit", "pass", f"{_gb(bd.memory_GB, cap)} GB per rank ({parts}) <= "
                    f"{_gb(cap, bd.memory_GB)} GB ({MEMORY_HEADROOM:.0%} of {hw.memory_GB:g} GB)")
    if bd.memory_GB <= hw.memory_GB * TIGHT_LIMIT:
        return Gate("G2", "memory fit", "tight", f"fits, tight: {_gb(bd.memory_GB, cap)} GB per rank ({parts}) is above "
                    f"{_gb(cap, bd.memory_GB)} GB ({MEMORY_HEADROOM:.0%} of {hw.memory_GB:g} GB) but within {TIGHT_LIMIT:.0%} of it: "
                    f"{hw.memory_GB - bd.memory_GB:.1f} GB left for the allocator, workspace and fragmentation; it runs "
                    f"if nothing else holds memory on the card (watch the first request's peak: torch.cuda."
                    f"max_memory_reserved / npu-smi){_headroom_hint(p, bd.memory_GB - cap)}")
    weights = p.get("weights_GB", 0.0)
    te, buffers, vae = p.get("text_encoder_GB", 0.0), p.get("comm_buffers_GB", 0.0), p.get("vae_decode_GB", 0.0)
    phase = p.get("activations_GB", 0.0) + p.get("kv_buffers_GB", 0.0)
    ranks = max(1, plan.devices // (plan.tp * plan.pipefusion))
    tiled = vae_decode_GB(model, shape, True) if vae else 0.0
    names = {"te": "--offload-text-encoder (it runs once before denoising)",
             "vae": "--vae-tiling (tiled decode; same result up to tile-seam blending)",
             "shard": f"layer-wise weight sharding over the {plan.devices} ranks (all-gather each layer's "
                      f"weights before use)"}
    usable = [k for k, ok in (("te", te > 0), ("vae", tiled < vae and vae > phase), ("shard", ranks > 1)) if ok]

    def peak(steps) -> float:
        w = weights / ranks if "shard" in steps else weights
        return w + (0.0 if "te" in steps else te) + buffers + max(phase, tiled if "vae" in steps else vae)
    subsets = [tuple(k for i, k in enumerate(usable) if mask >> i & 1) for mask in range(1, 1 << len(usable))]
    fitting = sorted((sub for sub in subsets if peak(sub) <= cap), key=lambda sub: (len(sub), "shard" in sub))
    extra = f" (x{experts} experts resident)" if experts > 1 else ""
    head = (f"{_gb(bd.memory_GB, cap)} GB > {_gb(cap, bd.memory_GB)} GB ({MEMORY_HEADROOM:.0%} of "
            f"{hw.memory_GB:g} GB){extra} ({parts})")
    if not fitting:
        return Gate("G2", "memory fit", "veto", f"{head}; even {' + '.join(names[k] for k in usable)} needs "
                    f"{peak(tuple(usable)):.1f} GB" if usable else head)
    if not can_shard:   # no framework running the plan shards weights: a flag-only unlock first, if one fits
        fitting.sort(key=lambda sub: "shard" in sub)
    best = fitting[0]
    unlock = f"lossless unlock: {' + '.join(names[k] for k in best)} needs {peak(best):.1f} GB"
    if ("shard",) in fitting and can_shard:   # applied by the ranking, its all-gather charged (one memory story: issue 42)
        alt = "" if best == ("shard",) else (f"; without sharding, {' + '.join(names[k] for k in best)} needs "
                                             f"{peak(best):.1f} GB (set it and re-run)")
        return Gate("G2", "memory fit", "warn", f"{head}; lossless unlock: {names['shard']} needs "
                    f"{peak(('shard',)):.1f} GB{alt}; re-run G3 with the weight all-gathers")
    return Gate("G2", "memory fit", "veto", f"{head}; {unlock}")


def comm_lower_bound(model, hw, shape: Shape, plan: Plan, bd: Breakdown, tun: Tunables) -> Gate:
    """G3: per-rank per-layer bytes by link class; for composite forms, compare with pure Ulysses."""
    per = bd.bytes_by_link_per_layer
    cols = ", ".join(f"{k} {v / 1e6:.2f} MB" for k, v in per.items() if v > 0) or "no per-layer collectives"
    reason = f"per rank per layer: {cols}"
    if plan.kv_allgather > 1 or plan.ring > 1 or plan.attn2d > 1:
        pure = dataclasses.replace(plan, ulysses=plan.sp, ring=1, kv_allgather=1, attn2d=1)
        if _heads_ok(model.heads, pure.ulysses * pure.tp):
            pb = predict(model, hw, shape, pure, tun)
            cross_k = "inter_domain" if per.get("inter_domain", 0) or pb.bytes_by_link_per_layer.get(
                "inter_domain", 0) else "inter_node"
            mine, theirs = per.get(cross_k, 0.0), pb.bytes_by_link_per_layer.get(cross_k, 0.0)
            ratio = model.kv_heads / model.heads
            gqa = f"GQA {model.heads}q/{model.kv_heads}kv" if ratio < 1 else "MHA (kv_heads = heads)"
            if theirs > 0 or mine > 0:
                saving = 1 - mine / theirs if theirs else -math.inf
                verdict = "saves" if saving > 0.01 else ("costs" if saving < -0.01 else "saves no")
                reason += (f"; vs pure Ulysses {pure.name}: {cross_k} {mine / 1e6:.2f} vs {theirs / 1e6:.2f} MB "
                           f"({verdict} cross-domain bytes"
                           + (f", {abs(saving):.0%}" if verdict != "saves no" and math.isfinite(saving) else "")
                           + f"; {gqa})")
    return Gate("G3", "communication lower bound", "info", reason)


def plumbing(model, hw, shape: Shape, plan: Plan, tun: Tunables) -> Gate:
    """G4: compute a composite form adds that masking cannot hide (extra ops, K/V layout copies)."""
    if plan.sp <= 1 or (plan.ulysses == plan.sp):
        return Gate("G4", "compute plumbing", "pass", "no composite sequence form")
    ops = 0.0
    layers = sum(int(v) for v in model.blocks.values()) / plan.pipefusion
    if plan.ulysses > 1:
        ops += OPS_ULYSSES
    ops += OPS_RING_HOP * (plan.ring - 1) + kv_gather_ops(plan.kv_allgather, tun.kv_gather_one_call) \
        + (OPS_ATTN2D if plan.attn2d > 1 else 0)
    host_ms = ops * tun.launch_us * layers * 1e-3
    hbm = float(getattr(hw, "hbm_bandwidth_GBps", 0) or 0)
    dkv = model.kv_heads * model.head_dim
    copies = 2 * 2 * (shape.tokens + shape.text_joint) / max(plan.ring * plan.kv_allgather * plan.attn2d, 1) * dkv \
        / (plan.ulysses * plan.tp) * BYTES_PER_ELEMENT * (shape.batch / plan.cfg if shape.cfg else 1)
    copy_ms = copies * layers / (hbm * 1e9) * 1e3 if hbm else float("nan")
    return Gate("G4", "compute plumbing", "info",
                f"composite {plan.name}: ~{ops:.0f} extra eager ops/layer = {host_ms:.2f} ms/step host time, "
                f"K/V re-layout {copies * layers / 1e6:.0f} MB/step"
                + (f" = {copy_ms:.2f} ms at HBM {hbm:.0f} GB/s" if hbm else "") + "; measure it in G6")


def masking_gate(model, hw, shape: Shape, plan: Plan, tun: Tunables, chunks: int = 4) -> Gate:
    """G5: masking ceiling c/f of the family that chunked masking would hide (Ulysses all-to-all
    behind attention; AllGather-KV behind attention), from ditpar.masking."""
    from ditpar.masking.bound import ceiling, make_layer, regime

    blocks = block_work(model, hw, shape, plan, layout(plan, tun.order))
    rate = hw.peak_tflops_bf16 * 1e12 * hw.mfu / tun.compute_scale
    comm = att = 0.0
    fam = None
    for b in blocks:
        # sequence collectives only: a TP collective (e.g. the AdaLN all-gather) does not hide behind attention
        maskable = [c for c in b.comms if c.family in ("alltoall", "allgather") and c.dim != "tp"]
        for c in maskable:
            comm += comm_time_s(hw, c) * c.calls * b.count
            fam = c.name
        if maskable:
            att += b.attn_flops / rate * b.count   # once per block, however many collectives hide behind it
    if not fam or comm <= 0 or att <= 0:
        return Gate("G5", "masking ceiling", "pass", "no all-to-all / KV gather to mask")
    layer = make_layer(comm * 1e6, att * 1e6, chunks)
    cf = comm / att
    ceil = ceiling(layer)
    return Gate("G5", "masking ceiling", "info",
                f"{fam}: c/f = {cf:.2f} ({regime(layer)}); with {chunks} chunks at most {ceil:.0%} of it "
                f"can hide (ideal {1 - 1 / chunks:.0%}); mask_bound.py calc gives the same bound")


def ab_gate(rank: int, plan: Plan, others: list[Plan]) -> Gate:
    """G6: which same-window A/B pair to run for this plan, with how many repeats."""
    if rank > 2 or not others:
        return Gate("G6", "A/B measurement", "info", "not in the top two: no A/B required")
    other = others[0]
    return Gate("G6", "A/B measurement", "warn",
                f"run {plan.name} vs {other.name} in one window on one card group: ABAB order, >= 3 repeats "
                f"each after 1 warm-up, same steps and shape; decide on medians and only when they differ "
                f"by more than the spread (fewstep.py analyze reads the matrix)")


def projection(model, hw, shape: Shape, a: Plan, b: Plan, tun: Tunables) -> Gate:
    """G7: thresholds at which the runner-up b overtakes the leader a (bandwidth, KV heads)."""
    out = []
    base_a = predict(model, hw, shape, a, tun).latency_s
    base_b = predict(model, hw, shape, b, tun).latency_s
    if base_b * 1.001 < base_a:   # the pair's shared tunables can reverse the ranking's order
        return Gate("G7", "projection", "info", f"{b.name} is predicted {1 - base_b / base_a:.1%} faster than "
                    f"{a.name} here, though ranked second: only the G6 measurement can order them")
    if base_b <= base_a * 1.001:
        return Gate("G7", "projection", "info", f"{a.name} and {b.name} are predicted equal (within 0.1%): "
                    f"only the G6 measurement can order them")
    for key in ("inter_domain", "intra_domain", "inter_node"):
        if key not in hw.links:
            continue
        x = _threshold(lambda s, k=key: _gap(model, _scale_link(hw, k, s), shape, a, b, tun), 1 / 64, 64)
        if x is not None:
            bw = hw.links[key].bandwidth_GBps * x
            direction = "exceeds" if _gap(model, _scale_link(hw, key, x * 1.5), shape, a, b, tun) < 0 else \
                "drops below"
            move = f"x{x:.3g}" if x >= 1 else f"/{1 / x:.3g}"
            out.append(f"{b.name} beats {a.name} once {key} bandwidth {direction} {bw:.3g} GB/s "
                       f"(now {hw.links[key].bandwidth_GBps:.3g}) with every pattern of that link moved {move} "
                       "together (ring and all-to-all figures alike)")
    for h in sorted({d for d in range(1, model.heads) if model.heads % d == 0}, reverse=True):
        if h >= model.kv_heads:
            continue
        m2 = dataclasses.replace(model, kv_heads=h)
        try:
            if predict(m2, hw, shape, b, tun).latency_s < predict(m2, hw, shape, a, tun).latency_s:
                out.append(f"{b.name} beats {a.name} once KV heads drop to {h} (now {model.kv_heads})")
                break
        except Exception:  # noqa: BLE001 - a KV-head count the plan cannot use is just skipped
            continue
    lead = base_b / base_a - 1
    if not out:
        out.append("no link bandwidth scaled for every pattern at once (1/64x..64x) nor KV-head count flips "
                   "the order")
    return Gate("G7", "projection", "info", f"{a.name} leads {b.name} by {lead:.1%}; " + "; ".join(out)
                + " (projection, not measurement)")


def _gap(model, hw, shape, a, b, tun) -> float:
    return predict(model, hw, shape, b, tun).latency_s - predict(model, hw, shape, a, tun).latency_s


def _threshold(f, lo: float, hi: float) -> float | None:
    """Scale s in [lo, hi] (log bisection) where f changes sign, or None."""
    flo, fhi = f(lo), f(hi)
    f1 = f(1.0)
    if f1 == 0:
        return 1.0
    # search on the side where the sign differs from s = 1
    if (flo > 0) != (f1 > 0):
        lo_s, hi_s = lo, 1.0
    elif (fhi > 0) != (f1 > 0):
        lo_s, hi_s = 1.0, hi
    else:
        return None
    flo_s = f(lo_s)
    for _ in range(40):
        mid = math.sqrt(lo_s * hi_s)
        fm = f(mid)
        if (fm > 0) == (flo_s > 0):
            lo_s, flo_s = mid, fm
        else:
            hi_s = mid
        if hi_s / lo_s < 1.001:
            break
    return math.sqrt(lo_s * hi_s)


def _scale_link(hw, key: str, s: float):
    link = hw.links[key]
    changes = {"bandwidth_GBps": link.bandwidth_GBps * s}
    if getattr(link, "per_peer_GBps", 0):
        changes["per_peer_GBps"] = link.per_peer_GBps * s
    changes["ring_GBps"] = link.ring_GBps * s
    changes["alltoall_GBps"] = tuple((k, v * s) for k, v in link.alltoall_GBps)
    links = dict(hw.links)
    links[key] = dataclasses.replace(link, **changes)
    return dataclasses.replace(hw, links=links)
