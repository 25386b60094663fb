#!/usr/bin/env python3
"""Ring against Ulysses of the same degree on the published tables: measured and predicted gap of every pair.

A pair is two rows of one table with the same model, box, shape, steps, CFG, TP and other_config, one with
ring = P (Ulysses 1), one with Ulysses = P (ring 1). gap = ring latency / Ulysses latency - 1 (ring's penalty;
negative: ring ahead). A prediction is 'within half of the published gap' when |predicted - measured| <=
0.5 x |measured| (the predicted penalty is 0.5x to 1.5x the measured one, same sign), or within 3 points where
the measured gap is under 6 % (a gap near 0 has no half worth the name). ring_err and uly_err say which leg
misses: each row's predicted / measured latency over its one-device row's (1.00: the leg scales as measured).
Run: python3 benchmarks/ring_vs_ulysses.py [--tables DIR ...] [--overlap 0.5] [--csv FILE] [--json]
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

SHAPE = ("model", "hardware", "resolution_or_seq", "steps", "other_config")
KEY = (*SHAPE, "n_devices", "cfg", "pipefusion", "tp")
FLOOR = 0.03   # a measured gap within 3 points: within when the prediction is within 3 points too


def within(measured: float, predicted: float) -> bool:
    """Predicted penalty within half of the measured one (same sign), or within 3 points of a gap under 6 %."""
    return abs(predicted - measured) <= max(0.5 * abs(measured), FLOOR)


def _latency(row) -> float | None:
    try:
        value = float(row["latency_s"])
    except (TypeError, ValueError):
        return None
    return value if value > 0 else None


def _one_device_scale(frame_rows: list[dict], score) -> dict[tuple, float]:
    """{shape key: predicted / measured latency of the one-device row} for each shape that has one."""
    out = {}
    for row in frame_rows:
        if str(row["n_devices"]) != "1":
            continue
        measured, (predicted, _) = _latency(row), score(row)
        if measured and predicted:
            out.setdefault(tuple(str(row[c]) for c in SHAPE), predicted / measured)
    return out


def pairs(frames: dict, overlap: float) -> list[dict]:
    """Every ring-P / Ulysses-P pair of the tables with its measured and predicted gap."""
    from ditpar.plan.cost.timing import Tunables
    from ditpar.plan.judge import evaluate

    tun = Tunables(overlap_efficiency=overlap)

    def score(row):
        return evaluate.score_row(row, tun)

    out = []
    for name, frame in sorted(frames.items()):
        records = frame.to_dict("records")
        scale = _one_device_scale(records, score)
        keyed: dict[tuple, dict] = collections.defaultdict(dict)
        for row in records:
            keyed[tuple(str(row[c]) for c in KEY)][(str(row["ulysses"]), str(row["ring"]))] = row
        for key, rows in keyed.items():
            for (u, r), ring in rows.items():
                if u != "1" or r == "1" or (r, "1") not in rows:
                    continue
                uly = rows[(r, "1")]
                mr, mu = _latency(ring), _latency(uly)
                (pr, _), (pu, _) = score(ring), score(uly)
                if None in (mr, mu, pr, pu):
                    continue
                one = scale.get(key[:len(SHAPE)])
                pub, pred = mr / mu - 1.0, pr / pu - 1.0
                out.append({"table": name, "model": key[0], "hardware": key[1], "shape": key[2], "degree": int(r),
                            "other_config": key[4], "measured_ring_s": mr, "measured_ulysses_s": mu,
                            "predicted_ring_s": pr, "predicted_ulysses_s": pu,
                            "measured_gap": pub, "predicted_gap": pred,
                            "ring_err": pr / mr / one if one else None, "uly_err": pu / mu / one if one else None,
                            "within": within(pub, pred)})
    return out


def _fmt(x: float | None) -> str:
    return f"{x:>8.2f}" if x is not None else f"{'-':>8}"


def main() -> int:
    here = Path(__file__).resolve().parent
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 epilog="example: python3 benchmarks/ring_vs_ulysses.py --tables benchmarks/published "
                                        "../shared/calibration --csv /tmp/ring_pairs.csv",
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tables", nargs="+", default=[str(here / "published"), str(here.parents[1] / "shared" / "calibration")],
                    help="folders of published tables (default: benchmarks/published and ../shared/calibration)")
    ap.add_argument("--overlap", type=float, default=0.5,
                    help="ring overlap efficiency, 0..1 (default 0.5: what plan.py evaluate picks held out)")
    ap.add_argument("--min-degree", type=int, default=2, help="leave out pairs below this degree (default 2)")
    ap.add_argument("--csv", metavar="FILE", help="write the pairs as CSV to FILE")
    ap.add_argument("--json", action="store_true", help="JSON on stdout")
    args = ap.parse_args()
    if not 0.0 <= args.overlap <= 1.0:
        sys.stderr.write(f"ring_vs_ulysses.py: --overlap {args.overlap}: expected 0..1\n")
        return 2
    from ditpar import cli
    from ditpar.errors import InputError
    from ditpar.plan.judge import evaluate

    frames = {}
    for folder in args.tables:
        try:
            frames.update(evaluate.load_tables(folder))
        except InputError as exc:
            sys.stderr.write(f"ring_vs_ulysses.py: {exc}\n")
            return 2
    rows = [x for x in pairs(frames, args.overlap) if x["degree"] >= args.min_degree]
    if args.csv:
        import pandas as pd

        cli.write_csv(args.csv, pd.DataFrame(rows))
    if args.json:
        json.dump({"overlap_efficiency": args.overlap, "pairs": rows}, sys.stdout, indent=1)
        sys.stdout.write("\n")
        return 0
    print(f"{'table':<36}{'model':<22}{'box':<7}{'shape':<20}{'P':>3}{'measured':>10}{'predicted':>10}"
          f"{'ring_err':>9}{'uly_err':>9}  within")
    for x in rows:
        print(f"{x['table'][:35]:<36}{x['model'][:21]:<22}{x['hardware'][:6]:<7}{x['shape'][:19]:<20}{x['degree']:>3}"
              f"{x['measured_gap']:>+10.3f}{x['predicted_gap']:>+10.3f} {_fmt(x['ring_err'])} {_fmt(x['uly_err'])}"
              f"  {'yes' if x['within'] else 'no'}")
    hit = sum(x["within"] for x in rows)
    print(f"{hit} of {len(rows)} pairs within half of the measured gap (or 3 points of a gap under 6 %); "
          "gap = ring / Ulysses - 1; *_err = predicted / measured over the one-device row's")
    return 0


if __name__ == "__main__":
    sys.exit(main())
