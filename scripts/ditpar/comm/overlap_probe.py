"""Test before you build masking: does a collective hide behind a matmul on this stack at all?

Masking pays only if the link and the compute units really run at once. This times the collective
alone (C), a square matmul sized to take about as long (M), and both issued together (the collective
asynchronously, the matmul on the compute stream, then the wait): ``hidden = C + M - both`` and
``hidden_frac = hidden / min(C, M)``. Below 0.5 the stack serialises most of it (a copy engine or
core the two share, a blocking backend) and masking code will not reach its ceiling: do not build it.
"""

from __future__ import annotations

import statistics
from typing import Any

BUILD_THRESHOLD = 0.5  # hidden share of the shorter of the two below which masking is not worth building
_MIN_DIM, _MAX_DIM = 32, 8192


def _matmul_time_us(dim: int, device: Any, dtype: Any, timer: Any, reps: int) -> tuple[Any, list[float]]:
    import torch

    a = torch.randn(dim, dim, device=device).to(dtype)
    b = torch.randn(dim, dim, device=device).to(dtype)
    times = []
    for _ in range(reps):
        h = timer.start()
        torch.matmul(a, b)
        times.append(timer.stop_us(h))
    return (a, b), times


def size_matmul(target_us: float, device: Any, dtype: Any, timer: Any) -> int:
    """A square dimension whose matmul takes about target_us here (time grows as dim**3)."""
    dim = 256
    for _ in range(4):
        _, t = _matmul_time_us(dim, device, dtype, timer, 3)
        took = max(statistics.median(t), 1e-3)
        dim = int(min(_MAX_DIM, max(_MIN_DIM, dim * (target_us / took) ** (1 / 3))))
    return dim


def measure(spec: Any, bufs: list, comms: list, timer: Any, target_us: float, iters: int,
            barrier: Any) -> tuple[list[float], list[float], int]:
    """(matmul alone, collective + matmul together) per iteration on this rank, and the matmul size."""
    import torch

    dim = size_matmul(target_us, comms[0].device, comms[0].dtype, timer)
    (a, b), _ = _matmul_time_us(dim, comms[0].device, comms[0].dtype, timer, 1)
    alone, both = [], []
    for _ in range(iters):
        barrier()
        h = timer.start()
        torch.matmul(a, b)
        alone.append(timer.stop_us(h))
        barrier()
        h = timer.start()
        pending = [(bf, spec.run(bf, c)) for bf, c in zip(bufs, comms, strict=True)]
        torch.matmul(a, b)
        for _bf, works in pending:
            for w in works:
                w.wait()
        both.append(timer.stop_us(h))
    return alone, both, dim


def summarise(comm_us: float, alone_us: list[float], both_us: list[float]) -> dict[str, float]:
    """Median matmul and together times, the hidden time and its share of the shorter one."""
    m, t = statistics.median(alone_us), statistics.median(both_us)
    hidden = comm_us + m - t
    shorter = min(comm_us, m)
    frac = min(1.0, max(0.0, hidden / shorter)) if shorter > 0 else float("nan")
    return {"matmul_us": m, "both_us": t, "hidden_us": hidden, "hidden_frac": frac}


def verdict(frac: float) -> str:
    """The build / do-not-build line for one measurement."""
    if frac != frac:
        return "no evidence"
    if frac >= BUILD_THRESHOLD:
        return f"overlaps ({frac:.2f} of the shorter hides): masking can pay"
    return f"mostly serialised ({frac:.2f} hides, below {BUILD_THRESHOLD}): do not build masking on this stack"
