"""Damaged and hostile input, round 3: hang_doctor.py on Flight Recorder dumps that are not files, that
expand in memory, that carry sizes no job has, cells of the wrong type, or text that forges terminal lines.

Every case failed before the fix (a hang, a full memory, a crash, a traceback, a silent answer or a
misleading message); ``cases(base)`` writes the inputs under ``base`` (hooked into damaged_corpus.build).
"""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from damaged_corpus import Case

SCRIPT = "hang_doctor.py"
FORGED = "x\n\x1b[32mPASS: no hang\x1b[0m"   # a name that paints a fake verdict on a terminal
FORGED_SHOWN = r"x\n\x1b[32mPASS"             # how the one-line message must show it


def _shared_expansion(levels: int) -> list:
    """A list whose shared references stand for 2**levels leaves: a 1 kB pickle, a full memory once expanded."""
    node: list = [4]
    for _ in range(levels):
        node = [node, node]
    return node


def _deep_tuple_key_pickle(levels: int) -> bytes:
    """A pickle whose dict key is a tuple nested `levels` deep: hashing it overflows the C stack (SIGSEGV)."""
    return b"\x80\x02}q\x00)" + b"\x85" * levels + b"Ns."


def cases(base: Path) -> list[Case]:
    """Write the round-3 hang_doctor inputs under base and return their cases."""
    from damaged_corpus import Case, _fr_dump, _fr_entry  # here: damaged_corpus imports this module

    folder = base / "hang_r3"
    folder.mkdir(parents=True)
    good = json.dumps(_fr_dump([_fr_entry(1), _fr_entry(2)]))

    def dump(**changes: object) -> str:
        """A JSON dump whose second entry has the given keys replaced."""
        return json.dumps(_fr_dump([_fr_entry(1), {**_fr_entry(2), **changes}]))

    def top(**changes: object) -> str:
        return json.dumps({**_fr_dump([_fr_entry(1), _fr_entry(2)]), **changes})

    def write(name: str, rank0: str | bytes | None, rank1: str | bytes | None = good) -> Path:
        d = folder / name
        d.mkdir()
        for rank, content in ((0, rank0), (1, rank1)):
            if content is None:
                continue
            target = d / (f"fr_rank_{rank}" + ("" if isinstance(content, bytes) else ".json"))
            if isinstance(content, bytes):
                target.write_bytes(content)
            else:
                target.write_text(content, encoding="utf-8")
        return d

    def case(name: str, args: list[object], reason: str) -> Case:
        return Case(f"hang_doctor:r3-{name}", SCRIPT, [str(a) for a in args], reason=reason)

    out: list[Case] = []

    # --- inputs that are not files: named as what they are, never "no dump for rank 0" ------------
    d = write("fifo-in-folder", None)
    os.mkfifo(d / "fr_rank_0")
    out.append(case("fifo-in-folder", [d], "is a FIFO"))
    d = write("dangling-in-folder", None)
    os.symlink(d / "nowhere", d / "fr_rank_0")
    out.append(case("dangling-link-in-folder", [d], "does not exist"))
    d = write("loop-in-folder", None)
    os.symlink(d / "fr_rank_0", d / "fr_rank_0")
    out.append(case("link-loop-in-folder", [d], "loop"))
    d = write("device-in-folder", None)
    os.symlink("/dev/zero", d / "fr_rank_0")
    out.append(case("device-in-folder", [d], "is a device"))
    d = write("device-named", None)
    os.symlink("/dev/zero", d / "zero_rank_0")
    out.append(case("device-named", [d / "zero_rank_0", d / "fr_rank_1.json"], "is a device"))
    d = write("fifo-named", None)
    os.mkfifo(d / "fr_rank_0")
    out.append(case("fifo-named-without-writer", [d / "fr_rank_0", d / "fr_rank_1.json"], "no writer"))
    d = write("sparse-huge", None)
    with open(d / "fr_rank_0", "wb") as fh:
        fh.truncate(4 << 30)   # 4 GiB that take no disk: read whole, they filled memory
    out.append(case("sparse-huge-file", [d], "too large"))

    # --- parsers: BOM read, UTF-16 named, bounded literals, pickles that expand or nest -------------
    d = write("bom-then-utf16", "\ufeff" + good, good.encode("utf-16"))
    out.append(case("bom-read-utf16-named", [d], "UTF-16"))
    config = {"0": {"name": "0", "desc": "default_pg", "ranks": "[" + "0, " * 400_000 + "1]"}}
    out.append(case("rank-list-long", [write("long-ranks", top(pg_config=config))], "characters"))
    expand = pickle.dumps(_fr_dump([_fr_entry(1), {**_fr_entry(2), "input_sizes": _shared_expansion(40)}]),
                          protocol=2)
    out.append(case("pickle-shared-expansion", [write("expand", expand)], "shared references"))
    loop: list = []
    loop.append(loop)
    selfref = pickle.dumps(_fr_dump([_fr_entry(1), {**_fr_entry(2), "input_sizes": loop}]), protocol=2)
    out.append(case("pickle-self-reference", [write("selfref", selfref)], "refers to itself"))
    out.append(case("pickle-deep-tuple-key", [write("deep-tuple", _deep_tuple_key_pickle(1_000_000))], "nests"))
    out.append(case("json-deep", [write("deep-json", "[" * 100_000 + "]" * 100_000)], "nests"))
    forged_global = b"\x80\x02c" + FORGED.encode() + b"\nsystem\nq\x00."
    out.append(case("pickle-global-forged-name", [write("forged-global", forged_global)], r"\x1b[32mPASS"))

    # --- sizes without a bound: refused before anything is built ------------------------------------
    two = write("good", good)
    out.append(case("world-huge", [two, "--world", 10**12], "--world"))
    d = write("rank-huge", None, None)
    (d / "fr_rank_0.json").write_text(json.dumps({"entries": [_fr_entry(1)]}))
    (d / "fr_rank_99999999999.json").write_text(json.dumps({"entries": [_fr_entry(1)]}))
    out.append(case("rank-id-huge", [d, "--allow-missing-ranks"], "out of range"))
    d = write("world-from-names", None, None)
    (d / "fr_rank_0.json").write_text(json.dumps({"entries": [_fr_entry(1)]}))
    (d / "fr_rank_5000.json").write_text(json.dumps({"entries": [_fr_entry(1)]}))
    out.append(case("world-from-names-huge", [d, "--allow-missing-ranks"], "--world"))
    out.append(case("plan-product-huge", [two, "--plan", "U100000 R100000"], "at most 1024"))
    out.append(case("plan-degree-digits", [two, "--plan", "U" + "9" * 5000], "at most 1024"))
    out.append(case("groups-rank-huge", [two, "--groups", "0,99999999999999999999"], "out of range"))

    # --- cells of the wrong type or range: one line naming the dump, the entry and the key -----------
    cells = [("seq-bool", {"collective_seq_id": True}, "collective_seq_id"),
             ("seq-float", {"collective_seq_id": 1.5}, "collective_seq_id"),
             ("seq-2-70", {"collective_seq_id": 2**70}, "collective_seq_id"),
             ("time-text", {"time_created_ns": "soon"}, "time_created_ns"),
             ("time-2-70", {"time_created_ns": 2**70}, "time_created_ns"),
             ("record-id-negative", {"record_id": -1}, "record_id"),
             ("record-id-bool", {"record_id": True}, "record_id"),
             ("pg-id-list", {"pg_id": [1]}, "pg_id"),
             ("sizes-text", {"input_sizes": "x"}, "input_sizes"),
             ("sizes-negative", {"output_sizes": [[-4]]}, "output_sizes"),
             ("dtypes-int", {"input_dtypes": 3}, "input_dtypes"),
             ("state-int", {"state": 5}, "state"),
             ("is-p2p-text", {"is_p2p": "yes"}, "is_p2p"),
             ("pg-name-list", {"process_group": [["a"], "b"]}, "process_group"),
             ("profiling-name-none", {"profiling_name": None}, "profiling_name"),
             ("frames-text", {"frames": "abc"}, "frames")]
    for name, change, key in cells:
        out.append(case(f"cell-{name}", [write(f"cell-{name}", dump(**change))], f"entries[1]: '{key}"))
    groups = [("negative", "[-1, 0]"), ("outside-world", "[0, 7]"), ("bool", [True, False]),
              ("twice", "[0, 0, 1]"), ("text", "abc")]
    for name, ranks in groups:
        config = {**_fr_dump([])["pg_config"], "1": {"name": "1", "desc": "u", "ranks": ranks}}
        out.append(case(f"pg-config-{name}", [write(f"pg-config-{name}", top(pg_config=config))], "pg_config"))
    status = {"0": {"last_completed_collective": 2**70}}
    out.append(case("pg-status-huge", [write("pg-status-huge", top(pg_status=status))], "pg_status"))
    version = top(version={"a": 1})
    out.append(case("version-mapping", [write("version-mapping", version, version)], "version"))

    # --- group names and counts: tracebacks and quadratic time before ------------------------------
    for name, pg in (("group-name-5000-digits", "9" * 5000), ("group-name-superscript-digit", "\u00b2")):
        text = dump(process_group=[pg, "x"])
        out.append(Case(f"hang_doctor:r3-{name}", SCRIPT, [str(write(name, text, text)), "--json"], expect="any"))
    many = json.dumps({**_fr_dump([{**_fr_entry(1), "process_group": [str(i), "x"], "pg_id": i, "record_id": i}
                                   for i in range(1, 40_001)]),
                       "pg_status": {str(i): {"last_completed_collective": 1} for i in range(1, 40_001)}})
    out.append(Case("hang_doctor:r3-forty-thousand-groups", SCRIPT, [str(write("many-groups", many, many)), "--json"],
                    expect="any"))

    d = folder / "long-unrecorded-group"
    d.mkdir()
    calls = json.dumps({**_fr_dump([{**_fr_entry(k), "process_group": ["5", "x"], "pg_id": 5}
                                    for k in range(1, 20_001)]),
                        "pg_status": {"5": {"last_completed_collective": 20_000}}})
    for rank in range(4):
        (d / f"fr_rank_{rank}.json").write_text(calls.replace('"ranks": "[0, 1]"', '"ranks": "[0, 1, 2, 3]"'))
    out.append(Case("hang_doctor:r3-unrecorded-group-20000-calls", SCRIPT, [str(d), "--json"], expect="any"))

    # --- text from a dump echoed on the terminal: control characters shown escaped -------------------
    bad_seq = dump(profiling_name=f"gloo:{FORGED}", collective_seq_id="two")
    out.append(case("forged-op-in-message", [write("forged-op", bad_seq)], FORGED_SHOWN))
    lacking = json.dumps(_fr_dump([{"process_group": ["0", ""], FORGED: 1}]))
    out.append(case("forged-key-in-message", [write("forged-key", lacking)], FORGED_SHOWN))
    return out
