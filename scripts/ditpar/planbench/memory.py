"""What plan_bench will allocate, estimated from the block shapes before anything is built, and what the
device has: a request that cannot fit is refused with one line (estimate and limit) instead of failing
inside the allocator, or filling the host's memory, halfway through building the blocks."""

from __future__ import annotations

import os
from dataclasses import dataclass

from ditpar.errors import InputError
from ditpar.planbench.blocks import BlockShape, weight_shapes

FP32 = 4
HEADROOM = 0.9   # a run may use at most this share of the available memory (allocator slack, other processes)


def weight_elements(s: BlockShape) -> int:
    """Elements of one block's full weights as make_weights builds them (linears + the adaLN table)."""
    n = sum(i * o for i, o in weight_shapes(s).values())
    return n + (6 * s.hidden if s.kind in ("self", "cross") else 0)


def input_elements(s: BlockShape) -> int:
    """Elements of one forward's full inputs as make_inputs builds them (x, c, ctx, temb)."""
    b, d = s.batch, s.hidden
    n = b * s.tokens * d + b * s.text_joint * d
    if s.kind == "cross":
        n += b * s.text_cross * d
    return n + (b * 6 * d if s.kind in ("self", "cross") else b * d)


def output_elements(s: BlockShape) -> int:
    """Elements of one block's output (image rows, and text rows for joint and single blocks)."""
    return s.batch * (s.tokens + s.text_joint) * s.hidden


def activation_elements(s: BlockShape) -> int:
    """Peak elements alive during one one-device forward, the inputs left out: per row of the attention
    sequence (batch x (image + joint text tokens)) the residual stream and its modulated copies (5 d),
    Q, K, V (dq + 2 dkv), the MLP's up projection and activation (2 f; 4 f gated), a joint block's second
    stream (d), a single block's concatenated attention + MLP output (dq + f, one d less); cross blocks add the
    context's K, V and its projection. Fused (flash) attention is assumed: no sequence x sequence
    scores. Checked against torch's CPU allocator in tests/test_plan_bench.py (within 1x..1.5x)."""
    d, dq, dkv, f = s.hidden, s.heads * s.head_dim, s.kv_heads * s.head_dim, s.ffn
    per_row = 5 * d + dq + 2 * dkv + (4 if s.gated else 2) * f
    if s.kind == "joint":
        per_row += d
    if s.kind == "single":   # one stream: the residual needs no copy beside the concatenated sequence
        per_row += dq + f - d
    n = s.batch * (s.tokens + s.text_joint) * per_row
    if s.kind == "cross":
        n += s.batch * s.text_cross * (d + 2 * dkv)
    return n


@dataclass(frozen=True)
class Estimate:
    """Bytes one rank allocates: the full fp32 blocks built on the host, what the plans keep on the device."""

    host: int      # full fp32 weights and inputs of every block kind (on the CPU while the plans are built)
    device: int    # plan shards, one-device reference, its outputs and one forward's activations
    same_memory: bool   # the device is the CPU: host and device share one memory

    @property
    def total(self) -> int:
        return self.host + self.device


