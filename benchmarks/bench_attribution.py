#!/usr/bin/env python3
"""Speed of the attribution analyses against the time to read the same profile.

Builds a big Ascend profile by tiling the rows of a real fixture's kernel_details.csv (each tile
shifted past the previous one, with its own Step Id), reads it with ditpar.readers.load_profiles,
then times collectives, bubbles (with a consumer pattern) and stage_delta (one side) on it.
Target: each analysis takes at most 2x the read time. Prints one table; --json for a document.

  python benchmarks/bench_attribution.py --rows 1000000
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from decimal import Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

FIXTURE = ROOT.parent / "shared" / "fixtures" / "ascend" / "msinsight-text-level0" / "rank0_ascend_pt"
OUT = "ASCEND_PROFILER_OUTPUT"
KERNELS = "kernel_details.csv"


def tile_profile(src: Path, dst: Path, rows: int, steps: int) -> int:
    """Write dst (an *_ascend_pt folder) whose kernel_details.csv holds about ``rows`` tiled rows.

    Consecutive tiles share a Step Id so that the profile has ``steps`` steps (a DiT run has ~50).
    """
    shutil.copytree(src, dst)
    lines = (src / OUT / KERNELS).read_text(encoding="utf-8").splitlines()
    header, body = lines[0], [ln.split(",") for ln in lines[1:] if ln.strip()]
    cols = header.split(",")
    i_step, i_start, i_dur = cols.index("Step Id"), cols.index("Start Time(us)"), cols.index("Duration(us)")
    starts = [Decimal(r[i_start].strip()) for r in body]
    ends = [s + Decimal(r[i_dur]) for s, r in zip(starts, body, strict=True)]
    period = (max(ends) - min(starts)) + Decimal(1000)  # 1 ms between tiles
    tiles = max(1, rows // len(body))
    per_step = max(1, -(-tiles // steps))
    with (dst / OUT / KERNELS).open("w", encoding="utf-8", newline="") as fh:
        fh.write(header + "\r\n")
        for k in range(tiles):
            shift = period * k
            for r, s in zip(body, starts, strict=True):
                cells = list(r)
                cells[i_step] = str(int(r[i_step]) + k // per_step) if r[i_step].strip() else r[i_step]
                cells[i_start] = f"{s + shift:.3f}\t"
                fh.write(",".join(cells) + "\r\n")
    return tiles * len(body)


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000, help="rows of the tiled profile (default 1,000,000)")
    ap.add_argument("--steps", type=int, default=50, help="steps of the tiled profile (default 50)")
    ap.add_argument("--json", action="store_true", help="print a JSON document instead of a table")
    args = ap.parse_args()
    if not FIXTURE.is_dir():
        sys.exit(f"bench_attribution: fixture not found: {FIXTURE}")

    from ditpar.analysis import bubbles, collectives, stage_delta
    from ditpar.readers import load_profiles

    with tempfile.TemporaryDirectory() as tmp:
        dst = Path(tmp) / "rank0_ascend_pt"
        n, build_s = timed(lambda: tile_profile(FIXTURE, dst, args.rows, args.steps))
        ps, read_s = timed(lambda: load_profiles([dst]))
    rows = [
        ("collectives", lambda: collectives.analyse(ps, layers=4)),
        ("bubbles", lambda: bubbles.analyse(ps, consumer="TransData")),
        ("stage_delta (one side)", lambda: stage_delta.side_from_profile("A", ps)),
        ("stage columns from events", lambda: stage_delta.columns_from_events(ps)),
    ]
    results = []
    for name, fn in rows:
        _, secs = timed(fn)
        results.append({"analysis": name, "seconds": round(secs, 3), "x_read": round(secs / read_s, 3)})
    doc = {"rows": n, "events": len(ps.events), "steps": int(ps.steps["step"].nunique()),
           "build_s": round(build_s, 3), "read_s": round(read_s, 3), "analyses": results}
    if args.json:
        print(json.dumps(doc, indent=2))
        return
    print(f"profile: {n} kernel_details rows, {doc['events']} events, {doc['steps']} steps "
          f"(built in {build_s:.1f} s); read: {read_s:.2f} s")
    print(f"{'analysis':<24} {'seconds':>8} {'x read':>7}")
    for r in results:
        print(f"{r['analysis']:<24} {r['seconds']:>8.2f} {r['x_read']:>7.2f}")


if __name__ == "__main__":
    main()
