"""Calibrate the hardware preset to the user's box: comm_bench.py CSVs, a topology matrix, --set overrides.

`read_bench` turns comm_bench.py CSVs into bus-bandwidth curves per (link class, pattern, group size);
`apply_bench` replaces the preset figures they cover, interpolated (log-linear in bytes) at the message
size the request sends, and returns one line per link figure saying whether it is measured or preset.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass
from pathlib import Path

from ditpar import files, limits
from ditpar.errors import InputError

BENCH_COLUMNS = ("op", "bytes", "ranks", "busbw_GBps", "correct", "group")
RING_OPS = ("all_reduce", "all_gather", "reduce_scatter", "sendrecv")   # preference order for ring_GBps
ALLTOALL_OPS = ("all_to_all",)
#: every op comm_bench.py writes (ditpar/comm/bench.py OPS); the others are measured but price no pattern here
BENCH_OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "all_to_all_uneven", "all_to_all_padded",
             "broadcast", "sendrecv")


@dataclass
class Curve:
    link: str
    pattern: str        # "alltoall" | "ring"
    group_size: int
    op: str
    points: list[tuple[int, float]]   # (bytes, busbw GB/s), sorted by bytes
    source: str

    def at(self, nbytes: float) -> tuple[float, str]:
        """busbw at nbytes: log-linear between measured sizes, the end value outside (said so)."""
        pts = self.points
        if nbytes <= pts[0][0]:
            return pts[0][1], f"at {pts[0][0]} B (smallest measured; request sends {nbytes:.3g} B)"
        if nbytes >= pts[-1][0]:
            return pts[-1][1], f"at {pts[-1][0]} B (largest measured; request sends {nbytes:.3g} B)"
        for (b0, v0), (b1, v1) in zip(pts, pts[1:], strict=False):
            if b0 <= nbytes <= b1:
                t = (math.log(nbytes) - math.log(b0)) / (math.log(b1) - math.log(b0))
                return v0 + t * (v1 - v0), f"interpolated at {nbytes:.3g} B"
        raise AssertionError("unreachable")


def _truthy(text: str, where: str) -> bool:
    low = str(text).strip().lower()
    if low in ("true", "1", "yes"):
        return True
    if low in ("false", "0", "no"):
        return False
    raise InputError(f"{where}: column 'correct' is {text!r}, expected True or False")


def _whole(text: str, column: str, where: str, lo: int, hi: int) -> int:
    """A count column: a whole number in [lo, hi] (4.5 ranks or 1e30 bytes are not a measurement)."""
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise InputError(f"{where}: column '{column}' is {text!r}; expected a whole number") from None
    if not (math.isfinite(value) and value == int(value) and lo <= value <= hi):
        raise InputError(f"{where}: column '{column}' is {text!r}; expected a whole number in {lo}..{hi}")
    return int(value)


def _group(label: str, n: int, where: str) -> list[int]:
    """The ranks of a bench row's group: 'world' (0..n-1) or comma-separated distinct rank numbers."""
    if label in ("", "world"):
        return list(range(n))
    parts = label.split(",")
    if len(parts) > limits.MAX_DEVICES or not all(p.strip().isdigit() for p in parts):
        raise InputError(f"{where}: group {label!r}: expected 'world' or rank numbers joined by ',' such as 0,1,2,3")
    ranks = [limits.integer(p, f"{where}: group {label!r}: device id", 0, limits.MAX_DEVICES - 1) for p in parts]
    if len(set(ranks)) != len(ranks) or min(ranks) < 0:
        twice = sorted({r for r in ranks if ranks.count(r) > 1})
        raise InputError(f"{where}: group {label!r} names rank(s) {twice or [min(ranks)]} "
                         f"{'twice' if twice else '(negative)'}; expected distinct ranks >= 0")
    if len(ranks) != n:
        raise InputError(f"{where}: group {label!r} has {len(ranks)} ranks but ranks={n}")
    return ranks


def _plausible(hw, link: str, bw: float, nbytes: int, where: str) -> None:
    """A measured busbw inside the physical range of its link class (link_limits.py), else an InputError."""
    from ditpar.plan.inputs.link_limits import line_rate, plausible_range

    name = hw.links[link].name if link in hw.links else link
    rate = line_rate(link, name, hw.interconnect, hw.accelerator)
    lo, hi = plausible_range(rate, nbytes)
    if not lo <= bw <= hi:
        unit = " (a figure in MB/s?)" if bw > hi else ""
        raise InputError(f"{where}: busbw_GBps {bw:.6g} is outside {lo:.3g}..{hi:g} GB/s, the plausible range of "
                         f"{link} ({name}, {rate.technology}){unit}; ceiling: 2 x the {rate.GBps:g} GB/s line rate "
                         f"({rate.source}); floor: {nbytes} B in 10 s")


