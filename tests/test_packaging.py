"""Installing the test extra never pins torch to one build, and CI installs a CPU torch (issue 14.15)."""

from __future__ import annotations

import re

from conftest import ROOT

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
EXTRAS = PROJECT["optional-dependencies"]


def _requirement(extra: str, name: str) -> str:
    found = [r for r in EXTRAS[extra] if re.match(rf"{name}\b", r, re.IGNORECASE)]
    assert len(found) == 1, (extra, name, EXTRAS[extra])
    return found[0]


def test_torch_is_a_floor_not_a_pin():
    for extra in ("test", "dist"):
        req = _requirement(extra, "torch")
        assert "==" not in req and ">=" in req, req


def test_hta_is_an_extra_of_its_own():
    assert not any(r.lower().startswith("holistictraceanalysis") for r in EXTRAS["test"])
    assert _requirement("hta", "holistictraceanalysis")


def test_readme_and_ci_install_the_cpu_build():
    cpu_index = "https://download.pytorch.org/whl/cpu"
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert f"pip install torch --index-url {cpu_index}" in readme
    assert cpu_index in ci and '".[test,hta]"' in ci
    # the CPU index is tried, and its failure (only PyPI reachable) does not stop CI
    line = next(x for x in ci.splitlines() if cpu_index in x)
    assert line.rstrip().endswith("\\")
    assert "||" in ci.split(cpu_index, 1)[1].splitlines()[1]


def test_the_quick_start_test_line_falls_back_to_pypi_torch():
    """Without the PyTorch CPU index (only PyPI reachable) the test line still installs a torch and goes on."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = readme.split("## Quick start", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    lines = [ln for ln in block.splitlines() if ln.strip()]
    assert len(lines) == 2, lines                       # exactly two commands
    test_line = lines[1]
    cpu, fallback = test_line.split("||", 1)
    assert "--index-url https://download.pytorch.org/whl/cpu" in cpu
    assert fallback.split(";", 1)[0].strip() == "python3 -m pip install torch"
    assert test_line.rstrip().endswith("python3 -m pytest -q")
