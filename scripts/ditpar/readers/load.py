"""Profile readers: find the profiles under the given paths, read every rank, return one ProfileSet.

Accepted paths: a torch_npu ``*_ascend_pt`` folder, its ``ASCEND_PROFILER_OUTPUT/``, a folder that
holds many rank folders, Kineto ``.json``/``.json.gz`` trace files, or folders of such traces.
Formats are never mixed in one ProfileSet.

Owns every byte of profiler file formats. May import ``core`` and the plumbing; nothing here knows
about analyses, masking or plans.
"""

from __future__ import annotations

import os
import sys
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np
import pandas as pd

from ditpar.core.events import COLUMNS, empty_events, validate_events
from ditpar.core.profile import (
    COMM_OP_COLUMNS,
    COMM_OP_OPTIONAL,
    LINK_COLUMNS,
    STEP_COLUMNS,
    GroupInfo,
    ProfileSet,
    function_name,
)
from ditpar.errors import IncompleteRankError, InputError
from ditpar.files import input_problem, os_error_text
from ditpar.readers.ascend import cluster as msprof_cluster
from ditpar.readers.ascend import db as ascend_db
from ditpar.readers.ascend import partial as ascend_partial
from ditpar.readers.ascend import text as ascend
from ditpar.readers.kineto import trace as kineto

__all__ = ["load_profiles", "discover"]

_MAX_DEPTH = 4
_TRACE_SUFFIXES = (".json", ".json.gz")
_NOT_TRACES = ("profiler_info", "profiler_metadata", "communication", "communication_matrix", "cluster_",
               "communication_group")


def discover(path: str | os.PathLike[str]) -> list[tuple[str, Path]]:
    """(format, location) of every rank profile under ``path``: ("ascend", rank folder) or ("kineto", file)."""
    p = Path(path)
    why = input_problem(p, "any")  # no such path, a dangling link, a loop, a FIFO or device
    if why:
        raise InputError(why + (" (save the profile to a file first)" if p.exists() else ""))
    if p.is_file():
        if p.match(MSPROF_DB_GLOB):
            raise InputError(f"{p}: {MSPROF_UNSUPPORTED}")
        if p.name in ("trace_view.json", ascend.KERNEL_FILE, ascend_db.ANALYSIS_DB) or p.match(ascend_db.PROFILER_DB_GLOB):
            return [("ascend", p.parent)]
        if _is_trace_name(p.name):
            return [("kineto", p)]
        raise InputError(f"{p}: not a profile; expected a Kineto .json/.json.gz trace or an Ascend *_ascend_pt folder")
    if _is_ascend_dir(p):
        return [("ascend", p)]
    found: list[tuple[str, Path]] = []
    for root, dirs, files in os.walk(p, onerror=_unreadable):  # a folder it may not list is named, not skipped
        here = Path(root)
        depth = len(here.relative_to(p).parts)
        dirs.sort()
        keep = []
        for d in dirs:
            sub = here / d
            if _is_ascend_dir(sub):
                found.append(("ascend", sub))
            elif (depth + 1 < _MAX_DEPTH and d not in ("FRAMEWORK", "__pycache__", msprof_cluster.OUTPUT_DIR)
                  and not d.startswith("PROF_")):
                keep.append(d)
        dirs[:] = keep
        for f in sorted(files):
            if _is_trace_name(f):
                why = input_problem(here / f)  # a FIFO would block the reader; a dangling link is no trace
                if why:
                    raise InputError(why)
                found.append(("kineto", here / f))
    return found


#: CANN msprof's own output: PROF_<id>/ folders and their msprof_<timestamp>.db
MSPROF_DB_GLOB = "msprof_*.db"
MSPROF_UNSUPPORTED = ("CANN msprof's own output (PROF_*/, msprof_*.db) is not read: it has no framework step spans "
                      "and this project has no sample of it to check against; capture with torch_npu's profiler "
                      "(export_type text or db) and give its *_ascend_pt folder")


