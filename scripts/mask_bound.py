#!/usr/bin/env python3
"""Communication masking: exact ceiling (calc), pipeline simulation (simulate), measured masking
from profiles (profile), and the effectiveness checklist (verify). See references/comm-masking.md.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ditpar import cli  # noqa: E402
from ditpar.errors import InputError  # noqa: E402
from ditpar.masking import bound, simulator  # noqa: E402

PROG = "mask_bound.py"
MAX_SIM_CHUNKS = 4096  # the event simulation grows with the chunk count
MAX_PLOT_CHUNKS = 256  # a Gantt chart beyond this is unreadable and slow to draw
TOOL = "mask_bound"

EXAMPLE = """python scripts/mask_bound.py calc --comm-us 700 --compute-us 538 --chunks 7 --reverse-share 0.25
  python scripts/mask_bound.py simulate --comm-us 700 --compute-us 538 --chunks 7 --reverse-share 0.25 --plot /tmp/gantt.png
  python scripts/mask_bound.py profile ON_DIR --off OFF_DIR --family alltoall --consumer 'FlashAttention' --layers 50
  python scripts/mask_bound.py verify --off OFF_DIR --on ON_DIR --family alltoall --chunks 7 --outputs off.bin on.bin"""


def _layer_args(p, shares: bool = False) -> None:
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--comm-us", type=float,
                   help="C: per-layer time of the masked collective family (us), as measured at --chunks")
    if shares:
        g.add_argument("--comm-pct", type=float, metavar="P",
                       help="C as the share of the step (percent) the family's communication takes, as "
                            "collectives.py or a profiler prints it; use with --compute-pct")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--compute-us", type=float,
                   help="F: per-layer compute that can run beside it, e.g. attention kernels (us)")
    if shares:
        g.add_argument("--compute-pct", type=float, metavar="Q",
                       help="F as the share of the step (percent) of the compute that can run beside it")
    p.add_argument("--chunks", type=int, required=True, help="n: number of chunks (>= 1)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--drain-us", type=float, default=None,
                   help="D: reverse (output) collective of ONE chunk, part of c = C/n (default 0: all of a "
                        "chunk's communication precedes its compute, e.g. an all-gather of K/V)")
    g.add_argument("--reverse-share", type=float, default=None,
                   help="D as a share of c (Ulysses q,k,v forward + o reverse of equal size: 0.25)")


TRAFFIC_DEFAULT = ("traffic model: all of a chunk's communication precedes its compute (drain 0, e.g. an "
                   "all-gather of K/V); for Ulysses (q, k, v forward and o reverse all-to-all of equal "
                   "size) pass --reverse-share 0.25")


def _unit(args) -> str:
    """'pct' when C and F came as shares of the step, else 'us'; mixing the two is a usage error."""
    comm_pct, compute_pct = getattr(args, "comm_pct", None), getattr(args, "compute_pct", None)
    if (comm_pct is None) != (compute_pct is None):
        raise InputError("--comm-pct and --compute-pct: give both (shares of the step) or neither "
                         "(--comm-us and --compute-us per layer)")
    return "us" if comm_pct is None else "pct"


def _layer(args) -> bound.Layer:
    if _unit(args) == "pct":
        if args.drain_us is not None:
            raise InputError("--drain-us: with --comm-pct give the drain as --reverse-share")
        return bound.make_layer(args.comm_pct, args.compute_pct, args.chunks, None, args.reverse_share)
    return bound.make_layer(args.comm_us, args.compute_us, args.chunks, args.drain_us, args.reverse_share)


def build_parser():
    parser = cli.make_parser(PROG, __doc__.strip(), EXAMPLE)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=type(parser))

    p = sub.add_parser("calc", help="closed-form masking ceiling for one layer",
                       description="Exact masking ceiling of a chunked pipeline, regime, c/f, what would change it.",
                       epilog="example:\n  python scripts/mask_bound.py calc --comm-us 700 --compute-us 538 "
                              "--chunks 7 --reverse-share 0.25 --target 0.8 --overhead-us 10",
                       formatter_class=parser.formatter_class)
    _layer_args(p, shares=True)
    p.add_argument("--layers", type=int, help="with --comm-us: layers per step, for the step-level gain")
    p.add_argument("--step-us", type=float, help="with --comm-us and --layers: one step (us), for the "
                   "step-level gain")
    p.add_argument("--target", type=float, help="masking rate to reach: report the F increase or C reduction needed")
    p.add_argument("--overhead-us", type=float,
                   help="fixed cost per chunk o (us): search the best n with c(n) = C0/n + o, C0 = C - M*o "
                        "(M = --measured-at-chunks, default --chunks)")
    p.add_argument("--measured-at-chunks", type=int, metavar="M",
                   help="with --overhead-us: the chunk count at which --comm-us was measured (default: --chunks); "
                        "C0 = C - M*o")
    p.add_argument("--max-chunks", type=int, default=64, help="largest n tried by the search (default 64)")
    p.add_argument("--heads", type=cli.positive_int,
                   help="with --overhead-us: local heads per rank, the search tries only its divisors")
    p.add_argument("--measured", type=float, help="measured masking rate: report the achieved fraction of the ceiling")
    cli.add_output_args(p, csv=True)

    p = sub.add_parser("simulate", help="discrete-event simulation of the chunked pipeline, Gantt chart",
                       description="Simulate one compute and one communication stream for each issue order.",
                       epilog="example:\n  python scripts/mask_bound.py simulate --comm-us 700 --compute-us 538 "
                              "--chunks 7 --reverse-share 0.25 --plot /tmp/gantt.png",
                       formatter_class=parser.formatter_class)
    _layer_args(p)
    p.add_argument("--order", default="forward-first,pipelined",
                   help=f"comma-separated issue orders, or 'all' ({', '.join(simulator.ORDERS)})")
    p.add_argument("--transform-us", type=float, default=0.0,
                   help="per-chunk output transform on the compute stream that the reverse waits for (us)")
    p.add_argument("--transforms", choices=simulator.TRANSFORMS, default="per-chunk",
                   help="per-chunk: T_g right after A_g; batched: all T_g after the last attention chunk")
    p.add_argument("--post-us", type=float, default=0.0,
                   help="per-chunk compute that needs the chunk's reverse (copy-back, partial output projection)")
    cli.add_output_args(p, csv=True, plot=True)

    from ditpar.masking import commands

    commands.add_profile_arguments(sub, parser)
    commands.add_verify_arguments(sub, parser)
    return parser


def _calc(args) -> int:
    layer = _layer(args)
    cands = None
    cli.require_partners(args, {"--measured-at-chunks": "--overhead-us", "--heads": "--overhead-us"})
    if args.overhead_us is not None:
        if args.heads is not None:
            cands = bound.divisors(bound.check_chunks("--heads", args.heads))
        else:
            cands = list(range(1, bound.check_chunks("--max-chunks", args.max_chunks) + 1))
    unit = _unit(args)
    if unit == "pct" and args.overhead_us is not None:
        raise InputError("--overhead-us: needs per-layer times (--comm-us, --compute-us), not shares of the step")
    if (args.layers is None) != (args.step_us is None) or (unit == "pct" and args.layers is not None):
        raise InputError("--layers and --step-us: give both, with --comm-us/--compute-us "
                         "(with --comm-pct the shares are already of the step)")
    res = bound.analyse(layer, target=args.target, overhead_us=args.overhead_us,
                          candidates=cands, measured=args.measured,
                          measured_at_chunks=args.measured_at_chunks)
    res["unit"] = unit
    res["traffic_model"] = ("default: drain 0" if args.drain_us is None and args.reverse_share is None
                            else "given")
    res["step"] = bound.step_gain(layer, unit, args.layers, args.step_us)
    if args.csv:
        import pandas as pd

        rows = res["best"]["table"] if res["best"] else [
            {k: res[k] for k in ("comm_us", "compute_us", "chunks", "drain_us", "c_over_f", "regime",
                                 "ideal", "ceiling", "exposed_min_us", "binding", "large_n_limit")}]
        cli.write_csv(args.csv, pd.DataFrame(rows))
    if args.json:
        cli.print_json(TOOL, {"command": "calc", **res})
        return 0
    print(format_calc(res))
    if res["traffic_model"].startswith("default"):
        print(TRAFFIC_DEFAULT, file=sys.stderr)
    return 0


def format_step(res: dict) -> list[str]:
    """The step-level line: what reaching the ceiling saves of the whole step."""
    s = res["step"]
    if s["unit"] == "pct":
        return [f"step: the family's communication goes from {s['exposed_before_pct']:.4g} % of the step "
                f"(taken as exposed) to at least {s['exposed_after_pct']:.4g} %: the step shrinks by at "
                f"most {s['step_saving_pct']:.4g} % (x{s['speedup']:.3f})"]
    if s["step_saving_pct"] is None:
        return []  # per layer only: the ceiling lines already say it
    return [f"step: at most {s['saving_per_layer_us']:.6g} us per layer x {s['layers']} layers = "
            f"{s['step_saving_us']:.6g} us of the {s['step_us']:.6g} us step ({s['step_saving_pct']:.4g} %, "
            f"x{s['speedup']:.3f})"]


def _regime_reason(res: dict) -> str:
    """Why the ceiling is or is not the ideal: c/f against the largest c/f that keeps it."""
    limit = res["ideal_up_to_c_over_f"]
    if limit == float("inf"):
        return "(one chunk: nothing overlaps; ceiling = ideal 0)"
    if res["regime"] == "compute-bound":
        return f"(c/f <= {limit:.4f} = min(n/(n-1), 1/max(r, 1-r)): ceiling = ideal 1 - 1/n)"
    return (f"(c/f > {limit:.4f} = min(n/(n-1), 1/max(r, 1-r)): ideal 1 - 1/n is out of reach; "
            f"more chunks tend to min(1, F/C), not to 1)")


def format_calc(res: dict) -> str:
    """Readable report of `calc`."""
    u = "%" if res.get("unit") == "pct" else "us"
    where = "per step (shares)" if u == "%" else "per layer"
    lines = [
        f"{where}: C = {res['comm_us']:.6g} {u}, F = {res['compute_us']:.6g} {u}, n = {res['chunks']}, "
        f"drain D = {res['drain_us']:.6g} {u}",
        f"per chunk: c = {res['c_us']:.6g} {u} (forward a = {res['forward_us']:.6g}, reverse b = "
        f"{res['reverse_us']:.6g}), f = {res['f_us']:.6g} {u}",
        f"c/f = {res['c_over_f']:.4f} -> {res['regime']} " + _regime_reason(res),
        "",
        f"ideal 1-1/n     {res['ideal']:.4f}",
        f"ceiling         {res['ceiling']:.4f}   (least exposed {res['exposed_min_us']:.6g} {u} of "
        f"{res['comm_us']:.6g} {u}; decided by {res['binding']})",
        f"large-n limit   {res['large_n_limit']:.4f}   (min(1, F/C), no per-chunk overhead)",
    ]
    if res.get("step"):
        lines += format_step(res)
    if res["measured"] is not None:
        frac = res["achieved_fraction"]
        lines.append(f"measured        {res['measured']:.4f}   (achieved "
                     + ("-" if frac is None else f"{frac:.3f}") + " of the ceiling)")
        if frac is not None and frac > 1.05:
            lines.append("  warning: above the ceiling -- C probably mixes in other families or communicators, "
                         "or side-stream compute is counted as communication (check the drain and C's source)")
    lines += ["", f"lower bounds on exposed communication ({u} {where.split(' (')[0]}):"]
    rows = [{"bound": k, "us": v, "meaning": bound.TERM_MEANING[k]} for k, v in res["terms_us"].items()]
    lines.append(cli.format_table(rows, ["bound", "us", "meaning"], digits=4))
    t = res["target"]
    if t:
        lines.append("")
        if not t["reachable_at_this_n"]:
            lines.append(f"target {t['masking']:.4f}: out of reach with {res['chunks']} chunks "
                         f"(1 - 1/n < target); needs n >= {t['chunks_needed_at_least']}")
        else:
            lines.append(f"target {t['masking']:.4f}: needs F >= {t['compute_needed_us']:.6g} {u} "
                         f"(+{t['compute_increase_us']:.6g} {u} of compute beside the collective), or")
            if t["comm_allowed_us"] is None:
                lines.append("  any C (the target holds for every C at this n and F)")
            else:
                lines.append(f"  C <= {t['comm_allowed_us']:.6g} {u} (-{t['comm_reduction_us']:.6g} {u} of "
                             f"communication, same reverse share)")
    b = res["best"]
    if b:
        lines += ["", f"per-chunk overhead o = {b['overhead_us']:.6g} us, C measured at "
                      f"{b['measured_at_chunks']} chunks (C0 = C - {b['measured_at_chunks']}*o = "
                      f"{b['base_comm_us']:.6g} us): best n = {b['best_chunks']} "
                      f"(exposed {b['best_exposed_us']:.6g} us, ceiling {b['best_ceiling']:.4f})"]
        lines.append(cli.format_table(b["table"], ["chunks", "comm_us", "exposed_us", "ceiling", "regime"],
                                      digits=4))
    return "\n".join(lines)


def _orders(text: str) -> list[str]:
    if text.strip() == "all":
        return list(simulator.ORDERS)
    orders = [o.strip() for o in text.split(",") if o.strip()]
    for o in orders:
        if o not in simulator.ORDERS:
            raise InputError(f"--order: unknown order {o!r}; expected one of {list(simulator.ORDERS)} or 'all'")
    if not orders:
        raise InputError("--order: no order given")
    return orders


def _simulate(args) -> int:
    layer = _layer(args)
    if layer.chunks > MAX_SIM_CHUNKS:
        raise InputError(f"--chunks {layer.chunks}: simulate runs at most {MAX_SIM_CHUNKS} chunks "
                         "(calc gives the closed form for any count)")
    if args.plot and layer.chunks > MAX_PLOT_CHUNKS:
        raise InputError(f"--plot: draws at most {MAX_PLOT_CHUNKS} chunks (got --chunks {layer.chunks}); "
                         "leave --plot out for the figures")
    t = bound.check_time("--transform-us", args.transform_us, allow_zero=True)
    post = bound.check_time("--post-us", args.post_us, allow_zero=True)
    results = [simulator.simulate(layer, o, t, args.transforms, post) for o in _orders(args.order)]
    plain = t == 0 and post == 0 and args.transforms == "per-chunk"
    rows = []
    for r in results:
        row = simulator.summary(r)
        closed = bound.exposure_for_order(layer, r.order) if plain else None
        row["closed_form_exposed_us"] = closed
        rows.append(row)
    if args.plot:
        simulator.plot_gantt(results, args.plot)
    if args.csv:
        import pandas as pd

        ops = [{"order": r.order, "op": o.label, "kind": o.kind, "chunk": o.chunk, "stream": o.stream,
                "start_us": o.start_us, "end_us": o.end_us} for r in results for o in r.ops]
        cli.write_csv(args.csv, pd.DataFrame(ops))
    ceil = bound.ceiling(layer)
    if args.json:
        cli.print_json(TOOL, {"command": "simulate", "comm_us": layer.comm_us, "compute_us": layer.compute_us,
                              "chunks": layer.chunks, "drain_us": layer.drain_us, "transform_us": t,
                              "post_us": post,
                              "transforms": args.transforms, "ceiling": ceil, "ideal": bound.ideal(layer.chunks),
                              "c_over_f": bound.c_over_f(layer), "regime": bound.regime(layer),
                              "orders": rows})
        return 0
    print(f"per layer: C = {layer.comm_us:.6g} us, F = {layer.compute_us:.6g} us, n = {layer.chunks}, "
          f"drain D = {layer.drain_us:.6g} us" + (f", transform {t:.6g} us ({args.transforms})" if t or
                                                     args.transforms != "per-chunk" else "")
          + (f", post-reverse work {post:.6g} us per chunk" if post else ""))
    print(f"c/f = {bound.c_over_f(layer):.4f} ({bound.regime(layer)}); closed-form ceiling {ceil:.4f}, "
          f"ideal {bound.ideal(layer.chunks):.4f}" + ("" if plain else
          "; the closed form covers neither transforms nor post-reverse work (column left empty)"))
    print(cli.format_table(rows, ["order", "makespan_us", "exposed_us", "masking", "closed_form_exposed_us"],
                           digits=4))
    if args.plot:
        print(f"Gantt chart written to {args.plot}", file=sys.stderr)
    return 0


def main() -> None:
    parser = build_parser()

    def body() -> int:
        args = parser.parse_args()
        if args.command == "calc":
            return _calc(args)
        if args.command == "simulate":
            return _simulate(args)
        from ditpar.masking import measured, verify

        if args.command == "profile":
            return measured.main(args, TOOL)
        return verify.main(args, TOOL)

    cli.run(PROG, body)


if __name__ == "__main__":
    main()
