"""How plan timings are taken (references/fewstep-validation.md): warm-up excluded, plans interleaved
A B .. B A per repeat, >= 3 repeats, the slowest rank of every sample, median and range over repeats."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence

MIN_REPEATS = 3
DISPERSION_PCT = 3.0   # fewstep.py analyze's noise gate: (max - min) / median over repeats


def abba_orders(n_plans: int, repeats: int) -> list[list[int]]:
    """Plan order per repeat: forward on odd repeats, reversed on even ones (A B, B A, A B, ...)."""
    fwd = list(range(n_plans))
    return [fwd if k % 2 == 0 else fwd[::-1] for k in range(repeats)]


def time_calls(fn: Callable[[], None], iters: int, sync: Callable[[], None]) -> float:
    """Seconds per call of fn, wall clock between device syncs (iters calls back to back)."""
    sync()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    sync()
    return (time.perf_counter() - t0) / iters


def summarize(samples: Sequence[float]) -> dict:
    """Median, min, max and the dispersion (range over median, %) of one plan's repeats."""
    med = statistics.median(samples)
    lo, hi = min(samples), max(samples)
    return {"median": med, "min": lo, "max": hi,
            "dispersion_pct": 100.0 * (hi - lo) / med if med > 0 else float("nan")}


def verdicts(rows: list[dict], tie_pct: float = DISPERSION_PCT) -> None:
    """Set each row's verdict: wrong (check failed, not timed), noisy (dispersion over the gate), fastest,
    tie (within the gate of the fastest: not ordered by this measurement) or slower."""
    timed = [r for r in rows if r.get("verdict") not in ("wrong", "not-built")]
    for r in timed:
        r["verdict"] = "noisy" if not r["dispersion_pct"] <= DISPERSION_PCT else ""
    clean = [r for r in timed if r["verdict"] == ""]
    if not clean:
        return
    best = min(clean, key=lambda r: r["step_s"])
    for r in clean:
        gap = 100.0 * (r["step_s"] / best["step_s"] - 1)
        r["verdict"] = "fastest" if r is best else ("tie" if gap <= tie_pct else "slower")
