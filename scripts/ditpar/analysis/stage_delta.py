"""Stage deltas: what plan B's step time is made of compared with plan A, with a closure check.

Per side, each column is the mean over step windows of one rank; the headline compares the slowest
rank of each side. Closure: Stage + Bubble = Computing + Communication(Not Overlapped) + Free holds
per step by the profiler's definitions, so dStage must equal dComputing + dCNO + dFree - dBubble.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ditpar.analysis.collectives import collective_table, intervals_of, us
from ditpar.analysis.steps import assign_steps, has_steps, rank_steps
from ditpar.core.events import end_ns
from ditpar.core.profile import ProfileSet
from ditpar.errors import InputError
from ditpar.readers.ascend.text import read_step_trace

#: the step columns, in the profiler's names (Ascend step_trace_time.csv) and our JSON keys
COLUMNS = {
    "Computing": "computing_us",
    "Communication(Not Overlapped)": "communication_not_overlapped_us",
    "Overlapped": "overlapped_us",
    "Communication": "communication_us",
    "Free": "free_us",
    "Bubble": "bubble_us",
    "Stage": "stage_us",
}
#: closure: Stage = sum(sign x column)
CLOSURE = {"computing_us": 1, "communication_not_overlapped_us": 1, "free_us": 1, "bubble_us": -1}


@dataclass
class Side:
    """One arm of the comparison: per (rank, step) columns in us and where they came from."""

    label: str
    steps: pd.DataFrame  # rank, step, <COLUMNS values>
    source: str  # "step_trace_time.csv" or "events"
    families: pd.DataFrame | None = None  # rank, family, count, sum_us, exposed_us per step
    #: False when the ``rank`` column holds device ids (a bare CSV that names no rank)
    ranked: bool = True
    rank_from: str = "profile"

    @property
    def id_name(self) -> str:
        return "rank" if self.ranked else "device"


def columns_from_events(ps: ProfileSet) -> pd.DataFrame:
    """Step columns recomputed from the event table, per rank and step window (whole capture if none).

    An event belongs to the window that holds its start. Computing = |U(compute)|, Communication =
    |U(comm)|, CNO = |U(comm) - U(compute)|, Free = span - |U(compute) | U(comm)|, Bubble = summed
    receive time, Stage = span - Bubble; span runs from the first start to the last end of any event.
    """
    rows = []
    for rank, rev in ps.events.groupby("rank", sort=True):
        for step, win in _windows(ps, int(rank), rev):
            compute = intervals_of(win[win["kind"] == "compute"])
            comm_ev = win[win["kind"] == "comm"]
            comm = intervals_of(comm_ev)
            span = int(end_ns(win).max() - win["start_ns"].min())
            cno = (comm - compute).total
            bubble = int(comm_ev.loc[comm_ev["family"] == "recv", "dur_ns"].sum())
            free = span - (compute | comm).total
            rows.append({"rank": int(rank), "step": step, "computing_us": us(compute.total),
                         "communication_not_overlapped_us": us(cno), "overlapped_us": us(comm.total - cno),
                         "communication_us": us(comm.total), "free_us": us(free), "bubble_us": us(bubble),
                         "stage_us": us(span - bubble)})
    return pd.DataFrame(rows)


def _windows(ps: ProfileSet, rank: int, rev: pd.DataFrame):
    """Yield (step, events of that step); the whole capture (step None) when the profile has no steps."""
    labels = assign_steps(rev, rank_steps(ps.steps, rank))
    if not has_steps(labels):
        yield None, rev
        return
    for step, sub in rev[labels.notna()].groupby(labels[labels.notna()], sort=True):
        yield int(step), sub


def in_step_windows(ps: ProfileSet) -> tuple[pd.DataFrame, dict[int, int]]:
    """Events starting inside a step window, and the number of windows per rank (1 if none)."""
    frames, counts = [], {}
    for rank, rev in ps.events.groupby("rank", sort=True):
        wins = list(_windows(ps, int(rank), rev))
        counts[int(rank)] = len(wins)
        frames.extend(w for _, w in wins)
    return (pd.concat(frames) if frames else ps.events.iloc[:0]), counts


def family_per_step(ps: ProfileSet) -> pd.DataFrame:
    """Per rank and family (groups summed): count, summed and exposed time per step window."""
    events, counts = in_step_windows(ps)
    table = collective_table(events)
    if table.empty:
        return pd.DataFrame(columns=["rank", "family", "count", "sum_us", "exposed_us"])
    fam = table.groupby(["rank", "family"], sort=True)[["count", "sum_ns", "exposed_ns"]].sum().reset_index()
    n = fam["rank"].map(counts).astype(float)
    return pd.DataFrame({"rank": fam["rank"], "family": fam["family"], "count": fam["count"] / n,
                         "sum_us": fam["sum_ns"] / 1000.0 / n, "exposed_us": fam["exposed_ns"] / 1000.0 / n})


def side_from_profile(label: str, ps: ProfileSet) -> Side:
    """The profiler's own step table when the profile has one, else columns recomputed from events."""
    if ps.step_trace is not None and len(ps.step_trace):
        st = ps.step_trace.copy()
        for key in COLUMNS.values():
            if key not in st:
                raise InputError(f"{label}: step_trace lacks {key}; have {sorted(st.columns)}")
        steps, source = st[["rank", "step", *COLUMNS.values()]], "step_trace_time.csv"
    else:
        steps, source = columns_from_events(ps), "events"
    fam = family_per_step(ps) if (ps.events["kind"] == "comm").any() else None
    return Side(label=label, steps=steps, source=source, families=fam, rank_from="rank from the profile")


