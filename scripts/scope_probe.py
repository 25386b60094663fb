#!/usr/bin/env python3
"""Say whether sequence/head sharding really happened, from the shapes every rank recorded.

Record first (see ditpar/scope.py): hooks on the attention modules, or ditpar.scope.record(name, q, k, v)
inside the attention code with DITPAR_SCOPE_DIR set. Then point this script at the folder. Give the
full sizes (--full-seq, --heads) or, better, --baseline DIR recorded by the same model with parallelism
off: the two-sided comparison needs no knowledge of the model.

Exit codes: 0 every rank sharded as the plan says; 1 a rank saw the full sequence/heads, a shape
mismatched, or a rank is missing; 2 bad input or no records (no evidence).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ditpar import cli  # noqa: E402
from ditpar.errors import InputError  # noqa: E402
from ditpar.scope.check import EXIT_CODES, Full, Plan, baseline_fulls, judge, load_records  # noqa: E402

PROG = "scope_probe.py"
TABLE_COLUMNS = ["rank", "name", "stage", "calls", "seq_q", "expected_seq_q", "heads_q",
                 "expected_heads_q", "seq_kv", "expected_seq_kv", "heads_kv", "expected_heads_kv",
                 "status"]


def build_parser():
    parser = cli.make_parser(
        PROG, __doc__.split("\n\n")[0],
        "DITPAR_SCOPE_DIR=runs/scope torchrun --nproc-per-node 4 my_infer.py && "
        "python scripts/scope_probe.py runs/scope --ulysses 4 --full-seq 32760 --heads 40\n  "
        "python scripts/scope_probe.py runs/scope --plan \"cfg2 U4 R2\" --baseline runs/scope-1card",
    )
    parser.add_argument("paths", nargs="+", metavar="PATH",
                        help="scope*.jsonl files, or folders holding them (one file per rank)")
    parser.add_argument("--plan", default=None, metavar="NAME",
                        help="the plan as plan.py prints it ('cfg2 U4 R2', 'TP8'): sets the degrees below "
                             "(the ones its run recipe set); cfg and dp shard neither sequence nor heads")
    parser.add_argument("--ulysses", type=int, default=None, help="Ulysses (all-to-all) degree (default 1)")
    parser.add_argument("--ring", type=int, default=None, help="ring-attention degree (default 1)")
    parser.add_argument("--kv-allgather", type=int, default=None, help="K/V all-gather (context-parallel) degree")
    parser.add_argument("--tp", type=int, default=None, help="tensor-parallel degree (splits heads)")
    parser.add_argument("--full-seq", type=int, help="unsharded sequence length at the recorded sites")
    parser.add_argument("--heads", type=int, help="attention heads of the model (query heads)")
    parser.add_argument("--kv-heads", type=int, help="key/value heads (GQA); default: --heads")
    parser.add_argument("--kv-seq", type=int, help="unsharded key/value length when it differs from --full-seq")
    parser.add_argument("--baseline", metavar="DIR", help="records of the same model with parallelism off "
                        "(full sizes per site, the two-sided comparison)")
    parser.add_argument("--pad-multiple", type=int, help="the framework pads the sequence up to a multiple "
                        "of this before splitting; 1: no padding, shares differ by one token as torch.tensor_split "
                        "or chunk make them (default: either padded to the sequence degree or uneven)")
    parser.add_argument("--replicated-tokens", type=int, default=0,
                        help="tokens every rank holds whole (not sharded), e.g. text tokens")
    parser.add_argument("--ranks", type=int, help="expected number of ranks (default: world_size in the records)")
    parser.add_argument("--tag", help="use only records with this tag")
    parser.add_argument("--limit", type=int, default=40, help="table rows to print (0: all)")
    cli.add_output_args(parser, csv=True)
    return parser


def main() -> None:
    args = build_parser().parse_args()

    def body() -> int:
        _plan_degrees(args)
        for flag, value, low in (("--ulysses", args.ulysses, 1), ("--ring", args.ring, 1),
                                 ("--kv-allgather", args.kv_allgather, 1), ("--tp", args.tp, 1),
                                 ("--full-seq", args.full_seq, 1), ("--heads", args.heads, 1),
                                 ("--kv-heads", args.kv_heads, 1), ("--kv-seq", args.kv_seq, 1),
                                 ("--replicated-tokens", args.replicated_tokens, 0), ("--ranks", args.ranks, 1),
                                 ("--limit", args.limit, 0)):
            if value is not None and value < low:
                raise InputError(f"{flag} {value}: expected >= {low}")
        if args.heads is not None and args.kv_heads is not None and args.heads % args.kv_heads:
            raise InputError(f"--kv-heads {args.kv_heads} does not divide --heads {args.heads}: every key/value head "
                             f"serves the same number of query heads (GQA), so no model has these counts")
        plan = Plan(args.ulysses, args.ring, args.kv_allgather, args.tp)
        records = load_records(args.paths, tag=args.tag)
        full = baseline = None
        if args.baseline:
            base_records = load_records([args.baseline])
            if not base_records:
                raise InputError(f"--baseline {args.baseline}: no records")
            baseline = baseline_fulls(base_records)
        elif args.full_seq is not None:
            full = Full(seq=args.full_seq, heads=args.heads, kv_seq=args.kv_seq, kv_heads=args.kv_heads)
        result = judge(records, plan, full=full, baseline=baseline, ranks=args.ranks,
                       pad_multiple=args.pad_multiple, replicated=args.replicated_tokens)
        if args.csv:
            import pandas as pd

            cli.write_csv(args.csv, pd.DataFrame(result["rows"], columns=TABLE_COLUMNS + ["detail"]))
        if args.json:
            cli.print_json("scope_probe", result)
        else:
            print(render(result, args.limit))
        code = EXIT_CODES[result["verdict"]]
        if code:  # the failed checks in one line on stderr
            failed = "; ".join(f"{c['name']}: {c['detail']}" for c in result["checks"] if c["status"] != "pass")
            sys.stderr.write(f"{PROG}: verdict {result['verdict']}" + (f" ({failed})" if failed else "") + "\n")
        return code

    cli.run(PROG, body)


def _plan_degrees(args) -> None:
    """--plan NAME sets ulysses / ring / kv_allgather / tp; a degree flag given as well must agree with it."""
    keys = ("ulysses", "ring", "kv_allgather", "tp")
    if args.plan is None:
        for k in keys:
            setattr(args, k, 1 if getattr(args, k) is None else getattr(args, k))
        return
    from ditpar.plan.inputs.plan_names import parse_plan_name

    degrees = parse_plan_name(args.plan)
    if degrees["pipefusion"] > 1:
        raise InputError(f"--plan {args.plan!r}: PipeFusion splits the sequence into patches per stage, which "
                         "this probe does not check; give the sequence/head degrees alone")
    if degrees["attn2d"] > 1:
        raise InputError(f"--plan {args.plan!r}: Attention2D gathers Q and K/V over a rows x columns mesh, whose "
                         "shapes this probe does not check; give the sequence/head degrees of the other forms alone")
    for k in keys:
        given = getattr(args, k)
        if given is not None and given != degrees[k]:
            raise InputError(f"--plan {args.plan!r} has {k} {degrees[k]}, --{k.replace('_', '-')} says {given}")
        setattr(args, k, degrees[k])


def _accepted_text(ranges) -> str | None:
    """Accepted values of one column: 8191, 8190-8191 (uneven split) or 32761|32764 (either)."""
    if not ranges:
        return None
    return "|".join(str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in ranges)


def render(result: dict, limit: int) -> str:
    """Human-readable verdict, checks and the per-rank table."""
    rows = result["rows"]
    shown = rows if limit <= 0 else rows[:limit]
    plan = ", ".join(f"{k}={v}" for k, v in result["plan"].items() if v > 1)
    lines = [f"scope probe: verdict {result['verdict'].upper()}  ({plan}; split {result['split']}; "
             f"{result['records']} records, "
             f"{result['sites']} site(s), ranks {result['ranks_seen']} of {result['world_size']})", ""]
    shown = [{**r, **{f"expected_{k}": _accepted_text(r.get(f"accepted_{k}"))
                      for k in ("seq_q", "heads_q", "seq_kv", "heads_kv")}} for r in shown]
    lines.append(cli.format_table(shown, TABLE_COLUMNS))
    if len(rows) > len(shown):
        lines.append(f"... {len(rows) - len(shown)} more rows (--limit 0 shows all)")
    bad = [r for r in rows if r["status"] not in ("sharded",)]
    for row in bad[: min(10, limit) if limit > 0 else 10]:
        lines.append(f"rank {row['rank']} {row['name']} ({row['stage']}): {row['status']}: {row['detail']}")
    lines.append("")
    lines += [f"check {c['name']}: {c['status']} ({c['detail']})" for c in result["checks"]]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