def _csv_rows(reader, path: str):
    """The rows of a csv.DictReader; csv's own errors (a cell over its field limit) are one InputError."""
    import csv

    last = reader.line_num   # the row that fails starts on the line after the last one read whole
    try:
        for row in reader:
            yield row
            last = reader.line_num
    except csv.Error as exc:
        raise InputError(f"--bench {path}:{last + 1}: not a CSV row ({exc})") from None


def read_bench(paths: list[str], hw) -> list[Curve]:
    """Curves of every comm_bench.py CSV; a failed `correct` row, a missing column, a group the machine
    does not have, a figure outside its link's physical range or a file without rows is an InputError
    naming the file and line; a file none of whose rows could be used is said on stderr."""
    import csv
    import sys

    raw: dict[tuple, dict] = {}
    skipped: list[str] = []
    unused: list[str] = []
    for path in paths:
        text = files.read_input_text(path)  # a file or <(...); byte-order mark dropped, other encodings named
        reader = csv.DictReader(text.splitlines())
        try:
            cols = reader.fieldnames or []
        except csv.Error as exc:   # a cell over csv's field limit, a NUL byte: one line, not a traceback
            raise InputError(f"--bench {path}:1: not a CSV header ({exc})") from None
        missing = [c for c in BENCH_COLUMNS if c not in cols]
        if missing:
            raise InputError(f"--bench {path}: missing column(s) {', '.join(missing)}; present: {', '.join(cols)} "
                             f"(expected a comm_bench.py --csv file)")
        rows = used = 0
        for line, row in enumerate(_csv_rows(reader, path), 2):
            rows += 1
            where = f"--bench {path}:{line}"
            if not _truthy(row["correct"], where):
                raise InputError(f"{where}: {row['op']} at {row['bytes']} B received wrong data (correct=False); "
                                 f"a bandwidth of a wrong transfer is not a measurement: fix the box and rerun")
            op = row["op"]
            if op not in BENCH_OPS:
                raise InputError(f"{where}: op {op!r} is not a comm_bench.py op; known: {', '.join(BENCH_OPS)}")
            if str(row.get("concurrent") or "1").strip() not in ("1", "1.0"):
                skipped.append(f"{path}:{line}")   # K communicators at once: contention, not one group's busbw
                continue
            pattern = "alltoall" if op in ALLTOALL_OPS else "ring" if op in RING_OPS else None
            if pattern is None:
                continue
            nbytes = _whole(row["bytes"], "bytes", where, 1, 2**50)
            n = _whole(row["ranks"], "ranks", where, 2, 1024)  # the bound of --devices
            try:
                bw = float(row["busbw_GBps"])
            except (TypeError, ValueError):
                raise InputError(f"{where}: column 'busbw_GBps' is {row['busbw_GBps']!r}; expected a number") from None
            if not (math.isfinite(bw) and bw > 0):
                raise InputError(f"{where}: busbw_GBps {row['busbw_GBps']!r}: expected a positive finite number")
            label = str(row["group"]).strip()
            ranks = _group(label, n, where)
            if max(ranks) >= hw.n_devices:
                raise InputError(f"{where}: group {label!r} needs {max(ranks) + 1} devices; {hw.name} has "
                                 f"{hw.n_devices} (pass --hardware/--topo for the benchmarked box)")
            link = hw.class_for(ranks)
            _plausible(hw, link, bw, nbytes, where)
            entry = raw.setdefault((link, pattern, n, op), {"points": {}, "source": path})
            entry["points"].setdefault(nbytes, []).append(bw)
            used += 1
        if rows == 0:
            raise InputError(f"--bench {path}: no rows (a header only): a benchmark that measured nothing; rerun "
                             f"comm_bench.py or leave the file out")
        if used == 0:
            unused.append(path)
    curves = []
    for (link, pattern, n, op), e in raw.items():
        pts = sorted((b, min(v)) for b, v in e["points"].items())   # the slower group decides
        curves.append(Curve(link, pattern, n, op, pts, e["source"]))
    if not curves:
        raise InputError(f"--bench {', '.join(paths)}: no all_to_all, all_reduce, all_gather, reduce_scatter or "
                         f"sendrecv rows with concurrent=1")
    for path in unused:
        sys.stderr.write(f"plan.py: warning: --bench {path}: no row used (no all_to_all, all_reduce, all_gather, "
                         f"reduce_scatter or sendrecv row with concurrent=1); the figures come from the other "
                         f"file(s)\n")
    if skipped:
        sys.stderr.write(f"plan.py: note: --bench rows with concurrent > 1 not used (contention runs, not one "
                         f"group's busbw): {', '.join(skipped[:5])}{' ...' if len(skipped) > 5 else ''}\n")
    return curves


