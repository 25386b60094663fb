"""Compute-stream bubbles: gaps inside step windows, each nanosecond of gap classed exactly once.

Classes, in order of precedence (see references/profile-attribution.md):
released  -- a collective of the releasing families ends inside the gap, at most ``tolerance`` before
             the gap end; the gap from the start of that family's continuous activity (or the gap
             start) to the gap end is credited to it;
running   -- otherwise a collective (any family) is running;
other     -- otherwise another stream is busy (compute on another stream, memcpy, memset);
idle      -- nothing runs on any stream: a host / dispatch bubble.
released + running + other + idle == gaps_total, exactly in ns.

The tolerance, unless given, is chosen from the profile's own release lags (gap end minus the end of
the last collective that ends inside the gap): see choose_tolerance. Every report carries the sweep
of what other tolerances would credit, so the choice can be judged.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ditpar.analysis.collectives import (
    intervals_of,
    require_families,
    select_ranks,
    training_evidence,
    us,
)
from ditpar.analysis.steps import assign_steps, has_steps, rank_steps
from ditpar.core.events import by_rank, end_ns, few_codes, kind_masks
from ditpar.core.intervals import Intervals, union_length
from ditpar.core.profile import ProfileSet
from ditpar.errors import InputError

CLASSES = ("released", "running", "other", "idle")
#: upper bounds (us) of the lag histogram bins; the last bin is open
LAG_BINS_US = (10, 20, 50, 100, 1000)
#: tolerance used when the release lags show no structure to choose from (us)
FALLBACK_TOLERANCE_US = 20.0
#: consecutive sorted release lags this many times apart form two populations
BREAK_RATIO = 4.0
#: lags below this are treated alike when looking for a break (ns): a device-side release takes ~1-3 us
LAG_FLOOR_NS = 1000
#: tolerances the sweep reports besides the one used (us)
SWEEP_US = (5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000)


@dataclass
class RankBubbles:
    """Gap classification of one rank, in exact ns, plus the intervals needed to draw it."""

    rank: int
    stream: str
    windows: pd.DataFrame  # step, start_ns, end_ns (compute span inside each step window)
    gaps: pd.DataFrame  # step, start_ns, end_ns, released_ns, running_ns, other_ns, idle_ns, release_family
    by_family: pd.DataFrame
    totals: dict[str, int] = field(default_factory=dict)
    classes: dict[str, Intervals] = field(default_factory=dict)
    #: every gap a releasing collective ends in: lag_ns (gap end - its end), credit_ns, family
    candidates: pd.DataFrame | None = None
    #: number of gaps (``gaps`` may be left out of a per-rank summary: bubbles_ranks.GapSummary)
    gap_count: int = 0


def choose_stream(rev: pd.DataFrame, stream: str | None,
                  is_compute: np.ndarray) -> tuple[str, np.ndarray, list[object]]:
    """The compute stream (the one given, else the one with the largest compute busy time), the stream
    code of every compute row and the distinct streams those codes index."""
    if not is_compute.any():
        raise InputError(f"rank {int(rev['rank'].iloc[0])}: no compute kernels; kinds present: "
                         f"{rev['kind'].value_counts().to_dict()}")
    codes, streams = few_codes(rev["stream"].to_numpy()[is_compute], keep_missing=True)
    present = sorted(set(streams))
    if stream is not None:
        if stream not in present:
            raise InputError(f"--stream {stream}: no compute kernels on it (rank {int(rev['rank'].iloc[0])});"
                             f" compute streams present: {present}")
        return stream, codes, streams
    start = rev["start_ns"].to_numpy(np.int64)[is_compute]
    end = start + rev["dur_ns"].to_numpy(np.int64)[is_compute]
    busy = {s: union_length(start[codes == k], end[codes == k]) for k, s in enumerate(streams)}
    return max(busy, key=lambda s: (busy[s], s)), codes, streams


def step_windows(compute: pd.DataFrame, steps: pd.DataFrame | None) -> pd.DataFrame:
    """Per step: from the first to the last compute kernel of that step (see ditpar.analysis.steps).

    Without any step in the profile the whole capture of the stream is one window (step = NA).
    """
    labels = assign_steps(compute, steps)
    if not has_steps(labels):
        return pd.DataFrame({"step": pd.array([pd.NA], dtype="Int64"),
                             "start_ns": [int(compute["start_ns"].min())], "end_ns": [int(end_ns(compute).max())]})
    # per step in numpy (a groupby of a 1M-row stream held four copies of it and a 1M-entry hash table)
    unlabelled = np.asarray(labels.isna(), dtype=bool)
    step = np.asarray(labels.to_numpy(dtype=np.int64, na_value=0), dtype=np.int64)
    start, end = compute["start_ns"].to_numpy(np.int64), end_ns(compute)
    if unlabelled.any():  # copies only when some kernel lies outside every step
        step, start, end = step[~unlabelled], start[~unlabelled], end[~unlabelled]
    del unlabelled
    ids, which = np.unique(step, return_inverse=True)
    del step
    first = np.full(ids.size, np.iinfo(np.int64).max, dtype=np.int64)
    last = np.full(ids.size, np.iinfo(np.int64).min, dtype=np.int64)
    np.minimum.at(first, which, start)
    np.maximum.at(last, which, end)
    win = pd.DataFrame({"step": pd.array(ids, dtype="Int64"), "start_ns": first, "end_ns": last})
    return win.sort_values("start_ns", kind="stable").reset_index(drop=True)


def _release_candidates(gs: np.ndarray, ge: np.ndarray, rel: pd.DataFrame):
    """For each gap: the family of the last releasing collective ending inside it, where the released
    part would start (-1: none ends inside), and the lag from that end to the gap end (ns)."""
    n = gs.size
    fam = np.full(n, "", dtype=object)
    cut = np.full(n, -1, dtype=np.int64)
    lag = np.full(n, -1, dtype=np.int64)
    timed = rel["dur_ns"].to_numpy() > 0  # a 0-length collective covers no time and releases nothing
    if not timed.any() or n == 0:
        return fam, cut, lag
    # the three columns of the timed rows as arrays: no copy of the rest of the comm table
    r_start = rel["start_ns"].to_numpy(np.int64)[timed]
    e = r_start + rel["dur_ns"].to_numpy(np.int64)[timed]
    order = np.argsort(e, kind="stable")
    e_sorted = e[order]
    families = rel["family"].to_numpy(object)[timed][order]
    idx = np.searchsorted(e_sorted, ge, side="right") - 1
    ok = idx >= 0
    last = np.where(ok, e_sorted[np.maximum(idx, 0)], np.iinfo(np.int64).min)
    ok &= last > gs
    if not ok.any():
        return fam, cut, lag
    union = Intervals.from_spans(r_start, e)
    k = np.searchsorted(union.starts, last[ok], side="left") - 1  # union segment holding the release end
    fam[ok] = families[idx[ok]]
    cut[ok] = np.maximum(gs[ok], union.starts[k])
    lag[ok] = ge[ok] - last[ok]
    return fam, cut, lag


def choose_tolerance(lags_ns: np.ndarray) -> dict:
    """The release tolerance the lags themselves suggest, with the rule that chose it.

    Sorted lags (below LAG_FLOOR_NS counted as equal) are searched for the widest break of at least
    BREAK_RATIO between neighbours: the lags below it are one population (releases), those above
    another; the tolerance is the geometric middle of the break, so any value inside it gives the
    same answer. Without a break, three or more lags form one tight population that a consistent
    mechanism (a host synchronisation and launch) produces: the tolerance covers it (twice its
    largest lag). Fewer lags: FALLBACK_TOLERANCE_US.
    """
    lags = np.sort(np.asarray(lags_ns, dtype=np.int64))
    base = {"source": "auto", "lags": int(lags.size), "break_us": None}
    if lags.size == 0:
        return {**base, "tolerance_ns": int(FALLBACK_TOLERANCE_US * 1000),
                "rule": f"no collective ends inside a gap: fallback {FALLBACK_TOLERANCE_US:g} us (nothing moves)"}
    floored = np.maximum(lags, LAG_FLOOR_NS).astype(float)
    if lags.size >= 2:
        ratios = floored[1:] / floored[:-1]
        i = int(np.argmax(ratios))
        if ratios[i] >= BREAK_RATIO:
            lo, hi = floored[i], floored[i + 1]
            tol = int(round(float(np.sqrt(lo * hi)) / 1000.0)) * 1000
            tol = min(max(tol, int(lags[i])), int(lags[i + 1]) - 1)
            return {**base, "tolerance_ns": tol, "break_us": [us(lags[i]), us(lags[i + 1])],
                    "rule": (f"widest break in the {lags.size} release lags lies between {us(lags[i]):g} and "
                             f"{us(lags[i + 1]):g} us ({ratios[i]:.1f}x); tolerance = its geometric middle; "
                             f"any value in [{us(lags[i]):g}, {us(lags[i + 1]):g}) us gives the same answer")}
    if lags.size >= 3:
        tol = max(2 * int(lags[-1]), LAG_FLOOR_NS)
        return {**base, "tolerance_ns": tol,
                "rule": (f"the {lags.size} release lags form one population ({us(lags[0]):g} to "
                         f"{us(lags[-1]):g} us, no break of {BREAK_RATIO:g}x): tolerance = twice the largest")}
    return {**base, "tolerance_ns": int(FALLBACK_TOLERANCE_US * 1000),
            "rule": (f"only {lags.size} release lag(s), no structure to choose from: fallback "
                     f"{FALLBACK_TOLERANCE_US:g} us")}


def sweep(candidates: pd.DataFrame, used_ns: int) -> list[dict]:
    """Released time and releases at each tolerance of SWEEP_US and the used one; moved = vs the used."""
    lag = candidates["lag_ns"].to_numpy(np.int64)
    credit = candidates["credit_ns"].to_numpy(np.int64)
    used = int(credit[lag <= used_ns].sum())
    rows = []
    for t in sorted({int(x * 1000) for x in SWEEP_US} | {int(used_ns)}):
        hit = lag <= t
        rel = int(credit[hit].sum())
        rows.append({"tolerance_us": us(t), "used": t == used_ns, "releases": int(hit.sum()),
                     "released_us": us(rel), "moved_us": us(rel - used)})
    return rows


@dataclass
class _RankGaps:
    """One rank's compute-stream gaps and release candidates, before a tolerance is applied."""

    rank: int
    stream: str
    windows: pd.DataFrame
    busy: Intervals
    span: Intervals
    gap_iv: Intervals
    comm: pd.DataFrame
    comm_iv: Intervals
    other_iv: Intervals
    fam: np.ndarray
    cut: np.ndarray
    lag: np.ndarray

    def candidates(self) -> pd.DataFrame:
        ok = self.cut >= 0
        return pd.DataFrame({"rank": self.rank, "lag_ns": self.lag[ok],
                             "credit_ns": self.gap_iv.ends[ok] - self.cut[ok], "family": self.fam[ok]})


