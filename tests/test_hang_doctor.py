"""hang_doctor.py on real Flight Recorder dumps: small gloo jobs (2 and 4 processes, tests/hang_scenarios.py)
that hang in known ways, each dumped once per session; the answers are checked against what each
scenario does by construction, against torch's own analyzer where it runs, and across pickle and JSON."""

from __future__ import annotations

import json
import os
import pickle
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT, run_script

torch = pytest.importorskip("torch")
from ditpar.hang import howto  # noqa: E402
from ditpar.hang.dumps import safe_unpickle  # noqa: E402
from ditpar.hang.layout import parse_plan, plan_labels  # noqa: E402

WORKER = ROOT / "tests" / "hang_scenarios.py"
WORLD = {"healthy": 4, "cache_skip": 2, "creation_order": 4, "missing_rank": 4, "size_mismatch": 2,
         "group_order": 2, "created_on_one_rank": 2}
SCENARIO_TIMEOUT_S = 90


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_batch(names: list[str], base: Path) -> None:
    """Start one process per rank of each scenario at once, wait, and kill the process group of any
    process that outlives the limit."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    if os.path.exists("/sys/class/net/lo"):
        env.setdefault("GLOO_SOCKET_IFNAME", "lo")
    procs, logs = [], []
    for name in names:
        port = str(_free_port())
        for rank in range(WORLD[name]):
            log = open(base / f"{name}.rank{rank}.log", "w")  # noqa: SIM115 (closed below)
            logs.append(log)
            procs.append(subprocess.Popen([sys.executable, str(WORKER), name, str(rank), str(WORLD[name]), port,
                                           str(base / name)], stdout=log, stderr=subprocess.STDOUT, env=env,
                                          start_new_session=True))
    try:
        for p in procs:
            try:
                p.wait(timeout=SCENARIO_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                pass
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        for log in logs:
            log.close()


@pytest.fixture(scope="session")
def dumps(tmp_path_factory) -> dict[str, Path]:
    """Every scenario's dump folder (pickle) and <folder>_json (the same buffers as JSON), made once, in
    two batches (healthy and missing_rank in different ones: the mixed-runs test needs them apart)."""
    base = tmp_path_factory.mktemp("hang")
    _run_batch(["healthy", "cache_skip", "size_mismatch", "created_on_one_rank"], base)
    _run_batch(["creation_order", "missing_rank", "group_order"], base)
    made = {}
    for name, world in WORLD.items():
        out = base / name
        for folder, suffix in ((out, ""), (Path(f"{out}_json"), ".json")):
            # every file, dotfiles included: a write cut short leaves .fr_rank_N.XXXX, which torch's fr_trace reads
            files = sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []
            expected = [f"fr_rank_{r}{suffix}" for r in range(world)]
            logs = "\n".join((base / f"{name}.rank{r}.log").read_text()[-1500:] for r in range(world))
            assert files == expected, f"{name}: dumps {files}, expected {expected}\n{logs}"
        made[name] = out
    return made


def doctor(*args: str, check: int | None = None) -> tuple[dict, subprocess.CompletedProcess]:
    proc = run_script("hang_doctor.py", *args, "--json", check=check, timeout=120)
    return (json.loads(proc.stdout) if proc.stdout.strip() else {}), proc


def group(result: dict, name: str) -> dict:
    return next(g for g in result["groups"] if g["group"] == name)


def line_of(text: str) -> int:
    """Line number of a statement in the scenario worker: where a collective was issued, found by hand."""
    lines = WORKER.read_text().splitlines()
    hits = [i + 1 for i, line in enumerate(lines) if text in line]
    assert len(hits) == 1, (text, hits)
    return hits[0]


# --- the four cases of the issue, and the fifth cause -------------------------------------------

def test_healthy_run_reports_no_divergence(dumps):
    r, _ = doctor(str(dumps["healthy"]), "--plan", "U2 R2", "--world", "4", check=0)
    assert r["verdict"] == "no divergence" and r["first_divergence"] is None
    labels = {g["group"]: (g["label"], g["ranks"]) for g in r["groups"]}
    # groups are created in the order U[0,1], U[2,3], R[0,2], R[1,3]: names 1..4, plan layout as plan.py
    assert labels == {"0": ("world", [0, 1, 2, 3]), "1": ("Ulysses#0", [0, 1]), "2": ("Ulysses#1", [2, 3]),
                      "3": ("ring#0", [0, 2]), "4": ("ring#1", [1, 3])}
    # two steps of one all-to-all (Ulysses) and one all-gather (ring); world: all_reduce + barrier
    assert {g["group"]: g["last_common_seq"] for g in r["groups"]} == {"0": 2, "1": 2, "2": 2, "3": 2, "4": 2}


def test_cache_skip_names_the_shifted_sequence_id(dumps):
    r, _ = doctor(str(dumps["cache_skip"]), "--plan", "U2", check=1)
    g = group(r, "1")
    # rank 1 skipped one step of two all-to-alls: its 7th call is the final all-gather, rank 0's 7th
    # is the first all-to-all of step 3
    assert (g["first_divergent_seq"], g["last_common_seq"], g["cause"]) == (7, 6, "different_branches")
    assert g["by_rank"]["0"]["op"] == "all_to_all" and g["by_rank"]["1"]["op"] == "all_gather"
    assert g["issued_ranks"] == [0, 1] and g["missing_ranks"] == []
    assert g["label"] == "world=Ulysses#0"
    assert g["by_rank"]["0"]["call_site"].startswith(f"hang_scenarios.py:{line_of('# q, k, v in')}")
    assert g["by_rank"]["1"]["call_site"].startswith(f"hang_scenarios.py:{line_of('# latents for the VAE')}")
    assert r["first_divergence"]["group"] == "1"


def test_group_creation_order_text_encoder_tp_by_ulysses(dumps):
    r, _ = doctor(str(dumps["creation_order"]), "--plan", "U4 TE2", "--world", "4", check=1)
    one, three = group(r, "1"), group(r, "3")
    # ranks 0,1 made TE[0,1] (name 1), TE[2,3] (2), U[0..3] (3); ranks 2,3 made U (1), TE[0,1] (2), TE[2,3] (3)
    assert one["member_claims"] == {"0,1": [0, 1], "0,1,2,3": [2, 3]}
    assert three["member_claims"] == {"0,1,2,3": [0, 1], "2,3": [2, 3]}
    for g, te_ranks, u_ranks in ((one, ["0", "1"], ["2", "3"]), (three, ["2", "3"], ["0", "1"])):
        assert g["cause"] == "group_creation_order" and g["first_divergent_seq"] == 1
        assert {g["by_rank"][x]["op"] for x in te_ranks} == {"all_reduce"}
        # the ranks that hold this name as the Ulysses group reach the all-to-all only if their own
        # encoder all-reduce got through (a gloo connection race, see the worker); either way the
        # conflicting members are the answer
        assert {g["by_rank"][x]["op"] if g["by_rank"][x] else None for x in u_ranks} in (
            {"all_to_all"}, {None}), g["by_rank"]
    assert one["label"] == "text-encoder-TP#0 on ranks 0,1 | world=Ulysses#0 on ranks 2,3"
    assert r["first_divergence"]["cause"] == "group_creation_order"


def _as_torch_wrote_them(source: Path, world: int, folder: Path) -> Path:
    """The dumps without the members record.dump() adds: pg_config as torch's gloo writes it (no group names)."""
    folder.mkdir()
    for rank in range(world):
        doc = safe_unpickle((source / f"fr_rank_{rank}").read_bytes())
        doc["pg_config"] = doc.pop("pg_config_torch")
        del doc["pg_config_source"]
        (folder / f"fr_rank_{rank}").write_bytes(pickle.dumps(doc, protocol=2))
    return folder


