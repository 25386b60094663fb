#!/usr/bin/env python3
"""Read `npu-smi info -t topo` or `nvidia-smi topo -m` output: link classes, domains, legal card groups.

A domain is a set of cards joined by the fast fabric (NVLink, HCCS, SIO, UB), or on PCIe-only boxes
the cards of one CPU socket. One rule decides legal groups, for the listing and for --group alike:
a group of k cards is legal when its slowest internal link is the fastest class that any k cards of
the machine can have. The listing shows one tiling per size; --group checks a group you intend to use
(exit 1 when it is not legal).
"""

from __future__ import annotations

import sys

from ditpar import cli
from ditpar.plan.inputs.topology import LEGAL_RULE, MAX_DEVICE_ID, parse_topology

PROG = "topo.py"


def _parser():
    p = cli.make_parser(PROG, __doc__.splitlines()[0],
                        "npu-smi info -t topo | python scripts/topo.py - --group 0,1,4,5")
    p.add_argument("path", metavar="FILE", help="saved topology text, or - for stdin")
    p.add_argument("--group", metavar="IDS", type=cli.int_list(0, MAX_DEVICE_ID, "device ids"),
                   help="comma-separated device ids to check, e.g. 0,1,4,5")
    p.add_argument("--sizes", metavar="K,K", default=[2, 4, 8], type=cli.int_list(1, MAX_DEVICE_ID + 1, "sizes"),
                   help="group sizes to list (default 2,4,8; domain sizes and all cards are always added)")
    cli.add_output_args(p, csv=True)
    return p


def _read(path: str) -> tuple[str, str]:
    from ditpar import files

    if path == "-":  # pasted or piped: colour codes and byte-order marks are dropped, UTF-16 named
        return files.decode_text(sys.stdin.buffer.read(), "<stdin>", strip_ansi=True), "<stdin>"
    return files.read_input_text(path, strip_ansi=True), path


def _fmt_groups(groups: list[list[int]]) -> str:
    return " ".join("{" + ",".join(map(str, g)) + "}" for g in groups) or "(none)"


def body() -> int:
    args = _parser().parse_args()
    sizes = args.sizes
    text, source = _read(args.path)
    topo = parse_topology(text, source)
    group = topo.check_group(args.group) if args.group is not None else None
    domains = topo.domains()
    groups = topo.groups(sizes)
    levels = topo.levels()
    for w in topo.warnings:
        sys.stderr.write(f"{PROG}: warning: {w}\n")
    if group and group["warning"]:
        sys.stderr.write(f"{PROG}: warning: {group['warning']}\n")
    rows = [{"level": i, "class": lv["class"], "pairs": topo.classes[lv["class"]],
             "groups": _fmt_groups(lv["groups"])} for i, lv in enumerate(levels)]
    if args.csv:
        import pandas as pd

        cli.write_csv(args.csv, pd.DataFrame([{"size": k, "group": ",".join(map(str, g))}
                                              for k, gs in groups.items() for g in gs],
                                             columns=["size", "group"]))
    if args.json:
        cli.print_json("topo", {
            "source": source, "format": topo.fmt, "devices": topo.devices,
            "classes": topo.classes, "matrix": topo.matrix,
            "domains": domains, "levels": levels,
            "groups": {str(k): v for k, v in groups.items()},
            "legal_rule": LEGAL_RULE, "best_class": {str(k): topo.best_class(k) for k in groups},
            "summary": topo.summary(), "group_check": group, "warnings": topo.warnings,
        })
        return _verdict_code(group)
    s = topo.summary()
    print(f"{source}: {topo.fmt} matrix, {len(topo.devices)} devices, "
          f"{s['n_domains']} domain(s) of {s['domain_size'] or 'unequal size'}; "
          f"inside a domain: {s['intra_domain_class'] or '-'}; between domains: {s['inter_domain_class'] or '-'}")
    print()
    print("link classes, fastest first (each level joins cards linked by that class or faster):")
    print(cli.format_table(rows, ["level", "class", "pairs", "groups"]))
    print()
    print(f"domains: {_fmt_groups(domains)}")
    print(f"legal groups: {LEGAL_RULE}")
    for k, gs in groups.items():
        best = topo.best_class(k)
        print(f"  {k:>2} cards: {_fmt_groups(gs)}" + (f"   (slowest link {best})" if best and gs else ""))
    if not s["contiguous"]:
        order = ",".join(map(str, s["visible_devices_order"]))
        print(f"domains are not contiguous in device ids: launch with CUDA_VISIBLE_DEVICES / "
              f"ASCEND_RT_VISIBLE_DEVICES={order} so that consecutive ranks share a domain")
    if group:
        print()
        where = "crosses domains" if group["crosses_domains"] else "inside one domain"
        verdict = "legal" if group["legal"] else "NOT legal: " + "; ".join(group["not_legal_because"])
        print(f"group {','.join(map(str, group['ranks']))}: {verdict}; slowest link {group['slowest_class']}; {where}")
    return _verdict_code(group)


def _verdict_code(group: dict | None) -> int:
    """--group is a check: 1 when the group is not legal (the listing alone always ends 0)."""
    return 1 if group is not None and not group["legal"] else 0


def main() -> None:
    cli.run(PROG, body)


if __name__ == "__main__":
    main()