def rank_gaps(rev: pd.DataFrame, steps: pd.DataFrame | None, families: list[str] | None,
              stream: str | None = None, masks: tuple[np.ndarray, np.ndarray] | None = None) -> _RankGaps:
    """Gaps of the compute stream inside the step windows and, per gap, its release candidate."""
    rank = int(rev["rank"].iloc[0])
    is_compute, is_comm = masks if masks is not None else kind_masks(rev)
    label, codes, streams = choose_stream(rev, stream, is_compute)
    on_stream = is_compute.copy()
    on_stream[is_compute] = codes == streams.index(label)
    del codes
    start = rev["start_ns"].to_numpy(np.int64)
    picked = np.flatnonzero(on_stream)  # the three columns taken one by one: no copy of the rest of the table
    windows = step_windows(pd.DataFrame({"start_ns": start[picked], "dur_ns": rev["dur_ns"].to_numpy(np.int64)[picked],
                                         "step": rev["step"].array[picked]}), steps)
    del picked  # the windows before the busy set: their peaks do not meet
    end = start + rev["dur_ns"].to_numpy(np.int64)
    busy = Intervals.from_spans(start[on_stream], end[on_stream])
    span = Intervals.from_spans(windows["start_ns"].to_numpy(np.int64), windows["end_ns"].to_numpy(np.int64))
    gap_iv = span - busy
    comm = rev[is_comm]
    rel = comm if not families else comm[comm["family"].isin(families)]
    fam, cut, lag = _release_candidates(gap_iv.starts, gap_iv.ends, rel)
    elsewhere = ~on_stream & ~is_comm
    return _RankGaps(rank, label, windows, busy, span, gap_iv, comm, intervals_of(comm),
                     Intervals.from_spans(start[elsewhere], end[elsewhere]), fam, cut, lag)