def _msprof_output(folder: Path) -> Path | None:
    """A PROF_* folder or msprof_*.db at or just under ``folder`` (two levels), else None."""
    if folder.name.startswith("PROF_"):
        return folder
    for pattern in ("PROF_*", "*/PROF_*", MSPROF_DB_GLOB, f"*/{MSPROF_DB_GLOB}"):
        found = next(iter(sorted(folder.glob(pattern))), None)
        if found is not None:
            return found
    return None


def _unreadable(exc: OSError) -> None:
    raise InputError(os_error_text(exc))


def _is_ascend_dir(p: Path) -> bool:
    return (p / ascend.OUTPUT_DIR).is_dir() or (p / ascend.KERNEL_FILE).is_file() or p.name.endswith("_ascend_pt")


def _is_trace_name(name: str) -> bool:
    low = name.lower()
    if not low.endswith(_TRACE_SUFFIXES):
        return False
    return not low.startswith(_NOT_TRACES) and low != "trace_view.json"


def load_profiles(paths: Iterable[str | os.PathLike[str]] | str | os.PathLike[str],
                  workers: int | None = None, per_rank: Callable[[ProfileSet], object] | None = None,
                  tasks: bool = True, progress: Callable[[int, int, int], None] | None = None) -> ProfileSet:
    """Read every rank under ``paths`` into one ProfileSet (events of all ranks, side tables).

    Ranks are read by several processes at once (this one and worker processes, at most one per
    usable core and per rank) when the profiles are large enough to pay for starting them;
    ``workers`` fixes the number of readers (1 = serial).
    The result is the same either way: ranks are merged in the order they were found.

    ``per_rank`` (a module-level function, so workers can run it) is applied to each rank's own
    ProfileSet where that rank was read; its results come back in ``rank_results`` and the events
    stay behind (``events`` is empty, ``ranks`` still lists the ranks with events): a per-rank
    analysis of many large ranks then never ships or stacks their event tables. Nor their
    communication.json ops: ``comm_ops`` keeps those of ranks without device tasks, and
    ``comm_ops_used_ranks`` names the ranks whose ops were used where they were read.

    ``tasks=False`` reads no device task at all: every Ascend rank is answered from the profiler's own
    summary tables (step_trace_time.csv, communication.json, communication_matrix.json; analysis.db for
    a db export), as a rank without kernel_details.csv is, and ``partial_ranks`` names what each gave.

    ``progress(ranks done, ranks, rows read)`` is called as each rank's read finishes (cli.read_progress).
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    paths = [Path(p) for p in paths]
    if not paths:
        raise InputError("no profile path given; expected a *_ascend_pt folder or Kineto trace files")
    cluster = [p for p in paths if msprof_cluster.is_cluster_output(p)]
    if cluster:
        return _load_cluster(cluster, paths, per_rank)
    asked = per_rank
    if not tasks:
        per_rank = None  # no events: nothing to compute where a rank is read
    located: list[tuple[str, Path]] = []
    for p in paths:
        found = discover(p)
        if not found and p.is_dir() and (msprof := _msprof_output(p)) is not None:
            raise InputError(f"{msprof}: {MSPROF_UNSUPPORTED}")
        if not found:
            listing = sorted(x.name for x in p.iterdir())[:12] if p.is_dir() else []
            raise InputError(
                f"{p}: no profile found; expected *_ascend_pt folders (with {ascend.OUTPUT_DIR}/"
                f"{ascend.KERNEL_FILE}) or Kineto .json/.json.gz traces; found {listing or 'an empty folder'}"
            )
        located.extend(found)
    # the same folder reached twice (e.g. a parent and one of its ranks) is read once
    unique = list(dict.fromkeys((fmt, loc.resolve()) for fmt, loc in located))
    formats = sorted({fmt for fmt, _ in unique})
    if len(formats) > 1:
        examples = {fmt: str(next(loc for f, loc in unique if f == fmt)) for fmt in formats}
        raise InputError(f"mixed profile formats {examples}; give Ascend folders or Kineto traces, not both")
    fmt = formats[0]
    if not tasks and fmt != "ascend":
        raise InputError(f"{unique[0][1]}: a {fmt} trace has no profiler summary tables; read it without "
                         "--profiler-tables")
    reads, kept, skipped = [], [], []
    for loc, outcome in zip([loc for _, loc in unique],
                            _read_each(fmt, [loc for _, loc in unique], workers, per_rank, tasks,
                                       progress), strict=True):
        if isinstance(outcome, IncompleteRankError):
            if len(unique) == 1:
                raise outcome
            skipped.append({"rank": _rank_hint(fmt, loc), "path": str(loc), "reason": str(outcome)})
        else:
            reads.append(outcome)
            kept.append(loc)
    if not reads:
        raise InputError(f"every rank is incomplete ({len(skipped)} of {len(unique)}); first: {skipped[0]['reason']}")
    _check_one_job(reads, kept)
    ps = _combine(fmt, reads, kept)
    ps.skipped = skipped
    if per_rank is not None:
        ps.rank_results = {int(r): rd.rank_result for r, rd in zip(_assign_ranks(reads, kept), reads, strict=True)}
        ps.event_ranks = sorted(int(r) for r, rd in zip(_assign_ranks(reads, kept), reads, strict=True)
                                if rd.had_events)
        ps.rank_results_of = function_name(per_rank)
    if not tasks and asked is not None:  # as for msprof-analyze's cluster output: no rank has events
        ps.rank_results, ps.event_ranks, ps.rank_results_of = {}, [], function_name(asked)
    if tasks and not (ps.event_ranks if per_rank is not None else len(ps.events)):
        where = ", ".join(str(p) for p in kept[:3]) + (" ..." if len(kept) > 3 else "")
        hint = (" (a CPU-only torch.profiler trace? record with ProfilerActivity.CUDA as well)" if fmt == "kineto"
                else " (kernel_details.csv has no task rows)")
        raise InputError(f"{where}: no device kernels or collectives in the profile{hint}; nothing to analyse")
    return ps


def _load_cluster(cluster: list[Path], paths: list[Path], per_rank: Callable | None) -> ProfileSet:
    """msprof-analyze's cluster_analysis_output: every rank from aggregates, none with device tasks."""
    if len(cluster) != len(paths) or len(cluster) > 1:
        raise InputError(f"{cluster[0]}: give one msprof-analyze {msprof_cluster.OUTPUT_DIR} alone, not with "
                         f"other profile paths ({len(paths)} given)")
    reads = msprof_cluster.read_cluster(cluster[0])
    ps = _combine("ascend", reads, [cluster[0]] * len(reads))
    ps.links_global = True  # msprof-analyze mapped them (comm_matrix_analysis.py)
    if per_rank is not None:
        ps.rank_results, ps.event_ranks, ps.rank_results_of = {}, [], function_name(per_rank)
    return ps


