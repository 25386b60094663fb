"""Analytic cost model of multi-device DiT inference: shapes, plans, work, time, memory, ranking.

`predict(model, hardware, shape, plan)` gives one plan's latency and breakdown; `rank_plans`
enumerates, predicts and gates every plan. Modules: shape (tokens), plans (degrees and rank
layout), work (FLOPs and bytes per collective and link class), timing (alpha-beta, overlap,
latency), memory (per rank), rank (ranking, calibration, conclusion).
"""

from ditpar.plan.cost.plans import Plan, enumerate_plans, layout, parse_order
from ditpar.plan.cost.shape import Shape, make_shape, parse_resolution
from ditpar.plan.cost.timing import Breakdown, Tunables, predict

__all__ = ["Breakdown", "Plan", "Shape", "Tunables", "enumerate_plans", "layout", "make_shape", "parse_order",
           "parse_resolution", "predict"]
