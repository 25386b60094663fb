"""Reader of PyTorch profiler (Kineto) Chrome traces, ``.json`` or ``.json.gz``: one file per rank.

Taken from each trace: GPU activities (``cat`` kernel, gpu_memcpy, gpu_memset) with device =
``pid``, stream = ``args.stream`` (else ``tid``); NCCL kernel args (Collective name, In/Out msg
nelems, dtype, Process Group Name/Desc/Ranks); ``ProfilerStep#N`` host annotations and the
``cuda_runtime``/``cuda_driver`` launches (their ``correlation`` ties each kernel to the step that
launched it); ``distributedInfo`` (rank, pg_config); ``baseTimeNanoseconds`` (added to every ts).
"""

from __future__ import annotations

import gc
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ditpar import limits
from ditpar.core import classify
from ditpar.core.events import make_events
from ditpar.core.profile import BYTES_MESSAGE, STEP_COLUMNS, GroupInfo
from ditpar.errors import InputError
from ditpar.readers.common import (
    as_int,
    byte_counts,
    check_times,
    duplicate_mask,
    factorize,
    hashable,
    require_durations,
    text_of,
    warn_duplicates,
)
from ditpar.readers.jsonstream import NotPlain, iter_trace, iter_trace_blocks
from ditpar.timeparse import texts_to_ns, us_to_ns

GPU_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
LAUNCH_CATS = frozenset({"cuda_runtime", "cuda_driver"})
_STEP_NAME = re.compile(r"^ProfilerStep#(?P<step>\d{1,12})$")

#: PyTorch dtype names in Kineto args -> bytes per element
DTYPE_BYTES = {
    "Float": 4, "Double": 8, "Half": 2, "BFloat16": 2, "ComplexHalf": 4, "ComplexFloat": 8,
    "ComplexDouble": 16, "Byte": 1, "Char": 1, "Short": 2, "Int": 4, "Long": 8, "Bool": 1,
    "UInt16": 2, "UInt32": 4, "UInt64": 8, "Float8_e4m3fn": 1, "Float8_e5m2": 1,
    "Float8_e4m3fnuz": 1, "Float8_e5m2fnuz": 1, "QInt8": 1, "QUInt8": 1, "QInt32": 4,
}


@dataclass
class KinetoRank:
    """Everything read from one trace file."""

    rank: int | None
    rank_from: str
    events: pd.DataFrame
    steps: pd.DataFrame
    groups: dict[str, GroupInfo] = field(default_factory=dict)
    unclassified: dict[str, int] = field(default_factory=dict)
    sources: list[Path] = field(default_factory=list)
    bytes_from: str = BYTES_MESSAGE
    world_size: int | None = None   # distributedInfo.world_size: ranks of one job agree on it


def read_trace(path: Path) -> KinetoRank:
    """Read one Kineto trace.

    Typed msgspec blocks first (several times faster); should a value have an unexpected type, or
    anything fail, the general reader (json, one event at a time) reads the file again and its
    result or its error stands: both give the same table wherever the first one succeeds.
    """
    try:
        return _read(path, _collect_blocks)
    except (ImportError, NotPlain, InputError):
        return _read(path, _collect)


def _read(path: Path, collect: Callable[[Path], tuple]) -> KinetoRank:
    meta, cols, pg_desc, launches, notes, steps = collect(path)
    base = _base_ns(path, meta.get("baseTimeNanoseconds"))
    rank, rank_from = _rank(path, meta.get("distributedInfo"))
    _annotate(path, cols, launches, notes, pg_desc)
    events, unplaced, kept = _events(path, cols, base)
    corr = cols["corr"] if kept is None else [c for c, k in zip(cols["corr"], kept.tolist(), strict=True) if k]
    step_table, step_of_event = _steps(path, events, corr, launches, steps, base)
    events["step"] = step_of_event
    groups = _groups(meta.get("distributedInfo"), pg_desc)
    return KinetoRank(rank, rank_from, make_events(events), step_table, groups, unplaced, [path],
                      world_size=_world_size(path, meta.get("distributedInfo")))


