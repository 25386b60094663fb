"""The few-step timing matrix: one row per rank per run; reading, validating and writing it.

Required columns: config, tier (few | anchor), steps, repeat, rank, dit_s. Optional: devices,
comm_exposed_share, tags; any other column (the runner adds ``log``) is carried and ignored.
Plain csv and float arithmetic: the matrix is small and pandas would only slow the runner down.
"""

from __future__ import annotations

import csv
import io
import math
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from ditpar import files
from ditpar.cli import write_atomic
from ditpar.errors import InputError

MAX_DIT_S = 1e6  # about 11 days for one run: anything longer is a unit or parsing error
REQUIRED = ("config", "tier", "steps", "repeat", "rank", "dit_s")
OPTIONAL = ("devices", "comm_exposed_share", "tags", "timing")
TIERS = ("few", "anchor")
#: what the dit_s column times: the denoise (DiT) stage only, or the whole request end to end
TIMINGS = ("dit", "e2e")
#: column order the runner writes
WRITE_COLUMNS = ("config", "tier", "steps", "repeat", "rank", "dit_s", "devices",
                 "comm_exposed_share", "tags", "timing", "log")
_DEVICES_TAG = re.compile(r"(?:^|[;\s])devices=(\d+)(?:$|[;\s])")


@dataclass(frozen=True)
class Row:
    """One rank's DiT-only denoise time in one run."""

    config: str
    tier: str
    steps: int
    repeat: int
    rank: int
    dit_s: float
    devices: int | None = None
    comm_exposed_share: float | None = None
    tags: str = ""
    extra: tuple[tuple[str, str], ...] = field(default=(), compare=False)
    #: 'dit' or 'e2e' from the timing column; '' when the matrix has none (DiT-only by contract)
    timing: str = ""


def _where(path: str, line: int) -> str:
    return f"{path}: line {line}"


def _int(value: str, path: str, line: int, col: str, minimum: int | None = None) -> int:
    try:
        number = int(value.strip())
    except ValueError:
        raise InputError(f"{_where(path, line)}: {col} {value!r} is not an integer") from None
    if minimum is not None and number < minimum:
        raise InputError(f"{_where(path, line)}: {col} {number} must be >= {minimum}")
    return number


def _float(value: str, path: str, line: int, col: str) -> float:
    try:
        number = float(value.strip())
    except ValueError:
        raise InputError(f"{_where(path, line)}: {col} {value!r} is not a number") from None
    if not math.isfinite(number):
        raise InputError(f"{_where(path, line)}: {col} {value!r} is not a finite number")
    return number


def parse_matrix(text: str, path: str = "MATRIX", skip_planned: bool = False) -> list[Row]:
    """Parse matrix CSV text into rows, raising InputError naming the line for any bad value.
    `skip_planned`: rows with an empty dit_s (a plan.py --emit-matrix skeleton, not run yet) are left out."""
    # blank lines and '#' comment lines are skipped; original line numbers are kept for messages
    text = text.lstrip("\ufeff")  # a byte-order mark from spreadsheet exports
    numbered = [(i + 1, ln) for i, ln in enumerate(text.splitlines())
                if ln.strip() and not ln.lstrip().startswith("#")]
    if not numbered:
        raise InputError(f"{path}: empty matrix (expected a header with {', '.join(REQUIRED)})")
    reader = csv.reader(io.StringIO("\n".join(ln for _, ln in numbered)))
    records = list(reader)
    if len(records) != len(numbered):
        raise InputError(f"{path}: a quoted field spans lines; keep each row on one line")
    header = [h.strip() for h in records[0]]
    missing = [c for c in REQUIRED if c not in header]
    if missing:
        raise InputError(f"{path}: missing column(s) {missing}; have {header}")
    dup = sorted({h for h in header if header.count(h) > 1})
    if dup:
        raise InputError(f"{path}: duplicate column(s) {dup}")
    rows: list[Row] = []
    first_timing: tuple[str, int] | None = None
    for (line, _), rec in zip(numbered[1:], records[1:], strict=True):
        if len(rec) != len(header):
            raise InputError(f"{_where(path, line)}: {len(rec)} fields, header has {len(header)}")
        cell = dict(zip(header, rec, strict=True))
        config = cell["config"].strip()
        if not config:
            raise InputError(f"{_where(path, line)}: empty config")
        if skip_planned and not cell["dit_s"].strip():
            continue
        tier = cell["tier"].strip()
        if tier not in TIERS:
            raise InputError(f"{_where(path, line)}: tier {tier!r} is not one of {list(TIERS)}")
        dit_s = _float(cell["dit_s"], path, line, "dit_s")
        if not 0 < dit_s <= MAX_DIT_S:
            raise InputError(f"{_where(path, line)}: dit_s {dit_s} must be > 0 and <= {MAX_DIT_S:g} seconds "
                             "(one denoising run)")
        devices = None
        if cell.get("devices", "").strip():
            devices = _int(cell["devices"], path, line, "devices", 1)
        share = None
        if cell.get("comm_exposed_share", "").strip():
            share = _float(cell["comm_exposed_share"], path, line, "comm_exposed_share")
            if not 0.0 <= share <= 1.0:
                raise InputError(f"{_where(path, line)}: comm_exposed_share {share} must be a "
                                 "fraction in [0, 1] (not a percentage)")
        timing = cell.get("timing", "").strip().lower()
        if timing and timing not in TIMINGS:
            raise InputError(f"{_where(path, line)}: timing {timing!r} is not one of {list(TIMINGS)} "
                             "(dit: denoise stage only; e2e: whole request)")
        if first_timing is None:
            first_timing = (timing, line)
        elif (timing or "dit") != (first_timing[0] or "dit"):
            raise InputError(f"{_where(path, line)}: timing {timing or 'dit'!r}, but line {first_timing[1]} "
                             f"is {first_timing[0] or 'dit'!r}: one matrix times one thing")
        rows.append(Row(
            config=config, tier=tier, timing=timing,
            steps=_int(cell["steps"], path, line, "steps", 1),
            repeat=_int(cell["repeat"], path, line, "repeat"),
            rank=_int(cell["rank"], path, line, "rank", 0),
            dit_s=dit_s, devices=devices, comm_exposed_share=share,
            tags=cell.get("tags", "").strip(),
            extra=tuple((k, v) for k, v in cell.items() if k not in REQUIRED + OPTIONAL),
        ))
    if not rows:
        if skip_planned:
            return rows
        raise InputError(f"{path}: header only, no rows")
    check_rows(rows, path)
    return rows


