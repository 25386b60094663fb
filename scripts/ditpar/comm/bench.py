"""Collective microbenchmark: an op registry in the shape of nccl-tests, and the harness that runs it.

Each op is one :class:`OpSpec`: how many bytes it moves (``plan``), how to fill its inputs and the
expected result (``fill``), its bus factor, and how to run it once (``run``). Sizes, algbw and busbw
follow nccl-tests (``src/*.cu::*GetBw``, ``doc/PERFORMANCE.md``): ``size`` is the largest per-rank
buffer, ``algbw = size / time`` (GB/s = 1e9 B/s) and ``busbw = algbw x factor``. The harness times
each iteration (device events where the device has them, barrier + wall clock on CPU), takes the
slowest rank of every iteration, and reports the median and spread across iterations.
"""

from __future__ import annotations

import math
import os
import re
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ditpar.comm import padded_alltoall
from ditpar.errors import InputError

_UNITS = {"": 1, "B": 1, "K": 1024, "KB": 1024, "KIB": 1024, "M": 1024**2, "MB": 1024**2,
          "MIB": 1024**2, "G": 1024**3, "GB": 1024**3, "GIB": 1024**3}

DTYPES = {"float32": 4, "bfloat16": 2, "float16": 2}
# Fill values are small integers, so sums over ranks stay exact: modulus per dtype.
_FILL_MOD = {"float32": 251, "bfloat16": 5, "float16": 5}
UNEVEN_PATTERN = (1, 2, 0)  # weight of the block rank r sends to rank (r + k) % n: UNEVEN_PATTERN[k % 3]