#: a rank of at least this many events hands its freed heap back to the system once read (_read_one)
TRIM_MIN_ROWS = 500_000
#: below this many bytes of profile files, starting worker processes costs more than it saves
PARALLEL_MIN_BYTES = 64 << 20


def _read_one(fmt: str, loc: Path, per_rank: Callable[[ProfileSet], object] | None = None,
              tasks: bool = True) -> object:
    """One rank's read; an incomplete rank comes back as its error (the caller decides).

    With ``per_rank``, the rank's ProfileSet is handed to it here and only its result is kept
    (``rank_result``), with the event table emptied. A ``per_rank`` with a ``columns`` attribute (a set
    of event columns) is handed only those.
    """
    needed = getattr(per_rank, "columns", None) if per_rank is not None else None
    try:
        result = _read_ascend(loc, tasks, needed) if fmt == "ascend" else kineto.read_trace(loc)
    except IncompleteRankError as exc:
        return exc
    result.rows_read = len(result.events)  # for the progress line (the events may be let go below)
    dur = result.events["dur_ns"].to_numpy()
    if dur.size and not (dur > 0).any():  # nothing can be measured from it: say so, not "no step matched"
        raise InputError(f"{loc}: every one of its {dur.size} device tasks lasts 0 us; the durations are damaged "
                         "(or the profile was cut before the device finished)")
    if per_rank is not None:
        _return_freed_memory()  # the parse's scratch memory, before the analysis needs its own
        # the rank numbered as in the whole set (one read: rank or 0)
        one = _combine(fmt, [result], [loc], needed)
        result.had_events = not one.events.empty
        if needed:  # the columns the analysis never reads are let go before its own peak (~40 MB a 1M-row rank)
            result.events = None
            one.events = one.events[[c for c in one.events.columns if c in needed]]
            _return_freed_memory()
        result.rank_result = per_rank(one)
        result.events = empty_events()
        ops = getattr(result, "comm_ops", None)
        if ops is not None and len(ops) and getattr(result, "evidence", None) is None:
            # used here, where the rank was read: only that it had ops travels (ProfileSet.comm_ops_used_ranks);
            # a rank without device tasks keeps its ops, the whole-set analyses read them
            result.comm_ops, result.comm_ops_used = None, True
        del one
        # a large rank's freed heap goes back, so the next rank read here starts from its low point, not
        # its peak; a small one's stays for the next rank (at most its own small peak is kept): trimming
        # and faulting the pages in again cost 64 db ranks of 100,000 rows 0.8 s of system time
        _return_freed_memory(trim=result.rows_read >= TRIM_MIN_ROWS)
    return result


