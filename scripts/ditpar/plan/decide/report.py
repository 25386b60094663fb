"""plan.py's outputs: the ranked table, the JSON payload, the CSV frame and the stacked-bar plot."""

from __future__ import annotations

import math

from ditpar.plan.cost import efficiency
from ditpar.plan.cost.shape import guided_steps
from ditpar.plan.cost.work import LINK_KEYS
from ditpar.plan.decide import uncertainty
from ditpar.plan.decide.machine import machine_lines, machine_record

SHORT = {"pass": "ok", "veto": "VETO", "warn": "warn", "info": "i", "tight": "tight"}


def padded_heads(model, plan) -> tuple[int, int] | None:
    """(query heads per TP rank, after padding to a multiple of Ulysses) when the cost model pads them."""
    if model is None or plan.ulysses <= 1:
        return None
    local = model.heads / plan.tp
    if local < 1 or local % plan.ulysses == 0:
        return None
    return int(local), int(math.ceil(local / plan.ulysses) * plan.ulysses)


def head_split(model, plan) -> str:
    """Head divisibility of a plan that uses Ulysses, in one phrase ('' without Ulysses): query heads and K/V heads
    per TP rank against the Ulysses degree, and what the cost model does when they do not divide (issue 42)."""
    from ditpar.plan.cost.work import heads_per_rank

    u = plan.ulysses
    if model is None or u <= 1:
        return ""
    tp = f" per TP{plan.tp} rank" if plan.tp > 1 else ""
    q = model.heads / plan.tp
    pad = padded_heads(model, plan)
    if pad is None:
        qtext = f"{q:g} query heads{tp} / U{u} = {int(q) // u} per rank"
    else:
        qtext = f"{pad[0]} query heads{tp} do not divide by U{u}: padded to {pad[1]} ({pad[1] // u} per rank, priced)"
    kv = heads_per_rank(model.kv_heads, plan.tp)
    if model.kv_heads == model.heads and pad is not None:   # MHA: the K/V heads are padded with the query heads
        return f"heads: {qtext}; K/V heads padded with them ({pad[1] // u} per rank)"
    if kv % u == 0:
        ktext = f"{kv} K/V heads{tp} / U{u} = {kv // u} per rank"
    else:
        ktext = (f"{kv} K/V heads{tp} do not divide by U{u}: replicated to {math.lcm(kv, u)} "
                 f"({heads_per_rank(kv, u)} per rank, priced)")
    return f"heads: {qtext}; {ktext}"


def padding_note(r, model) -> str:
    """'; sequence padded by N tokens; heads padded 30 -> 32 (+6.7 % attention)' or ''."""
    text = f"; sequence padded by {r.pad_tokens} tokens" if r.pad_tokens else ""
    heads = padded_heads(model, r.plan)
    if heads:
        text += (f"; heads padded {heads[0]} -> {heads[1]} per TP rank for Ulysses {r.plan.ulysses} "
                 f"(+{heads[1] / heads[0] - 1:.1%} attention work, priced)")
    return text


MEMORY_VERDICTS = {"pass": "fits", "tight": "fits, tight", "warn": "fits with weight sharding", "veto": "does not fit"}


def memory_verdict(r) -> str | None:
    """G2 in words: fits | fits, tight | fits with weight sharding | fits with offload | does not fit (None: no G2)."""
    g2 = next((g for g in r.gates if g.gate == "G2"), None)
    if g2 is None:
        return None
    unlocks = getattr(r, "unlocks", ())
    if unlocks and g2.verdict != "veto":
        from ditpar.plan.decide.unlocks import NAMES

        return "fits with " + " + ".join(NAMES[k] for k in unlocks) + (", tight" if g2.verdict == "tight" else "")
    return MEMORY_VERDICTS.get(g2.verdict, g2.verdict)


def needs_sharding(r) -> bool:
    """A plan that fits only with layer-wise weight sharding (G2 warn: the ranking applied it, its all-gather
    charged, mem_GB the sharded figure)."""
    return "shard" in getattr(r, "unlocks", ())


