"""Measured masking from profiles: per-layer C and F, exposed communication of one family, ceiling.

C is the union of the masked family's collectives, F the union of the consumer compute kernels,
exposed = |union(family) - union(all compute of the rank)|, all exact int64 ns on each rank's
events inside its step windows. Masking of an arm = 1 - exposed / C; with a masking-off arm the
drop in exposed time is reported too. A pattern that matches nothing is an error, never a fallback.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ditpar.core.events import end_ns
from ditpar.core.intervals import Intervals
from ditpar.core.profile import ProfileSet
from ditpar.errors import InputError
from ditpar.masking import bound
from ditpar.masking.commands import add_profile_arguments as add_arguments  # noqa: F401


@dataclass(frozen=True)
class ArmFigures:
    """One rank of one arm, totals over its windows (ns) and the number of windows."""

    rank: int
    windows: int
    count: int
    comm_ns: int
    comm_sum_ns: int
    exposed_ns: int
    consumer_ns: int
    consumer_count: int


def _compile(flag: str, pattern: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern, re.IGNORECASE)
    except re.error as exc:
        raise InputError(f"{flag}: {pattern!r} is not a regular expression ({exc})") from None


def _spans(frame: pd.DataFrame) -> Intervals:
    return Intervals.from_spans(frame["start_ns"].to_numpy(np.int64), end_ns(frame))


def step_windows(profile: ProfileSet, rank: int) -> Intervals | None:
    """Union of the rank's step windows, or None when the profile has none."""
    steps = profile.steps
    if steps is None or len(steps) == 0:
        return None
    mine = steps[steps["rank"].astype("int64") == rank]
    if len(mine) == 0:
        return None
    return Intervals.from_spans(mine["start_ns"].to_numpy(np.int64), mine["end_ns"].to_numpy(np.int64))


def family_mask(events: pd.DataFrame, profile: ProfileSet, family: str, group: str | None,
                label: str) -> np.ndarray:
    """Rows of the masked family (and communicator); an error listing what exists when none match."""
    rx = _compile("--family", family)
    comm = events["kind"].to_numpy() == "comm"
    fam = events["family"].astype(str)
    hit = comm & fam.map(lambda v: bool(rx.fullmatch(v))).to_numpy()
    if not hit.any():
        present = events.loc[comm, "family"].astype(str).value_counts()
        listing = ", ".join(f"{k} ({v})" for k, v in present.items()) or "no collectives at all"
        raise InputError(f"{label}: --family {family!r} matches no collective; families present: {listing}")
    if group is not None:
        names = {g: {g, info.name, info.role} for g, info in profile.groups.items()}
        grp = events["group"].astype(str)
        in_group = grp.map(lambda g: group in names.get(g, {g})).to_numpy()
        if not (hit & in_group).any():
            present = events.loc[hit, "group"].astype(str).value_counts()
            listing = ", ".join(
                f"{k}" + (f" [{profile.groups[k].name or profile.groups[k].role}]" if k in profile.groups else "")
                + f" ({v})" for k, v in present.items())
            raise InputError(f"{label}: --group {group!r} matches no communicator of family {family!r}; "
                             f"communicators present: {listing}")
        hit &= in_group
    return hit


def _short(name: str, width: int = 70) -> str:
    return name if len(name) <= width else name[: width - 3] + "..."


def consumer_mask(events: pd.DataFrame, consumer: str, label: str) -> np.ndarray:
    """Rows of the compute kernels that hide the family; an error listing the top kernels when none match."""
    rx = _compile("--consumer", consumer)
    compute = events["kind"].to_numpy() == "compute"
    hit = compute & events["name"].astype(str).map(lambda v: bool(rx.search(v))).to_numpy()
    if not hit.any():
        kernels = events.loc[compute].groupby("name")["dur_ns"].sum().sort_values(ascending=False)
        listing = ", ".join(f"{_short(k)} ({v / 1000:.1f} us)" for k, v in kernels.head(8).items())
        raise InputError(f"{label}: --consumer {consumer!r} matches no compute kernel; top compute kernels: "
                         f"{listing or 'none'}")
    return hit