def test_creation_order_without_recorded_members_says_what_it_cannot_tell(dumps, tmp_path):
    """The same dumps as torch's gloo writes them (no group names in pg_config): ops differ at seq 1. Where a
    rank reports its seq 1 completed (pg_status) while a rank of the same group name still waits in it, the
    entries prove the name stands for two groups; else the answer says that members were not recorded."""
    folder = _as_torch_wrote_them(dumps["creation_order"], 4, tmp_path / "raw")
    docs = [safe_unpickle((dumps["creation_order"] / f"fr_rank_{r}").read_bytes()) for r in range(4)]
    reached = [d["entries"][-1]["profiling_name"] == "gloo:all_to_all" for d in docs]
    completed = set()   # group names in which some rank reports its seq 1 completed (pg_status, by pg_id)
    for d in docs:
        names = {str(e["pg_id"]): e["process_group"][0] for e in d["entries"]}
        completed |= {names[i] for i, st in d["pg_status"].items() if int(st["last_completed_collective"]) >= 1}
    if any(reached):
        r, _ = doctor(str(folder), check=1)
        hits = [g for g in r["groups"] if g["first_divergent_seq"] is not None]
        assert hits and all(g["first_divergent_seq"] == 1 for g in hits)
        assert all(g["membership_source"].startswith("ranks seen") for g in hits)
        for g in hits:
            if g["group"] in completed:   # a pair's call went through where another rank of the name waits
                assert g["cause"] == "group_creation_order" and "still waits in" in g["detail"], g
            else:
                assert g["cause"] == "different_branches", g
                assert "cannot rule out a creation-order problem" in g["detail"], g
    else:
        # every rank still in its encoder all-reduce: each name's calls look alike on the ranks that made
        # them, and without members nothing tells the groups apart: a blind spot (hangs-and-deadlocks)
        r, _ = doctor(str(folder), check=0)
        assert r["verdict"] == "no divergence"
        assert any("not completed although every rank seen" in n for n in r["notes"]), r["notes"]


