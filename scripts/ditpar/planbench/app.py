"""plan_bench's flow between argument parsing and printing: the request, the run, the document."""

from __future__ import annotations

from dataclasses import dataclass

from ditpar.errors import CheckFailed, InputError
from ditpar.planbench import timing
from ditpar.planbench.spec import PIPEFUSION_REASON, parse_plan


@dataclass
class Request:
    model: object
    shape: object
    kinds: dict
    plans: list         # Plan objects to build
    skipped: list[dict]  # plans named but not built, with the reason


def _model_and_shape(args, plan_doc: dict | None):
    from ditpar.plan.cost import make_shape, parse_resolution
    from ditpar.plan.inputs import custom_model, presets

    name = args.model
    if args.model is None and args.model_file is None:
        if plan_doc is None:
            raise InputError("give --model NAME, --model-file FILE.toml or --from-plan plan.json")
        name = plan_doc["model"]
    if args.model is not None and args.model_file is not None:
        raise InputError("give one of --model NAME and --model-file FILE.toml")
    if args.model_file:
        model = custom_model.load(args.model_file)
    else:
        try:
            model = presets.resolve_model(name)
        except InputError as exc:
            if plan_doc is not None and args.model is None:
                raise InputError(f"--from-plan: model {name!r} is not a preset ({exc}); pass --model-file") from None
            raise
    model = custom_model.override(model, heads=args.heads, kv_heads=args.kv_heads, layers=args.layers)
    width = height = None
    frames, steps, cfg = args.frames, args.steps, False if args.no_cfg else None
    if args.resolution is not None:
        width, height, f = parse_resolution(args.resolution)
        frames = frames or f
    elif plan_doc is not None:
        sh = plan_doc["shape"]
        try:
            width, height = int(sh["width"]), int(sh["height"])
            frames = frames or int(sh["frames"])
            steps = steps or int(sh["steps"])
            cfg = cfg if cfg is not None else bool(sh["cfg"])
        except (KeyError, TypeError, ValueError):
            raise InputError("--from-plan: key 'shape' needs width, height, frames, steps and cfg") from None
    shape = custom_model.with_tokens(make_shape(model, width, height, frames, steps, cfg=cfg), args.tokens)
    if plan_doc is not None and args.tokens is None and int(plan_doc["shape"].get("tokens", shape.tokens)) != shape.tokens:
        shape = custom_model.with_tokens(shape, int(plan_doc["shape"]["tokens"]))
    return model, shape


def make_request(args, world: int) -> Request:
    """Model, shape, block kinds and the plans to build, all checked before any process group exists."""
    from ditpar.planbench.blocks import block_shapes
    from ditpar.planbench.report import read_plan_json

    plan_doc = read_plan_json(args.from_plan) if args.from_plan else None
    if args.plans is None and plan_doc is None:
        raise InputError("give --plans PLAN... or --from-plan plan.json")
    names = list(args.plans or []) + ([] if plan_doc is None or args.plans else plan_doc["short_list"])
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
        if p.pipefusion > 1:
            skipped.append({"name": p.name, **p.as_dict(), "verdict": "not-built", "reason": PIPEFUSION_REASON,
                            "block_ms": None, "step_s": None, "request_s": None, "dispersion_pct": None,
                            "bytes_per_rank_per_block": None, "max_abs_err": None})
            continue
        plans.append(p)
    from ditpar.planbench.run import validate

    validate(plans, kinds, not args.no_padding, args.repeats, world)
    return Request(model, shape, kinds, plans, skipped)


def measure(ctx, req: Request, args, fault) -> dict:
    """Validate, run and describe; the JSON body (schema added by the printer)."""
    from ditpar.planbench import run

    dtype = args.dtype if args.dtype != "auto" else ("float32" if ctx.device.type == "cpu" else "bfloat16")
    check = args.check if args.check is not None else ctx.backend == "gloo"
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