def classify_gaps(rg: _RankGaps, tolerance_ns: int) -> RankBubbles:
    """Class every gap nanosecond of one rank with the given release tolerance."""
    if tolerance_ns < 0:
        raise InputError(f"--tolerance-us {tolerance_ns / 1000}: expected >= 0")
    gap_iv, windows = rg.gap_iv, rg.windows
    gs, ge = gap_iv.starts, gap_iv.ends
    released_mask = (rg.cut >= 0) & (rg.lag <= tolerance_ns)
    fam = np.where(released_mask, rg.fam, "").astype(object)
    released_iv = Intervals.from_spans(rg.cut[released_mask], ge[released_mask])
    rest = gap_iv - released_iv
    running_iv = rest & rg.comm_iv
    no_comm = rest - rg.comm_iv
    other_cls = no_comm & rg.other_iv
    idle_iv = no_comm - rg.other_iv

    # every class lies inside the gaps: its length per gap by one search per class interval; the classes
    # partition each gap, so idle is the rest of it
    per = {name: iv.length_in_each(gap_iv) for name, iv in
           (("released", released_iv), ("running", running_iv), ("other", other_cls))}
    per["idle"] = (ge - gs) - per["released"] - per["running"] - per["other"]
    win_starts = windows["start_ns"].to_numpy(np.int64)
    w = np.clip(np.searchsorted(win_starts, gs, side="right") - 1, 0, max(len(windows) - 1, 0))
    gaps = pd.DataFrame({
        "step": windows["step"].to_numpy()[w] if len(windows) else pd.NA,
        "start_ns": gs, "end_ns": ge, "dur_ns": ge - gs,
        **{f"{k}_ns": per[k] for k in CLASSES}, "release_family": fam,
    }, copy=False)
    totals = {"gaps_total_ns": gap_iv.total, **{f"{k}_ns": int(v.sum()) for k, v in per.items()},
              "windows_ns": rg.span.total, "busy_ns": rg.busy.total}
    return RankBubbles(rank=rg.rank, stream=rg.stream, windows=windows, gaps=gaps,
                       by_family=_by_family(rg.comm, gap_iv, gaps), totals=totals,
                       classes={"released": released_iv, "running": running_iv, "other": other_cls,
                                "idle": idle_iv}, candidates=rg.candidates(), gap_count=len(gaps))


