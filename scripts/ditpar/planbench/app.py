"""plan_bench's flow between argument parsing and printing: the request, the run, the document."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ditpar import limits
from ditpar.errors import CheckFailed, InputError
from ditpar.planbench import timing
from ditpar.planbench.report import MAX_PLANS, PlanDoc, check_input, read_plan_json
from ditpar.planbench.spec import ATTN2D_REASON, PIPEFUSION_REASON, parse_plan


@dataclass
class Request:
    model: object
    shape: object
    kinds: dict
    plans: list         # Plan objects to build
    skipped: list[dict]  # plans named but not built, with the reason


# flag -> (lowest, highest, why the bound): a value outside is a usage error before anything is built
FLAG_BOUNDS = {
    "warmup": (0, 100, "untimed forwards per plan and block kind"),
    "repeats": (timing.MIN_REPEATS, 100, "timed repeats per plan"),
    "iters": (1, 100, "forwards per timed sample"),
    "seed": (0, 2**63 - 1, "torch's generator takes a 64-bit seed"),
    "steps": (1, limits.MAX_STEPS, "denoising steps; leave it out for the preset's default"),
    "frames": (1, limits.MAX_FRAMES, "video frames; leave it out for the preset's default"),
    "heads": (1, limits.MAX_HEADS, "query heads"),
    "kv_heads": (1, limits.MAX_HEADS, "K/V heads"),
    "layers": (1, limits.MAX_LAYERS, "blocks"),
    "tokens": (1, limits.MAX_TOKENS, "tokens of one sample"),
}
MAX_TIMEOUT_S = 86400.0   # a collective that has not answered in a day is dead (datetime.timedelta overflows past)
MAX_RESOLUTION_CHARS = 64


def check_args(args) -> None:
    """Every number flag within its bound and --resolution well formed, before torch is imported."""
    for name, (lo, hi, why) in FLAG_BOUNDS.items():
        v = getattr(args, name)
        flag = "--" + name.replace("_", "-")
        if v is None:
            continue
        if name == "repeats" and v < lo:
            raise InputError(f"--repeats {v}: at least {lo} (references/fewstep-validation.md)")
        if not lo <= v <= hi:
            shown = str(v) if len(str(v)) <= 30 else f"{str(v)[:12]}...({len(str(v))} digits)"
            raise InputError(f"{flag} {shown}: expected {lo}..{hi} ({why})")
    if not 1.0 <= args.timeout <= MAX_TIMEOUT_S:
        raise InputError(f"--timeout {args.timeout:g}: expected 1..{MAX_TIMEOUT_S:g} seconds (how long a dead or "
                         "hung peer may stall a collective; torch's timeout is a timedelta)")
    for flag, text in (("--model", args.model), ("--model-file", args.model_file), ("--from-plan", args.from_plan)):
        if text is not None and not 0 < len(text) <= 4096:
            raise InputError(f"{flag}: {len(text)} characters; expected a name or path of 1..4096")
    if args.plans is not None and len(args.plans) > MAX_PLANS:
        raise InputError(f"--plans: {len(args.plans)} plans; at most {MAX_PLANS} per run")
    if args.resolution is not None:
        resolution(args.resolution)


def resolution(text: str) -> tuple[int, int, int | None]:
    """--resolution as (width, height, frames or None), each within plan.py's bounds."""
    from ditpar.plan.cost import parse_resolution

    if len(text) > MAX_RESOLUTION_CHARS:
        raise InputError(f"--resolution: {len(text)} characters; expected WxH or WxHxF (e.g. 1024x1024)")
    width, height, frames = parse_resolution(text)
    for name, v, hi in (("width", width, limits.MAX_PIXELS_SIDE), ("height", height, limits.MAX_PIXELS_SIDE),
                        ("frames", frames, limits.MAX_FRAMES)):
        if v is not None and not 1 <= v <= hi:
            raise InputError(f"--resolution {text!r}: {name} {v}: expected 1..{hi}")
    return width, height, frames


def parse_fault(text: str | None, world: int) -> tuple[str, int] | None:
    """--fault-drill KIND:RANK as (kind, rank); a drill needs a second rank to notice the failure."""
    if text is None:
        return None
    m = re.fullmatch(r"(die|hang|corrupt):([0-9]{1,7})", text)
    if not m:
        raise InputError(f"--fault-drill {text[:40]!r}: expected die:R, hang:R or corrupt:R (R a rank number)")
    kind, rank = m.group(1), int(m.group(2))
    if world < 2:
        raise InputError(f"--fault-drill {text!r}: a drill needs at least 2 ranks (the other ranks must notice "
                         "the failure); launch with torchrun --nproc-per-node 2 or more")
    if rank >= world:
        raise InputError(f"--fault-drill {text!r}: rank {rank} outside the world of {world} (ranks 0..{world - 1})")
    return kind, rank


