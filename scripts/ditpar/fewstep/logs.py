"""Command templates and log extraction (the Extractor) for the few-step runner.

Templates use ``{name}`` placeholders (``{{`` and ``}}`` for literal braces); values are shell-quoted
on substitution. Timings come from a user regex with a named group ``dit_s`` and, optionally, ``rank``.
"""

from __future__ import annotations

import re
import shlex
import string
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from ditpar.errors import InputError

UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6}
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def template_fields(template: str, what: str) -> list[str]:
    """The placeholder names of a template, in order; reject positional, indexed or formatted ones."""
    names: list[str] = []
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise InputError(f"{what}: bad template ({exc}); use {{name}} placeholders and {{{{ }}}} "
                         "for literal braces") from None
    for _, name, spec, conversion in parsed:
        if name is None:
            continue
        if not name or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) or spec or conversion:
            shown = "{" + (name or "") + (f"!{conversion}" if conversion else "") + (
                f":{spec}" if spec else "") + "}"
            raise InputError(f"{what}: placeholder {shown} is not of the form {{name}}")
        if name not in names:
            names.append(name)
    return names


def check_template(template: str, what: str, builtins: Iterable[str],
                   configs: Mapping[str, Mapping[str, str]], forbidden: Mapping[str, str] | None = None
                   ) -> list[str]:
    """Validate a template's placeholders against built-ins and the config fields; return them."""
    names = template_fields(template, what)
    builtins = set(builtins)
    forbidden = dict(forbidden or {})
    known_fields = {k for fields in configs.values() for k in fields}
    for name in names:
        if name in forbidden:
            raise InputError(f"{what}: placeholder {{{name}}} {forbidden[name]}")
        if name not in builtins and name not in known_fields:
            raise InputError(f"{what}: unknown placeholder {{{name}}}; known: "
                             + ", ".join("{" + n + "}" for n in sorted(builtins | known_fields)))
        if name not in builtins:
            lacking = [c for c, fields in configs.items() if name not in fields]
            if lacking:
                raise InputError(f"{what}: placeholder {{{name}}} is not a field of config(s) {lacking}")
    return names


def render(template: str, values: Mapping[str, object]) -> str:
    """Substitute placeholders with shell-quoted values."""
    return template.format_map({k: shlex.quote(str(v)) for k, v in values.items()})


def render_regex(template: str, values: Mapping[str, object]) -> str:
    """Substitute placeholders with regex-escaped values (for --expect patterns)."""
    return template.format_map({k: re.escape(str(v)) for k, v in values.items()})


def compile_regex(pattern: str, what: str, group: str | None) -> re.Pattern[str]:
    """Compile a user regex that must carry the named group ``group`` (``rank`` is optional)."""
    try:
        regex = re.compile(pattern, re.MULTILINE)
    except re.error as exc:
        raise InputError(f"{what}: {pattern!r} is not a valid regular expression ({exc})") from None
    if group is not None and group not in regex.groupindex:
        raise InputError(f"{what}: {pattern!r} needs a named group (?P<{group}>...); "
                         f"has {sorted(regex.groupindex) or 'none'}")
    return regex


def clean_log(text: str) -> str:
    """Strip ANSI colour codes and turn carriage returns (progress-bar redraws) into new lines."""
    return _ANSI.sub("", text).replace("\r", "\n")


class ExtractError(Exception):
    """A log did not hold the expected requests: the run failed (not an input error)."""


def find_values(text: str, regex: re.Pattern[str], group: str, scale: float = 1.0,
                where: str = "log") -> list[tuple[int | None, float]]:
    """Every match as (rank or None, value * scale)."""
    out: list[tuple[int | None, float]] = []
    for m in regex.finditer(clean_log(text)):
        raw = m.group(group)
        try:
            value = float(raw) * scale
        except (TypeError, ValueError):
            raise InputError(f"{where}: regex group {group} matched {raw!r}, not a number") from None
        rank = None
        if "rank" in regex.groupindex and m.group("rank") is not None:
            try:
                rank = int(m.group("rank"))
            except ValueError:
                raise InputError(f"{where}: regex group rank matched {m.group('rank')!r}, not an "
                                 "integer") from None
        out.append((rank, value))
    return out


