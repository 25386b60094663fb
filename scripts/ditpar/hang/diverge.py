"""Compare every rank's Flight Recorder entries group by group: the last collective all members issued
alike, the first sequence id where they differ, who issued what there, who never arrived, and why."""

from __future__ import annotations

import bisect
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from ditpar import limits
from ditpar.errors import InputError, NoEvidenceError
from ditpar.hang.dumps import Entry, RankDump

CAUSES = {
    "group_creation_order": "the same group name holds different ranks on different ranks: groups were "
                            "created in a different order (or only on some ranks)",
    "different_branches": "ranks issued different collectives at the same sequence id: they took different "
                          "branches (cache skip, early exit, shape-dependent path)",
    "sizes_disagree": "same collective, different sizes or dtypes: a shape-dependent branch or a wrong split",
    "rank_missing_or_dead": "some ranks never issued this call and wait in no other collective: stuck before "
                            "it (compute, I/O, host wait), dead, or done early on a branch with fewer calls",
    "groups_entered_in_different_order": "ranks wait for each other across two groups: each entered the "
                                         "groups in a different order",
    "waits_in_other_group": "the ranks that never arrived are blocked in another group's collective: "
                            "follow that group's row",
}
_NO_SIZE_IN = ("all_to_all", "all_to_all_single", "all_to_all_v_single", "scatter")
_NO_SIZE_OUT = ("all_to_all", "all_to_all_single", "all_to_all_v_single", "gather")


@dataclass
class Job:
    """The dumps of one job, checked to belong together."""

    dumps: dict[int, RankDump]
    world: int
    world_source: str
    missing_dumps: list[int]
    notes: list[str] = field(default_factory=list)


def assemble(dumps: list[RankDump], world: int | None, allow_missing: bool, max_skew_s: float) -> Job:
    """Check the files form one job (one dump per rank, same version, same world, one run); exit 2 if not."""
    if not dumps:
        raise InputError("no dump files given")
    by_rank: dict[int, RankDump] = {}
    for d in dumps:
        if d.rank in by_rank:
            raise InputError(f"two dumps for rank {d.rank}: {by_rank[d.rank].path} and {d.path} "
                             "(mixed-up folders, or dumps of two runs)")
        by_rank[d.rank] = d
    versions = defaultdict(list)
    for d in dumps:
        versions[d.version].append(d.rank)
    if len(versions) > 1:
        desc = "; ".join(f"version {v}: ranks {sorted(r)}" for v, r in versions.items())
        raise InputError(f"dumps of different Flight Recorder versions ({desc}): not one job")
    worlds = {tuple(d.groups["0"]) for d in dumps if "0" in d.groups}
    if len(worlds) > 1:
        raise InputError(f"the default group's members differ between dumps ({sorted(worlds)}): not one job")
    notes: list[str] = []
    if world is not None and worlds and len(next(iter(worlds))) != world:
        raise InputError(f"the dumps' default group (pg_config) holds {len(next(iter(worlds)))} ranks, the world "
                         f"given (--world or --plan) {world}: not the dumps of this job, or the wrong --world")
    if world is not None:
        source = "given"
    elif worlds:
        world, source = len(next(iter(worlds))), "default group in pg_config"
    else:
        world, source = max(by_rank) + 1, "highest rank in the file names + 1"
        notes.append(f"world size {world} taken from the file names; give --world (or --plan) to check it")
    if world > limits.MAX_DEVICES:
        raise InputError(f"world size {world:,} ({source}) exceeds {limits.MAX_DEVICES}, the devices of one job; "
                         "check the file names or give --world")
    outside = sorted(r for r in by_rank if r >= world)
    if outside:
        raise InputError(f"dumps of ranks {outside[:8]} lie outside world size {world} ({source})")
    for d in dumps:
        for name, members in d.groups.items():
            if members[-1] >= world:
                raise InputError(f"{d.path}: pg_config[{name!r}] names rank {members[-1]}, outside world size "
                                 f"{world} ({source})")
    missing = sorted(set(range(world)) - set(by_rank))
    if missing and not allow_missing:
        raise InputError(f"no dump for ranks {missing} of {world} (have {sorted(by_rank)}); a dead rank "
                         f"writes none: rerun with --allow-missing-ranks to analyse what is there")
    if not any(d.entries for d in dumps):
        raise NoEvidenceError("no collective recorded in any dump: the recorder was off (set TORCH_FR_BUFFER_SIZE "
                              "before init_process_group; see hang_doctor.py --how)")
    _check_one_run(by_rank, max_skew_s)
    return Job(by_rank, world, source, missing, notes)


