"""Reader of torch_npu (Ascend PyTorch Profiler) text exports: one ``*_ascend_pt`` folder per rank.

What is taken from where (see references/profile-formats.md):
- kernel_details.csv: every device task (compute kernels and HCCL communication ops), its exact
  start and duration, Step Id, Stream ID, Device_id, Accelerator Core, Type.
- trace_view.json: communication ops of the HCCL/Communication process (message size from
  count x data_type; used as events only when kernel_details has no communication rows),
  ProfilerStep#N host spans (they extend a step's end as torch_npu does), device labels.
- step_trace_time.csv: the profiler's own per-step answer (reference only).
- communication.json: per-op elapse/transit/wait/synchronization/idle and transit bytes.
- profiler_info_<rank>.json, profiler_metadata.json: rank and parallel_group_info.
"""

from __future__ import annotations

import csv
import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ditpar import files, limits
from ditpar.core import classify
from ditpar.core.events import COLUMNS, kind_masks, make_events
from ditpar.core.profile import (
    BYTES_MESSAGE,
    BYTES_TRANSIT,
    COMM_OP_COLUMNS,
    LINK_COLUMNS,
    STEP_COLUMNS,
    STEP_TRACE_COLUMNS,
    GroupInfo,
)
from ditpar.errors import IncompleteRankError, InputError
from ditpar.files import input_problem
from ditpar.readers.ascend import comm_json
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
from ditpar.readers.jsonstream import iter_trace, load_json
from ditpar.timeparse import us_to_ns, us_to_ns_arrow

OUTPUT_DIR = "ASCEND_PROFILER_OUTPUT"
KERNEL_FILE = "kernel_details.csv"
REQUIRED_KERNEL_COLUMNS = ("Name", "Accelerator Core", "Start Time(us)", "Duration(us)")
OPTIONAL_KERNEL_COLUMNS = ("Step Id", "Device_id", "Stream ID", "Type")

#: step_trace_time.csv header -> ProfileSet.step_trace column
STEP_TRACE_HEADER = {
    "Computing": "computing_us",
    "Communication(Not Overlapped)": "communication_not_overlapped_us",
    "Overlapped": "overlapped_us",
    "Communication": "communication_us",
    "Free": "free_us",
    "Stage": "stage_us",
    "Bubble": "bubble_us",
}

#: HCCL data_type (trace_view args) -> bytes per element
HCCL_DTYPE_BYTES = {
    "INT8": 1, "UINT8": 1, "FP8": 1, "HIF8": 1, "FP8E4M3": 1, "FP8E5M2": 1,
    "INT16": 2, "UINT16": 2, "FP16": 2, "BFP16": 2, "BF16": 2,
    "INT32": 4, "UINT32": 4, "FP32": 4,
    "INT64": 8, "UINT64": 8, "FP64": 8, "INT128": 16,
}

_COMM_PROCESSES = ("HCCL", "Communication")
_GROUP_THREAD = re.compile(r"^Group (?P<group>.+?) (?:Aicpu )?Communication$")
_STEP_NAME = re.compile(r"^ProfilerStep#(?P<step>\d{1,12})$")


@dataclass
class AscendRank:
    """Everything read from one rank's folder."""

    rank: int | None
    rank_from: str
    events: pd.DataFrame
    steps: pd.DataFrame
    step_trace: pd.DataFrame | None
    comm_ops: pd.DataFrame | None
    groups: dict[str, GroupInfo] = field(default_factory=dict)
    unclassified: dict[str, int] = field(default_factory=dict)
    sources: list[Path] = field(default_factory=list)
    links: pd.DataFrame | None = None
    bytes_from: str = ""


def double_hash(name: str) -> int:
    """msprof-analyze's communicator hash: two 32-bit polynomial hashes (29, 131), concatenated."""
    h29 = h131 = 0
    for char in name:
        h29 = (h29 * 29 + ord(char)) & 0xFFFFFFFF
        h131 = (h131 * 131 + ord(char)) & 0xFFFFFFFF
    return (h29 << 32) | h131


def find_output_dir(folder: Path) -> Path:
    """ASCEND_PROFILER_OUTPUT of a rank folder (or the folder itself when it holds the files)."""
    if (folder / OUTPUT_DIR).is_dir():
        return folder / OUTPUT_DIR
    return folder


