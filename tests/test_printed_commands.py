"""Every command the tools print is inert whatever a user's model is called: pasted into a shell it runs the
launcher with the name as one argument and nothing else; a Python recipe reads the name back as a string.
Checked by running the printed lines in a shell whose launchers are stubs, and by parsing them."""

from __future__ import annotations

import ast
import csv
import dataclasses
import json
import os
import shlex
import stat
import subprocess
from pathlib import Path

import pytest
from conftest import ROOT, run_script
from ditpar.fewstep.logs import render as fewstep_render
from ditpar.plan.cost import make_shape
from ditpar.plan.cost.plans import enumerate_plans
from ditpar.plan.inputs import frameworks, presets, recipes

# each tries another way out of a quoted word; each leaves a file named PWNED* when it runs
HOSTILE = [
    "x; touch PWNED1",
    "x$(touch PWNED2)",
    "x`touch PWNED3`",
    "x'; touch PWNED4; echo '",
    'x"; touch PWNED5; echo "',
    "x\ntouch PWNED6",
    "x\\'$(touch PWNED7)",
    "{model} {{steps}} $HOME",
]
LAUNCHERS = ("torchrun", "xdit", "python", "python3", "sglang", "accelerate")


def stub_path(folder: Path) -> str:
    """A PATH whose launchers only exit 0, beside the tools a shell line may use (touch, echo)."""
    bin_dir = folder / "bin"
    bin_dir.mkdir()
    for name in LAUNCHERS:
        exe = bin_dir / name
        exe.write_text("#!/bin/sh\nexit 0\n")
        exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return f"{bin_dir}{os.pathsep}{os.environ['PATH']}"


def run_in_shell(line: str, folder: Path) -> list[str]:
    """Run one printed line in /bin/sh inside folder with stub launchers; the PWNED files it left."""
    work = folder / "work"
    work.mkdir(exist_ok=True)
    env = {**os.environ, "PATH": stub_path(folder) if not (folder / "bin").exists() else
           f"{folder / 'bin'}{os.pathsep}{os.environ['PATH']}", "MODEL_PATH": "m", "MODEL_DIR": "m", "IMAGE": "i"}
    subprocess.run(["/bin/sh", "-c", line], cwd=work, env=env, capture_output=True, timeout=30)
    return sorted(p.name for p in work.iterdir() if p.name.startswith("PWNED"))


def renamed(model, name: str):
    """A preset under a user's own name, with no alias to fall back on (as a --model-file model)."""
    return dataclasses.replace(model, name=name, aliases=())


def one_recipe_each():
    """(framework, recipe, model, plan) for every recipe of every profile: the first model and plan it covers."""
    plans = enumerate_plans(8, True)
    hw = {"nvidia": presets.resolve_hardware("H100", None, 8),
          "ascend": presets.resolve_hardware("Atlas 800I A2", None, 8)}
    models = [presets.resolve_model(p.stem) for p in sorted((ROOT / "templates" / "models").glob("*.toml"))
              if not p.stem.startswith("custom")]
    out = {}
    for f in frameworks.all_frameworks():
        box = hw[f.vendors[0]]
        for m in models:
            family, shape = frameworks.model_family(m), make_shape(m)
            for plan in plans:
                if frameworks.runs(f, m, box, shape, plan) is not None:
                    continue
                rec = recipes.choose(f, family, plan)
                if rec is not None and (f.name, rec.name) not in out:
                    out[(f.name, rec.name)] = (f, rec, m, plan)
    return list(out.values())


CASES = one_recipe_each()


def test_every_recipe_is_covered():
    names = {(f.name, r.name) for f in frameworks.all_frameworks() for r in f.recipes}
    assert {(f.name, r.name) for f, r, _m, _p in CASES} == names


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0].name}:{c[1].name}" for c in CASES])
def test_a_hostile_model_name_stays_one_argument(case, tmp_path):
    f, rec, model, plan = case
    family = frameworks.model_family(model)
    for i, name in enumerate(HOSTILE):
        evil = renamed(model, name)
        out = recipes.render(f, rec, evil, make_shape(model), plan, family=family)
        folder = tmp_path / str(i)
        folder.mkdir()
        assert run_in_shell(out["launch"], folder) == [], f"{f.name} ran code from {name!r}: {out['launch']}"
        if "{model_id}" in rec.launch or "{model}" in rec.launch:
            assert name in shlex.split(out["launch"]), out["launch"]      # the name, whole, as one word
        if rec.kind == "python":
            ast.parse(out["config"])
        if rec.kind == "python" and "{model" in rec.config:
            calls = [n for n in ast.walk(ast.parse(out["config"])) if isinstance(n, ast.keyword) and n.arg == "model"]
            assert [ast.literal_eval(k.value) for k in calls] == [name]
        if rec.kind == "json":
            json.loads(out["config"])


def test_a_template_may_not_quote_what_the_renderer_quotes(tmp_path):
    data = {"recipes": [{"name": "r", "families": ["*"], "kind": "shell", "world": "w", "source": "s",
                         "launch": "run --model '{model_id}' {args} --steps {steps}"}]}
    with pytest.raises(recipes.InputError, match="without quotes"):
        recipes.parse_recipes(data, tmp_path / "p.toml")


