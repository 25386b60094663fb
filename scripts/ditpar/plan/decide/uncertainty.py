"""Predicted bands per plan and the short list of plans the model cannot order.

A plan's band is its prediction widened by the model's own held-out error (a half-width in log
space, derived leave-one-source-out by `ditpar.plan.judge.heldout`) and by every preset, unmeasured link
figure its exposed communication rests on (moved either way by the figure's evidence: EVIDENCE_FACTOR), and by
PipeFusion's schedule (PIPELINE_FACTOR).
The short list holds the plans that could be the fastest once the model error, the PipeFusion schedule and
the unmeasured link figures (one setting for every plan: `joint_short_list`) are allowed: a tie the model
cannot break.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# An unmeasured (preset) link figure may be this factor too high or too low. Chosen a priori, not
# fitted: published PCIe all-to-all figures for the same card differ by up to ~9x (NVIDIA/nccl#1603:
# 2 vs 18 GB/s), NCCL's own topology model and measured busbw differ by ~2x on NVLink boxes.
PRESET_FACTOR = 2.0

# Half-width (log space) of the model's own band: the smallest value at which the short list as plan.py builds it
# (`joint_short_list`, link figures at their evidence corners) reaches short-list recall RECALL_TARGET on every
# published table (`plan.py evaluate --tables ../shared/calibration benchmarks/published`, "band half-width fitted
# on all sources": 0.025 since issue 23's fit by the same rule); evaluate re-derives it without the scored source
# for every held-out figure it prints.
MODEL_HALF_WIDTH = 0.025
# What the band covers, held out (`plan.py evaluate --tables benchmarks/published`, leave one source out: "band
# coverage"): printed beside it, since it claims no level (rows, share inside)
BAND_HELD_OUT = (278, 0.56)
RECALL_TARGET = 0.97
# Floor: published latencies closer than 5 % are not an order (evaluate.TIE: repeat noise and chart
# reading), so no two predictions closer than that are ordered either: half of 5 % each side.
MEASUREMENT_FLOOR = 0.025
HALF_WIDTH_GRID = (MEASUREMENT_FLOOR, *(round(0.01 * i, 2) for i in range(3, 101)))


# The end-to-end speedup over one device is given with a range that claims SPEEDUP_RANGE_LEVEL coverage: the
# measured / predicted speedup (log2) of published multi-device rows falls between these two quantiles on every
# published table (`plan.py evaluate --tables ../shared/calibration benchmarks/published`, "speedup range fitted on
# all sources", the host cost per op held at plan.py's 25 us); evaluate fits it again without the scored unit for every held-out coverage it prints. Unlike the
# short-list band (sized for recall of the measured best), this range is a calibrated interval.
SPEEDUP_RANGE_LEVEL = 0.8
SPEEDUP_RANGE_LOG2 = (-0.322, 0.302)

# A part of a link class's exposed time that moves on its own figure (`exposed_parts`): '<link>:alltoall'
ALLTOALL_PART = ":alltoall"


def link_of(part: str) -> str:
    """The link class of an exposed-time part key ('intra_domain:alltoall' -> 'intra_domain')."""
    return part.split(":", 1)[0]


@dataclass(frozen=True)
class Band:
    low_s: float
    high_s: float
    preset_exposed_s: float   # exposed communication resting on preset (unmeasured) link figures


# How far a link class's exposed communication may move, by what its preset figure rests on (LinkClass.evidence):
# a measurement of this hardware class moves less than a derivation (physics x a measured efficiency, or NCCL's
# model), which moves less than a figure measured on another device. A priori, not fitted: PRESET_FACTOR is the
# derived case; a same-class measurement still differs between boxes and software versions by ~1.5x
# (NVIDIA/nccl#1603: one box, 2 vs 18 GB/s by transport), a borrowed figure by more.
# A figure the user typed (--set links...) is "given": it moves like a derived one, never less than a measurement of
# the class (a --set figure never narrows a band; only --bench does).
EVIDENCE_FACTOR = {"measured": 1.5, "derived": PRESET_FACTOR, "other-class": 3.0, "given": PRESET_FACTOR}
# PipeFusion's own model error: warm-up, fill and stage imbalance (Breakdown.pipeline_s) rest on the pipeline's
# schedule as the model assumes it (no measured PipeFusion schedule is in the tables), moved by this factor.
PIPELINE_FACTOR = 2.0


def band(latency_s: float, exposed_by_link_s: dict[str, float], measured_links: set[str] | frozenset[str],
         half_width: float = MODEL_HALF_WIDTH, factor: float = PRESET_FACTOR, *,
         evidence: dict[str, str] | None = None, pipeline_s: float = 0.0) -> Band:
    """Band of one prediction: model error times, plus each unmeasured link class's exposed comm moved by its
    evidence factor (`factor` when its evidence is not known), plus the PipeFusion schedule moved by
    PIPELINE_FACTOR. A key may be a part of a link class (`exposed_parts`): it moves by its class's evidence."""
    if not math.isfinite(latency_s):
        return Band(math.inf, math.inf, 0.0)
    evidence = evidence or {}
    low_move = high_move = preset = 0.0
    for k, v in exposed_by_link_s.items():
        if link_of(k) in measured_links or k in measured_links or v <= 0:
            continue
        f = EVIDENCE_FACTOR.get(evidence.get(link_of(k), ""), factor)
        preset += v
        low_move += v * (1 - 1 / f)
        high_move += v * (f - 1)
    if pipeline_s > 0:
        low_move += pipeline_s * (1 - 1 / PIPELINE_FACTOR)
        high_move += pipeline_s * (PIPELINE_FACTOR - 1)
    low = latency_s * math.exp(-half_width) - low_move
    high = latency_s * math.exp(half_width) + high_move
    return Band(max(low, 0.0), high, preset)


