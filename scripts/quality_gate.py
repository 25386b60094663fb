#!/usr/bin/env python3
"""Quality gate: is each plan's output as close to one device's as the forms' rounding allows?

Compares every plan's generated images or video frames with the one-device run's, seed by seed (PSNR and
SSIM from scikit-image), against the one-device seed-to-seed band. Verdict per plan: pass (every seed closer
to its reference than two different one-device seeds are), fail (exit 1), no-evidence (nothing compared,
exit 2). Layout: DIR/<plan>/seed<k>.png, DIR/<plan>/seed<k>.npy (frames T,H,W[,C]) or DIR/<plan>/seed<k>/
(frame PNGs). See references/fewstep-validation.md section 11.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ditpar import cli  # noqa: E402
from ditpar.errors import InputError  # noqa: E402

PROG = "quality_gate.py"
EXAMPLE = """python scripts/quality_gate.py tests/data/quality --reference 1dev
  python scripts/quality_gate.py tests/data/quality --reference 1dev --json --csv /tmp/quality.csv"""


def build_parser():
    p = cli.make_parser(PROG, __doc__.strip().splitlines()[0], EXAMPLE)
    p.add_argument("folder", metavar="DIR", help="one folder per plan (the one-device run among them), "
                   "each with seed<k>.png, seed<k>.npy or seed<k>/ frame folders")
    p.add_argument("--reference", default="1dev", help="the folder of the one-device run (1dev)")
    p.add_argument("--lpips", action="store_true",
                   help="also compute LPIPS (needs the lpips package and its weights; reported, not gated)")
    p.add_argument("--margin-db", type=cli.finite_float, default=0.0,
                   help="demand this much PSNR above the band's (0: the band itself; the band catches a form "
                        "that changes the sample, a margin also one that degrades it)")
    cli.add_output_args(p, csv=True, plot=False)
    return p


def main() -> None:
    args = build_parser().parse_args()

    def body() -> int:
        from ditpar.fewstep.frames import read_layout
        from ditpar.fewstep.quality import EXIT_CODES, gate, render_text, seeds_csv

        if args.margin_db < 0:
            raise InputError(f"--margin-db {args.margin_db:g}: expected 0 or more")
        payload = gate(read_layout(args.folder), args.reference, args.lpips, args.margin_db)
        if args.csv:
            cli.write_csv(args.csv, seeds_csv(payload))
        if args.json:
            cli.print_json("quality_gate", payload)
        else:
            sys.stdout.write(render_text(payload) + "\n")
        code = EXIT_CODES[payload["verdict"]]
        if code:
            bad = [f"{v['plan']} {v['verdict']}" for v in payload["plans"] if v["verdict"] != "pass"]
            sys.stderr.write(f"{PROG}: {args.folder}: verdict {payload['verdict']} ({'; '.join(bad)})\n")
        return code

    cli.run(PROG, body)


if __name__ == "__main__":
    main()
