"""hang_doctor.py on damaged and hostile dumps (round 3): how dumps are read (FIFOs, devices, byte-order
marks, pickles that expand or nest), the checks of every cell, the bounds on sizes, the escaping of every
name a dump can put on the terminal, and what the entries prove when members were not recorded. No torch
needed: the dumps are written by hand."""

from __future__ import annotations

import json
import os
import pickle
import threading
from pathlib import Path

import pytest
from conftest import run_script
from damaged_corpus import _fr_dump, _fr_entry
from ditpar.errors import InputError
from ditpar.hang import diverge, dumps, layout

FORGED = "x\n\x1b[32mPASS: no hang\x1b[0m"


def _write(folder: Path, docs: dict[int, dict | bytes | str], suffix: str = ".json") -> Path:
    folder.mkdir(exist_ok=True)
    for rank, doc in docs.items():
        target = folder / f"fr_rank_{rank}{suffix}"
        if isinstance(doc, bytes):
            target.write_bytes(doc)
        else:
            target.write_text(doc if isinstance(doc, str) else json.dumps(doc), encoding="utf-8")
    return folder


def _error(fn, *args) -> str:
    with pytest.raises(InputError) as info:
        fn(*args)
    return str(info.value)


# --- escaping ------------------------------------------------------------------------------------

def test_printable_escapes_what_moves_or_paints_a_terminal_line():
    assert dumps.printable(FORGED + "\r\t\x7f\x9b\u202e\u2028ok") == \
        r"x\n\x1b[32mPASS: no hang\x1b[0m\r\t\x7f\x9b\u202e\u2028ok"
    assert dumps.printable("gloo:all_reduce /a/b.py") == "gloo:all_reduce /a/b.py"


def test_shown_never_expands_a_value():
    assert dumps.shown(2**70) == "an integer of 71 bits"
    assert dumps.shown(-5) == "-5" and dumps.shown(True) == "True" and dumps.shown(1.5) == "1.5"
    assert dumps.shown([[1]] * 10**6) == "a list" and dumps.shown({"a": 1}) == "a dict"
    assert dumps.shown("a" * 100) == repr("a" * 60) + "..."
    assert dumps.shown(FORGED) == r"'x\n\x1b[32mPASS: no hang\x1b[0m'"


def test_names_from_a_dump_are_read_escaped(tmp_path):
    e = {**_fr_entry(1, op="all_gather\x1b[2J"), "process_group": ["0", FORGED],
         "frames": [{"name": "f\x1b[1m", "filename": "/u/mo\ndel.py", "line": 7}]}
    d = dumps.read_dump(_write(tmp_path, {0: _fr_dump([e])}) / "fr_rank_0.json")
    (entry,) = d.entries
    assert (entry.pg, entry.pg_desc, entry.op) == ("0", r"x\n\x1b[32mPASS: no hang\x1b[0m", r"all_gather\x1b[2J")
    assert entry.call_site == r"mo\ndel.py:7 (f\x1b[1m)"


def test_the_report_shows_forged_names_escaped(tmp_path):
    """rank 1's op and group description paint a fake 'PASS: no hang' line; the table shows them escaped."""
    forged = {**_fr_entry(2, op=FORGED.replace(" ", "_")), "process_group": ["0", FORGED],
              "frames": [{"name": "step", "filename": "/u/x.py\n\x1b[32mPASS", "line": 3}]}
    folder = _write(tmp_path / "d", {0: _fr_dump([_fr_entry(1), _fr_entry(2)]), 1: _fr_dump([_fr_entry(1), forged])})
    proc = run_script("hang_doctor.py", str(folder), check=1)
    assert "\x1b" not in proc.stdout and "\x1b" not in proc.stderr
    assert not [line for line in proc.stdout.splitlines() if "PASS" in line.split(r"\x1b[32m")[0]]
    assert r"rank 1: x\n\x1b[32mPASS:_no_hang\x1b[0m sizes [[4]] -> [[4]] ['Float'] state scheduled at " \
           r"x.py\n\x1b[32mPASS:3 (step)" in proc.stdout
    proc = run_script("hang_doctor.py", str(folder), "--csv", str(tmp_path / "h.csv"), check=1)
    assert "\x1b" not in (tmp_path / "h.csv").read_text()


# --- reading: files, FIFOs, devices, encodings -----------------------------------------------------

