#!/usr/bin/env python3
"""Rebuild benchmarks/unseen_residuals.csv: each unseen round's speedup rows as that round was scored, before any
cost term changed for it (benchmarks/VALIDATION.md sections 4 and 7.17).

For each round the repository is exported at the commit that scored it (its tables copied in where they were added
later), and that commit's own code scores the round's tables held out (leave one source out; round 1's commit
predates the held-out speedup figures, and its shipped constants were chosen without the round, so its in-sample
speedup rows are held out for it). Needs a git checkout. Run: python benchmarks/unseen_residuals.py [--out FILE]

Each row also records its stratum as it stood when the round was scored: how new the question was to the published
tables of that commit (its own round's left out), by today's rule (ditpar.plan.judge.conformal.stratum). A later
table of the same framework or machine does not relabel an error measured before it existed.
`--strata-only` recomputes that column of the existing file and keeps its residuals as they are.
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# round -> (commit whose code scored it, tables, {table: commit it was added at, when after the scoring commit})
ROUNDS = {
    "round 1 (2026-12-04)": ("ad285da^", ("xdit_cogvideox15_l20.csv", "xdit_cogvideox15_l40.csv"),
                             {"xdit_cogvideox15_l20.csv": "ad285da", "xdit_cogvideox15_l40.csv": "ad285da"}),
    "MindIE-SD round (2026-12-04)": ("339fd1a^", ("mindiesd_quick_start.csv",), {"mindiesd_quick_start.csv": "339fd1a"}),
    "round 2 (2026-12-04)": ("77901f8", ("xdit_cogvideox_a100.csv", "xdit_pixart_l40_hybrid.csv",
                                         "vllmomni_qwen_image_a100.csv", "diffusers_distributed_inference.csv"),
                             {"diffusers_distributed_inference.csv": "5f93afd"}),
    "round 3 (2026-12-04)": ("96a709d", ("cachedit_flux2_hybrid_l20.csv", "cachedit_nvidia_h100.csv",
                                         "cachedit_ascend_800ia2.csv"), {}),
    "round 4 (2026-12-05)": ("b13750c", ("diffsynth_engine_qwen_image_multicard.csv", "wan21_comp_effic.csv",
                                         "wan22_comp_effic.csv"), {}),
    "Open-Sora 2.0 round (2026-12-05)": ("727be48", ("opensora2_comp_effic.csv",), {}),
    "round 5 (2026-12-05)": ("08e639e^", ("mochi_xdit_l40.csv", "vllmomni_pr1221_wan22_ti2v_h800.csv",
                                          "vllmomni_qwen_image_edit_tp_h200.csv", "hunyuanworld_voyager_xdit_h20.csv"),
                             {t: "08e639e" for t in ("mochi_xdit_l40.csv", "vllmomni_pr1221_wan22_ti2v_h800.csv",
                                                     "vllmomni_qwen_image_edit_tp_h200.csv",
                                                     "hunyuanworld_voyager_xdit_h20.csv")}),
    "round 6 (2026-12-07)": ("578f4ec", ("vllmomni_qwen_image_ulysses_h800.csv", "sglang_ci_h100_perf_baselines.csv"),
                             {t: "536e501" for t in ("vllmomni_qwen_image_ulysses_h800.csv",
                                                     "sglang_ci_h100_perf_baselines.csv")}),
    "round 7 (2026-12-07)": ("7244ebf", ("trtllm_pr13821_wan22_gb200.csv", "vllmomni_pr851_longcat_cfg_h800.csv",
                                         "cachedit_ascend_zimage_800ia2.csv"), {}),
    "round 8 (2026-12-08)": ("81d7923", ("trtllm_visualgen_flux_b200.csv", "sglang_pr27826_flux_tp_h200.csv",
                                         "fastvideo_issue175_hunyuan_h100.csv"), {}),
    "round 9 (2026-12-08)": ("eb1ae78", ("teacache_xdit_a800.csv",), {}),
}
# Run inside the exported tree: the held-out |log2(pred / measured speedup)| per table, from that tree's own code.
SNIPPET = r'''
import inspect, json, math, sys
sys.path.insert(0, "scripts")
try:
    from ditpar.plan.judge import evaluate, heldout
except ImportError:
    from ditpar.plan import evaluate, heldout
try:
    from ditpar.plan.cost import Tunables
except ImportError:
    from ditpar.plan.cost.timing import Tunables
want = set(sys.argv[1].split(","))
frames = {}
for d in sys.argv[2:]:
    frames.update(evaluate.load_tables(d))
out = {}
if hasattr(heldout, "SourceResult") and "speedup_log2" in heldout.SourceResult.__dataclass_fields__:
    kw = {"by": "source"} if "by" in inspect.signature(heldout.evaluate_heldout).parameters else {}
    for r in heldout.evaluate_heldout(frames, Tunables(), **kw)["sources"]:
        if r.source in want:
            out[r.source] = list(r.speedup_log2)
else:   # before held-out speedups: the shipped constants were chosen without the round's tables
    for s in evaluate.evaluate_tables({k: v for k, v in frames.items() if k in want})["speedups"]:
        out.setdefault(s["table"], []).append(abs(math.log2(s["predicted_speedup"] / s["measured_speedup"])))
print(json.dumps(out))
'''


def score_round(commit: str, tables: tuple[str, ...], added: dict[str, str], calibration: Path) -> dict:
    """{table: [|log2 error|, ...]} of one round, scored by the code of `commit`."""
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit], check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        for table, at in added.items():
            text = subprocess.run(["git", "-C", str(ROOT), "show", f"{at}:benchmarks/published/{table}"], check=True,
                                  capture_output=True).stdout
            (Path(tmp) / "benchmarks" / "published" / table).write_bytes(text)
        got = subprocess.run([sys.executable, "-c", SNIPPET, ",".join(tables), "benchmarks/published",
                              str(calibration)], cwd=tmp, check=True, capture_output=True, text=True).stdout
    return json.loads(got)


def tables_at(commit: str) -> set[str]:
    """The published tables (file names) of `commit`."""
    names = subprocess.run(["git", "-C", str(ROOT), "ls-tree", "--name-only", commit, "benchmarks/published/"],
                           check=True, capture_output=True, text=True).stdout.split()
    return {n.rsplit("/", 1)[-1] for n in names if n.endswith(".csv")}


def strata_at_scoring() -> dict[tuple[str, str], str]:
    """{(round, table): stratum} with the collection of the round's scoring commit (its own tables left out); each
    table's rows read from today's tree, where its model, machine and framework are as they were."""
    sys.path.insert(0, str(ROOT / "scripts"))
    from ditpar.plan.judge import conformal
    from ditpar.plan.judge.evaluate import load_tables
    from ditpar.plan.judge.heldout import collect_rows

    today = ROOT / "benchmarks" / "published"
    rows = collect_rows(load_tables(today))
    out = {}
    for name, (commit, tables, _) in ROUNDS.items():
        present = tables_at(commit) - set(tables)
        gone = sorted(t for t in present if not (today / t).is_file())
        old = []
        if gone:   # tables published then and moved out since: read as they were at the commit
            with tempfile.TemporaryDirectory() as tmp:
                for t in gone:
                    (Path(tmp) / t).write_bytes(subprocess.run(
                        ["git", "-C", str(ROOT), "show", f"{commit}:benchmarks/published/{t}"], check=True,
                        capture_output=True).stdout)
                old = collect_rows(load_tables(tmp))
        coll = conformal.collection_of([r for r in rows if r.source in present] + old)
        for r in rows:
            if r.source in tables:
                out.setdefault((name, r.source), conformal.stratum(
                    r.model.name, r.hw.accelerator, conformal._framework(r), conformal.borrowed_machine(r.hw), coll))
    return out


HEADER = ["round", "table", "scored_at_commit", "abs_log2_speedup_error", "stratum_at_scoring"]


def write(path: str, rows: list[list[str]]) -> None:
    strata = strata_at_scoring()
    with open(path, "w", newline="") as f:   # a result file of this benchmark, not a user's input
        w = csv.writer(f)
        w.writerow(HEADER)
        w.writerows([*r[:4], strata[(r[0], r[1])]] for r in rows)
    print(f"{len(rows)} rows -> {path}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "unseen_residuals.csv"))
    ap.add_argument("--calibration", default=str(ROOT.parent / "shared" / "calibration"),
                    help="the developers' calibration tables scored beside the published ones (default ../shared)")
    ap.add_argument("--strata-only", action="store_true",
                    help="recompute the stratum_at_scoring column of the existing --out file; keep its residuals")
    args = ap.parse_args()
    if args.strata_only:
        with open(args.out, newline="") as f:
            write(args.out, [r[:4] for r in list(csv.reader(f))[1:]])
        return
    rows = []
    for name, (commit, tables, added) in ROUNDS.items():
        for table, errs in score_round(commit, tables, added, Path(args.calibration)).items():
            rows += [[name, table, commit, f"{e:.4f}"] for e in errs]
        print(f"{name}: scored at {commit}", file=sys.stderr)
    write(args.out, rows)


if __name__ == "__main__":
    main()
