"""Predicted bands per plan and the short list of plans the model cannot order.

A plan's band is its prediction widened by the model's own held-out error (a half-width in log
space, derived leave-one-source-out by `ditpar.plan.heldout`) and by every preset, unmeasured link
figure its exposed communication rests on (such a figure may be off by PRESET_FACTOR either way).
Plans whose band overlaps the best plan's band form the short list: a tie the model cannot break.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# An unmeasured (preset) link figure may be this factor too high or too low. Chosen a priori, not
# fitted: published PCIe all-to-all figures for the same card differ by up to ~9x (NVIDIA/nccl#1603:
# 2 vs 18 GB/s), NCCL's own topology model and measured busbw differ by ~2x on NVLink boxes.
PRESET_FACTOR = 2.0

# Half-width (log space) of the model's own band: the smallest value that reaches short-list recall
# RECALL_TARGET on every published table (`plan.py evaluate --tables ../shared/calibration
# benchmarks/published`, "band half-width fitted on all sources"); evaluate re-derives it without the
# scored source for every held-out figure it prints.
MODEL_HALF_WIDTH = 0.025
RECALL_TARGET = 0.97
# Floor: published latencies closer than 5 % are not an order (evaluate.TIE: repeat noise and chart
# reading), so no two predictions closer than that are ordered either: half of 5 % each side.
MEASUREMENT_FLOOR = 0.025
HALF_WIDTH_GRID = (MEASUREMENT_FLOOR, *(round(0.01 * i, 2) for i in range(3, 101)))


@dataclass(frozen=True)
class Band:
    low_s: float
    high_s: float
    preset_exposed_s: float   # exposed communication resting on preset (unmeasured) link figures


def band(latency_s: float, exposed_by_link_s: dict[str, float], measured_links: set[str] | frozenset[str],
         half_width: float = MODEL_HALF_WIDTH, factor: float = PRESET_FACTOR) -> Band:
    """Band of one prediction: model error times, plus the preset comm moved by `factor` either way."""
    if not math.isfinite(latency_s):
        return Band(math.inf, math.inf, 0.0)
    preset = sum(v for k, v in exposed_by_link_s.items() if k not in measured_links and v > 0)
    low = latency_s * math.exp(-half_width) - preset * (1 - 1 / factor)
    high = latency_s * math.exp(half_width) + preset * (factor - 1)
    return Band(max(low, 0.0), high, preset)


def short_list_indices(bands: list[Band], predicted: list[float]) -> list[int]:
    """Indices whose band overlaps the band of the predicted best (the best first, then by prediction)."""
    if not bands:
        return []
    best = min(range(len(predicted)), key=lambda i: predicted[i])
    top = bands[best].high_s
    members = [i for i in range(len(bands)) if bands[i].low_s <= top]
    return sorted(members, key=lambda i: (i != best, predicted[i]))


def fit_half_width(scenarios: list[tuple[list[float], list[float], list[float]]], tie: float,
                   target: float = RECALL_TARGET) -> float:
    """Smallest half-width at which the short list holds the measured best (within `tie`) in at least
    `target` of the scenarios, with no preset widening: the model's own error, as if every link figure
    were measured. Each scenario: (measured, predicted, preset_exposed) per configuration."""
    if not scenarios:
        return MODEL_HALF_WIDTH
    for h in HALF_WIDTH_GRID:
        hits = sum(short_list_hit(m, p, [0.0] * len(e), h, tie) for m, p, e in scenarios)
        if hits >= target * len(scenarios):
            return h
    return HALF_WIDTH_GRID[-1]


def scenario_bands(predicted: list[float], preset_exposed: list[float], half_width: float) -> list[Band]:
    """Bands of the configurations of one published scenario (every link figure there is a preset)."""
    return [band(p, {"preset": e}, frozenset(), half_width) for p, e in zip(predicted, preset_exposed, strict=True)]


def short_list_hit(measured: list[float], predicted: list[float], preset_exposed: list[float],
                   half_width: float, tie: float) -> bool:
    """Whether the short list holds a configuration within `tie` of the measured best."""
    members = short_list_indices(scenario_bands(predicted, preset_exposed, half_width), predicted)
    best = min(measured)
    return any(measured[i] <= best * (1 + tie) for i in members)