def exposed_parts(bd) -> dict[str, float]:
    """A prediction's exposed communication by independent figure: per link class, the all-to-alls priced by its
    all-to-all table ('<link>:alltoall') apart from the rest ('<link>'). One box has one all-to-all transport and
    one ring path, and they need not be off the same way (a PCIe box's all-to-all runs through host memory or
    through peer-to-peer writes depending on NCCL's P2P level, the ring does not change)."""
    a2a = getattr(bd, "exposed_alltoall_by_link_s", None) or {}
    out = {}
    for k, v in bd.exposed_by_link_s.items():
        part = min(max(a2a.get(k, 0.0), 0.0), v)
        out[k] = v - part
        if part > 0:
            out[k + ALLTOALL_PART] = part
    return out


def band_of(bd, measured_links: set[str] | frozenset[str], half_width: float = MODEL_HALF_WIDTH) -> Band:
    """Band of one predicted Breakdown (its link evidence and pipeline time included)."""
    return band(bd.latency_s, exposed_parts(bd), measured_links, half_width,
                evidence=getattr(bd, "link_evidence", None), pipeline_s=getattr(bd, "pipeline_s", 0.0))


def _evidence_factor(bds, key: str) -> float:
    for bd in bds:
        ev = (getattr(bd, "link_evidence", None) or {}).get(link_of(key))
        if ev is not None:
            return EVIDENCE_FACTOR.get(ev, PRESET_FACTOR)
    return PRESET_FACTOR


def link_corners(bds, measured_links: set[str] | frozenset[str]) -> list[dict[str, float]]:
    """The settings of the unmeasured link figures a ranking must survive: each figure's exposed time (a link
    class's all-to-all table apart from its other figures: `exposed_parts`) moved by its evidence factor one way or
    the other, the same for every plan (one box has one link speed), plus the preset itself. Corners suffice: a
    plan's latency is linear in each factor."""
    keys = sorted({k for bd in bds for k, v in exposed_parts(bd).items()
                   if v > 0 and link_of(k) not in measured_links and k not in measured_links})
    corners: list[dict[str, float]] = [{}]
    for k in keys:
        f = _evidence_factor(bds, k)
        corners = [{**c, k: x} for c in corners for x in (1.0 / f, f)]
    return [{}, *corners] if keys else [{}]


def latency_at(bd, factors: dict[str, float]) -> float:
    """Predicted latency with each figure's exposed communication (`exposed_parts` keys) scaled by its factor."""
    parts = exposed_parts(bd)
    return bd.latency_s + sum(parts.get(k, 0.0) * (f - 1.0) for k, f in factors.items())


def joint_short_list(bds, measured_links: set[str] | frozenset[str],
                     half_width: float = MODEL_HALF_WIDTH) -> list[int]:
    """Indices of the plans that could be the fastest: at some setting of the unmeasured link figures (shared by
    all plans, `link_corners`), the plan's optimistic end (model error, PipeFusion schedule at its best) reaches
    the pessimistic end of the fastest plan there. Best predicted first, then by prediction. Narrower than
    band overlap, which lets one plan's link be slow while another's same link is fast."""
    if not bds:
        return []
    lat = [bd.latency_s for bd in bds]
    best = min(range(len(bds)), key=lambda i: lat[i])
    finite = [i for i in range(len(bds)) if math.isfinite(lat[i])]
    pipe = [getattr(bd, "pipeline_s", 0.0) for bd in bds]
    members = {best}
    for c in link_corners([bds[i] for i in finite], measured_links):
        at = {i: latency_at(bds[i], c) for i in finite}
        high = min(at[i] * math.exp(half_width) + pipe[i] * (PIPELINE_FACTOR - 1) for i in finite)
        members.update(i for i in finite if at[i] * math.exp(-half_width) - pipe[i] * (1 - 1 / PIPELINE_FACTOR) <= high)
    return sorted(members, key=lambda i: (i != best, lat[i]))


