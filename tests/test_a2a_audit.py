"""a2a_audit: verdicts on logs written by real gloo all-to-alls (clean and with injected faults),
and the reconciler's handling of hand-written logs (hex / negative fingerprints, malformed lines,
missing ranks, communicators, world-size mismatch, zero legs)."""

from __future__ import annotations

import json
import os

import pytest
from conftest import run_script, torchrun
from ditpar.comm import audit

CALLS, CHUNKS = 2, 2
VERDICT = {"none": "transport faithful", "send_rewrite": "send buffer rewritten after dispatch",
           "placement": "placement problem", "packing": "packing problem"}



def expected_legs(world: int) -> int:
    """Cross-rank legs per fault: the world communicator, plus two halves from 4 ranks on."""
    legs = world * (world - 1)
    if world >= 4:
        h = world // 2
        legs += 2 * h * (h - 1)
    return CALLS * CHUNKS * legs


@pytest.fixture(scope="module", params=[2, 4])
def probe(request, tmp_path_factory):
    out = tmp_path_factory.mktemp(f"probe{request.param}")
    proc = torchrun(request.param, "a2a_audit.py", "--probe", str(out), "--calls", str(CALLS),
                    "--chunks", str(CHUNKS), "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    assert doc["world"] == request.param and sorted(doc["folders"]) == sorted(VERDICT)
    return request.param, doc["folders"]


@pytest.mark.parametrize("fault", list(VERDICT))
def test_verdict_on_real_gloo_logs(probe, fault):
    world, folders = probe
    proc = run_script("a2a_audit.py", folders[fault], "--json", "--world", str(world),
                      "--comm", "world")
    doc = json.loads(proc.stdout)
    assert doc["verdict"] == VERDICT[fault]
    assert proc.returncode == (0 if fault == "none" else 1)
    assert doc["legs_compared"] == CALLS * CHUNKS * world * (world - 1)
    assert doc["complete"] is True and doc["malformed_lines"] == 0
    if fault == "none":
        assert doc["mismatches"] == doc["self_leg_bad"] == doc["send_buffer_rewritten"] == 0
    if fault == "send_rewrite":
        assert doc["mismatches"] > 0 and doc["mismatches"] == doc["mismatches_with_rewritten_buffer"]
    if fault == "placement":
        assert doc["mismatches"] > 0 and doc["send_buffer_rewritten"] == 0
    if fault == "packing":
        assert doc["mismatches"] == 0 and doc["packing_bad"] > 0 and doc["self_leg_bad"] > 0


def test_all_communicators_keyed_apart(probe):
    world, folders = probe
    doc = json.loads(run_script("a2a_audit.py", folders["none"], "--json", check=0).stdout)
    assert doc["legs_compared"] == expected_legs(world)
    names = {c["comm"] for c in doc["comms"]}
    assert names == ({"world", "half0", "half1"} if world >= 4 else {"world"})
    assert all(c["verdict"] == "transport faithful" for c in doc["comms"])


def test_one_rank_log_is_no_evidence(probe):
    world, folders = probe
    proc = run_script("a2a_audit.py", os.path.join(folders["none"], "rank0.log"), check=2)
    assert "no evidence: 0 cross-rank legs compared" in proc.stderr
    assert "verdict: no evidence" in proc.stdout


def test_missing_rank_is_reported(probe):
    world, folders = probe
    logs = [os.path.join(folders["none"], f"rank{r}.log") for r in range(world - 1)]
    proc = run_script("a2a_audit.py", *logs, "--json", check=2)
    doc = json.loads(proc.stdout)
    assert doc["missing_ranks"]["world"] == [world - 1]
    assert doc["complete"] is False
    if world == 2:  # one rank left: nothing to pair, so no evidence at all
        assert doc["verdict"] == "no evidence" and doc["legs_compared"] == 0
        return
    # 3 of 4 ranks: the legs among them still reconcile, but the pass is incomplete
    assert doc["verdict"] == "transport faithful"
    assert doc["legs_compared"] == CALLS * CHUNKS * (world - 1) * (world - 2) + CALLS * CHUNKS * 2
    assert "evidence is incomplete" in proc.stderr
    run_script("a2a_audit.py", *logs, "--allow-incomplete", check=0)


# --- hand-written logs ------------------------------------------------------------------------


def line(comm, rank, n, call, chunk, spre, spost, got, src=None, prefix=""):
    text = (f"{prefix}A2AUD v=1 comm={comm} rank={rank} n={n} call={call} chunk={chunk} "
            f"spre={','.join(spre)} spost={','.join(spost)} got={','.join(got)}")
    return text + (f" src={','.join(src)}" if src else "")


def write(tmp_path, name, lines):
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_fingerprint_spellings():
    assert audit.parse_fp("-1") == audit.parse_fp("0xffffffffffffffff") == 2**64 - 1
    assert audit.parse_fp("0x1F") == audit.parse_fp("31") == 31
    for bad in ("1e5", "0x", "abc", "", "1.0"):
        with pytest.raises(ValueError):
            audit.parse_fp(bad)


def test_signed_and_hex_fingerprints_reconcile(tmp_path):
    # rank 0 prints signed decimals, rank 1 prints hex: -2 == 0xff..fe, 7 == 0x7
    a = write(tmp_path, "r0.log", ["noise line", line("g", 0, 2, 0, -1, ["5", "-2"], ["5", "-2"], ["5", "7"],
                                                      prefix="[rank0]: ")])
    b = write(tmp_path, "r1.log", [line("g", 1, 2, 0, -1, ["0x7", "0x9"], ["0x7", "0x9"],
                                        ["0xfffffffffffffffe", "0x9"])])
    doc = json.loads(run_script("a2a_audit.py", a, b, "--json", check=0).stdout)
    assert (doc["legs_compared"], doc["mismatches"], doc["records"]) == (2, 0, 2)
    assert doc["verdict"] == "transport faithful"


def test_malformed_lines_counted_and_block_a_clean_pass(tmp_path):
    good = [line("g", 0, 2, 0, 0, ["1", "2"], ["1", "2"], ["1", "3"]),
            line("g", 1, 2, 0, 0, ["3", "4"], ["3", "4"], ["2", "4"])]
    bad = ["A2AUD v=1 comm=g rank=0 n=2 call=1 chunk=0 spre=1, 2 spost=1,2 got=1,2",  # space in a list
           "A2AUD v=1 comm=g rank=0 n=2 call=1 chunk=0 spre=1,2 spost=1,2",  # no got
           "A2AUD v=1 comm=g rank=0 n=2 call=1 chunk=0 spre=1,2,3 spost=1,2 got=1,2",  # 3 legs for n=2
           "A2AUD v=1 comm=g rank=5 n=2 call=1 chunk=0 spre=1,2 spost=1,2 got=1,2",  # rank outside n
           "A2AUD garbage"]
    path = write(tmp_path, "mixed.log", good + bad + ["a line without the tag"])
    proc = run_script("a2a_audit.py", path, "--json", check=2)
    doc = json.loads(proc.stdout)
    assert (doc["malformed_lines"], doc["tagged_lines"], doc["records"]) == (5, 7, 2)
    assert doc["verdict"] == "transport faithful" and doc["legs_compared"] == 2
    assert "5 malformed line(s)" in proc.stderr
    assert "mixed.log:3" in doc["malformed"][0]["where"]


def test_rewrite_without_mismatch_is_still_a_lifetime_bug(tmp_path):
    # the transport read the right bytes (got == spre) but the buffer changed before the end of the call
    a = write(tmp_path, "r0.log", [line("g", 0, 2, 0, 0, ["1", "2"], ["1", "9"], ["1", "3"])])
    b = write(tmp_path, "r1.log", [line("g", 1, 2, 0, 0, ["3", "4"], ["3", "4"], ["2", "4"])])
    doc = json.loads(run_script("a2a_audit.py", a, b, "--json", check=1).stdout)
    assert doc["verdict"] == "send buffer rewritten after dispatch"
    assert (doc["mismatches"], doc["send_buffer_rewritten"]) == (0, 1)


def test_self_leg_without_src_points_at_packing(tmp_path):
    a = write(tmp_path, "r0.log", [line("g", 0, 2, 0, 0, ["1", "2"], ["1", "2"], ["8", "3"])])
    b = write(tmp_path, "r1.log", [line("g", 1, 2, 0, 0, ["3", "4"], ["3", "4"], ["2", "4"])])
    doc = json.loads(run_script("a2a_audit.py", a, b, "--json", check=1).stdout)
    assert (doc["verdict"], doc["self_leg_bad"], doc["mismatches"]) == ("packing problem", 1, 0)


def test_same_call_numbers_in_two_communicators_do_not_collide(tmp_path):
    # the MindIE-SD skill's tool keyed records by (call, chunk) only: these two groups would overwrite each other
    lines = [line("ulysses0", 0, 2, 0, 0, ["1", "2"], ["1", "2"], ["1", "3"]),
             line("ulysses0", 1, 2, 0, 0, ["3", "4"], ["3", "4"], ["2", "4"]),
             line("ulysses1", 0, 2, 0, 0, ["5", "6"], ["5", "6"], ["5", "7"]),
             line("ulysses1", 1, 2, 0, 0, ["7", "8"], ["7", "8"], ["6", "8"])]
    doc = json.loads(run_script("a2a_audit.py", write(tmp_path, "all.log", lines), "--json", check=0).stdout)
    assert doc["legs_compared"] == 4 and doc["duplicates"] == 0
    assert [c["comm"] for c in doc["comms"]] == ["ulysses0", "ulysses1"]


def test_duplicates_and_size_disagreement(tmp_path):
    rec = line("g", 0, 2, 0, 0, ["1", "2"], ["1", "2"], ["1", "3"])
    peer = line("g", 1, 2, 0, 0, ["3", "4"], ["3", "4"], ["2", "4"])
    doc = json.loads(run_script("a2a_audit.py", write(tmp_path, "d.log", [rec, rec, peer]), "--json",
                                check=0).stdout)
    assert (doc["duplicates"], doc["conflicting_duplicates"]) == (1, 0)
    other = line("g", 1, 3, 0, 0, ["3", "4", "5"], ["3", "4", "5"], ["2", "4", "5"])
    proc = run_script("a2a_audit.py", write(tmp_path, "n.log", [rec, other]), check=2)
    assert "ranks disagree on the group size" in proc.stderr


@pytest.mark.parametrize("args,needle", [
    (["--world", "4"], "mismatched world size"),
    (["--comm", "nope"], "communicators present: ['g']"),
])
def test_bad_input_exits_2(tmp_path, args, needle):
    path = write(tmp_path, "r.log", [line("g", 0, 2, 0, 0, ["1", "2"], ["1", "2"], ["1", "3"])])
    proc = run_script("a2a_audit.py", path, *args, check=2)
    assert needle in proc.stderr and proc.stderr.count("\n") == 1


def test_missing_file_and_no_args_exit_2(tmp_path):
    assert "no such file" in run_script("a2a_audit.py", str(tmp_path / "none.log"), check=2).stderr
    run_script("a2a_audit.py", check=2)


# --- the logging API, in process ---------------------------------------------------------------


def test_logger_api_fingerprints_and_switch(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    x = torch.arange(12, dtype=torch.float32).reshape(6, 2)
    fp = audit.fingerprint
    assert int(fp(x)) == int(fp(x.clone()))
    assert int(fp(x)) != int(fp(x.flip(0)))  # row order matters
    assert int(fp(x[:0])) == audit.FP_EMPTY
    assert int(fp(torch.zeros(4))) != int(fp(torch.zeros(5)))  # zeros still count

    lines: list[str] = []
    monkeypatch.delenv(audit.ENV_SWITCH, raising=False)
    off = audit.A2AAudit(lines.append, "g", 0, 2)
    c = off.begin(x, [2, 4], call=0)
    c.received(x, [3, 3])
    assert c.end() is None and lines == []  # default off

    monkeypatch.setenv(audit.ENV_SWITCH, "1")
    on = audit.A2AAudit(lines.append, "g", 0, 2, max_lines=1)
    c = on.begin(x, [2, 4], call=7, chunk=-1, intended=[x[:2], x[2:]])
    x[0, 0] = 99.0  # the send buffer changes after dispatch
    c.received(x, [3, 3])
    text = c.end()
    rec = audit.parse_line(text, "mem")
    assert (rec.call, rec.chunk, rec.n) == (7, -1, 2)
    assert rec.spre[0] != rec.spost[0] and rec.spre[1] == rec.spost[1]
    assert rec.src == rec.spre
    assert on.begin(x, [2, 4], call=8).end() is None  # line cap reached
    with pytest.raises(audit.InputError):
        audit.A2AAudit(lines.append, "g", 0, 2, enabled=True).begin(x, [2, 4], 0).end()


# --- issue 22: a record cut mid-line, a newer format ----------------------------------------------------

def test_record_cut_mid_line_is_an_incomplete_record_not_a_packing_problem(tmp_path):
    """The last line stops inside src ('...,10' of 1002): read, it looked like a packing problem (exit 1)."""
    r0 = write(tmp_path, "r0.log", [line("g", 0, 2, 0, 0, ["1", "2"], ["1", "2"], ["1", "1001"], src=["1", "2"])])
    r1 = tmp_path / "r1.log"
    r1.write_text(line("g", 1, 2, 0, 0, ["1001", "1002"], ["1001", "1002"], ["2", "1002"], src=["1001", "1002"])[:-2])
    proc = run_script("a2a_audit.py", r0, str(r1), "--json", check=2)
    doc = json.loads(proc.stdout)
    assert doc["verdict"] != "packing problem" and doc["packing_bad"] == 0
    assert doc["malformed"][0]["where"] == f"{r1}:1"
    assert doc["malformed"][0]["reason"].startswith("incomplete record")
    assert proc.stderr.count("\n") == 1 and "incomplete record" in proc.stderr
    # the same line with its newline is whole: the transport is faithful
    r1.write_text(line("g", 1, 2, 0, 0, ["1001", "1002"], ["1001", "1002"], ["2", "1002"], src=["1001", "1002"]) + "\n")
    assert json.loads(run_script("a2a_audit.py", r0, str(r1), "--json", check=0).stdout)["verdict"] == "transport faithful"


def test_newer_record_format_is_refused_naming_the_version(tmp_path):
    path = write(tmp_path, "r0.log", [line("g", 0, 2, 0, 0, ["1", "2"], ["1", "2"], ["1", "3"]).replace("v=1", "v=2")])
    proc = run_script("a2a_audit.py", path, check=2)
    assert proc.stderr.count("\n") == 1 and "format v=2 is newer than this reader (v=1)" in proc.stderr
    assert f"{path}:1" in proc.stderr