def test_group_created_on_one_rank_from_recorded_members(dumps):
    """record.dump() wrote each rank's members: group "1" is [0,1] on rank 0 and [1] on rank 1."""
    r, _ = doctor(str(dumps["created_on_one_rank"]), check=1)
    one, two = group(r, "1"), group(r, "2")
    assert (one["cause"], one["member_claims"], one["first_divergent_seq"]) == (
        "group_creation_order", {"0,1": [0], "1": [1]}, 1)
    assert (two["cause"], two["issued_ranks"], two["missing_ranks"], two["waiting_in"]) == (
        "waits_in_other_group", [1], [0], {"0": "group 1 seq 1"})
    assert r["first_divergence"]["group"] == "1"


def test_group_created_on_one_rank_as_torch_writes_the_dumps(dumps, tmp_path):
    """torch's gloo pg_config names no group. Rank 1 reports two calls of its group "1" completed (pg_status)
    while rank 0 still waits in its seq 1 of "1": the entries prove "1" holds different ranks on the two
    ranks. The answer was rank_missing_or_dead ("rank 0 waits in no collective"), without the caveat."""
    r, proc = doctor(str(_as_torch_wrote_them(dumps["created_on_one_rank"], 2, tmp_path / "raw")), check=1)
    one = group(r, "1")
    assert (one["cause"], one["first_divergent_seq"], one["last_common_seq"], one["issued_ranks"],
            one["missing_ranks"], one["inferred_without"]) == ("group_creation_order", 2, 1, [1], [0], {"1": [0]})
    assert one["detail"].startswith("rank 1 reports seq 1 of group 1 completed, which rank 0 still waits in: a "
                                    "call completes only when every member issued it, so on rank 1 group 1 does "
                                    "not hold rank 0")
    assert one["membership_source"].startswith("ranks seen in the entries")
    assert r["first_divergence"]["cause"] == "group_creation_order"
    assert r["notes"][-1] == ("group 2: ranks [1] report seq 1 not completed although every rank seen ([1]) issued "
                              "it alike: a member that never called it (not recorded: pg_config empty) or a name "
                              "that stands for different groups on different ranks; dump with ditpar.hang.record "
                              "to tell")


