"""bubbles.analyse with each rank's gaps found where the rank is read (load_profiles(per_rank=...)).

The gaps and release candidates of one rank need only that rank's events; the tolerance is then chosen
from the candidates of all ranks and every rank's gaps are classed with it, as ``bubbles.analyse``
does on the whole set (tests/test_bubbles_ranks.py compares the two). The event tables stay in the
reader processes. With ``keep_gaps`` (the gap table, for --csv) every gap travels; without it only a
GapSummary does: sums over the gaps no collective ends in, and one row per release candidate with its
classes both ways, which is all any tolerance needs (the peak of 8 x 1M-row ranks stays near one rank's).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ditpar.analysis import bubbles as bu
from ditpar.analysis import collectives as co
from ditpar.analysis.steps import rank_steps
from ditpar.core.events import few_codes, kind_counts, kind_masks
from ditpar.core.intervals import Intervals
from ditpar.core.profile import ProfileSet
from ditpar.errors import InputError


class RankGaps:
    """The per-rank part of bubbles.analyse (picklable: it runs in the reader processes)."""

    def __init__(self, families: list[str] | None = None, stream: str | None = None, consumer: str | None = None,
                 keep_gaps: bool = True):
        self.families, self.stream, self.consumer = families, stream, consumer
        self.keep_gaps = keep_gaps  # False: only a GapSummary travels (no gap table in the report)
        #: the event columns __call__ reads (the reader lets the others go first: load_profiles' per_rank)
        # name: the training-step check (collectives.training_facts) reads the compute kernel names
        self.columns = frozenset({"rank", "stream", "kind", "family", "start_ns", "dur_ns", "step", "name"})
        self.__qualname__ = type(self).__qualname__  # ProfileSet.rank_results_from names the maker

    def __call__(self, one: ProfileSet) -> dict | None:
        events = one.events
        if events.empty:
            return None
        masks = kind_masks(events)
        rank = int(events["rank"].iloc[0])
        out = {"kinds": kind_counts(events, masks),
               "present": sorted(set(events.loc[masks[1], "family"]) - {""}),
               "gaps": bu.rank_gaps(events, rank_steps(one.steps, rank), self.families or [], self.stream, masks),
               "lags": None, "common": None, "training": co.training_facts(events, masks)}
        if self.keep_gaps:
            # one family name per gap travels as small codes: unpickling a million strings would cost ~50 MB
            codes, uniques = pd.factorize(out["gaps"].fam, use_na_sentinel=False)
            out["fam"] = (codes.astype(np.int32), np.asarray(uniques, dtype=object))
            out["gaps"].fam = None
        else:
            out["summary"] = GapSummary.of(out.pop("gaps"))
        if self.consumer:
            lags = bu.consumer_lags(events, bu.compile_consumer(self.consumer), self.families or [], masks)
            # the summary needs only these three columns (names and starts stay here)
            out["lags"] = lags if self.keep_gaps else lags[["has_producer", "lag_ns", "during_collective"]]
            if not len(out["lags"]):
                out["common"] = events.loc[events["kind"] == "compute", "name"].value_counts().head(8)
        return out


@dataclass
class GapSummary:
    """One rank's gaps reduced to what any release tolerance needs, exact in ns.

    A gap no collective ends in is never released: its running and other time are summed here. A
    candidate gap (a collective ends inside it) is released or not depending on the tolerance: its
    running and other time are kept for both cases, the whole gap and the part before the release
    start (the released part is credit_ns). Idle is the rest of the gaps, as in classify_gaps.
    """

    rank: int
    stream: str
    windows: pd.DataFrame
    gap_count: int
    #: gaps_total_ns, windows_ns, busy_ns, and running_ns / other_ns of the gaps that are not candidates
    totals: dict[str, int]
    #: rank, lag_ns, credit_ns, family, running_ns, other_ns (whole gap), running_before_ns, other_before_ns
    candidates: pd.DataFrame
    #: family, count, union_ns, exposed_ns (none of them depends on the tolerance)
    exposure: list[dict]

    @classmethod
    def of(cls, rg: bu._RankGaps) -> GapSummary:
        gs, ge = rg.gap_iv.starts, rg.gap_iv.ends
        run_all, other_all = _running_other(rg, rg.gap_iv)
        cand = np.flatnonzero(rg.cut >= 0)
        c_start, c_cut = gs[cand], rg.cut[cand]
        before = c_cut > c_start  # the part of a released gap that stays unreleased (may be empty)
        run_before = np.zeros(cand.size, dtype=np.int64)
        other_before = np.zeros(cand.size, dtype=np.int64)
        # one span per candidate, inside its own gap: sorted, disjoint and never touching, as Intervals needs
        run_before[before], other_before[before] = _running_other(rg, Intervals(c_start[before], c_cut[before]))
        rest = np.ones(gs.size, dtype=bool)
        rest[cand] = False
        totals = {"gaps_total_ns": rg.gap_iv.total, "windows_ns": rg.span.total, "busy_ns": rg.busy.total,
                  "running_ns": int(run_all[rest].sum()), "other_ns": int(other_all[rest].sum())}
        # the family of each candidate as codes of its few names: a text column of 1M candidates would be
        # converted to Arrow strings here and pickled string by string to the reading process
        codes, names = few_codes(rg.fam[cand])
        candidates = pd.DataFrame({"rank": rg.rank, "lag_ns": rg.lag[cand], "credit_ns": ge[cand] - c_cut,
                                   "family": pd.Categorical.from_codes(codes, categories=names),
                                   "running_ns": run_all[cand], "other_ns": other_all[cand],
                                   "running_before_ns": run_before, "other_before_ns": other_before})
        return cls(rg.rank, rg.stream, rg.windows, int(gs.size), totals, candidates,
                   bu.family_exposure(rg.comm, rg.gap_iv))

    def classify(self, tolerance_ns: int) -> bu.RankBubbles:
        """The rank's class totals and per-family figures at this tolerance (no gap table)."""
        c = self.candidates
        released = c["lag_ns"].to_numpy(np.int64) <= tolerance_ns
        credit = c["credit_ns"].to_numpy(np.int64)
        running = self.totals["running_ns"] + int(np.where(released, c["running_before_ns"], c["running_ns"]).sum())
        other = self.totals["other_ns"] + int(np.where(released, c["other_before_ns"], c["other_ns"]).sum())
        released_ns = int(credit[released].sum())
        total = self.totals["gaps_total_ns"]
        totals = {"gaps_total_ns": total, "released_ns": released_ns, "running_ns": running, "other_ns": other,
                  "idle_ns": total - released_ns - running - other, "windows_ns": self.totals["windows_ns"],
                  "busy_ns": self.totals["busy_ns"]}
        rows = []
        for row in self.exposure:
            mine = released & _is_family(c["family"], row["family"])
            releases = int(mine.sum())
            if row["family"] == "":  # the gap table marks an unreleased gap with family "" as well
                releases += self.gap_count - int(released.sum())
            rows.append({**row, "releases": releases, "released_ns": int(credit[mine].sum())})
        by_family = pd.DataFrame(rows, columns=["family", "count", "union_ns", "exposed_ns", "releases",
                                                "released_ns"])
        return bu.RankBubbles(rank=self.rank, stream=self.stream, windows=self.windows, gaps=None,
                              by_family=by_family, totals=totals, gap_count=self.gap_count)


