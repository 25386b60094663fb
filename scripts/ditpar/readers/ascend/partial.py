"""A torch_npu rank without kernel_details.csv that still has step trace or communication files.

Real multi-rank captures often lack kernel_details.csv on some ranks (the public CANN 8.3 level-2 set
has it on ranks 0 and 2 of 4). Such a rank takes part with what its files support: the profiler's
own step figures (step_trace_time.csv), per-op communication times (communication.json) and link
totals (communication_matrix.json). It has no device tasks, so nothing is recomputed for it;
``ProfileSet.partial_ranks`` names it and what it has, and every table says so.
"""

from __future__ import annotations

import os
from pathlib import Path

from ditpar.core.events import empty_events
from ditpar.core.profile import STEP_COLUMNS
from ditpar.readers.ascend import text as ascend

#: the files that let a rank without kernel_details.csv take part, and what each gives
EVIDENCE_FILES = {
    "step_trace_time.csv": "step_trace",
    "communication.json": "communication",
    "communication_matrix.json": "links",
}


def has_evidence(folder: Path) -> bool:
    """True for a rank folder without kernel_details.csv but with at least one EVIDENCE_FILES file."""
    out_dir = ascend.find_output_dir(folder)
    if os.path.lexists(out_dir / ascend.KERNEL_FILE):   # there but broken (dangling link, FIFO): not absent
        return False
    return any((out_dir / name).is_file() for name in EVIDENCE_FILES)


def has_summary(folder: Path) -> bool:
    """True when the rank folder holds at least one EVIDENCE_FILES file (kernel_details.csv or not)."""
    out_dir = ascend.find_output_dir(folder)
    return any((out_dir / name).is_file() for name in EVIDENCE_FILES)


def read_rank(folder: Path) -> ascend.AscendRank:
    """The side tables of a rank without device tasks; its event table is empty."""
    import pandas as pd

    out_dir = ascend.find_output_dir(folder)
    rank_dir = out_dir.parent if out_dir.name == ascend.OUTPUT_DIR else out_dir
    rank, rank_from = ascend.rank_of(rank_dir)
    sources: list[Path] = []
    step_trace = comm_ops = links = None
    hashes: dict[str, str] = {}
    if (out_dir / "step_trace_time.csv").is_file():
        step_trace = ascend.read_step_trace(out_dir / "step_trace_time.csv")
        sources.append(out_dir / "step_trace_time.csv")
    if (out_dir / "communication.json").is_file():
        comm_ops, hashes = ascend._read_communication(out_dir / "communication.json")
        sources.append(out_dir / "communication.json")
    if (out_dir / "communication_matrix.json").is_file():
        links = ascend.read_matrix(out_dir / "communication_matrix.json")
        sources.append(out_dir / "communication_matrix.json")
    meta_groups = {}
    if (rank_dir / "profiler_metadata.json").is_file():
        meta_groups = ascend._parallel_groups(rank_dir / "profiler_metadata.json")
        sources.append(rank_dir / "profiler_metadata.json")
    events = empty_events()
    groups = ascend._groups(events, hashes, meta_groups, None)
    read = ascend.AscendRank(rank, rank_from, events, pd.DataFrame(columns=list(STEP_COLUMNS)), step_trace,
                             comm_ops, groups, {}, sources, links, "transit" if comm_ops is not None else "")
    read.evidence = [EVIDENCE_FILES[p.name] for p in sources if p.name in EVIDENCE_FILES]
    return read
