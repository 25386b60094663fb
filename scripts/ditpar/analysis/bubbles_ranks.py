"""bubbles.analyse with each rank's gaps found where the rank is read (load_profiles(per_rank=...)).

The gaps and release candidates of one rank need only that rank's events; the tolerance is then chosen
from the candidates of all ranks and every rank's gaps are classed with it, as ``bubbles.analyse``
does on the whole set (tests/test_bubbles_ranks.py compares the two). The event tables stay in the
reader processes; only gaps, comm rows and consumer lags travel.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pandas as pd

from ditpar.analysis import bubbles as bu
from ditpar.analysis.steps import rank_steps
from ditpar.core.events import kind_masks
from ditpar.core.profile import ProfileSet
from ditpar.errors import InputError


class RankGaps:
    """The per-rank part of bubbles.analyse (picklable: it runs in the reader processes)."""

    def __init__(self, families: list[str] | None = None, stream: str | None = None, consumer: str | None = None):
        self.families, self.stream, self.consumer = families, stream, consumer
        self.__qualname__ = type(self).__qualname__  # ProfileSet.rank_results_from names the maker

    def __call__(self, one: ProfileSet) -> dict | None:
        events = one.events
        if events.empty:
            return None
        masks = kind_masks(events)
        rank = int(events["rank"].iloc[0])
        out = {"kinds": events["kind"].value_counts().to_dict(),
               "present": sorted(set(events.loc[masks[1], "family"]) - {""}),
               "gaps": bu.rank_gaps(events, rank_steps(one.steps, rank), self.families or [], self.stream, masks),
               "lags": None, "common": None}
        # one family name per gap travels as small codes: unpickling a million strings would cost ~50 MB
        codes, uniques = pd.factorize(out["gaps"].fam, use_na_sentinel=False)
        out["fam"] = (codes.astype(np.int32), np.asarray(uniques, dtype=object))
        out["gaps"].fam = None
        if self.consumer:
            out["lags"] = bu.consumer_lags(events, bu.compile_consumer(self.consumer), self.families or [], masks)
            if not len(out["lags"]):
                out["common"] = events.loc[events["kind"] == "compute", "name"].value_counts().head(8)
        return out


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
    per_rank = [p["gaps"] for p in parts]
    for p, rg in zip(parts, per_rank, strict=True):
        codes, uniques = p.pop("fam")
        rg.fam = uniques[codes] if len(uniques) else np.zeros(codes.size, dtype=object)
    cands = pd.concat([rg.candidates() for rg in per_rank], ignore_index=True)
    if tolerance_us is None:
        choice = bu.choose_tolerance(cands["lag_ns"].to_numpy(np.int64))
    else:
        choice = {"source": "given", "tolerance_ns": int(round(tolerance_us * 1000)), "lags": len(cands),
                  "break_us": None, "rule": "--tolerance-us"}
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
                             tolerance_sweep=sweep)
    if maker.consumer:
        report.lags = pd.concat([p["lags"] for p in parts], ignore_index=True)
        report.lag_summary = {"pattern": maker.consumer, **bu.summarise_lags(report.lags, tol_ns)}
    return report