def read_rank(folder: Path, columns: frozenset[str] | None = None) -> AscendRank:
    """Read one rank: ``folder`` is the ``*_ascend_pt`` folder or its ASCEND_PROFILER_OUTPUT. ``columns``: the
    event columns the caller reads (None: all); the others may be left out of the table (never checked less)."""
    out_dir = find_output_dir(folder)
    rank_dir = out_dir.parent if out_dir.name == OUTPUT_DIR else out_dir
    kernel_path = out_dir / KERNEL_FILE
    if os.path.lexists(kernel_path) and input_problem(kernel_path):  # a dangling link, loop, FIFO, folder
        raise IncompleteRankError(input_problem(kernel_path))
    if not kernel_path.is_file():
        have = sorted(p.name for p in out_dir.iterdir()) if out_dir.is_dir() else []
        hint = (" (export_type db: ascend_pytorch_profiler_<rank>.db is missing)"
                if any(h.endswith(".db") for h in have) else "")
        raise IncompleteRankError(f"{out_dir}: no {KERNEL_FILE}{hint}; found {have or 'nothing'}")
    sources = [kernel_path]
    rank, rank_from = rank_of(rank_dir)
    trace = _read_trace_view(out_dir / "trace_view.json") if _optional_file(out_dir / "trace_view.json") else None
    if trace is not None:
        sources.append(out_dir / "trace_view.json")
    comm_ops, comm_hashes = None, {}
    comm_path = out_dir / "communication.json"
    if _optional_file(comm_path):
        comm_ops, comm_hashes = _read_communication(comm_path)
        sources.append(comm_path)
    step_trace = None
    st_path = out_dir / "step_trace_time.csv"
    if _optional_file(st_path):
        step_trace = read_step_trace(st_path)
        sources.append(st_path)
    meta_groups = {}
    meta_path = rank_dir / "profiler_metadata.json"
    if _optional_file(meta_path):
        meta_groups = _parallel_groups(meta_path)
        sources.append(meta_path)
    links = None
    matrix_path = out_dir / "communication_matrix.json"
    if _optional_file(matrix_path):
        links = read_matrix(matrix_path)
        sources.append(matrix_path)
    # the CSV last: the JSON files' parse objects are gone before its columns arrive (a lower peak)
    kernels = _read_kernel_details(kernel_path)
    events, unplaced, comm_groups = _events(kernels, trace, kernel_path, columns)  # empties ``kernels`` as it goes
    bytes_from = BYTES_MESSAGE if trace is not None and len(trace.comm) else ""
    if not bytes_from and comm_ops is not None and comm_ops["bytes"].notna().any():
        # without trace_view.json the only sizes are what each op moved over the links
        events = _transit_bytes(events, comm_ops)
        bytes_from = BYTES_TRANSIT
    steps = _steps(events, trace)
    groups = _groups(events, comm_hashes, meta_groups, trace, comm_groups)
    return AscendRank(rank, rank_from, events, steps, step_trace, comm_ops, groups, unplaced, sources,
                      links, bytes_from if events["bytes"].notna().any() else "")


def rank_of_file(path: Path) -> tuple[int | None, str]:
    """Rank of the ``*_ascend_pt`` folder that holds a profiler file (e.g. a bare step_trace_time.csv)."""
    parent = Path(path).resolve().parent
    return rank_of(parent.parent if parent.name == OUTPUT_DIR else parent)


def _transit_bytes(events: pd.DataFrame, comm_ops: pd.DataFrame) -> pd.DataFrame:
    """communication.json transit bytes onto the comm events of the same op name (unique names only)."""
    sizes = comm_ops.drop_duplicates("name", keep=False).set_index("name")["bytes"]
    is_comm = (events["kind"] == "comm").to_numpy()
    found = events.loc[is_comm, "name"].map(sizes)
    # in place: the table is this read's own (a copy was a second 1M-row table at the reader's peak)
    events.loc[is_comm, "bytes"] = pd.array(found.to_numpy(), dtype="Int64")
    return events


def _optional_file(path: Path) -> bool:
    """True for a file, False when absent; something else under that name is an input error."""
    if not os.path.lexists(path):
        return False
    why = input_problem(path)  # a folder, FIFO, dangling link or loop where the profiler writes a file
    if why:
        raise InputError(why)
    return True


def rank_of(rank_dir: Path) -> tuple[int | None, str]:
    """Rank from profiler_info_<rank>.json (rank_id, else the file name), else the folder name."""
    infos = sorted(rank_dir.glob("profiler_info*.json"))
    for info in infos:
        why = input_problem(info)  # a FIFO would block the reader, a dangling link holds no rank
        if why:
            raise InputError(why)
        data = load_json(info, "profiler info JSON")
        rid = as_int(data.get("rank_id")) if isinstance(data, dict) else None
        if rid is not None and rid >= 0:
            return limits.integer(rid, f"{info}: rank_id", 0, limits.MAX_RANK_ID), f"{info.name} rank_id"
        m = re.fullmatch(r"profiler_info_(\d+)\.json", info.name)
        if m:
            return limits.integer(m.group(1), f"{info}: rank in the file name", 0, limits.MAX_RANK_ID), \
                f"{info.name} file name"
    m = re.search(r"rank[_-]?(\d+)", rank_dir.name, re.I)
    if m:
        return limits.integer(m.group(1), f"{rank_dir}: rank in the folder name", 0, limits.MAX_RANK_ID), \
            f"folder name {rank_dir.name}"
    return None, "unknown"


_TIME_COLUMNS = ("Start Time(us)", "Duration(us)")


