"""Work outside the DiT loop that grows with the cards of a replica: the serial stages (text encoder, VAE decode) that
every card of a replica runs or waits through, in card-seconds per request, and the per-step output all-gather of a
sequence-parallel plan, whose fixed cost grows with the sequence group. The first is in every request's end-to-end
latency (and the splits' requests per second); the second is named beside the latency, not priced into it."""

from __future__ import annotations

# set-up that is not per request: the first request after start-up can also pay the communicators' creation (the
# time of a framework's warm-up), so a measurement times it apart
INIT_NOTE = ("a request after start-up can also pay process-group and communicator set-up once: time a warm-up "
             "request apart")


def record(model, hw, shape, serving: dict, lead, stages, tun) -> dict:
    """--json's `outside_loop`: per split, the card-seconds each request spends outside the DiT loop; for the
    latency-best plan, its per-step sequence output all-gather (seconds per request, not in latency_s)."""
    serial = stages.total_s if stages is not None else 0.0
    rows = [{"split": f"{s['replicas']} x {s['plan']}", "cards_per_replica": s["cards_per_replica"],
             "serial_s": s["serial_s"], "card_seconds": s["serial_s"] * s["cards_per_replica"]}
            for s in serving["splits"]]
    gather = None
    if lead is not None and lead.plan.sp > 1:
        from ditpar.plan.cost import layout
        from ditpar.plan.cost.timing import comm_time_s
        from ditpar.plan.cost.work import sp_output_gather

        c = sp_output_gather(model, hw, shape, lead.plan, layout(lead.plan, tun.order))
        per_step = comm_time_s(hw, c) + (tun.sync_us + tun.call_us) * 1e-6
        gather = {"plan": lead.plan.name, "group_size": c.group_size, "latency_steps": c.alpha_steps,
                  "per_step_s": per_step, "per_request_s": per_step * shape.steps,
                  "share_of_latency": per_step * shape.steps / lead.latency_s if lead.latency_s > 0 else None}
    return {"serial_s": serial, "splits": rows, "sp_output_gather": gather, "init_note": INIT_NOTE}


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3g} ms" if seconds < 1 else f"{seconds:.3g} s"


def line(rec: dict) -> str:
    """'outside the DiT loop, per request: ...' or '' when nothing grows with the cards."""
    wide = [r for r in rec["splits"] if r["cards_per_replica"] > 1]
    parts = []
    if wide and rec["serial_s"] > 0:
        w = max(wide, key=lambda r: r["cards_per_replica"])
        parts.append(f"the serial stages (text encoder and VAE decode, {_ms(w['serial_s'])} as {w['split']} runs "
                     f"them) hold all {w['cards_per_replica']} of its cards ({w['card_seconds']:.3g} card-seconds a "
                     f"request, against {rec['serial_s']:.3g} on one card; replicas on fewer cards waste less of them)")
    g = rec["sp_output_gather"]
    if g:
        parts.append(f"{g['plan']} gathers its output over {g['group_size']} cards every step ({g['latency_steps']} "
                     f"latency steps: {_ms(g['per_request_s'])} a request, {g['share_of_latency'] * 100:.2g}% of its latency; "
                     "not in latency_s)")
    if not parts:
        return ""
    return "outside the DiT loop, growing with the cards: " + "; ".join(parts) + "; " + rec["init_note"]