def side_from_step_trace_csv(label: str, path: str, rank: int | None, rank_from: str) -> Side:
    """A side from one step_trace_time.csv: rows labelled with the rank when known, else the Device_id."""
    steps = read_step_trace_csv(path)
    if rank is not None:
        return Side(label=label, steps=steps.assign(rank=rank), source="step_trace_time.csv",
                    rank_from=rank_from)
    return Side(label=label, steps=steps, source="step_trace_time.csv", ranked=False,
                rank_from="no rank in the CSV or its folder: " +
                          ("Device_id shown" if steps.attrs.get("device") else "rows labelled 0"))


def read_step_trace_csv(path: str) -> pd.DataFrame:
    """A bare step_trace_time.csv (one rank) as per-step columns, read by the Ascend reader.

    Its ``rank`` column holds Device_id (0 without one): a bare CSV names no rank, see side_from_step_trace_csv.
    """
    raw = read_step_trace(Path(path))
    if raw.empty:
        raise InputError(f"{path}: no step rows")
    for column in ("step", "device"):
        if column in raw and (raw[column].isna() | (raw[column] < 0)).any():
            row = int(np.flatnonzero((raw[column].isna() | (raw[column] < 0)).to_numpy())[0]) + 2
            name = "Step" if column == "step" else "Device_id"
            raise InputError(f"{path}: row {row} column {name!r}: expected a whole number, "
                             f"got {raw[column].iloc[row - 2]!r}")
    device = "device" in raw
    out = pd.DataFrame({"rank": raw["device"].astype(np.int64) if device else 0,
                        "step": raw["step"].astype(np.int64)}, index=raw.index)
    for key in COLUMNS.values():
        out[key] = raw[key].fillna(0.0)   # Bubble is absent in older profiler versions
    twice = out.duplicated(subset=["rank", "step"], keep="first")
    if twice.any():
        row = int(np.flatnonzero(twice.to_numpy())[0]) + 2
        raise InputError(f"{path}: row {row}: step {int(out['step'].iloc[row - 2])} of rank "
                         f"{int(out['rank'].iloc[row - 2])} appears twice")
    out.attrs["device"] = device
    return out


def rank_means(side: Side) -> pd.DataFrame:
    """Mean over steps of every column, per rank."""
    return side.steps.groupby("rank", sort=True)[list(COLUMNS.values())].mean()


def slowest(means: pd.DataFrame) -> int:
    """The rank with the largest mean Stage (the critical path of a synchronous step)."""
    return int(means["stage_us"].idxmax())


def closure_error(delta: dict[str, float]) -> float:
    """dStage minus the sum of its component deltas."""
    return delta["stage_us"] - sum(sign * delta[k] for k, sign in CLOSURE.items())


@dataclass
class DeltaReport:
    """Column deltas at the slowest rank of each side, per rank, per family; closure."""

    columns: list[dict]
    per_rank: list[dict]
    families: list[dict]
    closure_error_us: float
    tolerance_us: float
    a_rank: int
    b_rank: int
    a_source: str
    b_source: str
    steps: dict[str, dict[int, int]] = field(default_factory=dict)
    #: "rank" or "device" (a bare CSV names no rank), and where each side's rank came from
    a_id: str = "rank"
    b_id: str = "rank"
    a_rank_from: str = "profile"
    b_rank_from: str = "profile"

    @property
    def closed(self) -> bool:
        return abs(self.closure_error_us) <= self.tolerance_us


