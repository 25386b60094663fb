"""Per rank and step: Computing, Communication, Not Overlapped, Overlapped, Free, Stage from tasks alone.

The accounting is torch_npu's (step_trace_time.csv) and msprof's (Overlap Analysis), so the result
can be checked against the profiler's own file:

- over the whole rank timeline, Computing = union(compute tasks), Communication = union(comm ops),
  Not Overlapped = Communication - Computing, Free = [first task, last task] - (Computing u Comm);
- every resulting segment belongs to the step whose window [start, end) holds the segment's start;
- Overlapped = Communication - Not Overlapped; Bubble = sum of hcom_receive durations;
- Stage = (last end - first start of the step's segments and receives) - Bubble.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ditpar.core.events import kind_masks
from ditpar.core.intervals import Intervals
from ditpar.core.profile import ProfileSet
from ditpar.errors import InputError

#: the reproduced columns, in the order of the table
COLUMNS = (
    "computing_us",
    "communication_us",
    "communication_not_overlapped_us",
    "overlapped_us",
    "free_us",
    "stage_us",
    "bubble_us",
)

#: agreement with step_trace_time.csv. Stage is float64 subtraction of ~1.7e15 us absolute stamps in
#: torch_npu, whose spacing is 0.25 us, so the profiler's own Stage is only good to 0.25 us.
TOLERANCE_US = 0.05
STAGE_TOLERANCE_US = 0.25
RECEIVE_PREFIX = "hcom_receive"


@dataclass
class Breakdown:
    """The per-step rows and whether they agree with the profiler's file."""

    rows: list[dict]
    compared: int
    mismatches: list[str]
    unmatched_reference: list[str]

    @property
    def ok(self) -> bool:
        return not self.mismatches and not self.unmatched_reference


def tolerance(column: str) -> float:
    return STAGE_TOLERANCE_US if column == "stage_us" else TOLERANCE_US


def step_breakdown(ps: ProfileSet) -> Breakdown:
    """Breakdown of every rank and step of a ProfileSet, compared with ps.step_trace when present.

    A set read with ``load_profiles(..., per_rank=rank_rows)`` carries each rank's rows already
    (computed where the rank was read); they are merged in rank order, as the serial loop does.
    """
    per_rank = ps.rank_results_from(rank_rows)
    if per_rank is not None:
        parts = [per_rank[r] for r in sorted(per_rank)]
        if all(part is None for part in parts):
            raise InputError("no device tasks in the profile; nothing to break down")
        return _compare([row for part in parts if part for row in part], ps.step_trace)
    if ps.events.empty:
        raise InputError("no device tasks in the profile; nothing to break down")
    return _compare(_rows(ps), ps.step_trace)


def rank_rows(ps: ProfileSet) -> list[dict] | None:
    """The breakdown rows of a set (one rank, for load_profiles(per_rank=...)); None when it has no tasks."""
    return _rows(ps) if not ps.events.empty else None


def _rows(ps: ProfileSet) -> list[dict]:
    rows: list[dict] = []
    for rank, events in ps.events.groupby("rank", sort=True):
        windows = ps.steps[ps.steps["rank"] == rank]
        rows.extend(_rank_rows(int(rank), events, windows))
    return rows


