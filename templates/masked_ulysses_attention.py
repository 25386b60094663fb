#!/usr/bin/env python3
"""Copyable reference: Ulysses attention with head-chunked all-to-all masking (PyTorch, any backend).

Self-contained on purpose: copy this one file into your framework. It needs only torch. The same
code runs on CPU with gloo (async work handles), on CUDA with NCCL and on Ascend with HCCL
(torch_npu), where collectives go on a side stream and each chunk waits only for its own events.

Rules it follows (references/comm-masking.md, "Implementation recipe"):
1. one up-front permutation puts the chunk index outermost, so every chunk is a contiguous slice;
2. only collectives are issued on the side stream; all reshapes and copies stay on the compute stream;
3. per-chunk events / work handles, never a whole-stream wait;
4. one communicator (the Ulysses group) for every chunk;
5. chunks = largest divisor of the local head count not above the request;
6. outputs written into a separate tensor, chunk by chunk;
7. hit and fallback counters (MaskStats): report the hit count before any speed-up;
8. the issue order is the schedule: "forward-first" (every forward, then the reverses) exposes the
   least in the two-stream model; "pipelined" (forward g+1 before reverse g) is offered for
   frameworks that run per-chunk work after the reverse -- simulate both with
   `python scripts/mask_bound.py simulate ... --order all` before choosing.

Demo and self-check (prints bitwise equality and all-to-all counts):
    torchrun --nproc_per_node 2 templates/masked_ulysses_attention.py --chunks 4
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    import torch

ORDERS = ("forward-first", "pipelined")


@dataclass
class MaskStats:
    """Hit and fallback counters: report the hit count before any speed-up (a silent fallback looks
    exactly like 'masking does nothing')."""

    hits: int = 0
    fallbacks: int = 0
    fallback_reasons: dict[str, int] = field(default_factory=dict)
    all_to_all: int = 0
    chunks_used: int = 0

    def fell_back(self, reason: str) -> None:
        self.fallbacks += 1
        self.fallback_reasons[reason] = self.fallback_reasons.get(reason, 0) + 1


def default_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Scaled dot-product attention on (batch, heads, sequence, head dim)."""
    import torch.nn.functional as F

    return F.scaled_dot_product_attention(q, k, v)


def reference_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                        attn_fn: Callable | None = None) -> torch.Tensor:
    """Single-process attention over the full sequence, same layout (batch, sequence, heads, dim)."""
    attn = attn_fn or default_attention
    out = attn(q.permute(0, 2, 1, 3), k.permute(0, 2, 1, 3), v.permute(0, 2, 1, 3))
    return out.permute(0, 2, 1, 3).contiguous()


def chunk_count(requested: int, heads_local: int) -> int:
    """Largest divisor of the local head count not above the request."""
    return max(d for d in range(1, max(1, min(requested, heads_local)) + 1) if heads_local % d == 0)


class _Streams:
    """A side stream and per-chunk events where the device has streams; no-ops on CPU."""

    def __init__(self, device: torch.device):
        import torch

        mod = getattr(torch, device.type, None) if device.type != "cpu" else None
        self.mod = mod if mod is not None and hasattr(mod, "Stream") and hasattr(mod, "Event") else None
        if self.mod is not None:
            self.main = self.mod.current_stream(device)
            self.side = self.mod.Stream(device=device)

    def on_side(self):
        """Context in which collectives are issued."""
        return self.mod.stream(self.side) if self.mod is not None else contextlib.nullcontext()

    def ready(self, *tensors: torch.Tensor) -> None:
        """Make the side stream wait for work enqueued so far on the main stream (one event), and keep
        the tensors alive for the side stream."""
        if self.mod is None:
            return
        event = self.mod.Event()
        event.record(self.main)
        self.side.wait_event(event)
        for t in tensors:
            t.record_stream(self.side)


def _world(group: Any) -> tuple[int, int]:
    import torch.distributed as dist

    return dist.get_world_size(group), dist.get_rank(group)


