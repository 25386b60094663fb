"""collectives.analyse computed rank by rank where each rank is read (load_profiles(per_rank=...)).

Every figure of the collectives report is a per-rank figure or a sum/extreme over ranks, so each
reader process analyses its own rank and only the small per-rank tables travel: 8 ranks of 1M
events never meet in one table. ``analyse_ranks`` merges them into the report the whole-set
``collectives.analyse`` gives (tests/test_collectives_ranks.py compares the two).
"""

from __future__ import annotations

from collections import Counter

import pandas as pd

from ditpar.analysis import collectives as co
from ditpar.analysis import global_ranks
from ditpar.core.events import kind_counts, kind_masks
from ditpar.core.profile import ProfileSet
from ditpar.errors import InputError


class RankCollectives:
    """The per-rank part of collectives.analyse (picklable: it runs in the reader processes)."""

    def __init__(self, families: list[str] | None = None, layers: int | None = None, steps: int | None = None):
        self.families, self.layers, self.steps = families, layers, steps
        self.__qualname__ = type(self).__qualname__  # ProfileSet.rank_results_from names the maker

    def __call__(self, one: ProfileSet) -> dict | None:
        events = one.events
        if events.empty:
            return None
        masks = kind_masks(events)  # once for every table below
        comm = masks[1]
        present = sorted(set(events["family"].to_numpy()[comm].tolist()) - {""})
        if self.families:
            keep = ~comm | events["family"].isin(self.families).to_numpy()
            events, masks = events[keep], (masks[0][keep], comm[keep])
        compute = co.compute_spans(events, masks)  # once for both tables
        out = {"present": present, "kinds": kind_counts(events, masks),
               "table": co.collective_table(events, one.groups, one.comm_ops, masks, compute),
               "ranks": co.rank_table(events, masks, compute), "streams": co.stream_table(events),
               "overlap": co.overlap_matrix(events, masks), "comm_streams": co.comm_streams_facts(events, masks),
               "layers": None, "scope": None,
               "training": co.training_facts(events, masks)}   # a training step is flagged with or without --layers
        if self.layers is not None:
            step_frame = one.steps if one.steps is not None and len(one.steps) else None
            out["layers"], out["scope"] = co.calls_per_layer(events, step_frame, self.layers, self.steps)
        return out


def analyse_ranks(ps: ProfileSet, maker: RankCollectives) -> co.CollectiveReport:
    """The collectives report from the per-rank results ``maker`` left in ``ps`` (read with per_rank=maker)."""
    results = ps.rank_results_from(maker)
    if results is None:
        raise ValueError("analyse_ranks needs a set read with load_profiles(per_rank=RankCollectives(...))")
    parts = [results[r] for r in sorted(results) if results[r] is not None]
    present = sorted({f for p in parts for f in p["present"]} | co._partial_families(ps))
    if maker.families:
        missing = [f for f in maker.families if f not in present]
        if missing:
            raise InputError(f"--family {','.join(missing)}: matches no collective; families present: "
                             f"{present or 'none'}")
    fams = list(maker.families) if maker.families else present
    if not fams:
        kinds: Counter = Counter()
        for p in parts:
            kinds.update(p["kinds"])
        raise InputError(f"profile: no communication events found; event kinds present: {dict(kinds)}")
    table = _concat([p["table"] for p in parts], co.collective_table(ps.events.iloc[:0]).columns)
    for i, row in table.iterrows():  # names and roles from every rank's metadata, as the whole set has them
        info = ps.groups.get(str(row["group"]))
        table.at[i, "group_name"] = info.name if info else ""
        table.at[i, "group_role"] = info.role if info else ""
    table["evidence"] = "tasks"
    extra = co.partial_rank_rows(ps, None, fams)
    if len(extra):
        table = pd.concat([table, extra], ignore_index=True)
    table["group_rank"] = pd.array(global_ranks.group_ranks(ps, table), dtype="Int64")
    table["bytes_from"] = [ps.bytes_from.get(int(r), "") if b is not None and b == b else ""
                           for r, b in zip(table["rank"], table["bytes"], strict=True)]
    rtab = _concat([p["ranks"] for p in parts], co.rank_table(ps.events.iloc[:0]).columns)
    with_tasks = table[table["evidence"] == "tasks"]
    if with_tasks.empty and len(table):
        accounting = co.check_row("exposed_le_union_le_sum", co.NO_EVIDENCE, "no rank has device tasks "
                                  "(kernel_details.csv): union and exposed time need kernel rows")
    else:
        accounting = co.check_accounting(with_tasks, rtab)
    keys = set().union(*[p["comm_streams"][0] for p in parts]) if parts else set()
    on_comm = _add_counts([p["comm_streams"][1] for p in parts])
    checks = [accounting, co.comm_streams_check(keys, on_comm)]
    layer_table = None
    not_dit = co.training_of_ranks([p["training"] for p in parts])
    if maker.layers is not None:
        layer_table = _concat([p["layers"] for p in parts], ["rank", "family", "group", "count", "layers", "steps",
                                                             "calls_per_layer", "whole", "likely_extra"])
        if not_dit is not None:
            layer_table["likely_extra"] = ""
        scope = "collectives inside steps" if any(p["scope"] == "collectives inside steps" for p in parts) \
            else "whole capture"
        checks.append(co.check_layers(layer_table, scope))
    if ps.skipped:
        checks.append(co.check_all_ranks(ps))
    slow, by = co.slowest_rank(ps, rtab)
    return co.CollectiveReport(table=table, ranks=rtab,
                               streams=_concat([p["streams"] for p in parts], ["rank", "stream", "core", "kind",
                                                                               "count", "sum_us", "busy_us"]),
                               overlap=_concat([p["overlap"] for p in parts], ["rank", "a", "b", "overlap_us",
                                                                               "overlap_of_smaller"]),
                               skew=co.family_skew(table), layers=layer_table, checks=checks, slowest_rank=slow,
                               slowest_by=by, not_dit=not_dit, links=co.link_table(ps, None))


def _concat(frames: list[pd.DataFrame], columns) -> pd.DataFrame:
    frames = [f for f in frames if f is not None and len(f)]
    if not frames:
        return pd.DataFrame(columns=list(columns))
    return pd.concat(frames, ignore_index=True)


def _add_counts(series: list[pd.Series]) -> pd.Series:
    out = pd.Series(dtype="int64")
    for s in series:
        out = out.add(s, fill_value=0)
    return out.astype("int64")