def _by_family(comm: pd.DataFrame, gap_iv: Intervals, gaps: pd.DataFrame) -> pd.DataFrame:
    """Per family: its union, the part of it inside compute gaps (exposed), and what it released."""
    rows = []
    for row in family_exposure(comm, gap_iv):
        mine = gaps["release_family"] == row["family"]
        rows.append({**row, "releases": int(mine.sum()), "released_ns": int(gaps.loc[mine, "released_ns"].sum())})
    return pd.DataFrame(rows, columns=["family", "count", "union_ns", "exposed_ns", "releases", "released_ns"])


def family_exposure(comm: pd.DataFrame, gap_iv: Intervals) -> list[dict]:
    """Per family (sorted): count, union and the part of the union inside the gaps (exposed), in ns."""
    rows = []
    codes, names = few_codes(comm["family"].to_numpy())  # sorted, missing left out: groupby(sort=True)'s groups
    start = comm["start_ns"].to_numpy(np.int64)
    end = start + comm["dur_ns"].to_numpy(np.int64)
    for k, family in enumerate(names):
        at = codes == k  # a mask per family: no sub-table of the comm rows per family
        iv = Intervals.from_spans(start[at], end[at])
        # |iv & gaps| by prefix sums over the gaps: the pieces themselves (a long collective holds thousands
        # of short gaps) are never built
        exposed = int(gap_iv.overlap_with_each(iv.starts, iv.ends).sum()) if len(iv) and len(gap_iv) else 0
        rows.append({"family": family, "count": int(at.sum()), "union_ns": iv.total, "exposed_ns": exposed})
    return rows