def test_a_dump_behind_a_utf8_byte_order_mark_is_read_and_utf16_named(tmp_path):
    text = json.dumps(_fr_dump([_fr_entry(1), _fr_entry(2)]))
    d = dumps.read_dump(_write(tmp_path, {0: "\ufeff" + text}) / "fr_rank_0.json")
    assert [e.seq for e in d.entries] == [1, 2] and d.fmt == "json"
    path = _write(tmp_path, {1: text.encode("utf-16")}) / "fr_rank_1.json"
    assert _error(dumps.read_dump, path) == (f"{path}: is UTF-16 text (as Windows PowerShell saves it); convert "
                                             "it to UTF-8, e.g. iconv -f UTF-16 -t UTF-8")


def test_a_fifo_given_by_name_is_read_once(tmp_path):
    fifo = tmp_path / "fr_rank_3"
    os.mkfifo(fifo)
    data = pickle.dumps(_fr_dump([_fr_entry(1)]), protocol=2)
    writer = threading.Thread(target=fifo.write_bytes, args=(data,))
    writer.start()
    (named,) = dumps.list_dump_files([str(fifo)])
    d = dumps.read_dump(named)
    writer.join()
    assert (d.rank, d.fmt, [e.seq for e in d.entries]) == (3, "pickle", [1])


def test_folder_members_that_are_not_files_are_named(tmp_path):
    folder = _write(tmp_path / "d", {1: _fr_dump([_fr_entry(1)])})
    os.mkfifo(folder / "pipe_1.pipe")          # torch's on-demand dump trigger: skipped
    (folder / "sub").mkdir()                   # folders: skipped
    assert dumps.list_dump_files([str(folder)]) == [folder / "fr_rank_1.json"]
    os.mkfifo(folder / "fr_rank_0")
    assert _error(dumps.list_dump_files, [str(folder)]) == (
        f"{folder}/fr_rank_0: is a FIFO, not a regular file; the tools read saved files "
        f"(in the dump folder {folder}; move it out)")
    os.unlink(folder / "fr_rank_0")
    os.symlink("/dev/zero", folder / "fr_rank_0")
    assert "fr_rank_0: is a device, not a regular file" in _error(dumps.list_dump_files, [str(folder)])
    os.unlink(folder / "fr_rank_0")
    os.symlink(folder / "gone", folder / "fr_rank_0")
    assert f"fr_rank_0: is a symbolic link to {folder}/gone, which does not exist" in \
        _error(dumps.list_dump_files, [str(folder)])


def test_devices_pipes_and_huge_files_are_refused_before_reading(tmp_path):
    link = tmp_path / "fr_rank_0"
    os.symlink("/dev/zero", link)
    assert _error(dumps.read_dump, link) == f"{link}: is a device, not a dump; give the files torch wrote"
    assert "a pipe has no file name to tell the rank by" in _error(dumps.read_dump, Path("/dev/fd/63"))
    big = tmp_path / "fr_rank_1"
    with open(big, "wb") as fh:
        fh.truncate(dumps.MAX_DUMP_BYTES + 1)
    assert _error(dumps.read_dump, big) == (f"{big}: 1,073,741,825 bytes is too large for a Flight Recorder dump "
                                            "(at most 1,073,741,824 read; 20,000 entries with stacks take tens of MB)")


def test_an_empty_dump_and_a_dump_named_twice_are_named(tmp_path):
    folder = _write(tmp_path, {0: "", 1: _fr_dump([_fr_entry(1)])})
    assert _error(dumps.read_dump, folder / "fr_rank_0.json") == (
        f"{folder}/fr_rank_0.json: is empty; a Flight Recorder dump is a pickle or JSON (a rank that was killed "
        "while dumping leaves an empty file)")
    one = str(folder / "fr_rank_1.json")
    assert _error(dumps.list_dump_files, [str(folder), one]) == f"{one}: given twice; name each rank's dump once"
    os.symlink(one, folder / "fr_rank_2.json")
    assert _error(dumps.list_dump_files, [str(folder)]) == (
        f"{folder}/fr_rank_2.json: given twice (also as {one}); name each rank's dump once")


def test_rank_ids_in_file_names_are_bounded():
    assert dumps.rank_of(Path("fr_rank_007.json")) == 7
    assert _error(dumps.rank_of, Path("fr_rank_1048576")) == (
        "fr_rank_1048576: rank in the file name: '1048576' is out of range; expected an integer 0..1048575")


# --- pickles: nothing runs, nothing expands, nothing overflows -------------------------------------

def test_deepest_tuple_reads_the_opcodes():
    assert dumps.deepest_tuple(pickle.dumps({(1, (2, (3,))): 1}, protocol=2)) == 3
    assert dumps.deepest_tuple(pickle.dumps(_fr_dump([{**_fr_entry(1), "process_group": ("0", "")}]), 2)) == 1
    t: tuple = ()
    for _ in range(99):
        t = (t,)
    assert dumps.deepest_tuple(pickle.dumps([t, t], protocol=4)) == 100   # memoised: the second is a GET


