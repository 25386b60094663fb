"""Read Flight Recorder dumps (torch's pickle or JSON, NCCL / gloo / HCCL) into one record per rank;
fields a torch version did not write are named, never guessed."""

from __future__ import annotations

import io
import os
import pickle
import re
import signal
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ditpar import files, formats, limits
from ditpar.errors import InputError

# Fields every entry needs to be placed at all (older dumps spell the sequence id `seq_id`).
REQUIRED = ("process_group", "profiling_name")
# Fields the comparison uses when present; their absence is reported by name.
OPTIONAL = ("collective_seq_id", "p2p_seq_id", "is_p2p", "input_sizes", "output_sizes", "input_dtypes",
            "output_dtypes", "state", "record_id", "time_created_ns", "frames")
TOP_OPTIONAL = ("version", "pg_config", "pg_status")
_RANK = re.compile(r"(\d+)$")
_SUFFIXES = (".json", ".pkl", ".pickle")
MAX_DUMP_BYTES = 1 << 30      # a dump of 20,000 entries with stacks is tens of MB
MAX_INT64 = 2**63 - 1         # torch writes ids, sizes and times as int64
_UNSCANNED_PICKLE_BYTES = 20_000   # a smaller pickle cannot nest a tuple deep enough to overflow the C stack
# (hashing a tuple 100,000 deep passed on an 8 MB stack, 200,000 crashed)
_RANK_LIST = re.compile(r"\s*[\[(][-\d,\s]*[\])]\s*")   # how pg_config writes members: '[0, 1]'
_PIPE_FD = re.compile(r"^/(dev/fd|proc/(self|\d+)/fd)/\d+$|^/dev/stdin$")

# control characters (C0, DEL, C1), line separators and bidirectional overrides, written as repr writes them
_ESCAPES = {c: f"\\x{c:02x}" for c in (*range(0x20), *range(0x7F, 0xA0))}
_ESCAPES.update({0x09: "\\t", 0x0A: "\\n", 0x0D: "\\r"})
_ESCAPES.update({c: f"\\u{c:04x}" for c in (0x061C, 0x200E, 0x200F, 0x2028, 0x2029, *range(0x202A, 0x202F),
                                              *range(0x2066, 0x206A))})


def printable(text: str) -> str:
    """text with every character that moves the cursor, colours or reorders a terminal line escaped
    (\\n, \\x1b, \\u202e): a name read from a dump can never forge a line of the report."""
    return text.translate(_ESCAPES)


def shown(value: Any, limit: int = 60) -> str:
    """A value from a dump in a one-line message: escaped, cut short, containers by type (never expanded)."""
    if isinstance(value, bool) or value is None or isinstance(value, float):
        return repr(value)
    if isinstance(value, int):
        return repr(value) if value.bit_length() <= 64 else f"an integer of {value.bit_length()} bits"
    if isinstance(value, (str, bytes)):
        text = repr(value[:limit]) + ("..." if len(value) > limit else "")
        return printable(text)
    return f"a {type(value).__name__}"


