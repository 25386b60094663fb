"""All-to-all integrity audit: per-leg fingerprint logging on each rank, and the offline reconciler.

Each rank writes one line per (communicator, call, chunk) with the fingerprint of every leg it sends,
taken before dispatch (``spre``) and again at the end of the call (``spost``), of every leg it
received as the consumer read it (``got``), and optionally of the logical shard it meant for each
destination before packing (``src``). The reconciler pairs ``spre`` of s->d with ``got`` of d<-s and
names the cause: transport faithful, send buffer rewritten after dispatch, placement problem, or
packing problem. The logger adds no collective and syncs the host once per call.
Logging needs torch; parsing and reconciling need only the standard library.
"""

from __future__ import annotations

import os
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from ditpar.errors import InputError, NoEvidenceError
from ditpar.files import decode_log, input_problem, read_input

TAG = "A2AUD"
#: the record format this reader knows (``v=`` of every line); a newer one may mean fields it would misread
FORMAT_VERSION = 1
ENV_SWITCH = "DITPAR_A2A_AUDIT"
FP_EMPTY = 0x0E3779B97F4A7C15  # fingerprint of a leg with no bytes
_MASK64 = (1 << 64) - 1
_CHUNK = 1 << 22
_COMM_RE = re.compile(r"[A-Za-z0-9_.:\-]+")

VERDICT_FAITHFUL = "transport faithful"
VERDICT_REWRITTEN = "send buffer rewritten after dispatch"
VERDICT_PLACEMENT = "placement problem"
VERDICT_PACKING = "packing problem"
VERDICT_NO_EVIDENCE = "no evidence"

NEXT_STEP = {
    VERDICT_FAITHFUL: "the move is faithful: inspect the send-side content (quantisation, assembly) "
                      "or how the consumer reads the output; stop debugging the transport",
    VERDICT_REWRITTEN: "fix the send buffer's lifetime: a fresh buffer per round, or tie it to the "
                       "communication stream (record_stream) until the collective has read it",
    VERDICT_PLACEMENT: "check split sizes on both sides, alignment, and per-destination shard "
                       "boundaries (offsets the collective reads from or writes to)",
    VERDICT_PACKING: "check packing and assembly: rank order, per-source offsets, row layout",
    VERDICT_NO_EVIDENCE: "log at least two ranks of the same communicator, call and chunk",
}


# ---------------------------------------------------------------------------------------------
# Fingerprints and the per-rank logger (torch, imported lazily)


def fingerprint(t: Any) -> Any:
    """Position-sensitive 64-bit fingerprint of a tensor's bytes, as a 0-d int64 tensor on its device.

    Integer arithmetic wraps mod 2**64, so CPU, CUDA and NPU give the same value for the same bytes.
    """
    import torch

    b = t.detach().contiguous().reshape(-1).view(torch.uint8)
    n = b.numel()
    if n == 0:
        return torch.tensor(FP_EMPTY, dtype=torch.int64, device=t.device)
    acc = torch.zeros((), dtype=torch.int64, device=t.device)
    for start in range(0, n, _CHUNK):
        seg = b[start:start + _CHUNK].to(torch.int64) + 1
        pos = torch.arange(start, start + seg.numel(), dtype=torch.int64, device=t.device)
        acc = acc + (seg * ((pos * 2654435761) % 4294967291 + 1)).sum()
    return acc * 1000003 + n


def leg_fingerprints(t: Any, splits: Sequence[int] | None) -> list[Any]:
    """One fingerprint per leg: the rows of ``t`` cut by ``splits`` (or a list of tensors)."""
    if isinstance(t, (list, tuple)):
        return [fingerprint(x) for x in t]
    splits = [int(s) for s in splits]
    if sum(splits) != t.shape[0]:
        raise InputError(f"splits sum to {sum(splits)} rows; the tensor has {t.shape[0]}")
    out, start = [], 0
    for s in splits:
        out.append(fingerprint(t[start:start + s]))
        start += s
    return out


def format_fp(value: int) -> str:
    return f"0x{value & _MASK64:016x}"


