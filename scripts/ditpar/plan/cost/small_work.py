"""Small-work pricing: what a rank pays whatever its share of the request, so that it dominates when each rank
holds little (short sequences over many ranks). Three parts, each priced elsewhere and collected here:

- a fixed cost per collective call (Tunables.call_us), on top of the call's link class latency (the hardware preset's
  latency_us per class, times the algorithm's steps): NCCL/HCCL launch, the Python-side wait and the ranks' arrival
  skew; fitted on published tables (CALL_GRID, chosen again without each held-out unit by plan.py evaluate:
  judge/host_costs.py);
- kernel efficiency at the per-rank GEMM and attention shapes (cost/efficiency.py, the sourced GEMM curve);
- host dispatch per op (Tunables.launch_us x the ops each block issues, cost/work.py OPS_*).
"""

from __future__ import annotations

CALL_GRID = (0.0, 10.0, 20.0)   # us per collective call the held-out fit chooses from
DEFAULT_CALL_US = 10.0          # the value the fit on every published source chooses (plan.py evaluate)

