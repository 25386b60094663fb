"""Damaged input, round 4: the CFG-schedule flags of plan.py (--prompt-tokens, --negative-tokens, --cfg-trunc-ratio) and a framework
profile whose cfg_calls names no way of running the CFG branches.

Every case must end in exit 2 with one stderr line naming the flag, file or key and what was expected; ``cases(base)``
writes the inputs under ``base`` (hooked into damaged_corpus.build).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from damaged_corpus import Case

ROOT = Path(__file__).resolve().parents[1]
PLAN = ["--model", "Qwen-Image", "--hardware", "H100", "--devices", "8"]


def cases(base: Path) -> list[Case]:
    """Write the serving inputs under base and return their cases."""
    from damaged_corpus import Case  # here: damaged_corpus imports this module

    folder = base / "r4_serving"
    folder.mkdir(parents=True, exist_ok=True)
    profile = (ROOT / "templates" / "frameworks" / "vllm-omni.toml").read_text()
    (folder / "cfg-calls-three.toml").write_text(profile.replace('cfg_calls = "two"', 'cfg_calls = "three"', 1))
    (folder / "cfg-calls-number.toml").write_text(profile.replace('cfg_calls = "two"', "cfg_calls = 2", 1))
    return [
        Case("plan:serving-cfg-calls-unknown", "plan.py",
             [*PLAN, "--framework", str(folder / "cfg-calls-three.toml")], reason="cfg_calls"),
        Case("plan:serving-cfg-calls-number", "plan.py",
             [*PLAN, "--framework", str(folder / "cfg-calls-number.toml")], reason="cfg_calls"),
        Case("plan:serving-trunc-above-one", "plan.py", [*PLAN, "--cfg-trunc-ratio", "1.5"], reason="0..1"),
        Case("plan:serving-trunc-nan", "plan.py", [*PLAN, "--cfg-trunc-ratio", "nan"], reason="finite"),
        Case("plan:serving-negative-tokens-negative", "plan.py", [*PLAN, "--negative-tokens", "-3"],
             reason="--negative-tokens"),
        Case("plan:serving-negative-tokens-huge", "plan.py", [*PLAN, "--negative-tokens", "1000000000"],
             reason="--negative-tokens"),
        Case("plan:serving-prompt-tokens-negative", "plan.py", [*PLAN, "--prompt-tokens", "-1"],
             reason="--prompt-tokens"),
        Case("plan:serving-prompt-tokens-zero-cross", "plan.py",
             ["--model", "PixArt-alpha", "--hardware", "H100", "--devices", "8", "--prompt-tokens", "0"],
             reason="at least 1"),
        Case("plan:serving-negative-tokens-no-text", "plan.py",
             ["--model", "Example-MHA-56H-50L", "--hardware", "H100", "--devices", "8", "--negative-tokens", "4"],
             reason="no text tokens"),
    ]