def test_a_tuple_key_nested_a_million_deep_crashes_a_trial_load_not_the_tool(tmp_path, monkeypatch):
    """The C unpickler hashes a dict key without a depth limit: SIGSEGV. A forked trial load takes the crash;
    without fork, the opcodes are scanned."""
    path = tmp_path / "fr_rank_0"
    path.write_bytes(b"\x80\x02}q\x00)" + b"\x85" * 1_000_000 + b"Ns.")
    assert _error(dumps.read_dump, path) == (
        f"{path}: nests too deeply to unpickle (a trial load crashed: SIGSEGV, as a tuple key nested hundreds of "
        "thousands deep makes it); not a document the tools read")
    monkeypatch.delattr(os, "fork")
    assert _error(dumps.read_dump, path) == (
        f"{path}: nests more than 64 levels (tuples 1,000,001 deep); not a document the tools read")


def test_pickles_that_expand_or_contain_themselves_are_one_error(tmp_path):
    node: list = [4]
    for _ in range(40):
        node = [node, node]
    loop: list = []
    loop.append(loop)
    docs = {1: pickle.dumps(_fr_dump([{**_fr_entry(1), "input_sizes": node}]), protocol=2),
            2: pickle.dumps(_fr_dump([{**_fr_entry(1), "frames": loop}]), protocol=2)}
    folder = _write(tmp_path, docs, suffix="")
    assert _error(dumps.read_dump, folder / "fr_rank_1") == (
        f"{folder}/fr_rank_1: holds more than 20,000,000 values once shared references are expanded; "
        "not a document the tools read")
    assert _error(dumps.read_dump, folder / "fr_rank_2") == (
        f"{folder}/fr_rank_2: refers to itself (a value contains itself); not plain data")


# --- cells -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("key, value, message", [
    ("collective_seq_id", True, "'collective_seq_id' of collective 'all_reduce' is True; expected a sequence id, "
                                "an integer 0..9223372036854775807"),
    ("collective_seq_id", 2**70, "'collective_seq_id' of collective 'all_reduce' is an integer of 71 bits; "
                                 "expected a sequence id, an integer 0..9223372036854775807"),
    ("time_created_ns", "soon", "'time_created_ns' is 'soon'; expected an integer 0..9223372036854775807"),
    ("record_id", -1, "'record_id' is -1; expected an integer 0..9223372036854775807"),
    ("input_sizes", [[4, -1]], "'input_sizes[0]' holds -1; expected a list of shapes, each a list of integers "
                               ">= 0 (e.g. [[4, 8]])"),
    ("input_dtypes", ["Float", 3], "'input_dtypes' is a list; expected a list of dtype names (e.g. ['Float'])"),
    ("is_p2p", 1, "'is_p2p' is 1; expected true or false"),
    ("process_group", ["0", FORGED, "z"], "'process_group' is a list; expected (name, desc), two texts"),
    ("frames", [["f.py", 3]], "frames[0] is a list; expected a mapping with name, filename and line"),
])
def test_a_cell_of_the_wrong_type_or_range_names_dump_entry_and_key(tmp_path, key, value, message):
    path = _write(tmp_path, {0: _fr_dump([_fr_entry(1), {**_fr_entry(2), key: value}])}) / "fr_rank_0.json"
    assert _error(dumps.read_dump, path) == f"{path}: entries[1]: {message}"


def test_pg_config_and_pg_status_are_checked(tmp_path):
    doc = _fr_dump([_fr_entry(1)])
    doc["pg_config"]["1"] = {"name": "1", "desc": "u", "ranks": "[0, 1, 0]"}
    path = _write(tmp_path, {0: doc}) / "fr_rank_0.json"
    assert _error(dumps.read_dump, path) == f"{path}: pg_config['1'].ranks: names rank 0 twice"
    doc["pg_config"]["1"]["ranks"] = "[" + "1, " * 400_000 + "]"
    _write(tmp_path, {0: doc})
    assert _error(dumps.read_dump, path) == (f"{path}: pg_config['1'].ranks: a literal of 1,200,002 characters; "
                                             "at most 1,000,000 are read")
    doc["pg_config"]["1"]["ranks"] = "__import__('os')"
    _write(tmp_path, {0: doc})
    assert _error(dumps.read_dump, path) == (f"{path}: pg_config['1'].ranks: is \"__import__('os')\"; expected a "
                                             "list of ranks such as '[0, 1]'")
    doc["pg_config"]["1"]["ranks"] = "[0, 1]"
    doc["pg_status"] = {"0": {"last_completed_collective": "1"}}      # torch's JSON writes text
    assert dumps.read_dump(_write(tmp_path, {0: doc}) / "fr_rank_0.json").last_completed == {"0": 1}
    doc["pg_status"] = {"0": {"last_completed_collective": True}}
    _write(tmp_path, {0: doc})
    assert _error(dumps.read_dump, path) == (f"{path}: pg_status['0'].last_completed_collective: expected an "
                                             "integer -1..9223372036854775807, got True")


