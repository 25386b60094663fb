#!/usr/bin/env python3
"""Rank every legal parallel plan for a DiT on a machine, with the seven gates and a conclusion.

  plan.py --model M --hardware H --devices N [--resolution WxH] [--frames T] [--steps K] [--no-cfg]
          [--framework NAME ...] [--allow-approximate] [--model-file my.toml | --model-config DIR]
          [--heads --kv-heads --layers --tokens]
  plan.py score --candidates IN.csv --out OUT.csv     (adds predicted_latency_s, score_note, predicted_low_s, predicted_high_s)
  plan.py evaluate --tables DIR                       (ranking agreement with published tables)
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent))

from ditpar import cli, limits  # noqa: E402
from ditpar.errors import InputError  # noqa: E402

PROG = "plan.py"
EXAMPLE = 'python scripts/plan.py --model Wan2.1-T2V-14B --hardware "Atlas 800I A2" --devices 8'
CONFIG_EXAMPLE = "python scripts/plan.py --model-config tests/data/model_configs/FLUX.1-dev --hardware H100 --devices 8"
SCORE_EXAMPLE = "python scripts/plan.py score --candidates benchmarks/published/xdit_flux.csv --out /tmp/flux_scored.csv"
EVALUATE_EXAMPLE = "python scripts/plan.py evaluate --tables benchmarks/published"
SUBCOMMANDS = ("subcommands (each has its own --help):\n"
               "  score     add predicted_latency_s and score_note to a latency table\n"
               "  evaluate  ranking agreement of the cost model with published latency tables\n"
               "  --list models | hardware | frameworks   the presets and profiles, with their aliases\n")
LIST_EXAMPLE = "python scripts/plan.py --list hardware"


# Host cost per op by runtime: eager is the cost model's measured-and-fitted default (Tunables.launch_us);
# a captured graph replays without per-op host work; torch.compile without graphs fuses ops and launches
# them from generated code: no figure measured here, so the midpoint is used and said (--launch-us overrides).
RUNTIME_LAUNCH_US = {"eager": 25.0, "compile": 12.5, "graphs": 0.0}


def _tunable_args(p) -> None:
    g = p.add_argument_group("cost-model knobs (software stack, not model or machine)")
    g.add_argument("--runtime", choices=tuple(RUNTIME_LAUNCH_US), default=None,
                   help="how the pipeline runs: eager (default; 25 us of host time per op), graphs (CUDA graphs, "
                        "NPU graph mode, torch.compile mode='reduce-overhead': 0), compile (torch.compile "
                        "without graphs: 12.5 us, the midpoint, not a measurement)")
    g.add_argument("--launch-us", type=float, default=None,
                   help="override: host cost of one op in us (your own measurement; wins over --runtime)")
    g.add_argument("--call-us", type=float, default=None,
                   help="fixed cost of every collective call in us, on top of its link's latency (default: the "
                        "value fitted on the published tables, 10; your own measurement of a small collective)")
    g.add_argument("--overlap-efficiency", type=float, default=None,
                   help="share of ring K/V passing hidden under attention, 0..1 (default 0, as measured in xDiT)")
    g.add_argument("--masking-chunks", type=int, default=None, help="chunked Ulysses masking chunks (default 1 = off)")
    g.add_argument("--layout", default=None, help="rank order innermost first, default "
                   "tp,ulysses,ring,kv_allgather,attn2d,pipefusion,cfg,dp (an order without attn2d gets it after kv_allgather)")


# Bounds on the sizes a user gives: beyond them the enumeration or the model has no meaning (and
# --devices 1e9 would enumerate for hours).
MAX_DEVICES = limits.MAX_DEVICES  # 128 nodes of 8; ranking takes about 13 s there (a table's rows too)
MAX_STEPS = limits.MAX_STEPS
MAX_FRAMES = limits.MAX_FRAMES
MAX_PIXELS_SIDE = limits.MAX_PIXELS_SIDE
MAX_PATCHES = 1024
MAX_MASKING_CHUNKS = 1024
MAX_HEADS = limits.MAX_HEADS
MAX_LAYERS = limits.MAX_LAYERS
MAX_TOKENS = limits.MAX_TOKENS
# --ref-latency, --ref-step-s: one single-device request or step takes 1 us (below one kernel launch) .. 116 days (a
# figure in us or ms lands above it); plan/decide/measured.py bounds plan_bench.py's measured seconds alike
MIN_REF_S, MAX_REF_S = 1e-6, 1e7


def _in_range(flag: str, value: int | None, low: int, high: int, note: str = "") -> None:
    """A size flag outside [low, high] is a usage error that states the bound."""
    if value is not None and not low <= value <= high:
        raise InputError(f"{flag} {value}: expected {low}..{high}{note}")


def _check_request(args) -> tuple[int | None, int | None]:
    """Validate the request flags; return (width, height) from --resolution, or (None, None)."""
    _in_range("--devices", args.devices, 1, MAX_DEVICES)
    _in_range("--steps", args.steps, 1, MAX_STEPS, " (leave it out for the preset's default)")
    _in_range("--frames", args.frames, 1, MAX_FRAMES, " (leave it out for the preset's default)")
    _in_range("--patches", args.patches, 0, MAX_PATCHES, " (0 = the PipeFusion degree)")
    _in_range("--heads", args.heads, 1, MAX_HEADS)
    _in_range("--kv-heads", args.kv_heads, 1, MAX_HEADS)
    _in_range("--layers", args.layers, 1, MAX_LAYERS)
    _in_range("--tokens", args.tokens, 1, MAX_TOKENS)
    for flag, value in (("--ref-latency", args.ref_latency), ("--ref-step-s", args.ref_step_s)):
        if value is not None:
            limits.number(value, flag, MIN_REF_S, MAX_REF_S)
    if args.resolution is None:
        return None, None
    from ditpar.plan.cost import parse_resolution

    width, height, frames = parse_resolution(args.resolution)
    for name, side in (("width", width), ("height", height)):
        _in_range(f"--resolution {args.resolution!r}: {name}", side, 1, MAX_PIXELS_SIDE,
                  " (leave --resolution out for the preset's default)")
    _in_range(f"--resolution {args.resolution!r}: frames", frames, 1, MAX_FRAMES)
    if args.frames is None:
        args.frames = frames
    return width, height


def _framework_args(p) -> None:
    g = p.add_argument_group("frameworks and custom models")
    g.add_argument("--framework", action="append", default=None, metavar="NAME",
                   help="rank only plans this framework runs and print its launch recipe (repeatable; a "
                        "profile name from templates/frameworks or a .toml file; default: every profile)")
    g.add_argument("--allow-approximate", action="store_true",
                   help="let approximate plans (PipeFusion: stale activations) rank first")
    g.add_argument("--model-file", default=None, metavar="TOML",
                   help="in-house model description (templates/models/custom-example.toml); replaces --model")
    g.add_argument("--model-config", default=None, metavar="PATH",
                   help="a model without a preset: its diffusers folder (model_index.json, transformer/, vae/, "
                        "text_encoder*/ config.json files; no weights) or one transformer config.json; replaces "
                        "--model; --json's model_fields shows what was read")
    g.add_argument("--heads", type=int, default=None, help="override the model's query heads")
    g.add_argument("--kv-heads", type=int, default=None, help="override the model's K/V heads")
    g.add_argument("--layers", type=int, default=None, help="override the model's transformer blocks")
    g.add_argument("--tokens", type=int, default=None, help="override the image/video tokens of one sample (taken as one frame)")
    g.add_argument("--offload-text-encoder", action="store_true",
                   help="text encoder off the device during denoising (not counted in G2 memory)")
    g.add_argument("--vae-tiling", action="store_true", help="tiled VAE decode (smaller G2 decode peak)")


def _tunables(args):
    from ditpar.plan.cost import Tunables, parse_order

    kw = {}
    if getattr(args, "runtime", None) is not None:
        kw["launch_us"] = RUNTIME_LAUNCH_US[args.runtime]
    if args.launch_us is not None:
        from ditpar.plan.inputs import schema

        schema.check_value(args.launch_us, schema.TUNABLES.keys["launch_us"], "--launch-us", "launch_us")
        kw["launch_us"] = args.launch_us
    if getattr(args, "call_us", None) is not None:
        if not 0 <= args.call_us <= 1e5:
            raise InputError(f"--call-us {args.call_us:g}: expected 0..100000 us per collective call")
        kw["call_us"] = args.call_us
    if args.overlap_efficiency is not None:
        if not 0 <= args.overlap_efficiency <= 1:
            raise InputError("--overlap-efficiency: expected a share in [0, 1]")
        kw["overlap_efficiency"] = args.overlap_efficiency
    if args.masking_chunks is not None:
        _in_range("--masking-chunks", args.masking_chunks, 1, MAX_MASKING_CHUNKS)
        kw["masking_chunks"] = args.masking_chunks
    kw["order"] = parse_order(args.layout)
    return Tunables(**kw)


def plan_parser():
    p = cli.make_parser(PROG, __doc__.strip().splitlines()[0],
                        f"{EXAMPLE}\n  {CONFIG_EXAMPLE}\n  {SCORE_EXAMPLE}\n  {EVALUATE_EXAMPLE}\n\n{SUBCOMMANDS}")
    p.add_argument("--model", default=None, help="model preset name or alias (templates/models); "
                   "or --model-file, --model-config")
    p.add_argument("--hardware", required=True,
                   help="hardware preset name or alias (templates/hardware; plan.py --list hardware), or a machine "
                        "of your own as FILE.toml: templates/my-hardware.toml is the smallest one accepted (name, "
                        "peak TFLOPS, mfu, memory, one link figure, and where each came from)")
    p.add_argument("--interconnect", default=None, help="NVLink | PCIe | HCCS, ', 2 nodes' for two nodes")
    p.add_argument("--devices", type=int, required=True, help="devices for one request")
    p.add_argument("--resolution", default=None, help="WxH (default: the preset's)")
    p.add_argument("--frames", type=int, default=None, help="video frames (default: the preset's)")
    p.add_argument("--steps", type=int, default=None, help="denoising steps (default: the preset's)")
    p.add_argument("--no-cfg", action="store_true", help="request without classifier-free guidance")
    p.add_argument("--prompt-tokens", type=int, default=None, metavar="N",
                   help="text tokens of the prompt in the transformer (the conditional CFG branch), conditioning tokens "
                        "that only it carries included (default: the preset's figure, often the pipeline's maximum; "
                        "Qwen-Image encodes the prompt at its own length)")
    p.add_argument("--negative-tokens", type=int, default=None, metavar="N",
                   help="text tokens of the negative prompt (the unconditional CFG branch) where the pipeline encodes "
                        "it at its own length (Qwen-Image's ' ' is a few tokens): two calls per step then pay the "
                        "shorter one, CFG parallel waits for the longer branch (default: as long as the prompt)")
    p.add_argument("--sparse-attention", action="store_true",
                   help="the request runs a sparse or sliding-window attention kernel (radial, sparse-videogen, "
                        "sliding-tile, neighbourhood): ring attention cannot run it (G1 vetoes ring plans); priced as "
                        "dense attention")
    p.add_argument("--cfg-trunc-ratio", type=float, default=None, metavar="R",
                   help="share of the steps that run both CFG branches (diffusers' cfg_trunc_ratio, e.g. 0.25 in "
                        "Lumina-Image-2.0's example); the rest run the prompt's branch alone (default 1: every step)")
    p.add_argument("--ref-latency", type=float, default=None,
                   help="measured end-to-end seconds of this request on one device (or on --ref-plan): calibrates "
                        "compute (one scale: the machine's speed; not the spread between plans)")
    p.add_argument("--ref-plan", default=None, metavar="PLAN",
                   help="the plan --ref-latency was measured with, as plan.py prints it, at its own card count "
                        "(e.g. 'U4' run on 4 cards, 'cfg2 U4' on 8) when one device cannot hold the model "
                        "(default: one device)")
    p.add_argument("--patches", type=int, default=0, help="PipeFusion patches (default = PipeFusion degree)")
    p.add_argument("--warmup", type=int, default=1, help="PipeFusion synchronous warm-up steps (default 1)")
    p.add_argument("--no-dp", action="store_true", help="leave out plans with data parallel > 1")
    p.add_argument("--objective", choices=("latency", "throughput"), default="latency",
                   help="latency (default): the fastest plan for one request over all the cards; throughput: the "
                        "split of the box into replicas x plan that serves the most requests per second, with the "
                        "latency each request then sees (both are in --json's throughput object either way)")
    p.add_argument("--top", type=int, default=10, help="rows of the ranked table (default 10; --json has all)")
    p.add_argument("--all", action="store_true", help="also list infeasible plans with their veto")
    _framework_args(p)
    _tunable_args(p)
    _calibration_args(p)
    cli.add_output_args(p, csv=True, plot=True)
    return p


def _calibration_args(p) -> None:
    g = p.add_argument_group("calibrate to your box, and ask your own question")
    g.add_argument("--bench", nargs="+", default=None, metavar="BENCH.csv",
                   help="comm_bench.py CSV(s) from this box: measured busbw replaces the preset link figures it covers")
    g.add_argument("--topo", default=None, metavar="TOPO.txt",
                   help="'nvidia-smi topo -m' or 'npu-smi info -t topo' output: domains of this box")
    g.add_argument("--domains", default=None, metavar="N,N",
                   help="the node as domain sizes when no preset or matrix has its split: '3,3' = six cards, "
                        "ranks 0-2 and 3-5 on the fast link, the preset's inter_domain link between them")
    g.add_argument("--ref-step-s", type=float, default=None,
                   help="measured single-device seconds of one denoising step of this request: calibrates compute")
    g.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a preset figure for a what-if (e.g. links.intra_domain.alltoall_GBps.4=12, "
                        "mfu=0.4, overlap_efficiency=0.5); repeatable; every override is listed")
    g.add_argument("--compare", nargs="+", default=None, metavar="PLAN",
                   action=cli.distinct(lambda name: " ".join(name.lower().split())),
                   help='plans to compare as printed, e.g. "cfg2 U4" U8: G6, G7 and the sensitivity for them')
    g.add_argument("--measured", default=None, metavar="BENCH.json",
                   help="plan_bench.py --json of this request: measured plans marked and ordered by their times; "
                        "the others calibrated on them")
    g.add_argument("--evidence", nargs="+", default=None, metavar="FILE.csv",
                   help="your own measured table(s) in the published schema (benchmarks/published/*.csv): rows of "
                        "this model on this hardware class are printed above the prediction, ranked by measurement "
                        "(default: the shipped benchmarks/published tables)")
    g.add_argument("--emit-matrix", default=None, metavar="FILE.csv", type=cli.output_path,
                   help="write the few-step matrix for the short list and print the fewstep.py run command")


def score_parser():
    p = cli.make_parser(f"{PROG} score", "Add predicted_latency_s, score_note, predicted_low_s and predicted_high_s to a candidate table.",
                        SCORE_EXAMPLE)
    p.add_argument("--candidates", required=True, help="CSV in the calibration schema")
    p.add_argument("--out", required=True, type=cli.output_path, help="output CSV (input rows and columns + 4 columns)")
    _tunable_args(p)
    cli.add_output_args(p, csv=False)
    return p


def evaluate_parser():
    p = cli.make_parser(f"{PROG} evaluate", "Rank published configurations and compare with the measurements.",
                        EVALUATE_EXAMPLE)
    p.add_argument("--tables", required=True, nargs="+",
                   help="folder(s) of CSVs in the calibration schema; each CSV is one source")
    p.add_argument("--in-sample-only", action="store_true",
                   help="skip the held-out (leave-one-source-out) evaluation and print only in-sample figures")
    p.add_argument("--calibrate", action="store_true",
                   help="calibrate compute per table/model/machine/shape from its single-device row (--ref-latency)")
    p.add_argument("--scenarios", action="store_true", help="print one line per scenario")
    p.add_argument("--hold-out", choices=("all", "source", "hardware", "framework"), default="all",
                   help="what one held-out fold leaves out: a source table, a hardware class, a framework, or all "
                        "three in turn (default)")
    p.add_argument("--host-fit", choices=("sequential", "joint"), default="sequential",
                   help="how each fold chooses the host cost per op, ring overlap and per-call cost from the other "
                        "tables: sequential (default: launch and overlap by pairwise order, then the call cost by the "
                        "median speedup error) or joint (all three by the median speedup error, pairwise order on ties)")
    p.add_argument("--coverage", action="store_true",
                   help="also fit the speedup range by stratum on the unseen rounds' rows, each round held out in "
                        "turn, and print its held-out coverage per stratum and level (the figures plan.py states)")
    p.add_argument("--calibrated-check", action="store_true",
                   help="also judge the calibrated point prediction on the unseen rounds (each round held out): compute "
                        "calibrated on one measured row of a run (its one-device row, or each multi-card row in turn), "
                        "the other rows predicted, beside the uncalibrated prediction of the same rows")
    _tunable_args(p)
    cli.add_output_args(p, csv=True)
    return p


def list_parser():
    p = cli.make_parser(f"{PROG} --list", "The model presets, hardware presets or framework profiles plan.py knows, "
                        "each with its aliases (the names --model, --hardware and --framework take).", LIST_EXAMPLE)
    p.add_argument("--list", required=True, choices=("models", "hardware", "frameworks"))
    cli.add_output_args(p, csv=True)
    return p


def run_list(args) -> int:
    from ditpar.plan.inputs import frameworks, presets

    rows = frameworks.catalogue() if args.list == "frameworks" else presets.catalogue(args.list)
    if args.csv:
        import pandas as pd

        cli.write_csv(args.csv, pd.DataFrame(rows))
    if args.json:
        cli.print_json("plan-list", {"kind": args.list, "presets": rows})
    else:
        print(cli.format_table(rows, digits=2))
    return 0


def main() -> None:
    argv = sys.argv[1:]
    if any(a == "--list" or a.startswith("--list=") for a in argv) and not (argv and argv[0] in ("score", "evaluate")):
        cli.run(PROG, lambda: run_list(list_parser().parse_args(argv)))
    elif argv and argv[0] == "score":
        cli.run(PROG, lambda: run_score(score_parser().parse_args(argv[1:])))
    elif argv and argv[0] == "evaluate":
        cli.run(PROG, lambda: run_evaluate(evaluate_parser().parse_args(argv[1:])))
    else:
        cli.run(PROG, lambda: run_plan(plan_parser().parse_args(argv)))


def _given_figures(args) -> str:
    """The figures this run was given (what a non-finite time comes from), as the user typed them."""
    given = [f"--set {item}" for item in args.set or []]
    given += [f"{flag} {v:g}" for flag, v in (("--ref-latency", args.ref_latency), ("--ref-step-s", args.ref_step_s),
                                             ("--launch-us", args.launch_us)) if v is not None]
    given += [f"{flag} {v}" for flag, v in (("--hardware", args.hardware), ("--model-file", args.model_file))
              if v and (flag == "--model-file" or v.endswith(".toml"))]
    if args.ref_plan:
        given.append(f"--ref-plan {args.ref_plan!r}")
    if args.measured:
        given.append(f"--measured {args.measured}")
    return ", ".join(given) or f"the presets of --model {args.model} and --hardware {args.hardware}"


def not_finite(args, what: str) -> InputError:
    """A computed time that is not a finite number: an input error naming the figures given, never inf in a table."""
    return InputError(f"{what} is not a finite number of seconds: the figures given ({_given_figures(args)}) are each "
                      "inside their range but together beyond what the cost model can price; check their units")


def check_finite(args, results, meas: dict | None = None) -> None:
    """Every feasible plan's predicted (and calibrated) time is a finite number, else one InputError."""
    import math

    for r in results:
        if r.feasible and not (math.isfinite(r.latency_s) and math.isfinite(r.breakdown.step_s)):
            raise not_finite(args, f"the predicted latency of {r.plan.name} ({r.latency_s})")
    for o in (meas or {}).get("order", []):
        if not math.isfinite(o["calibrated_latency_s"]):
            raise not_finite(args, f"the calibrated latency of {o['name']} ({o['calibrated_latency_s']})")


