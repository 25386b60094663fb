"""Rank every plan for model x hardware x devices x shape, attach the gates, write the conclusion."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ditpar.errors import InputError
from ditpar.plan.cost.plans import Plan, enumerate_plans
from ditpar.plan.cost.shape import Shape
from ditpar.plan.cost.timing import Breakdown, Tunables, predict
from ditpar.plan.decide.unlocks import add_weight_gather


@dataclass
class PlanResult:
    plan: Plan
    breakdown: Breakdown
    gates: list
    feasible: bool
    rank: int = 0
    framework: str = ""          # the preferred framework that runs the plan (frameworks.preferred; '' without profiles)
    exact: bool = True           # same output as one device up to reduction order
    exact_reason: str = ""
    pad_tokens: int = 0          # tokens the framework pads the sequence with (costed)
    speedup_vs_1: float = float("nan")
    tunables: Tunables | None = None  # what it was predicted with (the runner's TP host cost included)
    vae_devices: int = 1         # cards the named framework splits the VAE decode over (frameworks.vae_degree)
    unlocks: tuple[str, ...] = ()  # memory unlocks applied and priced (decide.unlocks.NAMES: te, vae, shard, offload)

    @property
    def latency_s(self) -> float:
        return self.breakdown.latency_s


def pair_tunables(a: PlanResult, b: PlanResult | None, tun: Tunables) -> Tunables:
    """Tunables to compare two ranked plans under: those of the TP plan among them (the per-linear host cost
    applies only to tp > 1, so the other plan is priced as it was ranked), else `tun`."""
    for r in (a, b):
        if r is not None and r.plan.tp > 1 and r.tunables is not None:
            return r.tunables
    return tun


def calibrate(model, hw, shape: Shape, ref_latency_s: float, tun: Tunables, plan: Plan | None = None) -> Tunables:
    """Scale compute so that the prediction of `plan` (default one device) equals its measured latency: one scale,
    the machine's speed; the spread between plans (links, overheads) is the model's and is not calibrated."""
    plan = plan or Plan()
    if not ref_latency_s > 0:
        raise InputError(f"--ref-latency {ref_latency_s}: expected a positive number of seconds")
    single = predict(model, hw, shape, plan, tun)
    fixed = single.latency_s - single.compute_s
    if ref_latency_s <= fixed:
        raise InputError(f"--ref-latency {ref_latency_s} s is below the modelled non-compute time {fixed:.3g} s"
                         + ("" if plan.devices == 1 else f" of {plan.name} (communication and host time)"))
    scale = (ref_latency_s - fixed) / single.compute_s * tun.compute_scale
    # host and device combine as a p-norm (timing.host_device_s), so latency is not exactly fixed + compute:
    # a few multiplicative corrections land the single-device prediction on the measurement
    for _ in range(8):
        got = predict(model, hw, shape, plan, dataclasses.replace(tun, compute_scale=scale)).latency_s
        if abs(got - ref_latency_s) <= 1e-9 * ref_latency_s:
            break
        scale *= ref_latency_s / got
    return dataclasses.replace(tun, compute_scale=scale)


def rank_plans(model, hw, shape: Shape, devices: int, tun: Tunables, *, with_dp: bool = True,
               patches: int = 0, warmup: int = 1, frameworks=None,
               allow_approximate: bool = False, detail: bool = True) -> list[PlanResult]:
    """Predict and gate every plan; feasible plans first, exact before approximate (unless
    allow_approximate), fastest first. With `frameworks` (profiles), G1 keeps only plans one of them
    runs, an indivisible sequence is padded as that framework pads, and weight sharding unlocks G2
    only where that framework has it."""
    from ditpar.plan.cost.work import padding_for
    from ditpar.plan.decide import gates
    from ditpar.plan.inputs.frameworks import (
        exactness,
        model_family,
        preferred,
        runs_each,
        tp_host_tunables,
        vae_degree,
    )
    from ditpar.plan.inputs.recipes import choose

    total = hw.devices_per_node * hw.nodes
    if devices > total:
        raise InputError(f"--devices {devices}: {hw.name} has {total} devices "
                         f"(use a multi-node preset, e.g. '{hw.name}, 2 nodes')")
    single_s = predict(model, hw, shape, Plan(), tun).latency_s
    results = []
    for plan in enumerate_plans(devices, shape.cfg, patches=patches, warmup=warmup, with_dp=with_dp):
        exact, why_exact = exactness(plan)
        g1 = gates.availability(model, hw, shape, plan, frameworks)
        if g1.verdict == "veto":
            results.append(PlanResult(plan, Breakdown(plan=plan, latency_s=float("inf")), [g1], False,
                                      exact=exact, exact_reason=why_exact))
            continue
        runners = preferred([fw for fw, why in zip(frameworks, runs_each(frameworks, model, hw, shape, plan),
                                                   strict=True) if why is None], hw) if frameworks else []
        # the framework named is one whose profile has a launch recipe for the plan where any has: the column
        # and the printed 'run it on' then agree (xDiT runs Mochi-1 only from mochi-xdit; ParaAttention has one)
        runners.sort(key=lambda fw: choose(fw, model_family(model), plan) is None)
        if plan.kv_allgather > 1:   # the one-call AllGather-KV where a framework has it (the loop costs more)
            runners.sort(key=lambda fw: fw.kv_gather_impl != "one_call")
        pad = padding_for(model, shape, plan) if frameworks else 0
        pshape = dataclasses.replace(shape, pad_tokens=pad) if pad else shape
        plan_tun = tp_host_tunables(tun, runners[0] if runners else None, plan)
        bd = predict(model, hw, pshape, plan, plan_tun)
        if plan.kv_allgather > 1 and getattr(model, "attention", "softmax") == "linear":
            bd.notes.append(f"AG{plan.kv_allgather} on linear attention: per-head state all-reduce (no K/V gather, no "
                            "head split; plan/cost/linear_attention.py)")
        if pad:
            how = "uneven split" if runners[0].sequence_indivisible == "uneven" else "padding"
            bd.notes.append(f"sequence not divisible by sp = {plan.sp}: {runners[0].name} {how}, costed as "
                            f"{pad} padded tokens (the largest shard sets the pace)")
        g2 = gates.memory_fit(model, hw, pshape, plan, bd)
        feasible = g2.verdict != "veto"
        unlocked: tuple[str, ...] = ()
        if g2.verdict == "warn":
            sharders = [fw for fw in runners if fw.weight_sharding]
            if frameworks and not sharders:
                g2 = gates.memory_fit(model, hw, pshape, plan, bd, can_shard=False)
                if "weight sharding" in g2.reason.split("lossless unlock:", 1)[-1]:
                    g2 = gates.Gate("G2", "memory fit", "veto", g2.reason
                                    + f"; but none of {', '.join(fw.name for fw in runners)} shards weights")
                feasible = False
            else:
                runners = sharders or runners
                add_weight_gather(hw, pshape, plan, bd)
                g2 = sharded_gate(hw, plan, bd, g2)
                unlocked = ("shard",)
        if g2.verdict == "tight" or (not feasible and " GB > " in g2.reason.split(";", 1)[0]):
            from ditpar.plan.decide.unlocks import offloaders, unlock

            found = unlock(model, hw, pshape, plan, bd, runners, frameworks)
            if g2.verdict == "tight" and (found is None or found[2].verdict != "warn"
                                          or found[0].latency_s > bd.latency_s * (1 + TIGHT_UNLOCK_COST)):
                found = None   # fits, tight: no unlock gives the headroom for (almost) nothing; run it as it is
            if found is not None:
                before = g2
                bd, unlocked, g2 = found
                feasible = True
                if "shard" in unlocked:
                    runners = [fw for fw in runners if fw.weight_sharding] or runners
                if "offload" in unlocked:
                    runners = offloaders(runners, plan) or runners
                if unlocked == ("shard",) and g2.verdict == "warn":   # one memory story: the sharded figure first
                    g2 = sharded_gate(hw, plan, bd, before)
        res = PlanResult(plan, bd, [g1, g2], feasible, framework=runners[0].name if runners else "",
                         exact=exact, exact_reason=why_exact, pad_tokens=pad, tunables=plan_tun,
                         vae_devices=vae_degree(runners[0], model, plan) if runners else 1, unlocks=unlocked)
        res.speedup_vs_1 = single_s / bd.latency_s if bd.latency_s > 0 else float("nan")
        results.append(res)
    useful = [r for r in results if r.feasible and (devices == 1 or r.plan.dp < devices)]
    if not useful:
        reasons = sorted({r.gates[-1].reason.split(";")[0] for r in results if not r.feasible})[:3]
        # the hint names a plan that would serve the request (a DPn plan on n cards only serves other requests)
        unlock = sorted((r for r in results if not r.feasible and r.gates[-1].gate == "G2"
                         and (devices == 1 or r.plan.dp < devices)
                         and "lossless unlock" in r.gates[-1].reason), key=lambda r: r.breakdown.memory_GB)
        hint = (f"; {unlock[0].plan.name} fits with the " + unlock[0].gates[-1].reason.split("; lossless ", 1)[1]
                if unlock else "")
        raise InputError(f"no plan can use {devices} devices for one request of {model.name} on {hw.name} "
                         f"(G1/G2 vetoes, e.g.): " + " | ".join(reasons) + hint)
    if not allow_approximate and not any(r.exact for r in useful):
        best = min(useful, key=lambda r: r.latency_s)
        mem = [r for r in results if not r.feasible and r.exact and r.gates[-1].gate == "G2"]
        exact_vetoes = ([f"{m.plan.name}: {m.gates[-1].reason}" for m in sorted(mem, key=lambda r: r.breakdown.memory_GB)[:1]]
                        or sorted({r.gates[-1].reason.split(";")[0] for r in results if not r.feasible and r.exact})[:2])
        raise InputError(f"no exact plan can use {devices} devices for {model.name} on {hw.name}; only approximate "
                         f"plans fit (best {best.plan.name}: stale activations change the output): add "
                         f"--allow-approximate to rank them (exact plans fail: " + " | ".join(exact_vetoes) + ")")
    # a plan with dp > 1 serves other requests on its replicas: for one request it is the same plan on fewer
    # cards, so it ranks after every feasible plan that puts all cards on the request (and is never runner-up)
    results.sort(key=lambda r: (not r.feasible, not (r.exact or allow_approximate), r.plan.dp > 1, r.latency_s,
                                r.plan.dp))
    for i, r in enumerate(results, 1):
        r.rank = i
    feas = [r for r in results if r.feasible]
    if not detail:   # G1/G2 and the order only (the guard test over every preset pair)
        return results
    for r in feas:
        r.gates.append(gates.comm_lower_bound(model, hw, shape, r.plan, r.breakdown, tun))
        r.gates.append(gates.plumbing(model, hw, shape, r.plan, r.tunables or tun))
        r.gates.append(gates.masking_gate(model, hw, shape, r.plan, r.tunables or tun))
    pair = [feas[0], runner_up(feas)]
    for r in feas:
        if r is pair[0] or r is pair[1]:
            other = pair[1] if r is pair[0] else pair[0]
            r.gates.append(gates.ab_gate(1, r.plan, [other.plan] if other else []))
        else:
            r.gates.append(gates.ab_gate(3, r.plan, []))
    runner = runner_up(feas)
    if runner is not None:
        g7 = gates.projection(model, hw, shape, feas[0].plan, runner.plan, pair_tunables(feas[0], runner, tun))
        feas[0].gates.append(g7)
        runner.gates.append(g7)
    return results


#: a plan that fits, tight takes an unlock that gives it the 90 % headroom when that costs at most this share of its latency
TIGHT_UNLOCK_COST = 0.01


def half_devices(model, hw, shape: Shape, devices: int, tun: Tunables, lead: PlanResult | None, **kw) -> dict | None:
    """The best plan on half the cards (cards 0..devices/2-1 of the same box, the same flags), so that "N vs 2N
    cards" is answered from one run (issue 42). None for an odd count or under 4 cards; {'devices', 'error'} when no
    plan fits half the cards."""
    if devices < 4 or devices % 2 or lead is None:   # 2 vs 1: the one-device line says it
        return None
    half = devices // 2
    try:
        res = rank_plans(model, hw, shape, half, tun, detail=False, **kw)
    except InputError as exc:
        return {"devices": half, "error": str(exc)}
    best = next((r for r in res if r.feasible and (half == 1 or r.plan.dp < half)), None)
    if best is None:
        return {"devices": half, "error": "no feasible plan"}
    return {"devices": half, "plan": best.plan.name, "framework": best.framework,
            "predicted_latency_s": best.latency_s, "speedup_vs_1": best.speedup_vs_1,
            "gain_of_double": best.latency_s / lead.latency_s}


def half_devices_line(h: dict | None, lead: PlanResult | None) -> str:
    """One line: the best plan on half the cards and what doubling them gains."""
    if not h or lead is None:
        return ""
    if "error" in h:
        return f"on {h['devices']} of these cards: no plan fits ({h['error']})"
    on = f" on {h['framework']}" if h["framework"] else ""
    gain = h["gain_of_double"]
    than = (f"are {gain:.2f}x faster than {h['devices']}" if gain >= 1 else
            f"are slower than {h['devices']} ({lead.latency_s:.3f} s): doubling the cards does not pay")
    return (f"on {h['devices']} of these cards (0-{h['devices'] - 1}) the best plan is {h['plan']}{on}: "
            f"{h['predicted_latency_s']:.3f} s predicted, {h['speedup_vs_1']:.1f}x one device; {lead.plan.devices} "
            f"cards ({lead.plan.name}) {than} (DiT loop)")


def sharded_gate(hw, plan: Plan, bd: Breakdown, g2):
    """G2 of a plan the ranking shards (warn): it leads with the figure mem_GB shows, the sharded one, then the
    unsharded check that made sharding necessary (issue 42: one memory story per plan)."""
    from ditpar.plan.decide import gates

    cap = hw.memory_GB * gates.MEMORY_HEADROOM
    return gates.Gate("G2", "memory fit", "warn",
                      f"needs layer-wise weight sharding over the {plan.devices} ranks (applied here, its all-gather "
                      f"priced): {gates._gb(bd.memory_GB, cap)} GB per rank sharded (mem_GB) <= "
                      f"{gates._gb(cap, bd.memory_GB)} GB; unsharded " + g2.reason)


def sharding_sentence(r) -> str:
    """The conclusion's sentence on a plan that fits only with weight sharding (G2 warn), '' otherwise."""
    g2 = next((g for g in r.gates if g.gate == "G2"), None)
    if g2 is not None and g2.verdict == "tight":
        return (f" {r.plan.name} fits, tight (G2): {r.breakdown.memory_GB:.1f} GB per rank, above the 90 % headroom of "
                f"the card; it runs if nothing else holds memory there.")
    if r.unlocks and r.unlocks != ("shard",):
        from ditpar.plan.decide.unlocks import NAMES

        return (f" {r.plan.name} fits only with {' + '.join(NAMES[k] for k in r.unlocks)} (G2: applied and priced, "
                f"{r.breakdown.memory_GB:.1f} GB per rank): turn {'it' if len(r.unlocks) == 1 else 'them'} on"
                f"{' (' + r.framework + ')' if r.framework else ''} or the prediction does not hold.")
    if g2 is None or g2.verdict != "warn":
        return ""
    bd = r.breakdown
    unsharded = bd.memory_GB + bd.memory_parts_GB.get("weights_GB", 0.0) * (r.plan.devices - 1)
    return (f" {r.plan.name} fits only with layer-wise weight sharding (G2 warn: {unsharded:.1f} GB per rank "
            f"unsharded, {bd.memory_GB:.1f} GB sharded; its weight all-gather is priced): turn weight sharding on"
            f"{' (' + r.framework + ')' if r.framework else ''} or the prediction does not hold.")