def single_device_s(results) -> float | None:
    """The single-device predicted DiT seconds every speedup is taken over (None without a feasible plan)."""
    for r in results:
        lat = r.breakdown.latency_s
        if r.feasible and math.isfinite(lat) and lat > 0 and math.isfinite(r.speedup_vs_1):
            return r.speedup_vs_1 * lat
    return None


def single_device_line(stages, results) -> str:
    """One line: the one-device prediction, the basis of `speedup` (DiT loop) and `e2e_x` (serial stages added)."""
    single = single_device_s(results)
    if single is None:
        return ""
    e2e = f"; end to end {single + stages.total_s:.3f} s (the basis of e2e_x)" if stages is not None else ""
    return f"one device (predicted): DiT loop {single:.3f} s (the basis of speedup){e2e}"


def heads_per_rank_record(model, plan) -> dict:
    """JSON keys heads_per_rank and kv_heads_per_rank (ditpar.plan.decide.heads.per_rank; empty without a model)."""
    if model is None:
        return {}
    from ditpar.plan.decide.heads import per_rank

    q, kv = per_rank(model, plan)
    return {"heads_per_rank": q, "kv_heads_per_rank": kv}


def header_notes(r, model) -> str:
    """What a plan's gates header adds to its exactness: sequence padding and the head split (padding included)."""
    split = head_split(model, r.plan)
    return (f"; sequence padded by {r.pad_tokens} tokens" if r.pad_tokens else "") + (f"; {split}" if split else "")


def cards_used(hw, n: int) -> dict:
    """Which cards a job of n devices takes on the preset (ranks fill card 0 upward, as the layout
    numbers them) and whether they span several fast domains."""
    used = list(range(n))
    domains: dict[int, list[int]] = {}
    for r in used:
        domains.setdefault(hw.domain_of(r), []).append(r)
    return {"used": used, "of": hw.n_devices, "domains": list(domains.values()),
            "largest_group_in_one_domain": max(len(v) for v in domains.values())}


def cards_note(hw, n: int) -> str:
    """One line when the job takes part of the box: the cards, their domains, what crosses."""
    if n >= hw.n_devices:
        return ""
    c = cards_used(hw, n)
    doms = " | ".join(f"{d[0]}-{d[-1]}" if len(d) > 1 else str(d[0]) for d in c["domains"])
    text = f"cards used: 0-{n - 1} of {hw.n_devices} (ranks fill card 0 upward); their domains: {doms}"
    if len(c["domains"]) > 1:
        text += (f"; a group with cards in more than one of them (every group of more than "
                 f"{c['largest_group_in_one_domain']}) runs at the inter-domain figure (pin the job to other cards with CUDA_VISIBLE_DEVICES / "
                 f"ASCEND_RT_VISIBLE_DEVICES and pass --topo for them)")
    return text


def plan_record(r, model=None) -> dict:
    bd = r.breakdown
    heads = padded_heads(model, r.plan)
    finite = math.isfinite(bd.latency_s)
    rec = {"rank": r.rank, "name": r.plan.name, **r.plan.as_dict(),
           "predicted_latency_s": bd.latency_s if finite else None, "feasible": r.feasible,
           "framework": r.framework, "exact": r.exact, "exact_reason": r.exact_reason,
           "speedup_vs_1": r.speedup_vs_1 if finite and math.isfinite(r.speedup_vs_1) else None,
           "pad_tokens": r.pad_tokens,
           "pad_heads": None if heads is None else {"from": heads[0], "to": heads[1]},
           "head_split": head_split(model, r.plan) or None,
           **heads_per_rank_record(model, r.plan),
           "needs_weight_sharding": needs_sharding(r), "vae_devices": getattr(r, "vae_devices", 1),
           "memory_verdict": memory_verdict(r), "memory_unlocks": list(getattr(r, "unlocks", ())),
           "gates": [g.as_dict() for g in r.gates]}
    if finite:
        rec.update({
            "step_s": bd.step_s, "compute_s": bd.compute_s, "compute_efficiency": bd.compute_efficiency,
            "exposed_comm_s": bd.exposed_comm_s,
            "exposed_by_link_s": dict(bd.exposed_by_link_s), "exposed_by_collective_s": dict(bd.exposed_by_family_s),
            "exposed_alltoall_by_link_s": dict(bd.exposed_alltoall_by_link_s),
            "hidden_comm_s": bd.hidden_s, "host_bound_s": bd.host_bound_s, "pipeline_s": bd.pipeline_s,
            "bytes_per_layer_by_link": dict(bd.bytes_by_link_per_layer),
            "bytes_per_step_by_link": dict(bd.bytes_by_link_per_step),
            "memory_GB": bd.memory_GB, "memory_parts_GB": dict(bd.memory_parts_GB), "notes": list(bd.notes)})
    return rec


