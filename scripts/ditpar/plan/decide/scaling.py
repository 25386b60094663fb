"""Where widening a plan stops paying: the work each rank holds, and the degree beyond which doubling the leader's
widest axis gains less than STOP_GAIN (the model's own prediction, small-work costs included)."""

from __future__ import annotations

import dataclasses

from ditpar.plan.cost.timing import predict
from ditpar.plan.decide.throughput import rank_work, rank_work_phrase

AXES = ("ulysses", "ring", "kv_allgather", "tp")
STOP_GAIN = 1.10   # a doubling of the cards that makes a request less than 10 % faster has stopped paying
SHORT = {"ulysses": "U", "ring": "R", "kv_allgather": "AG", "tp": "TP"}


def scaling_stop(model, hw, shape, plan, tun) -> dict | None:
    """Along the plan's widest sequence/TP axis (other degrees fixed, dp = 1): latency at degree 1, 2, 4 ... up to the
    plan's, and the first doubling that gains less than STOP_GAIN, with the work per rank where it happens.
    None when the plan has no such axis of degree >= 2."""
    base = dataclasses.replace(plan, dp=1)
    axis = max(AXES, key=lambda a: (base.degree(a), -AXES.index(a)))
    top = base.degree(axis)
    if top < 2:
        return None
    degrees = [d for d in (1 << i for i in range(top.bit_length())) if top % d == 0]
    steps = []
    prev = None
    for d in degrees:
        p = dataclasses.replace(base, **{axis: d})
        lat = predict(model, hw, shape, p, tun).latency_s
        if prev is not None:
            steps.append({"from": prev[0].name, "to": p.name, "gain": prev[1] / lat if lat > 0 else float("inf"),
                          "work_from": rank_work(model, shape, prev[0])["token_equivalents_per_rank"],
                          "work_to": rank_work(model, shape, p)["token_equivalents_per_rank"]})
        prev = (p, lat)
    stop = next((s for s in steps if s["gain"] < STOP_GAIN), None)
    return {"axis": axis, "steps": steps, "stop": stop, "stop_gain": STOP_GAIN,
            "stop_token_equivalents_per_rank": stop["work_from"] if stop else None}


def record(model, hw, shape, lead, tun) -> dict | None:
    """--json's `work_per_rank` object for the latency-best plan (None without one)."""
    if lead is None:
        return None
    out = rank_work(model, shape, lead.plan)
    out["scaling"] = scaling_stop(model, hw, shape, lead.plan, lead.tunables or tun)
    s = out["scaling"]
    out["below_scaling_stop"] = bool(s and s["stop"] and out["token_equivalents_per_rank"] < s["stop"]["work_from"])
    return out


def line(rec: dict | None, shape) -> str:
    """One line: the work each rank holds under the latency-best plan, and where the model says widening stops."""
    if not rec:
        return ""
    text = f"work per rank under {rec['plan']} (latency-best): {rank_work_phrase(rec, shape)}"
    s = rec["scaling"]
    if s is None:
        return text + " (no sequence or TP split)"
    stop = s["stop"]
    if stop is None:
        gains = ", ".join(f"{x['to']} {x['gain']:.2f}x" for x in s["steps"])
        return text + f"; every doubling along {SHORT[s['axis']]} still pays ({gains} over the half)"
    text += (f"; scaling stops at about {stop['work_from']:.0f} token-equivalents per rank (tokens / (sp x tp)): "
             f"{stop['from']} -> {stop['to']} gains only {stop['gain'] - 1:.0%}")
    if rec["below_scaling_stop"]:
        text += (f". {rec['plan']} holds {rec['token_equivalents_per_rank']:.0f}, below that: each rank holds too little "
                 "work for the extra cards to pay (fixed per-call and per-op costs dominate); serve replicas on "
                 "fewer cards (--objective throughput)")
    return text
