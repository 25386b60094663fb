"""Head divisibility in every answer: heads per rank of each plan, the Ulysses degrees the head counts rule out or
force to pad (with the padding's cost), and the head wall past which the sequence axis needs another form."""

from __future__ import annotations

import math

from ditpar.plan.cost.work import kv_heads_after_split


def per_rank(model, plan) -> tuple[int, int]:
    """(query heads, K/V heads) one rank attends under the plan: TP then Ulysses split them; a query count that does
    not divide is padded up (the rank with the most), a K/V count replicated to whole heads (work.py's pricing)."""
    q = math.ceil(model.heads / plan.tp / plan.ulysses) if model.heads >= plan.tp else 1
    kv = kv_heads_after_split(model.kv_heads, plan.tp, plan.ulysses)
    return int(q), int(min(kv, q) if model.kv_heads == model.heads else kv)   # MHA: K/V padded with the queries


def degrees(model, results) -> dict:
    """Ulysses degrees among the enumerated plans (TP 1) that the head counts rule out or force to pad, and the wall:
    the largest Ulysses degree a feasible plan runs without padding query heads (K/V may be replicated). A degree is padded where a framework runs it (a
    feasible plan), ruled out where none does, impossible past the head count."""
    h, kv = int(model.heads), int(model.kv_heads)
    by_u: dict[int, list] = {}
    for r in results:
        if r.plan.ulysses > 1 and r.plan.tp == 1:
            by_u.setdefault(r.plan.ulysses, []).append(r)
    impossible, ruled_out, padded = [], [], []
    for u in sorted(by_u):
        runs = any(r.feasible for r in by_u[u])
        if u > h:
            impossible.append({"ulysses": u, "why": f"{h} heads < U{u}"})
        elif h % u or kv % u:
            to = math.ceil(h / u) * u
            kv_to = to if kv == h else (math.lcm(kv, u) if kv % u else kv)
            what = []
            if h % u:
                what.append(f"{h} heads padded to {to}" + (" (K/V with them)" if kv == h else ""))
            if kv % u and kv != h:
                what.append(f"{kv} K/V heads replicated to {kv_to}")
            if runs:
                padded.append({"ulysses": u, "heads_to": to, "kv_heads_to": kv_to,
                               "attention_cost": to / h - 1.0, "what": ", ".join(what)})
            else:
                short = f"{h} heads" if h % u else f"{kv} K/V heads"
                ruled_out.append({"ulysses": u, "why": f"{short} do not divide by U{u}; no framework named "
                                                         + ("pads them" if h % u else "replicates K/V heads")})
    clean = [u for u in by_u if h % u == 0 and any(r.feasible for r in by_u[u])]
    wall = max(clean, default=1)
    widest = max((r.plan.sp for r in results if r.feasible), default=1)
    return {"heads": h, "kv_heads": kv, "impossible": impossible, "ruled_out": ruled_out, "padded": padded,
            "ulysses_wall": wall, "widest_sequence_degree": widest}


def line(model, results) -> str:
    """One line: the degrees the head counts rule out or pad, and the wall rule (Ulysses up to the wall, then
    Attention2D, ring or AllGather-KV for the rest of the sequence degree); '' when every degree divides."""
    d = degrees(model, results)
    parts = [f"U{x['ulysses']} impossible ({x['why']})" for x in d["impossible"]]
    parts += [f"U{x['ulysses']} ruled out ({x['why']})" for x in d["ruled_out"]]
    parts += [f"U{x['ulysses']} pads: {x['what']} ("
              + (f"+{x['attention_cost']:.0%} attention work" if x["attention_cost"] > 0 else
                 f"+{x['kv_heads_to'] / d['kv_heads'] - 1:.0%} K/V bytes in its all-to-all") + ", priced)"
              for x in d["padded"]]
    wall = d["ulysses_wall"]
    tail = ""
    if d["widest_sequence_degree"] > wall:
        tail = (f"; head wall: Ulysses runs up to U{wall} without padding; past it the sequence degree goes on as "
                f"Attention2D (a rows x columns mesh, no head limit), ring or AllGather-KV, composed with U{wall}")
    if not parts and not tail:
        return ""
    head = f"heads: {d['heads']} query / {d['kv_heads']} K/V"
    return head + (": " + "; ".join(parts) if parts else "") + tail