def consumer_lags(rev: pd.DataFrame, pattern: re.Pattern[str], families: list[str] | None,
                  masks: tuple[np.ndarray, np.ndarray] | None = None) -> pd.DataFrame:
    """For each compute kernel matching the pattern: time since the latest producer collective ended."""
    is_compute, is_comm = masks if masks is not None else kind_masks(rev)
    compute_rows = np.flatnonzero(is_compute)
    names = rev["name"].to_numpy()[compute_rows]
    hit = name_matches(names, pattern)
    rows = compute_rows[hit]
    comm = rev[is_comm]
    prod = comm if not families else comm[comm["family"].isin(families)]
    c = rev["start_ns"].to_numpy(np.int64)[rows]
    e = np.sort(end_ns(prod))
    idx = np.searchsorted(e, c, side="right") - 1
    has = idx >= 0
    # a rank without any producer of the families: no lag to measure (has is all False)
    lag = np.where(has, c - e[np.maximum(idx, 0)], 0) if e.size else np.zeros(c.size, dtype=np.int64)
    during = intervals_of(prod).covered_at(c)
    return pd.DataFrame({"rank": rev["rank"].to_numpy()[rows], "name": names[hit], "start_ns": c,
                         "has_producer": has, "lag_ns": lag, "during_collective": during})


def summarise_lags(lags: pd.DataFrame, tolerance_ns: int) -> dict:
    """Median and distribution of the producer-to-consumer lags."""
    ok = lags[lags["has_producer"]]
    v = ok["lag_ns"].to_numpy(np.int64)
    out = {"consumers": len(lags), "with_producer": len(ok), "without_producer": int((~lags["has_producer"]).sum()),
           "started_during_collective": int(lags["during_collective"].sum()),
           "within_tolerance": int((v <= tolerance_ns).sum())}
    if v.size:
        out.update({"median_lag_us": us(np.median(v)), "p10_lag_us": us(np.percentile(v, 10)),
                    "p90_lag_us": us(np.percentile(v, 90)), "min_lag_us": us(v.min()), "max_lag_us": us(v.max())})
    else:
        out.update({k: None for k in ("median_lag_us", "p10_lag_us", "p90_lag_us", "min_lag_us", "max_lag_us")})
    edges = [0, *(b * 1000 for b in LAG_BINS_US), np.iinfo(np.int64).max]
    counts = np.histogram(v, bins=edges)[0] if v.size else np.zeros(len(edges) - 1, dtype=int)
    labels = [f"<{b}us" for b in LAG_BINS_US] + [f">={LAG_BINS_US[-1]}us"]
    out["histogram"] = [{"bin": lab, "count": int(n)} for lab, n in zip(labels, counts, strict=True)]
    return out


def name_matches(names: pd.Series | np.ndarray, pattern: re.Pattern[str]) -> np.ndarray:
    """Boolean mask of names the pattern finds (searched once per distinct name)."""
    codes, uniques = pd.factorize(np.asarray(names, dtype=object), use_na_sentinel=False)
    found = np.array([bool(pattern.search(str(n))) for n in uniques.tolist()] or [False], dtype=bool)
    return found[codes] if len(codes) else np.zeros(0, dtype=bool)


def compile_consumer(regex: str) -> re.Pattern[str]:
    """Compile --consumer (a bad pattern is a usage error naming it)."""
    try:
        return re.compile(regex)
    except re.error as exc:
        raise InputError(f"--consumer {regex!r}: not a valid regular expression ({exc})") from None