# --- sizes -----------------------------------------------------------------------------------------

def test_plan_world_and_groups_are_bounded_before_anything_is_built():
    assert _error(layout.parse_plan, "U100000 R100000", None) == (
        "--plan 'U100000 R100000': 'U100000': a degree is at most 1024 (the devices of one job)")
    assert _error(layout.parse_plan, "U512 R4", None) == (
        "--plan 'U512 R4' covers 2,048 ranks; at most 1024 (the devices of one job)")
    assert _error(layout.parse_plan, "U4 R4", 8) == "--plan 'U4 R4' covers 16 ranks; at most 8 (--world)"
    assert layout.parse_plan("U4 TE2", None)[0].devices == 4
    assert _error(layout.check_world, 10**12) == (
        "--world 1000000000000: expected 1..1024 ranks (a job has at most 1024 devices)")
    assert _error(layout.given_labels, "0,1;0,99999999999999999999", None) == (
        "--groups: rank 99999999999999999999 of group 1 is out of range; expected 0..1048575")
    assert _error(layout.given_labels, "0,4", 4) == "--groups: rank 4 of group 0 is out of range; expected 0..3 (--world 4)"


def test_world_from_file_names_and_group_members_are_bounded(tmp_path):
    plain = {"entries": [_fr_entry(1)]}
    folder = _write(tmp_path / "a", {0: plain, 5000: plain})
    read = [dumps.read_dump(f) for f in dumps.list_dump_files([str(folder)])]
    assert _error(diverge.assemble, read, None, True, 3600.0) == (
        "world size 5,001 (highest rank in the file names + 1) exceeds 1024, the devices of one job; check the "
        "file names or give --world")
    doc = _fr_dump([_fr_entry(1)])
    doc["pg_config"]["1"] = {"name": "1", "desc": "u", "ranks": "[0, 7]"}
    folder = _write(tmp_path / "b", {0: doc, 1: _fr_dump([_fr_entry(1)])})
    read = [dumps.read_dump(f) for f in dumps.list_dump_files([str(folder)])]
    assert _error(diverge.assemble, read, None, False, 3600.0) == (
        f"{folder}/fr_rank_0.json: pg_config['1'] names rank 7, outside world size 2 (default group in pg_config)")


# --- members not recorded (torch's gloo pg_config): what the entries prove, and the caveat -------

def _group5(tmp_path: Path, status: dict[int, str] | None) -> dict:
    """Rank 0 issued seq 1 and 2 in group 5, rank 1 only seq 1; pg_config names only the default group."""
    docs = {}
    for rank, seqs in ((0, (1, 2)), (1, (1,))):
        doc = _fr_dump([{**_fr_entry(k), "process_group": ["5", "undefined"], "pg_id": 5} for k in seqs])
        if status is not None:
            doc["pg_status"] = {"5": {"last_completed_collective": status[rank]}}   # torch's JSON writes text
        docs[rank] = doc
    folder = _write(tmp_path, docs)
    read = [dumps.read_dump(f) for f in dumps.list_dump_files([str(folder)])]
    result = diverge.compare(diverge.assemble(read, None, False, 3600.0))
    return next(g for g in result["groups"] if g["group"] == "5") | {"notes": result["notes"]}


def test_unrecorded_members_a_missing_rank_carries_the_caveat(tmp_path):
    g = _group5(tmp_path, None)
    assert (g["cause"], g["first_divergent_seq"], g["missing_ranks"]) == ("rank_missing_or_dead", 2, [1])
    assert g["detail"] == ("ranks [1] wait in no collective; members not recorded (pg_config empty): the entries "
                           "support rank_missing_or_dead, but unrecorded members cannot rule out a creation-order "
                           "problem; dump with ditpar.hang.record to tell")
    assert g["notes"] == ["groups 5: members not recorded (pg_config empty), read from the entries; unrecorded "
                          "members cannot rule out a creation-order problem (dump with ditpar.hang.record)"]


