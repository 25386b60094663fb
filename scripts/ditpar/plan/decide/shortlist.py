"""The short list of a ranking, the one input that decides its order, and the command that measures it."""

from __future__ import annotations

import dataclasses
import math

from ditpar.plan.cost import layout, predict
from ditpar.plan.decide import uncertainty
from ditpar.plan.decide.gates import _scale_link, _threshold

SHOWN = 6   # names of the further tied plans written into the conclusion
MAX_MEASURE = 3   # plans the conclusion, G6 and --emit-matrix ask the user to measure


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
    idx = uncertainty.joint_short_list([r.breakdown for r in pool], measured_links, half_width)
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
    best["command"] = measure_command(hw, [a.plan, b.plan], best, tun)
    best["command_note"] = processes_note(hw, [a.plan, b.plan], best, tun)
    best["move"] = describe_move(hw, best)
    return best


def describe_move(hw, sens: dict) -> str:
    """Which figure the sensitivity moves, which way, from what value to what (issue 42: 'moved x3.47' of a figure
    left unnamed read as contradicting G7, which scales every pattern of a link at once)."""
    f = sens["factor"]
    way = f"raised x{f:.3g}" if f >= 1 else f"lowered /{1 / f:.3g}"
    if sens["pattern"] == "compute":
        return f"compute rate (mfu), {way} ({hw.mfu:g} -> {hw.mfu * f:.3g}),"
    link = hw.links[sens["link"]]
    if sens["pattern"] == "alltoall":
        now = "; ".join(f"{v:g} -> {v * f:.3g} GB/s at {k} cards" for k, v in link.alltoall_GBps)
        return f"{sens['link']} all-to-all figure alone (its ring / bus figure held), {way} ({now}),"
    return (f"{sens['link']} bandwidth, every pattern scaled together, {way} ({link.bandwidth_GBps:g} -> "
            f"{link.bandwidth_GBps * f:.3g} GB/s),")


def _deciding_groups(hw, plans, sens: dict, tun) -> list[list[int]]:
    """One group per distinct size on which the deciding input moves either plan: the all-to-all
    groups of every Ulysses degree, or every group of either plan that rides the deciding link."""
    found: dict[int, list[int]] = {}
    for plan in plans:
        groups = layout(plan, tun.order)
        if sens["pattern"] == "alltoall":
            cands = [g for g in groups["ulysses"] if len(g) > 1]
        else:
            cands = [g for gs in groups.values() for g in gs if len(g) > 1 and hw.class_for(g) == sens["link"]]
        for g in cands:
            found.setdefault(len(g), g)
    if not found:
        found[plans[0].devices] = list(range(plans[0].devices))
    return [found[k] for k in sorted(found)]


def measure_command(hw, plans, sens: dict, tun) -> str:
    """The comm_bench.py run (or the 1-card run) that measures the deciding input on this box.

    Every group size the decision rests on is measured (a U2 R2 vs U4 order needs the 2- and the
    4-card all-to-all), and a group that spans nodes gets a multi-node launch, one process per card.
    """
    if sens["pattern"] == "compute":
        return ("time one single-device request of this shape (DiT denoising only, steps as here) and pass "
                "--ref-step-s SECONDS_PER_STEP (or --ref-latency SECONDS)")
    groups = _deciding_groups(hw, plans, sens, tun)
    ops = "all_to_all" if sens["pattern"] == "alltoall" else "all_reduce,all_to_all"
    top = max(r for g in groups for r in g)
    per_node = hw.devices_per_node
    if top >= per_node:
        nodes = top // per_node + 1
        launch = (f"torchrun --nnodes {nodes} --node-rank NODE --nproc-per-node {per_node} "
                  "--master-addr HOST0 --master-port 29500")
    else:
        launch = f"torchrun --nproc-per-node {top + 1}"
    text = ";".join(",".join(map(str, g)) for g in groups)
    return (f"{launch} scripts/comm_bench.py --ops {ops} --groups \"{text}\" --min-bytes 1M --max-bytes 256M "
            f"--csv bench.csv && python scripts/plan.py ... --bench bench.csv")