def run_plan(args) -> int:
    """The ranking; an overflow or a division by zero inside the cost model is an input error naming the figures."""
    from ditpar.plan.cost import memo

    try:
        with memo.one_answer():
            return _run_plan(args)
    except (OverflowError, ZeroDivisionError) as exc:
        raise not_finite(args, f"a computed time ({type(exc).__name__}: {exc})") from None


def _run_plan(args) -> int:
    from ditpar.plan.cost import make_shape
    from ditpar.plan.decide import report
    from ditpar.plan.decide.rank import calibrate, conclusion, rank_plans
    from ditpar.plan.inputs import custom_model, frameworks, model_config, presets

    width, height = _check_request(args)
    if sum(x is not None for x in (args.model, args.model_file, args.model_config)) != 1:
        raise InputError("give exactly one of --model NAME, --model-file FILE.toml and --model-config PATH")
    read_notes: list[str] = []   # what --model-config guessed, said once the answer stands
    if args.model_config:
        model = model_config.load(args.model_config, heads=args.heads, kv_heads=args.kv_heads, layers=args.layers,
                                  tokens=args.tokens, warn=lambda line: read_notes.append(f"plan.py: warning: {line}\n"))
    else:
        model = custom_model.load(args.model_file) if args.model_file else presets.resolve_model(args.model)
    model = custom_model.override(model, heads=args.heads, kv_heads=args.kv_heads, layers=args.layers)
    fws = frameworks.resolve_frameworks(args.framework)
    hw = presets.resolve_hardware(args.hardware, args.interconnect, args.devices)
    # said once the answer stands (an input error stays the run's one stderr line)
    notes = read_notes + [f"plan.py: note: --hardware {args.hardware!r} resolved to {hw.name}; {other} also fits that name "
             f"(as {alias!r}): name the box to choose it\n" for other, alias in presets.other_matches(args.hardware, hw.name)]
    if model.sources.get("estimated"):
        notes.append(f"plan.py: note: {args.model_file} leaves out {model.sources['estimated']} (estimated; write the "
                     "model's own figures into the file for a closer answer)\n")
    if args.devices < hw.devices_per_node and hw.devices_per_node > hw.domain_size and not (args.topo or args.domains):
        notes.append(f"plan.py: note: {args.devices} of the preset's {hw.devices_per_node} devices per node, in "
                     f"domains of {hw.domain_size}: ranks fill the domains in order; a box whose {args.devices} cards "
                     f"split otherwise: --domains (e.g. {','.join([str(args.devices // 2)] * 2)}) or --topo\n")
    shape = make_shape(model, width, height, args.frames, args.steps, cfg=False if args.no_cfg else None,
                       negative_tokens=args.negative_tokens, cfg_trunc_ratio=args.cfg_trunc_ratio,
                       sparse_attention=args.sparse_attention, prompt_tokens=args.prompt_tokens)
    shape = custom_model.with_tokens(shape, args.tokens)
    _in_range("--warmup", args.warmup, 0, shape.steps, f" (the request has {shape.steps} steps)")
    if args.objective == "throughput" and args.no_dp:
        raise InputError("--objective throughput splits the box into replicas: drop --no-dp")
    tun = _tunables(args)
    tun = dataclasses.replace(tun, offload_text_encoder=args.offload_text_encoder, vae_tiling=args.vae_tiling)
    from ditpar.plan.decide import calibrated

    box = calibrated.calibrate_box(args, model, hw, shape, tun)
    hw, tun = box.hw, box.tun
    from ditpar.plan.cost.end_to_end import dit_seconds, serial_stages

    stages = serial_stages(model, hw, shape)
    if args.ref_plan is not None and args.ref_latency is None:
        raise InputError("--ref-plan names the plan of a measurement: give its seconds with --ref-latency")
    if args.ref_latency is not None:   # an end-to-end measurement: the serial stages come off before calibrating
        from ditpar.plan.decide.calibrated import reference

        ref_plan, ref_hw = reference(args.ref_plan, hw, model)
        tun = calibrate(model, ref_hw, shape, dit_seconds(args.ref_latency, stages), tun, ref_plan)
    if args.top < 1:
        raise InputError("--top: expected >= 1")
    results = rank_plans(model, hw, shape, args.devices, tun, with_dp=not args.no_dp,
                         patches=args.patches, warmup=args.warmup, frameworks=fws,
                         allow_approximate=args.allow_approximate)
    check_finite(args, results)
    from ditpar.plan.decide.rank import half_devices, half_devices_line

    lead = next((r for r in results if r.feasible), None)
    half = half_devices(model, hw, shape, args.devices, tun, lead, with_dp=not args.no_dp, patches=args.patches,
                        warmup=args.warmup, frameworks=fws, allow_approximate=args.allow_approximate)
    text = conclusion(results, model, hw, shape)
    from ditpar.plan.decide import scaling, throughput

    serving = throughput.record(throughput.splits(results, stages, hw, args.devices, args.allow_approximate, model),
                                args.objective)
    work = scaling.record(model, hw, shape, lead, tun)
    from ditpar.plan.decide import outside_loop

    outside = outside_loop.record(model, hw, shape, serving, lead, stages, tun)
    if args.objective == "throughput" and serving["throughput_best"] is not None:
        text = throughput.conclusion_sentence(serving) + " For one request: " + text
    from ditpar.fewstep.matrix import WRITE_COLUMNS, matrix_csv

    def write_matrix(path, records, extra_columns=()) -> None:  # held with the run's other outputs (all or none)
        cli.write_output(path, matrix_csv(records, (*WRITE_COLUMNS, *extra_columns)))

    extra = calibrated.after_ranking(args, box, results, model, hw, shape, tun, write_matrix)
    text = text + " " + extra["short_list_text"] if extra["short_list_text"] else text
    from ditpar.plan.decide import measured

    measure = [r for r in extra["short_list"] if r.plan.name in extra["measure"]]   # what the conclusion asks to run
    bench_cmd = measured.bench_command(args, measure, args.devices)
    text = text + " " + bench_cmd if bench_cmd else text
    meas = measured.apply(args.measured, results, model, shape) if args.measured else None
    check_finite(args, results, meas)
    if meas:
        from ditpar.plan.cost import Plan, predict

        text += measured.one_device(meas, results, predict(model, hw, shape, Plan(), tun), shape.steps)
    from ditpar.plan.decide import evidence, provenance

    ev = evidence.find(args.evidence, model, hw, args.devices, results)
    given = provenance.inputs(args, model, hw, box)
    payload = report.payload(results, model, hw, shape, tun, text, fws, args.allow_approximate)
    payload["evidence"], payload["inputs"] = ev, given
    calibrated.extend_payload(payload, results, extra, box)
    given_machine = any(r["provenance"] == "given" for r in given if r["figure"] in ("mfu", "peak TFLOPS (bf16)"))
    payload["serial_stages"] = report.serial_record(stages, results, model, hw, given_machine)
    from ditpar.plan.decide import evidence_speedups

    single = report.single_device_s(results)
    evidence_speedups.judge(ev, payload["serial_stages"]["end_to_end_speedup"], shape,
                            None if single is None or stages is None else single + stages.total_s)
    payload["model_fields"] = model_config.fields(model)
    payload["half_devices"] = half
    payload["objective"] = args.objective
    payload["throughput"] = serving
    payload["work_per_rank"] = work
    payload["outside_loop"] = outside
    from ditpar.plan.decide import heads

    payload["head_degrees"] = {**heads.degrees(model, results), "line": heads.line(model, results) or None}
    from ditpar.plan.decide import experts

    payload["expert_parallel"] = experts.record(model)
    if meas:
        measured.extend_payload(payload, results, meas)
    from ditpar.plan.decide import run_recipe

    run_text = run_recipe.attach(payload, results, measure, model, shape, fws, hw)   # issue 28
    from ditpar.plan.decide import comm_price

    run_text = comm_price.attach(payload, results, model, hw, shape, tun, fws) + run_text
    from ditpar.plan.decide import measure_it

    payload["measure_it"] = mi = measure_it.build(extra["short_list"], hw, tun, bench_cmd)
    if args.csv:
        cli.write_csv(args.csv, report.frame(results, model))
    if args.plot:
        report.plot(results, args.plot, title=f"{model.name} on {hw.name}, {args.devices} devices")
    if args.json:
        cli.print_json("plan", payload)
    else:
        lines = "\n".join(x for x in (half_devices_line(half, lead), payload["head_degrees"]["line"],
                                           experts.line(model)) if x)
        sys.stdout.write(evidence.render(ev, model, hw, args.devices) + calibrated.render(report.render(results, model, hw, shape, tun, text, args.top, args.all, stages,
                                                         lines, given_machine,
                                                         [scaling.line(work, shape), outside_loop.line(outside),
                                                          *throughput.lines(serving, args.objective)]),
                                           results, extra, box, args.top) + provenance.render(given)
                         + (measured.render(meas, args.top) if meas else "")
                     + run_text + measure_it.render(mi))
    sys.stderr.write("".join(notes))
    return 0