def _return_freed_memory(trim: bool = False) -> None:
    """Hand Arrow's freed blocks back (its allocator, mimalloc, keeps them otherwise). Within a rank glibc's
    freed heap is kept for the next array (_reuse_heap); ``trim`` (a rank done) hands it back too (malloc_trim),
    so a process that reads ranks in turn holds one rank's peak, not the high-water of all of them."""
    global _TRIM
    _reuse_heap()
    if trim and _TRIM is None:
        import ctypes
        import ctypes.util

        try:
            _TRIM = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
        except (OSError, AttributeError):
            _TRIM = False
    if trim and _TRIM:
        _TRIM(0)
    pyarrow = sys.modules.get("pyarrow")
    if pyarrow is not None:
        pyarrow.default_memory_pool().release_unused()


_TRIM = None


def _reuse_heap() -> None:
    """Once per process: glibc keeps freed arrays in its heap for the next one (mallopt M_MMAP_THRESHOLD and
    M_TRIM_THRESHOLD raised; else nothing). By default each large numpy array is a fresh mmap, zeroed page by
    page by the kernel and unmapped when freed. Trimmed after each rank (_return_freed_memory), the peak of
    a process stays one rank's: 8 ranks of 1M rows, system time 2.75 -> 2.17 s, 276 -> 278 MB per process.
    Kept across ranks it was 1.63 s, but 364 MB per process (bubbles.py's tree peak 769 -> 1015 MB)."""
    global _HEAP_KEPT
    if _HEAP_KEPT:
        return
    _HEAP_KEPT = True
    if not sys.platform.startswith("linux"):
        return
    import ctypes
    import ctypes.util

    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt
    except (OSError, AttributeError):
        return
    mallopt(_M_MMAP_THRESHOLD, 64 << 20)  # arrays under 64 MB come from the heap (1M int64 values: 8 MB)
    mallopt(_M_TRIM_THRESHOLD, 512 << 20)  # and stay there when freed, for the next rank


#: glibc malloc.h parameter numbers
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_HEAP_KEPT = False