def _model_and_shape(args, plan_doc: PlanDoc | None):
    from ditpar.plan.cost import make_shape
    from ditpar.plan.inputs import custom_model, presets

    name = args.model
    if args.model is None and args.model_file is None:
        if plan_doc is None:
            raise InputError("give --model NAME, --model-file FILE.toml or --from-plan plan.json")
        name = plan_doc.model
    if args.model is not None and args.model_file is not None:
        raise InputError("give one of --model NAME and --model-file FILE.toml")
    if args.model_file:
        check_input(args.model_file, "--model-file", streams=False)   # the TOML reader takes no FIFO or device
        model = custom_model.load(args.model_file)
    else:
        try:
            model = presets.resolve_model(name)
        except InputError as exc:
            if plan_doc is not None and args.model is None:
                raise InputError(f"--from-plan: model {name!r} is not a preset ({exc}); pass --model-file") from None
            raise
    model = custom_model.override(model, heads=args.heads, kv_heads=args.kv_heads, layers=args.layers)
    if plan_doc is not None and model.name != plan_doc.model:
        raise InputError(f"--from-plan: the short list was chosen for model {plan_doc.model!r}, this run builds "
                         f"{model.name!r}; give the --model or --model-file (and --heads, --kv-heads, --layers) "
                         "that plan.py was given")
    width = height = None
    frames, steps, cfg = args.frames, args.steps, False if args.no_cfg else None
    if args.resolution is not None:
        width, height, f = resolution(args.resolution)
        frames = frames or f
    elif plan_doc is not None:
        width, height = plan_doc.width, plan_doc.height
        frames = frames or plan_doc.frames
        steps = steps or plan_doc.steps
        cfg = cfg if cfg is not None else plan_doc.cfg
    shape = custom_model.with_tokens(make_shape(model, width, height, frames, steps, cfg=cfg), args.tokens)
    from_doc = plan_doc is not None and args.resolution is None and args.tokens is None
    if from_doc and plan_doc.tokens not in (None, shape.tokens):
        shape = custom_model.with_tokens(shape, plan_doc.tokens)
    return model, shape


def make_request(args, world: int) -> Request:
    """Model, shape, block kinds and the plans to build, all checked before any process group exists."""
    from ditpar.planbench.blocks import block_shapes

    if not 1 <= world <= limits.MAX_DEVICES:
        raise InputError(f"environment WORLD_SIZE={world}: expected 1..{limits.MAX_DEVICES} ranks")
    plan_doc = read_plan_json(args.from_plan) if args.from_plan else None
    if args.plans is None and plan_doc is None:
        raise InputError("give --plans PLAN... or --from-plan plan.json")
    names = list(args.plans or []) + ([] if plan_doc is None or args.plans else plan_doc.short_list)
    model, shape = _model_and_shape(args, plan_doc)
    kinds = block_shapes(model, shape)
    plans, skipped, seen = [], [], set()
    for n in names:
        p = parse_plan(n)
        if p.name in seen:
            raise InputError(f"--plans: {p.name!r} given twice")
        seen.add(p.name)
        if p.devices != world:
            raise InputError(f"plan {n!r} uses {p.devices} device(s); the launched world has {world} "
                             f"(torchrun --nproc-per-node {p.devices})")
        if p.pipefusion > 1 or p.attn2d > 1:
            why = PIPEFUSION_REASON if p.pipefusion > 1 else ATTN2D_REASON
            skipped.append({"name": p.name, **p.as_dict(), "verdict": "not-built", "reason": why,
                            "block_ms": None, "step_s": None, "request_s": None, "requests_per_s": None,
                            "dispersion_pct": None,
                            "bytes_per_rank_per_block": None, "max_abs_err": None})
            continue
        plans.append(p)
    from ditpar.planbench.run import validate

    validate(plans, kinds, not args.no_padding, args.repeats, world)
    return Request(model, shape, kinds, plans, skipped)


def check_resources(ctx, req: Request, args, dtype: str, check: bool) -> None:
    """Refuse, on every rank alike, a run whose estimated memory does not fit some rank's host or device,
    or (on the CPU) whose forwards between two progress checks would outlast --timeout."""
    from ditpar.planbench import memory

    est = memory.estimate(req.kinds, req.plans, dtype, ctx.device.type, check)
    problem = ""
    what = f"{req.model.name}, {req.shape.describe()}"
    where = f"rank {ctx.rank}: {what}" if ctx.world > 1 else what
    try:
        memory.refuse_if_too_big(est, memory.available_host_bytes(), memory.free_device_bytes(ctx.device),
                                 memory.local_ranks(ctx.world), where,
                                 "; or --no-check (its one-device reference is in the estimate)" if check else "")
        if ctx.device.type == "cpu":
            head_dim = max(s.head_dim for s, _ in req.kinds.values())
            share = memory.local_ranks(ctx.world)   # the ranks on this host share its cores
            rates = tuple(r / share for r in memory.cpu_rates(head_dim))
            memory.refuse_if_too_slow(req.kinds, max(args.warmup, args.iters), rates, ctx.timeout_s, where)
    except InputError as exc:
        problem = str(exc)
    if ctx.world > 1:
        from ditpar.planbench.run import failure, world_max

        try:
            short = world_max([1.0 if problem else 0.0], ctx)[0] > 0
        except Exception as exc:
            raise failure(ctx, "agreeing on the memory and time estimate", exc) from None
        if short and not problem:
            problem = (f"rank {ctx.rank}: another rank cannot run this request (about {memory.gib(est.total)} per "
                       "rank estimated from the block shapes); its own message says which memory or time is short")
    if problem:
        raise InputError(problem)
    from ditpar import cli

    if ctx.rank == 0 and cli.wants_progress(args):
        say_building(req, ctx, dtype, est)