def run_score(args) -> int:
    from ditpar.plan.judge import evaluate

    frame = evaluate.read_table(args.candidates)
    out = evaluate.score_table(frame, _tunables(args))
    evaluate.require_scored(out, f"--candidates {args.candidates}")
    cli.write_csv(args.out, out)
    scored = int((out["predicted_latency_s"] != "").sum())
    summary = {"rows": len(out), "scored": scored, "out": args.out,
               "not_scored": out.loc[out["predicted_latency_s"] == "", "score_note"].value_counts().to_dict()}
    if args.json:
        cli.print_json("plan-score", summary)
    else:
        sys.stdout.write(f"{args.out}: {scored} of {len(out)} rows scored\n")
        for note, n in summary["not_scored"].items():
            sys.stdout.write(f"  {n:3d} x {note}\n")
    return 0


def run_evaluate(args) -> int:
    from ditpar.plan.judge import evaluate

    frames: dict = {}
    for folder in args.tables:
        for name, frame in evaluate.load_tables(folder).items():
            if name in frames:
                raise InputError(f"--tables: {name} appears in two folders; each source must be one table")
            frames[name] = frame
    res = evaluate.evaluate_tables(frames, _tunables(args), calibrate=args.calibrate)
    held = None
    if not args.in_sample_only:
        from ditpar.plan.judge import heldout

        held = [heldout.evaluate_heldout(frames, _tunables(args), calibrate=args.calibrate,
                                         fixed_launch=args.launch_us is not None or args.runtime is not None,
                                         fixed_overlap=args.overlap_efficiency is not None, by=by,
                                         fixed_call=args.call_us is not None, rule=args.host_fit)
                for by in (heldout.GROUPINGS if args.hold_out == "all" else (args.hold_out,))]
    cover = None
    if args.coverage:
        from ditpar.plan.judge import conformal

        cover = conformal.report(frames, _tunables(args))
    calcheck = None
    if args.calibrated_check:
        from ditpar.plan.judge import calibrated_check

        calcheck = calibrated_check.check(frames, _tunables(args))
    for line in res["warnings"]:
        sys.stderr.write(f"{PROG}: warning: {line}\n")
    if args.csv:
        cli.write_csv(args.csv, evaluate.scenario_frame(res))
    if args.json:
        doc = evaluate.evaluation_payload(res)
        if held is not None:
            doc["heldout"] = heldout.payload(held[0])
            doc["heldout_by"] = {h["by"]: heldout.payload(h) for h in held}
        if cover is not None:
            doc["range_coverage"] = cover
        if calcheck is not None:
            doc["calibrated_check"] = calcheck
        cli.print_json("plan-evaluate", doc)
    else:
        if held is not None:
            sys.stdout.write("\n".join(heldout.render(h) for h in held) + "\nin-sample figures (constants as shipped; they were chosen "
                             "looking at some of these tables):\n")
        sys.stdout.write(evaluate.render(res, args.scenarios))
        if cover is not None:
            from ditpar.plan.judge import conformal

            sys.stdout.write("\n" + conformal.render(cover))
        if calcheck is not None:
            from ditpar.plan.decide.uncertainty import RANGE_Q

            sys.stdout.write("\n" + calibrated_check.render(calcheck, {k: v[0] for k, v in RANGE_Q.items()}))
    return 0


if __name__ == "__main__":
    main()