def _read_ascend(loc: Path, tasks: bool = True, columns: frozenset[str] | None = None) -> object:
    """One torch_npu rank: the text export when it has kernel_details.csv, else its db export, else the
    step trace and communication files of a rank without device tasks (ascend_partial). ``tasks=False``:
    the summary files only (text), or analysis.db's summary tables (a db export without the text files).
    ``columns``: the event columns the caller reads (a text export may leave the others out)."""
    if not tasks:
        if ascend_partial.has_summary(loc):
            return ascend_partial.read_rank(loc)
        if ascend_db.find_db(ascend.find_output_dir(loc)) is not None:
            return ascend_db.read_tables(loc)
        out_dir = ascend.find_output_dir(loc)
        have = sorted(p.name for p in out_dir.iterdir()) if out_dir.is_dir() else []
        raise InputError(f"{out_dir}: no profiler summary tables (step_trace_time.csv, communication.json, "
                         f"communication_matrix.json or a db export's analysis.db); have {have[:12]}")
    if ascend_db.has_db(loc):
        return ascend_db.read_rank(loc)
    if ascend_partial.has_evidence(loc):
        return ascend_partial.read_rank(loc)
    return ascend.read_rank(loc, columns)


def _read_each(fmt: str, locs: list[Path], workers: int | None,
               per_rank: Callable[[ProfileSet], object] | None = None, tasks: bool = True,
               progress: Callable[[int, int, int], None] | None = None) -> list[object]:
    """Read every location, serially or in a bounded pool of processes; results in the order of ``locs``.

    In parallel, this process is one of the ``workers`` readers: it reads ranks from the end of the
    list while ``workers - 1`` worker processes (fed by one thread each) read from the front, so
    no core waits while the workers start. Each reader holds one rank at a time: the peak is set by
    ``workers``, not by the number of ranks (with ``per_rank`` only its small result comes back).
    Every rank is read even after an error; the error of the first failing rank in list order is
    raised, as a serial read would. ``progress(ranks done, ranks, rows read)`` is called as each
    rank arrives.
    """
    if workers is None:
        workers = _usable_cores() if tasks and _profile_bytes(fmt, locs) >= PARALLEL_MIN_BYTES else 1
    workers = max(1, min(int(workers), len(locs)))
    results: list[object] = [None] * len(locs)
    errors: dict[int, BaseException] = {}
    tally = [0, 0]  # ranks done, rows read

    def arrived(i: int, outcome: object, error: BaseException | None) -> None:
        if error is not None:
            errors[i] = error
        else:
            results[i] = outcome
        tally[0] += 1
        tally[1] += int(getattr(outcome, "rows_read", 0) or 0)
        if progress is not None:
            progress(tally[0], len(locs), tally[1])

    if workers == 1:
        for i, loc in enumerate(locs):
            arrived(i, _read_one(fmt, loc, per_rank, tasks), None)  # an error stops here, in rank order
        return results
    _read_in_pool(fmt, locs, workers, per_rank, tasks, arrived)
    if errors:
        raise errors[min(errors)]
    return results


def _read_in_pool(fmt: str, locs: list[Path], workers: int, per_rank: Callable[[ProfileSet], object] | None,
                  tasks: bool, arrived: Callable[[int, object, BaseException | None], None]) -> None:
    """Read ``locs`` in this process and ``workers - 1`` worker processes; ``arrived`` is called (under a
    lock, one rank at a time) with each rank's outcome or error as it finishes."""
    import gc
    import threading
    from collections import deque
    from concurrent.futures import ProcessPoolExecutor

    import pyarrow

    todo, lock = deque(range(len(locs))), threading.Lock()

    def take(front: bool) -> int | None:
        with lock:
            return (todo.popleft() if front else todo.pop()) if todo else None

    def run(i: int, read: Callable[[], object]) -> None:
        try:
            outcome, error = read(), None
        except Exception as exc:  # kept; the caller raises the first in rank order
            outcome, error = None, exc
        with lock:
            arrived(i, outcome, error)

    threads_before = pyarrow.cpu_count()
    pyarrow.set_cpu_count(1)  # one core per reader: the processes are the parallelism
    context = _pool_context()
    forked = context.get_start_method() == "fork"
    if forked:
        # the objects this process holds now (its modules, most of a forked worker's memory) are left out of
        # every garbage collection while the workers run: a collection writes to each object it visits, and
        # each such write copies a page shared with a worker (8 ranks of 1M rows: 0.3 s of CPU less)
        gc.freeze()
    try:
        with ProcessPoolExecutor(max_workers=workers - 1, mp_context=context,
                                 initializer=_worker_start) as pool:
            # the workers start now, from this thread, before any reading thread runs (a forked
            # worker then copies no lock held by another thread)
            pool.submit(_worker_ready).result()

            def feed() -> None:
                while (i := take(front=True)) is not None:
                    # packed results stay packed: _combine expands them straight into the merged table
                    run(i, lambda i=i: pool.submit(_read_packed, fmt, locs[i], per_rank, tasks).result())

            feeders = [threading.Thread(target=feed, daemon=True) for _ in range(workers - 1)]
            for thread in feeders:
                thread.start()
            while (i := take(front=False)) is not None:
                run(i, lambda i=i: _read_one(fmt, locs[i], per_rank, tasks))
            for thread in feeders:
                thread.join()
    finally:
        if forked:
            gc.unfreeze()
        pyarrow.set_cpu_count(threads_before)