def _check_one_run(by_rank: dict[int, RankDump], max_skew_s: float) -> None:
    """Ranks of one run create the same call within the timeout; hours apart means two runs."""
    seen: dict[tuple[str, int], tuple[int, int]] = {}
    worst = (0, None, None, None)
    for rank, d in by_rank.items():
        for e in d.entries:
            if e.seq is None or e.time_created_ns is None:
                continue
            key = (e.pg, e.seq)
            if key not in seen:
                seen[key] = (e.time_created_ns, rank)
                continue
            gap = abs(e.time_created_ns - seen[key][0])
            if gap > worst[0]:
                worst = (gap, key, seen[key][1], rank)
    gap, key, a, b = worst
    if key is not None and gap > max_skew_s * 1e9:
        raise InputError(f"group {key[0]} seq {key[1]} was created {gap / 1e9:.0f} s apart on ranks {a} and {b} "
                         f"(over --max-skew-s {max_skew_s:g}): these dumps come from different runs")


def _last(d: RankDump) -> Entry | None:
    """The rank's latest recorded call: where it is (or was) when the dump was taken."""
    if not d.entries:
        return None
    if all(e.record_id is not None for e in d.entries):
        return max(d.entries, key=lambda e: e.record_id)  # type: ignore[arg-type,return-value]
    return d.entries[-1]


def _members(job: Job, name: str, labels: dict[frozenset, list[str]] | None) -> tuple[list[int], str, dict]:
    """Members of group `name`, where that came from, and what each rank claims when they disagree."""
    claims: dict[frozenset, list[int]] = defaultdict(list)
    for rank, d in job.dumps.items():
        if name in d.groups:
            claims[frozenset(d.groups[name])].append(rank)
    if len(claims) == 1:
        return sorted(next(iter(claims))), "pg_config", {}
    if len(claims) > 1:
        union = sorted(set().union(*claims))
        return union, "pg_config (ranks disagree)", {",".join(map(str, sorted(k))): sorted(v)
                                                     for k, v in claims.items()}
    seen = sorted(r for r, d in job.dumps.items() if d.in_group(name))
    if name == "0":
        return list(range(job.world)), "default group = world", {}
    if labels:
        fits = [k for k in labels if set(seen) <= k and len(k) < job.world]
        smallest = [k for k in fits if len(k) == min((len(f) for f in fits), default=0)]
        if len(smallest) == 1:
            return sorted(smallest[0]), "the only --plan/--groups group holding the ranks seen", {}
    return seen, "ranks seen in the entries (pg_config empty: a member that never called is not counted)", {}


def _sig_diff(a: Entry, b: Entry) -> str | None:
    """Why b does not match a at the same sequence id (None when it does), after torch's analyzer rules."""
    if a.op != b.op:
        return "op"
    if a.op not in _NO_SIZE_IN and None not in (a.input_sizes, b.input_sizes) and a.input_sizes != b.input_sizes:
        return "sizes"
    if a.op not in _NO_SIZE_OUT and None not in (a.output_sizes, b.output_sizes) and a.output_sizes != b.output_sizes:
        return "sizes"
    for x, y in ((a.input_dtypes, b.input_dtypes), (a.output_dtypes, b.output_dtypes)):
        if None not in (x, y) and x != y:
            return "dtypes"
    return None