def test_missing_rank_is_named(dumps):
    r, _ = doctor(str(dumps["missing_rank"]), check=1)
    g = group(r, "0")
    # two world all-reduces complete; rank 3 stays in its own compute before the third
    assert (g["last_common_seq"], g["first_divergent_seq"]) == (2, 3)
    assert (g["issued_ranks"], g["missing_ranks"], g["cause"]) == ([0, 1, 2], [3], "rank_missing_or_dead")
    assert g["by_rank"]["3"] is None and g["waiting_in"] == {}


def test_dead_rank_without_a_dump(dumps, tmp_path):
    folder = tmp_path / "dead"
    shutil.copytree(dumps["missing_rank"], folder)
    (folder / "fr_rank_3").unlink()
    _, proc = doctor(str(folder), check=2)
    assert proc.stderr.count("\n") == 1 and "no dump for ranks [3]" in proc.stderr, proc.stderr
    r, _ = doctor(str(folder), "--allow-missing-ranks", check=1)
    g = group(r, "0")
    # rank 3 issued seq 2 (it completed on the ranks whose record says so) and stopped before 3; a gloo rank's
    # own record of completion can lag its next call, so the answer rests on the ranks that report seq 2 done
    done = [int(safe_unpickle((folder / f"fr_rank_{k}").read_bytes())["pg_status"]["0"]["last_completed_collective"])
            for k in range(3)]
    assert (g["first_divergent_seq"], g["missing_ranks"], g["ranks_without_dump"], g["cause"]) == (
        min(max(done) + 1, 3), [3], [3], "rank_missing_or_dead"), done


def test_size_mismatch(dumps):
    r, _ = doctor(str(dumps["size_mismatch"]), "--groups", "0,1", check=1)
    g = group(r, "1")
    assert (g["first_divergent_seq"], g["last_common_seq"], g["cause"]) == (2, 1, "sizes_disagree")
    assert g["by_rank"]["0"]["sizes"] == [[1000]] and g["by_rank"]["1"]["sizes"] == [[1024]]
    assert g["op"] == "broadcast" and g["issued_ranks"] == [0, 1]


def test_two_groups_entered_in_different_orders(dumps):
    r, _ = doctor(str(dumps["group_order"]), check=1)
    te, uly = group(r, "1"), group(r, "2")
    assert (te["first_divergent_seq"], te["issued_ranks"], te["missing_ranks"]) == (1, [0], [1])
    assert (uly["first_divergent_seq"], uly["issued_ranks"], uly["missing_ranks"]) == (1, [1], [0])
    assert te["cause"] == uly["cause"] == "groups_entered_in_different_order"
    assert te["waiting_in"] == {"1": "group 2 seq 1"} and uly["waiting_in"] == {"0": "group 1 seq 1"}


# --- formats, versions, mixed-up folders ---------------------------------------------------------

def _summary(r: dict) -> list[tuple]:
    return [(g["group"], g["first_divergent_seq"], g["issued_ranks"], g["missing_ranks"], g["cause"])
            for g in r["groups"]]


@pytest.mark.parametrize("name", list(WORLD))
def test_json_dumps_give_the_same_answer(dumps, name):
    pick, p1 = doctor(str(dumps[name]))
    js, p2 = doctor(f"{dumps[name]}_json")
    assert p1.returncode == p2.returncode and _summary(pick) == _summary(js)
    assert "frames" in p2.stderr and "frames" not in p1.stderr   # JSON dumps carry no stacks


def test_dumps_without_optional_fields_and_with_new_ones(dumps, tmp_path):
    """An older dump (seq_id, no dtypes/state/stack/pg_config/pg_status/version) and unknown new fields."""
    folder = tmp_path / "old"
    folder.mkdir()
    drop = ("input_dtypes", "output_dtypes", "state", "frames", "record_id", "time_created_ns", "is_p2p")
    for rank in range(2):
        doc = safe_unpickle((dumps["cache_skip"] / f"fr_rank_{rank}").read_bytes())
        for key in ("pg_config", "pg_status", "version"):
            doc.pop(key)
        doc["a_field_from_a_newer_torch"] = {"x": 1}
        entries = []
        for e in doc["entries"]:
            e = {k: v for k, v in e.items() if k not in drop}
            e["seq_id"] = e.pop("collective_seq_id")
            e["another_new_field"] = 7
            entries.append(e)
        doc["entries"] = entries
        (folder / f"fr_rank_{rank}").write_bytes(pickle.dumps(doc, protocol=2))
    r, proc = doctor(str(folder), check=1)
    assert "Traceback" not in proc.stderr
    for name in ("input_dtypes", "state", "frames", "pg_config", "pg_status", "version", "seq_id"):
        assert name in proc.stderr, (name, proc.stderr)
    g = group(r, "1")
    assert (g["first_divergent_seq"], g["cause"]) == (7, "different_branches")
    assert g["membership_source"].startswith("ranks seen") and g["last_completed_seq"] is None