def _all_to_all(out: torch.Tensor, inp: torch.Tensor, group: Any, stats: MaskStats | None):
    import torch.distributed as dist

    if stats is not None:
        stats.all_to_all += 1
    return dist.all_to_all_single(out, inp, group=group, async_op=True)


def _check(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, world: int) -> None:
    if q.dim() != 4 or q.shape != k.shape or q.shape != v.shape:
        raise ValueError(f"q, k, v must share one (batch, seq, heads, dim) shape; got "
                         f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    if q.shape[2] % world:
        raise ValueError(f"{q.shape[2]} heads do not split over {world} ranks")


def ulysses_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, group: Any = None,
                      attn_fn: Callable | None = None, stats: MaskStats | None = None) -> torch.Tensor:
    """Plain Ulysses attention: one all-to-all for q, k, v, attention, one all-to-all back."""
    import torch

    world, _ = _world(group)
    _check(q, k, v, world)
    attn = attn_fn or default_attention
    B, S_l, H, D = q.shape
    Hl = H // world
    x = torch.stack([q, k, v]).view(3, B, S_l, world, Hl, D).permute(3, 0, 2, 1, 4, 5).contiguous()
    y = torch.empty_like(x)
    _all_to_all(y, x, group, stats).wait()
    # y[p] = rank p's sequence block of my heads: (P, 3, S_l, B, Hl, D) -> (3, B, Hl, S, D)
    y = y.permute(1, 3, 4, 0, 2, 5).reshape(3, B, Hl, world * S_l, D)
    o = attn(y[0], y[1], y[2])  # (B, Hl, S, D)
    send = o.reshape(B, Hl, world, S_l, D).permute(2, 3, 0, 1, 4).contiguous()  # (P, S_l, B, Hl, D)
    recv = torch.empty_like(send)
    _all_to_all(recv, send, group, stats).wait()
    return recv.permute(2, 1, 0, 3, 4).reshape(B, S_l, H, D)


def masked_ulysses_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, chunks: int,
                             group: Any = None, attn_fn: Callable | None = None,
                             order: str = "forward-first", stats: MaskStats | None = None) -> torch.Tensor:
    """Ulysses attention with the all-to-alls split over `chunks` head chunks and hidden behind attention.

    Same result, bit for bit, as :func:`ulysses_attention` (the all-to-all is a pure permutation and
    attention is independent per head). Falls back to the plain path, counting why, when fewer than
    two chunks fit. order: "forward-first" (every forward chunk, then the reverses) or "pipelined"
    (forward g+1 issued before reverse g); see references/comm-masking.md for which exposes less.
    """
    import torch

    if order not in ORDERS:
        raise ValueError(f"order must be one of {ORDERS}, got {order!r}")
    world, _ = _world(group)
    _check(q, k, v, world)
    B, S_l, H, D = q.shape
    Hl = H // world
    n = chunk_count(chunks, Hl)
    if world <= 1 or n <= 1:
        if stats is not None:
            stats.fell_back("world size 1" if world <= 1 else f"no divisor of {Hl} local heads in 2..{chunks}")
        return ulysses_attention(q, k, v, group, attn_fn, stats)
    if stats is not None:
        stats.hits += 1
        stats.chunks_used = n
    attn = attn_fn or default_attention
    w = Hl // n
    streams = _Streams(q.device)

    # one up-front permutation, chunk index outermost: x[g] is the contiguous (P, 3, S_l, B, w, D) slice
    x = (torch.stack([q, k, v]).view(3, B, S_l, world, n, w, D)
         .permute(4, 3, 0, 2, 1, 5, 6).contiguous())
    y = torch.empty_like(x)
    send = torch.empty((n, world, S_l, B, w, D), dtype=q.dtype, device=q.device)
    recv = torch.empty_like(send)
    out = torch.empty((B, S_l, world, n, w, D), dtype=q.dtype, device=q.device)
    streams.ready(x, y, send, recv)

    fwd: list[Any] = [None] * n
    rev: list[Any] = [None] * n

    def issue_forward(g: int) -> None:
        with streams.on_side():
            fwd[g] = _all_to_all(y[g], x[g], group, stats)

    def attend_and_issue_reverse(g: int) -> None:
        fwd[g].wait()  # this chunk only: a stream wait on devices, a host wait on CPU
        yg = y[g].permute(1, 3, 4, 0, 2, 5).reshape(3, B, w, world * S_l, D)
        o = attn(yg[0], yg[1], yg[2])  # (B, w, S, D)
        send[g].copy_(o.reshape(B, w, world, S_l, D).permute(2, 3, 0, 1, 4))
        streams.ready()  # the reverse of chunk g waits for this chunk's transform, nothing later
        with streams.on_side():
            rev[g] = _all_to_all(recv[g], send[g], group, stats)

    if order == "forward-first":
        for g in range(n):
            issue_forward(g)
        for g in range(n):
            attend_and_issue_reverse(g)
    else:
        issue_forward(0)
        for g in range(n):
            if g + 1 < n:
                issue_forward(g + 1)
            attend_and_issue_reverse(g)
    for g in range(n):
        rev[g].wait()
        out[:, :, :, g].copy_(recv[g].permute(2, 1, 0, 3, 4))  # (B, S_l, P, w, D)
    return out.view(B, S_l, H, D)


