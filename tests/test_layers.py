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


def test_a_package_face_only_hands_names_on():
    """No package __init__.py over 40 lines or defining a function or class: logic lives in named modules."""
    bad = []
    for init in PKG.rglob("__init__.py"):
        tree = ast.parse(init.read_text())
        defines = [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))]
        if len(init.read_text().splitlines()) > 40 or defines:
            bad.append(f"{init.relative_to(PKG)}: {len(init.read_text().splitlines())} lines, defines {defines}")
    assert not bad, bad


def test_no_module_prefix_shared_by_three_files_of_one_folder():
    """A prefix shared by three modules (ascend, ascend_db, ascend_partial) is a room waiting to be a folder."""
    from collections import Counter

    bad = []
    for folder in {p.parent for p in PKG.rglob("*.py")}:
        stems = [p.stem for p in folder.glob("*.py") if p.stem != "__init__"]
        prefixes = Counter(s.split("_")[0] for s in stems if "_" in s or any(o.startswith(s + "_") for o in stems))
        bad += [f"{folder.relative_to(PKG)}: {p} x{n}" for p, n in prefixes.items() if n >= 3]
    assert not bad, bad