def payload(results, model, hw, shape, tun, conclusion: str, frameworks=None,
            allow_approximate: bool = False) -> dict:
    return {
        "frameworks": [fw.as_dict() for fw in frameworks or []], "allow_approximate": allow_approximate,
        "model": model.name, "hardware": hw.name, "machine": machine_record(hw),
        "devices": results[0].plan.devices if results else 0,
        "shape": {"width": shape.width, "height": shape.height, "frames": shape.frames, "steps": shape.steps,
                  "cfg": shape.cfg, "tokens": shape.tokens, "text_joint_tokens": shape.text_joint,
                  "text_cross_tokens": shape.text_cross,
                  "negative_text_tokens": shape.text_uncond if shape.text_uncond >= 0 else None,
                  "cfg_trunc_ratio": shape.cfg_trunc_ratio, "guided_steps": guided_steps(shape),
                  "sparse_attention": shape.sparse_attention},
        "tunables": {"launch_us": tun.launch_us, "call_us": tun.call_us, "runtime": runtime_label(tun).split(" ")[0], "overlap_efficiency": tun.overlap_efficiency,
                     "masking_chunks": tun.masking_chunks, "layout": ",".join(tun.order),
                     "compute_scale": tun.compute_scale},
        "cards": cards_used(hw, results[0].plan.devices) if results else None,
        "plans": [plan_record(r, model) for r in results],
        "compute_efficiency": efficiency.describe(hw),
        "conclusion": conclusion,
    }


def serial_record(stages, results, model=None, hw=None, given_machine: bool = False) -> dict:
    """JSON of the serial stages and the end-to-end seconds of every feasible plan (DiT + serial, the decode split
    as the plan's framework splits it), the leading plan's wall, and each plan's capped end-to-end speedup."""
    from ditpar.plan.decide.stages import end_to_end_lead, plan_stages, wall

    feas = [r for r in results if r.feasible]
    ranges = end_to_end_speedups(stages, results, model, hw, given_machine)
    return {"text_encode_s": stages.text_encode_s, "vae_decode_s": stages.vae_decode_s,
            "vae_devices": stages.vae_devices, "total_s": stages.total_s, "priced": stages.priced,
            "notes": list(stages.notes),
            "vae_decode_s_by_plan": {r.plan.name: plan_stages(stages, r).vae_decode_s for r in feas},
            "wall": wall(stages, feas[0] if feas else None),
            "end_to_end_lead": end_to_end_lead(stages, results),
            "end_to_end_s": {r.plan.name: r.breakdown.latency_s + plan_stages(stages, r).total_s for r in feas},
            "speedup_range_level": uncertainty.RANGE_LEVEL if model is not None else uncertainty.SPEEDUP_RANGE_LEVEL,
            "end_to_end_speedup": ranges}


