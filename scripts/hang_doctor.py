#!/usr/bin/env python3
"""Name the first collective where the ranks of a hung job disagree, per process group, and why.

Reads PyTorch Flight Recorder dumps, one per rank (NCCL, gloo, HCCL; pickle or JSON).

Causes: different_branches, group_creation_order, rank_missing_or_dead, sizes_disagree,
groups_entered_in_different_order (and waits_in_other_group: a downstream wait). Exit 1 when a divergence
is found, 0 when none, 2 for unreadable or mixed-up dumps (different runs, missing ranks named).
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from ditpar import cli  # noqa: E402
from ditpar.errors import InputError  # noqa: E402

PROG = "hang_doctor.py"
EXAMPLE = ("python scripts/hang_doctor.py /tmp/fr --plan \"U4 TE2\" --world 4\n"
           "  python scripts/hang_doctor.py /tmp/fr/fr_rank_0 /tmp/fr/fr_rank_1 --groups \"0,1\" --json\n"
           "  python scripts/hang_doctor.py --how        (how to get the dumps on NCCL, gloo and HCCL)")

COLUMNS = ["group", "label", "ranks", "last_common_seq", "last_completed_seq", "first_divergent_seq", "op",
           "issued_ranks", "missing_ranks", "cause"]


def build_parser():
    p = cli.make_parser(PROG, __doc__.strip().splitlines()[0], EXAMPLE)
    p.add_argument("dumps", nargs="*", metavar="DUMP_DIR_OR_FILE",
                   help="one dump per rank (file names end with the rank, as torch writes them), or folders")
    p.add_argument("--how", action="store_true", help="print how to make the dumps (NCCL, gloo, HCCL) and exit")
    p.add_argument("--world", type=cli.positive_int, default=None, help="number of ranks of the job")
    p.add_argument("--plan", default=None, help='name groups by the plan\'s axes, e.g. "U4 R2", "cfg2 U2 R2", '
                   '"U4 TE2" (TE = text-encoder TP); same rank layout as plan.py')
    p.add_argument("--layout", default=None, help="rank layout order for --plan, innermost first "
                   "(default tp,ulysses,ring,kv_allgather,attn2d,pipefusion,cfg,dp, as plan.py)")
    p.add_argument("--groups", default=None, help='name groups given as rank lists: "0,1,2,3;0,1;2,3"')
    p.add_argument("--allow-missing-ranks", action="store_true",
                   help="analyse although some ranks wrote no dump (a dead rank writes none)")
    p.add_argument("--max-skew-s", type=float, default=3600.0,
                   help="calls of one sequence id created further apart than this mean two runs (3600)")
    cli.add_output_args(p, csv=True, plot=False)
    return p


def body() -> int:
    args = build_parser().parse_args()
    from ditpar.hang import howto

    if args.how:
        print(howto.HOW, end="")
        return 0
    if not args.dumps:
        raise InputError("give the dump files of every rank, or a folder holding them (--how: how to get them)")
    if args.plan and args.groups:
        raise InputError("give --plan or --groups, not both")
    if args.max_skew_s <= 0:
        raise InputError(f"--max-skew-s {args.max_skew_s:g}: expected a positive number of seconds")
    from ditpar.hang import diverge, dumps, layout

    layout.check_world(args.world)
    world, labels = args.world, None
    if args.plan:
        world, labels = layout.plan_labels(args.plan, args.world, args.layout)
    elif args.layout:
        raise InputError("--layout applies to --plan only")
    elif args.groups:
        labels = layout.given_labels(args.groups, world)
    read = [dumps.read_dump(f) for f in dumps.list_dump_files(args.dumps)]
    job = diverge.assemble(read, world, args.allow_missing_ranks, args.max_skew_s)
    result = diverge.compare(job, labels)
    result["files"] = [{"rank": d.rank, "path": d.path, "format": d.fmt, "version": d.version,
                        "entries": len(d.entries), "missing_fields": d.missing_fields,
                        "pg_config_source": d.pg_config_source or ("torch" if d.groups else "empty")}
                       for d in sorted(read, key=lambda d: d.rank)]
    absent: dict[str, list[int]] = {}
    for d in read:
        for name in d.missing_fields:
            absent.setdefault(name, []).append(d.rank)
    if absent:
        sys.stderr.write(f"{PROG}: fields these dumps lack, not compared: "
                         + "; ".join(f"{k} (ranks {_cell(sorted(v))})" for k, v in sorted(absent.items())) + "\n")
    if args.csv:
        import pandas as pd

        cli.write_csv(args.csv, pd.DataFrame([{c: _cell(r[c]) for c in COLUMNS + ["detail"]}
                                              for r in result["groups"]]))
    if args.json:
        cli.print_json("hang_doctor", result)
    else:
        show(result)
    return diverge.exit_code(result)


def _cell(value) -> str:
    if isinstance(value, list):
        return ",".join(map(str, value))
    return "" if value is None else str(value)


def show(r: dict) -> None:
    root = r["first_divergence"]
    print(f"verdict: {r['verdict']}  (world {r['world']}, ranks read {_cell(r['ranks_read'])}"
          + (f", no dump from {_cell(r['ranks_without_dump'])}" if r["ranks_without_dump"] else "") + ")")
    if root:
        where = f"group {root['group']}" + (f" ({root['label']})" if root["label"] else "")
        print(f"first divergence: {where} seq {root['first_divergent_seq']}: {root['op'] or 'nothing issued'}; "
              f"issued by {_cell(root['issued_ranks']) or '-'}, never arrived {_cell(root['missing_ranks']) or '-'}"
              f"; cause {root['cause']}")
    rows = [{c: _cell(g[c]) for c in COLUMNS} for g in r["groups"]]
    if rows:
        print(cli.format_table(rows, COLUMNS))
    for g in r["groups"]:
        if g["first_divergent_seq"] is None and not g["member_claims"]:
            continue
        print(f"\ngroup {g['group']} seq {g['first_divergent_seq']}: {g['cause']}: {g['detail']}")
        for rank, info in g["by_rank"].items():
            if info is None:
                wait = g["waiting_in"].get(rank)
                print(f"  rank {rank}: never issued it" + (f" (waits in {wait})" if wait else ""))
            else:
                print(f"  rank {rank}: {info['op']} sizes {info['sizes']} -> {info['output_sizes']} "
                      f"{info['dtypes']} state {info['state']}" + (f" at {info['call_site']}" if info['call_site'] else ""))
        for rank in g["ranks_without_dump"]:
            print(f"  rank {rank}: no dump")
        if g["membership_source"] != "pg_config":
            print(f"  members from: {g['membership_source']}")
    for note in r["notes"]:
        print(f"note: {note}")


if __name__ == "__main__":
    cli.run(PROG, body)
