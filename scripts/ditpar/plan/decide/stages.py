"""Per-plan serial stages: the VAE decode split as the plan's framework splits it, and which stage is the wall.

report.py calls these with one line each; the pricing is ditpar.plan.cost.end_to_end / vae_parallel.
"""

from __future__ import annotations

#: how each framework names the VAE split in its launch line (the recipe's `vae` argument says the same)
SPLIT_FLAG = {"vLLM-Omni": "vae_patch_parallel_size", "xDiT": "--use_parallel_vae (DistVAE)",
              "LightX2V": "parallel_vae", "MindIE-SD": "--vae_parallel", "cache-dit": "VAE-P (parallelism_config)",
              "ParaAttention": "para_attn.parallel_vae", "TensorRT-LLM-VisualGen": "parallel_vae_size"}


def plan_stages(stages, r):
    """The serial stages of one ranked plan: the decode split over r.vae_devices cards (1 = on one card)."""
    return stages.split(getattr(r, "vae_devices", 1) or 1)


def wall(stages, r) -> dict | None:
    """Seconds of each stage of plan `r` end to end and the largest ('the wall'); None when nothing is priced."""
    if stages is None or r is None:
        return None
    own = plan_stages(stages, r)
    parts = {"dit_loop_s": r.breakdown.latency_s, "vae_decode_s": own.vae_decode_s, "text_encode_s": own.text_encode_s}
    priced = {k: v for k, v in parts.items() if v is not None}
    name = max(priced, key=priced.get)
    total = sum(priced.values())
    return {"plan": r.plan.name, **parts, "vae_devices": own.vae_devices, "vae_decode_one_card_s": own.vae_serial_s,
            "wall": name.removesuffix("_s"), "wall_share": priced[name] / total if total > 0 else None,
            "end_to_end_s": total}


def wall_line(stages, results) -> str:
    """One line: the stage that is the wall of the leading plan end to end, and what splitting the decode gives."""
    lead = next((r for r in results if r.feasible), None)
    w = wall(stages, lead)
    if w is None or w["vae_decode_s"] is None:
        return ""
    names = {"dit_loop": "the DiT loop", "vae_decode": "the VAE decode", "text_encode": "the text encoder"}
    n = w["vae_devices"]
    how = SPLIT_FLAG.get(lead.framework, "its VAE split")
    vae = (f"VAE decode {w['vae_decode_s']:.2f} s split over {n} cards on {lead.framework} ({how}; "
           f"{w['vae_decode_one_card_s']:.2f} s on one card)" if n > 1 else
           f"VAE decode {w['vae_decode_s']:.2f} s on one card")
    text = (f"stage wall of #{lead.rank} {lead.plan.name}: DiT loop {w['dit_loop_s']:.2f} s, {vae}; "
            f"{names[w['wall']]} is the wall ({w['wall_share']:.0%} of {w['end_to_end_s']:.2f} s end to end)")
    if n == 1 and lead.plan.devices > 1 and w["wall"] == "vae_decode":
        from ditpar.plan.cost.vae_parallel import split_decode_s

        split = split_decode_s(w["vae_decode_s"], lead.plan.devices // max(1, lead.plan.dp))
        text += (f"; a framework that splits the decode over the cards (vLLM-Omni vae_patch_parallel_size, xDiT "
                 f"DistVAE) would take it to about {split:.2f} s")
    return text


#: an end-to-end lead smaller than this share is inside the model's error and not named
E2E_MARGIN = 0.05


def end_to_end_lead(stages, results) -> dict | None:
    """The plan fastest end to end (DiT loop + serial stages as its framework splits them) when it is not the DiT-loop
    leader and beats it by more than E2E_MARGIN; only plans that use every card for this request (dp 1) and, when the
    leader is exact, exact plans compete. None otherwise."""
    lead = next((r for r in results if r.feasible), None)
    if stages is None or lead is None or stages.vae_decode_s is None:
        return None
    rivals = [r for r in results if r.feasible and r.plan.dp == 1 and (r.exact or not lead.exact)]
    best = min(rivals, key=lambda r: wall(stages, r)["end_to_end_s"], default=None)
    if best is None or best is lead:
        return None
    mine, theirs = wall(stages, lead), wall(stages, best)
    if theirs["end_to_end_s"] >= (1 - E2E_MARGIN) * mine["end_to_end_s"]:
        return None
    return {"plan": best.plan.name, "rank": best.rank, "framework": best.framework,
            "end_to_end_s": theirs["end_to_end_s"], "lead_end_to_end_s": mine["end_to_end_s"],
            "vae_decode_s": theirs["vae_decode_s"], "vae_devices": theirs["vae_devices"],
            "lead_vae_decode_s": mine["vae_decode_s"], "lead_vae_devices": mine["vae_devices"]}


def end_to_end_lead_line(stages, results) -> str:
    """One line when another plan is faster end to end than the DiT-loop leader: which, by how much, and why."""
    e = end_to_end_lead(stages, results)
    if e is None:
        return ""
    lead = next(r for r in results if r.feasible)
    why = (f"its framework splits the VAE decode over {e['vae_devices']} cards ({e['vae_decode_s']:.2f} s against "
           f"{e['lead_vae_decode_s']:.2f} s" + (" on one card)" if e["lead_vae_devices"] == 1 else ")")
           if e["vae_devices"] != e["lead_vae_devices"] else "the serial stages weigh differently")
    return (f"end to end, #{e['rank']} {e['plan']} on {e['framework']} is faster: {e['end_to_end_s']:.2f} s a request "
            f"against {e['lead_end_to_end_s']:.2f} s for #{lead.rank} {lead.plan.name} "
            f"({1 - e['end_to_end_s'] / e['lead_end_to_end_s']:.0%} less); {why}. The table ranks the DiT loop; "
            "take this plan if the whole request is the latency you serve")
