"""Run a short list of plans on the launched world: validate every rank's layout, check each plan's block
output against one device, count the elements each rank sends, time the blocks ABBA, summarise."""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field

from ditpar.errors import DitParError, InputError
from ditpar.plan.cost.plans import Plan
from ditpar.planbench import timing
from ditpar.planbench.blocks import BlockShape, forward, make_inputs, make_weights
from ditpar.planbench.forms import Comm, Form
from ditpar.planbench.spec import all_groups, place

# max |parallel - one device| allowed, relative to max(1, max |one-device output|): fp32 differs only by
# reduction order (TP partial sums, the ring's log-sum-exp merge, GEMMs on fewer rows); bf16 rounds every
# intermediate to 8 bits of mantissa
TOLERANCE = {"float32": 1e-4, "bfloat16": 5e-2}
ELEMENT_BYTES = {"float32": 4, "bfloat16": 2}


@dataclass
class BenchConfig:
    plans: list[Plan]
    kinds: dict[str, tuple[BlockShape, int]]
    steps: int
    warmup: int = 2
    repeats: int = 3
    iters: int = 3
    check: bool = True
    allow_pad: bool = True
    dtype: str = "float32"
    seed: int = 0
    fault: tuple[str, int] | None = None
    skipped: list[dict] = field(default_factory=list)


def validate(plans: list[Plan], kinds: dict, allow_pad: bool, repeats: int, world: int) -> None:
    """Every rank's layout of every plan and kind, before any process group exists (same error everywhere)."""
    if repeats < timing.MIN_REPEATS:
        raise InputError(f"--repeats {repeats}: at least {timing.MIN_REPEATS} (references/fewstep-validation.md)")
    for plan in plans:
        for r in range(world):
            pl = place(plan, r, world)
            for s, _ in kinds.values():
                Form(pl, s, Comm({}), allow_pad)


def _fault(cfg: BenchConfig, rank: int) -> None:
    if cfg.fault is None or cfg.fault[1] != rank or cfg.fault[0] == "corrupt":
        return
    sys.stderr.write(f"rank {rank}: --fault-drill {cfg.fault[0]}: {'exiting' if cfg.fault[0] == 'die' else 'stalling'} "
                     "before the first block\n")
    sys.stderr.flush()
    if cfg.fault[0] == "die":
        os._exit(17)
    while True:
        time.sleep(3600)


def _barrier(ctx) -> None:
    import torch
    import torch.distributed as dist

    t = torch.zeros(1, device=ctx.device)
    dist.all_reduce(t)
    ctx.sync()


