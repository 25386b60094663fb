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

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ditpar.analysis.collectives import training_facts, training_of_ranks
from ditpar.core.events import by_rank, identity_groups, kind_masks
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

#: Agreement with the profiler's own figures (step_trace_time.csv / StepTraceTime) is judged per row and
#: column against a tolerance derived from the input, not a constant:
#:   tolerance = 2 x segments x stamp error + the reference's own error.
#: Each merged segment has two ends, each off by at most the stamp error: a text export writes start and
#: duration rounded to its resolution (1 ns for us with 3 decimals), so a rebuilt end (start + duration)
#: is off by up to one resolution step; a db export holds the profiler's own ns (stamp error 0).
#: The reference's error: torch_npu's text Stage is float64 arithmetic on ~1.7e15 us stamps, whose
#: spacing is 0.25 us (REFERENCE_STAGE_ERROR_US); StepTraceTime in analysis.db is computed in ns and
#: only printed as float us (FLOAT_PRINT_US).
REFERENCE_STAGE_ERROR_US = 0.25
FLOAT_PRINT_US = 1e-6
#: which segment counts bound each column's error (overlapped = communication - not overlapped)
SEGMENTS_OF = {
    "computing_us": ("computing",),
    "communication_us": ("communication",),
    "communication_not_overlapped_us": ("not_overlapped",),
    "overlapped_us": ("communication", "not_overlapped"),
    "free_us": ("free",),
    "stage_us": ("ends", "receives"),
    "bubble_us": ("receives",),
}
TOLERANCE_RULE = ("tolerance = 2 x segments x stamp_error_ns + the reference's own error (Stage of "
                  "step_trace_time.csv: 0.25 us, float64 spacing of its stamps); stamp_error_ns = the input's "
                  "time resolution for text exports (start and duration each rounded), 0 for db exports")
RECEIVE_PREFIX = "hcom_receive"


@dataclass
class Breakdown:
    """The per-step rows and whether they agree with the profiler's file."""

    rows: list[dict]
    compared: int
    mismatches: list[str]
    unmatched_reference: list[str]
    #: ranks without device tasks whose rows are the profiler's own (step_trace_time.csv only)
    profiler_only: list[int] = field(default_factory=list)
    #: set when the profile is a training step (collectives.training_line), else None
    not_dit: str | None = None

    @property
    def ok(self) -> bool:
        return not self.mismatches and not self.unmatched_reference


def tolerance_us(column: str, segments: dict[str, int], stamp_error_ns: int, reference_exact: bool) -> float:
    """The agreement tolerance of one column of one row (see TOLERANCE_RULE)."""
    n = sum(segments.get(k, 0) for k in SEGMENTS_OF[column])
    ref = REFERENCE_STAGE_ERROR_US if column == "stage_us" and not reference_exact else 0.0
    return 2 * n * stamp_error_ns / 1000.0 + ref + FLOAT_PRINT_US


def step_breakdown(ps: ProfileSet) -> Breakdown:
    """Breakdown of every rank and step of a ProfileSet, compared with ps.step_trace when present.

    A set read with ``load_profiles(..., per_rank=rank_rows)`` carries each rank's rows already
    (computed where the rank was read); they are merged in rank order, as the serial loop does.
    """
    partial = sorted(ps.partial_ranks)
    reference = ps.step_trace
    extra = _profiler_rows(reference, partial)
    if reference is not None and partial:
        reference = reference[~reference["rank"].isin(partial)]
    exact = _exact_references(ps)
    per_rank = ps.rank_results_from(rank_rows)
    if per_rank is not None:
        parts = [per_rank[r] for r in sorted(per_rank)]
        if all(part is None for part in parts) and not extra:
            raise InputError("no device tasks in the profile; nothing to break down")
        result = _compare([row for part in parts if part for row in part["rows"]], reference, exact)
        result.not_dit = training_of_ranks([part["training"] for part in parts if part])
    elif ps.events.empty and not extra:
        raise InputError("no device tasks in the profile; nothing to break down")
    else:
        result = _compare(_rows(ps) if not ps.events.empty else [], reference, exact)
        result.not_dit = training_of_ranks([training_facts(ps.events)]) if not ps.events.empty else None
    result.rows = sorted(result.rows + extra, key=lambda r: (r["rank"], r["step"] is not None, r["step"] or 0))
    result.profiler_only = sorted({r["rank"] for r in extra})
    return result


