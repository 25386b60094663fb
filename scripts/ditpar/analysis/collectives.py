"""Collective attribution: per rank x (family, communicator) time, overlap, exposure and bandwidth.

Every figure is computed on merged intervals (exact int64 ns): union before intersection, so
concurrent collectives are never counted twice. "Exposed" is communication time that no compute
kernel of the same rank overlaps. Memory copies and memsets (kind ``other``) are neither.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ditpar.analysis import global_ranks
from ditpar.analysis.steps import assign_steps, has_steps, rank_steps
from ditpar.core.events import by_rank, end_ns, few_codes, kind_counts, kind_masks
from ditpar.core.intervals import Intervals
from ditpar.core.profile import GroupInfo, ProfileSet
from ditpar.errors import InputError

PASS, FAIL, NO_EVIDENCE = "PASS", "FAIL", "NO EVIDENCE"

#: likely sources of extra calls of one family, shown when calls per layer is not a whole number
EXTRA_SOURCES = {
    "allgather": "layer-wise offload weight gathers on the same group, TP, text encoder, VAE",
    "alltoall": "text encoder or VAE all-to-all, an extra Ulysses exchange (e.g. pre/post-processing)",
    "alltoallv": "text encoder or VAE all-to-all, an extra Ulysses exchange (e.g. pre/post-processing)",
    "allreduce": "TP row-parallel reductions, CFG-parallel combine, text encoder, VAE, norm statistics",
    "reducescatter": "TP/sequence-parallel outputs, offload, text encoder, VAE",
    "broadcast": "weight or seed broadcast at start-up, text encoder, VAE",
}
DEFAULT_EXTRA = "offload weight gathers, TP, text encoder, VAE"

#: compute kernels that only a training step runs (backward passes, gradient kernels, optimizers)
TRAINING_KERNELS = re.compile(r"backward|[wd]grad|_grad_|grad_input|grad_weight|Grad(?:_|$|WithArgmax)|"
                              r"multi_tensor_apply|adamw?[_(]|fused_adam", re.I)
#: this many training kernels (and at least 1 % of the compute kernels) mark a training profile
TRAINING_MIN_KERNELS = 5


def training_evidence(events: pd.DataFrame) -> str | None:
    """A one-line reason when the profile is a training step (not DiT inference), else None.

    The calls-per-layer hints name DiT inference sources (text encoder, VAE, CFG, Ulysses); on a
    training or pipeline-parallel training profile they mislead, so callers say this once instead.
    """
    return training_line(*training_facts(events))


def training_facts(events: pd.DataFrame, masks: Masks | None = None) -> tuple[int, pd.Series]:
    """(compute kernel count, count of each training-kernel name): what training_line judges, per rank."""
    is_compute = masks[0] if masks is not None else events["kind"].to_numpy() == "compute"
    names = pd.Series(events["name"].to_numpy()[is_compute], dtype=object)
    if names.empty:
        return 0, pd.Series(dtype="int64")
    # the distinct names through a set: pd.unique's hash table for 1M rows costs about 60 MB
    hit_names = {n for n in set(names.tolist()) if TRAINING_KERNELS.search(str(n))}
    hits = names[names.isin(hit_names)] if hit_names else names.iloc[:0]
    return len(names), hits.value_counts()


def training_of_ranks(facts: list[tuple[int, pd.Series]]) -> str | None:
    """training_line over the training_facts of several ranks (each computed where its events are)."""
    counts = pd.Series(dtype="int64")
    for _, hits in facts:
        counts = counts.add(hits, fill_value=0)
    return training_line(sum(int(total) for total, _ in facts), counts.astype("int64"))


def training_line(total: int, hit_counts: pd.Series) -> str | None:
    hits = int(hit_counts.sum())
    if hits < TRAINING_MIN_KERNELS or hits < 0.01 * total:
        return None
    example = hit_counts.sort_values(ascending=False, kind="stable").index[0]
    return (f"{hits} of {total} compute kernels are backward/gradient/optimizer kernels "
            f"(e.g. {evidence_excerpt(str(example))}): a training step")


def evidence_excerpt(name: str, width: int = 90) -> str:
    """A long kernel name cut so that the words that matched TRAINING_KERNELS stay in view."""
    if len(name) <= width:
        return name
    match = TRAINING_KERNELS.search(name)
    start = 0 if match is None else max(0, min(match.start() - width // 3, len(name) - width))
    return ("..." if start else "") + name[start:start + width] + ("..." if start + width < len(name) else "")

#: columns of the per (rank, family, group) table, in print order
TABLE_COLUMNS = [
    "rank", "family", "group", "group_name", "group_role", "count", "sum_us", "union_us",
    "union_over_sum", "exposed_us", "mean_us", "median_us", "p90_us", "bytes", "bandwidth_GBps",
    "transit_us", "link_transit_us", "wait_us", "idle_us", "wait_share",
]


def us(ns: int | float | np.integer) -> float:
    """Nanoseconds to microseconds (float, for output only)."""
    return float(ns) / 1000.0


def intervals_of(frame: pd.DataFrame) -> Intervals:
    """Union of the [start, end) spans of an event frame."""
    starts = frame["start_ns"].to_numpy(np.int64)
    return Intervals.from_spans(starts, starts + frame["dur_ns"].to_numpy(np.int64))


#: (compute rows, comm rows) of an event table (core.events.kind_masks), computed once by a caller that
#: builds several tables from it
Masks = tuple[np.ndarray, np.ndarray]


def _masks_of(rows: pd.DataFrame, events: pd.DataFrame, masks: Masks | None) -> Masks:
    """The kind masks of one rank's rows: the caller's when those rows are the whole table, else computed."""
    return masks if masks is not None and rows is events else kind_masks(rows)


def compute_spans(frame: pd.DataFrame, masks: Masks) -> Intervals:
    """Union of the spans of the compute rows (``masks``: kind_masks of ``frame``)."""
    return _spans(frame, masks[0])


def _spans(frame: pd.DataFrame, mask: np.ndarray) -> Intervals:
    """Union of the spans of the rows of ``frame`` where ``mask`` holds (no filtered copy of the frame)."""
    starts = frame["start_ns"].to_numpy(np.int64)[mask]
    return Intervals.from_spans(starts, starts + frame["dur_ns"].to_numpy(np.int64)[mask])


def check_row(name: str, status: str, detail: str) -> dict[str, str]:
    """One entry of ``checks[]``."""
    return {"name": name, "status": status, "detail": detail}


def _partial_families(ps: ProfileSet) -> set[str]:
    """Families of the communication.json ops of ranks without device tasks."""
    ops = ps.comm_ops
    if not ps.partial_ranks or ops is None or ops.empty:
        return set()
    return set(ops.loc[ops["rank"].isin(list(ps.partial_ranks)), "family"])


def select_ranks(ps: ProfileSet, ranks: list[int] | None) -> pd.DataFrame:
    """Events of the requested ranks; an unknown rank is an error listing the ranks present."""
    events = ps.events
    if not ranks:
        return events
    have = sorted({*ps.ranks, *ps.partial_ranks})
    missing = sorted(set(ranks) - set(have))
    if missing:
        raise InputError(f"--rank {missing}: not in the profile; ranks present: {have}")
    return events[events["rank"].isin(ranks)]


def require_families(events: pd.DataFrame, families: list[str] | None, also: set[str] | None = None) -> list[str]:
    """Check that each requested family occurs among the comm events (or ``also``); return the list."""
    comm = events[events["kind"] == "comm"]
    present = sorted((set(comm["family"]) | (also or set())) - {""})
    if not families:
        return present
    missing = [f for f in families if f not in present]
    if missing:
        raise InputError(f"--family {','.join(missing)}: matches no collective; families present: {present or 'none'}")
    return list(families)


def _percentile_us(durs: np.ndarray, q: float) -> float:
    return us(np.percentile(durs, q)) if durs.size else float("nan")


@dataclass
class CollectiveReport:
    """All tables of one collectives analysis; ns integers inside, us floats when exported."""

    table: pd.DataFrame
    ranks: pd.DataFrame
    streams: pd.DataFrame
    overlap: pd.DataFrame
    skew: pd.DataFrame
    layers: pd.DataFrame | None
    checks: list[dict[str, str]] = field(default_factory=list)
    slowest_rank: int | None = None
    slowest_by: str = ""
    #: set when the profile is not DiT inference (training kernels found): the DiT hints are left out
    not_dit: str | None = None
    links: pd.DataFrame | None = None


def collective_table(events: pd.DataFrame, groups: dict[str, GroupInfo] | None = None,
                     comm_ops: pd.DataFrame | None = None, masks: Masks | None = None,
                     compute_union: Intervals | None = None) -> pd.DataFrame:
    """Per rank x (family, group): count, sum, union, union/sum, exposed, duration stats, bytes, bandwidth.

    The ``*_ns`` columns hold exact integers; the ``*_us`` columns are the same values in us.
    ``compute_union``: the union of a one-rank table's compute rows, where the caller has it (else computed).
    """
    groups = groups or {}
    rows = []
    for rank, rev in by_rank(events):
        is_compute, is_comm = _masks_of(rev, events, masks)
        compute = compute_union if compute_union is not None and rev is events else _spans(rev, is_compute)
        # the comm rows' columns as arrays, grouped by row positions (no sub-table per family and group)
        start = rev["start_ns"].to_numpy(np.int64)[is_comm]
        dur = rev["dur_ns"].to_numpy(np.int64)[is_comm]
        size = rev["bytes"].array[is_comm]
        has_size = ~np.asarray(size.isna(), dtype=bool)
        size = size.to_numpy(dtype=np.int64, na_value=0)
        keys = _columns_at(rev, ["family", "group"], is_comm)
        for (family, group), at in group_positions(keys, ["family", "group"]):  # groupby(sort=True)'s order
            durs = dur[at]
            iv = Intervals.from_spans(start[at], start[at] + durs)
            sum_ns = int(durs.sum())
            union_ns = iv.total
            exposed_ns = (iv - compute).total
            sized = has_size[at]
            nbytes = int(size[at][sized].sum()) if sized.any() else None
            sized_ns = int(durs[sized].sum()) if sized.any() else 0
            info = groups.get(str(group))
            rows.append({
                "rank": int(rank), "family": family, "group": group,
                "group_name": info.name if info else "", "group_role": info.role if info else "",
                "count": int(durs.size), "sum_ns": sum_ns, "union_ns": union_ns, "exposed_ns": exposed_ns,
                "sum_us": us(sum_ns), "union_us": us(union_ns),
                "union_over_sum": union_ns / sum_ns if sum_ns else float("nan"),
                "exposed_us": us(exposed_ns),
                "mean_us": us(durs.mean()), "median_us": _percentile_us(durs, 50),
                "p90_us": _percentile_us(durs, 90),
                "sized_count": int(sized.sum()), "bytes": nbytes,
                # bytes per ns is exactly GB/s (1e9 B/s)
                "bandwidth_GBps": nbytes / sized_ns if nbytes is not None and sized_ns else float("nan"),
            })
    table = pd.DataFrame(rows, columns=[*TABLE_COLUMNS, "sum_ns", "union_ns", "exposed_ns", "sized_count"])
    return _add_wait_split(table, comm_ops, events, masks)


def _sum_all(values: pd.Series) -> float:
    """Sum of a split column, or NaN when any op lacks it: a partial sum would read as a small time."""
    return float(values.sum()) if len(values) and values.notna().all() else float("nan")


def _add_wait_split(table: pd.DataFrame, comm_ops: pd.DataFrame | None,
                    events: pd.DataFrame | None = None, masks: Masks | None = None) -> pd.DataFrame:
    """Join transit and wait time per (rank, family, group) where the profile splits them.

    Each communication.json op is placed by the comm event of the same rank and op name (so it
    lands where its time is counted); an op without such an event keeps its own classification.
    ``split_ops`` counts the ops summed, so a missing split (0 ops) is not read as zero time.
    """
    table["transit_us"] = float("nan")
    table["link_transit_us"] = float("nan")
    table["wait_us"] = float("nan")
    table["wait_share"] = float("nan")
    table["idle_us"] = float("nan")
    table["split_ops"] = 0
    if comm_ops is None or comm_ops.empty or table.empty:
        return table
    ops = comm_ops.copy()
    if "link_transit_us" not in ops:
        ops["link_transit_us"] = float("nan")
    ops["group"] = ops["group"].astype(str)
    if events is not None and "name" in ops:
        is_comm = masks[1] if masks is not None else (events["kind"] == "comm").to_numpy()
        comm = events.loc[is_comm, ["rank", "name", "family", "group"]]
        placed = comm.drop_duplicates(["rank", "name"]).rename(columns={"family": "_f", "group": "_g"})
        ops = ops.merge(placed, on=["rank", "name"], how="left")
        hit = ops["_f"].notna()
        ops.loc[hit, "family"] = ops.loc[hit, "_f"]
        ops.loc[hit, "group"] = ops.loc[hit, "_g"].astype(str)
    keys = ["rank", "family", "group"]
    agg = ops.groupby(keys, sort=False).agg(
        transit_us=("transit_us", _sum_all), link_transit_us=("link_transit_us", _sum_all),
        wait_us=("wait_us", _sum_all), idle_us=("idle_us", _sum_all),
        split_ops=("transit_us", "size")).reset_index()
    left = table[keys].assign(group=table["group"].astype(str), rank=table["rank"].astype("int64"))
    agg["rank"] = agg["rank"].astype("int64")
    joined = left.merge(agg, on=keys, how="left")
    for col in ("transit_us", "link_transit_us", "wait_us", "idle_us"):
        table[col] = joined[col].to_numpy(float)
    table["split_ops"] = joined["split_ops"].fillna(0).astype("int64").to_numpy()
    table["wait_share"] = wait_share(table["transit_us"], table["link_transit_us"], table["wait_us"])
    return table


def wait_share(transit: pd.Series, link_transit: pd.Series, wait: pd.Series) -> np.ndarray:
    """wait / (wait + transit); null where it would mislead: no time at all, or a master stream that moved
    nothing (transit 0) while the links carried data (link transit > 0): its wait then holds the transfers
    that other streams ran, not only waiting for peers."""
    total = transit + wait
    hidden = (transit <= 0) & (link_transit > 0)
    return np.where((total > 0) & ~hidden, wait / total.where(total > 0, 1.0), np.nan)


def transit_note(table: pd.DataFrame) -> str | None:
    """Why transit_us and the links' transit differ, naming the rows where transit_us is below link_transit_us.

    communication.json times an op's transit, wait and idle on its master stream only (wall clock: transit +
    wait + idle = elapse); its per-transport Transit Time, like communication_matrix.json's links, sums the
    transfer tasks of every stream and link (busy time, parallel links counted each). Where the transfers run
    on other streams (e.g. a mesh all-gather) the master stream only waits: transit reads 0 and the wait holds
    the transfer.
    """
    if "link_transit_us" not in table or table.empty:
        return None
    rows = table[(table["link_transit_us"] > table["transit_us"]) & table["transit_us"].notna()]
    if rows.empty:
        return None
    hidden = rows[rows["transit_us"] <= 0]
    named = "; ".join(f"rank {r.rank} {r.family}@{r.group}: {r.transit_us:.3f} vs {r.link_transit_us:.3f}"
                      for r in rows.head(6).itertuples())
    more = f"; and {len(rows) - 6} more" if len(rows) > 6 else ""
    line = (f"transit_us < link_transit_us on {len(rows)} row(s) ({named}{more}): transit_us/wait_us/idle_us are "
            "communication.json's Communication Time Info, timed on the op's master stream only (transit + wait "
            "+ idle = elapse); link_transit_us is its Communication Bandwidth Info Transit Time (HCCS, PCIE, SIO, "
            "RDMA), which sums the transfer tasks of every stream and link, as the links table does, so parallel "
            "links each count")
    if len(hidden):
        line += (f"; on {len(hidden)} row(s) the master stream moved nothing (transit_us 0): the transfers ran on "
                 "other streams while it waited, so wait_us holds transfer time and wait_share is left empty")
    return line


#: what ``bytes`` holds, by ``bytes_from``: the text header names it, the JSON says it (bytes_meaning)
BYTES_MEANING = {
    "message": "message bytes: the size the profile records per call (Ascend trace_view.json count x dtype, "
               "Kineto msg nelems x dtype)",
    "transit": "transit bytes: what each op moved over its links (communication.json / analysis.db Transit Size, "
               "HCCS + PCIE + SIO + RDMA; the profile records no message size, e.g. trace_view.json absent), "
               "not the message size",
}
#: what links[].bytes holds
LINK_BYTES_MEANING = "transit bytes: what the op type moved over that link in the step (communication_matrix.json)"


def bytes_label(table: pd.DataFrame) -> tuple[str, str | None]:
    """The header for the ``bytes`` column (msg_bytes / transit_bytes, or bytes when the ranks differ) and a
    note when the meaning is not the message size, or differs by rank."""
    kinds = table["bytes_from"] if "bytes_from" in table else pd.Series(dtype=object)
    present = sorted({str(k) for k in kinds if k})
    if present == ["message"]:
        return "msg_bytes", None
    if present == ["transit"]:
        return "transit_bytes", f"transit_bytes = {BYTES_MEANING['transit']}"
    if not present:
        return "bytes", None
    ranks = {k: sorted({int(r) for r, b in zip(table["rank"], kinds, strict=True) if b == k}) for k in present}
    return "bytes", ("bytes differ by rank (bytes_from per row): " + "; ".join(
        f"ranks {ranks[k]}: {BYTES_MEANING.get(k, k)}" for k in present) + "; their bandwidths do not compare")


def link_table(ps: ProfileSet, ranks: list[int] | None = None) -> pd.DataFrame:
    """Per rank, op type and link: bytes, transit time and bandwidth (communication_matrix.json totals).

    ``bandwidth_GBps`` is bytes / transit time computed here; ``profiler_bandwidth_GBps`` is the
    profiler's own figure, kept beside it for comparison.
    """
    cols = ["rank", "step", "op", "link", "src_rank", "dst_rank", "transport", "bytes", "transit_us",
            "bandwidth_GBps", "profiler_bandwidth_GBps", "group_hash", "mapped_by"]
    links = ps.links
    if links is None or links.empty:
        return pd.DataFrame(columns=cols)
    if ranks:
        links = links[links["rank"].isin(ranks)]
    out = links.copy()
    t = out["transit_us"].to_numpy(float)
    # bytes per us / 1e3 is GB/s
    out["bandwidth_GBps"] = np.where(t > 0, out["bytes"].to_numpy(float) / np.where(t > 0, t, 1.0) / 1e3, np.nan)
    # link = group-local ranks (global already in msprof-analyze's cluster matrix)
    out = global_ranks.add_global_links(out, global_ranks.local_to_global(ps), ps.links_global)
    return out[cols].reset_index(drop=True)


def rank_table(events: pd.DataFrame, masks: Masks | None = None,
               compute_union: Intervals | None = None) -> pd.DataFrame:
    """Per rank, whole capture, all families merged: comm union, exposed comm and overlap %.

    overlap_pct = |U(comm) & U(compute)| / |U(comm)| x 100; memcpy/memset are in neither set.
    ``compute_union``: as for collective_table.
    """
    rows = []
    for rank, rev in by_rank(events):
        is_compute, is_comm = _masks_of(rev, events, masks)
        comm = _spans(rev, is_comm)
        compute = compute_union if compute_union is not None and rev is events else _spans(rev, is_compute)
        overlap_ns = (comm & compute).total
        exposed_ns = comm.total - overlap_ns
        ends = end_ns(rev)
        span_ns = int(ends.max() - rev["start_ns"].min()) if len(rev) else 0
        rows.append({
            "rank": int(rank), "comm_union_ns": comm.total, "comm_exposed_ns": exposed_ns,
            "overlap_ns": overlap_ns, "compute_union_ns": compute.total, "span_ns": span_ns,
            "comm_union_us": us(comm.total), "comm_exposed_us": us(exposed_ns),
            "overlap_pct": 100.0 * overlap_ns / comm.total if comm.total else float("nan"),
            "compute_union_us": us(compute.total), "span_us": us(span_ns),
        })
    return pd.DataFrame(rows, columns=["rank", "comm_union_ns", "comm_exposed_ns", "overlap_ns", "compute_union_ns",
                                       "span_ns", "comm_union_us", "comm_exposed_us", "overlap_pct",
                                       "compute_union_us", "span_us"])


def _columns_at(events: pd.DataFrame, columns: list[str], rows: np.ndarray) -> pd.DataFrame:
    """Those columns at those rows, each kept as the array it is (object stays object: no text inference)."""
    return pd.DataFrame({c: pd.Series(events[c].to_numpy()[rows], dtype=events[c].dtype, copy=False)
                         for c in columns}, copy=False)


def group_positions(events: pd.DataFrame, columns: list[str]) -> list[tuple[tuple, np.ndarray]]:
    """(key, ascending row positions) of each distinct combination of ``columns``, rows with a missing key
    left out: what ``groupby(columns).indices`` gives, from one int64 key per row instead of pandas'
    per-column codes and group index (a 1M-row rank's groupby peaked at 80 MB over its table)."""
    n = len(events)
    combined = np.zeros(n, dtype=np.int64)
    present = np.ones(n, dtype=bool)
    uniques = []
    for col in columns:
        codes, uniq = few_codes(events[col].to_numpy())
        present &= codes >= 0
        combined *= max(len(uniq), 1)
        combined += np.maximum(codes, 0)
        del codes
        uniques.append(uniq)
    rows = np.flatnonzero(present)
    del present
    keys = combined[rows]
    del combined
    top = int(keys.max()) if keys.size else 0
    # few combinations: a stable sort of 8- or 16-bit keys is numpy's radix sort (4x faster than int64's)
    narrow = keys.astype(np.uint8) if top < 1 << 8 else keys.astype(np.uint16) if top < 1 << 16 else keys
    order = np.argsort(narrow, kind="stable")
    del narrow
    rows, keys = rows[order], keys[order]
    del order
    cuts = np.flatnonzero(keys[1:] != keys[:-1]) + 1
    out = []
    for lo, hi in zip(np.concatenate([[0], cuts]), np.concatenate([cuts, [len(keys)]]), strict=True):
        if hi <= lo:
            continue
        key, parts = int(keys[lo]), []
        for uniq in reversed(uniques):
            key, code = divmod(key, max(len(uniq), 1))
            parts.append(uniq[code])
        out.append((tuple(reversed(parts)), rows[lo:hi]))
    return out


def stream_table(events: pd.DataFrame) -> pd.DataFrame:
    """Per rank x stream x core x kind: event count, summed time and busy (union) time."""
    rows = []
    start = events["start_ns"].to_numpy(np.int64)
    dur = events["dur_ns"].to_numpy(np.int64)
    # row positions per group (no sub-frame per group); the table is sorted below
    for (rank, stream, core, kind), at in group_positions(events, ["rank", "stream", "core", "kind"]):
        s, d = start[at], dur[at]
        rows.append({
            "rank": int(rank), "stream": stream, "core": core, "kind": kind, "count": int(at.size),
            "sum_us": us(int(d.sum())), "busy_us": us(Intervals.from_spans(s, s + d).total),
        })
    table = pd.DataFrame(rows, columns=["rank", "stream", "core", "kind", "count", "sum_us", "busy_us"])
    if table.empty:
        return table
    order = table["stream"].map(_stream_sort_key)
    table = table.assign(_k=order).sort_values(["rank", "_k", "core", "kind"]).drop(columns="_k")
    return table.reset_index(drop=True)


def _stream_sort_key(stream: str) -> tuple:
    text = str(stream)
    return (0, int(text), "") if text.isdigit() else (1, 0, text)


def check_comm_streams(events: pd.DataFrame) -> dict[str, str]:
    """No compute kernel may run on a stream that carries collectives (synthetic comm:* streams prove nothing)."""
    return comm_streams_check(*comm_streams_facts(events))


def comm_streams_facts(events: pd.DataFrame, masks: Masks | None = None) -> tuple[set, pd.Series]:
    """((rank, stream) keys of real comm streams, count of each compute kernel name on them)."""
    # one comparison per distinct comm stream, on the columns alone (no copy of the comm or compute rows)
    is_compute, is_comm = masks if masks is not None else kind_masks(events)
    stream = events["stream"].to_numpy(object)
    rank = events["rank"].to_numpy(np.int64)
    real = sorted(s for s in set(stream[is_comm].tolist()) if s != "" and not str(s).startswith("comm:"))
    keys: set = set()
    hit = np.zeros(len(events), dtype=bool)
    for name in real:
        on = stream == name
        for r in np.unique(rank[on & is_comm]).tolist():
            keys.add((r, name))
            hit |= on & (rank == r)
    if not keys:
        return set(), pd.Series(dtype="int64")
    hit &= is_compute
    return keys, events["name"][hit].value_counts()


def comm_streams_check(keys: set, on_comm: pd.Series) -> dict[str, str]:
    if not keys:
        return check_row("no_compute_on_comm_streams", NO_EVIDENCE,
                         "no collective carries a real stream id in this profile")
    where = ", ".join(f"rank {r} stream {s}" for r, s in sorted(keys, key=lambda k: (k[0], _stream_sort_key(k[1]))))
    if on_comm.empty:
        return check_row("no_compute_on_comm_streams", PASS, f"0 compute kernels on comm streams ({where})")
    names = on_comm.sort_values(ascending=False, kind="stable").head(3)
    sample = "; ".join(f"{n} x{c}" for n, c in names.items())
    return check_row("no_compute_on_comm_streams", FAIL,
                     f"{int(on_comm.sum())} compute kernels on comm streams ({where}); e.g. {sample}")


def overlap_matrix(events: pd.DataFrame, masks: Masks | None = None) -> pd.DataFrame:
    """Per rank, each pair of (family, group) keys: |U(A) & U(B)| and its share of the smaller union."""
    rows = []
    is_comm = masks[1] if masks is not None else (events["kind"] == "comm").to_numpy()
    start = events["start_ns"].to_numpy(np.int64)[is_comm]
    end = start + events["dur_ns"].to_numpy(np.int64)[is_comm]
    keys = _columns_at(events, ["rank", "family", "group"], is_comm)
    per_rank: dict[int, dict[str, Intervals]] = {}
    for (rank, fam, grp), at in group_positions(keys, ["rank", "family", "group"]):  # groupby(sort=True)'s order
        per_rank.setdefault(rank, {})[f"{fam}@{grp}" if grp else fam] = Intervals.from_spans(start[at], end[at])
    for rank, keyed in per_rank.items():
        names = list(keyed)
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                both = (keyed[a] & keyed[b]).total
                smaller = min(keyed[a].total, keyed[b].total)
                rows.append({"rank": int(rank), "a": a, "b": b, "overlap_us": us(both),
                             "overlap_of_smaller": both / smaller if smaller else float("nan")})
    return pd.DataFrame(rows, columns=["rank", "a", "b", "overlap_us", "overlap_of_smaller"])


def family_skew(table: pd.DataFrame) -> pd.DataFrame:
    """Per family: summed time on each rank, the spread across ranks, and which ranks are extreme."""
    rows = []
    if table.empty:
        return pd.DataFrame(columns=["family", "ranks", "min_us", "max_us", "skew_us", "max_over_min",
                                     "min_rank", "max_rank"])
    per = table.groupby(["family", "rank"], sort=True)["sum_ns"].sum().reset_index()
    for family, sub in per.groupby("family", sort=True):
        lo, hi = sub.loc[sub["sum_ns"].idxmin()], sub.loc[sub["sum_ns"].idxmax()]
        rows.append({
            "family": family, "ranks": len(sub), "min_us": us(lo["sum_ns"]), "max_us": us(hi["sum_ns"]),
            "skew_us": us(hi["sum_ns"] - lo["sum_ns"]),
            "max_over_min": hi["sum_ns"] / lo["sum_ns"] if lo["sum_ns"] else float("nan"),
            "min_rank": int(lo["rank"]), "max_rank": int(hi["rank"]),
        })
    return pd.DataFrame(rows)


def slowest_rank(ps: ProfileSet, ranks: pd.DataFrame) -> tuple[int | None, str]:
    """The rank with the longest mean step (step windows) or else the longest device span."""
    if ranks.empty:
        return None, ""
    steps = ps.steps
    if steps is not None and len(steps):
        st = steps[steps["rank"].isin(ranks["rank"])]
        if len(st):
            mean = (st["end_ns"].astype("int64") - st["start_ns"].astype("int64")).groupby(st["rank"]).mean()
            return int(mean.idxmax()), "mean step window"
    return int(ranks.loc[ranks["span_ns"].idxmax(), "rank"]), "device span of the capture"


def calls_per_layer(events: pd.DataFrame, steps: pd.DataFrame | None, layers: int,
                    n_steps: int | None, dit_hints: bool = True) -> tuple[pd.DataFrame, str]:
    """count / (layers x steps) per rank, family and group; a remainder marks extra same-family calls.

    With ``n_steps`` given, every collective of the capture counts and S = n_steps. Otherwise only
    collectives of a step count (ditpar.analysis.steps) and S = the rank's number of steps. Returns the
    table and its scope. ``dit_hints`` False leaves ``likely_extra`` empty (not a DiT inference profile).
    """
    if layers <= 0:
        raise InputError(f"--layers {layers}: expected a positive number of DiT layers")
    if n_steps is not None and n_steps <= 0:
        raise InputError(f"--steps {n_steps}: expected a positive number of steps in the capture")
    comm = events[events["kind"] == "comm"]
    scope = "whole capture"
    per_rank_steps: dict[int, int] = {}
    if n_steps is None:
        keep = np.zeros(len(comm), dtype=bool)
        for rank, sub in comm.groupby("rank", sort=True):
            labels = assign_steps(sub, rank_steps(steps, int(rank)))
            if has_steps(labels):
                keep[comm.index.get_indexer(sub.index)] = labels.notna().to_numpy()
                rev = events[events["rank"] == rank]
                per_rank_steps[int(rank)] = int(assign_steps(rev, rank_steps(steps, int(rank))).nunique())
                scope = "collectives inside steps"
            else:
                keep[comm.index.get_indexer(sub.index)] = True
        comm = comm[keep]
    rows = []
    for (rank, family, group), sub in comm.groupby(["rank", "family", "group"], sort=True):
        s = n_steps if n_steps else per_rank_steps.get(int(rank))
        if not s:
            raise InputError("--layers: the profile has no step windows; give --steps S")
        per_layer = len(sub) / (layers * s)
        whole = len(sub) % (layers * s) == 0
        rows.append({
            "rank": int(rank), "family": family, "group": group, "count": len(sub), "layers": layers,
            "steps": s, "calls_per_layer": per_layer, "whole": bool(whole),
            "likely_extra": "" if whole or not dit_hints else EXTRA_SOURCES.get(family, DEFAULT_EXTRA),
        })
    return pd.DataFrame(rows, columns=["rank", "family", "group", "count", "layers", "steps",
                                       "calls_per_layer", "whole", "likely_extra"]), scope


def check_layers(table: pd.DataFrame, scope: str) -> dict[str, str]:
    """PASS when every (family, group) count is a whole multiple of layers x steps."""
    if table.empty:
        return check_row("calls_per_layer", NO_EVIDENCE, f"no collectives counted ({scope})")
    bad = table[~table["whole"]]
    if bad.empty:
        return check_row("calls_per_layer", PASS, f"{len(table)} (rank, family, group) counts are whole multiples ({scope})")
    parts = [f"rank {r.rank} {r.family}@{r.group}: {r.count}/({r.layers}x{r.steps}) = {r.calls_per_layer:.3f}"
             + (f" (likely extra: {r.likely_extra})" if r.likely_extra else "") for r in bad.itertuples()]
    return check_row("calls_per_layer", FAIL, "; ".join(parts[:6]) + (f"; and {len(parts) - 6} more" if len(parts) > 6 else ""))


def check_accounting(table: pd.DataFrame, ranks: pd.DataFrame) -> dict[str, str]:
    """exposed <= union <= sum for every row and every rank (exact ns); fails only on a bug."""
    if table.empty:
        return check_row("exposed_le_union_le_sum", NO_EVIDENCE, "no collectives in the profile")
    ok = (table["exposed_ns"] <= table["union_ns"]) & (table["union_ns"] <= table["sum_ns"])
    ok_r = ranks["comm_exposed_ns"] <= ranks["comm_union_ns"]
    if ok.all() and ok_r.all():
        return check_row("exposed_le_union_le_sum", PASS, f"{len(table)} rows and {len(ranks)} ranks, exact in ns")
    return check_row("exposed_le_union_le_sum", FAIL, f"{int((~ok).sum())} rows break exposed <= union <= sum")


def analyse(ps: ProfileSet, ranks: list[int] | None = None, families: list[str] | None = None,
            layers: int | None = None, steps: int | None = None) -> CollectiveReport:
    """Run every collectives analysis on a profile set."""
    events = select_ranks(ps, ranks)
    fams = require_families(events, families, _partial_families(ps))
    if not fams:
        raise no_collectives_error(events)
    if families:
        events = events[(events["kind"] != "comm") | events["family"].isin(fams)]
    comm_ops = ps.comm_ops
    if comm_ops is not None and ranks:
        comm_ops = comm_ops[comm_ops["rank"].isin(ranks)]
    table = collective_table(events, ps.groups, comm_ops)
    table["evidence"] = "tasks"
    extra = partial_rank_rows(ps, ranks, fams)
    if len(extra):
        table = pd.concat([table, extra], ignore_index=True)
    table["group_rank"] = pd.array(global_ranks.group_ranks(ps, table), dtype="Int64")
    # what "bytes" means on each rank: the message (count x dtype) or what the op moved (transit)
    table["bytes_from"] = [ps.bytes_from.get(int(r), "") if b is not None and b == b else ""
                           for r, b in zip(table["rank"], table["bytes"], strict=True)]
    rtab = rank_table(events)
    with_tasks = table[table["evidence"] == "tasks"]
    if with_tasks.empty and len(table):
        accounting = check_row("exposed_le_union_le_sum", NO_EVIDENCE, "no rank has device tasks "
                               "(kernel_details.csv): union and exposed time need kernel rows")
    else:
        accounting = check_accounting(with_tasks, rtab)
    checks = [accounting, check_comm_streams(events)]
    layer_table = None
    not_dit = training_evidence(events)
    if layers is not None:
        step_frame = ps.steps if ps.steps is not None and len(ps.steps) else None
        if step_frame is not None and ranks:
            step_frame = step_frame[step_frame["rank"].isin(ranks)]
        layer_table, scope = calls_per_layer(events, step_frame, layers, steps, dit_hints=not_dit is None)
        checks.append(check_layers(layer_table, scope))
    if ps.skipped:
        checks.append(check_all_ranks(ps))
    slow, by = slowest_rank(ps, rtab)
    return CollectiveReport(table=table, ranks=rtab, streams=stream_table(events),
                            overlap=overlap_matrix(events), skew=family_skew(table),
                            layers=layer_table, checks=checks, slowest_rank=slow, slowest_by=by,
                            not_dit=not_dit, links=link_table(ps, ranks))


#: the columns a rank without device tasks cannot have: they need its compute kernels
NEEDS_KERNELS = ("union_us", "union_over_sum", "exposed_us")


def partial_rank_rows(ps: ProfileSet, ranks: list[int] | None, families: list[str]) -> pd.DataFrame:
    """Rows of ranks without device tasks, from communication.json alone: count, summed op time
    (Elapse Time), duration statistics, transit bytes and the transit/wait/idle split. Union and
    exposed time need the rank's kernels (kernel_details.csv) and stay empty."""
    cols = [*TABLE_COLUMNS, "sum_ns", "union_ns", "exposed_ns", "sized_count", "split_ops", "evidence"]
    partial = sorted(r for r in ps.partial_ranks if not ranks or r in ranks)
    ops = ps.comm_ops
    if not partial or ops is None or ops.empty:
        return pd.DataFrame(columns=cols)
    ops = ops[ops["rank"].isin(partial) & ops["family"].isin(families)]
    rows = []
    for (rank, family, group), sub in ops.groupby(["rank", "family", "group"], sort=True):
        durs = np.round(sub["elapse_us"].to_numpy(float) * 1000).astype(np.int64)
        sized = sub["bytes"].notna().to_numpy()
        nbytes = int(sub["bytes"][sized].sum()) if sized.any() else None
        sized_ns = int(durs[sized].sum()) if sized.any() else 0
        info = ps.groups.get(str(group))
        transit, wait = sub["transit_us"].sum(min_count=1), sub["wait_us"].sum(min_count=1)
        link = sub["link_transit_us"].sum(min_count=1) if "link_transit_us" in sub else float("nan")
        rows.append({
            "rank": int(rank), "family": family, "group": group,
            "group_name": info.name if info else "", "group_role": info.role if info else "",
            "count": int(durs.size), "sum_ns": int(durs.sum()), "sum_us": us(int(durs.sum())),
            "union_ns": np.nan, "exposed_ns": np.nan, "union_us": np.nan, "union_over_sum": np.nan,
            "exposed_us": np.nan, "mean_us": us(durs.mean()), "median_us": _percentile_us(durs, 50),
            "p90_us": _percentile_us(durs, 90), "sized_count": int(sized.sum()), "bytes": nbytes,
            "bandwidth_GBps": nbytes / sized_ns if nbytes is not None and sized_ns else float("nan"),
            "transit_us": transit, "link_transit_us": link, "wait_us": wait,
            "idle_us": sub["idle_us"].sum(min_count=1),
            "wait_share": float(wait_share(pd.Series([transit]), pd.Series([link]), pd.Series([wait]))[0]),
            "split_ops": int(len(sub)),
            "evidence": "profiler communication table only (no task rows)",
        })
    return pd.DataFrame(rows, columns=cols)


def check_all_ranks(ps: ProfileSet) -> dict[str, str]:
    """FAIL when ranks were left out: slowest rank and per-family skew compare all ranks."""
    named = ", ".join("rank ?" if s["rank"] is None else f"rank {s['rank']}" for s in ps.skipped)
    return check_row("all_ranks_present", FAIL,
                     f"{len(ps.skipped)} rank(s) skipped as incomplete ({named}); the cross-rank figures "
                     f"(slowest rank, family skew) cover ranks {ps.ranks} only")


def no_collectives_error(events: pd.DataFrame) -> InputError:
    """The error for a profile without any communication events."""
    kinds = kind_counts(events)
    return InputError(f"profile: no communication events found; event kinds present: {kinds}")
