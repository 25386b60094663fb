"""Shared command-line plumbing: error-to-exit-code mapping, JSON documents, tables, atomic writes.

Every script builds its parser with :func:`make_parser`, does its work in a function, and hands
that function to :func:`run` so that bad input ends as one line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ditpar import files
from ditpar.errors import DitParError, InputError
from ditpar.files import (  # noqa: F401 - the scripts' names for them
    output_path,
    plot_path,
    register_input,
    work_folder,
    write_atomic,
    write_output,
)

SCHEMA_PREFIX = "dit-parallel-opt"

# control characters a terminal acts on (escape sequences, carriage return, backspace, bell, C1): text from an
# input (a model name, a group name, a kernel name) can never colour, move or overwrite what a tool prints
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def inert(text: str) -> str:
    """text with every terminal control character (not newline or tab) shown as a visible \\xNN escape."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group(0)):02x}", text) if _CONTROL.search(text) else text


class _InertStream(io.TextIOBase):
    """A text stream that writes through to another with terminal control characters made visible."""

    def __init__(self, target: Any) -> None:
        super().__init__()
        self._target = target

    def write(self, text: str) -> int:  # type: ignore[override]
        self._target.write(inert(text))
        return len(text)

    def flush(self) -> None:
        self._target.flush()

    def fileno(self) -> int:
        return self._target.fileno()

    def isatty(self) -> bool:
        return self._target.isatty()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self._target, "encoding", "utf-8")