class A2AAudit:
    """Per-rank fingerprint logger for one communicator. Off unless enabled (or DITPAR_A2A_AUDIT=1).

    Use: ``c = audit.begin(send, send_splits, call, chunk, intended=shards)`` before dispatch;
    ``c.received(recv, recv_splits)`` on the copy the consumer reads; ``c.end()`` at end of call.
    """

    def __init__(self, sink: str | os.PathLike[str] | TextIO | Callable[[str], Any], comm: str,
                 rank: int, world: int, global_rank: int | None = None, enabled: bool | None = None,
                 max_lines: int | None = None) -> None:
        if not _COMM_RE.fullmatch(comm):
            raise InputError(f"comm {comm!r}: use letters, digits and _ . : - only (no spaces)")
        if not 0 <= rank < world:
            raise InputError(f"rank {rank}: outside a communicator of {world} ranks")
        self.comm, self.rank, self.world = comm, rank, world
        self.global_rank = rank if global_rank is None else global_rank
        self.enabled = os.environ.get(ENV_SWITCH) == "1" if enabled is None else enabled
        self.max_lines, self.lines = max_lines, 0
        self._sink = sink

    def _write(self, line: str) -> None:
        if callable(self._sink) and not hasattr(self._sink, "write"):
            self._sink(line)
        elif hasattr(self._sink, "write"):
            self._sink.write(line + "\n")
            self._sink.flush()
        else:
            with open(self._sink, "a", encoding="utf-8") as fh:
                fh.write(line + "\n")

    def begin(self, send: Any, send_splits: Sequence[int] | None, call: int, chunk: int = 0,
              intended: Sequence[Any] | None = None) -> AuditCall:
        """Fingerprint every send leg now, before the collective is dispatched."""
        active = self.enabled and (self.max_lines is None or self.lines < self.max_lines)
        return AuditCall(self, send, send_splits, call, chunk, intended, active)


@dataclass
class AuditCall:
    """One audited all-to-all call; fingerprints stay on the device until end()."""

    audit: A2AAudit
    send: Any
    send_splits: Sequence[int] | None
    call: int
    chunk: int
    intended: Sequence[Any] | None
    active: bool
    spre: list = field(default_factory=list)
    src: list = field(default_factory=list)
    got: list = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.active:
            return
        self.spre = leg_fingerprints(self.send, self.send_splits)
        if self.intended is not None:
            self.src = [fingerprint(x) for x in self.intended]
        self._check(self.spre, "send legs")

    def _check(self, legs: list, what: str) -> None:
        if len(legs) != self.audit.world:
            raise InputError(f"{what}: {len(legs)} legs for a communicator of {self.audit.world} ranks")

    def received(self, recv: Any, recv_splits: Sequence[int] | None = None) -> None:
        """Fingerprint every received leg from the copy the consumer reads, when it reads it."""
        if self.active:
            self.got = leg_fingerprints(recv, recv_splits)
            self._check(self.got, "received legs")

    def end(self) -> str | None:
        """Fingerprint the send legs again, read every value with one host sync, write one line."""
        if not self.active:
            return None
        import torch

        if not self.got:
            raise InputError("A2AAudit: end() before received(): log the consumed copy first")
        spost = leg_fingerprints(self.send, self.send_splits)
        values = torch.stack(self.spre + spost + self.got + self.src).cpu().tolist()
        n = self.audit.world
        fields = {"spre": values[:n], "spost": values[n:2 * n], "got": values[2 * n:3 * n]}
        if self.src:
            fields["src"] = values[3 * n:]
        a = self.audit
        parts = [TAG, "v=1", f"comm={a.comm}", f"rank={a.rank}", f"n={n}", f"call={self.call}",
                 f"chunk={self.chunk}", f"grank={a.global_rank}"]
        parts += [f"{k}=" + ",".join(format_fp(int(v)) for v in vs) for k, vs in fields.items()]
        line = " ".join(parts)
        a._write(line)
        a.lines += 1
        return line


# ---------------------------------------------------------------------------------------------
# Parsing


@dataclass
class Record:
    comm: str
    rank: int
    n: int
    call: int
    chunk: int
    spre: list[int]
    spost: list[int]
    got: list[int]
    src: list[int] | None
    where: str  # file:line


_FP_RE = re.compile(r"([+-]?)(0[xX][0-9a-fA-F]+|\d+)")


