"""Small-work pricing: what a rank pays whatever its share of the request, so that it dominates when each rank
holds little (short sequences over many ranks). Three parts, each priced elsewhere and collected here:

- a fixed cost per collective call (Tunables.call_us), on top of the call's link class latency (the hardware preset's
  latency_us per class, times the algorithm's steps): NCCL/HCCL launch, the Python-side wait and the ranks' arrival
  skew; fitted on published tables (CALL_GRID, chosen again without each held-out source by plan.py evaluate);
- kernel efficiency at the per-rank GEMM and attention shapes (cost/efficiency.py, the sourced GEMM curve);
- host dispatch per op (Tunables.launch_us x the ops each block issues, cost/work.py OPS_*).
"""

from __future__ import annotations

import math
from collections.abc import Callable

CALL_GRID = (0.0, 10.0, 20.0)   # us per collective call the held-out fit chooses from
DEFAULT_CALL_US = 10.0          # the value the fit on every published source chooses (plan.py evaluate)


def fit_call_us(speedups: Callable[[float], list[tuple[int, int, float, float]]], grid=CALL_GRID) -> float:
    """The grid value whose predicted speedups over one device (rows of heldout.speedup_rows: measured, predicted)
    have the smallest median |log2(predicted / measured)|; ties go to DEFAULT_CALL_US, then the smaller value."""
    best, best_key = grid[0], None
    for call in grid:
        errs = sorted(abs(math.log2(p / m)) for _, _, m, p in speedups(call) if m > 0 and p > 0)
        if not errs:
            continue
        med = errs[len(errs) // 2] if len(errs) % 2 else 0.5 * (errs[len(errs) // 2 - 1] + errs[len(errs) // 2])
        key = (round(med, 6), call != DEFAULT_CALL_US, call)
        if best_key is None or key < best_key:
            best, best_key = call, key
    return best
