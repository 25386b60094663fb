#!/usr/bin/env python3
"""Extra host time of one DTensor tensor-parallel linear (ColwiseParallel / RowwiseParallel) over a plain one.

cache-dit's and diffusers' TP wrap each projection with torch.distributed.tensor.parallel; every call then
goes through DTensor dispatch (from_local, sharding propagation, redistribute, to_local). This times it on
CPU with gloo in 2 processes, on a tiny tensor so the matmul itself is negligible:
  colwise extra = ColwiseParallel(linear)(x) - linear_shard(x)                      (no collective either way)
  rowwise extra = RowwiseParallel(linear)(x) - (linear_shard(x) + dist.all_reduce)  (the same all-reduce)
Best of N repeats of M calls each (the host's quietest run). The Colwise figure is pure host dispatch and is
the one ditpar.plan.cost.timing.DTENSOR_LINEAR_HOST_US carries; the Rowwise one also holds gloo's
functional-collective path (AsyncCollectiveTensor + wait) against a plain c10d all_reduce, so it is printed,
not used. The figure is this host's and this torch's:
your host differs. Run: python3 benchmarks/dtensor_overhead.py [--repeats 7 --calls 300] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _best_us(fn, repeats: int, calls: int, barrier) -> float:
    """Best over `repeats` of the mean time of `calls` calls, in microseconds (ranks start together)."""
    for _ in range(20):
        fn()
    best = float("inf")
    for _ in range(repeats):
        barrier()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - t0) / calls * 1e6)
    return best


def _worker(rank: int, world: int, port: int, repeats: int, calls: int, queue) -> None:
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    mesh = init_device_mesh("cpu", (world,))
    d, rows = 64, 8
    x_full = torch.randn(rows, d)
    x_shard = torch.randn(rows, d // world)
    with torch.no_grad():
        plain_col = torch.nn.Linear(d, d // world)     # what one rank computes under Colwise
        plain_row = torch.nn.Linear(d // world, d)     # ... under Rowwise, before the all-reduce
        col = parallelize_module(torch.nn.Linear(d, d), mesh, ColwiseParallel())
        row = parallelize_module(torch.nn.Linear(d, d), mesh, RowwiseParallel())

        def plain_rowwise():
            y = plain_row(x_shard)
            dist.all_reduce(y)
            return y

        def dtensor_rowwise():   # the output is an AsyncCollectiveTensor: wait for its all-reduce as plain does
            y = row(x_shard)
            return y.wait() if hasattr(y, "wait") else y

        res = {
            "plain_colwise_us": _best_us(lambda: plain_col(x_full), repeats, calls, dist.barrier),
            "dtensor_colwise_us": _best_us(lambda: col(x_full), repeats, calls, dist.barrier),
            "plain_rowwise_allreduce_us": _best_us(plain_rowwise, repeats, calls, dist.barrier),
            "dtensor_rowwise_us": _best_us(dtensor_rowwise, repeats, calls, dist.barrier),
        }
    dist.barrier()
    if rank == 0:
        queue.put(res)
    dist.destroy_process_group()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 epilog="example: python3 benchmarks/dtensor_overhead.py --repeats 7 --calls 300")
    ap.add_argument("--repeats", type=int, default=7, help="repeats; the best is kept (default 7)")
    ap.add_argument("--calls", type=int, default=300, help="calls per repeat (default 300)")
    ap.add_argument("--json", action="store_true", help="print JSON on stdout")
    args = ap.parse_args()
    if args.repeats < 1 or args.calls < 1:
        print("dtensor_overhead: --repeats and --calls must be >= 1", file=sys.stderr)
        return 2
    try:
        import torch
        import torch.multiprocessing as mp
    except ImportError:
        print("dtensor_overhead: needs torch (pip install torch)", file=sys.stderr)
        return 2
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    mp.start_processes(_worker, args=(2, _free_port(), args.repeats, args.calls, queue), nprocs=2,
                       start_method="spawn")
    res = queue.get()
    res["colwise_extra_us"] = res["dtensor_colwise_us"] - res["plain_colwise_us"]
    res["rowwise_extra_us"] = res["dtensor_rowwise_us"] - res["plain_rowwise_allreduce_us"]
    res["per_linear_host_us"] = res["colwise_extra_us"]   # the figure the cost model uses (no collective in it)
    res.update(torch=torch.__version__, backend="gloo", world_size=2, repeats=args.repeats, calls=args.calls,
               host_cpu=_cpu_name())
    if args.json:
        print(json.dumps(res, indent=2))
        return 0
    print(f"DTensor TP linear host overhead, torch {res['torch']}, gloo, 2 processes on CPU "
          f"({res['host_cpu']}), best of {args.repeats} x {args.calls} calls")
    print(f"  ColwiseParallel  {res['dtensor_colwise_us']:8.1f} us  vs plain linear          "
          f"{res['plain_colwise_us']:8.1f} us  -> extra {res['colwise_extra_us']:7.1f} us")
    print(f"  RowwiseParallel  {res['dtensor_rowwise_us']:8.1f} us  vs linear + all_reduce   "
          f"{res['plain_rowwise_allreduce_us']:8.1f} us  -> extra {res['rowwise_extra_us']:7.1f} us")
    print(f"  host cost per parallelized linear (Colwise extra, no collective in it): "
          f"{res['per_linear_host_us']:.1f} us (measured on this host with this torch; your host differs)")
    print("  Rowwise extra also holds gloo's functional-collective all-reduce path against a plain c10d one: "
          "not host dispatch alone, not used")
    return 0


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


if __name__ == "__main__":
    sys.exit(main())