def parse_fp(text: str) -> int:
    """Decimal or 0x-hex, optionally signed; stored modulo 2**64 so signed and unsigned views agree."""
    m = _FP_RE.fullmatch(text)
    if not m:
        raise ValueError(f"fingerprint {text!r} is not a decimal or 0x-hex integer")
    value = int(m.group(2), 16 if m.group(2)[:2].lower() == "0x" else 10)
    return (-value if m.group(1) == "-" else value) & _MASK64


def _parse_int(text: str, key: str) -> int:
    if not re.fullmatch(r"[+-]?\d+", text):
        raise ValueError(f"{key}={text!r} is not an integer")
    return int(text)


def parse_line(line: str, where: str) -> Record:
    """Parse the part of a log line from the A2AUD tag on; ValueError names what is wrong."""
    tokens = line[line.index(TAG) + len(TAG):].split()
    kv: dict[str, str] = {}
    for tok in tokens:
        key, eq, value = tok.partition("=")
        if not eq or not key:
            raise ValueError(f"token {tok!r} is not key=value (spaces inside a list?)")
        if key in kv:
            raise ValueError(f"key {key!r} appears twice")
        kv[key] = value
    if "v" in kv:
        if not re.fullmatch(r"\d+", kv["v"]):
            raise ValueError(f"v={kv['v']!r} is not a format version")
        if int(kv["v"]) > FORMAT_VERSION:
            raise InputError(f"{where}: A2AUD record format v={kv['v']} is newer than this reader (v={FORMAT_VERSION}); "
                             f"its fields may mean something else: read it with the dit-parallel-opt that wrote it")
    missing = [k for k in ("comm", "rank", "n", "call", "chunk", "spre", "spost", "got") if k not in kv]
    if missing:
        raise ValueError(f"missing key(s) {missing}")
    if not _COMM_RE.fullmatch(kv["comm"]):
        raise ValueError(f"comm={kv['comm']!r} is not a plain name")
    n = _parse_int(kv["n"], "n")
    rank = _parse_int(kv["rank"], "rank")
    if n < 1 or not 0 <= rank < n:
        raise ValueError(f"rank={rank} outside a communicator of n={n}")
    lists = {}
    for key in ("spre", "spost", "got", "src"):
        if key not in kv:
            continue
        items = kv[key].split(",")
        if any(i == "" for i in items):
            raise ValueError(f"{key} has an empty item")
        lists[key] = [parse_fp(i) for i in items]
        if len(lists[key]) != n:
            raise ValueError(f"{key} has {len(lists[key])} legs, expected n={n}")
    return Record(kv["comm"], rank, n, _parse_int(kv["call"], "call"), _parse_int(kv["chunk"], "chunk"),
                  lists["spre"], lists["spost"], lists["got"], lists.get("src"), where)


def expand_paths(paths: Iterable[str]) -> list[Path]:
    """Files as given; folders contribute their *.log / *.txt files (sorted). Missing paths are errors."""
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(x for x in p.rglob("*") if x.is_file() and x.suffix in (".log", ".txt"))
            if not found:
                raise InputError(f"{p}: folder holds no *.log or *.txt files")
            out += found
        else:
            why = input_problem(p, "file", streams=True)
            if why:
                raise InputError(why)
            out.append(p)
    if not out:
        raise InputError("no log files given")
    return out


@dataclass
class ParsedLogs:
    records: list[Record]
    malformed: list[dict]  # {where, reason}
    lines_seen: int  # lines that carry the tag
    files: list[str]


def read_logs(paths: Iterable[str]) -> ParsedLogs:
    records, malformed, seen = [], [], 0
    owner: dict[tuple[str, int, int, int], tuple[Path, str]] = {}  # key -> (file, file:line) first seen
    files = expand_paths(paths)
    for f in files:
        text = decode_log(read_input(f), str(f))  # any program's output; FIFOs read once
        lines = text.splitlines()
        cut = len(lines) if text and not text.endswith(("\n", "\r")) else 0  # the writer stopped mid-line
        for i, line in enumerate(lines, 1):
            if TAG not in line:
                continue
            seen += 1
            if i == cut:
                malformed.append({"where": f"{f}:{i}", "reason": "incomplete record: the file ends inside this line "
                                                                 "(the writer stopped mid-line); not read"})
                continue
            try:
                rec = parse_line(line, f"{f}:{i}")
            except ValueError as exc:
                malformed.append({"where": f"{f}:{i}", "reason": str(exc)})
                continue
            key = (rec.comm, rec.rank, rec.call, rec.chunk)
            first = owner.setdefault(key, (f, rec.where))
            if first[0] != f:
                raise InputError(f"{rec.where}: rank {rec.rank} of communicator {rec.comm!r} (call {rec.call}, "
                                 f"chunk {rec.chunk}) is also logged in {first[1]}: two logs claim the same rank")
            records.append(rec)
    return ParsedLogs(records, malformed, seen, [str(f) for f in files])