class _Collected:
    """What a trace's events give: GPU activity columns, launches, annotations, steps, top-level members."""

    def __init__(self) -> None:
        self.meta: dict[str, object] = {}
        self.cols: dict[str, list] = {k: [] for k in ("cat", "name", "pid", "stream", "ts", "dur", "corr",
                                                       "coll", "pg", "in_n", "out_n", "dtype")}
        self.pg_desc: dict[str, tuple[str, str]] = {}
        #: launches as columns: correlation, ts, pid, tid, External id (raw JSON values)
        self.launches: dict[str, list] = {k: [] for k in LAUNCH_COLUMNS}
        self.notes: list[_Note] = []
        self.steps: list[tuple[int, object, object]] = []

    def on_key(self, key: str, value: object) -> None:
        if key in ("distributedInfo", "baseTimeNanoseconds", "schemaVersion"):
            self.meta[key] = value

    def result(self) -> tuple:
        return self.meta, self.cols, self.pg_desc, self.launches, self.notes, self.steps

    def add(self, path: Path, i: int, ev: dict) -> None:
        """Take event number ``i`` (a dict as json decodes it, floats as text)."""
        if ev.get("ph") != "X":
            return
        cat = ev.get("cat")
        if not isinstance(cat, str):
            cat = None
        cols = self.cols
        if cat in GPU_CATS:
            args = ev.get("args")
            name = ev.get("name", "")
            if not isinstance(name, str):
                raise InputError(f"{path}: event {i}: 'name' of a {cat} event: expected a string, got "
                                 f"{type(name).__name__} {_clip(name)}")
            if args is None:
                args = {}
            elif not isinstance(args, dict):
                raise InputError(f"{path}: event {i} ({cat} {_clip(name)}): 'args' is a {type(args).__name__}; "
                                 f"expected an object of named members (stream, correlation, ...)")
            for key in ("ts", "dur"):
                if key not in ev:
                    raise InputError(f"{path}: event {i} ({cat} {_clip(name)}): no '{key}'; a GPU activity without "
                                     f"its {'start' if key == 'ts' else 'duration'} cannot be timed")
            coll = args.get("Collective name")
            if coll is not None and not isinstance(coll, str):
                raise InputError(f"{path}: event {i}: args 'Collective name': expected a string, got "
                                 f"{type(coll).__name__} {_clip(coll)}")
            cols["cat"].append(cat)
            cols["name"].append(name)
            cols["pid"].append(as_int(ev.get("pid")))
            cols["stream"].append(hashable(args.get("stream", ev.get("tid"))))
            cols["ts"].append(ev.get("ts"))
            cols["dur"].append(ev["dur"])
            cols["corr"].append(as_int(args.get("correlation")))
            cols["coll"].append(coll if coll is not None else "")
            pg = args.get("Process Group Name")
            cols["pg"].append("" if pg is None else str(pg))
            cols["in_n"].append(args.get("In msg nelems"))
            cols["out_n"].append(args.get("Out msg nelems"))
            cols["dtype"].append(str(args.get("dtype")))
            if pg is not None and str(pg) not in self.pg_desc:
                self.pg_desc[str(pg)] = (str(args.get("Process Group Description", "")),
                                         str(args.get("Process Group Ranks", "")))
        elif cat in LAUNCH_CATS:
            args = ev.get("args")
            if type(args) is dict:
                corr = args.get("correlation")
                if type(corr) is int:  # an int, not a bool (as_int, inlined: one per launch)
                    for key, value in zip(LAUNCH_COLUMNS, (corr, ev.get("ts"), ev.get("pid"), ev.get("tid"),
                                                           args.get("External id")), strict=True):
                        self.launches[key].append(value)
        else:
            name = ev.get("name")
            if not isinstance(name, str):
                return
            if name.startswith("ProfilerStep#"):
                m = _STEP_NAME.match(name)
                if m and (cat is None or cat in ("user_annotation", "cpu_op")):
                    if "dur" not in ev:
                        raise InputError(f"{path}: event {i} ({name}): no 'dur'; a step without its span cannot "
                                         f"hold kernels")
                    self.steps.append((int(m.group("step")), ev.get("ts"), ev["dur"]))
            elif (name == "record_param_comms" or name[:5] == "nccl:") and cat in ("cpu_op", "user_annotation"):
                note = _comm_note(path, i, name, ev)
                if note is not None:
                    self.notes.append(note)

    def add_block(self, path: Path, i0: int, block: list) -> None:
        """Take events ``i0, i0 + 1, ...`` decoded as :func:`_event_type` structs: GPU activities and
        launches as whole columns; the few others (steps, annotations) one by one through :meth:`add`."""
        X, gpu_cats, launch_cats, host_cats, heads = "X", GPU_CATS, LAUNCH_CATS, _HOST_CATS, _OTHER_HEADS
        gpu, launch, other = [], [], []
        to_gpu, to_launch, to_other = gpu.append, launch.append, other.append
        for k, e in enumerate(block):  # one pass: most events are host ops and flows, skipped here
            cat = e.cat
            if cat in gpu_cats:
                if e.ph == X:
                    to_gpu(e)
            elif cat in launch_cats:
                if e.ph == X and e.args is not None and e.args is not UNSET and e.args.correlation is not None:
                    to_launch(e)
            elif cat in host_cats and e.name.startswith(heads) and e.ph == X:  # steps, annotations
                to_other(k)
        if gpu:
            if any(e.dur is UNSET or e.ts is UNSET for e in gpu):
                raise NotPlain  # the general reader names the event without a start or duration
            cols = self.cols
            args = [e.args if e.args is not None and e.args is not UNSET else _NO_ARGS for e in gpu]
            cols["cat"].extend([e.cat for e in gpu])
            cols["name"].extend([e.name for e in gpu])
            cols["pid"].extend([as_int(e.pid) for e in gpu])
            cols["stream"].extend([e.tid if a.stream is UNSET else a.stream for e, a in zip(gpu, args, strict=True)])
            cols["ts"].extend(_texts([e.ts for e in gpu]))
            cols["dur"].extend(_texts([e.dur for e in gpu]))
            cols["corr"].extend([a.correlation for a in args])
            cols["coll"].extend([a.collective if a.collective is not None else "" for a in args])
            pgs = [a.pg for a in args]
            cols["pg"].extend(["" if pg is None else str(pg) for pg in pgs])
            cols["in_n"].extend([a.in_n for a in args])
            cols["out_n"].extend([a.out_n for a in args])
            cols["dtype"].extend(["None" if a.dtype is UNSET else a.dtype for a in args])
            for a, pg in zip(args, pgs, strict=True):
                if pg is not None and str(pg) not in self.pg_desc:
                    self.pg_desc[str(pg)] = ("" if a.pg_desc is UNSET else a.pg_desc,
                                             "" if a.pg_ranks is UNSET else str(a.pg_ranks))
        if launch:
            put = self.launches
            put["corr"].extend([e.args.correlation for e in launch])
            put["ts"].extend(_texts([e.ts for e in launch]))
            put["pid"].extend([e.pid for e in launch])
            put["tid"].extend([e.tid for e in launch])
            put["ext"].extend([e.args.external for e in launch])
        for k in other:
            self.add(path, i0 + k, _as_dict(block[k]))