def _read_kernel_details(path: Path) -> dict[str, object]:
    """The needed columns of kernel_details.csv as chunked Arrow string arrays (nothing else is parsed)."""
    import pyarrow as pa
    from pyarrow import csv as pacsv

    header = _csv_header(path)
    missing = [c for c in REQUIRED_KERNEL_COLUMNS if c not in header]
    if missing:
        raise InputError(f"{path}: missing column(s) {missing}; have {header}")
    use = [c for c in (*REQUIRED_KERNEL_COLUMNS, *OPTIONAL_KERNEL_COLUMNS) if c in header]
    twice = [c for c in use if header.count(c) > 1]
    if twice:
        raise InputError(f"{path}: column(s) {twice} appear more than once in the header; expected each once")
    # our own column names: the header text (BOM, spaces) never decides what is found
    slots = [f"c{i}" for i in range(len(header))]
    want = {f"c{header.index(c)}": c for c in use}
    # times as text (parsed exactly later); the other columns repeat a few values: dictionary-encoded
    # while parsing, which costs less than text columns encoded afterwards and holds less
    types = {k: pa.string() if want[k] in _TIME_COLUMNS else pa.dictionary(pa.int32(), pa.string()) for k in want}
    try:
        table = pacsv.read_csv(
            path,
            read_options=pacsv.ReadOptions(column_names=slots, skip_rows=1),  # 1 MB blocks: less memory
            parse_options=pacsv.ParseOptions(newlines_in_values=False),
            convert_options=pacsv.ConvertOptions(
                include_columns=list(want), column_types=types,
                strings_can_be_null=False, quoted_strings_can_be_null=False, null_values=[]),
        ).unify_dictionaries()  # one dictionary per column instead of one per block
    except (pa.ArrowInvalid, OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot parse as CSV ({_first_line(exc)})") from None
    if table.num_rows == 0:
        raise InputError(f"{path}: header only, no kernel rows (was the profiler stopped before a step ended?)")
    return {want[k]: table.column(k) for k in want} | {"__rows__": table.num_rows}  # chunked: no copy


def _release_arrow_memory() -> None:
    import pyarrow as pa

    pa.default_memory_pool().release_unused()


def _coded(array: object) -> tuple[np.ndarray, list[str]]:
    """Codes and distinct stripped texts of an Arrow string array (one Python string per distinct value)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    encoded = pc.dictionary_encode(array)
    if isinstance(encoded, pa.ChunkedArray):
        chunks = encoded.chunks
        # Arrow encodes every chunk against one dictionary; should a version not, combine first
        if not chunks or any(not c.dictionary.equals(chunks[-1].dictionary) for c in chunks):
            return _coded(array.combine_chunks())
        indices, dictionary = pa.chunked_array([c.indices for c in chunks]), chunks[-1].dictionary
    else:
        indices, dictionary = encoded.indices, encoded.dictionary
    codes = indices.to_numpy(zero_copy_only=False)  # int32: half the memory of int64 codes
    texts = [t.strip() for t in dictionary.to_pylist()]
    return codes, texts


def _int_from_codes(codes: np.ndarray, texts: list[str], where: str, allow_empty: bool = True) -> pd.Series:
    """Integer column from codes and distinct texts; empty and N/A cells become NA when allowed."""
    parsed = _int_texts(codes, texts, where, allow_empty)
    # values and mask taken by the codes as plain arrays (an Int64 array's own take costs 4x more)
    values = np.array([0 if v is pd.NA else v for v in parsed] or [0], dtype=np.int64)
    missing = np.array([v is pd.NA for v in parsed] or [True], dtype=bool)
    return pd.Series(pd.arrays.IntegerArray(values[codes], missing[codes]), copy=False)


def _int_texts(codes: np.ndarray, texts: list[str], where: str, allow_empty: bool = True) -> list[object]:
    """The integer (or NA) of each distinct text; the first row of a text that is neither is named."""
    parsed: list[object] = []
    for text in texts:
        if text in _EMPTY and allow_empty:
            parsed.append(pd.NA)
        elif re.fullmatch(r"-?\d{1,18}", text):
            parsed.append(int(text))
        else:
            parsed.append(None)  # bad
    bad = [i for i, v in enumerate(parsed) if v is None]
    if bad:
        row = int(np.flatnonzero(np.isin(codes, bad))[0])
        raise InputError(f"{where}: line {row + 2}: expected an integer, got {texts[codes[row]]!r}")
    return parsed


def _csv_header(path: Path) -> list[str]:
    files.regular_input(path)   # a profile's CSV is a saved file: a FIFO or device is named, never read
    try:
        with open(path, encoding="utf-8", newline="") as fh:
            row = next(csv.reader(fh), None)
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise InputError(f"{path}: cannot read the CSV header ({_first_line(exc)})") from None
    if not row:
        raise InputError(f"{path}: empty file; expected a CSV header line")
    header = [c.strip().lstrip("\ufeff") for c in row]
    twice = sorted({c for c in header if header.count(c) > 1})
    if twice:
        raise InputError(f"{path}: column(s) {twice} appear more than once in the header")
    return header


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


_EMPTY = frozenset({"", "N/A", "NA", "None"})


def _int_column(values: pd.Series, where: str, allow_empty: bool) -> pd.Series:
    """Parse an integer column (distinct values only); empty and N/A cells become NA when allowed."""
    codes, uniques = factorize(values)
    return _int_from_codes(np.asarray(codes, dtype=np.int64), [text_of(u) for u in uniques], where, allow_empty)


#: event columns read_rank itself reads after _events (steps, message bytes): always in its table
_READER_COLUMNS = frozenset({"rank", "start_ns", "dur_ns", "step", "kind", "name", "bytes"})


def _events(kernels: dict[str, object], trace: _TraceView | None, path: Path,
            columns: frozenset[str] | None = None) -> tuple[pd.DataFrame, dict, set[str] | None]:
    """The event table of kernel_details' columns, its unplaced names and the groups of its comm rows (None:
    read them from the table); each Arrow column is let go once parsed (a lower peak). ``columns``: the event
    columns wanted (None: all); every cell is checked either way, columns not wanted are not built."""
    n = int(kernels["__rows__"])
    if trace is not None and len(trace.comm):
        columns = None  # its comm ops may join the table (_attach_trace_comm): every column
    keep = COLUMNS.keys() if columns is None else _READER_COLUMNS | columns
    where = f"{path}: column"
    start = us_to_ns_arrow(kernels.pop("Start Time(us)"), where=f"{where} 'Start Time(us)'", first_row=2,
                           row_label="line")
    dur_text = kernels.pop("Duration(us)")
    dur = us_to_ns_arrow(dur_text, where=f"{where} 'Duration(us)'", first_row=2, row_label="line")
    if (dur < 0).any():
        i = int(np.flatnonzero(dur < 0)[0])
        raise InputError(f"{path}: line {i + 2}: negative Duration(us) {dur_text[i].as_py()!r}")
    del dur_text
    _release_arrow_memory()  # the time texts and the parse's scratch
    check_times(start, dur, f"{path}: row")
    require_durations(dur, f"{path}: column 'Duration(us)'")
    names = _coded(kernels.pop("Name"))
    types = _coded(kernels.pop("Type")) if "Type" in kernels else (np.zeros(n, dtype=np.int32), [""])
    cores = _coded(kernels.pop("Accelerator Core"))
    decided = classify.classify_ascend_coded(names, types, cores, per_row_names=bool({"family", "group"} & keep))
    del types
    step = (_int_from_codes(*_coded(kernels.pop("Step Id")), f"{path}: column 'Step Id'")
            if "Step Id" in kernels else pd.Series(pd.NA, index=range(n), dtype="Int64"))
    device = None
    if "Device_id" in kernels:
        d_codes, d_texts = _coded(kernels.pop("Device_id"))
        if "device" in keep:
            device = _int_from_codes(d_codes, d_texts, f"{path}: column 'Device_id'")
        else:  # checked, not built
            _int_texts(d_codes, d_texts, f"{path}: column 'Device_id'")
        del d_codes
    elif "device" in keep:
        device = (pd.Series(trace.device, index=range(n), dtype="Int64") if trace is not None and
                  trace.device is not None else pd.Series(pd.NA, index=range(n), dtype="Int64"))
    if "Stream ID" in kernels:
        s_codes, s_texts = _coded(kernels.pop("Stream ID"))
        s_values = np.array(["" if t == "N/A" else t for t in s_texts] or [""], dtype=object)
    else:
        s_codes, s_values = None, np.array([""], dtype=object)
    is_comm = decided.comm
    # a comm row's stream is its communicator (one label per distinct decision, not one group lookup per row)
    labels = (np.array([f"comm:{g}" if k == "comm" else "" for k, _, g in decided.distinct], dtype=object)
              if is_comm.any() else None)

    def stream_at(rows: np.ndarray | None = None) -> np.ndarray:
        """The stream column (at ``rows``; None: every row)."""
        at = slice(None) if rows is None else rows
        out = s_values[s_codes[at]] if s_codes is not None else np.full(n if rows is None else len(rows), "",
                                                                          dtype=object)
        if labels is not None:
            comm = is_comm[at]
            out[comm] = labels[decided.codes[at][comm]]
        return out

    stream = stream_at() if "stream" in keep else None
    c_codes, c_texts = cores
    core = (np.array(["" if t == "N/A" else t for t in c_texts] or [""], dtype=object)[c_codes]
            if "core" in keep else None)
    dup = _duplicate_rows(names[0], start, dur, c_codes, stream_at if stream is None else stream, step, path)
    del cores, c_codes
    s_codes = None  # stream_at is done with: the codes go
    kernels.clear()  # the CSV columns are no longer needed: free them before the table is built
    _release_arrow_memory()

    def obj(values: np.ndarray) -> pd.Series:  # plain object columns (no string-dtype inference)
        return pd.Series(values, dtype=object, copy=False)

    built = {
        "rank": lambda: np.zeros(n, dtype=np.int64),
        "device": lambda: device,
        "stream": lambda: obj(stream),
        "kind": lambda: obj(decided.kind),
        "core": lambda: obj(core),
        "name": lambda: obj(np.array(names[1] or [""], dtype=object)[names[0]]),
        "family": lambda: obj(decided.family),  # built when kept (per_row_names above)
        "group": lambda: obj(decided.group),
        "start_ns": lambda: start,
        "dur_ns": lambda: dur,
        "step": lambda: step,
        "bytes": lambda: pd.Series(pd.NA, index=range(n), dtype="Int64"),
    }
    # in the event table's order; the columns are fresh: no consolidating copy
    table = pd.DataFrame({c: built[c]() for c in COLUMNS if c in keep}, copy=False)
    if dup is not None:
        table = table.loc[~dup].reset_index(drop=True)
    unplaced = dict(decided.unclassified)
    # the groups of the comm rows, from the distinct decisions (a row left out as a duplicate repeats a kept one)
    comm_groups = {g for k, _, g in decided.distinct if k == "comm"}
    if trace is not None and len(trace.comm):
        table = _attach_trace_comm(table, trace)
        comm_groups = None  # its ops may have been added: _groups reads them from the table
    return (make_events(table) if columns is None else table), unplaced, comm_groups


def _duplicate_rows(name_codes: np.ndarray, start: np.ndarray, dur: np.ndarray, core_codes: np.ndarray,
                    stream: np.ndarray | Callable[[np.ndarray], np.ndarray], step: pd.Series,
                    path: Path) -> np.ndarray | None:
    """Mask of rows identical to an earlier one in every column read (warned once), else None. ``stream``: the
    column, or what gives it at some rows."""
    dup = duplicate_mask(start, lambda rows: {
        "name": name_codes[rows], "dur": dur[rows], "core": core_codes[rows],
        "stream": stream(rows) if callable(stream) else stream[rows],
        "step": step.iloc[rows].fillna(-1).to_numpy(dtype=np.int64)})
    if dup is not None:
        warn_duplicates(path, int(dup.sum()), f"line {int(np.flatnonzero(dup)[0]) + 2}")
    return dup


def _attach_trace_comm(table: pd.DataFrame, trace: _TraceView) -> pd.DataFrame:
    """Message bytes from trace_view comm ops; the ops themselves when kernel_details lacks them."""
    comm = trace.comm
    is_comm = table["kind"] == "comm"
    if is_comm.any():
        # op names are unique per capture (index counts up per group); match by name, and by
        # (name, start) where a name repeats. Start stamps of the two files can differ by 1 ns.
        names = table.loc[is_comm, "name"]
        unique = comm.drop_duplicates("name", keep=False).set_index("name")["bytes"]
        found = names.map(unique)
        repeated = found.isna() & names.isin(comm["name"])
        if repeated.any():
            exact = comm.drop_duplicates(["name", "start_ns"]).set_index(["name", "start_ns"])["bytes"]
            keys = pd.MultiIndex.from_frame(table.loc[is_comm & repeated.reindex(table.index, fill_value=False),
                                                      ["name", "start_ns"]])
            found.loc[repeated] = exact.reindex(keys).to_numpy()
        table.loc[is_comm, "bytes"] = pd.array(found.to_numpy(), dtype="Int64")
        return table
    extra = comm.copy()
    decided = classify.classify_ascend(extra["name"], pd.Series([""] * len(extra)),
                                       pd.Series(["COMMUNICATION"] * len(extra)))
    extra["kind"] = decided.kind
    extra["family"] = decided.family
    extra["group"] = decided.group
    extra["stream"] = "comm:" + pd.Series(decided.group).astype(str)
    extra["core"] = "COMMUNICATION"
    extra["rank"] = 0
    extra["device"] = pd.array([trace.device] * len(extra), dtype="Int64")
    extra["step"] = pd.array([pd.NA] * len(extra), dtype="Int64")
    both = pd.concat([table, make_events(extra)], ignore_index=True)
    return both.sort_values("start_ns", kind="stable").reset_index(drop=True)


@dataclass
class _TraceView:
    comm: pd.DataFrame  # name, start_ns, dur_ns, bytes, thread_group
    host_steps: pd.DataFrame  # step, start_ns, end_ns
    device: int | None
    group_threads: list[str]


def _read_trace_view(path: Path) -> _TraceView | None:
    """Comm ops of the HCCL/Communication process, ProfilerStep#N spans, the NPU device label."""
    if not path.is_file():
        return None
    procs: dict[object, str] = {}
    threads: dict[tuple[object, object], str] = {}
    labels: dict[object, str] = {}
    candidates: list[dict] = []
    steps: list[tuple[int, object, object]] = []
    for ev in iter_trace(path):
        ph = ev.get("ph")
        name = ev.get("name")
        if ph == "M":
            args = ev.get("args") if isinstance(ev.get("args"), dict) else {}
            if name == "process_name":
                procs[hashable(ev.get("pid"))] = str(args.get("name", ""))
            elif name == "thread_name":
                threads[(hashable(ev.get("pid")), hashable(ev.get("tid")))] = str(args.get("name", ""))
            elif name == "process_labels":
                labels[hashable(ev.get("pid"))] = str(args.get("labels", ""))
        elif ph == "X" and isinstance(name, str):
            if name.startswith("hcom_"):
                candidates.append(ev)
            elif name.startswith("ProfilerStep#"):
                m = _STEP_NAME.match(name)
                if m:
                    steps.append((int(m.group("step")), ev.get("ts"), ev.get("dur")))
    comm_pids = {pid for pid, pname in procs.items() if pname in _COMM_PROCESSES}
    rows = []
    group_threads = sorted({t for (pid, _), t in threads.items() if pid in comm_pids and _GROUP_THREAD.match(t)})
    for ev in candidates:
        pid, tid = hashable(ev.get("pid")), hashable(ev.get("tid"))
        if pid not in comm_pids:
            continue
        tname = threads.get((pid, tid), "")
        m = _GROUP_THREAD.match(tname)
        if not m:
            continue  # Plane k tasks are parts of an op, not ops
        args = ev.get("args") if isinstance(ev.get("args"), dict) else {}
        rows.append((ev.get("name"), ev.get("ts"), ev.get("dur", "0"), args.get("count"),
                     str(args.get("data_type", "")).upper(), m.group("group")))
    where = f"{path}: communication op"
    comm = pd.DataFrame(rows, columns=["name", "ts", "dur", "count", "dtype", "thread_group"])
    comm["start_ns"] = us_to_ns(comm["ts"], where=f"{where} ts")
    comm["dur_ns"] = us_to_ns(comm["dur"], where=f"{where} dur")
    check_times(comm["start_ns"].to_numpy(np.int64), comm["dur_ns"].to_numpy(np.int64), where)
    size = comm["dtype"].map(HCCL_DTYPE_BYTES).to_numpy(float)
    count = pd.to_numeric(comm["count"].map(lambda v: v if isinstance(v, (int, str)) else None),
                          errors="coerce").to_numpy(float)
    comm["bytes"] = byte_counts(count * size)
    comm = comm.drop(columns=["ts", "dur", "count", "dtype"])
    step_rows = pd.DataFrame(steps, columns=["step", "ts", "dur"])
    host_start = us_to_ns(step_rows["ts"], where=f"{path}: ProfilerStep ts")
    host_dur = us_to_ns(step_rows["dur"], where=f"{path}: ProfilerStep dur")
    check_times(host_start, host_dur, f"{path}: ProfilerStep")
    host = pd.DataFrame({"step": step_rows["step"].astype(np.int64), "start_ns": host_start,
                         "end_ns": host_start + host_dur})
    npu = [lab for lab in labels.values() if lab.startswith("NPU")]
    device = None
    for lab in npu:
        m = re.fullmatch(r"NPU (\d+)", lab)
        if m:
            device = int(m.group(1))
    return _TraceView(comm, host, device, group_threads)


