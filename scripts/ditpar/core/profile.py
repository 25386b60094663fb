"""The in-memory result of reading one or many ranks' profiles: what every analysis receives.

Readers (``ditpar.readers``) fill a :class:`ProfileSet`; analyses never open files themselves.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

#: columns of ProfileSet.steps: one row per rank and step window
STEP_COLUMNS = ("rank", "step", "start_ns", "end_ns")

#: columns of ProfileSet.step_trace: the profiler's own per-step answer (Ascend step_trace_time.csv)
STEP_TRACE_COLUMNS = (
    "rank",
    "step",
    "computing_us",
    "communication_not_overlapped_us",
    "overlapped_us",
    "communication_us",
    "free_us",
    "stage_us",
    "bubble_us",
)

#: columns of ProfileSet.comm_ops: per-op detail where the profile has it (Ascend communication.json)
COMM_OP_COLUMNS = (
    "rank",
    "step",
    "name",
    "family",
    "group",
    "group_hash",
    "start_ns",
    "elapse_us",
    "transit_us",
    "wait_us",
    "synchronization_us",
    "idle_us",
    "bytes",
)
#: optional comm_ops columns, null where a reader lacks them: ``link_transit_us`` = communication.json's
#: per-transport Transit Time (every stream's transfer tasks, summed over links; what links[] sums)
COMM_OP_OPTIONAL = ("link_transit_us",)


#: columns of ProfileSet.links: per-link totals where the profile has them (Ascend communication_matrix.json)
LINK_COLUMNS = (
    "rank",
    "step",
    "op",
    "group_hash",
    "link",
    "transport",
    "bytes",
    "transit_us",
    "profiler_bandwidth_GBps",
)

#: what the bytes of comm events mean, per rank: the message (count x dtype) or what the rank moved
BYTES_MESSAGE = "message"
BYTES_TRANSIT = "transit"


@dataclass
class GroupInfo:
    """A communicator: its id as the event table writes it, and what metadata says about it."""

    group: str
    name: str = ""  # e.g. "group_name_20" or a Kineto process-group name
    role: str = ""  # e.g. "tp", "dp", "ulysses", from parallel_group_info / pg_desc
    ranks: tuple[int, ...] = ()
    full_hash: str = ""


def function_name(fn: Callable) -> str:
    """"module.name" of a module-level function: how a ProfileSet records what made its rank results."""
    return f"{fn.__module__}.{fn.__qualname__}"


@dataclass
class ProfileSet:
    """Events of all ranks plus the side tables a profile may carry."""

    events: pd.DataFrame
    steps: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=list(STEP_COLUMNS)))
    step_trace: pd.DataFrame | None = None
    comm_ops: pd.DataFrame | None = None
    groups: dict[str, GroupInfo] = field(default_factory=dict)
    unclassified: Counter = field(default_factory=Counter)
    sources: dict[int, list[Path]] = field(default_factory=dict)
    fmt: str = ""  # "ascend" or "kineto"
    links: pd.DataFrame | None = None
    #: rank -> BYTES_MESSAGE or BYTES_TRANSIT (ranks without sized comm events are absent)
    bytes_from: dict[int, str] = field(default_factory=dict)
    #: ranks left out because their files are incomplete: {"rank": int | None, "path": str, "reason": str}
    skipped: list[dict] = field(default_factory=list)
    #: set by load_profiles(per_rank=fn): rank -> fn(that rank's ProfileSet), computed where the rank
    #: was read; ``events`` is then empty (each rank's events stayed in its worker)
    rank_results: dict[int, object] | None = None
    #: the function that made ``rank_results`` ("module.name"), so a reader of them can check
    rank_results_of: str = ""
    #: the ranks that had events, when ``events`` was left empty (per_rank)
    event_ranks: list[int] | None = None
    #: ranks read without device tasks (no kernel_details.csv) -> what they have: "step_trace",
    #: "communication", "links"; they are not in ``ranks`` (readers/ascend/partial.py)
    partial_ranks: dict[int, list[str]] = field(default_factory=dict)
    #: True when ``links`` name global ranks already (msprof-analyze cluster output), not group-local ones
    links_global: bool = False
    #: set by load_profiles(per_rank=fn): the ranks with device tasks whose communication.json ops were used
    #: where the rank was read and not kept (``comm_ops`` then holds the ranks without device tasks only):
    #: every rank's ops would otherwise stay in this process, ~13 MB a rank of 77k ops
    comm_ops_used_ranks: list[int] = field(default_factory=list)

    def require_tasks(self, what: str) -> None:
        """InputError when no rank has device tasks: ``what`` needs kernel rows, the aggregates cannot give it."""
        if self.ranks or not self.partial_ranks:
            return
        from ditpar.errors import InputError

        have = "; ".join(f"rank {r}: {', '.join(v)}" for r, v in sorted(self.partial_ranks.items()))
        raise InputError(f"{what} needs device tasks (kernel_details.csv or a db export's TASK rows); "
                         f"no rank has them ({have})")

    def evidence(self) -> dict[int, list[str]]:
        """Every rank read -> what its files gave: "tasks", "step_trace", "communication", "links"."""
        out: dict[int, list[str]] = {}
        for rank in sorted({*self.ranks, *self.partial_ranks}):
            have = ["tasks"] if rank in self.ranks else []
            for key, table in (("step_trace", self.step_trace), ("communication", self.comm_ops),
                               ("links", self.links)):
                if ((table is not None and len(table) and bool((table["rank"] == rank).any()))
                        or (key == "communication" and rank in self.comm_ops_used_ranks)):
                    have.append(key)
            out[int(rank)] = have
        return out

    def rank_results_from(self, fn: Callable) -> dict[int, object] | None:
        """Each rank's result of ``fn`` when the set was read with ``load_profiles(per_rank=fn)``, else None."""
        if self.rank_results is not None and self.rank_results_of == function_name(fn):
            return self.rank_results
        return None

    @property
    def ranks(self) -> list[int]:
        if self.event_ranks is not None:
            return list(self.event_ranks)
        return sorted(int(r) for r in self.events["rank"].unique())