def end_to_end_speedups(stages, results, model=None, hw=None, given_machine: bool = False) -> dict[str, dict]:
    """Per feasible plan: the end-to-end speedup over one device (serial stages added to both latencies) beside the
    DiT-loop one, each capped (the card count; Amdahl's bound of the serial stages), and its range: by stratum
    (uncertainty.stratified_range) when the model and machine are given, else the published rows' pooled range."""
    out = {}
    for r in results:
        lat = r.breakdown.latency_s
        if not (r.feasible and math.isfinite(lat) and lat > 0 and math.isfinite(r.speedup_vs_1)):
            continue
        single = r.speedup_vs_1 * lat
        cards = max(1, r.plan.devices // max(1, r.plan.dp))
        serial_one = stages.split(1).total_s
        serial_own = stages.split(getattr(r, "vae_devices", 1) or 1).total_s
        # Amdahl: the DiT loop split perfectly over the cards, the serial stages only as this plan splits them
        cap = min(float(cards), (single + serial_one) / (single / cards + serial_own))
        raw = (single + serial_one) / (lat + serial_own)
        s = min(raw, cap)
        if model is not None and hw is not None:
            stratum = uncertainty.range_stratum(model.name, hw, r.framework, given_machine)
            lo, hi = uncertainty.stratified_range(s, stratum, cap)
        else:
            stratum = None
            lo, hi = (min(x, cap) for x in uncertainty.speedup_range(s))
        out[r.plan.name] = {"speedup": s, "low": lo, "high": hi, "dit_speedup": min(r.speedup_vs_1, float(cards)),
                            "cap": cap, "cap_binds": hi >= cap or raw > cap, "stratum": stratum}
    return out


def speedup_range_line(stages, results, model=None, hw=None, given_machine: bool = False) -> str:
    """One line: the leading plan's end-to-end speedup first, the DiT-loop one beside it, the range with its level,
    stratum, sample and held-out coverage, and the cap when it binds."""
    ranges = end_to_end_speedups(stages, results, model, hw, given_machine)
    lead = next((r for r in results if r.plan.name in ranges), None)
    if lead is None:
        return ""
    e = ranges[lead.plan.name]
    what = "serial stages included" if stages.priced else "serial stages not priced"
    if e["stratum"] is None:
        a, b = uncertainty.SPEEDUP_RANGE_LOG2
        claim = (f"{uncertainty.SPEEDUP_RANGE_LEVEL:.0%} range: measured / predicted speedup fell within "
                 f"x{2 ** a:.2f}..x{2 ** b:.2f} for that share of published rows held out")
    else:
        claim = uncertainty.range_note(e["stratum"])
    level = uncertainty.RANGE_LEVEL if e["stratum"] is not None else uncertainty.SPEEDUP_RANGE_LEVEL
    cards = max(1, lead.plan.devices // max(1, lead.plan.dp))
    cap = ""
    if e["cap_binds"]:
        cap = (f"; capped at {e['cap']:.2f}x: " + (f"the card count ({cards})" if e["cap"] >= cards - 1e-9 else
               f"Amdahl's bound of the serial stages ({stages.split(getattr(lead, 'vae_devices', 1) or 1).total_s:.2f} s "
               f"that {cards} cards do not split)"))
    return (f"speedup of #{lead.rank} {lead.plan.name} over one device: {e['speedup']:.1f}x end to end ({what}; "
            f"DiT loop {e['dit_speedup']:.1f}x); {level:.0%} range {e['low']:.1f}-{e['high']:.1f}x ({claim}){cap} "
            "(every plan's: e2e_x in the table, --json serial_stages.end_to_end_speedup)")


def serial_line(stages) -> str:
    """One line: what the serial stages add to a plan's latency (never in the ranking; the VAE decode on one card
    here, split where the plan's framework splits it: the stage-wall line and e2e_x)."""
    def f(x):
        return "not priced" if x is None else f"{x:.2f} s"
    vae = f(stages.vae_decode_s) + ("" if stages.vae_devices == 1 else f" (split over {stages.vae_devices} cards)")
    return (f"serial stages (ditpar.plan.cost.serial_time, memory-bound decode): text encoder "
            f"{f(stages.text_encode_s)}, VAE decode {vae}; end to end = latency_s + {stages.total_s:.2f} s"
            + ("" if stages.priced else f" ({'; '.join(stages.notes)})"))


def frame(results, model=None):
    import pandas as pd

    rows = []
    for r in results:
        rec = plan_record(r, model)
        flat = {k: v for k, v in rec.items() if not isinstance(v, (dict, list))}
        for k in LINK_KEYS:
            flat[f"exposed_{k}_s"] = rec.get("exposed_by_link_s", {}).get(k)
        flat["gates"] = " ".join(f"{g['gate']}:{g['verdict']}" for g in rec["gates"])
        rows.append(flat)
    return pd.DataFrame(rows)


def _f(x: float | None, digits: int = 3) -> str:
    """Seconds in the ranked table: one format for every cell (fixed decimals)."""
    if x is None or not math.isfinite(x):
        return "-"
    return f"{x:.{digits}f}"


RUNTIMES = {25.0: "eager (--runtime compile or graphs if you run that way)", 12.5: "compile (midpoint, not measured)",
            0.0: "graphs"}


def runtime_label(tun) -> str:
    """How the host cost per op was chosen: a named runtime or the user's --launch-us."""
    return RUNTIMES.get(float(tun.launch_us), "--launch-us")


GATE_WIDTH = 6  # "tight" plus a space


def render(results, model, hw, shape, tun, conclusion: str, top: int, show_all: bool, stages=None,
           half_line: str = "", given_machine: bool = False, serving_lines=()) -> str:
    """The ranked table, the gates of the top two, and the conclusion."""
    feas = [r for r in results if r.feasible]
    lines = [f"{model.name} on {hw.name}, {feas[0].plan.devices if feas else '?'} devices: {shape.describe()}",
             f"{len(results)} plans, {len(feas)} feasible; latency = predicted seconds of the whole DiT loop "
             f"(text encoder and VAE decode: the serial-stages line); host cost {tun.launch_us:g} us per op: {runtime_label(tun)}"]
    if stages is not None:
        lines.append(serial_line(stages))
    if single_device_line(stages, results):
        lines.append(single_device_line(stages, results))
    if half_line:
        lines.append(half_line)
    lines += [x for x in serving_lines if x]
    if stages is not None:
        expected = speedup_range_line(stages, results, model, hw, given_machine)
        if expected:
            lines.append(expected)
        from ditpar.plan.decide.stages import end_to_end_lead_line, wall_line
        lines += [t for t in (wall_line(stages, results), end_to_end_lead_line(stages, results)) if t]
    if feas and cards_note(hw, feas[0].plan.devices):
        lines.append(cards_note(hw, feas[0].plan.devices))
    lines += machine_lines(hw)
    lines.append("")
    gate_ids = sorted({gt.gate for r in results for gt in r.gates}, key=lambda g: (len(g), g))
    e2e = end_to_end_speedups(stages, results, model, hw, given_machine) if stages is not None else {}
    head = (f"{'#':>3} {'plan':<18}{'latency_s':>10}{'speedup':>8}{'e2e_x':>6}{'exact':>6} {'framework':<14}"
            f"{'step_s':>9}{'compute_s':>10}"
            f"{'x_intra_s':>10}{'x_inter_s':>10}{'x_node_s':>9}{'hidden_s':>9}{'host_s':>8}{'pipe_s':>8}"
            f"{'mem_GB':>8}{'h/kv':>7}  " + "".join(f"{g:<{GATE_WIDTH}}" for g in gate_ids)).rstrip()
    lines.append(head)
    shown = feas[:top] + ([r for r in results if not r.feasible] if show_all else [])
    for r in shown:
        bd = r.breakdown
        x = bd.exposed_by_link_s
        verdicts = {gt.gate: SHORT[gt.verdict] for gt in r.gates}
        g = "".join(f"{verdicts.get(gid, '-'):<{GATE_WIDTH}}" for gid in gate_ids).rstrip()
        if not r.feasible:
            lines.append(f"{r.rank:>3} {r.plan.name:<18}{'-':>10}  infeasible: {r.gates[-1].gate} "
                         f"{r.gates[-1].reason}")
            continue
        mark = "S" if needs_sharding(r) else ("O" if "offload" in getattr(r, "unlocks", ()) else "")
        mem = f"{bd.memory_GB:>7.1f}{mark}" if mark else f"{bd.memory_GB:>8.1f}"
        hk = heads_per_rank_record(model, r.plan)
        mem += f"{hk['heads_per_rank']}/{hk['kv_heads_per_rank']}".rjust(7)
        sp = e2e.get(r.plan.name, {})
        lines.append(f"{r.rank:>3} {r.plan.name:<18}{_f(bd.latency_s):>10}{_f(sp.get('dit_speedup', r.speedup_vs_1), 1):>8}"
                     f"{_f(sp.get('speedup'), 1):>6}"
                     f"{'yes' if r.exact else 'NO':>6} {(r.framework or '-')[:13]:<14}{_f(bd.step_s):>9}"
                     f"{_f(bd.compute_s):>10}{_f(x['intra_domain']):>10}{_f(x['inter_domain']):>10}"
                     f"{_f(x['inter_node']):>9}{_f(bd.hidden_s):>9}{_f(bd.host_bound_s):>8}"
                     f"{_f(bd.pipeline_s):>8}{mem}  {g}")
    lines += ["", "speedup = single-device latency / plan latency of the DiT loop; e2e_x = the same with the serial stages "
              "added to both (end to end; the figure the headline gives first); neither printed above the card count or "
              "Amdahl's bound of the serial stages (one decimal: a ratio of two predictions); exact = same output as one device up to "
              "reduction order (NO: stale activations, ranked after exact plans unless --allow-approximate); "
              "framework = preferred framework that runs it (native backend, then vendor preference); "
              "DPn = n replicas for other requests (ranked after plans that use every card for this one)",
              "x_* = exposed communication by the link class that sets its time (a collective whose group spans "
              "classes, e.g. an all-to-all across two islands, is charged whole to its slowest class; --json "
              "bytes_per_step_by_link splits its bytes by class); hidden = overlapped communication; host = time the "
              "device waits for eager op dispatch; pipe = PipeFusion warm-up and fill; mem_GB = peak per rank as the "
              "plan runs (S: with layer-wise weight sharding, which it needs to fit: G2 warn; the all-gather is priced; O: with "
              "layer-wise weight offload to host memory, its transfer over the host link priced); h/kv = "
              "query / K/V heads one rank attends (after TP and Ulysses, padded or replicated where they do not divide)",
              "G1..G7 = the gates (listed below for the top two): ok = pass, i = information only, warn, tight = fits "
              "within 95 % of the card but above the 90 % headroom (G2), VETO, - = not applicable", ""]
    for r in feas[:2]:
        lines.append(f"gates of #{r.rank} {r.plan.name}" + (f" (on {r.framework})" if r.framework else "")
                     + f": {r.exact_reason}" + header_notes(r, model))
        for gt in r.gates:
            lines.append(f"  {gt.gate} {gt.name:<26} {gt.verdict:<5} {gt.reason}")
        lines.append("")
    vetoed = {}
    for r in results:
        if not r.feasible:
            key = r.gates[-1].reason
            vetoed[key] = vetoed.get(key, 0) + 1
    if vetoed:
        lines.append("infeasible plans by reason (--all lists them):")
        for k, n in sorted(vetoed.items(), key=lambda kv: -kv[1])[:6]:
            lines.append(f"  {n:3d} x {k}")
        lines.append("")
    lines += ["conclusion:", f"  {conclusion}", ""]
    return "\n".join(lines)


def plot(results, path: str, title: str, top: int = 8) -> None:
    """Stacked bars of the top plans: compute, exposed comm by link class, host-bound, pipeline."""
    from ditpar import cli

    plt = cli.pyplot()
    feas = [r for r in results if r.feasible][:top]
    parts = [("compute", lambda b: b.compute_s), ("exposed intra-domain", lambda b: b.exposed_by_link_s["intra_domain"]),
             ("exposed inter-domain", lambda b: b.exposed_by_link_s["inter_domain"]),
             ("exposed inter-node", lambda b: b.exposed_by_link_s["inter_node"]),
             ("host-bound", lambda b: b.host_bound_s), ("pipeline warm-up/fill", lambda b: b.pipeline_s)]
    fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(feas) + 2), 4.5))
    names = [r.plan.name for r in feas]
    bottom = [0.0] * len(feas)
    for label, get in parts:
        vals = [max(0.0, get(r.breakdown)) for r in feas]
        if any(vals):
            ax.bar(names, vals, bottom=bottom, label=label)
            bottom = [b + v for b, v in zip(bottom, vals, strict=False)]
    ax.set_ylabel("seconds per request")
    ax.set_title(title)
    ax.legend(fontsize=8)
    ax.tick_params(axis="x", rotation=30)
    cli.save_figure(fig, path)
    plt.close(fig)
