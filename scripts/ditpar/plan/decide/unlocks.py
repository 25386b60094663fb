"""Memory unlocks as plan options: a plan that does not fit one card as is gets the cheapest lossless way to fit,
applied and priced, instead of a veto: text-encoder offload, tiled VAE decode, layer-wise weight sharding
(FSDP/HSDP: per-block all-gathers prefetched behind compute) and layer-wise weight offload to host memory (PCIe).
"""

from __future__ import annotations

import copy
import itertools

from ditpar.plan.cost import offload

NAMES = {"te": "text-encoder offload", "vae": "tiled VAE decode", "shard": "layer-wise weight sharding (FSDP/HSDP)",
         "offload": "layer-wise weight offload to host memory"}


def offloaders(runners, plan) -> list:
    """Runners whose profile streams DiT weights from host memory for this plan (single-card-only ones on one card)."""
    out = []
    for fw in runners:
        mode = getattr(fw, "weight_offload", "none")
        if mode == "any" or (mode == "single_card" and plan.devices // max(1, plan.dp) == 1):
            out.append(fw)
    return out


def _options(model, hw, shape, plan, bd, runners, frameworks) -> dict[str, bool]:
    from ditpar.plan.cost.memory import vae_decode_GB

    p = bd.memory_parts_GB
    phase = p.get("activations_GB", 0.0) + p.get("kv_buffers_GB", 0.0)
    vae = p.get("vae_decode_GB", 0.0)
    shard_ok = plan.devices > 1 and (not frameworks or any(fw.weight_sharding for fw in runners))
    off_ok = offload.host_link_GBps(hw) is not None and (not frameworks or bool(offloaders(runners, plan)))
    return {"te": p.get("text_encoder_GB", 0.0) > 0, "vae": vae > phase and vae_decode_GB(model, shape, True) < vae,
            "shard": shard_ok, "offload": off_ok}


def add_weight_gather(hw, shape, plan, bd) -> None:
    """Charge layer-wise weight sharding (the G2 unlock): every step all-gathers the weights over all
    ranks, prefetched behind compute, so only the part longer than the step's compute is exposed."""
    from ditpar.plan.cost.work import effective_bw, ring_flows, ring_link

    ranks = list(range(plan.devices))
    key = ring_link(hw, ranks)
    bw = effective_bw(hw, key, len(ranks), ring_flows(hw, ranks)[key]) * 1e9
    weights = bd.memory_parts_GB.get("weights_GB", 0.0) * 1e9
    p = len(ranks)
    gather = weights * (p - 1) / p / bw + (p - 1) * hw.links[key].latency_us * 1e-6
    compute_step = bd.compute_s / shape.steps
    exposed = max(0.0, gather - compute_step) * shape.steps
    bd.latency_s += exposed
    bd.exposed_by_link_s[key] += exposed
    bd.exposed_by_family_s["weight all-gather (layer-wise sharding)"] = exposed
    bd.hidden_s += (gather * shape.steps - exposed)
    bd.memory_GB -= bd.memory_parts_GB["weights_GB"] * (1 - 1 / p)
    bd.memory_parts_GB["weights_GB"] /= p
    bd.notes.append("weights sharded layer-wise over all ranks (G2 unlock); their all-gather is included")


def _apply(model, hw, shape, plan, bd, steps: tuple[str, ...]):
    """A copy of `bd` with `steps` applied: memory parts and peak as they run, the added seconds charged."""
    from ditpar.plan.cost.memory import vae_decode_GB

    out = copy.deepcopy(bd)
    p = out.memory_parts_GB
    link = offload.host_link_GBps(hw)
    if "shard" in steps:
        add_weight_gather(hw, shape, plan, out)
    if "offload" in steps:
        layers = sum(int(v) for v in model.blocks.values()) // max(1, plan.pipefusion)
        exposed, resident = offload.layer_offload_s(p["weights_GB"], layers, out.compute_s / shape.steps,
                                                    shape.steps, link[0])
        out.latency_s += exposed
        out.exposed_by_family_s["weight offload (host to device)"] = exposed
        p["weights_GB"] = resident
        out.notes.append(f"weights streamed layer by layer from host memory over {link[1]}; the part of each step's "
                         f"transfer longer than its compute is charged ({exposed:.2f} s)")
    if "te" in steps:
        te_s = offload.text_encoder_offload_s(float(getattr(model, "text_encoder_params_b", 0.0) or 0.0),
                                              link[0]) if link else 0.0
        out.latency_s += te_s
        out.exposed_by_family_s["text-encoder offload (host to device)"] = te_s
        p["text_encoder_GB"] = 0.0
        out.notes.append(f"text encoder offloaded: moved onto the card once per request ({te_s:.2f} s charged)" if link
                         else f"text encoder offloaded: its move onto the card is NOT priced (no host-link figure for "
                              f"{getattr(hw, 'accelerator', '?')}; measure it or add the link to the hardware file)")
    if "vae" in steps:
        p["vae_decode_GB"] = vae_decode_GB(model, shape, True)
    phase = p.get("activations_GB", 0.0) + p.get("kv_buffers_GB", 0.0)
    out.memory_GB = (p["weights_GB"] + p.get("text_encoder_GB", 0.0) + p.get("comm_buffers_GB", 0.0)
                     + max(phase, p.get("vae_decode_GB", 0.0)))
    return out


def unlock(model, hw, shape, plan, bd, runners, frameworks):
    """(breakdown with the cheapest fitting unlock applied, the unlock steps, G2 gate) for a plan that does not fit
    the headroom as is, or None when no combination fits the card. Fits within the headroom first (verdict warn),
    else within TIGHT_LIMIT of the card (tight)."""
    from ditpar.plan.decide import gates

    if not bd.memory_parts_GB or "text_encoder_GB" not in bd.memory_parts_GB:
        return None
    avail = [k for k, ok in _options(model, hw, shape, plan, bd, runners, frameworks).items() if ok]
    tried = []
    for n in range(1, len(avail) + 1):
        for steps in itertools.combinations(avail, n):
            if "shard" in steps and "offload" in steps:   # the frameworks run one or the other (vLLM-Omni docs)
                continue
            tried.append((steps, _apply(model, hw, shape, plan, bd, steps)))
    cap = hw.memory_GB * gates.MEMORY_HEADROOM
    for limit, verdict in ((cap, "warn"), (hw.memory_GB * gates.TIGHT_LIMIT, "tight")):
        fits = [(s, b) for s, b in tried if b.memory_GB <= limit]
        if fits:
            # fastest first; at equal time an exact unlock before tiled decode (tile seams), then fewer steps
            steps, best = min(fits, key=lambda sb: (sb[1].latency_s, "vae" in sb[0], len(sb[0])))
            added = best.latency_s - bd.latency_s
            what = " + ".join(NAMES[k] for k in steps)
            reason = (f"does not fit as is ({gates._gb(bd.memory_GB, cap)} GB per rank > {gates._gb(cap, bd.memory_GB)} "
                      f"GB, {gates.MEMORY_HEADROOM:.0%} of {hw.memory_GB:g} GB); unlocked by {what}, applied and priced "
                      f"(+{added:.2f} s): {best.memory_GB:.1f} GB per rank"
                      + (f" (fits, tight: above the headroom, within {gates.TIGHT_LIMIT:.0%} of the card)" if verdict == "tight" else ""))
            return best, steps, gates.Gate("G2", "memory fit", verdict, reason)
    return None