def read_matrix(path: str | os.PathLike[str], work_file: bool = False, skip_planned: bool = False) -> list[Row]:
    """Read and validate a matrix CSV file (work_file: the matrix a resumed run rewrites; `skip_planned`:
    leave out rows not measured yet)."""
    return parse_matrix(files.read_input_text(path, work_file=work_file).replace("\r\n", "\n"), str(path),
                        skip_planned)


def check_rows(rows: Sequence[Row], path: str = "MATRIX") -> None:
    """Cross-row rules: unique keys, one rank set and one card count per config, one step count per tier."""
    seen: set[tuple[str, str, int, int]] = set()
    for r in rows:
        key = (r.config, r.tier, r.repeat, r.rank)
        if key in seen:
            raise InputError(f"{path}: duplicate row config={r.config} tier={r.tier} "
                             f"repeat={r.repeat} rank={r.rank}")
        seen.add(key)
    steps = {t: sorted({r.steps for r in rows if r.tier == t}) for t in TIERS}
    for tier, values in steps.items():
        if len(values) > 1:
            raise InputError(f"{path}: tier {tier} has step counts {values}; the matrix must use one "
                             "step count per tier for every config (identical requests)")
    if steps["few"] and steps["anchor"] and steps["anchor"][0] <= steps["few"][0]:
        raise InputError(f"{path}: anchor steps {steps['anchor'][0]} must be greater than few steps "
                         f"{steps['few'][0]}")
    for config in sorted({r.config for r in rows}):
        mine = [r for r in rows if r.config == config]
        ranks = sorted({r.rank for r in mine})
        runs: dict[tuple[str, int], set[int]] = {}
        for r in mine:
            runs.setdefault((r.tier, r.repeat), set()).add(r.rank)
        for (tier, repeat), have in sorted(runs.items()):
            if sorted(have) != ranks:
                lacking = sorted(set(ranks) - have)
                raise InputError(f"{path}: config {config} tier {tier} repeat {repeat} lacks rank(s) "
                                 f"{lacking}; it has {sorted(have)}, the config has {ranks}")
        devices = sorted({r.devices for r in mine if r.devices is not None})
        if len(devices) > 1 or (devices and any(r.devices is None for r in mine)):
            raise InputError(f"{path}: config {config} has devices values {devices} "
                             "(some rows may be empty); one card count per config")


def card_count(rows: Sequence[Row]) -> tuple[int, str]:
    """Card count of one config's rows and where it came from: devices column, devices=N tag, or ranks."""
    devices = {r.devices for r in rows if r.devices is not None}
    if devices:
        return devices.pop(), "column"
    tagged = set()
    for r in rows:
        match = _DEVICES_TAG.search(r.tags)
        if match:
            tagged.add(int(match.group(1)))
    if len(tagged) > 1:
        raise InputError(f"config {rows[0].config}: tags give devices {sorted(tagged)}; need one")
    if tagged:
        return tagged.pop(), "tag"
    return len({r.rank for r in rows}), "ranks"


def _fmt(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)
    return str(value)


def matrix_csv(records: Iterable[dict[str, object]], columns: Sequence[str] = WRITE_COLUMNS) -> str:
    """Render records (dicts keyed by column) as matrix CSV text."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(columns)
    for rec in records:
        writer.writerow([_fmt(rec.get(c)) for c in columns])
    return buf.getvalue()


def write_matrix(path: str | os.PathLike[str], records: Iterable[dict[str, object]],
                 extra_columns: Sequence[str] = ()) -> None:
    """Write the matrix whole or not at all; `extra_columns` follow the runner's (plan.py adds framework, launch)."""
    write_atomic(path, matrix_csv(records, (*WRITE_COLUMNS, *extra_columns)))
