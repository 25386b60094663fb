"""The masking effectiveness checklist: each item PASS, FAIL or NO EVIDENCE, with its evidence.

Items: the family's op count grew about n-fold; no compute kernel on a stream that carries the
family's collectives; Communication(Not Overlapped) fell; the two output files are byte-identical.
An item with nothing to compare is NO EVIDENCE, never PASS.
"""

from __future__ import annotations

import hashlib
import os
import re

import numpy as np
import pandas as pd

from ditpar import files
from ditpar.core.events import end_ns
from ditpar.core.intervals import Intervals
from ditpar.core.profile import ProfileSet
from ditpar.errors import InputError
from ditpar.masking.commands import add_verify_arguments as add_arguments  # noqa: F401

PASS, FAIL, NO_EVIDENCE = "PASS", "FAIL", "NO EVIDENCE"


def _item(name: str, status: str, evidence: str) -> dict[str, str]:
    return {"name": name, "status": status, "detail": evidence}


def _family_rows(profile: ProfileSet, family: str | None, group: str | None) -> pd.DataFrame:
    ev = profile.events
    comm = ev[ev["kind"] == "comm"]
    if family is None:
        return comm
    rx = re.compile(family, re.IGNORECASE)
    hit = comm[comm["family"].astype(str).map(lambda v: bool(rx.fullmatch(v)))]
    if group is not None:
        names = {g: {g, i.name, i.role} for g, i in profile.groups.items()}
        hit = hit[hit["group"].astype(str).map(lambda g: group in names.get(g, {g}))]
    return hit


def _present_families(profile: ProfileSet) -> str:
    comm = profile.events[profile.events["kind"] == "comm"]
    counts = comm["family"].astype(str).value_counts()
    return ", ".join(f"{k} ({v})" for k, v in counts.items()) or "no collectives at all"


def check_op_count(off: ProfileSet | None, on: ProfileSet | None, family: str | None, group: str | None,
                   chunks: int | None, tolerance: float) -> dict[str, str]:
    """The family's op count on each rank grew by chunks x (within tolerance)."""
    name = "op count of the family grew about n-fold"
    if off is None or on is None or family is None or chunks is None:
        missing = [w for w, v in (("--off", off), ("--on", on), ("--family", family), ("--chunks", chunks))
                   if v is None]
        return _item(name, NO_EVIDENCE, f"needs {', '.join(missing)}")
    a, b = _family_rows(off, family, group), _family_rows(on, family, group)
    if len(a) == 0 or len(b) == 0:
        which = "masking-off" if len(a) == 0 else "masking-on"
        prof = off if len(a) == 0 else on
        raise InputError(f"{which} profile: --family {family!r} matches no collective; families present: "
                         f"{_present_families(prof)}")
    ca, cb = a.groupby("rank").size(), b.groupby("rank").size()
    ranks = sorted(set(ca.index) | set(cb.index))
    parts, ok = [], True
    for r in ranks:
        x, y = int(ca.get(r, 0)), int(cb.get(r, 0))
        ratio = y / x if x else float("inf")
        good = x > 0 and abs(ratio - chunks) <= tolerance * chunks
        ok &= good
        parts.append(f"rank {r}: {x} -> {y} ({ratio:.3g}x)")
    verdict = PASS if ok else FAIL
    return _item(name, verdict, f"expected {chunks}x +/- {tolerance:.0%}; " + "; ".join(parts))


def check_side_stream(on: ProfileSet | None, family: str | None, group: str | None) -> dict[str, str]:
    """No compute kernel runs on a stream that carries the family's collectives."""
    name = "zero compute kernels on the communication stream"
    if on is None:
        return _item(name, NO_EVIDENCE, "needs --on")
    fam = _family_rows(on, family, group)
    if len(fam) == 0:
        return _item(name, NO_EVIDENCE, "no collective of the family in the masking-on profile")
    ev = on.events
    parts, bad, real = [], 0, 0
    for (rank, stream), grp in fam.groupby(["rank", "stream"]):
        stream = str(stream)
        if not stream or stream.startswith("comm:"):
            continue  # synthetic stream: the profile does not say which queue ran it
        real += 1
        comp = ev[(ev["rank"] == rank) & (ev["stream"].astype(str) == stream) & (ev["kind"] == "compute")]
        bad += len(comp)
        names = ", ".join(comp["name"].astype(str).value_counts().head(3).index)
        parts.append(f"rank {rank} stream {stream}: {len(grp)} collectives, {len(comp)} compute kernels"
                     + (f" ({names})" if len(comp) else ""))
    if real == 0:
        return _item(name, NO_EVIDENCE, "the profile gives the collectives no stream id (synthetic comm:<group> "
                                        "streams), so stream ownership cannot be checked")
    return _item(name, FAIL if bad else PASS, "; ".join(parts))


