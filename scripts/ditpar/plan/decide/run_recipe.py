"""Which framework runs each ranked plan and how: the filled-in launch recipe per plan (plan.py's "run it
on FRAMEWORK:", --json run_recipe, --emit-matrix launch column). The recipes themselves and their rendering
live with the framework profiles (ditpar.plan.inputs.recipes)."""

from __future__ import annotations

from ditpar.plan.inputs.recipes import choose, render, why_none


def for_result(r, model, shape, frameworks, hw, *, steps: str | None = None) -> dict:
    """The recipe of a ranked plan on the framework the ranking named (others that run it as fallback), or
    {'framework': None, 'reason': ...} when no chosen framework runs it or none has a recipe for it."""
    from ditpar.plan.inputs.frameworks import model_family, preferred, runs_each, vae_degree

    family = model_family(model)
    if not r.feasible:
        return {"framework": None, "plan": r.plan.name, "reason": "infeasible: " + r.gates[-1].reason}
    if not frameworks:
        return {"framework": None, "plan": r.plan.name, "reason": "no framework profile chosen"}
    runners = preferred([fw for fw, why in zip(frameworks, runs_each(frameworks, model, hw, shape, r.plan), strict=True)
                         if why is None], hw)
    sharded = "shard" in getattr(r, "unlocks", ())
    if sharded:
        runners = [fw for fw in runners if fw.weight_sharding] or runners
    if r.framework:
        runners.sort(key=lambda fw: fw.name != r.framework)
    if not runners:
        return {"framework": None, "plan": r.plan.name,
                "reason": "no chosen framework runs it (" + ", ".join(fw.name for fw in frameworks) + ")"}
    skipped = []
    for fw in runners:
        rec = choose(fw, family, r.plan)
        if rec is not None:
            out = render(fw, rec, model, shape, r.plan, pad=r.pad_tokens > 0, sharded=sharded, steps=steps,
                         family=family, per_node=int(getattr(hw, "devices_per_node", 0) or 0),
                         vae=vae_degree(fw, model, r.plan), unlocks=tuple(getattr(r, "unlocks", ())))
            if skipped:
                out["notes"].insert(0, "; ".join(skipped) + f"; {fw.name} runs it too")
            ab = nccl_ab(hw, r.plan)
            if ab:
                out["notes"].append(ab)
            return out
        skipped.append(why_none(fw, family, r.plan))
    return {"framework": None, "plan": r.plan.name, "reason": "; ".join(skipped)}


def attach(payload: dict, results, short, model, shape, frameworks, hw) -> str:
    """Add `run_recipe` to every plan of the JSON payload; return the text for rank 1 and `short` (the plans the
    conclusion asks to measure)."""
    recs = {}
    for rec, r in zip(payload["plans"], results, strict=True):
        rec["run_recipe"] = for_result(r, model, shape, frameworks, hw) if r.feasible else None
        recs[r.plan.name] = rec["run_recipe"]
    feas = [r for r in results if r.feasible]
    shown = ([feas[0]] if feas else []) + [r for r in short if feas and r is not feas[0]]
    lines: list[str] = []
    told: dict[tuple[str, str], str] = {}
    for r in shown:
        lines += [""] + render_text(recs[r.plan.name], r, told, model)
    return "\n".join(lines) + ("\n" if lines else "")


def render_text(rec: dict, r, told: dict | None = None, model=None) -> list[str]:
    """Text of one plan's recipe; a recipe already printed in full (`told`) shows its own lines only. With the
    model, a plan that uses Ulysses carries its head split (issue 42: every answer line of such a plan)."""
    from ditpar.plan.decide.report import head_split

    split = head_split(model, r.plan)
    head = f"#{r.rank} {r.plan.name}" + (f" ({split})" if split else "")
    if rec.get("framework") is None:
        return [f"{head}: no recipe: {rec['reason']}"]
    key = (rec["framework"], rec["recipe"])
    first = told is None or key not in told
    lines = [f"{head}: run it on {rec['framework']} ({rec['recipe']}"
             + ("):" if first else f"; rules as for {told[key]}):")]
    if first:
        lines.append(f"  flags read in {rec['source']}")
    if rec["config"]:
        lines += ["  " + ln for ln in rec["config"].splitlines()]
    lines.append(f"  $ {rec['launch']}")
    if first:
        lines.append(f"  world size {rec['world_size']}: {rec['world_rule']}")
        lines += [f"  set together: {t}" for t in rec["together"]]
        if told is not None:
            told[key] = f"#{r.rank}"
    lines += [f"  note: {n}" for n in rec["notes"] if first or not n.startswith("unverified")]
    if rec["prove"]:
        lines.append(f"  prove sharding (record with DITPAR_SCOPE_DIR=runs/scope): {rec['prove']}")
    return lines


def nccl_ab(hw, plan) -> str:
    """On NVIDIA, a plan with collectives: NCCL memory and buffer-registration options are an A/B to measure (not
    priced). NCCL_CUMEM_ENABLE: NCCL's environment variables (docs.nvidia.com/deeplearning/nccl/user-guide/docs/
    env.html); TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK: pytorch/pytorch
    torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp (off by default, and turned off under expandable_segments)."""
    if str(getattr(hw, "vendor", "")).lower() != "nvidia" or plan.devices // max(1, plan.dp) < 2:
        return ""
    return ("measure, not priced: NCCL_CUMEM_ENABLE=1 against 0 and user-buffer registration "
            "(TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK=1; it is off under expandable_segments) change collective "
            "times, most for ring passes on long sequences: run the same plan both ways (plan_bench.py or your "
            "pipeline, one window) and keep the faster")
