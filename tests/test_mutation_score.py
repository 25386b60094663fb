"""tools/mutation/mutation_score.py on a tiny module: a mutant the test catches is killed, one it cannot
see survives, an equivalent one listed in the TOML is left out of the score, and no file is edited."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import ROOT

TINY = "def positive(x):\n    return x > 0\n"
TEST = ("import sys\nsys.path.insert(0, {d!r})\nfrom tiny import positive\n\n\n"
        "def test_positive():\n    assert positive(1) is True and positive(-1) is False\n")


def test_tiny_module_killed_survived_and_equivalent(tmp_path):
    mod, test = tmp_path / "tiny.py", tmp_path / "test_tiny.py"
    mod.write_text(TINY)
    test.write_text(TEST.format(d=str(tmp_path)))
    # 'x >= 0' cannot be told from 'x > 0' by positive(1) and positive(-1): listed as equivalent here
    eq = tmp_path / "eq.toml"
    eq.write_text(f'[[equivalent]]\nmodule = "{mod}"\nfunction = "positive"\nchange = "\'>\' -> \'>=\'"\ncode = "return x > 0"\n'
                  'reason = "positive(0) is not asked"\n')
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "mutation" / "mutation_score.py"), "--module", str(mod),
                           "--tests", str(test), "--equivalent", str(eq), "--json", "--quiet"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    (res,) = json.loads(proc.stdout)["modules"]
    # mutants by hand: '>' -> '>=' / '<='; 0 -> 1 / -1; the return deleted = 5
    assert res["mutants"] == 5 and res["equivalent"] == 1 and res["not covered"] == 0
    # 'x > -1' still gives positive(-1) = False: survives; '<=', 'x > 1' and no return are caught
    assert [(s["where"], s["change"]) for s in res["survivors"]] == [(f"{mod}:2:16", "0 -> -1")]
    assert (res["killed"], res["survived"], res["score"]) == (3, 1, 0.75)
    assert mod.read_text() == TINY                     # the mutants never touched the file
