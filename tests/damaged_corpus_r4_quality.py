"""Damaged input, round 4: quality_gate.py DIR (plan folders of seed images or frames).

Every case must end in exit 2 with one stderr line naming the file and what was expected; ``cases(base)`` writes
the inputs under ``base`` (hooked into damaged_corpus.build).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import quality_synth as qs

if TYPE_CHECKING:
    from damaged_corpus import Case


def _layout(folder: Path, name: str) -> Path:
    """A good two-plan, two-seed layout to damage."""
    root = folder / name
    shutil.rmtree(root, ignore_errors=True)
    return qs.write_layout(root, {"1dev": None, "U4": 2.0}, seeds=(0, 1))


def cases(base: Path) -> list[Case]:
    """Write the damaged layouts under base and return their cases."""
    from damaged_corpus import Case  # here: damaged_corpus imports this module

    folder = base / "r4_quality"
    folder.mkdir(parents=True, exist_ok=True)
    damages = {}

    root = _layout(folder, "empty-png")
    (root / "U4" / "seed1.png").write_bytes(b"")
    damages["empty-png"] = (root, "seed1.png: not a readable PNG")
    root = _layout(folder, "truncated-png")
    png = root / "U4" / "seed1.png"
    png.write_bytes(png.read_bytes()[:200])
    damages["truncated-png"] = (root, "seed1.png: not a readable PNG")
    root = _layout(folder, "text-png")
    (root / "U4" / "seed1.png").write_text("plan,seed\nU4,1\n")
    damages["text-png"] = (root, "seed1.png: not a readable PNG")
    root = _layout(folder, "size-mismatch")
    qs.save_png(root / "U4" / "seed1.png", np.zeros((16, 32, 3), np.uint8))
    damages["size-mismatch"] = (root, "seed1.png: shape (1, 16, 32, 3)")
    root = _layout(folder, "grey-vs-rgb")
    qs.save_png(root / "U4" / "seed0.png", np.zeros((32, 32), np.uint8))
    damages["grey-vs-rgb"] = (root, "seed0.png: shape (1, 32, 32)")
    root = _layout(folder, "tiny-image")
    for k in (0, 1):
        qs.save_png(root / "1dev" / f"seed{k}.png", np.full((4, 4, 3), k, np.uint8))
    damages["tiny-image"] = (root, "SSIM needs at least 7x7")
    root = _layout(folder, "stray-file")
    (root / "U4" / "notes.txt").write_text("hello")
    damages["stray-file"] = (root, "notes.txt: not a seed entry")
    root = _layout(folder, "file-at-plan-level")
    (root / "readme.md").write_text("hello")
    damages["file-at-plan-level"] = (root, "readme.md: not a plan folder")
    root = _layout(folder, "seed-without-reference")
    qs.save_png(root / "U4" / "seed7.png", qs.base(7))
    damages["seed-without-reference"] = (root, "seed 7 has no one-device reference")
    root = _layout(folder, "no-reference")
    shutil.rmtree(root / "1dev")
    damages["no-reference"] = (root, "no reference folder '1dev'")
    root = _layout(folder, "one-seed")
    (root / "1dev" / "seed1.png").unlink()
    (root / "U4" / "seed1.png").unlink()
    damages["one-seed"] = (root, "needs at least 2")
    root = _layout(folder, "identical-seeds")
    shutil.copy(root / "1dev" / "seed0.png", root / "1dev" / "seed1.png")
    damages["identical-seeds"] = (root, "are identical: the seed does not reach the generator")
    root = _layout(folder, "seed-twice")
    np.save(root / "U4" / "seed1.npy", np.zeros((1, 32, 32, 3), np.uint8))
    damages["seed-twice"] = (root, "seed 1 given twice")
    root = _layout(folder, "empty-frames-dir")
    (root / "U4" / "seed1.png").unlink()
    (root / "U4" / "seed1").mkdir()
    damages["empty-frames-dir"] = (root, "a seed folder without frame PNGs")
    root = _layout(folder, "frames-dir-stray")
    (root / "U4" / "seed1.png").unlink()
    qs.save_png(root / "U4" / "seed1" / "frame000.png", qs.base(1))
    (root / "U4" / "seed1" / "frame001.jpg").write_bytes(b"\xff\xd8")
    damages["frames-dir-stray"] = (root, "frame001.jpg: not a frame PNG")
    for name, arr, reason in (
            ("npy-nan", np.full((1, 32, 32, 3), np.nan), "must be finite and in [0, 1]"),
            ("npy-huge-values", np.full((1, 32, 32, 3), 7.0), "must be finite and in [0, 1]"),
            ("npy-int64", np.zeros((1, 32, 32, 3), np.int64), "dtype int64"),
            ("npy-2d", np.zeros((32, 32), np.uint8), "expected frames (T, H, W)")):
        root = _layout(folder, name)
        for k in (0, 1):
            (root / "U4" / f"seed{k}.png").unlink()
            np.save(root / "U4" / f"seed{k}.npy", arr)
        damages[name] = (root, reason)
    root = _layout(folder, "npy-pickled")
    (root / "U4" / "seed1.png").unlink()
    np.save(root / "U4" / "seed1.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    damages["npy-pickled"] = (root, "seed1.npy: not a readable .npy array")
    root = _layout(folder, "npy-truncated")
    (root / "U4" / "seed1.png").unlink()
    np.save(root / "U4" / "seed1.npy", np.zeros((1, 32, 32, 3), np.uint8))
    data = (root / "U4" / "seed1.npy").read_bytes()
    (root / "U4" / "seed1.npy").write_bytes(data[:100])
    damages["npy-truncated"] = (root, "seed1.npy: not a readable .npy array")

    out = [Case(f"quality_gate:{name}", "quality_gate.py", [str(root), "--json", "--csv", "{out}/q.csv"],
                reason=reason) for name, (root, reason) in damages.items()]
    good = _layout(folder, "good")
    out += [Case("quality_gate:dir-missing", "quality_gate.py", [str(folder / "absent")]),
            Case("quality_gate:dir-is-file", "quality_gate.py", [str(good / "1dev" / "seed0.png")],
                 reason="is a file; expected a folder"),
            Case("quality_gate:margin-nan", "quality_gate.py", [str(good), "--margin-db", "nan"]),
            Case("quality_gate:margin-negative", "quality_gate.py", [str(good), "--margin-db", "-3"],
                 reason="expected 0 or more"),
            Case("quality_gate:csv-is-dir", "quality_gate.py", [str(good), "--csv", str(folder)])]
    return out
