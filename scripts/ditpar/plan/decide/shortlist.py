"""The short list of a ranking, the one input that decides its order, and the command that measures it."""

from __future__ import annotations

import dataclasses
import math

from ditpar.plan.cost import layout, predict
from ditpar.plan.decide import uncertainty
from ditpar.plan.decide.gates import _scale_link, _threshold

SHOWN = 6   # short-list names written into the conclusion


def annotate(results, measured_links: frozenset[str], half_width: float = uncertainty.MODEL_HALF_WIDTH) -> list:
    """Set r.band and r.short_list on every result; return the short list (best first)."""
    feas = [r for r in results if r.feasible]
    for r in results:
        r.band = uncertainty.band_of(r.breakdown, measured_links, half_width)
        r.short_list = False
    if not feas:
        return []
    # the tie is about rank 1's own class: a faster approximate plan (ranked after exact ones unless
    # --allow-approximate) or a DP plan (other requests' replicas) is not a plan the model "cannot order"
    lead = feas[0]
    pool = [r for r in feas if (r.exact or not lead.exact) and (r.plan.dp > 1) <= (lead.plan.dp > 1)]
    idx = uncertainty.short_list_indices([r.band for r in pool], [r.latency_s for r in pool])
    members = [pool[i] for i in idx]
    for r in members:
        r.short_list = True
    return members


def _scale_alltoall(hw, key: str, s: float):
    link = hw.links[key]
    links = {**hw.links, key: dataclasses.replace(link, alltoall_GBps=tuple((k, v * s) for k, v in link.alltoall_GBps))}
    return dataclasses.replace(hw, links=links)


def _inputs(hw, a, b):
    """(label, link key, pattern, hw(s)) for every input that can move a against b."""
    used = {k for r in (a, b) for k, v in r.breakdown.bytes_by_link_per_step.items() if v > 0}
    out = []
    for key in sorted(used):
        if key not in hw.links:
            continue
        if hw.links[key].alltoall_GBps and (a.plan.ulysses > 1 or b.plan.ulysses > 1):
            out.append((f"{key} all-to-all bandwidth", key, "alltoall", lambda s, k=key: _scale_alltoall(hw, k, s)))
        out.append((f"{key} link bandwidth (all patterns)", key, "all", lambda s, k=key: _scale_link(hw, k, s)))
    out.append(("compute rate (mfu)", None, "compute", lambda s: dataclasses.replace(hw, mfu=hw.mfu * s)))
    return out


def sensitivity(model, hw, shape, tun, a, b) -> dict | None:
    """The input whose smallest move (a factor within 1/16..16) makes b faster than a."""
    best = None
    for label, key, pattern, make in _inputs(hw, a, b):
        def gap(s, make=make):
            h = make(s)
            return predict(model, h, shape, b.plan, tun).latency_s - predict(model, h, shape, a.plan, tun).latency_s
        x = _threshold(gap, 1 / 16, 16)
        if x is None:
            continue
        if best is None or abs(math.log(x)) < abs(math.log(best["factor"])):
            best = {"input": label, "link": key, "pattern": pattern, "factor": x,
                    "leader": a.plan.name, "challenger": b.plan.name}
    if best is None:
        return None
    best["command"] = measure_command(hw, a.plan if a.plan.ulysses > 1 else b.plan, best, tun)
    return best


def measure_command(hw, plan, sens: dict, tun) -> str:
    """The comm_bench.py run (or the 1-card run) that measures the deciding input on this box."""
    n = plan.devices
    if sens["pattern"] == "compute":
        return ("time one single-device request of this shape (DiT denoising only, steps as here) and pass "
                "--ref-step-s SECONDS_PER_STEP (or --ref-latency SECONDS)")
    groups = layout(plan, tun.order)
    key = sens["link"]
    if sens["pattern"] == "alltoall":
        group = next((g for g in groups["ulysses"] if len(g) > 1), list(range(n)))
        ops = "all_to_all"
    else:
        cands = [g for d, gs in groups.items() for g in gs if len(g) > 1 and hw.class_for(g) == key]
        group = cands[0] if cands else list(range(n))
        ops = "all_reduce,all_to_all"
    world = max(group) + 1
    return (f"torchrun --nproc-per-node {world} scripts/comm_bench.py --ops {ops} --groups "
            f"\"{','.join(map(str, group))}\" --min-bytes 1M --max-bytes 256M --csv bench.csv "
            f"&& python scripts/plan.py ... --bench bench.csv")


def describe(short: list, sens: dict | None, hw) -> str:
    """The conclusion's sentence on the short list."""
    if len(short) <= 1:
        if not short:
            return ""
        return (f"No tie: every other plan's band starts above {short[0].plan.name}'s "
                f"({short[0].band.low_s:.3g}-{short[0].band.high_s:.3g} s).")
    names = ", ".join(r.plan.name for r in short[:SHOWN])
    if len(short) > SHOWN:
        names += f" and {len(short) - SHOWN} more (the band table and --json list them)"
    text = f"Measure these {len(short)}: {names} (their predicted bands overlap: the model cannot order them)."
    if sens is not None:
        f = sens["factor"]
        move = f"x{f:.2g}" if f >= 1 else f"/{1 / f:.2g}"
        text += (f" Their order turns on the {sens['input']}: moved {move} it makes {sens['challenger']} beat "
                 f"{sens['leader']}. Measure it: {sens['command']}")
    return text