def _not_overlapped_per_step(profile: ProfileSet) -> tuple[dict[int, float], str]:
    """Mean Communication(Not Overlapped) per step for each rank (us), and where it came from."""
    st = profile.step_trace
    if st is not None and len(st) and "communication_not_overlapped_us" in st:
        vals = st.groupby("rank")["communication_not_overlapped_us"].mean()
        return {int(k): float(v) for k, v in vals.items()}, "step_trace_time.csv"
    ev = profile.events
    out = {}
    for rank, grp in ev.groupby("rank"):
        comm, comp = grp[grp["kind"] == "comm"], grp[grp["kind"] == "compute"]
        iv_c = Intervals.from_spans(comm["start_ns"].to_numpy(np.int64), end_ns(comm))
        iv_k = Intervals.from_spans(comp["start_ns"].to_numpy(np.int64), end_ns(comp))
        steps = profile.steps
        mine = steps[steps["rank"].astype("int64") == int(rank)] if steps is not None and len(steps) else []
        n = max(len(mine), 1)
        if len(mine):
            win = Intervals.from_spans(mine["start_ns"].to_numpy(np.int64), mine["end_ns"].to_numpy(np.int64))
            iv_c, iv_k = iv_c & win, iv_k & win
        out[int(rank)] = (iv_c - iv_k).total / 1000.0 / n
    return out, "events (union of all collectives minus union of compute)"


def check_not_overlapped(off: ProfileSet | None, on: ProfileSet | None) -> dict[str, str]:
    """Communication(Not Overlapped) per step is lower with masking on, on every rank."""
    name = "Communication(Not Overlapped) fell"
    if off is None or on is None:
        return _item(name, NO_EVIDENCE, "needs --off and --on")
    a, src_a = _not_overlapped_per_step(off)
    b, src_b = _not_overlapped_per_step(on)
    ranks = sorted(set(a) & set(b))
    if not ranks:
        return _item(name, NO_EVIDENCE, f"no rank in both arms (off {sorted(a)}, on {sorted(b)})")
    ok = all(b[r] < a[r] for r in ranks)
    parts = [f"rank {r}: {a[r]:.1f} -> {b[r]:.1f} us/step" for r in ranks]
    src = src_a if src_a == src_b else f"off from {src_a}, on from {src_b}"
    return _item(name, PASS if ok else FAIL, f"{src}; " + "; ".join(parts))


def sha256_file(path: str) -> str:
    """Hex sha256 of a file; missing or unreadable files are input errors."""
    if not os.path.lexists(path):
        raise InputError(f"{path}: output file not found")
    h = hashlib.sha256()
    with files.open_input(path) as fh:   # a FIFO read once, a device or folder named: never a hang
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def check_outputs(outputs: list[str] | None) -> dict[str, str]:
    """The masking-off and masking-on outputs are byte-identical (Ulysses all-to-all is a permutation)."""
    name = "outputs byte-identical"
    if not outputs:
        return _item(name, NO_EVIDENCE, "needs --outputs OFF_FILE ON_FILE")
    if len(outputs) != 2:
        raise InputError(f"--outputs: expected two files (masking off, masking on), got {len(outputs)}")
    ha, hb = sha256_file(outputs[0]), sha256_file(outputs[1])
    same = ha == hb
    return _item(name, PASS if same else FAIL,
                 f"sha256 {outputs[0]} {ha[:16]}..., {outputs[1]} {hb[:16]}..." + ("" if same else
                 " -- differ: a permutation bug, not numerical noise"))


def run_checks(off: ProfileSet | None, on: ProfileSet | None, family: str | None, group: str | None,
               chunks: int | None, outputs: list[str] | None, tolerance: float = 0.1) -> list[dict[str, str]]:
    """All checklist items in order."""
    if chunks is not None and chunks < 1:
        raise InputError(f"--chunks: expected a whole number >= 1, got {chunks}")
    if not (0 <= tolerance < 1):
        raise InputError(f"--tolerance: expected a share in [0, 1), got {tolerance}")
    if family is not None:
        try:
            re.compile(family)
        except re.error as exc:
            raise InputError(f"--family: {family!r} is not a regular expression ({exc})") from None
    return [
        check_op_count(off, on, family, group, chunks, tolerance),
        check_side_stream(on, family, group),
        check_not_overlapped(off, on),
        check_outputs(outputs),
    ]


def main(args, tool: str) -> int:
    """Run `mask_bound.py verify`; exit 1 if any item failed, 2 if none had evidence."""
    from ditpar import cli
    from ditpar.errors import NoEvidenceError

    load = None
    if args.on or args.off:
        from ditpar.readers import load_profiles as load
    on = load(args.on) if args.on else None
    off = load(args.off) if args.off else None
    items = run_checks(off, on, args.family, args.group, args.chunks, args.outputs, args.tolerance)
    failed = any(i["status"] == FAIL for i in items)
    none = all(i["status"] == NO_EVIDENCE for i in items)
    verdict = FAIL if failed else (NO_EVIDENCE if none else PASS)
    if args.csv:
        cli.write_csv(args.csv, pd.DataFrame(items))
    with_evidence = sum(i["status"] != NO_EVIDENCE for i in items)
    if args.json:
        cli.print_json(tool, {"command": "verify", "verdict": verdict, "items_with_evidence": with_evidence,
                              "checks": items})
    else:
        print(cli.format_table(items, ["status", "name", "detail"], headers={"detail": "evidence"}))
        print(f"verdict: {verdict} ({with_evidence} of {len(items)} items had evidence)")
    if failed:
        return 1
    if none:
        raise NoEvidenceError("verify: no item had evidence to compare (give --off, --on, --family, --chunks "
                              "or --outputs)")
    return 0
