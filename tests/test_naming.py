"""The upstream skill is named precisely: 'the MindIE-SD skill', never an internal nickname."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# 'seed' is allowed where it is a random seed, or inside the GitHub organisation name ByteDance-Seed
ALLOWED = re.compile(r"ByteDance-Seed|random|--seed|seed=|manual_seed|\bseed\W?\s*[:)=,]|\.seed\b|seed \d|shared seed"
                     r"|seed fixed|prompt, seed|one seed|seed broadcast|\bseed\b.*\bint\b"
                     # the seeds of generated outputs in the quality gate (quality_gate.py, fewstep-validation 11)
                     r"|seed<k>|seed-to-seed|seed by seed|\bseed \{|seed\(s\)|seed[- ]k\b|seed entry"
                     r"|seed folder|per-seed|\[.seed.\]|seed ->|\bseed in |SEED\.match"
                     r"|(same|different|every|each|any|its|own|reference|one-device|other|another) seed\b"
                     r"|seed (does not reach|given twice|without|has no|output)", re.IGNORECASE)


def _tracked(*roots: str) -> list[Path]:
    out = subprocess.run(["git", "ls-files", *roots], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return [ROOT / line for line in out.split() if line]


def test_no_nickname_for_the_upstream_skill():
    hits = []
    for path in _tracked("references", "scripts", "templates", "SKILL.md", "README.md"):
        if path.suffix not in {".md", ".py", ".toml", ".csv", ".txt"}:
            continue
        for no, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if re.search(r"\bseed\b", line, re.IGNORECASE) and not ALLOWED.search(line):
                hits.append(f"{path.relative_to(ROOT)}:{no}: {line.strip()[:100]}")
    assert not hits, "say 'the MindIE-SD skill' (with a commit where a figure is cited):\n" + "\n".join(hits)
