"""fewstep run end to end with tests/data/fewstep_workload.py: verdicts, warm-up, interleaving,
timeouts, interruption and resume, --parse-only, and bad templates / regexes (exit 2, one line)."""

from __future__ import annotations

import csv
import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT, SCRIPTS, run_script

WORKLOAD = ROOT / "tests" / "data" / "fewstep_workload.py"
PY = sys.executable
RX = r"\[rank(?P<rank>\d+)\] DiT denoise took (?P<dit_s>[0-9.]+)s"
ONCE = (f"{PY} {WORKLOAD} once --steps {{steps}} --ranks {{devices}} --per-step-s {{cost}} "
        f"--fixed-s {{fixed}} --noise {{noise}} --seed {{config}}-{{tier}}-{{repeat}}")


def cfg(name: str, cost: float, fixed: float = 0.0, noise: float = 0.002, devices: int = 2) -> list[str]:
    return ["--config", name, f"devices={devices}", f"cost={cost}", f"fixed={fixed}", f"noise={noise}"]


def run_matrix(tmp_path: Path, configs: list[list[str]], *extra: str, check: int | None = None,
               launch: str = ONCE, name: str = "logs") -> tuple[subprocess.CompletedProcess, dict]:
    args = ["run", *sum(configs, []), "--few-steps", "4", "--anchor-steps", "10",
            "--logdir", str(tmp_path / name), "--launch", launch, "--dit-regex", RX, "--json", *extra]
    proc = run_script("fewstep.py", *args, check=check, timeout=120)
    doc = json.loads(proc.stdout) if proc.stdout.strip() else {}
    return proc, doc


