"""Every script behaves the same when the package's dependencies are not installed (issue 14.13).

`python -S -s -E` starts an interpreter without site-packages: the standard library only, as on a
machine where `pip install -e .` was never run. --help must still work; a run that needs numpy
must print the install hint as one line and exit 2, never a ModuleNotFoundError traceback.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import ROOT, SCRIPTS

BARE = [sys.executable, "-S", "-s", "-E"]
RANK0 = "tests/data/ascend_cann83/node0_23101_20251127201437501_ascend_pt"
NEEDS_NUMPY = {
    "collectives.py": [RANK0],
    "bubbles.py": [RANK0],
    "stage_delta.py": [RANK0, RANK0],
    "step_breakdown.py": [RANK0],
    "mask_bound.py": ["profile", RANK0, "--family", "alltoall", "--consumer", "attention"],
}


def _bare(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*BARE, *args], capture_output=True, text=True, cwd=ROOT, timeout=60)


@pytest.fixture(scope="module", autouse=True)
def _numpy_absent():
    if _bare("-c", "import numpy").returncode == 0:
        pytest.skip("numpy is importable even without site-packages here; cannot simulate its absence")


@pytest.mark.parametrize("script", sorted(p.name for p in SCRIPTS.glob("*.py")))
def test_help_works_without_numpy(script):
    proc = _bare(str(SCRIPTS / script), "--help")
    assert proc.returncode == 0, proc.stderr
    assert "example:" in proc.stdout and proc.stderr == ""


@pytest.mark.parametrize("script", sorted(NEEDS_NUMPY))
def test_run_without_numpy_prints_the_install_hint(script):
    proc = _bare(str(SCRIPTS / script), *NEEDS_NUMPY[script])
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert "'numpy'" in proc.stderr and "pip install -e ." in proc.stderr