def pair_tie(lead, other, measured_links: set[str] | frozenset[str], half_width: float = MODEL_HALF_WIDTH) -> dict:
    """`joint_short_list`'s rule on two predictions alone, with the figures that decide it: at the setting of the
    unmeasured link figures most favourable to `other` (one of `link_corners`), `other`'s optimistic end against
    the pessimistic end of the faster of the two there. tie = other's optimistic end reaches it (then the two
    could swap: either could be the fastest)."""
    corners = link_corners([lead, other], measured_links)
    best = None
    for c in corners:
        ends = []
        for bd in (lead, other):
            at, pipe = latency_at(bd, c), getattr(bd, "pipeline_s", 0.0)
            ends.append((at * math.exp(-half_width) - pipe * (1 - 1 / PIPELINE_FACTOR),
                         at * math.exp(half_width) + pipe * (PIPELINE_FACTOR - 1)))
        margin = ends[1][0] - min(ends[0][1], ends[1][1])
        if best is None or margin < best["margin"]:
            best = {"margin": margin, "corner": c, "other_low_s": ends[1][0], "lead_high_s": ends[0][1],
                    "other_high_s": ends[1][1]}
    best["tie"] = best["margin"] <= 0
    return best


def describe_corner(corner: dict[str, float]) -> str:
    """'intra_domain all-to-all x1/2, inter_domain x3' for a setting of the link figures; the presets when none moves."""
    if not corner or all(f == 1.0 for f in corner.values()):
        return "the link figures as they stand"
    parts = []
    for k, f in sorted(corner.items()):
        name = link_of(k) + (" all-to-all" if k.endswith(ALLTOALL_PART) else "")
        # a factor on exposed time: x2 means the figure (bandwidth) is half the preset's
        parts.append(f"{name} bandwidth {'/' if f > 1 else 'x'}{max(f, 1 / f):g}")
    return ", ".join(parts)


def fit_half_width(scenarios: list[tuple[list[float], list]], tie: float, target: float = RECALL_TARGET) -> float:
    """Smallest half-width at which the short list as plan.py builds it (`joint_short_list`: every unmeasured link
    figure at its evidence corners, the PipeFusion schedule at its best) holds the measured best (within `tie`) in at
    least `target` of the scenarios. Each scenario: (measured latency, predicted Breakdown) per configuration. The
    half-width is the model's error beyond what the link figures' own evidence already allows (issue 23: fitted
    with band overlap and no link widening, it also paid for the L20 all-to-all figure, which the corners cover)."""
    if not scenarios:
        return MODEL_HALF_WIDTH
    for h in HALF_WIDTH_GRID:
        hits = sum(joint_short_list_hit(m, bds, h, tie) for m, bds in scenarios)
        if hits >= target * len(scenarios):
            return h
    return HALF_WIDTH_GRID[-1]


def joint_short_list_hit(measured: list[float], bds, half_width: float, tie: float) -> bool:
    """Whether `joint_short_list` at `half_width` holds a configuration within `tie` of the measured best."""
    best = min(measured)
    return any(measured[i] <= best * (1 + tie) for i in joint_short_list(bds, frozenset(), half_width))


def fit_speedup_range(residuals_log2: list[float], level: float = SPEEDUP_RANGE_LEVEL) -> tuple[float, float]:
    """(low, high) quantiles of log2(measured / predicted speedup) that hold `level` of the rows between them,
    as much outside on each side (numpy's linear quantile); SPEEDUP_RANGE_LOG2 when there are no rows."""
    import numpy as np

    if not residuals_log2:
        return SPEEDUP_RANGE_LOG2
    tail = (1.0 - level) / 2.0
    lo, hi = np.quantile(np.asarray(residuals_log2, dtype=float), [tail, 1.0 - tail])
    return round(float(lo), 3), round(float(hi), 3)


def speedup_range(speedup: float, log2_range: tuple[float, float] = SPEEDUP_RANGE_LOG2) -> tuple[float, float]:
    """The range of a predicted end-to-end speedup that published rows held out fell in SPEEDUP_RANGE_LEVEL of the
    time (measured / predicted between 2**low and 2**high). Not capped at the card count: published runs reach
    and pass n (CFG-2 rows measure 2.0-2.1x; a one-device run can be the less efficient one)."""
    return speedup * 2.0 ** log2_range[0], speedup * 2.0 ** log2_range[1]