def _is_family(family: pd.Series, name: str) -> np.ndarray:
    """Rows of that family: by the category codes where the column is categorical (GapSummary.of makes it so)."""
    if isinstance(family.dtype, pd.CategoricalDtype):
        names = list(family.cat.categories)
        codes = family.cat.codes.to_numpy()
        return codes == names.index(name) if name in names else np.zeros(codes.size, dtype=bool)
    return family.to_numpy(object) == name


def _running_other(rg: bu._RankGaps, iv: Intervals) -> tuple[np.ndarray, np.ndarray]:
    """Per interval of ``iv``: time a collective runs, and time only another stream is busy (ns)."""
    on_comm = iv & rg.comm_iv
    running = on_comm.length_in_each(iv)
    # (iv - comm) & other = (iv & other) - (iv & comm & other), the second inside the first: their lengths
    # subtract per interval, and iv - comm (as many pieces as iv, a 1M-gap rank's peak) is never built
    other = (iv & rg.other_iv).length_in_each(iv)
    other -= (on_comm & rg.other_iv).length_in_each(iv)
    return running, other


def analyse_ranks(ps: ProfileSet, maker: RankGaps, tolerance_us: float | None = None) -> bu.BubbleReport:
    """The bubbles report from the per-rank results ``maker`` left in ``ps`` (read with per_rank=maker);
    each rank's gaps are let go once classed (``ps.rank_results`` is emptied)."""
    ps.require_tasks("bubbles (compute-stream gaps)")
    results = ps.rank_results_from(maker)
    if results is None:
        raise ValueError("analyse_ranks needs a set read with load_profiles(per_rank=RankGaps(...))")
    parts = [results[r] for r in sorted(results) if results[r] is not None]
    present = sorted({f for p in parts for f in p["present"]})
    if maker.families:
        missing = [f for f in maker.families if f not in present]
        if missing:
            raise InputError(f"--family {','.join(missing)}: matches no collective; families present: "
                             f"{present or 'none'}")
    if not present and (maker.families or maker.consumer):
        kinds: Counter = Counter()
        for p in parts:
            kinds.update(p["kinds"])
        raise InputError(f"profile: no communication events; kinds present: {dict(kinds)}")
    if tolerance_us is not None and not (np.isfinite(tolerance_us) and tolerance_us >= 0):
        raise InputError(f"--tolerance-us {tolerance_us}: expected a finite time >= 0")
    if maker.consumer and not any(len(p["lags"]) for p in parts):
        common: pd.Series = pd.Series(dtype="int64")
        for p in parts:
            common = common.add(p["common"], fill_value=0)
        common = common.astype("int64").sort_values(ascending=False, kind="stable").head(8)
        listed = "; ".join(f"{n[:60]} x{c}" for n, c in common.items())
        raise InputError(f"--consumer {maker.consumer!r}: matches no compute kernel; most common kernels: {listed}")
    if not maker.keep_gaps:
        return _from_summaries(parts, maker, tolerance_us, results)
    per_rank = [p["gaps"] for p in parts]
    for p, rg in zip(parts, per_rank, strict=True):
        codes, uniques = p.pop("fam")
        rg.fam = uniques[codes] if len(uniques) else np.zeros(codes.size, dtype=object)
    cands = pd.concat([rg.candidates() for rg in per_rank], ignore_index=True)
    choice = _choice(cands["lag_ns"].to_numpy(np.int64), tolerance_us)
    tol_ns = choice["tolerance_ns"]
    sweep = bu.sweep(cands, tol_ns)
    del cands
    classified = []
    for i in range(len(per_rank)):  # each rank's gaps let go once classed: the peak stays near one copy
        rb = bu.classify_gaps(per_rank[i], tol_ns)
        rb.classes, rb.candidates = {}, None  # for plots, which take the whole-table path
        classified.append(rb)
        per_rank[i] = parts[i]["gaps"] = None
    results.clear()
    report = bu.BubbleReport(ranks=classified, families=maker.families or [], tolerance_ns=tol_ns,
                             tolerance={k: v for k, v in choice.items() if k != "tolerance_ns"},
                             tolerance_sweep=sweep, not_dit=co.training_of_ranks([p["training"] for p in parts]))
    if maker.consumer:
        report.lags = pd.concat([p["lags"] for p in parts], ignore_index=True)
        report.lag_summary = {"pattern": maker.consumer, **bu.summarise_lags(report.lags, tol_ns)}
    return report


