#!/usr/bin/env python3
"""Time plan.py's work (rank + gates + conclusion) on every model x hardware preset pair.

Prints the slowest pairs and the distribution; the target is under one second per pair, and the whole command
(interpreter start, imports, every line of the answer) for the slowest pair at the same card count.
Run: python benchmarks/plan_presets_speed.py [--devices 8] [--max-devices 72]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

from ditpar.errors import InputError  # noqa: E402
from ditpar.plan.cost import Tunables, make_shape
from ditpar.plan.decide.rank import conclusion, rank_plans  # noqa: E402
from ditpar.plan.inputs import frameworks, presets  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--devices", type=int, default=0, help="devices per request (default: all of one node, capped)")
    ap.add_argument("--max-devices", type=int, default=72,
                    help="cap of the default: a pod-sized preset (768 dies in one domain) is timed at this many "
                         "(default 72, an NVL72 rack); pass --devices for a larger request")
    args = ap.parse_args()
    count = {}
    times, failed = [], []
    fws = frameworks.all_frameworks()   # as plan.py does by default
    for mname in presets.list_models():
        model = presets.load_model(mname)
        for hname in presets.list_hardware():
            hw = presets.load_hardware(hname)
            t0 = time.perf_counter()
            try:
                shape = make_shape(model)
                count[hname] = args.devices or min(hw.devices_per_node, args.max_devices)
                res = rank_plans(model, hw, shape, count[hname], Tunables(), frameworks=fws)
                conclusion(res, model, hw, shape)
            except InputError as exc:
                failed.append((mname, hname, str(exc)[:80]))
            times.append((time.perf_counter() - t0, mname, hname))
    times.sort(reverse=True)
    secs = [t for t, _, _ in times]
    print(f"{len(times)} pairs, {args.devices or f'node (at most {args.max_devices})'} devices: median {statistics.median(secs) * 1e3:.0f} ms, "
          f"max {secs[0] * 1e3:.0f} ms, over 1 s: {sum(s > 1 for s in secs)}")
    for t, m, h in times[:5]:
        print(f"  {t * 1e3:7.0f} ms  {m} on {h} ({count.get(h, '?')} devices)")
    for m, h, why in failed:
        print(f"  exit-2 pair: {m} on {h}: {why}")
    import subprocess

    t0 = time.perf_counter()
    subprocess.run([sys.executable, str(Path(__file__).resolve().parents[1] / "scripts" / "plan.py"),
                    "--model", times[0][1], "--hardware", times[0][2], "--devices", str(count.get(times[0][2], 8))],
                   check=True, capture_output=True)
    print(f"whole command (interpreter start, imports, every line of the answer; slowest pair, "
          f"{count.get(times[0][2], 8)} devices): {(time.perf_counter() - t0) * 1e3:.0f} ms")


if __name__ == "__main__":
    main()
