"""scripts/ditpar/plan/ rooms (issue 23): inputs / cost / decide / judge, no import circle, cost/ imports nothing above."""

from __future__ import annotations

import ast
from pathlib import Path

PLAN = Path(__file__).resolve().parents[1] / "scripts" / "ditpar" / "plan"
ROOMS = ("inputs", "cost", "decide", "judge")


def graph() -> dict[str, set[str]]:
    """Module (dotted, under ditpar.plan) -> plan modules it imports, lazy imports inside functions included."""
    mods = {".".join(x for x in p.relative_to(PLAN).with_suffix("").parts if x != "__init__"): p
            for p in PLAN.rglob("*.py")}
    out: dict[str, set[str]] = {}
    for name, path in mods.items():
        deps = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("ditpar.plan"):
                base = node.module.removeprefix("ditpar.plan").lstrip(".")
                for alias in node.names:
                    full = f"{base}.{alias.name}".lstrip(".")
                    deps.add(full if full in mods else base)
        out[name] = {d for d in deps if d in mods and d != name}
    return out


def test_every_module_sits_in_a_room():
    loose = [m for m in graph() if m and m.split(".")[0] not in ROOMS]
    assert loose == [], f"plan/ modules outside inputs/ cost/ decide/ judge/: {loose}"


def test_no_import_circle():
    g = graph()
    state: dict[str, int] = {}

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for d in g[m]:
            if d.startswith(m + ".") or m.startswith(d + ".") or d == "" or m == "":
                continue   # a package and its own modules (__init__ re-exports)
            if state.get(d) == 1:
                raise AssertionError(f"import circle: {' -> '.join(path + [m, d])}")
            if d not in state:
                visit(d, path + [m])
        state[m] = 2
    for m in g:
        if m not in state:
            visit(m, [])


def test_cost_imports_nothing_above_it_and_decide_nothing_from_judge():
    g = graph()
    for m, deps in g.items():
        room = m.split(".")[0]
        above = {"cost": ("decide", "judge"), "decide": ("judge",), "inputs": ("decide", "judge")}.get(room, ())
        bad = sorted(d for d in deps if d.split(".")[0] in above)
        assert bad == [], f"{m} imports {bad} (above the {room}/ room)"