def _describe(e: Entry | None) -> dict[str, Any] | None:
    if e is None:
        return None
    return {"op": e.op, "sizes": e.input_sizes, "output_sizes": e.output_sizes,
            "dtypes": e.input_dtypes, "state": e.state, "call_site": e.call_site}


def _done(d: RankDump, name: str) -> int | None:
    """Last sequence id this rank reports completed in group `name` (pg_status, else entry states; 0: none
    yet); None when its dump does not record completion."""
    if name in d.last_completed:
        return max(0, d.last_completed[name])   # torch writes -1 for "none yet"
    states = [e for e in d.in_group(name) if e.seq is not None and e.state is not None]
    if not states or all(e.state == "scheduled" for e in states):
        return None
    done = [e.seq for e in states if e.state == "completed"]
    return max(done) if done else 0


def _completed(job: Job, name: str, members: list[int]) -> int | None:
    """Last sequence id every member reports completed (pg_status, else entry states); None if unrecorded."""
    values = []
    for r in members:
        d = job.dumps.get(r)
        value = None if d is None else _done(d, name)
        if value is None:
            return None
        values.append(value)
    return min(values) if values else None


def _completed_anywhere(job: Job, name: str, members: list[int]) -> int | None:
    """Last sequence id some member reports completed; None when no member records completion."""
    values = [v for v in (_done(job.dumps[r], name) for r in members if r in job.dumps) if v is not None]
    return max(values) if values else None


def recorded_members(source: str) -> bool:
    """Whether a group's members were recorded (pg_config, or the default group = the world)."""
    return source.startswith(("pg_config", "default group"))


def _completed_without(job: Job, name: str, present: list[int],
                       seqs: dict[int, dict[int, Entry]]) -> tuple[int, int, int, str] | None:
    """(r, q, k, how): rank r reports call k of group `name` completed while rank q, which issued calls under
    the same name, never issued k or still waits in it. A call completes only when every member issued it,
    so the name stands for a group without q on rank r: groups created in a different order.
    One pass over the entries (a rank's buffer starts at its first seq: calls before it are not counted)."""
    done = {r: _done(job.dumps[r], name) for r in present}
    holders = [r for r in present if seqs.get(r)]
    first = {q: min(seqs[q]) for q in holders}
    firsts = sorted(first.values())
    issuers: dict[int, list[int]] = defaultdict(list)
    for r in holders:
        for k in seqs[r]:
            issuers[k].append(r)
    for k in sorted(issuers):
        by = issuers[k]
        finisher = next((r for r in by if done[r] is not None and done[r] >= k), None)
        if finisher is None:
            continue
        if bisect.bisect_right(firsts, k) > len(by):    # a rank whose buffer reaches k never issued it
            q = next(q for q in holders if first[q] <= k and k not in seqs[q])
            return finisher, q, k, "never issued"
        waiting = next((q for q in by if done[q] is not None and done[q] < k), None)
        if waiting is not None:
            return finisher, waiting, k, "still waits in"
    return None


def compare(job: Job, labels: dict[frozenset, list[str]] | None = None) -> dict[str, Any]:
    """Per group: last common and first divergent sequence id, who issued what, and the likely cause."""
    names = sorted({e.pg for d in job.dumps.values() for e in d.entries}
                   | {n for d in job.dumps.values() for n in d.groups}, key=_name_key)
    table: dict[str, dict[int, dict[int, Entry]]] = defaultdict(lambda: defaultdict(dict))
    p2p: dict[str, int] = defaultdict(int)
    for rank, d in job.dumps.items():
        for e in d.entries:
            if e.seq is None:
                p2p[e.pg] += 1
            elif e.seq > 0:
                table[e.pg][rank][e.seq] = e
    rows = []
    for name in names:
        members, source, claims = _members(job, name, labels)
        rows.append(_group_row(job, name, members, source, claims, table[name], p2p.get(name, 0), labels))
    kept = [bool(r["calls_compared"] or r["first_divergent_seq"] is not None or r["member_claims"]) for r in rows]
    notes = list(job.notes) + [f"group {r['group']}: {r['p2p_calls_not_compared']} point-to-point calls only, "
                               "not compared" for r, keep in zip(rows, kept, strict=True)
                               if not keep and r["p2p_calls_not_compared"]]
    rows = [r for r, keep in zip(rows, kept, strict=True) if keep]
    _link_waits(job, rows, table)
    notes += _unrecorded_notes(job, rows)
    divergent = [r for r in rows if r["first_divergent_seq"] is not None]
    root = _root(divergent)
    return {
        "verdict": "divergence" if divergent else "no divergence",
        "world": job.world, "world_source": job.world_source,
        "ranks_read": sorted(job.dumps), "ranks_without_dump": job.missing_dumps,
        "first_divergence": root, "groups": rows, "notes": notes,
    }


