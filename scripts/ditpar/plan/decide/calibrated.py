"""plan.py's calibrated path: the box (bench, topo, overrides, 1-card calibration), the short list,
the user's own comparison and the few-step matrix, added to the ranking's table, JSON and conclusion."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from ditpar.errors import InputError
from ditpar.plan.decide import shortlist, uncertainty
from ditpar.plan.inputs import calibration

FEW_STEPS, ANCHOR_STEPS, REPEATS = 4, 10, 5


@dataclass
class Box:
    hw: object
    tun: object
    link_records: list[dict]
    overrides: list[str] = field(default_factory=list)
    compute: str = ""
    warnings: list[str] = field(default_factory=list)


def calibrate_box(args, model, hw, shape, tun) -> Box:
    """Apply --topo, --bench, --set and --ref-step-s (in that order) to the preset."""
    from ditpar.plan.decide.rank import calibrate

    warnings: list[str] = []
    if args.topo and getattr(args, "domains", None):
        raise InputError("--topo and --domains both describe the node: give one")
    if args.topo:
        hw, warnings = calibration.load_topology(args.topo, hw)
    elif getattr(args, "domains", None):
        from ditpar.plan.inputs.topology import apply_domains

        hw = apply_domains(args.domains, hw).with_nodes(max(1, -(-args.devices // sum(
            int(p) for p in args.domains.split(",")))))
    if args.bench:
        curves = calibration.read_bench(args.bench, hw)
        hw, records = calibration.apply_bench(hw, curves, model, shape)
    else:
        records = calibration.preset_records(hw)
    used = calibration.reachable_links(hw, args.devices)
    records = [r for r in records if r["link"] in used]
    hw, tun, overrides = calibration.apply_sets(args.set or [], hw, tun)
    for note in overrides:   # an override is the user's figure: no longer a preset guess, for that figure only
        _mark_override(records, note, hw)
    if args.ref_step_s is not None and args.ref_latency is not None:
        raise InputError("--ref-step-s and --ref-latency both given: pass one single-device measurement")
    if args.ref_step_s is not None:
        if not (args.ref_step_s > 0 and math.isfinite(args.ref_step_s)):
            raise InputError(f"--ref-step-s {args.ref_step_s}: expected a positive number of seconds")
        tun = calibrate(model, hw, shape, args.ref_step_s * shape.steps, tun)
        compute = (f"compute calibrated from --ref-step-s {args.ref_step_s:g} s (one measured 1-card step; "
                   f"compute x{tun.compute_scale:.3g} of the preset)")
    elif args.ref_latency is not None:
        ref = getattr(args, "ref_plan", None)
        compute = (f"compute calibrated from --ref-latency {args.ref_latency:g} s (one measured 1-card request)"
                   if ref is None else
                   f"compute calibrated from --ref-latency {args.ref_latency:g} s of --ref-plan {ref!r} (one measured "
                   f"request at {reference(ref, hw)[0].devices} cards); it sets the scale of every prediction, not the "
                   "spread between plans (that rests on the link figures)")
    else:
        compute = (f"compute from the preset (peak {hw.peak_tflops_bf16:g} TFLOPS x mfu {hw.mfu:g}); not calibrated: "
                   f"pass --ref-step-s or --ref-latency from one 1-card run")
        borrowed = str(hw.sources.get("mfu", ""))
        if borrowed.lower().startswith("borrowed"):   # no measurement of this class: say whose figure it is
            compute += f"; mfu {borrowed.split(';')[0].split(' (')[0]}, not measured on this machine"
    compute += "; " + shape_term(hw)
    return Box(hw, tun, records, overrides, compute, warnings)


def reference(name: str | None, hw, model=None):
    """(plan, machine) of a --ref-plan measurement: one device when `name` is None; the machine widened to the
    nodes the plan's cards need. A plan no framework could have run (more cards than a job has, or a head split
    above the model's heads) is refused."""
    from ditpar import limits
    from ditpar.plan.cost.plans import Plan
    from ditpar.plan.inputs.plan_names import parse_plan_name

    if name is None:
        return Plan(), hw
    try:
        plan = Plan(**parse_plan_name(name))
    except InputError as exc:
        raise InputError(f"--ref-plan: {exc}") from None
    if plan.devices > limits.MAX_DEVICES:
        raise InputError(f"--ref-plan {name}: {plan.devices} cards; expected at most {limits.MAX_DEVICES}")
    if model is not None and plan.ulysses * plan.tp > model.heads:
        raise InputError(f"--ref-plan {name}: Ulysses x TP = {plan.ulysses * plan.tp} splits more than the "
                         f"{model.heads} heads of {model.name}; no framework runs it")
    nodes = -(-plan.devices // hw.devices_per_node)
    return plan, (hw.with_nodes(nodes) if nodes > hw.nodes else hw)


def _mark_override(records: list[dict], note: str, hw) -> None:
    """The link-figure record a `--set links.X.F[.K]` override replaces: new value, given by the user (not measured:
    it never narrows a band; its link's exposed time moves by the 'given' factor). Latency and per-peer figures
    have no record."""
    m = re.match(r"links\.(\w+)\.(\w+?)(?:\.(\d+))?: .* -> (\S+)$", note)
    if not m:
        return
    link, figure, group, value = m.group(1), m.group(2), m.group(3), float(m.group(4))
    if figure == "alltoall_GBps":
        want = f"all-to-all busbw, group {group}"
        hits = [r for r in records if r["link"] == link and r["figure"] == want]
        if not hits and link in {r["link"] for r in records}:
            records.append({"link": link, "figure": want, "GBps": value, "measured": False, "how": ""})
            hits = records[-1:]
    elif figure == "ring_GBps":
        hits = [r for r in records if r["link"] == link and r["figure"].startswith("ring busbw")]
    elif figure == "bandwidth_GBps":
        hits = [r for r in records if r["link"] == link and r["figure"].startswith("bus bandwidth")]
    else:
        hits = []
    for r in hits:
        r["GBps"], r["measured"], r["how"] = value, False, f"--set {note}"
        r["provenance"] = "given"


def shape_term(hw) -> str:
    """One line on where the per-card GEMM-shape efficiency comes from (or that there is none)."""
    from ditpar.plan.cost import efficiency

    d = efficiency.describe(hw)
    if d["family"] is None:
        return f"compute efficiency: {d['source']}"
    return (f"compute efficiency: per-card GEMM/attention shapes priced on the {d['family']} curve "
            f"(templates/gemm_efficiency.toml; mfu = the large-GEMM ceiling; per plan: --json compute_efficiency)")


def _norm(name: str) -> str:
    return re.sub(r"\s+", " ", name.strip().lower())


def find_plans(results, names: list[str]) -> list:
    by = {_norm(r.plan.name): r for r in results}
    out = []
    for n in names:
        r = by.get(_norm(n))
        if r is None:
            feas = [r.plan.name for r in results if r.feasible][:12]
            raise InputError(f"--compare {n!r}: no such plan; names as printed, e.g. {', '.join(feas)}")
        out.append(r)
    return out


def after_ranking(args, box: Box, results, model, hw, shape, tun, write_matrix=None) -> dict:
    """Bands, short list, sensitivity, --compare and --emit-matrix after rank_plans (`write_matrix`:
    the few-step tool's writer, passed in by the script since the plan layer does not import it)."""
    from ditpar.plan.decide.rank import pair_tunables, runner_up

    measured = calibration.measured_links(box.link_records, hw)
    short = shortlist.annotate(results, measured)
    feas = [r for r in results if r.feasible]
    a = feas[0] if feas else None
    # the deciding input: against the nearest short-list member whose order some input can flip
    challengers = short[1:] if len(short) > 1 else [runner_up(feas)]
    sens = None
    for b in challengers:
        if a is None or b is None:
            break
        sens = shortlist.sensitivity(model, hw, shape, pair_tunables(a, b, tun), a, b)
        if sens is not None:
            break
    b = challengers[0] if challengers else None
    _align_ab_gate(feas[:2], shortlist.to_measure(short))
    out = {"short_list": short, "sensitivity": sens, "short_list_text": shortlist.describe(short, sens, hw, measured),
           "measure": [r.plan.name for r in shortlist.to_measure(short)], "compare": [], "matrix": None}
    asked = []
    if args.compare:
        asked = find_plans(results, args.compare)
        asked = sorted(asked, key=lambda r: r.latency_s)
        for i, lead in enumerate(asked):   # every pair, faster prediction first
            for other in asked[i + 1:]:
                out["compare"].append(_compare_pair(lead, other, model, hw, shape, tun, measured))
        out["compare_plans"] = asked
    if args.emit_matrix:
        if asked:   # the user's own plans, as asked: the matrix measures what --compare compares
            plans = [r for r in asked if r.feasible]
            if len(plans) < 2:
                raise InputError("--emit-matrix with --compare: fewer than 2 feasible plans to measure")
        else:
            plans = shortlist.to_measure(short) if len(short) >= 2 else [r for r in (a, b) if r is not None]
        from ditpar.plan.inputs.frameworks import resolve_frameworks

        out["matrix"] = emit_matrix(args.emit_matrix, plans, write_matrix, model, shape,
                                    resolve_frameworks(getattr(args, "framework", None)), hw)
    return out


def _compare_pair(lead, other, model, hw, shape, tun, measured: frozenset[str] = frozenset()) -> dict:
    """G6, G7, sensitivity and tie of one asked pair (lead = the faster prediction)."""
    from ditpar.plan.decide import gates
    from ditpar.plan.decide.rank import pair_tunables
    from ditpar.plan.decide.report import head_split

    rec = {"a": lead.plan.name, "b": other.plan.name,
           "head_split": {r.plan.name: head_split(model, r.plan) for r in (lead, other) if head_split(model, r.plan)}}
    if not (lead.feasible and other.feasible):
        bad = lead if not lead.feasible else other
        rec["note"] = f"{bad.plan.name} is infeasible: {bad.gates[-1].gate} {bad.gates[-1].reason}"
        return rec
    rec["G6"] = gates.ab_gate(1, lead.plan, [other.plan]).reason
    pair_tun = pair_tunables(lead, other, tun)
    rec["G7"] = gates.projection(model, hw, shape, lead.plan, other.plan, pair_tun).reason
    rec["sensitivity"] = shortlist.sensitivity(model, hw, shape, pair_tun, lead, other)
    # the short list's rule on the pair: at some shared setting of the preset link figures either could be faster
    rec["tie"] = len(uncertainty.joint_short_list([lead.breakdown, other.breakdown], measured)) == 2
    why = uncertainty.pair_tie(lead.breakdown, other.breakdown, measured)
    rec["tie_rule"] = {"corner": why["corner"], "other_low_s": why["other_low_s"], "lead_high_s": why["lead_high_s"],
                       "other_high_s": why["other_high_s"]}
    return rec


def tie_text(c: dict) -> str:
    """--compare's tie with the rule that decides it and the two figures it compares (issue 42: a pair 20.8 %
    apart tied and one 21.5 % apart did not, with nothing on the page to say why)."""
    t = c["tie_rule"]
    setting = uncertainty.describe_corner(t["corner"])
    h = uncertainty.MODEL_HALF_WIDTH
    if t["other_high_s"] < t["lead_high_s"]:
        cmp = (f"{c['b']} is the faster of the two there (pessimistic ends {t['other_high_s']:.4g} s against "
               f"{c['a']}'s {t['lead_high_s']:.4g} s)")
    else:
        cmp = (f"{c['b']}'s optimistic end {t['other_low_s']:.4g} s {'reaches' if c['tie'] else 'stays above'} "
               f"{c['a']}'s pessimistic end {t['lead_high_s']:.4g} s")
    why = (f"no move of an unmeasured figure favours {c['b']}" if not t["corner"] else
           f"the setting most favourable to {c['b']}, each unmeasured figure within its evidence range")
    return (f"{'yes' if c['tie'] else 'no'}: at {setting} ({why}), {cmp}. Rule: the short list's (model error +-{h:.1%} and PipeFusion "
            "schedule on top of the link figures; references/plan-output.md section 2.1), applied to these two "
            "alone: not a percentage gap, since how far two plans can swap depends on how much of each time "
            "rests on unmeasured link figures")


def _align_ab_gate(top: list, measure: list) -> None:
    """G6 of the top two names the same plans the conclusion asks to measure (the short list's few)."""
    if len(measure) <= 2:
        return
    from ditpar.plan.decide.gates import Gate

    names = ", ".join(r.plan.name for r in measure)
    for r in top:
        for i, g in enumerate(r.gates):
            if g.gate == "G6" and g.verdict == "warn":
                r.gates[i] = Gate("G6", g.name, "warn",
                                  f"run the {len(measure)} short-listed plans ({names}) in one window on one card "
                                  "group: ABBA order, >= 3 repeats each after 1 warm-up, same steps and shape; "
                                  "decide on medians and only when they differ by more than the spread "
                                  "(fewstep.py analyze reads the matrix)")


def _config_name(plan) -> str:
    return plan.name.replace(" ", "-")


FALLBACK_LAUNCH = ("torchrun --nproc-per-node {devices} YOUR_GEN.py --ulysses {ulysses} --ring {ring} --cfg {cfg} "
                   "--pipefusion {pipefusion} --tp {tp} --steps {steps}")


def emit_matrix(path: str, plans: list, write_matrix, model=None, shape=None, frameworks=None, hw=None) -> dict:
    """Skeleton matrix (dit_s to be filled) for the plans, both tiers, ABBA order, REPEATS repeats, each row with
    its plan's framework and launch command (ditpar.plan.decide.run_recipe), and the fewstep.py run command that measures
    it: one launch= per config, so plans on different frameworks run their own commands."""
    import shlex

    from ditpar.plan.decide import run_recipe

    runs = {}
    for r in plans:
        rec = (run_recipe.for_result(r, model, shape, frameworks, hw, steps="{steps}") if model is not None
               else {"framework": None, "reason": "no model given"})
        runs[r.plan.name] = rec
    records = []
    names = [_config_name(r.plan) for r in plans]
    for tier, steps in (("few", FEW_STEPS), ("anchor", ANCHOR_STEPS)):
        for rep in range(1, REPEATS + 1):
            order = plans if rep % 2 else list(reversed(plans))    # A B, B A, A B, ... (ABBA)
            for r in order:
                rec = runs[r.plan.name]
                fw = rec["framework"] or ""
                launch = (rec["launch"] if fw else FALLBACK_LAUNCH).replace("{steps}", str(steps))
                launch = launch.replace("{{", "{").replace("}}", "}")
                for rank in range(r.plan.devices):
                    records.append({"config": _config_name(r.plan), "tier": tier, "steps": steps, "repeat": rep,
                                    "rank": rank, "dit_s": None, "devices": r.plan.devices,
                                    "tags": _tags(r.plan, fw), "framework": fw or "none",
                                    "launch": launch if fw else launch.format(devices=r.plan.devices,
                                                                              **r.plan.as_dict())})
    write_matrix(path, records, extra_columns=("framework", "launch"))
    configs = []
    for r in plans:
        rec = runs[r.plan.name]
        fields = [f"devices={r.plan.devices}"]
        if rec["framework"]:
            fields.append(f"framework={rec['framework']}")
        fields += [f"{k}={v}" for k, v in r.plan.as_dict().items() if k != "patches"]
        if rec["framework"]:
            fields.append("launch=" + rec["launch"])
        configs.append(" ".join(shlex.quote(w) for w in ["--config", _config_name(r.plan), *fields]))
    used = sorted({rec["framework"] for rec in runs.values() if rec["framework"]})
    lacking = [n for n, rec in runs.items() if not rec["framework"]]
    fallback = f"--launch {shlex.quote(FALLBACK_LAUNCH)} " if lacking else ""
    cmd = (f"python scripts/fewstep.py run {' '.join(configs)} --few-steps {FEW_STEPS} --anchor-steps {ANCHOR_STEPS} "
           f"--repeats {REPEATS} --matrix {shlex.quote(path)} --logdir runs/plan-ab {fallback}"
           f"--dit-regex 'rank(?P<rank>\\d+) diffuse took (?P<dit_s>[0-9.]+)s'")
    notes = []
    if len(used) > 1:
        notes.append(f"mixed frameworks: {', '.join(used)}; each config runs its own launch command (launch=)")
    for n in lacking:
        notes.append(f"{n}: no recipe ({runs[n]['reason']}); it runs the YOUR_GEN.py fallback --launch")
    notes.append("every launcher must print one line per rank 'rankN diffuse took S s' for the DiT stage (or pass "
                 "your own --dit-regex): the frameworks' own timing lines differ")
    return {"path": path, "configs": names, "rows": len(records), "command": cmd, "frameworks": used,
            "launch": {n: (rec["launch"] if rec["framework"] else None) for n, rec in runs.items()}, "notes": notes}


def _tags(plan, framework: str) -> str:
    """The tags fewstep.py run writes for the config emitted for this plan (fields other than devices, launch)."""
    parts = ([f"framework={framework}"] if framework else []) + [f"{k}={v}" for k, v in plan.as_dict().items()
                                                                 if k != "patches"]
    return ";".join(parts)


def extend_payload(payload: dict, results, extra: dict, box: Box) -> None:
    """JSON additions: per-plan band and short_list; short list, sensitivity, link figures, overrides."""
    for rec, r in zip(payload["plans"], results, strict=True):
        band = getattr(r, "band", None)
        ok = band is not None and r.feasible
        rec["predicted_low_s"] = band.low_s if ok else None
        rec["predicted_high_s"] = band.high_s if ok else None
        rec["short_list"] = bool(getattr(r, "short_list", False))
    payload["short_list"] = [r.plan.name for r in extra["short_list"]]
    payload["measure"] = extra["measure"]   # the short list's fastest few: what the conclusion asks to measure
    payload["sensitivity"] = extra["sensitivity"]
    from ditpar.plan.decide.provenance import link_kind

    payload["link_figures"] = [{**rec, "provenance": link_kind(rec, box.hw)} for rec in box.link_records]
    payload["alltoall_figures_used"] = used_alltoall_figures(results, box.hw, box.tun, len(results))
    payload["overrides"] = box.overrides
    payload["compute_calibration"] = box.compute
    payload["band"] = {"model_half_width": uncertainty.MODEL_HALF_WIDTH, "preset_factor": uncertainty.PRESET_FACTOR}
    payload["compare"] = extra["compare"]
    payload["matrix"] = extra["matrix"]
    payload["topology_warnings"] = box.warnings


def _source(rec: dict, hw=None) -> str:
    """Where a link figure comes from, in the table: a --set figure is the user's, not a measurement; a preset
    figure measured on another class is borrowed."""
    from ditpar.plan.decide.provenance import link_kind

    kind = link_kind(rec, hw) if hw is not None else ("given" if rec["how"].startswith("--set ") else
                                                       "measured" if rec["measured"] else "preset")
    return "given (--set)" if kind == "given" else kind


def used_alltoall_figures(results, hw, tun, top: int) -> list[dict]:
    """The all-to-all figure each Ulysses group size of the shown plans was priced with, per link class it crosses
    (issue 42: the footer printed the 4-card table figure for a 2-card run, whose pair all-to-all uses the bus
    bandwidth): {link, cards, GBps, source, plans}, one per (link, group size)."""
    from ditpar.plan.cost import layout
    from ditpar.plan.cost.work import alltoall_flows, alltoall_split, effective_bw, shared_link

    out: dict[tuple[str, int], dict] = {}
    for r in [r for r in results if r.feasible][:top]:
        for g in layout(r.plan, (r.tunables or tun).order).get("ulysses", []):
            if len(g) < 2:
                continue
            flows = alltoall_flows(hw, g)
            for key in alltoall_split(hw, g, 1.0):
                k = len(g)
                rec = out.get((key, k))
                if rec is None:
                    table = hw.links[key].alltoall_bus_GBps(k)
                    n = flows.get(key, 1)
                    if table > 0:
                        listed = max(c for c, _ in hw.links[key].alltoall_GBps if c <= k)
                        source = f"the all-to-all figure of group {listed}"
                    else:
                        smallest = min((c for c, _ in hw.links[key].alltoall_GBps), default=None)
                        source = ("the link's bus bandwidth" + (f" shared by {n} sending ranks" if n > 2 and
                                                                 shared_link(hw, key) else "")
                                  + (f" (the all-to-all figures start at {smallest} cards)" if smallest else ""))
                    rec = out[(key, k)] = {"link": key, "cards": k, "GBps": effective_bw(hw, key, k, n, "alltoall"),
                                           "source": source, "plans": []}
                if r.plan.name not in rec["plans"]:
                    rec["plans"].append(r.plan.name)
    return [out[k] for k in sorted(out, key=lambda kk: (kk[0], kk[1]))]


def _tie_mark(r, extra: dict) -> str:
    """The band table's short-list cell: 'tie, measure' for the plans the conclusion asks to measure."""
    if not (r.short_list and len(extra["short_list"]) > 1):
        return ""
    return "tie, measure" if r.plan.name in extra["measure"] else "tie"


def render(text: str, results, extra: dict, box: Box, top: int) -> str:
    """The ranking's text with the band table, link figures, overrides, comparison and matrix added."""
    feas = [r for r in results if r.feasible]
    shown = feas[:top]
    for r in extra.get("compare_plans", []):
        if r not in shown:
            shown.append(r)
    lines = ["", f"predicted bands (model error +-{uncertainty.MODEL_HALF_WIDTH:.1%} held-out, plus exposed comm on "
             f"preset link figures moved x1.5 / x2 / x3 either way as each is measured / derived / from another class, "
             f"PipeFusion schedule x{uncertainty.PIPELINE_FACTOR:g}); tie = on the short list: at some setting of the preset "
             "link figures, the same for every plan, it could be the fastest; the band states no coverage level: it is "
             f"sized for {uncertainty.RECALL_TARGET:.0%} short-list recall, and held out {uncertainty.BAND_HELD_OUT[1]:.2f} "
             f"of {uncertainty.BAND_HELD_OUT[0]} published rows' latencies fell inside it (plan.py evaluate); measure = "
             "the short list's fastest "
             f"{shortlist.MAX_MEASURE}, the ones the conclusion asks to measure (the other ties only if those come "
             "out within their spread)",
             f"{'#':>3} {'plan':<18}{'latency_s':>10}{'low_s':>10}{'high_s':>10}  short list"]
    for r in shown:
        if not r.feasible:
            lines.append(f"{r.rank:>3} {r.plan.name:<18}{'-':>10}  infeasible")
            continue
        lines.append(f"{r.rank:>3} {r.plan.name:<18}{r.latency_s:>10.3f}{r.band.low_s:>10.3f}{r.band.high_s:>10.3f}  "
                     f"{_tie_mark(r, extra)}".rstrip())
    lines += ["", f"compute: {box.compute}", "link figures (measured = from --bench; given = typed with --set; "
              "preset = templates/hardware; borrowed = a preset figure measured on another device class):"]
    devices = feas[0].plan.devices if feas else 0
    for rec in box.link_records:
        m = re.match(r"all-to-all busbw, group (\d+)$", rec["figure"])
        if m and int(m.group(1)) > devices:   # a table entry no group of this run can reach
            continue
        lines.append(f"  {rec['link']:<13} {rec['figure']:<48} {rec['GBps']:>7.3g} GB/s  "
                     f"{_source(rec, box.hw)}: {rec['how']}")
    used = used_alltoall_figures(results, box.hw, box.tun, top)
    if used:
        lines.append("all-to-all figures the plans above were priced with, per group size:")
        for u in used:
            names = ", ".join(u["plans"][:4]) + (f" and {len(u['plans']) - 4} more" if len(u["plans"]) > 4 else "")
            lines.append(f"  {u['link']:<13} {'all-to-all over ' + str(u['cards']) + ' cards':<48} {u['GBps']:>7.3g} GB/s  "
                         f"{u['source']} ({names})")
    if box.overrides:
        lines.append("overrides (--set): " + "; ".join(box.overrides))
    for w in box.warnings:
        lines.append(f"topology warning: {w}")
    for c in extra["compare"]:
        lines += ["", f"your comparison: {c['a']} vs {c['b']}"]
        lines += [f"  {name}: {split}" for name, split in c.get("head_split", {}).items()]
        if "note" in c:
            lines.append(f"  {c['note']}")
            continue
        lines.append(f"  tie (either could be faster): {tie_text(c)}")
        lines.append(f"  G6 {c['G6']}")
        lines.append(f"  G7 {c['G7']}")
        s = c["sensitivity"]
        if s:
            lines.append(f"  sensitivity: the {s['move']} makes {s['challenger']} beat {s['leader']} (the smallest "
                         f"move of any single input; G7 scales every pattern of a link at once); measure: {s['command']}"
                         + (f" ({s['command_note']})" if s.get("command_note") else ""))
        else:
            lines.append("  sensitivity: no single input within 1/16x..16x flips them")
    if extra["matrix"]:
        m = extra["matrix"]
        lines += ["", f"few-step matrix for {', '.join(m['configs'])}: {m['path']} ({m['rows']} rows, both tiers, ABBA, "
                  f"{REPEATS} repeats); fill it with:", f"  {m['command']}"]
        lines += [f"  note: {n}" for n in m.get("notes", [])]
    return text + "\n".join(lines) + "\n"