def say_building(req: Request, ctx, dtype: str, est) -> None:
    """One stderr line before anything is built: the plans, the model and shape, and the memory estimate."""
    import sys

    from ditpar.planbench.memory import gib

    names = ", ".join(p.name for p in req.plans)
    where = "host and device share it" if est.same_memory else f"host {gib(est.host)}, device {gib(est.device)}"
    sys.stderr.write(f"plan_bench.py: building {len(req.plans)} plan(s) ({names}) of {req.model.name}, "
                     f"{req.shape.describe()}, {sum(c for _, c in req.kinds.values())} block(s) of "
                     f"{len(req.kinds)} kind(s) on {ctx.device} ({dtype}); estimated memory about "
                     f"{gib(est.total)} per rank ({where}; weights, inputs and one forward's activations from "
                     f"the block shapes)\n")
    sys.stderr.flush()


def measure(ctx, req: Request, args, fault) -> dict:
    """Validate, run and describe; the JSON body (schema added by the printer)."""
    from ditpar.planbench import run

    dtype = args.dtype if args.dtype != "auto" else ("float32" if ctx.device.type == "cpu" else "bfloat16")
    check = args.check if args.check is not None else True   # on by default, accelerators included
    if fault is not None and fault[0] == "corrupt" and not check:
        raise InputError(f"--fault-drill corrupt:{fault[1]} needs --check (the drill proves the check calls a "
                         "corrupted plan wrong)")
    if req.plans:
        check_resources(ctx, req, args, dtype, check)
    cfg = run.BenchConfig(req.plans, req.kinds, req.shape.steps, args.warmup, args.repeats, args.iters, check,
                          not args.no_padding, dtype, args.seed, fault, req.skipped)
    body = run.run(ctx, cfg) if req.plans else {"plans": list(req.skipped)}
    layers = sum(c for _, c in req.kinds.values())
    tol = run.TOLERANCE[dtype]
    return {
        "model": req.model.name, "backend": ctx.backend, "world": ctx.world, "device": str(ctx.device),
        "dtype": dtype, "shape": {"width": req.shape.width, "height": req.shape.height, "frames": req.shape.frames,
                                  "steps": req.shape.steps, "cfg": req.shape.cfg, "tokens": req.shape.tokens,
                                  "text_joint_tokens": req.shape.text_joint,
                                  "text_cross_tokens": req.shape.text_cross},
        "shape_text": req.shape.describe(), "steps": req.shape.steps, "layers": layers,
        "layers_by_kind": {k: c for k, (_, c) in req.kinds.items()},
        "timing": {"warmup": args.warmup, "repeats": args.repeats, "iters": args.iters, "order": "ABBA",
                   "clock": "wall clock between device syncs; slowest rank per sample"},
        "dispersion_gate_pct": timing.DISPERSION_PCT,
        "extrapolated": "step_s and request_s are extrapolated from one block of each kind x its layer count x steps",
        "check": check,
        "check_text": (f"every plan's block output vs one device on the same weights and inputs, max abs error "
                       f"<= {tol:g} x max(1, max |output|) ({dtype})" if check else
                       "off (--check to compare with one device)"),
        "plans": body["plans"],
        "phases_s": body.get("phases_s", {}),
    }


def exit_code(doc: dict) -> int:
    bad = [r["name"] for r in doc["plans"] if r.get("verdict") == "wrong"]
    if bad:
        raise CheckFailed(f"output differs from one device beyond the tolerance for {', '.join(bad)} "
                          "(not timed)" + "".join(f"; {r['name']} max abs error {r['max_abs_err']:.3g} > "
                                                   f"{r['tolerance']:.3g}" for r in doc["plans"] if r['name'] in bad))
    return 0


def frame(doc: dict):
    import pandas as pd

    from ditpar.planbench.report import CSV_COLUMNS

    return pd.DataFrame([{c: r.get(c) for c in CSV_COLUMNS} for r in doc["plans"]], columns=CSV_COLUMNS)