def _pool_context():
    """fork on Linux while this process runs no other thread (a worker then starts with every module
    already imported: ~1 s of CPU saved per worker); spawn otherwise (a fresh interpreter, safe whatever
    threads run here)."""
    import multiprocessing
    import threading

    if (sys.platform.startswith("linux") and threading.active_count() == 1
            and "fork" in multiprocessing.get_all_start_methods()):
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context("spawn")


def _worker_ready() -> bool:
    return True


def _read_packed(fmt: str, loc: Path, per_rank: Callable[[ProfileSet], object] | None = None,
                 tasks: bool = True) -> object:
    """_read_one in a worker: text columns travel as codes and distinct values (small, fast to unpickle)."""
    result = _read_one(fmt, loc, per_rank, tasks)
    if isinstance(result, IncompleteRankError):
        return result
    ev = result.events
    start = ev["start_ns"].to_numpy(np.int64)
    if len(ev) > 1 and not bool((start[1:] >= start[:-1]).all()):
        ev = ev.take(np.argsort(start, kind="stable")).reset_index(drop=True)  # sorted here, not in the parent
    packed = {}
    for col in ev.columns:
        if ev[col].dtype == object:
            codes, uniques = pd.factorize(ev[col], use_na_sentinel=False)
            packed[col] = (codes.astype(np.int32), np.asarray(uniques, dtype=object))
    result.events = ev.drop(columns=list(packed))
    result.packed = packed
    return result


def _stack_events(reads: list, ranks: list[int]) -> pd.DataFrame:
    """One event table from every rank's read, in the given order, numbered with ``ranks``.

    Built column by column into its final arrays: a worker's packed text columns (codes and distinct
    values) are expanded straight into place, and each read gives up its table once copied, so the
    peak is the merged table plus the reads not yet copied (not twice the merged table).
    """
    if len(reads) == 1 and getattr(reads[0], "packed", None) is None:
        events = reads[0].events
        events["rank"] = ranks[0]
        return events
    sizes = [len(rd.events) for rd in reads]
    total = sum(sizes)
    out: dict[str, object] = {}
    for col, dtype in COLUMNS.items():
        if dtype == "object":
            out[col] = np.empty(total, dtype=object)
        elif dtype == "int64":
            out[col] = np.empty(total, dtype=np.int64)
        else:  # nullable Int64: values and mask
            out[col] = (np.zeros(total, dtype=np.int64), np.ones(total, dtype=bool))
    lo = 0
    for rd, rank, n in zip(reads, ranks, sizes, strict=True):
        packed = getattr(rd, "packed", None) or {}
        here = slice(lo, lo + n)
        for col, dtype in COLUMNS.items():
            if col == "rank":
                out[col][here] = rank
            elif col in packed:
                codes, uniques = packed[col]
                if n:
                    np.take(uniques, codes, out=out[col][here])
            elif dtype in ("object", "int64"):
                out[col][here] = rd.events[col].to_numpy(dtype=object if dtype == "object" else np.int64)
            else:
                values = rd.events[col].array
                out[col][0][here] = values.to_numpy(dtype=np.int64, na_value=0)
                out[col][1][here] = values.isna()
        rd.events, rd.packed = empty_events(), None  # copied: free it
        lo += n
    columns = {}
    for col, dtype in COLUMNS.items():
        if dtype == "Int64":
            columns[col] = pd.Series(pd.arrays.IntegerArray(*out[col]), copy=False)
        else:
            columns[col] = pd.Series(out[col], dtype=dtype, copy=False)
    return pd.DataFrame(columns, copy=False)