def _choice(lags_ns: np.ndarray, tolerance_us: float | None) -> dict:
    """The tolerance and how it was chosen (from the release lags, or given)."""
    if tolerance_us is None:
        return bu.choose_tolerance(lags_ns)
    return {"source": "given", "tolerance_ns": int(round(tolerance_us * 1000)), "lags": int(lags_ns.size),
            "break_us": None, "rule": "--tolerance-us"}


def _from_summaries(parts: list[dict], maker: RankGaps, tolerance_us: float | None,
                    results: dict) -> bu.BubbleReport:
    """analyse_ranks from GapSummary parts: the same figures, no gap table."""
    summaries = [p.pop("summary") for p in parts]
    results.clear()
    # the tolerance and its sweep read the lags and credits only (the families of 8 ranks' candidates, concatenated,
    # would be turned into one text column)
    cands = pd.concat([s.candidates[["rank", "lag_ns", "credit_ns"]] for s in summaries], ignore_index=True)
    choice = _choice(cands["lag_ns"].to_numpy(np.int64), tolerance_us)
    tol_ns = choice["tolerance_ns"]
    report = bu.BubbleReport(ranks=[s.classify(tol_ns) for s in summaries], families=maker.families or [],
                             tolerance_ns=tol_ns, tolerance={k: v for k, v in choice.items() if k != "tolerance_ns"},
                             tolerance_sweep=bu.sweep(cands, tol_ns),
                             not_dit=co.training_of_ranks([p["training"] for p in parts]))
    if maker.consumer:
        report.lags = pd.concat([p["lags"] for p in parts], ignore_index=True)
        report.lag_summary = {"pattern": maker.consumer, **bu.summarise_lags(report.lags, tol_ns)}
    return report
