"""Serving answers: the split of the box into replicas x plan that serves the most requests per second, and how
much work each rank holds under a plan (the small-shard line)."""

from __future__ import annotations

import dataclasses
import math

OBJECTIVES = ("latency", "throughput")


def rank_work(model, shape, plan) -> dict:
    """What one rank of a replica holds: image tokens (and joint text) after the sequence split, the share of every
    weight matrix after TP, and the token-equivalents of work (tokens / (sp x tp)) the scaling line compares."""
    sp, tp = plan.sp, plan.tp
    tokens = shape.tokens / sp
    text = shape.text_joint / sp
    return {"plan": plan.name, "image_tokens_per_rank": tokens, "text_tokens_per_rank": text,
            "weight_share": 1.0 / tp, "sequence_split": sp, "tp": tp,
            "token_equivalents_per_rank": (shape.tokens + shape.text_joint) / (sp * tp)}


def rank_work_phrase(work: dict, shape) -> str:
    """'512 of 4096 image tokens (+64 joint text)' or 'all 4096 image tokens at 1/8 of every weight matrix'."""
    text = f" (+{work['text_tokens_per_rank']:.0f} joint text)" if work["text_tokens_per_rank"] else ""
    head = (f"{work['image_tokens_per_rank']:.0f} of {shape.tokens} image tokens{text}" if work["sequence_split"] > 1
            else f"all {shape.tokens} image tokens{text}")
    if work["tp"] > 1:
        head += f" at 1/{work['tp']} of every weight matrix"
    return head


def serial_as_run(model, stages, framework: str | None, plan) -> float:
    """Seconds of the serial stages as `framework` runs them under `plan` (its VAE decode split over the plan's cards
    where it does so for this model: ditpar.plan.inputs.frameworks.vae_degree); on one card without a model."""
    if stages is None:
        return 0.0
    if model is None:
        return stages.total_s
    from ditpar.plan.inputs import frameworks

    fw = next((f for f in frameworks.all_frameworks() if f.name == framework), None)
    return stages.split(frameworks.vae_degree(fw, model, plan)).total_s


def splits(results, stages, hw, devices: int, allow_approximate: bool = False, model=None) -> list[dict]:
    """Per replica count r (a divisor of the cards): the fastest feasible plan on devices / r cards, the latency a
    request sees on it (DiT loop + serial stages as its framework runs them, batch 1 per replica) and the requests
    per second of the r replicas together, per node of the box. Ordered by replicas."""
    nodes = max(1, math.ceil(devices / max(1, int(hw.devices_per_node))))
    best: dict[int, object] = {}
    for r in results:
        if not r.feasible or not (r.exact or allow_approximate) or not math.isfinite(r.latency_s):
            continue
        dp = r.plan.dp
        if dp not in best or r.latency_s < best[dp].latency_s:
            best[dp] = r
    out = []
    for dp in sorted(best):
        r = best[dp]
        inner = dataclasses.replace(r.plan, dp=1)
        serial = serial_as_run(model, stages, r.framework, inner)
        latency = r.latency_s + serial
        rps = dp / latency
        out.append({"replicas": dp, "cards_per_replica": inner.devices, "plan": inner.name, "name": r.plan.name,
                    "framework": r.framework, "dit_latency_s": r.latency_s, "serial_s": serial,
                    "request_latency_s": latency,
                    "requests_per_s": rps, "requests_per_s_per_node": rps / nodes, "nodes": nodes})
    return out


def _s(seconds: float) -> str:
    """Seconds for a sentence: '6.74 s', '504 s', '1930 s' (never 1.93e+03)."""
    return f"{seconds:.0f} s" if seconds >= 100 else f"{seconds:.3g} s"


def _per_node(s: dict) -> str:
    """' per node' on one node, ' (0.00415 per node)' on several."""
    return f" ({s['requests_per_s_per_node']:.3g} per node)" if s["nodes"] > 1 else " per node"


def _n(count: int, word: str) -> str:
    return f"{count} {word}" + ("" if count == 1 else "s")


def replicas_phrase(s: dict) -> str:
    """'8 replicas of 1 card', '1 replica of 8 cards'."""
    return f"{_n(s['replicas'], 'replica')} of {_n(s['cards_per_replica'], 'card')}"


def split_label(s: dict) -> str:
    """'2 x U4' (two replicas of U4 on 4 cards each), '1 x TP8', '8 x single'."""
    return f"{s['replicas']} x {s['plan']}"


def choose(split_rows: list[dict]) -> tuple[dict | None, dict | None]:
    """(throughput-best split, latency-best split): most requests per second (ties: the lower latency); the
    lowest request latency (ties: the more requests per second)."""
    if not split_rows:
        return None, None
    thr = max(split_rows, key=lambda s: (round(s["requests_per_s"], 9), -s["request_latency_s"]))
    lat = min(split_rows, key=lambda s: (s["request_latency_s"], -s["requests_per_s"]))
    return thr, lat


