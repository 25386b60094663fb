"""plan_bench.py with FLUX.1-dev's block kinds (joint + single stream) shrunk to widths of a few dozen, so
the single-stream path runs in a test; the preset lookup is the only thing replaced."""

from __future__ import annotations

import dataclasses
import runpy
import sys
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
sys.path.insert(0, str(SCRIPTS))

from ditpar.plan.inputs import presets  # noqa: E402

TINY = {"hidden": 32, "heads": 4, "kv_heads": 4, "head_dim": 8, "ffn": 64, "blocks": {"joint": 2, "single": 3},
        "text_joint_tokens": 8}


def tiny_model(name: str):
    return dataclasses.replace(presets.resolve_model(name), **TINY)


if __name__ == "__main__":
    real = presets.resolve_model
    presets.resolve_model = lambda name: dataclasses.replace(real(name), **TINY)
    sys.argv = [str(SCRIPTS / "plan_bench.py"), *sys.argv[1:]]
    runpy.run_path(str(SCRIPTS / "plan_bench.py"), run_name="__main__")