_OTHER_HEADS = ("ProfilerStep#", "nccl:", "record_param_comms")
#: the categories of the host events :meth:`_Collected.add` takes (steps, collective annotations)
_HOST_CATS = frozenset({None, "user_annotation", "cpu_op"})
LAUNCH_COLUMNS = ("corr", "ts", "pid", "tid", "ext")
#: msgspec.UNSET and an empty Args, once the fast path has imported them (never equal to a JSON value)
UNSET: object = object()
_NO_ARGS: object = None


def _texts(raws: list, missing: object = None) -> list:
    """Raw JSON values as their text: a number as json gives it with parse_float=str (ints are read the
    same by us_to_ns). Anything else (a string, null) fails the exact parser, and the whole trace is
    then read the general way (read_trace)."""
    return [missing if r is UNSET else str(r, "utf-8") for r in raws]


def _as_dict(e: object) -> dict:
    """An event struct as the dict the general reader sees (members that were missing left out)."""
    import msgspec

    ev = {"ph": e.ph, **{k: v for k, v in msgspec.structs.asdict(e).items() if v is not UNSET}}
    for key in ("ts", "dur"):
        if key in ev:
            ev[key] = _texts([ev[key]])[0]
    if isinstance(ev.get("args"), msgspec.Struct):
        from ditpar.readers.kineto.events import ARG_NAMES

        ev["args"] = {ARG_NAMES[k]: v for k, v in msgspec.structs.asdict(ev["args"]).items()
                      if v is not UNSET and v is not None}
    return ev


