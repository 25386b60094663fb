#!/usr/bin/env python3
"""Padded equal-split all-to-all replacing an uneven one: plan its cost, or prove byte identity.

Without --check it prints S_PAD and the wire cost for a split matrix (no torch needed). With
--check, under torchrun, it runs the uneven all_to_all_single and the padded one on random splits
(empty blocks included) and exits 1 unless every output is byte-identical.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from ditpar import cli  # noqa: E402
from ditpar.errors import CheckFailed, InputError  # noqa: E402

PROG = "a2a_pad.py"
EXAMPLE = ("torchrun --nproc-per-node 4 scripts/a2a_pad.py --check --trials 20   |   "
           "torchrun --nproc-per-node 2 scripts/a2a_pad.py --check --splits '300,0;17,129' --dtype bf16 "
           "--row-shape 40,128   |   python scripts/a2a_pad.py --splits '300,0;17,129' --row-bytes 6144")


def build_parser():
    p = cli.make_parser(PROG, __doc__.strip().splitlines()[0], EXAMPLE)
    p.add_argument("--check", action="store_true",
                   help="under torchrun: run both paths on random splits and prove byte identity")
    p.add_argument("--splits", default=None,
                   help="split matrix in rows, sender per row: '3,0,5;2,2,2;1,1,0' (plan, or the one "
                        "case for --check)")
    p.add_argument("--row-bytes", type=int, default=None,
                   help="bytes per row for the plan (e.g. heads x head_dim x 2 for bf16; default: from "
                        "--dtype and --row-shape)")
    p.add_argument("--dtype", default=None,
                   help="element type of the exchanged rows: bf16, fp16, fp32 (also int8, int64); --check "
                        "uses it for every case (default: cycle float32, bfloat16, float16, int8, int64)")
    p.add_argument("--row-shape", default=None, metavar="DIMS",
                   help="shape of one row, e.g. 40,128 (heads, head_dim) or 5120 (row width); --check uses "
                        "it for every case (default: cycle scalar, 3, 2x5, 64)")
    p.add_argument("--multiple", type=int, default=128, help="S_PAD is a multiple of this many rows (128)")
    p.add_argument("--trials", type=int, default=12, help="random split matrices for --check (12)")
    p.add_argument("--seed", type=int, default=0, help="seed shared by all ranks (0)")
    p.add_argument("--max-rows", type=int, default=300, help="largest random block in rows (300)")
    p.add_argument("--backend", default="auto", choices=["auto", "hccl", "nccl", "gloo"])
    p.add_argument("--timeout", type=float, default=300.0, help="seconds before a dead peer ends the run")
    p.add_argument("--world-size", type=int, default=None, help="expected ranks; exit 2 if different")
    cli.add_output_args(p, csv=True, plot=False)
    return p


def body() -> int:
    args = build_parser().parse_args()
    from ditpar.comm import padded_alltoall

    if args.multiple < 1 or args.trials < 0 or args.max_rows < 1:
        raise InputError("--multiple and --max-rows must be >= 1 and --trials >= 0")
    from ditpar.comm import byte_identity

    matrix = padded_alltoall.parse_split_matrix(args.splits) if args.splits else None
    dtype = byte_identity.parse_dtype(args.dtype) if args.dtype else None
    row_shape = byte_identity.parse_row_shape(args.row_shape) if args.row_shape else None
    if not args.check:
        row_bytes = args.row_bytes
        if row_bytes is None and dtype and row_shape:
            import math

            row_bytes = byte_identity.ITEM_BYTES[dtype] * math.prod(row_shape)
        if matrix is None or row_bytes is None:
            raise InputError("give --check (under torchrun), or --splits with --row-bytes (or --dtype and "
                             "--row-shape) for a plan")
        return show_plan(args, padded_alltoall.pad_plan(matrix, row_bytes, args.multiple))
    return check(args, matrix, dtype, row_shape)


def show_plan(args, plan: dict) -> int:
    if args.csv:
        import pandas as pd

        cli.write_csv(args.csv, pd.DataFrame(plan["per_rank"]))
    if args.json:
        cli.print_json("a2a_pad", {"mode": "plan", **plan})
        return 0
    over = plan["padding_overhead"]
    print(f"ranks {plan['ranks_in_group']}  max block {plan['max_block_rows']} rows  "
          f"S_PAD {plan['s_pad']} rows (multiple of {plan['multiple']})  row {plan['row_bytes']} B")
    print(f"payload {plan['payload_bytes']} B  wire {plan['wire_bytes']} B  padding overhead "
          + ("-" if over is None else f"{100 * over:.1f}%"))
    print(cli.format_table(plan["per_rank"]))
    return 0


def check(args, matrix, dtype: str | None = None, row_shape: tuple[int, ...] | None = None) -> int:
    from ditpar.comm import byte_identity, dist

    _, world, _, _ = dist.world_from_env(args.world_size)  # checked before torch is imported
    if matrix is not None and len(matrix) != world:
        raise InputError(f"--splits has {len(matrix)} rows but the launched world has {world} rank(s)")
    ctx = None
    try:
        ctx = dist.setup(args.backend, args.timeout, args.world_size)
        rows = byte_identity.run_check(ctx, args.trials, args.seed, args.multiple, args.max_rows, matrix,
                                       dtype, row_shape)
        if ctx.rank == 0:
            report(args, ctx, rows)
    finally:
        dist.teardown(ctx)
    bad = [r for r in rows if not (r["identical"] and r["matches_expected"])]
    if bad:
        raise CheckFailed(f"{len(bad)} of {len(rows)} cases differ: "
                          + ", ".join(f"case {r['case']}" for r in bad[:8]))
    return 0


def report(args, ctx, rows: list[dict]) -> None:
    ok = all(r["identical"] and r["matches_expected"] for r in rows)
    if args.csv:
        import pandas as pd

        cli.write_csv(args.csv, pd.DataFrame(rows))
    if args.json:
        cli.print_json("a2a_pad", {"mode": "check", "backend": ctx.backend, "world": ctx.world,
                                   "multiple": args.multiple, "seed": args.seed, "cases": rows,
                                   "identical": ok})
        return
    print(f"# backend {ctx.backend}  world {ctx.world}  multiple {args.multiple}  seed {args.seed}")
    print(cli.format_table(rows, ["case", "dtype", "row_shape", "max_block_rows", "empty_blocks",
                                  "s_pad", "s_pad_from", "payload_bytes", "wire_bytes", "identical",
                                  "matches_expected"]))
    print(f"# {'IDENTICAL' if ok else 'DIFFERENT'}: {sum(r['identical'] for r in rows)}/{len(rows)} cases "
          "byte-identical to the uneven all-to-all")


def main() -> None:
    cli.run(PROG, body)


if __name__ == "__main__":
    main()