def _worker_start() -> None:
    """Each worker uses one core; the processes are the parallelism."""
    import pyarrow

    pyarrow.set_cpu_count(1)
    pyarrow.set_io_thread_count(1)


def _usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _profile_bytes(fmt: str, locs: list[Path]) -> int:
    """Size of the files that dominate reading time (kernel_details.csv, or the trace itself)."""
    total = 0
    for loc in locs:
        path = ascend.find_output_dir(loc) / ascend.KERNEL_FILE if fmt == "ascend" else loc
        if fmt == "ascend" and not path.is_file():
            path = ascend_db.find_db(ascend.find_output_dir(loc)) or path
        try:
            total += path.stat().st_size
        except OSError:
            pass
    return total


def _rank_hint(fmt: str, loc: Path) -> int | None:
    """The rank of a profile that could not be read, where its metadata or name tells it."""
    if fmt != "ascend":
        return None
    out_dir = ascend.find_output_dir(loc)
    rank_dir = out_dir.parent if out_dir.name == ascend.OUTPUT_DIR else out_dir
    try:
        return ascend.rank_of(rank_dir)[0]
    except InputError:
        return None


def _combine(fmt: str, reads: list, locations: list[Path], columns: frozenset[str] | None = None) -> ProfileSet:
    """One ProfileSet of the reads; ``columns``: the event columns a one-rank read was asked for (None: all)."""
    ranks = _assign_ranks(reads, locations)
    steps, traces, comm_ops, links = [], [], [], []
    bytes_from: dict[int, str] = {}
    groups: dict[str, GroupInfo] = {}
    conflicted: set[str] = set()
    unplaced: Counter = Counter()
    sources: dict[int, list[Path]] = {}
    partial: dict[int, list[str]] = {}
    comm_used: list[int] = []
    for rank, rd in zip(ranks, reads, strict=True):
        if getattr(rd, "evidence", None) is not None:
            partial[rank] = list(rd.evidence)
        if getattr(rd, "comm_ops_used", False):
            comm_used.append(rank)
        st = rd.steps.copy()
        st["rank"] = rank
        steps.append(st)
        if getattr(rd, "step_trace", None) is not None:
            t = rd.step_trace.copy()
            t["rank"] = rank
            traces.append(t)
        if getattr(rd, "comm_ops", None) is not None:
            c = rd.comm_ops.copy()
            c["rank"] = rank
            comm_ops.append(c)
        if getattr(rd, "links", None) is not None:
            lk = rd.links.copy()
            lk["rank"] = rank
            links.append(lk)
        if getattr(rd, "bytes_from", ""):
            bytes_from[rank] = rd.bytes_from
        for key, info in rd.groups.items():
            _merge_group(groups, key, info, conflicted)
        unplaced.update(rd.unclassified)
        sources[rank] = list(rd.sources)
    all_events = _stack_events(reads, ranks) if reads else empty_events()
    all_events = _sorted_by_rank_and_start(all_events)
    validate_events(all_events, check_kinds=False, columns=columns)  # every kind came from the classifier
    step_frame = (pd.concat(steps, ignore_index=True) if steps else pd.DataFrame(columns=list(STEP_COLUMNS)))
    step_frame = step_frame.astype({"rank": "int64", "step": "Int64", "start_ns": "int64", "end_ns": "int64"})
    return ProfileSet(
        events=all_events,
        steps=step_frame.sort_values(["rank", "start_ns"]).reset_index(drop=True),
        step_trace=(pd.concat(traces, ignore_index=True) if traces else None),
        comm_ops=(pd.concat(comm_ops, ignore_index=True).reindex(columns=[*COMM_OP_COLUMNS, *COMM_OP_OPTIONAL])
                  if comm_ops else None),
        groups=groups,
        unclassified=unplaced,
        sources=sources,
        fmt=fmt,
        links=(pd.concat(links, ignore_index=True)[list(LINK_COLUMNS)] if links else None),
        bytes_from=bytes_from,
        partial_ranks=partial,
        comm_ops_used_ranks=sorted(comm_used),
    )