def processes_note(hw, plans, sens: dict, tun) -> str:
    """Why measure_command starts fewer processes than the box has cards ('' when it starts them all or
    spans nodes): comm_bench.py needs one process per card from card 0 up to the highest card a measured
    group names, and the groups are those of the plans' own layout (a ring or CFG pair of U4 R2 is 0,4)."""
    if sens["pattern"] == "compute":
        return ""
    groups = _deciding_groups(hw, plans, sens, tun)
    top = max(r for g in groups for r in g)
    if top + 1 >= hw.devices_per_node:
        return ""
    text = "; ".join(",".join(map(str, g)) for g in groups)
    return (f"{top + 1} processes, not {hw.devices_per_node}, on purpose: comm_bench.py runs one process per card"
            f" from card 0 to the highest card a measured group names ({text}: cards 0-{top}, the "
            f"groups the plans place their collectives on); the other {hw.devices_per_node - top - 1} cards "
            "stay idle")


def to_measure(short: list) -> list:
    """The plans worth a measurement: the short list's fastest MAX_MEASURE predictions.

    A band tie of many plans (often the same degrees placed differently) is not a list anyone
    measures; the fastest few carry the decision, and the rest are measured only if those few come
    out within their spread.
    """
    return short[:MAX_MEASURE]


def transport_note(short: list, hw, measured: frozenset[str] = frozenset()) -> str:
    """A sentence when a short-listed plan's all-to-all rests on a PCIe all-to-all table figure that is not measured:
    that figure depends on the transport NCCL picks (SHM or P2P through the CPU), which one flag tells the model."""
    link = "intra_domain"
    part = link + uncertainty.ALLTOALL_PART
    figure = dict(hw.links[link].alltoall_GBps) if link in hw.links else {}
    if (4 not in figure or {part, link} & measured or hw.links[link].evidence in ("measured", "given")
            or f"--set links.{link}.alltoall_GBps" in hw.links[link].basis
            or "pcie" not in hw.interconnect.lower()):
        return ""
    for r in short:
        if uncertainty.exposed_parts(r.breakdown).get(part, 0.0) > 0:
            sizes = ", ".join(f"{k} cards {v:g} GB/s" for k, v in figure.items())
            return (f" {r.plan.name}'s all-to-all rests on the preset's {link} all-to-all figure ({sizes}), "
                    "which on PCIe depends on the transport NCCL picks: through host memory (about 18 GB/s on 4 "
                    "cards) or P2P through the CPU (about 2 GB/s); NCCL_DEBUG=INFO prints 'via SHM' or 'via "
                    f"P2P/IPC', and --set links.{link}.alltoall_GBps.4=18 (or =2) tells the model "
                    "(references/topology-and-bandwidth.md section 2).")
    return ""


def describe(short: list, sens: dict | None, hw, measured: frozenset[str] = frozenset()) -> str:
    """The conclusion's sentence on the short list."""
    if len(short) <= 1:
        if not short:
            return ""
        return (f"No tie: no other plan comes level with {short[0].plan.name} "
                f"({short[0].band.low_s:.3g}-{short[0].band.high_s:.3g} s) at any setting of the preset link figures "
                "within their range.")
    measure = to_measure(short)
    names = ", ".join(r.plan.name for r in measure)
    text = (f"Measure these {len(measure)}: {names} (within the model error and the range of the preset link "
            "figures, each could be the fastest: the model cannot order them).")
    if len(short) > len(measure):
        rest = ", ".join(r.plan.name for r in short[len(measure):len(measure) + SHOWN])
        more = len(short) - len(measure) - SHOWN
        text += (f" {len(short) - len(measure)} slower predictions could also be the fastest ({rest}"
                 f"{f' and {more} more' if more > 0 else ''}): measure them only if these {len(measure)} "
                 "come out within their spread of each other.")
    text += transport_note(short, hw, measured)
    if sens is not None:
        text += (f" Their order turns on one input: the {sens['move']} makes {sens['challenger']} beat "
                 f"{sens['leader']}. Measure it: {sens['command']}"
                 + (f" ({sens['command_note']})." if sens.get("command_note") else "."))
    return text
