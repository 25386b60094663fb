"""Collectives on several disjoint groups at the same moment: the traffic a hybrid plan really makes.

A USP plan runs its Ulysses all-to-all inside each group of 4 while another group does the same, and
a ring crosses nodes while the all-to-all runs inside them; one group measured alone overstates the
bandwidth each gets. Here every group starts each iteration after one world barrier, each runs its
own op (``--groups "0,1,2,3@all_to_all;4,5,6,7@all_gather" --simultaneous``), and each group's time is
its slowest member's; the iteration's times of all groups travel in one world all-reduce.
"""

from __future__ import annotations

from typing import Any

from ditpar.comm import bench
from ditpar.errors import InputError


def parse_group_ops(text: str | None, world: int, default_ops: list[bench.OpSpec]
                    ) -> tuple[list[list[int]], list[list[bench.OpSpec]]]:
    """'0,1@all_to_all;2,3@all_gather' -> groups and each group's op list (default: --ops)."""
    if text is None or "@" not in text:
        return bench.parse_groups(text, world), [list(default_ops) for _ in bench.parse_groups(text, world)]
    parts = [p for p in text.replace(" ", "").split(";") if p]
    ranks_text, ops = [], []
    for part in parts:
        ranks, sep, op = part.partition("@")
        ranks_text.append(ranks)
        ops.append(bench.parse_ops(op) if sep else list(default_ops))
    groups = bench.parse_groups(";".join(ranks_text), world)
    return groups, ops


def check_simultaneous(groups: list[list[int]], ops: list[list[bench.OpSpec]]) -> None:
    """Groups that run at once must be disjoint and issue the same number of ops (lock step)."""
    seen: dict[int, str] = {}
    for g in groups:
        label = ",".join(map(str, g))
        for r in g:
            if r in seen:
                raise InputError(f"--simultaneous: rank {r} is in groups {seen[r]} and {label}; groups that "
                                 "run at once must be disjoint (run overlapping groups one after the other)")
            seen[r] = label
    lengths = {len(o) for o in ops}
    if len(lengths) != 1:
        raise InputError("--simultaneous: every group must run the same number of ops (one each with "
                         "GROUP@op, or the --ops list for all)")
    for g, o in zip(groups, ops, strict=True):
        for spec in o:
            if len(g) < spec.min_ranks or len(g) < 2:
                raise InputError(f"--groups {','.join(map(str, g))}@{spec.name}: a collective needs at least "
                                 f"{max(2, spec.min_ranks)} ranks")


def run_simultaneous(ctx: Any, cfg: bench.BenchConfig, ops: list[list[bench.OpSpec]]) -> tuple[list[dict], str]:
    """Run op j of every group at once, size by size; one row per (group, op, size)."""
    import torch

    from ditpar.comm.dist import new_group, peer_failure

    dtype = getattr(torch, cfg.dtype)
    elem = bench.DTYPES[cfg.dtype]
    timer = bench.Timer(ctx.device)
    world = bench.Comm(None, list(range(ctx.world)), ctx.rank, ctx.device, dtype, bench._FILL_MOD[cfg.dtype])
    handles = [[new_group(ctx, ranks) for _ in range(cfg.concurrent)] for ranks in cfg.groups]
    mine = next((i for i, g in enumerate(cfg.groups) if ctx.rank in g), None)
    comms = None
    if mine is not None:
        ranks = cfg.groups[mine]
        comms = [bench.Comm(h, ranks, ranks.index(ctx.rank), ctx.device, dtype, bench._FILL_MOD[cfg.dtype])
                 for h in handles[mine]]
    together = ";".join(",".join(map(str, g)) for g in cfg.groups)
    rows: list[dict] = []
    n_groups = len(cfg.groups)
    for j in range(len(ops[0])):
        for size in cfg.sizes:
            plans = [ops[g][j].plan(size, len(cfg.groups[g]), elem, cfg.row_elems) for g in range(n_groups)]
            if any(p.count == 0 for p in plans):
                continue
            what = f"simultaneous op {j + 1} at {size} B"
            times = [0.0] * (n_groups * cfg.iters)
            wrong = [0.0] * n_groups
            try:
                ctx.watchdog.pet(what)
                bufs = None
                if mine is not None:
                    spec = ops[mine][j]
                    bufs = [spec.fill(plans[mine], c, 0) for c in comms]
                for it in range(cfg.warmup + cfg.iters):
                    bench._group_barrier(world)
                    if mine is None:
                        continue
                    h = timer.start()
                    bench._run_once(spec, bufs, comms)
                    t = timer.stop_us(h)
                    if it >= cfg.warmup:
                        times[mine * cfg.iters + it - cfg.warmup] = t
                    ctx.watchdog.pet(what)
                if mine is not None:
                    bufs = [spec.fill(plans[mine], c, 1 + k) for k, c in enumerate(comms)]
                    outs = bench._run_once(spec, bufs, comms)
                    wrong[mine] = sum(float((o != b.expected).sum().item()) for o, b in zip(outs, bufs, strict=True))
                times = bench._world_reduce(times, ctx.device, "max")
                wrong = bench._world_reduce(wrong, ctx.device, "sum")
            except Exception as exc:
                raise peer_failure(ctx, what, exc) from None
            for g in range(n_groups):
                label = ",".join(map(str, cfg.groups[g]))
                row = bench._row(ops[g][j], plans[g], label, len(cfg.groups[g]), cfg,
                                 times[g * cfg.iters:(g + 1) * cfg.iters], int(wrong[g]), ctx.backend)
                row["simultaneous"] = together
                rows.append(row)
    return rows, timer.kind