# ---------------------------------------------------------------------------------------------
# Reconciling


@dataclass
class Tally:
    keys: int = 0
    legs_compared: int = 0
    mismatches: int = 0
    mismatches_rewritten: int = 0  # mismatched legs whose sender's spre != spost on that leg
    self_legs_compared: int = 0
    self_leg_bad: int = 0
    packing_bad: int = 0
    packing_compared: int = 0
    send_buffer_rewritten: int = 0
    mismatch_receivers: set = field(default_factory=set)

    def add(self, other: Tally) -> None:
        for k in ("keys", "legs_compared", "mismatches", "mismatches_rewritten", "self_legs_compared",
                  "self_leg_bad", "packing_bad", "packing_compared", "send_buffer_rewritten"):
            setattr(self, k, getattr(self, k) + getattr(other, k))
        self.mismatch_receivers |= other.mismatch_receivers


def verdict_of(t: Tally) -> str:
    """First that applies: no evidence, rewritten, placement, packing, rewritten (latent), faithful."""
    if t.legs_compared == 0:
        return VERDICT_NO_EVIDENCE
    if t.mismatches_rewritten:
        return VERDICT_REWRITTEN
    if t.mismatches:
        return VERDICT_PLACEMENT
    if t.self_leg_bad or t.packing_bad:
        return VERDICT_PACKING
    if t.send_buffer_rewritten:
        return VERDICT_REWRITTEN
    return VERDICT_FAITHFUL


