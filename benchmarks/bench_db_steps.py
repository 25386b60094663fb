"""How long the db reader takes to place tasks and ops in 50,000 ProfilerStep spans.

    python3 benchmarks/bench_db_steps.py [--spans 50000]

Writes a db rank with tests/ascend_db_synth.write_many_spans (one launch, kernel and HCCL op per span)
and times load_profiles on it. Steps used to be assigned with one SQL CASE per span: over 400 s for
50,000 spans. With a binary search over the sorted spans the read is near-linear; the script prints
the time and 'ok' when it stays under a generous bound (60 s), so a return of the quadratic path shows.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "scripts"), str(ROOT / "tests")]

BOUND_S = 60.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=50_000, help="ProfilerStep spans to write (default 50000)")
    args = parser.parse_args()
    from ascend_db_synth import write_many_spans
    from ditpar.readers import load_profiles

    rank0 = sorted((ROOT / "tests" / "data" / "ascend_cann83").glob("*_ascend_pt"))[0]
    with tempfile.TemporaryDirectory(prefix="bench-db-steps-") as tmp:
        folder = write_many_spans(rank0, Path(tmp) / rank0.name, args.spans)
        t0 = time.perf_counter()
        ps = load_profiles(folder, workers=1)
        took = time.perf_counter() - t0
    placed = int(ps.events["step"].notna().sum())
    verdict = "ok" if took < BOUND_S else f"SLOW (over {BOUND_S:g} s)"
    print(f"{args.spans} spans, {len(ps.events)} events ({placed} placed in a step): {took:.2f} s  {verdict}")
    return 0 if took < BOUND_S else 1


if __name__ == "__main__":
    sys.exit(main())