class _SafeUnpickler(pickle.Unpickler):
    """Plain containers and scalars only: a dump never needs a class, so none is ever loaded."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refusing to load {module}.{name} (a dump holds plain data only)")


def safe_unpickle(data: bytes) -> Any:
    """Plain data from a pickle: no class is loaded, no code runs (callers bound the result's size)."""
    return _SafeUnpickler(io.BytesIO(data)).load()


def deepest_tuple(data: bytes) -> int:
    """How deep the pickle's tuples nest, read from its opcodes without building anything: hashing a
    tuple nested 200,000 deep (a dict key) overflows the C stack inside the unpickler."""
    import pickletools

    stack: list[int] = []          # per stack item: tuple depth (0: not a tuple)
    marks: list[int] = []
    memo: dict[Any, int] = {}
    deepest = 0
    for op, arg, _pos in pickletools.genops(data):
        name = op.name
        if name == "MARK":
            marks.append(len(stack))
            continue
        if name in ("PUT", "BINPUT", "LONG_BINPUT", "MEMOIZE"):
            memo[len(memo) if name == "MEMOIZE" else arg] = stack[-1] if stack else 0
            continue
        if name in ("GET", "BINGET", "LONG_BINGET"):
            stack.append(memo.get(arg, 0))
            continue
        if name == "DUP":
            stack.append(stack[-1] if stack else 0)
            continue
        before = op.stack_before
        if pickletools.markobject in before:
            base = marks.pop() if marks else 0
            items = stack[base:]
            del stack[base:]
            del stack[max(0, len(stack) - before.index(pickletools.markobject)):]
        else:
            items = stack[len(stack) - len(before):] if before else []
            del stack[len(stack) - len(items):]
        if name in ("TUPLE", "TUPLE1", "TUPLE2", "TUPLE3", "EMPTY_TUPLE"):
            depth = 1 + max(items, default=0)
            deepest = max(deepest, depth)
            stack.append(depth)
        else:
            stack.extend(0 for _ in op.stack_after)
    return deepest


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
    pg_id: int | None = None


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
    _by_group: dict[str, list[Entry]] | None = field(default=None, repr=False, compare=False)

    def in_group(self, name: str) -> list[Entry]:
        """This rank's entries in group `name`, indexed once (a dump naming 20,000 groups stays linear)."""
        if self._by_group is None:
            self._by_group = {}
            for e in self.entries:
                self._by_group.setdefault(e.pg, []).append(e)
        return self._by_group.get(name, [])


def rank_of(path: Path) -> int:
    """The rank is the number a dump's file name ends with (torch writes <prefix><rank>)."""
    where = printable(str(path))
    if _PIPE_FD.match(os.path.abspath(str(path))):
        raise InputError(f"{where}: a pipe has no file name to tell the rank by; save each rank's dump as "
                         f"<prefix><rank> (e.g. fr_rank_3) and give those files or their folder")
    name = path.name
    for suffix in _SUFFIXES:
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    match = _RANK.search(name)
    if not match:
        raise InputError(f"{where}: cannot tell the rank: a dump's file name ends with its rank "
                         f"(torch writes <prefix><rank>, e.g. fr_rank_3)")
    return limits.integer(match.group(1), f"{where}: rank in the file name", 0, limits.MAX_RANK_ID)


def _is_trigger_pipe(path: Path) -> bool:
    """torch's on-demand dump trigger (TORCH_*_DEBUG_INFO_PIPE_FILE=DIR/pipe_ makes DIR/pipe_<rank>.pipe)."""
    return path.name.endswith(".pipe") and stat.S_ISFIFO(os.lstat(path).st_mode)


def list_dump_files(paths: list[str]) -> list[Path]:
    """Expand folders into the files they hold (not recursive; hidden files, subfolders and torch's trigger
    pipes skipped); a FIFO, device, dangling link or link loop among them is named as what it is."""
    files_: list[Path] = []
    for text in paths:
        p = Path(text)
        why = files.input_problem(text, "any", streams=True)
        if why:
            raise InputError(printable(why))
        if p.is_dir():
            found = []
            for f in sorted(p.iterdir()):
                if f.name.startswith(".") or f.is_dir() or _is_trigger_pipe(f):
                    continue
                why = files.input_problem(f, "file")
                if why:
                    raise InputError(printable(f"{why} (in the dump folder {p}; move it out)"))
                found.append(f)
                if len(found) > limits.MAX_DEVICES:
                    raise InputError(f"{printable(str(p))}: holds more than {limits.MAX_DEVICES} files; a job has at "
                                     f"most {limits.MAX_DEVICES} ranks, one dump each")
            if not found:
                raise InputError(f"{printable(str(p))}: folder holds no dump files")
            files_.extend(found)
        else:
            files_.append(p)
    seen: dict[str, Path] = {}
    for f in files_:
        real = os.path.realpath(f)
        if real in seen:
            also = f" (also as {printable(str(seen[real]))})" if str(seen[real]) != str(f) else ""
            raise InputError(f"{printable(str(f))}: given twice{also}; name each rank's dump once")
        seen[real] = f
    return files_


def _read(path: Path) -> bytes:
    """The dump's bytes: a file or a FIFO read once (files.read_input); a device or a file no dump
    could be is refused before it is read."""
    where = printable(str(path))
    try:
        st = os.stat(path)
    except OSError as exc:
        raise InputError(printable(files.os_error_text(exc, str(path)))) from None
    if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
        raise InputError(f"{where}: is a device, not a dump; give the files torch wrote")
    if stat.S_ISREG(st.st_mode) and st.st_size > MAX_DUMP_BYTES:
        raise InputError(f"{where}: {st.st_size:,} bytes is too large for a Flight Recorder dump (at most "
                         f"{MAX_DUMP_BYTES:,} read; 20,000 entries with stacks take tens of MB)")
    return files.read_input(path)


def _unpickle(data: bytes, where: str) -> Any:
    """Plain data from a dump's pickle, bounded by formats.check_depth. The C unpickler hashes dict keys
    without a depth limit (a tuple key nested 200,000 deep overflows the C stack: SIGSEGV), so a pickle
    large enough to hold one is first loaded in a forked trial process (without fork: its opcodes scanned)."""
    if len(data) > _UNSCANNED_PICKLE_BYTES:
        _trial_load(data, where)
    try:
        doc = safe_unpickle(data)
    except Exception as exc:  # any damage in a pickle surfaces as one of many exception types
        raise InputError(f"{where}: not a readable Flight Recorder pickle "
                         f"({type(exc).__name__}: {printable(str(exc))[:200]})") from None
    formats.check_depth(doc, where)
    return doc


def _trial_load(data: bytes, where: str) -> None:
    """Refuse a pickle whose loading would crash this process: load it in a forked child first (a crash
    there costs nothing; errors are left to the real load), or scan its tuples where fork is missing."""
    if not hasattr(os, "fork"):
        try:
            depth = deepest_tuple(data)
        except Exception as exc:  # a damaged opcode stream: the real load fails on it too
            raise InputError(f"{where}: not a readable Flight Recorder pickle "
                             f"({type(exc).__name__}: {printable(str(exc))[:200]})") from None
        if depth > formats.MAX_DEPTH:
            raise InputError(f"{where}: nests more than {formats.MAX_DEPTH} levels (tuples {depth:,} deep); "
                             "not a document the tools read")
        return
    pid = os.fork()
    if pid == 0:  # the trial child: quiet (no fault report on stderr), load, leave without exit handlers
        try:
            import faulthandler

            faulthandler.disable()
            os.dup2(os.open(os.devnull, os.O_WRONLY), 2)
            safe_unpickle(data)
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig in (signal.SIGSEGV, getattr(signal, "SIGBUS", signal.SIGSEGV)):
            raise InputError(f"{where}: nests too deeply to unpickle (a trial load crashed: {signal.Signals(sig).name},"
                             f" as a tuple key nested hundreds of thousands deep makes it); not a document the "
                             f"tools read")
        raise InputError(f"{where}: cannot be unpickled: a trial load was ended by {signal.Signals(sig).name} "
                         "(out of memory?)")


def _load(path: Path) -> tuple[dict[str, Any], str]:
    where = printable(str(path))
    data = _read(path)
    if not data.strip():
        raise InputError(f"{where}: is empty; a Flight Recorder dump is a pickle or JSON (a rank that was killed "
                         "while dumping leaves an empty file)")
    if data[:1] == b"\x80":
        doc = _unpickle(data, where)
        fmt = "pickle"
    else:
        text = data[3:] if data.startswith(b"\xef\xbb\xbf") else data
        utf16 = data.startswith((b"\xff\xfe", b"\xfe\xff")) or b"\0" in data[:4]
        if not (utf16 or text.lstrip()[:1] in (b"{", b"[")):
            raise InputError(f"{where}: neither a Flight Recorder pickle nor JSON (first byte {data[:1]!r})")
        doc = formats.json_text(data, where)
        fmt = "json"
    if not isinstance(doc, dict) or "entries" not in doc:
        keys = ", ".join(shown(k, 30) for k in list(doc)[:8]) if isinstance(doc, dict) else shown(doc)
        raise InputError(f"{where}: no 'entries' key: not a Flight Recorder dump (found {keys})")
    if not isinstance(doc["entries"], list):
        raise InputError(f"{where}: 'entries' is {shown(doc['entries'])}, expected a list")
    return doc, fmt


def _bad(where: str, key: str, value: Any, want: str) -> InputError:
    return InputError(f"{where}: '{key}' is {shown(value)}; expected {want}")


def _int_cell(raw: dict, key: str, where: str, lo: int = 0, hi: int = MAX_INT64) -> int | None:
    """An integer cell of an entry (None when absent or null): an int in lo..hi, never a bool, text or float."""
    value = raw.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise _bad(where, key, value, f"an integer {lo}..{hi}")
    return value


def _text_cell(raw: dict, key: str, where: str) -> str | None:
    value = raw.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise _bad(where, key, value, "text")
    return printable(value)


def _sizes(raw: dict, key: str, where: str) -> list[list[int]] | None:
    """input_sizes / output_sizes: one shape (a list of integers >= 0) per tensor."""
    value = raw.get(key)
    if value is None:
        return None
    want = "a list of shapes, each a list of integers >= 0 (e.g. [[4, 8]])"
    if not isinstance(value, (list, tuple)):
        raise _bad(where, key, value, want)
    for i, shape in enumerate(value):
        if not isinstance(shape, (list, tuple)):
            raise _bad(where, f"{key}[{i}]", shape, want)
        for n in shape:
            if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= MAX_INT64:
                raise InputError(f"{where}: '{key}[{i}]' holds {shown(n)}; expected {want}")
    return [list(shape) for shape in value]


def _dtypes(raw: dict, key: str, where: str) -> list[str] | None:
    value = raw.get(key)
    if value is None:
        return None
    if isinstance(value, (list, tuple)) and all(isinstance(t, str) for t in value):
        return [printable(t) for t in value]
    raise _bad(where, key, value, "a list of dtype names (e.g. ['Float'])")


def _call_site(raw: dict, where: str) -> str | None:
    """The innermost frame outside torch: the line of the user's code that issued the collective (frames
    are checked up to it; the ones beyond are never read)."""
    frames = raw.get("frames")
    if frames is None:
        return None
    if not isinstance(frames, (list, tuple)):
        raise _bad(where, "frames", frames, "a list of frames ({name, filename, line})")
    for i, fr in enumerate(frames):
        at = f"{where}: frames[{i}]"
        if not isinstance(fr, dict):
            raise InputError(f"{at} is {shown(fr)}; expected a mapping with name, filename and line")
        fname = _text_cell(fr, "filename", at) or ""
        if f"{os.sep}torch{os.sep}" in fname or "typing_extensions" in fname or not fname:
            continue
        line, name = _int_cell(fr, "line", at), _text_cell(fr, "name", at)
        return f"{os.path.basename(fname)}:{'?' if line is None else line} ({name or '?'})"
    return None


def _entry(raw: Any, where: str, missing: set[str]) -> Entry:
    if not isinstance(raw, dict):
        raise InputError(f"{where}: entry is {shown(raw)}, expected a mapping")
    for key in REQUIRED:
        if key not in raw:
            has = ", ".join(shown(k, 30) if not isinstance(k, str) else printable(k[:30]) for k in list(raw)[:12])
            raise InputError(f"{where}: entry lacks '{key}' (has {has})")
    for key in OPTIONAL:
        if key not in raw:
            missing.add(key)
    pg = raw["process_group"]
    if not (isinstance(pg, (list, tuple)) and 1 <= len(pg) <= 2 and all(isinstance(x, str) for x in pg)):
        raise _bad(where, "process_group", pg, "(name, desc), two texts")
    pg_name, pg_desc = printable(pg[0]), printable(pg[1]) if len(pg) > 1 else "undefined"
    name = raw["profiling_name"]
    if not isinstance(name, str):
        raise _bad(where, "profiling_name", name, "text such as 'nccl:all_reduce'")
    name = printable(name)
    backend, _, op = name.partition(":")
    if not op:
        backend, op = "", name
    op = op.split(" ")[0]
    p2p = raw.get("is_p2p", op in ("send", "recv"))
    if not isinstance(p2p, bool):
        raise _bad(where, "is_p2p", p2p, "true or false")
    key = "collective_seq_id" if "collective_seq_id" in raw or "seq_id" not in raw else "seq_id"
    if key == "seq_id":
        missing.discard("collective_seq_id")
        missing.add("collective_seq_id (read seq_id)")
    seq = raw.get(key)
    if (seq is None and not p2p) or (seq is not None and (isinstance(seq, bool) or not isinstance(seq, int)
                                                         or not 0 <= seq <= MAX_INT64)):
        raise InputError(f"{where}: '{key}' of collective '{op}' is {shown(seq)}; expected a sequence id, "
                         f"an integer 0..{MAX_INT64}")
    _int_cell(raw, "p2p_seq_id", where)
    return Entry(
        pg=pg_name, pg_desc=pg_desc, seq=None if p2p else seq, op=op, backend=backend,
        input_sizes=_sizes(raw, "input_sizes", where), output_sizes=_sizes(raw, "output_sizes", where),
        input_dtypes=_dtypes(raw, "input_dtypes", where), output_dtypes=_dtypes(raw, "output_dtypes", where),
        state=_text_cell(raw, "state", where), record_id=_int_cell(raw, "record_id", where),
        time_created_ns=_int_cell(raw, "time_created_ns", where), call_site=_call_site(raw, where),
        p2p=p2p, pg_id=_int_cell(raw, "pg_id", where),
    )


def _ranks(value: Any, where: str) -> list[int]:
    """A group's members as pg_config writes them ('[0, 1]' or a list): distinct rank ids, sorted."""
    if isinstance(value, str):
        if not _RANK_LIST.fullmatch(value):
            raise InputError(f"{where}: is {shown(value)}; expected a list of ranks such as '[0, 1]'")
        value = formats.python_literal(value, where)
    if not isinstance(value, (list, tuple)):
        raise InputError(f"{where}: is {shown(value)}; expected a list of ranks such as '[0, 1]'")
    for r in value:
        if isinstance(r, bool) or not isinstance(r, int) or not 0 <= r <= limits.MAX_RANK_ID:
            raise InputError(f"{where}: rank {shown(r)} is out of range; expected integers 0..{limits.MAX_RANK_ID}")
    if len(set(value)) != len(value):
        raise InputError(f"{where}: names rank {sorted(r for r in set(value) if value.count(r) > 1)[0]} twice")
    return sorted(value)


def _groups(config: Any, where: str) -> tuple[dict[str, list[int]], dict[str, str]]:
    """pg_config -> ({group name: members}, {group name: desc}); groups without a name or members skipped."""
    groups: dict[str, list[int]] = {}
    descs: dict[str, str] = {}
    if config is None:
        return groups, descs
    if not isinstance(config, dict):
        raise InputError(f"{where}: 'pg_config' is {shown(config)}; expected a mapping of group name to "
                         "{name, desc, ranks}")
    for name, info in config.items():
        at = f"{where}: pg_config[{shown(name, 30)}]"
        if not isinstance(name, str) or not isinstance(info, dict):
            raise InputError(f"{at} is {shown(info)}; expected a group name mapped to {{name, desc, ranks}}")
        ranks = _ranks(info["ranks"], f"{at}.ranks") if info.get("ranks") is not None else []
        desc = info.get("desc", "")
        if not isinstance(desc, str):
            raise InputError(f"{at}.desc is {shown(desc)}; expected text")
        if ranks and name:
            groups[printable(name)] = ranks
            descs[printable(name)] = printable(desc)
    return groups, descs


def _last_completed(status: Any, entries: list[Entry], where: str) -> dict[str, int]:
    """pg_status -> {group name: last completed sequence id} (-1: none yet), matched to names by pg_id."""
    if status is None:
        return {}
    if not isinstance(status, dict):
        raise InputError(f"{where}: 'pg_status' is {shown(status)}; expected a mapping of group id to counters")
    ids = {str(e.pg_id): e.pg for e in entries if e.pg_id is not None}
    last: dict[str, int] = {}
    for pg_id, st in status.items():
        at = f"{where}: pg_status[{shown(pg_id, 30)}]"
        if not isinstance(st, dict):
            raise InputError(f"{at} is {shown(st)}; expected a mapping with last_completed_collective")
        if st.get("last_completed_collective") is None:
            continue
        value = limits.integer(st["last_completed_collective"], f"{at}.last_completed_collective", -1, MAX_INT64)
        if str(pg_id) in ids:
            last[ids[str(pg_id)]] = value
    return last


def read_dump(path: Path) -> RankDump:
    """One rank's dump; InputError (exit 2) for anything that cannot be a dump."""
    rank = rank_of(path)
    doc, fmt = _load(path)
    where = printable(str(path))
    missing: set[str] = set()
    entries = [_entry(raw, f"{where}: entries[{i}]", missing) for i, raw in enumerate(doc["entries"])]
    top_missing = [k for k in TOP_OPTIONAL if k not in doc]
    groups, descs = _groups(doc.get("pg_config"), where)
    version, source = doc.get("version"), doc.get("pg_config_source")
    if version is not None and (isinstance(version, bool) or not isinstance(version, (str, int, float))):
        raise InputError(f"{where}: 'version' is {shown(version)}; expected a version such as '2.10'")
    if source is not None and not isinstance(source, str):
        raise InputError(f"{where}: 'pg_config_source' is {shown(source)}; expected text")
    return RankDump(
        rank=rank, path=where, fmt=fmt, version=None if version is None else printable(str(version)),
        entries=entries, groups=groups, group_desc=descs,
        last_completed=_last_completed(doc.get("pg_status"), entries, where),
        missing_fields=sorted(missing) + [f"top-level {k}" for k in top_missing],
        pg_config_source=None if source is None else printable(source),
    )