def measure_arm(profile: ProfileSet, family: str, consumer: str, group: str | None,
                label: str) -> list[ArmFigures]:
    """Per-rank totals of one arm."""
    events = profile.events
    profile.require_tasks(f"{label}: measured masking")
    if len(events) == 0:
        raise InputError(f"{label}: the profile holds no events")
    fam_all = family_mask(events, profile, family, group, label)
    con_all = consumer_mask(events, consumer, label)
    out = []
    for rank in sorted(int(r) for r in events["rank"].unique()):
        sel = (events["rank"].to_numpy(np.int64) == rank)
        windows = step_windows(profile, rank)
        fam = events[sel & fam_all]
        con = events[sel & con_all]
        comp = events[sel & (events["kind"].to_numpy() == "compute")]
        fam_iv, con_iv, comp_iv = _spans(fam), _spans(con), _spans(comp)
        if windows is not None:
            fam_iv, con_iv, comp_iv = fam_iv & windows, con_iv & windows, comp_iv & windows
            starts = fam["start_ns"].to_numpy(np.int64)
            count = int(windows.covered_at(starts).sum())
            ccount = int(windows.covered_at(con["start_ns"].to_numpy(np.int64)).sum())
            sum_ns = int(fam["dur_ns"].to_numpy(np.int64)[windows.covered_at(starts)].sum())
            n_windows = len(profile.steps[profile.steps["rank"].astype("int64") == rank])
        else:
            count, ccount = len(fam), len(con)
            sum_ns = int(fam["dur_ns"].sum())
            n_windows = 1
        out.append(ArmFigures(rank, n_windows, count, fam_iv.total, sum_ns, (fam_iv - comp_iv).total,
                              con_iv.total, ccount))
    return out


def infer_chunks(off: list[ArmFigures], on: list[ArmFigures]) -> int:
    """n from the growth of the family's op count (must be a whole number within 5% on every rank)."""
    ratios = []
    for a, b in zip(off, on, strict=True):
        if a.count == 0:
            raise InputError(f"rank {a.rank}: the masking-off arm has no op of the family; give --chunks")
        ratios.append(b.count / a.count)
    n = round(float(np.median(ratios)))
    if n < 1 or any(abs(r - n) > 0.05 * n for r in ratios):
        raise InputError(f"--chunks: the op count grew by {', '.join(f'{r:.3g}' for r in ratios)} per rank, "
                         "not a whole number; give --chunks")
    return n