def _exact_references(ps: ProfileSet) -> set[int]:
    """Ranks whose step figures come from analysis.db StepTraceTime (computed by the profiler in ns)."""
    return {int(r) for r, paths in ps.sources.items() if any(p.name == "analysis.db" for p in paths)}


def _profiler_rows(step_trace, ranks: list[int]) -> list[dict]:
    """Rows of ranks without device tasks: the profiler's own figures, marked as such, nothing compared."""
    if step_trace is None or not ranks:
        return []
    rows = []
    for rec in step_trace[step_trace["rank"].isin(ranks)].to_dict("records"):
        row = {"rank": int(rec["rank"]), "step": None if pd.isna(rec["step"]) else int(rec["step"])}
        row.update({c: (None if pd.isna(rec.get(c)) else float(rec[c])) for c in COLUMNS})
        row.update({"evidence": "profiler step table only (no task rows)", "reference": None,
                    "max_abs_diff_us": None, "tolerance_us": None})
        rows.append(row)
    return rows


def rank_rows(ps: ProfileSet) -> dict | None:
    """The breakdown rows of a set (one rank, for load_profiles(per_rank=...)) and its training_facts (a
    training step is judged where the events are); None when it has no tasks."""
    if ps.events.empty:
        return None
    masks = kind_masks(ps.events)  # once for both
    return {"rows": _rows(ps, masks), "training": training_facts(ps.events, masks)}


#: the event columns rank_rows reads: a reader running it per rank lets the others go first (load_profiles)
rank_rows.columns = frozenset({"rank", "start_ns", "dur_ns", "kind", "name"})  # type: ignore[attr-defined]


def _rows(ps: ProfileSet, masks: tuple[np.ndarray, np.ndarray] | None = None) -> list[dict]:
    """The rows of every rank; ``masks``: the kind masks of the whole table (used where one rank is all of it)."""
    rows: list[dict] = []
    for rank, events in by_rank(ps.events):
        windows = ps.steps[ps.steps["rank"] == rank]
        exact = any(p.suffix == ".db" for p in ps.sources.get(int(rank), []))  # the profiler's own ns
        rows.extend(_rank_rows(int(rank), events, windows, exact, masks if events is ps.events else None))
    return rows


def resolution_ns(start: np.ndarray, dur: np.ndarray) -> int:
    """The input's time resolution: the largest of 1000, 100, 10 ns dividing every stamp and duration, else 1."""
    for step in (1000, 100, 10):
        if start.size and (start[:4096] % step).any() or (dur[:4096] % step).any():
            continue  # the first rows already say no: no pass over every row
        if start.size and not (start % step).any() and not (dur % step).any():
            return step
    return 1