def finite_float(text: str) -> float:
    """argparse type for every float flag: a finite number (NaN and infinities are usage errors)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


NEGATIVE_NUMBER = re.compile(r"^-(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$|^-(inf|infinity|nan)$", re.IGNORECASE)


class _Parser(argparse.ArgumentParser):
    """ArgumentParser whose usage errors are one line and exit 2 (argparse's own convention).

    Every ``type=float`` flag of every tool goes through :func:`finite_float`.
    """

    _depth = 0  # nesting of parse_known_args (a subcommand's parser runs inside its parent's)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.register("type", float, finite_float)
        # "-5e2", "-.5", "-inf" are values, not flags: the flag's own range check then says what is wrong
        self._negative_number_matcher = NEGATIVE_NUMBER

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:  # type: ignore[override]
        """Parse, then register the inputs and check the outputs the arguments name (ditpar.files)."""
        if _Parser._depth == 0:
            files.reset()
        _Parser._depth += 1
        try:
            namespace, extras = super().parse_known_args(args, namespace)
        finally:
            _Parser._depth -= 1
        why = files.note_arguments(self, namespace)
        if why:
            self.error(why)
        return namespace, extras

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


def positive_int(text: str) -> int:
    """argparse type for counts: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return value


def int_list(lo: int = 0, hi: int | None = None, what: str = "ids") -> Callable[[str], list[int]]:
    """argparse type of a comma-separated list of distinct integers in [lo, hi] ('0,1,4,5'): an empty
    list, a value twice or out of range is a usage error, never an empty selection silently ignored."""
    def parse(text: str) -> list[int]:
        try:
            values = [int(x) for x in text.split(",") if x.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected comma-separated integer {what}, got {text!r}") from None
        if not values:
            raise argparse.ArgumentTypeError(f"expected comma-separated integer {what}, got {text!r} (none)")
        twice = sorted({v for v in values if values.count(v) > 1})
        if twice:
            raise argparse.ArgumentTypeError(f"{text!r} names {twice} more than once")
        bad = [v for v in values if v < lo or (hi is not None and v > hi)]
        if bad:
            raise argparse.ArgumentTypeError(f"{text!r}: {bad} outside {lo}..{'' if hi is None else hi}")
        return values

    return parse


def nonempty(what: str) -> Callable[[str], str]:
    """argparse type of a name or pattern flag: empty text (a regular expression that matches every kernel)
    is a usage error, not a silent "everything"."""
    def parse(text: str) -> str:
        if not text.strip():
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
        return text

    return parse


def name_list(what: str = "names") -> Callable[[str], list[str]]:
    """argparse type of a comma-separated list of distinct names ('alltoall,allgather'): an empty list
    (which would mean "all" without a word) or a name twice is a usage error."""
    def parse(text: str) -> list[str]:
        names = [t.strip() for t in text.split(",") if t.strip()]
        if not names:
            raise argparse.ArgumentTypeError(f"expected comma-separated {what}, got {text!r} (none)")
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise argparse.ArgumentTypeError(f"{text!r} names {twice} more than once")
        return names

    return parse


def distinct(key: Callable[[str], object] = str) -> type[argparse.Action]:
    """argparse action for an nargs list whose items must differ (after ``key``): `--compare U8 U8` asks
    for one comparison twice, which is a usage error rather than a comparison of a plan with itself."""
    class _Distinct(argparse.Action):
        def __call__(self, parser, namespace, values, option_string=None):  # type: ignore[override]
            seen: dict[object, object] = {}
            for v in values:
                k = key(v)
                if k in seen:
                    parser.error(f"argument {option_string}: {v!r} given twice (as {seen[k]!r})")
                seen[k] = v
            setattr(namespace, self.dest, values)

    return _Distinct


def require_partners(args: argparse.Namespace, partners: Mapping[str, str]) -> None:
    """Flags that only mean something beside another (`--cards` beside `--linearity`): given alone they
    would be ignored without a word, so that is an InputError naming both."""
    def given(flag: str) -> bool:
        value = getattr(args, flag.lstrip("-").replace("-", "_"), None)
        return value is not None and value is not False

    for flag, partner in partners.items():
        if given(flag) and not given(partner):
            raise InputError(f"{flag} is only used with {partner}; add {partner} or leave {flag} out")


def add_workers_arg(parser: argparse.ArgumentParser) -> None:
    """--workers: how many processes read ranks at once (each holds one rank while reading it); --progress."""
    parser.add_argument("--workers", type=positive_int, metavar="N",
                        help="processes that read ranks in parallel (default: one per usable core when the "
                             "profile files total 64 MB or more, else 1); lower it to bound memory, each "
                             "holds one rank while reading it")
    add_progress_arg(parser, "ranks read / total, rows per second, while a read lasts more than a few seconds")


def add_progress_arg(parser: argparse.ArgumentParser, what: str) -> None:
    """--progress: progress lines on stderr even when stderr is not a terminal (on one they are shown anyway)."""
    parser.add_argument("--progress", action="store_true",
                        help=f"progress lines on stderr ({what}) even when stderr is not a terminal (on a "
                             "terminal they are shown anyway); never on stdout")


def wants_progress(args: argparse.Namespace) -> bool:
    """Progress lines are shown under --progress, or when stderr is a terminal."""
    return bool(getattr(args, "progress", False)) or _stderr_is_terminal()


def read_progress(prog: str, args: argparse.Namespace) -> Callable[[int, int, int], None] | None:
    """The progress callback of a multi-rank read (load_profiles(progress=...)), or None (wants_progress);
    see ReadProgress."""
    return ReadProgress(prog) if wants_progress(args) else None


def _stderr_is_terminal() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError, OSError):
        return False


#: a read shows progress once it has lasted this long, then at most once per PROGRESS_EVERY_S
PROGRESS_AFTER_S = 3.0
PROGRESS_EVERY_S = 2.0


class ReadProgress:
    """One stderr line every ``every_s`` seconds once a read has lasted ``after_s``: ranks done / total and
    rows per second; the last rank's line always, once the read has lasted ``after_s``. Never on stdout."""

    def __init__(self, prog: str, after_s: float | None = None, every_s: float | None = None,
                 clock: Callable[[], float] | None = None):
        import time

        self.prog = prog
        self.after_s = PROGRESS_AFTER_S if after_s is None else after_s
        self.every_s = PROGRESS_EVERY_S if every_s is None else every_s
        self.clock = clock or time.monotonic
        self.start = self.clock()
        self.last: float | None = None

    def __call__(self, done: int, total: int, rows: int) -> None:
        now = self.clock()
        elapsed = now - self.start
        finished = done >= total
        if elapsed < self.after_s or (not finished and self.last is not None and now - self.last < self.every_s):
            return
        self.last = now
        rate = rows / elapsed if elapsed > 0 else 0.0
        sys.stderr.write(f"{self.prog}: read {done}/{total} ranks, {rows:,} rows, {rate:,.0f} rows/s, "
                         f"{elapsed:.0f} s\n")
        sys.stderr.flush()


def add_tables_arg(parser: argparse.ArgumentParser) -> None:
    """--profiler-tables: answer from the profiler's own summary tables, read no device task."""
    parser.add_argument("--profiler-tables", action="store_true",
                        help="Ascend only: answer from the profiler's own summary tables (step_trace_time.csv, "
                             "communication.json, communication_matrix.json; analysis.db for a db export) and "
                             "read no task row: fast on large ranks, but nothing is recomputed or checked and "
                             "kernel-level figures (union, exposed, overlap, streams) are left out")


def require_evidence(ps, what: str, job: str) -> None:
    """InputError unless every rank read has ``what`` ("step_trace", "communication", "links"): a job
    answered from the profiler's summary tables never shows a rank silently missing."""
    lacking = {r: v for r, v in ps.evidence().items() if what not in v}
    if lacking:
        have = "; ".join(f"rank {r}: {', '.join(v) or 'nothing'}" for r, v in lacking.items())
        raise InputError(f"{job} needs the profiler's {what} table on every rank; lacking on {have}")


def add_output_args(parser: argparse.ArgumentParser, csv: bool = True, plot: bool = False) -> None:
    """Add the common output flags: --json always, --csv and --plot where the tool has them."""
    parser.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    if csv:
        parser.add_argument("--csv", metavar="FILE", type=output_path, help="write the main table as CSV to FILE")
    if plot:
        parser.add_argument("--plot", metavar="FILE.png", type=plot_path,
                            help="draw a figure into FILE.png (.pdf and .svg draw those formats)")


def run(prog: str, body: Callable[[], int | None]) -> None:
    """Call body(); map the package's errors to their exit codes with a one-line message.

    stdout is held until body() ends so that a reader that closes the pipe early
    (``| head -1``) cannot change the exit code; files written with :func:`write_output`
    are committed only when body() ends without an error (all outputs or none).
    """
    held = io.StringIO()
    real_stdout = sys.stdout
    outer = files.begin()
    code = 2
    try:
        with contextlib.redirect_stdout(held), contextlib.redirect_stderr(_InertStream(sys.stderr)):
            code = _call(prog, body)
            if code in (0, 1):
                code = _call(prog, files.commit_all) or code
    finally:
        files.end(outer)
        _flush_held(inert(held.getvalue()), real_stdout)
    raise SystemExit(code)


def _call(prog: str, body: Callable[[], int | None]) -> int:
    """Run body() and turn every expected failure into (one line on stderr, exit code)."""
    try:
        code = body()
    except DitParError as exc:
        return _fail(prog, one_line(str(exc)), exc.exit_code)
    except ModuleNotFoundError as exc:
        top = (exc.name or "?").split(".")[0]
        hint = 'pip install -e ".[dist]"' if top == "torch" else "pip install -e ."
        return _fail(prog, f"this step needs the Python package '{top}', which is not installed "
                           f"(from the repository root: {hint})", 2)
    except UnicodeDecodeError as exc:
        name = _file_of(exc)
        return _fail(prog, f"{name + ': ' if name else ''}input is not UTF-8 text (byte "
                           f"0x{exc.object[exc.start]:02x} at offset {exc.start}){_encoding_hint(exc)}", 2)
    except OSError as exc:  # permission denied, a folder where a file belongs, ...: the file and the reason
        return _fail(prog, files.os_error_text(exc, _file_of(exc)), 2)
    except KeyboardInterrupt:
        sys.stderr.write(f"{prog}: interrupted\n")
        return 130
    except SystemExit as exc:  # argparse --help and usage errors, already reported
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        return _fail(prog, one_line(str(exc.code)), 2)
    return 0 if code is None else int(code)


def _file_of(exc: BaseException) -> str | None:
    """The file an error came from: its own filename, else the innermost frame holding a path to a file."""
    name = getattr(exc, "filename", None)
    if name:
        return str(name)
    tb, frames = exc.__traceback__, []
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    for frame in reversed(frames):
        for value in frame.f_locals.values():
            if isinstance(value, (str, Path)) and 0 < len(str(value)) < 4096 and files.is_input(value):
                return str(value)
    return None


def _encoding_hint(exc: UnicodeDecodeError) -> str:
    data = exc.object[:4] if isinstance(exc.object, (bytes, bytearray)) else b""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")) or (len(data) >= 2 and 0 in data[:2]):
        return "; it looks like UTF-16 (e.g. saved by Windows PowerShell): convert it with iconv -f UTF-16 -t UTF-8"
    return ""


def _fail(prog: str, message: str, code: int) -> int:
    sys.stderr.write(f"{prog}: error: {message}\n")
    return code


def _flush_held(text: str, stream: Any) -> None:
    """Write the held stdout; a reader that went away is not an error of ours."""
    if not text:
        return
    try:
        stream.write(text)
        stream.flush()
    except BrokenPipeError:
        # stdout's reader is gone: point fd 1 at /dev/null so the interpreter's final flush is quiet
        with contextlib.suppress(OSError, ValueError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, stream.fileno())


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


def note_not_dit(prog: str, line: str | None, still: str) -> None:
    """One stderr line when the profile is a training step (collectives.training_line): what the tool's
    figures still answer there (``still``) and that its DiT inference reading does not apply."""
    if line:
        sys.stderr.write(f"{prog}: not a DiT inference profile: {line}; {still}\n")


def json_document(tool: str, payload: Mapping[str, Any]) -> dict[str, Any]:
    """Wrap a payload as a versioned JSON document of one tool."""
    return {"schema": f"{SCHEMA_PREFIX}/{tool}/v1", **payload}


_PLAIN = frozenset({str, int, bool, type(None)})


def _jsonable(value: Any) -> Any:
    """Convert numpy and pandas scalars; NaN and infinities become null (JSON has neither)."""
    kind = type(value)
    if kind in _PLAIN:  # most leaves of a large answer: returned before the slower checks below
        return value
    if kind is float:
        return value if math.isfinite(value) else None
    if kind is dict:
        return {str(k): _jsonable(v) for k, v in value.items()}
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


_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def spreadsheet_safe(value: Any) -> Any:
    """A CSV cell a spreadsheet shows as text: a text cell that a spreadsheet would run as a formula (it
    begins with = + - @, a tab or a carriage return) gets a leading apostrophe; numbers, numeric text
    ('-1.5', '+3') and the lone '-' of an empty figure stay as they are (README, "Every script ...")."""
    if not isinstance(value, str) or not value.startswith(_FORMULA_START) or value == "-":
        return value
    try:
        float(value)
    except ValueError:
        return "'" + value
    return value


def write_csv(path: str | os.PathLike[str], frame: Any) -> None:
    """Write a pandas DataFrame as CSV, atomically; text cells pass through :func:`spreadsheet_safe`."""
    from pandas.api.types import is_numeric_dtype

    frame = frame.copy()
    for i in range(frame.shape[1]):
        if not is_numeric_dtype(frame.dtypes.iloc[i]):
            frame.iloc[:, i] = frame.iloc[:, i].map(spreadsheet_safe)
    write_output(path, frame.to_csv(index=False, lineterminator="\n"))


def save_figure(fig: Any, path: str | os.PathLike[str]) -> None:
    """Save a matplotlib figure, atomically, in the format its name ends with (.png, .pdf, .svg)."""
    suffix = Path(path).suffix.lower()
    if suffix not in files.PLOT_FORMATS and not files.is_stream(os.fspath(path)):  # a stream gets PNG
        raise InputError(f"{path}: a figure's file name ends in .png, .pdf or .svg (the format drawn)")
    buf = io.BytesIO()
    fig.savefig(buf, format=files.PLOT_FORMATS.get(suffix, "png"), dpi=120, bbox_inches="tight")
    write_output(path, buf.getvalue())


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

    # once per column, not per cell: a table of 100k rows was quadratic (minutes for 8 large ranks' links)
    numeric = [bool(body) and _looks_numeric(body, i) for i in range(len(names))]

    def line(cells: Sequence[str]) -> str:
        out = [cell.rjust(widths[i]) if numeric[i] else cell.ljust(widths[i]) for i, cell in enumerate(cells)]
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