# ----------------------------------------------------------------------------------------------
# Demo / self-check under torchrun: bitwise equality with the plain path and all-to-all counts.
# ----------------------------------------------------------------------------------------------

def _demo() -> int:
    import argparse
    import os
    import time

    import torch
    import torch.distributed as dist

    ap = argparse.ArgumentParser(description="masked Ulysses self-check (run under torchrun)")
    ap.add_argument("--chunks", type=int, default=4)
    ap.add_argument("--order", choices=ORDERS, default="forward-first")
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--seq-local", type=int, default=1024)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--dtype", choices=("float64", "float32", "bfloat16", "float16"), default="float32")
    ap.add_argument("--iters", type=int, default=5)
    args = ap.parse_args()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if torch.cuda.is_available():
        backend, device = "nccl", torch.device("cuda", local)
        torch.cuda.set_device(device)
    else:
        try:
            import torch_npu  # noqa: F401

            backend, device = "hccl", torch.device("npu", local)
            torch.npu.set_device(device)
        except ImportError:
            backend, device = "gloo", torch.device("cpu")
    dist.init_process_group(backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    dtype = getattr(torch, args.dtype)
    gen = torch.Generator().manual_seed(0)
    shape = (1, args.seq_local, args.heads, args.head_dim)
    q, k, v = (torch.randn(shape, generator=gen).to(dtype).to(device) for _ in range(3))

    def sync() -> None:
        if device.type != "cpu":
            getattr(torch, device.type).synchronize(device)

    def timed(fn):
        fn()
        sync()
        t0 = time.perf_counter()
        for _ in range(args.iters):
            out = fn()
        sync()
        return out, (time.perf_counter() - t0) / args.iters * 1e3

    plain_stats, masked_stats = MaskStats(), MaskStats()
    plain, t_plain = timed(lambda: ulysses_attention(q, k, v, stats=plain_stats))
    masked, t_masked = timed(lambda: masked_ulysses_attention(q, k, v, args.chunks, order=args.order,
                                                              stats=masked_stats))
    same = torch.equal(plain, masked)
    per_call = args.iters + 1
    if rank == 0:
        print(f"backend {backend}, world {world}, {args.heads} heads, chunks used {masked_stats.chunks_used}, "
              f"hits {masked_stats.hits}, fallbacks {masked_stats.fallbacks} {masked_stats.fallback_reasons}")
        print(f"all-to-alls per call: plain {plain_stats.all_to_all // per_call}, "
              f"masked {masked_stats.all_to_all // per_call}")
        print(f"bitwise equal: {same}; time per call: plain {t_plain:.3f} ms, masked {t_masked:.3f} ms")
    dist.destroy_process_group()
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(_demo())
