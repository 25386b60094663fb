"""Name process groups by the parallel plan's axes, with the rank layout plan.py uses
(`ditpar.plan.cost.plans.layout`), or by groups the user lists."""

from __future__ import annotations

import re

from ditpar import limits
from ditpar.errors import InputError
from ditpar.plan.cost.plans import DEFAULT_ORDER, Plan, layout, parse_order

AXIS_NAMES = {"tp": "TP", "ulysses": "Ulysses", "ring": "ring", "kv_allgather": "KV-all-gather",
              "attn2d": "Attention2D", "pipefusion": "PipeFusion", "cfg": "CFG", "dp": "DP"}
_TOKENS = {"u": "ulysses", "r": "ring", "ag": "kv_allgather", "a2d": "attn2d", "tp": "tp", "pf": "pipefusion",
           "cfg": "cfg", "dp": "dp", "te": "te"}
_TOKEN = re.compile(r"^(cfg|a2d|ag|tp|pf|dp|te|u|r)(\d+)$", re.IGNORECASE)


def check_world(world: int | None) -> None:
    """--world: a job has at most limits.MAX_DEVICES ranks (the bound plan.py --devices has)."""
    if world is not None and not 1 <= world <= limits.MAX_DEVICES:
        raise InputError(f"--world {world}: expected 1..{limits.MAX_DEVICES} ranks (a job has at most "
                         f"{limits.MAX_DEVICES} devices)")


def parse_plan(text: str, world: int | None) -> tuple[Plan, int]:
    """'U4 R2' / 'cfg2 U2 R2' / 'U4 TE2' (TE: text-encoder TP degree) -> (plan, text-encoder TP degree).

    Without DP in the text, DP fills the rest of --world; the plan's device count must equal --world.
    """
    degrees: dict[str, int] = {}
    for token in text.replace(",", " ").split():
        match = _TOKEN.match(token)
        if not match or match.group(2).strip("0") == "":
            raise InputError(f"--plan {text[:80]!r}: cannot read {token[:40]!r}; expected tokens such as U4 R2 "
                             f"cfg2 TP2 AG2 A2D4 PF2 DP2 TE2 (TE = text-encoder TP)")
        dim = _TOKENS[match.group(1).lower()]
        if dim in degrees:
            raise InputError(f"--plan {text[:80]!r}: {token[:40]!r} repeats an axis")
        digits = match.group(2).lstrip("0")
        if len(digits) > len(str(limits.MAX_DEVICES)) or int(digits) > limits.MAX_DEVICES:
            raise InputError(f"--plan {text[:80]!r}: {token[:40]!r}: a degree is at most {limits.MAX_DEVICES} "
                             "(the devices of one job)")
        degrees[dim] = int(digits)
    product = 1
    for dim, degree in degrees.items():
        product *= degree if dim != "te" else 1
    if product > limits.MAX_DEVICES or (world is not None and product > world):
        bound = limits.MAX_DEVICES if world is None or product > limits.MAX_DEVICES else world
        raise InputError(f"--plan {text[:80]!r} covers {product:,} ranks; at most {bound} "
                         + ("(--world)" if bound == world else "(the devices of one job)"))
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
    top = limits.MAX_RANK_ID if world is None else world - 1
    for i, part in enumerate(p for p in text.split(";") if p.strip()):
        cells = [x.strip() for x in part.split(",") if x.strip()]
        if not all(re.fullmatch(r"-?\d+", x) for x in cells):
            raise InputError(f"--groups {text[:80]!r}: {part[:40]!r} is not a comma-separated list of ranks")
        if len(cells) > limits.MAX_DEVICES:
            raise InputError(f"--groups: group {i} lists {len(cells):,} ranks; a job has at most "
                             f"{limits.MAX_DEVICES}")
        ranks = [int(x) if len(x) <= 12 else -1 for x in cells]
        bad = next((x for x, r in zip(cells, ranks, strict=True) if not 0 <= r <= top), None)
        if bad is not None:
            raise InputError(f"--groups: rank {bad[:20]} of group {i} is out of range; expected 0..{top}"
                             + (f" (--world {world})" if world is not None else ""))
        if not ranks or len(set(ranks)) != len(ranks):
            raise InputError(f"--groups {text[:80]!r}: {part[:40]!r} needs distinct non-negative ranks")
        labels.setdefault(frozenset(ranks), []).append(f"group#{i}")
    if not labels:
        raise InputError(f"--groups {text!r}: no group given")
    return labels