def _rank_rows(rank: int, events: pd.DataFrame, windows: pd.DataFrame) -> list[dict]:
    start = events["start_ns"].to_numpy(np.int64)
    end = start + events["dur_ns"].to_numpy(np.int64)
    is_compute, is_comm = kind_masks(events)
    comp = Intervals.from_spans(start[is_compute], end[is_compute])
    comm = Intervals.from_spans(start[is_comm], end[is_comm])
    not_overlapped = comm - comp
    busy = comp | comm
    if len(busy):
        lo = min(int(start.min()), int(busy.starts[0]))
        hi = max(int(end.max()), int(busy.ends[-1]))
        free = busy.gaps(lo, hi)
    else:
        free = Intervals.empty()
    receive = _receives(events["name"].to_numpy(), ~is_compute)
    if windows.empty:
        windows = pd.DataFrame({"step": pd.array([pd.NA], dtype="Int64"),
                                "start_ns": [int(start.min())], "end_ns": [int(end.max())]})
    w_start = windows["start_ns"].to_numpy(np.int64)
    w_end = windows["end_ns"].to_numpy(np.int64)
    order = np.argsort(w_start, kind="stable")
    steps = windows["step"].to_numpy(object)[order]
    w_start, w_end = w_start[order], w_end[order]
    n = len(steps)
    whole_capture = n == 1 and pd.isna(steps[0])

    def assign(seg_start: np.ndarray) -> np.ndarray:
        """Index of the first window whose [start, end) holds each start; -1 when none."""
        if whole_capture:
            return np.zeros(seg_start.size, dtype=np.int64)
        if n == 1 or bool((w_start[1:] >= w_end[:-1]).all()):
            k = np.searchsorted(w_start, seg_start, side="right") - 1
            inside = (k >= 0) & (seg_start < w_end[np.clip(k, 0, None)])
            return np.where(inside, k, -1)
        idx = np.full(seg_start.size, -1, dtype=np.int64)
        # windows overlap (Kineto async steps): the profiler takes the first match in start order
        for i in range(n - 1, -1, -1):
            hit = (seg_start >= w_start[i]) & (seg_start < w_end[i])
            idx[hit] = i
        return idx

    def per_step(iv: Intervals) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        idx = assign(iv.starts)
        length = iv.ends - iv.starts
        ok = idx >= 0
        total = np.zeros(n, dtype=np.int64)
        np.add.at(total, idx[ok], length[ok])
        first = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
        last = np.full(n, np.iinfo(np.int64).min, dtype=np.int64)
        np.minimum.at(first, idx[ok], iv.starts[ok])
        np.maximum.at(last, idx[ok], iv.ends[ok])
        return total, first, last

    comp_t, f1, l1 = per_step(comp)
    comm_t, f2, l2 = per_step(comm)
    nov_t, f3, l3 = per_step(not_overlapped)
    free_t, f4, l4 = per_step(free)
    r_start, r_end = start[receive], end[receive]
    r_idx = assign(r_start)
    ok = r_idx >= 0
    bubble_t = np.zeros(n, dtype=np.int64)
    np.add.at(bubble_t, r_idx[ok], (r_end - r_start)[ok])
    f5 = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
    l5 = np.full(n, np.iinfo(np.int64).min, dtype=np.int64)
    np.minimum.at(f5, r_idx[ok], r_start[ok])
    np.maximum.at(l5, r_idx[ok], r_end[ok])
    first = np.minimum.reduce([f1, f2, f3, f4, f5])
    last = np.maximum.reduce([l1, l2, l3, l4, l5])
    rows = []
    for i in range(n):
        if first[i] > last[i]:
            continue  # a window that owns no task
        stage = int(last[i] - first[i]) - int(bubble_t[i])
        rows.append({
            "rank": rank,
            "step": None if pd.isna(steps[i]) else int(steps[i]),
            "computing_us": _us(comp_t[i]),
            "communication_us": _us(comm_t[i]),
            "communication_not_overlapped_us": _us(nov_t[i]),
            "overlapped_us": _us(comm_t[i] - nov_t[i]),
            "free_us": _us(free_t[i]),
            "stage_us": _us(stage),
            "bubble_us": _us(bubble_t[i]),
            "window_start_ns": int(w_start[i]),
            "window_end_ns": int(w_end[i]),
        })
    rows.sort(key=lambda r: (r["step"] is not None, r["step"] or 0))
    return rows


def _receives(names: np.ndarray, candidates: np.ndarray) -> np.ndarray:
    """Mask of the hcom_receive tasks, looked for among the non-compute rows only: an hcom_ task is
    never compute (classify.ascend_one), and compute kernels are most of a profile's rows."""
    out = np.zeros(names.size, dtype=bool)
    rows = np.flatnonzero(candidates)
    if rows.size:
        codes, uniques = pd.factorize(names[rows], use_na_sentinel=False)
        hit = np.array([str(x).startswith(RECEIVE_PREFIX) for x in uniques], dtype=bool)
        out[rows[hit[codes]]] = True
    return out


def _us(ns: int | np.integer) -> float:
    """Exact ns as us (a float with at most 3 decimals, the precision of the inputs)."""
    return int(ns) / 1000.0


def _compare(rows: list[dict], step_trace: pd.DataFrame | None) -> Breakdown:
    mismatches: list[str] = []
    unmatched: list[str] = []
    compared = 0
    if step_trace is None or step_trace.empty:
        for row in rows:
            row["reference"] = None
            row["max_abs_diff_us"] = None
        return Breakdown(rows, 0, [], [])
    ref = {}
    for rec in step_trace.to_dict("records"):
        step = None if pd.isna(rec["step"]) else int(rec["step"])
        ref[(int(rec["rank"]), step)] = rec
    ours_by_rank: dict[int, list[dict]] = {}
    for row in rows:
        ours_by_rank.setdefault(row["rank"], []).append(row)
    used = set()
    for row in rows:
        key = (row["rank"], row["step"])
        rec = ref.get(key)
        if rec is None and len(ours_by_rank[row["rank"]]) == 1:
            # one step on both sides, one of them without a step id: the same window
            same_rank = [k for k in ref if k[0] == row["rank"]]
            if len(same_rank) == 1 and (same_rank[0][1] is None or row["step"] is None):
                key, rec = same_rank[0], ref[same_rank[0]]
        if rec is None:
            row["reference"] = None
            row["max_abs_diff_us"] = None
            continue
        used.add(key)
        compared += 1
        reference = {c: float(rec[c]) for c in COLUMNS if c in rec and not pd.isna(rec[c])}
        row["reference"] = reference
        diffs = {c: abs(row[c] - reference[c]) for c in reference}
        row["max_abs_diff_us"] = round(max(diffs.values()), 6) if diffs else None
        for c, d in diffs.items():
            if d > tolerance(c) + 1e-9:
                mismatches.append(
                    f"rank {row['rank']} step {row['step']}: {c} {row[c]:.3f} vs profiler {reference[c]:.3f} "
                    f"(|diff| {d:.3f} > {tolerance(c)} us)"
                )
    for key in ref:
        if key not in used:
            unmatched.append(f"rank {key[0]} step {key[1]}: in step_trace_time.csv but no tasks in that step")
    return Breakdown(rows, compared, mismatches, unmatched)