def _collect(path: Path) -> tuple:
    """The event columns, launches, annotations and steps of a trace, one event at a time (any JSON)."""
    got = _Collected()
    with _no_cycle_collection():
        for i, ev in enumerate(iter_trace(path, got.on_key)):
            got.add(path, i, ev)
    return got.result()


def _collect_blocks(path: Path) -> tuple:
    """:func:`_collect` with the events decoded in typed blocks by msgspec (NotPlain when one does not fit)."""
    global UNSET, _NO_ARGS
    from ditpar.readers.kineto import events as kineto_events

    UNSET, _NO_ARGS = kineto_events.UNSET, kineto_events.NO_ARGS
    event_type = kineto_events.AnyEvent
    got = _Collected()
    i = 0
    with _no_cycle_collection():
        for is_block, item in iter_trace_blocks(path, event_type, got.on_key):
            if is_block:
                got.add_block(path, i, item)
                i += len(item)
            else:
                got.add(path, i, item)
                i += 1
    return got.result()


@contextmanager
def _no_cycle_collection() -> Iterator[None]:
    """Pause the cyclic garbage collector: reading builds millions of small objects without cycles,
    which it would otherwise walk again and again (about 0.1 s of a 1M-event trace)."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


@dataclass
class _Note:
    """A host-side annotation that names a collective: ``nccl:<op>`` or record_param_comms."""

    collective: str
    pid: object
    tid: object
    ts: object
    dur: object
    external: int | None
    pg: str
    desc: str
    ranks: str
    in_n: object
    out_n: object
    dtype: str
    index: int


def _comm_note(path: Path, i: int, name: str, ev: dict) -> _Note | None:
    """The collective a CPU annotation names, or None when it names none."""
    args = ev.get("args")
    args = args if isinstance(args, dict) else {}
    if name.startswith("nccl:"):
        collective = name[len("nccl:"):]
    elif name == "record_param_comms":
        collective = args.get("Collective name")
        if collective is None:
            return None
        if not isinstance(collective, str):
            raise InputError(f"{path}: event {i}: record_param_comms args 'Collective name': expected a "
                             f"string, got {type(collective).__name__} {_clip(collective)}")
    else:
        return None
    pg = args.get("Process Group Name")
    return _Note(collective, hashable(ev.get("pid")), hashable(ev.get("tid")), ev.get("ts"), ev.get("dur", 0),
                 as_int(args.get("External id")), "" if pg is None else str(pg),
                 str(args.get("Process Group Description", "")), str(args.get("Process Group Ranks", "")),
                 args.get("In msg nelems"), args.get("Out msg nelems"), str(args.get("dtype")), i)


def _clip(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _annotate(path: Path, cols: dict[str, list], launches: list, notes: list[_Note],
              pg_desc: dict[str, tuple[str, str]]) -> None:
    """Give NCCL kernels without args the collective of the host annotation that launched them.

    The launch (cuda_runtime, same correlation) links to the annotation by its External id; where
    the ids do not link (e.g. sampled traces) the innermost annotation on the launching thread whose
    span holds the launch is taken. The kernel's own args, when present, always win.
    """
    if not notes:
        return
    nccl = {name: classify.is_nccl_kernel(name) for name in set(cols["name"])}  # distinct names only
    todo = [k for k, (name, coll) in enumerate(zip(cols["name"], cols["coll"], strict=True))
            if not coll and nccl[name]]
    if not todo:
        return
    by_ext = {n.external: n for n in notes if n.external is not None}
    launch_of = {c: (ts, pid, tid, ext) for c, ts, pid, tid, ext in zip(*(launches[k] for k in LAUNCH_COLUMNS),
                                                                        strict=True)}  # raw JSON values
    spans = _note_spans(path, notes)
    for k in todo:
        launch = launch_of.get(cols["corr"][k])
        if launch is None:
            continue
        ts, pid, tid, ext = launch
        ext = as_int(ext)
        note = by_ext.get(ext) if ext is not None else None
        if note is None:
            note = _enclosing(spans.get((hashable(pid), hashable(tid))), ts, path)
        if note is None:
            continue
        cols["coll"][k] = note.collective
        if not cols["pg"][k] and note.pg:
            cols["pg"][k] = note.pg
            pg_desc.setdefault(note.pg, (note.desc, note.ranks))
        if cols["in_n"][k] is None and cols["out_n"][k] is None:
            cols["in_n"][k], cols["out_n"][k], cols["dtype"][k] = note.in_n, note.out_n, note.dtype


def _note_spans(path: Path, notes: list[_Note]) -> dict[tuple, tuple[np.ndarray, np.ndarray, list[_Note]]]:
    """Per launching thread: annotation starts and ends (exact ns) and the annotations themselves."""
    out: dict[tuple, tuple[np.ndarray, np.ndarray, list[_Note]]] = {}
    by_thread: dict[tuple, list[_Note]] = {}
    for n in notes:
        by_thread.setdefault((n.pid, n.tid), []).append(n)
    for key, group in by_thread.items():
        start = us_to_ns([n.ts for n in group], where=f"{path}: collective annotation ts")
        dur = us_to_ns([n.dur for n in group], where=f"{path}: collective annotation dur")
        out[key] = (start, start + dur, group)
    return out


def _enclosing(spans: tuple[np.ndarray, np.ndarray, list[_Note]] | None, ts: object, path: Path) -> _Note | None:
    """The innermost annotation (latest start) whose [start, end] holds the launch stamp."""
    if spans is None:
        return None
    t = us_to_ns([ts], where=f"{path}: launch ts")[0]
    start, end, group = spans
    inside = np.flatnonzero((start <= t) & (t <= end))
    if inside.size == 0:
        return None
    return group[int(inside[np.argmax(start[inside])])]


def _base_ns(path: Path, base: object) -> int:
    if base is None:
        return 0
    if as_int(base) is None or not 0 <= base < 2**62:
        raise InputError(f"{path}: baseTimeNanoseconds: expected a non-negative integer, got {base!r}")
    return int(base)


def _rank(path: Path, dist: object) -> tuple[int | None, str]:
    if isinstance(dist, dict) and as_int(dist.get("rank")) is not None and dist["rank"] >= 0:
        return limits.integer(dist["rank"], f"{path}: distributedInfo.rank", 0, limits.MAX_RANK_ID), \
            "distributedInfo.rank"
    m = re.search(r"rank[_-]?(\d+)", path.name, re.I)
    if m:
        return limits.integer(m.group(1), f"{path}: rank in the file name", 0, limits.MAX_RANK_ID), \
            f"file name {path.name}"
    return None, "unknown"


def _world_size(path: Path, dist: object) -> int | None:
    """distributedInfo.world_size, when the trace gives one."""
    if not isinstance(dist, dict) or dist.get("world_size") is None:
        return None
    size = as_int(dist["world_size"])
    if size is None or not 1 <= size <= 2**31:
        raise InputError(f"{path}: distributedInfo.world_size: expected a positive integer, got "
                         f"{_clip(dist['world_size'])}")
    return size


def _events(path: Path, cols: dict[str, list], base: int) -> tuple[pd.DataFrame, dict, np.ndarray | None]:
    """The GPU activity table, the unclassified names, and the mask of events kept (None: all kept;
    events repeated verbatim are counted once, with the warning the Ascend reader gives)."""
    where = f"{path}: GPU activity"
    start = texts_to_ns(cols["ts"], where=f"{where} ts")
    dur = texts_to_ns(cols["dur"], where=f"{where} dur")
    check_times(start, dur, where)
    require_durations(dur, where)
    start = start + np.int64(base)
    dup = duplicate_mask(start, lambda rows: {"dur": dur[rows], **{
        k: np.array([hashable(cols[k][r]) for r in rows.tolist()] or [None], dtype=object)[:rows.size]
        for k in ("cat", "name", "pid", "stream", "corr")}})
    if dup is not None:
        i = int(np.flatnonzero(dup)[0])
        warn_duplicates(path, int(dup.sum()), f"{cols['cat'][i]} {_clip(cols['name'][i])} at ts {cols['ts'][i]} us")
        kept = ~dup
        cols = {k: [v for v, keep in zip(vals, kept.tolist(), strict=True) if keep] for k, vals in cols.items()}
        start, dur = start[kept], dur[kept]
    n = len(cols["cat"])
    codes, uniques = factorize(cols["name"])
    names = pd.Series(np.array([text_of(u) for u in uniques] or [""], dtype=object)[codes], dtype=object)
    cats = pd.Series(cols["cat"], dtype=object)
    decided = classify.classify_kineto(names, cats, pd.Series(cols["coll"], dtype=object),
                                       pd.Series(cols["pg"], dtype=object))
    device = pd.to_numeric(pd.Series(cols["pid"], dtype=object), errors="coerce").astype("Int64")
    codes, uniques = factorize(pd.Series(cols["stream"], dtype=object))
    stream = np.array([text_of(u) for u in uniques] or [""], dtype=object)[codes]
    nbytes = _message_bytes(cols, decided.comm)
    def obj(values: np.ndarray) -> pd.Series:  # plain object columns (no string-dtype inference)
        return pd.Series(values, dtype=object, copy=False)

    table = pd.DataFrame({
        "rank": np.zeros(n, dtype=np.int64),
        "device": device,
        "stream": obj(stream),
        "kind": obj(decided.kind),
        "core": obj(np.full(n, "gpu", dtype=object)),
        "name": obj(names.to_numpy(dtype=object)),
        "family": obj(decided.family),
        "group": obj(decided.group),
        "start_ns": start,
        "dur_ns": dur,
        "step": pd.Series(pd.NA, index=range(n), dtype="Int64"),
        "bytes": nbytes,
    }, copy=False)  # the columns are fresh: no consolidating copy
    return table, dict(decided.unclassified), (None if dup is None else ~dup)


def _message_bytes(cols: dict[str, list], is_comm: np.ndarray) -> pd.Series:
    """max(In, Out msg nelems) x dtype size: the message size S that nccl-tests uses."""
    n = len(cols["cat"])
    if n == 0:
        return pd.Series([], dtype="Int64")
    in_n = pd.to_numeric(pd.Series(cols["in_n"], dtype=object), errors="coerce")
    out_n = pd.to_numeric(pd.Series(cols["out_n"], dtype=object), errors="coerce")
    size = pd.Series(cols["dtype"], dtype=object).map(DTYPE_BYTES)
    nel = np.fmax(in_n.to_numpy(float), out_n.to_numpy(float))
    raw = nel * size.to_numpy(float)
    raw[~is_comm] = np.nan
    return byte_counts(raw)


def _steps(path: Path, events: pd.DataFrame, corr: list, launches: dict[str, list], steps: list,
           base: int) -> tuple[pd.DataFrame, pd.Series]:
    """Step of each activity = the ProfilerStep#N host span holding its launch; windows from them.

    Without ProfilerStep annotations the whole capture is one window with step NA.
    """
    n = len(events)
    no_step = pd.Series(pd.NA, index=range(n), dtype="Int64")
    if n == 0:
        return pd.DataFrame(columns=list(STEP_COLUMNS)), no_step
    end = events["start_ns"] + events["dur_ns"]
    spans = _step_spans(path, steps, base) if steps else None
    if spans is None or not launches["corr"]:
        whole = pd.DataFrame({"rank": [0], "step": pd.array([pd.NA], dtype="Int64"),
                              "start_ns": [int(events["start_ns"].min())], "end_ns": [int(end.max())]})
        return whole, no_step
    s_start, s_end, s_id = spans
    l_corr, first = np.unique(np.asarray(launches["corr"], dtype=np.int64), return_index=True)  # first launch
    l_ts = texts_to_ns([launches["ts"][i] for i in first.tolist()], where=f"{path}: launch ts")
    check_times(l_ts, np.zeros(0, dtype=np.int64), f"{path}: launch")
    l_ts = l_ts + np.int64(base)
    idx = np.searchsorted(s_start, l_ts, side="right") - 1
    inside = (idx >= 0) & (l_ts < s_end[np.clip(idx, 0, None)])
    launch_step = pd.Series(np.where(inside, s_id[np.clip(idx, 0, None)], -1), index=l_corr)
    ev_step = pd.Series(corr, dtype=object).map(launch_step)
    ev_step = pd.to_numeric(ev_step, errors="coerce")
    ev_step = ev_step.where(ev_step >= 0).astype("Int64")
    frame = pd.DataFrame({"step": ev_step, "start_ns": events["start_ns"], "end_ns": end})
    frame = frame[frame["step"].notna()]
    if frame.empty:
        whole = pd.DataFrame({"rank": [0], "step": pd.array([pd.NA], dtype="Int64"),
                              "start_ns": [int(events["start_ns"].min())], "end_ns": [int(end.max())]})
        return whole, no_step
    win = frame.groupby("step").agg(start_ns=("start_ns", "min"), end_ns=("end_ns", "max")).reset_index()
    win.insert(0, "rank", 0)
    win["step"] = win["step"].astype("Int64")
    return win[list(STEP_COLUMNS)].astype({"start_ns": np.int64, "end_ns": np.int64}), ev_step


#: consecutive ProfilerStep spans may touch; an overlap beyond this (two captures in one file) is an error
_STEP_OVERLAP_NS = 1000


def _step_spans(path: Path, steps: list, base: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """ProfilerStep#N host spans (start, end, N) in time order; a step number written twice or two
    overlapping steps (two captures in one file?) are an input error, never merged into one window."""
    st = pd.DataFrame(steps, columns=["step", "ts", "dur"])
    s_start = us_to_ns(st["ts"], where=f"{path}: ProfilerStep ts")
    s_dur = us_to_ns(st["dur"], where=f"{path}: ProfilerStep dur")
    check_times(s_start, s_dur, f"{path}: ProfilerStep")
    s_start = s_start + np.int64(base)
    s_end = s_start + s_dur
    order = np.argsort(s_start, kind="stable")
    s_start, s_end, s_id = s_start[order], s_end[order], st["step"].to_numpy(np.int64)[order]
    twice = pd.Series(s_id).duplicated(keep=False).to_numpy()
    if twice.any():
        step = int(s_id[twice][0])
        at = ", ".join(f"{int(t) // 1000} us" for t in s_start[s_id == step][:3])
        raise InputError(f"{path}: ProfilerStep#{step} appears {int((s_id == step).sum())} times (starting at {at}); "
                         f"expected one span per step (two captures written into one trace?)")
    overlap = s_start[1:] < s_end[:-1] - _STEP_OVERLAP_NS
    if overlap.any():
        i = int(np.flatnonzero(overlap)[0])
        raise InputError(f"{path}: ProfilerStep#{int(s_id[i])} and ProfilerStep#{int(s_id[i + 1])} overlap "
                         f"({int(s_start[i + 1]) // 1000} us < {int(s_end[i]) // 1000} us); steps of one capture "
                         f"follow one another")
    return s_start, s_end, s_id


def _groups(dist: object, pg_desc: dict[str, tuple[str, str]]) -> dict[str, GroupInfo]:
    """Process groups: distributedInfo.pg_config, completed by kernel args."""
    out: dict[str, GroupInfo] = {}
    if isinstance(dist, dict) and isinstance(dist.get("pg_config"), list):
        for pg in dist["pg_config"]:
            if not isinstance(pg, dict) or "pg_name" not in pg:
                continue
            name = str(pg["pg_name"])
            listed = pg.get("ranks") if isinstance(pg.get("ranks"), list) else []
            ranks = tuple(int(r) for r in listed if as_int(r) is not None)
            out[name] = GroupInfo(group=name, name=name, role=str(pg.get("pg_desc", "")), ranks=ranks)
    for name, (desc, ranks_text) in pg_desc.items():
        if name in out:
            continue
        ranks = tuple(int(x) for x in re.findall(r"-?\d+", ranks_text))
        out[name] = GroupInfo(group=name, name=name, role=desc, ranks=ranks)
    return out