def message_bytes(model, shape, pattern: str, k: int) -> float:
    """Bytes per rank of one call of the pattern in a plan with that dimension alone at degree k:
    one of Q, K, V, O through a Ulysses all-to-all, or one K/V block per ring hop."""
    n_attn = shape.tokens + shape.text_joint
    if pattern == "alltoall":
        return n_attn / k * model.heads * model.head_dim * 2 * shape.batch
    return n_attn / k * 2 * model.kv_heads * model.head_dim * 2 * shape.batch


def apply_bench(hw, curves: list[Curve], model, shape) -> tuple[object, list[dict]]:
    """(hardware with measured figures, one record per link figure: measured or preset)."""
    links = dict(hw.links)
    records = []
    for key, link in hw.links.items():
        if key not in reachable_links(hw):
            continue
        mine = [c for c in curves if c.link == key]
        a2a = {c.group_size: c for c in mine if c.pattern == "alltoall" and c.group_size >= 3}
        table = dict(link.alltoall_GBps)
        for k, c in sorted(a2a.items()):
            bw, how = c.at(message_bytes(model, shape, "alltoall", k))
            table[k] = bw
            records.append({"link": key, "figure": f"all-to-all busbw, group {k}", "GBps": bw, "measured": True,
                            "how": f"{c.source}: {c.op} {how}"})
        for k, bw in sorted(table.items()):
            if k not in a2a:
                records.append({"link": key, "figure": f"all-to-all busbw, group {k}", "GBps": bw, "measured": False,
                                "how": f"{_preset_name(hw)} (the bench has no all_to_all of this group size on this link: "
                                       f"measured sizes {sorted(a2a) or 'none'})"})
        ring = [c for c in mine if c.pattern == "ring"]
        changes: dict = {"alltoall_GBps": tuple(sorted(table.items()))}
        if ring:
            best = min(ring, key=lambda c: (RING_OPS.index(c.op), -c.group_size))
            bw, how = best.at(message_bytes(model, shape, "ring", best.group_size))
            changes["ring_GBps"] = bw
            records.append({"link": key, "figure": "ring busbw (all-reduce/all-gather/P2P pattern)", "GBps": bw,
                            "measured": True, "how": f"{best.source}: {best.op}, group {best.group_size}, {how}"})
        else:
            records.append({"link": key, "figure": _ring_label(link),
                            "GBps": link.ring_GBps or link.bandwidth_GBps, "measured": False,
                            "how": f"{_preset_name(hw)} (no ring-pattern op on this link in the bench)"})
        links[key] = dataclasses.replace(link, **changes)
    return dataclasses.replace(hw, links=links), records


def _preset_name(hw) -> str:
    return f"templates/hardware/{Path(hw.path).name}" if hw.path else hw.name


def reachable_links(hw, devices: int | None = None) -> set[str]:
    """Link classes that ranks 0..devices-1 of this machine can cross (one domain has no inter_domain hop)."""
    n = min(devices or hw.n_devices, hw.n_devices)
    return {"intra_domain"} | {hw.class_for([0, r]) for r in range(1, n)}


def preset_records(hw) -> list[dict]:
    """Link figures of an uncalibrated preset, all marked preset."""
    out = []
    for key, link in hw.links.items():
        if key not in reachable_links(hw):
            continue
        for k, bw in link.alltoall_GBps:
            out.append({"link": key, "figure": f"all-to-all busbw, group {k}", "GBps": bw, "measured": False,
                        "how": _preset_name(hw)})
        out.append({"link": key, "figure": _ring_label(link), "GBps": link.ring_GBps or link.bandwidth_GBps,
                    "measured": False, "how": _preset_name(hw)})
    return out


def _ring_label(link) -> str:
    return ("ring busbw (all-reduce/all-gather/P2P pattern)" if link.ring_GBps
            else "bus bandwidth (every pattern; no per-pattern figure)")


def measured_links(records: list[dict], hw) -> frozenset[str]:
    """Link classes whose every figure is measured (their exposed time gets no preset widening), and
    '<link>:alltoall' for a class whose all-to-all figures are all measured while another of its figures is not
    (that part of its exposed time gets none: ditpar.plan.decide.uncertainty.exposed_parts)."""
    keys = {r["link"] for r in records}
    whole = {k for k in keys if all(r["measured"] for r in records if r["link"] == k)}
    a2a = {f"{k}:alltoall" for k in keys - whole
           if (own := [r for r in records if r["link"] == k and r["figure"].startswith("all-to-all")])
           and all(r["measured"] for r in own)}
    return frozenset(whole | a2a)


