#!/usr/bin/env python3
"""Compute-stream bubbles: gaps inside step windows, each classed exactly once.

Classes: released by a collective (one of --family ends inside the gap, at most --tolerance-us
before its end; by default the tolerance is chosen from the profile's own release lags, and a sweep
shows what each other tolerance would move), a collective running but not releasing, another stream busy (compute elsewhere,
memcpy), or nothing running on any stream (host/dispatch bubble). The four add up to the gap total.
--consumer REGEX adds producer-to-consumer lags; --plot draws one step window as a timeline.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from ditpar import cli

if TYPE_CHECKING:
    from ditpar.analysis.bubbles import BubbleReport

PROG = "bubbles.py"
TOOL = "bubbles"
# start/end stay exact integer ns: an epoch timestamp in us as a float loses digits
GAP_COLS = ["rank", "step", "start_ns", "end_ns", "dur_us", "released_us", "running_us", "other_us",
            "idle_us", "release_family"]

#: what the gap classes still answer on a training profile (cli.note_not_dit)
NOT_DIT_STILL = ("the gap classes (released / running / other / idle) hold for any profile, but the windows are "
                 "training steps: a collective that releases a gap may be a gradient reduction, not a DiT exchange")


def build_parser():
    parser = cli.make_parser(
        PROG, __doc__.strip().splitlines()[0],
        "python scripts/bubbles.py run/rank0_ascend_pt --family alltoall --consumer FlashAttention --plot /tmp/bubbles.png",
    )
    parser.add_argument("paths", nargs="+", metavar="PATH", help="profile folder(s) or file(s), one or many ranks")
    parser.add_argument("--rank", type=int, action="append", help="analyse only this rank (repeatable)")
    parser.add_argument("--family", type=cli.name_list("families"), help="comma-separated families that may release a gap (default: any collective)")
    parser.add_argument("--tolerance-us", type=float, default=None,
                        help="a release ends at most this long before the gap end (default: chosen from the "
                             "profile's release lags and printed, with what other tolerances would credit)")
    parser.add_argument("--consumer", metavar="REGEX", type=cli.nonempty("a kernel-name pattern"),
                        help="compute kernels whose start is measured from the latest preceding collective's end")
    parser.add_argument("--stream", help="compute stream to analyse (default: the busiest compute stream per rank)")
    parser.add_argument("--plot-rank", type=int, help="rank drawn by --plot (default: the first analysed)")
    parser.add_argument("--plot-step", type=int, help="step window drawn by --plot (default: the first)")
    parser.add_argument("--plot-range-us", type=float, nargs=2, metavar=("FROM", "TO"),
                        help="draw only this part of the window, in us from the window start")
    cli.add_workers_arg(parser)
    cli.add_output_args(parser, csv=True, plot=True)
    return parser


def gap_frame(report: BubbleReport):
    import pandas as pd
    from ditpar.analysis.bubbles import CLASSES

    frames = [r.gaps.assign(rank=r.rank) for r in report.ranks]
    gaps = pd.concat(frames, ignore_index=True)
    for col in ("dur", *CLASSES):
        gaps[f"{col}_us"] = gaps[f"{col}_ns"] / 1000.0
    return gaps[GAP_COLS]


def us(ns) -> float:
    """ns -> us, the library's conversion (imported on use so --help needs no numpy)."""
    from ditpar.analysis.collectives import us as ns_to_us

    return ns_to_us(ns)


def totals_us(totals: dict[str, int]) -> dict[str, float]:
    return {k.replace("_ns", "_us"): us(v) for k, v in totals.items()}


def family_rows(frame) -> list[dict]:
    return [{"family": r.family, "count": int(r.count), "union_us": us(r.union_ns), "exposed_us": us(r.exposed_ns),
             "releases": int(r.releases), "released_us": us(r.released_ns)} for r in frame.itertuples()]


def payload(report: BubbleReport) -> dict:
    ranks = [{"rank": r.rank, "stream": r.stream, "windows": len(r.windows), "gaps": r.gap_count,
              **totals_us(r.totals), "by_family": family_rows(r.by_family)} for r in report.ranks]
    return {**totals_us(report.totals()), "by_family": family_rows(report.by_family()),
            "releasing_families": report.families or "any", "tolerance_us": us(report.tolerance_ns),
            "tolerance_choice": report.tolerance, "tolerance_sweep": report.tolerance_sweep,
            "ranks": ranks, "consumer": report.lag_summary, "not_dit_inference": report.not_dit}


