"""Read Flight Recorder dumps (torch's pickle or JSON, NCCL / gloo / HCCL) into one record per rank;
fields a torch version did not write are named, never guessed."""

from __future__ import annotations

import ast
import io
import json
import os
import pickle
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ditpar.errors import InputError

# Fields every entry needs to be placed at all (older dumps spell the sequence id `seq_id`).
REQUIRED = ("process_group", "profiling_name")
# Fields the comparison uses when present; their absence is reported by name.
OPTIONAL = ("collective_seq_id", "p2p_seq_id", "is_p2p", "input_sizes", "output_sizes", "input_dtypes",
            "output_dtypes", "state", "record_id", "time_created_ns", "frames")
TOP_OPTIONAL = ("version", "pg_config", "pg_status")
_RANK = re.compile(r"(\d+)$")
_SUFFIXES = (".json", ".pkl", ".pickle")


class _SafeUnpickler(pickle.Unpickler):
    """Plain containers and scalars only: a dump never needs a class, so none is ever loaded."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refusing to load {module}.{name} (a dump holds plain data only)")


def safe_unpickle(data: bytes) -> Any:
    return _SafeUnpickler(io.BytesIO(data)).load()


@dataclass
class Entry:
    """One recorded collective or point-to-point call of one rank."""

    pg: str
    pg_desc: str
    seq: int | None          # collective sequence id in its group (None for p2p)
    op: str                  # e.g. all_reduce (backend prefix removed)
    backend: str             # gloo / nccl / hccl / ...
    input_sizes: Any = None
    output_sizes: Any = None
    input_dtypes: Any = None
    output_dtypes: Any = None
    state: str | None = None
    record_id: int | None = None
    time_created_ns: int | None = None
    call_site: str | None = None
    p2p: bool = False


@dataclass
class RankDump:
    """Everything one rank's dump says, plus what it did not say."""

    rank: int
    path: str
    fmt: str
    version: str | None
    entries: list[Entry]
    groups: dict[str, list[int]] = field(default_factory=dict)   # pg name -> members, from pg_config
    group_desc: dict[str, str] = field(default_factory=dict)
    last_completed: dict[str, int] = field(default_factory=dict)  # pg name -> last completed seq (pg_status)
    missing_fields: list[str] = field(default_factory=list)
    pg_config_source: str | None = None


def rank_of(path: Path) -> int:
    """The rank is the number a dump's file name ends with (torch writes <prefix><rank>)."""
    name = path.name
    for suffix in _SUFFIXES:
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    match = _RANK.search(name)
    if not match:
        raise InputError(f"{path}: cannot tell the rank: a dump's file name ends with its rank "
                         f"(torch writes <prefix><rank>, e.g. fr_rank_3)")
    return int(match.group(1))


def list_dump_files(paths: list[str]) -> list[Path]:
    """Expand folders into the files they hold (not recursive; hidden files skipped)."""
    files: list[Path] = []
    for text in paths:
        p = Path(text)
        if p.is_dir():
            found = sorted(f for f in p.iterdir() if f.is_file() and not f.name.startswith("."))
            if not found:
                raise InputError(f"{p}: folder holds no dump files")
            files.extend(found)
        elif p.is_file():
            files.append(p)
        else:
            raise InputError(f"{p}: no such file or folder")
    return files


def _load(path: Path) -> tuple[dict[str, Any], str]:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror}") from None
    head = data.lstrip()[:1]
    if head in (b"{", b"["):
        try:
            doc = json.loads(data)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise InputError(f"{path}: not valid JSON ({exc})") from None
        fmt = "json"
    elif data[:1] == b"\x80":
        try:
            doc = safe_unpickle(data)
        except Exception as exc:  # any damage in a pickle surfaces as one of many exception types
            raise InputError(f"{path}: not a readable Flight Recorder pickle ({type(exc).__name__}: {exc})") from None
        fmt = "pickle"
    else:
        raise InputError(f"{path}: neither a Flight Recorder pickle nor JSON (first byte {data[:1]!r})")
    if not isinstance(doc, dict) or "entries" not in doc:
        keys = sorted(doc)[:8] if isinstance(doc, dict) else type(doc).__name__
        raise InputError(f"{path}: no 'entries' key: not a Flight Recorder dump (found {keys})")
    if not isinstance(doc["entries"], list):
        raise InputError(f"{path}: 'entries' is {type(doc['entries']).__name__}, expected a list")
    return doc, fmt


