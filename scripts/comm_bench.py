#!/usr/bin/env python3
"""Collective microbenchmark under torchrun (hccl / nccl / gloo), with nccl-tests' size, algbw and busbw.

Every op's received data is checked; wrong data exits 1. A peer that dies or hangs ends the run
with a one-line error within --timeout. Without torchrun it runs as a world of one process.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from ditpar import cli  # noqa: E402
from ditpar.errors import CheckFailed, InputError  # noqa: E402

PROG = "comm_bench.py"
EXAMPLE = ("torchrun --nproc-per-node 8 scripts/comm_bench.py --ops all_to_all,all_to_all_uneven,"
           "all_to_all_padded --min-bytes 1M --max-bytes 64M --csv /tmp/a2a.csv --plot /tmp/a2a.png\n"
           "  torchrun --nproc-per-node 8 scripts/comm_bench.py --simultaneous "
           "--groups '0,1,2,3@all_to_all;4,5,6,7@all_to_all' --min-bytes 1M --max-bytes 64M")


def build_parser():
    from ditpar.comm.bench import OPS

    p = cli.make_parser(PROG, __doc__.strip().splitlines()[0], EXAMPLE)
    p.add_argument("--ops", default="all",
                   help=f"comma-separated ops or 'all' (default): {', '.join(OPS)}")
    p.add_argument("--min-bytes", default="1M", help="smallest size, bytes or K/M/G (default 1M)")
    p.add_argument("--max-bytes", default="64M", help="largest size (default 64M)")
    p.add_argument("--factor", type=int, default=2, help="size multiplier between steps (default 2)")
    p.add_argument("--iters", type=int, default=20, help="timed iterations per size (default 20)")
    p.add_argument("--warmup", type=int, default=5, help="untimed iterations per size (default 5)")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    p.add_argument("--row-elems", type=int, default=64,
                   help="elements per row for the uneven and padded all-to-all (default 64)")
    p.add_argument("--groups", default=None,
                   help="benchmark inside sub-groups of global ranks, e.g. '0,1;0,4' (default: the world); "
                        "with --simultaneous a group may name its own op: '0,1,2,3@all_to_all;4,5,6,7@all_gather'")
    p.add_argument("--simultaneous", action="store_true",
                   help="run the (disjoint) --groups at the same moment, each its own op, as a hybrid plan's "
                        "traffic runs (default: one group after the other)")
    p.add_argument("--concurrent", type=int, default=1,
                   help="run K communicators over the same ranks at once (default 1)")
    p.add_argument("--beside-matmul", action="store_true",
                   help="test before you build masking: also time each op beside a matmul of the same "
                        "length and report the share that hides (below 0.5: do not build masking)")
    p.add_argument("--backend", default="auto", choices=["auto", "hccl", "nccl", "gloo"],
                   help="default auto: hccl with torch_npu and an NPU, nccl on CUDA, else gloo")
    p.add_argument("--timeout", type=float, default=300.0,
                   help="seconds before a dead or hung peer ends the run; must exceed one size's "
                        "warm-up + timed iterations on the slowest group (default 300)")
    p.add_argument("--world-size", type=int, default=None,
                   help="expected number of ranks; exit 2 if the launched world differs")
    p.add_argument("--fault-drill", default=None, metavar="KIND:RANK",
                   help="prove the failure paths: hang:R or die:R (rank R stalls or exits before its "
                        "first op), corrupt:R (rank R alters one received element; exit 1)")
    cli.add_output_args(p, csv=True, plot=True)
    return p


def parse_fault(text: str | None) -> tuple[str, int] | None:
    if text is None:
        return None
    kind, _, rank = text.partition(":")
    if kind not in ("hang", "die", "corrupt") or not rank.isdigit():
        raise InputError(f"--fault-drill {text!r}: expected hang:R, die:R or corrupt:R")
    return kind, int(rank)


def body() -> int:
    args = build_parser().parse_args()
    from ditpar.comm import bench, dist

    ops = bench.parse_ops(args.ops)
    sizes = bench.size_sweep(bench.parse_size(args.min_bytes, "--min-bytes"),
                                 bench.parse_size(args.max_bytes, "--max-bytes"), args.factor)
    for name in ("iters", "concurrent", "row_elems"):
        if getattr(args, name) < 1:
            raise InputError(f"--{name.replace('_', '-')} {getattr(args, name)}: expected >= 1")
    if args.warmup < 0:
        raise InputError(f"--warmup {args.warmup}: expected >= 0")
    fault = parse_fault(args.fault_drill)
    for path in (args.csv, args.plot):
        folder = os.path.dirname(os.path.abspath(path)) if path else None
        if folder and not os.path.isdir(folder):
            raise InputError(f"{path}: folder {folder} does not exist")
    _, world, _, _ = dist.world_from_env(args.world_size)  # checked before torch is imported
    from ditpar.comm import simultaneous

    groups, group_ops = simultaneous.parse_group_ops(args.groups, world, ops)
    if args.simultaneous:
        simultaneous.check_simultaneous(groups, group_ops)
        if args.beside_matmul:
            raise InputError("--beside-matmul: measures one group at a time; leave out --simultaneous")
    elif any([s.name for s in o] != [s.name for s in ops] for o in group_ops):
        raise InputError("--groups GROUP@op: a per-group op needs --simultaneous (one after the other, "
                         "use --ops)")
    if fault and fault[1] >= world:
        raise InputError(f"--fault-drill {args.fault_drill}: rank {fault[1]} outside the world of {world}")
    ctx = None
    try:
        ctx = dist.setup(args.backend, args.timeout, args.world_size)
        cfg = bench.BenchConfig(ops, sizes, groups, args.concurrent, args.iters, args.warmup,
                                    args.dtype, args.row_elems, fault, args.beside_matmul)
        if args.simultaneous:
            rows, timing = simultaneous.run_simultaneous(ctx, cfg, group_ops)
        else:
            rows, timing = bench.run_bench(ctx, cfg)
        if ctx.rank == 0:
            report(args, ctx, rows, timing)
    finally:
        dist.teardown(ctx)
    bad = [r for r in rows if not r["correct"]]
    if bad:
        raise CheckFailed(f"wrong data in {len(bad)} of {len(rows)} rows: "
                          + ", ".join(f"{r['op']} {r['bytes']} B ({r['wrong']} elements)" for r in bad[:5]))
    return 0


def report(args, ctx, rows: list[dict], timing: str) -> None:
    import pandas as pd
    from ditpar.comm import dist
    from ditpar.comm.bench import CSV_COLUMNS

    frame = pd.DataFrame(rows, columns=CSV_COLUMNS)
    if args.csv:
        cli.write_csv(args.csv, frame)
    if args.plot:
        plot(frame, args.plot, ctx)
    meta = {"backend": ctx.backend, "library": dist.library(ctx.backend), "world": ctx.world,
            "device": str(ctx.device), "timing": timing,
            "dtype": args.dtype, "iters": args.iters, "warmup": args.warmup,
            "time_statistic": "median over iterations of the slowest rank's time",
            "all_correct": bool(all(r["correct"] for r in rows)), "rows": rows}
    if args.json:
        cli.print_json("comm_bench", meta)
        return
    lib = dist.library(ctx.backend)   # RCCL under 'nccl' on ROCm: said; NCCL / HCCL / gloo are the backend's name
    print(f"# backend {ctx.backend}{f' ({lib})' if lib.lower() != ctx.backend else ''}  world {ctx.world}  "
          f"device {ctx.device}  "
          f"dtype {args.dtype}  "
          f"timing {timing}  iters {args.iters}  warmup {args.warmup}")
    print("# time = median over iterations of the slowest rank; algbw = size/time; busbw = algbw x factor")
    if args.simultaneous:
        print(f"# simultaneous: groups {rows[0]['simultaneous'] if rows else args.groups} ran each size at the "
              "same moment; each group's time is its slowest member's")
    show = ["op", "group", "concurrent", "bytes", "count", "time_us", "spread_pct", "algbw_GBps",
            "busbw_GBps", "wrong"]
    print(cli.format_table(frame, show, digits=2,
                           headers={"bytes": "size(B)", "concurrent": "K", "spread_pct": "spread%",
                                    "algbw_GBps": "algbw(GB/s)", "busbw_GBps": "busbw(GB/s)",
                                    "time_us": "time(us)", "wrong": "#wrong"}))
    for (op, group), sub in frame.groupby(["op", "group"], sort=False):
        print(f"# avg busbw {op} [{group}]: {sub['busbw_GBps'].mean():.3f} GB/s")
    if args.beside_matmul:
        from ditpar.comm import overlap_probe

        print("\n# beside a matmul of the same length: hidden = time alone + matmul alone - both together")
        print(cli.format_table(frame, ["op", "group", "bytes", "time_us", "matmul_us", "both_us", "hidden_frac"],
                               digits=2, headers={"bytes": "size(B)", "time_us": "alone(us)",
                                                  "matmul_us": "matmul(us)", "both_us": "both(us)"}))
        for (op, group), sub in frame.groupby(["op", "group"], sort=False):
            print(f"# {op} [{group}]: {overlap_probe.verdict(float(sub['hidden_frac'].median()))}")


def plot(frame, path: str, ctx) -> None:
    plt = cli.pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for (op, group, k), sub in frame.groupby(["op", "group", "concurrent"], sort=False):
        label = op + ("" if group == "world" else f" [{group}]") + ("" if k == 1 else f" x{k}")
        ax.plot(sub["bytes"], sub["busbw_GBps"], marker="o", label=label)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("size (bytes, nccl-tests convention)")
    ax.set_ylabel("busbw (GB/s)")
    ax.set_title(f"comm_bench: {ctx.backend}, {ctx.world} ranks")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    cli.save_figure(fig, path)
    plt.close(fig)


def main() -> None:
    cli.run(PROG, body)


if __name__ == "__main__":
    main()
