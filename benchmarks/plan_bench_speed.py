#!/usr/bin/env python3
"""How long plan_bench.py takes to measure a short list of 3 plans, on whatever devices this machine has.

On CUDA or Ascend it launches one rank per device with the model's real shapes (default FLUX.1-dev at its
default 1024x1024); on a CPU it launches --nproc gloo ranks on an in-house model of moderate width (a
real-shape block in fp32 takes tens of seconds per forward on a few cores). Prints the wall time of the
whole torchrun and plan_bench's own phases (build, reference, count+check, warm-up, timed).
Run: python benchmarks/plan_bench_speed.py [--nproc 2] [--model FLUX.1-dev] [--plans U8 "U4 R2" "U2 TP4"]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CPU_MODEL = """name = "Bench-CPU-Joint"
heads = 8
kv_heads = 8
head_dim = 64
layers = 24
hidden = 512
ffn = 2048
text_tokens = 128
text_attention = "joint"
cfg = false
tokens = 1024
"""


def devices() -> tuple[str, int]:
    """('cuda' | 'npu' | 'cpu', count) without importing torch into this process."""
    probe = ("import torch\ntry:\n import torch_npu\n n = torch.npu.device_count()\nexcept Exception:\n n = 0\n"
             "print('npu', n) if n else print('cuda', torch.cuda.device_count()) if torch.cuda.is_available() "
             "else print('cpu', 0)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True).stdout.split()
    return (out[0], int(out[1])) if len(out) == 2 else ("cpu", 0)


def default_plans(n: int) -> list[str]:
    if n >= 8:
        return [f"U{n}", f"U{n // 2} R2", f"U2 TP{n // 2}"]
    if n >= 4:
        return [f"U{n}", f"U{n // 2} R2", f"TP{n}"]
    return [f"U{n}", f"R{n}", f"TP{n}"] if n > 1 else ["single"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nproc", type=int, default=0, help="ranks (default: every device; 2 on a CPU)")
    ap.add_argument("--model", default=None, help="preset (default FLUX.1-dev on accelerators; a CPU model on CPU)")
    ap.add_argument("--resolution", default=None)
    ap.add_argument("--plans", nargs="+", default=None)
    args = ap.parse_args()
    kind, count = devices()
    n = args.nproc or (count if kind != "cpu" else 2)
    plans = args.plans or default_plans(n)
    with tempfile.TemporaryDirectory() as tmp:
        if args.model or kind != "cpu":
            model = ["--model", args.model or "FLUX.1-dev"]
        else:
            (Path(tmp) / "cpu.toml").write_text(CPU_MODEL)
            model = ["--model-file", str(Path(tmp) / "cpu.toml")]
        if args.resolution:
            model += ["--resolution", args.resolution]
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(n),
               str(ROOT / "scripts" / "plan_bench.py"), *model, "--plans", *plans, "--json"]
        env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
        if kind == "cpu" and os.path.exists("/sys/class/net/lo"):
            env.setdefault("GLOO_SOCKET_IFNAME", "lo")
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"plan_bench.py failed (exit {proc.returncode}): {proc.stderr.strip().splitlines()[-1:]}")
    doc = json.loads(proc.stdout)
    print(f"devices: {kind + (f' x {count}' if count else '')}; ranks {n}; backend {doc['backend']}; dtype {doc['dtype']}; "
          f"model {doc['model']} ({doc['shape_text']})")
    print(f"short list of {len(plans)} plans ({', '.join(plans)}) measured in {wall:.1f} s wall "
          "(torchrun start to exit: process start, groups, weights, check, warm-up, 3 repeats ABBA)")
    print("plan_bench phases on rank 0: " + ", ".join(f"{k} {v:.2f}" for k, v in doc["phases_s"].items()))
    for r in doc["plans"]:
        ms = r["block_ms"]
        print(f"  {r['name']:<10} block {ms if ms is None else round(ms, 3)} ms  dispersion "
              f"{r['dispersion_pct'] if r['dispersion_pct'] is None else round(r['dispersion_pct'], 1)} %  "
              f"{r['verdict']}")


if __name__ == "__main__":
    main()
