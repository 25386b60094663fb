"""Memory per rank: DiT weights by sharding, live activations, and KV buffers of stale-KV / gather forms."""

from __future__ import annotations

from ditpar.plan.cost.plans import Plan
from ditpar.plan.cost.shape import Shape
from ditpar.plan.cost.work import BYTES_PER_ELEMENT, heads_per_rank, kv_heads_after_split

GB = 1e9


def memory_per_rank(model, shape: Shape, plan: Plan) -> tuple[float, dict[str, float]]:
    """(total GB, parts) for one rank. Weights replicate under SP/CFG/DP and shard under TP and PipeFusion."""
    b = BYTES_PER_ELEMENT
    batch = shape.batch / plan.cfg if shape.cfg else 1.0
    experts = int(getattr(model, 'experts', 1) or 1)   # every MoE expert stays resident (one runs per step)
    weights = model.params_b * experts * 1e9 * b / (plan.tp * plan.pipefusion)
    n_attn = shape.tokens + shape.text_joint
    n = n_attn / plan.sp
    d, f = model.hidden, model.ffn
    dkv_rank = kv_heads_after_split(model.kv_heads, plan.tp, plan.ulysses) * model.head_dim  # whole heads
    dkv_tp = heads_per_rank(model.kv_heads, plan.tp) * model.head_dim
    # live activations of one block: input/residual, Q, K, V, attention out, MLP hidden (one chunk each)
    act = n * batch * b * (5 * d + f / plan.tp)
    kv = 0.0
    if plan.pipefusion > 1:   # stale K/V of every layer on this stage, full sequence (replicated across SP)
        layers = sum(int(v) for v in model.blocks.values()) / plan.pipefusion
        kv = 2 * n_attn * dkv_tp * b * batch * layers
    elif plan.kv_allgather > 1:  # the whole K/V of one layer after the gather
        kv = 2 * n_attn * dkv_rank * b * batch
    elif plan.ring > 1:          # two K/V blocks in flight
        kv = 2 * 2 * n_attn / plan.ring * dkv_rank * b * batch
    parts = {"weights_GB": weights / GB, "activations_GB": act / GB, "kv_buffers_GB": kv / GB}
    return sum(parts.values()), parts
