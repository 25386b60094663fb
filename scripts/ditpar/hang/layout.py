"""Name process groups by the parallel plan's axes, with the rank layout plan.py uses
(`ditpar.plan.cost.plans.layout`), or by groups the user lists."""

from __future__ import annotations

import re

from ditpar.errors import InputError
from ditpar.plan.cost.plans import DEFAULT_ORDER, Plan, layout, parse_order

AXIS_NAMES = {"tp": "TP", "ulysses": "Ulysses", "ring": "ring", "kv_allgather": "KV-all-gather",
              "pipefusion": "PipeFusion", "cfg": "CFG", "dp": "DP"}
_TOKENS = {"u": "ulysses", "r": "ring", "ag": "kv_allgather", "tp": "tp", "pf": "pipefusion", "cfg": "cfg",
           "dp": "dp", "te": "te"}
_TOKEN = re.compile(r"^(cfg|ag|tp|pf|dp|te|u|r)(\d+)$", re.IGNORECASE)


def parse_plan(text: str, world: int | None) -> tuple[Plan, int]:
    """'U4 R2' / 'cfg2 U2 R2' / 'U4 TE2' (TE: text-encoder TP degree) -> (plan, text-encoder TP degree).

    Without DP in the text, DP fills the rest of --world; the plan's device count must equal --world.
    """
    degrees: dict[str, int] = {}
    for token in text.replace(",", " ").split():
        match = _TOKEN.match(token)
        if not match or int(match.group(2)) < 1:
            raise InputError(f"--plan {text!r}: cannot read {token!r}; expected tokens such as U4 R2 cfg2 TP2 "
                             f"AG2 PF2 DP2 TE2 (TE = text-encoder TP)")
        dim = _TOKENS[match.group(1).lower()]
        if dim in degrees:
            raise InputError(f"--plan {text!r}: {token!r} repeats an axis")
        degrees[dim] = int(match.group(2))
    te = degrees.pop("te", 1)
    plan = Plan(**degrees)
    if world is not None and "dp" not in degrees and world % plan.devices == 0:
        plan = Plan(**{**degrees, "dp": world // plan.devices})
    n = world if world is not None else plan.devices
    if plan.devices != n:
        raise InputError(f"--plan {text!r} covers {plan.devices} ranks, --world is {n}")
    if n % te:
        raise InputError(f"--plan {text!r}: text-encoder TP {te} does not divide {n} ranks")
    return plan, te


def plan_labels(text: str, world: int | None, order_text: str | None = None) -> tuple[int, dict[frozenset, list[str]]]:
    """(world, {rank set: [labels]}) for every group of every axis of degree > 1, plus the world.

    Text-encoder TP groups are contiguous blocks of TE ranks (the encoder runs beside the DiT layout).
    """
    plan, te = parse_plan(text, world)
    order = parse_order(order_text) if order_text else DEFAULT_ORDER
    labels: dict[frozenset, list[str]] = {frozenset(range(plan.devices)): ["world"]}
    for dim, groups in layout(plan, order).items():
        if plan.degree(dim) < 2:
            continue
        for i, g in enumerate(groups):
            labels.setdefault(frozenset(g), []).append(f"{AXIS_NAMES[dim]}#{i}")
    if te > 1:
        te_groups = layout(Plan(tp=te, dp=plan.devices // te))["tp"]
        for i, g in enumerate(te_groups):
            labels.setdefault(frozenset(g), []).append(f"text-encoder-TP#{i}")
    return plan.devices, labels


def given_labels(text: str, world: int | None) -> dict[frozenset, list[str]]:
    """--groups '0,1,2,3;0,1;2,3' -> {rank set: ['group#i']} (ranks checked against --world)."""
    labels: dict[frozenset, list[str]] = {}
    for i, part in enumerate(p for p in text.split(";") if p.strip()):
        try:
            ranks = [int(x) for x in part.split(",") if x.strip()]
        except ValueError:
            raise InputError(f"--groups {text!r}: {part!r} is not a comma-separated list of ranks") from None
        if not ranks or len(set(ranks)) != len(ranks) or min(ranks) < 0:
            raise InputError(f"--groups {text!r}: {part!r} needs distinct non-negative ranks")
        if world is not None and max(ranks) >= world:
            raise InputError(f"--groups {text!r}: rank {max(ranks)} is outside --world {world}")
        labels.setdefault(frozenset(ranks), []).append(f"group#{i}")
    if not labels:
        raise InputError(f"--groups {text!r}: no group given")
    return labels