def test_two_runs_in_one_folder_are_refused(dumps, tmp_path):
    """Rank 0 of the healthy run with ranks 1-3 of another run: the creation times give it away."""
    def created(path: Path) -> int:
        return next(e["time_created_ns"] for e in safe_unpickle(path.read_bytes())["entries"]
                    if e["process_group"][0] == "0" and e["collective_seq_id"] == 1)

    within = [created(dumps["missing_rank"] / f"fr_rank_{r}") for r in range(4)]
    spread_s = (max(within) - min(within)) / 1e9
    gap_s = abs(created(dumps["healthy"] / "fr_rank_0") - within[0]) / 1e9
    assert gap_s > 4 * spread_s + 0.2, (gap_s, spread_s)   # the scenarios ran one after another
    folder = tmp_path / "mixed"
    shutil.copytree(dumps["missing_rank"], folder)
    shutil.copy(dumps["healthy"] / "fr_rank_0", folder / "fr_rank_0")
    limit = f"{(gap_s + 2 * spread_s) / 2:.3f}"
    _, proc = doctor(str(folder), "--max-skew-s", limit, check=2)
    assert "different runs" in proc.stderr and proc.stderr.count("\n") == 1
    doctor(str(dumps["missing_rank"]), "--max-skew-s", limit, check=1)   # one run passes the same limit


def test_version_mismatch_and_duplicate_rank(dumps, tmp_path):
    folder = tmp_path / "versions"
    shutil.copytree(dumps["size_mismatch"], folder)
    doc = safe_unpickle((folder / "fr_rank_1").read_bytes())
    doc["version"] = "1.9"
    (folder / "fr_rank_1").write_bytes(pickle.dumps(doc, protocol=2))
    _, proc = doctor(str(folder), check=2)
    assert "different Flight Recorder versions" in proc.stderr
    _, proc = doctor(str(dumps["size_mismatch"]), f"{dumps['size_mismatch']}_json", check=2)
    assert "two dumps for rank 0" in proc.stderr


def test_table_and_csv(dumps, tmp_path):
    proc = run_script("hang_doctor.py", str(dumps["missing_rank"]), "--csv", str(tmp_path / "g.csv"), check=1)
    assert "first divergence: group 0 seq 3" in proc.stdout and "rank 3: never issued it" in proc.stdout
    rows = (tmp_path / "g.csv").read_text().splitlines()
    assert rows[0].startswith("group,label,ranks") and rows[1].startswith('0,,"0,1,2,3",2,')


# --- torch's own analyzer on the same dumps -------------------------------------------------------

_FRTRACE: dict[str, subprocess.CompletedProcess] = {}


def _torchfrtrace(folder: Path) -> subprocess.CompletedProcess:
    """torch's analyzer on a folder, run once per folder (it imports torch: seconds per run). The dump
    prefix is given: left to guess it from the file names, it failed now and then under load."""
    if str(folder) not in _FRTRACE:
        _FRTRACE[str(folder)] = subprocess.run(
            [sys.executable, "-m", "torch.distributed.flight_recorder.fr_trace", "--prefix", "fr_rank_", str(folder)],
            capture_output=True, text=True, timeout=120)
    return _FRTRACE[str(folder)]


@pytest.mark.parametrize("name, pg, seq, group_info", [("cache_skip", "1", 7, "1"), ("size_mismatch", "1", 2, "1"),
                                                       ("missing_rank", "0", 3, "0:default_pg"),
                                                       ("group_order", "1", 1, "1"), ("group_order", "2", 1, "2")])