def _call_site(frames: Any) -> str | None:
    """The innermost frame outside torch: the line of the user's code that issued the collective."""
    if not isinstance(frames, list):
        return None
    for fr in frames:
        if not isinstance(fr, dict):
            continue
        fname = str(fr.get("filename", ""))
        if f"{os.sep}torch{os.sep}" in fname or "typing_extensions" in fname or not fname:
            continue
        return f"{os.path.basename(fname)}:{fr.get('line', '?')} ({fr.get('name', '?')})"
    return None


def _int_or_none(value: Any) -> int | None:
    try:
        return None if value is None else int(value)
    except (TypeError, ValueError):
        return None


def _entry(raw: Any, where: str, missing: set[str]) -> Entry:
    if not isinstance(raw, dict):
        raise InputError(f"{where}: entry is {type(raw).__name__}, expected a mapping")
    for key in REQUIRED:
        if key not in raw:
            raise InputError(f"{where}: entry lacks '{key}' (has {', '.join(sorted(map(str, raw))[:12])})")
    for key in OPTIONAL:
        if key not in raw:
            missing.add(key)
    pg = raw["process_group"]
    if isinstance(pg, (list, tuple)) and len(pg) >= 1:
        pg_name, pg_desc = str(pg[0]), str(pg[1]) if len(pg) > 1 else "undefined"
    else:
        raise InputError(f"{where}: process_group is {pg!r}, expected (name, desc)")
    name = str(raw["profiling_name"])
    backend, _, op = name.partition(":")
    if not op:
        backend, op = "", name
    op = op.split(" ")[0]
    p2p = bool(raw.get("is_p2p", op in ("send", "recv")))
    seq = raw.get("collective_seq_id", raw.get("seq_id"))
    if "collective_seq_id" not in raw and "seq_id" in raw:
        missing.discard("collective_seq_id")
        missing.add("collective_seq_id (read seq_id)")
    seq_i = _int_or_none(seq)
    if not p2p and (seq_i is None or seq_i < 0):
        raise InputError(f"{where}: collective '{name}' has sequence id {seq!r}; expected an integer >= 0 "
                         "(collective_seq_id / seq_id)")
    for key in ("record_id", "time_created_ns"):
        if raw.get(key) is not None and _int_or_none(raw[key]) is None:
            missing.add(f"{key} (unreadable value {raw[key]!r})")
    return Entry(
        pg=pg_name, pg_desc=pg_desc, seq=None if p2p else seq_i, op=op, backend=backend,
        input_sizes=raw.get("input_sizes"), output_sizes=raw.get("output_sizes"),
        input_dtypes=raw.get("input_dtypes"), output_dtypes=raw.get("output_dtypes"),
        state=raw.get("state"), record_id=_int_or_none(raw.get("record_id")),
        time_created_ns=_int_or_none(raw.get("time_created_ns")), call_site=_call_site(raw.get("frames")),
        p2p=p2p,
    )


def _ranks(value: Any) -> list[int] | None:
    if isinstance(value, str):
        try:
            value = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            return None
    if isinstance(value, (list, tuple)) and all(isinstance(r, int) for r in value):
        return sorted(value)
    return None


def read_dump(path: Path) -> RankDump:
    """One rank's dump; InputError (exit 2) for anything that cannot be a dump."""
    doc, fmt = _load(path)
    missing: set[str] = set()
    entries = [_entry(raw, f"{path}: entries[{i}]", missing) for i, raw in enumerate(doc["entries"])]
    top_missing = [k for k in TOP_OPTIONAL if k not in doc]
    groups: dict[str, list[int]] = {}
    descs: dict[str, str] = {}
    config = doc.get("pg_config")
    if isinstance(config, dict):
        for name, info in config.items():
            if not isinstance(info, dict):
                continue
            ranks = _ranks(info.get("ranks"))
            if ranks and str(name):
                groups[str(name)] = ranks
                descs[str(name)] = str(info.get("desc", ""))
    last_completed: dict[str, int] = {}
    status = doc.get("pg_status")
    if isinstance(status, dict):
        ids = {}
        for raw in doc["entries"]:
            if isinstance(raw, dict) and "pg_id" in raw:
                ids[str(raw["pg_id"])] = str(raw["process_group"][0])
        for pg_id, st in status.items():
            value = _int_or_none(st.get("last_completed_collective")) if isinstance(st, dict) else None
            if value is not None and str(pg_id) in ids:
                last_completed[ids[str(pg_id)]] = value
    version = doc.get("version")
    return RankDump(
        rank=rank_of(path), path=str(path), fmt=fmt, version=None if version is None else str(version),
        entries=entries, groups=groups, group_desc=descs, last_completed=last_completed,
        missing_fields=sorted(missing) + [f"top-level {k}" for k in top_missing],
        pg_config_source=doc.get("pg_config_source"),
    )
