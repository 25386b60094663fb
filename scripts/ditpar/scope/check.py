"""Judge scope records: did each rank get full / degree of the sequence and heads / degree heads?

Reads the JSON lines that :mod:`ditpar.scope` writes (one file per rank) and compares every
recorded shape with what the plan implies. The full sizes come either from the command line
(``full_seq``, ``heads``) or from a baseline run of the same model with parallelism off — the
two-sided comparison, which needs no knowledge of the model.

Expected per-rank sizes, with U, R, A, T the Ulysses, ring, K/V all-gather and tensor-parallel
degrees, S the sharded tokens padded up to a multiple of ``pad_multiple`` (default U*R*A), and J the
tokens every rank holds whole:

* stage ``input`` (before any exchange): q sequence = S / (U*R*A) + J; q heads = H / T.
* stage ``core`` (what attention gets): q sequence = S / (R*A) + J; k/v sequence = S / R + J;
  q heads = H / (U*T); k/v heads = H_kv / (U*T).
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ditpar import formats, limits
from ditpar.errors import InputError, NoEvidenceError
from ditpar.files import input_problem, read_input_text
from ditpar.scope.recorder import SCHEMA, STAGES, check_layout

MAX_DIM = 2**40  # larger than any tensor a device holds: a bigger size is a damaged record
REQUIRED_KEYS = ("rank", "world_size", "name", "stage", "layout", "q")
FAIL_STATUSES = ("not-sharded", "mismatch", "bad-record")


@dataclass(frozen=True)
class Plan:
    """Parallel degrees that change per-rank attention shapes (CFG and data parallel do not)."""

    ulysses: int = 1
    ring: int = 1
    kv_allgather: int = 1
    tp: int = 1

    def __post_init__(self) -> None:
        for field in ("ulysses", "ring", "kv_allgather", "tp"):
            if getattr(self, field) < 1:
                raise InputError(f"--{field.replace('_', '-')}: expected a degree of at least 1")
        if self.ring > 1 and self.kv_allgather > 1:
            raise InputError("--ring and --kv-allgather: they are alternatives for the same slot; give one")
        if self.seq_degree * self.tp == 1:
            raise InputError("all degrees are 1: nothing is sharded, so there is nothing to check; "
                             "give --ulysses, --ring, --kv-allgather or --tp")

    @property
    def seq_degree(self) -> int:
        return self.ulysses * self.ring * self.kv_allgather

    @property
    def head_degree(self) -> int:
        return self.ulysses * self.tp

    @property
    def ranks_per_replica(self) -> int:
        return self.seq_degree * self.tp


@dataclass(frozen=True)
class Full:
    """Unsharded sizes of one attention site: sequence (tokens that get sharded) and heads."""

    seq: int
    heads: int | None = None
    kv_seq: int | None = None
    kv_heads: int | None = None


def _dims(layout: str, shape: Sequence[int] | None) -> dict[str, int] | None:
    if shape is None or len(shape) != len(layout):
        return None
    return dict(zip(layout, shape, strict=True))


def find_files(paths: Iterable[str | Path]) -> list[Path]:
    """Files to read: each path itself, or the scope*.jsonl files inside a folder."""
    files: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found = sorted(path.glob("scope*.jsonl"))
            if not found:
                present = sorted(p.name for p in path.iterdir())[:10]
                raise InputError(f"{path}: " + ("is a folder; expected a scope*.jsonl record file, or a folder "
                                               "holding them" if path.suffix == ".jsonl" else "no scope*.jsonl files")
                                 + f" (present: {present or 'nothing'})")
            files.extend(found)
        else:
            why = input_problem(path, "file", streams=True)
            if why:
                raise InputError(why)
            files.append(path)
    return files


def load_records(paths: Iterable[str | Path], tag: str | None = None) -> list[dict[str, Any]]:
    """Parse and validate every record; with several tags present, a tag must be chosen."""
    records: list[dict[str, Any]] = []
    seen: dict[str, str] = {}
    duplicates: list[str] = []
    for file in find_files(paths):
        for lineno, line in enumerate(read_input_text(file).splitlines(), 1):
            if not line.strip():
                continue
            where = f"{file}:{lineno}"
            rec = formats.json_text(line, where)
            _validate(rec, where)
            key = json.dumps(rec, sort_keys=True)
            if key in seen:
                duplicates.append(f"{where} repeats {seen[key]}")
                continue
            seen[key] = where
            rec["_where"] = where
            records.append(rec)
    if duplicates:
        sys.stderr.write(f"scope_probe.py: warning: {len(duplicates)} duplicate record(s) ignored, e.g. "
                         f"{duplicates[0]}\n")
    tags = sorted({r.get("tag", "") for r in records})
    if tag is not None:
        records = [r for r in records if r.get("tag", "") == tag]
        if not records and tags:
            raise InputError(f"--tag {tag!r}: no records with that tag (tags present: {tags})")
    elif len(tags) > 1:
        raise InputError(f"records carry several tags {tags}: choose one with --tag")
    return records


def _validate(rec: Any, where: str) -> None:
    if not isinstance(rec, dict):
        raise InputError(f"{where}: expected a JSON object")
    if rec.get("schema") != SCHEMA:
        raise InputError(f"{where}: schema {rec.get('schema')!r}, expected {SCHEMA!r}")
    missing = [k for k in REQUIRED_KEYS if k not in rec]
    if missing:
        raise InputError(f"{where}: missing keys {missing} (has {sorted(rec)})")
    for key in ("rank", "world_size"):
        if not isinstance(rec[key], int) or isinstance(rec[key], bool) or rec[key] < 0:
            raise InputError(f"{where}: {key} must be a non-negative integer, got {rec[key]!r}")
    # the bound plan.py --devices has: a larger world is a damaged record, never work to do
    limits.integer(rec["world_size"], f"{where}: world_size", 1, limits.MAX_DEVICES)
    limits.integer(rec["rank"], f"{where}: rank", 0, rec["world_size"] - 1)
    if rec["stage"] not in STAGES:
        raise InputError(f"{where}: stage {rec['stage']!r}, expected one of {list(STAGES)}")
    try:
        check_layout(rec["layout"])
    except ValueError as exc:
        raise InputError(f"{where}: {exc}") from None
    for key in ("q", "k", "v"):
        val = rec.get(key)
        if val is not None and not (isinstance(val, list) and all(isinstance(n, int) for n in val)):
            raise InputError(f"{where}: {key} must be a list of integers or null, got {val!r}")
        if val is not None and not all(0 < n <= MAX_DIM for n in val):
            raise InputError(f"{where}: {key} shape {val}: every size must be 1..{MAX_DIM}")
    if rec["q"] is None:
        raise InputError(f"{where}: q shape is null")


def baseline_fulls(records: list[dict[str, Any]]) -> dict[tuple[str, str], Full]:
    """Full sizes per (name, stage) from an unsharded run; every rank must agree."""
    out: dict[tuple[str, str], Full] = {}
    for rec in records:
        layout = rec["layout"]
        q = _dims(layout, rec["q"])
        if q is None:
            raise InputError(f"{rec['_where']}: baseline q shape {rec['q']} does not fit layout {layout}")
        k = _dims(layout, rec.get("k"))
        full = Full(seq=q["S"], heads=q.get("H"),
                    kv_seq=k["S"] if k else None, kv_heads=k.get("H") if k else None)
        key = (rec["name"], rec["stage"])
        if key in out and out[key] != full:
            raise InputError(f"{rec['_where']}: baseline shapes of {key[0]} ({key[1]}) differ between "
                             f"records: {out[key]} vs {full}")
        out[key] = full
    return out


def expected_sizes(stage: str, full: Full, plan: Plan, pad_multiple: int | None,
                   replicated: int) -> dict[str, int | None]:
    """Per-rank sizes the plan implies at one site (keys seq_q, heads_q, seq_kv, heads_kv)."""
    sharded = full.seq - replicated
    if sharded <= 0:
        raise InputError(f"full sequence {full.seq} minus --replicated-tokens {replicated} leaves nothing to shard")
    multiple = pad_multiple or plan.seq_degree
    padded = -(-sharded // multiple) * multiple
    if padded % plan.seq_degree:
        raise InputError(f"--pad-multiple {multiple}: padded length {padded} is not divisible by the "
                         f"sequence degree {plan.seq_degree}")

    def heads(h: int | None, degree: int) -> int | None:
        if h is None:
            return None
        if h % degree:
            raise InputError(f"{h} heads are not divisible by the head degree {degree} "
                             "(ulysses x tp at core, tp at input)")
        return h // degree

    if stage == "input":
        return {"seq_q": padded // plan.seq_degree + replicated, "heads_q": heads(full.heads, plan.tp),
                "seq_kv": None, "heads_kv": None}
    kv_full_seq = full.kv_seq if full.kv_seq is not None else full.seq
    kv_sharded = kv_full_seq - replicated
    kv_padded = -(-kv_sharded // multiple) * multiple
    kv_heads = full.kv_heads if full.kv_heads is not None else full.heads
    return {
        "seq_q": padded // (plan.ring * plan.kv_allgather) + replicated,
        "heads_q": heads(full.heads, plan.head_degree),
        "seq_kv": kv_padded // plan.ring + replicated,
        "heads_kv": heads(kv_heads, plan.head_degree),
    }


def split_mode(pad_multiple: int | None) -> str:
    """'either' (default: padded to the degree, or split unevenly as torch.tensor_split / chunk do),
    'uneven' (--pad-multiple 1: no padding), or 'padded' (--pad-multiple M > 1)."""
    if pad_multiple is None:
        return "either"
    if pad_multiple < 1:
        raise InputError(f"--pad-multiple {pad_multiple}: expected a whole number >= 1 (1: no padding)")
    return "uneven" if pad_multiple == 1 else "padded"


def _share_ranges(total: int, fine: int, merged: int, plan: Plan, pad_multiple: int | None,
                  replicated: int) -> list[tuple[int, int]]:
    """Accepted per-rank lengths of a dimension cut into ``fine`` shards of which a rank holds ``merged``.

    Padded: ceil(total / M) * M / fine * merged. Uneven (no padding): each shard is floor or ceil of
    total / fine, so the rank holds between merged*floor and merged*ceil, and the other shards hold the rest.
    """
    mode = split_mode(pad_multiple)
    out: list[tuple[int, int]] = []
    if mode in ("padded", "either"):
        multiple = pad_multiple if mode == "padded" else plan.seq_degree
        padded = -(-total // multiple) * multiple
        if padded % fine:
            raise InputError(f"--pad-multiple {multiple}: padded length {padded} is not divisible by the "
                             f"sequence degree {plan.seq_degree}")
        v = padded // fine * merged + replicated
        out.append((v, v))
    if mode in ("uneven", "either"):
        floor, ceil = total // fine, -(-total // fine)
        rest = fine - merged  # shards held by the other ranks of the group
        lo = max(merged * floor, total - rest * ceil)
        hi = min(merged * ceil, total - rest * floor)
        out.append((lo + replicated, hi + replicated))
    out.sort()
    merged_ranges: list[tuple[int, int]] = []
    for lo, hi in out:
        if merged_ranges and lo <= merged_ranges[-1][1] + 1:
            merged_ranges[-1] = (merged_ranges[-1][0], max(hi, merged_ranges[-1][1]))
        else:
            merged_ranges.append((lo, hi))
    return merged_ranges


def accepted_sizes(stage: str, full: Full, plan: Plan, pad_multiple: int | None,
                   replicated: int) -> dict[str, list[tuple[int, int]] | None]:
    """Per-rank sizes the plan allows at one site, as ranges (lo, hi); heads are exact."""
    sharded = full.seq - replicated
    if sharded <= 0:
        raise InputError(f"full sequence {full.seq} minus --replicated-tokens {replicated} leaves nothing to shard")
    d = plan.seq_degree

    def heads(h: int | None, degree: int) -> list[tuple[int, int]] | None:
        if h is None:
            return None
        if h % degree:
            raise InputError(f"{h} heads are not divisible by the head degree {degree} "
                             "(ulysses x tp at core, tp at input)")
        return [(h // degree, h // degree)]

    if stage == "input":
        return {"seq_q": _share_ranges(sharded, d, 1, plan, pad_multiple, replicated),
                "heads_q": heads(full.heads, plan.tp), "seq_kv": None, "heads_kv": None}
    kv_full_seq = full.kv_seq if full.kv_seq is not None else full.seq
    kv_heads = full.kv_heads if full.kv_heads is not None else full.heads
    return {
        "seq_q": _share_ranges(sharded, d, plan.ulysses, plan, pad_multiple, replicated),
        "heads_q": heads(full.heads, plan.head_degree),
        "seq_kv": _share_ranges(kv_full_seq - replicated, d, plan.ulysses * plan.kv_allgather, plan,
                                pad_multiple, replicated),
        "heads_kv": heads(kv_heads, plan.head_degree),
    }


def _fmt_ranges(ranges: list[tuple[int, int]]) -> str:
    return "|".join(str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in ranges)


def _unsharded_sizes(stage: str, full: Full, replicated: int, pad_multiple: int | None,
                     plan: Plan) -> dict[str, set[int]]:
    """Values that mean 'this rank saw everything' (raw and padded full lengths, all heads)."""
    multiple = pad_multiple if pad_multiple and pad_multiple > 1 else plan.seq_degree
    sharded = full.seq - replicated
    seqs = {full.seq, -(-sharded // multiple) * multiple + replicated}
    kv_full = full.kv_seq if full.kv_seq is not None else full.seq
    out = {"seq_q": seqs, "heads_q": {full.heads} if full.heads else set()}
    if stage == "core":
        out["seq_kv"] = {kv_full, -(-(kv_full - replicated) // multiple) * multiple + replicated}
        kvh = full.kv_heads if full.kv_heads is not None else full.heads
        out["heads_kv"] = {kvh} if kvh else set()
    return out


def _observed(rec: dict[str, Any]) -> dict[str, int | None] | None:
    layout = rec["layout"]
    q = _dims(layout, rec["q"])
    if q is None:
        return None
    k = _dims(layout, rec.get("k")) if rec.get("k") is not None else None
    if rec.get("k") is not None and k is None:
        return None
    return {"seq_q": q["S"], "heads_q": q.get("H"),
            "seq_kv": k["S"] if k else None, "heads_kv": k.get("H") if k else None}


def judge(records: list[dict[str, Any]], plan: Plan, full: Full | None = None,
          baseline: dict[tuple[str, str], Full] | None = None, ranks: int | None = None,
          pad_multiple: int | None = None, replicated: int = 0) -> dict[str, Any]:
    """Compare every record with the plan; return rows, checks and a verdict."""
    if full is None and baseline is None:
        raise InputError("give the full sizes (--full-seq and --heads) or --baseline DIR of an unsharded run")
    if not records:
        raise NoEvidenceError("no scope records to judge: the hooks never fired "
                              "(check the module names/types passed to attach, or that DITPAR_SCOPE_DIR was set)")
    worlds = sorted({r["world_size"] for r in records})
    if len(worlds) > 1:
        raise InputError(f"records disagree on world_size: {worlds} (mixed runs in one folder?)")
    world = ranks if ranks is not None else worlds[0]
    if world % plan.ranks_per_replica:
        raise InputError(f"world size {world} is not a multiple of ulysses x ring x kv-allgather x tp "
                         f"= {plan.ranks_per_replica}")

    groups: dict[tuple, dict[str, Any]] = {}
    for rec in records:
        key = (rec["rank"], rec["name"], rec["stage"], rec["layout"],
               tuple(rec["q"]), tuple(rec["k"] or ()), tuple(rec["v"] or ()))
        if key not in groups:
            groups[key] = {"rec": rec, "calls": 0}
        groups[key]["calls"] += 1

    rows = []
    for (rank, name, stage, layout, *_), item in sorted(groups.items(), key=lambda kv: kv[0][:3]):
        rec = item["rec"]
        site_full = full if baseline is None else baseline.get((name, stage))
        row: dict[str, Any] = {"rank": rank, "name": name, "stage": stage, "layout": layout,
                               "calls": item["calls"], "q": rec["q"], "k": rec.get("k")}
        obs = _observed(rec)
        if obs is None:
            row.update(status="bad-record", detail=f"shape does not fit layout {layout}")
            rows.append(row)
            continue
        for key, val in obs.items():
            row[key] = val
        if site_full is None:
            row.update(status="unjudged", detail=f"baseline has no record for {name} ({stage})")
            rows.append(row)
            continue
        exp = accepted_sizes(stage, site_full, plan, pad_multiple, replicated)
        full_vals = _unsharded_sizes(stage, site_full, replicated, pad_multiple, plan)
        compared, wrong, unsharded = 0, [], []
        for key, want in exp.items():
            got = obs.get(key)
            single = want is not None and len(want) == 1 and want[0][0] == want[0][1]
            row[f"expected_{key}"] = want[0][0] if single and got is not None else None
            row[f"accepted_{key}"] = [list(r) for r in want] if want is not None and got is not None else None
            if want is None or got is None:
                continue
            compared += 1
            if not any(lo <= got <= hi for lo, hi in want):
                single_value = len(want) == 1 and want[0][0] == want[0][1]
                wrong.append(f"{key} {got} != {want[0][0]}" if single_value else
                             f"{key} {got} not in {_fmt_ranges(want)}")
                if got in full_vals.get(key, set()) and got > max(hi for _, hi in want):
                    unsharded.append(key)
        if compared == 0:
            row.update(status="unjudged", detail="no dimension to compare (layout lacks S/H?)")
        elif not wrong:
            row.update(status="sharded", detail="")
        elif unsharded:
            row.update(status="not-sharded", detail="full size seen: " + "; ".join(wrong))
        else:
            row.update(status="mismatch", detail="; ".join(wrong))
        rows.append(row)

    seen = sorted({r["rank"] for r in records})
    missing = [r for r in range(world) if r not in seen]
    extra = [r for r in seen if r >= world]
    names_by_rank: dict[int, set] = defaultdict(set)
    for rec in records:
        names_by_rank[rec["rank"]].add((rec["name"], rec["stage"]))
    all_sites = set().union(*names_by_rank.values())
    partial = {rank: sorted(f"{n} ({s})" for n, s in all_sites - sites)
               for rank, sites in names_by_rank.items() if all_sites - sites}

    shares = _shares_check(rows, world, plan, full, baseline, replicated, pad_multiple)
    if shares["status"] == "fail":
        for row in rows:
            if row["stage"] == "input" and row["name"] in shares["bad_sites"] and row["status"] == "sharded":
                row.update(status="mismatch", detail="uneven shares do not add up to the full sequence")
    counts: dict[str, int] = defaultdict(int)
    for row in rows:
        counts[row["status"]] += 1
    checks = [
        {"name": "every rank recorded", "status": "fail" if missing or extra else "pass",
         "detail": f"ranks seen {seen} of {world}" + (f"; missing {missing}" if missing else "")
                   + (f"; unexpected {extra}" if extra else "")},
        {"name": "every site on every rank", "status": "fail" if partial else "pass",
         "detail": "; ".join(f"rank {r} lacks {v}" for r, v in sorted(partial.items())) or
                   f"{len(all_sites)} site(s) on each rank"},
        {"name": "shapes match the plan",
         "status": "fail" if any(counts[s] for s in FAIL_STATUSES) else
                   ("no-evidence" if counts["sharded"] == 0 else "pass"),
         "detail": ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))},
        {"name": "sequence shares add up", "status": shares["status"], "detail": shares["detail"]},
    ]
    if counts["not-sharded"]:
        verdict = "not-sharded"
    elif counts["mismatch"] or counts["bad-record"]:
        verdict = "mismatch"
    elif counts["sharded"] == 0:
        verdict = "no-evidence"
    elif missing or extra or partial:
        verdict = "incomplete"
    else:
        verdict = "sharded"
    return {
        "verdict": verdict, "world_size": world, "ranks_seen": seen, "missing_ranks": missing,
        "records": len(records), "sites": len(all_sites),
        "plan": {"ulysses": plan.ulysses, "ring": plan.ring, "kv_allgather": plan.kv_allgather,
                 "tp": plan.tp},
        "split": split_mode(pad_multiple),
        "full": None if full is None else full.__dict__,
        "baseline_sites": None if baseline is None else len(baseline),
        "rows": rows, "checks": checks,
    }


def _shares_check(rows: list[dict[str, Any]], world: int, plan: Plan, full: Full | None,
                  baseline: dict[tuple[str, str], Full] | None, replicated: int,
                  pad_multiple: int | None) -> dict[str, Any]:
    """Input-stage sequence shares, summed over all ranks, equal the full (or padded) sequence per replica.

    Every rank holds one share of the sharded tokens; the sequence group repeats world / seq_degree
    times (tensor and data parallel), so the shares sum to S * world / seq_degree. Checked per site
    when every rank recorded exactly one input length there; 'not-checked' otherwise.
    """
    lengths: dict[str, dict[int, set[int]]] = defaultdict(lambda: defaultdict(set))
    for row in rows:
        if row["stage"] == "input" and row.get("seq_q") is not None:
            lengths[row["name"]][row["rank"]].add(int(row["seq_q"]))
    if not lengths:
        return {"status": "not-checked", "detail": "no input-stage records", "bad_sites": []}
    checked, bad, details = 0, [], []
    copies = world // plan.seq_degree
    multiple = pad_multiple if pad_multiple and pad_multiple > 1 else plan.seq_degree
    for name, by_rank in sorted(lengths.items()):
        site_full = full if baseline is None else baseline.get((name, "input"))
        if site_full is None or sorted(by_rank) != list(range(world)) or any(len(v) != 1 for v in by_rank.values()):
            continue
        total = sum(next(iter(v)) - replicated for v in by_rank.values())
        sharded = site_full.seq - replicated
        padded = -(-sharded // multiple) * multiple
        checked += 1
        if total not in (sharded * copies, padded * copies):
            bad.append(name)
            details.append(f"{name}: shares sum to {total}, expected {sharded * copies}"
                           + (f" (or {padded * copies} padded)" if padded != sharded else ""))
    if not checked:
        return {"status": "not-checked", "detail": "no input site recorded once on every rank", "bad_sites": []}
    if bad:
        return {"status": "fail", "detail": "; ".join(details), "bad_sites": bad}
    return {"status": "pass", "detail": f"{checked} input site(s): shares sum to the full sequence", "bad_sites": []}


EXIT_CODES = {"sharded": 0, "not-sharded": 1, "mismatch": 1, "incomplete": 1, "no-evidence": 2}