def one_device_sentence(a: PlanResult, feas: list[PlanResult]) -> str:
    """When the fastest plan that splits the request is slower than one device: say so first (issue 42: the
    conclusion recommended a parallel plan at 0.2x). '' when a parallel plan is faster than one device."""
    if a.plan.devices <= 1 or not a.speedup_vs_1 < 1 or a.plan.dp > 1:
        return ""
    single = a.speedup_vs_1 * a.latency_s
    n = a.plan.devices
    head = (f"One device beats every parallel plan: the fastest that splits the request, {a.plan.name}"
            + (f" on {a.framework}" if a.framework else "") + f", is predicted at {a.latency_s:.3g} s against "
            f"{single:.3g} s on one device ({a.speedup_vs_1:.2g}x). ")
    if any(r.plan.dp == n for r in feas):
        return head + (f"Run each request on one card: DP{n} ({n} replicas) serves {n} requests at once; splitting a "
                       "request makes it slower here.")
    return head + (f"One card cannot run it as ranked here (DP{n} is not among the feasible plans: G2 or --no-dp), "
                   f"so {a.plan.name} is the plan that fits; it is slower than one card would be.")


def runner_up(feas: list[PlanResult]) -> PlanResult | None:
    """The best plan that differs from the leader in more than its data-parallel degree and, when the leader
    uses every card for the request, has no data parallelism either (dp > 1 does not speed one request up);
    an exact leader is compared with exact plans only (an approximate one is not its alternative)."""
    if not feas:
        return None
    lead = dataclasses.replace(feas[0].plan, dp=1)
    return next((r for r in feas[1:] if dataclasses.replace(r.plan, dp=1) != lead
                 and (r.exact or not feas[0].exact) and (r.plan.dp == 1 or feas[0].plan.dp > 1)), None)


