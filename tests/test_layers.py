"""The library's layering (scripts/ditpar/README.md): each package imports only the layers below it."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parent.parent / "scripts" / "ditpar"
PLUMBING = {"cli", "errors", "files", "formats", "limits", "timeparse"}
# package -> the ditpar packages it may import (besides itself and the plumbing)
ALLOWED = {
    "plumbing": set(),
    "core": set(),
    "readers": {"core"},
    "analysis": {"core", "readers"},
    "masking": {"core", "readers", "analysis"},
    "plan": {"masking"},
    "fewstep": set(),
    "comm": set(),
    "scope": set(),
    "hang": {"plan"},   # names groups with plan.py's rank layout
    "planbench": {"plan", "comm"},
}


def _layer(path: Path) -> str:
    rel = path.relative_to(PKG)
    return "plumbing" if len(rel.parts) == 1 else rel.parts[0]


def _imported_layers(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("ditpar"):
            parts = node.module.split(".")
            if len(parts) == 1:  # from ditpar import x
                names.update(a.name for a in node.names)
            else:
                names.add(parts[1])
        elif isinstance(node, ast.Import):
            names.update(a.name.split(".")[1] for a in node.names if a.name.startswith("ditpar."))
        assert not (isinstance(node, ast.ImportFrom) and node.level), f"{path}: use absolute ditpar imports"
    return {"plumbing" if n in PLUMBING else n for n in names}


def test_every_module_belongs_to_a_known_layer():
    layers = {_layer(p) for p in PKG.rglob("*.py")}
    assert layers <= set(ALLOWED), layers - set(ALLOWED)


def test_imports_point_down_the_layers_only():
    bad = []
    for path in sorted(PKG.rglob("*.py")):
        own = _layer(path)
        for used in _imported_layers(path) - {own, "plumbing", "__version__"}:
            if used not in ALLOWED[own]:
                bad.append(f"{path.relative_to(PKG)} ({own}) imports {used}")
    assert not bad, "\n".join(bad)


def test_flat_top_level_is_small():
    top = sorted(p.name for p in PKG.glob("*.py"))
    assert len(top) <= 7, top
