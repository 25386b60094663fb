#!/usr/bin/env python3
"""Reconcile per-leg all-to-all fingerprints logged by each rank, and name where bytes went wrong.

Verdicts: transport faithful (exit 0) / send buffer rewritten after dispatch / placement problem /
packing problem (exit 1). Zero cross-rank legs compared, missing ranks or malformed lines give exit 2
("no evidence" or "incomplete"). --probe runs a real all-to-all under torchrun that writes such logs,
clean or with an injected fault (the audit's negative control).
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from ditpar import cli  # noqa: E402
from ditpar.errors import InputError  # noqa: E402

PROG = "a2a_audit.py"
EXAMPLE = ("torchrun --nproc-per-node 4 scripts/a2a_audit.py --probe out --faults none,send_rewrite\n"
           "  python scripts/a2a_audit.py out/none\n"
           "  python scripts/a2a_audit.py out/send_rewrite --comm world --world 4\n"
           "(the probe's logs hold a 4-rank 'world' and two 2-rank communicators: --world applies with --comm;\n"
           " exit 0 = transport faithful, 1 = a fault named, 2 = no evidence or bad input)")


def build_parser():
    p = cli.make_parser(PROG, __doc__.strip().splitlines()[0], EXAMPLE)
    p.add_argument("logs", nargs="*", metavar="LOG", help="log files or folders (*.log, *.txt) of every rank")
    p.add_argument("--world", type=int, default=None,
                   help="expected communicator size; exit 2 if a record says otherwise")
    p.add_argument("--comm", default=None, help="reconcile only this communicator")
    p.add_argument("--allow-incomplete", action="store_true",
                   help="accept a faithful verdict although ranks are missing or lines are malformed")
    p.add_argument("--probe", metavar="OUT_DIR", default=None,
                   help="under torchrun: run audited all-to-alls and write OUT_DIR/<fault>/rank<r>.log")
    p.add_argument("--faults", default="none,send_rewrite,placement,packing",
                   help="faults for --probe, comma-separated (default: all four)")
    p.add_argument("--calls", type=int, default=3, help="calls per communicator for --probe (3)")
    p.add_argument("--chunks", type=int, default=2, help="chunks per call for --probe (2)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--backend", default="auto", choices=["auto", "hccl", "nccl", "gloo"])
    p.add_argument("--timeout", type=float, default=300.0, help="seconds before a dead peer ends --probe")
    cli.add_output_args(p, csv=True, plot=False)
    return p


def body() -> int:
    args = build_parser().parse_args()
    if args.probe:
        return probe(args)
    if not args.logs:
        raise InputError("give the log files of every rank (or --probe OUT_DIR under torchrun)")
    from ditpar.comm import audit

    result = audit.reconcile(audit.read_logs(args.logs), args.world, args.comm)
    if args.csv:
        import pandas as pd

        cli.write_csv(args.csv, pd.DataFrame(result["comms"]))
    if args.json:
        cli.print_json("a2a_audit", result)
    else:
        show(result)
    return audit.exit_code(result, args.allow_incomplete)


def show(r: dict) -> None:
    print(f"verdict: {r['verdict']}")
    print(f"next step: {r['next_step']}")
    print(f"records {r['records']}  legs_compared {r['legs_compared']}  mismatches {r['mismatches']} "
          f"({r['mismatches_with_rewritten_buffer']} with a rewritten send buffer)  "
          f"self_leg_bad {r['self_leg_bad']}/{r['self_legs_compared']}  "
          f"packing_bad {r['packing_bad']}/{r['packing_legs_compared']}  "
          f"send_buffer_rewritten {r['send_buffer_rewritten']}")
    if r["comms"]:
        print(cli.format_table(r["comms"], ["comm", "n", "keys", "legs_compared", "mismatches",
                                            "self_leg_bad", "packing_bad", "send_buffer_rewritten",
                                            "missing_ranks", "verdict"]))
    for e in r["examples"][:5]:
        print(f"  mismatch {e['comm']} call {e['call']} chunk {e['chunk']} {e['src']}->{e['dst']}: "
              f"sent {e['sent']} (at end {e['sent_at_end']}) received {e['received']}")
    if r["missing_ranks"]:
        print(f"WARNING: ranks missing in {r['keys_with_missing_ranks']} (comm, call, chunk) keys: "
              f"{r['missing_ranks']}; their legs were not compared")
    if r["malformed_lines"]:
        print(f"WARNING: {r['malformed_lines']} malformed {'A2AUD'} line(s), e.g. "
              + "; ".join(f"{m['where']}: {m['reason']}" for m in r["malformed"][:3]))
    if r["duplicates"]:
        print(f"WARNING: {r['duplicates']} duplicate record(s), {r['conflicting_duplicates']} conflicting; "
              "the first of each was used")
    for note in r["notes"]:
        print(f"NOTE: {note}")


def probe(args) -> int:
    from ditpar.comm import dist, negative_control

    faults = [f for f in args.faults.replace(" ", "").split(",") if f]
    unknown = [f for f in faults if f not in negative_control.FAULTS] or ([] if faults else ["(none)"])
    if unknown:
        raise InputError(f"--faults: unknown fault(s) {unknown}; known: {', '.join(negative_control.FAULTS)}")
    if args.calls < 1 or args.chunks < 1:
        raise InputError("--calls and --chunks must be >= 1")
    ctx = None
    try:
        ctx = dist.setup(args.backend, args.timeout)
        folders = negative_control.run_probe(ctx, args.probe, faults, args.calls, args.chunks, args.seed)
        if ctx.rank == 0:
            if args.json:
                cli.print_json("a2a_audit", {"mode": "probe", "world": ctx.world, "backend": ctx.backend,
                                             "folders": dict(zip(faults, folders, strict=True))})
            else:
                for f, d in zip(faults, folders, strict=True):
                    print(f"{f}: {d}")
    finally:
        dist.teardown(ctx)
    return 0


def main() -> None:
    cli.run(PROG, body)


if __name__ == "__main__":
    main()
