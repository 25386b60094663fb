#!/usr/bin/env python3
"""Stage delta of two profiles (or two step_trace_time.csv): per-column deltas with a closure check.

Columns are means over steps; the headline compares each side's slowest rank (largest mean Stage).
Closure: dStage = dComputing + dComm(Not Overlapped) + dFree - dBubble within --tolerance-us
(exit 1 if not). Per-family deltas come from the collective tables. --linearity --cards N1 N2
reads A at N1 cards and B at N2 cards (or --stage-us T1 T2) and reports speedup and linearity.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ditpar import cli
from ditpar.errors import InputError

if TYPE_CHECKING:
    from ditpar.analysis.stage_delta import DeltaReport, Side

PROG = "stage_delta.py"
TOOL = "stage_delta"


def build_parser():
    parser = cli.make_parser(
        PROG, __doc__.strip().splitlines()[0],
        "python scripts/stage_delta.py planA/rank0_ascend_pt planB/rank0_ascend_pt\n"
        "  python scripts/stage_delta.py --linearity --cards 4 8 run4cards/ run8cards/",
    )
    parser.add_argument("paths", nargs="*", metavar="A B",
                        help="two profiles (folders/files) or two step_trace_time.csv files: A then B")
    parser.add_argument("--tolerance-us", type=float, default=1.0,
                        help="largest accepted closure error in us (default 1.0)")
    parser.add_argument("--linearity", action="store_true", help="report n1 -> n2 card scaling of the stage time")
    parser.add_argument("--cards", type=int, nargs=2, metavar=("N1", "N2"), help="card counts of A and B")
    parser.add_argument("--stage-us", type=float, nargs=2, metavar=("T1", "T2"),
                        help="with --linearity: DiT stage times instead of profiles")
    parser.add_argument("--exposed-us", type=float, nargs=2, metavar=("E1", "E2"),
                        help="with --stage-us: exposed communication of each side")
    cli.add_output_args(parser, csv=True, plot=False)
    return parser


def load_side(label: str, path: str) -> Side:
    from ditpar.analysis.stage_delta import side_from_profile, side_from_step_trace_csv

    p = Path(path)
    if not p.exists():
        raise InputError(f"{path}: no such file or folder")
    if p.is_file() and p.suffix.lower() == ".csv":
        from ditpar.readers.ascend.text import rank_of_file

        rank, rank_from = rank_of_file(p)
        return side_from_step_trace_csv(label, path, rank, rank_from)
    from ditpar.readers import load_profiles

    ps = load_profiles([path])
    # the slowest rank of a side is a cross-rank answer: a skipped rank makes it partial (exit 1)
    cli.warn_skipped(PROG, ps.skipped, needs_all=True)
    SKIPPED.extend({"side": label, "rank": s["rank"], "reason": s["reason"], "path": s["path"]} for s in ps.skipped)
    return side_from_profile(label, ps)


#: ranks left out of either side (incomplete files), reported in JSON and turned into exit 1
SKIPPED: list[dict] = []


def delta_payload(rep: DeltaReport) -> dict:
    return {
        "columns": [{k: c[k] for k in ("name", "a_us", "b_us", "delta_us")} for c in rep.columns],
        "closure_error_us": rep.closure_error_us, "tolerance_us": rep.tolerance_us, "closed": rep.closed,
        "a_rank": rep.a_rank if rep.a_id == "rank" else None, "b_rank": rep.b_rank if rep.b_id == "rank" else None,
        "a_device": rep.a_rank if rep.a_id == "device" else None,
        "b_device": rep.b_rank if rep.b_id == "device" else None,
        "a_rank_from": rep.a_rank_from, "b_rank_from": rep.b_rank_from,
        "a_source": rep.a_source, "b_source": rep.b_source,
        "steps": rep.steps, "per_rank": rep.per_rank, "families": rep.families,
    }


def print_delta(rep: DeltaReport) -> None:
    out = sys.stdout.write
    out(f"A: slowest {rep.a_id} {rep.a_rank} ({rep.a_source}; {rep.a_rank_from}); "
        f"B: slowest {rep.b_id} {rep.b_rank} ({rep.b_source}; {rep.b_rank_from}); mean over steps, us\n")
    out(cli.format_table(rep.columns, ["name", "a_us", "b_us", "delta_us"], digits=3) + "\n")
    verdict = "closes" if rep.closed else "DOES NOT CLOSE"
    out(f"closure: dStage - (dComputing + dCNO + dFree - dBubble) = {rep.closure_error_us:.3f} us "
        f"(tolerance {rep.tolerance_us:g}): {verdict}\n")
    if len(rep.per_rank) > 1:
        key = "rank" if rep.per_rank[0]["rank"] is not None else "device"
        out(f"\nPer {key} (B - A):\n")
        cols = [key, "delta_stage_us", "delta_computing_us", "delta_communication_not_overlapped_us",
                "delta_free_us", "closure_error_us"]
        out(cli.format_table(rep.per_rank, cols, digits=3) + "\n")
    if rep.families:
        out("\nPer family, per step at the slowest ranks (sum and exposed, us):\n")
        out(cli.format_table(rep.families, digits=3) + "\n")


def lin_from_paths(args) -> dict:
    from ditpar.analysis.stage_delta import compare, linearity

    a, b = load_side("A", args.paths[0]), load_side("B", args.paths[1])
    rep = compare(a, b, args.tolerance_us)
    col = {c["key"]: c for c in rep.columns}
    lin = linearity(col["stage_us"]["a_us"], col["stage_us"]["b_us"], *args.cards,
                    col["communication_not_overlapped_us"]["a_us"], col["communication_not_overlapped_us"]["b_us"])
    return {**lin, "a_rank": rep.a_rank, "b_rank": rep.b_rank}


def main() -> None:
    args = build_parser().parse_args()

    def body() -> int:
        from ditpar.analysis.stage_delta import compare, linearity

        cli.require_partners(args, {"--cards": "--linearity", "--stage-us": "--linearity",
                                    "--exposed-us": "--stage-us"})
        if args.linearity:
            if not args.cards:
                raise InputError("--linearity needs --cards N1 N2")
            if args.stage_us:
                if args.paths:
                    raise InputError("--stage-us replaces the two profiles; give one or the other")
                e = args.exposed_us or (None, None)
                result = linearity(args.stage_us[0], args.stage_us[1], *args.cards, e[0], e[1])
            elif len(args.paths) == 2:
                result = lin_from_paths(args)
            else:
                raise InputError(f"--linearity: expected two profiles A B or --stage-us T1 T2; got {len(args.paths)} path(s)")
            if args.json:
                cli.print_json(TOOL, {"linearity": result})
            else:
                sys.stdout.write(cli.format_table([{"metric": k, "value": v} for k, v in result.items()],
                                                  ["metric", "value"], digits=4) + "\n")
            return 0
        if len(args.paths) != 2:
            raise InputError(f"expected two inputs A B; got {len(args.paths)}")
        rep = compare(load_side("A", args.paths[0]), load_side("B", args.paths[1]), args.tolerance_us)
        if args.csv:
            import pandas as pd

            cli.write_csv(args.csv, pd.DataFrame(rep.columns)[["name", "a_us", "b_us", "delta_us"]])
        if args.json:
            cli.print_json(TOOL, {**delta_payload(rep), "skipped_ranks": SKIPPED})
        else:
            print_delta(rep)
        return 0 if rep.closed and not SKIPPED else 1

    cli.run(PROG, body)


if __name__ == "__main__":
    main()
