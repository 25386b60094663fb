"""Plan names as plan.py prints them ('cfg2 U4 R2', 'TP8', 'single'), read back into degrees, so that the
tools run after a plan (scope_probe.py, the plan report) take the very name the ranking and recipe used."""

from __future__ import annotations

import re

from ditpar.errors import InputError

PREFIX = {"cfg": "cfg", "U": "ulysses", "R": "ring", "AG": "kv_allgather", "A2D": "attn2d", "TP": "tp",
          "PF": "pipefusion", "DP": "dp", "M": "patches"}
_TOKEN = re.compile(r"(cfg|A2D|AG|TP|PF|DP|U|R|M)([1-9][0-9]*)")


def parse_plan_name(name: str) -> dict[str, int]:
    """'cfg2 U4 R2' -> {'cfg': 2, 'ulysses': 4, 'ring': 2, ...} with every degree present (1 when absent)."""
    degrees = {v: 1 for v in PREFIX.values()}
    text = name.strip()
    if text.lower() == "single":
        return degrees
    seen = set()
    for tok in text.replace("-", " ").split():
        m = _TOKEN.fullmatch(tok)
        if m is None:
            raise InputError(f"plan {name!r}: {tok!r} is not a degree; names as plan.py prints them, e.g. "
                             f"'cfg2 U4 R2', 'TP8', 'U2 AG2', 'U2 A2D9', 'PF4 M8', 'single'")
        key = PREFIX[m.group(1)]
        if key in seen:
            raise InputError(f"plan {name!r}: {m.group(1)} given twice")
        seen.add(key)
        degrees[key] = int(m.group(2))
    return degrees
