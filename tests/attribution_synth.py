"""Synthetic event tables and brute-force (one boolean per ns) references for the attribution tests."""

from __future__ import annotations

import numpy as np
import pandas as pd
from ditpar.core.events import make_events


def events(rows: list[tuple], rank: int = 0):
    """rows: (stream, kind, name, family, group, start_ns, dur_ns[, bytes]) -> event table."""
    width = max(len(r) for r in rows)
    rows = [tuple(r) + (None,) * (width - len(r)) for r in rows]
    cols = list(zip(*rows, strict=True))
    data = {"rank": [rank] * len(rows), "stream": list(cols[0]), "kind": list(cols[1]), "name": list(cols[2]),
            "family": list(cols[3]), "group": list(cols[4]), "start_ns": list(cols[5]), "dur_ns": list(cols[6]),
            "core": ["gpu"] * len(rows)}
    if len(cols) > 7:
        data["bytes"] = pd.array(list(cols[7]), dtype="Int64")
    return make_events(data)


def mask(frame, horizon: int) -> np.ndarray:
    """Boolean per ns: covered by any event of the frame."""
    out = np.zeros(horizon, dtype=bool)
    for s, d in zip(frame["start_ns"], frame["dur_ns"], strict=True):
        out[int(s):int(s) + int(d)] = True
    return out


def runs(flags: np.ndarray) -> list[tuple[int, int]]:
    """Maximal runs of True as [start, end)."""
    padded = np.concatenate([[False], flags, [False]]).astype(int)
    d = np.diff(padded)
    return list(zip(np.flatnonzero(d == 1), np.flatnonzero(d == -1), strict=True))


def brute_bubbles(ev, stream: str, families: list[str] | None, tol: int, horizon: int) -> dict[str, int]:
    """Class every ns of every compute-stream gap by the documented rules, one ns at a time."""
    comp = ev[(ev["kind"] == "compute") & (ev["stream"] == stream)]
    lo = int(comp["start_ns"].min())
    hi = int((comp["start_ns"] + comp["dur_ns"]).max())
    busy = mask(comp, horizon)
    window = np.zeros(horizon, dtype=bool)
    window[lo:hi] = True
    gap = window & ~busy
    comm = ev[ev["kind"] == "comm"]
    rel = comm if not families else comm[comm["family"].isin(families)]
    comm_m = mask(comm, horizon)
    other_m = mask(ev[~((ev["kind"] == "compute") & (ev["stream"] == stream)) & (ev["kind"] != "comm")], horizon)
    rel_m = mask(rel, horizon)
    rel_end = (rel["start_ns"] + rel["dur_ns"]).to_numpy()
    released = np.zeros(horizon, dtype=bool)
    for gs, ge in runs(gap):
        cands = [e for e in rel_end if gs < e <= ge and e >= ge - tol]
        if not cands:
            continue
        t = max(cands) - 1
        while t - 1 >= 0 and rel_m[t - 1]:
            t -= 1
        released[max(gs, t):ge] = True
    rest = gap & ~released
    return {"gaps_total_ns": int(gap.sum()), "released_ns": int(released.sum()),
            "running_ns": int((rest & comm_m).sum()), "other_ns": int((rest & ~comm_m & other_m).sum()),
            "idle_ns": int((rest & ~comm_m & ~other_m).sum())}
