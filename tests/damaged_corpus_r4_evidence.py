"""Damaged input, round 4: plan.py --evidence FILE.csv (a user's own measured table in the published schema).

Every case must end in exit 2 with one stderr line naming the file and what was expected; ``cases(base)`` writes
the inputs under ``base`` (hooked into damaged_corpus.build).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from damaged_corpus import Case

HEADER = ("source_repo,source_path,model,hardware,interconnect,n_devices,resolution_or_seq,steps,ulysses,ring,"
          "pipefusion,cfg,tp,other_config,latency_s,notes")
ROW = "me/bench,run.md,FLUX.1-dev,L20,PCIe,4,1024x1024,28,4,1,1,1,1,pytorch,8.2,mine"


def cases(base: Path) -> list[Case]:
    """Write the --evidence inputs under base and return their cases."""
    from damaged_corpus import Case  # here: damaged_corpus imports this module

    folder = base / "r4_evidence"
    folder.mkdir(parents=True, exist_ok=True)
    plan = ["--model", "FLUX.1-dev", "--hardware", "L20", "--devices", "4", "--evidence"]
    files = {
        "no-latency-column.csv": (HEADER.replace(",latency_s", "") + "\n" + ROW.replace(",8.2", "") + "\n",
                                  "missing column(s) latency_s"),
        "short-row.csv": (HEADER + "\n" + ROW.rsplit(",", 3)[0] + "\n", "field(s), the header has 16"),
        "empty.csv": ("", "missing column(s)"),
        "huge-devices.csv": (HEADER + "\n" + ROW.replace(",4,1024x1024", ",1e12,1024x1024") + "\n",
                             "is out of range"),
        "fraction-degree.csv": (HEADER + "\n" + ROW.replace(",28,4,1", ",28,2.5,1") + "\n", "not a whole number"),
    }
    out = []
    for name, (text, reason) in files.items():
        (folder / name).write_text(text)
        out.append(Case(f"plan:evidence-{name.split('.')[0]}", "plan.py", [*plan, str(folder / name)],
                        reason=reason))
    (folder / "table.json").write_text("{}")
    out.append(Case("plan:evidence-not-csv", "plan.py", [*plan, str(folder / "table.json")],
                    reason="expected a CSV table"))
    out.append(Case("plan:evidence-missing", "plan.py", [*plan, str(folder / "absent.csv")]))
    out.append(Case("plan:evidence-folder", "plan.py", [*plan, str(folder)]))
    return out