def world_max(values: list[float], ctx) -> list[float]:
    """The element-wise maximum of values over every rank (an all-reduce)."""
    import torch
    import torch.distributed as dist

    dtype = torch.float32 if ctx.device.type == "npu" else torch.float64
    t = torch.tensor(values, dtype=dtype, device=ctx.device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return [float(v) for v in t.cpu().tolist()]


class Built:
    """One plan built on this rank: its form, sharded weights and inputs per kind."""

    def __init__(self, plan: Plan, ctx, cfg: BenchConfig, full: dict, pgs: dict, cache: dict) -> None:
        import torch

        dtype = getattr(torch, cfg.dtype)
        self.plan = plan
        self.comm = Comm(pgs)
        pl = place(plan, ctx.rank, ctx.world)
        self.forms, self.weights, self.inputs = {}, {}, {}
        for kind, (s, _) in cfg.kinds.items():
            form = Form(pl, s, self.comm, cfg.allow_pad)
            w, inp = full[kind]
            self.forms[kind] = form
            key = (kind, plan.tp, pl.index["tp"])   # plans with the same TP shard share one copy of the weights
            if key not in cache:
                cache[key] = {k: v.to(ctx.device, dtype) for k, v in form.shard_weights(w).items()}
            self.weights[kind] = cache[key]
            self.inputs[kind] = {k: v.to(ctx.device, dtype) for k, v in form.shard_inputs(inp).items()}

    def forward(self, kind: str, cfg: BenchConfig) -> dict:
        return forward(cfg.kinds[kind][0], self.weights[kind], self.inputs[kind], self.forms[kind])


def _groups_for(plan: Plan, ctx) -> dict:
    """Create every group of the plan (all ranks, same order) and keep this rank's: dim -> (group, size)."""
    from ditpar.comm.dist import new_group

    mine = {}
    for dim, grs in all_groups(plan).items():
        for g in grs:
            pg = new_group(ctx, g)
            if ctx.rank in g:
                mine[dim] = (pg, len(g))
    return mine


def run(ctx, cfg: BenchConfig) -> dict:
    """Check, count and time every plan; the result (valid on every rank) as plan_bench's JSON body."""
    import torch

    what = "building the blocks"
    phases: dict[str, float] = {}
    last = [time.perf_counter()]

    def clock() -> float:
        now = time.perf_counter()
        took, last[0] = now - last[0], now
        return took

    try:
        full = {}
        for i, (kind, (s, _)) in enumerate(cfg.kinds.items()):
            full[kind] = (make_weights(s, cfg.seed + 2 * i), make_inputs(s, cfg.seed + 2 * i + 1))
        ctx.watchdog.pet(what)
        cache: dict = {}
        built = [Built(p, ctx, cfg, full, _groups_for(p, ctx), cache) for p in cfg.plans]
        phases["build_s"] = clock()
        _fault(cfg, ctx.rank)
        what = "the correctness check"
        ctx.watchdog.pet(what)
        ref = {}
        if cfg.check:
            one = Built(Plan(), _Single(ctx), cfg, full, {}, cache)
            with torch.no_grad():
                ref = {k: one.forward(k, cfg) for k in cfg.kinds}
            del one
        del full
        phases["reference_s"] = clock()
        rows = []
        with torch.no_grad():
            for b in built:
                what = f"plan {b.plan.name}: counting and checking"
                ctx.watchdog.pet(what)
                rows.append(_count_and_check(b, cfg, ref, ctx))
            wrong = [i for i, r in enumerate(rows) if r["verdict"] == "wrong"]
            good = [i for i in range(len(built)) if i not in wrong]
            phases["count_and_check_s"] = clock()
            what = "warm-up"
            for i in good:
                for _ in range(cfg.warmup):
                    for k in cfg.kinds:
                        built[i].forward(k, cfg)
                ctx.sync()
                ctx.watchdog.pet(what)
            phases["warmup_s"] = clock()
            samples = {i: [[0.0] * len(cfg.kinds) for _ in range(cfg.repeats)] for i in good}
            for rep, order in enumerate(timing.abba_orders(len(good), cfg.repeats)):
                for j in order:
                    i = good[j]
                    what = f"plan {built[i].plan.name}: repeat {rep + 1}"
                    for ki, k in enumerate(cfg.kinds):
                        _barrier(ctx)
                        samples[i][rep][ki] = timing.time_calls(lambda i=i, k=k: built[i].forward(k, cfg),
                                                                cfg.iters, ctx.sync)
                    ctx.watchdog.pet(what)
            phases["timed_s"] = clock()
            what = "collecting the timings"
            flat = [t for i in good for rep in samples[i] for t in rep]
            flat = world_max(flat, ctx) if flat else []
    except InputError:
        raise
    except Exception as exc:
        raise failure(ctx, what, exc) from None
    per = len(cfg.kinds) * cfg.repeats
    layers = sum(c for _, c in cfg.kinds.values())
    for n, i in enumerate(good):
        mine = flat[n * per:(n + 1) * per]
        reps = [mine[r * len(cfg.kinds):(r + 1) * len(cfg.kinds)] for r in range(cfg.repeats)]
        counts = [c for _, c in cfg.kinds.values()]
        steps = [sum(c * t for c, t in zip(counts, rep, strict=True)) for rep in reps]
        st = timing.summarize(steps)
        row = rows[i]
        row.update({"step_s": st["median"], "block_ms": st["median"] / layers * 1e3,
                    "request_s": st["median"] * cfg.steps, "dispersion_pct": st["dispersion_pct"],
                    # the throughput side: dp replicas ran their requests at once, each in request_s
                    "requests_per_s": row.get("dp", 1) / (st["median"] * cfg.steps) if st["median"] > 0 else None,
                    "step_samples_s": steps,
                    "block_ms_by_kind": {k: timing.summarize([rep[ki] for rep in reps])["median"] * 1e3
                                         for ki, k in enumerate(cfg.kinds)}})
    timing.verdicts(rows)
    return {"plans": rows + cfg.skipped, "phases_s": phases}


def _short(exc: BaseException, limit: int = 300) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


class BenchFailure(DitParError):
    """The run itself failed on this rank (out of memory, a runtime error) with no peer to blame."""

    exit_code = 2


def out_of_memory(exc: BaseException) -> bool:
    """torch's and Python's ways of saying an allocation failed (CPU, CUDA, NPU)."""
    if isinstance(exc, MemoryError) or type(exc).__name__ in ("OutOfMemoryError", "OutOfMemory"):
        return True
    text = str(exc).lower()
    return isinstance(exc, RuntimeError) and ("can't allocate memory" in text or "out of memory" in text)


def failure(ctx, what: str, exc: BaseException) -> DitParError:
    """One line for a failed step: out of memory names the memory; only a run with peers can blame a peer."""
    from ditpar.comm.dist import peer_failure

    if out_of_memory(exc):
        return BenchFailure(f"rank {ctx.rank}: {what}: out of memory on {ctx.device} ({type(exc).__name__}: "
                            f"{_short(exc, 160)}); the estimate from the block shapes fitted, other processes may "
                            "hold the memory: use a smaller --tokens, --resolution or model, or fewer plans")
    if ctx.world == 1:
        return BenchFailure(f"rank 0: {what} failed ({type(exc).__name__}: {_short(exc)}) in a one-process run")
    return peer_failure(ctx, what, exc)


class _Single:
    """The one-device reference runs on this rank alone (no process group)."""

    def __init__(self, ctx) -> None:
        self.rank, self.world, self.device = 0, 1, ctx.device


def _count_and_check(b: Built, cfg: BenchConfig, ref: dict, ctx) -> dict:
    """One counted forward per kind: elements sent per rank per block, and the error against one device."""
    layers = sum(c for _, c in cfg.kinds.values())
    err, scale, by_kind, by_family = 0.0, 0.0, {}, {}
    for kind, (_, count) in cfg.kinds.items():
        b.comm.sent.clear()
        b.comm.counting = True
        out = b.forward(kind, cfg)
        b.comm.counting = False
        by_kind[kind] = float(sum(b.comm.sent.values()))
        for fam, n in b.comm.sent.items():
            by_family[fam] = by_family.get(fam, 0.0) + n * count / layers
        if cfg.fault is not None and cfg.fault == ("corrupt", ctx.rank) and b.plan.devices > 1:
            out["x"] = out["x"] + 1e-2   # the drill: this rank's rows are off, the check must catch it
        if cfg.check:
            form = b.forms[kind]
            mine, want = form.valid_share(out), form.reference_share(ref[kind])
            for key in mine:
                if mine[key].numel():
                    err = max(err, float((mine[key].float() - want[key].float()).abs().max()))
                    scale = max(scale, float(want[key].float().abs().max()))
    elems = sum(by_kind[k] * c for k, (_, c) in cfg.kinds.items()) / layers
    err, scale, elems_max = world_max([err, scale, elems], ctx)
    esize = ELEMENT_BYTES[cfg.dtype]
    row = {"name": b.plan.name, **b.plan.as_dict(), "elements_per_rank_per_block": elems_max,
           "bytes_per_rank_per_block": elems_max * esize, "element_bytes": esize,
           "bytes_by_kind": {k: v * esize for k, v in by_kind.items()},
           "bytes_by_collective": {k: v * esize for k, v in sorted(by_family.items())},
           "checked": cfg.check, "verdict": "", "block_ms": None, "step_s": None, "request_s": None,
           "requests_per_s": None, "dispersion_pct": None}
    if cfg.check:
        tol = TOLERANCE[cfg.dtype] * max(1.0, scale)
        row.update({"max_abs_err": err, "tolerance": tol, "bitwise": err == 0.0})
        if not err <= tol:
            row["verdict"] = "wrong"
    else:
        row.update({"max_abs_err": None, "tolerance": None, "bitwise": None})
    return row