def load_topology(path: str, hw):
    """The preset with domains from an `nvidia-smi topo -m` / `npu-smi info -t topo` file."""
    from ditpar.plan.inputs.topology import apply_topology, parse_topology

    text = files.read_input_text(path, strip_ansi=True)
    topo = parse_topology(text, path)
    return apply_topology(topo, hw, f"--topo {path}"), topo.warnings


SET_HW = ("mfu", "peak_tflops_bf16", "hbm_bandwidth_GBps")
SET_LINK = ("bandwidth_GBps", "ring_GBps", "latency_us", "per_peer_GBps")
SET_TUN = ("overlap_efficiency", "launch_us")


def set_keys(hw) -> list[str]:
    out = list(SET_HW) + list(SET_TUN)
    for key in hw.links:
        out += [f"links.{key}.{f}" for f in SET_LINK] + [f"links.{key}.alltoall_GBps.K"]
    return out


_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")


def _set_spec(key: str, parts: list[str], hw):
    """The schema entry (type and range, plan/inputs/schema.py) of a --set key, or None when it is unknown."""
    from ditpar.plan.inputs import schema

    if key in SET_HW:
        return schema.HARDWARE.keys[key]
    if key in SET_TUN:
        return schema.TUNABLES.keys[key]
    if len(parts) >= 3 and parts[0] == "links" and parts[1] in hw.links:
        if len(parts) == 3 and parts[2] in SET_LINK:
            spec = schema.LINK.keys[parts[2]]
            return dataclasses.replace(spec, zero=False)   # a what-if gives a figure; 0 would unset it silently
        if (len(parts) == 4 and parts[2] == "alltoall_GBps" and parts[3].isdigit() and len(parts[3]) <= 4
                and 3 <= int(parts[3]) <= limits.MAX_DEVICES):
            return schema.LINK.keys["alltoall_GBps"].table.free
    return None


def apply_sets(items: list[str], hw, tun) -> tuple[object, object, list[str]]:
    """Apply --set KEY=VALUE overrides; every override is returned as 'key: old -> new'.

    A key must be known (SET_HW, SET_TUN, links.<class>.<figure>, links.<class>.alltoall_GBps.<3..1024>) and
    given once; its value a plain decimal number inside the range its key has in the schema (which states
    each range's reason), so no what-if can make a computed time overflow."""
    from ditpar.plan.inputs import schema

    notes = []
    seen: dict[str, str] = {}
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise InputError(f"--set {item!r}: expected KEY=VALUE with a finite number, e.g. mfu=0.4")
        parts = key.split(".")
        spec = _set_spec(key, parts, hw)
        if spec is None:
            raise InputError(f"--set {key!r}: unknown figure; known: {', '.join(set_keys(hw))}")
        if key in seen:
            raise InputError(f"--set {item!r}: {key} is already set by --set {seen[key]!r}; give each figure once")
        seen[key] = item
        if not _NUMBER.fullmatch(text.strip()):
            raise InputError(f"--set {item!r}: expected KEY=VALUE with a finite number such as 0.4 or 1e3, "
                             f"got {text.strip()!r}")
        value = float(text)
        if not math.isfinite(value):
            raise InputError(f"--set {item!r}: expected KEY=VALUE with a finite number")
        schema.check_value(value, spec, f"--set {item!r}", key)
        if key in SET_HW:
            old = getattr(hw, key)
            hw = dataclasses.replace(hw, **{key: value})
        elif key in SET_TUN:
            old = getattr(tun, key)
            tun = dataclasses.replace(tun, **{key: value})
        else:
            link = hw.links[parts[1]]
            if len(parts) == 3:
                old = getattr(link, parts[2])
                link = dataclasses.replace(link, **{parts[2]: value})
            else:
                table = dict(link.alltoall_GBps)
                old = table.get(int(parts[3]), "unset")
                table[int(parts[3])] = value
                link = dataclasses.replace(link, alltoall_GBps=tuple(sorted(table.items())))
            # a typed figure is given, not measured: its link's exposed time keeps a band at least as wide as before
            # (uncertainty.EVIDENCE_FACTOR: 'given' moves like a derived figure; a borrowed class stays borrowed)
            link = dataclasses.replace(link, evidence=link.evidence if link.evidence == "other-class" else "given",
                                       basis=f"{link.basis}; given: --set {key}")
            hw = dataclasses.replace(hw, links={**hw.links, parts[1]: link})
        notes.append(f"{key}: {old} -> {value:g}")
    return hw, tun, notes
