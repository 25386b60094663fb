#!/usr/bin/env python3
"""Time plan.py's whole answer on every model x hardware preset pair (the target: under one second each).

Each pair runs what `plan.py --model M --hardware H --devices N` runs after its imports (both rankings, the gates,
the short list, recipes, the serial stages, the report), in this process, with the text answer discarded; presets
are read once for all pairs. Then the whole command (interpreter start, imports, preset files, every line) for the
slowest pair, in a fresh process. CPU seconds (this process) are printed beside wall seconds: on a shared machine
the wall time moves with the other jobs' load.
Run: python benchmarks/plan_presets_speed.py [--devices 8] [--max-devices 72] [--extra 'Atlas 900 A3 SuperPoD=64']
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from ditpar.errors import InputError  # noqa: E402
from ditpar.plan.inputs import presets  # noqa: E402


def _plan_module():
    spec = importlib.util.spec_from_file_location("plan_script", ROOT / "scripts" / "plan.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--devices", type=int, default=0, help="devices per request (default: all of one node, capped)")
    ap.add_argument("--max-devices", type=int, default=72,
                    help="cap of the default: a pod-sized preset (768 dies in one domain) is timed at this many "
                         "(default 72, an NVL72 rack); pass --devices for a larger request")
    ap.add_argument("--extra", action="append", default=None, metavar="HARDWARE=N",
                    help="also time every model on this preset at N devices (repeatable; default "
                         "'Atlas 900 A3 SuperPoD=64'; 'none' for no extra)")
    args = ap.parse_args()
    plan = _plan_module()
    parser = plan.plan_parser()
    extra = [e.split("=", 1) for e in (args.extra or ["Atlas 900 A3 SuperPoD=64"]) if e != "none"]
    cases = []
    for hname in presets.list_hardware():
        hw = presets.load_hardware(hname)
        cases.append((hname, args.devices or min(hw.devices_per_node, args.max_devices)))
    cases += [(presets.resolve_hardware(h).name, int(n)) for h, n in extra]
    times, failed = [], []
    for mname in presets.list_models():
        for hname, n in cases:
            argv = ["--model", mname, "--hardware", hname, "--devices", str(n)]
            t0, c0 = time.perf_counter(), _cpu()
            try:
                with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                    plan.run_plan(parser.parse_args(argv))
            except InputError as exc:
                failed.append((mname, hname, n, str(exc)[:80]))
            times.append((time.perf_counter() - t0, _cpu() - c0, mname, hname, n))
    times.sort(reverse=True)
    secs = [t[0] for t in times]
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"{len(times)} answers ({len(presets.list_models())} models x {len(cases)} machines: each preset at "
          f"{args.devices or f'its node (at most {args.max_devices})'} devices"
          + "".join(f", {h} at {n}" for h, n in extra) + f"): median {statistics.median(secs) * 1e3:.0f} ms, "
          f"max {secs[0] * 1e3:.0f} ms, over 1 s: {sum(s > 1 for s in secs)} (load average {load})")
    for t, c, m, h, n in times[:5]:
        print(f"  {t * 1e3:7.0f} ms wall {c * 1e3:7.0f} ms cpu  {m} on {h} ({n} devices)")
    for m, h, n, why in failed:
        print(f"  exit-2 pair: {m} on {h} ({n} devices): {why}")
    _, _, m, h, n = times[0]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, str(ROOT / "scripts" / "plan.py"), "--model", m, "--hardware", h,
                    "--devices", str(n)], capture_output=True, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    print(f"whole command (interpreter start, imports, preset files, every line of the answer; slowest pair, "
          f"{n} devices): {(time.perf_counter() - t0) * 1e3:.0f} ms wall, {cpu * 1e3:.0f} ms cpu")


if __name__ == "__main__":
    main()