def _rank_rows(rank: int, events: pd.DataFrame, windows: pd.DataFrame, exact_stamps: bool = False,
               masks: tuple[np.ndarray, np.ndarray] | None = None) -> list[dict]:
    start = events["start_ns"].to_numpy(np.int64)
    end = start + events["dur_ns"].to_numpy(np.int64)
    stamp_error = 0 if exact_stamps else resolution_ns(start, events["dur_ns"].to_numpy(np.int64))
    is_compute, is_comm = masks if masks is not None else kind_masks(events)
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
    del busy  # only the gaps were needed
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
            k = np.searchsorted(w_start, seg_start, side="right")
            k -= 1  # in place: 1M-segment sets, few temporaries
            before = k < 0
            k[before] = 0
            outside = seg_start >= w_end[k]
            outside |= before
            k[outside] = -1
            return k
        idx = np.full(seg_start.size, -1, dtype=np.int64)
        # windows overlap (Kineto async steps): the profiler takes the first match in start order
        for i in range(n - 1, -1, -1):
            hit = (seg_start >= w_start[i]) & (seg_start < w_end[i])
            idx[hit] = i
        return idx

    def per_step(iv: Intervals) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        idx = assign(iv.starts)
        starts, ends = iv.starts, iv.ends
        ok = idx >= 0
        if not bool(ok.all()):  # copies only when some segment lies outside every window
            idx, starts, ends = idx[ok], starts[ok], ends[ok]
        del ok
        total = np.zeros(n, dtype=np.int64)
        np.add.at(total, idx, ends - starts)
        counts.append(np.bincount(idx, minlength=n))
        first = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
        last = np.full(n, np.iinfo(np.int64).min, dtype=np.int64)
        np.minimum.at(first, idx, starts)
        np.maximum.at(last, idx, ends)
        return total, first, last

    counts: list[np.ndarray] = []  # segments per step, in the order computed below
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
    n_receive = np.bincount(r_idx[ok], minlength=n)
    stamp_error_ns = stamp_error
    rows = []
    for i in range(n):
        if first[i] > last[i]:
            continue  # a window that owns no task
        segments = {"computing": int(counts[0][i]), "communication": int(counts[1][i]),
                    "not_overlapped": int(counts[2][i]), "free": int(counts[3][i]), "ends": 1,
                    "receives": int(n_receive[i])}
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
            "evidence": "tasks",
            "segments": segments,
            "stamp_error_ns": stamp_error_ns,
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
        some = names[rows]
        found = identity_groups(some)  # a reader's names repeat a few objects: no string hashed per row
        codes, uniques = (found[0], some[found[1]]) if found else pd.factorize(some, use_na_sentinel=False)
        hit = np.array([str(x).startswith(RECEIVE_PREFIX) for x in uniques], dtype=bool)
        out[rows[hit[codes]]] = True
    return out


def _us(ns: int | np.integer) -> float:
    """Exact ns as us (a float with at most 3 decimals, the precision of the inputs)."""
    return int(ns) / 1000.0


def _compare(rows: list[dict], step_trace: pd.DataFrame | None, exact_reference: set[int] | None = None) -> Breakdown:
    mismatches: list[str] = []
    unmatched: list[str] = []
    compared = 0
    if step_trace is None or step_trace.empty:
        for row in rows:
            row["reference"] = None
            row["max_abs_diff_us"] = None
            row["tolerance_us"] = None
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
            row["tolerance_us"] = None
            continue
        used.add(key)
        compared += 1
        reference = {c: float(rec[c]) for c in COLUMNS if c in rec and not pd.isna(rec[c])}
        row["reference"] = reference
        diffs = {c: abs(row[c] - reference[c]) for c in reference}
        row["max_abs_diff_us"] = round(max(diffs.values()), 6) if diffs else None
        exact = row["rank"] in (exact_reference or set())
        tol = {c: round(tolerance_us(c, row["segments"], row["stamp_error_ns"], exact), 6) for c in reference}
        row["tolerance_us"] = tol
        for c, d in diffs.items():
            if d > tol[c]:
                mismatches.append(
                    f"rank {row['rank']} step {row['step']}: {c} {row[c]:.3f} vs profiler {reference[c]:.3f} "
                    f"(|diff| {d:.3f} > tolerance {tol[c]:g} us)"
                )
    for key in ref:
        if key not in used:
            unmatched.append(f"rank {key[0]} step {key[1]}: in step_trace_time.csv but no tasks in that step")
    return Breakdown(rows, compared, mismatches, unmatched)
