"""Group-local ranks to global ranks, for links and communicators.

communication_matrix.json / CommAnalyzerMatrix label a link "src-dst" with ranks local to its
communicator. The mapping is msprof-analyze's (``cluster_analyse/analysis/comm_matrix_analysis.py``,
Ascend mstt @ 99c2e0f9): the communicator whose double_hash is the link's group hash lists its
``global_ranks`` in parallel_group_info, and local rank i is the i-th of them in ascending order; where
metadata is silent, a rank's own self-link "k-k" says that this global rank is local rank k.
"""

from __future__ import annotations

import re

import pandas as pd

from ditpar.core.profile import ProfileSet

BY_METADATA = "parallel_group_info"
BY_SELF_LINK = "self link"
ALREADY_GLOBAL = "msprof-analyze (already global)"
_LINK = re.compile(r"^(?P<src>\d+)-(?P<dst>\d+)$")


def local_to_global(ps: ProfileSet) -> dict[str, dict[int, tuple[int, str]]]:
    """full communicator hash -> {local rank: (global rank, how it was found)}."""
    out: dict[str, dict[int, tuple[int, str]]] = {}
    for info in ps.groups.values():
        if info.full_hash and info.ranks:
            for local, rank in enumerate(sorted(info.ranks)):
                out.setdefault(info.full_hash, {})[local] = (int(rank), BY_METADATA)
    links = ps.links
    if links is not None and len(links):
        for rank, group_hash, link in links[["rank", "group_hash", "link"]].drop_duplicates().itertuples(index=False):
            m = _LINK.match(str(link))
            if m and m.group("src") == m.group("dst") and group_hash:
                out.setdefault(str(group_hash), {}).setdefault(int(m.group("src")), (int(rank), BY_SELF_LINK))
    return out


def add_global_links(links: pd.DataFrame, mapping: dict[str, dict[int, tuple[int, str]]],
                     already_global: bool = False) -> pd.DataFrame:
    """Links with src_rank/dst_rank (global; empty when unknown) beside the group-local link and the source."""
    out = links.copy()
    if already_global:
        ends = out["link"].astype(str).str.extract(_LINK.pattern)
        out["src_rank"] = pd.array(pd.to_numeric(ends["src"]), dtype="Int64")
        out["dst_rank"] = pd.array(pd.to_numeric(ends["dst"]), dtype="Int64")
        out["global_link"] = out["link"]
        out["mapped_by"] = ALREADY_GLOBAL
        return out
    src, dst, how = [], [], []
    for group_hash, link in zip(out["group_hash"].astype(str), out["link"].astype(str), strict=True):
        m = _LINK.match(link)
        table = mapping.get(group_hash, {})
        s = table.get(int(m.group("src"))) if m else None
        d = table.get(int(m.group("dst"))) if m else None
        src.append(s[0] if s else None)
        dst.append(d[0] if d else None)
        how.append(", ".join(sorted({x[1] for x in (s, d) if x})) if s and d else "")
    out["src_rank"] = pd.array(src, dtype="Int64")
    out["dst_rank"] = pd.array(dst, dtype="Int64")
    out["global_link"] = [f"{s}-{d}" if s is not None and d is not None else "" for s, d in zip(src, dst, strict=True)]
    out["mapped_by"] = how
    return out


def group_ranks(ps: ProfileSet, table: pd.DataFrame) -> list[int | None]:
    """The group-local rank of each (rank, group) row of a collectives table, where it is known."""
    mapping = local_to_global(ps)
    inverse: dict[str, dict[int, int]] = {}
    for full, table_ in mapping.items():
        for local, (rank, _) in table_.items():
            inverse.setdefault(full, {})[rank] = local
    out: list[int | None] = []
    for rank, group in zip(table["rank"], table["group"].astype(str), strict=True):
        info = ps.groups.get(group)
        out.append(inverse.get(info.full_hash, {}).get(int(rank)) if info and info.full_hash else None)
    return out


def unmapped_note(links: pd.DataFrame) -> str | None:
    """One line naming, per communicator, the group-local ranks whose global rank is unknown (blank src_rank /
    dst_rank in links[]): ranks that were not captured and that no parallel_group_info lists; None when none."""
    if links is None or links.empty or "dst_rank" not in links:
        return None
    blank = links["src_rank"].isna() | links["dst_rank"].isna()
    if not blank.any():
        return None
    parts = []
    for group_hash, sub in links.groupby(links["group_hash"].astype(str), sort=True):
        ends = sub["link"].astype(str).str.extract(_LINK.pattern).dropna()
        pairs = list(zip(pd.to_numeric(ends["src"]), pd.to_numeric(ends["dst"]), strict=True))
        locals_ = sorted({int(x) for pair in pairs for x in pair})
        known: dict[int, int] = {}
        for (src, dst), s_rank, d_rank in zip(pairs, sub.loc[ends.index, "src_rank"], sub.loc[ends.index, "dst_rank"],
                                              strict=True):
            if not pd.isna(s_rank):
                known[int(src)] = int(s_rank)
            if not pd.isna(d_rank):
                known[int(dst)] = int(d_rank)
        missing = [r for r in locals_ if r not in known]
        if not missing:
            continue
        name = f"communicator {group_hash[-3:]}" if group_hash else "a communicator without a hash"
        have = ", ".join(f"local {k} = rank {v}" for k, v in sorted(known.items())) or "none"
        parts.append(f"{name}: {len(locals_)} ranks in its links, local rank(s) {missing} not captured (no rank "
                     f"folder here, and no parallel_group_info lists the communicator), so their global ranks are "
                     f"unknown; mapped: {have}")
    if not parts:
        return None
    return (f"links: src_rank/dst_rank blank in {int(blank.sum())} of {len(links)} rows: " + "; ".join(parts)
            + ". Capture every rank (or keep profiler_metadata.json) to name them")