def parse_size(text: str, what: str = "size") -> int:
    """'64K' -> 65536 (K, M, G are powers of 1024, as in nccl-tests); plain integers are bytes."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", str(text))
    unit = m.group(2).upper() if m else None
    if not m or unit not in _UNITS:
        raise InputError(f"{what} {text!r}: expected bytes like 1024, 64K, 1M or 2G")
    value = float(m.group(1)) * _UNITS[unit]
    if value != int(value) or value < 1:
        raise InputError(f"{what} {text!r}: expected a whole, positive number of bytes")
    return int(value)


def size_sweep(min_bytes: int, max_bytes: int, factor: int) -> list[int]:
    """min, min*factor, ... up to max (inclusive), like nccl-tests -b/-e/-f."""
    if min_bytes > max_bytes:
        raise InputError(f"--min-bytes {min_bytes} is larger than --max-bytes {max_bytes}")
    if factor < 2:
        raise InputError(f"--factor {factor}: expected an integer >= 2")
    sizes, s = [], min_bytes
    while s <= max_bytes:
        sizes.append(s)
        s *= factor
    return sizes


def parse_groups(text: str | None, world: int) -> list[list[int]]:
    """'0,1;0,4' -> [[0, 1], [0, 4]]; None -> the whole world."""
    if text is None or text.strip() == "world":
        return [list(range(world))]
    groups = []
    for part in [p for p in text.replace(" ", "").split(";") if p]:
        try:
            ranks = [int(v) for v in part.split(",")]
        except ValueError:
            raise InputError(f"--groups {part!r}: expected comma-separated ranks, e.g. '0,1;0,4'") from None
        bad = [r for r in ranks if not 0 <= r < world]
        if bad:
            raise InputError(f"--groups {part!r}: rank(s) {bad} outside the launched world of {world}")
        if len(set(ranks)) != len(ranks):
            raise InputError(f"--groups {part!r}: a rank appears twice")
        if len(ranks) < 2:
            raise InputError(f"--groups {part!r}: a group of one rank moves nothing (busbw 0); a collective "
                             f"needs at least 2 ranks")
        groups.append(ranks)
    if not groups:
        raise InputError("--groups: no group given")
    return groups


def apportion(total: int, weights: Sequence[int]) -> list[int]:
    """Split total into integer parts proportional to weights (largest remainder, ties to the left)."""
    wsum = sum(weights)
    exact = [total * w / wsum for w in weights]
    parts = [int(math.floor(x)) for x in exact]
    order = sorted(range(len(weights)), key=lambda i: (-(exact[i] - parts[i]), i))
    for i in order[: total - sum(parts)]:
        parts[i] += 1
    return parts


def uneven_blocks(total_rows: int, n: int) -> list[int]:
    """Rows rank r sends to rank (r + k) % n, for k = 0..n-1; circulant, so every rank sends and
    receives exactly total_rows and some blocks are empty (from 3 ranks on)."""
    weights = [UNEVEN_PATTERN[k % 3] for k in range(n)]
    return apportion(total_rows, weights)


# --------------------------------------------------------------------------------------------
# The registry


@dataclass
class Plan:
    """What one op moves at one requested size."""

    count: int  # elements per rank, as nccl-tests prints in its `count` column
    size_bytes: int  # nccl-tests' `size`: the largest per-rank buffer
    wire_bytes: int  # bytes the collective really carries per rank (padding included)
    bus_factor: float
    extra: dict = field(default_factory=dict)


@dataclass
class Buffers:
    """Inputs, outputs and the expected result of one op on one rank."""

    inp: Any
    out: Any
    expected: Any
    state: dict = field(default_factory=dict)


@dataclass(frozen=True)
class OpSpec:
    """One collective: bytes moved, input fill and expected result, bus factor, run once."""

    name: str
    api: str  # the torch.distributed call it times
    min_ranks: int
    plan: Callable[[int, int, int, int], Plan]  # (size, n, elem_bytes, row_elems) -> Plan
    fill: Callable[[Plan, Comm, int], Buffers]  # (plan, comm, rep) -> Buffers
    run: Callable[[Buffers, Comm], list]  # launch once asynchronously, return works to wait on
    result: Callable[[Buffers, list], Any] = lambda b, waited: b.out  # output, from wait() values


@dataclass
class Comm:
    """One communicator as the ops see it."""

    group: Any
    ranks: list[int]  # global ranks, in group order
    grank: int  # this process's rank in the group
    device: Any
    dtype: Any
    fill_mod: int

    @property
    def n(self) -> int:
        return len(self.ranks)


def values(comm: Comm, src: int, start: int, count: int, rep: int) -> Any:
    """Deterministic fill of ``count`` elements that rank ``src`` holds from offset ``start``."""
    import torch

    idx = torch.arange(start, start + count, dtype=torch.int64, device=comm.device)
    v = (src * 131 + idx * 7 + rep * 17) % comm.fill_mod - comm.fill_mod // 2
    return v.to(comm.dtype)


def _per_rank_plan(size: int, n: int, elem: int, factor: float) -> Plan:
    per = size // elem // n
    return Plan(per, per * n * elem, per * n * elem, factor)


def _whole_plan(size: int, n: int, elem: int, factor: float) -> Plan:
    count = size // elem
    return Plan(count, count * elem, count * elem, factor)


def _ring_factor(n: int) -> float:
    return (n - 1) / n


# all_reduce ---------------------------------------------------------------------------------
def _ar_fill(p: Plan, c: Comm, rep: int) -> Buffers:
    t = values(c, c.grank, 0, p.count, rep)
    expected = sum(values(c, s, 0, p.count, rep) for s in range(c.n))
    return Buffers(t, t, expected)


def _ar_run(b: Buffers, c: Comm) -> list:
    import torch.distributed as dist

    return [dist.all_reduce(b.inp, group=c.group, async_op=True)]


# all_gather ---------------------------------------------------------------------------------
def _ag_fill(p: Plan, c: Comm, rep: int) -> Buffers:
    import torch

    inp = values(c, c.grank, 0, p.count, rep)
    out = torch.empty(p.count * c.n, dtype=c.dtype, device=c.device)
    expected = torch.cat([values(c, s, 0, p.count, rep) for s in range(c.n)])
    return Buffers(inp, out, expected)


def _ag_run(b: Buffers, c: Comm) -> list:
    import torch.distributed as dist

    fn = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    return [fn(b.out, b.inp, group=c.group, async_op=True)]


# reduce_scatter -----------------------------------------------------------------------------
def _rs_fill(p: Plan, c: Comm, rep: int) -> Buffers:
    import torch

    inp = values(c, c.grank, 0, p.count * c.n, rep)
    out = torch.empty(p.count, dtype=c.dtype, device=c.device)
    start = c.grank * p.count
    expected = sum(values(c, s, start, p.count, rep) for s in range(c.n))
    return Buffers(inp, out, expected)


def _rs_run(b: Buffers, c: Comm) -> list:
    import torch.distributed as dist

    fn = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    return [fn(b.out, b.inp, group=c.group, async_op=True)]


# all_to_all (even) --------------------------------------------------------------------------
def _a2a_fill(p: Plan, c: Comm, rep: int) -> Buffers:
    import torch

    inp = values(c, c.grank, 0, p.count * c.n, rep)
    out = torch.empty(p.count * c.n, dtype=c.dtype, device=c.device)
    expected = torch.cat([values(c, s, c.grank * p.count, p.count, rep) for s in range(c.n)])
    return Buffers(inp, out, expected)


def _a2a_run(b: Buffers, c: Comm) -> list:
    import torch.distributed as dist

    return [dist.all_to_all_single(b.out, b.inp, group=c.group, async_op=True)]


# all_to_all with uneven splits, and its padded replacement ----------------------------------
def _uneven_plan(size: int, n: int, elem: int, row_elems: int, padded: bool) -> Plan:
    rows = size // (elem * row_elems)
    blocks = uneven_blocks(rows, n)
    payload = rows * row_elems * elem
    off_rank = (rows - blocks[0]) / rows if rows else 0.0
    s_pad = padded_alltoall.s_pad_for(max(blocks, default=0)) if padded else 0
    wire = n * s_pad * row_elems * elem if padded else payload
    return Plan(rows * row_elems, payload, wire, off_rank,
                {"blocks": blocks, "rows": rows, "s_pad": s_pad, "row_elems": row_elems})


def _uneven_splits(p: Plan, c: Comm) -> tuple[list[int], list[int]]:
    blocks, n, r = p.extra["blocks"], c.n, c.grank
    send = [blocks[(d - r) % n] for d in range(n)]
    recv = [blocks[(r - s) % n] for s in range(n)]
    return send, recv


def _uneven_fill(p: Plan, c: Comm, rep: int) -> Buffers:
    import torch

    w = p.extra["row_elems"]
    send, recv = _uneven_splits(p, c)
    inp = values(c, c.grank, 0, p.count, rep).reshape(-1, w)
    pieces = []
    for s in range(c.n):
        s_send = [p.extra["blocks"][(d - s) % c.n] for d in range(c.n)]
        offset = sum(s_send[: c.grank])
        pieces.append(values(c, s, offset * w, recv[s] * w, rep))
    expected = torch.cat(pieces).reshape(-1, w)
    out = torch.empty((sum(recv), w), dtype=c.dtype, device=c.device)
    return Buffers(inp, out, expected, {"send": send, "recv": recv})


def _uneven_run(b: Buffers, c: Comm) -> list:
    import torch.distributed as dist

    return [dist.all_to_all_single(b.out, b.inp, b.state["recv"], b.state["send"],
                                   group=c.group, async_op=True)]


def _padded_run(b: Buffers, c: Comm) -> list:
    return [padded_alltoall.start_padded_all_to_all(b.inp, b.state["send"], b.state["recv"],
                                            b.state["s_pad"], c.group, async_op=True)]


def _padded_fill(p: Plan, c: Comm, rep: int) -> Buffers:
    b = _uneven_fill(p, c, rep)
    b.state["s_pad"] = p.extra["s_pad"]
    return b


def _padded_result(b: Buffers, waited: list) -> Any:
    return waited[0]  # PendingPad.wait() returns the unpadded output


# broadcast ----------------------------------------------------------------------------------
def _bc_fill(p: Plan, c: Comm, rep: int) -> Buffers:
    import torch

    expected = values(c, 0, 0, p.count, rep)
    t = expected.clone() if c.grank == 0 else torch.zeros_like(expected)
    return Buffers(t, t, expected)


def _bc_run(b: Buffers, c: Comm) -> list:
    import torch.distributed as dist

    return [dist.broadcast(b.inp, src=c.ranks[0], group=c.group, async_op=True)]


# sendrecv (ring: send to the next rank, receive from the previous one, as nccl-tests) --------
def _sr_fill(p: Plan, c: Comm, rep: int) -> Buffers:
    import torch

    inp = values(c, c.grank, 0, p.count, rep)
    out = torch.empty_like(inp)
    expected = values(c, (c.grank - 1) % c.n, 0, p.count, rep)
    return Buffers(inp, out, expected)


def _sr_run(b: Buffers, c: Comm) -> list:
    import torch.distributed as dist

    nxt, prv = c.ranks[(c.grank + 1) % c.n], c.ranks[(c.grank - 1) % c.n]
    ops = [dist.P2POp(dist.isend, b.inp, nxt, c.group), dist.P2POp(dist.irecv, b.out, prv, c.group)]
    return list(dist.batch_isend_irecv(ops))


OPS: dict[str, OpSpec] = {
    s.name: s
    for s in [
        OpSpec("all_reduce", "all_reduce", 1,
               lambda size, n, e, w: _whole_plan(size, n, e, 2 * (n - 1) / n), _ar_fill, _ar_run),
        OpSpec("all_gather", "all_gather_into_tensor", 1,
               lambda size, n, e, w: _per_rank_plan(size, n, e, _ring_factor(n)), _ag_fill, _ag_run),
        OpSpec("reduce_scatter", "reduce_scatter_tensor", 1,
               lambda size, n, e, w: _per_rank_plan(size, n, e, _ring_factor(n)), _rs_fill, _rs_run),
        OpSpec("all_to_all", "all_to_all_single", 1,
               lambda size, n, e, w: _per_rank_plan(size, n, e, _ring_factor(n)), _a2a_fill, _a2a_run),
        OpSpec("all_to_all_uneven", "all_to_all_single(splits)", 1,
               lambda size, n, e, w: _uneven_plan(size, n, e, w, False), _uneven_fill, _uneven_run),
        OpSpec("all_to_all_padded", "all_to_all_single(padded)", 1,
               lambda size, n, e, w: _uneven_plan(size, n, e, w, True), _padded_fill, _padded_run,
               _padded_result),
        OpSpec("broadcast", "broadcast", 1,
               lambda size, n, e, w: _whole_plan(size, n, e, 1.0), _bc_fill, _bc_run),
        OpSpec("sendrecv", "batch_isend_irecv", 2,
               lambda size, n, e, w: _whole_plan(size, n, e, 1.0), _sr_fill, _sr_run),
    ]
}


def parse_ops(text: str) -> list[OpSpec]:
    """'all_reduce,sendrecv' or 'all' -> specs, in the order given."""
    names = [t for t in text.replace(" ", "").split(",") if t]
    if names == ["all"]:
        return list(OPS.values())
    unknown = [t for t in names if t not in OPS]
    if unknown or not names:
        raise InputError(f"--ops {text!r}: unknown op(s) {unknown}; known: {', '.join(OPS)} or 'all'")
    twice = sorted({t for t in names if names.count(t) > 1})
    if twice:
        raise InputError(f"--ops {text!r}: {twice} named twice (each op is measured once per size)")
    return [OPS[t] for t in names]


def bandwidths(size_bytes: int, time_us: float, factor: float) -> tuple[float, float]:
    """(algbw, busbw) in GB/s (1e9 B/s) exactly as nccl-tests computes them."""
    if time_us <= 0:
        return float("nan"), float("nan")
    algbw = size_bytes / 1e9 / (time_us * 1e-6)
    return algbw, algbw * factor


# --------------------------------------------------------------------------------------------
# The harness


@dataclass
class BenchConfig:
    ops: list[OpSpec]
    sizes: list[int]
    groups: list[list[int]]
    concurrent: int = 1
    iters: int = 20
    warmup: int = 5
    dtype: str = "float32"
    row_elems: int = 64
    fault: tuple[str, int] | None = None  # ('hang' | 'die' | 'corrupt', rank)
    beside_matmul: bool = False  # also time the op beside a matmul of the same length (overlap_probe)


class Timer:
    """Device events where the device has them; otherwise wall clock after the waits."""

    def __init__(self, device: Any) -> None:
        import torch

        self.device = device
        mod = {"cuda": getattr(torch, "cuda", None), "npu": getattr(torch, "npu", None)}.get(device.type)
        self.events = mod.Event if mod is not None else None
        self.kind = "device-events" if self.events else "wall-clock"

    def start(self) -> Any:
        if self.events:
            e = self.events(enable_timing=True)
            e.record()
            return e
        return time.perf_counter()

    def stop_us(self, handle: Any) -> float:
        if self.events:
            e = self.events(enable_timing=True)
            e.record()
            e.synchronize()
            return float(handle.elapsed_time(e)) * 1e3
        return (time.perf_counter() - handle) * 1e6


def _group_barrier(comm: Comm) -> None:
    import torch
    import torch.distributed as dist

    from ditpar.comm.dist import sync_device

    t = torch.zeros(1, device=comm.device)
    dist.all_reduce(t, group=comm.group)
    sync_device(comm.device)


def _run_once(spec: OpSpec, bufs: list[Buffers], comms: list[Comm]) -> list[Any]:
    pending = [(b, c, spec.run(b, c)) for b, c in zip(bufs, comms, strict=True)]
    return [spec.result(b, [w.wait() for w in works]) for b, _c, works in pending]


def _world_reduce(values_: list[float], device: Any, op: str) -> list[float]:
    """MAX of float times or SUM of integer counts over the whole world (non-members give 0)."""
    import torch
    import torch.distributed as dist

    if op == "max":
        dtype = torch.float32 if device.type == "npu" else torch.float64
        t = torch.tensor(values_, dtype=dtype, device=device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
    else:
        # int32 on NPU, where int64 reductions are not supported everywhere; counts stay far below 2**31
        dtype = torch.int32 if device.type == "npu" else torch.int64
        t = torch.tensor([int(v) for v in values_], dtype=dtype, device=device)
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return [float(v) for v in t.cpu().tolist()]


def _maybe_fault(cfg: BenchConfig, rank: int, stage: str) -> None:
    if cfg.fault is None or cfg.fault[1] != rank or stage != "first-op":
        return
    kind = cfg.fault[0]
    if kind == "hang":
        sys.stderr.write(f"rank {rank}: --fault-drill hang: sleeping instead of joining the collective\n")
        sys.stderr.flush()
        while True:
            time.sleep(3600)
    if kind == "die":
        sys.stderr.write(f"rank {rank}: --fault-drill die: exiting before the collective\n")
        sys.stderr.flush()
        os._exit(17)


def run_bench(ctx: Any, cfg: BenchConfig) -> tuple[list[dict], str]:
    """Run every (group, op, size); return result rows (valid on every rank) and the timing kind."""
    import torch

    from ditpar.comm.dist import new_group, peer_failure

    dtype = getattr(torch, cfg.dtype)
    elem = DTYPES[cfg.dtype]
    timer = Timer(ctx.device)
    rows: list[dict] = []
    first = True
    for ranks in cfg.groups:
        # new_group must be called by every rank, in the same order, even by non-members.
        groups = [new_group(ctx, ranks) for _ in range(cfg.concurrent)]
        member = ctx.rank in ranks
        comms = [Comm(g, ranks, ranks.index(ctx.rank) if member else -1, ctx.device, dtype,
                      _FILL_MOD[cfg.dtype]) for g in groups]
        label = ",".join(map(str, ranks)) if len(cfg.groups) > 1 or len(ranks) != ctx.world else "world"
        n = len(ranks)
        if cfg.dtype == "bfloat16" and n > 128:  # fill values -2..2: sums stay exact in bf16 up to 128 ranks
            raise InputError(f"--dtype bfloat16: the exact data check holds up to 128 ranks, the group has {n}")
        for spec in cfg.ops:
            if n < spec.min_ranks:
                if ctx.rank == 0:
                    sys.stderr.write(f"note: {spec.name} skipped on group {label}: needs >= {spec.min_ranks} ranks\n")
                continue
            for size in cfg.sizes:
                plan = spec.plan(size, n, elem, cfg.row_elems)
                if plan.count == 0:
                    if ctx.rank == 0:
                        sys.stderr.write(f"note: {spec.name} at {size} B skipped on group {label}: "
                                         f"less than one {'row' if 'rows' in plan.extra else 'element'} per rank\n")
                    continue
                what = f"{spec.name} {size} B on group {label}"
                times = [0.0] * cfg.iters
                wrong = 0.0
                try:
                    if member:
                        ctx.watchdog.pet(what)
                        if first:
                            _maybe_fault(cfg, ctx.rank, "first-op")
                        bufs = [spec.fill(plan, c, 0) for c in comms]
                        for it in range(cfg.warmup + cfg.iters):
                            _group_barrier(comms[0])
                            h = timer.start()
                            _run_once(spec, bufs, comms)
                            t = timer.stop_us(h)
                            if it >= cfg.warmup:
                                times[it - cfg.warmup] = t
                            ctx.watchdog.pet(what)
                        bufs = [spec.fill(plan, c, 1 + k) for k, c in enumerate(comms)]
                        outs = _run_once(spec, bufs, comms)
                        if cfg.fault and cfg.fault[0] == "corrupt" and cfg.fault[1] == ctx.rank:
                            outs[0].view(-1)[0] += 1
                        for o, b in zip(outs, bufs, strict=True):
                            wrong += float((o != b.expected).sum().item())
                    first = False
                    times = _world_reduce(times, ctx.device, "max")
                    wrong = _world_reduce([wrong], ctx.device, "sum")[0]
                    probe = _probe(spec, plan, comms, member, timer, times, cfg, ctx) if cfg.beside_matmul else None
                except Exception as exc:
                    raise peer_failure(ctx, what, exc) from None
                rows.append(_row(spec, plan, label, n, cfg, times, int(wrong), ctx.backend))
                if probe:
                    rows[-1].update(probe)
    return rows, timer.kind


def _probe(spec: OpSpec, plan: Plan, comms: list[Comm], member: bool, timer: Timer, times: list[float],
           cfg: BenchConfig, ctx: Any) -> dict:
    """The op beside a matmul of its own median length; slowest rank of every iteration."""
    from ditpar.comm import overlap_probe

    alone = both = [0.0] * cfg.iters
    if member:
        bufs = [spec.fill(plan, c, 0) for c in comms]
        alone, both, _dim = overlap_probe.measure(spec, bufs, comms, timer, statistics.median(times),
                                                  cfg.iters, lambda: _group_barrier(comms[0]))
    alone = _world_reduce(alone, ctx.device, "max")
    both = _world_reduce(both, ctx.device, "max")
    return overlap_probe.summarise(statistics.median(times), alone, both)


def _row(spec: OpSpec, plan: Plan, label: str, n: int, cfg: BenchConfig, times: list[float],
         wrong: int, backend: str) -> dict:
    med = statistics.median(times)
    k = cfg.concurrent
    algbw, busbw = bandwidths(plan.size_bytes * k, med, plan.bus_factor)
    lo, hi = min(times), max(times)
    return {
        "op": spec.name,
        "bytes": plan.size_bytes,
        "ranks": n,
        "time_us": med,
        "algbw_GBps": algbw,
        "busbw_GBps": busbw,
        "correct": wrong == 0,
        "wrong": wrong,
        "count": plan.count,
        "dtype": cfg.dtype,
        "wire_bytes": plan.wire_bytes,
        "bus_factor": plan.bus_factor,
        "group": label,
        "concurrent": k,
        "iters": cfg.iters,
        "time_min_us": lo,
        "time_max_us": hi,
        "spread_pct": 100.0 * (hi - lo) / med if med > 0 else float("nan"),
        "backend": backend,
        "api": spec.api,
        "simultaneous": "",
        "matmul_us": float("nan"),
        "both_us": float("nan"),
        "hidden_us": float("nan"),
        "hidden_frac": float("nan"),
    }


CSV_COLUMNS = ["op", "bytes", "ranks", "time_us", "algbw_GBps", "busbw_GBps", "correct", "wrong",
               "count", "dtype", "wire_bytes", "bus_factor", "group", "concurrent", "iters",
               "time_min_us", "time_max_us", "spread_pct", "backend", "api", "simultaneous",
               "matmul_us", "both_us", "hidden_us", "hidden_frac"]