def _steps(events: pd.DataFrame, trace: _TraceView | None) -> pd.DataFrame:
    """Step windows: [first task start, last task end] of the tasks with that Step Id.

    torch_npu ends a step at max(device end of its last launched task, host ProfilerStep end);
    when trace_view.json gives the host span, the window end is extended the same way.
    """
    has_step = events["step"].notna()
    if not has_step.any():
        if len(events) == 0:
            return pd.DataFrame(columns=list(STEP_COLUMNS))
        start = int(events["start_ns"].min())
        end = int((events["start_ns"] + events["dur_ns"]).max())
        return pd.DataFrame({"rank": [0], "step": pd.array([pd.NA], dtype="Int64"),
                             "start_ns": [start], "end_ns": [end]})
    rows = has_step.to_numpy()
    win = _step_windows(events["step"].to_numpy(np.int64, na_value=0)[rows],
                        events["start_ns"].to_numpy(np.int64)[rows], events["dur_ns"].to_numpy(np.int64)[rows])
    if trace is not None and len(trace.host_steps):
        host_end = trace.host_steps.groupby("step")["end_ns"].max()
        ext = win["step"].astype("int64").map(host_end)
        win["end_ns"] = np.where(ext.notna(), np.maximum(win["end_ns"], ext.fillna(0).astype(np.int64)),
                                 win["end_ns"])
    win.insert(0, "rank", 0)
    win["step"] = win["step"].astype("Int64")
    win["start_ns"] = win["start_ns"].astype(np.int64)
    win["end_ns"] = win["end_ns"].astype(np.int64)
    return win[list(STEP_COLUMNS)].reset_index(drop=True)