def conclusion(results: list[PlanResult], model, hw, shape: Shape) -> str:
    """Conditional conclusion in the template of references/parallel-selection.md §6."""
    feas = [r for r in results if r.feasible]
    if not feas:
        return "No feasible plan."
    a = feas[0]
    b = runner_up(feas)
    if b is None:
        faster = [r for r in feas if r.latency_s < a.latency_s and not r.exact]
        return (f"Only {a.plan.name} is feasible" + (" among exact plans" if a.exact and len(feas) > 1 else "")
                + (f" (on {a.framework})" if a.framework else "") + f": predicted {a.latency_s:.3g} s, "
                f"{min(a.speedup_vs_1, a.plan.devices // a.plan.dp):.1f}x one device in the DiT loop." + sharding_sentence(a)
                + (f" A faster approximate plan exists ({faster[0].plan.name}, {faster[0].latency_s:.3g} s, "
                   f"stale activations): --allow-approximate ranks it." if faster else ""))
    faster = [r for r in feas if r.latency_s < a.latency_s and not r.exact]
    approx = (f" A faster approximate plan exists ({faster[0].plan.name}, {faster[0].latency_s:.3g} s, "
              f"stale activations): it changes the output; --allow-approximate ranks it." if faster else "")
    slow = one_device_sentence(a, feas)
    if slow:
        return slow + sharding_sentence(a) + approx
    lead = b.latency_s / a.latency_s - 1
    g7 = next((g for g in a.gates if g.gate == "G7"), None)
    flips = ""
    if g7 is not None:
        parts = g7.reason.removesuffix(" (projection, not measurement)").split("; ", 1)
        flips = parts[1] if len(parts) > 1 else parts[0]
    ab = a.breakdown
    dom = max(ab.exposed_by_link_s, key=ab.exposed_by_link_s.get)
    share = ab.exposed_comm_s / ab.latency_s if ab.latency_s else 0.0
    gqa = "GQA" if model.kv_heads < model.heads else "no GQA"
    runs_on = f" on {a.framework}" if a.framework else ""
    kind = "exact" if a.exact else "approximate (stale activations)"
    pad = f" The sequence is padded by {a.pad_tokens} tokens." if a.pad_tokens else ""
    from ditpar.plan.decide.report import head_split

    split = head_split(model, a.plan)
    kind += f"; {split}" if split else ""
    return (f"On {hw.name} with {a.plan.devices} devices, {model.name} at {shape.describe()} ({gqa}): "
            f"{a.plan.name}{runs_on} ({kind}) is predicted fastest ({a.latency_s:.3g} s, "
            f"{min(a.speedup_vs_1, a.plan.devices // a.plan.dp):.1f}x one device in the DiT loop; end to end: the "
            f"headline), {lead:.1%} ahead of {b.plan.name}; "
            f"its exposed communication is {share:.0%} of the latency, mostly {dom}. "
            f"Conditions: {flips}. "
            f"This is a prediction: confirm with the G6 A/B pair before committing.{pad}{approx}"
            + sharding_sentence(a))