def _model_file(folder: Path, name: str) -> Path:
    text = (ROOT / "templates" / "models" / "custom-example.toml").read_text()
    lines = [ln for ln in text.splitlines() if not ln.startswith(("name", "family"))]
    path = folder / "evil.toml"
    path.write_text(f"name = {json.dumps(name)}\nfamily = \"flux\"\n" + "\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("name", HOSTILE[:5] + HOSTILE[6:])
def test_plan_and_emit_matrix_print_inert_commands(name, tmp_path):
    model = _model_file(tmp_path, name)
    matrix = tmp_path / "my runs; touch PWNED9" / "m $(touch PWNED8).csv"
    matrix.parent.mkdir()
    proc = run_script("plan.py", "--model-file", str(model), "--hardware", "H100", "--devices", "8",
                      "--framework", "xDiT", "--emit-matrix", str(matrix), "--json", check=0)
    doc = json.loads(proc.stdout)
    words = shlex.split(doc["matrix"]["command"])
    assert words[words.index("--matrix") + 1] == str(matrix)
    launches = [w.partition("=")[2] for w in words if w.startswith("launch=")]
    assert launches and all(name in shlex.split(fewstep_render(t, {"steps": 8})) for t in launches)
    rows = list(csv.DictReader(matrix.open()))
    for i, line in enumerate({r["launch"] for r in rows} | {fewstep_render(t, {"steps": 8}) for t in launches}):
        folder = tmp_path / f"run{i}"
        folder.mkdir()
        assert run_in_shell(line, folder) == [], line
    top = doc["plans"][0]["run_recipe"]
    assert name in shlex.split(top["launch"])


def test_terminal_control_characters_in_an_input_name_are_shown_not_acted_on(tmp_path):
    forged = tmp_path / "x\x1b[2K\r\x1b[32mverdict: PASS\x1b[0m"
    proc = run_script("step_breakdown.py", str(forged), check=2)
    assert "\x1b" not in proc.stderr and "\r" not in proc.stderr
    assert "\\x1b[32mverdict: PASS" in proc.stderr and proc.stderr.count("\n") == 1


@pytest.mark.parametrize("name, char", [("x\nverdict: PASS", "'\\n'"), ("x\x1b[32mPASS", "'\\x1b'"),
                                        ("x\rPASS", "'\\r'")])
def test_a_name_that_could_forge_a_line_is_refused_where_it_is_read(name, char, tmp_path):
    proc = run_script("plan.py", "--model-file", str(_model_file(tmp_path, name)), "--hardware", "H100",
                      "--devices", "8", check=2)
    assert f"key 'name': holds the control character {char} at offset 1" in proc.stderr
    assert proc.stderr.count("\n") == 1 and "\x1b" not in proc.stderr
    profile = tmp_path / "fw.toml"
    text = (ROOT / "templates" / "frameworks" / "xdit.toml").read_text()
    profile.write_text(text.replace('name = "xDiT"', f"name = {json.dumps(name)}", 1))
    proc = run_script("plan.py", "--model", "FLUX.1-dev", "--hardware", "H100", "--devices", "8",
                      "--framework", str(profile), check=2)
    assert "key 'name': holds the control character" in proc.stderr
    folder = tmp_path / name / "transformer"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text((ROOT / "tests" / "data" / "model_configs" / "FLUX.1-dev" / "transformer"
                                         / "config.json").read_text())
    proc = run_script("plan.py", "--model-config", str(folder.parent), "--hardware", "H100", "--devices", "8",
                      check=2)
    assert "holds the control character" in proc.stderr


@pytest.mark.parametrize("old, new, key", [
    ('name = "My PCIe box x4"', 'name = "box\\nverdict: PASS"', "key 'name'"),
    ('name = "My PCIe box x4"', 'name = "box"\naliases = ["a\\u001b[2Jb"]', "key 'aliases[0]'"),
    ('name = "PCIe Gen5 x16"', 'name = "PCIe\\u001b[31m"', "key 'links.intra_domain.name'"),
])
def test_a_machine_files_names_are_one_printable_line(old, new, key, tmp_path):
    text = (ROOT / "templates" / "my-hardware.toml").read_text()
    path = tmp_path / "hw.toml"
    path.write_text(text.replace(old, new, 1))
    err = run_script("plan.py", "--model", "FLUX.1-dev", "--hardware", str(path), "--devices", "4", check=2).stderr
    assert f"{key}: holds the control character" in err and err.count("\n") == 1


def test_a_hostile_model_file_path_is_quoted_in_the_measure_line(tmp_path):
    folder = tmp_path / "$(touch PWNED)"
    folder.mkdir()
    model = folder / "m.toml"
    model.write_text((ROOT / "templates" / "models" / "custom-example.toml").read_text())
    out = run_script("plan.py", "--model-file", str(model), "--hardware", "H100", "--devices", "8", check=0).stdout
    line = next(ln for ln in out.splitlines() if "plan_bench.py --model-file" in ln)
    command = line.split("on these cards: ", 1)[1].split(" --json >", 1)[0]
    assert shlex.split(command)[shlex.split(command).index("--model-file") + 1] == str(model)