def no_consumer_error(events: pd.DataFrame, regex: str) -> InputError:
    """--consumer matched no compute kernel: the error lists the most common ones."""
    names = events.loc[events["kind"] == "compute", "name"]
    common = names.value_counts().head(8)
    listed = "; ".join(f"{n[:60]} x{c}" for n, c in common.items())
    return InputError(f"--consumer {regex!r}: matches no compute kernel; most common kernels: {listed}")


@dataclass
class BubbleReport:
    """Result over all analysed ranks."""

    ranks: list[RankBubbles]
    families: list[str]
    tolerance_ns: int
    lags: pd.DataFrame | None = None
    lag_summary: dict | None = None
    #: how the tolerance was chosen (source auto/given, rule, lags, break_us) and the sweep of others
    tolerance: dict = field(default_factory=dict)
    tolerance_sweep: list[dict] = field(default_factory=list)
    #: set when the profile is a training step (collectives.training_line), else None
    not_dit: str | None = None

    def totals(self) -> dict[str, int]:
        keys = ["gaps_total_ns", *(f"{c}_ns" for c in CLASSES)]
        return {k: sum(r.totals[k] for r in self.ranks) for k in keys}

    def by_family(self) -> pd.DataFrame:
        frames = [r.by_family.assign(rank=r.rank) for r in self.ranks]
        both = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
        if both.empty:
            return pd.DataFrame(columns=["family", "count", "union_ns", "exposed_ns", "releases", "released_ns"])
        return both.groupby("family", sort=True)[["count", "union_ns", "exposed_ns", "releases", "released_ns"]].sum().reset_index()


def analyse(ps: ProfileSet, ranks: list[int] | None = None, families: list[str] | None = None,
            tolerance_us: float | None = None, consumer: str | None = None,
            stream: str | None = None) -> BubbleReport:
    """Classify the compute-stream gaps of every selected rank; optional consumer lags.

    tolerance_us None: chosen from the release lags of all analysed ranks (choose_tolerance).
    """
    ps.require_tasks("bubbles (compute-stream gaps)")
    events = select_ranks(ps, ranks)
    fams = require_families(events, families) if families else []
    if not (events["kind"] == "comm").any() and (families or consumer):
        raise InputError(f"profile: no communication events; kinds present: {events['kind'].value_counts().to_dict()}")
    if tolerance_us is not None and not (np.isfinite(tolerance_us) and tolerance_us >= 0):
        raise InputError(f"--tolerance-us {tolerance_us}: expected a finite time >= 0")
    pattern = compile_consumer(consumer) if consumer else None
    per_rank, lag_frames = [], []
    for rank, rev in by_rank(events):  # one rank's table at a time, then let go
        masks = kind_masks(rev)
        per_rank.append(rank_gaps(rev, rank_steps(ps.steps, int(rank)), fams, stream, masks))
        if pattern is not None:
            lag_frames.append(consumer_lags(rev, pattern, fams, masks))
    if pattern is not None and not any(len(lags) for lags in lag_frames):
        raise no_consumer_error(events, consumer)  # checked on the lags themselves: one pass over the names
    cands = pd.concat([rg.candidates() for rg in per_rank], ignore_index=True)
    if tolerance_us is None:
        choice = choose_tolerance(cands["lag_ns"].to_numpy(np.int64))
    else:
        choice = {"source": "given", "tolerance_ns": int(round(tolerance_us * 1000)), "lags": len(cands),
                  "break_us": None, "rule": "--tolerance-us"}
    tol_ns = choice["tolerance_ns"]
    out = [classify_gaps(rg, tol_ns) for rg in per_rank]
    report = BubbleReport(ranks=out, families=fams, tolerance_ns=tol_ns,
                          tolerance={k: v for k, v in choice.items() if k != "tolerance_ns"},
                          tolerance_sweep=sweep(cands, tol_ns), not_dit=training_evidence(events))
    if pattern is not None:
        report.lags = pd.concat(lag_frames, ignore_index=True)
        report.lag_summary = {"pattern": consumer, **summarise_lags(report.lags, tol_ns)}
    return report
