"""Per-plan serial stages: the VAE decode split as the plan's framework splits it, and which stage is the wall.

report.py calls these with one line each; the pricing is ditpar.plan.cost.end_to_end / vae_parallel.
"""

from __future__ import annotations

#: how each framework names the VAE split in its launch line (the recipe's `vae` argument says the same)
SPLIT_FLAG = {"vLLM-Omni": "vae_patch_parallel_size", "xDiT": "--use_parallel_vae (DistVAE)",
              "LightX2V": "parallel_vae", "MindIE-SD": "--vae_parallel", "cache-dit": "VAE-P (parallelism_config)",
              "ParaAttention": "para_attn.parallel_vae", "TensorRT-LLM VisualGen": "parallel_vae_size"}


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
