"""Every script on every kind of damaged input: no traceback, exit 2 with one stderr line and no
output file, or a result whose --json parses (issue 14.22). The corpus is tests/damaged_corpus.py.

The runs are real subprocesses (as a user runs them), all started at once by one fixture on a
small thread pool; each parametrised test then checks one case.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from conftest import ROOT, SCRIPTS
from damaged_corpus import OUT, build

CASE_TIMEOUT_S = 60
_BASE = Path(tempfile.mkdtemp(prefix="ditpar-corpus-"))
atexit.register(shutil.rmtree, _BASE, True)
CASES = build(_BASE / "inputs")


def _run(case) -> dict:
    out = _BASE / "out" / case.id.replace(":", "__").replace("/", "_")
    out.mkdir(parents=True)
    args = [a.replace(OUT, str(out)) for a in case.args]
    env = {**os.environ, "MPLBACKEND": "Agg", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    try:
        proc = subprocess.run([sys.executable, str(SCRIPTS / case.script), *args], capture_output=True,
                              text=True, cwd=ROOT, timeout=CASE_TIMEOUT_S, env=env)
    except subprocess.TimeoutExpired:
        return {"rc": "timeout", "stdout": "", "stderr": "", "out": out, "args": args}
    return {"rc": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr, "out": out, "args": args}


@pytest.fixture(scope="module")
def results() -> dict[str, dict]:
    workers = max(2, min(6, 2 * (os.cpu_count() or 1)))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return dict(zip([c.id for c in CASES], pool.map(_run, CASES), strict=True))


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