def _step_windows(step: np.ndarray, start: np.ndarray, dur: np.ndarray) -> pd.DataFrame:
    """step, start_ns (first start), end_ns (last end) of each step, in step order."""
    end = start + dur
    lo, hi = int(step.min()), int(step.max())
    if hi - lo >= 4 * step.size + 4096:  # sparse step numbers: a table per number would be mostly empty
        frame = pd.DataFrame({"step": step, "start_ns": start, "end_ns": end})
        return frame.groupby("step").agg(start_ns=("start_ns", "min"), end_ns=("end_ns", "max")).reset_index()
    at = step - lo
    first = np.full(hi - lo + 1, np.iinfo(np.int64).max, dtype=np.int64)
    last = np.full(hi - lo + 1, np.iinfo(np.int64).min, dtype=np.int64)
    np.minimum.at(first, at, start)
    np.maximum.at(last, at, end)
    seen = np.flatnonzero(np.bincount(at, minlength=hi - lo + 1))
    return pd.DataFrame({"step": seen + lo, "start_ns": first[seen], "end_ns": last[seen]})


def read_text_table(path: Path, need: list[str]) -> pd.DataFrame:
    """A profiler CSV as text cells, after checking that the columns in `need` are there (named if not)."""
    header = _csv_header(path)
    missing = [c for c in need if c not in header]
    if missing:
        raise InputError(f"{path}: missing column(s) {missing}; have {header}")
    try:
        frame = pd.read_csv(path, dtype=str, keep_default_na=False, na_filter=False)
    except (ValueError, UnicodeDecodeError, pd.errors.ParserError) as exc:
        raise InputError(f"{path}: cannot parse as CSV ({_first_line(exc)})") from None
    frame.columns = [c.strip().lstrip("\ufeff") for c in frame.columns]
    return frame


