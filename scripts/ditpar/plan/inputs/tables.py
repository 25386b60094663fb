"""The published-table schema (the calibration CSV: one measured configuration per row) and its one reader,
shared by `plan.py evaluate` (judge/) and the evidence printed above a ranking (decide/evidence.py)."""

from __future__ import annotations

import math
import re
from pathlib import Path

from ditpar import files, limits
from ditpar.errors import InputError

COLUMNS = ["source_repo", "source_path", "model", "hardware", "interconnect", "n_devices", "resolution_or_seq",
           "steps", "ulysses", "ring", "pipefusion", "cfg", "tp", "other_config", "latency_s", "notes"]
DEGREES = ("ulysses", "ring", "pipefusion", "cfg", "tp")
# a row whose ring column is run as a K/V all-gather: cache-dit's ring_rotate_method=allgather, vLLM-Omni's
# allgather_degree, SGLang's --sp-attention-mode kv_gather, LightX2V's seq_p_attn_type kv_all_gather (the
# implementation, one call or diffusers' loop, follows the row's framework: evaluate.row_framework)
ALLGATHER_KV = re.compile(r"ring_rotate_method\s*=\s*allgather|allgather-kv|allgather_kv|allgather_degree"
                          r"|kv_gather|kv_all_gather")
# degree columns a table may add to the schema: Attention2D (TensorRT-LLM attn2d_size rows x cols, the product)
OPTIONAL_DEGREES = ("attn2d",)


def read_table(path: str | Path):
    """Read one CSV in the calibration schema; a missing column is an error naming what is there.

    The file is read once through files.read_input_text (a FIFO with a timeout, a device refused, the
    encoding named) and parsed from that text, never opened a second time."""
    import io

    import pandas as pd

    text = files.read_input_text(path)
    try:
        frame = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False)
    except (ValueError, MemoryError, RecursionError) as exc:   # pandas' EmptyDataError and ParserError too
        why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError(f"{path}: cannot read CSV ({why})") from None
    missing = [c for c in COLUMNS if c not in frame.columns]
    if missing:
        raise InputError(f"{path}: missing column(s) {', '.join(missing)}; present: {', '.join(frame.columns)}")
    lines = _row_lines(text, path, len(frame.columns))
    for column in ("n_devices", "steps", *DEGREES, *(c for c in OPTIONAL_DEGREES if c in frame.columns)):
        top = limits.MAX_STEPS if column == "steps" else limits.MAX_DEVICES  # the bounds of --steps, --devices
        for i, cell in enumerate(frame[column]):
            _check_count(cell, f"{path}: line {lines[i] if i < len(lines) else i + 2}: column {column!r}", top)
    return frame


def _row_lines(text: str, path: str | Path, width: int) -> list[int]:
    """Line number of every data row; a row with fewer or more fields than the header is an error."""
    import csv
    import io

    reader = csv.reader(io.StringIO(text, newline=""))
    start = 1   # the line the row being read starts on (the header's, then each data row's)
    try:
        next(reader, None)
        lines = []
        start = reader.line_num + 1
        for fields in reader:
            if fields and len(fields) != width:
                raise InputError(f"{path}: line {start}: {len(fields)} field(s), the header has {width} "
                                 "(a truncated or broken row)")
            lines.append(start)
            start = reader.line_num + 1
    except csv.Error as exc:
        raise InputError(f"{path}: line {start}: not a CSV row ({exc})") from None
    return lines


def _check_count(text: object, where: str, top: int) -> None:
    """A count or degree written as a number must be a whole number in 1..top (text like 'not stated' may stay)."""
    cell = str(text).strip()
    try:
        value = float(cell)
    except ValueError:
        return
    if not (math.isfinite(value) and value >= 1 and value == int(value)):
        raise InputError(f"{where}: {cell!r} is not a whole number >= 1")
    if value > top:
        raise InputError(f"{where}: {cell!r} is out of range; expected 1..{top} (no real job has more)")


def read_rows(path: str | Path) -> list[dict[str, str]]:
    """The rows of one CSV in the schema as dicts of text, read with the csv module (no pandas: plan.py reads the
    shipped tables on every answer); the same column and row checks as read_table."""
    import csv
    import io

    text = files.read_input_text(path)
    lines = text.splitlines()
    header = next(csv.reader(lines[:1]), []) if lines else []
    missing = [c for c in COLUMNS if c not in header]
    if missing:
        raise InputError(f"{path}: missing column(s) {', '.join(missing)}; present: {', '.join(header) or 'none'}")
    lines = _row_lines(text, path, len(header))
    rows = [r for r in csv.DictReader(io.StringIO(text, newline="")) if any((v or "").strip() for v in r.values())]
    for column in ("n_devices", "steps", *DEGREES, *(c for c in OPTIONAL_DEGREES if c in header)):
        top = limits.MAX_STEPS if column == "steps" else limits.MAX_DEVICES
        for i, row in enumerate(rows):
            _check_count(row[column], f"{path}: line {lines[i] if i < len(lines) else i + 2}: column {column!r}", top)
    return rows