def test_unrecorded_members_a_call_completed_without_a_rank_proves_the_creation_order(tmp_path):
    """Rank 0 completed seq 1 and 2 of group 5; rank 1, which issued seq 1 under the same name, still waits
    in it: one group could not complete a call without it."""
    g = _group5(tmp_path, {0: "2", 1: "-1"})
    assert (g["cause"], g["first_divergent_seq"], g["inferred_without"]) == ("group_creation_order", 2, {"0": [1]})
    assert g["detail"].startswith("rank 0 reports seq 1 of group 5 completed, which rank 1 still waits in: a call "
                                  "completes only when every member issued it")
    assert not [n for n in g["notes"] if "groups 5" in n]
    g = _group5(tmp_path / "b", {0: "1", 1: "1"})      # both completed seq 1: nothing proved, caveat stays
    assert g["cause"] == "rank_missing_or_dead" and "cannot rule out a creation-order problem" in g["detail"]


def test_a_given_world_that_contradicts_the_default_group_is_refused(tmp_path):
    folder = _write(tmp_path, {0: _fr_dump([_fr_entry(1)]), 1: _fr_dump([_fr_entry(1)])})
    read = [dumps.read_dump(f) for f in dumps.list_dump_files([str(folder)])]
    assert _error(diverge.assemble, read, 1024, True, 3600.0) == (
        "the dumps' default group (pg_config) holds 2 ranks, the world given (--world or --plan) 1024: not the "
        "dumps of this job, or the wrong --world")
    assert diverge.assemble(read, 2, False, 3600.0).world == 2


def test_group_names_sort_numerically_without_int(tmp_path):
    """"2" before "10"; a 5,000-digit name and "²" (isdigit() but not int()) raised ValueError before."""
    names = ["10", "9" * 5000, "\u00b2", "2", "0"]
    docs = {r: _fr_dump([{**_fr_entry(1), "process_group": [n, "x"], "record_id": i} for i, n in enumerate(names)])
            for r in range(2)}
    read = [dumps.read_dump(f) for f in dumps.list_dump_files([str(_write(tmp_path, docs))])]
    result = diverge.compare(diverge.assemble(read, None, False, 3600.0))
    assert [g["group"] for g in result["groups"]] == ["0", "2", "10", "9" * 5000, "\u00b2"]


def test_unrecorded_members_a_call_completed_that_a_rank_never_issued(tmp_path):
    """Rank 0 completed seq 1-3 of group 5; rank 1 issued 1 and 3 under that name, never 2."""
    docs = {r: _fr_dump([{**_fr_entry(k), "process_group": ["5", "x"], "pg_id": 5} for k in seqs])
            | {"pg_status": {"5": {"last_completed_collective": done}}}
            for r, seqs, done in ((0, (1, 2, 3), 3), (1, (1, 3), 1))}
    read = [dumps.read_dump(f) for f in dumps.list_dump_files([str(_write(tmp_path, docs))])]
    g = next(g for g in diverge.compare(diverge.assemble(read, None, False, 3600.0))["groups"] if g["group"] == "5")
    assert (g["cause"], g["first_divergent_seq"], g["inferred_without"]) == ("group_creation_order", 2, {"0": [1]})
    assert g["detail"].startswith("rank 0 reports seq 2 of group 5 completed, which rank 1 never issued:")


def test_a_rank_without_a_dump_stopped_after_the_last_call_any_rank_completed(tmp_path):
    """Ranks 0-2 of 4 issued world calls 1-3; rank 3 wrote no dump. Rank 1's own record of completion lags
    (it says 1 while it already issued 3, as a gloo rank's record can on a fast machine): seq 2 completed on
    ranks 0 and 2, so rank 3 issued it too, and the first call it can be missing from is 3."""
    docs = {}
    for rank, done in ((0, "2"), (1, "1"), (2, "2")):
        doc = _fr_dump([_fr_entry(k) for k in (1, 2, 3)])
        doc["pg_config"] = {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2, 3]"}}
        doc["pg_status"] = {"0": {"last_completed_collective": done}}
        docs[rank] = doc
    folder = _write(tmp_path, docs)
    read = [dumps.read_dump(f) for f in dumps.list_dump_files([str(folder)])]
    g = next(g for g in diverge.compare(diverge.assemble(read, 4, True, 3600.0))["groups"] if g["group"] == "0")
    assert (g["first_divergent_seq"], g["last_common_seq"], g["missing_ranks"], g["ranks_without_dump"],
            g["cause"]) == (3, 2, [3], [3], "rank_missing_or_dead")
    assert g["last_completed_seq"] == 1      # the last call every rank reports completed is still shown as is