def alive(pid: int) -> bool:
    """True while the process runs (a killed child re-parented to a non-reaping init stays a zombie)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return re.search(r"^State:\s+Z", status, re.MULTILINE) is None


def matrix_rows(path: Path) -> list[dict]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def test_clean_matrix_extrapolates_and_matches_the_logs(tmp_path):
    proc, doc = run_matrix(tmp_path, [cfg("A", 0.10), cfg("B", 0.12)], check=0)
    assert doc["verdict"] == "extrapolate" and doc["ranking_consistent"] is True
    rows = matrix_rows(tmp_path / "logs" / "matrix.csv")
    assert len(rows) == 2 * 2 * 3 * 2  # configs x tiers x repeats x ranks
    # every matrix value is the number its log printed for that rank
    for row in rows:
        text = (tmp_path / "logs" / row["log"]).read_text()
        printed = re.search(rf"\[rank{row['rank']}\] DiT denoise took ([0-9.]+)s", text).group(1)
        assert float(row["dit_s"]) == float(printed)
    cells = {(c["config"], c["tier"]): c for c in doc["cells"]}
    # the workload's per-step cost, slowest rank +0.5 % (skew 0.01 x rank 1 / 2 ranks), noise <= 0.2 %
    assert cells[("A", "few")]["per_step_s"] == pytest.approx(0.1005, rel=3e-3)
    assert cells[("B", "anchor")]["per_step_s"] == pytest.approx(0.1206, rel=3e-3)
    assert all(c["slowest_rank"] == 1 for c in doc["cells"])


def test_ranking_flip_found_by_run(tmp_path):
    # per-step(n) = cost + fixed / n. A: 0.100 (few) -> 0.104 (anchor); B: 0.102 -> 0.099
    a = cfg("A", 0.10667, fixed=-0.02667)
    b = cfg("B", 0.097, fixed=0.02)
    _, doc = run_matrix(tmp_path, [a, b], check=1)
    assert doc["verdict"] == "rerun-anchor"
    assert [r["code"] for r in doc["reasons"]] == ["ranking-flip"]
    assert doc["ranking"][0]["order_few"] == ["A", "B"] and doc["ranking"][0]["order_anchor"] == ["B", "A"]


def test_drifting_config_found_by_run(tmp_path):
    # A: per-step 0.1 + 0.1/n -> 0.125 at 4 steps, 0.110 at 10: r = 0.88
    _, doc = run_matrix(tmp_path, [cfg("A", 0.1, fixed=0.1), cfg("B", 0.15)], check=1)
    assert doc["verdict"] == "rerun-anchor"
    assert [(r["code"], r["configs"]) for r in doc["reasons"]] == [("drift", ["A"])]
    r = next(d for d in doc["drift"] if d["config"] == "A")["r"]
    assert r == pytest.approx(0.110 / 0.125, rel=5e-3)


def test_noisy_cell_found_by_run(tmp_path):
    _, doc = run_matrix(tmp_path, [cfg("A", 0.1, noise=0.06), cfg("B", 0.15)], check=1)
    assert doc["verdict"] == "fix-noise"
    noisy = [c for c in doc["cells"] if c["status"] == "noisy"]
    assert noisy and {c["config"] for c in noisy} == {"A"}
    for c in noisy:  # recompute the dispersion from the per-run values
        per = [x["per_step_s"] for x in c["runs"]]
        assert c["dispersion_pct"] == pytest.approx((max(per) - min(per)) / sorted(per)[1] * 100)
        assert c["dispersion_pct"] > 3.0
    assert {tuple(r["cells"]) for r in doc["reasons"]} == {(f"A/{c['tier']}",) for c in noisy}


def test_too_few_repeats_is_no_evidence(tmp_path):
    _, doc = run_matrix(tmp_path, [cfg("A", 0.1), cfg("B", 0.15)], "--repeats", "2", check=2)
    assert doc["verdict"] == "no-evidence"
    assert {r["code"] for r in doc["reasons"]} == {"too-few-repeats"} and len(doc["reasons"]) == 4


def test_launch_mode_discards_warmup_requests(tmp_path):
    launch = ONCE + " --warmup 1"
    # each launch prints a cold warm-up request (x1.3) and then the measured one
    _, doc = run_matrix(tmp_path, [cfg("A", 0.1), cfg("B", 0.15)], "--warmup", "1", launch=launch,
                        check=0)
    assert doc["cells"][0]["per_step_s"] == pytest.approx(0.1005, rel=3e-3)
    # without --warmup the log holds 2 requests where 1 is expected: every run fails, nothing is kept
    proc, _ = run_matrix(tmp_path, [cfg("A", 0.1)], "--repeats", "1", launch=launch, name="nowarm",
                         check=2)
    assert "found 2 request(s), expected 1" in proc.stderr
    assert "no run succeeded" in proc.stderr.splitlines()[-1]


SERVE = f"{PY} {WORKLOAD} serve --port {{port}} --ranks {{devices}} --per-step-s {{cost}} --seed {{config}}"
REQUEST = f"{PY} {WORKLOAD} request --port {{port}} --steps {{steps}}"


def serve_args(*extra: str) -> list[str]:
    return ["--request", REQUEST, "--ready-regex", "server ready", *extra]


def test_server_mode_interleaves_and_drops_warmup(tmp_path):
    configs = [["--config", "A", "devices=2", "cost=0.1"], ["--config", "B", "devices=2", "cost=0.12"]]
    _, doc = run_matrix(tmp_path, configs, *serve_args(), launch=SERVE, check=0)
    assert doc["verdict"] == "extrapolate"
    log = (tmp_path / "logs" / "A" / "server.log").read_text()
    order = [int(s) for s in re.findall(r"sampling params: steps=(\d+)", log)]
    assert order == [10, 4, 10, 10, 4, 4, 10]  # warm-up (anchor steps), then ABBA per repeat
    # the cold first request went to the warm-up: it is not in the matrix
    warm = (tmp_path / "logs" / "A" / "runs" / "warmup-1.log").read_text()
    cold = max(float(x) for x in re.findall(r"took ([0-9.]+)s", warm) if float(x) > 1.2)
    assert cold == pytest.approx(1.3 * 10 * 0.1 * 1.005, rel=3e-3)
    a_rows = [r for r in matrix_rows(tmp_path / "logs" / "matrix.csv") if r["config"] == "A"]
    assert len(a_rows) == 12 and all(float(r["dit_s"]) < 1.1 for r in a_rows)


def test_server_mode_without_warmup_sees_the_cold_request(tmp_path):
    configs = [["--config", "A", "devices=2", "cost=0.1"], ["--config", "B", "devices=2", "cost=0.12"]]
    _, doc = run_matrix(tmp_path, configs, *serve_args("--warmup", "0"), launch=SERVE, check=1)
    assert doc["verdict"] == "fix-noise"
    assert {tuple(r["cells"]) for r in doc["reasons"]} == {("A/few",), ("B/few",)}


def test_timeout_kills_the_run_and_keeps_its_log(tmp_path):
    hang = tmp_path / "hang"
    hang.write_text("")
    pid = tmp_path / "pid"
    launch = ONCE + f" --hang-if-exists {hang} --pid-file {pid}"
    proc, doc = run_matrix(tmp_path, [cfg("A", 0.1)], "--repeats", "1", "--timeout-s", "0.5",
                           launch=launch, check=2)
    assert "timed out after 0.5 s" in proc.stderr
    meta = json.loads((tmp_path / "logs" / "A" / "runs" / "few-r1.json").read_text())
    assert meta["status"] == "timeout" and meta["timed_out"] is True
    assert "hanging" in (tmp_path / "logs" / "A" / "runs" / "few-r1.log").read_text()
    assert not alive(int(pid.read_text()))


def test_interrupted_matrix_is_valid_and_resumes(tmp_path):
    hang = tmp_path / "hang"
    hang.write_text("")
    logdir = tmp_path / "logs"
    # B's workload hangs while the file exists (order: A few r1, A anchor r1, B anchor r1, ...)
    launch = ONCE + " --hang-if-exists {hang} --pid-file {out}.pid"
    configs = [*cfg("A", 0.1), "hang=none", *cfg("B", 0.12), f"hang={hang}"]
    args = [PY, str(SCRIPTS / "fewstep.py"), "run", *configs, "--few-steps", "4", "--anchor-steps",
            "10", "--logdir", str(logdir), "--launch", launch, "--dit-regex", RX, "--json"]
    runner = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    b_log = logdir / "B" / "runs" / "anchor-r1.log"
    deadline = time.monotonic() + 60
    while not (b_log.exists() and "hanging" in b_log.read_text()):
        assert time.monotonic() < deadline and runner.poll() is None, runner.communicate()
        time.sleep(0.05)
    runner.send_signal(signal.SIGTERM)
    _, err = runner.communicate(timeout=30)
    assert runner.returncode == 130 and "interrupted" in err
    hung_pid = int((logdir / "B" / "runs" / "anchor-r1.out.pid").read_text())
    assert not alive(hung_pid)
    rows = matrix_rows(logdir / "matrix.csv")  # valid, and holds exactly the finished runs
    assert {(r["config"], r["tier"], r["repeat"]) for r in rows} == {("A", "few", "1"), ("A", "anchor", "1")}
    partial = run_script("fewstep.py", "analyze", str(logdir / "matrix.csv"), "--json", check=2)
    assert json.loads(partial.stdout)["verdict"] == "no-evidence"
    hang.unlink()
    resumed = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    assert "10 run(s) to do, 2 already in" in resumed.stderr
    assert json.loads(resumed.stdout)["verdict"] == "extrapolate"
    runs = logdir / "A" / "runs"
    assert not (runs / "few-r1.a2.log").exists()  # finished runs are not re-run
    assert (logdir / "B" / "runs" / "anchor-r1.a2.log").exists()  # the interrupted one is, logs kept
    assert (logdir / "B" / "runs" / "anchor-r1.log").exists()


def test_parse_only_rebuilds_the_matrix(tmp_path):
    run_matrix(tmp_path, [cfg("A", 0.1), cfg("B", 0.12)], check=0)
    logdir = tmp_path / "logs"
    original = matrix_rows(logdir / "matrix.csv")
    proc = run_script("fewstep.py", "run", "--parse-only", str(logdir), "--matrix",
                      str(tmp_path / "again.csv"), "--json", check=0)
    assert json.loads(proc.stdout)["verdict"] == "extrapolate"
    assert matrix_rows(tmp_path / "again.csv") == original
    bad = run_script("fewstep.py", "run", "--parse-only", str(logdir), "--dit-regex",
                     r"diffuse took (?P<dit_s>[0-9.]+)s", check=2)
    assert bad.stderr.count("\n") == 1 and "never matched" in bad.stderr and ".log" in bad.stderr


@pytest.mark.parametrize("extra, message", [
    (["--launch", "python w.py --steps {steps} --tp {tp}"], "unknown placeholder {tp}"),
    (["--launch", "python w.py --steps {steps:03d}"], "is not of the form {name}"),
    (["--launch", "python w.py --steps 4"], "must contain {steps}"),
    (["--launch", "serve {steps}", "--request", "x {steps}", "--ready-regex", "ok"], "is request-level"),
    (["--launch", "x {steps}", "--dit-regex", "took ([0-9.]+)s"], "needs a named group (?P<dit_s>"),
    (["--launch", "x {steps}", "--dit-regex", "took (?P<dit_s>[0-9.]+s"], "not a valid regular expression"),
])
def test_bad_templates_and_regexes_exit_2_before_launching(tmp_path, extra, message):
    args = ["run", "--config", "A", "devices=2", "--few-steps", "4", "--anchor-steps", "10",
            "--logdir", str(tmp_path / "logs"), "--dit-regex", RX, *extra]
    proc = run_script("fewstep.py", *args, check=2)
    assert proc.stderr.count("\n") == 1 and message in proc.stderr
    assert not (tmp_path / "logs").exists()


def test_regex_that_never_matches_names_the_log(tmp_path):
    proc = run_script("fewstep.py", "run", *cfg("A", 0.1), "--few-steps", "4", "--anchor-steps", "10",
                      "--logdir", str(tmp_path / "logs"), "--launch", ONCE, "--dit-regex",
                      r"diffuse took (?P<dit_s>[0-9.]+)s", check=2)
    last = proc.stderr.strip().splitlines()[-1]
    assert "never matched" in last and str(tmp_path / "logs" / "A" / "runs") in last


def test_regex_that_never_matches_in_server_mode_names_the_segment(tmp_path):
    configs = [["--config", "A", "devices=2", "cost=0.1"]]
    proc = run_script("fewstep.py", "run", *configs[0], "--few-steps", "4", "--anchor-steps", "10",
                      "--logdir", str(tmp_path / "logs"), "--launch", SERVE, *serve_args(),
                      "--settle-s", "0.2", "--dit-regex", r"diffuse took (?P<dit_s>[0-9.]+)s", check=2)
    last = proc.stderr.strip().splitlines()[-1]
    assert "never matched" in last and "warmup-1.log" in last
    assert "server ready" in (tmp_path / "logs" / "A" / "server.log").read_text()


def test_bom_and_comments_are_accepted(tmp_path):
    path = tmp_path / "m.csv"
    path.write_text("\ufeff# a comment\nconfig,tier,steps,repeat,rank,dit_s\nA,few,4,1,0,1.0\n")
    proc = run_script("fewstep.py", "analyze", str(path), "--json", check=2)
    assert json.loads(proc.stdout)["verdict"] == "no-evidence"


def test_config_must_name_its_card_count(tmp_path):
    proc = run_script("fewstep.py", "run", "--config", "A", "cost=1", "--few-steps", "4",
                      "--anchor-steps", "10", "--logdir", str(tmp_path), "--launch", "x {steps}",
                      "--dit-regex", RX, check=2)
    assert "devices=N is required" in proc.stderr


def test_changed_config_is_refused_on_resume(tmp_path):
    run_matrix(tmp_path, [cfg("A", 0.1), cfg("B", 0.12)], "--repeats", "1", check=2)
    proc, _ = run_matrix(tmp_path, [cfg("A", 0.2), cfg("B", 0.12)], check=2)
    assert "config A was" in proc.stderr and "new contract" in proc.stderr


def test_measured_iterations_are_the_denominator(tmp_path):
    # the framework runs steps - 1 forwards; --iters-regex makes the matrix say so
    launch = ONCE + " --iters-short 1"
    _, doc = run_matrix(tmp_path, [cfg("A", 0.1), cfg("B", 0.12)], "--iters-regex",
                        r"denoise iterations: (?P<iters>\d+)", launch=launch, check=0)
    assert doc["steps"] == {"few": 3, "anchor": 9}
    assert doc["cells"][0]["per_step_s"] == pytest.approx(0.1005, rel=3e-3)
    # with the requested count as denominator the per-step would be 3/4 of that and drift by 8 %
    _, wrong = run_matrix(tmp_path, [cfg("A", 0.1), cfg("B", 0.12)], "--repeats", "1", launch=launch,
                          name="req", check=2)
    assert wrong["steps"] == {"few": 4, "anchor": 10}
    assert wrong["drift"][0]["r"] == pytest.approx((9 / 10) / (3 / 4), rel=3e-3)


def test_count_contract_voids_runs_that_lack_the_expected_line(tmp_path):
    launch = ONCE + " --sp-size {sp}"
    configs = [[*cfg("A", 0.1), "sp=2"], [*cfg("B", 0.12), "sp=1"]]
    ok, doc = run_matrix(tmp_path, configs, "--expect", "sp_size={sp}", launch=launch, check=0)
    assert doc["verdict"] == "extrapolate"
    # B claims sp=2 but its workload prints sp_size=1: every B run is void, so no evidence
    launch_b_wrong = ONCE + " --sp-size 1"
    configs = [[*cfg("A", 0.1), "sp=1"], [*cfg("B", 0.12), "sp=2"]]
    proc, doc = run_matrix(tmp_path, configs, "--expect", "sp_size={sp}", "--repeats", "1",
                           launch=launch_b_wrong, name="void", check=2)
    assert "contract: --expect 'sp_size=2' not found" in proc.stderr
    missing = [r for r in doc["reasons"] if r["code"] == "missing-tier"]
    assert [r["cells"] for r in missing] == [["B/few", "B/anchor"]]
    assert {c["config"] for c in doc["cells"]} == {"A"}


def test_exposed_share_drift_found_by_run(tmp_path):
    # A's exposed share grows 1 point per step: 0.14 at 4 steps, 0.20 at 10 (6 pp > 5 pp)
    launch = ONCE + " --share {s0} --share-per-step {s1}"
    configs = [[*cfg("A", 0.1), "s0=0.10", "s1=0.01"], [*cfg("B", 0.12), "s0=0.05", "s1=0"]]
    _, doc = run_matrix(tmp_path, configs, "--share-regex",
                        r"\[rank(?P<rank>\d+)\] exposed comm share (?P<share>[0-9.]+)", launch=launch,
                        check=1)
    assert [(r["code"], r["configs"]) for r in doc["reasons"]] == [("share-drift", ["A"])]
    d = {x["config"]: x for x in doc["drift"]}
    assert d["A"]["share_few"] == pytest.approx(0.14) and d["A"]["share_anchor"] == pytest.approx(0.20)
    assert d["A"]["share_drift_pp"] == pytest.approx(6.0)
    assert d["B"]["share_ok"] is True


def test_reference_worked_example_is_real_output(tmp_path):
    """references/fewstep-validation.md section 8 pastes this command's output: keep them equal."""
    doc = (ROOT / "references" / "fewstep-validation.md").read_text()
    block = doc[doc.index("$ python scripts/fewstep.py run \\\n  --config tp1-usp2"):]
    block = block[:block.index("```")]
    expected = block[block.index("TIMING: DiT-only"):].rstrip("\n")
    configs = [["--config", "tp1-usp2", "devices=2", "cost=0.100", "fixed=0.06"],
               ["--config", "tp2-usp1", "devices=2", "cost=0.110", "fixed=0"],
               ["--config", "tp1-usp4", "devices=4", "cost=0.060", "fixed=0"],
               ["--config", "tp2-usp2", "devices=4", "cost=0.066", "fixed=0"]]
    launch = ("python tests/data/fewstep_workload.py once --ranks {devices} --steps {steps} "
              "--per-step-s {cost} --fixed-s {fixed} --seed {config}-{tier}-{repeat}")
    assert launch in block
    args = ["run", *sum(configs, []), "--few-steps", "4", "--anchor-steps", "10", "--repeats", "3",
            "--logdir", str(tmp_path / "runs-ex"), "--launch",
            launch.replace("python ", f"{PY} ", 1), "--dit-regex", RX]
    proc = run_script("fewstep.py", *args, check=1, timeout=120)
    assert proc.stdout.rstrip("\n") == expected


