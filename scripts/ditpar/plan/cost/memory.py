"""Memory per rank: DiT weights by sharding, live activations, and KV buffers of stale-KV / gather forms."""

from __future__ import annotations

from ditpar.plan.cost.plans import Plan
from ditpar.plan.cost.shape import Shape
from ditpar.plan.cost.work import BYTES_PER_ELEMENT, heads_per_rank, kv_heads_after_split

GB = 1e9


# Communication buffers per communicator (one per plan dimension with degree > 1):
# HCCL: HCCL_BUFFSIZE defaults to 200 MB and a communicator holds an input and an output buffer
# (hiascend.com CANN docs, environment variable HCCL_BUFFSIZE); NCCL: NCCL_BUFFSIZE 4 MiB per channel
# and direction, with up to 32 channels on NVLink -> ~0.25 GB (docs.nvidia.com/deeplearning/nccl,
# env NCCL_BUFFSIZE; the channel count is an estimate).
COMM_BUFFER_GB = {"ascend": 2 * 0.2, "nvidia": 0.25}
VAE_DECODE_CHANNELS = 128   # widest full-resolution decoder stage (SD/FLUX/Wan VAEs: 128 channels)
VAE_BUFFERS = 3             # input, output and one intermediate of a conv at full resolution
VAE_TILE_PX = 512 * 512     # tile area of tiled decoding (diffusers enable_tiling: 512 px tiles)


def vae_decode_GB(model, shape: Shape, tiled: bool) -> float:
    """Peak of the VAE decode (estimate): the full-resolution 128-channel stage of the frames decoded at
    once (a causal video VAE decodes one latent frame = vae_stride[0] frames at a time), bf16."""
    frames = 1 if shape.frames <= 1 else max(1, int(model.vae_stride[0]))
    area = shape.width * shape.height
    if tiled:
        area = min(area, VAE_TILE_PX)
    return frames * area * VAE_DECODE_CHANNELS * BYTES_PER_ELEMENT * VAE_BUFFERS / GB


def comm_buffers_GB(plan: Plan, vendor: str) -> float:
    """Collective library buffers of this rank: one communicator per dimension with degree > 1."""
    comms = sum(1 for d in ("tp", "ulysses", "ring", "kv_allgather", "pipefusion", "cfg") if plan.degree(d) > 1)
    return comms * COMM_BUFFER_GB.get(vendor, COMM_BUFFER_GB["nvidia"])


def memory_per_rank(model, shape: Shape, plan: Plan, hw=None, *, offload_text_encoder: bool = False,
                    vae_tiling: bool = False) -> tuple[float, dict[str, float]]:
    """(peak GB, parts) for one rank. Weights (all MoE experts) replicate under SP/CFG/DP and shard under
    TP and PipeFusion; the text encoder stays resident unless offloaded; communication buffers stay; the
    VAE decode peak follows denoising, so the peak is weights + text encoder + buffers + the larger of
    (activations + K/V buffers) and the VAE decode."""
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
    if hw is None:
        return sum(parts.values()), parts
    te = 0.0 if offload_text_encoder else float(getattr(model, "text_encoder_params_b", 0.0) or 0.0) * 1e9 * b / GB
    parts["text_encoder_GB"] = te
    parts["comm_buffers_GB"] = comm_buffers_GB(plan, str(getattr(hw, "vendor", "nvidia")))
    parts["vae_decode_GB"] = vae_decode_GB(model, shape, vae_tiling)
    peak = parts["weights_GB"] + te + parts["comm_buffers_GB"] + max(
        parts["activations_GB"] + parts["kv_buffers_GB"], parts["vae_decode_GB"])
    return peak, parts
