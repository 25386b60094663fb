"""Framework-neutral Ulysses attention for PyTorch: plain, and with head-chunked all-to-all masking.

Layout: q, k, v of each rank are (batch, local sequence, all heads, head dim); the rank's sequence
block is rank-major (rank p holds positions p*S_local .. (p+1)*S_local - 1). The forward all-to-all
swaps the sequence split for a head split, attention runs on full sequences, the reverse all-to-all
swaps back. q, k and v travel in one all-to-all per chunk (3/4 of the bytes), the output in another.

The masked path follows the recipe of references/comm-masking.md: heads split into n chunks, the
chunk index permuted outermost once up front so each chunk is one contiguous slice, collectives
only on a side stream where the device has streams (CUDA, NPU), per-chunk events or work handles
instead of whole-stream waits, one communicator, outputs written into a separate tensor per chunk.
On CPU with gloo the same code uses async work handles. torch is imported only when called.
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
