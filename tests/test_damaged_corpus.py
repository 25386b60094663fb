"""Every script on every kind of damaged input: no traceback, exit 2 with one stderr line and no
output file, or a result whose --json parses (issue 14.22). The corpus is tests/damaged_corpus.py.

Each case runs in a process of its own, as a user runs it: where the OS can fork, a child of a parent
that has already imported numpy, pandas and matplotlib runs the script as __main__ (about ten times
faster than a fresh interpreter, still one process per case); elsewhere a fresh interpreter.
One fixture runs all cases a few at a time; each parametrised test then checks one case.
"""

from __future__ import annotations

import atexit
import json
import os
import runpy
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from conftest import ROOT, SCRIPTS
from damaged_corpus import OUT, build

CASE_TIMEOUT_S = 60
_BASE = Path(tempfile.mkdtemp(prefix="ditpar-corpus-"))
atexit.register(shutil.rmtree, _BASE, True)
CASES = build(_BASE / "inputs")


def _prepare(case) -> tuple[Path, list[str]]:
    out = _BASE / "out" / case.id.replace(":", "__").replace("/", "_")
    out.mkdir(parents=True)
    return out, [a.replace(OUT, str(out)) for a in case.args]


def _run_subprocess(case) -> dict:
    out, args = _prepare(case)
    env = {**os.environ, "MPLBACKEND": "Agg", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    try:
        proc = subprocess.run([sys.executable, str(SCRIPTS / case.script), *args], capture_output=True,
                              text=True, cwd=ROOT, timeout=CASE_TIMEOUT_S, env=env)
    except subprocess.TimeoutExpired:
        return {"rc": "timeout", "stdout": "", "stderr": "", "out": out, "args": args}
    return {"rc": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr, "out": out, "args": args}


def _child(script: Path, args: list[str], log: Path) -> None:
    """In the forked child: fds 1 and 2 to files, run the script as __main__, exit with its code."""
    code = 1
    try:
        for fd, name in ((1, "stdout"), (2, "stderr")):
            target = os.open(log.with_suffix(f".{name}"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(target, fd)
            os.close(target)
        sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
        sys.stdin = open(os.devnull, encoding="utf-8")  # noqa: SIM115
        os.chdir(ROOT)
        sys.argv = [str(script), *args]
        try:
            runpy.run_path(str(script), run_name="__main__")
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            if isinstance(exc.code, str):
                sys.stderr.write(exc.code + "\n")
        except BaseException:  # what the interpreter would print: a traceback
            traceback.print_exc()
            code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _run_forked(cases, workers: int) -> dict[str, dict]:
    """Run cases in forked children, `workers` at a time, each with CASE_TIMEOUT_S."""
    import matplotlib
    import numpy  # noqa: F401
    import pandas  # noqa: F401

    matplotlib.use("Agg")
    import matplotlib.pyplot  # noqa: F401

    pending = list(cases)
    running: dict[int, tuple[object, Path, list[str], Path, float]] = {}
    done: dict[str, dict] = {}
    while pending or running:
        while pending and len(running) < workers:
            case = pending.pop(0)
            out, args = _prepare(case)
            log = out.parent / (out.name + ".log")
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                _child(SCRIPTS / case.script, args, log)
            running[pid] = (case, out, args, log, time.monotonic())
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            for other, (case, out, args, _log, started) in list(running.items()):
                if time.monotonic() - started > CASE_TIMEOUT_S:
                    os.kill(other, signal.SIGKILL)
                    os.waitpid(other, 0)
                    del running[other]
                    done[case.id] = {"rc": "timeout", "stdout": "", "stderr": "", "out": out, "args": args}
            time.sleep(0.005)
            continue
        if pid not in running:
            continue
        case, out, args, log, _ = running.pop(pid)
        rc = os.waitstatus_to_exitcode(status)
        read = {n: log.with_suffix(f".{n}").read_text(encoding="utf-8", errors="replace")
                for n in ("stdout", "stderr")}
        done[case.id] = {"rc": rc, **read, "out": out, "args": args}
    return done


@pytest.fixture(scope="module")
def results() -> dict[str, dict]:
    workers = max(2, min(6, 2 * (os.cpu_count() or 1)))
    if hasattr(os, "fork") and os.environ.get("DITPAR_CORPUS_SUBPROCESS") != "1":
        return _run_forked(CASES, workers)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return dict(zip([c.id for c in CASES], pool.map(_run_subprocess, CASES), strict=True))


def test_corpus_covers_every_script_and_damage_kind():
    scripts = {p.name for p in SCRIPTS.glob("*.py")}
    assert scripts <= {c.script for c in CASES}, scripts - {c.script for c in CASES}
    kinds = ["empty", "truncated", "missing-column", "renamed-column", "text", "nan", "inf", "negative",
             "dup", "non-utf8", "dir", "missing-rank", "duplicate-rank", "gz-bad", "huge"]
    for kind in kinds:
        assert any(kind in c.id for c in CASES), kind


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_damaged_input(case, results):
    r = results[case.id]
    where = f"{case.script} {' '.join(r['args'])}\nrc={r['rc']}\nstderr:\n{r['stderr'][-2000:]}"
    assert r["rc"] != "timeout", f"hung for {CASE_TIMEOUT_S} s: {where}"
    assert "Traceback" not in r["stderr"], where
    assert r["rc"] in (0, 1, 2), where
    if case.expect == "2":
        assert r["rc"] == 2, where
    leftovers = sorted(p.name for p in r["out"].iterdir())
    if r["rc"] == 2:
        lines = r["stderr"].splitlines()
        assert len(lines) == 1 and lines[0].strip(), where
        assert leftovers == [], f"partial output {leftovers}: {where}"
        if case.reason:
            assert case.reason in lines[0], f"the message does not say '{case.reason}': {where}"
    else:
        assert not [n for n in leftovers if n.startswith(".")], f"temporary files left: {where}"
        if "--json" in case.args:
            json.loads(r["stdout"])
        if case.warn:
            assert case.warn in r["stderr"].lower(), f"no warning naming '{case.warn}': {where}"
