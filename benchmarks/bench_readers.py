#!/usr/bin/env python3
"""Speed and memory of read + classify + step breakdown on a 1,000,000-row profile of each format.

Tiles real fixture rows (../shared/fixtures; the shipped tests/data set when those are absent) into
a 1,000,000-row kernel_details.csv and a 1,000,000-event Kineto trace in a temporary folder, then
times load_profiles + step_breakdown in a fresh process pinned to one core and reports its peak
resident memory. Targets: >= 250,000 rows/s, < 1.5 GB peak.

    python benchmarks/bench_readers.py [--rows 1000000] [--keep DIR]
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from decimal import Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "fixtures"
ASCEND_SRC = [SHARED / "ascend" / "msinsight-text-level1" / "rank0_ascend_pt",
              ROOT / "tests" / "data" / "ascend_cann83" / "node0_23101_20251127201437501_ascend_pt"]
KINETO_SRC = [SHARED / "kineto" / "hta-nccl_data.json.gz"]


def tile_kernel_details(src: Path, dst: Path, rows: int) -> None:
    """Copy the rank folder's kernel_details.csv rows again and again, shifted in time."""
    with open(src / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv", newline="", encoding="utf-8") as fh:
        reader = csv.reader(fh)
        header = next(reader)
        body = list(reader)
    i_start, i_dur, i_step = header.index("Start Time(us)"), header.index("Duration(us)"), header.index("Step Id")
    starts = [Decimal(r[i_start].strip()) for r in body]
    ends = [s + Decimal(r[i_dur].strip()) for s, r in zip(starts, body, strict=True)]
    period = max(ends) - min(starts) + Decimal("1000.000")
    out_dir = dst / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    out_dir.mkdir(parents=True)
    (dst / "rank0_ascend_pt" / "profiler_info_0.json").write_text('{"rank_id": 0}')
    with open(out_dir / "kernel_details.csv", "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(header)
        written, tile = 0, 0
        while written < rows:
            shift = period * tile
            for r, s in zip(body, starts, strict=True):
                if written == rows:
                    break
                row = list(r)
                row[i_start] = f"{s + shift:.3f}\t"
                row[i_step] = str(1 + tile // 100)
                writer.writerow(row)
                written += 1
            tile += 1


_NUM = re.compile(r'"(ts|dur)": "(-?\d+(?:\.\d+)?)"')


def tile_kineto(src: Path, dst: Path, events: int) -> None:
    """Repeat the trace's events, shifted by its span; step numbers and correlation ids stay unique."""
    doc = json.loads(gzip.decompress(src.read_bytes()), parse_float=str)
    evs = doc.pop("traceEvents")
    stamps = [Decimal(str(e["ts"])) for e in evs if "ts" in e]
    span = max(stamps) - min(stamps) + Decimal(1000)
    steps = [int(m.group(1)) for e in evs if (m := re.match(r"ProfilerStep#(\d+)$", str(e.get("name", ""))))]
    n_steps = max(steps) - min(steps) + 1 if steps else 0
    path = dst / "rank0.json"
    with open(path, "w", encoding="utf-8") as fh:
        fh.write('{"schemaVersion": 1, "distributedInfo": ' + json.dumps(doc.get("distributedInfo", {}))
                 + ', "traceEvents": [\n')
        written, tile = 0, 0
        while written < events:
            for e in evs:
                if written == events:
                    break
                e2 = dict(e)
                if "ts" in e2:
                    e2["ts"] = str(Decimal(str(e2["ts"])) + span * tile)
                if "dur" in e2:
                    e2["dur"] = str(e2["dur"])
                name = str(e2.get("name", ""))
                if name.startswith("ProfilerStep#"):
                    e2["name"] = f"ProfilerStep#{int(name.split('#')[1]) + n_steps * tile}"
                if isinstance(e2.get("args"), dict) and "correlation" in e2["args"]:
                    e2["args"] = {**e2["args"], "correlation": e2["args"]["correlation"] + 10_000_000 * tile}
                fh.write(("" if written == 0 else ",\n") + _NUM.sub(r'"\1": \2', json.dumps(e2)))
                written += 1
            tile += 1
        base = doc.get("baseTimeNanoseconds")
        fh.write("\n]" + (f', "baseTimeNanoseconds": {base}' if base is not None else "") + "}\n")


CHILD = r"""
import os, resource, sys, time
sys.path.insert(0, sys.argv[1])
try:
    os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
except (AttributeError, OSError):
    pass
from ditpar.readers import load_profiles
from ditpar.analysis.breakdown import step_breakdown
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t0 = time.perf_counter()
ps = load_profiles([sys.argv[2]])
t1 = time.perf_counter()
rows = step_breakdown(ps).rows
t2 = time.perf_counter()
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(len(ps.events), len(rows), t1 - t0, t2 - t1, base, peak, sum(ps.unclassified.values()))
"""


def measure(path: Path, label: str, units: int) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", CHILD, str(ROOT / "scripts"), str(path)],
                         capture_output=True, text=True, env=env, check=True).stdout.split()
    n_events, n_rows, t_read, t_break, base_kb, peak_kb, unplaced = out
    total = float(t_read) + float(t_break)
    return {"input": label, "units": units, "events": int(n_events), "steps": int(n_rows),
            "read_s": float(t_read), "breakdown_s": float(t_break), "rows_per_s": units / total,
            "peak_MB": int(peak_kb) / 1024, "baseline_MB": int(base_kb) / 1024, "unclassified": int(unplaced)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--keep", metavar="DIR", help="write the tiled inputs here instead of a temp folder")
    args = parser.parse_args()
    ascend_src = next((p for p in ASCEND_SRC if p.is_dir()), None)
    kineto_src = next((p for p in KINETO_SRC if p.is_file()), None)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.keep or tmp)
        results = []
        if ascend_src is not None:
            t = time.perf_counter()
            tile_kernel_details(ascend_src, work / "ascend", args.rows)
            print(f"# built {args.rows} kernel_details rows from {ascend_src} in {time.perf_counter() - t:.1f} s",
                  file=sys.stderr)
            results.append(measure(work / "ascend", "kernel_details.csv rows", args.rows))
        if kineto_src is not None:
            (work / "kineto").mkdir(parents=True, exist_ok=True)
            t = time.perf_counter()
            tile_kineto(kineto_src, work / "kineto", args.rows)
            print(f"# built {args.rows} trace events from {kineto_src} in {time.perf_counter() - t:.1f} s",
                  file=sys.stderr)
            results.append(measure(work / "kineto" / "rank0.json", "Kineto trace events", args.rows))
        else:
            print("# Kineto fixture absent (../shared/fixtures/kineto); Kineto part skipped", file=sys.stderr)
    cols = ("input", "units", "events", "steps", "read_s", "breakdown_s", "rows_per_s", "peak_MB", "baseline_MB")
    print("  ".join(f"{c:>14}" for c in cols))
    for r in results:
        print("  ".join(f"{r[c]:>14.2f}" if isinstance(r[c], float) else f"{r[c]!s:>14}" for c in cols))
    print("targets: rows_per_s >= 250000 on one core; peak_MB < 1536 (peak = max resident set of the process)")


if __name__ == "__main__":
    main()
