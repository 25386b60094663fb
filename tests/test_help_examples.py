"""The examples printed by --help run as written (issue 14.14 and 14.16)."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys

import pytest
from conftest import ROOT, SCRIPTS, run_script


def _example_lines(help_text: str) -> list[str]:
    """Command lines of the 'example:' block of a --help text."""
    block = help_text.split("example:\n", 1)[1]
    return [line.strip() for line in block.splitlines()
            if line.strip().startswith(("python ", "torchrun "))]


def _run_example(line: str, cwd) -> subprocess.CompletedProcess:
    words = shlex.split(line)
    if words[0] == "torchrun":
        words = [sys.executable, "-m", "torch.distributed.run", "--standalone", *words[1:]]
    else:
        words = [sys.executable, *words[1:]]
    # an example writes under /tmp (never into the checkout); the test keeps it in its own folder (before the
    # repository's own paths are made absolute: a checkout may itself lie under /tmp)
    words = [str(cwd / w[len("/tmp/"):]) if w.startswith("/tmp/") else w for w in words]
    words = [str(ROOT / w) if w.startswith(("scripts/", "benchmarks/", "tests/")) else w for w in words]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg"}
    if os.path.exists("/sys/class/net/lo"):
        env.setdefault("GLOO_SOCKET_IFNAME", "lo")
    return subprocess.run(words, capture_output=True, text=True, cwd=cwd, timeout=240, env=env)


@pytest.mark.parametrize("args", [[], ["score"], ["evaluate"]])
def test_plan_help_names_the_subcommands_and_repository_data(args):
    text = run_script("plan.py", *args, "--help", check=0).stdout
    assert "../shared" not in text and "benchmarks/published" in text
    if not args:
        assert "plan.py score" in text and "plan.py evaluate" in text


def test_plan_score_and_evaluate_examples_run(tmp_path):
    text = run_script("plan.py", "--help", check=0).stdout
    lines = [line for line in _example_lines(text) if " score " in line or " evaluate " in line]
    assert len(lines) == 2
    for line in lines:
        proc = _run_example(line, tmp_path)
        assert proc.returncode == 0, (line, proc.stderr)
    scored = (tmp_path / "flux_scored.csv").read_text().splitlines()
    assert scored[0].endswith("predicted_latency_s,score_note,predicted_low_s,predicted_high_s")


def test_no_help_points_at_shared():
    for script in sorted(SCRIPTS.glob("*.py")):
        text = run_script(script.name, "--help", check=0).stdout
        assert "../shared" not in text, script.name


def test_a2a_audit_example_runs_as_written(tmp_path):
    lines = _example_lines(run_script("a2a_audit.py", "--help", check=0).stdout)
    assert lines[0].startswith("torchrun") and len(lines) == 3
    codes = []
    for line in lines:
        proc = _run_example(line, tmp_path)
        codes.append(proc.returncode)
        assert "Traceback" not in proc.stderr, proc.stderr
    assert codes == [0, 0, 1], codes  # probe, faithful run, the injected send-buffer rewrite named


def test_quality_gate_examples_run(tmp_path):
    pytest.importorskip("skimage", reason="quality_gate.py needs scikit-image (pip install -e '.[quality]')")
    lines = _example_lines(run_script("quality_gate.py", "--help", check=0).stdout)
    assert len(lines) == 2
    for line in lines:   # the shipped example folder holds a plan that changed the sample: exit 1
        proc = _run_example(line, tmp_path)   # its tests/ folder made absolute after the /tmp outputs are mapped
        assert proc.returncode == 1 and proc.stderr.endswith("verdict fail (causal-bug fail)\n"), proc.stderr
    assert (tmp_path / "quality.csv").read_text().startswith("plan,seed,psnr_db,identical,ssim,lpips,within_band")
