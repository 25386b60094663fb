"""Shared test helpers: where the repository and ../shared live, and how to run a script."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "scripts"
SHARED = ROOT.parent / "shared"
FIXTURES = SHARED / "fixtures"
CALIBRATION = SHARED / "calibration"

if str(SCRIPTS) not in sys.path:
    sys.path.insert(0, str(SCRIPTS))


def need_shared(*parts: str) -> Path:
    """Path under ../shared, or skip the test with a clear reason when it is absent."""
    path = SHARED.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"shared data not present: {path} (tests that use real fixtures need ../shared)")
    return path


def run_script(name: str, *args: str, check: int | None = None, cwd: Path | None = None,
               timeout: float = 300, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run scripts/<name> with the current Python; optionally assert its exit code."""
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", "MPLBACKEND": "Agg", **(env or {})}
    proc = subprocess.run(
        [sys.executable, str(SCRIPTS / name), *args],
        capture_output=True, text=True, cwd=cwd or ROOT, timeout=timeout, env=full_env,
    )
    if check is not None:
        assert proc.returncode == check, (
            f"{name} {' '.join(args)} exited {proc.returncode}, expected {check}\n"
            f"stdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"
        )
    return proc


def torchrun(nproc: int, script: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run scripts/<script> under torch.distributed.run on this host with nproc processes (gloo on CPU)."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
           str(nproc), str(SCRIPTS / script), *args]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "MPLBACKEND": "Agg", "OMP_NUM_THREADS": "1"}
    if os.path.exists("/sys/class/net/lo"):  # pin gloo to loopback (failure-modes.md 2.3)
        env.setdefault("GLOO_SOCKET_IFNAME", "lo")
    return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=timeout, env=env)
