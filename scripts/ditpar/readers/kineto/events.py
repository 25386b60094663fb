"""msgspec structs of one Kineto event: only the members the reader uses (others are skipped while parsing).

Types are strict: a value of another type makes the whole file go the general reader's way
(``jsonstream.iter_trace``), which decides what it means. Times stay their decimal text
(``msgspec.Raw``) for the exact parser. Where a missing member and a null one mean different things
to the general reader, the field is ``UNSET`` when missing.
"""

from __future__ import annotations

from typing import ClassVar, Union

import msgspec
from msgspec import UNSET, Raw, Struct, UnsetType

__all__ = ["UNSET", "AnyEvent", "Args", "Event", "NO_ARGS"]


class Args(Struct, gc=False):
    """The ``args`` members of GPU activities, launches and collective annotations."""

    stream: int | str | None | UnsetType = UNSET
    correlation: int | None = None
    external: int | None = msgspec.field(default=None, name="External id")
    collective: str | None = msgspec.field(default=None, name="Collective name")
    pg: int | str | None = msgspec.field(default=None, name="Process Group Name")
    pg_desc: str | UnsetType = msgspec.field(default=UNSET, name="Process Group Description")
    pg_ranks: str | list[int] | UnsetType = msgspec.field(default=UNSET, name="Process Group Ranks")
    in_n: int | None = msgspec.field(default=None, name="In msg nelems")
    out_n: int | None = msgspec.field(default=None, name="Out msg nelems")
    dtype: str | UnsetType = UNSET


class Event(Struct, gc=False, tag_field="ph", tag="X"):
    """One complete event (``"ph": "X"``): the only phase the reader takes anything from."""

    ph: ClassVar[str] = "X"
    cat: str | None = None
    name: str = ""  # missing: "" (as the general reader takes it); null: not plain
    pid: int | str | None = None
    tid: int | str | None = None
    ts: Raw | UnsetType = UNSET
    dur: Raw | UnsetType = UNSET
    args: Args | None | UnsetType = UNSET


class OtherPhase(Struct, gc=False, tag_field="ph"):
    """An event of any other phase (flows, instants, counters, metadata...): skipped whole while parsing,
    as the general reader ignores them. It reads as an event with no category and no name."""

    ph: ClassVar[str] = ""
    cat: ClassVar[None] = None
    name: ClassVar[str] = ""


#: the phases of the Trace Event Format (Google's "Trace Event Format" document) other than X. A phase
#: outside this list (or a missing or non-string ph) fails the typed decoding: the general reader then
#: reads the trace, with the same result
OTHER_PHASES = ("B", "E", "i", "I", "C", "b", "n", "e", "S", "T", "p", "F", "s", "t", "f", "P", "O", "N", "D",
                "M", "V", "v", "R", "c", "(", ")")
AnyEvent = Union[(Event, *(msgspec.defstruct(f"Phase{ord(p)}", [], bases=(OtherPhase,), tag=p, gc=False)  # noqa: UP007
                           for p in OTHER_PHASES))]

#: the args of an event without any
NO_ARGS = Args()

#: the names of Args fields as the trace spells them
ARG_NAMES = {f.name: f.encode_name for f in msgspec.structs.fields(Args)}