def test_torchfrtrace_names_the_same_sequence_id(dumps, name, pg, seq, group_info):
    pytest.importorskip("torch.distributed.flight_recorder.fr_trace")
    proc = _torchfrtrace(dumps[name])
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text[-2000:]
    found = {(int(m.group(1) or m.group(2)), m.group(3)) for m in re.finditer(
        r"(?:Collective sequence number: (\d+) has errors|joining collective, sequence number: (\d+))"
        r"\s*\ninternal record id: \d+\s*\ngroup info: (\S+)", text)}
    assert (seq, group_info) in found, text[-2000:]
    ours, _ = doctor(str(dumps[name]))
    assert group(ours, pg)["first_divergent_seq"] == seq


def test_torchfrtrace_on_gloo_dumps_as_torch_writes_them(dumps, tmp_path):
    """Without the members record.dump() adds, torch 2.13's analyzer cannot map gloo groups (KeyError)."""
    pytest.importorskip("torch.distributed.flight_recorder.fr_trace")
    folder = tmp_path / "raw"
    folder.mkdir()
    for rank in range(2):
        doc = safe_unpickle((dumps["cache_skip"] / f"fr_rank_{rank}").read_bytes())
        doc["pg_config"] = doc.pop("pg_config_torch")
        (folder / f"fr_rank_{rank}").write_bytes(pickle.dumps(doc, protocol=2))
    proc = _torchfrtrace(folder)
    assert proc.returncode != 0 and "KeyError" in proc.stderr
    r, _ = doctor(str(folder), check=1)
    assert group(r, "1")["first_divergent_seq"] == 7


# --- --how, plan layout --------------------------------------------------------------------------

def test_how_is_printed_and_written_in_the_reference():
    proc = run_script("hang_doctor.py", "--how", check=0)
    assert proc.stdout == howto.HOW
    assert howto.HOW in (ROOT / "references" / "hangs-and-deadlocks.md").read_text(encoding="utf-8")
    for name in ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_DUMP_ON_TIMEOUT", "TORCH_FR_DUMP_TEMP_FILE",
                 "TORCH_HCCL_TRACE_BUFFER_SIZE", "TORCH_HCCL_DUMP_ON_TIMEOUT", "TORCH_HCCL_DEBUG_INFO_TEMP_FILE",
                 "kill -USR1", "hang_watch"):
        assert name in proc.stdout


def test_plan_labels_follow_plan_layout():
    world, labels = plan_labels("U4 R2", 8)
    named = {tuple(sorted(k)): v for k, v in labels.items()}
    assert world == 8
    assert named[(0, 1, 2, 3)] == ["Ulysses#0"] and named[(4, 5, 6, 7)] == ["Ulysses#1"]
    assert named[(0, 4)] == ["ring#0"] and named[(3, 7)] == ["ring#3"]
    _, labels = plan_labels("cfg2 U2 TE2", 4)
    named = {tuple(sorted(k)): v for k, v in labels.items()}
    assert named[(0, 1)] == ["Ulysses#0", "text-encoder-TP#0"] and named[(0, 2)] == ["CFG#0"]
    assert parse_plan("U2", 8)[0].dp == 4


@pytest.mark.parametrize("args, words", [(["--plan", "U3"], "covers 3 ranks"),
                                         (["--plan", "U2 U2"], "repeats"),
                                         (["--plan", "U2", "--groups", "0,1"], "not both"),
                                         (["--groups", "0,x"], "comma-separated"),
                                         ([], "give the dump files")])
def test_usage_errors(dumps, args, words):
    target = [str(dumps["healthy"]), "--world", "4"] if args else []
    _, proc = doctor(*target, *args, check=2)
    assert words in proc.stderr and proc.stderr.count("\n") == 1


# --- the library helper and an NCCL-shaped dump ---------------------------------------------------

