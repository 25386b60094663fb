#!/usr/bin/env python3
"""Few-step x multi-rank validation: can a short benchmark pick the parallel plan?

``analyze MATRIX.csv`` gates a timing matrix (noise, drift, ranking, exposed-comm share) and gives a
verdict: no-evidence, fix-noise, rerun-anchor or extrapolate (exit 2, 1, 1, 0). ``run`` collects the
matrix by launching each config (or a server per config plus requests) and then analyzes it.
See references/fewstep-validation.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ditpar import cli
from ditpar.errors import InputError, NoEvidenceError

PROG = "fewstep.py"
EXAMPLE = """python scripts/fewstep.py analyze templates/fewstep-matrix.csv --plot /tmp/fewstep.png
  python scripts/fewstep.py run --config A devices=2 tp=1 usp=2 --config B devices=2 tp=2 usp=1 \\
      --few-steps 4 --anchor-steps 10 --repeats 3 --logdir runs/fs \\
      --launch 'torchrun --nproc-per-node {devices} gen.py --tp {tp} --usp {usp} --steps {steps}' \\
      --dit-regex 'rank(?P<rank>\\d+) diffuse took (?P<dit_s>[0-9.]+)s'
  python scripts/fewstep.py run --parse-only runs/fs --json"""


def _gate_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("gates")
    g.add_argument("--dispersion-pct", type=float, default=3.0,
                   help="a cell is noisy when (max-min)/median of per-step over repeats exceeds this (3)")
    g.add_argument("--drift-pct", type=float, default=5.0,
                   help="drift gate on |r-1|, r = per-step anchor / per-step few, in percent (5)")
    g.add_argument("--tie-pct", type=float, default=3.0,
                   help="anchor differences within this are ties: either few-step order is accepted (3)")
    g.add_argument("--share-drift-pp", type=float, default=5.0,
                   help="gate on the change of exposed-comm share, percentage points of step time (5)")
    g.add_argument("--min-repeats", type=int, default=3,
                   help="repeats a cell needs to count as evidence (>= 3)")
    cli.add_output_args(p, csv=True, plot=True)


def build_parser() -> argparse.ArgumentParser:
    parser = cli.make_parser(PROG, __doc__.splitlines()[0], EXAMPLE)
    sub = parser.add_subparsers(dest="cmd", required=True, parser_class=type(parser))
    a = sub.add_parser("analyze", help="gate a timing matrix and give a verdict",
                       description="Gate a timing matrix (config, tier, steps, repeat, rank, dit_s "
                       "[, devices, comm_exposed_share, tags]). Exit 0 extrapolate, 1 rerun-anchor or "
                       "fix-noise, 2 no-evidence or bad input.",
                       epilog=f"example:\n  {EXAMPLE}", formatter_class=argparse.RawDescriptionHelpFormatter)
    a.add_argument("matrix", metavar="MATRIX.csv")
    a.add_argument("--timing", choices=("dit", "e2e"),
                   help="what the times measure when the matrix has no timing column: dit (denoise stage "
                        "only, the default) or e2e (whole request; the report says what that costs)")
    _gate_args(a)
    r = sub.add_parser("run", help="collect the matrix, then analyze it",
                       description="Launch every config (one process per run, or a server per config "
                       "with --request), time DiT-only with --dit-regex, write the matrix after each "
                       "run, then analyze. Placeholders: {name} (config fields, config, devices, steps, "
                       "tier, repeat, out, logdir, port); values are shell-quoted.",
                       epilog=f"example:\n  {EXAMPLE}", formatter_class=argparse.RawDescriptionHelpFormatter)
    r.add_argument("--parse-only", metavar="LOGDIR", type=cli.work_folder, help="rebuild the matrix from the logs kept in LOGDIR")
    r.add_argument("--config", nargs="+", action="append", metavar="NAME key=value",
                   help="a config: a name and fields (devices=N required; ranks=K if fewer ranks print)")
    r.add_argument("--few-steps", type=int, help="step count of the few tier (e.g. 4)")
    r.add_argument("--anchor-steps", type=int, help="step count of the anchor tier (e.g. 10)")
    r.add_argument("--repeats", type=int, default=3, help="measured runs per cell (3)")
    r.add_argument("--launch", metavar="TEMPLATE", help="command per run (with {steps}) or per server; a config's "
                   "own launch=TEMPLATE field replaces it for that config (launch mode)")
    r.add_argument("--request", metavar="TEMPLATE", help="server mode: command per request (with {steps})")
    r.add_argument("--ready-regex", help="server mode: line that shows the server is ready")
    r.add_argument("--ready-timeout-s", type=float, default=600.0, help="server start limit (600)")
    r.add_argument("--settle-s", type=float, default=5.0,
                   help="server mode: wait this long for timing lines after a request returns (5)")
    r.add_argument("--dit-regex", help="regex with (?P<dit_s>...) and optionally (?P<rank>...), one "
                   "line per rank per request")
    r.add_argument("--dit-unit", choices=("s", "ms", "us"), help="unit of dit_s in the log (s)")
    r.add_argument("--share-regex", help="optional regex with (?P<share>...) (fraction) and (?P<rank>...)")
    r.add_argument("--iters-regex", help="optional regex with (?P<iters>...): measured denoise "
                   "iterations per request, written as the steps column (per-step denominator)")
    r.add_argument("--expect", action="append", default=[], metavar="REGEX",
                   help="count contract: a line the log must hold for the run to count, with config "
                   "placeholders, e.g. 'sp_size={usp}' (repeatable)")
    r.add_argument("--warmup", type=int,
                   help="warm-up requests, two meanings: server mode, untimed requests the runner sends to "
                        "each server before the timed ones (default 1); launch mode, requests the run's own "
                        "process prints before the timed one, which the runner discards (default 0)")
    r.add_argument("--warmup-steps", type=int, help="server mode only: steps of warm-up requests (anchor)")
    r.add_argument("--timing", choices=("dit", "e2e"), default="dit",
                   help="what --dit-regex captures: dit (denoise stage, default) or e2e (whole request; "
                        "marked in the matrix, and the report says what it costs)")
    r.add_argument("--timeout-s", type=float, default=3600.0, help="limit per run or request (3600)")
    r.add_argument("--logdir", type=cli.work_folder, help="folder for logs, run records and the matrix")
    r.add_argument("--matrix", type=cli.output_path, help="matrix CSV path (LOGDIR/matrix.csv)")
    _gate_args(r)
    return parser


def _gates(args: argparse.Namespace):
    from ditpar.fewstep.analyze import Gates

    return Gates(args.dispersion_pct, args.drift_pct, args.tie_pct, args.share_drift_pp,
                 args.min_repeats)


def _report(args: argparse.Namespace, matrix_path: Path, extra: dict | None = None,
            planned: dict[str, int] | None = None, timing: str | None = None, rows: list | None = None) -> int:
    """Analyze the matrix file and print table or JSON; write --csv / --plot; return the exit code."""
    from ditpar.fewstep.analyze import EXIT_CODES, analyze, cells_csv, render_text
    from ditpar.fewstep.matrix import read_matrix

    gates = _gates(args)
    gates.check()
    payload = analyze(read_matrix(matrix_path) if rows is None else rows, gates, planned, timing)
    if extra:
        payload = {**payload, **extra}
    if args.csv:
        cli.write_output(args.csv, cells_csv(payload))
    if args.plot:
        from ditpar.fewstep.plot import plot_fewstep

        plot_fewstep(payload, args.plot)
    if args.json:
        cli.print_json("fewstep", payload)
    else:
        sys.stdout.write(render_text(payload) + "\n")
    code = EXIT_CODES[payload["verdict"]]
    if code:  # the reason in one line on stderr, so that a caller that reads only stderr sees it
        first = (payload.get("reasons") or [{}])[0]
        why = f"{first.get('code', '')}: {first.get('detail', '')}".strip(": ")
        sys.stderr.write(f"{PROG}: {matrix_path}: verdict {payload['verdict']}" + (f" ({why})" if why else "") + "\n")
    return code


def _run(args: argparse.Namespace) -> int:
    from ditpar.fewstep.run import Runner, Settings, parse_config, parse_only

    if args.parse_only:
        logdir = Path(args.parse_only)
        matrix = Path(args.matrix) if args.matrix else logdir / "matrix.csv"
        records, planned = parse_only(logdir, matrix, args.dit_regex, args.dit_unit, args.share_regex)
        if not records:
            raise NoEvidenceError(f"--parse-only {logdir}: no run could be rebuilt")
        from ditpar.fewstep.matrix import matrix_csv, parse_matrix

        text = matrix_csv(records)
        cli.write_output(matrix, text)  # held: the matrix is written whole when the run ends, or not at all
        sys.stderr.write(f"fewstep run: rebuilt {matrix} ({len(records)} rows) from {logdir}\n")
        return _report(args, matrix, {"matrix": str(matrix), "failed_runs": []}, planned,
                       rows=parse_matrix(text, str(matrix)))
    own = bool(args.config) and any(any(t.startswith("launch=") for t in c[1:]) for c in args.config)
    missing = [f"--{n.replace('_', '-')}" for n in ("few_steps", "anchor_steps", "launch", "dit_regex",
                                                   "logdir") if getattr(args, n) is None
               and not (n == "launch" and own)]   # launch=: each config's own command (plan.py --emit-matrix)
    if missing:
        raise InputError(f"run: missing {', '.join(missing)} (or use --parse-only LOGDIR)")
    _gates(args).check()
    logdir = Path(args.logdir)
    settings = Settings(
        configs=[parse_config(c) for c in (args.config or [])], few_steps=args.few_steps,
        anchor_steps=args.anchor_steps, repeats=args.repeats, launch=args.launch,
        dit_regex=args.dit_regex, logdir=logdir,
        matrix=Path(args.matrix) if args.matrix else logdir / "matrix.csv", request=args.request,
        ready_regex=args.ready_regex, ready_timeout_s=args.ready_timeout_s, settle_s=args.settle_s,
        dit_unit=args.dit_unit or "s", share_regex=args.share_regex, iters_regex=args.iters_regex,
        expect=args.expect, warmup=args.warmup,
        warmup_steps=args.warmup_steps, timeout_s=args.timeout_s, timing=args.timing)
    runner = Runner(settings)
    records = runner.run()
    if not records:
        raise NoEvidenceError(f"run: no run succeeded, the matrix is empty; logs in {logdir}")
    planned = {c.name: c.devices for c in settings.configs}
    return _report(args, settings.matrix, {"matrix": str(settings.matrix), "failed_runs": runner.failed,
                                           "warmup": settings.warmup_meaning()}, planned)


def main() -> None:
    args = build_parser().parse_args()

    def body() -> int:
        if args.cmd == "analyze":
            return _report(args, Path(args.matrix), timing=args.timing)
        return _run(args)

    cli.run(PROG, body)


if __name__ == "__main__":
    main()
