"""Masked Ulysses attention on CPU with gloo in 2 and 4 processes: bitwise equal to the plain path and
to single-process attention over the full sequence, n times as many all-to-alls, counted fallbacks.

Run as a script with --worker, this file is also the per-rank worker the tests launch.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
SCRIPTS = HERE.parent / "scripts"
TEMPLATES = HERE.parent / "templates"
TIMEOUT_S = 120


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch(world: int, out: Path, module: str) -> list[dict]:
    port = _free_port()
    procs = []
    for rank in range(world):
        env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": str(rank),
               "WORLD_SIZE": str(world), "OMP_NUM_THREADS": "1", "PYTHONPATH": str(SCRIPTS)}
        procs.append(subprocess.Popen([sys.executable, __file__, "--worker", str(out), module], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    logs = []
    try:
        for p in procs:
            logs.append(p.communicate(timeout=TIMEOUT_S)[0])
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
        pytest.fail(f"{world}-process gloo run hung for more than {TIMEOUT_S} s")
    for rank, p in enumerate(procs):
        assert p.returncode == 0, f"rank {rank} exited {p.returncode}:\n{logs[rank][-3000:]}"
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(world)]


def _worker(out_dir: str, module: str) -> None:
    import datetime

    import torch
    import torch.distributed as dist

    sys.path.insert(0, str(TEMPLATES))
    import masked_ulysses_attention as template

    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    calls = {"n": 0}
    real = dist.all_to_all_single

    def counting(*args, **kwargs):  # independent count of what reaches torch.distributed
        calls["n"] += 1
        return real(*args, **kwargs)

    dist.all_to_all_single = counting
    B, S_l, D = 2, 5, 8
    H = 16 if world == 2 else 16  # 8 local heads on 2 ranks, 4 on 4 ranks
    res: dict = {"rank": rank, "world": world, "cases": []}
    mods = {"template": template}
    for name, dtype in [(m, d) for m in module.split(",") for d in (torch.float64, torch.float32)]:
        mod = mods[name]
        g = torch.Generator().manual_seed(1234)
        full = [torch.randn(B, S_l * world, H, D, generator=g, dtype=dtype) for _ in range(3)]
        mine = [t[:, rank * S_l:(rank + 1) * S_l].contiguous() for t in full]
        ref = mod.reference_attention(*full)[:, rank * S_l:(rank + 1) * S_l]
        calls["n"] = 0
        plain = mod.ulysses_attention(*mine)
        plain_calls = calls["n"]
        for chunks in (1, 2, 3, 4, 8):
            for order in mod.ORDERS:
                stats = mod.MaskStats()
                calls["n"] = 0
                masked = mod.masked_ulysses_attention(*mine, chunks=chunks, order=order, stats=stats)
                res["cases"].append({
                    "module": name, "dtype": str(dtype), "chunks": chunks, "order": order, "calls": calls["n"],
                    "plain_calls": plain_calls, "stats_calls": stats.all_to_all, "hits": stats.hits,
                    "fallbacks": stats.fallbacks, "chunks_used": stats.chunks_used,
                    "masked_eq_plain": bool(torch.equal(masked, plain)),
                    "masked_eq_ref": bool(torch.equal(masked, ref)),
                    "plain_eq_ref": bool(torch.equal(plain, ref)),
                    "shape_ok": tuple(masked.shape) == (B, S_l, H, D),
                    "max_abs_vs_ref": float((masked - ref).abs().max()),
                })
    dist.destroy_process_group()
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps(res))


@pytest.mark.parametrize("world,modules", [(2, "template"), (4, "template")])
def test_masked_ulysses_bitwise_and_counts(world, modules, tmp_path):
    """The copyable template on 2 and 4 ranks: float64 and float32, chunks 1..8, both orders."""
    pytest.importorskip("torch")
    ranks = _launch(world, tmp_path, modules)
    assert {c["module"] for r in ranks for c in r["cases"]} == set(modules.split(","))
    heads_local = 16 // world
    for r in ranks:
        for case in r["cases"]:
            where = f"rank {r['rank']} {case}"
            assert case["shape_ok"], where
            assert case["plain_eq_ref"], where
            assert case["masked_eq_plain"], where
            assert case["masked_eq_ref"], where
            assert case["plain_calls"] == 2, where  # one q,k,v exchange and one output exchange
            # chunks used: largest divisor of the local heads not above the request
            expect_n = max(d for d in range(1, min(case["chunks"], heads_local) + 1) if heads_local % d == 0)
            if expect_n >= 2:
                assert case["chunks_used"] == expect_n and case["hits"] == 1 and case["fallbacks"] == 0, where
                assert case["calls"] == expect_n * case["plain_calls"], where
            else:
                assert case["hits"] == 0 and case["fallbacks"] == 1, where
                assert case["calls"] == case["plain_calls"], where
            assert case["stats_calls"] == case["calls"], where


def test_template_and_masking_library_import_no_torch_or_matplotlib():
    code = (f"import sys; sys.path.insert(0, {str(TEMPLATES)!r}); import masked_ulysses_attention, "
            "ditpar.masking.bound, ditpar.masking.simulator, ditpar.masking.measured, ditpar.masking.verify; "
            "print(sorted(m for m in ('torch', 'matplotlib') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(SCRIPTS)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


if __name__ == "__main__" and len(sys.argv) >= 4 and sys.argv[1] == "--worker":
    _worker(sys.argv[2], sys.argv[3])