# The end-to-end speedup range plan.py prints: x e^-q .. x e^q around the prediction, q the split-conformal quantile
# (the ceil((n + 1) 0.8)-th smallest) of |ln(measured / predicted speedup)| over the rows of the unseen rounds as each
# round was scored before any cost term changed for it (benchmarks/unseen_residuals.csv; benchmarks/VALIDATION.md
# sections 4, 7.17 and 7.24), by stratum (how new the question is to the published tables; a row's stratum is the one
# it had when its round was scored, against the tables of that commit: benchmarks/unseen_residuals.csv
# stratum_at_scoring, VALIDATION section 7.30). A stratum with fewer
# than 20 rows takes the pooled q at the same level, except the machine stratum: a given or borrowed figure widens a
# range, so it takes the pooled q at 0.9, never below the in-collection and new-framework ones. Fitted by `plan.py
# evaluate --tables benchmarks/published --coverage` (judge/conformal.py), which also prints each stratum's coverage
# with one round left out at a time (the figure stated beside the range).
RANGE_LEVEL = 0.8
RANGE_SAMPLE = ("196 speedup rows of published tables, each as scored before the cost model was changed with it in "
                "view (benchmarks/VALIDATION.md section 4)")
# stratum -> (q, rows of the stratum in the sample, its own q (else the pooled one), the stratum's held-out coverage,
# n, rounds the stratum's rows come from)
RANGE_Q = {
    "all in collection": (0.232, 17, False, 0.94, 17, 5),
    "new framework": (0.172, 62, True, 0.87, 62, 3),
    "new or borrowed machine": (0.239, 30, True, 0.87, 30, 5),
    "new model family": (0.384, 87, True, 0.78, 87, 6),
}
# what the published tables hold (benchmarks/published, rows scored): the strata are decided against these
COLLECTION = {
    "families": frozenset({"cogvideox", "consisid", "flux", "hunyuanvideo", "longcat", "mochi", "open", "pixart", "qwen",
                           "sana", "wan", "z"}),
    "accelerators": frozenset({"910B", "A100", "A800", "B200", "GB200", "H100", "H20", "H200", "H800", "L20", "L40",
                               "RTX 4090"}),
    "frameworks": frozenset({"MindIE-SD", "ParaAttention", "SGLang-diffusion", "TensorRT-LLM-VisualGen", "cache-dit",
                             "diffusers-CP", "vLLM-Omni", "xDiT"}),
}


def range_stratum(model_name: str, hw, framework: str | None, given_machine: bool = False) -> str:
    """The stratum of a question (the newest part wins: model family, machine, framework): a machine is new when no
    published table holds its accelerator, or its compute figure is borrowed or given rather than measured."""
    import re

    m = re.match(r"[A-Za-z]+", str(model_name).strip())
    fam = m.group(0).lower() if m else str(model_name).lower()
    if fam not in COLLECTION["families"]:
        return "new model family"
    borrowed = str(hw.sources.get("mfu", "")).lower().startswith("borrowed")
    if given_machine or borrowed or str(hw.accelerator) not in COLLECTION["accelerators"]:
        return "new or borrowed machine"
    if framework and framework not in COLLECTION["frameworks"]:
        return "new framework"
    return "all in collection"


def stratified_range(speedup: float, stratum: str, cap: float = math.inf) -> tuple[float, float]:
    """(low, high) of a predicted end-to-end speedup at RANGE_LEVEL for its stratum, neither above `cap`."""
    q = RANGE_Q[stratum][0]
    return min(speedup * math.exp(-q), cap), min(speedup * math.exp(q), cap)


def range_note(stratum: str) -> str:
    """The stratum, sample and held-out coverage a printed range claims (its level is printed with it)."""
    q, n, own, cov, held, rounds = RANGE_Q[stratum]
    if own:
        return (f"stratum '{stratum}': {n} of the {RANGE_SAMPLE}, from {rounds} rounds; held-out coverage {cov:.2f} "
                f"of {held}, one round out at a time")
    if stratum == "new or borrowed machine":
        return (f"stratum '{stratum}': only {n} of the {RANGE_SAMPLE} (< 20), so the pooled figure widened to its "
                f"0.9 quantile (a given or borrowed figure widens a range); held-out coverage {cov:.2f} of these {held}")
    return (f"stratum '{stratum}': only {n} of the {RANGE_SAMPLE} (< 20), so the pooled figure of all of them; "
            f"held-out coverage {cov:.2f} of these {held}, one round out at a time")


def amdahl_cap(single_dit_s: float, serial_s: float, cards: int) -> float:
    """The end-to-end speedup the serial stages allow on `cards` cards (the DiT loop split perfectly, the serial
    stages not at all): (single + serial) / (single / cards + serial); never above the card count."""
    if cards < 1 or single_dit_s <= 0:
        return math.inf
    return (single_dit_s + serial_s) / (single_dit_s / cards + serial_s)
