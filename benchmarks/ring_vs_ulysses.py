#!/usr/bin/env python3
"""Ring against Ulysses of the same degree on the published tables: measured and predicted gap of every pair.

A pair is two rows of one table with the same model, box, shape, steps, CFG, TP and other_config, one with
ring = P (Ulysses 1), one with Ulysses = P (ring 1). gap = ring latency / Ulysses latency - 1; a prediction is
'within' when it lands within half of the measured gap of it, or within 3 points (a measured gap near 0).
Run: python3 benchmarks/ring_vs_ulysses.py [--overlap 0.5] [--json]
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

KEY = ("model", "hardware", "resolution_or_seq", "steps", "n_devices", "cfg", "pipefusion", "tp", "other_config")


def pairs(frames: dict, overlap: float) -> list[dict]:
    """Every ring-P / Ulysses-P pair of the tables with its measured and predicted gap."""
    from ditpar.plan.cost.timing import Tunables
    from ditpar.plan.judge import evaluate

    tun = Tunables(overlap_efficiency=overlap)
    out = []
    for name, frame in sorted(frames.items()):
        keyed: dict[tuple, dict] = collections.defaultdict(dict)
        for row in frame.to_dict("records"):
            keyed[tuple(str(row[c]) for c in KEY)][(str(row["ulysses"]), str(row["ring"]))] = row
        for key, rows in keyed.items():
            for (u, r), ring in rows.items():
                if u != "1" or r == "1" or (r, "1") not in rows:
                    continue
                uly = rows[(r, "1")]
                try:
                    mr, mu = float(ring["latency_s"]), float(uly["latency_s"])
                except (TypeError, ValueError):
                    continue
                pr, _ = evaluate.score_row(ring, tun)
                pu, _ = evaluate.score_row(uly, tun)
                if pr is None or pu is None:
                    continue
                pub, pred = mr / mu - 1.0, pr / pu - 1.0
                out.append({"table": name, "model": key[0], "hardware": key[1], "shape": key[2], "degree": int(r),
                            "measured_gap": pub, "predicted_gap": pred,
                            "within": abs(pred - pub) <= max(0.5 * abs(pub), 0.03)})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 epilog="example: python3 benchmarks/ring_vs_ulysses.py --overlap 0.5",
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tables", default=str(Path(__file__).resolve().parent / "published"),
                    help="folder of published tables (default: benchmarks/published)")
    ap.add_argument("--overlap", type=float, default=0.5,
                    help="ring overlap efficiency, 0..1 (default 0.5: what plan.py evaluate picks held out)")
    ap.add_argument("--json", action="store_true", help="JSON on stdout")
    args = ap.parse_args()
    if not 0.0 <= args.overlap <= 1.0:
        sys.stderr.write(f"ring_vs_ulysses.py: --overlap {args.overlap}: expected 0..1\n")
        return 2
    from ditpar.plan.judge import evaluate

    rows = pairs(evaluate.load_tables(args.tables), args.overlap)
    if args.json:
        json.dump({"overlap_efficiency": args.overlap, "pairs": rows}, sys.stdout, indent=1)
        sys.stdout.write("\n")
        return 0
    print(f"{'table':<36}{'model':<24}{'box':<7}{'shape':<20}{'P':>3}{'measured':>10}{'predicted':>10}  within")
    for x in rows:
        print(f"{x['table'][:35]:<36}{x['model'][:23]:<24}{x['hardware'][:6]:<7}{x['shape'][:19]:<20}{x['degree']:>3}"
              f"{x['measured_gap']:>+10.3f}{x['predicted_gap']:>+10.3f}  {'yes' if x['within'] else 'no'}")
    hit = sum(x["within"] for x in rows)
    print(f"{hit} of {len(rows)} pairs within half of the measured gap (or 3 points); gap = ring / Ulysses - 1")
    return 0


if __name__ == "__main__":
    sys.exit(main())
