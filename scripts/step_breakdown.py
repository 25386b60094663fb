#!/usr/bin/env python3
"""Per rank and step: Computing, Communication, Not Overlapped, Overlapped, Free and Stage (us).

Computed from the device tasks alone (union of compute kernels, union of communication ops, their
difference, the idle rest of the span), then compared with the profiler's own step_trace_time.csv
when the profile has one (or analysis.db StepTraceTime for a db export): exit 1 if any column differs by
more than its tolerance, derived per row from the input's time resolution and the number of segments
summed (stated in the output). A rank without kernel_details.csv shows the profiler's own figures;
--profiler-tables shows them for every rank and reads no task row (the fast path on large db exports).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ditpar import cli  # noqa: E402

PROG = "step_breakdown.py"
TABLE_COLUMNS = {
    "rank": "rank",
    "step": "step",
    "computing_us": "computing_us",
    "communication_us": "comm_us",
    "communication_not_overlapped_us": "comm_not_overlapped_us",
    "overlapped_us": "overlapped_us",
    "free_us": "free_us",
    "stage_us": "stage_us",
    "max_abs_diff_us": "max_abs_diff_us",
    "evidence": "evidence",
}

#: what the step columns still answer on a training profile (cli.note_not_dit)
NOT_DIT_STILL = ("the per-step computing / communication / overlap / free figures hold for any profile, but a step "
                 "here is a training step (forward + backward + optimizer), not one DiT denoising step")


def main() -> None:
    cli.run(PROG, body)


def body() -> int:
    parser = cli.make_parser(
        PROG,
        __doc__.strip().splitlines()[0],
        "python scripts/step_breakdown.py tests/data/ascend_cann83 --json",
    )
    parser.add_argument("paths", nargs="+", metavar="PATH",
                        help="*_ascend_pt folder(s), a parent of rank folders, or Kineto .json/.json.gz traces")
    cli.add_workers_arg(parser)
    cli.add_tables_arg(parser)
    cli.add_output_args(parser, csv=True, plot=False)
    args = parser.parse_args()

    from ditpar.analysis import breakdown
    from ditpar.analysis.breakdown import COLUMNS, TOLERANCE_RULE, step_breakdown
    from ditpar.readers import load_profiles

    # each rank's rows are computed where it is read: 8 large ranks never meet in one table
    profiles = load_profiles(args.paths, workers=args.workers, per_rank=breakdown.rank_rows,
                             progress=cli.read_progress(PROG, args),
                             tasks=not args.profiler_tables)
    cli.warn_skipped(PROG, profiles.skipped)
    if args.profiler_tables:
        cli.require_evidence(profiles, "step_trace", "step_breakdown.py --profiler-tables")
    result = step_breakdown(profiles)
    rows = [{k: v for k, v in r.items() if not k.startswith("window_")} for r in result.rows]
    for r in rows:
        tol = r.get("tolerance_us")
        r["max_tolerance_us"] = max(tol.values()) if tol else None
    reference = profiles.step_trace
    if reference is not None and profiles.partial_ranks:  # their rows are the profiler's own: nothing to compare
        reference = reference[~reference["rank"].isin(list(profiles.partial_ranks))]
    if result.compared == 0 and reference is not None and len(reference):
        from ditpar.errors import NoEvidenceError

        ref_steps = sorted({int(x) for x in reference["step"].dropna()})
        task_steps = sorted({int(r["step"]) for r in rows if r.get("step") is not None})
        why = ("a profile of another run, or renumbered steps?" if task_steps else
               "no task carries a step: no 'Step Id' in kernel_details.csv and no ProfilerStep span holds them")
        raise NoEvidenceError(f"step_trace_time.csv has step(s) {ref_steps} but the tasks fall in step(s) "
                              f"{task_steps}: no step compared ({why})")
    if result.compared == 0 and not profiles.ranks and profiles.partial_ranks:
        status = "profiler-only"
    elif result.compared == 0:
        status = "no-reference"
    else:
        status = "match" if result.ok else "mismatch"
    for line in [*result.mismatches, *result.unmatched_reference]:
        sys.stderr.write(f"{PROG}: {line}\n")
    cli.note_not_dit(PROG, result.not_dit, NOT_DIT_STILL)
    if args.csv:
        import pandas as pd

        flat = []
        for r in rows:
            rec = {k: v for k, v in r.items() if k not in ("reference", "tolerance_us", "segments")}
            ref = r["reference"] or {}
            tol = r.get("tolerance_us") or {}
            rec.update({f"reference_{c}": ref.get(c) for c in COLUMNS})
            rec.update({f"tolerance_{c}": tol.get(c) for c in COLUMNS})
            flat.append(rec)
        cli.write_csv(args.csv, pd.DataFrame(flat))
    if args.json:
        cli.print_json("step_breakdown", {
            "format": profiles.fmt,
            "source": "profiler tables" if args.profiler_tables else "tasks",
            "ranks": profiles.ranks,
            "status": status,
            "compared": result.compared,
            "tolerance_rule": TOLERANCE_RULE,
            "evidence": {str(k): v for k, v in profiles.evidence().items()},
            "profiler_only_ranks": result.profiler_only,
            "mismatches": result.mismatches + result.unmatched_reference,
            "unclassified": dict(profiles.unclassified),
            "skipped_ranks": [{"rank": s["rank"], "reason": s["reason"], "path": s["path"]}
                              for s in profiles.skipped],
            "not_dit_inference": result.not_dit,
            "rows": rows,
        })
    else:
        print(cli.format_table(rows, list(TABLE_COLUMNS), digits=3, headers=TABLE_COLUMNS))
        print()
        print(_summary(profiles.fmt, status, result, args.profiler_tables))
        print(f"evidence per rank: {_evidence_line(profiles.evidence())}")
        if profiles.unclassified:
            print(f"unclassified names: {dict(profiles.unclassified)}")
    return 1 if status == "mismatch" else 0


def _summary(fmt: str, status: str, result, tables: bool = False) -> str:
    if status == "profiler-only" and tables:
        return ("--profiler-tables: the rows are the profiler's own step figures (step_trace_time.csv / analysis.db "
                "StepTraceTime), no task row read, nothing recomputed or compared; run without it to check them.")
    if status == "profiler-only":
        return ("no rank has device tasks (kernel_details.csv): the rows are the profiler's own step figures "
                "(step_trace_time.csv / msprof-analyze cluster_step_trace_time.csv), nothing recomputed or compared.")
    if status == "no-reference":
        return f"{fmt} profile: no step_trace_time.csv to compare with (computed from tasks only)."
    verdict = "all columns agree" if status == "match" else "MISMATCH"
    tols = [t for r in result.rows for t in (r.get("tolerance_us") or {}).values()]
    span = f"{min(tols):g}-{max(tols):g} us" if tols else "none"
    return (f"compared with the profiler's step figures: {result.compared} row(s), {verdict}; tolerance per row "
            f"and column {span} (2 x segments x stamp error + the reference's own error; see --json "
            f"tolerance_us); max_abs_diff_us is the largest column difference.")


def _evidence_line(evidence: dict[int, list[str]]) -> str:
    return "; ".join(f"rank {r}: {', '.join(v) or 'nothing'}" for r, v in evidence.items())


if __name__ == "__main__":
    main()