def reconcile(parsed: ParsedLogs, world: int | None = None, comm: str | None = None,
              max_examples: int = 10) -> dict:
    """Per communicator and overall: legs compared, mismatches, self-leg, packing and buffer checks."""
    recs = [r for r in parsed.records if comm is None or r.comm == comm]
    if comm is not None and not recs:
        have = sorted({r.comm for r in parsed.records})
        raise InputError(f"--comm {comm!r}: not in the logs; communicators present: {have}")
    by_key: dict[tuple, dict[int, Record]] = defaultdict(dict)
    duplicates, sizes = [], {}
    for r in recs:
        key = (r.comm, r.call, r.chunk)
        if world is not None and r.n != world:
            raise InputError(f"{r.where}: n={r.n} but --world {world} was given (mismatched world size)")
        first = sizes.setdefault(key, (r.n, r.where))
        if first[0] != r.n:
            raise InputError(f"comm {r.comm} call {r.call} chunk {r.chunk}: ranks disagree on the "
                             f"group size (n={first[0]} at {first[1]}, n={r.n} at {r.where})")
        if r.rank in by_key[key]:
            old = by_key[key][r.rank]
            same = (old.spre, old.spost, old.got, old.src) == (r.spre, r.spost, r.got, r.src)
            duplicates.append({"where": r.where, "first": old.where, "identical": same})
            continue
        by_key[key][r.rank] = r
    per_comm: dict[str, Tally] = defaultdict(Tally)
    missing: dict[str, set] = defaultdict(set)
    incomplete_keys = 0
    examples: list[dict] = []
    for key in sorted(by_key, key=lambda k: (k[0], k[1], k[2])):
        ranks = by_key[key]
        n = sizes[key][0]
        t = Tally(keys=1)
        absent = set(range(n)) - set(ranks)
        if absent:
            missing[key[0]] |= absent
            incomplete_keys += 1
        for s, rs in ranks.items():
            for d in range(n):
                if rs.spre[d] != rs.spost[d]:
                    t.send_buffer_rewritten += 1
            if rs.src is not None:
                t.packing_compared += n
                t.packing_bad += sum(1 for d in range(n) if rs.src[d] != rs.spre[d])
            ref = rs.src[s] if rs.src is not None else rs.spre[s]
            t.self_legs_compared += 1
            if ref != rs.got[s]:
                t.self_leg_bad += 1
            for d, rd in ranks.items():
                if d == s:
                    continue
                t.legs_compared += 1
                if rs.spre[d] != rd.got[s]:
                    t.mismatches += 1
                    t.mismatch_receivers.add(d)
                    rewritten = rs.spre[d] != rs.spost[d]
                    t.mismatches_rewritten += rewritten
                    if len(examples) < max_examples:
                        examples.append({"comm": key[0], "call": key[1], "chunk": key[2], "src": s, "dst": d,
                                         "sent": format_fp(rs.spre[d]), "sent_at_end": format_fp(rs.spost[d]),
                                         "received": format_fp(rd.got[s]), "sender_log": rs.where,
                                         "receiver_log": rd.where})
        per_comm[key[0]].add(t)
    total = Tally()
    comms = []
    for name in sorted(per_comm):
        t = per_comm[name]
        total.add(t)
        comms.append({"comm": name, "n": next(sizes[k][0] for k in sizes if k[0] == name), "keys": t.keys,
                      **_counts(t), "missing_ranks": sorted(missing.get(name, ())), "verdict": verdict_of(t)})
    notes = []
    if total.mismatches:
        all_receivers = {r for k, rs in by_key.items() for r in rs}
        if total.mismatch_receivers and len(total.mismatch_receivers) < len(all_receivers):
            notes.append("mismatches only on some receiving ranks: run a negative control (a known "
                         "fault) before trusting the audit itself")
    verdict = verdict_of(total)
    complete = not missing and not parsed.malformed and not any(not d["identical"] for d in duplicates)
    return {
        "verdict": verdict,
        "next_step": NEXT_STEP[verdict],
        **_counts(total),
        "records": len(recs),
        "tagged_lines": parsed.lines_seen,
        "malformed_lines": len(parsed.malformed),
        "malformed": parsed.malformed[:max_examples],
        "duplicates": len(duplicates),
        "conflicting_duplicates": sum(1 for d in duplicates if not d["identical"]),
        "duplicate_examples": duplicates[:max_examples],
        "keys_with_missing_ranks": incomplete_keys,
        "missing_ranks": {k: sorted(v) for k, v in sorted(missing.items()) if v},
        "complete": complete,
        "comms": comms,
        "examples": examples,
        "notes": notes,
        "files": parsed.files,
    }


def _counts(t: Tally) -> dict:
    return {"legs_compared": t.legs_compared, "mismatches": t.mismatches,
            "mismatches_with_rewritten_buffer": t.mismatches_rewritten,
            "self_legs_compared": t.self_legs_compared, "self_leg_bad": t.self_leg_bad,
            "packing_legs_compared": t.packing_compared, "packing_bad": t.packing_bad,
            "send_buffer_rewritten": t.send_buffer_rewritten}


def _malformed_note(result: dict) -> str:
    """'N malformed line(s) (first: file:line: reason)': the cause named, e.g. an incomplete record."""
    first = result["malformed"][0] if result["malformed"] else None
    return f"{result['malformed_lines']} malformed line(s)" + (f" (first: {first['where']}: {first['reason']})"
                                                               if first else "")


def exit_code(result: dict, allow_incomplete: bool = False) -> int:
    """0 faithful and complete; 1 a problem found; raises NoEvidenceError for no or partial evidence."""
    v = result["verdict"]
    if v == VERDICT_NO_EVIDENCE:
        unread = f"; {_malformed_note(result)}" if result["malformed_lines"] else ""
        raise NoEvidenceError(f"no evidence: 0 cross-rank legs compared in {result['records']} record(s){unread}; "
                              f"{NEXT_STEP[v]}")
    if v != VERDICT_FAITHFUL:
        return 1
    if not result["complete"] and not allow_incomplete:
        why = []
        if result["missing_ranks"]:
            why.append(f"ranks missing {result['missing_ranks']}")
        if result["malformed_lines"]:
            why.append(_malformed_note(result))
        if result["conflicting_duplicates"]:
            why.append(f"{result['conflicting_duplicates']} conflicting duplicate record(s)")
        raise NoEvidenceError("transport faithful on the legs compared, but the evidence is incomplete: "
                              + "; ".join(why) + " (--allow-incomplete accepts it)")
    return 0
