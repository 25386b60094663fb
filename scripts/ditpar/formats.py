"""One loader per document format (JSON, TOML, Python literals, plain data from a pickle): every way a
parser can fail on hostile input (nesting 100,000 deep, a 5,000-digit integer, NaN where JSON allows
none, memory) ends as one InputError naming the file, never as a traceback, a hang or a full memory.

Inputs reach these loaders through :func:`ditpar.files.read_input` (FIFOs read once, devices refused).
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
from typing import Any

from ditpar import files
from ditpar.errors import InputError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

MAX_DEPTH = 64            # nesting of any document the tools read (a Flight Recorder dump nests 5 deep)
MAX_INT_DIGITS = 40       # digits of an integer in a document (int64 has 19; 2**128 has 39)
MAX_LITERAL_CHARS = 1_000_000   # a Python literal in a cell (a rank list of 100,000 ranks is 700 kB)
MAX_NODES = 20_000_000    # values in one document once shared references are counted as often as reached


class _BigNumber(ValueError):
    pass


def _int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise _BigNumber(f"an integer of {len(text.lstrip('-'))} digits; no field takes more than "
                         f"{MAX_INT_DIGITS}")
    return int(text)


def _constant(name: str) -> Any:
    raise _BigNumber(f"{name}, which JSON does not allow (write a number or null)")


def json_text(text: str | bytes, where: str, *, parse_float: Any = None, max_depth: int = MAX_DEPTH,
              walk: bool = True, nonfinite: bool = False) -> Any:
    """Parse one JSON document; every failure (syntax, depth, huge integer, NaN, memory) is one InputError.

    walk=False skips the nesting walk for large profiler files (JSON holds no shared reference or cycle, and
    nesting past the parser's own limit is still caught); max_depth then bounds nothing beyond that limit.
    nonfinite=True reads NaN and Infinity as Python writes them (profilers' own summary files hold them)."""
    if isinstance(text, bytes):
        text = files.decode_text(text, where)
    elif text.startswith("\ufeff"):
        text = text[1:]
    try:
        doc = json.loads(text, parse_int=_int, parse_constant=float if nonfinite else _constant,
                         parse_float=parse_float)
    except _BigNumber as exc:
        raise InputError(f"{where}: holds {exc}") from None
    except json.JSONDecodeError as exc:
        raise InputError(f"{where}: not valid JSON ({exc.msg}: line {exc.lineno} column {exc.colno})") from None
    except RecursionError:
        raise InputError(f"{where}: nests too deeply to be a document the tools read "
                         f"(more than {max_depth} levels)") from None
    except MemoryError:
        raise InputError(f"{where}: too large to parse in memory") from None
    except ValueError as exc:  # e.g. Python's own limit on integer digits, a float hook refusing a value
        raise InputError(f"{where}: not valid JSON ({exc})") from None
    if walk:
        check_depth(doc, where, max_depth)
    return doc


def load_json(path: str | os.PathLike[str], *, parse_float: Any = None, max_depth: int = MAX_DEPTH) -> Any:
    """A user's JSON file (or FIFO), read through files.read_input and parsed by :func:`json_text`."""
    where = os.fspath(path)
    return json_text(files.read_input_text(where), where, parse_float=parse_float, max_depth=max_depth)


_TOML_PART = r"""(?:[A-Za-z0-9_-]+|"(?:[^"\\\n]|\\.)*"|'[^'\n]*')"""
_TOML_KEY = re.compile(rf"[ \t]*\[{{0,2}}[ \t]*({_TOML_PART}(?:[ \t]*\.[ \t]*{_TOML_PART})*)[ \t]*(?:\]|=)")
_TOML_PARTS = re.compile(_TOML_PART)


def _deep_keys(text: str, where: str, max_depth: int) -> None:
    """Refuse a dotted key or table header of more than max_depth parts before parsing: tomllib takes time
    quadratic in their number (50,000 parts: about 30 s) before the depth check could see the result."""
    if text.count(".") < max_depth:    # a key of more than max_depth parts has at least max_depth dots
        return
    for line in text.splitlines():
        if line.count(".") >= max_depth and (m := _TOML_KEY.match(line)):
            parts = len(_TOML_PARTS.findall(m.group(1)))
            if parts > max_depth:
                raise InputError(f"{where}: a key of {parts:,} dotted parts nests more than {max_depth} levels; "
                                 "not a file the tools read")


def toml_text(text: str, where: str, *, max_depth: int = MAX_DEPTH) -> dict[str, Any]:
    """Parse one TOML document; every failure (syntax, depth, huge integer, memory) is one InputError."""
    _deep_keys(text, where, max_depth)
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{where}: not valid TOML ({exc})") from None
    except RecursionError:
        raise InputError(f"{where}: nests too deeply to be a file the tools read "
                         f"(more than {max_depth} levels)") from None
    except MemoryError:
        raise InputError(f"{where}: too large to parse in memory") from None
    except ValueError as exc:  # Python's limit on integer digits
        raise InputError(f"{where}: not valid TOML ({exc})") from None
    check_depth(doc, where, max_depth)
    _no_huge_integers(doc, where)
    return doc


def load_toml(path: str | os.PathLike[str], *, max_depth: int = MAX_DEPTH) -> dict[str, Any]:
    """A user's TOML file (or FIFO), read through files.read_input and parsed by :func:`toml_text`."""
    where = os.fspath(path)
    return toml_text(files.read_input_text(where), where, max_depth=max_depth)


def python_literal(text: str, where: str, *, max_chars: int = MAX_LITERAL_CHARS,
                   max_depth: int = MAX_DEPTH) -> Any:
    """A Python literal written into a cell ('[0, 1, 2]'), parsed without evaluating code; a long, deep,
    huge or malformed one is an InputError, never a MemoryError or RecursionError."""
    import ast

    if len(text) > max_chars:
        raise InputError(f"{where}: a literal of {len(text):,} characters; at most {max_chars:,} are read")
    if text.count("[") + text.count("(") + text.count("{") > max_depth and _depth_of_text(text) > max_depth:
        raise InputError(f"{where}: nests more than {max_depth} levels; not a value the tools read")
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError) as exc:
        raise InputError(f"{where}: not a Python literal ({type(exc).__name__}: {exc})".rstrip()) from None
    except (RecursionError, MemoryError):
        raise InputError(f"{where}: too deep or too large to read as a literal") from None
    check_depth(value, where, max_depth)
    _no_huge_integers(value, where)
    return value


def _depth_of_text(text: str) -> int:
    depth = deepest = 0
    for ch in text:
        if ch in "[({":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "])}":
            depth -= 1
    return deepest


def check_depth(value: Any, where: str, max_depth: int = MAX_DEPTH, max_nodes: int = MAX_NODES) -> None:
    """Refuse a document that nests deeper than max_depth, contains itself, or holds more than max_nodes
    values once every shared reference is counted as often as it is reached (a 1 kB pickle can stand for
    2**40 leaves). Iterative and memoised per object, so the check neither overflows nor expands anything."""
    containers = (dict, list, tuple)
    if not isinstance(value, containers):
        return
    memo: dict[int, tuple[int, int]] = {}   # id -> (levels below and including it, values it stands for)
    open_ids: set[int] = set()              # containers on the path from the root to the one entered
    stack: list[tuple[Any, bool]] = [(value, False)]
    while stack:
        item, leaving = stack.pop()
        key = id(item)
        children = item.values() if isinstance(item, dict) else item
        if not leaving:
            if key in memo:
                continue
            if key in open_ids:
                raise InputError(f"{where}: refers to itself (a value contains itself); not plain data")
            inner = [c for c in children if isinstance(c, containers)]
            if inner:   # come back once the containers inside are counted
                if len(open_ids) >= max_depth:
                    raise InputError(f"{where}: nests more than {max_depth} levels; not a document the tools read")
                open_ids.add(key)
                stack.append((item, True))
                stack.extend((c, False) for c in inner)
                continue
            levels, count = 1, 1 + len(item) * (2 if isinstance(item, dict) else 1)
        else:
            open_ids.discard(key)
            levels, count = 1, 1 + (len(item) if isinstance(item, dict) else 0)
            for c in children:
                below = memo.get(id(c)) if isinstance(c, containers) else None
                if below is None:
                    count += 1
                else:
                    levels = max(levels, below[0] + 1)
                    count += below[1]
        memo[key] = (levels, count)
        if levels > max_depth:
            raise InputError(f"{where}: nests more than {max_depth} levels; not a document the tools read")
        if count > max_nodes:
            raise InputError(f"{where}: holds more than {max_nodes:,} values once shared references "
                             f"are expanded; not a document the tools read")


def _no_huge_integers(value: Any, where: str) -> None:
    """TOML and Python literals take integers of any size; none of ours exceeds MAX_INT_DIGITS digits."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, bool):
            continue
        if isinstance(item, int) and abs(item) >= 10**MAX_INT_DIGITS:
            raise InputError(f"{where}: holds an integer of more than {MAX_INT_DIGITS} digits; "
                             "no field takes one so large")
        if isinstance(item, float) and not math.isfinite(item):
            continue  # the caller's own range checks name the key
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")   # what a terminal acts on (not newline, tab)


def check_text(value: str, where: str, one_line: bool = False) -> str:
    """A text read from a file, as printed later: no terminal control character (an escape sequence could
    recolour or overwrite a verdict), and for a name (one_line) no line break either (it could forge a line)."""
    bad = _CONTROL.search(value) or (one_line and re.search(r"[\n\t\u2028\u2029]", value))
    if bad:
        raise InputError(f"{where}: holds the control character {bad.group(0)!r} at offset {bad.start()}; "
                         f"expected {'one line of ' if one_line else ''}printable text")
    return value