def read_step_trace(path: Path) -> pd.DataFrame:
    """step_trace_time.csv (with or without Device_id) as ProfileSet.step_trace rows (rank 0)."""
    frame = read_text_table(path, ["Step", *[h for h in STEP_TRACE_HEADER if h != "Bubble"]])
    out = pd.DataFrame({"rank": np.zeros(len(frame), dtype=np.int64)})
    out["step"] = _int_column(frame["Step"], f"{path}: column 'Step'", True)
    for col, key in STEP_TRACE_HEADER.items():
        if col not in frame:
            out[key] = np.nan
            continue
        values = pd.to_numeric(frame[col].str.strip(), errors="coerce")
        bad = values.isna() | ~np.isfinite(values) | (values < 0)
        if bad.any():
            i = int(np.flatnonzero(bad.to_numpy())[0])
            raise InputError(f"{path}: row {i + 2} column {col!r}: expected a finite time >= 0 us, "
                             f"got {frame[col].iat[i]!r}")
        out[key] = values.astype(float)
    if "Device_id" in frame:
        out["device"] = _int_column(frame["Device_id"], f"{path}: column 'Device_id'", True)
    return out[[*STEP_TRACE_COLUMNS, *(["device"] if "device" in out else [])]]


def _read_communication(path: Path) -> tuple[pd.DataFrame, dict[str, str]]:
    """communication.json -> per-op rows (us) and {3-digit group: full hash}."""
    raw = files.read_input(files.regular_input(path))
    try:  # each op cut to the fields _comm_row reads: a fraction of the memory of the whole parse
        text = raw.decode("utf-8")
        del raw
        fields = ("Start Timestamp(us)", *_TIME_FIELDS.values())
        rows, hashes = _communication_rows(path, comm_json.raw_ops(text),
                                           lambda op: comm_json.prune(op, fields, _TRANSPORTS,
                                                                           ("Transit Size(MB)", "Transit Time(ms)")))
        del text
    except (OSError, UnicodeDecodeError, comm_json.NotPlain):  # the whole parse names what is wrong, if anything
        rows, hashes = _communication_rows(path, load_json(path, "torch_npu communication.json"), lambda op: op)
    return _communication_frame(path, rows), hashes


