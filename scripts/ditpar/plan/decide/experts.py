"""Expert parallel for DiTs whose FFN routes each token to a few experts (HiDream-I1): not in the plan space,
because no framework profile runs it; the answer says so in one line (plan.py --json expert_parallel)."""

from __future__ import annotations


def record(model) -> dict | None:
    """None for a dense FFN; else the routed expert count and why no plan splits the experts."""
    n = int(getattr(model, "token_experts", 1) or 1)
    if n <= 1:
        return None
    return {"token_experts": n, "offered": False,
            "reason": "no framework profile here has an expert-parallel form (none was found running a DiT's "
                      "per-token experts split over cards); every plan holds all experts on each card (their memory "
                      "counted)"}


def line(model) -> str:
    """The one-line note under the table, or '' for a dense model."""
    r = record(model)
    if r is None:
        return ""
    return (f"expert parallel: not offered: {model.name} routes each token to a few of its {r['token_experts']} FFN "
            f"experts, and {r['reason']}")