def compare(a: Side, b: Side, tolerance_us: float = 1.0) -> DeltaReport:
    """Per column: a_us, b_us, delta_us = b - a (slowest rank of each side), with the closure error."""
    if tolerance_us < 0:
        raise InputError(f"--tolerance-us {tolerance_us}: expected >= 0")
    ma, mb = rank_means(a), rank_means(b)
    ra, rb = slowest(ma), slowest(mb)
    names = {v: k for k, v in COLUMNS.items()}
    cols = [{"name": names[k], "key": k, "a_us": float(ma.loc[ra, k]), "b_us": float(mb.loc[rb, k]),
             "delta_us": float(mb.loc[rb, k] - ma.loc[ra, k])} for k in COLUMNS.values()]
    delta = {c["key"]: c["delta_us"] for c in cols}
    per_rank = []
    for rank in sorted(set(ma.index) & set(mb.index)):
        d = {k: float(mb.loc[rank, k] - ma.loc[rank, k]) for k in COLUMNS.values()}
        per_rank.append({"rank": int(rank) if a.ranked and b.ranked else None,
                         **({} if a.ranked and b.ranked else {"device": int(rank)}),
                         **{f"delta_{k}": v for k, v in d.items()},
                         "closure_error_us": closure_error(d)})
    fams = _family_deltas(a, b, ra, rb)
    counts = {"a": a.steps.groupby("rank").size().to_dict(), "b": b.steps.groupby("rank").size().to_dict()}
    return DeltaReport(columns=cols, per_rank=per_rank, families=fams, closure_error_us=closure_error(delta),
                       tolerance_us=tolerance_us, a_rank=ra, b_rank=rb, a_source=a.source, b_source=b.source,
                       steps=counts, a_id=a.id_name, b_id=b.id_name, a_rank_from=a.rank_from,
                       b_rank_from=b.rank_from)


def _family_deltas(a: Side, b: Side, ra: int, rb: int) -> list[dict]:
    """Per family, per step: count, summed and exposed time at each side's slowest rank."""
    if a.families is None or b.families is None:
        return []
    fa = a.families[a.families["rank"] == ra].set_index("family")
    fb = b.families[b.families["rank"] == rb].set_index("family")
    rows = []
    for fam in sorted(set(fa.index) | set(fb.index)):
        def get(frame, col, fam=fam):
            return float(frame.loc[fam, col]) if fam in frame.index else 0.0
        rows.append({"family": fam, "a_count": get(fa, "count"), "b_count": get(fb, "count"),
                     "a_sum_us": get(fa, "sum_us"), "b_sum_us": get(fb, "sum_us"),
                     "delta_sum_us": get(fb, "sum_us") - get(fa, "sum_us"),
                     "a_exposed_us": get(fa, "exposed_us"), "b_exposed_us": get(fb, "exposed_us"),
                     "delta_exposed_us": get(fb, "exposed_us") - get(fa, "exposed_us")})
    return rows


def linearity(t1_us: float, t2_us: float, n1: int, n2: int,
              e1_us: float | None = None, e2_us: float | None = None) -> dict:
    """Speedup t1/t2, linearity = speedup / (n2/n1), and how much of the shortfall exposed comm explains.

    The shortfall is t2 - t1/(n2/n1) (time over perfect scaling); the exposed-comm excess is
    e2 - e1/(n2/n1) on the same footing.
    """
    for name, v in (("n1", n1), ("n2", n2)):
        if v <= 0:
            raise InputError(f"--cards: {name} = {v}: expected a positive card count")
    if n1 == n2:
        raise InputError(f"--cards {n1} {n2}: the two card counts must differ")
    for name, v in (("A stage", t1_us), ("B stage", t2_us)):
        if not (v > 0 and math.isfinite(v)):
            raise InputError(f"{name} = {v} us: expected a positive time")
    for name, e, t in (("A", e1_us, t1_us), ("B", e2_us, t2_us)):
        if e is not None and not (math.isfinite(e) and 0 <= e <= t):
            raise InputError(f"{name} exposed communication = {e} us: expected 0..{t} us (the stage time; "
                             "exposed time is part of the stage)")
    ratio = n2 / n1
    speedup = t1_us / t2_us
    out = {"n1": n1, "n2": n2, "card_ratio": ratio, "t1_us": t1_us, "t2_us": t2_us, "speedup": speedup,
           "linearity": speedup / ratio, "ideal_t2_us": t1_us / ratio, "shortfall_us": t2_us - t1_us / ratio}
    if e1_us is not None and e2_us is not None:
        excess = e2_us - e1_us / ratio
        short = out["shortfall_us"]
        out.update({"exposed1_us": e1_us, "exposed2_us": e2_us, "exposed_delta_us": e2_us - e1_us,
                    "exposed_share1": e1_us / t1_us, "exposed_share2": e2_us / t2_us,
                    "exposed_excess_us": excess,
                    "exposed_share_of_shortfall": excess / short if short > 0 else float("nan")})
        out["first_suspect"] = _suspect(short, excess)
    return out


def _suspect(short: float, excess: float) -> str:
    if short <= 0:
        return "none: scaling is at or above linear"
    if excess >= 0.5 * short:
        return "exposed communication (explains at least half of the shortfall)"
    if excess > 0:
        return "exposed communication explains part; look next at Free (host/dispatch) and Computing"
    return "not exposed communication; look at Free (host/dispatch) and Computing"