def print_text(report: BubbleReport) -> None:
    out = sys.stdout.write
    fams = ",".join(report.families) if report.families else "any collective"
    out(f"Compute-stream gaps inside step windows; release by {fams} within {us(report.tolerance_ns):g} us; times in us\n")
    rows = [{"rank": r.rank, "stream": r.stream or "(none)", "windows": len(r.windows), "gaps": r.gap_count,
             **totals_us(r.totals)} for r in report.ranks]
    cols = ["rank", "stream", "windows", "gaps", "gaps_total_us", "released_us", "running_us", "other_us",
            "idle_us", "busy_us"]
    out(cli.format_table(rows, cols, digits=3) + "\n\n")
    tot = totals_us(report.totals())
    out("All ranks: " + ", ".join(f"{k} {v:.3f}" for k, v in tot.items()) + "\n\n")
    out("Per family (exposed = inside compute gaps; released = credited releases)\n")
    out(cli.format_table(family_rows(report.by_family()), digits=3) + "\n")
    t = report.tolerance
    out(f"\nRelease tolerance {us(report.tolerance_ns):g} us ({t['source']}: {t['rule']})\n")
    if t["lags"]:
        out("What each tolerance would credit (moved = change of released time against the one used; "
            "rows that change nothing are left out):\n")
        rows, last = [], None
        for r in report.tolerance_sweep:
            if r["used"] or r["releases"] != last:
                rows.append({**r, "used": "<- used" if r["used"] else ""})
            last = r["releases"]
        out(cli.format_table(rows, ["tolerance_us", "releases", "released_us", "moved_us", "used"], digits=3) + "\n")
    if report.lag_summary:
        s = report.lag_summary
        out(f"\nConsumers /{s['pattern']}/: {s['consumers']} kernels, {s['with_producer']} after a collective, "
            f"{s['started_during_collective']} started while one ran, {s['within_tolerance']} within tolerance\n")
        if s["median_lag_us"] is not None:
            out(f"lag us: median {s['median_lag_us']:.3f}, p10 {s['p10_lag_us']:.3f}, p90 {s['p90_lag_us']:.3f}, "
                f"min {s['min_lag_us']:.3f}, max {s['max_lag_us']:.3f}\n")
        out(cli.format_table(s["histogram"], ["bin", "count"]) + "\n")


def main() -> None:
    args = build_parser().parse_args()

    def body() -> int:
        from ditpar.analysis.bubbles import analyse, compile_consumer
        from ditpar.analysis.bubbles_ranks import RankGaps, analyse_ranks
        from ditpar.readers import load_profiles

        families = args.family or None   # already a list (cli.name_list)
        whole = bool(args.rank or args.plot)  # chosen ranks, or a picture of the events: one table
        if args.consumer:
            compile_consumer(args.consumer)  # a bad pattern fails before any file is read
        # without --csv only each rank's summary travels (GapSummary), not its gap table
        maker = None if whole else RankGaps(families, args.stream, args.consumer, keep_gaps=bool(args.csv))
        ps = load_profiles(args.paths, workers=args.workers, per_rank=maker,
                           progress=cli.read_progress(PROG, args))
        cli.warn_skipped(PROG, ps.skipped)
        if whole:
            report = analyse(ps, ranks=args.rank, families=families, tolerance_us=args.tolerance_us,
                             consumer=args.consumer, stream=args.stream)
        else:  # every rank's gaps found where it is read: 8 large ranks never meet in one table
            report = analyse_ranks(ps, maker, args.tolerance_us)
        cli.note_not_dit(PROG, report.not_dit, NOT_DIT_STILL)
        for rank, have in sorted(ps.partial_ranks.items()):
            sys.stderr.write(f"{PROG}: rank {rank} has no kernel_details.csv ({', '.join(have)} only): its "
                             "compute-stream gaps need device tasks; left out of this answer\n")
        if args.plot:
            from ditpar.analysis.timeline_plot import plot_window

            plot_window(ps, report, args.plot, rank=args.plot_rank, step=args.plot_step,
                        range_us=args.plot_range_us)
        if args.csv:
            cli.write_csv(args.csv, gap_frame(report))
        if args.json:
            cli.print_json(TOOL, {**payload(report), "skipped_ranks": [
                {"rank": s["rank"], "reason": s["reason"], "path": s["path"]} for s in ps.skipped],
                "evidence": {str(r): v for r, v in ps.evidence().items()}})
        else:
            print_text(report)
        return 0

    cli.run(PROG, body)


if __name__ == "__main__":
    main()
