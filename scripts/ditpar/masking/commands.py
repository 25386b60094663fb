"""Arguments of `mask_bound.py profile` and `verify`, kept free of numpy and pandas so --help always works."""

from __future__ import annotations

from ditpar import cli


def add_profile_arguments(sub, parent) -> None:
    """Register the `profile` subcommand."""
    p = sub.add_parser(
        "profile", help="measured masking of one family from one profile or a masking-off/on pair",
        description="Per-layer C, F, exposed communication, masking, ceiling and achieved fraction, per rank.",
        epilog="example:\n  python scripts/mask_bound.py profile ON_DIR --off OFF_DIR --family alltoall "
               "--consumer FlashAttention --layers 50 --reverse-share 0.25",
        formatter_class=parent.formatter_class)
    p.add_argument("paths", nargs="+", help="the masking-on profile (or the only one): folders or trace files")
    p.add_argument("--off", nargs="+", metavar="PATH", help="the masking-off profile of the same configuration")
    p.add_argument("--family", required=True,
                   help="regular expression for the masked family, matched whole and case-blind "
                        "(alltoall, alltoallv, allgather, ...)")
    p.add_argument("--consumer", required=True, type=cli.nonempty("a kernel-name pattern"),
                   help="regular expression (search, case-blind) for the compute kernels that hide it, e.g. attention")
    p.add_argument("--group", help="communicator id, name or role to pin the family to one communicator")
    p.add_argument("--layers", type=float, default=1.0, help="layers per step (per-layer divisor; default 1)")
    p.add_argument("--chunks", type=int, help="n of the masking-on arm (default with --off: op-count growth)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--drain-us", type=float, help="reverse collective of one chunk (us per layer)")
    g.add_argument("--reverse-share", type=float, help="reverse share of a chunk's communication")
    cli.add_output_args(p, csv=True)


def add_verify_arguments(sub, parent) -> None:
    """Register the `verify` subcommand."""
    p = sub.add_parser(
        "verify", help="masking effectiveness checklist (PASS / FAIL / NO EVIDENCE)",
        description="Did masking take effect? Op count, side-stream compute, not-overlapped comm, output bytes.",
        epilog="example:\n  python scripts/mask_bound.py verify --off OFF_DIR --on ON_DIR --family alltoall "
               "--chunks 7 --outputs off.bin on.bin",
        formatter_class=parent.formatter_class)
    p.add_argument("--on", nargs="+", metavar="PATH", help="masking-on profile")
    p.add_argument("--off", nargs="+", metavar="PATH", help="masking-off profile")
    p.add_argument("--family", help="regular expression for the masked family (matched whole, case-blind)")
    p.add_argument("--group", help="communicator id, name or role of the masked family")
    p.add_argument("--chunks", type=int, help="n: the expected op-count growth")
    p.add_argument("--tolerance", type=float, default=0.1, help="allowed relative miss of the n-fold growth")
    p.add_argument("--outputs", nargs="+", metavar="FILE", help="two output files: masking off, masking on")
    cli.add_output_args(p, csv=True)