NEAR = 0.95   # a split within 5 % of the best requests per second is as good within the model's error


def near_best(split_rows: list[dict], thr: dict | None) -> dict | None:
    """The split with the lowest request latency among those within NEAR of the best requests per second, when it
    is not the throughput-best itself (None otherwise)."""
    if thr is None:
        return None
    close = [s for s in split_rows if s["requests_per_s"] >= NEAR * thr["requests_per_s"]]
    best = min(close, key=lambda s: s["request_latency_s"])
    return None if best is thr else best


def record(split_rows: list[dict], objective: str) -> dict:
    """--json's `throughput` object."""
    thr, lat = choose(split_rows)
    return {"objective": objective, "splits": split_rows, "throughput_best": thr, "latency_best": lat,
            "near_best": near_best(split_rows, thr), "near_share": NEAR,
            "differ": bool(thr and lat and thr["replicas"] != lat["replicas"])}


def near_phrase(rec: dict) -> str:
    """'; within 5 % of it: 2 x U8, 0.0076 requests/s at 262 s a request' or ''."""
    near, thr = rec.get("near_best"), rec["throughput_best"]
    if not near:
        return ""
    return (f"; within {1 - rec['near_share']:.0%} of its requests/s (inside the model's error): {split_label(near)}, "
            f"{near['requests_per_s']:.3g} requests/s ({near['requests_per_s'] / thr['requests_per_s']:.0%}) at "
            f"{_s(near['request_latency_s'])} a request")


def lines(rec: dict, objective: str) -> list[str]:
    """The text answer's serving lines: the split table under --objective throughput, one line otherwise."""
    thr, lat = rec["throughput_best"], rec["latency_best"]
    if thr is None:
        return []
    per_node = _per_node(thr)
    best = (f"throughput-best split: {split_label(thr)}{' on ' + thr['framework'] if thr['framework'] else ''} "
            f"({replicas_phrase(thr)}): {thr['requests_per_s']:.3g} "
            f"requests/s{per_node}, each request {_s(thr['request_latency_s'])}")
    if rec["differ"]:
        best += (f"; latency-best split: {split_label(lat)}: {_s(lat['request_latency_s'])} a request, "
                 f"{lat['requests_per_s']:.3g} requests/s ({lat['requests_per_s'] / thr['requests_per_s']:.0%} of "
                 "the throughput-best)")
    else:
        best += "; the same split is latency-best"
    best += near_phrase(rec)
    if objective != "throughput":
        return [best + " (--objective throughput lists every split)"]
    out = ["replicas x plan (one request per replica at a time; latency = DiT loop + serial stages):",
           f"  {'split':<18}{'cards each':>11}{'latency_s':>11}{'requests/s':>12}  framework"]
    for s in rec["splits"]:
        mark = " <- throughput-best" if s is thr else (" <- latency-best" if s is lat else "")
        mark += " <- within 5 % of the best, lower latency" if s is rec.get("near_best") else ""
        out.append(f"  {split_label(s):<18}{s['cards_per_replica']:>11}{s['request_latency_s']:>11.3f}"
                   f"{s['requests_per_s']:>12.3g}  {s['framework'] or '-'}{mark}")
    return out + [best]


def conclusion_sentence(rec: dict) -> str:
    """The conclusion's lead under --objective throughput: the split to run, and the latency-best when it differs."""
    thr, lat = rec["throughput_best"], rec["latency_best"]
    if thr is None:
        return ""
    on = f" on {thr['framework']}" if thr["framework"] else ""
    text = (f"For throughput run {split_label(thr)}{on} ({replicas_phrase(thr)}): {thr['requests_per_s']:.3g} "
            f"requests/s{_per_node(thr)} predicted, each request {_s(thr['request_latency_s'])}.")
    near = rec.get("near_best")
    if near:
        text += (f" {split_label(near)} serves {near['requests_per_s'] / thr['requests_per_s']:.0%} of that, within the "
                 f"model's error, at {_s(near['request_latency_s'])} a request: prefer it when latency matters too.")
    if rec["differ"]:
        text += (f" The latency-best split, {split_label(lat)}, answers one request in {_s(lat['request_latency_s'])} "
                 f"but serves {lat['requests_per_s']:.3g} requests/s: choose it only when one request's latency is "
                 "the target.")
    named = " ".join(f'"{x["name"]}"' for x in (thr, near, lat) if x and (x is thr or x["replicas"] != thr["replicas"]))
    return text + (f" Measure the throughput side: plan_bench.py --plans {named} on these cards runs each split's "
                   "replicas at once and reports requests_per_s (replicas / request_s).")