# --- issue 14 item 10: --warmup has two meanings; the run says which applied; --timing e2e is marked --------

def test_launch_mode_warmup_meaning_is_reported(tmp_path):
    launch = ONCE + " --warmup 2"
    # the process itself prints 2 cold warm-up requests, then the timed one; the runner discards 2
    proc, doc = run_matrix(tmp_path, [cfg("A", 0.1), cfg("B", 0.15)], "--warmup", "2", launch=launch, check=0)
    assert doc["warmup"]["mode"] == "launch" and doc["warmup"]["requests"] == 2
    assert "the runner sends nothing" in doc["warmup"]["meaning"]
    assert "warm-up (launch mode)" in proc.stderr
    assert doc["cells"][0]["per_step_s"] == pytest.approx(0.1005, rel=3e-3)  # the cold ones are gone
    # --warmup-steps has no meaning without a server: refused before anything runs
    proc, _ = run_matrix(tmp_path, [cfg("A", 0.1)], "--warmup-steps", "4", name="ws", check=2)
    assert "--warmup-steps: only in server mode" in proc.stderr


def test_server_mode_warmup_meaning_is_reported(tmp_path):
    configs = [["--config", "A", "devices=2", "cost=0.1"], ["--config", "B", "devices=2", "cost=0.12"]]
    proc, doc = run_matrix(tmp_path, configs, *serve_args("--warmup", "2", "--warmup-steps", "4"), launch=SERVE,
                           check=0)
    assert doc["warmup"] == {"mode": "server", "requests": 2, "steps": 4, "meaning": doc["warmup"]["meaning"]}
    assert "the runner sent 2 untimed request(s) of 4 steps" in doc["warmup"]["meaning"]
    log = (tmp_path / "logs" / "A" / "server.log").read_text()
    order = [int(s) for s in re.findall(r"sampling params: steps=(\d+)", log)]
    assert order[:2] == [4, 4] and len(order) == 2 + 6  # two warm-ups at 4 steps, then the 6 timed requests


def test_run_marks_end_to_end_times(tmp_path):
    _, doc = run_matrix(tmp_path, [cfg("A", 0.1, fixed=0.2), cfg("B", 0.12, fixed=0.2)], "--timing", "e2e", check=1)
    assert doc["timing"] == "e2e" and "end-to-end times" in doc["timing_cost"]["note"]
    assert {r["timing"] for r in matrix_rows(tmp_path / "logs" / "matrix.csv")} == {"e2e"}
    fixed = {c["config"]: c["fixed_s"] for c in doc["timing_cost"]["configs"]}
    assert fixed["A"] == pytest.approx(0.2 * 1.005, rel=2e-2)  # the workload's fixed part, slowest rank +0.5 %
    # a folder of DiT-only times does not take end-to-end ones
    proc, _ = run_matrix(tmp_path, [cfg("A", 0.1, fixed=0.2)], "--timing", "dit", check=2)
    assert "holds e2e times" in proc.stderr
