"""Plan names ('U8', 'cfg2 U4', 'U4 R2', 'TP4', 'U2 AG2', 'DP2') -> degrees, and one rank's place in them."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ditpar import limits
from ditpar.errors import InputError
from ditpar.plan.cost.plans import Plan, layout

_TOKEN = re.compile(r"^(cfg|u|r|a2d|ag|tp|pf|dp|m)([0-9]+)$", re.IGNORECASE)
MAX_PLAN_CHARS = 100
_DIM = {"cfg": "cfg", "u": "ulysses", "r": "ring", "ag": "kv_allgather", "a2d": "attn2d", "tp": "tp",
        "pf": "pipefusion", "dp": "dp", "m": "patches"}
SP_DIMS = ("ulysses", "ring", "kv_allgather")
PIPEFUSION_REASON = ("PipeFusion is not built: its forward runs stale K/V of other patches across steps, "
                     "which one synthetic block cannot reproduce; measure it in the real pipeline (fewstep.py run)")
ATTN2D_REASON = ("Attention2D is not built here (TensorRT-LLM VisualGen's mesh of Q and K/V gathers with an LSE "
                 "combine): measure it in TensorRT-LLM (fewstep.py run)")


def parse_plan(text: str) -> Plan:
    """'cfg2 U2 R2' -> Plan(cfg=2, ulysses=2, ring=2); 'single' -> Plan(); an unknown token is an InputError."""
    if len(str(text)) > MAX_PLAN_CHARS:
        raise InputError(f"plan {str(text)[:40]!r}...: {len(str(text))} characters; a plan name is at most "
                         f"{MAX_PLAN_CHARS} (e.g. 'cfg2 U2 R2')")
    words = str(text).replace(",", " ").split()
    if [w.lower() for w in words] == ["single"]:
        return Plan()
    if not words:
        raise InputError(f"plan {text!r}: empty; expected names as plan.py prints them, e.g. 'U8', 'cfg2 U4'")
    degrees: dict[str, int] = {}
    for w in words:
        m = _TOKEN.match(w)
        if not m:
            raise InputError(f"plan {text!r}: unknown part {w!r}; expected cfgN, UN, RN, AGN, A2DN, TPN, PFN, DPN "
                             f"(as plan.py prints plans, e.g. 'cfg2 U2 R2')")
        if len(m.group(2)) > 7 or int(m.group(2)) > limits.MAX_DEVICES:
            raise InputError(f"plan {text!r}: {w!r} has a degree above {limits.MAX_DEVICES} devices")
        dim, n = _DIM[m.group(1).lower()], int(m.group(2))
        if dim in degrees or n < 1:
            raise InputError(f"plan {text!r}: {w!r} repeats a dimension or has degree < 1")
        degrees[dim] = n
    if "patches" in degrees and degrees.get("pipefusion", 1) < 2:
        raise InputError(f"plan {text!r}: M{degrees['patches']} is PipeFusion's patch count; it needs PFN "
                         "with N >= 2 (e.g. 'PF2 M4')")
    if degrees.get("cfg", 1) > 2:
        raise InputError(f"plan {text!r}: CFG parallel splits two branches, degree 1 or 2")
    if sum(degrees.get(d, 1) > 1 for d in ("ring", "kv_allgather", "attn2d")) > 1:
        raise InputError(f"plan {text!r}: ring, AllGather-KV and Attention2D share one slot (give one of them)")
    return Plan(**degrees)


@dataclass(frozen=True)
class RankPlace:
    """One rank's groups (global ranks) and its index in each dimension of a plan."""

    plan: Plan
    rank: int
    groups: dict[str, list[int]]
    index: dict[str, int]

    @property
    def sp_index(self) -> int:
        """Which sequence shard this rank holds: Ulysses innermost, then ring or AllGather-KV."""
        outer = self.index["ring"] if self.plan.ring > 1 else self.index["kv_allgather"]
        return self.index["ulysses"] + self.plan.ulysses * outer


def place(plan: Plan, rank: int, world: int) -> RankPlace:
    """Groups of `rank` in `plan` laid out as plan.py lays ranks out (innermost tp, ulysses, ring, ...)."""
    if plan.devices != world:
        raise InputError(f"plan {plan.name!r} uses {plan.devices} device(s); the launched world has {world} "
                         f"(torchrun --nproc-per-node {plan.devices})")
    groups, index = {}, {}
    for dim, grs in layout(plan).items():
        mine = next(g for g in grs if rank in g)
        groups[dim], index[dim] = mine, mine.index(rank)
    return RankPlace(plan, rank, groups, index)


def all_groups(plan: Plan) -> dict[str, list[list[int]]]:
    """Every group of every dimension with degree > 1 (each rank must create all of them, in this order)."""
    return {dim: grs for dim, grs in layout(plan).items() if plan.degree(dim) > 1 and dim != "pipefusion"}
