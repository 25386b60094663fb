#!/usr/bin/env python3
"""Collective attribution per rank x (family, communicator): count, sum, union, exposed, bandwidth.

Also: calls-per-layer reconciliation (--layers), cross-family overlap on merged intervals, a
per-stream table with a check that no compute kernel runs on a communication stream, and a
multi-rank summary (slowest rank, per-family skew). Exit 1 when a check fails.
--profiler-tables answers per op family and communicator from the profiler's own communication tables
(communication.json / analysis.db CommAnalyzerTime) and reads no task row: no union, exposed or streams.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from ditpar import cli

if TYPE_CHECKING:
    from ditpar.analysis.collectives import CollectiveReport

PROG = "collectives.py"
TOOL = "collectives"
MAIN = ["rank", "family", "group", "group_role", "count", "sum_us", "union_us", "union_over_sum",
        "exposed_us", "mean_us", "median_us", "p90_us", "bytes", "bandwidth_GBps", "transit_us", "link_transit_us", "wait_us", "idle_us"]
JSON_COLS = ["rank", "family", "group", "group_name", "group_role", "group_rank", "count", "sum_us", "union_us",
             "union_over_sum", "exposed_us", "mean_us", "median_us", "p90_us", "bytes", "bandwidth_GBps",
             "transit_us", "link_transit_us", "wait_us", "idle_us", "wait_share", "split_ops", "bytes_from",
             "evidence"]
RANK_COLS = ["rank", "comm_union_us", "comm_exposed_us", "overlap_pct", "compute_union_us", "span_us"]

#: what the tables still answer on a training profile (cli.note_not_dit)
NOT_DIT_STILL = ("the per-family times, union, exposed, transit/wait and links hold for any profile; the DiT "
                 "hints on extra calls (text encoder, VAE, CFG, Ulysses) do not apply and are left out")


def build_parser():
    parser = cli.make_parser(
        PROG, __doc__.strip().splitlines()[0],
        "python scripts/collectives.py run/rank0_ascend_pt run/rank1_ascend_pt --layers 40 --steps 4",
    )
    parser.add_argument("paths", nargs="+", metavar="PATH",
                        help="profile folders or files (Ascend *_ascend_pt, Kineto .json/.json.gz); one or many ranks")
    parser.add_argument("--rank", type=int, action="append", help="analyse only this rank (repeatable)")
    parser.add_argument("--family", type=cli.name_list("families"), help="comma-separated families to keep (e.g. alltoall,allgather); ranks[] then merges only these")
    parser.add_argument("--layers", type=int, help="DiT layers per step, for the calls-per-layer check")
    parser.add_argument("--steps", type=int,
                        help="steps in the capture (default: the profile's step windows)")
    cli.add_workers_arg(parser)
    cli.add_tables_arg(parser)
    cli.add_output_args(parser, csv=True, plot=False)
    return parser


def records(frame, columns):
    """DataFrame rows as dicts over the given columns (NaN kept; the JSON writer turns it into null)."""
    return [] if frame is None else frame[columns].to_dict("records")


def skipped_ranks(skipped) -> list[dict]:
    """JSON rows of the ranks left out: rank, reason, path."""
    return [{"rank": s["rank"], "reason": s["reason"], "path": s["path"]} for s in skipped]


def payload(report: CollectiveReport, unclassified, skipped=()) -> dict:
    layers = None if report.layers is None else report.layers.to_dict("records")
    return {
        "collectives": records(report.table, JSON_COLS),
        "ranks": records(report.ranks, RANK_COLS),
        "checks": report.checks,
        "slowest_rank": report.slowest_rank, "slowest_by": report.slowest_by,
        "family_skew": report.skew.to_dict("records"),
        "cross_family_overlap": report.overlap.to_dict("records"),
        "streams": report.streams.to_dict("records"),
        "calls_per_layer": layers,
        "not_dit_inference": report.not_dit,
        "headline": _headline_records(report),
        "unclassified": dict(unclassified),
        "skipped_ranks": skipped_ranks(skipped),
        "links": [] if report.links is None else report.links.to_dict("records"),
        "transit_note": _transit_note(report),
        "bytes_meaning": _bytes_meaning(),
        "links_note": _links_note(report),
    }


def _links_note(report: CollectiveReport) -> str | None:
    from ditpar.analysis.global_ranks import unmapped_note

    return unmapped_note(report.links)


def _bytes_meaning() -> dict:
    from ditpar.analysis.collectives import BYTES_MEANING, LINK_BYTES_MEANING

    return {"collectives[].bytes": {f"bytes_from={k}": v for k, v in BYTES_MEANING.items()},
            "links[].bytes": LINK_BYTES_MEANING}


def _transit_note(report: CollectiveReport) -> str | None:
    from ditpar.analysis.collectives import transit_note

    return transit_note(report.table)


def _headline_records(report: CollectiveReport) -> list[dict]:
    from ditpar.analysis.headline import headline

    return headline(report.table, report.ranks).to_dict("records")


def empty_line(title: str, tables: bool) -> str:
    """The one line printed instead of a table without rows: which table, and why it is empty."""
    why = ("--profiler-tables reads no task row, and this table is built from the device tasks (kernel_details.csv"
           " / task tables); run without --profiler-tables for it" if tables else
           "no analysed rank has device tasks (kernel_details.csv / task tables), and this table is built from them")
    return f"{title}: no rows ({why})\n\n"


def print_text(report: CollectiveReport, unclassified, tables: bool = False) -> None:
    from ditpar.analysis.collectives import bytes_label
    from ditpar.analysis.headline import HEADLINE_COLUMNS, blank_cell_notes, headline

    out = sys.stdout.write

    def section(name: str, title: str, frame, columns=None, digits: int = 3) -> None:
        if frame is None or len(frame) == 0:
            out(empty_line(name, tables))
            return
        out(title + "\n")
        out(cli.format_table(frame, columns, digits=digits) + "\n\n")

    section("Headline (exposed communication per family)", "Headline: exposed communication (not overlapped by any compute) per family, share of the captured span",
            headline(report.table, report.ranks), HEADLINE_COLUMNS, digits=2)

    label, bytes_note = bytes_label(report.table)
    out("Collectives per rank x (family, group); times in us, exposed = not overlapped by any compute\n")
    out(cli.format_table(report.table, MAIN, digits=3, headers={"bytes": label}) + "\n")
    for note in blank_cell_notes(report.table):
        out(f"  {note}\n")
    transit = _transit_note(report)
    if transit:
        out(f"  {transit}\n")
    out("\n")
    section("Per-rank table (comm union, exposed, overlap)", "Per rank, whole capture, all families merged (memcpy/memset in neither set)", report.ranks, RANK_COLS)
    if not report.overlap.empty:
        out("Cross-family overlap on merged intervals (share of the smaller union)\n")
        out(cli.format_table(report.overlap, digits=3) + "\n\n")
    section("Streams table", "Streams (busy = union of the stream's events)", report.streams)
    if len(report.ranks) > 1:
        out(f"Slowest rank: {report.slowest_rank} (by {report.slowest_by}); per-family skew across ranks:\n")
        out(cli.format_table(report.skew, digits=3) + "\n\n")
    if report.layers is not None:
        out("Calls per layer = count / (layers x steps)\n")
        if report.not_dit:
            out("The DiT hints on extra calls (text encoder, VAE, CFG, Ulysses) do not apply to this "
                "training profile and are left out\n")
        cols = [c for c in report.layers.columns if c != "likely_extra" or not report.not_dit]
        out(cli.format_table(report.layers, cols, digits=3) + "\n\n")
    if bytes_note:
        out(bytes_note + "\n\n")
    if report.links is not None and not report.links.empty:
        out("Links (communication_matrix.json totals; transit_bytes = what the op type moved over the link; "
            "bandwidth = transit_bytes / transit time)\n")
        out("link = group-local ranks src-dst; src_rank/dst_rank = global ranks (mapped_by: parallel_group_info "
            "or a rank's own self link, as msprof-analyze maps them; empty when neither tells)\n")
        out(cli.format_table(report.links.drop(columns=["group_hash"]), digits=3,
                             headers={"bytes": "transit_bytes"}) + "\n")
        peers = _links_note(report)
        if peers:
            out(f"  {peers}\n")
        out("\n")
    if unclassified:
        top = ", ".join(f"{k} x{v}" for k, v in list(unclassified.most_common(5)))
        out(f"Unclassified event names (not counted as collectives): {top}\n\n")
    out(cli.format_table(report.checks, ["name", "status", "detail"]) + "\n")


def evidence_note(evidence: dict[int, list[str]], tables: bool = False) -> str:
    """Which ranks had which files; ranks without device tasks lack union and exposed time."""
    line = "evidence per rank: " + "; ".join(f"rank {r}: {', '.join(v)}" for r, v in evidence.items())
    partial = [r for r, v in evidence.items() if "tasks" not in v]
    if partial and tables:
        line += ("\n--profiler-tables: every row comes from the profiler's communication tables (communication.json / "
                 "analysis.db CommAnalyzerTime: count, sum = Elapse Time, transit/wait/idle); no task row was read, so "
                 "union_us and exposed_us are left out; run without it for them")
    elif partial:
        line += (f"\nranks {partial}: no kernel_details.csv; their rows come from communication.json "
                 "(count, sum = Elapse Time, transit/wait/idle); union_us and exposed_us need kernel_details.csv")
    return line


def main() -> None:
    args = build_parser().parse_args()

    def body() -> int:
        from ditpar.analysis.collectives import analyse
        from ditpar.analysis.collectives_ranks import RankCollectives, analyse_ranks
        from ditpar.readers import load_profiles

        for flag, value in (("--layers", args.layers), ("--steps", args.steps)):
            if value is not None and value < 1:
                raise cli.InputError(f"{flag} {value}: expected >= 1")
        families = args.family or None   # already a list (cli.name_list)
        if args.rank:  # a few chosen ranks: one table of their events
            ps = load_profiles(args.paths, workers=args.workers, tasks=not args.profiler_tables,
                               progress=cli.read_progress(PROG, args))
        else:  # every rank analysed where it is read: 8 large ranks never meet in one table
            maker = RankCollectives(families, args.layers, args.steps)
            ps = load_profiles(args.paths, workers=args.workers, per_rank=maker, tasks=not args.profiler_tables,
                               progress=cli.read_progress(PROG, args))
        if args.profiler_tables:
            cli.require_evidence(ps, "communication", "collectives.py --profiler-tables")
        cli.warn_skipped(PROG, ps.skipped, needs_all=len(ps.ranks) + len(ps.skipped) > 1)
        if args.rank:
            report = analyse(ps, ranks=args.rank, families=families, layers=args.layers, steps=args.steps)
        else:
            report = analyse_ranks(ps, maker)
        cli.note_not_dit(PROG, report.not_dit, NOT_DIT_STILL)
        if args.csv:
            cli.write_csv(args.csv, report.table[JSON_COLS])
        evidence = ps.evidence()
        if args.json:
            cli.print_json(TOOL, {**payload(report, ps.unclassified, ps.skipped),
                                  "source": "profiler tables" if args.profiler_tables else "tasks",
                                  "evidence": {str(r): v for r, v in evidence.items()}})
        else:
            print_text(report, ps.unclassified, args.profiler_tables)
            print(evidence_note(evidence, args.profiler_tables))
        return 0 if all(c["status"] != "FAIL" for c in report.checks) else 1

    cli.run(PROG, body)


if __name__ == "__main__":
    main()
