#!/usr/bin/env python3
"""Measure a short list of parallel plans on these cards without model weights (torchrun; hccl/nccl/gloo).

DiT blocks of the model's real shapes with random weights run each plan's forward as the parallel form
does it (CFG split, Ulysses all-to-all, ring K/V passing, USP, AllGather-KV, TP, DP); each plan's output is
checked against one device (--check, default on) and its blocks are timed with warm-up, ABBA
interleaving and >= 3 repeats. Per step and per request are extrapolated from one block of each kind.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from ditpar import cli  # noqa: E402
from ditpar.errors import InputError  # noqa: E402

PROG = "plan_bench.py"
EXAMPLE = ('torchrun --nproc-per-node 8 scripts/plan_bench.py --model FLUX.1-dev --plans U8 "U4 R2" "U2 TP4" '
           "--csv /tmp/bench_plans.csv\n  python scripts/plan.py --model FLUX.1-dev --hardware H100 --devices 8 --json > plan.json"
           "\n  torchrun --nproc-per-node 8 scripts/plan_bench.py --from-plan plan.json --json > measured.json"
           "\n  python scripts/plan.py --model FLUX.1-dev --hardware H100 --devices 8 --measured measured.json")


def build_parser():
    p = cli.make_parser(PROG, __doc__.strip().splitlines()[0], EXAMPLE)
    p.add_argument("--model", default=None, help="model preset name or alias (templates/models)")
    p.add_argument("--model-file", default=None, metavar="TOML", help="in-house model file (as plan.py)")
    p.add_argument("--resolution", default=None, help="WxH (default: the preset's)")
    p.add_argument("--frames", type=int, default=None, help="video frames (default: the preset's)")
    p.add_argument("--steps", type=int, default=None, help="denoising steps for the extrapolation (default: the preset's)")
    p.add_argument("--no-cfg", action="store_true", help="request without classifier-free guidance")
    p.add_argument("--heads", type=int, default=None, help="override the model's query heads")
    p.add_argument("--kv-heads", type=int, default=None, help="override the model's K/V heads")
    p.add_argument("--layers", type=int, default=None, help="override the model's blocks (extrapolation only)")
    p.add_argument("--tokens", type=int, default=None, help="override the image/video tokens of one sample")
    p.add_argument("--plans", nargs="+", default=None, metavar="PLAN",
                   help='plans as plan.py prints them, e.g. U8 "cfg2 U4" "U4 R2" TP4 "U2 AG2" DP2')
    p.add_argument("--from-plan", default=None, metavar="PLAN.json",
                   help="plan.py --json output: measure its short list (model and shape from it unless given)")
    p.add_argument("--check", action=argparse.BooleanOptionalAction, default=None,
                   help="compare every plan's block output with one device before timing it (default: on, "
                        "accelerators included; --no-check skips it); a wrong plan is not timed and the run exits 1")
    p.add_argument("--no-padding", action="store_true",
                   help="refuse plans that need padded heads or sequence (exit 2) instead of padding them")
    p.add_argument("--warmup", type=int, default=2, help="untimed forwards per plan and block kind (default 2)")
    p.add_argument("--repeats", type=int, default=3, help="timed repeats per plan, ABBA order (default 3, minimum 3)")
    p.add_argument("--iters", type=int, default=3, help="forwards per timed sample (default 3)")
    p.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16"],
                   help="default auto: bfloat16 on accelerators, float32 on CPU")
    p.add_argument("--seed", type=int, default=0, help="seed of the random weights and inputs (default 0)")
    p.add_argument("--backend", default="auto", choices=["auto", "hccl", "nccl", "gloo"],
                   help="default auto: hccl with torch_npu and an NPU, nccl on CUDA, else gloo")
    p.add_argument("--timeout", type=float, default=300.0,
                   help="seconds before a dead or hung peer ends the run (default 300)")
    p.add_argument("--fault-drill", default=None, metavar="KIND:RANK",
                   help="prove the failure paths: die:R or hang:R (rank R exits or stalls before its first block), "
                        "corrupt:R (rank R's block output is shifted: the check must call the plan wrong, exit 1)")
    cli.add_output_args(p, csv=True)
    cli.add_progress_arg(p, "what is being built and its estimated memory, before it starts")
    return p


def body() -> int:
    args = build_parser().parse_args()
    from ditpar.comm import dist
    from ditpar.planbench import app

    app.check_args(args)
    if args.csv:
        folder = os.path.dirname(os.path.abspath(args.csv))
        if not os.path.isdir(folder):
            raise InputError(f"{args.csv}: folder {folder} does not exist")
    rank, world, _, _ = dist.world_from_env()        # checked before torch is imported
    request = app.make_request(args, world)
    fault = app.parse_fault(args.fault_drill, world)
    ctx = None
    try:
        ctx = dist.setup(args.backend, args.timeout)
        doc = app.measure(ctx, request, args, fault)
    finally:
        dist.teardown(ctx)
    if rank != 0:
        return app.exit_code(doc)
    if args.csv:
        cli.write_csv(args.csv, app.frame(doc))
    if args.json:
        cli.print_json("plan_bench", doc)
    else:
        from ditpar.planbench.report import render

        sys.stdout.write(render(doc))
    return app.exit_code(doc)


def main() -> None:
    cli.run(PROG, body)


if __name__ == "__main__":
    main()