def _name_key(name: str) -> tuple[int, int, str]:
    """Numeric group names ("2" before "10") first, by value without int() (a 5,000-digit name, or "²",
    which isdigit() accepts, made int() raise), then the others by text."""
    if name.isascii() and name.isdigit():
        digits = name.lstrip("0")
        return 0, len(digits), digits
    return 1, 0, name


def _group_row(job: Job, name: str, members: list[int], source: str, claims: dict,
               seqs: dict[int, dict[int, Entry]], p2p: int, labels: dict[frozenset, list[str]] | None) -> dict:
    """One group's comparison; where members were not recorded, the entries' own evidence of a creation-order
    problem (a call completed on one rank that another rank of the same name never issued) names the cause."""
    row = _compare_group(job, name, members, source, claims, seqs, p2p, labels)
    if claims or recorded_members(source):
        return row
    present = [r for r in members if r in job.dumps]
    found = _completed_without(job, name, present, seqs)
    if found is None:
        return row
    r, q, k, how = found
    if row["first_divergent_seq"] is None:
        _mark(row, k, {x: seqs.get(x, {}).get(k) for x in present}, row["ranks_without_dump"])
        row["last_common_seq"] = max((x for x in seqs.get(r, {}) if x < k), default=None)
    row["cause"] = "group_creation_order"
    row["detail"] = (f"rank {r} reports seq {k} of group {name} completed, which rank {q} {how}: a call completes "
                     f"only when every member issued it, so on rank {r} group {name} does not hold rank {q}, which "
                     f"calls another group by the same name (groups created in a different order, or only on some "
                     f"ranks); members inferred from the entries (pg_config empty): dump with ditpar.hang.record "
                     f"to list them")
    row["inferred_without"] = {str(r): [q]}
    return row


