"""Analytic cost model of multi-device DiT inference: shapes, plans, work, time, memory, ranking.

`predict(model, hardware, shape, plan)` gives one plan's latency and breakdown; `rank_plans`
enumerates, predicts and gates every plan. Modules: shape (tokens), plans (degrees and rank
layout), work (FLOPs and bytes per collective and link class), timing (alpha-beta, overlap,
latency), memory (per rank), rank (ranking, calibration, conclusion).
"""

from .plans import Plan, enumerate_plans, layout, parse_order
from .rank import PlanResult, calibrate, conclusion, rank_plans
from .shape import Shape, make_shape, parse_resolution
from .timing import Breakdown, Tunables, predict

__all__ = ["Breakdown", "Plan", "PlanResult", "Shape", "Tunables", "calibrate", "conclusion",
           "enumerate_plans", "layout", "make_shape", "parse_order", "parse_resolution", "predict", "rank_plans"]
