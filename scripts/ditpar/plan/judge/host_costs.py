"""How a held-out fold chooses the fixed costs a plan pays whatever its share of the work: host cost per eager op
(`launch_us`), ring overlap efficiency and the fixed cost per collective call (`call_us`), from a grid, on the
training tables only. Two rules (benchmarks/VALIDATION.md section 7.25):

- sequential (what `plan.py evaluate` uses): launch and overlap by pairwise order at the default call cost, then the
  call cost by the median speedup error at that launch and overlap;
- joint: every grid point judged on what the constants predict, the speedup over one device: the smallest median
  |log2(predicted / measured)| wins; ties go to the larger pairwise accuracy, then to the defaults.

The two costs trade against each other (a higher cost per op and a lower cost per call give nearly the same latency
on the plans of one table), so the sequential rule can land on a pair whose speedup error the joint rule beats.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence

from ditpar.plan.cost.small_work import DEFAULT_CALL_US

DEFAULT_LAUNCH_US = 25.0   # eager host cost per op the model prices with (cost/timing.Tunables.launch_us)
DEFAULT_OVERLAP = 0.0      # no ring overlap unless the tables say otherwise
DIGITS = 6                 # medians equal to this many decimals are a tie
RULES = ("sequential", "joint")

Point = tuple[float, float, float]   # (launch_us, overlap_efficiency, call_us)
# figures(point) -> (median |log2(pred / measured speedup)| on the training rows or None, training pairwise accuracy)
Figures = Callable[[Point], tuple[float | None, float]]


def median_abs_log2(pairs: Iterable[tuple[float, float]]) -> float | None:
    """Median |log2(predicted / measured)| over (measured, predicted) speedups; None when there is none."""
    errs = sorted(abs(math.log2(p / m)) for m, p in pairs if m > 0 and p > 0)
    if not errs:
        return None
    mid = len(errs) // 2
    return errs[mid] if len(errs) % 2 else 0.5 * (errs[mid - 1] + errs[mid])


def choose_joint(launches: Sequence[float], overlaps: Sequence[float], calls: Sequence[float],
                 figures: Figures) -> Point:
    """The grid point with the smallest training speedup error, then the larger pairwise accuracy, then the one
    nearest the defaults (launch, then call, then overlap). A point without speedup rows ranks last."""
    def key(point: Point):
        err, acc = figures(point)
        la, ov, ca = point
        return (math.inf if err is None else round(err, DIGITS), -acc, abs(la - DEFAULT_LAUNCH_US),
                abs(ca - DEFAULT_CALL_US), abs(ov - DEFAULT_OVERLAP), la, ca, ov)
    return min(((la, ov, ca) for la in launches for ov in overlaps for ca in calls), key=key)


def choose_sequential(launches: Sequence[float], overlaps: Sequence[float], calls: Sequence[float],
                      figures: Figures, call0: float = DEFAULT_CALL_US) -> Point:
    """Launch and overlap with the best training pairwise accuracy at the call cost `call0` (ties: nearest the
    defaults, then the first in grid order), then the call cost with the smallest training speedup error at that
    launch and overlap (ties: DEFAULT_CALL_US, then the smaller)."""
    best, chosen = None, (launches[0], overlaps[0])
    for la in launches:
        for ov in overlaps:
            key = (figures((la, ov, call0))[1], -abs(la - DEFAULT_LAUNCH_US), -abs(ov - DEFAULT_OVERLAP))
            if best is None or key > best:
                best, chosen = key, (la, ov)
    errs = {c: figures((*chosen, c))[0] for c in calls}
    scored = [c for c in calls if errs[c] is not None]
    if not scored:
        return (*chosen, calls[0])
    return (*chosen, min(scored, key=lambda c: (round(errs[c], DIGITS), c != DEFAULT_CALL_US, c)))


def choose(rule: str, launches: Sequence[float], overlaps: Sequence[float], calls: Sequence[float],
           figures: Figures, call0: float = DEFAULT_CALL_US) -> Point:
    """The grid point `rule` (RULES) picks."""
    if rule == "joint":
        return choose_joint(launches, overlaps, calls, figures)
    if rule == "sequential":
        return choose_sequential(launches, overlaps, calls, figures, call0)
    raise ValueError(f"host-cost rule {rule!r}: expected one of {', '.join(RULES)}")