def _compare_group(job: Job, name: str, members: list[int], source: str, claims: dict,
                   seqs: dict[int, dict[int, Entry]], p2p: int, labels: dict[frozenset, list[str]] | None) -> dict:
    present = [r for r in members if r in job.dumps]
    no_dump = [r for r in members if r not in job.dumps]
    desc = next((e.pg_desc for r in present for e in seqs.get(r, {}).values()), None) or next(
        (job.dumps[r].group_desc.get(name) for r in present if name in job.dumps[r].group_desc), "")
    starts = [min(seqs[r]) for r in present if seqs.get(r)]
    start = max(starts) if starts else 1   # ring buffers that wrapped: compare what every rank still holds
    order = sorted({k for r in present for k in seqs.get(r, {}) if k >= start})
    end = order[-1] if order else 0
    row: dict[str, Any] = {
        "group": name, "desc": desc, "label": _label(members, labels, claims), "ranks": members,
        "membership_source": source, "member_claims": claims, "ranks_without_dump": no_dump,
        "last_common_seq": None, "last_completed_seq": _completed(job, name, present),
        "first_divergent_seq": None, "op": None, "by_rank": {}, "issued_ranks": [], "missing_ranks": [],
        "waiting_in": {}, "cause": None, "detail": "", "first_divergent_created_ns": None, "calls_compared": 0,
        "p2p_calls_not_compared": p2p,
        "first_seq_in_buffers": start if starts else None,
    }
    if claims:
        first = start if end else None
        _mark(row, first, {r: seqs.get(r, {}).get(first) for r in present} if first else {}, no_dump)
        row["cause"] = "group_creation_order"
        row["detail"] = "members per rank: " + "; ".join(f"ranks {v} say [{k}]" for k, v in claims.items())
        return row
    for k in order:
        at = {r: seqs.get(r, {}).get(k) for r in present}
        issued = {r: e for r, e in at.items() if e is not None}
        ref = next(iter(issued.values()), None)
        diffs = {_sig_diff(ref, e) for e in issued.values()} - {None} if ref else set()
        if len(issued) == len(present) and not diffs:
            row["last_common_seq"] = k
            row["calls_compared"] += 1
            continue
        _mark(row, k, at, no_dump)
        if "op" in diffs:
            row["cause"] = "different_branches"
        elif diffs:
            row["cause"] = "sizes_disagree"
        return row
    if no_dump:
        # the ranks that wrote a dump agree: the rank without one is where they stopped, i.e. the first
        # call no rank reports completed (one completed anywhere was issued by every member, the rank
        # without a dump included; a rank's own record of completion can lag its next call), else their last
        done = _completed_anywhere(job, name, present)
        pending = [k for k in order if done is None or k > done]
        k = pending[0] if pending else (end or start)
        _mark(row, k, {r: seqs.get(r, {}).get(k) for r in present}, no_dump)
        if row["last_common_seq"] is not None and row["last_common_seq"] >= k:
            row["last_common_seq"] = max((x for x in order if x < k), default=None)
    return row


def _mark(row: dict, k: int | None, at: dict[int, Entry | None], no_dump: list[int]) -> None:
    row["first_divergent_seq"] = k
    row["by_rank"] = {str(r): _describe(e) for r, e in sorted(at.items())}
    row["issued_ranks"] = sorted(r for r, e in at.items() if e is not None)
    row["missing_ranks"] = sorted([r for r, e in at.items() if e is None] + no_dump)
    ops = sorted({e.op for e in at.values() if e is not None})
    row["op"] = " vs ".join(ops) if ops else None
    times = [e.time_created_ns for e in at.values() if e is not None and e.time_created_ns is not None]
    row["first_divergent_created_ns"] = min(times) if times else None


def _label(members: list[int], labels: dict[frozenset, list[str]] | None, claims: dict | None = None) -> str:
    """The plan's name of a rank set; when ranks disagree on the members, the name of each claim."""
    if not labels:
        return ""
    if claims:
        return " | ".join(f"{_label([int(x) for x in k.split(',')], labels)} on ranks {','.join(map(str, v))}"
                          for k, v in claims.items())
    return "=".join(labels.get(frozenset(members), ["not in plan"]))