def estimate(kinds: dict, plans: list, dtype: str, device_type: str, check: bool) -> Estimate:
    """Bytes per rank for these block kinds and plans (see activation_elements for what is counted)."""
    esize = 2 if dtype == "bfloat16" else FP32
    cpu32 = device_type == "cpu" and esize == FP32    # .to(cpu, float32) keeps the full tensors: no copy
    host = sum((weight_elements(s) + input_elements(s)) * FP32 for s, _ in kinds.values())
    dev = 0
    tps = {p.tp for p in plans} | ({1} if check else set())
    for s, _ in kinds.values():
        for tp in tps:
            if not (cpu32 and tp == 1):
                dev += weight_elements(s) // tp * esize
        for p in plans:   # each plan's batch and sequence shard (a view, not a copy, when nothing is split)
            share = p.cfg * p.ulysses * p.ring * p.kv_allgather
            if not (cpu32 and share == 1):
                dev += -(-input_elements(s) // share) * esize
        if check:
            dev += output_elements(s) * esize + (0 if cpu32 else input_elements(s) * esize)
    dev += max((activation_elements(s) for s, _ in kinds.values()), default=0) * esize
    return Estimate(host, dev, device_type == "cpu")


def available_host_bytes() -> int | None:
    """MemAvailable of /proc/meminfo, else the free physical pages (os.sysconf); None when neither is known."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None


def free_device_bytes(device) -> int | None:
    """Free memory of a CUDA or NPU device (mem_get_info); None for the CPU or when it cannot be read."""
    import torch

    try:
        if device.type == "cuda":
            return int(torch.cuda.mem_get_info(device)[0])
        if device.type == "npu":
            return int(torch.npu.mem_get_info(device)[0])
    except Exception:   # an old runtime without mem_get_info: no device limit is checked
        return None
    return None


def local_ranks(world: int) -> int:
    """Ranks sharing this host's memory: torchrun's LOCAL_WORLD_SIZE, else the whole world."""
    text = os.environ.get("LOCAL_WORLD_SIZE", "")
    return int(text) if text.isascii() and text.isdigit() and 1 <= int(text) <= world else world


def gib(n: float) -> str:
    """Bytes as GiB, or TiB from 1024 GiB on."""
    return f"{n / 2**30:.3g} GiB" if n < 2**40 else f"{n / 2**40:,.0f} TiB"


def refuse_if_too_big(est: Estimate, host_limit: int | None, device_limit: int | None, ranks_here: int,
                      what: str, more_hint: str = "") -> None:
    """InputError with the estimate and the limit when the run cannot fit (host RAM, device memory)."""
    host_need = (est.total if est.same_memory else est.host) * ranks_here
    per = f" x {ranks_here} ranks on this host" if ranks_here > 1 else ""
    hint = "use a smaller --tokens, --resolution or model, or fewer plans per run" + more_hint
    if host_limit is not None and host_need > HEADROOM * host_limit:
        raise InputError(f"{what}: plan_bench would allocate about {gib(est.total if est.same_memory else est.host)} "
                         f"per rank{per} (weights, inputs and activations estimated from the block shapes) but "
                         f"this host has {gib(host_limit)} available (at most {HEADROOM:.0%} is used); {hint}")
    if not est.same_memory and device_limit is not None and est.device > HEADROOM * device_limit:
        raise InputError(f"{what}: plan_bench would allocate about {gib(est.device)} of device memory per rank "
                         f"(plan shards, reference and activations estimated from the block shapes) but the "
                         f"device has {gib(device_limit)} free (at most {HEADROOM:.0%} is used); {hint}")


# --- time: a CPU run whose forwards outlast --timeout would end in the watchdog, not in a result ----

def forward_flops(s: BlockShape) -> tuple[float, float]:
    """(linear, attention) multiply-adds x 2 of one one-device forward: every token row through its
    stream's linears; 4 x batch x query rows x K/V rows x dq for the attention (and a cross block's)."""
    b, dq = s.batch, s.heads * s.head_dim
    shapes = weight_shapes(s)
    per_row = sum(i * o for n, (i, o) in shapes.items() if n not in ("mod", "amod") and n[0] not in "ac")
    seq = s.tokens + s.text_joint
    # linear attention: the state (keys x values per head) and its product with the queries, linear in the sequence
    keys = s.head_dim + 1 if s.linear else seq
    linear, attention = 2.0 * b * seq * per_row, 4.0 * b * seq * keys * dq
    if s.kind == "cross":
        cq = sum(i * o for n, (i, o) in shapes.items() if n in ("cq", "co"))
        ckv = sum(i * o for n, (i, o) in shapes.items() if n in ("ck", "cv"))
        linear += 2.0 * b * (s.tokens * cq + s.text_cross * ckv)
        attention += 4.0 * b * s.tokens * s.text_cross * dq
    return linear, attention


def cpu_rates(head_dim: int) -> tuple[float, float]:
    """This CPU's fp32 (matrix-multiply, attention) FLOP/s, best of three small runs (a 256-wide product;
    1024-token attention of this head width): upper bounds on what the block forwards reach."""
    import time

    import torch
    import torch.nn.functional as F

    a, b = torch.randn(256, 256), torch.randn(256, 256)
    q = torch.randn(1, 2, 1024, head_dim)

    def best(fn) -> float:
        fn()
        top = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            fn()
            top = min(top, time.perf_counter() - t0)
        return max(top, 1e-9)

    return 2 * 256**3 / best(lambda: a @ b), 4 * 2 * 1024**2 * head_dim / best(
        lambda: F.scaled_dot_product_attention(q, q, q))


def refuse_if_too_slow(kinds: dict, calls: int, rates: tuple[float, float], timeout_s: float, what: str) -> None:
    """InputError when the forwards one rank runs between two progress checks (every block kind once,
    times the warm-up or calls per sample) would outlast --timeout at this CPU's measured rates."""
    n = max(1, calls)
    linear = sum(forward_flops(s)[0] for s, _ in kinds.values()) * n
    attention = sum(forward_flops(s)[1] for s, _ in kinds.values()) * n
    seconds = linear / rates[0] + attention / rates[1]
    if seconds > timeout_s:
        raise InputError(f"{what}: {n} forward(s) of every block kind run between progress checks: "
                         f"{(linear + attention) / 1e12:.3g} TFLOP, about {seconds:.3g} s at best on this CPU "
                         f"(measured {rates[0] / 1e9:.3g} GFLOP/s in GEMMs, {rates[1] / 1e9:.3g} in attention), "
                         f"past --timeout {timeout_s:g} s; use a smaller --tokens, --resolution or model, or a "
                         "larger --timeout")