def _sorted_by_rank_and_start(events: pd.DataFrame) -> pd.DataFrame:
    """Stable order by (rank, start_ns); a table already in that order is not copied."""
    rank = events["rank"].to_numpy(np.int64)
    start = events["start_ns"].to_numpy(np.int64)
    if len(events) < 2 or bool(np.all((np.diff(rank) > 0) | ((np.diff(rank) == 0) & (np.diff(start) >= 0)))):
        return events.reset_index(drop=True)
    order = np.lexsort((start, rank))  # lexsort is stable
    return events.take(order).reset_index(drop=True)


def _assign_ranks(reads: list, locations: list[Path]) -> list[int]:
    known = [rd.rank for rd in reads]
    if len(reads) == 1 and known[0] is None:
        return [0]  # a single profile without rank information is rank 0
    missing = [str(loc) for rd, loc in zip(reads, locations, strict=True) if rd.rank is None]
    if missing:
        raise InputError(
            f"{missing[0]}: cannot tell its rank (no profiler_info_<rank>.json, distributedInfo.rank or "
            f"'rank<N>' in the name) while reading {len(reads)} profiles"
        )
    seen: dict[int, Path] = {}
    for rd, loc in zip(reads, locations, strict=True):
        if rd.rank in seen:
            raise InputError(f"{loc}: rank {rd.rank} ({rd.rank_from}) is also the rank of {seen[rd.rank]}")
        seen[rd.rank] = loc
    return [int(r) for r in known]


def _check_one_job(reads: list, locations: list[Path]) -> None:
    """Ranks read together must come from one job: traces that state different world sizes do not."""
    sizes: dict[int, list[str]] = {}
    for rd, loc in zip(reads, locations, strict=True):
        size = getattr(rd, "world_size", None)
        if size is not None:
            sizes.setdefault(size, []).append(f"{loc} (rank {rd.rank})")
            if rd.rank is not None and rd.rank >= size:
                raise InputError(f"{loc}: rank {rd.rank} ({rd.rank_from}) is outside its job's world size {size}")
    if len(sizes) > 1:
        listed = "; ".join(f"world size {size}: {', '.join(where[:3])}{' ...' if len(where) > 3 else ''}"
                           for size, where in sorted(sizes.items()))
        raise InputError(f"traces of different jobs read together ({listed}); give the traces of one run")


def _merge_group(groups: dict[str, GroupInfo], key: str, info: GroupInfo, conflicted: set[str]) -> None:
    """Ranks see the same communicator; fill what one rank's metadata lacks from another's."""
    have = groups.get(key)
    if have is None:
        groups[key] = GroupInfo(info.group, info.name, info.role, tuple(info.ranks), info.full_hash)
        return
    for attr in ("name", "role", "full_hash"):
        if not getattr(have, attr) and getattr(info, attr):
            setattr(have, attr, getattr(info, attr))
    if key in conflicted:
        return
    if have.ranks and info.ranks and tuple(have.ranks) != tuple(info.ranks):
        # the same name (and hash) on different ranks can be different communicators (e.g. the
        # dp group of each pipeline stage): membership is then not one list, so leave it empty
        have.ranks = ()
        conflicted.add(key)
    elif not have.ranks and info.ranks:
        have.ranks = tuple(info.ranks)


