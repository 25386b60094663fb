#!/usr/bin/env python3
"""Synthetic DiT workload for the fewstep runner tests: prints per-rank denoise times, no sleeping.

DiT time of one request = (fixed_s + iterations * per_step_s) * (1 + u) * (1 + skew * rank / ranks),
where u is seeded uniform noise in [-noise, +noise] drawn per request and iterations = steps -
iters_short. Modes: ``once`` (one process: warm-up requests, then one measured request), ``serve``
(HTTP server, one request per GET /gen?steps=N) and ``request`` (the client). Decoy lines (VAE
decode, text encoding) check that the regex is specific.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
import urllib.request
import zlib
from http.server import BaseHTTPRequestHandler, HTTPServer
from urllib.parse import parse_qs, urlparse


def request_lines(args: argparse.Namespace, steps: int, index: int, cold: bool) -> list[str]:
    """The log lines one request prints (rank order shuffled, as real ranks interleave)."""
    seed = zlib.crc32(f"{args.seed}|{steps}|{index}".encode())
    rng = random.Random(seed)
    u = rng.uniform(-args.noise, args.noise)
    iters = steps - args.iters_short
    base = (args.fixed_s + iters * args.per_step_s) * (1.0 + u)
    if cold:
        base *= args.cold_factor
    share = args.share + args.share_per_step * steps
    lines = [f"sampling params: steps={steps}", "text encoding took 0.250000s",
             f"denoise iterations: {steps - args.iters_short}", f"sp_size={args.sp_size}"]
    ranks = list(range(args.ranks))
    rng.shuffle(ranks)
    for r in ranks:
        t = base * (1.0 + args.skew * r / max(args.ranks, 1))
        lines.append(f"[rank{r}] DiT denoise took {t:.6f}s")
        if args.share or args.share_per_step:
            lines.append(f"[rank{r}] exposed comm share {share:.5f}")
    lines.append(f"VAE decode took {rng.uniform(0.5, 1.5):.6f}s")
    return lines


def once(args: argparse.Namespace) -> int:
    if args.pid_file:
        with open(args.pid_file, "w") as fh:
            fh.write(str(os.getpid()))
    if args.hang_if_exists and os.path.exists(args.hang_if_exists):
        print("hanging", flush=True)
        time.sleep(args.hang_s)
    print("loading weights ... done", flush=True)
    for k in range(args.warmup + 1):
        for line in request_lines(args, args.steps, k, cold=k < args.warmup):
            print(line)
    sys.stdout.flush()
    return args.exit_code


def serve(args: argparse.Namespace) -> int:
    count = {"n": 0}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            query = parse_qs(urlparse(self.path).query)
            steps = int(query.get("steps", ["1"])[0])
            cold = count["n"] < args.cold_requests
            for line in request_lines(args, steps, count["n"], cold):
                print(line, flush=True)
            count["n"] += 1
            body = b"ok\n"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, fmt: str, *a: object) -> None:
            print("access: " + fmt % a, flush=True)

    server = HTTPServer(("127.0.0.1", args.port), Handler)
    print(f"server ready on port {args.port}", flush=True)
    server.serve_forever()
    return 0


def client(args: argparse.Namespace) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{args.port}/gen?steps={args.steps}", timeout=30) as r:
        print(r.status, r.read().decode().strip())
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("mode", choices=("once", "serve", "request"))
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--per-step-s", type=float, default=0.1)
    p.add_argument("--fixed-s", type=float, default=0.0, help="DiT-internal fixed cost (may be < 0)")
    p.add_argument("--noise", type=float, default=0.002, help="relative noise amplitude")
    p.add_argument("--skew", type=float, default=0.01, help="slowest-rank excess, relative")
    p.add_argument("--seed", default="0", help="any text; mixed with steps and request index")
    p.add_argument("--warmup", type=int, default=0, help="once: warm-up requests printed first")
    p.add_argument("--cold-factor", type=float, default=1.3, help="time factor of cold requests")
    p.add_argument("--cold-requests", type=int, default=1, help="serve: first N requests are cold")
    p.add_argument("--share", type=float, default=0.0, help="exposed comm share (constant part)")
    p.add_argument("--share-per-step", type=float, default=0.0, help="share added per step")
    p.add_argument("--hang-if-exists", help="once: sleep --hang-s when this file exists")
    p.add_argument("--hang-s", type=float, default=60.0)
    p.add_argument("--pid-file", help="once: write the process id here (lets tests check the kill)")
    p.add_argument("--exit-code", type=int, default=0)
    p.add_argument("--iters-short", type=int, default=0, help="run steps - K denoise iterations")
    p.add_argument("--sp-size", type=int, default=1, help="printed as sp_size=N (a contract line)")
    p.add_argument("--port", type=int, default=0)
    args = p.parse_args()
    return {"once": once, "serve": serve, "request": client}[args.mode](args)


if __name__ == "__main__":
    sys.exit(main())