def test_hang_watch_dumps_when_the_block_raises(tmp_path):
    """One gloo rank: record.enable sets the switches, the block raises, hang_watch dumps and re-raises."""
    out = tmp_path / "fr"
    code = f"""
import sys
sys.path.insert(0, {str(ROOT / 'scripts')!r})
from ditpar.hang import record
print(sorted(record.enable({str(out)!r})))
import torch, torch.distributed as dist
dist.init_process_group("gloo", init_method="tcp://127.0.0.1:{_free_port()}", rank=0, world_size=1)
try:
    with record.hang_watch({str(out)!r}):
        dist.all_reduce(torch.ones(3))
        raise ValueError("boom")
except ValueError:
    print("re-raised")
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCH_FR_", "TORCH_NCCL_", "TORCH_HCCL_"))}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0 and "re-raised" in proc.stdout, proc.stderr[-2000:]
    assert "'TORCH_FR_BUFFER_SIZE'" in proc.stdout and "'TORCH_HCCL_DUMP_ON_TIMEOUT'" in proc.stdout
    doc = safe_unpickle((out / "fr_rank_0").read_bytes())
    assert [(e["profiling_name"], e["input_sizes"]) for e in doc["entries"]] == [("gloo:all_reduce", [[3]])]
    assert doc["pg_config"]["0"]["ranks"] == "[0]"
    r, _ = doctor(str(out), check=0)
    assert r["verdict"] == "no divergence" and group(r, "0")["last_common_seq"] == 1


def _nccl_entry(seq: int, state: str) -> dict:
    return {"record_id": seq - 1, "pg_id": 0, "process_group": ("0", "default_pg"), "collective_seq_id": seq,
            "p2p_seq_id": 0, "op_id": seq, "profiling_name": "nccl:all_reduce", "time_created_ns": 10**18 + seq,
            "input_sizes": [[4]], "input_dtypes": ["Float"], "output_sizes": [[4]], "output_dtypes": ["Float"],
            "state": state, "is_p2p": False, "frames": []}


def test_nccl_shaped_dump_uses_entry_states(tmp_path):
    """NCCL dumps record states (no pg_status in older ones): the last completed call comes from them."""
    config = {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}}
    docs = {0: [_nccl_entry(1, "completed"), _nccl_entry(2, "completed"), _nccl_entry(3, "started")],
            1: [_nccl_entry(1, "completed"), _nccl_entry(2, "completed")]}
    for rank, entries in docs.items():
        doc = {"version": "2.4", "pg_config": config, "entries": entries}
        (tmp_path / f"nccl_trace_rank_{rank}").write_bytes(pickle.dumps(doc, protocol=2))
    r, proc = doctor(str(tmp_path), check=1)
    g = group(r, "0")
    assert (g["last_completed_seq"], g["last_common_seq"], g["first_divergent_seq"]) == (2, 2, 3)
    assert (g["missing_ranks"], g["cause"], g["by_rank"]["0"]["state"]) == ([1], "rank_missing_or_dead", "started")
    assert "pg_status" in proc.stderr


def test_hang_watch_dumps_never_overlap(tmp_path, monkeypatch):
    """The watcher fires at 0.05 s and its on_dump (an exit, in a hung test process) runs until 0.35 s; the block
    raises at 0.1 s. The main thread's dump waits for the watcher's dump and on_dump to finish: an exit in
    on_dump can then never cut the main thread's write short and leave its temporary file behind."""
    from ditpar.hang import record

    spans: list[tuple[str, float, float]] = []

    def fake_dump(dump_dir, prefix=record.DEFAULT_PREFIX, *a, **k):
        start = time.monotonic()
        time.sleep(0.02)
        spans.append(("dump", start, time.monotonic()))
        return Path(dump_dir) / f"{prefix}0"

    def on_dump(_path):
        start = time.monotonic()
        time.sleep(0.3)
        spans.append(("on_dump", start, time.monotonic()))

    monkeypatch.setattr(record, "dump", fake_dump)
    with pytest.raises(ValueError), record.hang_watch(tmp_path, after_s=0.05, on_dump=on_dump):
        time.sleep(0.1)
        raise ValueError("boom")
    assert [name for name, _, _ in spans] == ["dump", "on_dump", "dump"]
    assert spans[2][1] >= spans[1][2]   # the main thread's dump began after on_dump ended
