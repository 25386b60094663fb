"""The figures an engineer reads first in a collectives report, and what its blank cells mean.

Headline: per rank, exposed communication of each family as a share of the captured span, with its
call count; the rank's total is the union over families (two families exposed at the same moment
count once), so the family shares can add up to more than the total.
"""

from __future__ import annotations

import math

import pandas as pd

HEADLINE_COLUMNS = ["rank", "family", "calls", "exposed_us", "exposed_pct_of_span", "span_us"]


def headline(table: pd.DataFrame, ranks: pd.DataFrame) -> pd.DataFrame:
    """Per rank x family: calls, exposed time and its share of the rank's span; then the rank's union."""
    if table.empty or ranks.empty:
        return pd.DataFrame(columns=HEADLINE_COLUMNS)
    span = dict(zip(ranks["rank"].astype(int), ranks["span_ns"].astype("int64"), strict=True))
    total = dict(zip(ranks["rank"].astype(int), ranks["comm_exposed_ns"].astype("int64"), strict=True))
    # ranks without device tasks (profiler files only) have no exposed time: they are left out here
    timed = table[table["rank"].astype(int).isin(list(span))]
    if timed.empty:
        return pd.DataFrame(columns=HEADLINE_COLUMNS)
    fam = timed.groupby(["rank", "family"], sort=True).agg(calls=("count", "sum"),
                                                            exposed_ns=("exposed_ns", "sum")).reset_index()
    rows = []
    for rank, sub in fam.groupby("rank", sort=True):
        s = int(span[int(rank)])
        for r in sub.sort_values("exposed_ns", ascending=False).itertuples():
            rows.append(_row(int(rank), str(r.family), int(r.calls), int(r.exposed_ns), s))
        rows.append(_row(int(rank), "all (union)", int(sub["calls"].sum()), int(total[int(rank)]), s))
    return pd.DataFrame(rows, columns=HEADLINE_COLUMNS)


def _row(rank: int, family: str, calls: int, exposed_ns: int, span_ns: int) -> dict:
    return {"rank": rank, "family": family, "calls": calls, "exposed_us": exposed_ns / 1000.0,
            "exposed_pct_of_span": 100.0 * exposed_ns / span_ns if span_ns else math.nan,
            "span_us": span_ns / 1000.0}


#: why a cell of the collectives table is blank, per column
BLANK_REASONS = {
    "bytes": "the profile records no message size for these ops (Kineto: no 'In msg nelems'/'dtype' "
             "args on the collective, as in older PyTorch traces; Ascend: no communication.json)",
    "bandwidth_GBps": "no bytes, so no bandwidth",
    "group": "the profile names no communicator for these ops (Kineto: no 'Process Group Name' arg)",
    "transit_us": "no per-op transit/wait split: only Ascend communication.json records it (transit, "
                  "wait and idle are then blank, never 0)",
    "link_transit_us": "the profile's communication table has no per-transport transit time for these ops "
                       "(analysis.db / msprof-analyze tables are not read for it; communication.json has it)",
}
#: a column counted blank only on the rows where this other column is filled (else its own note says why)
BLANK_ONLY_WHERE = {"link_transit_us": "transit_us"}


def blank_cell_notes(table: pd.DataFrame) -> list[str]:
    """One line per column with blank cells, saying how many rows and why (nothing when none is blank)."""
    notes = []
    for col, why in BLANK_REASONS.items():
        if col not in table:
            continue
        cells = table[col]
        blank = cells.isna() | (cells.astype(str).str.strip() == "")
        if col in BLANK_ONLY_WHERE and BLANK_ONLY_WHERE[col] in table:
            blank &= table[BLANK_ONLY_WHERE[col]].notna()
        if blank.any():
            notes.append(f"{col} blank in {int(blank.sum())} of {len(table)} rows: {why}")
    return notes