def analyse(on: ProfileSet, family: str, consumer: str, layers: float, chunks: int | None,
            off: ProfileSet | None = None, group: str | None = None, drain_us: float | None = None,
            reverse_share: float | None = None) -> dict[str, object]:
    """Per-rank per-layer C, F, exposed, masking, ceiling and achieved fraction (JSON-ready)."""
    if not (layers > 0):
        raise InputError(f"--layers: expected a number of layers > 0, got {layers!r}")
    on_rows = measure_arm(on, family, consumer, group, "masking-on profile" if off is not None else "profile")
    off_rows = None
    if off is not None:
        off_rows = measure_arm(off, family, consumer, group, "masking-off profile")
        on_ranks, off_ranks = [r.rank for r in on_rows], [r.rank for r in off_rows]
        if on_ranks != off_ranks:
            raise InputError(f"ranks differ between arms: masking-off has {off_ranks}, masking-on has {on_ranks}")
    if chunks is None:
        if off_rows is None:
            raise InputError("--chunks: required with one profile (with --off it is inferred from the op counts)")
        chunks = infer_chunks(off_rows, on_rows)
    chunks = bound.check_chunks("--chunks", chunks)
    rows = []
    for i, r in enumerate(on_rows):
        per = r.windows * layers * 1000.0  # ns per rank -> us per layer
        C, E, F = r.comm_ns / per, r.exposed_ns / per, r.consumer_ns / per
        row: dict[str, object] = {
            "rank": r.rank, "windows": r.windows, "count": r.count,
            "comm_us": C, "comm_sum_us": r.comm_sum_ns / per, "compute_us": F, "consumer_count": r.consumer_count,
            "exposed_us": E, "masking": 1 - E / C if C > 0 else None,
            "count_off": None, "count_ratio": None, "comm_off_us": None, "exposed_off_us": None,
            "exposed_drop_us": None, "exposed_drop_frac": None,
        }
        if off_rows is not None:
            o = off_rows[i]
            per_o = o.windows * layers * 1000.0
            e_off = o.exposed_ns / per_o
            row.update(count_off=o.count, count_ratio=r.count / o.count if o.count else None,
                       comm_off_us=o.comm_ns / per_o, exposed_off_us=e_off, exposed_drop_us=e_off - E,
                       exposed_drop_frac=(e_off - E) / e_off if e_off > 0 else None)
        if C > 0 and F > 0:
            layer = bound.make_layer(C, F, chunks, drain_us, reverse_share)
            ceil = bound.ceiling(layer)
            row.update(c_over_f=bound.c_over_f(layer), regime=bound.regime(layer),
                       ideal=bound.ideal(chunks), ceiling=ceil,
                       achieved_fraction=row["masking"] / ceil if ceil > 0 else None)
        else:
            row.update(c_over_f=None, regime=None, ideal=bound.ideal(chunks), ceiling=None,
                       achieved_fraction=None)
        rows.append(row)
    worst = max(rows, key=lambda x: x["exposed_us"])
    return {"mode": "off-on" if off is not None else "single", "family": family, "consumer": consumer,
            "group": group, "layers": layers, "chunks": chunks, "rows": rows, "worst_rank": worst["rank"]}


COLUMNS = ["rank", "count", "comm_us", "compute_us", "exposed_us", "masking", "exposed_off_us",
           "exposed_drop_us", "c_over_f", "regime", "ceiling", "achieved_fraction"]


def main(args, tool: str) -> int:
    """Run `mask_bound.py profile`."""
    from ditpar import cli
    from ditpar.readers import load_profiles

    on = load_profiles(args.paths)
    off = load_profiles(args.off) if args.off else None
    # "worst rank" compares ranks: a skipped rank makes it partial (exit 1)
    skipped = [{"arm": arm, "rank": s["rank"], "reason": s["reason"], "path": s["path"]}
               for arm, ps in (("on", on), ("off", off)) if ps is not None for s in ps.skipped]
    cli.warn_skipped("mask_bound.py profile", skipped, needs_all=True)
    code = 1 if skipped else 0
    res = analyse(on, args.family, args.consumer, args.layers, args.chunks, off, args.group,
                  args.drain_us, args.reverse_share)
    if args.csv:
        cli.write_csv(args.csv, pd.DataFrame(res["rows"]))
    if args.json:
        cli.print_json(tool, {"command": "profile", **res, "skipped_ranks": skipped})
        return code
    print(f"family {res['family']!r}" + (f" on communicator {res['group']!r}" if res["group"] else "")
          + f", consumer {res['consumer']!r}, {res['chunks']} chunks; us per layer = rank total / "
          f"(step windows x {res['layers']:g} layers); mode {res['mode']}")
    print(cli.format_table(res["rows"], COLUMNS, digits=3))
    w = next(r for r in res["rows"] if r["rank"] == res["worst_rank"])
    if w["achieved_fraction"] is not None and w["achieved_fraction"] > 1.05:
        print(f"warning: rank {w['rank']} masks {w['achieved_fraction']:.3g}x its ceiling -- compute other than "
              "--consumer hides the family (F too small), C mixes other communicators (--group), or the "
              "drain is understated", file=sys.stderr)
    return code