def _link_waits(job: Job, rows: list[dict], table: dict[str, dict[int, dict[int, Entry]]]) -> None:
    """For ranks that never arrived, find where they are; name the cause of rows not yet classified."""
    by_name = {r["group"]: r for r in rows}
    position: dict[int, tuple[str, int] | None] = {}
    for rank, d in job.dumps.items():
        last = _last(d)
        if last is None or last.seq is None:
            position[rank] = None
            continue
        grp = by_name.get(last.pg)
        common = grp["last_common_seq"] if grp else None
        pending = grp is not None and (common is None or last.seq > common)
        position[rank] = (last.pg, last.seq) if pending else None
    for row in rows:
        if row["first_divergent_seq"] is None:
            continue
        name = row["group"]
        where: dict[int, tuple[str, int]] = {}
        for r in row["missing_ranks"]:
            pos = position.get(r)
            if pos is not None and pos[0] != name:
                where[r] = pos
        waits = {str(r): f"group {g} seq {k}" for r, (g, k) in where.items()}
        row["waiting_in"] = waits
        if row["cause"] is not None:
            continue
        never = [r for r in row["missing_ranks"] if r in job.dumps]
        if row["ranks_without_dump"] or (never and len(where) < len(never)):
            row["cause"] = "rank_missing_or_dead"
            idle = [r for r in never if r not in where]
            parts = []
            if idle:
                parts.append(f"ranks {idle} wait in no collective")
            if row["ranks_without_dump"]:
                parts.append(f"ranks {row['ranks_without_dump']} wrote no dump")
            row["detail"] = "; ".join(parts)
            continue
        cycle = False
        for g, _k in where.values():
            other = by_name.get(g)
            if other is not None and other["first_divergent_seq"] is not None \
                    and set(row["issued_ranks"]) & set(other["missing_ranks"]):
                cycle = True
        row["cause"] = "groups_entered_in_different_order" if cycle else "waits_in_other_group"
        row["detail"] = "; ".join(f"rank {r} waits in {w}" for r, w in waits.items())
    for row in rows:
        if row["cause"] and not row["detail"]:
            row["detail"] = _detail(row)
        if row["cause"] and row["cause"] != "group_creation_order" \
                and not recorded_members(row["membership_source"]):
            hint = (" (if each op's ranks belong to a different group, the groups were created in a different order)"
                    if row["cause"] == "different_branches" else "")
            row["detail"] += (f"; members not recorded (pg_config empty): the entries support {row['cause']}, but "
                              f"unrecorded members cannot rule out a creation-order problem{hint}; dump with "
                              "ditpar.hang.record to tell")


def _unrecorded_notes(job: Job, rows: list[dict]) -> list[str]:
    """The caveat on groups whose members come from the entries: once for the divergent ones, and per group
    whose calls every rank seen issued alike but some rank reports not completed (a member never seen, or a
    name that stands for different groups)."""
    notes = []
    blind = [r["group"] for r in rows if r["first_divergent_seq"] is not None
             and r["cause"] != "group_creation_order" and not recorded_members(r["membership_source"])]
    if blind:
        notes.append(f"groups {', '.join(blind)}: members not recorded (pg_config empty), read from the entries; "
                     "unrecorded members cannot rule out a creation-order problem (dump with ditpar.hang.record)")
    for r in rows:
        if r["first_divergent_seq"] is not None or recorded_members(r["membership_source"]) \
                or r["last_common_seq"] is None:
            continue
        present = [x for x in r["ranks"] if x in job.dumps]
        done = {x: _done(job.dumps[x], r["group"]) for x in present}
        waiting = [x for x, value in done.items() if value is not None and value < r["last_common_seq"]]
        if waiting:
            notes.append(f"group {r['group']}: ranks {waiting} report seq {r['last_common_seq']} not completed "
                         f"although every rank seen ({present}) issued it alike: a member that never called it "
                         "(not recorded: pg_config empty) or a name that stands for different groups on different "
                         "ranks; dump with ditpar.hang.record to tell")
    return notes


def _detail(row: dict) -> str:
    parts = []
    for r, info in row["by_rank"].items():
        if info is not None:
            site = f" at {info['call_site']}" if info["call_site"] else ""
            parts.append(f"rank {r}: {info['op']} {info['sizes']}{site}")
    return "; ".join(parts[:8]) + (" ..." if len(parts) > 8 else "")


def _root(divergent: list[dict]) -> dict | None:
    """The divergence to look at first: not a downstream wait, then the earliest created call."""
    if not divergent:
        return None
    candidates = [r for r in divergent if r["cause"] != "waits_in_other_group"] or divergent
    candidates.sort(key=lambda r: (r.get("first_divergent_created_ns") is None,
                                   r.get("first_divergent_created_ns") or 0))
    return {k: candidates[0][k] for k in ("group", "label", "first_divergent_seq", "op", "issued_ranks",
                                          "missing_ranks", "cause")}


def exit_code(result: dict) -> int:
    return 1 if result["verdict"] == "divergence" else 0
