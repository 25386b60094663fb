"""Shared command-line plumbing: error-to-exit-code mapping, JSON documents, tables, atomic writes.

Every script builds its parser with :func:`make_parser`, does its work in a function, and hands
that function to :func:`run` so that bad input ends as one line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ditpar.errors import DitParError, InputError

SCHEMA_PREFIX = "dit-parallel-opt"


class _Parser(argparse.ArgumentParser):
    """ArgumentParser whose usage errors are one line and exit 2 (argparse's own convention)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"{self.prog}: error: {message} (see --help)\n")
        raise SystemExit(2)


def make_parser(prog: str, description: str, example: str) -> argparse.ArgumentParser:
    """Return a parser whose --help ends with a worked example."""
    return _Parser(
        prog=prog,
        description=description,
        epilog=f"example:\n  {example}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def add_output_args(parser: argparse.ArgumentParser, csv: bool = True, plot: bool = False) -> None:
    """Add the common output flags: --json always, --csv and --plot where the tool has them."""
    parser.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    if csv:
        parser.add_argument("--csv", metavar="FILE", help="write the main table as CSV to FILE")
    if plot:
        parser.add_argument("--plot", metavar="FILE.png", help="draw a figure into FILE.png")


def run(prog: str, body: Callable[[], int | None]) -> None:
    """Call body(); map the package's errors to their exit codes with a one-line message."""
    try:
        code = body()
    except DitParError as exc:
        sys.stderr.write(f"{prog}: error: {one_line(str(exc))}\n")
        raise SystemExit(exc.exit_code) from None
    except ModuleNotFoundError as exc:
        top = (exc.name or "?").split(".")[0]
        hint = 'pip install -e ".[dist]"' if top == "torch" else "pip install -e ."
        sys.stderr.write(f"{prog}: error: this step needs the Python package '{top}', which is not installed "
                         f"(from the repository root: {hint})\n")
        raise SystemExit(2) from None
    except KeyboardInterrupt:
        sys.stderr.write(f"{prog}: interrupted\n")
        raise SystemExit(130) from None
    except BrokenPipeError:
        raise SystemExit(0) from None
    raise SystemExit(0 if code is None else int(code))


def one_line(text: str) -> str:
    """Collapse a message onto one line."""
    return " ".join(text.split())


def warn_skipped(prog: str, skipped: Sequence[Mapping[str, Any]], needs_all: bool = False) -> None:
    """One stderr line per rank left out of the analysis, and what that means for the answer."""
    for item in skipped:
        rank = "rank ?" if item.get("rank") is None else f"rank {item['rank']}"
        sys.stderr.write(f"{prog}: skipped {rank} ({one_line(str(item.get('reason', '')))})\n")
    if skipped:
        what = ("this question needs every rank: exit 1" if needs_all
                else "figures below cover the other ranks only")
        sys.stderr.write(f"{prog}: {len(skipped)} rank(s) skipped; {what}\n")


def json_document(tool: str, payload: Mapping[str, Any]) -> dict[str, Any]:
    """Wrap a payload as a versioned JSON document of one tool."""
    return {"schema": f"{SCHEMA_PREFIX}/{tool}/v1", **payload}


def _jsonable(value: Any) -> Any:
    """Convert numpy and pandas scalars; NaN and infinities become null (JSON has neither)."""
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        try:
            value = value.item()
        except (ValueError, AttributeError):
            pass
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Path):
        return str(value)
    return value


def dumps_json(doc: Mapping[str, Any]) -> str:
    """Serialise a document with numpy scalars converted and NaN as null."""
    return json.dumps(_jsonable(doc), indent=2, allow_nan=False)


def print_json(tool: str, payload: Mapping[str, Any]) -> None:
    """Print a tool's JSON document on stdout."""
    sys.stdout.write(dumps_json(json_document(tool, payload)) + "\n")


def write_atomic(path: str | os.PathLike[str], data: str | bytes) -> None:
    """Write a whole file or nothing: write a temporary file beside it, then rename."""
    target = Path(path)
    directory = target.parent if str(target.parent) else Path(".")
    if not directory.is_dir():
        raise InputError(f"{target}: folder {directory} does not exist")
    mode = "wb" if isinstance(data, bytes) else "w"
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=directory)
    try:
        with os.fdopen(fd, mode, **({} if mode == "wb" else {"encoding": "utf-8", "newline": ""})) as fh:
            fh.write(data)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def write_csv(path: str | os.PathLike[str], frame: Any) -> None:
    """Write a pandas DataFrame as CSV, atomically."""
    write_atomic(path, frame.to_csv(index=False, lineterminator="\n"))


def save_figure(fig: Any, path: str | os.PathLike[str]) -> None:
    """Save a matplotlib figure as PNG, atomically."""
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120, bbox_inches="tight")
    write_atomic(path, buf.getvalue())


def pyplot():
    """Import matplotlib's pyplot with the Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _cell(value: Any, digits: int) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        if not math.isfinite(value):
            return "-"
        return f"{value:.{digits}f}"
    if hasattr(value, "item"):
        return _cell(value.item(), digits)
    return str(value)


def format_table(
    rows: Iterable[Mapping[str, Any]] | Any,
    columns: Sequence[str] | None = None,
    digits: int = 3,
    headers: Mapping[str, str] | None = None,
) -> str:
    """Render rows (mappings or a DataFrame) as an aligned plain-text table."""
    if hasattr(rows, "to_dict"):
        columns = list(columns or rows.columns)
        rows = rows.to_dict("records")
    rows = list(rows)
    if columns is None:
        columns = list(rows[0].keys()) if rows else []
    headers = headers or {}
    names = [headers.get(c, c) for c in columns]
    body = [[_cell(r.get(c), digits) for c in columns] for r in rows]
    widths = [max([len(n)] + [len(b[i]) for b in body]) for i, n in enumerate(names)]

    def line(cells: Sequence[str]) -> str:
        out = []
        for i, cell in enumerate(cells):
            numeric = body and _looks_numeric(body, i)
            out.append(cell.rjust(widths[i]) if numeric else cell.ljust(widths[i]))
        return "  ".join(out).rstrip()

    lines = [line(names), "  ".join("-" * w for w in widths)]
    lines += [line(b) for b in body]
    return "\n".join(lines)


def _looks_numeric(body: Sequence[Sequence[str]], i: int) -> bool:
    for row in body:
        cell = row[i]
        if cell == "-":
            continue
        try:
            float(cell)
        except ValueError:
            return False
    return True