def _communication_rows(path: Path, data: object, op_view: Callable[[object], object]) -> tuple[list[dict], dict]:
    """The op rows of a communication.json tree (``op_view`` gives each op's fields)."""
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected an object keyed by step, got {type(data).__name__}")
    rows = []
    hashes: dict[str, str] = {}
    for step_key, kinds in data.items():
        m = re.fullmatch(r"step(\d*)", str(step_key))
        if not m or not isinstance(kinds, dict):
            raise InputError(f"{path}: key {step_key!r}: expected 'step<N>' holding p2p/collective ops")
        step = int(m.group(1)) if m.group(1) else None
        for kind_key, ops in kinds.items():
            if not isinstance(ops, dict):
                raise InputError(f"{path}: {step_key}.{kind_key}: expected an object of ops")
            for op_key, op in ops.items():
                if op_key == "Total Op Info":
                    continue
                rows.append(_comm_row(path, step, str(op_key), op_view(op), hashes))
    return rows, hashes


def _communication_frame(path: Path, rows: list[dict]) -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=[c for c in COMM_OP_COLUMNS if c != "rank"] + ["start_text", "link_transit_us"])
    if len(frame):
        decided = classify.classify_ascend(frame["name"], pd.Series([""] * len(frame)),
                                           pd.Series(["COMMUNICATION"] * len(frame)))
        frame["family"] = decided.family
        frame["group"] = decided.group
    frame["start_ns"] = us_to_ns(frame["start_text"], where=f"{path}: Start Timestamp(us)")
    frame = frame.drop(columns=["start_text"])
    frame.insert(0, "rank", 0)
    frame["step"] = pd.array(frame["step"], dtype="Int64")
    frame["bytes"] = pd.array(frame["bytes"], dtype="Int64")
    return frame[[*COMM_OP_COLUMNS, "link_transit_us"]]


_TIME_FIELDS = {
    "elapse_us": "Elapse Time(ms)",
    "transit_us": "Transit Time(ms)",
    "wait_us": "Wait Time(ms)",
    "synchronization_us": "Synchronization Time(ms)",
    "idle_us": "Idle Time(ms)",
}
#: transports summed for transit bytes; SDMA aggregates the on-chip links and would count twice
_TRANSPORTS = ("HCCS", "PCIE", "SIO", "RDMA")


def _comm_row(path: Path, step: int | None, op_key: str, op: object, hashes: dict[str, str]) -> dict:
    where = f"{path}: op {op_key!r}"
    if not isinstance(op, dict) or "Communication Time Info" not in op:
        raise InputError(f"{where}: expected 'Communication Time Info'")
    name, _, full_hash = op_key.partition("@")
    info = op["Communication Time Info"]
    row: dict[str, object] = {"step": step, "name": name, "family": "", "group": "", "group_hash": full_hash}
    if not isinstance(info, dict) or "Start Timestamp(us)" not in info:
        raise InputError(f"{where}: expected 'Start Timestamp(us)' in 'Communication Time Info'")
    row["start_text"] = str(info["Start Timestamp(us)"])
    for key, field_name in _TIME_FIELDS.items():
        row[key] = _ms_to_us(info.get(field_name), f"{where}: {field_name}")
    total = 0.0
    have = False
    link_us = 0.0
    timed = False
    bw = op.get("Communication Bandwidth Info")
    if isinstance(bw, dict):
        for transport in _TRANSPORTS:
            t = bw.get(transport)
            if isinstance(t, dict) and "Transit Size(MB)" in t:
                total += _number(t["Transit Size(MB)"], f"{where}: {transport} Transit Size(MB)")
                have = True
            if isinstance(t, dict) and "Transit Time(ms)" in t:
                # every stream's transfer tasks on this transport, summed (the links' busy time, not wall clock)
                link_us += _ms_to_us(t["Transit Time(ms)"], f"{where}: {transport} Transit Time(ms)")
                timed = True
    if have and not (math.isfinite(total) and 0 <= total * 1e6 < 2**62):
        raise InputError(f"{where}: Transit Size(MB) total {total!r} is not a valid size")
    row["bytes"] = int(round(total * 1e6)) if have else None
    row["link_transit_us"] = link_us if timed else float("nan")
    m = classify.HCOM_NAME.match(name)
    if m and full_hash:
        hashes.setdefault(m.group("group"), full_hash)
    return row


def _number(value: object, where: str) -> float:
    try:
        return float(str(value))
    except ValueError:
        raise InputError(f"{where}: expected a number, got {value!r}") from None


def _ms_to_us(value: object, where: str) -> float:
    if value is None:
        return float("nan")
    ms = _number(value, where)
    if not (math.isfinite(ms) and ms >= 0):
        raise InputError(f"{where}: expected a finite time >= 0 ms, got {value!r}")
    return ms * 1000.0