def group_requests(matches: Sequence[tuple[int | None, float]], ranks: int,
                   where: str = "log") -> list[dict[int, float]]:
    """Split matches into requests of one value per rank.

    With a rank group, the k-th line of each rank belongs to request k; without one, consecutive
    blocks of ``ranks`` lines are requests and ranks are numbered by position in the block.
    """
    if not matches:
        return []
    with_rank = [r for r, _ in matches if r is not None]
    if with_rank and len(with_rank) != len(matches):
        raise ExtractError(f"{where}: some matches have a rank and some do not")
    requests: list[dict[int, float]] = []
    if with_rank:
        per_rank: dict[int, list[float]] = {}
        for r, v in matches:
            per_rank.setdefault(r, []).append(v)  # type: ignore[arg-type]
        if len(per_rank) != ranks:
            raise ExtractError(f"{where}: found ranks {sorted(per_rank)}, expected {ranks} rank(s)")
        counts = {r: len(v) for r, v in per_rank.items()}
        if len(set(counts.values())) != 1:
            raise ExtractError(f"{where}: ranks printed different numbers of lines {counts}")
        for k in range(next(iter(counts.values()))):
            requests.append({r: vals[k] for r, vals in sorted(per_rank.items())})
        return requests
    if len(matches) % ranks:
        raise ExtractError(f"{where}: {len(matches)} matching lines is not a multiple of {ranks} ranks")
    for start in range(0, len(matches), ranks):
        requests.append({i: v for i, (_, v) in enumerate(matches[start:start + ranks])})
    return requests


class Extractor:
    """Turns log text into requests of per-rank DiT times (and exposed shares)."""

    def __init__(self, dit_regex: str, dit_unit: str = "s", share_regex: str | None = None,
                 iters_regex: str | None = None):
        if dit_unit not in UNITS:
            raise InputError(f"--dit-unit {dit_unit!r}: one of {sorted(UNITS)}")
        self.pattern = dit_regex
        self.dit = compile_regex(dit_regex, "--dit-regex", "dit_s")
        self.share = compile_regex(share_regex, "--share-regex", "share") if share_regex else None
        self.iters = compile_regex(iters_regex, "--iters-regex", "iters") if iters_regex else None
        self.scale = UNITS[dit_unit]
        self.matched_any = False

    def count(self, text: str) -> int:
        """Number of timing lines in text."""
        return len(find_values(text, self.dit, "dit_s", self.scale))

    def complete(self, text: str, ranks: int) -> bool:
        """Whether text holds one request's lines: times (and shares, iterations) for every rank."""
        if self.count(text) < ranks:
            return False
        if self.share is not None and len(find_values(text, self.share, "share")) < ranks:
            return False
        return self.iters is None or bool(find_values(text, self.iters, "iters"))

    def extract(self, text: str, log: Path, ranks: int, rc_ok: bool, want: int) -> list[dict]:
        """``want`` requests found in text, each {"dit": {rank: s}, "share": {rank: f} or None}.

        A regex that has matched nothing yet, on the log of a command that exited 0, is an input
        error (exit 2 naming the log); any other shortfall is a failed run (ExtractError).
        """
        matches = find_values(text, self.dit, "dit_s", self.scale, str(log))
        if not matches:
            if rc_ok and not self.matched_any:
                raise InputError(f"{log}: --dit-regex {self.pattern!r} never matched (the command "
                                 "exited 0); check the pattern against this log")
            raise ExtractError(f"{log}: no line matches --dit-regex")
        self.matched_any = True
        requests = group_requests(matches, ranks, str(log))
        if len(requests) != want:
            raise ExtractError(f"{log}: found {len(requests)} request(s), expected {want}")
        out = [{"dit": req, "share": None} for req in requests]
        if self.share is not None:
            shares = group_requests(find_values(text, self.share, "share", 1.0, str(log)), ranks,
                                    str(log))
            if len(shares) != want:
                raise ExtractError(f"{log}: --share-regex found {len(shares)} request(s), "
                                   f"expected {want}")
            for item, sh in zip(out, shares, strict=True):
                if set(sh) != set(item["dit"]):
                    raise ExtractError(f"{log}: share ranks {sorted(sh)} != time ranks "
                                       f"{sorted(item['dit'])}")
                item["share"] = sh
        if self.iters is not None:
            for item, n in zip(out, self._iterations(text, log, ranks, want), strict=True):
                item["iters"] = n
        return out

    def _iterations(self, text: str, log: Path, ranks: int, want: int) -> list[int]:
        """Measured denoise iterations per request: one line per request, or one per rank."""
        values = [v for _, v in find_values(text, self.iters, "iters", 1.0, str(log))]  # type: ignore[arg-type]
        if len(values) == want:
            chunks = [[v] for v in values]
        elif len(values) == want * ranks:
            chunks = [values[i:i + ranks] for i in range(0, len(values), ranks)]
        else:
            raise ExtractError(f"{log}: --iters-regex found {len(values)} line(s), expected {want} "
                               f"or {want * ranks}")
        out = []
        for chunk in chunks:
            if len(set(chunk)) != 1 or chunk[0] < 1 or chunk[0] != int(chunk[0]):
                raise ExtractError(f"{log}: iteration counts {chunk} disagree or are not positive "
                                   "integers")
            out.append(int(chunk[0]))
        return out
