"""The one classifier of device tasks: kind (compute/comm/other), collective family and communicator.

Every reader calls it, so Ascend and Kineto profiles are grouped by the same rules. It works on the
distinct (name, type, core) combinations, not row by row, so a million rows cost a few thousand
decisions. Names it cannot place are counted in ``Classified.unclassified``, never guessed silently.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ditpar.core.events import KINDS

#: Ascend `Accelerator Core` values that mark a communication op (older CANN, CANN 8.3+)
ASCEND_COMM_CORES = frozenset({"HCCL", "COMMUNICATION"})

#: suffixes of HCCL helper kernels that msprof leaves out of Computing (AICPU/AIV-unfolded comm)
ASCEND_COMM_HELPER_SUFFIXES = ("AicpuKernel", "AivKernel")

#: HCCL op name: hcom_<op>__<last 3 digits of the communicator hash>_<index>[_<iter>]
HCOM_NAME = re.compile(r"^hcom_(?P<op>[A-Za-z]+)_(?:[A-Za-z]+_)*_(?P<group>\d+)_(?P<index>-?\d+)(?:_(?P<iter>-?\d+))?")
_HCOM_OP = re.compile(r"^hcom_(?P<op>[A-Za-z]+)")
_NCCL_KERNEL = re.compile(r"(?:^|[^A-Za-z])(?:nccl|rccl)(?:Dev)?Kernel_(?P<op>[A-Za-z]+)|^(?:nccl|rccl)", re.I)

#: operation token (lower case, no separators) -> family
OP_FAMILY: dict[str, str] = {
    "allreduce": "allreduce",
    "allgather": "allgather",
    "allgatherv": "allgather",
    "reducescatter": "reducescatter",
    "reducescatterv": "reducescatter",
    "alltoall": "alltoall",
    "alltoallv": "alltoallv",
    "alltoallvc": "alltoallv",
    "broadcast": "broadcast",
    "send": "send",
    "receive": "recv",
    "recv": "recv",
    "recvanysource": "recv",
    "batchsendrecv": "batchsendrecv",
    # known collectives without a family of their own
    "reduce": "other_comm",
    "scatter": "other_comm",
    "gather": "other_comm",
    "barrier": "other_comm",
}

#: suffixes PyTorch adds to `Collective name` that do not change the family
_COLLECTIVE_SUFFIXES = ("coalesced", "intotensor", "tensor", "base")


@dataclass
class Classified:
    """Per-row decisions plus the count of rows whose name could not be placed."""

    kind: np.ndarray
    #: None where the caller asked for the kinds only (classify_ascend_coded(per_row_names=False))
    family: np.ndarray | None
    group: np.ndarray | None
    unclassified: Counter = field(default_factory=Counter)
    #: rows of kind "comm" (from the distinct decisions: no string compare over every row)
    comm: np.ndarray | None = None
    #: each row's distinct decision (an index into ``distinct``) and those decisions (kind, family, group)
    codes: np.ndarray | None = None
    distinct: list[tuple[str, str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.comm is None:
            self.comm = np.asarray(self.kind == "comm", dtype=bool)


def op_family(token: str) -> str | None:
    """Family of an operation token such as 'allReduce', 'all_to_allv', '_allgather_base'."""
    key = re.sub(r"[^a-z]", "", token.lower())
    if key in OP_FAMILY:
        return OP_FAMILY[key]
    for suffix in _COLLECTIVE_SUFFIXES:
        if key.endswith(suffix) and key[: -len(suffix)] in OP_FAMILY:
            return OP_FAMILY[key[: -len(suffix)]]
    stripped = key
    for suffix in _COLLECTIVE_SUFFIXES:
        stripped = stripped.replace(suffix, "")
    return OP_FAMILY.get(stripped)


@functools.lru_cache(maxsize=1 << 16)
def ascend_one(name: str, type_: str, core: str) -> tuple[str, str, str, str | None]:
    """(kind, family, group, unplaced-label or None) for one distinct Ascend kernel row (remembered: every
    rank of a communicator names its HCCL ops alike, and a db rank classifies them twice)."""
    core_u = core.strip().upper()
    match = HCOM_NAME.match(name)
    group = match.group("group") if match else ""
    is_hcom = name.startswith("hcom_") or type_.startswith("hcom_")
    helper = name.endswith(ASCEND_COMM_HELPER_SUFFIXES) or type_.endswith(ASCEND_COMM_HELPER_SUFFIXES)
    if core_u not in ASCEND_COMM_CORES and not is_hcom:
        return "compute", "", "", None
    family, label = _ascend_family(name, type_)
    if helper and core_u not in ASCEND_COMM_CORES:
        # the op row itself carries the communication time; its AICPU/AIV kernels are not compute
        return "other", family or "other_comm", group, None
    if family is None:
        return "comm", "other_comm", group, label
    return "comm", family, group, None


def _ascend_family(name: str, type_: str) -> tuple[str | None, str]:
    for text in (type_, name):
        m = _HCOM_OP.match(text)
        if m:
            fam = op_family(m.group("op"))
            if fam:
                return fam, ""
    label = type_ if type_ and type_ != "N/A" else re.sub(r"(_-?\d+)+$", "", name)
    return None, label or "(empty name)"


def is_nccl_kernel(name: str) -> bool:
    """True for an NCCL/RCCL device kernel name (the kernels a collective annotation can describe)."""
    return bool(_NCCL_KERNEL.search(name))


def kineto_one(name: str, cat: str, collective: str) -> tuple[str, str, str | None]:
    """(kind, family, unplaced-label or None) for one distinct Kineto GPU activity."""
    if cat in ("gpu_memcpy", "gpu_memset"):
        return "other", "", None
    m = _NCCL_KERNEL.search(name)
    if not m:
        return "compute", "", None
    if collective:
        fam = op_family(collective)
        if fam:
            return "comm", fam, None
        return "comm", "other_comm", f"Collective name {collective!r}"
    op = m.group("op") or ""
    if op.lower() == "sendrecv":
        # all-to-all and send/recv both run as SendRecv kernels; without args we cannot tell
        return "comm", "other_comm", f"{_short(name)} without Collective name (all-to-all or send/recv?)"
    fam = op_family(op) if op else None
    if fam:
        return "comm", fam, None
    return "comm", "other_comm", _short(name)


def _short(name: str) -> str:
    return name.split("(")[0][:80]


def classify_ascend(names: pd.Series, types: pd.Series, cores: pd.Series) -> Classified:
    """Classify kernel_details rows (Name, Type, Accelerator Core columns)."""
    codes, uniques = _factorize(names, types, cores)
    decided = [ascend_one(n, t, c) for n, t, c in uniques]
    return _expand(codes, [(k, f, g) for k, f, g, _ in decided], [d[3] for d in decided])


def classify_ascend_coded(names: tuple[np.ndarray, list[str]], types: tuple[np.ndarray, list[str]],
                          cores: tuple[np.ndarray, list[str]], per_row_names: bool = True) -> Classified:
    """classify_ascend on columns given as (codes, distinct texts): one decision per distinct triple.
    ``per_row_names=False``: family and group are left None (each row's decision is in ``codes``)."""
    n = len(names[0])
    if n == 0:
        return _expand(np.zeros(0, dtype=np.int64), [], [])
    combined = np.zeros(n, dtype=np.int64)
    rows: list[tuple[str, ...]] = [()]
    for codes, texts in (names, types, cores):
        width = max(len(texts), 1)
        keys, combined = _unique_inverse(combined * width + codes)
        rows = [(*rows[k // width], texts[k % width]) for k in keys.tolist()]
    decided = [ascend_one(nm, t, c) for nm, t, c in rows]
    return _expand(combined, [(k, f, g) for k, f, g, _ in decided], [d[3] for d in decided], per_row_names)


def classify_kineto(names: pd.Series, cats: pd.Series, collectives: pd.Series,
                    groups: pd.Series) -> Classified:
    """Classify Kineto GPU activities (name, cat, args['Collective name'], args['Process Group Name'])."""
    codes, uniques = _factorize(names, cats, collectives)
    decided = [kineto_one(n, t, c) for n, t, c in uniques]
    out = _expand(codes, [(k, f, "") for k, f, _ in decided], [d[2] for d in decided])
    g_codes, g_uniques = pd.factorize(pd.Series(groups).reset_index(drop=True), use_na_sentinel=False)
    group = np.array([_str(v) for v in g_uniques] or [""], dtype=object)[g_codes]
    out.group = np.where(out.comm, group, "").astype(object)
    return out


def _str(value: object) -> str:
    return "" if value is None or (isinstance(value, float) and value != value) else str(value)


def _factorize(*columns: pd.Series) -> tuple[np.ndarray, list[tuple[str, ...]]]:
    """Codes of the distinct combinations of several columns, and those combinations as text."""
    n = len(columns[0])
    if n == 0:
        return np.zeros(0, dtype=np.int64), []
    combined = np.zeros(n, dtype=np.int64)
    rows: list[tuple[str, ...]] = [()]  # the text of each distinct combination so far
    for col in columns:
        codes, uniques = pd.factorize(pd.Series(col).reset_index(drop=True), use_na_sentinel=False)
        texts = [_str(v) for v in uniques]
        # keep the codes compact: renumber the combinations seen so far, then add this column
        keys, combined = _unique_inverse(combined * len(texts) + codes)
        rows = [(*rows[k // len(texts)], texts[k % len(texts)]) for k in keys.tolist()]
    return combined, rows


def _unique_inverse(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """np.unique(keys, return_inverse=True) for small non-negative keys by a lookup table (no sort)."""
    keys = np.asarray(keys, dtype=np.int64).ravel()
    top = int(keys.max()) + 1 if keys.size else 0
    if keys.size and (int(keys.min()) < 0 or top > max(4 * keys.size, 1 << 20)):
        uniq, inverse = np.unique(keys, return_inverse=True)
        return uniq, inverse.ravel().astype(np.int64)
    present = np.zeros(top, dtype=bool)
    present[keys] = True
    rank = np.cumsum(present, dtype=np.int64) - 1
    return np.flatnonzero(present), rank[keys]


def _expand(codes: np.ndarray, decided: list[tuple[str, str, str]], labels: list[str | None],
            per_row_names: bool = True) -> Classified:
    n_uniq = len(decided)
    kinds = np.array([d[0] for d in decided] or [""], dtype=object)
    unknown = sorted({str(k) for k in kinds.tolist()} - set(KINDS) - {""})
    if unknown:  # the event tables rely on it: the readers do not scan every row again
        raise ValueError(f"classifier returned unknown kind(s) {unknown}; expected one of {list(KINDS)}")
    fams = np.array([d[1] for d in decided] or [""], dtype=object)
    grps = np.array([d[2] for d in decided] or [""], dtype=object)
    counts = np.bincount(codes, minlength=n_uniq) if len(codes) else np.zeros(n_uniq, dtype=np.int64)
    unplaced: Counter = Counter()
    for i, label in enumerate(labels):
        if label:
            unplaced[label] += int(counts[i])
    return Classified(kinds[codes], fams[codes] if per_row_names else None, grps[codes] if per_row_names else None,
                      unplaced, (kinds == "comm")[codes], codes, [tuple(d) for d in decided])