def _parallel_groups(path: Path) -> dict[str, dict]:
    """profiler_metadata.json parallel_group_info: {group_name_<N>: {group_name, group_rank, global_ranks}}."""
    data = load_json(path, "profiler_metadata.json")
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected a JSON object (torch_npu's profiler_metadata.json), "
                         f"got {type(data).__name__}")
    info = data.get("parallel_group_info")
    if info is None:
        return {}
    if not isinstance(info, dict):
        raise InputError(f"{path}: parallel_group_info: expected an object keyed by group name")
    return {str(k): v for k, v in info.items() if isinstance(v, dict)}


def _groups(events: pd.DataFrame, hashes: dict[str, str], meta: dict[str, dict],
            trace: _TraceView | None, comm_groups: set[str] | None = None) -> dict[str, GroupInfo]:
    """Communicators: 3-digit id -> full hash (communication.json / double_hash) -> role. ``comm_groups``: the
    groups of the table's comm rows when the caller knows them (else found here)."""
    out: dict[str, GroupInfo] = {}
    for key, val in meta.items():
        full = str(double_hash(key))
        short = full[-3:]
        listed = val.get("global_ranks") if isinstance(val.get("global_ranks"), list) else []
        ranks = tuple(int(r) for r in listed if as_int(r) is not None)
        info = GroupInfo(group=short, name=key, role=str(val.get("group_name", "")), ranks=ranks, full_hash=full)
        if short in out and out[short].full_hash != full:
            prev = out[short]
            # the 3-digit id is ambiguous: keep both names so nobody silently picks one
            out[short] = GroupInfo(short, f"{prev.name}|{key}", f"{prev.role}|{info.role}", (), "")
        else:
            out[short] = info
    for short, full in hashes.items():
        if short not in out:
            out[short] = GroupInfo(group=short, full_hash=full)
    if trace is not None and len(trace.comm):
        for name, thread_group in trace.comm[["name", "thread_group"]].drop_duplicates("name").itertuples(index=False):
            m = classify.HCOM_NAME.match(str(name))
            if not m:
                continue
            short = m.group("group")
            info = out.setdefault(short, GroupInfo(group=short))
            if not info.name and thread_group:
                info.name = thread_group  # "0" in old data, "group_name_<N>" in newer data
    if comm_groups is None:
        _, is_comm = kind_masks(events)
        comm_groups = set(events["group"].to_numpy()[is_comm].tolist())
    for short in sorted(comm_groups):
        if short and short not in out:
            out[short] = GroupInfo(group=short)
    return out


_LINK_KEY = re.compile(r"^(?P<op>[A-Za-z0-9_]+)-total(?:@(?P<hash>.*))?$")


def read_matrix(path: Path) -> pd.DataFrame:
    """communication_matrix.json: the per-link totals (``<op>-total@<hash>``) of each step, in us and bytes."""
    data = load_json(path, "torch_npu communication_matrix.json")
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected an object keyed by step, got {type(data).__name__}")
    rows = []
    for step_key, kinds in data.items():
        m = re.fullmatch(r"step(\d*)", str(step_key))
        if not m or not isinstance(kinds, dict):
            raise InputError(f"{path}: key {step_key!r}: expected 'step<N>' holding p2p/collective links")
        step = int(m.group(1)) if m.group(1) else None
        for kind_key, ops in kinds.items():
            if not isinstance(ops, dict):
                raise InputError(f"{path}: {step_key}.{kind_key}: expected an object of ops")
            for op_key, links in ops.items():
                km = _LINK_KEY.match(str(op_key))
                if not km:
                    continue  # top/middle/bottom slices repeat what the total holds
                if not isinstance(links, dict):
                    raise InputError(f"{path}: {step_key}.{kind_key}.{op_key}: expected an object of links")
                for link, info in links.items():
                    where = f"{path}: {op_key} link {link!r}"
                    if not isinstance(info, dict):
                        raise InputError(f"{where}: expected an object")
                    size_mb = _number(info.get("Transit Size(MB)"), f"{where}: Transit Size(MB)")
                    time_us = _ms_to_us(info.get("Transit Time(ms)"), f"{where}: Transit Time(ms)")
                    bw = info.get("Bandwidth(GB/s)")
                    bw = _number(bw, f"{where}: Bandwidth(GB/s)") if bw is not None else float("nan")
                    for value, label in ((size_mb, "Transit Size(MB)"), (time_us, "Transit Time(ms)"), (bw, "Bandwidth(GB/s)")):
                        # only the bandwidth may be absent (NaN): a size or time that is not a number is damage
                        if not ((math.isnan(value) and label.startswith("Band"))
                                or (math.isfinite(value) and 0 <= value < 2**62 / 1e6)):
                            raise InputError(f"{where}: {label} {value!r} is not a valid non-negative number")
                    rows.append({"step": step, "op": km.group("op"), "group_hash": km.group("hash") or "",
                                 "link": str(link), "transport": str(info.get("Transport Type", "")),
                                 "bytes": int(round(size_mb * 1e6)), "transit_us": time_us,
                                 "profiler_bandwidth_GBps": bw})
    frame = pd.DataFrame(rows, columns=[c for c in LINK_COLUMNS if c != "rank"])
    frame.insert(0, "rank", 0)
    frame["step"] = pd.array(frame["step"], dtype="Int64")
    return frame[list(LINK_COLUMNS)]
